"""Benchmark: generate a large simulated incident and print its size, time and peak memory.

    python benchmarks/simulate.py --out bench-out/sim-large [--scale large] [--seed 1] [--corpus DIR]

Peak RSS is read from the kernel (``ru_maxrss``) after the run: it must stay flat as the output
grows (prompts are rebuilt from seeds, never kept; lines are held only while their request is in
flight).
"""

from __future__ import annotations

import argparse
import resource
import shutil
import time
from pathlib import Path

from forensics.lab.simulate import simulate


def main() -> None:
    """Run one simulation and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench-out/sim-large"))
    ap.add_argument("--scale", default="large")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--format", default="litellm")
    ap.add_argument("--corpus", type=Path, default=None)
    ap.add_argument("--compress", action="store_true", help="compress gateway files as the sample does (slower)")
    args = ap.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    start = time.perf_counter()
    result = simulate(args.out, seed=args.seed, scale=args.scale, fmt=args.format, corpus=args.corpus, compress=args.compress)
    elapsed = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    written = sum(f["bytes"] for f in result.files)
    raw_text = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    c = result.counts
    print(f"scale={args.scale} seed={args.seed} format={args.format} corpus={args.corpus}")
    print(f"files: {len(result.files)} log files, {written / 1e6:.1f} MB on disk (folder {raw_text / 1e6:.1f} MB)")
    print(f"requests: {c['requests']}, suspects: {c['suspects']}, leak fragments: {c['leak_fragments']}, rejected: {c.get('rejected', 0)}")
    print(f"time: {elapsed:.1f} s ({written / 1e6 / elapsed:.1f} MB/s written)")
    print(f"peak RSS: {peak_mb:.0f} MB")


if __name__ == "__main__":
    main()
