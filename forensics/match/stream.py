"""The streaming pass: every record's prompt and response, hashed once, probed against the targets.

One call of :func:`scan_batch` handles one record batch and returns plain arrays and tuples, so
batches can run in any process in any order (the parent sorts and merges). For each text it:

* counts, for every target k-gram it contains, the tenant that held it and when (``holders``:
  the rarity and own-context evidence). A target's own response never counts (it is the text
  under suspicion); its prompt does, and is also marked as that target's own prompt (a holder
  entry with the negative code ``-(target + 1)``);
* when the record may be a *source* for a target (received before the target finished, not the
  target itself, inside the optional lookback / same decode node), keeps its hits.

After the pass, hits on k-grams that turn out common or own context are dropped and the rest are
clustered per (target, source text) along the alignment diagonal and verified with
:func:`verify` (rapidfuzz on token slices).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import xxhash

from forensics.match.align import align
from forensics.match.fingerprint import SEED, kgrams, tokenize
from forensics.match.index import NO_TIME, TargetIndex
from forensics.match.tiers import MatchParams


def tenant_code(tenant: str | None) -> int:
    """A stable 63-bit code for a tenant id (the same in every process)."""
    key = b"\x00<none>" if tenant is None else tenant.encode("utf-8", "surrogatepass")
    return xxhash.xxh64_intdigest(key, seed=SEED) >> 1


@dataclasses.dataclass
class Candidate:
    """One verified region between a target response and a source text (before rarity)."""

    target: int
    source_request_id: str
    source_tenant_id: str | None
    source_kind: str
    tok_start: int  # target token span, end exclusive
    tok_end: int
    recipient_start: int  # character offsets
    recipient_end: int
    source_start: int
    source_end: int
    score: float
    matched: int
    longest_run: int
    kgram_positions: np.ndarray  # target k-gram positions lying inside matching blocks
    blocks: tuple[tuple[int, int], ...] = ()  # matching blocks as (target token index, size)


@dataclasses.dataclass
class BatchResult:
    """What one batch contributes: holder triples, source hits and what was scanned."""

    holder_gid: np.ndarray
    holder_tenant: np.ndarray
    holder_time: np.ndarray
    hits: np.ndarray  # int64 rows (target, target position, source row, kind, source position, source tenant code)
    sources: dict[int, tuple[str, str | None]]  # source row -> (request id, tenant id), rows with hits only
    stats: dict[str, int]


KINDS = ("prompt", "response")


class Scanner:
    """Holds the broadcast targets and parameters; one per process."""

    def __init__(self, index: TargetIndex, params: MatchParams) -> None:
        self.index = index
        self.p = params
        t = index.targets
        self.deadline = np.array([x.deadline_us for x in t], dtype=np.int64)
        self.received = np.array([x.received_us for x in t], dtype=np.int64)
        nodes = sorted({x.decode_node for x in t if x.decode_node is not None})
        self.node_code = {n: i for i, n in enumerate(nodes)}
        self.t_node = np.array([self.node_code.get(x.decode_node, -1) if x.decode_node else -2 for x in t], dtype=np.int64)
        self.lookback_us = int(params.lookback_minutes * 60_000_000)

    def scan_batch(self, batch: dict[str, Any]) -> BatchResult:
        """Hash and probe every text of one batch of exchanges; keep holders and source hits.

        Verification waits until the pass is over: only then is it known which k-grams are
        common, so hits on common text (most hits, in real traffic) are never aligned at all.
        """
        gids, tenants, times, hits = [], [], [], []
        sources: dict[int, tuple[str, str | None]] = {}
        stats = {"records": 0, "texts": 0, "chars": 0, "tokens": 0, "prompt_tokens": 0, "response_tokens": 0,
                 "records_without_time": 0}
        for row, (rid, tenant, when, node, prompt, response) in enumerate(zip(
            batch["request_id"], batch["tenant_id"], batch["received_us"], batch["decode_node"],
            batch["prompt_text"], batch["response_text"],
        ), start=batch["row0"]):
            stats["records"] += 1
            if when is None:
                stats["records_without_time"] += 1
            own_target = self.index.by_request.get(rid)
            is_target = own_target is not None
            is_suspect = is_target and not self.index.targets[own_target].control
            code = tenant_code(tenant)
            for kind_no, text in enumerate((prompt, response)):
                if not text:
                    continue
                tk = tokenize(text)
                stats["texts"] += 1
                stats["chars"] += len(text)
                stats["tokens"] += len(tk)
                stats[f"{KINDS[kind_no]}_tokens"] += len(tk)
                pos, gid = self.index.probe(kgrams(tk.hash, self.p.k))
                if len(pos) == 0 or when is None:
                    continue
                # A target's own response is the text under suspicion: it proves nothing about who held it.
                if kind_no == 0 or not is_target:
                    g = np.unique(gid)
                    gids.append(g)
                    tenants.append(np.full(len(g), code, dtype=np.int64))
                    times.append(np.full(len(g), when, dtype=np.int64))
                    if kind_no == 0 and is_target:
                        # The target's own prompt: marked with the negative code -(target + 1).
                        gids.append(g)
                        tenants.append(np.full(len(g), -(own_target + 1), dtype=np.int64))
                        times.append(np.full(len(g), when, dtype=np.int64))
                if kind_no == 1 and is_suspect:
                    continue  # leaked text is not anyone's source
                h = self._eligible(when, node, pos, gid, own_target)
                if len(h):
                    h[:, 2], h[:, 3], h[:, 5] = row, kind_no, code
                    hits.append(h)
                    sources[row] = (rid, tenant)
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))  # noqa: E731
        all_hits = np.concatenate(hits) if hits else np.zeros((0, 6), np.int64)
        return BatchResult(cat(gids), cat(tenants), cat(times), all_hits, sources, stats)

    def _eligible(self, when: int, node: str | None, pos: np.ndarray, gid: np.ndarray,
                  own_target: int | None) -> np.ndarray:
        """Hits of one source text on targets it may be a source for, as (t, q, ., ., s, .) rows."""
        which, tgt, tpos = self.index.occurrences(gid)
        ok = when < self.deadline[tgt]
        if own_target is not None:
            ok &= tgt != own_target
        if self.lookback_us:
            ok &= when >= self.received[tgt] - self.lookback_us
        if self.p.same_decode_node:
            ok &= self.t_node[tgt] == self.node_code.get(node, -3) if node else np.zeros_like(ok)
        out = np.zeros((int(ok.sum()), 6), dtype=np.int64)
        out[:, 0], out[:, 1], out[:, 4] = tgt[ok], tpos[ok], pos[which[ok]]
        return out


def verify(index: TargetIndex, p: MatchParams, t: int, source_request_id: str, source_tenant: str | None,
           kind: str, tk: Any, q: np.ndarray, s: np.ndarray) -> list[Candidate]:
    """Cluster the hits of one source text on target ``t`` and align each cluster."""
    out: list[Candidate] = []
    seen: set[tuple[int, int, int, int]] = set()
    k, margin = p.k, p.margin
    ttok = index.targets[t].tokens
    for cq, cs in _clusters(q, s, p.gap):
        qa, qb = max(int(cq.min()) - margin, 0), min(int(cq.max()) + k + margin, len(ttok))
        sa, sb = max(int(cs.min()) - margin, 0), min(int(cs.max()) + k + margin, len(tk))
        al = align(ttok.hash[qa:qb], tk.hash[sa:sb])
        if al is None:
            continue
        a0, a1, b0, b1 = qa + al.a_start, qa + al.a_end, sa + al.b_start, sa + al.b_end
        if (a0, a1, b0, b1) in seen:
            continue
        seen.add((a0, a1, b0, b1))
        kpos = [np.arange(qa + a, qa + a + size - k + 1) for a, _, size in al.blocks if size >= k]
        out.append(Candidate(
            target=t, source_request_id=source_request_id, source_tenant_id=source_tenant, source_kind=kind,
            tok_start=a0, tok_end=a1,
            recipient_start=int(ttok.start[a0]), recipient_end=int(ttok.end[a1 - 1]),
            source_start=int(tk.start[b0]), source_end=int(tk.end[b1 - 1]),
            score=al.score, matched=al.matched, longest_run=al.longest_run,
            kgram_positions=np.concatenate(kpos) if kpos else np.zeros(0, np.int64),
            blocks=tuple((qa + a, size) for a, _, size in al.blocks),
        ))
    return out


def _clusters(q: np.ndarray, s: np.ndarray, gap: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Group hits (target position q, source position s) into regions along a diagonal.

    Hits are linked when their diagonals (s - q) differ by at most ``gap`` (insertions and
    deletions shift the diagonal a little) and, within that, their target positions are at
    most ``gap`` apart; a passage repeated elsewhere in the source lands on another diagonal.
    """
    diag = s - q
    order = np.lexsort((q, diag))
    q, s, diag = q[order], s[order], diag[order]
    out = []
    for dgrp in np.split(np.arange(len(q)), np.flatnonzero(np.diff(diag) > gap) + 1):
        qq, ss = q[dgrp], s[dgrp]
        o = np.argsort(qq, kind="stable")
        qq, ss = qq[o], ss[o]
        for part in np.split(np.arange(len(qq)), np.flatnonzero(np.diff(qq) > gap) + 1):
            out.append((qq[part], ss[part]))
    return out


# Process-pool plumbing: the scanner is sent once to each worker by the pool initializer.
_WORKER: Scanner | None = None


def init_worker(scanner: Scanner) -> None:
    """Pool initializer: keep the broadcast targets in this process."""
    global _WORKER
    _WORKER = scanner


def scan_in_worker(batch: dict[str, Any]) -> BatchResult:
    """Pool task: scan one batch with this process's scanner."""
    assert _WORKER is not None
    return _WORKER.scan_batch(batch)


__all__ = ["KINDS", "BatchResult", "Candidate", "NO_TIME", "Scanner", "init_worker", "scan_in_worker", "tenant_code", "verify"]
