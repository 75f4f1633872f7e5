"""Rebuild a case's tables from every staged input file.

Decisions are made on key columns only (DuckDB reads just those from the staged Parquet); the
big text columns are then streamed once, batch by batch, in a fixed order (input path, then
line), so memory stays bounded by a batch and the output is byte-identical for the same inputs.

* One row per request: rows with the same ``(request_id, tenant_id)`` are one request seen in
  several exports. The row kept is the most complete: a prompt over none, whole text over cut text (LiteLLM
  keeps a long string's head and tail), an answer over none, a whole answer over a cut one, then an
  undamaged record over a damaged one, then by the precedence its record kind declares in the
  format registry (a logging payload over split logs over a spend-log row), then the first by
  path and line, then by file and record hash (copies sharing both: a log that grew under its name,
  records of a JSON array on one line). The others count as ``duplicate`` for their file; the rows
  written are chosen by line, and by record hash where records share a line.
* Split logs: request and response halves (the record kinds registered as halves) are joined
  by ``request_id``; a half without its partner is kept with ``orphan`` = ``request_only`` /
  ``response_only``.
* Engine join keys: ``prefill_node``, ``decode_node`` and ``bootstrap_room`` come from the engine
  events whose ``rid`` is the request id.
* Token counts: the engine's own figure for the real input (over-limit line, or a plausible
  prefill ``input_len``, or vLLM's count of ``prompt_token_ids``) outranks the gateway's
  reported figure; see forensics.tokens.
* Engine events seen in two overlapping exports of a node's log count once: an event is the
  same when node, raw text and its occurrence number within its file agree.
* Damage (``exchanges.damage``, rules in forensics.schema): decided per staged record from the
  quarantine rows next to it and the damaged streams listed in the file entries
  (``stream_damage``), before the copies of a request are ranked, so that among equally complete
  copies a clean one wins; the row keeps the reasons of the copy that won.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections import Counter as Tally
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from forensics import schema, tokens
from forensics.artifacts import DamagedRecords, IngestManifest, Orphans, TableCounts
from forensics.case import QUERY_MEMORY, ROW_GROUP_ROWS, Case, ParquetSink, file_sha256
from forensics.config import CaseConfig, iso
from forensics.errors import CaseError, first_few, safe_id, shown_ids
from forensics.ingest.copies import MAX_PAIRS, ClockOffset, fold_logged_twice, zone_like
from forensics.ingest.registry import FORMATS, half_kinds, joined_sql, precedence_sql, zone_for
from forensics.ingest.staging import STAGED_TABLES, batch_members, is_batch, staged_content, staged_key
from forensics.progress import Reporter, reporter

READ_BATCH = 256
#: Bytes of staged rows (uncompressed) read and enriched at once: per-batch costs (a Python pass over the
#: batch's small columns, a hand-off to the writer thread) vanish at this size, and memory holds a few.
READ_BATCH_BYTES = 4 << 20
#: Rows per batch at most, however small the rows.
READ_BATCH_MAX_ROWS = 4096


def read_batch_rows(pf: pq.ParquetFile, row_group: int) -> int:
    """Rows per batch for reading a row group of the staged file ``pf``: about :data:`READ_BATCH_BYTES` of
    its rows (from the row group's metadata, so a run of big rows after small ones is read a few at a
    time), at least 16 (megabyte prompts), at most :data:`READ_BATCH_MAX_ROWS`."""
    meta = pf.metadata.row_group(row_group)
    rows, nbytes = meta.num_rows, meta.total_byte_size
    if rows == 0 or nbytes == 0:
        return READ_BATCH
    return max(16, min(READ_BATCH_MAX_ROWS, rows * READ_BATCH_BYTES // nbytes))


def _lit(path: Path) -> str:
    return "'" + str(path).replace("'", "''") + "'"


@dataclasses.dataclass(frozen=True)
class Staged:
    """A staging file, and which input files' rows are read from it at this point of the finaliser's order."""

    path: Path
    #: None: the file stages one input file (or a part of it), all its rows read. Else the SHA-256 of the
    #: batch's files read here, consecutive in the finaliser's order; a file of another run sorting between
    #: a batch's files makes the batch two segments, each reading its own files' rows.
    shas: tuple[str, ...] | None = None


def _staged(c: Case, files: list[dict[str, Any]]) -> dict[str, list[Staged]]:
    """Staging files of each table in input order (file order, then part).

    The staging folder is listed once: a glob per input file listed it once per file and table, which
    made finalising an incident of thousands of small files take minutes (quadratic in the files).
    """
    parts: dict[tuple[str, str], list[Path]] = {}
    batches: dict[tuple[str, str], Path] = {}
    shas = {f["sha256"] for f in files}
    if c.staging.is_dir():
        with os.scandir(c.staging) as entries:
            for entry in entries:
                key = staged_key(entry.name)
                if key is None:
                    continue
                if is_batch(entry.name):
                    try:
                        members = batch_members(Path(entry.path))
                    except (OSError, pa.ArrowException) as exc:
                        if key[0] not in shas:
                            # Not a batch of this case: an ingest names a batch after its first file, and a
                            # run that finished put all of a batch's files in the case.
                            continue
                        raise CaseError(f"a staging file of this case cannot be read ({str(exc)[:200]})",
                                        file=Path(entry.path),
                                        fix="ingest into a new case folder (forensics run always starts afresh)") from None
                    for sha in members:
                        other = batches.setdefault((sha, key[1]), Path(entry.path))
                        if other != Path(entry.path):  # the ingest clears a batch of any file it stages again
                            raise RuntimeError(f"finalise: input {sha[:12]} is staged in two batches ({other.name}, {entry.name})")
                else:
                    parts.setdefault(key, []).append(Path(entry.path))
    out: dict[str, list[Staged]] = {}
    for table in STAGED_TABLES:
        segments: list[Staged] = []
        for f in files:
            segments.extend(Staged(p) for p in sorted(parts.get((f["sha256"], table), ())))
            batch = batches.get((f["sha256"], table))
            if batch is None:
                continue
            last = segments[-1] if segments else None
            if last is not None and last.path == batch and last.shas is not None:
                segments[-1] = Staged(batch, (*last.shas, f["sha256"]))
            else:
                segments.append(Staged(batch, (f["sha256"],)))
        out[table] = segments
    return out


def _paths(segments: list[Staged]) -> list[Path]:
    """The staging files of ``segments``, each once, in order."""
    return list(dict.fromkeys(s.path for s in segments))


#: Batch staging files kept read while the finaliser goes through a table's segments: a batch is read as
#: several segments when later ingests added files that sort between its files (runs interleaved).
BATCH_CACHE = 4


class _Batches:
    """A few batch staging files of exchange rows, read whole, with their ``source_line`` column and where each
    file's rows start and end (a batch holds at most BATCH_FILES files, each with at most BATCH_MEMBER_BYTES
    of exchange rows: more, and the file's exchange rows are staged alone)."""

    def __init__(self) -> None:
        self._read: dict[Path, tuple[pa.Table, np.ndarray, dict[str, tuple[int, int]]]] = {}

    def get(self, path: Path) -> tuple[pa.Table, np.ndarray, dict[str, tuple[int, int]]]:
        """The batch's rows, their lines and each file's (first row, end row)."""
        if path in self._read:
            self._read[path] = self._read.pop(path)  # most recently used last
            return self._read[path]
        if len(self._read) >= BATCH_CACHE:
            del self._read[next(iter(self._read))]
        table = pq.read_table(path, read_dictionary=["source_sha256"]).replace_schema_metadata(None)  # the list of files is its own
        bounds = _file_bounds(table.column("source_sha256"))
        table = table.cast(schema.EXCHANGES_STAGED)  # the file column back to plain strings, as the staged schema has it
        self._read[path] = (table, table.column("source_line").to_numpy(), bounds)
        return self._read[path]


def _file_bounds(shas: pa.ChunkedArray) -> dict[str, tuple[int, int]]:
    """Where each file's rows start and end in a batch staging file, from its ``source_sha256`` column read
    as a dictionary (a batch's files are one after another)."""
    codes = shas.combine_chunks()
    index = codes.indices.to_numpy(zero_copy_only=False)
    bounds = {}
    for code, sha in enumerate(codes.dictionary.to_pylist()):
        rows = np.flatnonzero(index == code)
        if len(rows):
            bounds[sha] = (int(rows[0]), int(rows[-1]) + 1)
    return bounds


def _member_slices(segment: Staged, rows: int) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows of each file a batch segment reads, in order, at most ``rows`` at a time, as
    ``(SHA-256, batch)``: the pieces its own staging file would have been read in, so the case table is
    written in the same batches, and so the same bytes, whatever the batching. Only the row groups a piece
    lies in are read: a batch's quarantine or engine rows are not held at once (a 1 MB file of broken lines
    is half a million quarantine rows)."""
    assert segment.shas is not None
    pf = pq.ParquetFile(segment.path, read_dictionary=["source_sha256"])
    bounds = _file_bounds(pf.read(columns=["source_sha256"]).column("source_sha256"))
    group_start = np.cumsum([0] + [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)])
    cached: tuple[int, pa.Table] | None = None

    def group(g: int) -> pa.Table:
        nonlocal cached
        if cached is None or cached[0] != g:
            cached = (g, pf.read_row_group(g).replace_schema_metadata(None))  # the batch's list of files is its own
        return cached[1]

    for sha in segment.shas:
        if sha not in bounds:
            continue  # no row of this table
        lo, hi = bounds[sha]
        for at in range(lo, hi, rows):
            end = min(at + rows, hi)
            first, last = (int(np.searchsorted(group_start, x, side="right")) - 1 for x in (at, end - 1))
            parts = [group(g).slice(max(at, int(group_start[g])) - int(group_start[g]),
                                    min(end, int(group_start[g + 1])) - max(at, int(group_start[g])))
                     for g in range(first, last + 1)]
            for batch in pa.concat_tables(parts).combine_chunks().to_batches():
                yield sha, batch


def _view(con: duckdb.DuckDBPyConnection, name: str, paths: list[Path], table: str) -> None:
    if paths:
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM read_parquet([{', '.join(_lit(p) for p in paths)}])")
    else:
        empty = schema.EXCHANGES_STAGED if table == "exchanges" else schema.TABLES[table]
        con.register(f"_empty_{name}", empty.empty_table())
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM _empty_{name}")


def finalize(
    c: Case, files: list[dict[str, Any]], cfg: CaseConfig, progress: Reporter | None = None,
    skipped_inputs: list[dict[str, Any]] | None = None, band_ceilings: dict[str, int] | None = None,
) -> IngestManifest:
    """Rebuild exchanges, engine_events and quarantine from staging; return the case manifest.

    ``skipped_inputs`` lists the input folder entries that were not read (``path``, ``kind``, ``reason``):
    each becomes a quarantine row after those of the files read. ``band_ceilings``: per file
    (SHA-256), the ceiling below which its rows were decided by size instead of the tokenizer.
    """
    skipped_inputs = skipped_inputs or []
    files = sorted(files, key=lambda f: (f["path"], f["sha256"]))
    order = {f["sha256"]: i for i, f in enumerate(files)}
    con = duckdb.connect(":memory:")
    con.execute("SET preserve_insertion_order = true")
    tmp = c.root / ".duckdb_tmp"
    con.execute(f"SET temp_directory = {_lit(tmp)}")
    con.execute(f"SET memory_limit = '{QUERY_MEMORY}'")  # the engine events' duplicate check above all
    staged = _staged(c, files)
    ex_segments, ev_segments, q_segments = staged["exchanges"], staged["engine_events"], staged["quarantine"]
    _view(con, "staged", _paths(ex_segments), "exchanges")
    _view(con, "staged_events_raw", _paths(ev_segments), "engine_events")
    _view(con, "staged_quarantine", _paths(q_segments), "quarantine")
    # A node whose file name does not say prefill/decode takes the role its own type= lines show.
    con.execute("""
        CREATE VIEW node_roles AS SELECT node, min(role) AS node_role FROM staged_events_raw
        WHERE role IS NOT NULL GROUP BY node HAVING count(DISTINCT role) = 1""")
    con.execute("""
        CREATE VIEW staged_events AS SELECT e.* REPLACE (coalesce(e.role, r.node_role) AS role)
        FROM staged_events_raw e LEFT JOIN node_roles r USING (node)""")
    con.register("file_order", pa.table({"sha": list(order), "ord": list(order.values())}))
    _line_damage(con, files)

    rep = reporter(progress)
    task = rep.task("finalise case tables", total=3)
    duplicates: Tally[str] = Tally()
    # The engine events' duplicate check is decided first (DuckDB spreads it over the cores); their
    # table and the quarantine are then copied on a thread of their own while the exchanges are
    # written: both passes are mostly Parquet reading, encoding and writing, which Arrow does
    # without the GIL, so the two run side by side on two cores. Each writes a file of its own.
    event_losers, event_duplicates, roles = _event_duplicates(con)
    skipped_rows = [{"source_file": e["path"], "reason": e["reason"]} for e in skipped_inputs]

    def others() -> tuple[int, int]:
        events = _concat(c, ev_segments, "engine_events", event_losers, roles)
        return events, _concat(c, q_segments, "quarantine", extra=skipped_rows)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="finalize-events") as side:
        side_tables = side.submit(others)
        try:
            exchanges_stats = _exchanges(c, con, ex_segments, order, duplicates, band_ceilings or {},
                                         _unnamed_request_halves(files), files)
        finally:
            wait([side_tables])  # never leave the thread writing into a case being torn down
        task.advance()
        events_rows, quarantine_rows = side_tables.result()
    duplicates.update(event_duplicates)
    task.advance(2)
    task.close()
    con.close()
    with contextlib.suppress(OSError):
        tmp.rmdir()

    for f in files:
        f["duplicate"] = duplicates.get(f["sha256"], 0)
        f["ingested"] = f.get("parsed", 0) - f["duplicate"]
        f["reconciled"] = f["lines"] == f["ingested"] + f["quarantined"] + f["blank"] + f["duplicate"]
    notes = list(exchanges_stats.pop("notes"))
    assumed = sum(f.get("zone_assumed", 0) for f in files)
    by_zone: Tally[str] = Tally()
    documented: dict[str, set[str]] = {}
    given: dict[str, set[str]] = {}
    for f in files:
        if f.get("zone_assumed"):
            zone = f.get("zone") or zone_for(f.get("format"), cfg.timezone)
            by_zone[zone] += f["zone_assumed"]
            if f.get("zone"):  # its [[inputs]] entry's
                given.setdefault(zone, set()).add(str(f.get("path")))
            elif zone_for(f.get("format"), "") == zone:  # the format's own zone, not the case's
                documented.setdefault(zone, set()).add(str(f.get("format")))
    for zone, n in sorted(by_zone.items(), key=lambda item: (item[0] != cfg.timezone, item[0])):
        why = []
        if zone in documented and zone != cfg.timezone:
            why.append(f"as {', '.join(sorted(documented[zone]))} writes them, whatever the case's timezone {cfg.timezone}")
        if zone in given and zone != cfg.timezone:
            why.append(f"the [[inputs]] timezone of {first_few(sorted(given[zone]), 3)}")
        notes.append(f"{n} records had timestamps with no zone; they were read as {zone}"
                     + (f" ({'; '.join(why)})" if why else ""))
    skipped = [f["path"] for f in files if f["status"].startswith("skipped")]
    if skipped:
        notes.append(f"{len(skipped)} {'file was' if len(skipped) == 1 else 'files were'} skipped (no known format, not "
                     f"UTF-8, Parquet where a text format was given, a JSON array where JSON Lines were expected, or "
                     f"damaged before its first line: see quarantine): "
                     f"{', '.join(skipped[:5])}")
    if skipped_inputs:
        notes.append(f"{len(skipped_inputs)} entries of the input folders are not regular files inside them and were not read "
                     f"(see skipped_inputs and quarantine): {', '.join(e['path'] for e in skipped_inputs[:5])}")
    passed_over = [f for f in files if f.get("skipped_records")]
    if passed_over:
        kinds: dict[str, int] = {}
        for f in passed_over:
            for kind, n in f["skipped_records"].items():
                kinds[kind] = kinds.get(kind, 0) + n
        shown = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        notes.append(f"{sum(kinds.values())} records hold no model call and were not ingested ({shown}); they are counted "
                     f"with the blank lines and listed by kind in skipped_records: {', '.join(f['path'] for f in passed_over[:5])}")
    # A page of logs missing (an API error response saved in its place) is no damage to what was read.
    missing = [f["path"] for f in files if f["problems"] and f.get("stream_damage")
               and all(d.get("kind") == "missing" for d in f["stream_damage"])]
    if missing:
        notes.append(f"{len(missing)} {'file holds' if len(missing) == 1 else 'files hold'} API error responses saved in "
                     f"place of pages of logs (\"success\": false): those pages' logs are missing from the case (see "
                     f"quarantine): {', '.join(missing[:5])}")
    only_missing = set(missing)
    broken = [f["path"] for f in files if f["problems"] and f["path"] not in only_missing]
    if broken:
        marked = exchanges_stats["records_from_damaged_input"]["by_reason"]["truncated_file"]
        notes.append(f"{len(broken)} files were damaged (truncated or corrupt); their readable lines were kept: {', '.join(broken[:5])}. "
                     f"Whatever followed the damage in each file is missing from the case; {marked} records the damage may have "
                     "garbled are marked truncated_file in exchanges.damage (a record with a clean copy elsewhere is not)")
    stats = exchanges_stats
    return IngestManifest(
        files=tuple(files),
        timezone=cfg.timezone,
        zone_assumed_rows=assumed,
        tenant_field=cfg.tenant_field,
        tokenizer=Path(cfg.tokenizer).name if cfg.tokenizer else None,
        tokenizer_sha256=file_sha256(Path(cfg.tokenizer)) if cfg.tokenizer else None,
        tables=TableCounts(exchanges=stats["rows"], engine_events=events_rows, quarantine=quarantine_rows),
        duplicate_requests=stats["duplicate_requests"],
        superseded_variants=stats["superseded_variants"],
        orphans=Orphans(**stats["orphans"]),
        truncated_prompts=stats["truncated_prompts"],
        requests_without_tenant=stats["requests_without_tenant"],
        implausible_reported_counts=stats["implausible_reported_counts"],
        records_with_problems=stats["records_with_problems"],
        records_from_damaged_input=DamagedRecords(**stats["records_from_damaged_input"]),
        request_id_collisions=stats["request_id_collisions"],
        time_range=tuple(stats["time_range"]) if stats["time_range"] is not None else None,
        models=tuple(tuple(m) for m in stats["models"]),
        prompt_tokens_sources=stats["prompt_tokens_sources"],
        skipped_inputs=tuple(skipped_inputs),
        reconciled=all(f["reconciled"] for f in files),
        notes=tuple(notes),
        # A figure the exchanges pass adds later is kept in the manifest even before it gets a field.
        extra={k: v for k, v in stats.items() if k not in _TYPED_STATS},
    )


#: Keys of the exchanges pass's figures that have a field of IngestManifest (``rows`` is tables.exchanges).
_TYPED_STATS = {f.name for f in dataclasses.fields(IngestManifest)} | {"rows"}


LINE_DAMAGE_SQL = """
WITH problem_rows AS (
  -- the quarantine row that stands for a damaged stream's unreadable rest
  SELECT sha AS source_sha256, after_line + 1 AS source_line FROM file_damage WHERE after_line IS NOT NULL
), near AS (
  SELECT q.source_sha256, q.source_line + d.range AS source_line
  FROM staged_quarantine q CROSS JOIN range(-$n, $n + 1) d
  WHERE d.range <> 0 AND q.source_line IS NOT NULL
    AND NOT EXISTS (SELECT 1 FROM problem_rows p WHERE p.source_sha256 = q.source_sha256 AND p.source_line = q.source_line)
), last_read AS (
  SELECT f.sha AS source_sha256, max(s.source_line) AS source_line
  FROM file_damage f JOIN staged s ON s.source_sha256 = f.sha AND s.source_line <= f.after_line
  WHERE f.kind IN ('truncated', 'unreadable') GROUP BY f.sha, f.after_line
), whole_file AS (
  SELECT s.source_sha256, s.source_line FROM staged s JOIN file_damage f ON f.sha = s.source_sha256 AND f.kind = 'corrupt'
), reasons AS (
  SELECT source_sha256, source_line, 'quarantined_neighbour' AS reason FROM near
  UNION SELECT source_sha256, source_line, 'truncated_file' FROM last_read
  UNION SELECT source_sha256, source_line, 'truncated_file' FROM whole_file
)
SELECT source_sha256, source_line, string_agg(DISTINCT reason, ';' ORDER BY reason) AS damage
FROM reasons GROUP BY 1, 2
"""


def _line_damage(con: duckdb.DuckDBPyConnection, files: list[dict[str, Any]]) -> None:
    """Create ``line_damage``: the damage reasons of every damaged line of an input file (lines that
    hold no exchange record are harmless: nothing looks them up). ``truncated_copy_only`` is added
    per row later, from the row's own columns."""
    shas: list[str] = []
    kinds: list[str] = []
    after: list[int | None] = []
    for f in files:
        points = f.get("stream_damage")
        if points is None and f.get("problems"):
            points = [{"kind": "corrupt", "after_line": None}]  # a manifest from before stream_damage: assume the worst
        for point in points or []:
            shas.append(f["sha256"])
            kinds.append(point["kind"])
            after.append(point["after_line"])
    con.register("file_damage", pa.table({"sha": pa.array(shas, pa.string()), "kind": pa.array(kinds, pa.string()),
                                          "after_line": pa.array(after, pa.int64())}))
    con.execute(f"CREATE TEMP TABLE line_damage AS {LINE_DAMAGE_SQL}", {"n": schema.DAMAGE_NEIGHBOUR_LINES})


def _with_damage(table: pa.Table, line_damage: dict[int, str] | None = None,
                 values: list[str | None] | None = None) -> pa.Table:
    """Set the ``damage`` column: the reasons of the record's line(s) (``values`` row by row, or from
    ``line_damage`` by ``source_line``, or a ``damage`` column already there) plus ``truncated_copy_only``."""
    clean = values is None and not line_damage and (line_damage is not None or "damage" not in table.column_names)
    if clean and not (pc.any(table.column("prompt_truncated")).as_py() or pc.any(table.column("response_truncated")).as_py()):
        # Most records are undamaged: their column is empty, and is made without a value per row.
        column = pa.nulls(table.num_rows, pa.string())
    else:
        if values is not None:
            lines = values
        elif line_damage is not None:
            lines = [line_damage.get(n) for n in table.column("source_line").to_pylist()]
        elif "damage" in table.column_names:
            lines = table.column("damage").to_pylist()
        else:
            lines = [None] * table.num_rows
        pt = table.column("prompt_truncated").to_pylist()
        rt = table.column("response_truncated").to_pylist()
        values = [schema.join_damage((d, "truncated_copy_only" if p or r else None)) for d, p, r in zip(lines, pt, rt)]
        column = pa.array(values, pa.string())
    if "damage" in table.column_names:
        return table.set_column(table.schema.get_field_index("damage"), pa.field("damage", pa.string()), column)
    return table.append_column(pa.field("damage", pa.string()), column)


WINNERS_SQL = """
WITH keys AS (
  SELECT request_id, tenant_id, record_kind, source_sha256, source_line, source_file,
         coalesce(prompt_truncated, false) AS pt, coalesce(response_truncated, false) AS rt,
         prompt_chars IS NULL AS no_prompt, response_text IS NULL AS no_response, record_hash,
         d.damage IS NOT NULL AS damaged, epoch_us(received_at) AS received_us,
         CASE WHEN NOT coalesce(prompt_truncated, false) THEN nullif(prompt_chars, 0) END AS whole_chars
  FROM staged LEFT JOIN line_damage d USING (source_sha256, source_line)
), ranked AS (
  SELECT *,
    -- Some text outranks none, then whole text cut text: a copy with no prompt (LiteLLM's redacted callback
    -- payload) once beat a spend-log row holding the prompt's head and tail, and the only text was lost.
    row_number() OVER (copies ORDER BY no_prompt, pt, no_response, rt, damaged, {precedence}, source_file, source_line,
                                       source_sha256, record_hash) AS rn,
    count(DISTINCT record_hash) OVER copies AS variants,
    -- Copies of one request share its start; copies far apart are another request under the same id.
    max(received_us) OVER copies - min(received_us) OVER copies AS spread_us,
    -- Copies of one kind with whole prompts of different lengths are different requests, however close in time
    -- (a client fanning out requests under one id); kinds may log a prompt differently, so only one kind's compare.
    -- (a struct with a NULL field is no NULL: the CASE leaves out the copies whose prompt does not count)
    count(DISTINCT CASE WHEN whole_chars IS NOT NULL THEN (record_kind, whole_chars) END) OVER copies
      > count(DISTINCT CASE WHEN whole_chars IS NOT NULL THEN record_kind END) OVER copies AS other_prompts
  FROM keys
  -- The copies of one request: its id, whole records and each kind of split half apart, one customer's.
  WINDOW copies AS (PARTITION BY request_id, CASE WHEN record_kind IN {halves} THEN record_kind ELSE 'whole' END,
                                 CASE WHEN record_kind IN {response_halves} THEN NULL ELSE tenant_id END)
)
SELECT source_sha256, source_line, record_kind, request_id, tenant_id, rn, variants, spread_us, other_prompts, record_hash,
       [no_prompt::INT, pt::INT, no_response::INT, rt::INT, damaged::INT, {precedence}] AS quality, received_us
FROM ranked
"""

#: The same request logged whole (a callback, a spend log, a Helicone row) and in split logs: the
#: whole record and the joined pair (or a response half whose id only one customer's whole records
#: hold) compete by what each holds, as the copies of one kind do: a missing or truncated prompt, a missing or
#: truncated answer, damage, then the kind's precedence (payload over split over spend log; a tie
#: keeps the whole record). One side wins only if it holds at least as much on every count: where
#: each holds what the other lacks (the full prompt in one, the only answer in the other) both are
#: kept, so no text is lost. The loser's lines become duplicates: before, both were always kept, one
#: request counted twice, and its suspect row could show the copy that did not make it one. A pair
#: received more than REUSED_ID_SECONDS from its whole record is another request under the same id:
#: the one kept is chosen the same way, and the id is named in the notes (``reused``). Only a
#: request half one customer sent joins (as in the split join).
CROSS_KIND_SQL = """
WITH req AS (
  SELECT request_id, tenant_id, source_sha256, source_line, record_hash, quality, received_us,
         count(*) OVER (PARTITION BY request_id) AS senders
  FROM ranked WHERE rn = 1 AND record_kind IN {request_halves}
), resp AS (
  SELECT request_id, source_sha256, source_line, record_hash, quality FROM ranked
  WHERE rn = 1 AND record_kind IN {response_halves}
), whole AS (
  SELECT request_id, tenant_id, source_sha256, source_line, record_hash, quality, received_us FROM ranked
  WHERE rn = 1 AND record_kind NOT IN {halves}
), pair AS (
  -- the joined row: its prompt's flags from the request half, its answer's from the response half
  SELECT q.request_id, q.tenant_id, q.source_sha256 AS q_sha, q.source_line AS q_line, q.record_hash AS q_hash,
         a.source_sha256 AS a_sha, a.source_line AS a_line, a.record_hash AS a_hash, q.received_us,
         [q.quality[1], q.quality[2], coalesce(a.quality[3], 1), coalesce(a.quality[4], 0),
          greatest(q.quality[5], coalesce(a.quality[5], 0)), q.quality[6]] AS quality
  FROM req q LEFT JOIN resp a ON a.request_id = q.request_id
  WHERE q.senders = 1
  UNION ALL
  -- a response half with no request half, whose id one customer's whole records alone hold: no prompt
  SELECT a.request_id, o.tenant_id, NULL, NULL, NULL, a.source_sha256, a.source_line, a.record_hash, NULL,
         [1, 0, a.quality[3], a.quality[4], a.quality[5], a.quality[6]]
  FROM resp a
  JOIN (SELECT request_id, min(tenant_id) AS tenant_id FROM whole GROUP BY 1
        HAVING count(DISTINCT tenant_id) = 1 AND count(tenant_id) = count(*)) o  -- one named customer, no unnamed one
    USING (request_id)
  WHERE a.request_id NOT IN (SELECT request_id FROM req)
), contest AS (
  SELECT w.request_id, w.tenant_id, w.source_sha256 AS w_sha, w.source_line AS w_line, w.record_hash AS w_hash,
         p.q_sha, p.q_line, p.q_hash, p.a_sha, p.a_line, p.a_hash,
         p.quality[1] <= w.quality[1] AND p.quality[2] <= w.quality[2] AND p.quality[3] <= w.quality[3]
           AND p.quality[4] <= w.quality[4] AND p.quality[5] <= w.quality[5] AS pair_holds_all,
         w.quality[1] <= p.quality[1] AND w.quality[2] <= p.quality[2] AND w.quality[3] <= p.quality[3]
           AND w.quality[4] <= p.quality[4] AND w.quality[5] <= p.quality[5] AS whole_holds_all,
         p.quality < w.quality AS pair_ranks_first,
         -- another request under the same id: its start far from the record's (unknown times do not tell)
         coalesce(abs(p.received_us - w.received_us) > {reused_us}, false) AS reused
  FROM whole w JOIN pair p ON p.request_id = w.request_id AND p.tenant_id IS NOT DISTINCT FROM w.tenant_id
)
-- A lone response half names no customer: it may lose, never make the whole record that names one lose,
-- and only as a copy of the record's answer (the texts are compared after this query: _keep_other_answers).
SELECT *, CASE WHEN q_sha IS NULL THEN CASE WHEN whole_holds_all THEN 'pair' END
               WHEN pair_holds_all AND pair_ranks_first THEN 'whole'
               WHEN whole_holds_all AND NOT pair_ranks_first THEN 'pair' END AS loser
FROM contest
"""

#: The records that lose the whole-or-split contest, one row each (equality keys: marking them is a
#: hash join however many there are).
CROSS_LOSERS_SQL = """
SELECT w_sha AS sha, w_line AS line, w_hash AS hash FROM cross_kind WHERE loser = 'whole'
UNION ALL SELECT q_sha, q_line, q_hash FROM cross_kind WHERE loser = 'pair' AND q_sha IS NOT NULL
UNION ALL SELECT a_sha, a_line, a_hash FROM cross_kind WHERE loser = 'pair' AND a_sha IS NOT NULL
"""


#: Copies of one request received further apart than this are another request reusing its id.
REUSED_ID_SECONDS = 1


def winners_sql() -> str:
    """WINNERS_SQL with the registered halves and record kind precedence filled in."""
    return WINNERS_SQL.format(halves=half_kinds(), response_halves=half_kinds("response"), precedence=precedence_sql())


def _exchanges(c: Case, con: duckdb.DuckDBPyConnection, segments: list[Staged], order: dict[str, int], duplicates: Tally[str],
               band_ceilings: dict[str, int], unnamed_requests: int, files: list[dict[str, Any]]) -> dict[str, Any]:
    """Write exchanges.parquet; count losers per file; return stats for the manifest. ``unnamed_requests``:
    split request lines quarantined because they name no customer (:func:`_answer_fills`); ``files``: the case's input
    files, for the lines of the exchanges logged twice that are folded (:func:`fold_logged_twice`)."""
    con.execute(f"CREATE TEMP TABLE ranked AS {winners_sql()}")
    con.execute(f"""CREATE TEMP TABLE cross_kind AS {CROSS_KIND_SQL.format(
        halves=half_kinds(), request_halves=half_kinds("request"), response_halves=half_kinds("response"),
        reused_us=REUSED_ID_SECONDS * 1_000_000)}""")
    _keep_other_answers(con)
    fills, withheld = _answer_fills(con, unnamed_requests)
    # The losers of the whole-or-split contest drop out as copies (a response half with its request half).
    con.execute(f"""UPDATE ranked SET rn = 2 FROM ({CROSS_LOSERS_SQL}) x
                    WHERE ranked.source_sha256 = x.sha AND ranked.source_line = x.line
                      AND ranked.record_hash IS NOT DISTINCT FROM x.hash AND ranked.rn = 1""")
    for sha, n in con.execute("SELECT source_sha256, count(*) FROM ranked WHERE rn > 1 GROUP BY 1").fetchall():
        duplicates[sha] += n
    dup_requests = con.execute("SELECT count(*) FROM ranked WHERE rn > 1").fetchall()[0][0]
    superseded = con.execute("SELECT count(*) FROM ranked WHERE rn = 1 AND variants > 1").fetchall()[0][0]
    # One row is kept per (request id, customer): a client that reuses its own ids for different requests
    # loses all but one of them from the search, so the notes name them.
    reused = [rid for (rid,) in con.execute(
        f"""SELECT request_id FROM (
              SELECT request_id, tenant_id FROM ranked WHERE rn = 1 AND variants > 1 AND spread_us > {REUSED_ID_SECONDS * 1_000_000}
              UNION SELECT request_id, tenant_id FROM cross_kind WHERE reused AND loser IS NOT NULL)
            ORDER BY request_id, tenant_id""").fetchall()]
    # Copies received together whose whole prompts differ: a client fanning out requests under one id, or a log
    # writing one request again with other text. Either way one is kept and the others' text goes unsearched.
    other_prompts = [rid for (rid,) in con.execute(
        f"""SELECT DISTINCT request_id FROM ranked
            WHERE rn = 1 AND variants > 1 AND other_prompts AND coalesce(spread_us, 0) <= {REUSED_ID_SECONDS * 1_000_000}
              AND request_id NOT IN (SELECT request_id FROM cross_kind WHERE reused AND loser IS NOT NULL)
            ORDER BY request_id""").fetchall()]
    # A response half names no customer: the different answers to an id two customers sent cannot be
    # told apart, so one is kept and the others count as its copies; the notes name those ids.
    shared_answers = [rid for (rid,) in con.execute(
        f"""SELECT request_id FROM ranked WHERE rn = 1 AND variants > 1 AND record_kind IN {half_kinds("response")}
              AND request_id IN (SELECT request_id FROM ranked WHERE rn = 1 AND record_kind IN {half_kinds("request")}
                                 -- several senders, as the split join counts them (an unnamed one too)
                                 GROUP BY 1 HAVING count(*) > 1)
            ORDER BY request_id""").fetchall()]
    # A request id with several different answers in the split response log, sent by one customer or by none
    # the request logs name (a retried or replayed request logs each): one row is kept per request id and
    # customer, so the others go unsearched; the notes name those ids (before, they were counted as
    # duplicates and named nowhere). Ids several customers sent, or one reused, have notes of their own.
    several = set(shared_answers) | set(reused) | set(other_prompts)  # named by their own notes
    other_answers = [rid for (rid,) in con.execute(
        f"""SELECT s.request_id FROM staged s
            WHERE s.record_kind IN {half_kinds("response")} AND s.request_id IN (
              SELECT request_id FROM ranked WHERE rn = 1 AND variants > 1 AND record_kind IN {half_kinds("response")})
            GROUP BY 1 HAVING count(DISTINCT s.response_text) > 1 ORDER BY 1""").fetchall() if rid not in several]
    con.execute(f"CREATE TEMP TABLE engine_keys AS {ENGINE_KEYS_SQL}")
    # The engine logs name a request by its id alone: an id several kept requests carry (two customers'
    # client-supplied ids) cannot say whose request the engine served, so its engine records are
    # attributed to none of them (no count, node or room): each is judged by its own prompt, as the
    # scan's shared-id rule says. Given to both, a one-line question took the engine's over-limit count.
    con.execute(f"""CREATE TEMP TABLE shared_ids AS
                    SELECT request_id FROM ranked WHERE rn = 1 AND record_kind NOT IN {half_kinds("response")}
                    GROUP BY request_id HAVING count(DISTINCT {{'t': tenant_id}}) > 1""")
    # The kept rows with their damage and engine keys come from one query, in the order the staged
    # files are read (file, then line), and are consumed as a stream alongside them: memory holds
    # one batch of it, never the whole case's keys, and DuckDB runs one query, not three per file.
    kept = _KeptRows(con.sql(f"""
        SELECT f.ord, r.source_line, r.request_id, d.damage, k.rid IS NOT NULL AS has_keys,
               k.prefill_node, k.decode_node, k.bootstrap_room, k.over_limit_len, k.prefill_len, r.record_hash
        FROM ranked r JOIN file_order f ON f.sha = r.source_sha256
        LEFT JOIN line_damage d USING (source_sha256, source_line)
        LEFT JOIN engine_keys k ON k.rid = r.request_id AND r.request_id NOT IN (SELECT request_id FROM shared_ids)
        WHERE r.rn = 1 AND r.record_kind NOT IN {half_kinds()}
        ORDER BY f.ord, r.source_line""").to_arrow_reader(KEPT_BATCH))

    notes: list[str] = []
    # The answers that go into whole records, read from the staged response halves before the records are written.
    answers = _Answers(fills, _paths(segments)) if fills else None
    sink = ParquetSink(c.table_path("exchanges"), schema.EXCHANGES)
    writer = _BackgroundWriter(sink)

    def kept_part(ord_: int, batch: pa.RecordBatch) -> tuple[pa.Table, dict[str, tuple[Any, ...]]] | None:
        """The kept rows of ``batch`` (of file ``ord_``) with their damage, and their engine keys."""
        lines = batch.column("source_line")
        rows = kept.take_until(ord_, pc.max(lines).as_py())
        if rows.num_rows == 0:
            return None
        if pc.count_distinct(lines).as_py() == len(lines):
            mask = pc.is_in(lines, value_set=rows.column("source_line").combine_chunks())
            if mask.true_count < batch.num_rows:  # most batches are kept whole: their text is not copied
                batch = batch.filter(mask)
        else:  # records sharing a line (a JSON array on one line): chosen by line and content
            chosen = _kept_on_shared_lines(lines.to_pylist(), batch.column("record_hash").to_pylist(), _kept_tuples(rows))
            if len(chosen) < batch.num_rows:
                batch = batch.take(pa.array(chosen, pa.int64()))
        table = _with_answers(_with_damage(pa.Table.from_batches([batch]), _kept_damage(rows)), answers)
        return table, _kept_engine_keys(rows)

    def batch_rows(segment: Staged, batches: _Batches) -> None:
        """Write the kept rows of a batch segment's files: chosen file by file (in the pieces each file's
        own staging file would have been read in: row groups of ROW_GROUP_ROWS), taken, marked and enriched
        at once, and handed to the writer as those pieces (its pages follow them: the same bytes as
        :func:`kept_part` piece by piece, without a dozen Arrow calls per file of one record)."""
        table, lines, bounds = batches.get(segment.path)
        take: list[int] = []
        damage: list[str | None] = []
        sizes: list[int] = []
        engine: dict[str, tuple[Any, ...]] = {}
        for sha in segment.shas or ():
            if sha not in bounds:
                continue  # no row of this table
            lo, hi = bounds[sha]
            for at in range(lo, hi, ROW_GROUP_ROWS):
                piece = lines[at:min(at + ROW_GROUP_ROWS, hi)].tolist()
                rows = _kept_tuples(kept.take_until(order[sha], max(piece)))
                if not rows:
                    continue
                by_line = {r[0]: r for r in rows}
                if len(set(piece)) == len(piece):
                    chosen = [at + i for i, line in enumerate(piece) if line in by_line]
                else:  # records sharing a line (a JSON array on one line): chosen by line and content
                    hashes = table.column("record_hash").slice(at, len(piece)).to_pylist()
                    chosen = [at + i for i in _kept_on_shared_lines(piece, hashes, rows)]
                take.extend(chosen)
                damage.extend(by_line[piece[i - at]][2] for i in chosen)
                sizes.append(len(chosen))
                engine.update({r[1]: r[4:9] for r in rows if r[3]})  # by request id: the same keys whichever file asks
        if not take:
            return
        rows_kept = _with_answers(_with_damage(table.take(pa.array(take, pa.int64())), values=damage), answers)
        whole = _enrich(rows_kept, engine, band_ceilings).combine_chunks()
        offsets = np.cumsum([0] + sizes).tolist()
        writer.write_batch(pa.concat_tables([whole.slice(a, b - a) for a, b in zip(offsets, offsets[1:])]))

    batches = _Batches()
    try:
        for segment in segments:
            if segment.shas is not None:  # a batch of small files: each file's rows in turn
                batch_rows(segment, batches)
                continue
            path = segment.path
            ord_ = order[staged_content(path.name)]
            pf = pq.ParquetFile(path)
            staged_lines = pf.read(columns=["source_line"]).column("source_line")
            if len(staged_lines) == 0 or not kept.any_until(ord_, pc.max(staged_lines).as_py()):
                continue  # no row of this staged file is kept: its text is never read
            for g in range(pf.num_row_groups):
                for batch in pf.iter_batches(batch_size=read_batch_rows(pf, g), row_groups=[g]):
                    got = kept_part(ord_, batch)
                    if got is not None:
                        writer.write_batch(_enrich(got[0], got[1], band_ceilings))
        if not kept.exhausted():  # every kept row belongs to a staged file read above: never drop one silently
            raise RuntimeError("finalise: kept exchange rows were left unread (staged files out of order?)")
        kept.close()
        # Joined split-log rows: the engine keys of the halves' requests only.
        engine = _engine_keys(con, f"""SELECT {ENGINE_KEY_COLUMNS} FROM engine_keys k WHERE k.rid IN
                                       (SELECT request_id FROM ranked WHERE rn = 1 AND record_kind IN {half_kinds()})
                                       AND k.rid NOT IN (SELECT request_id FROM shared_ids)""")
        for batch in _split_joined(con, _paths(segments)):
            writer.write_batch(_enrich(_with_damage(batch), engine, band_ceilings))
        writer.close()
        sink.close()
    except BaseException:
        writer.close(wait_only=True)
        sink.abort()
        raise
    engine_answers = _engine_answers(c, con)
    logged_twice = fold_logged_twice(con, c.table_path("exchanges"), c.table_path("logged_twice"), files, "engine_keys")
    duplicates.update(logged_twice.lines)

    stats = con.execute(
        f"""SELECT count(*), min(received_at), max(received_at),
                   count(*) FILTER (WHERE orphan = 'request_only'), count(*) FILTER (WHERE orphan = 'response_only'),
                   count(*) FILTER (WHERE prompt_truncated), count(*) FILTER (WHERE tenant_id IS NULL AND orphan IS DISTINCT FROM 'response_only'),
                   count(*) FILTER (WHERE reported_prompt_tokens_plausible = false),
                   count(*) FILTER (WHERE problems IS NOT NULL),
                   count(*) FILTER (WHERE damage IS NOT NULL)
            FROM read_parquet({_lit(c.table_path('exchanges'))})"""
    ).fetchall()[0]
    rows, tmin, tmax, orphan_req, orphan_resp, truncated, no_tenant, implausible, with_problems, damaged = stats
    by_reason = dict.fromkeys(schema.DAMAGE_REASONS, 0)
    by_reason.update(con.execute(
        f"""SELECT reason, count(*) FROM (SELECT unnest(string_split(damage, ';')) AS reason
            FROM read_parquet({_lit(c.table_path('exchanges'))}) WHERE damage IS NOT NULL) GROUP BY 1 ORDER BY 1"""
    ).fetchall())
    models = con.execute(
        f"SELECT coalesce(model, '(none)'), count(*) FROM read_parquet({_lit(c.table_path('exchanges'))}) GROUP BY 1 ORDER BY 2 DESC, 1"
    ).fetchall()
    sources = dict(con.execute(
        f"SELECT prompt_tokens_source, count(*) FROM read_parquet({_lit(c.table_path('exchanges'))}) GROUP BY 1 ORDER BY 1"
    ).fetchall())
    collisions = con.execute(
        f"SELECT count(*) FROM (SELECT request_id FROM read_parquet({_lit(c.table_path('exchanges'))}) GROUP BY 1 HAVING count(DISTINCT tenant_id) > 1)"
    ).fetchall()[0][0]
    if truncated:
        notes.append(f"{truncated} prompts are truncated in the logs (LiteLLM keeps the head and tail of a long string and "
                     "its length is rebuilt from the truncation marker; other exports cut a body short): matching sees "
                     "only the text that was kept")
    if no_tenant:
        notes.append(f"{no_tenant} requests name no tenant (none of the tenant fields is set): set tenant_field")
    if implausible:
        notes.append(f"{implausible} reported prompt token counts are impossible for their text and were not trusted")
    if with_problems:
        notes.append(f"{with_problems} records had fields that could not be used (a count that is not a number, ...); "
                     "they were kept with those fields empty (see exchanges.problems)")
    if collisions:
        notes.append(f"{collisions} request ids are used by more than one tenant; they are kept apart by tenant (in split "
                     "logs a response to such an id names no tenant: it is kept as a response with no request, given to neither)")
        # Two customers' requests under one id rarely start together; one request whose records name its
        # customer in different fields (a spend log's team_id, a callback's metadata org id) always does.
        table = f"read_parquet({_lit(c.table_path('exchanges'))})"
        same_start = [rid for (rid,) in con.execute(
            f"""WITH e AS (SELECT request_id, tenant_id, epoch_us(received_at) AS t FROM {table}
                           WHERE request_id IN (SELECT request_id FROM {table} GROUP BY 1 HAVING count(DISTINCT tenant_id) > 1))
                SELECT DISTINCT a.request_id FROM e a JOIN e b ON a.request_id = b.request_id AND a.tenant_id < b.tenant_id
                                                             AND abs(a.t - b.t) <= {REUSED_ID_SECONDS * 1_000_000}
                ORDER BY 1""").fetchall()]
        if same_start:
            shown = shown_ids(same_start)
            notes.append(f"{len(same_start)} of them {'carry' if len(same_start) > 1 else 'carries'} the same start time "
                         f"under each tenant: most likely one request whose records name its customer in different fields "
                         f"(the tenant rule takes the first field set), so its own text may read as another customer's: "
                         f"{shown}. Fix: set tenant_field in the case file to the field that names the customer in "
                         "every record, and ingest again")
    if reused:
        shown = shown_ids(reused)
        notes.append(f"{len(reused)} request id{'s were' if len(reused) > 1 else ' was'} reused by one customer for "
                     f"different requests (copies received more than {REUSED_ID_SECONDS} s apart): one row is kept per "
                     f"request id and customer, so the others were counted as duplicates and not searched: {shown}. "
                     "Fix: re-export those requests with unique ids (a client-supplied id need not be unique)")
    if other_prompts:
        shown = shown_ids(other_prompts)
        notes.append(f"{len(other_prompts)} request id{'s' if len(other_prompts) > 1 else ''} had copies received within "
                     f"{REUSED_ID_SECONDS} s of each other holding different prompts (a client sending several requests "
                     f"under one id, or a log writing one request again with other text): one row is kept per request id "
                     f"and customer, so the other copies' text was not searched: {shown}. Fix: read those copies by hand "
                     "(`forensics query` on the staged rows, or the logs), or re-export them under ids of their own and "
                     "ingest again")
    if shared_answers:
        shown = shown_ids(shared_answers)
        notes.append(f"{len(shared_answers)} request id{'s' if len(shared_answers) > 1 else ''} sent by several customers "
                     f"had different answers in the split response logs; an answer names no customer, so one was kept "
                     f"(a response with no request) and the others were counted as duplicates and not searched: {shown}. "
                     "Fix: find whose each answer was in other logs (the gateway's access log) and check those answers by hand")
    if other_answers:
        shown = shown_ids(other_answers)
        notes.append(f"{len(other_answers)} request id{'s' if len(other_answers) > 1 else ''} had different answers in the "
                     f"split response logs, sent by one customer or by none the request logs name (a retried or replayed "
                     f"request logs each answer): one row is kept per request id and customer, so one answer was searched "
                     f"and the others were counted as duplicates: "
                     f"{shown}. Fix: read those answers by hand (`forensics query`), or re-export them under ids of their "
                     "own and ingest again")
    if orphan_req or orphan_resp:
        notes.append(f"split logs: {orphan_req} requests with no response, {orphan_resp} responses with no request (kept, flagged)")
    if withheld:
        notes.append(f"{withheld} whole records have no answer and the split response log holds one for their id, but "
                     "split request lines that name no customer were quarantined (one may be that answer's request): "
                     "those answers were kept as responses naming no customer. Fix: set tenant_field so the split "
                     "request lines name their customer, and ingest again")
    if engine_answers:
        notes.append(f"{engine_answers} record{'s' if engine_answers > 1 else ''} had no answer in the gateway logs (a "
                     "failed or broken stream) and took the text the decode node logged as generated for "
                     f"{'them' if engine_answers > 1 else 'it'} (its request.finished line: response_source_file and "
                     "response_source_line say where), so the suspects among them are searched with it")
    if logged_twice.left_out:
        notes.append(f"the check for exchanges logged twice under two customer ids was left out: more than "
                     f"{MAX_PAIRS:,} pairs of rows of two logs hold the same answer and prompt at the same time "
                     "(thousands of customers sending one long prompt together?). Copies a second gateway logged, if "
                     "any, were not folded: a customer may be named twice. Fix: ingest one gateway's logs")
    if logged_twice.same_id:
        notes.append(f"{logged_twice.same_id} exchange{'s' if logged_twice.same_id > 1 else ''} logged twice under one "
                     "customer id in two logs, under two request ids (a second gateway keyed like the first: the same "
                     "answer and one request's prompt at the same time) "
                     f"{'were' if logged_twice.same_id > 1 else 'was'} folded into one row each; logged_twice.parquet "
                     "lists every copy")
    if logged_twice.rows > logged_twice.same_id:
        shown = first_few([f"{safe_id(kept)} ~ {safe_id(other)} ({n})" for kept, other, n in logged_twice.linked], 5)
        two_ids = logged_twice.rows - logged_twice.same_id
        notes.append(f"{two_ids} exchange{'s' if two_ids > 1 else ''} logged twice under two customer "
                     f"ids {'were' if two_ids > 1 else 'was'} folded into one row each, kept under the first id "
                     f"of each pair: {shown} (the same answer and one request's prompt at the same time, in two logs, "
                     "for two rows or more of each id in two 10 s windows or more and half or more of one id's calls: a "
                     "second gateway under its own request ids and account names, or a spend log naming teams beside "
                     "callbacks naming organisations; the id kept is the one the engine logs place on a node most "
                     "often, then the one whose rows hold whole prompts, then the one with the most records). "
                     "logged_twice.parquet lists every copy; if two of these ids are different customers, read their "
                     "rows there before notifying"
                     + (f". For {logged_twice.unplaced} of these pairs no engine log placed either id on a node: the id "
                        "kept may be the second gateway's account name, not the one the customer is known by; check "
                        "it" if logged_twice.unplaced else ""))
    if logged_twice.clocks:
        shown = _clocks_shown(logged_twice.clocks)
        many = len(logged_twice.clocks) > 1
        notes.append(f"the clock{'s' if many else ''} of {len(logged_twice.clocks)} log{'s' if many else ''} read apart "
                     "from another log's, by the exchanges both logged (the same answers completed in one a fixed time "
                     "after the other) or through the engine logs (the requests each log sent ended a fixed time apart "
                     "on the engine nodes that ran them, whatever the nodes' own clocks; the clock kept is one whose "
                     "requests began on the engine after it received them and ended before it saw them complete, where "
                     f"one is): {shown}. Their rows' received and completed times in the case tables are moved "
                     "onto the other log's clock (the manifest's clock_offsets lists every file: the time logged is the "
                     "one in the tables plus the offset). If a log writes local time with no zone, set its [[inputs]] "
                     "timezone in the case file and ingest again"
                     + (". An offset of a time zone (whole quarter hours) is most often local time written with no zone: "
                        "where the engine logs do so too, they agree with the log writing local time, and it is that "
                        "log's clock that was kept; check which logs write local time, set their timezone, and ingest "
                        "again" if any(zone_like(c.offset_us) for c in logged_twice.clocks) else ""))
    if logged_twice.engine_unchecked:
        notes.append(f"the engine logs name requests of {len(logged_twice.engine_unchecked)} gateway log"
                     f"{'s' if len(logged_twice.engine_unchecked) > 1 else ''} but give no time for their ends (vLLM's "
                     "default lines carry no year; a line with no time), so those logs' clocks could not be checked "
                     "against the others' through the engine logs: "
                     + first_few([json.dumps(f, ensure_ascii=False) for f in logged_twice.engine_unchecked], 5)
                     + ". If one of them is a replica whose host's clock is off, its requests are placed that far from "
                     "the others': log the engine's lines with their dates (vLLM's logging configuration, VLLM_LOGGING_CONFIG_PATH, "
                     "with a full date) where it can be done, or check the gateway hosts' clocks")
    alike = [c for c in logged_twice.unread_clocks if c.through != "engine"]
    apart = [c for c in logged_twice.unread_clocks if c.through == "engine"]
    if apart:
        notes.append(f"{len(apart)} pair{'s' if len(apart) > 1 else ''} of logs sent requests that ended a fixed time "
                     "apart on some engine nodes, but not on most of the nodes that ran both, to read as one log's "
                     f"clock off: {_clocks_shown(apart)}. Their times were compared as logged. If "
                     "one of them writes local time with no zone, or its host's clock was off or changed during the "
                     "case, its requests are placed that far from the other's: a suspect's stale pages may then seem "
                     "to come from requests after it, and the records a node served before it are counted wrongly. Set "
                     "its [[inputs]] timezone in the case file, or correct its times, and ingest again")
    if alike:
        shown = _clocks_shown(alike)
        notes.append(f"{len(alike)} pair{'s' if len(alike) > 1 else ''} of logs "
                     f"hold long answers alike that completed in one a fixed time after the other, but too few of their "
                     f"calls, or of too few customers, to read as one log's clock off: {shown}. Their times were "
                     "compared as logged. If one of them is a second gateway in front of the other whose clock is off, "
                     "changed during the case, or writes local time with no zone, its copies of the other's exchanges "
                     "were not folded and its customers may be named twice: set its [[inputs]] timezone in the case "
                     "file, or correct its times, and ingest again")
    if fills:
        notes.append(f"{len(fills)} whole records had no answer (the callback or spend log lost it) and took it from the split "
                     "response log of their id (response_source_file and response_source_line say where)")
    return {
        "rows": rows,
        "duplicate_requests": dup_requests,
        "superseded_variants": superseded,
        "orphans": {"request_only": orphan_req, "response_only": orphan_resp},
        "truncated_prompts": truncated,
        "requests_without_tenant": no_tenant,
        "implausible_reported_counts": implausible,
        "records_with_problems": with_problems,
        "records_from_damaged_input": {"total": damaged, "by_reason": by_reason},
        "request_id_collisions": collisions,
        "time_range": [iso(tmin), iso(tmax)] if tmin is not None else None,
        "models": [[m, n] for m, n in models],
        "prompt_tokens_sources": sources,
        "notes": notes,
    } | ({"logged_twice": {"rows": logged_twice.rows, "linked": [list(x) for x in logged_twice.linked],
                           "kept_unplaced": logged_twice.unplaced, "same_id": logged_twice.same_id}} if logged_twice.rows
         else {"logged_twice": {"rows": 0, "left_out": True}} if logged_twice.left_out else {}) \
      | ({"clock_offsets": [_clock_entry(c) | {"answer_files": list(c.answer_files)} for c in logged_twice.clocks]}
         if logged_twice.clocks else {}) \
      | ({"clock_offsets_unread": [_clock_entry(c) for c in logged_twice.unread_clocks]}
         if logged_twice.unread_clocks else {})


def _clocks_shown(clocks: list[ClockOffset]) -> str:
    """The first few of the logs ``clocks`` names, for a note: each log's first file (and how many others), its kind
    of record, its offset against the other log, and the exchanges and customers that agree on it."""
    def log(files: tuple[str, ...], kind: str) -> str:
        more = len(files) - 1
        return (json.dumps(files[0] if files else "", ensure_ascii=False)
                + (f" (and {more} other file{'s' if more > 1 else ''})" if more > 0 else "") + f" ({kind} records)")

    return first_few([f"{log(c.files, c.kind)} {c.offset_us / 1e6:+,.3f} s against {log(c.reference, c.reference_kind)} "
                      + (f"({c.exchanges:,} requests, through the engine logs)" if c.through == "engine"
                         else "(nothing of their own showed their clock: moved with the rest of their log)"
                         if c.through == "log" else f"({c.exchanges:,} exchanges of {c.customers:,} customers)")
                      for c in clocks], 5)


def _clock_entry(c: ClockOffset) -> dict[str, Any]:
    """A log whose clock was read (or nearly) as the manifest lists it."""
    return {"files": list(c.files), "record_kind": c.kind, "reference": list(c.reference),
            "reference_record_kind": c.reference_kind, "offset_seconds": c.offset_us / 1e6, "exchanges": c.exchanges,
            "customers": c.customers, "read_from": READ_FROM[c.through]}


#: What a clock offset was read from, as the manifest says it (``clock_offsets``' ``read_from``).
READ_FROM = {"exchanges": "exchanges both logged", "engine": "engine logs",
             "log": "none of their own: moved with the rest of their log"}


def _kept_on_shared_lines(lines: list[int], hashes: list[str | None], rows: list[tuple[Any, ...]]) -> list[int]:
    """Which staged rows (``lines``, ``hashes``: their line and record hash, in order) are the kept ``rows``
    when records share a line: one per kept (line, record hash), the first. Copies alike are the same row
    whichever is written; a copy ranked a duplicate is not written."""
    wanted = Tally((r[0], r[9]) for r in rows)
    chosen = []
    for i, key in enumerate(zip(lines, hashes)):
        if wanted[key] > 0:
            wanted[key] -= 1
            chosen.append(i)
    return chosen


#: Rows of the kept-rows stream fetched at once (small columns only).
KEPT_BATCH = 8192


class _KeptRows:
    """The stream of kept exchange rows, ``(file ord, line, request_id, damage, has_keys,
    *engine keys (5), record_hash)`` in (file, line) order, read forward in step with the staged files.

    Rows are handed out as Arrow slices of the query's batches, not as Python tuples: a case's kept rows
    are most of its records, and making a tuple of each was a good part of the finaliser's own time."""

    def __init__(self, reader: pa.RecordBatchReader) -> None:
        self._reader = reader
        self._batch: pa.RecordBatch | None = None
        self._ords = np.empty(0, np.int64)
        self._lines = np.empty(0, np.int64)
        self._at = 0

    def _fill(self) -> bool:
        """Make sure a row is waiting; False at the end of the stream."""
        while self._at >= len(self._ords):
            try:
                batch = self._reader.read_next_batch()
            except StopIteration:
                return False
            self._batch, self._at = batch, 0
            self._ords = batch.column(0).to_numpy(zero_copy_only=False)
            self._lines = batch.column(1).to_numpy(zero_copy_only=False)
        return True

    def any_until(self, ord_: int, line: int) -> bool:
        """Whether the next kept row is of file ``ord_`` at or before ``line``."""
        if not self._fill():
            return False
        return bool(self._ords[self._at] == ord_ and self._lines[self._at] <= line)

    def take_until(self, ord_: int, line: int) -> pa.Table:
        """The kept rows of file ``ord_`` up to ``line``, with the ord column (an empty table when none)."""
        pieces: list[pa.RecordBatch] = []
        while self._fill() and self._ords[self._at] == ord_ and self._lines[self._at] <= line:
            at = self._at
            # The rows are in (ord, line) order: this file's run ends where the ord changes, and within
            # it the lines up to ``line`` come first.
            run_end = at + int(np.searchsorted(self._ords[at:], ord_, side="right"))
            end = at + int(np.searchsorted(self._lines[at:run_end], line, side="right"))
            assert self._batch is not None
            pieces.append(self._batch.slice(at, end - at))
            self._at = end
        return pa.Table.from_batches(pieces, schema=self._reader.schema)

    def exhausted(self) -> bool:
        """Whether every kept row was taken."""
        return not self._fill()

    def close(self) -> None:
        """Release the query's result."""
        self._reader.close()


def _kept_tuples(kept: pa.Table) -> list[tuple[Any, ...]]:
    """Rows of :meth:`_KeptRows.take_until` as tuples, without the ord: ``(line, request_id, damage,
    has_keys, *engine keys (5), record_hash)``."""
    return list(zip(*(kept.column(i).to_pylist() for i in range(1, kept.num_columns))))


def _kept_engine_keys(kept: pa.Table) -> dict[str, tuple[Any, ...]]:
    """The engine keys of the kept rows that have them, by request id."""
    with_keys = kept.filter(kept.column("has_keys"))
    names = ("prefill_node", "decode_node", "bootstrap_room", "over_limit_len", "prefill_len")
    return dict(zip(with_keys.column("request_id").to_pylist(),
                    zip(*(with_keys.column(name).to_pylist() for name in names))))


def _kept_damage(kept: pa.Table) -> dict[int, str]:
    """The damage of the kept rows that have any, by line."""
    damaged = kept.filter(pc.is_valid(kept.column("damage")))
    return dict(zip(damaged.column("source_line").to_pylist(), damaged.column("damage").to_pylist()))


class _BackgroundWriter:
    """Hand a sink's batches to one writer thread, in order, so that compressing and writing one
    batch (Arrow releases the GIL for it) runs on the second core while the next is read and
    enriched. At most ``depth`` batches wait: memory stays bounded by a few batches."""

    def __init__(self, sink: ParquetSink, depth: int = 2) -> None:
        self._sink = sink
        self._depth = depth
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="finalize-writer")
        self._waiting: deque[Future[None]] = deque()

    def write_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Queue ``batch``; raise the error of an earlier write, if one failed."""
        self._waiting.append(self._pool.submit(self._sink.write_batch, batch))
        while len(self._waiting) > self._depth:
            self._waiting.popleft().result()

    def close(self, wait_only: bool = False) -> None:
        """Wait for every queued write (raising the first error unless ``wait_only``); stop the thread."""
        try:
            while self._waiting:
                future = self._waiting.popleft()
                if wait_only:
                    future.exception()
                else:
                    future.result()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)


ENGINE_KEYS_SQL = """
SELECT rid,
  min(node) FILTER (WHERE role = 'prefill') AS prefill_node,
  min(node) FILTER (WHERE role = 'decode') AS decode_node,
  min(bootstrap_room) AS bootstrap_room,
  max(input_len) FILTER (WHERE event IN ('over_limit', 'exceeds_max_tokens')) AS over_limit_len,
  max(input_len) FILTER (WHERE (event = 'req_time_stats' AND role = 'prefill')
                           -- vLLM's count of prompt_token_ids: the input as the engine tokenised it
                           OR (event = 'request_received' AND input_len IS NOT NULL)) AS prefill_len,
  -- when the request's first and last events past its prefill were written, and on how many nodes (the logs' clocks
  -- are read against them on that node, whose own clock may differ from the prefill node's: a review;
  -- forensics.ingest.copies.clock_offsets)
  max(epoch_us(time)) FILTER (WHERE role IS DISTINCT FROM 'prefill') AS ended_us,
  min(epoch_us(time)) FILTER (WHERE role IS DISTINCT FROM 'prefill') AS started_us,
  -- (a node is its host's name in its folder: two engine deployments may name their hosts alike, a review)
  min(regexp_replace(source_file, '[^/]*$', '') || node) FILTER (WHERE role IS DISTINCT FROM 'prefill' AND time IS NOT NULL)
    AS ended_node,
  count(DISTINCT regexp_replace(source_file, '[^/]*$', '') || node)
    FILTER (WHERE role IS DISTINCT FROM 'prefill' AND time IS NOT NULL) AS ended_nodes
FROM staged_events WHERE rid IS NOT NULL GROUP BY rid
"""
#: The columns of ``engine_keys`` a row's engine keys are (:func:`_enrich`).
ENGINE_KEY_COLUMNS = "k.rid, k.prefill_node, k.decode_node, k.bootstrap_room, k.over_limit_len, k.prefill_len"


def _engine_keys(con: duckdb.DuckDBPyConnection, sql: str, params: list[Any] | None = None) -> dict[str, tuple[Any, ...]]:
    """Per engine rid: prefill node, decode node, bootstrap room, real input lengths (rows of
    the ``engine_keys`` table that ``sql`` selects)."""
    return {row[0]: row[1:] for row in con.execute(sql, params or []).fetchall()}


def _enrich(batch: pa.RecordBatch | pa.Table, engine: dict[str, tuple[Any, ...]],
            band_ceilings: dict[str, int] | None = None) -> pa.Table:
    """Attach engine keys and choose the trusted token count for each row of a batch.

    ``band_ceilings``: per source file, the ceiling below which its rows were decided by their size
    instead of the tokenizer (``forensics.tokens``); such rows keep their count as tokenizer rows do.
    """
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    if table.num_rows == 0:
        return table
    cols = {name: table.column(name).to_pylist() for name in (
        "request_id", "prompt_bytes", "prompt_messages", "reported_prompt_tokens", "prompt_tokens",
        "prompt_tokens_source", "prompt_tokens_low", "prompt_tokens_high", "reported_prompt_tokens_plausible",
        "rid", "prefill_node", "decode_node", "bootstrap_room", "prompt_truncated", "source_sha256", "prompt_nontext_parts",
        "problems")}
    n = table.num_rows
    for i in range(n):
        if cols["prompt_tokens_source"][i] is None:
            cols["prompt_tokens_source"][i] = "unknown"
        nbytes, msgs, reported = cols["prompt_bytes"][i], cols["prompt_messages"][i] or 1, cols["reported_prompt_tokens"][i]
        nontext = cols["prompt_nontext_parts"][i] or 0
        if reported is not None and nbytes is not None:
            ok = tokens.plausible(reported, nbytes, msgs, nontext)
            cols["reported_prompt_tokens_plausible"][i] = ok
            if ok and nontext and not tokens.unchecked_count(reported):
                _set_count(cols, i, None, "unknown")  # the placeholder's 1 on a prompt its text is only part of
            # With images or files the tokenizer counted the text alone; the gateway counted them too.
            elif ok and (cols["prompt_tokens_source"][i] in ("estimate", "unknown")
                         or (nontext and cols["prompt_tokens_source"][i] == "tokenizer")):
                _set_count(cols, i, reported, "reported")
        elif reported is not None and cols["prompt_tokens_source"][i] == "unknown" and tokens.unchecked_count(reported):
            _set_count(cols, i, reported, "reported")
        keys = engine.get(cols["request_id"][i])
        if keys is None:
            continue
        prefill, decode, room, over_limit_len, prefill_len = keys
        cols["rid"][i] = cols["request_id"][i]
        cols["prefill_node"][i] = cols["prefill_node"][i] or prefill
        cols["decode_node"][i] = cols["decode_node"][i] or decode
        cols["bootstrap_room"][i] = cols["bootstrap_room"][i] if cols["bootstrap_room"][i] is not None else room
        source, current = cols["prompt_tokens_source"][i], cols["prompt_tokens"][i]
        engine_count = over_limit_len if over_limit_len is not None else prefill_len
        # A count of the text alone (the tokenizer's, or one the band decided) stands against the engine's,
        # unless the prompt has image, audio or file parts (the engine counted those too), or, for the
        # tokenizer's, the engine's count is what the chat template adds to it: at least the text's and at most
        # the template's few tokens more (the engine counted the templated prompt; 2005 against 1997 decides
        # a 2000-token ceiling).
        if not nontext and (source == "tokenizer" or tokens.band_decided(
                source, nbytes, msgs, cols["prompt_truncated"][i], (band_ceilings or {}).get(cols["source_sha256"][i]))):
            if (source == "tokenizer" and current is not None and engine_count is not None
                    and current <= engine_count <= current + tokens.template_tokens(msgs)):
                _set_count(cols, i, engine_count, "engine")
            continue
        if over_limit_len is not None:
            if (nbytes is not None and not cols["prompt_truncated"][i] and not nontext
                    and over_limit_len > tokens.band_bound(nbytes, msgs)):
                # A line of another request under this id (more tokens than any tokenizer makes of the prompt's
                # text): the gateway's count stands, and the scan makes no signature of it.
                cols["problems"][i] = _with_problem(cols["problems"][i], (
                    f"engine_input_len: the engine's over-limit line names {over_limit_len} tokens, impossible for "
                    f"this prompt's {nbytes} bytes; not used"))
            else:
                _set_count(cols, i, over_limit_len, "engine")
        elif prefill_len is not None:
            # The engine never lowers a plausible count the gateway reported: a prompt list cut by the
            # engine's log length (vLLM's --max-log-len) counts fewer tokens than were sent.
            lowers = source == "reported" and current is not None and prefill_len < current
            if nbytes is None:  # no text logged (spend logs by default)
                if source == "reported" and current is not None and current != prefill_len:
                    # Nothing tells which is right: the gateway's own figure (not the placeholder's, which is
                    # no count) or a line of another request under the id. The gateway's stands, and the row says so.
                    cols["problems"][i] = _with_problem(cols["problems"][i], (
                        f"engine_input_len: the engine logged {prefill_len} prompt tokens under this id, the gateway "
                        f"reported {current}; no text to tell which is this request's"))
                elif tokens.unchecked_count(prefill_len):  # any figure but the placeholder's
                    _set_count(cols, i, prefill_len, "engine")
            elif tokens.plausible(prefill_len, nbytes, msgs, nontext) and not lowers:
                _set_count(cols, i, prefill_len, "engine")
    return _set_columns(table, cols, ("reported_prompt_tokens_plausible", "prompt_tokens", "prompt_tokens_source",
                                      "prompt_tokens_low", "prompt_tokens_high", "rid", "prefill_node", "decode_node",
                                      "bootstrap_room", "problems"))


def _set_columns(table: pa.Table, cols: dict[str, list[Any]], names: tuple[str, ...]) -> pa.Table:
    """``table`` with the columns ``names`` replaced by the values in ``cols``, each keeping its type."""
    for name in names:
        idx = table.schema.get_field_index(name)
        table = table.set_column(idx, table.schema.field(idx), pa.array(cols[name], table.schema.field(idx).type))
    return table


def _with_problem(problems: str | None, problem: str | None) -> str | None:
    """A row's ``problems`` with one more (``; ``-joined; None when there is none)."""
    return "; ".join(x for x in (problems, problem) if x) or None


def _set_count(cols: dict[str, list[Any]], i: int, value: int | None, source: str) -> None:
    cols["prompt_tokens"][i] = value
    cols["prompt_tokens_low"][i] = value
    cols["prompt_tokens_high"][i] = value
    cols["prompt_tokens_source"][i] = source


#: A request half is one tenant's (two customers may send the same request id); a response half
#: names no tenant, so it joins a request only where one tenant sent that id, and is otherwise kept
#: as a response with no request rather than given to either customer.
#:
#: The split-log join on keys only: which request half and which response half make each joined
#: row, and the rows' order (input order of the request half, else of the response half). The
#: halves' texts are not carried through the join: with them, DuckDB's hash join and sort held every
#: prompt and answer of the case at once and ran out of memory at its cap on a 50 MB split export.
SPLIT_KEYS_SQL = """
WITH req AS (
  SELECT request_id, source_sha256, source_line, count(*) OVER (PARTITION BY request_id) AS senders
  FROM ranked WHERE rn = 1 AND record_kind IN {request_halves}
), resp AS (
  SELECT request_id, source_sha256, source_line FROM ranked WHERE rn = 1 AND record_kind IN {response_halves}
)
SELECT
  row_number() OVER (ORDER BY coalesce(fq.ord, fa.ord), coalesce(q.source_line, a.source_line),
                              coalesce(q.request_id, a.request_id)) AS pos,
  q.source_sha256 AS q_sha, q.source_line AS q_line, a.source_sha256 AS a_sha, a.source_line AS a_line
FROM req q FULL OUTER JOIN resp a ON q.request_id = a.request_id AND q.senders = 1
LEFT JOIN file_order fq ON fq.sha = q.source_sha256
LEFT JOIN file_order fa ON fa.sha = a.source_sha256
"""

#: One batch of joined rows from its keys and the halves' staged rows (each with the ``_pos`` of
#: the row it belongs to), without the texts: those are put in by Arrow (:data:`SPLIT_TEXTS`).
SPLIT_ROWS_SQL = """
SELECT
  coalesce(q.request_id, a.request_id) AS request_id,
  q.tenant_id, q.tenant_field, q.user_id, q.model, coalesce(a.model_routed, q.model_routed) AS model_routed,
  q.received_at, a.completed_at,
  CASE WHEN a.request_id IS NULL THEN 'incomplete' ELSE a.status END AS status,
  -- (a response half of chunks shows the call streamed, whatever its request half says or leaves out)
  a.status_code, a.finish_reason, coalesce(a.stream, q.stream) AS stream,
  q.prompt_chars, q.prompt_bytes, q.prompt_messages, q.prompt_truncated, q.prompt_nontext_parts,
  a.response_truncated,
  a.reported_prompt_tokens, a.reported_completion_tokens, q.reported_prompt_tokens_plausible,
  q.prompt_tokens, q.prompt_tokens_source, q.prompt_tokens_low, q.prompt_tokens_high, a.completion_tokens,
  NULL::VARCHAR AS rid, NULL::UBIGINT AS bootstrap_room, NULL::VARCHAR AS prefill_node, NULL::VARCHAR AS decode_node,
  CASE WHEN a.request_id IS NULL THEN 'request_only' WHEN q.request_id IS NULL THEN 'response_only' END AS orphan,
  coalesce(q.zone_assumed, a.zone_assumed) AS zone_assumed,
  {joined} AS record_kind,
  coalesce(q.source_format, a.source_format) AS source_format,
  coalesce(q.source_file, a.source_file) AS source_file,
  coalesce(q.source_sha256, a.source_sha256) AS source_sha256,
  coalesce(q.source_line, a.source_line) AS source_line,
  a.source_file AS response_source_file, a.source_line AS response_source_line,
  nullif(concat_ws('; ', q.problems, a.problems), '') AS problems,
  coalesce(q.record_hash, '') || ':' || coalesce(a.record_hash, '') AS record_hash,
  nullif(concat_ws(';', dq.damage, da.damage), '') AS damage
FROM split_keys_batch k
LEFT JOIN split_q_rows q ON q._pos = k.pos
LEFT JOIN split_a_rows a ON a._pos = k.pos
LEFT JOIN line_damage dq ON dq.source_sha256 = k.q_sha AND dq.source_line = k.q_line
LEFT JOIN line_damage da ON da.source_sha256 = k.a_sha AND da.source_line = k.a_line
ORDER BY k.pos
"""

#: The halves' texts: never handed to DuckDB, which would copy them into its join (a batch of
#: megabyte prompts is itself beyond its cap), but taken by Arrow into the joined rows.
SPLIT_TEXTS = {"prompt_text": "request", "response_text": "response"}

#: Joined rows assembled at once.
SPLIT_BATCH = 256

#: Staged files kept decoded while the halves are gathered: the request half's file and the
#: response half's (the two logs run in about the same order, so each is read about once).
STAGED_CACHE = 3


class _StagedRows:
    """Rows of the staged exchange files by (input file SHA-256, line), a few decoded files at a time."""

    def __init__(self, paths: list[Path]) -> None:
        self._spans: dict[str, list[tuple[int, int, Path]]] = {}
        for path in paths:
            # By the rows' own file: a batch's staging file holds several input files.
            keys = pq.read_table(path, columns=["source_sha256", "source_line"])
            if keys.num_rows:
                spans = keys.group_by("source_sha256").aggregate([("source_line", "min"), ("source_line", "max")])
                for sha, lo, hi in zip(*(spans.column(n).to_pylist() for n in
                                         ("source_sha256", "source_line_min", "source_line_max"))):
                    self._spans.setdefault(sha, []).append((lo, hi, path))
        self._decoded: dict[Path, tuple[pa.Table, dict[tuple[str, int], int]]] = {}

    def _table(self, sha: str, line: int) -> tuple[pa.Table, dict[tuple[str, int], int]]:
        path = next((p for lo, hi, p in self._spans.get(sha, ()) if lo <= line <= hi), None)
        if path is None:  # the key came from these very files: a miss is a bug, never a dropped half
            raise RuntimeError(f"finalise: no staged row for line {line} of input {sha[:12]}")
        if path not in self._decoded:
            if len(self._decoded) >= STAGED_CACHE:
                del self._decoded[next(iter(self._decoded))]
            table = pq.read_table(path).cast(schema.EXCHANGES_STAGED)
            keys = zip(table.column("source_sha256").to_pylist(), table.column("source_line").to_pylist())
            self._decoded[path] = (table, {key: i for i, key in enumerate(keys)})
        else:  # most recently used last
            self._decoded[path] = self._decoded.pop(path)
        return self._decoded[path]

    def gather(self, keys: list[tuple[int, str | None, int | None]]) -> pa.Table:
        """The staged rows of ``keys`` ((pos, sha, line); a None sha: no such half), in key order,
        with a ``_pos`` column."""
        parts: list[pa.Table] = []
        run: list[int] = []
        run_pos: list[int] = []
        current: pa.Table | None = None
        for pos, sha, line in keys:
            if sha is None or line is None:
                continue
            table, index = self._table(sha, line)
            if table is not current and run:
                assert current is not None
                parts.append(current.take(run).append_column("_pos", pa.array(run_pos, pa.int64())))
                run, run_pos = [], []
            current = table
            run.append(index[(sha, line)])
            run_pos.append(pos)
        if run and current is not None:
            parts.append(current.take(run).append_column("_pos", pa.array(run_pos, pa.int64())))
        if not parts:
            return schema.EXCHANGES_STAGED.empty_table().append_column("_pos", pa.array([], pa.int64()))
        return pa.concat_tables(parts)


#: What the two queries over the (whole record, lone response half) pairs of ``cand`` need of both sides'
#: staged rows, found by file, line and record hash (records sharing a line are told apart), only those
#: rows read: whether the answer is missing (none) or empty, its digest, and the record's times.
#: ``w`` and ``a`` are the record's and the half's facts.
PAIR_FACTS_SQL = """
wanted AS (
  SELECT w_sha AS sha, w_line AS line, w_hash AS hash FROM cand UNION SELECT a_sha, a_line, a_hash FROM cand
), facts AS (
  SELECT s.source_sha256 AS sha, s.source_line AS line, s.record_hash AS hash,
         s.response_text IS NULL AS none, coalesce(s.response_text, '') = '' AS no_answer,
         md5(coalesce(s.response_text, '')) AS digest,
         epoch_us(s.received_at) AS received_us, epoch_us(s.completed_at) AS completed_us
  FROM staged s SEMI JOIN wanted k
    ON s.source_sha256 = k.sha AND s.source_line = k.line AND s.record_hash IS NOT DISTINCT FROM k.hash
), pairs AS (
  SELECT c.*, w.none AS w_none, w.no_answer AS w_no_answer, w.digest AS w_digest, w.received_us AS w_received_us,
         w.completed_us AS w_completed_us, a.none AS a_none, a.no_answer AS a_no_answer, a.digest AS a_digest,
         a.completed_us AS a_completed_us
  FROM cand c
  JOIN facts w ON w.sha = c.w_sha AND w.line = c.w_line AND w.hash IS NOT DISTINCT FROM c.w_hash
  JOIN facts a ON a.sha = c.a_sha AND a.line = c.a_line AND a.hash IS NOT DISTINCT FROM c.a_hash
)"""

#: The lone response halves that hold another answer than the whole record they competed with.
OTHER_ANSWERS_SQL = """
WITH cand AS (
  SELECT w_sha, w_line, w_hash, a_sha, a_line, a_hash FROM cross_kind WHERE q_sha IS NULL AND loser = 'pair'
), """ + PAIR_FACTS_SQL + """
SELECT a_sha AS sha, a_line AS line, a_hash AS hash FROM pairs
WHERE w_none <> a_none OR w_digest <> a_digest
"""


def _keep_other_answers(con: duckdb.DuckDBPyConnection) -> None:
    """A lone split response half loses to the whole record holding its id only as a copy of that
    record's answer: where the two answers differ (another request under the same id, at any time,
    or an answer the whole record does not hold) both are kept. By time alone, an answer logged a few
    seconds late was a second row, and a different one in the same second was dropped."""
    if not con.execute("SELECT count(*) FROM cross_kind WHERE q_sha IS NULL AND loser = 'pair'").fetchall()[0][0]:
        return
    con.execute(f"""UPDATE cross_kind SET loser = NULL FROM ({OTHER_ANSWERS_SQL}) o
                    WHERE cross_kind.q_sha IS NULL AND cross_kind.a_sha = o.sha AND cross_kind.a_line = o.line
                      AND cross_kind.a_hash IS NOT DISTINCT FROM o.hash""")


#: A lone split response half answered at most this long after the whole record it competed with was
#: received is that request's answer (a long prompt's answer takes minutes; another request reusing the id
#: comes hours apart, as the notes' reused ids show).
ANSWER_FILL_SECONDS = 3600
#: ... and, where the record says when it completed, at most this far from that (the gateway and the
#: split logger write the same answer within seconds of each other).
ANSWER_FILL_SKEW_SECONDS = 60

#: The whole records with no answer (none logged, or empty: the callback lost it) that a lone split response
#: half of their id answers: the half holds an answer, was answered after the record's start (a second of
#: clock slack) and within ANSWER_FILL_SECONDS, within ANSWER_FILL_SKEW_SECONDS of the record's own
#: completion where it has one, and is the one half for the id that competed with the record; and the
#: customer sent that id once (an id it reused, which the notes name, holds several requests: whose answer
#: it is cannot be told). The answer goes into the record's row; the half's line is part of that row, as a
#: joined half is.
ANSWER_FILLS_SQL = """
WITH cand AS (
  SELECT w_sha, w_line, w_hash, a_sha, a_line, a_hash, count(*) OVER (PARTITION BY w_sha, w_line, w_hash) AS halves
  FROM cross_kind WHERE q_sha IS NULL AND loser IS NULL
    AND request_id NOT IN (SELECT request_id FROM ranked WHERE variants > 1 AND (spread_us > {reused_us} OR other_prompts))
), """ + PAIR_FACTS_SQL + """  -- (PAIR_FACTS_SQL holds no braces: this query is formatted)
SELECT p.w_sha, p.w_line, p.w_hash, p.a_sha, p.a_line, p.a_hash, d.damage AS a_damage FROM pairs p
LEFT JOIN line_damage d ON d.source_sha256 = p.a_sha AND d.source_line = p.a_line
WHERE p.halves = 1 AND p.w_no_answer AND NOT p.a_no_answer
  AND p.a_completed_us - p.w_received_us BETWEEN -1000000 AND {window_us}
  AND (p.w_completed_us IS NULL OR abs(p.a_completed_us - p.w_completed_us) <= {skew_us})
"""

#: Answer columns a filled record takes from its response half (the half's where it has one, else the
#: record's own). The prompt's columns, its token counts included, stay the record's.
ANSWER_COLUMNS = ("completed_at", "status", "status_code", "finish_reason", "response_truncated",
                  "reported_completion_tokens", "completion_tokens", "model_routed")

#: Where a filled record's answer comes from: (input SHA-256, line, record hash) -> the half's SHA-256,
#: line and the damage of its line.
AnswerFills = dict[tuple[str, int, str | None], tuple[str, int, str | None]]


def _unnamed_request_halves(files: list[dict[str, Any]]) -> int:
    """Lines quarantined for naming no customer in files of a format that writes split request halves."""
    requesting = {f.name for f in FORMATS if any(k.half == "request" for k in f.kinds)}
    return sum(f.get("no_tenant") or 0 for f in files if f.get("format") in requesting)


def _answer_fills(con: duckdb.DuckDBPyConnection, unnamed_requests: int) -> tuple[AnswerFills, int]:
    """Fill the whole records that lost their answer from their lone split response half (ANSWER_FILLS_SQL):
    the halves leave the split join (``rn = 0``: neither kept as a row of their own nor copies), and the
    records to fill are returned, with how many were not filled because ``unnamed_requests`` split request
    lines named no customer (quarantined: one of them may be the missing request half of an answer, and
    the answer that customer's, not the record's). Before, the record stayed with no answer and the half
    a response naming no customer: the suspect was searched with no text, and the customers its answer
    exposed were missed."""
    if not con.execute("SELECT count(*) FROM cross_kind WHERE q_sha IS NULL AND loser IS NULL").fetchall()[0][0]:
        return {}, 0
    con.execute(f"""CREATE TEMP TABLE answer_fills AS {ANSWER_FILLS_SQL.format(
        window_us=ANSWER_FILL_SECONDS * 1_000_000, skew_us=ANSWER_FILL_SKEW_SECONDS * 1_000_000,
        reused_us=REUSED_ID_SECONDS * 1_000_000)}""")
    if unnamed_requests:
        return {}, con.execute("SELECT count(*) FROM answer_fills").fetchall()[0][0]
    con.execute("""UPDATE ranked SET rn = 0 FROM answer_fills f
                   WHERE ranked.source_sha256 = f.a_sha AND ranked.source_line = f.a_line
                     AND ranked.record_hash IS NOT DISTINCT FROM f.a_hash AND ranked.rn = 1""")
    return {(w_sha, w_line, w_hash): (a_sha, a_line, a_damage) for w_sha, w_line, w_hash, a_sha, a_line, a_damage in
            con.execute("SELECT w_sha, w_line, w_hash, a_sha, a_line, a_damage FROM answer_fills").fetchall()}, 0


class _Answers:
    """The answers of every filled record, read from the staged response halves once, file by file (in the
    records' order, halves spread over several gateway replicas' logs decoded a staged file per record)."""

    COLUMNS = (*ANSWER_COLUMNS, "response_text", "source_file", "source_line", "problems")

    def __init__(self, fills: AnswerFills, paths: list[Path]) -> None:
        keys = sorted(fills, key=lambda w: fills[w][:2])  # by the half's file and line
        staged = _StagedRows(paths)
        table = staged.gather([(i, *fills[w][:2]) for i, w in enumerate(keys)]) if keys else None
        self.at = {w: i for i, w in enumerate(keys)}
        # gather keeps the keys' order: row i of the table is the half of keys[i]
        self.table = table.select(list(self.COLUMNS)) if table is not None else None
        self.damage = {w: fills[w][2] for w in keys}

    def rows(self, keys: list[tuple[str, int, str | None]]) -> dict[str, list[Any]]:
        """The answer columns of the halves of ``keys`` (filled records), in that order."""
        assert self.table is not None
        part = self.table.take(pa.array([self.at[k] for k in keys], pa.int64()))
        return {name: part.column(name).to_pylist() for name in self.COLUMNS}


def _with_answers(table: pa.Table, answers: _Answers | None) -> pa.Table:
    """``table`` (whole records, with their ``damage``) with each filled record given its response half's
    answer (:data:`ANSWER_COLUMNS`, the text, where it was logged) and the damage of the half's line."""
    if answers is None or table.num_rows == 0:
        return table
    keys = zip(table.column("source_sha256").to_pylist(), table.column("source_line").to_pylist(),
               table.column("record_hash").to_pylist())
    at = [(i, key) for i, key in enumerate(keys) if key in answers.at]
    if not at:
        return table
    half = answers.rows([key for _, key in at])
    names = (*ANSWER_COLUMNS, "response_text", "response_source_file", "response_source_line", "problems", "damage")
    cols = {name: table.column(name).to_pylist() for name in names}
    for j, (i, key) in enumerate(at):
        for name in ANSWER_COLUMNS:
            if half[name][j] is not None:
                cols[name][i] = half[name][j]
        cols["response_text"][i] = half["response_text"][j]
        cols["response_source_file"][i], cols["response_source_line"][i] = half["source_file"][j], half["source_line"][j]
        cols["problems"][i] = _with_problem(cols["problems"][i], half["problems"][j])
        cols["damage"][i] = schema.join_damage((cols["damage"][i], answers.damage[key],
                                                "truncated_copy_only" if cols["response_truncated"][i] else None))
    return _set_columns(table, cols, names)


#: A kept record with no answer, and the one text a decode node logged as generated for its id (its request.finished
#: line), with where that line is: the rows :func:`_engine_answers` fills. The id must be the record's alone (``rid``
#: is set only where the engine's lines are attributed to it) and every decode line of it must hold the same text.
ENGINE_ANSWERS_SQL = """
WITH kept AS (
  SELECT request_id, tenant_id, rid, length(coalesce(response_text, '')) = 0 AS empty,
         stream IS NOT DISTINCT FROM false AND status IS NOT DISTINCT FROM 'failure' AS failed_whole,
         status IS NOT DISTINCT FROM 'success' AS succeeded
  FROM read_parquet({exchanges})
), blank AS (  -- a request none of whose kept rows holds an answer (a row may keep the prompt, another the answer)
  SELECT request_id, tenant_id, min(rid) AS rid FROM kept
  GROUP BY request_id, tenant_id
  HAVING bool_and(empty) AND min(rid) IS NOT NULL AND count(DISTINCT rid) = 1
     -- a call made without streaming that failed: its answer is sent whole at the end, so the customer received the
     -- error, not what the decode node generated (a timeout at the gateway, say)
     AND NOT (bool_or(failed_whole) AND NOT bool_or(succeeded))
), generated AS (
  SELECT rid, min(output_text) AS text, count(DISTINCT output_text) AS texts,
         arg_min(source_file, (source_file, source_line)) AS file, arg_min(source_line, (source_file, source_line)) AS line
  FROM staged_events
  WHERE event = 'request_finished' AND role = 'decode' AND length(coalesce(output_text, '')) > 0
    AND rid IN (SELECT rid FROM blank)
  GROUP BY rid
)
SELECT b.request_id, b.tenant_id, g.text, g.file, g.line
FROM blank b JOIN generated g USING (rid) WHERE g.texts = 1
ORDER BY b.request_id, b.tenant_id
"""


def _engine_answers(c: Case, con: duckdb.DuckDBPyConnection) -> int:
    """Give a kept record the gateway logged with no answer (a stream that broke, a failure whose log lost what was
    sent) the text the decode node logged as generated for it, and return how many took one. A call made without
    streaming that failed takes none: its answer is sent whole at the end, and nobody received it.

    That text is what the stale pages produced: left out, a suspect with no logged answer was searched with nothing
    and the customers it exposed were missed, though the engine's line held their text. Its place goes into
    ``response_source_file`` and ``response_source_line``, as for an answer taken from a split response log. The
    table is written again only when a record takes one (rarely: the query alone costs the common case)."""
    path = c.table_path("exchanges")
    found = con.execute(ENGINE_ANSWERS_SQL.format(exchanges=_lit(path))).fetchall()
    if not found:
        return 0
    by_key = {(rid, tenant): (text, file, line) for rid, tenant, text, file, line in found}
    filled = 0
    sink = ParquetSink(path, schema.EXCHANGES)
    try:
        pf = pq.ParquetFile(path)
        for g in range(pf.num_row_groups):
            table = pf.read_row_group(g)
            keys = list(zip(table.column("request_id").to_pylist(), table.column("tenant_id").to_pylist()))
            answers = table.column("response_text").to_pylist()
            # (only the rows with no answer: the query chose requests none of whose rows holds one)
            hit = [i for i, key in enumerate(keys) if key in by_key and not answers[i]]
            if hit:
                names = ("response_text", "response_source_file", "response_source_line")
                cols = {name: table.column(name).to_pylist() for name in names}
                for i in hit:
                    cols["response_text"][i], cols["response_source_file"][i], cols["response_source_line"][i] = \
                        by_key[keys[i]]
                filled += len(hit)
                table = _set_columns(table, cols, names)
            sink.write_batch(table)
        sink.close()
    except BaseException:
        sink.abort()
        raise
    return filled


def _split_joined(con: duckdb.DuckDBPyConnection, paths: list[Path]) -> Any:
    """Joined split-log rows, in input order, as record batches of the exchanges schema.

    The join runs on keys; each batch of joined rows then takes its halves' columns from the staged
    files (``paths``), so memory holds a few staged files and one batch, not the case's texts."""
    has_split = con.execute(f"SELECT count(*) FROM ranked WHERE record_kind IN {half_kinds()}").fetchall()[0][0]
    if not has_split:
        return
    con.execute("CREATE OR REPLACE TABLE split_keys AS " + SPLIT_KEYS_SQL.format(
        request_halves=half_kinds("request"), response_halves=half_kinds("response")))
    rows_sql = SPLIT_ROWS_SQL.format(joined=joined_sql("coalesce(q.record_kind, a.record_kind)"))
    staged = _StagedRows(paths)
    # A table, not a temporary one: the keys stream on a cursor of their own (temporary tables are
    # its connection's alone) while each batch is joined on con.
    cursor = con.cursor()
    reader = cursor.sql("SELECT pos, q_sha, q_line, a_sha, a_line FROM split_keys ORDER BY pos").to_arrow_reader(SPLIT_BATCH)
    try:
        for keys in reader:
            pos, q_sha, q_line, a_sha, a_line = (keys.column(i).to_pylist() for i in range(5))
            halves = {"request": staged.gather(list(zip(pos, q_sha, q_line))),
                      "response": staged.gather(list(zip(pos, a_sha, a_line)))}
            con.register("split_keys_batch", pa.Table.from_batches([keys]))
            con.register("split_q_rows", halves["request"].drop(list(SPLIT_TEXTS)))
            con.register("split_a_rows", halves["response"].drop(list(SPLIT_TEXTS)))
            table = con.sql(rows_sql).to_arrow_table()
            for name in ("split_keys_batch", "split_q_rows", "split_a_rows"):
                con.unregister(name)
            for column, half in SPLIT_TEXTS.items():  # row i of the batch is key i (ORDER BY pos)
                at = {p: i for i, p in enumerate(halves[half].column("_pos").to_pylist())}
                table = table.append_column(column, halves[half].column(column).take(pa.array([at.get(p) for p in pos], pa.int64())))
            yield table.select(schema.EXCHANGES.names).cast(schema.EXCHANGES)
    finally:
        reader.close()
        cursor.close()


EVENT_DUPES_SQL = """
WITH h AS (
  SELECT source_sha256, source_line, node, md5(message) AS h FROM staged_events
), k AS (
  SELECT source_sha256, source_line, node, h,
         row_number() OVER (PARTITION BY source_sha256, node, h ORDER BY source_line) AS occurrence
  FROM h
), ranked AS (
  SELECT source_sha256, source_line,
         row_number() OVER (PARTITION BY node, h, occurrence ORDER BY f.ord, source_line) AS rn
  FROM k JOIN file_order f ON f.sha = k.source_sha256
)
SELECT source_sha256, source_line FROM ranked WHERE rn > 1
"""


def _event_duplicates(con: duckdb.DuckDBPyConnection) -> tuple[dict[str, set[int]], Tally[str], dict[str, str]]:
    """Engine events repeated by overlapping exports: the lines to leave out per input file, how
    many per file, and the role of each node whose file name does not say it."""
    losers: dict[str, set[int]] = {}
    duplicates: Tally[str] = Tally()
    for sha, line in con.execute(EVENT_DUPES_SQL).fetchall():
        losers.setdefault(sha, set()).add(line)
        duplicates[sha] += 1
    roles = dict(con.execute("SELECT node, node_role FROM node_roles").fetchall())
    return losers, duplicates, roles


def _concat(
    c: Case, segments: list[Staged], table: str, drop: dict[str, set[int]] | None = None, roles: dict[str, str] | None = None,
    extra: list[dict[str, Any]] | None = None,
) -> int:
    """Concatenate staged files of a table into the case table, leaving out ``drop`` lines.

    ``drop`` maps an input file's SHA-256 to the line numbers to leave out; ``roles`` fills the
    engine events' missing ``role`` per node; ``extra`` rows are appended at the end.
    """
    with ParquetSink(c.table_path(table), schema.TABLES[table]) as sink:
        for segment in segments:
            pieces = (_member_slices(segment, READ_BATCH * 8) if segment.shas is not None else
                      ((staged_content(segment.path.name), b)
                       for b in pq.ParquetFile(segment.path).iter_batches(batch_size=READ_BATCH * 8)))
            for sha, batch in pieces:
                lines = (drop or {}).get(sha)
                if lines:
                    keep = pc.invert(pc.is_in(batch.column("source_line"), value_set=pa.array(sorted(lines), pa.int64())))
                    batch = batch.filter(keep)
                if roles:
                    batch = _fill_roles(batch, roles)
                sink.write_batch(batch)
        sink.write_rows(extra or [])
    return sink.rows


def _fill_roles(batch: pa.RecordBatch, roles: dict[str, str]) -> pa.RecordBatch:
    """Fill null ``role`` values from the node's known role (a node with none known stays null)."""
    idx = batch.schema.get_field_index("role")
    role = batch.column(idx)
    if role.null_count == 0:
        return batch
    known = pa.array(list(roles), pa.string())
    mapped = pc.take(pa.array(list(roles.values()), pa.string()), pc.index_in(batch.column("node"), value_set=known))
    return batch.set_column(idx, batch.schema.field(idx), pc.coalesce(role, mapped).cast(pa.string()))
