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
import functools
import os
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from forensics.artifacts import customer_key
from forensics.match.align import align_ints
from forensics.match.fingerprint import GROUP_CHARS, SEED, Tokens, mix64, tokenize_many
from forensics.match.index import NO_TIME, Target, TargetIndex
from forensics.match.order import lexsort_ints, unique_ints, unique_ints_first
from forensics.match.tiers import MatchParams
from forensics.memory import collect_less_often, give_back_above, keep_freed_memory, release_arrow_memory


@functools.lru_cache(maxsize=1 << 16)
def tenant_code(tenant: str | None) -> int:
    """A stable 63-bit code for a tenant id (the same in every process). Ids that are the same text by
    Unicode's canonical equivalence (``Zürich`` with ``ü`` as one character or as ``u`` and a combining
    mark: a name typed on another system) get the same code: one customer, whose own text never names it
    exposed to itself. The ids stay as logged everywhere else."""
    key = b"\x00<none>" if tenant is None else str(customer_key(tenant)).encode("utf-8", "surrogatepass")
    return xxhash.xxh64_intdigest(key, seed=SEED) >> 1


def first_suspects(targets: list[Target]) -> tuple[np.ndarray, np.ndarray]:
    """Each customer that received a suspect response: its tenant code (sorted) and when it first did."""
    first: dict[int, int] = {}
    for x in targets:
        if not x.control and x.received_us != NO_TIME:
            code = tenant_code(x.tenant_id)
            first[code] = min(first.get(code, x.received_us), x.received_us)
    codes = sorted(first)
    return np.array(codes, dtype=np.int64), np.array([first[c] for c in codes], dtype=np.int64)


def same_customer(a: str | None, b: str | None) -> bool:
    """Whether two tenant ids name one customer (:func:`tenant_code`)."""
    return a == b or customer_key(a) == customer_key(b)


@dataclasses.dataclass(slots=True)
class Candidate:
    """One verified region between a target response and a source text (before rarity)."""

    target: int
    source_request_id: str
    source_tenant_id: str | None
    source_kind: str
    source_received_us: int
    tok_start: int  # target token span, end exclusive
    tok_end: int
    recipient_start: int  # character offsets (-1: the target's tokens have none, in a worker: see tok_start)
    recipient_end: int
    source_start: int
    source_end: int
    score: float
    matched: int
    longest_run: int
    # Matching blocks as (target token index, size); the matched k-grams are those inside blocks of k or more.
    blocks: tuple[tuple[int, int], ...] = ()
    later: bool = False  # the source arrived after the target completed: it cannot be the cause (null)
    # The source's row of exchanges.parquet (-1: not read from it): the match stage's process names the pairs'
    # sources by row number while the workers verify, not by their ids (see findings.RegionScorer).
    source_row: int = -1


@dataclasses.dataclass
class BatchResult:
    """What one batch contributes: holder triples, source hits and what was scanned."""

    holder_gid: np.ndarray
    holder_tenant: np.ndarray
    holder_time: np.ndarray
    hits: np.ndarray  # HIT_DTYPE rows (target, target position, source row, kind, source position, source char)
    sources: dict[int, tuple[str, str | None, int]]  # source row -> (request id, tenant id, received), rows with hits
    stats: dict[str, int]


KINDS = ("prompt", "response")

#: Hits are the one structure that grows with the corpus (until common k-grams are retired):
#: 24 bytes each. Positions, rows and target numbers stay far below 2**31.
HIT_DTYPE = np.int32

NO_TIME_MAX = np.iinfo(np.int64).max

#: Characters of text tokenized at once by the streaming pass (bounds its memory).
CHUNK_CHARS = 4_000_000


def search_start(target: Target, lookback_us: int) -> int:
    """The earliest receipt a target's search covers: NO_TIME without a lookback; with one, that long before the
    target was received, or completed when its receipt is unknown (NO_TIME less the lookback would search nothing).
    The pass keeps sources from here on; the evidence model counts the records searched from here too."""
    if not lookback_us:
        return NO_TIME
    anchor = target.received_us if target.received_us != NO_TIME else target.deadline_us
    return max(anchor - lookback_us, NO_TIME)


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
        self.lookback_us = params.lookback_us
        self.since = np.array([search_start(x, self.lookback_us) for x in t], dtype=np.int64)
        self.control_t = np.array([x.control for x in t], dtype=bool)
        # Indexed by a text's own target number, -1 (not a target) being the extra last entry.
        self._control_own = np.append(self.control_t, False)
        # A suspect the engine shows was served the one-token placeholder (its over-limit line, or usage
        # counting one prompt token): its prompt never reached a KV cache, so no stale page holds it and it
        # is no source. Its customer still held the text (an earlier turn of the conversation, prefilled,
        # is the source to cite: the over-limit copy holds the whole conversation and would win).
        self._unprefilled_own = np.append(np.array([not x.control and (x.engine_signature or x.placeholder_usage)
                                                    for x in t], dtype=bool), False)
        self.t_code = np.array([tenant_code(x.tenant_id) for x in t], dtype=np.int64)
        # When each tenant first received a suspect response: its texts after that may carry leaked text on
        # (a conversation resends its answers), so they are no chance source for the later-text null.
        self.first_suspect = dict(zip(*(a.tolist() for a in first_suspects(t)), strict=True))
        # What this process has seen of who holds each k-gram: a k-gram more than max_tenants
        # tenants held before the earliest deadline of the targets containing it is common for
        # every one of them, so its hits need not even be produced (exact, whatever the order:
        # one process's view is a subset of the whole). This keeps boilerplate from flooding
        # the hit lists.
        n = index.kgram_count
        self.min_deadline = (np.minimum.reduceat(self.deadline[index.occ_target], index.occ_start[:-1])
                             if n else np.zeros(0, np.int64))
        self.common = np.zeros(n, dtype=bool)
        self._count = np.zeros(n, dtype=np.int32)
        # Hashed (k-gram, tenant) pairs already counted, as sorted runs of decreasing size (each at
        # least twice the next): a chunk's new pairs are one more run, merged only while it is as
        # large as the one before, so each pair is merged O(log n) times, not once per chunk.
        self._seen: list[np.ndarray] = []
        # What the stage's process knows is common (a file it writes, mapped here; in that process, its own
        # mask): taken in at every task (scan_rows). Without it, a worker starting with nothing learnt produced hits on
        # every k-gram of text other processes had already found common: 17.9M hits (430 MiB, 1.2 GB at the
        # worker's peak) for one task of 683 rows on the 4 GB benchmark incident, 136k for the same task
        # after its neighbour's. Exact: what any process saw held by more than max_tenants tenants is common.
        self.known_common_file: str | None = None
        self._known_common: np.ndarray | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_known_common"] = None  # a map of a file (or another process's mask): each process opens its own
        return state

    def end_pass(self) -> None:
        """The streaming pass is over in this process: let go of what only it reads (the index's look-up, what this
        process learnt of who held each k-gram, the known-common map). Verification reads the targets alone."""
        self.index.forget_lookup()
        self.min_deadline, self.common, self._count = np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int32)
        self._seen, self._known_common = [], None

    def know_common(self, common: np.ndarray) -> None:
        """Take in, at every task from now on, the k-grams ``common`` marks (a mask this process updates)."""
        self._known_common = common

    def take_known_common(self) -> None:
        """Mark common what the stage's process knows is (the file it writes, or its own mask): once a task."""
        if self._known_common is None and self.known_common_file is not None:
            try:
                self._known_common = np.memmap(self.known_common_file, dtype=np.bool_, mode="r",
                                               shape=self.common.shape)
            except (OSError, ValueError):  # gone, or not on this machine: learn alone (the same hits, later dropped)
                self.known_common_file = None
        if self._known_common is not None and len(self.common):
            np.logical_or(self.common, self._known_common, out=self.common)

    def _learn(self, gid: np.ndarray, tenant: np.ndarray, when: np.ndarray) -> None:
        early = (tenant >= 0) & (when < self.min_deadline[gid]) & ~self.common[gid]
        if not early.any():
            return
        g = gid[early]
        keys = mix64(g.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) ^ tenant[early].astype(np.uint64))
        keys, first = unique_ints_first(keys)
        for run in self._seen:
            if not len(keys):
                break
            idx = np.minimum(np.searchsorted(run, keys), len(run) - 1)
            new = run[idx] != keys
            keys, first = keys[new], first[new]
        if not len(keys):
            return
        touched = g[first]
        np.add.at(self._count, touched, 1)
        # Only the k-grams counted now can have become common: a pass over all of them per chunk
        # would cost as much as the chunk's own work once there are thousands of targets.
        self.common[touched[self._count[touched] > self.p.max_tenants]] = True
        self._seen.append(keys)
        while len(self._seen) > 1 and 2 * len(self._seen[-1]) > len(self._seen[-2]):
            # Runs are disjoint (only new keys are added): a sort of the two is their union.
            top = self._seen.pop()
            merged = np.concatenate([self._seen.pop(), top])
            merged.sort(kind="stable")
            self._seen.append(merged)

    def scan_batch(self, batch: dict[str, Any]) -> BatchResult:
        """Scan one batch of exchanges in chunks of at most ``CHUNK_CHARS`` characters of text.

        A chunk's token arrays cost about 40 bytes per token, so a batch of megabyte prompts is
        cut into chunks (a single longer record is a chunk of its own).
        """
        sizes = text_sizes(batch).tolist()
        parts, lo = [], 0
        while lo < len(sizes):
            hi, total = lo, 0
            while hi < len(sizes) and (hi == lo or total + sizes[hi] <= CHUNK_CHARS):
                total += sizes[hi]
                hi += 1
            chunk = {key: (v[lo:hi] if isinstance(v, list) else v) for key, v in batch.items()}
            for key in ("prompt_text", "response_text"):
                chunk[key] = _pylist(batch[key], lo, hi)
            chunk["row0"] = batch["row0"] + lo
            parts.append(self._scan_chunk(chunk))
            lo = hi
        return merge(parts)

    def _scan_chunk(self, batch: dict[str, Any]) -> BatchResult:
        """Hash and probe every text of one chunk of exchanges; keep holders and source hits.

        The batch's texts are tokenized together (a few array passes, whatever their number).
        Verification waits until the pass is over: only then is it known which k-grams are
        common, so hits on common text (most hits, in real traffic) are never aligned at all.
        """
        rids, tenants = batch["request_id"], batch["tenant_id"]
        n = len(rids)
        texts: list[str] = []
        for prompt, response in zip(batch["prompt_text"], batch["response_text"]):
            texts.append(prompt or "")
            texts.append(response or "")
        tk, owner, first = tokenize_many(texts)
        counts = np.diff(first)
        lengths = np.array([len(t) for t in texts], dtype=np.int64)
        stats = {"records": n, "texts": int((lengths > 0).sum()), "chars": int(lengths.sum()),
                 "tokens": int(counts.sum()), "prompt_tokens": int(counts[0::2].sum()),
                 "response_tokens": int(counts[1::2].sum()),
                 "records_without_time": sum(1 for w in batch["received_us"] if w is None)}
        # Per-text attributes (text 2i is row i's prompt, 2i+1 its response).
        when = np.repeat(np.array([NO_TIME if w is None else w for w in batch["received_us"]], dtype=np.int64), 2)
        code = np.repeat(np.array([tenant_code(t) for t in tenants], dtype=np.int64), 2)
        own = np.repeat(np.array([self.index.by_request.get((r, t), -1) for r, t in zip(rids, tenants)],
                                 dtype=np.int64), 2)
        node = np.repeat(np.array([self.node_code.get(x, -3) if x else -3 for x in batch["decode_node"]],
                                  dtype=np.int64), 2)
        kind = np.tile(np.array([0, 1], dtype=np.int64), n)
        is_target = own >= 0
        is_suspect = is_target & ~self._control_own[own]
        empty = np.zeros(0, np.int64)
        gpos, gid = self.index.probe_kgrams(tk.hash, owner)
        text = owner[gpos]
        timed = when[text] != NO_TIME
        chars = tk.start[gpos][timed]  # where each hit k-gram starts in its text (for verification windows)
        pos, gid, text = gpos[timed] - first[text[timed]], gid[timed], text[timed]
        # Holders: a suspect's own response is the text under suspicion and proves nothing. Every other
        # response is held by its customer from just after it completed (completed_at, else received_at):
        # a control response too, so which responses the control sample draws never changes what counts
        # as held; and a control's own response, held only after its own completion, never explains itself.
        # K-grams this process already knows to be common are dropped before the pairs are made
        # unique (most hits of real traffic are on common text; the sort is the costly part). The
        # parent retires them too: the entries that made them common reached it in earlier results.
        done = np.array([NO_TIME if c is None else c for c in batch["completed_us"]], dtype=np.int64)
        done = np.where(done == NO_TIME, when[1::2], done)  # completed_at, else received_at
        held_at = when.copy()
        held_at[1::2] = np.where(done == NO_TIME, NO_TIME, done + 1)
        hold = ((kind[text] == 0) | ~is_suspect[text]) & ~self.common[gid]
        n_gids = max(self.index.kgram_count, 1)
        pairs = unique_ints(text[hold] * n_gids + gid[hold])
        ht, hg = pairs // n_gids, pairs % n_gids
        self._learn(hg, code[ht], held_at[ht])
        mine = (kind[ht] == 0) & is_target[ht]  # the target's own prompt: marked -(target + 1)
        h_gid = np.concatenate([hg, hg[mine]])
        h_tenant = np.concatenate([code[ht], -(own[ht][mine] + 1)])
        h_time = np.concatenate([held_at[ht], when[ht][mine]])
        # Sources: everything but a suspect's own (leaked) response and the prompts the engine never
        # prefilled; never hits on common text.
        src = (~((kind[text] == 1) & is_suspect[text]) & ~((kind[text] == 0) & self._unprefilled_own[own[text]])
               & ~self.common[gid])
        pos, gid, text, chars = pos[src], gid[src], text[src], chars[src]
        hits = np.zeros((0, 6), HIT_DTYPE)
        if len(gid):
            which, tgt, tpos = self.index.occurrences(gid)
            st = text[which]
            ok = (when[st] < self.deadline[tgt]) & (tgt != own[st])
            if self.lookback_us:
                ok &= when[st] >= self.since[tgt]
            if self.p.same_decode_node:
                ok &= self.t_node[tgt] == node[st]
            # The suspects against texts that arrived after them (they cannot be the cause): the null of
            # chance matches for exactly these responses. Their own tenant's later texts resend them.
            # One look-up per row (code holds each row's tenant twice: prompt, response).
            first = np.array([self.first_suspect.get(int(x), NO_TIME_MAX) for x in code[0::2]], dtype=np.int64)
            tainted = when > np.repeat(first, 2)
            later = ((when[st] >= self.deadline[tgt]) & ~self.control_t[tgt] & (tgt != own[st])
                     & (code[st] != self.t_code[tgt]) & ~tainted[st])
            ok |= later
            if ok.any():
                # Column by column into the 32-bit rows: stacking the 64-bit columns first held every hit
                # twice more, in a task that can produce millions of hits before common text is known.
                at = np.flatnonzero(ok)
                wo, so = which[at], st[at]
                hits = np.empty((len(at), 6), HIT_DTYPE)
                hits[:, 0], hits[:, 1], hits[:, 2] = tgt[at], tpos[at], batch["row0"] + so // 2
                hits[:, 3], hits[:, 4], hits[:, 5] = kind[so] + 2 * later[at], pos[wo], chars[wo]
        sources = {int(r): (rids[int(r) - batch["row0"]], tenants[int(r) - batch["row0"]],
                            int(when[2 * (int(r) - batch["row0"])])) for r in unique_ints(hits[:, 2])}
        return BatchResult(h_gid if len(h_gid) else empty, h_tenant if len(h_tenant) else empty,
                           h_time if len(h_time) else empty, hits, sources, stats)


def text_sizes(batch: dict[str, Any]) -> np.ndarray:
    """UTF-8 bytes of each row's prompt plus response (a bound on its characters)."""
    total = np.zeros(len(batch["request_id"]), dtype=np.int64)
    for key in ("prompt_text", "response_text"):
        col = batch[key]
        if isinstance(col, list):
            total += np.array([len(t or "") for t in col], dtype=np.int64)
        else:
            total += value_bytes(col)
    return total


def value_bytes(col: pa.Array) -> np.ndarray:
    """Bytes of each value of a string array (0 for a null), read from its offsets.

    (No compute kernel, so worker processes never import ``pyarrow.compute``. A null slot
    usually spans no bytes; if a writer gave it some, only chunk sizes grow, never results.)
    """
    t = col.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t)):  # e.g. dictionary-encoded by another writer
        return np.array([len((v or "").encode("utf-8", "surrogatepass")) for v in col.to_pylist()], dtype=np.int64)
    if len(col) == 0 or col.buffers()[1] is None:
        return np.zeros(len(col), dtype=np.int64)
    width = np.int64 if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else np.int32
    offsets = np.frombuffer(col.buffers()[1], dtype=width)[col.offset : col.offset + len(col) + 1]
    return np.diff(offsets.astype(np.int64))


def _pylist(col: Any, lo: int, hi: int) -> list[str | None]:
    return col[lo:hi] if isinstance(col, list) else col.slice(lo, hi - lo).to_pylist()


def merge(parts: list[BatchResult]) -> BatchResult:
    """One result for several batches (arrays concatenated, statistics summed)."""
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))  # noqa: E731
    stats: dict[str, int] = {}
    sources: dict[int, tuple[str, str | None, int]] = {}
    for r in parts:
        sources.update(r.sources)
        for key, v in r.stats.items():
            stats[key] = stats.get(key, 0) + v
    hits = np.concatenate([r.hits for r in parts]) if parts else np.zeros((0, 6), HIT_DTYPE)
    return BatchResult(cat([r.holder_gid for r in parts]), cat([r.holder_tenant for r in parts]),
                       cat([r.holder_time for r in parts]), hits, sources, stats)


#: Source texts longer than this are verified through windows around each hit cluster
#: instead of being tokenized whole again (a megabyte prompt with one leaked line).
WINDOW_MIN_CHARS = 65_536
#: Characters read on each side of a cluster (enough for ``margin`` tokens of ordinary text).
WINDOW_PAD_CHARS = 4_096


def regions(text: str, chars: np.ndarray) -> tuple[Tokens, np.ndarray]:
    """Tokens of the parts of a long ``text`` around the hit offsets ``chars``, tokenized once.

    Hits closer than two pads share a region; each region is widened to white space (no token
    is cut). Returns the regions' tokens one after another (offsets into ``text``) and the
    index of each region's first token (plus the total), so a cluster never reaches into a
    neighbouring region.
    """
    c = np.unique(chars.astype(np.int64))
    cuts = np.flatnonzero(np.diff(c) > 2 * WINDOW_PAD_CHARS) + 1
    parts, bounds = [], [0]
    for grp in np.split(c, cuts):
        lo, hi = _widen(text, max(int(grp[0]) - WINDOW_PAD_CHARS, 0), int(grp[-1]) + WINDOW_PAD_CHARS)
        tk = tokenize_many([text[lo:hi]])[0]
        parts.append(Tokens(tk.start + lo, tk.end + lo, tk.hash))
        bounds.append(bounds[-1] + len(tk))
    return (Tokens(np.concatenate([t.start for t in parts]), np.concatenate([t.end for t in parts]),
                   np.concatenate([t.hash for t in parts])), np.array(bounds, dtype=np.int64))


def _widen(text: str, lo: int, hi: int) -> tuple[int, int]:
    """``text[lo:hi]`` widened to white space (a space or a line feed) on both sides, so no token is cut."""
    lo = max(text.rfind(" ", 0, lo), text.rfind("\n", 0, lo)) + 1 if lo > 0 else 0
    ends = [i for i in (text.find(" ", hi), text.find("\n", hi)) if i >= 0]
    return lo, (min(ends) if ends and hi < len(text) else len(text))


#: Characters read on each side of a hit cluster when a short source text is verified (see
#: :func:`cluster_windows`): some forty tokens of prose, where the alignment needs ``margin`` (8).
CLUSTER_PAD_CHARS = 256


def cluster_windows(index: TargetIndex, p: MatchParams, texts: list[str], grp: np.ndarray, t: np.ndarray,
                    q: np.ndarray, s: np.ndarray, c: np.ndarray,
                    clusters: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[Tokens, np.ndarray, np.ndarray]:
    """Tokens of the parts of ``texts`` that the alignment of their hits reads, tokenized at once.

    Hit ``i`` lies in text ``grp[i]`` at source token ``s[i]`` (of the whole text) starting at character
    ``c[i]``, on target ``t[i]`` at position ``q[i]``. Each cluster of hits (as :func:`_verify_groups`
    forms them) is aligned over its tokens plus ``margin`` on each side (``k`` more after its last hit),
    so a text is tokenized only around its clusters: ``CLUSTER_PAD_CHARS`` on each side, widened to white
    space, overlapping windows merged. A chat text holds hits in a few places, and tokenizing whole texts
    was half the verification's time. Whether a window holds all the tokens its clusters need is checked
    after tokenizing (a window of a few long tokens may not); a text where one does not is tokenized
    whole instead, so the candidates are exactly those of whole texts.

    ``clusters``: :func:`_cluster_order` of these hits, when the caller has it already.

    Returns the tokens (character offsets into their own text), the text of each token, and the first
    token of each window (plus the total): a text's windows follow one another, in text order.
    """
    n_texts = len(texts)
    lengths = np.array([len(x) for x in texts], dtype=np.int64)
    n_t = max(len(index.targets), 1)
    order, cut = clusters if clusters is not None else _cluster_order(grp * n_t + t, q, s, p.gap)
    first = cut[:-1]
    co, so = c[order], s.astype(np.int64)[order]
    cl_text = grp[order][first]
    cl_cmin, cl_cmax = np.minimum.reduceat(co, first), np.maximum.reduceat(co, first)
    cl_smin, cl_smax = np.minimum.reduceat(so, first), np.maximum.reduceat(so, first)
    whole = np.zeros(n_texts, dtype=bool)
    for attempt in range(2):
        spans = _windows(texts, lengths, cl_text, cl_cmin, cl_cmax, whole)
        tk, owner, bounds = _tokenize_spans(texts, spans)
        if attempt:
            break
        # Per cluster: its window, and the tokens of its first and last hit in it.
        w_lo = np.array([a for _, a, _ in spans], dtype=np.int64)
        w_hi = np.array([b for _, _, b in spans], dtype=np.int64)
        w_text = np.array([g for g, _, _ in spans], dtype=np.int64)
        key = (w_text << 32) | w_lo
        win = np.searchsorted(key, (cl_text << 32) | cl_cmin, side="right") - 1
        keys = (owner << 32) | tk.start
        lmin = np.searchsorted(keys, (cl_text << 32) | cl_cmin)
        lmax = np.searchsorted(keys, (cl_text << 32) | cl_cmax)
        n_tok = len(tk)
        found = ((lmin < n_tok) & (lmax < n_tok)
                 & (tk.start[np.minimum(lmin, n_tok - 1)] == cl_cmin) & (tk.start[np.minimum(lmax, n_tok - 1)] == cl_cmax))
        ok = (found & (lmax - lmin == cl_smax - cl_smin) & (lmax < bounds[win + 1])
              & ((lmin - p.margin >= bounds[win]) | (w_lo[win] == 0))
              & ((lmax + p.k + p.margin <= bounds[win + 1]) | (w_hi[win] == lengths[cl_text])))
        if ok.all():
            break
        whole[cl_text[~ok]] = True
    return tk, owner, bounds


def _windows(texts: list[str], lengths: np.ndarray, cl_text: np.ndarray, cl_cmin: np.ndarray, cl_cmax: np.ndarray,
             whole: np.ndarray) -> list[tuple[int, int, int]]:
    """(text, start, end) of every window to tokenize, in text order: each cluster's characters plus the pad,
    widened to white space and merged where they meet; a text marked ``whole`` is one window."""
    lo = np.maximum(cl_cmin - CLUSTER_PAD_CHARS, 0)
    hi = np.minimum(cl_cmax + CLUSTER_PAD_CHARS, lengths[cl_text])
    order = np.lexsort((lo, cl_text))
    spans: list[tuple[int, int, int]] = []
    done = -1
    for g, a, b in zip(cl_text[order].tolist(), lo[order].tolist(), hi[order].tolist()):
        text = texts[g]
        if whole[g]:
            if g != done:
                spans.append((g, 0, len(text)))
                done = g
            continue
        a, b = _widen(text, a, b)
        if spans and spans[-1][0] == g and a <= spans[-1][2]:
            spans[-1] = (g, spans[-1][1], max(spans[-1][2], b))
        else:
            spans.append((g, a, b))
    return spans


def _tokenize_spans(texts: list[str], spans: list[tuple[int, int, int]]) -> tuple[Tokens, np.ndarray, np.ndarray]:
    """Tokens of every ``(text, start, end)`` span, offsets into their own text; the text of each token; the
    first token of each span (plus the total)."""
    tk, piece, first = tokenize_many([texts[g][a:b] for g, a, b in spans])
    shift = np.array([a for _, a, _ in spans], dtype=np.int64)[piece]
    owner = np.array([g for g, _, _ in spans], dtype=np.int64)[piece]
    return Tokens(tk.start + shift, tk.end + shift, tk.hash), owner, first


def verify(index: TargetIndex, p: MatchParams, t: int | np.ndarray, source: tuple[str, str | None, int],
           kind: str, tk: Tokens, bounds: np.ndarray, q: np.ndarray, s: np.ndarray,
           c: np.ndarray, later: bool = False, row: int = -1) -> list[Candidate]:
    """Cluster the hits of one source text on target ``t`` and align each cluster.

    ``q``/``s`` are the hits' token positions in the target and the source, ``c`` their source
    character offsets; ``tk`` holds the source's tokens (the whole text, or the regions around
    its hits, see :func:`regions`) and ``bounds`` the first token of each region. ``t`` may also
    be an array (the target of each hit): the targets are then taken in increasing order, each
    as if verified alone. ``row``: the source's row of exchanges.parquet (-1: unknown).
    """
    n = len(q)
    tt = np.full(n, t, dtype=np.int64) if np.ndim(t) == 0 else np.asarray(t, dtype=np.int64)
    loc = np.searchsorted(tk.start, c.astype(np.int64))
    return _verify_groups(index, p, [(source, kind, later, row)], np.zeros(n, np.int64), tt, q, s, loc, tk, bounds)


def _verify_groups(index: TargetIndex, p: MatchParams, meta: list[tuple[tuple[str, str | None, int], str, bool, int]],
                   grp: np.ndarray, t: np.ndarray, q: np.ndarray, s: np.ndarray, loc: np.ndarray, tk: Tokens,
                   bounds: np.ndarray, clusters: tuple[np.ndarray, np.ndarray] | None = None) -> list[Candidate]:
    """Cluster and align the hits of several source texts at once (one set of array passes).

    Hit ``i`` belongs to text ``grp[i]`` (``meta``: its source, kind, whether it is later and its row),
    target ``t[i]``, at target position ``q[i]``, source position ``s[i]`` and source token
    ``loc[i]`` of ``tk`` (the texts' tokens one after another, offsets relative to each text).
    ``bounds``: the first token of every region of ``tk`` (plus the total); no alignment crosses
    one. Candidates come out per text in order, per target in increasing order within it, then
    per cluster, exactly as :func:`verify` on each (text, target) alone would give them.
    ``clusters``: :func:`_cluster_order` of these hits, when the caller has it already.
    """
    if len(q) == 0:
        return []
    n_t = max(len(index.targets), 1)
    order, cut = clusters if clusters is not None else _cluster_order(grp * n_t + t, q, s, p.gap)
    k, margin = p.k, p.margin
    first = cut[:-1]
    key = (grp * n_t + t)[order][first]
    qq, local = q.astype(np.int64)[order], loc[order]
    lmin, lmax = np.minimum.reduceat(local, first), np.maximum.reduceat(local, first)
    region = np.searchsorted(bounds, lmin, side="right") - 1
    ct = key % n_t
    t_len = index.token_counts[ct] if len(index.targets) else ct
    qa = np.maximum(np.minimum.reduceat(qq, first) - margin, 0)
    qb = np.minimum(np.maximum.reduceat(qq, first) + k + margin, t_len)
    sa = np.maximum(lmin - margin, bounds[region])
    sb = np.minimum(lmax + k + margin, bounds[region + 1])
    out: list[Candidate] = []
    seen: set[tuple[int, int, int, int]] = set()  # per (text, target), as each was verified alone
    last = -1
    # Each cluster's slices go to the aligner as int lists (align_ints): the whole flush's tokens as lists cost
    # more (most are aligned over a few dozen tokens), arrays and a dataclass per call as much as the alignment.
    shash, sstart, send = tk.hash.view(np.int64), tk.start, tk.end
    for key_, t_, qa_, qb_, sa_, sb_ in zip(key.tolist(), ct.tolist(), qa.tolist(), qb.tolist(), sa.tolist(),
                                            sb.tolist()):
        if key_ != last:
            seen.clear()
            last = key_
            ttok = index.targets[t_].tokens
            thash, tstart, tend = ttok.hash.view(np.int64), ttok.start, ttok.end
            # A worker's targets have no character offsets (pool._WithoutTexts): the stage's process places the
            # passage from the token span.
            placed = len(tstart) == len(thash)
            source, kind, later, row = meta[key_ // n_t]
        al = align_ints(thash[qa_:qb_].tolist(), shash[sa_:sb_].tolist(), min_score=p.probable_score,
                        min_matched=p.min_tokens)
        if al is None:
            continue
        a0, a1, b0, b1 = qa_ + al[0], qa_ + al[1], sa_ + al[2], sa_ + al[3]
        span = (a0, a1, int(sstart[b0]), int(send[b1 - 1]))
        if span in seen:
            continue
        seen.add(span)
        out.append(Candidate(
            target=t_, source_request_id=source[0], source_tenant_id=source[1], source_received_us=source[2],
            source_kind=kind,
            tok_start=a0, tok_end=a1,
            recipient_start=int(tstart[a0]) if placed else -1, recipient_end=int(tend[a1 - 1]) if placed else -1,
            source_start=span[2], source_end=span[3],
            score=al[6], matched=al[4], longest_run=al[5],
            blocks=tuple([(qa_ + a, size) for a, _, size in al[7]]), later=later, source_row=row,
        ))
    return out


def _cluster_order(t: np.ndarray, q: np.ndarray, s: np.ndarray, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Group hits (target t, target position q, source position s) into regions along a diagonal.

    Per target (in increasing order): hits are linked when their diagonals (s - q) differ by at
    most ``gap`` (insertions and deletions shift the diagonal a little) and, within that, their
    target positions are at most ``gap`` apart; a passage repeated elsewhere in the source lands
    on another diagonal. Returns the hits' order (clusters one after another, each sorted by
    target position, ties in diagonal order) and where each cluster starts (plus the total).
    """
    if len(q) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    q, s = q.astype(np.int64), s.astype(np.int64)
    diag = s - q
    order = lexsort_ints((q, diag - diag.min(), t))  # (the same order, with no negative diagonal)
    tq, d = t[order], diag[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (tq[1:] != tq[:-1]) | (np.diff(d) > gap)  # a new diagonal band (or target)
    band = np.cumsum(new)
    o2 = lexsort_ints((q[order], band))  # stable: equal positions keep their diagonal order
    order = order[o2]
    b, qq = band[o2], q[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (b[1:] != b[:-1]) | (np.diff(qq) > gap)
    return order, np.append(np.flatnonzero(new), len(order))


def to_us(col: pa.ChunkedArray | pa.Array) -> list[int | None]:
    """Timestamps (microsecond unit) as integer microseconds (None stays None)."""
    if isinstance(col, pa.ChunkedArray):
        return [v for chunk in col.chunks for v in to_us(chunk)]
    if col.type == pa.int64() or (pa.types.is_timestamp(col.type) and col.type.unit == "us"):
        return col.view(pa.int64()).to_pylist()  # zero-copy: no cast kernel
    return col.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist() if len(col) else []


#: Columns the streaming pass reads.
PASS_COLUMNS = ["request_id", "tenant_id", "received_at", "completed_at", "decode_node", "prompt_text", "response_text"]


def batch_dict(b: pa.RecordBatch, row0: int) -> dict[str, Any]:
    """One record batch as :meth:`Scanner.scan_batch` takes it (``row0``: global number of its first row)."""
    return {
        "row0": row0,
        "request_id": b.column("request_id").to_pylist(),
        "tenant_id": b.column("tenant_id").to_pylist(),
        "received_us": to_us(b.column("received_at")),
        "completed_us": to_us(b.column("completed_at")),
        "decode_node": b.column("decode_node").to_pylist(),
        # Texts stay Arrow arrays until their chunk is scanned: a Python str of a 4-million-character
        # prompt with one emoji in it takes 16 MB.
        "prompt_text": b.column("prompt_text"),
        "response_text": b.column("response_text"),
    }


#: Average uncompressed bytes per batch read (see :func:`rows_per_batch`); larger batches (1 MB)
#: measured no faster and cost 100 MB more peak RSS (token arrays take ~40 bytes per character).
BATCH_BYTES = 1 << 18


def rows_per_batch(rows: int, nbytes: int, minimum: int) -> int:
    """Rows to read at once from a row group of ``rows`` rows and ``nbytes`` bytes (uncompressed).

    About ``BATCH_BYTES`` of data on average and at least ``minimum`` rows: a row group of short
    chats is read in batches of hundreds of rows (each batch costs a fixed ~1 ms), one of
    megabyte prompts ``minimum`` rows at a time. A batch never exceeds its row group, whose size
    ingest caps.
    """
    return max(minimum, min(rows, BATCH_BYTES * rows // max(nbytes, 1)))


def iter_row_group(pf: pq.ParquetFile, row_group: int, minimum_rows: int) -> Iterator[pa.RecordBatch]:
    """The pass's columns of one row group, in batches sized by :func:`rows_per_batch`."""
    meta = pf.metadata.row_group(row_group)
    size = rows_per_batch(meta.num_rows, meta.total_byte_size, minimum_rows)
    # On this thread, not Arrow's (see forensics.memory.release_arrow_memory); and on two cores one thread reads a
    # row group's texts about a third faster.
    return pf.iter_batches(batch_size=size, row_groups=[row_group], columns=PASS_COLUMNS, use_threads=False)


class RowReader:
    """Reads row ranges of one row group in increasing order, continuing where the last range ended.

    A worker handed ranges of a row group in order reads (decompresses) that row group once,
    whichever ranges the other workers take, and holds one batch (see :func:`rows_per_batch`) at a time.
    """

    def __init__(self, batch_rows: int) -> None:
        self.batch_rows = batch_rows
        self._key: tuple[str, int] | None = None
        self._it: Iterator[pa.RecordBatch] = iter(())
        self._pos = 0  # row (within the row group) of the next row the iterator or held batch gives
        self._held: pa.RecordBatch | None = None
        self._file: tuple[str, pq.ParquetFile] | None = None

    def read(self, path: str, row_group: int, lo: int, hi: int) -> Iterator[tuple[int, pa.RecordBatch]]:
        """(first row within the row group, batch) for rows ``lo`` to ``hi`` (exclusive) of ``row_group``."""
        if self._key != (path, row_group) or self._pos > lo:
            if self._file is None or self._file[0] != path:  # one footer read per file, not per row group
                self._file = (path, pq.ParquetFile(path))
            # (No row group until the new one is open: a read that fails here leaves nothing to continue.)
            self._it, self._held, self._key = iter(()), None, None
            release_arrow_memory()  # (the last row group's buffers, let go just above)
            self._it = iter_row_group(self._file[1], row_group, self.batch_rows)
            self._key, self._pos = (path, row_group), 0
        while self._pos < hi:
            b = self._held if self._held is not None else next(self._it, None)
            self._held = None
            if b is None:
                break
            start, end = self._pos, self._pos + b.num_rows
            self._pos = end
            if end <= lo:
                continue
            a, z = max(lo, start), min(hi, end)
            yield a, b.slice(a - start, z - a)
            if z < end:  # the rest of this batch starts the next range
                self._held, self._pos = b.slice(z - start), z


@dataclasses.dataclass(frozen=True)
class ScanTask:
    """Rows ``lo`` to ``hi`` (exclusive) of one row group, whose first row is global row ``row0``."""

    path: str
    row_group: int
    row0: int
    lo: int
    hi: int


class RowTexts:
    """One row's prompt (``[0]``) and response (``[1]``), each made a Python string only when asked for
    (a row verified for its response alone may hold a megabyte prompt)."""

    def __init__(self, batch: pa.RecordBatch, i: int) -> None:
        self._batch, self._i = batch, i

    def __getitem__(self, kind: int) -> str:
        value: str | None = self._batch.column(kind)[self._i].as_py()
        return value or ""


def read_rows(path: str, row_group: int, first_row: int, rows: list[int]) -> Iterator[tuple[int, RowTexts]]:
    """(row, its texts) for the sorted global ``rows`` of one row group starting at ``first_row``.

    Reads batches sized like the pass's (:func:`rows_per_batch`: hundreds of short chats, a few
    megabyte prompts) and stops after the last wanted row. On the calling thread: once the caller lets go of
    the last row given, :func:`forensics.memory.release_arrow_memory` gives back what the read kept.
    """
    if not rows:
        return
    pf = pq.ParquetFile(path)
    meta = pf.metadata.row_group(row_group)
    size = rows_per_batch(meta.num_rows, meta.total_byte_size, 16)
    wanted = iter(rows)
    want = next(wanted)
    pos = first_row
    for b in pf.iter_batches(batch_size=size, row_groups=[row_group], columns=["prompt_text", "response_text"],
                             use_threads=False):
        end = pos + b.num_rows
        while want < end:
            yield want, RowTexts(b, want - pos)
            nxt = next(wanted, None)
            if nxt is None:
                return
            want = nxt
        pos = end


@dataclasses.dataclass
class VerifyTask:
    """Source rows of one row group and their informative hits (sorted by row, kind, target, ...)."""

    path: str
    row_group: int
    first_row: int  # global number of the row group's first row
    rows: list[int]
    hits: np.ndarray  # HIT_DTYPE rows, as in BatchResult, only for ``rows``
    sources: dict[int, tuple[str, str | None, int]]


def verify_task(index: TargetIndex, p: MatchParams, task: VerifyTask) -> list[Candidate]:
    """Read the task's source texts and align each (target, source text) group of hits.

    Short texts are tokenized together, up to ``GROUP_CHARS`` at a time (one array pass for
    hundreds of chats); a long text only around its hits (:func:`regions`). Candidates come out
    in row, kind, target order, whichever process runs the task, so the results do not depend
    on how verification was split.
    """
    kept = task.hits
    rows = np.asarray(task.rows, dtype=np.int64)
    lo = np.searchsorted(kept[:, 2], rows, side="left")
    hi = np.searchsorted(kept[:, 2], rows, side="right")
    bounds = {int(r): (int(a), int(b)) for r, a, b in zip(rows, lo, hi)}
    cands: list[Candidate] = []
    short: list[tuple[int, int, np.ndarray, str]] = []  # (row, kind, hits, text) waiting to be tokenized

    def align_text(row: int, kind_no: int, ks: np.ndarray, tk: Tokens, spans: np.ndarray) -> None:
        cands.extend(verify(index, p, ks[:, 0], task.sources[row], KINDS[kind_no % 2], tk, spans, ks[:, 1],
                            ks[:, 4], ks[:, 5], later=kind_no >= 2, row=row))

    def flush() -> None:
        # The waiting texts' hits, clustered and aligned in one go: a text of short chats has a few
        # hits on a few targets, so per-text array calls would cost more than the work itself.
        if not short:
            return
        ks = np.concatenate([x[2] for x in short])
        grp = np.repeat(np.arange(len(short), dtype=np.int64), [len(x[2]) for x in short])
        t, q, s, c = ks[:, 0].astype(np.int64), ks[:, 1], ks[:, 4], ks[:, 5].astype(np.int64)
        # Clusters are formed once: the windows are placed around them and the alignment reads them.
        clusters = _cluster_order(grp * max(len(index.targets), 1) + t, q, s, p.gap)
        tk, owner, bounds = cluster_windows(index, p, [x[3] for x in short], grp, t, q, s, c, clusters)
        # Each hit's token in its own text, by one search over (text, character) keys.
        loc = np.searchsorted((owner << 32) | tk.start, (grp << 32) | c)
        meta = [(task.sources[row], KINDS[kind_no % 2], kind_no >= 2, row) for row, kind_no, _, _ in short]
        cands.extend(_verify_groups(index, p, meta, grp, t, q, s, loc, tk, bounds, clusters))
        short.clear()

    waiting = 0
    texts = None
    for row, texts in read_rows(task.path, task.row_group, task.first_row, task.rows):
        sel = kept[bounds[row][0] : bounds[row][1]]
        if not len(sel):
            continue
        kind_col = sel[:, 3]
        # Most rows' hits are of one kind (the prompt): then no search for the kinds, and no copy.
        one = bool((kind_col == kind_col[0]).all())
        for kind_no in ([int(kind_col[0])] if one else unique_ints(kind_col).tolist()):
            ks = sel if one else sel[kind_col == kind_no]
            text = texts[kind_no % 2]
            if len(text) <= WINDOW_MIN_CHARS:
                short.append((row, kind_no, ks, text))
                waiting += len(text)
                if waiting >= GROUP_CHARS:
                    flush()
                    waiting = 0
                continue
            flush()  # keep candidates in row order
            waiting = 0
            align_text(row, kind_no, ks, *regions(text, ks[:, 5]))  # a long text: only around its hits
    flush()
    # The row group's buffers are shared by its batches: given back once the last row's texts are let go too.
    del texts
    release_arrow_memory()
    return cands


# Process-pool plumbing: the scanner is sent once to each worker by the pool initializer.
_WORKER: Scanner | None = None


def init_worker(scanner: Scanner) -> None:
    """Keep the broadcast targets in this (worker) process."""
    global _WORKER
    _WORKER = scanner
    keep_freed_memory()
    collect_less_often()


def init_worker_from(payload: str) -> None:
    """Pool initializer: the scanner, pickled once by the parent into the file ``payload``."""
    with open(payload, "rb") as fh:
        init_worker(pickle.load(fh))


def worker_ready() -> int:
    """Pool task that only shows the worker is up (its process id)."""
    assert _WORKER is not None
    return os.getpid()


_READER: RowReader | None = None


def scan_rows(scanner: Scanner, reader: RowReader, task: ScanTask) -> BatchResult:
    """Read a range of rows from the Parquet file with ``reader`` and scan it."""
    scanner.take_known_common()
    return first_holdings(merge([scanner.scan_batch(batch_dict(b, task.row0 + a))
                                 for a, b in reader.read(task.path, task.row_group, task.lo, task.hi)]))


def first_holdings(res: BatchResult) -> BatchResult:
    """``res`` with one holder entry per (k-gram, tenant), its earliest time.

    What the parent keeps of them anyway (:class:`forensics.match.rarity.HolderCounts`); done
    here, by whoever scanned the rows, the parent receives and sorts a fraction of the entries
    (a conversation resends its text in every request): its share of the pass was the longest.
    """
    g, t, w = res.holder_gid, res.holder_tenant, res.holder_time
    if len(g) < 2:
        return res
    order = np.lexsort((w, t, g))
    g, t, w = g[order], t[order], w[order]
    first = np.ones(len(g), dtype=bool)
    first[1:] = (g[1:] != g[:-1]) | (t[1:] != t[:-1])
    return dataclasses.replace(res, holder_gid=g[first], holder_tenant=t[first], holder_time=w[first])


def scan_rows_in_worker(task: ScanTask) -> BatchResult:
    """Pool task: :func:`scan_rows` with this worker's scanner (no texts pass through the parent)."""
    global _READER
    assert _WORKER is not None
    if _READER is None:
        _READER = RowReader(_WORKER.p.batch_rows)
    result = scan_rows(_WORKER, _READER, task)
    give_back_above()  # what the task's largest chunk left behind, beyond what is kept for reuse
    return result


__all__ = [
    "BATCH_BYTES",
    "BatchResult",
    "CHUNK_CHARS",
    "CLUSTER_PAD_CHARS",
    "Candidate",
    "HIT_DTYPE",
    "KINDS",
    "NO_TIME",
    "PASS_COLUMNS",
    "RowReader",
    "RowTexts",
    "ScanTask",
    "Scanner",
    "VerifyTask",
    "WINDOW_MIN_CHARS",
    "WINDOW_PAD_CHARS",
    "batch_dict",
    "cluster_windows",
    "first_holdings",
    "init_worker",
    "init_worker_from",
    "iter_row_group",
    "merge",
    "read_rows",
    "regions",
    "rows_per_batch",
    "scan_rows",
    "scan_rows_in_worker",
    "tenant_code",
    "text_sizes",
    "to_us",
    "value_bytes",
    "verify",
    "verify_task",
    "worker_ready",
]
