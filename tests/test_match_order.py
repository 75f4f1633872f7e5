"""lexsort_ints gives numpy's lexsort permutation, whatever the keys' widths, types and ties; the unique and
earliest-per-pair helpers give what numpy's unique and lexsort give."""

from __future__ import annotations

import numpy as np
import pytest

from forensics.match.order import lexsort_ints, unique_ints, unique_ints_first


@pytest.mark.parametrize("seed", range(40))
def test_the_permutation_is_lexsorts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    keys = []
    for _ in range(int(rng.integers(1, 6))):
        bits = int(rng.choice([1, 2, 8, 20, 31, 40, 62, 63]))
        dtype = np.int64 if bits > 31 else rng.choice([np.int32, np.uint32, np.int64])
        key = rng.integers(0, 2**bits, n, dtype=np.int64).astype(dtype)
        if rng.random() < 0.4:
            key = key % 3  # many ties: equal rows must keep their input order
        keys.append(key)
    if rng.random() < 0.5:
        keys[-1] = np.sort(keys[-1])  # the primary key in order, as the match stage's hits arrive
    assert np.array_equal(lexsort_ints(keys), np.lexsort(keys))


@pytest.mark.parametrize("keys", [
    [np.array([3, -1, 2, -1]), np.array([0, 0, 1, 1])],  # a negative value: lexsort as it is
    [np.array([2**64 - 1, 0, 5], dtype=np.uint64), np.array([1, 1, 0])],  # 64 bits: no packing
    [np.array([2**40, 7, 2**40]), np.array([2**40, 2**40, 1]), np.array([3, 3, 3])],  # two packed keys
    [np.array([0.5, 0.25]), np.array([1, 1])],  # not integers
    [np.array([2**63 - 1, 0, 2**63 - 1], dtype=np.uint64), np.array([0, 0, 0], dtype=np.uint8)],  # exactly 63 bits
    [np.array([True, False, True]), np.array([3, 3, 1], dtype=np.int8), np.array([0, 0, 0])],  # bool, int8, all 0
    [np.arange(12, dtype=np.int32).reshape(4, 3)[:, 2] % 2, np.arange(12, dtype=np.int32).reshape(4, 3)[::-1, 0]],
], ids=["negative", "64-bit", "over-63-bits", "floats", "63-bit", "small-types", "strided-columns"])
def test_keys_that_cannot_be_packed_into_one_still_sort_as_lexsort(keys: list[np.ndarray]) -> None:
    assert np.array_equal(lexsort_ints(keys), np.lexsort(keys))


def test_no_rows_no_permutation() -> None:
    assert len(lexsort_ints([np.zeros(0, np.int64), np.zeros(0, np.int64)])) == 0


@pytest.mark.parametrize("seed", range(30))
def test_unique_ints_is_numpys_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    dtype = rng.choice([np.int32, np.int64, np.uint64])
    values = rng.integers(0, int(rng.choice([3, 1000, 2**31 - 1])), n).astype(dtype)
    if rng.random() < 0.3 and n:
        values = np.stack([values, values]).T[:, 1]  # a strided column, as the hits' rows are
    got, want = unique_ints(values), np.unique(values)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    got_first, want_first = unique_ints_first(values), np.unique(values, return_index=True)
    assert all(np.array_equal(a, b) for a, b in zip(got_first, want_first))


@pytest.mark.parametrize("seed", range(20))
def test_independent_entries_batched_is_suspect_by_suspect(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Holder entries a customer first held after it received that k-gram in a suspect answer: the same
    whether the suspects are looked at one by one or many together (the batch size is how it runs)."""
    from types import SimpleNamespace

    from forensics.match import rarity
    from forensics.match.index import NO_TIME
    from forensics.match.stream import tenant_code

    rng = np.random.default_rng(seed)
    n_gids, tenants = int(rng.integers(1, 40)), [f"t{i}" for i in range(5)]
    counts = rng.integers(0, 5, n_gids)
    start = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    codes = np.array([tenant_code(x) for x in tenants] + [-1, -2], dtype=np.int64)
    tenant = codes[rng.integers(0, len(codes), int(counts.sum()))]
    when = rng.integers(0, 100, int(counts.sum())).astype(np.int64)
    targets = [SimpleNamespace(control=bool(rng.random() < 0.2), tenant_id=str(rng.choice(tenants)),
                               received_us=NO_TIME if rng.random() < 0.1 else int(rng.integers(0, 100)),
                               gids=rng.integers(0, n_gids, int(rng.integers(0, 12))).astype(np.int32))
               for _ in range(int(rng.integers(0, 15)))]
    index = SimpleNamespace(targets=targets)
    want = tenant >= 0
    for x in targets:  # the rule as written: that customer's entries of the suspect's k-grams, held after it
        if x.control or x.received_us == NO_TIME:
            continue
        for g in set(x.gids.tolist()):
            for e in range(int(start[g]), int(start[g + 1])):
                if tenant[e] == tenant_code(x.tenant_id) and when[e] > x.received_us:
                    want[e] = False
    for batch in (1, 3, 1 << 18):
        monkeypatch.setattr(rarity, "INDEPENDENT_BATCH", batch)
        assert np.array_equal(rarity.independent_entries(index, start, tenant, when), want)  # type: ignore[arg-type]
