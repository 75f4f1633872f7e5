"""The lab: what builds and scores practice incidents, never needed to investigate a real one.

* ``forensics.lab.simulate``: simulated incidents with their ground truth (``forensics simulate``);
* ``forensics.lab.evaluate``: a report scored against that truth (``forensics evaluate``);
* ``forensics.lab.cases``: small case folders written straight from row dicts (tests, benchmarks);
* ``forensics.lab.bench``: run a function in a child process and measure its time and memory.

The simulator needs the ``lab`` extra (Faker): ``pip install -e '.[lab]'``. The rest of the
toolkit never imports this package's simulator, so it runs without Faker.
"""

from __future__ import annotations

from forensics.errors import MissingExtraError

#: The command that installs the lab's dependencies, named in every error about a missing one.
LAB_INSTALL = "pip install -e '.[lab]'"


def lab_extra_missing(module: str, what: str) -> MissingExtraError:
    """The error for ``what`` (``"forensics simulate"``) failing to import ``module`` of the lab extra.

    Raised from the failed import so the user reads the command that installs it, not a traceback.
    """
    return MissingExtraError(
        f"{what} needs the Python package '{module}' (the lab extra), which is not installed",
        fix=f"install it with: {LAB_INSTALL}",
    )
