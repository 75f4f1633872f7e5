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
  positives attributed to the hard negative that explains them.
* customers: the exposed and recipient sets of notifications.csv.
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

    def recall_table(table: dict[str, list[int]]) -> dict[str, Any]:
        return {k: {"found": v[0], "fragments": v[1], "recall": round(v[0] / v[1], 4)} for k, v in sorted(table.items())}

    fnd["fragment_recall_by_length"] = recall_table(by_len)
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
