"""Hash-chained, append-only JSON Lines files kept in a report folder (verdicts, notices sent).

Each line is one JSON object (sorted keys, no spaces) whose ``prev`` is the SHA-256 of the
previous line's bytes (without its newline); the first line's ``prev`` is the ledger's fixed
genesis value, so lines cannot be edited, dropped, reordered or moved to another ledger without
the chain saying where. ``seq`` counts lines from 1.

Appends are made under the report folder's lock (the one ``forensics report`` holds while it
rebuilds the folder), with O_APPEND, then fsync'd; the file is private (0600).
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from forensics.case import folder_lock
from forensics.errors import CaseError, ConfigError

FORMAT = "forensics-ledger/1"


def import_rows(path: Path, columns: tuple[str, ...], what: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, row) of an import CSV (UTF-8, a header naming ``columns``); errors name the file and say
    the header; an empty file is an error. ``what``: "verdict" or "notice", for the messages."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"the {what}s CSV does not exist", file=path, fix="check the path given to --import") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"cannot read the {what}s CSV ({exc})", file=path, fix="give a UTF-8 CSV file") from None
    except OSError as exc:
        raise ConfigError(f"cannot read the {what}s CSV ({exc.strerror or exc})", file=path,
                          fix="give a readable CSV file") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise ConfigError(f"the {what}s CSV has no column {missing[0]!r}", file=path, line=1,
                          fix="its header must be: " + ",".join(columns))
    empty = True
    for row in reader:
        empty = False
        yield reader.line_num, row
    if empty:
        raise ConfigError(f"the {what}s CSV holds no {what}", file=path, fix=f"add one row per {what} under the header")


def genesis(name: str) -> str:
    """The ``prev`` of a ledger's first line: fixed per ledger file name."""
    return hashlib.sha256(f"{FORMAT} {name} genesis".encode()).hexdigest()


def line_hash(line: bytes) -> str:
    """SHA-256 of one line's bytes (without the newline): the next line's ``prev``."""
    return hashlib.sha256(line).hexdigest()


def encode(entry: dict[str, Any]) -> bytes:
    """One entry as the exact bytes of its line (without the newline)."""
    return json.dumps(entry, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


@dataclasses.dataclass
class Chain:
    """A ledger as read: its entries in order, the hash of each line, and the first break if any."""

    name: str
    entries: list[dict[str, Any]]
    hashes: list[str]
    problem: str | None = None  # "line N: ..." when the chain is broken

    @property
    def head(self) -> str:
        """The hash of the last line (the genesis value for an empty ledger)."""
        return self.hashes[-1] if self.hashes else genesis(self.name)


def read(path: Path, required: tuple[str, ...] = ()) -> Chain:
    """Read and check a ledger; a missing file is an empty ledger.

    Reading stops at the first line that breaks the chain (bad JSON, wrong ``prev`` or ``seq``,
    a missing field, no final newline); ``problem`` names it and ``entries`` hold the good prefix.
    """
    path = Path(path)
    chain = Chain(path.name, [], [])
    if not path.exists():
        return chain
    data = path.read_bytes()
    if not data:
        return chain
    lines = data.split(b"\n")
    if lines[-1] != b"":
        chain.problem = f"line {len(lines)}: no final newline (a write cut short, or an edit)"
        lines = lines[:-1]
    else:
        lines = lines[:-1]
    for n, line in enumerate(lines, start=1):
        try:
            entry = json.loads(line.decode("utf-8"))
            if not isinstance(entry, dict):
                raise ValueError("not a JSON object")
        except (UnicodeDecodeError, ValueError) as exc:
            chain.problem = f"line {n}: not a JSON object ({exc})"
            return chain
        if entry.get("prev") != chain.head:
            chain.problem = f"line {n}: its prev hash does not match the line before it (a line was edited, removed or reordered)"
            return chain
        if entry.get("seq") != n:
            chain.problem = f"line {n}: seq is {entry.get('seq')!r}, expected {n}"
            return chain
        if encode(entry) != line:
            chain.problem = (f"line {n}: ends with a carriage return: the file was saved with Windows line endings (CRLF); "
                             "convert it back to LF line endings (dos2unix), which the chain's hashes cover"
                             if line.endswith(b"\r") and encode(entry) == line[:-1] else
                             f"line {n}: not in the canonical form forensics writes (edited by hand)")
            return chain
        missing = [k for k in required if not isinstance(entry.get(k), str) or not entry.get(k)]
        if missing:
            chain.problem = f"line {n}: no {missing[0]!r}"
            return chain
        chain.entries.append(entry)
        chain.hashes.append(line_hash(line))
    return chain


def read_valid(path: Path, required: tuple[str, ...] = ()) -> Chain:
    """:func:`read`, raising a CaseError when the chain is broken (nothing may rest on it)."""
    chain = read(path, required)
    if chain.problem:
        raise CaseError(f"the hash chain is broken at {chain.problem}", file=path,
                        fix="restore the file from a backup or from the copy the team keeps; forensics never repairs a chain")
    return chain


def recorded_prefix(report_dir: Path, name: str) -> tuple[int, str]:
    """How many lines of ledger ``name`` the report was rendered with, and the last one's hash
    (manifest.json ``ledgers``; (0, "") when it records none)."""
    try:
        rec = json.loads((Path(report_dir) / "manifest.json").read_text(encoding="utf-8")).get("ledgers", {}).get(name)
        return int(rec["entries"]), str(rec["head"])
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return 0, ""


def read_report_ledger(report_dir: Path, name: str, required: tuple[str, ...] = ()) -> Chain:
    """A report's ledger, checked whole and against the prefix its manifest recorded.

    The chain alone cannot tell an edited or dropped last line from a ledger that never had it:
    the manifest's record of the lines the report was rendered with can.
    """
    path = Path(report_dir) / name
    c = read_valid(path, required)
    n, head = recorded_prefix(report_dir, name)
    if n and (n > len(c.hashes) or c.hashes[n - 1] != head):
        raise CaseError(f"the {n} line(s) of {name} the report was rendered with are no longer there unchanged", file=path,
                        fix="restore the file from a backup or from the copy the team keeps; forensics never repairs a chain")
    return c


def lock_path(report_dir: Path) -> Path:
    """The lock file ``forensics report`` holds while it rebuilds ``report_dir`` (see forensics.report)."""
    # Absolute first: a report given as "." must still name its own folder and the one above it.
    report_dir = Path(os.path.abspath(report_dir))
    return report_dir.parent / f".{report_dir.name}+lock"


@contextmanager
def report_lock(report_dir: Path) -> Iterator[None]:
    """Hold the report folder's lock: no report rebuild and no other append meanwhile. An append or an audit takes
    milliseconds: one waits up to :data:`LEDGER_LOCK_WAIT` seconds for another (analysts recording at the same
    moment were refused); a re-render that holds it longer is still said, by pid."""
    with folder_lock(lock_path(report_dir), f"the report folder {report_dir}", wait=LEDGER_LOCK_WAIT):
        yield


#: Seconds an append or an audit waits for the report folder's lock.
LEDGER_LOCK_WAIT = 10.0


def append(report_dir: Path, name: str, records: list[dict[str, Any]], required: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Append ``records`` (without seq/prev) to the report's ledger ``name``; return the entries written.

    The caller holds the report folder's lock. A broken chain is refused: appending to it would
    make the break look like part of the record.
    """
    path = Path(report_dir) / name
    chain = read_report_ledger(report_dir, name, required)
    prev, seq = chain.head, len(chain.entries)
    lines, written = [], []
    for rec in records:
        seq += 1
        entry = dict(rec, seq=seq, prev=prev)
        line = encode(entry)
        prev = line_hash(line)
        lines.append(line + b"\n")
        written.append(entry)
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # private whatever the umask
        data = b"".join(lines)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:  # the new name must survive a crash too
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return written
