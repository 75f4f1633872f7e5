"""The match stage's memory: one row group at a time, a compact index, no extra copies of the scanner (issue 14, point 5)."""

from __future__ import annotations

import os
import pickle
import tempfile
import types
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from match_helpers import config
from test_match import _mixed_case, _outputs, cross

from forensics.match import match
from forensics.match import pool as pool_mod
from forensics.match.tuning import Tuning


def test_match_reads_the_exchanges_one_row_group_at_a_time(tmp_path: Path,
                                                           parquet_reads: list[tuple[int, list[int] | None]]) -> None:
    # A reader over every row group at once kept what it had read: loading the targets (one pass
    # over the responses) left the match stage 65 MB bigger on the 4x 256 MB bench incident.
    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    assert pq.ParquetFile(case / "exchanges.parquet").num_row_groups == 5
    result = match(case, config(workers=1))
    assert len(cross(result.findings)) >= 5
    assert parquet_reads
    assert all(groups is not None and len(groups) == 1 for _, groups in parquet_reads), parquet_reads


def test_the_target_index_costs_at_most_36_bytes_per_kgram() -> None:
    # The index is held by the match stage's process and by every worker of its streaming pass, and
    # grows with the number of suspects. With 64-bit positions, targets and k-gram ids it cost about
    # 66 bytes per target k-gram here; 32-bit ones (a case holds far fewer than 2**31) cost about 46;
    # a presence table of bits, not bytes, about 31.
    import numpy as np

    from forensics.match.index import Target, TargetIndex

    rng = np.random.default_rng(3)
    targets = [Target(f"r{i}", "t", 0, 1, None, False, False,
                      " ".join(f"w{x}" for x in rng.integers(0, 50_000, size=400))) for i in range(300)]
    index = TargetIndex(targets, 5)
    arrays = (index.unique, index.occ_start, index.occ_target, index.occ_pos, index.gid_flat, index.present,
              index.bucket)
    positions = len(index.gid_flat)
    assert positions == 300 * 396
    assert sum(a.nbytes for a in arrays) / positions <= 36


def test_the_workers_get_the_scanner_from_a_file_not_from_arguments_held_all_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A process pool keeps its workers' initializer arguments for as long as it runs, and each worker keeps
    # them for its life: the pickled scanner passed that way was held twice beside the scanner itself, for the
    # whole stage (150 MiB each in the parent and the worker on the 4 GB benchmark incident). The workers now
    # read it from a temporary file, removed when the stage ends.
    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    held: list[int] = []
    real = pool_mod.process_pool

    def recording(n: int, context: Any, initializer: Any = None, initargs: tuple[Any, ...] = ()) -> Any:
        held.append(len(pickle.dumps(initargs)))
        return real(n, context, initializer, initargs)

    monkeypatch.setattr(pool_mod, "process_pool", recording)
    result = match(case, config(workers=2), tuning=Tuning(inline_bytes=0, wait_for_workers=True))
    assert result.run_stats["jobs_on_workers"] > 0 and not result.run_stats["workers_failed"]
    assert len(cross(result.findings)) >= 5
    assert held and max(held) < 1024, held  # a file name, not the scanner (tens of kB even here)
    assert list(scratch.glob("forensics-*")) == []  # and the file is gone


def test_a_worker_gets_the_targets_tokens_but_not_their_text_or_offsets(tmp_path: Path) -> None:
    # A worker scans and verifies with the targets' token hashes; their text (11 MB of Python strings on the
    # 4 GB benchmark incident) and their tokens' character offsets (13 MiB) stay in the parent, which places
    # the workers' passages. The parent's offsets are 32-bit.
    import numpy as np

    from forensics.match.index import Target, TargetIndex
    from forensics.match.stream import Scanner
    from forensics.match.tiers import MatchParams

    targets = [Target(f"r{i}", "t", 0, 1, None, False, False, f"response {i} with some words in it") for i in range(3)]
    scanner = Scanner(TargetIndex(targets, 5), MatchParams())

    def worker_copy() -> Any:
        path = pool_mod._worker_payload(scanner)
        try:
            with path.open("rb") as fh:
                return pickle.load(fh)
        finally:
            path.unlink()

    first = worker_copy()
    assert [t.text for t in first.index.targets] == ["", "", ""]
    assert [t.text for t in targets] == [f"response {i} with some words in it" for i in range(3)]  # the parent's
    for t in targets:
        t.text = ""  # as the stage leaves them before the workers start
    for copy in (first, worker_copy()):
        for mine, theirs in zip(targets, copy.index.targets):
            assert mine.tokens.start.dtype == np.int32 and mine.tokens.end.dtype == np.int32
            assert len(mine.tokens.start) == len(mine.tokens.hash) > 0
            assert (mine.tokens.hash == theirs.tokens.hash).all()
            assert len(theirs.tokens.start) == len(theirs.tokens.end) == 0
            assert (mine.gids == theirs.gids).all()


def test_dropping_hits_on_common_kgrams_holds_one_part_at_a_time() -> None:
    # The pass drops hits on k-grams it has found common every so often. It used to join every hit into one
    # array first, holding them twice for the moment: the match stage's peak on the 4 GB benchmark incident.
    import tracemalloc

    import numpy as np

    from forensics.match.index import Target, TargetIndex
    from forensics.match.rarity import without_common
    from forensics.match.stream import HIT_DTYPE

    rng = np.random.default_rng(5)
    targets = [Target(f"r{i}", "t", 0, 1, None, False, False,
                      " ".join(f"w{x}" for x in rng.integers(0, 5_000, size=300))) for i in range(20)]
    index = TargetIndex(targets, 5)
    common = rng.random(index.kgram_count) < 0.5
    parts = []
    for _ in range(20):
        t = rng.integers(0, 20, 50_000)
        parts.append(np.stack([t, rng.integers(0, 296, 50_000)] + [rng.integers(0, 9, 50_000)] * 4,
                              axis=1).astype(HIT_DTYPE))
    part_bytes = parts[0].nbytes
    expected = [h for h in np.concatenate(parts) if not common[targets[h[0]].gids[h[1]]]]
    tracemalloc.start()
    try:
        kept = without_common(parts, index, common)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert np.array_equal(np.concatenate(kept), np.array(expected))
    # The kept half of every part, and one part's temporary arrays; all of them at once would be 20 parts.
    assert peak < 10 * part_bytes + 6 * part_bytes, (peak, part_bytes)


def _case_with_its_own_temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any, Path]:
    """A case, its outputs matched by this process alone, and a temporary folder of the test's own."""
    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    match(case, config(workers=1))
    expected = _outputs(case)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return case, expected, scratch


def test_no_room_for_the_scanner_file_leaves_the_match_to_this_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case, expected, scratch = _case_with_its_own_temp_folder(tmp_path, monkeypatch)

    def disk_full(self: Any, obj: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pool_mod._WithoutTexts, "dump", disk_full)
    result = match(case, config(workers=2), tuning=Tuning(inline_bytes=0, wait_for_workers=True))
    assert _outputs(case) == expected
    assert result.run_stats["jobs_on_workers"] == 0
    assert "No space left on device" in result.summary()["warnings"][0]
    assert list(scratch.glob("forensics-*")) == []  # the file begun is gone


def test_no_room_for_the_holders_file_leaves_the_verification_to_this_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The workers score what they verify, with the holders the pass counted, which they read from a
    # file written after the pass. With no room for it the workers stop helping: same outputs.
    case, expected, scratch = _case_with_its_own_temp_folder(tmp_path, monkeypatch)
    written: list[Any] = []

    def disk_full(obj: Any, fh: Any, protocol: int | None = None) -> None:
        written.append(obj)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pool_mod.pickle, "dump", disk_full)
    result = match(case, config(workers=2), tuning=Tuning(inline_bytes=0, wait_for_workers=True))
    assert written  # the holders file was begun
    assert _outputs(case) == expected
    assert result.run_stats["jobs_on_workers"] > 0  # the pass had the workers' help
    assert result.run_stats["verification_jobs_on_workers"] == 0
    assert "No space left on device" in result.summary()["warnings"][0]
    assert list(scratch.glob("forensics-*")) == []  # the file begun is gone


def test_a_holders_file_a_worker_cannot_read_leaves_the_verification_to_this_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Workers only add speed: one that cannot load the holders (the file damaged or gone) must not
    # stop the stage. Its tasks are verified and scored here, with the same outputs.
    case, expected, scratch = _case_with_its_own_temp_folder(tmp_path, monkeypatch)
    share = pool_mod.Helpers.share

    def share_damaged(self: pool_mod.Helpers, obj: Any) -> str | None:
        name = share(self, obj)
        assert name is not None
        Path(name).write_bytes(b"not a pickle")
        return name

    monkeypatch.setattr(pool_mod.Helpers, "share", share_damaged)
    result = match(case, config(workers=2), tuning=Tuning(inline_bytes=0, wait_for_workers=True))
    assert _outputs(case) == expected
    assert result.run_stats["verification_jobs_on_workers"] == 0
    assert "cannot read the holder counts" in result.summary()["warnings"][0]
    assert list(scratch.glob("forensics-*")) == []


def test_a_holders_file_that_fails_midway_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not only a full disk: whatever stops the pickling (memory, an interrupt) must not leave the
    # file behind, unlocked, for a later stage to sweep.
    case, _, scratch = _case_with_its_own_temp_folder(tmp_path, monkeypatch)

    def out_of_memory(obj: Any, fh: Any, protocol: int | None = None) -> None:
        fh.write(b"partial")
        raise MemoryError

    monkeypatch.setattr(pool_mod.pickle, "dump", out_of_memory)
    with pytest.raises(MemoryError):
        match(case, config(workers=2), tuning=Tuning(inline_bytes=0, wait_for_workers=True))
    assert list(scratch.glob("forensics-*")) == []


def test_the_holders_file_is_locked_while_the_workers_may_read_it_and_goes_with_the_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A sweeping stage (remove_stale_payloads) must see the file in use, as it does the scanner file.
    import fcntl

    case, expected, scratch = _case_with_its_own_temp_folder(tmp_path, monkeypatch)
    seen: list[bool] = []
    share = pool_mod.Helpers.share

    def share_and_look(self: pool_mod.Helpers, obj: Any) -> str | None:
        name = share(self, obj)
        assert name is not None and Path(name).parent == scratch
        with open(name, "rb") as fh:
            assert pickle.load(fh)[0].tolist() == obj[0].tolist()  # the holders, readable
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                seen.append(True)
        return name

    monkeypatch.setattr(pool_mod.Helpers, "share", share_and_look)
    result = match(case, config(workers=2), tuning=Tuning(inline_bytes=0, wait_for_workers=True))
    assert seen == [True]
    assert _outputs(case) == expected
    assert result.run_stats["verification_jobs_on_workers"] > 0  # the workers verified and scored with it
    assert not result.summary()["warnings"]
    assert list(scratch.glob("forensics-*")) == []


def test_spark_executors_get_the_targets_tokens_but_not_their_text() -> None:
    # --engine spark broadcasts the scanner through Spark's own pickling: it carried the targets'
    # text to every executor, where the local workers get their tokens alone.
    from forensics.engine import SparkExecutor
    from forensics.match.index import Target, TargetIndex
    from forensics.match.stream import Scanner, ScanTask
    from forensics.match.tiers import MatchParams

    targets = [Target(f"r{i}", "t", 0, 1, None, False, False, f"secret response {i} with some words") for i in range(3)]
    scanner = Scanner(TargetIndex(targets, 5), MatchParams())
    sent: list[Any] = []
    executor = object.__new__(SparkExecutor)  # no cluster: what it would broadcast is the question
    executor.map_partitions = lambda func, items, partitions, shared=None, wave=None: sent.append(shared) or iter(())  # type: ignore[method-assign]
    executor.sc = types.SimpleNamespace(defaultParallelism=2)
    list(executor.scan_pass(scanner, [ScanTask("x.parquet", 0, 0, 0, 1)]))
    payload = pickle.dumps(sent[0])
    assert b"secret response" not in payload
    copy = pickle.loads(payload)
    assert isinstance(copy, Scanner)
    assert [t.text for t in copy.index.targets] == ["", "", ""]
    assert all((a.tokens.hash == b.tokens.hash).all() for a, b in zip(targets, copy.index.targets))
    assert targets[0].text == "secret response 0 with some words"  # the driver's own copy keeps it


def test_a_scanner_file_left_by_a_killed_run_is_removed_by_the_next_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A match stage killed with SIGKILL cannot remove its scanner file (the targets' ids and token
    # hashes, 97 MiB on the 4 GB benchmark incident). The next match stage removes those no stage
    # holds: a running stage keeps a lock on its file (in whatever process namespace or host it
    # runs), and a file written this minute may not be locked yet. Anything else it leaves alone.
    import fcntl
    import time

    case, expected, scratch = _case_with_its_own_temp_folder(tmp_path, monkeypatch)
    hour_ago = time.time() - 3600
    killed = scratch / "forensics-match-4242-k1ll3d.pickle"
    killed_mask = scratch / "forensics-match-4242-k1ll3d.mask"  # the common k-grams it shared with its workers
    running = scratch / "forensics-match-4243-running.pickle"
    being_written = scratch / "forensics-match-4244-new.pickle"
    other = scratch / "forensics-match-notes.txt"
    link = scratch / "forensics-match-4245-alink.pickle"
    for path in (killed, killed_mask, running, being_written, other):
        path.write_bytes(b"x")
    link.symlink_to(other)  # a link is not a file of ours
    for path in (killed, killed_mask, running, other):
        os.utime(path, (hour_ago, hour_ago))
    with running.open("rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)  # what a running stage holds
        result = match(case, config(workers=1))  # no workers: the sweep happens all the same
        assert _outputs(case) == expected
        assert result.run_stats["jobs_on_workers"] == 0
    assert sorted(p.name for p in scratch.glob("forensics-*")) == sorted(
        p.name for p in (running, being_written, other, link))
    match(case, config(workers=2), tuning=Tuning(inline_bytes=0, wait_for_workers=True))
    assert not running.exists()  # nobody holds it any more
    assert sorted(p.name for p in scratch.glob("forensics-*")) == sorted(p.name for p in (being_written, other, link))


def test_a_running_stage_holds_a_lock_on_its_scanner_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    from forensics.match.index import Target, TargetIndex
    from forensics.match.stream import Scanner
    from forensics.match.tiers import MatchParams

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    targets = [Target(f"r{i}", "t", 0, 1, None, False, False, f"response {i} with some words in it") for i in range(3)]
    helpers = pool_mod.Helpers(1, wait_for_workers=True)
    try:
        helpers.start(Scanner(TargetIndex(targets, 5), MatchParams()))
        payload = next(tmp_path.glob("forensics-match-*.pickle"))
        with payload.open("rb") as fh, pytest.raises(BlockingIOError):
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        helpers.close()
    assert list(tmp_path.glob("forensics-match-*")) == []


def test_the_kgrams_found_common_are_shared_through_a_locked_file_that_goes_with_the_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    import numpy as np

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert pool_mod.Helpers(0).shared_mask(10) is None  # no workers: nobody to share with
    helpers = pool_mod.Helpers(1)
    try:
        shared = helpers.shared_mask(10)
        assert shared is not None
        name, mask = shared
        assert Path(name).parent == tmp_path and name.endswith(".mask")
        mask[[2, 7]] = True
        assert np.flatnonzero(np.fromfile(name, dtype=np.bool_)).tolist() == [2, 7]  # what a worker reads
        with open(name, "rb") as fh, pytest.raises(BlockingIOError):
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        del mask, shared
    finally:
        helpers.close()
    assert list(tmp_path.glob("forensics-match-*")) == []


def test_a_worker_takes_in_the_kgrams_the_stage_found_common_and_produces_no_hits_on_them(tmp_path: Path) -> None:
    # A worker used to start knowing nothing common: its first task produced hits on every k-gram the stage
    # had already found common (17.9M hits for 683 rows on the 4 GB benchmark incident). It reads them now.
    import numpy as np

    from forensics.case import Case
    from forensics.match import stream
    from forensics.match.index import TargetIndex
    from forensics.match.targets import load_targets
    from forensics.match.tiers import MatchParams

    case = _mixed_case(tmp_path / "case")
    p = MatchParams()
    index = TargetIndex(load_targets(Case(case), p)[0], p.k)
    task = next(pool_mod._scan_tasks(case / "exchanges.parquet", 1 << 30))

    def scan(scanner: stream.Scanner) -> np.ndarray:
        return stream.scan_rows(pickle.loads(pickle.dumps(scanner)), stream.RowReader(p.batch_rows), task).hits

    alone = scan(stream.Scanner(index, p))
    gid = index.gid_flat[index.gid_offset[alone[:, 0]] + alone[:, 1]]
    assert len(alone) and len(np.unique(gid)) > 2
    known = np.zeros(index.kgram_count, dtype=np.bool_)
    known[np.unique(gid)[::2]] = True  # every other k-gram hit found common elsewhere
    mask_file = tmp_path / "known.mask"
    known.tofile(mask_file)
    scanner = stream.Scanner(index, p)
    scanner.known_common_file = str(mask_file)
    told = scan(scanner)
    assert np.array_equal(told, alone[~known[gid]])
    mask_file.unlink()  # gone (a Spark executor elsewhere): the worker learns alone, as before
    assert np.array_equal(scan(scanner), alone)
    mine = stream.Scanner(index, p)
    mine.know_common(known)  # this process's own mask is not pickled: each process opens its own
    assert pickle.loads(pickle.dumps(mine))._known_common is None



def test_the_shared_file_has_its_blocks_before_it_is_mapped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Review: a mapped file of no allocated blocks (truncate) on a full disk killed the stage with SIGBUS at its
    # first write, with no message. Its blocks are reserved when it is made; no room, and there is no file.
    import errno

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    helpers = pool_mod.Helpers(1)
    try:
        shared = helpers.shared_mask(1 << 20)
        assert shared is not None
        assert os.stat(shared[0]).st_blocks * 512 >= 1 << 20
        del shared
    finally:
        helpers.close()

    def unsupported(fd: int, offset: int, n: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")

    monkeypatch.setattr(pool_mod.os, "posix_fallocate", unsupported)  # a file system without it: zeros written
    with open(tmp_path / "zeros", "wb") as fh:
        pool_mod._reserve(fh, (1 << 20) + 3)
    assert (tmp_path / "zeros").read_bytes() == bytes((1 << 20) + 3)
    (tmp_path / "zeros").unlink()

    def full(fh: Any, n: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pool_mod, "_reserve", full)
    helpers = pool_mod.Helpers(1)
    try:
        assert helpers.shared_mask(1 << 20) is None  # the workers learn on their own
    finally:
        helpers.close()
    assert list(tmp_path.glob("forensics-match-*")) == []


def _targets_indexed(n: int = 4) -> tuple[list[Any], Any]:
    from forensics.match.index import Target, TargetIndex

    targets = [Target(f"r{i}", f"t{i}", 0, 1, None, False, False, f"response {i} with some words in it, {'x ' * i}")
               for i in range(n)]
    return targets, TargetIndex(targets, 5)


def test_after_the_pass_a_process_lets_go_of_the_index_look_up_and_what_it_learnt() -> None:
    # Verification reads the targets, their k-gram ids and token counts, not the probe's table, the occurrence lists
    # or who held what: 28 MiB of each verifying process on the 4 GB benchmark incident, kept to the stage's end.
    import numpy as np

    from forensics.match.stream import Scanner
    from forensics.match.tiers import MatchParams

    targets, index = _targets_indexed()
    scanner = Scanner(index, MatchParams())
    count, gids, tokens = index.kgram_count, index.gid_flat.copy(), index.token_counts.copy()
    assert count > 0 and len(index.probe(np.array([index.unique[0]], np.uint64))[0]) == 1
    scanner.end_pass()
    assert index.kgram_count == count  # (match.json reports it)
    assert index.gid_flat.tolist() == gids.tolist() and index.token_counts.tolist() == tokens.tolist()
    assert all(t.tokens is not None and t.gids is not None for t in targets)
    lookup = sum(getattr(index, name).nbytes for name in ("unique", "present", "bucket", "occ_start", "occ_target",
                                                           "occ_pos"))
    learnt = scanner.min_deadline.nbytes + scanner.common.nbytes + scanner._count.nbytes + len(scanner._seen)
    assert lookup == 0 and learnt == 0
    for search in (lambda: index.probe(np.zeros(3, np.uint64)), lambda: index.occurrences(np.zeros(1, np.int64)),
                   lambda: index.probe_kgrams(np.zeros(3, np.uint64), np.zeros(3, np.int64))):
        with pytest.raises(RuntimeError, match="forget_lookup"):
            search()  # not an empty answer: a search after the pass is a defect, said as one


def test_a_worker_lets_go_of_the_pass_when_it_takes_its_first_verification_task(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from forensics.match import stream, verification
    from forensics.match.stream import Scanner, VerifyTask
    from forensics.match.tiers import MatchParams

    targets, index = _targets_indexed()
    scanner = Scanner(index, MatchParams())
    monkeypatch.setattr(stream, "_WORKER", scanner)
    monkeypatch.setattr(verification, "_SCORER", None)
    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    holders = tmp_path / "holders.pickle"
    holders.write_bytes(pickle.dumps((np.zeros(index.kgram_count + 1, np.int64),) + (np.zeros(0, np.int64),) * 2
                                     + (np.zeros(index.kgram_count, bool), np.zeros(0, bool))))
    task = VerifyTask(str(case / "exchanges.parquet"), 0, 0, [], np.zeros((0, 6), np.int32), {})
    assert index.searchable
    assert verification.verify_and_score_in_worker((task, str(holders))) == ([], 0)
    assert not index.searchable and len(scanner.common) == 0


def test_the_scorer_and_the_targets_hold_one_copy_of_the_token_hashes() -> None:
    # Each process that verifies read them two ways (per target, and one after another): 13 MiB twice on the
    # 4 GB benchmark incident.
    import numpy as np

    from forensics.match.findings import RegionScorer
    from forensics.match.tiers import MatchParams

    targets, _ = _targets_indexed()
    before = [t.tokens.hash.copy() for t in targets]
    scorer = RegionScorer(targets, None, MatchParams())  # type: ignore[arg-type]  # (the holders are not read)
    assert scorer.hashes.tolist() == np.concatenate(before).tolist()
    for i, t in enumerate(targets):
        assert t.tokens.hash.tolist() == before[i].tolist()
        assert t.tokens.hash.base is scorer.hashes or t.tokens.hash.base is scorer.hashes.base
        assert scorer.hashes[scorer.hash_offset[i] : scorer.hash_offset[i + 1]].tolist() == before[i].tolist()


def test_the_holder_counts_let_go_of_what_only_the_counting_reads_once_finished() -> None:
    import numpy as np

    from forensics.match.rarity import HolderCounts
    from forensics.match.tiers import MatchParams

    _, index = _targets_indexed()
    counts = HolderCounts(index, MatchParams(), compact_entries=4)
    g = np.arange(index.kgram_count, dtype=np.int64)
    counts.add(g, np.full(len(g), 7, np.int64), np.zeros(len(g), np.int64))
    counts.add(g[:3], np.full(3, 9, np.int64), np.ones(3, np.int64))
    start, tenant, when, common, independent = counts.finish()
    assert start.tolist() == np.searchsorted(np.sort(np.concatenate([g, g[:3]])), np.arange(len(g) + 1)).tolist()
    assert start.dtype == np.int32  # (each process that verifies holds it: 4 bytes a k-gram, not 8)
    assert tenant.tolist() == [t for i in range(len(g)) for t in ([7, 9] if i < 3 else [7])]
    assert len(common) == len(g) and len(independent) == len(tenant)
    assert counts.parts == [] and counts.min_deadline.nbytes == 0  # (the entries' k-gram ids, the deadlines)


def test_the_match_stage_reads_row_groups_on_its_own_thread_and_gives_back_what_arrow_kept_of_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Arrow's decoding threads kept what they had freed, out of reach of a release from the thread that asked for the
    # read: 140 MiB of the match stage's process on the 4 GB benchmark incident while it verified (94 MiB after 30 row
    # groups read alone; 15 MiB read on the reading thread and released after each).
    import pyarrow as pa

    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    events: list[str] = []  # "r" a read (of one row group), "t" one by Arrow's threads, "g" a release
    original = pq.ParquetFile.iter_batches

    def spy(self: pq.ParquetFile, batch_size: int = 65536, row_groups: list[int] | None = None, **kw: Any) -> Any:
        events.append("r" if kw.get("use_threads", True) is False and row_groups and len(row_groups) == 1 else "t")
        return original(self, batch_size=batch_size, row_groups=row_groups, **kw)

    pool = pa.default_memory_pool()

    class Pool:
        def release_unused(self) -> None:
            events.append("g")
            pool.release_unused()

        def __getattr__(self, name: str) -> Any:
            return getattr(pool, name)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    monkeypatch.setattr(pa, "default_memory_pool", lambda: Pool())
    result = match(case, config(workers=0))  # (every read in this process, where the spies see it)
    assert len(cross(result.findings)) >= 5
    order = "".join(events)
    assert order.count("r") >= 10 and "t" not in order, order
    # Each row group read is released before the next read (the pass's reader, at the next row group).
    assert "rr" not in order and order.endswith("g"), order


def test_the_match_stage_lets_go_of_the_targets_text_once_it_is_tokenized(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Every process verifies with the targets' tokens alone (the workers never receive the text): the stage's process
    # held the text to its end, 15 MiB on the 4 GB benchmark incident.
    import forensics.match as match_mod

    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    seen: list[list[str]] = []
    verify_held = match_mod.verify_held

    def spy(index: Any, *a: Any, **kw: Any) -> Any:
        seen.append([t.text for t in index.targets])
        return verify_held(index, *a, **kw)

    monkeypatch.setattr(match_mod, "verify_held", spy)
    result = match(case, config(workers=0))
    assert len(cross(result.findings)) >= 5
    assert seen and seen[0] and all(text == "" for text in seen[0])
    assert result.findings == match(case, config(workers=0)).findings  # (the same findings, run again)


@pytest.mark.parametrize("n_texts", [1, 40, 65_536, 70_000])
def test_a_tokens_bits_read_by_its_count_of_other_texts_are_the_same_floats_at_two_bytes_a_token(n_texts: int) -> None:
    # The bits of each target's tokens were kept as float64s, 8 bytes a token in every process that scores (13 MiB each
    # on the 4 GB benchmark incident). Each token's count of other texts holding it, read through a table of N bits
    # values, gives the same floats at 2 bytes a token (4 beyond 65,536 targets).
    import numpy as np

    from forensics.match import chance

    rng = np.random.default_rng(n_texts)
    vocab = np.unique(rng.integers(1, 2**63, size=500, dtype=np.int64).astype(np.uint64))
    df = rng.integers(1, n_texts + 1, size=len(vocab)).astype(np.int64)
    hashes = np.concatenate([rng.choice(vocab, size=3000), rng.integers(1, 2**63, size=50, dtype=np.int64).astype(
        np.uint64)])
    others = chance.others_holding(hashes, vocab, df, n_texts)
    assert others.itemsize == (2 if n_texts <= 2**16 else 4)
    idx = np.clip(np.searchsorted(vocab, hashes), 0, len(vocab) - 1)
    other = np.where(vocab[idx] == hashes, df[idx] - 1, 0)
    expected = np.log2((n_texts + chance.PRIOR_TEXTS) / (1.0 + other))
    assert chance.bits_by_others(n_texts)[others].tobytes() == expected.tobytes()
    assert chance.others_holding(hashes[:0], vocab, df, n_texts).dtype == others.dtype


def test_a_verification_task_gives_back_its_row_group_once_it_has_let_go_of_the_last_texts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A row group's batches share its buffers: a release while the task still held the last row's texts (or the
    # reader its last batch) gave back nothing of them; they waited for the next task's release (6 MB of a row group
    # of texts here).
    import numpy as np
    import pyarrow as pa

    from forensics.match import stream
    from forensics.match.index import Target, TargetIndex
    from forensics.match.stream import HIT_DTYPE, VerifyTask, verify_task
    from forensics.match.tiers import MatchParams

    rng = np.random.default_rng(5)
    texts = [" ".join(f"w{x}" for x in rng.integers(0, 100_000, size=1500)) for _ in range(400)]
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"prompt_text": texts, "response_text": texts}), path, row_group_size=400)
    targets = [Target("s", "t", 0, 1, None, False, False, texts[7][:3000])]
    index = TargetIndex(targets, 5)
    hits = np.array([[0, 0, 7, 0, 0, 0], [0, 0, 399, 0, 0, 0]], dtype=HIT_DTYPE)
    held: list[int] = []
    pool = pa.default_memory_pool()
    monkeypatch.setattr(stream, "release_arrow_memory", lambda: held.append(pool.bytes_allocated()))
    before = pool.bytes_allocated()
    verify_task(index, MatchParams(), VerifyTask(str(path), 0, 0, [7, 399], hits, {7: ("a", "u", 0), 399: ("b", "u", 0)}))
    assert held and held[-1] - before < 1 << 20, (before, held)


def test_the_pass_reader_continues_a_row_group_rightly_after_a_read_that_failed(tmp_path: Path) -> None:
    # Letting go of the last row group's reader before opening the next one must not leave it claiming that row group:
    # a range continuing it after a failed open gave no rows at all.
    import pyarrow as pa

    from forensics.match import stream

    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({c: [f"{c}{i}" for i in range(200)] for c in stream.PASS_COLUMNS}), path, row_group_size=100)
    reader = stream.RowReader(16)
    assert sum(b.num_rows for _, b in reader.read(str(path), 0, 0, 40)) == 40
    with pytest.raises(IndexError):  # (a row group the file does not have)
        list(reader.read(str(path), 7, 0, 10))
    got = [r for _, b in reader.read(str(path), 0, 40, 100) for r in b.column("request_id").to_pylist()]
    assert got == [f"request_id{i}" for i in range(40, 100)]


def test_the_stage_places_the_passages_a_worker_found_by_their_token_span() -> None:
    # A worker's targets have no character offsets: its regions carry the token span, and the stage's process,
    # which has the offsets, gives them the same characters a region found here has.
    from forensics.match.findings import Region, RegionScorer
    from forensics.match.index import NO_TIME
    from forensics.match.tiers import MatchParams

    targets, _ = _targets_indexed()
    tokens = targets[1].tokens
    spans = [(0, 2), (3, 6)]  # two passages of one pair, in one batch
    rows = []
    for worker in (True, False):  # a worker's regions, then this process's
        scorer = RegionScorer(targets, None, MatchParams())  # type: ignore[arg-type]  # (the holders are not read)
        scored = []
        for n, (a, b) in enumerate(spans):
            start, end = (-1, -1) if worker else (int(tokens.start[a]), int(tokens.end[b - 1]))
            scored.append(((1, "src", "tX", "prompt", False),
                           Region(10.0 + n, 95.0, start, end, 1000 * n, 1000 * n + 8, "cross_tenant", 1.0, 1.0, 6, None,
                                  None, "src", "tX", "prompt", 6, 5, NO_TIME, 7, a, b)))
        scorer.collect(scored)
        rows.append([r.as_dict() for r in scorer.rows()])
    assert rows[0] == rows[1]
    assert len(rows[0]) == 1 and [p[:2] for p in sorted(rows[0][0]["passages"])] == [
        (tokens.start[a], tokens.end[b - 1]) for a, b in spans]


def test_the_stage_names_the_pairs_sources_by_row_until_the_rows_are_handed_over() -> None:
    # A (request id, tenant) per source held while the workers verified took 23 MiB of the stage's process on the
    # 4 GB benchmark incident; a row number takes 8 bytes a pair, named from the source rows when handed over.
    from forensics.match.findings import Region, RegionScorer
    from forensics.match.index import NO_TIME
    from forensics.match.sources import SourceRows
    from forensics.match.tiers import MatchParams

    targets, _ = _targets_indexed()
    sources = SourceRows({5: ("src-a", "tX", 0), 9: ("src-b", None, 0), 12: ("src-a", "tX", 0)})
    scorer = RegionScorer(targets, None, MatchParams(), source_rows=sources)  # type: ignore[arg-type]
    scored = []
    for n, (row, request_id, tenant) in enumerate([(5, "src-a", "tX"), (9, "src-b", None), (12, "src-a", "tX"),
                                                   (-1, "src-c", "tY")]):
        scored.append(((n % 4, request_id, tenant, "prompt", False),
                       Region(10.0, 95.0, 0, 8, 0, 8, "cross_tenant", 1.0, 1.0, 6, None, None, request_id, tenant,
                              "prompt", 6, 5, NO_TIME, row)))
    scorer.collect(scored)
    assert scorer.sources == {("src-c", "tY")}  # only the source no row names
    held = scorer.take()
    assert held.survey(targets).sources == {("src-a", "tX"), ("src-b", None), ("src-c", "tY")}
    held.close()


def test_the_match_stage_gives_back_what_the_pass_left_of_its_heap_before_verification(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The pass's compactions of the holder counts and prunes of the hits run in this process, between its tasks: what
    # their arrays left stayed in its heap (360 MiB on the 4 GB benchmark incident as verification began).
    import dataclasses

    import forensics.match as match_mod
    from forensics.match.rarity import HolderCounts

    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    events: list[str] = []
    for name, mark in (("give_back_above", "a"), ("give_back_freed_memory", "g")):
        real = getattr(match_mod, name)
        monkeypatch.setattr(match_mod, name, lambda *a, _real=real, _mark=mark, **k: events.append(_mark) or _real(*a, **k))
    for cls, name, mark in ((HolderCounts, "compact", "c"), (HolderCounts, "finish", "f")):
        real = getattr(cls, name)
        monkeypatch.setattr(cls, name, lambda self, *a, _real=real, _mark=mark, **k: events.append(_mark) or _real(self, *a, **k))
    real_verify = match_mod.verify_held
    monkeypatch.setattr(match_mod, "verify_held", lambda *a, **k: events.append("v") or real_verify(*a, **k))
    tuning = dataclasses.replace(Tuning(), prune_hits=1)  # a compaction and a prune after every result
    result = match(case, config(workers=0), tuning=tuning)
    assert len(cross(result.findings)) >= 5
    order = "".join(events)
    assert "ca" in order, order  # after a compaction in the pass's loop
    assert order.count("f") == 1 and "g" in order[order.index("f"):order.index("v")], order  # all of it, before verifying


@pytest.mark.parametrize("workers", [0, 2])
def test_every_pair_reaches_the_scorer_with_its_source_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          workers: int) -> None:
    # The memory saved holds only if every region, verified here or by a worker, names its source's row: a region
    # without one falls back to a (request id, tenant) in a set, with the same files.
    from test_match import POOL

    from forensics.match.findings import RegionScorer

    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    rows: list[int] = []
    real = RegionScorer._note
    monkeypatch.setattr(RegionScorer, "_note",
                        lambda self, key, row, group, source_row=-1: rows.append(source_row) or real(self, key, row, group,
                                                                                                    source_row))
    result = match(case, config(workers=workers), tuning=POOL if workers else None)
    assert len(cross(result.findings)) >= 5 and (not workers or result.run_stats["jobs_on_workers"] > 0)
    assert rows and min(rows) >= 0
