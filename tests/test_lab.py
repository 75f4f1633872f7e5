"""The lab apart (issue 12): the tool runs without the lab extra, and the lab says how to get it.

Each check runs in a fresh interpreter, so what is in ``sys.modules`` is what the command imported
and Faker can be made unimportable (``sys.modules['faker'] = None``), as in an install without
the ``lab`` extra.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from forensics import schema
from forensics.errors import ConfigError, ForensicsError
from forensics.lab.cases import suspect_rows, write_case

ROOT = Path(__file__).resolve().parent.parent
NO_FAKER = "import sys; sys.modules['faker'] = None\n"


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


def _cli(argv: list[str]) -> str:
    """Code that runs the CLI with ``argv``, then prints its exit code and whether Faker was imported."""
    return ("import sys\nfrom forensics.cli import main\n"
            f"try:\n    main({argv!r})\nexcept SystemExit as exc:\n    code = exc.code\n"
            "print(json.dumps({'code': code, 'faker': sys.modules.get('faker') is not None}))\n")


def _outcome(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_run_of_the_sample_never_imports_faker(tmp_path: Path) -> None:
    proc = _python("import json\n" + _cli(["run", str(ROOT / "sample_logs"), "--out", str(tmp_path / "reports"), "-q"]), tmp_path)
    assert _outcome(proc) == {"code": 1, "faker": False}, proc.stderr  # 1: the sample's customers must be told
    assert (tmp_path / "reports" / "sim-small-seed7" / "notifications.csv").is_file()


def test_importing_the_cli_and_the_api_does_not_import_faker(tmp_path: Path) -> None:
    proc = _python("import sys, forensics.cli, forensics.api\nprint('faker' in sys.modules)", tmp_path)
    assert proc.stdout.strip() == "False", proc.stderr


def test_simulate_without_faker_names_the_lab_extra(tmp_path: Path) -> None:
    for argv in (["simulate", "--out", str(tmp_path / "sim")],
                 ["simulate", "--out", str(tmp_path / "sim"), "--format", "openai-split", "--json"]):
        proc = _python(NO_FAKER + "import json\n" + _cli(argv), tmp_path)
        assert _outcome(proc)["code"] == 2
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
        assert "forensics simulate needs the Python package 'faker'" in proc.stderr
        assert "pip install -e '.[lab]'" in proc.stderr
        assert not (tmp_path / "sim").exists()


def test_the_simulator_library_without_faker_raises_a_clear_import_error(tmp_path: Path) -> None:
    # An ImportError (so code treating the lab as optional skips it) that is also the tool's error.
    code = NO_FAKER + ("from forensics.errors import MissingExtraError\n"
                       "try:\n    import forensics.lab.simulate\nexcept MissingExtraError as exc:\n"
                       "    print(isinstance(exc, ImportError), exc)\n")
    proc = _python(code, tmp_path)
    assert proc.stdout.startswith("True forensics simulate needs the Python package 'faker'"), proc.stderr
    assert "pip install -e '.[lab]'" in proc.stdout


def test_evaluate_needs_nothing_from_the_lab_extra(tmp_path: Path) -> None:
    # Scoring a report reads JSON and CSV only: an auditor can run it on a plain install.
    truth = ROOT / "sample_logs" / "truth.json"
    code = NO_FAKER + ("import json\nfrom pathlib import Path\nfrom forensics.lab.evaluate import build_report_from_truth\n"
                       f"build_report_from_truth(json.loads(Path({str(truth)!r}).read_text()), Path({str(tmp_path / 'perfect')!r}))\n")
    code += _cli(["evaluate", "--truth", str(truth), "--report", str(tmp_path / "perfect"), "--json"])
    proc = _python(code, tmp_path)
    assert _outcome(proc)["code"] == 0, proc.stderr
    scores = json.loads(proc.stdout.strip().rsplit("\n", 1)[0])  # the outcome line follows the JSON
    assert scores["customers"]["exposed"]["recall"] == 1.0 and scores["customers"]["exposed"]["precision"] == 1.0


# ---- the shared case builder (forensics.lab.cases) -----------------------------------------


def test_case_builder_writes_canonical_tables_with_the_row_groups_asked_for(tmp_path: Path) -> None:
    rows = [{"request_id": f"r{i}", "tenant_id": "acme" if i % 2 else "bolt", "model": "glm-5.3",
             "received_at": f"2026-08-29T10:{i:02d}:00Z", "completed_at": f"2026-08-29T10:{i:02d}:30Z"} for i in range(10)]
    rows.append(dict(rows[3], tenant_id="bolt", prompt_text="same id, other customer"))
    case = write_case(tmp_path / "case", rows, suspects=suspect_rows(rows, ["r1", ("r3", "acme")], engine_signature=[("r3", "acme")]),
                      row_group_rows=4)
    exchanges = pq.ParquetFile(case / "exchanges.parquet")
    assert exchanges.schema_arrow == schema.EXCHANGES
    assert [exchanges.metadata.row_group(i).num_rows for i in range(exchanges.num_row_groups)] == [4, 4, 3]
    sus = pq.read_table(case / "suspects.parquet")
    assert sus.schema == schema.SUSPECTS
    assert [(r["request_id"], r["tenant_id"], r["engine_signature"], r["received_at"].isoformat())
            for r in sus.to_pylist()] == [("r1", "acme", False, "2026-08-29T10:01:00+00:00"), ("r3", "acme", True, "2026-08-29T10:03:00+00:00")]


def test_case_builder_refuses_a_column_the_schema_does_not_have(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown column\(s\) \['tenant'\]"):
        write_case(tmp_path / "case", [{"request_id": "r1", "tenant": "acme"}])


# ---- the benchmarks' harness (forensics.lab.bench) -----------------------------------------

MB = 1 << 20


def _hold(megabytes: int, seconds: float) -> None:
    """Keep ``megabytes`` resident for ``seconds`` (long enough for the sampler to see them)."""
    import time

    block = bytearray(megabytes * MB)
    block[::4096] = b"x" * len(block[::4096])  # touch every page so it is resident, not only reserved
    time.sleep(seconds)


def _worker_holding(worker_mb: int) -> subprocess.Popen[bytes]:
    """A worker process that holds ``worker_mb`` (resident) for a second."""
    code = f"b = bytearray({worker_mb * MB}); b[::4096] = b'x' * len(b[::4096]); import time; time.sleep(1.0)"
    return subprocess.Popen([sys.executable, "-c", code])


def _allocate_with_a_worker(main_mb: int, worker_mb: int) -> str:
    """Hold ``main_mb`` here while a worker process holds ``worker_mb``; return a value to hand back."""
    worker = _worker_holding(worker_mb)
    _hold(main_mb, 1.0)
    return f"done {worker.wait()}"


def test_harness_measures_the_child_and_its_worker() -> None:
    from forensics.lab.bench import measure

    m = measure(_allocate_with_a_worker, 96, worker_mb=64)
    assert m.value == "done 0"
    assert m.max_rss_bytes >= 96 * MB and m.rss_main_bytes >= 96 * MB
    assert 64 * MB <= m.rss_worker_bytes < 96 * MB  # the worker's own peak, not the main process's
    assert m.cpu_seconds > 0 and 0 < m.seconds <= m.wall_seconds


def _phases_with_a_worker(main_mb: int, worker_mb: int) -> str:
    """Phase "alone" holds ``main_mb`` here; phase "together" adds a worker holding ``worker_mb``."""
    from forensics.lab import bench

    bench.phase("alone")
    _hold(main_mb, 0.5)
    bench.phase("together")
    worker = _worker_holding(worker_mb)
    _hold(main_mb, 1.0)
    return f"done {worker.wait()}"


def test_harness_measures_every_process_all_together_and_per_phase() -> None:
    from forensics.lab.bench import measure

    m = measure(_phases_with_a_worker, 96, worker_mb=64)
    assert m.value == "done 0"
    roles = [p.role for p in m.processes]
    assert roles[0] == "parent" and "process" in roles
    worker = next(p for p in m.processes if p.role == "process")
    assert worker.first_phase == "together" and 64 * MB <= worker.rss_bytes < 96 * MB
    # Both held at once: the total is more than either alone.
    assert m.rss_total_bytes >= 96 * MB + 64 * MB
    phases = {p.name: p for p in m.phases}
    assert [p.name for p in m.phases][-2:] == ["alone", "together"]
    assert phases["alone"].rss_total_bytes >= 96 * MB
    assert phases["together"].rss_total_bytes >= phases["alone"].rss_total_bytes + 60 * MB  # the worker's share
    assert phases["together"].seconds >= 0.5


def _busy(seconds: float) -> None:
    """Keep one core busy for ``seconds``."""
    import time

    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def _cpu_in_phases() -> str:
    """Phase "busy" computes here, phase "idle" sleeps, phase "worker" waits for a worker that computes."""
    import time

    from forensics.lab import bench

    bench.phase("busy")
    _busy(0.6)
    bench.phase("idle")
    time.sleep(0.6)
    bench.phase("worker")
    code = "import time\nend = time.process_time() + 0.6\nwhile time.process_time() < end: pass\ntime.sleep(0.3)"
    return f"done {subprocess.Popen([sys.executable, '-c', code]).wait()}"


def test_harness_gives_each_phase_the_cpu_time_of_every_process_in_it() -> None:
    # Seconds on a shared machine grow with other jobs' load; CPU time does not, so the benchmarks
    # compare runs by it too. A worker's computing counts in the phase it ran in.
    from forensics.lab.bench import measure

    m = measure(_cpu_in_phases)
    assert m.value == "done 0"
    cpu = {p.name: p.cpu_seconds for p in m.phases}
    assert cpu["busy"] >= 0.5
    assert cpu["idle"] < 0.3
    assert cpu["worker"] >= 0.5  # the worker's, as the parent only waited
    assert sum(cpu.values()) <= m.cpu_seconds + 0.3


def _phases_again() -> None:
    """Phases a, b, a, b, each computing for 0.3 s."""
    from forensics.lab import bench

    for name in ("a", "b", "a", "b"):
        bench.phase(name)
        _busy(0.3)


def test_a_phase_entered_twice_counts_both_times() -> None:
    # `forensics run` enters "ingest" once per input entry it maps: the phase's seconds counted its first
    # time only (from its first start to the next phase's first start), its CPU both.
    from forensics.lab.bench import measure

    m = measure(_phases_again)
    phases = {p.name: p for p in m.phases}
    for name in ("a", "b"):
        assert 0.5 <= phases[name].cpu_seconds <= phases[name].seconds + 0.1, phases[name]
    assert phases["start"].seconds < 0.25


def test_a_worker_seen_late_brings_the_cpu_it_had_already_used() -> None:
    # A worker is listed every few samples: what it computed before it was first seen is counted in the
    # phase it is seen in, not lost.
    pytest.importorskip("psutil")
    from forensics.lab import bench

    running: list[Any] = []

    class Parent:
        pid = 1

        def memory_info(self) -> Any:
            return types.SimpleNamespace(rss=MB)

        def cpu_times(self) -> Any:
            return types.SimpleNamespace(user=0.0, system=0.0)

        def children(self, recursive: bool = False) -> list[Any]:
            return list(running)

    worker = types.SimpleNamespace(pid=2, memory_info=lambda: types.SimpleNamespace(rss=MB),
                                   cpu_times=lambda: types.SimpleNamespace(user=1.5, system=0.5),
                                   cmdline=lambda: ["python", "-c", "work"])
    sampler = bench._Sampler(3600.0)
    sampler.stop()  # its own thread sampled once and ended: this test drives the sampling
    sampler._me = Parent()
    try:
        bench.phase("work")
        sampler.sample()
        running.append(worker)
        sampler.sample(relist=True)
        sampler.sample()
    finally:
        bench.phase("start")
    assert {p.name: p.cpu_seconds for p in sampler.phase_peaks()}["work"] == 2.0


class _ChildSeenAfterASwitch:
    """A stand-in for psutil's process: listing its children switches the phase first, as the
    measured function does when it starts a worker while the sampler is reading the parent."""

    pid = 1

    def __init__(self, child: Any) -> None:
        self._child = child

    def memory_info(self) -> Any:
        return types.SimpleNamespace(rss=MB)

    def cpu_times(self) -> Any:
        return types.SimpleNamespace(user=0.0, system=0.0)

    def children(self, recursive: bool = False) -> list[Any]:
        from forensics.lab import bench

        bench.phase("together")  # the phase switch, then the worker it starts
        return [self._child]


def test_harness_gives_a_worker_the_phase_it_started_in_not_the_one_the_sample_began_in() -> None:
    # Seen on CI under load: the sampler read the phase ("alone"), the measured function switched
    # to "together" and started a worker, and the sampler then listed that worker as first seen
    # in "alone", its memory counted there too.
    pytest.importorskip("psutil")
    from forensics.lab import bench

    worker = types.SimpleNamespace(pid=2, memory_info=lambda: types.SimpleNamespace(rss=2 * MB),
                                   cpu_times=lambda: types.SimpleNamespace(user=0.0, system=0.0),
                                   cmdline=lambda: ["python", "-c", "work"])
    sampler = bench._Sampler(3600.0)
    sampler.stop()  # its own thread sampled once and ended: this test drives the sampling
    try:
        bench.phase("alone")
        sampler._me = _ChildSeenAfterASwitch(worker)
        sampler.sample()
    finally:
        bench.phase("start")
    assert {p.pid: p.first_phase for p in sampler.processes()}[2] == "together"
    phases = {p.name: p.rss_total_bytes for p in sampler.phase_peaks()}
    assert phases["together"] == 3 * MB and "alone" not in phases  # the whole sample, parent and worker


def test_the_sampler_lists_the_processes_seldom_but_reads_their_memory_every_time() -> None:
    # Listing the descendants reads every process of the machine, holding the measured process's GIL:
    # at every 20 ms sample it cost the measured function 6% of its time (1.3 ms a sample). They are
    # listed every RELIST_EVERY samples, when a phase ends, as the next begins and at the end; the
    # memory of every process known is read at every sample.
    pytest.importorskip("psutil")
    from forensics.lab import bench

    reads = {"children": 0, "parent": 0, "worker": 0}
    running: list[Any] = []

    def memory(who: str, mib: int) -> Any:
        reads[who] += 1
        return types.SimpleNamespace(rss=mib * MB)

    class Parent:
        pid = 1

        def memory_info(self) -> Any:
            return memory("parent", 1)

        def cpu_times(self) -> Any:
            return types.SimpleNamespace(user=0.0, system=0.0)

        def children(self, recursive: bool = False) -> list[Any]:
            reads["children"] += 1
            return list(running)

    worker = types.SimpleNamespace(pid=2, memory_info=lambda: memory("worker", 5),
                                   cpu_times=lambda: types.SimpleNamespace(user=1.0, system=0.0),
                                   cmdline=lambda: ["python", "-c", "work"])
    sampler = bench._Sampler(3600.0)
    sampler.stop()  # its own thread sampled once and ended: this test drives the sampling
    sampler._done.clear()
    sampler._me = Parent()
    try:
        bench.phase("one")
        for _ in range(2 * bench.RELIST_EVERY + 1):
            sampler.sample()
        assert reads == {"children": 3, "parent": 2 * bench.RELIST_EVERY + 1, "worker": 0}
        running.append(worker)  # started between two listings, late in phase "one"
        sampler.sample()
        assert reads["children"] == 3 and reads["worker"] == 0
        bench._ACTIVE = sampler  # as while a call is measured
        bench.phase("two")  # the phase that ends is listed first: the worker started in it
        assert reads["children"] == 4 and reads["worker"] == 1
        for _ in range(3):
            sampler.sample()
        assert reads["children"] == 5 and reads["worker"] == 4  # listed as "two" began, read every time
        sampler.stop()
        sampler.sample()  # the end state
        assert reads["children"] == 6
    finally:
        bench._ACTIVE = None
        bench.phase("start")
    seen = {p.pid: p.first_phase for p in sampler.processes() if p.pid in (1, 2)}  # (not this test's own process)
    assert seen == {1: "one", 2: "one"}
    peaks = {p.name: p.rss_total_bytes for p in sampler.phase_peaks() if p.name != "start"}
    assert peaks == {"one": 6 * MB, "two": 6 * MB}


def test_harness_reports_a_failed_call_without_hiding_it(capfd: pytest.CaptureFixture[str]) -> None:
    from forensics.lab.bench import measure

    with pytest.raises(ForensicsError, match="the measured call _hold failed in its child process"):
        measure(_hold, "not a number", 0.0, interval=None)
    assert "TypeError" in capfd.readouterr().err  # the child's traceback is on stderr


def test_benchmarks_import_the_package_as_installed() -> None:
    # A benchmark that puts the checkout on sys.path measures that copy, not the installed one,
    # and one that builds code as a string escapes ruff and mypy: both were here before.
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        text = script.read_text(encoding="utf-8")
        assert "sys.path" not in text, script.name
        assert '[sys.executable, "-c"' not in text, script.name


def test_scan_benchmark_runs_from_any_folder_on_the_shared_builder(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "scan.py"), "--exchanges", "5000", "--out", "case"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "missed=0 extra=0" in proc.stdout  # every planted suspect found, nothing else


def _run_benchmark_module() -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "benchmarks" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_end_to_end_benchmark_repeats_logs_with_request_ids_of_their_own(tmp_path: Path) -> None:
    bench_run: Any = _run_benchmark_module()
    ids = ["chatcmpl-" + f"{n:024x}" for n in (1, 2, 3)]
    gateway = tmp_path / "gateway.jsonl"
    gateway.write_bytes(b"".join(json.dumps({"id": i, "messages": [{"content": "x" * 50}]}).encode() + b"\n" for i in ids))
    engine = tmp_path / "engine.log"
    engine.write_bytes(b"".join(f"[t] ReqTimeStats(rid={i}, input_len=5)\n".encode() for i in ids))

    bench_run._copy_file(gateway, tmp_path / "g3.jsonl", 3, seed=1)
    bench_run._copy_file(engine, tmp_path / "e3.log", 3, seed=1)
    g_lines = (tmp_path / "g3.jsonl").read_text().splitlines()
    e_lines = (tmp_path / "e3.log").read_text().splitlines()
    g_ids = [json.loads(line)["id"] for line in g_lines]
    e_ids = [line.split("rid=")[1].split(",")[0] for line in e_lines]
    assert g_ids[:3] == ids  # the first copy is the simulation itself
    assert len(set(g_ids)) == 9 and all(len(i) == len(ids[0]) for i in g_ids)  # every copy has ids of its own
    assert g_ids == e_ids  # rewritten alike in gateway and engine lines: they still join

    bench_run._copy_file(gateway, tmp_path / "half.jsonl", 1.5, seed=1)
    half = (tmp_path / "half.jsonl").read_text().splitlines()
    assert 3 < len(half) < 6 and all(json.loads(line) for line in half)  # a fraction of a copy is whole lines


def _fake_seed(work: Path, seed: int, n: int, part: str = "") -> list[str]:
    """A stand-in for a seed's simulated incident (as ``base_incident`` keeps it, ``part`` its corpus share's
    suffix): its request ids."""
    base = work / f"base-seed{seed}{part}"
    ids = ["chatcmpl-" + f"{seed:08x}{i:016x}" for i in range(n)]
    for part in ("gateway", "engine"):
        (base / part).mkdir(parents=True)
    (base / "gateway" / "litellm-callbacks-2026-08-27.jsonl").write_bytes(b"".join(
        json.dumps({"id": i, "tenant": f"org-{seed}", "messages": [{"content": "x" * 50}]}).encode() + b"\n" for i in ids))
    for node in ("decode-0_0.log", "prefill-0_0.log"):
        (base / "engine" / node).write_bytes(b"".join(f"[t] ReqTimeStats(rid={i}, input_len=5)\n".encode() for i in ids))
    (base / "case.toml").write_text(f'name = "seed{seed}"\n')
    (base / ".complete").write_text("")
    return ids


def test_end_to_end_benchmark_builds_an_incident_from_distinct_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics.ingest.formats.sglang import node_of

    bench_run: Any = _run_benchmark_module()
    # Each seed owns a share of the corpus of its own: one and a half seeds' size is cut into two shares.
    one, two = _fake_seed(tmp_path, 1, 10, "-part1of2"), _fake_seed(tmp_path, 2, 10, "-part2of2")
    seed_mb = (tmp_path / "base-seed1-part1of2" / "gateway" / "litellm-callbacks-2026-08-27.jsonl").stat().st_size / 1e6
    monkeypatch.setattr(bench_run, "SEED_MB_AT_LEAST", 0.9 * seed_mb)
    assert bench_run.corpus_parts(1.5 * seed_mb) == 2
    folder = bench_run.incident(tmp_path, 1.5 * seed_mb, 1, tmp_path / "corpus", "distinct")
    lines = (folder / "gateway" / "litellm-callbacks-2026-08-27.jsonl").read_text().splitlines()
    g_ids = [json.loads(line)["id"] for line in lines]
    # One gateway: the day's file holds the first seed whole, then the first half of the second.
    assert g_ids[:10] == one and 3 < len(g_ids[10:]) < 8 and g_ids[10:] == two[: len(g_ids) - 10]
    # Each seed on its own nodes: no node's log holds two seeds, and the ids still join.
    engine = {p.name: [line.split("rid=")[1].split(",")[0] for line in p.read_text().splitlines()]
              for p in (folder / "engine").iterdir()}
    assert sorted(engine) == ["decode-0-s2_0.log", "decode-0_0.log", "prefill-0-s2_0.log", "prefill-0_0.log"]
    assert engine["decode-0_0.log"] == one and engine["decode-0-s2_0.log"] == two[: len(engine["decode-0-s2_0.log"])]
    assert node_of("decode-0-s2_0.log") == ("decode-0-s2", 0)
    assert (folder / "case.toml").read_text() == 'name = "seed1"\n'
    # The seeds it merges, whose truths score the run's list.
    assert [(p["seed"], Path(p["truth"]).parent.name) for p in json.loads((folder / "seeds.json").read_text())] == [
        (1, "base-seed1-part1of2"), (2, "base-seed2-part2of2")]
    # A size under a hundredth of a seed still takes the first seed (the loop once never started, and the build
    # failed on an empty list of seeds).
    _fake_seed(tmp_path, 1, 10, "-part1of1")
    tiny = bench_run.incident(tmp_path, seed_mb / 1000, 1, tmp_path / "corpus", "distinct")
    assert [p["seed"] for p in json.loads((tiny / "seeds.json").read_text())] == [1]
    # Kept for a rerun; one built before the seeds owned shares of the corpus of their own is built again.
    assert bench_run.incident(tmp_path, 1.5 * seed_mb, 1, tmp_path / "corpus", "distinct") == folder
    (folder / ".complete").write_text("")
    (folder / "gateway" / "litellm-callbacks-2026-08-27.jsonl").write_text("stale\n")
    bench_run.incident(tmp_path, 1.5 * seed_mb, 1, tmp_path / "corpus", "distinct")
    assert (folder / "gateway" / "litellm-callbacks-2026-08-27.jsonl").read_text().splitlines() == lines


def _truth_file(path: Path, pairs: list[tuple[str, str]], exposed: list[str]) -> dict[str, Any]:
    path.write_text(json.dumps({"fragments": [{"recipient_request_id": r, "source_tenant_id": t, "is_leak": True}
                                              for r, t in pairs]
                                             + [{"recipient_request_id": "rX", "source_tenant_id": "tX", "is_leak": False}],
                                "exposed": exposed}))
    return {"seed": 0, "truth": str(path), "fraction": 1.0}


def test_end_to_end_benchmark_scores_the_list_against_every_merged_seeds_truth(tmp_path: Path) -> None:
    bench_run: Any = _run_benchmark_module()
    seeds = [_truth_file(tmp_path / "t1.json", [("r1", "ann"), ("r2", "ben")], ["ann", "ben"]),
             _truth_file(tmp_path / "t2.json", [("r3", "cyd")], ["cyd"])]
    (tmp_path / "seeds.json").write_text(json.dumps(seeds))
    (tmp_path / "out" / "report").mkdir(parents=True)
    (tmp_path / "out" / "case").mkdir()
    rows = [("recipient_request_id", "source_tenant_id", "relation"), ("r1", "ann", "cross_tenant"),
            ("r1", "ann", "cross_tenant"), ("r3", "cyd", "cross_tenant"), ("r3", "dan", "cross_tenant"),
            ("r2", "eve", "same_tenant")]
    (tmp_path / "out" / "report" / "evidence.csv").write_text("".join(",".join(r) + "\r\n" for r in rows))
    (tmp_path / "out" / "case" / "evidence.csv").write_text("not the report\n")
    assert bench_run.score_list(tmp_path / "out", tmp_path / "seeds.json") == {
        "pairs": 3, "true_pairs": 2, "truth_pairs": 3, "pair_precision": 0.667, "pair_recall": 0.667, "exposed": 3,
        "true_exposed": 2, "truth_exposed": 3, "exposed_precision": 0.667, "exposed_recall": 0.667}
    assert bench_run.score_list(tmp_path / "out", tmp_path / "none.json") is None  # a repeat-shaped incident


def test_end_to_end_benchmark_scores_a_seed_cut_short_by_the_leaks_the_case_holds(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    bench_run: Any = _run_benchmark_module()
    whole = _truth_file(tmp_path / "t1.json", [("r1", "ann")], ["ann"])
    cut = {**_truth_file(tmp_path / "t2.json", [("r3", "cyd"), ("r4", "dan"), ("r5", "eve")], ["cyd", "dan", "eve"]),
           "fraction": 0.4}
    fragments = json.loads((tmp_path / "t2.json").read_text())["fragments"]
    for f, source in zip(fragments, ("s3", "s4", "s5-not-kept")):
        f["source_request_id"] = source
    (tmp_path / "t2.json").write_text(json.dumps({"fragments": fragments, "exposed": ["cyd", "dan", "eve"]}))
    (tmp_path / "seeds.json").write_text(json.dumps([whole, cut]))
    (tmp_path / "out" / "report" / "case").mkdir(parents=True)
    # The case holds the first lines of the cut seed: r3 and its source, r4 without its source, r5 but not its source.
    pq.write_table(pa.table({"request_id": ["r1", "r3", "s3", "r4", "r5"]}), tmp_path / "out" / "report" / "case" / "exchanges.parquet")
    rows = [("recipient_request_id", "source_tenant_id", "relation"), ("r1", "ann", "cross_tenant"), ("r3", "cyd", "cross_tenant")]
    (tmp_path / "out" / "report" / "evidence.csv").write_text("".join(",".join(r) + "\r\n" for r in rows))
    # Only r1 and r3 could be found: counted whole, the cut seed's other leaks made the recall 0.5.
    assert bench_run.score_list(tmp_path / "out", tmp_path / "seeds.json") == {
        "pairs": 2, "true_pairs": 2, "truth_pairs": 2, "pair_precision": 1.0, "pair_recall": 1.0, "exposed": 2,
        "true_exposed": 2, "truth_exposed": 2, "exposed_precision": 1.0, "exposed_recall": 1.0}


def test_end_to_end_benchmark_prints_the_stage_table_of_a_run(tmp_path: Path, capsys: Any) -> None:
    from forensics.lab.bench import Measurement

    bench_run: Any = _run_benchmark_module()
    value = bench_run.run_case(ROOT / "sample_logs", tmp_path / "reports")  # in this process: no child needed
    stages, searched = value
    assert [st["stage"] for st in stages] == ["ingest", "scan", "match", "report"]
    assert searched["tokens"] > 0 and searched["findings"]["total"] > 0

    def measured(v: object) -> Measurement:
        return Measurement(value=v, seconds=2.0, wall_seconds=2.0, cpu_seconds=2.0, rss_main_bytes=1 << 20,
                           rss_worker_bytes=0, max_rss_bytes=1 << 20, rss_total_bytes=1 << 20)

    summary = bench_run.report([{"factor": 1, "size_mb": 1, "gateway_mb": 1.0, "engine_mb": 0.1, "run": measured(value),
                                 "duckdb": measured(None), "ingest": None}])
    out = capsys.readouterr().out
    assert "match searched" in out and summary["match_tokens_1x"] == searched["tokens"]


def test_warm_page_cache_reads_every_byte_of_files_and_folders_once(tmp_path: Path) -> None:
    from forensics.lab.bench import WARM_CHUNK, warm_page_cache

    folder = tmp_path / "gateway"
    (folder / "day").mkdir(parents=True)
    (folder / "a.jsonl").write_bytes(b"x" * 10)
    (folder / "day" / "b.jsonl").write_bytes(b"y" * (WARM_CHUNK + 3))  # more than one chunk
    (folder / "empty.jsonl").write_bytes(b"")
    single = tmp_path / "engine.log"
    single.write_bytes(b"z" * 7)
    assert warm_page_cache([folder, single]) == 10 + WARM_CHUNK + 3 + 7
    assert warm_page_cache([]) == 0
