"""The evidence model: E-values from the case's own null, explain-away, decode-node evidence,
every passage of a pair, the review queue and findings on damaged data (issue: the notification
list must be right on realistic traffic)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from match_helpers import at, config, exchange, make_case

from forensics.config import CaseConfig
from forensics.errors import ConfigError
from forensics.lab.cases import suspect_rows, write_case
from forensics.match import match
from forensics.match.chance import MIN_NULL, NullModel, calibration, with_mechanism
from forensics.match.tiers import MatchParams, evalue_tier

VOCAB = [f"w{i:04d}x" for i in range(5000)]


def words(rng: np.random.Generator, n: int) -> list[str]:
    return [VOCAB[i] for i in rng.integers(0, len(VOCAB), size=n)]


def test_null_model_follows_the_null_and_falls_back_when_sparse() -> None:
    rng = np.random.default_rng(1)
    strengths = 10 + rng.exponential(5.0, size=400)  # chance matches: exponential excess above 10 bits
    model = NullModel.fit(strengths, search=1e6, size=200)
    assert model.fallback is None
    # Empirical below the threshold: the share of the null at least that strong, per unit of search.
    assert model.rate(10.0) == pytest.approx(400 / 1e6)
    # The fitted tail: slope near 1/5 per bit, and E falls as strength grows.
    assert model.slope == pytest.approx(0.2, rel=0.2)
    es = [model.expected(s, 1e4) for s in (12, 20, 30, 60, 120)]
    assert es == sorted(es, reverse=True) and es[-1] < 1e-3
    # Counted up to where ten chance matches are left, the fitted tail beyond.
    assert model.threshold == pytest.approx(sorted(strengths)[-10])
    assert model.rate(model.threshold) == pytest.approx(10 / 1e6)
    # One chance match far out does not floor every E under it (the counted part stops ten matches from
    # the top); it is evidence of a heavier tail, so it may flatten the slope, never steepen it.
    freak = NullModel.fit(list(strengths) + [900.0], search=1e6, size=200)
    assert freak.threshold == pytest.approx(model.threshold, rel=0.05)
    assert freak.slope <= model.slope
    assert freak.expected(200.0, 1e4) < 1e-3
    sparse = NullModel.fit([3.0] * (MIN_NULL - 1), search=1e6, size=200)
    assert sparse.fallback and sparse.rate(10.0) == pytest.approx(2.0 ** -10)


def test_a_sparse_null_predicts_its_tail_from_its_five_strongest_chance_matches() -> None:
    """A null of a dozen chance matches has two or three in its upper fifth: a tail predicted from them is
    nearly a power law (a Lomax of n = 2), which gave a 1,000-bit match E = 1e-5 on a small split-log
    incident and sent true findings to review. Its tail comes from its MIN_TAIL strongest instead; a
    fixed halving per bit, tried first, promised far too few chance matches where the null's tail is
    heavier (see the next test)."""
    model = NullModel.fit([10, 11, 12, 12, 13, 14, 15, 16, 18, 25, 31, 40], 1000.0, 200)
    assert model.excess_n == 5
    assert model.expected(1000.0, 1000.0) < 1e-5
    assert 0.5 < model.expected(40.0, 1000.0) < 2.0  # its own strongest chance match: about once per such search
    assert model.expected(12.0, 1000.0) == pytest.approx(10.0)  # at the threshold: counted, as before


@pytest.mark.parametrize("size", [12, 16, 20])
def test_a_sparse_null_with_a_heavy_tail_is_not_made_to_promise_too_few_chance_matches(size: int) -> None:
    """Nulls of 12-20 chance matches drawn from a heavy tail (10 bits plus an exponential of one fifth per
    bit), each scored on fresh searches of the same size. So few chance matches cannot place a tail well:
    at E <= 0.05 about 0.5 per search are seen (0.3-0.7 with the tail predicted from the upper fifth's two
    to four, before). A tail forced to halve per bit, tried first, gave about 2 per search on nulls of
    16-20: it is held below 1."""
    rng = np.random.default_rng(size)
    seen = 0.0
    trials = 300
    for _ in range(trials):
        model = NullModel.fit(10 + rng.exponential(5.0, size), 1000.0, 200)
        fresh = 10 + rng.exponential(5.0, size)  # another search of the same size: chance matches alike
        seen += sum(1 for x in fresh if model.expected(float(x), 1000.0) <= 0.05)
    assert seen / trials < 1.0, seen / trials


def test_calibration_on_a_null_with_an_exponential_tail_is_within_a_factor_two() -> None:
    rng = np.random.default_rng(2)
    points = []
    for c in range(1000):  # 1000 control responses, each searched with size 1e4
        for _ in range(rng.poisson(0.5)):
            points.append((c, float(8 + rng.exponential(4.0)), 1e4))
        points.append((c, math.nan, 1e4))
    calib = calibration(points)
    for row in calib["points"]:
        if 0.01 <= row["evalue_at_most"] <= 0.5:
            assert 0.5 <= row["ratio"] <= 2.0, row


def test_calibration_expects_no_more_chance_matches_than_a_search_can_make() -> None:
    # 1000 searches of size 1e4 with 0.2 chance matches each on average: the weakest match of a search is
    # expected 0.2 times, so no E-value exceeds about 0.2, and at E <= 0.5 or E <= 1 every one of the ~200
    # chance matches is counted. Expecting t x 1000 there (500, 1000) made a calibrated model look 2.5-5x
    # conservative; each search can contribute at most the chance matches it expects in all.
    rng = np.random.default_rng(5)
    points = []
    for c in range(1000):
        for _ in range(rng.poisson(0.2)):
            points.append((c, float(8 + rng.exponential(4.0)), 1e4))
        points.append((c, math.nan, 1e4))
    rows = calibration(points)["points"]
    for row in rows:
        if row["evalue_at_most"] >= 0.05:  # 50 or more expected: a factor of 2 is not chance
            assert 0.5 <= row["ratio"] <= 2.0, row
    top = rows[-1]
    assert top["evalue_at_most"] == 1.0
    assert top["expected"] == pytest.approx(top["observed"], rel=0.2)


def _small_null(rng: np.random.Generator, responses: int, rate: float, long_share: float = 0.0) -> list[tuple[int, float, float]]:
    """A case-sized null: ``responses`` searches of size 1e4, Poisson(``rate``) chance matches each, excess
    strengths over 8 bits exponential (mean 5), or, for a ``long_share`` of them, a long stock passage
    (mean 12 over a bulk of mean 3): heavier-tailed than any one exponential."""
    points: list[tuple[int, float, float]] = []
    for c in range(responses):
        for _ in range(rng.poisson(rate)):
            mean = 5.0 if not long_share else 12.0 if rng.random() < long_share else 3.0
            points.append((c, float(8 + rng.exponential(mean)), 1e4))
        points.append((c, math.nan, 1e4))
    return points


@pytest.mark.parametrize(("long_share", "within"), [(0.0, 2.0), (0.15, 3.0)])
def test_calibration_of_the_strongest_chance_matches_on_case_sized_nulls(long_share: float, within: float) -> None:
    # The realistic scenario's null is small (about 120 chance matches over 480 searches), so the tail
    # beyond the tenth strongest rests on a dozen matches. Pooled over 60 such cases, the held-out count
    # at E <= 0.001 must stay near its expectation. The median-excess slope gave 2.4x (exponential) and
    # 6.5x (with long passages): a slope guessed from a dozen points, taken as exact, is too often too steep.
    rng = np.random.default_rng(7)
    observed = expected = 0.0
    for _ in range(60):
        row = calibration(_small_null(rng, 480, 0.25, long_share))["points"][0]
        assert row["evalue_at_most"] == 0.001
        observed += row["observed"]
        expected += row["expected"]
    assert observed <= within * expected, (observed, expected)


def test_the_controls_are_checked_with_the_model_fitted_on_the_whole_null() -> None:
    # The findings' E-values come from a model fitted on the whole null (controls and suspects against
    # later texts), so the check on the controls must score them with it. Fitted on the controls' few
    # chance matches alone (about 15 per half), it saw 75 where 8 were expected at E <= 0.001.
    rng = np.random.default_rng(8)
    observed: dict[float, int] = {}
    expected: dict[float, float] = {}
    for _ in range(40):
        null = _small_null(rng, 500, 0.15)
        controls = [(*pt, 1.0, 0.0, 0) for pt in null if pt[0] < 200]
        table = calibration(null, controls)
        assert table["responses"] == 200
        for row in table["points"][:4]:
            observed[row["evalue_at_most"]] = observed.get(row["evalue_at_most"], 0) + row["observed"]
            expected[row["evalue_at_most"]] = expected.get(row["evalue_at_most"], 0.0) + row["expected"]
    for t in (0.001, 0.01, 0.05, 0.1):
        assert 0.5 * expected[t] <= observed[t] <= 2.0 * expected[t], (t, observed[t], expected[t])


def test_the_mechanism_evalue_counts_the_chance_candidates_a_product_lets_through() -> None:
    # Chance candidates of many searches: C per search on average, E-values even on [0, C]; a share s
    # ran on the suspect's node (factor k / n, k uniform on 1..n), the rest elsewhere (factor 1 / s).
    rng = np.random.default_rng(3)
    searches, c, s, n = 400_000, 4.0, 0.25, 300
    total = rng.poisson(c * searches)
    e = rng.uniform(0.0, c, size=total)
    same = rng.random(total) < s
    factor = np.where(same, rng.integers(1, n + 1, size=total) / n, 1.0 / s)
    product = e * factor
    for t in (0.0005, 0.002, 0.01, 0.05):
        observed = float((product <= t).sum()) / searches
        assert with_mechanism(t, s, c, n) == pytest.approx(observed, rel=0.15), t
        # Taking the product itself for the E-value would promise fewer than there are.
        assert observed > 1.3 * t
    # A source just before the suspect on its node lowers the text's E-value; one elsewhere raises it;
    # without decode-node evidence (share 0) the text's E-value stands.
    text_e = 1e-3
    assert with_mechanism(text_e * 1 / n, s, c, n) < text_e < with_mechanism(text_e / s, s, c, n)
    assert with_mechanism(text_e, 0.0, c, n) == text_e


def test_a_rare_passage_between_two_common_phrases_is_evidence(tmp_path: Path) -> None:
    # "EUR 756,595.48 is due to IBAN" (matched as the words EUR 756 595 48 is due to IBAN): the amount is
    # the customer's; "48 is due to IBAN" is common (three other customers wrote amounts ending in 48).
    # The k-grams holding the amount are the source's alone, so their tokens count even where a common
    # k-gram overlaps them: all but IBAN.
    rng = np.random.default_rng(8)
    others = [exchange(f"o{i}", f"t{i}", -30 + i,
                       prompt=f"{words_text(rng, 20)} Payment of EUR {100 + i},{200 + i}.48 is due to IBAN GB{i}X "
                              f"{words_text(rng, 20)}") for i in range(3)]
    source = exchange("a1", "acme", 0, prompt=f"{words_text(rng, 30)} Payment of EUR 756,595.48 is due to IBAN "
                                              f"GB85SLKK {words_text(rng, 30)}")
    suspect = exchange("b1", "bolt", 5, prompt="q",
                       response=f"{words_text(rng, 12)} EUR 756,595.48 is due to IBAN {words_text(rng, 12)}")
    case = make_case(tmp_path / "case", others + [source, suspect], ["b1"])
    res = match(case, config())
    found = [f for f in res.findings + _review(case) if f["source_tenant_id"] == "acme"]
    assert found, "the amount shared only with acme is no candidate"
    assert int(found[0]["informative_tokens"]) >= 7


def test_the_rarity_gate_holds_back_probable_findings_only() -> None:
    # E counts only tokens no common k-gram explains: at the confirmed level that part singles out the
    # source by itself, however much common text surrounds it (a 133-token leak with half its k-grams
    # also held by one other customer was sent to review on the realistic scenario).
    p = MatchParams()
    # Half the k-grams common, the rest held by the source alone: confirmed.
    assert evalue_tier(1e-20, 0.45, p, singles_out=0.9) == (
        "confirmed", f"E1: expected_by_chance_with_mechanism<={p.confirm_evalue:g}")
    # Text six tenants held (max_tenants raised to 6) names no source, however strong.
    assert isinstance(evalue_tier(1e-20, 1 / 6, p, singles_out=1 / 6), str)
    held_back = evalue_tier(5e-4, 0.45, p, singles_out=0.9)
    assert isinstance(held_back, str) and held_back.startswith("mostly text other tenants also held")
    assert evalue_tier(5e-4, 0.6, p)[0] == "probable"


def _template(name: str, bp: str, hr: str, extra: list[str]) -> str:
    return (f"Patient {name} seen today. Vitals: BP {bp}, HR {hr}, SpO2 97%. Assessment: stable, "
            f"continue the plan and review in two weeks. {' '.join(extra)}")


def test_a_weaker_likeness_of_another_customer_is_explained_by_the_leaked_source(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    leaked = _template("Zorblax Quintrell", "139/64", "119", words(rng, 12))
    similar = _template("Mirela Vantongeren", "99/64", "119", words(rng, 12))  # same form, other values
    rows = [
        exchange("a1", "acme", 0, prompt=words_text(rng, 40) + " " + leaked),
        exchange("c1", "cato", 1, prompt=words_text(rng, 40) + " " + similar),
        exchange("b1", "bolt", 5, prompt="q", response=words_text(rng, 20) + " " + leaked + " " + words_text(rng, 20)),
    ]
    case = make_case(tmp_path / "case", rows, ["b1"])
    result = match(case, config())
    assert {f["source_tenant_id"] for f in result.cross_tenant} == {"acme"}
    review = list(csv.DictReader((case / "review.csv").open()))
    cato = [r for r in review if r["source_tenant_id"] == "cato"]
    assert cato and "more strongly" in cato[0]["why_not_notified"]
    # The fixed rules name both customers: the defect this guards against.
    old = match(case, config(tiering="rules"))
    assert {f["source_tenant_id"] for f in old.cross_tenant} == {"acme", "cato"}


def words_text(rng: np.random.Generator, n: int) -> str:
    return " ".join(words(rng, n))


def test_every_passage_of_a_pair_is_listed_and_adjacent_ones_merge(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    doc = words(rng, 300)
    p1, p2 = " ".join(doc[20:40]), " ".join(doc[200:230])
    response = f"{words_text(rng, 15)} {p1} {words_text(rng, 25)} {p2} {words_text(rng, 15)}"
    rows = [exchange("a1", "acme", 0, prompt=" ".join(doc)), exchange("b1", "bolt", 5, prompt="q", response=response)]
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    (f,) = result.cross_tenant
    spans = [tuple(int(x) for x in part.replace("=", ":").split(":")) for part in f["passages"].split(";")]
    assert len(spans) == 2
    prompt = " ".join(doc)
    assert {response[a:b] for a, b, _, _ in spans} == {p1, p2}
    assert {prompt[c:d] for _, _, c, d in spans} == {p1, p2}
    # Two passages separated by one damaged word are one span.
    near = f"{words_text(rng, 15)} {' '.join(doc[20:40])} qqqq {' '.join(doc[41:60])} {words_text(rng, 15)}"
    rows = [exchange("a1", "acme", 0, prompt=" ".join(doc)), exchange("b1", "bolt", 5, prompt="q", response=near)]
    (g,) = match(make_case(tmp_path / "case2", rows, ["b1"]), config()).cross_tenant
    assert ";" not in g["passages"]


def test_decode_node_evidence_is_recorded_and_moves_the_evalue(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    doc = words(rng, 200)
    frag = " ".join(doc[50:60])
    # Traffic on every node before the source, so a source just before the suspect is a recent one.
    others = [exchange(f"o{i}", f"t{i}", -600 + i, prompt=words_text(rng, 30), response=words_text(rng, 20),
                       decode_node=f"decode-{i % 4}") for i in range(400)]

    response = f"{words_text(rng, 10)} {frag} {words_text(rng, 10)}"

    def run(src_node: str | None, name: str, model: str = "glm-5.3", status: str = "success") -> dict:
        rows = others + [
            exchange("a1", "acme", 0, prompt=" ".join(doc), decode_node=src_node, model=model, status=status),
            exchange("b1", "bolt", 5, prompt="q", response=response, decode_node="decode-1"),
        ]
        res = match(make_case(tmp_path / name, rows, ["b1"]), config())
        found = [f for f in res.findings + _review(tmp_path / name) if f["source_request_id"] == "a1"]
        return {"row": found[0], "report": res.report}

    same, other, none = run("decode-1", "same"), run("decode-2", "other"), run(None, "none")
    another_model = run(None, "another_model", model="qwen3-235b-a22b")
    failed = run(None, "failed", status="failure")
    assert same["row"]["same_decode_node"] in (True, "true") and same["row"]["source_decode_node"] == "decode-1"
    assert other["row"]["same_decode_node"] in (False, "false")
    assert none["row"]["same_decode_node"] in (None, "")
    # The text evidence is the same; the mechanism moves the combined figure: a recent source on the
    # suspect's node (1 of its 100 records before) lowers it, one elsewhere (or on no node: another model's
    # request) raises it. (Sources elsewhere are in review: their figures are read from review.csv, rounded.)
    runs = {"same": same, "other": other, "none": none, "another_model": another_model, "failed": failed}
    text = {float(x["row"]["expected_by_chance"]) for x in runs.values()}
    assert max(text) == pytest.approx(min(text), rel=5e-3)
    e = {name: float(x["row"]["expected_by_chance_with_mechanism"]) for name, x in runs.items()}
    factor = {name: float(x["row"]["mechanism_factor"]) for name, x in runs.items()}
    assert e["same"] < min(text) <= max(text) < e["other"]
    assert factor["same"] < 1 < factor["other"]
    assert factor["another_model"] == pytest.approx(factor["other"], rel=0.05)  # shares differ by the one record
    assert e["another_model"] > max(text)
    # A source of the suspect's own model that the engine logs place on no node is a gap in them: it says nothing
    # of where the source ran, and the text alone decides (read as "elsewhere", it made a leak weaker than a case
    # with no engine logs at all).
    assert factor["none"] == 1.0
    assert e["none"] == pytest.approx(float(none["row"]["expected_by_chance"]), rel=5e-3)
    # Not a call the gateway logged as failed: most never reached an engine (a review found every source the gap rule
    # first took on seeds 1-6 to be one, and one of them named on the list).
    assert factor["failed"] == pytest.approx(factor["other"], rel=0.05)
    assert int(same["row"]["records_since_source_on_node"]) >= 1
    assert same["report"]["null"]["decode_node_evidence"].startswith("present")
    # The figure the tiers use is checked on the control responses too, with their own node evidence.
    table = same["report"]["null"]["calibration_of_controls_with_mechanism"]
    assert table["points"] and all("observed_with_mechanism" in row for row in table["points"])


def test_gateway_only_case_says_the_mechanism_evidence_is_absent(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    doc = words(rng, 100)
    rows = [exchange("a1", "acme", 0, prompt=" ".join(doc)),
            exchange("b1", "bolt", 5, prompt="q", response=" ".join(doc[10:40]))]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert res.report["null"]["decode_node_evidence"].startswith("absent")
    (f,) = res.cross_tenant
    assert f["same_decode_node"] is None and f["mechanism_factor"] == 1.0
    assert f["expected_by_chance_with_mechanism"] == f["expected_by_chance"]


def _review(case: Path) -> list[dict]:
    return list(csv.DictReader((case / "review.csv").open()))


def test_a_finding_on_damaged_input_says_so(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    doc = words(rng, 100)
    rows = [exchange("a1", "acme", 0, prompt=" ".join(doc), damage="truncated_file"),
            exchange("b1", "bolt", 5, prompt="q", response=" ".join(doc[10:40]))]
    case = make_case(tmp_path / "case", rows, ["b1"])
    res = match(case, config())
    (f,) = res.cross_tenant
    assert f["source_damage"] == "truncated_file" and f["recipient_damage"] is None
    assert json.loads((case / "match.json").read_text())["damage"]["findings_on_damaged_data"] == [f["finding_id"]]


@pytest.mark.parametrize(("usage", "signature", "tier"), [(15000, False, "probable"), (1, False, "confirmed"),
                                                          (15000, True, "confirmed")])
def test_a_suspect_known_only_by_a_truncated_prompt_copy_is_not_certain_unless_its_prompt_went_unseen(
        tmp_path: Path, usage: int, signature: bool, tier: str) -> None:
    """bolt's prompt survives only as LiteLLM's truncated spend-log string: its hidden middle may hold the
    passage its answer repeats, and the recipient's own prompt then explains it. Unless the engine's
    signature or the placeholder's one-token usage shows the model never saw that prompt, a finding is not
    certain (``confirmed``): it is ``probable``, and says why. Before, it was confirmed ("We are certain")."""
    rng = np.random.default_rng(11)
    doc = words(rng, 100)
    rows = [exchange("a1", "acme", 0, prompt=" ".join(doc)),
            exchange("b1", "bolt", 5, prompt="Summarise ... (litellm_truncated skipped 40000 chars) ... thanks",
                     response=" ".join(doc[10:60]), prompt_truncated=True, reported_prompt_tokens=usage,
                     damage="truncated_copy_only")]
    case = make_case(tmp_path / "case", rows, ["b1"], engine_signature=("b1",) if signature else ())
    (f,) = match(case, config()).cross_tenant
    assert (f["source_tenant_id"], f["tier"]) == ("acme", tier)
    assert f["recipient_damage"] == "truncated_copy_only"
    if tier == "probable":
        assert f["tier_rule"].startswith("E1") and "truncated" in f["tier_rule"] and "own prompt" in f["tier_rule"]


def test_a_customer_resending_a_leaked_answer_is_not_named_for_the_text_it_was_leaked(tmp_path: Path) -> None:
    """acme sent a secret; cyberdyne's suspect answer leaked it; cyberdyne's chat client resent that answer
    in its next request, as chat clients do; globex's later suspect answer holds the secret again. The
    text is acme's: cyberdyne holds it only because it was leaked to it. Before, cyberdyne was named
    exposed (confirmed) beside acme, and its notice showed acme's secret as "your request"."""
    rng = np.random.default_rng(9)
    secret = " ".join(words(rng, 40))
    rows = [exchange(f"bg{i}", f"t{i % 7}", i, prompt=" ".join(words(rng, 30)), response=" ".join(words(rng, 45)))
            for i in range(60)]
    rows += [exchange("src-1", "acme", 100, prompt="Please review: " + secret, response="Sure."),
             exchange("rcp-c", "cyberdyne", 200, prompt="q", response="Answer: " + secret + " Done."),
             exchange("c-next", "cyberdyne", 210, prompt="[assistant] Answer: " + secret + " Done. [user] What is this?",
                      response="I apologise."),
             exchange("rcp-g", "globex", 400, prompt="q", response="Here you go: " + secret + " That is all.")]
    case = make_case(tmp_path / "case", rows, ["rcp-c", "rcp-g"])
    res = match(case, config())
    named = sorted((f["recipient_request_id"], f["source_tenant_id"], f["tier"]) for f in res.cross_tenant)
    assert named == [("rcp-c", "acme", "confirmed"), ("rcp-g", "acme", "confirmed")]
    review = list(csv.DictReader((case / "review.csv").open(encoding="utf-8")))
    (carried,) = [r for r in review if r["source_tenant_id"] == "cyberdyne"]
    assert carried["recipient_request_id"] == "rcp-g" and "rcp-c" in carried["why_not_notified"]


def test_a_customers_own_text_its_earlier_suspect_answer_quoted_still_names_it_when_it_leaks(tmp_path: Path) -> None:
    """bolt sent its own document (b1, a suspect whose answer quotes it back), its chat client resent the
    conversation (b2), and globex's later suspect answer holds the document. The text is bolt's own: it
    sent it before its suspect answer held it, so that answer does not make bolt's copy a carried-on one.
    (The first version of the carried-on rule sent the row to review and named nobody.)"""
    rng = np.random.default_rng(13)
    doc = " ".join(words(rng, 40))
    rows = [exchange(f"bg{i}", f"t{i % 7}", i, prompt=" ".join(words(rng, 30)), response=" ".join(words(rng, 45)))
            for i in range(60)]
    rows += [exchange("b1", "bolt", 100, prompt="My document: " + doc, response="You wrote: " + doc),
             exchange("b2", "bolt", 110, prompt="[user] My document: " + doc + " [assistant] You wrote: " + doc,
                      response="Noted."),
             exchange("g1", "globex", 300, prompt="q", response="Here: " + doc + " Done.")]
    case = make_case(tmp_path / "case", rows, ["b1", "g1"])
    named = sorted((f["recipient_request_id"], f["source_tenant_id"]) for f in match(case, config()).cross_tenant)
    assert named == [("g1", "bolt")]


def test_a_passage_leaked_to_a_customer_in_two_answers_is_still_not_its_own(tmp_path: Path) -> None:
    """acme's suspect answers leaked part of bolt's document (a1), then all of it (a3); acme's chat client
    resent each. globex's later answer holds the document: bolt's alone. The own-text check must look
    before the first answer that gave acme the passage; looked at before a3, acme's resend of a1 read as
    acme's own copy and acme was named beside bolt."""
    rng = np.random.default_rng(13)
    doc = words(rng, 40)
    part, full = " ".join(doc[:26]), " ".join(doc)
    rows = [exchange(f"bg{i}", f"t{i % 7}", i, prompt=" ".join(words(rng, 30)), response=" ".join(words(rng, 45)))
            for i in range(60)]
    rows += [exchange("b0", "bolt", 80, prompt="My document: " + full, response="Noted."),
             exchange("a1", "acme", 100, prompt="q1", response="Here: " + part + " end."),
             exchange("a2", "acme", 110, prompt="[assistant] Here: " + part + " end. [user] what?", response="Unsure."),
             exchange("a3", "acme", 120, prompt="q3", response="Again: " + full + " end."),
             exchange("a4", "acme", 130, prompt="[assistant] Again: " + full + " end. [user] what?", response="Unsure."),
             exchange("g1", "globex", 300, prompt="q", response="Here: " + full + " Done.")]
    case = make_case(tmp_path / "case", rows, ["a1", "a3", "g1"])
    named = sorted((f["recipient_request_id"], f["source_tenant_id"]) for f in match(case, config()).cross_tenant)
    assert named == [("a1", "bolt"), ("a3", "bolt"), ("g1", "bolt")]


def test_a_passage_leaked_to_a_customer_in_two_halves_is_still_not_its_own(tmp_path: Path) -> None:
    """acme's suspect answers leaked the first half of bolt's document (a1), then the second (a3); acme's
    chat client resent both (a4). Neither half is half of the document's k-grams (those spanning the cut
    are in neither), so each answer alone did not make acme's copy a carried one: acme was named for g1
    and bolt, the author, was not."""
    rng = np.random.default_rng(17)
    doc = words(rng, 40)
    first, second, full = " ".join(doc[:20]), " ".join(doc[20:]), " ".join(doc)
    rows = [exchange(f"bg{i}", f"t{i % 7}", i, prompt=" ".join(words(rng, 30)), response=" ".join(words(rng, 45)))
            for i in range(60)]
    rows += [exchange("b0", "bolt", 80, prompt="My document: " + full, response="Noted."),
             exchange("a1", "acme", 100, prompt="q1", response="Here: " + first + " end."),
             exchange("a3", "acme", 120, prompt="q3", response="Again: " + second + " end."),
             exchange("a4", "acme", 130, prompt="[assistant] " + first + " " + second + " [user] what?", response="Unsure."),
             exchange("g1", "globex", 300, prompt="q", response="Here: " + full + " Done.")]
    case = make_case(tmp_path / "case", rows, ["a1", "a3", "g1"])
    named = sorted((f["recipient_request_id"], f["source_tenant_id"]) for f in match(case, config()).cross_tenant)
    assert named == [("a1", "bolt"), ("a3", "bolt"), ("g1", "bolt")]


def test_which_responses_the_control_sample_draws_never_changes_the_findings(tmp_path: Path) -> None:
    """The control sample is for calibration only. globex had received the passage in an earlier answer
    (so it is globex's own context), acme sent it too, and three more customers' answers held another
    passage (common text). Before, a response drawn into the sample stopped counting as text its customer
    held: depending on the sample's seed and size, acme was named or not, and the common passage's
    customers were named or not."""
    rng = np.random.default_rng(5)
    secret, common = " ".join(words(rng, 40)), " ".join(words(rng, 40))
    rows = [exchange(f"bg{i}", f"t{i % 7}", i, prompt=" ".join(words(rng, 30)), response=" ".join(words(rng, 45)))
            for i in range(60)]
    rows += [exchange("own-1", "globex", 100, prompt="hi", response="Earlier answer: " + secret),
             exchange("src-1", "acme", 110, prompt="Please review: " + secret, response="Sure."),
             exchange("c-1", "initech", 120, prompt="and?", response="Standard text: " + common),
             exchange("c-2", "cyberdyne", 121, prompt="and?", response="Standard text: " + common),
             exchange("c-3", "umbrella", 122, prompt="and?", response="Standard text: " + common),
             exchange("rcp-1", "globex", 300, prompt="q", response="Here you go: " + secret + " That is all."),
             exchange("rcp-2", "hooli", 301, prompt="q", response="Here: " + common + " Done.")]
    case = make_case(tmp_path / "case", rows, ["rcp-1", "rcp-2"])
    seen = set()
    for size, seed in [(0, 0), (3, 1), (3, 2), (3, 3), (200, 0)]:
        res = match(case, config(control_size=size, seed=seed))
        seen.add(tuple(sorted((f["recipient_request_id"], f["source_tenant_id"], f["tier"]) for f in res.cross_tenant)))
    assert seen == {()}, seen  # globex's own earlier answer explains rcp-1; rcp-2's passage is common text


@pytest.mark.parametrize(("key", "value"), [("tiering", "loose"), ("probable_evalue", float("nan")),
                                            ("confirm_evalue", -1.0)])
def test_evidence_settings_are_validated(tmp_path: Path, key: str, value: object) -> None:
    rows = [exchange("a1", "acme", 0, prompt="x"), exchange("b1", "bolt", 5, prompt="q", response="y")]
    with pytest.raises(ConfigError):
        match(make_case(tmp_path / "case", rows, ["b1"]), config(**{key: value}))


def test_later_texts_feed_the_null_but_copies_of_the_suspect_do_not(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    doc = words(rng, 100)
    tail = words(rng, 60)
    response = " ".join(doc[10:40]) + " " + " ".join(tail)
    rows = [
        exchange("a1", "acme", 0, prompt=" ".join(doc)),
        exchange("b1", "bolt", 5, prompt="q", response=response),
        # After the suspect: a likeness of 10 of its words with gaps (chance, for the null) ...
        exchange("c2", "cato", 30, prompt=" ".join(tail[5:10] + ["zz"] + tail[10:15] + words(rng, 20))),
        # ... and a paste of the whole answer (a copy of it, the reverse of a leak: left out).
        exchange("d2", "dino", 40, prompt="see this: " + response),
    ]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    searches = res.report["null"]["searches"]
    assert searches["suspects_against_later_texts"] == 1
    assert searches["later_texts_copying_the_suspect_left_out"] == 1
    assert searches["chance_matches_from_later_texts"] == 1
    # Later texts are never findings.
    assert {f["source_request_id"] for f in res.findings} == {"a1"}


def test_a_passage_sent_twice_is_attributed_to_the_copy_on_the_suspects_decode_node(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    passage = words_text(rng, 30)
    rows = [
        exchange("a1", "acme", 0, prompt=f"{words_text(rng, 20)} {passage}", decode_node="decode-1"),
        # The same customer's later request on another model (no decode node), holding a little more of it.
        exchange("a2", "acme", 2, prompt=f"{words_text(rng, 20)} {passage} and more", decode_node=None),
        exchange("b1", "bolt", 5, prompt="q", response=f"{words_text(rng, 10)} {passage} and more", decode_node="decode-1"),
    ]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    (f,) = res.cross_tenant
    assert f["source_request_id"] == "a1" and f["other_source_requests"] == 1


@pytest.mark.parametrize("shown_by", ["engine_signature", "placeholder_usage"])
def test_a_prompt_the_engine_swapped_for_the_placeholder_is_no_source(tmp_path: Path, shown_by: str) -> None:
    # acme's conversation: a1 (prefilled), then a2 resending it with more, over the limit: the engine shows a2
    # was served the one-token placeholder, so a2's prompt never reached a cache page. bolt's answer holds
    # the passage and the "more" of a2. The stale page it came from is a1's: a2 holding more of it was
    # cited instead (and its records-since figure with it); a text a2 alone held named acme.
    rng = np.random.default_rng(21)
    passage, more = words_text(rng, 30), words_text(rng, 8)
    placeholder = {"reported_prompt_tokens": 1} if shown_by == "placeholder_usage" else {}
    a1 = exchange("a1", "acme", 0, prompt=f"{words_text(rng, 20)} {passage}", decode_node="decode-1")
    a2 = exchange("a2", "acme", 3, prompt=f"{words_text(rng, 20)} {passage} {more} {words_text(rng, 20)}",
                  response=words_text(rng, 15), decode_node="decode-0", **placeholder)
    b1 = exchange("b1", "bolt", 5, prompt="q", response=f"{words_text(rng, 10)} {passage} {more} {words_text(rng, 10)}",
                  decode_node="decode-1")
    signature = ("a2",) if shown_by == "engine_signature" else ()
    res = match(make_case(tmp_path / "both", [a1, a2, b1], ["a2", "b1"], engine_signature=signature), config())
    cited = {r["source_request_id"] for r in res.cross_tenant + _review(tmp_path / "both") if r["source_tenant_id"] == "acme"}
    assert cited == {"a1"}
    res = match(make_case(tmp_path / "alone", [a2, b1], ["a2", "b1"], engine_signature=signature), config())
    assert not [r for r in res.cross_tenant + _review(tmp_path / "alone") if r["source_tenant_id"] == "acme"]
    # A suspect the engine does not show served the placeholder may have been prefilled: its prompt is a source.
    a2_unshown = {**a2, "reported_prompt_tokens": None}
    res = match(make_case(tmp_path / "unshown", [a2_unshown, b1], ["a2", "b1"]), config())
    # (a candidate: in review, as the engine logs place its copy on another node than bolt's)
    assert {r["source_request_id"] for r in res.cross_tenant + _review(tmp_path / "unshown")} == {"a2"}


def _background(rng: np.random.Generator, n: int) -> list[dict[str, Any]]:
    """``n`` unrelated exchanges of customers t0, t1, ... before minute 0: the traffic the null is drawn from."""
    return [exchange(f"o{i}", f"t{i}", -300 + i, prompt=words_text(rng, 30), response=words_text(rng, 20))
            for i in range(n)]


@pytest.mark.parametrize(("later", "received", "named"),
                         [(0, None, True), (1, None, True), (2, None, False), (3, "passage", True), (3, "other", False)])
def test_a_passage_many_customers_sent_later_is_public_text_not_the_early_senders_secret(
        tmp_path: Path, later: int, received: str | None, named: bool) -> None:
    # acme sent a passage the evening before bolt's suspect answer holds it. ``later`` other customers
    # send the same passage afterwards, independently (a licence header, a famous text): with two of them,
    # more than two customers sent it (as held by three before the suspect), which names nobody. Before, only the
    # senders before the suspect counted, so the first of many senders was named exposed, confirmed.
    # "passage": each later sender first received the passage in a suspect answer of its own (resending what
    # leaked to it): that says nothing about the passage, and acme is still named.
    # "other": each first received a suspect answer holding other text (in a long incident most customers
    # receive one). Their copies still show the passage is public: before, any suspect answer received
    # discounted a customer's later copies, and acme was named exposed, confirmed.
    rng = np.random.default_rng(25)
    passage = words_text(rng, 40)
    rows = _background(rng, 200)
    rows += [exchange("a1", "acme", 0, prompt=f"review this header: {passage}"),
             exchange("b1", "bolt", 5, prompt="q", response=f"{words_text(rng, 10)} {passage} {words_text(rng, 10)}")]
    suspects = ["b1"]
    for i in range(later):
        if received is not None:
            held = passage if received == "passage" else words_text(rng, 40)
            rows.append(exchange(f"r{i}", f"late{i}", 20 + i, prompt="q", response=f"{words_text(rng, 5)} {held}"))
            suspects.append(f"r{i}")
        rows.append(exchange(f"l{i}", f"late{i}", 60 + i, prompt=f"does this allow commercial use? {passage}"))
    res = match(make_case(tmp_path / "case", rows, suspects), config())
    acme = [f for f in res.findings if f["source_tenant_id"] == "acme" and f["recipient_request_id"] == "b1"]
    assert bool(acme) == named


def test_a_customers_id_logged_in_another_unicode_form_is_still_that_customer(tmp_path: Path) -> None:
    # The same name, composed (NFC) in one record and decomposed (NFD) in another: its own earlier text in its
    # suspect answer named it exposed to itself, confirmed.
    import unicodedata

    rng = np.random.default_rng(29)
    own = words_text(rng, 40)
    nfc = "Payne-Reed / Équipe Zürich"
    rows = _background(rng, 60)
    rows += [exchange("a1", unicodedata.normalize("NFD", nfc), 0, prompt=f"summarise: {own}"),
             exchange("b1", nfc, 5, prompt="q", response=f"{words_text(rng, 10)} {own} {words_text(rng, 10)}")]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert not res.cross_tenant
    (row,) = [f for f in res.findings if f["source_request_id"] == "a1"]
    assert row["relation"] == "same_tenant"


def test_a_leak_resent_under_the_other_unicode_form_of_the_same_id_is_not_that_customers_text(tmp_path: Path) -> None:
    # vega's passage leaked into Zürich's suspect answer x1 (id composed); Zürich's client resends it under the
    # decomposed id; rho's suspect answer holds it. Only vega is named for it, as with one id form: the
    # carried-on test grouped a customer's suspects by the id as logged.
    import unicodedata

    rng = np.random.default_rng(5)
    passage = words_text(rng, 40)
    nfc = "Équipe Zürich"
    rows = _background(rng, 100)
    rows += [exchange("v1", "vega", 0, prompt=f"confidential: {passage}"),
             exchange("x1", nfc, 5, prompt="q", response=f"{words_text(rng, 10)} {passage} {words_text(rng, 10)}"),
             exchange("x2", unicodedata.normalize("NFD", nfc), 10, prompt=f"what is this? {passage} {words_text(rng, 5)}",
                      response=words_text(rng, 10)),
             exchange("r1", "rho", 20, prompt="q", response=f"{words_text(rng, 10)} {passage} {words_text(rng, 10)}")]
    res = match(make_case(tmp_path / "case", rows, ["x1", "r1"]), config())
    assert {f["source_tenant_id"] for f in res.cross_tenant if f["recipient_request_id"] == "r1"} == {"vega"}


def _recency_case(root: Path, gap: str | None, source_minute: float = 0.0) -> dict[str, Any]:
    """bolt's suspect b1 (decode-1, minute 100) holds 8 words of acme's a1 (decode-1, ``source_minute``);
    two records a minute go to decode-1 and decode-2 in turn. ``gap``: "log" drops decode-1's records
    between a1 and b1 from the engine logs (no decode node, same model); "model" gives them to a model the
    engine does not serve (no decode node either); "failed" makes them failed calls no engine logged. The a1/b1 row of evidence or review."""
    rng = np.random.default_rng(23)
    doc = words(rng, 60)
    rows = [exchange(f"o{i}", f"t{i % 30}", -600 + i, prompt=words_text(rng, 30), response=words_text(rng, 20),
                     decode_node=f"decode-{1 + i % 2}") for i in range(600)]
    for i in range(200):
        minute = 0.25 + i / 2
        node, extra = f"decode-{1 + i % 2}", {}
        if node == "decode-1" and minute < 100 and gap == "log":
            node = None
        elif node == "decode-1" and minute < 100 and gap == "model":
            node, extra = None, {"model": "llama-4"}
        elif node == "decode-1" and minute < 100 and gap == "failed":  # refused before any engine ran them
            node, extra = None, {"status": "failure"}
        rows.append(exchange(f"m{i}", f"t{i % 30}", minute, prompt=words_text(rng, 30), response=words_text(rng, 20),
                             decode_node=node, **extra))
    rows.append(exchange("a1", "acme", source_minute, prompt=" ".join(doc), decode_node="decode-1"))
    rows.append(exchange("b1", "bolt", 100, prompt="q", decode_node="decode-1",
                         response=f"{words_text(rng, 10)} {' '.join(doc[20:28])} {words_text(rng, 10)}"))
    case = make_case(root, rows, ["b1"])
    match(case, config())
    (row,) = [r for name in ("evidence.csv", "review.csv") for r in csv.DictReader((case / name).open())
              if r["recipient_request_id"] == "b1" and r["source_request_id"] == "a1"]
    return row


def test_a_gap_in_a_decode_nodes_log_does_not_make_an_old_source_its_latest_occupant(tmp_path: Path) -> None:
    whole = _recency_case(tmp_path / "whole", None)
    gap = _recency_case(tmp_path / "gap", "log")
    other_model = _recency_case(tmp_path / "model", "model")
    # 100 of the 200 records between them ran on decode-1: the logs show them, or cannot place them.
    assert int(whole["records_since_source_on_node"]) == 101
    assert int(gap["records_since_source_on_node"]) == 101
    # Before, the gap read as 1 record since the source: the strongest evidence a node can give.
    assert float(gap["expected_by_chance_with_mechanism"]) >= float(whole["expected_by_chance_with_mechanism"])
    # Records of a model the engine does not serve never ran on its nodes: they count for nothing.
    assert int(other_model["records_since_source_on_node"]) == 1
    # Failed calls no engine logged count (a call a node ran may fail after streaming, in a gap of its log).
    failed = _recency_case(tmp_path / "failed", "failed")
    assert int(failed["records_since_source_on_node"]) == 101


def test_the_recency_factor_of_a_source_on_the_suspects_node_is_at_most_one(tmp_path: Path) -> None:
    # acme's a1 is decode-1's latest occupant before bolt's b1, but 40 calls the logs place on no node came in
    # between (a retry storm refused at the gateway) and the node had served 10 records before: counted as
    # possible occupants, they made the factor 41 / 11, worse than a source on another node (1 / share).
    rng = np.random.default_rng(23)
    doc = words(rng, 60)
    rows = [exchange(f"o{i}", f"t{i % 30}", -60 + i, prompt=words_text(rng, 30), response=words_text(rng, 20),
                     decode_node=f"decode-{1 + i % 2}") for i in range(20)]
    rows.append(exchange("a1", "acme", 99.9, prompt=" ".join(doc), decode_node="decode-1"))
    rows += [exchange(f"f{i}", "zeta", 99.91 + i * 0.001, prompt=words_text(rng, 10), status="failure")
             for i in range(40)]
    rows.append(exchange("b1", "bolt", 100, prompt="q", decode_node="decode-1",
                         response=f"{words_text(rng, 10)} {' '.join(doc[20:28])} {words_text(rng, 10)}"))
    case = make_case(tmp_path / "case", rows, ["b1"])
    match(case, config())
    (row,) = [r for name in ("evidence.csv", "review.csv") for r in csv.DictReader((case / name).open())
              if r["source_request_id"] == "a1"]
    assert int(row["records_since_source_on_node"]) == 41
    assert float(row["mechanism_factor"]) <= 1


def test_a_source_received_after_the_suspect_is_no_earlier_occupant_of_its_node(tmp_path: Path) -> None:
    just_before = _recency_case(tmp_path / "before", None, source_minute=99.9)
    after = _recency_case(tmp_path / "after", None, source_minute=100.2)  # the suspect completes at minute 101
    assert int(just_before["records_since_source_on_node"]) == 1
    assert float(just_before["mechanism_factor"]) < 1
    # Received while the suspect was answered: on its node, but not a page it could decode from. Before, the
    # negative count read as the latest occupant (factor 1 / n); now it counts as a source elsewhere.
    assert after["same_decode_node"] == "true" and float(after["seconds_before"]) < 0
    assert after["records_since_source_on_node"] == ""
    assert float(after["mechanism_factor"]) > 1
    assert float(after["expected_by_chance_with_mechanism"]) > float(after["expected_by_chance"])


def test_copies_of_a_passage_are_compared_on_that_passage_so_the_latest_copy_is_cited(tmp_path: Path) -> None:
    # The same customer sent the passage twice, both times on the suspect's decode node. Only the older
    # request also holds a phrase the answer happens to repeat far from the passage: that phrase says
    # nothing about which copy the passage came from, so the latest occupant (a2) is the source. Ranking
    # the copies by the pair's total strength cited a1, and its records-since figure with it.
    rng = np.random.default_rng(11)
    passage, phrase = words_text(rng, 30), words_text(rng, 12)
    rows = [
        exchange("a1", "acme", 0, prompt=f"{words_text(rng, 20)} {passage} {words_text(rng, 20)} {phrase}",
                 decode_node="decode-1"),
        exchange("a2", "acme", 3, prompt=f"{words_text(rng, 20)} {passage}", decode_node="decode-1"),
        exchange("b1", "bolt", 5, prompt="q", decode_node="decode-1",
                 response=f"{words_text(rng, 10)} {passage} {words_text(rng, 40)} {phrase} {words_text(rng, 10)}"),
    ]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    (f,) = [r for r in res.cross_tenant if r["source_tenant_id"] == "acme" and r["matched_tokens"] >= 30]
    assert f["source_request_id"] == "a2" and f["other_source_requests"] == 1


def test_a_passage_the_cited_copy_already_lists_is_not_cited_again_from_another_copy(tmp_path: Path) -> None:
    # a1 (on the suspect's node) holds both leaked passages; a2 (no decode node) only the shorter one. The
    # finding cites a1 with both passages; a2's likeness of the shorter passage is a copy of it, not a
    # second row naming another source request for text the first row already lists.
    rng = np.random.default_rng(12)
    long_passage, short_passage = words_text(rng, 40), words_text(rng, 20)
    rows = [
        exchange("a2", "acme", 0, prompt=f"{words_text(rng, 20)} {short_passage}", decode_node=None),
        exchange("a1", "acme", 3, prompt=f"{long_passage} {words_text(rng, 30)} {short_passage}",
                 decode_node="decode-1"),
        exchange("b1", "bolt", 5, prompt="q", decode_node="decode-1",
                 response=f"{words_text(rng, 10)} {long_passage} {words_text(rng, 40)} {short_passage}"),
    ]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    (f,) = [r for r in res.cross_tenant if r["source_tenant_id"] == "acme"]
    assert f["source_request_id"] == "a1" and f["other_source_requests"] == 1
    assert len(f["passages"].split(";")) == 2


def test_the_control_sample_is_length_matched_to_the_suspects(tmp_path: Path) -> None:
    rng = np.random.default_rng(10)
    rows = [exchange(f"s{i}", f"t{i % 5}", i, prompt="p", response=words_text(rng, 300)) for i in range(4)]
    rows += [exchange(f"short{i}", f"u{i % 7}", 10 + i, prompt="p", response=words_text(rng, 5)) for i in range(60)]
    rows += [exchange(f"long{i}", f"v{i % 7}", 80 + i, prompt="p", response=words_text(rng, 300)) for i in range(12)]
    res = match(make_case(tmp_path / "case", rows, [f"s{i}" for i in range(4)]), config(control_size=10))
    control = res.report["control"]
    assert control["size"] == 10
    # The suspects are all long: so are the controls, though short responses are five times as many.
    (cls,) = control["length_classes"]["suspects"]
    assert control["length_classes"]["control"] == {cls: 10}


def test_a_truncated_gateway_file_names_no_wrong_customer_and_says_which_findings_rest_on_it(tmp_path: Path) -> None:
    import shutil

    from forensics import api
    from forensics.lab.evaluate import evaluate

    sample = Path(__file__).resolve().parent.parent / "sample_logs"
    logs = tmp_path / "logs"
    shutil.copytree(sample, logs)
    damaged = logs / "gateway" / "litellm-callbacks-2026-08-28.jsonl.gz"
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])  # cut short, as a copy interrupted mid-way
    report = api.run(logs / "case.toml", tmp_path / "out").report.report_dir
    scored = evaluate(logs / "truth.json", report).to_json()
    assert scored["customers"]["exposed_wrong"] == []
    on_damaged = json.loads((report / "match.json").read_text())["damage"]["findings_on_damaged_data"]
    assert on_damaged
    summary = (report / "summary.md").read_text()
    assert "rest on a record from damaged input" in summary and all(f in summary for f in on_damaged)


def test_a_review_reason_never_reads_as_its_own_limit() -> None:
    # Just above the text ceiling or the probable threshold, three digits round to the limit itself.
    p = MatchParams()
    why = evalue_tier(1e-5, 1.0, p, text_expected=0.1000004)
    assert isinstance(why, str) and "0.1 > 0.1" not in why and "0.1000004 > 0.1" in why
    why = evalue_tier(0.0010003, 1.0, p, text_expected=0.01)
    assert isinstance(why, str) and "0.0010003 > 0.001" in why
    why = evalue_tier(0.00512, 1.0, p, text_expected=0.01)
    assert isinstance(why, str) and "0.00512 > 0.001" in why
    why = evalue_tier(0.0005, 0.4999, p, singles_out=0.6, text_expected=0.01)
    assert isinstance(why, str) and "rarity 0.4999 < 0.5" in why
    why = evalue_tier(0.0005, 0.25, p, singles_out=0.6, text_expected=0.01)
    assert isinstance(why, str) and "rarity 0.25 < 0.5" in why


def _region_facts_one_by_one(c: Any, hashes: np.ndarray, kp: np.ndarray, informative: np.ndarray, weight: np.ndarray,
                             k: int) -> tuple[float, float, int, int, np.ndarray]:
    """A candidate's evidence counts computed alone, as the matcher computed them before they were vectorised."""
    def covered(starts: np.ndarray, n: int) -> np.ndarray:
        if not len(starts):
            return np.zeros(n, dtype=bool)
        if starts[0] < 0 or starts[-1] > n:
            starts = np.clip(starts, 0, n)
        ends = np.minimum(starts + k, n)
        return np.cumsum(np.bincount(starts, minlength=n + 1)[:n] - np.bincount(ends, minlength=n + 1)[:n]) > 0

    matched = np.zeros(c.tok_end - c.tok_start, dtype=bool)
    for a, size in c.blocks:
        matched[a - c.tok_start : a - c.tok_start + size] = True
    distinct = len(set(hashes[c.tok_start : c.tok_end][matched].tolist()))
    if not informative.all():
        matched &= ~(covered(kp[~informative] - c.tok_start, len(matched)) & ~covered(kp[informative] - c.tok_start, len(matched)))
    return float(weight.mean()), float(weight[informative].mean()), int(matched.sum()), distinct, matched


@pytest.mark.parametrize("seed, held_by", [(s, (1, 2)) for s in range(6)] + [(s, (1, 2, 3, 4)) for s in range(6)])
def test_vectorised_region_facts_equal_the_one_by_one_computation(seed: int, held_by: tuple[int, ...]) -> None:
    from types import SimpleNamespace

    from forensics.match.findings import _region_facts

    rng = np.random.default_rng(seed)
    k = 5
    target_hashes = [rng.integers(0, 12, size=int(rng.integers(20, 200))).astype(np.uint64) for _ in range(4)]
    cands, kps, infs, weights = [], [], [], []
    for _ in range(40):
        t = int(rng.integers(0, 4))
        n_tok = len(target_hashes[t])
        start = int(rng.integers(0, n_tok - 10))
        end = int(rng.integers(start + 6, min(n_tok, start + 80) + 1))
        blocks, pos = [], start
        while pos < end:  # matching blocks with gaps between them, inside the span
            size = int(rng.integers(1, 15))
            blocks.append((pos, min(size, end - pos)))
            pos += size + int(rng.integers(0, 4))
        kp = np.array(sorted({a + j for a, size in blocks if size >= k for j in range(size - k + 1)}), dtype=np.int64)
        inf = rng.random(len(kp)) < 0.6
        w = np.where(inf, 1.0 / rng.choice(held_by, size=len(kp)), 0.0)  # max_tenants >= 3: weights of 1/3, 1/4
        cands.append(SimpleNamespace(target=t, tok_start=start, tok_end=end, blocks=tuple(blocks)))
        kps.append(kp)
        infs.append(inf)
        weights.append(w)
    bounds = np.cumsum([0] + [len(x) for x in kps])
    offset = np.cumsum([0] + [len(h) for h in target_hashes])
    facts = _region_facts(cands, np.concatenate(target_hashes), offset, np.concatenate(kps),  # type: ignore[arg-type]
                          np.concatenate(infs), np.concatenate(weights), bounds, k)
    checked = 0
    for i, c in enumerate(cands):
        assert bool(facts.any_informative[i]) == bool(infs[i].any())
        if not infs[i].any():
            continue
        rarity, singles_out, info_tokens, distinct, matched = _region_facts_one_by_one(
            c, target_hashes[c.target], kps[i], infs[i], weights[i], k)
        assert (float(facts.rarity[i]), float(facts.singles_out[i])) == (rarity, singles_out)
        assert (int(facts.informative_tokens[i]), int(facts.distinct[i])) == (info_tokens, distinct)
        assert np.array_equal(facts.matched[facts.offset[i] : facts.offset[i + 1]], matched)
        checked += 1
    assert checked > 20


@pytest.mark.parametrize("seed", range(8))
def test_matched_k_grams_are_those_inside_blocks_of_k_or_more(seed: int) -> None:
    from types import SimpleNamespace

    from forensics.match.findings import _block_arrays, _matched_kgrams

    rng = np.random.default_rng(seed)
    k = int(rng.integers(1, 7))
    cands = []
    for _ in range(int(rng.integers(0, 30))):
        blocks, pos = [], int(rng.integers(0, 50))
        for _ in range(int(rng.integers(0, 6))):  # some candidates have no block of k tokens, some none at all
            size = int(rng.integers(1, 12))
            blocks.append((pos, size))
            pos += size + int(rng.integers(0, 4))
        cands.append(SimpleNamespace(blocks=tuple(blocks)))
    owner, pos = _matched_kgrams(*_block_arrays(cands), k)  # type: ignore[arg-type]
    expected = [(i, a + j) for i, c in enumerate(cands) for a, size in c.blocks for j in range(size - k + 1)]
    assert list(zip(owner.tolist(), pos.tolist())) == expected


def test_a_mean_weight_of_one_half_stays_one_half_when_three_tenants_held_a_k_gram() -> None:
    from types import SimpleNamespace

    from forensics.match.findings import _region_facts

    # k-grams held by 3, 3, 3 and 1 tenants (max_tenants = 3): the mean weight is 0.5, the rarity gate's value;
    # summed in another order than numpy's mean it came out 0.49999999999999994, and the finding lost its tier.
    cand = SimpleNamespace(target=0, tok_start=0, tok_end=8, blocks=((0, 8),))
    weight = np.array([1 / 3, 1 / 3, 1 / 3, 1.0])
    facts = _region_facts([cand], np.arange(8, dtype=np.uint64), np.array([0, 8]),  # type: ignore[list-item]
                          np.arange(4, dtype=np.int64), np.ones(4, dtype=bool), weight, np.array([0, 4]), 5)
    assert float(facts.rarity[0]) == float(weight.mean()) == 0.5
    assert float(facts.singles_out[0]) == 0.5


def _target(control: bool = False, signature: bool = True, placeholder: bool = False) -> Any:
    from forensics.match.index import Target

    return Target(request_id="s1", tenant_id="bolt", received_us=0, deadline_us=1, decode_node="decode-1",
                  engine_signature=signature, control=control, text="", placeholder_usage=placeholder)


def _candidate(source: str, e: float, relation: str = "cross_tenant", rarity: float = 1.0, text_e: float = 0.01,
               tier: str | None = None, explained_by: str | None = None) -> dict[str, Any]:
    return {"_target": 0, "finding_id": f"f-{source}", "source_tenant_id": source, "relation": relation,
            "expected_by_chance_with_mechanism": e, "expected_by_chance": text_e, "rarity": rarity,
            "tier": tier, "tier_rule": "E2: ..." if tier else None, "why_not_notified": None if tier else "held back",
            "_explained_by": explained_by}


@pytest.mark.parametrize(("rows", "named"), [
    # the strongest candidate of a suspect with no finding, within the limit: named
    ([_candidate("acme", 0.0015), _candidate("cargo", 0.03)], "acme"),
    # the weaker one never is, whatever its E
    ([_candidate("cargo", 0.03), _candidate("acme", 0.0015)], "acme"),
    # a finding already explains the suspect's stale pages
    ([_candidate("acme", 0.0015), _candidate("cargo", 0.0001, tier="confirmed")], None),
    # ... so does its own customer's text, when that is the strongest candidate
    ([_candidate("acme", 0.0015), _candidate("bolt", 0.0012, relation="same_tenant")], None),
    # two customers equally likely: neither
    ([_candidate("acme", 0.0015), _candidate("cargo", 0.0015)], None),
    # beyond the limit; text other customers also held; text ordinary on its own
    ([_candidate("acme", 0.0025)], None),
    ([_candidate("acme", 0.0015, rarity=0.4)], None),
    ([_candidate("acme", 0.0015, text_e=0.2)], None),
    # the strongest is held back for its rarity: the next one is not named in its place
    ([_candidate("acme", 0.0011, rarity=0.4), _candidate("cargo", 0.0015)], None),
    # a candidate explained away by a stronger likeness does not compete when it is weaker by E too ...
    ([_candidate("acme", 0.0018, explained_by="f-cargo"), _candidate("cargo", 0.0015)], "cargo"),
    # ... but when the decode-node evidence makes it the likelier source, the two disagree: neither
    ([_candidate("acme", 0.0011, explained_by="f-cargo"), _candidate("cargo", 0.0015)], None),
    # a tie is a tie however many rows stand before it (two passages of one customer, then another customer)
    ([_candidate("acme", 0.0015), {**_candidate("acme", 0.0015), "finding_id": "f-acme2"}, _candidate("zeta", 0.0015)],
     None),
    # an E that could not be computed never wins, wherever it stands
    ([_candidate("cargo", math.nan), _candidate("acme", 0.0015)], "acme"),
    ([_candidate("acme", 0.0015), _candidate("cargo", math.nan)], "acme"),
    # the limit itself is within it
    ([_candidate("acme", 0.002)], "acme"),
])
def test_e3_names_the_strongest_candidate_of_an_unexplained_engine_signature_suspect(
        rows: list[dict[str, Any]], named: str | None) -> None:
    from forensics.match.findings import name_the_unexplained

    rows = [dict(r) for r in rows]
    before = [dict(r) for r in rows]
    assert name_the_unexplained(rows, [_target()], MatchParams()) == set()
    changed = [(b, r) for b, r in zip(before, rows) if b != r]
    if named is None:
        assert not changed
        return
    ((was, now),) = changed
    assert now["source_tenant_id"] == named and was["tier"] is None
    assert now["tier"] == "probable" and now["why_not_notified"] is None
    assert now["tier_rule"].startswith("E3: ") and "<=0.002" in now["tier_rule"]


def test_e3_needs_the_engine_signature_and_counts_the_controls_it_would_name() -> None:
    from forensics.match.findings import name_the_unexplained

    rows = [_candidate("acme", 0.0015)]
    assert name_the_unexplained(rows, [_target(signature=False)], MatchParams()) == set()
    assert rows[0]["tier"] is None
    # the gateway's usage counting the one-token placeholder shows the stale decode as well
    named = [_candidate("acme", 0.0015)]
    assert name_the_unexplained(named, [_target(signature=False, placeholder=True)], MatchParams()) == set()
    assert named[0]["tier"] == "probable" and "usage counts the one-token placeholder" in named[0]["tier_rule"]
    signed = [_candidate("acme", 0.0015)]
    name_the_unexplained(signed, [_target(placeholder=True)], MatchParams())
    assert "(engine signature)" in signed[0]["tier_rule"]  # the record an auditor can check first
    # a control response counts as an engine-signature suspect for the rule's null, and is only counted: its
    # rows keep no tier (the control false-positive rate is the tiers' own, as for R1-R3)
    assert name_the_unexplained(rows, [_target(control=True, signature=False)], MatchParams()) == {0}
    assert rows[0]["tier"] is None and rows[0]["why_not_notified"] == "held back"
    # off with the old rules, or with a limit no higher than probable_evalue
    for p in (MatchParams(tiering="rules"), MatchParams(unexplained_evalue=0.001)):
        rows = [_candidate("acme", 0.0008)]
        assert name_the_unexplained(rows, [_target()], p) is None and rows[0]["tier"] is None


def _e3_case(rng: np.random.Generator) -> list[dict[str, Any]]:
    """40 prompts, each partly repeated in a later non-suspect response of another customer (the controls' chance
    candidates), and a suspect holding 30 words of an earlier prompt."""
    rows = []
    for i in range(40):
        doc = words(rng, 60)
        rows.append(exchange(f"p{i}", f"t{i % 7}", i, prompt=" ".join(doc), response=words_text(rng, 30)))
        rows.append(exchange(f"r{i}", f"u{i % 5}", i + 0.5, prompt="q",
                             response=" ".join(words(rng, 10) + doc[5:17] + words(rng, 10))))
    doc = words(rng, 100)
    rows.append(exchange("a1", "acme", 100, prompt=" ".join(doc)))
    rows.append(exchange("b1", "bolt", 105, prompt="q", response=" ".join(doc[10:40])))
    return rows


def test_e3_puts_an_unexplained_suspects_strongest_candidate_on_the_list_and_leaves_the_controls_alone(
        tmp_path: Path) -> None:
    rows = _e3_case(np.random.default_rng(3))
    # E1 and E2 set out of reach, so only E3 can name anyone
    strict = {"confirm_evalue": 0.0, "probable_evalue": 1e-300}
    off = match(make_case(tmp_path / "off", rows, ["b1"], engine_signature=("b1",)),
                config(**strict, unexplained_evalue=1e-300))
    on = match(make_case(tmp_path / "on", rows, ["b1"], engine_signature=("b1",)),
               config(**strict, unexplained_evalue=1000.0))
    assert not off.cross_tenant and "E3" not in off.report["null"]["rules"]
    (f,) = on.cross_tenant
    assert f["source_tenant_id"] == "acme" and f["tier"] == "probable" and f["tier_rule"].startswith("E3: ")
    assert float(f["expected_by_chance_with_mechanism"]) > 1e-300
    assert "acme" not in {r["source_tenant_id"] for r in _review(tmp_path / "on")}
    # the controls' chance candidates are counted by E3's null, not made control findings
    assert on.report["control"]["size"] > 0
    assert on.report["control"]["responses_with_findings"] == off.report["control"]["responses_with_findings"] == 0
    e3 = on.report["null"]["rules"]["E3"]
    assert e3["observed_false_positives"] == e3["control_responses_with_match"] > 0
    assert e3["expected_false_positives"] == pytest.approx((1000.0 - 1e-300) * on.report["control"]["size"])
    # without the engine signature the suspect's candidate stays in review ...
    plain = match(make_case(tmp_path / "plain", rows, ["b1"]), config(**strict, unexplained_evalue=1000.0))
    assert not plain.cross_tenant
    # ... unless the usage the gateway logged counts the one-token placeholder for its prompt (gateway logs alone)
    counted = [dict(r, reported_prompt_tokens=1) if r["request_id"] == "b1" else r for r in rows]
    gateway = match(make_case(tmp_path / "gateway", counted, ["b1"]), config(**strict, unexplained_evalue=1000.0))
    assert [f["tier_rule"][:3] for f in gateway.cross_tenant] == ["E3:"]
    many = [dict(r, reported_prompt_tokens=7000) if r["request_id"] == "b1" else r for r in rows]
    assert not match(make_case(tmp_path / "many", many, ["b1"]), config(**strict, unexplained_evalue=1000.0)).cross_tenant


def test_match_json_records_e3_on_the_controls_only_when_it_runs(tmp_path: Path) -> None:
    rows = _e3_case(np.random.default_rng(8))
    res = match(make_case(tmp_path / "case", rows, ["b1"], engine_signature=("b1",)), config())
    e3 = res.report["null"]["rules"]["E3"]
    # only controls whose strongest E lies between probable_evalue and unexplained_evalue can be named by it
    assert e3["expected_false_positives"] == pytest.approx((0.002 - 0.001) * res.report["control"]["size"])
    assert res.report["parameters"]["unexplained_evalue"] == 0.002
    for name, cfg in (("rules", {"tiering": "rules"}), ("off", {"unexplained_evalue": 0.001})):
        res = match(make_case(tmp_path / name, rows, ["b1"], engine_signature=("b1",)), config(**cfg))
        assert "E3" not in res.report["null"]["rules"]


@pytest.mark.parametrize(("ann_node", "ann_model", "ann_minute", "named"),
                         [("decode-2", "glm-5.3", -200, {"ben"}), (None, "glm-5.3", -200, {"ann", "ben"}),
                          ("decode-1", "glm-5.3", -200, {"ann", "ben"}), (None, "llama-4-maverick", -200, {"ben"}),
                          (None, "openai/GLM-5.3", -200, {"ann", "ben"}), ("decode-1", "glm-5.3", 5, {"ann", "ben"})])
def test_a_passage_two_customers_sent_names_the_one_whose_copy_ran_on_the_suspects_node(
        tmp_path: Path, ann_node: str | None, ann_model: str, ann_minute: float, named: set[str]) -> None:
    # ann and ben both sent the same passage (an article both pasted, one vendor's system prompt): the text
    # cannot tell them apart. ben's request was the latest on the suspect's decode node; ann's ran hours
    # before on another node. Stale pages come from the suspect's node: before, both were named exposed,
    # confirmed. Where ann's node is unknown (a gap in the engine logs), or hers ran on the suspect's node
    # too, nothing tells them apart and both stay. So do they when hers went to the engine's model under another
    # spelling (a provider prefix, capitals), and when hers ran on the suspect's node in the same minute as the
    # suspect (timestamps that close cannot order them). Hers sent to a model no placed record asked for ran
    # on another deployment: ben alone.
    rng = np.random.default_rng(41)
    passage = words_text(rng, 40)
    rows = [exchange(f"o{i}", f"t{i}", -600 + i, prompt=words_text(rng, 30), response=words_text(rng, 20),
                     decode_node=f"decode-{i % 4}") for i in range(300)]
    rows += [exchange("a1", "ann", ann_minute, prompt=f"summarise this article: {passage}", decode_node=ann_node,
                      model=ann_model),
             exchange("n1", "ben", 0, prompt=f"translate this article: {passage}", decode_node="decode-1"),
             exchange("b1", "bolt", 5, prompt="q", response=f"{words_text(rng, 10)} {passage} {words_text(rng, 10)}",
                      decode_node="decode-1")]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert {f["source_tenant_id"] for f in res.cross_tenant} == named
    if "ann" not in named:
        (why,) = [r["why_not_notified"] for r in _review(tmp_path / "case") if r["source_tenant_id"] == "ann"]
        (ben,) = [f["finding_id"] for f in res.cross_tenant if f["source_tenant_id"] == "ben"]
        assert ("ran on the suspect's decode node" in why and ben in why) if ann_node else "llama-4-maverick" in why


def test_the_node_reason_is_given_only_where_the_node_is_what_keeps_a_customer_off_the_list(tmp_path: Path) -> None:
    # Three customers sent the passage: with max_tenants 4 it is not common, but it does not single out
    # anyone (rarity), so nobody is named. ann's copy ran on another node: her review reason must still be
    # the rarity, not the node copy (ben is not on the list either).
    rng = np.random.default_rng(47)
    passage = words_text(rng, 40)
    rows = [exchange(f"o{i}", f"t{i}", -600 + i, prompt=words_text(rng, 30), response=words_text(rng, 20),
                     decode_node=f"decode-{i % 4}") for i in range(300)]
    rows += [exchange("a1", "ann", -200, prompt=f"summarise this article: {passage}", decode_node="decode-2"),
             exchange("c1", "cyd", -150, prompt=f"shorten this article: {passage}", decode_node="decode-3"),
             exchange("n1", "ben", 0, prompt=f"translate this article: {passage}", decode_node="decode-1"),
             exchange("b1", "bolt", 5, prompt="q", response=f"{words_text(rng, 10)} {passage} {words_text(rng, 10)}",
                      decode_node="decode-1")]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config(max_tenants=4))
    assert not res.cross_tenant
    why = {r["source_tenant_id"]: r["why_not_notified"] for r in _review(tmp_path / "case")}
    assert why["ann"].startswith("mostly text other tenants also held") and "rarity" in why["ben"]


def _lone_source_case(rng: np.random.Generator, ann: dict[str, Any], nodes: bool = True) -> list[dict[str, Any]]:
    """ann alone sent a 40-word passage hours before the suspect; bolt's suspect answer (on decode-1) holds it."""
    passage = words_text(rng, 40)
    node = (lambda i: {"decode_node": f"decode-{i % 4}"}) if nodes else (lambda i: {})
    rows = [exchange(f"o{i}", f"t{i}", -600 + i, prompt=words_text(rng, 30), response=words_text(rng, 20), **node(i))
            for i in range(300)]
    rows += [exchange("a1", "ann", -200, prompt=f"summarise this article: {passage}", **ann),
             exchange("b1", "bolt", 5, prompt="q", response=f"{words_text(rng, 10)} {passage} {words_text(rng, 10)}",
                      **node(1))]
    return rows


@pytest.mark.parametrize(("ann", "why"), [
    ({"decode_node": "decode-2"}, "decode node decode-2"),
    ({"model": "llama-4-maverick"}, "no engine node served"),
    ({"model": "Meta/Llama-4-Maverick", "model_routed": "llama-4-maverick"}, "no engine node served"),
])
def test_a_source_the_engine_logs_place_elsewhere_goes_to_review_however_strong(
        tmp_path: Path, ann: dict[str, Any], why: str) -> None:
    # On the 1 GB benchmark incident (six seeds merged, their customers drawing text from one corpus) 388 pairs
    # named a customer whose copy of a passage ran on another seed's node, or went to a model the engines never
    # serve: strong verbatim text (E down to 1e-17) that a source elsewhere only multiplied by the node's
    # 1 / share. Stale pages come from the suspect's own node, and a KV pool serves one model: such a copy is
    # not the pages the suspect decoded from. It goes to review, saying why.
    rng = np.random.default_rng(61)
    res = match(make_case(tmp_path / "case", _lone_source_case(rng, ann), ["b1"]), config())
    assert "ann" not in {f["source_tenant_id"] for f in res.cross_tenant}
    (row,) = [r for r in _review(tmp_path / "case") if r["source_tenant_id"] == "ann"]
    assert why in row["why_not_notified"]
    assert float(row["expected_by_chance"]) < 1e-6  # the text alone would have named her


@pytest.mark.parametrize("ann", [{}, {"decode_node": "decode-1"}, {"model": "openai/GLM-5.3"}, {"model": None}])
def test_a_source_the_engine_logs_do_not_place_elsewhere_stays_on_the_list(tmp_path: Path, ann: dict[str, Any]) -> None:
    # Node unknown (a gap in the engine logs), on the suspect's node, the engine's model under another spelling,
    # or no model named: nothing rules her copy out.
    rng = np.random.default_rng(61)
    res = match(make_case(tmp_path / "case", _lone_source_case(rng, ann), ["b1"]), config())
    assert {f["source_tenant_id"] for f in res.cross_tenant} == {"ann"}


def test_without_engine_logs_a_source_is_never_placed_elsewhere(tmp_path: Path) -> None:
    rng = np.random.default_rng(61)
    rows = _lone_source_case(rng, {"model": "llama-4-maverick"}, nodes=False)
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert {f["source_tenant_id"] for f in res.cross_tenant} == {"ann"}


def test_a_placed_record_naming_no_model_leaves_the_served_models_unknown(tmp_path: Path) -> None:
    rng = np.random.default_rng(61)
    rows = _lone_source_case(rng, {"model": "llama-4-maverick"})
    rows = [dict(r, model=None) if r["request_id"] == "o5" else r for r in rows]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert {f["source_tenant_id"] for f in res.cross_tenant} == {"ann"}


def _over_limit(rid: str, minute: float) -> dict[str, Any]:
    return {"source_file": "prefill-0.log", "source_line": 1, "node": "prefill-0", "role": "prefill", "time": at(minute),
            "event": "over_limit", "rid": rid, "input_len": 700_000, "limit": 681_279,
            "message": f"rid={rid} Input length (700000 tokens) exceeds the maximum allowed length (681279 tokens)"}


def _prefilled(rid: str, minute: float, tokens: int) -> dict[str, Any]:
    return {"source_file": "prefill-1.log", "source_line": 1, "node": "prefill-1", "role": "prefill", "time": at(minute),
            "event": "req_time_stats", "rid": rid, "input_len": tokens, "message": f"rid={rid} input_len={tokens}"}


@pytest.mark.parametrize(("case", "named"), [
    ("refused", set()),
    # prefilled after all (another node's bigger pool, a retry): it reached a cache
    ("refused, then prefilled", {"ann"}),
    # ingest did not take the line's count as this prompt's (a line of another request under the id)
    ("count not the engine's", {"ann"}),
    ("id of two exchanges", {"ann"}),  # the engine's id names two exchanges: which one was refused is unknown
])
def test_a_prompt_the_engine_refused_and_never_prefilled_is_no_stale_page(tmp_path: Path, case: str,
                                                                          named: set[str]) -> None:
    # The engine refused ann's request as over its limit (outside the incident's window, so no suspect): its
    # prompt reached no KV cache. Its node is unknown (never decoded), and it was named exposed, confirmed.
    rng = np.random.default_rng(61)
    counted = {"prompt_tokens": 700_000, "prompt_tokens_low": 700_000, "prompt_tokens_high": 700_000,
               "prompt_tokens_source": "reported" if case == "count not the engine's" else "engine"}
    rows = _lone_source_case(rng, counted)
    if case == "id of two exchanges":
        rows.append(exchange("a1", "zed", -300, prompt=words_text(rng, 20)))
    events = [_over_limit("a1", -200)] + ([_prefilled("a1", -199, 690_000)] if case.endswith("prefilled") else [])
    res = match(write_case(tmp_path / "case", rows, engine_events=events, suspects=suspect_rows(rows, ["b1"])), config())
    assert {f["source_tenant_id"] for f in res.cross_tenant} == named
    if not named:
        (row,) = [r for r in _review(tmp_path / "case") if r["source_tenant_id"] == "ann"]
        assert "refused as over the engine's limit and never prefilled" in row["why_not_notified"]


def test_e3_does_not_name_a_candidate_the_engine_logs_place_elsewhere(tmp_path: Path) -> None:
    rows = _e3_case(np.random.default_rng(3))
    # (decode-1's log runs from the first prompt to the suspect: it was running when acme's copy ran elsewhere)
    rows = [dict(r, decode_node="decode-2") if r["request_id"] == "a1" else
            dict(r, decode_node="decode-1") if r["request_id"] in ("b1", "p0") else r for r in rows]
    strict = {"confirm_evalue": 0.0, "probable_evalue": 1e-300}
    res = match(make_case(tmp_path / "case", rows, ["b1"], engine_signature=("b1",)),
                config(**strict, unexplained_evalue=1000.0))
    assert not res.cross_tenant
    assert "acme" in {r["source_tenant_id"] for r in _review(tmp_path / "case")}


def _decoded(rid: str, node: str, minute: float) -> dict[str, Any]:
    return {"source_file": f"{node}.log", "source_line": 1, "node": node, "role": "decode", "time": at(minute),
            "event": "req_time_stats", "rid": rid, "message": f"rid={rid} decode"}


def test_a_source_retried_on_the_suspects_node_is_not_placed_elsewhere(tmp_path: Path) -> None:
    # ann's request was decoded on decode-2, failed, and was retried on decode-1, the suspect's node: the
    # exchanges name one decode node (decode-2), the engine logs both. Her copy may be the suspect's pages.
    rng = np.random.default_rng(61)
    rows = _lone_source_case(rng, {"decode_node": "decode-2"})
    events = [_decoded("a1", "decode-2", -200), _decoded("a1", "decode-1", -199), _decoded("o1", "decode-1", -599)]
    res = match(write_case(tmp_path / "retried", rows, engine_events=events, suspects=suspect_rows(rows, ["b1"])),
                config())
    assert {f["source_tenant_id"] for f in res.cross_tenant} == {"ann"}
    once = match(write_case(tmp_path / "once", rows, engine_events=events[:1] + events[2:],
                            suspects=suspect_rows(rows, ["b1"])), config())
    assert not once.cross_tenant


def test_a_node_whose_log_was_not_running_then_is_not_another_node(tmp_path: Path) -> None:
    # Decode logs exported one file per day make a node of each day's file: the suspect's node (today's file)
    # places no record at the time of ann's copy (yesterday's file, another "node"). That is no evidence her
    # copy ran elsewhere: she stays named.
    rng = np.random.default_rng(61)
    rows = _lone_source_case(rng, {"decode_node": "decode-1-day1"})
    rows = [dict(r, decode_node="decode-1-day2") if r["request_id"] == "b1" else r for r in rows]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert {f["source_tenant_id"] for f in res.cross_tenant} == {"ann"}


def test_a_customer_is_ruled_out_only_where_every_copy_of_the_passage_is(tmp_path: Path) -> None:
    # ann sent the passage to the engine's model (node unknown: a gap in the decode log), then to another model:
    # the collapse of her copies kept the later one, which the engine logs rule out, and she went to review.
    rng = np.random.default_rng(61)
    rows = _lone_source_case(rng, {})
    (a1,) = [r for r in rows if r["request_id"] == "a1"]
    rows.append(dict(a1, request_id="a2", received_at=at(-100), completed_at=at(-99), model="llama-4-maverick"))
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert [f["source_request_id"] for f in res.cross_tenant] == ["a1"]


def test_the_suspects_own_retry_on_the_sources_node_keeps_the_source(tmp_path: Path) -> None:
    # bolt's suspect request was decoded on decode-1, then retried on decode-3 (the exchanges name the first):
    # ann's copy ran on decode-3 just before. Her copy may be the pages the retry decoded from.
    rng = np.random.default_rng(61)
    rows = _lone_source_case(rng, {"decode_node": "decode-3"})
    events = [_decoded("b1", "decode-1", 5), _decoded("b1", "decode-3", 5.2), _decoded("o1", "decode-1", -599)]
    res = match(write_case(tmp_path / "case", rows, engine_events=events, suspects=suspect_rows(rows, ["b1"])),
                config())
    assert {f["source_tenant_id"] for f in res.cross_tenant} == {"ann"}


@pytest.mark.parametrize(("placed", "named"), [
    ({"model": None, "model_routed": "glm-5.3"}, set()),  # the routed name says which model
    ({"model": ""}, {"ann"}),  # names no model: which models the engines serve is unknown
    ({"model": "openai/"}, {"ann"}),
])
def test_the_models_the_engines_serve_are_known_only_where_every_placed_record_names_one(
        tmp_path: Path, placed: dict[str, Any], named: set[str]) -> None:
    rng = np.random.default_rng(61)
    rows = _lone_source_case(rng, {"model": "llama-4-maverick"})
    rows = [dict(r, **placed) if r["request_id"] == "o5" else r for r in rows]
    res = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert {f["source_tenant_id"] for f in res.cross_tenant} == named


@pytest.mark.parametrize(("ann_model", "case_models"), [
    ("GLM 5.3", []), ("glm_5.3", []), ("ｇｌｍ－５．３", []), ("glm\u20115.3", []), ("glm-5.3-fp8", ["glm-5.3", "glm-5.3-fp8"]),
])
def test_spellings_of_the_engines_model_are_not_another_deployment(tmp_path: Path, ann_model: str,
                                                                   case_models: list[str]) -> None:
    # Written with other separators, width or a non-breaking hyphen, or a name the case file lists as one of its
    # models: the engine's model, not another deployment.
    rng = np.random.default_rng(61)
    rows = _lone_source_case(rng, {"model": ann_model})
    res = match(make_case(tmp_path / "case", rows, ["b1"]), CaseConfig(models=case_models, sections={"match": {}}))
    assert {f["source_tenant_id"] for f in res.cross_tenant} == {"ann"}


def test_e3_names_no_one_when_the_strongest_candidate_is_ruled_out(tmp_path: Path) -> None:
    # bolt's answer holds ann's 40-word passage; ann's copy ran on another node while bolt's node was logging, so it
    # goes to review. Elsewhere in the answer, five common words cyd sent on bolt's node: E3 then named cyd, a
    # likeness, as the suspect had no finding left. The strongest candidate is ruled out: E3 names no one.
    rng = np.random.default_rng(1)
    common = [f"c{i:02d}y" for i in range(40)]

    def mixed(n: int) -> str:  # background text: half of it common words
        return " ".join(common[rng.integers(0, 40)] if rng.random() < 0.5 else VOCAB[rng.integers(0, 5000)]
                        for _ in range(n))

    passage = words_text(rng, 40)
    other = " ".join(common[i] for i in rng.integers(0, 40, size=5))
    rows = [exchange(f"o{i}", f"t{i}", -600 + i, prompt=mixed(30), response=mixed(20), decode_node=f"decode-{i % 4}")
            for i in range(300)]
    rows += [exchange("a1", "ann", -200, prompt=f"summarise this article: {passage}", decode_node="decode-2"),
             exchange("c1", "cyd", -3, prompt=f"{words_text(rng, 20)} {other} {words_text(rng, 20)}", decode_node="decode-1"),
             exchange("b1", "bolt", 5, prompt="q", decode_node="decode-1",
                      response=f"{words_text(rng, 10)} {passage} {words_text(rng, 15)} {other} {words_text(rng, 10)}")]
    res = match(make_case(tmp_path / "case", rows, ["b1"], engine_signature=("b1",)), config())
    assert not res.cross_tenant
    assert {r["source_tenant_id"] for r in _review(tmp_path / "case")} >= {"ann", "cyd"}


def test_a_model_no_engine_served_is_named_in_the_stages_warnings(tmp_path: Path) -> None:
    # An alias of the case's model that the case file does not list, on a route whose ids never reach the engine,
    # sends every customer that used it to review: the stage says which names it treated as another model.
    rng = np.random.default_rng(61)
    res = match(make_case(tmp_path / "case", _lone_source_case(rng, {"model": "claude-sonnet-4-5"}), ["b1"]), config())
    assert not res.cross_tenant
    (warning,) = [w for w in res.summary()["warnings"] if "no engine node served" in w]
    assert "claude-sonnet-4-5 (1)" in warning and "models" in warning
    plain = match(make_case(tmp_path / "plain", _lone_source_case(np.random.default_rng(61), {}), ["b1"]), config())
    assert not [w for w in plain.summary()["warnings"] if "no engine node served" in w]


@pytest.mark.parametrize(("control", "kept"), [(False, "a2"), (True, "a1")])
def test_the_nulls_rows_keep_a_customers_strongest_copy_whatever_the_engine_rule(control: bool, kept: str) -> None:
    # One customer's two copies of a passage a response matched, neither placed on a node: a1 stronger, ruled out
    # (sent to a model no engine node served), a2 weaker.
    # A suspect's row keeps the copy the engine logs do not rule out; a control's row (the null the E-values are
    # fitted to) keeps the stronger chance match, as before the rule, not leaning to weaker ones.
    from forensics.match.findings import _collapse_same_tenant_copies

    def row(rid: str, bits: float, ruled_out: str | None) -> dict[str, Any]:
        return {"_target": 0, "source_tenant_id": "ann", "source_request_id": rid, "source_kind": "prompt",
                "recipient_start": 10, "recipient_end": 60, "passages": [(10, 60, 0, 50)], "control": control,
                "_ruled_out": ruled_out, "same_decode_node": None, "_main_bits": bits,
                "_source_received_us": 1, "finding_id": f"f-{rid}", "recipient_request_id": "b1",
                "recipient_tenant_id": "bolt"}

    (one,) = _collapse_same_tenant_copies([row("a1", 90.0, "another model"), row("a2", 40.0, None)])
    assert one["source_request_id"] == kept


@pytest.mark.parametrize("said", ["the key is {key} and", "API 키는 {key}입니다", "clé:{key}é", "key: {shy}"])
def test_a_leaked_api_key_alone_is_found_and_spanned_exactly(tmp_path: Path, said: str) -> None:
    # A key is one run of letters and digits: as one token it made no k-gram, so a response that held
    # another customer's key and nothing else of theirs gave no candidate at all (nor did one glued to a
    # Korean particle or an accented letter, once keys were pieces).
    rng = np.random.default_rng(11)
    key = "sk-proj-4fQ9zT1mXw7LbR2cVn8KpD3sHj6YgE0aUo5iNt"
    prompt = f"{words_text(rng, 40)} set OPENAI_API_KEY={key} before {words_text(rng, 40)}"
    shy = "\u00ad".join(key[i:i + 8] for i in range(0, len(key), 8))  # a renderer's soft hyphens
    response = f"{words_text(rng, 30)} {said.format(key=key, shy=shy)} {words_text(rng, 30)}"
    rows = [exchange("a1", "acme", 0, prompt=prompt), exchange("c1", "crux", 2, prompt=words_text(rng, 80)),
            exchange("b1", "bolt", 5, prompt="q", response=response)]
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    (f,) = result.cross_tenant
    assert (f["source_tenant_id"], f["tier"]) == ("acme", "confirmed")
    spans = [tuple(int(x) for x in part.replace("=", ":").split(":")) for part in f["passages"].split(";")]
    secret = key.split("-")[-1]  # "sk" and "proj" are words of their own, common to every such key
    assert any(secret in response[a:b].replace("\u00ad", "") and secret in prompt[c:d] for a, b, c, d in spans)


def test_an_example_key_every_customer_pastes_is_no_finding(tmp_path: Path) -> None:
    # The pieces of a machine-made token are text like any other: held by many customers, they are public.
    # (Held by one or two, an example key is named like any text they alone sent: docs/evidence-model.md.)
    rng = np.random.default_rng(12)
    example = "AKIAIOSFODNN7EXAMPLE"
    rows = [exchange(f"a{i}", f"t{i}", i, prompt=f"{words_text(rng, 30)} aws_access_key_id = {example} "
                                                 f"{words_text(rng, 30)}") for i in range(5)]
    rows.append(exchange("b1", "bolt", 9, prompt="q", response=f"{words_text(rng, 20)} {example} {words_text(rng, 20)}"))
    result = match(make_case(tmp_path / "case", rows, ["b1"]), config())
    assert not result.cross_tenant


@pytest.mark.parametrize("constant", [
    "AKIAIOSFODNN7EXAMPLE",  # the AWS documentation's example access key
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",  # jwt.io's example token
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",  # the SHA-256 of nothing
    "4242 4242 4242 4242",  # Stripe's test card
])
def test_a_public_constant_one_customer_sent_names_no_one(tmp_path: Path, constant: str) -> None:
    """A constant every model has read (an example key, the SHA-256 of nothing) in a suspect's answer and in one
    customer's earlier prompt named that customer, confirmed: its pieces weigh like rare words, and one customer
    holding it is no proof it is public. Constants known to be public are left out of the responses searched."""
    rng = np.random.default_rng(13)
    rows = [exchange("a1", "acme", 0, prompt=f"{words_text(rng, 30)} value = {constant} {words_text(rng, 30)}"),
            exchange("c1", "crux", 2, prompt=words_text(rng, 80)),
            exchange("b1", "bolt", 5, prompt="q", response=f"{words_text(rng, 20)} {constant} {words_text(rng, 20)}")]
    case = make_case(tmp_path / "case", rows, ["b1"])
    result = match(case, config())
    assert not result.cross_tenant and not [r for r in _review(case) if r["source_tenant_id"] == "acme"]
    assert json.loads((case / "match.json").read_text())["searched"]["public_constants_masked"] >= 1
