"""Which tenants held each target k-gram, and when: what makes a matched k-gram common text or
the recipient's own context (see ``match/__init__.py``, step 3)."""



import numpy as np

from forensics.match.index import NO_TIME, TargetIndex
from forensics.match.order import unique_ints
from forensics.match.stream import tenant_code
from forensics.match.tiers import MatchParams

#: What :meth:`HolderCounts.finish` gives: CSR start per k-gram id, tenant codes, first times, common mask,
#: and per entry whether it counts over all time (:func:`independent_entries`).
Holders = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class HolderCounts:
    """Which tenant held each target k-gram, first seen when: unique (gid, tenant), min time.

    Memory stays bounded as the corpus grows: at each compaction, a k-gram already held by more
    than ``max_tenants`` tenants before the earliest deadline of the targets containing it is
    common for every one of them; it is marked in ``common`` and its entries (and, in
    :func:`match`, its hits) are dropped.
    """

    def __init__(self, index: TargetIndex, p: MatchParams, compact_entries: int) -> None:
        n = index.kgram_count
        self.n = n
        self.index = index
        self.cap = p.max_tenants
        self.compact_entries = compact_entries
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
            if self.pending > max(self.compact_entries, 2 * self.compacted):
                self.compact()

    def compact(self) -> None:
        """Keep one entry per (k-gram, tenant) with its first time; retire common k-grams."""
        if not self.parts:
            return
        g = np.concatenate([x[0] for x in self.parts])
        t = np.concatenate([x[1] for x in self.parts])
        w = np.concatenate([x[2] for x in self.parts])
        # Sorted by (k-gram, tenant) only, each run's first time taken by a reduction: a third sort key (the
        # time) cost a whole pass of the lexsort more (about a fifth of its time) for the same entries.
        order = by_kgram_and_tenant(g, t)
        g, t = g[order], t[order]
        first = np.ones(len(g), dtype=bool)
        first[1:] = (g[1:] != g[:-1]) | (t[1:] != t[:-1])
        at = np.flatnonzero(first)
        del first
        w = np.minimum.reduceat(w[order], at) if len(at) else w[:0]
        g, t = g[at], t[at]
        early = (t >= 0) & (w < self.min_deadline[g])
        self.common |= np.bincount(g[early], minlength=self.n) > self.cap
        keep = ~self.common[g]
        self.parts = [(g[keep], t[keep], w[keep])]
        self.pending = self.compacted = int(keep.sum())

    def finish(self) -> Holders:
        """CSR start per gid, tenant codes and first times sorted by (gid, tenant), the common mask, and which
        entries count over all time (:func:`independent_entries`). The counting is over: what only it reads (each
        entry's k-gram id, the k-grams' earliest deadlines: 12 MiB on the 4 GB benchmark incident, kept by the stage
        while the workers verified) is let go."""
        self.compact()
        g, t, w = self.parts[0] if self.parts else (np.zeros(0, np.int64),) * 3
        start = np.searchsorted(g, np.arange(self.n + 1))
        if len(g) < 2**31:  # 32-bit places: every process that verifies holds them (6 MiB each as 64-bit at 4 GB)
            start = start.astype(np.int32)
        self.parts, self.min_deadline = [], np.zeros(0, np.int64)
        return start, t, w, self.common, independent_entries(self.index, start, t, w)


def by_kgram_and_tenant(g: np.ndarray, t: np.ndarray) -> np.ndarray:
    """An order that sorts the entries by k-gram id ``g`` (below 2**32), then tenant code ``t``: ``np.lexsort((t, g))``
    but for the order of equal entries. One sort of a 64-bit key (the k-gram id above each tenant code's rank
    among the codes present) costs about 0.3-0.4x the lexsort's two stable passes over the 63-bit codes
    (``benchmarks/probe.py``)."""
    if len(t) == 0:
        return np.zeros(0, np.int64)
    if g.min() < 0 or g.max() >= 2**32:  # the key holds the id in its top 32 bits
        raise ValueError(f"k-gram ids from {g.min()} to {g.max()}, outside 0 to 2**32 - 1")
    _, rank = np.unique(t, return_inverse=True)
    key = (g.astype(np.uint64) << np.uint64(32)) | rank.astype(np.uint64).reshape(-1)
    return np.argsort(key)


def without_common(hits: list[np.ndarray], index: TargetIndex, common: np.ndarray) -> list[np.ndarray]:
    """``hits`` (parts of rows of :data:`forensics.match.stream.HIT_DTYPE`: target, target position, ...)
    without those on k-grams marked ``common``: they can never become evidence.

    Part by part: one array of every hit would hold them twice for the moment of the prune (the match
    stage's peak on the 4 GB benchmark incident, 223 MiB more in its process).
    """
    return [h[~common[index.gid_flat[index.gid_offset[h[:, 0]] + h[:, 1]]]] for h in hits]


def holder_entries(start: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every holder entry of the k-gram ids ``g``: which element of ``g`` it belongs to, and its
    position in the holder arrays (``start`` as in :data:`Holders`)."""
    n = start[g + 1] - start[g]
    seg = np.repeat(np.arange(len(g)), n)
    first = np.cumsum(n) - n
    return seg, start[g][seg] + (np.arange(int(n.sum())) - first[seg])


def independent_entries(index: TargetIndex, start: np.ndarray, tenant: np.ndarray, when: np.ndarray) -> np.ndarray:
    """Which holder entries (CSR ``start`` per k-gram id, tenant codes, first held at ``when``) count over all
    time: a customer's text, not the recipient's own context (tenant code >= 0), held no later than that
    customer received that k-gram in a suspect response. A text many customers sent, even after the suspect,
    is public text (a licence, a famous passage; a model can write it unprompted), not anyone's secret; a
    customer resending what leaked into an answer it received says nothing either way. Only that text: a
    customer that received some other suspect answer still sent this text on its own (most customers of a
    long incident receive one).

    Suspects a batch at a time (about :data:`INDEPENDENT_BATCH` of their distinct k-grams), over the entries
    of their own k-grams: no table of every suspect k-gram and customer is built (millions of rows on a big
    case, in every process that scores), nor a loop of small array steps per suspect.
    """
    independent = tenant >= 0
    batch: list[tuple[np.ndarray, int, int]] = []
    size = 0
    for x in index.targets:
        if x.control or x.received_us == NO_TIME or x.gids is None or not len(x.gids):
            continue
        g = unique_ints(x.gids)
        batch.append((g, tenant_code(x.tenant_id), x.received_us))
        size += len(g)
        if size >= INDEPENDENT_BATCH:
            _resent(start, tenant, when, batch, independent)
            batch, size = [], 0
    _resent(start, tenant, when, batch, independent)
    return independent


#: Distinct suspect k-grams whose holder entries :func:`independent_entries` looks at together.
INDEPENDENT_BATCH = 1 << 18


def _resent(start: np.ndarray, tenant: np.ndarray, when: np.ndarray, batch: list[tuple[np.ndarray, int, int]],
            independent: np.ndarray) -> None:
    """Clear ``independent`` for the holder entries of each suspect's k-grams (``batch``: k-gram ids, the
    suspect's tenant code, when it was received) that its customer first held after it was received."""
    if not batch:
        return
    g = np.concatenate([b[0] for b in batch])
    counts = [len(b[0]) for b in batch]
    code = np.repeat(np.array([b[1] for b in batch], dtype=np.int64), counts)
    received = np.repeat(np.array([b[2] for b in batch], dtype=np.int64), counts)
    seg, flat = holder_entries(start, g)
    independent[flat[(tenant[flat] == code[seg]) & (when[flat] > received[seg])]] = False


def pair_evidence(index: TargetIndex, holders: Holders, t: np.ndarray, g: np.ndarray,
                  max_tenants: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For (target, k-gram id) pairs: tenants holding it then, in the target's own prompt, held by its tenant.
    Tenants holding it then is infinite where it is common: then, or over all time (more than ``max_tenants``
    :func:`independent_entries`).

    "Then" is before the target response completed; "held by its tenant" is before it was sent.
    """
    start, h_tenant, h_time, common, independent = holders
    seg, flat = holder_entries(start, g)
    ten, when = h_tenant[flat], h_time[flat]
    tt = t[seg]
    deadline = np.array([x.deadline_us for x in index.targets], dtype=np.int64)
    received = np.array([x.received_us for x in index.targets], dtype=np.int64)
    codes = np.array([tenant_code(x.tenant_id) for x in index.targets], dtype=np.int64)
    held_then = (ten >= 0) & (when < deadline[tt])
    then = np.bincount(seg, weights=held_then, minlength=len(g)).astype(np.float64)
    then[common[g]] = np.inf
    ever = np.bincount(seg, weights=held_then | independent[flat], minlength=len(g))
    then[ever > max_tenants] = np.inf
    own_prompt = np.bincount(seg, weights=ten == -(tt + 1), minlength=len(g)) > 0
    tenant_held = np.bincount(seg, weights=(ten == codes[tt]) & (when <= received[tt]), minlength=len(g)) > 0
    return then, own_prompt, tenant_held
