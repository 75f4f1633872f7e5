"""Ingest stage: log files into the case's Parquet tables, with nothing lost.

Each input file is parsed line by line into staging Parquet files of its own (named by its
SHA-256, so the same file given twice is read once); small plain files are staged in batches, one set
of staging files per batch (:mod:`forensics.ingest.staging`). Then :mod:`forensics.ingest.finalize`
rebuilds the case tables from every staged file: it joins split request/response halves,
keeps one row per request across overlapping exports, attaches engine join keys and token counts,
and reconciles the per-file counts in ``manifest.json``::

    lines read = rows ingested + quarantined + blank + duplicate
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import fnmatch
import functools
import glob
import itertools
import multiprocessing
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from forensics import __version__, engine, schema
from forensics.artifacts import IngestManifest
from forensics.case import STAGING_OPTIONS, Case, ParquetSink, file_sha256, rows_batch, table_text, write_json
from forensics.config import CaseConfig, InputSpec, Profile, load_saved, save
from forensics.errors import CaseError, ConfigError, ForensicsError, InputError, first_few
from forensics.ingest import formats  # noqa: F401  (registers every format module)
from forensics.ingest.base import ALIASES_KEY, FileContext, Quarantined, SkippedRecord, record_hash
from forensics.ingest.fields import json_value
from forensics.ingest.parquet import head_damage as parquet_head_damage
from forensics.ingest.parquet import is_parquet, peek_rows
from forensics.ingest.patterns import glob_matches, split_pattern
from forensics.ingest.reader import (
    FileProblem,
    Line,
    Span,
    archive_of,
    compression_of,
    foreign_encoding,
    head_bytes,
    head_damage,
    peek_lines,
    read_lines,
    scan_file,
    sha256_file,
    utf8_text,
    without_bom,
)
from forensics.ingest.registry import FORMATS, NOT_PARSED, AmbiguousFormat, zone_for
from forensics.ingest.staging import (
    STAGED_TABLES,
    batch_members,
    batch_path,
    is_batch,
    staged_content,
    staged_key,
    staged_path,
    with_members,
)
from forensics.progress import Reporter, reporter
from forensics.tokens import BAND_TOKENS_PER_BYTE, TEMPLATE_TOKENS_FIXED, TEMPLATE_TOKENS_PER_MESSAGE, BandStats, Counter
from forensics.workers import pool_running

#: The formats a fresh import registers (what the ingest pool's workers know).
IMPORTED_FORMATS = FORMATS.names()
#: Rows buffered before a staging batch is written; bounded by bytes too (prompts can be MBs).
BATCH_ROWS = 2000
BATCH_BYTES = 32 << 20
#: Big plain files are parsed in line-aligned spans of this size, side by side.
SPLIT_BYTES = 64 << 20
#: Below this much input, one process is faster than starting a pool...
PARALLEL_BYTES = 96 << 20
#: ...unless it comes in this many files or more: each costs a few milliseconds however small it is
#: (an object store export holds one request per file).
PARALLEL_FILES = 400
MAX_WORKERS = 2
#: Whole files at most this big are staged in batches (:class:`Batch`) of at most BATCH_FILES files and
#: BATCH_FILE_BYTES bytes: enough batches for both workers, few enough that a staging file per batch costs
#: nothing beside parsing. Below 1 MB a file's staged rows fit one read of the finaliser, as its own
#: staging file would (the case table's bytes do not depend on the batching).
SMALL_FILE_BYTES = 1 << 20
BATCH_FILES = 64
BATCH_FILE_BYTES = 8 << 20
#: Staging tables whose schema differs from the case table's (columns only the finaliser decides).
STAGED_SCHEMAS = {"exchanges": schema.EXCHANGES_STAGED}


@dataclasses.dataclass
class IngestResult:
    """What an ingest run did: the case folder, its manifest and this run's file statuses."""

    case: Path
    manifest: IngestManifest
    run_files: list[dict[str, Any]]
    #: What a run of every stage must print, not only record: records lost in a way that takes customers off the list,
    #: on every file of the case so far (each ingest of the case says them again, with its counts).
    warnings: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary for the CLI (this run's files plus the case totals)."""
        m = self.manifest.to_json()
        return {
            "case": str(self.case),
            "files": self.run_files,
            "tables": m["tables"],
            "duplicate_requests": m["duplicate_requests"],
            "orphans": self.manifest.orphans.request_only + self.manifest.orphans.response_only,
            "time_range": m["time_range"],
            "models": m["models"],
            "prompt_tokens_sources": m["prompt_tokens_sources"],
            "implausible_reported_counts": m["implausible_reported_counts"],
            "records_from_damaged_input": m["records_from_damaged_input"],
            "notes": m["notes"],
        }


@functools.lru_cache(maxsize=4096)
def _real_folder(folder: str) -> str:
    """``os.path.realpath`` of a folder, remembered for the run (:func:`ingest` forgets it when it starts):
    thousands of files of one folder each resolved it again, a few system calls per folder level."""
    return os.path.realpath(folder)


def named_path(path: Path) -> Path:
    """The absolute name a file was found under: its folders resolved, its own name kept, so a
    symlink is recorded as the link (the name the evidence was given under), not its target."""
    return Path(_real_folder(str(path.parent))) / path.name


def display_path(path: Path, base: Path | None = None) -> str:
    """A path as recorded in outputs, so tables do not depend on where a run started: relative to
    ``base``, the case file's folder (``../logs/...`` for inputs beside it: a copy of the whole tree
    still verifies); without a case file, relative to the working folder when inside it, else as given."""
    try:
        rel = os.path.relpath(named_path(path), _real_folder(str((base or Path.cwd()).absolute())))
        if rel.startswith(".."):
            # A folder inside the base linked to one outside it: named as found (gateway/...), not by where
            # the link leads (which depends on the machine).
            folder = os.path.abspath(base or Path.cwd())
            given = os.path.relpath(os.path.abspath(path), folder)
            # (abspath drops "link/.." without following the link: the name must lead to the same file)
            if not given.startswith("..") and os.path.realpath(os.path.join(folder, given)) == os.path.realpath(path):
                return given
    except ValueError:  # another drive (Windows)
        return str(path)
    return str(path) if rel.startswith("..") and base is None else rel


@dataclasses.dataclass(frozen=True)
class Skipped:
    """A folder entry that is not read: not a regular file, or a link leading out of its folder."""

    path: Path  # the name found in the folder (a link itself, never its target)
    kind: str  # one of SKIP_KINDS
    reason: str  # the quarantine reason, with the fix


#: Why a folder entry is skipped (``skipped_inputs[].kind`` in the manifest).
SKIP_KINDS = ("symlink_outside_root", "dangling_symlink", "symlink_to_folder", "fifo", "socket", "device", "unreadable")
_NOT_OPENED = {
    "fifo": "a named pipe (FIFO), not a regular file; not opened (reading it could wait forever)",
    "socket": "a socket, not a regular file; not opened",
    "device": "a device, not a regular file; not opened",
}
_COPY_FIX = "Fix: copy the log into a regular file inside the input folder and ingest again"


#: The bookkeeping a data-lake writer (Spark, Hadoop, Hive, Databricks, Delta Lake, pyarrow) leaves
#: beside a Parquet dataset's part files: commit markers, checksums, summary footers, logs of
#: commits, attempts still in flight. Never log records: in a folder walk (or a pattern's matches)
#: they are left out like hidden files, not quarantined, and a file or folder named explicitly is
#: read. Only these names: any other file, whatever its name, is read or quarantined.
SIDE_FILES = ("_SUCCESS", "_committed_*", "_started_*", "_aborted_*", "_metadata", "_common_metadata", "*.crc")
SIDE_FOLDERS = ("_temporary", "_delta_log", "_spark_metadata")


def side_entry(name: str, folder: bool) -> bool:
    """Whether a folder entry named ``name`` is a dataset writer's bookkeeping (see SIDE_FILES)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in (SIDE_FOLDERS if folder else SIDE_FILES))


def _special_kind(mode: int) -> str | None:
    """``fifo``, ``socket`` or ``device`` for those file modes, None for anything else."""
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return None


def _inside(path: str, root: str) -> bool:
    return path == root or os.path.commonpath([path, root]) == root


def _check_entry(path: Path, root: str) -> Skipped | None:
    """None when ``path`` (found in the input folder whose real path is ``root``) is a regular
    file to read, else why it is skipped. Never opens the entry: a FIFO would block forever."""
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        return Skipped(path, "unreadable", f"could not be examined ({exc.strerror}); not read. {_COPY_FIX}")
    if stat.S_ISLNK(mode):
        # Where a link points is not recorded: a path leading out of the input folder must never
        # appear in the case's records, and the link's name is what the auditor needs.
        try:
            mode = os.stat(path).st_mode
        except OSError as exc:
            return Skipped(path, "dangling_symlink", f"symlink that cannot be followed ({exc.strerror}); nothing was read. "
                           "Fix: restore the file it points to, or remove the link")
        if not _inside(os.path.realpath(path), root):
            return Skipped(path, "symlink_outside_root", "symlink leading outside the input folder; not followed. "
                           "Fix: if the file it points to is evidence of this case, copy it into the input folder and ingest again")
        if stat.S_ISDIR(mode):
            return Skipped(path, "symlink_to_folder", "symlink to a folder; not followed (its files would be read twice, or "
                           "forever in a loop). Fix: give that folder itself as an input")
        kind = _special_kind(mode)
        if kind is not None:
            return Skipped(path, kind, f"symlink to {_NOT_OPENED[kind]}. {_COPY_FIX}")
        return None
    kind = _special_kind(mode)
    if kind is not None:
        return Skipped(path, kind, f"{_NOT_OPENED[kind]}. {_COPY_FIX}")
    return None


def expand_inputs(paths: Sequence[Path], exclude: Path | None = None,
                  literal: bool = False) -> tuple[list[tuple[Path, bool]], list[Skipped]]:
    """Files to read, each with whether it was named explicitly (not found in a folder), and the
    folder entries skipped.

    Folders are walked recursively in sorted order; hidden files and folders are left out, so are
    a dataset writer's bookkeeping files and folders (:data:`SIDE_FILES`, :data:`SIDE_FOLDERS`:
    ``_SUCCESS``, ``.crc``, ``_temporary/``...) and ``exclude`` (the case folder itself, when it
    lies inside an input folder). ``literal``: the paths are names found on disk (a search's matches, the
    files a report records), never patterns, even where they hold ``*`` or ``[``. Only regular
    files are read: a symlink is followed only when its target is a regular file inside the folder
    given (the input root); other links, FIFOs, sockets and devices are skipped with a reason. A
    file named explicitly that is none of these is an error.
    """
    files: list[tuple[Path, bool]] = []
    skipped: list[Skipped] = []
    skip = exclude.resolve() if exclude is not None else None
    for path in paths:
        path = Path(path)
        if glob.has_magic(str(path)) and path.exists():
            if not literal:  # a name that is also a wildcard matching other entries is an error, not a choice
                split_pattern(path)
        elif glob.has_magic(str(path)) and not literal:
            # A pattern (logs/*.jsonl, logs/**/*.gz): its matches are read as if found in the folder
            # before the first wildcard (that folder is their input root).
            more, also = _expand_pattern(path, skip)
            files += more
            skipped += also
            continue
        if path.is_dir():
            root = os.path.realpath(path)
            unlisted: list[OSError] = []
            for folder, dirs, names in os.walk(path, onerror=unlisted.append):
                if unlisted:
                    skipped.extend(_unlisted(unlisted, path))
                    unlisted.clear()
                kept = []
                for d in sorted(dirs):
                    sub = Path(folder) / d
                    if d.startswith(".") or side_entry(d, folder=True) or sub.resolve() == skip:
                        continue
                    if sub.is_symlink():  # os.walk lists links to folders as folders but never enters them
                        problem = _check_entry(sub, root)
                        if problem is not None:
                            skipped.append(problem)
                        continue
                    kept.append(d)
                dirs[:] = kept
                for name in sorted(names):
                    if name.startswith(".") or side_entry(name, folder=False):
                        continue
                    problem = _check_entry(Path(folder) / name, root)
                    if problem is None:
                        files.append((Path(folder) / name, False))
                    else:
                        skipped.append(problem)
            skipped.extend(_unlisted(unlisted, path))
        elif path.is_file():
            # A file named explicitly: its own folder is its input root.
            problem = _check_entry(path, os.path.realpath(path.parent))
            if problem is not None:
                raise InputError(problem.reason.split(". Fix: ")[0], file=path,
                                 fix="give the path of the file itself (not a link leading out of its folder)")
            files.append((path, True))
        elif path.exists():
            kind = _special_kind(os.stat(path).st_mode)
            raise InputError(_NOT_OPENED[kind] if kind else "not a regular file or folder", file=path,
                             fix="give log files or folders of them")
        elif os.path.islink(path):  # a link that cannot be followed (dangling, or a loop): say which, as in a folder
            problem = _check_entry(path, os.path.realpath(path.parent))
            reason = problem.reason.split(". Fix: ")[0] if problem is not None else "symlink that cannot be followed"
            raise InputError(reason, file=path, fix="give the path of the log file itself")
        else:
            raise InputError("no such file or folder", file=path, fix="check the path (relative paths are from the current folder)")
    return files, skipped


def _unlisted(errors: list[OSError], given: Path) -> list[Skipped]:
    """The folders a walk of ``given`` could not list, as skipped entries (``os.walk`` passes over them
    without a word unless told: a node's logs would be missing from a case that looked complete). The
    folder given itself is an error: nothing of it could be read."""
    out = []
    for exc in errors:
        folder = Path(exc.filename) if exc.filename else given
        reason = f"folder could not be listed ({exc.strerror or exc}); none of its files were read"
        if os.path.abspath(folder) == os.path.abspath(given):
            raise InputError(reason, file=given, fix="give the account running forensics the right to list it, or copy it")
        out.append(Skipped(folder, "unreadable", f"{reason}. Fix: let the account running forensics list it (or copy "
                                                 "its files into a folder it can read) and ingest again"))
    return out


def pattern_drops(match: Path, base: Path) -> bool:
    """Whether a glob match below the pattern's fixed folder ``base`` is left out, as a folder walk
    leaves it: a dataset writer's bookkeeping entry, or one inside such a folder."""
    inner = match.relative_to(base).parts if match.is_relative_to(base) else match.parts
    return any(side_entry(part, folder=True) for part in inner[:-1]) or side_entry(match.name, match.is_dir())


def _expand_pattern(pattern: Path, exclude: Path | None) -> tuple[list[tuple[Path, bool]], list[Skipped]]:
    """The files a glob pattern matches (``**`` spans folders; hidden names are not matched), in
    sorted order, folders walked as :func:`expand_inputs` walks them. No match is an error: a
    pattern matching nothing must not look like a clean, empty incident.

    What the search passed over is said, as a folder walk says it: a link to a folder met below a
    ``**`` part (never followed, see :mod:`forensics.ingest.patterns`) and a folder it could not list
    are skipped entries; the case folder (``exclude``) is never read, whatever the pattern matches."""
    found = glob_matches(pattern)
    base = found.fixed
    root = os.path.realpath(base)

    def outside_case(path: Path) -> bool:
        return exclude is None or not path.resolve().is_relative_to(exclude)

    passed = _unlisted(found.unlisted, base)
    passed += [problem for link in map(Path, found.links) if not pattern_drops(link, base) and outside_case(link)
               for problem in [_check_entry(link, root)] if problem is not None]
    matches = [m for m in map(Path, found.matches) if not pattern_drops(m, base) and outside_case(m)]
    if not matches:
        if passed:
            raise InputError(f"no file matches this pattern; the search passed over {len(passed)} "
                             f"{'entry' if len(passed) == 1 else 'entries'}: "
                             f"{first_few([f'{s.path} ({s.kind})' for s in passed])}", file=pattern,
                             fix="give the folder a link points to as an input, or let the account running forensics "
                                 "list the folders named")
        raise InputError("no file matches this pattern", file=pattern,
                         fix="check the pattern (relative to the case file's folder; ** matches folders at any depth)")
    files: list[tuple[Path, bool]] = []
    skipped: list[Skipped] = []
    seen: set[Path] = set()
    for match in matches:
        if match.is_dir():
            try:  # a folder the pattern matched but that cannot be listed is a row, as in a walk
                os.scandir(match).close()
            except OSError as exc:
                also = _unlisted([exc if exc.filename else OSError(exc.errno, exc.strerror, str(match))], base)
                skipped += [s for s in also if s.path not in seen]
                seen.update(s.path for s in also)
                continue
            more, also = expand_inputs([match], exclude, literal=True)
            # ``logs/**/*`` matches a folder and the files in it: each file is read once.
            files += [f for f in more if f[0] not in seen]
            skipped += [s for s in also if s.path not in seen]
            seen.update([f[0] for f in more] + [s.path for s in also])
            continue
        if match in seen:
            continue
        seen.add(match)
        problem = _check_entry(match, root)
        if problem is None:
            files.append((match, False))
        else:
            skipped.append(problem)
    for problem in passed:  # a link or folder the walk of a matched folder named already is named once
        if problem.path not in seen:
            seen.add(problem.path)
            skipped.append(problem)
    return files, skipped


@dataclasses.dataclass(frozen=True)
class Examined:
    """What ingest must know of a file before anything is written: its SHA-256 and spans (or the OSError
    reading it raised), whether it is Parquet, the foreign encoding its first bytes betray, and, when no
    format was given, the format sniffed from it (or the formats that all claim it)."""

    scanned: tuple[str, list[Span]] | OSError
    parquet: bool = False
    encoding: str | None = None
    sniffed: str | None = None
    ambiguous: tuple[str, ...] = ()
    compression: str | None = None
    size: int = 0
    #: ``tar`` or ``zip`` when the file is an archive (read as it is, never line by line).
    archive: str | None = None
    #: Its first non-blank line opens a JSON array, and the format given or sniffed reads JSON Lines.
    json_array: bool = False


def examine(path: Path, given: str | None, split_bytes: int) -> Examined:
    """:class:`Examined` of one file; ``given``: the format given for it (None: sniff it); a big plain file
    is cut into spans of about ``split_bytes``."""
    try:
        scanned: tuple[str, list[Span]] | OSError = scan_file(path, split_bytes)
    except OSError as exc:  # as _scan_files: the file is then reported unreadable
        scanned = exc
    return _examined(path, given, scanned)


def _examined(path: Path, given: str | None, scanned: tuple[str, list[Span]] | OSError) -> Examined:
    """:func:`examine` of a file already scanned. A file that cannot be read now (removed or made
    unreadable since it was hashed) is as one that could not be hashed: skipped, or an error if named."""
    if isinstance(scanned, OSError):
        return Examined(scanned)
    try:
        size = path.stat().st_size
        parquet = is_parquet(path)
        first_bytes = b"" if parquet else head_bytes(path)  # read once for the encoding and the archive checks
        encoding = None if parquet else foreign_encoding(path, first_bytes)  # Parquet's binary pages are not UTF-16 text
        compression = compression_of(path)
        archive = None if parquet or encoding else archive_of(first_bytes)
        if archive is not None:
            return Examined(scanned, parquet, compression=compression, size=size, archive=archive)
        misfit = parquet and given is not None and not FORMATS.get(given).parquet
        if given is not None or encoding is not None or misfit:
            array = (given is not None and not parquet and encoding is None and FORMATS.get(given).json_lines
                     and _json_array(peek_lines(path, limit=1)))
            return Examined(scanned, parquet, encoding, compression=compression, size=size, json_array=array)
        head = None if parquet else peek_lines(path)  # read once: the sniff and the array check both look at it
        try:
            sniffed = sniff(path, parquet, head)
        except AmbiguousFormat as exc:
            return Examined(scanned, parquet, encoding, None, tuple(exc.candidates), compression, size)
        array = sniffed is not None and head is not None and FORMATS.get(sniffed).json_lines and _json_array(head)
        return Examined(scanned, parquet, encoding, sniffed, compression=compression, size=size, json_array=array)
    except OSError as exc:
        return Examined(exc)


def _json_array(head: list[str]) -> bool:
    """Whether a file of a format that reads JSON Lines is a JSON array instead, told from its first non-blank
    lines (``head``): the first opens one. Read by lines, each element's line would be quarantined and the last
    one alone taken."""
    if not head or not head[0].lstrip("\ufeff \t\r\n").startswith("["):
        return False
    # A line that is a whole JSON value by itself ("[]", a one-line array) is a bad record of a JSON Lines file,
    # quarantined as such; an array's opening line ("[", '[{"a": 1},') is not.
    try:
        json_value(head[0])
    except ValueError:
        return True
    return False


def _examine_many(pairs: list[tuple[Path, str | None]], split_bytes: int, known: list[str]) -> list[Examined] | None:
    """:func:`examine` of each (path, format given), in a worker of the ingest pool; None when the worker
    does not know the formats ``known`` this process knows (one registered at run time, not by a module of
    forensics/ingest/formats/, which a worker imports afresh): a file sniffed there could be told otherwise."""
    if FORMATS.names() != known:
        return None
    return [examine(path, given, split_bytes) for path, given in pairs]


#: Files examined per task at most when the ingest pool examines them (fewer when there are few files: a
#: gigabyte in 47 files must be hashed on both workers, not in one task).
EXAMINE_CHUNK = 64


def _examine_files(paths: list[Path], given: list[str | None],
                   pool: concurrent.futures.ProcessPoolExecutor | None) -> list[Examined]:
    """:func:`examine` of every file, in order: on the pool's workers when there is one (thousands of small
    files: opening, hashing and sniffing each was most of what ingest did before staging, in this process),
    else hashing on threads (:func:`_scan_files`) and the rest here."""
    if pool is not None:
        pairs = list(zip(paths, given))
        size = max(1, min(EXAMINE_CHUNK, len(pairs) // (4 * MAX_WORKERS)))
        chunks = [pairs[i:i + size] for i in range(0, len(pairs), size)]
        # SPLIT_BYTES as this process has it: a worker imports its own copy of the module.
        parts = list(pool.map(_examine_many, chunks, itertools.repeat(SPLIT_BYTES), itertools.repeat(FORMATS.names())))
        if all(part is not None for part in parts):
            return [e for part in parts if part is not None for e in part]
    return [_examined(path, fmt, scanned) for path, fmt, scanned in zip(paths, given, _scan_files(paths))]


def _scan_files(paths: list[Path]) -> list[tuple[str, list[Span]] | OSError]:
    """:func:`scan_file` of every path (its result or the OSError it raised), in order.

    Hashing is most of the work and hashlib releases the GIL for it, so threads hash several
    files side by side instead of leaving the pool's cores idle while one file is read.
    """
    def one(path: Path) -> tuple[str, list[Span]] | OSError:
        try:
            return scan_file(path, SPLIT_BYTES)
        except OSError as exc:
            return exc

    if len(paths) < 2:
        return [one(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(len(paths), os.cpu_count() or 1, MAX_WORKERS)) as threads:
        return list(threads.map(one, paths))


def sniff(path: Path, parquet: bool | None = None, head: list[str] | None = None) -> str | None:
    """The format of a file told from its first lines (and its name), or None when no registered
    format claims it; an :class:`AmbiguousFormat` naming the file when several do. A Parquet file's
    first rows are shown to the formats as JSON lines, and only a format that reads Parquet may claim it.
    ``head``: a text file's first lines (:func:`peek_lines`) when the caller has read them already."""
    try:
        if is_parquet(path) if parquet is None else parquet:  # ``parquet``: already told
            name = FORMATS.sniff(peek_rows(path), path.name)
            return name if name is not None and FORMATS.get(name).parquet else None
        return FORMATS.sniff(peek_lines(path) if head is None else head, path.name)
    except AmbiguousFormat as exc:
        raise AmbiguousFormat(exc.candidates, file=path) from None


def ingest(
    case: str | Path,
    paths: Sequence[str | Path],
    fmt: str | None = None,
    config: CaseConfig | None = None,
    progress: Reporter | None = None,
    profile: Profile | None = None,
    path_formats: Sequence[str | None] | None = None,
    found_in_folder: bool = False,
) -> IngestResult:
    """Ingest log files or folders into the case folder ``case`` and rebuild its tables.

    ``fmt`` forces a format for every file; otherwise each file's format is sniffed from its
    content. ``path_formats`` gives instead a format (None: sniffed) for each entry of ``paths``
    and the files under it, so inputs of several formats are finalised once (as ``forensics run``
    does with the case file's ``[[inputs]]``). A file named explicitly whose format cannot be told
    is an error (before anything is written); one found in a folder becomes a whole-file
    quarantine row. ``found_in_folder``: every file of ``paths`` is taken as found in a folder (what
    ``verify --rerun`` needs to repeat, file by file, an ingest that was given the folder). ``fmt="mapped"`` reads
    the files through a mapping ``profile`` (by default the one of the case file's ``mapped``
    input that holds ``paths``). A file's times with no zone are read in the zone of the case file's most
    specific ``[[inputs]]`` entry that holds it (its ``timezone``), else its format's own, else the case's
    (:func:`input_zones`).
    """
    from forensics.ingest.finalize import finalize

    _real_folder.cache_clear()  # a folder's link may have moved since the last run in this process
    cfg = config or CaseConfig()
    if path_formats is not None and len(path_formats) != len(paths):
        raise ValueError(f"path_formats names {len(path_formats)} formats for {len(paths)} paths")
    entry_formats = list(path_formats) if path_formats is not None else [fmt] * len(paths)
    for name in dict.fromkeys(entry_formats):
        if name is not None:
            FORMATS.get(name)  # an unknown name is an error naming the registered formats
    if fmt == "mapped":
        from forensics.ingest.formats.mapped import profile_for

        profile = profile or profile_for([Path(p) for p in paths], cfg)
    c = Case(case)
    c.create()
    if cfg.tokenizer:
        Counter(cfg.tokenizer)  # a bad tokenizer file is a ConfigError before any work
    manifest = c.read_manifest()
    known: dict[str, dict[str, Any]] = {f["sha256"]: f for f in manifest.get("files", [])}
    held_before = set(known)  # the contents the case held before this ingest (known gains this one's as it goes)
    # The entries of the case before this run (by identity: an entry this run removed and then added again is a
    # new one): only those can be a grown log's earlier copy.
    in_case = {id(e) for e in known.values()}
    _check_same_reading(manifest, cfg, c.root)

    # Decide every file's format before writing anything, so an error leaves the case unchanged.
    plan: list[tuple[Path, str, str | None, list[Span], Skip | None, Examined]] = []
    found: list[tuple[Path, bool]] = []
    forced: list[str | None] = []  # the format given for each file found, None: sniff it
    skipped: list[Skipped] = []
    for given, entry_format in zip(paths, entry_formats):
        entry_found, entry_skipped = expand_inputs([Path(given)], exclude=c.root, literal=found_in_folder)
        if found_in_folder:
            entry_found = [(path, False) for path, _ in entry_found]
        found.extend(entry_found)
        forced.extend([entry_format] * len(entry_found))
        skipped.extend(entry_skipped)
    # The [[inputs]] entries' own zones: the case file's, else (an ingest given none) those of the case file the case was
    # begun with, which it saved: a file added without --config was read in the case's zone beside siblings read in
    # their entry's.
    zones = input_zones([path for path, _ in found],
                        cfg if cfg.file is not None or cfg.inputs else _saved_inputs(c, cfg, bool(known)), exclude=c.root)
    if not found and not skipped:  # an empty folder must not look like a clean, empty incident
        raise InputError(f"no log file found in {', '.join(str(p) for p in paths)}",
                         fix="give the folder that holds the logs (hidden files are skipped), or the files themselves")
    # With enough input for the process pool, it is started now: its workers start up (a fresh
    # interpreter and its imports each) while the files are hashed, not after.
    with contextlib.ExitStack() as early:
        spark = engine.executor_for(cfg)  # None: this machine's process pool
        # A worker imports the formats afresh: one registered at run time would be unknown there, and a file
        # it reads would be sniffed otherwise, or fail to stage. Such a run is read in this process.
        in_process = FORMATS.names() != IMPORTED_FORMATS
        pool = _early_pool(early, [p for p, _ in found]) if spark is None and not in_process else None
        # SHA-256 -> (file, the format it is read in, whether that format was given for it, not sniffed)
        read_formats: dict[str, tuple[Path, str, bool]] = {}
        for (path, explicit), file_format, seen in zip(found, forced, _examine_files([p for p, _ in found], forced, pool)):
            try:
                if isinstance(seen.scanned, OSError):
                    raise seen.scanned
                sha, spans = seen.scanned
            except OSError as exc:  # permissions, or the file vanished since the folder was listed
                if explicit:
                    raise InputError(f"cannot read the file ({exc.strerror})", file=path, fix="check the path and its permissions") from None
                skipped.append(Skipped(path, "unreadable", f"could not be read ({exc.strerror}); not read. {_COPY_FIX}"))
                continue
            parquet, encoding = seen.parquet, seen.encoding
            misfit = parquet and file_format is not None and not FORMATS.get(file_format).parquet
            skip = None
            if encoding is not None or misfit or seen.archive is not None:
                if seen.archive is not None:
                    # Read line by line, a tarball's headers and members ran together: a few records read, thousands
                    # of "lines" quarantined, and the rest of the logs missing from the case.
                    problem = f"the file is a {seen.archive} archive, whose files are not read from inside it"
                    fix = (f"extract it first ({'tar -xf FILE -C DIR' if seen.archive == 'tar' else 'unzip FILE -d DIR'}) "
                           "and ingest the folder")
                elif misfit:
                    problem = f"this is a Parquet file and format {file_format!r} reads text logs"
                    fix = f"use a format that reads Parquet ({', '.join(f.name for f in FORMATS if f.parquet)}), or export the log as JSON Lines"
                else:
                    problem = f"the file is {encoding} text, not UTF-8"
                    fix = f"convert it first, e.g. iconv -f {encoding} -t UTF-8 FILE > FILE.utf8.jsonl"
                if explicit:
                    raise InputError(problem, file=path, fix=fix)
                skip = Skip("skipped: an archive" if seen.archive is not None else "skipped: Parquet, not the format given"
                            if misfit else "skipped: not UTF-8", f"{problem}; file skipped. Fix: {fix}")
                detected = None
            else:
                detected = file_format or seen.sniffed
                if seen.ambiguous:
                    ambiguous = AmbiguousFormat(list(seen.ambiguous), file=path)
                    if explicit:
                        raise ambiguous
                    # Like a file of no known format: kept out, with a quarantine row naming the candidates.
                    skip, detected = (Skip("skipped: format ambiguous", f"{ambiguous.message}; file skipped. Fix: {ambiguous.fix}"),
                                      None)
                damaged = (None if detected is not None else head_damage(path) if seen.compression
                           else parquet_head_damage(path) if parquet else None)
                if detected is None and explicit:
                    if damaged:  # nothing could be read: a format would not help
                        raise InputError(f"no line can be read from this file: {damaged}", file=path,
                                         fix="copy or export the complete file again and ingest it")
                    raise InputError(
                        "cannot tell the format of this file from its content",
                        file=path,
                        fix=f"pass --format ({', '.join(FORMATS.names())}) if it is one of them",
                    )
                if detected is not None and skip is None and seen.json_array:
                    problem = f"the file is a JSON array, and format {detected!r} reads JSON Lines (one object a line)"
                    unpack = {"gzip": "zcat FILE | ", "zstd": "zstdcat FILE | "}.get(seen.compression or "", "")
                    fix = (f"write one object a line ({unpack}jq -c '.[]' {'' if unpack else 'FILE '}> FILE.jsonl) "
                           "and ingest that")
                    if explicit:
                        raise InputError(problem, file=path, fix=fix)
                    skip, detected = Skip(JSON_ARRAY_STATUS, f"{problem}; file skipped. Fix: {fix}"), None
                if detected is None and damaged and skip is None:
                    skip = Skip("skipped: damaged before its first line",
                                f"no line can be read from this file: {damaged}; file skipped. Fix: copy or export the "
                                "complete file again and ingest it")
                if detected == "mapped" and profile is not None:
                    from forensics.ingest.formats.mapped import check_profile

                    check_profile(path, profile)  # a path that resolves in no record is a ConfigError before any work
            if detected is not None and skip is None:
                # (the same content under a second name is read once, as the first name says: ingest stages that one)
                read_formats.setdefault(sha, (path, detected, file_format is not None))
            if detected is None or not FORMATS.get(detected).splittable:
                # Its records may span lines: one worker reads it whole. A file skipped or of no known
                # format is not read at all: one unit, one quarantine row, however big.
                spans = [Span(0, None, 1)]
            plan.append((path, sha, detected, spans, skip, seen))

        base = cfg.file.parent if cfg.file else None
        run_files: list[dict[str, Any]] = []
        parquet_files: set[str] = set()  # SHA-256 of the Parquet files of this run (never batched)
        hashed: list[tuple[dict[str, Any], Path]] = []  # the files read only as far as they were hashed
        units: list[Unit] = []
        replaced: list[dict[str, Any]] = []  # entries of the case a grown copy of the same log replaces
        for path, sha, detected, spans, skip, seen in plan:
            shown = display_path(path, base)
            zone = zones.get(path) or zone_for(detected, cfg.timezone)
            earlier_zone = known[sha].get("zone", zone_for(known[sha].get("format"), cfg.timezone)) if sha in known else zone
            if earlier_zone != zone and sha not in held_before and seen.size and detected is not None:
                # The same content under two inputs of this ingest whose zones differ: it is read once, in one of them,
                # which would be chosen by the order of their formats. (Empty or skipped content reads alike in any.)
                raise ConfigError(f"the same content is under two inputs whose times with no zone are read in different "
                                  f"zones ({known[sha]['path']}: {earlier_zone}; this file: {zone})", file=path,
                                  fix="give the [[inputs]] entries holding them the same timezone, or leave the copy out")
            if earlier_zone != zone and sha in held_before and known[sha].get("zone_assumed"):
                # Its rows were read in another zone: skipping it as already ingested would keep them, hours off. (Content
                # with no time lacking a zone, an empty file or a skipped one, reads the same in any.)
                raise ConfigError(f"this file was ingested into the case before with its times read as {earlier_zone}, "
                                  f"now {zone}", file=path,
                                  fix="give the case file it was ingested with (--config), or ingest into a new case folder "
                                      "(forensics run always starts afresh)")
            mapping = profile.to_json() if detected == "mapped" and profile is not None else None
            if sha in known and mapping is not None and known[sha].get("profile", mapping) != mapping:
                # Its rows were read through another profile: skipping it as already ingested would
                # keep them, silently, whatever the corrected profile says.
                raise ConfigError("this file was ingested into the case before, through another mapping profile", file=path,
                                  fix="ingest into a new case folder (forensics run always starts afresh)")
            if sha in known:
                if sha in held_before:
                    read_formats.pop(sha, None)  # not read again: what the ingest that read it said of it stands
                # Every name of identical content is recorded: each is evidence that must not change.
                entry = known[sha]
                entry["paths"] = sorted({*entry["paths"], shown})
                entry["abs_paths"] = sorted({*entry.get("abs_paths", [entry.get("abs_path")]), str(named_path(path))} - {None})
                run_files.append({**_zero_counts(), "path": shown, "sha256": sha, "format": entry.get("format"),
                                  "status": "already ingested (same SHA-256)"})
                continue
            # The same name; or the same one file named by another rule (a case begun when inputs beside the
            # case file's folder were named by their absolute path, or ingested once without the case file).
            named = str(named_path(path))
            for old in [s for s, e in known.items() if id(e) in in_case
                        and (e.get("paths") == [shown] or _one_file(e) == named) and _starts(path, e)]:
                replaced.append(known.pop(old))  # the earlier copy of a log that grew: the complete one replaces it
            known[sha] = _new_entry(path, shown, sha, detected, seen, skip)
            if zones.get(path):
                known[sha]["zone"] = zone  # (its [[inputs]] entry's: the finaliser's note names it)
            if seen.parquet:
                parquet_files.add(sha)
            if detected is not None and spans[-1].end is not None:  # read up to where it was hashed (a live log may grow)
                known[sha]["size"] = spans[-1].end
                hashed.append((known[sha], path))
            if mapping is not None:
                known[sha]["profile"] = mapping  # what its rows were read through (checked on a later ingest)
            run_files.append(known[sha])
            for part, span in enumerate(spans):
                units.append(Unit(str(path), table_text(shown), sha, detected, part, span, zone, cfg.tenant_field,
                                  str(cfg.tokenizer) if cfg.tokenizer else None, str(c.staging), skip,
                                  profile if detected == "mapped" else None,
                                  cfg.real_ceiling_tokens if isinstance(cfg.real_ceiling_tokens, int) else None))

        skipped_inputs = {e["path"]: e for e in manifest.get("skipped_inputs", [])}
        for item in skipped:
            shown = display_path(item.path, base)
            skipped_inputs[shown] = {"path": shown, "kind": item.kind, "reason": item.reason}
            run_files.append({**_zero_counts(), "path": shown, "sha256": None, "format": None, "status": f"skipped: {item.kind}"})

        _clear_staging(c.staging, {u.sha for u in units} | {e["sha256"] for e in replaced}, set(known))
        rep = reporter(progress)
        task = rep.task("ingest", total=sum(u.size() for u in units) or None)
        work = batched(units, {sha: e for sha, e in known.items() if sha not in parquet_files})
        earlier_band = manifest.get("prompt_tokens_band", {})  # earlier runs into this case
        band_by_file = {sha: BandStats(**rows) for sha, rows in earlier_band.get("rows_by_file", {}).items()}
        # A case ingested before the counts were kept per file has only their sum, carried on as it is.
        band_unfiled = BandStats(**(earlier_band.get("rows_unfiled", {}) if "rows_by_file" in earlier_band
                                    else earlier_band.get("rows", {})))
        band_unfiled.ceiling = None
        band_files: dict[str, int] = dict(earlier_band.get("ceiling_by_file", {}))
        for e in replaced:
            band_files.pop(e["sha256"], None)
            band_by_file.pop(e["sha256"], None)  # the replaced copy's rows are gone from the case
        for unit, counts in (spark.stage_units(work) if spark is not None else _run_units(work, pool, in_process)):
            band_by_file.setdefault(unit.sha, BandStats()).add(BandStats(**counts["prompt_tokens_band"]))
            if unit.tokenizer and unit.ceiling is not None:
                band_files[unit.sha] = unit.ceiling
            entry = known[unit.sha]
            for key in ("lines", "quarantined", "blank", "parsed", "zone_assumed", "no_tenant"):
                entry[key] += counts[key]
            entry["problems"].extend(counts["problems"])
            entry.setdefault("stream_damage", []).extend(counts["stream_damage"])
            for kind, n in counts["skipped_records"].items():
                skipped_records = entry.setdefault("skipped_records", {})
                skipped_records[kind] = skipped_records.get(kind, 0) + n
            if counts["status"] != "ingested":
                entry["status"] = counts["status"]
            first = counts.get("first_unread")
            if first and (entry.get("first_unread") is None or first[0] < entry["first_unread"][0]):
                entry["first_unread"] = list(first)  # the file's first line set aside, not for naming no customer
            if counts.get("tenant_aliases"):
                entry["tenant_aliases"] = sorted({*map(tuple, entry.get("tenant_aliases", [])),
                                                  *map(tuple, counts["tenant_aliases"])})
            task.advance(unit.size())
    task.close()
    changed = _changed_since_hashed(hashed)
    for entry in known.values():
        entry["ingested"] = entry["parsed"]
    tenantless = _check_tenants(known.values(), cfg)
    run_files = [
        {k: f[k] for k in ("path", "sha256", "format", "lines", "ingested", "quarantined", "blank", "duplicate", "status")}
        for f in run_files
    ]

    case_manifest = finalize(c, list(known.values()), cfg, progress, [skipped_inputs[k] for k in sorted(skipped_inputs)],
                             band_files)
    band = BandStats()
    for stats in [band_unfiled, *band_by_file.values()]:
        band.add(stats)
    band.ceiling = cfg.real_ceiling_tokens if cfg.tokenizer and isinstance(cfg.real_ceiling_tokens, int) else None
    if replaced:
        names = first_few([e["path"] for e in replaced])
        case_manifest = dataclasses.replace(case_manifest, history=(
            f"{len(replaced)} {'files' if len(replaced) > 1 else 'file'} grew since {'they were' if len(replaced) > 1 else 'it was'} "
            f"last ingested: the earlier copy is the start of the complete one, which replaced it (its rows are "
            f"now the complete file's): {names}",))
    if changed:
        case_manifest = dataclasses.replace(case_manifest, notes=(*case_manifest.notes, *changed))
    aliases = tenant_aliases(c, known.values())
    for sha, said in _misread(c, known, read_formats).items():
        known[sha]["read_warning"] = said
    # Every file's, in the order of their paths: a case ingested in one call or several (verify --rerun ingests format
    # by format) says the same.
    read_warnings = [e["read_warning"] for e in sorted(known.values(), key=lambda e: (e["path"], e["sha256"]))
                     if e.get("read_warning")]
    case_warnings = _nameless_records(known.values(), tenantless, cfg) + read_warnings + _aliases_note(aliases)
    warnings = case_warnings
    case_manifest = dataclasses.replace(case_manifest, tenant_aliases=tuple(aliases) or None)
    if warnings:
        case_manifest = dataclasses.replace(case_manifest, notes=(*case_manifest.notes, *warnings))
    case_manifest = dataclasses.replace(case_manifest, tool={"name": "forensics", "version": __version__}, prompt_tokens_band={
        "rule": "with a tokenizer file and a numeric ceiling at ingest, a prompt is not tokenized when "
                f"{BAND_TOKENS_PER_BYTE} x its UTF-8 bytes (after the tokenizer's normaliser) + "
                f"{TEMPLATE_TOKENS_PER_MESSAGE} x messages + {TEMPLATE_TOKENS_FIXED} < the ceiling: no tokenizer "
                "can make it reach the ceiling; it keeps the reported or estimated count (forensics.tokens)",
        "rows": dataclasses.asdict(band),
        # Per file (SHA-256), so a log replaced by its grown copy takes its rows out of the sum.
        "rows_by_file": {sha: _band_counts(band_by_file[sha]) for sha in sorted(band_by_file)
                         if band_by_file[sha].counted or band_by_file[sha].decided_below},
        **({"rows_unfiled": _band_counts(band_unfiled)} if band_unfiled.counted or band_unfiled.decided_below else {}),
        # Per file (SHA-256): the ceiling its rows were decided against (the finaliser needs it on later runs).
        "ceiling_by_file": dict(sorted(band_files.items())),
    })
    if manifest.get("files") and manifest.get("tokenizer") and not manifest.get("tokenizer_sha256"):
        # A case begun before the tokenizer's content was recorded: which file read its earlier rows is not known,
        # so this run's file is not recorded as the case's either.
        case_manifest = dataclasses.replace(case_manifest, tokenizer_sha256=None)
    write_json(c.manifest_path, case_manifest.to_json())
    save(_settings_to_keep(cfg, c.config_path), c.config_path)
    by_sha = {f["sha256"]: f for f in case_manifest.files}
    for f in run_files:
        # Every file staged by this run (damaged ones too) shows the figures the finaliser settled.
        if not f["status"].startswith("already") and f["sha256"] in by_sha:
            final = by_sha[f["sha256"]]
            f.update({k: final[k] for k in ("ingested", "duplicate")})
    return IngestResult(c.root, case_manifest, run_files, case_warnings)


def _band_counts(stats: BandStats) -> dict[str, int]:
    """One file's band figures for the manifest (the ceiling is the case's, recorded once)."""
    return {"counted": stats.counted, "decided_below": stats.decided_below, "highest_bound": stats.highest_bound}


def _one_file(entry: dict[str, Any]) -> str | None:
    """The one file (resolved path) an entry of the case was read from under all its names, else None. A case
    begun before ``abs_paths`` was kept recorded only its first name's file: that is the one file only when
    the entry has one name."""
    if "abs_paths" in entry:
        return entry["abs_paths"][0] if len(entry["abs_paths"]) == 1 else None
    return entry.get("abs_path") if len(entry.get("paths") or ()) == 1 else None


def _starts(path: Path, entry: dict[str, Any]) -> bool:
    """Whether the plain file ``path`` begins with the content an earlier ingest recorded in ``entry`` (its
    ``size`` bytes hash to its SHA-256): the earlier copy of a log that has grown since."""
    size = entry.get("size")
    if entry.get("compression") or not isinstance(size, int) or size <= 0:
        return False
    try:
        return sha256_file(path, limit=size) == entry.get("sha256")
    except OSError:
        return False


def _changed_since_hashed(hashed: list[tuple[dict[str, Any], Path]]) -> list[str]:
    """Notes on the files whose size changed while they were read (each ``(entry, path)`` was read only
    as far as it was hashed, ``entry["size"]`` bytes): a live log that grew, or one cut short."""
    grew: list[str] = []
    shrank: list[str] = []
    for entry, path in hashed:
        try:
            now = os.stat(path).st_size
        except OSError:
            now = 0
        if now > entry["size"]:
            grew.append(f"{entry['path']} (+{now - entry['size']:,} bytes)")
        elif now < entry["size"]:
            shrank.append(f"{entry['path']} ({entry['size'] - now:,} bytes fewer)")
    notes = []
    if grew:
        notes.append(f"{len(grew)} files grew while they were read (logs still being written): only the bytes their "
                     f"SHA-256 covers were read, and the bytes appended after it were not: {', '.join(grew[:5])}. Fix: "
                     "ingest them again once they are complete (the complete copy then replaces the one read now)")
    if shrank:
        notes.append(f"{len(shrank)} files shrank while they were read (cut or rotated in place): their last records may "
                     f"be missing from the case though their SHA-256 covers them: {', '.join(shrank[:5])}. Fix: copy the "
                     "logs where nothing writes to them and ingest the copy into a new case")
    return notes


def read_damage(case: str | Path, request_ids: Iterable[str] | None = None) -> dict[tuple[str, str | None], str | None]:
    """``exchanges.damage`` of the rows of ``request_ids`` (every row when None), keyed by
    ``(request_id, tenant_id)`` (a request id may be used by several tenants).

    A value is None for a clean record, else ``;``-joined reasons (``schema.damage_reasons``
    splits it; the rules are in forensics.schema). Requests the case does not hold are absent.
    """
    c = Case(case)
    path = c.require("exchanges", "ingest")
    if "damage" not in pq.read_schema(path).names:
        raise CaseError("the exchanges table was written before the damage column existed", file=path,
                        fix="ingest the logs again into a new case folder (forensics ingest --case NEW_CASE ...)")
    filters = None
    if request_ids is not None:
        ids = sorted(set(request_ids))
        if not ids:
            return {}
        filters = [("request_id", "in", ids)]
    table = pq.read_table(path, columns=["request_id", "tenant_id", "damage"], filters=filters)
    rows = zip(*(table.column(n).to_pylist() for n in ("request_id", "tenant_id", "damage")))
    return {(rid, tenant): damage for rid, tenant, damage in rows}


def _gateway_entries(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The manifest entries of files whose records name customers (gateway formats, or of no known format): engine
    logs read alongside parse with no customer, and must not count as records naming none."""
    return [e for e in entries if e.get("format") not in FORMATS or FORMATS.get(e["format"]).table == "exchanges"]


def _check_tenants(entries: Any, cfg: CaseConfig) -> list[str]:
    """Refuse a tenant rule that names no customer in any record of the case: every record would be
    lost to quarantine and the notification list would silently come out empty. Return the files
    where it named none (their records are quarantined, each with the reason): one such file among
    others is bad input, not a bad rule, and must not stop the run."""
    # Only gateway files name customers: engine logs read alongside (their lines parse, with no tenant) must
    # not hide a rule that names none.
    entries = _gateway_entries(entries)
    lost = [e for e in entries if e.get("no_tenant") and e["parsed"] == 0 and e["no_tenant"] == e["quarantined"]]
    if lost and not any(e["parsed"] for e in entries):
        entry = lost[0]
        raise ConfigError(
            f"tenant_field {cfg.tenant_field!r} names no customer in any of the {entry['no_tenant']} records of this file"
            + (f" (nor in {len(lost) - 1} other files)" if len(lost) > 1 else ""),
            file=entry["path"],
            fix="set tenant_field (case file or --tenant-field) to the field that names the customer, e.g. "
            "organization_id, team_id or metadata.user_api_key_team_id",
        )
    return [e["path"] for e in lost]


def _nameless_records(entries: Any, tenantless: list[str], cfg: CaseConfig) -> list[str]:
    """The note on gateway records quarantined because the tenant rule names no customer in them: their customers
    cannot be on the list. A rule that fits one kind of record only (a spend log's column, absent from the callback
    payloads beside it) lost most of a case's records with one note in the summary."""
    nameless = sorted((e["path"], e["no_tenant"]) for e in _gateway_entries(entries) if e.get("no_tenant"))
    if not nameless:
        return []
    total = sum(n for _, n in nameless)
    whole = (f"; {len(tenantless)} of those files {'name' if len(tenantless) > 1 else 'names'} none in any record"
             if tenantless else "")
    or_auto = "" if cfg.tenant_field in ("auto", "") else ', or "auto"'
    return [f"{total} record{'s' if total > 1 else ''} in {len(nameless)} file{'s' if len(nameless) > 1 else ''} name no "
            f"customer by the tenant rule (tenant_field {cfg.tenant_field!r}){whole}: they were quarantined, and their "
            f"customers cannot be on the list ({first_few([f'{path} ({n})' for path, n in nameless])}). Fix: set "
            f"tenant_field (case file or --tenant-field) to the field that names the customer in every record"
            f"{or_auto}, and ingest again"]


def tenant_aliases(c: Case, entries: Iterable[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(tenant, field, other tenant): a customer id the records of ``tenant`` hold in ``field``, a tenant field after
    the one that named it, which other records give as their customer (a team's key with no organisation set, beside
    the team's records that name the organisation). The two ids may be one customer: the match stage sends their
    findings with each other to review. Only ids both of the case's exchanges hold."""
    triples = {tuple(t) for e in entries for t in e.get("tenant_aliases") or ()}
    table = c.table_path("exchanges")
    if not triples or not table.exists():
        return []
    import duckdb  # (not at the top: the staging workers import this module and never query)

    with duckdb.connect() as con:
        tenants = {t for (t,) in con.execute("SELECT DISTINCT tenant_id FROM read_parquet(?) WHERE tenant_id IS NOT NULL",
                                             [str(table)]).fetchall()}
    return sorted((str(t), str(f), str(o)) for t, f, o in triples if t in tenants and o in tenants and t != o)


def _aliases_note(aliases: list[tuple[str, str, str]]) -> list[str]:
    """The warning naming customer ids that other customers' records hold (:func:`tenant_aliases`), each pair once."""
    if not aliases:
        return []
    fields: dict[tuple[str, str], list[str]] = {}
    for tenant, field, other in aliases:
        fields.setdefault((tenant, other), []).append(field)
    shown = first_few([f"{other!r} ({' and '.join(sorted(f))} of {tenant!r})" for (tenant, other), f in sorted(fields.items())])
    n = len({other for _, other in fields})  # (ids: one held by two customers' records is one)
    return [f"{n} customer id{'s' if n > 1 else ''} of the case {'are' if n > 1 else 'is'} "
            f"held by another customer's records in a later tenant field: {shown}. Each pair may be one customer (a "
            "team's key with no organisation set, beside the team's records that name its organisation), so the "
            "findings between them go to review, not to the list. Fix: if they are one customer, set tenant_field to "
            "the field that names it in every record, and ingest again"]


def _misread(c: Case, known: dict[str, dict[str, Any]], read_formats: dict[str, tuple[Path, str, bool]]) -> dict[str, str]:
    """Per file of this ingest (SHA-256), the warning when nothing of it was understood: no record read (a gateway
    format) or only lines of no known kind (an engine format given for it, which keeps every line). A wrong format was
    accepted without a word: every engine line kept as ``unknown`` lost the ceiling's cross-check and every engine
    signature, and the list changed (a review). The format is blamed only where it was given and the lines read as
    another (or, for a mapped input, the profile); a file of the right format, given or sniffed, none of whose
    records could be read is named with its first line's reason. Records set aside only for naming no customer have
    a note of their own (:func:`_nameless_records`): they are left out of both."""
    unread: dict[str, int] = {}  # lines set aside for another reason than naming no customer
    for sha, (_, fmt, _) in read_formats.items():
        entry = known.get(sha)
        if entry is not None and FORMATS.get(fmt).table != "engine_events" and not entry.get("parsed"):
            n = entry.get("quarantined", 0) - entry.get("no_tenant", 0)
            if n > 0:
                unread[sha] = n
    # The first line set aside not for naming no customer, as the staging noted it (by the record, not by its text:
    # each format words a missing customer its own way), without its own fix ("re-export this record" is no fix for
    # a file read in a wrong format).
    why = {sha: f"; the first line's reason: {known[sha]['first_unread'][1].split('. Fix: ')[0]}"
           for sha in unread if known[sha].get("first_unread")}
    engine_shas = [sha for sha, (_, fmt, given) in read_formats.items() if given and FORMATS.get(fmt).table == "engine_events"]
    events = c.table_path("engine_events")
    if engine_shas and events.exists():
        import duckdb  # (not at the top: the staging workers import this module and never query)

        with duckdb.connect() as con:
            for sha, understood, lines in con.execute(
                    "SELECT source_sha256, count(*) FILTER (WHERE event <> 'unknown'), count(*) FROM read_parquet(?) "
                    "WHERE list_contains(?, source_sha256) GROUP BY 1", [str(events), engine_shas]).fetchall():
                if not understood and lines:
                    unread[sha] = lines
    out = {}
    for sha, (path, fmt, given) in sorted(read_formats.items(), key=lambda item: str(item[1][0])):
        if sha not in unread:
            continue
        lines, shown = unread[sha], known[sha]["path"]
        try:
            reads_as = sniff(path) if given else fmt
        except (AmbiguousFormat, OSError):
            reads_as = None
        if reads_as == fmt and fmt != "mapped":
            if FORMATS.get(fmt).table != "engine_events":  # (an engine log of no known line is no misread)
                out[sha] = (f"{shown}: none of its {lines} line{'s' if lines > 1 else ''} could be read as {fmt}"
                            f"{why.get(sha, '')}. Fix: quarantine.parquet says why each line was set aside; correct or "
                            f"re-export the file, and {AGAIN}")
            continue
        hint = f" (its lines read as {reads_as})" if reads_as is not None else ""
        fix = ("check the [[inputs]] entry's [inputs.fields] and time_format against a record of the file (`forensics "
               "profile` drafts them)" if fmt == "mapped" else "give the format that matches (the [[inputs]] entry's "
               "format, or --format), or leave it out to have it sniffed")
        out[sha] = (f"{shown}: none of its {lines} line{'s' if lines > 1 else ''} is a record of the format given for it, "
                    f"{fmt!r}{hint}{why.get(sha, '')}. Fix: {fix}, and {AGAIN}")
    return out


#: How a file the case read wrongly is read again: a case never reads again a file it holds (by its SHA-256).
AGAIN = "ingest it again into a new case folder (`forensics run` makes one each time)"


def _zero_counts() -> dict[str, int]:
    return {"lines": 0, "ingested": 0, "quarantined": 0, "blank": 0, "duplicate": 0}


def _excerpt(text: str | None, raw: bytes) -> str:
    # From the bytes when the line was not decoded: for UTF-8 the same characters, since
    # EXCERPT_CHARS characters never take more than 4 bytes each.
    if text is None:
        text = raw[: schema.EXCERPT_CHARS * 4].decode("utf-8", errors="backslashreplace")
    return text[: schema.EXCERPT_CHARS]


def _parser_bug(exc: Exception) -> Quarantined:
    """The quarantine reason for a line whose parser raised: it costs that line, never the run."""
    return Quarantined(f"unexpected {type(exc).__name__} while parsing: {str(exc)[:200]}. Fix: correct or re-export this "
                       "record and ingest the file again; please report the excerpt to the forensics maintainers (the "
                       "rest of the file was ingested)")


@dataclasses.dataclass(frozen=True)
class Skip:
    """Why a file is not read: its status in the manifest and its whole-file quarantine reason."""

    status: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Unit:
    """One piece of parsing work: a whole file, or a line-aligned byte span of a big plain file."""

    path: str
    shown: str
    sha: str
    fmt: str | None
    part: int
    span: Span
    zone: str
    tenant_field: str
    tokenizer: str | None
    staging: str
    skip: Skip | None = None  # why the file is not read (its format or encoding), else None
    profile: Profile | None = None  # format "mapped": where each column lives
    ceiling: int | None = None  # the case's real ceiling when known at ingest: rows far below it are not tokenized

    def size(self) -> int:
        """Bytes this unit reads (for progress; 0 for a file gone since it was hashed, reported when read)."""
        try:
            end = self.span.end if self.span.end is not None else Path(self.path).stat().st_size
        except OSError:
            return 0
        return max(0, end - self.span.start)


@dataclasses.dataclass(frozen=True)
class Batch:
    """Small whole files staged together, in the order the finaliser reads them (path, then SHA-256)."""

    units: tuple[Unit, ...]

    def size(self) -> int:
        """Bytes the batch reads."""
        return sum(u.size() for u in self.units)


def _small(entry: dict[str, Any]) -> bool:
    """Whether a file (its manifest entry) is staged in a batch: plain text of at most SMALL_FILE_BYTES.

    Its staged rows are then small, so the finaliser reads each file's rows from a batch whole, as it reads
    a small file's own staging file. A compressed file (or a Parquet one) may stage many times its size:
    read in pieces from its own staging file, in one piece from a batch, its rows would give the case table
    other pages, and other bytes. (A plain file can too, rarely: :func:`stage_batch` stages it alone.)
    """
    return entry.get("size", SMALL_FILE_BYTES + 1) <= SMALL_FILE_BYTES and entry.get("compression") is None


def batched(units: list[Unit], entries: dict[str, dict[str, Any]]) -> list[Unit | Batch]:
    """``units`` with the small whole files (:func:`_small`, ``entries`` the manifest's by SHA-256, Parquet
    files left out) gathered into batches.

    A batch's files are consecutive in the finaliser's order (path, then SHA-256) among the small files
    of this run; a file of another run, or a big one, may sort between two of them (the finaliser reads a
    batch's files apart then). A lone small file stays a unit of its own.
    """
    parts: dict[str, int] = {}
    for u in units:
        parts[u.sha] = parts.get(u.sha, 0) + 1
    small = sorted((u for u in units if parts[u.sha] == 1 and u.sha in entries and _small(entries[u.sha])),
                   key=lambda u: (u.shown, u.sha))
    chosen = {id(u) for u in small}
    work: list[Unit | Batch] = [u for u in units if id(u) not in chosen]
    group: list[Unit] = []
    total = 0

    def close() -> None:
        if len(group) == 1:
            work.append(group[0])
        elif group:
            work.append(Batch(tuple(group)))

    for u in small:
        size = entries[u.sha]["size"]
        if group and (len(group) >= BATCH_FILES or total + size > BATCH_FILE_BYTES):
            close()
            group, total = [], 0
        group.append(u)
        total += size
    close()
    return work


#: The status of a file skipped as a JSON array where its format reads JSON Lines.
JSON_ARRAY_STATUS = "skipped: a JSON array, not JSON Lines"

#: A file found in a folder that no format reads, unless a :class:`Skip` says why.
UNRECOGNISED = Skip("skipped: format not recognised",
                    "format not recognised; file skipped. Fix: pass --format if it is a log of a known format")


def _saved_inputs(c: Case, cfg: CaseConfig, held: bool) -> CaseConfig:
    """``cfg`` with the ``[[inputs]]`` of the configuration the case saved (none saved: ``cfg`` as it is). ``held``:
    the case holds files already, so a saved configuration that is missing or unreadable is an error: the zones
    those files were read in could not be told, and a file added would be read in another beside them."""
    path = c.config_path
    if not path.is_file():
        if held:
            raise CaseError("the case holds logs but no config.json, which says the zones their times were read in",
                            file=path, fix="give the case file the case was ingested with (--config)")
        return cfg
    try:
        saved = load_saved(path)  # (an entry's unknown zone is a ConfigError there)
    except (OSError, ValueError, KeyError, TypeError, ConfigError) as exc:
        raise CaseError(f"the case's saved configuration cannot be read ({type(exc).__name__}: {exc})", file=path,
                        fix="give the case file the case was ingested with (--config)") from None
    return dataclasses.replace(cfg, inputs=list(saved.inputs)) if saved.inputs else cfg


def input_zones(files: Sequence[Path], cfg: CaseConfig, exclude: Path | None = None) -> dict[Path, str | None]:
    """Per file, the ``timezone`` of the case file's ``[[inputs]]`` entry that holds it (None: that entry gives none).
    Empty when no entry gives one. Where several hold it, only nesting decides: an entry naming the file itself over
    any folder, and the deepest folder over the folders above it. A pattern decides only alone, or where every entry
    holding the file agrees: a pattern and a folder that overlap with different zones are a ConfigError naming both, as
    are two entries naming one file or folder. (Ranked by depth, a broad pattern overrode a named folder; ranked by the
    files each held, a file's zone moved when unrelated files were added beside it.) An entry holds the files its own
    walk reads: a folder not those of a hidden or bookkeeping subfolder below it, which a pattern may read. ``exclude``:
    the case folder, when it lies inside an input folder (its own files are no input)."""
    specs = list(cfg.inputs)
    if not any(spec.timezone for spec in specs):
        return {}
    def read_by(spec: InputSpec) -> set[str]:  # the real paths of the files the entry's own walk reads
        try:
            found, _ = expand_inputs([spec.path], exclude=exclude)
        except (ForensicsError, OSError):
            found = []  # an entry that names nothing now holds no file
        return {os.path.realpath(p) for p, _ in found}

    named: dict[str, list[InputSpec]] = {}  # a file an entry names -> those entries
    # (depth of its real path, entry, what it reads): a folder holds only what its walk reads, not a hidden or
    # bookkeeping subfolder's files, which a pattern may read
    folders: list[tuple[int, InputSpec, set[str]]] = []
    patterns: list[tuple[InputSpec, set[str]]] = []  # (entry, the real paths of the files it matches)
    for spec in specs:
        if not spec.path.exists() and glob.has_magic(str(spec.path)):
            patterns.append((spec, read_by(spec)))
        elif spec.path.is_dir():
            folders.append((len(Path(os.path.realpath(spec.path)).parts), spec, read_by(spec)))
        else:
            named.setdefault(os.path.realpath(spec.path), []).append(spec)
    out: dict[Path, str | None] = {}
    for path in files:
        at = os.path.realpath(path)
        chosen = named.get(at, [])
        if not chosen:
            inside = [(depth, spec) for depth, spec, held in folders if at in held]
            deepest = max((n for n, _ in inside), default=0)
            chosen = [spec for n, spec in inside if n == deepest] + [spec for spec, held in patterns if at in held]
        # An entry that gives no timezone takes no side against one that does (a catch-all folder beside a pattern)
        given = {spec.timezone for spec in chosen if spec.timezone}
        if len(given) > 1:
            said = "; ".join(f"{spec.path}: {spec.timezone}" for spec in chosen if spec.timezone)
            raise ConfigError(f"{len(chosen)} [[inputs]] entries hold {path} with different timezones ({said})",
                              file=cfg.file, fix="give them the same timezone, or hold the file in one entry (a folder "
                                                 "within another, or the file itself, is the more specific)")
        if chosen:
            out[path] = given.pop() if given else None
    return out


def _new_entry(path: Path, shown: str, sha: str, fmt: str | None, seen: Examined,
               skip: Skip | None = None) -> dict[str, Any]:
    named = str(named_path(path))
    return {
        "path": shown, "paths": [shown], "abs_path": named, "abs_paths": [named],
        "sha256": sha, "size": seen.size, "format": fmt,
        "compression": seen.compression, **_zero_counts(), "parsed": 0, "problems": [], "stream_damage": [],
        "zone_assumed": 0, "no_tenant": 0,
        "status": "ingested" if fmt else (skip or UNRECOGNISED).status,
    }


def _misfit(row: dict[str, Any], table_schema: pa.Schema) -> str | None:
    """Why one row does not convert to ``table_schema`` (the first column that fails), or None."""
    for field in table_schema:
        try:
            pa.array([row.get(field.name)], field.type)
        except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
            return f"column {field.name}: {type(exc).__name__}: {str(exc)[:120]}"
    return None


def _warm() -> None:
    """A first task for a new worker: nothing, its start-up (importing this module) is the point."""


def _settings_to_keep(cfg: CaseConfig, saved_path: Path) -> CaseConfig:
    """The configuration an ingest saves as the case's: its own when it was given a case file (or the case has
    none saved), else the case's saved one with what this ingest was told by its options set on it. An ingest
    that adds logs to a case begun with a case file, given none, saved the defaults over the case's name,
    models and window: the next scan found no model, and the report went to a folder named "case"."""
    if cfg.file is not None or not saved_path.is_file():
        return cfg
    try:
        saved = load_saved(saved_path)
    except (OSError, ValueError, KeyError, TypeError):
        return cfg  # unreadable: written afresh (the scan says what is missing)
    for key, source in sorted(cfg.sources.items()):
        if source == "default":
            continue
        if key == "tokenizer":
            saved.tokenizer, saved.sources[key] = cfg.tokenizer, source
        else:
            saved.set(key, getattr(cfg, key), source)
    return saved


def _check_same_reading(manifest: dict[str, Any], cfg: CaseConfig, root: Path) -> None:
    """Refuse to add files to a case whose rows were read with other settings: the files already in it are
    not read again, so the case would hold rows read both ways while its manifest names only the new way
    (a time zone changed, and a day's records read nine hours apart from the rest)."""
    if not manifest.get("files"):
        return
    # The tokenizer by its content where the case recorded it (the same file under another name is the
    # same), else by its name.
    by_content = bool(cfg.tokenizer and manifest.get("tokenizer_sha256"))
    now: dict[str, Any] = {"timezone": cfg.timezone, "tenant_field": cfg.tenant_field}
    if not by_content:
        now["tokenizer"] = Path(cfg.tokenizer).name if cfg.tokenizer else None
    changed = [f"{key} {manifest.get(key)!r} then, {value!r} now" for key, value in now.items()
               if key in manifest and manifest.get(key) != value]
    if by_content and file_sha256(Path(str(cfg.tokenizer))) != manifest["tokenizer_sha256"]:
        changed.append(f"tokenizer {manifest.get('tokenizer')!r} then, another file {Path(str(cfg.tokenizer)).name!r} now "
                       "(its SHA-256 differs)")
    if changed:
        raise ConfigError(f"this case was ingested with other settings ({'; '.join(changed)}): the files already in it "
                          "would keep the rows read the earlier way", file=root / "manifest.json",
                          fix="ingest into a new case folder (forensics run always starts afresh), or ingest with the "
                              "settings the case was ingested with")


def _clear_staging(staging: Path, shas: set[str], case_shas: set[str]) -> None:
    """Remove whatever the staging folder holds of the files about to be staged (``shas``: those and the
    copies of grown logs they replace); ``case_shas``: the files of the case.

    A file is staged as one file per table that gets rows and per part; an earlier ingest of the same
    content that stopped before finalising (or staged it in more parts, or with other settings) may have
    left files this run does not write again, and the finaliser reads every staging file of the content.
    A batch of small files keeps the rows of its other files of the case: they are not staged again.
    """
    if not staging.is_dir():
        return
    with os.scandir(staging) as entries:
        # a temporary file too: what a run that died while writing it left
        found = [(e.name, Path(e.path)) for e in entries if not e.is_dir(follow_symlinks=False)]
    # (name, table, path, files) of each finished batch staging file
    batches = [(name, key[1], path, _members_or_none(path)) for name, path in found
               if is_batch(name) and (key := staged_key(name)) is not None]
    # A run stopped inside _keep_in_batch, between writing a batch again and removing the earlier one,
    # leaves files in two batches of a table: the one holding fewer files is the one written again.
    holder: dict[tuple[str, str], tuple[int, str]] = {}
    for name, table, _, members in batches:
        for sha in members:
            holder[(table, sha)] = min(holder.get((table, sha), (len(members), name)), (len(members), name))
    for name, table, path, members in batches:
        mine = [sha for sha in members if holder[(table, sha)][1] == name]
        # A batch holding a file about to be staged (read again, it would count twice) also holds small files
        # this run does not stage again (already in the case): they keep their rows.
        if staged_content(name) in shas or not shas.isdisjoint(members) or len(mine) < len(members):
            _keep_in_batch(path, table, [sha for sha in mine if sha in case_shas and sha not in shas])
    for name, path in found:
        if not is_batch(name) and staged_content(name) in shas:
            path.unlink(missing_ok=True)


def _keep_in_batch(path: Path, table: str, kept: list[str]) -> None:
    """Keep only the rows of the files ``kept`` (in staging order) in the batch staging file ``path`` of
    ``table``: written again, in a batch named after the first of them; with none, the batch is removed."""
    import pyarrow.compute as pc  # here, not at import: the staging workers never need it

    if kept:
        staged = pq.read_table(path)
        rows = staged.filter(pc.is_in(staged.column("source_sha256"), value_set=pa.array(kept, pa.string())))
        target = batch_path(path.parent, kept[0], table)
        with ParquetSink(target, with_members(rows.schema, kept), STAGING_OPTIONS) as sink:
            sink.write_batch(rows)
        if target == path:
            return
    path.unlink(missing_ok=True)


def _members_or_none(path: Path) -> list[str]:
    """A batch staging file's files, or none when it cannot be read: the finaliser then skips it, unless it is
    named after a file of the case (a batch of the case, whose damage it reports)."""
    try:
        return batch_members(path)
    except (OSError, pa.ArrowException):
        return []


def _worth_a_pool(total_bytes: int, files: int) -> bool:
    """Whether staging this input on a process pool beats one process."""
    return total_bytes >= PARALLEL_BYTES or files >= PARALLEL_FILES


def _early_pool(stack: contextlib.ExitStack, paths: list[Path]) -> concurrent.futures.ProcessPoolExecutor | None:
    """The process pool :func:`_run_units` will use, started in ``stack`` when the files found are worth
    it (:func:`_worth_a_pool`: files already in the case count too, they are known only once hashed),
    each worker already given a first task so that it starts now; else None."""
    try:
        total = sum(os.stat(p).st_size for p in paths)
    except OSError:
        return None  # reported where the file is read
    workers = min(os.cpu_count() or 1, MAX_WORKERS)
    if workers <= 1 or not _worth_a_pool(total, len(paths)):
        return None
    ctx = multiprocessing.get_context("spawn")  # no fork: DuckDB and Arrow threads do not survive it
    pool = stack.enter_context(pool_running(workers, ctx))  # workers die with this process, and are killed on a signal
    for _ in range(workers):  # a worker is spawned per task waiting while none is idle
        pool.submit(_warm)
    return pool


def _run_units(work: list[Unit | Batch], pool: concurrent.futures.ProcessPoolExecutor | None = None,
               in_process: bool = False) -> Iterator[tuple[Unit, dict[str, Any]]]:
    """Stage every unit and batch: on a process pool (both cores; ``pool`` when one was started early) when
    the input is big or comes in many files (:func:`_worth_a_pool`), else (or ``in_process``) in this
    process. Yields each unit (a batch's one by one) with its counts."""
    units = [u for item in work for u in (item.units if isinstance(item, Batch) else (item,))]
    total = sum(u.size() for u in units)
    workers = min(os.cpu_count() or 1, MAX_WORKERS, len(work))
    if in_process or workers <= 1 or not _worth_a_pool(total, len(units)):
        for item in work:
            yield from _paired(item, stage_work(item))
        return
    if pool is not None:
        for item, counts in zip(work, pool.map(stage_work, work)):
            yield from _paired(item, counts)
        return
    ctx = multiprocessing.get_context("spawn")  # no fork: DuckDB and Arrow threads do not survive it
    with pool_running(workers, ctx) as own:  # workers die with this process, and are killed on a signal
        for item, counts in zip(work, own.map(stage_work, work)):
            yield from _paired(item, counts)


def _paired(item: Unit | Batch, counts: list[dict[str, Any]]) -> Iterator[tuple[Unit, dict[str, Any]]]:
    return zip(item.units if isinstance(item, Batch) else (item,), counts, strict=True)


def stage_work(item: Unit | Batch) -> list[dict[str, Any]]:
    """Stage a unit or a batch; the counts of each of its units."""
    return stage_batch(item) if isinstance(item, Batch) else [stage_unit(item)]


class RowSink(Protocol):
    """Where :func:`_stage` writes a table's rows: a staging file, or a batch's."""

    schema: pa.Schema

    def write_rows(self, rows: list[dict[str, Any]]) -> None:
        """Append rows (a row that does not fit the schema raises, and nothing of ``rows`` is written)."""


class _BatchSink:
    """A batch's staging file of one table, written a few thousand rows at a time: a write per file of one
    record was most of what staging a batch of them cost. (Each file's rows are converted while it is
    parsed, :class:`_FileRows`: a value that does not fit fails in its own file, which quarantines the row.)
    """

    def __init__(self, sink: ParquetSink) -> None:
        self.sink = sink
        self.schema = sink.schema
        self._pending: list[pa.RecordBatch] = []
        self._rows = self._bytes = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Write ``batch`` (rows already converted) with the next ones."""
        self._pending.append(batch)
        self._rows += batch.num_rows
        self._bytes += batch.nbytes
        if self._rows >= BATCH_ROWS or self._bytes >= BATCH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            self.sink.write_batch(pa.Table.from_batches(self._pending))
        self._pending, self._rows, self._bytes = [], 0, 0

    def close(self) -> None:
        """Write what is pending and finish the file."""
        self._flush()
        self.sink.close()

    def abort(self) -> None:
        """Drop the partial file."""
        self.sink.abort()


#: A file of a batch whose exchange rows come to more than this (in memory) stages them alone: the finaliser
#: reads a staging file about READ_BATCH_BYTES at a time (finalize.read_batch_rows), a batch's files whole;
#: far below it, the two read a file's rows in the same pieces (the case table's bytes follow them).
BATCH_MEMBER_BYTES = 1 << 20


class _FileRows:
    """One file's rows of one table in a batch (:class:`RowSink`): converted as they come (a value that does
    not fit raises here, in its own file's parsing) and handed to the batch's staging file, except the
    exchange rows, held until the file is parsed or until they pass BATCH_MEMBER_BYTES, when they go to a
    staging file of the file's own (as :func:`stage_unit` writes it: one write per flush), the rest with them."""

    def __init__(self, table_schema: pa.Schema, batch_sink: Callable[[], _BatchSink],
                 own_sink: Callable[[], ParquetSink] | None) -> None:
        self.schema = table_schema
        self._batch_sink = batch_sink
        self._own_sink = own_sink  # None: the rows go to the batch as they come
        self._held: list[pa.RecordBatch] = []
        self._held_bytes = 0
        self.own: ParquetSink | None = None

    def write_rows(self, rows: list[dict[str, Any]]) -> None:
        """Convert ``rows`` and pass them on (or hold them)."""
        if not rows:
            return
        batch = rows_batch(rows, self.schema)
        if self._own_sink is None:
            self._batch_sink().add(batch)
        elif self.own is not None:
            self.own.write_batch(batch)
        else:
            self._held.append(batch)
            self._held_bytes += batch.nbytes
            if self._held_bytes > BATCH_MEMBER_BYTES:
                self.own = self._own_sink()
                for held in self._held:
                    self.own.write_batch(held)
                self._held, self._held_bytes = [], 0

    def finish(self) -> None:
        """The file is parsed: its held rows go to the batch, or its own staging file is finished."""
        if self.own is not None:
            self.own.close()
        elif self._held:
            for held in self._held:
                self._batch_sink().add(held)
            self._held = []


def stage_batch(batch: Batch) -> list[dict[str, Any]]:
    """Parse a batch of small files into one set of staging files (named after its first file, listing its
    files in their metadata); return each file's line counts. A file whose exchange rows turn out big
    (:data:`BATCH_MEMBER_BYTES`) stages them in a file of its own, as :func:`stage_unit` does."""
    first = batch.units[0]
    members = [u.sha for u in batch.units]
    sinks: dict[str, _BatchSink] = {}
    alone: list[ParquetSink] = []

    def batch_sink(table: str) -> _BatchSink:
        if table not in sinks:
            sinks[table] = _BatchSink(ParquetSink(batch_path(Path(first.staging), first.sha, table),
                                                  with_members(STAGED_SCHEMAS.get(table, schema.TABLES[table]), members),
                                                  STAGING_OPTIONS))
        return sinks[table]

    def own_sink(unit: Unit, table: str) -> ParquetSink:
        alone.append(ParquetSink(staged_path(Path(unit.staging), unit.sha, unit.part, table),
                                 STAGED_SCHEMAS.get(table, schema.TABLES[table]), STAGING_OPTIONS))
        return alone[-1]

    try:
        counts = []
        for unit in batch.units:
            rows: dict[str, _FileRows] = {}

            def sink(table: str, unit: Unit = unit, rows: dict[str, _FileRows] = rows) -> _FileRows:
                if table not in rows:
                    rows[table] = _FileRows(STAGED_SCHEMAS.get(table, schema.TABLES[table]),
                                            functools.partial(batch_sink, table),
                                            functools.partial(own_sink, unit, table) if table == "exchanges" else None)
                return rows[table]

            counts.append(_stage(unit, sink))
            for table in STAGED_TABLES:
                if table in rows:
                    rows[table].finish()
        for open_sink in sinks.values():
            open_sink.close()
    except BaseException:
        for open_sink in sinks.values():
            open_sink.abort()
        for own in alone:
            own.abort()
            own.path.unlink(missing_ok=True)  # closed already: in place
        raise
    return counts


def stage_unit(unit: Unit) -> dict[str, Any]:
    """Parse one unit into its staging Parquet files; return its line counts."""
    # A table's staging file is made when it gets its first row: a gateway file has no engine events and
    # most files no quarantine, and three files made and closed per input file dominated the ingest of
    # an incident logged as thousands of small files. The finaliser reads whichever files exist (the
    # ingest cleared this content's staging before staging it: _clear_staging).
    sinks: dict[str, ParquetSink] = {}

    def sink(table: str) -> ParquetSink:
        if table not in sinks:
            sinks[table] = ParquetSink(staged_path(Path(unit.staging), unit.sha, unit.part, table),
                                       STAGED_SCHEMAS.get(table, schema.TABLES[table]), STAGING_OPTIONS)
        return sinks[table]

    try:
        counts = _stage(unit, sink)
        for open_sink in sinks.values():
            open_sink.close()
    except BaseException:
        for open_sink in sinks.values():
            open_sink.abort()
        raise
    return counts


def _unless_unreadable(lines: Iterable[Line], problems: list[FileProblem], counts: dict[str, Any]) -> Iterator[Line]:
    """``lines``, ending with an ``unreadable`` problem where reading them raises an OSError (a file removed
    or made unreadable since it was hashed: read_lines says so itself, a format's own reader may not)."""
    try:
        yield from lines
    except OSError as exc:
        problems.append(FileProblem(counts["lines"], f"file could not be read after line {counts['lines']} ({exc})",
                                    "unreadable"))


def _stage(unit: Unit, sink: Callable[[str], RowSink]) -> dict[str, Any]:
    """Parse one unit, writing its rows through ``sink`` (the staging file of a table, made on first use);
    return its line counts. The caller closes the sinks."""
    counts: dict[str, Any] = {**_zero_counts(), "parsed": 0, "zone_assumed": 0, "no_tenant": 0, "problems": [],
                              "stream_damage": [], "skipped_records": {}, "status": "ingested", "first_unread": None}
    buffers: dict[str, list[dict[str, Any]]] = {name: [] for name in STAGED_TABLES}
    # The excerpt of each buffered row's line, in case the row must be quarantined at write time.
    excerpts: dict[str, list[str | None]] = {name: [] for name in STAGED_TABLES}
    sizes = dict.fromkeys(STAGED_TABLES, 0)
    aliases: set[tuple[str, str, str]] = set()  # (tenant, field, another customer id its records hold there)
    # Rows to tokenize wait in the buffer and are counted together at flush (the batch encoder).
    counter = Counter(Path(unit.tokenizer) if unit.tokenizer and unit.fmt else None, unit.ceiling, deferred=True)

    def flush(table: str) -> None:
        rows, shown = buffers[table], excerpts[table]
        buffers[table], excerpts[table], sizes[table] = [], [], 0
        if not rows:
            return
        if table == "exchanges":
            counter.settle(rows)
        try:
            sink(table).write_rows(rows)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            # The parsers check every value, so this is a safety net for a value they let through:
            # it costs the rows that do not fit the table, never the run. A failed conversion
            # writes nothing, so the batch is retried row by row.
            kept = []
            for row, excerpt in zip(rows, shown):
                problem = _misfit(row, sink(table).schema)
                if problem is None:
                    kept.append(row)
                    continue
                counts["parsed"] -= 1
                counts["zone_assumed"] -= bool(row.get("zone_assumed"))
                counts["quarantined"] += 1
                quarantine(row.get("source_line"), f"a value does not fit the {table} table ({problem}). "
                           "Fix: correct the field in this record and ingest the file again (the rest of the file was ingested)",
                           excerpt)
            sink(table).write_rows(kept)

    def add(table: str, row: dict[str, Any], nbytes: int, excerpt: str | None = None) -> None:
        buffers[table].append(row)
        excerpts[table].append(excerpt)
        sizes[table] += nbytes
        if len(buffers[table]) >= BATCH_ROWS or sizes[table] >= BATCH_BYTES:
            flush(table)

    def quarantine(line: int | None, reason: str, excerpt: str | None, nameless: bool = False) -> None:
        add("quarantine", {"source_file": unit.shown, "source_sha256": unit.sha, "source_line": line,
                           "source_format": unit.fmt, "reason": reason, "excerpt": excerpt}, 256)
        # The unit's first line set aside (see _misread): by its number, since damage found mid-file and rows that did
        # not fit the table at a flush are set aside after lines that follow them.
        if not nameless and line is not None and (counts["first_unread"] is None or line < counts["first_unread"][0]):
            counts["first_unread"] = [line, reason]

    if unit.fmt is None:
        skip = unit.skip or UNRECOGNISED
        quarantine(None, skip.reason, None)
        counts["status"] = skip.status
    else:
        log_format = FORMATS.get(unit.fmt)
        ctx = FileContext(unit.shown, unit.sha, unit.fmt, unit.zone, unit.tenant_field, counter,
                          table_text(Path(unit.path).name), unit.profile)  # an engine log's node is named by it
        problems: list[FileProblem] = []
        # A format that parses a line's bytes reads them undecoded: a line is decoded only when
        # its bytes are left to the text parser (see LogFormat.parse_raw).
        parse_raw = log_format.parse_raw if log_format.read is read_lines else None
        lines = (read_lines(Path(unit.path), problems, unit.span, decode=False) if parse_raw is not None
                 else log_format.read(Path(unit.path), problems, unit.span))
        for line in _unless_unreadable(lines, problems, counts):
            counts["lines"] += 1
            if line.cut:
                # Half written when the file was hashed: parsed, a cut engine line can read as another
                # ("9000 > 81"), and the rest of it is not covered by the SHA-256.
                counts["quarantined"] += 1
                quarantine(line.number, "line still being written when the file was hashed: only its start is "
                           "covered by the file's SHA-256, so it was not read. Fix: ingest the file again once "
                           "the log is complete", _excerpt(line.text, line.raw))
                continue
            without_bom(line)
            result: Any = NOT_PARSED
            if parse_raw is not None and line.raw[:1] == b"{":
                try:
                    result = parse_raw(line.raw, line.number, ctx)
                except Exception as exc:  # a parser bug must cost one line, not the run
                    result = _parser_bug(exc)
            if result is NOT_PARSED:
                if parse_raw is not None:
                    line.text = utf8_text(line.raw)
                if line.text is None:
                    counts["quarantined"] += 1
                    quarantine(line.number, "line is not valid UTF-8. Fix: re-export the log as UTF-8 (or transcode it, e.g. with iconv)",
                               _excerpt(None, line.raw))
                    continue
                if not line.text.strip():
                    counts["blank"] += 1
                    continue
                try:
                    result = log_format.parse(line.text, line.number, ctx)
                except Exception as exc:  # a parser bug must cost one line, not the run
                    result = _parser_bug(exc)
            if isinstance(result, Quarantined):
                counts["quarantined"] += 1
                counts["no_tenant"] += result.no_tenant
                # From the bytes: a CSV record's text is the object the reader made of it, its bytes the export's
                # (a record with no bytes, an empty array element, keeps the text its reader gave it).
                quarantine(line.number, result.reason, _excerpt(None, line.raw) if line.raw else _excerpt(line.text, line.raw),
                           nameless=result.no_tenant)
            elif result is None:
                counts["blank"] += 1
            elif isinstance(result, SkippedRecord):
                counts["blank"] += 1  # holds no exchange; what it was is kept by kind
                counts["skipped_records"][result.kind] = counts["skipped_records"].get(result.kind, 0) + 1
            else:
                table, row = result
                counts["parsed"] += 1
                if row.get("zone_assumed"):
                    counts["zone_assumed"] += 1
                if line.notes:
                    row["problems"] = "; ".join([*([row["problems"]] if row.get("problems") else []), *line.notes])
                if table == "exchanges":
                    row["record_hash"] = record_hash(line.raw)
                    for field, other in row.pop(ALIASES_KEY, None) or ():
                        aliases.add((str(row.get("tenant_id")), field, other))
                add(table, row, len(line.raw), _excerpt(line.text, line.raw))
        for problem in problems:
            # The unreadable rest of the file is accounted as one quarantined line.
            counts["problems"].append(problem.reason)
            counts["stream_damage"].append({"kind": problem.kind, "after_line": problem.after_line})
            counts["lines"] += 1
            counts["quarantined"] += 1
            quarantine(problem.after_line + 1, problem.reason, None)
            counts["status"] = "ingested with problems"
    for table in STAGED_TABLES:  # quarantine last: a flush may add to it
        flush(table)
    counts["prompt_tokens_band"] = dataclasses.asdict(counter.band)
    counts["tenant_aliases"] = sorted(aliases)
    return counts
