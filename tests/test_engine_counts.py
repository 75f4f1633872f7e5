"""Which prompt count decides a suspect when the gateway and the engine logs both name one.

Each case is data: the gateway's spend-log row (its prompt text, or none logged, and the count it
reported), one engine log line naming the same request, and the count, source and verdict the scan
must reach at a 2,000-token ceiling. The cases come from a review of wrong and missing names.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from forensics import api
from forensics.config import load_case_file

CASE_TOML = """name = "counts"
model = "glm-5.3"
window_start = "2026-08-27T00:00:00Z"
window_end = "2026-09-09T00:00:00Z"
real_ceiling_tokens = 2000
"""


def _spend(rid: str, tenant: str, prompt: str | None, reported: int) -> str:
    messages = [{"role": "user", "content": prompt}] if prompt is not None else None
    return json.dumps({
        "request_id": rid, "call_type": "acompletion", "api_key": "k-" + tenant, "startTime": "2026-08-28T09:00:00Z",
        "endTime": "2026-08-28T09:00:02Z", "model": "openai/glm-5.3", "model_group": "glm-5.3",
        "organization_id": tenant, "team_id": "", "end_user": "", "status": "success", "messages": {},
        "prompt_tokens": reported, "completion_tokens": 50, "total_tokens": reported + 50,
        "proxy_server_request": {"model": "glm-5.3", "messages": messages} if messages else {},
        "response": {"id": rid, "object": "chat.completion", "model": "glm-5.3",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": "an answer"},
                                  "finish_reason": "stop"}]},
        "metadata": {}})


def _vllm(rid: str, ids: int) -> str:
    listed = ", ".join(str(7 + i % 50) for i in range(ids))
    return (f"INFO 2026-08-28 09:00:01 [logger.py:41] Received request {rid}: prompt: '<|user|>\\nsecret', "
            f"params: SamplingParams(n=1, temperature=0.7), prompt_token_ids: [{listed}], lora_request: None, "
            "prompt_adapter_request: None.\n")


def _over_limit(rid: str, tokens: int) -> str:
    return (f"[2026-08-28 09:00:01 TP0] Input length ({tokens} tokens) exceeds the maximum allowed length (1999 "
            f"tokens). Use a shorter input or enable --allow-auto-truncate. self.rid='{rid}'\n")


EIGHT_WORDS = "what time is it in Lisbon right now?"  # 37 bytes
LONG = "row of the shipping ledger for the northern depot " * 200  # 10,000 bytes

CASES: list[dict[str, Any]] = [
    # An over-limit line naming 812,345 tokens for a 37-byte prompt is another request's under the id: the
    # count became the engine's and a customer that sent one short question was a suspect.
    {"id": "impossible over-limit count", "prompt": EIGHT_WORDS, "reported": 10,
     "engine": ("prefill-0_0.log", _over_limit("r-1", 812_345)), "count": (10, "reported"), "suspect": False},
    # ... while a possible one still decides (the placeholder's 1 reported for a 10,000-byte prompt).
    {"id": "possible over-limit count", "prompt": LONG, "reported": 1,
     "engine": ("prefill-0_0.log", _over_limit("r-1", 2_600)), "count": (2_600, "engine"), "suspect": True},
    # vLLM's prompt list cut by --max-log-len (1,500 ids of a 2,600-token prompt) lowered the gateway's count.
    {"id": "engine list cut short", "prompt": LONG, "reported": 2_600,
     "engine": ("server-0_0.log", _vllm("r-1", 1_500)), "count": (2_600, "reported"), "suspect": True},
    # No prompt text logged (LiteLLM's default spend log): the engine's length was ignored.
    {"id": "no text, placeholder reported", "prompt": None, "reported": 1,
     "engine": ("server-0_0.log", _vllm("r-1", 2_500)), "count": (2_500, "engine"), "suspect": True},
    # ... but where the gateway reported a figure of its own, nothing tells whether the engine's line is this
    # request's or another's under the id (its gateway record not in the export): the gateway's figure stands,
    # and the row names the conflict.
    {"id": "no text, another figure reported", "prompt": None, "reported": 300,
     "engine": ("server-0_0.log", _vllm("r-1", 2_500)), "count": (300, "reported"), "suspect": False,
     "problems": "the engine logged 2500 prompt tokens under this id, the gateway reported 300"},
]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_the_count_that_decides_a_suspect(tmp_path: Path, case: dict[str, Any]) -> None:
    (tmp_path / "gw").mkdir()
    (tmp_path / "gw" / "spend.jsonl").write_text(
        _spend("r-1", "acme", case["prompt"], case["reported"]) + "\n" + _spend("r-2", "globex", "hi there", 10) + "\n")
    (tmp_path / "eng").mkdir()
    name, line = case["engine"]
    (tmp_path / "eng" / name).write_text(line)
    (tmp_path / "case.toml").write_text(CASE_TOML)
    cfg = load_case_file(tmp_path / "case.toml")
    api.ingest(tmp_path / "case", [tmp_path / "gw"], fmt="litellm", config=cfg)
    api.ingest(tmp_path / "case", [tmp_path / "eng"], config=cfg)
    (row,) = [r for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist() if r["request_id"] == "r-1"]
    assert (row["prompt_tokens"], row["prompt_tokens_source"]) == case["count"]
    api.scan(tmp_path / "case", cfg)
    suspects = pq.read_table(tmp_path / "case" / "suspects.parquet").column("request_id").to_pylist()
    assert ("r-1" in suspects) is case["suspect"]
    if case["id"] == "impossible over-limit count":
        assert "812345 tokens, impossible for this prompt's" in (row["problems"] or "")
    assert case.get("problems", "") in (row["problems"] or "")


def test_the_engines_count_of_the_templated_prompt_settles_a_tokenizer_count_just_below(tmp_path: Path) -> None:
    """The tokenizer counts the logged text at 1,997 tokens; the engine counted the templated prompt at 2,005.
    The tokenizer's count always stood: a prompt over the 2,000-token ceiling was no suspect."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "the": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "gw").mkdir()
    (tmp_path / "gw" / "spend.jsonl").write_text(_spend("r-1", "acme", " ".join(["the"] * 1997), 1) + "\n")
    (tmp_path / "eng").mkdir()
    (tmp_path / "eng" / "server-0_0.log").write_text(_vllm("r-1", 2005))
    (tmp_path / "case.toml").write_text(CASE_TOML + 'tokenizer = "tokenizer.json"\n')
    cfg = load_case_file(tmp_path / "case.toml")
    api.ingest(tmp_path / "case", [tmp_path / "gw"], fmt="litellm", config=cfg)
    api.ingest(tmp_path / "case", [tmp_path / "eng"], config=cfg)
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (row["prompt_tokens"], row["prompt_tokens_source"]) == (2005, "engine")
    api.scan(tmp_path / "case", cfg)
    assert pq.read_table(tmp_path / "case" / "suspects.parquet").column("request_id").to_pylist() == ["r-1"]
