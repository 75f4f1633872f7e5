"""The cloudflare-ai-gateway format: sniffing, the record reader for arrays, the tenant key, bad input.

Bad input follows tests/test_ingest_bad_input.py: a log object that cannot be used is a
quarantine row naming the record, the field and the fix; the rest of the file is ingested and the
counts reconcile. A JSON array is read a record at a time, never whole.
"""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from forensics import api
from forensics.errors import ConfigError
from forensics.ingest import sniff
from forensics.ingest.formats import cloudflare
from forensics.ingest.reader import FileProblem

GOLDEN = Path(__file__).parent / "golden" / "ingest"
OWN = sorted(p for p in GOLDEN.glob("cloudflare_*/*") if p.name != "expected.json")

GOOD: dict[str, Any] = {
    "id": "01J0", "created_at": "2026-08-29T10:00:00.000Z", "provider": "openai", "model": "glm-5.3",
    "path": "chat/completions", "success": True, "status_code": 200, "cached": False, "duration": 1500,
    "tokens_in": 5, "tokens_out": 2, "metadata": json.dumps({"tenant_id": "org-1", "user": "u-1"}),
    "request": {"model": "glm-5.3", "messages": [{"role": "user", "content": "hello there"}]},
    "response": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]},
}


def log(i: int, **changes: Any) -> dict[str, Any]:
    return {**GOOD, "id": f"01J{i}", **changes}


def write(path: Path, records: list[dict[str, Any]], layout: str) -> Path:
    if layout == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    else:
        path.write_text(json.dumps(records, indent=2), encoding="utf-8")
    return path


def ingest(tmp_path: Path, path: Path, **config: Any) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    result = api.ingest(tmp_path / "case", [path], config=api.make_config(**config) if config else None)
    entry = result.manifest["files"][0]
    assert entry["reconciled"]
    quarantine = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    exchanges = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    return entry, quarantine, exchanges


# --- sniffing -----------------------------------------------------------------------------------


def test_sniffer_picks_the_format_for_its_goldens_and_never_for_the_others() -> None:
    assert OWN and all(sniff(p) == "cloudflare-ai-gateway" for p in OWN), [p.name for p in OWN if sniff(p) != "cloudflare-ai-gateway"]
    others = [p for p in sorted(GOLDEN.glob("*/*")) if p.name != "expected.json" and p not in OWN]
    assert others and all(sniff(p) != "cloudflare-ai-gateway" for p in others), [p.name for p in others if sniff(p) == "cloudflare-ai-gateway"]


@pytest.mark.parametrize("layout", ["jsonl", "array", "envelope", "minified"])
def test_every_layout_of_the_api_output_is_sniffed(tmp_path: Path, layout: str) -> None:
    records = [log(1), log(2)]
    path = tmp_path / "logs.json"
    if layout == "envelope":
        path.write_text(json.dumps({"result": records, "success": True, "errors": []}, indent=2))
    elif layout == "minified":
        path.write_text(json.dumps(records))
    else:
        write(path, records, layout)
    assert sniff(path) == "cloudflare-ai-gateway"


@pytest.mark.parametrize("layout", ["array", "envelope"])
def test_a_single_line_export_is_never_held_whole_to_tell_its_format(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    # A whole export written by json.dump is one line: sniffing, and telling JSON Lines from an
    # array, read its start only.
    from forensics.ingest import reader

    monkeypatch.setattr(reader, "PEEK_LINE_BYTES", 4096)
    monkeypatch.setattr(cloudflare, "HEAD_LIMIT", 4096)
    records = [log(i) for i in range(200)]
    path = tmp_path / "logs.json"
    path.write_text(json.dumps(records if layout == "array" else {"success": True, "result": records}))
    assert path.stat().st_size > 20 * 4096
    lines = reader.peek_lines(path)
    assert len(lines) == 1 and len(lines[0]) <= 4096
    entry, q, x = ingest(tmp_path, path)
    assert (entry["format"], entry["ingested"], q) == ("cloudflare-ai-gateway", 200, [])


# --- the record reader ----------------------------------------------------------------------------

TRICKY = [
    log(1, request={"messages": [{"role": "user", "content": 'quotes " and \\ backslashes, brackets ]} [{ and commas ,'}]}),
    log(2, request={"messages": [{"role": "user", "content": "é€😀 multi-byte text split across reads"}]}),
    log(3, extra=[1, [2, {"a": "]"}], {"b": [None, True]}]),
]


def _read(path: Path) -> tuple[list[tuple[int, str | None]], list[FileProblem]]:
    problems: list[FileProblem] = []
    return [(line.number, line.text) for line in cloudflare.read_records(path, problems)], problems


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
def test_array_records_are_the_same_whatever_the_read_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    path = tmp_path / "logs.json"
    path.write_text("\ufeff" + json.dumps(TRICKY, indent=1, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setattr(cloudflare, "CHUNK", chunk)
    records, problems = _read(path)
    assert problems == []
    assert [n for n, _ in records] == [1, 2, 3]
    assert [json.loads(t or "") for _, t in records] == TRICKY


def test_an_array_is_read_a_record_at_a_time(tmp_path: Path) -> None:
    # The scanner's buffer never holds more than the record being read and one read's worth of
    # bytes, however many records the file has.
    record = json.dumps(log(1, request={"messages": [{"role": "user", "content": "x" * 5000}]})).encode()
    data = b"[" + b",\n".join([record] * 200) + b"]"
    scanner = cloudflare._Scanner()
    chunk, largest, count = 4096, 0, 0
    for at in range(0, len(data), chunk):
        count += sum(1 for _ in scanner.feed(data[at:at + chunk]))
        largest = max(largest, len(scanner.buf))
    count += sum(1 for _ in scanner.finish())
    assert count == 200 and len(data) > 100 * (len(record) + chunk)
    assert largest <= len(record) + chunk


def test_pages_appended_envelopes_and_arrays_give_every_record_once(tmp_path: Path) -> None:
    path = tmp_path / "pages.json"
    pages = [{"result": [log(1), log(2)], "result_info": {"page": 1}, "success": True},
             {"success": True, "errors": [], "result": [log(3)], "result_info": {"page": 2, "count": 1}}]
    path.write_text(json.dumps(pages[0], indent=2) + "\n" + json.dumps(pages[1]) + "\n" + json.dumps([log(4)]))
    entry, q, x = ingest(tmp_path, path)
    assert (entry["format"], entry["lines"], entry["ingested"], q) == ("cloudflare-ai-gateway", 4, 4, [])
    assert [(r["request_id"], r["source_line"]) for r in x] == [("01J1", 1), ("01J2", 2), ("01J3", 3), ("01J4", 4)]


def test_an_array_cut_short_keeps_the_records_before_and_reports_the_cut(tmp_path: Path) -> None:
    path = tmp_path / "logs.json"
    text = json.dumps([log(1), log(2), log(3)])
    path.write_text(text[: text.index('"01J3"') + 40])
    entry, q, x = ingest(tmp_path, path)
    assert [r["request_id"] for r in x] == ["01J1", "01J2"]
    assert (entry["lines"], entry["ingested"], entry["quarantined"]) == (4, 2, 2)
    assert q[0]["source_line"] == 3 and "invalid JSON" in q[0]["reason"]
    assert q[1]["source_line"] == 4 and "ends without its closing ']' after record 3" in q[1]["reason"]
    assert entry["problems"] and entry["stream_damage"] == [{"kind": "truncated", "after_line": 3}]


def test_a_gzip_array_is_read_transparently_and_a_cut_one_reported(tmp_path: Path) -> None:
    blob = gzip.compress(json.dumps([log(i) for i in range(300)], indent=2).encode())
    whole = tmp_path / "whole.json.gz"
    whole.write_bytes(blob)
    entry, _, x = ingest(tmp_path, whole)
    assert (entry["format"], entry["ingested"]) == ("cloudflare-ai-gateway", 300)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(blob[: len(blob) // 2])
    result = api.ingest(tmp_path / "case2", [cut], fmt="cloudflare-ai-gateway")
    entry = result.manifest["files"][0]
    assert 0 < entry["ingested"] < 300 and entry["reconciled"]
    assert "gzip stream is truncated" in entry["problems"][0]


def test_junk_between_and_inside_arrays_is_quarantined_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "logs.json"
    path.write_text(json.dumps([log(1), 42]) + "\nnot json at all\n" + json.dumps([log(2)]))
    entry, q, x = ingest(tmp_path, path)
    assert [r["request_id"] for r in x] == ["01J1", "01J2"]
    assert [(r["source_line"], r["reason"][:40]) for r in q] == [
        (2, "line is a JSON int, expected an object. "), (3, "invalid JSON (invalid literal, expected ")]


def test_a_broken_first_line_still_reads_the_file_as_json_lines(tmp_path: Path) -> None:
    # A partial write at the top must cost that line only, not turn the file into one bad array.
    path = tmp_path / "logs.jsonl"
    path.write_text('{"id": "01J0", "created_at": "2026\n' + json.dumps(log(1)) + "\n" + json.dumps(log(2)) + "\n")
    entry, q, x = ingest(tmp_path, path)
    assert (entry["format"], entry["ingested"], entry["quarantined"]) == ("cloudflare-ai-gateway", 2, 1)
    assert q[0]["source_line"] == 1 and [r["source_line"] for r in x] == [2, 3]


# --- the tenant key -------------------------------------------------------------------------------


@pytest.mark.parametrize(("tenant_field", "metadata", "expected"), [
    ("metadata.account", {"account": "acme", "tenant_id": "not-this"}, ("acme", "metadata.account")),
    ("account", {"account": "acme"}, ("acme", "metadata.account")),  # a bare key is a metadata key
    ("auto", {"customer_id": 1234}, ("1234", "metadata.customer_id")),
])
def test_the_tenant_comes_from_the_configured_metadata_key(
        tmp_path: Path, tenant_field: str, metadata: dict[str, Any], expected: tuple[str, str]) -> None:
    path = write(tmp_path / "logs.jsonl", [log(1, metadata=json.dumps(metadata)), log(2, metadata=metadata)], "jsonl")
    _, q, x = ingest(tmp_path, path, tenant_field=tenant_field)
    assert q == [] and [(r["tenant_id"], r["tenant_field"]) for r in x] == [expected, expected]


def test_a_log_without_the_tenant_key_is_quarantined_naming_record_and_key(tmp_path: Path) -> None:
    path = write(tmp_path / "logs.json", [log(1), log(2, metadata=json.dumps({"team": "x"})), log(3, metadata=None)], "array")
    entry, q, x = ingest(tmp_path, path)
    assert [r["request_id"] for r in x] == ["01J1"] and entry["quarantined"] == 2
    assert [r["source_line"] for r in q] == [2, 3] and all(r["source_file"] == "logs.json" or r["source_file"].endswith("/logs.json") for r in q)
    assert "log '01J2' (record 2) has none of metadata.tenant_id" in q[0]["reason"] and "its metadata has 'team'" in q[0]["reason"]
    assert "it has no metadata" in q[1]["reason"]
    assert all('Fix: set tenant_field (case file or --tenant-field) to the metadata key' in r["reason"] for r in q)


def test_a_key_that_names_no_tenant_anywhere_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path / "logs.jsonl", [log(1), log(2)], "jsonl")
    with pytest.raises(ConfigError, match="tenant_field 'metadata.customer' names no customer in any of the 2 records"):
        api.ingest(tmp_path / "case", [path], config=api.make_config(tenant_field="metadata.customer"))


# --- bad records ----------------------------------------------------------------------------------

BAD = [
    ({"id": ""}, "missing required field 'id'"),
    ({"created_at": "yesterday"}, "field 'created_at'"),
    ({"metadata": '{"tenant_id": '}, "metadata is a string that is not valid JSON"),
    ({"metadata": json.dumps({"tenant_id": ["org-1"]})}, "field 'metadata.tenant_id' is a list, expected a string"),
    ({"request": '{"model": "glm-5.3", "messages": [}'}, "request is a string that is not valid JSON"),
    ({"request": {"messages": "hello"}}, "request.messages is a str, expected a list"),
    ({"request": 42}, "request is a int, expected the chat request object"),
    ({"response": {"choices": "none"}}, "response.choices is a str, expected a list"),
]


@pytest.mark.parametrize("layout", ["jsonl", "array"])
@pytest.mark.parametrize(("change", "reason"), BAD, ids=[r for _, r in BAD])
def test_a_bad_record_is_quarantined_with_reason_and_the_rest_ingested(
        tmp_path: Path, layout: str, change: dict[str, Any], reason: str) -> None:
    path = write(tmp_path / f"logs.{layout}", [log(1), log(2, **change), log(3)], layout)
    entry, q, x = ingest(tmp_path, path)
    assert (entry["ingested"], entry["quarantined"]) == (2, 1)
    assert reason in q[0]["reason"] and "Fix:" in q[0]["reason"]
    assert q[0]["source_line"] == 2
    assert sorted(r["request_id"] for r in x) == ["01J1", "01J3"]


def test_wrong_figures_cost_the_figure_not_the_row(tmp_path: Path) -> None:
    path = write(tmp_path / "logs.jsonl", [log(1, tokens_in="many", tokens_out=-3, duration="slow", status_code=70000)], "jsonl")
    _, q, x = ingest(tmp_path, path)
    assert q == [] and (x[0]["reported_prompt_tokens"], x[0]["completion_tokens"], x[0]["completed_at"], x[0]["status_code"]) == (None, None, None, None)
    assert "tokens_in = 'many' is not a whole number" in x[0]["problems"] and "duration = 'slow'" in x[0]["problems"]


def test_a_failed_log_is_a_failure_row(tmp_path: Path) -> None:
    path = write(tmp_path / "logs.jsonl", [log(1, success=False, status_code=502, response={"error": {"message": "bad gateway"}}),
                                          log(2, success=False, status_code=None, response=None)], "jsonl")
    _, q, x = ingest(tmp_path, path)
    assert q == [] and [(r["status"], r["status_code"], r["response_text"]) for r in x] == [("failure", 502, None), ("failure", None, None)]


def test_the_step_of_a_universal_request_is_the_prompt(tmp_path: Path) -> None:
    steps = [{"provider": "workers-ai", "endpoint": "x", "query": {"messages": [{"role": "user", "content": "first provider"}]}},
             {"provider": "openai", "endpoint": "chat/completions", "query": {"messages": [{"role": "user", "content": "fallback"}]}}]
    path = write(tmp_path / "logs.jsonl", [log(1, request=steps, step=1), log(2, request=steps, step=0)], "jsonl")
    _, _, x = ingest(tmp_path, path)
    assert [r["prompt_text"] for r in x] == ["<|user|>\nfallback", "<|user|>\nfirst provider"]


def test_a_workers_ai_answer_is_read(tmp_path: Path) -> None:
    path = write(tmp_path / "logs.jsonl", [log(1, provider="workers-ai", response={"result": {"response": "from workers ai"}, "success": True}),
                                          log(2, provider="workers-ai", response={"response": "plain"})], "jsonl")
    _, _, x = ingest(tmp_path, path)
    assert [r["response_text"] for r in x] == ["from workers ai", "plain"]


def test_an_answer_that_cannot_be_read_is_noted_in_problems(tmp_path: Path) -> None:
    # The row is kept without its response text: problems must say why, or a reader takes the
    # empty text for an empty answer.
    sse = ('data: {"choices": [{"index": 0, "delta": {"content": "A"}}]}\n\ndata: {broken\n\n'
           'data: {"choices": [{"index": 0, "delta": {"content": "C"}}]}\n\ndata: [DONE]\n\n')
    other = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}]}
    path = write(tmp_path / "logs.jsonl", [log(1, response=sse), log(2, provider="openai", response=other), log(3)], "jsonl")
    _, q, x = ingest(tmp_path, path)
    assert q == [] and [(r["response_text"], r["response_truncated"]) for r in x] == [(None, True), (None, False), ("hi", False)]
    assert [r["problems"] for r in x] == [
        "response is an event stream whose event 2 of 3 is not valid JSON; the response text is unknown",
        "response is an object of a shape not known to hold the answer; response text unknown", None]


def test_an_anthropic_answer_is_read_with_its_thinking_and_tool_use(tmp_path: Path) -> None:
    """Anthropic's Messages answer (content blocks, no choices) was a shape not known to hold the answer:
    its text, and any foreign passage in it, was out of the search."""
    anthropic = {"id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "tool_use", "content": [
        {"type": "thinking", "thinking": "The user wants the file.", "signature": "sig"},
        {"type": "text", "text": "an answer"}, {"type": "tool_use", "id": "toolu_1", "name": "write", "input": {"path": "a.py"}}]}
    path = write(tmp_path / "logs.jsonl", [log(1, provider="anthropic", response=anthropic)], "jsonl")
    _, q, x = ingest(tmp_path, path)
    assert q == [] and [(r["response_text"], r["finish_reason"], r["problems"]) for r in x] == [
        ('<|reasoning|>\nThe user wants the file.\n\n<|assistant|>\nan answer\n<|tool_call|>\nwrite\n{"path":"a.py"}', "tool_use", None)]


# --- the simulator writes the format --------------------------------------------------------------


def _rows(path: Path, columns: tuple[str, ...]) -> list[tuple[str, ...]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return sorted(tuple(row[c] for c in columns) for row in csv.DictReader(fh))


def test_one_simulated_incident_gives_the_same_suspects_and_notifications_as_litellm(tmp_path: Path) -> None:
    from forensics.ingest.reader import peek_lines
    from forensics.ingest.registry import FORMATS
    from forensics.lab.evaluate import evaluate
    from forensics.lab.simulate import simulate

    reports = {}
    for fmt in ("litellm", "cloudflare-ai-gateway"):
        sim = simulate(tmp_path / fmt, seed=11, scale="small", fmt=fmt)
        gateway = sorted(p for p in (sim.out / "gateway").iterdir())
        assert gateway and all(FORMATS.candidates(peek_lines(p), p.name) == [fmt] for p in gateway)
        reports[fmt] = api.run(sim.out / "case.toml", tmp_path / f"report-{fmt}").report.report_dir
        scores = evaluate(sim.out / "truth.json", reports[fmt]).to_json()
        assert scores["quarantine"]["match"] is True, scores["quarantine"]
    litellm, cloudflare_report = reports["litellm"], reports["cloudflare-ai-gateway"]
    # Times differ by the formats' precision (epoch floats, milliseconds of duration); what was found must not.
    suspects = ("request_id", "tenant_id", "prompt_tokens", "reasons")
    assert _rows(litellm / "suspects.csv", suspects) == _rows(cloudflare_report / "suspects.csv", suspects)
    assert len(_rows(litellm / "suspects.csv", suspects)) > 5
    notified = ("tenant_id", "role", "tier", "request_ids", "n_findings", "highest_severity", "severity_kinds")
    assert _rows(litellm / "notifications.csv", notified) == _rows(cloudflare_report / "notifications.csv", notified)


def _sse(*events: Any) -> str:
    return "".join(f"event: {e.get('type', 'x')}\ndata: {json.dumps(e)}\n\n" for e in events)


def test_an_anthropic_or_responses_api_event_stream_is_read_and_an_unknown_one_is_noted(tmp_path: Path) -> None:
    """A streamed answer that is not ChatCompletion chunks (Anthropic's Messages events, the Responses API's)
    read as an empty answer with nothing in problems: a leak in it was silently never searched."""
    anthropic = _sse(
        {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 12}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Let me "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "see."}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Here it is."}},
        {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t1", "name": "save", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"note": '}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"ship it"}'}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}},
        {"type": "message_stop"})
    completed = {"object": "response", "status": "completed", "output": [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "From responses."}]}]}
    responses = _sse({"type": "response.created", "response": {"status": "in_progress", "output": []}},
                     {"type": "response.output_text.delta", "delta": "From "},
                     {"type": "response.completed", "response": completed})
    unknown = _sse({"type": "something.else", "payload": "x"})
    path = write(tmp_path / "logs.jsonl", [log(1, provider="anthropic", response=anthropic), log(2, response=responses),
                                          log(3, response=unknown)], "jsonl")
    _, q, x = ingest(tmp_path, path)
    assert q == [] and [(r["response_text"], r["finish_reason"], r["problems"]) for r in x] == [
        ('<|reasoning|>\nLet me see.\n\n<|assistant|>\nHere it is.\n<|tool_call|>\nsave\n{"note": "ship it"}', "tool_use", None),
        ("From responses.", "completed", None),
        (None, None, "response is an event stream of a shape not known to hold the answer; response text unknown")]


# --- a record cut short in the middle of a file ------------------------------------------------------


def _cut(text: str) -> str:
    """A log's JSON cut in the middle of its request (a torn write): no closing quote or brace."""
    return text[: text.index("hello there") + 5]


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("chunk", [7, 4096, None])
@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_a_log_cut_short_mid_array_costs_that_log_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       indent: int | None, chunk: int | None, bom: str) -> None:
    """A log cut inside a string left the scanner out of step: the logs after it were read as part of it,
    7 of 12 lost, and the file problem said the export was cut short. (A byte order mark before the array
    moves where the file is read again from.)"""
    if chunk:
        monkeypatch.setattr(cloudflare, "CHUNK", chunk)
    texts = [json.dumps(log(i), indent=indent) for i in range(12)]
    texts[4] = _cut(texts[4])
    path = tmp_path / "logs.json"
    path.write_text(bom + "[\n" + ",\n".join(texts) + "\n]\n", encoding="utf-8")
    entry, q, x = ingest(tmp_path, path)
    assert [r["request_id"] for r in x] == [f"01J{i}" for i in range(12) if i != 4]
    assert [r["source_line"] for r in x] == [1, 2, 3, 4, *range(6, 13)]
    assert [r["source_line"] for r in q] == [5] and "invalid JSON" in q[0]["reason"]
    assert not entry["problems"]


def test_api_pages_with_one_cut_short_keep_every_whole_log(tmp_path: Path) -> None:
    """Pages downloaded one after another, one download cut short and the next page appended on its own
    line: the next page's logs were lost (read as part of the cut one)."""
    pages = [json.dumps({"result": [log(p * 10 + i) for i in range(10)], "success": True}) for p in range(3)]
    mid, first = tmp_path / "mid.json", tmp_path / "first.json"
    mid.write_text(pages[0] + "\n" + _cut(pages[1]) + "\n" + pages[2] + "\n")
    first.write_text(_cut(pages[0]) + "\n" + pages[1] + "\n")
    entry, q, x = ingest(tmp_path, mid)
    assert [r["request_id"] for r in x] == [f"01J{i}" for i in (*range(10), *range(20, 30))]
    assert len(q) == 1 and q[0]["source_line"] == 11
    result = api.ingest(tmp_path / "case2", [first])
    x2 = pq.read_table(tmp_path / "case2" / "exchanges.parquet").to_pylist()
    assert result.manifest["files"][0]["format"] == "cloudflare-ai-gateway"
    assert [r["request_id"] for r in x2] == [f"01J{i}" for i in range(10, 20)]


def _torn(text: str) -> str:
    """A log with a piece torn out of its middle that joins two strings (the request's question and the answer):
    every string still closes on its line, but a few of its brackets are gone, so the brackets after it are out
    of step."""
    return text[: text.index("hello there") + 4] + text[text.index('"hi"') + 2:]


@pytest.mark.parametrize("shape", ["pages", "array"])
@pytest.mark.parametrize("chunk", [64, 500, 4096, None])
def test_a_log_torn_with_its_strings_whole_costs_that_log_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                shape: str, chunk: int | None) -> None:
    """A piece torn out of a pretty-printed log between two strings leaves every string whole but brackets
    missing: the scanner took a later bracket for the end of the records' array, and the logs after the torn
    one on that page were read as nothing at all, not even counted (the file's counts still reconciled)."""
    if chunk:
        monkeypatch.setattr(cloudflare, "CHUNK", chunk)
    if shape == "pages":
        pages = [[json.dumps(log(p * 3 + i), indent=2) for i in range(3)] for p in range(2)]
        pages[0][0] = _torn(pages[0][0])
        text = "".join('{\n  "result": [\n' + ",\n".join(page) + '\n  ],\n  "success": true\n}\n' for page in pages)
    else:
        texts = [json.dumps(log(i), indent=2) for i in range(6)]
        texts[0] = _torn(texts[0])
        text = "[\n" + ",\n".join(texts) + "\n]\n"
    path = tmp_path / "logs.json"
    path.write_text(text, encoding="utf-8")
    entry, q, x = ingest(tmp_path, path)
    assert [r["request_id"] for r in x] == [f"01J{i}" for i in range(1, 6)]
    assert [r["source_line"] for r in q] == [1] and "invalid JSON" in q[0]["reason"]
    assert entry["lines"] == 6 and not entry["problems"]


@pytest.mark.parametrize("chunk", [64, 500, None])
@pytest.mark.parametrize("indent", [None, 2])
def test_a_stray_bracket_after_a_whole_log_costs_no_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        indent: int | None, chunk: int | None) -> None:
    """A whole log followed by a stray closing brace (a bad merge of two exports): the brace was taken for the end
    of the records' array, and the logs after it were read as nothing. The log stands, the stray bytes are one
    quarantined line, and the logs after them are read, wherever a read of the file ends (a first version looked
    for the next log only in what the scanner held)."""
    if chunk:
        monkeypatch.setattr(cloudflare, "CHUNK", chunk)
    texts = [json.dumps(log(i), indent=indent) for i in range(5)]
    path = tmp_path / "logs.json"
    path.write_text("[\n" + texts[0] + "\n}\n,\n" + ",\n".join(texts[1:]) + "\n]\n", encoding="utf-8")
    entry, q, x = ingest(tmp_path, path)
    assert [r["request_id"] for r in x] == [f"01J{i}" for i in range(5)]
    assert [(r["source_line"], r["excerpt"]) for r in q] == [(2, "}")] and entry["lines"] == 6


def test_a_gzip_array_with_a_log_cut_short_keeps_the_logs_after_it(tmp_path: Path) -> None:
    texts = [json.dumps(log(i)) for i in range(300)]
    texts[150] = _cut(texts[150])
    path = tmp_path / "logs.json.gz"
    path.write_bytes(gzip.compress(("[\n" + ",\n".join(texts) + "\n]").encode()))
    entry, q, x = ingest(tmp_path, path)
    assert len(x) == 299 and [r["source_line"] for r in q] == [151]


def test_bad_logs_between_good_ones_do_not_make_the_file_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log that is not JSON but leaves the brackets in step (a bad literal) is quarantined where it is."""
    scans: list[int] = []
    real = cloudflare._scan

    def counted(*args: Any) -> Any:
        scans.append(1)
        return (yield from real(*args))

    monkeypatch.setattr(cloudflare, "_scan", counted)
    texts = [json.dumps(log(i)) for i in range(40)]
    for i in range(0, 40, 4):
        texts[i] = texts[i].replace('"cached": false', '"cached": fals')
    path = tmp_path / "logs.json"
    path.write_text("[\n" + ",\n".join(texts) + "\n]\n")
    entry, q, x = ingest(tmp_path, path)
    assert len(x) == 30 and len(q) == 10 and len(scans) == 1


@pytest.mark.parametrize("chunk", [5, None])
def test_an_api_error_page_saved_in_place_of_logs_is_said_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    chunk: int | None) -> None:
    """An error response saved in place of a page ({"result": [], "success": false, "errors": [...]}, a rejected
    token) read as an empty, clean page: "ingested", no problem, so a missing page of logs looked like a quiet
    hour. Now it is a problem row saying those logs are missing, and the logs of the other pages, read whole, are
    not marked damaged."""
    if chunk:
        monkeypatch.setattr(cloudflare, "CHUNK", chunk)
    error = json.dumps({"result": [], "success": False, "errors": [{"code": 10000, "message": "Authentication error"}]})
    pages = [json.dumps({"result": [log(p * 3 + i) for i in range(3)], "success": True}, indent=2) for p in range(2)]
    path = tmp_path / "pages.json"
    path.write_text(pages[0] + "\n" + error + "\n" + pages[1] + "\n", encoding="utf-8")
    result = api.ingest(tmp_path / "case", [path])
    entry = result.manifest["files"][0]
    assert entry["reconciled"] and entry["ingested"] == 6 and entry["status"] == "ingested with problems"
    assert [d["kind"] for d in entry["stream_damage"]] == ["missing"] and '"success": false' in entry["problems"][0]
    x = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert len(x) == 6 and all(r["damage"] is None for r in x)
    q = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert len(q) == 1 and "missing from the case" in q[0]["reason"]
    assert any("API error responses" in n for n in result.manifest["notes"])
    assert not any("were damaged" in n for n in result.manifest["notes"])
    alone = tmp_path / "error.json"
    alone.write_text(error + "\n", encoding="utf-8")
    entry = api.ingest(tmp_path / "case2", [alone], fmt="cloudflare-ai-gateway").manifest["files"][0]
    assert entry["status"] == "ingested with problems" and entry["quarantined"] == 1 and entry["reconciled"]


def test_a_failed_call_is_no_missing_page_and_an_error_page_is_reported_after_a_resync(tmp_path: Path) -> None:
    """Two faults a review found in the error-page report: a failed call logged as a bare pretty-printed log object
    (`jq . logs.jsonl`) says "success": false too, and was counted as a missing page; and an error page before a
    log cut short was forgotten when the file was read again from after the cut."""
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps(log(1, success=False, status_code=500), indent=2) + "\n"
                      + json.dumps(log(2), indent=2) + "\n", encoding="utf-8")
    entry = api.ingest(tmp_path / "case", [failed], fmt="cloudflare-ai-gateway").manifest["files"][0]
    assert (entry["status"], entry["ingested"], entry["stream_damage"]) == ("ingested", 2, [])
    error = json.dumps({"result": [], "success": False, "errors": [{"code": 10000, "message": "Authentication error"}]})
    page = json.dumps({"result": [log(10 + i) for i in range(3)], "success": True}, indent=2)
    cut = page[: page.index('"hi"', page.index("01J11")) + 3] + page[page.index('"hi"', page.index("01J11")) + 4:]
    pages = tmp_path / "pages.json"
    pages.write_text(error + "\n" + cut + "\n", encoding="utf-8")
    result = api.ingest(tmp_path / "case2", [pages], fmt="cloudflare-ai-gateway")
    entry = result.manifest["files"][0]
    assert entry["ingested"] == 2 and entry["quarantined"] == 2 and entry["reconciled"]
    assert [d["kind"] for d in entry["stream_damage"]] == ["missing"]


GEMINI_REQUEST = {"contents": [{"role": "user", "parts": [{"text": "Confidential merger memo for ACME: ..."}]}],
                  "systemInstruction": {"parts": [{"text": "Summarise."}]}}
GEMINI_ANSWER = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Summary of the memo"}]},
                                 "finishReason": "STOP"}]}


def test_a_request_body_of_another_shape_is_noted_not_taken_for_an_empty_prompt(tmp_path: Path) -> None:
    # A provider's own body (Gemini's `contents`) holds a prompt the readers do not know: the row used to say nothing,
    # as if no prompt had been sent.
    entry, q, x = ingest(tmp_path, write(tmp_path / "logs.jsonl", [log(1, provider="google-ai-studio", request=GEMINI_REQUEST,
                                                                       response=GEMINI_ANSWER)], "jsonl"))
    assert (entry["ingested"], q) == (1, [])
    assert x[0]["prompt_text"] is None
    assert "request is an object (keys: contents, systemInstruction) of a shape not known to hold the prompt" in x[0]["problems"]
    assert "response is an object of a shape not known to hold the answer" in x[0]["problems"]


def test_an_event_stream_answer_was_streamed_whatever_the_request_body_leaves_out(tmp_path: Path) -> None:
    """A request body without ``stream`` is a call made without streaming, but an answer logged as a raw event stream
    shows it streamed (a review of the stream reading)."""
    sse = ('data: {"choices": [{"index": 0, "delta": {"content": "A"}}]}\n\n'
           'data: {"choices": [{"index": 0, "delta": {"content": "B"}}]}\n\ndata: [DONE]\n\n')
    path = write(tmp_path / "logs.jsonl", [log(1, response=sse), log(2)], "jsonl")
    _, _, x = ingest(tmp_path, path)
    assert [(r["response_text"], r["stream"]) for r in x] == [("AB", True), ("hi", False)]
