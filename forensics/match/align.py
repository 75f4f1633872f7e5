"""Verification: align two token slices with rapidfuzz and keep the span that really matches.

The aligner works on token hashes (not on characters, and never ``partial_ratio`` over whole
long texts): rapidfuzz's LCS opcodes give the matching blocks of the two slices in
O(n * m / 64). The densest run of blocks is kept (a long gap ends a passage) and isolated
one-token blocks at its edges ("the", ",") are trimmed off, so a span starts and ends on real
shared text and its score measures that passage, not the slack around it. Where that run still
scores under the caller's threshold (a heavily damaged passage), its part with the most matched
tokens that reaches the threshold is kept instead, when long enough to be evidence.
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np
from rapidfuzz.distance import LCSseq


@dataclasses.dataclass(frozen=True)
class Alignment:
    """Where two token slices agree. Token indices are relative to the slices, end exclusive."""

    a_start: int
    a_end: int
    b_start: int
    b_end: int
    matched: int  # tokens in matching blocks
    longest_run: int  # longest block of identical consecutive tokens
    score: float  # 0..100: 2 * matched / (a span + b span)
    blocks: tuple[tuple[int, int, int], ...]  # (a index, b index, size), size > 0


def _as_ints(x: np.ndarray | list[int]) -> list[int]:
    # rapidfuzz hashes Python ints; int64 view keeps them in its native range.
    if isinstance(x, np.ndarray):
        return x.view(np.int64).tolist() if x.dtype == np.uint64 else x.astype(np.int64).tolist()
    return list(x)


def align(a: np.ndarray | list[int], b: np.ndarray | list[int], edge_gap: int = 2, max_gap: int = 8,
          min_score: float = 0.0, min_matched: int = 0) -> Alignment | None:
    """Align token-hash sequences ``a`` and ``b``; None when they share no token.

    The LCS may string a real passage together with stray matches far from it; the blocks are
    cut wherever more than ``max_gap`` unmatched tokens separate two of them (in either text)
    and the part with the most matched tokens is kept. ``edge_gap``: a one-token block at
    either edge is then dropped when at least this many unmatched tokens separate it from the
    next block. ``min_score`` and ``min_matched``: see :func:`align_ints`.
    """
    found = align_ints(_as_ints(a), _as_ints(b), edge_gap, max_gap, min_score, min_matched)
    if found is None:
        return None
    a0, a1, b0, b1, matched, longest, score, blocks = found
    return Alignment(a0, a1, b0, b1, matched, longest, score, tuple(blocks))


#: What :func:`align_ints` finds: a start, a end, b start, b end, matched, longest run, score, blocks.
Found = tuple[int, int, int, int, int, int, float, list[tuple[int, int, int]]]


def align_ints(la: list[int], lb: list[int], edge_gap: int = 2, max_gap: int = 8,
               min_score: float = 0.0, min_matched: int = 0) -> Found | None:
    """:func:`align` on lists of int64 hashes, as a plain tuple: the verification aligns some hundred
    thousand short slices a case, where building arrays and a frozen dataclass per call cost more than
    the alignment itself.

    ``min_score``: when the kept part scores below it, the run of its blocks with the most matched
    tokens that reaches it (:func:`densest_part`) is kept instead, if it holds at least
    ``min_matched`` matched tokens; else the part as it is. A leaked passage that arrives damaged
    (words dropped or changed) is strung together with its damage and the text around it into one
    loose alignment that no score threshold admits; its intact core is the evidence. The core must
    be long enough to be evidence of its own: shorter cores let ordinary phrases in with the leaks
    (measured on the realistic scenario, see docs/evidence-model.md).
    """
    if not la or not lb:
        return None
    blocks = [(m.a, m.b, m.size) for m in LCSseq.opcodes(la, lb).as_matching_blocks() if m.size > 0]
    if not blocks:
        return None
    # The part with the most matched tokens (the first of equals: deterministic), parts cut where more
    # than max_gap unmatched tokens separate two blocks in either text.
    lo = best_lo = 0
    best_hi = len(blocks)
    best = -1
    prev = blocks[0]
    total = prev[2]
    for i in range(1, len(blocks)):
        cur = blocks[i]
        if cur[0] - (prev[0] + prev[2]) > max_gap or cur[1] - (prev[1] + prev[2]) > max_gap:
            if total > best:
                best, best_lo, best_hi = total, lo, i
            lo, total = i, 0
        total += cur[2]
        prev = cur
    if total > best:
        best_lo, best_hi = lo, len(blocks)
    if best_lo or best_hi < len(blocks):
        blocks = blocks[best_lo:best_hi]

    found = _summary(_trim_edges(blocks, edge_gap))
    if found[6] < min_score and len(blocks) > 1:
        part = densest_part(blocks, min_score)
        if part is not None:
            # Its edges trimmed as the part's were (a stray block beside a gap mostly lowers a score), unless
            # that left it under min_score (a low min_score or edge_gap can).
            core = _summary(_trim_edges(blocks[part[0]:part[1]], edge_gap))
            if core[6] < min_score:
                core = _summary(blocks[part[0]:part[1]])
            if core[4] >= min_matched:
                return core
    return found


def _trim_edges(blocks: list[tuple[int, int, int]], edge_gap: int) -> list[tuple[int, int, int]]:
    """Drop, in place, one-token blocks at either edge separated from the next by at least ``edge_gap``
    unmatched tokens (in either text); returns ``blocks``."""

    def isolated(x: tuple[int, int, int], y: tuple[int, int, int]) -> bool:
        # x and y are neighbouring blocks; is the gap between them wide enough to call x stray?
        lo, hi = (x, y) if x[0] < y[0] else (y, x)
        return max(hi[0] - (lo[0] + lo[2]), hi[1] - (lo[1] + lo[2])) >= edge_gap

    while len(blocks) > 1 and blocks[0][2] == 1 and isolated(blocks[0], blocks[1]):
        blocks.pop(0)
    while len(blocks) > 1 and blocks[-1][2] == 1 and isolated(blocks[-1], blocks[-2]):
        blocks.pop()
    return blocks


def _summary(blocks: list[tuple[int, int, int]]) -> Found:
    """What :func:`align_ints` returns for ``blocks`` (one or more, in order): span, counts, score."""
    a0, b0 = blocks[0][0], blocks[0][1]
    a1, b1 = blocks[-1][0] + blocks[-1][2], blocks[-1][1] + blocks[-1][2]
    matched = longest = 0
    for _, _, size in blocks:
        matched += size
        if size > longest:
            longest = size
    return a0, a1, b0, b1, matched, longest, 100.0 * 2 * matched / ((a1 - a0) + (b1 - b0)), blocks


def densest_part(blocks: list[tuple[int, int, int]], min_score: float) -> tuple[int, int] | None:
    """The run ``blocks[lo:hi]`` with the most matched tokens whose score reaches ``min_score`` (ties:
    the higher score, then the first); None when no run does (a single block scores 100).

    "Reaches" is exact: ``200 * matched >= min_score * span``, in rationals (``min_score`` as the
    binary fraction it is; a run that reaches it also passes a float comparison of its score). A run
    reaches it when ``g(lo) <= f(hi)``, integer functions of its first and last block; the first
    ``lo`` that does for a given ``hi`` is found by bisection over the running minimum of ``g``. So
    O(n log n) in the blocks, not quadratic: a customer's long revision of its own earlier document
    aligns as thousands of short blocks.
    """
    num, den = float(min_score).as_integer_ratio()  # exact, as Fraction(min_score) but cheaper
    scale = 200 * den  # reaches: scale * matched >= num * span
    before: list[int] = []  # matched tokens before each block
    neg_low: list[int] = []  # minus the running minimum of g: non-decreasing, for bisect
    best: tuple[int, float, int, int] | None = None
    total = 0
    for hi, (a, b, size) in enumerate(blocks):
        g = scale * total - num * (a + b)
        neg_low.append(max(-g, neg_low[-1]) if neg_low else -g)
        before.append(total)
        total += size
        f = scale * total - num * (a + size + b + size)
        lo = bisect.bisect_left(neg_low, -f)  # the first lo with min(g[:lo + 1]) <= f, that is g(lo) <= f
        if lo > hi:
            continue
        matched = total - before[lo]
        score = 100.0 * 2 * matched / ((a + size - blocks[lo][0]) + (b + size - blocks[lo][1]))
        if best is None or (matched, score, -lo) > (best[0], best[1], -best[2]):
            best = (matched, score, lo, hi + 1)
    return None if best is None else (best[2], best[3])
