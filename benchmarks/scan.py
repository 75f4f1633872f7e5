"""How the scan stage scales: a synthetic case of N exchanges and ~3N engine events.

    python benchmarks/scan.py --exchanges 1000000 --out bench-out/scan

Builds the case tables directly (key columns realistic, text columns short: the scan reads only
key columns, so prompt size does not matter to it), plants a known number of suspects of every
kind, runs ``forensics.scan.scan`` and prints wall time, peak memory and whether every planted
suspect came back (and nothing else).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from forensics import schema
from forensics.config import config_from_mapping
from forensics.lab.cases import write_rows
from forensics.scan import scan

CEILING, ADVERTISED = 681280, 1048576
START = np.datetime64("2026-08-20T00:00:00", "us")
WINDOW = ("2026-08-27T00:00:00Z", "2026-09-09T00:00:00Z")


def _exchanges(n: int, rng: np.random.Generator, planted: dict[str, set[str]]) -> pa.Table:
    ids = np.char.add("r-", np.arange(n).astype(str))
    t = START + (rng.random(n) * 30 * 86400e6).astype("timedelta64[us]")
    tokens = np.minimum(rng.lognormal(8, 1.6, n).astype(np.int64) + 20, 2_000_000)
    models = np.where(rng.random(n) < 0.6, "glm-5.3", "qwen3-235b-a22b")
    source = np.full(n, "engine", dtype=object)
    low, high = tokens.copy(), tokens.copy()
    reported = tokens.copy()
    # borderline: estimates straddling the ceiling
    b = rng.choice(n, size=max(n // 20000, 1), replace=False)
    tokens[b], low[b], high[b], source[b] = 650000, 433000, 1040000, "estimate"
    # placeholder: the gateway and the ingest only know "1"; the engine trace tells
    p = rng.choice(np.setdiff1d(np.arange(n), b), size=max(n // 20000, 1), replace=False)
    tokens[p] = low[p] = high[p] = reported[p] = 1
    source[p] = "reported"
    window = (t >= np.datetime64(WINDOW[0][:-1], "us")) & (t < np.datetime64(WINDOW[1][:-1], "us"))
    on_model = models == "glm-5.3"
    scope = window & on_model
    planted["above_ceiling"] = set(ids[scope & (low >= CEILING)])
    planted["borderline"] = set(ids[np.isin(np.arange(n), b) & scope])
    planted["engine_signature"] = set(ids[np.isin(np.arange(n), p) & scope])
    planted["placeholder_all"] = set(ids[p])
    return pa.table({
        "request_id": ids, "tenant_id": np.char.add("t-", (rng.integers(0, 500, n)).astype(str)),
        "model": models, "received_at": pa.array(t, schema.TS), "completed_at": pa.array(t + np.timedelta64(5, "s"), schema.TS),
        "status": np.full(n, "success"), "response_text": np.full(n, "ok"),
        "prompt_tokens": tokens, "prompt_tokens_source": source.astype(str), "prompt_tokens_low": low, "prompt_tokens_high": high,
        "reported_prompt_tokens": reported,
    })


def _events(ex: pa.Table, placeholder: set[str], rng: np.random.Generator) -> list[pa.Table]:
    ids = ex.column("request_id").to_numpy(zero_copy_only=False)
    n = len(ids)
    rooms = rng.integers(1, 2**62, n, dtype=np.int64).astype(np.uint64)
    t = ex.column("received_at").to_numpy()
    pre = np.char.add("prefill-", (np.arange(n) % 4).astype(str))
    dec = np.char.add("decode-", (np.arange(n) % 4).astype(str))
    out = []
    for node, role, out_len in ((pre, "prefill", np.zeros(n, np.int64)), (dec, "decode", rng.integers(10, 900, n))):
        out.append(pa.table({"node": node, "role": np.full(n, role), "time": pa.array(t, schema.TS),
                             "event": np.full(n, "req_time_stats"), "rid": ids, "bootstrap_room": rooms,
                             "input_len": ex.column("prompt_tokens").to_numpy(), "output_len": out_len,
                             "message": np.full(n, "ReqTimeStats(...)")}))
    over = np.array(sorted(placeholder))
    big = ids[ex.column("prompt_tokens_low").to_numpy() >= CEILING]
    rej = np.concatenate([over, big])
    out.append(pa.table({"node": np.full(len(rej), "prefill-0"), "role": np.full(len(rej), "prefill"),
                         "event": np.full(len(rej), "over_limit"), "rid": rej, "input_len": np.full(len(rej), 800000),
                         "limit": np.full(len(rej), CEILING - 1), "message": np.full(len(rej), "Input length ...")}))
    nodes = [f"prefill-{i}" for i in range(4)] + [f"decode-{i}" for i in range(4)]
    out.append(pa.table({"node": nodes, "role": ["prefill"] * 4 + ["decode"] * 4, "event": ["startup"] * 8,
                         "max_total_num_tokens": [CEILING] * 8, "context_len": [ADVERTISED] * 8,
                         "message": ["max_total_num_tokens=..."] * 8}))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exchanges", type=int, default=200_000)
    ap.add_argument("--out", type=Path, required=True, help="scratch folder for the synthetic case (replaced)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    shutil.rmtree(args.out, ignore_errors=True)
    args.out.mkdir(parents=True)
    planted: dict[str, set[str]] = {}
    t0 = time.monotonic()
    ex = _exchanges(args.exchanges, rng, planted)
    write_rows(args.out / "exchanges.parquet", [ex], schema.EXCHANGES)
    events = _events(ex, planted["placeholder_all"], rng)
    write_rows(args.out / "engine_events.parquet", events, schema.ENGINE_EVENTS)
    n_events = sum(t.num_rows for t in events)
    del ex, events
    build = time.monotonic() - t0
    cfg = config_from_mapping({"name": "bench", "model": "glm-5.3", "window_start": WINDOW[0], "window_end": WINDOW[1],
                               "real_ceiling_tokens": "auto", "advertised_window_tokens": "auto"}, base=args.out)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    result = scan(args.out, cfg)
    took = time.monotonic() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    import pyarrow.parquet as pq

    got = pq.read_table(args.out / "suspects.parquet", columns=["request_id", "reasons"]).to_pylist()
    expected = planted["above_ceiling"] | planted["borderline"] | planted["engine_signature"]
    found = {r["request_id"] for r in got}
    print(f"exchanges={args.exchanges} engine_events={n_events} (built in {build:.1f}s)")
    print(f"scan: {took:.2f}s  peak RSS {peak / 1024:.0f} MB (before scan {before / 1024:.0f} MB)")
    print(f"suspects={result.suspects} planted={len(expected)} missed={len(expected - found)} extra={len(found - expected)} "
          f"borderline={result.borderline} engine_signature={result.engine_signature}")
    return 0 if found == expected else 1


if __name__ == "__main__":
    sys.exit(main())
