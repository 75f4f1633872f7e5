"""The helicone and vllm formats: sniffing against every other format's goldens, and bad input.

Bad input follows tests/test_ingest_bad_input.py: a helicone record that cannot be used is a
quarantine row naming the field and the fix; a vLLM line is never quarantined (it stays an
engine event with its raw text) but a field it cannot read is null, not invented.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from forensics import api
from forensics.ingest import sniff

GOLDEN = Path(__file__).parent / "golden" / "ingest"
NEW = {"helicone": ("helicone_csv", "helicone_jsonl"), "vllm": ("vllm",)}


def golden_files(folders: tuple[str, ...] | None = None) -> list[Path]:
    """Input files of the golden folders (all of them when ``folders`` is None)."""
    dirs = [GOLDEN / f for f in folders] if folders else sorted(p for p in GOLDEN.iterdir() if p.is_dir())
    return [p for d in dirs for p in sorted(d.iterdir()) if p.name != "expected.json"]


@pytest.mark.parametrize("name", sorted(NEW))
def test_sniffer_picks_the_format_for_its_goldens_and_never_for_the_others(name: str) -> None:
    own = golden_files(NEW[name])
    assert own and all(sniff(p) == name for p in own)
    others = [p for p in golden_files() if p not in own]
    assert others and all(sniff(p) != name for p in others), [p.name for p in others if sniff(p) == name]


GOOD = {
    "request_id": "h-1", "request_created_at": "2026-08-29T10:00:00Z", "response_created_at": "2026-08-29T10:00:02Z",
    "status": 200, "prompt_tokens": 5, "completion_tokens": 2, "model": "glm-5.3", "organization_id": "org-1",
    "user_id": "u-1", "request_body": json.dumps({"model": "glm-5.3", "messages": [{"role": "user", "content": "hello there"}]}),
    "response_body": json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}),
}


def row(i: int, **changes: object) -> dict[str, object]:
    return {**GOOD, "request_id": f"h-{i}", **changes}


def ingest(tmp_path: Path, name: str, data: str, fmt: str | None = None) -> tuple[dict, list[dict], list[dict]]:
    path = tmp_path / name
    path.write_text(data)
    result = api.ingest(tmp_path / "case", [path], fmt=fmt)  # type: ignore[arg-type]
    entry = result.manifest["files"][0]
    assert entry["reconciled"]
    quarantine = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    exchanges = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    return entry, quarantine, exchanges


def jsonl(rows: list[dict[str, object]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def as_csv(rows: list[dict[str, object]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(GOOD), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


BAD = [
    ({"request_body": '{"model": "glm-5.3", "messages": [}'}, "request_body is a string that is not valid JSON"),
    ({"organization_id": ""}, "no tenant: none of organization_id"),
    ({"request_created_at": "yesterday"}, "field 'request_created_at'"),
    ({"request_body": json.dumps({"messages": "hello"})}, "request_body.messages is a str, expected a list"),
    ({"request_id": ""}, "missing required field 'request_id'"),
]
# A CSV cell is always a string: the wrong JSON types exist only in JSON Lines.
WRONG_TYPES = [
    ({"organization_id": ["org-1"]}, "field 'organization_id' is a list, expected a string"),
    ({"request_body": 42}, "request_body is a int, expected the chat request object"),
]
CASES = [(c, r, "jsonl") for c, r in BAD + WRONG_TYPES] + [(c, r, "csv") for c, r in BAD]


@pytest.mark.parametrize(("change", "reason", "layout"), CASES)
def test_helicone_bad_record_is_quarantined_with_reason_and_the_rest_ingested(
        tmp_path: Path, change: dict[str, object], reason: str, layout: str) -> None:
    rows = [row(1), row(2, **change), row(3)]
    data = jsonl(rows) if layout == "jsonl" else as_csv(rows)
    entry, q, x = ingest(tmp_path, f"export.{layout}", data, fmt="helicone")
    assert (entry["ingested"], entry["quarantined"]) == (2, 1)
    assert reason in q[0]["reason"] and "Fix:" in q[0]["reason"]
    assert q[0]["source_line"] == (2 if layout == "jsonl" else 3)
    assert sorted(r["request_id"] for r in x) == ["h-1", "h-3"]


def test_helicone_wrong_token_type_costs_the_figure_not_the_row(tmp_path: Path) -> None:
    entry, q, x = ingest(tmp_path, "export.jsonl", jsonl([row(1, prompt_tokens="many", completion_tokens=-3)]))
    assert (entry["ingested"], q) == (1, [])
    assert x[0]["reported_prompt_tokens"] is None and x[0]["completion_tokens"] is None
    assert "prompt_tokens = 'many' is not a whole number" in x[0]["problems"]


def test_helicone_prompt_size_adds_the_cached_and_audio_tokens_it_keeps_apart(tmp_path: Path) -> None:
    # Helicone stores the provider's prompt count less its cached and audio tokens (Anthropic's input_tokens leaves
    # out cache reads and writes): read alone, a long prompt served from the cache fell under the ceiling.
    rows = [row(1, prompt_tokens=345, prompt_cache_read_tokens=812000, prompt_cache_write_tokens=0, request_body="",
                response_body=""),
            row(2, prompt_tokens=10, prompt_cache_read_tokens=None, prompt_cache_write_tokens=2000, prompt_audio_tokens=5,
                completion_tokens=7, completion_audio_tokens=3, request_body="", response_body=""),
            row(3, prompt_tokens=10, prompt_cache_read_tokens="lots", request_body="", response_body="")]
    _, q, x = ingest(tmp_path, "export.jsonl", jsonl(rows))
    assert q == []
    got = {r["request_id"]: r for r in x}
    assert got["h-1"]["reported_prompt_tokens"] == 812345 and got["h-1"]["prompt_tokens"] == 812345
    assert got["h-2"]["reported_prompt_tokens"] == 2015 and got["h-2"]["completion_tokens"] == 10
    assert got["h-3"]["reported_prompt_tokens"] == 10  # a part that is no count is named, the rest stands
    assert "prompt_cache_read_tokens = 'lots' is not a whole number" in got["h-3"]["problems"]


def test_helicone_request_body_cut_short_keeps_the_row_marked_truncated_with_a_note(tmp_path: Path) -> None:
    # An export's size limit cuts the longest prompts: the row must say its prompt is longer than
    # anything read, not pass for a request without one.
    body = json.dumps({"model": "glm-5.3", "messages": [{"role": "user", "content": "secret " * 100}]})
    entry, q, x = ingest(tmp_path, "export.jsonl", jsonl([row(1, request_body=body[:200]), row(2)]))
    assert (entry["ingested"], q) == (2, [])
    cut, whole = x
    assert (cut["request_id"], cut["prompt_text"], cut["prompt_truncated"]) == ("h-1", None, True)
    assert "request_body is cut short (its JSON ends early); the prompt text is unknown" in cut["problems"]
    assert (whole["prompt_truncated"], whole["problems"]) == (False, None)


@pytest.mark.parametrize("layout", ["jsonl", "csv"])
def test_helicone_plain_text_response_keeps_the_row_and_its_prompt(tmp_path: Path, layout: str) -> None:
    # An upstream error page stored as the response: the prompt may be a leak's source all the same.
    rows = [row(1, status=502, response_body="Bad Gateway"), row(2)]
    entry, q, x = ingest(tmp_path, f"export.{layout}", jsonl(rows) if layout == "jsonl" else as_csv(rows), fmt="helicone")
    assert (entry["ingested"], q) == (2, [])
    failed = x[0]
    assert (failed["request_id"], failed["status"], failed["status_code"]) == ("h-1", "failure", 502)
    assert (failed["prompt_text"], failed["response_text"]) == ("<|user|>\nhello there", "Bad Gateway")


def test_helicone_csv_record_with_unterminated_quote_is_quarantined(tmp_path: Path) -> None:
    data = as_csv([row(1)]) + 'h-2,2026-08-29T10:00:00Z,,200,,,glm-5.3,org-1,u,"{""messages"": [\n'
    entry, q, x = ingest(tmp_path, "export.csv", data)
    assert entry["format"] == "helicone" and (entry["ingested"], entry["quarantined"]) == (1, 1)
    assert "unterminated quoted field" in q[0]["reason"] and q[0]["source_line"] == 3


def test_helicone_csv_record_with_wrong_field_count_is_quarantined(tmp_path: Path) -> None:
    entry, q, _ = ingest(tmp_path, "export.csv", as_csv([row(1)]) + "h-2,2026-08-29T10:00:00Z,extra\n")
    assert (entry["ingested"], entry["quarantined"]) == (1, 1)
    assert "has 3 fields, the header has 11" in q[0]["reason"]
    # The excerpt quotes the export's own text (it showed the reader's error object, {"_csv_error": ...}).
    assert q[0]["excerpt"] == "h-2,2026-08-29T10:00:00Z,extra"


def test_helicone_tenant_from_a_configured_path_into_a_json_string(tmp_path: Path) -> None:
    props = json.dumps({"customer": "acme"})
    path = tmp_path / "export.jsonl"
    path.write_text(jsonl([row(1, organization_id="", request_properties=props)]))
    api.ingest(tmp_path / "case", [path], fmt="helicone", config=api.make_config(tenant_field="request_properties.customer"))
    x = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (x[0]["tenant_id"], x[0]["tenant_field"]) == ("acme", "request_properties.customer")


VLLM_PREFIX = "INFO 2026-08-29 10:01:54,000 [logger.py:49] "


def vllm_events(tmp_path: Path, lines: list[str]) -> tuple[dict, list[dict]]:
    path = tmp_path / "vllm-0_0.log"
    path.write_text("".join(VLLM_PREFIX + line + "\n" for line in lines))
    result = api.ingest(tmp_path / "case", [path])
    entry = result.manifest["files"][0]
    assert entry["format"] == "vllm" and entry["reconciled"]
    return entry, pq.read_table(tmp_path / "case" / "engine_events.parquet").to_pylist()


def test_vllm_truncated_and_unterminated_lines_keep_the_rid_and_invent_nothing(tmp_path: Path) -> None:
    entry, ev = vllm_events(tmp_path, [
        "Request r-1 details: prompt: 'cut here, prompt_token_ids: [1, 2",
        "Request r-2 details: prompt: 'fine', prompt_token_ids: [5, 6, 7",
        "Generated response r-3: output: 'never closed, output_token_ids: [1], finish_reason: stop",
        "Generated response r-4: output: 'ok', output_token_ids: [1, 2, 3], finish_reason: stop",
    ])
    assert (entry["ingested"], entry["quarantined"]) == (4, 0)
    got = [(e["event"], e["rid"], e["input_len"], e["output_text"], e["output_len"], e["finish_reason"]) for e in ev]
    assert got == [
        ("request_received", "r-1", None, None, None, None),
        ("request_received", "r-2", None, None, None, None),
        ("request_finished", "r-3", None, None, None, None),
        ("request_finished", "r-4", None, "ok", 3, "stop"),
    ]
    assert all(e["message"].startswith(VLLM_PREFIX) for e in ev)


def test_vllm_huge_token_id_list_is_counted_exactly(tmp_path: Path) -> None:
    n = 300_000
    ids = ", ".join(str(i % 150_000) for i in range(n))
    _, ev = vllm_events(tmp_path, [f"Request r-big details: prompt: 'x', prompt_token_ids: [{ids}], prompt_embeds shape: None."])
    assert (ev[0]["rid"], ev[0]["input_len"]) == ("r-big", n)


def test_vllm_prompt_preview_at_info_is_not_taken_as_the_length(tmp_path: Path) -> None:
    # --enable-log-request-prompts puts only a preview of the ids on the Received line.
    _, ev = vllm_events(tmp_path, ["Received request r-9: params: SamplingParams(n=1), lora_request: None, prompt_token_ids: [1, 2]."])
    assert (ev[0]["event"], ev[0]["rid"], ev[0]["input_len"]) == ("request_received", "r-9", None)


def test_vllm_prompt_with_escapes_and_double_quotes(tmp_path: Path) -> None:
    _, ev = vllm_events(tmp_path, [
        r"""Generated response r-5: output: "it's \"quoted\"\n\u00e9", output_token_ids: [1, 2], finish_reason: length""",
    ])
    assert ev[0]["output_text"] == 'it\'s "quoted"\n\u00e9' and ev[0]["output_len"] == 2


def test_vllm_output_with_a_lone_surrogate_escape_keeps_its_event(tmp_path: Path) -> None:
    """An answer cut inside an emoji is logged by its repr with a lone surrogate escape: read, the surrogate did
    not fit the table, and the safety net quarantined the event. It is kept, the surrogate written as its escape's
    text, as the JSON formats write it."""
    entry, ev = vllm_events(tmp_path, [r"Generated response r-6: output: 'a \ud83d b', output_token_ids: [1, 2], finish_reason: stop"])
    assert entry["quarantined"] == 0 and ev[0]["output_text"] == "a \\ud83d b" and ev[0]["output_len"] == 2


def test_vllm_prompt_token_ids_give_the_gateway_row_its_engine_count(tmp_path: Path) -> None:
    # The gateway copied the placeholder's prompt_tokens: 1; vLLM logged the ids it really ran on.
    prompt = "Please review the indemnity clause of the supplier agreement and list the risks. " * 4
    n = 70
    gateway = tmp_path / "export.jsonl"
    gateway.write_text(jsonl([row(1, request_id="chatcmpl-77", prompt_tokens=1,
                                  request_body=json.dumps({"messages": [{"role": "user", "content": prompt}]}))]))
    engine = tmp_path / "vllm-0_0.log"
    ids = ", ".join(str(100 + i) for i in range(n))
    engine.write_text(VLLM_PREFIX + f"Request chatcmpl-77 details: prompt: {prompt!r}, prompt_token_ids: [{ids}], prompt_embeds shape: None.\n")
    api.ingest(tmp_path / "case", [gateway, engine])
    (x,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (x["reported_prompt_tokens"], x["reported_prompt_tokens_plausible"]) == (1, False)
    assert (x["prompt_tokens"], x["prompt_tokens_source"], x["rid"]) == (n, "engine", "chatcmpl-77")


def test_helicone_csv_line_that_is_not_utf8_is_quarantined_and_counts_reconcile(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_bytes(as_csv([row(1)]).encode() + b"h-2,\xff\xfe,broken\n" + as_csv([row(3)]).split("\n", 1)[1].encode())
    result = api.ingest(tmp_path / "case", [path])
    entry = result.manifest["files"][0]
    assert (entry["format"], entry["ingested"], entry["quarantined"], entry["reconciled"]) == ("helicone", 2, 1, True)
    (q,) = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert q["source_line"] == 3 and "not valid UTF-8" in q["reason"]


def test_helicone_csv_record_with_a_long_prompt_is_read(tmp_path: Path) -> None:
    # The prompts that matter in this incident are the longest ones: a field far beyond the csv
    # module's default limit (128 KiB) is a record like any other.
    long_text = "lorem ipsum " * 100_000  # 1.2 MB
    body = json.dumps({"model": "glm-5.3", "messages": [{"role": "user", "content": long_text}]})
    entry, q, x = ingest(tmp_path, "export.csv", as_csv([row(1, request_body=body), row(2)]), fmt="helicone")
    assert (entry["ingested"], entry["quarantined"]) == (2, 0), q
    assert max(len(r["prompt_text"] or "") for r in x) >= len(long_text)


def test_helicone_csv_record_with_a_stray_byte_costs_that_record_only(tmp_path: Path) -> None:
    """A Latin-1 byte inside a quoted field that spans two lines: the record was cut at the bad line, its
    quotes fell out of step, and every later record was read from inside a quoted field (quarantined as
    unterminated): the valid records of two other customers were lost."""
    rows = [row(1, user_id="caf\u00e9\nau lait"),
            row(2, organization_id="org-globex"), row(3, organization_id="org-initech")]
    data = as_csv(rows).encode("utf-8").replace("caf\u00e9".encode(), b"caf\xe9")
    path = tmp_path / "export.csv"
    path.write_bytes(data)
    result = api.ingest(tmp_path / "case", [path], fmt="helicone")
    entry = result.manifest["files"][0]
    assert entry["reconciled"] and (entry["ingested"], entry["quarantined"]) == (2, 1)
    q = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert q[0]["source_line"] == 2 and "UTF-8" in q[0]["reason"]
    x = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert sorted(r["request_id"] for r in x) == ["h-2", "h-3"]


def test_helicone_csv_a_torn_line_between_records_costs_that_line_only(tmp_path: Path) -> None:
    """An undecodable line between records, holding a stray double-quote byte, opened a quoted field that
    never closed: the three records after it became one quarantined record."""
    lines = as_csv([row(i) for i in range(1, 6)]).encode("utf-8").split(b"\n")
    data = b"\n".join([*lines[:3], b'\x00\x9f\x8c"\xff\x01 garbage', *lines[3:]])
    path = tmp_path / "export.csv"
    path.write_bytes(data)
    entry = api.ingest(tmp_path / "case", [path], fmt="helicone").manifest["files"][0]
    assert entry["reconciled"] and (entry["ingested"], entry["quarantined"]) == (5, 1)


@pytest.mark.parametrize("damage", ["csv_like_line_in_a_damaged_body", "torn_line_before_a_multiline_record"])
def test_helicone_csv_damage_costs_the_damaged_lines_only(tmp_path: Path, damage: str) -> None:
    """A Latin-1 byte in a multi-line body whose later line looks like a record by itself split the record
    there; a torn line's stray quote before a multi-line record swallowed the records after it."""
    body = "caf\u00e9\nh-x,2026-08-29T10:00:00Z,,200,5,2,glm-5.3,org-1,u,{},{}\nau lait"
    rows = [row(1), row(2, user_id=body if damage.startswith("csv") else "line one\nline two"), row(3), row(4)]
    data = as_csv(rows).encode("utf-8").replace("caf\u00e9".encode(), b"caf\xe9")
    if damage.startswith("torn"):
        lines = data.split(b"\n")
        data = b"\n".join([*lines[:2], b'\x00\x9f\x8c"\xff\x01 garbage', *lines[2:]])
    path = tmp_path / "export.csv"
    path.write_bytes(data)
    entry = api.ingest(tmp_path / "case", [path], fmt="helicone").manifest["files"][0]
    x = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    kept = sorted(r["request_id"] for r in x)
    assert entry["reconciled"] and entry["quarantined"] == 1
    assert kept == (["h-1", "h-3", "h-4"] if damage.startswith("csv") else ["h-1", "h-2", "h-3", "h-4"])


def test_helicone_csv_a_damaged_one_line_record_with_a_stray_quote_costs_that_record_only(tmp_path: Path) -> None:
    """A damaged line that is a whole record by itself, with a quote inside an unquoted field: its group ran to
    the next odd line and was taken as one record (only its first row was parsed), and the records after it
    were lost."""
    rows = [row(1, user_id='caf\u00e9 5" screen'), row(2), row(3), row(4, user_id="line one\nline two"), row(5), row(6)]
    text = as_csv(rows).replace('"caf\u00e9 5"" screen"', 'caf\u00e9 5" screen')
    path = tmp_path / "export.csv"
    path.write_bytes(text.encode("utf-8").replace("caf\u00e9".encode(), b"caf\xe9"))
    entry = api.ingest(tmp_path / "case", [path], fmt="helicone").manifest["files"][0]
    x = sorted(r["request_id"] for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist())
    assert entry["reconciled"] and entry["quarantined"] == 1 and x == ["h-2", "h-3", "h-4", "h-5", "h-6"]


def test_helicone_csv_a_damaged_field_of_thousands_of_lines_costs_that_record_only(tmp_path: Path) -> None:
    """At 10,000 lines the damaged record was cut, its lines read one by one and its closing line opened a
    field that ran to the end of the file: the six records after it were lost."""
    body = "\n".join(["caf\u00e9 first"] + [f"line {i}" for i in range(10_500)])
    rows = [row(1), row(2, user_id=body), *[row(i) for i in range(3, 9)]]
    path = tmp_path / "export.csv"
    path.write_bytes(as_csv(rows).encode("utf-8").replace("caf\u00e9".encode(), b"caf\xe9"))
    entry = api.ingest(tmp_path / "case", [path], fmt="helicone").manifest["files"][0]
    x = sorted(r["request_id"] for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist())
    assert entry["reconciled"] and entry["quarantined"] == 1 and x == ["h-1", *[f"h-{i}" for i in range(3, 9)]]


def test_helicone_csv_the_rest_of_a_damaged_record_does_not_swallow_the_records_after_it(tmp_path: Path) -> None:
    """A damaged record one field short across two lines: its first line went alone, and its closing line's
    quote opened a record that ran to the next multi-line record (h-3 to h-7 lost)."""
    header, r1, *_ = as_csv([row(1)]).split("\n")
    damaged = r1.replace("h-1", "h-2").rsplit(",", 3)[0] + ',"caf\u00e9 line one\nline two",{}'
    rest = as_csv([row(3), row(4), row(5), row(6, user_id="line one\nline two"), row(7)]).split("\n", 1)[1]
    path = tmp_path / "export.csv"
    path.write_bytes("\n".join([header, r1, damaged, rest]).encode("utf-8").replace("caf\u00e9".encode(), b"caf\xe9"))
    entry = api.ingest(tmp_path / "case", [path], fmt="helicone").manifest["files"][0]
    x = sorted(r["request_id"] for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist())
    assert entry["reconciled"] and x == ["h-1", "h-3", "h-4", "h-5", "h-6", "h-7"]


def test_helicone_csv_a_torn_line_before_millions_of_empty_lines_is_read_in_bounded_memory() -> None:
    """Each line held cost far more than its bytes: a torn quote followed by 16 million empty lines held
    3.75 GB. Each line now counts what holding it costs, so the group stops at the limit."""
    from forensics.ingest.formats.helicone import DAMAGED_RECORD_BYTES, LINE_COST, _records
    from forensics.ingest.reader import Line

    n = 2 * DAMAGED_RECORD_BYTES // LINE_COST
    read = 0

    def lines() -> Iterator[Line]:
        nonlocal read
        yield Line(1, None, b'\xff" torn')
        for i in range(2, n + 2):
            read += 1
            yield Line(i, "", b"")

    assert next(_records(lines(), 11)) == (1, None, b'\xff" torn')
    assert read <= DAMAGED_RECORD_BYTES // LINE_COST  # stopped at the limit, not held to the end


def _torn(record: str) -> str:
    """A CSV record cut inside its quoted request_body (a torn write), its line ended."""
    return record[: record.index('""content""')] + "\n"


def test_helicone_csv_a_record_cut_short_mid_file_costs_that_record_only(tmp_path: Path) -> None:
    """A record cut inside a quoted field, its quotes never closing: every record after it was read as part of
    it, one quarantine row, and six customers' records lost from a file the manifest called reconciled."""
    header, *records = as_csv([row(i, organization_id=f"org-{i}") for i in range(1, 11)]).splitlines(keepends=True)
    data = header + "".join(records[:3]) + _torn(records[3]) + "".join(records[4:])
    entry, q, x = ingest(tmp_path, "export.csv", data)
    assert sorted(r["tenant_id"] for r in x) == sorted(f"org-{i}" for i in (1, 2, 3, 5, 6, 7, 8, 9, 10))
    assert len(q) == 1 and q[0]["source_line"] == 5 and "unterminated quoted field" in q[0]["reason"]
    assert (entry["ingested"], entry["quarantined"]) == (9, 1)


@pytest.mark.parametrize("multi_line_after", [False, True])
def test_helicone_csv_a_cut_record_and_a_torn_fragment_cost_only_themselves(tmp_path: Path, multi_line_after: bool) -> None:
    """A cut record, then a torn fragment that is no record: with no record of several lines after them the
    quotes never close and the two are one cut record; with one (its first line closes the cut record's
    quotes) the two lines are quarantined one by one. Either way every whole record after them is read."""
    spans = "line one\nline two" if multi_line_after else "u"
    header, *records = as_csv([row(i, user_id=spans if i == 5 else "u") for i in range(1, 7)]).splitlines(keepends=True)
    data = header + records[0] + _torn(records[1]) + "half a line, torn\n" + "".join(records[2:])
    entry, q, x = ingest(tmp_path, "export.csv", data)
    assert sorted(r["request_id"] for r in x) == ["h-1", "h-3", "h-4", "h-5", "h-6"]
    assert [r["source_line"] for r in q] == ([3, 4] if multi_line_after else [3])


def test_helicone_csv_a_last_record_cut_inside_a_field_of_many_lines_stays_one_record(tmp_path: Path) -> None:
    """Cut at the end of the file inside a quoted field of many lines: the lines after its first are the
    field's, not records, and are not read as records (one quarantine row, not one a line)."""
    body = json.dumps({"messages": [{"role": "user", "content": "\n".join(f"a,b,c {i}" for i in range(40))}]})
    header, r1, *cut = as_csv([row(1), row(2, request_body=body)]).splitlines(keepends=True)
    data = header + r1 + "".join(cut)[: len("".join(cut)) * 2 // 3]
    entry, q, x = ingest(tmp_path, "export.csv", data)
    assert [r["request_id"] for r in x] == ["h-1"]
    assert len(q) == 1 and q[0]["source_line"] == 3 and "unterminated quoted field" in q[0]["reason"]


@pytest.mark.parametrize("bom", ["", "\ufeff"], ids=["plain", "bom"])
@pytest.mark.parametrize("order", ["same", "swapped"])
def test_helicone_csv_exports_appended_one_after_another_follow_their_own_header(tmp_path: Path, order: str, bom: str) -> None:
    """A second export appended with its header in another column order: its rows were read by the first
    header, their customers taken from the user column (the wrong customers on the list). Exports that each
    begin with a byte order mark (``cat`` of two Excel-style exports) put one at the second header's start:
    that header was not told as one, and the rows after it went to the wrong customers again."""
    first = bom + as_csv([row(1), row(2)])
    names = list(GOOD)
    if order == "swapped":
        a, b = names.index("organization_id"), names.index("user_id")
        names[a], names[b] = names[b], names[a]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    writer.writerows([row(3, organization_id="org-2", user_id="u-3"), row(4, organization_id="org-2", user_id="u-4")])
    entry, q, x = ingest(tmp_path, "export.csv", first + bom + buf.getvalue())
    assert q == [] and entry["ingested"] == 4
    assert sorted((r["request_id"], r["tenant_id"], r["user_id"]) for r in x) == [
        ("h-1", "org-1", "u-1"), ("h-2", "org-1", "u-1"), ("h-3", "org-2", "u-3"), ("h-4", "org-2", "u-4")]


def _with_column_twice(rows: list[dict[str, object]], name: str, second: list[object]) -> str:
    """``rows`` as CSV with a second column named ``name`` at the end, holding ``second``'s values."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*GOOD, name])
    writer.writerows([[r[k] for k in GOOD] + [extra] for r, extra in zip(rows, second, strict=True)])
    return buf.getvalue()


def test_helicone_csv_a_column_named_twice_never_picks_one_of_two_customers(tmp_path: Path) -> None:
    """A header naming the customer's column twice (two exports joined side by side): the last column's value
    was the customer, silently. Where the two differ, the record is quarantined saying which columns; where they
    agree, it is read."""
    rows = [row(1, organization_id="org-1"), row(2, organization_id="org-2"), row(3, organization_id="org-3")]
    data = _with_column_twice(rows, "organization_id", ["org-1", "org-evil", "org-3"])
    entry, q, x = ingest(tmp_path, "export.csv", data)
    assert sorted((r["request_id"], r["tenant_id"]) for r in x) == [("h-1", "org-1"), ("h-3", "org-3")]
    assert len(q) == 1 and q[0]["source_line"] == 3
    assert "'organization_id'" in q[0]["reason"] and "columns 8 and 12" in q[0]["reason"] and "Fix" in q[0]["reason"]
    assert (entry["ingested"], entry["quarantined"]) == (2, 1)


def test_helicone_csv_columns_with_no_name_are_never_compared(tmp_path: Path) -> None:
    """Two columns with no name (a spreadsheet's note columns) name no field: a row holding a note in one was
    quarantined as two columns of one name that differ."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*GOOD, "", ""])
    writer.writerows([[row(1)[k] for k in GOOD] + ["ok", ""], [row(2)[k] for k in GOOD] + ["", "checked"]])
    entry, q, x = ingest(tmp_path, "export.csv", buf.getvalue())
    assert q == [] and sorted(r["request_id"] for r in x) == ["h-1", "h-2"]


def test_helicone_csv_appended_exports_whose_header_names_a_column_twice_follow_their_own_header(tmp_path: Path) -> None:
    """The appended export's header is told as a header when it names a column twice, as the first one does:
    read as a record, its column names were a request."""
    rows = [row(1), row(2)]
    one = _with_column_twice(rows, "user_id", ["u-1", "u-1"])
    entry, q, x = ingest(tmp_path, "export.csv", one + one.replace("h-1", "h-3").replace("h-2", "h-4"))
    assert q == [] and sorted(r["request_id"] for r in x) == ["h-1", "h-2", "h-3", "h-4"]


def test_helicone_csv_a_record_of_too_many_fields_over_several_lines_is_one_quarantine_row(tmp_path: Path) -> None:
    """A record with a field too many whose quoted body spans lines: its lines were quarantined one by one, each
    as a field whose quotes never close. It is one record, quarantined for its field count."""
    body = json.dumps({"messages": [{"role": "user", "content": "line one"}]}, indent=2)
    header, *records = as_csv([row(1), row(2, request_body=body), row(3)]).splitlines(keepends=True)
    cut = records[0].count("\n")
    lines = "".join(records).splitlines(keepends=True)
    second = "".join(lines[cut: cut + body.count("\n") + 1])
    data = header + "".join(lines[:cut]) + second.rstrip("\n") + ",an extra field\n" + "".join(lines[cut + body.count("\n") + 1:])
    entry, q, x = ingest(tmp_path, "export.csv", data)
    assert sorted(r["request_id"] for r in x) == ["h-1", "h-3"]
    assert len(q) == 1 and q[0]["source_line"] == 3 and "12 fields, the header has 11" in q[0]["reason"], q
    assert (entry["ingested"], entry["quarantined"]) == (2, 1)


def test_helicone_csv_header_names_with_spaces_after_the_commas_are_read(tmp_path: Path) -> None:
    header, *records = as_csv([row(1), row(2)]).splitlines(keepends=True)
    entry, q, x = ingest(tmp_path, "export.csv", header.replace(",", ", ") + "".join(records))
    assert entry["format"] == "helicone" and q == [] and sorted(r["request_id"] for r in x) == ["h-1", "h-2"]


def test_csv_resync_finds_where_whole_records_begin_again() -> None:
    from forensics.ingest.formats.helicone import _resync
    from forensics.ingest.reader import Line

    def lines(*texts: str) -> list[Line]:
        return [Line(i + 1, t, t.encode()) for i, t in enumerate(texts)]

    assert _resync(lines('a,"cut', "b,c", 'd,"e', 'f"'), 2) == 1  # the records after the cut line read whole
    assert _resync(lines('a,"cut', "torn", "b,c"), 2) == 2  # the torn fragment belongs to the cut record
    assert _resync(lines('a,"field', "of,many", "lines"), 2) == 3  # never whole again: the field's own lines
    assert _resync(lines('a,"cut', 'b,"c'), 2) == 2  # a last record cut too


@pytest.mark.parametrize("texts", [
    ('",', "g1,g2,g3", 'a"'),  # the whole record just after the damaged line
    ('"""', ",,,,,,", "g1,g2,g3", '"",,",'),  # and further on
])
def test_csv_damaged_lines_whose_quotes_close_around_a_whole_record_do_not_take_it(texts: tuple[str, ...]) -> None:
    """A group of lines whose quotes balance and that reads as one record of another field count is one bad record
    (a field too many), unless a whole record starts inside it: then its first line is damage and the record after
    it is a customer's."""
    from forensics.ingest.formats.helicone import _records
    from forensics.ingest.reader import Line

    got = [text for _, text, _ in _records(iter([Line(i + 1, t, t.encode()) for i, t in enumerate(texts)]), 3)]
    assert "g1,g2,g3" in got, got


def test_helicone_forced_on_a_json_array_says_so_once(tmp_path: Path) -> None:
    """Forced on a JSON array (not a Helicone layout), every line was a CSV record of the wrong field count:
    94 quarantine rows and no word of what the file was."""
    path = tmp_path / "export.json"
    path.write_text(json.dumps([GOOD, row(2)], indent=2))
    result = api.ingest(tmp_path / "case", [path], fmt="helicone")
    entry = result.manifest["files"][0]
    q = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert entry["ingested"] == 0 and len(q) == 1 and "is a JSON array" in q[0]["reason"] and "jq -c" in q[0]["reason"]


def test_helicone_bodies_of_another_shape_are_noted_not_taken_for_empty_ones(tmp_path: Path) -> None:
    # Gemini's own bodies through Helicone: the prompt and the answer are there, unread; the row said nothing.
    request = {"contents": [{"role": "user", "parts": [{"text": "Confidential merger memo for ACME"}]}]}
    answer = {"candidates": [{"content": {"role": "model", "parts": [{"text": "Summary of the memo"}]}}]}
    _, q, x = ingest(tmp_path, "export.jsonl", jsonl([row(1, request_body=json.dumps(request), response_body=json.dumps(answer))]))
    assert q == [] and x[0]["prompt_text"] is None and x[0]["response_text"] is None
    assert "request_body is an object (keys: contents) of a shape not known to hold the prompt" in x[0]["problems"]
    assert "response_body is an object of a shape not known to hold the answer" in x[0]["problems"]


def test_helicone_an_answer_stored_as_its_chunks_was_streamed_whatever_the_request_body_leaves_out(tmp_path: Path) -> None:
    """A request body without ``stream`` is a call made without streaming, but an answer stored as its chunks
    (``streamed_data``) shows it streamed (a review of the stream reading)."""
    chunks = {"streamed_data": [{"choices": [{"index": 0, "delta": {"content": "A"}}]},
                                {"choices": [{"index": 0, "delta": {"content": "B"}, "finish_reason": "stop"}]}]}
    _, _, x = ingest(tmp_path, "h.jsonl", jsonl([row(1, response_body=json.dumps(chunks)), row(2)]))
    assert [(r["response_text"], r["stream"]) for r in sorted(x, key=lambda r: r["request_id"])] == [("AB", True),
                                                                                                     ("hi", False)]
