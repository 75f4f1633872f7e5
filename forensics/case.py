"""The case folder: where each stage reads and writes, and how files are written safely.

Layout (every stage reads only the previous stage's output)::

    CASE/
      manifest.json           ingest: inputs, SHA-256, per-file counts and reconciliation
      config.json             the resolved case configuration (values and where each came from)
      staging/                ingest: per input file and part (small files: per batch), a Parquet file per table with rows (internal)
      exchanges.parquet       ingest: one row per request (schema.EXCHANGES)
      engine_events.parquet   ingest: one row per engine log line (schema.ENGINE_EVENTS)
      quarantine.parquet      ingest: every unusable record (schema.QUARANTINE)
      suspects.parquet        scan  (schema.SUSPECTS), and suspects.csv
      evidence.parquet        match (schema.EVIDENCE), and evidence.csv

Every file is written to a temporary name in the same folder and renamed into place, so a crash
never leaves a half-written file that a later stage would read. Every folder and file created here
is private (0700/0600) whatever the umask; folders that already existed keep their mode. A run
that writes a case folder holds its lock file (``CASE/.lock``), so two runs never mix their tables.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from forensics import schema
from forensics.errors import CaseError, LockError, OutputError
from forensics.memory import release_arrow_memory

if TYPE_CHECKING:
    import duckdb

TABLE_FILES = {name: f"{name}.parquet" for name in schema.TABLES}
#: The stage that writes each table (what to run again when one is damaged).
TABLE_STAGES = {"exchanges": "ingest", "engine_events": "ingest", "quarantine": "ingest", "suspects": "scan",
                "evidence": "match", "review": "match"}

#: Parquet settings for case tables: zstd at a low level keeps megabyte prompts small on disk
#: without making compression the ingest bottleneck.
PARQUET_OPTIONS: dict[str, Any] = {"compression": "zstd", "compression_level": 1}
#: Staging files are read once by the finaliser and kept only for re-ingest: no compression.
STAGING_OPTIONS: dict[str, Any] = {"compression": "none"}
ROW_GROUP_ROWS = 4096
ROW_GROUP_BYTES = 64 << 20
#: The lock file of a case folder (a hidden name: no stage reads it as an input or a table).
LOCK_NAME = ".lock"

_F = TypeVar("_F", bound=Callable[..., Any])


def make_private_dirs(path: Path) -> Path:
    """Create ``path`` and its missing parents, each 0700 whatever the umask; return ``path``.

    Folders that already exist keep their mode (they are someone else's choice). A path, or a
    parent, that exists but is not a folder is an OutputError naming it.
    """
    path = Path(path)
    missing: list[Path] = []
    p = path
    while not os.path.lexists(p) and p.parent != p:
        missing.append(p)
        p = p.parent
    if not p.is_dir():
        raise OutputError("is not a folder" if os.path.lexists(p) else "does not exist", file=p,
                          fix="give a folder (or a path that does not exist yet) there")
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:  # made meanwhile by another process: theirs, keep its mode
            if not d.is_dir():
                raise OutputError("is not a folder", file=d, fix="give a folder (or a path that does not exist yet)") from None
            continue
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
                raise  # the command line names these with their own fix (a full disk, a read-only file system)
            # /proc, a file system that holds no folders of ours: an internal error, said as one before.
            raise OutputError(f"the folder cannot be created there ({exc.strerror})", file=d,
                              fix="give a folder on a file system this user can write to") from None
        os.chmod(d, 0o700)  # mkdir's mode is masked by the umask
    return path


def find_symlink(root: Path) -> Path | None:
    """The first symbolic link at or under ``root`` (walked without following links), or None."""
    if os.path.islink(root):
        return Path(root)
    return next(symlinks_under(root), None)


def symlinks_under(root: Path) -> Iterator[Path]:
    """The symbolic links under ``root`` (not ``root`` itself), walked without following links, as found."""
    if not os.path.isdir(root):
        return
    stack = [Path(root)]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_symlink():
                    yield Path(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(Path(entry.path))


def _pid_in(fd: int) -> str:
    """The pid an exclusive holder wrote into its lock file ("unknown" while it has not yet)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def _open_lock(lock_file: Path, shared: bool) -> int | None:
    """An open descriptor of the lock file, made private if this call creates it.

    None for a reader that cannot make one (a read-only case folder: nobody can write it either).
    """
    flags = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(lock_file, flags | os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.fchmod(fd, 0o600)  # ours: private whatever the umask
        return fd
    except FileExistsError:
        pass
    except OSError as exc:
        if shared and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return None
        raise OutputError(f"cannot create the lock file ({exc.strerror})", file=lock_file,
                          fix="make the folder writable for this user") from None
    try:
        return os.open(lock_file, flags | (os.O_RDONLY if shared else os.O_RDWR))
    except OSError as exc:
        problem = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise OutputError(f"cannot open the lock file ({problem})", file=lock_file,
                          fix="remove it; forensics makes a new one") from None


@contextlib.contextmanager
def folder_lock(lock_file: Path, what: str, shared: bool = False, wait: float = 0.0) -> Iterator[None]:
    """Hold ``lock_file`` (fcntl.flock) for the block: exclusive for a writer, shared for a reader.

    A second holder fails, at once or after ``wait`` seconds of trying, with a LockError naming the
    holder's pid (written into the file by exclusive holders). The file is left in place afterwards: removing a lock file that
    another process has opened but not yet locked would let two runs hold "the" lock. The kernel
    drops the lock when the holder dies, so a killed run never blocks the next one.
    """
    lock_file = Path(lock_file)
    fd = _open_lock(lock_file, shared)
    if fd is None:
        yield
        return
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OutputError("the lock file is not a regular file", file=lock_file, fix="remove it; forensics makes a new one")
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockError(f"{what} is in use by another forensics run (pid {_pid_in(fd)})", file=lock_file,
                                    fix="wait for that run to end (or stop it), then run again") from None
                time.sleep(LOCK_POLL_SECONDS)
        if not shared:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        try:
            yield
        finally:
            if not shared:  # an unheld lock names nobody, and a case folder's bytes stay the same run to run
                os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # releases the lock


#: How often a lock that may be waited for is tried again.
LOCK_POLL_SECONDS = 0.05


@contextlib.contextmanager
def case_lock(root: Path, shared: bool = False) -> Iterator[None]:
    """Hold the case folder's lock (exclusive to write its tables, shared to read them)."""
    with folder_lock(Path(root) / LOCK_NAME, f"the case folder {root}", shared=shared):
        yield


def locked_case(func: _F, *, create: bool = False, shared: bool = False) -> _F:
    """``func(case, ...)`` run while holding the lock of the case folder ``case``.

    ``create`` makes a missing case folder first (ingest); otherwise a missing one is left to
    ``func`` to report. A case path that is a file is an OutputError.
    """

    @functools.wraps(func)
    def wrapper(case: str | Path, *args: Any, **kwargs: Any) -> Any:
        c = Case(case)
        made = create and not os.path.lexists(c.root)
        if create:
            c.create_root()
        elif os.path.lexists(c.root) and not c.root.is_dir():
            raise OutputError("the case folder is not a folder", file=c.root, fix="give --case a folder (or a path that does not exist yet)")
        if not c.root.is_dir():
            return func(case, *args, **kwargs)
        with case_lock(c.root, shared=shared):
            try:
                return func(case, *args, **kwargs)
            except Exception:
                if made:  # (only while this command holds the lock: never a folder another run is using)
                    _remove_if_empty(c.root)
                raise

    return wrapper  # type: ignore[return-value]


def _remove_if_empty(root: Path) -> None:
    """Empty a case folder this command made and that holds nothing but its lock and empty folders: an ingest
    refused before any work (a file of no known format, an archive) left a staging folder behind. The lock file
    stays (and so the folder): another run may be waiting on it, and would take a lock no later run sees."""
    try:
        for dirpath, _, files in os.walk(root):
            if any(not (Path(dirpath) == root and name == LOCK_NAME) for name in files):
                return  # something was written: kept for the next run to use or clear
        for entry in os.scandir(root):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
    except Exception:  # noqa: BLE001 (a tidy-up on the way out must never hide the error being raised)
        return


#: renameat2(2) flag: swap two paths in one step (Linux 3.15+, most local filesystems).
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` atomically; False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def replace_folder(new: Path, final: Path, aside: Path) -> Path | None:
    """Put the folder ``new`` at ``final``, replacing the folder there, then delete the old one.

    With renameat2(RENAME_EXCHANGE) the swap is one atomic step: a reader sees the old folder or
    the new one, never a mix or nothing. Elsewhere the old folder is renamed to ``aside`` and the
    new one renamed in (two renames: only for an instant is there no folder at ``final``).

    Returns where the old folder is left when it cannot be deleted (None once it is gone): the new
    one is in place by then, so that is for the caller to tell, not a failure of the swap.
    """
    if not os.path.lexists(final):
        os.rename(new, final)
        return None
    if _exchange(new, final):
        return _remove_old(new)  # now the old folder
    try:
        os.rename(final, aside)
        os.rename(new, final)
    except BaseException:  # a signal or an error between the renames: put the old folder back
        if not os.path.lexists(final) and os.path.isdir(aside):
            os.rename(aside, final)
        raise
    return _remove_old(aside)


def _remove_old(old: Path) -> Path | None:
    """Delete a replaced folder; its path when that fails (a folder in it not writable for this user)."""
    try:
        shutil.rmtree(old)
    except OSError:
        return Path(old)
    return None


@contextlib.contextmanager
def atomic_path(path: Path, mode: int = 0o600) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only on success."""
    make_private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.chmod(tmp_path, mode)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w", encoding: str | None = "utf-8", newline: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path`` for writing; rename it into place on success."""
    with atomic_path(path) as tmp:
        kwargs: dict[str, Any] = {}
        if "b" not in mode:
            kwargs = {"encoding": encoding, "newline": newline}
        with open(tmp, mode, **kwargs) as fh:
            yield fh


def json_text(data: Any, **options: Any) -> str:
    """``json.dumps(data, ensure_ascii=False, **options)``, with a lone surrogate (a file name's bytes that
    are not UTF-8, as Python reads them) written as its escape: valid JSON that UTF-8 can hold, and read
    back as the same name."""
    return surrogates_escaped(json.dumps(data, ensure_ascii=False, **options))


#: A UTF-16 surrogate with no partner: what Python reads for a name's bytes that are not UTF-8
#: (``os.fsdecode``), and what JSON's grammar allows as an escape; UTF-8 cannot hold it.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def surrogates_escaped(text: str) -> str:
    """``text`` with each lone surrogate written as the six characters of its escape (``\\udce9``)."""
    return LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def table_text(name: str) -> str:
    """A file name as the tables' ``source_file`` holds it: bytes of the name that are not UTF-8 (which
    Python reads as lone surrogates, and Arrow cannot store) written as ``\\xNN``. The manifests
    record the name exactly (a JSON escape per such byte, :func:`json_text`)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace") if LONE_SURROGATE.search(name) else name


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    with open(path, "rb") as fh:
        return sha256_of(fh)


def sha256_of(fh: IO[bytes], limit: int | None = None) -> str:
    """Hex SHA-256 of what ``fh`` reads from where it stands: all of it, or its first ``limit`` bytes."""
    h = hashlib.sha256()
    left = limit
    while chunk := fh.read(1 << 20 if left is None else min(1 << 20, left)):
        h.update(chunk)
        if left is not None:
            left -= len(chunk)
            if not left:
                break
    return h.hexdigest()


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as stable, sorted, indented JSON (byte-identical for equal data)."""
    with atomic_open(path) as fh:
        fh.write(json_text(data, indent=2, sort_keys=True) + "\n")


def rows_batch(rows: list[dict[str, Any]], table_schema: pa.Schema) -> pa.RecordBatch:
    """Row dicts as a record batch of ``table_schema`` (missing columns null; a value that does not fit raises)."""
    # Column lists convert faster than a list of row dicts.
    return pa.RecordBatch.from_pydict({name: [row.get(name) for row in rows] for name in table_schema.names},
                                      schema=table_schema)


class ParquetSink:
    """Write record batches of one canonical schema to a Parquet file, atomically.

    Batches are validated (cast) against the schema as they arrive; nothing is held in memory
    beyond the current batch. ``close()`` renames the file into place; ``abort()`` removes it.
    """

    def __init__(self, path: Path, table_schema: pa.Schema, options: dict[str, Any] | None = None) -> None:
        self.path = path
        self.schema = table_schema
        self.rows = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        make_private_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
        self._tmp = Path(tmp)
        # Dictionaries and min/max statistics on megabyte text columns cost more than the rest of
        # ingest together and help no query: keep them for the small columns only.
        small = [f.name for f in table_schema if f.type != pa.large_string()]
        self._writer = pq.ParquetWriter(
            self._tmp, table_schema, use_dictionary=small, write_statistics=small, **(options or PARQUET_OPTIONS)
        )

    def write_rows(self, rows: list[dict[str, Any]]) -> None:
        """Append a list of row dicts (missing columns become null)."""
        if rows:
            self.write_batch(rows_batch(rows, self.schema))

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append one batch, cast to the sink's schema.

        Rows are regrouped into row groups of ROW_GROUP_ROWS rows or ROW_GROUP_BYTES bytes, so the
        row groups depend only on the rows. The data pages inside them do follow the batches (Arrow
        checks a page's size at the end of each batch it was given), so a caller must batch by its
        input alone, never by timing or the machine, for the file's bytes to repeat.
        """
        if batch.num_rows == 0:
            return
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        table = table.select(self.schema.names).cast(self.schema)
        offset = 0
        while offset < table.num_rows:
            room = ROW_GROUP_ROWS - self._pending_rows
            piece = table.slice(offset, room)
            self._pending.append(piece)
            self._pending_rows += piece.num_rows
            self._pending_bytes += piece.nbytes
            offset += piece.num_rows
            if self._pending_rows >= ROW_GROUP_ROWS or self._pending_bytes >= ROW_GROUP_BYTES:
                self._flush()

    def _flush(self) -> None:
        if self._pending_rows:
            self._writer.write_table(pa.concat_tables(self._pending), row_group_size=ROW_GROUP_ROWS)
            self.rows += self._pending_rows
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def close(self) -> None:
        """Finish the file and rename it into place."""
        self._flush()
        self._writer.close()
        os.chmod(self._tmp, 0o600)
        os.replace(self._tmp, self.path)

    def abort(self) -> None:
        """Drop the partial file."""
        with contextlib.suppress(Exception):
            self._writer.close()
        self._tmp.unlink(missing_ok=True)

    def __enter__(self) -> ParquetSink:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def write_table(path: Path, table: pa.Table, table_schema: pa.Schema) -> None:
    """Write a whole (small) table atomically with its canonical schema."""
    with ParquetSink(path, table_schema) as sink:
        sink.write_batch(table)


def row_group_batches(pf: pq.ParquetFile, columns: list[str], batch_rows: int) -> Iterator[pa.RecordBatch]:
    """``pf``'s ``columns`` in batches of ``batch_rows`` rows, one row group after another.

    For a pass over a big table that must not grow with it. A reader per row group: one reader
    over the whole file keeps buffers of the row groups it has read (Arrow's allocations grew
    with the file, 10 MB to 155 MB over a 500 MB table of text); one per row group holds a row
    group's at most. Arrow's allocator keeps what a row group freed unless asked to give it
    back (resident memory grew by 40 MB over 4 row groups), and a release reaches only what this
    thread freed (:func:`forensics.memory.release_arrow_memory`): the row groups are read on it.
    """
    for group in range(pf.num_row_groups):
        batches = pf.iter_batches(batch_size=batch_rows, row_groups=[group], columns=columns, use_threads=False)
        yield from batches
        batches.close()  # (its reader, before the release)
        release_arrow_memory()


#: DuckDB's memory cap where its queries run over a whole case (the finaliser, the scan): beyond
#: it, joins, aggregates, windows and sorts spill to CASE/.duckdb_tmp. Its default (most of the
#: machine's RAM) let its share of the peak grow with the incident: the scan's joins over the
#: engine events peaked at 1 GiB on the 4 GB benchmark incident, 0.7 GiB under this cap, for 3 s more.
QUERY_MEMORY = "512MB"


class Case:
    """A case folder and the paths of its tables."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def table_path(self, name: str) -> Path:
        """Path of a canonical table's Parquet file."""
        return self.root / TABLE_FILES[name]

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def staging(self) -> Path:
        return self.root / "staging"

    def create_root(self) -> None:
        """Make the case folder if missing (0700); refuse a path that is a file."""
        if os.path.lexists(self.root) and not self.root.is_dir():
            raise OutputError("the case folder is not a folder", file=self.root,
                              fix="give --case a folder (or a path that does not exist yet)")
        make_private_dirs(self.root)

    def create(self) -> None:
        """Make the case folder and its staging folder if missing (0700 each, whatever the umask).

        A staging folder that is a symbolic link is refused: staged copies of every customer's
        prompts would be written wherever it points.
        """
        self.create_root()
        if os.path.islink(self.staging) or (os.path.lexists(self.staging) and not self.staging.is_dir()):
            raise OutputError("the case's staging folder is a symbolic link or not a folder", file=self.staging,
                              fix="remove it; forensics makes a new one")
        make_private_dirs(self.staging)

    def has(self, name: str) -> bool:
        """Whether the stage output ``name`` exists."""
        return self.table_path(name).exists()

    def require(self, name: str, stage: str) -> Path:
        """The table's path, or a CaseError saying which stage to run first, or that the file is damaged
        (:meth:`damaged`) when Parquet cannot read its footer."""
        path = self.table_path(name)
        if not path.exists():
            raise CaseError(
                f"the case has no {name} table ({path.name})",
                file=self.root,
                fix=f"run `forensics {stage} --case {self.root}` first",
            )
        try:
            pq.read_metadata(path)
        except PermissionError:
            raise  # not damage: the CLI names the file and the permission
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError, its IOError an OSError
            raise self.damaged(name, exc) from None
        return path

    def damaged(self, name: str, exc: BaseException) -> CaseError:
        """The error for a case table that cannot be read (truncated, overwritten, not a Parquet file): which file,
        why, and the stage that writes it again."""
        reason = str(exc).strip().splitlines()[0].rstrip(".") if str(exc).strip() else type(exc).__name__
        return CaseError(
            f"the case's {name} table cannot be read ({reason})",
            file=self.table_path(name),
            fix=f"restore the file from a copy, or run `forensics {TABLE_STAGES[name]}"
                + (" LOGS..." if TABLE_STAGES[name] == "ingest" else "")
                + f" --case {self.root}` again, and the stages after it (or `forensics run` with the case file)",
        )

    def read_manifest(self) -> dict[str, Any]:
        """The ingest manifest, or an empty one for a new case."""
        if not self.manifest_path.exists():
            return {}
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))

    def connect(self, read_only_tables: bool = True, memory_cap: bool = False) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with one view per canonical table.

        Tables the case does not have yet appear as empty views of their schema, so a query over
        a gateway-only case (no engine logs) still runs. With ``memory_cap``, DuckDB keeps to
        :data:`QUERY_MEMORY` and spills beyond it; run a query with
        :func:`forensics.queries.with_memory_to_spare` (``run_query`` does) so that one DuckDB
        cannot spill runs again uncapped instead of failing.
        """
        import duckdb  # here: the match stage's worker processes never query, so never load it

        con = duckdb.connect(":memory:")
        # DuckDB spills big sorts into ./.tmp by default: keep every byte of the case in the case.
        con.execute("SET temp_directory = '" + str(self.root / ".duckdb_tmp").replace("'", "''") + "'")
        if memory_cap:
            con.execute(f"SET memory_limit = '{QUERY_MEMORY}'")
        for name, table_schema in schema.TABLES.items():
            path = self.table_path(name)
            if path.exists():
                # The path is ours, not user SQL; quote it as a string literal safely.
                literal = "'" + str(path).replace("'", "''") + "'"
                try:
                    con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet({literal})")
                except duckdb.Error as exc:  # DuckDB reads the file's footer here
                    con.close()
                    raise self.damaged(name, exc) from None
            else:
                con.register(f"_empty_{name}", table_schema.empty_table())
                con.execute(f"CREATE VIEW {name} AS SELECT * FROM _empty_{name}")
        return con
