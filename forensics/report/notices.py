"""Who must be told what: the notification list and each customer's packet.

A packet holds only its customer's own data. The other side of a finding is an opaque reference
(an HMAC of the finding id keyed by the evidence itself, so a customer cannot guess it back to a
request id) that the team resolves with ``references.csv``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import phonenumbers

from forensics import artifacts, settings
from forensics.artifacts import RequestKey
from forensics.errors import ConfigError
from forensics.report import safe
from forensics.report.data import CaseData, Finding, Suspect, best_tier, iso
from forensics.report.severity import _PHONE_CANDIDATE, NONE, PHONE_REGION, Classifier, Hit, mask

NOTIFICATION_COLUMNS = (
    "tenant_id", "role", "tier", "n_requests", "request_ids", "first_seen", "last_seen",
    "highest_severity", "packet", "n_findings", "severity_kinds",
)
PREVIEW_CHARS = 300

#: ``[report] mask``: "default" masks contact details too; "none" shows phone numbers and emails.
MASK_POLICIES = settings.get("report", "mask").choices
#: Always masked in a notice, whatever the policy (the last 4 characters of numbers stay).
ALWAYS_MASKED = ("credential", "payment_card", "iban", "national_id")
#: Masked unless ``[report] mask = "none"``.
CONTACT_DETAILS = ("email", "phone")
#: Keys ``[report]`` takes (forensics.config refuses any other).
REPORT_KEYS = {s.key: s.default for s in settings.section("report") if s.kind in ("choice", "text")}
#: A word holding this many digits is a number worth masking even when no detector recognised it
#: (an account or record number, a phone number libphonenumber calls invalid).
NUMBER_DIGITS = 6
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


@dataclasses.dataclass(frozen=True)
class ReportSettings:
    """The ``[report]`` table of the case file: how notices mask, who to contact, what was done."""

    mask: str = "default"
    contact: str = ""
    actions_taken: str = ""


def report_settings(section: dict[str, Any], file: Any = None) -> ReportSettings:
    """Check and read a case file's ``[report]`` table (unknown keys are refused by forensics.config)."""
    for key, value in section.items():
        if key in REPORT_KEYS and not isinstance(value, str):
            raise ConfigError(f"[report] {key} must be a string, got {type(value).__name__}", file=file,
                              fix=f'{key} = "..."')
    policy = section.get("mask", "default")
    if policy not in MASK_POLICIES:
        raise ConfigError(f"[report] mask = {policy!r} is not one of {', '.join(MASK_POLICIES)}", file=file,
                          fix='mask = "default" (phone numbers and emails masked too) or mask = "none" (shown)')
    return ReportSettings(mask=policy, contact=section.get("contact", "").strip(),
                          actions_taken=section.get("actions_taken", "").strip())


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


def evidence_key(evidence_csv: bytes) -> bytes:
    """The key a first render derives its references from: its evidence.csv's bytes (as earlier releases keyed every
    render's), unknown to customers."""
    return hashlib.sha256(b"forensics-ref\0" + evidence_csv).digest()


def reference(key: bytes, finding_id: str) -> str:
    """The opaque reference of a finding: unguessable without ``key``."""
    return "ref-" + hmac.new(key, finding_id.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:16]


def references(findings: list[Finding], key: bytes) -> dict[str, str]:
    """Opaque reference per finding id: stable for the same key (the first render's), unguessable without it."""
    return {f.finding_id: reference(key, f.finding_id) for f in findings}


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


def passages(row: Mapping[str, Any]) -> list[tuple[int, int, int, int]]:
    """Every passage of an evidence or review row (a dict of its columns) as (response start, end,
    source start, end): see :func:`parse_passages`."""
    return parse_passages(row.get("passages"), (row["recipient_start"], row["recipient_end"], row["source_start"],
                                                row["source_end"]))


def finding_passages(f: artifacts.Finding) -> list[tuple[int, int, int, int]]:
    """Every passage of a finding, as :func:`passages` gives them for its row."""
    return parse_passages(f.passages, (f.recipient_start, f.recipient_end, f.source_start, f.source_end))


def parse_passages(text: str | None, span: tuple[int, int, int, int]) -> list[tuple[int, int, int, int]]:
    """The ``passages`` column (``a:b=c:d;...``) as tuples, or the finding's one ``span`` when the
    column is empty (evidence of an older version)."""
    if not text:
        return [span]
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
    ``first_seen``/``last_seen`` are when the leaking requests were received. A request whose customer
    no log names (a response that joined no request) gives no row: there is nobody to tell until the
    team finds its customer (the summary lists such suspects, :func:`unattributed`).
    """
    cross = [f for f in data.findings if f.cross_tenant]
    # Requests are (request id, tenant): two customers may send the same request id.
    by_recipient_request: dict[RequestKey, list[Finding]] = {}
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
        _add_finding(recipients, f.recipient_tenant, f.recipient_key.request_id, f, f.all_recipient_hits)
        _add_finding(exposed, f.source_tenant, f.source_key.request_id, f, f.all_source_hits)
    notices = []
    for role, table in (("exposed", exposed), ("recipient", recipients)):
        for tenant, e in table.items():
            if not tenant:
                continue
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


def unattributed(data: CaseData) -> list[str]:
    """Request ids of the suspects, and of the sources of cross-tenant findings, whose customer no log
    names: searched like any other, but nobody's to be told."""
    ids = {s.request_id for s in data.suspects if not s.tenant_id}
    ids |= {f.source_key.request_id for f in data.findings if f.cross_tenant and not f.source_tenant}
    return sorted(ids)


def _possible_phone(text: str) -> bool:
    try:
        return phonenumbers.is_possible_number(phonenumbers.parse(text, PHONE_REGION))
    except phonenumbers.NumberParseException:
        return False


#: Digit groups set apart by up to three spaces (any Unicode space), dashes or dots: one number when they hold
#: SPACED_NUMBER_DIGITS digits or more in all (a card has 13-19).
_SPACED_NUMBER = re.compile(r"(?<![\w.-])\d{1,6}(?:[\s.\-\u00a0\u2000-\u200a\u202f\u205f\u3000]{1,3}\d{1,6}){2,}(?![\w])")
SPACED_NUMBER_DIGITS = 12


def notice_masks(text: str, hits: list[Hit], policy: str = "default") -> list[tuple[int, int, str]]:
    """What a notice hides in ``text``: (start, end, masked form), sorted, never overlapping.

    The severity detectors' hits first (secrets and card, bank and identity numbers always;
    phone numbers and emails unless ``policy`` is "none"). Then, outside them, numbers no
    detector validated: a possible phone number written as one (with a separator, bracket or +)
    is a phone number; digit groups set apart by spaces or dashes holding SPACED_NUMBER_DIGITS digits or more in
    all, and any other word with NUMBER_DIGITS digits or more (an account or record number), keep only their last
    4 characters.
    Masking too much costs a customer a little reading; too little discloses their data.
    """
    spans: list[tuple[int, int, str]] = []
    taken = [(h.start, h.end) for h in hits]

    def free(start: int, end: int) -> bool:
        return all(end <= a or start >= b for a, b in taken)

    for h in hits:
        if not (h.cls in CONTACT_DETAILS and policy == "none"):
            spans.append((h.start, h.end, h.masked))
    for m in _PHONE_CANDIDATE.finditer(text):
        if free(*m.span()) and _possible_phone(m.group(0)):
            taken.append(m.span())
            if policy != "none":
                spans.append((m.start(), m.end(), mask(m.group(0), "phone")))
    for m in _SPACED_NUMBER.finditer(text):
        # Groups of digits set apart by spaces or dashes (a card or account number typed in a table, "4111  1111 ..."):
        # no detector calls them a number, and each group is too short to be one word's, yet they are one number.
        if sum(ch.isdigit() for ch in m.group(0)) >= SPACED_NUMBER_DIGITS and free(*m.span()):
            taken.append(m.span())
            spans.append((m.start(), m.end(), mask(m.group(0), "iban")))
    for m in re.finditer(r"[^\s]+", text):
        # A word without its surrounding punctuation ("(986)776-4785x0931," keeps its brackets).
        word = m.group(0)
        lead = len(word) - len(word.lstrip("\"'`<[{,.;:!?"))
        word = word[lead:].rstrip("\"'`>]},.;:!?")
        start, end = m.start() + lead, m.start() + lead + len(word)
        if sum(ch.isdigit() for ch in word) < NUMBER_DIGITS or not free(start, end):
            continue
        taken.append((start, end))
        # A bare run of digits is an account or record number; a phone number is written with a
        # separator, a bracket or a +, and libphonenumber must find it possible.
        if not word.isdigit() and not any(ch.isalpha() and ch not in "xX" for ch in word) and _possible_phone(word):
            if policy != "none":
                spans.append((start, end, mask(word, "phone")))
        else:
            spans.append((start, end, mask(word, "iban")))  # account-like: last 4 characters kept
    return sorted(spans)


def _masked_preview(text: str, hits: list[Hit], policy: str = "default") -> str:
    """The span with everything the masking policy hides replaced, on one line, shortened."""
    parts, pos = [], 0
    for start, end, masked in notice_masks(text, hits, policy):
        parts.append(text[pos:start])
        parts.append(masked)
        pos = end
    parts.append(text[pos:])
    return safe.clean_text("".join(parts), PREVIEW_CHARS)


def _actions(roles: dict[str, Notice], classes: set[str]) -> list[str]:
    acts = []
    if "exposed" in roles:
        if "credential" in classes:
            acts.append("Replace every password, key or token listed in this notice now. Then check how each one was used "
                        "since the date it was exposed. The SHA-256 lets you tell which one it is without showing it.")
        if classes & {"payment_card", "iban", "national_id"}:
            acts.append("Treat the card, bank and identity numbers listed in this notice as disclosed. Follow your breach "
                        "procedure for personal and financial data.")
        acts.append("Read the passages in this notice. Assume one other customer saw them in an answer. Decide with your "
                    "legal team whether you must tell the people they concern.")
    if "recipient" in roles:
        acts.append("Delete the answers to the requests listed in this notice, and anything made from them. They may hold "
                    "another customer's data, which you must not keep or use. Send the requests again if you still "
                    "need an answer.")
    return acts


#: Every key a notice.json holds, by where it lies (dotted: a list's items take its name). ``verify`` names any
#: other: the letter renders only these, so an added key could carry another customer's text to this one unseen.
NOTICE_KEYS: dict[str, frozenset[str]] = {
    "": frozenset({"case", "tenant_id", "packet", "roles", "tier", "highest_severity", "mask_policy", "contact",
                   "actions_taken", "recipient", "exposed", "actions"}),
    "recipient": frozenset({"requests"}),
    "recipient.requests": frozenset({"request_id", "received_at", "completed_at", "why_suspect", "prompt_tokens",
                                     "prompt_tokens_source", "tier", "foreign_passages"}),
    "recipient.requests.foreign_passages": frozenset({"reference", "response_start", "response_end", "tier", "all_passages",
                                                      "severity", "confirmed_by_person"}),
    "recipient.requests.foreign_passages.all_passages": frozenset({"response_start", "response_end"}),
    "exposed": frozenset({"requests"}),
    "exposed.requests": frozenset({"request_id", "received_at", "spans"}),
    "exposed.requests.spans": frozenset({"reference", "part", "start", "end", "all_passages", "exposed_at", "tier", "score",
                                         "matched_tokens", "preview", "secrets", "confirmed_by_person"}),
    "exposed.requests.spans.all_passages": frozenset({"start", "end", "preview", "secrets"}),
    "exposed.requests.spans.all_passages.secrets": frozenset({"class", "kind", "start", "end", "sha256", "masked"}),
    "exposed.requests.spans.secrets": frozenset({"class", "kind", "start", "end", "sha256", "masked"}),
}


def unknown_notice_keys(value: Any, where: str = "") -> list[str]:
    """The dotted paths of the keys of a notice.json (parsed) that :data:`NOTICE_KEYS` does not list."""
    out: list[str] = []
    if isinstance(value, list):
        for item in value:
            out += unknown_notice_keys(item, where)
    elif isinstance(value, dict):
        allowed = NOTICE_KEYS.get(where)
        for key in sorted(value, key=str):
            path = f"{where}.{key}" if where else str(key)
            if allowed is None or key not in allowed:
                out.append(path)
            elif path in NOTICE_KEYS:
                out += unknown_notice_keys(value[key], path)
    return out


def _person(f: Finding) -> dict[str, Any]:
    """A passage an analyst confirmed says so (verdicts.jsonl); others carry no such key."""
    return {"confirmed_by_person": True} if f.verdict == "confirm" else {}


def build_packet(
    tenant: str,
    roles: dict[str, Notice],
    suspects: list[Suspect],
    received: list[Finding],
    exposed: list[Finding],
    refs: dict[str, str],
    case_name: str,
    classifier: Classifier,
    settings: ReportSettings = ReportSettings(),
) -> dict[str, Any]:
    """The JSON notice of one customer: only its own requests, spans and masked secrets.

    The internal rule that set each tier stays in evidence.csv: a customer reads what it means.

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
        "mask_policy": settings.mask,
        "contact": settings.contact,
        "actions_taken": settings.actions_taken,
    }
    classes: set[str] = set()
    if "recipient" in roles:
        by_suspect = {s.request_id: s for s in suspects}
        by_request: dict[str, list[Finding]] = {}
        for f in received:
            by_request.setdefault(f.recipient_key.request_id, []).append(f)
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
                "foreign_passages": [
                    {"reference": refs[f.finding_id], "response_start": f.evidence.recipient_start,
                     "response_end": f.evidence.recipient_end, "tier": f.tier,
                     "all_passages": [{"response_start": a, "response_end": b} for a, b, _, _ in finding_passages(f.evidence)],
                     "severity": sorted({h.cls for h in f.all_recipient_hits}) or [NONE], **_person(f)}
                    for f in fs
                ],
            })
        out["recipient"] = {"requests": requests}
    if "exposed" in roles:
        by_source: dict[str, list[Finding]] = {}
        for f in exposed:
            by_source.setdefault(f.source_key.request_id, []).append(f)
        requests = []
        for rid in sorted(by_source):
            fs = by_source[rid]
            spans = []
            for f in fs:
                classes.update(h.cls for h in f.all_source_hits)
                ev = f.evidence
                withheld = f.source_is_suspect and ev.source_kind == "response"
                found = finding_passages(ev)
                texts: list[tuple[str | None, list[Hit]]] = (
                    list(f.source_passages) if len(f.source_passages) == len(found) else [(None, [])] * len(found))
                spans.append({
                    "reference": refs[f.finding_id],
                    "part": ev.source_kind or "prompt",
                    "start": ev.source_start, "end": ev.source_end,
                    # Every passage of this text found in the response, each shown masked with what it holds (the
                    # top-level preview is the strongest passage's).
                    "all_passages": [
                        {"start": c, "end": d,
                         "preview": None if withheld or text is None else _masked_preview(text, hits, settings.mask),
                         "secrets": [h.to_json() | {"start": c + h.start, "end": c + h.end} for h in hits]}
                        for (_, _, c, d), (text, hits) in zip(found, texts, strict=True)],
                    "exposed_at": iso(f.recipient_received_at),
                    "tier": f.tier,
                    "score": ev.score, "matched_tokens": ev.matched_tokens,
                    # A suspect response of yours may itself hold someone else's text: not shown.
                    "preview": None if withheld else _masked_preview(f.source_span, f.source_hits, settings.mask),
                    "secrets": [h.to_json() | {"start": ev.source_start + h.start, "end": ev.source_start + h.end}
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


def long_date(value: str) -> str:
    """``2026-08-27T13:02:51Z`` as ``27 August 2026`` (UTC; the same text on every machine)."""
    if not value:
        return "an unknown date"
    t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    return f"{t.day} {MONTHS[t.month - 1]} {t.year:04d}"


def _dates(values: list[str]) -> str:
    days = sorted({v[:10] for v in values if v})
    names = [long_date(d + "T00:00:00Z") for d in days]
    if not names:
        return "an unknown date"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


#: How sure the team is, in words a customer can read (the rule behind it is in evidence.csv).
SURE = {
    "confirmed": "We are certain of this: the two texts match closely and could not match by chance.",
    "probable": "This is very likely: the two texts match, though less closely.",
    "possible": "This is possible: we found no passage of another customer in the answer, but it was made "
                "from corrupted data.",
}
HOW_SURE = {"confirmed": "certain", "probable": "very likely", "possible": "possible"}
MASK_NOTE = {
    "default": "Passwords, keys, card, bank, account and identity numbers are hidden except their last 4 characters. "
               "Phone numbers and email addresses are hidden too.",
    "none": "Passwords, keys, card, bank, account and identity numbers are hidden except their last 4 characters. "
            "Phone numbers and email addresses are shown.",
}


def render_packet_md(p: dict[str, Any], *, heading_hash_escaped: bool = True, every_passage_counted: bool = True) -> str:
    """The notice as a letter to the customer (the same facts as notice.json, in plain language).

    Short sentences, dates in words, no internal rule text; request ids and references are kept
    in a table at the end for the customer's technical team.
    """
    e = safe.md_escape
    # A "#" at a heading's end closes it (CommonMark): an id ending in " #" lost it from the heading.
    # (``heading_hash_escaped=False``, ``every_passage_counted=False``: the letter as earlier releases wrote it, which
    # verify still accepts; they counted an answer's findings as its passages.)
    heading = e(p["tenant_id"]).replace("#", "\\#") if heading_hash_escaped else e(p["tenant_id"])
    lines = [f"# Notice of a data incident: {heading}", "", "Dear customer,", ""]
    summary: list[str] = []
    if "exposed" in p:
        for r in sorted(p["exposed"]["requests"], key=lambda r: r["received_at"] or ""):
            line = (f"Part of a conversation your organisation sent on {long_date(r['received_at'])} appeared in "
                    f"a response to another customer on {_dates([s['exposed_at'] for s in r['spans']])}.")
            if line not in summary:
                summary.append(line)
    if "recipient" in p:
        received = _dates([r["received_at"] for r in p["recipient"]["requests"]])
        n = len(p["recipient"]["requests"])
        summary.append(f"{'An answer' if n == 1 else f'{n} answers'} you received on {received} "
                       f"{'was' if n == 1 else 'were'} made from corrupted data. "
                       f"{'It' if n == 1 else 'They'} may hold part of another customer's conversation.")
    for line in summary:
        lines += [line, ""]
    lines += [
        "## What happened", "",
        "A fault in our model-serving system mixed up the data of two requests. Some very long requests lost "
        "their own text. The model then answered from text left behind by another customer's request. "
        "So an answer could contain part of another customer's conversation.", "",
    ]
    if "exposed" in p:
        lines += ["## What was exposed", "", MASK_NOTE.get(p.get("mask_policy", "default"), MASK_NOTE["default"]), ""]
        for r in p["exposed"]["requests"]:
            for s in r["spans"]:
                part = "your request of" if s["part"] == "prompt" else "an answer you received on"
                lines.append(f"- From {part} {long_date(r['received_at'])}, shown to another customer on "
                             f"{long_date(s['exposed_at'])} (reference {s['reference']}). {SURE.get(s['tier'], '')}"
                             + (" A person on the incident team checked this passage and confirmed it." if s.get("confirmed_by_person") else ""))
                several = [x for x in s.get("all_passages", []) if "preview" in x]
                if len(several) > 1:  # every passage, each with what it holds (a letter showed the strongest only)
                    lines.append(f"  We found {len(several)} passages of this text in that response:")
                    shown = [(x["preview"], x["secrets"]) for x in several]
                else:
                    shown = [(s["preview"], s["secrets"])]
                for preview, secrets in shown:
                    if preview is not None:
                        # A code span: shown exactly as stored (already one line, masked and escaped), no markup.
                        lines.append(f"  `{preview.replace('`', chr(0x2032))}`")
                    else:
                        lines.append("  The passage is not shown: it lies in an answer that was itself made from corrupted "
                                     "data.")
                    for h in secrets:
                        lines.append(f"  - Found in it: {h['class'].replace('_', ' ')} `{h['masked'].replace('`', chr(0x2032))}`"
                                     + (f" (SHA-256 {h['sha256']})" if h.get("sha256") else ""))
        lines.append("")
    if "recipient" in p:
        lines += ["## The answers you received", ""]
        for r in p["recipient"]["requests"]:
            # Every passage, not each finding: one finding may hold several (its all_passages).
            found = (sum(len(x.get("all_passages") or [x]) for x in r["foreign_passages"]) if every_passage_counted
                     else len(r["foreign_passages"]))
            what = (f"{found} passage{'s' if found != 1 else ''} from another customer" if found
                    else "no passage from another customer that we could verify")
            lines.append(f"- The answer to your request of {long_date(r['received_at'])}: we found {what}. "
                         f"{SURE.get(r['tier'], '')}"
                         + (" A person on the incident team checked it and confirmed it."
                            if any(x.get("confirmed_by_person") for x in r["foreign_passages"]) else ""))
        lines.append("")
    lines += ["## What we did", ""]
    lines.append(safe.md_lines(p["actions_taken"]) if p.get("actions_taken") else
                 "We traced the fault in our logs. We found every request it affected. We are writing to each "
                 "customer involved.")
    lines += ["", "## What you should do", ""] + [f"{i}. {a}" for i, a in enumerate(p["actions"], 1)] + [""]
    lines += ["## Contact", ""]
    # The sentence ends with its own full stop, so one written at the end of the contact is dropped.
    lines.append(f"For questions about this notice, contact {safe.md_lines(p['contact'].rstrip('.'), inline=True)}." if p.get("contact") else
                 "For questions about this notice, reply to the person who sent it to you.")
    lines.append(f"Please quote the case name {e(p['case'])} and the references in this notice.")
    lines += ["", "## Details for your technical team", "",
              "| request | sent (UTC) | role | how sure | references |", "|---|---|---|---|---|"]
    for r in p.get("exposed", {}).get("requests", []):
        refs = ", ".join(sorted({s["reference"] for s in r["spans"]}))
        lines.append(f"| {e(r['request_id'])} | {r['received_at']} | your text was exposed | "
                     f"{HOW_SURE[best_tier(s['tier'] for s in r['spans'])]} | {refs} |")
    for r in p.get("recipient", {}).get("requests", []):
        refs = ", ".join(x["reference"] for x in r["foreign_passages"]) or "none"
        lines.append(f"| {e(r['request_id'])} | {r['received_at']} | you received this answer | {HOW_SURE[r['tier']]} | {refs} |")
    lines.append("")
    return "\n".join(lines)


def write_packets(
    report_dir: Path, notices: list[Notice], data: CaseData, refs: dict[str, str], case_name: str, classifier: Classifier,
    settings: ReportSettings = ReportSettings(),
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
        # The report folder is built afresh and swapped in whole (report_folder): files are written straight in.
        folder = safe.new_private_dir(packets / safe.safe_name(tenant))
        packet = build_packet(tenant, by_tenant[tenant], suspects.get(tenant, []), received.get(tenant, []),
                              exposed.get(tenant, []), refs, case_name, classifier, settings)
        safe.write_new(folder / "notice.json",
                       (json.dumps(packet, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8"))
        safe.write_new(folder / "notice.md", render_packet_md(packet).encode("utf-8"))
        written.append(packet_path(tenant))
    return written
