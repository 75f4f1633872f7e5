"""Ingest throughput and memory against a bare DuckDB baseline, in one run.

    python benchmarks/ingest.py [--size-mb 1024] [--scales 1,4] [--corpus ../shared/corpora] [--work bench-out/ingest]

1. Generates a LiteLLM spend-log/callback file of ``--size-mb`` megabytes with realistic prompt
   sizes (most a few KB, a tail of hundreds of KB, a few of ~3-4 MB like the incident's 800k-token
   prompts), text drawn from ``--corpus`` when present (else synthetic words).
2. Times ``forensics ingest`` (a child process, so its peak RSS is measured alone) and the bare
   baseline ``COPY (SELECT * FROM read_json(FILE)) TO 'x.parquet'`` in DuckDB on the same file, and
   prints MB/s for each and their ratio.
3. Repeats our ingest on a file ``k`` times larger for each ``k`` in ``--scales`` and prints peak RSS
   per scale and the ratio to the 1x figure.

Absolute times on a shared machine mislead; the ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from pathlib import Path

import orjson

from forensics.lab.bench import corpus_words, measure, warm_page_cache

#: The checkout this script is in: the corpus is looked for next to it, scratch files go inside it.
REPO = Path(__file__).resolve().parent.parent


def prompt_chars(rng: random.Random) -> int:
    """A prompt size drawn from a long-tailed mix (characters)."""
    u = rng.random()
    if u < 0.80:
        return rng.randint(200, 12_000)
    if u < 0.97:
        return rng.randint(12_000, 400_000)
    return rng.randint(2_800_000, 4_000_000)


def generate(path: Path, size_mb: int, words: list[str], seed: int = 1) -> int:
    """Write a LiteLLM callback-payload log of about ``size_mb`` MB; return its line count."""
    rng = random.Random(seed)
    target = size_mb * 1_000_000
    text = " ".join(words)
    written = 0
    n = 0
    with open(path, "wb") as fh:
        while written < target:
            n += 1
            size = prompt_chars(rng)
            start = rng.randrange(0, max(1, len(text) - 1))
            chunk = (text[start:] + " " + text) if start else text
            while len(chunk) < size:
                chunk += " " + text
            prompt = chunk[:size]
            t = 1787900000.0 + n * 3.7
            rec = {
                "id": f"chatcmpl-{n:09d}", "trace_id": f"t-{n}", "call_type": "acompletion", "status": "success",
                "startTime": t, "endTime": t + 9.5, "completionStartTime": t + 1.0,
                "model": "openai/glm-5.3", "model_group": "glm-5.3",
                "messages": [{"role": "system", "content": "You are a helpful assistant."},
                             {"role": "user", "content": prompt}],
                "response": {"id": f"chatcmpl-{n:09d}", "object": "chat.completion", "model": "glm-5.3",
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": text[start:start + rng.randint(200, 3000)]}}],
                             "usage": {"prompt_tokens": size // 4, "completion_tokens": 300, "total_tokens": size // 4 + 300}},
                "prompt_tokens": size // 4, "completion_tokens": 300, "end_user": f"u-{n % 97}",
                "metadata": {"user_api_key_team_id": f"team-{n % 41:03d}", "user_api_key_org_id": f"org-{n % 13:02d}"},
                "stream": False,
            }
            line = orjson.dumps(rec) + b"\n"
            fh.write(line)
            written += len(line)
    return n


def ingest_log(log: Path, case: Path) -> None:
    """Our ingest of one LiteLLM log into ``case`` (run by ``ours`` in a fresh process)."""
    from forensics import api

    api.ingest(case, [log], fmt="litellm")


def duckdb_copy(log: Path, out: Path) -> None:
    """The baseline: DuckDB's own JSON reader straight to Parquet (run by ``baseline`` in a fresh process)."""
    import duckdb

    sql = f"COPY (SELECT * FROM read_json('{log}', maximum_object_size=67108864)) TO '{out}' (FORMAT parquet)"
    duckdb.connect().execute(sql)


def ours(log: Path, case: Path) -> tuple[float, int]:
    """Wall seconds of the whole child and its peak RSS in bytes (the kernel's figure, no sampler)."""
    shutil.rmtree(case, ignore_errors=True)
    warm_page_cache([log])  # both sides read the log from the page cache, whichever runs first
    m = measure(ingest_log, log, case, interval=None)
    return m.wall_seconds, m.max_rss_bytes


def baseline(log: Path, out: Path) -> tuple[float, int]:
    """The same figures for the DuckDB baseline."""
    out.unlink(missing_ok=True)
    warm_page_cache([log])
    m = measure(duckdb_copy, log, out, interval=None)
    return m.wall_seconds, m.max_rss_bytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--scales", default="1,4", help="comma-separated multiples of --size-mb for the memory test")
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpora")
    ap.add_argument("--work", type=Path, default=REPO / "bench-out" / "ingest")
    ap.add_argument("--keep", action="store_true", help="keep generated files")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    words = corpus_words(args.corpus if args.corpus.is_dir() else None)
    scales = [int(s) for s in args.scales.split(",")]

    results = {}
    rss = {}
    for k in sorted(set([1, *scales])):
        log = args.work / f"litellm-{k}x.jsonl"
        if not log.exists():
            t0 = time.perf_counter()
            lines = generate(log, args.size_mb * k, words, seed=k)
            print(f"generated {log.name}: {log.stat().st_size / 1e6:.0f} MB, {lines} records in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        size_mb = log.stat().st_size / 1e6
        t_ours, rss_ours = ours(log, args.work / f"case-{k}x")
        rss[k] = rss_ours
        if k == 1:
            t_base, rss_base = baseline(log, args.work / "baseline.parquet")
            results = {
                "input_mb": round(size_mb, 1),
                "ours_mb_s": round(size_mb / t_ours, 1),
                "baseline_mb_s": round(size_mb / t_base, 1),
                "throughput_ratio": round(t_base / t_ours, 3),
                "ours_peak_rss_mb": round(rss_ours / 1e6),
                "baseline_peak_rss_mb": round(rss_base / 1e6),
            }
        if not args.keep and k != 1:
            log.unlink()
            shutil.rmtree(args.work / f"case-{k}x", ignore_errors=True)
    for k in sorted(rss):
        results[f"peak_rss_{k}x_mb"] = round(rss[k] / 1e6)
        results[f"peak_rss_{k}x_over_1x"] = round(rss[k] / rss[1], 3)
    print(f"{'metric':<28}{'value':>12}")
    for key, value in results.items():
        print(f"{key:<28}{value:>12}")
    print(json.dumps(results, sort_keys=True))
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
