"""Reading an AI Gateway export as a JSON array against reading the same records as JSON Lines.

    python benchmarks/cloudflare_array.py [--size-mb 256] [--quote-every 220] [--work bench-out/cloudflare]

Writes the same log objects twice, as JSON Lines and as a pretty-printed JSON array, then in one
run times the line reader every JSON Lines format uses (the baseline) and the cloudflare format's
record-by-record array scanner, and prints MB/s, their ratio and each one's peak traced memory
(the scanner must hold one record at a time, not the file). ``--quote-every`` sets how often a word
is in double quotes: escaped quotes are what the scanner has to look at one by one.

Absolute times on a shared machine mislead; the ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import random
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

from forensics.ingest.formats import cloudflare
from forensics.ingest.reader import Line, read_lines

REPO = Path(__file__).resolve().parent.parent
WORDS = ["contract", "clause", "the", "merger", "of", "parties", "line\nbreak", "é", "[x]", "{y}", "a,b"]


def write_inputs(work: Path, size_mb: int, quote_every: int) -> tuple[Path, Path]:
    """The same records as JSON Lines and as a JSON array, about ``size_mb`` each."""
    rng = random.Random(1)
    records = []
    total = 0
    while total < size_mb << 20:
        words = [f'"{w}"' if rng.randrange(quote_every) == 0 else w for w in rng.choices(WORDS, k=rng.randint(100, 40_000))]
        text = " ".join(words)
        total += len(text) + 400
        records.append({"id": f"log-{len(records)}", "created_at": "2026-08-29T10:00:00Z", "provider": "openai", "model": "glm-5.3",
                        "success": True, "tokens_in": 1, "tokens_out": 2, "metadata": json.dumps({"tenant_id": "org-1"}),
                        "request": {"messages": [{"role": "user", "content": text}]},
                        "response": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]}})
    work.mkdir(parents=True, exist_ok=True)
    lines, array = work / "logs.jsonl", work / "logs.json"
    lines.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    array.write_text(json.dumps(records, indent=2), encoding="utf-8")
    return lines, array


def measure(read: Callable[[], Iterator[Line]], path: Path) -> tuple[int, float, float, float]:
    """Records, seconds, MB/s and peak traced MB of one read (timed without tracing, then traced)."""
    started = time.perf_counter()
    n = sum(1 for _ in read())
    seconds = time.perf_counter() - started
    tracemalloc.start()
    sum(1 for _ in read())
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return n, seconds, path.stat().st_size / 2**20 / seconds, peak


def main() -> None:
    """Write the inputs, read both, print the figures and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--quote-every", type=int, default=220)
    parser.add_argument("--work", type=Path, default=REPO / "bench-out" / "cloudflare")
    args = parser.parse_args()
    lines, array = write_inputs(args.work, args.size_mb, args.quote_every)
    base = measure(lambda: read_lines(lines, []), lines)
    ours = measure(lambda: cloudflare.read_records(array, []), array)
    for name, (n, seconds, rate, peak) in (("JSON Lines, read_lines (baseline)", base), ("JSON array, record scanner", ours)):
        print(f"{name}: {n} records, {seconds:.2f} s, {rate:.0f} MB/s, peak traced {peak:.1f} MB")
    print(f"ratio (array scanner / line reader, MB/s): {ours[2] / base[2]:.2f}")


if __name__ == "__main__":
    main()
