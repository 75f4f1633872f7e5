"""Bad input of every kind: a quarantine row or one clear error, never a traceback or a lost line."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

from forensics import api
from forensics.errors import ConfigError, InputError

GOOD = {
    "request_id": "r-1", "timestamp": "2026-08-30T03:12:09Z", "tenant_id": "acct-1",
    "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": "hello there"}]},
}


def good(i: int, **changes: object) -> str:
    rec = {**GOOD, "request_id": f"r-{i}", **changes}
    return json.dumps(rec)


def ingest_lines(tmp_path: Path, lines: list[str] | bytes, name: str = "requests.jsonl", **kw: object) -> tuple[dict, list[dict]]:
    path = tmp_path / name
    data = lines if isinstance(lines, bytes) else ("\n".join(lines) + "\n").encode()
    path.write_bytes(data)
    result = api.ingest(tmp_path / "case", [path], fmt=kw.get("fmt", "openai-split"))  # type: ignore[arg-type]
    entry = result.manifest["files"][0]
    quarantine = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    return entry, quarantine


def reconciles(entry: dict) -> bool:
    return entry["lines"] == entry["ingested"] + entry["quarantined"] + entry["blank"] + entry["duplicate"]


def test_invalid_json_is_quarantined_with_line(tmp_path: Path) -> None:
    entry, q = ingest_lines(tmp_path, [good(1), '{"request_id": "r-2", ', good(3)])
    assert (entry["ingested"], entry["quarantined"]) == (2, 1)
    assert q[0]["source_line"] == 2 and "invalid JSON" in q[0]["reason"] and q[0]["source_file"].endswith("requests.jsonl")
    assert q[0]["excerpt"].startswith('{"request_id": "r-2"')
    assert reconciles(entry)


def test_truncated_gzip_keeps_lines_before_and_reports_file(tmp_path: Path) -> None:
    blob = gzip.compress(("\n".join(good(i) for i in range(200)) + "\n").encode())
    path = tmp_path / "requests.jsonl.gz"
    path.write_bytes(blob[: len(blob) // 2])
    result = api.ingest(tmp_path / "case", [path], fmt="openai-split")
    entry = result.manifest["files"][0]
    assert 0 < entry["ingested"] < 200
    assert entry["problems"] and "truncated" in entry["problems"][0]
    q = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert any("gzip stream is truncated" in r["reason"] for r in q)
    assert entry["quarantined"] == 1  # the unreadable rest of the file
    assert reconciles(entry)
    assert any("damaged" in n for n in result.manifest["notes"])


def test_truncated_zstd(tmp_path: Path) -> None:
    blob = zstandard.ZstdCompressor().compress(("\n".join(good(i) for i in range(500)) + "\n").encode())
    path = tmp_path / "requests.jsonl.zst"
    path.write_bytes(blob[: len(blob) - 40])
    result = api.ingest(tmp_path / "case", [path], fmt="openai-split")
    entry = result.manifest["files"][0]
    assert entry["problems"] and "zstd" in entry["problems"][0]
    assert reconciles(entry)


def test_compressed_files_read_transparently_and_sniffed(tmp_path: Path) -> None:
    text = ("\n".join(good(i) for i in range(5)) + "\n").encode()
    (tmp_path / "a.gz").write_bytes(gzip.compress(text))
    (tmp_path / "b.zst").write_bytes(zstandard.ZstdCompressor().compress(text.replace(b'"r-', b'"z-')))
    result = api.ingest(tmp_path / "case", [tmp_path / "a.gz", tmp_path / "b.zst"])
    assert [f["format"] for f in result.manifest["files"]] == ["openai-split", "openai-split"]
    assert result.manifest["tables"]["exchanges"] == 10


def test_invalid_utf8_line(tmp_path: Path) -> None:
    data = (good(1) + "\n").encode() + b'{"request_id": "r-\xff\xfe"}\n' + (good(3) + "\n").encode()
    entry, q = ingest_lines(tmp_path, data)
    assert entry["quarantined"] == 1 and q[0]["source_line"] == 2 and "UTF-8" in q[0]["reason"]
    assert "\\xff" in q[0]["excerpt"]


def test_bom_and_crlf(tmp_path: Path) -> None:
    data = b"\xef\xbb\xbf" + (good(1) + "\r\n" + good(2) + "\r\n").encode()
    entry, q = ingest_lines(tmp_path, data)
    assert (entry["ingested"], entry["quarantined"]) == (2, 0)


def test_a_byte_order_mark_at_a_later_line_start_is_the_next_log_appended(tmp_path: Path) -> None:
    """Two logs that each begin with a byte order mark, appended (``cat a.jsonl b.jsonl``): the second log's first
    record began with the mark and was quarantined as invalid JSON. Its bytes are hashed without the mark, as the
    first log's first record is, so the same record in another copy is told a duplicate."""
    bom = b"\xef\xbb\xbf"
    data = bom + (good(1) + "\n" + good(2) + "\n").encode() + bom + (good(3) + "\n").encode() + bom + b"\n"
    entry, q = ingest_lines(tmp_path, data)
    assert (entry["ingested"], entry["quarantined"], entry["blank"]) == (3, 0, 1) and reconciles(entry)
    x = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    again = tmp_path / "again"
    again.mkdir()
    _, _ = ingest_lines(again, (good(3) + "\n").encode())
    copy = pq.read_table(again / "case" / "exchanges.parquet").to_pylist()
    assert {r["request_id"]: r["record_hash"] for r in x}["r-3"] == copy[0]["record_hash"]


@pytest.mark.parametrize(
    "line, reason",
    [
        (json.dumps({k: v for k, v in GOOD.items() if k != "request_id"}), "missing required field 'request_id'"),
        (json.dumps({**GOOD, "tenant_id": ""}), "no tenant: none of tenant_id is set"),
        (json.dumps({**GOOD, "request_id": {"a": 1}}), "expected a string"),
        (json.dumps({**GOOD, "timestamp": "yesterday at noon"}), "timestamp"),
        (json.dumps({**GOOD, "body": {"model": "m", "messages": "not a list"}}), "messages"),
        (json.dumps({**GOOD, "body": {"model": "m", "messages": [{"role": "user", "content": 42}]}}), "content is a int"),
        ("[1, 2, 3]", "expected an object"),
    ],
    ids=["missing-id", "empty-tenant", "wrong-type-id", "bad-time", "messages-not-list", "content-int", "array"],
)
def test_bad_records_are_quarantined(tmp_path: Path, line: str, reason: str) -> None:
    entry, q = ingest_lines(tmp_path, [good(1), line])
    assert entry["quarantined"] == 1 and entry["ingested"] == 1
    assert reason in q[0]["reason"] and q[0]["source_line"] == 2
    assert reconciles(entry)


def test_split_response_lines_that_also_carry_the_tenant_are_read_as_responses(tmp_path: Path) -> None:
    # Some gateways write tenant_id on both halves: the line's content, not that field, makes it a
    # request or a response.
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "requests.jsonl").write_text(good(1) + "\n" + good(2) + "\n")
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "the answer"}}]}
    chunk = {"choices": [{"index": 0, "delta": {"content": "streamed"}}]}
    half = {"timestamp": "2026-08-30T03:12:19Z", "tenant_id": "acct-1", "status_code": 200}
    (logs / "responses.jsonl").write_text(json.dumps({**half, "request_id": "r-1", "body": answer}) + "\n"
                                          + json.dumps({**half, "request_id": "r-2", "chunks": [chunk]}) + "\n")
    result = api.ingest(tmp_path / "case", [logs], fmt="openai-split")
    assert pq.read_table(tmp_path / "case" / "quarantine.parquet").num_rows == 0
    assert [(f["ingested"], f["quarantined"]) for f in result.manifest["files"]] == [(2, 0), (2, 0)]
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert [(r["request_id"], r["tenant_id"], r["response_text"], r["orphan"]) for r in rows] == [
        ("r-1", "acct-1", "the answer", None), ("r-2", "acct-1", "streamed", None)]


def test_split_response_with_null_chunks_beside_its_body_is_read_from_the_body(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "requests.jsonl").write_text(good(1) + "\n")
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "the answer"}}]}
    (logs / "responses.jsonl").write_text(json.dumps({"request_id": "r-1", "timestamp": "2026-08-30T03:12:19Z",
                                                      "status_code": 200, "chunks": None, "body": answer}) + "\n")
    api.ingest(tmp_path / "case", [logs], fmt="openai-split")
    assert pq.read_table(tmp_path / "case" / "quarantine.parquet").num_rows == 0
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (row["request_id"], row["response_text"], row["orphan"]) == ("r-1", "the answer", None)


def test_a_streamed_answer_whose_request_was_rotated_away_keeps_its_chunks_model(tmp_path: Path) -> None:
    """The model of an answer whose request half is gone is read from its chunks (each ChatCompletionChunk names
    it): read from the body alone, a streamed suspect had none and fell out of the scan's scope (a review)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "requests.jsonl").write_text(good(1) + "\n")  # r-1's request; r-2's was rotated away
    first = {"id": "c", "object": "chat.completion.chunk", "model": "glm-5.3",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": "stale "}}]}
    last = {"id": "c", "object": "chat.completion.chunk", "model": "glm-5.3",
            "choices": [{"index": 0, "delta": {"content": "pages"}, "finish_reason": "stop"}]}
    half = {"timestamp": "2026-08-30T03:12:19Z", "status_code": 200}
    (logs / "responses.jsonl").write_text(
        json.dumps({**half, "request_id": "r-1", "chunks": [{k: v for k, v in first.items() if k != "model"}]}) + "\n"
        + json.dumps({**half, "request_id": "r-2", "chunks": [first, last]}) + "\n")
    api.ingest(tmp_path / "case", [logs], fmt="openai-split")
    rows = {r["request_id"]: r for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()}
    assert (rows["r-2"]["model"], rows["r-2"]["model_routed"], rows["r-2"]["response_text"]) == (None, "glm-5.3",
                                                                                                  "stale pages")
    assert rows["r-2"]["orphan"] is not None  # still flagged: its request is missing
    assert rows["r-1"]["model_routed"] is None  # chunks that name no model: none (its request names it)


def spend_log(**changes: object) -> str:
    rec = {"request_id": "x", "startTime": "2026-08-29T10:00:00Z", "team_id": "t", "call_type": "acompletion",
           "api_key": "k", "messages": [{"role": "user", "content": "hello there, general kenobi"}], **changes}
    return json.dumps(rec)


@pytest.mark.parametrize("value", ["many", 10**20, True], ids=["word", "overflow", "bool"])
def test_bad_token_count_keeps_the_record_and_says_why(tmp_path: Path, value: object) -> None:
    entry, q = ingest_lines(tmp_path, [spend_log(prompt_tokens=value)], name="spend.jsonl", fmt="litellm")
    assert entry["ingested"] == 1 and not q  # the text is still scanned and matched
    row = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()[0]
    assert "prompt_tokens" in row["problems"] and row["reported_prompt_tokens"] is None
    assert row["prompt_tokens_source"] == "estimate"


def test_out_of_range_engine_figure_keeps_the_line(tmp_path: Path) -> None:
    log = tmp_path / "prefill-0_0.log"
    log.write_text("[2026-08-27 00:00:05 TP0] max_total_num_tokens=99999999999999999999999, context_len=1048576\n")
    api.ingest(tmp_path / "case", [log])
    (event,) = pq.read_table(tmp_path / "case" / "engine_events.parquet").to_pylist()
    assert event["event"] == "startup" and event["max_total_num_tokens"] is None and event["context_len"] == 1048576
    assert "99999999999999999999999" in event["message"]


def test_tenant_field_that_names_no_customer_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "spend.jsonl"
    path.write_text(spend_log() + "\n" + spend_log(request_id="y") + "\n")
    with pytest.raises(ConfigError) as exc:
        api.ingest(tmp_path / "case", [path], config=api.make_config(tenant_field="organisation_id"))
    assert "organisation_id" in str(exc.value) and "spend.jsonl" in str(exc.value)


def test_tenant_field_that_names_no_customer_is_a_config_error_with_engine_logs_beside(tmp_path: Path) -> None:
    """Engine logs read in the same ingest parse (their lines name no customer): the typo went through, the
    case had no exchanges, and `run` failed later naming the wrong cause (the model never appears)."""
    path = tmp_path / "spend.jsonl"
    path.write_text(spend_log() + "\n" + spend_log(request_id="y") + "\n")
    engine = tmp_path / "decode-1_0.log"
    engine.write_text("[2026-08-27 00:00:05 TP0] max_total_num_tokens=681280, chunked_prefill_size=8192, "
                      "max_prefill_tokens=16384, max_running_requests=64, context_len=1048576\n")
    with pytest.raises(ConfigError) as exc:
        api.ingest(tmp_path / "case", [path, engine], config=api.make_config(tenant_field="organisation_id"))
    assert "organisation_id" in str(exc.value) and "spend.jsonl" in str(exc.value)


def test_one_file_naming_no_customer_among_good_ones_does_not_stop_the_run(tmp_path: Path) -> None:
    # A hostile (or foreign) file whose records carry no tenant field is bad input: its records are
    # quarantined and a note names it; the rule is wrong only when no file names a customer.
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "good.jsonl").write_text(spend_log() + "\n")
    (logs / "hostile.jsonl").write_text(spend_log(request_id="y", team_id="", api_key="") + "\n")
    res = api.ingest(tmp_path / "case", [logs], config=api.make_config())
    by_name = {Path(f["path"]).name: f for f in res.manifest["files"]}
    assert (by_name["good.jsonl"]["ingested"], by_name["hostile.jsonl"]["quarantined"]) == (1, 1)
    assert any("hostile.jsonl" in n and "name no customer" in n for n in res.manifest["notes"])


def _callback(rid: str, metadata: dict[str, str]) -> str:
    """A LiteLLM callback payload: it names its customer in the API key's metadata, never in spend-log columns."""
    return json.dumps({"id": rid, "call_type": "acompletion", "startTime": 1787997000.0, "model": "glm-5.3",
                       "messages": [{"role": "user", "content": "hello there"}], "metadata": metadata})


@pytest.mark.parametrize(("tenant_field", "payload_key", "column"), [
    ("organization_id", "user_api_key_org_id", "organization_id"),
    ("team_id", "user_api_key_team_id", "team_id"),
    ("metadata.user_api_key_org_id", "user_api_key_org_id", "organization_id"),
    ("metadata.user_api_key_hash", "user_api_key_hash", "api_key"),
])
def test_a_litellm_tenant_field_names_the_customer_in_spend_logs_and_callback_payloads_alike(
        tmp_path: Path, tenant_field: str, payload_key: str, column: str) -> None:
    """The case-file spec's own example, tenant_field = "organization_id", named no customer in a callback payload
    (the org is its metadata's user_api_key_org_id): every payload was quarantined and the list lost most of its
    customers, with one note in the summary. LiteLLM fills the spend log's column from that metadata key."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "callbacks.jsonl").write_text(_callback("c-1", {payload_key: "acme"}) + "\n")
    (logs / "spend.jsonl").write_text(json.dumps({
        "request_id": "s-1", "startTime": "2026-08-29T10:00:00Z", "call_type": "acompletion", "api_key": "k",
        "messages": [{"role": "user", "content": "hi"}], "metadata": {}, column: "acme"}) + "\n")
    res = api.ingest(tmp_path / "case", [logs], fmt="litellm", config=api.make_config(tenant_field=tenant_field))
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert sorted(r["tenant_id"] for r in rows) == ["acme", "acme"] and res.warnings == []
    assert {r["request_id"]: r["tenant_field"] for r in rows} == {"c-1": f"metadata.{payload_key}", "s-1": column}


def test_records_the_tenant_rule_names_no_customer_in_are_a_warning_a_run_prints(tmp_path: Path) -> None:
    """A rule that fits one kind of record only lost the others to quarantine; `run` printed nothing of it."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "callbacks.jsonl").write_text(_callback("c-1", {"user_api_key_user_id": "u-1"}) + "\n"
                                          + _callback("c-2", {"user_api_key_team_id": "team-a"}) + "\n")
    (logs / "spend.jsonl").write_text(spend_log() + "\n")
    res = api.ingest(tmp_path / "case", [logs], fmt="litellm", config=api.make_config(tenant_field="team_id"))
    (warning,) = res.warnings
    assert warning.startswith("1 record in 1 file name no customer by the tenant rule (tenant_field 'team_id')")
    assert "callbacks.jsonl (1)" in warning and "cannot be on the list" in warning and "Fix: set tenant_field" in warning
    assert warning in res.manifest["notes"]


def test_files_read_before_in_another_format_are_not_warned_of_again(tmp_path: Path) -> None:
    """Ingested again with the right format, files the case holds already (by SHA-256) are not read again: the
    warning blamed the right format with the wrong one's reasons, and its fix (ingest again) looped (a review)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "spend.jsonl").write_text(spend_log() + "\n" + spend_log(request_id="y") + "\n")
    first = api.ingest(tmp_path / "case", [logs], fmt="helicone")
    (warning,) = first.warnings
    assert "none of its 2 lines is a record of the format given for it, 'helicone' (its lines read as litellm)" in warning
    assert warning.count("Fix:") == 1  # (the first line's own fix is for a record, not for a format)
    assert "ingest it again into a new case folder" in warning  # (this case never reads them again)
    # What the case holds of them is what it read the first time: said as it was, never blaming the right format.
    assert api.ingest(tmp_path / "case", [logs], fmt="litellm").warnings == [warning]


def test_record_without_tenant_is_quarantined_not_listed(tmp_path: Path) -> None:
    entry, q = ingest_lines(tmp_path, [spend_log(), spend_log(request_id="y", team_id="", api_key="")], name="spend.jsonl", fmt="litellm")
    assert (entry["ingested"], entry["quarantined"]) == (1, 1)
    assert q[0]["reason"].startswith("no tenant") and "tenant_field" in q[0]["reason"]


@pytest.mark.parametrize("blank", [" ", "\t \u3000"])
def test_a_tenant_of_white_space_only_names_no_customer_in_any_format(tmp_path: Path, blank: str) -> None:
    """Helicone took " " as a customer (with a packet of its own) where a mapping profile quarantined the
    same record: the list depended on the export's format."""
    spend = tmp_path / "spend.jsonl"
    spend.write_text(spend_log(team_id=blank, api_key="") + "\n" + spend_log(request_id="y", team_id=blank) + "\n")
    helicone = tmp_path / "helicone.jsonl"
    body = json.dumps({"messages": [{"role": "user", "content": "hello"}]})
    helicone.write_text(json.dumps({"request_id": "h", "request_created_at": "2026-08-29T10:00:00Z", "request_body": body,
                                    "response_body": "{}", "organization_id": blank}) + "\n")
    split = tmp_path / "split.jsonl"
    split.write_text(json.dumps({"request_id": "s", "timestamp": "2026-08-29T10:00:00Z", "tenant_id": blank,
                                 "body": {"messages": [{"role": "user", "content": "hi"}]}}) + "\n")
    result = api.ingest(tmp_path / "case", [spend, helicone, split])
    tenants = [r["tenant_id"] for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()]
    assert tenants == [spend_log_key("k")]  # the second spend log's next tenant field, its key
    by_name = {Path(f["path"]).name: f for f in result.manifest["files"]}
    assert [by_name[n]["quarantined"] for n in ("spend.jsonl", "helicone.jsonl", "split.jsonl")] == [1, 1, 1]


def spend_log_key(key: str) -> str:
    """The tenant id LiteLLM's tenant chain gives a record whose only customer field is its API key."""
    from forensics.ingest.formats.litellm import resolve_tenant

    tenant, _ = resolve_tenant({"api_key": key}, "auto")
    assert tenant is not None
    return tenant


def test_every_quarantine_reason_names_a_fix(tmp_path: Path) -> None:
    lines = ["{bad", "[1]", json.dumps({**GOOD, "timestamp": "noon"}), json.dumps({**GOOD, "request_id": ""}),
             json.dumps({**GOOD, "body": {"messages": 3}})]
    _, q = ingest_lines(tmp_path, lines)
    assert len(q) == 5 and all("Fix:" in r["reason"] for r in q), [r["reason"] for r in q]


def test_paths_are_recorded_relative_to_the_case_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "requests.jsonl").write_text(good(1) + "\n")
    case_file = tmp_path / "case.toml"
    case_file.write_text('name = "c"\nmodel = "m"\nwindow_start = "2026-01-01T00:00:00Z"\n'
                         'window_end = "2026-12-01T00:00:00Z"\nreal_ceiling_tokens = 10\n')
    outputs = []
    for cwd in (tmp_path, tmp_path / "logs"):
        monkeypatch.chdir(cwd)
        api.ingest(tmp_path / f"case-{cwd.name}", [tmp_path / "logs"], config=api.make_config(case_file))
        outputs.append(pq.read_table(tmp_path / f"case-{cwd.name}" / "exchanges.parquet").to_pylist()[0]["source_file"])
    assert outputs == ["logs/requests.jsonl", "logs/requests.jsonl"]


def test_huge_single_line_is_ingested(tmp_path: Path) -> None:
    big = "lorem ipsum dolor sit amet " * 800_000  # ~21 MB of prompt on one line
    entry, q = ingest_lines(tmp_path, [good(1, body={"model": "glm-5.3", "messages": [{"role": "user", "content": big}]})])
    assert entry["ingested"] == 1 and not q
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["prompt_chars", "prompt_tokens"]).to_pylist()
    assert rows[0]["prompt_chars"] > 20_000_000


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    result = api.ingest(tmp_path / "case", [path], fmt="litellm")
    assert result.manifest["files"][0]["lines"] == 0 and result.manifest["tables"]["exchanges"] == 0


def test_folder_with_unrelated_files(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "requests.jsonl").write_text(good(1) + "\n")
    (logs / "notes.txt").write_text("shopping list: milk, eggs\n")
    (logs / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (logs / ".DS_Store").write_bytes(b"\x00\x01")
    result = api.ingest(tmp_path / "case", [logs])
    statuses = {Path(f["path"]).name: f["status"] for f in result.manifest["files"]}
    assert statuses == {"requests.jsonl": "ingested", "notes.txt": "skipped: format not recognised",
                        "image.png": "skipped: format not recognised"}
    q = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert sorted(Path(r["source_file"]).name for r in q) == ["image.png", "notes.txt"]
    assert result.manifest["tables"]["exchanges"] == 1


def test_explicit_file_of_unknown_format_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    with pytest.raises(InputError) as exc:
        api.ingest(tmp_path / "case", [path])
    assert "notes.txt" in str(exc.value) and "--format" in str(exc.value)
    assert not (tmp_path / "case" / "exchanges.parquet").exists()


def test_cli_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    for args in (["ingest", "--case", str(tmp_path / "c"), str(path)],
                 ["ingest", "--case", str(tmp_path / "c"), str(tmp_path / "missing.jsonl")],
                 ["ingest", "--case", str(tmp_path / "c"), "--format", "nope", str(path)]):
        proc = subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.startswith("error: "), proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_zone_less_times_read_in_configured_zone(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text(good(1, timestamp="2026-08-30T12:00:00") + "\n")
    cfg = api.make_config(timezone="Europe/Berlin")
    result = api.ingest(tmp_path / "case", [path], config=cfg)
    row = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()[0]
    assert row["received_at"].isoformat() == "2026-08-30T10:00:00+00:00"
    assert row["zone_assumed"] == "Europe/Berlin"
    assert result.manifest["zone_assumed_rows"] == 1
    assert any("Europe/Berlin" in n for n in result.manifest["notes"])


def test_utf16_file_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes((good(1) + "\n").encode("utf-16"))
    with pytest.raises(InputError) as exc:
        api.ingest(tmp_path / "case", [path])
    assert "UTF-16" in str(exc.value) and "iconv" in str(exc.value)


def test_utf16_file_in_a_folder_is_skipped_with_the_fix(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "a.jsonl").write_text(good(1) + "\n")
    (logs / "b.jsonl").write_bytes((good(2) + "\n").encode("utf-16"))
    result = api.ingest(tmp_path / "case", [logs])
    statuses = {Path(f["path"]).name: f["status"] for f in result.manifest["files"]}
    assert statuses == {"a.jsonl": "ingested", "b.jsonl": "skipped: not UTF-8"}
    (q,) = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert q["source_file"].endswith("b.jsonl") and "iconv -f UTF-16" in q["reason"]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32-le"])
@pytest.mark.parametrize("text", ["plain", "Привет, как дела? 你好世界 " * 20])
def test_utf16_and_32_without_a_bom_are_told_by_their_zero_bytes(tmp_path: Path, encoding: str, text: str) -> None:
    path = tmp_path / "requests.jsonl"
    line = json.dumps({**json.loads(good(1)), "note": text}, ensure_ascii=False)
    path.write_bytes((line + "\n").encode(encoding))
    with pytest.raises(InputError, match="UTF-32" if "32" in encoding else "UTF-16"):
        api.ingest(tmp_path / "case", [path], fmt="openai-split")


def _archive(tmp_path: Path, kind: str, members: dict[str, str]) -> Path:
    import io
    import tarfile
    import zipfile

    if kind == "zip":
        path = tmp_path / "logs.zip"
        with zipfile.ZipFile(path, "w") as zf:
            for name, text in members.items():
                zf.writestr(name, text)
        return path
    path = tmp_path / ("logs.tar.gz" if kind == "tar.gz" else "logs.tar")
    with tarfile.open(path, "w:gz" if kind == "tar.gz" else "w") as tf:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize("kind", ["tar.gz", "tar", "zip"])
def test_an_archive_of_logs_is_refused_with_the_command_that_extracts_it(tmp_path: Path, kind: str) -> None:
    """A tarball of logs read line by line: its headers and members ran together, some records read, thousands of
    "lines" quarantined and the rest missing, exit 0. Named, it is one clear error; found in a folder, one row."""
    members = {f"day{i}.jsonl": "".join(good(10 * i + j) + "\n" for j in range(5)) for i in range(3)}
    (tmp_path / "logs").mkdir()
    path = _archive(tmp_path / "logs", kind, members)
    with pytest.raises(InputError, match=f"is a {kind.split('.')[0]} archive") as info:
        api.ingest(tmp_path / "case", [path], fmt="openai-split")
    assert ("tar -xf" if kind != "zip" else "unzip") in str(info.value)
    (entry,) = api.ingest(tmp_path / "case2", [tmp_path / "logs"]).manifest["files"]
    assert entry["status"] == "skipped: an archive" and entry["ingested"] == 0 and entry["reconciled"]
    (row,) = pq.read_table(tmp_path / "case2" / "quarantine.parquet").to_pylist()
    assert "archive" in row["reason"] and "Fix:" in row["reason"]


@pytest.mark.parametrize("text", ["{\x00", "{\x00a\x00b\x00c\x00"])
def test_a_few_zero_bytes_in_a_short_utf8_file_are_a_bad_line_not_utf16(tmp_path: Path, text: str) -> None:
    """A NUL in a short line falls on one side of its byte pair by chance: the three-byte file "{\\x00\\n"
    was called UTF-16 and refused whole (found by the any-mix-of-lines property test)."""
    path = tmp_path / "spend.jsonl"
    path.write_text(text + "\n", encoding="utf-8")
    (entry,) = api.ingest(tmp_path / "case", [path], fmt="openai-split").manifest["files"]
    assert (entry["lines"], entry["ingested"], entry["quarantined"]) == (1, 0, 1), entry


@pytest.mark.parametrize("where", ["start", "only"])
def test_zero_bytes_a_crash_or_copytruncate_left_are_a_bad_line_not_utf16(tmp_path: Path, where: str) -> None:
    """logrotate's copytruncate, or a crash, leaves a run of NUL bytes at the start of a log. Before, a
    file whose first 4 KB was more than a quarter NULs was called UTF-16 and skipped whole (its good
    records with it), and the fix offered, iconv -f UTF-16, would have garbled it."""
    path = tmp_path / "requests.jsonl"
    records = "" if where == "only" else "".join(good(i) + "\n" for i in range(3))
    path.write_bytes(b"\x00" * 6000 + b"\n" + records.encode())
    result = api.ingest(tmp_path / "case", [path], fmt="openai-split")
    (entry,) = result.manifest["files"]
    assert entry["ingested"] == (0 if where == "only" else 3) and entry["quarantined"] == 1, entry
    (q,) = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert q["source_line"] == 1 and "UTF-16" not in q["reason"]


@pytest.mark.parametrize("compress", [None, "gzip"])
def test_cr_only_line_endings_are_read_as_lines(tmp_path: Path, compress: str | None) -> None:
    # Classic Mac OS files end lines with a bare CR: each record is its own line, blank lines count.
    data = "\r".join([good(1), good(2), "", good(3), "{broken"]).encode() + b"\r"
    path = tmp_path / "requests.jsonl"
    path.write_bytes(gzip.compress(data) if compress else data)
    result = api.ingest(tmp_path / "case", [path])  # sniffed: the first line is a record on its own
    (entry,) = result.manifest["files"]
    assert (entry["lines"], entry["ingested"], entry["blank"], entry["quarantined"]) == (5, 3, 1, 1)
    (q,) = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert q["source_line"] == 5 and q["excerpt"] == "{broken"


@pytest.mark.parametrize("chunk", [1, 2, 7])
def test_line_ends_split_between_read_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    from forensics.ingest import reader

    monkeypatch.setattr(reader, "CHUNK", chunk)  # a CRLF or CR can fall on any chunk boundary
    path = tmp_path / "mixed.txt"
    path.write_bytes(b"a\rbb\r\nccc\n\rdd\r\r")
    assert [line.raw for line in reader.read_lines(path, [])] == [b"a", b"bb", b"ccc", b"", b"dd", b""]
    path.write_bytes(b"a\r\nb\rc\n")  # the first line ends CRLF: LF file, a CR inside a line is content
    assert [line.raw for line in reader.read_lines(path, [])] == [b"a", b"b\rc"]


def test_cr_file_is_not_cut_at_a_stray_lf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import forensics.ingest as ingest_mod

    monkeypatch.setattr(ingest_mod, "SPLIT_BYTES", 2_000)  # big files are parsed in spans cut at LFs
    lines = [good(i) for i in range(60)]
    lines[30] += "\r"  # one CRLF among CRs: a span cut there would number the lines after it wrongly
    lines[50] = "{broken"
    path = tmp_path / "requests.jsonl"
    path.write_bytes(("\r".join(lines) + "\r").encode().replace(b"\r\r", b"\r\n"))
    result = api.ingest(tmp_path / "case", [path])
    (entry,) = result.manifest["files"]
    assert (entry["lines"], entry["ingested"], entry["quarantined"]) == (60, 59, 1)
    (q,) = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert q["source_line"] == 51


@pytest.mark.parametrize("named", [True, False])
def test_a_compressed_file_cut_before_its_first_line_says_so(tmp_path: Path, named: bool) -> None:
    """A .zst cut inside its first block holds no readable line. Before, it read "cannot tell the format"
    (named) or "format not recognised" (in a folder), and --format was the fix offered."""
    data = zstandard.ZstdCompressor().compress("".join(good(i) + "\n" for i in range(10)).encode())
    logs = tmp_path / "logs"
    logs.mkdir()
    path = logs / "cut.jsonl.zst"
    path.write_bytes(data[: len(data) // 2])
    if named:
        with pytest.raises(InputError) as exc:
            api.ingest(tmp_path / "case", [path])
        assert "no line can be read" in str(exc.value) and "--format" not in str(exc.value)
        assert str(exc.value).count("Fix:") == 1 and "lines before were read" not in str(exc.value)
    else:
        (logs / "ok.jsonl").write_text(good(1) + "\n")
        result = api.ingest(tmp_path / "case", [logs])
        statuses = {Path(f["path"]).name: f["status"] for f in result.manifest["files"]}
        assert statuses["cut.jsonl.zst"] == "skipped: damaged before its first line"
        reasons = [q["reason"] for q in pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()]
        assert any("no line can be read" in r for r in reasons), reasons


def test_a_lone_surrogate_escape_becomes_its_text_not_a_lost_record(tmp_path: Path) -> None:
    """JSON allows "\\ud83d" alone (a JavaScript gateway that cut a string between an emoji's two halves
    writes it); UTF-8 cannot hold it. Before, the whole record was quarantined as invalid JSON."""
    line = good(1).replace('"r-1"', '"r-1", "note": "cut \\ud83d"')
    body = json.loads(line)
    body["body"]["messages"][0]["content"] = "question \ud83d"
    text = json.dumps(body)  # json writes the lone surrogate as its escape
    assert "\\ud83d" in text
    entry, quarantine = ingest_lines(tmp_path, [text, json.dumps({**json.loads(good(2)), "tenant_id": "acct-\udc00"})])
    assert (entry["ingested"], entry["quarantined"]) == (2, 0), quarantine
    rows = {r["request_id"]: r for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()}
    assert rows["r-1"]["prompt_text"].endswith("question \\ud83d")
    assert rows["r-2"]["tenant_id"] == "acct-\\udc00"


def test_customer_ids_differing_only_in_a_lone_surrogate_stay_two_customers(tmp_path: Path) -> None:
    """A gateway writes a header's non-UTF-8 bytes as "\\udcXX" escapes: ``caf\\udce9`` and ``caf\\udce8``
    are two customers. Made U+FFFD both, they became one: one packet, and a leak between them read as
    the customer's own text."""
    lines = [json.dumps({**json.loads(good(i)), "tenant_id": "caf" + chr(e)}) for i, e in ((1, 0xDCE9), (2, 0xDCE8))]
    entry, quarantine = ingest_lines(tmp_path, lines)
    assert (entry["ingested"], entry["quarantined"]) == (2, 0), quarantine
    tenants = {r["request_id"]: r["tenant_id"] for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()}
    assert tenants == {"r-1": "caf\\udce9", "r-2": "caf\\udce8"}


def test_a_lone_surrogate_inside_a_json_string_field_is_mended_too(tmp_path: Path) -> None:
    """LiteLLM's callback wrapper can hold its payload as a JSON string: the cut emoji is then an escape
    inside that string, parsed on its own. Before, the record was quarantined ("not valid JSON")."""
    payload = {"id": "chatcmpl-9", "call_type": "acompletion", "startTime": 1787997000.0, "endTime": 1787997005.0,
               "model": "glm-5.3", "model_group": "glm-5.3", "messages": [{"role": "user", "content": "hi \ud83d"}],
               "response": {"choices": [{"index": 0, "message": {"content": "ok"}}]},
               "metadata": {"user_api_key_team_id": "team-a"}}
    inner = json.dumps(payload)
    assert "\\ud83d" in inner
    path = tmp_path / "callbacks.jsonl"
    path.write_text(json.dumps({"event": "success", "standard_logging_object": inner}) + "\n", encoding="utf-8")
    result = api.ingest(tmp_path / "case", [path], fmt="litellm")
    assert result.manifest["files"][0]["ingested"] == 1
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert row["prompt_text"].endswith("hi \\ud83d")


def test_the_surrogate_fallback_reads_numbers_and_bytes_as_orjson_does() -> None:
    """The re-parse after a lone surrogate must accept and refuse what orjson does on the same line: an
    integer beyond 64 bits is a float (it refused it), bytes holding an encoded surrogate are invalid UTF-8
    (it read them)."""
    import orjson

    from forensics.ingest.fields import json_value

    assert json_value('{"a": 18446744073709551616, "b": "\\ud800"}') == {"a": 18446744073709551616.0, "b": "\\ud800"}
    assert orjson.loads('{"a": 18446744073709551616}') == {"a": 18446744073709551616.0}
    with pytest.raises(orjson.JSONDecodeError):
        json_value(b'{"a": "\xed\xa0\xbd"}')
    for bad in ('{"a": NaN, "b": "\\ud800"}', '{"a": 1e400, "b": "\\ud800"}', '{"a": [1,], "b": "\\ud800"}'):
        with pytest.raises(orjson.JSONDecodeError):
            json_value(bad)


LITELLM_GOLDEN = Path(__file__).parent / "golden" / "ingest" / "litellm_payload" / "callbacks.jsonl"


def _as_array(lines: list[str], pretty: bool) -> str:
    objs = [json.loads(line) for line in lines if line.strip()]
    return json.dumps(objs, indent=2) + "\n" if pretty else "[\n" + ",\n".join(json.dumps(o) for o in objs) + "\n]\n"


@pytest.mark.parametrize("fmt", ["litellm", "openai-split"])
def test_a_json_array_named_with_a_json_lines_format_is_one_clear_error(tmp_path: Path, fmt: str) -> None:
    """A JSON array given to a format that reads JSON Lines was read line by line: every element's line
    quarantined as invalid JSON (140 rows for four pretty-printed records), the last element alone taken, exit 0."""
    path = tmp_path / "export.json"
    path.write_text(_as_array([good(i) for i in range(4)], pretty=True), encoding="utf-8")
    with pytest.raises(InputError) as err:
        api.ingest(tmp_path / "case", [path], fmt=fmt)  # type: ignore[arg-type]
    assert "JSON array" in str(err.value) and "jq -c '.[]'" in str(err.value) and "export.json" in str(err.value)


def test_a_json_array_in_a_folder_is_skipped_with_the_command_that_converts_it(tmp_path: Path) -> None:
    """An array written one element per line is sniffed as LiteLLM's: its last element was ingested and the
    others quarantined. Now the file is skipped, with one quarantine row saying how to convert it; the logs
    beside it are read."""
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = LITELLM_GOLDEN.read_text(encoding="utf-8").splitlines()
    (logs / "a.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (logs / "b.json").write_text(_as_array(lines, pretty=False), encoding="utf-8")
    result = api.ingest(tmp_path / "case", [logs])
    files = {Path(f["path"]).name: f for f in result.manifest["files"]}
    assert files["a.jsonl"]["status"] == "ingested" and files["a.jsonl"]["ingested"] > 0
    assert files["b.json"]["status"] == "skipped: a JSON array, not JSON Lines" and files["b.json"]["ingested"] == 0
    q = [r for r in pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist() if r["source_file"].endswith("b.json")]
    assert len(q) == 1 and "jq -c '.[]'" in q[0]["reason"]
    assert any("a JSON array where JSON Lines were expected" in n for n in result.manifest["notes"])


@pytest.mark.parametrize("first", ["[]", '[{"a": 1}, {"b": 2}]'])
def test_a_json_lines_file_whose_first_line_is_a_whole_array_is_read_as_json_lines(tmp_path: Path, first: str) -> None:
    """A first line that is a whole JSON value by itself is a bad record of a JSON Lines file, not an array's
    opening: that line quarantined, the records after it read."""
    entry, q = ingest_lines(tmp_path, [first, good(1), good(2)], fmt="openai-split")
    assert entry["status"] == "ingested" and (entry["quarantined"], entry["ingested"]) == (1, 2) and reconciles(entry)
    assert q[0]["source_line"] == 1


def test_a_compressed_json_array_is_refused_with_a_command_that_reads_it(tmp_path: Path) -> None:
    """The conversion the error names must run on the file as given: jq alone cannot read a .gz file."""
    path = tmp_path / "export.json.gz"
    path.write_bytes(gzip.compress(_as_array([good(i) for i in range(3)], pretty=True).encode()))
    with pytest.raises(InputError) as err:
        api.ingest(tmp_path / "case", [path], fmt="openai-split")
    assert "zcat FILE | jq -c '.[]' > FILE.jsonl" in str(err.value)


def test_the_unread_files_reason_is_its_first_line_set_aside_even_when_set_aside_later(tmp_path: Path) -> None:
    """Damage in a Parquet export's first row group is set aside after the rows of the next: the warning gave a later
    row's missing field, not the damage that left rows 1-10 unread (a fifth review)."""
    import pyarrow as pa  # noqa: PLC0415

    path = tmp_path / "export.parquet"
    table = pa.table({"id": [f"x{i}" for i in range(20)], "note": [f"n{i}" for i in range(20)]})
    pq.write_table(table, path, row_group_size=10, compression="none", use_dictionary=False)
    data = bytearray(path.read_bytes())
    data[4:24] = b"\xff" * 20  # the first row group's first page header
    path.write_bytes(bytes(data))
    (warning,) = [w for w in api.ingest(tmp_path / "case", [path], fmt="langfuse").warnings if "none of its" in w]
    assert "the first line's reason: Parquet row group 1 of 2 (rows 1 to 10) is damaged" in warning


def test_a_request_body_without_stream_was_made_without_streaming(tmp_path: Path) -> None:
    """OpenAI's API defaults ``stream`` to false and its SDKs leave the key out unless streaming: a logged request body
    without it is a call made without streaming (read as unknown, a timed-out call was taken to have delivered its
    answer: a review). A response half of chunks still shows a stream, and no body logged leaves it unknown."""
    from forensics.ingest.fields import stream_flag

    assert [stream_flag(b) for b in ({"messages": []}, {"messages": [], "stream": True}, {"prompt": "x"}, {},
                                     {"messages": [], "stream": "yes"}, None)] == [False, True, False, None, None, None]
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "requests.jsonl").write_text(good(1) + "\n" + good(2) + "\n")
    chunk = {"choices": [{"index": 0, "delta": {"content": "streamed"}}]}
    half = {"timestamp": "2026-08-30T03:12:19Z", "status_code": 200}
    (logs / "responses.jsonl").write_text(json.dumps({**half, "request_id": "r-2", "chunks": [chunk]}) + "\n")
    api.ingest(tmp_path / "case", [logs], fmt="openai-split")
    rows = {r["request_id"]: r for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()}
    assert "stream" not in json.loads(good(1))["body"]
    assert (rows["r-1"]["stream"], rows["r-2"]["stream"]) == (False, True)
