"""forensics evaluate: perfect, empty, partial and wrong reports against a simulated truth."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from forensics.cli import app
from forensics.errors import ForensicsError
from forensics.evaluate import build_report_from_truth, evaluate
from forensics.simulate import simulate


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
