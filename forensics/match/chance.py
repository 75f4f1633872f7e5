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
matches are left and by an exponential tail beyond (peaks over a threshold: the excess strengths
of the null's upper fifth are taken as exponential, the slope from their median). A finding's
``expected_by_chance`` (an E-value in the BLAST sense) is that rate times its own search size: how
many matches at least this strong a search of this size is expected to produce among unrelated
texts. A null also sees the suspects against texts that arrived after them (see ``match``).

The fitted slope is capped at one halving per bit. With fewer than :data:`MIN_NULL` chance
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


def weights_for(hashes: np.ndarray, vocab: np.ndarray, df: np.ndarray, n_texts: int) -> np.ndarray:
    """Bits per token of one target text: ``log2((N + PRIOR_TEXTS) / (1 + df_other))``, df_other
    excluding this text."""
    if len(hashes) == 0:
        return np.zeros(0, np.float64)
    idx = np.clip(np.searchsorted(vocab, hashes), 0, max(len(vocab) - 1, 0))
    known = vocab[idx] == hashes if len(vocab) else np.zeros(len(hashes), bool)
    other = np.where(known, df[idx] - 1, 0)
    return np.log2((max(n_texts, 1) + PRIOR_TEXTS) / (1.0 + other))


@dataclasses.dataclass
class NullModel:
    """Rate of chance matches at least as strong as ``s`` per unit of search."""

    size: int  # control responses searched
    search: float  # their total search size (see match: sqrt(k-gram positions x records searched))
    strengths: np.ndarray  # sorted strengths of the chance matches found among them
    threshold: float  # where the fitted tail starts (the strongest chance match)
    slope: float  # of the tail, per bit
    fallback: str | None = None

    @classmethod
    def fit(cls, strengths: Sequence[float], search: float, size: int) -> NullModel:
        """Fit the null on chance-match ``strengths`` found in a search of total size ``search``."""
        s = np.sort(np.asarray(strengths, dtype=np.float64))
        if len(s) < MIN_NULL:
            return cls(size, max(float(search), 1.0), s, 0.0, BIT,
                       f"{len(s)} chance matches in the null (< {MIN_NULL}): theoretical model, "
                       "one chance match per unit of search at 0 bits, halving with each bit")
        # The slope comes from the upper fifth of the null (peaks over a threshold): the tail is what
        # matters for the findings, and the bulk of weak chance matches must not set it. The median
        # excess (ln 2 / slope for an exponential) keeps one freak match from flattening it.
        u = float(np.quantile(s, TAIL_QUANTILE))
        excess = s[s >= u] - u
        median = float(np.median(excess)) if len(excess) else 0.0
        # Capped at one halving per bit: a steeper fall (many chance matches of one strength) would
        # promise fewer chance matches than the bits themselves justify.
        slope = min(BIT / median, BIT) if median > 1e-9 else BIT
        # Counted up to where TAIL_COUNT chance matches are left; beyond, the fitted tail, so a single
        # strongest match does not set a floor under every finding's E.
        return cls(size, max(float(search), 1.0), s, float(s[-min(TAIL_COUNT, len(s))]), slope, None)

    def rate(self, s: float) -> float:
        """Chance matches with strength >= ``s`` per unit of search."""
        if self.fallback is not None:
            return math.exp(-self.slope * max(s, 0.0))
        at = len(self.strengths) - int(np.searchsorted(self.strengths, min(s, self.threshold), side="left"))
        if s <= self.threshold:  # counted: the null's own survival function
            return at / self.search
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
                     "threshold); beyond it an exponential tail, rate(s) = rate(threshold) * exp(-slope * (s - "
                     "threshold)), the slope ln 2 / the median excess strength of the null's upper fifth (capped at "
                     "ln 2 per bit)",
            "threshold_bits": round(self.threshold, 4),
            "slope_per_bit": round(self.slope, 6),
            "rate_at_threshold": float(f"{self.rate(self.threshold):.6g}"),
            "fallback": self.fallback,
        }


def calibration(points: list[tuple[int, float, float]]) -> dict[str, Any]:
    """Observed against expected chance findings on the null, fitted on one half and scored on the other.

    ``points``: (control response number, strength, search size) of every chance match, and of
    every control response with none (strength NaN), so each half knows its search size. The two
    halves are the even and odd control numbers; each half's matches get E-values from the model
    fitted on the other half. A calibrated E-value gives, over n responses, about n x t matches
    with E <= t.
    """
    halves: list[tuple[list[float], float, int, list[tuple[float, float]]]] = []
    for parity in (0, 1):
        mine = [p for p in points if p[0] % 2 == parity]
        sizes: dict[int, float] = {}
        for c, _, m in mine:
            sizes[c] = m
        strengths = [s for _, s, _ in mine if not math.isnan(s)]
        halves.append((strengths, sum(sizes.values()), len(sizes), [(s, sizes[c]) for c, s, _ in mine if not math.isnan(s)]))
    rows = []
    evalues: list[float] = []
    responses = 0
    for me, other in ((0, 1), (1, 0)):
        strengths, search, size, matches = halves[other]
        model = NullModel.fit(strengths, search, size)
        responses += halves[me][2]
        evalues.extend(model.expected(s, m) for s, m in halves[me][3])
    for t in CALIBRATION_POINTS:
        observed = sum(1 for e in evalues if e <= t)
        expected = t * responses
        rows.append({"evalue_at_most": t, "expected": round(expected, 3), "observed": observed,
                     "ratio": round(observed / expected, 3) if expected else None})
    return {"method": "two-fold: the null split by control response, each half scored by the model fitted "
                      "on the other", "responses": responses, "points": rows}
