"""Every case-file key but ``[[inputs]]`` as an option of ``forensics run`` (spec/case-file.md: "every key can be
overridden by a CLI option of the same meaning, and the manifest records where each value came from")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics import api, settings
from forensics.cli import help_text, main
from forensics.config import OPTION_SECTIONS, TOP_KEYS, TOP_OPTIONS, option_name
from forensics.review.ledger import audit
from tests.test_run import CASE_TOML, write_logs

#: The case file's keys that are tables of their own (their keys are options one by one) or the inputs' list.
NOT_ONE_VALUE = {"inputs", "execution", "scan", "match", "report", "model"}


@pytest.mark.parametrize("key", sorted(TOP_KEYS - NOT_ONE_VALUE)
                         + sorted(s.key for s in settings.SETTINGS if s.section in OPTION_SECTIONS and s.section))
def test_every_case_file_key_is_an_option_of_run(key: str) -> None:
    assert f"  {option_name(key)} " in help_text("run")


def _manifest(report: Path) -> dict:
    return json.loads((report / "manifest.json").read_text(encoding="utf-8"))


def _exit(args: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(args)
    return int(exc.value.code or 0)


def test_an_option_overrides_the_case_files_value_and_the_report_says_so(tmp_path: Path) -> None:
    """The window ends before the over-ceiling request: nobody is told, where the case file's window named two."""
    logs = write_logs(tmp_path / "logs")
    assert _exit(["run", str(logs), "--out", str(tmp_path / "file"), "-q"]) == 1
    assert _exit(["run", str(logs), "--out", str(tmp_path / "opt"), "-q", "--window-end", "2026-08-28T10:30:00Z"]) == 0
    report = tmp_path / "opt" / "e2e"
    assert (report / "notifications.csv").read_text(encoding="utf-8").count("\n") == 1
    case = _manifest(report)["parameters"]["case"]
    assert case["values"]["window_end"] == "2026-08-28T10:30:00Z"
    assert case["sources"]["window_end"] == "option" and case["sources"]["window_start"] == "file"
    assert "| given as options | --window-end |" in (report / "summary.md").read_text(encoding="utf-8")
    # The case file says another window: the manifest does not say it was the file's, so verify finds nothing wrong.
    verified = api.verify(report, rerun=True)
    assert verified.ok, verified.drift


def test_match_and_report_options_are_used_recorded_and_rerun(tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs")
    api.run(logs, tmp_path / "out", options={"probable_evalue": 0.002, "contact": "ir@example.com",
                                              "notify_within_hours": 24, "same_decode_node": False})
    report = tmp_path / "out" / "e2e"
    man = _manifest(report)
    assert man["parameters"]["case"]["values"]["options"] == {
        "match": {"probable_evalue": 0.002, "same_decode_node": False},
        "report": {"contact": "ir@example.com", "notify_within_hours": 24}}
    assert man["parameters"]["case"]["values"]["sections"] == {}  # the case file has none: nothing is the file's
    match = json.loads((report / "match.json").read_text(encoding="utf-8"))
    assert match["parameters"]["probable_evalue"] == 0.002
    assert match["parameter_sources"]["probable_evalue"] == "option"
    assert match["parameter_sources"]["confirm_evalue"] == "default"
    packets = [p.read_text(encoding="utf-8") for p in sorted((report / "packets").rglob("*.md"))]
    assert packets and all("ir@example.com" in text for text in packets)
    assert audit(report).notify_within_hours == 24
    verified = api.verify(report, rerun=True)
    assert verified.ok, verified.drift


def test_an_option_that_only_changes_how_the_run_goes_leaves_the_report_as_it_was(tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs")
    plain = api.run(logs, tmp_path / "a").report.report_dir
    given = api.run(logs, tmp_path / "b", options={"workers": 1, "batch_rows": 3, "engine": "local"}).report.report_dir

    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and not p.relative_to(root).as_posix().startswith("case/")}

    assert files(plain) == files(given)


def test_a_required_key_an_option_gives_may_be_missing_from_the_case_file(tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs")
    (logs / "case.toml").write_text(CASE_TOML.replace("real_ceiling_tokens = 2000\n", ""), encoding="utf-8")
    assert _exit(["run", str(logs), "--out", str(tmp_path / "out"), "-q"]) == 2
    assert _exit(["run", str(logs), "--out", str(tmp_path / "out"), "-q", "--ceiling", "2000"]) == 1
    assert _manifest(tmp_path / "out" / "e2e")["parameters"]["case"]["sources"]["real_ceiling_tokens"] == "option"
    # The case file read back by verify lacks the key too: no drift (a review found "cannot be read as a case file").
    verified = api.verify(tmp_path / "out" / "e2e", rerun=True)
    assert verified.ok, verified.drift


def test_the_report_stage_takes_its_options_over_the_cases_saved_settings(tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs")
    case = api.run(logs, tmp_path / "out").case_dir
    assert _exit(["report", "--case", str(case), "--out", str(tmp_path / "again"), "-q", "--mask", "none",
                  "--contact", "ir@example.com"]) == 1
    man = _manifest(tmp_path / "again" / "e2e")
    assert man["parameters"]["report"] == {"contact": "ir@example.com", "mask": "none"}
    assert man["parameters"]["case"]["sources"]["options"] == "option"


@pytest.mark.parametrize(("args", "said"), [
    (["--probable-evalue", "-1"], "--probable-evalue = -1.0 is not allowed"),
    (["--mask", "bogus"], "--mask 'bogus' is not allowed"),
    (["--notify-within-hours", "0"], "--notify-within-hours 0 is out of range"),
    (["--timezone", "Mars/Base"], "--timezone: timezone = 'Mars/Base' is not a known time zone"),
    (["--ceiling", "12x"], "--ceiling: real_ceiling_tokens = '12x'"),
    (["--name", " \u200b"], "--name is empty"),
    (["--model", " "], "--model: model(s) must be a non-empty string"),
    (["--engine", "flink"], "--engine = 'flink' is not a known engine"),
    (["--window-end", "2026-08-01T00:00:00Z"], "(window_end given as an option; window_start from the case file)"),
])
def test_a_bad_option_is_an_error_naming_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    args: list[str], said: str) -> None:
    logs = write_logs(tmp_path / "logs")
    assert _exit(["run", str(logs), "--out", str(tmp_path / "out"), "-q", *args]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert said in err and "Traceback" not in err
    assert not (tmp_path / "out" / "e2e").exists()


def test_an_options_relative_tokenizer_path_is_the_working_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    logs = write_logs(tmp_path / "logs")
    monkeypatch.chdir(tmp_path)
    assert _exit(["run", str(logs), "--out", str(tmp_path / "out"), "-q", "--tokenizer", "none.json"]) == 2
    assert f"{tmp_path / 'none.json'}: tokenizer file not found" in " ".join(capsys.readouterr().err.split())


def test_top_options_name_the_keys_of_the_case_file() -> None:
    assert set(TOP_OPTIONS) <= TOP_KEYS | {"models"}


def test_a_match_option_given_to_the_stage_is_listed_in_the_summary(tmp_path: Path) -> None:
    """`forensics match --gap 20` in the stage-by-stage flow: match.json said option, the summary did not list it."""
    logs = write_logs(tmp_path / "logs")
    case = tmp_path / "case"
    assert _exit(["ingest", str(logs / "gateway"), "--case", str(case), "--config", str(logs / "case.toml"), "-q"]) == 0
    assert _exit(["scan", "--case", str(case), "-q"]) == 1
    assert _exit(["match", "--case", str(case), "--gap", "20", "-q"]) == 1
    assert _exit(["report", "--case", str(case), "--out", str(tmp_path / "out"), "-q"]) == 1
    assert "| given as options | --gap |" in (tmp_path / "out" / "e2e" / "summary.md").read_text(encoding="utf-8")


def test_options_say_how_to_write_a_time_and_a_model_given_twice_is_one(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    assert _exit(["run", str(logs), "--out", str(tmp_path / "out"), "-q", "--window-start", "garbage"]) == 2
    assert "write it like --window-start 2026-08-27T00:00:00Z" in " ".join(capsys.readouterr().err.split())
    api.run(logs, tmp_path / "out", options={"models": ["glm-5.3", "glm-5.3"]})
    assert _manifest(tmp_path / "out" / "e2e")["parameters"]["case"]["values"]["models"] == ["glm-5.3"]


def test_a_required_ceiling_an_option_asks_to_read_from_the_engine_logs_verifies(tmp_path: Path) -> None:
    """`--ceiling auto` in place of the case file's missing key: the manifest records the value read (auto-detected),
    and verify read the case file as missing a required key (a review)."""
    import re  # noqa: PLC0415
    import shutil  # noqa: PLC0415

    logs = Path(shutil.copytree(Path(__file__).parent.parent / "sample_logs", tmp_path / "logs"))
    case_file = logs / "case.toml"
    case_file.write_text(re.sub(r"(?m)^real_ceiling_tokens = .*\n", "", case_file.read_text(encoding="utf-8")),
                         encoding="utf-8")
    assert _exit(["run", str(logs), "--out", str(tmp_path / "out"), "-q", "--ceiling", "auto"]) == 1
    report = tmp_path / "out" / "sim-small-seed7"
    assert _manifest(report)["parameters"]["case"]["sources"]["real_ceiling_tokens"] == "auto-detected"
    verified = api.verify(report)
    assert verified.ok, verified.drift


def test_the_scan_stage_takes_a_model_given_twice_as_one_and_names_a_bad_time_option(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    case = tmp_path / "case"
    assert _exit(["ingest", str(logs / "gateway"), "--case", str(case), "--config", str(logs / "case.toml"), "-q"]) == 0
    assert _exit(["scan", "--case", str(case), "--window-start", "yesterday", "-q"]) == 2
    assert "--window-start: window_start = 'yesterday' is not an ISO 8601 time. Fix: write it like --window-start " \
           "2026-08-27T00:00:00Z" in " ".join(capsys.readouterr().err.split())
    assert _exit(["scan", "--case", str(case), "--model", "glm-5.3", "--model", "glm-5.3", "-q"]) == 1
    assert json.loads((case / "scan.json").read_text(encoding="utf-8"))["parameters"]["models"] == "glm-5.3"
