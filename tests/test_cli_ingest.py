"""The ingest command as a user runs it: exit codes, summary, JSON."""

from __future__ import annotations

import gzip
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


def _objects(folder: Path, records: list[bytes]) -> None:
    """One record per file, as an object store export writes them."""
    folder.mkdir(exist_ok=True)
    for i, line in enumerate(records):
        (folder / f"{i:05d}.json").write_bytes(line)


def _table_rows(stdout: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split("│")[1:-1]] for line in stdout.splitlines() if line.startswith("│")]


DAY = Path(__file__).resolve().parent.parent / "sample_logs" / "gateway" / "litellm-callbacks-2026-08-27.jsonl"


def test_ingest_of_many_files_lists_those_with_something_to_report(tmp_path: Path) -> None:
    """An object store export holds a file per request: the summary sums up the files read cleanly and
    still names each file that was not, the worst first, and says where every file's figures are."""
    lines = [line for line in DAY.read_bytes().splitlines(keepends=True) if line.strip()]
    objects = tmp_path / "objects"
    _objects(objects, lines[:45])
    (objects / "99998.json").write_bytes(b"\n")  # holds no record
    (objects / "99999.json").write_bytes(lines[45][:40] + b"\n" + lines[46])  # a cut record, then a whole one
    proc = run("ingest", "--format", "litellm", "--case", "case", "objects", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = _table_rows(proc.stdout)
    assert [r[0].rsplit("/", 1)[-1] for r in rows[:2]] == ["99999.json", "99998.json"]  # quarantined first, then empty
    assert rows[0][2:5] == ["2", "1", "1"]  # lines, ingested, quarantined
    assert rows[1][2:4] == ["1", "0"]
    assert rows[2][:2] == ["45 files read cleanly", "litellm"] and rows[2][2:4] == ["45", "45"]
    assert len(rows) == 3
    assert "47 files: each one's figures are in" in proc.stdout
    data = json.loads(run("ingest", "--json", "--quiet", "--case", str(tmp_path / "case2"), str(objects)).stdout)
    assert len(data["files"]) == 47  # --json keeps every file

    # Ingested again with one more file, damaged: the files already ingested are summed up and the
    # new one is named, ahead of the files named above (which are in the case now).
    cut = gzip.compress(b"".join(lines[47:60]))
    (objects / "zz-damaged.json.gz").write_bytes(cut[: len(cut) // 2])
    proc = run("ingest", "--format", "litellm", "--case", "case", "objects", cwd=tmp_path)
    rows = _table_rows(proc.stdout)
    assert rows[0][0].endswith("zz-damaged.json.gz") and rows[0][-1] == "ingested with problems"
    assert rows[1][0] == "47 files already ingested" and len(rows) == 2


def test_ingest_of_many_files_with_something_to_report_lists_forty(tmp_path: Path) -> None:
    lines = [line for line in DAY.read_bytes().splitlines(keepends=True) if line.strip()]
    objects = tmp_path / "objects"
    _objects(objects, [line[:30] + b"\n" + line for line in lines[:43]])  # each file: a cut record, then a whole one
    proc = run("ingest", "--format", "litellm", "--case", "case", "objects", cwd=tmp_path)
    rows = _table_rows(proc.stdout)
    assert len(rows) == 41 and all(r[4] == "1" for r in rows[:40])
    assert rows[40][0] == "3 more files with something to report" and rows[40][2:5] == ["6", "3", "3"]


def test_ingest_of_forty_files_lists_each(tmp_path: Path) -> None:
    lines = [line for line in DAY.read_bytes().splitlines(keepends=True) if line.strip()]
    _objects(tmp_path / "objects", lines[:40])
    proc = run("ingest", "--format", "litellm", "--case", "case", "objects", cwd=tmp_path)
    rows = _table_rows(proc.stdout)
    assert len(rows) == 40 and all(r[-1] == "ingested" for r in rows)
    assert "each one's figures" not in proc.stdout
