"""Per-record fault isolation: whatever one record holds, it is ingested or quarantined, never the run.

The explicit repros come first (epoch microseconds, 1e30, figures beyond 64 bits), then the time
rules, then property tests: hypothesis puts any JSON value (every type, extreme magnitudes, deep
nesting) into any field of a valid record of every format and checks that ingest finishes and
that every file reconciles: ``lines = ingested + quarantined + blank + duplicate``.
"""

from __future__ import annotations

import copy
import datetime as dt
import itertools
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics import api
from forensics.ingest.timeparse import TimeError, to_micros

T_2026 = dt.datetime(2026, 8, 26, 14, 32, 12, 626112, tzinfo=dt.UTC)
MICROS_2026 = 1787754732626112  # T_2026 in epoch microseconds

SPEND = {
    "request_id": "chatcmpl-1", "call_type": "acompletion", "api_key": "88dc41", "spend": 0.0,
    "total_tokens": 30, "prompt_tokens": 20, "completion_tokens": 10,
    "startTime": "2026-08-29T10:01:54.88", "endTime": "2026-08-29T10:02:03.115", "completionStartTime": "2026-08-29T10:01:55",
    "model": "openai/glm-5.3", "model_group": "glm-5.3", "organization_id": "", "team_id": "team-acme",
    "end_user": "u-1942", "user": "", "status": "success", "messages": {}, "session_id": "s-77",
    "proxy_server_request": {"model": "glm-5.3", "stream": False, "messages": [
        {"role": "system", "content": "You are a contracts assistant."},
        {"role": "user", "content": [{"type": "text", "text": "Review clause 4."}, {"type": "image_url", "image_url": {"url": "x"}}]}]},
    "response": {"id": "chatcmpl-1", "object": "chat.completion", "created": 1787997723, "model": "glm-5.3",
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": "Clause 4 is fine."}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}},
    "metadata": {"user_api_key_team_id": "team-acme", "user_api_key_org_id": "org-acme", "user_api_key_user_id": "u-1"},
}
PAYLOAD = {
    "event": "success",
    "standard_logging_object": {
        "id": "chatcmpl-2", "trace_id": "t-2", "call_type": "acompletion", "stream": True, "status": "success",
        "startTime": 1787790732.626112, "endTime": 1787790738.490013, "completionStartTime": 1787790733.2,
        "model": "glm-5.3", "model_group": "glm-5.3", "prompt_tokens": 5, "completion_tokens": 7, "end_user": "u-5",
        "metadata": {"user_api_key_org_id": "org-walker", "user_api_key_team_id": "team-walker"},
        "messages": [{"role": "user", "content": "Find the bug in this code."}],
        "response": [{"choices": [{"index": 0, "delta": {"role": "assistant", "content": "The bug"}}]},
                     {"choices": [{"index": 0, "delta": {"content": " is here."}, "finish_reason": "stop"}],
                      "usage": {"prompt_tokens": 5, "completion_tokens": 7}}],
    },
}
SPLIT_REQUEST = {
    "request_id": "r-000481", "timestamp": "2026-08-30T03:12:09.004Z", "tenant_id": "acct-3f9e", "user_id": "u-12",
    "body": {"model": "glm-5.3", "stream": True, "max_tokens": 1024,
             "messages": [{"role": "user", "content": "Summarise the attached due-diligence memo."}]},
}
SPLIT_RESPONSE = {
    "request_id": "r-000481", "timestamp": 1787973141500, "status_code": 200,
    "chunks": [{"id": "c-1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "The memo"}}]},
               {"id": "c-1", "choices": [{"index": 0, "delta": {"content": " covers it."}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 20233, "completion_tokens": 311, "total_tokens": 20544}}],
}
SPLIT_RESPONSE_BODY = {
    "request_id": "r-000482", "timestamp": "2026-08-30T03:12:21.500Z", "status_code": 200,
    "body": {"id": "chatcmpl-9", "model": "glm-5.3", "choices": [{"index": 0, "message": {"content": "Done."}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
}
SGLANG_FINISHED = {
    "timestamp": "2026-08-29T10:02:03.114512", "event": "request.finished", "rid": "chatcmpl-1",
    "obj": {"rid": "chatcmpl-1", "bootstrap_host": "10.0.4.12", "bootstrap_port": 8998, "bootstrap_room": 4410378323519190018, "stream": True},
    "out": {"text": "Clause 4 is fine.", "meta_info": {"id": "chatcmpl-1", "finish_reason": {"type": "length", "length": 256},
                                                        "prompt_tokens": 1, "completion_tokens": 256, "cached_tokens": 0, "e2e_latency": 9.41}},
}
SGLANG_RECEIVED = {
    "timestamp": "2026-08-29T10:01:54.000001", "event": "request.received", "rid": "chatcmpl-1",
    "obj": {"rid": "chatcmpl-1", "bootstrap_host": "10.0.4.12", "bootstrap_port": 8998, "bootstrap_room": 4410378323519190018, "stream": True},
}
SGLANG_TEXT = [
    "[2026-08-27 00:00:05 TP0] max_total_num_tokens={n}, chunked_prefill_size=8192, max_prefill_tokens=16384, context_len={m}",
    "[2026-08-29 10:01:55 TP0] Input length ({n} tokens) exceeds the maximum allowed length ({m} tokens). Use a shorter input., self.rid='{s}'",
    "[2026-08-29 10:01:55 TP0] Request {s} exceeds the maximum number of tokens: {n} > {m}",
    "[2026-08-29 10:01:56 TP0] ReqTimeStats(rid={s}, bootstrap_room={n}, input_len={m}, cached_input_len=0, output_len=0, type=prefill): x",
    "[2026-08-29 10:05:11 TP0] Context corruption detected: Request {s} (bootstrap_room={n}) received metadata from bootstrap_room={m}.",
    "[2026-08-29 10:05:12 TP0] KVTransferError(bootstrap_room={n}): {s}",
    "[2026-08-29 10:05:13 TP0] Prefill bootstrap failed for request rank=0 req.rid='{s}' req.bootstrap_room={n}",
    "[{s} TP0] Decode batch, #running-req: {n}",
]

# Magnitudes that broke ingest or sit on a boundary: 64-bit limits, beyond them, and every epoch band.
EXTREME_INTS = [0, -1, 1, 2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**30, -(10**30),
                10**11, 10**14, 10**17, 10**20, 1787790732626112, 1787790732626112000, 10**400]
EXTREME_FLOATS = [1e30, -1e30, 1.5e308, 5e-324, -0.0, 1e20, 99999999999.5, 1787790732626.112, float("nan"), float("inf")]
EXTREME_STRINGS = ["", " ", "1e30", "-1", "9" * 60, "1787790732626112", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59-05:00",
                   "10000-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "2026-02-30T00:00:00Z", "nan", "²", "1_000", "\x00", "\u202e", "=1+1"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from(EXTREME_INTS), st.floats(), st.sampled_from(EXTREME_FLOATS),
    st.text(max_size=12), st.sampled_from(EXTREME_STRINGS),
)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every field path of a record: each key and list index, at every depth."""
    found: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in items:
        found.append((*prefix, key))
        found.extend(paths(child, (*prefix, key)))
    return found


def put(record: Any, path: tuple[Any, ...], value: Any) -> Any:
    """A copy of ``record`` with ``value`` at ``path``."""
    record = copy.deepcopy(record)
    cur = record
    for key in path[:-1]:
        cur = cur[key]
    cur[path[-1]] = value
    return record


def dumps(value: Any) -> str:
    """One JSON line as any exporter might write it (NaN and 400-digit numbers included)."""
    return json.dumps(value, ensure_ascii=False)  # control characters are always escaped: one line


def ingest_text(folder: Path, name: str, lines: list[str], fmt: str) -> dict[str, Any]:
    """Ingest one file made of ``lines``; return its manifest entry (the run must not fail)."""
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = api.ingest(folder / "case", [path], fmt=fmt)
    (entry,) = result.manifest["files"]
    return entry


def assert_reconciles(entry: dict[str, Any], lines: int) -> None:
    assert entry["lines"] == lines
    assert entry["lines"] == entry["ingested"] + entry["quarantined"] + entry["blank"] + entry["duplicate"], entry
    assert entry["reconciled"] is True


def quarantine_reasons(case: Path) -> list[str]:
    return [r["reason"] for r in pq.read_table(case / "quarantine.parquet").to_pylist()]


# --- the repros of issue 11 -------------------------------------------------------------------

def spend_line(rid: str, **changes: Any) -> str:
    return json.dumps({**SPEND, "request_id": rid, **changes})


def test_epoch_microseconds_start_time_is_read_as_microseconds(tmp_path: Path) -> None:
    entry = ingest_text(tmp_path, "spend.jsonl", [spend_line("a", startTime=MICROS_2026, endTime=None)], "litellm")
    assert (entry["ingested"], entry["quarantined"]) == (1, 0)
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["received_at"]).to_pylist()
    assert row["received_at"] == T_2026


@pytest.mark.parametrize("field", ["startTime", "endTime"])
@pytest.mark.parametrize("value", [1e30, 10**30, 2**70, -(10**18), "1e30"], ids=["1e30", "int-1e30", "2^70", "-1e18", "str-1e30"])
def test_time_beyond_every_unit_is_quarantined_not_fatal(tmp_path: Path, field: str, value: Any) -> None:
    entry = ingest_text(tmp_path, "spend.jsonl", [spend_line("ok"), spend_line("bad", **{field: value})], "litellm")
    assert (entry["ingested"], entry["quarantined"]) == (1, 1)
    (reason,) = quarantine_reasons(tmp_path / "case")
    assert field in reason and "Fix:" in reason and "1970 to 9999" in reason


@pytest.mark.parametrize("field", ["prompt_tokens", "completion_tokens"])
@pytest.mark.parametrize("value", [1e30, 2**64, -(2**63) - 1])
def test_count_beyond_64_bits_keeps_the_record(tmp_path: Path, field: str, value: Any) -> None:
    entry = ingest_text(tmp_path, "spend.jsonl", [spend_line("a", **{field: value})], "litellm")
    assert (entry["ingested"], entry["quarantined"]) == (1, 0)
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["problems"]).to_pylist()
    assert field in row["problems"] and "ignored" in row["problems"]


@pytest.mark.parametrize("value", [2**40, -5, 1e30, "404 Not Found"])
def test_http_status_that_is_not_three_digits_keeps_the_response(tmp_path: Path, value: Any) -> None:
    entry = ingest_text(tmp_path, "resp.jsonl", [json.dumps({**SPLIT_RESPONSE_BODY, "status_code": value})], "openai-split")
    assert (entry["ingested"], entry["quarantined"]) == (1, 0)
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["status_code", "problems"]).to_pylist()
    assert row["status_code"] is None and "status_code" in row["problems"]


def test_engine_log_named_with_a_huge_rank_is_read(tmp_path: Path) -> None:
    entry = ingest_text(tmp_path, "decode-0_99999999999999.log", [SGLANG_TEXT[0].format(n=681280, m=1048576)], "sglang")
    assert (entry["ingested"], entry["quarantined"]) == (1, 0)
    (event,) = pq.read_table(tmp_path / "case" / "engine_events.parquet").to_pylist()
    assert event["rank"] is None and event["max_total_num_tokens"] == 681280


def test_truncation_marker_with_an_absurd_count_keeps_the_record(tmp_path: Path) -> None:
    text = "head ... (litellm_truncated skipped 99999999999999999999999 chars. Truncation is a DB storage safeguard.) ... tail"
    psr = {"messages": [{"role": "user", "content": text}]}
    entry = ingest_text(tmp_path, "spend.jsonl", [spend_line("a", proxy_server_request=psr)], "litellm")
    assert (entry["ingested"], entry["quarantined"]) == (1, 0)
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["prompt_chars", "prompt_truncated"]).to_pylist()
    assert row["prompt_truncated"] is False and row["prompt_chars"] < 1000


def test_a_value_no_parser_check_caught_costs_its_row_only(tmp_path: Path) -> None:
    # The safety net under the parsers' own checks: a row that does not fit the table is
    # quarantined at write time, with its line, and the counts still reconcile.
    import dataclasses

    from forensics.ingest.registry import FORMATS

    litellm = FORMATS.get("litellm")

    def leaky(text: str, line_number: int, ctx: Any) -> Any:
        out = litellm.parse(text, line_number, ctx)
        if line_number == 2:
            out[1]["prompt_chars"] = 10**30
        return out

    FORMATS.unregister("litellm")
    FORMATS.register(dataclasses.replace(litellm, parse=leaky, parse_raw=None))  # every line through the leaky parse
    try:
        entry = ingest_text(tmp_path, "spend.jsonl", [spend_line("a"), spend_line("b"), spend_line("c")], "litellm")
    finally:
        FORMATS.unregister("litellm")
        FORMATS.register(litellm)
    assert_reconciles(entry, 3)
    assert (entry["ingested"], entry["quarantined"]) == (2, 1)
    (q,) = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert q["source_line"] == 2 and "prompt_chars" in q["reason"] and "Fix:" in q["reason"] and q["excerpt"].startswith("{")


@pytest.mark.parametrize("depth", [200, 5000])
def test_deeply_nested_value_is_ingested_or_quarantined(tmp_path: Path, depth: int) -> None:
    nested = "[" * depth + "]" * depth  # beyond the JSON parser's depth limit at 5000: invalid JSON
    line = spend_line("deep").replace('"session_id": "s-77"', f'"session_id": {nested}')
    assert nested in line
    entry = ingest_text(tmp_path, "spend.jsonl", [spend_line("ok"), line], "litellm")
    assert_reconciles(entry, 2)
    assert (entry["ingested"], entry["quarantined"]) == ((2, 0) if depth == 200 else (1, 1))


# --- the time rules --------------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    1787754732.626112, 1787754732626.112, MICROS_2026, MICROS_2026 * 1000, str(MICROS_2026), str(MICROS_2026 * 1000),
    "2026-08-26T14:32:12.626112Z", "2026-08-26T16:32:12.626112+02:00", "2026-08-26 14:32:12.626112",
], ids=["s", "ms", "us", "ns", "us-str", "ns-str", "iso-z", "iso-offset", "iso-no-zone"])
def test_epoch_units_told_apart_by_magnitude(value: Any) -> None:
    micros, _ = to_micros(value)
    assert micros == MICROS_2026


@pytest.mark.parametrize("value, zone, expected", [
    ("2016-12-31T23:59:60Z", "UTC", "2016-12-31T23:59:59.999999+00:00"),
    ("2016-12-31T23:59:60.5Z", "UTC", "2016-12-31T23:59:59.999999+00:00"),
    ("2017-01-01T08:59:60+09:00", "UTC", "2016-12-31T23:59:59.999999+00:00"),
    ("2016-12-31 23:59:60", "UTC", "2016-12-31T23:59:59.999999+00:00"),
])
def test_a_leap_second_is_the_last_microsecond_of_its_minute(value: str, zone: str, expected: str) -> None:
    """A leap second is valid ISO 8601 that Python's datetime cannot hold: its record was quarantined as
    "not an ISO 8601 time". It now keeps its place, just before the next minute."""
    micros, assumed = to_micros(value, zone)
    assert micros == (dt.datetime.fromisoformat(expected) - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)
    assert assumed == (not value.endswith(("Z", "+09:00")))


def test_nanoseconds_keep_their_microseconds_exactly() -> None:
    # 2^53 < this value: read through a float it would lose the last digits
    assert to_micros(1787754732626112999)[0] == MICROS_2026
    assert to_micros("1787754732626112999")[0] == MICROS_2026


@pytest.mark.parametrize("value", [
    10**20, 1e20, -1, -(10**12), "1969-12-31T23:59:59Z", "0001-01-01T00:00:00+05:00", "9999-12-31T23:59:59-05:00",
    float("nan"), float("inf"), "nan", "infinity", "1_000", "²", "9" * 5000, True, None, [], {},
    "2016-12-31T23:59:61Z", "2016-12-31T24:59:60Z",
])
def test_values_that_are_not_times_in_range_are_refused(value: Any) -> None:
    with pytest.raises(TimeError):
        to_micros(value)


def test_range_ends_are_accepted() -> None:
    assert to_micros(0) == (0, False)
    assert to_micros("9999-12-31T23:59:59.999999Z")[0] == (dt.datetime.max.replace(tzinfo=dt.UTC) - dt.datetime(
        1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)


# --- property tests: any value in any field of every format ----------------------------------

PROPERTY = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
JSON_BASES = {
    "litellm": [SPEND, PAYLOAD, PAYLOAD["standard_logging_object"]],
    "openai-split": [SPLIT_REQUEST, SPLIT_RESPONSE, SPLIT_RESPONSE_BODY],
    "sglang": [SGLANG_FINISHED, SGLANG_RECEIVED],
}
EXAMPLES = itertools.count()
NAMES = {"litellm": "spend.jsonl", "openai-split": "split.jsonl", "sglang": "decode-1_0.log"}


extremes = st.sampled_from([*EXTREME_INTS, *EXTREME_FLOATS, *EXTREME_STRINGS])
# Half the draws are a known hard case, so a few examples cover every field with them.
field_values = st.one_of(extremes, json_values)


@st.composite
def every_field_mutated(draw: st.DrawFn, fmt: str) -> list[str]:
    """For every field path (at any depth) of every record kind of ``fmt``, the record with that
    field replaced by a drawn value; then a few records with several fields replaced at once."""
    lines = []
    for base in JSON_BASES[fmt]:
        for path in paths(base):
            lines.append(dumps(put(base, path, draw(field_values))))
    for _ in range(draw(st.integers(0, 4))):
        record = draw(st.sampled_from(JSON_BASES[fmt]))
        for _ in range(draw(st.integers(2, 4))):
            record = put(record, draw(st.sampled_from(paths(record) or [("extra",)])), draw(field_values))
        # an unknown extra field, or the whole line replaced by something that is not a record
        record = draw(st.one_of(st.just({**record, draw(st.text(max_size=5)): draw(field_values)}), field_values))
        lines.append(dumps(record))
    return lines


def check_file(tmp_path: Path, fmt: str, lines: list[str]) -> None:
    folder = tmp_path / f"example-{next(EXAMPLES)}"  # hypothesis reuses tmp_path for every example
    folder.mkdir()
    lines = [dumps(JSON_BASES[fmt][0]), *lines]  # one good record, so the tenant rule cannot refuse the file
    entry = ingest_text(folder, NAMES[fmt], lines, fmt)
    assert_reconciles(entry, len(lines))
    assert entry["ingested"] >= 1
    assert all("Fix:" in reason for reason in quarantine_reasons(folder / "case"))


@pytest.mark.parametrize("fmt", sorted(JSON_BASES))
@PROPERTY
@given(data=st.data())
def test_any_value_in_any_field_is_ingested_or_quarantined(tmp_path: Path, fmt: str, data: st.DataObject) -> None:
    check_file(tmp_path, fmt, data.draw(every_field_mutated(fmt)))


engine_field = st.one_of(st.sampled_from([str(v) for v in EXTREME_INTS] + EXTREME_STRINGS), st.text(max_size=10))


@PROPERTY
@given(lines=st.lists(st.builds(lambda template, n, m, s: template.replace("{n}", n).replace("{m}", m).replace("{s}", s),
                                st.sampled_from(SGLANG_TEXT), engine_field, engine_field, engine_field), min_size=1, max_size=8))
def test_any_value_in_engine_text_lines_is_kept(tmp_path: Path, lines: list[str]) -> None:
    lines = [line.replace("\r", " ").replace("\n", " ") for line in lines]  # one physical line each
    check_file(tmp_path, "sglang", lines)
