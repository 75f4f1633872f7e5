"""The recent-occupant test: a second, targeted reading of the decode-node evidence.

Stale pages hold the text of the requests that last occupied the slot a placeholder request lands
in: requests that ran on the *same decode node* shortly before it. The product test
(:func:`forensics.match.chance.with_mechanism`) ranks a candidate by ``expected_by_chance`` times
``k / n`` (its source is the k-th latest of the n records the node served before the suspect) and
pays for looking at every k: a chance candidate is as likely to land at k = 3 as at k = 300. The
leaked sources of a case do not spread that way; they lie among the last few dozen records of the
node (how many depends on the deployment: slots, traffic, how long pages survive).

This test asks a narrower question, fixed before it looks at any candidate: is the source one of the
last ``N`` records received on the suspect's decode node before the suspect? ``N`` comes from the
case itself (:func:`choose_window`): the records-since figure of the findings the product test
already confirms, at :data:`WINDOW_QUANTILE`. A chance candidate's source is one of the records
searched, any of them alike, so it falls in that window with probability ``N / records searched``:

    expected_by_chance_in_window = expected_by_chance x N / records searched

Two tests on one candidate are two chances to be fooled, so they share the error budget
(Bonferroni with weights): the product test gets 1 - :data:`~forensics.match.chance.WINDOW_SHARE`
of it, the window test the rest. A finding's ``expected_by_chance_with_mechanism`` is, when this test
runs, ``min(product E / (1 - share), window E / share)`` (:func:`combine`): over a null search, at most
(1 - share) t + share t = t chance candidates pass either test at a threshold t. The product test keeps
most of the budget because it alone carries findings whose source lies outside the window. When too few
findings are confirmed to place the window (:data:`MIN_CONFIRMED`), the test does not run and
nothing changes.

With gateway logs only (no decode node in the case), no record is placed on a node, but the gateway still
orders the requests, and the suspect's stale pages belong to one of the last requests of the case's
models the service received, on whichever node: a few dozen per node, so the nodes' number times that.
The test then asks whether the source is one of the last ``N`` records of the case's models received
before the suspect (``records_since_source_on_model``), ``N`` placed the same way by the findings the
text alone confirms, and the product test is the text's E-value itself (no node, no factor).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from forensics.match.chance import WINDOW_SHARE, either_test

#: Share of the confirmed findings' records-since figures the window covers. A confirmed finding's
#: source may also be an older copy of the text (a conversation resends itself), far back on the node;
#: a high quantile, not the maximum, keeps those from widening the window. Chosen over seeds 1-3 of
#: the realistic scenario (0.8, 0.85, 0.9 compared; benchmarks/quality.py) and checked on others.
WINDOW_QUANTILE = 0.85

#: Confirmed same-node findings needed to place the window; with fewer the test does not run.
MIN_CONFIRMED = 10


def choose_window(records_since: Sequence[int]) -> int | None:
    """The window ``N`` (records) from the records-since figures of the confirmed same-node findings,
    or None when there are fewer than :data:`MIN_CONFIRMED` of them."""
    ks = np.asarray([k for k in records_since if k >= 1], dtype=np.float64)
    if len(ks) < MIN_CONFIRMED:
        return None
    # "higher": the window is a whole number of records that covers at least the quantile.
    return int(np.quantile(ks, WINDOW_QUANTILE, method="higher"))


def window_evalue(expected: float, records_since: int | None, window: int | None, records_searched: int) -> float:
    """E-value of a candidate by the window test: ``expected x window / records searched`` when its source
    is one of the last ``window`` records on the suspect's node (``1 <= records_since <= window``), else inf."""
    if window is None or records_since is None or not 1 <= records_since <= window:
        return math.inf
    return expected * window / max(records_searched, window)


def combine(with_mechanism: float, in_window: float, window: int | None) -> float:
    """The E-value the tiers use: the product test's alone when the window test does not run, else that of
    either test passing (:func:`forensics.match.chance.either_test`)."""
    if window is None:
        return with_mechanism
    return either_test(with_mechanism, in_window)


def record(window: int | None, confirmed: int, scope: str = "node") -> dict[str, Any]:
    """match.json's description of the test (``null.recent_occupants``). ``scope``: ``node`` (the records of the
    suspect's decode node) or ``models`` (gateway logs only: the records of the case's models, every node together)."""
    where = ("on the suspect's decode node" if scope == "node" else
             "among the records of the case's models the service received (gateway logs only: no decode node known)")
    if window is None:
        why = (f"{confirmed} findings confirmed by the product test had their source {where} "
               f"(< {MIN_CONFIRMED}): the window cannot be placed" if confirmed else
               f"no finding confirmed by the product test had its source {where}")
        return {"ran": False, "scope": scope, "why": why, "window_records": None, "confirmed_findings_used": confirmed}
    return {
        "ran": True,
        "scope": scope,
        "window_records": window,
        "window": (f"the last {window} records received on the suspect's decode node before it: the "
                   f"{WINDOW_QUANTILE:g} quantile of records_since_source_on_node over the {confirmed} findings the "
                   "product test confirms with their source on that node" if scope == "node" else
                   f"the last {window} records of the case's models the service received before the suspect, on any "
                   f"node (gateway logs only): the {WINDOW_QUANTILE:g} quantile of records_since_source_on_model over "
                   f"the {confirmed} findings the text alone confirms with their source on those models"),
        "confirmed_findings_used": confirmed,
        "expected_by_chance_in_window": "expected_by_chance x window_records / records searched (a chance "
                                        "match's source is any searched record alike)",
        "combined": f"expected_by_chance_with_mechanism = min({'product test' if scope == 'node' else 'the text'}'s "
                    f"E-value / {1 - WINDOW_SHARE:g}, expected_by_chance_in_window / {WINDOW_SHARE:g}), the two tests "
                    "sharing the error budget",
    }
