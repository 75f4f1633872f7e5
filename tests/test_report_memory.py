"""The report stage's memory does not grow with the logs: it reads the exchanges' text in batches.

Issue 14, point 5 (flat memory): the report pulls the text of each evidence span out of the
exchanges table, and a case four times the size must not need four times the memory.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_report_case import make_case

from forensics import schema
from forensics.case import ParquetSink
from forensics.config import load_saved
from forensics.lab.bench import measure
from forensics.report import data as case_data
from forensics.report import write_report
from forensics.report.severity import default_classifier

#: Text of one bulk request (prompt and response): other customers' traffic the report never cites.
BULK_PROMPT_CHARS = 6_000
BULK_RESPONSE_CHARS = 2_000


def _add_bulk(case: Path, megabytes: int) -> int:
    """Append requests of other customers holding ``megabytes`` MB of text to the case's exchanges;
    return the characters of text added."""
    path = case / "exchanges.parquet"
    rows = pq.read_table(path).to_pylist()
    per_row = BULK_PROMPT_CHARS + BULK_RESPONSE_CHARS
    n = megabytes * 1_000_000 // per_row
    when = dt.datetime(2026, 8, 28, tzinfo=dt.UTC)
    with ParquetSink(path, schema.EXCHANGES) as sink:
        sink.write_batch(pa.Table.from_pylist(rows, schema=schema.EXCHANGES))
        for first in range(0, n, 500):
            bulk = []
            for i in range(first, min(first + 500, n)):
                # Different in every row (no two texts alike), compressible as chat text is.
                words = f"bulk request {i} of customer {i % 97} asks about item {i * 7919 % 100_003} "
                bulk.append({
                    "request_id": f"bulk-{i}", "tenant_id": f"bulk-{i % 97}", "model": "glm-5.3",
                    "received_at": when + dt.timedelta(seconds=i), "status": "success",
                    "prompt_text": (words * (BULK_PROMPT_CHARS // len(words) + 1))[:BULK_PROMPT_CHARS],
                    "response_text": (words[::-1] * (BULK_RESPONSE_CHARS // len(words) + 1))[:BULK_RESPONSE_CHARS],
                    "prompt_tokens": 6_000, "prompt_tokens_source": "engine", "source_file": "gateway.jsonl",
                    "source_line": i + 2,
                })
            sink.write_batch(pa.Table.from_pylist(bulk, schema=schema.EXCHANGES))
    return n * per_row


def _report_peak(root: Path, megabytes: int) -> tuple[int, int, Path]:
    """(peak RSS of the report stage, characters of bulk text) on a case with ``megabytes`` MB of
    bulk text; the stage runs in a fresh child process, so the peak is its own."""
    case, _, _ = make_case(root)
    added = _add_bulk(case, megabytes)
    out = root / "report"
    out.mkdir()
    measured = measure(write_report, case, load_saved(case / "config.json"), out, interval=None)
    return measured.max_rss_bytes, added, out


def test_report_memory_does_not_grow_with_the_exchanges_text(tmp_path: Path) -> None:
    small, small_text, small_report = _report_peak(tmp_path / "1x", 32)
    large, large_text, large_report = _report_peak(tmp_path / "8x", 256)
    # The texts are ASCII: a character is a byte. Holding them all added more than every byte
    # (+136 MB for 128 MB when the report joined the tables in DuckDB); what the report holds now
    # is a row group's worth, whatever the number of row groups: +17 to +38 MB for 128 MB and
    # +27 to +30 MB for these 224 MB, from the allocators and the engine's threads.
    assert large - small < (large_text - small_text) / 3, (small >> 20, large >> 20)
    # The bulk requests change nothing the report says about the findings.
    for name in ("notifications.csv", "evidence.csv", "references.csv"):
        assert (small_report / name).read_bytes() == (large_report / name).read_bytes()


@pytest.mark.parametrize("text", ["hello", "hé🙂llo wörld", ""])
def test_spans_are_cut_as_duckdb_substring_cuts_them(text: str) -> None:
    con = duckdb.connect()
    for start in range(-8, 10):
        for end in range(-8, 10):
            expected = con.execute("SELECT substring($1, $2 + 1, $3 - $2)", [text, start, end]).fetchone()
            assert case_data._substring(text, start, end) == (expected[0] if expected else None), (text, start, end)
    assert case_data._substring(None, 0, 3) == ""


def test_a_request_logged_twice_is_cited_from_its_earliest_record(tmp_path: Path) -> None:
    case, _, _ = make_case(tmp_path)
    path = case / "exchanges.parquet"
    rows = pq.read_table(path).to_pylist()
    first = next(r for r in rows if r["request_id"] == "r-globex-1")
    # A later copy with another answer (the same length), stored before the first.
    later = dict(first, received_at=first["received_at"] + dt.timedelta(hours=1),
                 response_text="x" * len(first["response_text"]))
    with ParquetSink(path, schema.EXCHANGES) as sink:
        sink.write_batch(pa.Table.from_pylist([later], schema=schema.EXCHANGES))
        sink.write_batch(pa.Table.from_pylist(rows, schema=schema.EXCHANGES))
    loaded = case_data.load(case, default_classifier(), ["glm-5.3"])
    cited = next(f for f in loaded.findings if f.finding_id == "f-0001")
    assert "Project Bluefin" in cited.recipient_span
    assert cited.recipient_received_at == first["received_at"]
