"""The case folder: where each stage reads and writes, and how files are written safely.

Layout (every stage reads only the previous stage's output)::

    CASE/
      manifest.json           ingest: inputs, SHA-256, per-file counts and reconciliation
      config.json             the resolved case configuration (values and where each came from)
      staging/                ingest: one Parquet set per input file (internal)
      exchanges.parquet       ingest: one row per request (schema.EXCHANGES)
      engine_events.parquet   ingest: one row per engine log line (schema.ENGINE_EVENTS)
      quarantine.parquet      ingest: every unusable record (schema.QUARANTINE)
      suspects.parquet        scan  (schema.SUSPECTS), and suspects.csv
      evidence.parquet        match (schema.EVIDENCE), and evidence.csv

Every file is written to a temporary name in the same folder and renamed into place, so a crash
never leaves a half-written file that a later stage would read.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from forensics import schema
from forensics.errors import CaseError

if TYPE_CHECKING:
    import duckdb

TABLE_FILES = {name: f"{name}.parquet" for name in schema.TABLES}

#: Parquet settings for case tables: zstd at a low level keeps megabyte prompts small on disk
#: without making compression the ingest bottleneck.
PARQUET_OPTIONS: dict[str, Any] = {"compression": "zstd", "compression_level": 1}
#: Staging files are read once by the finaliser and kept only for re-ingest: no compression.
STAGING_OPTIONS: dict[str, Any] = {"compression": "none"}
ROW_GROUP_ROWS = 4096
ROW_GROUP_BYTES = 64 << 20


@contextlib.contextmanager
def atomic_path(path: Path, mode: int = 0o600) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; rename it onto ``path`` only on success."""
    path.parent.mkdir(parents=True, exist_ok=True)
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


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as stable, sorted, indented JSON (byte-identical for equal data)."""
    with atomic_open(path) as fh:
        fh.write(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


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
        path.parent.mkdir(parents=True, exist_ok=True)
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
            # Column lists convert faster than a list of row dicts.
            columns = {name: [row.get(name) for row in rows] for name in self.schema.names}
            self.write_batch(pa.RecordBatch.from_pydict(columns, schema=self.schema))

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append one batch, cast to the sink's schema.

        Rows are regrouped into row groups of ROW_GROUP_ROWS rows or ROW_GROUP_BYTES bytes, so the
        file's bytes depend only on the rows, not on how callers batched them.
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

    def has(self, name: str) -> bool:
        """Whether the stage output ``name`` exists."""
        return self.table_path(name).exists()

    def require(self, name: str, stage: str) -> Path:
        """The table's path, or a CaseError saying which stage to run first."""
        path = self.table_path(name)
        if not path.exists():
            raise CaseError(
                f"the case has no {name} table ({path.name})",
                file=self.root,
                fix=f"run `forensics {stage} --case {self.root}` first",
            )
        return path

    def read_manifest(self) -> dict[str, Any]:
        """The ingest manifest, or an empty one for a new case."""
        if not self.manifest_path.exists():
            return {}
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))

    def connect(self, read_only_tables: bool = True) -> duckdb.DuckDBPyConnection:
        """An in-memory DuckDB connection with one view per canonical table.

        Tables the case does not have yet appear as empty views of their schema, so a query over
        a gateway-only case (no engine logs) still runs.
        """
        import duckdb  # here: the match stage's worker processes never query, so never load it

        con = duckdb.connect(":memory:")
        for name, table_schema in schema.TABLES.items():
            path = self.table_path(name)
            if path.exists():
                # The path is ours, not user SQL; quote it as a string literal safely.
                literal = "'" + str(path).replace("'", "''") + "'"
                con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet({literal})")
            else:
                con.register(f"_empty_{name}", table_schema.empty_table())
                con.execute(f"CREATE VIEW {name} AS SELECT * FROM _empty_{name}")
        return con
