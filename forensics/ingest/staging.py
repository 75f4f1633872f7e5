"""Names of the staging files: what a unit writes (``stage_unit``), the finaliser reads and a new run clears.

A unit (an input file, or a part of a big one) writes ``{sha256}.{part:05d}.{table}.parquet`` in the
case's staging folder for each table it has rows for; while it writes, the file is a temporary
``.{name}.*.tmp`` beside it (:class:`forensics.case.ParquetSink`).

Small whole files (plain text of at most 1 MB: they stage less than they read) are staged together, a
batch of them (``stage_batch``) writing
``{first sha256}.batch.{table}.parquet``: their rows one file after another, in the order the finaliser
reads the files, each row naming its file (``source_sha256``). The batch's files are listed in the
Parquet file's key-value metadata (:data:`MEMBERS_KEY`), so a new run can clear a batch that holds a file
it is about to stage again, whichever file the batch is named after. A file made, written, closed, then
opened and read back per input file was two thirds of what each of thousands of one-record files cost.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

#: The tables a unit stages, in the order it flushes them (quarantine last: a flush may add to it).
STAGED_TABLES = ("exchanges", "engine_events", "quarantine")

#: The part name of a batch's staging files.
BATCH = "batch"

#: Key of a batch staging file's metadata listing its files' SHA-256, comma-separated, in staging order.
MEMBERS_KEY = b"forensics.staged_files"


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


def batch_path(staging: Path, first_sha: str, table: str) -> Path:
    """Where a batch of small files whose first file is ``first_sha`` stages ``table``."""
    return staging / f"{first_sha}.{BATCH}.{table}.parquet"


def is_batch(name: str) -> bool:
    """Whether a finished staging file's name is a batch's."""
    pieces = name.split(".")
    return len(pieces) == 4 and pieces[1] == BATCH


def with_members(table_schema: pa.Schema, shas: list[str]) -> pa.Schema:
    """``table_schema`` carrying the list of a batch's files in its metadata."""
    return table_schema.with_metadata({**(table_schema.metadata or {}), MEMBERS_KEY: ",".join(shas).encode()})


def batch_members(path: Path) -> list[str]:
    """The SHA-256 of the files a batch staging file holds, in staging order (from its footer)."""
    meta = pq.read_schema(path).metadata or {}
    return [sha for sha in meta.get(MEMBERS_KEY, b"").decode().split(",") if sha]
