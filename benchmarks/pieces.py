"""The matcher's tokenizer as it runs, against three other forms of it, in one run.

    python benchmarks/pieces.py [--corpus ../shared/corpora] [--mb 15] [--rounds 11] [--only pieces|marks|loop]

Tokenizes about ``--mb`` MB of the corpora's text (documents and answers as the simulator reads them,
at run time, in chat-sized texts of 2,000 characters) with ``forensics.match.fingerprint.tokenize_many`` as the matcher
runs it, and three ways more (or those ``--only`` names), alternating them ``--rounds`` times:

- without the step that cuts keys, hashes and long numbers into pieces (``_split_codes``): what the
  pieces cost, and how many more tokens they make;
- with punctuation marks made into tokens and then dropped (``_without_punctuation`` over every token,
  the matcher's path before stop 45), where the matcher now reads them as separators: the same tokens
  (checked), and what that saves;
- with the token bounds and hashes found by numpy array passes (``fingerprint.array_tokens_by_class``,
  the tokenizer before stop 46) in place of the compiled loop (``forensics.match.kernels``): the same
  tokens (checked), and what the loop saves.

Prints the seconds of each, the ratios of their minima and of their medians. Absolute times on a
shared machine mislead; the ratios, taken in the same run, are the result.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

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
    ap.add_argument("--only", choices=["pieces", "marks", "loop"], action="append",
                    help="time the matcher against only this form (repeatable; default: all three)")
    args = ap.parse_args()
    if not args.corpus.is_dir():
        print(f"no corpus at {args.corpus}: pass --corpus", file=sys.stderr)
        return 2
    joined, texts = chat_sized_texts(args.corpus, args.mb)
    with_pieces, tokenize = fingerprint._split_codes, fingerprint._tokenize

    def marks_dropped(text: str | None, match: bool = False) -> tuple[fingerprint.Tokens, np.ndarray]:
        tk, cps = tokenize(text)  # the marks are tokens here ...
        return (fingerprint._without_punctuation(tk, cps) if match else tk), cps  # ... and dropped after

    array_passes = types.SimpleNamespace(tokens_by_class=fingerprint.array_tokens_by_class,
                                         tokens_by_table=fingerprint.array_tokens_by_table,
                                         survey=fingerprint.array_survey)
    forms: dict[str, tuple[str, dict[str, Any]]] = {
        "pieces": ("without pieces", {"_split_codes": lambda tk, cps: tk}),
        "marks": ("marks dropped", {"_tokenize": marks_dropped}),
        "loop": ("array passes", {"_kernels": [array_passes]}),
    }
    variants: dict[str, dict[str, Any]] = {"as it runs": {}}
    variants |= dict(forms[key] for key in (args.only or list(forms)))
    compiled = fingerprint.compiled_kernels()
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    tokens: dict[str, int] = {}
    results: dict[str, Any] = {}
    fingerprint.tokenize_many(texts[:200])  # fill the character tables once, outside the timing
    try:
        for _ in range(args.rounds):
            for name, patch in variants.items():
                for attr, value in patch.items():
                    setattr(fingerprint, attr, value)
                t0 = time.perf_counter()
                results[name] = fingerprint.tokenize_many(texts)
                seconds[name].append(time.perf_counter() - t0)
                fingerprint._split_codes, fingerprint._tokenize = with_pieces, tokenize
                fingerprint._kernels = [compiled]
                tokens[name] = len(results[name][0])
            for other in ("marks dropped", "array passes"):
                if other in results and not all(
                        np.array_equal(a, b) for a, b in zip(_flat(results["as it runs"]), _flat(results[other]))):
                    print(f"the matcher's tokens differ from the {other} form's", file=sys.stderr)
                    return 1
            results.clear()
    finally:
        fingerprint._split_codes, fingerprint._tokenize = with_pieces, tokenize
        fingerprint._kernels = [compiled]
    print(f"{len(joined) / 1e6:.1f} MB of corpus text in {len(texts):,} texts, {args.rounds} rounds alternating")
    for name, runs in seconds.items():
        print(f"  {name:15} min {min(runs):.3f} s  median {statistics.median(runs):.3f} s  tokens {tokens[name]:,}")
    a = seconds["as it runs"]
    for other, label in (("without pieces", "with pieces / without"), ("marks dropped", "marks as separators / made and dropped"),
                         ("array passes", "compiled loop / array passes")):
        if other not in seconds:
            continue
        b = seconds[other]
        print(f"ratio {label}: minima {min(a) / min(b):.3f}, medians {statistics.median(a) / statistics.median(b):.3f}; "
              f"tokens {tokens['as it runs'] / tokens[other]:.4f}")
    checked = [other for other in ("marks dropped", "array passes") if other in seconds]
    if checked:
        print(f"the matcher's tokens and the {' and '.join(checked)} form's are identical (starts, ends, hashes, owners)")
    return 0


def chat_sized_texts(corpus_dir: Path, mb: float) -> tuple[str, list[str]]:
    """About ``mb`` MB of the corpora's documents and answers (as the simulator reads them), and that text cut
    into chat-sized texts of 2,000 characters (also what ``benchmarks/probe.py`` searches)."""
    corpus = load_corpus(corpus_dir)
    joined = "\n".join(corpus.documents + corpus.answers)[: int(mb * 1_000_000)]
    return joined, [joined[i : i + 2000] for i in range(0, len(joined), 2000)]


def _flat(result: tuple[fingerprint.Tokens, np.ndarray, np.ndarray]) -> list[np.ndarray]:
    tk, owner, first = result
    return [tk.start, tk.end, tk.hash, owner, first]


if __name__ == "__main__":
    raise SystemExit(main())
