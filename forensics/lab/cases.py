"""Case folders written straight from rows, for tests, query cases and benchmarks.

A real case folder is written by ingest and scan from logs; the stages after them read only its
tables. To test or measure one stage, this module writes those tables directly, with the
canonical schemas of ``forensics.schema``: rows name only the columns that matter (the rest are
null) and times may be ISO 8601 strings. The stage records the report reads (scan.json,
match.json, the ingest manifest) are built as the artifacts of ``forensics.artifacts``, complete
with their ``format``, from the few values a test sets. One builder, so a change of schema reaches
every test and benchmark at once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.parquet as pq

from forensics import schema
from forensics.artifacts import (
    ControlRecord,
    DamageRecord,
    FindingCounts,
    IngestManifest,
    Json,
    JsonObject,
    Limit,
    MatchRecord,
    ScanLimits,
    ScanParameters,
    ScanRecord,
    Searched,
    SuspectCounts,
    TableCounts,
)
from forensics.case import PARQUET_OPTIONS, ParquetSink, atomic_path, make_private_dirs, write_json
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
                     "engine_signature": key in signature, "decode_node": row.get("decode_node"),
                     "reported_prompt_tokens": row.get("reported_prompt_tokens")})
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


def _limit(value: int | None) -> Limit:
    """A limit given by the case file (no engine log detected one)."""
    return Limit(value=value, source="file" if value is not None else "default", detected=None, nodes_used="all",
                 prefill_nodes=(), per_node={}, values_of_nodes_used=(), values_of_all_nodes=(), nodes_disagree=False)


def scan_record(*, models: str = "", window_start: str | None = None, window_end: str | None = None,
                real_ceiling_tokens: int | None = None, advertised_window_tokens: int | None = None,
                suspects: int = 0, warnings: Sequence[str] = ()) -> ScanRecord:
    """A complete scan.json record from the scope and limits a test sets (no query rows, no anomaly)."""
    return ScanRecord(
        parameters=ScanParameters(
            models=models, window_start=window_start, window_end=window_end,
            real_ceiling_tokens=real_ceiling_tokens, real_ceiling_tokens_source="file",
            advertised_window_tokens=advertised_window_tokens, advertised_window_tokens_source="file",
            window_compared_with="received_at (completed_at when the request time is missing)"),
        limits=ScanLimits(real_ceiling_tokens=_limit(real_ceiling_tokens),
                          advertised_window_tokens=_limit(advertised_window_tokens), engine_over_limit_lines={}),
        queries=(), suspect_counts=SuspectCounts(total=suspects, borderline=0, engine_signature=0,
                                                 reported_count_below_ceiling=0, by_reason={}),
        exposure_band=(), anomalies={}, warnings=tuple(warnings))


def match_record(evidence: Sequence[Mapping[str, Any]] = (), *, parameters: JsonObject | None = None,
                 control_size: int = 0, control_findings: int = 0, false_positive_rate: float | None = None,
                 records: int = 0, lookback: str = "off", null: JsonObject | None = None) -> MatchRecord:
    """A complete match.json record: its finding counts from ``evidence`` (rows of schema.EVIDENCE's
    columns), the control sample and parameters a test sets, an empty null unless given."""
    cross = [e for e in evidence if e.get("relation") == "cross_tenant"]
    params = dict(parameters or {})
    return MatchRecord(
        parameters=params, parameter_sources={k: "default" for k in params}, versions={},
        searched=Searched(
            suspects=len({(e["recipient_request_id"], e["recipient_tenant_id"]) for e in evidence}),
            suspects_searched=0, suspects_missing_from_exchanges=(), suspects_with_empty_response=0,
            suspects_without_completed_at=0, target_kgrams=0, records=records, records_without_received_at=0,
            texts=0, chars=0, tokens=0, prompt_tokens=0, response_tokens=0,
            kgram_hits_kept_after_rarity_and_own_context=0, source_texts_verified=0, sources="every other record",
            lookback=lookback, same_decode_node=False),
        findings=FindingCounts(
            total=len(evidence), cross_tenant=len(cross), same_tenant=len(evidence) - len(cross),
            cross_tenant_confirmed=sum(1 for e in cross if e.get("tier") == "confirmed"),
            cross_tenant_probable=sum(1 for e in cross if e.get("tier") == "probable"),
            suspects_with_cross_tenant_evidence=len({(e["recipient_request_id"], e["recipient_tenant_id"]) for e in cross}),
            exposed_tenants=len({e["source_tenant_id"] for e in cross}), review=0, on_damaged_data=0),
        tiering="evalue", null=dict(null or {}),
        damage=DamageRecord(column_in_exchanges=False, findings_on_damaged_data=(), review_on_damaged_data=()),
        control=ControlRecord(requested=control_size, size=control_size, sample="non-suspect responses", length_classes={},
                              findings=control_findings, responses_with_findings=control_findings,
                              request_ids_with_findings=(), false_positive_rate=false_positive_rate))


def ingest_manifest(files: Sequence[Mapping[str, Json]], *, exchanges: int, notes: Sequence[str] = (),
                    timezone: str | None = None) -> IngestManifest:
    """A complete ingest manifest for ``files`` (one JSON object per input file) and a table of ``exchanges`` rows."""
    return IngestManifest(files=tuple(dict(f) for f in files), tables=TableCounts(exchanges=exchanges),
                          timezone=timezone, notes=tuple(notes))


def write_stage_records(root: Path, *, scan: ScanRecord | None = None, match: MatchRecord | None = None,
                        ingest: IngestManifest | None = None) -> Path:
    """Write the records given into the case folder ``root`` as their stages do; returns ``root``."""
    for name, record in (("scan.json", scan), ("match.json", match), ("manifest.json", ingest)):
        if record is not None:
            write_json(root / name, record.to_json())
    return root
