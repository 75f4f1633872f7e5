"""Shared fixtures and the ``--update-golden`` switch.

Golden files are regenerated with ``python -m pytest tests --update-golden`` (then review the
diff before committing: a golden file is a claim about correct behaviour).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parent.parent
CORPORA = REPO.parent / "shared" / "corpora"


def pytest_configure(config: pytest.Config) -> None:
    # Python makes one temporary folder per process for multiprocessing (the fork server's socket goes there) the
    # first time it needs one, under the temporary folder of the moment. Tests that point the temporary folder into
    # their tmp_path would put it there, and under pytest-xdist that path (.../popen-gw0/test_...) is too long for a
    # socket (about 107 bytes): the match stage's workers then failed to start. Made now, it is short.
    import multiprocessing.util

    multiprocessing.util.get_temp_dir()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true", help="rewrite golden files from current output")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def _plain(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return value


def table_rows(path: Path) -> list[dict[str, Any]]:
    """A Parquet table as JSON-ready row dicts."""
    return [{k: _plain(v) for k, v in row.items()} for row in pq.read_table(path).to_pylist()]


def check_golden(actual: Any, golden: Path, update: bool) -> None:
    """Compare ``actual`` with a golden JSON file, or rewrite it with --update-golden."""
    text = json.dumps(actual, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    if update or not golden.exists():
        golden.write_text(text, encoding="utf-8")
        if not update:
            pytest.fail(f"golden file {golden} was missing and has been written; review and commit it")
        return
    expected = json.loads(golden.read_text(encoding="utf-8"))
    assert json.loads(text) == expected, f"output differs from {golden} (regenerate with --update-golden and review)"


@pytest.fixture
def parquet_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, list[int] | None]]:
    """Every ``ParquetFile.iter_batches`` call made during the test, as (batch size, row groups)."""
    calls: list[tuple[int, list[int] | None]] = []
    original = pq.ParquetFile.iter_batches

    def spy(self: pq.ParquetFile, batch_size: int = 65536, row_groups: list[int] | None = None, **kw: Any) -> Any:
        calls.append((batch_size, row_groups))
        return original(self, batch_size=batch_size, row_groups=row_groups, **kw)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    return calls


def small_incident_copies(root: Path, seed: int) -> Callable[[str], Path]:
    """Simulate the small incident of ``seed`` (plain files) under ``root`` once; the function returned copies it to
    ``root/NAME`` for a test to edit, and returns the copy's folder."""
    from forensics import api

    sim = api.simulate(root / "sim", seed=seed, scale="small", compress=False)

    def copy(name: str) -> Path:
        dst = root / name
        shutil.copytree(sim.case_file.parent, dst)
        return dst

    return copy

