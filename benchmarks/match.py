"""Benchmark of the match stage against two baselines, in one run (about 5 minutes on 2 cores).

    python benchmarks/match.py [--corpus ../shared/corpora] [--suspects 300] [--scale 1,2,4]
                               [--sub-suspects 30] [--sub-records 2400] [--chat-scale 8]
                               [--sim-seeds 7,11] [--sim-scale medium]

Needs the bench extra (datasketch, psutil): pip install -e '.[bench]'. It is checked first.

Data: a case built from real public text (the ``--corpus`` folder, read at run time; the
benchmark exits cleanly when it is absent). Tenants send corpus documents (some prefixed with one
of three popular system prompts that many tenants share, a few megabyte prompts of concatenated
articles) and receive corpus answers. Suspect responses are corpus answers with a fragment of an
earlier record of another tenant inserted (8-15 or 16-64 tokens, 0/5/10 % of the words replaced).
Hard negatives: fragments from the suspect's own prompt, from a later record, from a shared
system prompt, from the same tenant, and clean responses. The 2x/4x corpora add records whose
tokens are shuffled (same token statistics, no shared passages) so only the corpus grows.

Printed: (a) exhaustive rapidfuzz ``partial_ratio_alignment`` of every suspect against every
earlier other-tenant text on a sub-corpus (by default every base record of the 1x case, some
1.3 million tokens, so neither side's fixed costs dominate; the baseline's time grows with
suspects x corpus, so ``--sub-suspects`` keeps it near two minutes), against ours on the same
sub-corpus and suspects, both on one core, both scored top-1 (is the best-ranked source the
true one?), with the speed-up; (b) datasketch MinHash LSH over 24-token windows on the same
sub-corpus, recall and time; (c) our streaming pass on the full corpus at each scale: recall by
fragment length, pair precision, hard-negative findings, control false-positive rate, corpus
tokens/s with one process and with two (wall, and per core: wall / processes, and tokens per
CPU-second of all processes, the figure the other tenants of a shared machine move least) and
peak RSS of the main process and of a worker. Two processes on a case below the size at which
the matcher starts a worker are marked: there, by default, it runs alone. The chat-shaped corpus
(``--chat-scale``: the same records with prompts cut to ``CHAT_WORDS`` words and no whole-article
prompts, plus shuffled copies up to that many times the records, about 20,000 short records at 8)
is a row of its own, where per-text costs dominate; so are the simulated incidents (``--sim-scale
realistic``: the quality benchmark's shape, 15,000 chats of 220 tenants with shared templates and
chance overlaps). The issue's target, 2M corpus tokens per second per core, is printed beside them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import forensics.match
from forensics import schema
from forensics.config import CaseConfig
from forensics.lab.bench import measure
from forensics.lab.cases import suspect_rows, write_case, write_rows
from forensics.match.tuning import Tuning

INLINE_BYTES = Tuning().inline_bytes

#: The checkout this script is in: the corpus folder is looked for next to it.
REPO = Path(__file__).resolve().parent.parent

T0 = dt.datetime(2026, 8, 29, 0, 0, tzinfo=dt.UTC)

#: Issue 14's target for the match stage: corpus tokens searched per second per core.
TARGET_TOKENS_PER_CORE = 2_000_000

#: Words a prompt of the chat-shaped corpus keeps (its median text is then ~100 tokens).
CHAT_WORDS = 120


def _strings(obj: Any, out: list[str]) -> None:
    if isinstance(obj, str):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _strings(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _strings(v, out)


def load_pool(corpus: Path) -> tuple[list[str], list[str]]:
    """Distinct corpus texts: (documents >= 400 chars, shorter answers >= 120 chars)."""
    texts: list[str] = []
    for path in sorted(corpus.rglob("*")):
        if path.suffix == ".txt" and path.is_file():
            texts.extend(line for line in path.read_text(encoding="utf-8").splitlines())
        elif path.suffix == ".jsonl":
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip():
                    _strings(json.loads(line), texts)
        elif path.suffix == ".json":
            _strings(json.loads(path.read_text(encoding="utf-8")), texts)
    import numpy as np

    from forensics.match.fingerprint import kgrams, tokenize

    seen: set[str] = set()
    distinct = []
    for t in texts:
        t = t.strip()
        if t not in seen and len(t.split()) >= 25:
            seen.add(t)
            distinct.append(t)
    # The corpora repeat themselves (instructions echoed inside answers, the same article in two
    # datasets, 31 models answering the same questions): drop every text that shares an 8-token
    # passage with another, so the only cross-record overlaps are the ones the benchmark plants.
    per = [np.unique(kgrams(tokenize(t).hash, 8)) for t in distinct]
    keys, counts = np.unique(np.concatenate(per), return_counts=True)
    shared = set(keys[counts > 1].tolist())
    docs, answers = [], []
    for t, g in zip(distinct, per):
        if not shared.intersection(g.tolist()):
            (docs if len(t) >= 400 else answers).append(t)
    return docs, answers


@dataclasses.dataclass
class Truth:
    positives: dict[str, tuple[str, int, float]]  # suspect -> (source id, fragment tokens, damage)
    negatives: dict[str, str]  # suspect -> kind of hard negative
    same_tenant: dict[str, str]


class Overlap:
    """How many base records hold each 8-gram: keeps fragments exclusive and fillers clean."""

    def __init__(self, texts: list[str]) -> None:
        import numpy as np

        from forensics.match.fingerprint import kgrams, tokenize

        self._np, self._kg, self._tok = np, kgrams, tokenize
        per = [np.unique(kgrams(tokenize(t).hash, 8)) for t in texts]
        self.keys, self.counts = np.unique(np.concatenate(per), return_counts=True)

    def held(self, words: list[str]) -> Any:
        """How many base records hold each 8-gram of ``words``."""
        np = self._np
        g = self._kg(self._tok(" ".join(words)).hash, 8)
        idx = np.clip(np.searchsorted(self.keys, g), 0, len(self.keys) - 1)
        return np.where(self.keys[idx] == g, self.counts[idx], 0)


def build(corpus: Path, out: Path, n_suspects: int, scale: int, seed: int = 7,
          chat: bool = False) -> tuple[Truth, dict[str, Any]]:
    """Write exchanges/suspects for one scale; the 1x records are identical at every scale.

    ``chat``: the chat shape, many short texts only (no whole-article prompts, prompts cut to
    their first ``CHAT_WORDS`` words), the traffic where per-text costs dominate.
    """
    rng = random.Random(seed)
    docs, answers = load_pool(corpus)
    rng.shuffle(docs)
    rng.shuffle(answers)
    system_prompts, docs = docs[:3], docs[3:]
    sus_answers, answers = answers[:1000], answers[1000:]
    n_tenants = 60
    n_records = 2400
    # Every record gets its own response: corpus answers, then the opening of unused documents.
    extra = docs[n_records : n_records + max(n_records - len(answers), 0)]
    responses = answers + [" ".join(d.split()[:150]) for d in extra]
    spare = docs[n_records + len(extra) :]
    longest = sorted(spare, key=len)[-30:]
    own_pool = spare[:-30]
    rows: list[dict[str, Any]] = []
    body: dict[str, str] = {}
    minute = 0.0
    for i in range(n_records):
        tenant = f"tenant{rng.randrange(n_tenants):02d}"
        prompt = " ".join(docs[i].split()[:CHAT_WORDS]) if chat else docs[i]
        if i % 400 == 5 and not chat:  # a few very long prompts (whole articles pasted): the incident's own shape
            prompt = "\n\n".join(rng.sample(longest, 12))
        body[f"r{i:06d}"] = prompt
        if rng.random() < 0.3:
            prompt = system_prompts[rng.randrange(3)] + "\n\n" + prompt
        rows.append(_row(f"r{i:06d}", tenant, minute, "<|user|>\n" + prompt, responses[i]))
        minute += 0.5
    overlap = Overlap([r["prompt_text"] for r in rows] + [r["response_text"] for r in rows])
    truth = Truth({}, {}, {})
    kinds = ["own", "later", "boilerplate", "same_tenant", "clean"]
    fillers = (a.split() for a in sus_answers if not overlap.held(a.split()).any())
    for j in range(n_suspects):
        sid = f"s{j:05d}"
        at = rng.randrange(n_records // 4, n_records - 40)
        tenant = f"tenant{rng.randrange(n_tenants):02d}"
        own_prompt = "hello"
        filler = next(fillers)
        if j % 5 == 4:
            kind = kinds[(j // 5) % len(kinds)]
            if kind == "own":
                own_prompt = own_pool[j % len(own_pool)]
                frag = _fragment(rng, own_prompt.split(), 30)
            elif kind == "later":
                frag = _exclusive(rng, overlap, lambda at=at: body[rows[rng.randrange(at + 20, n_records)]["request_id"]], 30)
            elif kind == "boilerplate":
                frag = _fragment(rng, system_prompts[rng.randrange(3)].split(), 30)
            elif kind == "same_tenant":
                src = next((r for r in reversed(rows[:at]) if r["tenant_id"] == tenant), rows[0])
                tenant = src["tenant_id"]
                frag = _exclusive(rng, overlap, lambda src=src: body[src["request_id"]], 30)
                truth.same_tenant[sid] = src["request_id"]
            else:
                frag = []
            truth.negatives[sid] = kind
        else:
            length = rng.randint(8, 15) if rng.random() < 0.4 else rng.randint(16, 64)
            damage = rng.choice([0.0, 0.05, 0.10])
            while True:
                src = rows[rng.randrange(0, at)]
                if src["tenant_id"] == tenant:
                    continue
                text = src["response_text"] if rng.random() < 0.3 else body[src["request_id"]]
                frag = _exclusive(rng, overlap, lambda text=text: text, length, tries=5)
                if frag:
                    break
            frag = _damage(rng, frag, damage, sus_answers)
            truth.positives[sid] = (src["request_id"], length, damage)
        cut = rng.randrange(0, len(filler) + 1)
        response = " ".join(filler[:cut] + frag + filler[cut:])
        rows.append(_row(sid, tenant, at * 0.5 + 0.2, own_prompt, response, duration=0.2))
    # The larger corpora: shuffled-word records (no shared passages) at random times.
    for c in range(1, scale):
        for i in range(n_records):
            words, resp = _tokens(body[f"r{i:06d}"] if chat else docs[i]), _tokens(responses[i])
            rng.shuffle(words)
            rng.shuffle(resp)
            rows.append(_row(f"x{c}{i:06d}", f"tenant{rng.randrange(n_tenants):02d}", rng.uniform(0, minute),
                             " ".join(words), " ".join(resp)))
    rows.sort(key=lambda r: (r["received_at"], r["request_id"]))
    out.mkdir(parents=True, exist_ok=True)
    sus_ids = set(truth.positives) | set(truth.negatives)
    _write_case(out, rows, [r["request_id"] for r in rows if r["request_id"] in sus_ids])
    (out / "truth.json").write_text(json.dumps(dataclasses.asdict(truth), indent=1, sort_keys=True))
    meta = pq.ParquetFile(out / "exchanges.parquet").metadata
    return truth, {"records": len(rows), "chars": sum(len(r["prompt_text"]) + len(r["response_text"]) for r in rows),
                   "text_bytes": sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))}


def _tokens(text: str) -> list[str]:
    """The words of ``text`` as :func:`forensics.match.fingerprint.tokenize` reads them, punctuation marks
    kept (shuffling these leaves no shared run of two words; a machine-made word, which the matcher cuts
    into pieces, stays whole, and so do its pieces' runs)."""
    from forensics.match.fingerprint import tokenize

    tk = tokenize(text)
    return [text[a:b] for a, b in zip(tk.start.tolist(), tk.end.tolist())]


def _exclusive(rng: random.Random, overlap: Overlap, text: Any, length: int, tries: int = 50) -> list[str]:
    """A fragment whose 8-grams occur in exactly one base record (its source): an unambiguous truth."""
    for _ in range(tries):
        words = text().split()
        if len(words) < length:
            continue
        frag = _fragment(rng, words, length)
        if (overlap.held(frag) == 1).all():
            return frag
    return []


def _write_case(out: Path, rows: list[dict[str, Any]], suspects: list[str]) -> None:
    """The case folder of ``rows`` with ``suspects`` (request ids) as the scan's suspects."""
    # Row groups of 1,024 rows: the unit a worker reads (ingest caps them at 4,096 rows or 64 MB);
    # written 1,024 rows at a time so the 4x corpus is never converted in one piece.
    write_rows(out / "exchanges.parquet", (rows[i : i + 1024] for i in range(0, len(rows), 1024)), schema.EXCHANGES,
               row_group_rows=1024)
    write_case(out, suspects=suspect_rows(rows, suspects))


def _row(rid: str, tenant: str, minute: float, prompt: str, response: str, duration: float = 0.3) -> dict[str, Any]:
    return {"request_id": rid, "tenant_id": tenant, "received_at": T0 + dt.timedelta(minutes=minute),
            "completed_at": T0 + dt.timedelta(minutes=minute + duration), "prompt_text": prompt,
            "response_text": response, "model": "glm-5.3", "status": "success"}


def _fragment(rng: random.Random, words: list[str], length: int) -> list[str]:
    if len(words) <= length:
        return list(words)
    start = rng.randrange(0, len(words) - length)
    return words[start : start + length]


def _damage(rng: random.Random, words: list[str], rate: float, answers: list[str]) -> list[str]:
    out = list(words)
    for i in rng.sample(range(len(out)), int(rate * len(out))):  # at most `rate` of the words
        out[i] = rng.choice(rng.choice(answers).split())
    return out


def timed_match(case: Path, workers: int) -> int:
    """The match stage on ``case`` with ``workers`` processes (run by ``run_child`` in a fresh process).

    Returns the corpus tokens searched. With ``workers`` > 1 the worker pool is used even below
    the in-process size threshold, so the figures are those of the parallel pass.
    """
    tuning = Tuning(inline_bytes=0) if workers > 1 else None
    result = forensics.match.match(case, CaseConfig(sections={"match": {"workers": workers}}), tuning=tuning)
    tokens: int = result.report["searched"]["tokens"]
    return tokens


def run_child(case: Path, workers: int, repeat: int = 3) -> dict[str, Any]:
    """Run the match stage in a fresh process (best of ``repeat``): time and peak RSS of main and workers."""
    best: dict[str, Any] = {}
    for _ in range(repeat):
        m = measure(timed_match, case, workers)
        run = {"seconds": m.seconds, "tokens": m.value, "cpu_seconds": m.cpu_seconds,
               "rss_main_mb": m.rss_main_bytes / 2**20, "rss_worker_mb": m.rss_worker_bytes / 2**20}
        if not best or run["seconds"] < best["seconds"]:
            best = run
    return best


def simulated(corpus: Path, work: Path, seed: int, scale: str = "medium") -> dict[str, Any]:
    """The whole pipeline on a simulated incident (forensics.lab.simulate), scored by forensics.lab.evaluate."""
    from forensics.lab.evaluate import evaluate
    from forensics.lab.simulate import simulate
    from forensics.run import run

    sim = work / f"sim{seed}"
    simulate(sim, seed=seed, scale=scale, corpus=corpus)
    result = run(sim / "case.toml", work / f"sim{seed}-report")
    report_dir = next(p for p in (work / f"sim{seed}-report").iterdir() if p.is_dir())
    ev = evaluate(sim / "truth.json", report_dir).to_json()
    match_json = json.loads((result.case_dir / "match.json").read_text())
    runs = {w: run_child(result.case_dir, w) for w in (1, 2)}
    return {"seed": seed, "findings": ev["findings"], "control": match_json["control"],
            "tokens": match_json["searched"]["tokens"], "runs": runs,
            "records": match_json["searched"]["records"], "case_dir": result.case_dir}


def score(case: Path, truth: Truth) -> dict[str, Any]:
    """Recall by fragment length, pair precision, hard negatives and control rate of one case."""
    ev = pq.read_table(case / "evidence.parquet").to_pylist()
    cross = [e for e in ev if e["relation"] == "cross_tenant"]
    found = {(e["recipient_request_id"], e["source_request_id"]) for e in cross}
    buckets: dict[str, list[bool]] = {"8-15": [], "16-64": []}
    for sid, (src, length, _damage) in truth.positives.items():
        hit = (sid, src) in found
        buckets["8-15" if length < 16 else "16-64"].append(hit)
    on_pos = [e for e in cross if e["recipient_request_id"] in truth.positives]
    correct = sum(1 for e in on_pos if truth.positives[e["recipient_request_id"]][0] == e["source_request_id"])
    neg = [e for e in cross if e["recipient_request_id"] in truth.negatives]
    report = json.loads((case / "match.json").read_text())
    return {
        "recall_8_15": sum(buckets["8-15"]) / max(len(buckets["8-15"]), 1), "n_8_15": len(buckets["8-15"]),
        "recall_16_64": sum(buckets["16-64"]) / max(len(buckets["16-64"]), 1), "n_16_64": len(buckets["16-64"]),
        "pair_precision": correct / max(len(on_pos), 1), "findings_on_positives": len(on_pos),
        "hard_negative_findings": len(neg), "hard_negatives": len(truth.negatives),
        "hard_negative_kinds_hit": sorted({truth.negatives[e["recipient_request_id"]] for e in neg}),
        "same_tenant_rows_found": sum(1 for s, src in truth.same_tenant.items()
                                      if any(e["recipient_request_id"] == s and e["source_request_id"] == src
                                             and e["relation"] == "same_tenant" for e in ev)),
        "control_fp_rate": report["control"]["false_positive_rate"], "control_size": report["control"]["size"],
        "tiers": {t: sum(1 for e in on_pos if e["tier"] == t) for t in ("confirmed", "probable")},
    }


def sub_case(case: Path, out: Path, truth: Truth, n_sus: int, n_records: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The first n_records records and n_sus positive suspects whose source lies among them."""
    rows = pq.read_table(case / "exchanges.parquet").to_pylist()
    base = [r for r in rows if r["request_id"].startswith("r")][:n_records]
    ids = {r["request_id"] for r in base}
    sus_ids = [s for s, (src, _, _) in sorted(truth.positives.items()) if src in ids][:n_sus]
    sus = [r for r in rows if r["request_id"] in set(sus_ids)]
    keep = sorted(base + sus, key=lambda r: (r["received_at"], r["request_id"]))
    _write_case(out, keep, [r["request_id"] for r in sus])
    return base, sus


def exhaustive(base: list[dict[str, Any]], sus: list[dict[str, Any]], truth: Truth) -> tuple[float, float]:
    """rapidfuzz partial_ratio_alignment of each suspect against every earlier other-tenant text."""
    from rapidfuzz import fuzz

    t = time.perf_counter()
    hits = 0
    for s in sus:
        best = (-1.0, "")
        for r in base:
            if r["tenant_id"] == s["tenant_id"] or r["received_at"] >= s["completed_at"]:
                continue
            for text in (r["prompt_text"], r["response_text"]):
                al = fuzz.partial_ratio_alignment(s["response_text"], text)
                if al is not None and al.score > best[0]:
                    best = (al.score, r["request_id"])
        hits += best[1] == truth.positives[s["request_id"]][0]
    return hits / max(len(sus), 1), time.perf_counter() - t


def top1_recall(case: Path, sus: list[dict[str, Any]], truth: Truth) -> float:
    """Share of suspects whose best-ranked cross-tenant finding names the true source (the baseline's criterion).

    Best: confirmed before probable, then most informative tokens, then highest score.
    """
    best: dict[str, tuple[tuple[Any, ...], str]] = {}
    for e in pq.read_table(case / "evidence.parquet").to_pylist():
        if e["relation"] != "cross_tenant":
            continue
        key = (e["tier"] != "confirmed", -e["informative_tokens"], -e["score"], e["source_request_id"])
        if e["recipient_request_id"] not in best or key < best[e["recipient_request_id"]][0]:
            best[e["recipient_request_id"]] = (key, e["source_request_id"])
    hits = sum(1 for s in sus if best.get(s["request_id"], ((), ""))[1] == truth.positives[s["request_id"]][0])
    return hits / max(len(sus), 1)


def minhash_lsh(base: list[dict[str, Any]], sus: list[dict[str, Any]], truth: Truth) -> tuple[float, float, float]:
    """datasketch MinHash LSH over 24-token windows (stride 12) of every text; 5-token shingles."""
    from datasketch import MinHash, MinHashLSH

    def windows(text: str) -> list[list[str]]:
        w = text.lower().split()
        return [w[i : i + 24] for i in range(0, max(len(w) - 23, 1), 12)]

    def sketch(win: list[str]) -> MinHash:
        m = MinHash(num_perm=64, seed=1)
        m.update_batch([" ".join(win[i : i + 5]).encode() for i in range(max(len(win) - 4, 1))])
        return m

    t = time.perf_counter()
    lsh = MinHashLSH(threshold=0.3, num_perm=64)
    owner: dict[str, str] = {}
    n = 0
    for r in base:
        for text in (r["prompt_text"], r["response_text"]):
            for win in windows(text):
                key = f"{r['request_id']}#{n}"
                owner[key] = r["request_id"]
                lsh.insert(key, sketch(win))
                n += 1
    build = time.perf_counter() - t
    hits = 0
    for s in sus:
        cands = {owner[k] for win in windows(s["response_text"]) for k in lsh.query(sketch(win))}
        hits += truth.positives[s["request_id"]][0] in cands
    return hits / max(len(sus), 1), time.perf_counter() - t, build


SWEEP = {
    "k": [4, 5, 6],
    "min_run": [6, 7, 8, 10],
    "min_tokens": [6, 8, 10],
    "max_tenants": [1, 2, 3, 5],
    "probable_rarity": [0.0, 0.25, 0.5],
    "signature_rarity": [0.5, 0.75, 1.0],
    "damaged_score": [80.0, 85.0, 90.0],
}


def sim_scores(case: Path, truth_path: Path) -> dict[str, Any]:
    """(recipient, source tenant) pair precision and recall of the evidence against simulator truth."""
    truth = json.loads(truth_path.read_text())
    leaks = {(f["recipient_request_id"], f["source_tenant_id"]) for f in truth["fragments"] if f["label"] == "leak"}
    cross = {(e["recipient_request_id"], e["source_tenant_id"]) for e in pq.read_table(case / "evidence.parquet").to_pylist()
             if e["relation"] == "cross_tenant"}
    return {"precision": len(cross & leaks) / max(len(cross), 1), "recall": len(cross & leaks) / max(len(leaks), 1)}


def sweep(bench_case: Path, truth: Truth, sims: list[tuple[Path, Path]]) -> None:
    """One parameter at a time around the defaults: the measurement behind each default."""
    from forensics.match import match
    from forensics.match.tiers import MatchParams

    print("\n(e) parameter sweep, one at a time (benchmark 1x | simulator pairs)")
    print(f"{'parameter':<18}{'value':>7}{'rec 8-15':>10}{'rec 16+':>9}{'precision':>11}{'control FP':>12}"
          + "".join(f"{'sim' + str(i) + ' P/R':>14}" for i in range(len(sims))))
    for key, values in SWEEP.items():
        for v in values:
            cfg = CaseConfig(sections={"match": {"workers": 1, key: v}})
            match(bench_case, cfg)
            sc = score(bench_case, truth)
            cols = ""
            for case, truth_path in sims:
                match(case, cfg)
                r = sim_scores(case, truth_path)
                cols += f"{r['precision']:>8.2f}/{r['recall']:.2f}"
            mark = "*" if getattr(MatchParams, key) == v else " "
            print(f"{key:<18}{v:>6}{mark}{sc['recall_8_15']:>10.3f}{sc['recall_16_64']:>9.3f}{sc['pair_precision']:>11.4f}"
                  f"{sc['control_fp_rate']:>12.3f}{cols}")
    print("    (* = default)")


#: Modules of the ``bench`` extra this benchmark needs (datasketch for the LSH baseline, psutil
#: for memory); checked before any work so a missing one fails in a second, not after minutes.
BENCH_MODULES = ("datasketch", "psutil")
INSTALL = "pip install -e '.[bench]'"


def missing_extras() -> list[str]:
    """The modules of BENCH_MODULES that cannot be imported."""
    import importlib.util

    return [m for m in BENCH_MODULES if importlib.util.find_spec(m) is None]


def main() -> int:
    """Build the cases, run every method, print the tables."""
    missing = missing_extras()
    if missing:
        print(f"benchmarks/match.py needs {', '.join(missing)} (the bench extra). Install it with: {INSTALL}",
              file=sys.stderr)
        return 2
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpora")
    ap.add_argument("--suspects", type=int, default=300)
    ap.add_argument("--scale", default="1,2,4")
    ap.add_argument("--sub-suspects", type=int, default=30)
    ap.add_argument("--sub-records", type=int, default=2400)
    ap.add_argument("--keep", type=Path, default=None, help="Keep the generated cases in this folder.")
    ap.add_argument("--sim-seeds", type=lambda v: [int(x) for x in v.split(",") if x], default=[7, 11],
                    help="Simulator seeds for the end-to-end check (medium scale); empty to skip.")
    ap.add_argument("--sim-scale", default="medium", help="Simulator scale of those incidents (realistic: the "
                    "quality benchmark's).")
    ap.add_argument("--chat-scale", type=int, default=8,
                    help="Size of the chat-shaped corpus in multiples of the base records (0 to skip).")
    ap.add_argument("--sweep", action="store_true", help="Also sweep each threshold around its default (+2 min).")
    args = ap.parse_args()
    if not args.corpus.is_dir():
        print(f"skipped: no corpus folder at {args.corpus} (pass --corpus)")
        return 0
    work = Path(tempfile.mkdtemp(prefix="match-bench-")) if args.keep is None else args.keep
    try:
        scales = [int(x) for x in args.scale.split(",")]
        results = []
        truth1 = None
        for sc in scales:
            case = work / f"x{sc}"
            truth, size = build(args.corpus, case, args.suspects, sc)
            truth1 = truth1 or truth
            runs = {w: run_child(case, w) for w in (1, 2)}
            results.append((str(sc), size, runs, score(case, truth)))
        if args.chat_scale:
            case = work / "chat"
            truth, size = build(args.corpus, case, args.suspects, args.chat_scale, chat=True)
            results.append((f"chat{args.chat_scale}", size, {w: run_child(case, w) for w in (1, 2)}, score(case, truth)))
        # Baselines on a sub-corpus small enough for the exhaustive search.
        sub = work / "sub"
        base, sus = sub_case(work / f"x{scales[0]}", sub, truth1, args.sub_suspects, args.sub_records)
        ours_sub = run_child(sub, 1)
        ours_sub_score = score(sub, Truth({s["request_id"]: truth1.positives[s["request_id"]] for s in sus}, {}, {}))
        ours_top1 = top1_recall(sub, sus, truth1)
        ex_recall, ex_time = exhaustive(base, sus, truth1)
        lsh_recall, lsh_time, lsh_build = minhash_lsh(base, sus, truth1)
        sims = [simulated(args.corpus, work, seed, args.sim_scale) for seed in args.sim_seeds] if args.sim_seeds else []
        if args.sweep:
            sweep(work / f"x{scales[0]}", truth1,
                  [(s["case_dir"], work / f"sim{s['seed']}" / "truth.json") for s in sims])
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end (shared machine)")
    sub_tokens = ours_sub["tokens"]
    print(f"\n(a,b) sub-corpus: {len(sus)} suspects x {len(base)} records ({sub_tokens:,} tokens), one core each")
    print(f"{'method':<44}{'top-1 recall':>13}{'seconds':>10}{'ours faster':>13}")
    ours_r = (ours_sub_score["recall_8_15"] * ours_sub_score["n_8_15"] + ours_sub_score["recall_16_64"] * ours_sub_score["n_16_64"]) / max(len(sus), 1)
    print(f"{'ours (streaming k-gram join + rapidfuzz)':<44}{ours_top1:>13.3f}{ours_sub['seconds']:>10.2f}{1.0:>12.1f}x")
    print(f"{'exhaustive partial_ratio_alignment':<44}{ex_recall:>13.3f}{ex_time:>10.2f}{ex_time / ours_sub['seconds']:>12.1f}x")
    print(f"{'datasketch MinHash LSH, 24-token windows':<44}{lsh_recall:>13.3f}{lsh_time:>10.2f}{lsh_time / ours_sub['seconds']:>12.1f}x")
    print("    (ours: the whole match() call: parquet reads, both passes, verification, writing the evidence files;")
    print(f"     ours with the true source among any of its findings: {ours_r:.3f}; LSH: true source among the candidates)")
    print("\n(c) ours on the full corpus")
    hdr = (f"{'scale':>6}{'records':>9}{'tokens':>12}{'workers':>8}{'seconds':>9}{'tok/s':>12}{'tok/s/core':>12}"
           f"{'CPU s':>7}{'tok/CPU-s':>11}{'RSS main MB':>12}{'RSS worker MB':>14}")
    print(hdr)
    forced = False
    for sc, size, runs, _ in results:
        for w, r in runs.items():
            tps = r["tokens"] / r["seconds"]
            mark = "*" if w > 1 and size["text_bytes"] < INLINE_BYTES else " "
            forced |= mark == "*"
            print(f"{sc + ('x' if sc.isdigit() else ''):>6}{size['records']:>9}{r['tokens']:>12,}{w:>7}{mark}{r['seconds']:>9.2f}{tps:>12,.0f}{tps / w:>12,.0f}"
                  f"{r['cpu_seconds']:>7.2f}{r['tokens'] / r['cpu_seconds']:>11,.0f}"
                  f"{r['rss_main_mb']:>12.0f}{r['rss_worker_mb']:>14.0f}")
    for sim in sims:
        for w, r in sim["runs"].items():
            tps = r["tokens"] / r["seconds"]
            print(f"{'sim' + str(sim['seed']):>6}{sim['records']:>9}{r['tokens']:>12,}{w:>8}{r['seconds']:>9.2f}{tps:>12,.0f}"
                  f"{tps / w:>12,.0f}{r['cpu_seconds']:>7.2f}{r['tokens'] / r['cpu_seconds']:>11,.0f}"
                  f"{r['rss_main_mb']:>12.0f}{r['rss_worker_mb']:>14.0f}")
    print(f"    target: {TARGET_TOKENS_PER_CORE:,} corpus tokens/s per core (tok/s/core; tok/CPU-s is the same figure "
          "free of other load on a shared machine)")
    if forced:
        print(f"    * a worker forced on a case below {INLINE_BYTES >> 20} MB of text, which by default runs in one "
              "process (there a worker costs more CPU than the time it saves is worth)")
    print("\naccuracy (each scale)")
    for sc, _, _, s in results:
        print(f"  {sc + ('x' if sc.isdigit() else '')}: recall 8-15 tokens {s['recall_8_15']:.3f} (n={s['n_8_15']}), 16-64 tokens {s['recall_16_64']:.3f} "
              f"(n={s['n_16_64']}), pair precision {s['pair_precision']:.4f} ({s['findings_on_positives']} findings, "
              f"tiers {s['tiers']}), hard-negative findings {s['hard_negative_findings']}/{s['hard_negatives']} "
              f"{s['hard_negative_kinds_hit']}, same-tenant rows {s['same_tenant_rows_found']}, "
              f"control FP rate {s['control_fp_rate']} (n={s['control_size']})")
    for sim in sims:
        f = sim["findings"]
        pairs = f.get("pairs", f)
        print(f"\n(d) simulator, medium scale, seed {sim['seed']} ({sim['tokens']:,} tokens), whole pipeline, forensics evaluate:")
        print("  " + json.dumps({k: v for k, v in pairs.items() if not isinstance(v, dict)}, sort_keys=True))
        for key in ("fragment_recall_by_length", "fragment_recall_by_damage"):
            print(f"  {key}: " + ", ".join(f"{k} {v['found']}/{v['fragments']}" for k, v in sorted(f.get(key, {}).items())))
        print(f"  false_positives_by_kind: {json.dumps(f.get('false_positives_by_kind', {}), sort_keys=True)}")
        print(f"  control: {sim['control']['responses_with_findings']}/{sim['control']['size']} responses with findings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
