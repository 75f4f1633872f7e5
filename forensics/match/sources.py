"""The source rows of the streaming pass's hits, held in columns until verification has read them.

Every row of ``exchanges.parquet`` with a hit is kept as (request id, tenant id, received): verification
reads a row's key to name its candidates, and its tenant to tell same-tenant hits. On the 4 GB benchmark
incident that is 167k rows. Held as a dict of tuples (a request id, a tuple and an int per row), it took 50
MiB of the match stage's process while the workers verified, the stage's peak (15 MiB at 1 GB); in columns
(the request ids' UTF-8 bytes end to end, a tenant number per row) it takes a fifth of that (2.9 MiB at 1 GB).
"""


from collections.abc import Iterable, Iterator

import numpy as np
import xxhash

from forensics.match.stream import tenant_code

#: A source row's key and receipt: (request id, tenant id, received, in microseconds).
Source = tuple[str, str | None, int]


class SourceRows:
    """Source rows with hits, added as the pass's results come (any order), read by row number.

    ``add`` takes a result's ``{row: (request id, tenant id, received)}``; the first read sorts what was added
    (a row added twice keeps the last value, as a dict's update would). Read with ``rows[r]`` (a KeyError for
    a row never added), ``len``, ``r in rows`` and :meth:`tenant_codes`.
    """

    def __init__(self, sources: dict[int, Source] | None = None) -> None:
        self._tenant_number: dict[str | None, int] = {}
        self._tenants: list[str | None] = []
        self._codes = np.zeros(0, np.int64)  # tenant_code of each tenant number, as far as asked
        # Added since the last read: row numbers, receipts, tenant numbers, and each id's UTF-8 bytes' end.
        self._new_rows: list[int] = []
        self._new_received: list[int] = []
        self._new_tenant: list[int] = []
        self._new_ends: list[int] = []
        self._new_bytes = bytearray()
        # Read: sorted by row.
        self._rows = np.zeros(0, np.int64)
        self._received = np.zeros(0, np.int64)
        self._tenant = np.zeros(0, np.int32)
        self._starts = np.zeros(1, np.int64)  # id i is _bytes[_starts[i]:_starts[i + 1]]
        self._bytes = b""
        if sources:
            self.add(sources)

    def add(self, sources: dict[int, Source]) -> None:
        """Hold a result's source rows."""
        numbers, tenants = self._tenant_number, self._tenants
        for row, (request_id, tenant, received) in sources.items():
            number = numbers.get(tenant)
            if number is None:
                number = numbers[tenant] = len(tenants)
                tenants.append(tenant)
            self._new_rows.append(row)
            self._new_received.append(received)
            self._new_tenant.append(number)
            # (surrogatepass: any str comes back as it was, though a Parquet string never holds a lone surrogate)
            self._new_bytes += request_id.encode("utf-8", "surrogatepass")
            self._new_ends.append(len(self._new_bytes))

    def _settle(self) -> None:
        """Merge what was added since the last read into the sorted columns."""
        if not self._new_rows:
            return
        base = int(self._starts[-1])
        ends = np.array(self._new_ends, np.int64) + base
        lengths = np.diff(np.concatenate([[base], ends]))
        rows = np.concatenate([self._rows, np.array(self._new_rows, np.int64)])
        received = np.concatenate([self._received, np.array(self._new_received, np.int64)])
        tenant = np.concatenate([self._tenant, np.array(self._new_tenant, np.int32)])
        starts = np.concatenate([self._starts[:-1], ends - lengths])
        lengths = np.concatenate([np.diff(self._starts), lengths])
        data = np.frombuffer(self._bytes + bytes(self._new_bytes), np.uint8)
        self._new_rows, self._new_received, self._new_tenant, self._new_ends = [], [], [], []
        self._new_bytes = bytearray()
        # Stable, and the last of a row added twice kept: as a dict's update.
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        last = np.ones(len(rows), bool)
        last[:-1] = rows[1:] != rows[:-1]
        order = order[last]
        self._rows, self._received, self._tenant = rows[last], received[order], tenant[order]
        lengths, starts = lengths[order], starts[order]
        if len(order) and not np.array_equal(starts, np.concatenate([[0], np.cumsum(lengths)[:-1]])):
            # Out of order (or a row replaced): the ids' bytes gathered into the new order.
            take = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
            data = data[np.arange(int(lengths.sum()), dtype=np.int64) + take]
        self._starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self._bytes = data.tobytes()

    def _at(self, row: int) -> int:
        self._settle()
        i = int(np.searchsorted(self._rows, row))
        if i == len(self._rows) or self._rows[i] != row:
            raise KeyError(row)
        return i

    def _request_id(self, i: int) -> str:
        return self._bytes[self._starts[i] : self._starts[i + 1]].decode("utf-8", "surrogatepass")

    def __getitem__(self, row: int) -> Source:
        i = self._at(int(row))
        return self._request_id(i), self._tenants[self._tenant[i]], int(self._received[i])

    def __contains__(self, row: int) -> bool:
        try:
            self._at(int(row))
        except KeyError:
            return False
        return True

    def __len__(self) -> int:
        self._settle()
        return len(self._rows)

    def __iter__(self) -> Iterator[int]:
        """The row numbers, in order."""
        self._settle()
        return iter(self._rows.tolist())

    def items(self) -> Iterator[tuple[int, Source]]:
        """(row, source) in row order."""
        self._settle()
        for i, row in enumerate(self._rows.tolist()):
            yield row, (self._request_id(i), self._tenants[self._tenant[i]], int(self._received[i]))

    def tenant_codes(self, rows: np.ndarray) -> np.ndarray:
        """:func:`forensics.match.stream.tenant_code` of each row's tenant (a KeyError for a row never added)."""
        self._settle()
        if not len(rows):
            return np.zeros(0, np.int64)
        at = np.searchsorted(self._rows, rows)
        found = at < len(self._rows)
        found[found] = self._rows[at[found]] == rows[found]
        if not found.all():
            raise KeyError(int(rows[~found][0]))
        if len(self._codes) < len(self._tenants):
            more = np.array([tenant_code(t) for t in self._tenants[len(self._codes):]], dtype=np.int64)
            self._codes = np.concatenate([self._codes, more])
        return self._codes[self._tenant[at]]

    def held_twice(self) -> set[tuple[str, str | None]]:
        """The (request id, tenant) keys that more than one row holds."""
        self._settle()
        n = len(self._rows)
        if n < 2:
            return set()
        # Rows whose id hashes alike (a hash per id, with its tenant) are compared as text: only they can be one key.
        h = np.array([xxhash.xxh64_intdigest(self._bytes[self._starts[i] : self._starts[i + 1]]) >> 1
                      for i in range(n)], dtype=np.int64)
        key = h ^ (self._tenant.astype(np.int64) * np.int64(0x9E3779B97F4A7C15 >> 2))
        _, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
        seen: set[tuple[str, str | None]] = set()
        twice: set[tuple[str, str | None]] = set()
        for i in np.flatnonzero(counts[inverse.reshape(-1)] > 1).tolist():
            pair = (self._request_id(i), self._tenants[self._tenant[i]])
            if pair in seen:
                twice.add(pair)
            seen.add(pair)
        return twice

    def subset(self, rows: Iterable[int]) -> dict[int, Source]:
        """``{row: source}`` for ``rows`` (each must have been added): what a verification task carries."""
        return {int(r): self[int(r)] for r in rows}
