"""The scan stage: which responses could carry someone else's data?

``scan(case, config)`` runs the query files of ``queries/scan/`` over the case's tables:

* ``suspect`` queries each return the (request_id, tenant_id) of responses they flag; a response
  flagged by several is one suspect whose ``reasons`` lists every query id (sorted, ``;``-joined).
* ``anomaly`` queries list what deserves a look but makes nobody a suspect on its own: context
  corruption and failed KV transfers (SGLang aborts those requests, so the guard fired and no
  answer was generated from the wrong pages), decode output with no prefill record (a gap in the
  prefill logs), the bug's signature outside the window or models, unknown prompt sizes.
* ``summary`` queries (the exposure band by day) describe the incident's surface.

A request is (request_id, tenant_id) throughout: two customers may send the same request id. The
engine logs name a request only by its rid (or bootstrap room), so an id that several exchanges
carry (in the window or not) cannot be attributed: its engine records make none of them a suspect (each is
still judged by its own prompt size), and scan.json warns and lists them (``engine_rid_shared``).

It writes ``CASE/suspects.parquet`` (schema.SUSPECTS), ``CASE/suspects.csv`` (spec/outputs.md),
``CASE/scan.json`` (the resolved ceiling and advertised window with their sources and per-node
values, per-query row counts, the exposure band, the anomalies, query file hashes) and saves the
resolved configuration to ``CASE/config.json`` so later stages see the same values.

``real_ceiling_tokens = "auto"`` is read from the engine's startup lines
(``max_total_num_tokens``; ``context_len`` for the advertised window). When nodes disagree the
smallest pool is used for the ceiling (a request is suspect if any node could not hold it) and the
largest ``context_len`` for the advertised window (the widest band); the disagreement is recorded.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import re
import unicodedata
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from forensics import queries as q
from forensics import schema, tokens
from forensics.artifacts import (
    Anomaly,
    Limit,
    RequestKey,
    ScanLimits,
    ScanParameters,
    ScanRecord,
    SuspectCounts,
    customer_key,
    model_key,
)
from forensics.case import Case, atomic_open, write_json, write_table
from forensics.config import CaseConfig, iso, save, set_option
from forensics.csvfile import visible
from forensics.errors import ConfigError, QueryError, shown_ids
from forensics.progress import Reporter, reporter
from forensics.tokens import check_band

#: Rows of each anomaly kept in scan.json (the count is always complete; the SQL file lists all).
ANOMALY_ROWS_KEPT = 200
ENGINE_SIGNATURE_REASON = "engine_signature"
BORDERLINE_REASON = "borderline"
#: The anomaly listing exchanges in the window whose engine request id another exchange (in it or not) shares.
SHARED_ENGINE_ID_QUERY = "engine_rid_shared"
#: The anomaly of the bug signature outside the scope; its rows say why (other model, model unknown, outside window, no
#: gateway record).
OUTSIDE_SCOPE_QUERY = "signature_outside_scope"
#: The anomaly query of prompts the ceiling refuses that a prefill node nevertheless prefilled whole.
PREFILLED_QUERY = "prefilled_above_ceiling"
#: The anomaly of failed calls made without streaming whose output a decode node generated: no suspects.
UNDELIVERED_QUERY = "undelivered_output"
#: The anomaly of suspect responses logged twice under two customer ids.
LOGGED_TWICE_QUERY = "suspects_logged_twice"
#: What the scan warns of an anomaly with rows: (query, the warning; ``{n}`` its rows, ``{ceiling}`` the ceiling).
ANOMALY_WARNINGS = (
    ("unknown_token_count",
     "{n} response(s) in scope have no trusted prompt size (no prompt text and no engine record; a reported 1 token is "
     "the placeholder's figure, not a count): the scan cannot say whether they overflowed the pool (see "
     "anomalies.unknown_token_count): find their prompts' sizes elsewhere (the engine logs, a spend log written with "
     "its prompts) before the list is final"),
    (PREFILLED_QUERY,
     "{n} response(s) in scope had a prompt the ceiling ({ceiling} tokens) refuses, yet a prefill node shows it "
     "prefilled whole with no over-limit line (see anomalies.prefilled_above_ceiling): that node's pool held it, so no "
     "placeholder took its place and it is no suspect. If the case's models run on nodes with pools of their own, "
     "real_ceiling_tokens (the smallest given or read) is not every model's: scan each model with its own pool (a case "
     "file per model), or a prompt with no engine line may be named wrongly"),
    (LOGGED_TWICE_QUERY,
     "{n} pair(s) of suspect responses are one exchange logged twice under two customer ids (the same answer and one "
     "request's prompt, at the same time; see anomalies.suspects_logged_twice): both ids are named recipients, though one "
     "customer received the answer. A second gateway's log of the same traffic, or one customer's two ids: check the "
     "ids before notifying (ingest one gateway's logs, or set tenant_field)"),
    (UNDELIVERED_QUERY,
     "{n} call(s) in scope made without streaming, of a size that makes a suspect, failed at the gateway with no answer "
     "logged, though a decode node generated output for them (see anomalies.undelivered_output): such an answer is sent "
     "whole at the end, so the customer received the error, not the text, and they are no suspects. Check that the "
     "gateway delivered nothing (its status code, a client's log) before the list is final"),
)


@dataclasses.dataclass
class ScanResult:
    """What the scan found and wrote."""

    case_dir: Path
    suspects: int
    borderline: int
    engine_signature: int
    by_reason: dict[str, int]
    anomalies: dict[str, int]
    record: ScanRecord  # the content of scan.json

    @property
    def has_findings(self) -> bool:
        """Whether any response is suspect."""
        return self.suspects > 0

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary for the CLI."""
        rec = self.record
        return {
            "case": str(self.case_dir),
            "suspects": self.suspects,
            "borderline": self.borderline,
            "engine_signature": self.engine_signature,
            "reported_count_below_ceiling": rec.suspect_counts.reported_count_below_ceiling,
            "by_reason": self.by_reason,
            "anomalies": self.anomalies,
            "parameters": rec.parameters.to_json(),
            "limits": rec.limits.to_json(),
            "warnings": list(rec.warnings),
            "exposure_band_requests": rec.exposure_band_requests,
        }


# ------------------------------------------------------------------------------------------
# Configuration: check it against the data, resolve "auto"
# ------------------------------------------------------------------------------------------


def _startup_nodes(con: duckdb.DuckDBPyConnection, start: dt.datetime | None = None,
                   end: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Per node: its role and the distinct pool sizes and context lengths of the startup lines in effect in the
    window [``start``, ``end``), per value: the lines logged in it and the node's latest one before it (a restart
    before the window replaced what earlier lines gave: a pool the node ran days before must not set the ceiling).
    A line with no time is kept (nothing places it), and with no window set every line counts. ``after``: for a node
    whose lines all come after the window, its earliest (what it ran in the window is unknown; :func:`_resolve` uses
    it only where no deciding node has a line in effect). ``superseded``: the values of the other lines left out."""
    rows = q.with_memory_to_spare(con, lambda: con.execute(
        """SELECT node, role, time, max_total_num_tokens, context_len FROM engine_events WHERE event = 'startup'
           ORDER BY node, time NULLS FIRST, max_total_num_tokens, context_len"""
    ).fetchall())
    by_node: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_node.setdefault(row[0], []).append(row)
    out = []
    for node, lines in by_node.items():
        entry: dict[str, Any] = {"node": node, "role": min((r[1] for r in lines if r[1] is not None), default=None),
                                 "startup_lines": len(lines), "superseded": {}, "after": {}}
        for column, field in ((3, "max_total_num_tokens"), (4, "context_len")):
            given = [(r[2], r[column]) for r in lines if r[column] is not None]
            kept = [(t, v) for t, v in given if t is None or ((start is None or t >= start) and (end is None or t < end))]
            before = [(t, v) for t, v in given if t is not None and start is not None and t < start]
            if before:
                last = max(t for t, _ in before)
                kept += [(t, v) for t, v in before if t == last]
            later: list[tuple[Any, Any]] = []
            if not kept and given:  # every line after the window: the earliest, used only where nothing else is
                first = min(t for t, _ in given)
                later = [(t, v) for t, v in given if t == first]
            values = sorted({v for _, v in kept})
            entry[field] = values
            entry["after"][field] = sorted({v for _, v in later})
            entry["superseded"][field] = sorted({v for _, v in given} - set(values) - {v for _, v in later})
        out.append(entry)
    return out


def _resolve(nodes: list[dict[str, Any]], field: str, pick: Any,
             prefill_side: bool = False) -> tuple[int | None, dict[str, Any]]:
    """The value of ``field`` across nodes (prefill nodes when the logs tell roles) and its record. The lines in effect
    in the window decide; only where the deciding nodes have none do their earliest lines after it (a node that first
    started after the window set the ceiling beside nodes whose pool was known, and wrong recipients went on the
    list; the decode nodes' pools, another pool, decided where the prefill nodes' logs began after the window).
    ``prefill_side``: a value only the prefill side decides (the pool whose over-limit check swapped in the
    placeholder): a decode node's never stands in for it (the prefill nodes' startup lines rotated away, a decode
    node's smaller pool made suspects of prompts its prefill node held whole, and named wrong recipients)."""
    def now(n: dict[str, Any]) -> list[int]:
        return list(n[field])

    def later(n: dict[str, Any]) -> list[int]:
        return list(n["after"][field])

    # The over-limit check that swapped in the placeholder runs on the prefill side: its pool is the
    # ceiling that matters. Without roles (a single server), every node counts.
    values_of, after = now, False
    prefill = [n for n in nodes if n["role"] == "prefill" and now(n)]
    if not prefill and any(n["role"] == "prefill" and later(n) for n in nodes):
        prefill, values_of, after = [n for n in nodes if n["role"] == "prefill" and later(n)], later, True
    others = [n for n in nodes if not (prefill_side and n["role"] == "decode")]
    used = prefill or [n for n in others if now(n)]
    if not used:
        used, values_of, after = [n for n in others if later(n)], later, True
    values = sorted({v for n in used for v in values_of(n)})
    counted = {n["node"]: values_of(n) for n in used} | {n["node"]: now(n) for n in nodes if now(n)}
    # Nodes of the deciding side whose pool in the window the logs do not show (their lines all come after it), left
    # out where others' lines are in effect: a node that ran in the window with a smaller pool would hide suspects.
    # (the deciding side as ``used`` is chosen: the prefill nodes when one of them gives this value, else every node)
    prefill_giving = [n for n in nodes if n["role"] == "prefill" and (now(n) or later(n))]
    unshown = {} if after else {n["node"]: later(n) for n in (prefill_giving or nodes) if not now(n) and later(n)}
    record = {
        "nodes_used": "prefill" if prefill else "all",
        "prefill_nodes": [n["node"] for n in prefill],
        "per_node": dict(sorted(counted.items())),
        "values_of_nodes_used": values,
        "values_of_all_nodes": sorted({v for vals in counted.values() for v in vals}),
        # Values of startup lines a later one before the window replaced, logged after it, or not used: not counted.
        "not_in_effect": {n["node"]: sorted(set(n["superseded"][field]) | ({*later(n)} - {*counted.get(n["node"], [])}))
                          for n in nodes if n["superseded"][field] or set(later(n)) - set(counted.get(n["node"], []))},
        # Decode nodes may well run another pool size; only the nodes that decide count here.
        "nodes_disagree": len(values) > 1,
        "after_window": bool(after and values),
        "not_shown_in_window": unshown,
    }
    return (pick(values) if values else None), record


#: The limits the prefill side's over-limit lines name in the window, on the case's models (a line whose id names
#: only another model's requests is that model's pool, and so are the lines of a node whose every line that names a
#: request names another model's: a line with no id, there, was another model's too: a review).
REFUSAL_LIMITS_SQL = """
WITH others AS (
  SELECT coalesce(rid, request_id) AS engine_rid FROM exchanges GROUP BY 1
  HAVING NOT bool_or(coalesce(list_contains($models, model) OR list_contains($models, model_routed), false))
), decoding AS (  -- nodes any line shows decoding (a line of their own may not say)
  SELECT DISTINCT node FROM engine_events WHERE role = 'decode' AND node IS NOT NULL
), other_nodes AS (  -- nodes every line of which that names a request names another model's: that model's pool
  SELECT node FROM engine_events WHERE rid IS NOT NULL AND node IS NOT NULL GROUP BY node
  HAVING bool_and(rid IN (SELECT engine_rid FROM others))
)
SELECT event, list(DISTINCT "limit" ORDER BY "limit") FROM engine_events
WHERE event IN ('over_limit', 'exceeds_max_tokens') AND "limit" IS NOT NULL AND role IS DISTINCT FROM 'decode'
  AND (node IS NULL OR (node NOT IN (SELECT node FROM decoding) AND node NOT IN (SELECT node FROM other_nodes)))
  AND (time IS NULL OR (time >= $window_start AND time < $window_end))
  AND (rid IS NULL OR rid NOT IN (SELECT engine_rid FROM others))
GROUP BY event ORDER BY event
"""


def _ceiling_from_refusals(con: duckdb.DuckDBPyConnection, nodes: list[dict[str, Any]], record: dict[str, Any],
                           cfg: CaseConfig) -> tuple[int | None, dict[str, Any]]:
    """The ceiling the prefill side's own over-limit lines name, where no startup line of a node that decides gives a
    pool (the prefill nodes' startup lines rotated away): the limit they print is where prompts were refused and the
    placeholder swapped in ("maximum allowed length (681279 tokens)": the pool less one; "N > M": the pool), the
    smallest where they differ. Only the lines that decide: not a decode node's, logged in the window (a pool before
    or after it is not the one that ran then), and not naming another model's requests (a review found each of
    those setting the ceiling, and wrong recipients on the list). None when no such line names one."""
    params = {"models": list(cfg.models), "window_start": cfg.window_start, "window_end": cfg.window_end}
    named = {event: values for event, values in q.with_memory_to_spare(
        con, lambda: con.execute(REFUSAL_LIMITS_SQL, params).fetchall())}
    implied = sorted({v + 1 for v in named.get("over_limit", [])} | set(named.get("exceeds_max_tokens", [])))
    if not implied:
        return None, record
    decode = any(n["role"] == "decode" and n["max_total_num_tokens"] for n in nodes)
    note = ("no startup line of a node that decides (the prefill side) gives max_total_num_tokens: read from the "
            "limit the prefill side's over-limit lines name" + (", the smallest of " + ", ".join(map(str, implied))
                                                                 if len(implied) > 1 else "")
            + (" (the decode nodes' pools do not decide)" if decode else ""))
    return min(implied), {**record, "nodes_used": "over-limit lines", "values_of_nodes_used": implied,
                          "nodes_disagree": False, "note": note}


def resolve_limits(con: duckdb.DuckDBPyConnection, cfg: CaseConfig) -> dict[str, Limit]:
    """Resolve ``auto`` ceiling/advertised window from the engine logs; record sources and per-node values.

    Sets the resolved values on ``cfg`` (source ``auto-detected``). Raises ConfigError for
    ``auto`` with no engine startup lines, a missing ceiling, or a ceiling above the advertised window.
    """
    nodes = _startup_nodes(con, cfg.window_start, cfg.window_end)
    out: dict[str, Limit] = {}
    for key, field, pick, what in (
        ("real_ceiling_tokens", "max_total_num_tokens", min, "the smallest pool"),
        ("advertised_window_tokens", "context_len", max, "the largest context_len"),
    ):
        detected, record = _resolve(nodes, field, pick, prefill_side=key == "real_ceiling_tokens")
        if detected is None and key == "real_ceiling_tokens" and getattr(cfg, key) == "auto":
            detected, record = _ceiling_from_refusals(con, nodes, record, cfg)
        value = getattr(cfg, key)
        explicit = cfg.source(key) != "default"
        if value is None and key == "real_ceiling_tokens":
            raise ConfigError(
                "real_ceiling_tokens is not set", file=cfg.file,
                fix='it has no default (it decides who is a suspect): add real_ceiling_tokens = 681280 (or "auto" to '
                    "read it from the engine logs) to the case file, or pass --ceiling",
            )
        if value == "auto":
            if detected is None:
                if key == "advertised_window_tokens" and not explicit:
                    value = None  # optional and left at its default: the band simply has no upper bound
                else:
                    decode = sorted(n["node"] for n in nodes if n["role"] == "decode" and (n[field] or n["after"][field]))
                    if key == "real_ceiling_tokens" and decode:
                        raise ConfigError(
                            f'{key} = "auto" but only decode nodes\' startup lines give {field} '
                            f"({', '.join(decode[:5])}{', ...' if len(decode) > 5 else ''}), and no over-limit line "
                            "names the limit: the placeholder was swapped in by the prefill side's check, whose pool "
                            "may differ", file=cfg.file,
                            fix=f"ingest the prefill nodes' logs (their startup or over-limit lines), or give {key} as "
                                "a number")
                    raise ConfigError(
                        f'{key} = "auto" but the case has no engine startup line giving {field}', file=cfg.file,
                        fix=f"ingest the engine logs (sglang) that hold the startup line, or give {key} as a number",
                    )
            else:
                cfg.set(key, detected, "auto-detected")
                value = detected
                if record["after_window"]:
                    record["note"] = (f"no startup line in effect in the window gives {field} on the nodes that decide: "
                                      "read from their earliest lines after it")
                if record["nodes_disagree"]:
                    record["note"] = "; ".join(filter(None, (record.get("note"),
                                                            f"nodes disagree; used {what} of the {record['nodes_used']} nodes")))
        out[key] = Limit(
            value=value, source=cfg.source(key), detected=detected, nodes_used=record["nodes_used"],
            prefill_nodes=tuple(record["prefill_nodes"]), per_node={n: tuple(v) for n, v in record["per_node"].items()},
            values_of_nodes_used=tuple(record["values_of_nodes_used"]),
            values_of_all_nodes=tuple(record["values_of_all_nodes"]), nodes_disagree=record["nodes_disagree"],
            note=record.get("note"),
            not_shown_in_window=({n: tuple(v) for n, v in record["not_shown_in_window"].items()} or None
                                 if cfg.source(key) == "auto-detected" else None),
            not_in_effect={n: tuple(v) for n, v in record["not_in_effect"].items()} or None)
    cfg.validate()
    return out


def _check_scope(con: duckdb.DuckDBPyConnection, cfg: CaseConfig) -> None:
    """The models and window must be set, and every model must appear in the exchanges."""
    if not cfg.models:
        raise ConfigError("model is not set", file=cfg.file,
                          fix='add model = "glm-5.3" (or models = [...]) to the case file, or pass --model')
    for key, option in (("window_start", "--window-start"), ("window_end", "--window-end")):
        if getattr(cfg, key) is None:
            raise ConfigError(f"{key} is not set", file=cfg.file,
                              fix=f'add {key} = "2026-08-27T00:00:00Z" to the case file, or pass {option}')
    cfg.validate()
    seen = q.with_memory_to_spare(con, lambda: con.execute(
        "SELECT m, count(*) FROM (SELECT model AS m FROM exchanges UNION ALL SELECT model_routed FROM exchanges) "
        "WHERE m IS NOT NULL GROUP BY m ORDER BY count(*) DESC, m"
    ).fetchall())
    names = {r[0] for r in seen}
    for model in cfg.models:
        if model not in names:
            listed = ", ".join(r[0] for r in seen[:8]) or "none (the case has no exchanges: ingest the gateway logs)"
            raise ConfigError(
                f"model {model!r} never appears in the exchanges", file=cfg.file,
                fix=f"check the model setting (a typo would hide every suspect); models seen: {listed}",
            )
    inside, first, last = q.with_memory_to_spare(con, lambda: con.execute(
        """SELECT count(*) FILTER (WHERE t >= $start AND t < $end), min(t), max(t) FROM (
               SELECT coalesce(received_at, completed_at) AS t FROM exchanges
               WHERE coalesce(list_contains($models, model) OR list_contains($models, model_routed), false))""",
        {"models": list(cfg.models), "start": cfg.window_start, "end": cfg.window_end}).fetchall()[0])
    if not inside and first is not None:
        # A slip in the window (the year) hid every request: the scan found no suspect, and the list said nobody.
        raise ConfigError(
            f"no request to the case's model(s) was received in the window {_iso(cfg.window_start)} to "
            f"{_iso(cfg.window_end)}; the case's requests to them run from {_iso(first)} to {_iso(last)}", file=cfg.file,
            fix="check window_start and window_end (a typo would hide every suspect)")


def _iso(t: Any) -> str:
    """A time as the case file writes it (UTC, Z); DuckDB gives the tables' times with their zone, UTC."""
    if not isinstance(t, dt.datetime):
        return str(t)
    return iso(t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC))


def _near_models(con: duckdb.DuckDBPyConnection, cfg: CaseConfig) -> list[str]:
    """Warnings for the in-window requests whose model, asked for or routed to, differs from a case model
    only in case, spaces or a provider prefix: the scan leaves them out, and they are most likely the same model."""
    wanted = {model_key(m): m for m in cfg.models}
    rows = q.with_memory_to_spare(con, lambda: con.execute(
        """SELECT model, model_routed, count(*) FROM exchanges
           WHERE NOT coalesce(list_contains($models, model) OR list_contains($models, model_routed), false)
             AND coalesce(received_at, completed_at) >= $start AND coalesce(received_at, completed_at) < $end
           GROUP BY 1, 2""",
        {"models": list(cfg.models), "start": cfg.window_start, "end": cfg.window_end}).fetchall())
    # The scan matches a row on either name, exactly: the near one, added to the models, brings the row
    # back. The name asked for comes first; the routed one often carries a quantisation suffix (-FP8).
    counts: collections.Counter[str] = collections.Counter()
    for asked, routed, n in rows:
        near = [name for name in (asked, routed) if name is not None and model_key(name) in wanted]
        if near:
            counts[near[0]] += n
    return [f"{n} request(s) in the window name the model {name!r}, which differs from the case's "
            f"{wanted[model_key(name)]!r} only in case, spaces or a provider prefix: the scan left them out; if it "
            f"is the same model, add {name!r} to the case file's models (or give it as one more --model)"
            for name, n in sorted(counts.items())]


def _near_tenants(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Warnings for tenant ids that look alike. Ids that are the same text by Unicode's canonical
    equivalence (a name typed on another system) are one customer to the matcher; ids that differ only in
    case, spaces or compatibility forms stay two customers, and an analyst should know which they are."""
    ids = [t for (t,) in q.with_memory_to_spare(con, lambda: con.execute(
        "SELECT DISTINCT tenant_id FROM exchanges WHERE tenant_id IS NOT NULL ORDER BY 1").fetchall())]
    canonical: dict[str, list[str]] = collections.defaultdict(list)
    loose: dict[str, list[str]] = collections.defaultdict(list)
    for tenant in ids:
        canonical[str(customer_key(tenant))].append(tenant)
        # Invisible characters (U+034F, a Hangul filler, a zero-width space) left out: ids that differ only in them
        # read alike everywhere they are shown.
        loose[" ".join(unicodedata.normalize("NFKC", visible(tenant)).casefold().split())].append(tenant)
    # The ids as logged, quoted: every place that shows a warning writes their invisible characters out once (as
    # ascii() escapes, they were escaped again there: "cafe\\\\u0301" in summary.md).
    warnings = [f"the tenant ids {', '.join(_quoted(t) + _form(t) for t in group)} are the same text written with other Unicode "
                f"code points (canonically equivalent): the matcher takes them for one customer, whose own text "
                f"never names it exposed to itself; the list and the notices keep each id as logged"
                for group in canonical.values() if len(group) > 1]
    warnings += [f"the tenant ids {', '.join(_quoted(t) for t in group)} differ only in case, spaces, invisible "
                 f"characters or character forms: the matcher takes them for different customers; if they are one, read the findings "
                 f"between them as that customer's own text"
                 for group in loose.values() if len({customer_key(t) for t in group}) > 1]
    escaped = [t for t in ids if SURROGATE_ESCAPE.search(t)]
    if escaped:
        # (README "Not handled yet": the collision itself; unwarned, two customers were merged without a word.)
        warnings.append(
            f"the tenant id{'s' if len(escaped) > 1 else ''} {', '.join(_quoted(t) for t in escaped[:5])}"
            f"{', ...' if len(escaped) > 5 else ''} hold{'' if len(escaped) > 1 else 's'} the text of a lone surrogate's "
            "escape (\\udXXX): the ingest writes a lone surrogate in a log (valid JSON that no UTF-8 text can hold) as "
            "that text, so an id holding the surrogate and one holding the same characters typed read as one customer; "
            "check those customers' records in the logs before notices go out")
    return warnings


#: The text the ingest writes a lone surrogate as (``forensics.ingest.fields._mended``), in any case.
SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _quoted(tenant: str) -> str:
    return f"'{tenant}'"


def _form(tenant: str) -> str:
    """Which Unicode form an id is written in: the two read alike, so the warning says which is which."""
    if unicodedata.is_normalized("NFC", tenant):
        return " (composed, NFC)"
    return " (decomposed, NFD)" if unicodedata.is_normalized("NFD", tenant) else " (mixed forms)"


def _engine_limits(con: duckdb.DuckDBPyConnection) -> dict[str, list[int]]:
    """The limits the engine's own over-limit lines name (a cross-check of the ceiling)."""
    rows = q.with_memory_to_spare(con, lambda: con.execute(
        "SELECT event, list(DISTINCT \"limit\" ORDER BY \"limit\") FROM engine_events "
        "WHERE event IN ('over_limit', 'exceeds_max_tokens') AND \"limit\" IS NOT NULL GROUP BY event ORDER BY event"
    ).fetchall())
    return {r[0]: r[1] for r in rows}


def _limit_warnings(ceiling: int, engine_limits: dict[str, list[int]], limits: dict[str, Limit]) -> list[str]:
    warnings = []
    # SGLang names ceiling - 1 as the "maximum allowed length" and the pool itself in "N > M".
    implied = sorted({v + 1 for v in engine_limits.get("over_limit", [])} | set(engine_limits.get("exceeds_max_tokens", [])))
    if implied and implied != [ceiling]:
        warnings.append(
            f"the engine's over-limit lines imply a ceiling of {', '.join(map(str, implied))} tokens, "
            f"the scan used {ceiling}: check real_ceiling_tokens"
        )
    for key in ("real_ceiling_tokens", "advertised_window_tokens"):
        rec = limits[key]
        if rec.source == "auto-detected" and rec.note and "after it" in rec.note:
            warnings.append(f"{key} = {rec.value} was read from engine startup lines logged after the window (none in "
                            "effect in it gives it): what the engine ran in the window is not shown; check it")
        # Only where a value left out would have decided otherwise: a smaller pool (the ceiling is the smallest), a
        # larger window (the advertised window is the largest).
        shown = {node: vals for node, vals in (rec.not_shown_in_window or {}).items()
                 if isinstance(rec.value, int) and any(v < rec.value if key == "real_ceiling_tokens" else v > rec.value
                                                       for v in vals)}
        if rec.source == "auto-detected" and shown:
            unshown = "; ".join(f"{node}={'/'.join(map(str, vals))}" for node, vals in sorted(shown.items()))
            what = ("a smaller pool, suspects it would have made were left out" if key == "real_ceiling_tokens" else
                    "a larger window, the exposure band it would have given was left out")
            warnings.append(f"{key} = {rec.value} left out nodes whose startup lines all come after the window ({unshown}): "
                            f"what they ran in it is not shown; had one of them run with {what}: check it")
        if rec.nodes_disagree:
            warnings.append(f"engine nodes disagree on {key}: " + "; ".join(
                f"{node}={'/'.join(map(str, vals))}" for node, vals in sorted(rec.per_node.items())
                if rec.nodes_used == "all" or node in rec.prefill_nodes))
    return warnings


# ------------------------------------------------------------------------------------------
# The stage
# ------------------------------------------------------------------------------------------


def _whole(value: int | str | None) -> int | None:
    """A resolved limit as a number (None when the case has none)."""
    return value if isinstance(value, int) else None


def _params(cfg: CaseConfig) -> dict[str, Any]:
    adv = cfg.advertised_window_tokens
    return {
        "models": list(cfg.models),
        "window_start": cfg.window_start,
        "window_end": cfg.window_end,
        "ceiling": cfg.real_ceiling_tokens,
        "advertised_window": adv if isinstance(adv, int) else None,
        # forensics.tokens.band_bound's terms, for the queries that test an engine count against the text.
        "band_tokens_per_byte": tokens.BAND_TOKENS_PER_BYTE,
        "template_tokens_per_message": tokens.TEMPLATE_TOKENS_PER_MESSAGE,
        "template_tokens_fixed": tokens.TEMPLATE_TOKENS_FIXED,
    }


def query_params(cfg: CaseConfig) -> dict[str, Any]:
    """The values the shipped queries' ``$parameters`` take for a case configuration."""
    return _params(cfg)


def scan(case: Path, config: CaseConfig, progress: Reporter | None = None) -> ScanResult:
    """Find the suspect responses of a case; write suspects.parquet, suspects.csv and scan.json."""
    case_obj = Case(case)
    case_obj.require("exchanges", "ingest")
    if config.file is not None:
        # Another incident's case file (its model, window and name) must not scan this case: refused here, where
        # its name would otherwise become the case's and its report replace that incident's own.
        from forensics.report import check_ingest_scope  # (the report's check, which reads the ingest's manifest)

        check_ingest_scope(case, config, content_only=True)
    all_queries = q.load_queries()
    scan_queries = [x for x in all_queries if x.area == "scan"]
    task = reporter(progress).task("scan", total=len(scan_queries) + 2)
    con = case_obj.connect(memory_cap=True)
    try:
        con.execute("SET TimeZone = 'UTC'")
        q.install_views(con, all_queries)
        _check_scope(con, config)
        limits = resolve_limits(con, config)
        check_band(case_obj.read_manifest(), int(config.real_ceiling_tokens))  # type: ignore[arg-type]
        # After the checks (a mistake in the case file is told before any work over the whole case); the
        # case's tables do not change while the scan runs.
        q.materialize_views(con, all_queries)
        engine_limits = _engine_limits(con)
        near_models = _near_models(con, config)
        near_tenants = _near_tenants(con)
        params = _params(config)
        task.advance()

        reasons: dict[RequestKey, set[str]] = {}
        counts: dict[str, int] = {}
        anomalies: dict[str, dict[str, Any]] = {}
        exposure: list[dict[str, Any]] = []
        shared_ids: dict[str, int] = {}
        outside_why: collections.Counter[str] = collections.Counter()
        for query in scan_queries:
            table = q.run_query(con, query, params)
            counts[query.id] = table.num_rows
            if query.kind == "suspect":
                for col in ("request_id", "tenant_id"):
                    if col not in table.column_names:
                        raise QueryError(f"suspect query {query.id} returns no {col} column", file=query.path,
                                         fix="a suspect query must return request_id and tenant_id")
                for rid, tenant in zip(table.column("request_id").to_pylist(), table.column("tenant_id").to_pylist(),
                                       strict=True):
                    reasons.setdefault(RequestKey(rid, tenant), set()).add(query.id)
            elif query.kind == "anomaly":
                if query.id == OUTSIDE_SCOPE_QUERY and table.num_rows:
                    outside_why = collections.Counter(table.column("why").to_pylist())
                if query.id == SHARED_ENGINE_ID_QUERY and table.num_rows:
                    ids = table.column("engine_rid").to_pylist()
                    sig = table.column("engine_signature").to_pylist()
                    shared_ids = {"exchanges": table.num_rows, "ids": len(set(ids)),
                                  "signature": len({i for i, s in zip(ids, sig, strict=True) if s})}
                anomalies[query.id] = {
                    "title": query.title,
                    "rows": table.num_rows,
                    "listed": q.rows_of(table.slice(0, ANOMALY_ROWS_KEPT)),
                }
            elif query.kind == "summary" and query.id == "exposure_band":
                exposure = q.rows_of(table)
            task.advance()

        suspects = _suspect_table(con, reasons)
        task.advance()
    finally:
        con.close()

    write_table(case_obj.table_path("suspects"), suspects, schema.SUSPECTS)
    with atomic_open(case_obj.root / "suspects.csv", newline="") as fh:
        fh.write(q.csv_text(suspects, list(schema.SUSPECTS_CSV)))

    by_reason = {x.id: counts.get(x.id, 0) for x in scan_queries if x.kind == "suspect"}
    borderline = sum(1 for v in suspects.column("borderline").to_pylist() if v)
    signature = sum(1 for v in suspects.column("engine_signature").to_pylist() if v)
    # Suspects a gateway's own count would have missed (the placeholder's 1, or any figure below the ceiling).
    ceiling = int(config.real_ceiling_tokens)  # type: ignore[arg-type]
    below = sum(1 for rep in suspects.column("reported_prompt_tokens").to_pylist()
                if rep is not None and rep < tokens.refused_from(ceiling))
    warnings = _limit_warnings(ceiling, engine_limits, limits) + near_models + near_tenants
    scope = outside_why["other model"] + outside_why["outside window"]
    if scope:
        warnings.append(f"{scope} request(s) carry the engine's bug signature outside the case's window or models "
                        "(see anomalies.signature_outside_scope): check the window and the model list")
    if outside_why["model unknown"]:
        warnings.append(f"{outside_why['model unknown']} request(s) carry the engine's bug signature but their gateway "
                        "records name no model (see anomalies.signature_outside_scope, why = model unknown; an answer "
                        "whose request was rotated away, say): they are no suspects of the case's models. If the case's "
                        "engine logs are its models' nodes alone, these customers received corrupted answers: find the "
                        "logs of these requests (their model) before the list is final")
    if outside_why["no gateway record"]:
        warnings.append(f"{outside_why['no gateway record']} engine request(s) carry the bug's signature but no gateway "
                        "log holds their request (see anomalies.signature_outside_scope, why = no gateway record): a "
                        "customer received a corrupted answer that the case cannot name; add the missing gateway logs")
    nobody = sorted(r for r, t in zip(suspects.column("request_id").to_pylist(), suspects.column("tenant_id").to_pylist(),
                                      strict=True) if t is None)
    if nobody:
        warnings.append(f"{len(nobody)} suspect response(s) name no customer (a response that joined no request, such "
                        "as an answer to a request id two customers sent): they are searched, but nobody can be told "
                        f"until other logs name their customer: {shown_ids(nobody)}")
    # The anomalies whose rows call for a word, each said with its count.
    warnings += [template.format(n=anomalies[query]["rows"], ceiling=ceiling)
                 for query, template in ANOMALY_WARNINGS if anomalies.get(query, {}).get("rows", 0)]
    if shared_ids:
        warnings.append(
            f"{shared_ids['ids']} engine request id(s) of exchanges in the window are each carried by several exchanges "
            f"({shared_ids['exchanges']} of them in the window: two customers sending the same id, or two gateways): the engine "
            "logs cannot tell those exchanges apart, so no engine record was attributed to any of them and each was "
            f"judged by its own prompt size alone; {shared_ids['signature']} of those ids carry the engine's bug "
            "signature (see anomalies.engine_rid_shared): check them by hand")
    record = ScanRecord(
        parameters=ScanParameters(
            models=", ".join(config.models),
            window_start=iso(config.window_start) if config.window_start else None,
            window_end=iso(config.window_end) if config.window_end else None,
            real_ceiling_tokens=config.real_ceiling_tokens,
            real_ceiling_tokens_source=config.source("real_ceiling_tokens"),
            advertised_window_tokens=_whole(limits["advertised_window_tokens"].value),
            advertised_window_tokens_source=config.source("advertised_window_tokens"),
            window_compared_with="received_at (completed_at when the request time is missing)",
        ),
        limits=ScanLimits(real_ceiling_tokens=limits["real_ceiling_tokens"],
                          advertised_window_tokens=limits["advertised_window_tokens"],
                          engine_over_limit_lines={k: tuple(v) for k, v in engine_limits.items()}),
        queries=tuple(x.describe() | {"rows": counts[x.id]} if x.id in counts else x.describe() for x in all_queries),
        suspect_counts=SuspectCounts(total=suspects.num_rows, borderline=borderline, engine_signature=signature,
                                     reported_count_below_ceiling=below, by_reason=by_reason),
        exposure_band=tuple(exposure),
        anomalies={k: Anomaly(title=v["title"], rows=v["rows"], listed=tuple(v["listed"])) for k, v in anomalies.items()},
        warnings=tuple(warnings),
    )
    write_json(case_obj.root / "scan.json", record.to_json())
    save(config, case_obj.config_path)
    task.close()
    return ScanResult(
        case_dir=case_obj.root, suspects=suspects.num_rows, borderline=borderline, engine_signature=signature,
        by_reason=by_reason, anomalies={k: v["rows"] for k, v in anomalies.items()}, record=record,
    )


#: The order the rows of one suspect are read in (the earliest first; the file's order among equals).
_ROW_ORDER = "x.received_at NULLS LAST, x.source_sha256, x.source_line, x.record_hash"
#: Columns that belong together: taken from one row (a count from one row and its source or band from another
#: described neither: a review). The rest each from the earliest row that has one.
_SUSPECT_GROUPS = {  # name: (columns, the rows that have the group, which of them first)
    "token_count": (("prompt_tokens", "prompt_tokens_source", "prompt_tokens_low", "prompt_tokens_high"),
                    "x.prompt_tokens IS NOT NULL OR x.prompt_tokens_source IS NOT NULL", "x.prompt_tokens IS NULL, "),
    "engine_nodes": (("prefill_node", "decode_node", "bootstrap_room"),
                     "x.prefill_node IS NOT NULL OR x.decode_node IS NOT NULL OR x.bootstrap_room IS NOT NULL", ""),
}
_SUSPECT_SINGLE = ("model", "received_at", "completed_at", "reported_prompt_tokens")
#: One row per suspect, even when the exchanges hold a request twice (the ingest keeps two rows when each holds what
#: the other lacks: a spend log's answer and usage, a split log's whole prompt). The earliest row alone left out the
#: other's completion time and the placeholder's reported count (a review).
_SUSPECT_ROWS_SQL = (
    "SELECT f.request_id, f.tenant_id, "
    + ", ".join(f"any_value(x.{c} ORDER BY {_ROW_ORDER}) AS {c}" for c in _SUSPECT_SINGLE) + ", "
    + ", ".join(f"any_value({{{', '.join(f'{c!r}: x.{c}' for c in cols)}}} ORDER BY {first}{_ROW_ORDER}) "
                f"FILTER (WHERE {where}) AS {name}" for name, (cols, where, first) in _SUSPECT_GROUPS.items())
    + ", any_value(f.reasons) AS reasons, any_value(f.borderline) AS borderline, "
      "any_value(f.engine_signature) AS engine_signature "
      "FROM _flagged f JOIN exchanges x ON x.request_id = f.request_id AND x.tenant_id IS NOT DISTINCT FROM f.tenant_id "
      "GROUP BY f.request_id, f.tenant_id")
#: The suspect rows in the contract's order, the groups unpacked.
SUSPECT_TABLE_SQL = (
    "SELECT request_id, tenant_id, " + ", ".join(_SUSPECT_SINGLE) + ", "
    + ", ".join(f"{name}.{c} AS {c}" for name, (cols, _, _) in _SUSPECT_GROUPS.items() for c in cols)
    + ", reasons, borderline, engine_signature FROM (" + _SUSPECT_ROWS_SQL + ") "
    "ORDER BY received_at NULLS LAST, request_id, tenant_id NULLS LAST")


def _suspect_table(con: duckdb.DuckDBPyConnection, reasons: dict[RequestKey, set[str]]) -> pa.Table:
    """One row per suspect (request_id, tenant_id), with every reason, in the contract's order."""
    keys = sorted(reasons, key=RequestKey.sort_key)
    flagged = pa.table({
        "request_id": pa.array([k.request_id for k in keys], pa.string()),
        "tenant_id": pa.array([k.tenant_id for k in keys], pa.string()),
        "reasons": pa.array([";".join(sorted(reasons[k])) for k in keys], pa.string()),
        "borderline": pa.array([BORDERLINE_REASON in reasons[k] for k in keys], pa.bool_()),
        "engine_signature": pa.array([ENGINE_SIGNATURE_REASON in reasons[k] for k in keys], pa.bool_()),
    })
    con.register("_flagged", flagged)
    table = q.with_memory_to_spare(con, lambda: con.sql(SUSPECT_TABLE_SQL).to_arrow_table())
    con.unregister("_flagged")
    return table.select(schema.SUSPECTS.names).cast(schema.SUSPECTS)


# ------------------------------------------------------------------------------------------
# Configuration for `forensics scan --case DIR` and `forensics query`
# ------------------------------------------------------------------------------------------

#: CLI option names of the overridable settings (for messages).
OPTION_KEYS = {
    "models": "--model",
    "window_start": "--window-start",
    "window_end": "--window-end",
    "real_ceiling_tokens": "--ceiling",
    "advertised_window_tokens": "--advertised-window",
}


def config_for_case(case: Path, config_file: Path | None = None, **overrides: Any) -> CaseConfig:
    """The configuration a scan of ``case`` uses: the case file if given, else the case's saved
    config.json (values a previous scan auto-detected are detected again), then CLI overrides.

    ``overrides`` use the configuration's names (models, window_start, window_end,
    real_ceiling_tokens, advertised_window_tokens); ``None`` means "not given".
    """
    from forensics.config import load_case_file, load_saved

    saved = Case(case).config_path
    if config_file is not None:
        cfg = load_case_file(config_file)
    elif saved.is_file():
        try:
            cfg = load_saved(saved)
        except (ValueError, KeyError) as exc:
            raise ConfigError(f"cannot read the case's saved configuration ({exc})", file=saved,
                              fix="re-run ingest, or give the case file with --config") from None
        for key in ("real_ceiling_tokens", "advertised_window_tokens"):
            if cfg.source(key) == "auto-detected":
                setattr(cfg, key, "auto")
                # The ceiling is required, so it was asked for; the advertised window may be a default.
                if key == "real_ceiling_tokens":
                    cfg.sources[key] = "file"
                else:
                    cfg.sources.pop(key, None)
    else:
        cfg = CaseConfig()
    for key, value in overrides.items():
        if key not in OPTION_KEYS:
            raise TypeError(f"unknown override {key}")
        if value is None or value == []:
            continue
        set_option(cfg, key, value, OPTION_KEYS[key])
    return cfg


def query_defaults(case: Path) -> dict[str, Any]:
    """Parameter values for running a shipped query by name on a case: the case's saved
    configuration (as a scan resolved it); values it does not have are left out."""
    saved = Case(case).config_path
    if not saved.is_file():
        return {}
    from forensics.config import load_saved

    try:
        cfg = load_saved(saved)
    except (ValueError, KeyError):
        return {}
    params = _params(cfg)
    if not isinstance(params["ceiling"], int):
        params["ceiling"] = None
    return {k: v for k, v in params.items() if v is not None and v != []}
