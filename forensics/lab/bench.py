"""The benchmarks' harness: run one function in a fresh child process and measure it.

    measured = measure(some_function, case_dir, workers=2)
    measured.seconds, measured.cpu_seconds, measured.rss_main_bytes, measured.rss_worker_bytes

A fresh process, so the figures are the function's alone: no memory held by whatever the
benchmark built before, no module already imported. The child is ``python -m forensics.lab.bench``;
it imports the function by module name, or from its file when the function lives in a script
(a benchmark run as ``python benchmarks/x.py``) or a module the child cannot import by name, so
any module-level function can be measured.
Arguments and the return value travel pickled through files in a temporary folder.

Measured:

* ``seconds``: the call itself, timed inside the child (start-up and imports excluded);
* ``wall_seconds``: the whole child as the parent waited for it (interpreter start included);
* ``cpu_seconds``: CPU time of the child during the call plus that of its worker processes;
* ``rss_main_bytes`` / ``rss_worker_bytes``: peak RSS of the child and of its largest descendant,
  sampled every ``interval`` seconds with psutil (the ``bench`` extra); ``interval=None`` samples
  nothing (zeros), for a measurement the sampler must not disturb;
* ``max_rss_bytes``: the kernel's peak RSS of the child and the descendants it waited for
  (``wait4``), exact however short the peak;
* ``rss_total_bytes``: peak of the sum of the RSS of the child and all its descendants at one
  sample (what the machine must hold at once);
* ``processes``: every process seen (the child and each descendant) with its peak RSS and the
  phase it was first seen in;
* ``phases``: per phase, the seconds it lasted (all its stretches, if it was entered again), the peak
  total RSS while it ran and the CPU time of every process in it (a worker's time until it was first
  seen counts in the phase it was first seen in; a process's time since its last sample before it ended
  is not seen, nor a process started and ended between two listings). CPU time is what to compare
  across runs on a shared machine: other jobs sharing it lengthen the seconds far more. The measured
  function names its phases by calling :func:`phase` (``forensics run`` does so through a
  progress reporter, see :class:`PhaseReporter`); before the first call the phase is ``"start"``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from forensics.errors import ForensicsError
from forensics.progress import NullReporter, Task

#: Name under which a script's module is loaded in the child: not ``__main__``, so the script's
#: ``if __name__ == "__main__"`` block does not run again there.
SCRIPT_MODULE = "_forensics_bench_target"


@dataclasses.dataclass(frozen=True)
class Measurement:
    """What one call cost in its child process (see the module docstring for each figure)."""

    value: Any
    seconds: float
    wall_seconds: float
    cpu_seconds: float
    rss_main_bytes: int
    rss_worker_bytes: int
    max_rss_bytes: int
    rss_total_bytes: int = 0
    processes: tuple[ProcessPeak, ...] = ()
    phases: tuple[PhasePeak, ...] = ()


@dataclasses.dataclass(frozen=True)
class ProcessPeak:
    """One process of a measured call: ``parent`` (the child itself) or a descendant."""

    pid: int
    role: str  # "parent", "worker" (multiprocessing's workers and fork server), "helper" (its resource tracker) or "process"
    first_phase: str  # the phase it was first seen in
    rss_bytes: int  # its peak RSS


@dataclasses.dataclass(frozen=True)
class PhasePeak:
    """One phase of a measured call: how long it lasted, the peak RSS of all processes together and
    their CPU time in it."""

    name: str
    seconds: float
    rss_total_bytes: int
    cpu_seconds: float = 0.0


#: The phase the measured function is in (set by :func:`phase`, read by the sampler thread).
_current_phase = "start"


def phase(name: str) -> None:
    """Mark the start of phase ``name`` in a measured call (peak RSS, CPU time and seconds are then
    attributed to it; a phase entered again adds to what it had)."""
    global _current_phase
    sampler = _ACTIVE
    if sampler is not None and name != _current_phase:
        # The processes as they are when the phase ends, listed now: a worker started since the sampler
        # last listed them belongs to the phase that is ending, not to the next.
        sampler.sample(relist=True)
        sampler.switch(name)
    _current_phase = name


class PhaseReporter:
    """A progress reporter (forensics.progress.Reporter) that starts a phase at every task.

    Every stage of ``forensics run`` opens a progress task when it starts, so passing this as
    ``progress`` attributes peak memory to the stage (and its sub-steps) that held it.
    """

    def task(self, description: str, total: float | None = None) -> Task:
        """Begin the phase ``description`` (the task itself reports nothing)."""
        phase(description)
        return NullReporter().task(description, total)


def _locate(func: Callable[..., Any]) -> dict[str, str | None]:
    """Where the child finds ``func``: its module's name and, when it has one, the module's file."""
    module = sys.modules.get(func.__module__)
    file = getattr(module, "__file__", None)
    if func.__module__ == "__main__" and file is None:
        raise ForensicsError(f"cannot measure {func.__qualname__}: it was defined interactively, not in a module or script")
    return {"module": None if func.__module__ == "__main__" else func.__module__, "file": file, "qualname": func.__qualname__}


def measure(func: Callable[..., Any], *args: Any, interval: float | None = 0.02, **kwargs: Any) -> Measurement:
    """Call ``func(*args, **kwargs)`` in a fresh child process and return its value and costs.

    ``func`` must be a module-level function; arguments and result must pickle. A failure in the
    child (its traceback is on stderr) is a ForensicsError naming the function.
    """
    with tempfile.TemporaryDirectory(prefix="forensics-bench-") as tmp:
        spec, result = Path(tmp) / "call.pickle", Path(tmp) / "result.pickle"
        spec.write_bytes(pickle.dumps({"where": _locate(func), "args": args, "kwargs": kwargs, "interval": interval}))
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "forensics.lab.bench", str(spec), str(result)])
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: keep Popen from waiting again
        if proc.returncode != 0 or not result.exists():
            raise ForensicsError(f"the measured call {func.__qualname__} failed in its child process (exit {proc.returncode})",
                                 fix="read the child's traceback above")
        out = pickle.loads(result.read_bytes())
    return Measurement(value=out["value"], seconds=out["seconds"], wall_seconds=wall, cpu_seconds=out["cpu_seconds"],
                       rss_main_bytes=out["rss_main"], rss_worker_bytes=out["rss_worker"], max_rss_bytes=usage.ru_maxrss * 1024,
                       rss_total_bytes=out.get("rss_total", 0), processes=tuple(out.get("processes", ())),
                       phases=tuple(out.get("phases", ())))


#: Bytes read at a time by :func:`warm_page_cache`.
WARM_CHUNK = 8 << 20


def warm_page_cache(paths: Iterable[Path]) -> int:
    """Read every file under ``paths`` (files, or folders walked in name order) once; return the bytes read.

    Called before each timed step that reads the same inputs as another, so every step starts with them
    in the operating system's page cache. Without it the first step read from disk and the next from
    memory: a benchmark that ran our ingest first and the DuckDB copy second charged the disk to ours.
    """
    total = 0
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            with open(f, "rb") as fh:
                while chunk := fh.read(WARM_CHUNK):
                    total += len(chunk)
    return total


def _role(cmdline: list[str]) -> str:
    """What a descendant process is, told from its command line."""
    text = " ".join(cmdline)
    if "resource_tracker" in text:
        return "helper"
    if "multiprocessing" in text:  # a pool worker, or a fork server (whose forked workers share its command line)
        return "worker"
    return "process"


#: Samples between two listings of the measured process's descendants (see :meth:`_Sampler.sample`).
RELIST_EVERY = 10
#: The sampler of the call being measured in this process, if any (``phase`` lists the processes through it).
_ACTIVE: _Sampler | None = None


class _Sampler:
    """Peak RSS of this process, of each descendant and of all together (per phase), the descendants'
    CPU time, and per phase its seconds and the CPU time of all processes."""

    def __init__(self, interval: float) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._interval = interval
        self._done = threading.Event()
        self.rss_main = 0
        self.rss_worker = 0
        self.rss_total = 0
        self.peaks: dict[int, list[Any]] = {}  # pid -> [role, first phase, peak RSS]
        self.phases: dict[str, list[float]] = {}  # phase -> [last sample, peak total RSS, CPU], in order of starting
        self._cpu_seen: dict[int, float] = {}  # per pid, CPU seconds at its last sample: the next one adds the rest
        self._seconds: dict[str, float] = {}  # per phase, the seconds of its ended stretches
        self._since = (_current_phase, time.perf_counter())  # the phase under way and when it began
        self._children: list[Any] = []  # the descendants as last listed
        self._samples, self._listed_at, self._listed_phase = 0, -RELIST_EVERY, ""
        self._lock = threading.Lock()  # the thread's samples and those a phase switch takes
        self._thread = threading.Thread(target=self._run, daemon=True)
        try:  # the measured call's CPU starts now, not at the child's start-up
            self._cpu_seen[self._me.pid] = _cpu(self._me.cpu_times())
        except psutil.Error:
            pass
        global _ACTIVE
        _ACTIVE = self
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            self.sample()
            self._done.wait(self._interval)

    def sample(self, relist: bool = False) -> None:
        """Read every process once and update the peaks (``relist``: list the descendants anew)."""
        with self._lock:
            self._sample(relist)

    def _sample(self, relist: bool) -> None:
        total = 0
        self._samples += 1
        if (relist or self._samples - self._listed_at >= RELIST_EVERY or _current_phase != self._listed_phase
                or self._done.is_set()):
            # Listing the descendants reads every process of the machine (about 1 ms, holding this
            # process's GIL: at every sample it took 6% of the measured function's time); between
            # listings the known processes are read alone. They are listed every RELIST_EVERY samples,
            # when a phase ends (``phase``) and as the next begins, since workers start with a phase,
            # and at the end. A process started and ended between two listings is not seen.
            try:
                self._children = self._me.children(recursive=True)
            except self._psutil.Error:
                self._children = []
            self._listed_at, self._listed_phase = self._samples, _current_phase
        children = self._children
        # The phase as it is once the children are listed: a worker the measured function starts
        # right after switching phase belongs, with this whole sample, to the phase that started it.
        now, name = time.perf_counter(), _current_phase
        entry = self.phases.setdefault(name, [now, 0, 0.0])
        try:
            rss = self._me.memory_info().rss
            self.rss_main = max(self.rss_main, rss)
            total += rss
            self._peak(self._me.pid, "parent", name, rss)
            entry[2] += self._cpu_since(self._me.pid, _cpu(self._me.cpu_times()))
            for child in children:
                try:
                    rss = child.memory_info().rss
                    times = child.cpu_times()
                    if child.pid not in self.peaks:
                        self.peaks[child.pid] = [_role(child.cmdline()), name, 0]
                except self._psutil.Error:  # a worker ended between listing and reading it
                    continue
                self.rss_worker = max(self.rss_worker, rss)
                entry[2] += self._cpu_since(child.pid, _cpu(times), first=0.0)
                self._peak(child.pid, "", name, rss)
                total += rss
        except self._psutil.Error:
            pass
        self.rss_total = max(self.rss_total, total)
        entry[0] = now
        entry[1] = max(entry[1], total)

    @property
    def worker_cpu(self) -> dict[int, float]:
        """CPU seconds of each descendant as last seen (a worker's CPU only grows)."""
        return {pid: cpu for pid, cpu in self._cpu_seen.items() if pid != self._me.pid}

    def switch(self, name: str) -> None:
        """Phase ``name`` begins now (:func:`phase`): the one under way gets its seconds."""
        with self._lock:
            now = time.perf_counter()
            ended, since = self._since
            self._seconds[ended] = self._seconds.get(ended, 0.0) + now - since
            self._since = (name, now)

    def _cpu_since(self, pid: int, cpu: float, first: float | None = None) -> float:
        """CPU seconds of process ``pid`` since its last sample (``first``: what it had when not yet seen;
        None: nothing before this sample counts)."""
        before = self._cpu_seen.get(pid, cpu if first is None else first)
        self._cpu_seen[pid] = cpu
        return max(cpu - before, 0.0)

    def _peak(self, pid: int, role: str, name: str, rss: int) -> None:
        peak = self.peaks.setdefault(pid, [role, name, 0])
        peak[2] = max(peak[2], rss)

    def stop(self) -> None:
        """Stop sampling (the figures keep their last values)."""
        global _ACTIVE
        if _ACTIVE is self:
            _ACTIVE = None
        self._done.set()
        self._thread.join()

    def processes(self) -> list[ProcessPeak]:
        """Every process seen, the parent first, then by pid."""
        return [ProcessPeak(pid, role, first, rss) for pid, (role, first, rss) in
                sorted(self.peaks.items(), key=lambda kv: (kv[1][0] != "parent", kv[0]))]

    def phase_peaks(self) -> list[PhasePeak]:
        """Every phase in the order it first started; a phase lasts from each switch to it to the next
        switch (the last one until the last sample), all its stretches together."""
        seconds = dict(self._seconds)
        name, since = self._since
        last = max((end for end, _, _ in self.phases.values()), default=since)
        seconds[name] = seconds.get(name, 0.0) + max(last - since, 0.0)
        return [PhasePeak(name, round(seconds.get(name, 0.0), 3), int(rss), round(cpu, 3))
                for name, (_, rss, cpu) in self.phases.items()]


def _cpu(times: Any) -> float:
    """User plus system seconds of psutil's ``cpu_times()``."""
    return float(times.user + times.system)


def _importable(name: str | None) -> bool:
    """Whether this process can import module ``name`` (the parent's sys.path may have differed)."""
    if name is None:
        return False
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _load(where: dict[str, str | None]) -> Callable[..., Any]:
    """The function ``_locate`` described: imported by name, else loaded from its file."""
    if _importable(where["module"]):
        obj: Any = importlib.import_module(str(where["module"]))
    else:
        # A script (a benchmark run by path) or a module the child cannot import by name.
        if where["file"] is None:
            raise ForensicsError(f"cannot import module {where['module']!r} for {where['qualname']} in the child process")
        spec = importlib.util.spec_from_file_location(SCRIPT_MODULE, where["file"])
        assert spec is not None and spec.loader is not None
        obj = importlib.util.module_from_spec(spec)
        sys.modules[SCRIPT_MODULE] = obj  # dataclasses look their module up by name while it loads
        spec.loader.exec_module(obj)
    for part in str(where["qualname"]).split("."):
        obj = getattr(obj, part)
    func: Callable[..., Any] = obj
    return func


def _child(spec_path: Path, result_path: Path) -> None:
    """The child's side of ``measure``: load, call while sampling, write the result."""
    call = pickle.loads(spec_path.read_bytes())
    func = _load(call["where"])
    sampler = _Sampler(call["interval"]) if call["interval"] is not None else None
    cpu0 = time.process_time()
    start = time.perf_counter()
    value = func(*call["args"], **call["kwargs"])
    seconds = time.perf_counter() - start
    main_cpu = time.process_time() - cpu0
    if sampler is not None:
        sampler.stop()
        sampler.sample()  # the end state, so a phase shorter than one interval is still seen
    result_path.write_bytes(pickle.dumps({
        "value": value, "seconds": seconds,
        "cpu_seconds": main_cpu + (sum(sampler.worker_cpu.values()) if sampler else 0.0),
        "rss_main": sampler.rss_main if sampler else 0, "rss_worker": sampler.rss_worker if sampler else 0,
        "rss_total": sampler.rss_total if sampler else 0,
        "processes": sampler.processes() if sampler else [], "phases": sampler.phase_peaks() if sampler else [],
    }))


if __name__ == "__main__":
    # Run as the imported module, not as __main__: the measured function marks its phases in
    # forensics.lab.bench, and the figures must pickle under that module's name.
    from forensics.lab import bench

    bench._child(Path(sys.argv[1]), Path(sys.argv[2]))


def corpus_words(corpus: Path | None) -> list[str]:
    """Words of real text from the corpora's long documents (``longdocs/``), or a synthetic vocabulary
    when there are too few: what the ingest benchmarks fill their generated records with."""
    words: list[str] = []
    if corpus and (corpus / "longdocs").is_dir():
        for name in ("wiki_demo.txt", "c4_demo.jsonl"):
            path = corpus / "longdocs" / name
            if path.exists():
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                    if name.endswith(".jsonl"):
                        try:
                            line = json.loads(line).get("text", "")
                        except json.JSONDecodeError:
                            continue
                    words.extend(line.split())
    if len(words) < 10_000:
        rng = random.Random(7)
        syll = ["ka", "lo", "mi", "ne", "ra", "to", "vi", "su", "de", "an", "or", "el"]
        words = ["".join(rng.choice(syll) for _ in range(rng.randint(1, 4))) for _ in range(50_000)]
    return words
