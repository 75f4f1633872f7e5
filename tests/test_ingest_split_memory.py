"""Split request/response logs whose texts are far larger than DuckDB's memory cap still ingest.

The finaliser joins the halves on keys and takes their texts from the staged files a batch at a
time. Joining them with the texts inside DuckDB held every prompt of the case at once and failed
with "Out of Memory" at the cap on a 50 MB (compressed) openai-split export.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from forensics import api
from forensics.ingest import finalize

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
         "quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


def test_split_logs_larger_than_the_memory_cap_ingest_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    n = 160
    prompts = {f"r-{i:04d}": f"prompt {i}: " + _text(rng, 30_000) for i in range(n)}  # ~190 KB each, ~30 MB in all
    answers = {rid: f"answer to {rid}: " + _text(rng, 300) for rid in prompts}
    logs = tmp_path / "logs"
    logs.mkdir()
    requests = [json.dumps({"request_id": rid, "timestamp": f"2026-08-30T03:{i // 60:02d}:{i % 60:02d}Z",
                            "tenant_id": f"tenant-{i % 7}",
                            "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": prompts[rid]}]}})
                for i, rid in enumerate(prompts)]
    # Responses are logged as calls end: roughly, not exactly, in request order; one never came.
    order = sorted(list(prompts)[:-1], key=lambda rid: int(rid[2:]) + rng.uniform(0, 12))
    responses = [json.dumps({"request_id": rid, "timestamp": "2026-08-30T04:00:00Z", "status_code": 200,
                             "body": {"choices": [{"index": 0, "message": {"content": answers[rid]},
                                                   "finish_reason": "stop"}]}})
                 for rid in order]
    responses.append(json.dumps({"request_id": "r-orphan", "timestamp": "2026-08-30T04:00:00Z", "status_code": 200,
                                 "body": {"choices": [{"index": 0, "message": {"content": "lost"}, "finish_reason": "stop"}]}}))
    (logs / "requests.jsonl").write_text("\n".join(requests) + "\n")
    (logs / "responses.jsonl").write_text("\n".join(responses) + "\n")
    # A cap far below the texts' size (but above what the keys need), so a join that carries the
    # texts cannot fit.
    monkeypatch.setattr(finalize, "QUERY_MEMORY", "64MB")

    case = tmp_path / "case"
    api.ingest(case, [logs], fmt="openai-split")

    rows = pq.read_table(case / "exchanges.parquet").to_pylist()
    assert [r["request_id"] for r in rows] == [*prompts, "r-orphan"]  # input order, orphan after
    for r in rows[:-2]:
        assert prompts[r["request_id"]] in r["prompt_text"]  # rendered with its role
        assert r["response_text"] == answers[r["request_id"]]
        assert r["orphan"] is None
    assert rows[-2]["request_id"] == list(prompts)[-1] and rows[-2]["orphan"] == "request_only"
    assert prompts[rows[-2]["request_id"]] in rows[-2]["prompt_text"] and rows[-2]["response_text"] is None
    assert rows[-1]["orphan"] == "response_only" and rows[-1]["response_text"] == "lost"
    assert [r["tenant_id"] for r in rows[:3]] == ["tenant-0", "tenant-1", "tenant-2"]
