"""Fingerprints and the aligner: stable hashes, offsets into the original text, alignment properties."""

from __future__ import annotations

import subprocess
import sys
import unicodedata
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.match.align import align
from forensics.match.fingerprint import CODE_MAX_PIECES, kgrams, tokenize, tokenize_many


def pieces(text: str) -> list[str]:
    tk = tokenize(text)
    return [text[s:e] for s, e in zip(tk.start.tolist(), tk.end.tolist())]


def test_tokens_are_words_and_single_punctuation_with_original_offsets() -> None:
    text = "Hello,  world!\r\nIt's 3.14 — naïve_café 日本語 👍🏽"
    assert pieces(text) == ["Hello", ",", "world", "!", "It", "'", "s", "3", ".", "14", "—", "naïve_café",
                            "日", "本", "語", "👍", "🏽"]


def test_equivalent_texts_hash_equal() -> None:
    a = "Crème Brûlée at ZOË's ﬁne café\r\n東京 🎉"
    variants = [
        unicodedata.normalize("NFD", a),
        a.lower().replace("\r\n", "\n"),
        "CRÈME   brûlée AT zoë'S fine CAFÉ 東京 🎉\ufe0f",
        "Crème Brû\u200blée at ＺＯË's ﬁne café 東京 🎉",  # zero-width space, full-width letters
    ]
    base = tokenize(a).hash
    for v in variants:
        assert np.array_equal(tokenize(v).hash, base), v
    # Accents are not folded away: compatibility and case are, a different letter is not.
    assert tokenize("Creme").hash[0] != tokenize("Crème").hash[0]


def test_different_words_hash_differently() -> None:
    h = tokenize("alpha beta gamma alpha").hash
    assert h[0] == h[3] and len(set(h[:3].tolist())) == 3
    assert tokenize("ab").hash[0] != tokenize("ba").hash[0]


def test_hashes_are_stable_across_processes() -> None:
    # Python's hash() is salted per process; ours must not be: compute in a fresh interpreter.
    text = "The quick brown fox jumps over the lazy dog, 東京 🎉"
    code = ("from forensics.match.fingerprint import tokenize, kgrams; "
            f"print(kgrams(tokenize({text!r}).hash, 3).tolist())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": "12345", "PATH": ""}, cwd=Path(__file__).resolve().parent.parent)
    assert other.stdout.strip() == str(kgrams(tokenize(text).hash, 3).tolist())


def test_kgrams_cover_every_position() -> None:
    h = tokenize("a b c d e f g").hash
    g = kgrams(h, 3)
    assert len(g) == 5 and len(set(g.tolist())) == 5
    assert len(kgrams(h[:2], 3)) == 0
    assert kgrams(tokenize("x a b c y").hash, 3)[1] == g[0]


def test_empty_and_space_only_texts() -> None:
    assert len(tokenize("")) == 0 and len(tokenize(None)) == 0 and len(tokenize(" \r\n\t\u200b ")) == 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_token_offsets_lie_inside_the_text_in_order(text: str) -> None:
    tk = tokenize(text)
    s, e = tk.start, tk.end
    assert np.all(s < e) and np.all(s >= 0) and np.all(e <= len(text))
    # In order; two tokens share characters only when one character expands into several
    # tokens under compatibility mapping ("¼" is "1", "⁄", "4").
    assert np.all(s[1:] >= s[:-1]) and np.all(e[1:] >= e[:-1])
    assert np.all((s[1:] >= e[:-1]) | (s[1:] == e[:-1] - 1))
    for a, b in zip(s.tolist(), e.tolist()):
        assert text[a:b].strip() != ""


tokens = st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=60)


@settings(max_examples=200, deadline=None)
@given(tokens)
def test_identical_sequences_align_fully_with_score_100(a: list[int]) -> None:
    al = align(a, a)
    assert al is not None
    assert (al.a_start, al.a_end, al.b_start, al.b_end) == (0, len(a), 0, len(a))
    assert al.score == 100.0 and al.matched == len(a) == al.longest_run


@settings(max_examples=300, deadline=None)
@given(tokens, tokens)
def test_alignment_spans_lie_inside_and_blocks_really_match(a: list[int], b: list[int]) -> None:
    al = align(a, b)
    if al is None:
        assert not set(a) & set(b)
        return
    assert 0 <= al.a_start < al.a_end <= len(a) and 0 <= al.b_start < al.b_end <= len(b)
    assert 0 < al.score <= 100 and al.longest_run <= al.matched <= min(al.a_end - al.a_start, al.b_end - al.b_start)
    for i, j, n in al.blocks:
        assert a[i : i + n] == b[j : j + n]
        assert al.a_start <= i and i + n <= al.a_end and al.b_start <= j and j + n <= al.b_end


def test_alignment_finds_an_embedded_damaged_run() -> None:
    rng = np.random.default_rng(0)
    src = rng.integers(0, 10**9, size=200).tolist()
    frag = src[50:90]
    frag[20] = -1
    al = align([7, 8, 9] + frag + [10, 11], src)
    assert al is not None
    assert (al.a_start, al.a_end, al.b_start, al.b_end) == (3, 43, 50, 90)
    assert al.matched == 39 and al.longest_run == 20


def test_a_loose_alignment_gives_way_to_its_densest_run_that_reaches_the_score() -> None:
    # Two-token blocks three tokens apart around a ten-token core: 18 of 30 tokens match (score 60).
    a = [1, 2, -1, -2, -3, 3, 4, -4, -5, -6, *range(10, 20), -7, -8, -9, 5, 6, -10, -11, -12, 7, 8]
    b = [x if x > 0 else x - 100 for x in a]
    loose = align(a, b)
    assert loose is not None and (loose.matched, loose.score) == (18, 60.0)
    assert align(a, b, min_score=50) == loose  # reached already: nothing changes
    dense = align(a, b, min_score=70, min_matched=8)
    assert dense is not None
    # the most matched tokens at score >= 70: the core with the two pairs before it (the first of equals)
    assert (dense.a_start, dense.a_end, dense.matched, dense.score, dense.longest_run) == (0, 20, 14, 70.0, 10)
    assert align(a, b, min_score=90, min_matched=8).matched == 10  # only the core reaches 90
    assert align(a, b, min_score=90, min_matched=11) == loose  # a core too short to be evidence: as it was
    # a stray word two tokens before the core is trimmed off, as at the edges of any alignment
    gap = [-20, -21, -22, -23, -24, -25]
    a = [1, 2, *gap, 3, -30, -31, *range(10, 20), *gap, 4, 5, *gap, 6, 7, *gap, 8, 9]
    b = [x if x > 0 else x - 100 for x in a]
    dense = align(a, b, min_score=70, min_matched=8)
    assert dense is not None and dense.blocks[0] == (11, 11, 10) and dense.a_start == 11


def test_many_texts_and_long_texts_tokenize_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import forensics.match.fingerprint as fp

    texts = ["Crème brûlée at Zoë's café 東京 🎉 " * 5, "", "alpha beta\r\ngamma " * 9, "x", "naïve façade, déjà vu! " * 4]
    monkeypatch.setattr(fp, "GROUP_CHARS", 23)  # forces groups of pieces and pieces of texts
    tk, owner, first = fp.tokenize_many(texts)
    assert len(first) == len(texts) + 1
    for t, text in enumerate(texts):
        one = fp._without_punctuation(*fp._tokenize(text))  # the matcher's tokens: no punctuation marks
        assert not {text[s:e] for s, e in zip(one.start.tolist(), one.end.tolist())} & {",", "!", "'", "."}
        a, b = first[t], first[t + 1]
        assert np.array_equal(owner[a:b], np.full(b - a, t))
        assert np.array_equal(tk.hash[a:b], one.hash)
        assert np.array_equal(tk.start[a:b], one.start) and np.array_equal(tk.end[a:b], one.end)
    g, pos = fp.kgrams_many(tk.hash, owner, 3)
    assert all(owner[p] == owner[p + 2] for p in pos.tolist())


def test_alignment_keeps_the_passage_not_stray_matches_far_from_it() -> None:
    passage = list(range(100, 140))
    a = [1, 2] + [50 + i for i in range(20)] + passage + [7]
    b = [1, 2] + [900 + i for i in range(30)] + passage + [8]
    al = align(a, b)
    assert al is not None
    assert (al.a_start, al.a_end, al.b_start, al.b_end) == (22, 62, 32, 72)
    assert al.score == 100.0 and al.matched == 40


# The fast path (one element per original character) must give exactly the tokens of the
# reference path (every character expanded first), whatever the characters and their neighbours.
_AWKWARD = list("aZ9_ é\u0301\u200b\u200d\ufe0f\u00ad…¼½⑴㈱ﬁ¨™\u3000\r\n\t,.日本👍🏽ＺǄß\U0001d400")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(_AWKWARD) | st.characters(), max_size=120))
def test_fast_path_equals_reference_path(text: str) -> None:
    from forensics.match.fingerprint import _tokenize_reference

    fast, ref = tokenize(text), _tokenize_reference(text)
    assert fast.start.tolist() == ref.start.tolist() and fast.end.tolist() == ref.end.tolist()
    assert fast.hash.tolist() == ref.hash.tolist()


def _bmp_in_texts(context: str) -> list[str]:
    """Every BMP character in ``context`` (``{c}`` marks where), as texts the fast path reads itself: the
    characters that take the reference path ("¼") a few to a text, since beyond _MAX_SPLICES of them a
    text is read whole by the reference path and the fast path would not be tested at all."""
    import forensics.match.fingerprint as fp

    chars = [chr(c) for c in range(0x20, 0x10000) if not 0xD800 <= c <= 0xDFFF]
    tokenize("".join(chars))  # fills the tables
    complex_ = [c for c in chars if fp._info[ord(c)] == fp._F_COMPLEX]
    assert 100 < len(complex_) and 8 < fp._MAX_SPLICES
    plain = "".join(context.format(c=c) for c in chars if fp._info[ord(c)] != fp._F_COMPLEX)
    return [plain] + ["".join(context.format(c=c) for c in complex_[i : i + 8]) for i in range(0, len(complex_), 8)]


def test_fast_path_equals_reference_path_for_every_bmp_character() -> None:
    from forensics.match.fingerprint import _tokenize_reference

    # Each character alone, inside a word, doubled and next to punctuation.
    for text in _bmp_in_texts("x{c}y {c}{c} ({c} "):
        fast, ref = tokenize(text), _tokenize_reference(text)
        assert np.array_equal(fast.start, ref.start) and np.array_equal(fast.end, ref.end)
        assert np.array_equal(fast.hash, ref.hash)


def _matcher_tokens_by_definition(text: str) -> tuple[list[int], list[int], list[int]]:
    """The matcher's tokens as defined: the tokenizer's, without punctuation marks, keys as pieces."""
    import forensics.match.fingerprint as fp

    tk, cps = fp._tokenize(text)
    tk = fp._split_codes(fp._without_punctuation(tk, cps), cps)
    return tk.start.tolist(), tk.end.tolist(), tk.hash.tolist()


def _matcher_tokens(text: str) -> tuple[list[int], list[int], list[int]]:
    tk = tokenize_many([text])[0]
    return tk.start.tolist(), tk.end.tolist(), tk.hash.tolist()


# Marks that join words (Pc), marks that become several (…, ‼), marks among ideographs (・), symbols that
# stay tokens, keys, and the characters that take the reference path (¼).
_MARKS = list("‿⁀＿﹏_…‼・「」、。,.;:!?()[]{}'\"«»—–-¡¿$=+<>@#%&*/\\|~^`¼⑴") + ["ab12cd34ef56gh78"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_AWKWARD + _MARKS) | st.characters(), max_size=60).map("".join))
def test_matcher_tokens_leave_punctuation_out_as_defined(text: str) -> None:
    """The matcher reads punctuation marks as separators rather than making their tokens and dropping
    them: the same tokens, offsets and hashes as the definition, whatever the characters."""
    assert _matcher_tokens(text) == _matcher_tokens_by_definition(text)


def test_matcher_tokens_leave_punctuation_out_for_every_bmp_character() -> None:
    # Each character alone, inside a word, doubled, next to a mark and to a key; then a few at a time.
    for text in _bmp_in_texts("x{c}y {c}{c} ({c} {c}, a{c}12345678901234 "):
        assert _matcher_tokens(text) == _matcher_tokens_by_definition(text)
    for c in "‿⁀＿¼…‼・,":
        alone = f"{c} w{c}w {c}"
        assert _matcher_tokens(alone) == _matcher_tokens_by_definition(alone), repr(c)


@pytest.mark.parametrize("multi", [0, 1, 64, 65, 300])
@pytest.mark.parametrize("hard", [0, 1, 5, 32])
def test_fast_path_equals_reference_path_in_long_texts(multi: int, hard: int) -> None:
    """Long texts with a few or many characters that become several tokens ("…") and that may join a
    neighbour oddly ("¼"): spliced into the fast path's tokens, beside words far longer than the
    neighbourhood searched for a run's ends, and at the text's very start and end."""
    from forensics.match.fingerprint import _tokenize_reference

    rng = np.random.default_rng(multi * 100 + hard)
    words = ["plain", "x" * 300, "Grüße", "e\u0301t\u00e9", "日本", "a,b.c", "_id", "\u200bzw"]
    parts = [str(rng.choice(words)) for _ in range(2_000)]
    for _ in range(multi):
        i = int(rng.integers(len(parts)))
        parts[i] = parts[i][: len(parts[i]) // 2] + "…" + parts[i][len(parts[i]) // 2 :]
    for j in range(hard):
        i = [0, len(parts) - 1, 1][j] if j < 3 else int(rng.integers(len(parts)))
        parts[i] = ("¼" + parts[i]) if j % 2 else (parts[i] + "¼")
    text = " ".join(parts)
    fast, ref = tokenize(text), _tokenize_reference(text)
    assert np.array_equal(fast.start, ref.start) and np.array_equal(fast.end, ref.end)
    assert np.array_equal(fast.hash, ref.hash)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=1, max_size=60), st.data())
def test_segment_sums_are_sums_mod_2_64(values: list[int], data: st.DataObject) -> None:
    """The token hashes' segment sums (prefix-sum differences) are each segment's sum mod 2**64, wrap-around
    included, whatever lies between the segments."""
    from forensics.match.fingerprint import _segment_sums

    w = np.array(values, dtype=np.uint64)
    bounds = sorted(data.draw(st.sets(st.integers(min_value=0, max_value=len(w)), min_size=2)))
    ts = np.array(bounds[:-1], dtype=np.intp)
    # each segment ends at the next one's start or before it (gaps between tokens)
    te = np.array([data.draw(st.integers(min_value=a + 1, max_value=b)) for a, b in zip(bounds, bounds[1:])], dtype=np.intp)
    assert _segment_sums(w, ts, te).tolist() == [sum(values[a:b]) % 2**64 for a, b in zip(ts.tolist(), te.tolist())]
    ends = np.append(ts[1:], len(w))  # no gaps, the last to the end: what numpy's reduceat sums
    with np.errstate(over="ignore"):
        assert _segment_sums(w, ts, ends).tolist() == np.add.reduceat(w, ts).tolist()


def test_powers_are_exact_as_the_tables_grow(monkeypatch: pytest.MonkeyPatch) -> None:
    """The powers of the token hash's base and of its inverse, grown in steps, are P**i and P**-i mod 2**64."""
    from forensics.match import fingerprint

    monkeypatch.setattr(fingerprint, "_pow", [np.ones(1, dtype=np.uint64), np.ones(1, dtype=np.uint64)])
    base = 0x9E3779B97F4A7C15
    inverse = pow(base, -1, 2**64)
    for n in (3, 1_500, 5_000, 70_001):
        fwd, inv = fingerprint._powers(n)
        assert len(fwd) >= n and len(inv) == len(fwd)
        for i in {0, 1, n // 2, n - 1, len(fwd) - 1, *range(0, len(fwd), 997)}:
            assert int(fwd[i]) == pow(base, i, 2**64) and int(inv[i]) == pow(inverse, i, 2**64)


def _reference_align(a: list[int], b: list[int], edge_gap: int, max_gap: int) -> tuple[Any, ...] | None:
    """The alignment rule as :func:`align` documents it, written plainly (the faster code must agree)."""
    from rapidfuzz.distance import LCSseq

    blocks = [(m.a, m.b, m.size) for m in LCSseq.opcodes(a, b).as_matching_blocks() if m.size > 0]
    if not blocks:
        return None
    parts: list[list[tuple[int, int, int]]] = [[blocks[0]]]
    for prev, cur in zip(blocks, blocks[1:]):
        if max(cur[0] - (prev[0] + prev[2]), cur[1] - (prev[1] + prev[2])) > max_gap:
            parts.append([])
        parts[-1].append(cur)
    kept = max(parts, key=lambda part: sum(size for _, _, size in part))

    def stray(x: tuple[int, int, int], y: tuple[int, int, int]) -> bool:
        lo, hi = (x, y) if x[0] < y[0] else (y, x)
        return x[2] == 1 and max(hi[0] - (lo[0] + lo[2]), hi[1] - (lo[1] + lo[2])) >= edge_gap

    while len(kept) > 1 and stray(kept[0], kept[1]):
        kept.pop(0)
    while len(kept) > 1 and stray(kept[-1], kept[-2]):
        kept.pop()
    a0, b0, a1, b1 = kept[0][0], kept[0][1], kept[-1][0] + kept[-1][2], kept[-1][1] + kept[-1][2]
    matched = sum(s for _, _, s in kept)
    return (a0, a1, b0, b1, matched, max(s for _, _, s in kept), 100.0 * 2 * matched / ((a1 - a0) + (b1 - b0)),
            tuple(kept))


@settings(max_examples=300, deadline=None)
@given(tokens, tokens, st.floats(min_value=0, max_value=100), st.integers(min_value=0, max_value=12))
def test_a_minimum_score_keeps_the_densest_run_that_reaches_it(a: list[int], b: list[int], min_score: float,
                                                                min_matched: int) -> None:
    loose = _reference_align(a, b, 2, 8)
    got = align(a, b, min_score=min_score, min_matched=min_matched)
    if loose is None or loose[6] >= min_score:
        assert got == align(a, b)
        return
    kept = loose[7]
    runs: list[tuple[int, float, int, int]] = []  # every run of the kept blocks that reaches the score: (matched, score, -lo), the best last
    for lo in range(len(kept)):
        for hi in range(lo + 1, len(kept) + 1):
            part = kept[lo:hi]
            matched = sum(size for _, _, size in part)
            span = (part[-1][0] + part[-1][2] - part[0][0]) + (part[-1][1] + part[-1][2] - part[0][1])
            if Fraction(200 * matched) >= Fraction(min_score) * span:  # reaches, exactly
                runs.append((matched, 100.0 * 2 * matched / span, -lo, hi))
    best = max(runs)  # a single block scores 100: there is always one
    part = list(kept[-best[2]:best[3]])
    trimmed = list(part)  # its stray edge blocks dropped as the loose part's were (edge_gap 2)
    while len(trimmed) > 1 and trimmed[0][2] == 1 and max(trimmed[1][0] - trimmed[0][0], trimmed[1][1] - trimmed[0][1]) - 1 >= 2:
        trimmed.pop(0)
    while len(trimmed) > 1 and trimmed[-1][2] == 1 and max(trimmed[-1][0] - trimmed[-2][0] - trimmed[-2][2],
                                                           trimmed[-1][1] - trimmed[-2][1] - trimmed[-2][2]) >= 2:
        trimmed.pop()
    matched = sum(size for _, _, size in trimmed)
    span = (trimmed[-1][0] + trimmed[-1][2] - trimmed[0][0]) + (trimmed[-1][1] + trimmed[-1][2] - trimmed[0][1])
    if 100.0 * 2 * matched / span >= min_score:
        part = trimmed
    assert got is not None
    if sum(size for _, _, size in part) < min_matched:
        assert got == align(a, b)
    else:
        assert got.blocks == tuple(part) and got.score >= min_score
        assert (got.a_start, got.b_start) == part[0][:2] and got.matched == sum(size for _, _, size in part)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(1, 4)), min_size=1, max_size=40),
       st.sampled_from([0.0, 50.0, 60.0, 70.0, 200 / 3, 76.19047619047619, 85.0, 99.9, 100.0]))
def test_densest_part_is_the_best_run_by_its_documented_rule(steps: list[tuple[int, int, int]],
                                                             min_score: float) -> None:
    from forensics.match.align import densest_part

    blocks, a, b = [], 0, 0
    for gap_a, gap_b, size in steps:  # blocks in order in both texts, with the gaps drawn
        a, b = a + gap_a, b + gap_b
        blocks.append((a, b, size))
        a, b = a + size, b + size
    best = None
    for lo in range(len(blocks)):
        for hi in range(lo + 1, len(blocks) + 1):
            matched = sum(size for _, _, size in blocks[lo:hi])
            span = (blocks[hi - 1][0] + blocks[hi - 1][2] - blocks[lo][0]) + (blocks[hi - 1][1] + blocks[hi - 1][2] - blocks[lo][1])
            key = (matched, 100.0 * 2 * matched / span, -lo)
            if Fraction(200 * matched) >= Fraction(min_score) * span and (best is None or key > best[0]):
                best = (key, (lo, hi))
    assert densest_part(blocks, min_score) == (None if best is None else best[1])


@settings(max_examples=400, deadline=None)
@given(tokens, tokens, st.integers(min_value=0, max_value=4), st.integers(min_value=0, max_value=10))
def test_alignment_follows_its_documented_rule(a: list[int], b: list[int], edge_gap: int, max_gap: int) -> None:
    al = align(a, b, edge_gap, max_gap)
    expected = _reference_align(a, b, edge_gap, max_gap)
    got = None if al is None else (al.a_start, al.a_end, al.b_start, al.b_end, al.matched, al.longest_run, al.score,
                                   al.blocks)
    assert got == expected
    # the same from arrays of 64-bit hashes, as the verification holds them
    al2 = align(np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64), edge_gap, max_gap)
    assert al2 == al


def _shown(text: str) -> list[str]:
    tk = tokenize_many([text])[0]
    return [text[a:b] for a, b in zip(tk.start.tolist(), tk.end.tolist())]


def test_machine_made_tokens_are_matched_as_pieces_and_words_stay_whole() -> None:
    key = "simtok_ZMXY0R0nCp0ZNVZATtGsF9Fc3g8gvd"
    text = f'key "{key}", internationalization, x86_64 read_file_path_now'
    shown = _shown(text)
    assert shown[0] == "key" and shown[-3:] == ["internationalization", "x86_64", "read_file_path_now"]
    pieces = shown[1:-3]
    assert "".join(pieces) == key and 5 <= len(pieces) <= 20
    # Pieces compare without case and width, like every token, and are not the words of their letters.
    tk = tokenize_many([text])[0]
    for variant in (text.upper(), text.replace(key, unicodedata.normalize("NFKC", key).translate(_FULLWIDTH))):
        other = tokenize_many([variant])[0]
        assert len(other) == len(tk) and (other.hash == tk.hash).all()
    card = tokenize_many(["card12345678"])[0]
    assert len(card) > 1 and tokenize_many(["card"])[0].hash[0] not in card.hash


_FULLWIDTH = {c: c + 0xFEE0 for c in range(0x21, 0x7F)}


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 9])
def test_a_key_missing_its_first_characters_still_shares_its_other_pieces(cut: int) -> None:
    # Where a piece ends depends on the characters there, not on where the token began: a leak that starts
    # inside a key, or changes one of its characters, keeps the rest of its pieces.
    key = "sk_live_7f3KqP9xWz2LmN4bVc8RtY1uIo6EaS5dGh0J"
    whole = tokenize_many([key])[0]
    part = tokenize_many([key[cut:]])[0]
    assert len(set(part.hash.tolist()) & set(whole.hash.tolist())) >= len(part) - 2
    changed = tokenize_many([key[:20] + "#" + key[21:]])[0]  # one character garbled: now two tokens
    assert len(set(changed.hash.tolist()) & set(whole.hash.tolist())) >= len(whole) - 4


def test_a_key_tokenizes_alike_alone_and_among_other_texts() -> None:
    key = "AKSIM7Q2XW9RTZ4LMNP0"
    alone = tokenize_many([key])[0]
    many, owner, first = tokenize_many(["w" * 30, f"see {key}.", key * 2])
    mine = slice(int(first[1]) + 1, int(first[2]))
    assert (many.hash[mine] == alone.hash).all()
    assert (many.start[mine] - 4 == alone.start).all() and (many.end[mine] - 4 == alone.end).all()
    assert len(alone) > 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="aB3_0Ｚ９ é-", max_size=60), min_size=1, max_size=4))
def test_matched_tokens_cover_each_text_as_its_tokens_do(texts: list[str]) -> None:
    # The pieces of a machine-made token tile it exactly; every other token is as tokenize gives it.
    many, owner, first = tokenize_many(texts)
    for t, text in enumerate(texts):
        mine = slice(int(first[t]), int(first[t + 1]))
        s, e = many.start[mine], many.end[mine]
        words = tokenize(text)
        joined = [(a, b) for a, b in zip(words.start.tolist(), words.end.tolist()) if text[a:b] != "-"]
        pieces = list(zip(s.tolist(), e.tolist()))
        assert all(a < b for a, b in pieces) and all(b <= c for (_, b), (c, _) in zip(pieces, pieces[1:]))
        # Group the pieces back by the token they fall in.
        for a, b in joined:
            inside = [(c, d) for c, d in pieces if a <= c < b]
            assert inside and inside[0][0] == a and inside[-1][1] == b
            assert all(d == c2 for (_, d), (c2, _) in zip(inside, inside[1:]))
            if len(inside) > 1:
                assert b - a >= 12 and any(ch.isdigit() for ch in text[a:b])


def test_a_key_glued_to_other_letters_is_cut_out_of_its_word() -> None:
    key = "sk_live_7f3KqP9xWz2LmN4bVc8RtY1uIo6EaS5dGh0J"
    glued, spaced = tokenize_many([f"API 키는 {key}입니다"])[0], tokenize_many([f"API 키는 {key} 입니다"])[0]
    assert (glued.hash == spaced.hash).all() and len(glued) > 6
    accented = f"clé:{key}e\u0301"  # the rest of the word hashes as that word alone, in either Unicode form
    shown = _shown(accented)
    assert shown[0] == "clé" and shown[-1] == "e\u0301" and "".join(shown[1:-1]) == key
    assert tokenize_many([accented])[0].hash[-1] == tokenize_many(["\u00e9"])[0].hash[0]


def test_runs_of_one_character_are_one_piece_and_a_run_has_at_most_so_many_pieces() -> None:
    # A cut between two equal characters would make "0.3333333333333333" sixteen tokens of evidence.
    assert _shown("0.3333333333333333 9999999999999999 2222222222222x") == [
        "0", "3333333333333333", "9999999999999999", "2222222222222x"]
    glued = tokenize_many(["키9999999999999999 키 9999999999999999"])[0].hash.tolist()
    assert glued[:2] == glued[2:]
    periodic = "a0" * 5000
    assert 1 < len(_shown(periodic)) <= CODE_MAX_PIECES


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "B", "3", "_", "0", "９", "é", "e\u0301", "가", "키", " ", "7f3K", "x9Q2"]),
                max_size=40))
def test_machine_made_runs_cut_alike_in_either_unicode_form(parts: list[str]) -> None:
    text = "".join(parts)
    forms = [unicodedata.normalize(f, text) for f in ("NFC", "NFD", "NFKC")]
    hashes = [tokenize_many([f])[0].hash.tolist() for f in forms]
    assert hashes[0] == hashes[1] == hashes[2]


def test_a_long_run_before_a_key_does_not_use_up_the_keys_pieces() -> None:
    key = "sk_live_7f3KqP9xWz2LmN4bVc8RtY1uIo6EaS5dGh0J"
    alone = tokenize_many([key])[0]
    after = tokenize_many(["ab12" * 100 + " " + key])[0]
    assert len(alone) > 5 and (after.hash[-len(alone):] == alone.hash).all()


def test_format_characters_inside_a_key_are_nothing_as_everywhere() -> None:
    # The tokenizer reads "foo\u200bbar" as "foobar"; a run goes on through them too (a renderer that
    # breaks long strings with soft hyphens or zero-width spaces must not hide a key).
    key = "sk_live_7f3KqP9xWz2LmN4bVc8RtY1uIo6EaS5dGh0J"
    plain = tokenize_many([key])[0].hash.tolist()
    for mark in ("\u200b", "\u00ad", "\u2060", "\ufe0f", "\u200d"):
        broken = mark.join(key[i:i + 8] for i in range(0, len(key), 8))
        assert tokenize_many([broken])[0].hash.tolist() == plain, repr(mark)
    assert tokenize_many(["0123456789ab"])[0].hash.tolist() == tokenize_many(["012345\u200b6789ab"])[0].hash.tolist()


def test_a_words_tokens_never_depend_on_text_after_it() -> None:
    # Whether a run holds a digit is read from the run alone: a digit further on (one with a combining mark,
    # in another word or another text of the group) once decided how an earlier word was cut.
    for first, later in [("5éabcdefghijklm", "7\u0301éééééééééé"), ("abcdefghijklmn1\u0301", ""),
                         ("abcdefghijklm1\u20e3", "")]:
        alone = tokenize_many([first])[0]
        with_later = tokenize_many([first, later])[0]
        spaced = tokenize_many([first + " " + "lorem ipsum " * 100 + later])[0]
        assert (with_later.hash[: len(alone)] == alone.hash).all()
        assert (spaced.hash[: len(alone)] == alone.hash).all()
    assert _shown("abcdefghijklmn1\u0301") == ["abcdefghijklmn1\u0301"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="a0g9_é\u0301\u200b¼1\u20e3 ", max_size=40), min_size=2, max_size=4))
def test_a_texts_tokens_are_the_same_among_other_texts(texts: list[str]) -> None:
    many, _, first = tokenize_many(texts)
    for t, text in enumerate(texts):
        alone = tokenize_many([text])[0]
        mine = slice(int(first[t]), int(first[t + 1]))
        assert many.hash[mine].tolist() == alone.hash.tolist()
        assert many.start[mine].tolist() == alone.start.tolist() and many.end[mine].tolist() == alone.end.tolist()


def test_no_run_is_cut_into_a_token_a_character() -> None:
    # "0g" and "g0" both hash to a cut: without the rule against two cuts in a row, a text of such runs was a
    # token a character, and matching one against another took minutes and gigabytes.
    text = "0g0g0g0g0g0g " * 200
    assert len(tokenize_many([text])[0]) <= len(text) // 4
