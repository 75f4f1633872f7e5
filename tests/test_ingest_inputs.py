"""Inputs are evidence: only regular files inside the folder given are read, every name of a file
is recorded, and nothing in the input tree is ever written."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from forensics import api
from forensics.errors import InputError
from forensics.report import manifest as report_manifest

CASE_TOML = """name = "inputs"
model = "glm-5.3"
window_start = "2026-08-27T00:00:00Z"
window_end = "2026-09-09T00:00:00Z"
real_ceiling_tokens = 2000

[[inputs]]
format = "auto"
path = "logs"
"""


def request(i: int) -> str:
    return json.dumps({"request_id": f"r-{i}", "timestamp": "2026-08-30T03:12:09Z", "tenant_id": f"acct-{i}",
                       "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": f"question {i}"}]}})


def logs_folder(tmp_path: Path) -> Path:
    logs = tmp_path / "logs"
    (logs / "gateway").mkdir(parents=True)
    (logs / "gateway" / "requests.jsonl").write_text(request(1) + "\n" + request(2) + "\n")
    return logs


def quarantine(case: Path) -> list[dict[str, Any]]:
    return pq.read_table(case / "quarantine.parquet").to_pylist()


def snapshot(root: Path) -> dict[str, tuple[int, int, str]]:
    """Every entry under ``root``: mode, mtime and content hash (links by their text)."""
    out = {}
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            p = Path(folder) / name
            st = os.lstat(p)
            if p.is_symlink():
                digest = "link:" + os.readlink(p)
            elif p.is_file():
                digest = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                digest = ""
            out[str(p.relative_to(root))] = (st.st_mode, st.st_mtime_ns, digest)
    return out


def test_symlink_to_a_file_outside_the_folder_is_not_read(tmp_path: Path) -> None:
    logs = logs_folder(tmp_path)
    secret = tmp_path / "elsewhere" / "passwd"
    secret.parent.mkdir()
    secret.write_text(request(9) + "\n")  # readable as a log: it must still not be ingested
    (logs / "gateway" / "passwd").symlink_to(os.path.relpath(secret, logs / "gateway"))
    (logs / "gateway" / "etc-passwd").symlink_to("/etc/passwd")
    result = api.ingest(tmp_path / "case", [logs])
    assert [Path(f["path"]).name for f in result.manifest["files"]] == ["requests.jsonl"]
    assert result.manifest["tables"]["exchanges"] == 2
    skipped = {Path(e["path"]).name: e for e in result.manifest["skipped_inputs"]}
    assert {k: e["kind"] for k, e in skipped.items()} == {"etc-passwd": "symlink_outside_root", "passwd": "symlink_outside_root"}
    rows = {Path(r["source_file"]).name: r for r in quarantine(tmp_path / "case")}
    assert "outside the input folder" in rows["etc-passwd"]["reason"] and "Fix:" in rows["etc-passwd"]["reason"]
    assert rows["passwd"]["source_line"] is None and rows["passwd"]["excerpt"] is None
    for name in ("manifest.json", "quarantine.parquet"):  # no path leading out of the folder is recorded
        data = (tmp_path / "case" / name).read_bytes()
        assert b"elsewhere" not in data and b"../" not in data and b"/etc/" not in data


def test_symlink_inside_the_folder_is_read_and_both_names_recorded(tmp_path: Path) -> None:
    logs = logs_folder(tmp_path)
    (logs / "latest.jsonl").symlink_to("gateway/requests.jsonl")
    result = api.ingest(tmp_path / "case", [logs])
    (entry,) = result.manifest["files"]
    assert sorted(Path(p).as_posix().split("logs/")[-1] for p in entry["paths"]) == ["gateway/requests.jsonl", "latest.jsonl"]
    assert (entry["ingested"], entry["duplicate"]) == (2, 0)
    assert result.manifest["skipped_inputs"] == []


def test_dangling_and_folder_symlinks_are_rows_not_errors(tmp_path: Path) -> None:
    logs = logs_folder(tmp_path)
    (logs / "gone.jsonl").symlink_to("rotated-away.jsonl")
    (logs / "loop").symlink_to(".")  # followed, a walk would never end
    (logs / "self.jsonl").symlink_to("self.jsonl")
    result = api.ingest(tmp_path / "case", [logs])
    kinds = {Path(e["path"]).name: e["kind"] for e in result.manifest["skipped_inputs"]}
    assert kinds == {"gone.jsonl": "dangling_symlink", "loop": "symlink_to_folder", "self.jsonl": "dangling_symlink"}
    assert result.manifest["tables"]["exchanges"] == 2
    assert sorted(Path(r["source_file"]).name for r in quarantine(tmp_path / "case")) == ["gone.jsonl", "loop", "self.jsonl"]
    assert any("not regular files" in n for n in result.manifest["notes"])


def ingest_guarded(case: Path, paths: list[Path], fifos: list[Path]) -> Any:
    """api.ingest with a hang guard: if it opens one of ``fifos`` and waits on it, the FIFOs are
    fed EOF so the test fails with a message instead of hanging forever."""
    done = threading.Event()
    out: dict[str, Any] = {}

    def work() -> None:
        try:
            out["result"] = api.ingest(case, paths)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            out["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, daemon=True).start()
    if not done.wait(120):
        for fifo in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("ingest opened a FIFO and waited on it")
    if "error" in out:
        raise out["error"]
    return out["result"]


def test_fifo_and_socket_are_skipped_never_opened(tmp_path: Path) -> None:
    logs = logs_folder(tmp_path)
    os.mkfifo(logs / "pipe.jsonl")
    (logs / "to-pipe.jsonl").symlink_to("pipe.jsonl")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(logs / "s.sock"))
        has_socket = True
    except OSError:  # a path too long for AF_UNIX: the FIFO still proves the point
        has_socket = False
    try:
        result = ingest_guarded(tmp_path / "case", [logs], [logs / "pipe.jsonl"])
    finally:
        sock.close()
    kinds = {Path(e["path"]).name: e["kind"] for e in result.manifest["skipped_inputs"]}
    assert kinds == {"pipe.jsonl": "fifo", "to-pipe.jsonl": "fifo"} | ({"s.sock": "socket"} if has_socket else {})
    assert result.manifest["tables"]["exchanges"] == 2
    assert all("not opened" in r["reason"] and "Fix:" in r["reason"] for r in quarantine(tmp_path / "case"))


def test_device_in_a_folder_is_skipped(tmp_path: Path) -> None:
    logs = logs_folder(tmp_path)
    try:
        os.mknod(logs / "null.jsonl", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # a copy of /dev/null
    except (OSError, AttributeError):
        pytest.skip("this system does not let the tests make a device node")
    (logs / "dev-null.jsonl").symlink_to("/dev/null")  # a device, and outside the folder
    result = ingest_guarded(tmp_path / "case", [logs], [])
    kinds = {Path(e["path"]).name: e["kind"] for e in result.manifest["skipped_inputs"]}
    assert kinds == {"null.jsonl": "device", "dev-null.jsonl": "symlink_outside_root"}
    assert result.manifest["tables"]["exchanges"] == 2


def test_explicit_fifo_or_escaping_link_is_one_clear_error(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.jsonl")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "link.jsonl").symlink_to("/etc/passwd")
    for path, words in ((tmp_path / "pipe.jsonl", "named pipe"), (tmp_path / "sub" / "link.jsonl", "outside")):
        with pytest.raises(InputError) as exc:
            ingest_guarded(tmp_path / "case", [path], [tmp_path / "pipe.jsonl"])
        assert words in str(exc.value) and "Fix:" in str(exc.value)
    assert not (tmp_path / "case" / "exchanges.parquet").exists()


def test_the_same_file_under_two_names_records_both_in_the_report_manifest(tmp_path: Path) -> None:
    logs = logs_folder(tmp_path)
    (logs / "copy").mkdir()
    (logs / "copy" / "requests-2026-08-30.jsonl").write_bytes((logs / "gateway" / "requests.jsonl").read_bytes())
    result = api.ingest(tmp_path / "case", [logs])
    (entry,) = result.manifest["files"]
    root = tmp_path
    inputs = report_manifest.input_entries(result.manifest["files"], root)
    assert [e["path"] for e in inputs] == ["logs/copy/requests-2026-08-30.jsonl", "logs/gateway/requests.jsonl"]
    assert len({e["sha256"] for e in inputs}) == 1 and all(e["size"] == entry["size"] for e in inputs)
    counted = [e for e in inputs if "lines" in e]
    assert len(counted) == 1 and counted[0]["lines"] == 2  # the counts are the file's, once
    (other,) = [e for e in inputs if "lines" not in e]
    assert other["same_content_as"] == counted[0]["path"]


def test_report_manifest_names_the_link_not_its_target(tmp_path: Path) -> None:
    logs = logs_folder(tmp_path)
    (logs / "latest.jsonl").symlink_to("gateway/requests.jsonl")
    result = api.ingest(tmp_path / "case", [logs / "latest.jsonl"])  # named explicitly, target in its folder tree
    inputs = report_manifest.input_entries(result.manifest["files"], tmp_path)
    assert [e["path"] for e in inputs] == ["logs/latest.jsonl"]


def test_verify_notices_a_change_under_either_name(tmp_path: Path) -> None:
    root = tmp_path / "incident"
    logs = logs_folder(root)
    (logs / "copy.jsonl").write_bytes((logs / "gateway" / "requests.jsonl").read_bytes())
    (root / "case.toml").write_text(CASE_TOML)
    result = api.run(root, tmp_path / "out")
    report = result.report.report_dir
    assert api.verify(report).ok
    for name in ("logs/copy.jsonl", "logs/gateway/requests.jsonl"):
        original = (root / name).read_bytes()
        (root / name).write_text(request(1) + "\n" + request(3) + "\n")
        drift = api.verify(report).drift
        assert [(d.kind, d.path, d.problem) for d in drift] == [("input", name, "changed")]
        (root / name).write_bytes(original)


def test_a_run_never_writes_the_input_tree(tmp_path: Path) -> None:
    root = tmp_path / "incident"
    logs = logs_folder(root)
    (logs / "gateway" / "old.jsonl.gz").write_bytes(gzip.compress((request(5) + "\n").encode()))
    (logs / "notes.txt").write_text("not a log\n")
    (logs / "dangling.jsonl").symlink_to("nowhere")
    (root / "case.toml").write_text(CASE_TOML)
    before = snapshot(root)
    api.run(root, tmp_path / "out")
    assert snapshot(root) == before


def test_unreadable_file_in_a_folder_is_a_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import forensics.ingest as ingest_mod

    logs = logs_folder(tmp_path)
    (logs / "locked.jsonl").write_text(request(3) + "\n")
    real = ingest_mod.scan_file

    def scan(path: Path, split: int) -> Any:
        if path.name == "locked.jsonl":  # tests run as root, so a real EACCES cannot be made
            raise PermissionError(13, "Permission denied")
        return real(path, split)

    monkeypatch.setattr(ingest_mod, "scan_file", scan)
    result = api.ingest(tmp_path / "case", [logs])
    assert [(Path(e["path"]).name, e["kind"]) for e in result.manifest["skipped_inputs"]] == [("locked.jsonl", "unreadable")]
    assert "Permission denied" in result.manifest["skipped_inputs"][0]["reason"]


def _unlistable(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Folders named ``name`` cannot be listed (tests run as root, so a real EACCES cannot be made)."""
    real = os.scandir

    def scandir(path: Any = ".") -> Any:
        if Path(path).name == name:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_subfolder_that_cannot_be_listed_is_a_row_and_a_folder_named_so_is_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's folder whose permissions forbid listing it held logs nobody read. Before, the walk passed
    over it without a word: no quarantine row, no skipped input, a case that looked complete."""
    logs = logs_folder(tmp_path)
    (logs / "node-b").mkdir()
    (logs / "node-b" / "b.jsonl").write_text(request(3) + "\n")
    _unlistable(monkeypatch, "node-b")
    result = api.ingest(tmp_path / "case", [logs])
    (entry,) = result.manifest["skipped_inputs"]
    assert (Path(entry["path"]).name, entry["kind"]) == ("node-b", "unreadable")
    assert "could not be listed" in entry["reason"] and "Permission denied" in entry["reason"]
    rows = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert [Path(r["source_file"]).name for r in rows] == ["node-b"]
    with pytest.raises(InputError, match="could not be listed"):
        api.ingest(tmp_path / "case2", [logs / "node-b"])


def test_a_file_swapped_for_a_fifo_after_the_walk_is_refused_not_waited_on(tmp_path: Path) -> None:
    from forensics.ingest import reader

    fifo = tmp_path / "swapped.jsonl"
    os.mkfifo(fifo)
    done = threading.Event()
    raised: list[BaseException] = []

    def work() -> None:
        try:
            reader.scan_file(fifo, 1 << 20)  # the first open of every input file
        except OSError as exc:
            raised.append(exc)
        finally:
            done.set()

    threading.Thread(target=work, daemon=True).start()
    if not done.wait(120):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("the reader opened a FIFO and waited on it")
    assert raised and isinstance(raised[0], reader.NotRegularFile)


def test_a_file_that_becomes_unreadable_after_the_walk_is_a_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import forensics.ingest as ingest_mod

    logs = logs_folder(tmp_path)
    (logs / "swapped.jsonl").write_text(request(3) + "\n")
    found = ingest_mod.expand_inputs

    def walk_then_swap(paths: Any, exclude: Any = None, literal: bool = False) -> Any:
        out = found(paths, exclude, literal)
        (logs / "swapped.jsonl").unlink()
        os.mkfifo(logs / "swapped.jsonl")  # replaced between the walk and the first read
        return out

    monkeypatch.setattr(ingest_mod, "expand_inputs", walk_then_swap)
    result = ingest_guarded(tmp_path / "case", [logs], [logs / "swapped.jsonl"])
    assert [(Path(e["path"]).name, e["kind"]) for e in result.manifest["skipped_inputs"]] == [("swapped.jsonl", "unreadable")]
    assert result.manifest["tables"]["exchanges"] == 2


DATASET_CASE = """name = "lake"
model = "glm-5.3"
window_start = "2026-08-27T00:00:00Z"
window_end = "2026-09-09T00:00:00Z"
real_ceiling_tokens = 2000

[[inputs]]
format = "mapped"
path = "PATH"

[inputs.fields]
request_id = "rid"
tenant_id = "org"
received_at = "ts"
model = "model"
prompt_text = "prompt"
response_text = "answer"
"""


def parquet_dataset(root: Path) -> Path:
    """A Parquet dataset as Spark writes one: ``day=`` partition folders of part files, and the
    bookkeeping beside them (commit markers, checksums, an unfinished attempt's part file)."""
    import pyarrow as pa

    rows = [{"rid": f"r-{i}", "org": f"acct-{i % 3}", "ts": f"2026-08-{27 + i % 2}T03:12:0{i}Z", "model": "glm-5.3",
             "prompt": f"question {i}", "answer": f"answer {i}", "day": f"2026-08-{27 + i % 2}"} for i in range(6)]
    pq.write_to_dataset(pa.Table.from_pylist(rows), root, partition_cols=["day"],
                        basename_template="part-{i}-c000.snappy.parquet")
    (root / "_SUCCESS").write_bytes(b"")
    part = root / "day=2026-08-27"
    (part / "_committed_4711").write_text('{"added":["part-0-c000.snappy.parquet"],"removed":[]}\n')
    (part / "_started_4711").write_text("")
    (part / ".part-0-c000.snappy.parquet.crc").write_bytes(b"crc\x00\x01\x02")
    (part / "part-0-c000.snappy.parquet.crc").write_bytes(b"crc\x00\x01\x02")  # written by some copy tools unhidden
    pq.write_table(pa.Table.from_pylist(rows[:1]).drop(["day"]).replace_schema_metadata(None), root / "_common_metadata")
    attempt = root / "_temporary" / "0" / "task_0001" / "day=2026-08-27"
    attempt.mkdir(parents=True)
    # A task attempt that never committed: its rows are not part of the dataset.
    pq.write_table(pa.Table.from_pylist([{**rows[0], "rid": "r-uncommitted"}]).drop(["day"]), attempt / "part-9.parquet")
    return root


@pytest.mark.parametrize("given", ["lake", "lake/**/*", "lake/**/*.parquet"])
def test_a_parquet_dataset_reads_its_part_files_and_skips_the_writers_bookkeeping(tmp_path: Path, given: str) -> None:
    from forensics.config import load_case_file

    parquet_dataset(tmp_path / "lake")
    (tmp_path / "lake" / "_notes.jsonl").write_text("not a log\n")  # only the writers' own names are left out: read
    (tmp_path / "case.toml").write_text(DATASET_CASE.replace("PATH", given), encoding="utf-8")
    cfg = load_case_file(tmp_path / "case.toml")
    spec = cfg.inputs[0]
    result = api.ingest(tmp_path / "case", [spec.path], fmt="mapped", config=cfg, profile=spec.profile)
    read = sorted(f["path"] for f in result.manifest.files)
    parts = ["lake/day=2026-08-27/part-0-c000.snappy.parquet", "lake/day=2026-08-28/part-0-c000.snappy.parquet"]
    assert read == (sorted([*parts, "lake/_notes.jsonl"]) if given != "lake/**/*.parquet" else parts)
    assert [f["path"] for f in result.run_files] == read  # each file once, though ``**/*`` also matches its folder
    exchanges = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert sorted(r["request_id"] for r in exchanges) == [f"r-{i}" for i in range(6)]
    assert {(r["source_file"], r["source_line"]) for r in exchanges if r["request_id"] == "r-1"} == {(parts[1], 1)}
    assert result.manifest.skipped_inputs == ()
    assert quarantine(tmp_path / "case") == []  # the bookkeeping is not quarantined either


def test_a_side_file_named_explicitly_is_read(tmp_path: Path) -> None:
    from forensics.ingest import expand_inputs

    parquet_dataset(tmp_path / "lake")
    marker = tmp_path / "lake" / "day=2026-08-27" / "_committed_4711"
    files, skipped = expand_inputs([marker])
    assert files == [(marker, True)] and skipped == []


def _after_the_hash(monkeypatch: pytest.MonkeyPatch, change: Callable[[Path], object]) -> None:
    """Change each input file right after ingest has hashed it, as a gateway still writing or a log
    rotation would."""
    import forensics.ingest as ingest_mod

    real = ingest_mod.scan_file

    def scan(path: Path, split: int) -> Any:
        hashed = real(path, split)
        change(path)
        return hashed

    monkeypatch.setattr(ingest_mod, "scan_file", scan)


def test_lines_appended_after_a_file_was_hashed_are_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Pointed at a live log, ingest hashed the file and then parsed it to its end: the lines the gateway
    # appended in between were ingested, and the SHA-256 in the manifest did not cover them. The rows must
    # be those of the bytes hashed; the manifest says how much was added and not read.
    logs = logs_folder(tmp_path)
    live = logs / "live.jsonl"
    live.write_text(request(1) + "\n" + request(2)[:40], encoding="utf-8")  # the last line half written

    def write_on(path: Path) -> None:  # the gateway writes on after the hash
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(request(2)[40:] + "\n" + request(3) + "\n")

    _after_the_hash(monkeypatch, write_on)
    result = api.ingest(tmp_path / "case", [live])
    entry = result.manifest["files"][0]
    assert entry["sha256"] == hashlib.sha256(request(1).encode() + b"\n" + request(2)[:40].encode()).hexdigest()
    assert (entry["lines"], entry["ingested"], entry["quarantined"]) == (2, 1, 1)  # the half line, as hashed
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["request_id"]).column(0).to_pylist()
    assert len(rows) == 1
    assert any("appended" in note and "live.jsonl" in note for note in result.manifest["notes"])
    assert entry["size"] == len(request(1)) + 1 + 40  # the bytes hashed
    # The half line is not parsed as if whole (a cut engine line "9000 > 8192" read as "9000 > 81"): it waits
    # in quarantine, saying why.
    [held] = [q for q in quarantine(tmp_path / "case") if q["source_line"] == 2]
    assert "still being written when the file was hashed" in held["reason"]


def test_a_file_cut_short_while_it_was_read_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logs = logs_folder(tmp_path)
    cut = logs / "rotated.jsonl"
    cut.write_text(request(1) + "\n" + request(2) + "\n", encoding="utf-8")
    _after_the_hash(monkeypatch, lambda path: os.truncate(path, len(request(1)) + 1))  # rotated in place
    result = api.ingest(tmp_path / "case", [cut])
    assert result.manifest["files"][0]["ingested"] == 1
    assert any("shrank" in note and "rotated.jsonl" in note for note in result.manifest["notes"])


def test_a_file_rewritten_after_it_was_hashed_is_damaged_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A log rotated in place (copytruncate) and refilled, or replaced by a new file of the same name, between
    # the hash and the read: its rows were parsed under the old SHA-256 as if it covered them.
    logs = logs_folder(tmp_path)
    swapped = logs / "swapped.jsonl"
    swapped.write_text(request(1) + "\n" + request(2) + "\n", encoding="utf-8")
    # The same length, other records.
    _after_the_hash(monkeypatch, lambda path: path.write_text(request(7) + "\n" + request(8) + "\n", encoding="utf-8"))
    result = api.ingest(tmp_path / "case", [swapped])
    entry = result.manifest["files"][0]
    assert entry["status"] == "ingested with problems"
    assert any("changed while it was read" in p for p in entry["problems"])
    damage = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["damage"]).column(0).to_pylist()
    assert damage and all(d and "truncated_file" in d for d in damage)  # every row read from it is in doubt


def test_a_symlink_loop_named_explicitly_says_so(tmp_path: Path) -> None:
    """Before, it read "no such file or folder" (the path does exist: it is a link that loops); inside a
    folder the same link was already named for what it is."""
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    with pytest.raises(InputError, match="symlink that cannot be followed") as exc:
        api.ingest(tmp_path / "case", [tmp_path / "loop1"])
    assert "no such file" not in str(exc.value)


def _tree_without_links(root: Path) -> None:
    for rel in ["a/x.jsonl", "a/b/y.json", "a/b/c/x.jsonl", "a/.h/x.jsonl", ".top/x.jsonl", "x.jsonl", "b/a/z.json",
                "b/_tmp/x.jsonl", "c1/q.txt"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("{}\n")


@pytest.mark.parametrize("pattern", ["**", "**/*", "**/*.jsonl", "*/**", "a/**", "a/**/x.jsonl", "**/a/**", "**/.h/*",
                                     "**/b", "a*/**/*", "**/**/*.json", "a/*/**/x.jsonl", "**/c?", "**b/*", "nope/**",
                                     "x.jsonl/**", "*.jsonl", "*/*", "a/*/*", "a/b/c/x.jsonl", "[ab]/*", ".top/*", "*/.h/*",
                                     "b/_tmp/*", "nope/*", "./a/*", "a/../b/*", "a//b/*"])
def test_a_pattern_matches_what_glob_matches_where_no_link_is_met(tmp_path: Path, pattern: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import glob

    from forensics.ingest.patterns import glob_matches

    _tree_without_links(tmp_path)
    monkeypatch.chdir(tmp_path)
    for given in (pattern, str(tmp_path / pattern)):
        # glob also gives "nope/" for a folder that does not exist, and "x.jsonl/" for a file: no such folder here
        expected = sorted({p for p in glob.glob(given, recursive=True) if not p.endswith(os.sep) or os.path.isdir(p)})
        found = glob_matches(given)
        # as ingest reads them: "a//b" and "a/b", "a/" and "a" are one path
        assert (sorted({Path(m) for m in found.matches}), found.links, found.unlisted) == (
            sorted({Path(m) for m in expected}), [], [])
        assert len(found.matches) == len(set(found.matches))


def test_a_double_star_pattern_names_the_folder_links_it_does_not_follow(tmp_path: Path) -> None:
    """``**`` followed every link to a folder: two links to a folder above them made the search endless,
    and a link to a folder elsewhere read it as if it lay under the pattern's folder."""
    logs = logs_folder(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "other.jsonl").write_text(request(9) + "\n")
    (logs / "gateway" / "up").symlink_to("..")
    (logs / "gateway" / "again").symlink_to("..")
    (logs / "away").symlink_to(tmp_path / "elsewhere")
    result = api.ingest(tmp_path / "case", [logs / "**" / "*.jsonl"])
    kinds = {Path(e["path"]).name: e["kind"] for e in result.manifest["skipped_inputs"]}
    assert kinds == {"again": "symlink_to_folder", "away": "symlink_outside_root", "up": "symlink_to_folder"}
    assert result.manifest["tables"]["exchanges"] == 2  # requests.jsonl, once; nothing from elsewhere
    assert sorted(Path(r["source_file"]).name for r in quarantine(tmp_path / "case")) == ["again", "away", "up"]


def test_a_double_star_pattern_whose_files_lie_only_beyond_links_says_so(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "other.jsonl").write_text(request(9) + "\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "node1").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(InputError) as exc:
        api.ingest(tmp_path / "case", [tmp_path / "logs" / "**" / "*.jsonl"])
    assert "the search passed over 1 entry" in str(exc.value) and "node1 (symlink_outside_root)" in str(exc.value)
    assert "give the folder a link points to" in str(exc.value)


def _links_beside_logs(tmp_path: Path) -> Path:
    logs = logs_folder(tmp_path)
    (tmp_path / "outside" / "node9").mkdir(parents=True)
    (tmp_path / "outside" / "node9" / "gateway.jsonl").write_text(request(9) + "\n")
    (tmp_path / "outside" / "x.jsonl").write_text(request(8) + "\n")
    (logs / "gateway" / "ext").symlink_to(tmp_path / "outside")
    (logs / "real").mkdir()
    (logs / "real" / "gateway.jsonl").write_text(request(7) + "\n")
    (logs / "node1").symlink_to("real")
    return logs


@pytest.mark.parametrize("pattern", ["**/*", "**/node*/gateway.jsonl", "**", "**/ext", "gateway/**/x.jsonl"])
def test_a_link_to_a_folder_below_double_star_is_never_read_and_named_once(tmp_path: Path, pattern: str) -> None:
    """A ``*`` or a name after ``**`` matched a link to a folder and read it (the files outside the input
    folder too), while the manifest said the link was not followed; ``logs/**`` named one link twice."""
    logs = _links_beside_logs(tmp_path)
    try:
        result = api.ingest(tmp_path / "case", [logs / pattern])
    except InputError as exc:  # nothing but links: the error names them
        assert "search passed over" in str(exc)
        return
    read = [Path(f["path"]).relative_to(logs).as_posix() for f in result.run_files if f["status"] == "ingested"]
    assert read and not [r for r in read if r.startswith(("gateway/ext", "node1"))]
    skipped = [Path(e["path"]).relative_to(logs).as_posix() for e in result.manifest["skipped_inputs"]]
    assert len(skipped) == len(set(skipped))
    kinds = {Path(e["path"]).name: e["kind"] for e in result.manifest["skipped_inputs"]}
    assert kinds.get("ext") in (None, "symlink_outside_root") and kinds.get("node1") in (None, "symlink_to_folder")


def test_a_folder_a_pattern_cannot_list_is_a_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """glob passed over a folder it could not list without a word: node-b's logs were missing from a case
    that looked complete, though a walk of the same folder names it."""
    logs = logs_folder(tmp_path)
    (logs / "node-b").mkdir()
    (logs / "node-b" / "b.jsonl").write_text(request(3) + "\n")
    _unlistable(monkeypatch, "node-b")
    for i, pattern in enumerate(["*/*.jsonl", "**/*.jsonl", "*", "**", "**/*", "node-*"]):
        result = api.ingest(tmp_path / f"case{i}", [logs / pattern])
        assert [(Path(e["path"]).name, e["kind"]) for e in result.manifest["skipped_inputs"]] == [("node-b", "unreadable")]


def test_a_pattern_never_reads_the_case_folder_inside_it(tmp_path: Path) -> None:
    """``logs/**/*`` with the case in logs/case: the second ingest read the case's own tables as inputs."""
    logs = logs_folder(tmp_path)
    api.ingest(logs / "case", [logs / "**" / "*"])
    result = api.ingest(logs / "case", [logs / "**" / "*"])
    assert not [f for f in result.manifest["files"] if "case" in Path(f["path"]).relative_to(logs).parts[:1]]
    assert result.manifest["tables"]["exchanges"] == 2


def test_a_wildcard_that_is_also_an_entrys_name_is_an_error_not_a_silent_choice(tmp_path: Path) -> None:
    """A stray folder literally named ``*`` beside node-1 and node-2 (left by a shell loop that matched
    nothing): ``logs/*/spend.jsonl`` read it alone and said nothing of the two nodes."""
    logs = tmp_path / "logs"
    for node in ("node-1", "node-2", "*"):
        (logs / node).mkdir(parents=True)
        (logs / node / "spend.jsonl").write_text(request(len(node)) + "\n")
    with pytest.raises(InputError) as exc:
        api.ingest(tmp_path / "case", [logs / "*" / "spend.jsonl"])
    assert "is both the name of an entry" in str(exc.value) and "node-1, node-2" in str(exc.value)
    assert "'[*]'" in str(exc.value)
    result = api.ingest(tmp_path / "case", [logs / "[*]" / "spend.jsonl"])  # the stray folder alone, as written
    assert [Path(f["path"]).parent.name for f in result.run_files] == ["*"]


@pytest.mark.parametrize(("setting", "first", "then"), [("timezone", "Asia/Tokyo", "UTC"),
                                                        ("tenant_field", "metadata.user_api_key_team_id", "auto")])
def test_a_case_ingested_with_other_settings_refuses_more_files(tmp_path: Path, setting: str, first: str,
                                                                 then: str) -> None:
    """Ingested again with another time zone, the files already in the case kept their rows read the first
    way (engine times nine hours off), while the manifest named only the new zone: a repeat of the run from
    a fresh case gave another report. The second ingest now stops before writing anything."""
    from forensics.config import CaseConfig
    from forensics.errors import ConfigError

    sample = Path(__file__).resolve().parent.parent / "sample_logs"
    engine, gateway = sample / "engine", sample / "gateway" / "litellm-callbacks-2026-08-27.jsonl"
    api.ingest(tmp_path / "case", [engine], config=CaseConfig(**{setting: first}))
    before = (tmp_path / "case" / "manifest.json").read_bytes()
    with pytest.raises(ConfigError) as err:
        api.ingest(tmp_path / "case", [engine, gateway], config=CaseConfig(**{setting: then}))
    assert setting in str(err.value) and "new case folder" in err.value.fix
    assert (tmp_path / "case" / "manifest.json").read_bytes() == before
    # With the settings it was ingested with, files are added as before.
    assert api.ingest(tmp_path / "case", [gateway], config=CaseConfig(**{setting: first})).manifest.reconciled


def test_a_linked_input_folder_beside_the_case_file_is_named_as_found(tmp_path: Path) -> None:
    """proj/gateway links to ../store/gw (evidence kept on another volume): the input is named gateway/...
    as the case file gives it, not by where the link leads (which differs from machine to machine)."""
    from forensics.config import load_case_file

    day = Path(__file__).resolve().parent.parent / "sample_logs" / "gateway" / "litellm-callbacks-2026-08-27.jsonl"
    (tmp_path / "proj").mkdir()
    (tmp_path / "store" / "gw").mkdir(parents=True)
    (tmp_path / "store" / "gw" / day.name).write_bytes(day.read_bytes())
    (tmp_path / "proj" / "gateway").symlink_to(Path("..") / "store" / "gw")
    (tmp_path / "proj" / "case.toml").write_text(
        'name = "x"\nmodel = "glm-5.3"\nwindow_start = "2026-08-25T00:00:00Z"\nwindow_end = "2026-08-31T00:00:00Z"\n'
        'real_ceiling_tokens = 8192\n[[inputs]]\nformat = "litellm"\npath = "gateway"\n', encoding="utf-8")
    cfg = load_case_file(tmp_path / "proj" / "case.toml")
    result = api.ingest(tmp_path / "case", [tmp_path / "proj" / "gateway"], config=cfg)
    assert [f["paths"] for f in result.manifest.files] == [[f"gateway/{day.name}"]]
    # Through the link and back out ("gateway/../other"): named where the file is, not "other/..." (the
    # name's ".." undone without following the link), which is no file beside the case file.
    (tmp_path / "store" / "other").mkdir()
    (tmp_path / "store" / "other" / "a.jsonl").write_bytes(day.read_bytes())
    result = api.ingest(tmp_path / "case2", [tmp_path / "proj" / "gateway" / ".." / "other" / "a.jsonl"], config=cfg)
    assert [f["paths"] for f in result.manifest.files] == [["../store/other/a.jsonl"]]


def test_another_tokenizer_under_the_same_file_name_is_another_setting(tmp_path: Path) -> None:
    """Hugging Face tokenizers are all named tokenizer.json: compared by name, another model's tokenizer was
    accepted into a case (the same prompt 4 tokens in one row, 27 in the next). Compared by content, it is
    refused, and the same file under another name is taken as the same tokenizer."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from forensics.config import CaseConfig
    from forensics.errors import ConfigError

    def tokenizer(folder: str, vocab: dict[str, int]) -> Path:
        (tmp_path / folder).mkdir()
        tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.save(str(tmp_path / folder / "tokenizer.json"))
        return tmp_path / folder / "tokenizer.json"

    a = tokenizer("model_a", {"[UNK]": 0, "hello": 1, "there": 2})
    b = tokenizer("model_b", {"[UNK]": 0, "hello": 1, "there": 2, "friend": 3})
    same = tmp_path / "copy-of-a.json"
    same.write_bytes(a.read_bytes())
    sample = Path(__file__).resolve().parent.parent / "sample_logs"
    engine, gateway = sample / "engine", sample / "gateway" / "litellm-callbacks-2026-08-27.jsonl"
    api.ingest(tmp_path / "case", [engine], config=CaseConfig(tokenizer=str(a)))
    with pytest.raises(ConfigError) as err:
        api.ingest(tmp_path / "case", [gateway], config=CaseConfig(tokenizer=str(b)))
    assert "SHA-256" in str(err.value)
    assert api.ingest(tmp_path / "case", [gateway], config=CaseConfig(tokenizer=str(same))).manifest.reconciled
    # A case begun before the content was recorded cannot tell which file read its rows: another file of the
    # same name is taken (by name, as before), and its content is not recorded as the case's.
    manifest = json.loads((tmp_path / "case" / "manifest.json").read_text(encoding="utf-8"))
    del manifest["tokenizer_sha256"]
    manifest["tokenizer"] = "tokenizer.json"
    (tmp_path / "case" / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    later = api.ingest(tmp_path / "case", [sample / "gateway" / "litellm-callbacks-2026-08-28.jsonl.gz"],
                       config=CaseConfig(tokenizer=str(b)))
    assert "tokenizer_sha256" not in later.manifest.to_json()


def _sample_day() -> bytes:
    """The sample's gateway log of 26 August, decompressed: the records of a live log in the tests below."""
    return gzip.decompress((Path(__file__).resolve().parent.parent / "sample_logs" / "gateway"
                            / "litellm-callbacks-2026-08-26.jsonl.gz").read_bytes())


def _live_log_beside_a_case_file(tmp_path: Path) -> tuple[bytes, Path, Any]:
    """A sample day's records (all of them), a live log of their first 300 KB in logs/ and a case file in
    proj/ beside it (its configuration)."""
    from forensics.config import load_case_file

    full = _sample_day()
    (tmp_path / "proj").mkdir()
    (tmp_path / "logs").mkdir()
    live = tmp_path / "logs" / "live.jsonl"
    live.write_bytes(full[:300_000])
    (tmp_path / "proj" / "case.toml").write_text(
        'name = "x"\nmodel = "glm-5.3"\nwindow_start = "2026-08-25T00:00:00Z"\nwindow_end = "2026-08-31T00:00:00Z"\n'
        'real_ceiling_tokens = 8192\n', encoding="utf-8")
    return full, live, load_case_file(tmp_path / "proj" / "case.toml")


def test_a_grown_log_named_by_another_rule_still_replaces_its_short_copy(tmp_path: Path) -> None:
    """A live log beside the case file's folder, ingested while short without the case file (named by its
    path) and again once grown with it (named ../logs/...): the complete copy replaces the short one, as
    under one name. Before, both stayed, the short copy's cut line quarantined twice over."""
    full, live, cfg = _live_log_beside_a_case_file(tmp_path)
    api.ingest(tmp_path / "case", [live])
    live.write_bytes(full[:900_000])
    again = api.ingest(tmp_path / "case", [live], config=cfg)
    assert [f["paths"] for f in again.manifest.files] == [["../logs/live.jsonl"]]
    fresh = api.ingest(tmp_path / "fresh", [live], config=cfg)
    assert again.manifest.tables == fresh.manifest.tables


def test_a_grown_log_known_under_two_names_replaces_its_short_copy(tmp_path: Path) -> None:
    """The short copy was recorded under two names (once without the case file, once with it): the grown
    log, named the second way, matched neither the one name nor a single-name entry, and both copies stayed."""
    full, live, cfg = _live_log_beside_a_case_file(tmp_path)
    api.ingest(tmp_path / "case", [live])
    assert len(api.ingest(tmp_path / "case", [live], config=cfg).manifest.files[0]["paths"]) == 2
    live.write_bytes(full[:900_000])
    again = api.ingest(tmp_path / "case", [live], config=cfg)
    assert len(again.manifest.files) == 1
    assert again.manifest.tables == api.ingest(tmp_path / "fresh", [live], config=cfg).manifest.tables


def test_one_run_given_a_live_log_under_two_names_as_it_grows_keeps_both(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A linked folder and its target name one live log, which grows between the two hashes: the entry this
    run had just added was taken for the earlier copy and dropped while its parts were still to be staged
    (an internal error). Only files of the case before the run can be replaced."""
    import forensics.ingest as ingest_module

    full = _sample_day()
    (tmp_path / "store" / "gw").mkdir(parents=True)
    (tmp_path / "proj").mkdir()
    live = tmp_path / "store" / "gw" / "live.jsonl"
    live.write_bytes(full[:300_000])
    (tmp_path / "proj" / "gateway").symlink_to(Path("..") / "store" / "gw")
    real_scan, calls = ingest_module.scan_file, []

    def growing(path: Path, *args: Any, **kwargs: Any) -> Any:
        out = real_scan(path, *args, **kwargs)
        calls.append(path)
        if len(calls) == 1:
            live.write_bytes(full[:900_000])
        return out

    monkeypatch.setattr(ingest_module, "scan_file", growing)
    monkeypatch.setattr(ingest_module, "MAX_WORKERS", 1)  # hashed one after the other: it grows in between
    result = api.ingest(tmp_path / "case", [tmp_path / "proj" / "gateway" / "live.jsonl", live])
    assert len(calls) == 2 and len(result.manifest.files) == 2


def test_a_short_copy_replaced_and_given_again_in_the_same_run_is_staged(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The grown live log replaced the case's short copy; a lagging replica holding that short copy, given
    through a link and as itself and growing between the two hashes, then took the short copy's entry (added
    again by this run) for the case's: removed while its parts were still to be staged (an internal error)."""
    import forensics.ingest as ingest_module

    full = _sample_day()
    for folder in ("logs", "replica"):
        (tmp_path / folder).mkdir()
    live, replica = tmp_path / "logs" / "live.jsonl", tmp_path / "replica" / "live.jsonl"
    live.write_bytes(full[:300_000])
    api.ingest(tmp_path / "case", [live])
    live.write_bytes(full[:900_000])
    replica.write_bytes(full[:300_000])
    (tmp_path / "replink").symlink_to("replica")
    real_scan = ingest_module.scan_file

    def growing(path: Path, *args: Any, **kwargs: Any) -> Any:
        out = real_scan(path, *args, **kwargs)
        if "replink" in str(path):
            replica.write_bytes(full[:600_000])
        return out

    monkeypatch.setattr(ingest_module, "scan_file", growing)
    monkeypatch.setattr(ingest_module, "MAX_WORKERS", 1)
    result = api.ingest(tmp_path / "case", [live, tmp_path / "replink" / "live.jsonl", replica])
    assert len(result.manifest.files) == 3 and result.manifest.reconciled


def test_a_case_that_recorded_one_file_per_entry_keeps_a_second_copy_when_the_first_grows(tmp_path: Path) -> None:
    """A case begun by a version that recorded only an entry's first file (``abs_path``, no ``abs_paths``)
    held one content under two files, a/live.jsonl and b/copy.jsonl. The grown a/live.jsonl replaced the entry
    on its one recorded file, and b/copy.jsonl, still holding the content, was named nowhere in the case."""
    full = _sample_day()
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    live, copy = tmp_path / "a" / "live.jsonl", tmp_path / "b" / "copy.jsonl"
    live.write_bytes(full[:300_000])
    copy.write_bytes(full[:300_000])
    api.ingest(tmp_path / "case", [live, copy])
    path = tmp_path / "case" / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for entry in manifest["files"]:
        del entry["abs_paths"]
    path.write_text(json.dumps(manifest), encoding="utf-8")
    live.write_bytes(full[:900_000])
    result = api.ingest(tmp_path / "case", [live])
    assert any(str(copy) in p or p.endswith("b/copy.jsonl") for f in result.manifest.files for p in f["paths"])
