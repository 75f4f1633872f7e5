"""Ingest of an incident logged as one file per request, against DuckDB on the same files, in one run.

    python benchmarks/many_files.py [--files 1000,4000] [--corpus ../shared/corpora] [--work bench-out/many-files]

LiteLLM's S3 and GCS loggers (and other object-store exports) write one object per request, so an
incident team may get tens of thousands of files of one small record each. For each count in
``--files`` this writes that many chat-sized LiteLLM callback records (prompts of 200-12,000
characters, text from ``--corpus`` when present), once as one file per record and once as a single
file, then times, each in a fresh process:

* ``forensics ingest`` of the folder of files (ours),
* the bare DuckDB copy ``COPY (SELECT * FROM read_json([files...])) TO 'x.parquet'`` of the same files,
* ``forensics ingest`` of the same records as one file,

and prints the ratio to DuckDB and what each file costs us (the difference to the one-file ingest,
per file). The cost per file must stay flat as the files grow: a cost that grows with the count is
quadratic work (until this benchmark, the finaliser listed the staging folder once per file and
table: 46 s for 2,195 one-record files, 11 s after).

Absolute times on a shared machine mislead; the ratios are the result.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from pathlib import Path

import orjson

from forensics.lab.bench import corpus_words, measure, warm_page_cache

REPO = Path(__file__).resolve().parent.parent


def write_records(folder: Path, single: Path, count: int, words: list[str], seed: int = 1) -> int:
    """Write ``count`` chat-sized callback records, one per file in ``folder`` and all in ``single``;
    return the bytes of one copy."""
    rng = random.Random(seed)
    text = " ".join(words)
    folder.mkdir(parents=True)
    total = 0
    with open(single, "wb") as out:
        for n in range(1, count + 1):
            size = rng.randint(200, 12_000)
            start = rng.randrange(0, max(1, len(text) - size - 3000))
            t = 1787900000.0 + n * 3.7
            rec = {
                "id": f"chatcmpl-{n:09d}", "trace_id": f"t-{n}", "call_type": "acompletion", "status": "success",
                "startTime": t, "endTime": t + 9.5, "completionStartTime": t + 1.0,
                "model": "openai/glm-5.3", "model_group": "glm-5.3",
                "messages": [{"role": "user", "content": text[start:start + size]}],
                "response": {"id": f"chatcmpl-{n:09d}", "object": "chat.completion", "model": "glm-5.3",
                             "choices": [{"index": 0, "finish_reason": "stop",
                                          "message": {"role": "assistant", "content": text[start + size:start + size + rng.randint(200, 3000)]}}],
                             "usage": {"prompt_tokens": size // 4, "completion_tokens": 300, "total_tokens": size // 4 + 300}},
                "prompt_tokens": size // 4, "completion_tokens": 300, "end_user": f"u-{n % 97}",
                "metadata": {"user_api_key_team_id": f"team-{n % 41:03d}"}, "stream": False,
            }
            line = orjson.dumps(rec) + b"\n"
            (folder / f"{n:07d}.json").write_bytes(line)  # an object store's key: one request each
            out.write(line)
            total += len(line)
    return total


def ingest_inputs(inputs: list[Path], case: Path) -> int:
    """Our ingest (run in a fresh process by ``measure``); returns the exchanges ingested."""
    from forensics import api

    return api.ingest(case, inputs, fmt="litellm").manifest.tables.exchanges


def duckdb_copy(folder: Path, out: Path) -> None:
    """The baseline: DuckDB's JSON reader over the same files, straight to Parquet."""
    import duckdb

    files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in sorted(folder.iterdir()))
    duckdb.connect().execute(f"COPY (SELECT * FROM read_json([{files}], maximum_object_size=67108864, union_by_name=true)) "
                             f"TO '{out}' (FORMAT parquet)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="1000,4000", help="comma-separated file counts (one record each)")
    ap.add_argument("--corpus", type=Path, default=REPO.parent / "shared" / "corpora")
    ap.add_argument("--work", type=Path, default=REPO / "bench-out" / "many-files")
    ap.add_argument("--keep", action="store_true", help="keep generated files")
    args = ap.parse_args()
    words = corpus_words(args.corpus if args.corpus.is_dir() else None)
    results: dict[str, float] = {}
    print(f"{'files':>7}{'MB':>8}{'ours s':>9}{'duckdb s':>10}{'ratio':>8}{'one file s':>12}{'ms per file':>13}")
    for count in [int(c) for c in args.files.split(",")]:
        work = args.work / f"{count}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        folder, single = work / "objects", work / "all.jsonl"
        size = write_records(folder, single, count, words)
        warm_page_cache([folder, single])
        many = measure(ingest_inputs, [folder], work / "case-many", interval=None)
        base = measure(duckdb_copy, folder, work / "duckdb.parquet", interval=None)
        one = measure(ingest_inputs, [single], work / "case-one", interval=None)
        if many.value != count or one.value != count:
            raise SystemExit(f"ingest kept {many.value} (files) and {one.value} (one file) of {count} records")
        per_file_ms = (many.wall_seconds - one.wall_seconds) / count * 1000
        ratio = base.wall_seconds / many.wall_seconds
        print(f"{count:>7}{size / 1e6:>8.1f}{many.wall_seconds:>9.1f}{base.wall_seconds:>10.1f}{ratio:>7.2f}x"
              f"{one.wall_seconds:>12.1f}{per_file_ms:>13.2f}")
        results[f"ours_vs_duckdb_{count}_files"] = round(ratio, 3)
        results[f"ms_per_file_{count}_files"] = round(per_file_ms, 3)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, sort_keys=True))


if __name__ == "__main__":
    main()
