"""benchmarks/quality.py's scoring and printing, on a perfect report of a small simulated incident (no pipeline run)."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from forensics.lab.evaluate import build_report_from_truth, evaluate
from forensics.lab.simulate import simulate

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "quality.py"


@pytest.fixture(scope="module")
def quality() -> Any:
    spec = importlib.util.spec_from_file_location("quality_bench", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def perfect(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("q")
    simulate(root / "sim", seed=7, scale="small")
    truth = json.loads((root / "sim" / "truth.json").read_text())
    build_report_from_truth(truth, root / "report")
    return root / "sim" / "truth.json", root / "report"


def _case(quality: Any, truth_path: Path, report: Path, label: str = "default") -> dict[str, Any]:
    truth = json.loads(truth_path.read_text())
    row = quality.score(evaluate(truth_path, report).to_json(), truth, report, 1.0)
    return {"seed": 7, "format": "litellm", "simulate_seconds": 1.0, "evaluate_seconds": 0.1, "stages": {"match": 0.5},
            "counts": {k: 1 for k in ("tenants", "requests", "suspects", "leak_fragments", "finding_pairs", "hard_negatives")},
            label: row, "rules": None, "rules_unavailable": "the matcher refused [match] tiering"}


def test_without_null_section_calibration_is_na(quality: Any, perfect: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    truth_path, report = perfect
    (report / "match.json").write_text(json.dumps({"control": {"size": 200, "responses_with_findings": 1, "false_positive_rate": 0.005},
                                                   "parameters": {}}))
    case = _case(quality, truth_path, report)
    pooled = {"default": quality.pool([case], "default"), "rules": quality.pool([case], "rules")}
    assert pooled["rules"] is None and pooled["default"]["null"] is None
    met = quality.checks(pooled["default"])
    assert met.pop("null_calibration") is None  # not measured without a null section
    assert all(met.values())  # a perfect report meets every other target
    quality.print_report([case], pooled, 5)
    out = capsys.readouterr().out
    assert "n/a (match.json has no null section)" in out and "unavailable" in out
    assert "recent-occupant test: n/a" in out
    assert "exposed_precision met" in out and "MISSED" not in out


def test_null_section_and_expected_by_chance_are_read(quality: Any, perfect: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    truth_path, report = perfect
    null = {"rules": {"R1": {"observed_false_positives": 1, "expected_false_positives": 0.8},
                      "R2": {"observed_false_positives": 0, "expected_false_positives": 0.25}},
            "recent_occupants": {"ran": True, "window_records": 31, "confirmed_findings_used": 246}}
    (report / "match.json").write_text(json.dumps({"control": {}, "parameters": {"tiering": "evalue"}, "null": null}))
    with open(report / "evidence.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    with open(report / "evidence.csv", "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows([rows[0] + ["expected_by_chance"]] + [r + ["0.01"] for r in rows[1:]])
    case = _case(quality, truth_path, report)
    assert case["default"]["tiering"] == "evalue"
    assert case["default"]["null"] == [{"rule": "rules/R1", "observed": 1, "expected": 0.8},
                                       {"rule": "rules/R2", "observed": 0, "expected": 0.25}]
    ebc = case["default"]["expected_by_chance"]
    assert ebc["rows"] == len(rows) - 1 and ebc["wrong_rows"] == 0 and ebc["expected_by_chance"] == pytest.approx(0.01 * (len(rows) - 1))
    pooled = {"default": quality.pool([case, case], "default"), "rules": None}
    assert pooled["default"]["null"][0] == {"rule": "rules/R1", "observed": 2.0, "expected": 1.6}
    assert pooled["default"]["pairs"]["truth"] == 2 * case["default"]["pairs"]["truth"]
    quality.print_report([case], pooled, 5)
    out = capsys.readouterr().out
    assert "rules/R1 2.0 vs 1.60" in out
    assert "recent-occupant test: window of 31 records, placed by 246 confirmed same-node findings" in out


def test_window_check_counts_chance_candidates_whose_source_lies_in_the_window(quality: Any, tmp_path: Path) -> None:
    import datetime as dt

    import pyarrow as pa
    import pyarrow.parquet as pq

    # 100 records a minute apart; the suspects r50 and r80 completed at minutes 50 and 80.
    t0 = dt.datetime(2026, 8, 1, tzinfo=dt.UTC)
    times = [t0 + dt.timedelta(minutes=i) for i in range(100)]
    case, report = tmp_path / "case", tmp_path / "report"
    case.mkdir()
    report.mkdir()
    pq.write_table(pa.table({"request_id": [f"r{i}" for i in range(100)], "tenant_id": [f"t{i % 7}" for i in range(100)],
                             "received_at": pa.array(times, pa.timestamp("us", tz="UTC")),
                             "completed_at": pa.array(times, pa.timestamp("us", tz="UTC")),
                             "decode_node": pa.array([None] * 100, pa.string())}), case / "exchanges.parquet")
    (report / "match.json").write_text(json.dumps({"null": {"recent_occupants": {"ran": True, "window_records": 5}}}))
    fields = ["recipient_request_id", "recipient_tenant_id", "source_tenant_id", "relation", "other_source_requests",
              "records_since_source_on_node", "why_not_notified"]
    rows = [
        # a true leak: not counted
        ["r50", "t1", "t2", "cross_tenant", "0", "1", ""],
        # chance, in the window, 4 copies
        ["r50", "t1", "t3", "cross_tenant", "3", "2", ""],
        # chance, outside the window, 1 copy
        ["r80", "t3", "t4", "cross_tenant", "0", "40", "expected_by_chance 0.5 > 0.1: ..."],
        # chance, on another node, 2 copies
        ["r80", "t3", "t5", "cross_tenant", "1", "", "expected_by_chance 0.5 > 0.1: ..."],
        # explained away by a stronger pair: not a candidate of its own
        ["r80", "t3", "t6", "cross_tenant", "0", "3", quality.EXPLAINED + " (finding f-1): ..."],
        # the recipient's own text: not counted
        ["r80", "t3", "t3", "same_tenant", "0", "1", ""],
    ]
    for name, part in (("evidence.csv", rows[:2]), ("review.csv", rows[2:])):
        with open(report / name, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(fields)
            w.writerows(part)
    truth = {"fragments": [{"recipient_request_id": "r50", "source_tenant_id": "t2", "is_leak": True}]}
    got = quality.window_check(report, case, truth)
    assert got["candidates"] == 3 and got["in_window"] == 1
    # records searched before each: 50 and 80; the window holds 5 of them
    assert got["expected"] == pytest.approx(5 / 50 + 5 / 80 + 5 / 80)
    assert got["by_copies"]["4-7"] == {"candidates": 1, "in_window": 1, "expected": pytest.approx(0.1)}
    assert got["by_copies"]["1"]["candidates"] == 1 and got["by_copies"]["2-3"]["candidates"] == 1
    assert "1 in the window vs 0.2 expected, of 3 candidates" in quality._window_line(got)
    (report / "match.json").write_text(json.dumps({"null": {"recent_occupants": {"ran": False}}}))
    assert quality.window_check(report, case, truth) is None


def test_the_ranking_frontier_is_the_best_single_threshold_at_the_precision_target(quality: Any, tmp_path: Path) -> None:
    fields = ["recipient_request_id", "recipient_tenant_id", "source_tenant_id", "relation",
              "expected_by_chance_with_mechanism", "why_not_notified"]
    over = quality.OVER_THRESHOLD + "0.002 > 0.001: ..."
    evidence = [["r1", "a", "b", "cross_tenant", "1e-06", ""], ["r1", "a", "b", "cross_tenant", "0.5", ""],  # one pair
                ["r2", "a", "c", "cross_tenant", "0.0005", ""],  # a chance pair notified
                ["r3", "a", "a", "same_tenant", "1e-09", ""]]  # not a cross-tenant pair
    review = [["r4", "a", "d", "cross_tenant", "0.002", over], ["r5", "a", "e", "cross_tenant", "0.003", over],
              ["r6", "a", "f", "cross_tenant", "1e-07", "mostly text other tenants also held (rarity 0.2 < 0.5): ..."],
              ["r7", "a", "g", "cross_tenant", "0.004", over]]
    for name, rows in (("evidence.csv", evidence), ("review.csv", review)):
        with open(tmp_path / name, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(fields)
            w.writerows(rows)
    leaks = [("r1", "b"), ("r4", "d"), ("r5", "e"), ("r6", "f"), ("r8", "h")]  # r6: rarity decides it; r8: no candidate
    truth = {"fragments": [{"recipient_request_id": r, "recipient_tenant_id": "a", "source_tenant_id": s, "is_leak": True}
                           for r, s in leaks]}
    got = quality.ranking(tmp_path, truth)
    assert got == {"truth": 5, "candidates": [[1e-06, True], [0.0005, False], [0.002, True], [0.003, True], [0.004, False]]}
    f = quality.frontier([got], 0.75)
    assert f["true_with_candidate"] == 3 and f["ceiling"] == 0.6
    # E <= 0.003 notifies 3 true pairs and 1 chance pair (P 0.75, R 0.6); E <= 0.004 would fall to P 0.6.
    assert f["best"] == {"threshold": 0.003, "precision": 0.75, "recall": 0.6}
    assert quality.frontier([got], 0.99)["best"] == {"threshold": 1e-06, "precision": 1.0, "recall": 0.2}
    line = quality._frontier_line(f)
    assert "3 of 5 true pairs (recall ceiling 0.600)" in line and "E <= 0.003 gives P 0.750, R 0.600" in line
    assert quality.ranking(tmp_path / "missing", truth) is None


def test_missed_customers_are_split_into_in_review_and_no_candidate(quality: Any, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    with open(tmp_path / "review.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["recipient_request_id", "recipient_tenant_id", "source_tenant_id", "why_not_notified"])
        w.writerow(["r1", "a", "b", "expected_by_chance_with_mechanism 0.002 > 0.001: ..."])
        w.writerow(["r9", "a", "c", "expected_by_chance_with_mechanism 0.002 > 0.001: ..."])  # c's leak went to r3
    missed = [{"tenant_id": "b", "fragments": [{"recipient_request_id": "r1", "tokens": 9}, {"recipient_request_id": "r2", "tokens": 30}]},
              {"tenant_id": "c", "fragments": [{"recipient_request_id": "r3", "tokens": 5}]},
              {"tenant_id": "d", "fragments": [{"recipient_request_id": "r4", "tokens": 12}]}]
    got = quality.missed_customers(missed, tmp_path)
    assert [(m["tenant_id"], m["in_review"], m["fragment_tokens"]) for m in got] == [
        ("b", True, [9, 30]), ("c", False, [5]), ("d", False, [12])]
    b = quality.missed_breakdown({"true_positives": 17, "truth": 20}, got)
    assert b == {"missed": 3, "in_review": 1, "no_candidate": 2, "no_candidate_longest_under_8": 1,
                 "no_candidate_longest_8_15": 1, "recall_ceiling": 0.9}
    assert quality._missed_line(b) == ("missed exposed customers: 3: 1 in review.csv (exposed recall 0.900 if every one "
                                       "were notified), 2 with no candidate (1 whose longest leak is under 8 tokens, 1 of 8-15)")
    assert quality.missed_customers(missed, tmp_path / "missing")[0]["in_review"] is False


def test_seed_reach_counts_the_seeds_a_pair_with_no_candidate_shares_with_its_source(quality: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    case, report = tmp_path / "case", tmp_path / "report"
    case.mkdir()
    report.mkdir()
    source = "Note: alpha bravo charlie delta echo foxtrot golf hotel india juliet."
    # the leaked copy: "echo" substituted (a 5-gram, three 4-grams and one 110111 seed survive)
    leaked = "alpha bravo charlie delta xray foxtrot golf hotel india juliet"
    response = "Sure. " + leaked + " Anything else?"
    pq.write_table(pa.table({"request_id": ["src", "sus", "sus2"], "tenant_id": ["b", "a", "a"],
                             "prompt_text": [source, "long prompt", "long prompt"],
                             "response_text": ["ok", response, response]}), case / "exchanges.parquet")
    with open(report / "review.csv", "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["recipient_request_id", "recipient_tenant_id", "source_tenant_id", "relation", "why_not_notified"])
        w.writerow(["sus2", "a", "b", "cross_tenant", "expected_by_chance 0.5 > 0.1: ..."])  # sus2's pair has a candidate
        # another customer's request with the same id as "sus": its candidate is not sus's
        w.writerow(["sus", "z", "b", "cross_tenant", "expected_by_chance 0.5 > 0.1: ..."])
    (report / "evidence.csv").write_text("recipient_request_id,recipient_tenant_id,source_tenant_id,relation\n")
    frag = {"recipient_tenant_id": "a", "source_request_id": "src", "source_tenant_id": "b", "source_kind": "prompt",
            "source_start": source.index("alpha"), "source_end": source.index("."), "recipient_start": 6,
            "recipient_end": 6 + len(leaked), "tokens": 10, "is_leak": True}
    truth = {"fragments": [{**frag, "recipient_request_id": "sus"}, {**frag, "recipient_request_id": "sus2"},
                           {**frag, "recipient_request_id": "sus", "tokens": 20, "source_request_id": "gone",
                            "source_tenant_id": "c"}]}  # a source the case does not hold: counted, no seeds
    got = quality.seed_reach(report, case, truth)
    assert got["8-15"]["no_candidate"] == 1 and got["16+"]["no_candidate"] == 1 and got["4-7"]["no_candidate"] == 0
    assert got["8-15"]["11111"] == {"one": 1, "two": 0}
    assert got["8-15"]["1111"] == {"one": 1, "two": 1}
    assert got["8-15"]["110111"] == {"one": 1, "two": 0}
    assert got["16+"]["1111"] == {"one": 0, "two": 0}
    line = quality._reach_line(got)
    assert "8-15 tokens 1: 11111 1/0, 1111 1/1, 110111 1/0" in line and "4-7" not in line
    assert quality.seed_reach(report, tmp_path / "nowhere", truth) is None
    assert quality._reach_line(None).startswith("n/a")


def test_gateway_only_and_settings_edit_the_simulated_case_file(quality: Any, tmp_path: Path) -> None:
    import tomllib

    case = tmp_path / "case.toml"
    original = ('name = "sim"\nreal_ceiling_tokens = 8192\n\n[[inputs]]\nformat = "litellm"\npath = "gateway"\n\n'
                '[[inputs]]\nformat = "sglang"\npath = "engine"\n\n[report]\ncontact = "x"\n')
    case.write_text(original)
    quality.edit_case_file(case, True, {"unexplained_evalue": 0.005, "tiering": "evalue"})
    got = tomllib.loads(case.read_text())
    assert got["inputs"] == [{"format": "litellm", "path": "gateway"}]
    assert got["report"] == {"contact": "x"} and got["real_ceiling_tokens"] == 8192
    assert got["match"] == {"unexplained_evalue": 0.005, "tiering": "evalue"}
    # a second [match] would be refused by the case loader: refused here first
    with pytest.raises(SystemExit):
        quality.edit_case_file(case, False, {"k": 6})
    # engine logs alone cannot become a gateway-only case
    case.write_text('name = "sim"\n[[inputs]]\nformat = "sglang"\npath = "engine"\n')
    with pytest.raises(SystemExit):
        quality.edit_case_file(case, True, {})
    assert quality._setting("probable_evalue=0.003") == ("probable_evalue", 0.003)
    assert quality._setting(' tiering = "rules"') == ("tiering", "rules")
    for bad in ("novalue", "=3", "tiering=rules", "k=inf", "k=nan", "k=1979-05-27", "k={a = 1}", "k=[1, 2]"):
        with pytest.raises(Exception, match="KEY=VALUE|TOML value"):
            quality._setting(bad)


def test_the_null_calibration_target_is_judged_on_ratios_and_on_small_counts(quality: Any) -> None:
    rows = [{"rule": "controls E<=0.01", "observed": 11.0, "expected": 6.0},  # 1.8x: within 2
            {"rule": "controls E<=0.001", "observed": 0.0, "expected": 0.6},  # too few expected to tell
            {"rule": "rules/E1", "observed": 2.0, "expected": 0.15}]  # 2 where 0.3 at most: a likely count
    verdict = quality.calibration_verdict(rows)
    assert verdict == {"met": True, "judged_on_ratio": 1, "judged_as_counts": 2, "outside": []}
    for bad in ({"rule": "held-out E<=1", "observed": 349.0, "expected": 1448.0},  # 0.24x
                {"rule": "held-out E<=0.05", "observed": 160.0, "expected": 72.4},  # 2.2x
                {"rule": "rules/E2", "observed": 6.0, "expected": 0.5}):  # P(X >= 6) < 0.025 at mean 1
        verdict = quality.calibration_verdict([*rows, bad])
        assert not verdict["met"] and len(verdict["outside"]) == 1 and verdict["outside"][0].startswith(bad["rule"]), bad
    assert quality.calibration_verdict(None) is None and quality.calibration_verdict([]) is None


def test_the_null_calibration_target_is_checked_and_printed(quality: Any, perfect: tuple[Path, Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    truth_path, report = perfect
    null = {"calibration": {"points": [{"evalue_at_most": 0.01, "expected": 6.0, "observed": 30},
                                       {"evalue_at_most": 0.1, "expected": 60.0, "observed": 70}]}}
    (report / "match.json").write_text(json.dumps({"control": {}, "parameters": {"tiering": "evalue"}, "null": null}))
    case = _case(quality, truth_path, report)
    pooled = {"default": quality.pool([case], "default"), "rules": None}
    assert quality.checks(pooled["default"])["null_calibration"] is False
    quality.print_report([case], pooled, 5)
    out = capsys.readouterr().out
    assert "null_calibration MISSED" in out
    assert "outside: held-out E<=0.01 30 vs 6.00" in out
