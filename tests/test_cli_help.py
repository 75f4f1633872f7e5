"""The CLI as a new user meets it (issue 18): help written for people, a generated reference that
cannot go stale, -q and --json that keep their word, and clear errors for empty or wrong input."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shlex
from pathlib import Path

import pytest
from test_run import write_logs

from forensics import cli
from forensics.cli import main
from forensics.lab.evaluate import build_report_from_truth, evaluate

ROOT = Path(__file__).resolve().parent.parent


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_cli", ROOT / "docs" / "gen_cli.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---- help -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", cli.command_names())
def test_help_says_what_each_option_takes_and_shows_an_example(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run([name, "--help"], capsys)
    assert code == 0
    # Type labels and python names are not help: "<path>", "<list[Path]>", "{config_or_log_dir}".
    assert not re.search(r"<(path|int|float|str|bool|list\[)|\{[a-z_]+\}|list\[", out), out
    assert re.match(rf"Usage: .* {name} \[OPTIONS\]", out.splitlines()[0])  # the program name is how it was called
    assert "Example" in out and f"  forensics {name}" in out
    group = cli._click_app()
    command = group.get_command(group.context_class(group, info_name="forensics"), name)
    for p in command.params:
        assert p.help, f"{name}: {p.name} has no help"
        if p.param_type_name == "argument" or not p.is_flag:
            assert p.metavar and p.metavar in out, f"{name}: {p.name} has no metavar"


def test_docs_reference_and_readme_usage_blocks_are_generated_from_the_cli() -> None:
    gen = _generator()
    assert gen.main(["--check"]) == 0, "run: python docs/gen_cli.py"
    doc = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for name in cli.command_names():
        assert f"## forensics {name}" in doc and cli.help_text(name).rstrip("\n") in doc
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.count("<!-- cli-usage:") >= 3
    assert "forensics ingest --case DIR [OPTIONS] LOG_PATH..." in readme


def test_the_check_fails_when_the_reference_is_stale(monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _generator()
    monkeypatch.setitem(cli.EXAMPLES, "run", ["forensics run somewhere-else/"])
    assert gen.main(["--check"]) == 1


def _readme_commands() -> list[list[str]]:
    """Every ``forensics ...`` command line in the README's shell blocks, as words."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            line = line.split(" #")[0].strip()
            m = re.search(r"(?:^|\s|/)forensics (\w+.*)$", line)
            if m and not line.startswith("#"):
                commands.append(shlex.split(m.group(1).replace("[", " ").replace("]", " ").replace("|", " ")))
    return commands


def test_every_command_line_in_the_readme_uses_real_commands_and_options() -> None:
    commands = _readme_commands()
    assert len(commands) >= 10
    group = cli._click_app()
    ctx = group.context_class(group, info_name="forensics")
    for words in commands:
        command = group.get_command(ctx, words[0])
        assert command is not None, words
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
        for w in words[1:]:
            if w.startswith("-") and w != "...":
                assert w.split("=")[0] in known, f"README: forensics {words[0]} has no option {w}"


# ---- -q and --json --------------------------------------------------------------------------


def test_quiet_prints_nothing_and_json_prints_only_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    code, out, err = _run(["run", str(logs), "--out", str(tmp_path / "out"), "-q"], capsys)
    assert code == 1  # findings: the exit code tells, nothing is printed (no stage or customer table)
    assert out == "" and err == ""
    code, out, err = _run(["ingest", str(logs / "gateway"), "--case", str(tmp_path / "case"), "--config", str(logs / "case.toml"), "-q"], capsys)
    assert (code, out, err) == (0, "", "")
    for argv in (["scan", "--case", str(tmp_path / "case")], ["match", "--case", str(tmp_path / "case")],
                 ["report", "--case", str(tmp_path / "case"), "--out", str(tmp_path / "out2")],
                 ["verify", str(tmp_path / "out" / "e2e")]):
        code, out, err = _run(argv + ["-q"], capsys)
        assert out == "" and err == "", argv
        code2, out, err = _run(argv + ["--json"], capsys)
        assert code2 == code and err == ""
        json.loads(out)  # stdout holds the JSON document and nothing else
    (tmp_path / "keys").mkdir()
    code, out, err = _run(["keygen", str(tmp_path / "keys" / "k.pem"), "-q"], capsys)
    assert (code, out, err) == (0, "", "") and (tmp_path / "keys" / "k.pem.pub").is_file()
    # The review and notification commands too.
    report_dir = tmp_path / "out" / "e2e"
    finding = next(csv.DictReader((report_dir / "evidence.csv").open(encoding="utf-8")))["finding_id"]
    tenant = next(csv.DictReader((report_dir / "notifications.csv").open(encoding="utf-8")))["tenant_id"]
    for argv in (["viewer", str(report_dir)],
                 ["review", str(report_dir), "--finding", finding, "--verdict", "escalate", "--reason", "r", "--analyst", "a"],
                 ["notified", str(report_dir), "--tenant", tenant, "--channel", "email", "--at", "2026-09-01T00:00:00Z",
                  "--ref", "T-1"],
                 ["audit", str(report_dir), "--now", "2026-09-02T00:00:00Z"]):
        code, out, err = _run(argv + ["-q"], capsys)
        assert code in (0, 1) and out == "" and err == "", argv
    code, out, err = _run(["audit", str(report_dir), "--now", "2026-09-02T00:00:00Z", "--json"], capsys)
    assert err == "" and json.loads(out)["customers"]
    # An error still reaches stderr under -q, in one line, with exit 2.
    code, out, err = _run(["scan", "--case", str(tmp_path / "nowhere"), "-q"], capsys)
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1


# ---- empty or wrong input -------------------------------------------------------------------


def test_ingest_of_an_empty_folder_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / ".hidden").write_text("not a log")
    code, out, err = _run(["ingest", str(tmp_path / "logs"), "--case", str(tmp_path / "case")], capsys)
    assert code == 2 and out == ""
    assert "no log file found" in err and str(tmp_path / "logs") in err and "Traceback" not in err


def test_run_does_not_take_another_tools_toml_for_the_case_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pyproject = '[project]\nname = "x"\n\n[tool.pytest.ini_options]\naddopts = "-q"\n'
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "pyproject.toml").write_text(pyproject)
    code, out, err = _run(["run", str(tmp_path / "repo"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "no case file" in err and "pyproject.toml has none of the case-file keys" in err
    # Next to a real case file (not named case.toml) the other TOML is no rival.
    logs = write_logs(tmp_path / "logs")
    (logs / "case.toml").rename(logs / "incident.toml")
    (logs / "pyproject.toml").write_text(pyproject)
    code, out, err = _run(["run", str(logs), "--out", str(tmp_path / "out"), "-q"], capsys)
    assert code == 1 and err == ""
    assert (tmp_path / "out" / "e2e" / "notifications.csv").is_file()


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    """A small truth file shaped like the simulator's (case, generator seed, files it wrote)."""
    return {
        "schema": "forensics-sim-truth/1", "case": {"name": "sim-small-seed7"}, "generator": {"seed": 7},
        "files": [{"path": "gateway/a.jsonl", "sha256": "a" * 64}], "suspects": [], "engine_anomalies": [],
        "scan_negatives": [], "fragments": [], "hard_negatives": [], "exposed": [], "recipients": [],
        "quarantine": {"expected": 0},
    }


def _report_for(truth: dict, folder: Path, case: str, sha: str) -> Path:  # type: ignore[type-arg]
    build_report_from_truth(truth, folder)
    (folder / "manifest.json").write_text(json.dumps({"case": case, "inputs": [{"path": "gateway/a.jsonl", "sha256": sha,
                                                                                "quarantined": 0}]}))
    return folder


def test_evaluate_warns_when_the_truth_is_of_another_simulation(truth: dict, tmp_path: Path,  # type: ignore[type-arg]
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "truth.json").write_text(json.dumps(truth))
    same = _report_for(truth, tmp_path / "same", "sim-small-seed7", "a" * 64)
    assert evaluate(tmp_path / "truth.json", same).to_json()["warnings"] == []
    other = _report_for(truth, tmp_path / "other", "sim-small-seed8", "b" * 64)
    warnings = evaluate(tmp_path / "truth.json", other).to_json()["warnings"]
    assert len(warnings) == 2
    assert "'sim-small-seed7' (simulator seed 7)" in warnings[0] and "'sim-small-seed8'" in warnings[0]
    assert "none of the 1 input files" in warnings[1]
    code, out, err = _run(["evaluate", "--truth", str(tmp_path / "truth.json"), "--report", str(other)], capsys)
    assert code == 0 and err.count("warning: ") == 2 and "evaluation of" in out
    code, out, err = _run(["evaluate", "--truth", str(tmp_path / "truth.json"), "--report", str(other), "--json"], capsys)
    assert json.loads(out)["warnings"] == warnings and err == ""
    assert _run(["evaluate", "--truth", str(tmp_path / "truth.json"), "--report", str(other), "-q"], capsys) == (0, "", "")


# ---- benchmarks -----------------------------------------------------------------------------


def test_a_benchmark_missing_its_extra_says_the_install_command_at_once() -> None:
    import subprocess
    import sys

    # datasketch made unimportable, as in an install without the bench extra.
    code = ("import runpy, sys; sys.modules['datasketch'] = None; sys.argv = ['benchmarks/match.py']; "
            "runpy.run_path('benchmarks/match.py', run_name='__main__')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "needs datasketch (the bench extra)" in proc.stderr and "pip install -e '.[bench]'" in proc.stderr
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "pip install -e '.[bench]'" in readme


def test_usage_names_the_tool_however_it_was_started() -> None:
    # `python -m forensics` and the console script print the same usage line.
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "forensics", "ingest", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("Usage: forensics ingest "), done.stdout[:80]
