"""Ingest with a tokenizer file: exact counts only where they matter, against counting every row, in one run.

    python benchmarks/tokens.py [--size-mb 48] [--huge 4] [--corpus ../shared/corpora] [--ceiling 681280]

1. Trains a byte-level BPE tokenizer (16k merges, the ``tokenizers`` library) on the corpus text,
   so its speed is that of a real model's ``tokenizer.json`` (no network: nothing is downloaded).
2. Writes a chat-shaped LiteLLM callback log of about ``--size-mb`` MB: records of 200 to 12,000
   characters of real text, plus ``--huge`` prompts of 2.8-4 MB (the incident's, near and above
   the ceiling).
3. Times ``forensics ingest`` of that log in a fresh process, three ways: without a tokenizer;
   with it and the case's ceiling (the band decides the rows far below it, the rest go through
   the batch encoder); with it and no ceiling at ingest (every row tokenized). Prints seconds,
   the tokenizer's extra cost in each case and their ratio, and the rows the band decided.
4. Scans both tokenized cases with the same ceiling and checks that their suspects are identical.

Absolute times on a shared machine mislead; the ratios, taken in the same run, are the result.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from forensics.lab.bench import measure

#: The checkout this script is in: the corpus is looked for next to it.
REPO = Path(__file__).resolve().parent.parent


def corpus_texts(corpus: Path) -> list[str]:
    """Every string of the corpora longer than 40 characters (prompts, answers, articles)."""
    out: list[str] = []

    def walk(obj: Any) -> None:
        if isinstance(obj, str):
            if len(obj) > 40:
                out.append(obj)
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v)
        elif isinstance(obj, list):
            for v in obj:
                walk(v)

    for path in sorted(corpus.rglob("*")):
        if path.suffix == ".txt":
            walk(path.read_text(encoding="utf-8").splitlines())
        elif path.suffix == ".jsonl":
            walk([json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()])
        elif path.suffix == ".json":
            walk(json.loads(path.read_text(encoding="utf-8")))
    return out


def train_tokenizer(texts: list[str], path: Path) -> None:
    """A byte-level BPE tokenizer trained on ``texts`` (the GPT-2 / Llama 3 / GLM family's kind)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=16_384, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    tok.save(str(path))


def generate(path: Path, size_mb: int, huge: int, texts: list[str], seed: int = 1) -> int:
    """Write a chat-shaped LiteLLM callback log; return its record count."""
    rng = random.Random(seed)
    target = size_mb * 1_000_000
    pool = "\n\n".join(texts)
    huge_at = set(rng.sample(range(1, 4000), huge))
    written = n = 0
    with open(path, "wb") as fh:
        while written < target or n < max(huge_at, default=0):
            n += 1
            size = rng.randint(2_800_000, 4_000_000) if n in huge_at else rng.randint(200, 12_000)
            start = rng.randrange(0, len(pool) - size)  # the pool (all the corpora) is longer than any prompt
            prompt = pool[start : start + size]
            answer = texts[rng.randrange(len(texts))][:3000]
            t = 1787900000.0 + n * 3.7
            rec = {
                "id": f"chatcmpl-{n:09d}", "call_type": "acompletion", "status": "success",
                "startTime": t, "endTime": t + 9.5, "model": "openai/glm-5.3", "model_group": "glm-5.3",
                "messages": [{"role": "system", "content": "You are a helpful assistant."},
                             {"role": "user", "content": prompt}],
                "response": {"choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": answer}}],
                             "usage": {"prompt_tokens": 1, "completion_tokens": 300, "total_tokens": 301}},
                "prompt_tokens": 1, "metadata": {"user_api_key_team_id": f"team-{n % 41:03d}"},
            }
            line = orjson.dumps(rec) + b"\n"
            fh.write(line)
            written += len(line)
    return n


def ingest_case(log: Path, case: Path, tokenizer: Path | None, ceiling: int | None) -> dict[str, Any]:
    """Our ingest of ``log`` (run in a fresh process by ``measure``); returns the manifest's band figures."""
    from forensics import api

    api.ingest(case, [log], fmt="litellm", config=api.make_config(tokenizer=tokenizer, real_ceiling_tokens=ceiling))
    rows: dict[str, Any] = json.loads((case / "manifest.json").read_text())["prompt_tokens_band"]["rows"]
    return rows


def suspects(case: Path, ceiling: int) -> list[dict[str, Any]]:
    """The scan's suspects of ``case`` at ``ceiling`` (every row of suspects.parquet)."""
    import pyarrow.parquet as pq

    from forensics.config import config_from_mapping
    from forensics.scan import scan

    cfg = config_from_mapping({"name": "bench", "model": "glm-5.3", "window_start": "2026-08-01T00:00:00Z",
                               "window_end": "2026-10-01T00:00:00Z", "real_ceiling_tokens": ceiling,
                               "advertised_window_tokens": 1_048_576}, base=Path("."))
    scan(case, cfg)
    table: list[dict[str, Any]] = pq.read_table(case / "suspects.parquet").to_pylist()
    return table


def main() -> int:
    """Build the tokenizer and the log, run the three ingests, print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=int, default=48)
    ap.add_argument("--huge", type=int, default=4, help="prompts of 2.8-4 MB among the records")
    ap.add_argument("--ceiling", type=int, default=681_280)
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpora")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each ingest; the fastest is kept")
    args = ap.parse_args()
    if not args.corpus.is_dir():
        print(f"skipped: no corpus folder at {args.corpus} (pass --corpus)")
        return 0
    work = Path(tempfile.mkdtemp(prefix="tokens-bench-"))
    try:
        texts = corpus_texts(args.corpus)
        tok = work / "tokenizer.json"
        train_tokenizer(texts[:5000], tok)  # a few MB of text is plenty to learn 16k merges
        log = work / "litellm.jsonl"
        records = generate(log, args.size_mb, args.huge, texts)
        size_mb = log.stat().st_size / 1e6
        runs = {"no tokenizer": (None, None), "tokenizer, band": (tok, args.ceiling), "tokenizer, every row": (tok, None)}
        seconds: dict[str, float] = {}
        band: dict[str, dict[str, Any]] = {}
        for name, (tokenizer, ceiling) in runs.items():
            case = work / name.replace(" ", "").replace(",", "-")
            for _ in range(args.repeat):
                shutil.rmtree(case, ignore_errors=True)
                m = measure(ingest_case, log, case, tokenizer, ceiling, interval=None)
                seconds[name] = min(seconds.get(name, m.wall_seconds), m.wall_seconds)
                band[name] = m.value
        same = suspects(work / "tokenizer-band", args.ceiling) == suspects(work / "tokenizer-everyrow", args.ceiling)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"log: {size_mb:.0f} MB, {records:,} records ({args.huge} prompts of 2.8-4 MB), ceiling {args.ceiling:,} tokens")
    print(f"{'ingest':<24}{'seconds':>9}{'MB/s':>8}{'tokenizer cost s':>18}{'rows tokenized':>16}{'decided by band':>17}")
    base = seconds["no tokenizer"]
    for name in runs:
        b = band[name]
        print(f"{name:<24}{seconds[name]:>9.2f}{size_mb / seconds[name]:>8.1f}{seconds[name] - base:>18.2f}"
              f"{b['counted']:>16,}{b['decided_below']:>17,}")
    every, banded = seconds["tokenizer, every row"], seconds["tokenizer, band"]
    print(f"with the band, ingest with a tokenizer is {every / banded:.2f}x as fast as counting every row "
          f"(the tokenizer's own cost {max(every - base, 0.01) / max(banded - base, 0.01):.1f}x lower)")
    print(f"suspects identical with and without the band: {'yes' if same else 'NO'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
