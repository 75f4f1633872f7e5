"""Ctrl-C during a run's match stage: the run prints its one line; the match stage's fork server and
workers print nothing of their own, whenever the signal reaches them.

A terminal sends SIGINT to the whole process group. Each test stops a helper process at the moment
that printed a traceback (held there by a marker file, not by timing) and sends it SIGINT or takes
its file away, as a run being interrupted does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="the match stage's workers need a fork server (POSIX)")

#: Starts the match stage's fork server with a module that, while the server imports it, writes a
#: marker and waits: the test script sends the server SIGINT right then, as Ctrl-C in a terminal would
#: while the server still imports the matcher (about a second).
FORK_SERVER = """
import os, signal, sys, time
from multiprocessing import context, forkserver
from pathlib import Path

importing, imported = Path(sys.argv[1]), Path(sys.argv[2])
real = context.ForkServerContext.set_forkserver_preload
context.ForkServerContext.set_forkserver_preload = lambda self, modules: real(self, [*modules, "slow_import"])

from forensics.match.pool import Helpers

helpers = Helpers(1)
deadline = time.monotonic() + 30
while not importing.exists() and time.monotonic() < deadline:
    time.sleep(0.01)
os.kill(forkserver._forkserver._forkserver_pid, signal.SIGINT)
deadline = time.monotonic() + 15
while not imported.exists() and time.monotonic() < deadline:  # never, when the signal stopped the import
    time.sleep(0.05)
helpers.close()
"""

SLOW_IMPORT = """
import sys, time
from pathlib import Path

Path({importing!r}).write_text("importing")
time.sleep(5)
Path({imported!r}).write_text("imported")
"""


def test_ctrl_c_while_the_fork_server_imports_prints_nothing(tmp_path: Path) -> None:
    """The fork server ignored SIGINT only once its imports were done: a Ctrl-C in the second before printed
    its KeyboardInterrupt traceback under the run's one line. It now starts with SIGINT held back."""
    importing, imported = tmp_path / "importing", tmp_path / "imported"
    (tmp_path / "slow_import.py").write_text(SLOW_IMPORT.format(importing=str(importing), imported=str(imported)))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", FORK_SERVER, str(importing), str(imported)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert importing.exists(), proc.stderr  # the signal was sent while the server imported
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert imported.exists()  # the server went on: the run, not the server, decides how to stop


#: Starts the match stage's workers from a scanner file that the run has already removed, as it does
#: when it stops (Ctrl-C, an error) while they still start.
PAYLOAD_GONE = """
import sys
from pathlib import Path
from forensics.match.pool import Helpers

helpers = Helpers(1, wait_for_workers=True)
helpers._start(Path(sys.argv[1]))  # what start() does once it has written the file
helpers.close()
print(helpers.pool is None, helpers.failed is not None)
"""


def test_a_worker_whose_scanner_file_is_gone_exits_quietly(tmp_path: Path) -> None:
    """Ctrl-C while the workers started: the run removed the scanner file, and a worker still starting printed
    "Exception in initializer" with a FileNotFoundError traceback. It now exits without a word."""
    proc = subprocess.run([sys.executable, "-c", PAYLOAD_GONE, str(tmp_path / "forensics-match-1-gone.pickle")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.split() == ["True", "True"]  # no workers: this process would do the work alone
