"""The matcher's tokenizer with machine-made runs cut into pieces, against the same tokenizer without, in one run.

    python benchmarks/pieces.py [--corpus ../shared/corpora] [--mb 15] [--rounds 11]

Tokenizes about ``--mb`` MB of the corpora's text (documents and answers as the simulator reads them,
at run time, in chat-sized texts of 2,000 characters) with ``forensics.match.fingerprint.tokenize_many`` as the matcher
runs it, and with the step that cuts keys, hashes and long numbers into pieces (``_split_codes``)
left out, alternating the two ``--rounds`` times. Prints the seconds of each, the ratio of their
minima and of their medians, and how many more tokens the pieces make. Absolute times on a shared
machine mislead; the ratios, taken in the same run, are the result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from forensics.lab.simulate.text import load_corpus
from forensics.match import fingerprint

#: The checkout this script is in: the corpus is looked for next to it.
REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    """Run the comparison and print it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpora")
    ap.add_argument("--mb", type=float, default=15.0, help="megabytes of text to tokenize")
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args()
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}: pass --corpus", file=sys.stderr)
        return 2
    corpus = load_corpus(args.corpus)
    joined = "\n".join(corpus.documents + corpus.answers)[: int(args.mb * 1_000_000)]
    texts = [joined[i : i + 2000] for i in range(0, len(joined), 2000)]
    with_pieces = fingerprint._split_codes
    variants = {"with pieces": with_pieces, "without": lambda tk, cps: tk}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    tokens: dict[str, int] = {}
    fingerprint.tokenize_many(texts[:200])  # fill the character tables once, outside the timing
    try:
        for _ in range(args.rounds):
            for name, step in variants.items():
                fingerprint._split_codes = step
                t0 = time.perf_counter()
                tokens[name] = len(fingerprint.tokenize_many(texts)[0])
                seconds[name].append(time.perf_counter() - t0)
    finally:
        fingerprint._split_codes = with_pieces
    print(f"{len(joined) / 1e6:.1f} MB of corpus text in {len(texts):,} texts, {args.rounds} rounds alternating")
    for name, runs in seconds.items():
        print(f"  {name:12} min {min(runs):.3f} s  median {statistics.median(runs):.3f} s  tokens {tokens[name]:,}")
    a, b = seconds["with pieces"], seconds["without"]
    print(f"ratio with / without: minima {min(a) / min(b):.3f}, medians {statistics.median(a) / statistics.median(b):.3f}; "
          f"tokens {tokens['with pieces'] / tokens['without']:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
