"""Keeping freed memory for reuse is a speed setting: it must never change results or fail."""

from __future__ import annotations

import platform
import sys

import numpy as np
import pytest

from forensics import memory


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_malloc_is_tuned() -> None:
    assert memory.keep_freed_memory() is True


def test_the_block_gives_memory_back_and_arrays_work_inside() -> None:
    with memory.reusing_freed_memory():
        a = [np.arange(1 << 20) for _ in range(8)]
        del a[:4]
        b = np.arange(1 << 20)
        assert int(b.sum()) == (1 << 20) * ((1 << 20) - 1) // 2
    memory.give_back_freed_memory()  # safe to call any time


def test_no_op_where_malloc_cannot_be_tuned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory.sys, "platform", "darwin")
    assert memory.keep_freed_memory() is False
    with memory.reusing_freed_memory():
        pass


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_memory_beyond_the_cap_goes_back_to_the_kernel() -> None:
    def resident() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * 4096

    memory.keep_freed_memory()
    memory.give_back_above(0)  # start from a trimmed heap
    # Half of 400 MB of heap blocks freed, every other one: holes a top-of-heap trim cannot reach.
    blocks = [np.ones(1 << 17) for _ in range(400)]
    del blocks[::2]
    before = resident()
    assert memory.give_back_above(64 << 20) is True
    assert before - resident() > 150 << 20
    assert memory.give_back_above(64 << 20) is False  # nothing new to give back
    assert int(sum(b.sum() for b in blocks)) == 200 * (1 << 17)  # live arrays untouched


def test_fewer_collections_holds_inside_the_block_and_puts_everything_back() -> None:
    import gc

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with pytest.raises(RuntimeError):
        with memory.fewer_collections(every=12_345):
            assert gc.get_threshold()[0] == 12_345 and gc.get_threshold()[1:] == before[1:]
            assert gc.get_freeze_count() > frozen  # what was alive before is not walked inside
            raise RuntimeError("the stage failed")
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_garbage_cycles_made_inside_the_block_are_still_collected() -> None:
    import gc
    import weakref

    class Node:
        other: Node | None = None

    with memory.fewer_collections():
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None


def test_fewer_collections_keeps_what_the_host_process_froze() -> None:
    """A server that freezes its objects before forking workers found them unfrozen after a match."""
    import gc

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with memory.fewer_collections():
            pass
        assert gc.get_freeze_count() > frozen // 2  # still frozen (a frozen object the block freed leaves the count)
    finally:
        gc.unfreeze()


def test_blocks_open_at_once_restore_the_settings_the_first_found() -> None:
    """Two stages in two threads: the second saved the first's raised threshold and restored it last, so
    the process kept it for good."""
    import gc

    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    first, second = memory.fewer_collections(), memory.fewer_collections()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold() != before  # the second block still runs
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen
