"""Where the corpus-sized work runs: this machine's processes (``local``) or a Spark cluster (``spark``).

Two stages grow with the whole corpus: ingest parsing (one task per file span,
:func:`forensics.ingest.stage_unit`) and the match stage's streaming pass (one task per row
range of ``exchanges.parquet``, :func:`forensics.match.stream.scan_rows`, against the suspects'
k-gram index broadcast once). Both are written as pure tasks whose results the driver gathers
in task order, so *who* runs a task never changes the outputs. This module is the one seam:
``executor_for(config)`` is None for ``local`` (the stages keep their own process pools) and a
:class:`SparkExecutor` for ``spark``, which runs the very same task functions in Spark tasks.
Scan (DuckDB), the ingest finaliser, verification and the report stay on the driver.

PySpark is imported only here and only for ``engine = "spark"``: the local path never loads it.
On a cluster, the inputs and the report folder (``--out``) must lie on a path that the driver
and every executor read at the same place (a shared file system, or object storage mounted there):
the tasks read the files they are given by path and ingest tasks write their staging Parquet there.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from forensics.errors import ConfigError, ForensicsError, MissingExtraError

if TYPE_CHECKING:  # imported for types only: the local path must not import the stages' workers
    from forensics.config import CaseConfig
    from forensics.ingest import Batch, Unit
    from forensics.match.stream import BatchResult, Scanner, ScanTask

T = TypeVar("T")
R = TypeVar("R")

#: The fix shown when PySpark is missing.
PYSPARK_FIX = "pip install 'forensics[spark]' (PySpark 4), or run with --engine local"
#: The fix shown when no Java runtime is found.
JAVA_FIX = ("install a Java runtime 17 or newer (Debian/Ubuntu: apt-get install default-jre-headless) or set JAVA_HOME, "
            "or run with --engine local")
#: Partitions per core of the cluster for the match pass: a few each, so a slow one does not hold up the rest.
PARTITIONS_PER_CORE = 4
#: At most this many pass tasks (row ranges of ``Tuning.task_bytes``, 4 MB) per partition on a big
#: corpus, so one wave's results (holders and hits of its rows) stay a bounded share of the corpus.
TASKS_PER_PARTITION = 16


def executor_for(config: CaseConfig | None) -> SparkExecutor | None:
    """The executor the case's ``[execution]`` settings ask for: None for ``local``."""
    execution = getattr(config, "execution", None) or {}
    if execution.get("engine", "local") == "local":
        return None
    return SparkExecutor(execution.get("master", "local[*]"))


def java_missing() -> bool:
    """Whether no ``java`` can be found (on PATH or under JAVA_HOME): Spark's driver is a JVM."""
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").is_file():
        return False
    return shutil.which("java") is None


_CONTEXT: Any = None  # the Spark context this process started (stopped at exit), reused by every stage
_LOG: Path | None = None  # where the JVM that context started writes its own log
_KEEP_LOG = False  # an error named the log: it stays for the user to read


def log_path() -> Path | None:
    """The file Spark's JVM writes its log to (when this process started it), for error messages."""
    return _LOG


def _active_context() -> Any:
    """The Spark context already running in this process (spark-submit, a notebook, a test), or None."""
    from pyspark import SparkContext

    return getattr(SparkContext, "_active_spark_context", None)


def spark_context(master: str) -> Any:
    """The running Spark context, or a new one on ``master``; a clear error without PySpark or Java.

    A context started elsewhere (spark-submit, a notebook, a test) is used as it is, with its own
    master. One started here is stopped when the process exits, and its JVM writes its console
    output to a log file (:func:`log_path`), not to this process's terminal: the CLI alone prints.
    """
    global _CONTEXT, _LOG
    try:
        from pyspark import SparkConf, SparkContext
        from pyspark.java_gateway import launch_gateway
    except ImportError:
        raise MissingExtraError("[execution] engine = \"spark\" (--engine spark) needs PySpark, which is not installed",
                                fix=PYSPARK_FIX) from None
    active = _active_context()
    if active is not None:
        return active
    if java_missing():
        raise ConfigError("[execution] engine = \"spark\" (--engine spark) needs a Java runtime, and none was found "
                          "(no java on PATH, no JAVA_HOME)", fix=JAVA_FIX)
    # Executors run this same interpreter (its packages, forensics included) unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = (SparkConf().setMaster(master).setAppName("forensics")
            .set("spark.ui.enabled", "false")
            .set("spark.ui.showConsoleProgress", "false")
            # Results come back pickled in task order; a wave is bounded (see SparkExecutor), not the whole job.
            .set("spark.driver.maxResultSize", "0"))
    fd, name = tempfile.mkstemp(prefix="forensics-spark-", suffix=".log")
    _LOG = Path(name)
    try:
        with os.fdopen(fd, "wb") as log:  # the JVM keeps its own copy of the descriptor
            gateway = launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
        context = SparkContext(conf=conf, gateway=gateway)
    except Exception as exc:  # noqa: BLE001 - py4j and JVM start-up errors: one clear line instead
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise ConfigError(f"Spark could not start with master {master!r} ({first}; Spark's log: {_LOG})",
                          fix="check [execution] master (local[N], spark://HOST:7077, yarn, k8s://...) and that the "
                          "cluster is reachable; " + JAVA_FIX) from None
    context.setLogLevel("ERROR")
    _CONTEXT = context
    atexit.register(stop_context)
    return context


def stop_context() -> None:
    """Stop the Spark context this process started, if any (idempotent); its log is removed unless
    an error message named it."""
    global _CONTEXT
    if _CONTEXT is not None:
        context, _CONTEXT = _CONTEXT, None
        context.stop()
        if _LOG is not None and not _KEEP_LOG:
            _LOG.unlink(missing_ok=True)


def _shared_value(broadcast: Any) -> Any:
    """A broadcast's value in a Python worker: unpickled once per worker (PySpark keeps it) and
    kept across the worker's tasks, as the local workers keep their scanner (forensics.match.stream)."""
    return broadcast.value if broadcast is not None else None


class SparkExecutor:
    """Runs task functions on a Spark cluster and gives their results back in task order."""

    def __init__(self, master: str) -> None:
        self.master = master
        self.sc = spark_context(master)

    @property
    def cores(self) -> int:
        """Tasks the cluster runs at once (Spark's default parallelism)."""
        return max(1, int(self.sc.defaultParallelism))

    def map_partitions(self, func: Callable[[Any, list[T]], list[R]], items: Sequence[T], partitions: int,
                       shared: Any = None, wave: int | None = None) -> Iterator[R]:
        """``func(shared, part)`` over ``items`` cut into ``partitions`` contiguous parts, results in item order.

        ``shared`` is broadcast once (each executor unpickles it once). Partitions run in jobs of
        ``wave`` partitions (default: all in one job), so the driver holds at most a wave's results
        at a time; each job costs a scheduling round trip, so waves are few and large.
        """
        if not items:
            return
        parts = max(1, min(len(items), partitions))
        broadcast = self.sc.broadcast(shared) if shared is not None else None
        try:
            rdd = self.sc.parallelize(list(items), parts)
            wave = wave or parts

            def run(it: Iterable[T]) -> list[R]:
                return func(_shared_value(broadcast), list(it))

            for lo in range(0, parts, wave):
                try:
                    results = self.sc.runJob(rdd, run, list(range(lo, min(parts, lo + wave))))
                except Exception as exc:  # noqa: BLE001 - a task's Python error arrives wrapped in JVM text
                    raise task_failed(exc) from None
                yield from results
        except GeneratorExit:  # the caller stopped reading (no job runs between waves): nothing to stop
            raise
        except BaseException:  # raised inside runJob (a signal, a failed task): its tasks may still run
            self.abort()
            raise
        finally:
            if broadcast is not None and self.sc is _active_context():
                broadcast.unpersist()

    def abort(self) -> None:
        """Stop the tasks still running (the run is unwinding from an error or a signal): they write
        into the case folder, which is about to be removed. A context this process started is
        stopped, which waits for its tasks to end; one started elsewhere has its jobs cancelled."""
        if self.sc is _CONTEXT:
            stop_context()
        else:
            with contextlib.suppress(Exception):
                self.sc.cancelAllJobs()

    def stage_units(self, work: Sequence[Unit | Batch]) -> Iterator[tuple[Unit, dict[str, Any]]]:
        """Ingest: every file span, or batch of small files, parsed in its own Spark task; (unit, counts) in
        unit order (a batch's units one by one)."""
        from forensics.ingest import Batch

        counts = self.map_partitions(_stage_units, work, len(work))
        return ((unit, c) for item, item_counts in zip(work, counts)
                for unit, c in zip(item.units if isinstance(item, Batch) else (item,), item_counts, strict=True))

    def scan_pass(self, scanner: Scanner, tasks: Iterable[ScanTask]) -> Iterator[BatchResult]:
        """Match: the streaming pass over ``tasks`` (row ranges), the scanner broadcast; results in row order.

        Consecutive ranges of a row group share a partition, so it is decompressed once there.
        """
        tasks = list(tasks)
        partitions = max(PARTITIONS_PER_CORE * self.cores, -(-len(tasks) // TASKS_PER_PARTITION))
        from forensics.match.pool import TextFree

        # The executors scan with the targets' tokens, not their text (the driver, too, lets it go once tokenized).
        return self.map_partitions(_scan_tasks, tasks, partitions, shared=TextFree(scanner),
                                   wave=PARTITIONS_PER_CORE * self.cores)


def task_failed(exc: Exception) -> ForensicsError:
    """A failed Spark job as one clear error: the Python exception the task raised (its last line)."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    raised = [x for x in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", x)]
    what = (raised[-1] if raised else lines[0] if lines else type(exc).__name__)[:300]
    global _KEEP_LOG
    _KEEP_LOG = _LOG is not None
    log = f"; Spark's log: {_LOG}" if _LOG is not None else ""
    return ForensicsError(f"a Spark task failed ({what}{log})",
                          fix="every executor needs Python with forensics and its dependencies installed, the same "
                          "version as the driver (set PYSPARK_PYTHON), and read access to the inputs and the --out "
                          "folder at the same paths as the driver; or run with --engine local")


def _stage_units(_: None, work: list[Unit | Batch]) -> list[list[dict[str, Any]]]:
    """Spark task: stage each unit or batch (writes its staging Parquet, returns its units' counts)."""
    from forensics.ingest import stage_work

    return [stage_work(item) for item in work]


def _scan_tasks(scanner: Scanner, tasks: list[ScanTask]) -> list[BatchResult]:
    """Spark task: scan each row range with the broadcast scanner, one reader for the partition."""
    from forensics.match.stream import RowReader, scan_rows

    reader = RowReader(scanner.p.batch_rows)
    return [scan_rows(scanner, reader, task) for task in tasks]


__all__ = ["JAVA_FIX", "PYSPARK_FIX", "SparkExecutor", "executor_for", "java_missing", "log_path", "spark_context",
           "stop_context", "task_failed"]
