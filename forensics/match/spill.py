"""What the match stage holds until it reads it again, in memory up to a bound, then on disk: the streaming pass's
k-gram hits (:class:`HeldHits`) and the candidate pairs' rows (:class:`HeldRows`).

Every hit of the pass must wait for its end (which k-grams are common text is known only then), and a big
case's hits outgrow memory: 20.6M of them (470 MiB) at the end of the pass on the 4 GB benchmark incident,
and as much again while they were filtered and sorted at once. Beyond ``memory_hits`` they go to an
anonymous file in the case folder (unlinked from the start: nothing is left behind, even by a crash), and
verification reads them back a part at a time (:meth:`HeldHits.parts`, :meth:`HeldHits.load`), each part
whole scan tasks' hits, so that no source row's hits are split between parts.

The candidate pairs' rows, built as verification goes, are read by the evidence model at its end: 483k of them
(about 900 bytes each) on the 4 GB benchmark incident. Beyond ``memory_rows`` they go to a file too, in groups of
targets, and the evidence model reads them back a group at a time (every row of a target in one group), keeping
only the rows it does not drop (1 in 10).
"""


import pickle
import tempfile
from pathlib import Path
from typing import IO, Any

import numpy as np
import xxhash

from forensics.errors import CaseError
from forensics.match.index import TargetIndex
from forensics.match.rarity import without_common
from forensics.match.stream import HIT_DTYPE

#: Columns of a hit (see ``stream.BatchResult.hits``).
HIT_COLUMNS = 6
EMPTY = np.zeros((0, HIT_COLUMNS), HIT_DTYPE)


class HeldHits:
    """The hits of the pass's results, added in file order (each result a range of rows after the last)."""

    def __init__(self, folder: Path, memory_hits: int) -> None:
        self.folder = folder
        self.memory_hits = memory_hits
        self.in_memory: list[np.ndarray] = []  # the results since the last spill, one array each
        self.spilled: list[int] = []  # hits per spilled result, in file order
        self.spilled_before: list[int] = [0]  # hits spilled before each spilled result (and in all, last)
        self.memory_count = 0  # hits held in memory
        self.file: IO[bytes] | None = None

    def __enter__(self) -> "HeldHits":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def count(self) -> int:
        """Hits held (in memory and on disk)."""
        return self.memory_count + self.spilled_before[-1]

    def add(self, hits: np.ndarray) -> None:
        """Hold one result's hits (its rows come after every result added before)."""
        self.in_memory.append(hits)
        self.memory_count += len(hits)

    def drop_common(self, index: TargetIndex, common: np.ndarray) -> None:
        """Drop the hits in memory on k-grams marked ``common`` (they can never become evidence)."""
        self.in_memory = without_common(self.in_memory, index, common)
        self.memory_count = sum(len(h) for h in self.in_memory)

    def spill_above(self, index: TargetIndex, common: np.ndarray) -> None:
        """If more than ``memory_hits`` hits are in memory, write them to disk, but for those on k-grams
        marked ``common``."""
        if self.memory_count <= self.memory_hits:
            return
        self.drop_common(index, common)
        if self.file is None:
            self.file = tempfile.TemporaryFile(dir=self.folder, prefix=".match-hits-")
        self.file.seek(0, 2)
        for h in self.in_memory:
            self.file.write(np.ascontiguousarray(h, dtype=HIT_DTYPE).tobytes())
            self.spilled.append(len(h))
            self.spilled_before.append(self.spilled_before[-1] + len(h))
        self.in_memory = []
        self.memory_count = 0

    def part_count(self, part: list[int]) -> int:
        """The hits held for ``part`` (one of :meth:`parts`), before :meth:`load` drops those on common k-grams."""
        first = len(self.spilled)
        if not part or part[0] < first:  # a part on disk: its results are consecutive
            return self.spilled_before[part[-1] + 1] - self.spilled_before[part[0]] if part else 0
        return sum(len(self.in_memory[i - first]) for i in part)

    def parts(self, part_hits: int) -> list[list[int]]:
        """The held results in file order, grouped into parts of whole results of about ``part_hits`` hits each
        (one result may hold more): each part a list of result numbers, for :meth:`load`."""
        sizes = self.spilled + [len(h) for h in self.in_memory]
        parts: list[list[int]] = []
        size = 0
        for i, n in enumerate(sizes):
            # A part never mixes results on disk and in memory: each is read from one place.
            if not parts or size + n > part_hits or i == len(self.spilled):
                parts.append([])
                size = 0
            parts[-1].append(i)
            size += n
        return parts

    def load(self, part: list[int], index: TargetIndex, common: np.ndarray) -> np.ndarray:
        """The hits of the results of ``part`` (one of :meth:`parts`), without those on k-grams marked ``common``.
        A part in memory is let go: each is loaded once."""
        if not part:
            return EMPTY
        if part[0] >= len(self.spilled):
            first = len(self.spilled)
            pieces = [self.in_memory[i - first] for i in part]
            for i in part:
                self.memory_count -= len(self.in_memory[i - first])
                self.in_memory[i - first] = EMPTY
            hits = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
            del pieces
            return without_common([hits], index, common)[0]
        assert self.file is not None
        width = HIT_COLUMNS * np.dtype(HIT_DTYPE).itemsize
        total = self.spilled_before[part[-1] + 1] - self.spilled_before[part[0]]
        self.file.seek(self.spilled_before[part[0]] * width)
        raw = self.file.read(total * width)
        if len(raw) != total * width:
            raise CaseError(f"the match stage's hits held on disk came back short ({len(raw)} of {total * width} bytes)",
                            file=self.folder, fix="check the disk holding the case folder, then run the match "
                                                  "stage again")
        return without_common([np.frombuffer(raw, dtype=HIT_DTYPE).reshape(total, HIT_COLUMNS)], index, common)[0]

    def close(self) -> None:
        """Drop the file (and its space) and the hits in memory."""
        self.in_memory = []
        self.memory_count = 0
        if self.file is not None:
            self.file.close()
            self.file = None


class HeldRows:
    """Rows (any picklable items) in ``groups`` groups, each group's in the order added: in memory up to
    ``memory_rows`` in all, then pickled to an anonymous file in ``folder`` (None: all in memory). A group is read
    back whole (:meth:`group`), as often as needed, until :meth:`close`."""

    def __init__(self, folder: Path | None, memory_rows: int, groups: int = 1) -> None:
        self.folder = folder
        self.memory_rows = max(memory_rows, 1)
        self.in_memory: list[list[Any]] = [[] for _ in range(max(groups, 1))]
        self.memory_count = 0  # rows in memory
        self.on_disk = 0  # rows on disk
        # (offset, size, xxh64) of each pickled list, per group, in order
        self.blobs: list[list[tuple[int, int, int]]] = [[] for _ in self.in_memory]
        self.file: IO[bytes] | None = None

    @property
    def groups(self) -> int:
        """How many groups the rows are held in."""
        return len(self.in_memory)

    def __len__(self) -> int:
        return self.on_disk + self.memory_count

    def __enter__(self) -> "HeldRows":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, group: int, row: Any) -> None:
        """Hold ``row`` in ``group``, after every row added to it before."""
        self.in_memory[group].append(row)
        self.memory_count += 1
        if self.folder is None or self.memory_count < self.memory_rows:
            return
        if self.file is None:
            self.file = tempfile.TemporaryFile(dir=self.folder, prefix=".match-rows-")
        self.file.seek(0, 2)
        for i, rows in enumerate(self.in_memory):
            if rows:
                blob = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
                self.blobs[i].append((self.file.tell(), len(blob), xxhash.xxh64_intdigest(blob)))
                self.file.write(blob)
                self.in_memory[i] = []
        self.on_disk += self.memory_count
        self.memory_count = 0

    def group(self, group: int) -> list[Any]:
        """The rows of ``group``, in the order added: new copies at every call (the caller may change them)."""
        rows: list[Any] = []
        if self.blobs[group]:
            assert self.file is not None
            self.file.flush()
            for offset, size, digest in self.blobs[group]:
                self.file.seek(offset)
                blob = self.file.read(size)
                # Checked before it is unpickled: a damaged pickle may load as other rows, or fail in any way.
                if len(blob) != size or xxhash.xxh64_intdigest(blob) != digest:
                    raise CaseError(f"the match stage's candidate rows held on disk came back damaged ({len(blob)} "
                                    f"of {size} bytes read, {'another' if len(blob) == size else 'no'} checksum)",
                                    file=self.folder, fix="check the disk holding the case folder, then run the "
                                                          "match stage again")
                rows.extend(pickle.loads(blob))
        if self.in_memory[group]:
            rows.extend(pickle.loads(pickle.dumps(self.in_memory[group], protocol=pickle.HIGHEST_PROTOCOL)))
        return rows

    def close(self) -> None:
        """Drop the file (and its space) and the rows in memory."""
        self.in_memory = [[] for _ in self.in_memory]
        self.blobs = [[] for _ in self.in_memory]
        self.memory_count = self.on_disk = 0
        if self.file is not None:
            self.file.close()
            self.file = None
