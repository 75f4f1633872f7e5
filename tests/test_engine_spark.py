"""``--engine spark``: the same run on Spark (``local[2]``) gives byte-identical outputs.

The test starts a two-core local Spark session itself (the run uses the active session) and
stops it at the end. It needs PySpark (the test extra installs it) and Java (``.ci/run`` installs
it when missing); without them it fails, it does not skip, so CI proves the claim.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import forensics.ingest
import forensics.match.tuning
from forensics import api, cli, engine
from forensics.config import config_from_mapping
from forensics.errors import ConfigError, ForensicsError, MissingExtraError
from forensics.match.tuning import Tuning

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_logs"


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers import forensics as this interpreter does
    session = (SparkSession.builder.master("local[2]").appName("forensics-test")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _same_runs(case: Path, out: Path) -> dict[str, bytes]:
    """Run the case on both engines; assert every file of both report folders is byte-identical."""
    local = api.run(case, out / "local", engine="local")
    distributed = api.run(case, out / "spark", engine="spark")
    a, b = _files(local.report.report_dir), _files(distributed.report.report_dir)
    assert sorted(a) == sorted(b)
    differing = [name for name in a if a[name] != b[name]]
    assert differing == []
    return a


def test_sample_incident_is_byte_identical_on_spark(spark: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Ingest stops reading the task results when its units run out: that is no failure, and must not
    # abort Spark (stopping a context this process started would make the match pass start a second JVM).
    aborted: list[bool] = []
    monkeypatch.setattr(engine.SparkExecutor, "abort", lambda self: aborted.append(True))
    files = _same_runs(SAMPLE, tmp_path)
    assert aborted == []
    # The comparison covers the evidence, the notifications and the packets (and the case tables).
    assert any(name.startswith("packets/") for name in files)
    assert "notifications.csv" in files and "case/evidence.parquet" in files and "manifest.json" in files
    assert files["notifications.csv"].count(b"\n") > 1  # the sample incident has customers to notify


def test_simulated_incident_split_into_many_tasks_is_byte_identical(spark: object, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    api.simulate(tmp_path / "sim", seed=3, scale="small", compress=False)
    case_file = tmp_path / "sim" / "case.toml"
    # The gateway input as a JSON Lines glob (how a data lake's files are named).
    text = case_file.read_text(encoding="utf-8")
    text, n = re.subn(r'path = "gateway"', 'path = "gateway/*.jsonl"', text)
    assert n == 1
    case_file.write_text(text, encoding="utf-8")
    # Small spans and one pass task per row: many Spark tasks, across partitions and waves.
    monkeypatch.setattr(forensics.ingest, "SPLIT_BYTES", 16 << 10)
    monkeypatch.setattr(forensics.match.tuning, "DEFAULT", Tuning(task_bytes=1))
    files = _same_runs(case_file, tmp_path / "out")
    assert "evidence.csv" in files and files["notifications.csv"].count(b"\n") > 1
    manifest = files["manifest.json"].decode()
    assert manifest.count('"gateway/') >= 2  # every matched file was ingested


LAKE_INPUT = """[[inputs]]
format = "mapped"
path = "lake/**/*.parquet"

[inputs.fields]
request_id = "id"
tenant_id = "project_id"
received_at = "start_time"
completed_at = "end_time"
model = "model"
prompt_messages = "input"
response_text = "output.content"
prompt_tokens = "usage_input"
completion_tokens = "usage_output"
status = "level"
"""


def langfuse_lake(sim: Path, lake: Path) -> int:
    """The simulator's Langfuse JSON Lines as a data lake holds them: a Parquet dataset of
    ``day=`` partitions (small row groups), with a Spark writer's bookkeeping beside the part files.
    Returns the rows written (one per call, its GENERATION observation)."""
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = []
    for path in sorted((sim / "gateway").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:  # the simulator's deliberately broken lines
                continue
            if rec.get("type") == "GENERATION":
                rows.append({"id": rec["id"], "project_id": rec["project_id"], "start_time": rec["start_time"],
                             "end_time": rec["end_time"], "model": rec["provided_model_name"], "input": rec["input"],
                             "output": rec["output"], "usage_input": rec["usage_details"].get("input"),
                             "usage_output": rec["usage_details"].get("output"), "level": rec["level"],
                             "day": str(rec["start_time"])[:10]})
    table = pa.Table.from_pylist(rows)
    pq.write_to_dataset(table, lake, partition_cols=["day"], basename_template="part-00000-{i}-c000.snappy.parquet",
                        row_group_size=16)
    (lake / "_SUCCESS").write_bytes(b"")
    for part in sorted(lake.glob("day=*")):
        (part / "_committed_4711").write_text('{"added":["part-00000-0-c000.snappy.parquet"],"removed":[]}\n')
        (part / ".part-00000-0-c000.snappy.parquet.crc").write_bytes(b"crc\x00")
    attempt = lake / "_temporary" / "0" / "task_1"
    attempt.mkdir(parents=True)
    pq.write_table(table.slice(0, 3).drop(["day"]), attempt / "part-00001-0-c000.snappy.parquet")  # never committed
    return len(rows)


def test_a_partitioned_parquet_dataset_through_a_mapped_profile_is_byte_identical(spark: object, tmp_path: Path) -> None:
    api.simulate(tmp_path / "sim", seed=3, scale="small", fmt="langfuse", compress=False)
    rows = langfuse_lake(tmp_path / "sim", tmp_path / "sim" / "lake")
    case_file = tmp_path / "sim" / "case.toml"
    text = case_file.read_text(encoding="utf-8")
    text, n = re.subn(r'\[\[inputs\]\]\nformat = "langfuse"\npath = "gateway"\n', "", text)
    assert n == 1
    case_file.write_text(text + "\n" + LAKE_INPUT, encoding="utf-8")
    files = _same_runs(case_file, tmp_path / "out")
    assert files["notifications.csv"].count(b"\n") > 1
    manifest = json.loads(files["case/manifest.json"])
    lake = [f for f in manifest["files"] if f["path"].startswith("lake/")]
    assert len(lake) >= 3 and all(f["format"] == "mapped" and "/day=" in f["path"] for f in lake)
    assert sum(f["lines"] for f in lake) == rows  # every row of every partition; no bookkeeping, no uncommitted attempt
    assert manifest["skipped_inputs"] == []


def test_engine_from_the_case_file_and_the_option_overrides_it(spark: object, tmp_path: Path) -> None:
    case = tmp_path / "case.toml"
    text = (SAMPLE / "case.toml").read_text(encoding="utf-8").replace('path = "', f'path = "{SAMPLE.as_posix()}/')
    case.write_text(text + '\n[execution]\nengine = "spark"\nmaster = "local[2]"\n', encoding="utf-8")
    result = api.run(case, tmp_path / "out")  # the case file asks for Spark
    assert result.config.execution == {"engine": "spark", "master": "local[2]"}
    again = api.run(case, tmp_path / "out2", engine="local")
    assert again.config.execution["engine"] == "local"
    assert _files(result.report.report_dir)["evidence.csv"] == _files(again.report.report_dir)["evidence.csv"]


def test_unknown_engine_or_key_is_a_config_error_naming_it() -> None:
    base = {"name": "x", "model": "m", "window_start": "2026-01-01T00:00:00Z", "window_end": "2026-01-02T00:00:00Z",
            "real_ceiling_tokens": 100}
    with pytest.raises(ConfigError) as info:
        config_from_mapping({**base, "execution": {"engine": "ray"}}, base=Path("."))
    assert "[execution] engine = 'ray'" in str(info.value) and "one of local, spark" in str(info.value)
    with pytest.raises(ConfigError, match="unknown key 'engnie' in \\[execution\\]"):
        config_from_mapping({**base, "execution": {"engnie": "spark"}}, base=Path("."))
    with pytest.raises(ConfigError, match="master must be a non-empty string"):
        config_from_mapping({**base, "execution": {"master": ""}}, base=Path("."))
    assert config_from_mapping(base, base=Path(".")).execution == {"engine": "local", "master": "local[*]"}


def test_unknown_engine_option_exits_2_naming_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["run", str(SAMPLE), "--out", str(tmp_path), "--engine", "dask", "-q"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--engine = 'dask'" in err and "local, spark" in err and "Traceback" not in err


def test_missing_pyspark_is_a_clear_error_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.java_gateway", None)  # import fails as when it is not installed
    with pytest.raises(MissingExtraError) as info:
        engine.spark_context("local[1]")
    assert "needs PySpark" in str(info.value) and "pip install 'forensics[spark]'" in str(info.value)


def test_missing_java_is_a_clear_error_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "_active_context", lambda: None)  # as in a process that has no Spark yet
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ConfigError) as info:
        engine.spark_context("local[1]")
    assert "needs a Java runtime" in str(info.value) and "default-jre-headless" in str(info.value)


def test_the_local_engine_never_imports_pyspark(tmp_path: Path) -> None:
    code = ("import sys\nfrom pathlib import Path\nfrom forensics import api\n"
            f"api.run(Path({str(SAMPLE)!r}), Path({str(tmp_path)!r}))\n"
            "assert not [m for m in sys.modules if m.startswith(('pyspark', 'py4j'))], 'pyspark imported'\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_pattern_matching_no_file_is_an_error(tmp_path: Path) -> None:
    from forensics.errors import InputError

    with pytest.raises(InputError, match="no file matches this pattern"):
        api.ingest(tmp_path / "case", [tmp_path / "logs" / "*.jsonl"])


def test_a_failing_spark_task_is_one_clear_error(spark: object) -> None:
    executor = engine.SparkExecutor("local[2]")
    with pytest.raises(ForensicsError) as info:
        list(executor.map_partitions(divmod, [1, 2, 3], 2))  # divmod(None, [...]) raises in the task
    message = str(info.value)
    assert message.startswith("a Spark task failed (TypeError: unsupported operand type(s) for divmod()")
    assert "PYSPARK_PYTHON" in message and "Traceback" not in message


def test_a_pattern_reads_its_matches_as_files_found_in_a_folder(tmp_path: Path) -> None:
    from forensics.ingest import expand_inputs

    logs = tmp_path / "logs"
    for name in ("a/x.jsonl", "b/c/y.jsonl", "b/z.log", ".hidden.jsonl", "a/.w.jsonl"):
        (logs / name).parent.mkdir(parents=True, exist_ok=True)
        (logs / name).write_text("{}\n", encoding="utf-8")
    outside = tmp_path / "secret.jsonl"
    outside.write_text("{}\n", encoding="utf-8")
    (logs / "a" / "link.jsonl").symlink_to(outside)
    files, skipped = expand_inputs([logs / "**" / "*.jsonl"])
    assert [(p.relative_to(logs).as_posix(), explicit) for p, explicit in files] == [("a/x.jsonl", False),
                                                                                       ("b/c/y.jsonl", False)]
    assert [(s.path.name, s.kind) for s in skipped] == [("link.jsonl", "symlink_outside_root")]


def test_without_java_the_run_stops_before_writing_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(engine, "_active_context", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(SystemExit) as info:
        cli.main(["run", str(SAMPLE), "--out", str(tmp_path / "out"), "--engine", "spark", "-q"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "needs a Java runtime" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()

