"""The match stage's compiled loops (forensics.match.kernels) and one-key sorts give the numbers of the numpy
array passes they replaced (fingerprint.array_*, kgrams_many then probe, lexsort), on any input: a user never sees
them, only tokens, hits and findings, so one that differed would silently change every fingerprint and finding."""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.match import fingerprint, kernels

_P = fingerprint._P
# Code points from a small alphabet, so runs, repeats and every class boundary occur often.
_ALPHABET = 40


def _full(small: np.ndarray) -> np.ndarray:
    """A table over every code point (what the loops require), ``small`` in its first entries."""
    table = np.zeros(0x110000, dtype=small.dtype)
    table[: len(small)] = small
    return table


def _sval(seed: int) -> np.ndarray:
    return _full(np.random.default_rng(seed).integers(0, 2**64, size=_ALPHABET, dtype=np.uint64))


def _equal(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a, b))


@settings(max_examples=300, deadline=None)
@given(cls=st.lists(st.integers(0, 3), max_size=300), seed=st.integers(0, 2**32 - 1))
def test_tokens_by_class_are_the_array_passes(cls: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    cps = rng.integers(0, _ALPHABET, size=len(cls)).astype("<u4")
    classes = np.array(cls, dtype=np.uint8)
    sval = _sval(seed)
    got = kernels.tokens_by_class(classes, cps, sval, _P)
    assert _equal(got, fingerprint.array_tokens_by_class(classes, cps, sval, _P))
    # The code points as the tokenizer has them: a read-only view of the text's bytes.
    frozen = np.frombuffer(cps.tobytes(), dtype="<u4")
    assert _equal(kernels.tokens_by_class(classes, frozen, sval, _P), got)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(st.integers(0, _ALPHABET - 1), max_size=300), seed=st.integers(0, 2**32 - 1),
       remapped=st.booleans())
def test_tokens_by_table_are_the_array_passes(text: list[int], seed: int, remapped: bool) -> None:
    rng = np.random.default_rng(seed)
    cps = np.frombuffer(np.array(text, dtype="<u4").tobytes(), dtype="<u4")
    sval = _sval(seed)
    if remapped:  # a table of info codes read through a class per code (the tokenizer's path outside the matcher)
        table = _full(rng.integers(0, 9, size=_ALPHABET).astype(np.uint8))
        remap = np.zeros(256, dtype=np.uint8)
        remap[:9] = rng.integers(0, 4, size=9)
        got = kernels.tokens_by_table(cps, table, sval, _P, remap)
        want = fingerprint.array_tokens_by_table(cps, table, sval, _P, remap)
    else:
        table = _full(rng.integers(0, 4, size=_ALPHABET).astype(np.uint8))
        got = kernels.tokens_by_table(cps, table, sval, _P)
        want = fingerprint.array_tokens_by_table(cps, table, sval, _P)
    assert _equal(got, want)


def test_tokens_of_the_shapes_at_the_edges() -> None:
    """No characters, only white space, one long word, only one-character tokens, a word at each end."""
    sval = _sval(7)
    for cls in ([], [0] * 50, [1] * 5000, [2] * 64, [3, 2, 3], [1, 1, 0, 0, 1], [0, 1, 2, 1, 1, 3, 0, 1]):
        classes = np.array(cls, dtype=np.uint8)
        cps = (np.arange(len(cls)) % _ALPHABET).astype("<u4")
        got = kernels.tokens_by_class(classes, cps, sval, _P)
        assert _equal(got, fingerprint.array_tokens_by_class(classes, cps, sval, _P)), cls
    one_word = kernels.tokens_by_class(np.ones(5000, np.uint8), np.zeros(5000, "<u4"), sval, _P)
    assert one_word[0].tolist() == [0] and one_word[1].tolist() == [5000]


@settings(max_examples=200, deadline=None)
@given(text=st.lists(st.integers(0, _ALPHABET - 1), max_size=300), seed=st.integers(0, 2**32 - 1),
       special_from=st.integers(0, 9))
def test_survey_is_the_array_passes(text: list[int], seed: int, special_from: int) -> None:
    info = _full(np.random.default_rng(seed).integers(0, 9, size=_ALPHABET).astype(np.uint8))
    cps = np.array(text, dtype="<u4")
    special, unknown = kernels.survey(cps, info, special_from)
    want_special, want_unknown = fingerprint.array_survey(cps, info, special_from)
    assert special.tolist() == want_special.tolist() and unknown == want_unknown


def _index_over(kgram_hashes: np.ndarray, k: int) -> object:
    from forensics.match.index import TargetIndex

    idx = TargetIndex([], k)
    idx.unique = np.unique(kgram_hashes.astype(np.uint64))
    idx.build_lookup()
    return idx


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(0, 40), min_size=1, max_size=12), k=st.integers(1, 7),
       seed=st.integers(0, 2**32 - 1), kept=st.floats(0.0, 1.0), crowded=st.booleans())
def test_probe_kgrams_is_kgrams_then_probe(lengths: list[int], k: int, seed: int, kept: float, crowded: bool) -> None:
    """The compiled probe finds exactly the k-grams the array passes find: within one text each, in the index."""
    rng = np.random.default_rng(seed)
    # Token hashes from a small vocabulary, so k-grams repeat within and across texts.
    hashes = rng.integers(0, 12, size=sum(lengths)).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    owner = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    grams, where = fingerprint.kgrams_many(hashes, owner, k)
    # The index: some of the texts' own k-grams (hits), and others (misses); crowded: hashes sharing top bits.
    mine = grams[rng.random(len(grams)) < kept]
    others = rng.integers(0, 2**64, size=200, dtype=np.uint64)
    if crowded and len(mine):
        others = (mine[0] & ~np.uint64(0xFFFF)) | rng.integers(0, 0xFFFF, size=200, dtype=np.uint64)
    idx: Any = _index_over(np.concatenate([mine, others]), k)
    pos, gid = idx.probe(grams)
    got_pos, got_gid = idx.probe_kgrams(hashes, owner)
    assert got_pos.tolist() == where[pos].tolist()
    assert got_gid.tolist() == gid.tolist()
    assert np.array_equal(idx.unique[got_gid], grams[pos])


def test_probe_kgrams_on_an_empty_index_and_short_texts() -> None:
    idx: Any = _index_over(np.zeros(0, np.uint64), 5)
    assert [len(a) for a in idx.probe_kgrams(np.arange(20, dtype=np.uint64), np.zeros(20, np.int64))] == [0, 0]
    full: Any = _index_over(fingerprint.kgrams(np.arange(20, dtype=np.uint64), 5), 5)
    assert [len(a) for a in full.probe_kgrams(np.arange(4, dtype=np.uint64), np.zeros(4, np.int64))] == [0, 0]
    pos, _ = full.probe_kgrams(np.arange(20, dtype=np.uint64), np.repeat([0, 1], 10))
    assert pos.tolist() == [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]  # none across the two texts


@settings(max_examples=200, deadline=None)
@given(entries=st.lists(st.tuples(st.integers(0, 2**32 - 1),
                                  st.one_of(st.integers(-(2**20), -1), st.integers(0, 2**63 - 1), st.sampled_from([0, 1, 2**63 - 1]))),
                        max_size=200),
       seed=st.integers(0, 2**32 - 1))
def test_holder_entries_sort_as_the_lexsort_did(entries: list[tuple[int, int]], seed: int) -> None:
    """The holder compaction's one-key sort (rarity.by_kgram_and_tenant) orders (k-gram, tenant) as lexsort: k-gram
    ids up to 2**32 - 1, the 63-bit tenant codes, and the negative codes that mark a target's own prompt."""
    from forensics.match.rarity import by_kgram_and_tenant

    rng = np.random.default_rng(seed)
    if entries:  # repeats, as a k-gram held by a tenant many times
        entries = entries + [entries[i] for i in rng.integers(0, len(entries), size=len(entries))]
    g = np.array([e[0] for e in entries], dtype=np.int64)
    t = np.array([e[1] for e in entries], dtype=np.int64)
    order = by_kgram_and_tenant(g, t)
    want = np.lexsort((t, g))
    assert g[order].tolist() == g[want].tolist()
    assert t[order].tolist() == t[want].tolist()


def test_the_loops_refuse_arrays_of_different_lengths() -> None:
    """They read without bounds checks: a class or owner array of the wrong length is refused, never read past."""
    with pytest.raises(ValueError, match="classes for"):
        kernels.tokens_by_class(np.ones(3, np.uint8), np.zeros(5, "<u4"), _sval(1), _P)
    idx: Any = _index_over(np.arange(10, dtype=np.uint64), 5)
    with pytest.raises(ValueError, match="owners for"):
        idx.probe_kgrams(np.arange(10, dtype=np.uint64), np.zeros(4, np.int64))


def test_the_loops_refuse_tables_too_short_and_k_below_one() -> None:
    """A table shorter than one entry per code point, a short class remap or k < 1 is refused (a direct call; the
    tokenizer's own tables cover every code point)."""
    full = np.zeros(0x110000, np.uint64)
    cps = np.array([97, 98, 99, 32, 100], dtype="<u4")
    with pytest.raises(ValueError, match="per code point"):
        kernels.tokens_by_table(cps, np.ones(10, np.uint8), full, _P)
    with pytest.raises(ValueError, match="per code point"):
        kernels.tokens_by_class(np.ones(5, np.uint8), cps, np.zeros(_ALPHABET, np.uint64), _P)
    with pytest.raises(ValueError, match="remap"):
        kernels.tokens_by_table(cps, np.ones(0x110000, np.uint8), full, _P, np.zeros(9, np.uint8))
    with pytest.raises(ValueError, match="per code point"):
        kernels.survey(cps, np.ones(10, np.uint8), 5)
    idx: Any = _index_over(np.arange(10, dtype=np.uint64), 5)
    idx.k = 0
    with pytest.raises(ValueError, match="k-grams of 0"):
        idx.probe_kgrams(np.arange(10, dtype=np.uint64), np.zeros(10, np.int64))


def test_holder_sort_refuses_ids_its_key_cannot_hold() -> None:
    from forensics.match.rarity import by_kgram_and_tenant

    for g in ([2**32], [-1]):
        with pytest.raises(ValueError, match="k-gram ids"):
            by_kgram_and_tenant(np.array(g, np.int64), np.zeros(1, np.int64))


def test_loading_the_loops_beside_the_stage_ends_and_leaves_a_failure_to_the_stage(monkeypatch: pytest.MonkeyPatch,
                                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The match stage loads the compiled loops on a thread while its targets load. The thread has ended when the
    block does, also when the block fails (a process exiting while numba loads could abort), and a failure there prints
    no traceback (a thread's exception goes to stderr by default): the stage's own first call raises it, with the
    stage's message."""
    with fingerprint.kernels_loading_beside():
        pass
    assert fingerprint._kernels  # loaded by the time the block ended
    ended: list[str] = []

    def broken(texts: list[str]) -> Any:
        try:
            time.sleep(0.3)  # slower than the failing block
            raise RuntimeError("the loops cannot load")
        finally:
            ended.append("loading ended")

    uncaught: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)  # what prints a thread's traceback
    monkeypatch.setattr(fingerprint, "tokenize_many", broken)
    with pytest.raises(KeyError), fingerprint.kernels_loading_beside() as thread:
        raise KeyError("the stage failed first: the loading is still waited for")
    assert ended == ["loading ended"] and not uncaught
    thread.join(timeout=60)
    assert "Traceback" not in capsys.readouterr().err
