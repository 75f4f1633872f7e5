"""Token counts are evidence with a source: tokenizer, engine, reported or estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forensics import api, tokens
from forensics.errors import ConfigError


def test_placeholder_count_on_a_big_prompt_is_implausible() -> None:
    assert not tokens.plausible(1, 4_000_000)
    assert tokens.plausible(1_000_000, 4_000_000)
    assert tokens.plausible(3, 11)  # a tiny prompt can be a handful of tokens


@given(st.integers(0, 50_000_000))
def test_estimate_band_contains_estimate(nbytes: int) -> None:
    est = tokens.estimate(nbytes)
    assert est.low <= est.tokens <= est.high


def _tokenizer_file(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "there": 2}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_tokenizer_file_gives_exact_counts(tmp_path: Path) -> None:
    logs = tmp_path / "requests.jsonl"
    logs.write_text(json.dumps({"request_id": "r-1", "timestamp": "2026-08-30T03:12:09Z", "tenant_id": "a",
                                "body": {"model": "m", "messages": [{"role": "user", "content": "hello there friend"}]}}) + "\n")
    cfg = api.make_config(tokenizer=_tokenizer_file(tmp_path))
    api.ingest(tmp_path / "case", [logs], config=cfg)
    row = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()[0]
    # "<|user|>", "hello", "there", "friend": the role marker is one word for this tokenizer
    assert (row["prompt_tokens"], row["prompt_tokens_source"]) == (4, "tokenizer")
    assert row["prompt_tokens_low"] == row["prompt_tokens_high"] == 4


def test_bad_tokenizer_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    logs = tmp_path / "requests.jsonl"
    logs.write_text("")
    with pytest.raises(ConfigError, match="tokenizers JSON"):
        api.ingest(tmp_path / "case", [logs], fmt="openai-split", config=api.make_config(tokenizer=bad))


def test_engine_over_limit_line_beats_gateway_placeholder(tmp_path: Path) -> None:
    prompt = "The parties agree as follows. " * 2000
    gw = tmp_path / "callbacks.jsonl"
    gw.write_text(json.dumps({
        "id": "chatcmpl-9", "call_type": "acompletion", "startTime": 1787997000.0, "endTime": 1787997009.0,
        "model": "glm-5.3", "model_group": "glm-5.3", "prompt_tokens": 1,
        "messages": [{"role": "user", "content": prompt}],
        "response": {"choices": [{"index": 0, "message": {"content": "ok"}}]},
        "metadata": {"user_api_key_team_id": "team-a"},
    }) + "\n")
    engine = tmp_path / "prefill-0_0.log"
    engine.write_text(
        "[2026-08-29 10:01:55 TP0] Input length (15012 tokens) exceeds the maximum allowed length (8191 tokens). "
        "Use a shorter input or enable --allow-auto-truncate., self.rid='chatcmpl-9'\n"
        "[2026-08-29 10:01:56 TP0] ReqTimeStats(rid=chatcmpl-9, bootstrap_room=7, input_len=1, cached_input_len=0, output_len=0, type=prefill): x\n"
    )
    result = api.ingest(tmp_path / "case", [gw, engine])
    row = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()[0]
    assert row["reported_prompt_tokens"] == 1 and row["reported_prompt_tokens_plausible"] is False
    assert (row["prompt_tokens"], row["prompt_tokens_source"]) == (15012, "engine")
    assert (row["prefill_node"], row["bootstrap_room"]) == ("prefill-0", 7)
    assert result.manifest["implausible_reported_counts"] == 1


def test_estimate_when_nothing_else(tmp_path: Path) -> None:
    prompt = "word " * 4000
    logs = tmp_path / "requests.jsonl"
    logs.write_text(json.dumps({"request_id": "r-1", "timestamp": "2026-08-30T03:12:09Z", "tenant_id": "a",
                                "body": {"model": "m", "messages": [{"role": "user", "content": prompt}]}}) + "\n")
    api.ingest(tmp_path / "case", [logs])
    row = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()[0]
    assert row["prompt_tokens_source"] == "estimate"
    assert row["prompt_tokens_low"] < row["prompt_tokens"] < row["prompt_tokens_high"]
    assert row["prompt_tokens"] == round(row["prompt_bytes"] / 4)
