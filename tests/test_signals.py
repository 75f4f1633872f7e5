"""Signals: SIGINT/SIGTERM stop a run with 130/143 and a message, kill -9 leaves no worker behind,
and a run interrupted at any stage changes nothing: re-running gives the undisturbed run's bytes.

Runs are real ``forensics run`` processes on the shipped sample incident, interrupted when a
stage's output appears in the folder being built (no timing assumptions).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_logs"
NAME = "sim-small-seed7"  # the sample's case name

#: Runs `forensics` with the match stage's worker pool forced on (the sample is far below
#: forensics.match.tuning.Tuning.inline_bytes, the size from which a run starts workers) and holds the run
#: once the workers are up, writing a marker file, so the test can signal it right there.
HARNESS = """
import sys, time
from pathlib import Path
import forensics.match as m
import forensics.match.pool as pool
import forensics.match.tuning as tuning

marker = Path(sys.argv[1])
m.workers_to_start = lambda path, p, inline_bytes: 2
tuning.DEFAULT = tuning.Tuning(inline_bytes=0, wait_for_workers=True)
ordered = pool.ordered

def held(helpers, *args, **kwargs):
    if helpers.pool is not None and not marker.exists():
        marker.write_text("workers up")
        time.sleep(300)
    yield from ordered(helpers, *args, **kwargs)

pool.ordered = held
if __name__ == "__main__":  # workers import this file again (as __mp_main__)
    from forensics.cli import main
    main(sys.argv[2:])
"""


#: Runs `forensics` with its scan stage stuck in native code that never returns to Python (the
#: signal goes to another thread), as a long DuckDB query or Parquet read might be.
STUCK_HARNESS = """
import ctypes, signal, sys
from pathlib import Path
import forensics.cli, forensics.interrupts, forensics.run

forensics.interrupts.GRACE_SECONDS = 1.0

def stuck(*args, **kwargs):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    Path(sys.argv[1]).write_text("stuck")
    ctypes.CDLL(None).sleep(300)

forensics.run.scan_stage = stuck  # the stage `forensics run` calls
forensics.cli.main(sys.argv[2:])
"""


def _start(out: Path, *prefix: str) -> subprocess.Popen[str]:
    args = [*prefix] if prefix else ["-m", "forensics"]
    return subprocess.Popen([sys.executable, *args, "run", str(SAMPLE), "--out", str(out), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _wait_for(root: Path, pattern: str, proc: subprocess.Popen[str]) -> None:
    while not list(root.glob(pattern)):
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {pattern} appeared: {proc.communicate()}")
        time.sleep(0.002)


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _check_signalled(code: int, err: str, sig: signal.Signals) -> None:
    if sig == signal.SIGKILL:
        assert code == -signal.SIGKILL
    else:
        assert code == 128 + sig, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"interrupted by {sig.name}"), err


def test_an_interrupted_run_changes_nothing_and_a_rerun_gives_the_same_bytes(tmp_path: Path) -> None:
    code, err = _finish(_start(tmp_path / "undisturbed"))
    assert code == 1, err
    expected = _files(tmp_path / "undisturbed" / NAME)

    out = tmp_path / "out"
    # Interrupted before any report existed: none appears, not even a partial one.
    proc = _start(out)
    _wait_for(out, "*/case/exchanges.parquet", proc)
    proc.send_signal(signal.SIGTERM)
    _check_signalled(*_finish(proc), signal.SIGTERM)
    assert not (out / NAME).exists()

    # Interrupted in every stage of a re-run: the previous report (here a copy of the undisturbed
    # one, which verifies wherever it is moved) stays byte for byte.
    shutil.copytree(tmp_path / "undisturbed" / NAME, out / NAME)
    for sig, pattern in ((signal.SIGKILL, f".{NAME}+new-*/case/staging"), (signal.SIGTERM, f".{NAME}+new-*/case/suspects.parquet"),
                         (signal.SIGKILL, f".{NAME}+new-*/case/evidence.parquet"), (signal.SIGINT, f".{NAME}+new-*/references.csv")):
        proc = _start(out)
        _wait_for(out, pattern, proc)
        proc.send_signal(sig)
        _check_signalled(*_finish(proc), sig)
        assert _files(out / NAME) == expected, (sig, pattern)
    code, err = _finish(_start(out))
    assert code == 1, err
    assert _files(out / NAME) == expected
    assert sorted(p.name for p in out.iterdir()) == [f".{NAME}+lock", NAME]  # the killed runs' folders are gone


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_no_worker_outlives_the_run(tmp_path: Path, sig: signal.Signals) -> None:
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS, encoding="utf-8")
    marker = tmp_path / "workers-up"
    proc = _start(tmp_path / "out", str(harness), str(marker))
    _wait_for(tmp_path, marker.name, proc)
    family = psutil.Process(proc.pid).children(recursive=True)
    # The match workers are forked by a fork server, so they are grandchildren of the run.
    workers = [p for p in family if p.ppid() != proc.pid]
    assert len(workers) >= 2, family
    proc.send_signal(sig)
    proc.wait(timeout=60)  # not communicate(): a surviving worker would hold stderr open forever
    _, alive = psutil.wait_procs(family, timeout=30)
    for survivor in alive:  # do not leave them to the rest of the test session
        survivor.kill()
    code, err = _finish(proc)
    assert alive == [], (family, err)
    _check_signalled(code, err, sig)
    assert not (tmp_path / "out" / NAME).exists()


def test_a_worker_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    """The parent watch on its own: a pool worker whose parent dies without a word exits."""
    code = ("import multiprocessing, os, sys\n"
            "from forensics.workers import process_pool\n"
            "pool = process_pool(1, multiprocessing.get_context('spawn'))\n"
            "print(pool.submit(os.getpid).result(), flush=True)\n"
            "sys.stdin.read()\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    worker = psutil.Process(int(parent.stdout.readline()))
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=60)
    _, alive = psutil.wait_procs([worker], timeout=30)
    for survivor in alive:
        survivor.kill()
    assert alive == []


def test_a_run_stuck_in_native_code_still_stops(tmp_path: Path) -> None:
    harness = tmp_path / "harness.py"
    harness.write_text(STUCK_HARNESS, encoding="utf-8")
    marker = tmp_path / "stuck"
    proc = _start(tmp_path / "out", str(harness), str(marker))
    _wait_for(tmp_path, marker.name, proc)
    proc.send_signal(signal.SIGTERM)
    _check_signalled(*_finish(proc), signal.SIGTERM)


LOST_SIGNAL = """
import os, signal, weakref
from forensics.errors import Interrupted
from forensics.interrupts import signals_stop_the_run, stop_if_signalled

class A:
    pass

def lands_in_a_callback(_ref):  # Python drops an exception raised in a weakref callback
    os.kill(os.getpid(), signal.SIGTERM)
    for _ in range(1000):
        pass

for check_first in (True, False):
    went_on = refused = False
    try:
        with signals_stop_the_run(on_stuck=lambda s: os._exit(99)):
            a = A()
            r = weakref.ref(a, lands_in_a_callback)
            del a
            went_on = True
            if check_first:
                try:
                    stop_if_signalled()  # what the report does before it replaces the previous one
                except Interrupted:
                    refused = True
                    raise
        print("not interrupted", flush=True)
    except Interrupted as exc:
        print("interrupted", exc.signum, went_on, refused, flush=True)
"""


def test_a_signal_whose_exception_python_dropped_still_stops_the_run(tmp_path: Path) -> None:
    """A SIGTERM that lands while a weakref or ctypes callback runs: Python drops the handler's exception, the run
    went on and replaced the report, exit 1 (a review). The report's swap checks for a signal first, and the block
    ends with Interrupted whatever dropped it."""
    script = tmp_path / "lost.py"
    script.write_text(LOST_SIGNAL, encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.splitlines() == [f"interrupted {int(signal.SIGTERM)} True True",
                                        f"interrupted {int(signal.SIGTERM)} True False"], done.stderr
