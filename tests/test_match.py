"""Match stage: fragments found at the right offsets, and what must never count as exposure."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import types
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from match_helpers import config, exchange, make_case

import forensics.match.pool as pool_mod
import forensics.match.spill as spill_mod
import forensics.match.stream as stream_mod
from forensics import schema
from forensics.cli import main
from forensics.errors import CaseError, ConfigError
from forensics.match import MatchParams, Tuning, match

_SYLL = ["ka", "ro", "mi", "ten", "val", "dor", "shi", "qua", "lex", "bru", "po", "zan", "fe", "gil", "mur", "sta", "ny", "orb"]


#: The worker pool forced on (the test cases are far below the size that starts workers), workers up first.
POOL = Tuning(inline_bytes=0, wait_for_workers=True)

def vocab(seed: int, n: int = 4000) -> list[str]:
    """A made-up vocabulary: no two tests share phrases by accident of the language."""
    rng = np.random.default_rng(seed)
    words = {"".join(rng.choice(_SYLL, size=int(rng.integers(2, 4)))) for _ in range(n)}
    return sorted(words)


VOCAB = vocab(1)


def words(rng: np.random.Generator, n: int) -> list[str]:
    return [VOCAB[i] for i in rng.integers(0, len(VOCAB), size=n)]


def cross(findings: list[dict]) -> list[dict]:
    return [f for f in findings if f["relation"] == "cross_tenant"]


def only(findings: list[dict], recipient: str, source: str) -> dict:
    rows = [f for f in findings if f["recipient_request_id"] == recipient and f["source_request_id"] == source]
    assert len(rows) == 1, findings
    return rows[0]


@pytest.mark.parametrize("length", [8, 12, 16, 32, 64])
def test_exact_fragment_found_with_offsets_in_both_texts(tmp_path: Path, length: int) -> None:
    rng = np.random.default_rng(length)
    doc = words(rng, 400)
    frag = " ".join(doc[150 : 150 + length])
    prompt = "<|user|>\n" + " ".join(doc)
    head, tail = " ".join(words(rng, 30)), " ".join(words(rng, 30))
    response = f"{head}. {frag}. {tail}"
    rows = [
        exchange("a1", "acme", 0, prompt=prompt, response="ok"),
        exchange("b1", "bolt", 5, prompt="a short question", response=response),
        exchange("c1", "cato", 2, prompt=" ".join(words(rng, 200)), response=" ".join(words(rng, 50))),
    ]
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    f = only(result.findings, "b1", "a1")
    assert f["relation"] == "cross_tenant" and f["source_kind"] == "prompt"
    assert response[f["recipient_start"] : f["recipient_end"]] == frag
    assert prompt[f["source_start"] : f["source_end"]] == frag
    assert f["matched_tokens"] == length and f["score"] == 100.0 and f["rarity"] == 1.0
    # Tiers follow from how likely such a match is by chance (a case this small uses the theoretical null).
    assert f["tier_rule"].startswith("E") and f["expected_by_chance"] <= 0.05
    assert f["tier"] == ("confirmed" if f["expected_by_chance"] <= 0.001 else "probable")
    # The fixed rules, kept for comparison, still tier it as before.
    old = only(match(tmp_path / "case", config(tiering="rules")).findings, "b1", "a1")
    assert old["tier"] == ("confirmed" if length >= 12 else "probable")
    assert old["tier_rule"].startswith("R1" if length >= 12 else "R2")


def test_fragment_of_a_very_long_prompt_is_verified_in_a_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(23)
    doc = words(rng, 30_000)  # ~250,000 characters: verified through a window, not re-tokenized whole
    frag = " ".join(doc[20_000:20_030])
    prompt = "<|user|>\n" + "\r\n".join(" ".join(doc[i : i + 50]) for i in range(0, len(doc), 50))
    response = " ".join(words(rng, 20)) + " " + frag.replace(" ", "  ") + " " + " ".join(words(rng, 20))
    rows = [exchange("a1", "acme", 0, prompt=prompt), exchange("b1", "bolt", 5, prompt="hi", response=response)]
    case = make_case(tmp_path / "case", rows, ["b1"])
    f = only(match(case, config()).findings, "b1", "a1")
    assert len(prompt) > stream_mod.WINDOW_MIN_CHARS
    assert prompt[f["source_start"] : f["source_end"]].split() == frag.split()
    assert response[f["recipient_start"] : f["recipient_end"]] == frag.replace(" ", "  ")
    windowed = _outputs(case)
    monkeypatch.setattr(stream_mod, "WINDOW_MIN_CHARS", 10**9)  # whole-text verification gives the same
    match(case, config())
    assert _outputs(case) == windowed


def test_a_short_source_text_is_tokenized_around_its_hits_or_whole_where_its_tokens_are_long() -> None:
    from types import SimpleNamespace

    from forensics.match.fingerprint import tokenize_many

    rng = np.random.default_rng(5)
    prose = " ".join(words(rng, 2000))
    # Nine tokens of 300 characters each before and after the hit: a 256-character window holds too few.
    long = " ".join(["x" * 300] * 9) + " " + " ".join(words(rng, 12)) + " " + " ".join(["y" * 300] * 9)
    texts = [prose, long]
    whole = [tokenize_many([x])[0] for x in texts]
    s = np.array([1000, 1001, 9, 10], dtype=np.int64)  # two hits in each text, on one target
    c = np.array([whole[0].start[1000], whole[0].start[1001], whole[1].start[9], whole[1].start[10]], dtype=np.int64)
    grp, t, q = np.array([0, 0, 1, 1]), np.zeros(4, dtype=np.int64), np.array([0, 1, 0, 1])
    index = SimpleNamespace(targets=[None])
    tk, owner, bounds = stream_mod.cluster_windows(index, MatchParams(), texts, grp, t, q, s, c)  # type: ignore[arg-type]
    mine = owner == 0
    assert 2 * MatchParams().margin < mine.sum() < len(whole[0]) // 10  # only around the hits
    at = int(np.searchsorted(whole[0].start, tk.start[mine][0]))
    assert np.array_equal(tk.hash[mine], whole[0].hash[at : at + int(mine.sum())])  # the whole text's own tokens
    assert np.array_equal(tk.start[owner == 1], whole[1].start)  # too few tokens in the window: the whole text
    assert list(bounds) == [0, int(mine.sum()), len(tk)]


@pytest.mark.parametrize("length", [16, 32, 64])
def test_damaged_fragment_found(tmp_path: Path, length: int) -> None:
    rng = np.random.default_rng(100 + length)
    doc = words(rng, 300)
    frag = doc[100 : 100 + length]
    damaged = list(frag)
    for i in range(4, length - 2, 10):  # 10 % of the tokens replaced, none at the edges
        damaged[i] = "XX" + damaged[i]
    response = " ".join(words(rng, 20)) + " " + " ".join(damaged) + " " + " ".join(words(rng, 20))
    prompt = " ".join(doc)
    rows = [exchange("a1", "acme", 0, prompt=prompt), exchange("b1", "bolt", 5, prompt="hi", response=response)]
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    f = only(result.findings, "b1", "a1")
    want = " ".join(damaged)
    start = response.index(want)
    assert (f["recipient_start"], f["recipient_end"]) == (start, start + len(want))
    src = " ".join(frag)
    assert (f["source_start"], f["source_end"]) == (prompt.index(src), prompt.index(src) + len(src))
    assert f["matched_tokens"] == length - len(range(4, length - 2, 10))
    assert 85 <= f["score"] < 100
    assert f["tier"] in ("confirmed", "probable")


def test_a_heavily_damaged_fragment_is_found_by_its_intact_core(tmp_path: Path) -> None:
    # Pairs of words kept between runs of changed ones, around ten intact words: strung together the
    # alignment scores 69, under any candidate's threshold, and the leak was never even a candidate.
    rng = np.random.default_rng(43)
    doc = words(rng, 300)
    frag = doc[100:128]
    kept = {1, 2, 6, 7, *range(9, 19), 21, 22, 25, 26}
    damaged = [w if i in kept else "XX" + w for i, w in enumerate(frag)]
    response = " ".join(words(rng, 20)) + " " + " ".join(damaged) + " " + " ".join(words(rng, 20))
    rows = [exchange("a1", "acme", 0, prompt=" ".join(doc)), exchange("b1", "bolt", 5, prompt="hi", response=response)]
    f = only(match(make_case(tmp_path / "case", rows, ["b1"]), config()).findings, "b1", "a1")
    # the densest run of blocks that reaches the threshold: the core, the pair before it and the two after
    passage = " ".join(damaged[6:27])
    start = response.index(passage)
    assert (f["recipient_start"], f["recipient_end"]) == (start, start + len(passage))
    assert f["matched_tokens"] == 16 and f["score"] == round(100 * 32 / 42, 2)
    assert f["tier"] in ("confirmed", "probable")


def test_a_passage_whose_punctuation_the_decode_dropped_is_found(tmp_path: Path) -> None:
    # A mark every few words (as in a list of names and amounts): with marks as tokens, no 5-token
    # window of the source survives their loss, and the leak was never even a candidate.
    rng = np.random.default_rng(41)
    doc = words(rng, 300)
    marks = [", ", "; ", ": ", ". ", " (", ") ", '"']
    written = "".join(w + (marks[i % len(marks)] if i % 3 == 2 else " ") for i, w in enumerate(doc))
    frag_words = doc[120:150]
    leaked = " ".join(frag_words)  # the same words, every mark dropped
    response = " ".join(words(rng, 20)) + " " + leaked + " " + " ".join(words(rng, 20))
    rows = [exchange("a1", "acme", 0, prompt=written), exchange("b1", "bolt", 5, prompt="hi", response=response)]
    f = only(match(make_case(tmp_path / "case", rows, ["b1"]), config()).findings, "b1", "a1")
    start = response.index(leaked)
    assert (f["recipient_start"], f["recipient_end"]) == (start, start + len(leaked))
    src = written[f["source_start"] : f["source_end"]]
    assert src.split()[0].startswith(frag_words[0]) and frag_words[-1] in src.split()[-1]
    assert f["matched_tokens"] == len(frag_words) and f["tier"] in ("confirmed", "probable")


def test_response_of_another_tenant_is_a_source(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    answer = " ".join(words(rng, 120))
    frag = " ".join(answer.split()[40:70])
    rows = [exchange("a1", "acme", 0, prompt="write it", response=answer),
            exchange("b1", "bolt", 3, prompt="hello", response="Here: " + frag)]
    f = only(match(make_case(tmp_path / "case", rows, ["b1"]), config()).findings, "b1", "a1")
    assert f["source_kind"] == "response" and answer[f["source_start"] : f["source_end"]] == frag


def test_boilerplate_of_many_tenants_is_not_exposure_but_a_rare_passage_is(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    licence = " ".join(words(rng, 60))
    secret = " ".join(words(rng, 40))
    rows = [exchange(f"t{i}", f"tenant{i}", i, prompt=f"{' '.join(words(rng, 20))} {licence}") for i in range(6)]
    rows.append(exchange("a1", "acme", 7, prompt=f"{' '.join(words(rng, 30))} {secret}"))
    rows.append(exchange("b1", "bolt", 10, prompt="hi", response=f"{licence} and then {secret}"))
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert {f["source_request_id"] for f in cross(result.findings)} == {"a1"}
    # The cap is a parameter; even under it, text six tenants held is too common for a probable finding...
    assert {f["source_request_id"] for f in match(tmp_path / "case", config(max_tenants=6)).findings} == {"a1"}
    # ...unless the rarity floor is lowered too: then every holder is a (low-rarity) source.
    low = match(tmp_path / "case", config(max_tenants=6, probable_rarity=0.1)).findings
    assert {f["source_request_id"] for f in low} == {"a1"} | {f"t{i}" for i in range(6)}
    assert all(f["rarity"] == pytest.approx(1 / 6, abs=1e-3) for f in low if f["source_request_id"] != "a1")


def test_text_in_recipients_own_prompt_explains_itself(tmp_path: Path) -> None:
    rng = np.random.default_rng(12)
    passage = " ".join(words(rng, 50))
    rows = [
        exchange("a1", "acme", 0, prompt=f"please review: {passage}"),
        exchange("b1", "bolt", 5, prompt=f"translate this: {passage}", response=f"Sure. {passage}"),
    ]
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert cross(result.findings) == []


def test_recipient_tenant_earlier_text_is_same_tenant_not_exposure(tmp_path: Path) -> None:
    rng = np.random.default_rng(13)
    passage = " ".join(words(rng, 50))
    rows = [
        exchange("b0", "bolt", 0, prompt=f"keep this: {passage}"),
        exchange("a1", "acme", 1, prompt=f"and this: {passage}"),
        exchange("b1", "bolt", 5, prompt="anything new?", response=f"Sure. {passage}"),
    ]
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert cross(result.findings) == []
    f = only(result.findings, "b1", "b0")
    assert f["relation"] == "same_tenant" and f["tier"] == "confirmed"
    code = _cli(["match", "--case", str(tmp_path / "case"), "--quiet"])
    assert code == 0  # same-tenant overlap alone is not cross-tenant exposure


def test_text_only_in_later_prompts_is_no_finding(tmp_path: Path) -> None:
    rng = np.random.default_rng(14)
    passage = " ".join(words(rng, 50))
    rows = [
        exchange("b1", "bolt", 0, prompt="hello", response=passage, duration=2),
        exchange("a1", "acme", 2.5, prompt=f"what about: {passage}"),  # after the response finished
        exchange("c1", "cato", 1, prompt=f"meanwhile: {passage}"),  # while it was being generated: a source
    ]
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert {f["source_request_id"] for f in result.findings} == {"c1"}


def test_lookback_and_same_decode_node_narrow_the_search(tmp_path: Path) -> None:
    rng = np.random.default_rng(15)
    p1, p2 = " ".join(words(rng, 40)), " ".join(words(rng, 40))
    rows = [
        exchange("a1", "acme", 0, prompt=p1, decode_node="d0"),
        exchange("a2", "acme", 50, prompt=p2, decode_node="d1"),
        exchange("b1", "bolt", 60, prompt="hi", response=f"{p1} {p2}", decode_node="d1"),
    ]
    case = make_case(tmp_path / "case", rows, ["b1"])
    assert {f["source_request_id"] for f in match(case, config()).findings} == {"a1", "a2"}
    assert {f["source_request_id"] for f in match(case, config(lookback_minutes=30)).findings} == {"a2"}
    r = match(case, config(same_decode_node=True))
    assert {f["source_request_id"] for f in r.findings} == {"a2"}
    assert r.report["searched"]["same_decode_node"] is True


def _old_prompts(rng: np.random.Generator, node: str) -> list[dict[str, Any]]:
    """300 records of 20 tenants two days before the tests' suspects, on decode node ``node``: prompts only (no
    response to draw into the control sample, so a case with them and one without fit the same null)."""
    return [exchange(f"o{i}", f"t{i % 20}", -3000 + i, prompt=" ".join(words(rng, 30)), decode_node=node)
            for i in range(300)]


@pytest.mark.parametrize(("narrowed", "old_node"), [({"lookback_minutes": 30}, "d1"), ({"same_decode_node": True}, "d0")])
def test_records_a_narrowed_search_leaves_out_do_not_count_in_its_size(tmp_path: Path, narrowed: dict[str, Any],
                                                                       old_node: str) -> None:
    # A search narrowed to the last half hour (or to the suspect's decode node) covers only those records, and a
    # finding's search size (its E-value's) counts only them, as does the mechanism's count of the records the
    # node served before the suspect. Both counted every record received before the suspect, as if searched:
    # 300 records of two days before made the finding look likelier by chance, and its source's place on the
    # node (the latest of 301 records rather than of 1) stronger evidence than it was.
    rng = np.random.default_rng(18)
    passage = " ".join(words(rng, 40))
    recent = [exchange("a1", "acme", 50, prompt=passage, decode_node="d1"),
              exchange("b1", "bolt", 60, prompt="hi", response=passage, decode_node="d1")]
    old = _old_prompts(rng, old_node)
    alone = only(match(make_case(tmp_path / "alone", recent, ["b1"]), config(**narrowed)).findings, "b1", "a1")
    among = only(match(make_case(tmp_path / "among", old + recent, ["b1"]), config(**narrowed)).findings, "b1", "a1")
    for column in ("expected_by_chance", "mechanism_factor", "expected_by_chance_with_mechanism"):
        assert among[column] == alone[column], column
    # Searched, the same records do count:
    searched = only(match(make_case(tmp_path / "searched", old + recent, ["b1"]), config()).findings, "b1", "a1")
    assert searched["expected_by_chance"] > alone["expected_by_chance"]


def test_the_window_test_of_a_narrowed_search_counts_only_the_records_it_searched(tmp_path: Path) -> None:
    # Twelve leaks, each from the record just before its suspect on the suspect's node: enough confirmed findings
    # to place the recent-occupant window. Its E-value (window / records searched) counted every record received
    # before the suspect: 300 records of two days before, outside the lookback, made it 300 times stronger.
    rng = np.random.default_rng(20)
    recent = []
    for i in range(12):
        passage = " ".join(words(rng, 40))
        recent += [exchange(f"a{i}", f"src{i}", 40 + 2 * i, prompt=passage, decode_node="d1"),
                   exchange(f"b{i}", f"dst{i}", 41 + 2 * i, prompt="hi", response=passage, decode_node="d1")]
    old = _old_prompts(rng, "d1")
    suspects = [f"b{i}" for i in range(12)]
    alone = match(make_case(tmp_path / "alone", recent, suspects), config(lookback_minutes=30))
    among = match(make_case(tmp_path / "among", old + recent, suspects), config(lookback_minutes=30))
    assert among.report["null"]["recent_occupants"]["ran"]
    assert ([f["expected_by_chance_with_mechanism"] for f in among.cross_tenant]
            == [f["expected_by_chance_with_mechanism"] for f in alone.cross_tenant])
    assert len(among.cross_tenant) == 12


def test_a_lookback_runs_back_from_the_completion_of_a_suspect_received_at_no_known_time(tmp_path: Path) -> None:
    # Its receipt unknown, the lookback ran back from no time at all (which wrapped around) and searched nothing.
    # From its completion (minute 61): acme's copy of minute 50 is searched, that of minute 0 is not, nor counted.
    rng = np.random.default_rng(19)
    passage = " ".join(words(rng, 40))
    rows = [exchange("a0", "acme", 0, prompt=f"{passage} " + " ".join(words(rng, 10))),
            exchange("a1", "acme", 50, prompt=passage),
            dict(exchange("b1", "bolt", 60, prompt="hi", response=passage), received_at=None)]
    with_a0 = match(make_case(tmp_path / "case", rows, ["b1"]), config(lookback_minutes=30)).findings
    assert {f["source_request_id"] for f in with_a0} == {"a1"}
    assert only(with_a0, "b1", "a1")["other_source_requests"] == 0  # a0's copy was not searched
    without = match(make_case(tmp_path / "without", rows[1:], ["b1"]), config(lookback_minutes=30)).findings
    assert only(with_a0, "b1", "a1")["expected_by_chance"] == only(without, "b1", "a1")["expected_by_chance"]


@pytest.mark.parametrize("variant", ["nfd", "crlf", "cjk_emoji", "fullwidth_case"])
def test_offsets_survive_unicode_normalisation(tmp_path: Path, variant: str) -> None:
    rng = np.random.default_rng(16)
    base = ("Crème brûlée für Zoë at Café Müller, naïve façade; "
            "東京タワーの夜景はとても綺麗でした 🎉🎉 party 👩🏽‍💻 done.\nSecond line: "
            + " ".join(words(rng, 12)))
    if variant == "nfd":
        src, leaked = unicodedata.normalize("NFC", base), unicodedata.normalize("NFD", base)
    elif variant == "crlf":
        src, leaked = base.replace("\n", "\r\n").replace(", ", ",\r\n"), base
    elif variant == "cjk_emoji":
        src, leaked = base, base.replace("🎉🎉", "🎉\ufe0f🎉").replace("ワー", "ワ\u200bー")
    else:
        src, leaked = base, "".join(chr(ord(c) + 0xFEE0) if "a" <= c <= "z" else c for c in base.upper())
    prompt = "<|user|>\n" + " ".join(words(rng, 40)) + "\r\n" + src + "\n" + " ".join(words(rng, 30))
    response = "Answer: 😀 " + leaked + " ... " + " ".join(words(rng, 10))
    rows = [exchange("a1", "acme", 0, prompt=prompt), exchange("b1", "bolt", 5, prompt="hi", response=response)]
    f = only(match(make_case(tmp_path / "case", rows, ["b1"]), config()).findings, "b1", "a1")
    assert prompt[f["source_start"] : f["source_end"]] == src
    assert response[f["recipient_start"] : f["recipient_end"]] == leaked
    assert f["tier"] == "confirmed"


def test_engine_signature_lifts_a_short_rare_match_to_probable(tmp_path: Path) -> None:
    rng = np.random.default_rng(17)
    doc = words(rng, 100)
    frag = " ".join(doc[30:36])  # 6 tokens: one more than k, less than min_tokens
    rows = [exchange("a1", "acme", 0, prompt=" ".join(doc)),
            exchange("b1", "bolt", 5, prompt="x", response=" ".join(words(rng, 10)) + f" {frag} " + " ".join(words(rng, 10))),
            exchange("b2", "bolt", 6, prompt="y", response=" ".join(words(rng, 10)) + f" {frag} " + " ".join(words(rng, 10)))]
    result = match(make_case(tmp_path / "case", rows, ["b1", "b2"], engine_signature=("b2",)), config(tiering="rules"))
    assert [(f["recipient_request_id"], f["tier"], f["tier_rule"][:2]) for f in result.findings] == [("b2", "probable", "R3")]


@pytest.mark.parametrize(("phrase", "found"), [
    ("quagga quagga quagga quagga quagga quagga", False),  # six tokens, one word: says nothing
    ("quagga zither quagga zither quagga zither", False),  # two words
    ("quagga zither marimba okapi tuatara", True),  # five different words: one whole k-gram
])
def test_engine_signature_short_match_needs_k_different_words(tmp_path: Path, phrase: str, found: bool) -> None:
    rng = np.random.default_rng(23)
    rows = [exchange("a1", "acme", 0, prompt=" ".join(words(rng, 30)) + f" {phrase} " + " ".join(words(rng, 30))),
            exchange("b1", "bolt", 5, prompt="x", response=" ".join(words(rng, 10)) + f" {phrase} " + " ".join(words(rng, 10)))]
    case = make_case(tmp_path / "case", rows, ["b1"], engine_signature=("b1",))
    assert bool(match(case, config()).cross_tenant) is found
    result = match(case, config(tiering="rules"))
    assert bool(result.cross_tenant) is found
    if found:
        assert "distinct_tokens>=5" in result.findings[0]["tier_rule"]


def test_engine_signature_does_not_lift_a_short_phrase_two_tenants_sent(tmp_path: Path) -> None:
    rng = np.random.default_rng(21)
    phrase = " ".join(words(rng, 6))
    rows = [exchange("a1", "acme", 0, prompt=" ".join(words(rng, 30)) + f" {phrase} " + " ".join(words(rng, 30))),
            exchange("c1", "cato", 1, prompt=" ".join(words(rng, 30)) + f" {phrase} " + " ".join(words(rng, 30))),
            exchange("b2", "bolt", 6, prompt="y", response=" ".join(words(rng, 10)) + f" {phrase} " + " ".join(words(rng, 10)))]
    result = match(make_case(tmp_path / "case", rows, ["b2"], engine_signature=("b2",)), config(tiering="rules"))
    assert result.findings == []


def test_a_passage_resent_in_several_requests_is_one_finding(tmp_path: Path) -> None:
    rng = np.random.default_rng(22)
    passage = " ".join(words(rng, 40))
    turns = [exchange(f"a{i}", "acme", i, prompt=f"{' '.join(words(rng, 10 * (i + 1)))} {passage}") for i in range(3)]
    rows = turns + [exchange("b1", "bolt", 10, prompt="hi", response=f"Well: {passage}")]
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    f = only(result.findings, "b1", "a2")  # the most recent request that held it
    assert f["other_source_requests"] == 2 and len(result.findings) == 1


def test_control_sample_counts_false_positives_and_never_writes_them(tmp_path: Path) -> None:
    rng = np.random.default_rng(18)
    secret = " ".join(words(rng, 40))
    rows = [exchange("a1", "acme", 0, prompt=secret)]
    rows += [exchange(f"n{i}", f"tenant{i}", 1 + i, prompt=" ".join(words(rng, 30)), response=" ".join(words(rng, 30)))
             for i in range(9)]
    rows.append(exchange("n9", "tenant9", 20, prompt="q", response="quoting: " + secret))  # not a suspect
    rows.append(exchange("b1", "bolt", 30, prompt="q", response=" ".join(words(rng, 30))))
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config(control_size=50))
    c = result.report["control"]
    assert c["size"] == 10 and c["responses_with_findings"] == 1 and c["request_ids_with_findings"] == ["n9"]
    assert c["false_positive_rate"] == pytest.approx(1 / 10, abs=1e-6)
    assert result.findings == []
    small = match(tmp_path / "case", config(control_size=3)).report["control"]
    assert small["size"] == 3


def _outputs(case: Path) -> dict[str, bytes]:
    return {n: (case / n).read_bytes() for n in ("evidence.parquet", "evidence.csv", "match.json")}


def _mixed_case(root: Path, n: int = 60, row_group_rows: int | None = None) -> Path:
    rng = np.random.default_rng(19)
    rows, sus = [], []
    docs = [" ".join(words(rng, 150)) for _ in range(n)]
    for i in range(n):
        rows.append(exchange(f"r{i:03d}", f"tenant{i % 7}", i, prompt=docs[i], response=" ".join(words(rng, 40))))
    for j in range(5):
        src = docs[int(rng.integers(0, n // 2))].split()
        resp = " ".join(words(rng, 20) + src[40 : 40 + 12 + 8 * j] + words(rng, 20))
        rows.append(exchange(f"s{j}", f"tenant{(j + 3) % 7}", n + j, prompt="p", response=resp))
        sus.append(f"s{j}")
    return make_case(root, rows, sus, row_group_rows=row_group_rows)


def test_outputs_are_byte_identical_across_runs_and_process_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    assert pq.ParquetFile(case / "exchanges.parquet").num_row_groups == 5
    first = match(case, config(workers=1))
    a = _outputs(case)
    match(case, config(workers=1))
    assert _outputs(case) == a
    shared = match(case, config(workers=2, batch_rows=8), tuning=POOL)
    assert _outputs(case) == a
    assert shared.run_stats["jobs_on_workers"] > 0 and shared.run_stats["jobs_here"] > 0
    match(case, config(workers=2, batch_rows=8), tuning=Tuning(inline_bytes=0))  # this process starts alone
    assert _outputs(case) == a
    assert len(cross(first.findings)) >= 5


def test_verifying_around_hit_clusters_gives_what_whole_texts_give(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(41)
    frags = [" ".join(words(rng, 14)) for _ in range(3)]
    long_words = " ".join("z" * 200 + str(i) for i in range(12))
    prompts = [" ".join(words(rng, 400)) + " " + frags[0] + " " + " ".join(words(rng, 400)),  # a window inside prose
               frags[1] + " " + " ".join(words(rng, 300)),  # at the text's start
               long_words + " " + frags[2] + " " + long_words]  # margin tokens beyond the window: tokenized whole
    rows = [exchange(f"a{i}", f"src{i}", i, prompt=x) for i, x in enumerate(prompts)]
    response = " ... ".join(f + " " + " ".join(words(rng, 6)) for f in frags)
    rows.append(exchange("b1", "bolt", 10, prompt="hi", response=response))
    case = make_case(tmp_path / "case", rows, ["b1"])
    result = match(case, config())
    for i, frag in enumerate(frags):
        f = only(result.findings, "b1", f"a{i}")
        assert prompts[i][f["source_start"] : f["source_end"]].split() == frag.split()
    windowed = _outputs(case)
    monkeypatch.setattr(stream_mod, "CLUSTER_PAD_CHARS", 10**9)  # every text tokenized whole
    match(case, config())
    assert _outputs(case) == windowed
    monkeypatch.setattr(stream_mod, "CLUSTER_PAD_CHARS", 1)  # windows of the hits alone: every text falls back
    match(case, config())
    assert _outputs(case) == windowed


def test_verification_split_across_workers_inside_one_row_group_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = _mixed_case(tmp_path / "case", row_group_rows=None)
    assert pq.ParquetFile(case / "exchanges.parquet").num_row_groups == 1
    first = match(case, config(workers=1))
    expected = _outputs(case)
    second = match(case, config(workers=2), tuning=POOL)
    assert _outputs(case) == expected
    assert second.run_stats["jobs_on_workers"] > 0
    assert second.report["searched"]["source_texts_verified"] > 1  # several tasks share the one row group
    for in_flight in (1, 16):  # how many tasks wait at a worker decides who verifies what, never the result
        match(case, config(workers=2), tuning=dataclasses.replace(POOL, verify_in_flight=in_flight))
        assert _outputs(case) == expected
        # ... nor who scans which rows in the pass
        match(case, config(workers=2), tuning=dataclasses.replace(POOL, pass_in_flight=in_flight, task_bytes=1))
        assert _outputs(case) == expected
    assert len(cross(first.findings)) >= 5


def test_workers_reading_row_ranges_that_cut_batches_change_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = _mixed_case(tmp_path / "case", row_group_rows=40)
    match(case, config(workers=1))
    expected = _outputs(case)
    # One row per task: ranges cut every batch.
    result = match(case, config(workers=3, batch_rows=3), tuning=Tuning(inline_bytes=0, wait_for_workers=True, task_bytes=1))
    assert _outputs(case) == expected
    assert result.report["searched"]["records"] == pq.ParquetFile(case / "exchanges.parquet").metadata.num_rows


def test_workers_that_cannot_start_leave_the_match_to_this_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = _mixed_case(tmp_path / "case", row_group_rows=40)
    match(case, config(workers=1))
    expected = _outputs(case)

    def no_server() -> None:
        raise OSError("no shared memory here")

    monkeypatch.setattr(pool_mod.forkserver, "ensure_running", no_server)
    result = match(case, config(workers=2), tuning=Tuning(inline_bytes=0))
    assert _outputs(case) == expected
    assert result.run_stats["jobs_on_workers"] == 0
    assert "failed (OSError: no shared memory here)" in result.summary()["warnings"][0]


def test_workers_that_fail_to_initialise_leave_the_match_to_this_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = _mixed_case(tmp_path / "case", row_group_rows=40)
    match(case, config(workers=1))
    expected = _outputs(case)
    broken = tmp_path / "payload.pickle"
    broken.write_bytes(b"not a pickle")
    monkeypatch.setattr(pool_mod, "_worker_payload", lambda scanner: broken)
    result = match(case, config(workers=2), tuning=POOL)  # must neither hang nor fail
    assert _outputs(case) == expected
    assert result.run_stats["jobs_on_workers"] == 0
    assert "worker processes failed" in result.summary()["warnings"][0]


def test_a_worker_that_dies_leaves_its_jobs_to_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import pickle

    payload = tmp_path / "payload.pickle"
    payload.write_bytes(pickle.dumps("a scanner"))
    monkeypatch.setattr(pool_mod, "_worker_payload", lambda scanner: payload)
    with pool_mod.helpers_running(1, wait_for_workers=True) as helpers:
        helpers.start(None)  # type: ignore[arg-type]
        assert helpers.pool is not None
        # The remote job kills its worker (as an out-of-memory kill would): its result comes from here.
        results = list(pool_mod.ordered(helpers, os._exit, lambda job: job * 10, iter([1, 2, 3, 4])))
    assert results == [10, 20, 30, 40]
    assert helpers.failed is not None and "BrokenProcessPool" in helpers.failed


def test_the_last_jobs_stay_here_rather_than_wait_at_a_busy_worker() -> None:
    # With four jobs allowed to wait at the worker, the last jobs of the verification went there while
    # this process, out of jobs, sat idle until the worker had run them one after another (a worker
    # starts what it is sent: it cannot be taken back). Given the jobs as a list, a job stays here once
    # the worker holds as many unfinished jobs as are left to start.
    import concurrent.futures
    import types

    sent: list[concurrent.futures.Future[Any]] = []

    class Job(concurrent.futures.Future):  # type: ignore[type-arg]
        """A job at the worker: waiting for its result lets it finish (what waiting does)."""

        def __init__(self, job: int) -> None:
            super().__init__()
            self.job = job

        def finish(self) -> None:
            self.set_result(("worker", self.job))

        def result(self, timeout: float | None = None) -> Any:
            if not self.done():
                self.finish()
            return super().result(timeout)

    class Worker:
        """Finishes its oldest job each time this process finishes one (the two run at the same pace)."""

        def submit(self, fn: Any, job: Any) -> concurrent.futures.Future[Any]:
            fut = Job(job)
            sent.append(fut)
            return fut

        def finish_one(self) -> None:
            for fut in sent:
                if not fut.done():
                    fut.finish()
                    return

    worker = Worker()

    def here(job: int) -> tuple[str, int]:
        worker.finish_one()
        return ("here", job)

    def split(jobs: Any, left: Any = None) -> list[str]:
        sent.clear()
        helpers = types.SimpleNamespace(pool=worker, n=1, jobs={"here": 0, "workers": 0}, broke=None)
        results = list(pool_mod.ordered(helpers, None, here, jobs, per_worker=4, left=left))  # type: ignore[arg-type]
        assert [job for _, job in results] == list(range(8))  # in job order, each once, whoever ran it
        assert helpers.jobs == {"here": sum(who == "here" for who, _ in results),
                                "workers": sum(who == "worker" for who, _ in results)}
        return [who for who, _ in results]

    # Jobs 1-4 go to the worker; 5-8 each find it holding more unfinished jobs than are left to start.
    assert split(list(range(8))) == ["worker"] * 4 + ["here"] * 4
    # Without a length nothing is known of what is left: a job goes to the worker whenever it holds fewer than 4.
    assert split(iter(range(8))) == ["worker"] * 4 + ["here", "worker", "here", "worker"]
    # Jobs made as they are taken (the verification's parts, one after another) can tell what is left once it is
    # known: here from the fifth job on, as for the list.
    taken = [0]

    def made() -> Any:
        for job in range(8):
            taken[0] = job
            yield job

    assert split(made(), left=lambda: 7 - taken[0] if taken[0] >= 4 else None) == ["worker"] * 4 + ["here"] * 4
    taken[0] = 0
    assert split(made(), left=lambda: None) == ["worker"] * 4 + ["here", "worker", "here", "worker"]


def test_row_reader_gives_each_range_once_in_order(tmp_path: Path) -> None:
    rows = [exchange(f"r{i:02d}", "t", i, prompt=f"p{i}") for i in range(23)]
    case = make_case(tmp_path / "case", rows, [], row_group_rows=10)
    reader = stream_mod.RowReader(batch_rows=4)
    path = str(case / "exchanges.parquet")
    seen = []
    for rg, lo, hi in [(0, 0, 3), (0, 5, 9), (0, 9, 10), (1, 2, 7), (1, 0, 2), (2, 0, 3)]:  # gaps, a step back
        got = [b.column("request_id").to_pylist() for _, b in reader.read(path, rg, lo, hi)]
        seen.append([r for part in got for r in part])
    assert seen == [[f"r{i:02d}" for i in range(10 * rg + lo, 10 * rg + hi)]
                    for rg, lo, hi in [(0, 0, 3), (0, 5, 9), (0, 9, 10), (1, 2, 7), (1, 0, 2), (2, 0, 3)]]


def test_retiring_common_kgrams_early_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(20)
    licence = " ".join(words(rng, 60))
    rows = [exchange(f"t{i}", f"tenant{i}", i, prompt=f"{' '.join(words(rng, 40))} {licence}") for i in range(8)]
    rows += _mixed_rows(rng, 30)
    rows.append(exchange("b1", "bolt", 100, prompt="hi", response=f"{licence} {' '.join(words(rng, 10))}"))
    case = make_case(tmp_path / "case", rows, ["b1", "s0", "s1"], row_group_rows=8)
    match(case, config(batch_rows=4))
    expected = _outputs(case)
    result = match(case, config(batch_rows=4), tuning=Tuning(compact_entries=1, prune_hits=1))
    assert _outputs(case) == expected
    assert result.report["searched"]["kgram_hits_kept_after_rarity_and_own_context"] > 0


@contextlib.contextmanager
def _temp_files_opened(opened: list[Any]) -> Iterator[None]:
    """Within the block, every anonymous file the match stage's holders open is added to ``opened``."""
    real = spill_mod.tempfile.TemporaryFile

    def spy(*args: Any, **kwargs: Any) -> Any:
        fh = real(*args, **kwargs)
        opened.append(fh)
        return fh

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(spill_mod.tempfile, "TemporaryFile", spy)
        yield


@pytest.mark.parametrize("workers", [1, 2])
def test_holding_hits_on_disk_and_verifying_them_in_parts_changes_nothing(tmp_path: Path, workers: int) -> None:
    # A big case's hits go to a file and come back a part at a time: the same findings, nothing left behind.
    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    tuning = Tuning(inline_bytes=0, wait_for_workers=True) if workers > 1 else Tuning()
    whole = match(case, config(workers=workers, batch_rows=8), tuning=tuning)
    expected = _outputs(case)
    before = sorted(p.name for p in case.iterdir())
    opened: list[Any] = []
    with _temp_files_opened(opened):
        parts = match(case, config(workers=workers, batch_rows=8),
                      tuning=dataclasses.replace(tuning, memory_hits=1, prune_hits=1, verify_part_hits=1))
    assert _outputs(case) == expected
    assert parts.report["searched"] == whole.report["searched"]
    assert len(opened) == 1 and opened[0].closed  # the hits went to disk, and the file is gone
    assert sorted(p.name for p in case.iterdir()) == before
    assert len(cross(whole.findings)) >= 5


@pytest.mark.parametrize(("workers", "memory_rows", "row_groups"), [(1, 1, 1), (1, 2, 3), (2, 1, 64), (1, 10**6, 5)])
def test_holding_candidate_rows_on_disk_in_groups_of_targets_changes_nothing(tmp_path: Path, workers: int,
                                                                             memory_rows: int, row_groups: int) -> None:
    # The candidate rows wait in a file while the workers verify and are read back a group of targets at a time (the
    # copies of a passage dropped group by group): the same findings, review and match.json, nothing left behind.
    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    tuning = Tuning(inline_bytes=0, wait_for_workers=True) if workers > 1 else Tuning()
    whole = match(case, config(workers=workers, batch_rows=8), tuning=dataclasses.replace(tuning, row_groups=1))
    names = ("evidence.parquet", "evidence.csv", "review.parquet", "review.csv", "match.json")
    expected = {n: (case / n).read_bytes() for n in names}
    before = sorted(p.name for p in case.iterdir())
    opened: list[Any] = []
    with _temp_files_opened(opened):
        grouped = match(case, config(workers=workers, batch_rows=8),
                        tuning=dataclasses.replace(tuning, memory_rows=memory_rows, row_groups=row_groups))
    assert {n: (case / n).read_bytes() for n in names} == expected
    assert grouped.report.to_json() == whole.report.to_json()
    assert len(opened) == (1 if memory_rows <= 2 else 0) and all(fh.closed for fh in opened)
    assert sorted(p.name for p in case.iterdir()) == before
    assert len(cross(whole.findings)) >= 5


def test_holding_hits_on_disk_keeps_the_pruning_schedule_and_the_progress_whole(tmp_path: Path) -> None:
    # Review of the first version: every write to disk emptied the hits in memory, and the holder counts were
    # compacted again after every prune_hits hits (72 compactions where 8 had done). And the bar's last step
    # counted every hit dropped on reading back.
    from forensics.match import rarity

    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    calls: list[int] = []
    real = rarity.HolderCounts.compact

    def counted(self: Any) -> None:
        calls.append(1)
        real(self)

    class Recorder:
        def __init__(self) -> None:
            self.tasks: dict[str, tuple[float | None, list[float]]] = {}

        def task(self, description: str, total: float | None = None) -> Any:
            steps: list[float] = []
            self.tasks[description] = (total, steps)
            return types.SimpleNamespace(advance=lambda n=1: steps.append(n), close=lambda: None)

    counts = []
    for memory_hits in (10**9, 1):
        calls.clear()
        recorder = Recorder()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(rarity.HolderCounts, "compact", counted)
            match(case, config(batch_rows=8), recorder, tuning=Tuning(prune_hits=20, memory_hits=memory_hits,
                                                                      verify_part_hits=50))
        counts.append(len(calls))
        total, steps = recorder.tasks["match: verifying candidate regions"]
        assert total and sum(steps) == total and steps[-1] == 0  # nothing left to count at the end
    assert counts[0] == counts[1] > 1


def _mixed_rows(rng: np.random.Generator, n: int) -> list[dict]:
    docs = [" ".join(words(rng, 80)) for _ in range(n)]
    rows = [exchange(f"r{i:03d}", f"tenant{i % 5}", 10 + i, prompt=docs[i]) for i in range(n)]
    for j in range(2):
        rows.append(exchange(f"s{j}", "zeta", 60 + j, prompt="p",
                             response=" ".join(words(rng, 10) + docs[3 + j].split()[10:40] + words(rng, 10))))
    return rows


def test_evidence_files_follow_the_contract(tmp_path: Path) -> None:
    case = _mixed_case(tmp_path / "case")
    result = match(case, config())
    table = pq.read_table(case / "evidence.parquet")
    assert table.num_rows == len(result.findings) > 0
    with open(case / "evidence.csv", newline="", encoding="utf-8") as fh:
        raw = fh.read()
    assert "\r\n" in raw
    rows = list(csv.DictReader(raw.splitlines()))
    assert list(rows[0])[:14] == list(schema.EVIDENCE_CSV[:14])
    keys = [(r["recipient_request_id"], r["source_request_id"]) for r in rows]
    assert keys == sorted(keys)
    assert len({r["finding_id"] for r in rows}) == len(rows)
    report = json.loads((case / "match.json").read_text())
    assert report["parameters"]["k"] == 5 and report["searched"]["records"] == 65
    assert report["searched"]["tokens"] > 0 and report["parameter_sources"]["k"] == "default"


def test_unknown_or_bad_match_keys_are_config_errors(tmp_path: Path) -> None:
    case = _mixed_case(tmp_path / "case", n=5)
    with pytest.raises(ConfigError, match="max_tenant"):
        match(case, config(max_tenant=3))
    with pytest.raises(ConfigError, match="confirm_score"):
        match(case, config(confirm_score=140))
    with pytest.raises(ConfigError, match="same_decode_node"):
        match(case, config(same_decode_node="yes"))


def _cli(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code)


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    case = _mixed_case(tmp_path / "case", n=20)
    assert _cli(["match", "--case", str(case), "--quiet", "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["findings"]["cross_tenant"] >= 1
    assert _cli(["match", "--case", str(case), "--quiet", "--k", "1"]) == 2
    assert "k = 1" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _cli(["match", "--case", str(empty), "--quiet"]) == 2
    assert "no suspects table" in capsys.readouterr().err
    with pytest.raises(CaseError):
        match(empty, config())


@pytest.mark.parametrize("arrow_type", [pa.string(), pa.large_string(), "dictionary"])
def test_text_bytes_come_from_offsets_for_slices_nulls_and_other_encodings(arrow_type: Any) -> None:
    values = ["ab", None, "", "héllo", "ab", "日本"]
    arr = pa.array(values).dictionary_encode() if arrow_type == "dictionary" else pa.array(values, type=arrow_type)
    want = [len((v or "").encode("utf-8")) for v in values]
    assert stream_mod.value_bytes(arr).tolist() == want
    assert stream_mod.value_bytes(arr.slice(2, 3)).tolist() == want[2:5]
    assert stream_mod.value_bytes(arr.slice(0, 0)).tolist() == []


def test_times_in_microseconds_whatever_the_column_holds() -> None:
    us = pa.timestamp("us", tz="UTC")
    assert stream_mod.to_us(pa.array([5, None, 7], type=us).slice(1)) == [None, 7]
    assert stream_mod.to_us(pa.array([1, None], type=pa.timestamp("ms", tz="UTC"))) == [1000, None]
    assert stream_mod.to_us(pa.nulls(2)) == [None, None]  # a column with no time at all
    assert stream_mod.to_us(pa.chunked_array([pa.array([3], type=us), pa.array([4], type=us)])) == [3, 4]


def test_the_index_counts_each_targets_tokens() -> None:
    # The alignment reads every target's token count from the index (a list built per call over thousands
    # of targets cost more than the call's work); it must be each target's own count, empty ones included.
    from forensics.match.index import Target, TargetIndex

    texts = ["", "one two three four five six", ". , !", "caf\u00e9 na\u0131ve \u2026 x", "a " * 50]
    targets = [Target(f"r{i}", "t", 0, 1, None, False, False, text) for i, text in enumerate(texts)]
    index = TargetIndex(targets, 5)
    assert index.token_counts.tolist() == [len(t.tokens) for t in targets] == [0, 6, 0, 3, 50]


def _index_of(hashes: np.ndarray) -> Any:
    """A TargetIndex over the given sorted unique hashes (its other fields are not needed to probe)."""
    from forensics.match.index import TargetIndex

    idx = TargetIndex([], 5)
    unique = np.unique(hashes.astype(np.uint64))
    idx.unique = unique
    idx.build_lookup()
    return idx


@pytest.mark.parametrize("shape", ["random", "crowded_bucket", "extremes"])
def test_probe_finds_exactly_the_target_kgrams(shape: str) -> None:
    rng = np.random.default_rng(7)
    top = np.iinfo(np.uint64).max
    if shape == "random":
        targets = rng.integers(0, top, 50_000, dtype=np.uint64, endpoint=True)
    elif shape == "crowded_bucket":  # hundreds of hashes sharing their top bits: one long bucket
        targets = (np.uint64(0xABCD) << np.uint64(48)) | rng.integers(0, 1 << 40, 500, dtype=np.uint64)
    else:
        targets = np.array([0, 1, top - 1, top], dtype=np.uint64)
    idx = _index_of(targets)
    corpus = rng.integers(0, top, 20_000, dtype=np.uint64, endpoint=True)
    corpus[::7] = rng.choice(idx.unique, len(corpus[::7]))
    corpus[::11] = idx.unique[0] + np.uint64(1)  # neighbours of a target hash match nothing
    pos, gid = idx.probe(corpus)
    member = np.isin(corpus, idx.unique)
    assert pos.tolist() == np.flatnonzero(member).tolist()
    assert (idx.unique[gid] == corpus[pos]).all()


@pytest.mark.parametrize("row_groups", [2, 64])
def test_two_records_of_one_control_keep_their_findings_order_whatever_the_groups(tmp_path: Path,
                                                                                    row_groups: int) -> None:
    # Review: two records of one non-suspect (request id, tenant) may both be controls, two targets whose rows tie in
    # the evidence order. Read a group of targets at a time, they came in group order, not in the order found.
    rng = np.random.default_rng(5)
    doc = words(rng, 200)
    head = " ".join(words(rng, 5))
    rows = [exchange("a0", "acme", 0, prompt=" ".join(doc))]
    rows += [exchange(f"s{i}", f"tenant{i}", 10 + i, prompt="q", response=" ".join(words(rng, 60)))
             for i in range(63)]
    # (the same start, so that the two rows tie in the evidence order; other ends, so that their ids differ)
    rows += [exchange("c0", "bolt", minute, prompt="q", response=f"{head} {' '.join(doc[100:end])}")
             for minute, end in ((60, 130), (60.001, 125))]
    case = make_case(tmp_path / "case", rows, [f"s{i}" for i in range(63)])
    one = match(case, config(), tuning=Tuning(row_groups=1))
    expected = [f.finding_id for f in one.control_findings]
    grouped = match(case, config(), tuning=Tuning(row_groups=row_groups))
    assert len(set(expected)) == 2 and [f.finding_id for f in grouped.control_findings] == expected


def test_the_rows_file_is_closed_when_verification_stops_with_an_error(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Review: the rows' anonymous file stayed open as long as the traceback was kept (a notebook, a service).
    from forensics.match import findings

    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    real = findings.RegionScorer.collect
    calls: list[int] = []

    def collect_then_fail(self: Any, scored: Any) -> None:
        real(self, scored)
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("stopped")

    monkeypatch.setattr(findings.RegionScorer, "collect", collect_then_fail)
    opened: list[Any] = []
    with _temp_files_opened(opened), pytest.raises(RuntimeError, match="stopped") as info:
        match(case, config(batch_rows=8), tuning=Tuning(memory_rows=1, row_groups=3))
    assert info.value is not None  # (the traceback still held)
    assert opened and all(fh.closed for fh in opened)
