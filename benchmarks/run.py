"""End to end: ``forensics run`` on a simulated incident of many small records, against DuckDB.

    python benchmarks/run.py [--size-mb 1024] [--scale-factors 1,4] [--seed 1] [--build distinct|repeat]
                             [--work bench-out/run] [--corpus ../shared/corpora] [--ingest-only]

1. Builds an incident of ``--size-mb`` MB of LiteLLM gateway JSON Lines (plus its SGLang engine
   logs) for each scale factor from the simulator's ``realistic`` scenario (real text, ~6 KB
   records, the defects it plants; one seed is ~175 MB of gateway logs, 15k requests, 220 tenants).
   Two shapes (``--build``):

   * ``distinct`` (the default, what a real incident looks like): the realistic incidents of the
     seeds ``--seed``, ``--seed`` + 1, ... (as many as the size needs, the last one cut short: the
     first lines of each of its files), each simulated once, in parallel processes. Every seed has
     its own tenants (Faker names: the rare same name is then the same customer), its own private
     text, leaks and request ids (96 random bits from the seed: unique in practice), and shares the
     public text with the others, as customers of one service do. The corpus's documents are cut
     into one share per seed the size can take (``corpus_parts``; ``forensics simulate --corpus-part K/N``): a seed's
     tenants own only its share, every seed has the same public passages. (Before, every seed's
     tenants owned the whole corpus among them, so each document was the private text of one
     customer per seed: read as one incident, several customers had sent it, and its leaks were,
     rightly, named nobody; that build scored pairs 0.999 / 0.502 at 1x.) The seeds are one
     busier service over the same window: behind one gateway (each day's gateway file holds every
     seed's records of that day, seed after seed), and each seed on a cluster of its own (its
     prefill and decode nodes' log files renamed ``{node}-s{seed}_{rank}.log`` after the first
     seed, so no node's log restarts in the middle and every decode-node fact stays that seed's).
     Gateway and engine lines of a request keep their id, so they still join.
   * ``repeat`` (a stress shape): one seed's incident written again and again, every copy with
     request ids of its own (XORed with a mask per copy, the same in gateway and engine lines) and
     nothing else changed: the same tenants sent the same private text in every copy, so each
     leaked passage matches its source in every copy and candidates grow with the square of the
     size. It models a service whose customers all resend the same private documents many times
     (a replayed batch job), not a bigger incident; it is I/O bound to build (seconds per gigabyte).

   Incidents are kept in ``--work`` under their size, seed and shape: a rerun skips generation.
2. Runs ``forensics run`` on it in a fresh child process (forensics.lab.bench), and in the same
   run the bare DuckDB ``read_json -> Parquet`` copy of the same gateway files, and, at 1x, our
   ingest of the gateway files alone (the like-for-like comparison with that copy).
3. Prints seconds and MB/s per stage, the ratios to the DuckDB copy, the match stage's tokens
   searched per second per core, how right the list is against the merged seeds' truths (``distinct``:
   pairs and exposed customers, precision and recall), and peak RSS: of every process (parent and workers), of all of
   them together, and per stage, at each scale factor, then the growth of the total from the
   first factor to the last.

``--ingest-only`` measures ``forensics ingest`` of the whole incident in place of ``forensics run``
(the same figures for that stage, without waiting for the others), for iterating on ingest.

Absolute times on a shared machine mislead; the ratios measured in the same run are the result. Each
timed step starts with the logs in the page cache (read once, untimed, just before it), so the ratios
compare the tools, not which of them happened to read the disk first.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import math
import os
import random
import re
import shutil
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

from forensics.lab.bench import Measurement, PhaseReporter, measure, warm_page_cache

#: The checkout this script is in: the corpus is looked for next to it, scratch files go inside it.
REPO = Path(__file__).resolve().parent.parent
MB = 1_000_000
#: The simulator's request ids: a fixed prefix and 24 hex digits (gateway ``id``/``request_id``, engine ``rid``).
REQUEST_ID = re.compile(rb"chatcmpl-([0-9a-f]{24})")
#: Bytes rewritten at once (cut at a line end).
BLOCK = 16 << 20
DONE = ".complete"
#: The seeds a ``distinct`` incident merges, with their truth files.
SEEDS = "seeds.json"
#: What a kept incident's DONE file says of how it was built: one built another way is built again (``distinct``
#: incidents made before each seed owned a share of the corpus of its own said nothing).
BUILD_VERSION = {"distinct": "corpus shares", "repeat": ""}
#: The least MB of gateway logs one seed's realistic incident makes (they make 160-170): how many shares of
#: the corpus a ``distinct`` incident needs.
SEED_MB_AT_LEAST = 150


def base_incident(work: Path, seed: int, corpus: Path, part: tuple[int, int] | None = None) -> Path:
    """The simulator's realistic incident for ``seed``, plain (uncompressed) files; made once. ``part``
    (part, parts): its tenants own only that share of the corpus (``forensics simulate --corpus-part``)."""
    from forensics.lab.simulate import simulate

    base = work / (f"base-seed{seed}" if part is None else f"base-seed{seed}-part{part[0] + 1}of{part[1]}")
    if (base / DONE).exists():
        return base
    shutil.rmtree(base, ignore_errors=True)
    t0 = time.perf_counter()
    simulate(base, seed=seed, scale="realistic", fmt="litellm", corpus=corpus, compress=False, corpus_part=part)
    (base / DONE).write_text("")
    print(f"simulated the realistic incident (seed {seed}) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return base


def _mask(seed: int, copy: int) -> int:
    """The 96-bit mask XORed into every request id of ``copy`` (0 for the first: ids unchanged)."""
    return 0 if copy == 0 else random.Random(f"{seed}:{copy}").getrandbits(96)


def _rewrite(block: bytes, mask: int) -> bytes:
    """``block`` with every request id XORed with ``mask``: a bijection per copy, so a request
    keeps one id across its gateway and engine lines and copies never share one."""
    if not mask:
        return block
    return REQUEST_ID.sub(lambda m: b"chatcmpl-%024x" % (int(m.group(1), 16) ^ mask), block)


def _append(src: Path, out: BinaryIO, fraction: float, mask: int) -> None:
    """Append the first ``fraction`` (0..1] of ``src``'s bytes to ``out``, whole lines only, every
    request id XORed with ``mask``."""
    size = src.stat().st_size
    budget = size if fraction >= 1 else int(size * fraction)
    with open(src, "rb") as fh:
        done = 0
        while done < budget:
            block = fh.read(min(BLOCK, budget - done))
            if not block:
                break
            if not block.endswith(b"\n"):
                block += fh.readline()  # whole lines only
            done += len(block)
            out.write(_rewrite(block, mask))


def _gateway_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in (folder / "gateway").iterdir()) / MB


def _copy_file(src: Path, dst: Path, copies: float, seed: int) -> None:
    """Write ``src`` ``copies`` times into ``dst`` (a fraction: the first lines of one more copy)."""
    with open(dst, "wb") as out:
        for copy in range(math.ceil(copies)):
            _append(src, out, min(copies - copy, 1.0), _mask(seed, copy))


def _repeat(folder: Path, base: Path, size_mb: float, seed: int) -> str:
    """The ``repeat`` shape: ``base`` written as often as ``size_mb`` asks, ids rewritten per copy."""
    copies = size_mb / _gateway_mb(base)
    for part in ("gateway", "engine"):
        (folder / part).mkdir(parents=True)
        for src in sorted((base / part).iterdir()):
            _copy_file(src, folder / part / src.name, copies, seed)
    return f"{copies:.2f} copies of the simulation of seed {seed}"


def _seed_node(name: str, seed: int) -> str:
    """An engine log's file name on seed ``seed``'s own cluster: ``decode-0_0.log`` -> ``decode-0-s2_0.log``."""
    host, sep, rest = name.rpartition("_")
    return f"{host}-s{seed}{sep}{rest}" if sep else f"{name}-s{seed}"


def corpus_parts(size_mb: float) -> int:
    """How many shares the corpus is cut into for a ``distinct`` incident of ``size_mb``: one per seed it can
    merge, a seed counted as :data:`SEED_MB_AT_LEAST` (it makes 160-170 MB of gateway logs, so a share or two may
    go unused). More shares at a bigger size: at 4x a customer owns one or two documents, at 1x five or six."""
    return max(1, math.ceil(size_mb / SEED_MB_AT_LEAST))


def _distinct(folder: Path, work: Path, size_mb: float, seed: int, corpus: Path) -> str:
    """The ``distinct`` shape: seeds ``seed``, ``seed`` + 1, ... until ``size_mb``, the last one cut short,
    the k-th seed's tenants owning the k-th share of the corpus (:func:`corpus_parts`)."""
    shares = corpus_parts(size_mb)
    first = base_incident(work, seed, corpus, (0, shares))
    # Seeds differ by a few percent in size: simulate what the first one's size says is needed
    # (in parallel), and more one by one in the rare case that falls short.
    needed = min(math.ceil(size_mb / _gateway_mb(first)), shares)
    bases = [first, *simulate_seeds(work, range(seed + 1, seed + needed), corpus, shares)]
    parts: list[tuple[int, Path, float]] = []  # (seed, its incident, fraction of it used)
    left = float(size_mb)
    # (a last seed cut to a few lines is no part of it; the first seed always is, however small the size asked)
    while not parts or left > 0.01 * _gateway_mb(first):
        if len(parts) == len(bases):
            if len(bases) == shares:  # every share used: another seed would own text one of them owns
                raise SystemExit(f"run.py: {shares} seeds of {SEED_MB_AT_LEAST} MB or more were expected to make {size_mb} MB; "
                                 "they made less: lower SEED_MB_AT_LEAST")
            bases.append(base_incident(work, seed + len(bases), corpus, (len(bases), shares)))
        base = bases[len(parts)]
        mb = _gateway_mb(base)
        parts.append((seed + len(parts), base, min(left / mb, 1.0)))
        left -= mb
    for part in ("gateway", "engine"):
        (folder / part).mkdir(parents=True)
    for name in sorted({p.name for _, base, _ in parts for p in (base / "gateway").iterdir()}):
        with open(folder / "gateway" / name, "wb") as out:
            for _, base, fraction in parts:
                if (base / "gateway" / name).exists():
                    _append(base / "gateway" / name, out, fraction, 0)
    for i, (s, base, fraction) in enumerate(parts):
        for src in sorted((base / "engine").iterdir()):
            with open(folder / "engine" / (src.name if i == 0 else _seed_node(src.name, s)), "wb") as out:
                _append(src, out, fraction, 0)
    # Which seeds' truths score the run (benchmarks/run.py prints how right its list is against them).
    (folder / SEEDS).write_text(json.dumps([{"seed": s, "truth": str(base / "truth.json"), "fraction": round(f, 4)}
                                            for s, base, f in parts], indent=1))
    return f"seeds {seed}..{parts[-1][0]}, the last one {parts[-1][2]:.0%}"


def simulate_seeds(work: Path, seeds: Iterable[int], corpus: Path, shares: int) -> list[Path]:
    """``base_incident`` of every seed (seed ``s`` owning share ``s - seeds[0] + 1`` of ``shares``; the first
    seed of the build, simulated before, the share before them), in parallel processes (one per core)."""
    seeds = list(seeds)
    parts = [(k + 1, shares) for k in range(len(seeds))]
    if len(seeds) <= 1:
        return [base_incident(work, s, corpus, p) for s, p in zip(seeds, parts)]
    with concurrent.futures.ProcessPoolExecutor(min(len(seeds), os.cpu_count() or 1)) as pool:
        return list(pool.map(base_incident, [work] * len(seeds), seeds, [corpus] * len(seeds), parts))


def incident(work: Path, size_mb: float, seed: int, corpus: Path, build: str = "distinct") -> Path:
    """An incident with about ``size_mb`` MB of gateway logs (and engine logs in proportion) of
    shape ``build`` (see the module docstring); made once."""
    folder = work / f"incident-{size_mb}mb-seed{seed}-{build}"
    if (folder / DONE).exists() and (folder / DONE).read_text() == BUILD_VERSION[build]:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    base = base_incident(work, seed, corpus, None if build == "repeat" else (0, corpus_parts(size_mb)))
    what = _repeat(folder, base, size_mb, seed) if build == "repeat" else _distinct(folder, work, size_mb, seed, corpus)
    # Every seed's case file names the same model, window and ceilings; the first seed's is the case's.
    shutil.copy(base / "case.toml", folder / "case.toml")
    (folder / DONE).write_text(BUILD_VERSION[build])
    print(f"built {folder.name} ({what}) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return folder


def folder_mb(folder: Path) -> float:
    """Megabytes of the files in ``folder``."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file()) / MB


def run_case(case_dir: Path, out: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``forensics run`` on the incident (in the measured child); its stage table and what match searched."""
    from forensics.run import run

    result = run(case_dir, out, progress=PhaseReporter())
    record = json.loads((result.case_dir / "match.json").read_text())
    return [st.to_json() for st in result.stages], {**record["searched"], "findings": record["findings"]}


def ingest_all(folder: Path, case: Path) -> list[dict[str, Any]]:
    """``forensics ingest`` of the incident's gateway and engine logs, as the run's first stage does."""
    import time as clock

    from forensics import api
    from forensics.config import load_case_file

    cfg = load_case_file(folder / "case.toml")
    t0 = clock.monotonic()
    inputs = sorted(cfg.inputs, key=lambda spec: spec.format)
    result = api.ingest(case, [spec.path for spec in inputs], config=cfg, progress=PhaseReporter(),
                        path_formats=[None if spec.format == "auto" else spec.format for spec in inputs])
    tables = result.manifest.tables
    return [{"stage": "ingest", "seconds": round(clock.monotonic() - t0, 3), "rows": tables.exchanges if tables else None,
             "note": f"quarantined {tables.quarantine if tables else 0}"}]


def ingest_gateway(gateway: Path, case: Path) -> None:
    """Our ingest of the gateway files alone (what the DuckDB copy reads)."""
    from forensics import api

    api.ingest(case, [gateway], fmt="litellm")


def duckdb_copy(gateway: Path, out: Path) -> None:
    """The baseline: DuckDB's own JSON reader straight to Parquet, every gateway file at once.

    ``ignore_errors`` skips the lines the simulator damages on purpose (DuckDB would stop at the
    first); ``union_by_name`` takes the callback and spend-log files' different keys together.
    """
    import duckdb

    files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in sorted(gateway.iterdir()))
    sql = (f"COPY (SELECT * FROM read_json([{files}], maximum_object_size=67108864, union_by_name=true, ignore_errors=true)) "
           f"TO '{out}' (FORMAT parquet)")
    duckdb.connect().execute(sql)


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


def measure_factor(work: Path, factor: int, size_mb: int, seed: int, corpus: Path, baseline_ingest: bool,
                   ingest_only: bool = False, build: str = "distinct") -> dict[str, Any]:
    """Build the incident of ``size_mb``, run everything on it, return the figures."""
    folder = incident(work, size_mb, seed, corpus, build)
    gateway_mb, engine_mb = folder_mb(folder / "gateway"), folder_mb(folder / "engine")
    out = work / f"reports-{size_mb}mb"
    shutil.rmtree(out, ignore_errors=True)
    # Every timed step starts with the logs in the page cache: the run reads them first, and the copy after it
    # would otherwise read from memory what the run read from disk.
    inputs = [folder / "gateway", folder / "engine"]
    warm_page_cache(inputs)
    run: Measurement = measure(ingest_all, folder, out / "case") if ingest_only else measure(run_case, folder, out)
    parquet = work / f"duckdb-{size_mb}mb.parquet"
    warm_page_cache([folder / "gateway"])  # what the copy reads
    duck = measure(duckdb_copy, folder / "gateway", parquet)
    parquet.unlink(missing_ok=True)
    ours: Measurement | None = None
    if baseline_ingest:
        case = work / f"ingest-{size_mb}mb"
        shutil.rmtree(case, ignore_errors=True)
        warm_page_cache([folder / "gateway"])
        ours = measure(ingest_gateway, folder / "gateway", case)
        shutil.rmtree(case, ignore_errors=True)
    quality = None if ingest_only else score_list(out, folder / SEEDS)
    shutil.rmtree(out, ignore_errors=True)
    return {"factor": factor, "size_mb": size_mb, "gateway_mb": gateway_mb, "engine_mb": engine_mb, "run": run,
            "duckdb": duck, "ingest": ours, "quality": quality}


def score_list(out: Path, seeds_file: Path) -> dict[str, Any] | None:
    """How right the run's list is against the merged seeds' truths: pairs (recipient request, source tenant)
    and exposed customers, precision and recall; None when the incident has no truths (``repeat``, or built
    before they were recorded). The last seed is cut short: of its truth, only the leaks whose recipient and
    source requests both are in the case count (counted whole, a seed cut to a few lines took a seventh
    off the recall). (In the case: ingested, so a leak of that seed whose record was quarantined is left out
    too, where a whole seed's is counted: a pair or two at most.)"""
    reports = [p for p in out.glob("*/evidence.csv") if p.parent.name != "case"]
    if not seeds_file.is_file() or len(reports) != 1:
        return None
    truth_pairs: set[tuple[str, str]] = set()
    truth_exposed: set[str] = set()
    present: set[str] | None = None
    for part in json.loads(seeds_file.read_text()):
        truth = json.loads(Path(part["truth"]).read_text())
        leaks = [f for f in truth["fragments"] if f["is_leak"]]
        if part["fraction"] < 1:
            if present is None:
                import pyarrow.parquet as pq

                table = pq.read_table(reports[0].parent / "case" / "exchanges.parquet", columns=["request_id"])
                present = set(table.column("request_id").to_pylist())
            leaks = [f for f in leaks if f["recipient_request_id"] in present and f["source_request_id"] in present]
        truth_pairs |= {(f["recipient_request_id"], f["source_tenant_id"]) for f in leaks}
        truth_exposed |= {f["source_tenant_id"] for f in leaks}
    with reports[0].open(newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["relation"] == "cross_tenant"]
    pairs = {(r["recipient_request_id"], r["source_tenant_id"]) for r in rows}
    exposed = {r["source_tenant_id"] for r in rows}
    right, right_exposed = len(pairs & truth_pairs), len(exposed & truth_exposed)
    return {"pairs": len(pairs), "true_pairs": right, "truth_pairs": len(truth_pairs),
            "pair_precision": round(right / max(len(pairs), 1), 3), "pair_recall": round(right / max(len(truth_pairs), 1), 3),
            "exposed": len(exposed), "true_exposed": right_exposed, "truth_exposed": len(truth_exposed),
            "exposed_precision": round(right_exposed / max(len(exposed), 1), 3),
            "exposed_recall": round(right_exposed / max(len(truth_exposed), 1), 3)}


def report(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Print the figures of every factor; return the summary line's values."""
    summary: dict[str, Any] = {}
    for r in results:
        run, duck, ours = r["run"], r["duckdb"], r["ingest"]
        stages, searched = run.value if isinstance(run.value, tuple) else (run.value, None)
        total_mb = r["gateway_mb"] + r["engine_mb"]
        k = r["factor"]
        print(f"\n== {k}x: {r['gateway_mb']:,.0f} MB gateway + {r['engine_mb']:,.0f} MB engine logs ==")
        print(f"{'stage':<10}{'seconds':>10}{'MB/s':>10}   rows / note")
        for st in stages:
            print(f"{st['stage']:<10}{st['seconds']:>10.1f}{total_mb / max(st['seconds'], 1e-9):>10.1f}   {st['rows']} {st['note']}")
        if len(stages) > 1:
            print(f"{'run':<10}{run.seconds:>10.1f}{total_mb / run.seconds:>10.1f}   (whole forensics run, in-process time)")
        print(f"{'duckdb':<10}{duck.seconds:>10.1f}{r['gateway_mb'] / duck.seconds:>10.1f}   read_json -> Parquet of the gateway files")
        ingest_s = next(st["seconds"] for st in stages if st["stage"] == "ingest")
        # Both ratios compare MB/s: the run's ingest also reads the engine logs.
        run_ratio = (total_mb / ingest_s) / (r["gateway_mb"] / duck.seconds)
        print(f"ingest stage of the run vs DuckDB copy (MB/s ratio): {run_ratio:.2f}x")
        if ours is not None:
            ratio = duck.seconds / ours.seconds
            print(f"{'ingest':<10}{ours.seconds:>10.1f}{r['gateway_mb'] / ours.seconds:>10.1f}   forensics ingest of the gateway files alone")
            print(f"ingest of the gateway files vs DuckDB copy: {ratio:.2f}x   (peak RSS {_mb(ours.rss_total_bytes)})")
            summary["ingest_vs_duckdb"] = round(ratio, 3)
        if searched is not None:
            cores = os.cpu_count() or 1
            match_s = next(st["seconds"] for st in stages if st["stage"] == "match")
            stream_s = sum(ph.seconds for ph in run.phases if ph.name == "match: streaming prompts and responses")
            # CPU time of every process in the match stage's phases (the targets' loading, before them, is
            # not counted): what to compare between runs on a machine others share.
            match_cpu = sum(ph.cpu_seconds for ph in run.phases if ph.name.startswith("match:"))
            found = searched["findings"]
            print(f"match searched {searched['tokens']:,} tokens in {searched['records']:,} records: "
                  f"{searched['tokens'] / match_s / cores / 1e6:.2f}M tokens/s/core over the stage, "
                  f"{searched['tokens'] / max(stream_s, 1e-9) / cores / 1e6:.2f}M over its streaming pass ({cores} cores); "
                  f"{searched['kgram_hits_kept_after_rarity_and_own_context']:,} k-gram hits kept, "
                  f"{searched['source_texts_verified']:,} source texts verified, "
                  f"{found['total']:,} findings ({found['cross_tenant']:,} cross-tenant), {found['review']:,} to review")
            summary[f"match_tokens_{k}x"] = searched["tokens"]
            summary[f"match_mtok_s_core_{k}x"] = round(searched["tokens"] / match_s / cores / 1e6, 3)
            if match_cpu > 0:
                print(f"match's phases took {match_cpu:.1f} CPU-seconds in all processes: "
                      f"{searched['tokens'] / match_cpu / 1e6:.2f}M tokens per CPU-second")
                summary[f"match_mtok_per_cpu_s_{k}x"] = round(searched["tokens"] / match_cpu / 1e6, 3)
            summary[f"texts_verified_{k}x"] = searched["source_texts_verified"]
        q = r.get("quality")
        if q is not None:
            print(f"the list against the merged seeds' truths: pairs P {q['pair_precision']:.3f} R {q['pair_recall']:.3f} "
                  f"({q['true_pairs']:,} of {q['pairs']:,} named pairs true, of {q['truth_pairs']:,}), exposed customers P "
                  f"{q['exposed_precision']:.3f} R {q['exposed_recall']:.3f} ({q['true_exposed']:,} of {q['exposed']:,} named "
                  f"customers exposed, of {q['truth_exposed']:,})")
            summary[f"pair_precision_{k}x"], summary[f"pair_recall_{k}x"] = q["pair_precision"], q["pair_recall"]
            summary[f"exposed_precision_{k}x"], summary[f"exposed_recall_{k}x"] = q["exposed_precision"], q["exposed_recall"]
        print("peak RSS per process:")
        for p in run.processes:
            print(f"  {p.role:<8} pid {p.pid:<8} first seen in {p.first_phase!r:<42} {_mb(p.rss_bytes):>10}")
        print(f"  all processes together: {_mb(run.rss_total_bytes)} (DuckDB copy: {_mb(duck.rss_total_bytes)})")
        print("per phase: seconds, CPU-seconds of all processes, peak RSS of all processes:")
        for ph in run.phases:
            print(f"  {ph.name:<50}{ph.seconds:>8.1f} s {ph.cpu_seconds:>8.1f} CPU-s {_mb(ph.rss_total_bytes):>10}")
        summary[f"cpu_seconds_{k}x"] = round(sum(ph.cpu_seconds for ph in run.phases), 1)
        summary[f"run_seconds_{k}x"] = round(run.seconds, 1)
        summary[f"run_mb_s_{k}x"] = round(total_mb / run.seconds, 1)
        summary[f"ingest_stage_vs_duckdb_{k}x"] = round(run_ratio, 3)
        summary[f"peak_rss_total_{k}x_mib"] = round(run.rss_total_bytes / (1 << 20))
        for st in stages:
            summary[f"{st['stage']}_seconds_{k}x"] = st["seconds"]
    if len(results) > 1:
        first, last = results[0]["run"].rss_total_bytes, results[-1]["run"].rss_total_bytes
        growth = last / first - 1
        print(f"\npeak RSS of all processes, {results[0]['factor']}x -> {results[-1]['factor']}x: {_mb(first)} -> {_mb(last)} ({growth:+.0%})")
        summary["peak_rss_growth"] = round(growth, 3)
    return summary


def main() -> None:
    """Parse the options, run every scale factor, print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="MB of gateway logs at scale factor 1")
    ap.add_argument("--scale-factors", default="1,4", help="comma-separated multiples of --size-mb (memory must stay flat)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpora")
    ap.add_argument("--work", type=Path, default=REPO / "bench-out" / "run", help="incidents are kept here for reruns")
    ap.add_argument("--build", choices=("distinct", "repeat"), default="distinct",
                    help="distinct: a seed per simulation (a real incident); repeat: one simulation repeated (a stress shape)")
    ap.add_argument("--ingest-only", action="store_true", help="measure forensics ingest in place of the whole forensics run")
    args = ap.parse_args()
    if not args.corpus.is_dir():
        ap.error(f"no corpus folder {args.corpus} (the realistic scenario draws its text from it): give --corpus")
    factors = sorted({int(f) for f in args.scale_factors.split(",")})
    args.work.mkdir(parents=True, exist_ok=True)
    results = [measure_factor(args.work, k, args.size_mb * k, args.seed, args.corpus, baseline_ingest=(i == 0),
                              ingest_only=args.ingest_only, build=args.build)
               for i, k in enumerate(factors)]
    print(json.dumps(report(results), sort_keys=True))


if __name__ == "__main__":
    main()
