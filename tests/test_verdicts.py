"""Analyst verdicts (issue 15, items 2 and 4): recorded hash-chained, honoured by the next render,
listed in the summary, followed by the packets, and held to by ``forensics verify``."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import io
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from test_report_case import PROMPTS, make_case

from forensics import schema
from forensics.case import write_table
from forensics.cli import main
from forensics.errors import CaseError, ConfigError
from forensics.report import report, safe, verify
from forensics.review import chain, ledger, verdicts

REVIEW_TEXT = "freezer unit nine"  # in umbrella's prompt and in initech's response below


def _notifications(rd: Path) -> dict[tuple[str, str], dict[str, str]]:
    rows = csv.DictReader(io.StringIO((rd / "notifications.csv").read_text(encoding="utf-8")))
    return {(r["tenant_id"], r["role"]): r for r in rows}


def _with_review(case: Path) -> None:
    """Add one review candidate: umbrella's prompt text in initech's (suspect) response."""
    ex = pa.parquet.read_table(case / "exchanges.parquet").to_pylist()
    for r in ex:
        if r["request_id"] == "r-initech-1":
            r["response_text"] = "Obrigado. The batches in freezer unit nine are listed. Nothing else."
    write_table(case / "exchanges.parquet", pa.Table.from_pylist(ex, schema=schema.EXCHANGES), schema.EXCHANGES)
    response = next(r["response_text"] for r in ex if r["request_id"] == "r-initech-1")
    rs, ss = response.index(REVIEW_TEXT), PROMPTS["umbrella"].index(REVIEW_TEXT)
    row = {"finding_id": "f-review-1", "recipient_request_id": "r-initech-1", "recipient_tenant_id": "initech",
           "source_request_id": "r-umbrella-1", "source_tenant_id": "umbrella", "source_kind": "prompt",
           "relation": "cross_tenant", "tier": None, "tier_rule": None, "score": 80.0, "matched_tokens": 4,
           "longest_run": 4, "recipient_start": rs, "recipient_end": rs + len(REVIEW_TEXT), "source_start": ss,
           "source_end": ss + len(REVIEW_TEXT), "rarity": 0.4, "why_not_notified": "too short to tell"}
    write_table(case / "review.parquet", pa.Table.from_pylist([row], schema=schema.REVIEW), schema.REVIEW)
    cols = list(schema.REVIEW.names)
    safe.write_bytes(case / "review.csv", safe.csv_bytes(cols, [[row.get(c) for c in cols]]))


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, object, Path]:
    case, cfg, _ = make_case(tmp_path)
    _with_review(case)
    rd = report(case, cfg, tmp_path / "out").report_dir
    return case, cfg, rd


def _cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(args)
    return int(exc.value.code)


def _review(rd: Path, finding: str, verdict: str, reason: str = "checked by hand", analyst: str = "ana") -> int:
    return _cli(["review", str(rd), "--finding", finding, "--verdict", verdict, "--reason", reason, "--analyst", analyst])


def test_verdicts_are_hash_chained_private_lines(built: tuple[Path, object, Path]) -> None:
    _, _, rd = built
    assert _review(rd, "f-0001", "escalate", "counsel to decide") == 0
    assert _review(rd, "f-review-1", "confirm") == 0
    path = rd / "verdicts.jsonl"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3
    first, second = json.loads(lines[0]), json.loads(lines[1])
    assert first["prev"] == chain.genesis("verdicts.jsonl") and first["seq"] == 1
    assert second["prev"] == hashlib.sha256(lines[0]).hexdigest()
    assert (first["finding_id"], first["verdict"], first["analyst"], first["reason"]) == ("f-0001", "escalate", "ana", "counsel to decide")
    assert first["at"].endswith("Z") and dt.datetime.fromisoformat(first["at"].replace("Z", "+00:00")).tzinfo is not None
    assert second["source"] == "review.csv"


def test_unknown_finding_id_is_a_clear_error(built: tuple[Path, object, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, _, rd = built
    capsys.readouterr()
    assert _review(rd, "f-9999", "confirm") == 2
    msg = capsys.readouterr().err
    assert "f-9999" in msg and "evidence.csv nor review.csv" in msg and "Traceback" not in msg
    assert _review(rd, "f-0001", "maybe") == 2
    assert "confirm, dismiss or escalate" in capsys.readouterr().err
    assert not (rd / "verdicts.jsonl").exists()


def test_import_checks_every_row_before_appending_any(built: tuple[Path, object, Path], tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _, _, rd = built
    bad = tmp_path / "v.csv"
    bad.write_text("finding_id,verdict,reason,analyst\nf-0001,dismiss,noise,ana\nf-0002,dismiss,,ana\n", encoding="utf-8")
    capsys.readouterr()
    assert _cli(["review", str(rd), "--import", str(bad)]) == 2
    assert f"{bad}:3" in capsys.readouterr().err
    assert not (rd / "verdicts.jsonl").exists()
    good = tmp_path / "w.csv"
    good.write_text("finding_id,verdict,reason,analyst\nf-0001,dismiss,noise,ana\nf-0002,confirm,\"verbatim, rare\",bo\n")
    assert _cli(["review", str(rd), "--import", str(good)]) == 0
    entries = chain.read_valid(rd / "verdicts.jsonl").entries
    assert [(e["finding_id"], e["verdict"], e["reason"]) for e in entries] == [("f-0001", "dismiss", "noise"),
                                                                               ("f-0002", "confirm", "verbatim, rare")]


def test_dismissed_finding_leaves_the_list_only_when_nothing_else_holds_the_customer(built: tuple[Path, object, Path]) -> None:
    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template text")
    rd = report(case, cfg, rd.parent).report_dir
    rows = _notifications(rd)
    assert ("acme", "exposed") in rows  # f-0002 still holds acme
    assert rows[("acme", "exposed")]["tier"] == "probable" and rows[("acme", "exposed")]["n_findings"] == "1"
    assert rows[("globex", "recipient")]["tier"] == "possible"  # its suspect response still holds globex
    _review(rd, "f-0002", "dismiss", "template text")
    rd = report(case, cfg, rd.parent).report_dir
    rows = _notifications(rd)
    assert ("acme", "exposed") not in rows
    assert not (rd / "packets" / "acme").exists()
    for p in (rd / "packets").rglob("*"):  # no packet cites a dismissed finding
        if p.is_file():
            assert "Project Bluefin" not in p.read_text(encoding="utf-8")
    assert verify(rd).ok


def test_confirmed_review_candidate_joins_the_list_and_its_packet_says_a_person_confirmed_it(
        built: tuple[Path, object, Path]) -> None:
    case, cfg, rd = built
    assert ("umbrella", "exposed") not in _notifications(rd)
    assert _review(rd, "f-review-1", "confirm", "rare batch wording") == 0
    rd = report(case, cfg, rd.parent).report_dir
    rows = _notifications(rd)
    assert rows[("umbrella", "exposed")]["tier"] == "confirmed"
    assert rows[("initech", "recipient")]["tier"] == "confirmed"
    packet = json.loads((rd / rows[("umbrella", "exposed")]["packet"] / "notice.json").read_text(encoding="utf-8"))
    spans = [s for r in packet["exposed"]["requests"] for s in r["spans"]]
    assert spans and all(s["confirmed_by_person"] is True for s in spans)
    assert REVIEW_TEXT in spans[0]["preview"]
    assert "A person on the incident team checked this passage and confirmed it." in (
        rd / rows[("umbrella", "exposed")]["packet"] / "notice.md").read_text(encoding="utf-8")
    # A finding nobody confirmed says nothing of the kind.
    acme = json.loads((rd / rows[("acme", "exposed")]["packet"] / "notice.json").read_text(encoding="utf-8"))
    assert all("confirmed_by_person" not in s for r in acme["exposed"]["requests"] for s in r["spans"])
    assert verify(rd).ok


def _csv_rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))


def test_the_reports_evidence_and_review_files_say_what_the_analysts_decided(built: tuple[Path, object, Path]) -> None:
    """A dismissed finding stayed in evidence.csv as a confirmed finding, and a confirmed candidate in review.csv with
    no tier, while notifications.csv followed the verdicts: the list could not be rebuilt from the files. Now the
    dismissed one is in review.csv saying why, the confirmed one in evidence.csv, and verify agrees."""
    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template text")
    _review(rd, "f-review-1", "confirm", "rare batch wording")
    rd = report(case, cfg, rd.parent).report_dir
    evidence = {r["finding_id"]: r for r in _csv_rows(rd / "evidence.csv")}
    review = {r["finding_id"]: r for r in _csv_rows(rd / "review.csv")}
    assert "f-0001" not in evidence and review["f-0001"]["why_not_notified"] == "dismissed by an analyst (verdicts.jsonl)"
    assert "f-review-1" not in review
    assert (evidence["f-review-1"]["tier"], evidence["f-review-1"]["tier_rule"]) == ("confirmed", verdicts.CONFIRMED_RULE)
    listed = {r["source_tenant_id"] for r in evidence.values() if r["tier"] and r["relation"] == "cross_tenant"}
    exposed = {t for (t, role) in _notifications(rd) if role == "exposed"}
    assert exposed <= listed | {r["source_tenant_id"] for r in evidence.values()}
    order = [(r["recipient_request_id"], r["source_request_id"]) for r in _csv_rows(rd / "evidence.csv")]
    assert order == sorted(order)
    assert verify(rd).ok
    again = report(case, cfg, rd.parent).report_dir  # re-rendered: the same bytes
    assert (again / "evidence.csv").read_bytes() == (rd / "evidence.csv").read_bytes()


def test_escalate_is_recorded_and_changes_nothing_and_the_summary_lists_every_verdict(built: tuple[Path, object, Path]) -> None:
    case, cfg, rd = built
    before = (rd / "notifications.csv").read_bytes()
    _review(rd, "f-0002", "escalate", "ask counsel")
    _review(rd, "f-review-1", "dismiss", "too short", analyst="bo")
    rd = report(case, cfg, rd.parent).report_dir
    assert (rd / "notifications.csv").read_bytes() == before
    md = (rd / "summary.md").read_text(encoding="utf-8")
    assert "## Analyst verdicts" in md
    for text in ("f-0002 | escalate | ask counsel", "f-review-1 | dismiss | too short", "| bo |"):
        assert text in md
    assert "ask counsel" in (rd / "summary.html").read_text(encoding="utf-8")


def test_rerender_carries_the_verdicts_byte_for_byte_and_is_deterministic(built: tuple[Path, object, Path],
                                                                          tmp_path: Path) -> None:
    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template")
    data = (rd / "verdicts.jsonl").read_bytes()
    rd = report(case, cfg, rd.parent).report_dir
    first = {p.relative_to(rd).as_posix(): p.read_bytes() for p in sorted(rd.rglob("*")) if p.is_file()}
    rd = report(case, cfg, rd.parent).report_dir
    second = {p.relative_to(rd).as_posix(): p.read_bytes() for p in sorted(rd.rglob("*")) if p.is_file()}
    assert first == second and first["verdicts.jsonl"] == data
    assert stat.S_IMODE((rd / "verdicts.jsonl").stat().st_mode) == 0o600
    man = json.loads((rd / "manifest.json").read_text(encoding="utf-8"))
    assert man["ledgers"]["verdicts.jsonl"] == {"entries": 1, "head": hashlib.sha256(data.rstrip(b"\n")).hexdigest(),
                                                "resolution": 1}  # nothing carried, nothing stale
    assert "verdicts.jsonl" not in {o["path"] for o in man["outputs"]}


def test_no_verdict_file_no_change(tmp_path: Path) -> None:
    case, cfg, _ = make_case(tmp_path)
    rd = report(case, cfg, tmp_path / "out").report_dir
    man = json.loads((rd / "manifest.json").read_text(encoding="utf-8"))
    assert "ledgers" not in man and "Analyst verdicts" not in (rd / "summary.md").read_text(encoding="utf-8")


def test_appending_after_render_keeps_verify_green(built: tuple[Path, object, Path], capsys: pytest.CaptureFixture[str]) -> None:
    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template")  # before any render with verdicts: a first verdict
    assert verify(rd).ok
    rd = report(case, cfg, rd.parent).report_dir
    _review(rd, "f-0002", "escalate", "later")
    assert verify(rd).ok


@pytest.mark.parametrize("tamper", ["edit", "reorder", "drop_first", "drop_last"])
def test_verify_fails_on_a_tampered_chain(built: tuple[Path, object, Path], tamper: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    case, cfg, rd = built
    for fid in ("f-0001", "f-0002", "f-review-1"):
        _review(rd, fid, "escalate", f"look at {fid}")
    rd = report(case, cfg, rd.parent).report_dir
    path = rd / "verdicts.jsonl"
    lines = path.read_bytes().split(b"\n")[:-1]
    if tamper == "edit":
        lines[2] = lines[2].replace(b"look at", b"ignore")
    elif tamper == "reorder":
        lines[0], lines[1] = lines[1], lines[0]
    elif tamper == "drop_first":
        lines = lines[1:]
    else:
        lines = lines[:-1]
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert any(d.kind == "ledger" and d.path == "verdicts.jsonl" for d in verify(rd).drift)
    capsys.readouterr()
    assert _cli(["verify", str(rd)]) == 1
    assert "drift: ledger verdicts.jsonl" in capsys.readouterr().out
    # Nothing is rendered from, or appended to, edited decisions.
    with pytest.raises(CaseError, match="verdicts.jsonl"):
        report(case, cfg, rd.parent)
    # A dropped or edited last line leaves a valid chain: the manifest's record of it tells.
    with pytest.raises(CaseError, match="verdicts.jsonl"):
        verdicts.record(rd, [verdicts.check(rd, "f-0001", "confirm", "x", "y")])


def test_hostile_reason_is_inert_in_the_summary(built: tuple[Path, object, Path]) -> None:
    case, cfg, rd = built
    _review(rd, "f-0001", "escalate", "<script>alert(1)</script>\x1b[31m | pipe")
    rd = report(case, cfg, rd.parent).report_dir
    html = (rd / "summary.html").read_text(encoding="utf-8")
    assert "<script>alert(1)" not in html and "\x1b" not in html
    assert "\x1b" not in (rd / "summary.md").read_text(encoding="utf-8")


def test_unknown_report_folder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises((CaseError, ConfigError)):
        verdicts.record(tmp_path, [{"finding_id": "f", "verdict": "confirm", "reason": "r", "analyst": "a"}])
    assert not (tmp_path / "verdicts.jsonl").exists() and not any(os.scandir(tmp_path))


def test_run_carries_verdicts_and_rerun_verifies_with_them(tmp_path: Path) -> None:
    from test_run import write_logs

    from forensics import api

    logs = write_logs(tmp_path / "logs")
    rd = api.run(logs, tmp_path / "out").report.report_dir
    fid = next(csv.DictReader(io.StringIO((rd / "evidence.csv").read_text(encoding="utf-8"))))["finding_id"]
    assert ("acme", "exposed") in _notifications(rd)
    _review(rd, fid, "dismiss", "the secret is a public test fixture")
    rd = api.run(logs, tmp_path / "out").report.report_dir
    assert ("acme", "exposed") not in _notifications(rd)
    assert ("globex", "recipient") in _notifications(rd)  # its suspect response still holds it
    _review(rd, fid, "escalate", "after the render")  # not applied, no drift
    result = verify(rd, rerun=True)
    assert result.ok, [str(d) for d in result.drift]


def test_an_append_waits_a_while_then_says_who_holds_the_lock(built: tuple[Path, object, Path],
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics.case import folder_lock

    _, _, rd = built
    monkeypatch.setattr(chain, "LEDGER_LOCK_WAIT", 0.2)
    with folder_lock(chain.lock_path(rd), "a rebuild"):
        capsys.readouterr()
        assert _review(rd, "f-0001", "confirm") == 2
        assert "in use by another forensics run" in capsys.readouterr().err
    assert not (rd / "verdicts.jsonl").exists()


def test_a_report_given_as_the_working_folder_takes_its_own_lock(built: tuple[Path, object, Path],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, rd = built
    monkeypatch.chdir(rd)
    assert _review(Path("."), "f-0001", "confirm") == 0
    assert (rd.parent / f".{rd.name}+lock").is_file() and not (rd / ".+lock").exists()
    assert len(chain.read_valid(rd / "verdicts.jsonl").entries) == 1


def test_the_newest_verdict_rewritten_with_its_hash_shows_in_the_head_recorded_when_it_was_made(
        built: tuple[Path, object, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A verdict recorded after the last render is anchored by no later line and not by the manifest: its line,
    rewritten ("escalate" to "dismiss") with a fresh prev chain, verified OK. Recording it now prints the chain's
    head, and verify prints the head it finds, so the edit shows as two different heads."""
    _, _, rd = built
    capsys.readouterr()
    assert _review(rd, "f-0001", "dismiss", "template text") == 0
    assert _review(rd, "f-0002", "escalate", "counsel to decide") == 0
    recorded = re.findall(r"verdicts\.jsonl: 2 line\(s\), last line SHA-256 ([0-9a-f]{64})", capsys.readouterr().out)
    assert len(recorded) == 1
    path = rd / "verdicts.jsonl"
    first, second = path.read_bytes().splitlines()
    path.write_bytes(first + b"\n" + chain.encode(json.loads(second) | {"verdict": "dismiss"}) + b"\n")
    assert _cli(["verify", str(rd)]) == 0  # the chain itself still holds: nothing anchors its newest line
    shown = re.findall(r"verdicts\.jsonl: 2 line\(s\), last line SHA-256 ([0-9a-f]{64})", capsys.readouterr().out)
    assert shown and shown[0] != recorded[0]


def _rekey(case: Path, old: str, new: str, source_request: str) -> None:
    """The match as logs added later leave it: finding ``old``'s passage cited from another copy of the source's
    text, under the id ``new`` (a finding's id names its source request)."""
    rows = pa.parquet.read_table(case / "evidence.parquet").to_pylist()
    for r in rows:
        if r["finding_id"] == old:
            r["finding_id"], r["source_request_id"] = new, source_request
    write_table(case / "evidence.parquet", pa.Table.from_pylist(rows, schema=schema.EVIDENCE), schema.EVIDENCE)


def test_a_verdict_follows_its_passage_to_the_finding_that_holds_it_after_new_logs(built: tuple[Path, object, Path]) -> None:
    # Logs added later gave the dismissed passage a new finding id: the dismissal was lost, the customer named
    # again, and the summary still counted it "in effect".
    case, cfg, rd = built
    _review(rd, "f-0002", "dismiss", "template text")
    _review(rd, "f-0001", "dismiss", "template text")
    _rekey(case, "f-0001", "f-0009", "r-acme-0")
    rd = report(case, cfg, rd.parent).report_dir
    rows = _notifications(rd)
    assert ("acme", "exposed") not in rows  # both of acme's passages stay dismissed
    evidence = (rd / "evidence.csv").read_text(encoding="utf-8")
    assert "f-0009" not in evidence and "f-0009" in (rd / "review.csv").read_text(encoding="utf-8")
    summary_md = (rd / "summary.md").read_text(encoding="utf-8")
    assert "In effect: findings confirmed by an analyst 0, dismissed 2" in summary_md and "f-0001 (now f-0009)" in summary_md
    manifest = json.loads((rd / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["ledgers"]["verdicts.jsonl"]["carried"] == {"f-0001": ["f-0009"]}
    assert verify(rd).ok


def test_a_verdict_whose_passage_no_finding_holds_is_said_to_be_out_of_effect(built: tuple[Path, object, Path]) -> None:
    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template text")
    rows = pa.parquet.read_table(case / "evidence.parquet").to_pylist()
    write_table(case / "evidence.parquet", pa.Table.from_pylist([r for r in rows if r["finding_id"] != "f-0001"],
                                                                 schema=schema.EVIDENCE), schema.EVIDENCE)
    result = report(case, cfg, rd.parent)
    rd = result.report_dir
    assert any("1 verdict(s) are out of effect" in n and "f-0001" in n for n in result.notes)  # printed by report and run
    summary_md = (rd / "summary.md").read_text(encoding="utf-8")
    assert "In effect: findings confirmed by an analyst 0, dismissed 0" in summary_md
    assert "NOT IN EFFECT: 1 verdict(s)" in summary_md and "f-0001" in summary_md
    assert json.loads((rd / "manifest.json").read_text(encoding="utf-8"))["ledgers"]["verdicts.jsonl"]["stale"] == ["f-0001"]
    assert verify(rd).ok


def test_a_verdict_records_the_passage_it_was_given_on(built: tuple[Path, object, Path]) -> None:
    _, _, rd = built
    _review(rd, "f-0001", "dismiss", "template text")
    [entry] = chain.read_valid(rd / "verdicts.jsonl").entries
    assert entry["passage"]["recipient_request_id"] == "r-globex-1" and entry["passage"]["source_tenant_id"] == "acme"
    assert int(entry["passage"]["recipient_end"]) > int(entry["passage"]["recipient_start"])


def test_review_of_a_folder_that_is_no_report_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It said the finding id was in neither evidence.csv nor review.csv "of this report".
    assert _review(tmp_path, "f-0001", "dismiss") == 2
    assert "not a report folder (no manifest.json)" in capsys.readouterr().err


def _dismissed_then_rekeyed(built: tuple[Path, object, Path]) -> tuple[Path, dict[str, Any]]:
    """A report whose dismissal of f-0001 was carried to f-0009 (logs added gave the passage that id), and its manifest."""
    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template text")
    _rekey(case, "f-0001", "f-0009", "r-acme-0")
    rd = report(case, cfg, rd.parent).report_dir
    return rd, json.loads((rd / "manifest.json").read_text(encoding="utf-8"))


def _rewrite_manifest(rd: Path, man: dict[str, Any]) -> None:
    (rd / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _references(rd: Path) -> dict[str, str]:
    rows = csv.DictReader(io.StringIO((rd / "references.csv").read_text(encoding="utf-8")))
    return {r["finding_id"]: r["reference"] for r in rows}


def test_references_in_notices_keep_naming_their_findings_across_renders(built: tuple[Path, object, Path]) -> None:
    # The key was the evidence itself: a verdict on another customer's finding, or a log added, re-keyed every
    # reference, and a customer quoting one from a notice already sent could not be traced.
    case, cfg, rd = built
    before = _references(rd)
    _review(rd, "f-0002", "dismiss", "template text")
    rd = report(case, cfg, rd.parent).report_dir
    _rekey(case, "f-0003", "f-0033", "r-umbrella-0")  # the match changed too (logs added)
    rd = report(case, cfg, rd.parent).report_dir
    after = _references(rd)
    assert after["f-0001"] == before["f-0001"] and "f-0002" not in after
    key = json.loads((rd / "manifest.json").read_text(encoding="utf-8"))["references_key"]
    assert len(key) == 64 and verify(rd).ok


def test_the_notebook_reads_evidence_and_review_as_the_verdicts_leave_them(built: tuple[Path, object, Path]) -> None:
    # open_case(report).evidence was the match's table: a dismissed customer still grouped as exposed, a confirmed
    # candidate missing, beside a list that said otherwise. A report written by `forensics report` (no case/ inside)
    # could not be opened at all.
    from forensics.notebook import open_case

    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template text")
    _review(rd, "f-review-1", "confirm", "verbatim")
    rd = report(case, cfg, rd.parent).report_dir
    with pytest.raises(CaseError, match="a report folder with no case/ inside"):
        open_case(rd)
    nb = open_case(rd, case=case)
    evidence = nb.evidence.collect()
    assert "f-0001" not in evidence["finding_id"].to_list()
    confirmed = evidence.filter(evidence["finding_id"] == "f-review-1")
    assert confirmed["tier"].to_list() == ["confirmed"]
    review = nb.review.collect()
    assert "f-0001" in review["finding_id"].to_list() and "f-review-1" not in review["finding_id"].to_list()
    listed = {r["finding_id"] for r in csv.DictReader(io.StringIO((rd / "evidence.csv").read_text(encoding="utf-8")))}
    assert set(evidence["finding_id"].to_list()) == listed  # the notebook and the report's files agree


def test_a_report_written_before_the_key_was_recorded_keeps_its_references(built: tuple[Path, object, Path]) -> None:
    # A report of an earlier release records no references_key: its references were keyed with its evidence.csv.
    case, cfg, rd = built
    before = _references(rd)
    man = json.loads((rd / "manifest.json").read_text(encoding="utf-8"))
    del man["references_key"]
    (rd / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    _review(rd, "f-0002", "dismiss", "template text")
    rd = report(case, cfg, rd.parent).report_dir
    assert _references(rd)["f-0001"] == before["f-0001"]


def _replace_finding(case: Path, old: str, *new: dict[str, Any]) -> None:
    """The match with finding ``old`` replaced by ``new`` rows (each a copy of it with the given changes)."""
    rows = pa.parquet.read_table(case / "evidence.parquet").to_pylist()
    base = next(r for r in rows if r["finding_id"] == old)
    rows = [r for r in rows if r["finding_id"] != old] + [dict(base, **changes) for changes in new]
    write_table(case / "evidence.parquet", pa.Table.from_pylist(rows, schema=schema.EVIDENCE), schema.EVIDENCE)


def test_a_dismissed_passage_stays_dismissed_when_it_splits_or_its_old_id_comes_back(built: tuple[Path, object, Path]) -> None:
    # Split in two findings, the dismissal went to one half and the other named the customer again; with the old id
    # back beside the new one, the new one lost the dismissal. Both put acme back on the list without a word.
    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template text")
    _review(rd, "f-0002", "dismiss", "template text")
    rd = report(case, cfg, rd.parent).report_dir
    start = next(r for r in pa.parquet.read_table(case / "evidence.parquet").to_pylist() if r["finding_id"] == "f-0001")
    a, b = start["recipient_start"], start["recipient_end"]
    _replace_finding(case, "f-0001", {"finding_id": "f-00a1", "source_request_id": "r-acme-7", "recipient_end": (a + b) // 2},
                     {"finding_id": "f-00b1", "source_request_id": "r-acme-8", "recipient_start": (a + b) // 2})
    rd = report(case, cfg, rd.parent).report_dir
    assert ("acme", "exposed") not in _notifications(rd)
    carried = json.loads((rd / "manifest.json").read_text(encoding="utf-8"))["ledgers"]["verdicts.jsonl"]["carried"]
    assert carried == {"f-0001": ["f-00a1", "f-00b1"]}
    _replace_finding(case, "f-00a1", {"finding_id": "f-0001", "source_request_id": "r-acme-1", "recipient_end": b})
    rd = report(case, cfg, rd.parent).report_dir  # the old id back, whole, beside the second half
    assert ("acme", "exposed") not in _notifications(rd)
    assert verify(rd).ok


def test_a_finding_that_shares_only_part_of_a_decided_passage_is_left_to_an_analyst(built: tuple[Path, object, Path]) -> None:
    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template text")
    row = next(r for r in pa.parquet.read_table(case / "evidence.parquet").to_pylist() if r["finding_id"] == "f-0001")
    a, b = row["recipient_start"], row["recipient_end"]
    # a finding three times as long that holds the dismissed passage and new text beside it
    _replace_finding(case, "f-0001", {"finding_id": "f-0111", "source_request_id": "r-acme-7", "recipient_start": a,
                                      "recipient_end": a + 3 * (b - a)})
    result = report(case, cfg, rd.parent)
    evidence = (result.report_dir / "evidence.csv").read_text(encoding="utf-8")
    assert "f-0111" in evidence  # not decided by a verdict on a third of it
    summary_md = (result.report_dir / "summary.md").read_text(encoding="utf-8")
    assert "NOT DECIDED" in summary_md and "f-0111 (part of f-0001)" in summary_md
    assert any("share only part of a passage an analyst decided" in n for n in result.notes)


@pytest.mark.parametrize("edit", ["zero_key", "no_key_text", "stale_for_carried", "carried_dropped"])
def test_verify_holds_the_key_and_the_verdicts_record_to_what_the_report_gives(built: tuple[Path, object, Path],
                                                                              edit: str) -> None:
    # Both passed verify: the next render re-keyed every reference, and audit, review.html and the notebook read a
    # record of the verdicts the report's files contradict.
    rd, man = _dismissed_then_rekeyed(built)
    record = man["ledgers"]["verdicts.jsonl"]
    if edit == "zero_key":
        man["references_key"] = "0" * 64
    elif edit == "no_key_text":
        man["references_key"] = "not a key"
    elif edit == "stale_for_carried":
        record["stale"] = ["f-0001"]
        del record["carried"]
    else:
        del record["carried"]
    _rewrite_manifest(rd, man)
    result = verify(rd)
    assert not result.ok
    shown = " ".join(str(d) for d in result.drift)
    assert ("references" in shown) if "key" in edit else ("carried, partial, stale" in shown)


def test_a_verdict_given_on_a_finding_is_not_overridden_by_one_carried_from_a_sibling(built: tuple[Path, object, Path]) -> None:
    # Two findings of one passage (two copies of the source's text), each decided: the later verdict, carried from
    # the sibling, overrode the other's own (a dismissed finding reported as confirmed by an analyst).
    case, cfg, rd = built
    _replace_finding(case, "f-0001", {}, {"finding_id": "f-0011", "source_request_id": "r-acme-0"})
    rd = report(case, cfg, rd.parent).report_dir
    _review(rd, "f-0001", "dismiss", "template text")
    _review(rd, "f-0011", "confirm", "verbatim")
    rd = report(case, cfg, rd.parent).report_dir
    evidence = {r["finding_id"]: r for r in csv.DictReader(io.StringIO((rd / "evidence.csv").read_text(encoding="utf-8")))}
    assert "f-0001" not in evidence and evidence["f-0011"]["tier"] == "confirmed"
    assert "confirmed by an analyst 1, dismissed 1" in (rd / "summary.md").read_text(encoding="utf-8")
    assert verify(rd).ok


def test_a_confirmed_passage_held_whole_by_a_bigger_candidate_stays_confirmed(built: tuple[Path, object, Path]) -> None:
    # It was called out of effect ("no finding holds its passage") and its customer left the list.
    case, cfg, rd = built
    _review(rd, "f-review-1", "confirm", "verbatim")
    rd = report(case, cfg, rd.parent).report_dir
    assert ("umbrella", "exposed") in _notifications(rd)
    row = pa.parquet.read_table(case / "review.parquet").to_pylist()[0]
    bigger = dict(row, finding_id="f-big1", source_request_id="r-umbrella-1", recipient_start=max(0, row["recipient_start"] - 12),
                  recipient_end=row["recipient_end"] + 12)
    write_table(case / "review.parquet", pa.Table.from_pylist([bigger], schema=schema.REVIEW), schema.REVIEW)
    cols = list(schema.REVIEW.names)  # the match writes its review.csv beside the table
    safe.write_bytes(case / "review.csv", safe.csv_bytes(cols, [[bigger.get(c) for c in cols]]))
    rd = report(case, cfg, rd.parent).report_dir
    assert ("umbrella", "exposed") in _notifications(rd)
    record = json.loads((rd / "manifest.json").read_text(encoding="utf-8"))["ledgers"]["verdicts.jsonl"]
    assert record.get("carried") == {"f-review-1": ["f-big1"]} and "stale" not in record
    assert verify(rd).ok


def test_a_report_of_an_earlier_release_with_a_verdict_on_a_gone_finding_verifies(built: tuple[Path, object, Path]) -> None:
    # Its record resolved nothing (no mark): recomputed now, the gone finding's verdict read as stale, and verify
    # called an intact report drifted (and skipped the list check).
    rd, man = _dismissed_then_rekeyed(built)
    record = man["ledgers"]["verdicts.jsonl"]
    man["ledgers"]["verdicts.jsonl"] = {"entries": record["entries"], "head": record["head"]}  # as an earlier release wrote it
    _rewrite_manifest(rd, man)
    result = verify(rd)
    assert not any("carried, partial, stale" in str(d) for d in result.drift)


def test_verdicts_on_ids_a_spreadsheet_would_read_as_formulas_follow_their_passage(built: tuple[Path, object, Path]) -> None:
    # Carried targets were CSV cells ("'=HYPER"): evidence.csv and notifications.csv disagreed, verify found 10 drifts.
    case, cfg, rd = built
    _review(rd, "f-0002", "dismiss", "template text")
    _rekey(case, "f-0001", "=HYPER", "r-acme-1")
    rd = report(case, cfg, rd.parent).report_dir
    assert _review(rd, "'=HYPER", "dismiss", "template text") == 0  # as evidence.csv shows it
    rd = report(case, cfg, rd.parent).report_dir
    assert ("acme", "exposed") not in _notifications(rd)
    row = next(r for r in pa.parquet.read_table(case / "evidence.parquet").to_pylist() if r["finding_id"] == "=HYPER")
    a, b = row["recipient_start"], row["recipient_end"]
    _replace_finding(case, "=HYPER", {"finding_id": "f-00a1", "recipient_end": (a + b) // 2},
                     {"finding_id": "=HYPER", "recipient_start": (a + b) // 2})
    rd = report(case, cfg, rd.parent).report_dir
    assert ("acme", "exposed") not in _notifications(rd)
    result = verify(rd)
    assert result.ok, [str(d) for d in result.drift]


def test_review_html_and_the_trail_name_who_decided_each_sibling(built: tuple[Path, object, Path]) -> None:
    case, cfg, rd = built
    _replace_finding(case, "f-0001", {}, {"finding_id": "f-0011", "source_request_id": "r-acme-0"})
    rd = report(case, cfg, rd.parent).report_dir
    _review(rd, "f-0001", "dismiss", "template text", analyst="alice")
    _review(rd, "f-0011", "confirm", "verbatim", analyst="bob")
    rd = report(case, cfg, rd.parent).report_dir
    trail = {r["tenant_id"]: r["decision_trail"] for r in ledger.audit(rd, dt.datetime(2026, 9, 2, tzinfo=dt.UTC)).rows}
    assert "alice dismiss f-0001: template text" in trail["globex"] and "bob confirm f-0011: verbatim" in trail["globex"]
    assert "counts for" not in trail["globex"]  # each decides its own finding alone
    from forensics.review.viewer import build

    html = build(rd, case).read_text(encoding="utf-8")

    def decided_by(fid: str) -> str:  # the finding's object in the page's data, up to the next finding's
        m = re.search('"finding_id":"' + re.escape(fid) + r'"(?:(?!"finding_id").)*?"verdict_by":"(\w+)"', html, re.S)
        assert m, fid
        return m.group(1)

    assert (decided_by("f-0001"), decided_by("f-0011")) == ("alice", "bob")


def test_a_gone_finding_held_only_in_part_decides_nothing_and_is_counted_so(built: tuple[Path, object, Path]) -> None:
    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template text")
    row = next(r for r in pa.parquet.read_table(case / "evidence.parquet").to_pylist() if r["finding_id"] == "f-0001")
    a, b = row["recipient_start"], row["recipient_end"]
    _replace_finding(case, "f-0001", {"finding_id": "f-0111", "source_request_id": "r-acme-7", "recipient_end": a + 3 * (b - a)})
    rd = report(case, cfg, rd.parent).report_dir
    summary_md = (rd / "summary.md").read_text(encoding="utf-8")
    assert "dismissed 0" in summary_md and "f-0111 (part of f-0001)" in summary_md and "NOT IN EFFECT" in summary_md


def test_verify_finds_a_record_stripped_of_its_format_mark(built: tuple[Path, object, Path]) -> None:
    rd, man = _dismissed_then_rekeyed(built)
    for key in ("resolution", "carried"):
        del man["ledgers"]["verdicts.jsonl"][key]
    _rewrite_manifest(rd, man)
    result = verify(rd)
    assert not result.ok and any("say an analyst decided" in str(d) for d in result.drift)


def test_verify_checks_the_references_of_a_report_that_recorded_no_key(built: tuple[Path, object, Path]) -> None:
    _, _, rd = built
    path = rd / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    del man["references_key"]  # as an earlier release wrote it: the key was its evidence.csv's bytes
    refs = (rd / "references.csv").read_text(encoding="utf-8").splitlines()
    a, b = refs[1].split(",", 1), refs[2].split(",", 1)
    refs[1], refs[2] = ",".join([b[0], a[1]]), ",".join([a[0], b[1]])  # two references swapped
    (rd / "references.csv").write_text("\n".join(refs) + "\n", encoding="utf-8")
    for out in man["outputs"]:
        if out["path"] == "references.csv":
            out["sha256"] = hashlib.sha256((rd / "references.csv").read_bytes()).hexdigest()
            out["size"] = (rd / "references.csv").stat().st_size
    _rewrite_manifest(rd, man)
    result = verify(rd)
    assert not result.ok and any("references.csv" in str(d) for d in result.drift)


def test_a_finding_confirmed_by_its_own_verdict_keeps_its_person_mark(built: tuple[Path, object, Path]) -> None:
    # With a confirmed sibling inside it, it was "widened": its packet no longer said a person checked it.
    case, cfg, rd = built
    row = next(r for r in pa.parquet.read_table(case / "evidence.parquet").to_pylist() if r["finding_id"] == "f-0001")
    a, b = row["recipient_start"], row["recipient_end"]
    _replace_finding(case, "f-0001", {}, {"finding_id": "f-0011", "source_request_id": "r-acme-0", "recipient_start": a + 5,
                                          "recipient_end": a + 5 + (b - a) // 4})
    rd = report(case, cfg, rd.parent).report_dir
    _review(rd, "f-0001", "confirm", "read the whole passage", analyst="alice")
    _review(rd, "f-0011", "confirm", "verbatim", analyst="bob")
    rd = report(case, cfg, rd.parent).report_dir
    record = json.loads((rd / "manifest.json").read_text(encoding="utf-8"))["ledgers"]["verdicts.jsonl"]
    assert "widened" not in record


def test_verify_finds_a_packet_claiming_a_person_confirmed_a_passage(built: tuple[Path, object, Path]) -> None:
    # A packet edited to tell the customer a person checked the passage (its hash put back in the manifest) passed.
    _, _, rd = built
    [notice_path] = [p for p in sorted((rd / "packets").glob("*/notice.json")) if "globex" in p.parent.name]
    notice = json.loads(notice_path.read_text(encoding="utf-8"))
    for req in notice["recipient"]["requests"]:
        for x in req["foreign_passages"]:
            x["confirmed_by_person"] = True
    notice_path.write_text(json.dumps(notice, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    path = rd / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    rel = notice_path.relative_to(rd).as_posix()
    for out in man["outputs"]:
        if out["path"] == rel:
            out["sha256"] = hashlib.sha256(notice_path.read_bytes()).hexdigest()
            out["size"] = notice_path.stat().st_size
    _rewrite_manifest(rd, man)
    result = verify(rd)
    assert any("say a person confirmed them" in str(d) for d in result.drift), [str(d) for d in result.drift]


def test_a_finding_with_another_passage_beside_the_dismissed_one_is_not_decided_by_it(built: tuple[Path, object, Path]) -> None:
    # Only the main span was compared: a finding of the same main span with one more passage, of new text, took the
    # dismissal and its customer left the list unseen.
    case, cfg, rd = built
    _review(rd, "f-0001", "dismiss", "template text")
    row = next(r for r in pa.parquet.read_table(case / "evidence.parquet").to_pylist() if r["finding_id"] == "f-0001")
    a, b, c, d = row["recipient_start"], row["recipient_end"], row["source_start"], row["source_end"]
    _replace_finding(case, "f-0001", {"finding_id": "f-0021", "source_request_id": "r-acme-7",
                                      "passages": f"{a}:{b}={c}:{d};{b + 200}:{b + 300}={d + 200}:{d + 300}"})
    rd = report(case, cfg, rd.parent).report_dir
    assert "f-0021" in (rd / "evidence.csv").read_text(encoding="utf-8")
    assert "f-0021 (part of f-0001)" in (rd / "summary.md").read_text(encoding="utf-8")


def test_analysts_recording_at_the_same_moment_all_get_their_verdicts_in(built: tuple[Path, object, Path]) -> None:
    """Four reviews at once: three failed with "in use by another forensics run" though an append takes milliseconds
    (a review). Each now waits for the others."""
    import threading  # noqa: PLC0415

    from forensics.case import folder_lock  # noqa: PLC0415

    _, _, rd = built
    held = threading.Event()

    def hold() -> None:
        with folder_lock(chain.lock_path(rd), "another append"):
            held.set()
            threading.Event().wait(0.3)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    assert _review(rd, "f-0001", "confirm") == 0
    holder.join()
    assert len(chain.read_report_ledger(rd, "verdicts.jsonl").entries) == 1


@pytest.mark.parametrize(("field", "value", "said"), [("verdict", "other", "verdict 'other' is not one of confirm"),
                                                       ("at", "x", "at 'x' is not a time with a zone")])
def test_a_hand_chained_verdict_line_the_render_cannot_apply_is_refused(built: tuple[Path, object, Path], field: str,
                                                                       value: str, said: str) -> None:
    """A line written by hand with a fresh hash, whose verdict is none the tool knows or whose time is none: the
    render ignored it, or ordered it anyhow, without a word (a review)."""
    case, cfg, rd = built
    assert _review(rd, "f-0001", "confirm") == 0
    entry = {k: v for k, v in chain.read(rd / "verdicts.jsonl").entries[0].items()} | {field: value}
    (rd / "verdicts.jsonl").write_bytes(chain.encode(entry) + b"\n")
    with pytest.raises(CaseError, match=re.escape(f"line 1: {said}")):
        report(case, cfg, rd.parent)  # type: ignore[arg-type]
