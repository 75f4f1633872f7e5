"""The source rows of the pass's hits, held in columns (forensics.match.sources): read back as the dict they
replace would be, whatever the order and repeats they were added in."""

import random

import numpy as np
import pytest

from forensics.match.sources import SourceRows
from forensics.match.stream import tenant_code

ODD_IDS = ["", "req-1", "Zürich", "Zu\u0308rich", "日本語", "\U0001f600", "a\x00b", "lone \ud800 surrogate", "x" * 5000]
TENANTS = [None, "", "acme", "Zürich", "Zu\u0308rich", "\u202etenant"]


def _random_results(rng: random.Random, n_results: int) -> list[dict[int, tuple[str, str | None, int]]]:
    results = []
    for _ in range(n_results):
        rows = rng.sample(range(200), rng.randint(0, 30))
        results.append({r: (rng.choice(ODD_IDS + [f"id-{rng.randint(0, 40)}"]), rng.choice(TENANTS),
                            rng.randint(-2**63, 2**63 - 1)) for r in rows})
    return results


@pytest.mark.parametrize("seed", range(30))
def test_source_rows_read_back_as_the_dict_of_every_result_would(seed: int) -> None:
    rng = random.Random(seed)
    expected: dict[int, tuple[str, str | None, int]] = {}
    held = SourceRows()
    for result in _random_results(rng, rng.randint(0, 8)):
        held.add(result)
        expected.update(result)
        if rng.random() < 0.3:  # a read between adds settles what came so far
            assert len(held) == len(expected)
    assert len(held) == len(expected)
    assert list(held) == sorted(expected)
    assert dict(held.items()) == expected
    for row, source in expected.items():
        assert row in held
        assert held[row] == source
        assert held[np.int64(row)] == source
    assert 1000 not in held
    with pytest.raises(KeyError):
        held[1000]
    rows = np.array(sorted(expected), dtype=np.int64)
    assert held.tenant_codes(rows).tolist() == [tenant_code(expected[r][1]) for r in rows.tolist()]
    assert held.subset(rows[:5].tolist()) == {r: expected[r] for r in rows[:5].tolist()}


@pytest.mark.parametrize("seed", range(30))
def test_keys_held_by_two_rows_are_those_the_dict_shows(seed: int) -> None:
    rng = random.Random(seed)
    held = SourceRows()
    expected: dict[int, tuple[str, str | None, int]] = {}
    for result in _random_results(rng, 4):
        held.add(result)
        expected.update(result)
    keys = [(rid, tenant) for rid, tenant, _ in expected.values()]
    assert held.held_twice() == {k for k in keys if keys.count(k) > 1}


def test_a_key_held_twice_is_one_request_id_and_one_tenant_spelled_alike() -> None:
    # Canonically equivalent tenants are one customer (tenant_code) but two keys; one id of two tenants is two keys.
    held = SourceRows({1: ("r", "Zürich", 0), 2: ("r", "Zu\u0308rich", 0), 3: ("r", None, 0), 4: ("r", "", 0)})
    assert held.held_twice() == set()
    held.add({5: ("r", "Zürich", 7), 6: ("", None, 0), 7: ("", None, 1)})
    assert held.held_twice() == {("r", "Zürich"), ("", None)}
    assert held.tenant_codes(np.array([1, 2])).tolist() == [tenant_code("Zürich")] * 2


def test_a_row_never_added_is_a_key_error_not_another_rows_source() -> None:
    held = SourceRows({2: ("a", "t", 1), 4: ("b", "t", 2)})
    for row in (0, 3, 5):
        with pytest.raises(KeyError):
            held[row]
        with pytest.raises(KeyError):
            held.tenant_codes(np.array([2, row, 4]))
    assert SourceRows().tenant_codes(np.zeros(0, np.int64)).tolist() == []
    with pytest.raises(KeyError):
        SourceRows().tenant_codes(np.array([1]))
