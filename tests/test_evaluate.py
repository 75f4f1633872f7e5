"""forensics evaluate: perfect, empty, partial and wrong reports against a simulated truth."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from forensics.cli import app
from forensics.errors import ForensicsError
from forensics.lab.evaluate import build_report_from_truth, evaluate
from forensics.lab.simulate import simulate


@pytest.fixture(scope="module")
def truth_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ev") / "incident"
    simulate(out, seed=7, scale="small")
    return out / "truth.json"


def _scores(data: dict[str, Any]) -> list[Any]:
    return [data["suspects"]["precision"], data["suspects"]["recall"], data["findings"]["precision"], data["findings"]["recall"],
            data["customers"]["exposed"]["precision"], data["customers"]["exposed"]["recall"],
            data["customers"]["recipient"]["precision"], data["customers"]["recipient"]["recall"]]


def test_report_built_from_truth_scores_one_everywhere(truth_file: Path, tmp_path: Path) -> None:
    truth = json.loads(truth_file.read_text())
    build_report_from_truth(truth, tmp_path)
    data = evaluate(truth_file, tmp_path).to_json()
    assert data["missing"] == []
    assert _scores(data) == [1.0] * 8
    assert all(v["recall"] == 1.0 for v in data["findings"]["fragment_recall_by_length"].values())
    assert all(v["recall"] == 1.0 for v in data["findings"]["fragment_recall_by_damage"].values())
    assert data["findings"]["fragments_located"]["rate"] == 1.0
    assert data["quarantine"]["match"] is True


def test_empty_report_gives_zero_recall_and_names_missing_files(truth_file: Path, tmp_path: Path) -> None:
    data = evaluate(truth_file, tmp_path).to_json()
    assert data["missing"] == ["suspects.csv", "evidence.csv", "notifications.csv", "manifest.json"]
    assert data["suspects"]["recall"] == data["findings"]["recall"] == 0.0
    assert data["customers"]["exposed"]["recall"] == 0.0
    assert data["suspects"]["precision"] is None
    assert data["quarantine"]["reported"] is None and "missing" in data["quarantine"]["note"]


def test_wrong_rows_are_attributed_to_the_trap_that_explains_them(truth_file: Path, tmp_path: Path) -> None:
    truth = json.loads(truth_file.read_text())
    build_report_from_truth(truth, tmp_path)
    (tmp_path / "notifications.csv").unlink()
    later = next(h for h in truth["hard_negatives"] if h["kind"] == "later_prompt_only")
    quote = next(h for h in truth["hard_negatives"] if h["kind"] == "own_prompt_quote")
    outside = next(n for n in truth["scan_negatives"] if n["kind"] == "over_ceiling_outside_window")
    with open(tmp_path / "evidence.csv", "a", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["X1", later["recipient_request_id"], later["recipient_tenant_id"], later["later_request_id"], later["later_tenant_id"],
                    "prompt", "probable", 90, 30, later["recipient_start"], later["recipient_end"], later["later_start"], later["later_end"], 1.0])
        w.writerow(["X2", quote["request_id"], quote["tenant_id"], "r-other", "someone-else", "prompt", "possible", 80, 12, 0, 10, 0, 10, 0.5])
    with open(tmp_path / "suspects.csv", "a", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerow([outside["request_id"], outside["tenant_id"], "glm-5.3", outside["received_at"], 9000, "engine", "x"])
    data = evaluate(truth_file, tmp_path).to_json()
    assert data["missing"] == ["notifications.csv"]
    assert data["findings"]["false_positives_by_kind"] == {"later_prompt_only": 1, "own_prompt_quote": 1}
    assert data["findings"]["recall"] == 1.0 and data["findings"]["precision"] < 1.0
    assert data["suspects"]["false_positives_by_kind"] == {"over_ceiling_outside_window": 1}
    assert data["customers"]["exposed"]["recall"] == 0.0


def test_bad_inputs_are_clear_errors(truth_file: Path, tmp_path: Path) -> None:
    with pytest.raises(ForensicsError, match="truth file not found"):
        evaluate(tmp_path / "nope.json", tmp_path)
    (tmp_path / "suspects.csv").write_text("id,tenant\nx,y\n")
    with pytest.raises(ForensicsError, match="request_id"):
        evaluate(truth_file, tmp_path)


def test_cli_evaluate_and_simulate_exit_codes(truth_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from forensics.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["evaluate", "--truth", str(truth_file), "--report", str(tmp_path), "--json"])
    assert exc.value.code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["findings"]["recall"] == 0.0
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--out", str(truth_file.parent), "--quiet"])  # not empty, no --force
    assert exc.value.code == 2
    assert "not empty" in capsys.readouterr().err
    assert app is not None


def test_pair_recall_by_length_hard_negative_hits_and_wrong_customers(truth_file: Path, tmp_path: Path) -> None:
    truth = json.loads(truth_file.read_text())
    build_report_from_truth(truth, tmp_path)
    perfect = evaluate(truth_file, tmp_path).to_json()
    f = perfect["findings"]
    assert set(f["pair_recall_by_length"]) == {"4-7 tokens", "8-15 tokens", "16+ tokens"}
    assert all(v["recall"] in (1.0, None) for v in f["pair_recall_by_length"].values())
    assert sum(v["pairs"] for v in f["pair_recall_by_length"].values()) == f["truth"]
    assert f["hard_negative_findings"]["total"]["with_findings"] == 0
    assert f["hard_negative_findings"]["total"]["labelled"] == len(truth["hard_negatives"])
    assert f["false_pairs_by_location"] == {}
    assert perfect["customers"]["exposed_wrong"] == perfect["customers"]["exposed_missed"] == []

    # Drop the evidence of every pair whose longest fragment is 16 tokens or more: only that bucket's recall falls.
    leaks = [x for x in truth["fragments"] if x["is_leak"]]
    longest: dict[tuple[str, str], int] = {}
    for x in leaks:
        key = (x["recipient_request_id"], x["source_tenant_id"])
        longest[key] = max(longest.get(key, 0), x["tokens"])
    with open(tmp_path / "evidence.csv", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    kept = [rows[0]] + [r for r in rows[1:] if longest[(r[1], r[4])] < 16]
    # Wrong findings: one on a shared-boilerplate quote, one naming a later prompt's tenant, one in the garbage text.
    boiler = next(h for h in truth["hard_negatives"] if h["kind"] == "shared_boilerplate")
    later = next(h for h in truth["hard_negatives"] if h["kind"] == "later_prompt_only")
    kept.append(["W1", boiler["recipient_request_id"], boiler["recipient_tenant_id"], "r-x", "tenant-common", "prompt", "probable",
                 80, 9, boiler["recipient_start"], boiler["recipient_start"] + 30, 0, 30, 0.8])
    kept.append(["W2", later["recipient_request_id"], later["recipient_tenant_id"], later["later_request_id"], later["later_tenant_id"],
                 "prompt", "probable", 90, 20, 0, 5, 0, 5, 1.0])
    with open(tmp_path / "evidence.csv", "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows(kept)
    gone = sorted({src for (_, src), n in longest.items() if n >= 16} - {src for (_, src), n in longest.items() if n < 16})
    assert gone
    with open(tmp_path / "notifications.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["tenant_id", "role"])
        for t in sorted(set(truth["exposed"]) - set(gone)) + ["tenant-common"]:
            w.writerow([t, "exposed"])
    data = evaluate(truth_file, tmp_path).to_json()
    by_len = data["findings"]["pair_recall_by_length"]
    assert by_len["16+ tokens"]["found"] == 0 and by_len["16+ tokens"]["pairs"] > 0
    assert all(v["recall"] in (1.0, None) for k, v in by_len.items() if k != "16+ tokens")
    hn = data["findings"]["hard_negative_findings"]["by_kind"]
    assert hn["shared_boilerplate"]["with_findings"] == 1 and hn["later_prompt_only"]["with_findings"] == 1
    assert data["findings"]["hard_negative_findings"]["total"]["with_findings"] == 2
    # W2 names the tenant whose later prompt holds the passage: that trap, wherever its span is
    assert data["findings"]["false_pairs_by_location"] == {"later_prompt_only": 1, "shared_boilerplate": 1}
    wrong = data["customers"]["exposed_wrong"]
    assert [w["tenant_id"] for w in wrong] == ["tenant-common"]
    assert wrong[0]["findings"][0]["where"] == "shared_boilerplate" and wrong[0]["findings"][0]["tier"] == "probable"
    assert [m["tenant_id"] for m in data["customers"]["exposed_missed"]] == gone
    assert all(max(x["tokens"] for x in m["fragments"]) >= 16 for m in data["customers"]["exposed_missed"])
    assert data["customers"]["exposed"]["precision"] < 1.0
