"""The notification ledger and the audit (issue 15, item 3): notices sent, hash-chained; who on the
list is not notified, overdue, notified but off the list, or notified before the evidence existed."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet  # noqa: F401  (pa.parquet)
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_report_case import HOSTILE, make_case

from forensics import csvfile, schema
from forensics.case import write_table
from forensics.cli import main
from forensics.config import config_from_mapping
from forensics.errors import CaseError, ConfigError
from forensics.report import report, verify
from forensics.review import chain, ledger

#: The fixture's latest log record (manifest counts.last_received): the report's time.
REPORT_TIME = "2026-08-31T10:00:00Z"


def _cli(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(args)
    return int(exc.value.code)


def _audit_rows(rd: Path) -> dict[str, dict[str, str]]:
    rows = csv.DictReader(io.StringIO((rd / "audit.csv").read_text(encoding="utf-8")))
    return {r["tenant_id"].removeprefix("'"): r for r in rows}


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, object, Path]:
    case, cfg, _ = make_case(tmp_path)
    rd = report(case, cfg, tmp_path / "out").report_dir
    return case, cfg, rd


def _notify(rd: Path, tenant: str, at: str, ref: str = "T-1", channel: str = "email") -> int:
    return _cli(["notified", str(rd), "--tenant", tenant, "--channel", channel, "--at", at, "--ref", ref])


def _tenants(rd: Path) -> list[str]:
    rows = csv.DictReader(io.StringIO((rd / "notifications.csv").read_text(encoding="utf-8")))
    return sorted({r["tenant_id"] for r in rows})


def test_audit_lists_who_is_not_notified_and_exits_one_until_everyone_is(built: tuple[Path, object, Path],
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, _, rd = built
    now = "2026-09-01T10:00:00Z"  # 24 h after the report: nobody overdue yet
    assert _notify(rd, "acme", "2026-08-31T12:00:00Z", "T-acme") == 0
    capsys.readouterr()
    assert _cli(["audit", str(rd), "--now", now]) == 1
    printed = capsys.readouterr().out
    assert "not notified: " in printed and "audit written to" in printed
    rows = _audit_rows(rd)
    assert rows["acme"]["status"] == "notified" and rows["acme"]["ref"] == "T-acme" and rows["acme"]["channel"] == "email"
    assert rows["globex"]["status"] == "not notified" and rows["globex"]["days_since_report"] == "1"
    assert rows["globex"]["deadline"] == "2026-09-03T10:00:00Z"  # the report's time plus 72 hours
    assert rows["globex"]["overdue"] == "false"
    for tenant in _tenants(rd):
        if tenant.removeprefix("'") != "acme":
            assert _notify(rd, tenant.removeprefix("'"), "2026-08-31T15:00:00Z", f"T-{len(tenant)}", "portal") == 0
    assert _cli(["audit", str(rd), "--now", now]) == 0
    assert all(r["status"] == "notified" for r in _audit_rows(rd).values())


def test_overdue_follows_notify_within_hours(tmp_path: Path) -> None:
    case, cfg, _ = make_case(tmp_path)
    cfg.sections["report"] = {"notify_within_hours": 24}
    rd = report(case, cfg, tmp_path / "out").report_dir
    ledger.record(rd, [ledger.check("acme", "letter", "2026-09-02T10:00:00Z", "L-7")])
    rows = {r["tenant_id"]: r for r in ledger.audit(rd, _t("2026-09-01T11:00:00Z")).rows}
    assert rows["globex"]["overdue"] is True  # 25 h after the report, deadline 24 h
    assert rows["acme"]["overdue"] is True  # its notice was not sent yet
    rows = {r["tenant_id"]: r for r in ledger.audit(rd, _t("2026-09-02T11:00:00Z")).rows}
    assert rows["acme"]["overdue"] is False and rows["acme"]["status"] == "notified"
    assert "after the 24-hour deadline" in rows["acme"]["problems"]
    rows = {r["tenant_id"]: r for r in ledger.audit(rd, _t("2026-08-31T20:00:00Z")).rows}
    assert rows["globex"]["overdue"] is False


def test_notice_before_the_evidence_existed_is_flagged_and_does_not_count(built: tuple[Path, object, Path]) -> None:
    _, _, rd = built
    # An out-of-order notice: dated before the latest log record that puts globex on the list (its last_seen).
    ledger.record(rd, [ledger.check("globex", "email", "2026-08-28T09:00:00Z", "T-early")])
    result = ledger.audit(rd, _t("2026-09-01T00:00:00Z"))
    row = next(r for r in result.rows if r["tenant_id"] == "globex")
    assert row["status"] == "not notified" and not result.ok
    assert "before the evidence it cites existed" in row["problems"] and "2026-08-28T11:00:00Z" in row["problems"]
    assert result.summary()["notices_before_evidence"] == 1


def test_a_notice_stays_valid_when_logs_of_other_customers_are_added(built: tuple[Path, object, Path]) -> None:
    # The evidence time was the report's latest log record of all: a log added later, naming other customers only,
    # made a notice sent in time "before the evidence it cites existed".
    _, _, rd = built
    ledger.record(rd, [ledger.check("globex", "email", "2026-08-30T09:00:00Z", "T-globex")])  # before REPORT_TIME
    row = next(r for r in ledger.audit(rd, _t("2026-09-01T00:00:00Z")).rows if r["tenant_id"] == "globex")
    assert row["status"] == "notified" and row["problems"] == "" and row["evidence_from"] == "2026-08-28T11:00:00Z"


def test_findings_the_list_gains_after_a_notice_call_for_a_further_one(built: tuple[Path, object, Path]) -> None:
    # Logs added after a customer was notified put new findings about it on the list: the audit still said "notified".
    case, cfg, rd = built
    ledger.record(rd, [ledger.check("globex", "email", "2026-09-01T09:00:00Z", "T-globex")])
    [notice] = chain.read_valid(rd / "notices.jsonl").entries
    assert [f["finding_id"] for f in notice["findings"]] == ["f-0001"]  # what the notice told of, with its passage
    assert notice["findings"][0]["recipient_request_id"] == "r-globex-1"
    rows = pa.parquet.read_table(case / "evidence.parquet").to_pylist()
    extra = dict(next(r for r in rows if r["finding_id"] == "f-0001"), finding_id="f-0077", source_request_id="r-acme-9",
                 recipient_start=0, recipient_end=5)
    write_table(case / "evidence.parquet", pa.Table.from_pylist(rows + [extra], schema=schema.EVIDENCE), schema.EVIDENCE)
    rd = report(case, cfg, rd.parent).report_dir
    result = ledger.audit(rd, _t("2026-09-02T00:00:00Z"))
    row = next(r for r in result.rows if r["tenant_id"] == "globex")
    assert row["status"] == "notified, new findings since" and not result.ok
    assert "1 finding(s) about this customer are in no notice sent" in row["problems"] and "f-0077" in row["problems"]
    assert result.summary()["new_findings_since_notice"] == 1


def test_notified_customer_no_longer_on_the_list_and_decision_trail(built: tuple[Path, object, Path]) -> None:
    case, cfg, rd = built
    ledger.record(rd, [ledger.check("acme", "email", "2026-09-01T09:00:00Z", "T-acme")])
    for fid in ("f-0001", "f-0002"):
        assert _cli(["review", str(rd), "--finding", fid, "--verdict", "dismiss", "--reason", "template text",
                     "--analyst", "ana"]) == 0
    rd = report(case, cfg, rd.parent).report_dir
    assert (rd / "notices.jsonl").is_file()  # carried over by the re-render
    rows = {r["tenant_id"]: r for r in ledger.audit(rd, _t("2026-09-02T00:00:00Z")).rows}
    assert rows["acme"]["status"] == "notified, no longer on the list" and rows["acme"]["on_list"] is False
    trail = rows["acme"]["decision_trail"]
    assert "ana dismiss f-0001: template text" in trail and "ana dismiss f-0002" in trail and "ref T-acme" in trail
    assert verify(rd).ok


def test_notified_id_no_finding_names_is_not_called_no_longer_on_the_list(built: tuple[Path, object, Path]) -> None:
    # A notice recorded under a mistyped id: the list never held it, and saying "no longer" would tell the auditor
    # a verdict or re-run took the customer off.
    _, _, rd = built
    ledger.record(rd, [ledger.check("acme-typo", "email", "2026-09-01T09:00:00Z", "T-typo")])
    result = ledger.audit(rd, _t("2026-09-02T00:00:00Z"))
    row = {r["tenant_id"]: r for r in result.rows}["acme-typo"]
    assert row["status"] == "notified, not on the list" and row["on_list"] is False
    assert "no finding or suspect response of this report names this id" in row["problems"]
    assert result.summary()["notified_not_on_list"] == 1


@pytest.mark.parametrize("name", ["notices.jsonl", "verdicts.jsonl"])
def test_a_render_refuses_a_ledger_deleted_since_the_last_render(built: tuple[Path, object, Path], name: str) -> None:
    # Rendered without it, the new report recorded no ledger and verify passed: every notice sent, or every verdict,
    # gone from the record without a trace.
    case, cfg, rd = built
    if name == "notices.jsonl":
        ledger.record(rd, [ledger.check("acme", "email", "2026-09-01T09:00:00Z", "T-acme")])
    else:
        assert _cli(["review", str(rd), "--finding", "f-0001", "--verdict", "dismiss", "--reason", "template text",
                     "--analyst", "ana"]) == 0
    rd = report(case, cfg, rd.parent).report_dir  # the manifest now records the ledger's line
    (rd / name).unlink()
    with pytest.raises(CaseError, match=f"{name} is missing: the report was rendered with 1 line"):
        report(case, cfg, rd.parent)
    assert not verify(rd).ok  # the old report stays, and still says what is missing


def test_audit_is_deterministic_with_a_fixed_now(built: tuple[Path, object, Path]) -> None:
    _, _, rd = built
    ledger.record(rd, [ledger.check("acme", "email", "2026-09-01T09:00:00Z", "T-acme")])
    ledger.audit(rd, _t("2026-09-05T00:00:00Z"))
    first = (rd / "audit.csv").read_bytes()
    ledger.audit(rd, _t("2026-09-05T00:00:00Z"))
    assert (rd / "audit.csv").read_bytes() == first
    assert first.startswith(b"tenant_id,on_list,roles,tier,status,notified_at")


def test_import_and_bad_input_name_the_line(built: tuple[Path, object, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    _, _, rd = built
    bad = tmp_path / "n.csv"
    bad.write_text("tenant_id,channel,at,ref\nacme,email,2026-09-01T09:00:00Z,T1\nglobex,fax,2026-09-01T09:00:00Z,T2\n")
    capsys.readouterr()
    assert _cli(["notified", str(rd), "--import", str(bad)]) == 2
    assert f"{bad}:3" in capsys.readouterr().err and not (rd / "notices.jsonl").exists()
    bad.write_text("tenant_id,channel,at,ref\nacme,email,2026-09-01 09:00,T1\n")
    assert _cli(["notified", str(rd), "--import", str(bad)]) == 2
    assert "no zone" in capsys.readouterr().err
    good = tmp_path / "g.csv"
    good.write_text("tenant_id,channel,at,ref\nacme,email,2026-09-01T11:00:00+02:00,T1\nglobex,letter,2026-09-02T09:00:00Z,L2\n")
    assert _cli(["notified", str(rd), "--import", str(good)]) == 0
    entries = chain.read_valid(rd / "notices.jsonl").entries
    assert [(e["tenant_id"], e["at"]) for e in entries] == [("acme", "2026-09-01T09:00:00Z"), ("globex", "2026-09-02T09:00:00Z")]


def test_tampered_notice_ledger_fails_verify_and_audit(built: tuple[Path, object, Path],
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    case, cfg, rd = built
    ledger.record(rd, [ledger.check("acme", "email", "2026-09-01T09:00:00Z", "T-1"),
                       ledger.check("globex", "email", "2026-09-01T10:00:00Z", "T-2")])
    rd = report(case, cfg, rd.parent).report_dir
    assert json.loads((rd / "manifest.json").read_text())["ledgers"]["notices.jsonl"]["entries"] == 2
    ledger.record(rd, [ledger.check("initech", "email", "2026-09-01T11:00:00Z", "T-3")])
    assert verify(rd).ok  # a notice recorded after the render is no drift
    path = rd / "notices.jsonl"
    path.write_bytes(path.read_bytes().replace(b"2026-09-01T09:00:00Z", b"2026-08-25T09:00:00Z"))
    assert any(d.kind == "ledger" and d.path == "notices.jsonl" for d in verify(rd).drift)
    capsys.readouterr()
    assert _cli(["audit", str(rd), "--now", "2026-09-03T00:00:00Z"]) == 2
    assert "notices.jsonl" in capsys.readouterr().err
    with pytest.raises(CaseError):
        ledger.audit(rd, _t("2026-09-03T00:00:00Z"))


@pytest.mark.parametrize("value", [0, -5, 9000, "72", True, float("nan")])
def test_notify_within_hours_is_validated(tmp_path: Path, value: object) -> None:
    data = {"name": "c", "model": "m", "window_start": "2026-08-27T00:00:00Z", "window_end": "2026-09-02T00:00:00Z",
            "real_ceiling_tokens": 1000, "report": {"notify_within_hours": value}}
    with pytest.raises(ConfigError, match="notify_within_hours"):
        config_from_mapping(data, base=tmp_path, file=tmp_path / "case.toml")
    data["report"] = {"notify_within_hours": 48}
    assert config_from_mapping(data, base=tmp_path).section("report") == {"notify_within_hours": 48}
    data["report"] = {"notify_within_hour": 48}
    with pytest.raises(ConfigError, match="notify_within_hour"):
        config_from_mapping(data, base=tmp_path)


def _t(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_notice_dated_in_the_future_is_refused(built: tuple[Path, object, Path]) -> None:
    _, _, rd = built
    with pytest.raises(ConfigError, match="after now"):
        ledger.record(rd, [ledger.check("acme", "email", "2026-09-03T00:00:00Z", "T-1")], now=_t("2026-09-02T00:00:00Z"))
    assert not (rd / "notices.jsonl").exists()
    ledger.record(rd, [ledger.check("acme", "email", "2026-09-02T00:05:00Z", "T-1")], now=_t("2026-09-02T00:00:00Z"))
    assert chain.read_valid(rd / "notices.jsonl").entries[0]["recorded_at"] == "2026-09-02T00:00:00Z"


def test_a_hostile_tenant_id_is_printed_with_its_control_characters_escaped(
        built: tuple[Path, object, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, _, rd = built
    capsys.readouterr()
    assert _notify(rd, "evil\x1b[31m", "2026-08-31T12:00:00Z") == 0
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and "evil\\x1b[31m" in printed
    assert _cli(["audit", str(rd), "--now", "2026-09-01T10:00:00Z"]) == 1
    assert "\x1b" not in capsys.readouterr().out


def test_audit_csv_shows_each_id_as_notifications_csv_does(built: tuple[Path, object, Path]) -> None:
    """audit.csv wrote the ids it had read from notifications.csv's cells through the CSV writer again:
    '=SUM(A1) became ''=SUM(A1) and an escaped control character's backslash was doubled, so the cell no
    longer read back as the customer's id."""
    _, _, rd = built
    for tenant in ("=SUM(A1)", HOSTILE):
        assert _notify(rd, tenant, "2026-08-31T12:00:00Z") == 0
    assert _cli(["audit", str(rd), "--now", "2026-09-01T10:00:00Z", "-q"]) == 1
    audit_cells = {r["tenant_id"] for r in csv.DictReader(io.StringIO((rd / "audit.csv").read_text(encoding="utf-8")))}
    assert audit_cells == set(_tenants(rd))
    assert {csvfile.uncell(c) for c in audit_cells} >= {"=SUM(A1)", HOSTILE}


def _listed(*tenants: str) -> list[dict[str, str]]:
    return [{"tenant_id": csvfile.cell(t), "role": "recipient", "tier": "possible"} for t in tenants]


def _notice(tenant: str, ref: str) -> dict[str, str]:
    return {"tenant_id": tenant, "channel": "email", "at": "2026-09-01T09:00:00Z", "ref": ref,
            "recorded_at": "2026-09-01T09:00:00Z", "seq": 1}


@pytest.mark.parametrize("typed", ["raw", "shown"])
def test_a_notice_counts_for_the_customer_whose_id_it_names(typed: str) -> None:
    """Two customers: 'acme' + newline + 'prod', shown in the CSV as acme\\nprod, and one whose id is that
    shown text itself (a backslash and an n). The notice naming the second was credited to the first, and
    the second was listed as not notified and overdue."""
    newline, literal = "acme\nprod", "acme\\nprod"
    report_time = dt.datetime(2026, 8, 31, 10, tzinfo=dt.UTC)
    now = dt.datetime(2026, 9, 5, 12, tzinfo=dt.UTC)
    notice = _notice(literal if typed == "raw" else csvfile.cell(literal), "SENT")
    rows = {r["tenant_id"]: r for r in ledger._rows(_listed(newline, literal), [], [], [], [], [notice], report_time, now, 72)}
    assert rows[literal]["status"] == "notified" and rows[literal]["ref"] == "SENT"
    assert rows[newline]["status"] == "not notified" and rows[newline]["overdue"] is True


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_a_text_cell_reads_back_as_the_string_it_was_written_from(text: str) -> None:
    assert csvfile.uncell(csvfile.cell(text)) == text


def test_a_notice_to_an_id_on_no_row_of_the_list_is_recorded_with_a_warning(
        built: tuple[Path, object, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """A typo was recorded silently: the customer it was meant for stayed unnotified until someone audited."""
    _, _, rd = built
    capsys.readouterr()
    assert _notify(rd, "acmee", "2026-08-31T12:00:00Z") == 0
    err = capsys.readouterr().err
    assert "warning: acmee is on no row of notifications.csv" in err
    for tenant in ("acme", "=SUM(A1)", "'=SUM(A1)", HOSTILE):  # as the logs hold it, or as the CSV shows it
        assert _notify(rd, tenant, "2026-08-31T12:00:00Z") == 0
        assert "warning" not in capsys.readouterr().err


def test_an_id_that_names_two_customers_is_credited_as_logged_with_a_warning(tmp_path: Path) -> None:
    """'=acme is one customer's id as logged and the other's (=acme) as notifications.csv shows it: the
    notice goes to the first, silently, though the analyst may have copied the second's cell."""
    rd = tmp_path / "report"
    rd.mkdir()
    (rd / "notifications.csv").write_text(csvfile.csv_text(["tenant_id", "role"], [["=acme", "exposed"], ["'=acme", "exposed"]]),
                                          encoding="utf-8")
    assert ledger.naming_warnings(rd, ["=acme", "acme"]) == [
        "acme is on no row of notifications.csv: recorded, but check the id (the audit lists it as notified and not on "
        "the list; the customer it was meant for stays unnotified)"]
    (warning,) = ledger.naming_warnings(rd, ["'=acme"])
    assert "names two customers" in warning and "=acme" in warning


def test_a_tenant_id_is_recorded_as_given_not_stripped(tmp_path: Path) -> None:
    """"acme\\u00a0" was stripped to "acme": another customer of the list, credited with no warning."""
    rd = tmp_path / "report"
    rd.mkdir()
    (rd / "notifications.csv").write_text(csvfile.csv_text(["tenant_id", "role"], [["acme", "exposed"], ["acme\u00a0", "exposed"]]),
                                          encoding="utf-8")
    notice = ledger.check("acme\u00a0", "email", "2026-09-01T09:00:00Z", "T-1")
    assert notice["tenant_id"] == "acme\u00a0" and ledger.naming_warnings(rd, [notice["tenant_id"]]) == []
    with pytest.raises(ConfigError, match="empty"):
        ledger.check(" \t", "email", "2026-09-01T09:00:00Z", "T-1")


def test_a_customer_listed_by_a_confirmed_candidate_counts_notices_from_the_verdict_on_after_a_render() -> None:
    # Rendered, the confirmed candidate sits in evidence.csv: the audit took it for the machine's own finding, and a
    # notice sent before the verdict counted.
    from forensics.review.verdicts import CONFIRMED_RULE

    listed = [{"tenant_id": "hooli", "role": "exposed", "tier": "confirmed", "last_seen": "2026-08-28T11:00:00Z"}]
    evidence = [{"finding_id": "f-0042", "relation": "cross_tenant", "recipient_tenant_id": "globex",
                 "source_tenant_id": "hooli", "tier": "confirmed", "tier_rule": csvfile.cell(CONFIRMED_RULE)}]
    verdicts = [{"at": "2026-09-03T08:00:00Z", "analyst": "ana", "finding_id": "f-0042", "verdict": "confirm",
                 "reason": "verbatim"}]
    sent = [{"tenant_id": "hooli", "channel": "email", "at": "2026-09-02T08:00:00Z", "ref": "T-early",
             "recorded_at": "2026-09-02T08:00:01Z", "seq": 1}]
    [row] = ledger._rows(listed, [], evidence, [], verdicts, sent, _t(REPORT_TIME), _t("2026-09-04T00:00:00Z"), 72.0)
    assert row["status"] == "not notified" and "before the evidence it cites existed (2026-09-03T08:00:00Z)" in row["problems"]


def test_notified_json_carries_the_naming_warning_and_the_ledger_head(built: tuple[Path, object, Path],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    # --json printed the entries alone: a script saw neither the mistyped id's warning nor the head to keep.
    _, _, rd = built
    capsys.readouterr()
    assert _cli(["notified", str(rd), "--tenant", "acme-typo", "--channel", "email", "--at", "2026-09-01T09:00:00Z",
                 "--ref", "T-1", "--json"]) == 0
    [entry] = json.loads(capsys.readouterr().out)
    assert entry["tenant_id"] == "acme-typo" and "is on no row of notifications.csv" in entry["warnings"][0]
    assert entry["ledger_lines"] == 1 and entry["ledger_head_sha256"] == chain.read_valid(rd / "notices.jsonl").head


def test_a_finding_told_of_under_another_id_calls_for_no_further_notice(built: tuple[Path, object, Path]) -> None:
    # Logs added later gave the passage a notice told of another finding id: the same passage, no new finding.
    case, cfg, rd = built
    ledger.record(rd, [ledger.check("globex", "email", "2026-09-01T09:00:00Z", "T-globex")])
    rows = pa.parquet.read_table(case / "evidence.parquet").to_pylist()
    for r in rows:
        if r["finding_id"] == "f-0001":
            r["finding_id"], r["source_request_id"] = "f-0009", "r-acme-0"
    write_table(case / "evidence.parquet", pa.Table.from_pylist(rows, schema=schema.EVIDENCE), schema.EVIDENCE)
    rd = report(case, cfg, rd.parent).report_dir
    row = next(r for r in ledger.audit(rd, _t("2026-09-02T00:00:00Z")).rows if r["tenant_id"] == "globex")
    assert row["status"] == "notified" and row["problems"] == ""


def test_a_later_record_of_the_customer_itself_calls_for_a_further_notice_not_undoes_one() -> None:
    # The customer's latest record was its evidence time: a finding the list gained later, on a request received
    # after the notice, made the notice "before the evidence it cites existed" and the customer "not notified".
    listed = [{"tenant_id": "globex", "role": "recipient", "tier": "confirmed", "first_seen": "2026-08-28T11:00:00Z",
               "last_seen": "2026-09-01T12:00:00Z"}]
    evidence = [{"finding_id": f, "relation": "cross_tenant", "recipient_tenant_id": "globex", "source_tenant_id": "acme",
                 "recipient_request_id": r, "recipient_start": "0", "recipient_end": "40", "tier": "confirmed", "tier_rule": "E1"}
                for f, r in (("f-0001", "r-globex-1"), ("f-0078", "r-globex-2"))]
    told = [{"finding_id": "f-0001", "recipient_request_id": "r-globex-1", "recipient_tenant_id": "globex",
             "source_tenant_id": "acme", "recipient_start": "0", "recipient_end": "40"}]
    sent = [{"tenant_id": "globex", "channel": "email", "at": "2026-09-01T09:00:00Z", "ref": "T-globex",
             "recorded_at": "2026-09-01T09:00:01Z", "seq": 1, "findings": told}]
    suspects = [{"tenant_id": "globex"}]
    [row] = [r for r in ledger._rows(listed, suspects, evidence, [], [], sent, _t(REPORT_TIME), _t("2026-09-02T00:00:00Z"), 72.0)
             if r["tenant_id"] == "globex"]
    assert row["status"] == "notified, new findings since" and "f-0078" in row["problems"]
    assert "before the evidence" not in row["problems"]


def test_a_verdict_out_of_effect_stays_in_the_trail_of_the_customers_it_was_about() -> None:
    from forensics.review.verdicts import Resolution

    listed = [{"tenant_id": "globex", "role": "recipient", "tier": "confirmed", "first_seen": "2026-08-28T11:00:00Z"}]
    verdicts = [{"at": "2026-09-01T08:00:00Z", "analyst": "ana", "finding_id": "f-0001", "verdict": "dismiss",
                 "reason": "template text", "passage": {"recipient_request_id": "r-globex-1", "recipient_tenant_id": "globex",
                                                        "source_tenant_id": "acme", "recipient_start": "0", "recipient_end": "9"}}]
    rows = ledger._rows(listed, [{"tenant_id": "globex"}], [], [], verdicts, [], _t(REPORT_TIME), _t("2026-09-02T00:00:00Z"),
                        72.0, Resolution(stale=("f-0001",)))
    [row] = [r for r in rows if r["tenant_id"] == "globex"]
    assert "ana dismiss f-0001 (out of effect" in row["decision_trail"]


def test_a_notice_recorded_late_tells_not_of_leaks_into_answers_after_it_was_sent(built: tuple[Path, object, Path]) -> None:
    # Recorded on 09-02 for a notice sent 08-29, it counted as telling of acme's leak into an answer of 08-31.
    _, _, rd = built
    ledger.record(rd, [ledger.check("acme", "email", "2026-08-29T00:00:00Z", "T-acme")])
    [notice] = chain.read_valid(rd / "notices.jsonl").entries
    assert [f["finding_id"] for f in notice["findings"]] == ["f-0001"]  # globex's answer of 08-28 only
    row = next(r for r in ledger.audit(rd, _t("2026-09-02T00:00:00Z")).rows if r["tenant_id"] == "acme")
    assert row["status"] == "notified, new findings since" and "f-0002" in row["problems"]


def test_a_notice_of_an_earlier_release_beside_a_recorded_one_leaves_the_check_on() -> None:
    # One notice without a findings record switched the check off for the customer.
    listed = [{"tenant_id": "acme", "role": "exposed", "tier": "confirmed", "first_seen": "2026-08-28T11:00:00Z"}]
    evidence = [{"finding_id": f, "relation": "cross_tenant", "recipient_tenant_id": "globex", "source_tenant_id": "acme",
                 "recipient_request_id": r, "recipient_start": "0", "recipient_end": "40", "tier": "confirmed", "tier_rule": "E1"}
                for f, r in (("f-0001", "r-globex-1"), ("f-0new", "r-globex-9"))]
    told = [{"finding_id": "f-0001", "recipient_request_id": "r-globex-1", "recipient_tenant_id": "globex",
             "source_tenant_id": "acme", "recipient_start": "0", "recipient_end": "40"}]
    sent = [{"tenant_id": "acme", "channel": "email", "at": "2026-09-01T10:00:00Z", "ref": "T-old", "recorded_at": "x", "seq": 1},
            {"tenant_id": "acme", "channel": "email", "at": "2026-09-01T12:00:00Z", "ref": "T-new", "recorded_at": "x", "seq": 2,
             "findings": told}]
    rows = ledger._rows(listed, [], evidence, [], [], sent, _t(REPORT_TIME), _t("2026-09-02T00:00:00Z"), 72.0)
    [row] = [r for r in rows if r["tenant_id"] == "acme"]
    assert row["status"] == "notified, new findings since" and "f-0new" in row["problems"]


def test_a_notice_is_not_rejected_when_the_list_gives_no_time_for_the_customer() -> None:
    # With no first_seen, the report's latest record of all stood in: a notice sent in time was "before the evidence".
    listed = [{"tenant_id": "initech", "role": "recipient", "tier": "possible", "first_seen": ""}]
    sent = [{"tenant_id": "initech", "channel": "email", "at": "2026-08-30T12:00:00Z", "ref": "T-i", "recorded_at": "x",
             "seq": 1, "findings": []}]
    [row] = ledger._rows(listed, [{"tenant_id": "initech"}], [], [], [], sent, _t(REPORT_TIME), _t("2026-09-04T00:00:00Z"), 72.0)
    assert row["status"] == "notified" and "before the evidence" not in row["problems"]
    assert "no time for this customer's records" in row["problems"]


def test_odd_ledger_values_are_said_not_crashed_on() -> None:
    # A notice dated "soon", a verdict's passage at Infinity: internal errors.
    from forensics.review.verdicts import Resolution, resolve

    listed = [{"tenant_id": "acme", "role": "exposed", "tier": "confirmed", "first_seen": "2026-08-28T11:00:00Z"}]
    sent = [{"tenant_id": "acme", "channel": "email", "at": "soon", "ref": "T-soon", "recorded_at": "x", "seq": 1}]
    [row] = ledger._rows(listed, [], [], [], [], sent, _t(REPORT_TIME), _t("2026-09-04T00:00:00Z"), 72.0)
    assert row["status"] == "not notified" and "no readable time" in row["problems"]
    entries = [{"finding_id": "f-0001", "verdict": "dismiss", "passage": {
        "recipient_request_id": "r", "recipient_tenant_id": "g", "source_tenant_id": "a",
        "recipient_start": float("inf"), "recipient_end": float("inf")}}]
    rows = [{"finding_id": "f-0009", "recipient_request_id": "r", "recipient_tenant_id": "g", "source_tenant_id": "a",
             "recipient_start": "0", "recipient_end": "9"}]
    assert resolve(entries, rows) == Resolution(stale=("f-0001",))


def test_a_leak_into_an_answer_of_unknown_time_is_none_a_notice_told_of(built: tuple[Path, object, Path]) -> None:
    case, cfg, rd = built
    rows = pa.parquet.read_table(case / "suspects.parquet").to_pylist()
    for r in rows:
        if r["request_id"] == "r-hostile-1":
            r["received_at"] = r["completed_at"] = None
    write_table(case / "suspects.parquet", pa.Table.from_pylist(rows, schema=schema.SUSPECTS), schema.SUSPECTS)
    rd = report(case, cfg, rd.parent).report_dir
    ledger.record(rd, [ledger.check("acme", "email", "2026-08-30T09:00:00Z", "T-acme")])
    [notice] = chain.read_valid(rd / "notices.jsonl").entries
    assert [f["finding_id"] for f in notice["findings"]] == ["f-0001"]
    row = next(r for r in ledger.audit(rd, _t("2026-09-02T00:00:00Z")).rows if r["tenant_id"] == "acme")
    assert row["status"] == "notified, new findings since" and "f-0002" in row["problems"]


def test_a_notice_under_the_id_the_csv_shows_is_no_typo_once_its_customer_leaves_the_list() -> None:
    # Recorded as "'=acme" (copied from notifications.csv): once off the list, it read as an id nothing names.
    evidence = [{"finding_id": "f-0001", "relation": "cross_tenant", "recipient_tenant_id": "globex",
                 "source_tenant_id": "'=acme", "recipient_request_id": "r-1", "recipient_start": "0", "recipient_end": "9"}]
    sent = [{"tenant_id": "'=acme", "channel": "email", "at": "2026-09-01T09:00:00Z", "ref": "T-a", "recorded_at": "x", "seq": 1}]
    rows = ledger._rows([], [], [], evidence, [], sent, _t(REPORT_TIME), _t("2026-09-02T00:00:00Z"), 72.0)
    [row] = [r for r in rows if "acme" in r["tenant_id"]]
    assert row["status"] == "notified, no longer on the list" and "names this id" not in row["problems"]


def test_a_notifications_file_a_spreadsheet_saved_over_is_an_error_naming_it(built: tuple[Path, object, Path],
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    _, _, rd = built
    text = (rd / "notifications.csv").read_text(encoding="utf-8")
    (rd / "notifications.csv").write_text(text.replace("tenant_id,", "Tenant ID,", 1), encoding="utf-8")
    assert _cli(["audit", str(rd), "--now", "2026-09-02T00:00:00Z"]) == 2
    err = capsys.readouterr().err
    assert "notifications.csv has no tenant_id column" in err and "internal error" not in err


def test_a_confirm_carried_to_a_bigger_finding_tells_nothing_of_its_other_text() -> None:
    # The audit called customers notified of a finding whose other text no notice told of.
    from forensics.review.verdicts import Resolution

    listed = [{"tenant_id": "globex", "role": "recipient", "tier": "confirmed", "first_seen": "2026-08-28T11:00:00Z"}]
    evidence = [{"finding_id": "f-0099", "relation": "cross_tenant", "recipient_tenant_id": "globex", "source_tenant_id": "acme",
                 "recipient_request_id": "r-1", "recipient_start": "0", "recipient_end": "90"}]
    told = [{"finding_id": "f-0001", "recipient_request_id": "r-1", "recipient_tenant_id": "globex", "source_tenant_id": "acme",
             "recipient_start": "60", "recipient_end": "90"}]
    sent = [{"tenant_id": "globex", "channel": "email", "at": "2026-09-01T09:00:00Z", "ref": "T-g", "recorded_at": "x",
             "seq": 1, "findings": told}]
    verdicts = [{"at": "2026-09-01T08:00:00Z", "analyst": "ana", "finding_id": "f-0001", "verdict": "confirm", "reason": "r",
                 "passage": told[0]}]
    resolution = Resolution(carried={"f-0001": ("f-0099",)}, widened=("f-0099",))
    [row] = [r for r in ledger._rows(listed, [{"tenant_id": "globex"}], evidence, [], verdicts, sent, _t(REPORT_TIME),
                                     _t("2026-09-02T00:00:00Z"), 72.0, resolution) if r["tenant_id"] == "globex"]
    assert row["status"] == "notified, new findings since" and "f-0099" in row["problems"]


def test_a_confirm_of_a_finding_a_notice_told_of_does_not_move_the_evidence_time() -> None:
    # Notified at 09:00, confirmed at 12:00, the passage moved to review by logs added: the notice became "before the
    # evidence it cites existed".
    from forensics.review.verdicts import CONFIRMED_RULE, Resolution

    passage = {"recipient_request_id": "r-1", "recipient_tenant_id": "globex", "source_tenant_id": "acme",
               "recipient_start": "0", "recipient_end": "40"}
    listed = [{"tenant_id": "acme", "role": "exposed", "tier": "confirmed", "first_seen": "2026-08-28T11:00:00Z"}]
    evidence = [{"finding_id": "f-0100", "relation": "cross_tenant", "recipient_tenant_id": "globex", "source_tenant_id": "acme",
                 "recipient_request_id": "r-1", "recipient_start": "0", "recipient_end": "40", "tier": "confirmed",
                 "tier_rule": csvfile.cell(CONFIRMED_RULE)}]
    sent = [{"tenant_id": "acme", "channel": "email", "at": "2026-09-01T09:00:00Z", "ref": "N-acme", "recorded_at": "x",
             "seq": 1, "findings": [{"finding_id": "f-0001", **passage}]}]
    verdicts = [{"at": "2026-09-01T12:00:00Z", "analyst": "ana", "finding_id": "f-0001", "verdict": "confirm", "reason": "r",
                 "passage": passage}]
    resolution = Resolution(carried={"f-0001": ("f-0100",)})
    [row] = [r for r in ledger._rows(listed, [], evidence, [], verdicts, sent, _t(REPORT_TIME), _t("2026-09-02T00:00:00Z"),
                                     72.0, resolution) if r["tenant_id"] == "acme"]
    assert row["status"] == "notified" and "before the evidence" not in row["problems"]


def test_a_notice_that_told_of_findings_is_no_typo_once_a_rerun_drops_its_customer() -> None:
    """A re-run (a corrected window) dropped a notified customer: no finding of the new report names it, but its
    notice's own record says which findings it told of, so the list held it; it read as a probable typo (a review)."""
    told = [{"finding_id": "f-03a3", "recipient_request_id": "r-1", "recipient_tenant_id": "globex",
             "source_tenant_id": "acme", "recipient_start": "0", "recipient_end": "9"}]
    sent = [{"tenant_id": "acme", "channel": "email", "at": "2026-09-01T09:00:00Z", "ref": "T-a", "recorded_at": "x",
             "seq": 1, "findings": told}]
    rows = ledger._rows([], [], [], [], [], sent, _t(REPORT_TIME), _t("2026-09-02T00:00:00Z"), 72.0)
    [row] = rows
    assert row["status"] == "notified, no longer on the list" and "names this id" not in row["problems"]


def test_an_audit_as_of_a_past_time_counts_no_notice_sent_after_it(built: tuple[Path, object, Path]) -> None:
    """`audit --now` before a notice was sent showed the customer notified, and not overdue (a review)."""
    _, _, rd = built
    ledger.record(rd, [ledger.check("acme", "email", "2026-09-10T10:00:00Z", "T-late")], now=_t("2026-09-10T11:00:00Z"))
    before = {r["tenant_id"]: r for r in ledger.audit(rd, _t("2026-09-05T00:00:00Z")).rows}["acme"]
    assert before["status"] == "not notified" and before["overdue"] is True
    assert "notice 'T-late' is dated 2026-09-10T10:00:00Z, after the audit's time (2026-09-05T00:00:00Z)" in before["problems"]
    after = {r["tenant_id"]: r for r in ledger.audit(rd, _t("2026-09-11T00:00:00Z")).rows}["acme"]
    assert after["status"] == "notified" and after["notified_at"] == "2026-09-10T10:00:00Z"


def test_the_audit_says_how_many_verdicts_the_list_does_not_apply_yet(built: tuple[Path, object, Path],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A verdict recorded after the render changes nothing until the next one: the audit of the old list said nothing
    of it (a review)."""
    _, _, rd = built
    assert ledger.audit(rd, _t("2026-09-02T00:00:00Z")).verdicts_since_render == 0
    assert _cli(["review", str(rd), "--finding", "f-0001", "--verdict", "dismiss", "--reason", "template text",
                 "--analyst", "ana"]) == 0
    capsys.readouterr()
    assert _cli(["audit", str(rd), "--now", "2026-09-02T00:00:00Z"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "1 verdict(s) recorded since the report was rendered are not applied to the list audited" in err
    assert ledger.audit(rd, _t("2026-09-02T00:00:00Z")).summary()["verdicts_since_render"] == 1


def test_a_ledger_saved_with_windows_line_endings_is_named_so(built: tuple[Path, object, Path],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """A ledger an editor saved with CRLF endings read as "edited by hand" (a review): the fix is a conversion."""
    _, _, rd = built
    ledger.record(rd, [ledger.check("acme", "email", "2026-09-01T09:00:00Z", "T-1")])
    path = rd / "notices.jsonl"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert _cli(["audit", str(rd), "--now", "2026-09-02T00:00:00Z"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "Windows line endings (CRLF)" in err and "dos2unix" in err


def test_analysts_who_disagree_on_a_finding_are_named_in_the_audit(built: tuple[Path, object, Path]) -> None:
    """Two analysts gave opposite verdicts: the latest decided without a word (a review)."""
    _, _, rd = built
    for analyst, verdict in (("ana", "dismiss"), ("bob", "confirm")):
        assert _cli(["review", str(rd), "--finding", "f-0001", "--verdict", verdict, "--reason", "looked",
                     "--analyst", analyst]) == 0
    rows = ledger.audit(rd, _t("2026-09-02T00:00:00Z")).rows
    said = [r["tenant_id"] for r in rows if "verdicts on finding f-0001 differ (latest: ana dismiss, bob confirm)" in r["problems"]]
    assert said and all("bob's confirm decides; settle it" in r["problems"] for r in rows if r["tenant_id"] in said)


def test_a_notice_dated_within_the_clock_skew_record_allows_counts_on_the_clock(built: tuple[Path, object, Path]) -> None:
    """`notified` accepts a notice dated a few minutes ahead (clocks differ); the audit on the clock dropped it, and
    the customer read as not notified and overdue, with no word why (a review)."""
    _, _, rd = built
    ahead = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
    ledger.record(rd, [ledger.check("acme", "email", ahead.strftime("%Y-%m-%dT%H:%M:%SZ"), "T-ahead")])
    row = {r["tenant_id"]: r for r in ledger.audit(rd).rows}["acme"]
    assert row["status"] == "notified" and row["ref"] == "T-ahead"


_LISTED = [{"tenant_id": "acme", "role": "exposed", "tier": "confirmed", "first_seen": "2026-08-28T11:00:00Z"},
           {"tenant_id": "globex", "role": "recipient", "tier": "confirmed", "first_seen": "2026-08-28T11:00:00Z"}]
_EVIDENCE = [{"finding_id": "f-0001", "relation": "cross_tenant", "recipient_tenant_id": "globex",
              "source_tenant_id": "acme", "tier": "confirmed", "tier_rule": "E1", "recipient_request_id": "r-1",
              "recipient_start": "0", "recipient_end": "40"}]


def test_analysts_whose_latest_verdicts_agree_are_no_dispute() -> None:
    """ana dismissed, then confirmed as bob did: the dispute stayed in every row for good (a second review)."""
    verdicts = [{"at": "2026-09-01T08:00:00Z", "analyst": "ana", "finding_id": "f-0001", "verdict": "dismiss", "reason": "r"},
                {"at": "2026-09-01T09:00:00Z", "analyst": "ana", "finding_id": "f-0001", "verdict": "confirm", "reason": "r"},
                {"at": "2026-09-01T10:00:00Z", "analyst": "bob", "finding_id": "f-0001", "verdict": "confirm", "reason": "r"}]
    rows = ledger._rows(_LISTED, [], _EVIDENCE, [], verdicts, [], _t(REPORT_TIME), _t("2026-09-02T00:00:00Z"), 72.0)
    assert not any("verdicts on finding" in r["problems"] for r in rows)


def test_a_customer_never_listed_whose_only_notice_is_after_the_audits_time_has_no_row() -> None:
    """It read as "notified, not on the list" while its row said the notice did not count yet (a second review)."""
    sent = [{"tenant_id": "hooli", "channel": "email", "at": "2026-09-10T08:00:00Z", "ref": "T-future",
             "recorded_at": "2026-09-10T08:00:01Z", "seq": 1}]
    rows = ledger._rows(_LISTED, [], _EVIDENCE, [], [], sent, _t(REPORT_TIME), _t("2026-09-02T00:00:00Z"), 72.0,
                        counted_until=_t("2026-09-02T00:00:00Z"))
    assert "hooli" not in {r["tenant_id"] for r in rows}


def test_a_verdict_since_the_render_does_not_move_the_deadline_of_the_list_audited() -> None:
    """A customer only an analyst's confirm put on the list: a dismiss recorded since the render (not applied to the list
    audited) took its deadline back to the report's time, before the confirm that listed it (a second review)."""
    from forensics.review.verdicts import CONFIRMED_RULE  # noqa: PLC0415

    listed = [{"tenant_id": "hooli", "role": "exposed", "tier": "confirmed", "first_seen": "2026-08-28T11:00:00Z"}]
    evidence = [{"finding_id": "f-0042", "relation": "cross_tenant", "recipient_tenant_id": "globex",
                 "source_tenant_id": "hooli", "tier": "confirmed", "tier_rule": csvfile.cell(CONFIRMED_RULE)}]
    confirm = {"at": "2026-09-05T08:00:00Z", "analyst": "ana", "finding_id": "f-0042", "verdict": "confirm", "reason": "v"}
    dismiss = {"at": "2026-09-06T08:00:00Z", "analyst": "bob", "finding_id": "f-0042", "verdict": "dismiss", "reason": "v"}
    [row] = ledger._rows(listed, [], evidence, [], [confirm, dismiss], [], _t(REPORT_TIME), _t("2026-09-06T09:00:00Z"),
                         72.0, listed_since={"hooli": REPORT_TIME}, applied=1)
    assert row["deadline"] == "2026-09-08T08:00:00Z" and row["overdue"] is False


@pytest.mark.parametrize(("given", "said"), [
    # ana confirmed f-0001, which logs added since renamed f-0009; bob dismissed f-0009 itself later: no row said the two
    # disagree (a third review)
    ([("ana", "f-0001", "confirm"), ("bob", "f-0009", "dismiss")], "(latest: ana confirm, bob dismiss): bob's dismiss"),
    # bob dismissed f-0009 itself, ana's later confirm was carried to it: the dispute named ana's confirm as deciding,
    # where a verdict on the finding itself decides (a fourth review)
    ([("bob", "f-0009", "dismiss"), ("ana", "f-0001", "confirm")], "(latest: bob dismiss, ana confirm): bob's dismiss"),
], ids=["carried_first", "own_first"])
def test_a_dispute_over_a_finding_a_verdict_was_carried_to_names_the_deciding_verdict(
        given: list[tuple[str, str, str]], said: str) -> None:
    from forensics.review.verdicts import Resolution  # noqa: PLC0415

    evidence = [dict(_EVIDENCE[0], finding_id="f-0009")]
    verdicts = [{"at": f"2026-09-01T0{8 + i}:00:00Z", "analyst": analyst, "finding_id": fid, "verdict": verdict,
                 "reason": "r"} for i, (analyst, fid, verdict) in enumerate(given)]
    rows = ledger._rows(_LISTED, [], evidence, [], verdicts, [], _t(REPORT_TIME), _t("2026-09-02T00:00:00Z"), 72.0,
                        Resolution(carried={"f-0001": ("f-0009",)}))
    assert all(f"verdicts on finding f-0009 differ {said} decides" in r["problems"] for r in rows)


def test_an_import_csv_that_does_not_exist_is_said_to_be_missing(tmp_path: Path) -> None:
    """A missing --import file was told to be "a UTF-8 CSV file" (a review): it is said not to exist."""
    with pytest.raises(ConfigError, match="the notices CSV does not exist") as err:
        list(chain.import_rows(tmp_path / "notices.csv", ("tenant_id",), "notice"))
    assert "check the path given to --import" in str(err.value)
    (tmp_path / "latin.csv").write_bytes("tenant_id\nZ\xfcrich\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="cannot read the notices CSV"):
        list(chain.import_rows(tmp_path / "latin.csv", ("tenant_id",), "notice"))
