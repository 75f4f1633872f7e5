"""Token counts are evidence with a source: tokenizer, engine, reported or estimate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


# --- Exact counts only where they matter: the size band (forensics.tokens, "the band") ---------

CEILING_BAND = 600


def _worst_case_tokenizer(tmp_path: Path) -> Path:
    """A tokenizer as hungry as any: NFKC (lengthens some characters up to 18x), Metaspace (a space
    becomes the 3-byte "▁") and byte fallback with no merges (one token per byte of that)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    vocab = {"<unk>": 0, **{f"<0x{b:02X}>": b + 1 for b in range(256)}, "the": 257}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], byte_fallback=True, unk_token="<unk>"))
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


@given(st.text(max_size=200), st.integers(1, 5))
def test_band_bound_holds_for_a_worst_case_tokenizer(tmp_path_factory: pytest.TempPathFactory, text: str,
                                                     messages: int) -> None:
    path = _worst_case_tokenizer(tmp_path_factory.getbasetemp())
    tok = tokens.load_tokenizer(path)
    exact = len(tok.encode(text, add_special_tokens=False).ids)
    nbytes = max(len(text.encode("utf-8", "surrogatepass")),
                 len(tok.normalizer.normalize_str(text).encode("utf-8", "surrogatepass")))
    assert exact <= tokens.band_bound(nbytes, messages)


def _band_logs(tmp_path: Path) -> Path:
    """Prompts far below the ceiling, near it (counted), and above it; one file, one tenant per row."""
    words = ["alpha", "beta", "gamma", "delta", "the", "ﷺ", "x  y", "Grüße"]
    rows = []
    for i in range(60):
        n = 2 + (i * 7) % 23 if i % 3 else 20 + (i * 37) % 160  # short chats, and some longer prompts
        content = " ".join(words[(i + j) % len(words)] for j in range(n))
        rows.append({"request_id": f"r-{i:03d}", "timestamp": f"2026-08-29T10:{i:02d}:00Z", "tenant_id": f"t{i % 7}",
                     "body": {"model": "m", "messages": [{"role": "user", "content": content}]}})
    logs = tmp_path / "requests.jsonl"
    logs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return logs


def _scan_config() -> Any:
    from forensics.config import config_from_mapping

    return config_from_mapping({"name": "t", "model": "m", "window_start": "2026-08-29T00:00:00Z",
                                "window_end": "2026-08-30T00:00:00Z", "real_ceiling_tokens": CEILING_BAND,
                                "advertised_window_tokens": 100_000}, base=Path("."))


def test_band_leaves_suspects_identical_to_counting_every_row(tmp_path: Path) -> None:
    from forensics.scan import scan

    logs, tok = _band_logs(tmp_path), _worst_case_tokenizer(tmp_path)
    banded, every = tmp_path / "banded", tmp_path / "every"
    api.ingest(banded, [logs], config=api.make_config(tokenizer=tok, real_ceiling_tokens=CEILING_BAND))
    api.ingest(every, [logs], config=api.make_config(tokenizer=tok))  # no ceiling at ingest: every row counted
    band = json.loads((banded / "manifest.json").read_text())["prompt_tokens_band"]["rows"]
    assert band["ceiling"] == CEILING_BAND and band["decided_below"] > 10 and band["counted"] > 10
    assert band["decided_below"] + band["counted"] == 60
    assert json.loads((every / "manifest.json").read_text())["prompt_tokens_band"]["rows"]["decided_below"] == 0

    exact = {r["request_id"]: r for r in pq.read_table(every / "exchanges.parquet").to_pylist()}
    decided = 0
    for r in pq.read_table(banded / "exchanges.parquet").to_pylist():
        full = exact[r["request_id"]]
        assert full["prompt_tokens_source"] == "tokenizer"
        if r["prompt_tokens_source"] == "tokenizer":  # counted: the same exact figure
            assert (r["prompt_tokens"], r["prompt_tokens_low"], r["prompt_tokens_high"]) == (full["prompt_tokens"],) * 3
        else:  # decided by its size: truly below the ceiling, and so is its whole recorded band
            decided += 1
            assert full["prompt_tokens"] < CEILING_BAND and r["prompt_tokens_high"] < CEILING_BAND
    assert decided == band["decided_below"]
    above = [r for r in exact.values() if r["prompt_tokens"] >= CEILING_BAND]
    assert above and any(r["prompt_tokens"] < CEILING_BAND for r in exact.values())

    results = [scan(case, _scan_config()) for case in (banded, every)]
    suspects = [pq.read_table(case / "suspects.parquet").to_pylist() for case in (banded, every)]
    assert suspects[0] == suspects[1]
    assert {s["request_id"] for s in suspects[0]} == {r["request_id"] for r in above}
    assert results[0].summary()["suspects"] == results[1].summary()["suspects"]


def test_band_counts_of_a_grown_log_are_the_complete_files_alone(tmp_path: Path) -> None:
    """A live log ingested, then again once it grew: the complete copy replaces the earlier one, and
    the manifest's band counts are those of the complete file, not of both copies."""
    full = _band_logs(tmp_path)
    lines = full.read_bytes().splitlines(keepends=True)
    live = tmp_path / "live"
    live.mkdir()
    log = live / "requests.jsonl"
    log.write_bytes(b"".join(lines[:30]))
    config = api.make_config(tokenizer=_worst_case_tokenizer(tmp_path), real_ceiling_tokens=CEILING_BAND)
    grown, fresh = tmp_path / "grown", tmp_path / "fresh"
    api.ingest(grown, [log], config=config)
    early = json.loads((grown / "manifest.json").read_text())["prompt_tokens_band"]["rows"]
    assert 0 < early["counted"] + early["decided_below"] < 60
    log.write_bytes(b"".join(lines))
    api.ingest(grown, [log], config=config)
    api.ingest(fresh, [log], config=config)
    bands = [json.loads((case / "manifest.json").read_text())["prompt_tokens_band"] for case in (grown, fresh)]
    assert bands[0]["rows"] == bands[1]["rows"] and bands[0]["rows"]["counted"] + bands[0]["rows"]["decided_below"] == 60
    assert bands[0]["rows_by_file"] == bands[1]["rows_by_file"] and len(bands[0]["rows_by_file"]) == 1


def test_band_counts_of_a_case_begun_by_a_version_that_summed_them_are_carried_on(tmp_path: Path) -> None:
    """A case whose manifest has the band's sum alone (an earlier version), ingested into twice more: the
    second ingest dropped the earlier sum, and a scan whose ceiling those rows could reach was let through."""
    from forensics.scan import scan

    lines = _band_logs(tmp_path).read_bytes().splitlines(keepends=True)
    parts = []
    for n, (a, b) in enumerate(((0, 20), (20, 40), (40, 60))):
        parts.append(tmp_path / f"part{n}.jsonl")
        parts[-1].write_bytes(b"".join(lines[a:b]))
    config = api.make_config(tokenizer=_worst_case_tokenizer(tmp_path), real_ceiling_tokens=CEILING_BAND)
    case = tmp_path / "case"
    api.ingest(case, [parts[0]], config=config)
    manifest = json.loads((case / "manifest.json").read_text())
    first = manifest["prompt_tokens_band"].pop("rows_by_file")  # as the earlier version wrote it
    assert first and manifest["prompt_tokens_band"]["rows"]["decided_below"] > 0
    (case / "manifest.json").write_text(json.dumps(manifest))
    api.ingest(case, [parts[1]], config=config)
    api.ingest(case, [parts[2]], config=config)
    fresh = tmp_path / "fresh"
    api.ingest(fresh, parts, config=config)
    rows = [json.loads((c / "manifest.json").read_text())["prompt_tokens_band"]["rows"] for c in (case, fresh)]
    assert rows[0] == rows[1]
    cfg = _scan_config()
    cfg.set("real_ceiling_tokens", 150, "option")
    with pytest.raises(ConfigError, match="ingest the logs again"):
        scan(case, cfg)


def test_scan_ceiling_below_a_band_decision_is_refused(tmp_path: Path) -> None:
    from forensics.scan import scan

    case = tmp_path / "case"
    api.ingest(case, [_band_logs(tmp_path)],
               config=api.make_config(tokenizer=_worst_case_tokenizer(tmp_path), real_ceiling_tokens=CEILING_BAND))
    cfg = _scan_config()
    cfg.set("real_ceiling_tokens", 150, "option")
    with pytest.raises(ConfigError, match="ingest the logs again"):
        scan(case, cfg)


def test_engine_over_limit_line_does_not_replace_a_band_decision(tmp_path: Path) -> None:
    """A tokenizer count is never replaced by an engine figure; a count the band decided in its place
    is not either, or the band would make a suspect that counting every row does not."""
    from forensics.config import config_from_mapping
    from forensics.scan import scan

    ceiling = 300_000
    gw = tmp_path / "callbacks.jsonl"
    gw.write_text(json.dumps({
        "id": "chatcmpl-9", "call_type": "acompletion", "startTime": 1787997000.0, "endTime": 1787997009.0,
        "model": "glm-5.3", "model_group": "glm-5.3", "prompt_tokens": 1,
        "messages": [{"role": "user", "content": "The parties agree as follows. " * 2000}],
        "response": {"choices": [{"index": 0, "message": {"content": "ok"}}]},
        "metadata": {"user_api_key_team_id": "team-a"},
    }) + "\n")
    engine = tmp_path / "prefill-0_0.log"
    engine.write_text(
        "[2026-08-29 10:01:55 TP0] Input length (400000 tokens) exceeds the maximum allowed length (299999 tokens). "
        "Use a shorter input or enable --allow-auto-truncate., self.rid='chatcmpl-9'\n")
    tok = _tokenizer_file(tmp_path)
    banded, every = tmp_path / "banded", tmp_path / "every"
    api.ingest(banded, [gw, engine], config=api.make_config(tokenizer=tok, real_ceiling_tokens=ceiling))
    api.ingest(every, [gw, engine], config=api.make_config(tokenizer=tok))
    assert json.loads((banded / "manifest.json").read_text())["prompt_tokens_band"]["rows"]["decided_below"] == 1
    rows = [pq.read_table(case / "exchanges.parquet").to_pylist()[0] for case in (banded, every)]
    assert [r["prompt_tokens_source"] for r in rows] == ["estimate", "tokenizer"]
    cfg = config_from_mapping({"name": "t", "model": "glm-5.3", "window_start": "2026-08-29T00:00:00Z",
                               "window_end": "2026-08-30T00:00:00Z", "real_ceiling_tokens": ceiling,
                               "advertised_window_tokens": 1_048_576}, base=Path("."))
    for case in (banded, every):
        scan(case, cfg)
    # The band proves the 60,000-byte prompt below the 300,000-token ceiling: an over-limit line naming 400,000
    # tokens under its id is another request's, no signature of this one, counted either way. (It made this
    # row an engine_signature suspect before.)
    token_columns = {"prompt_tokens", "prompt_tokens_source", "prompt_tokens_low", "prompt_tokens_high"}
    suspects = [[{k: v for k, v in r.items() if k not in token_columns}
                 for r in pq.read_table(case / "suspects.parquet").to_pylist()] for case in (banded, every)]
    assert suspects[0] == suspects[1] == []


def test_a_prompt_whose_bound_reaches_the_ceiling_less_one_is_counted_not_decided_by_its_size(tmp_path: Path) -> None:
    """The engine refuses an input of the pool less one tokens (SGLang's limit, compared with >=): a prompt whose
    size allows that many is counted, not decided below the ceiling by its size (a review: a prompt of exactly the
    ceiling less one was neither a suspect nor borderline)."""
    text = "word " * 40
    nbytes = len(text.encode("utf-8"))
    bound = tokens.band_bound(nbytes, 1)
    assert tokens.refused_from(bound + 1) == bound
    at_limit = tokens.Counter(_tokenizer_file(tmp_path), ceiling=bound + 1)
    assert at_limit.count(text, nbytes, None, False, 1)[0].source == "tokenizer"
    above = tokens.Counter(_tokenizer_file(tmp_path), ceiling=bound + 2)
    assert above.count(text, nbytes, None, False, 1)[0].source != "tokenizer"
    assert not tokens.band_decided("estimate", nbytes, 1, False, bound + 1)
    assert tokens.band_decided("estimate", nbytes, 1, False, bound + 2)
