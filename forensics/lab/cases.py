"""Case folders written straight from rows, for tests, query cases and benchmarks.

A real case folder is written by ingest and scan from logs; the stages after them read only its
tables. To test or measure one stage, this module writes those tables directly, with the
canonical schemas of ``forensics.schema``: rows name only the columns that matter (the rest are
null) and times may be ISO 8601 strings. One builder, so a change of schema reaches every test
and benchmark at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq

from forensics import schema
from forensics.case import PARQUET_OPTIONS, ParquetSink, atomic_path, make_private_dirs
from forensics.config import parse_utc
from forensics.errors import ConfigError

#: A table given as row dicts (some columns) or as an Arrow table (some columns).
Rows: TypeAlias = "Iterable[dict[str, Any]] | pa.Table"
#: A suspect named by its request id (the last exchange with that id), or by (request id, tenant).
SuspectKey: TypeAlias = str | tuple[str, str]


def ts(value: str | dt.datetime | None) -> dt.datetime | None:
    """An ISO 8601 string as an aware UTC datetime (datetimes and None pass through)."""
    if value is None or isinstance(value, dt.datetime):
        return value
    return parse_utc(value, "time")


def canonical(rows: Rows, table_schema: pa.Schema) -> pa.Table:
    """A table of ``table_schema`` from rows or a table naming some of its columns; the rest null.

    A column the schema does not have is an error naming it: a misspelt column would otherwise
    be silently null and the test would prove nothing.
    """
    if isinstance(rows, pa.Table):
        names = set(rows.column_names)
        columns = {f.name: rows.column(f.name) if f.name in names else pa.nulls(rows.num_rows, f.type) for f in table_schema}
    else:
        dicts: list[dict[str, Any]] = list(rows)
        names = {k for r in dicts for k in r}
        columns = {}
        for field in table_schema:
            values = [r.get(field.name) for r in dicts]
            if pa.types.is_timestamp(field.type):
                values = [ts(v) for v in values]
            columns[field.name] = pa.array(values, field.type)
    unknown = sorted(names - set(table_schema.names))
    if unknown:
        raise ConfigError(f"unknown column(s) {unknown} for a table of columns {table_schema.names}")
    return pa.table(columns).cast(table_schema)


def write_rows(path: Path, parts: Iterable[Rows], table_schema: pa.Schema, row_group_rows: int | None = None) -> Path:
    """Write ``parts`` (each rows or a table, see ``canonical``) as one Parquet file, atomically.

    Without ``row_group_rows`` the file is grouped as ingest groups a case table; with it, into row
    groups of that many rows (the unit the matcher's worker processes read). One part at a time
    is held in memory, so large synthetic tables can be written in pieces.
    """
    if row_group_rows is None:
        with ParquetSink(path, table_schema) as sink:
            for part in parts:
                sink.write_batch(canonical(part, table_schema))
        return path
    with atomic_path(path) as tmp, pq.ParquetWriter(tmp, table_schema, **PARQUET_OPTIONS) as writer:
        for part in parts:
            table = canonical(part, table_schema)
            if table.num_rows:
                writer.write_table(table, row_group_size=row_group_rows)
    return path


def suspect_rows(exchanges: Sequence[dict[str, Any]], keys: Iterable[SuspectKey], *, reasons: str = "ceiling",
                 engine_signature: Iterable[SuspectKey] = ()) -> list[dict[str, Any]]:
    """Suspect rows for the exchanges named by ``keys``, in the order of ``keys``.

    A key is a request id (the last exchange carrying it) or a (request id, tenant) pair, for
    cases where two customers sent the same request id. The suspect copies the exchange's model,
    times and decode node; ``engine_signature`` names the suspects whose engine trace shows the bug.
    """
    by_id = {r["request_id"]: r for r in exchanges}
    by_key = {(r["request_id"], r["tenant_id"]): r for r in exchanges}
    signature = set(engine_signature)
    rows = []
    for key in keys:
        row = by_key[key] if isinstance(key, tuple) else by_id[key]
        rows.append({"request_id": row["request_id"], "tenant_id": row["tenant_id"], "model": row.get("model"),
                     "received_at": row["received_at"], "completed_at": row["completed_at"], "reasons": reasons,
                     "engine_signature": key in signature, "decode_node": row.get("decode_node")})
    return rows


def write_case(root: Path, exchanges: Rows | None = None, *, engine_events: Rows | None = None,
               suspects: Rows | None = None, row_group_rows: int | None = None) -> Path:
    """A case folder holding the tables given (each rows or a table, see ``canonical``).

    ``row_group_rows`` sets the exchanges file's row groups (see ``write_rows``). Returns ``root``.
    """
    make_private_dirs(root)
    if exchanges is not None:
        write_rows(root / "exchanges.parquet", [exchanges], schema.EXCHANGES, row_group_rows)
    if engine_events is not None:
        write_rows(root / "engine_events.parquet", [engine_events], schema.ENGINE_EVENTS)
    if suspects is not None:
        write_rows(root / "suspects.parquet", [suspects], schema.SUSPECTS)
    return root
