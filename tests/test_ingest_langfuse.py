"""The langfuse format: sniffing against every other format's goldens, skipped observations, bad input.

Bad input follows tests/test_ingest_bad_input.py: a generation that cannot be used is a quarantine
row naming the field (or, in Parquet, the row and column) and the fix, and the rest of the file is
ingested. A SPAN or EVENT observation is not bad input: it is counted, by type, never ingested.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from forensics import api
from forensics.errors import InputError
from forensics.ingest import sniff
from forensics.ingest.parquet import is_parquet, peek_rows
from forensics.ingest.reader import peek_lines
from forensics.ingest.registry import FORMATS

GOLDEN = Path(__file__).parent / "golden" / "ingest"
OWN = ("langfuse_csv", "langfuse_jsonl", "langfuse_parquet")


def golden_files(folders: tuple[str, ...] | None = None) -> list[Path]:
    """Input files of the golden folders (all of them when ``folders`` is None)."""
    dirs = [GOLDEN / f for f in folders] if folders else sorted(p for p in GOLDEN.iterdir() if p.is_dir())
    return [p for d in dirs for p in sorted(d.iterdir()) if p.name != "expected.json"]


def claims(path: Path) -> list[str]:
    """Every registered format whose sniffer claims the file (not only the first in sniff order)."""
    lines = peek_rows(path) if is_parquet(path) else peek_lines(path)
    return [f.name for f in FORMATS.in_sniff_order() if f.sniff(lines, path.name)]


def test_sniffer_picks_langfuse_for_its_goldens_and_never_for_the_others() -> None:
    own = golden_files(OWN)
    assert len(own) == 3 and all(sniff(p) == "langfuse" for p in own)
    # Told apart by content alone: no other format claims an observations export, in any layout.
    assert all(claims(p) == ["langfuse"] for p in own), {p.name: claims(p) for p in own}
    others = [p for p in golden_files() if p not in own]
    assert others and all("langfuse" not in claims(p) for p in others), [p.name for p in others if "langfuse" in claims(p)]


MESSAGES = json.dumps([{"role": "user", "content": "Summarise the indemnity clause."}])
GOOD: dict[str, Any] = {
    "id": "obs-1", "trace_id": "trace-1", "project_id": "proj-1", "type": "GENERATION",
    "start_time": "2026-08-29 10:00:00.000000", "end_time": "2026-08-29 10:00:02.000000",
    "input": MESSAGES, "output": json.dumps({"role": "assistant", "content": "It covers third-party claims."}),
    "usage_details": {"input": 9, "output": 6, "total": 15}, "provided_model_name": "glm-5.3",
    "user_id": "u-1", "level": "DEFAULT", "status_message": "", "metadata": {"customer": "acme"},
}


def obs(i: int, **changes: Any) -> dict[str, Any]:
    return {**GOOD, "id": f"obs-{i}", **changes}


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def as_csv(rows: list[dict[str, Any]]) -> str:
    """The blob-storage CSV export: objects JSON-encoded, null an empty field."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(GOOD), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()})
    return buf.getvalue()


def ingest(tmp_path: Path, path: Path, fmt: str | None = None, **config: Any) -> tuple[dict, list[dict], list[dict]]:
    result = api.ingest(tmp_path / "case", [path], fmt=fmt, config=api.make_config(**config) if config else None)
    entry = next(f for f in result.manifest["files"] if f["path"].endswith(path.name))
    assert entry["reconciled"]
    quarantine = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    exchanges = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    return entry, quarantine, exchanges


def write(tmp_path: Path, name: str, data: str) -> Path:
    path = tmp_path / name
    path.write_text(data)
    return path


@pytest.mark.parametrize("folder", OWN)
def test_spans_and_events_are_counted_by_type_not_ingested_nor_quarantined(tmp_path: Path, folder: str) -> None:
    (path,) = golden_files((folder,))
    result = api.ingest(tmp_path / "case", [path])
    (entry,) = result.manifest["files"]
    skipped = entry["skipped_records"]
    assert set(skipped) <= {"langfuse SPAN observation", "langfuse EVENT observation"} and skipped
    header = 1 if path.suffix == ".csv" else 0
    assert entry["blank"] == sum(skipped.values()) + header
    assert entry["lines"] == entry["ingested"] + sum(skipped.values()) + header and entry["quarantined"] == 0
    x = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert len(x) == entry["ingested"] and all(r["record_kind"] == "langfuse_generation" for r in x)
    assert any("hold no model call and were not ingested" in n and path.name in n for n in result.manifest["notes"])


def test_same_observations_in_jsonl_csv_and_parquet_give_the_same_rows(tmp_path: Path) -> None:
    rows = [obs(1), obs(2, type="SPAN"), obs(3, input="Plain text prompt, with a comma", output="Plain answer", usage_details={})]
    parquet = tmp_path / "o.parquet"
    table = pa.Table.from_pylist([{**r, "usage_details": list(r["usage_details"].items()), "metadata": list(r["metadata"].items())}
                                  for r in rows],
                                 schema=pa.schema([(k, pa.map_(pa.string(), pa.int64()) if k == "usage_details" else
                                                    pa.map_(pa.string(), pa.string()) if k == "metadata" else pa.string())
                                                   for k in GOOD]))
    pq.write_table(table, parquet)
    keep = ("request_id", "tenant_id", "user_id", "model", "received_at", "completed_at", "status", "prompt_text",
            "response_text", "reported_prompt_tokens", "completion_tokens", "prompt_tokens", "problems")
    got = []
    for i, path in enumerate([write(tmp_path, "o.jsonl", jsonl(rows)), write(tmp_path, "o.csv", as_csv(rows)), parquet]):
        result = api.ingest(tmp_path / f"case{i}", [path])
        assert result.manifest["files"][0]["format"] == "langfuse"
        got.append([{k: r[k] for k in keep} for r in pq.read_table(tmp_path / f"case{i}" / "exchanges.parquet").to_pylist()])
    assert got[0] == got[1] == got[2]
    assert [r["request_id"] for r in got[0]] == ["obs-1", "obs-3"]
    assert got[0][1]["prompt_text"] == "Plain text prompt, with a comma" and got[0][1]["response_text"] == "Plain answer"


BAD = [
    ({"input": '[{"role": "user", "content": "hi"},]'}, "input is a string that is not valid JSON"),
    ({"project_id": ""}, "no tenant: none of project_id"),
    ({"start_time": "yesterday"}, "field 'start_time'"),
    ({"start_time": ""}, "missing required field 'start_time'"),
    ({"id": ""}, "missing required field 'id'"),
    ({"type": ""}, "missing required field 'type'"),
    ({"input": json.dumps({"messages": "hello"})}, "input.messages is a str, expected a list"),
    ({"input": json.dumps({"temperature": 0})}, "input is an object with neither messages"),
]
# A CSV cell is always a string: the wrong JSON types exist only in JSON Lines (and Parquet).
WRONG_TYPES = [
    ({"project_id": ["proj-1"]}, "field 'project_id' is a list, expected a string"),
    ({"type": 7}, "field 'type' is a int, expected a string"),
    ({"input": 42}, "input is a int, expected messages or text"),
]
CASES = [(c, r, "jsonl") for c, r in BAD + WRONG_TYPES] + [(c, r, "csv") for c, r in BAD]


@pytest.mark.parametrize(("change", "reason", "layout"), CASES)
def test_bad_generation_is_quarantined_with_reason_and_the_rest_ingested(
        tmp_path: Path, change: dict[str, Any], reason: str, layout: str) -> None:
    rows = [obs(1), obs(2, **change), obs(3)]
    path = write(tmp_path, f"export.{layout}", jsonl(rows) if layout == "jsonl" else as_csv(rows))
    entry, q, x = ingest(tmp_path, path, fmt="langfuse")
    assert (entry["ingested"], entry["quarantined"]) == (2, 1)
    assert reason in q[0]["reason"] and "Fix:" in q[0]["reason"]
    assert q[0]["source_line"] == (2 if layout == "jsonl" else 3)
    assert sorted(r["request_id"] for r in x) == ["obs-1", "obs-3"]


def test_wrong_usage_figures_and_unknown_output_cost_the_value_not_the_row(tmp_path: Path) -> None:
    rows = [obs(1, usage_details={"input": "many", "output": -3}), obs(2, output=json.dumps({"answer": {"deep": 1}})),
            obs(3, usage_details="[1, 2]")]
    entry, q, x = ingest(tmp_path, write(tmp_path, "o.jsonl", jsonl(rows)))
    assert (entry["ingested"], q) == (3, [])
    one, two, three = x
    assert one["reported_prompt_tokens"] is None and one["completion_tokens"] is None
    assert "usage_details.input = 'many' is not a whole number" in one["problems"]
    assert "usage_details.output = -3 is out of range" in one["problems"]
    assert two["response_text"] is None and "output is a dict of a shape not known" in two["problems"]
    assert two["prompt_text"] == "<|user|>\nSummarise the indemnity clause."
    assert "usage_details is a list, not an object of counts" in three["problems"]


def test_an_input_cut_short_keeps_the_row_marked_truncated_with_a_note(tmp_path: Path) -> None:
    # An export's size limit cuts the longest prompts: the row must say its prompt is longer than
    # anything read, not pass for a one-token prompt.
    long_input = json.dumps([{"role": "user", "content": "secret " * 1000}])
    entry, q, x = ingest(tmp_path, write(tmp_path, "o.jsonl", jsonl([obs(1, input=long_input[:3000]), obs(2)])))
    assert (entry["ingested"], q) == (2, [])
    cut, whole = x
    assert (cut["request_id"], cut["prompt_text"], cut["prompt_truncated"]) == ("obs-1", None, True)
    assert "input is cut short (its JSON ends early); the prompt text is unknown" in cut["problems"]
    assert whole["prompt_truncated"] is False


def test_an_open_generation_is_incomplete_and_an_error_level_a_failure(tmp_path: Path) -> None:
    rows = [obs(1, end_time=None, output=""), obs(2, level="ERROR", output="", status_message="upstream 500")]
    _, _, x = ingest(tmp_path, write(tmp_path, "o.jsonl", jsonl(rows)))
    assert [(r["request_id"], r["status"], r["completed_at"]) for r in x] == [
        ("obs-1", "incomplete", None), ("obs-2", "failure", dt.datetime(2026, 8, 29, 10, 0, 2, tzinfo=dt.UTC))]


def test_public_api_names_are_read(tmp_path: Path) -> None:
    row = {"id": "obs-9", "traceId": "trace-9", "projectId": "proj-9", "type": "GENERATION",
           "startTime": "2026-08-29T10:00:00.000Z", "endTime": "2026-08-29T10:00:01.500Z", "model": "glm-5.3",
           "input": [{"role": "user", "content": "hello"}], "output": {"role": "assistant", "content": "hi"},
           "usage": {"input": 4, "output": 1, "total": 5, "unit": "TOKENS"}, "userId": "u-9", "level": "DEFAULT"}
    path = write(tmp_path, "api.jsonl", jsonl([row]))
    assert sniff(path) == "langfuse"
    entry, q, (x,) = ingest(tmp_path, path)
    assert q == [] and entry["ingested"] == 1
    got = (x["request_id"], x["tenant_id"], x["tenant_field"], x["user_id"], x["model"], x["response_text"], x["reported_prompt_tokens"])
    assert got == ("obs-9", "proj-9", "projectId", "u-9", "glm-5.3", "hi", 4)
    assert x["zone_assumed"] is None and x["received_at"] == dt.datetime(2026, 8, 29, 10, tzinfo=dt.UTC)


@pytest.mark.parametrize("layout", ["jsonl", "csv", "parquet"])
def test_tenant_from_a_configured_metadata_key(tmp_path: Path, layout: str) -> None:
    rows = [obs(1, project_id="shared-project")]
    if layout == "parquet":
        path = tmp_path / "o.parquet"
        pq.write_table(pa.Table.from_pylist([{**rows[0], "usage_details": None,
                                              "metadata": list(rows[0]["metadata"].items())}],
                                            schema=pa.schema([(k, pa.map_(pa.string(), pa.string()) if k == "metadata" else
                                                               pa.map_(pa.string(), pa.int64()) if k == "usage_details" else
                                                               pa.string()) for k in GOOD])), path)
    else:
        path = write(tmp_path, f"o.{layout}", jsonl(rows) if layout == "jsonl" else as_csv(rows))
    _, _, (x,) = ingest(tmp_path, path, tenant_field="metadata.customer")
    assert (x["tenant_id"], x["tenant_field"]) == ("acme", "metadata.customer")


def parquet_file(path: Path, columns: dict[str, pa.Array], row_group_size: int | None = None) -> Path:
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def test_parquet_bad_rows_are_quarantined_naming_row_and_column_across_batches(tmp_path: Path) -> None:
    # 150 rows in row groups of 40: more than one read batch, and the bad rows far from the start.
    n = 150
    inputs = [MESSAGES.encode()] * n
    inputs[99] = b"\xff\xfe not utf-8"
    starts = [1787997600_000_000 + i * 1_000_000 for i in range(n)]
    starts[120] = 253_402_300_800_000_000  # the year 10000: no datetime holds it
    path = parquet_file(tmp_path / "obs.parquet", {
        "id": pa.array([f"obs-{i + 1}" for i in range(n)]),
        "trace_id": pa.array(["t"] * n), "project_id": pa.array(["proj-1"] * n), "type": pa.array(["GENERATION"] * n),
        "start_time": pa.array(starts, pa.timestamp("us")),
        "input": pa.array(inputs, pa.binary()),
        "usage_details": pa.array([[("input", 9), ("output", 2)]] * n, pa.map_(pa.string(), pa.uint64())),
    }, row_group_size=40)
    entry, q, x = ingest(tmp_path, path)
    assert entry["format"] == "langfuse" and (entry["lines"], entry["ingested"], entry["quarantined"]) == (n, n - 2, 2)
    assert [r["source_line"] for r in q] == [100, 121]
    assert "Parquet row 100" in q[0]["reason"] and "not UTF-8" in q[0]["reason"] and "Fix:" in q[0]["reason"]
    assert "Parquet row 121" in q[1]["reason"] and "column 'start_time'" in q[1]["reason"]
    assert all(r["source_file"] == "obs.parquet" or r["source_file"].endswith("/obs.parquet") for r in q)
    assert x[0]["request_id"] == "obs-1" and x[-1]["request_id"] == f"obs-{n}" and x[-1]["source_line"] == n
    assert x[0]["prompt_text"] == "<|user|>\nSummarise the indemnity clause."


def _generations(n: int) -> dict[str, pa.Array]:
    """The columns of ``n`` generations obs-1..obs-n of one project, a second apart."""
    return {
        "id": pa.array([f"obs-{i + 1}" for i in range(n)]),
        "trace_id": pa.array(["t"] * n), "project_id": pa.array(["proj-1"] * n), "type": pa.array(["GENERATION"] * n),
        "start_time": pa.array([1787997600_000_000 + i for i in range(n)], pa.timestamp("us")),
        "input": pa.array([MESSAGES] * n),
    }


def test_parquet_a_count_of_nan_or_infinity_is_noted_not_read_as_absent(tmp_path: Path) -> None:
    """JSON has no NaN: a row's NaN was written as null on its way to the parser, and the count read as absent with no
    note. It still reads as absent (an optional time of NaN is no time, and costs no record), and the row says so."""
    n = 4
    path = parquet_file(tmp_path / "obs.parquet", {
        **_generations(n),
        "end_time": pa.array([1787997602.5, float("nan"), 1787997603.5, 1787997604.5]),
        "usage_details": pa.array([[("input", 9.0)], [("input", float("nan"))], [("input", float("inf"))], [("input", 3.0)]],
                                  pa.map_(pa.string(), pa.float64())),
    })
    entry, q, x = ingest(tmp_path, path)
    assert q == [] and entry["ingested"] == n
    by_id = {r["request_id"]: r for r in x}
    assert by_id["obs-1"]["reported_prompt_tokens"] == 9 and by_id["obs-4"]["reported_prompt_tokens"] == 3
    assert by_id["obs-1"]["problems"] is None and by_id["obs-2"]["completed_at"] is None
    for rid, paths in (("obs-2", "end_time, usage_details.input"), ("obs-3", "usage_details.input")):
        assert by_id[rid]["reported_prompt_tokens"] is None
        assert f"{paths}: NaN or infinite in the Parquet export, read as absent" in (by_id[rid]["problems"] or ""), by_id[rid]["problems"]


def test_a_column_named_as_the_readers_own_notes_is_data_and_a_nan_copy_of_a_row_is_its_copy(tmp_path: Path) -> None:
    """The NaN note rode inside the row's JSON under a key of its own: a column of that name made a note of its
    values, and a copy of a row holding NaN where the other holds null was another version of the record."""
    n = 2
    path = parquet_file(tmp_path / "obs.parquet", {
        **_generations(n), "id": pa.array(["obs-1", "obs-1"]),
        "start_time": pa.array([1787997600_000_000] * n, pa.timestamp("us")),
        "_parquet_nonfinite": pa.array(["x", "x"]), "total_cost": pa.array([float("nan"), None], pa.float64()),
    })
    entry, q, x = ingest(tmp_path, path)
    assert q == [] and len(x) == 1 and entry["duplicate"] == 1, (entry, x)
    assert "x: NaN" not in (x[0]["problems"] or "")
    manifest = json.loads((tmp_path / "case" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["superseded_variants"] == 0  # one record twice, not two versions of it


@pytest.mark.parametrize("kind", ["list_view", "large_list", "fixed_size_list", "struct_of_lists"])
def test_a_nan_inside_any_nested_column_is_noted(tmp_path: Path, kind: str) -> None:
    """Arrow told which batches hold a NaN, and missed those in list views: their NaN was nulled with no note."""
    from forensics.ingest.parquet import read_rows

    nan = float("nan")
    values = {"list_view": pa.array([[1.0], [nan]], pa.list_view(pa.float64())),
              "large_list": pa.array([[1.0], [nan]], pa.large_list(pa.float64())),
              "fixed_size_list": pa.array([[1.0], [nan]], pa.list_(pa.float64(), 1)),
              "struct_of_lists": pa.array([{"s": [1.0]}, {"s": [nan]}])}[kind]
    pq.write_table(pa.table({"c": values}), tmp_path / "t.parquet")
    notes = [line.notes for line in read_rows(tmp_path / "t.parquet", [])]
    assert notes[0] == () and notes[1] and "NaN or infinite" in notes[1][0], notes


def test_parquet_columns_of_one_name_that_differ_cost_their_row(tmp_path: Path) -> None:
    """Two columns of one name (a join written out without renaming): read as a dict, the last won, maybe another
    customer's id. A row where they differ is quarantined naming the columns; where they agree, it is read."""
    n = 3
    names = ["id", "trace_id", "project_id", "type", "start_time", "input", "project_id", "total_cost", "total_cost"]
    nan = float("nan")
    table = pa.Table.from_arrays([
        pa.array([f"obs-{i + 1}" for i in range(n)]), pa.array(["t"] * n), pa.array(["proj-1", "proj-2", "proj-3"]),
        pa.array(["GENERATION"] * n), pa.array([1787997600_000_000 + i for i in range(n)], pa.timestamp("us")),
        pa.array([MESSAGES] * n), pa.array(["proj-1", "proj-evil", "proj-3"]),
        pa.array([nan, 0.5, 1.0]), pa.array([nan, 0.5, 1.0]),  # two NaNs agree: both absent
        pa.array([[1.0, nan], [], []]), pa.array([[1.0, nan], [], []]),  # and nested, at any depth
    ], names=[*names, "scores", "scores"])
    pq.write_table(table, tmp_path / "obs.parquet")
    entry, q, x = ingest(tmp_path, tmp_path / "obs.parquet")
    assert sorted((r["request_id"], r["tenant_id"]) for r in x) == [("obs-1", "proj-1"), ("obs-3", "proj-3")]
    assert len(q) == 1 and q[0]["source_line"] == 2
    assert "columns 3 and 7 are both named 'project_id'" in q[0]["reason"] and "Fix" in q[0]["reason"]


def test_parquet_nanosecond_times_and_zoned_times_are_read(tmp_path: Path) -> None:
    path = parquet_file(tmp_path / "obs.parquet", {
        "id": pa.array(["obs-1"]), "trace_id": pa.array(["t"]), "project_id": pa.array(["proj-1"]),
        "type": pa.array(["GENERATION"]), "input": pa.array([MESSAGES]),
        "start_time": pa.array([1787997600_123456789], pa.timestamp("ns")),
        "end_time": pa.array([1787997602_000000], pa.timestamp("us", tz="UTC")),
    })
    _, q, (x,) = ingest(tmp_path, path)
    assert q == [] and x["received_at"] == dt.datetime(2026, 8, 29, 10, 0, 0, 123456, tzinfo=dt.UTC)
    assert x["completed_at"] == dt.datetime(2026, 8, 29, 10, 0, 2, tzinfo=dt.UTC)


def test_cut_parquet_file_is_a_clear_error_or_a_whole_file_problem(tmp_path: Path) -> None:
    whole = golden_files(("langfuse_parquet",))[0].read_bytes()
    (tmp_path / "logs").mkdir()
    path = tmp_path / "logs" / "cut.parquet"
    path.write_bytes(whole[: len(whole) // 2])
    # Named or found in a folder, the damage is what is told, not a format to pass (which would not help).
    with pytest.raises(InputError, match="Parquet file is damaged or cut short before any row could be read"):
        api.ingest(tmp_path / "case", [path])
    found = api.ingest(tmp_path / "case3", [tmp_path / "logs"])
    assert found.manifest["files"][0]["status"] == "skipped: damaged before its first line"
    reasons = [q["reason"] for q in pq.read_table(tmp_path / "case3" / "quarantine.parquet").to_pylist()]
    assert len(reasons) == 1 and "Parquet file is damaged or cut short" in reasons[0] and "--format" not in reasons[0]
    result = api.ingest(tmp_path / "case2", [path], fmt="langfuse")
    (entry,) = result.manifest["files"]
    assert entry["status"] == "ingested with problems" and entry["reconciled"] and entry["ingested"] == 0
    q = pq.read_table(tmp_path / "case2" / "quarantine.parquet").to_pylist()
    assert len(q) == 1 and "Parquet file is damaged or cut short before any row could be read" in q[0]["reason"]


def test_a_damaged_row_group_costs_its_rows_only(tmp_path: Path) -> None:
    """A Parquet file whose footer is whole but one row group's pages are damaged (a bad disk block, a botched
    copy): the read stopped there, and the rows of every row group after it were lost. They are read now, the
    damaged group is one quarantine row naming its rows, and the later rows keep their own numbers."""
    n = 100
    path = parquet_file(tmp_path / "obs.parquet", _generations(n), row_group_size=20)
    data = bytearray(path.read_bytes())
    chunk = pq.ParquetFile(path).metadata.row_group(2).column(5)  # rows 41-60, the input column
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data[start: start + 16] = b"\xff" * 16  # its first page header unreadable
    path.write_bytes(bytes(data))
    entry, q, x = ingest(tmp_path, path)
    assert sorted(int(r["request_id"][4:]) for r in x) == [i for i in range(1, n + 1) if not 41 <= i <= 60]
    assert all(r["source_line"] == int(r["request_id"][4:]) for r in x)
    assert entry["status"] == "ingested with problems" and (entry["ingested"], entry["quarantined"]) == (80, 1)
    [bad] = q
    assert "row group 3 of 5" in bad["reason"] and "rows 41 to 60" in bad["reason"] and "Fix" in bad["reason"], bad["reason"]


def test_a_text_format_forced_on_a_parquet_file_is_refused(tmp_path: Path) -> None:
    (path,) = golden_files(("langfuse_parquet",))
    with pytest.raises(InputError, match="Parquet file and format 'helicone' reads text logs"):
        api.ingest(tmp_path / "case", [path], fmt="helicone")
    assert not (tmp_path / "case" / "exchanges.parquet").exists()


def test_a_parquet_file_of_another_kind_is_not_claimed(tmp_path: Path) -> None:
    path = parquet_file(tmp_path / "scores.parquet", {"id": pa.array(["s-1"]), "name": pa.array(["accuracy"]),
                                                       "value": pa.array([1.0])})
    assert sniff(path) is None


def test_hostile_observation_type_is_bounded_in_the_manifest(tmp_path: Path) -> None:
    entry, q, x = ingest(tmp_path, write(tmp_path, "o.jsonl", jsonl([obs(1), obs(2, type="span" + "X" * 5000)])))
    assert (entry["ingested"], q) == (1, [])
    (kind,) = entry["skipped_records"]
    assert kind.startswith("langfuse SPANXXX") and len(kind) < 80


def test_one_simulated_incident_as_langfuse_and_as_litellm_gives_the_same_suspects_and_notifications(tmp_path: Path) -> None:
    pytest.importorskip("faker")
    from forensics.lab.simulate import simulate

    reports = {}
    for fmt in ("litellm", "langfuse"):
        sim = simulate(tmp_path / f"sim-{fmt}", seed=5, scale="small", fmt=fmt)
        result = api.run(sim.case_file, tmp_path / f"out-{fmt}")
        reports[fmt] = result.report.report_dir
        assert ("Langfuse observations export" in (sim.out / "README.md").read_text()) == (fmt == "langfuse")
        truth = json.loads(sim.truth.read_text())
        assert all(claims(p) == [fmt] for p in sorted((sim.out / "gateway").iterdir()))
        case = json.loads((reports[fmt] / "case" / "manifest.json").read_text())
        assert sum(f["quarantined"] for f in case["files"]) == truth["quarantine"]["expected"]
    case = json.loads((reports["langfuse"] / "case" / "manifest.json").read_text())
    spans = sum(f.get("skipped_records", {}).get("langfuse SPAN observation", 0) for f in case["files"])
    assert spans == case["tables"]["exchanges"] > 0  # one root span per call, none of them an exchange
    suspects = (reports["litellm"] / "suspects.csv").read_text()
    assert suspects.count("\n") > 1 and suspects == (reports["langfuse"] / "suspects.csv").read_text()
    notifications = (reports["litellm"] / "notifications.csv").read_text()
    assert "exposed" in notifications and notifications == (reports["langfuse"] / "notifications.csv").read_text()


def test_parquet_is_read_one_row_group_and_a_few_rows_at_a_time(tmp_path: Path,
                                                                 parquet_reads: list[tuple[int, list[int] | None]]) -> None:
    # A reader over every row group at once kept what it had read: memory grew with the file
    # (read_rows alone peaked at 370 MB for a 200 MB export and 564 MB for 400 MB; 258 and 291 MB now).
    from forensics.ingest import parquet

    calls = parquet_reads
    path = parquet_file(tmp_path / "obs.parquet", {"id": pa.array([f"obs-{i}" for i in range(100)])}, row_group_size=30)
    lines = list(parquet.read_rows(path, []))
    assert [json.loads(line.text or "")["id"] for line in lines] == [f"obs-{i}" for i in range(100)]
    assert [line.number for line in lines] == list(range(1, 101))
    assert calls == [(parquet.BATCH_ROWS, [g]) for g in range(4)] and parquet.BATCH_ROWS <= 64


def test_the_same_observations_in_two_exports_are_one_request_each(tmp_path: Path) -> None:
    # An hourly JSON Lines export and a Parquet export of the same window overlap.
    rows = [obs(1), obs(2), obs(3, type="SPAN")]
    parquet = tmp_path / "o.parquet"
    pq.write_table(pa.Table.from_pylist([{**r, "usage_details": json.dumps(r["usage_details"]), "metadata": json.dumps(r["metadata"])}
                                         for r in rows]), parquet)
    result = api.ingest(tmp_path / "case", [write(tmp_path, "o.jsonl", jsonl(rows)), parquet])
    files = {f["path"].rsplit("/", 1)[-1]: f for f in result.manifest["files"]}
    assert all(f["reconciled"] for f in files.values())
    assert files["o.jsonl"]["ingested"] + files["o.parquet"]["ingested"] == 2
    assert files["o.jsonl"]["duplicate"] + files["o.parquet"]["duplicate"] == 2
    x = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert sorted(r["request_id"] for r in x) == ["obs-1", "obs-2"]


def test_a_parquet_file_in_a_folder_read_under_a_text_format_is_skipped_with_the_reason(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "callbacks.jsonl").write_bytes((GOLDEN / "litellm_payload" / "callbacks.jsonl").read_bytes())
    (folder / "observations.parquet").write_bytes(golden_files(("langfuse_parquet",))[0].read_bytes())
    result = api.ingest(tmp_path / "case", [folder], fmt="litellm")
    statuses = {f["path"].rsplit("/", 1)[-1]: f["status"] for f in result.manifest["files"]}
    assert statuses == {"callbacks.jsonl": "ingested", "observations.parquet": "skipped: Parquet, not the format given"}
    q = [r for r in pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist() if r["source_file"].endswith(".parquet")]
    assert len(q) == 1 and "format 'litellm' reads text logs" in q[0]["reason"] and "use a format that reads Parquet (langfuse, mapped)" in q[0]["reason"]


def test_the_prompt_count_includes_the_tokens_langfuse_keeps_apart_as_cached(tmp_path: Path) -> None:
    # Langfuse's `input` (and Anthropic's `input_tokens`) leave cached prompt tokens out: a resend served from the
    # prefix cache would otherwise read as a one-token prompt, the placeholder's count during the bug.
    rows = [obs(1, usage_details={"input": 1, "input_cache_read": 29999, "output": 6}),
            obs(2, usage_details={"input_tokens": 10, "cache_read_input_tokens": 500, "cache_creation_input_tokens": 40}),
            obs(3, usage_details={"prompt_tokens": 100, "cache_read_input_tokens": 50}),  # OpenAI's count holds them
            obs(4, usage_details={"input": 9, "input_cache_read": "lots"}),
            obs(5, usage_details={"input": 2**62, "input_cache_read": 2**62})]  # a sum beyond 64 bits: no count
    entry, q, x = ingest(tmp_path, write(tmp_path, "o.jsonl", jsonl(rows)))
    assert (entry["ingested"], q) == (5, [])
    assert [r["reported_prompt_tokens"] for r in x] == [30000, 550, 100, 9, None]
    assert "usage_details.input_cache_read = 'lots' is not a whole number" in x[3]["problems"]
    assert "usage_details.input with its detail counts is out of range" in x[4]["problems"]


def test_the_counts_add_back_every_detail_langfuse_took_out(tmp_path: Path) -> None:
    # Langfuse takes each of prompt_tokens_details (and completion_tokens_details) out of `input` (`output`) into
    # a key of its own, never below 0. Qwen and xAI report the prompt's text tokens as a detail: `input` was 0 for
    # an 812,345-token prompt. Where the details overlap (xAI's text tokens hold its cached ones), `input` is 0
    # and the largest detail is taken, not their sum.
    rows = [obs(1, usage_details={"input": 0, "input_text_tokens": 812345, "output": 10, "total": 812355}),
            obs(2, usage_details={"input": 0, "input_text_tokens": 257, "input_cached_tokens": 192, "output": 0,
                                  "output_reasoning_tokens": 2297}),
            obs(3, usage_details={"input": 100, "input_cached_tokens": 900, "input_audio_tokens": 20, "output": 5,
                                  "output_reasoning_tokens": 40}),
            # Anthropic's own cache names beside Langfuse's `input` (as other writers of Langfuse usage put them)
            obs(4, usage_details={"input": 12, "cache_read_input_tokens": 812333, "output": 6}),
            # LiteLLM's Langfuse logger: the cache writes still inside `input`; a reads count given twice counts once
            obs(5, usage_details={"input": 500, "cache_creation_input_tokens": 400, "output": 6}),
            obs(6, usage_details={"input": 10, "input_cache_read": 800000, "cache_read_input_tokens": 800000, "output": 6})]
    entry, q, x = ingest(tmp_path, write(tmp_path, "o.jsonl", jsonl(rows)))
    assert (entry["ingested"], q) == (6, [])
    assert [r["reported_prompt_tokens"] for r in x] == [812345, 257, 1020, 812345, 500, 800010]
    assert [r["completion_tokens"] for r in x] == [10, 2297, 45, 6, 6, 6]
