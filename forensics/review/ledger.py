"""The notification ledger (notices sent, notices.jsonl) and the audit that checks it against the list.

``forensics notified`` appends one line per notice sent: customer, channel, when it was sent
(``at``, given by the team), its reference (``ref``), and when it was recorded. ``forensics
audit`` compares the ledger with the report's notification list and its verdicts:

- customers on the list with no valid notice (and the days since the report; overdue past
  ``[report] notify_within_hours``);
- customers notified who are not on the list: no longer (a later verdict or re-run took them off), or never
  as far as this report tells (no finding or suspect names the id: a typo, most likely);
- notices sent before the evidence they cite existed. The manifest holds no wall-clock time (so
  re-runs stay byte-identical), so a customer's evidence exists from the first log record that puts
  it on the list (its notifications.csv rows' ``first_seen``), and the deadline runs from the report's
  time, the latest log record it was built from (``counts.last_received``): no report can predate it.
  For a customer on the list only through a review candidate an analyst confirmed, both run from that
  verdict on. Such a notice does not count as notifying the customer;
- customers notified whose findings on the list grew since: each notice records the findings naming
  its customer when it was recorded, and those the list gained later call for a further notice.
- each customer's decision trail: the verdicts on the findings that concern it.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

from forensics import csvfile
from forensics.config import iso, notify_within_hours, parse_utc
from forensics.errors import CaseError, ConfigError
from forensics.report import safe
from forensics.review import AUDIT, NOTICES, VERDICTS, chain
from forensics.review.verdicts import (
    CONFIRMED_RULE,
    MAX_TEXT,
    PASSAGE_KEYS,
    Resolution,
    deciding,
    decisions,
    passage_of,
    passage_overlap,
    raw_id,
    report_resolution,
)
from forensics.review.verdicts import REQUIRED as VERDICT_FIELDS

CHANNELS = ("email", "portal", "letter")
#: Audit statuses of a customer notified but not on the list: one a finding or suspect of the report concerns (a
#: later verdict or re-run took it off), and one nothing in the report names (a typo in the id, most likely).
NOTIFIED_OFF_LIST = "notified, no longer on the list"
NOTIFIED_NEVER_LISTED = "notified, not on the list"
#: A customer on the list whose notices did not cover all of its findings (the list gained some after the last one).
NOTIFIED_NEW_FINDINGS = "notified, new findings since"
#: How far in the future a notice's time may lie (clocks of the sending and recording machines differ).
CLOCK_SKEW = dt.timedelta(minutes=10)
REQUIRED = ("tenant_id", "channel", "at", "ref", "recorded_at")
IMPORT_COLUMNS = ("tenant_id", "channel", "at", "ref")
AUDIT_COLUMNS = ("tenant_id", "on_list", "roles", "tier", "status", "notified_at", "channel", "ref", "evidence_from",
                 "days_since_report", "deadline", "overdue", "problems", "decision_trail")


def _when(value: str, what: str, file: Path | None = None, line: int | None = None) -> dt.datetime:
    try:
        return parse_utc(value.strip(), what)
    except ConfigError as exc:
        raise ConfigError(exc.message, file=file, line=line, fix="give a time with a zone, e.g. 2026-09-12T09:30:00Z") from None


def check(tenant_id: str, channel: str, at: str, ref: str, *, file: Path | None = None, line: int | None = None) -> dict[str, Any]:
    """One notice checked (``file``/``line``: where an imported one came from)."""
    tenant = tenant_id  # as given: "acme" and "acme " (a no-break space) may be two customers
    if not tenant.strip():
        raise ConfigError("the tenant id is empty", file=file, line=line, fix="give the customer's tenant_id as in notifications.csv")
    if channel not in CHANNELS:
        raise ConfigError(f"channel {channel!r} is not one of {', '.join(CHANNELS)}", file=file, line=line,
                          fix="use email, portal or letter")
    reference = ref.strip()
    if not reference or len(reference) > MAX_TEXT:
        raise ConfigError("the notice reference is empty or too long", file=file, line=line,
                          fix="give the reference of the message sent (ticket, letter number), up to 2000 characters")
    return {"tenant_id": tenant, "channel": channel, "at": iso(_when(at, "the notice time (--at)", file, line)), "ref": reference}


def read_import(path: Path) -> list[dict[str, Any]]:
    """Notices from a CSV (tenant_id, channel, at, ref), every row checked first."""
    return [check(r.get("tenant_id") or "", (r.get("channel") or "").strip(), r.get("at") or "", r.get("ref") or "",
                  file=Path(path), line=line) for line, r in chain.import_rows(path, IMPORT_COLUMNS, "notice")]


def _manifest(report_dir: Path) -> dict[str, Any]:
    path = report_dir / "manifest.json"
    try:
        man = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CaseError("not a report folder (no manifest.json)", file=report_dir,
                        fix="give the folder `forensics report` or `forensics run` wrote (OUT/<case name>)") from None
    except (OSError, ValueError) as exc:
        raise CaseError(f"manifest.json is unreadable ({exc})", file=path, fix="re-run `forensics report`") from None
    if not isinstance(man, dict):
        raise CaseError("manifest.json is not a report manifest", file=path, fix="re-run `forensics report`")
    return man


def record(report_dir: Path, notices: list[dict[str, Any]], now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Append checked notices to the report's notices.jsonl, each stamped with when it was recorded."""
    report_dir = Path(report_dir)
    _manifest(report_dir)
    when = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    recorded = iso(when)
    for n in notices:  # a notice cannot be recorded before it was sent: a typo in --at, most likely
        if _t(n["at"]) > when + CLOCK_SKEW:
            raise ConfigError(f"the notice to {n['tenant_id']!r} is dated {n['at']}, after now ({recorded})",
                              fix="give the time the notice was sent (--at), with its zone")
    with chain.report_lock(report_dir):
        _manifest(report_dir)
        # What each notice told of: the findings of the list naming its customer now. The audit names those the list
        # gains later (logs added, a verdict), for which a further notice is due.
        # Each with its passage: logs added later can give the same passage another finding id.
        listed = {_raw(r["tenant_id"]) for r in _notifications(report_dir)}
        evidence = _csv_rows(report_dir / "evidence.csv")
        rows = {e.get("finding_id", ""): e for e in evidence}
        findings = _listed_findings(evidence)
        # A leak into an answer produced after the notice was sent is none it told of, however late it is recorded.
        answered = {(s.get("request_id", ""), s.get("tenant_id", "")):
                    _maybe_t(s.get("received_at", "")) or _maybe_t(s.get("completed_at", ""))
                    for s in _csv_rows(report_dir / "suspects.csv")}

        def told(notice: dict[str, Any], fid: str) -> bool:
            # An answer of unknown time is none the notice is known to have told of: the audit asks for a further one.
            row = rows[fid]
            when = answered.get((row.get("recipient_request_id", ""), row.get("recipient_tenant_id", "")))
            return when is not None and when <= _t(notice["at"])

        return chain.append(report_dir, NOTICES, [dict(n, recorded_at=recorded, findings=[
            {"finding_id": f, **passage_of(rows[f])} for f in sorted(findings.get(_named(n["tenant_id"], listed), set()))
            if told(n, f)]) for n in notices], REQUIRED)


@dataclasses.dataclass
class Audit:
    """What ``forensics audit`` found, one row per customer on the list or notified."""

    report_dir: Path
    now: str
    report_time: str
    notify_within_hours: float
    rows: list[dict[str, Any]]
    # Verdicts recorded since the report was rendered: the list audited does not apply them yet
    verdicts_since_render: int = 0

    @property
    def not_notified(self) -> list[dict[str, Any]]:
        """Customers on the list with no valid notice."""
        return [r for r in self.rows if r["on_list"] and r["status"] != "notified"]

    @property
    def ok(self) -> bool:
        """Whether everyone on the list has been notified."""
        return not self.not_notified

    def summary(self) -> dict[str, Any]:
        """JSON-ready form for the CLI."""
        return {"report": str(self.report_dir), "now": self.now, "report_time": self.report_time,
                "notify_within_hours": self.notify_within_hours, "customers": self.rows,
                "not_notified": len(self.not_notified), "overdue": sum(1 for r in self.rows if r["overdue"]),
                "notified_not_on_list": sum(1 for r in self.rows if r["status"] in (NOTIFIED_OFF_LIST, NOTIFIED_NEVER_LISTED)),
                "notices_before_evidence": sum(1 for r in self.rows if "before the evidence" in r["problems"]),
                "new_findings_since_notice": sum(1 for r in self.rows if r["status"] == NOTIFIED_NEW_FINDINGS),
                "verdicts_since_render": self.verdicts_since_render,
                "audit_csv": str(self.report_dir / AUDIT)}


def _notifications(report_dir: Path) -> list[dict[str, str]]:
    """The report's notifications.csv rows; a file whose columns are not the list's (a spreadsheet saved over it) is a
    CaseError naming it, not an internal error."""
    path = report_dir / "notifications.csv"
    if not path.is_file():
        return []
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    if "tenant_id" not in (reader.fieldnames or []):
        raise CaseError("notifications.csv has no tenant_id column: it is not the list the report wrote", file=path,
                        fix="render the report again (forensics report or run); forensics verify names what changed")
    return rows


def _csv_rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _raw(shown: str) -> str:
    """A customer's id as its logs hold it, from the cell a report CSV shows (as is if none writes it so)."""
    raw = csvfile.uncell(shown)
    return shown if raw is None else raw


def _named(tenant: str, listed: set[str]) -> str:
    """The customer a notice names: the id as its logs hold it, else as notifications.csv shows it (copied
    from there: control characters escaped, a formula start quoted). An id that reads as two customers,
    one each way, is the one whose logs hold it: the other is named by its own id."""
    if tenant in listed:
        return tenant
    raw = csvfile.uncell(tenant)
    return raw if raw is not None and raw in listed else tenant


def naming_warnings(report_dir: Path, tenants: list[str]) -> list[str]:
    """What to tell about the ids ``tenants`` recorded as notices, read against the report's notifications.csv
    as the audit reads them: an id on no row (a typo leaves the customer it was meant for unnotified), and
    an id that names two customers, one as its logs hold it (the one credited) and one as the CSV shows it."""
    listed = {_raw(r["tenant_id"]) for r in _notifications(Path(report_dir))}
    warnings = []
    for tenant in tenants:
        if _named(tenant, listed) not in listed:
            warnings.append(f"{tenant} is on no row of notifications.csv: recorded, but check the id (the audit lists "
                            "it as notified and not on the list; the customer it was meant for stays unnotified)")
            continue
        shown_as = csvfile.uncell(tenant)
        if tenant in listed and shown_as is not None and shown_as != tenant and shown_as in listed:
            warnings.append(f"{tenant} names two customers of notifications.csv: the one whose logs hold this id, "
                            f"credited, and the one whose id {shown_as} the CSV shows this way; to notify that one, "
                            "record its id as its logs hold it")
    return warnings


def _t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _moved(verdict: dict[str, Any], resolution: Resolution, decides: list[str]) -> str:
    """How a verdict stands in this report, for the decision trail (nothing when it decides its own finding alone):
    out of effect, or counting for findings that hold its passage under other ids (``decides``: those it decides)."""
    fid = raw_id(str(verdict["finding_id"]))
    if fid in resolution.stale:
        return " (out of effect: its finding is gone and no finding lies within its passage)"
    if decides and decides != [fid]:
        return f" (counts for {', '.join(decides)})"
    return ""


def _trail_index(verdicts: list[dict[str, Any]], tenants_of: dict[str, set[str]],
                 targets: Any) -> dict[str, list[int]]:
    """Customer -> the verdicts (by position) of its decision trail: those whose finding, or a finding they count
    for, concerns it, and those whose passage names it (a verdict out of effect stays in the trail of those it was
    about). Built once: asked customer by customer, it was customers x verdicts."""
    index: dict[str, list[int]] = {}
    for i, v in enumerate(verdicts):
        named: set[str] = set(tenants_of.get(str(v["finding_id"]), set()))
        for t in targets(v["finding_id"]):
            named |= tenants_of.get(t, set())
        passage = v.get("passage")
        if isinstance(passage, dict):
            named |= {_raw(str(passage.get("recipient_tenant_id", ""))), _raw(str(passage.get("source_tenant_id", "")))}
        for tenant in named:
            index.setdefault(tenant, []).append(i)
    return index


def _told_of(notices: list[dict[str, Any]], now_named: Any, widened: set[str]) -> Any:
    """Whether the findings ``notices`` recorded told of a finding (by its CSV cell and row): the same id, an id its
    verdict now counts for (not a bigger finding a confirm was carried to: nobody told of its other text), or a
    finding lying mostly inside a passage told of (logs added since gave it another id)."""
    told = [f for n in notices if isinstance(n.get("findings"), list) for f in n["findings"] if isinstance(f, dict)]
    ids = {t for f in told for t in now_named(f.get("finding_id")) if raw_id(t) not in widened}
    at: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for f in told:
        at.setdefault(tuple(str(f.get(k, "")) for k in PASSAGE_KEYS[:3]), []).append(f)

    def told_of(fid: str, row: dict[str, str]) -> bool:
        return fid in ids or any(passage_overlap(t, row, within=True)
                                 for t in at.get(tuple(row.get(k, "") for k in PASSAGE_KEYS[:3]), []))
    return told_of


def _shown_at(notice: dict[str, Any]) -> str:
    """A notice's ``at`` as a problem quotes it: JSON, cut short."""
    return json.dumps(notice.get("at"), ensure_ascii=False)[:60]


def _maybe_t(text: str) -> dt.datetime | None:
    """A CSV cell's time, or None when it holds none (an empty or odd cell)."""
    try:
        when = _t(text)
    except (ValueError, AttributeError):
        return None
    return when if when.tzinfo is not None else None


def _cross(row: dict[str, str]) -> bool:
    """Whether an evidence.csv row names two customers (a cross-tenant finding)."""
    return row.get("relation", "") in ("", "cross_tenant") and row.get("recipient_tenant_id") != row.get("source_tenant_id")


def _listed_findings(evidence: list[dict[str, str]]) -> dict[str, set[str]]:
    """Customer (as the logs hold its id) -> the cross-tenant findings of the list (a rendered evidence.csv) naming it."""
    out: dict[str, set[str]] = {}
    for e in evidence:
        if _cross(e):
            for side in ("recipient_tenant_id", "source_tenant_id"):
                out.setdefault(_raw(e.get(side, "")), set()).add(e.get("finding_id", ""))
    return out


def audit(report_dir: Path, now: dt.datetime | None = None) -> Audit:
    """Compare the notices sent with the report's list, as of ``now`` (default: the clock); write audit.csv into the
    report folder."""
    report_dir = Path(report_dir)
    man = _manifest(report_dir)
    # As of ``now``: a notice dated after it was not sent then (an audit "as of the deadline" showed late notices as
    # done). On the clock, a notice dated within the skew ``record`` allows counts, as it was accepted.
    until = now.astimezone(dt.UTC) if now is not None else dt.datetime.now(dt.UTC) + CLOCK_SKEW
    now = (now or dt.datetime.now(dt.UTC)).astimezone(dt.UTC)
    hours = notify_within_hours((man.get("parameters") or {}).get("report") or {}, report_dir / "manifest.json")
    last = (man.get("counts") or {}).get("last_received") or ""
    if not last:
        raise CaseError("manifest.json records no last_received time (counts.last_received)", file=report_dir / "manifest.json",
                        fix="re-render the report with this version of `forensics report`")
    report_time = _t(last)
    with chain.report_lock(report_dir):  # no re-render or append meanwhile: the list and the ledgers agree
        listed = _notifications(report_dir)
        suspects, evidence = _csv_rows(report_dir / "suspects.csv"), _csv_rows(report_dir / "evidence.csv")
        review = _csv_rows(report_dir / "review.csv")
        verdicts = chain.read_report_ledger(report_dir, VERDICTS, VERDICT_FIELDS).entries
        sent = chain.read_report_ledger(report_dir, NOTICES, REQUIRED).entries
        since = man.get("listed_since")
        rows = _rows(listed, suspects, evidence, review, verdicts, sent, report_time, now, hours, report_resolution(report_dir),
                     listed_since=since if isinstance(since, dict) else None, counted_until=until,
                     applied=_rendered_entries(man, VERDICTS))
        safe.write_bytes(report_dir / AUDIT, safe.csv_bytes(AUDIT_COLUMNS, [[r[c] for c in AUDIT_COLUMNS] for r in rows]))
    since = max(0, len(verdicts) - _rendered_entries(man, VERDICTS))
    return Audit(report_dir, iso(now), iso(report_time), hours, rows, verdicts_since_render=since)


def _rendered_entries(man: dict[str, Any], name: str) -> int:
    """How many lines of ledger ``name`` the report was rendered with (its manifest's ``ledgers``; none recorded: the
    render had no line of it)."""
    ledgers = man.get("ledgers")
    record = ledgers.get(name) if isinstance(ledgers, dict) else None
    entries = record.get("entries", 0) if isinstance(record, dict) else 0
    return entries if isinstance(entries, int) and not isinstance(entries, bool) else 0


def _disputes(verdicts: list[dict[str, Any]], resolution: Resolution | None = None) -> dict[str, str]:
    """Per finding (as evidence.csv shows its id) on which analysts' latest verdicts differ, or the one that decides
    (:func:`forensics.review.verdicts.deciding`: a verdict given on the finding itself beats one carried to it) differs
    from what they last said, the problem that says so, naming the deciding verdict: it decided without a word (a
    review). An analyst who changed their mind to agree settles it; a verdict out of effect takes no side; one given on
    a finding logs added since renamed counts for the finding that holds its passage now."""
    resolution = resolution or Resolution()
    carried, stale = resolution.carried, set(resolution.stale)
    by_finding: dict[str, dict[Any, dict[str, Any]]] = {}
    for v in verdicts:
        fid = raw_id(str(v["finding_id"]))
        if v.get("verdict") not in ("confirm", "dismiss") or fid in stale:
            continue
        for target in carried.get(fid, (fid,)):
            latest = by_finding.setdefault(target, {})
            latest.pop(v.get("analyst"), None)  # (re-inserted last: the analysts in the order of their latest verdict)
            latest[v.get("analyst")] = v
    decider = deciding(verdicts, resolution)
    out: dict[str, str] = {}
    for fid, by_analyst in by_finding.items():
        given = list(by_analyst.values())
        decides = decider.get(fid)
        if decides is None or (len({v["verdict"] for v in given}) == 1 and decides["verdict"] == given[0]["verdict"]):
            continue
        said = ", ".join(f"{v.get('analyst')} {v['verdict']}" for v in given)
        on = "" if raw_id(str(decides["finding_id"])) == fid else f" (given on {csvfile.cell(raw_id(str(decides['finding_id'])))})"
        out[csvfile.cell(fid)] = (f"verdicts on finding {csvfile.cell(fid)} differ (latest: {said}): "
                                  f"{decides.get('analyst')}'s {decides['verdict']}{on} decides; settle it")
    return out


def _rows(listed: list[dict[str, str]], suspects: list[dict[str, str]], evidence: list[dict[str, str]],
          review: list[dict[str, str]], verdicts: list[dict[str, Any]],
          sent: list[dict[str, Any]], report_time: dt.datetime, now: dt.datetime, hours: float,
          resolution: Resolution | None = None, listed_since: dict[str, Any] | None = None,
          counted_until: dt.datetime | None = None, applied: int | None = None) -> list[dict[str, Any]]:
    """One audit row per customer; customers are compared by their ids as the logs hold them (the report's
    CSV cells read back: :func:`forensics.csvfile.uncell`), and audit.csv writes each id once as a cell.
    ``listed_since``: the manifest's, since when the reports have listed each customer (the deadline runs from it).
    ``counted_until``: a notice dated after it does not count (the audit's time), and its row says so.
    ``applied``: how many of ``verdicts`` the list audited was rendered with (the manifest's ``ledgers``; None: all):
    the later ones decide nothing on it yet (a dismiss since the render took a confirmed customer's deadline back
    to the report's time), and show in the trail only."""
    on_list: dict[str, list[dict[str, str]]] = {}
    for r in listed:
        on_list.setdefault(_raw(r["tenant_id"]), []).append(r)
    # Which findings concern which customer (either side), to build each one's decision trail.
    concerns: dict[str, set[str]] = {}
    for e in evidence + review:
        for side in ("recipient_tenant_id", "source_tenant_id"):
            concerns.setdefault(_raw(e.get(side, "")), set()).add(e.get("finding_id", ""))
    concerns_listed = _listed_findings(evidence)
    evidence_rows = {e.get("finding_id", ""): e for e in evidence}
    resolution = resolution or Resolution()
    widened = set(resolution.widened)
    rendered = verdicts if applied is None else verdicts[:applied]
    decided = {csvfile.cell(k): v for k, v in decisions(rendered, resolution).items()}

    def now_named(fid: Any) -> tuple[str, ...]:  # the findings a verdict counts for in this report (its passage's)
        return tuple(csvfile.cell(t) for t in resolution.carried.get(raw_id(str(fid)), (raw_id(str(fid)),)))

    confirmed_at: dict[str, str] = {}
    for v in rendered:  # the first confirm of a finding still confirmed: when its evidence came to be
        if v["verdict"] == "confirm" and raw_id(str(v["finding_id"])) not in resolution.stale:
            for target in now_named(v["finding_id"]):
                if decided.get(target) == "confirm":
                    confirmed_at.setdefault(target, v["at"])
    by_tenant: dict[str, list[dict[str, Any]]] = {}
    later_of: dict[str, list[dict[str, Any]]] = {}  # notices dated after counted_until: no notice yet, said in the row
    listed_ids = set(on_list)
    for n in sent:
        dated = _maybe_t(str(n.get("at", "")))
        later = dated is not None and counted_until is not None and dated > counted_until
        (later_of if later else by_tenant).setdefault(_named(n["tenant_id"], listed_ids), []).append(n)
    # Customers the machine's own results hold on the list (a suspect, or a finding not dismissed).
    by_suspect = {_raw(s.get("tenant_id", "")) for s in suspects}
    by_machine = set(by_suspect)
    for e in evidence:
        cross = _cross(e)
        # A rendered evidence.csv holds the candidates an analyst confirmed too: those are the person's, not the machine's.
        by_person = e.get("tier_rule") == csvfile.cell(CONFIRMED_RULE)
        if cross and not by_person and decided.get(e.get("finding_id", "")) != "dismiss":
            by_machine.update((_raw(e.get("recipient_tenant_id", "")), _raw(e.get("source_tenant_id", ""))))
    tenants_of: dict[str, set[str]] = {}
    for tenant_id, fids in concerns.items():
        for fid in fids:
            tenants_of.setdefault(fid, set()).add(tenant_id)
    trail_index = _trail_index(verdicts, tenants_of, now_named)
    # Which findings each verdict decides (a finding's own verdict wins over one carried from a sibling).
    decides: dict[int, list[str]] = {}
    position = {id(v): i for i, v in enumerate(verdicts)}
    for target, entry in sorted(deciding(rendered, resolution).items()):
        decides.setdefault(position[id(entry)], []).append(target)
    disputes = _disputes(verdicts, resolution)
    rows = []
    for tenant in sorted(set(on_list) | set(by_tenant)):
        listed_rows = on_list.get(tenant, [])
        # The customer's own evidence: from the first log record that puts it on the list (its rows' first_seen); what
        # the list gains later calls for a further notice (below), it does not undo one. The report's latest record of
        # all moved with every log added, unrelated ones too: a notice sent in time became "before the evidence it cites
        # existed".
        seen = [t for r in listed_rows if (t := _maybe_t(r.get("first_seen", ""))) is not None]
        # With no time for the customer's records, nothing tells a notice came too early (the report's own time would
        # reject a notice sent in time).
        evidence_from = min(seen) if seen else None
        # The deadline runs from when the reports first listed the customer (the manifest's listed_since, carried by every
        # render since), else from the report's time (the latest log record it was built from: no report can predate it).
        # The report's time alone moved every deadline when logs with later records were added.
        clock_from = _maybe_t(str((listed_since or {}).get(tenant, ""))) or report_time
        if listed_rows and tenant not in by_machine:
            # On the list only through review candidates an analyst confirmed: from that verdict on, unless a notice
            # told of the finding already (the machine listed it then; logs added since moved it to review).
            told_of = _told_of(by_tenant.get(tenant, []), now_named, widened)
            times = [_t(confirmed_at[f]) for f in concerns.get(tenant, set()) if f in confirmed_at
                     and not told_of(f, evidence_rows.get(f, {}))]
            if times:
                evidence_from = max(min(times), evidence_from) if evidence_from is not None else min(times)
                clock_from = max(clock_from, min(times))
        # A notice whose time is not a time (a ledger line written by hand) counts for nothing, and is said to.
        when = [(n, _maybe_t(str(n.get("at", "")))) for n in by_tenant.get(tenant, [])]
        after = later_of.get(tenant, [])
        notices = [n for n, t in sorted(((n, t) for n, t in when if t is not None), key=lambda x: (x[1], x[0].get("seq", 0)))]
        problems = [f"notice {n.get('ref')!r} has no readable time ({_shown_at(n)}): it does not count"
                    for n, t in when if t is None]
        problems += [f"notice {n.get('ref')!r} is dated {n.get('at')}, after the audit's time ({iso(now)}): it does not "
                     "count yet" for n in after]
        valid = [n for n in notices if evidence_from is None or _t(n["at"]) >= evidence_from]
        problems += [f"notice {n['ref']!r} sent {n['at']}, before the evidence it cites existed ({iso(evidence_from)})"
                     for n in notices if evidence_from is not None and _t(n["at"]) < evidence_from]
        if listed_rows and not seen and notices:
            problems.append("the list gives no time for this customer's records: whether a notice came after its evidence "
                            "cannot be checked")
        first = valid[0] if valid else None
        covered = [n["findings"] for n in valid if isinstance(n.get("findings"), list)]
        uncovered: set[str] = set()
        if listed_rows and first is not None and not covered:
            problems.append("the notices were recorded by an earlier release, which kept not which findings they told of: "
                            "findings the list gained since cannot be told from them")
        if listed_rows and first is not None and covered:
            # What the notices that say so told of (every finding then on the list for the customer, whose answer came
            # before the notice): one the list holds and none of them told of came later, an older notice's or not.
            told_of = _told_of(valid, now_named, widened)
            uncovered = {f for f in concerns_listed.get(tenant, set()) if not told_of(f, evidence_rows.get(f, {}))}
            if uncovered:
                problems.append(f"{len(uncovered)} finding(s) about this customer are in no notice sent (the list gained them "
                                f"after it): {', '.join(sorted(uncovered)[:5])}{', ...' if len(uncovered) > 5 else ''}; a "
                                "further notice is due")
        if listed_rows:
            status = ("not notified" if first is None else NOTIFIED_NEW_FINDINGS if uncovered else "notified")
        elif (any(t in concerns or t in by_suspect for t in (tenant, _raw(tenant)))  # the id as logged or as shown
              or any(n.get("findings") for n in by_tenant.get(tenant, []))):  # a notice told of findings then listing it
            status = NOTIFIED_OFF_LIST  # a verdict or a re-run took it off
        else:
            # Nothing in this report names the id: a typo, or a customer no finding ever concerned; "no longer" would
            # tell the auditor the list once held it.
            status = NOTIFIED_NEVER_LISTED
            problems.append("no finding or suspect response of this report names this id: check that it was recorded "
                            "as the logs hold it (the customer it was meant for may be unnotified)")
        overdue = bool(listed_rows) and first is None and now - clock_from > dt.timedelta(hours=hours)
        if listed_rows and first is not None and _t(first["at"]) - clock_from > dt.timedelta(hours=hours):
            problems.append(f"notified {first['at']}, after the {hours:g}-hour deadline")
        problems += [disputes[f] for f in sorted(concerns.get(tenant, set()) & set(disputes))]
        trail = [f"{v['at']} {v['analyst']} {v['verdict']} {v['finding_id']}" + _moved(v, resolution, decides.get(i, []))
                 + f": {v['reason']}" for i in trail_index.get(tenant, []) for v in (verdicts[i],)]
        trail += [f"{n['at']} notice by {n['channel']} ref {n['ref']} (recorded {n['recorded_at']})" for n in notices]
        rows.append({
            "tenant_id": tenant, "on_list": bool(listed_rows),
            "roles": ";".join(sorted(r.get("role", "") for r in listed_rows)),
            "tier": ";".join(r.get("tier", "") for r in sorted(listed_rows, key=lambda r: r.get("role", ""))),
            "status": status, "notified_at": first["at"] if first else "", "channel": first["channel"] if first else "",
            "ref": first["ref"] if first else "", "evidence_from": iso(evidence_from) if evidence_from is not None else "",
            "days_since_report": int((now - clock_from).total_seconds() // 86400) if listed_rows else "",
            # When its first notice is due ("due in 2 hours" could not be read off the row)
            "deadline": iso(clock_from + dt.timedelta(hours=hours)) if listed_rows else "",
            "overdue": overdue, "problems": " | ".join(problems), "decision_trail": " | ".join(trail),
        })
    return rows
