"""benchmarks/run.py's score of a merged incident's list against the truths of the seeds it merges."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "run.py"


@pytest.fixture(scope="module")
def run_bench() -> Any:
    spec = importlib.util.spec_from_file_location("run_bench", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _truth(path: Path, pairs: list[tuple[str, str]], exposed: list[str]) -> dict[str, Any]:
    path.write_text(json.dumps({"fragments": [{"recipient_request_id": r, "source_tenant_id": t, "is_leak": True}
                                              for r, t in pairs]
                                             + [{"recipient_request_id": "rX", "source_tenant_id": "tX", "is_leak": False}],
                                "exposed": exposed}))
    return {"seed": 0, "truth": str(path), "fraction": 1.0}


def test_the_list_is_scored_against_every_merged_seeds_truth(tmp_path: Path, run_bench: Any) -> None:
    seeds = [_truth(tmp_path / "t1.json", [("r1", "ann"), ("r2", "ben")], ["ann", "ben"]),
             _truth(tmp_path / "t2.json", [("r3", "cyd")], ["cyd"])]
    (tmp_path / "seeds.json").write_text(json.dumps(seeds))
    (tmp_path / "out" / "report").mkdir(parents=True)
    (tmp_path / "out" / "case").mkdir()
    columns = ["recipient_request_id", "source_tenant_id", "relation"]
    rows = [("r1", "ann", "cross_tenant"), ("r1", "ann", "cross_tenant"), ("r3", "cyd", "cross_tenant"),
            ("r3", "dan", "cross_tenant"), ("r2", "eve", "same_tenant")]
    with (tmp_path / "out" / "report" / "evidence.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows([columns, *rows])
    (tmp_path / "out" / "case" / "evidence.csv").write_text("not the report\n")
    q = run_bench.score_list(tmp_path / "out", tmp_path / "seeds.json")
    assert q == {"pairs": 3, "true_pairs": 2, "pair_precision": 0.667, "pair_recall": 0.667, "exposed": 3,
                 "exposed_precision": 0.667, "exposed_recall": 0.667}
    assert run_bench.score_list(tmp_path / "out", tmp_path / "none.json") is None  # a repeat-shaped incident
