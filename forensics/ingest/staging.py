"""Names of the staging files: what a unit writes (``stage_unit``), the finaliser reads and a new run clears.

A unit (an input file, or a part of a big one) writes ``{sha256}.{part:05d}.{table}.parquet`` in the
case's staging folder for each table it has rows for; while it writes, the file is a temporary
``.{name}.*.tmp`` beside it (:class:`forensics.case.ParquetSink`).
"""

from __future__ import annotations

from pathlib import Path

#: The tables a unit stages, in the order it flushes them (quarantine last: a flush may add to it).
STAGED_TABLES = ("exchanges", "engine_events", "quarantine")


def staged_path(staging: Path, sha: str, part: int, table: str) -> Path:
    """Where a unit stages ``table`` for part ``part`` of the content ``sha``."""
    return staging / f"{sha}.{part:05d}.{table}.parquet"


def staged_key(name: str) -> tuple[str, str] | None:
    """(content SHA-256, table) of a finished staging file's name; None for anything else (a temporary file)."""
    pieces = name.split(".")
    return (pieces[0], pieces[2]) if len(pieces) == 4 and pieces[3] == "parquet" else None


def staged_content(name: str) -> str:
    """The content SHA-256 a staging file's name starts with, a temporary file's included."""
    return name.lstrip(".").split(".", 1)[0]
