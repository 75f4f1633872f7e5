"""format = "mapped": any JSON Lines, JSON array, CSV or Parquet log read through a case file's
[inputs.fields] profile, and `forensics profile suggest` guessing a starting profile."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import tomllib
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from forensics import api
from forensics.cli import main
from forensics.config import CaseConfig, config_from_mapping, load_case_file
from forensics.errors import ConfigError, InputError
from forensics.ingest.profile import suggest

HEADER = """name = "mapped"
model = "glm-5.3"
window_start = "2026-01-01T00:00:00Z"
window_end = "2027-01-01T00:00:00Z"
real_ceiling_tokens = 100000
"""

UTC = dt.UTC


def case_file(folder: Path, inputs: str) -> CaseConfig:
    """A case file in ``folder`` with the [[inputs]] block given, loaded."""
    path = folder / "case.toml"
    path.write_text(HEADER + inputs, encoding="utf-8")
    return load_case_file(path)


def ingest(tmp_path: Path, cfg: CaseConfig, case: str = "case") -> Any:
    spec = cfg.inputs[0]
    return api.ingest(tmp_path / case, [spec.path], fmt="mapped", config=cfg, profile=spec.profile)


def rows(tmp_path: Path, table: str = "exchanges", case: str = "case") -> list[dict[str, Any]]:
    return pq.read_table(tmp_path / case / f"{table}.parquet").to_pylist()


def jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def record(n: int, **extra: Any) -> dict[str, Any]:
    """A home-made gateway's record: nested, with a list and a JSON-string column."""
    rec: dict[str, Any] = {
        "meta": {"rid": f"r-{n}"},
        "account": {"org": f"org-{n % 2}", "key_hash": f"kh-{n}"},
        "ts_start": 1787990000000 + n * 1000,  # epoch milliseconds
        "ts_end": 1787990000000 + n * 1000 + 500,
        "req": {"model": "glm-5.3", "messages": [{"role": "user", "content": f"question {n}"}]},
        "resp": {"choices": [{"message": {"content": f"answer {n}"}, "finish_reason": "stop"}]},
        "usage": {"in": 7 + n, "out": 3},
        "http_status": 200,
    }
    rec.update(extra)
    return rec


PROFILE = """
[[inputs]]
format = "mapped"
path = "{path}"
time_format = "epoch_ms"

[inputs.fields]
request_id = "meta.rid"
tenant_id = ["account.org", "account.key_hash"]
received_at = "ts_start"
completed_at = "ts_end"
model = "req.model"
prompt_messages = "req.messages"
response_text = "resp.choices.0.message.content"
prompt_tokens = "usage.in"
completion_tokens = "usage.out"
status = "http_status"
"""


# ---- containers and paths ---------------------------------------------------------------------


def test_json_lines_nested_paths_list_indexes_and_tenant_fallbacks(tmp_path: Path) -> None:
    third = record(3)
    third["account"] = {"org": "", "key_hash": "kh-3"}  # no org: the fallback names the customer
    jsonl(tmp_path / "gw.jsonl", [record(1), record(2), third])
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl"))
    result = ingest(tmp_path, cfg)
    assert result.run_files[0]["format"] == "mapped" and result.run_files[0]["ingested"] == 3
    got = {r["request_id"]: r for r in rows(tmp_path)}
    assert [got[f"r-{n}"]["tenant_id"] for n in (1, 2, 3)] == ["org-1", "org-0", "kh-3"]
    assert got["r-3"]["tenant_field"] == "account.key_hash" and got["r-1"]["tenant_field"] == "account.org"
    r1 = got["r-1"]
    assert r1["prompt_text"] == "<|user|>\nquestion 1" and r1["response_text"] == "answer 1"
    assert r1["received_at"] == dt.datetime(2026, 8, 29, 7, 53, 21, tzinfo=UTC)
    assert r1["completed_at"] - r1["received_at"] == dt.timedelta(milliseconds=500)
    assert (r1["reported_prompt_tokens"], r1["completion_tokens"], r1["status"], r1["status_code"]) == (8, 3, "success", 200)
    assert r1["source_format"] == "mapped" and r1["record_kind"] == "mapped_row" and r1["problems"] is None
    assert rows(tmp_path, "quarantine") == []


def test_json_array_records_keep_the_line_they_start_on(tmp_path: Path) -> None:
    text = json.dumps([record(1), record(2)], indent=2)
    # A third element broken in the middle: one quarantined record, the others read.
    text = text.rstrip()[:-1].rstrip() + ',\n  {"meta": {"rid": "r-3"}, "ts_start": }\n]\n'
    (tmp_path / "gw.json").write_text(text, encoding="utf-8")
    cfg = case_file(tmp_path, PROFILE.format(path="gw.json"))
    ingest(tmp_path, cfg)
    got = {r["request_id"]: r["source_line"] for r in rows(tmp_path)}
    lines = text.splitlines()
    assert got == {"r-1": 2, "r-2": lines.index("  {", 2) + 1}
    [bad] = rows(tmp_path, "quarantine")
    assert bad["source_line"] == len(lines) - 1 and "invalid JSON" in bad["reason"]


def test_an_empty_json_array_element_is_quarantined_saying_so(tmp_path: Path) -> None:
    text = "[\n" + json.dumps(record(1)) + ",\n ,\n" + json.dumps(record(2)) + "\n]\n"
    (tmp_path / "gw.json").write_text(text, encoding="utf-8")
    ingest(tmp_path, case_file(tmp_path, PROFILE.format(path="gw.json")))
    assert sorted(r["request_id"] for r in rows(tmp_path)) == ["r-1", "r-2"]
    [bad] = rows(tmp_path, "quarantine")
    assert bad["excerpt"] == '"(an empty element)"'


def test_an_unclosed_json_array_reads_what_is_complete_and_says_the_rest_is_missing(tmp_path: Path) -> None:
    text = json.dumps([record(1), record(2)], indent=1)
    (tmp_path / "gw.json").write_text(text[: text.rindex("}")], encoding="utf-8")  # cut inside the second record
    cfg = case_file(tmp_path, PROFILE.format(path="gw.json"))
    result = ingest(tmp_path, cfg)
    assert [r["request_id"] for r in rows(tmp_path)] == ["r-1"]
    reasons = [q["reason"] for q in rows(tmp_path, "quarantine")]
    assert any("not closed" in r for r in reasons), reasons
    assert result.manifest["files"][0]["reconciled"]


@pytest.mark.parametrize("indent", [None, 2])
def test_a_json_array_element_cut_inside_a_string_costs_that_element_only(tmp_path: Path, indent: int | None) -> None:
    """An element cut short inside a string (a torn write) paired its quotes with the next elements': eight
    records after it were neither read nor counted, and the file problem said the array was not closed."""
    texts = [json.dumps(record(n), indent=indent) for n in range(1, 13)]
    texts[4] = texts[4][: texts[4].index("question 5") + 4]  # cut inside the question
    text = "[\n" + ",\n".join(texts) + "\n]\n"
    (tmp_path / "gw.json").write_text(text, encoding="utf-8")
    result = ingest(tmp_path, case_file(tmp_path, PROFILE.format(path="gw.json")))
    assert sorted(int(r["request_id"][2:]) for r in rows(tmp_path)) == [n for n in range(1, 13) if n != 5]
    [bad] = rows(tmp_path, "quarantine")
    assert bad["source_line"] == text[: text.index(texts[4])].count("\n") + 1 and "invalid JSON" in bad["reason"]
    entry = result.manifest["files"][0]
    assert entry["reconciled"] and not entry["problems"]


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("damage", ["brackets_missing", "stray_brackets"])
def test_a_json_array_whose_brackets_are_out_of_step_costs_only_the_damage(tmp_path: Path, indent: int | None, damage: str) -> None:
    """Torn between two strings (every string whole, closing brackets lost) or with stray closing brackets after an
    element: the elements after it were swallowed into one broken element, or quarantined as text after the end of
    the array. Now the records go on at the next line that starts an element."""
    texts = [json.dumps(record(n), indent=indent) for n in range(1, 9)]
    if damage == "brackets_missing":
        texts[3] = texts[3][: texts[3].rindex('"stop"') + len('"stop"')]  # its last brackets lost
    else:
        texts[3] = texts[3] + "}]}"
    text = "[\n" + ",\n".join(texts) + "\n]\n"
    (tmp_path / "gw.json").write_text(text, encoding="utf-8")
    result = ingest(tmp_path, case_file(tmp_path, PROFILE.format(path="gw.json")))
    kept = [n for n in range(1, 9) if damage == "stray_brackets" or n != 4]
    assert sorted(int(r["request_id"][2:]) for r in rows(tmp_path)) == kept
    [bad] = rows(tmp_path, "quarantine")
    assert bad["source_line"] == text[: text.index(texts[3])].count("\n") + 1 + (texts[3].count("\n") if damage == "stray_brackets" else 0)
    entry = result.manifest["files"][0]
    assert entry["reconciled"] and entry["quarantined"] == 1 and not entry["problems"], entry


def test_json_lines_appended_after_a_json_array_are_said_to_be_unread_not_taken_for_its_elements(tmp_path: Path) -> None:
    """JSON Lines after a whole array are no stray brackets: read as the array's elements, the last was lost with a
    note saying the array was cut short. They are left unread, one problem row saying so, as before the resync."""
    text = json.dumps([record(1), record(2)], indent=2) + "\n" + json.dumps(record(3)) + "\n" + json.dumps(record(4)) + "\n"
    (tmp_path / "gw.json").write_text(text, encoding="utf-8")
    result = ingest(tmp_path, case_file(tmp_path, PROFILE.format(path="gw.json")))
    assert sorted(r["request_id"] for r in rows(tmp_path)) == ["r-1", "r-2"]
    (entry,) = result.manifest["files"]
    assert any("text follows the end of the JSON array" in p for p in entry["problems"]), entry["problems"]


#: A mapped CSV export's [[inputs]] entry (gw.csv: id, org, when, body, answer), its fields table open for more keys.
CSV_INPUT = """
[[inputs]]
format = "mapped"
path = "gw.csv"
time_format = "%d/%m/%Y %H:%M:%S"
[inputs.fields]
request_id = "id"
tenant_id = "org"
received_at = "when"
prompt_messages = "body.messages"
response_text = "answer"
"""


def test_csv_with_a_json_string_column_a_quoted_line_break_and_a_strftime_time(tmp_path: Path) -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "line one\nline two, \"quoted\""}]})
    (tmp_path / "gw.csv").write_text(
        "id,org,when,body,answer,tokens\n"
        f'c-1,acme,29/08/2026 10:00:05,"{body.replace(chr(34), chr(34) * 2)}","Yes,\nsure",12\n'
        'c-2,beta,29/08/2026 11:00:00,"{""messages"": []}",,\n', encoding="utf-8")
    cfg = case_file(tmp_path, 'timezone = "Europe/Berlin"\n' + CSV_INPUT + 'model = ["model", "id"]\nprompt_tokens = "tokens"\n')
    ingest(tmp_path, cfg)
    got = {r["request_id"]: r for r in rows(tmp_path)}
    c1 = got["c-1"]
    assert c1["prompt_text"] == '<|user|>\nline one\nline two, "quoted"' and c1["response_text"] == "Yes,\nsure"
    # No zone in the pattern: the case's zone (CEST, +02:00) is assumed and recorded.
    assert c1["received_at"] == dt.datetime(2026, 8, 29, 8, 0, 5, tzinfo=UTC) and c1["zone_assumed"] == "Europe/Berlin"
    assert c1["reported_prompt_tokens"] == 12 and c1["source_line"] == 2
    c2 = got["c-2"]  # an empty messages list and no answer: kept, with the gaps noted
    assert c2["prompt_text"] is None and c2["response_text"] is None and c2["source_line"] == 4
    assert "response_text: no value" not in (c2["problems"] or "")  # the column is there, only empty


def test_parquet_with_nested_columns_and_timestamps(tmp_path: Path) -> None:
    table = pa.table({
        "rid": ["p-1", "p-2"],
        "tenant": [{"id": "t-a"}, {"id": "t-b"}],
        "at": pa.array([dt.datetime(2026, 8, 29, 10, tzinfo=UTC), dt.datetime(2026, 8, 29, 11, tzinfo=UTC)],
                       pa.timestamp("us", tz="UTC")),
        "request": [{"model": "glm-5.3", "prompt": "hello"}, {"model": "glm-5.3", "prompt": "bye"}],
        "output": [["first", "second"], ["only"]],
        "n_in": pa.array([5, None], pa.int64()),
    })
    pq.write_table(table, tmp_path / "export.parquet")
    cfg = case_file(tmp_path, """
[[inputs]]
format = "mapped"
path = "export.parquet"
[inputs.fields]
request_id = "rid"
tenant_id = "tenant.id"
received_at = "at"
model = "request.model"
prompt_text = "request.prompt"
response_text = "output.1"
prompt_tokens = "n_in"
""")
    ingest(tmp_path, cfg)
    got = {r["request_id"]: r for r in rows(tmp_path)}
    assert got["p-1"]["tenant_id"] == "t-a" and got["p-1"]["prompt_text"] == "hello"
    assert got["p-1"]["response_text"] == "second" and got["p-1"]["reported_prompt_tokens"] == 5
    assert got["p-1"]["received_at"] == dt.datetime(2026, 8, 29, 10, tzinfo=UTC) and got["p-1"]["zone_assumed"] is None
    assert got["p-2"]["response_text"] is None and "response_text: no value" in got["p-2"]["problems"]
    assert [got[k]["source_line"] for k in ("p-1", "p-2")] == [1, 2]  # rows


def test_a_parquet_value_python_cannot_hold_costs_its_row_only(tmp_path: Path) -> None:
    # A timestamp past the year 9999 (damage, or a placeholder) cannot become a Python value.
    table = pa.table({"rid": ["p-1", "p-2"], "org": ["a", "b"], "at": ["2026-08-29T10:00:00Z"] * 2, "text": ["q", "q"],
                      "other": pa.array([1, 300_000_000_000_000], pa.timestamp("ms"))})
    pq.write_table(table, tmp_path / "export.parquet")
    cfg = case_file(tmp_path, """
[[inputs]]
format = "mapped"
path = "export.parquet"
[inputs.fields]
request_id = "rid"
tenant_id = "org"
received_at = "at"
model = "rid"
prompt_text = "text"
response_text = "text"
""")
    result = ingest(tmp_path, cfg)
    assert [r["request_id"] for r in rows(tmp_path)] == ["p-1"]
    [bad] = rows(tmp_path, "quarantine")
    assert bad["source_line"] == 2 and "Parquet row 2: column 'other' cannot be read (OverflowError" in bad["reason"]
    assert result.manifest["files"][0]["reconciled"]


@pytest.mark.parametrize(("time_format", "value", "expected"), [
    ("epoch_s", 1787990400.25, dt.datetime(2026, 8, 29, 8, 0, 0, 250000, tzinfo=UTC)),
    ("epoch_s", "1787990400", dt.datetime(2026, 8, 29, 8, 0, tzinfo=UTC)),
    ("epoch_us", 1787990400000001, dt.datetime(2026, 8, 29, 8, 0, 0, 1, tzinfo=UTC)),
    ("iso", "2026-08-29T02:40:00+02:00", dt.datetime(2026, 8, 29, 0, 40, tzinfo=UTC)),
    ("auto", 1787990400000, dt.datetime(2026, 8, 29, 8, 0, tzinfo=UTC)),
    ("%Y%m%d-%H%M%S%z", "20260829-024000+0000", dt.datetime(2026, 8, 29, 2, 40, tzinfo=UTC)),
])
def test_time_formats(tmp_path: Path, time_format: str, value: Any, expected: dt.datetime) -> None:
    jsonl(tmp_path / "gw.jsonl", [record(1, ts_start=value, ts_end=None)])
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl").replace('"epoch_ms"', json.dumps(time_format)))
    ingest(tmp_path, cfg)
    [row] = rows(tmp_path)
    assert row["received_at"] == expected and row["completed_at"] is None


def test_a_time_in_another_format_than_declared_is_quarantined_naming_the_key(tmp_path: Path) -> None:
    jsonl(tmp_path / "gw.jsonl", [record(1), record(2, ts_start="2026-08-29T10:00:00Z")])
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl"))
    ingest(tmp_path, cfg)
    [bad] = rows(tmp_path, "quarantine")
    assert bad["source_line"] == 2
    assert bad["reason"].startswith("profile key received_at ('ts_start'): '2026-08-29T10:00:00Z' is not an epoch number")
    assert "gw.jsonl line 2" in bad["reason"] and "Fix: set time_format" in bad["reason"]


# ---- bad records ------------------------------------------------------------------------------


def test_records_missing_a_required_value_or_of_the_wrong_type_are_quarantined_naming_key_and_record(tmp_path: Path) -> None:
    no_id = record(2)
    del no_id["meta"]["rid"]
    no_tenant = record(3, account={})
    wrong_type = record(4, resp={"choices": [{"message": {"content": 42}}]})
    bad_messages = record(5, req={"model": "glm-5.3", "messages": {"role": "user"}})
    no_model = record(6, req={"messages": [{"role": "user", "content": "q"}]})
    jsonl(tmp_path / "gw.jsonl", [record(1), no_id, no_tenant, wrong_type, bad_messages, no_model])
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl"))
    result = ingest(tmp_path, cfg)
    reasons = {q["source_line"]: q["reason"] for q in rows(tmp_path, "quarantine")}
    assert set(reasons) == {2, 3, 4, 5}
    assert reasons[2].startswith("profile key request_id ('meta.rid'): no value in the record at gw.jsonl line 2. Fix:")
    assert reasons[3].startswith("profile key tenant_id ('account.org' or 'account.key_hash'): no value")
    assert "profile key response_text" in reasons[4] and "int" in reasons[4]
    assert reasons[5].startswith("profile key prompt_messages ('req.messages'): a dict, expected a list of messages")
    assert result.manifest["files"][0]["no_tenant"] == 1
    kept = {r["request_id"]: r for r in rows(tmp_path)}
    assert set(kept) == {"r-1", "r-6"}  # nothing silently dropped: every line is a row or a quarantine row
    assert kept["r-6"]["model"] is None and kept["r-6"]["problems"] == "model: no value at 'req.model'; left null"


def test_a_failed_call_is_kept_with_its_status(tmp_path: Path) -> None:
    failed = record(2, http_status=503, resp={"error": {"message": "overloaded"}})
    jsonl(tmp_path / "gw.jsonl", [failed, record(3, http_status=-1, resp=None)])
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl").replace('"resp.choices.0.message.content"',
                                                                       '["resp.choices.0.message.content", "resp"]'))
    ingest(tmp_path, cfg)
    got = {r["request_id"]: r for r in rows(tmp_path)}
    assert (got["r-2"]["status"], got["r-2"]["status_code"], got["r-2"]["response_text"]) == ("failure", 503, None)
    assert (got["r-3"]["status"], got["r-3"]["status_code"]) == ("failure", None)
    # An absent optional value is no problem to note (a present, unusable one is).
    assert got["r-2"]["problems"] is None


def test_an_absent_token_count_is_null_and_an_unusable_one_noted(tmp_path: Path) -> None:
    jsonl(tmp_path / "gw.jsonl", [record(1, usage={"out": 2}), record(2, usage={"in": "n/a", "out": 2})])
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl"))
    ingest(tmp_path, cfg)
    got = {r["request_id"]: r for r in rows(tmp_path)}
    assert got["r-1"]["reported_prompt_tokens"] is None and got["r-1"]["problems"] is None
    assert got["r-2"]["problems"] == "prompt_tokens = 'n/a' is not a whole number; ignored"


# ---- the profile itself -----------------------------------------------------------------------


def _mapping(fields: dict[str, Any], **entry: Any) -> dict[str, Any]:
    data = tomllib.loads(HEADER)
    data["inputs"] = [{"path": "gw.jsonl", "format": "mapped", "fields": fields, **entry}]
    return data


GOOD = {"request_id": "id", "tenant_id": "org", "received_at": "t", "model": "m", "prompt_text": "p",
        "response_text": "r"}


@pytest.mark.parametrize(("fields", "entry", "message"), [
    ({**GOOD, "tenant": "org"}, {}, "unknown key 'tenant' in [inputs.fields] of inputs[0]: it names no canonical column"),
    ({k: v for k, v in GOOD.items() if k != "tenant_id"}, {}, "does not map the required key tenant_id"),
    ({k: v for k, v in GOOD.items() if k != "prompt_text"}, {}, "required key prompt_messages or prompt_text"),
    ({**GOOD, "model": 3}, {}, "[inputs.fields] model of inputs[0] = 3 is not a path"),
    ({**GOOD, "model": []}, {}, "[inputs.fields] model of inputs[0] is an empty list"),
    ({**GOOD, "model": "req..model"}, {}, "has an empty part"),
    (GOOD, {"time_format": "epoch_minutes"}, "inputs[0].time_format = 'epoch_minutes' is not a time format"),
    (GOOD, {"format": "litellm"}, "inputs[0] has [inputs.fields] but format = 'litellm'"),
])
def test_profile_errors_name_the_key(tmp_path: Path, fields: dict[str, Any], entry: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        config_from_mapping(_mapping(fields, **entry), base=tmp_path)
    assert message in str(info.value)


def test_mapped_without_a_profile_is_an_error(tmp_path: Path) -> None:
    data = tomllib.loads(HEADER)
    data["inputs"] = [{"path": "gw.jsonl", "format": "mapped"}]
    with pytest.raises(ConfigError, match=r"format = \"mapped\" but no \[inputs.fields\] table"):
        config_from_mapping(data, base=tmp_path)
    jsonl(tmp_path / "gw.jsonl", [record(1)])
    with pytest.raises(ConfigError, match="format mapped needs a mapping profile"):
        api.ingest(tmp_path / "case", [tmp_path / "gw.jsonl"], fmt="mapped")
    assert not (tmp_path / "case" / "exchanges.parquet").exists()


def test_a_path_that_resolves_in_no_record_is_an_error_before_any_work(tmp_path: Path) -> None:
    jsonl(tmp_path / "gw.jsonl", [record(1), record(2)])
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl").replace('"meta.rid"', '"meta.ride"'))
    with pytest.raises(ConfigError) as info:
        ingest(tmp_path, cfg)
    text = str(info.value)
    assert "[inputs.fields] request_id = 'meta.ride' resolves in none of the 2 records of this file" in text
    assert "did you mean" in text and "'meta.rid'" in text and "gw.jsonl" in text
    assert not (tmp_path / "case" / "exchanges.parquet").exists()
    # An optional key too, when the records read are the whole file.
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl").replace('"usage.out"', '"usage.output"'))
    with pytest.raises(ConfigError, match="completion_tokens = 'usage.output' resolves in none"):
        ingest(tmp_path, cfg)


def test_the_profile_is_kept_in_the_case_config_and_the_cli_ingest_finds_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    jsonl(tmp_path / "gw.jsonl", [record(1)])
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl"))
    saved = cfg.to_json()
    assert saved["values"]["inputs"][0]["fields"]["tenant_id"] == ["account.org", "account.key_hash"]
    assert CaseConfig.from_json(json.loads(json.dumps(saved))).inputs[0].profile == cfg.inputs[0].profile
    with pytest.raises(SystemExit) as done:
        main(["ingest", str(tmp_path / "gw.jsonl"), "--case", str(tmp_path / "cli"), "--format", "mapped",
              "--config", str(tmp_path / "case.toml"), "--json"])
    assert done.value.code == 0
    assert json.loads(capsys.readouterr().out)["files"][0]["ingested"] == 1


def test_a_file_ingested_through_another_profile_is_not_skipped_as_already_ingested(tmp_path: Path) -> None:
    jsonl(tmp_path / "gw.jsonl", [record(1)])
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl"))
    ingest(tmp_path, cfg)
    assert ingest(tmp_path, cfg).run_files[0]["status"].startswith("already ingested")  # the same profile: skipped
    fixed = case_file(tmp_path, PROFILE.format(path="gw.jsonl").replace('"req.model"', '["req.model", "model"]'))
    with pytest.raises(ConfigError, match="ingested into the case before, through another mapping profile"):
        ingest(tmp_path, fixed)
    assert [r["request_id"] for r in rows(tmp_path)] == ["r-1"]


def test_same_input_same_bytes(tmp_path: Path) -> None:
    jsonl(tmp_path / "gw.jsonl", [record(n) for n in range(5)])
    cfg = case_file(tmp_path, PROFILE.format(path="gw.jsonl"))
    ingest(tmp_path, cfg, "a")
    ingest(tmp_path, cfg, "b")
    assert (tmp_path / "a" / "exchanges.parquet").read_bytes() == (tmp_path / "b" / "exchanges.parquet").read_bytes()


# ---- profile suggest: the guess, pasted into a case file, reads what the native format reads ----

COLUMNS = ["request_id", "tenant_id", "prompt_text", "response_text", "received_at", "completed_at",
           "reported_prompt_tokens", "reported_completion_tokens", "prompt_tokens", "completion_tokens", "status",
           "model", "stream"]


def helicone_like(path: Path) -> Path:
    """Helicone export rows: JSON-string bodies, one streamed answer with its usage in the chunks."""
    def row(n: int, stream: bool = False) -> dict[str, Any]:
        request = {"model": "glm-5.3", "stream": stream, "messages": [{"role": "system", "content": "Be brief."},
                                                                        {"role": "user", "content": f"Question {n}?"}]}
        if stream:
            response: dict[str, Any] = {"streamed_data": [
                {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "Str"}}]},
                {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "eamed"},
                                                                  "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 20, "completion_tokens": 2}}]}
        else:
            response = {"object": "chat.completion", "choices": [{"index": 0, "message": {"content": f"Answer {n}."},
                                                                   "finish_reason": "stop"}]}
        return {"request_id": f"h-{n}", "request_created_at": f"2026-08-29T10:0{n}:00.125Z",
                "response_created_at": f"2026-08-29T10:0{n}:02Z", "status": 200,
                "prompt_tokens": None if stream else 10 + n, "completion_tokens": None if stream else 3,
                "model": "glm-5.3", "organization_id": f"org-{n % 3}", "user_id": f"u-{n}",
                "request_body": json.dumps(request), "response_body": json.dumps(response)}
    return jsonl(path, [row(1), row(2, stream=True), row(3), {**row(4), "status": 500, "response_body": "{\"error\": {}}"}])


def litellm_like(path: Path) -> Path:
    """LiteLLM StandardLoggingPayload objects: epoch seconds, messages, a ChatCompletion or chunks."""
    def payload(n: int, stream: bool = False) -> dict[str, Any]:
        response: Any = {"choices": [{"index": 0, "message": {"content": f"Reply {n}"}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 30 + n, "completion_tokens": 2}}
        if stream:
            response = [{"choices": [{"index": 0, "delta": {"content": "Go"}}]},
                        {"choices": [{"index": 0, "delta": {"content": "od"}, "finish_reason": "stop"}]}]
        return {"id": f"chatcmpl-{n}", "trace_id": f"t{n}", "call_type": "acompletion", "status": "success",
                "startTime": 1787997000.25 + n, "endTime": 1787997004.75 + n, "model": "openai/glm-5.3",
                "model_group": "glm-5.3", "messages": [{"role": "user", "content": f"Prompt {n}"}],
                "response": response, "prompt_tokens": 30 + n, "completion_tokens": 2, "stream": stream,
                "metadata": {"user_api_key_org_id": f"org-{n % 2}", "user_api_key_team_id": f"team-{n}"}}
    return jsonl(path, [payload(1), payload(2, stream=True), payload(3), {**payload(4), "status": "failure", "response": {}}])


def helicone_csv(path: Path) -> Path:
    """Helicone's golden CSV export: quoted JSON bodies with line breaks, a streamed and a cut-short body."""
    path.write_bytes((Path(__file__).parent / "golden" / "ingest" / "helicone_csv" / "export.csv").read_bytes())
    return path


@pytest.mark.parametrize(("native", "write", "name", "count"), [
    ("helicone", helicone_like, "export.jsonl", 4), ("litellm", litellm_like, "export.jsonl", 4),
    ("helicone", helicone_csv, "export.csv", 5),
])
def test_the_suggested_profile_reads_what_the_native_format_reads(tmp_path: Path, native: str, write: Any, name: str,
                                                                  count: int) -> None:
    write(tmp_path / name)
    guessed = suggest(tmp_path / name)
    assert "UNCERTAIN: which field names the CUSTOMER?" in guessed.toml  # the tenant is always for the analyst to confirm
    cfg = case_file(tmp_path, guessed.toml.replace(str(tmp_path / name), name))
    ingest(tmp_path, cfg, "mapped")
    api.ingest(tmp_path / "native", [tmp_path / name], fmt=native)
    columns = [*COLUMNS, "response_truncated"]
    mapped = pq.read_table(tmp_path / "mapped" / "exchanges.parquet", columns=columns).sort_by("request_id").to_pylist()
    direct = pq.read_table(tmp_path / "native" / "exchanges.parquet", columns=columns).sort_by("request_id").to_pylist()
    assert len(mapped) == count and mapped == direct


def test_suggest_lists_fields_with_escaped_examples_and_prints_toml_that_loads(tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    hostile = {"id": "x-1", "org\x1b[2J": "acme", "created": "2026-08-29T10:00:00Z", "prompt": "say \x1b]52;hi",
               "output": "ok", "model": "m"}
    jsonl(tmp_path / "odd.jsonl", [hostile])
    with pytest.raises(SystemExit) as done:
        main(["profile", "suggest", str(tmp_path / "odd.jsonl")])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "\x1b" not in out
    assert "say \\x1b]52;hi" in out  # the example, escaped
    block = out[out.index("[[inputs]]"):]
    data = tomllib.loads(HEADER + block)
    assert data["inputs"][0]["fields"]["prompt_text"] == "prompt"
    assert data["inputs"][0]["fields"]["response_text"] == "output"
    with pytest.raises(SystemExit):
        main(["profile", "suggest", str(tmp_path / "odd.jsonl"), "--records", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["records"] == 1 and {f["path"] for f in report["fields"]} >= {"id", "org\x1b[2J", "created"}
    assert report["guess"]["request_id"]["paths"] == ["id"] and report["toml"].endswith(block)
    with pytest.raises(SystemExit) as done:
        main(["profile", "suggest", str(tmp_path / "odd.jsonl"), "-q"])
    assert done.value.code == 0 and capsys.readouterr() == ("", "")
    with pytest.raises(SystemExit) as done:
        main(["profile", "suggest", str(tmp_path / "odd.jsonl"), "--records", "0"])
    assert done.value.code == 2 and "--records 0 reads nothing" in capsys.readouterr().err


def test_suggest_on_a_file_it_cannot_read_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty.jsonl").write_text("\n\n", encoding="utf-8")
    with pytest.raises(SystemExit) as done:
        main(["profile", "suggest", str(tmp_path / "empty.jsonl")])
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.startswith("error: ") and "Traceback" not in err


def test_suggest_reads_csv_and_parquet_and_json_arrays(tmp_path: Path) -> None:
    records = [record(1), record(2)]
    (tmp_path / "a.json").write_text(json.dumps(records, indent=2), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist([orjson.loads(orjson.dumps(r)) for r in records]), tmp_path / "a.parquet")
    (tmp_path / "a.csv").write_text("rid,org,ts_start,prompt,output\nr-1,acme,1787990000,hi,yo\n", encoding="utf-8")
    for name, kind in (("a.json", "json-array"), ("a.parquet", "parquet"), ("a.csv", "csv")):
        s = suggest(tmp_path / name)
        assert s.container == kind and s.records == (1 if kind == "csv" else 2)
    s = suggest(tmp_path / "a.json")
    fields = dict((g.key, g.paths) for g in s.guesses)
    assert fields["prompt_messages"] == ["req.messages"] and fields["tenant_id"][0] == "account.org"
    assert fields["received_at"] == ["ts_start"] and fields["completion_tokens"] == ["usage.out"]


def test_the_profile_keys_and_time_formats_are_the_settings_tables() -> None:
    from forensics import config, settings

    assert config.PROFILE_KEYS == tuple(s.key for s in settings.section("inputs.fields"))
    assert set(config.PROFILE_REQUIRED) | set(config.PROFILE_PROMPT_KEYS) <= set(config.PROFILE_KEYS)
    assert config.TIME_FORMATS == settings.get("inputs", "time_format").choices
    assert "## [inputs.fields]" in settings.markdown() and "| `tenant_id` | a dotted path" in settings.markdown()


def test_run_ingests_each_mapped_entry_with_its_own_profile(tmp_path: Path) -> None:
    jsonl(tmp_path / "a.jsonl", [record(1), record(2)])
    jsonl(tmp_path / "b.jsonl", [{"id": "b-1", "org": "org-b", "at": "2026-08-29T10:00:00Z", "model": "glm-5.3",
                                  "prompt": "hello", "answer": "hi"}])
    other = """
[[inputs]]
format = "mapped"
path = "b.jsonl"
[inputs.fields]
request_id = "id"
tenant_id = "org"
received_at = "at"
model = "model"
prompt_text = "prompt"
response_text = "answer"
"""
    case_file(tmp_path, PROFILE.format(path="a.jsonl") + other)
    result = api.run(tmp_path / "case.toml", tmp_path / "out")
    got = pq.read_table(result.case_dir / "exchanges.parquet", columns=["request_id", "tenant_id", "response_text"]).to_pylist()
    assert sorted((r["request_id"], r["tenant_id"], r["response_text"]) for r in got) == [
        ("b-1", "org-b", "hi"), ("r-1", "org-1", "answer 1"), ("r-2", "org-0", "answer 2")]


def test_a_report_of_a_mapped_input_verifies_by_a_rerun(tmp_path: Path) -> None:
    jsonl(tmp_path / "a.jsonl", [record(1), record(2)])
    case_file(tmp_path, PROFILE.format(path="a.jsonl"))
    result = api.run(tmp_path / "case.toml", tmp_path / "out")
    checked = api.verify(result.case_dir.parent, rerun=True)
    assert checked.rerun and checked.drift == []


SIMPLE = """
[[inputs]]
format = "mapped"
path = "{path}"
[inputs.fields]
request_id = "id"
tenant_id = "org"
received_at = "at"
model = "m"
prompt_text = "p"
response_text = "a"
"""


def _simple(n: int) -> dict[str, Any]:
    return {"id": f"r{n}", "org": "o", "at": "2026-08-29T10:00:00Z", "m": "x", "p": "hi", "a": "yo"}


def _cut_parquet(path: Path) -> None:
    pq.write_table(pa.Table.from_pylist([_simple(n) for n in range(20)]), path)
    path.write_bytes(path.read_bytes()[:300])


@pytest.mark.parametrize(("name", "write", "ingested", "reason"), [
    ("scalars.json", lambda p: p.write_bytes(b"[" + json.dumps(_simple(1)).encode() + b', 42, "s", null]'), 1,
     "line is a JSON int, expected an object"),
    ("bad.json", lambda p: p.write_bytes(b"[" + json.dumps(_simple(1)).encode() + b',\n{"id": "r2\xff"}]'), 1,
     "line is not valid UTF-8"),
    ("cut.parquet", _cut_parquet, 0, "Parquet file is damaged or cut short before any row could be read"),
    ("open.json", lambda p: p.write_bytes(b"["), 0, "the JSON array is not closed"),
])
def test_bad_input_is_quarantined_with_a_reason_and_counts_reconcile(tmp_path: Path, name: str, write: Any, ingested: int,
                                                                      reason: str) -> None:
    write(tmp_path / name)
    result = ingest(tmp_path, case_file(tmp_path, SIMPLE.format(path=name)))
    entry = result.manifest["files"][0]
    assert entry["reconciled"] and entry["ingested"] == ingested
    assert reason in rows(tmp_path, "quarantine")[0]["reason"]


def test_suggest_says_which_records_it_could_not_read(tmp_path: Path) -> None:
    # A sample that silently skipped broken lines would describe a file that is not the one ingest reads.
    log = tmp_path / "gateway.jsonl"
    log.write_bytes(b'{"rid": "r1", "org": "acme"}\n{"rid": \n\xff\xfe not text\n{"rid": "r2", "org": "bolt"}\n')
    result = suggest(log)
    assert result.records == 2 and [n for n, _ in result.unreadable] == [2, 3]
    assert "invalid JSON" in result.unreadable[0][1] and result.to_json()["unreadable"][0]["line"] == 2
    only_bad = tmp_path / "bad.jsonl"
    only_bad.write_bytes(b'{"rid": "r1", "org": "\x1b[31m"}\n')
    with pytest.raises(InputError, match=r"no JSON object or CSV record found in the first records \(line 1: invalid JSON"):
        suggest(only_bad)


def test_a_mapped_parquet_file_is_read_one_row_group_and_a_few_rows_at_a_time(
        tmp_path: Path, parquet_reads: list[tuple[int, list[int] | None]]) -> None:
    # Read 1,024 rows at a time over every row group at once, megabyte prompts made memory grow with
    # the file; mapped reads Parquet through the same reader as langfuse (forensics.ingest.parquet).
    from forensics.ingest import parquet
    from forensics.ingest.formats.mapped import read_records

    calls = parquet_reads
    pq.write_table(pa.Table.from_pylist([_simple(n) for n in range(100)]), tmp_path / "export.parquet", row_group_size=30)
    lines = list(read_records(tmp_path / "export.parquet", []))
    assert [json.loads(line.text or "")["id"] for line in lines] == [f"r{n}" for n in range(100)]
    assert calls == [(parquet.BATCH_ROWS, [g]) for g in range(4)]


@pytest.mark.parametrize("digits", ["9" * 5000, "-" + "9" * 5000, "1" + "0" * 40])
def test_an_epoch_of_thousands_of_digits_is_out_of_range_not_an_internal_error(digits: str) -> None:
    """int() refuses strings of more than 4,300 digits: the record was quarantined by the catch-all, with a
    ValueError's text ("use sys.set_int_max_str_digits()") as its reason."""
    from forensics.ingest.formats.mapped import parse_time
    from forensics.ingest.timeparse import TimeError

    with pytest.raises(TimeError, match="1970"):
        parse_time(digits, "epoch_s", "UTC")


@pytest.mark.parametrize("row_end", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_csv_line_breaks_inside_a_quoted_field_are_kept_as_written(tmp_path: Path, row_end: str) -> None:
    """A quoted field's line breaks are the customer's text: a CRLF or CR inside it was stored as LF, so the
    stored answer (and every offset an evidence packet gives into it) differed from the export's bytes."""
    answer = "Yes,\r\nsure\nthen\rdone\r\n"
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator=row_end)
    writer.writerow(["id", "org", "when", "body", "answer"])
    writer.writerow(["c-1", "acme", "29/08/2026 10:00:05", json.dumps({"messages": [{"role": "user", "content": "hi"}]}),
                     answer])
    writer.writerow(["c-2", "beta", "29/08/2026 11:00:00", "{}", "plain"])
    (tmp_path / "gw.csv").write_bytes(out.getvalue().encode("utf-8"))
    cfg = case_file(tmp_path, CSV_INPUT + 'model = "id"\n')
    result = ingest(tmp_path, cfg)
    entry = result.manifest["files"][0]
    assert entry["reconciled"] and (entry["ingested"], entry["quarantined"]) == (2, 0)
    got = {r["request_id"]: r for r in rows(tmp_path)}
    assert got["c-1"]["response_text"] == answer and got["c-1"]["source_line"] == 2
    assert got["c-2"]["response_text"] == "plain"


def test_a_file_named_on_the_command_line_finds_its_profile_through_a_glob_input(tmp_path: Path) -> None:
    """`forensics ingest --format mapped --config CASE.toml FILE` looks for the [[inputs]] entry that holds FILE:
    one whose path is a glob pattern (`logs/*.jsonl`, as `forensics run` expands it) held none, so the command
    refused a file the case file's run reads."""
    logs = tmp_path / "logs"
    logs.mkdir()
    path = jsonl(logs / "gw-1.jsonl", [record(1), record(2)])
    cfg = case_file(tmp_path, PROFILE.format(path="logs/*.jsonl"))
    result = api.ingest(tmp_path / "case", [path], fmt="mapped", config=cfg)
    assert result.manifest["files"][0]["ingested"] == 2
    with pytest.raises(ConfigError, match="no \\[\\[inputs\\]\\] entry"):
        api.ingest(tmp_path / "case2", [jsonl(tmp_path / "other.jsonl", [record(3)])], fmt="mapped", config=cfg)


def test_a_time_format_that_fits_no_record_stops_the_run_naming_the_profile(tmp_path: Path) -> None:
    """time_format = "%Y-%m-%d" over records timed 2026-08-28T10:00:00 quarantined every record, and the run
    stopped saying the case file's inputs held none of the files the case ingested, "as if it were another
    incident's case file" (a review): nothing named time_format."""
    jsonl(tmp_path / "a.jsonl", [record(1, ts_start="2026-08-28T10:00:00"), record(2, ts_start="2026-08-28T10:00:01")])
    case_file(tmp_path, PROFILE.format(path="a.jsonl").replace('"epoch_ms"', '"%Y-%m-%d"'))
    with pytest.raises(ConfigError) as info:
        api.run(tmp_path / "case.toml", tmp_path / "out")
    text = str(info.value)
    assert "no gateway record was read from the case's inputs" in text
    assert "a.jsonl: none of its 2 lines is a record of the format given for it, 'mapped'" in text
    assert "the first line's reason: profile key received_at ('ts_start'): '2026-08-28T10:00:00' does not match " \
           "time_format '%Y-%m-%d'" in text


def test_the_unread_files_reason_is_never_a_record_naming_no_customer(tmp_path: Path) -> None:
    """A mapped record naming no customer is worded its own way ("profile key tenant_id ...: no value"): its reason
    stood for the file's, hiding the time_format at fault (a fourth review)."""
    jsonl(tmp_path / "a.jsonl", [record(1, account={}), record(2, ts_start="bad"), record(3, ts_start="bad")])
    case_file(tmp_path, PROFILE.format(path="a.jsonl"))
    result = api.ingest(tmp_path / "case", [tmp_path / "a.jsonl"], fmt="mapped", config=load_case_file(tmp_path / "case.toml"))
    (unread,) = [w for w in result.warnings if "none of its" in w]
    assert "none of its 2 lines is a record of the format given for it, 'mapped'; the first line's reason: " in unread
    assert "line 2" in unread and "tenant_id" not in unread.split("the first line's reason: ")[1].split(". Fix")[0]
