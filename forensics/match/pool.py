"""The match stage's processes: the streaming pass shared by this process and its workers, in
row order whoever runs a task, with this process doing the work alone when workers cannot start."""


import collections
import concurrent.futures
import contextlib
import dataclasses
import io
import multiprocessing
import os
import pickle
import signal
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sized
from multiprocessing import forkserver, resource_tracker
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.parquet as pq

try:
    import fcntl
except ImportError:  # not POSIX: scanner files left by killed runs are not swept
    fcntl = None  # type: ignore[assignment]

from forensics.match.fingerprint import Tokens
from forensics.match.index import Target
from forensics.match.stream import (
    BatchResult,
    RowReader,
    Scanner,
    ScanTask,
    init_worker_from,
    scan_rows,
    scan_rows_in_worker,
    worker_ready,
)
from forensics.match.targets import exchanges_file
from forensics.match.tiers import MatchParams
from forensics.match.tuning import Tuning
from forensics.memory import give_back_above, give_back_freed_memory
from forensics.progress import Reporter, reporter
from forensics.workers import process_pool
from forensics.workers import terminate as terminate_pool

if TYPE_CHECKING:
    from forensics.engine import SparkExecutor


def _scan_tasks(path: Path, task_bytes: int) -> Iterator[ScanTask]:
    """Row ranges of about ``task_bytes`` of (uncompressed) data each, in file order, for the workers.

    Sizes come from the row groups' metadata, so this process reads no text: the workers read
    their own rows (a row group's ranges go out in order, so each worker decompresses it at most
    once, see :class:`RowReader`). A range is never empty and never spans two row groups.
    """
    pf = exchanges_file(path)
    row0 = 0
    for rg in range(pf.num_row_groups):
        meta = pf.metadata.row_group(rg)
        rows = meta.num_rows
        pieces = max(1, min(rows, -(-meta.total_byte_size // task_bytes)))
        cuts = [rows * i // pieces for i in range(pieces + 1)]
        for lo, hi in zip(cuts, cuts[1:]):
            yield ScanTask(str(path), rg, row0, lo, hi)
        row0 += rows


def workers_to_start(path: Path, p: MatchParams, inline_bytes: int) -> int:
    """Worker processes to start beside this one: none below ``inline_bytes`` of text.

    ``p.workers`` counts this process too (0: one per core), since it scans its share.
    """
    meta = pq.ParquetFile(path).metadata
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    workers = p.workers or (os.cpu_count() or 1)
    return 0 if workers <= 1 or size < inline_bytes else workers - 1


class Helpers:
    """Worker processes holding the scanner, started in the background.

    Starting them takes about 0.2 s of CPU (a fork server imports the matcher once; workers
    fork from it, never from this possibly threaded process). The server starts first, while
    this process loads the targets; the workers start once the targets are ready (they are sent
    to each worker once); until they are up this process works alone, and then it keeps doing
    its share. One pool serves the pass and verification. Workers only add speed: if they
    cannot start, or one dies (killed for memory, say), this process does the rest itself.
    """

    def __init__(self, n: int, wait_for_workers: bool = False) -> None:
        self.n = n
        self.wait_for_workers = wait_for_workers
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self.jobs = {"here": 0, "workers": 0}  # how the work was shared (run statistics only)
        self.failed: str | None = None  # why the workers stopped helping (this process then does everything)
        self._ctx = multiprocessing.get_context("forkserver")
        self._starting: concurrent.futures.ProcessPoolExecutor | None = None  # the pool while its workers start
        self._stopping = False
        self._payload: Path | None = None  # the pickled scanner, while the workers start
        self._held: int | None = None  # the descriptor holding the payload's lock
        self._shared: list[tuple[Path, int | None]] = []  # files of :meth:`share`, with their locks
        remove_stale_payloads()  # every stage sweeps, with workers or not
        if n:
            try:
                self._ctx.set_forkserver_preload(["forensics.match"])
                # Python's resource tracker, started with the fork server, unblocks SIGINT once it is up: first.
                resource_tracker.ensure_running()
                with _sigint_blocked():
                    forkserver.ensure_running()
            except OSError as exc:
                self.n, self.failed = 0, f"{type(exc).__name__}: {exc}"

    def start(self, scanner: Scanner) -> None:
        """Start the workers (in a thread: this process goes on meanwhile)."""
        if self.n:
            # Pickled here, before the pass changes what the scanner has learnt: one consistent copy.
            try:
                self._payload = _worker_payload(scanner)
                self._held = _hold(self._payload)  # a sweeping stage (remove_stale_payloads) sees it in use
            except OSError as exc:  # no room for the file: this process does the work alone
                self.n, self.failed = 0, f"{type(exc).__name__}: {exc}"
                self._release()
                return
            self._thread = threading.Thread(target=self._start, args=(self._payload,), daemon=True)
            self._thread.start()
            if self.wait_for_workers:
                self._thread.join()

    def _start(self, payload: Path) -> None:
        pool = None
        try:
            # Workers that die with this process (kill -9 included) and ignore Ctrl-C: see forensics.workers.
            pool = self._starting = process_pool(self.n, self._ctx, _init_worker, (str(payload),))
            # Workers start on demand: have them all start (and report) before they take jobs.
            for f in [pool.submit(worker_ready) for _ in range(self.n)]:
                f.result()
            if self._stopping:  # the run was interrupted while they started
                terminate_pool(pool)
                return
            self._pool = pool
        except Exception as exc:  # noqa: BLE001 - workers only add speed: go on without them
            self.failed = f"{type(exc).__name__}: {exc}"
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    def shared_mask(self, n: int) -> tuple[str, np.ndarray] | None:
        """A file of ``n`` bytes, all zero, that this process writes and the workers read as it changes (mapped):
        its name and this process's writable map. Removed when the pool closes; None without workers, or when
        the file cannot be written (the workers then work without it)."""
        if not self.n:
            return None
        try:
            path = self._held_file(lambda fh: _reserve(fh, n), MASK_SUFFIX)
            mask = np.memmap(path, dtype=np.bool_, mode="r+", shape=(n,)) if n else np.zeros(0, np.bool_)
        except (OSError, ValueError):  # no room for the file: the workers learn on their own
            return None
        return str(path), mask

    def share(self, obj: Any) -> str | None:
        """A file the workers can read ``obj`` from (pickled once, not sent with every job), removed
        when the pool closes; None when there are no workers or the file cannot be written (the
        workers then stop helping: this process does the rest itself)."""
        if self._thread is not None:
            self._thread.join()  # workers still starting would otherwise take jobs without the file
        if self._pool is None:
            return None
        try:
            path = self._held_file(lambda fh: pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError as exc:  # no room for the file (a file begun is gone)
            self.broke(exc)
            return None
        return str(path)

    def _held_file(self, write: Callable[[Any], Any], suffix: str = ".pickle") -> Path:
        """A temporary file filled by ``write`` (:func:`_payload_file`), locked (a sweeping stage sees it in use) and
        removed when the pool closes; on any failure, none is left."""
        path = _payload_file(write, suffix)
        try:
            self._shared.append((path, _hold(path)))
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path

    @property
    def pool(self) -> concurrent.futures.ProcessPoolExecutor | None:
        """The pool once its workers are up, else None (this process then does the job itself)."""
        return self._pool

    def broke(self, exc: BaseException) -> None:
        """A worker died: stop using the pool (jobs it held are run again here)."""
        if self._pool is not None:
            self.failed = f"{type(exc).__name__}: {exc}"
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        """Stop the workers (waiting for a start still in progress, and for jobs they are running)."""
        if self._thread is not None:
            self._thread.join()
        self._release()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def terminate(self) -> None:
        """Kill the workers now, running jobs included (the run is unwinding from an error or a signal)."""
        self._stopping = True
        pool, self._pool = self._pool or self._starting, None
        if pool is not None:
            terminate_pool(pool)
        self._release()

    def _release(self) -> None:
        """Remove the scanner file and the shared files, then let go of their locks."""
        for path, held in self._shared:
            path.unlink(missing_ok=True)
            if held is not None:
                os.close(held)
        self._shared.clear()
        if self._payload is not None:
            self._payload.unlink(missing_ok=True)
            self._payload = None
        if self._held is not None:
            os.close(self._held)
            self._held = None


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """Hold back SIGINT in this thread for the block; one that arrives meanwhile is delivered after it.

    A process started meanwhile inherits the blocked signal: the fork server (and the workers it forks)
    never takes Ctrl-C, which reaches the whole process group, as a KeyboardInterrupt with its own
    traceback (in the second it spends importing the matcher); this process handles it. Python's own
    fork server ignores SIGINT only once its imports are done.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _init_worker(payload: str) -> None:
    """Pool initializer: :func:`init_worker_from`, or a quiet exit when the scanner file is gone.

    The run removes it when it stops (Ctrl-C, an error) while its workers still start: a worker
    then has nothing to do, and the traceback the pool would print is no news to the user.
    """
    try:
        init_worker_from(payload)
    except FileNotFoundError as exc:
        if exc.filename != payload:
            raise
        os._exit(1)  # not sys.exit: the pool reports any exception of an initializer, SystemExit too


#: A worker's targets' character offsets (none: see _WithoutTexts).
_NO_OFFSETS = np.zeros(0, np.int32)


class _WithoutTexts(pickle.Pickler):
    """Pickles the targets without their text or their tokens' character offsets: a worker scans and verifies with
    the tokens' hashes alone, and the match stage's process places the passages it found in the text
    (:meth:`forensics.match.findings.RegionScorer.collect`). The offsets were 13 MiB in each worker on the 4 GB
    benchmark incident."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is Target and (obj.text or (obj.tokens is not None and len(obj.tokens.start))):
            tokens = obj.tokens if obj.tokens is None else Tokens(_NO_OFFSETS, _NO_OFFSETS, obj.tokens.hash)
            return dataclasses.replace(obj, text="", tokens=tokens).__reduce_ex__(pickle.HIGHEST_PROTOCOL)
        return NotImplemented


def _dump_without_texts(scanner: Scanner, fh: Any) -> None:
    """Pickle ``scanner`` into ``fh`` as every worker receives it, local or Spark: the targets' tokens, not their text."""
    _WithoutTexts(fh, protocol=pickle.HIGHEST_PROTOCOL).dump(scanner)


class TextFree:
    """``scanner`` as an executor elsewhere receives it (``--engine spark`` broadcasts it): pickled
    without the targets' text, and unpickled as the scanner itself (the pool's workers read the
    same text-free pickle from a file, see :func:`_worker_payload`)."""

    def __init__(self, scanner: Scanner) -> None:
        self.scanner = scanner

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        buf = io.BytesIO()
        _dump_without_texts(self.scanner, buf)
        return pickle.loads, (buf.getvalue(),)


#: Start of the scanner files' names (the process id follows: which run left one, for a person looking).
PAYLOAD_PREFIX = "forensics-match-"
#: The end of the name of a file of :meth:`Helpers.shared_mask` (a scanner file's is ``.pickle``).
MASK_SUFFIX = ".mask"
#: A scanner file this recent may be one a stage is still writing, before it holds its lock.
PAYLOAD_GRACE_SECONDS = 600


def remove_stale_payloads() -> list[Path]:
    """Remove the scanner files that match stages killed without a chance to clean up (SIGKILL, the
    machine's power) left in the temporary folder. Returns them.

    A running stage holds a lock on its file (``flock``, however its process is seen from here:
    another container, another host on a shared folder), so only a file nobody holds, written more
    than :data:`PAYLOAD_GRACE_SECONDS` ago, is removed; and only a regular file of this user (not a
    link). What cannot be removed is left: the files only cost space.
    """
    if fcntl is None:  # no flock: nothing tells a running stage's file from a dead one's
        return []
    removed = []
    for path in sorted(p for suffix in (".pickle", MASK_SUFFIX)
                       for p in Path(tempfile.gettempdir()).glob(f"{PAYLOAD_PREFIX}*{suffix}")):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:  # a link, gone meanwhile, not readable
            continue
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                    or time.time() - st.st_mtime < PAYLOAD_GRACE_SECONDS):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink()
            removed.append(path)
        except OSError:  # held by a running stage (BlockingIOError), or not ours to remove
            continue
        finally:
            os.close(fd)
    return removed


def _hold(path: Path) -> int | None:
    """A descriptor holding a lock on ``path`` for as long as it is open (None where flock is missing)."""
    if fcntl is None:
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        raise
    return fd


def _worker_payload(scanner: Scanner) -> Path:
    """What each worker receives once: the scanner, pickled into a temporary file (the caller removes it).

    A file, not bytes passed to the pool: the pool keeps the arguments of its workers' initializer for
    as long as it runs, and so does each worker, so bytes would be held twice more for the whole stage
    beside the scanner itself (150 MiB each in the parent and the worker on the 4 GB benchmark incident).
    """
    return _payload_file(lambda fh: _dump_without_texts(scanner, fh))


def _reserve(fh: Any, n: int) -> None:
    """Give the open file ``fh`` ``n`` zero bytes, its blocks allocated: a write through a map of a file whose
    blocks the full disk cannot give is a SIGBUS that kills the process, not an OSError."""
    fh.flush()
    try:
        os.posix_fallocate(fh.fileno(), 0, n)
        return
    except (AttributeError, OSError):  # no fallocate here (or on this file system): write the zeros
        pass
    block = bytes(min(n, 1 << 20))
    left = n
    while left > 0:
        fh.write(block[: min(left, len(block))])
        left -= len(block)
    fh.flush()


def _payload_file(write: Callable[[Any], Any], suffix: str = ".pickle") -> Path:
    """A new private temporary file (``PAYLOAD_PREFIX``, so a later stage can sweep it) filled by ``write``;
    removed again if ``write`` fails in any way."""
    fd, name = tempfile.mkstemp(prefix=f"{PAYLOAD_PREFIX}{os.getpid()}-", suffix=suffix)
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path


@contextlib.contextmanager
def helpers_running(n: int, wait_for_workers: bool = False) -> Iterator[Helpers]:
    """``n`` worker processes for the stage (none: this process alone), killed if the stage fails."""
    helpers = Helpers(n, wait_for_workers)
    try:
        yield helpers
    except BaseException:
        helpers.terminate()  # waiting for running jobs could take minutes
        raise
    finally:
        helpers.close()


class _Done:
    """A job this process ran itself (its place in the ordered results)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def done(self) -> bool:
        return True

    def result(self) -> Any:
        return self.value


def _giving_back(func: Any) -> Any:
    """``func``, then freed memory beyond :data:`forensics.memory.KEEP_BYTES` back to the kernel."""
    def run(job: Any) -> Any:
        result = func(job)
        give_back_above()
        return result
    return run


class WorkerUnfit(Exception):
    """Raised by a job in a worker that cannot do it (a file it needs is damaged or gone): the workers
    stop helping and this process runs the job, as when a worker dies."""


def ordered(helpers: Helpers, remote: Any, local: Any, jobs: Iterable[Any], per_worker: int = 2,
            left: Callable[[], int | None] | None = None) -> Iterator[Any]:
    """Results of every job in job order, whoever ran it.

    A job goes to the workers while fewer than ``per_worker`` per worker are waiting there; otherwise
    (workers busy or not started yet) this process runs it with ``local``. When ``jobs`` has a length
    (a list), or ``left`` tells, as each job is taken, how many are left to start after it (None: not known
    yet), a job also stays here once the workers hold at least as many unfinished jobs as are left
    to start: they would finish those while this process sat idle (a worker starts what it is sent, so
    it cannot be taken back). Which process ran a job never changes its result, so outputs do not depend
    on the split. Results are yielded in job order as soon as they are ready. If a worker dies, or a job
    raises :class:`WorkerUnfit` there, the pool is dropped and the jobs it held (failed, or cancelled with
    the pool) are run here.
    """
    pending: collections.deque[tuple[Any, Any]] = collections.deque()  # (job, future or _Done)
    in_flight = max(per_worker, 1) * helpers.n
    local = _giving_back(local)
    count = len(jobs) if isinstance(jobs, Sized) else None

    def take() -> Any:
        job, fut = pending.popleft()
        try:
            return fut.result()
        except (concurrent.futures.process.BrokenProcessPool, WorkerUnfit, concurrent.futures.CancelledError) as exc:
            helpers.broke(exc)
            helpers.jobs["workers"] -= 1
            helpers.jobs["here"] += 1
            return local(job)

    for job in jobs:
        pool = helpers.pool
        waiting = sum(1 for _, x in pending if not x.done())
        if count is not None:
            count -= 1  # jobs still to start after this one
        after = left() if left is not None else count
        if pool is not None and waiting < in_flight and (after is None or waiting <= after):
            try:
                pending.append((job, pool.submit(remote, job)))
                helpers.jobs["workers"] += 1
            except concurrent.futures.process.BrokenProcessPool as exc:
                helpers.broke(exc)
                pending.append((job, _Done(local(job))))
                helpers.jobs["here"] += 1
        else:
            pending.append((job, _Done(local(job))))
            helpers.jobs["here"] += 1
        # Results wait for the oldest job still running; a slow one may hold back only a few,
        # so memory stays bounded.
        while pending and (pending[0][1].done() or len(pending) > 2 * in_flight + 2):
            yield take()
    while pending:
        yield take()


def run_pass(scanner: Scanner, path: Path, helpers: Helpers, progress: Reporter | None,
             task_bytes: int, spark: "SparkExecutor | None" = None,
             in_flight: int = Tuning.pass_in_flight) -> Iterator[BatchResult]:
    """Scan every record: row ranges (:func:`_scan_tasks`) shared by this process and the workers,
    or run as Spark tasks when ``spark`` is given (``--engine spark``).

    Each worker reads its own rows (no text passes through this process) and at most ``in_flight``
    ranges per worker are in flight, so memory stays bounded; results are gathered in file order.
    """
    rows = pq.ParquetFile(path).metadata.num_rows
    task = reporter(progress).task("match: streaming prompts and responses", rows)
    reader = RowReader(scanner.p.batch_rows)
    try:
        results = (spark.scan_pass(scanner, _scan_tasks(path, task_bytes)) if spark is not None else
                   ordered(helpers, scan_rows_in_worker, lambda job: scan_rows(scanner, reader, job),
                           list(_scan_tasks(path, task_bytes)), per_worker=in_flight))
        for res in results:
            yield res
            task.advance(res.stats.get("records", 0))
    finally:
        task.close()
        # What this process's share of the pass left behind is of no use to verification, whose
        # arrays are of other sizes: ~160 MiB of the parent's RSS on the 1 GB incident.
        give_back_freed_memory()


