"""An incident logged as thousands of small files (LiteLLM's S3 and GCS loggers write one object per
request) ingests like the same records in one file, and its cost grows with the files, not their square.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import table_rows

from forensics import api, schema
from forensics.ingest import finalize as finalize_module

ROOT = Path(__file__).resolve().parent.parent
DAY = ROOT / "sample_logs" / "gateway" / "litellm-callbacks-2026-08-27.jsonl"
#: Where a row came from differs between the two layouts; everything else must not.
WHERE = {"source_file", "source_sha256", "source_line", "response_source_file", "response_source_line"}


def _one_file_per_record(folder: Path) -> int:
    """Write each record of the sample day to a file of its own, as an object store export does."""
    folder.mkdir()
    lines = [line for line in DAY.read_bytes().splitlines(keepends=True) if line.strip()]
    for i, line in enumerate(lines):
        (folder / f"2026-08-27T{i:05d}.json").write_bytes(line)
    return len(lines)


def _records(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(tuple((k, repr(v)) for k, v in sorted(row.items()) if k not in WHERE) for row in rows)


def test_one_file_per_record_gives_the_records_of_one_file(tmp_path: Path) -> None:
    n = _one_file_per_record(tmp_path / "objects")
    many = api.ingest(tmp_path / "many", [tmp_path / "objects"])
    one = api.ingest(tmp_path / "one", [DAY])
    assert len(many.manifest.files) == n
    assert many.manifest.reconciled
    many_rows = table_rows(tmp_path / "many" / "exchanges.parquet")
    assert len(many_rows) == one.manifest.tables.exchanges == many.manifest.tables.exchanges
    assert _records(many_rows) == _records(table_rows(tmp_path / "one" / "exchanges.parquet"))
    # Every row names the one file it came from, line 1.
    assert {r["source_line"] for r in many_rows} == {1}
    assert len({r["source_file"] for r in many_rows}) == n


def test_finalising_lists_the_staging_folder_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing per input file and table made finalising 2,195 one-record files take 46 s (11 s after)."""
    _one_file_per_record(tmp_path / "objects")
    listings: list[str] = []
    real_scandir, real_glob = os.scandir, Path.glob

    def scandir(path: Any = ".") -> Any:
        listings.append(str(path))
        return real_scandir(path)

    def glob(self: Path, pattern: str) -> Any:
        listings.append(str(self))
        return real_glob(self, pattern)

    monkeypatch.setattr(finalize_module.os, "scandir", scandir)
    monkeypatch.setattr(Path, "glob", glob)
    real_finalize = finalize_module.finalize
    seen: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        listings.clear()
        result = real_finalize(*args, **kwargs)
        seen.append(sum(1 for p in listings if Path(p).name == "staging"))
        return result

    monkeypatch.setattr(finalize_module, "finalize", counted)
    api.ingest(tmp_path / "case", [tmp_path / "objects"])
    assert seen == [1]


def test_a_file_stages_only_the_tables_it_has_rows_for(tmp_path: Path) -> None:
    api.ingest(tmp_path / "case", [DAY])
    staged = sorted(p.name.split(".")[2] for p in (tmp_path / "case" / "staging").iterdir())
    assert staged == ["exchanges"]  # a clean gateway file: no engine events, nothing quarantined


@pytest.mark.parametrize("part", [0, 5])
def test_a_staging_file_left_by_an_interrupted_run_is_not_read(tmp_path: Path, part: int) -> None:
    """An ingest stopped after staging a file and run again must not carry the stale staging into the
    case: here a quarantine row other settings gave, in the file's first part or in a part this run does
    not make (the earlier run cut the file into more parts)."""
    sha = hashlib.sha256(DAY.read_bytes()).hexdigest()
    staging = tmp_path / "case" / "staging"
    staging.mkdir(parents=True)
    stale = {name: [None] for name in schema.QUARANTINE.names}
    stale.update(source_file=["stale"], source_sha256=[sha], source_line=[1], reason=["left by an interrupted run"])
    pq.write_table(pa.table(stale, schema=schema.QUARANTINE), staging / f"{sha}.{part:05d}.quarantine.parquet")
    result = api.ingest(tmp_path / "case", [DAY])
    assert table_rows(tmp_path / "case" / "quarantine.parquet") == []
    assert result.manifest.reconciled and result.manifest.tables.quarantine == 0
    assert not (staging / f"{sha}.{part:05d}.quarantine.parquet").exists()


def _pool_forced(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make an ingest of 10 files or more use the process pool; the list of pools it starts (their workers)."""
    from forensics import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "PARALLEL_FILES", 10)
    started: list[int] = []
    real = ingest_module.pool_running

    def counted(workers: int, *args: Any, **kwargs: Any) -> Any:
        started.append(workers)
        return real(workers, *args, **kwargs)

    monkeypatch.setattr(ingest_module, "pool_running", counted)
    return started


def test_many_small_files_staged_on_the_pool_give_the_tables_of_one_process(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A folder of PARALLEL_FILES files or more is staged on the process pool however small it is."""
    _one_file_per_record(tmp_path / "objects")
    one = api.ingest(tmp_path / "one", [tmp_path / "objects"])
    started = _pool_forced(monkeypatch)
    pooled = api.ingest(tmp_path / "pooled", [tmp_path / "objects"])
    assert started  # the pool did run
    for table in ("exchanges", "quarantine"):
        assert (tmp_path / "pooled" / f"{table}.parquet").read_bytes() == (tmp_path / "one" / f"{table}.parquet").read_bytes()
    assert pooled.manifest.files == one.manifest.files


@pytest.mark.parametrize("kind", ["unrecognised", "utf-16", "parquet"])
def test_a_big_file_that_is_not_read_is_one_quarantine_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           kind: str) -> None:
    """A file of no known format, or skipped (not UTF-8; Parquet where a text format is given), is not
    parsed: it is one unit and one quarantine row however big (it was a row per 64 MB part)."""
    from forensics import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "SPLIT_BYTES", 300)
    logs = tmp_path / "logs"
    logs.mkdir()
    text = "".join(f"an operator's note number {i}, not a log record\n" for i in range(100))
    if kind == "unrecognised":
        (logs / "notes.txt").write_text(text)
    elif kind == "utf-16":
        (logs / "notes.txt").write_text(DAY.read_text(encoding="utf-8"), encoding="utf-16")
    else:
        pq.write_table(pa.table({"note": [f"{i}\n" * 20 for i in range(200)]}), logs / "notes.parquet")
    result = api.ingest(tmp_path / "case", [logs], fmt="litellm" if kind == "parquet" else None)
    rows = table_rows(tmp_path / "case" / "quarantine.parquet")
    assert len(rows) == 1 and Path(rows[0]["source_file"]).name.startswith("notes"), rows
    assert result.manifest.reconciled


def _split_per_record(source: Path, folder: Path, prefix: str, limit: int | None = None) -> list[Path]:
    """Each non-blank line of ``source`` in a file of its own under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [line for line in source.read_bytes().splitlines(keepends=True) if line.strip()][:limit]
    out = []
    for i, line in enumerate(lines):
        path = folder / f"{prefix}-{i:05d}.jsonl"
        path.write_bytes(line)
        out.append(path)
    return out


def _case_bytes(case: Path) -> dict[str, bytes]:
    return {name: (case / name).read_bytes()
            for name in ("exchanges.parquet", "engine_events.parquet", "quarantine.parquet", "manifest.json")}


def _unbatched(monkeypatch: pytest.MonkeyPatch) -> None:
    from forensics import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "BATCH_FILES", 1)


def _mixed_small_files(folder: Path) -> None:
    """Small files of every kind: one record each, a broken line, a file of no known format, an empty one,
    a UTF-16 one, and the two halves of an engine log that overlap (their shared events count once)."""
    _split_per_record(DAY, folder / "gateway", "rec", limit=120)
    (folder / "gateway" / "rec-broken.jsonl").write_bytes(DAY.read_bytes().splitlines(keepends=True)[0] + b'{"broken\n')
    (folder / "gateway" / "notes.txt").write_bytes(b"nothing a log format reads\n")
    (folder / "gateway" / "rec-empty.jsonl").write_bytes(b"")
    (folder / "gateway" / "rec-utf16.jsonl").write_bytes(DAY.read_bytes().splitlines(keepends=True)[1].decode().encode("utf-16"))
    engine = (ROOT / "sample_logs" / "engine" / "decode-0_0.log").read_bytes().splitlines(keepends=True)
    (folder / "engine").mkdir()
    (folder / "engine" / "decode-0_0.log").write_bytes(b"".join(engine[: len(engine) * 2 // 3]))
    (folder / "engine" / "decode-0_0.1.log").write_bytes(b"".join(engine[len(engine) // 3 :]))


def test_small_files_are_staged_in_batches_and_give_the_same_case_tables(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A file staged on its own cost a Parquet file made, written, closed, then read back: two thirds of
    what each of thousands of one-record files cost. Batched, the case tables are the same bytes."""
    _mixed_small_files(tmp_path / "in")
    inputs = [tmp_path / "in" / "gateway", tmp_path / "in" / "engine"]
    batched = api.ingest(tmp_path / "batched", inputs)
    staging = sorted(p.name for p in (tmp_path / "batched" / "staging").iterdir())
    assert any(".batch." in name for name in staging)
    assert len(staging) <= 3 * 4  # 125 files: 2 batches of 64 at most, 3 tables each (an engine log alone)
    with monkeypatch.context() as m:
        _unbatched(m)
        alone = api.ingest(tmp_path / "alone", inputs)
    assert not any(".batch." in p.name for p in (tmp_path / "alone" / "staging").iterdir())
    assert batched.manifest.reconciled and batched.manifest.tables.quarantine >= 2
    assert batched.manifest.tables.engine_events > 0 and sum(f["duplicate"] for f in batched.manifest.files) > 0
    assert _case_bytes(tmp_path / "batched") == _case_bytes(tmp_path / "alone")
    assert batched.run_files == alone.run_files


def test_split_logs_in_small_files_join_across_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Split logs (request and response halves logged apart), one record per file: a request's halves lie
    in different batches, and every batch holds several files' rows."""
    api.simulate(tmp_path / "sim", seed=5, scale="small", fmt="openai-split", compress=False)
    for log in sorted((tmp_path / "sim" / "gateway").glob("*.jsonl")):
        _split_per_record(log, tmp_path / "objects", log.stem)
    batched = api.ingest(tmp_path / "batched", [tmp_path / "objects"], fmt="openai-split")
    assert any(".batch." in p.name for p in (tmp_path / "batched" / "staging").iterdir())
    with monkeypatch.context() as m:
        _unbatched(m)
        api.ingest(tmp_path / "alone", [tmp_path / "objects"], fmt="openai-split")
    assert batched.manifest.reconciled and batched.manifest.tables.exchanges > 100
    assert _case_bytes(tmp_path / "batched") == _case_bytes(tmp_path / "alone")


def test_a_file_ingested_later_between_a_batchs_files_keeps_the_case_order(tmp_path: Path) -> None:
    """A batch's files are read apart when a later ingest adds a file that sorts between them: the case
    is the one ingesting all the files at once gives."""
    files = _split_per_record(DAY, tmp_path / "objects", "rec", limit=30)
    first, later = files[0::2], files[1::2]
    api.ingest(tmp_path / "twice", first)
    again = api.ingest(tmp_path / "twice", later)
    once = api.ingest(tmp_path / "once", files)
    assert again.manifest.reconciled and again.manifest.tables.exchanges == once.manifest.tables.exchanges == len(files)
    batches = [p for p in (tmp_path / "twice" / "staging").iterdir() if ".batch." in p.name]
    assert len(batches) == 2  # one per run, their files interleaved in the case's order
    assert _case_bytes(tmp_path / "twice")["exchanges.parquet"] == _case_bytes(tmp_path / "once")["exchanges.parquet"]


def test_a_batch_left_by_an_interrupted_run_is_cleared_when_one_of_its_files_is_staged_again(tmp_path: Path) -> None:
    """An ingest stopped after staging a batch, named after a file this run does not read: the file this
    run stages again must not be read twice (once from the stale batch)."""
    files = _split_per_record(DAY, tmp_path / "objects", "rec", limit=4)
    api.ingest(tmp_path / "earlier", files)
    stale = [p for p in (tmp_path / "earlier" / "staging").iterdir() if ".batch." in p.name]
    assert len(stale) == 1 and stale[0].name.startswith(hashlib.sha256(files[0].read_bytes()).hexdigest())
    staging = tmp_path / "case" / "staging"
    staging.mkdir(parents=True)
    (staging / stale[0].name).write_bytes(stale[0].read_bytes())
    result = api.ingest(tmp_path / "case", files[2:])  # the stale batch's first file is not among them
    assert result.manifest.reconciled
    assert result.manifest.tables.exchanges == 2 and sum(f["duplicate"] for f in result.manifest.files) == 0
    assert not (staging / stale[0].name).exists()


def _big_records(file_no: int, count: int) -> bytes:
    """``count`` LiteLLM records of the sample day, each with a prompt of about 200 KB of one phrase: a
    compressed file of them is small and stages megabytes."""
    import copy
    import json

    records = [r for r in (json.loads(x) for x in DAY.read_text(encoding="utf-8").splitlines() if x.strip())
               if isinstance(r.get("standard_logging_object", {}).get("messages"), list)]
    out = []
    for i in range(count):
        record = copy.deepcopy(records[(file_no * count + i) % len(records)])
        logged = record["standard_logging_object"]
        logged["id"] = f"chatcmpl-big-{file_no}-{i}"
        # (each its own prompt: two files of the same exchanges under other ids would be one exchange logged twice,
        # which the finaliser folds)
        logged["messages"][-1]["content"] = f"file {file_no} record {i}: " + "lorem ipsum dolor sit amet " * 8000
        out.append(json.dumps(record))
    return ("\n".join(out) + "\n").encode()


def test_a_small_compressed_file_that_stages_megabytes_gives_the_same_case_tables(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A .gz of 100 KB can stage far more than the finaliser reads at once; its size on disk says nothing
    of that, so it is staged alone (batched, its rows went to the writer in one piece, and the case table's
    pages, so its bytes, differed)."""
    import gzip

    folder = tmp_path / "in"
    folder.mkdir()
    for file_no in (0, 1):
        (folder / f"big-{file_no}.jsonl.gz").write_bytes(gzip.compress(_big_records(file_no, 40), mtime=0))
    assert all(p.stat().st_size < (1 << 20) for p in folder.iterdir())
    batched = api.ingest(tmp_path / "batched", [folder])
    with monkeypatch.context() as m:
        _unbatched(m)
        api.ingest(tmp_path / "alone", [folder])
    assert batched.manifest.tables.exchanges == 80 and batched.manifest.reconciled
    assert _case_bytes(tmp_path / "batched") == _case_bytes(tmp_path / "alone")


def test_an_unreadable_batch_staging_file_of_content_not_in_the_case_is_ignored(tmp_path: Path) -> None:
    """A batch file left half-copied by someone else's hand, of content the case never held, must not stop
    every later ingest into the case (a file of one content under such a name is never read)."""
    files = _split_per_record(DAY, tmp_path / "objects", "rec", limit=3)
    staging = tmp_path / "case" / "staging"
    staging.mkdir(parents=True)
    (staging / f"{'f' * 64}.batch.exchanges.parquet").write_bytes(b"PAR1 not a parquet file")
    result = api.ingest(tmp_path / "case", files)
    assert result.manifest.reconciled and result.manifest.tables.exchanges == 3


def test_an_unreadable_batch_staging_file_of_the_case_is_a_clear_error(tmp_path: Path) -> None:
    from forensics.errors import CaseError

    files = _split_per_record(DAY, tmp_path / "objects", "rec", limit=3)
    api.ingest(tmp_path / "case", files[:2])
    batch = next(p for p in (tmp_path / "case" / "staging").iterdir() if ".batch." in p.name)
    batch.write_bytes(b"PAR1 damaged")
    with pytest.raises(CaseError) as info:
        api.ingest(tmp_path / "case", files[2:])
    assert batch.name in str(info.value) and "new case folder" in (info.value.fix or "")


def test_a_batchs_counts_go_to_its_own_files_on_the_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches staged by the pool's workers: each file of a batch gets its own line counts (a broken line,
    an unrecognised file, duplicate engine events), as when every file is staged alone in one process."""
    from forensics import ingest as ingest_module

    _mixed_small_files(tmp_path / "in")
    inputs = [tmp_path / "in" / "gateway", tmp_path / "in" / "engine"]
    with monkeypatch.context() as m:
        _unbatched(m)
        api.ingest(tmp_path / "alone", inputs)
    started = _pool_forced(monkeypatch)
    monkeypatch.setattr(ingest_module, "BATCH_FILES", 8)  # 16 batches, on both workers
    api.ingest(tmp_path / "pooled", inputs)
    assert started
    assert _case_bytes(tmp_path / "pooled") == _case_bytes(tmp_path / "alone")


def test_files_of_several_runs_interleaved_give_the_case_of_files_staged_alone(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Three ingests whose files sort between each other's (each run's batch read as many segments),
    with quarantined lines and engine events among them (files named one by one: an unrecognised, an
    empty or a UTF-16 one would be an error)."""
    _mixed_small_files(tmp_path / "in")
    files = sorted(p for p in (tmp_path / "in").rglob("*") if p.is_file() and p.name not in ("notes.txt", "rec-empty.jsonl", "rec-utf16.jsonl"))
    runs = [files[0::3], files[1::3], files[2::3]]

    def ingest_runs(case: Path) -> None:
        for run in runs:
            assert api.ingest(case, run).manifest.reconciled

    ingest_runs(tmp_path / "batched")
    assert len([p for p in (tmp_path / "batched" / "staging").iterdir() if ".batch." in p.name]) >= 3
    with monkeypatch.context() as m:
        _unbatched(m)
        ingest_runs(tmp_path / "alone")
    assert _case_bytes(tmp_path / "batched") == _case_bytes(tmp_path / "alone")


def test_a_small_plain_file_that_stages_megabytes_is_staged_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain file under 1 MB can stage more than the finaliser reads at once: each empty choice of a
    LiteLLM response ('{},') renders as a marked block of the answer. Read from a batch in one piece and
    from its own staging file in several, its rows gave the case table other bytes."""
    import json

    records = [r for r in (json.loads(x) for x in DAY.read_text(encoding="utf-8").splitlines() if x.strip())
               if "standard_logging_object" in r]
    folder = tmp_path / "in"
    folder.mkdir()
    out = []
    for i in range(20):
        record = json.loads(json.dumps(records[i]))
        logged = record["standard_logging_object"]
        logged["messages"] = [{"role": "user", "content": f"question {i}"}]
        logged["response"] = {"choices": [{}] * 15000, "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
        out.append(json.dumps(record, separators=(",", ":")))
    (folder / "a-expanding.jsonl").write_text("\n".join(out) + "\n{broken\n", encoding="utf-8")  # a quarantine row too
    for i, name in ((30, "b-plain.jsonl"), (31, "c-plain.jsonl")):
        (folder / name).write_text(json.dumps(records[i]) + "\n", encoding="utf-8")
    assert (folder / "a-expanding.jsonl").stat().st_size < (1 << 20)
    batched = api.ingest(tmp_path / "batched", [folder])
    staging = [p.name for p in (tmp_path / "batched" / "staging").iterdir()]
    assert any(".batch." in name for name in staging) and any(".00000.exchanges." in name for name in staging)
    with monkeypatch.context() as m:
        _unbatched(m)
        api.ingest(tmp_path / "alone", [folder])
    assert batched.manifest.tables.exchanges == 22 and batched.manifest.tables.quarantine == 1 and batched.manifest.reconciled
    assert _case_bytes(tmp_path / "batched") == _case_bytes(tmp_path / "alone")


@pytest.mark.parametrize("named", [False, True])
def test_a_file_removed_after_it_was_hashed_is_unreadable_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      named: bool) -> None:
    """Removed between its hashing and its sniffing, a file found in a folder is skipped as unreadable, a file
    named is an error saying it cannot be read; both were an internal error (FileNotFoundError)."""
    from forensics import ingest as ingest_module
    from forensics.errors import InputError

    files = _split_per_record(DAY, tmp_path / "objects", "rec", limit=3)
    real = ingest_module.is_parquet

    def vanishing(path: Path) -> bool:
        if path.name == files[1].name:
            path.unlink(missing_ok=True)
        return real(path)

    monkeypatch.setattr(ingest_module, "is_parquet", vanishing)
    if named:
        with pytest.raises(InputError, match="cannot read the file"):
            api.ingest(tmp_path / "case", files)
        return
    result = api.ingest(tmp_path / "case", [tmp_path / "objects"])
    assert result.manifest.tables.exchanges == 2 and result.manifest.reconciled
    assert [e["kind"] for e in result.manifest.skipped_inputs] == ["unreadable"]


def test_a_format_registered_at_run_time_is_sniffed_as_without_the_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's workers import the formats afresh: one registered at run time is unknown there, and a file
    it also claims would be sniffed as the other format alone. The files are then examined in this process."""
    import dataclasses

    from forensics import ingest as ingest_module
    from forensics.ingest.registry import FORMATS, RecordKind

    files = _split_per_record(DAY, tmp_path / "objects", "rec", limit=12)
    FORMATS.register(dataclasses.replace(FORMATS.get("litellm"), name="also-litellm", sniff=lambda lines, name: True,
                                         kinds=(RecordKind("also_record", precedence=99),)))
    try:
        monkeypatch.setattr(ingest_module, "PARALLEL_FILES", 5)
        result = api.ingest(tmp_path / "case", [tmp_path / "objects"])
    finally:
        FORMATS.unregister("also-litellm")
    statuses = {f["status"] for f in result.manifest.files}
    assert statuses == {"skipped: format ambiguous"} and len(result.manifest.files) == len(files)


def test_files_of_a_format_registered_at_run_time_are_read_in_this_process(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's workers import the formats afresh and would not know it: examined there, the files were
    taken as not recognised; staged there, the run failed ("unknown format")."""
    from test_format_registry import TOY_LINE, _toy

    from forensics import ingest as ingest_module
    from forensics.ingest.registry import FORMATS

    folder = tmp_path / "toys"
    folder.mkdir()
    for i in range(12):
        (folder / f"t{i:02d}.txt").write_text(TOY_LINE.replace("chatcmpl-p1", f"chatcmpl-{i}") + "\n", encoding="utf-8")
    started = _pool_forced(monkeypatch)
    monkeypatch.setattr(ingest_module, "BATCH_FILES", 4)  # three batches: worth the pool
    FORMATS.register(_toy())
    try:
        result = api.ingest(tmp_path / "case", [folder])
    finally:
        FORMATS.unregister("toy-log")
    assert started == []
    assert {(f["format"], f["ingested"]) for f in result.manifest.files} == {("toy-log", 1)}
    assert result.manifest.tables.exchanges == 12


def test_a_file_removed_before_it_is_staged_is_reported_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Removed after it was hashed and sniffed, before it was read: the file's entry says it could not be
    read (a quarantine row stands for it); it was an internal error (FileNotFoundError)."""
    from forensics import ingest as ingest_module

    files = _split_per_record(DAY, tmp_path / "objects", "rec", limit=3)
    real = ingest_module.batched

    def removing(*args: Any, **kwargs: Any) -> Any:
        files[1].unlink()
        return real(*args, **kwargs)

    monkeypatch.setattr(ingest_module, "batched", removing)
    result = api.ingest(tmp_path / "case", [tmp_path / "objects"])
    assert result.manifest.reconciled and result.manifest.tables.exchanges == 2
    gone = next(f for f in result.manifest.files if f["path"].endswith(files[1].name))
    assert gone["status"] == "ingested with problems" and "could not be read" in gone["problems"][0]


def test_a_batchs_quarantine_rows_over_several_row_groups_give_the_same_case_tables(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A small file of thousands of broken lines between one-record files: its quarantine rows span several
    of the batch's row groups, and are read a few thousand at a time (a 1 MB file of broken lines is half a
    million rows: the finaliser read a batch whole), in the pieces its own staging file gives."""
    folder = tmp_path / "in"
    _split_per_record(DAY, folder, "rec", limit=5)
    first = DAY.read_bytes().splitlines(keepends=True)[0]
    (folder / "rec-00002-broken.jsonl").write_bytes(first + b"{\n" * 9000)
    batched = api.ingest(tmp_path / "batched", [folder])
    assert any(".batch.quarantine." in p.name for p in (tmp_path / "batched" / "staging").iterdir())
    with monkeypatch.context() as m:
        _unbatched(m)
        api.ingest(tmp_path / "alone", [folder])
    assert batched.manifest.tables.quarantine == 9000 and batched.manifest.reconciled
    assert _case_bytes(tmp_path / "batched") == _case_bytes(tmp_path / "alone")


@pytest.mark.parametrize("grown", ["first", "last"])
def test_a_log_that_grew_keeps_the_rows_of_the_small_files_staged_with_it(tmp_path: Path, grown: str) -> None:
    """A live log ingested while short was staged in a batch with other small files (the engine logs).
    Ingested again once complete, it replaces its short copy, and its batch went with it: the other files,
    already in the case, were not staged again, and the engine events of the whole case were lost (the
    manifest still reconciled). The batch keeps their rows; the case is the one a fresh ingest gives."""
    logs = tmp_path / "logs"
    (logs / "engine").mkdir(parents=True)
    for p in sorted((ROOT / "sample_logs" / "engine").iterdir()):
        (logs / "engine" / p.name).write_bytes(p.read_bytes())
    # Named to sort first or last among the batch's files (the batch is named after its first).
    live = logs / ("a-live.jsonl" if grown == "first" else "z-live.jsonl")
    complete = DAY.read_bytes()
    live.write_bytes(complete[:300_000])  # cut mid-line, as a log still being written
    inputs = [live, logs / "engine"]
    early = api.ingest(tmp_path / "case", inputs)
    assert early.manifest.tables.engine_events > 0
    assert any(".batch." in p.name for p in (tmp_path / "case" / "staging").iterdir())
    live.write_bytes(complete[:900_000])  # still small: staged in a batch of its own this time
    again = api.ingest(tmp_path / "case", inputs)
    fresh = api.ingest(tmp_path / "fresh", inputs)
    assert again.manifest.tables == fresh.manifest.tables
    assert again.manifest.tables.engine_events == early.manifest.tables.engine_events
    assert again.manifest.reconciled
    for table in ("exchanges", "engine_events", "quarantine"):
        assert _records(table_rows(tmp_path / "case" / f"{table}.parquet")) == _records(
            table_rows(tmp_path / "fresh" / f"{table}.parquet")), table


def test_a_run_stopped_while_a_batch_is_written_again_leaves_a_case_that_takes_more_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped between writing a batch again (without the grown log's short copy) and removing the earlier
    one, a run left the engine logs in two batches: every later ingest stopped with an internal error. The
    next run keeps each file's rows in the batch written again, and the case is the one a fresh ingest of
    the same files gives."""
    logs = tmp_path / "logs"
    (logs / "engine").mkdir(parents=True)
    for p in sorted((ROOT / "sample_logs" / "engine").iterdir()):
        (logs / "engine" / p.name).write_bytes(p.read_bytes())
    complete = DAY.read_bytes()
    live = logs / "a-live.jsonl"
    live.write_bytes(complete[:300_000])
    api.ingest(tmp_path / "case", [live, logs / "engine"])
    (tmp_path / "short").mkdir()
    (tmp_path / "short" / "a-live.jsonl").write_bytes(live.read_bytes())
    live.write_bytes(complete[:900_000])
    real_unlink = Path.unlink

    def stopped(self: Path, missing_ok: bool = False) -> None:
        if ".batch." in self.name:
            raise KeyboardInterrupt
        real_unlink(self, missing_ok=missing_ok)

    with monkeypatch.context() as m:
        m.setattr(Path, "unlink", stopped)
        with pytest.raises(KeyboardInterrupt):
            api.ingest(tmp_path / "case", [live, logs / "engine"])
    other = logs / "b-other.jsonl"
    other.write_bytes(complete[:50_000].rsplit(b"\n", 1)[0] + b"\n")
    later = api.ingest(tmp_path / "case", [other])
    fresh = api.ingest(tmp_path / "fresh", [tmp_path / "short" / "a-live.jsonl", logs / "engine", other])
    assert later.manifest.tables == fresh.manifest.tables
    for table in ("exchanges", "engine_events", "quarantine"):
        assert _records(table_rows(tmp_path / "case" / f"{table}.parquet")) == _records(
            table_rows(tmp_path / "fresh" / f"{table}.parquet")), table
