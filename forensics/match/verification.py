"""Verification of the k-gram hits that survive rarity and own context: aligned with rapidfuzz,
each task reading only its own source rows (see ``stream.verify_task``), and its candidates scored
by the process that found them."""


import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from forensics.match import stream
from forensics.match.findings import PairKey, Region, RegionScorer
from forensics.match.index import TargetIndex
from forensics.match.order import lexsort_ints, unique_ints
from forensics.match.pool import Helpers, WorkerUnfit, ordered
from forensics.match.rarity import Holders, pair_evidence
from forensics.match.stream import (
    VerifyTask,
    tenant_code,
    verify_task,
)
from forensics.match.tiers import MatchParams
from forensics.match.tuning import Tuning
from forensics.memory import give_back_above
from forensics.progress import Reporter, reporter


def informative_hits(index: TargetIndex, p: MatchParams, hits: np.ndarray, sources: dict[int, tuple[str, str | None, int]],
                     holders: Holders) -> np.ndarray:
    """The ``hits`` worth aligning (not on common or own-context k-grams), in source row order.

    Its own function so the per-hit arrays it builds are freed when it returns, before alignment.
    """
    if len(hits) == 0:
        return hits
    g = index.gid_flat[index.gid_offset[hits[:, 0]] + hits[:, 1]]
    n_gids = max(index.kgram_count, 1)
    # np.unique, not an argsort and scatter of our own: in the stage (fresh memory for every array) it took 0.7 s
    # on the 1 GB benchmark incident's 1.8M hits against 0.85-0.9 s, though alone the argsort was a little faster.
    pairs, inverse = np.unique(hits[:, 0].astype(np.int64) * n_gids + g, return_inverse=True)
    inverse = inverse.reshape(-1)
    then, own_prompt, tenant_held = pair_evidence(index, holders, pairs // n_gids, pairs % n_gids, p.max_tenants)
    codes = np.array([tenant_code(x.tenant_id) for x in index.targets], dtype=np.int64)
    rows_all = unique_ints(hits[:, 2])
    row_code = np.array([tenant_code(sources[int(r)][1]) for r in rows_all], dtype=np.int64)
    same = row_code[np.searchsorted(rows_all, hits[:, 2])] == codes[hits[:, 0]]
    keep = (then[inverse] <= p.max_tenants) & ~own_prompt[inverse] & (~tenant_held[inverse] | same)
    kept = hits[keep]
    # By (row, kind, target, target position, source position): all are non-negative (kind below 4).
    result: np.ndarray = kept[lexsort_ints((kept[:, 4], kept[:, 1], kept[:, 0], kept[:, 3], kept[:, 2]))]
    return result


def verify_kept(index: TargetIndex, p: MatchParams, kept: np.ndarray, sources: dict[int, tuple[str, str | None, int]],
                path: Path, helpers: Helpers, progress: Reporter | None, scorer: RegionScorer,
                in_flight: int = Tuning.verify_in_flight) -> dict[str, int]:
    """Align the hits :func:`informative_hits` kept, reading only those texts, and score the candidates
    into ``scorer`` (its regions, in row order, whichever process found them). Returns the counts.

    The alignment is shared by this process and the workers (tasks of source rows, see
    :func:`_verify_tasks`); each process scores the candidates it found with a :class:`RegionScorer`
    like ``scorer`` (the workers read its holders from a file once) and only the admissible regions
    come back: scoring every task's candidates here kept this process busy while the worker waited,
    and the candidates' k-gram positions crossed between processes for nothing.
    ``in_flight``: tasks waiting at each worker before this process verifies one itself.
    Two steps, so that a caller drops the hits before the texts are aligned.
    """
    if len(kept) == 0:
        return {"informative_hits": 0, "texts_verified": 0}
    rows = unique_ints(kept[:, 2])
    task = reporter(progress).task("match: verifying candidate regions", len(rows))
    try:
        holders_file = helpers.share(scorer.holders)  # None without workers: every task runs here
        # A list, so that the last jobs stay in this process rather than wait at a busy worker (ordered).
        jobs = [(job, holders_file) for job in _verify_tasks(path, kept, rows, sources,
                                                             4 * (helpers.n + 1) if helpers.n else 0)]
        for found, n in ordered(helpers, verify_and_score_in_worker,
                                lambda job: (scorer.score(verify_task(index, p, job[0])), len(job[0].rows)),
                                jobs, per_worker=in_flight):
            scorer.collect(found)
            task.advance(n)
    finally:
        task.close()
    return {"informative_hits": int(len(kept)), "texts_verified": int(len(rows))}


#: The worker's scorer, for the holders file it was built from (one per stage).
_SCORER: tuple[str, RegionScorer] | None = None


def verify_and_score_in_worker(job: tuple[VerifyTask, str | None]) -> tuple[list[tuple[PairKey, Region]], int]:
    """Pool task: verify one task's source rows and score the candidates with this worker's targets
    and the stage's holders (read once from the file named); returns the regions and the row count."""
    global _SCORER
    task, holders_file = job
    scanner = stream._WORKER
    assert scanner is not None and holders_file is not None
    if _SCORER is None or _SCORER[0] != holders_file:
        try:
            with open(holders_file, "rb") as fh:
                holders: Holders = pickle.load(fh)
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError) as exc:
            raise WorkerUnfit(f"cannot read the holder counts ({type(exc).__name__}: {exc})") from None
        _SCORER = (holders_file, RegionScorer(scanner.index.targets, holders, scanner.p))
    found = _SCORER[1].score(verify_task(scanner.index, scanner.p, task))
    give_back_above()
    return found, len(task.rows)


def _verify_tasks(path: Path, kept: np.ndarray, rows: np.ndarray, sources: dict[int, tuple[str, str | None, int]],
                  pieces: int) -> Iterator[VerifyTask]:
    """Verification tasks in row order: one per row group, or about ``pieces`` in all when > 0.

    A task never spans two row groups (a worker reads only its own); splitting a row group
    between tasks costs a second read of it, cheap beside tokenizing and aligning its texts,
    and lets both cores share a case whose suspects' sources sit in one big row group.
    """
    meta = pq.ParquetFile(path).metadata
    bounds = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    per = max(-(-len(rows) // pieces), 1) if pieces else len(rows) or 1
    for rg in range(meta.num_row_groups):
        lo, hi = int(bounds[rg]), int(bounds[rg + 1])
        inside = rows[(rows >= lo) & (rows < hi)]
        for i in range(0, len(inside), per):
            part = inside[i : i + per]
            a = int(np.searchsorted(kept[:, 2], part[0], side="left"))
            b = int(np.searchsorted(kept[:, 2], part[-1], side="right"))
            yield VerifyTask(str(path), rg, lo, part.tolist(), kept[a:b], {int(r): sources[int(r)] for r in part})
