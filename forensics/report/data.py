"""What the report reads from a case folder, gathered once: suspects, findings and their text.

Only the text of the evidence spans is pulled out of the (possibly huge) exchanges table, in one
pass over it a batch of rows at a time, so the report's memory does not grow with the logs; the
spans are cut on code points, which matches the character offsets of schema.EVIDENCE.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from forensics import artifacts, schema
from forensics.artifacts import IngestManifest, MatchRecord, RequestKey, ScanRecord
from forensics.case import Case, file_sha256, row_group_batches
from forensics.config import iso as config_iso
from forensics.errors import CaseError
from forensics.report.severity import Classifier, Hit

TIER_RANK = {t: i for i, t in enumerate(schema.TIERS)}


def best_tier(tiers: Iterable[str | None]) -> str:
    """The highest of ``tiers`` (confirmed > probable > possible); ``possible`` when empty."""
    known = [t for t in tiers if t in TIER_RANK]
    return min(known, key=TIER_RANK.__getitem__, default="possible")


def iso(t: dt.datetime | None) -> str:
    """UTC ISO 8601 with ``Z`` ("" for unknown)."""
    return "" if t is None else config_iso(t)


@dataclasses.dataclass
class Suspect:
    """One suspect response as the scan stage wrote it."""

    request_id: str
    tenant_id: str
    model: str
    received_at: dt.datetime | None
    completed_at: dt.datetime | None
    prompt_tokens: int | None
    prompt_tokens_source: str
    reasons: list[str]
    borderline: bool
    engine_signature: bool

    @property
    def key(self) -> RequestKey:
        """The request's identity: (request id, tenant). Two customers may send the same request id."""
        return RequestKey(self.request_id, self.tenant_id)


@dataclasses.dataclass
class Finding:
    """One evidence row (typed) with the text of both spans and their severity hits."""

    evidence: artifacts.Finding
    recipient_span: str
    source_span: str
    recipient_hits: list[Hit]
    source_hits: list[Hit]
    recipient_received_at: dt.datetime | None
    source_received_at: dt.datetime | None
    source_is_suspect: bool
    verdict: str | None = None  # "confirm" when an analyst confirmed it (verdicts.jsonl)
    #: Every passage of the pair (the ``passages`` column, in its order): the response's and the source's text of
    #: each with its severity hits. The spans above are the strongest passage's; a secret in another passage is the
    #: customer's too (only the strongest was classified and shown: a review).
    recipient_passages: list[tuple[str, list[Hit]]] = dataclasses.field(default_factory=list)
    source_passages: list[tuple[str, list[Hit]]] = dataclasses.field(default_factory=list)

    @property
    def all_recipient_hits(self) -> list[Hit]:
        """The severity hits of every passage of the response (the strongest span's when passages are unknown)."""
        return [h for _, hits in self.recipient_passages for h in hits] if self.recipient_passages else self.recipient_hits

    @property
    def all_source_hits(self) -> list[Hit]:
        """The severity hits of every passage of the source text (the strongest span's when passages are unknown)."""
        return [h for _, hits in self.source_passages for h in hits] if self.source_passages else self.source_hits

    @property
    def finding_id(self) -> str:
        """The evidence row's finding id."""
        return str(self.evidence.finding_id)

    @functools.cached_property
    def cross_tenant(self) -> bool:
        """Only cross-tenant findings expose anyone (same-tenant overlap is no leak)."""
        return self.evidence.relation in (None, "cross_tenant") and self.recipient_tenant != self.source_tenant

    @property
    def recipient_tenant(self) -> str:
        """The recipient's tenant ("" when the logs named none), as :attr:`Suspect.tenant_id`."""
        return self.evidence.recipient_tenant_id or ""

    @property
    def source_tenant(self) -> str:
        """The source's tenant ("" when the logs named none)."""
        return self.evidence.source_tenant_id or ""

    @property
    def tier(self) -> str:
        """The finding's tier; ``possible`` when it has none."""
        return self.evidence.tier or "possible"

    @property
    def recipient_key(self) -> RequestKey:
        """The recipient request's identity: (request id, tenant), as :attr:`Suspect.key`."""
        return RequestKey(str(self.evidence.recipient_request_id), self.recipient_tenant)

    @property
    def source_key(self) -> RequestKey:
        """The source request's identity: (request id, tenant)."""
        return RequestKey(str(self.evidence.source_request_id), self.source_tenant)


@dataclasses.dataclass
class CaseData:
    """Everything the report needs from the case folder."""

    root: Path
    suspects: list[Suspect]
    findings: list[Finding]
    counts: dict[str, Any]
    scan: ScanRecord  # CASE/scan.json
    match: MatchRecord  # CASE/match.json
    ingest: IngestManifest  # CASE/manifest.json
    daily: list[tuple[str, int, int]]  # (day, suspects, confirmed findings)
    # (prompt tokens, exchanges): how many of the case's models' exchanges have each trusted prompt
    # token count, by count; one entry per distinct count, not per exchange
    prompt_tokens: list[tuple[int, int]]
    quarantine_reasons: list[tuple[str, int]]
    verdicts: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # verdicts.jsonl, in order
    verdict_resolution: Any = None  # forensics.review.verdicts.Resolution: verdicts carried to new ids, or stale


def read_records(case_dir: Path) -> tuple[ScanRecord, MatchRecord, IngestManifest]:
    """The stage records of a case folder: scan.json, match.json and the ingest manifest, typed.

    A record that is missing, is not JSON, lacks a key or has one of the wrong type is a CaseError
    naming the file and the key. A record written before the records carried their ``format`` (an
    older forensics) is refused the same way, with the fix to re-run the stage that writes it: the
    stages are deterministic, so the same tables give the same record again, now complete.
    """
    return (ScanRecord.read(case_dir / "scan.json", "scan"), MatchRecord.read(case_dir / "match.json", "match"),
            IngestManifest.read(case_dir / "manifest.json", "ingest"))


def load(case_dir: Path, classifier: Classifier, models: list[str]) -> CaseData:
    """Read the case folder's stage outputs (scan and match must have run)."""
    case = Case(case_dir)
    if not case_dir.is_dir():
        raise CaseError("case folder not found", file=case_dir, fix="give the folder that `forensics ingest --case` wrote")
    case.require("suspects", "scan")
    case.require("evidence", "match")
    scan, match, ingest = read_records(case_dir)  # before any query: a bad record stops the report first
    searched = match.searched.suspects_sha256
    if searched is not None and searched != file_sha256(case.table_path("suspects")):
        # The evidence names recipients of the suspects searched: read against others, the list mixes two scans.
        raise CaseError("the match stage searched other suspects than suspects.parquet now holds (the case was scanned "
                        "again after the match)", file=case_dir / "match.json",
                        fix=f"run `forensics match --case {case_dir}` again, then the report")
    con = case.connect()
    try:
        suspects = [
            Suspect(
                request_id=r[0], tenant_id=r[1] or "", model=r[2] or "", received_at=r[3], completed_at=r[4],
                prompt_tokens=r[5], prompt_tokens_source=r[6] or "unknown",
                reasons=sorted(x for x in (r[7] or "").split(";") if x), borderline=bool(r[8]), engine_signature=bool(r[9]),
            )
            for r in con.execute(
                "SELECT request_id, tenant_id, model, received_at, completed_at, prompt_tokens, prompt_tokens_source,"
                " reasons, borderline, engine_signature FROM suspects"
                " ORDER BY received_at NULLS LAST, request_id, tenant_id NULLS LAST"
            ).fetchall()
        ]
        suspect_keys = {s.key for s in suspects}
        findings = _findings(con, case, "evidence", classifier, suspect_keys)
        counts = _counts(con)
        model_filter = ""
        params: list[Any] = []
        if models:
            model_filter = " AND (model IN (SELECT unnest($1)) OR model_routed IN (SELECT unnest($1)))"
            params = [models]
        prompt_tokens = [
            (r[0], r[1]) for r in con.execute(
                "SELECT prompt_tokens, count(*) FROM exchanges WHERE prompt_tokens IS NOT NULL" + model_filter
                + " GROUP BY 1 ORDER BY 1", params
            ).fetchall()
        ]
        quarantine_reasons = [
            (r[0], r[1]) for r in con.execute(
                "SELECT reason, count(*) FROM quarantine GROUP BY 1 ORDER BY 2 DESC, 1"
            ).fetchall()
        ]
    finally:
        con.close()
    daily = _daily(suspects, findings)
    return CaseData(
        root=case_dir, suspects=suspects, findings=findings, counts=counts,
        scan=scan, match=match, ingest=ingest, daily=daily, prompt_tokens=prompt_tokens,
        quarantine_reasons=quarantine_reasons,
    )


def _findings(con: Any, case: Case, table: str, classifier: Classifier, suspect_keys: set[RequestKey],
              ids: list[str] | None = None) -> list[Finding]:
    """The rows of ``table`` (evidence or review; only ``ids`` when given) with the text of their spans.

    The rows come from the (small) evidence table; the spans' text and both requests' times from
    one pass over the exchanges table (:func:`_span_texts`), never from a join that would hold
    every record's text at once.
    """
    cols = schema.EVIDENCE.names
    where = "WHERE finding_id IN (SELECT unnest($1))" if ids is not None else ""
    order = ("recipient_request_id, recipient_tenant_id NULLS LAST, source_request_id, source_tenant_id NULLS LAST, "
             "finding_id")
    # One row per finding id, as the stage wrote it (a repeated id would be one finding twice).
    sql = (f"SELECT {', '.join(cols)} FROM {table} {where} "
           f"QUALIFY row_number() OVER (PARTITION BY finding_id ORDER BY {order}) = 1 ORDER BY {order}")
    rows = [artifacts.Finding.from_row(dict(zip(cols, rec, strict=True)))
            for rec in con.execute(sql, [ids] if ids is not None else []).fetchall()]
    from forensics.report.notices import finding_passages  # (notices reads this module's Finding)

    wanted: dict[RequestKey, list[tuple[str, int | None, int | None]]] = {}
    every = [finding_passages(row) for row in rows]
    for row, passages in zip(rows, every, strict=True):
        # The strongest span, then every passage's (in the column's order), on each side.
        wanted.setdefault(RequestKey(str(row.recipient_request_id), row.recipient_tenant_id), []).extend(
            [("response_text", row.recipient_start, row.recipient_end)] + [("response_text", a, b) for a, b, _, _ in passages])
        column = "response_text" if row.source_kind == "response" else "prompt_text"
        wanted.setdefault(RequestKey(str(row.source_request_id), row.source_tenant_id), []).extend(
            [(column, row.source_start, row.source_end)] + [(column, c, d) for _, _, c, d in passages])
    texts = _span_texts(case.table_path("exchanges"), wanted)
    findings = []
    taken: dict[RequestKey, int] = {}  # the next of each request's spans, in the order they were asked for
    for row, passages in zip(rows, every, strict=True):
        sides = []
        for key in (RequestKey(str(row.recipient_request_id), row.recipient_tenant_id),
                    RequestKey(str(row.source_request_id), row.source_tenant_id)):
            copies = texts.get(key) or [(None, [])]
            i = taken.get(key, 0)
            taken[key] = i + 1 + len(passages)
            sides.append((copies[0][0], [[parts[j] if j < len(parts) else "" for j in range(i, i + 1 + len(passages))]
                                         for _, parts in copies]))
        (r_received, r_cuts), (s_received, s_cuts) = sides
        rcut, scut = _same_passage(r_cuts, s_cuts)
        findings.append(
            Finding(
                evidence=row, recipient_span=rcut[0], source_span=scut[0],
                recipient_hits=classifier.find(rcut[0]), source_hits=classifier.find(scut[0]),
                recipient_received_at=r_received, source_received_at=s_received,
                source_is_suspect=RequestKey(str(row.source_request_id), row.source_tenant_id or "") in suspect_keys,
                recipient_passages=[(t, classifier.find(t)) for t in rcut[1:]],
                source_passages=[(t, classifier.find(t)) for t in scut[1:]],
            )
        )
    return findings


def _same_passage(r_cuts: list[list[str]], s_cuts: list[list[str]]) -> tuple[list[str], list[str]]:
    """The response's and the source's spans of a finding, from the copies of each request the table holds (the
    ingest keeps two rows of a request when each holds what the other lacks: a spend log's cut prompt with the
    answer, a split log's whole prompt without it): the pair of copies whose strongest spans hold the most alike
    text, the earliest copies among equals. The match read the passage in one copy; its offsets read in another
    quoted text that was never exposed, or nothing (a review)."""
    if len(r_cuts) == 1 and len(s_cuts) == 1:
        return r_cuts[0], s_cuts[0]
    from rapidfuzz import fuzz

    def alike(r: str, s: str) -> float:  # a copy with nothing at the offsets never wins (two empty spans read alike)
        return fuzz.ratio(r, s) if r and s else -1.0 if r or s else -2.0

    best = max(((alike(r[0], s[0]), -i, -j) for i, r in enumerate(r_cuts) for j, s in enumerate(s_cuts)))
    return r_cuts[-best[1]], s_cuts[-best[2]]


def _earlier(t: dt.datetime | None, than: dt.datetime | None) -> bool:
    """Whether ``t`` comes strictly before ``than`` (an unknown time after every known one)."""
    return t is not None and (than is None or t < than)


#: Rows of the exchanges table read at once for the evidence spans: the report holds the text of
#: one batch at a time (and the spans it cut from earlier ones), whatever the size of the logs.
SPAN_BATCH_ROWS = 256


def _substring(text: str | None, start: int | None, end: int | None) -> str:
    """``text``'s characters (code points) from ``start`` to ``end`` (exclusive), as DuckDB's
    ``substring(text, start + 1, end - start)`` gives them (negative offsets and lengths included;
    "" for a missing text or offset)."""
    if text is None or start is None or end is None:
        return ""
    n, offset, length = len(text), start + 1, end - start
    if offset < 0:
        offset = n + offset + 1
    a, b = (offset, offset + length) if length >= 0 else (offset + length, offset)
    a, b = max(a, 1), min(b, n + 1)
    return text[a - 1 : b - 1] if a < b else ""


def _span_texts(path: Path, wanted: dict[RequestKey, list[tuple[str, int | None, int | None]]]
                ) -> dict[RequestKey, list[tuple[dt.datetime | None, list[str]]]]:
    """Per request of ``wanted``, per row the table holds of it: when it was received and the text of each
    (column, start, end) span asked of it, read in batches of SPAN_BATCH_ROWS rows.

    The rows of a request the table holds twice come earliest first (unknown time last; the file's order among
    equals); a request it does not hold is left out.
    """
    found: dict[RequestKey, list[tuple[dt.datetime | None, list[str]]]] = {}
    if not wanted or not path.is_file():
        return found
    ids = pa.array(sorted({k.request_id for k in wanted}), pa.string())
    columns = ["request_id", "tenant_id", "received_at", "prompt_text", "response_text"]
    for batch in row_group_batches(pq.ParquetFile(path), columns, SPAN_BATCH_ROWS):
        hit = batch.filter(pc.is_in(batch.column("request_id"), value_set=ids))
        if not hit.num_rows:
            continue
        values = {c: hit.column(c).to_pylist() for c in ("request_id", "tenant_id", "received_at")}
        for i, (rid, tenant, received) in enumerate(zip(values["request_id"], values["tenant_id"], values["received_at"])):
            key = RequestKey(rid, tenant)
            spans = wanted.get(key)
            if spans is None:  # the same request id sent by another tenant
                continue
            copies = found.setdefault(key, [])
            at = next((n for n, (t, _) in enumerate(copies) if _earlier(received, t)), len(copies))
            copies.insert(at, (received, [_substring(hit.column(c)[i].as_py(), a, b) for c, a, b in spans]))
    return found


def apply_verdicts(data: CaseData, classifier: Classifier, verdicts: list[dict[str, Any]], decided: dict[str, str],
                   widened: frozenset[str] = frozenset()) -> None:
    """Make ``data`` say what the analysts decided (forensics.review.verdicts; ``decided``: finding id -> confirm or
    dismiss, as :func:`~forensics.review.verdicts.decisions` resolves them): dismissed findings out, confirmed review
    candidates in as confirmed findings, confirmed ones marked."""
    from forensics.review.verdicts import CONFIRMED_RULE

    data.verdicts = list(verdicts)
    if not decided:
        return
    kept = [f for f in data.findings if decided.get(f.finding_id) != "dismiss"]
    have = {f.finding_id for f in kept}
    wanted = sorted(fid for fid, v in decided.items() if v == "confirm" and fid not in have)
    added: list[Finding] = []
    if wanted and Case(data.root).has("review"):
        con = Case(data.root).connect()
        try:
            added = _findings(con, Case(data.root), "review", classifier, {s.key for s in data.suspects}, wanted)
        finally:
            con.close()
        for f in added:
            f.evidence = dataclasses.replace(f.evidence, tier="confirmed", tier_rule=CONFIRMED_RULE)
    for f in kept + added:
        # ``widened``: confirmed because it holds a confirmed passage and more; no person looked at the rest of it.
        if decided.get(f.finding_id) == "confirm" and f.finding_id not in widened:
            f.verdict = "confirm"

    def order(f: Finding) -> tuple[str, str, str, str, str]:
        return (f.recipient_key.request_id, f.recipient_tenant, f.source_key.request_id, f.source_tenant, f.finding_id)

    data.findings = sorted(kept + added, key=order)
    data.daily = _daily(data.suspects, data.findings)


def _counts(con: Any) -> dict[str, Any]:
    """Data-gap and volume figures for the summary (all from the case tables)."""
    one = lambda sql: con.execute(sql).fetchone()[0] or 0  # noqa: E731
    return {
        "exchanges": one("SELECT count(*) FROM exchanges"),
        "tenants": one("SELECT count(DISTINCT tenant_id) FROM exchanges"),
        "engine_events": one("SELECT count(*) FROM engine_events"),
        "quarantined": one("SELECT count(*) FROM quarantine"),
        "orphans": one("SELECT count(*) FROM exchanges WHERE orphan IS NOT NULL"),
        "estimated_tokens": one("SELECT count(*) FROM exchanges WHERE prompt_tokens_source = 'estimate'"),
        "unknown_tokens": one("SELECT count(*) FROM exchanges WHERE prompt_tokens IS NULL OR prompt_tokens_source = 'unknown'"),
        "implausible_reported": one("SELECT count(*) FROM exchanges WHERE reported_prompt_tokens_plausible = false"),
        "truncated_prompts": one("SELECT count(*) FROM exchanges WHERE prompt_truncated"),
        "truncated_responses": one("SELECT count(*) FROM exchanges WHERE response_truncated"),
        "zone_assumed": one("SELECT count(*) FROM exchanges WHERE zone_assumed IS NOT NULL"),
        "engine_zone_assumed": one("SELECT count(*) FROM engine_events WHERE zone_assumed IS NOT NULL"),
        "first_received": iso(con.execute("SELECT min(received_at) FROM exchanges").fetchone()[0]),
        "last_received": iso(con.execute("SELECT max(received_at) FROM exchanges").fetchone()[0]),
    }


def _daily(suspects: list[Suspect], findings: list[Finding]) -> list[tuple[str, int, int]]:
    """Suspects and confirmed cross-tenant findings per UTC day, every day between first and last."""
    per_s: dict[dt.date, int] = {}
    per_c: dict[dt.date, int] = {}
    for s in suspects:
        if s.received_at is not None:
            d = s.received_at.astimezone(dt.UTC).date()
            per_s[d] = per_s.get(d, 0) + 1
    for f in findings:
        if f.cross_tenant and f.tier == "confirmed" and f.recipient_received_at is not None:
            d = f.recipient_received_at.astimezone(dt.UTC).date()
            per_c[d] = per_c.get(d, 0) + 1
    days = sorted(set(per_s) | set(per_c))
    if not days:
        return []
    out = []
    d = days[0]
    while d <= days[-1]:
        out.append((d.isoformat(), per_s.get(d, 0), per_c.get(d, 0)))
        d += dt.timedelta(days=1)
    return out
