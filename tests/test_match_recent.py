"""The recent-occupant test (forensics/match/recent.py): a source among the last records on the
suspect's decode node, the window placed by the case's own confirmed findings, honest E-values."""

from __future__ import annotations

import collections
import csv
import datetime as dt
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from match_helpers import config, exchange, make_case

import forensics.match as fm
from forensics.match import match, recent
from forensics.match.chance import WINDOW_SHARE, calibration, either_test, with_mechanism
from forensics.match.findings import RecordFacts
from forensics.match.tiers import NODE_TEXT_EVALUE_CEILING, TEXT_EVALUE_CEILING, MatchParams, evalue_tier

VOCAB = [f"w{i:04d}x" for i in range(5000)]
COMMON = [f"c{i:02d}" for i in range(12)]  # the filler of every response: weak evidence


def text(rng: np.random.Generator, n: int) -> str:
    return " ".join(VOCAB[i] for i in rng.integers(0, len(VOCAB), size=n))


def filler(rng: np.random.Generator, n: int) -> str:
    return " ".join(COMMON[i] for i in rng.integers(0, len(COMMON), size=n))


def test_the_window_is_placed_by_the_confirmed_findings_and_needs_enough_of_them() -> None:
    assert recent.choose_window([3] * (recent.MIN_CONFIRMED - 1)) is None
    ks = list(range(1, 21))  # records since the source: 1..20
    window = recent.choose_window(ks)
    assert window is not None
    assert sum(k <= window for k in ks) >= recent.WINDOW_QUANTILE * len(ks)
    assert window < max(ks)  # a quantile, so an old copy far back does not widen it
    assert recent.choose_window(ks + [5000]) == window


def test_the_window_evalue_counts_only_sources_inside_it() -> None:
    assert recent.window_evalue(0.05, 3, 30, 3000) == pytest.approx(0.05 * 30 / 3000)
    assert recent.window_evalue(0.05, 30, 30, 3000) == pytest.approx(0.05 * 30 / 3000)
    for since, window in ((31, 30), (0, 30), (None, 30), (3, None)):
        assert math.isinf(recent.window_evalue(0.05, since, window, 3000))
    # Without a window (no engine logs, or too few confirmed findings) the product test alone decides.
    assert recent.combine(0.002, 1e-9, None) == 0.002
    assert recent.combine(0.002, 1e-5, 30) == pytest.approx(min(0.002 / (1 - WINDOW_SHARE), 1e-5 / WINDOW_SHARE))


def test_either_test_is_calibrated_on_chance_candidates() -> None:
    # Chance candidates of many searches, as in the product test's own check: E-values even on [0, C], a
    # share s ran on the suspect's node at a position k uniform on 1..n (n = s R of the R records searched).
    # Passing either test at t must happen at most about t times per search, not 2t.
    rng = np.random.default_rng(4)
    searches, c, s, n, window = 400_000, 4.0, 0.25, 300, 30
    total = rng.poisson(c * searches)
    e = rng.uniform(0.0, c, size=total)
    same = rng.random(total) < s
    k = rng.integers(1, n + 1, size=total)
    factor = np.where(same, k / n, 1.0 / s)
    records = n / s
    for t in (0.001, 0.01, 0.05):
        product = np.array([with_mechanism(x, s, c, n) for x in e * factor])
        in_window = np.where(same & (k <= window), e * window / records, np.inf)
        either = np.minimum(product / (1 - WINDOW_SHARE), in_window / WINDOW_SHARE)
        observed = float((either <= t).sum()) / searches
        assert observed <= 1.15 * t, t
        # Each test alone at the full budget would let through more than t.
        assert float(((product <= t) | (in_window <= t)).sum()) / searches > 1.3 * t


def test_the_control_calibration_applies_both_tests() -> None:
    # One control match, 3 bits, inside the window (a share 0.01 of the records); every other control none.
    points: list[tuple[Any, ...]] = [(0, 3.0, 100.0, 1.0, 0.25, 200, 0.01)]
    points += [(i, 3.0 + i % 7, 100.0, 1.0, 0.25, 200, 0.0) for i in range(2, 60, 2)]
    points += [(i, 2.0 + i % 5, 100.0, 1.0, 0.25, 200, 0.0) for i in range(1, 60, 2)]
    points += [(i, math.nan, 100.0, 1.0, 0.25, 200, 0.0) for i in range(60, 400)]
    with_window = calibration(points)
    without = calibration([p[:6] for p in points])
    counts = [(a["observed_with_mechanism"], b["observed_with_mechanism"])
              for a, b in zip(with_window["points"], without["points"])]
    # Outside the window a match pays for the second test (fewer pass); inside it, it can pass by the window.
    assert counts != [(b, b) for _, b in counts]
    assert either_test(1.0, math.inf) == pytest.approx(1 / (1 - WINDOW_SHARE))


def test_the_control_calibration_checks_the_window_alone_with_gateway_logs_only() -> None:
    # No decode-node evidence (share 0), but the window test ran: its figure is checked on the controls too.
    points: list[tuple[Any, ...]] = [(0, 3.0, 100.0, 1.0, 0.0, 0, 0.01)]
    points += [(i, 2.0 + i % 5, 100.0, 1.0, 0.0, 0, 0.0) for i in range(1, 60)]
    points += [(i, math.nan, 100.0, 1.0, 0.0, 0, 0.0) for i in range(60, 400)]
    rows = calibration(points, window_alone=True)["points"]
    assert rows and all("observed_with_mechanism" in row for row in rows)
    # Neither (the window did not run either): the text's E alone, nothing more to check.
    rows = calibration([p[:6] + (None,) for p in points], window_alone=True)["points"]
    assert not any("observed_with_mechanism" in row for row in rows)
    # With engine logs, controls none of which has a known node are not checked by the window alone (as before).
    assert not any("observed_with_mechanism" in row for row in calibration(points)["points"])


def _case(root: Path, nodes: bool, weak_since: int, weak_model: str = "glm-5.3", between_model: str = "glm-5.3",
          other_nodes: int = 0, weak_node: str = "decode-0", gap: bool = False, later_nodes: int = 0) -> Path:
    """Thirteen suspects on decode-0: twelve with a long leak from a source 1-10 records before them
    (confirmed by the text alone; they place the window), and one (b12) with a short, weak fragment
    from the source ``weak_since`` records before it, that source on ``weak_model`` and ``weak_node`` and the
    records between the two on ``between_model``. Background traffic on two nodes, and first 300 records on each
    of ``other_nodes`` more (a bigger deployment: decode-0's share of the records falls). ``nodes``: the engine
    logs place every record on its decode node (else gateway logs only); ``gap``: but not decode-0's background
    records (a gap in its log). ``later_nodes``: 300 records on each of that many more nodes after every suspect."""
    rng = np.random.default_rng(11)
    rows: list[dict[str, Any]] = []
    suspects = []
    minute = 0.0

    def node(name: str) -> str | None:
        return name if nodes else None

    def add(rid: str, tenant: str, where: str, model: str = "glm-5.3", **texts: str) -> None:
        nonlocal minute
        hidden = gap and rid.startswith("o") and where == "decode-0"
        rows.append(exchange(rid, tenant, minute, decode_node=None if hidden else node(where), model=model, **texts))
        minute += 1

    for i in range(300 * other_nodes):
        add(f"x{i}", f"u{i % 400}", f"decode-{2 + i % other_nodes}", prompt=text(rng, 30), response=text(rng, 20))
    for i in range(300):
        add(f"o{i}", f"t{i % 40}", f"decode-{i % 2}", prompt=text(rng, 30), response=filler(rng, 20))
    for j in range(13):
        doc = text(rng, 120).split()
        if j == 12:  # mostly common words, one rare one every other token
            weak = [COMMON[x] for x in rng.integers(0, len(COMMON), size=8)]
            weak[1] = doc[41]
            doc[40:48] = weak
        add(f"a{j}", f"src{j}", weak_node if j == 12 else "decode-0", weak_model if j == 12 else "glm-5.3", prompt=" ".join(doc))
        for i in range((weak_since if j == 12 else 1 + j % 10) - 1):
            add(f"f{j}_{i}", f"t{i % 40}", "decode-0", between_model if j == 12 else "glm-5.3",
                prompt=text(rng, 30), response=filler(rng, 20))
        frag = " ".join(doc[40:48] if j == 12 else doc[40:70])
        add(f"b{j}", f"rcp{j}", "decode-0", prompt="q", response=f"{filler(rng, 15)} {frag} {filler(rng, 15)}")
        suspects.append(f"b{j}")
        for i in range(20):
            add(f"g{j}_{i}", f"t{i % 40}", f"decode-{i % 2}", prompt=text(rng, 30), response=filler(rng, 20))
    for i in range(300 * later_nodes):
        add(f"y{i}", f"v{i % 400}", f"decode-{100 + i % later_nodes}", prompt=text(rng, 30), response=text(rng, 20))
    return make_case(root, rows, suspects)


def _weak(root: Path, **match_kw: Any) -> tuple[dict[str, str], dict[str, Any]]:
    res = match(root, config(**match_kw))
    rows = [r for name in ("evidence.csv", "review.csv") for r in csv.DictReader((root / name).open())
            if r["recipient_request_id"] == "b12" and r["source_request_id"] == "a12"]
    assert len(rows) == 1
    return rows[0], res.report.to_json()["null"]


def test_a_source_inside_the_window_is_scored_by_both_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on, null = _weak(_case(tmp_path / "on", True, weak_since=8))
    window = null["recent_occupants"]["window_records"]
    assert null["recent_occupants"]["ran"] and 8 <= window < 20
    assert null["recent_occupants"]["confirmed_findings_used"] >= recent.MIN_CONFIRMED
    monkeypatch.setattr(recent, "MIN_CONFIRMED", 10**6)  # the same case with the test switched off
    off, off_null = _weak(_case(tmp_path / "off", True, weak_since=8))
    assert not off_null["recent_occupants"]["ran"]
    e_text = float(on["expected_by_chance"])
    assert float(off["expected_by_chance"]) == e_text
    searched = _searched(tmp_path / "on", "b12")
    expected = either_test(float(off["expected_by_chance_with_mechanism"]), e_text * window / searched)
    assert float(on["expected_by_chance_with_mechanism"]) == pytest.approx(expected, rel=0.01)
    # Inside the window the second test is the stronger one: the source 8 records back counts for more.
    assert float(on["expected_by_chance_with_mechanism"]) < float(off["expected_by_chance_with_mechanism"])


def test_a_source_outside_the_window_pays_for_the_second_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on, null = _weak(_case(tmp_path / "on", True, weak_since=40))
    assert null["recent_occupants"]["ran"] and null["recent_occupants"]["window_records"] < 40
    monkeypatch.setattr(recent, "MIN_CONFIRMED", 10**6)
    off, _ = _weak(_case(tmp_path / "off", True, weak_since=40))
    assert float(on["expected_by_chance_with_mechanism"]) == pytest.approx(
        float(off["expected_by_chance_with_mechanism"]) / (1 - WINDOW_SHARE), rel=0.01)


def test_with_gateway_logs_only_the_window_counts_the_records_of_the_case_models(tmp_path: Path) -> None:
    # No decode node anywhere: the window is placed and applied over the records of the suspects' model the
    # gateway received, every node together. Here one node serves the suspects, so the figures are the node's.
    row, null = _weak(_case(tmp_path / "gw", False, weak_since=8))
    assert null["recent_occupants"]["ran"] and null["recent_occupants"]["scope"] == "models"
    window = null["recent_occupants"]["window_records"]
    assert 8 <= window < 20
    assert "records_since_source_on_model" in null["decode_node_evidence"]
    assert row["records_since_source_on_model"] == "8"  # the source and the 7 records after it
    assert row["records_since_source_on_node"] == "" and row["mechanism_factor"] == "1.0"
    e_text = float(row["expected_by_chance"])
    searched = _searched(tmp_path / "gw", "b12")
    assert float(row["expected_by_chance_with_mechanism"]) == pytest.approx(
        either_test(e_text, e_text * window / searched), rel=0.01)
    assert float(row["expected_by_chance_with_mechanism"]) < e_text / 10


def test_with_gateway_logs_only_a_source_outside_the_window_pays_for_the_test(tmp_path: Path) -> None:
    row, null = _weak(_case(tmp_path / "far", False, weak_since=40))
    assert null["recent_occupants"]["ran"] and null["recent_occupants"]["window_records"] < 40
    assert row["records_since_source_on_model"] == "40"
    assert float(row["expected_by_chance_with_mechanism"]) == pytest.approx(
        float(row["expected_by_chance"]) / (1 - WINDOW_SHARE), rel=0.01)


def test_with_gateway_logs_only_other_models_records_do_not_count(tmp_path: Path) -> None:
    # 39 records between the source and the suspect, all of another model (another deployment, other pages):
    # among the suspect's model's records the source is the latest, inside the window.
    row, null = _weak(_case(tmp_path / "between", False, weak_since=40, between_model="other-model"))
    assert row["records_since_source_on_model"] == "1"
    assert float(row["expected_by_chance_with_mechanism"]) < float(row["expected_by_chance"]) / 10
    # A source of another model never held pages the suspect could decode from: not in the window, however recent.
    row, _ = _weak(_case(tmp_path / "other", False, weak_since=8, weak_model="other-model"))
    assert row["records_since_source_on_model"] == ""
    assert float(row["expected_by_chance_with_mechanism"]) == pytest.approx(
        float(row["expected_by_chance"]) / (1 - WINDOW_SHARE), rel=0.01)


def test_with_engine_logs_the_model_count_is_left_empty(tmp_path: Path) -> None:
    row, null = _weak(_case(tmp_path / "on", True, weak_since=8))
    assert null["recent_occupants"]["scope"] == "node"
    assert row["records_since_source_on_model"] == "" and row["records_since_source_on_node"] == "8"


def _searched(case: Path, rid: str) -> int:
    """Records received before request ``rid`` completed: what its search covered."""
    import pyarrow.parquet as pq

    rows = pq.read_table(case / "exchanges.parquet", columns=["request_id", "received_at", "completed_at"]).to_pylist()
    (done,) = [r["completed_at"] for r in rows if r["request_id"] == rid]
    return sum(1 for r in rows if r["received_at"] < done)


def test_the_decode_node_evidence_alone_puts_nobody_on_the_list() -> None:
    # "made their way through the" (10 bits, expected by chance 0.22 times) from the record just before
    # the suspect on its node: the product of the two is small, but the text is what unrelated texts share.
    p = MatchParams()
    why = evalue_tier(0.0004, 1.0, p, 1.0, text_expected=0.22)
    assert isinstance(why, str) and "decode-node evidence corroborates" in why
    assert evalue_tier(0.0004, 1.0, p, 1.0, text_expected=TEXT_EVALUE_CEILING)[0] == "probable"
    assert evalue_tier(0.00004, 1.0, p, 1.0, text_expected=0.05)[0] == "confirmed"
    assert evalue_tier(0.0004, 1.0, p, 1.0)[0] == "probable"  # no text figure given: as before
    # Its source on the suspect's node, where a search of only what that node can have served expects it 0.04 times.
    assert evalue_tier(0.0004, 1.0, p, 1.0, text_expected=0.22, on_node=0.04)[0] == "probable"
    why = evalue_tier(0.0004, 1.0, p, 1.0, text_expected=0.22, on_node=0.06)
    assert isinstance(why, str) and why.startswith(f"expected_by_chance 0.22 > 0.1, and 0.06 > {NODE_TEXT_EVALUE_CEILING:g} had the "
                                                   "search covered only the records the suspect's decode node can have served")
    # Never stricter than the whole search's reading.
    assert evalue_tier(0.0004, 1.0, p, 1.0, text_expected=0.09, on_node=0.09)[0] == "probable"

def _node_records(case: Path, rid: str, node: str, unplaced: bool = False) -> tuple[int, int]:
    """(records ``node`` served -- with ``unplaced``, and those placed on no node -- received before request ``rid``
    completed, records received before it completed): what a search held to the node, and the whole search, covered."""
    rows = pq.read_table(case / "exchanges.parquet", columns=["request_id", "received_at", "completed_at", "decode_node"]).to_pylist()
    (done,) = [r["completed_at"] for r in rows if r["request_id"] == rid]
    before = [r for r in rows if r["received_at"] < done]
    return sum(1 for r in before if r["decode_node"] == node or (unplaced and r["decode_node"] is None)), len(before)


def _on_node(why: str) -> float:
    """The E-value over the node's records a review reason names."""
    return float(why.split(", and ")[1].split(" > ")[0])


def test_the_text_alone_is_read_among_the_texts_the_suspects_node_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A deployment of eight decode nodes, and six more that start after the suspects: decode-0 served about a
    # seventh of the records b12's search covered. The weak passage's text is ordinary over the whole search (above
    # the ceiling, set here below its figure) but not over what decode-0 served, where the suspect's pages came
    # from: read over the whole search only, a bigger deployment kept such leaks off the list (24 seeds of the
    # realistic scenario merged: 1,152 true pairs).
    from forensics.match import tiers

    def run(name: str, **kw: Any) -> dict[str, str]:
        return _weak(_case(tmp_path / name, True, weak_since=3, other_nodes=6, later_nodes=6, **kw))[0]

    free = run("free")
    assert free["tier"] == "confirmed"
    e_text = float(free["expected_by_chance"])
    monkeypatch.setattr(tiers, "TEXT_EVALUE_CEILING", e_text / 2)
    monkeypatch.setattr(tiers, "NODE_TEXT_EVALUE_CEILING", 0.0)
    shut = run("shut")
    assert shut["tier"] == "" and "had the search covered only the records the suspect's decode node can have served" in shut["why_not_notified"]
    on_node = _on_node(shut["why_not_notified"])
    # The E-value of a search of the node's records alone: E grows with the square root of the records searched
    # (SIZE_EXPONENT), and only those received before the suspect completed count, not the later nodes'.
    node, searched = _node_records(tmp_path / "shut", "b12", "decode-0")
    assert 0.05 < node / searched < 0.25
    assert on_node == pytest.approx(e_text * (node / searched) ** 0.5, rel=0.01)
    monkeypatch.setattr(tiers, "NODE_TEXT_EVALUE_CEILING", on_node * 1.5)
    assert run("on")["tier"] == "confirmed"
    monkeypatch.setattr(tiers, "NODE_TEXT_EVALUE_CEILING", on_node / 1.5)
    weak = run("weak")
    assert weak["tier"] == "" and "on that node too" in weak["why_not_notified"]
    # The same passage from a record another node served: not the suspect's pages, so its text must stand
    # alone, read over every text searched.
    monkeypatch.setattr(tiers, "NODE_TEXT_EVALUE_CEILING", on_node * 1.5)
    elsewhere = run("elsewhere", weak_node="decode-1")
    assert elsewhere["tier"] == "" and elsewhere["records_since_source_on_node"] == ""
    assert elsewhere["why_not_notified"].startswith(f"expected_by_chance {float(elsewhere['expected_by_chance']):.3g} > ")
    assert "had the search covered" not in elsewhere["why_not_notified"]


@pytest.mark.parametrize(("spelling", "routed"), [("glm-5.3", None), ("openai/GLM-5.3", None), ("chat-default", "glm-5.3"),
                                                  (None, "openai/glm-5.3")])
def test_a_gap_in_the_suspects_node_log_makes_its_texts_no_fewer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spelling: str | None,
                                                                 routed: str | None) -> None:
    # decode-0's log misses its background records: placed, its records look fewer than they are, and a passage
    # ordinary among them would pass. The records of its model the logs place nowhere may all be its own: the node's
    # search counts them, however the gateway spells the model, and where it names it only as the routed one (a
    # LiteLLM model group).
    from forensics.match import tiers

    root = _case(tmp_path / "free", True, weak_since=3, other_nodes=6, gap=True)
    table = pq.read_table(root / "exchanges.parquet")
    unplaced = [n is None for n in table.column("decode_node").to_pylist()]
    for name, value in (("model", spelling), ("model_routed", routed)):
        column = table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows
        column = [value if gap else v for v, gap in zip(column, unplaced)]
        if name in table.column_names:
            table = table.set_column(table.schema.get_field_index(name), name, pa.array(column, pa.string()))
        else:
            table = table.append_column(name, pa.array(column, pa.string()))
    pq.write_table(table, root / "exchanges.parquet")
    e_text = float(_weak(root)[0]["expected_by_chance"])
    monkeypatch.setattr(tiers, "TEXT_EVALUE_CEILING", e_text / 2)
    monkeypatch.setattr(tiers, "NODE_TEXT_EVALUE_CEILING", 0.0)
    why = _weak(root)[0]["why_not_notified"]
    placed, searched = _node_records(root, "b12", "decode-0")
    at_most, _ = _node_records(root, "b12", "decode-0", unplaced=True)
    assert at_most > 1.4 * placed
    assert _on_node(why) == pytest.approx(e_text * (at_most / searched) ** 0.5, rel=0.01)


def _facts(node_times: dict[str, list[float]], failed: list[float], answered: tuple[float, ...] = (),
           unit: float = 60e6) -> RecordFacts:
    """Facts of a deployment whose engine logs place records on ``node_times`` (minutes; ``unit`` microseconds each) and
    none of the calls the gateway logged as ``failed`` or as ``answered``."""
    us = (lambda xs: np.array(sorted(int(x * unit) for x in xs), np.int64))  # noqa: E731
    times = us([x for v in node_times.values() for x in v] + failed + list(answered))
    total = sum(len(v) for v in node_times.values())
    return RecordFacts({}, {}, times, {n: len(v) / total for n, v in node_times.items()}, False,
                       {n: us(v) for n, v in node_times.items()}, us(failed + list(answered)),
                       unplaced_answered_times=us(list(answered)))


def _between(facts: RecordFacts, node: str, since: float, until: float) -> tuple[int, float, int]:
    """(records placed on ``node``, expected there, at most there) received in [since, until) minutes."""
    a, b = int(since * 60e6), int(until * 60e6)
    return (facts.records_on_node_since(node, a, b), facts.records_on_node_expected(node, a, b),
            facts.records_since_on_node_at_most(node, a, b))


def test_failed_calls_placed_nowhere_count_for_a_node_by_its_share_while_its_log_runs() -> None:
    # Four decode nodes, a record a minute on each; a call placed on no node every other minute (a failure before
    # any node decoded it). Each may have run on any node: a quarter of them are expected on decode-0, not all.
    minutes = [float(m) for m in range(200)]
    facts = _facts({f"decode-{n}": [m + n / 10 for m in minutes] for n in range(4)}, [m + 0.5 for m in minutes[::2]])
    placed, expected, at_most = _between(facts, "decode-0", 50, 150)
    assert placed == 100 and at_most == 150
    assert expected == pytest.approx(100 + 50 / 4)
    # A node whose log shows nothing of those hours: every one may be its own.
    assert facts.records_on_node_expected("decode-9", int(50 * 60e6), int(150 * 60e6)) == 50
    # A call at the very time of one of decode-0's records is not in a gap of its log: by share too.
    on_a_record = _facts({f"decode-{n}": [m + n / 10 for m in minutes] for n in range(4)}, [100.0])
    assert _between(on_a_record, "decode-0", 50, 150)[1] == pytest.approx(100 + 1 / 4)


def test_answered_calls_placed_nowhere_count_whole_unless_a_log_shows_a_gap_then() -> None:
    # decode-0's log loses every other line (here and there, no stretch): its answered calls are placed nowhere. No
    # node's log shows a gap, so any running log may have lost them, decode-0's among them: each counts whole for every
    # node (counted by share, decode-0 read as about half the node it is). A failed call still counts by share.
    minutes = [float(m) for m in range(200)]
    nodes = {f"decode-{n}": [m + n / 10 for m in minutes] for n in range(4)}
    lost = tuple(m for m in nodes["decode-0"] if int(m) % 2)
    nodes["decode-0"] = [m for m in nodes["decode-0"] if not int(m) % 2]
    facts = _facts(nodes, [150.5], lost)
    placed, expected, at_most = _between(facts, "decode-0", 50, 150)
    assert placed == 50 and at_most == 100
    assert expected == pytest.approx(100)
    placed, expected, at_most = _between(facts, "decode-0", 50, 160)
    assert expected == pytest.approx(at_most - 1 + placed / (placed + 3 * 110))


def test_a_gap_is_ten_of_the_logs_usual_spacings() -> None:
    # decode-0 places a record a minute, but for one quiet stretch: of 5 minutes (under ten spacings: no gap, the failed
    # calls in it by share) or of 15 (a gap: whole). Receipt times in whole seconds, ten records a second and a quiet
    # 5 s: the usual spacing is a tenth of a second, not the one second between the times that differ, so a gap.
    for quiet, gap in ((5, False), (10, False), (11, True), (15, True)):
        others = {f"decode-{n}": [m + n / 10 for m in range(100)] for n in range(1, 4)}
        mine = [float(m) for m in range(100) if not 40 < m < 40 + quiet]
        failed = [40.5 + i for i in range(quiet - 1)]
        facts = _facts({"decode-0": mine, **others}, failed)
        placed, expected, _ = _between(facts, "decode-0", 10, 90)
        share = placed / (placed + 3 * 80)
        assert expected == pytest.approx(placed + len(failed) * (1.0 if gap else share)), (quiet, gap)
    seconds = [float(s) for s in range(60) if not 20 < s < 26 for _ in range(10)]
    others = {f"decode-{n}": [float(s) for s in range(60) for _ in range(10)] for n in range(1, 4)}
    facts = _facts({"decode-0": seconds, **others}, [21.5, 23.5], unit=1e6)
    assert _between(facts, "decode-0", 0, 60)[1] - _between(facts, "decode-0", 0, 60)[0] == pytest.approx(2)
    # Three records a second, a second without: the usual spacing is a third of a second, and a quiet 2 s no gap.
    thrice = [float(s) for s in range(60) if s != 30 for _ in range(3)]
    facts = _facts({"decode-0": thrice, **others}, [30.5], unit=1e6)
    placed, expected, _ = _between(facts, "decode-0", 0, 60)
    assert expected == pytest.approx(placed + placed / (placed + 3 * 600))
    # A stretch in which no node places a record: the call placed nowhere there may be any node's, this one's too.
    assert _facts({"decode-0": [float(m) for m in range(100)], **others}, [40.5]).records_on_node_expected(
        "decode-0", int(40.2 * 60e6), int(40.8 * 60e6)) == pytest.approx(1)
    # Bursts a second apart, then a pause of ten minutes: the pauses are gaps (the median spacing is the burst's).
    bursty = [b * 600 + i for b in range(6) for i in range(10)]
    facts = _facts({"decode-0": [x / 60 for x in bursty], **others}, [(b * 600 + 300) / 60 for b in range(5)])
    assert facts.records_on_node_expected("decode-0", 0, int(3000e6)) == pytest.approx(50 + 5)


def test_failed_calls_in_a_gap_of_the_nodes_log_all_count_for_it() -> None:
    # decode-0's log misses minutes 80-120 (the others run on): the calls placed nowhere then may all be its own,
    # and so may those before its first record and after its last. The rest count by its share.
    minutes = [float(m) for m in range(200)]
    nodes = {f"decode-{n}": [m + n / 10 for m in minutes] for n in range(4)}
    nodes["decode-0"] = [m for m in minutes if not 80 <= m <= 120 and 20 <= m <= 180]
    facts = _facts(nodes, [m + 0.5 for m in minutes[::2]])
    placed, expected, at_most = _between(facts, "decode-0", 0, 200)
    in_gaps = sum(1 for m in minutes[::2] if m + 0.5 < 20 or 79 < m + 0.5 < 121 or m + 0.5 > 180)
    share = placed / (placed + 3 * 200)
    assert expected == pytest.approx(placed + in_gaps + (100 - in_gaps) * share)
    assert placed + in_gaps < expected < at_most == placed + 100
    # Answered calls placed nowhere after decode-0's log ends (the cut-short seed of the benchmark's merged incidents):
    # its lines, lost. They count whole for decode-0; for decode-1, whose log runs on, by its share.
    late = tuple(m + 0.7 for m in minutes if m > 180)
    facts = _facts(nodes, [m + 0.5 for m in minutes[::2]], late)
    assert _between(facts, "decode-0", 181, 199)[1] == pytest.approx(_between(facts, "decode-0", 181, 199)[2])
    placed1, expected1, at_most1 = _between(facts, "decode-1", 181, 199)
    assert at_most1 - placed1 == 9 + 18 and expected1 == pytest.approx(placed1 + 27 / 3)
    # The records either side of a gap are no part of it: a call at the very time of one counts by share.
    at_edges = _facts(nodes, [79.0, 121.0, 100.0])
    placed, expected, _ = _between(at_edges, "decode-0", 30, 170)
    assert expected == pytest.approx(placed + 1 + 2 * placed / (placed + 3 * 140))
    # A quiet stretch within ten of its usual spacings is no gap: only by its share.
    nodes["decode-0"] = [m for m in minutes if m % 5 == 0]
    placed, expected, _ = _between(_facts(nodes, [m + 0.5 for m in minutes[::2]]), "decode-0", 0, 196)
    assert expected == pytest.approx(placed + 98 * placed / (placed + 3 * 196))


def _expected_by_hand(facts: RecordFacts, node: str, since: int, until: int) -> float:
    """records_on_node_expected worked out call by call, from the definition (its gaps found the same way)."""
    def gaps(times: np.ndarray) -> list[tuple[float, float]]:
        if len(times) < 2:
            return [(-math.inf, math.inf)]
        spacing = np.diff(times)
        positive = spacing[spacing > 0]
        usual = float(np.median(positive)) * len(positive) / len(spacing) if len(positive) else 1.0
        inner = [(float(a), float(b)) for a, b, d in zip(times[:-1], times[1:], spacing) if d > 10 * usual]
        return [(-math.inf, float(times[0])), *inner, (float(times[-1]), math.inf)]

    def in_gap(u: int, found: list[tuple[float, float]]) -> bool:
        return any(a < u < b for a, b in found)

    mine = facts.node_times.get(node, np.zeros(0, np.int64))
    placed = int(((mine >= since) & (mine < until)).sum())
    everyone = np.concatenate(list(facts.node_times.values())) if facts.node_times else np.zeros(0, np.int64)
    every_placed = int(((everyone >= since) & (everyone < until)).sum())
    share = placed / every_placed if every_placed else 1.0
    all_gaps = [gaps(np.sort(t)) for t in facts.node_times.values()]
    answered = collections.Counter((facts.unplaced_answered_times if facts.unplaced_answered_times is not None
                                    else facts.unplaced_times).tolist())
    total = float(placed)
    for u in facts.unplaced_times.tolist():
        was_answered = answered[u] > 0  # (two calls at one time: one answered, one failed)
        answered[u] -= 1
        if not since <= u < until:
            continue
        if in_gap(u, gaps(mine)) or (was_answered and not any(in_gap(u, g) for g in all_gaps)):
            total += 1
        else:
            total += share
    return total


def test_the_expected_count_is_its_definition_on_random_logs() -> None:
    rng = np.random.default_rng(5)
    for trial in range(60):
        nodes = {}
        for n in range(int(rng.integers(1, 5))):
            times = np.sort(rng.integers(0, 2000, size=int(rng.integers(0, 60))))
            if rng.random() < 0.5:  # a stretch lost
                a = int(rng.integers(0, 2000))
                times = times[(times < a) | (times > a + int(rng.integers(50, 600)))]
            if rng.random() < 0.3:  # ties
                times = np.sort(np.concatenate([times, times[: len(times) // 2]]))
            nodes[f"d{n}"] = times.astype(np.int64)
        unplaced = np.sort(rng.integers(0, 2000, size=int(rng.integers(0, 80)))).astype(np.int64)
        answered = np.sort(unplaced[rng.random(len(unplaced)) < 0.5])
        facts = RecordFacts({}, {}, np.sort(np.concatenate([*nodes.values(), unplaced])), {}, False, nodes, unplaced,
                            unplaced_answered_times=answered)
        for _ in range(5):
            since, until = sorted(int(x) for x in rng.integers(-100, 2100, size=2))
            for node in [*nodes, "elsewhere"]:
                got = facts.records_on_node_expected(node, since, until)
                assert got == pytest.approx(_expected_by_hand(facts, node, since, until)), (trial, node, since, until)


@pytest.mark.parametrize("kind", ["text", "dictionary", "integer"])
def test_the_status_of_calls_placed_nowhere_is_read_whatever_its_column_type(tmp_path: Path, kind: str) -> None:
    # A case table another tool wrote may hold the status as dictionary-encoded text, or not as text at all: the stage
    # runs, and where the column is not text every call placed nowhere counts as answered (whole), as if unlogged.
    from forensics.match.findings import record_facts

    doc = text(np.random.default_rng(3), 120).split()
    rows = [exchange("a0", "src", 0, prompt=" ".join(doc), decode_node="decode-0"),
            exchange("f0", "t1", 1, prompt="x", status="failure"), exchange("f1", "t1", 2, prompt="y"),
            exchange("b0", "rcp", 3, prompt="q", response=" ".join(doc[40:70]), decode_node="decode-0")]
    root = make_case(tmp_path / kind, rows, ["b0"])
    table = pq.read_table(root / "exchanges.parquet")
    status = table.column("status")
    column = {"text": status, "dictionary": status.dictionary_encode(),
              "integer": pa.array([0, 1, 0, 0], pa.int64())}[kind]
    table = table.set_column(table.schema.get_field_index("status"), "status", column)
    pq.write_table(table, root / "exchanges.parquet")
    facts = record_facts(root / "exchanges.parquet", set())
    assert len(facts.unplaced_times) == 2
    assert facts.unplaced_answered_times is not None
    assert len(facts.unplaced_answered_times) == (2 if kind == "integer" else 1)
    assert match(root, config()).findings


def test_a_node_of_a_big_deployment_is_not_charged_every_failed_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Eight decode nodes, and a failed call placed on no node after every record since decode-0's first. Read as all decode-0's (the bound
    # the recency count keeps), they more than doubled its records, and the weak passage its source decoded there
    # went to review; the node can be expected to have served an eighth of them, and the passage is named. (24 seeds
    # of the realistic scenario merged, 75 nodes: 238 true pairs more on the list, 2 wrong ones.)
    from forensics.match import tiers

    root = _case(tmp_path / "failed", True, weak_since=3, other_nodes=6)
    table = pq.read_table(root / "exchanges.parquet")
    first = min(r["received_at"] for r in table.to_pylist() if r["decode_node"] == "decode-0")
    failed = [{"request_id": f"z{i}", "tenant_id": f"u{i % 50}", "received_at": r["received_at"] + dt.timedelta(seconds=30),
               "completed_at": r["received_at"] + dt.timedelta(seconds=31), "model": "glm-5.3", "status": "failure",
               "prompt_text": "", "response_text": ""} for i, r in enumerate(table.to_pylist()) if r["received_at"] >= first]
    rows = table.to_pylist() + failed
    pq.write_table(pa.Table.from_pylist(sorted(rows, key=lambda r: r["received_at"]), schema=table.schema),
                   root / "exchanges.parquet")
    e_text = float(_weak(root)[0]["expected_by_chance"])
    monkeypatch.setattr(tiers, "TEXT_EVALUE_CEILING", e_text / 2)
    monkeypatch.setattr(tiers, "NODE_TEXT_EVALUE_CEILING", 0.0)
    on_node = _on_node(_weak(root)[0]["why_not_notified"])
    placed, searched = _node_records(root, "b12", "decode-0")
    at_most, _ = _node_records(root, "b12", "decode-0", unplaced=True)
    assert at_most > 2 * placed
    assert e_text * (placed / searched) ** 0.5 < on_node < e_text * (at_most / searched) ** 0.5 / 1.25
    monkeypatch.setattr(tiers, "NODE_TEXT_EVALUE_CEILING", e_text * (at_most / searched) ** 0.5 / 1.2)
    named = _weak(root)[0]
    assert named["tier"] in ("confirmed", "probable"), named["why_not_notified"]


def _controls_case(root: Path, control_model: str) -> Path:
    """Gateway logs only (no decode node). Thirteen suspects on glm-5.3, each leaking a long passage of a source
    1-10 records before it (they place the window). Twenty clean responses of suspect length on
    ``control_model`` (the control sample), each sharing a weak likeness (8 tokens, one rare) with the glm-5.3
    prompt received just before it: for a control, a cross-tenant chance match whose source is the latest glm-5.3 record before it."""
    rng = np.random.default_rng(11)
    rows: list[dict[str, Any]] = []
    suspects = []
    minute = 0.0

    def add(rid: str, tenant: str, model: str = "glm-5.3", **texts: str) -> None:
        nonlocal minute
        rows.append(exchange(rid, tenant, minute, decode_node=None, model=model, **texts))
        minute += 1

    for i in range(300):
        add(f"o{i}", f"t{i % 40}", prompt=text(rng, 30), response=filler(rng, 20))
    for j in range(13):
        doc = text(rng, 120).split()
        add(f"a{j}", f"src{j}", prompt=" ".join(doc))
        for i in range(j % 10):
            add(f"f{j}_{i}", f"t{i % 40}", prompt=text(rng, 30), response=filler(rng, 20))
        add(f"b{j}", f"rcp{j}", prompt="q", response=f"{filler(rng, 15)} {' '.join(doc[40:70])} {filler(rng, 15)}")
        suspects.append(f"b{j}")
        for i in range(20):
            add(f"g{j}_{i}", f"t{i % 40}", prompt=text(rng, 30), response=filler(rng, 20))
    for i in range(20):
        doc = text(rng, 60).split()
        weak = [COMMON[x] for x in rng.integers(0, len(COMMON), size=8)]  # a weak likeness: one rare word
        weak[1] = doc[11]
        doc[10:18] = weak
        add(f"p{i}", f"ps{i}", prompt=" ".join(doc))  # glm-5.3, just before the control
        add(f"k{i}", f"kc{i}", model=control_model, prompt="q",
            response=f"{filler(rng, 25)} {' '.join(weak)} {filler(rng, 27)}")
    return make_case(root, rows, suspects)


def _control_rows(root: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    decide = fm.decide

    def spy(*a: Any, **kw: Any) -> Any:
        rows, null = decide(*a, **kw)
        seen.extend(r for r in rows if r["control"] and r["relation"] == "cross_tenant"
                    and str(r["source_request_id"]).startswith("p"))
        return rows, null

    monkeypatch.setattr(fm, "decide", spy)
    res = match(root, config())
    return seen, res.report.to_json()["null"]


def test_a_control_on_the_case_model_is_tested_by_the_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Gateway logs only: each control's chance source, the case-model prompt just before it, lies in the window.
    rows, null = _control_rows(_controls_case(tmp_path / "same", "glm-5.3"), monkeypatch)
    assert null["recent_occupants"]["ran"] and null["recent_occupants"]["scope"] == "models"
    assert rows and all(r["records_since_source_on_model"] == 1 for r in rows)


def test_a_control_off_the_case_models_is_still_tested_by_the_window(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The same controls sent to another model (their chance sources are still the glm-5.3 record just before
    # them, inside the window of the case's models). A suspect in their place would be scored by the window
    # test; the controls, which stand in for suspects in the null checks, must be too.
    rows, null = _control_rows(_controls_case(tmp_path / "other", "other-model"), monkeypatch)
    assert null["recent_occupants"]["ran"] and null["recent_occupants"]["scope"] == "models"
    assert rows
    assert any(r["records_since_source_on_model"] is not None for r in rows), \
        [r["records_since_source_on_model"] for r in rows]


def test_the_control_false_positive_rate_does_not_depend_on_the_controls_model(tmp_path: Path) -> None:
    # The same controls, the same chance sources; only the model the controls were sent to differs. The rate
    # match.json reports (control.false_positive_rate) is the error rate the suspects' tiers are claimed to have.
    rates = {}
    for model in ("glm-5.3", "other-model"):
        res = match(_controls_case(tmp_path / model, model), config())
        rates[model] = res.report.to_json()["control"]["false_positive_rate"]
    assert rates["other-model"] == rates["glm-5.3"], rates


def _engine_controls_case(root: Path) -> Path:
    """Thirteen suspects and their sources on decode-0 (the engine logs place them); every other record, the
    control sample's among them, on no node known."""
    rng = np.random.default_rng(11)
    rows: list[dict[str, Any]] = []
    suspects = []
    minute = 0.0

    def add(rid: str, tenant: str, placed: bool, **texts: str) -> None:
        nonlocal minute
        rows.append(exchange(rid, tenant, minute, decode_node="decode-0" if placed else None, **texts))
        minute += 1

    for i in range(300):
        add(f"o{i}", f"t{i % 40}", False, prompt=text(rng, 30), response=filler(rng, 20))
    for j in range(13):
        doc = text(rng, 120).split()
        add(f"a{j}", f"src{j}", True, prompt=" ".join(doc))
        for i in range(j % 10):
            add(f"f{j}_{i}", f"t{i % 40}", False, prompt=text(rng, 30), response=filler(rng, 20))
        add(f"b{j}", f"rcp{j}", True, prompt="q", response=f"{filler(rng, 15)} {' '.join(doc[40:70])} {filler(rng, 15)}")
        suspects.append(f"b{j}")
        for i in range(20):
            add(f"g{j}_{i}", f"t{i % 40}", False, prompt=text(rng, 30), response=filler(rng, 20))
    return make_case(root, rows, suspects)


def test_an_engine_log_case_keeps_its_control_calibration(tmp_path: Path) -> None:
    null = match(_engine_controls_case(tmp_path / "c"), config()).report.to_json()["null"]
    assert null["recent_occupants"]["ran"]  # the node test's window ran (13 confirmed same-node findings)
    points = null["calibration_of_controls_with_mechanism"]["points"]
    # No control has decode-node evidence: the window alone is no evidence to check them by when engine logs exist.
    assert not any("observed_with_mechanism" in p for p in points), points


def test_the_records_of_the_case_models_are_found_under_every_spelling_and_in_either_column(tmp_path: Path) -> None:
    from forensics.lab.cases import write_case
    from forensics.match.findings import record_facts

    spelled = [("glm-5.3", None), ("openai/GLM 5.3", None), (None, "glm_5.3"), ("router-default", "GLM-5.3"),
               ("glm-5.3", "glm-5.3"), ("other-model", None), (None, None), ("x" * 5000, None), ("glm-5.3" + " " * 300, None)]
    rows = [exchange(f"r{i}", "t", float(i), model=model, model_routed=routed) for i, (model, routed) in enumerate(spelled)]
    rows.append(exchange("late", "t", 99.0, received_at=None))  # no time: never counted
    write_case(tmp_path, rows)
    facts = record_facts(tmp_path / "exchanges.parquet", set())
    minutes = [int((t - facts.times_of(frozenset({"glm-5-3"}))[0]) // 60_000_000) for t in facts.times_of(frozenset({"glm-5-3"}))]
    # Every spelling of the one deployment, asked for or routed to, each record once; the 300 trailing spaces are
    # still a name of it, a 5,000-character name is no model's.
    assert minutes == [0, 1, 2, 3, 4, 8]
    assert len(facts.times_of(frozenset({"other-model"}))) == 1
    assert len(facts.times_of(frozenset())) == 0



def _two_pasters(root: Path, old_since: int, carried: bool = False) -> Path:
    """Twelve suspects on decode-0 placing the window (leaks from sources 1-10 records before them), and one, b12,
    whose answer holds a passage two customers sent: ``old`` ``old_since`` records before it on decode-0, ``new`` two
    records before it there (with ``carried``, after receiving it in a suspect answer of its own, bN, on decode-1)."""
    rng = np.random.default_rng(12)
    rows: list[dict[str, Any]] = []
    minute = 0.0

    def add(rid: str, tenant: str, where: str, **texts: str) -> None:
        nonlocal minute
        rows.append(exchange(rid, tenant, minute, decode_node=where, **texts))
        minute += 1

    for i in range(300):
        add(f"o{i}", f"t{i % 40}", f"decode-{i % 2}", prompt=text(rng, 30), response=filler(rng, 20))
    for j in range(12):
        doc = text(rng, 120).split()
        add(f"a{j}", f"src{j}", "decode-0", prompt=" ".join(doc))
        for i in range(j % 10):
            add(f"f{j}_{i}", f"t{i % 40}", "decode-0", prompt=text(rng, 30), response=filler(rng, 20))
        add(f"b{j}", f"rcp{j}", "decode-0", prompt="q", response=f"{filler(rng, 15)} {' '.join(doc[40:70])} {filler(rng, 15)}")
    passage = text(rng, 40)
    add("old-1", "old", "decode-0", prompt=f"{text(rng, 20)} {passage} {text(rng, 20)}")
    if carried:
        add("bN", "new", "decode-1", prompt="q", response=f"{filler(rng, 15)} {passage} {filler(rng, 15)}")
    for i in range(old_since - 3 - carried):
        add(f"h{i}", f"t{i % 40}", "decode-0", prompt=text(rng, 30), response=filler(rng, 20))
    add("new-1", "new", "decode-0", prompt=f"{text(rng, 20)} {passage} {text(rng, 20)}")
    add("h-last", "t1", "decode-0", prompt=text(rng, 30), response=filler(rng, 20))
    add("b12", "rcp12", "decode-0", prompt="q", response=f"{filler(rng, 15)} {passage} {filler(rng, 15)}")
    return make_case(root, rows, [f"b{j}" for j in range(13)] + (["bN"] if carried else []))


def test_of_two_customers_copies_of_a_passage_on_the_node_the_recent_occupant_is_named(tmp_path: Path) -> None:
    """A public text two customers pasted, one 600 records back on the suspect's node and one just before it: both
    were named exposed, confirmed (a review). Stale pages come from the node's recent occupants, the window the
    case's own confirmed findings place: the copy beyond it goes to review, saying why."""
    root = _two_pasters(tmp_path / "far", old_since=200)
    res = match(root, config())
    window = res.report.to_json()["null"]["recent_occupants"]["window_records"]
    assert window is not None and window < 200
    named = {r["source_tenant_id"] for r in csv.DictReader((root / "evidence.csv").open()) if r["recipient_request_id"] == "b12"}
    assert named == {"new"}
    (old,) = [r for r in csv.DictReader((root / "review.csv").open()) if r["source_tenant_id"] == "old"]
    assert old["records_since_source_on_node"] == "200"
    assert old["why_not_notified"].startswith("the same response text matches another customer's text as strongly")
    assert f"among the last {window} records the suspect's decode node served" in old["why_not_notified"]
    # Both copies in the window: the order there does not tell them apart, and both stay.
    near = _two_pasters(tmp_path / "near", old_since=4)
    match(near, config())
    named = {r["source_tenant_id"] for r in csv.DictReader((near / "evidence.csv").open()) if r["recipient_request_id"] == "b12"}
    assert named == {"new", "old"}


def test_a_copy_carried_on_by_its_customer_explains_no_older_copy_away(tmp_path: Path) -> None:
    """The recent copy was the pasting back of a passage its customer had itself received in a suspect answer: that
    copy names nobody (carried on), and it sent the true source, 200 records back, to review (a review): nobody was
    named. The true source is named."""
    root = _two_pasters(tmp_path / "carried", old_since=200, carried=True)
    match(root, config())
    named = {r["source_tenant_id"] for r in csv.DictReader((root / "evidence.csv").open()) if r["recipient_request_id"] == "b12"}
    assert named == {"old"}


def test_a_decode_node_named_by_the_empty_string_is_a_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A table built by hand or imported may name a node "": the node's reading of the text must not stop the stage.
    from forensics.match import tiers

    root = _case(tmp_path / "c", True, weak_since=3, other_nodes=6, later_nodes=6)
    for name in ("exchanges", "suspects"):
        table = pq.read_table(root / f"{name}.parquet")
        i = table.schema.get_field_index("decode_node")
        nodes = ["" if v == "decode-0" else v for v in table.column("decode_node").to_pylist()]
        pq.write_table(table.set_column(i, table.schema.field(i), pa.array(nodes, pa.string())), root / f"{name}.parquet")
    row = _weak(root)[0]
    assert row["tier"] == "confirmed" and row["recipient_decode_node"] == "" and row["records_since_source_on_node"] == "3"
    monkeypatch.setattr(tiers, "TEXT_EVALUE_CEILING", float(row["expected_by_chance"]) / 2)
    monkeypatch.setattr(tiers, "NODE_TEXT_EVALUE_CEILING", 0.0)
    assert "had the search covered only the records" in _weak(root)[0]["why_not_notified"]
