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
(:func:`resolve`), and one whose passage no finding holds is out of effect, and said to be.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

from forensics import csvfile
from forensics.config import iso
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
          file: Path | None = None, line: int | None = None) -> dict[str, Any]:
    """One verdict checked against the report (``file``/``line``: where an imported one came from)."""
    where = f"finding {finding_id!r}" if finding_id else "a verdict"
    if verdict not in KINDS:
        raise ConfigError(f"{where}: verdict {verdict!r} is not one of {', '.join(KINDS)}", file=file, line=line,
                          fix="use confirm, dismiss or escalate")
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
    """Verdicts from a CSV (finding_id, verdict, reason, analyst), every row checked first."""
    return [check(report_dir, r.get("finding_id") or "", (r.get("verdict") or "").strip(), r.get("reason") or "",
                  r.get("analyst") or "", file=Path(path), line=line)
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
    """Finding id -> ``confirm`` or ``dismiss``: the latest such verdict on it. With ``resolution``, a verdict on a
    finding that is gone counts for the finding holding its passage now, and one whose passage none holds not at all."""
    carried, stale = (resolution.carried, set(resolution.stale)) if resolution else ({}, set())
    out: dict[str, str] = {}
    for e in entries:
        if e.get("verdict") in ("confirm", "dismiss"):
            fid = str(e["finding_id"])
            if fid in stale:
                continue
            out[carried.get(fid, fid)] = str(e["verdict"])
    return out


@dataclasses.dataclass(frozen=True)
class Resolution:
    """What became of the findings verdicts name, in a report whose findings may have new ids (:func:`resolve`)."""

    carried: dict[str, str] = dataclasses.field(default_factory=dict)  # gone finding id -> the one holding its passage
    stale: tuple[str, ...] = ()  # gone finding ids whose passage no finding holds: their verdicts are out of effect

    def to_json(self) -> dict[str, Any]:
        """For the manifest's record of the verdicts ledger (empty parts left out)."""
        return {**({"carried": dict(sorted(self.carried.items()))} if self.carried else {}),
                **({"stale": list(self.stale)} if self.stale else {})}

    @classmethod
    def from_json(cls, record: Any) -> Resolution:
        """From the manifest's record of the verdicts ledger (anything malformed: nothing carried, nothing stale)."""
        record = record if isinstance(record, dict) else {}
        carried, stale = record.get("carried"), record.get("stale")
        return cls({str(k): str(v) for k, v in carried.items()} if isinstance(carried, dict) else {},
                   tuple(str(x) for x in stale) if isinstance(stale, list) else ())


def resolve(entries: list[dict[str, Any]], rows: list[dict[str, str]]) -> Resolution:
    """Where the findings named by ``entries`` (a verdicts ledger) are among ``rows`` (evidence.csv and review.csv rows).

    A decided finding id no row has is carried to the row of the same recipient request and customer and the same
    source customer whose passage overlaps the recorded one by at least half of the shorter span (the largest
    overlap; then the lowest id), else stale. Verdicts recorded before passages were (no ``passage``) go stale.
    """
    ids = {r.get("finding_id", "") for r in rows}
    passage_of: dict[str, dict[str, Any]] = {}
    for e in entries:
        if isinstance(e.get("passage"), dict):
            passage_of[str(e["finding_id"])] = e["passage"]
    carried: dict[str, str] = {}
    stale: list[str] = []
    for fid in sorted(decisions(entries)):
        if fid in ids or csvfile.cell(fid) in ids:
            continue
        successor = _successor(passage_of.get(fid), rows)
        if successor is None:
            stale.append(fid)
        else:
            carried[fid] = successor
    return Resolution(carried, tuple(stale))


def passage_overlap(passage: dict[str, Any] | None, row: dict[str, str]) -> int:
    """How many characters of the response ``row``'s passage shares with ``passage`` when it is the same passage (the
    same recipient request and customer, the same source customer, overlapping by at least half of the shorter
    span), else 0. Both as evidence.csv and review.csv write them (cells)."""
    if not passage or any(row.get(k, "") != str(passage.get(k, "")) for k in PASSAGE_KEYS[:3]):
        return 0
    try:
        a, b = int(passage["recipient_start"]), int(passage["recipient_end"])
        c, d = int(row["recipient_start"]), int(row["recipient_end"])
    except (KeyError, TypeError, ValueError):
        return 0
    overlap = min(b, d) - max(a, c)
    return overlap if overlap > 0 and overlap * 2 >= min(b - a, d - c) else 0


def passage_of(row: dict[str, str]) -> dict[str, str]:
    """The columns of an evidence.csv or review.csv row that place its passage (what a verdict or a notice records)."""
    return {k: row.get(k, "") for k in PASSAGE_KEYS}


def _successor(passage: dict[str, Any] | None, rows: list[dict[str, str]]) -> str | None:
    best: tuple[int, str] | None = None
    for r in rows:
        overlap = passage_overlap(passage, r)
        if overlap:
            candidate = (-overlap, r.get("finding_id", ""))
            best = candidate if best is None or candidate < best else best
    return best[1] if best else None


def resolution_notes(resolution: Resolution) -> list[str]:
    """What a render tells about verdicts whose finding it no longer has (printed, and in the summary)."""
    notes = []
    if resolution.stale:
        notes.append(f"{len(resolution.stale)} verdict(s) are out of effect: their findings are gone from this report and no "
                     f"finding holds their passage ({', '.join(resolution.stale[:5])}{', ...' if len(resolution.stale) > 5 else ''}); "
                     "look at those customers' findings again (summary.md, Analyst verdicts)")
    if resolution.carried:
        notes.append(f"{len(resolution.carried)} verdict(s) now count for the finding that holds their passage under a new id "
                     "(logs added since): summary.md, Analyst verdicts, lists them")
    return notes


def report_resolution(report_dir: Path) -> Resolution:
    """The resolution a report was rendered with (its manifest's record of verdicts.jsonl)."""
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
        parts.append(f"{len(resolution.carried)} verdict(s) name a finding this report no longer has (logs added since gave "
                     "its passage another id); each counts for the finding that holds the same passage now (same recipient "
                     "request and customer, same source customer, overlapping span): "
                     + "; ".join(f"{old} (now {new})" for old, new in sorted(resolution.carried.items())) + ".")
    if resolution.stale:
        parts.append(f"NOT IN EFFECT: {len(resolution.stale)} verdict(s) name a finding this report no longer has, whose "
                     "passage no finding holds: " + ", ".join(resolution.stale) + ". Look at the findings of their "
                     "customers again and record new verdicts.")
    parts.append(("table", ["recorded (UTC)", "analyst", "finding", "verdict", "reason"], rows))
    return ("Analyst verdicts", parts)
