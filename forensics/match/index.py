"""The small side of the broadcast hash join: every k-gram of every target response.

Targets are the suspect responses plus the control sample. Every k-gram at every position is
kept (no winnowing: a short leaked fragment must not fall between two sampled positions). The
unique hashes are sorted and fronted by a one-byte-per-slot presence table on the top hash
bits, so the vast majority of corpus k-grams, which match nothing, cost one table lookup each.
The few that pass are looked up through a directory of the sorted hashes by their top bits
(about one hash per bucket), not by a binary search: with thousands of targets the sorted
hashes outgrow the caches, and each of a binary search's ~20 steps was a cache miss (the probe
took twice the share of the pass at 4x the suspects). Memory is bounded by the targets, not by
the corpus.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from forensics.match.fingerprint import KGRAM_BASE, Tokens, compiled_kernels, kgrams, tokenize_many
from forensics.match.order import run_starts
from forensics.match.public import mask_public

NO_TIME = np.iinfo(np.int64).min


@dataclasses.dataclass
class Target:
    """One response the corpus is searched for (a suspect or a control-sample response)."""

    request_id: str
    tenant_id: str | None
    received_us: int  # NO_TIME when unknown
    deadline_us: int  # sources must be received before this (completed_at, else received_at)
    decode_node: str | None
    engine_signature: bool
    control: bool
    text: str
    # The usage the gateway logged counts one prompt token (the placeholder's) for this suspect's prompt: the
    # stale decode, seen without engine logs (findings.name_the_unexplained).
    placeholder_usage: bool = False
    # Only a truncated copy of this suspect's prompt was logged (LiteLLM's spend-log strings): its own-prompt
    # check cannot see the hidden middle (findings.decide).
    prompt_truncated: bool = False
    tokens: Tokens = dataclasses.field(repr=False, default=None)  # type: ignore[assignment]  # filled after loading
    gids: np.ndarray = dataclasses.field(repr=False, default=None)  # type: ignore[arg-type]  # filled after indexing


def pack_token_hashes(targets: list[Target]) -> tuple[np.ndarray, np.ndarray]:
    """The targets' token hashes one target after another, and where each target's start (one more at the end).

    Each target's ``tokens.hash`` becomes a view of that array, so a process that needs the hashes both ways holds
    them once (8 bytes a token: 13 MiB in each process that verifies, on the 4 GB benchmark incident)."""
    offsets = np.cumsum([0] + [len(t.tokens.hash) for t in targets]).astype(np.int64)
    hashes = np.concatenate([t.tokens.hash for t in targets]) if targets else np.zeros(0, np.uint64)
    for i, t in enumerate(targets):
        t.tokens = dataclasses.replace(t.tokens, hash=hashes[offsets[i] : offsets[i + 1]])
    return hashes, offsets


class TargetIndex:
    """Sorted unique k-gram hashes of the targets, with where each occurs."""

    def __init__(self, targets: list[Target], k: int) -> None:
        self.targets = targets
        self.k = k
        # Targets by (request id, tenant): two customers may send the same request id.
        self.by_request = {(t.request_id, t.tenant_id): i for i, t in enumerate(targets)}
        hashes, owner, pos = [], [], []
        # Public constants (an example key, the SHA-256 of nothing) are blanked first: no customer's secret.
        masked = [mask_public(t.text or "") for t in targets]
        self.public_constants_masked = sum(n for _, n in masked)
        tk, _, first = tokenize_many([text for text, _ in masked])  # one array pass for all targets
        # Tokens per target, read by every alignment of the verification (a list over thousands of
        # targets per call cost more than the call's own work).
        self.token_counts = np.diff(first).astype(np.int64)
        for i, t in enumerate(targets):
            a, b = int(first[i]), int(first[i + 1])
            # 32-bit character offsets (a response is far shorter than 2**31 characters): every process
            # of the pass holds the targets' tokens.
            t.tokens = Tokens(tk.start[a:b].astype(np.int32), tk.end[a:b].astype(np.int32), tk.hash[a:b])
            kg = kgrams(t.tokens.hash, k)
            hashes.append(kg)
            owner.append(np.full(len(kg), i, dtype=np.int32))
            pos.append(np.arange(len(kg), dtype=np.int32))
        h = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
        o = np.concatenate(owner) if owner else np.zeros(0, np.int32)
        p = np.concatenate(pos) if pos else np.zeros(0, np.int32)
        # By (hash, target, position): the positions are concatenated in (target, position) order already, so
        # a stable sort of the hashes alone gives lexsort's order (one sort, not three).
        order = np.argsort(h, kind="stable")
        h, o, p = h[order], o[order], p[order]
        # The runs of equal hashes, read off the sorted array (np.unique would sort it again).
        first = run_starts(h)
        self.unique = h[first]
        counts = np.diff(np.append(first, len(h)))
        # 32-bit positions, targets and k-gram ids (a case's targets hold far fewer than 2**31 k-grams): the
        # index is held by this process and by every worker of the streaming pass, and it grows with the
        # number of suspects.
        self.occ_start = np.append(first, len(h)).astype(np.int32)
        self.occ_target, self.occ_pos = o, p
        gid_sorted = np.repeat(np.arange(len(self.unique), dtype=np.int32), counts)
        gids = np.empty(len(h), dtype=np.int32)
        gids[order] = gid_sorted
        offset = 0
        offsets = []
        for t, kg in zip(targets, hashes):
            t.gids = gids[offset : offset + len(kg)]
            offsets.append(offset)
            offset += len(kg)
        self.gid_flat = gids  # k-gram id of every target position, targets one after another
        self.gid_offset = np.array(offsets, dtype=np.int64)
        self.build_lookup()

    def build_lookup(self) -> None:
        """The presence table and the directory over ``unique`` (what :meth:`probe` reads)."""
        self._kgram_count = len(self.unique)
        self.searchable = True  # (until forget_lookup)
        # Presence table: ~16 slots per target k-gram keeps the false-pass rate near 6 %. One bit per slot,
        # not a byte: the table is held by every process of the pass (32 MiB each as bytes on the 4 GB
        # benchmark incident), and the smaller table probes as fast (it stays in cache).
        bits = int(np.clip(np.ceil(np.log2(max(len(self.unique), 1) * 16)), 12, 26))
        self.shift = np.uint64(64 - bits)
        present = np.zeros(1 << bits, dtype=bool)
        present[(self.unique >> self.shift).astype(np.int64)] = True
        self.present = np.packbits(present, bitorder="little")
        # Directory: bucket b (the top ``dir_bits`` bits) holds unique[bucket[b]:bucket[b + 1]].
        dir_bits = int(np.clip(np.ceil(np.log2(max(len(self.unique), 1))), 8, 30))
        self.dir_shift = np.uint64(64 - dir_bits)
        self.bucket = np.searchsorted(self.unique >> self.dir_shift,
                                      np.arange((1 << dir_bits) + 1, dtype=np.uint64)).astype(np.int32)

    @property
    def kgram_count(self) -> int:
        """Distinct target k-grams held in memory."""
        return self._kgram_count

    def forget_lookup(self) -> None:
        """Let go of what only the streaming pass reads: the probe's table and directory, the sorted k-grams and
        where each occurs. Verification reads the targets, their k-gram ids and token counts; on the 4 GB benchmark
        incident this leaves each process that verifies 28 MiB (10 at 1 GB). Probing afterwards is an error."""
        empty32 = np.zeros(0, np.int32)
        self.unique, self.present, self.bucket = np.zeros(0, np.uint64), np.zeros(0, np.uint8), empty32
        self.occ_start, self.occ_target, self.occ_pos = empty32, empty32, empty32
        self.searchable = False

    def _require_lookup(self) -> None:
        if not self.searchable:  # (a search after the pass is a defect: said as one, not answered "no match")
            raise RuntimeError("the target index was searched after its look-up was let go (forget_lookup)")

    def probe(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Positions of ``hashes`` that are target k-grams, and their k-gram ids (the array form of :meth:`probe_kgrams`,
        which the match pass runs: the tests and ``benchmarks/probe.py`` hold the two equal)."""
        self._require_lookup()
        if len(hashes) == 0 or len(self.unique) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        slot = (hashes >> self.shift).astype(np.int64)
        pos = np.flatnonzero((self.present[slot >> 3] >> (slot & 7).astype(np.uint8)) & 1)
        if len(pos) == 0:
            return pos, pos
        cand = hashes[pos]
        b = (cand >> self.dir_shift).astype(np.int64)
        lo, hi = self.bucket[b], self.bucket[b + 1]
        idx = np.full(len(cand), -1, dtype=np.int64)
        # Walk each bucket one entry per round (few rounds: buckets hold about one hash each);
        # a candidate stops at its hash, or at a larger one (a bucket is sorted), or at the end.
        act = np.flatnonzero(lo < hi)
        cur = lo[act]
        while len(act):
            u = self.unique[cur]
            c = cand[act]
            eq = u == c
            idx[act[eq]] = cur[eq]
            go = (u < c) & (cur + 1 < hi[act])
            act, cur = act[go], cur[go] + 1
        hit = idx >= 0
        return pos[hit], idx[hit]

    def probe_kgrams(self, token_hashes: np.ndarray, token_text: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The k-grams over concatenated texts (``token_text``: each token's text) that are target k-grams: their
        positions (a k-gram's first token) and k-gram ids. What :func:`kgrams_many` and :meth:`probe` find
        together, in one compiled pass (``forensics.match.kernels.probe_kgrams``)."""
        self._require_lookup()
        if len(self.unique) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return compiled_kernels().probe_kgrams(token_hashes, token_text, self.k, KGRAM_BASE, self.present,
                                               self.shift, self.unique, self.bucket, self.dir_shift)

    def occurrences(self, gids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every (hit number, target, target position) for the k-gram ids ``gids``."""
        self._require_lookup()
        lo, hi = self.occ_start[gids], self.occ_start[gids + 1]
        n = hi - lo
        which = np.repeat(np.arange(len(gids), dtype=np.int64), n)
        first = np.cumsum(n) - n
        flat = lo[which] + (np.arange(int(n.sum()), dtype=np.int64) - first[which])
        return which, self.occ_target[flat], self.occ_pos[flat]
