"""How likely a finding is by chance: an empirical null built from the case itself.

A finding's *strength* is the information its informative matched tokens carry: the sum, over
those tokens, of ``log2((N + 16) / (1 + df))`` where ``df`` is how many other target responses
(the suspects and the control sample, N in all) hold the token (16: see :data:`PRIOR_TEXTS`). "Would you like me to" carries a
few bits; a patient's name, an order number or a rare term carries many. A match of ordinary
words is weak evidence however few tenants happened to send it.

The *null* is what the same search finds where no leak can be: the control responses
(non-suspect, length-matched to the suspects) run through exactly the same steps as the
suspects, and the suspects against later texts. Every cross-tenant match there is a chance match. From their
strengths and the size of the search that produced them, :class:`NullModel` gives the rate of
chance matches at least as strong as ``s`` per unit of search (the square root of response k-gram
positions times records searched, see ``match.SIZE_EXPONENT``), counted up to where ten chance
matches are left and by a predicted tail beyond (peaks over a threshold: the excess strengths of
the null's upper fifth are taken as exponential, and the tail is the one those n excesses predict,
(1 + x / their sum) ** -n, heavier than any single fitted exponential because a slope set by a dozen
chance matches is itself uncertain). A finding's
``expected_by_chance`` (an E-value in the BLAST sense) is that rate times its own search size: how
many matches at least this strong a search of this size is expected to produce among unrelated
texts. A null also sees the suspects against texts that arrived after them (see ``match``).

The tail's slope is capped at one halving per bit; a null whose upper fifth holds fewer than :data:`MIN_TAIL`
chance matches predicts its tail from its :data:`MIN_TAIL` strongest. With fewer than :data:`MIN_NULL` chance
matches (a small case) nothing can be fitted; the model is then the theoretical one of local
alignment statistics (Karlin-Altschul, E = K m n e^(-lambda S)) with K = 1 and lambda = ln 2 for
strengths in bits: one chance match per unit of search at 0 bits, halving with each bit. The
model says so (``fallback``) and the report repeats it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

#: Chance matches needed to fit the tail (below: the theoretical slope, recorded as a fallback).
MIN_NULL = 10

#: One halving per bit: the slope of the theoretical model, and the steepest one fitted.
BIT = math.log(2.0)

#: The upper share of the null whose excess strengths set the tail's slope.
TAIL_QUANTILE = 0.8

#: Chance matches left above the threshold where counting gives way to the fitted tail.
TAIL_COUNT = 10

#: Excess strengths the tail is predicted from at least: a null of fewer than about 25 chance matches has
#: fewer in its upper fifth, and its tail is then predicted from its MIN_TAIL strongest. From two or three,
#: the predicted tail was nearly a power law (a 1,000-bit match got E = 1e-5 on a small incident); a
#: fixed halving per bit instead was far too light where the null's own tail is heavier (seven hundred
#: times the chance matches expected at E <= 0.001 on simulated nulls of 16-20).
MIN_TAIL = 5

#: E-value thresholds whose observed and expected chance counts are compared (calibration).
CALIBRATION_POINTS = (0.001, 0.01, 0.05, 0.1, 0.5, 1.0)


def token_weights(token_hashes: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted unique token hashes over ``token_hashes`` (one array per text) and their document counts."""
    uniq = [np.unique(h) for h in token_hashes]
    allh = np.concatenate(uniq) if uniq else np.zeros(0, np.uint64)
    vocab, df = np.unique(allh, return_counts=True)
    return vocab, df.astype(np.int64)


#: Texts assumed beside the targets when weighing tokens: in a case of a handful of responses
#: nothing says which words are common: a token held by no other target weighs log2(N + 16) bits
#: (at least 4); with hundreds of targets the 16 hardly matters.
PRIOR_TEXTS = 16


def others_holding(hashes: np.ndarray, vocab: np.ndarray, df: np.ndarray, n_texts: int) -> np.ndarray:
    """For each token of one target text, how many other target texts hold it (df_other): what its bits are read
    by from :func:`bits_by_others`. In the smallest unsigned type that holds ``n_texts``: every process that scores
    keeps it for each target, a quarter of the bits' own 8 bytes a token (on the 4 GB benchmark incident 13 MiB
    of each such process as bits)."""
    dtype = np.uint16 if n_texts <= 2**16 else np.uint32
    if len(hashes) == 0:
        return np.zeros(0, dtype)
    idx = np.clip(np.searchsorted(vocab, hashes), 0, max(len(vocab) - 1, 0))
    known = vocab[idx] == hashes if len(vocab) else np.zeros(len(hashes), bool)
    return np.where(known, df[idx] - 1, 0).astype(dtype)


def bits_by_others(n_texts: int) -> np.ndarray:
    """The bits a token of a target text weighs when ``d`` other target texts hold it, at index ``d`` (0 to N - 1):
    ``log2((N + PRIOR_TEXTS) / (1 + d))``."""
    return np.log2((max(n_texts, 1) + PRIOR_TEXTS) / (1.0 + np.arange(max(n_texts, 1))))


@dataclasses.dataclass
class NullModel:
    """Rate of chance matches at least as strong as ``s`` per unit of search."""

    size: int  # control responses searched
    search: float  # their total search size (see match: sqrt(k-gram positions x records searched))
    strengths: np.ndarray  # sorted strengths of the chance matches found among them
    threshold: float  # where the predicted tail starts (the TAIL_COUNT-th strongest chance match)
    slope: float  # of the tail at the threshold, per bit
    fallback: str | None = None
    excess_n: int = 0  # chance matches in the null's upper fifth (0: an exponential tail of ``slope``)
    scale: float = 0.0  # their summed excess strength over its base, plus the threshold's (bits)

    @classmethod
    def fit(cls, strengths: Sequence[float], search: float, size: int) -> NullModel:
        """Fit the null on chance-match ``strengths`` found in a search of total size ``search``."""
        s = np.sort(np.asarray(strengths, dtype=np.float64))
        if len(s) < MIN_NULL:
            return cls(size, max(float(search), 1.0), s, 0.0, BIT,
                       f"{len(s)} chance matches in the null (< {MIN_NULL}): theoretical model, "
                       "one chance match per unit of search at 0 bits, halving with each bit")
        # The tail comes from the upper fifth of the null (peaks over a threshold): the tail is what matters
        # for the findings, and the bulk of weak chance matches must not set it. Its excess strengths are
        # taken as exponential, and the tail is the one the n of them predict: with a flat prior on the rate,
        # P(excess > x) = (1 + x / sum of excesses) ** -n (a Lomax, heavier than the exponential fitted to
        # the same points), because a slope set by a dozen chance matches is itself uncertain, and a slope
        # guessed too steep promises strong findings too few chance rivals. Before, the slope came from
        # the median excess: on the realistic scenario (seeds 1-7) the held-out null then had 27 chance
        # matches at E <= 0.001 where 3.4 were expected; now 5 (benchmarks/quality.py).
        u = float(np.quantile(s, TAIL_QUANTILE))
        if int(np.sum(s >= u)) < MIN_TAIL:
            u = float(s[-MIN_TAIL])
        excess = s[s >= u] - u
        # Counted up to where TAIL_COUNT chance matches are left; beyond, the predicted tail, so a single
        # strongest match does not set a floor under every finding's E.
        threshold = float(s[-min(TAIL_COUNT, len(s))])
        scale = float(np.sum(excess)) + threshold - u
        slope = len(excess) / scale if scale > 1e-9 else math.inf
        if slope >= BIT:
            # Capped at one halving per bit: a steeper fall (many chance matches of one strength) would
            # promise fewer chance matches than the bits themselves justify.
            return cls(size, max(float(search), 1.0), s, threshold, BIT, None)
        return cls(size, max(float(search), 1.0), s, threshold, slope, None, len(excess), scale)

    def rate(self, s: float) -> float:
        """Chance matches with strength >= ``s`` per unit of search."""
        if self.fallback is not None:
            return math.exp(-self.slope * max(s, 0.0))
        at = len(self.strengths) - int(np.searchsorted(self.strengths, min(s, self.threshold), side="left"))
        if s <= self.threshold:  # counted: the null's own survival function
            return at / self.search
        if self.excess_n:  # the predicted tail
            return at / self.search * (self.scale / (self.scale + s - self.threshold)) ** self.excess_n
        return at / self.search * math.exp(-self.slope * (s - self.threshold))

    def expected(self, s: float, search: float) -> float:
        """E-value: chance matches at least as strong as ``s`` expected in a search of size ``search``."""
        return self.rate(s) * max(search, 0.0)

    def record(self) -> dict[str, Any]:
        """The fitted model for match.json."""
        return {
            "null_searches": self.size,
            "search_size": round(self.search, 1),
            "chance_matches": int(len(self.strengths)),
            "model": f"the null's own survival function up to where {TAIL_COUNT} chance matches are left (the "
                     "threshold); beyond it the tail the n chance matches of the null's upper fifth predict when "
                     "their excess strengths are exponential: rate(s) = rate(threshold) * (scale / (scale + s - "
                     "threshold)) ** n, scale = their summed excess + the threshold's (slope at the threshold n / "
                     "scale; above ln 2 per bit, an exponential tail of ln 2 per bit)",
            "tail_matches": self.excess_n,
            "tail_scale_bits": round(self.scale, 4),
            "threshold_bits": round(self.threshold, 4),
            "slope_per_bit": round(self.slope, 6),
            "rate_at_threshold": float(f"{self.rate(self.threshold):.6g}"),
            "fallback": self.fallback,
        }


def with_mechanism(product: float, share: float, chance_candidates: float, node_records: int) -> float:
    """E-value of a candidate ranked by ``product`` = expected_by_chance x mechanism_factor.

    A product of two chances is not itself a chance: among many weak chance candidates, some land on
    the suspect's decode node just before it by luck, and their small factor pulls their product down
    (the reason Fisher's method does not multiply p-values). This counts what the search expects:
    chance candidates arrive with E-values spread evenly over [0, C] (C = ``chance_candidates``, the
    admissible chance candidates expected in the search); one ran on the suspect's node with
    probability s = ``share``, and there its factor (records since it on that node / the n =
    ``node_records`` records the node served before the suspect) is uniform on [1/n, 1]; elsewhere its
    factor is 1 / s. The expected number with a product at most t is

        s * (min(t, C) + t * ln(max(1, min(C / t, n)))) + (1 - s) * min(t * s, C)

    For a source just before the suspect on its node this is far below the text's own E-value; for
    a source elsewhere, several times above it. With ``share`` 0 the engine logs say nothing about
    the suspect and the text's E-value stands.
    """
    t = max(product, 0.0)
    if not 0.0 < share <= 1.0:
        return t
    c = max(chance_candidates, 0.0)
    spread = math.log(max(1.0, min(c / t, float(max(node_records, 1))))) if t > 0.0 else 0.0
    return share * (min(t, c) + t * spread) + (1.0 - share) * min(t * share, c)


#: Share of the error budget the recent-occupant test gets when it runs (``recent.py``); the product test
#: (:func:`with_mechanism`) keeps the rest. Compared on seeds 1-3 of the realistic scenario: 0.5, 0.33 and
#: 0.25 (pair precision 0.979, 0.980, 0.983; recall 0.886, 0.879, 0.873).
WINDOW_SHARE = 0.25


def either_test(product: float, window: float) -> float:
    """E-value of passing either test, the product test's E-value ``product`` or the window test's
    ``window`` (weighted Bonferroni: chance candidates passing either at a threshold t number at most
    (1 - WINDOW_SHARE) t + WINDOW_SHARE t = t)."""
    return min(product / (1.0 - WINDOW_SHARE), window / WINDOW_SHARE)


Point = tuple[int, float, float] | tuple[int, float, float, float, float, int] | tuple[
    int, float, float, float, float, int, float | None]


def calibration(points: Sequence[Point], scored: Sequence[Point] | None = None, window_alone: bool = False) -> dict[str, Any]:
    """Observed against expected chance findings on the null, fitted on one half and scored on the other.

    ``points``: (control response number, strength, search size) of every chance match, and of
    every control response with none (strength NaN), so each half knows its search size. The two
    halves are the even and odd control numbers; each half's matches get E-values from the model
    fitted on the other half. A calibrated E-value gives, over n responses, about n x t matches
    with E <= t, as long as t is below the E-value of a search's weakest possible match (all the chance
    matches that search is expected to make): each response counts min(t, that) in ``expected``.

    ``scored`` (default: ``points``): the matches counted, numbered as in ``points``, each scored by the
    model fitted on the other half of ``points``: the model the findings get, fitted on the whole null,
    checked on a part of it (the control responses). Fitting on that part alone would check a model fitted
    on a third of the chance matches, which no finding gets.

    Scored points may carry three more figures, the match's mechanism factor, its node's share and the
    records that node served before (see
    :func:`with_mechanism`; share 0: no decode-node evidence); then each row also counts the chance
    matches whose E-value with the mechanism is at most t (``observed_with_mechanism``): the figure
    the tiers use, checked on matches known to be chance. A seventh figure, when given, is the
    recent-occupant window's share of the records searched (``recent.py``; 0: the source lies
    outside the window, None: that test did not run); the E-value with the mechanism is then that
    of the two tests together. ``window_alone``: the window is the only evidence beside the text (gateway logs
    only: no share, no factor), and is checked as the decode-node evidence is.
    """
    scored = points if scored is None else scored
    models = []
    for parity in (0, 1):
        mine = [p for p in points if p[0] % 2 == parity]
        sizes: dict[int, float] = {pt[0]: pt[2] for pt in mine}
        models.append(NullModel.fit([pt[1] for pt in mine if not math.isnan(pt[1])], sum(sizes.values()), len(sizes)))
    rows = []
    evalues: list[float] = []
    combined: list[float] = []
    sizes_scored: dict[int, float] = {pt[0]: pt[2] for pt in scored}
    responses = len(sizes_scored)
    # The most chance matches each search can be expected to make, whatever their strength: the E-value
    # of the weakest one. Above it a threshold t adds nothing, so a search contributes min(t, that) to the
    # count expected at E <= t, not t (t x responses overstated it once t passed the E-values the model
    # can give, by 2.5-4x at E <= 1 on the realistic scenario).
    ceilings = [models[1 - r % 2].expected(-math.inf, size) for r, size in sorted(sizes_scored.items())]
    for pt in scored:
        if math.isnan(pt[1]):
            continue
        model = models[1 - pt[0] % 2]  # fitted on the other half
        factor, share, node_records = (pt[3], pt[4], pt[5]) if len(pt) >= 6 else (1.0, 0.0, 0)
        window = pt[6] if len(pt) == 7 else None
        e = model.expected(pt[1], pt[2])
        evalues.append(e)
        product = with_mechanism(e * factor, share, model.expected(-math.inf, pt[2]), node_records)
        if window is not None:  # the recent-occupant test ran too (recent.combine)
            product = either_test(product, e * window if window > 0 else math.inf)
        combined.append(product)
    # The decode-node evidence, or the recent-occupant test alone (gateway logs only: no node, no factor).
    mechanism = any(len(pt) >= 6 and (pt[4] > 0 or (window_alone and len(pt) == 7 and pt[6] is not None))
                    for pt in scored)
    for t in CALIBRATION_POINTS:
        observed = sum(1 for e in evalues if e <= t)
        expected = sum(min(t, c) for c in ceilings)
        row: dict[str, Any] = {"evalue_at_most": t, "expected": round(expected, 3), "observed": observed,
                               "ratio": round(observed / expected, 3) if expected else None}
        if mechanism:
            row["observed_with_mechanism"] = sum(1 for e in combined if e <= t)
        rows.append(row)
    return {"method": "two-fold: the null split by control response, each half scored by the model fitted "
                      "on the other; expected at E <= t: per search, min(t, the chance matches it is expected to "
                      "make in all)", "responses": responses, "points": rows}
