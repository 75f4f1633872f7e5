"""The typed stage artifacts (forensics/artifacts.py) and the options generated from the settings table."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import typer
from test_run import write_logs
from typer.testing import CliRunner

from forensics import api, cli, schema, settings
from forensics.artifacts import (
    Finding,
    IngestManifest,
    MatchRecord,
    ReportManifest,
    RequestKey,
    ScanRecord,
)
from forensics.errors import CaseError
from forensics.report import ReportResult
from forensics.run import RunResult

RECORDS = {  # artifact, file (relative to the report folder), stage that writes it
    "ingest": (IngestManifest, "case/manifest.json"),
    "scan": (ScanRecord, "case/scan.json"),
    "match": (MatchRecord, "case/match.json"),
    "report": (ReportManifest, "manifest.json"),
}


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of the whole pipeline on a small leak (three requests, one suspect, one finding)."""
    root = tmp_path_factory.mktemp("artifacts")
    return api.run(write_logs(root / "logs"), root / "out").report.report_dir


def _written(data: Any) -> str:
    """JSON as the stages write it (forensics.case.write_json)."""
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("stage", sorted(RECORDS))
def test_every_stage_record_reads_back_to_its_own_bytes(report_dir: Path, stage: str) -> None:
    cls, name = RECORDS[stage]
    path = report_dir / name
    record = cls.read(path, stage)
    assert _written(record.to_json()) == path.read_text(encoding="utf-8")
    assert record.schema_version == json.loads(path.read_text(encoding="utf-8"))["format"]


def test_typed_fields_hold_what_the_stages_found(report_dir: Path) -> None:
    ingest = IngestManifest.read(report_dir / "case" / "manifest.json", "ingest")
    scanned = ScanRecord.read(report_dir / "case" / "scan.json", "scan")
    matched = MatchRecord.read(report_dir / "case" / "match.json", "match")
    report = ReportManifest.read(report_dir / "manifest.json", "report")
    assert ingest.tables.exchanges == 3 and ingest.reconciled and ingest.tool["name"] == "forensics"
    assert scanned.suspect_counts.total == 1 and scanned.parameters.real_ceiling_tokens == 2000
    assert matched.findings.cross_tenant >= 1 and matched.findings.exposed_tenants == 1
    assert matched.searched.suspects_searched == 1 and matched.parameter_sources["k"] == "default"
    assert report.case == "e2e" and report.counts["suspects"] == 1
    assert {o["path"] for o in report.outputs} >= {"notifications.csv", "evidence.csv", "scan.json", "match.json"}
    # The earlier dict access still reads the same JSON values (objects as dicts, arrays as lists).
    assert matched["control"]["request_ids_with_findings"] == list(matched.control.request_ids_with_findings)
    assert ingest["tables"] == {"exchanges": 3, "engine_events": 0, "quarantine": ingest.tables.quarantine}


def test_the_findings_of_the_result_are_the_rows_written(tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs")
    cfg = api.make_config(logs / "case.toml")
    case = tmp_path / "case"
    api.ingest(case, [logs / "gateway"], config=cfg)
    api.scan(case, cfg)
    result = api.match(case, cfg)
    rows = pq.read_table(case / "evidence.parquet").to_pylist()
    assert result.findings == [Finding.from_row(r) for r in rows] and result.findings
    (f,) = result.cross_tenant
    assert f.recipient == RequestKey("r-3", "globex") and f.source == RequestKey("r-1", "acme")
    assert list(f.to_row(schema.EVIDENCE_CSV)) == list(schema.EVIDENCE_CSV)
    assert json.loads((case / "match.json").read_text()) == result.report.to_json()


def test_a_record_of_another_stage_is_refused_by_format(report_dir: Path) -> None:
    data = json.loads((report_dir / "case" / "match.json").read_text())
    with pytest.raises(CaseError, match="format is 'forensics-match/1', expected 'forensics-scan/1'"):
        ScanRecord.from_json(data, file=report_dir / "case" / "match.json")


def test_a_wrong_type_or_a_missing_key_is_named(report_dir: Path) -> None:
    path = report_dir / "case" / "match.json"
    data = json.loads(path.read_text())
    data["searched"]["records"] = "many"
    with pytest.raises(CaseError) as exc:
        MatchRecord.from_json(data, file=path)
    assert str(exc.value).startswith(str(path)) and "searched.records is a string, expected a whole number" in str(exc.value)
    data = json.loads(path.read_text())
    del data["control"]
    with pytest.raises(CaseError, match="the record has no control"):
        MatchRecord.from_json(data, file=path)
    data = json.loads(path.read_text())
    data["control"]["request_ids_with_findings"] = [1]
    with pytest.raises(CaseError, match=r"control.request_ids_with_findings\[0\] is a number, expected a string"):
        MatchRecord.from_json(data)


def test_a_key_added_by_a_later_version_is_kept(report_dir: Path) -> None:
    data = json.loads((report_dir / "case" / "scan.json").read_text())
    data["added_later"] = {"x": 1}
    record = ScanRecord.from_json(data)
    assert record.to_json() == data and record["added_later"] == {"x": 1}


def test_verify_names_the_bad_key_of_an_edited_manifest(report_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "report"
    shutil.copytree(report_dir, copy)
    man = json.loads((copy / "manifest.json").read_text())
    man["outputs"] = "all of them"
    (copy / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(SystemExit) as exc:
        cli.main(["verify", str(copy)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err
    assert "manifest.json is not a report manifest (outputs is a string, expected an array)" in err


@pytest.mark.parametrize(("key", "value", "message"), [
    ("case_file", {"path": 5}, "case_file.path is a number, expected a string"),
    ("ledgers", [], "ledgers is an array, expected an object"),
])
def test_an_edited_manifest_names_the_type_it_expected(report_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       key: str, value: object, message: str) -> None:
    """Before: "case_file is an object, expected an array or null" and "ledgers is an array, expected an
    array or null", the wrong fix named."""
    copy = tmp_path / "report"
    shutil.copytree(report_dir, copy)
    man = json.loads((copy / "manifest.json").read_text())
    man[key] = value
    (copy / "manifest.json").write_text(json.dumps(man))
    with pytest.raises(SystemExit) as exc:
        cli.main(["verify", str(copy)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err, err


def test_request_keys_compare_as_the_pairs_the_tables_hold() -> None:
    keys = [RequestKey("b", None), RequestKey("b", "t2"), RequestKey("a", "t9"), RequestKey("b", "t1")]
    assert sorted(keys, key=RequestKey.sort_key) == [("a", "t9"), ("b", "t1"), ("b", "t2"), ("b", None)]
    assert {RequestKey("a", None): 1}[("a", None)] == 1  # a plain pair finds it


def test_run_is_a_pipeline_module_that_does_not_import_the_api() -> None:
    code = "import sys, forensics.run; print('forensics.api' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    assert typing.get_type_hints(RunResult)["report"] is ReportResult


# --------------------------------------------------------------------------------------------
# options generated from the settings table
# --------------------------------------------------------------------------------------------


def _params(command: str) -> dict[str, Any]:
    group = typer.main.get_command(cli.app)
    cmd = group.get_command(group.context_class(group, info_name="forensics"), command)
    return {opt: p for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("setting", [s for s in settings.SETTINGS if s.cli], ids=lambda s: s.name)
def test_each_option_is_its_settings_row(setting: settings.Setting, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    params = _params(setting.option_command)
    names = (setting.cli or "").split("/")
    param = params[names[0]]
    assert param.help == setting.option_help() and param.metavar == setting.option_metavar
    assert param.default is None  # not given: the case file's value (or the table's default) stands
    if setting.kind == "bool":
        assert param.is_flag and param.secondary_opts == names[1:]
    if setting.kind in ("int", "float"):  # the option has the row's type: a word is refused, naming it
        args = [setting.option_command, "--case", str(tmp_path), names[0], "some"]
        with pytest.raises(SystemExit) as exc:
            cli.main(args + ([str(tmp_path)] if setting.option_command == "ingest" else []))
        assert exc.value.code == 2 and f"'{names[0]}'" in capsys.readouterr().err


def test_a_new_row_is_a_new_option(monkeypatch: pytest.MonkeyPatch) -> None:
    row = settings.Setting("new_knob", "match", "int", 3, "a knob added later", 1, 9, cli="--new-knob", command="demo")
    monkeypatch.setattr(settings, "SETTINGS", (*settings.SETTINGS, row))
    got: list[dict[str, Any]] = []

    @cli.setting_options("demo")
    def demo(name: str = typer.Option("x", "--name"), settings: dict[str, object] = cli.SETTINGS_OPTIONS) -> None:
        got.append(settings)

    app = typer.Typer()
    app.command()(demo)
    app.command("other")(lambda: None)  # two commands: "demo" is a subcommand, as in the real CLI
    runner = CliRunner()
    assert runner.invoke(app, ["demo", "--new-knob", "7"]).exit_code == 0
    assert runner.invoke(app, ["demo"]).exit_code == 0
    assert got == [{"new_knob": 7}, {"new_knob": None}]
    help_text = runner.invoke(app, ["demo", "--help"]).output
    assert "--new-knob" in help_text and "A knob added later" in help_text
    assert runner.invoke(app, ["demo", "--new-knob", "seven"]).exit_code == 2
