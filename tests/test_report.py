"""The report stage on a fixture case: notification list, packets, privacy, determinism, verify."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from test_report_case import AWS_KEY, CARD, HOSTILE, PROMPTS, make_case

from forensics.cli import main
from forensics.errors import CaseError
from forensics.report import report, verify


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _notifications(report_dir: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO((report_dir / "notifications.csv").read_text(encoding="utf-8"))))


@pytest.fixture
def built(tmp_path: Path) -> tuple[Path, Path]:
    case, cfg, _ = make_case(tmp_path)
    result = report(case, cfg, tmp_path / "out")
    return case, result.report_dir


def test_output_files_of_the_contract(built: tuple[Path, Path]) -> None:
    _, rd = built
    for name in ("notifications.csv", "suspects.csv", "evidence.csv", "summary.md", "summary.html", "manifest.json"):
        assert (rd / name).is_file(), name
    header = (rd / "notifications.csv").read_text().splitlines()[0]
    assert header.startswith("tenant_id,role,tier,n_requests,request_ids,first_seen,last_seen,highest_severity,packet")


def test_notification_rows(built: tuple[Path, Path]) -> None:
    _, rd = built
    rows = {(r["tenant_id"], r["role"]): r for r in _notifications(rd)}
    acme = rows[("acme", "exposed")]
    assert acme["tier"] == "confirmed" and acme["request_ids"] == "r-acme-1"
    assert acme["highest_severity"] == "credential"
    assert acme["first_seen"] == "2026-08-28T11:00:00Z" and acme["last_seen"] == "2026-08-31T10:00:00Z"
    assert rows[("globex", "recipient")]["tier"] == "confirmed"
    assert rows[("initech", "recipient")]["tier"] == "possible"  # a suspect with no evidence is still told
    assert rows[("initech", "recipient")]["highest_severity"] == "none"
    # Same-tenant overlap is not exposure: umbrella is only a recipient, with tier possible.
    assert ("umbrella", "exposed") not in rows
    assert rows[("umbrella", "recipient")]["tier"] == "possible"
    assert not any(k[0] == "acme" and k[1] == "recipient" for k in rows)
    # Sorted by the ids as logged (before the CSV neutralising quote was added).
    keys = [(r["tenant_id"].removeprefix("'"), r["role"]) for r in _notifications(rd)]
    assert keys == sorted(keys)
    for r in rows.values():
        assert (rd / r["packet"] / "notice.json").is_file()


def _read_back(cell: str) -> str:
    """A CSV cell read back as the README's outputs section says: the value as logged."""
    def one(m: re.Match[str]) -> str:
        return {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}.get(m[1]) or chr(int(m[1][1:], 16))

    return re.sub(r"\\(\\|[tnr]|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})", one, cell.removeprefix("'"))


def test_rows_are_sorted_on_the_values_as_logged_which_the_readme_says(built: tuple[Path, Path]) -> None:
    """outputs.md promises each CSV sorted on its key columns; the fixture's =SUM(A1) is written
    '=SUM(A1) after ../../etc/passwd\\x1b..., so a check on the cells as written saw the order broken.
    The rows stay sorted on the ids as logged; before, the README said neither that nor how to read them back."""
    _, rd = built
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    assert "**Sorted on the values as logged.**" in readme and "read each cell back first" in readme
    assert _read_back("'=SUM(A1)") == "=SUM(A1)" and _read_back("a\\x1b\\\\n") == "a\x1b\\n"
    for name, key in (("notifications.csv", ("tenant_id", "role")), ("suspects.csv", ("received_at", "request_id")),
                      ("evidence.csv", ("recipient_request_id", "source_request_id"))):
        rows = list(csv.DictReader(io.StringIO((rd / name).read_text(encoding="utf-8"))))
        logged = [tuple(_read_back(r[k]) for k in key) for r in rows]
        assert logged == sorted(logged), name
    rows = _notifications(rd)
    written = [(r["tenant_id"], r["role"]) for r in rows]
    assert written != sorted(written)  # what the README warns of: the cells as written are out of order
    for r in rows:
        ids = _read_back(r["request_ids"]).split(";")
        assert ids == sorted(ids), r["request_ids"]


def test_no_packet_holds_another_tenants_id_or_text(built: tuple[Path, Path]) -> None:
    _, rd = built
    tenants = {r["tenant_id"]: r["packet"] for r in _notifications(rd)}
    # Unique phrases of each tenant's prompt (a few words each, from all over the prompt).
    phrases = {}
    for tenant, prompt in PROMPTS.items():
        words = prompt.split()
        phrases[tenant] = [" ".join(words[i:i + 3]) for i in range(1, len(words) - 2, 3)]
    raw_ids = {t.replace("\\x1b", "\x1b"): p for t, p in tenants.items()}
    for tenant, packet in raw_ids.items():
        for name in ("notice.md", "notice.json"):
            text = (rd / packet / name).read_text(encoding="utf-8")
            if name == "notice.json":
                text = json.dumps(json.loads(text), ensure_ascii=False)
            for other, other_phrases in phrases.items():
                if other == tenant:
                    continue
                assert other not in text or other in tenant, (packet, other)
                for ph in other_phrases:
                    assert ph not in text, (packet, other, ph)
            assert AWS_KEY not in text and CARD not in text  # even the owner sees only masked secrets


def test_exposed_packet_shows_own_spans_masked_with_actions(built: tuple[Path, Path]) -> None:
    _, rd = built
    packet = json.loads((rd / "packets").glob("acme-*").__next__().joinpath("notice.json").read_text())
    (req,) = packet["exposed"]["requests"]
    assert req["request_id"] == "r-acme-1"
    span = req["spans"][0]
    assert PROMPTS["acme"][span["start"]:span["end"]].startswith("Project Bluefin")
    kinds = {s["kind"] for s in span["secrets"]}
    assert kinds == {"aws_access_key_id", "card_number"}
    for s in span["secrets"]:
        assert s["masked"] in span["preview"]
        assert PROMPTS["acme"][s["start"]:s["end"]] in (AWS_KEY, CARD)
    assert any("Replace every password, key or token" in a for a in packet["actions"])
    assert all(s["reference"].startswith("ref-") and "globex" not in s["reference"] for s in req["spans"])


def test_the_teams_multi_line_texts_keep_their_lines(tmp_path: Path) -> None:
    """A multi-line [report] actions_taken or contact, or case description, written with TOML's
    triple quotes. Before, every notice.md showed them on one line with a literal \\n between."""
    case, cfg, _ = make_case(tmp_path)
    cfg.description = "Leak through the KV pool.\nSee ticket 42."
    cfg.sections["report"] = {"contact": "the incident desk\n+1 555 0100.",
                              "actions_taken": "We stopped the engine.\nWe purged the caches.\n\n- We rotated keys.\n"}
    rd = report(case, cfg, tmp_path / "out").report_dir
    md = next((rd / "packets").glob("acme-*")).joinpath("notice.md").read_text(encoding="utf-8")
    # A backslash at a line's end is a Markdown hard break; a blank line a new paragraph; each line still escaped.
    assert "## What we did\n\nWe stopped the engine.\\\nWe purged the caches.\n\n\\- We rotated keys.\n\n## What" in md
    assert "contact the incident desk\\\n\\+1 555 0100.\n" in md
    assert "\\n" not in md
    assert "| description | Leak through the KV pool.<br>See ticket 42. |" in (rd / "summary.md").read_text(encoding="utf-8")
    assert "<td>Leak through the KV pool.<br>See ticket 42.</td>" in (rd / "summary.html").read_text(encoding="utf-8")


def test_references_resolve_for_the_team(built: tuple[Path, Path]) -> None:
    _, rd = built
    refs = {r["reference"]: r for r in csv.DictReader(io.StringIO((rd / "references.csv").read_text()))}
    packet = json.loads(next((rd / "packets").glob("globex-*")).joinpath("notice.json").read_text())
    (passage,) = packet["recipient"]["requests"][0]["foreign_passages"]
    assert refs[passage["reference"]]["source_tenant_id"] == "acme"


def test_two_runs_are_byte_identical(tmp_path: Path) -> None:
    case, cfg, _ = make_case(tmp_path)
    a = report(case, cfg, tmp_path / "a").report_dir
    b = report(case, cfg, tmp_path / "b").report_dir
    assert _files(a) == _files(b)
    again = report(case, cfg, tmp_path / "a").report_dir  # rerun into the same folder
    assert _files(again) == _files(b)


def test_files_and_folders_are_private(built: tuple[Path, Path]) -> None:
    _, rd = built
    for p in [rd, *rd.rglob("*")]:
        mode = stat.S_IMODE(p.stat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))


def test_csv_cells_are_neutralised_and_hostile_ids_are_safe(built: tuple[Path, Path]) -> None:
    _, rd = built
    text = (rd / "notifications.csv").read_text(encoding="utf-8")
    assert "\x1b" not in text
    rows = _notifications(rd)
    for r in rows:
        for v in r.values():
            assert not v.startswith(("=", "+", "-", "@")), v
    formula = next(r for r in rows if "SUM(A1)" in r["tenant_id"])
    assert formula["tenant_id"] == "'=SUM(A1)" and formula["request_ids"] == "'=r-formula"
    packets = sorted(p.name for p in (rd / "packets").iterdir())
    assert len(packets) == len({r["tenant_id"] for r in rows})
    for name in packets:
        assert "/" not in name and not name.startswith(".") and len(name) <= 60 and name.isascii()
        assert (rd / "packets" / name).resolve().parent == (rd / "packets").resolve()
    hostile = next(r for r in rows if r["tenant_id"].startswith("../"))
    assert hostile["tenant_id"] == HOSTILE.replace("\x1b", "\\x1b")


def test_safe_names_do_not_collide() -> None:
    from forensics.report.safe import safe_name

    ids = ["a/b", "a_b", "a b", "A/B", "..", ".", "", "a" * 500, "a" * 501, "é", "e"]
    names = [safe_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert safe_name("a/b") == safe_name("a/b")


def test_verify_detects_changed_input_and_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case, cfg, logs = make_case(tmp_path)
    rd = report(case, cfg, tmp_path / "out").report_dir
    assert verify(rd).ok
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(rd)])
    assert exc.value.code == 0
    (logs / "gateway.jsonl").write_text('{"request_id": "tampered"}\n')
    (rd / "packets").joinpath(next((rd / "packets").iterdir()).name, "notice.md").write_text("edited")
    drift = {(d.kind, d.path, d.problem) for d in verify(rd).drift}
    assert ("input", "logs/gateway.jsonl", "changed") in drift
    assert any(k == "output" and p.endswith("notice.md") and pr == "changed" for k, p, pr in drift)
    (rd / "summary.md").unlink()
    assert ("output", "summary.md", "missing") in {(d.kind, d.path, d.problem) for d in verify(rd).drift}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(rd)])
    assert exc.value.code == 1
    assert "drift: input logs/gateway.jsonl: changed" in capsys.readouterr().out


def test_verify_with_a_relative_case_file_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case, cfg, _ = make_case(tmp_path)
    monkeypatch.chdir(tmp_path.parent)
    cfg.file = Path(tmp_path.name) / "case.toml"  # as `forensics run DIR/case.toml` gives it
    rd = report(case, cfg, tmp_path / "out").report_dir
    assert json.loads((rd / "manifest.json").read_text())["case_file"]["path"] == "case.toml"
    assert verify(rd).ok


def test_verify_still_works_after_moving_the_whole_tree(tmp_path: Path) -> None:
    case, cfg, _ = make_case(tmp_path / "here")
    report(case, cfg, tmp_path / "here" / "out")
    os.rename(tmp_path / "here", tmp_path / "there")
    assert verify(tmp_path / "there" / "out" / "test-case").ok


def test_manifest_records_inputs_parameters_versions_and_outputs(built: tuple[Path, Path]) -> None:
    _, rd = built
    man = json.loads((rd / "manifest.json").read_text())
    assert [i["path"] for i in man["inputs"]] == ["logs/decode-1_0.log", "logs/gateway.jsonl"]
    assert all(len(i["sha256"]) == 64 and i["size"] > 0 for i in man["inputs"])
    assert man["case_file"]["path"] == "case.toml"
    assert man["parameters"]["case"]["sources"]["real_ceiling_tokens"] == "file"
    assert man["parameters"]["match"]["k"] == 8
    assert "duckdb" in man["versions"] and "python" in man["versions"]
    outputs = {o["path"] for o in man["outputs"]}
    assert {"notifications.csv", "summary.html", "summary.md", "evidence.csv", "suspects.csv"} <= outputs
    assert "manifest.json" not in outputs
    text = (rd / "manifest.json").read_text()
    assert str(rd.parent.parent) not in text  # no machine-specific absolute path


def test_summary_states_gaps_and_control_rate(built: tuple[Path, Path]) -> None:
    _, rd = built
    md = (rd / "summary.md").read_text()
    assert "false-positive rate: 0.005" in md
    assert "| quarantined input lines | 1 |" in md
    assert "| orphan records (request or response half missing) | 1 |" in md
    for plot in ("plot-per-day", "plot-prompt-length", "plot-tiers"):
        assert f"(plots/{plot}.svg)" in md
        assert (rd / "plots" / f"{plot}.svg").read_text().startswith("<svg")
    html = (rd / "summary.html").read_text()
    assert html.count("<svg") == 3 and "<script" not in html
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "") and "https://" not in html


def test_no_findings_means_exit_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case, cfg, _ = make_case(tmp_path, no_findings=True)
    with pytest.raises(SystemExit) as exc:
        main(["report", "--case", str(case), "--out", str(tmp_path / "out")])
    assert exc.value.code == 0
    rd = tmp_path / "out" / "test-case"
    assert _notifications(rd) == [] and not any((rd / "packets").iterdir())
    assert "report written to" in capsys.readouterr().out


def test_findings_mean_exit_one(tmp_path: Path) -> None:
    case, _, _ = make_case(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["report", "--case", str(case), "--out", str(tmp_path / "out"), "--quiet", "--json"])
    assert exc.value.code == 1


def test_missing_stage_output_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case, cfg, _ = make_case(tmp_path)
    (case / "evidence.parquet").unlink()
    with pytest.raises(CaseError, match="forensics match"):
        report(case, cfg, tmp_path / "out")
    with pytest.raises(SystemExit) as exc:
        main(["report", "--case", str(case), "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "evidence" in err and "Traceback" not in err


def test_hostile_case_name_stays_inside_out(tmp_path: Path) -> None:
    case, cfg, _ = make_case(tmp_path, name="../../escape")
    rd = report(case, cfg, tmp_path / "out").report_dir
    assert rd.resolve().parent == (tmp_path / "out").resolve()


def test_a_request_id_holding_the_separator_is_flagged_and_kept_whole(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    case, cfg, _ = make_case(tmp_path)
    odd = "r;hostile;1"
    for table in ("exchanges", "suspects", "evidence"):
        path = case / f"{table}.parquet"
        t = pq.read_table(path)
        rows = [{k: (odd if v == "r-hostile-1" else v) for k, v in r.items()} for r in t.to_pylist()]
        pq.write_table(type(t).from_pylist(rows, schema=t.schema), path)
    rd = report(case, cfg, tmp_path / "out").report_dir
    row = next(r for r in _notifications(rd) if r["role"] == "recipient" and r["request_ids"] == odd)
    notice = json.loads((rd / row["packet"] / "notice.json").read_text(encoding="utf-8"))
    assert [r["request_id"] for r in notice["recipient"]["requests"]] == [odd]
    summary = (rd / "summary.md").read_text(encoding="utf-8").replace("\\", "")  # Markdown escapes
    assert "contains ';'" in summary and row["packet"] in summary


def test_an_address_in_an_id_is_no_link_in_the_markdown(tmp_path: Path) -> None:
    """GFM (GitHub, GitLab) makes a link of a bare http(s)://, www. or email address. Before, a tenant
    named like a password-reset page was a link in summary.md and in its own notice.md."""
    import pyarrow.parquet as pq

    case, cfg, _ = make_case(tmp_path)
    hostile = {"umbrella": "https://evil.example/reset-password", "initech": "WWW.evil.example", "globex": "it@evil.example"}
    for table in ("exchanges", "suspects", "evidence"):
        path = case / f"{table}.parquet"
        t = pq.read_table(path)
        rows = [{k: hostile.get(v, v) if isinstance(v, str) else v for k, v in r.items()} for r in t.to_pylist()]
        pq.write_table(type(t).from_pylist(rows, schema=t.schema), path)
    rd = report(case, cfg, tmp_path / "out").report_dir
    # Escaped where the autolink begins (an element splits an email, which cmark-gfm finds past escapes).
    shown = {"https\\://evil.example/reset-password", "WWW\\.evil.example", "it<wbr>@evil.example"}
    summary = (rd / "summary.md").read_text(encoding="utf-8")
    titles = {(rd / r["packet"] / "notice.md").read_text(encoding="utf-8").splitlines()[0] for r in _notifications(rd)}
    for cell in shown:
        assert f"| {cell} | recipient |" in summary
        assert f"# Notice of a data incident: {cell}" in titles
    for md in [summary, *(p.read_text(encoding="utf-8") for p in rd.glob("packets/*/notice.md"))]:
        assert not any(raw in md for raw in hostile.values())
    assert {r["tenant_id"] for r in _notifications(rd)} >= set(hostile.values())  # the CSVs keep the ids as they are
    assert verify(rd).ok


def test_every_csv_column_is_a_column_of_its_table() -> None:
    # The CSV files are listed once, in the schema module, and hold only columns their table has.
    from forensics import schema

    for columns, table in ((schema.SUSPECTS_CSV, schema.SUSPECTS), (schema.EVIDENCE_CSV, schema.EVIDENCE),
                           (schema.REVIEW_CSV, schema.REVIEW)):
        assert len(set(columns)) == len(columns)
        assert set(columns) <= set(table.names), set(columns) - set(table.names)
    # The match stage builds each finding's row once, with the review CSV's columns, for both its table and
    # its CSV: a table column missing there would be written as nulls without a word.
    for table in (schema.EVIDENCE, schema.REVIEW):
        assert set(table.names) <= set(schema.REVIEW_CSV), set(table.names) - set(schema.REVIEW_CSV)


def _edit_record(path: Path, edit: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.mark.parametrize(("name", "edit", "says"), [
    # A record an older forensics wrote, before the records carried their format.
    ("scan.json", lambda d: d.pop("format"), "format is None, expected 'forensics-scan/1'"),
    ("match.json", lambda d: d["control"].pop("size"), "the record has no control.size"),
    ("match.json", lambda d: d["control"].update(false_positive_rate="low"), "control.false_positive_rate is a string"),
    ("manifest.json", lambda d: d.update(notes="none"), "notes is a string, expected an array"),
])
def test_a_bad_stage_record_is_an_error_naming_file_and_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            name: str, edit: Any, says: str) -> None:
    case, cfg, _ = make_case(tmp_path)
    _edit_record(case / name, edit)
    with pytest.raises(CaseError) as exc:
        report(case, cfg, tmp_path / "out")
    assert says in exc.value.message and exc.value.file == str(case / name)
    assert exc.value.fix and "re-run the stage" in exc.value.fix
    with pytest.raises(SystemExit) as code:
        main(["report", "--case", str(case), "--out", str(tmp_path / "out"), "--quiet"])
    assert code.value.code == 2
    err = capsys.readouterr().err
    assert name in err and "Traceback" not in err and "KeyError" not in err
    assert not (tmp_path / "out" / "test-case").exists()  # nothing half-written


@pytest.mark.parametrize(("name", "stage"), [("scan.json", "scan"), ("match.json", "match"), ("manifest.json", "ingest")])
def test_a_missing_stage_record_names_the_stage_to_run(tmp_path: Path, name: str, stage: str) -> None:
    case, cfg, _ = make_case(tmp_path)
    (case / name).unlink()
    with pytest.raises(CaseError, match=f"{name} does not exist") as exc:
        report(case, cfg, tmp_path / "out")
    assert exc.value.fix == f"run `forensics {stage}` first"


def test_the_summary_reads_the_typed_records(built: tuple[Path, Path]) -> None:
    # What the summary shows comes from the records' fields: the control sample, what was searched, the scope.
    case, rd = built
    md = (rd / "summary.md").read_text(encoding="utf-8")
    assert "run over 200 non-suspect responses found cross-tenant passages in 1 of them" in md
    assert "| lookback | off |" in md and "| records | 7 |" in md
    assert "| real_ceiling_tokens | 681280 |" in md
    man = json.loads((rd / "manifest.json").read_text(encoding="utf-8"))
    ingest = json.loads((case / "manifest.json").read_text(encoding="utf-8"))
    assert man["reconciliation"] == {k: ingest[k] for k in ("tables", "reconciled", "notes", "timezone", "zone_assumed_rows",
                                                            "tenant_field", "tokenizer", "skipped_inputs")}
    assert man["parameters"]["scan"]["window_end"] == "2026-09-02T00:00:00Z"
