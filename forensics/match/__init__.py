"""Match stage: which other customer's content is in each suspect response, where, how sure.

``match(case, config)`` reads ``CASE/suspects.parquet`` and ``CASE/exchanges.parquet`` and writes
``CASE/evidence.parquet`` (schema.EVIDENCE), ``CASE/evidence.csv`` and ``CASE/match.json``.

1. Targets: the suspect responses and a seeded random control sample of non-suspect responses.
   Every k-gram of every target is hashed into a small in-memory index (``index.py``).
2. One streaming pass over every record's prompt and response (``stream.py``, both cores:
   this process and the workers each read their own row ranges, no text passes between them):
   hash, probe, count which tenants held each target k-gram and when. Then the hits that
   survive rarity and own context are verified with rapidfuzz on token slices (``align.py``),
   shared the same way, each task reading only its own source rows; results are gathered in
   row order, so the outputs are the same whatever the number of processes.
3. Rarity and own context, per finding: a matched k-gram in the suspect's own prompt explains
   itself, and for a cross-tenant source so does one the recipient's tenant already held when
   it sent the request (same-tenant overlap is kept, as relation ``same_tenant``); one held by
   more than ``max_tenants`` tenants when the response was produced is common text; the rest
   weigh 1 / (tenants holding it). Tiers follow ``tiers.py``.
4. The evidence model (``chance.py``, :func:`_decide`): every candidate's strength in bits, its
   E-value from the case's own null (control responses against earlier texts, suspects against
   later ones: never written, they are chance matches), the decode-node evidence's factor, and the
   tier from their product; a likeness explained by a stronger source goes to review. Findings go
   to evidence.*, every other candidate to review.* with why.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import dataclasses
import heapq
import math
import multiprocessing
import os
import pickle
import threading
from collections.abc import Iterator
from multiprocessing import forkserver
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import rapidfuzz
import xxhash

from forensics import csvfile, schema
from forensics.case import Case, atomic_open, write_json, write_table
from forensics.config import CaseConfig
from forensics.errors import CaseError
from forensics.match.fingerprint import SEED, unicode_version
from forensics.match.index import NO_TIME, Target, TargetIndex
from forensics.match.stream import (
    HIT_DTYPE, PASS_COLUMNS, BatchResult, Candidate, RowReader, Scanner, ScanTask, VerifyTask, init_worker_from, scan_rows,
    scan_rows_in_worker, tenant_code, to_us, value_bytes, verify_in_worker, verify_task, worker_ready,
)
from forensics.match import chance
from forensics.match.tiers import MatchParams, admissible, assign_tier, evalue_tier, params_from
from forensics.memory import reusing_freed_memory
from forensics.progress import Reporter, reporter
from forensics.workers import process_pool, terminate as terminate_pool

#: Columns of evidence.csv, in order: the contract of spec/outputs.md, then ours.
CSV_COLUMNS = (
    "finding_id", "recipient_request_id", "recipient_tenant_id", "source_request_id", "source_tenant_id",
    "source_kind", "tier", "score", "matched_tokens", "recipient_start", "recipient_end", "source_start",
    "source_end", "rarity", "relation", "tier_rule", "longest_run", "informative_tokens", "regions",
    "other_source_requests", "expected_by_chance", "strength_bits", "same_decode_node", "recipient_decode_node",
    "source_decode_node", "seconds_before", "records_since_source_on_node", "mechanism_factor", "expected_by_chance_with_mechanism", "recipient_damage",
    "source_damage", "passages",
)
#: Columns of review.csv: evidence.csv's, then why the candidate put nobody on the list.
REVIEW_COLUMNS = CSV_COLUMNS + ("why_not_notified",)

#: Below this much (uncompressed) exchanges data no worker is started. This process works alone
#: during the workers' start-up, so it does not hold up the pass, but it costs CPU (a fork server
#: importing the matcher, fresh processes faulting their memory in: about 0.6 CPU-seconds).
#: Measured with benchmarks/match.py on a shared 2-core machine, alone / with one worker: 18 MB
#: 0.77-1.14 s / 0.74-1.13 s (at most a fifth sooner, for 50% more CPU); 66 MB 2.28-2.45 s / 1.53-1.71 s.
INLINE_BYTES = 32 << 20

#: Wait until the workers are up before the pass (tests set it, so the workers surely take jobs).
WAIT_FOR_WORKERS = False

#: Uncompressed Parquet bytes per pass task on the pool: big enough that a task's fixed costs
#: (a message each way, a Parquet footer) vanish, small enough that two workers finish together.
TASK_BYTES = 8 << 20

#: Holder entries and hits buffered before common k-grams are retired (bounds memory, not results).
COMPACT_ENTRIES = 4_000_000
PRUNE_HITS = 500_000

_TIER_RANK = {"confirmed": 0, "probable": 1}


@dataclasses.dataclass
class MatchResult:
    """What the match stage found and searched (``summary()`` is what the CLI prints)."""

    case: Path
    params: MatchParams
    findings: list[dict[str, Any]]
    report: dict[str, Any]
    control_findings: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # never written
    #: Figures of this run that depend on how it ran (e.g. raw k-gram hits before each process
    #: retired common text): useful to tune, never written, as outputs must be byte-identical.
    run_stats: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def cross_tenant(self) -> list[dict[str, Any]]:
        """Findings that are cross-tenant exposure."""
        return [f for f in self.findings if f["relation"] == "cross_tenant"]

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary: counts, control sample, and where the outputs are."""
        return {
            "case": str(self.case),
            "findings": self.report["findings"],
            "searched": self.report["searched"],
            "control": self.report["control"],
            "outputs": ["evidence.parquet", "evidence.csv", "review.parquet", "review.csv", "match.json"],
            "warnings": ([f"worker processes failed ({self.run_stats['workers_failed']}); this process did their "
                          "share, with the same results"] if self.run_stats.get("workers_failed") else []),
        }


def _iter_exchanges(path: Path, columns: list[str], batch_rows: int) -> Iterator[pa.RecordBatch]:
    yield from _exchanges_file(path, columns).iter_batches(batch_size=batch_rows, columns=columns)


def request_key(request_id: str, tenant_id: str | None) -> tuple[str, bool, str]:
    """A request's identity, (request id, tenant), as a sort key (no tenant sorts last).

    Two customers may send the same request id (client-supplied ids, two gateways): every table
    of this stage keys requests by both.
    """
    return (request_id, tenant_id is None, tenant_id or "")


def _size_class(nbytes: int) -> int:
    """Length class of a response for matching the control sample to the suspects: log2 of its bytes."""
    return int(nbytes).bit_length()


def _load_targets(case: Case, p: MatchParams) -> tuple[list[Target], dict[str, Any]]:
    """Suspect responses (from the suspects table) and the control sample, with their texts.

    Suspects are (request id, tenant) pairs. The control sample is length-matched to the suspects:
    the ``control_size`` places are shared among length classes (log2 of the response's bytes) as the
    suspects are, largest remainder first, and each class takes its non-suspect responses with the
    smallest xxh64(request id) (ties: the tenant's code); places a class cannot fill go to the
    smallest keys left in any class. The choice never depends on the order of the rows. Candidates
    are kept without their text (at most ``control_size`` per class); a second read fetches the
    texts of the chosen ones.
    """
    sus_path = case.require("suspects", "scan")
    ex_path = case.require("exchanges", "ingest")
    sus = pq.ParquetFile(sus_path).read(columns=["request_id", "tenant_id", "engine_signature", "decode_node"]).to_pylist()
    suspects = {(r["request_id"], r["tenant_id"]): r for r in sus}
    found: dict[tuple[str, str | None], Target] = {}
    suspect_classes: collections.Counter[int] = collections.Counter()
    # Per length class, a max-heap (negated keys) of candidates: (-xxh64(request id), -tenant code, row, Target).
    # The row number is unique, so two entries never get as far as comparing their Targets.
    heaps: dict[int, list[tuple[int, int, int, Target]]] = {}
    cols = ["request_id", "tenant_id", "received_at", "completed_at", "decode_node", "response_text"]
    row0 = 0
    for batch in _iter_exchanges(ex_path, cols, 1024):
        rids = batch.column("request_id").to_pylist()
        rec, done = to_us(batch.column("received_at")), to_us(batch.column("completed_at"))
        tenants, nodes = batch.column("tenant_id").to_pylist(), batch.column("decode_node").to_pylist()
        # Texts become Python strings only for the suspects here (the controls' in a second read).
        texts = batch.column("response_text")
        sizes = value_bytes(texts).tolist()
        for i, rid in enumerate(rids):
            s = suspects.get((rid, tenants[i]))
            if s is None and (not sizes[i] or p.control_size == 0):
                continue
            r_i, d_i = rec[i], done[i]
            received: int = r_i if r_i is not None else NO_TIME
            deadline: int = d_i if d_i is not None else received
            if s is not None:
                if (rid, tenants[i]) not in found:
                    found[(rid, tenants[i])] = Target(rid, tenants[i], received, deadline, s["decode_node"] or nodes[i],
                                                      bool(s["engine_signature"]), False, texts[i].as_py() or "")
                    suspect_classes[_size_class(sizes[i])] += 1
                continue
            heap = heaps.setdefault(_size_class(sizes[i]), [])
            key = (-xxhash.xxh64_intdigest(rid.encode("utf-8", "surrogatepass"), seed=p.seed), -tenant_code(tenants[i]))
            if len(heap) >= p.control_size and key <= heap[0][:2]:
                continue
            item = (*key, row0 + i, Target(rid, tenants[i], received, deadline, nodes[i], False, True, ""))
            if len(heap) < p.control_size:
                heapq.heappush(heap, item)
            else:
                heapq.heapreplace(heap, item)
        row0 += len(rids)
    chosen = _length_matched(heaps, suspect_classes, p.control_size)
    _fill_texts(ex_path, chosen)
    missing = [{"request_id": k[0], "tenant_id": k[1]} for k in sorted(set(suspects) - set(found), key=lambda k: request_key(*k))]
    controls = sorted(chosen.values(), key=lambda t: request_key(t.request_id, t.tenant_id))
    targets = [found[k] for k in sorted(found, key=lambda k: request_key(*k))] + controls
    info = {
        "suspects": len(suspects),
        "suspects_missing_from_exchanges": missing,
        "suspects_with_empty_response": sum(1 for t in found.values() if not t.text),
        "suspects_without_completed_at": sum(1 for t in found.values() if t.deadline_us == t.received_us),
        "control_length_classes": {f"{1 << (c - 1) if c else 0}+ bytes": n for c, n in sorted(
            collections.Counter(_size_class(len(t.text.encode("utf-8", "surrogatepass"))) for t in controls).items())},
        "suspect_length_classes": {f"{1 << (c - 1) if c else 0}+ bytes": n for c, n in sorted(suspect_classes.items())},
    }
    return targets, info


def _length_matched(heaps: dict[int, list[tuple[int, int, int, Target]]], suspect_classes: collections.Counter[int],
                    size: int) -> dict[int, Target]:
    """The control sample by row: places shared among length classes as the suspects are."""
    ordered = {c: sorted(h, reverse=True) for c, h in heaps.items()}  # smallest keys first
    total = sum(suspect_classes.values())
    quota: dict[int, int] = {}
    if total:
        exact = {c: size * n / total for c, n in suspect_classes.items()}
        quota = {c: int(v) for c, v in exact.items()}
        for c in sorted(exact, key=lambda c: (-(exact[c] - quota[c]), c))[: size - sum(quota.values())]:
            quota[c] += 1
    chosen: dict[int, Target] = {}
    for c, n in quota.items():
        for item in ordered.get(c, [])[:n]:
            chosen[item[2]] = item[3]
    rest = sorted((item for h in ordered.values() for item in h if item[2] not in chosen), reverse=True)
    for item in rest[: max(size - len(chosen), 0)]:
        chosen[item[2]] = item[3]
    return chosen


def _fill_texts(path: Path, chosen: dict[int, Target]) -> None:
    """Read the response texts of the rows ``chosen`` (a second pass over that one column)."""
    if not chosen:
        return
    rows = sorted(chosen)
    row0, j = 0, 0
    for batch in _iter_exchanges(path, ["response_text"], 4096):
        n = batch.num_rows
        col = batch.column("response_text")
        while j < len(rows) and rows[j] < row0 + n:
            chosen[rows[j]].text = col[rows[j] - row0].as_py() or ""
            j += 1
        row0 += n
        if j == len(rows):
            break


def _exchanges_file(path: Path, columns: list[str] = PASS_COLUMNS) -> pq.ParquetFile:
    """The exchanges table, checked to have ``columns`` (by default every column the pass reads)."""
    pf = pq.ParquetFile(path)
    missing = [c for c in columns if c not in pf.schema_arrow.names]
    if missing:
        raise CaseError(f"exchanges table has no column {missing[0]!r}", file=path,
                        fix="re-run `forensics ingest` with this version of forensics")
    return pf


def _scan_tasks(path: Path) -> Iterator[ScanTask]:
    """Row ranges of about ``TASK_BYTES`` of (uncompressed) data each, in file order, for the workers.

    Sizes come from the row groups' metadata, so this process reads no text: the workers read
    their own rows (a row group's ranges go out in order, so each worker decompresses it at most
    once, see :class:`RowReader`). A range is never empty and never spans two row groups.
    """
    pf = _exchanges_file(path)
    row0 = 0
    for rg in range(pf.num_row_groups):
        meta = pf.metadata.row_group(rg)
        rows = meta.num_rows
        pieces = max(1, min(rows, -(-meta.total_byte_size // TASK_BYTES)))
        cuts = [rows * i // pieces for i in range(pieces + 1)]
        for lo, hi in zip(cuts, cuts[1:]):
            yield ScanTask(str(path), rg, row0, lo, hi)
        row0 += rows


def _workers_to_start(path: Path, p: MatchParams) -> int:
    """Worker processes to start beside this one: none below ``INLINE_BYTES`` of text.

    ``p.workers`` counts this process too (0: one per core), since it scans its share.
    """
    meta = pq.ParquetFile(path).metadata
    size = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    workers = p.workers or (os.cpu_count() or 1)
    return 0 if workers <= 1 or size < INLINE_BYTES else workers - 1


class _Helpers:
    """Worker processes holding the scanner, started in the background.

    Starting them takes about 0.2 s of CPU (a fork server imports the matcher once; workers
    fork from it, never from this possibly threaded process). The server starts first, while
    this process loads the targets; the workers start once the targets are ready (they are sent
    to each worker once); until they are up this process works alone, and then it keeps doing
    its share. One pool serves the pass and verification. Workers only add speed: if they
    cannot start, or one dies (killed for memory, say), this process does the rest itself.
    """

    def __init__(self, n: int) -> None:
        self.n = n
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._thread: threading.Thread | None = None
        self.jobs = {"here": 0, "workers": 0}  # how the work was shared (run statistics only)
        self.failed: str | None = None  # why the workers stopped helping (this process then does everything)
        self._ctx = multiprocessing.get_context("forkserver")
        self._starting: concurrent.futures.ProcessPoolExecutor | None = None  # the pool while its workers start
        self._stopping = False
        if n:
            try:
                self._ctx.set_forkserver_preload(["forensics.match"])
                forkserver.ensure_running()
            except OSError as exc:
                self.n, self.failed = 0, f"{type(exc).__name__}: {exc}"

    def start(self, scanner: Scanner) -> None:
        """Start the workers (in a thread: this process goes on meanwhile)."""
        if self.n:
            # Pickled here, before the pass changes what the scanner has learnt: one consistent copy.
            payload = _worker_payload(scanner)
            self._thread = threading.Thread(target=self._start, args=(payload,), daemon=True)
            self._thread.start()
            if WAIT_FOR_WORKERS:
                self._thread.join()

    def _start(self, payload: bytes) -> None:
        pool = None
        try:
            # Workers that die with this process (kill -9 included) and ignore Ctrl-C: see forensics.workers.
            pool = self._starting = process_pool(self.n, self._ctx, init_worker_from, (payload,))
            # Workers start on demand: have them all start (and report) before they take jobs.
            for f in [pool.submit(worker_ready) for _ in range(self.n)]:
                f.result()
            if self._stopping:  # the run was interrupted while they started
                terminate_pool(pool)
                return
            self._pool = pool
        except Exception as exc:  # noqa: BLE001 - workers only add speed: go on without them
            self.failed = f"{type(exc).__name__}: {exc}"
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)

    @property
    def pool(self) -> concurrent.futures.ProcessPoolExecutor | None:
        """The pool once its workers are up, else None (this process then does the job itself)."""
        return self._pool

    def broke(self, exc: BaseException) -> None:
        """A worker died: stop using the pool (jobs it held are run again here)."""
        if self._pool is not None:
            self.failed = f"{type(exc).__name__}: {exc}"
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def close(self) -> None:
        """Stop the workers (waiting for a start still in progress, and for jobs they are running)."""
        if self._thread is not None:
            self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def terminate(self) -> None:
        """Kill the workers now, running jobs included (the run is unwinding from an error or a signal)."""
        self._stopping = True
        pool, self._pool = self._pool or self._starting, None
        if pool is not None:
            terminate_pool(pool)


def _worker_payload(scanner: Scanner) -> bytes:
    """What each worker receives once: the scanner, pickled."""
    return pickle.dumps(scanner, protocol=pickle.HIGHEST_PROTOCOL)


@contextlib.contextmanager
def _helpers_running(n: int) -> Iterator[_Helpers]:
    helpers = _Helpers(n)
    try:
        yield helpers
    except BaseException:
        helpers.terminate()  # waiting for running jobs could take minutes
        raise
    finally:
        helpers.close()


class _Done:
    """A job this process ran itself (its place in the ordered results)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def done(self) -> bool:
        return True

    def result(self) -> Any:
        return self.value


def _ordered(helpers: _Helpers, remote: Any, local: Any, jobs: Iterator[Any]) -> Iterator[Any]:
    """Results of every job in job order, whoever ran it.

    A job goes to the workers while fewer than two per worker are waiting there; otherwise
    (workers busy or not started yet) this process runs it with ``local``. Which process ran a
    job never changes its result, so outputs do not depend on the split. Results are yielded
    in job order as soon as they are ready. If a worker dies, the pool is dropped and the jobs
    it held are run here.
    """
    pending: collections.deque[tuple[Any, Any]] = collections.deque()  # (job, future or _Done)
    in_flight = 2 * helpers.n

    def take() -> Any:
        job, fut = pending.popleft()
        try:
            return fut.result()
        except concurrent.futures.process.BrokenProcessPool as exc:
            helpers.broke(exc)
            helpers.jobs["workers"] -= 1
            helpers.jobs["here"] += 1
            return local(job)

    for job in jobs:
        pool = helpers.pool
        if pool is not None and sum(1 for _, x in pending if not x.done()) < in_flight:
            try:
                pending.append((job, pool.submit(remote, job)))
                helpers.jobs["workers"] += 1
            except concurrent.futures.process.BrokenProcessPool as exc:
                helpers.broke(exc)
                pending.append((job, _Done(local(job))))
                helpers.jobs["here"] += 1
        else:
            pending.append((job, _Done(local(job))))
            helpers.jobs["here"] += 1
        # Results wait for the oldest job still running; a slow one may hold back only a few,
        # so memory stays bounded.
        while pending and (pending[0][1].done() or len(pending) > 2 * in_flight + 2):
            yield take()
    while pending:
        yield take()


def _run_pass(scanner: Scanner, path: Path, helpers: _Helpers, progress: Reporter | None) -> Iterator[BatchResult]:
    """Scan every record: row ranges (:func:`_scan_tasks`) shared by this process and the workers.

    Each worker reads its own rows (no text passes through this process) and at most two ranges
    per worker are in flight, so memory stays bounded; results are gathered in file order.
    """
    rows = pq.ParquetFile(path).metadata.num_rows
    task = reporter(progress).task("match: streaming prompts and responses", rows)
    reader = RowReader(scanner.p.batch_rows)
    try:
        for res in _ordered(helpers, scan_rows_in_worker, lambda job: scan_rows(scanner, reader, job),
                            _scan_tasks(path)):
            yield res
            task.advance(res.stats.get("records", 0))
    finally:
        task.close()


Holders = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class _Holders:
    """Which tenant held each target k-gram, first seen when: unique (gid, tenant), min time.

    Memory stays bounded as the corpus grows: at each compaction, a k-gram already held by more
    than ``max_tenants`` tenants before the earliest deadline of the targets containing it is
    common for every one of them; it is marked in ``common`` and its entries (and, in
    :func:`match`, its hits) are dropped.
    """

    def __init__(self, index: TargetIndex, p: MatchParams) -> None:
        n = index.kgram_count
        self.n = n
        self.cap = p.max_tenants
        self.common = np.zeros(n, dtype=bool)
        deadline = np.array([t.deadline_us for t in index.targets], dtype=np.int64)
        self.min_deadline = (np.minimum.reduceat(deadline[index.occ_target], index.occ_start[:-1])
                             if n else np.zeros(0, np.int64))
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.pending = 0
        self.compacted = 0

    def add(self, g: np.ndarray, t: np.ndarray, w: np.ndarray) -> None:
        """Record that tenant ``t`` held k-gram ``g`` at time ``w`` (element-wise)."""
        if len(g):
            self.parts.append((g, t, w))
            self.pending += len(g)
            if self.pending > max(COMPACT_ENTRIES, 2 * self.compacted):
                self.compact()

    def compact(self) -> None:
        """Keep one entry per (k-gram, tenant) with its first time; retire common k-grams."""
        if not self.parts:
            return
        g = np.concatenate([x[0] for x in self.parts])
        t = np.concatenate([x[1] for x in self.parts])
        w = np.concatenate([x[2] for x in self.parts])
        order = np.lexsort((w, t, g))
        g, t, w = g[order], t[order], w[order]
        first = np.ones(len(g), dtype=bool)
        first[1:] = (g[1:] != g[:-1]) | (t[1:] != t[:-1])
        g, t, w = g[first], t[first], w[first]
        early = (t >= 0) & (w < self.min_deadline[g])
        self.common |= np.bincount(g[early], minlength=self.n) > self.cap
        keep = ~self.common[g]
        self.parts = [(g[keep], t[keep], w[keep])]
        self.pending = self.compacted = int(keep.sum())

    def finish(self) -> Holders:
        """CSR start per gid, tenant codes and first times sorted by (gid, tenant), and the common mask."""
        self.compact()
        g, t, w = self.parts[0] if self.parts else (np.zeros(0, np.int64),) * 3
        start = np.searchsorted(g, np.arange(self.n + 1))
        return start, t, w, self.common


def _pair_evidence(index: TargetIndex, holders: Holders, t: np.ndarray,
                   g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For (target, k-gram id) pairs: tenants holding it then, in the target's own prompt, held by its tenant.

    "Then" is before the target response completed; "held by its tenant" is before it was sent.
    """
    start, h_tenant, h_time, common = holders
    n = start[g + 1] - start[g]
    seg = np.repeat(np.arange(len(g)), n)
    first = np.cumsum(n) - n
    flat = start[g][seg] + (np.arange(int(n.sum())) - first[seg])
    ten, when = h_tenant[flat], h_time[flat]
    tt = t[seg]
    deadline = np.array([x.deadline_us for x in index.targets], dtype=np.int64)
    received = np.array([x.received_us for x in index.targets], dtype=np.int64)
    codes = np.array([tenant_code(x.tenant_id) for x in index.targets], dtype=np.int64)
    then = np.bincount(seg, weights=(ten >= 0) & (when < deadline[tt]), minlength=len(g)).astype(np.float64)
    then[common[g]] = np.inf
    own_prompt = np.bincount(seg, weights=ten == -(tt + 1), minlength=len(g)) > 0
    tenant_held = np.bincount(seg, weights=(ten == codes[tt]) & (when <= received[tt]), minlength=len(g)) > 0
    return then, own_prompt, tenant_held


def _verify_hits(index: TargetIndex, p: MatchParams, hits: np.ndarray, sources: dict[int, tuple[str, str | None, int]],
                 holders: Holders, path: Path, helpers: _Helpers,
                 progress: Reporter | None) -> tuple[list[Candidate], dict[str, int]]:
    """Drop hits on common or own-context k-grams, then align what is left, reading only those texts.

    The alignment is shared by this process and the workers (tasks of source rows, see
    :func:`_verify_tasks`); candidates are gathered in row order either way.
    """
    if len(hits) == 0:
        return [], {"informative_hits": 0, "texts_verified": 0}
    g = index.gid_flat[index.gid_offset[hits[:, 0]] + hits[:, 1]]
    n_gids = max(index.kgram_count, 1)
    pairs, inverse = np.unique(hits[:, 0].astype(np.int64) * n_gids + g, return_inverse=True)
    inverse = inverse.reshape(-1)
    then, own_prompt, tenant_held = _pair_evidence(index, holders, pairs // n_gids, pairs % n_gids)
    codes = np.array([tenant_code(x.tenant_id) for x in index.targets], dtype=np.int64)
    rows_all = np.unique(hits[:, 2])
    row_code = np.array([tenant_code(sources[int(r)][1]) for r in rows_all], dtype=np.int64)
    same = row_code[np.searchsorted(rows_all, hits[:, 2])] == codes[hits[:, 0]]
    keep = (then[inverse] <= p.max_tenants) & ~own_prompt[inverse] & (~tenant_held[inverse] | same)
    kept = hits[keep]
    kept = kept[np.lexsort((kept[:, 4], kept[:, 1], kept[:, 0], kept[:, 3], kept[:, 2]))]
    rows = np.unique(kept[:, 2])
    cands: list[Candidate] = []
    task = reporter(progress).task("match: verifying candidate regions", len(rows))
    try:
        jobs = _verify_tasks(path, kept, rows, sources, 4 * (helpers.n + 1) if helpers.n else 0)
        for found, n in _ordered(helpers, verify_in_worker, lambda job: (verify_task(index, p, job), len(job.rows)),
                                 jobs):
            cands.extend(found)
            task.advance(n)
    finally:
        task.close()
    return cands, {"informative_hits": int(len(kept)), "texts_verified": int(len(rows))}


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


def _score_candidates(cands: list[Candidate], targets: list[Target], holders: Holders,
                      p: MatchParams) -> list[dict[str, Any]]:
    """Every admissible candidate pair (target, source request, kind), with its evidence.

    Per region: rarity, own context, informative tokens and strength (bits, see ``chance.py``);
    a region that is not admissible (:func:`tiers.admissible`) is dropped. Per pair: every
    admissible region not overlapping a stronger one is kept as a passage (adjacent passages
    merged into one span); the pair's strength and informative tokens are their sums, and its
    score, spans and rarity those of the strongest passage.
    """
    start, h_tenant, h_time, common_mask = holders
    k = p.k
    vocab, df = chance.token_weights([t.tokens.hash for t in targets])
    bits: dict[int, np.ndarray] = {}
    per_pair: dict[tuple[int, str, str | None, str, bool], list[dict[str, Any]]] = {}
    for c in cands:
        tgt = targets[c.target]
        kp = np.unique(c.kgram_positions)
        g = tgt.gids[kp]
        n = start[g + 1] - start[g]
        seg = np.repeat(np.arange(len(g)), n)
        first = np.cumsum(n) - n
        flat = start[g][seg] + (np.arange(int(n.sum())) - first[seg])
        ten, when = h_tenant[flat], h_time[flat]
        holders_then = np.bincount(seg, weights=(ten >= 0) & (when < tgt.deadline_us), minlength=len(g))
        own = np.bincount(seg, weights=ten == -(c.target + 1), minlength=len(g)) > 0
        relation = "same_tenant" if c.source_tenant_id == tgt.tenant_id else "cross_tenant"
        if relation == "cross_tenant":
            # Text the recipient's tenant already held when it sent the request is not news to it.
            own |= np.bincount(seg, weights=(ten == tenant_code(tgt.tenant_id)) & (when <= tgt.received_us),
                               minlength=len(g)) > 0
        common = (holders_then > p.max_tenants) | common_mask[g]
        if c.later:
            # A later text is searched over all time: text many tenants held by then is common for it.
            common |= np.bincount(seg, weights=ten >= 0, minlength=len(g)) > p.max_tenants
        informative = ~own & ~common
        weight = np.where(informative, 1.0 / np.maximum(holders_then, 1.0), 0.0)
        rarity = float(weight.mean()) if len(weight) else 0.0
        # How many tenants held the part that is evidence (the informative k-grams): 1 / that, on average.
        singles_out = float(weight[informative].mean()) if informative.any() else 0.0
        if not informative.any():
            continue
        # Informative tokens: matched tokens not explained by an own-context or common k-gram
        # (a damaged fragment's short blocks between rare k-grams still count).
        matched = np.zeros(c.tok_end - c.tok_start, dtype=bool)
        for a, size in c.blocks:
            matched[a - c.tok_start : a - c.tok_start + size] = True
        # Different words among the matched tokens: a run of one repeated word is no passage.
        distinct = len(np.unique(tgt.tokens.hash[c.tok_start : c.tok_end][matched]))
        # A token inside an informative k-gram is evidence even where a common k-gram overlaps it
        # ("756,595.48" between "Payment of EUR" and "is due to IBAN"): only tokens that common or
        # own-context k-grams alone cover are explained away.
        explained = np.zeros_like(matched)
        for q in kp[~informative].tolist():
            explained[q - c.tok_start : q - c.tok_start + k] = True
        for q in kp[informative].tolist():
            explained[q - c.tok_start : q - c.tok_start + k] = False
        matched &= ~explained
        info_tokens = int(matched.sum())
        if not admissible(c.score, info_tokens, distinct, p):
            continue
        if c.target not in bits:
            bits[c.target] = chance.weights_for(tgt.tokens.hash, vocab, df, len(targets))
        strength = float(bits[c.target][c.tok_start : c.tok_end][matched].sum())
        rule = assign_tier(c.score, info_tokens, rarity, c.longest_run, tgt.engine_signature, p, distinct)
        # The old fixed rules, run on the null as on an engine-signature suspect (match.json compares them).
        rule_null = (assign_tier(c.score, info_tokens, rarity, c.longest_run, True, p, distinct)
                     if tgt.control else None)
        per_pair.setdefault((c.target, c.source_request_id, c.source_tenant_id, c.source_kind, c.later), []).append({
            "c": c, "relation": relation, "rarity": rarity, "singles_out": singles_out, "informative": info_tokens,
            "strength": strength,
            "rule": rule, "rule_null": rule_null,
        })
    rows = []
    for (t, _, _, _, later), regs in per_pair.items():
        tgt = targets[t]
        regs.sort(key=lambda r: (-r["strength"], -r["c"].score, r["c"].recipient_start, r["c"].source_start))
        kept: list[dict[str, Any]] = []
        for r in regs:
            c = r["c"]
            if all(c.recipient_end <= x["c"].recipient_start or c.recipient_start >= x["c"].recipient_end for x in kept):
                kept.append(r)
        best, c = kept[0], kept[0]["c"]
        passages = _merge_passages([(x["c"].recipient_start, x["c"].recipient_end, x["c"].source_start,
                                     x["c"].source_end) for x in kept])
        main = next(x for x in passages if x[0] <= c.recipient_start and c.recipient_end <= x[1])
        rule_rank = min((_TIER_RANK[x["rule"][0]], x["rule"]) for x in kept if x["rule"]) if any(
            x["rule"] for x in kept) else None
        null_rules = sorted({x["rule_null"][1].split(":")[0] for x in kept if x["rule_null"]})
        fid_key = "\x1f".join(map(str, (tgt.request_id, _tenant_part(tgt.tenant_id), c.source_request_id,
                                         _tenant_part(c.source_tenant_id), c.source_kind, *main)))
        rows.append({
            "finding_id": "f-" + xxhash.xxh64_hexdigest(fid_key.encode("utf-8", "surrogatepass"), seed=SEED),
            "recipient_request_id": tgt.request_id,
            "recipient_tenant_id": tgt.tenant_id,
            "source_request_id": c.source_request_id,
            "source_tenant_id": c.source_tenant_id,
            "source_kind": c.source_kind,
            "relation": best["relation"],
            "tier": None,
            "tier_rule": None,
            "score": round(c.score, 2),
            "matched_tokens": c.matched,
            "longest_run": c.longest_run,
            "recipient_start": main[0],
            "recipient_end": main[1],
            "source_start": main[2],
            "source_end": main[3],
            "rarity": round(best["rarity"], 4),
            "_singles_out": best["singles_out"],
            "informative_tokens": sum(x["informative"] for x in kept),
            "regions": len(regs),
            "strength_bits": round(sum(x["strength"] for x in kept), 3),
            "passages": passages,
            "control": tgt.control,
            "_target": t,
            "_source_received_us": c.source_received_us,
            "_rule": rule_rank[1] if rule_rank else None,
            "_later": later,
            "_null_rules": null_rules,
        })
    return rows


#: Passages of one pair closer than this (characters, in both texts, in the same order) are one span.
ADJACENT_CHARS = 24


def _merge_passages(spans: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """Adjacent (recipient, source) spans merged: each gap at most ``ADJACENT_CHARS`` in both texts."""
    out: list[list[int]] = []
    for rs, re_, ss, se in sorted(spans):
        if out and 0 <= rs - out[-1][1] <= ADJACENT_CHARS and 0 <= ss - out[-1][3] <= ADJACENT_CHARS:
            out[-1][1], out[-1][3] = max(out[-1][1], re_), max(out[-1][3], se)
        else:
            out.append([rs, re_, ss, se])
    return [(a, b, c, d) for a, b, c, d in out]


@dataclasses.dataclass
class _RecordFacts:
    """What the engine and the ingest recorded about the requests of the findings (no text)."""

    node: dict[tuple[str, str | None], str | None]
    damage: dict[tuple[str, str | None], str | None]
    times: np.ndarray  # every record's received time, sorted (records without one left out)
    node_share: dict[str, float]  # share of records with a known decode node that ran on each
    has_damage_column: bool
    node_times: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # received times per decode node

    def records_on_node_since(self, node: str, since_us: int, until_us: int) -> int:
        """Records decoded on ``node`` received in [since, until): the source and every later one."""
        t = self.node_times.get(node)
        if t is None:
            return 0
        return int(np.searchsorted(t, until_us, side="left") - np.searchsorted(t, since_us, side="left"))

    def records_before(self, when_us: int) -> int:
        """Records received before ``when_us`` (the corpus a target's search covered)."""
        return int(np.searchsorted(self.times, when_us, side="left"))


def _record_facts(path: Path, keys: set[tuple[str, str | None]]) -> _RecordFacts:
    """Decode node and damage of the requests ``keys`` (request id, tenant), and the corpus's times."""
    import pyarrow.compute as pc  # here, not at import: worker processes never load it

    pf = pq.ParquetFile(path)
    has_damage = "damage" in pf.schema_arrow.names
    cols = ["request_id", "tenant_id", "received_at", "decode_node"] + (["damage"] if has_damage else [])
    wanted = pa.array(sorted({k[0] for k in keys}), pa.string())
    node: dict[tuple[str, str | None], str | None] = {}
    damage: dict[tuple[str, str | None], str | None] = {}
    times: list[np.ndarray] = []
    per_node: dict[str, list[np.ndarray]] = {}
    for batch in pf.iter_batches(batch_size=65536, columns=cols):
        rec = batch.column("received_at").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        times.append(rec.drop_null().to_numpy())
        nodes = batch.column("decode_node")
        for nd in pc.unique(nodes.drop_null()).to_pylist():
            per_node.setdefault(nd, []).append(rec.filter(pc.and_(pc.equal(nodes, nd), pc.is_valid(rec))).to_numpy())
        if len(wanted):
            sel = batch.filter(pc.is_in(batch.column("request_id"), value_set=wanted))
            dmg = sel.column("damage").to_pylist() if has_damage else [None] * sel.num_rows
            for rid, ten, nd, dm in zip(sel.column("request_id").to_pylist(), sel.column("tenant_id").to_pylist(),
                                        sel.column("decode_node").to_pylist(), dmg):
                if (rid, ten) in keys:
                    node[(rid, ten)] = nd
                    damage[(rid, ten)] = dm
    node_times = {n: np.sort(np.concatenate(v)) for n, v in sorted(per_node.items())}
    total = sum(len(v) for v in node_times.values())
    return _RecordFacts(node, damage, np.sort(np.concatenate(times)) if times else np.zeros(0, np.int64),
                        {n: len(v) / total for n, v in node_times.items()} if total else {}, has_damage, node_times)


def _decide(rows: list[dict[str, Any]], targets: list[Target], p: MatchParams,
            facts: _RecordFacts) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Mechanism evidence, E-values and tiers of every candidate pair; the null model's record.

    Returns the rows (tier None: not notified, ``why_not_notified`` says why) and match.json's
    ``null`` section.
    """
    # A search's size, per target, over the texts received before it completed (see SIZE_EXPONENT).
    search_before = {i: _search_size(len(t.tokens.hash) - p.k + 1, facts.records_before(t.deadline_us))
                     for i, t in enumerate(targets)}
    for r in rows:
        tgt = targets[r["_target"]]
        src_node = facts.node.get((r["source_request_id"], r["source_tenant_id"]))
        r["recipient_decode_node"] = tgt.decode_node
        r["source_decode_node"] = src_node
        r["same_decode_node"] = (None if tgt.decode_node is None or src_node is None
                                 else tgt.decode_node == src_node)
        known = tgt.received_us != NO_TIME and r["_source_received_us"] != NO_TIME
        r["seconds_before"] = (round((tgt.received_us - r["_source_received_us"]) / 1e6, 3) if known else None)
        r["recipient_damage"] = facts.damage.get((tgt.request_id, tgt.tenant_id))
        r["source_damage"] = facts.damage.get((r["source_request_id"], r["source_tenant_id"]))
        r["search_size"] = search_before[r["_target"]]
    # Matches of a suspect with texts that arrived after it are chance (they cannot be the cause), unless the
    # same customer also sent that text earlier (a conversation resends itself): those are left out.
    # A later text sharing a long exact run with the suspect (2 x min_run tokens) copies it on (someone pasted
    # the answer): the reverse of a leak, not a chance likeness; those are left out too.
    earlier = {(r["_target"], r["source_tenant_id"]) for r in rows if not r["_later"]}
    later = [r for r in rows if r["_later"] and r["relation"] == "cross_tenant"
             and (r["_target"], r["source_tenant_id"]) not in earlier]
    copies = [r for r in later if r["longest_run"] >= 2 * p.min_run]
    later = [r for r in later if r["longest_run"] < 2 * p.min_run]
    rows = [r for r in rows if not r["_later"]]
    rows = _collapse_same_tenant_copies(rows)
    later = _collapse_same_tenant_copies(later)
    _explain_away(rows)
    _explain_away(later)
    # The null: every cross-tenant pair a control response got is a chance match, and so is every pair a
    # suspect got with a later text (the same steps as for the findings: a pair explained by a stronger one
    # is no finding there either). Search sizes: response k-gram positions x records searched.
    controls = [i for i, t in enumerate(targets) if t.control]
    suspects = [i for i, t in enumerate(targets) if not t.control]
    total = len(facts.times)
    size_of = {i: search_before[i] for i in controls}
    size_of |= {i: _search_size(len(targets[i].tokens.hash) - p.k + 1,
                                total - facts.records_before(targets[i].deadline_us)) for i in suspects}
    null_rows = [r for r in rows if r["control"] and r["relation"] == "cross_tenant" and not r["_explained_by"]]
    null_rows += [r for r in later if not r["_explained_by"]]
    model = chance.NullModel.fit([r["strength_bits"] for r in null_rows], sum(size_of.values()),
                                 len(controls) + len(suspects))
    for r in rows:
        r["expected_by_chance"] = float(f"{model.expected(r['strength_bits'], r['search_size']):.4g}")
        tgt = targets[r["_target"]]
        r["records_since_source_on_node"] = (
            facts.records_on_node_since(tgt.decode_node or "", r["_source_received_us"], tgt.received_us)
            if r["same_decode_node"] and r["seconds_before"] is not None else None)
    mechanism_known = bool(facts.node_share)
    for r in rows:
        tgt = targets[r["_target"]]
        k = r["records_since_source_on_node"]
        share = facts.node_share.get(tgt.decode_node or "", 0.0)
        before = facts.records_on_node_since(tgt.decode_node or "", NO_TIME, tgt.received_us) if tgt.decode_node else 0
        if k is not None:
            # Chance puts a source on the suspect's node, at least this recent, k times in the n records that
            # node served before the suspect.
            factor = max(k, 1) / max(before, 1)
            factor_known = True
        elif tgt.decode_node is not None and 0.0 < share < 1.0:
            # The engine logs put the source elsewhere (another node, or none): not where stale pages come
            # from, so the text must carry what the mechanism does not: E grows by 1 / the node's share.
            factor = 1.0 / share
            factor_known = True
        else:
            factor = 1.0  # the engine logs say nothing about this suspect
            factor_known = False
        r["mechanism_factor"] = float(f"{factor:.4g}")
        # The product ranks the candidates; its E-value counts the chance candidates of this search that a
        # product this small would let through (chance.with_mechanism), not the product itself.
        r["_mechanism"] = (share if factor_known else 0.0, before)
        combined = chance.with_mechanism(r["expected_by_chance"] * factor, r["_mechanism"][0],
                                         model.expected(-math.inf, r["search_size"]), before)
        r["expected_by_chance_with_mechanism"] = float(f"{combined:.4g}")
        if r["_explained_by"] and p.tiering == "evalue":
            decision: tuple[str, str] | str = (
                f"the same response text matches another customer's text more strongly (finding "
                f"{r['_explained_by']}): this weaker likeness is what similar texts share")
        elif p.tiering == "rules":
            decision = r["_rule"] if r["_rule"] else "no fixed rule (R1, R2, R2b, R3) holds"
        else:
            decision = evalue_tier(r["expected_by_chance_with_mechanism"], r["rarity"], p, r["_singles_out"])
        if isinstance(decision, tuple):
            r["tier"], r["tier_rule"], r["why_not_notified"] = decision[0], decision[1], None
        else:
            r["tier"], r["tier_rule"], r["why_not_notified"] = None, None, decision
    points = [(r["_target"], r["strength_bits"], size_of[r["_target"]]) for r in null_rows]
    seen = {c for c, _, _ in points}
    points += [(i, float("nan"), size_of[i]) for i in size_of if i not in seen]
    # The controls again, each chance match with its decode-node evidence: the figure the tiers use,
    # checked where every match is known to be chance.
    control_points = [(r["_target"], r["strength_bits"], size_of[r["_target"]], r["mechanism_factor"],
                       *r["_mechanism"]) for r in null_rows if r["control"]]
    seen_controls = {c for c, *_ in control_points}
    control_points += [(i, float("nan"), size_of[i], 1.0, 0.0, 0) for i in controls if i not in seen_controls]
    null_e = [(r, model.expected(r["strength_bits"], size_of[r["_target"]])) for r in null_rows]
    searches = len(size_of)
    rules: dict[str, Any] = {}
    control_null = [r for r in null_rows if r["control"]]
    for name in ("R1", "R2", "R2b", "R3"):
        hit = {r["_target"] for r in control_null if name in r["_null_rules"]}
        rules[name] = {"control_responses_with_match": len(hit),
                       "false_positive_rate": round(len(hit) / len(controls), 6) if controls else None}
    for name, limit in (("E1", p.confirm_evalue), ("E2", p.probable_evalue)):
        hit = {r["_target"] for r, e in null_e if e <= limit}
        rules[name] = {"null_searches_with_match": len(hit),
                       "false_positive_rate": round(len(hit) / searches, 6) if searches else None,
                       "expected_false_positives": round(limit * searches, 4),
                       "observed_false_positives": sum(1 for _, e in null_e if e <= limit)}
    null = {
        **model.record(),
        "strength": "sum over informative matched tokens of log2((N + 16) / (1 + df)), df = other target responses "
                    "holding the token, N = target responses",
        "search_size": "sqrt(response k-gram positions x records searched (before the response completed; for "
                       "the later-text null, after it))",
        "searches": {"control_responses": len(controls), "suspects_against_later_texts": len(suspects),
                     "chance_matches_from_controls": len(control_null),
                     "chance_matches_from_later_texts": len(null_rows) - len(control_null),
                     "later_texts_copying_the_suspect_left_out": len(copies)},
        "decode_node_evidence": ("present: expected_by_chance_with_mechanism = the chance candidates a search "
                                 "expects with expected_by_chance x mechanism_factor at most this one's "
                                 "(chance.with_mechanism); mechanism_factor = records the suspect's decode node served since "
                                 "the source / records it served before the suspect when the source ran there, "
                                 "1 / that node's share of records when it ran elsewhere or on none, 1 when the "
                                 "suspect's node is unknown" if mechanism_known else
                                 "absent: no decode node in the exchanges (gateway logs only); findings rest on "
                                 "the text alone (mechanism_factor 1)"),

        "rules": rules,
        "calibration": chance.calibration(points),
        "calibration_of_controls_with_mechanism": chance.calibration(control_points),
    }
    return rows, null


#: Chance matches grow with the square root of (response k-gram positions x records searched), not in
#: proportion: with exponent 1 the held-out null of the realistic scenario (seeds 1-3) saw 2.5-3.2x the
#: chance matches expected at E <= 0.01 and 0.5-0.6x at E <= 0.5; with 0.5, 0.6-1.5x at E <= 0.01 to
#: 0.1 on every seed (benchmarks/quality.py prints the table).
SIZE_EXPONENT = 0.5


def _search_size(positions: int, records: int) -> float:
    """The size of one search: sqrt(response k-gram positions x records searched), see SIZE_EXPONENT."""
    return float(max(positions, 0) * max(records, 0)) ** SIZE_EXPONENT


def _explain_away(rows: list[dict[str, Any]]) -> None:
    """Mark each cross-tenant pair whose passages lie mostly inside a stronger pair's passages
    with another source tenant (``_explained_by``: that pair's finding id, else None).

    Stale pages leak one customer's text; another customer's similar text (the same form filled
    with other values, another article on the same subject) then matches the leaked passage
    too, more weakly. The response text is explained by the stronger source; the weaker likeness
    is what similar texts share. Pairs of equal strength (the same passage sent by both) stay.
    """
    by_target: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        r["_explained_by"] = None
        if r["relation"] == "cross_tenant":
            by_target.setdefault(r["_target"], []).append(r)
    for group in by_target.values():
        group.sort(key=lambda r: (-r["strength_bits"], r["finding_id"]))
        for i, r in enumerate(group):
            own = sum(b - a for a, b, _, _ in r["passages"])
            for s in group[:i]:
                if s["strength_bits"] <= r["strength_bits"] or s["source_tenant_id"] == r["source_tenant_id"]:
                    continue
                shared = sum(max(0, min(b, d) - max(a, c)) for a, b, _, _ in r["passages"]
                             for c, d, _, _ in s["passages"])
                if own and shared * 2 >= own:
                    r["_explained_by"] = s["finding_id"]
                    break


def _collapse_same_tenant_copies(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per passage and source tenant: a tenant that sent the same text in several requests
    (every turn of a conversation resends it) exposed it once.

    Among rows of one recipient and one source tenant whose recipient spans overlap by at least
    half of the shorter span, one is kept: a source on the recipient's decode node first (where
    stale pages come from), then the strongest, then the most recent (the latest occupant's);
    ``other_source_requests`` counts the rest.
    """
    def rank(r: dict[str, Any]) -> tuple[Any, ...]:
        node = {True: 0, None: 1, False: 2}[r["same_decode_node"]]
        return (node, -r["strength_bits"], -r["_source_received_us"], r["source_request_id"], r["source_kind"])

    groups: dict[tuple[int, Any], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["_target"], r["source_tenant_id"]), []).append(r)
    out = []
    for group in groups.values():
        kept: list[dict[str, Any]] = []
        for r in sorted(group, key=rank):
            for k in kept:
                overlap = min(r["recipient_end"], k["recipient_end"]) - max(r["recipient_start"], k["recipient_start"])
                shorter = min(r["recipient_end"] - r["recipient_start"], k["recipient_end"] - k["recipient_start"])
                if overlap * 2 >= shorter:
                    k["other_source_requests"] += 1
                    break
            else:
                r["other_source_requests"] = 0
                kept.append(r)
        out.extend(kept)
    out.sort(key=_row_order)
    return out


def _row_order(r: dict[str, Any]) -> tuple[Any, ...]:
    """Evidence rows by recipient request, source request (each with its tenant), kind, start."""
    return (request_key(r["recipient_request_id"], r["recipient_tenant_id"]),
            request_key(r["source_request_id"], r["source_tenant_id"]), r["source_kind"], r["recipient_start"])


def _tenant_part(tenant: str | None) -> str:
    """A tenant id as part of a finding id's key (no tenant is a value no tenant id can be)."""
    return "\x00" if tenant is None else tenant


def _passages_text(passages: list[tuple[int, int, int, int]]) -> str:
    """``recipient_start:recipient_end=source_start:source_end`` per passage, ``;``-joined."""
    return ";".join(f"{a}:{b}={c}:{d}" for a, b, c, d in passages)


def _csv_text(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    def shown(r: dict[str, Any], c: str) -> Any:
        v = r.get(c)
        if v is None:
            return None
        if isinstance(v, bool):
            return "true" if v else "false"
        return (f"{v:.2f}" if c == "score" else f"{v:.4f}" if c == "rarity" else f"{v:.3g}"
                if c == "expected_by_chance" else v)

    return csvfile.csv_text(columns, ([shown(r, c) for c in columns] for r in rows))


def match(case: Path, config: CaseConfig, progress: Reporter | None = None,
          overrides: dict[str, Any] | None = None) -> MatchResult:
    """Find other tenants' content in the case's suspect responses; write the evidence files.

    Parameters come from ``config.section("match")`` with ``overrides`` (CLI options) on top.
    Raises ForensicsError subclasses for a missing table or a bad parameter.
    """
    with reusing_freed_memory():
        return _match(Case(case), params_from(config.section("match"), overrides, file=config.file), config,
                      progress, overrides)


def _match(c: Case, p: MatchParams, config: CaseConfig, progress: Reporter | None,
           overrides: dict[str, Any] | None) -> MatchResult:
    path = c.table_path("exchanges")
    with _helpers_running(_workers_to_start(path, p) if path.is_file() else 0) as helpers:
        targets, info = _load_targets(c, p)
        index = TargetIndex(targets, p.k)
        scanner = Scanner(index, p)
        helpers.start(scanner)
        holders = _Holders(index, p)
        hits: list[np.ndarray] = []
        n_hits = pending = 0
        sources: dict[int, tuple[str, str | None, int]] = {}
        stats: dict[str, int] = {}
        for res in _run_pass(scanner, path, helpers, progress):
            holders.add(res.holder_gid, res.holder_tenant, res.holder_time)
            hits.append(res.hits)
            n_hits += len(res.hits)
            pending += len(res.hits)
            sources.update(res.sources)
            for key, v in res.stats.items():
                stats[key] = stats.get(key, 0) + v
            if pending > max(PRUNE_HITS, sum(len(h) for h in hits) // 2):
                # Hits on k-grams that are already common can never become evidence: drop them now.
                holders.compact()
                h = np.concatenate(hits)
                hits = [h[~holders.common[index.gid_flat[index.gid_offset[h[:, 0]] + h[:, 1]]]]]
                pending = 0
        held = holders.finish()
        pa.default_memory_pool().release_unused()  # the pass's Arrow buffers are not needed again
        all_hits = np.concatenate(hits) if hits else np.zeros((0, 6), HIT_DTYPE)
        del hits
        stats["hits"] = n_hits
        cands, vstats = _verify_hits(index, p, all_hits, sources, held, path, helpers, progress)
    stats.update(vstats)
    rows = _score_candidates(cands, targets, held, p)
    keys = {(r["source_request_id"], r["source_tenant_id"]) for r in rows}
    keys |= {(t.request_id, t.tenant_id) for t in targets if not t.control}
    facts = _record_facts(path, keys)
    rows, null = _decide(rows, targets, p, facts)
    for r in rows:
        r["passages"] = _passages_text(r["passages"])
    evidence = [r for r in rows if not r["control"] and r["tier"]]
    review = [r for r in rows if not r["control"] and not r["tier"] and r["relation"] == "cross_tenant"]
    control_rows = [r for r in rows if r["control"] and r["relation"] == "cross_tenant" and r["tier"]]
    n_control = sum(1 for t in targets if t.control)
    flagged_keys = sorted({(r["recipient_request_id"], r["recipient_tenant_id"]) for r in control_rows},
                          key=lambda k: request_key(*k))
    flagged = [rid for rid, _ in flagged_keys]
    cross = [r for r in evidence if r["relation"] == "cross_tenant"]
    damaged = [r for r in evidence + review if r["recipient_damage"] or r["source_damage"]]
    report = {
        "parameters": p.record(),
        "parameter_sources": {key: ("option" if (overrides or {}).get(key) is not None else
                                    "file" if key in config.section("match") else "default")
                              for key in p.record()},
        "versions": {"unicode": unicode_version(), "rapidfuzz": rapidfuzz.__version__, "xxhash": xxhash.VERSION,
                     "hash_seed": SEED},
        "searched": {
            "suspects": info["suspects"],
            "suspects_searched": sum(1 for t in targets if not t.control),
            "suspects_missing_from_exchanges": info["suspects_missing_from_exchanges"],
            "suspects_with_empty_response": info["suspects_with_empty_response"],
            "suspects_without_completed_at": info["suspects_without_completed_at"],
            "target_kgrams": index.kgram_count,
            "records": stats.get("records", 0),
            "records_without_received_at": stats.get("records_without_time", 0),
            "texts": stats.get("texts", 0),
            "chars": stats.get("chars", 0),
            "tokens": stats.get("tokens", 0),
            "prompt_tokens": stats.get("prompt_tokens", 0),
            "response_tokens": stats.get("response_tokens", 0),
            "kgram_hits_kept_after_rarity_and_own_context": stats.get("informative_hits", 0),
            "source_texts_verified": stats.get("texts_verified", 0),
            "sources": "every other record's prompt and every non-suspect response received before the "
                       "suspect response completed (completed_at, else received_at)",
            "lookback": f"{p.lookback_minutes:g} minutes" if p.lookback_minutes else "off",
            "same_decode_node": p.same_decode_node,
        },
        "findings": {
            "total": len(evidence),
            "cross_tenant": len(cross),
            "same_tenant": len(evidence) - len(cross),
            "cross_tenant_confirmed": sum(1 for r in cross if r["tier"] == "confirmed"),
            "cross_tenant_probable": sum(1 for r in cross if r["tier"] == "probable"),
            "suspects_with_cross_tenant_evidence": len({(r["recipient_request_id"], r["recipient_tenant_id"])
                                                        for r in cross}),
            "exposed_tenants": len({r["source_tenant_id"] for r in cross}),
            "review": len(review),
            "on_damaged_data": len(damaged),
        },
        "tiering": p.tiering,
        "null": null,
        "damage": {
            "column_in_exchanges": facts.has_damage_column,
            "findings_on_damaged_data": sorted(r["finding_id"] for r in damaged if r["tier"]),
            "review_on_damaged_data": sorted(r["finding_id"] for r in damaged if not r["tier"]),
        },
        "control": {
            "requested": p.control_size,
            "size": n_control,
            "sample": "non-suspect responses with text, length-matched to the suspects (places shared among "
                      "log2-of-bytes classes as the suspects are), in each class the smallest xxh64(request_id, "
                      "seed), ties by tenant",
            "length_classes": {"suspects": info["suspect_length_classes"], "control": info["control_length_classes"]},
            "findings": len(control_rows),
            "responses_with_findings": len(flagged),
            "request_ids_with_findings": flagged,
            "false_positive_rate": round(len(flagged) / n_control, 6) if n_control else None,
        },
    }
    for name, part, table_schema in (("evidence", evidence, schema.EVIDENCE), ("review", review, schema.REVIEW)):
        table = pa.Table.from_pylist([{f: r.get(f) for f in table_schema.names} for r in part], schema=table_schema)
        write_table(c.table_path(name), table, table_schema)
        with atomic_open(c.root / f"{name}.csv", newline="") as fh:
            fh.write(_csv_text(part, REVIEW_COLUMNS if name == "review" else CSV_COLUMNS))
    write_json(c.root / "match.json", report)
    return MatchResult(case=c.root, params=p, findings=evidence, report=report, control_findings=control_rows,
                       run_stats={"kgram_hits": stats.get("hits", 0), "jobs_here": helpers.jobs["here"],
                                  "jobs_on_workers": helpers.jobs["workers"], "workers_failed": helpers.failed})


__all__ = ["CSV_COLUMNS", "MatchParams", "MatchResult", "match", "params_from"]
