"""LiteLLM with message logging turned off logs a placeholder for the whole conversation and each answer text
("redacted-by-litellm", in callback payloads and in a spend log's request body). Read as text, the placeholder
was a 7-token prompt: a long prompt fell under the ceiling and out of the scan, and the placeholder's copy of a
request outranked a spend-log row that held the real (cut) prompt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from forensics import api

REDACTED = "redacted-by-litellm"
LONG = "clause " * 3000
CUT = LONG[:716] + f"... (litellm_truncated skipped {len(LONG) - 2048} chars. Truncation is a DB storage safeguard.) ..." + LONG[-1332:]


def payload(messages: Any, answer: str = REDACTED, tokens: int = 812345) -> dict[str, Any]:
    return {"id": "chatcmpl-red1", "call_type": "acompletion", "startTime": 1787997714.88, "endTime": 1787997720.0,
            "model": "glm-5.3", "model_group": "glm-5.3", "messages": messages, "prompt_tokens": tokens,
            "completion_tokens": 12,
            "response": {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                                      "finish_reason": "stop"}]},
            "metadata": {"user_api_key_team_id": "team-acme"}}


def spend(messages: Any, answer: str, tokens: int = 812345) -> dict[str, Any]:
    return {"request_id": "chatcmpl-red1", "call_type": "acompletion", "api_key": "k", "startTime": "2026-08-29T10:01:54.88Z",
            "endTime": "2026-08-29T10:02:00Z", "model": "glm-5.3", "model_group": "glm-5.3", "team_id": "team-acme",
            "status": "success", "prompt_tokens": tokens, "completion_tokens": 12,
            "proxy_server_request": {"messages": messages, "prompt": "", "input": ""},
            "response": {"choices": [{"index": 0, "message": {"content": answer}, "finish_reason": "stop"}]}}


def ingested(tmp_path: Path, *records: dict[str, Any]) -> list[dict[str, Any]]:
    for i, record in enumerate(records):
        (tmp_path / f"litellm-{i}.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    api.ingest(tmp_path / "case", sorted(tmp_path.glob("litellm-*.jsonl")), fmt="litellm")
    return pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()


@pytest.mark.parametrize("make", [payload, spend], ids=["callback_payload", "spend_log"])
def test_a_redacted_record_has_no_text_and_keeps_its_reported_size(tmp_path: Path, make: Any) -> None:
    [row] = ingested(tmp_path, make([{"role": "user", "content": REDACTED}], REDACTED))
    assert row["prompt_text"] is None and row["response_text"] is None
    assert row["reported_prompt_tokens"] == 812345 and row["prompt_tokens"] == 812345
    assert "redacted by LiteLLM" in row["problems"]


def test_the_spend_log_copy_with_the_real_prompt_wins_over_a_redacted_payload(tmp_path: Path) -> None:
    rows = ingested(tmp_path, payload([{"role": "user", "content": REDACTED}]),
                    spend([{"role": "user", "content": CUT}], "the real answer"))
    [row] = rows
    assert row["record_kind"] == "spend_log" and row["prompt_truncated"] is True
    assert "clause clause" in row["prompt_text"] and row["response_text"] == "the real answer"


def test_a_customer_quoting_the_placeholder_keeps_their_text(tmp_path: Path) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": REDACTED}]
    [row] = ingested(tmp_path, payload(messages, answer="It is LiteLLM's placeholder.", tokens=12))
    assert REDACTED in row["prompt_text"] and row["response_text"] == "It is LiteLLM's placeholder."
    assert row["problems"] is None


def test_an_older_redaction_keeps_the_reasoning_and_tool_calls_it_left(tmp_path: Path) -> None:
    # An older LiteLLM redacted the content alone: the answer's reasoning and tool-call arguments, which may hold the
    # leak, were dropped with it.
    record = payload([{"role": "user", "content": REDACTED}])
    record["response"]["choices"][0]["message"] = {
        "role": "assistant", "content": REDACTED, "reasoning_content": "The key AKIAIOSFODNN7EXAMPLF belongs to acme.",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "pay", "arguments": "{\"card\": \"4111\"}"}}]}
    [row] = ingested(tmp_path, record)
    assert row["prompt_text"] is None
    assert "AKIAIOSFODNN7EXAMPLF belongs to acme" in row["response_text"] and "pay" in row["response_text"]
    assert REDACTED not in row["response_text"]
