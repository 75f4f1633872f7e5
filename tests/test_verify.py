"""A verify an auditor can trust (issue 11, item 7): internal consistency, --rerun, the manifest's
SHA-256 and Ed25519 signatures."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_report_case import make_case
from test_run import write_logs

from forensics import schema
from forensics.case import write_table
from forensics.cli import main
from forensics.report import report, verify


def _call(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


def _rehash(report_dir: Path, *changed: str) -> None:
    """What a careful tamperer does: make manifest.json list the edited files' new hashes."""
    path = report_dir / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    present = {p.relative_to(report_dir).as_posix() for p in report_dir.rglob("*") if p.is_file()}
    man["outputs"] = [o for o in man["outputs"] if o["path"] in present]
    listed = {o["path"] for o in man["outputs"]}
    for rel in changed:
        data = (report_dir / rel).read_bytes()
        entry = {"path": rel, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        if rel in listed:
            man["outputs"] = [entry if o["path"] == rel else o for o in man["outputs"]]
        else:
            man["outputs"] = sorted(man["outputs"] + [entry], key=lambda o: o["path"])
    path.write_text(json.dumps(man, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")


def _problems(report_dir: Path, **kwargs: object) -> list[str]:
    return [str(d) for d in verify(report_dir, **kwargs).drift]  # type: ignore[arg-type]


@pytest.fixture
def built(tmp_path: Path) -> Path:
    case, cfg, _ = make_case(tmp_path)
    report_dir = report(case, cfg, tmp_path / "out").report_dir
    assert verify(report_dir).ok  # the fixture holds hostile and formula-like tenant ids
    return report_dir


def _notification_lines(report_dir: Path) -> list[bytes]:
    return (report_dir / "notifications.csv").read_bytes().split(b"\r\n")


def test_a_request_id_starting_with_a_quote_after_the_first_verifies(tmp_path: Path) -> None:
    """suspects.csv writes the id 'r as ''r, while in notifications.csv's request_ids only the first
    id carries the neutralising quote, so a later 'r stays bare. Before, verify stripped the added
    quote only before a formula character and called an honest report drift."""
    case, cfg, _ = make_case(tmp_path)
    table = pq.read_table(case / "suspects.parquet").to_pylist()
    initech = next(s for s in table if s["request_id"] == "r-initech-1")
    table += [dict(initech, request_id=rid) for rid in ("&r-initech-2", "'r-initech-3")]
    write_table(case / "suspects.parquet", pa.Table.from_pylist(table, schema=schema.SUSPECTS), schema.SUSPECTS)
    report_dir = report(case, cfg, tmp_path / "out").report_dir
    rows = [line for line in _notification_lines(report_dir) if line.startswith(b"initech,recipient,")]
    assert b",&r-initech-2;'r-initech-3;r-initech-1," in rows[0]
    assert b"''r-initech-3,initech," in (report_dir / "suspects.csv").read_bytes()
    assert verify(report_dir).ok, _problems(report_dir)


def test_a_deleted_notification_row_fails_verify_even_with_the_hash_fixed(built: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = _notification_lines(built)
    removed = next(line for line in lines if b",exposed," in line)
    tenant = removed.split(b",")[0].decode()
    (built / "notifications.csv").write_bytes(b"\r\n".join(line for line in lines if line != removed))
    _rehash(built, "notifications.csv")
    problems = _problems(built)
    assert f"consistency notifications.csv: no row for tenant {tenant!r} role exposed, which suspects.csv and evidence.csv call for" in problems
    assert any(p.startswith("consistency manifest.json: counts.notifications is") for p in problems)
    assert any(p.startswith("consistency summary.md: 'customers exposed' says") for p in problems)
    code, out, _ = _call(["verify", str(built)], capsys)
    assert code == 1 and "DRIFT" in out and "no row for tenant" in out


def test_an_edited_tier_or_request_list_is_named(built: Path) -> None:
    lines = _notification_lines(built)
    i = next(i for i, line in enumerate(lines) if b",recipient,confirmed," in line)
    lines[i] = lines[i].replace(b",recipient,confirmed,", b",recipient,possible,")
    (built / "notifications.csv").write_bytes(b"\r\n".join(lines))
    _rehash(built, "notifications.csv")
    assert any("tier is 'possible', the evidence gives 'confirmed'" in p for p in _problems(built))
    lines[i] = lines[i].replace(b",recipient,possible,1,r-globex-1,", b",recipient,confirmed,2,r-globex-1;r-invented,")
    (built / "notifications.csv").write_bytes(b"\r\n".join(lines))
    _rehash(built, "notifications.csv")
    problems = _problems(built)
    assert "consistency notifications.csv: tenant 'globex' role recipient: n_requests is '2', the evidence gives '1'" in problems
    assert ("consistency notifications.csv: tenant 'globex' role recipient: request_ids is 'r-globex-1;r-invented', "
            "the evidence gives 'r-globex-1'") in problems


def test_an_invented_row_is_named(built: Path) -> None:
    lines = _notification_lines(built)
    header, rows = lines[0], [line for line in lines[1:] if line]
    fake = rows[0].split(b",")
    fake[0] = b"innocent-bystander"
    (built / "notifications.csv").write_bytes(b"\r\n".join([header, *rows, b",".join(fake), b""]))
    _rehash(built, "notifications.csv")
    problems = _problems(built)
    assert any("row for tenant 'innocent-bystander'" in p and "follows from no suspect or finding" in p for p in problems)


def test_packets_follow_from_the_notifications(built: Path) -> None:
    packets = sorted((built / "packets").iterdir())
    shutil.rmtree(packets[0])
    extra = built / "packets" / "someone-else"
    shutil.copytree(packets[1], extra)
    _rehash(built, "packets/someone-else/notice.json", "packets/someone-else/notice.md")
    problems = _problems(built)
    assert any(p.startswith(f"consistency packets/{packets[0].name}: no packet for tenant") for p in problems)
    assert "consistency packets/someone-else: packet for no row of notifications.csv" in problems


def test_summary_counts_follow_from_the_tables(built: Path) -> None:
    md = (built / "summary.md").read_text(encoding="utf-8")
    assert "| suspect responses | " in md
    edited = "\n".join(line.replace(line.split("|")[2], " 0 ") if line.startswith("| suspect responses |") else line
                       for line in md.splitlines()) + "\n"
    (built / "summary.md").write_text(edited, encoding="utf-8")
    _rehash(built, "summary.md")
    assert any(p.startswith("consistency summary.md: 'suspect responses' says 0, the tables give") for p in _problems(built))


@pytest.fixture
def run_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    write_logs(tmp_path / "incident")
    (tmp_path / "keys").mkdir()
    code, _, _ = _call(["keygen", str(tmp_path / "keys" / "team.pem")], capsys)
    assert code == 0
    code, out, _ = _call(["run", str(tmp_path / "incident"), "--out", str(tmp_path / "out"), "--json", "-q",
                          "--sign", str(tmp_path / "keys" / "team.pem")], capsys)
    assert code == 1
    summary = json.loads(out)
    report_dir = Path(summary["report"])
    assert summary["manifest_sha256"] == hashlib.sha256((report_dir / "manifest.json").read_bytes()).hexdigest()
    return report_dir, summary["manifest_sha256"]


def test_the_run_prints_the_manifest_hash_and_verify_repeats_it(run_report: tuple[Path, str],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    report_dir, digest = run_report
    code, out, _ = _call(["verify", str(report_dir)], capsys)
    assert code == 0 and f"manifest.json SHA-256: {digest}" in out


def test_a_signed_report_verifies_with_its_public_key_only(run_report: tuple[Path, str], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    report_dir, _ = run_report
    public = tmp_path / "keys" / "team.pem.pub"
    assert (report_dir / "manifest.json.sig").is_file()
    code, out, _ = _call(["verify", str(report_dir), "--key", str(public)], capsys)
    assert code == 0 and "signature: valid" in out

    code, _, _ = _call(["keygen", str(tmp_path / "keys" / "other.pem")], capsys)
    code, out, _ = _call(["verify", str(report_dir), "--key", str(tmp_path / "keys" / "other.pem.pub")], capsys)
    assert code == 1 and "signature: invalid" in out and "manifest.json.sig: does not match manifest.json" in out

    # Tampering that re-hashes everything still breaks the signature.
    (report_dir / "summary.md").write_text("nothing happened\n", encoding="utf-8")
    _rehash(report_dir, "summary.md")
    code, out, _ = _call(["verify", str(report_dir), "--key", str(public), "--json"], capsys)
    assert code == 1 and json.loads(out)["signature"] == "invalid"


def test_signing_problems_are_clear_errors(run_report: tuple[Path, str], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    report_dir, _ = run_report
    code, _, err = _call(["verify", str(report_dir), "--key", str(tmp_path / "missing.pub")], capsys)
    assert code == 2 and "cannot read the key file" in err and "Traceback" not in err
    code, _, err = _call(["keygen", str(tmp_path / "keys" / "team.pem")], capsys)
    assert code == 2 and "already exists" in err
    (tmp_path / "not-a-key.pem").write_text("hello\n")
    code, _, err = _call(["run", str(tmp_path / "incident"), "--out", str(tmp_path / "out2"), "--sign",
                          str(tmp_path / "not-a-key.pem")], capsys)
    assert code == 2 and "not an unencrypted PEM private key" in err and not (tmp_path / "out2").exists()
    # A later unsigned run into the same place leaves no stale signature behind; --key then says so.
    code, _, _ = _call(["run", str(tmp_path / "incident"), "--out", str(tmp_path / "out"), "-q"], capsys)
    assert not (report_dir / "manifest.json.sig").exists()
    assert verify(report_dir).ok  # the signature is never one of the outputs the manifest lists
    code, out, _ = _call(["verify", str(report_dir), "--key", str(tmp_path / "keys" / "team.pem.pub")], capsys)
    assert code == 1 and "signature: missing" in out


def test_signing_again_over_a_signed_report(run_report: tuple[Path, str], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    report_dir, _ = run_report
    code, _, _ = _call(["run", str(tmp_path / "incident"), "--out", str(tmp_path / "out"), "-q",
                        "--sign", str(tmp_path / "keys" / "team.pem")], capsys)
    code, out, _ = _call(["verify", str(report_dir), "--key", str(tmp_path / "keys" / "team.pem.pub")], capsys)
    assert code == 0 and "signature: valid" in out and "drift" not in out


def test_rerun_passes_untouched_and_names_a_changed_file(run_report: tuple[Path, str],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    report_dir, _ = run_report
    code, out, _ = _call(["verify", str(report_dir), "--rerun"], capsys)
    assert code == 0 and "re-run compared byte for byte" in out, out
    # An edit consistent with the tables and the manifest: only a re-run can see it.
    md = (report_dir / "summary.md").read_text(encoding="utf-8")
    (report_dir / "summary.md").write_text(md.replace("Incident summary", "Incident summary (reviewed)"), encoding="utf-8")
    _rehash(report_dir, "summary.md")
    assert verify(report_dir).ok
    code, out, _ = _call(["verify", str(report_dir), "--rerun"], capsys)
    assert code == 1
    assert "drift: rerun summary.md: differs from the re-run's bytes" in out
    assert "drift: rerun manifest.json: 'outputs' differs from the re-run's" in out


def test_a_packet_holding_another_customers_notice_is_named(built: Path) -> None:
    acme = next(p for p in (built / "packets").iterdir() if p.name.startswith("acme-"))
    globex = next(p for p in (built / "packets").iterdir() if p.name.startswith("globex-"))
    shutil.copyfile(globex / "notice.json", acme / "notice.json")
    _rehash(built, f"packets/{acme.name}/notice.json")
    problems = _problems(built)
    assert (f"consistency packets/{acme.name}/notice.json: is the notice of tenant 'globex' (packet packets/{globex.name}), "
            "not of 'acme' as notifications.csv says") in problems


def test_rerun_of_a_report_built_stage_by_stage_with_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "incident")
    case = str(tmp_path / "case")
    _call(["ingest", str(logs / "gateway"), "--case", case, "-q"], capsys)
    _call(["scan", "--case", case, "--model", "glm-5.3", "--window-start", "2026-08-27T00:00:00Z",
           "--window-end", "2026-09-09T00:00:00Z", "--ceiling", "2000", "-q"], capsys)
    _call(["match", "--case", case, "--k", "6", "--control-size", "3", "-q"], capsys)
    code, out, _ = _call(["report", "--case", case, "--out", str(tmp_path / "out"), "--json", "-q"], capsys)
    assert code == 1  # the leak is found
    report_dir = Path(json.loads(out)["report"])
    assert json.loads((report_dir / "match.json").read_text())["parameters"]["k"] == 6
    assert verify(report_dir, rerun=True).ok
    (logs / "gateway" / "spend.jsonl").unlink()
    problems = _problems(report_dir, rerun=True)
    assert any(p.startswith("input spend.jsonl: missing (looked for at ") for p in problems)  # relative to their common folder
    assert "rerun manifest.json: not re-run: the recorded input spend.jsonl is missing (give --inputs FOLDER when the inputs moved)" in problems


def test_rerun_of_a_stage_by_stage_report_whose_log_folder_holds_other_files(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`forensics ingest incident/` on a folder holding a README beside the logs (as sample_logs does), then
    the stages one by one: the re-run named each recorded file, the README too, and stopped on it ("cannot
    tell the format of this file") where the ingest of the folder had made it a quarantine row."""
    logs = write_logs(tmp_path / "incident")
    (logs / "README.md").write_text("# Incident 4711\nLogs exported on 2026-09-10.\n", encoding="utf-8")
    case = str(tmp_path / "case")
    _call(["ingest", str(logs), "--case", case, "-q"], capsys)
    _call(["scan", "--case", case, "--model", "glm-5.3", "--window-start", "2026-08-27T00:00:00Z",
           "--window-end", "2026-09-09T00:00:00Z", "--ceiling", "2000", "-q"], capsys)
    _call(["match", "--case", case, "-q"], capsys)
    code, out, _ = _call(["report", "--case", case, "--out", str(tmp_path / "out"), "--json", "-q"], capsys)
    report_dir = Path(json.loads(out)["report"])
    statuses = {Path(f["path"]).name: f["status"] for f in json.loads((Path(case) / "manifest.json").read_text())["files"]}
    assert statuses["README.md"] == "skipped: format not recognised"
    code, out, err = _call(["verify", str(report_dir), "--rerun"], capsys)
    assert code == 0, out + err
    assert "re-run compared byte for byte" in out


def _stages(logs: Path, case: str, capsys: pytest.CaptureFixture[str], *ingest: str) -> None:
    """Scan and match ``case`` with the case file of ``logs``, after ingesting ``ingest`` (paths and options)."""
    assert _call(["ingest", *ingest, "--case", case, "-q"], capsys)[0] == 0
    _call(["scan", "--case", case, "--config", str(logs / "case.toml"), "-q"], capsys)
    _call(["match", "--case", case, "-q"], capsys)


def test_report_refuses_a_case_file_whose_inputs_the_case_did_not_ingest(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A case ingested from one log of the incident, reported with the case file of the whole incident:
    the manifest named the case file's inputs as the report's, and verify --rerun ingested them all and
    called the report drifted in 36 places (tried on sample_logs: the gateway folder ingested alone)."""
    logs = write_logs(tmp_path / "incident")
    (logs / "gateway" / "more.jsonl").write_text((logs / "gateway" / "spend.jsonl").read_text().replace("r-", "m-"))
    case = str(tmp_path / "case")
    _stages(logs, case, capsys, str(logs / "gateway" / "spend.jsonl"), "--config", str(logs / "case.toml"))
    code, out, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2, out + err
    assert "inputs include 1 file this case did not ingest" in err and "more.jsonl" in err
    assert "Fix: ingest the logs again with this case file" in err
    assert not (tmp_path / "out").exists()


def test_report_refuses_a_case_file_that_leaves_out_an_ingested_file_or_reads_another_zone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "incident")
    other = tmp_path / "other.jsonl"
    other.write_text((logs / "gateway" / "spend.jsonl").read_text().replace("r-", "o-"))
    case = str(tmp_path / "case")
    _stages(logs, case, capsys, str(logs / "gateway"), str(other), "--timezone", "Europe/Paris")
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    assert "timezone = UTC (the ingest used Europe/Paris)" in err
    assert "inputs leave out 1 file this case ingested" in err and "other.jsonl" in err


def test_report_refuses_a_case_file_whose_re_run_would_name_or_read_its_logs_otherwise(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by a review of the check's first form, which compared where the files lie. Each was accepted,
    and verify --rerun called the report drifted: logs ingested without the case file (the tables name them
    by another path than a re-run from the case file does); a README in a folder the case file reads as
    litellm (sniffed, it was no log; forced, it is a quarantined line); a log ingested in two versions."""
    from forensics.ingest import reader

    logs = write_logs(tmp_path / "incident")
    case = str(tmp_path / "case")
    _stages(logs, case, capsys, str(logs / "gateway"))  # no case file: named from the working folder
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "1 file this case recorded under another name" in err, err

    (logs / "gateway" / "README.md").write_text("# notes\n", encoding="utf-8")
    case = str(tmp_path / "case-readme")
    _stages(logs, case, capsys, str(logs / "gateway"), "--config", str(logs / "case.toml"))
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and ("inputs read 1 file otherwise than the ingest did (gateway/README.md: skipped: format not recognised, "
                          "here litellm)") in err, err
    (logs / "gateway" / "README.md").unlink()

    case = str(tmp_path / "case-versions")
    log = logs / "gateway" / "spend.jsonl"
    whole = log.read_text(encoding="utf-8")
    log.write_text(whole.splitlines(keepends=True)[0], encoding="utf-8")
    _stages(logs, case, capsys, str(logs / "gateway"), "--config", str(logs / "case.toml"))
    log.write_text(whole.replace("r-", "v-"), encoding="utf-8")  # other content under the same name
    _stages(logs, case, capsys, str(logs / "gateway"), "--config", str(logs / "case.toml"))
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "1 file ingested in more than one version under that name" in err, err

    # A file no ingested file has the size of is refused without being read.
    (logs / "gateway" / "big.jsonl").write_bytes(b"{}\n" * 100_000)
    monkeypatch.setattr(reader, "sha256_file", lambda *a, **k: pytest.fail("hashed a file no ingested file has the size of"))
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "this case did not ingest (gateway/big.jsonl)" in err, err


def test_verify_rerun_of_a_run_whose_folder_holds_a_file_it_skips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A UTF-16 export in the gateway folder is skipped ("not UTF-8") whatever the format the case file gives:
    the check's second form read its missing format as another reading, and verify --rerun of the run's own
    report stopped with exit 2 (found by a review)."""
    logs = write_logs(tmp_path / "incident")
    (logs / "gateway" / "export-utf16.jsonl").write_text((logs / "gateway" / "spend.jsonl").read_text().splitlines()[0],
                                                         encoding="utf-16")
    code, out, err = _call(["run", str(logs / "case.toml"), "--out", str(tmp_path / "out"), "--json", "-q"], capsys)
    assert code == 1, out + err
    code, out, err = _call(["verify", str(tmp_path / "out" / "e2e"), "--rerun"], capsys)
    assert code == 0 and "0 problem(s)" in out, out + err


def test_report_refuses_a_reading_the_case_file_would_not_repeat(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a review, each accepted with a re-run that drifts: the case file leaves the format to sniffing
    but the ingest forced it (a README read as litellm); the ingest decided rows by their size against another
    ceiling than the case file's (with a tokenizer); a link out of the folder the ingest never saw."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    logs = write_logs(tmp_path / "incident")
    (logs / "gateway" / "README.md").write_text("# notes\nsome text\n", encoding="utf-8")
    (logs / "case.toml").write_text((logs / "case.toml").read_text().replace('format = "litellm"\n', ""), encoding="utf-8")
    case = str(tmp_path / "case")
    _stages(logs, case, capsys, str(logs / "gateway"), "--format", "litellm", "--config", str(logs / "case.toml"))
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "(gateway/README.md: litellm, here sniffed again)" in err, err
    (logs / "gateway" / "README.md").unlink()

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(logs / "tokenizer.json"))
    text = (logs / "case.toml").read_text()
    (logs / "case.toml").write_text(text.replace('real_ceiling_tokens = 2000', 'real_ceiling_tokens = 2000\ntokenizer = "tokenizer.json"'),
                                    encoding="utf-8")
    (logs / "ingest.toml").write_text(text.replace('real_ceiling_tokens = 2000', 'real_ceiling_tokens = 1500\ntokenizer = "tokenizer.json"'),
                                      encoding="utf-8")
    case = str(tmp_path / "case-ceiling")
    _stages(logs, case, capsys, str(logs / "gateway"), "--config", str(logs / "ingest.toml"))
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "real_ceiling_tokens = 2000 at ingest (the ingest decided rows by their size against 1500)" in err, err
    shutil.copy(logs / "tokenizer.json", logs / "copy.json")  # the same tokenizer under another name: the manifest names it
    (logs / "copy.toml").write_text((logs / "case.toml").read_text().replace("tokenizer.json", "copy.json"), encoding="utf-8")
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "copy.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "tokenizer = copy.json (the ingest used tokenizer.json)" in err, err

    (logs / "case.toml").write_text(text, encoding="utf-8")
    case = str(tmp_path / "case-link")
    _stages(logs, case, capsys, str(logs / "gateway"), "--config", str(logs / "case.toml"))
    (logs / "gateway" / "old.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "inputs hold other entries that are not read than the ingest found (gateway/old.jsonl" in err, err


def test_report_refuses_another_mapping_profile_or_a_missing_input_beside_unread_files_and_reads_odd_manifests(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the first review: another mapping profile in the case file passed (its re-run drifts); one
    input that cannot be listed turned the whole comparison off; a hand-edited manifest's odd values were
    internal errors."""
    golden = Path(__file__).parent / "golden" / "ingest" / "mapped_json_array"
    logs = tmp_path / "mapped"
    shutil.copytree(golden, logs)
    case = str(tmp_path / "case-mapped")
    _stages(logs, case, capsys, "--format", "mapped", "--config", str(logs / "case.toml"), str(logs / "export.json"))
    text = (logs / "case.toml").read_text(encoding="utf-8")
    (logs / "case.toml").write_text(text.replace('tenant_id = "tenant.name"', 'tenant_id = "model"'), encoding="utf-8")
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "(export.json: another mapping profile)" in err, err

    logs = write_logs(tmp_path / "incident")
    case = str(tmp_path / "case")
    _stages(logs, case, capsys, str(logs / "gateway"), "--config", str(logs / "case.toml"))
    (logs / "gateway" / "later.jsonl").write_text((logs / "gateway" / "spend.jsonl").read_text().replace("r-", "l-"))
    (logs / "case.toml").write_text((logs / "case.toml").read_text() + '[[inputs]]\nformat = "litellm"\npath = "archive"\n')
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "1 file this case did not ingest (gateway/later.jsonl)" in err, err

    manifest = Path(case) / "manifest.json"
    data = json.loads(manifest.read_text(encoding="utf-8"))
    data["files"][0]["size"] = [data["files"][0]["size"]]
    data["files"][0]["paths"] = ["gateway/spend.jsonl", 7]
    data["files"].append({"path": "x\u0000y", "abs_paths": ["/nowhere/\u0000"], "sha256": ["not", "a", "hash"]})
    manifest.write_text(json.dumps(data), encoding="utf-8")
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "internal error" not in err and "did not ingest" in err, err


def test_report_takes_the_case_file_the_ingest_used_and_refuses_a_copy_of_its_logs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The case file the ingest read is accepted, and its report re-runs byte for byte. A copy of the same
    logs elsewhere is refused: the manifest records where the inputs were read, so a re-run from the copy
    records other paths (and verify calls the manifest's inputs drifted)."""
    logs = write_logs(tmp_path / "incident")
    case = str(tmp_path / "case")
    _stages(logs, case, capsys, str(logs / "gateway"), "--config", str(logs / "case.toml"))
    copy = tmp_path / "copy"
    shutil.copytree(logs, copy)
    code, _, err = _call(["report", "--case", case, "--config", str(copy / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "inputs include 1 file this case ingested from another folder" in err, err
    code, out, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out"),
                            "--json", "-q"], capsys)
    assert code == 1, out + err  # the leak is found
    assert verify(Path(json.loads(out)["report"]), rerun=True).ok
    with (logs / "gateway" / "spend.jsonl").open("a", encoding="utf-8") as log:  # the log grew since
        log.write("\n")
    code, _, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "changed in size since the ingest read them" in err, err


def test_parameters_the_manifest_says_came_from_the_case_file_must_be_the_case_files(
        run_report: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    """A report built with a later window_start (fewer customers told), its manifest pointed back at the
    honest, unchanged case.toml: the re-run took the window from the manifest, built the same short list
    and said OK. The case file is hashed, so what the manifest says came from it is checked against it."""
    report_dir, _ = run_report
    path = report_dir / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    assert man["parameters"]["case"]["sources"]["window_start"] == "file"
    man["parameters"]["case"]["values"]["window_start"] = "2026-08-28T10:30:00Z"
    man["parameters"]["case"]["values"]["sections"] = {"match": {"probable_evalue": 0.5}}
    path.write_text(json.dumps(man, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    problems = _problems(report_dir)
    assert any("window_start" in p and "2026-08-27T00:00:00Z" in p and p.startswith("case_file") for p in problems), problems
    assert any("[match]" in p or "sections" in p for p in problems), problems
    code, out, _ = _call(["verify", str(report_dir), "--rerun"], capsys)
    assert code == 1 and "window_start" in out


def test_a_hidden_file_in_a_packet_folder_is_named(built: Path) -> None:
    """Packets are what is sent to customers: a stray hidden file in one would ship with it. Before,
    verify passed over hidden files at any depth."""
    packet = sorted(p for p in (built / "packets").iterdir() if p.is_dir())[0]
    (packet / ".notes.md").write_text("internal: ask legal before sending\n", encoding="utf-8")
    rel = (packet / ".notes.md").relative_to(built).as_posix()
    assert f"output {rel}: unexpected" in _problems(built)


def test_a_manifest_that_excludes_the_packets_from_its_outputs_does_not_hide_a_file_in_one(built: Path) -> None:
    """Verify took the folders to leave out from the manifest's own outputs_excluded: one word added there, and a
    file added to a packet went unseen (exit 0). A report only ever leaves out its case folder."""
    packet = sorted(p for p in (built / "packets").iterdir() if p.is_dir())[0]
    (packet / "extra.md").write_text("another customer's text\n", encoding="utf-8")
    path = built / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    man["outputs_excluded"] = sorted({*man["outputs_excluded"], "packets"})
    path.write_text(json.dumps(man, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    problems = _problems(built)
    assert f"output {(packet / 'extra.md').relative_to(built).as_posix()}: unexpected" in problems, problems
    assert any("outputs_excluded" in p and "packets" in p for p in problems), problems


@pytest.mark.parametrize(("where", "value"), [("inputs", None), ("outputs", 7), ("case_file", None)])
def test_a_manifest_with_a_path_that_is_not_a_string_is_a_clear_error(run_report: tuple[Path, str],
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       where: str, value: object) -> None:
    """Before, an input entry whose path was null stopped verify with an internal error (a traceback's
    TypeError, "this is a bug in forensics")."""
    report_dir, _ = run_report
    path = report_dir / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    if where == "case_file":
        man["case_file"]["path"] = value
    else:
        man[where][0]["path"] = value
    path.write_text(json.dumps(man), encoding="utf-8")
    code, out, err = _call(["verify", str(report_dir)], capsys)
    assert code == 2 and "manifest.json is not a report manifest" in err and "internal error" not in err, err
    assert f"{where}" in err


def test_a_recorded_parameter_of_the_wrong_type_names_the_manifest_not_the_case_file(
        run_report: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    report_dir, _ = run_report
    path = report_dir / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    man["parameters"]["case"]["values"]["window_start"] = 5
    path.write_text(json.dumps(man), encoding="utf-8")
    code, out, err = _call(["verify", str(report_dir), "--rerun"], capsys)
    assert code == 2 and "manifest.json records no usable case parameters" in err, (out, err)


def test_rerun_compares_the_manifest_byte_for_byte(run_report: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    """A second "counts" key saying nobody is to be told reads as the first to one JSON reader and as the
    second to another. Before, --rerun compared the parsed manifests and said OK."""
    report_dir, _ = run_report
    path = report_dir / "manifest.json"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('{\n  "case"', '{\n  "counts": {"notifications": 0, "packets": 0},\n  "case"', 1),
                    encoding="utf-8")
    code, out, _ = _call(["verify", str(report_dir), "--rerun"], capsys)
    assert code == 1 and "drift: rerun manifest.json" in out, out


def test_inputs_given_through_a_symlink_verify_as_through_the_folder(run_report: tuple[Path, str]) -> None:
    """The case file's paths are resolved; the root --inputs names was not (a mount alias, macOS's /tmp):
    every input then read as a different path than the manifest's, a drift on an untouched report."""
    report_dir, _ = run_report
    incident = report_dir.parents[1] / "incident"
    alias = report_dir.parents[1] / "alias"
    alias.symlink_to(incident, target_is_directory=True)
    assert verify(report_dir, inputs_root=incident).ok
    assert verify(report_dir, inputs_root=alias).ok, _problems(report_dir, inputs_root=alias)


@pytest.mark.parametrize("what", ["packet_folder", "file"])
def test_a_symbolic_link_in_a_report_is_named(built: Path, tmp_path: Path, what: str) -> None:
    """A packet folder replaced by a link to a copy holding one more file (or a file replaced by a link to
    an identical copy) verified OK: the link was followed and the extra file never seen, while anything
    that follows links (a zip, cp -rL) ships it to the customer. A report holds files only."""
    packet = sorted(p for p in (built / "packets").iterdir() if p.is_dir())[0]
    elsewhere = tmp_path / "elsewhere"
    if what == "packet_folder":
        shutil.copytree(packet, elsewhere)
        (elsewhere / "extra-notes.md").write_text("internal: ask legal before sending\n", encoding="utf-8")
        shutil.rmtree(packet)
        packet.symlink_to(elsewhere, target_is_directory=True)
        link = packet
    else:
        link = built / "notifications.csv"
        shutil.copy(link, elsewhere)
        link.unlink()
        link.symlink_to(elsewhere)
    rel = link.relative_to(built).as_posix()
    assert any(p.startswith(f"output {rel}: a symbolic link") for p in _problems(built)), _problems(built)


def test_a_case_folder_moved_and_linked_back_is_no_drift(run_report: tuple[Path, str], tmp_path: Path) -> None:
    """The case folder beside the outputs is not one of them: a link to it is no output (nothing ships)."""
    rd, _ = run_report
    assert (rd / "case").is_dir() and _problems(rd) == []
    shutil.move(rd / "case", tmp_path / "case-elsewhere")
    (rd / "case").symlink_to(tmp_path / "case-elsewhere", target_is_directory=True)
    assert _problems(rd) == []


@pytest.mark.parametrize("entries", ["x", -1, [1], True])
def test_a_ledger_line_count_that_is_not_a_whole_number_is_drift(run_report: tuple[Path, str],
                                                                 capsys: pytest.CaptureFixture[str], entries: object) -> None:
    """Before, verify stopped with an internal error (ValueError, TypeError, IndexError: "this is a bug")."""
    report_dir, _ = run_report
    assert _call(["review", str(report_dir), "--finding", _a_finding(report_dir), "--verdict", "escalate",
                  "--analyst", "A. Analyst", "--reason", "to legal"], capsys)[0] == 0
    assert _call(["run", str(report_dir.parent.parent / "incident"), "--out", str(report_dir.parent), "-q"], capsys)[0] == 1
    path = report_dir / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    man["ledgers"]["verdicts.jsonl"]["entries"] = entries
    path.write_text(json.dumps(man), encoding="utf-8")
    code, out, err = _call(["verify", str(report_dir)], capsys)
    assert code == 1 and "internal error" not in err, err
    assert "ledger verdicts.jsonl: the manifest records" in out and "not a whole number" in out


def _a_finding(report_dir: Path) -> str:
    import csv

    with open(report_dir / "evidence.csv", encoding="utf-8", newline="") as fh:
        return next(csv.DictReader(fh))["finding_id"]


def test_another_customers_letter_in_a_packet_is_named(built: Path) -> None:
    """notice.json was checked, not the letter: one customer's notice.md copied over another's verified OK."""
    first, second = sorted(p for p in (built / "packets").iterdir() if p.is_dir())[:2]
    shutil.copy(second / "notice.md", first / "notice.md")
    rel = (first / "notice.md").relative_to(built).as_posix()
    _rehash(built, rel)
    assert any(p.startswith(f"consistency {rel}: is not the letter") for p in _problems(built)), _problems(built)


@pytest.mark.parametrize("column", ["request_ids", "n_requests", "n_findings"])
def test_a_column_of_notifications_csv_deleted_is_named(built: Path, column: str) -> None:
    """A column verify recomputes, deleted with the manifest rehashed, was skipped and the report said OK."""
    import csv

    path = built / "notifications.csv"
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    header = [c for c in rows[0] if c != column]
    with open(path, "w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=header, extrasaction="ignore", lineterminator="\r\n")
        writer.writeheader()
        writer.writerows(rows)
    _rehash(built, "notifications.csv")
    assert f"consistency notifications.csv: has no column {column!r}" in _problems(built)


def test_a_letter_rewritten_around_another_request_is_named(built: Path) -> None:
    """notice.json and notice.md rewritten together (one request of the customer's swapped for another's),
    the manifest rehashed: the packet's own pair agreed, and nothing compared it with the list."""
    from forensics.report.notices import render_packet_md

    packet = next(p for p in sorted((built / "packets").iterdir()) if p.is_dir()
                  and any(json.loads((p / "notice.json").read_text(encoding="utf-8")).get(r) for r in ("recipient", "exposed")))
    notice = json.loads((packet / "notice.json").read_text(encoding="utf-8"))
    role = "recipient" if notice.get("recipient") else "exposed"
    notice[role]["requests"][0]["request_id"] = "r-someone-else"
    (packet / "notice.json").write_text(json.dumps(notice, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    (packet / "notice.md").write_text(render_packet_md(notice), encoding="utf-8")
    rel = packet.relative_to(built).as_posix()
    _rehash(built, f"{rel}/notice.json", f"{rel}/notice.md")
    assert f"consistency {rel}/notice.json: the {role} requests it tells of differ from notifications.csv's request_ids" \
        in _problems(built), _problems(built)


def test_a_section_the_list_does_not_call_for_is_named(built: Path) -> None:
    """Another customer's exposed section copied into a recipient-only notice (roles unchanged, the letter
    re-rendered, the manifest rehashed) verified OK, and the letter told of the other customer's data."""
    from forensics.report.notices import render_packet_md

    notices = {p: json.loads((p / "notice.json").read_text(encoding="utf-8"))
               for p in sorted((built / "packets").iterdir()) if p.is_dir()}
    giver = next(n for n in notices.values() if n.get("exposed"))
    packet, notice = next((p, n) for p, n in notices.items() if "exposed" not in n)
    notice["exposed"] = giver["exposed"]
    (packet / "notice.json").write_text(json.dumps(notice, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    (packet / "notice.md").write_text(render_packet_md(notice), encoding="utf-8")
    rel = packet.relative_to(built).as_posix()
    _rehash(built, f"{rel}/notice.json", f"{rel}/notice.md")
    assert any(p.startswith(f"consistency {rel}/notice.json: holds exposed requests") for p in _problems(built))


@pytest.mark.parametrize("roles", [5, None, [1, "exposed"], [{}, {}]])
def test_a_notice_whose_roles_are_not_a_list_of_roles_is_drift(built: Path, roles: object) -> None:
    """Before, sorted() of them stopped verify with an internal error."""
    packet = next(p for p in sorted((built / "packets").iterdir()) if p.is_dir())
    notice = json.loads((packet / "notice.json").read_text(encoding="utf-8"))
    notice["roles"] = roles
    (packet / "notice.json").write_text(json.dumps(notice), encoding="utf-8")
    rel = packet.relative_to(built).as_posix()
    assert any(p.startswith(f"consistency {rel}/notice.json: roles is") for p in _problems(built))


def test_a_linked_manifest_or_packet_is_named_whatever_the_manifest_excludes(built: Path, tmp_path: Path) -> None:
    """Links were skipped under every name the (unsigned) manifest excludes: manifest.json itself, or packets
    once an edit listed them there."""
    path = built / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    man["outputs_excluded"] = sorted({*man.get("outputs_excluded", []), "packets"})
    (tmp_path / "manifest.json").write_text(json.dumps(man), encoding="utf-8")
    path.unlink()
    path.symlink_to(tmp_path / "manifest.json")
    packet = next(p for p in sorted((built / "packets").iterdir()) if p.is_dir())
    shutil.copytree(packet, tmp_path / "packet")
    shutil.rmtree(packet)
    packet.symlink_to(tmp_path / "packet", target_is_directory=True)
    problems = _problems(built)
    assert "output manifest.json: a symbolic link (every output is a file of the report folder itself)" in problems
    assert any(p.startswith(f"output {packet.relative_to(built).as_posix()}: a symbolic link") for p in problems)


def test_a_copy_of_a_tree_whose_logs_lie_beside_the_case_file_still_verifies(tmp_path: Path) -> None:
    """``[[inputs]] path = "../logs/engine"``: inputs outside the case file's folder were recorded by their
    absolute path, so the copy of the whole tree gave another scan.json and its re-run drifted."""
    from forensics.run import run

    sample = Path(__file__).resolve().parent.parent / "sample_logs"
    tree = tmp_path / "tree"
    (tree / "casefile").mkdir(parents=True)
    for part in ("gateway", "engine"):
        shutil.copytree(sample / part, tree / "logs" / part)
    text = (sample / "case.toml").read_text(encoding="utf-8")
    text = text.replace('path = "gateway"', 'path = "../logs/gateway"').replace('path = "engine"', 'path = "../logs/engine"')
    assert "../logs/engine" in text
    (tree / "casefile" / "case.toml").write_text(text, encoding="utf-8")
    result = run(tree / "casefile" / "case.toml", tree / "reports")
    copy = tmp_path / "copy"
    shutil.copytree(tree, copy, symlinks=True)
    moved = copy / result.report.report_dir.relative_to(tree)
    assert str(tree).encode() not in (moved / "scan.json").read_bytes()
    assert verify(moved, rerun=True).ok


def test_a_count_of_the_wrong_type_is_shown_as_written(built: Path) -> None:
    """A count written as a string read "counts.packets is 6, the tables give 6"."""
    path = built / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    man["counts"]["packets"] = str(man["counts"]["packets"])
    path.write_text(json.dumps(man, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    n = man["counts"]["packets"]
    assert f'consistency manifest.json: counts.packets is "{n}", the tables give {n}' in _problems(built)


@pytest.mark.parametrize("where", ["top", "nested"])
def test_a_key_added_to_a_notice_is_named_though_the_letter_never_shows_it(built: Path, where: str) -> None:
    """Another customer's text put in a key the letter does not render (notice.json goes to the customer as it is),
    the manifest re-hashed: verify said OK."""
    packet = next(p for p in sorted((built / "packets").iterdir()) if (p / "notice.json").is_file())
    notice = json.loads((packet / "notice.json").read_text(encoding="utf-8"))
    if where == "top":
        notice["appendix"] = "Project Nightjar terms of another customer"
    else:
        role = "exposed" if "exposed" in notice else "recipient"
        notice[role]["requests"][0]["source_tenant"] = "another customer"
    (packet / "notice.json").write_text(json.dumps(notice, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    rel = f"packets/{packet.name}/notice.json"
    _rehash(built, rel)
    key = "appendix" if where == "top" else "requests.source_tenant"
    assert any(p.startswith(f"consistency {rel}: holds keys a notice never has") and key in p for p in _problems(built)), _problems(built)


def test_rerun_of_a_case_whose_log_grew_between_its_ingests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The log ingested once cut short, then again complete: the case's rows are the complete file's, as a re-run's
    are, but the note that it grew (the case's history) rode in the summary and the manifest, and verify --rerun
    called the report drifted. The note stays in the case's manifest (``history``)."""
    logs = write_logs(tmp_path / "incident")
    spend = logs / "gateway" / "spend.jsonl"
    whole = spend.read_bytes()
    spend.write_bytes(b"".join(whole.splitlines(keepends=True)[:2]))
    case = str(tmp_path / "case")
    assert _call(["ingest", str(logs / "gateway"), "--config", str(logs / "case.toml"), "--case", case, "-q"], capsys)[0] == 0
    spend.write_bytes(whole)
    _stages(logs, case, capsys, str(logs / "gateway"), "--config", str(logs / "case.toml"))
    assert any("grew since" in n for n in json.loads((Path(case) / "manifest.json").read_text())["history"])
    code, out, err = _call(["report", "--case", case, "--config", str(logs / "case.toml"), "--out", str(tmp_path / "out"),
                            "--json", "-q"], capsys)
    assert code == 1, out + err
    result = verify(Path(json.loads(out)["report"]), rerun=True)
    assert result.ok, [str(d) for d in result.drift]


@pytest.mark.parametrize(("edit", "named"), [
    (lambda m: m["parameters"]["scan"].update(real_ceiling_tokens=1000), "parameters.scan differ from the parameters scan.json records"),
    (lambda m: m["parameters"]["match"].update(k=9), "parameters.match differ from the parameters match.json records"),
    (lambda m: m["stage_records"].update({"match.json": "0" * 64}), "stage_records names match.json by a SHA-256"),
    # The audit's deadline runs from it: moved later, the overdue customers were not overdue.
    (lambda m: m["counts"].update(last_received="2026-09-30T00:00:00Z"), "counts.last_received is \"2026-09-30T00:00:00Z\""),
    (lambda m: m["counts"].update(quarantined=5), "counts.quarantined is 5, the case's manifest gives"),
    (lambda m: m["reconciliation"].update(timezone="Asia/Tokyo"), "reconciliation.timezone differs from the case's manifest"),
    # Taken out, or added, they verified OK too (a second review).
    (lambda m: m["counts"].pop("last_received"), "counts.last_received is null, the case's manifest gives"),
    (lambda m: m["reconciliation"].pop("notes"), "reconciliation.notes is missing (the case's manifest has it)"),
    (lambda m: m["stage_records"].pop("scan.json"), "stage_records does not name scan.json, which the report holds"),
    (lambda m: m["reconciliation"].update(tokenizer_sha256="0" * 64), "reconciliation.tokenizer_sha256 is not in the case's"),
    # Keys past the 200th character of the JSON text: the comparison read the shortened message form (a review).
    (lambda m: m["parameters"]["scan"].update(window_start="2026-08-28T00:00:00Z"), "parameters.scan differ from the"),
    (lambda m: m["parameters"]["match"].update(seed=7), "parameters.match differ from the parameters match.json"),
    # An output's hash key renamed stopped verify with an internal error; an input's taken out skipped its check.
    (lambda m: m["outputs"][0].update(sha257=m["outputs"][0].pop("sha256")), "the manifest records no SHA-256 for it"),
    (lambda m: m["inputs"][0].pop("sha256"), "the manifest records no SHA-256 for it"),
], ids=["ceiling", "k", "stage_record", "last_received", "quarantined", "timezone", "no_last_received", "no_notes",
        "no_stage_record", "added_tokenizer", "window_start", "seed", "output_hash_key", "input_hash_key"])
def test_a_manifest_edited_alone_is_named_by_what_the_report_records_elsewhere(tmp_path: Path, edit: object,
                                                                               named: str) -> None:
    """A review edited the manifest's copies of the scan's ceiling, the match's k, the record hashes, the counts and
    the reconciliation: plain verify said OK (the manifest is not one of the outputs it hashes)."""
    write_logs(tmp_path / "incident")
    report_dir = api_run(tmp_path)
    path = report_dir / "manifest.json"
    man = json.loads(path.read_text(encoding="utf-8"))
    edit(man)  # type: ignore[operator]
    path.write_text(json.dumps(man, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
    problems = _problems(report_dir)
    assert any(named in p for p in problems), problems


def api_run(tmp_path: Path) -> Path:
    from forensics import api  # noqa: PLC0415

    report_dir = api.run(tmp_path / "incident", tmp_path / "out").case_dir.parent
    assert verify(report_dir).ok
    return report_dir


@pytest.mark.parametrize("role", ["recipient", "exposed"])
def test_a_packets_passage_rewritten_with_its_letter_and_hashes_is_named(built: Path, role: str) -> None:
    """A review moved a passage's offsets in a notice (its letter rendered again, the hashes fixed): verify said OK,
    though the finding its reference names in evidence.csv says otherwise."""
    from forensics.report.notices import render_packet_md  # noqa: PLC0415

    key, start = ("foreign_passages", "response_start") if role == "recipient" else ("spans", "start")
    for packet in sorted((built / "packets").iterdir()):
        notice = json.loads((packet / "notice.json").read_text(encoding="utf-8"))
        spans = [s for r in (notice.get(role) or {}).get("requests", []) for s in r.get(key, [])]
        if spans:
            break
    else:
        pytest.fail(f"no packet tells of a {role} passage")
    spans[0][start] += 1
    (packet / "notice.json").write_text(json.dumps(notice, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
    (packet / "notice.md").write_text(render_packet_md(notice), encoding="utf-8")
    _rehash(built, f"packets/{packet.name}/notice.json", f"packets/{packet.name}/notice.md")
    problems = _problems(built)
    assert any(p.startswith(f"consistency packets/{packet.name}/notice.json: its {role} passage of reference "
                            f"{spans[0]['reference']} differs from finding") and p.endswith(f"in {start}")
               for p in problems), problems


def test_the_report_keeps_the_case_file_and_verify_holds_the_copy_to_the_manifests_hash(tmp_path: Path) -> None:
    """The case-file spec: the case file "is kept with the report and hashed into its manifest". The manifest named it
    by a path beside the inputs, which a report sent on alone does not carry (a review)."""
    write_logs(tmp_path / "incident")
    report_dir = api_run(tmp_path)
    copy = report_dir / "case_file" / "case.toml"
    assert copy.read_bytes() == (tmp_path / "incident" / "case.toml").read_bytes()
    man = json.loads((report_dir / "manifest.json").read_text(encoding="utf-8"))
    assert "case_file/case.toml" in {o["path"] for o in man["outputs"]}
    assert man["case_file"]["sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest()
    copy.write_text(copy.read_text(encoding="utf-8").replace("real_ceiling_tokens = 2000", "real_ceiling_tokens = 5000"),
                    encoding="utf-8")
    _rehash(report_dir, "case_file/case.toml")
    assert any(p.startswith("consistency case_file/case.toml: is not the case file the manifest records")
               for p in _problems(report_dir))


def test_a_report_of_an_earlier_release_with_no_case_file_copy_verifies_by_a_rerun(tmp_path: Path) -> None:
    """The re-run always kept a copy of the case file; a report of the release before keeps none: --rerun called it
    drift (a review)."""
    import dataclasses  # noqa: PLC0415

    from forensics.report import manifest as manifest_file  # noqa: PLC0415

    write_logs(tmp_path / "incident")
    report_dir = api_run(tmp_path)
    shutil.rmtree(report_dir / "case_file")  # as the release before wrote it: no copy, and none recorded
    body = manifest_file.read(report_dir)
    assert body.case_file is not None and body.case_file["copy"] == "case_file/case.toml"
    old = dataclasses.replace(body, case_file={k: v for k, v in body.case_file.items() if k != "copy"})
    manifest_file.write(report_dir, old, exclude=set(body.outputs_excluded))
    assert verify(report_dir).ok
    checked = verify(report_dir, rerun=True)
    assert checked.ok, [str(d) for d in checked.drift]


def test_a_case_file_copy_deleted_from_a_report_is_drift(tmp_path: Path) -> None:
    """Told apart from an earlier release's report by the folder alone, a copy deleted (the hashes fixed) passed
    --rerun (a third review): the manifest records where the copy is kept."""
    from forensics.report import manifest as manifest_file  # noqa: PLC0415

    write_logs(tmp_path / "incident")
    report_dir = api_run(tmp_path)
    shutil.rmtree(report_dir / "case_file")
    body = manifest_file.read(report_dir)
    manifest_file.write(report_dir, body, exclude=set(body.outputs_excluded))
    assert "consistency case_file/case.toml: missing: the manifest records the case file kept there" in _problems(report_dir)
    assert not verify(report_dir, rerun=True).ok


def test_a_report_keeping_a_copy_it_does_not_record_verifies_by_a_rerun(tmp_path: Path) -> None:
    """Between the copy and its record in the manifest, a report kept the copy and recorded none: the re-run took
    it for an earlier release's and left its copy out (a fourth review)."""
    import dataclasses  # noqa: PLC0415

    from forensics.report import manifest as manifest_file  # noqa: PLC0415

    write_logs(tmp_path / "incident")
    report_dir = api_run(tmp_path)
    body = manifest_file.read(report_dir)
    assert body.case_file is not None
    manifest_file.write(report_dir, dataclasses.replace(body, case_file={k: v for k, v in body.case_file.items()
                                                                          if k != "copy"}),
                        exclude=set(body.outputs_excluded))
    checked = verify(report_dir, rerun=True)
    assert not any(d.path == "case_file/case.toml" for d in checked.drift), [str(d) for d in checked.drift]


def test_a_rerun_names_a_log_added_to_the_input_folders_since_the_report(tmp_path: Path) -> None:
    """A log added to an input folder after the report: the re-run read it too, and every output differed with no word
    of why (it looked like tampering or non-determinism; a review)."""
    write_logs(tmp_path / "incident")
    report_dir = api_run(tmp_path)
    gateway = next(p for p in (tmp_path / "incident").rglob("*") if p.is_dir() and p.name == "gateway")
    first = sorted(p for p in gateway.iterdir() if p.is_file())[0]
    shutil.copy(first, gateway / "zz-added-later.jsonl")
    result = verify(report_dir, rerun=True)
    [drift] = result.drift
    assert drift.kind == "rerun" and "zz-added-later.jsonl" in drift.problem and "does not record" in drift.problem
    assert verify(report_dir).ok  # the recorded files are all there, unchanged


def test_keygen_makes_the_keys_folder_private_as_the_readme_runs_it(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The README's `forensics keygen keys/team.pem` failed on a fresh clone: the folder did not exist (a review)."""
    import stat  # noqa: PLC0415

    code, _, err = _call(["keygen", str(tmp_path / "keys" / "team.pem")], capsys)
    assert code == 0, err
    assert (tmp_path / "keys" / "team.pem.pub").is_file()
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700


def test_a_render_without_a_key_over_a_signed_report_says_the_signature_is_gone(tmp_path: Path,
                                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Re-rendering to apply verdicts without --sign silently removed the signature (a review)."""
    write_logs(tmp_path / "incident")
    assert _call(["keygen", str(tmp_path / "keys" / "team.pem")], capsys)[0] == 0
    code, _, _ = _call(["run", str(tmp_path / "incident"), "--out", str(tmp_path / "out"), "-q",
                        "--sign", str(tmp_path / "keys" / "team.pem")], capsys)
    assert code == 1
    code, _, err = _call(["run", str(tmp_path / "incident"), "--out", str(tmp_path / "out")], capsys)
    assert code == 1
    assert "the report this one replaces was signed (manifest.json.sig); this one is not" in " ".join(err.split())
    code, _, err = _call(["run", str(tmp_path / "incident"), "--out", str(tmp_path / "out")], capsys)
    assert "was signed" not in err  # said once: the report it replaced this time was not signed


def test_a_report_moved_elsewhere_says_where_it_looked_for_its_inputs_and_the_fix(run_report: tuple[Path, str],
                                                                                   tmp_path: Path) -> None:
    """A report handed over to another folder: verify said only "missing" of every input and of the case file (whose
    copy the report holds), which read as tampering (a review). It says where it looked and how to point it."""
    report_dir, _ = run_report
    moved = tmp_path / "handed" / "over" / report_dir.name
    shutil.copytree(report_dir, moved)
    problems = [str(d) for d in verify(moved).drift]
    assert problems and all("looked for at " in p and "--inputs FOLDER" in p for p in problems)
    assert verify(moved, tmp_path / "incident").ok
