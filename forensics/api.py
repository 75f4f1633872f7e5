"""The public library API: one function per stage. The CLI and the tests call these.

Each stage reads only the previous stage's output in the case folder (see forensics.case).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from forensics.case import locked_case
from forensics.config import CaseConfig, load_case_file

# Stage functions, re-exported so callers need one import (in data-flow order).
from forensics.ingest import IngestResult, ingest  # noqa: F401
from forensics.match import MatchParams, MatchResult, match  # noqa: F401
from forensics.queries import Query, load_queries, query_case  # noqa: F401
from forensics.report import ReportResult, VerifyResult, report, verify  # noqa: F401
from forensics.run import RunResult, run  # noqa: F401
from forensics.scan import ScanResult, config_for_case, query_defaults, scan  # noqa: F401

if TYPE_CHECKING:
    from forensics.lab.evaluate import Evaluation, evaluate  # noqa: F401
    from forensics.lab.simulate import SimulateResult, simulate  # noqa: F401
else:
    #: The lab's functions (practice incidents and their scoring), by where they live.
    _LAB = {"simulate": "forensics.lab.simulate", "SimulateResult": "forensics.lab.simulate",
            "evaluate": "forensics.lab.evaluate", "Evaluation": "forensics.lab.evaluate"}

    def __getattr__(name: str) -> Any:
        """The lab's functions, imported on first use.

        Importing them with the stages would import Faker (the optional lab extra) on every run;
        a missing Faker then fails only ``simulate``, with the install command.
        """
        if name in _LAB:
            import importlib

            return getattr(importlib.import_module(_LAB[name]), name)
        raise AttributeError(f"module 'forensics.api' has no attribute {name!r}")


# The stages that write a case folder hold its lock meanwhile: a second run on the same case
# stops with the holder's pid instead of mixing its tables in (forensics.case.folder_lock).
ingest = locked_case(ingest, create=True)
scan = locked_case(scan)
match = locked_case(match)


def make_config(config: str | Path | None = None, **overrides: Any) -> CaseConfig:
    """A case configuration from an optional case file, with CLI-style overrides applied.

    ``None`` overrides are ignored; others are recorded as coming from an ``option``.
    """
    cfg = load_case_file(config) if config is not None else CaseConfig()
    for key, value in overrides.items():
        if value is None:
            continue
        if key == "tokenizer":
            value = Path(value)
            cfg.tokenizer = value
            cfg.sources[key] = "option"
            continue
        cfg.set(key, value, "option")
    cfg.validate()
    return cfg
