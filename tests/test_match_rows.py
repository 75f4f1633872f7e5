"""The pairs' rows are built as each verification task's regions are collected: the rows must be those
of every pair's regions taken together, in the order the pairs were first found, even for a pair whose
regions come in several tasks (ties on the whole sort key included: the order among them must not move)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from forensics.match import findings
from forensics.match.findings import ROW_FIELDS, PairKey, Region, RegionScorer
from forensics.match.index import NO_TIME, Target, TargetIndex
from forensics.match.tiers import MatchParams


def _scorer(folder: Path | None = None, memory_rows: int = 20_000) -> RegionScorer:
    targets = [Target(f"s{i}", f"t{i}", 0, 1, "decode-1", True, i == 2, f"response {i} with a few words in it")
               for i in range(3)]
    TargetIndex(targets, 5)  # fills the targets' tokens
    # (the holders are not read here)
    return RegionScorer(targets, None, MatchParams(), folder=folder, memory_rows=memory_rows)  # type: ignore[arg-type]


def _region(rng: random.Random, source: str, tie: bool) -> Region:
    # tie: the same sort key (strength, score, recipient start, source start) as the other tied regions,
    # everything else different, so that only the order kept among ties tells them apart.
    start = 8 if tie else rng.randrange(0, 60, 4)
    rule = rng.choice([None, ("probable", "E2: ..."), ("confirmed", "E1: ...")])
    return Region(20.0 if tie else float(rng.choice([10, 20, 35])), 100.0 if tie else float(rng.choice([90, 100])),
                  start, start + rng.choice([4, 8, 12]), 5 if tie else rng.randrange(0, 40), rng.randrange(40, 80),
                  "cross_tenant", rng.choice([0.5, 1.0]), 1.0, rng.randrange(5, 9), rule, rule, source, "acme", "prompt",
                  rng.randrange(5, 9), 5, rng.randrange(100))


def _plain(row: findings.CandidateRow) -> dict[str, Any]:
    """A row read back, as the dict of the fields it was built with (not its place in the order found)."""
    out = row.as_dict()
    del out["_found"]
    return out


def _reference(scored: list[tuple[PairKey, Region]]) -> list[dict[str, Any]]:
    """Every pair's regions gathered in the order found, then one row each, in the order the pairs were
    first found: what the rows were when they were all built at the end."""
    per_pair: dict[PairKey, list[Region]] = {}
    for key, region in scored:
        per_pair.setdefault(key, []).append(region)
    scorer = _scorer()
    return [scorer._row(key, regs).as_dict() for key, regs in per_pair.items()]


@pytest.mark.parametrize("seed", range(40))
def test_rows_built_task_by_task_are_those_of_all_regions_at_once(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    keys = [(rng.randrange(3), f"r{rng.randrange(4)}", "acme", "prompt", rng.random() < 0.2) for _ in range(12)]
    tie = seed % 2 == 0
    scored = [(key, _region(rng, key[1], tie)) for key in keys for _ in range(rng.randrange(1, 5))]
    rng.shuffle(scored)
    expected = _reference(scored)

    # Held in memory, or written to a file every few rows (the same rows must come back, in the same order).
    by_task = _scorer(tmp_path, memory_rows=[1, 3, 20_000][seed % 3])
    cuts = sorted(rng.sample(range(1, len(scored)), k=min(3, len(scored) - 1)))
    for a, b in zip([0, *cuts], [*cuts, len(scored)]):
        by_task.collect(scored[a:b])
    assert [_plain(r) for r in by_task.rows()] == expected
    first_seen = list(dict.fromkeys(key for key, _ in scored))
    assert [(r["_target"], r["source_request_id"], r["_later"]) for r in expected] == [(k[0], k[1], k[4]) for k in first_seen]
    whole = _scorer()
    whole.collect(scored)
    assert [_plain(r) for r in whole.rows()] == expected


@pytest.mark.parametrize("seed", range(20))
def test_only_the_regions_of_a_source_two_records_hold_are_kept_past_their_task(seed: int, tmp_path: Path) -> None:
    # A row's hits are all in one verification task: a pair comes back in another task only when two records
    # hold its source's (request id, tenant). Only those pairs' regions are kept; the rows are the same.
    rng = random.Random(seed)
    keys = [(rng.randrange(3), f"r{rng.randrange(4)}", "acme", "prompt", rng.random() < 0.2) for _ in range(12)]
    scored = [(key, _region(rng, key[1], seed % 2 == 0)) for key in keys for _ in range(rng.randrange(1, 5))]
    twice = {"r1", "r3"}  # sources two records hold: their pairs may come in any task
    tasks: list[list[tuple[PairKey, Region]]] = [[] for _ in range(4)]
    once_task = {key: rng.randrange(4) for key in keys}  # every other pair: all its regions in one task
    for key, region in scored:
        tasks[rng.randrange(4) if key[1] in twice else once_task[key]].append((key, region))
    in_order = [x for task in tasks for x in task]
    expected = _reference(in_order)

    scorer = _scorer(tmp_path, memory_rows=[2, 20_000][seed % 2])
    scorer.sources_held_twice = {(s, "acme") for s in twice}
    for task in tasks:
        scorer.collect(task)
    assert {key[1] for key in scorer.per_pair} <= twice
    assert [_plain(r) for r in scorer.rows()] == expected


@pytest.mark.parametrize("memory_rows", [1, 20_000])
def test_a_pair_found_again_whose_source_one_record_holds_is_an_error_not_a_wrong_row(
        tmp_path: Path, memory_rows: int) -> None:
    rng = random.Random(1)
    key = (0, "r1", "acme", "prompt", False)
    scorer = _scorer(tmp_path, memory_rows)
    scorer.sources_held_twice = set()
    scorer.collect([(key, _region(rng, "r1", False))])
    scorer.collect([((1, "r2", "acme", "prompt", False), _region(rng, "r2", False))])
    scorer.collect([(key, _region(rng, "r1", False))])  # (its first row may be on disk by now)
    with pytest.raises(ValueError, match="came in two batches"):
        scorer.rows()


@pytest.mark.parametrize("memory_rows", [1, 20_000])
def test_keys_of_one_hash_are_not_taken_for_a_pair_found_twice(tmp_path: Path, memory_rows: int,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # The scorer keeps each key's hash, not the key: two keys of one hash are told apart when read back.
    monkeypatch.setattr(findings, "_key_hash", lambda key: 7)
    rng = random.Random(2)
    keys = [(t, f"r{i}", "acme", "prompt", False) for t in range(3) for i in range(4)]
    scorer = _scorer(tmp_path, memory_rows)
    scorer.sources_held_twice = set()
    for key in keys:
        scorer.collect([(key, _region(rng, key[1], False))])
    assert [(r["_target"], r["source_request_id"]) for r in scorer.rows()] == [(k[0], k[1]) for k in keys]
    again = _scorer(tmp_path, memory_rows)
    again.sources_held_twice = set()
    for key in [*keys, keys[5]]:
        again.collect([(key, _region(rng, key[1], False))])
    with pytest.raises(ValueError, match="came in two batches"):
        again.rows()


def test_rows_held_on_disk_leave_nothing_in_the_folder_and_come_back_once(tmp_path: Path) -> None:
    rng = random.Random(3)
    scorer = _scorer(tmp_path, memory_rows=2)
    keys = [(t, f"r{i}", "acme", "prompt", False) for t in range(3) for i in range(3)]
    scorer.sources_held_twice = set()
    for key in keys:
        scorer.collect([(key, _region(rng, key[1], False))])
    assert list(tmp_path.iterdir()) == []  # (an anonymous file: nothing left behind, even by a crash)
    assert len(scorer.rows()) == len(keys)
    assert scorer.rows() == []  # handed over once


def test_a_candidate_row_reads_and_sets_like_a_dict_and_never_reads_a_field_not_set() -> None:
    values = tuple(range(len(ROW_FIELDS)))
    row = findings.CandidateRow(*values)
    assert [row[name] for name in ROW_FIELDS] == list(values)
    row["same_decode_node"] = True
    assert row["same_decode_node"] is True
    assert row.as_dict() == {**dict(zip(ROW_FIELDS, values, strict=True)), "same_decode_node": True}
    with pytest.raises(AttributeError):
        row["_ruled_out"]  # a field the evidence model has not set is an error, not None
    with pytest.raises(AttributeError):
        row["finding_id"] = "f-1"  # only the dict it becomes takes the later fields


@pytest.mark.parametrize("seed", range(10))
def test_rows_read_a_group_of_targets_at_a_time_hold_each_targets_rows_in_the_order_found(seed: int,
                                                                                        tmp_path: Path) -> None:
    rng = random.Random(seed)
    keys = [(rng.randrange(3), f"r{rng.randrange(4)}", "acme", "prompt", rng.random() < 0.2) for _ in range(12)]
    scored = [(key, _region(rng, key[1], seed % 2 == 0)) for key in keys for _ in range(rng.randrange(1, 5))]
    rng.shuffle(scored)
    expected = _reference(scored)
    scorer = RegionScorer(_scorer().targets, None, MatchParams(), folder=tmp_path,  # type: ignore[arg-type]
                          memory_rows=[1, 4, 100][seed % 3], groups=2)
    cuts = sorted(rng.sample(range(1, len(scored)), k=min(3, len(scored) - 1)))
    for a, b in zip([0, *cuts], [*cuts, len(scored)]):
        scorer.collect(scored[a:b])
    held = scorer.take()
    for _ in range(2):  # read twice (the match stage does), each read new rows
        groups = [[_plain(r) for r in group] for group in held.groups()]
        assert groups == [[r for r in expected if r["_target"] % 2 == g] for g in range(2)]
    first, second = (list(held.groups()) for _ in range(2))
    assert all(a is not b for ga, gb in zip(first, second, strict=True) for a, b in zip(ga, gb, strict=True))
    held.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("seed", range(30))
def test_the_first_read_reads_every_group_of_targets_that_holds_a_possible_copy(seed: int) -> None:
    # The groups read for copies of an exchange are chosen from hashes noted as rows are built: every group where
    # the rows themselves show a possible copy (own exchange, or a source logged twice) must be among them.
    rng = random.Random(seed)
    targets = [Target(f"s{i}", f"t{i % 3}", 50_000_000 * (i % 4), 1, "decode-1", True, False, f"response {i} a b c")
               for i in range(12)]
    TargetIndex(targets, 5)
    scorer = RegionScorer(targets, None, MatchParams(), memory_rows=5, groups=5)  # type: ignore[arg-type]
    scored = []
    for n in range(rng.randrange(5, 40)):
        t = rng.randrange(12)
        tenant = rng.choice(["t0", "t1", "t2", "t3", None])
        kind = rng.choice(["prompt", "response"])
        start = rng.choice([0, 8])
        region = Region(10.0, 95.0, start, start + 8, 0, 8, "cross_tenant" if tenant != targets[t].tenant_id
                        else "same_tenant", 1.0, 1.0, 6, None, None, f"r{n}", tenant, kind, 6, 5,
                        rng.choice([NO_TIME, rng.randrange(0, 200_000_000)]))
        scored.append(((t, f"r{n}", tenant, kind, False), region))
    for a in range(0, len(scored), 7):
        scorer.collect(scored[a:a + 7])
    held = scorer.take()
    rows = [r for group in held.groups() for r in group]
    must = {r["_target"] % 5 for r in findings._own_copy_candidates(rows, targets)}
    must |= {g[0]["_target"] % 5 for g in findings._source_copy_groups(rows)}
    assert must <= held.survey_groups
    survey = held.survey(targets)
    assert {(r["_target"], r["source_request_id"]) for r in survey.own_near} == {
        (r["_target"], r["source_request_id"]) for r in findings._own_copy_candidates(rows, targets)}
    assert len(survey.copy_groups) == len(findings._source_copy_groups(rows))
    assert survey.sources == {(r["source_request_id"], r["source_tenant_id"]) for r in rows}
