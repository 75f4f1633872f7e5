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
