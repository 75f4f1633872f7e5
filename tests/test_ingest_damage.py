"""``exchanges.damage``: each row says whether the record it was built from can be trusted.

Rules (forensics.schema): ``truncated_file`` for the last record read before a truncated stream
and for every record of a corrupt one; ``quarantined_neighbour`` for a record within
DAMAGE_NEIGHBOUR_LINES lines of a quarantined line in the same file; ``truncated_copy_only`` when
the kept copy holds LiteLLM's truncated string. A clean copy elsewhere wins and is not marked.
"""

from __future__ import annotations

import gzip
import json
import struct
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

from forensics import api, schema
from forensics.errors import CaseError
from forensics.ingest import read_damage

REPO = Path(__file__).resolve().parent.parent
LONG = "clause " * 3000
TRUNCATED = LONG[:716] + "... (litellm_truncated skipped 17952 chars. Truncation is a DB storage safeguard.) ..." + LONG[-1332:]


def request(i: int, **changes: object) -> str:
    """An openai-split request line."""
    rec = {"request_id": f"r-{i}", "timestamp": "2026-08-30T03:12:09Z", "tenant_id": f"acct-{i % 3}",
           "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": f"question number {i}"}]}, **changes}
    return json.dumps(rec)


def response(i: int) -> str:
    """An openai-split response line."""
    return json.dumps({"request_id": f"r-{i}", "timestamp": "2026-08-30T03:12:19Z", "status_code": 200,
                       "body": {"choices": [{"index": 0, "message": {"content": f"answer {i}"}, "finish_reason": "stop"}]}})


def spend(i: int, prompt: str = "hello world") -> str:
    """A LiteLLM spend-log row."""
    return json.dumps({
        "request_id": f"chatcmpl-{i}", "call_type": "acompletion", "api_key": "k", "startTime": "2026-08-29T10:00:00Z",
        "endTime": "2026-08-29T10:00:05Z", "model": "openai/glm-5.3", "model_group": "glm-5.3", "team_id": "team-a",
        "status": "success", "proxy_server_request": {"messages": [{"role": "user", "content": prompt}]},
        "response": {"choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}]},
    })


def payload(i: int, prompt: str) -> str:
    """A LiteLLM callback payload (StandardLoggingPayload)."""
    return json.dumps({
        "id": f"chatcmpl-{i}", "call_type": "acompletion", "startTime": 1787997000.0, "endTime": 1787997005.0,
        "model": "glm-5.3", "model_group": "glm-5.3", "messages": [{"role": "user", "content": prompt}],
        "response": {"choices": [{"index": 0, "message": {"content": "ok"}}]},
        "metadata": {"user_api_key_team_id": "team-a"},
    })


def lines(*items: str) -> bytes:
    return ("\n".join(items) + "\n").encode()


def damage_by_line(case: Path) -> dict[int, str | None]:
    rows = pq.read_table(case / "exchanges.parquet", columns=["source_line", "damage"]).to_pylist()
    return {r["source_line"]: r["damage"] for r in rows}


def test_truncated_gzip_marks_the_last_record_read(tmp_path: Path) -> None:
    blob = gzip.compress(lines(*(request(i) for i in range(300))))
    path = tmp_path / "requests.jsonl.gz"
    path.write_bytes(blob[: len(blob) // 2])
    result = api.ingest(tmp_path / "case", [path], fmt="openai-split")
    entry = result.manifest["files"][0]
    (point,) = entry["stream_damage"]
    assert point["kind"] == "truncated" and point["after_line"] == entry["ingested"] > 0
    damage = damage_by_line(tmp_path / "case")
    last = max(damage)
    assert last == point["after_line"]
    # The stream decodes exactly up to the cut: only the last record read is in doubt, and the
    # quarantine row standing for the unreadable rest does not make it a quarantined_neighbour.
    assert damage[last] == "truncated_file"
    assert all(d is None for n, d in damage.items() if n != last)
    counts = result.manifest["records_from_damaged_input"]
    assert counts == {"total": 1, "by_reason": {"quarantined_neighbour": 0, "truncated_copy_only": 0, "truncated_file": 1}}
    assert any("truncated_file" in n for n in result.manifest["notes"])


def test_truncated_zstd_marks_the_last_record_read(tmp_path: Path) -> None:
    blob = zstandard.ZstdCompressor().compress(lines(*(request(i) for i in range(5000))))  # several blocks
    path = tmp_path / "requests.jsonl.zst"
    path.write_bytes(blob[: len(blob) // 2])
    result = api.ingest(tmp_path / "case", [path], fmt="openai-split")
    assert [p["kind"] for p in result.manifest["files"][0]["stream_damage"]] == ["truncated"]
    damage = damage_by_line(tmp_path / "case")
    assert [n for n, d in damage.items() if d] == [max(damage)]


def test_corrupt_gzip_marks_every_record_of_the_file(tmp_path: Path) -> None:
    blob = bytearray(gzip.compress(lines(*(request(i) for i in range(20)))))
    crc = struct.unpack("<I", blob[-8:-4])[0]
    blob[-8:-4] = struct.pack("<I", crc ^ 1)  # every byte decodes, but the checksum says one is wrong
    path = tmp_path / "requests.jsonl.gz"
    path.write_bytes(bytes(blob))
    result = api.ingest(tmp_path / "case", [path], fmt="openai-split")
    assert [p["kind"] for p in result.manifest["files"][0]["stream_damage"]] == ["corrupt"]
    damage = damage_by_line(tmp_path / "case")
    assert len(damage) == 20 and set(damage.values()) == {"truncated_file"}


def test_quarantined_line_marks_its_neighbours(tmp_path: Path) -> None:
    # lines: 1 ok, 2 ok, 3 garbled, 4 ok, 5 ok, 6 garbled, 7 blank, 8 ok, 9 ok
    data = lines(request(1), request(2), '{"request_id": "r-3", "tim', request(4), request(5),
                 "\x00\x00garbage", "", request(8), request(9))
    path = tmp_path / "requests.jsonl"
    path.write_bytes(data)
    result = api.ingest(tmp_path / "case", [path], fmt="openai-split")
    assert result.manifest["files"][0]["quarantined"] == 2
    assert schema.DAMAGE_NEIGHBOUR_LINES == 1
    assert damage_by_line(tmp_path / "case") == {
        1: None, 2: "quarantined_neighbour", 4: "quarantined_neighbour", 5: "quarantined_neighbour", 8: None, 9: None,
    }
    assert result.manifest["records_from_damaged_input"]["by_reason"]["quarantined_neighbour"] == 3
    assert result.manifest["files"][0]["stream_damage"] == []


def test_split_row_has_the_damage_of_both_halves(tmp_path: Path) -> None:
    req = tmp_path / "requests.jsonl"
    req.write_bytes(lines(request(1), request(2)))
    resp = tmp_path / "responses.jsonl"
    resp.write_bytes(lines(response(1), "{not json", response(2)))
    api.ingest(tmp_path / "case", [req, resp], fmt="openai-split")
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["request_id", "damage"]).to_pylist()
    assert {r["request_id"]: r["damage"] for r in rows} == {"r-1": "quarantined_neighbour", "r-2": "quarantined_neighbour"}


def test_spend_log_only_truncated_copy(tmp_path: Path) -> None:
    path = tmp_path / "spend.jsonl"
    path.write_text(spend(1, TRUNCATED) + "\n" + spend(2) + "\n")
    result = api.ingest(tmp_path / "case", [path])
    rows = {r["request_id"]: r for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()}
    assert rows["chatcmpl-1"]["prompt_truncated"] and rows["chatcmpl-1"]["damage"] == "truncated_copy_only"
    assert rows["chatcmpl-2"]["damage"] is None
    assert result.manifest["records_from_damaged_input"]["by_reason"]["truncated_copy_only"] == 1


def test_untruncated_copy_elsewhere_clears_truncated_copy_only(tmp_path: Path) -> None:
    spend_log = tmp_path / "spend.jsonl"
    spend_log.write_text(spend(1, TRUNCATED) + "\n")
    callbacks = tmp_path / "callbacks.jsonl"
    callbacks.write_text(payload(1, LONG) + "\n")
    result = api.ingest(tmp_path / "case", [spend_log, callbacks])
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert row["prompt_truncated"] is False and row["damage"] is None
    assert result.manifest["records_from_damaged_input"]["total"] == 0


@pytest.mark.parametrize("damaged_name", ["a-export.jsonl", "z-export.jsonl"])
def test_clean_copy_elsewhere_wins_and_is_not_marked(tmp_path: Path, damaged_name: str) -> None:
    # The same request in two overlapping exports: next to a garbled line in one, clean in the
    # other. Whichever sorts first, the clean copy is kept and the row is not marked.
    damaged = tmp_path / damaged_name
    damaged.write_text(spend(1) + "\n" + "{garbled" + "\n" + spend(3) + "\n")
    clean = tmp_path / "m-export.jsonl"
    clean.write_text(spend(1) + "\n" + spend(2) + "\n")
    result = api.ingest(tmp_path / "case", [damaged, clean])
    rows = {r["request_id"]: r for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()}
    assert rows["chatcmpl-1"]["damage"] is None and rows["chatcmpl-1"]["source_file"].endswith("m-export.jsonl")
    assert rows["chatcmpl-3"]["damage"] == "quarantined_neighbour"  # no other copy
    assert rows["chatcmpl-2"]["damage"] is None
    assert result.manifest["reconciled"]


def test_damage_does_not_depend_on_ingest_order(tmp_path: Path) -> None:
    damaged = tmp_path / "a.jsonl"
    damaged.write_text(spend(1) + "\n" + "{garbled" + "\n" + spend(3) + "\n")
    clean = tmp_path / "b.jsonl"
    clean.write_text(spend(1) + "\n")
    api.ingest(tmp_path / "c1", [damaged, clean])
    api.ingest(tmp_path / "c2", [damaged])
    assert read_damage(tmp_path / "c2", ["chatcmpl-1"]) == {("chatcmpl-1", "team-a"): "quarantined_neighbour"}
    api.ingest(tmp_path / "c2", [clean])  # a later export with a clean copy clears it
    assert read_damage(tmp_path / "c2", ["chatcmpl-1"]) == {("chatcmpl-1", "team-a"): None}
    assert (tmp_path / "c1" / "exchanges.parquet").read_bytes() == (tmp_path / "c2" / "exchanges.parquet").read_bytes()


def test_clean_inputs_have_no_damage(tmp_path: Path) -> None:
    text = lines(*(request(i) for i in range(10)))
    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(text))
    (tmp_path / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(text.replace(b'"r-', b'"z-')))
    (tmp_path / "c.jsonl").write_text(spend(1) + "\n" + payload(2, LONG) + "\n")
    result = api.ingest(tmp_path / "case", [tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.zst", tmp_path / "c.jsonl"])
    damage = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["damage"]).column("damage")
    assert len(damage) == 22 and damage.null_count == 22
    assert result.manifest["records_from_damaged_input"] == {
        "total": 0, "by_reason": {"quarantined_neighbour": 0, "truncated_copy_only": 0, "truncated_file": 0}}
    assert all(f["stream_damage"] == [] for f in result.manifest["files"])


@pytest.mark.skipif(not (REPO / "sample_logs").is_dir(), reason="sample_logs/ is not in this checkout")
def test_sample_logs_mark_only_the_neighbours_of_their_bad_lines(tmp_path: Path) -> None:
    """The sample's gateway logs are whole, with a few deliberately garbled lines."""
    result = api.ingest(tmp_path / "case", [REPO / "sample_logs"], config=api.make_config(REPO / "sample_logs" / "case.toml"))
    quarantined = {(q["source_file"], q["source_line"]) for q in pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
                   if q["source_line"] is not None}  # not the files skipped as a whole (README, truth.json)
    assert quarantined
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["source_file", "source_line", "damage"]).to_pylist()
    near = {(f, n + d) for f, n in quarantined for d in (-1, 1)}
    marked = {(r["source_file"], r["source_line"]) for r in rows if r["damage"]}
    assert marked == {(r["source_file"], r["source_line"]) for r in rows if (r["source_file"], r["source_line"]) in near}
    assert {r["damage"] for r in rows if r["damage"]} == {"quarantined_neighbour"}
    assert result.manifest["records_from_damaged_input"]["total"] == len(marked)


def test_join_and_split_damage() -> None:
    assert schema.join_damage(["truncated_file", None, "quarantined_neighbour;truncated_file"]) == \
        "quarantined_neighbour;truncated_file"
    assert schema.join_damage([None, ""]) is None
    assert schema.damage_reasons("quarantined_neighbour;truncated_copy_only") == ("quarantined_neighbour", "truncated_copy_only")
    assert schema.damage_reasons(None) == ()
    with pytest.raises(ValueError):
        schema.join_damage(["sunspots"])


def test_read_damage(tmp_path: Path) -> None:
    path = tmp_path / "spend.jsonl"
    path.write_text(spend(1, TRUNCATED) + "\n" + spend(2) + "\n")
    api.ingest(tmp_path / "case", [path])
    assert read_damage(tmp_path / "case", ["chatcmpl-1", "chatcmpl-2", "nope"]) == {
        ("chatcmpl-1", "team-a"): "truncated_copy_only", ("chatcmpl-2", "team-a"): None}
    assert len(read_damage(tmp_path / "case")) == 2
    assert read_damage(tmp_path / "case", []) == {}
    with pytest.raises(CaseError):
        read_damage(tmp_path / "no-case", ["chatcmpl-1"])


def test_a_damaged_file_shows_this_run_the_figures_the_manifest_keeps(tmp_path: Path) -> None:
    """A damaged file's records that another file also holds are duplicates in the manifest; what the run
    prints (and --json) showed every one of them as ingested."""
    records = [payload(i, f"prompt {i}") for i in range(200)]
    (tmp_path / "whole.jsonl").write_bytes(lines(*records))
    blob = gzip.compress(lines(*records))
    (tmp_path / "cut.jsonl.gz").write_bytes(blob[: len(blob) // 2])
    result = api.ingest(tmp_path / "case", [tmp_path / "whole.jsonl", tmp_path / "cut.jsonl.gz"], fmt="litellm")
    shown = {f["path"].rsplit("/", 1)[-1]: f for f in result.run_files}
    kept = {f["path"].rsplit("/", 1)[-1]: f for f in result.manifest.files}
    assert shown["cut.jsonl.gz"]["status"] == "ingested with problems"
    assert kept["cut.jsonl.gz"]["duplicate"] > 0
    for name in ("whole.jsonl", "cut.jsonl.gz"):
        assert (shown[name]["ingested"], shown[name]["duplicate"]) == (kept[name]["ingested"], kept[name]["duplicate"])
