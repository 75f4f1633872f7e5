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
from forensics.match.sources import SourceRows
from forensics.match.spill import HeldHits
from forensics.match.stream import (
    VerifyTask,
    tenant_code,
    verify_task,
)
from forensics.match.tiers import MatchParams
from forensics.match.tuning import Tuning
from forensics.memory import give_back_above
from forensics.progress import Reporter, reporter


def informative_hits(index: TargetIndex, p: MatchParams, hits: np.ndarray, sources: SourceRows,
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
    row_code = sources.tenant_codes(rows_all)
    same = row_code[np.searchsorted(rows_all, hits[:, 2])] == codes[hits[:, 0]]
    keep = (then[inverse] <= p.max_tenants) & ~own_prompt[inverse] & (~tenant_held[inverse] | same)
    kept = hits[keep]
    # By (row, kind, target, target position, source position): all are non-negative (kind below 4).
    result: np.ndarray = kept[lexsort_ints((kept[:, 4], kept[:, 1], kept[:, 0], kept[:, 3], kept[:, 2]))]
    return result


def verify_held(index: TargetIndex, p: MatchParams, held: HeldHits, holders: Holders,
                sources: SourceRows, path: Path, helpers: Helpers,
                progress: Reporter | None, scorer: RegionScorer, tuning: Tuning = Tuning()) -> dict[str, int]:
    """Align the hits that :func:`informative_hits` keeps of those ``held``, reading only those texts, and score
    the candidates into ``scorer`` (its regions, in row order, whichever process found them). Returns the counts.

    A part of the held hits at a time (about ``tuning.verify_part_hits``, whole scan tasks): its informative hits
    are found, verified and dropped, so memory does not grow with the case's hits. The next part is read and its
    informative hits found while the workers verify this part's last jobs (two parts at most at once).
    Each part's rows come after the last part's, and a row's candidates depend on its hits alone, so the regions
    are those of one part holding every hit.

    The alignment is shared by this process and the workers (tasks of source rows, see
    :func:`_verify_tasks`); each process scores the candidates it found with a :class:`RegionScorer`
    like ``scorer`` (the workers read its holders from a file once) and only the admissible regions
    come back: scoring every task's candidates here kept this process busy while the worker waited,
    and the candidates' k-gram positions crossed between processes for nothing.
    """
    counts = {"informative_hits": 0, "texts_verified": 0}
    total = held.count
    task = reporter(progress).task("match: verifying candidate regions", total)
    done = 0
    parts = held.parts(tuning.verify_part_hits)
    holders_file: str | None = None
    last_part_left: int | None = None  # jobs still to start after the one just taken, on the last part

    def jobs() -> Iterator[tuple[VerifyTask, str | None]]:
        # One stream of jobs over every part: the next part's informative hits are found here while the workers
        # still verify this part's last jobs (they waited for them at each part's start: 1.2 s of the worker's on
        # the 1 GB benchmark incident, 7 s on the 4 GB one).
        nonlocal holders_file, done, last_part_left
        for i, results in enumerate(parts):
            count = held.part_count(results)
            part = held.load(results, index, holders[3])
            kept = informative_hits(index, p, part, sources, holders)
            del part
            task.advance(count - len(kept))  # on k-grams found common since they were held, or not informative
            done += count - len(kept)
            if not len(kept):
                continue
            rows = unique_ints(kept[:, 2])
            if holders_file is None:
                holders_file = helpers.share(scorer.holders)  # None without workers: every task runs here
            part_jobs = list(_verify_tasks(path, kept, rows, sources, 4 * (helpers.n + 1) if helpers.n else 0))
            counts["informative_hits"] += len(kept)
            counts["texts_verified"] += len(rows)
            del kept, rows
            for j, job in enumerate(part_jobs):
                # On the last part, how many are left: the last jobs stay in this process rather than wait at a busy
                # worker while this one sits idle (ordered).
                last_part_left = len(part_jobs) - j - 1 if i == len(parts) - 1 else None
                yield job, holders_file
            del part_jobs

    try:
        for found, n in ordered(helpers, verify_and_score_in_worker,
                                lambda job: (scorer.score(verify_task(index, p, job[0])), len(job[0].hits)),
                                jobs(), per_worker=tuning.verify_in_flight, left=lambda: last_part_left):
            scorer.collect(found)
            task.advance(n)
            done += n
        task.advance(total - done)  # (none: every part's hits are counted above)
    finally:
        task.close()
    return counts


#: The worker's scorer, for the holders file it was built from (one per stage).
_SCORER: tuple[str, RegionScorer] | None = None


def verify_and_score_in_worker(job: tuple[VerifyTask, str | None]) -> tuple[list[tuple[PairKey, Region]], int]:
    """Pool task: verify one task's source rows and score the candidates with this worker's targets
    and the stage's holders (read once from the file named); returns the regions and the task's hit count."""
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
        scanner.end_pass()  # (this stage's pass is over: every result was taken before verification began)
        _SCORER = (holders_file, RegionScorer(scanner.index.targets, holders, scanner.p))
    found = _SCORER[1].score(verify_task(scanner.index, scanner.p, task))
    give_back_above()
    return found, len(task.hits)


def _verify_tasks(path: Path, kept: np.ndarray, rows: np.ndarray, sources: SourceRows,
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
            yield VerifyTask(str(path), rg, lo, part.tolist(), kept[a:b], sources.subset(part.tolist()))
