"""The short ways taken for speed on the common shapes give what the general checks give.

Streamed responses are reassembled chunk by chunk (hundreds per record); plain dicts with string
contents take a short way, anything else the general checks. The finaliser writes on a background
thread; a write that fails there must still fail the ingest. A run finalises its inputs of every
format once.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import table_rows
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics import api
from forensics.errors import InputError
from forensics.ingest import fields as fields_module
from forensics.ingest import finalize as finalize_module
from forensics.ingest import registry as registry_module
from forensics.ingest.fields import RecordError, chunks_text
from forensics.ingest.finalize import _BackgroundWriter
from forensics.ingest.registry import FORMATS
from forensics.run import run


class _Frozen(Mapping[str, Any]):
    """A mapping that is not a dict (the general path)."""

    def __init__(self, **values: Any) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def test_plain_chunks_join_per_choice_with_finish_reason_and_usage() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]},
        {"choices": [{"index": 1, "delta": {"content": "Oth"}}, {"index": 0, "delta": {"content": "lo"}}]},
        {"choices": [{"index": 1, "delta": {"content": "er"}, "finish_reason": "length"}]},
        {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
    ]
    text, finish, usage = chunks_text(chunks)
    assert text == "<|choice 0|>\nHello\n\n<|choice 1|>\nOther"
    assert finish == "length"
    assert usage == {"prompt_tokens": 3, "completion_tokens": 4}


def test_odd_chunk_shapes_take_the_general_way_with_the_same_meaning() -> None:
    chunks: list[Any] = [
        '{"choices": [{"index": 0, "delta": {"content": "a"}}]}',  # a chunk exported as a JSON string
        _Frozen(choices=[_Frozen(index=0, delta=_Frozen(content="b"))]),  # mappings that are not dicts
        {"choices": [{"index": 0, "delta": {"content": [{"type": "text", "text": "c"}, {"type": "image_url"}]}}]},
        {"choices": [{"index": "0", "delta": {"content": None}}]},  # an index that is not a number counts as 0
        {"choices": [{"index": 0, "message": {"content": "d"}}]},  # a message instead of a delta
        {"choices": [{"index": 0, "delta": None, "finish_reason": 7}]},  # no delta, a finish reason that is not text
        {"choices": None},
    ]
    assert chunks_text(chunks) == ("abcd", None, {})


_plain_delta = st.one_of(
    st.fixed_dictionaries({"content": st.text(max_size=5)}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": st.text(max_size=5)}),
    st.fixed_dictionaries({"content": st.text(max_size=5), "tool_calls": st.sampled_from([None, []])}),
    st.fixed_dictionaries({"content": st.text(max_size=5), "reasoning_content": st.just("")}),
)
_odd_delta = st.one_of(
    st.fixed_dictionaries({"content": st.text(max_size=5), "reasoning_content": st.just("why")}),
    st.fixed_dictionaries({"content": st.sampled_from([None, 3])}),
    st.fixed_dictionaries({"tool_calls": st.just([{"index": 0, "function": {"name": "f", "arguments": "{}"}}])}),
    st.none(),
)
_usage = st.sampled_from([None, {"completion_tokens": 2}, {"prompt_tokens": 1}])
_plain_chunk = st.fixed_dictionaries(
    {"choices": st.lists(st.fixed_dictionaries(
        {"delta": _plain_delta}, optional={"index": st.sampled_from([0, 1, True, "0"]),
                                           "finish_reason": st.sampled_from([None, "stop", "length", 7])}),
        min_size=1, max_size=1)},
    optional={"usage": _usage})
_odd_chunk = st.one_of(
    st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries({"delta": _odd_delta}), min_size=1, max_size=1)},
                          optional={"usage": _usage}),
    st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries({"delta": _plain_delta}), min_size=2, max_size=2)}),
    st.fixed_dictionaries({"choices": st.sampled_from([None, []]), "usage": st.just({"prompt_tokens": 9})}),
    st.fixed_dictionaries({"choices": st.lists(st.fixed_dictionaries({"delta": _plain_delta}), max_size=1),
                           "usage": st.just(5)}),
    st.fixed_dictionaries({"type": st.just("response.output_text.delta"), "delta": st.text(max_size=3)}),
    st.just('{"choices": [{"index": 0, "delta": {"content": "s"}}]}'),
)


def _outcome(chunks: list[Any]) -> Any:
    try:
        return chunks_text(chunks)
    except RecordError as exc:
        return ("refused", str(exc))


@settings(max_examples=400, deadline=None)
@given(st.lists(_plain_chunk, max_size=6), st.one_of(st.none(), _odd_chunk), st.integers(0, 6))
def test_the_one_pass_of_plain_chunks_reads_every_list_as_the_general_loop_does(
        chunks: list[Any], odd: Any, at: int) -> None:
    # Plain chunks, and half the time one of another shape, which sends the whole list the general way.
    if odd is not None:
        chunks.insert(at, odd)
    fast = _outcome(chunks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fields_module, "_plain_stream", lambda _chunks: None)
        general = _outcome(chunks)
    assert fast == general


@pytest.mark.parametrize(("chunks", "problem"), [
    (["not json"], r"chunks\[0\] is a str"),
    ([{"choices": ["x"]}], r"chunks\[0\]\.choices\[0\] is not an object"),
    ([{"choices": [{"delta": {"content": 5}}]}], "response content is a int"),
    ([{"choices": [{"delta": _Frozen(content=5)}]}], "response content is a int"),
])
def test_broken_chunks_are_refused_with_the_place_named(chunks: list[Any], problem: str) -> None:
    with pytest.raises(RecordError, match=problem):
        chunks_text(chunks)


class _Sink:
    def __init__(self, fail_at: int | None = None) -> None:
        self.rows: list[int] = []
        self.fail_at = fail_at

    def write_batch(self, batch: pa.Table) -> None:
        if len(self.rows) == self.fail_at:
            raise OSError("disk full")
        self.rows.extend(batch.column("n").to_pylist())


def test_background_writer_keeps_the_order_of_batches() -> None:
    sink = _Sink()
    writer = _BackgroundWriter(sink)  # type: ignore[arg-type]
    for start in range(0, 100, 10):
        writer.write_batch(pa.table({"n": list(range(start, start + 10))}))
    writer.close()
    assert sink.rows == list(range(100))


def test_background_writer_raises_a_failed_write() -> None:
    writer = _BackgroundWriter(_Sink(fail_at=20))  # type: ignore[arg-type]
    with pytest.raises(OSError, match="disk full"):
        for start in range(0, 100, 10):
            writer.write_batch(pa.table({"n": list(range(start, start + 10))}))
        writer.close()
    writer.close(wait_only=True)  # what the finaliser does on its way out: no second error


SAMPLE = Path(__file__).resolve().parent.parent / "sample_logs"


def _tables(case: Path) -> dict[str, Any]:
    manifest = json.loads((case / "manifest.json").read_text(encoding="utf-8"))
    return {
        "tables": {name: table_rows(case / f"{name}.parquet") for name in ("exchanges", "engine_events", "quarantine")},
        "files": [{k: f[k] for k in ("path", "format", "lines", "ingested", "quarantined", "blank", "duplicate")}
                  for f in manifest["files"]],
    }


def test_inputs_of_several_formats_in_one_call_give_the_tables_of_one_call_per_format(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(SAMPLE)
    per_format = tmp_path / "per-format"
    api.ingest(per_format, [Path("engine")], fmt="sglang")
    api.ingest(per_format, [Path("gateway")], fmt="litellm")
    together = tmp_path / "together"
    api.ingest(together, [Path("engine"), Path("gateway")], path_formats=["sglang", "litellm"])
    assert _tables(together) == _tables(per_format)
    assert {f["format"] for f in _tables(together)["files"]} == {"sglang", "litellm"}


def test_a_format_per_path_is_checked_like_format(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown format 'nope'"):
        api.ingest(tmp_path / "case", [SAMPLE / "engine", SAMPLE / "gateway"], path_formats=["sglang", "nope"])
    with pytest.raises(ValueError, match="names 1 formats for 2 paths"):
        api.ingest(tmp_path / "case", [SAMPLE / "engine", SAMPLE / "gateway"], path_formats=["sglang"])


def test_a_run_rebuilds_the_case_tables_once_for_inputs_of_two_formats(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each rebuild reads every staged row again: one per format doubled the finaliser's time.
    calls: list[int] = []
    real = finalize_module.finalize

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(finalize_module, "finalize", counted)
    result = run(SAMPLE, tmp_path / "out")
    assert len(calls) == 1
    assert {f["format"] for f in json.loads((result.case_dir / "manifest.json").read_text())["files"]} == {"litellm", "sglang"}


@pytest.mark.parametrize("batch_bytes, max_rows", [(1, 16), (1 << 40, 1 << 30)])
def test_the_finaliser_keeps_the_same_rows_whatever_its_batches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_bytes: int, max_rows: int) -> None:
    # Staged rows are read in batches of about READ_BATCH_BYTES; a batch whose rows are all kept is
    # passed on whole, others are filtered: 16-row batches (most cut by a duplicate) and one batch
    # per file give the same tables.
    expected = api.ingest(tmp_path / "default", [SAMPLE / "gateway", SAMPLE / "engine"])
    assert sum(f["duplicate"] for f in expected.manifest.files) > 0  # rows left out: the filtered way is taken
    monkeypatch.setattr(finalize_module, "READ_BATCH_BYTES", batch_bytes)
    monkeypatch.setattr(finalize_module, "READ_BATCH_MAX_ROWS", max_rows)
    api.ingest(tmp_path / "other", [SAMPLE / "gateway", SAMPLE / "engine"])
    assert _tables(tmp_path / "other") == _tables(tmp_path / "default")


def test_staged_rows_are_read_a_few_megabytes_at_a_time(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    def staged(*groups: tuple[int, int]) -> pq.ParquetFile:
        """A staged file of one row group per (rows, bytes per row)."""
        path = tmp_path / f"{groups}.parquet"
        # As staging writes text: no compression, no dictionary.
        with pq.ParquetWriter(path, pa.schema([("prompt_text", pa.large_string())]), compression="none",
                              use_dictionary=False) as writer:
            for rows, size in groups:
                writer.write_table(pa.table({"prompt_text": pa.array(["x" * size] * rows, pa.large_string())}))
        return pq.ParquetFile(path)

    assert finalize_module.read_batch_rows(staged((64, 1 << 20)), 0) == 16  # megabyte prompts: a few at a time
    assert finalize_module.read_batch_rows(staged((20_000, 10)), 0) == finalize_module.READ_BATCH_MAX_ROWS
    assert 500 <= finalize_module.read_batch_rows(staged((2_000, 6_000)), 0) <= 800  # about 4 MB of 6 KB records
    # Sized per row group: a run of big rows after many small ones is not read 4,096 at a time.
    skewed = staged((100_000, 10), (200, 1 << 20))
    assert [finalize_module.read_batch_rows(skewed, i) for i in range(2)] == [finalize_module.READ_BATCH_MAX_ROWS, 16]


def _lines_for_both_ways() -> bytes:
    """Gateway lines of every kind the bytes path must settle as the text path does."""
    good = (SAMPLE / "gateway" / "litellm-callbacks-2026-08-27.jsonl").read_bytes().splitlines()[:40]
    record = json.loads(good[0])
    slo = record["standard_logging_object"]
    no_tenant = json.dumps({**slo, "metadata": {}, "end_user": ""}).encode()
    odd = [
        b'{"standard_logging_object": {"id": "x"',  # cut short: invalid JSON, its message quoted
        b'{"id": "bad-utf8", "startTime": 1, "messages": "\xff\xfe"}',  # not UTF-8: the UTF-8 reason
        b'[1, 2, 3]',  # JSON, but not an object
        b'   {"id": "leading blanks", "startTime": 1787788820, "organization_id": "org-a", "messages": "hi"}',
        b'{"id": "no time", "organization_id": "org-a"}',
        b"",
        b"   ",
        no_tenant,
        json.dumps({**slo, "id": "caf\u00e9-\u4e2d", "messages": [{"role": "user", "content": "\u00e9" * 3000}]},
                   ensure_ascii=False).encode(),  # text past the excerpt's cut, in multi-byte characters
        json.dumps({"standard_logging_object": {**slo, "id": "emoji"}, "note": "\U0001f600"}).encode(),  # escaped surrogate pair
        b'{"id": "lone", "note": "\\ud800"}',  # a lone surrogate: invalid JSON
    ]
    return b"\n".join(good + odd) + b"\n"


def test_litellm_lines_read_as_bytes_give_what_the_text_parser_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "logs" / "litellm-callbacks.jsonl"
    log.parent.mkdir()
    log.write_bytes(_lines_for_both_ways())
    fast = api.ingest(tmp_path / "fast", [log], fmt="litellm")
    litellm = FORMATS.get("litellm")
    assert litellm.parse_raw is not None  # the path this test is about is the one taken
    monkeypatch.setattr(registry_module.FORMATS, "_formats",
                        {**registry_module.FORMATS._formats, "litellm": dataclasses.replace(litellm, parse_raw=None)})
    slow = api.ingest(tmp_path / "slow", [log], fmt="litellm")
    assert _tables(tmp_path / "fast") == _tables(tmp_path / "slow")
    assert [f["quarantined"] for f in fast.manifest.files] == [f["quarantined"] for f in slow.manifest.files]
    quarantined = table_rows(tmp_path / "fast" / "quarantine.parquet")
    reasons = " | ".join(row["reason"] for row in quarantined)
    assert "not valid UTF-8" in reasons and "invalid JSON" in reasons and "no tenant" in reasons
    assert len(table_rows(tmp_path / "fast" / "exchanges.parquet")) > 30


def test_kept_rows_stream_is_taken_file_by_file_in_line_order() -> None:
    # The finaliser reads the kept rows as one stream beside the staged files: each file takes
    # exactly its own rows up to the line it has reached, and a row never taken is noticed.
    table = pa.table({"ord": [0, 0, 1, 1], "line": [1, 5, 2, 9], "request_id": ["a", "b", "c", "d"],
                      "damage": [None, "quarantined_neighbour", None, None], "has_keys": [True, False, False, True],
                      "k1": ["p", None, None, "q"]})
    kept = finalize_module._KeptRows(pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=3)))
    rows = finalize_module._kept_tuples
    assert rows(kept.take_until(0, 3)) == [(1, "a", None, True, "p")]
    assert kept.any_until(0, 10) and not kept.any_until(1, 10)
    assert rows(kept.take_until(0, 10)) == [(5, "b", "quarantined_neighbour", False, None)]
    assert rows(kept.take_until(0, 99)) == [] and not kept.exhausted()
    assert [r[0] for r in rows(kept.take_until(1, 9))] == [2, 9]  # across the stream's batches
    assert kept.exhausted()
