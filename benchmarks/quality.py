"""Benchmark: is the notification list right on realistic traffic? (about a minute per case on 2 cores)

    python benchmarks/quality.py [--seeds 1,2,3] [--formats litellm,openai-split] [--corpus ../shared/corpora]
                                 [--gateway-only] [--second-gateway as-sent|own-system-prompt]
                                 [--second-gateway-clock SECONDS] [--set KEY=VALUE ...]
                                 [--show-wrong 20] [--keep DIR] [--json]

For every seed and gateway format: simulate the realistic incident (``forensics simulate --scale
realistic``: 220 tenants, ~15,000 requests of real text with shared templates and popular
passages, chance overlaps left in), run the whole pipeline on it in this process
(``forensics.run.run``), and score the report against the simulator's truth
(``forensics.lab.evaluate.evaluate``). Then match the same case again with the old fixed rules
(``[match] tiering = "rules"``, given as a match override) and report it beside the default; when
the matcher does not know the ``tiering`` key, that row is marked unavailable.

Printed per case and pooled over all cases (counts summed, then divided): suspects, exposed and
recipient customers, (recipient request, source tenant) pairs, pair recall by the length of the
pair's longest fragment, findings on labelled hard negatives by kind, the control sample's
false-positive rate, the E-value calibration when match.json has a ``null`` section (observed vs
expected false positives per rule; evidence.csv's ``expected_by_chance`` summed against the rows
that are wrong), the recent-occupant test's window (or why it did not run) and, on the suspects'
candidates the truth calls chance, how often the source lay in that window against what the test
assumes (by copies of the passage the source customer sent), the E-value ranking's frontier
(pooled: of the pairs that a threshold on ``expected_by_chance_with_mechanism`` alone decides, how many
true pairs they hold, and the best recall any single threshold reaches at the pair-precision target),
each wrongly exposed customer with why, each missed one in review or with no candidate (and the
exposed-customer recall if every one in review were notified), the true pairs with no candidate at all and
how many of them share with their source one or two seeds of other shapes (shorter and spaced k-grams: what
another seed shape could reach), and the time of each step. The targets are printed next to the
figures.

``--second-gateway`` puts an API front door in front of each simulated LiteLLM incident's gateway
(``forensics.lab.frontdoor``): every call logged again, as split logs under its own request ids and account
names (``own-system-prompt``: with a system prompt of its own at the head; ``--second-gateway-clock SECONDS``: with its
clock that far ahead of the gateway's), which the ingest's fold of one exchange logged twice must undo; each case then
says how many requests the front door logged and how many the ingest folded.
``--gateway-only`` drops the engine logs from each simulated case file (a case with gateway logs alone: no
decode nodes, no engine signature); ``--set KEY=VALUE`` puts a ``[match]`` setting in it (repeatable), for
sweeps of a threshold with everything else as a case team would run it.

The corpus is read at run time (default ``../shared/corpora`` next to the repository); without it
the benchmark says so and exits 0. Nothing is written outside a temporary folder (``--keep DIR``
keeps the simulated incidents and reports there).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import shlex
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from forensics.errors import ConfigError

#: The checkout this script is in: the corpus folder is looked for next to it.
REPO = Path(__file__).resolve().parent.parent

#: (what, threshold, higher is better); the issue's targets for the notification list.
TARGETS = {
    "exposed_precision": 0.98,
    "exposed_recall": 0.98,
    "pair_precision": 0.98,
    "pair_recall_16+": 0.98,
    "pair_recall_8-15": 0.90,
    "hard_negative_findings": 0,
    # Observed chance matches on the null within this factor of the count the E-values expect.
    "null_calibration": 2.0,
}
#: Below this many chance matches expected, a count cannot show a factor of 2 (Poisson noise alone spans it):
#: such a point is judged consistent when its count is a likely one (central 95%) for some mean within the factor.
CALIBRATION_MIN_EXPECTED = 5.0
BUCKETS = (("4-7", "4-7 tokens"), ("8-15", "8-15 tokens"), ("16+", "16+ tokens"))
OLD_RULES = {"tiering": "rules"}


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def _fmt(v: float | None, width: int = 5) -> str:
    return f"{'n/a':>{width}}" if v is None else f"{v:>{width}.3f}"


def _null_section(match_json: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Observed vs expected false positives per rule from match.json's ``null`` section, or None when absent.

    The section's layout is the sibling work's: any object in it (at any depth) holding both
    ``observed_false_positives`` and ``expected_false_positives`` is one rule, named by its path.
    """
    null = match_json.get("null")
    if not isinstance(null, dict):
        return None
    rules: list[dict[str, Any]] = []

    def walk(obj: Any, path: list[str]) -> None:
        if isinstance(obj, dict):
            if "evalue_at_most" in obj and "observed" in obj:  # a two-fold calibration table
                # calibration: the text's E over the whole null; calibration_of_controls_with_mechanism: the
                # control responses, also scored with their decode-node evidence (the figure the tiers use).
                table = "controls" if any("controls" in x for x in path) else "held-out"
                rules.append({"rule": f"{table} E<={obj['evalue_at_most']:g}", "observed": obj["observed"],
                              "expected": obj["expected"]})
                if "observed_with_mechanism" in obj:
                    rules.append({"rule": f"{table} with mechanism E<={obj['evalue_at_most']:g}",
                                  "observed": obj["observed_with_mechanism"], "expected": obj["expected"]})
                return
            if "observed_false_positives" in obj and "expected_false_positives" in obj:
                rules.append({"rule": "/".join(path) or "all", "observed": obj["observed_false_positives"],
                              "expected": obj["expected_false_positives"]})
                return
            for k, v in sorted(obj.items()):
                walk(v, path + [str(k)])
        elif isinstance(obj, list):
            for i, v in enumerate(obj):
                name = v.get("rule") or v.get("name") if isinstance(v, dict) else None
                walk(v, path + [str(name if name is not None else i)])

    walk(null, [])
    return rules


def _expected_by_chance(report_dir: Path, truth: dict[str, Any]) -> dict[str, Any] | None:
    """evidence.csv's ``expected_by_chance`` summed over the cross-tenant rows, against the rows that are wrong."""
    path = report_dir / "evidence.csv"
    if not path.is_file():
        return None
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        fields = reader.fieldnames or []
        if "expected_by_chance" not in fields:
            return None
        # The figure the tiers use: the text's E-value times the decode-node evidence's factor.
        column = "expected_by_chance_with_mechanism" if "expected_by_chance_with_mechanism" in fields else "expected_by_chance"
        rows = [r for r in reader if r.get("relation", "cross_tenant") == "cross_tenant"
                and r["source_tenant_id"] != r["recipient_tenant_id"]]
    true_pairs = {(f["recipient_request_id"], f["source_tenant_id"]) for f in truth["fragments"] if f["is_leak"]}
    expected = 0.0
    for r in rows:
        try:
            expected += float(r[column] or 0)
        except ValueError:
            pass
    wrong = sum((r["recipient_request_id"], r["source_tenant_id"]) not in true_pairs for r in rows)
    return {"rows": len(rows), "expected_by_chance": round(expected, 4), "wrong_rows": wrong}


#: review.csv's reason for a candidate that only the E-value threshold keeps off the list.
OVER_THRESHOLD = "expected_by_chance_with_mechanism "


#: The report files that hold the candidates: the list's and the review queue's.
CANDIDATE_FILES = ("evidence.csv", "review.csv")


def _cross_tenant_rows(report_dir: Path) -> Iterator[dict[str, str]]:
    """The cross-tenant rows of the report's candidate files that exist, the list's first."""
    for name in CANDIDATE_FILES:
        path = report_dir / name
        if not path.is_file():
            continue
        with open(path, encoding="utf-8", newline="") as fh:
            for r in csv.DictReader(fh):
                if r.get("relation", "cross_tenant") == "cross_tenant" and r["source_tenant_id"] != r["recipient_tenant_id"]:
                    yield r


def ranking(report_dir: Path, truth: dict[str, Any]) -> dict[str, Any] | None:
    """Every cross-tenant pair that a threshold on ``expected_by_chance_with_mechanism`` alone decides (notified,
    or in review for that figure only), with its smallest E-value and whether the truth calls it a leak.

    Pooled, it gives the ranking's frontier (:func:`frontier`): the best any threshold on that figure could do
    with the candidates the matcher found and every other rule as it is, and how many true pairs have a
    candidate at all. A missed pair beyond that ceiling needs another candidate, not another threshold.
    """
    if not all((report_dir / name).is_file() for name in CANDIDATE_FILES):
        return None
    best: dict[tuple[str, str, str], float] = {}
    for r in _cross_tenant_rows(report_dir):
        why = r.get("why_not_notified") or ""
        if why and not why.startswith(OVER_THRESHOLD):
            continue
        try:
            e = float(r["expected_by_chance_with_mechanism"])
        except (KeyError, ValueError):
            return None  # a report without the evidence model
        key = (r["recipient_request_id"], r["recipient_tenant_id"], r["source_tenant_id"])
        best[key] = min(e, best.get(key, e))
    true_pairs = {(f["recipient_request_id"], f["recipient_tenant_id"], f["source_tenant_id"])
                  for f in truth["fragments"] if f["is_leak"]}
    return {"truth": len(true_pairs), "candidates": sorted([e, k in true_pairs] for k, e in best.items())}


def frontier(rankings: list[dict[str, Any]], precision: float) -> dict[str, Any] | None:
    """The largest pair recall any one threshold on the E-value reaches at ``precision`` or better, over the
    pooled ``rankings`` (:func:`ranking`), and the recall ceiling of the candidates themselves."""
    if not rankings:
        return None
    truth = sum(r["truth"] for r in rankings)
    cands = sorted((e, t) for r in rankings for e, t in r["candidates"])
    best: dict[str, Any] = {"threshold": None, "precision": None, "recall": 0.0}
    tp = fp = 0
    for i, (e, t) in enumerate(cands):
        tp, fp = tp + t, fp + (not t)
        if (i + 1 == len(cands) or cands[i + 1][0] > e) and tp / (tp + fp) >= precision and tp / truth > best["recall"]:
            best = {"threshold": e, "precision": round(tp / (tp + fp), 4), "recall": round(tp / truth, 4)}
    return {"truth": truth, "true_with_candidate": sum(t for _, t in cands),
            "ceiling": _ratio(sum(t for _, t in cands), truth), "best": best}


#: Copies of the passage the source customer sent (1 + other_source_requests), as the window check groups them.
COPY_CLASSES = ((1, 1, "1"), (2, 3, "2-3"), (4, 7, "4-7"), (8, 10**9, "8+"))

#: review.csv's reason for a pair explained away by a stronger one (not a candidate in its own right).
EXPLAINED = "the same response text matches another customer's text more strongly"


def window_check(report_dir: Path, case_dir: Path, truth: dict[str, Any]) -> dict[str, Any] | None:
    """The recent-occupant test's assumption, checked where the truth says a candidate is chance.

    The test takes a chance candidate's source to be any searched record alike, so it lies among the last
    ``window`` records on the suspect's decode node with probability ``window / records searched``. Over the
    suspects' candidates that are no leak (evidence.csv and review.csv, cross-tenant, not explained away by a
    stronger pair), count those whose source lies in the window against that expectation, by how many copies
    of the passage the source customer sent. None when the test did not run.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from forensics.match.findings import record_facts

    match_json = json.loads((report_dir / "match.json").read_text(encoding="utf-8"))
    recent = (match_json.get("null") or {}).get("recent_occupants") or {}
    window = recent.get("window_records") if recent.get("ran") else None
    if not window:
        return None
    # Gateway logs only: the window counts the records of the case's models, every node together.
    since_column = "records_since_source_on_model" if recent.get("scope") == "models" else "records_since_source_on_node"
    path = case_dir / "exchanges.parquet"
    facts = record_facts(path, set())  # the records' times, as the match stage counts the records searched
    table = pq.read_table(path, columns=["request_id", "tenant_id", "received_at", "completed_at"])
    # A response's search covers the records received before it completed (else before it was received).
    when_us = pc.coalesce(table.column("completed_at"), table.column("received_at")).cast(
        pa.timestamp("us", tz="UTC")).cast(pa.int64())
    deadline = dict(zip(zip(table.column("request_id").to_pylist(), table.column("tenant_id").to_pylist()),
                        when_us.to_pylist()))
    leaks = {(f["recipient_request_id"], f["source_tenant_id"]) for f in truth["fragments"] if f["is_leak"]}
    classes = {label: {"candidates": 0, "in_window": 0, "expected": 0.0} for _, _, label in COPY_CLASSES}
    for r in _cross_tenant_rows(report_dir):
        if ((r["recipient_request_id"], r["source_tenant_id"]) in leaks
                or (r.get("why_not_notified") or "").startswith(EXPLAINED)):
            continue
        when = deadline.get((r["recipient_request_id"], r["recipient_tenant_id"] or None))
        if when is None:
            continue
        searched = facts.records_before(when)
        copies = 1 + int(r.get("other_source_requests") or 0)
        label = next(lab for lo, hi, lab in COPY_CLASSES if lo <= copies <= hi)
        since = int(r[since_column]) if r.get(since_column) else None
        c = classes[label]
        c["candidates"] += 1
        c["in_window"] += int(since is not None and 1 <= since <= window)
        c["expected"] += window / max(searched, window)
    total = {k: sum(c[k] for c in classes.values()) for k in ("candidates", "in_window", "expected")}
    return {"window_records": window, **total, "by_copies": classes}


#: Seed shapes the no-candidate check tries ("1": a token that must match, "0": one that may differ); the matcher's is
#: the first (five tokens in a row). The spaced ones survive a substituted word under a "0".
SEED_SHAPES = ("11111", "1111", "110111", "111011", "11011")


def _seeds(hashes: Any, shape: str) -> set[int]:
    """The hashes of every placement of ``shape`` over the token ``hashes`` (one text)."""
    import numpy as np

    picks = [i for i, c in enumerate(shape) if c == "1"]
    m = len(hashes) - len(shape) + 1
    if m <= 0:
        return set()
    out = np.zeros(m, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i in picks:
            out = out * np.uint64(0x9E3779B97F4A7C15) + hashes[i : i + m]
    return set(out.tolist())


def seed_reach(report_dir: Path, case_dir: Path, truth: dict[str, Any]) -> dict[str, Any] | None:
    """The true pairs with no candidate at all (no row of evidence.csv or review.csv names them), by the length of
    their longest fragment, and how many of them share with their source at least one seed, and at least two, of
    each shape in :data:`SEED_SHAPES` (the matcher's tokens, fragment against the source span the truth gives).

    What another seed shape could reach, measured before building it: a pair no shape reaches needs more than
    seeds, and one seed of four tokens is weak evidence on its own. Seeds are counted over all the pair's
    fragments, each tokenized on its own; a fragment whose recipient or source record the case lacks (a split
    log that lost a half) reaches nothing.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from forensics.match.fingerprint import tokenize_many

    path = case_dir / "exchanges.parquet"
    if not path.is_file():
        return None
    # Pairs by (recipient request, recipient tenant, source tenant), as ranking() keys them: two customers may
    # send the same request id.
    named = {(r["recipient_request_id"], r["recipient_tenant_id"], r["source_tenant_id"])
             for r in _cross_tenant_rows(report_dir)}
    pairs: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for f in truth["fragments"]:
        key = (f["recipient_request_id"], f["recipient_tenant_id"], f["source_tenant_id"])
        if f["is_leak"] and key not in named:
            pairs.setdefault(key, []).append(f)
    wanted = {(f["recipient_request_id"], f["recipient_tenant_id"]) for fs in pairs.values() for f in fs}
    wanted |= {(f["source_request_id"], f["source_tenant_id"]) for fs in pairs.values() for f in fs}
    texts: dict[tuple[str, str], dict[str, str]] = {}
    # Only the records the pairs name become Python strings (the case holds every prompt of the incident).
    table = pq.read_table(path, columns=["request_id", "tenant_id", "prompt_text", "response_text"])
    table = table.filter(pc.is_in(table.column("request_id"), value_set=pa.array(sorted({k[0] for k in wanted}), pa.string())))
    for row in table.to_pylist():
        if (row["request_id"], row["tenant_id"]) in wanted:
            texts[(row["request_id"], row["tenant_id"])] = {"prompt": row["prompt_text"] or "", "response": row["response_text"] or ""}
    classes: dict[str, dict[str, Any]] = {short: {"no_candidate": 0, **{shape: {"one": 0, "two": 0} for shape in SEED_SHAPES}}
                                          for short, _ in BUCKETS}
    for fs in pairs.values():
        longest = max(f["tokens"] for f in fs)
        c = classes["16+" if longest >= 16 else "8-15" if longest >= 8 else "4-7"]
        c["no_candidate"] += 1
        shared = dict.fromkeys(SEED_SHAPES, 0)
        for f in fs:
            recipient = texts.get((f["recipient_request_id"], f["recipient_tenant_id"]))
            source = texts.get((f["source_request_id"], f["source_tenant_id"]))
            if recipient is None or source is None:
                continue
            a = tokenize_many([recipient["response"][f["recipient_start"]:f["recipient_end"]]])[0].hash
            b = tokenize_many([source[f["source_kind"]][f["source_start"]:f["source_end"]]])[0].hash
            for shape in SEED_SHAPES:
                shared[shape] += len(_seeds(a, shape) & _seeds(b, shape))
        for shape, n in shared.items():
            c[shape]["one"] += int(n >= 1)
            c[shape]["two"] += int(n >= 2)
    return classes


def _reach_line(reach: dict[str, Any] | None) -> str:
    if not reach:
        return "n/a (no case folder)"
    parts = []
    for short, c in reach.items():
        if c["no_candidate"]:
            parts.append(f"{short} tokens {c['no_candidate']}: " + ", ".join(
                f"{shape} {c[shape]['one']}/{c[shape]['two']}" for shape in SEED_SHAPES))
    return "; ".join(parts) or "every true pair has a candidate"


def _window_line(w: dict[str, Any] | None) -> str:
    if not w:
        return "n/a (the recent-occupant test did not run)"
    parts = [f"{k} copies {c['in_window']}/{c['expected']:.1f} of {c['candidates']}" for k, c in w["by_copies"].items()]
    return (f"{w['in_window']} in the window vs {w['expected']:.1f} expected, of {w['candidates']} candidates "
            "(by copies of the passage the source customer sent: " + ", ".join(parts) + ")")


def _recent_occupants(match_json: dict[str, Any]) -> str:
    """The recent-occupant test of match.json's ``null`` in words: its window, or why it did not run."""
    null = match_json.get("null")
    recent = null.get("recent_occupants") if isinstance(null, dict) else None
    if not isinstance(recent, dict):
        return "n/a (match.json does not record it)"
    if not recent.get("ran"):
        return f"not run ({recent.get('why')})"
    if recent.get("scope") == "models":
        return (f"window of {recent.get('window_records')} records of the case's models (gateway logs only), placed by "
                f"{recent.get('confirmed_findings_used')} findings the text alone confirms")
    return (f"window of {recent.get('window_records')} records, placed by {recent.get('confirmed_findings_used')} "
            "confirmed same-node findings")


def score(ev: dict[str, Any], truth: dict[str, Any], report_dir: Path, seconds: float) -> dict[str, Any]:
    """The figures of one scored report (counts kept, so that cases can be pooled)."""
    f, c = ev["findings"], ev["customers"]
    match_json = json.loads((report_dir / "match.json").read_text(encoding="utf-8"))
    hn = f["hard_negative_findings"]
    return {
        "seconds": round(seconds, 1),
        "tiering": match_json.get("parameters", {}).get("tiering"),
        "suspects": {k: ev["suspects"][k] for k in ("truth", "predicted", "true_positives", "precision", "recall")},
        "exposed": {k: c["exposed"][k] for k in ("truth", "predicted", "true_positives", "precision", "recall")},
        "recipients": {k: c["recipient"][k] for k in ("truth", "predicted", "true_positives", "precision", "recall")},
        "pairs": {k: f[k] for k in ("truth", "predicted", "true_positives", "precision", "recall")},
        "pair_recall_by_length": {short: f["pair_recall_by_length"][name] for short, name in BUCKETS},
        "fragment_recall_by_length": f["fragment_recall_by_length"],
        "fragments_located": f["fragments_located"],
        "row_precision_by_tier": f["row_precision_by_tier"],
        "hard_negative_findings": {k: v["with_findings"] for k, v in hn["by_kind"].items()},
        "hard_negatives_labelled": {k: v["labelled"] for k, v in hn["by_kind"].items()},
        "false_pairs_by_location": f["false_pairs_by_location"],
        "false_positives_by_kind": f["false_positives_by_kind"],
        "control": {k: match_json.get("control", {}).get(k) for k in ("size", "responses_with_findings", "false_positive_rate")},
        "null": _null_section(match_json),
        "recent_occupants": _recent_occupants(match_json),
        "expected_by_chance": _expected_by_chance(report_dir, truth),
        "ranking": ranking(report_dir, truth),
        "exposed_wrong": [{"tenant_id": w["tenant_id"], "why": _why_line(w["findings"])} for w in c["exposed_wrong"]],
        "exposed_missed": missed_customers(c["exposed_missed"], report_dir),
    }


def missed_customers(missed: list[dict[str, Any]], report_dir: Path) -> list[dict[str, Any]]:
    """The exposed customers the list missed, each with its leaks' sizes and whether ``review.csv`` holds a
    candidate naming it on one of the responses its text leaked into (``in_review``: a threshold or rule kept it
    off the list; otherwise the matcher found no candidate there at all)."""
    # review.csv's rows are the ones with a reason they were not notified (evidence.csv has no such column).
    reviewed = {(r["recipient_request_id"], r["source_tenant_id"]) for r in _cross_tenant_rows(report_dir)
                if r.get("why_not_notified")}
    return [{"tenant_id": m["tenant_id"], "fragment_tokens": [x["tokens"] for x in m["fragments"]],
             "in_review": any((x["recipient_request_id"], m["tenant_id"]) in reviewed for x in m["fragments"])}
            for m in missed]


def missed_breakdown(exposed: dict[str, Any], missed: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the missed exposed customers are: in review, or with no candidate (by their longest leak), and the
    exposed-customer recall if every one in review were notified (the ceiling of the candidates found)."""
    in_review = sum(1 for m in missed if m.get("in_review"))
    none = [max(m["fragment_tokens"], default=0) for m in missed if not m.get("in_review")]
    return {"missed": len(missed), "in_review": in_review, "no_candidate": len(none),
            "no_candidate_longest_under_8": sum(1 for n in none if n < 8),
            "no_candidate_longest_8_15": sum(1 for n in none if 8 <= n < 16),
            "recall_ceiling": _ratio(exposed["true_positives"] + in_review, exposed["truth"])}


def _missed_line(b: dict[str, Any] | None) -> str:
    if not b or not b["missed"]:
        return "missed exposed customers: none"
    return (f"missed exposed customers: {b['missed']}: {b['in_review']} in review.csv (exposed recall "
            f"{_fmt(b['recall_ceiling']).strip()} if every one were notified), {b['no_candidate']} with no candidate "
            f"({b['no_candidate_longest_under_8']} whose longest leak is under 8 tokens, {b['no_candidate_longest_8_15']} "
            "of 8-15)")


WHERE = {"outside_fragments": "chance overlap in garbage text", "leak_of_another_tenant": "inside another tenant's leak",
         "not_a_suspect": "on a non-suspect", "shared_boilerplate": "on a labelled shared-boilerplate quote",
         "self_tenant": "on a labelled own-tenant fragment", "later_prompt_only": "names the tenant of a later prompt"}


def _why_line(findings: list[dict[str, Any]]) -> str:
    """One line on why a customer was wrongly named exposed: where the findings' spans lie, by rule and size."""
    by_where: dict[str, dict[str, list[int]]] = {}
    for x in findings:
        rules = by_where.setdefault(WHERE.get(x["where"], x["where"]), {})
        rules.setdefault(x["tier_rule"] or x["tier"] or "?", []).append(x["matched_tokens"] or 0)
    parts = []
    for where, rules in sorted(by_where.items()):
        n = sum(len(v) for v in rules.values())
        detail = ", ".join(f"{rule} x{len(t)} ({min(t)}-{max(t)} tokens)" if min(t) != max(t) else f"{rule} x{len(t)} ({t[0]} tokens)"
                           for rule, t in sorted(rules.items()))
        parts.append(f"{where}: {n} finding{'s' if n > 1 else ''} [{detail}]")
    return "; ".join(parts) or "no evidence row names it"


def edit_case_file(path: Path, gateway_only: bool, settings: dict[str, Any]) -> None:
    """Rewrite the simulated case file ``path``: without its engine-log inputs (``gateway_only``), with the
    ``[match]`` ``settings`` added. Refuses a case file it cannot edit so (no gateway input left, or a
    ``[match]`` table already there) rather than measure something else."""
    from forensics.lab.simulate import ENGINE_FORMATS  # the engine logs' formats

    text = path.read_text(encoding="utf-8")
    if gateway_only:
        # Cut at every table header; an [[inputs]] table holds its own keys up to the next header.
        parts = re.split(r"(?m)^(?=\[)", text)
        text = "".join(part for part in parts if not (part.startswith("[[inputs]]")
                                                      and tomllib.loads(part)["inputs"][0].get("format") in ENGINE_FORMATS))
    if settings:
        if "match" in tomllib.loads(text):
            raise SystemExit(f"{path} already has a [match] table: --set cannot add to it")
        text += "\n[match]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in sorted(settings.items()))
    inputs = tomllib.loads(text).get("inputs", [])
    if not inputs or (gateway_only and any(i.get("format") in ENGINE_FORMATS for i in inputs)):
        raise SystemExit(f"{path}: could not leave only gateway inputs in it")
    path.write_text(text, encoding="utf-8")


def _setting(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--set``: the value as TOML reads it (a number, true/false, or a quoted string)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a TOML value (quote a string)") from None
    # What a [match] setting can be, and what edit_case_file writes back as TOML: no dates, tables or arrays.
    if not isinstance(parsed, bool | int | float | str) or (isinstance(parsed, float) and not math.isfinite(parsed)):
        raise argparse.ArgumentTypeError(f"{value!r} is not a setting's TOML value: a finite number, true or false, or a "
                                         "quoted string")
    return key.strip(), parsed


def _replica_of(files: list[str]) -> str:
    """Which log of a case split between two replicas (``forensics.lab.replicas``) the ``files`` of a moved clock are."""
    from forensics.lab.replicas import REPLICA_NAME

    names = [Path(f).name for f in files]
    if any(n.startswith(REPLICA_NAME) for n in names):
        return "replica b"
    if any(n.startswith("litellm-callbacks-") for n in names):
        return "replica a"
    return names[0] if names else "(no file)"


def run_case(seed: int, fmt: str, corpus: Path | None, work: Path, gateway_only: bool = False,
             settings: dict[str, Any] | None = None, scale: str = "realistic",
             second_gateway: str | None = None, second_gateway_clock: float = 0.0,
             replica_clock: float | None = None) -> dict[str, Any]:
    """Simulate, run, evaluate; then match again with the old rules and evaluate that. With ``second_gateway``
    (``as-sent`` or ``own-system-prompt``), a front door logs every call again before the run; with ``replica_clock``,
    half the calls are logged by a second gateway replica whose clock is that many seconds ahead."""
    from forensics import api
    from forensics.lab.evaluate import evaluate
    from forensics.lab.simulate import simulate
    from forensics.report import report
    from forensics.run import run

    sim = work / "sim"
    t0 = time.perf_counter()
    simulated = simulate(sim, seed=seed, scale=scale, fmt=fmt, corpus=corpus, force=True)
    t_sim = time.perf_counter() - t0
    truth = json.loads((sim / "truth.json").read_text(encoding="utf-8"))
    if gateway_only or settings:
        edit_case_file(sim / "case.toml", gateway_only, settings or {})
    front_door = None
    if second_gateway is not None:
        from forensics.lab.frontdoor import add_front_door

        front_door = add_front_door(sim, own_system_prompt=second_gateway == "own-system-prompt",
                                    clock_offset=second_gateway_clock)
    replica = None
    if replica_clock is not None:
        from forensics.lab.replicas import split_replicas

        replica = split_replicas(sim, clock_offset=replica_clock)
    out: dict[str, Any] = {"seed": seed, "format": fmt, "simulate_seconds": round(t_sim, 1),
                           "counts": {k: simulated.counts.get(k) for k in ("tenants", "requests", "suspects", "leak_fragments",
                                                                           "finding_pairs", "hard_negatives", "bytes")}}
    t0 = time.perf_counter()
    result = run(sim / "case.toml", work / "report")
    t_run = time.perf_counter() - t0
    report_dir = Path(result.report.report_dir)
    t0 = time.perf_counter()
    ev = evaluate(sim / "truth.json", report_dir).to_json()
    t_eval = time.perf_counter() - t0
    out["stages"] = {s["stage"]: s["seconds"] for s in result.stages}
    if front_door is not None:
        manifest = json.loads((Path(result.case_dir) / "manifest.json").read_text(encoding="utf-8"))
        out["second_gateway"] = {"kind": second_gateway, "clock": second_gateway_clock, "logged": front_door,
                                 "folded": (manifest.get("logged_twice") or {}).get("rows", 0)}
    if replica is not None:
        manifest = json.loads((Path(result.case_dir) / "manifest.json").read_text(encoding="utf-8"))
        out["replica"] = {"clock": replica_clock, "logged": replica, "read": sorted(
            f"{_replica_of(c['files'])} {c['offset_seconds']:+,.3f} s" for c in manifest.get("clock_offsets", []))}
    out["evaluate_seconds"] = round(t_eval, 1)
    out["default"] = score(ev, truth, report_dir, t_run)
    out["default"]["window_chance"] = window_check(report_dir, Path(result.case_dir), truth)
    out["default"]["seed_reach"] = seed_reach(report_dir, Path(result.case_dir), truth)
    try:
        t0 = time.perf_counter()
        api.match(result.case_dir, result.config, overrides=dict(OLD_RULES))
        rules_report = report(result.case_dir, result.config, work / "report-rules")
        rules_dir = Path(rules_report.report_dir)
        ev_rules = evaluate(sim / "truth.json", rules_dir).to_json()
        out["rules"] = score(ev_rules, truth, rules_dir, time.perf_counter() - t0)
    except ConfigError as exc:
        if "unknown key" not in str(exc):
            raise
        out["rules"] = None
        out["rules_unavailable"] = f"the matcher refused [match] tiering = \"rules\" ({exc.message})"
    return out


def pool(cases: list[dict[str, Any]], row: str) -> dict[str, Any] | None:
    """Counts summed over the cases, ratios recomputed."""
    rows = [c[row] for c in cases if c.get(row)]
    if not rows:
        return None
    pooled: dict[str, Any] = {"cases": len(rows)}
    for key in ("suspects", "exposed", "recipients", "pairs"):
        tp = sum(r[key]["true_positives"] for r in rows)
        pred = sum(r[key]["predicted"] for r in rows)
        tru = sum(r[key]["truth"] for r in rows)
        pooled[key] = {"truth": tru, "predicted": pred, "true_positives": tp, "precision": _ratio(tp, pred), "recall": _ratio(tp, tru)}
    pooled["pair_recall_by_length"] = {}
    for short, _ in BUCKETS:
        found = sum(r["pair_recall_by_length"][short]["found"] for r in rows)
        pairs = sum(r["pair_recall_by_length"][short]["pairs"] for r in rows)
        pooled["pair_recall_by_length"][short] = {"found": found, "pairs": pairs, "recall": _ratio(found, pairs)}
    for key in ("hard_negative_findings", "hard_negatives_labelled", "false_pairs_by_location"):
        acc: dict[str, int] = {}
        for r in rows:
            for k, v in r[key].items():
                acc[k] = acc.get(k, 0) + v
        pooled[key] = dict(sorted(acc.items()))
    nulls = [r["null"] for r in rows if r["null"] is not None]
    if nulls:
        acc2: dict[str, list[float]] = {}
        for rules in nulls:
            for rule in rules:
                a = acc2.setdefault(rule["rule"], [0.0, 0.0])
                a[0] += float(rule["observed"] or 0)
                a[1] += float(rule["expected"] or 0)
        pooled["null"] = [{"rule": k, "observed": v[0], "expected": round(v[1], 4)} for k, v in sorted(acc2.items())]
    else:
        pooled["null"] = None
    chance = [r["expected_by_chance"] for r in rows if r["expected_by_chance"]]
    pooled["expected_by_chance"] = ({"rows": sum(x["rows"] for x in chance), "wrong_rows": sum(x["wrong_rows"] for x in chance),
                                     "expected_by_chance": round(sum(x["expected_by_chance"] for x in chance), 4)} if chance else None)
    checked = [r["window_chance"] for r in rows if r.get("window_chance")]
    if checked:
        by = {label: {k: sum(w["by_copies"][label][k] for w in checked) for k in ("candidates", "in_window", "expected")}
              for _, _, label in COPY_CLASSES}
        pooled["window_chance"] = {"window_records": None, "by_copies": by,
                                   **{k: sum(c[k] for c in by.values()) for k in ("candidates", "in_window", "expected")}}
    else:
        pooled["window_chance"] = None
    reach = [r["seed_reach"] for r in rows if r.get("seed_reach")]
    pooled["seed_reach"] = ({short: {"no_candidate": sum(x[short]["no_candidate"] for x in reach),
                                     **{shape: {k: sum(x[short][shape][k] for x in reach) for k in ("one", "two")}
                                        for shape in SEED_SHAPES}} for short, _ in BUCKETS} if reach else None)
    pooled["exposed_missed"] = missed_breakdown(pooled["exposed"], [m for r in rows for m in r["exposed_missed"]])
    pooled["frontier"] = frontier([r["ranking"] for r in rows if r.get("ranking")], TARGETS["pair_precision"])
    pooled["seconds"] = round(sum(r["seconds"] for r in rows), 1)
    return pooled


def _poisson_quantile(mean: float, q: float) -> int:
    """The smallest count k with P(X <= k) >= q for X ~ Poisson(``mean``)."""
    k, term = 0, math.exp(-mean)
    total = term
    while total < q:
        k += 1
        term *= mean / k
        total += term
    return k


def calibration_verdict(null: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """Whether every point of the null's calibration (observed vs expected chance matches, pooled) lies within
    the target's factor of what the E-values expect; None without a null section.

    A point with at least :data:`CALIBRATION_MIN_EXPECTED` expected is judged on its ratio; one with fewer, on
    whether its count is a likely one (central 95%) for a mean between expected / factor and expected x factor.
    """
    if not null:
        return None
    factor = TARGETS["null_calibration"]
    outside, judged, small = [], 0, 0
    for row in null:
        expected, observed = float(row["expected"] or 0), float(row["observed"] or 0)
        if expected <= 0:
            continue
        if expected >= CALIBRATION_MIN_EXPECTED:
            judged += 1
            ok = expected / factor <= observed <= expected * factor
        else:
            small += 1
            ok = _poisson_quantile(expected / factor, 0.025) <= observed <= _poisson_quantile(expected * factor, 0.975)
        if not ok:
            outside.append(f"{row['rule']} {observed:g} vs {expected:.2f}")
    return {"met": not outside, "judged_on_ratio": judged, "judged_as_counts": small, "outside": outside}


def checks(p: dict[str, Any]) -> dict[str, bool | None]:
    """Which targets a (pooled) row meets (None: not measured)."""
    hn = sum(p["hard_negative_findings"].values())
    verdict = calibration_verdict(p.get("null"))
    return {
        "exposed_precision": None if p["exposed"]["precision"] is None else p["exposed"]["precision"] >= TARGETS["exposed_precision"],
        "exposed_recall": None if p["exposed"]["recall"] is None else p["exposed"]["recall"] >= TARGETS["exposed_recall"],
        "pair_precision": None if p["pairs"]["precision"] is None else p["pairs"]["precision"] >= TARGETS["pair_precision"],
        "pair_recall_16+": (None if p["pair_recall_by_length"]["16+"]["recall"] is None
                            else p["pair_recall_by_length"]["16+"]["recall"] >= TARGETS["pair_recall_16+"]),
        "pair_recall_8-15": (None if p["pair_recall_by_length"]["8-15"]["recall"] is None
                             else p["pair_recall_by_length"]["8-15"]["recall"] >= TARGETS["pair_recall_8-15"]),
        "hard_negative_findings": hn <= TARGETS["hard_negative_findings"],
        "null_calibration": None if verdict is None else verdict["met"],
    }


HEADER = (f"{'case':<22}{'matcher':<9}{'suspects P/R':>14}{'exposed P/R':>14}{'recipients P/R':>16}{'pairs P/R':>14}"
          f"{'pairs':>11}{'rec 4-7':>9}{'rec 8-15':>10}{'rec 16+':>9}{'hard neg':>10}{'control FP':>12}{'seconds':>9}")


def _row(name: str, label: str, r: dict[str, Any]) -> str:
    pr = lambda d: f"{_fmt(d['precision'])}/{_fmt(d['recall'])}"  # noqa: E731
    hn = sum(r["hard_negative_findings"].values())
    control = r.get("control", {}).get("false_positive_rate") if r.get("control") else None
    return (f"{name:<22}{label:<9}{pr(r['suspects']):>14}{pr(r['exposed']):>14}{pr(r['recipients']):>16}{pr(r['pairs']):>14}"
            f"{str(r['pairs']['true_positives']) + '/' + str(r['pairs']['predicted']):>11}"
            f"{_fmt(r['pair_recall_by_length']['4-7']['recall']):>9}{_fmt(r['pair_recall_by_length']['8-15']['recall']):>10}"
            f"{_fmt(r['pair_recall_by_length']['16+']['recall']):>9}{hn:>10}{_fmt(control, 12) if control is not None else '':>12}"
            f"{r['seconds']:>9.1f}")


def _target_row() -> str:
    t = TARGETS
    return (f"{'target':<22}{'':<9}{'':>14}{'>=' + str(t['exposed_precision']) + '/>=' + str(t['exposed_recall']):>14}{'':>16}"
            f"{'>=' + str(t['pair_precision']) + '/    ':>14}{'':>11}{'':>9}{'>=' + str(t['pair_recall_8-15']):>10}"
            f"{'>=' + str(t['pair_recall_16+']):>9}{'0':>10}{'':>12}{'':>9}")


def _frontier_line(f: dict[str, Any] | None) -> str:
    if f is None:
        return "the E-value ranking's frontier: n/a (no report with the evidence model)"
    b = f["best"]
    best = ("no threshold reaches it" if b["threshold"] is None else
            f"E <= {b['threshold']:.4g} gives P {b['precision']:.3f}, R {b['recall']:.3f}")
    return (f"the E-value ranking's frontier: the pairs a threshold on E alone decides hold {f['true_with_candidate']} of "
            f"{f['truth']} true pairs (recall ceiling {_fmt(f['ceiling']).strip()}); the best single threshold at pair precision >= "
            f"{TARGETS['pair_precision']:g}: {best}")


def _calibration_lines(r: dict[str, Any]) -> list[str]:
    lines = []
    if r["null"] is None:
        lines.append("    E-value calibration: n/a (match.json has no null section)")
    else:
        lines.append("    E-value calibration (observed vs expected false positives): "
                     + ", ".join(f"{x['rule']} {x['observed']} vs {float(x['expected'] or 0):.2f}" for x in r["null"]))
        v = calibration_verdict(r["null"])
        if v is not None:
            lines.append(f"    within a factor {TARGETS['null_calibration']:g}: {v['judged_on_ratio']} points judged on their ratio "
                         f"(>= {CALIBRATION_MIN_EXPECTED:g} expected), {v['judged_as_counts']} with fewer expected on whether "
                         "the count is a likely one (central 95%) for a mean within the factor; outside: "
                         + (", ".join(v["outside"]) or "none"))
    ebc = r["expected_by_chance"]
    if ebc is None:
        lines.append("    expected_by_chance: n/a (evidence.csv has no expected_by_chance column)")
    else:
        lines.append(f"    expected_by_chance summed over {ebc['rows']} cross-tenant rows: {ebc['expected_by_chance']:.2f}; "
                     f"rows wrong per truth: {ebc['wrong_rows']}")
    return lines


def print_report(cases: list[dict[str, Any]], pooled: dict[str, Any], show_wrong: int) -> None:
    """The human-readable tables (the command line was printed when the run began)."""
    print("\nrealistic scale: " + "; ".join(
        f"seed {c['seed']} {c['format']}: {c['counts']['tenants']} tenants, {c['counts']['requests']:,} requests, "
        f"{c['counts']['suspects']} suspects, {c['counts']['leak_fragments']} leak fragments in {c['counts']['finding_pairs']} pairs, "
        f"{c['counts']['hard_negatives']} labelled hard negatives" for c in cases))
    fronted = [c for c in cases if c.get("second_gateway")]
    if fronted:
        print("second gateway: " + "; ".join(
            f"seed {c['seed']} {c['format']}: a front door ({c['second_gateway']['kind']}"
            + (f", its clock {c['second_gateway']['clock']:+g} s" if c['second_gateway'].get('clock') else "") + ") logged "
            f"{c['second_gateway']['logged']:,} requests again, the ingest folded {c['second_gateway']['folded']:,}"
            for c in fronted))
    split = [c for c in cases if c.get("replica")]
    if split:
        print("second replica: " + "; ".join(
            f"seed {c['seed']} {c['format']}: a second gateway replica, its clock {c['replica']['clock']:+g} s, logged "
            f"{c['replica']['logged']:,} calls; its clock read as "
            + (", ".join(c['replica']['read']) if c['replica']['read'] else "right (none moved)")
            for c in split))
    print("\npairs = (recipient request, source tenant); rec 4-7/8-15/16+ = pair recall by the pair's longest fragment;")
    print("hard neg = labelled hard negatives that drew a wrong cross-tenant finding; P/R = precision/recall\n")
    print(HEADER)
    for c in cases:
        name = f"seed {c['seed']} {c['format']}"
        print(_row(name, "default", c["default"]))
        if c.get("rules"):
            print(_row("", "rules", c["rules"]))
        else:
            print(f"{'':<22}{'rules':<9}  unavailable: {c.get('rules_unavailable', 'not run')}")
    for label in ("default", "rules"):
        if pooled.get(label):
            print(_row("pooled", label, pooled[label]))
        elif label == "rules":
            print(f"{'pooled':<22}{'rules':<9}  unavailable (no case could run the old rules)")
    print(_target_row())
    for label in ("default", "rules"):
        p = pooled.get(label)
        if not p:
            continue
        ok = checks(p)
        print(f"\npooled {label}: targets " + ", ".join(f"{k} {'met' if v else 'MISSED' if v is not None else 'n/a'}" for k, v in ok.items()))
        print("    hard-negative findings by kind: " + ", ".join(
            f"{k} {p['hard_negative_findings'].get(k, 0)}/{n}" for k, n in p["hard_negatives_labelled"].items()))
        print("    false pairs by where their span lies: " + (", ".join(f"{k} {v}" for k, v in p["false_pairs_by_location"].items()) or "none"))
        for line in _calibration_lines(p):
            print(line)
        if label == "default":
            print("    recent-occupant test on the suspects' chance candidates (truth: no leak), source in the window: "
                  + _window_line(p.get("window_chance")))
            print("    " + _frontier_line(p.get("frontier")))
            print("    " + _missed_line(p.get("exposed_missed")))
            print("    true pairs with no candidate, by longest fragment, and how many share with their source >= 1 / >= 2 "
                  "seeds of each shape (1 = token that must match, 0 = may differ; 11111 is the matcher's): "
                  + _reach_line(p.get("seed_reach")))
    for c in cases:
        print(f"\nseed {c['seed']} {c['format']}: simulate {c['simulate_seconds']:.1f} s, run {c['default']['seconds']:.1f} s ("
              + ", ".join(f"{k} {v:.1f}" for k, v in c["stages"].items()) + f"), evaluate {c['evaluate_seconds']:.1f} s"
              + (f", old rules (match + report + evaluate) {c['rules']['seconds']:.1f} s" if c.get("rules") else ""))
        for label in ("default", "rules"):
            r = c.get(label)
            if not r:
                continue
            frag = r["fragment_recall_by_length"]
            print(f"  {label}: fragment recall by length " + ", ".join(f"{k} {v['found']}/{v['fragments']}" for k, v in frag.items())
                  + "; tiers (rows correct/rows) " + ", ".join(f"{k} {v['correct']}/{v['rows']}" for k, v in r["row_precision_by_tier"].items()))
            print("    hard-negative findings by kind: " + ", ".join(
                f"{k} {r['hard_negative_findings'].get(k, 0)}/{n}" for k, n in r["hard_negatives_labelled"].items()))
            for line in _calibration_lines(r):
                print(line)
            print(f"    recent-occupant test: {r.get('recent_occupants', 'n/a')}")
            if label == "default":
                print("    ... on the suspects' chance candidates, source in the window: " + _window_line(r.get("window_chance")))
            wrong = r["exposed_wrong"]
            print(f"    wrongly exposed customers: {len(wrong)}" + (":" if wrong else ""))
            for w in wrong[:show_wrong]:
                print(f"      {w['tenant_id']}: {w['why']}")
            if len(wrong) > show_wrong:
                print(f"      ... and {len(wrong) - show_wrong} more (--show-wrong N, or --json)")
            if r["exposed_missed"]:
                print(f"    missed exposed customers: {len(r['exposed_missed'])}: " + "; ".join(
                    f"{m['tenant_id']} (fragments of {', '.join(map(str, m['fragment_tokens']))} tokens; "
                    f"{'in review' if m['in_review'] else 'no candidate'})" for m in r["exposed_missed"]))


def main() -> int:
    """Run every case and print (or emit as JSON) the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=lambda v: [int(x) for x in v.split(",") if x], default=[1, 2, 3])
    ap.add_argument("--formats", type=lambda v: [x for x in v.split(",") if x], default=["litellm", "openai-split"])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpora")
    ap.add_argument("--show-wrong", type=int, default=20, help="wrongly exposed customers listed per case and matcher")
    ap.add_argument("--keep", type=Path, default=None, help="keep the simulated incidents and reports in this folder")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON instead of tables")
    ap.add_argument("--gateway-only", action="store_true", help="leave the engine logs out of every case")
    ap.add_argument("--second-gateway", choices=["as-sent", "own-system-prompt"], default=None,
                    help="a front door logs every call again under its own ids and account names (LiteLLM cases only)")
    ap.add_argument("--second-gateway-clock", type=float, default=0.0, metavar="SECONDS",
                    help="the front door's clock this many seconds ahead of the gateway's (a drifted host: 7; local time "
                         "written as UTC: -18000)")
    ap.add_argument("--replica-clock", type=float, default=None, metavar="SECONDS",
                    help="half the calls logged by a second gateway replica whose host's clock is this many seconds "
                         "ahead (LiteLLM cases only; 0: two replicas, both clocks right)")
    ap.add_argument("--scale", choices=["realistic", "small"], default="realistic",
                    help="small: the 12-customer incidents of the shipped sample's shape (no corpus needed): a check that "
                         "small cases, whose null of chance matches is small, stay right")
    ap.add_argument("--set", dest="settings", type=_setting, action="append", default=[], metavar="KEY=VALUE",
                    help="a [match] setting for every case (repeatable)")
    args = ap.parse_args()
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    if args.scale == "realistic" and not args.corpus.is_dir():
        print(f"$ {command}\ncorpus folder {args.corpus} not found: the realistic scale needs real text (--corpus DIR); nothing measured")
        return 0
    from forensics.lab.simulate import FORMATS

    bad = [f for f in args.formats if f not in FORMATS]
    if bad:
        ap.error(f"unknown format {bad[0]!r}: use {', '.join(FORMATS)}")
    if args.second_gateway_clock and not args.second_gateway:
        ap.error("--second-gateway-clock sets the clock of a front door: give --second-gateway too")
    if args.second_gateway and args.formats != ["litellm"]:
        ap.error("--second-gateway puts a front door before LiteLLM callbacks: give --formats litellm")
    if args.replica_clock is not None and args.formats != ["litellm"]:
        ap.error("--replica-clock splits LiteLLM callbacks between two replicas: give --formats litellm")
    if not args.json:
        print(f"$ {command}", flush=True)
    cases = []
    for seed in args.seeds:
        for fmt in args.formats:
            print(f"[seed {seed} {fmt}] simulate, run, evaluate, old rules ...", file=sys.stderr, flush=True)
            work = Path(tempfile.mkdtemp(prefix=f"quality-{seed}-{fmt}-"))
            try:
                cases.append(run_case(seed, fmt, args.corpus if args.scale == "realistic" else None, work,
                                      args.gateway_only, dict(args.settings), args.scale, args.second_gateway,
                                      args.second_gateway_clock, args.replica_clock))
            finally:
                if args.keep is not None:
                    dest = args.keep / f"seed{seed}-{fmt}"
                    shutil.rmtree(dest, ignore_errors=True)
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    shutil.move(str(work), dest)
                else:
                    shutil.rmtree(work, ignore_errors=True)
    pooled = {"default": pool(cases, "default"), "rules": pool(cases, "rules")}
    if args.json:
        print(json.dumps({"command": command, "targets": TARGETS, "cases": cases, "pooled": pooled,
                          "targets_met": {k: checks(v) for k, v in pooled.items() if v}}, indent=1, sort_keys=True))
    else:
        print_report(cases, pooled, args.show_wrong)
    return 0


if __name__ == "__main__":
    sys.exit(main())
