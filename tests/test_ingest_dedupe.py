"""Nothing counted twice, nothing lost: re-ingest, overlapping exports, and reconciliation."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import table_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics import api
from forensics.config import config_from_mapping
from forensics.ingest.formats.sglang import node_of
from forensics.scan import scan


def spend(i: int, tenant: str = "team-a", prompt: str = "hello world", **extra: object) -> str:
    rec = {
        "request_id": f"chatcmpl-{i}", "call_type": "acompletion", "api_key": "k", "spend": 0.0,
        "startTime": f"2026-08-29T10:{i % 60:02d}:00Z", "endTime": f"2026-08-29T10:{i % 60:02d}:05Z",
        "model": "openai/glm-5.3", "model_group": "glm-5.3", "team_id": tenant, "status": "success",
        "proxy_server_request": {"messages": [{"role": "user", "content": prompt}]},
        "response": {"choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]},
        **extra,
    }
    return json.dumps(rec)


def rows(case: Path) -> list[dict]:
    return pq.read_table(case / "exchanges.parquet").to_pylist()


def test_same_file_twice_is_read_once(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text("\n".join(spend(i) for i in range(10)) + "\n")
    case = tmp_path / "case"
    first = api.ingest(case, [path])
    before = (case / "exchanges.parquet").read_bytes()
    second = api.ingest(case, [path, path])
    assert [f["status"] for f in second.run_files] == ["already ingested (same SHA-256)"] * 2
    assert (case / "exchanges.parquet").read_bytes() == before
    assert second.manifest["tables"] == first.manifest["tables"]


def test_overlapping_exports_count_each_request_once(tmp_path: Path) -> None:
    a, b = tmp_path / "week1.jsonl", tmp_path / "week1-2.jsonl"
    a.write_text("\n".join(spend(i) for i in range(0, 10)) + "\n")
    b.write_text("\n".join(spend(i) for i in range(5, 15)) + "\n")
    result = api.ingest(tmp_path / "case", [a, b])
    assert len(rows(tmp_path / "case")) == 15
    by_name = {Path(f["path"]).name: f for f in result.manifest["files"]}
    assert by_name["week1.jsonl"]["duplicate"] + by_name["week1-2.jsonl"]["duplicate"] == 5
    assert result.manifest["reconciled"]


def test_ingest_order_does_not_change_output(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\n".join(spend(i) for i in range(0, 6)) + "\n")
    b.write_text("\n".join(spend(i) for i in range(3, 9)) + "\n")
    api.ingest(tmp_path / "c1", [a, b])
    api.ingest(tmp_path / "c2", [b])
    api.ingest(tmp_path / "c2", [a])
    assert (tmp_path / "c1" / "exchanges.parquet").read_bytes() == (tmp_path / "c2" / "exchanges.parquet").read_bytes()


def test_full_text_wins_over_truncated_spend_log(tmp_path: Path) -> None:
    long_text = "clause " * 3000
    truncated = long_text[:716] + "... (litellm_truncated skipped 17952 chars. Truncation is a DB storage safeguard.) ..." + long_text[-1332:]
    spend_log = tmp_path / "spend.jsonl"
    spend_log.write_text(spend(1, prompt=truncated) + "\n")
    payload = tmp_path / "callbacks.jsonl"
    payload.write_text(json.dumps({
        "id": "chatcmpl-1", "call_type": "acompletion", "startTime": 1787997000.0, "endTime": 1787997005.0,
        "model": "glm-5.3", "model_group": "glm-5.3", "messages": [{"role": "user", "content": long_text}],
        "response": {"choices": [{"index": 0, "message": {"content": "ok"}}]},
        "metadata": {"user_api_key_team_id": "team-a"},
    }) + "\n")
    result = api.ingest(tmp_path / "case", [spend_log, payload])
    (row,) = rows(tmp_path / "case")
    assert row["prompt_truncated"] is False and row["prompt_text"].endswith(long_text)
    assert result.manifest["superseded_variants"] == 1


def test_truncated_prompt_length_is_reconstructed(tmp_path: Path) -> None:
    long_text = "x" * 20000
    truncated = long_text[:716] + "... (litellm_truncated skipped 17952 chars. Truncation is a DB storage safeguard.) ..." + long_text[-1332:]
    path = tmp_path / "spend.jsonl"
    path.write_text(spend(1, prompt=truncated) + "\n")
    api.ingest(tmp_path / "case", [path])
    (row,) = rows(tmp_path / "case")
    assert row["prompt_truncated"] is True
    assert row["prompt_chars"] == len("<|user|>\n") + 20000


def test_same_request_id_from_two_tenants_is_kept_apart(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(spend(1, tenant="team-a") + "\n" + spend(1, tenant="team-b") + "\n")
    result = api.ingest(tmp_path / "case", [path])
    assert sorted(r["tenant_id"] for r in rows(tmp_path / "case")) == ["team-a", "team-b"]
    assert result.manifest["request_id_collisions"] == 1


def test_overlapping_engine_logs_count_events_once(tmp_path: Path) -> None:
    lines = [
        "[2026-08-29 10:00:00 TP0] Decode batch, #running-req: 1",
        "[2026-08-29 10:00:00 TP0] Decode batch, #running-req: 1",  # a genuine repeat in one file
        "[2026-08-29 10:00:01 TP0] Decode batch, #running-req: 2",
    ]
    d1, d2 = tmp_path / "x" / "decode-1_0.log", tmp_path / "y" / "decode-1_0.log"
    for d in (d1, d2):
        d.parent.mkdir()
    d1.write_text("\n".join(lines[:2]) + "\n")
    d2.write_text("\n".join(lines) + "\n")
    result = api.ingest(tmp_path / "case", [d1, d2])
    assert result.manifest["tables"]["engine_events"] == 3
    assert result.manifest["reconciled"]


def test_a_rotated_engine_log_is_its_nodes_log_and_its_overlap_counts_once(tmp_path: Path) -> None:
    # logrotate's copytruncate leaves the last lines of the rotated log at the head of the new one;
    # whatever the rotation suffix, the lines are the node's and the repeated ones count once.
    lines = [f"[2026-08-29 10:00:0{i} TP0] Decode batch, #running-req: {i}" for i in range(6)]
    logs = tmp_path / "engine"
    logs.mkdir()
    with gzip.open(logs / "decode-1_0.log.2.gz", "wt") as fh:
        fh.write("\n".join(lines[:2]) + "\n")
    (logs / "decode-1_0.log-20260829").write_text("\n".join(lines[1:4]) + "\n")
    (logs / "decode-1_0.log.1").write_text("\n".join(lines[3:5]) + "\n")
    (logs / "decode-1_0.log").write_text("\n".join(lines[4:]) + "\n")
    result = api.ingest(tmp_path / "case", [logs])
    events = pq.read_table(tmp_path / "case" / "engine_events.parquet").to_pylist()
    assert sorted(e["message"] for e in events) == lines
    assert {(e["node"], e["rank"], e["role"]) for e in events} == {("decode-1", 0, "decode")}
    assert sum(f["duplicate"] for f in result.manifest["files"]) == 3
    assert result.manifest["reconciled"]


@pytest.mark.parametrize("name", ["10.0.4.12_0.log", "10.0.4.12_0.log.3", "10.0.4.12_0.log.3.gz", "10.0.4.12_0.log-20260827",
                                  "10.0.4.12_0.log-2026082713", "10.0.4.12_0.log.2026-08-27", "10.0.4.12_0.log.2026-08-27_13",
                                  "10.0.4.12_0.log.2026-08-27_13-05", "10.0.4.12_0.log.2026-08-27.zst"])
def test_every_common_rotation_suffix_is_the_nodes_log(name: str) -> None:
    # logrotate (numbered, dateext, hourly) and Python's TimedRotatingFileHandler (daily, hourly, by the minute)
    # each leave the node's older lines under their own suffix: they are still the node's.
    assert node_of(name) == ("10.0.4.12", 0)


def test_a_node_logging_under_timed_rotation_keeps_its_startup_line_and_its_role(tmp_path: Path) -> None:
    """Before, a day's file of Python's TimedRotatingFileHandler (``.log.2026-08-27``) was a node of its own: the
    prefill node's startup line sat under a node with no role, so --ceiling auto took the smaller decode pool
    and a prompt the prefill pool held became a suspect."""
    prompt = " ".join(f"line {i} of the depot ledger" for i in range(250))
    (tmp_path / "spend.jsonl").write_text(spend(1, "acme", prompt, prompt_tokens=1700) + "\n")
    eng = tmp_path / "engine"
    eng.mkdir()
    startup = "[2026-08-27 00:00:05 TP0] max_total_num_tokens={}, chunked_prefill_size=8192, context_len=8192\n"
    stats = ("[2026-08-29 10:01:0{} TP0] ReqTimeStats(rid=chatcmpl-1, bootstrap_room=11, input_len=1700, cached_input_len=0, "
             "output_len={}, type={}): x\n")
    for host, pool, role in (("10.0.4.12", 2000, "prefill"), ("10.0.5.7", 1500, "decode")):
        (eng / f"{host}_0.log.2026-08-27").write_text(startup.format(pool))
        (eng / f"{host}_0.log").write_text(stats.format(1 if role == "prefill" else 3, 0 if role == "prefill" else 50, role))
    case = tmp_path / "case"
    api.ingest(case, [tmp_path / "spend.jsonl", eng])
    cfg = config_from_mapping({"name": "t", "model": "glm-5.3", "window_start": "2026-08-27T00:00:00Z",
                               "window_end": "2026-09-01T00:00:00Z", "real_ceiling_tokens": "auto"}, base=tmp_path)
    result = scan(case, cfg)
    lim = result.record["limits"]["real_ceiling_tokens"]
    assert (lim["value"], lim["nodes_used"], lim["per_node"]) == (2000, "prefill", {"10.0.4.12": [2000], "10.0.5.7": [1500]})
    assert result.suspects == 0


LINE = st.one_of(
    st.integers(0, 40).map(lambda i: ("good", spend(i))),
    st.sampled_from(["", "   ", "\t"]).map(lambda s: ("blank", s)),
    st.text(max_size=30).filter(lambda s: s.strip() and "\n" not in s and "\r" not in s).map(lambda s: ("bad", "{" + s)),
    st.sampled_from(['{"request_id": 5}', '{"id": null}', "[]", "null", '"text"']).map(lambda s: ("bad", s)),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(LINE, max_size=40))
def test_any_mix_of_lines_reconciles(tmp_path_factory, lines) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("mix")
    path = tmp / "spend.jsonl"
    path.write_text("".join(text + "\n" for _, text in lines), encoding="utf-8")
    result = api.ingest(tmp / "case", [path], fmt="litellm")
    (entry,) = result.manifest["files"]
    goods = [text for kind, text in lines if kind == "good"]
    assert entry["lines"] == len(lines)
    assert entry["blank"] == sum(kind == "blank" for kind, _ in lines)
    assert entry["ingested"] == len(set(goods))
    assert entry["duplicate"] == len(goods) - len(set(goods))
    assert entry["quarantined"] == sum(kind == "bad" for kind, _ in lines)
    assert entry["lines"] == entry["ingested"] + entry["quarantined"] + entry["blank"] + entry["duplicate"]
    assert result.manifest["tables"]["exchanges"] == len(set(goods))


def test_parallel_spans_give_the_same_tables(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import forensics.ingest as ingest_mod

    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(spend(i, prompt="lorem ipsum " * (i % 50 + 1)) for i in range(300)) + "\n{bad\n\n")
    api.ingest(tmp_path / "one", [path])
    monkeypatch.setattr(ingest_mod, "SPLIT_BYTES", 20_000)  # many spans
    monkeypatch.setattr(ingest_mod, "PARALLEL_BYTES", 0)  # force the process pool
    result = api.ingest(tmp_path / "many", [path])
    assert len(list((tmp_path / "many" / "staging").glob("*.exchanges.parquet"))) > 3
    for table in ("exchanges.parquet", "quarantine.parquet"):
        assert (tmp_path / "one" / table).read_bytes() == (tmp_path / "many" / table).read_bytes()
    (entry,) = result.manifest["files"]
    assert (entry["lines"], entry["ingested"], entry["quarantined"], entry["blank"]) == (302, 300, 1, 1)


def test_node_role_from_its_type_lines_when_the_name_does_not_tell(tmp_path: Path) -> None:
    log = tmp_path / "gpu-node-7_0.log"
    log.write_text(
        "[2026-08-29 10:01:55 TP0] Request chatcmpl-1 exceeds the maximum number of tokens: 9000 > 8192\n"
        "[2026-08-29 10:01:56 TP0] ReqTimeStats(rid=chatcmpl-1, bootstrap_room=7, input_len=1, cached_input_len=0, output_len=0, type=prefill): x\n"
    )
    # A node whose lines show two roles, and one whose lines show none, keep no role.
    mixed = tmp_path / "gpu-node-8_0.log"
    mixed.write_text(
        "[2026-08-29 10:02:55 TP0] ReqTimeStats(rid=chatcmpl-2, bootstrap_room=8, input_len=1, cached_input_len=0, output_len=0, type=prefill): x\n"
        "[2026-08-29 10:02:56 TP0] ReqTimeStats(rid=chatcmpl-2, bootstrap_room=8, input_len=1, cached_input_len=0, output_len=9, type=decode): x\n"
        "[2026-08-29 10:02:57 TP0] Request chatcmpl-4 exceeds the maximum number of tokens: 9000 > 8192\n"
    )
    silent = tmp_path / "gpu-node-9_0.log"
    silent.write_text("[2026-08-29 10:03:55 TP0] Request chatcmpl-3 exceeds the maximum number of tokens: 9000 > 8192\n")
    api.ingest(tmp_path / "case", [log, mixed, silent])
    events = pq.read_table(tmp_path / "case" / "engine_events.parquet").to_pylist()
    assert [(e["node"], e["role"]) for e in events] == [
        ("gpu-node-7", "prefill"), ("gpu-node-7", "prefill"),
        ("gpu-node-8", "prefill"), ("gpu-node-8", "decode"), ("gpu-node-8", None), ("gpu-node-9", None)]


def test_a_grown_log_ingested_again_under_its_name_replaces_its_earlier_copy(tmp_path: Path) -> None:
    """A live log ingested, then ingested again once it grew (as a note on a growing log advises): the
    earlier copy is the start of the complete one, so the complete one replaces it, every row is the
    complete file's and the manifest lists each name once. Before, both copies stayed in the case: rows of
    the earlier one under a SHA-256 the file no longer has, so every report of the case failed verify.
    (Earlier still, which copy was kept was left to DuckDB's sort: three runs, three tables.)"""
    import hashlib

    day = Path(__file__).resolve().parent.parent / "sample_logs" / "gateway" / "litellm-callbacks-2026-08-27.jsonl"
    lines = [x for x in day.read_bytes().splitlines(keepends=True) if x.strip()]
    tables = []
    live = tmp_path / "live"  # the same log, named the same, each time
    for attempt in range(3):
        live.mkdir()
        for i, name in enumerate("abcd"):
            (live / f"{name}.jsonl").write_bytes(b"".join(lines[6 * i : 6 * i + 4]))
        case = tmp_path / f"case{attempt}"
        api.ingest(case, [live])
        first = {name: hashlib.sha256((live / f"{name}.jsonl").read_bytes()).hexdigest() for name in "abcd"}
        for i, name in enumerate("abcd"):
            (live / f"{name}.jsonl").write_bytes(b"".join(lines[6 * i : 6 * i + 6]))
        grown = {name: hashlib.sha256((live / f"{name}.jsonl").read_bytes()).hexdigest() for name in "abcd"}
        result = api.ingest(case, [live])
        assert result.manifest.reconciled
        rows = table_rows(case / "exchanges.parquet")
        assert len(rows) == 4 * 6 and {r["source_sha256"] for r in rows} == set(grown.values())
        assert sorted(f["sha256"] for f in result.manifest["files"]) == sorted(grown.values())
        assert not set(first.values()) & {f["sha256"] for f in result.manifest["files"]}
        assert any("grew since" in n for n in result.manifest["history"])
        tables.append((case / "exchanges.parquet").read_bytes())
        for path in live.iterdir():
            path.unlink()
        live.rmdir()
    assert tables[0] == tables[1] == tables[2]


def test_copies_of_a_request_on_one_line_of_a_json_array_give_one_row(tmp_path: Path) -> None:
    """A minified JSON array holds several records on one line, each numbered by that line: the finaliser
    kept rows by file and line, so the copy ranked a duplicate was written too (6 rows for 4 requests while
    the manifest counted 2 duplicates and said reconciled)."""
    from forensics.config import load_case_file

    golden = Path(__file__).resolve().parent / "golden" / "ingest" / "mapped_json_array" / "case.toml"
    (tmp_path / "case.toml").write_text(golden.read_text(encoding="utf-8").replace('path = "export.json"', 'path = "data"'),
                                        encoding="utf-8")
    data = tmp_path / "data"
    data.mkdir()

    def record(i: int, text: str) -> dict:
        return {"id": f"a-{i}", "tenant": {"name": "t-north"}, "created": "2026-08-29T09:00:00Z", "model": "glm-5.3",
                "input": "p", "output": {"text": text}, "tokens": {"prompt": 2, "completion": 1}}

    (data / "a.json").write_text(json.dumps([record(1, "x"), record(1, "x"), record(2, "y")]) + "\n", encoding="utf-8")
    (data / "b.json").write_text(json.dumps([record(3, "z")]) + "\n", encoding="utf-8")
    (data / "c.json").write_text(json.dumps([record(1, "x"), record(4, "w")]) + "\n", encoding="utf-8")
    result = api.ingest(tmp_path / "case", [data], fmt="mapped", config=load_case_file(tmp_path / "case.toml"))
    ids = sorted(r["request_id"] for r in table_rows(tmp_path / "case" / "exchanges.parquet"))
    assert ids == ["a-1", "a-2", "a-3", "a-4"]
    assert result.manifest.tables.exchanges == 4 and result.manifest.duplicate_requests == 2
    assert result.manifest.reconciled


def test_one_customer_reusing_a_request_id_for_another_request_is_named_in_the_notes(tmp_path: Path) -> None:
    """A client that supplies its own ids sent "chatcmpl-7" twice, forty minutes apart, with different
    prompts. One row per (request id, customer) is kept, so the other request's text is not searched.
    Before, it was counted as a duplicate and nothing said so: a leak in it vanished and the run reported
    nobody to notify. "chatcmpl-8" was logged twice at the same start with different prompts: a client fanning
    out requests under one id, or one request logged again with other text. It is not called reused, but its
    other copy's text is not searched either, and a note of its own names it (before, nothing did)."""
    path = tmp_path / "a.jsonl"
    later = {"startTime": "2026-08-29T10:47:00Z", "endTime": "2026-08-29T10:47:05Z"}
    path.write_text(spend(7, prompt="first question") + "\n" + spend(7, prompt="an unrelated second request", **later)
                    + "\n" + spend(8) + "\n" + spend(8, prompt="hello world, logged again with other text") + "\n")
    result = api.ingest(tmp_path / "case", [path])
    (entry,) = result.manifest["files"]
    assert (entry["ingested"], entry["duplicate"]) == (2, 2)
    (note,) = [n for n in result.manifest["notes"] if "reused" in n]
    assert note.startswith("1 request id was reused by one customer for different requests") and "chatcmpl-7" in note
    assert "chatcmpl-8" not in note
    (other,) = [n for n in result.manifest["notes"] if "holding different prompts" in n]
    assert other.startswith("1 request id had copies received within 1 s") and "chatcmpl-8" in other
    assert "chatcmpl-7" not in other


def test_one_request_attributed_to_two_customers_by_different_fields_is_named_in_the_notes(tmp_path: Path) -> None:
    """The spend-log row names its team (team_id set, organization_id empty, the org only in metadata); the
    callback payload of the same request names only the org, in metadata. The tenant rule takes the first
    field set, so one request became two customers', and the customer's own text read as another's. Ingest
    cannot tell which field is right; it says so, with the fix."""
    path = tmp_path / "a.jsonl"
    row = json.loads(spend(5, tenant="team-acme-prod"))
    row.update(organization_id="", metadata={"user_api_key_org_id": "org-acme"})
    callback = {"id": "chatcmpl-5", "call_type": "acompletion", "startTime": row["startTime"], "endTime": row["endTime"],
                "model": "glm-5.3", "model_group": "glm-5.3", "messages": [{"role": "user", "content": "hello world"}],
                "response": {"choices": [{"index": 0, "message": {"content": "ok"}}]},
                "metadata": {"user_api_key_org_id": "org-acme"}}
    path.write_text(json.dumps(row) + "\n" + json.dumps(callback) + "\n" + spend(6, tenant="team-b") + "\n"
                    + spend(6, tenant="team-c", startTime="2026-08-29T11:30:00Z") + "\n")
    result = api.ingest(tmp_path / "case", [path])
    assert sorted((r["request_id"], r["tenant_id"]) for r in rows(tmp_path / "case")) == [
        ("chatcmpl-5", "org-acme"), ("chatcmpl-5", "team-acme-prod"), ("chatcmpl-6", "team-b"), ("chatcmpl-6", "team-c")]
    (note,) = [n for n in result.manifest["notes"] if "same start time" in n]
    assert note.startswith("1 of them") and "tenant_field" in note and "chatcmpl-5" in note and "chatcmpl-6" not in note


def test_a_log_rewritten_under_its_name_keeps_both_copies(tmp_path: Path) -> None:
    """Content that is not the start of the new file (a rotated or rewritten log) is other evidence: both
    copies stay in the case."""
    live = tmp_path / "live"
    live.mkdir()
    (live / "a.jsonl").write_text(spend(1) + "\n" + spend(2) + "\n")
    api.ingest(tmp_path / "case", [live])
    (live / "a.jsonl").write_text(spend(3) + "\n" + spend(4) + "\n")
    result = api.ingest(tmp_path / "case", [live])
    assert len(result.manifest["files"]) == 2 and len(rows(tmp_path / "case")) == 4


def _spend_and_split(folder: Path, spend_prompt: str, split_prompt: str | None, answer: str = "ok",
                     split_answer: str | None = "ok", split_time: str = "2026-08-30T03:12:09Z",
                     answer_time: str = "2026-08-30T03:12:19Z") -> None:
    """One request (chatcmpl-77 of acme) in a LiteLLM spend log and in split request/response logs (a
    half left out when its text is None)."""
    folder.mkdir()
    spend = {"request_id": "chatcmpl-77", "call_type": "acompletion", "api_key": "88dc", "startTime": "2026-08-30T03:12:09.0",
             "endTime": "2026-08-30T03:12:19.0", "model": "openai/glm-5.3", "model_group": "glm-5.3",
             "organization_id": "acme", "team_id": "", "status": "success", "messages": {},
             "proxy_server_request": {"model": "glm-5.3", "messages": [{"role": "user", "content": spend_prompt}]},
             "response": {"id": "chatcmpl-77", "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                                                            "finish_reason": "stop"}]}, "metadata": {}}
    (folder / "spend.jsonl").write_text(json.dumps(spend) + "\n")
    if split_prompt is not None:
        (folder / "requests.jsonl").write_text(json.dumps({
            "request_id": "chatcmpl-77", "timestamp": split_time, "tenant_id": "acme",
            "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": split_prompt}]}}) + "\n")
    if split_answer is not None:
        (folder / "responses.jsonl").write_text(json.dumps({
            "request_id": "chatcmpl-77", "timestamp": answer_time, "status_code": 200,
            "body": {"choices": [{"index": 0, "message": {"role": "assistant", "content": split_answer}}]}}) + "\n")


def test_a_request_in_a_spend_log_and_in_split_logs_is_one_row_the_complete_copy(tmp_path: Path) -> None:
    """The spend log kept the prompt's head and tail only; the split logs kept it whole. Both were kept as
    two rows of one request (counted twice by the scan, one of them marked as a truncated copy). The
    complete copy wins, as it does among copies of one kind; the other's line is a duplicate."""
    full = "CONFIDENTIAL " + "lorem ipsum dolor " * 400
    head, tail = full[:716], full[-1332:]
    cut = head + f"... (litellm_truncated skipped {len(full) - len(head) - len(tail)} chars. Truncation is a DB storage safeguard.) ..." + tail
    _spend_and_split(tmp_path / "logs", cut, full)
    result = api.ingest(tmp_path / "case", [tmp_path / "logs"])
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert [(r["request_id"], r["tenant_id"], r["record_kind"], r["prompt_truncated"], r["damage"]) for r in rows] == [
        ("chatcmpl-77", "acme", "split", False, None)]
    assert rows[0]["prompt_text"].endswith(full) and rows[0]["response_text"] == "ok"
    duplicates = {Path(f["path"]).name: f["duplicate"] for f in result.manifest["files"]}
    assert duplicates == {"spend.jsonl": 1, "requests.jsonl": 0, "responses.jsonl": 0}


def test_a_request_in_a_spend_log_and_in_split_logs_equally_complete_is_the_split_pair(tmp_path: Path) -> None:
    """Equally complete, the kinds' precedence decides (payload over split over spend log): the split pair."""
    _spend_and_split(tmp_path / "logs", "the same short question", "the same short question")
    result = api.ingest(tmp_path / "case", [tmp_path / "logs"])
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert [(r["record_kind"], r["prompt_truncated"]) for r in rows] == [("split", False)]
    duplicates = {Path(f["path"]).name: f["duplicate"] for f in result.manifest["files"]}
    assert duplicates == {"spend.jsonl": 1, "requests.jsonl": 0, "responses.jsonl": 0}


def _cut(full: str) -> str:
    head, tail = full[:716], full[-1332:]
    return head + f"... (litellm_truncated skipped {len(full) - len(head) - len(tail)} chars. Truncation is a DB storage safeguard.) ..." + tail


def test_a_whole_record_and_a_split_pair_that_each_hold_what_the_other_lacks_are_both_kept(tmp_path: Path) -> None:
    """The spend log holds the prompt cut and the only answer (another customer's secret in it); the split
    logs hold the full prompt and no answer. The pair won on its prompt and the answer was lost with the
    spend row: the leak vanished. Neither holds everything, so both are kept, as before the contest."""
    full = "CONFIDENTIAL " + "lorem ipsum dolor " * 400
    _spend_and_split(tmp_path / "logs", _cut(full), full, answer="globex secret: vault code 7741-ALPHA", split_answer=None)
    api.ingest(tmp_path / "case", [tmp_path / "logs"])
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert sorted((r["record_kind"], r["response_text"]) for r in rows) == [
        ("spend_log", "globex secret: vault code 7741-ALPHA"), ("split", None)]


def test_a_split_pair_hours_from_the_whole_record_with_its_id_is_named_as_a_reused_id(tmp_path: Path) -> None:
    """acme's req chatcmpl-77 at 03:12 in the spend log and at 05:00 in the split logs, other prompts: two
    requests under one id. One is kept, as for copies of one kind, and the note names the id (it had been
    counted as a duplicate without a word)."""
    _spend_and_split(tmp_path / "logs", "the first question", "a later, other question", split_time="2026-08-30T05:00:00Z")
    result = api.ingest(tmp_path / "case", [tmp_path / "logs"])
    assert len(pq.read_table(tmp_path / "case" / "exchanges.parquet")) == 1
    assert any("reused by one customer" in n and "chatcmpl-77" in n for n in result.manifest["notes"])


def test_a_whole_record_and_its_lone_response_half_are_one_row(tmp_path: Path) -> None:
    """The request line of the split logs is missing; its response half has the spend log's answer. It was
    kept as a second row, a response naming no customer, though only acme's records hold the id."""
    _spend_and_split(tmp_path / "logs", "the same short question", None)
    result = api.ingest(tmp_path / "case", [tmp_path / "logs"])
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert [(r["tenant_id"], r["record_kind"], r["orphan"]) for r in rows] == [("acme", "spend_log", None)]
    duplicates = {Path(f["path"]).name: f["duplicate"] for f in result.manifest["files"]}
    assert duplicates == {"spend.jsonl": 0, "responses.jsonl": 1}


def test_a_lone_response_half_never_takes_the_place_of_the_record_naming_the_customer(tmp_path: Path) -> None:
    """A spend log written without prompts holds acme's answer; the split logs hold the same answer's
    response half and no request half. The half outranked the spend row (split over spend log) and was
    kept, naming no customer: acme dropped off the list. A lone half may lose, never win."""
    _spend_and_split(tmp_path / "logs", "", None)
    spend = tmp_path / "logs" / "spend.jsonl"
    record = json.loads(spend.read_text())
    record["proxy_server_request"] = {}  # no prompt stored
    spend.write_text(json.dumps(record) + "\n")
    api.ingest(tmp_path / "case", [tmp_path / "logs"])
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert [(r["tenant_id"], r["record_kind"]) for r in rows if r["tenant_id"] == "acme"] == [("acme", "spend_log")]


def test_a_lone_response_half_hours_from_the_whole_record_is_another_request_and_is_kept(tmp_path: Path) -> None:
    """A split response half with no request half, answered hours after acme's spend-log record with the same
    id, is another request's answer: it lost to the record as a copy and vanished without a note."""
    _spend_and_split(tmp_path / "logs", "the same short question", None, split_answer="another answer, later",
                     answer_time="2026-08-30T09:40:00Z")
    result = api.ingest(tmp_path / "case", [tmp_path / "logs"])
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert sorted((r["tenant_id"] or "", r["response_text"]) for r in rows) == [
        ("", "another answer, later"), ("acme", "ok")]
    assert {Path(f["path"]).name: f["duplicate"] for f in result.manifest["files"]} == {"spend.jsonl": 0, "responses.jsonl": 0}


@pytest.mark.parametrize("answer, answer_time, rows", [
    ("ok", "2026-08-30T03:15:19Z", [("acme", "ok")]),  # the same answer, exported minutes late: a copy
    ("a different answer", "2026-08-30T03:12:19Z", [("", "a different answer"), ("acme", "ok")]),  # same second
])
def test_a_lone_response_half_is_a_copy_only_of_the_same_answer(tmp_path: Path, answer: str, answer_time: str,
                                                                rows: list[tuple[str, str]]) -> None:
    """Told by time alone, the same answer logged minutes late was a second row (one request counted twice),
    and a different answer in the same second was dropped as a copy. The answers are compared."""
    _spend_and_split(tmp_path / "logs", "the same short question", None, split_answer=answer, answer_time=answer_time)
    result = api.ingest(tmp_path / "case", [tmp_path / "logs"])
    got = sorted((r["tenant_id"] or "", r["response_text"]) for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist())
    assert got == rows
    duplicates = {Path(f["path"]).name: f["duplicate"] for f in result.manifest["files"]}
    assert duplicates == {"spend.jsonl": 0, "responses.jsonl": 1 if len(rows) == 1 else 0}


_MAPPED_CASE = """name = "mapped"
model = "glm-5.3"
window_start = "2026-01-01T00:00:00Z"
window_end = "2027-01-01T00:00:00Z"
real_ceiling_tokens = 100000

[[inputs]]
format = "mapped"
path = "gw.json"
time_format = "epoch_ms"

[inputs.fields]
request_id = "meta.rid"
tenant_id = "account.org"
received_at = "ts_start"
completed_at = "ts_end"
model = "req.model"
prompt_messages = "req.messages"
response_text = "resp.choices.0.message.content"
status = "http_status"

[[inputs]]
path = "responses.jsonl"
"""


@pytest.mark.parametrize("half_answer, rows", [
    ("answer one", [("r-1", "acme", "answer one"), ("r-2", "acme", "answer two")]),
    ("answer two", [("r-1", "", "answer two"), ("r-1", "acme", "answer one"), ("r-2", "acme", "answer two")]),
])
def test_a_lone_half_is_compared_with_its_own_records_answer_when_records_share_a_line(
        tmp_path: Path, half_answer: str, rows: list[tuple[str, str, str]]) -> None:
    """Two whole records on one line (a minified JSON array): r-1's answer was looked up by file and line
    alone and read as r-2's, so a copy of r-1's answer was kept twice and r-2's text under r-1's id dropped."""
    from forensics.config import load_case_file

    t0 = 1787990000000
    whole = [{"meta": {"rid": rid}, "account": {"org": "acme"}, "ts_start": t0 + i * 1000, "ts_end": t0 + i * 1000 + 500,
              "req": {"model": "glm-5.3", "messages": [{"role": "user", "content": f"question {rid}"}]},
              "resp": {"choices": [{"message": {"content": answer}, "finish_reason": "stop"}]}, "http_status": 200}
             for i, (rid, answer) in enumerate((("r-1", "answer one"), ("r-2", "answer two")))]
    (tmp_path / "gw.json").write_text(json.dumps(whole))  # one line
    (tmp_path / "responses.jsonl").write_text(json.dumps({
        "request_id": "r-1", "timestamp": t0 + 500, "status_code": 200,
        "body": {"choices": [{"index": 0, "message": {"role": "assistant", "content": half_answer}}]}}) + "\n")
    (tmp_path / "case.toml").write_text(_MAPPED_CASE)
    cfg = load_case_file(tmp_path / "case.toml")
    api.ingest(tmp_path / "case", [cfg.inputs[1].path], config=cfg)
    api.ingest(tmp_path / "case", [cfg.inputs[0].path], fmt="mapped", config=cfg, profile=cfg.inputs[0].profile)
    got = sorted((r["request_id"], r["tenant_id"] or "", r["response_text"])
                 for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist())
    assert got == rows


def _spend_without_answer(folder: Path) -> None:
    spend = folder / "spend.jsonl"
    record = json.loads(spend.read_text())
    record["response"] = {}  # the callback lost the answer; the spend log kept the prompt
    spend.write_text(json.dumps(record) + "\n")


def test_a_whole_record_that_lost_its_answer_takes_it_from_the_lone_split_response_half(tmp_path: Path) -> None:
    """The spend log holds acme's full prompt and no answer; the split response log holds the answer and no
    request half is there. Both were kept: the spend row with no answer (searched with no text, so the
    customers its answer exposed were missed) and the answer as a response naming no customer."""
    _spend_and_split(tmp_path / "logs", "the long question", None, split_answer="globex secret: vault code 7741-ALPHA")
    _spend_without_answer(tmp_path / "logs")
    result = api.ingest(tmp_path / "case", [tmp_path / "logs"])
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert [(r["tenant_id"], r["record_kind"], r["orphan"], r["response_text"]) for r in rows] == [
        ("acme", "spend_log", None, "globex secret: vault code 7741-ALPHA")]
    (row,) = rows
    assert row["prompt_text"].endswith("the long question")
    assert Path(row["response_source_file"]).name == "responses.jsonl" and row["response_source_line"] == 1
    assert row["status_code"] == 200
    files = {Path(f["path"]).name: (f["ingested"], f["duplicate"], f["reconciled"]) for f in result.manifest["files"]}
    assert files == {"spend.jsonl": (1, 0, True), "responses.jsonl": (1, 0, True)}  # the half is part of the row
    assert any("took it from the split response log" in n for n in result.manifest["notes"])


@pytest.mark.parametrize("answer_time", ["2026-08-30T09:40:00Z", "2026-08-30T03:10:00Z"])
def test_a_lone_response_half_answered_hours_after_or_before_the_record_does_not_fill_it(tmp_path: Path,
                                                                                         answer_time: str) -> None:
    """Another request under the same id (hours later), or an answer before the request began: not this
    record's answer, so both are kept as they were."""
    _spend_and_split(tmp_path / "logs", "the long question", None, split_answer="another answer", answer_time=answer_time)
    _spend_without_answer(tmp_path / "logs")
    api.ingest(tmp_path / "case", [tmp_path / "logs"])
    got = sorted((r["tenant_id"] or "", r["response_text"]) for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist())
    assert got == [("", "another answer"), ("acme", None)]


def test_an_answer_a_shared_id_cannot_place_fills_no_record(tmp_path: Path) -> None:
    """Two customers' whole records under one id, neither with an answer: a response half names no customer,
    so its answer is given to neither."""
    _spend_and_split(tmp_path / "logs", "the long question", None, split_answer="whose answer?")
    _spend_without_answer(tmp_path / "logs")
    spend = tmp_path / "logs" / "spend.jsonl"
    other = json.loads(spend.read_text())
    other["organization_id"] = "globex"
    spend.write_text(spend.read_text() + json.dumps(other) + "\n")
    api.ingest(tmp_path / "case", [tmp_path / "logs"])
    got = sorted((r["tenant_id"] or "", r["response_text"]) for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist())
    assert got == [("", "whose answer?"), ("acme", None), ("globex", None)]


def _resp_line(rid: str, answer: str, ts: str) -> str:
    return json.dumps({"request_id": rid, "timestamp": ts, "status_code": 200,
                       "body": {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]}})


def test_answers_spread_over_several_replicas_logs_are_read_once_each(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Answers of records that lost theirs, spread round robin over four gateway replicas' response logs: read
    in the records' order, each answer decoded a whole staged file again (4,000 fills took 13 s, not 0.5 s)."""
    import forensics.ingest as ingest_module
    import forensics.ingest.finalize as fin

    monkeypatch.setattr(ingest_module, "SMALL_FILE_BYTES", 0)  # each replica's log staged on its own, as big logs are
    logs = tmp_path / "logs"
    spend_rows, replicas = [], [[] for _ in range(4)]
    for i in range(120):
        start = f"2026-08-30T03:{i // 60:02d}:{i % 60:02d}"
        row = json.loads(spend(i, startTime=start + ".0", endTime=start + ".0"))
        row["response"] = {}
        spend_rows.append(json.dumps(row))
        replicas[i % 4].append(_resp_line(row["request_id"], f"answer {i}", start + "Z"))
    logs.mkdir()
    (logs / "spend.jsonl").write_text("\n".join(spend_rows) + "\n")
    for k, lines in enumerate(replicas):
        (logs / f"replica{k}").mkdir()
        (logs / f"replica{k}" / "responses.jsonl").write_text("\n".join(lines) + "\n")
    decoded: list[Path] = []
    real = fin.pq.read_table

    def read_table(path: Any, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("columns"):
            decoded.append(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(fin.pq, "read_table", read_table)
    api.ingest(tmp_path / "case", [logs])
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert len(rows) == 120 and all(r["response_text"] == f"answer {int(r['request_id'].split('-')[1])}" for r in rows)
    assert len(decoded) <= 8, decoded  # each replica's staged file about once, not once per answer


def test_an_answer_for_an_id_the_customer_reused_fills_no_record(tmp_path: Path) -> None:
    """acme sent id X at 03:00 and again at 03:30, both answers lost; the half answered at 03:30 was the second
    request's, but it filled the first (kept) row, whose prompt was then searched with another answer."""
    _spend_and_split(tmp_path / "logs", "the first question", None, split_answer="answer to the second",
                     answer_time="2026-08-30T03:42:19Z")
    _spend_without_answer(tmp_path / "logs")
    spend_file = tmp_path / "logs" / "spend.jsonl"
    second = json.loads(spend_file.read_text())
    second.update(startTime="2026-08-30T03:42:09.0", endTime="2026-08-30T03:42:19.0")
    second["proxy_server_request"]["messages"][0]["content"] = "the second question"
    spend_file.write_text(spend_file.read_text() + json.dumps(second) + "\n")
    result = api.ingest(tmp_path / "case", [tmp_path / "logs"])
    got = sorted((r["tenant_id"] or "", r["response_text"]) for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist())
    assert got == [("", "answer to the second"), ("acme", None)]
    assert any("reused by one customer" in n for n in result.manifest["notes"])


def test_an_answer_minutes_from_the_records_own_completion_fills_nothing(tmp_path: Path) -> None:
    """The record says it completed at 03:12:19; an answer logged at 03:40 is another request's."""
    _spend_and_split(tmp_path / "logs", "the question", None, split_answer="a later answer",
                     answer_time="2026-08-30T03:40:00Z")
    _spend_without_answer(tmp_path / "logs")
    api.ingest(tmp_path / "case", [tmp_path / "logs"])
    got = sorted((r["tenant_id"] or "", r["response_text"]) for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist())
    assert got == [("", "a later answer"), ("acme", None)]


def test_no_answer_is_filled_while_split_request_lines_name_no_customer(tmp_path: Path) -> None:
    """A split request line naming no customer was quarantined; its response half, with the same id as
    globex's record that lost its answer, was given to globex: a recipient of text it may never have received."""
    _spend_and_split(tmp_path / "logs", "the question", None, split_answer="whose answer?")
    _spend_without_answer(tmp_path / "logs")
    (tmp_path / "logs" / "requests.jsonl").write_text(json.dumps({
        "request_id": "chatcmpl-77", "timestamp": "2026-08-30T03:12:09Z",
        "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": "another prompt"}]}}) + "\n")
    result = api.ingest(tmp_path / "case", [tmp_path / "logs"])
    got = sorted((r["tenant_id"] or "", r["response_text"]) for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist())
    assert got == [("", "whose answer?"), ("acme", None)]
    assert any("name no customer were quarantined" in n for n in result.manifest["notes"])


def test_the_decode_nodes_text_fills_no_row_of_a_request_another_row_of_which_holds_its_answer(tmp_path: Path) -> None:
    """The spend log holds the answer, the split log the whole prompt and none: both rows are kept. The decode node's
    text overwrote both, the leaked answer with it (a review): a request with an answer in any row takes none."""
    full = "CONFIDENTIAL " + "lorem ipsum dolor " * 400
    _spend_and_split(tmp_path / "logs", _cut(full), full, answer="globex secret: vault code 7741-ALPHA", split_answer=None)
    finished = {"timestamp": "2026-08-30T03:12:19.000000", "event": "request.finished", "rid": "chatcmpl-77",
                "obj": {"rid": "chatcmpl-77", "bootstrap_room": 11, "stream": False},
                "out": {"text": "ENGINE TEXT", "meta_info": {"id": "chatcmpl-77", "finish_reason": {"type": "stop"},
                                                             "prompt_tokens": 1, "completion_tokens": 3}}}
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "decode-0_0.log").write_text(json.dumps(finished) + "\n")
    api.ingest(tmp_path / "case", [tmp_path / "logs"])
    result = api.ingest(tmp_path / "case", [tmp_path / "engine"], fmt="sglang")
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert sorted((r["record_kind"], r["response_text"] or "") for r in rows) == [
        ("spend_log", "globex secret: vault code 7741-ALPHA"), ("split", "")]
    assert not any("took the text the decode node logged" in n for n in result.manifest["notes"])
