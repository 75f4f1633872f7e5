"""LiteLLM records with streamed answers read in one pass, against the general chunk loop, in one run.

    python benchmarks/chunks.py [--input gateway.jsonl] [--corpus ../shared/corpora] [--rounds 9]

Reads the records of a LiteLLM JSON Lines file (``--input``; by default the callback files of the
realistic scenario's seed 1, simulated into a temporary folder from the corpus) and parses every line
with the LiteLLM parser as ingest does (``parse_raw``), once with the one pass over plain streamed
chunks (``forensics.ingest.fields._plain_stream``) and once with it switched off (every streamed answer
through the general loop), alternating the two ``--rounds`` times. Prints the CPU-seconds of each, the
ratio of their minima and medians, how many records held a streamed answer, and that both gave the same
rows. Absolute times on a shared machine mislead; the ratios, taken in the same run, are the result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from forensics.ingest import fields
from forensics.ingest.base import FileContext
from forensics.ingest.registry import FORMATS
from forensics.tokens import Counter

#: The checkout this script is in: the corpus is looked for next to it.
REPO = Path(__file__).resolve().parent.parent


def _lines(args: argparse.Namespace, tmp: Path) -> list[bytes]:
    """The raw lines of ``--input``, or of the simulated incident's callback files (written uncompressed)."""
    if args.input is not None:
        return args.input.read_bytes().splitlines()
    from forensics.lab.simulate import simulate

    simulate(tmp / "sim", seed=1, scale="realistic", fmt="litellm", corpus=args.corpus, compress=False)
    files = sorted((tmp / "sim" / "gateway").glob("litellm-callbacks-*.jsonl"))
    return [line for f in files for line in f.read_bytes().splitlines()]


def _parse_all(lines: list[bytes]) -> tuple[float, list[Any]]:
    """CPU-seconds to parse every line, and the rows (or what the parser said of each line)."""
    ctx = FileContext("bench.jsonl", "0" * 64, "litellm", "UTC", "auto", Counter(), "bench.jsonl")
    parse = FORMATS.get("litellm").parse_raw
    assert parse is not None
    t0 = time.process_time()
    out = [parse(raw, n, ctx) for n, raw in enumerate(lines, 1)]
    return time.process_time() - t0, out


def main() -> int:
    """Run the comparison and print it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", type=Path, default=None, help="a LiteLLM JSON Lines file (default: simulate seed 1)")
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpora")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    if args.input is None and not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}: pass --corpus, or --input with a LiteLLM file", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        lines = _lines(args, Path(tmp))
    streamed = sum(1 for raw in lines if b'"chat.completion.chunk"' in raw)
    one_pass = fields._plain_stream
    variants: dict[str, Any] = {"one pass": one_pass, "general loop": lambda chunks: None}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    rows: dict[str, list[Any]] = {}
    _parse_all(lines[:500])  # imports and first-use tables outside the timing
    try:
        for _ in range(args.rounds):
            for name, step in variants.items():
                fields._plain_stream = step
                spent, rows[name] = _parse_all(lines)
                seconds[name].append(spent)
    finally:
        fields._plain_stream = one_pass
    same = repr(rows["one pass"]) == repr(rows["general loop"])
    print(f"{len(lines):,} records ({sum(map(len, lines)) / 1e6:.1f} MB), {streamed:,} with a streamed answer; "
          f"{args.rounds} rounds alternating; the same rows both ways: {same}")
    for name, runs in seconds.items():
        print(f"  {name:13} CPU min {min(runs):.3f} s  median {statistics.median(runs):.3f} s")
    a, b = seconds["one pass"], seconds["general loop"]
    print(f"ratio one pass / general loop: minima {min(a) / min(b):.3f}, medians {statistics.median(a) / statistics.median(b):.3f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
