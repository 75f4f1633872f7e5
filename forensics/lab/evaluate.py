"""Score a report folder against a simulator's truth.json: precision and recall, stage by stage.

Reads the report files of spec/outputs.md (suspects.csv, evidence.csv, notifications.csv,
manifest.json); any may be missing, which is reported, and what is there is scored:

Requests are (request_id, tenant_id) throughout: two customers may send the same request id.

* suspects: the suspect requests. Requests the truth lists as engine anomalies (context
  corruption on an ordinary request) are counted apart, neither right nor wrong; false
  positives are broken down by the truth's scan-negative kind (over the ceiling outside the
  window, on another model, just below the ceiling).
* findings: (recipient request, source tenant) pairs of cross-tenant evidence rows against the
  truth's leak fragments; recall broken down by fragment length and damage, how many fragments
  were also located (a reported span overlaps the truth's), precision per tier, and false
  positives attributed to the hard negative that explains them. Also pair recall by the length of
  the pair's longest fragment (4-7, 8-15, 16+ tokens: the targets' buckets), the labelled hard
  negatives that drew a wrong cross-tenant finding, and where each wrong pair's span lies.
* customers: the exposed and recipient sets of notifications.csv; each wrong exposed customer
  with the findings that named it and why, each missed one with its fragments.
* quarantine: records the manifest says were quarantined against the bad lines the simulator wrote.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

from forensics.errors import InputError

REPORT_FILES = ("suspects.csv", "evidence.csv", "notifications.csv", "manifest.json")
LENGTH_BUCKETS = ((0, 16, "4-15 tokens"), (16, 64, "16-63 tokens"), (64, 256, "64-255 tokens"), (256, 10**12, "256+ tokens"))
#: Buckets of pair recall, by the pair's longest fragment (the recall targets are set per bucket).
PAIR_BUCKETS = ((0, 8, "4-7 tokens"), (8, 16, "8-15 tokens"), (16, 10**12, "16+ tokens"))


@dataclasses.dataclass
class Evaluation:
    """The scores, as a JSON-ready dict in ``data``."""

    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The scores for machines (``--json``)."""
        return self.data


def _pr(predicted: set[Any], truth: set[Any]) -> dict[str, Any]:
    tp = len(predicted & truth)
    return {
        "truth": len(truth),
        "predicted": len(predicted),
        "true_positives": tp,
        "precision": round(tp / len(predicted), 4) if predicted else None,
        "recall": round(tp / len(truth), 4) if truth else None,
    }


def _read_csv(path: Path, need: tuple[str, ...]) -> list[dict[str, str]]:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in need if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(f"column {missing[0]!r} is missing", file=path, line=1,
                                 fix=f"the header must name {', '.join(need)} (spec/outputs.md)")
            return list(reader)
    except UnicodeDecodeError:
        raise InputError("not UTF-8 text", file=path, fix="give the report folder written by forensics report") from None


def load_truth(path: Path) -> dict[str, Any]:
    """Read a simulator truth.json, with a clear error when it is not one."""
    if not path.is_file():
        raise InputError("truth file not found", file=path, fix="give --truth the truth.json the simulator wrote")
    try:
        truth = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"truth file is not JSON ({exc})", file=path, fix="give the truth.json the simulator wrote") from None
    if not isinstance(truth, dict) or not str(truth.get("schema", "")).startswith("forensics-sim-truth/"):
        raise InputError("not a simulator truth file (no forensics-sim-truth schema)", file=path, fix="give the truth.json the simulator wrote")
    return truth


def belonging_warnings(truth: dict[str, Any], report: Path) -> list[str]:
    """Why the truth file may belong to another simulation than the report (empty when it matches).

    The report's manifest names its case and hashes its input files; the truth names the case the
    simulator wrote (its name carries the seed) and hashes the files it wrote. Scores against the
    truth of another run are meaningless, so a mismatch is said before any number is read.
    """
    try:
        manifest = json.loads((report / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []  # an unreadable manifest is reported by the quarantine check below
    if not isinstance(manifest, dict):
        return []
    warnings = []
    truth_case = (truth.get("case") or {}).get("name")
    report_case = manifest.get("case")
    generator = truth.get("generator") or {}
    seed = f" (simulator seed {generator['seed']})" if "seed" in generator else ""
    if truth_case and report_case and truth_case != report_case:
        warnings.append(f"the truth file is for case {truth_case!r}{seed} but the report is of case {report_case!r}: "
                        "the scores below compare two different incidents")
    truth_files = {f.get("sha256") for f in truth.get("files", []) if isinstance(f, dict) and f.get("sha256")}
    report_files = {i.get("sha256") for i in manifest.get("inputs", []) or [] if isinstance(i, dict) and i.get("sha256")}
    if truth_files and report_files and not truth_files & report_files:
        warnings.append(f"none of the {len(report_files)} input files of the report is one of the {len(truth_files)} "
                        f"files the simulator wrote{seed}: the truth does not belong to this report")
    return warnings


def _bucket(tokens: int) -> str:
    return next(name for lo, hi, name in LENGTH_BUCKETS if lo <= tokens < hi)


def _damage_labels(f: dict[str, Any]) -> list[str]:
    if not f["damage"]:
        return ["none"]
    out = list(f["damage"])
    out.append("heavy (>=20% of words)" if f["damage_fraction"] >= 0.2 else "light (<20% of words)")
    return out


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def evaluate(truth_path: Path, report: Path) -> Evaluation:
    """Compare the report folder ``report`` with ``truth_path`` (a simulator truth.json)."""
    truth = load_truth(Path(truth_path))
    report = Path(report)
    if report.exists() and not report.is_dir():
        raise InputError("report path is not a folder", file=report, fix="give --report the report folder (reports/<case>/)")
    present = {name: (report / name).is_file() for name in REPORT_FILES}
    result: dict[str, Any] = {
        "truth": str(truth_path),
        "report": str(report),
        "missing": [n for n in REPORT_FILES if not present[n]],
        "case": truth.get("case", {}).get("name"),
        "warnings": belonging_warnings(truth, report) if present["manifest.json"] else [],
    }

    # ---- suspects ----------------------------------------------------------------------------
    true_suspects = {(s["request_id"], s["tenant_id"]) for s in truth["suspects"]}
    anomalies = {(a["request_id"], a["tenant_id"]) for a in truth.get("engine_anomalies", [])}
    scan_kind = {(n["request_id"], n["tenant_id"]): n["kind"] for n in truth.get("scan_negatives", [])}
    predicted_suspects: set[tuple[str, str]] = set()
    if present["suspects.csv"]:
        predicted_suspects = {(r["request_id"], r["tenant_id"])
                              for r in _read_csv(report / "suspects.csv", ("request_id", "tenant_id"))}
    flagged_anomalies = predicted_suspects & anomalies
    scored = predicted_suspects - anomalies
    sus = _pr(scored, true_suspects)
    sus["false_positives_by_kind"] = dict(sorted(Counter(scan_kind.get(r, "other") for r in scored - true_suspects).items()))
    sus["engine_anomalies_flagged"] = f"{len(flagged_anomalies)} of {len(anomalies)}"
    sus["scored"] = present["suspects.csv"]
    result["suspects"] = sus

    # ---- findings ----------------------------------------------------------------------------
    leaks = [f for f in truth["fragments"] if f["is_leak"]]
    true_pairs = {(f["recipient_request_id"], f["recipient_tenant_id"], f["source_tenant_id"]) for f in leaks}
    rows: list[dict[str, str]] = []
    if present["evidence.csv"]:
        rows = _read_csv(report / "evidence.csv", ("recipient_request_id", "recipient_tenant_id", "source_request_id", "source_tenant_id"))
    cross = [r for r in rows if r["source_tenant_id"] != r["recipient_tenant_id"] and r.get("relation", "cross_tenant") != "same_tenant"]
    predicted_pairs = {(r["recipient_request_id"], r["recipient_tenant_id"], r["source_tenant_id"]) for r in cross}
    fnd = _pr(predicted_pairs, true_pairs)
    fnd["scored"] = present["evidence.csv"]
    fnd["same_tenant_rows"] = len(rows) - len(cross)
    spans: dict[tuple[str, str, str], list[tuple[int, int]]] = {}
    for r in cross:
        a, b = _int(r.get("recipient_start")), _int(r.get("recipient_end"))
        if a is not None and b is not None:
            spans.setdefault((r["recipient_request_id"], r["recipient_tenant_id"], r["source_tenant_id"]), []).append((a, b))
    by_len: dict[str, list[int]] = {}
    by_damage: dict[str, list[int]] = {}
    located = 0
    for f in leaks:
        key = (f["recipient_request_id"], f["recipient_tenant_id"], f["source_tenant_id"])
        hit = int(key in predicted_pairs)
        if any(a < f["recipient_end"] and f["recipient_start"] < b for a, b in spans.get(key, [])):
            located += 1
        by_len.setdefault(_bucket(f["tokens"]), [0, 0])
        by_len[_bucket(f["tokens"])][0] += hit
        by_len[_bucket(f["tokens"])][1] += 1
        for d in _damage_labels(f):
            by_damage.setdefault(d, [0, 0])
            by_damage[d][0] += hit
            by_damage[d][1] += 1

    def recall_table(table: dict[str, list[int]], order: dict[str, int] | None = None) -> dict[str, Any]:
        # Lengths shortest first (by name they read "16-63, 256+, 4-15"); damage kinds by name.
        ranked = sorted(table.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]) if order else (0, kv[0]))
        return {k: {"found": v[0], "fragments": v[1], "recall": round(v[0] / v[1], 4)} for k, v in ranked}

    fnd["fragment_recall_by_length"] = recall_table(by_len, {label: i for i, (_, _, label) in enumerate(LENGTH_BUCKETS)})
    fnd["fragment_recall_by_damage"] = recall_table(by_damage)
    fnd["fragments_located"] = {"located": located, "fragments": len(leaks), "rate": round(located / len(leaks), 4) if leaks else None}
    tiers: dict[str, list[int]] = {}
    for r in cross:
        t = r.get("tier") or "unknown"
        tiers.setdefault(t, [0, 0])
        tiers[t][0] += int((r["recipient_request_id"], r["recipient_tenant_id"], r["source_tenant_id"]) in true_pairs)
        tiers[t][1] += 1
    fnd["row_precision_by_tier"] = {k: {"correct": v[0], "rows": v[1], "precision": round(v[0] / v[1], 4)} for k, v in sorted(tiers.items())}
    fnd["false_positives_by_kind"] = dict(sorted(Counter(_explain(p, truth, true_suspects) for p in predicted_pairs - true_pairs).items()))
    longest: dict[tuple[str, str, str], int] = {}
    for f in leaks:
        key = (f["recipient_request_id"], f["recipient_tenant_id"], f["source_tenant_id"])
        longest[key] = max(longest.get(key, 0), f["tokens"])
    by_pair: dict[str, list[int]] = {name: [0, 0] for _, _, name in PAIR_BUCKETS}
    for key, tokens in longest.items():
        name = next(n for lo, hi, n in PAIR_BUCKETS if lo <= tokens < hi)
        by_pair[name][0] += int(key in predicted_pairs)
        by_pair[name][1] += 1
    fnd["pair_recall_by_length"] = {k: {"found": v[0], "pairs": v[1], "recall": round(v[0] / v[1], 4) if v[1] else None}
                                    for k, v in by_pair.items()}
    wrong_rows = [r for r in cross
                  if (r["recipient_request_id"], r["recipient_tenant_id"], r["source_tenant_id"]) not in true_pairs]
    fnd["hard_negative_findings"] = _hard_negative_findings(truth, wrong_rows)
    fnd["false_pairs_by_location"] = dict(sorted(Counter(
        _where(r, truth)[0] for r in {(r["recipient_request_id"], r["recipient_tenant_id"], r["source_tenant_id"]): r for r in wrong_rows}.values()).items()))
    result["findings"] = fnd

    # ---- customers ---------------------------------------------------------------------------
    roles: dict[str, set[str]] = {"exposed": set(), "recipient": set()}
    if present["notifications.csv"]:
        for r in _read_csv(report / "notifications.csv", ("tenant_id", "role")):
            roles.setdefault(r["role"], set()).add(r["tenant_id"])
    result["customers"] = {
        "exposed": {**_pr(roles["exposed"], set(truth["exposed"])), "scored": present["notifications.csv"]},
        "recipient": {**_pr(roles["recipient"], set(truth["recipients"])), "scored": present["notifications.csv"]},
    }
    result["customers"]["exposed_wrong"] = [
        {"tenant_id": t, "findings": [_why(r, truth, true_suspects) for r in cross if r["source_tenant_id"] == t]}
        for t in sorted(roles["exposed"] - set(truth["exposed"]))
    ]
    result["customers"]["exposed_missed"] = [
        {"tenant_id": t, "fragments": [{"fragment_id": f["fragment_id"], "recipient_request_id": f["recipient_request_id"],
                                        "tokens": f["tokens"], "damage": f["damage"]} for f in leaks if f["source_tenant_id"] == t]}
        for t in sorted(set(truth["exposed"]) - roles["exposed"])
    ]

    # ---- quarantine --------------------------------------------------------------------------
    expected = truth.get("quarantine", {}).get("expected")
    quarantined: int | None = None
    note = "manifest.json missing"
    if present["manifest.json"]:
        try:
            manifest = json.loads((report / "manifest.json").read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"manifest.json is not JSON ({exc})", file=report / "manifest.json", fix="re-run the report stage") from None
        inputs = manifest.get("inputs") if isinstance(manifest, dict) else None
        counts = [i.get("quarantined") for i in inputs or [] if isinstance(i, dict)]
        numbers = [c for c in counts if isinstance(c, int)]
        if numbers:
            quarantined, note = sum(numbers), "sum of inputs[].quarantined"
        else:
            note = "manifest.json has no inputs[].quarantined counts"
    result["quarantine"] = {"expected": expected, "reported": quarantined, "match": quarantined == expected if quarantined is not None else None,
                            "note": note}
    return Evaluation(result)


def _explain(pair: tuple[str, str, str], truth: dict[str, Any], suspects: set[tuple[str, str]]) -> str:
    """Which hard negative explains a wrong (recipient request, recipient tenant, source tenant) pair."""
    rid, tenant, src = pair
    rec = (rid, tenant)
    for h in truth["hard_negatives"]:
        kind = h["kind"]
        recipient = (h.get("recipient_request_id"), h.get("recipient_tenant_id"))
        if kind == "later_prompt_only" and recipient == rec and h.get("later_tenant_id") == src:
            return kind
        if kind == "self_tenant" and recipient == rec and h.get("source_tenant_id") == src:
            return kind
    for h in truth["hard_negatives"]:
        if h["kind"] == "shared_boilerplate" and (h.get("recipient_request_id"), h.get("recipient_tenant_id")) == rec:
            return "shared_boilerplate"
        if h["kind"] == "own_prompt_quote" and (h.get("request_id"), h.get("tenant_id")) == rec:
            return "own_prompt_quote"
    return "not_a_suspect" if rec not in suspects else "unexplained"


def _overlaps(a: int | None, b: int | None, start: int, end: int) -> bool:
    """Whether the reported span [a, b) overlaps [start, end); a row without a span overlaps everything."""
    return a is None or b is None or (a < end and start < b)


def _hard_negative_findings(truth: dict[str, Any], wrong_rows: list[dict[str, str]]) -> dict[str, Any]:
    """Per kind of labelled hard negative: how many drew a wrong cross-tenant finding on their own text.

    A finding is on a hard negative when its recipient request is the negative's and its reported
    response span overlaps the negative's (rows without spans count wherever they are); on a
    later-prompt-only negative, when it names the tenant of the later request (the trap: text only
    a later prompt holds; other overlaps of that garbage text are chance, counted as such).
    """
    by_recipient: dict[str, list[dict[str, str]]] = {}
    for r in wrong_rows:
        by_recipient.setdefault(r["recipient_request_id"], []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for h in truth["hard_negatives"]:
        kind = h["kind"]
        if kind == "own_prompt_quote":
            rec, start, end = h["request_id"], h["response_start"], h["response_end"]
        else:
            rec, start, end = h["recipient_request_id"], h["recipient_start"], h["recipient_end"]
        hits = [r for r in by_recipient.get(rec, [])
                if (r["source_tenant_id"] == h.get("later_tenant_id") if kind == "later_prompt_only"
                    else _overlaps(_int(r.get("recipient_start")), _int(r.get("recipient_end")), start, end))]
        entry = out.setdefault(kind, {"labelled": 0, "with_findings": 0, "findings": 0})
        entry["labelled"] += 1
        entry["with_findings"] += int(bool(hits))
        entry["findings"] += len(hits)
    total = {"labelled": sum(v["labelled"] for v in out.values()), "with_findings": sum(v["with_findings"] for v in out.values()),
             "findings": sum(v["findings"] for v in out.values())}
    return {"by_kind": dict(sorted(out.items())), "total": total}


def _where(row: dict[str, str], truth: dict[str, Any]) -> tuple[str, str | None]:
    """Where a wrong finding's recipient span lies: in which labelled passage of the response, if any.

    Returns (location, fragment or hard-negative id): ``leak_of_another_tenant`` (a real leak whose
    text the named tenant also holds), ``self_tenant`` / ``shared_boilerplate`` (a labelled hard
    negative), ``later_prompt_only`` (the finding names the tenant whose later prompt holds the
    passage), ``not_a_suspect``, or ``outside_fragments`` (the garbage text around the fragments,
    a later-prompt passage included when another tenant is named: a chance overlap).
    """
    rec = row["recipient_request_id"]
    a, b = _int(row.get("recipient_start")), _int(row.get("recipient_end"))
    for f in truth["fragments"]:
        if f["recipient_request_id"] == rec and _overlaps(a, b, f["recipient_start"], f["recipient_end"]):
            return ("leak_of_another_tenant" if f["is_leak"] else f["label"]), f["fragment_id"]
    for h in truth["hard_negatives"]:
        if (h["kind"] == "later_prompt_only" and h["recipient_request_id"] == rec and row["source_tenant_id"] == h.get("later_tenant_id")):
            return "later_prompt_only", h.get("later_request_id")
    if rec not in {s["request_id"] for s in truth["suspects"]}:
        return "not_a_suspect", None
    return "outside_fragments", None


def _why(row: dict[str, str], truth: dict[str, Any], suspects: set[tuple[str, str]]) -> dict[str, Any]:
    """One finding that named a wrongly exposed customer, and why it is wrong."""
    where, ref = _where(row, truth)
    return {"recipient_request_id": row["recipient_request_id"], "source_request_id": row.get("source_request_id"),
            "tier": row.get("tier") or None, "tier_rule": (row.get("tier_rule") or "").split(":")[0] or None,
            "matched_tokens": _int(row.get("matched_tokens")), "recipient_start": _int(row.get("recipient_start")),
            "recipient_end": _int(row.get("recipient_end")),
            "explained_as": _explain((row["recipient_request_id"], row["recipient_tenant_id"], row["source_tenant_id"]), truth, suspects),
            "where": where, "ref": ref}


def build_report_from_truth(truth: dict[str, Any], folder: Path) -> None:
    """Write the report files a perfect run would give (for tests and for checking evaluate)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "suspects.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["request_id", "tenant_id", "model", "received_at", "prompt_tokens", "prompt_tokens_source", "reasons"])
        for s in truth["suspects"]:
            w.writerow([s["request_id"], s["tenant_id"], s["model"], s["received_at"], s["prompt_tokens"], "engine", ";".join(s["reasons"])])
    with open(folder / "evidence.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["finding_id", "recipient_request_id", "recipient_tenant_id", "source_request_id", "source_tenant_id", "source_kind",
                    "tier", "score", "matched_tokens", "recipient_start", "recipient_end", "source_start", "source_end", "rarity"])
        for f in sorted((f for f in truth["fragments"] if f["is_leak"]), key=lambda f: (f["recipient_request_id"], f["source_request_id"])):
            w.writerow([f["fragment_id"], f["recipient_request_id"], f["recipient_tenant_id"], f["source_request_id"], f["source_tenant_id"],
                        f["source_kind"], "confirmed", 100.0, f["tokens"], f["recipient_start"], f["recipient_end"], f["source_start"],
                        f["source_end"], 1.0])
    with open(folder / "notifications.csv", "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["tenant_id", "role"])
        for t in truth["exposed"]:
            w.writerow([t, "exposed"])
        for t in truth["recipients"]:
            w.writerow([t, "recipient"])
    (folder / "manifest.json").write_text(json.dumps({"inputs": [{"path": "gateway", "quarantined": truth["quarantine"]["expected"]}]}))
