"""Stable text fingerprints: a model-independent tokenizer and seeded k-gram hashes.

Tokens
    Text is compared under Unicode compatibility equivalence and case folding (what NFKC +
    case-fold identify), with format characters (zero-width space, ZWJ, soft hyphen, BOM) and
    variation selectors ignored and every run of white space (CRLF included) a separator. A
    token is a run of letters, digits, marks and ``_``; each punctuation mark or symbol (emoji
    included) is a token on its own, and so is each Han, Hiragana or Katakana character (those
    scripts put no spaces between words). Every token keeps the character offsets (Python ``str``
    indices, end exclusive) of the original text it came from. The matcher then leaves the
    punctuation marks out (:func:`tokenize_many`): a decode from stale pages drops them.

How it stays vectorised
    Each code point is mapped once, lazily, through ``NFKD(casefold(NFKD(c)))`` (the Unicode
    compatibility-caseless match; NFKD and NFKC identify the same strings, and the per-character
    decomposed form lets a precomposed ``é`` and ``e`` + combining acute give the same sequence).
    The mapping lives in code-point-indexed numpy tables; a text becomes a ``uint32`` array
    (``utf-32``), is classified and cut into tokens with no Python loop per token or per character:
    the common work (the tables read, the token bounds and hashes) is one compiled pass over the
    array (:mod:`forensics.match.kernels`, numba), the rare cases are numpy array operations. The
    reference path expands every character into its normalised code points first; the fast path
    (what :func:`tokenize` runs) keeps one element per original character, with each character's
    normalised form precomputed as a polynomial and a length, and hands only the rare characters
    that could join a neighbour oddly to the reference path. A property test over every BMP
    character holds the two paths equal.

Hashes
    Every normalised code point gets a fixed-seed xxhash64 value; a token's hash is a polynomial
    of those values over its code points (mod 2**64, position-normalised so equal tokens hash
    equal wherever they occur), finalised with the splitmix64 mixer; a k-gram hash is the same
    construction over k consecutive token hashes. All arithmetic is ``uint64`` (wrapping, in numpy
    or compiled loops), so hashes are identical across processes, machines and Python versions
    (never ``hash()``). The Unicode database version is recorded in ``match.json`` because the
    mapping depends on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import unicodedata
from collections.abc import Callable, Iterator
from types import ModuleType

import numpy as np
import xxhash

#: Seed of every hash the matcher computes; changing it changes every fingerprint.
SEED = 0x5EED_F0E1_5C1C

_SIZE = 0x110000
_P = np.uint64(0x9E3779B97F4A7C15)  # odd: invertible mod 2**64
_P_INV = np.uint64(pow(0x9E3779B97F4A7C15, -1, 2**64))
_Q = np.uint64(0xC2B2AE3D27D4EB4F)
KGRAM_BASE = _Q  # the base of a k-gram's polynomial over its tokens' hashes (kgrams)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)

# Character classes of normalised code points.
SPACE, WORD, PUNCT, IDEO = 0, 1, 2, 3

_lock = threading.Lock()
_known = np.zeros(_SIZE, dtype=bool)  # original code point already mapped
_explen = np.zeros(_SIZE, dtype=np.uint8)  # how many normalised code points it becomes
_expoff = np.zeros(_SIZE, dtype=np.uint32)  # where they start in _pool
_pool_list: list[int] = []
_pool = np.zeros(0, dtype=np.uint32)
_cls = np.zeros(_SIZE, dtype=np.uint8)  # class of a normalised code point
_val = np.zeros(_SIZE, dtype=np.uint64)  # xxhash of a normalised code point
_pow: list[np.ndarray] = [np.ones(1, dtype=np.uint64), np.ones(1, dtype=np.uint64)]

# The fast path works on original code points, one array element each, through three tables
# filled with the ones above: what a character is (``_info``), the polynomial of its
# normalised form (``_sval``: a letter that decomposes, "é" -> "e" + accent, stays one element)
# and that form's length (only lengths inside words move positions within a token).
_UNKNOWN, _F_SPACE, _F_WORD, _F_PUNCT, _F_IDEO, _F_WIDE, _F_MULTI, _F_IGNORE, _F_COMPLEX = range(9)
_info = np.zeros(_SIZE, dtype=np.uint8)
_sval = np.zeros(_SIZE, dtype=np.uint64)
_slen = np.ones(_SIZE, dtype=np.uint8)
# The class each ``_info`` value has on the fast path (a wide word is a word; a character that
# becomes several stand-alone tokens, "…" -> ". . .", is one punctuation token until expanded).
_INFO_CLASS = np.array([SPACE, SPACE, WORD, PUNCT, IDEO, WORD, PUNCT, SPACE, PUNCT], dtype=np.uint8)
# The same over every uint8 (what the compiled loop reads, ``_INFO_CLASS_256[_info[cp]]``), and a class read as itself.
_INFO_CLASS_256 = np.zeros(256, dtype=np.uint8)
_INFO_CLASS_256[: len(_INFO_CLASS)] = _INFO_CLASS
_SAME_CLASS = np.arange(256, dtype=np.uint8)
# The class of each original code point on the matcher's path (:func:`tokenize_many`), which leaves out
# punctuation marks: one that is a token of its own (``_F_PUNCT``, ``_F_IDEO`` or ``_F_MULTI`` of Unicode
# category P*) separates words as white space does there, so it never becomes a token to drop afterwards.
# A punctuation mark that joins words ("‿", "＿": category Pc) is a word character and stays one.
_MATCH_CLASS = np.zeros(_SIZE, dtype=np.uint8)
# Original code points of category P* ("_" excepted) that are word characters: alone, such a one is a
# one-character token the matcher leaves out, so a text holding one is filtered token by token.
_WORD_MARK = np.zeros(_SIZE, dtype=bool)
_multi: dict[int, np.ndarray] = {}  # code point -> hashes of the tokens its normalised form is
# Whether a code point is, once normalised, one ASCII letter, digit or "_" (fullwidth "Ａ" is "a"), whether a
# digit, and whether a combining mark (it joins the letter before it): what _split_codes reads.
_CODE_CHAR = np.zeros(_SIZE, dtype=bool)
_DIGIT = np.zeros(_SIZE, dtype=bool)
_MARK = np.zeros(_SIZE, dtype=bool)
_CODE_FORMS = frozenset(b"0123456789abcdefghijklmnopqrstuvwxyz_")

_IDEO_RANGES = (
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),
    (0x20000, 0x3FFFF),
)


def _is_ignorable(ch: str) -> bool:
    cp = ord(ch)
    # Format characters and variation selectors carry no text: "foo\u200bbar" is "foobar".
    return unicodedata.category(ch) == "Cf" or 0xFE00 <= cp <= 0xFE0F or 0xE0100 <= cp <= 0xE01EF


def _class_of(ch: str) -> int:
    cp = ord(ch)
    cat = unicodedata.category(ch)
    if cat[0] == "Z" or cat == "Cc":
        return SPACE
    if any(lo <= cp <= hi for lo, hi in _IDEO_RANGES):
        return IDEO
    if cat[0] in "LNM" or cat == "Pc":
        return WORD
    return PUNCT


def _normalise_char(cp: int) -> list[int]:
    try:
        ch = chr(cp)
        ch.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from badly decoded input: keep it as itself
        return [cp]
    if _is_ignorable(ch):
        return []
    mapped = unicodedata.normalize("NFKD", unicodedata.normalize("NFKD", ch).casefold())
    return [ord(c) for c in mapped if not _is_ignorable(c)]


def _fill(cps: np.ndarray) -> None:
    """Map the (unique) code points ``cps`` that the tables do not know yet."""
    global _pool
    with _lock:
        for cp in cps.tolist():
            if _known[cp]:
                continue
            seq = _normalise_char(cp)
            _expoff[cp] = len(_pool_list)
            _explen[cp] = len(seq)
            for m in seq:
                _pool_list.append(m)
                if _val[m] == 0:
                    ch = chr(m)
                    _cls[m] = _class_of(ch) if not 0xD800 <= m <= 0xDFFF else PUNCT
                    _val[m] = np.uint64(xxhash.xxh64_intdigest(ch.encode("utf-8", "surrogatepass"), seed=SEED) | 1)
            _known[cp] = True
        _pool = np.array(_pool_list, dtype=np.uint32)
        for cp in cps.tolist():
            if not _info[cp]:
                _classify(cp)


def _classify(cp: int) -> None:
    """Fill the fast-path tables for original code point ``cp`` (its normalised form is known).

    ``_info`` is written last: a reader that finds it set (and so does not take the lock to fill it) finds
    every other table of ``cp`` filled already.
    """
    seq = _pool_list[_expoff[cp] : _expoff[cp] + _explen[cp]]
    _CODE_CHAR[cp] = len(seq) == 1 and seq[0] in _CODE_FORMS
    _DIGIT[cp] = len(seq) == 1 and 0x30 <= seq[0] <= 0x39
    _MARK[cp] = bool(seq) and unicodedata.category(chr(seq[0])).startswith("M")
    classes = [int(_cls[m]) for m in seq]
    if not seq:
        info = _F_IGNORE
    elif all(c == SPACE for c in classes):
        info = _F_SPACE
    elif len(seq) > 255:  # longer than any form Unicode has; the length would not fit its table
        info = _F_COMPLEX
    elif all(c == WORD for c in classes):
        info = _F_WORD if len(seq) == 1 else _F_WIDE
        _slen[cp] = len(seq)
        with np.errstate(over="ignore"):
            v = np.uint64(0)
            for j, m in enumerate(seq):
                v = v + _val[m] * _pow_scalar(j)
        _sval[cp] = v
    elif len(seq) == 1:
        info = _F_PUNCT if classes[0] == PUNCT else _F_IDEO
        _sval[cp] = _val[seq[0]]
    elif classes[0] != WORD and classes[-1] != WORD:
        # It cannot join a neighbouring word, so its tokens are its own: computed once here.
        info = _F_MULTI
        _multi[cp] = _tokenize_reference(chr(cp)).hash
    else:  # e.g. "¼" -> "1", "⁄", "4": its first or last token may join a neighbour
        info = _F_COMPLEX
    mark = cp != 0x5F and unicodedata.category(chr(cp)).startswith("P")
    if mark and info == _F_WORD:
        # Wide (one more special character, hashed alike) so that a text holding it is found among the
        # few special ones: see _WORD_MARK.
        info = _F_WIDE
    _WORD_MARK[cp] = mark and info == _F_WIDE
    own_token = info in (_F_PUNCT, _F_IDEO, _F_MULTI)
    _MATCH_CLASS[cp] = SPACE if mark and own_token else _INFO_CLASS[info]
    _info[cp] = info


def _pow_scalar(j: int) -> np.uint64:
    return np.uint64(pow(int(_P), j, 2**64))


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``P**i`` and ``P**-i`` mod 2**64 for ``i < n`` (cached, grown by doubling)."""
    if len(_pow[0]) < n:
        size = max(n, 2 * len(_pow[0]), 1024)
        # Doubled by one array product each time (P**(m+i) = P**i * P**m): numpy's cumprod is not
        # vectorised, and computing a megabyte group's powers with it was a third of the first call.
        fwd, inv = _pow
        with np.errstate(over="ignore"):
            while len(fwd) < size:
                more = min(len(fwd), size - len(fwd))
                fwd = np.concatenate([fwd, fwd[:more] * (fwd[-1] * _P)])
                inv = np.concatenate([inv, inv[:more] * (inv[-1] * _P_INV)])
        _pow[0], _pow[1] = fwd, inv
    return _pow[0], _pow[1]


def mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, element-wise (spreads every input bit over the output)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


@dataclasses.dataclass(frozen=True)
class Tokens:
    """The tokens of one text: character offsets into the original text and a hash each."""

    start: np.ndarray  # int64 (int32 in the target index), character offset of the token's first character
    end: np.ndarray  # int64 (int32 in the target index), end exclusive
    hash: np.ndarray  # uint64

    def __len__(self) -> int:
        return len(self.hash)


_EMPTY = Tokens(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.uint64))


def tokenize(text: str | None) -> Tokens:
    """Tokens of ``text`` with their original character offsets and stable hashes.

    The fast path keeps one array element per original character. The rare characters whose
    normalised form may join a neighbouring word in an unusual way ("¼" is "1", "⁄", "4") are
    handled by tokenizing just the run of text between white space around them through the
    reference path, which expands every character first (the whole text, when there are many).
    Both give the same tokens (a property test holds them equal).
    """
    return _tokenize(text)[0]


def _tokenize(text: str | None, match: bool = False) -> tuple[Tokens, np.ndarray]:
    """:func:`tokenize`, and the text's code points (one per ``str`` index) it worked on; with ``match``,
    the tokens without punctuation marks (:func:`_without_punctuation` of them, as :func:`tokenize_many`
    reads a text), found without making the marks' tokens at all."""
    if not text:
        return _EMPTY, _NO_CPS
    cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    kernels = compiled_kernels()
    # One pass finds the characters the tables do not know yet and the special ones; most texts hold none.
    special, unknown = kernels.survey(cps, _info, _F_WIDE)
    if unknown:
        _fill(np.unique(cps[_info.take(cps) == _UNKNOWN]))
        special, _ = kernels.survey(cps, _info, _F_WIDE)
    table, remap = (_MATCH_CLASS, _SAME_CLASS) if match else (_info, _INFO_CLASS_256)
    wide, ignore = False, _NONE
    marks = False  # tokens the matcher leaves out may remain: filter them (match only)
    multi = hard = _NONE
    cls = None  # each character's class, built only where a format character joins a word
    if len(special):

        def class_at(at: np.ndarray) -> np.ndarray:
            return remap.take(table.take(cps.take(at)))

        kinds = _info.take(cps.take(special))
        hard = special[kinds == _F_COMPLEX]
        if len(hard) > _MAX_SPLICES:
            ref = _tokenize_reference(text, cps)
            return (_without_punctuation(ref, cps) if match else ref), cps
        # The reference path's tokens, spliced in, hold the marks, and so does a word that is one mark.
        marks = match and (len(hard) > 0 or bool(_WORD_MARK.take(cps[special]).any()))
        ignore = special[kinds == _F_IGNORE]
        if len(ignore):
            # A run of format characters inside a word is nothing ("foo\u200bbar" is "foobar");
            # anywhere else it is as good as white space.
            cut = np.flatnonzero(np.diff(ignore) != 1) + 1
            first = ignore[np.concatenate([[0], cut])]
            last = ignore[np.concatenate([cut - 1, [len(ignore) - 1]])]
            inner = (first > 0) & (last < len(cps) - 1)
            left = np.where(inner, first - 1, 0)
            right = np.where(inner, last + 1, 0)
            joined = inner & (class_at(left) == WORD) & (class_at(right) == WORD)
            ignore = ignore[np.repeat(joined, last - first + 1)]
            if len(ignore):
                cls = remap.take(table.take(cps))
                cls[ignore] = WORD
        wide = bool((kinds == _F_WIDE).any()) or len(ignore) > 0
        multi = special[kinds == _F_MULTI]
        if match:
            multi = multi[class_at(multi) != SPACE]  # a mark: no token here to expand
    # Each token's bounds and hash: mix64 of its characters' sum(_sval[c_j] * P**(j - start)).
    ts, te, hashes = (kernels.tokens_by_table(cps, table, _sval, _P, remap) if cls is None
                      else kernels.tokens_by_class(cls, cps, _sval, _P))
    if len(ts) == 0:
        return _EMPTY, cps
    odd = _NONE
    if wide:
        mark = np.zeros(len(ts), dtype=bool)  # the words holding a decomposed letter or a format character
        mark[np.searchsorted(ts, special[kinds == _F_WIDE], side="right") - 1] = True
        mark[np.searchsorted(ts, ignore, side="right") - 1] = True
        odd = np.flatnonzero(mark)
    with np.errstate(over="ignore"):
        if len(odd) * 4 > len(ts):
            # Most words hold one (accented prose): number every character by its place in the
            # normalised text, where a decomposed letter takes several and a format character none.
            lens = _slen[cps].astype(np.int64)
            lens[ignore] = 0
            npos = np.cumsum(lens) - lens
            fwd, inv = _powers(int(npos[-1]) + 1)
            w = _sval.take(cps) * fwd[npos]
            w[ignore] = 0
            hashes = mix64(_segment_sums(w, ts, te) * inv[npos[ts]])
        elif len(odd):
            hashes[odd] = mix64(_word_hashes(cps, ts[odd], te[odd], ignore))
    start, end = ts, te
    if len(multi):
        start, end, hashes = _expand_multi(cps, multi, start, end, hashes)
    if len(hard):
        start, end, hashes = _splice_reference(text, cps, hard, start, end, hashes)
    tk = Tokens(start, end, hashes)
    return (_without_punctuation(tk, cps) if marks else tk), cps


#: The compiled loops (forensics.match.kernels), imported by the first text tokenized: numba's import
#: costs a third of a second, which commands that never tokenize do not pay.
_kernels: list[ModuleType] = []


def compiled_kernels() -> ModuleType:
    """:mod:`forensics.match.kernels`, imported on first use (numba's import costs a third of a second)."""
    if not _kernels:
        from forensics.match import kernels

        _kernels[:] = [kernels]
    return _kernels[0]


@contextlib.contextmanager
def kernels_loading_beside() -> Iterator[threading.Thread]:
    """Load the compiled loops on a thread of their own while the block runs (numba's import and the loops'
    machine code from their cache, what a process's first :func:`tokenize_many` pays); the thread is ended when
    the block ends, however it ends.

    The match stage's parent runs its first steps in the block: it paid this half second in series with loading
    the targets, which mostly waits on Parquet and DuckDB with the interpreter free (on the 1 GB benchmark
    incident its pass then started 0.3-0.8 s sooner). A later call in the process waits for the import under way.
    What goes wrong here is left to the stage's own first call, which raises it with the stage's message. The
    block's end waits for the thread even when an interrupt or an error ends it: a process that exits while
    numba loads inside it can abort ("terminate called ..."), after the interrupt's clean message.
    """
    done = threading.Event()

    def load() -> None:
        try:
            tokenize_many(["load the compiled loops: word 42, x_y = 3.5%"])
        except Exception:  # the stage's own first call raises it, with its message
            pass
        finally:
            done.set()

    thread = threading.Thread(target=load, name="match-kernels", daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        # An event, not Thread.join: an interrupted join marks the thread ended while it runs on (python/cpython#90882).
        interrupt: BaseException | None = None
        while not done.is_set():
            try:
                done.wait()
            except BaseException as exc:  # a second Ctrl-C: the loading ends within a second, then it is raised
                interrupt = exc
        if interrupt is not None:
            raise interrupt


def array_tokens_by_class(cls: np.ndarray, cps: np.ndarray, sval: np.ndarray,
                          p: np.uint64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`forensics.match.kernels.tokens_by_class` as numpy array passes (what the tokenizer ran before the
    compiled loop): the definition the tests and ``benchmarks/pieces.py`` hold the loop to. ``p`` must be
    ``_P``, whose powers are cached."""
    assert p == _P
    ts, te = _bounds(cls)
    fwd, inv = _powers(len(cps))
    with np.errstate(over="ignore"):
        return ts, te, mix64(_segment_sums(sval.take(cps) * fwd[: len(cps)], ts, te) * inv[ts])


def array_tokens_by_table(cps: np.ndarray, table: np.ndarray, sval: np.ndarray, p: np.uint64,
                          remap: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`forensics.match.kernels.tokens_by_table` as numpy array passes (see :func:`array_tokens_by_class`)."""
    cls = table.take(cps)
    return array_tokens_by_class(cls if remap is None else remap.take(cls), cps, sval, p)


def array_survey(cps: np.ndarray, info: np.ndarray, special_from: int) -> tuple[np.ndarray, int]:
    """:func:`forensics.match.kernels.survey` as numpy array passes (see :func:`array_tokens_by_class`)."""
    found = info.take(cps)
    return np.flatnonzero(found >= special_from), int(np.count_nonzero(found == _UNKNOWN))


def _segment_sums(w: np.ndarray, ts: np.ndarray, te: np.ndarray) -> np.ndarray:
    """``w[ts[i]:te[i]]`` summed for every ``i`` (segments in order, not overlapping), mod 2**64, by
    differences of one prefix sum (wrapping addition is exact mod 2**64): half the cost of
    ``np.add.reduceat`` on a megabyte group. Only the tokens' own characters count, so what lies
    between tokens (white space, and the punctuation marks the matcher's path reads as such) adds
    nothing."""
    prefix = np.empty(len(w) + 1, dtype=np.uint64)
    prefix[0] = 0
    with np.errstate(over="ignore"):
        np.cumsum(w, out=prefix[1:])
        return prefix.take(te) - prefix.take(ts)


_NONE = np.zeros(0, dtype=np.int64)
_NO_CPS = np.zeros(0, dtype="<u4")

#: Characters that may join a neighbour oddly ("¼") are re-tokenized in their run of text by the
#: reference path; beyond this many in one text, the whole text goes through it (its cost is
#: then about the same, and a crafted text cannot make each run a separate call).
_MAX_SPLICES = 32


def _word_hashes(cps: np.ndarray, ts: np.ndarray, te: np.ndarray, ignore: np.ndarray) -> np.ndarray:
    """Token hashes (before mixing) of the words ``ts``..``te`` that hold a decomposed letter or a
    format character, by their positions in the normalised text: a decomposed letter takes
    several, a format character inside a word none. (Other words are one position a character.)
    """
    n = te - ts
    first = np.cumsum(n) - n
    idx = np.repeat(ts, n) + (np.arange(int(n.sum())) - np.repeat(first, n))
    lens = _slen[cps[idx]].astype(np.int64)
    lens[np.isin(idx, ignore)] = 0
    npos = np.cumsum(lens) - lens
    rel = npos - np.repeat(npos[first], n)
    fwd, _ = _powers(int(rel.max()) + 1)
    with np.errstate(over="ignore"):
        w = _sval[cps[idx]] * fwd[rel]
        return np.add.reduceat(w, first)


def _bounds(cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) of every token, given each element's class.

    A token is a run of word elements, or one punctuation or ideographic element.
    """
    word = cls == WORD
    single = cls >= PUNCT
    prev_word = np.zeros_like(word)
    prev_word[1:] = word[:-1]
    next_word = np.zeros_like(word)
    next_word[:-1] = word[1:]
    return np.flatnonzero(single | (word & ~prev_word)), np.flatnonzero(single | (word & ~next_word)) + 1


def _splice_reference(text: str, cps: np.ndarray, hard: np.ndarray, start: np.ndarray, end: np.ndarray,
                      hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Re-tokenize the white-space-delimited runs around the ``hard`` characters by the reference path.

    No token crosses white space, so the fast path's tokens outside those runs stand as they are,
    in their order: the runs' tokens are spliced in between them. Only the neighbourhood of each
    hard character is searched for its run's ends (a whole-text pass per call cost as much as the
    rest of the tokenization of a megabyte group).
    """
    runs = sorted({_run_around(cps, pos) for pos in hard.tolist()})  # at most _MAX_SPLICES, disjoint
    starts, ends, hashes_out = [], [], []
    done = 0
    for lo, hi in runs:
        a, b = int(np.searchsorted(start, lo)), int(np.searchsorted(start, hi))
        part = _tokenize_reference(text[lo:hi])
        starts += [start[done:a], part.start + lo]
        ends += [end[done:a], part.end + lo]
        hashes_out += [hashes[done:a], part.hash]
        done = b
    return (np.concatenate([*starts, start[done:]]), np.concatenate([*ends, end[done:]]),
            np.concatenate([*hashes_out, hashes[done:]]))


def _run_around(cps: np.ndarray, pos: int) -> tuple[int, int]:
    """The run of non-white-space characters around ``pos`` in the text whose code points are ``cps``: from
    just after the white space before it (or the text's start) to the white space after it (or the text's
    end)."""
    lo, width = 0, 64
    while True:
        left = max(0, pos - width)
        found = np.flatnonzero(_info.take(cps[left:pos]) == _F_SPACE)
        if len(found):
            lo = left + int(found[-1]) + 1
            break
        if left == 0:
            break
        width *= 4
    hi, width = len(cps), 64
    while True:
        right = min(len(cps), pos + width)
        found = np.flatnonzero(_info.take(cps[pos:right]) == _F_SPACE)
        if len(found):
            hi = pos + int(found[0])
            break
        if right == len(cps):
            break
        width *= 4
    return lo, hi


def _expand_multi(cps: np.ndarray, multi: np.ndarray, start: np.ndarray, end: np.ndarray,
                  hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Replace the one token of each character that stands for several ("…") by its tokens."""
    if len(multi) > _FEW_MULTI:
        return _expand_multi_many(cps, multi, start, end, hashes)
    at = np.searchsorted(start, multi).tolist()  # each such character is a token of its own
    pieces = [_multi[int(c)] for c in cps[multi].tolist()]
    # The tokens between two such characters are copied as runs (one pass over the arrays, not
    # a repeat count per token).
    keep = [slice(b + 1, e) for b, e in zip([-1, *at], [*at, len(start)])]

    def spliced(arr: np.ndarray, replace: Callable[[int, np.ndarray], np.ndarray]) -> np.ndarray:
        parts = [arr[keep[0]]]
        for i, piece in enumerate(pieces):
            parts += [replace(at[i], piece), arr[keep[i + 1]]]
        return np.concatenate(parts)

    # A character's tokens all have its offsets; their hashes are its pieces'.
    return (spliced(start, lambda a, piece: np.full(len(piece), start[a], dtype=start.dtype)),
            spliced(end, lambda a, piece: np.full(len(piece), end[a], dtype=end.dtype)),
            spliced(hashes, lambda a, piece: piece))


#: Up to this many characters that stand for several tokens, a text's tokens are spliced around
#: them; beyond it, they are expanded by repeat counts (one pass whatever their number).
_FEW_MULTI = 64


def _expand_multi_many(cps: np.ndarray, multi: np.ndarray, start: np.ndarray, end: np.ndarray,
                       hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_expand_multi` for many such characters."""
    at = np.searchsorted(start, multi)
    pieces = [_multi[int(c)] for c in cps[multi].tolist()]
    counts = np.ones(len(start), dtype=np.int64)
    counts[at] = [len(p) for p in pieces]
    start, end, hashes = np.repeat(start, counts), np.repeat(end, counts), np.repeat(hashes, counts)
    first = np.cumsum(counts) - counts
    slots = np.repeat(first[at], counts[at]) + (np.arange(int(counts[at].sum())) -
                                                  np.repeat(np.cumsum(counts[at]) - counts[at], counts[at]))
    hashes[slots] = np.concatenate(pieces)
    return start, end, hashes


def _tokenize_reference(text: str, cps: np.ndarray | None = None) -> Tokens:
    """Tokens of ``text`` through the full expansion of every character (the definition)."""
    if not text:
        return _EMPTY
    # Small dtypes throughout: a megabyte prompt costs tens of bytes per character, not hundreds.
    if cps is None:
        cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    unknown = ~_known[cps]
    if unknown.any():
        _fill(np.unique(cps[unknown]))
    lens = _explen[cps]
    offs = _expoff[cps]
    pool = _pool
    if (lens == 1).all():
        mapped = pool[offs]
        back = None
    else:
        # Expand characters that normalise to several code points (or to none).
        n = len(cps)
        back = np.repeat(np.arange(n, dtype=np.int64), lens)
        first = np.cumsum(lens, dtype=np.int64) - lens
        within = np.arange(len(back), dtype=np.int64) - first[back]
        mapped = pool[offs[back].astype(np.int64) + within]
    if len(mapped) == 0:
        return _EMPTY
    cls = _cls[mapped]
    ts, te = _bounds(cls)
    if len(ts) == 0:
        return _EMPTY
    fwd, inv = _powers(len(mapped))
    with np.errstate(over="ignore"):
        w = _val[mapped] * fwd[: len(mapped)]
        w[cls == SPACE] = 0  # white space between tokens falls inside reduceat's segments
        h = np.add.reduceat(w, ts) * inv[ts]
    hashes = mix64(h)
    if back is None:
        start, end = ts.astype(np.int64), te.astype(np.int64)
    else:
        start, end = back[ts], back[te - 1] + 1
    return Tokens(start, end, hashes)


def kgrams(token_hashes: np.ndarray, k: int) -> np.ndarray:
    """Hash of every k consecutive tokens (position i covers tokens i .. i+k-1)."""
    m = len(token_hashes) - k + 1
    if m <= 0:
        return np.zeros(0, dtype=np.uint64)
    g = np.zeros(m, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(k):
            g = g * _Q + token_hashes[j : j + m]
    return mix64(g ^ np.uint64(k))


def unicode_version() -> str:
    """The Unicode database the normalisation tables come from (recorded with the results)."""
    return unicodedata.unidata_version


#: Texts are tokenized together in groups of about this many characters (one array pass per
#: group); longer texts are cut at white space into pieces of this size (about 40 MB of arrays).
GROUP_CHARS = 1_000_000


def _pieces(text: str, size: int) -> list[tuple[int, str]]:
    """``text`` cut into pieces of at most ``size`` characters, each cut just after white space."""
    out, start = [], 0
    while len(text) - start > size:
        cut = max(text.rfind(" ", start, start + size), text.rfind("\n", start, start + size))
        cut = start + size if cut <= start else cut + 1  # no space in a whole piece: cut anyway
        out.append((start, text[start:cut]))
        start = cut
    out.append((start, text[start:]))
    return out


#: A run of at least this many ASCII letters, digits and ``_`` (or characters that are those once normalised,
#: as fullwidth forms are), one of them a digit, is machine-made (an API key, a hash, a card or account
#: number, an identifier with a version in it) and is matched as pieces of about CODE_PIECE_CHARS characters:
#: as one word, a leaked 40-character key was a single token, too short for any k-gram, while a model's
#: tokenizer makes ten or more tokens of it and it is the most private text a conversation holds. Words of
#: prose (no digit) stay whole, so a long common word is not worth several. Such a run glued to other letters
#: ("{key}입니다", a Korean particle) is cut out of its word, and the rest of the word is a token of its own.
CODE_MIN_CHARS = 12
#: Characters per piece of a machine-made run on average: about what a model's tokenizer gives such text
#: per token. Where a piece ends depends on the two characters around the cut alone (content-defined, as
#: rsync and deduplicating stores cut files), so a key that reaches the answer without its first characters,
#: or with a character dropped or garbled, still shares its other pieces with the original. Two equal
#: characters are never cut apart: a run of one character ("9999999999999999") is one piece, as its
#: information is one character's.
CODE_PIECE_CHARS = 4
#: Pieces of one run at most (the rest of a longer run is its last piece): a periodic run ("1212...") cut
#: into thousands of equal pieces on both sides would make every piece of one a hit on every piece of the
#: other.
CODE_MAX_PIECES = 32
#: Mixed into a piece's hash, so that a piece is never the same token as a word of its letters.
_PIECE_SALT = np.uint64(0x7C0D_E5A1_7C0D_E5A1)

#: What the matcher's tokens are (match.json records it with the versions).
MATCH_TOKENS = ("runs of letters, digits, marks and _; each symbol and ideograph; punctuation marks (Unicode P*) "
                f"are not tokens; a run of {CODE_MIN_CHARS} or more ASCII letters, digits and _ holding a digit is "
                f"pieces of about {CODE_PIECE_CHARS} characters (at most {CODE_MAX_PIECES}), cut where two different "
                "characters decide but never twice in a row, format characters inside it nothing, and the rest of its "
                "word a token")

def _previous(mask: np.ndarray) -> np.ndarray:
    """For each position, the last position before it where ``mask`` holds (-1: none)."""
    out = np.empty(len(mask), dtype=np.int64)
    if len(mask):
        out[0] = -1
        out[1:] = np.maximum.accumulate(np.where(mask, np.arange(len(mask)), -1))[:-1]
    return out


def _split_codes(tk: Tokens, cps: np.ndarray) -> Tokens:
    """``tk`` with every word that holds a machine-made run (:data:`CODE_MIN_CHARS`) cut up: the run into
    pieces, what the word holds before and after it into tokens of their own, each with its own offsets
    and hash; ``cps``: the code points of the text ``tk`` came from.

    A piece starts where its run starts and before every code character that differs from the code
    character before it and, with it, hashes to a multiple of :data:`CODE_PIECE_CHARS` (case folded, as every
    token is compared), unless that one opened a piece too, up to :data:`CODE_MAX_PIECES` pieces. Format
    characters inside a run belong to it and count for nothing. The rest of a word hashes as the word it
    would be alone. Words holding a character that stands for several tokens ("¼", from the reference path)
    stay whole.
    """
    lengths = tk.end - tk.start
    long_ = np.flatnonzero(lengths >= CODE_MIN_CHARS)
    if len(long_) == 0:
        return tk
    n = lengths[long_]
    first = np.cumsum(n) - n
    at = np.repeat(tk.start[long_], n) + (np.arange(int(n.sum())) - np.repeat(first, n))
    c = cps.take(at)  # every code point here is classified already (_tokenize filled the tables)
    # Most long words are prose: only those holding a digit are looked at further.
    with_digit = np.logical_or.reduceat(_DIGIT.take(c), first)
    if not with_digit.any():
        return tk
    chars = np.repeat(with_digit, n)
    long_, n, at, c = long_[with_digit], n[with_digit], at[chars], c[chars]
    total = len(c)
    token_first = np.cumsum(n) - n
    opens_token = np.zeros(total, dtype=bool)
    opens_token[token_first] = True
    info = _info.take(c)
    # Words holding a character that stands for several tokens (from the reference path) stay whole.
    whole = ~np.logical_and.reduceat((info == _F_WORD) | (info == _F_WIDE) | (info == _F_IGNORE), token_first)
    ignored = info == _F_IGNORE
    code = _CODE_CHAR.take(c) & ~np.repeat(whole, n)
    # The characters before and after each one that are not format characters, in its own word: the
    # tokenizer reads "0123\u200b4567" as "01234567", so a run goes on through format characters.
    idx = np.arange(total)
    word_first = np.repeat(token_first, n)
    prev_real = _previous(~ignored)
    next_real = np.empty(total, dtype=np.int64)
    next_real[-1] = total
    next_real[:-1] = np.minimum.accumulate(np.where(ignored, total, idx)[::-1])[::-1][1:]
    has_prev = prev_real >= word_first
    has_next = next_real < word_first + np.repeat(n, n)
    after = np.minimum(next_real, total - 1)
    # A letter with a combining mark after it is the accented letter it spells ("e" + "\u0301" is "é"),
    # which is no code character: the run ends before it in either Unicode form.
    code &= ~(has_next & _MARK.take(c.take(after)))
    in_code = code | (ignored & has_prev & has_next & code.take(np.maximum(prev_real, 0)) & code.take(after))
    # Maximal runs inside each word; those of at least CODE_MIN_CHARS code characters, one a digit, qualify
    # (a digit elsewhere in the word, or after it, is not the run's).
    run_open = in_code.copy()
    run_open[1:] &= ~in_code[:-1] | opens_token[1:]
    run_first = np.flatnonzero(run_open)
    if len(run_first) == 0:
        return tk
    run_of = np.maximum(np.cumsum(run_open) - 1, 0)  # the run a character is in (the last one opened)
    run_len = np.bincount(run_of[code], minlength=len(run_first))
    qualifies = (run_len >= CODE_MIN_CHARS) & np.logical_or.reduceat(_DIGIT.take(c) & code, run_first)
    if not qualifies.any():
        return tk
    in_run = in_code & qualifies.take(run_of)
    run_start = run_first.take(run_of)
    q_first = run_first[qualifies]
    ends = np.ones(total, dtype=bool)
    ends[:-1] = ~in_code[1:] | opens_token[1:]
    run_end = np.flatnonzero(in_code & ends)[qualifies] + 1
    # A cut goes before a code character that differs from the code character before it in the run and
    # whose pair with it hashes to 0 mod CODE_PIECE_CHARS, unless that one opened a piece too (pieces of
    # one character would make some runs a token a character, "0g0g0g...").
    v = _sval.take(c)
    prev_code = _previous(code)
    pc = np.maximum(prev_code, 0)
    pair = code & in_run & (prev_code >= run_start)
    with np.errstate(over="ignore"):
        raw = pair & (v != v.take(pc)) & ((mix64(v.take(pc) * _P + v) % np.uint64(CODE_PIECE_CHARS)) == 0)
    cut = raw & ~(raw.take(pc) & (prev_code >= 0))
    cuts_so_far = np.cumsum(cut)
    cut &= (cuts_so_far - cuts_so_far.take(run_start)) < CODE_MAX_PIECES
    opens = opens_token | cut
    opens[q_first] = True
    opens[run_end[run_end < total]] = True
    # Positions in the normalised text, as a word's hash counts them: a character that decomposes takes
    # several, a format character none (a segment of format characters alone is no token).
    lens = _slen.take(c).astype(np.int64)
    lens[ignored] = 0
    npos = np.cumsum(lens) - lens
    seg_first = np.flatnonzero(opens)
    seg_len = np.diff(np.append(seg_first, total))
    rel = npos - np.repeat(npos[seg_first], seg_len)
    fwd, _ = _powers(int(rel.max()) + 1)
    with np.errstate(over="ignore"):
        seg_hash = mix64(np.add.reduceat(v * fwd.take(rel), seg_first))
        piece = in_run.take(seg_first)
        seg_hash[piece] = mix64(seg_hash[piece] ^ _PIECE_SALT)
    seg_token = np.searchsorted(token_first, seg_first, side="right") - 1
    keep = (np.add.reduceat(lens, seg_first) > 0) & ~whole.take(seg_token)
    seg_first, seg_len, seg_hash, seg_token = seg_first[keep], seg_len[keep], seg_hash[keep], seg_token[keep]
    # Words without a qualifying run keep their one token (one that is a single piece gets the piece's hash).
    segments = np.bincount(seg_token, minlength=len(long_))
    cut_words = np.zeros(len(long_), dtype=bool)
    cut_words[np.searchsorted(token_first, q_first, side="right") - 1] = True
    segments_kept = segments[cut_words]
    take = np.repeat(cut_words, segments)
    seg_first, seg_len, seg_hash = seg_first[take], seg_len[take], seg_hash[take]
    cut_tokens = long_[cut_words]
    # Each cut word's token takes its first segment, and the others are inserted after it (np.insert: a
    # scatter or a repeat by counts over all the tokens cost twice as much).
    extra = segments_kept - 1
    at_insert = np.repeat(cut_tokens + 1, extra)
    now_at = cut_tokens + (np.cumsum(extra) - extra)
    leading = np.zeros(len(seg_first), dtype=bool)
    leading[np.cumsum(segments_kept) - segments_kept] = True
    seg_start = at.take(seg_first)
    columns = []
    for old, new in ((tk.start, seg_start), (tk.end, seg_start + seg_len), (tk.hash, seg_hash)):
        column = np.insert(old, at_insert, new[~leading].astype(old.dtype, copy=False))
        column[now_at] = new[leading]
        columns.append(column)
    start, end, hashes = columns
    return Tokens(start, end, hashes)


_PUNCT_KNOWN = np.zeros(_SIZE, dtype=bool)
_PUNCT = np.zeros(_SIZE, dtype=bool)


def _without_punctuation(tk: Tokens, cps: np.ndarray) -> Tokens:
    """``tk`` without its one-character punctuation tokens (Unicode category P*, ``_`` excepted);
    ``cps``: the code points of the text it came from."""
    if len(tk) == 0:
        return tk
    first = cps.take(tk.start)
    known = _PUNCT_KNOWN.take(first)
    if not known.all():
        for cp in np.unique(first[~known]).tolist():
            _PUNCT[cp] = unicodedata.category(chr(cp)).startswith("P") and cp != 0x5F
            _PUNCT_KNOWN[cp] = True
    keep = ~(_PUNCT.take(first) & (tk.end - tk.start == 1))
    return Tokens(tk.start[keep], tk.end[keep], tk.hash[keep])


def tokenize_many(texts: list[str]) -> tuple[Tokens, np.ndarray, np.ndarray]:
    """Tokenize many texts in few array passes, for matching: without punctuation marks, and with
    machine-made runs as pieces (:func:`_split_codes`).

    A punctuation mark (a one-character token of Unicode category P*, ``_`` excepted, which joins
    words) is left out (:data:`MATCH_TOKENS`): a decode from stale pages drops and garbles commas,
    periods, brackets and quotes, and a mark between two words must not break every k-gram across
    it. Symbols (``$``, ``=``, ``>``, emoji) and ideographs stay tokens.

    Returns the tokens of all texts one after another (offsets relative to their own text),
    the text number of every token, and the index of each text's first token (length
    ``len(texts) + 1``). Texts are joined with a line feed, which is white space, so no token
    spans two texts; groups are capped at ``GROUP_CHARS`` so memory stays bounded.
    """
    # Long texts become several pieces (cut at white space, so no token is cut); pieces keep
    # their text number and offset.
    pieces: list[str] = []
    piece_text: list[int] = []
    piece_offset: list[int] = []
    for t, text in enumerate(texts):
        for off, piece in (_pieces(text, GROUP_CHARS) if len(text) > GROUP_CHARS else [(0, text)]):
            pieces.append(piece)
            piece_text.append(t)
            piece_offset.append(off)
    p_text = np.array(piece_text, dtype=np.int64)
    p_off = np.array(piece_offset, dtype=np.int64)
    starts, ends, hashes, owners = [], [], [], []
    i = 0
    while i < len(pieces):
        j, size = i, 0
        while j < len(pieces) and (j == i or size + len(pieces[j]) + 1 <= GROUP_CHARS):
            size += len(pieces[j]) + 1
            j += 1
        group = pieces[i:j]
        tk, cps = _tokenize("\n".join(group), match=True)
        tk = _split_codes(tk, cps)
        piece_start = np.zeros(len(group), dtype=np.int64)
        if len(group) > 1:
            piece_start[1:] = np.cumsum([len(t) + 1 for t in group[:-1]])
        # Tokens come in text order, so each piece's tokens are one run: cut the token list at
        # the pieces' starts (a search per piece, not per token).
        counts = np.diff(np.append(np.searchsorted(tk.start, piece_start), len(tk)))
        shift = np.repeat(p_off[i:j] - piece_start, counts)
        starts.append(tk.start + shift)
        ends.append(tk.end + shift)
        hashes.append(tk.hash)
        owners.append(np.repeat(p_text[i:j], counts))
        i = j
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt))  # noqa: E731
    toks = Tokens(cat(starts, np.int64), cat(ends, np.int64), cat(hashes, np.uint64))
    owner_all = cat(owners, np.int64)
    first = np.zeros(len(texts) + 1, dtype=np.int64)
    first[1:] = np.cumsum(np.bincount(owner_all, minlength=len(texts)))
    return toks, owner_all, first


def kgrams_many(token_hashes: np.ndarray, token_text: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """k-gram hashes over concatenated texts and the global positions where a k-gram lies in one text. (The match
    pass hashes and probes in one compiled loop, ``TargetIndex.probe_kgrams``; this and ``TargetIndex.probe`` are
    the array form the tests and ``benchmarks/probe.py`` hold it to.)"""
    g = kgrams(token_hashes, k)
    if len(g) == 0:
        return g, np.zeros(0, np.int64)
    valid = np.flatnonzero(token_text[: len(g)] == token_text[k - 1 :])
    return g[valid], valid
