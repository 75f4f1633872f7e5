"""Analyst verdicts on findings: record them, and apply them when a report is rendered.

A verdict is ``confirm``, ``dismiss`` or ``escalate`` on one finding id of the report's
evidence.csv or review.csv. The decision on a finding is its latest ``confirm`` or ``dismiss``
(``escalate`` is recorded and changes nothing). At render time a dismissed finding is dropped
(its customers stay on the list only if something else holds them) and a confirmed review
candidate becomes a finding of tier ``confirmed`` whose tier rule names the verdict.
"""

from __future__ import annotations

import csv
import datetime as dt
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


def _finding_ids(report_dir: Path) -> dict[str, str]:
    """Finding id -> the report file that holds it (evidence.csv first)."""
    out: dict[str, str] = {}
    for name in ("review.csv", "evidence.csv"):
        path = report_dir / name
        if not path.is_file():
            continue
        with open(path, encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                if row.get("finding_id"):
                    out[row["finding_id"]] = name
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
    known = _finding_ids(report_dir)
    fid = finding_id.strip()
    if fid not in known and csvfile.cell(fid) not in known:
        raise ConfigError(f"finding id {fid!r} is in neither evidence.csv nor review.csv of this report", file=file or report_dir,
                          line=line, fix="copy the finding_id from the report's evidence.csv or review.csv")
    return {"finding_id": fid, "verdict": verdict, "reason": _text(reason, "reason", where, file, line),
            "analyst": _text(analyst, "analyst", where, file, line),
            "source": known.get(fid, known.get(csvfile.cell(fid), ""))}


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


def decisions(entries: list[dict[str, Any]]) -> dict[str, str]:
    """Finding id -> ``confirm`` or ``dismiss``: the latest such verdict on it."""
    out: dict[str, str] = {}
    for e in entries:
        if e.get("verdict") in ("confirm", "dismiss"):
            out[str(e["finding_id"])] = str(e["verdict"])
    return out


def adjust_rows(evidence: list[dict[str, Any]], review: list[dict[str, Any]], decided: dict[str, str]) -> list[dict[str, Any]]:
    """Evidence rows as the verdicts leave them: dismissed ones out, confirmed candidates in (tier confirmed)."""
    kept = [r for r in evidence if decided.get(str(r["finding_id"])) != "dismiss"]
    have = {str(r["finding_id"]) for r in kept}
    added = [dict(r, tier="confirmed", tier_rule=CONFIRMED_RULE) for r in review
             if decided.get(str(r["finding_id"])) == "confirm" and str(r["finding_id"]) not in have]
    return kept + added


def summary_section(entries: list[dict[str, Any]]) -> tuple[str, list[Any]]:
    """The summary's "Analyst verdicts" section: every verdict, in the order recorded."""
    rows = [[e["at"], safe.clean_text(str(e["analyst"]), 80), safe.clean_text(str(e["finding_id"]), 40), e["verdict"],
             safe.clean_text(str(e["reason"]), 300)] for e in entries]
    decided = decisions(entries)
    counts = {k: sum(1 for v in decided.values() if v == k) for k in ("confirm", "dismiss")}
    text = (f"Verdicts recorded in verdicts.jsonl: {len(entries)}. In effect: findings confirmed by an analyst "
            f"{counts['confirm']}, dismissed {counts['dismiss']}; a dismissed finding is left out of the list and the packets. "
            "An escalation changes nothing until a later confirm or dismiss.")
    return ("Analyst verdicts", [text, ("table", ["recorded (UTC)", "analyst", "finding", "verdict", "reason"], rows)])
