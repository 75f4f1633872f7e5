"""Keep freed memory for reuse while an array-heavy stage runs (glibc's malloc; a no-op elsewhere).

The matcher allocates and frees tens of megabytes of numpy arrays for every chunk of text it
scans. glibc's malloc gives big blocks back to the kernel when they are freed (blocks above the
mmap threshold are unmapped; free space at the top of the heap is trimmed), so the next chunk
page-faults the same amount of memory in again. On the virtual machines we measured, that was
a third of the match stage's time (one process on the 4x corpus that ``benchmarks/match.py``
builds: 0.4 s of system time in 1.5 s, 0.02 s with freed memory kept). Peak memory grows a
little (243 MB instead of 230 MB there), as a freed block is not always the size of the next
request.

The thresholds are process-wide and glibc has no call that reads them back, so they stay set
after the stage; :func:`reusing_freed_memory` gives the memory back to the kernel at its end.

Kept memory is capped (:func:`give_back_above`, called between a process's tasks): freed blocks
are scattered through the heap, not only at its top, so the trim threshold alone let each process
of the match stage keep what its largest chunks ever left behind. On the 1 GB incident that was
about a third of the parent's peak RSS, and it grew with the incident (more targets, larger
chunks of hits).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's largest mmap threshold on 64-bit systems: blocks up to this size come from the heap.
_MMAP_THRESHOLD = 32 << 20
#: Free space the heap keeps at its top before it is trimmed.
_TRIM_THRESHOLD = 1 << 30


def _glibc() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        lib = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, ...): nothing to tune
        return None
    return lib if hasattr(lib, "mallopt") and hasattr(lib, "malloc_trim") else None


def keep_freed_memory() -> bool:
    """Have malloc keep freed blocks for reuse in this process; False where it cannot be tuned."""
    lib = _glibc()
    if lib is None:
        return False
    return bool(lib.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) == 1
                and lib.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD) == 1)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


#: Freed memory a process keeps for reuse between tasks (see :func:`give_back_above`). 128 MiB
#: kept every process of the match stage that much above its live data on the 4 GB benchmark
#: incident; 64 MiB did not slow its pass.
KEEP_BYTES = 64 << 20


def _malloc_in_use(lib: Any) -> int | None:
    """Bytes of live malloc blocks (heap and mmapped), or None before glibc 2.33 (no mallinfo2)."""
    if not hasattr(lib, "mallinfo2"):
        return None
    lib.mallinfo2.restype = _MallInfo2
    info = lib.mallinfo2()
    return int(info.uordblks + info.hblkhd)


def _resident_bytes() -> int:
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


#: Resident memory that is not live malloc blocks, right after the last trim (code, other
#: allocators' pools): what a trim cannot give back, so only what lies above it counts.
_floor: int | None = None


def give_back_above(limit: int = KEEP_BYTES) -> bool:
    """Give freed memory back to the kernel if this process keeps more than ``limit`` bytes of it.

    Kept memory is resident memory beyond the live malloc blocks (and beyond what was resident
    right after the last trim). Cheap enough to call after every task (two small reads); True if
    it trimmed. (malloc's own count of free bytes cannot tell: trimmed free blocks still count.)
    """
    global _floor
    lib = _glibc()
    in_use = None if lib is None else _malloc_in_use(lib)
    if lib is None or in_use is None:
        return False
    kept = _resident_bytes() - in_use
    if _floor is not None and kept - _floor <= limit:
        return False
    lib.malloc_trim(0)
    after = _malloc_in_use(lib)
    _floor = _resident_bytes() - (after if after is not None else in_use)
    return True


def release_arrow_memory() -> None:
    """Give back to the kernel what Arrow's allocator keeps of the buffers this thread freed.

    Call it once a row group has been read, and read row groups on the calling thread (``use_threads=False``):
    a release reaches what this thread freed, not what Arrow's decoding threads did. Those kept it, out of reach:
    140 MiB of the match stage's process on the 4 GB benchmark incident while it verified (thirty row groups read
    by Arrow's threads left 94 MiB kept; read on the calling thread, released after each, 15 MiB).
    """
    import pyarrow as pa  # (only the callers that read Arrow have it loaded)

    pa.default_memory_pool().release_unused()


def give_back_freed_memory() -> None:
    """Return the free memory malloc holds to the kernel."""
    lib = _glibc()
    if lib is not None:
        lib.malloc_trim(0)


@contextlib.contextmanager
def reusing_freed_memory() -> Iterator[None]:
    """Keep freed memory for reuse inside the block; give it back to the kernel at its end."""
    keep_freed_memory()
    try:
        yield
    finally:
        give_back_freed_memory()


#: Allocations between two runs of Python's youngest garbage collection while :func:`fewer_collections`
#: holds (Python's default is 700).
YOUNG_COLLECTION_EVERY = 100_000


#: Process-wide, as the collector's settings are: how many blocks of :func:`fewer_collections` are open (two
#: stages in two threads of one process), the threshold to restore when the last one ends, and whether the
#: first one froze what was alive (it does not when the host process had frozen objects itself).
_COLLECTIONS_LOCK = threading.Lock()
_collections_state: dict[str, Any] = {"open": 0, "threshold": None, "froze": False}


@contextlib.contextmanager
def fewer_collections(every: int = YOUNG_COLLECTION_EVERY) -> Iterator[None]:
    """Run Python's cyclic garbage collector less often inside the block, and never over what was alive
    before it.

    The match stage's verification and tiers build hundreds of thousands of small objects that live to
    its end (candidates, regions, one row per candidate pair, each a dict). The collector walks them over
    and over as they pile up: on the 1 GB benchmark incident a row cost about 60% more with it on. None of
    them forms a reference cycle the stage relies on the collector to free, and what existed before the
    block (the targets, the index) is not its garbage: those are frozen (:func:`gc.freeze`) until it ends.

    The settings are the process's: blocks open at once (two stages in two threads) share them, and the
    last to end restores what the first found. Objects the host process froze itself stay frozen (a
    server that forks its workers freezes its objects to keep their pages shared): it then freezes
    nothing of its own.
    """
    state = _collections_state
    with _COLLECTIONS_LOCK:
        if state["open"] == 0:
            state["threshold"] = gc.get_threshold()
            state["froze"] = gc.get_freeze_count() == 0
            if state["froze"]:
                gc.freeze()
            gc.set_threshold(every, *state["threshold"][1:])
        state["open"] += 1
    try:
        yield
    finally:
        with _COLLECTIONS_LOCK:
            state["open"] -= 1
            if state["open"] == 0:
                gc.set_threshold(*state["threshold"])
                if state["froze"]:
                    gc.unfreeze()


def collect_less_often(every: int = YOUNG_COLLECTION_EVERY) -> None:
    """:func:`fewer_collections` for the rest of this process's life (a worker that lives for one stage)."""
    gc.freeze()
    gc.set_threshold(every, *gc.get_threshold()[1:])
