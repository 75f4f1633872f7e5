"""A big file is cut into line-aligned spans while it is hashed: each span must start at a line start
and carry the number of that line in the whole file, whatever the chunks the file is read in."""

from __future__ import annotations

import gc
import gzip
import hashlib
import os
import tempfile
import warnings
from pathlib import Path

import psutil
import pytest
import xxhash
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
        # The last span ends where the hashing did (a live log may grow), unless the file is read whole:
        # compressed, or with CR line ends (a line reader of its own).
        whole = reader.compression_of(path) is not None or reader.cr_line_endings(path)
        # Read back unchanged, no span may look changed: that would mark a good file's every row damaged.
        for span in spans:
            problems: list[reader.FileProblem] = []
            for _ in reader.read_lines(path, problems, span, decode=False):
                pass
            assert problems == [] or whole, problems
    assert sha == hashlib.sha256(data).hexdigest()
    assert spans[0].start == 0 and spans[0].first_line == 1
    assert spans[-1].end == (None if whole else len(data))
    for span in spans:  # the digest each span is checked against as it is read
        assert span.digest == (None if whole else xxhash.xxh3_64_intdigest(data[span.start:span.end]))
    for before, span in zip(spans, spans[1:]):
        assert before.end == span.start
        assert data[span.start - 1:span.start] == b"\n"  # a span starts right after an LF
        assert span.first_line == data[:span.start].count(b"\n") + 1


def test_count_lf_counts_every_lf_and_nothing_else() -> None:
    assert reader.count_lf(b"") == 0
    assert reader.count_lf(b"\r\n\n\x0a\x0b\x8a") == 3
    assert reader.count_lf(bytes(range(256)) * 3) == 3


def test_a_look_at_a_files_first_bytes_reads_only_its_head(tmp_path: Path) -> None:
    # Telling a file's compression, Parquet magic or text encoding opens it for a few bytes, several
    # times per file: a 1 MB read buffer there read a megabyte each time (on a network mount, real I/O).
    path = tmp_path / "big.jsonl"
    path.write_bytes(b"{}\n" * (1 << 20))
    with reader.open_regular(path) as fh:
        assert fh.read(4) == b"{}\n{"
        assert os.lseek(fh.fileno(), 0, os.SEEK_CUR) <= 64 << 10
    assert reader.compression_of(path) is None and reader.foreign_encoding(path) is None


def test_reading_a_gzip_file_leaves_no_file_open(tmp_path: Path) -> None:
    # GzipFile does not close a file object it was given: the file under it stayed open until the
    # garbage collector found it (a ResourceWarning), once per compressed input.
    path = tmp_path / "log.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"a": 1}\n{"a": 2}\n'))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        fh = reader._open(path)
        opened = [f.path for f in psutil.Process().open_files()]
        assert str(path) in opened
        assert fh.read() == b'{"a": 1}\n{"a": 2}\n'
        fh.close()
        assert str(path) not in [f.path for f in psutil.Process().open_files()]
        assert [line.text for line in reader.read_lines(path, [])] == ['{"a": 1}', '{"a": 2}']
        gc.collect()
