"""Analyst verdicts on findings: record them, and apply them when a report is rendered.

A verdict is ``confirm``, ``dismiss`` or ``escalate`` on one finding id of the report's
evidence.csv or review.csv. The decision on a finding is its latest ``confirm`` or ``dismiss``
(``escalate`` is recorded and changes nothing). At render time a dismissed finding is dropped
(its customers stay on the list only if something else holds them) and a confirmed review
candidate becomes a finding of tier ``confirmed`` whose tier rule names the verdict.

A finding's id names its source request: logs added later (a newer copy of the source's text, the
engine logs of a node) can give the same passage another id. Each verdict records the passage it
was given on (recipient request and customer, source customer, span in the response); at render
time a verdict whose finding is gone follows its passage to the finding that now holds it
(:func:`resolve`), and one whose finding is gone with no finding within its passage is out of effect, and said to be.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

from forensics import csvfile
from forensics.config import iso, parse_utc
from forensics.errors import CaseError, ConfigError
from forensics.report import safe
from forensics.review import VERDICTS, chain

KINDS = ("confirm", "dismiss", "escalate")
REQUIRED = ("at", "analyst", "finding_id", "verdict", "reason")
IMPORT_COLUMNS = ("finding_id", "verdict", "reason", "analyst")
#: The tier rule of a review candidate an analyst confirmed.
CONFIRMED_RULE = "confirmed by an analyst (verdicts.jsonl)"
MAX_TEXT = 2000


#: The columns that place a finding's passage (:func:`resolve`), as its verdict records them.
PASSAGE_KEYS = ("recipient_request_id", "recipient_tenant_id", "source_tenant_id", "recipient_start", "recipient_end")


def _finding_rows(report_dir: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """Finding id -> the report file that holds it (evidence.csv first) and its row."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for name in ("review.csv", "evidence.csv"):
        path = report_dir / name
        if not path.is_file():
            continue
        with open(path, encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                if row.get("finding_id"):
                    out[row["finding_id"]] = (name, row)
    return out


def _require_report(report_dir: Path) -> None:
    if not (report_dir / "manifest.json").is_file():
        raise CaseError("not a report folder (no manifest.json)", file=report_dir,
                        fix="give the folder `forensics report` or `forensics run` wrote (OUT/<case name>)")


def _text(value: Any, what: str, where: str, file: Path | None = None, line: int | None = None) -> str:
    text = str(value or "").strip()
    if not text:
        raise ConfigError(f"{where}: {what} is empty", file=file, line=line, fix=f"give the {what} (who decided and why must be on record)")
    if len(text) > MAX_TEXT:
        raise ConfigError(f"{where}: {what} is longer than {MAX_TEXT} characters", file=file, line=line, fix="shorten it")
    return text


def check(report_dir: Path, finding_id: str, verdict: str, reason: str, analyst: str, *,
          file: Path | None = None, line: int | None = None,
          known: dict[str, tuple[str, dict[str, str]]] | None = None) -> dict[str, Any]:
    """One verdict checked against the report (``file``/``line``: where an imported one came from)."""
    where = f"finding {finding_id!r}" if finding_id else "a verdict"
    if verdict not in KINDS:
        raise ConfigError(f"{where}: verdict {verdict!r} is not one of {', '.join(KINDS)}", file=file, line=line,
                          fix="use confirm, dismiss or escalate")
    if known is None:
        _require_report(report_dir)
        known = _finding_rows(report_dir)
    fid = finding_id.strip()
    if fid not in known and csvfile.cell(fid) not in known:
        raise ConfigError(f"finding id {fid!r} is in neither evidence.csv nor review.csv of this report", file=file or report_dir,
                          line=line, fix="copy the finding_id from the report's evidence.csv or review.csv")
    name, row = known.get(fid) or known[csvfile.cell(fid)]
    return {"finding_id": fid, "verdict": verdict, "reason": _text(reason, "reason", where, file, line),
            "analyst": _text(analyst, "analyst", where, file, line), "source": name,
            "passage": passage_of(row)}


def read_import(report_dir: Path, path: Path) -> list[dict[str, Any]]:
    """Verdicts from a CSV (finding_id, verdict, reason, analyst), every row checked first (the report's findings
    read once: read per row, a thousand verdicts took minutes)."""
    _require_report(report_dir)
    known = _finding_rows(report_dir)
    return [check(report_dir, r.get("finding_id") or "", (r.get("verdict") or "").strip(), r.get("reason") or "",
                  r.get("analyst") or "", file=Path(path), line=line, known=known)
            for line, r in chain.import_rows(path, IMPORT_COLUMNS, "verdict")]


def record(report_dir: Path, verdicts: list[dict[str, Any]], now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Append checked verdicts to the report's verdicts.jsonl, stamped with the time (UTC)."""
    report_dir = Path(report_dir)
    _require_report(report_dir)
    at = iso(now or dt.datetime.now(dt.UTC))
    with chain.report_lock(report_dir):
        _require_report(report_dir)  # a rebuild may have just finished: still a report
        return chain.append(report_dir, VERDICTS, [dict(v, at=at) for v in verdicts], REQUIRED)


def decisions(entries: list[dict[str, Any]], resolution: Resolution | None = None) -> dict[str, str]:
    """Finding id -> ``confirm`` or ``dismiss``: the latest such verdict on it. With ``resolution``, a verdict also
    counts for the findings that hold its passage now (:func:`resolve`) that have no verdict of their own (a verdict
    given on a finding is its own: one carried from another id never overrides it), and one out of effect not at all."""
    return {target: str(e["verdict"]) for target, e in deciding(entries, resolution).items()}


def deciding(entries: list[dict[str, Any]], resolution: Resolution | None = None) -> dict[str, dict[str, Any]]:
    """Finding id -> the verdict entry that decides it (see :func:`decisions`): who decided, when, and why."""
    carried, stale = (resolution.carried, set(resolution.stale)) if resolution else ({}, set())
    own: dict[str, dict[str, Any]] = {}
    others: dict[str, dict[str, Any]] = {}
    for e in entries:
        if e.get("verdict") in ("confirm", "dismiss"):
            fid = raw_id(str(e["finding_id"]))
            if fid in stale:
                continue
            for target in carried.get(fid, (fid,)):
                (own if target == fid else others)[target] = e
    return {**{k: v for k, v in others.items() if k not in own}, **own}


def check_entries(entries: list[dict[str, Any]], path: Path) -> None:
    """Refuse verdict lines a render could not apply as written: a verdict that is none of :data:`KINDS`, or a time
    that is not one (a line written by hand and chained correctly was ignored, or ordered anyhow, without a word)."""
    for n, e in enumerate(entries, start=1):
        if e.get("verdict") not in KINDS:
            raise CaseError(f"line {n}: verdict {e.get('verdict')!r} is not one of {', '.join(KINDS)}", file=path,
                            fix="verdicts are recorded with forensics review; restore the ledger from the copy the team keeps")
        try:
            parse_utc(e.get("at"), "at")
        except ConfigError:
            raise CaseError(f"line {n}: at {e.get('at')!r} is not a time with a zone", file=path,
                            fix="verdicts are recorded with forensics review; restore the ledger from the copy the team keeps") from None


def raw_id(fid: str) -> str:
    """A finding id as the match wrote it, whether given so or as evidence.csv shows it (a cell: a formula start
    quoted, control characters escaped)."""
    raw = csvfile.uncell(fid)
    return fid if raw is None else raw


#: Marks a report manifest's verdicts record as holding the resolution below (written since verdicts record their
#: passage): a record without it is an earlier release's, which resolved nothing (verdicts counted by id alone).
RESOLUTION_FORMAT = 1


@dataclasses.dataclass(frozen=True)
class Resolution:
    """What became of the findings verdicts name, in a report whose findings may have new ids (:func:`resolve`).

    Finding ids are as the logs and the match hold them (not as CSV cells show them)."""

    #: finding id named by a verdict -> the findings that hold its passage now (itself among them when it is still
    #: there), where that is not just itself
    carried: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    stale: tuple[str, ...] = ()  # gone finding ids with no finding within their passage: their verdicts are out of effect
    #: finding id named by a verdict -> findings that share only part of its passage (left to an analyst)
    partial: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: findings a confirm was carried to because they hold all of its passage and more: on the list as confirmed,
    #: but no person looked at their other text (their packets do not say a person checked them)
    widened: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """For the manifest's record of the verdicts ledger (empty parts left out)."""
        return {"resolution": RESOLUTION_FORMAT,
                **({"carried": {k: list(v) for k, v in sorted(self.carried.items())}} if self.carried else {}),
                **({"stale": list(self.stale)} if self.stale else {}),
                **({"partial": {k: list(v) for k, v in sorted(self.partial.items())}} if self.partial else {}),
                **({"widened": list(self.widened)} if self.widened else {})}

    @classmethod
    def from_json(cls, record: Any) -> Resolution:
        """From the manifest's record of the verdicts ledger (anything malformed: nothing carried, nothing stale)."""
        record = record if isinstance(record, dict) else {}

        def ids(value: Any) -> tuple[str, ...]:
            return tuple(str(x) for x in value) if isinstance(value, list) else ()

        carried, stale, partial = record.get("carried"), record.get("stale"), record.get("partial")
        return cls({str(k): ids(v) for k, v in carried.items()} if isinstance(carried, dict) else {},
                   ids(stale), {str(k): ids(v) for k, v in partial.items()} if isinstance(partial, dict) else {},
                   ids(record.get("widened")))


def resolve(entries: list[dict[str, Any]], rows: list[dict[str, str]]) -> Resolution:
    """Where the passages of the findings ``entries`` (a verdicts ledger) decided are among ``rows`` (evidence.csv
    and review.csv rows, as written: cells).

    A verdict counts for its finding when it is still there and for every other finding that lies mostly inside its
    passage (same recipient request and customer, same source customer, at least half of the finding's span inside
    it): logs added since may have given the passage another id, or split it, and the old id may come back beside the
    new one. A confirm also counts for a finding that holds the whole confirmed passage (the text confirmed is in it).
    Any other finding that shares part of a decided passage is left to an analyst (``partial``, said in the summary):
    the verdict was not given on its other text. A verdict whose finding is gone and that is carried to no finding is
    out of effect (``stale``), whatever holds part of its passage, as is one recorded before verdicts kept their passage.
    """
    ids = {raw_id(r.get("finding_id", "")) for r in rows}
    by_place: dict[tuple[str, ...], list[dict[str, str]]] = {}
    for r in rows:  # compared only within one recipient request and source customer: linear in the rows
        by_place.setdefault(tuple(r.get(k, "") for k in PASSAGE_KEYS[:3]), []).append(r)
    passage_at: dict[str, dict[str, Any]] = {}
    for e in entries:  # the passage the decision was given on (an escalation changes no decision, nor its passage)
        if e.get("verdict") in ("confirm", "dismiss") and isinstance(e.get("passage"), dict):
            passage_at[raw_id(str(e["finding_id"]))] = e["passage"]
    carried: dict[str, tuple[str, ...]] = {}
    partial: dict[str, tuple[str, ...]] = {}
    stale: list[str] = []
    widened: set[str] = set()
    within: set[str] = set()  # findings mostly inside a decided passage: checked as far as a person checked it
    decided = decisions(entries)
    for fid, verdict in sorted(decided.items()):
        present = fid if fid in ids else None
        passage = passage_at.get(fid)
        near = by_place.get(tuple(str(passage.get(k, "")) for k in PASSAGE_KEYS[:3]), []) if passage else []
        same: list[str] = []
        part: list[str] = []
        for r in near:
            rid = raw_id(r.get("finding_id", ""))
            if rid == present or not passage_overlap(passage, r):
                continue
            inside = passage_overlap(passage, r, within=True)
            holds_all = verdict == "confirm" and passage is not None and _holds(r, passage)
            (same if inside or holds_all else part).append(rid)
            if holds_all and not inside:
                widened.add(rid)
            elif inside:
                within.add(rid)
        if same:
            carried[fid] = tuple(sorted([*([present] if present else []), *same]))
        elif present is None:  # gone, and what holds part of its passage (if any) is left to an analyst: no effect
            stale.append(fid)
        if part:
            partial[fid] = tuple(sorted(part))
    # A finding with a verdict of its own, or inside a decided passage, was looked at: never "widened".
    return Resolution(carried, tuple(stale), partial, tuple(sorted(widened - within - set(decided))))


def _holds(row: dict[str, str], passage: dict[str, Any]) -> bool:
    """Whether ``row``'s span in the response holds all of ``passage``'s."""
    try:
        start, end = _extent(row)
        return int(start) <= int(passage["recipient_start"]) and int(passage["recipient_end"]) <= int(end)
    except (KeyError, TypeError, ValueError, OverflowError):  # a ledger's Infinity is no place
        return False


def passage_overlap(passage: dict[str, Any] | None, row: dict[str, str], within: bool = False) -> int:
    """How many characters of the response ``row``'s passage shares with ``passage`` when it is the same passage (the
    same recipient request and customer, the same source customer, overlapping by at least half of the shorter span;
    ``within``: by at least half of ``row``'s, which then lies mostly inside ``passage``), else 0. Both as evidence.csv
    and review.csv write them (cells)."""
    if not passage or any(row.get(k, "") != str(passage.get(k, "")) for k in PASSAGE_KEYS[:3]):
        return 0
    try:  # the row's extent: a finding whose other passage holds new text is not inside a decided one
        a, b = int(passage["recipient_start"]), int(passage["recipient_end"])
        c, d = (int(x) for x in _extent(row))
    except (KeyError, TypeError, ValueError, OverflowError):  # a ledger's Infinity is no place
        return 0
    overlap = min(b, d) - max(a, c)
    least = d - c if within else min(b - a, d - c)
    return overlap if overlap > 0 and overlap * 2 >= least else 0


def passage_of(row: dict[str, str]) -> dict[str, str]:
    """The columns of an evidence.csv or review.csv row that place its passage (what a verdict or a notice records),
    its span the extent of all the passages it lists (``passages``), not its strongest alone."""
    start, end = _extent(row)
    return {**{k: row.get(k, "") for k in PASSAGE_KEYS[:3]}, "recipient_start": start, "recipient_end": end}


def _extent(row: dict[str, str]) -> tuple[str, str]:
    """The first and last character in the response of all a row's passages (``a:b=c:d;...``), as cells; its main
    span's when it lists none (or they do not read)."""
    spans = []
    for part in str(row.get("passages") or "").split(";"):
        recipient, _, _ = part.partition("=")
        a, _, b = recipient.partition(":")
        if a.strip().isdigit() and b.strip().isdigit():
            spans.append((int(a), int(b)))
    if not spans:
        return str(row.get("recipient_start", "")), str(row.get("recipient_end", ""))
    return str(min(a for a, _ in spans)), str(max(b for _, b in spans))


def resolution_notes(resolution: Resolution) -> list[str]:
    """What a render tells about verdicts whose passage moved (printed, and in the summary)."""
    notes = []
    if resolution.stale:
        notes.append(f"{len(resolution.stale)} verdict(s) are out of effect: their findings are gone from this report and no "
                     f"finding lies within their passage ({', '.join(resolution.stale[:5])}{', ...' if len(resolution.stale) > 5 else ''}); "
                     "look at those customers' findings again (summary.md, Analyst verdicts)")
    if resolution.partial:
        shared = sorted({f for fs in resolution.partial.values() for f in fs})
        notes.append(f"{len(shared)} finding(s) share only part of a passage an analyst decided ({', '.join(shared[:5])}"
                     f"{', ...' if len(shared) > 5 else ''}): the verdict is not theirs; look at them (summary.md, Analyst verdicts)")
    if resolution.carried:
        notes.append(f"{len(resolution.carried)} verdict(s) count for findings that hold their passage under other ids "
                     "(logs added since): summary.md, Analyst verdicts, lists them")
    return notes


def report_resolution(report_dir: Path) -> Resolution:
    """The resolution a report was rendered with (its manifest's record of verdicts.jsonl; an earlier release's,
    which resolved nothing, gives none)."""
    try:
        man = json.loads((Path(report_dir) / "manifest.json").read_text(encoding="utf-8"))
        return Resolution.from_json((man.get("ledgers") or {}).get(VERDICTS))
    except (OSError, ValueError, AttributeError):
        return Resolution()


def adjust_rows(evidence: list[dict[str, Any]], review: list[dict[str, Any]], decided: dict[str, str]) -> list[dict[str, Any]]:
    """Evidence rows as the verdicts leave them: dismissed ones out, confirmed candidates in (tier confirmed)."""
    kept = [r for r in evidence if decided.get(str(r["finding_id"])) != "dismiss"]
    have = {str(r["finding_id"]) for r in kept}
    added = [dict(r, tier="confirmed", tier_rule=CONFIRMED_RULE) for r in review
             if decided.get(str(r["finding_id"])) == "confirm" and str(r["finding_id"]) not in have]
    return kept + added


def summary_section(entries: list[dict[str, Any]], resolution: Resolution | None = None) -> tuple[str, list[Any]]:
    """The summary's "Analyst verdicts" section: every verdict, in the order recorded, and what became of the
    verdicts whose finding this report no longer has."""
    resolution = resolution or Resolution()
    rows = [[e["at"], safe.clean_text(str(e["analyst"]), 80), safe.clean_text(str(e["finding_id"]), 40), e["verdict"],
             safe.clean_text(str(e["reason"]), 300)] for e in entries]
    decided = decisions(entries, resolution)
    counts = {k: sum(1 for v in decided.values() if v == k) for k in ("confirm", "dismiss")}
    text = (f"Verdicts recorded in verdicts.jsonl: {len(entries)}. In effect: findings confirmed by an analyst "
            f"{counts['confirm']}, dismissed {counts['dismiss']}; a dismissed finding is left out of the list and the packets. "
            "An escalation changes nothing until a later confirm or dismiss.")
    parts: list[Any] = [text]
    if resolution.carried:
        parts.append(f"{len(resolution.carried)} verdict(s) name a passage that other findings hold now (logs added since "
                     "gave it another id, split it, or brought its old id back beside the new one); each counts for every "
                     "finding that lies mostly inside that passage (same recipient request and customer, same source "
                     "customer, at least half of the finding's span): "
                     + "; ".join(f"{old} (now {', '.join(new)})" for old, new in sorted(resolution.carried.items())) + ".")
    if resolution.partial:
        parts.append("NOT DECIDED: findings that share only part of a passage an analyst decided; the verdict is not "
                     "theirs: " + "; ".join(f"{', '.join(new)} (part of {old})" for old, new in sorted(resolution.partial.items()))
                     + ". Look at them and record verdicts.")
    if resolution.stale:
        parts.append(f"NOT IN EFFECT: {len(resolution.stale)} verdict(s) name a finding this report no longer has, with "
                     "no finding within its passage: " + ", ".join(resolution.stale) + ". Look at the findings of their "
                     "customers again and record new verdicts.")
    parts.append(("table", ["recorded (UTC)", "analyst", "finding", "verdict", "reason"], rows))
    return ("Analyst verdicts", parts)
