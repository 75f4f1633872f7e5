"""Who must be told what: the notification list and each customer's packet.

A packet holds only its customer's own data. The other side of a finding is an opaque reference
(an HMAC of the finding id keyed by the evidence itself, so a customer cannot guess it back to a
request id) that the team resolves with ``references.csv``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

from forensics.report import safe
from forensics.report.data import CaseData, Finding, Suspect, best_tier, iso
from forensics.report.severity import NONE, Classifier, Hit

NOTIFICATION_COLUMNS = (
    "tenant_id", "role", "tier", "n_requests", "request_ids", "first_seen", "last_seen",
    "highest_severity", "packet", "n_findings", "severity_kinds",
)
PREVIEW_CHARS = 300


@dataclasses.dataclass
class Notice:
    """One (customer, role) row of notifications.csv and what its packet says about that role."""

    tenant_id: str
    role: str  # exposed | recipient
    tier: str
    request_ids: list[str]
    first_seen: str
    last_seen: str
    highest_severity: str
    packet: str
    n_findings: int
    severity_kinds: list[str]

    def csv_row(self) -> list[Any]:
        """The row in NOTIFICATION_COLUMNS order."""
        # forensics.csvfile escapes control characters the same way in every CSV.
        return [self.tenant_id, self.role, self.tier, len(self.request_ids), ";".join(self.request_ids),
                self.first_seen, self.last_seen, self.highest_severity, self.packet, self.n_findings,
                ";".join(self.severity_kinds)]


def references(findings: list[Finding], key: bytes) -> dict[str, str]:
    """Opaque reference per finding id: stable for the same evidence, unguessable without it."""
    return {
        f.finding_id: "ref-" + hmac.new(key, f.finding_id.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:16]
        for f in findings
    }


def packet_path(tenant_id: str) -> str:
    """The packet folder of a customer, relative to the report folder."""
    return f"packets/{safe.safe_name(tenant_id)}"


def _times(values: list[Any]) -> tuple[str, str]:
    known = sorted(v for v in values if v is not None)
    return (iso(known[0]), iso(known[-1])) if known else ("", "")


def _add_finding(table: dict[str, dict[str, Any]], tenant: str, request_id: str, f: Finding, hits: list[Any]) -> None:
    """Count one finding towards a customer's row of one role."""
    entry = table.setdefault(tenant, {"ids": set(), "times": [], "tiers": [], "hits": [], "n": 0})
    entry["ids"].add(request_id)
    entry["times"].append(f.recipient_received_at)
    entry["tiers"].append(f.tier)
    entry["hits"].extend(hits)
    entry["n"] += 1


def passages(row: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    """Every passage of a finding as (response start, end, source start, end): evidence's
    ``passages`` column, or its one span when the column is absent (evidence of an older version)."""
    text = row.get("passages")
    if not text:
        return [(row["recipient_start"], row["recipient_end"], row["source_start"], row["source_end"])]
    out = []
    for part in str(text).split(";"):
        left, right = part.split("=")
        a, b = left.split(":")
        c, d = right.split(":")
        out.append((int(a), int(b), int(c), int(d)))
    return out


def build_notices(data: CaseData, classifier: Classifier) -> list[Notice]:
    """Every (customer, role) row, sorted by tenant_id then role.

    ``recipient``: a customer that received a suspect response; its tier is the best of its
    suspects' cross-tenant findings, and ``possible`` for a suspect with none. ``exposed``: a
    customer whose content a cross-tenant finding located in someone else's response.
    ``first_seen``/``last_seen`` are when the leaking requests were received.
    """
    cross = [f for f in data.findings if f.cross_tenant]
    # Requests are (request id, tenant): two customers may send the same request id.
    by_recipient_request: dict[tuple[str, str], list[Finding]] = {}
    for f in cross:
        by_recipient_request.setdefault(f.recipient_key, []).append(f)
    recipients: dict[str, dict[str, Any]] = {}
    for s in data.suspects:
        entry = recipients.setdefault(s.tenant_id, {"ids": set(), "times": [], "tiers": [], "hits": [], "n": 0})
        entry["ids"].add(s.request_id)
        entry["times"].append(s.received_at)
        fs = by_recipient_request.get(s.key, [])
        entry["tiers"].append(best_tier(f.tier for f in fs))
    exposed: dict[str, dict[str, Any]] = {}
    for f in cross:  # findings whose recipient the scan did not list still reach their recipient
        _add_finding(recipients, f.recipient_tenant, str(f.row["recipient_request_id"]), f, f.recipient_hits)
        _add_finding(exposed, f.source_tenant, str(f.row["source_request_id"]), f, f.source_hits)
    notices = []
    for role, table in (("exposed", exposed), ("recipient", recipients)):
        for tenant, e in table.items():
            first, last = _times(e["times"])
            hits: list[Hit] = e["hits"]
            notices.append(Notice(
                tenant_id=tenant, role=role, tier=best_tier(e["tiers"]), request_ids=sorted(e["ids"]),
                first_seen=first, last_seen=last,
                highest_severity=classifier.highest([h.cls for h in hits]),
                packet=packet_path(tenant), n_findings=e["n"], severity_kinds=sorted({h.kind for h in hits}),
            ))
    notices.sort(key=lambda n: (n.tenant_id, n.role))
    return notices


def _masked_preview(text: str, hits: list[Hit]) -> str:
    """The span with every secret replaced by its masked form, on one line, shortened."""
    parts, pos = [], 0
    for h in hits:
        parts.append(text[pos:h.start])
        parts.append(h.masked)
        pos = h.end
    parts.append(text[pos:])
    return safe.clean_text("".join(parts), PREVIEW_CHARS)


def _actions(roles: dict[str, Notice], classes: set[str]) -> list[str]:
    acts = []
    if "exposed" in roles:
        if "credential" in classes:
            acts.append("Rotate or revoke every credential listed under 'secrets' now (the SHA-256 lets you confirm "
                        "which one without it being shown here), and review its use since the first exposure.")
        if classes & {"payment_card", "iban", "national_id"}:
            acts.append("Treat the listed card, bank or identity numbers as disclosed: follow your breach procedure "
                        "for personal and financial data (card re-issue, account monitoring, notices to data subjects).")
        acts.append("Review the listed passages of your own requests: assume one other customer received them in "
                    "a model answer. Decide with counsel whether your own customers must be notified.")
    if "recipient" in roles:
        acts.append("Discard the answers to the listed requests and anything derived from them: they were generated "
                    "from corrupted context and may contain another customer's data, which must not be kept or used. "
                    "Re-send the requests if you still need an answer.")
    return acts


def _person(f: Finding) -> dict[str, Any]:
    """A passage an analyst confirmed says so (verdicts.jsonl); others carry no such key."""
    return {"confirmed_by_person": True} if f.verdict == "confirm" else {}


def _by_person(x: dict[str, Any]) -> str:
    return " (confirmed by a person)" if x.get("confirmed_by_person") else ""


def build_packet(
    tenant: str,
    roles: dict[str, Notice],
    suspects: list[Suspect],
    received: list[Finding],
    exposed: list[Finding],
    refs: dict[str, str],
    case_name: str,
    classifier: Classifier,
) -> dict[str, Any]:
    """The JSON notice of one customer: only its own requests, spans and masked secrets.

    ``suspects`` are the customer's suspect responses, ``received`` the cross-tenant findings in
    its answers and ``exposed`` the cross-tenant findings of its own content.
    """
    out: dict[str, Any] = {
        "case": case_name,
        "tenant_id": tenant,
        "packet": packet_path(tenant),
        "roles": sorted(roles),
        "tier": best_tier(n.tier for n in roles.values()),
        "highest_severity": classifier.highest([n.highest_severity for n in roles.values()]),
    }
    classes: set[str] = set()
    if "recipient" in roles:
        by_suspect = {s.request_id: s for s in suspects}
        by_request: dict[str, list[Finding]] = {}
        for f in received:
            by_request.setdefault(str(f.row["recipient_request_id"]), []).append(f)
        requests = []
        for rid in sorted(set(by_suspect) | set(by_request)):
            s: Suspect | None = by_suspect.get(rid)
            fs = by_request.get(rid, [])
            requests.append({
                "request_id": rid,
                "received_at": iso(s.received_at) if s else iso(fs[0].recipient_received_at),
                "completed_at": iso(s.completed_at) if s else "",
                "why_suspect": s.reasons if s else [],
                "prompt_tokens": s.prompt_tokens if s else None,
                "prompt_tokens_source": s.prompt_tokens_source if s else None,
                "tier": best_tier(f.tier for f in fs),
                "tier_reason": sorted({str(f.row.get("tier_rule") or "") for f in fs} - {""})
                or ["no verified foreign passage was found; the answer was still generated from corrupted context"],
                "foreign_passages": [
                    {"reference": refs[f.finding_id], "response_start": f.row["recipient_start"],
                     "response_end": f.row["recipient_end"], "tier": f.tier,
                     "all_passages": [{"response_start": a, "response_end": b} for a, b, _, _ in passages(f.row)],
                     "severity": sorted({h.cls for h in f.recipient_hits}) or [NONE], **_person(f)}
                    for f in fs
                ],
            })
        out["recipient"] = {"requests": requests}
    if "exposed" in roles:
        by_source: dict[str, list[Finding]] = {}
        for f in exposed:
            by_source.setdefault(str(f.row["source_request_id"]), []).append(f)
        requests = []
        for rid in sorted(by_source):
            fs = by_source[rid]
            spans = []
            for f in fs:
                classes.update(h.cls for h in f.source_hits)
                withheld = f.source_is_suspect and f.row.get("source_kind") == "response"
                spans.append({
                    "reference": refs[f.finding_id],
                    "part": f.row.get("source_kind") or "prompt",
                    "start": f.row["source_start"], "end": f.row["source_end"],
                    # Every passage of this text found in the response (the preview shows the strongest).
                    "all_passages": [{"start": c, "end": d} for _, _, c, d in passages(f.row)],
                    "exposed_at": iso(f.recipient_received_at),
                    "tier": f.tier, "tier_reason": f.row.get("tier_rule") or "",
                    "score": f.row.get("score"), "matched_tokens": f.row.get("matched_tokens"),
                    # A suspect response of yours may itself hold someone else's text: not shown.
                    "preview": None if withheld else _masked_preview(f.source_span, f.source_hits),
                    "secrets": [h.to_json() | {"start": f.row["source_start"] + h.start, "end": f.row["source_start"] + h.end}
                                for h in f.source_hits],
                    **_person(f),
                })
            requests.append({
                "request_id": rid,
                "received_at": iso(min((f.source_received_at for f in fs if f.source_received_at), default=None)),
                "spans": spans,
            })
        out["exposed"] = {"requests": requests}
    out["actions"] = _actions(roles, classes)
    return out


def render_packet_md(p: dict[str, Any]) -> str:
    """The Markdown notice for counsel and the customer (same content as notice.json)."""
    e = safe.md_escape
    lines = [
        f"# Notice to customer {e(p['tenant_id'])}",
        "",
        f"Case: {e(p['case'])}. Your role: {', '.join(p['roles'])}. Tier: **{p['tier']}**. "
        f"Highest severity of the data involved: **{p['highest_severity']}**.",
        "",
        "## What happened",
        "",
        "A fault in the model-serving engine replaced some very long prompts with a one-token placeholder; "
        "the engine then generated the answer from memory left by another customer's request. Such an answer "
        "can contain text of that other customer's prompt. Each passage below is named by an opaque reference; "
        "the incident team can resolve it, this notice never names the other customer.",
        "",
    ]
    if "recipient" in p:
        lines += ["## Answers you received that were generated from corrupted context", "",
                  "| request | received | tier | why suspect | foreign passages (characters of the answer) |",
                  "|---|---|---|---|---|"]
        for r in p["recipient"]["requests"]:
            spans = "; ".join(f"{x['reference']} [{x['response_start']}, {x['response_end']}){_by_person(x)}" for x in r["foreign_passages"]) or "none verified"
            lines.append(f"| {e(r['request_id'])} | {r['received_at']} | {r['tier']} | {e(', '.join(r['why_suspect']))} | {spans} |")
        lines += ["", "Why these tiers: " + e("; ".join(sorted({t for r in p["recipient"]["requests"] for t in r["tier_reason"]}))), ""]
    if "exposed" in p:
        lines += ["## Your content that appeared in another customer's answer", ""]
        for r in p["exposed"]["requests"]:
            lines += [f"### Request {e(r['request_id'])} (received {r['received_at']})", ""]
            for s in r["spans"]:
                lines.append(f"- {s['reference']}: {s['part']} characters [{s['start']}, {s['end']}), exposed "
                             f"{s['exposed_at']}, tier {s['tier']} ({e(s['tier_reason'])}){_by_person(s)}")
                if s["preview"] is not None:
                    lines.append(f"  - passage (secrets masked): `{s['preview'].replace('`', chr(0x2032))}`")
                else:
                    lines.append("  - passage not shown: it lies in an answer of yours that was itself suspect")
                for h in s["secrets"]:
                    lines.append(f"  - secret: {h['class']} ({h['kind']}) `{h['masked']}` sha256 {h['sha256']}")
            lines.append("")
    lines += ["## What you should do", ""] + [f"{i}. {a}" for i, a in enumerate(p["actions"], 1)] + [""]
    return "\n".join(lines)


def write_packets(
    report_dir: Path, notices: list[Notice], data: CaseData, refs: dict[str, str], case_name: str, classifier: Classifier
) -> list[str]:
    """Write packets/<tenant>/notice.json and notice.md for every notified customer."""
    by_tenant: dict[str, dict[str, Notice]] = {}
    for n in notices:
        by_tenant.setdefault(n.tenant_id, {})[n.role] = n
    suspects: dict[str, list[Suspect]] = {}
    for s in data.suspects:
        suspects.setdefault(s.tenant_id, []).append(s)
    received: dict[str, list[Finding]] = {}
    exposed: dict[str, list[Finding]] = {}
    for f in data.findings:
        if f.cross_tenant:
            received.setdefault(f.recipient_tenant, []).append(f)
            exposed.setdefault(f.source_tenant, []).append(f)
    written = []
    packets = safe.private_dir(report_dir / "packets")
    for tenant in sorted(by_tenant):
        folder = safe.private_dir(packets / safe.safe_name(tenant))
        packet = build_packet(tenant, by_tenant[tenant], suspects.get(tenant, []), received.get(tenant, []),
                              exposed.get(tenant, []), refs, case_name, classifier)
        safe.write_text(folder / "notice.json", json.dumps(packet, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
        safe.write_text(folder / "notice.md", render_packet_md(packet))
        written.append(packet_path(tenant))
    return written
