"""The matcher's parameters (the case file's ``[match]`` section) and the tier rules.

By default (``tiering = "evalue"``) a finding's tier follows from how likely it is by chance
(``expected_by_chance_with_mechanism``: the E-value of the text's E-value, see ``chance.py``, times
the decode-node evidence's factor, see ``chance.with_mechanism``): ``confirmed`` E1: at most
confirm_evalue (0.0001); ``probable`` E2: at most probable_evalue (0.001); every other admissible
candidate goes to review, and so does one whose text alone is expected by chance more than
TEXT_EVALUE_CEILING (0.1) times, however close to the suspect its source ran, unless its source ran on the
suspect's decode node and its text is expected at most NODE_TEXT_EVALUE_CEILING (0.05) times among what that
node can have served. One exception, E3: a
suspect shown decoding from stale pages (the engine signature, or usage in the gateway's logs counting
the placeholder's one prompt token) holds some earlier request's text, so when none of its candidates
reaches a tier, its strongest one is ``probable`` up to unexplained_evalue (0.002) -- the question for
that response is whose text it holds, not whether it holds any (``findings.name_the_unexplained``).
``tiering = "rules"`` keeps the fixed rules below, for comparison (benchmarks/quality.py).

Fixed-rule tiers on findings (``possible`` belongs to suspects with no finding and is the report's):

``confirmed``  R1: score >= confirm_score, informative tokens >= confirm_tokens, rarity >= confirm_rarity.
``probable``   (all need rarity >= probable_rarity: a match that is mostly common text is none)
               R2: score >= probable_score, informative tokens >= min_tokens and an exact run of
               >= min_run tokens (short matches of ordinary phrases rarely hold 8 identical tokens);
               R2b: a damaged passage: score >= damaged_score, informative tokens >= confirm_tokens
               and rarity >= confirm_rarity;
               R3: the suspect carries the engine's own signature of the bug (its response was built
               from another request's pages), so a short match is enough: score >= probable_score,
               informative tokens >= k (one whole k-gram), at least k different tokens among the
               matched ones ("yet yet yet yet yet" or "from the rest of the" says nothing) and
               rarity >= signature_rarity.
               Anything weaker is not a finding.

*Informative* tokens are matched tokens not covered only by matched k-grams that are own context (in
the suspect's own prompt or, for another tenant's source, held by the recipient's tenant when it
sent the request) or common (held by more than ``max_tenants`` tenants when the suspect response
was produced).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from forensics import settings
from forensics.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class MatchParams:
    """Every knob of the matcher.

    Defaults were chosen by measurement: ``python benchmarks/match.py --sweep`` varies each
    threshold around its default on corpus-built cases and simulated incidents (recall by
    fragment length, pair precision, control false-positive rate); see the README.
    """

    k: int = 5  # tokens per k-gram
    min_tokens: int = 8  # informative matched tokens for a probable finding
    confirm_tokens: int = 12  # informative matched tokens for a confirmed finding
    confirm_score: float = 90.0
    probable_score: float = 70.0
    min_run: int = 8  # identical consecutive tokens a short (R2) finding must contain
    probable_rarity: float = 0.5  # a probable finding must not be mostly common text
    damaged_score: float = 85.0  # score for a long finding with no long exact run (R2b)
    signature_rarity: float = 0.75  # rarity for a short finding on an engine-signature suspect (R3)
    confirm_rarity: float = 0.5
    max_tenants: int = 2  # a k-gram held by more tenants than this is common text
    lookback_minutes: float = 0.0  # 0 = off: every earlier record is searched
    same_decode_node: bool = False  # search only records decoded on the suspect's decode node
    control_size: int = 200  # non-suspect responses matched as a false-positive control
    seed: int = 0  # chooses the control sample
    margin: int = 8  # tokens added on each side of a hit cluster before alignment
    gap: int = 16  # hits further apart than this (tokens) start a new cluster
    tiering: str = "evalue"  # "evalue": tiers from expected_by_chance; "rules": the fixed R1-R3 rules (comparison)
    confirm_evalue: float = 0.0001  # a finding expected by chance at most this often is confirmed
    probable_evalue: float = 0.001  # ... probable; weaker candidates go to review
    # E3: the strongest candidate of a suspect decoded from stale pages, with no finding, is probable up to this E
    unexplained_evalue: float = 0.002
    workers: int = 0  # processes for the streaming pass; 0 = one per core (not a result parameter)
    batch_rows: int = 16  # at least this many rows per streamed batch (more when rows are short)

    @property
    def lookback_us(self) -> int:
        """``lookback_minutes`` in microseconds (0: off), as the search and its size both take it."""
        return int(self.lookback_minutes * 60_000_000)

    def record(self) -> dict[str, Any]:
        """The parameters that determine results (for match.json and manifests)."""
        d = dataclasses.asdict(self)
        del d["workers"], d["batch_rows"]
        return d


#: Type and allowed range (inclusive) of every numeric key, from the settings table
#: (``forensics/settings.py``). The upper bounds lie far above any sensible value; they exist because
#: a typo such as ``k = 1e20`` or ``confirm_score = nan`` used to be accepted and silently empty the
#: notification list.
NUMERIC_BOUNDS: dict[str, tuple[type, int | float, int | float]] = {
    s.key: (int if s.kind == "int" else float, *s.bounds())
    for s in settings.section("match") if s.kind in ("int", "float")
}
_BOOL_KEYS = {s.key for s in settings.section("match") if s.kind == "bool"}
_CHOICE_KEYS = {s.key: s.choices for s in settings.section("match") if s.kind == "choice"}
KEYS = tuple(f.name for f in dataclasses.fields(MatchParams))


def params_from(section: dict[str, Any], overrides: dict[str, Any] | None = None, file: Any = None) -> MatchParams:
    """Parameters from a ``[match]`` section plus CLI overrides (``None`` values ignored).

    Every value is checked against its type and range; a bad one is a :class:`ConfigError`
    naming the key (or option), the value and what is allowed.
    """
    values: dict[str, Any] = {}
    for origin, data in (("[match]", section), ("option", overrides or {})):
        for key, value in data.items():
            if value is None:
                continue
            if key not in KEYS:
                raise ConfigError(
                    f"unknown key {key!r} in {origin}", file=file if origin == "[match]" else None,
                    fix=f"known [match] keys are: {', '.join(KEYS)} (a typo must not silently change the result)",
                )
            where = f"[match] {key}" if origin == "[match]" else "--" + key.replace("_", "-")
            values[key] = _check(key, value, where, file if origin == "[match]" else None)
    return MatchParams(**values)


def looser_confirm(p: MatchParams) -> str | None:
    """The warning for E-value thresholds that make ``confirmed`` the looser tier, or None. Accepted without a word,
    such a pair changed the list's tiers (a review); refused, a report made with it could no longer be verified."""
    if p.tiering != "evalue" or p.confirm_evalue <= p.probable_evalue:
        return None
    return (f"[match] confirm_evalue ({p.confirm_evalue:g}) is above probable_evalue ({p.probable_evalue:g}): a finding "
            "confirmed at that threshold is expected by chance more often than a probable one; confirm_evalue is meant "
            "to be the stricter, at most probable_evalue")


def allowed_range(key: str) -> str:
    """The allowed values of a numeric [match] key, in words (for error messages and docs)."""
    kind, lo, hi = NUMERIC_BOUNDS[key]
    if kind is int:
        return f"a whole number from {lo} to {hi}"
    return f"a number from {lo:g} to {hi:g} (not NaN or infinity)"


def _check(key: str, value: Any, where: str, file: Any) -> Any:
    default = getattr(MatchParams, key)
    if key in _CHOICE_KEYS:
        if value not in _CHOICE_KEYS[key]:
            raise ConfigError(f"{where} = {value!r} is not one of {', '.join(_CHOICE_KEYS[key])}", file=file,
                              fix=f'{key} = "{default}"')
        return value
    if key in _BOOL_KEYS:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} = {value!r} is not true or false", file=file, fix=f"{key} = false")
        return value
    kind, lo, hi = NUMERIC_BOUNDS[key]
    types = int if kind is int else int | float
    # NaN compares false with everything, so the range test refuses it as well as the infinities.
    if isinstance(value, bool) or not isinstance(value, types) or not lo <= value <= hi:
        raise ConfigError(f"{where} = {value!r} is not allowed: it must be {allowed_range(key)}", file=file,
                          fix=f"{key} = {default} (the default), or a value in that range")
    return float(value) if kind is float else value


def assign_tier(score: float, informative: int, rarity: float, longest_run: int, engine_signature: bool,
                p: MatchParams, distinct: int | None = None) -> tuple[str, str] | None:
    """The tier of a finding and the rule that set it, or None when it is not a finding.

    ``distinct``: how many different tokens the matched ones are (default: as many as informative).
    """
    distinct = informative if distinct is None else distinct
    if score >= p.confirm_score and informative >= p.confirm_tokens and rarity >= p.confirm_rarity:
        return "confirmed", (f"R1: score>={p.confirm_score:g}, informative_tokens>={p.confirm_tokens}, "
                             f"rarity>={p.confirm_rarity:g}")
    if rarity < p.probable_rarity:
        return None
    if score >= p.probable_score and informative >= p.min_tokens and longest_run >= p.min_run:
        return "probable", (f"R2: score>={p.probable_score:g}, informative_tokens>={p.min_tokens}, "
                            f"longest_run>={p.min_run}, rarity>={p.probable_rarity:g}")
    if score >= p.damaged_score and informative >= p.confirm_tokens and rarity >= p.confirm_rarity:
        return "probable", (f"R2b: damaged passage, score>={p.damaged_score:g}, informative_tokens>={p.confirm_tokens}, "
                            f"rarity>={p.confirm_rarity:g}")
    if (engine_signature and score >= p.probable_score and informative >= p.k and distinct >= p.k
            and rarity >= p.signature_rarity):
        return "probable", (f"R3: engine signature, score>={p.probable_score:g}, informative_tokens>={p.k}, "
                            f"distinct_tokens>={p.k}, rarity>={p.signature_rarity:g}")
    return None


def admissible(score: float, informative: int, distinct: int, p: MatchParams) -> bool:
    """Whether a verified region is a candidate at all (a finding or a review row): a close
    alignment (score >= probable_score) holding at least one whole informative k-gram of at
    least k different tokens. The same gate applies to the suspects and to the null."""
    return score >= p.probable_score and informative >= p.k and distinct >= p.k


#: A finding must rest on its text: with ``expected_by_chance`` above this the matched text is ordinary
#: enough to recur among unrelated texts of a search a tenth this size, and the decode-node evidence alone
#: does not put a customer on the list (it only corroborates). On seeds 1-3 of the realistic scenario the
#: pairs promoted above 0.1 by the mechanism alone were 3 false and 2 true; on seed 4, 1 false and none true.
#: Read over the whole search, the same passage grows ordinary as the case grows (24 realistic seeds merged,
#: 5,300 customers: 1,152 true pairs went to review for this alone): see NODE_TEXT_EVALUE_CEILING.
TEXT_EVALUE_CEILING = 0.1

#: The same question asked of a search held to what the suspect's decode node can have served (as ``[match]
#: same_decode_node`` holds it), where the candidate's source ran there: those records are the texts its stale
#: pages can hold, and the rest of the deployment -- other nodes, other customers -- does not make a passage
#: ordinary there. A candidate whose text passes either ceiling rests on its text; one that passes only this one
#: rests on the text and on where its source ran, not on when. Half TEXT_EVALUE_CEILING: swept over 0.033, 0.05
#: and 0.1 on seeds 1-3 of the realistic scenario and on 6 and 24 of its seeds merged (docs/evidence-model.md,
#: stop 57); 0.05 names no wrong customer on the single seeds (0.1 names one there).
NODE_TEXT_EVALUE_CEILING = 0.05


def text_stands(text_expected: float, on_node: float | None = None) -> bool:
    """Whether a candidate's text alone is rare enough to rest a finding on: its ``expected_by_chance`` at most
    TEXT_EVALUE_CEILING, or, where its source ran on the suspect's decode node, ``on_node`` (its E-value over a
    search of only what that node can have served) at most NODE_TEXT_EVALUE_CEILING."""
    return text_expected <= TEXT_EVALUE_CEILING or (on_node is not None and on_node <= NODE_TEXT_EVALUE_CEILING)


def evalue_tier(expected: float, rarity: float, p: MatchParams, singles_out: float | None = None,
                text_expected: float | None = None, prompt_hidden: bool = False,
                on_node: float | None = None) -> tuple[str, str] | str:
    """The tier of an admissible candidate from its E-value with the mechanism evidence
    (``expected_by_chance_with_mechanism``), and the rule that set it, or why it goes to review.

    ``text_expected``: the text's own ``expected_by_chance``; above :data:`TEXT_EVALUE_CEILING` the
    candidate goes to review whatever the decode-node evidence says, unless ``on_node`` (where the source ran on
    the suspect's decode node: the text's E-value over a search of what that node can have served, see
    ``findings.decide``) is at most :data:`NODE_TEXT_EVALUE_CEILING` (:func:`text_stands`).
    ``rarity`` weighs every matched k-gram (1 / the tenants holding it, 0 for common or own-context
    text); ``singles_out`` weighs only the informative ones, the part E counts (default: ``rarity``).
    Both must reach ``probable_rarity`` for ``probable``; for ``confirmed`` only ``singles_out``
    must: E counts only tokens no common k-gram explains, so at ``confirm_evalue`` that part names
    the source by itself, however much common text surrounds it, as long as few tenants held it.
    ``prompt_hidden``: only a truncated copy of the recipient's prompt was logged and nothing shows the
    model never saw it; the own-prompt check could not see its middle, so ``confirmed`` becomes ``probable``.
    """
    singles_out = rarity if singles_out is None else singles_out
    if text_expected is not None and not text_stands(text_expected, on_node):
        if on_node is None:
            return (f"expected_by_chance {_apart(text_expected, TEXT_EVALUE_CEILING)} > {TEXT_EVALUE_CEILING:g}: the text alone is what "
                    "unrelated texts share; the decode-node evidence corroborates a finding, it does not make one")
        return (f"expected_by_chance {_apart(text_expected, TEXT_EVALUE_CEILING)} > {TEXT_EVALUE_CEILING:g}, and "
                f"{_apart(on_node, NODE_TEXT_EVALUE_CEILING)} > {NODE_TEXT_EVALUE_CEILING:g} had the search covered only the "
                "records the suspect's decode node can have served: the text alone is what unrelated texts share, on that "
                "node too; how recently its source ran there does not make a finding")
    if expected <= p.confirm_evalue and singles_out >= p.probable_rarity:
        rule = f"E1: expected_by_chance_with_mechanism<={p.confirm_evalue:g}"
        if prompt_hidden:
            return "probable", (rule + "; probable, not confirmed: only a truncated copy of the recipient's prompt was "
                                "logged, so its own prompt may hold this passage in the part not kept, and nothing "
                                "shows the model never saw that prompt")
        return "confirmed", rule
    if rarity < p.probable_rarity:  # (singles_out >= rarity: a mean over the nonzero weights)
        return (f"mostly text other tenants also held (rarity {_apart(rarity, p.probable_rarity, '.2f')} < {p.probable_rarity:g}): "
                "the passage does not single out the source customer")
    if expected <= p.probable_evalue:
        return "probable", f"E2: expected_by_chance_with_mechanism<={p.probable_evalue:g}"
    return (f"expected_by_chance_with_mechanism {_apart(expected, p.probable_evalue)} > {p.probable_evalue:g}: a match this strong, with "
            "what the engine logs show of where its source ran, is expected among unrelated texts of a search this size")


def _apart(value: float, limit: float, fmt: str = ".3g") -> str:
    """``value`` as ``fmt`` shows it, or with as many more digits as it takes not to read as ``limit``
    itself: a reason such as "0.1 > 0.1" or "rarity 0.50 < 0.5" tells a reader nothing."""
    text = format(value, fmt)
    for digits in (6, 9, 17):
        if float(text) != limit:
            return text
        text = f"{value:.{digits}g}"
    return text if float(text) != limit else repr(value)
