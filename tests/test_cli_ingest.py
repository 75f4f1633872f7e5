"""The ingest command as a user runs it: exit codes, summary, JSON."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden" / "ingest"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True, cwd=cwd)


def _not_sniffed(folder: str, names: list[str]) -> set[str]:
    """expected.json, and every file of a folder whose format a case file chooses (never sniffed)."""
    return set(names) if "case.toml" in names else {"expected.json"}


def logs_folder(tmp_path: Path) -> Path:
    """The golden inputs of every sniffed format, without their expected.json files."""
    logs = tmp_path / "logs"
    shutil.copytree(GOLDEN, logs, ignore=_not_sniffed)
    return logs


def test_ingest_folder_prints_summary_and_json(tmp_path: Path) -> None:
    logs = logs_folder(tmp_path)
    proc = run("ingest", "--case", str(tmp_path / "case"), str(logs))
    assert proc.returncode == 0, proc.stderr
    assert "exchanges: 43" in proc.stdout and "engine_events: 26" in proc.stdout
    proc = run("ingest", "--json", "--quiet", "--case", str(tmp_path / "case"), str(logs))
    data = json.loads(proc.stdout)
    assert data["tables"] == {"exchanges": 43, "engine_events": 26, "quarantine": 2}
    assert all(f["status"].startswith("already ingested") for f in data["files"] if f["path"].endswith(".log"))
    manifest = json.loads((tmp_path / "case" / "manifest.json").read_text())
    assert manifest["reconciled"] is True
    assert {f["format"] for f in manifest["files"] if f["path"].endswith(".jsonl")} == {"cloudflare-ai-gateway", "helicone", "langfuse", "litellm",
                                                                                             "openai-split"}
    for f in manifest["files"]:
        assert len(f["sha256"]) == 64 and f["size"] > 0
        assert f["lines"] == f["ingested"] + f["quarantined"] + f["blank"] + f["duplicate"]


def test_case_files_are_private(tmp_path: Path) -> None:
    assert run("ingest", "-q", "--case", str(tmp_path / "case"), str(GOLDEN / "sglang")).returncode == 0
    assert (tmp_path / "case").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "case" / "engine_events.parquet").stat().st_mode & 0o777 == 0o600


def test_python_dash_m_and_version() -> None:
    proc = run("--version")
    assert proc.returncode == 0 and proc.stdout.startswith("forensics ")


def test_usage_errors_are_click_messages_exit_2() -> None:
    for args in (["ingest", "--case"], ["nosuch"], ["evaluate"]):
        proc = run(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Error:" in proc.stderr and "internal error" not in proc.stderr and "Traceback" not in proc.stderr


def test_ingest_of_many_files_lists_those_with_something_to_report(tmp_path: Path) -> None:
    """An object store export holds a file per request: the summary sums up the files read cleanly and
    still names each file that was not (here one with a broken line)."""
    day = Path(__file__).resolve().parent.parent / "sample_logs" / "gateway" / "litellm-callbacks-2026-08-27.jsonl"
    objects = tmp_path / "objects"
    objects.mkdir()
    lines = [line for line in day.read_bytes().splitlines(keepends=True) if line.strip()][:47]
    for i, line in enumerate(lines[:45]):
        (objects / f"{i:05d}.json").write_bytes(line)
    (objects / "99999.json").write_bytes(lines[45][:40] + b"\n" + lines[46])  # a cut record, then a whole one
    proc = run("ingest", "--format", "litellm", "--case", str(tmp_path / "case"), str(objects))
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stdout.splitlines() if line.startswith("│")]
    assert len(table) == 2, proc.stdout
    assert "99999.json" in table[0] and "1" in table[0].split("│")[5]  # named, with its quarantined line
    assert "45 files read cleanly" in table[1] and "litellm" in table[1]
    assert "46 files: each one's figures are in" in proc.stdout
    data = json.loads(run("ingest", "--json", "--quiet", "--case", str(tmp_path / "case2"), str(objects)).stdout)
    assert len(data["files"]) == 46  # --json keeps every file
