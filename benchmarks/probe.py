"""The match pass's k-gram probe and the holder compaction's sort, against the forms they replaced, in one run.

    python benchmarks/probe.py [--corpus ../shared/corpora] [--mb 15] [--targets 2000] [--rounds 7]

Tokenizes about ``--mb`` MB of the corpora's text in chat-sized texts (2,000 characters), takes ``--targets`` of
them as the targets (their k-grams make the index, as the suspect and control responses do), and times, alternating
``--rounds`` times:

- the probe as the pass runs it (``TargetIndex.probe_kgrams``: hashed and looked up in one compiled pass, a block
  at a time) against the array passes before stop 46 (``kgrams_many``, then ``TargetIndex.probe``), over every
  text's tokens; the same hits (checked);
- the holder compaction's sort (``rarity.by_kgram_and_tenant``) against ``np.lexsort``, over (k-gram id, tenant
  code) entries as the pass makes them (one per hit, the hit's text's customer among ``--tenants``); the same order
  of k-grams and tenants (checked).

Prints the seconds of each, and the ratios of their minima and of their medians. Absolute times on a shared
machine mislead; the ratios, taken in the same run, are the result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from pieces import chat_sized_texts  # benchmarks/pieces.py, beside this script

from forensics.match import fingerprint
from forensics.match.index import Target, TargetIndex
from forensics.match.rarity import by_kgram_and_tenant
from forensics.match.stream import tenant_code

#: The checkout this script is in: the corpus is looked for next to it.
REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    """Run the comparison and print it."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpora")
    ap.add_argument("--mb", type=float, default=15.0, help="megabytes of text to search")
    ap.add_argument("--targets", type=int, default=2000, help="texts taken as the targets")
    ap.add_argument("--tenants", type=int, default=300, help="customers the texts are spread over")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}: pass --corpus", file=sys.stderr)
        return 2
    joined, texts = chat_sized_texts(args.corpus, args.mb)
    rng = np.random.default_rng(0)
    picked = rng.choice(len(texts), size=min(args.targets, len(texts)), replace=False)
    index = TargetIndex([Target(f"t{i}", "x", 0, 1, None, False, False, texts[int(i)]) for i in picked], 5)
    tk, owner, _ = fingerprint.tokenize_many(texts)

    def array_passes() -> tuple[np.ndarray, np.ndarray]:
        grams, where = fingerprint.kgrams_many(tk.hash, owner, index.k)
        pos, gid = index.probe(grams)
        return where[pos], gid

    def compiled() -> tuple[np.ndarray, np.ndarray]:
        result: tuple[np.ndarray, np.ndarray] = index.probe_kgrams(tk.hash, owner)
        return result

    a, b = compiled(), array_passes()
    if not all(np.array_equal(x, y) for x, y in zip(a, b)):
        print("the compiled probe's hits differ from the array passes'", file=sys.stderr)
        return 1
    codes = np.array([tenant_code(f"customer-{i}") for i in range(args.tenants)], dtype=np.int64)
    gids = a[1]
    tenants = codes[rng.integers(0, len(codes), size=len(gids))]
    one_key = by_kgram_and_tenant(gids, tenants)
    two_keys = np.lexsort((tenants, gids))
    if not (np.array_equal(gids[one_key], gids[two_keys]) and np.array_equal(tenants[one_key], tenants[two_keys])):
        print("the one-key sort orders the holder entries differently from lexsort", file=sys.stderr)
        return 1
    print(f"{len(joined) / 1e6:.1f} MB of corpus text in {len(texts):,} texts, {len(tk):,} tokens; "
          f"{len(index.targets):,} targets, {index.kgram_count:,} distinct target k-grams; {len(gids):,} hits; "
          f"{args.rounds} rounds alternating")
    _compare("probe", {"compiled, a block at a time": compiled, "kgrams_many, then probe": array_passes}, args.rounds)
    _compare("holder sort", {"one 64-bit key": lambda: by_kgram_and_tenant(gids, tenants),
                             "lexsort": lambda: np.lexsort((tenants, gids))}, args.rounds)
    print("the same hits, and the same order of holder entries, in both forms")
    return 0


def _compare(what: str, forms: dict[str, Callable[[], Any]], rounds: int) -> None:
    seconds: dict[str, list[float]] = {name: [] for name in forms}
    for _ in range(rounds):
        for name, run in forms.items():
            t0 = time.perf_counter()
            run()
            seconds[name].append(time.perf_counter() - t0)
    (ours, a), (theirs, b) = seconds.items()
    for name, runs in seconds.items():
        print(f"  {what}, {name:30} min {min(runs):.3f} s  median {statistics.median(runs):.3f} s")
    print(f"ratio {what} {ours} / {theirs}: minima {min(a) / min(b):.3f}, medians "
          f"{statistics.median(a) / statistics.median(b):.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
