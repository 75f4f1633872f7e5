"""Compiled loops for the match pass's per-element work (numba), imported on first use.

The tokenizer's fast path (:mod:`forensics.match.fingerprint`) reads every character of every text the
matcher searches: a class look-up, the token bounds and each token's polynomial hash; the pass then hashes
every k-gram of those tokens and looks it up in the targets' index. As numpy array passes that is a handful
of passes over the text, each a temporary as long as the text; a compiled loop does each step in one pass,
and the results are the same numbers (wrapping ``uint64`` arithmetic is the ring of integers mod 2**64,
whatever order it runs in). ``tests/test_match_kernels.py`` holds them equal to the array passes.

The loops are compiled once per machine (``cache=True`` keeps the machine code beside this file, or
in the user's cache folder when this folder is read-only), so a process loads them instead of
compiling; this module is imported only when a text is first tokenized, so commands that never
tokenize do not load numba.
"""

from __future__ import annotations

import numba
import numpy as np

# The classes of fingerprint.py: a token is a run of WORD characters, or one character of a class
# above WORD (a punctuation mark, a symbol, an ideograph); SPACE separates.
_SPACE, _WORD = 0, 1
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@numba.njit(cache=True, nogil=True, inline="always")
def _mix(x: np.uint64) -> np.uint64:
    """The splitmix64 finaliser (fingerprint.mix64) of one value."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _survey(cps: np.ndarray, info: np.ndarray, special_from: int) -> tuple[np.ndarray, int]:
    n = len(cps)
    special = np.empty(n, np.int64)
    k = 0
    unknown = 0
    for i in range(n):
        v = info[cps[i]]
        unknown += v == 0
        if v >= special_from:
            special[k] = i
            k += 1
    return special[:k].copy(), unknown


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _tokens(cps: np.ndarray, cls: np.ndarray, table: np.ndarray, remap: np.ndarray, sval: np.ndarray,
            p: np.uint64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(cps)
    by_class = len(cls) == n
    # Slot 0 takes the writes that belong to no token (white space, the text before the first token), so
    # the loop stores unconditionally and has no branch a text's word lengths could make it mispredict.
    starts = np.empty(n + 1, np.int64)
    ends = np.empty(n + 1, np.int64)
    sums = np.empty(n + 1, np.uint64)
    zero, one = np.uint64(0), np.uint64(1)
    m = np.int64(0)
    acc = zero
    power = one
    prev_word = zero
    for i in range(n):
        cp = cps[i]
        c = cls[i] if by_class else remap[table[cp]]
        word = np.uint64(c == _WORD)
        not_space = np.int64(c != _SPACE)
        goes_on = word & prev_word  # a word character after one: the same token
        opens = not_space & np.int64(one - goes_on)
        m += opens
        starts[m * opens] = i
        # acc = the token's sum(sval * p**(j - start)): reset where a token opens (its power back to 1).
        power = power * goes_on + (one - goes_on)
        acc = (acc & (zero - goes_on)) + sval[cp] * power
        power *= p
        at = m * not_space
        sums[at] = acc
        ends[at] = i + 1
        prev_word = word
    for t in range(1, m + 1):
        sums[t] = _mix(sums[t])
    return starts[1 : m + 1].copy(), ends[1 : m + 1].copy(), sums[1 : m + 1].copy()


_NO_CLASS = np.zeros(0, np.uint8)
_SAME = np.arange(256, dtype=np.uint8)
#: Every table a loop reads by code point covers them all (fingerprint's tables do): the loops read without
#: bounds checks, so a shorter one is refused here rather than read past.
_CODE_POINTS = 0x110000


def _check_tables(*tables: np.ndarray) -> None:
    for table in tables:
        if len(table) < _CODE_POINTS:
            raise ValueError(f"a table of {len(table)} entries, not one per code point ({_CODE_POINTS})")


def survey(cps: np.ndarray, info: np.ndarray, special_from: int) -> tuple[np.ndarray, int]:
    """The positions of the characters whose ``info`` (a table indexed by code point) is ``special_from`` or
    more, and how many characters have no ``info`` yet (0): one pass, no array as long as the text."""
    _check_tables(info)
    special, unknown = _survey(cps, info, special_from)
    return special, int(unknown)


def tokens_by_class(cls: np.ndarray, cps: np.ndarray, sval: np.ndarray,
                    p: np.uint64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every token's start, end (exclusive) and hash, given each character's class ``cls``: the hash is
    ``mix64(sum(sval[cps[j]] * p**(j - start)))`` over the token's characters, mod 2**64."""
    if len(cls) != len(cps):  # the loops read without bounds checks
        raise ValueError(f"{len(cls)} classes for {len(cps)} characters")
    _check_tables(sval)
    starts, ends, sums = _tokens(cps, cls, _NO_CLASS, _SAME, sval, p)
    return starts, ends, sums


def tokens_by_table(cps: np.ndarray, table: np.ndarray, sval: np.ndarray, p: np.uint64,
                    remap: np.ndarray = _SAME) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`tokens_by_class` with each character's class read as ``remap[table[code point]]`` as the loop
    goes, so no class array is built (``remap``: 256 entries, default the identity)."""
    _check_tables(table, sval)
    if len(remap) < 256:
        raise ValueError(f"a class remap of {len(remap)} entries, not 256")
    starts, ends, sums = _tokens(cps, _NO_CLASS, table, remap, sval, p)
    return starts, ends, sums


#: K-grams hashed, then looked up, a block at a time: the look-ups of a block are independent loads of a table
#: larger than the caches, which the processor overlaps; one k-gram at a time, each waited for the last.
_PROBE_BLOCK = 256


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _probe_kgrams(hashes: np.ndarray, owner: np.ndarray, k: int, q: np.uint64, present: np.ndarray,
                  shift: np.uint64, unique: np.ndarray, bucket: np.ndarray,
                  dir_shift: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    m = len(hashes) - k + 1
    if m <= 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    pos = np.empty(m, np.int64)
    gid = np.empty(m, np.int64)
    block = np.empty(_PROBE_BLOCK, np.uint64)
    passed = np.empty(_PROBE_BLOCK, np.int64)
    salt = np.uint64(k)
    seven = np.uint64(7)
    one = np.uint64(1)
    found = 0
    for first in range(0, m, _PROBE_BLOCK):
        last = min(m, first + _PROBE_BLOCK)
        for i in range(first, last):
            g = np.uint64(0)
            for j in range(k):
                g = g * q + hashes[i + j]
            block[i - first] = _mix(g ^ salt)
        # The presence table, with no branch: a k-gram across two texts (owner) never passes.
        n = np.int64(0)
        for i in range(first, last):
            slot = block[i - first] >> shift
            bit = (present[slot >> np.uint64(3)] >> (slot & seven)) & one
            passed[n] = i
            n += np.int64(bit) & np.int64(owner[i] == owner[i + k - 1])
        for c in range(n):
            i = passed[c]
            x = block[i - first]
            b = x >> dir_shift
            lo, hi = bucket[b], bucket[b + one]
            while lo < hi:  # a bucket is sorted and holds about one hash
                u = unique[lo]
                if u >= x:
                    if u == x:
                        pos[found] = i
                        gid[found] = lo
                        found += 1
                    break
                lo += 1
    return pos[:found].copy(), gid[:found].copy()


def probe_kgrams(hashes: np.ndarray, owner: np.ndarray, k: int, q: np.uint64, present: np.ndarray,
                 shift: np.uint64, unique: np.ndarray, bucket: np.ndarray,
                 dir_shift: np.uint64) -> tuple[np.ndarray, np.ndarray]:
    """The positions (into ``hashes``) of the k-grams, within one text each (``owner``: each token's text), whose
    hash (``fingerprint.kgrams``, with ``q``) is one of the sorted ``unique``, and its index there: the presence
    table ``present`` (one bit a slot, the top bits above ``shift``) and the directory ``bucket`` (by the top
    bits above ``dir_shift``) of :class:`forensics.match.index.TargetIndex`, in one pass with no array of the
    k-gram hashes."""
    if len(owner) != len(hashes):  # the loop reads without bounds checks
        raise ValueError(f"{len(owner)} owners for {len(hashes)} tokens")
    if k < 1:
        raise ValueError(f"k-grams of {k} tokens")
    pos, gid = _probe_kgrams(hashes, owner, k, q, present, shift, unique, bucket, dir_shift)
    return pos, gid
