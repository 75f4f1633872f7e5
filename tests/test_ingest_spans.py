"""A big file is cut into line-aligned spans while it is hashed: each span must start at a line start
and carry the number of that line in the whole file, whatever the chunks the file is read in."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.ingest import reader

LINES = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(LINES, st.booleans(), st.integers(1, 64), st.integers(1, 200))
def test_spans_start_at_lines_and_know_their_numbers(lines: list[bytes], last_newline: bool, chunk: int, split: int) -> None:
    data = b"\n".join(lines) + (b"\n" if last_newline else b"")
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        path = Path(tmp) / "log.jsonl"
        path.write_bytes(data)
        mp.setattr(reader, "CHUNK", chunk)
        sha, spans = reader.scan_file(path, split)
    assert sha == hashlib.sha256(data).hexdigest()
    assert spans[0].start == 0 and spans[0].first_line == 1 and spans[-1].end is None
    for before, span in zip(spans, spans[1:]):
        assert before.end == span.start
        assert data[span.start - 1:span.start] == b"\n"  # a span starts right after an LF
        assert span.first_line == data[:span.start].count(b"\n") + 1


def test_count_lf_counts_every_lf_and_nothing_else() -> None:
    assert reader.count_lf(b"") == 0
    assert reader.count_lf(b"\r\n\n\x0a\x0b\x8a") == 3
    assert reader.count_lf(bytes(range(256)) * 3) == 3
