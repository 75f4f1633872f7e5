"""The match stage's passes over the exchanges table hold one row group at a time (issue 14, point 5)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from match_helpers import config
from test_match import _mixed_case, cross

from forensics.match import match


def test_match_reads_the_exchanges_one_row_group_at_a_time(tmp_path: Path,
                                                           parquet_reads: list[tuple[int, list[int] | None]]) -> None:
    # A reader over every row group at once kept what it had read: loading the targets (one pass
    # over the responses) left the match stage 65 MB bigger on the 4x 256 MB bench incident.
    case = _mixed_case(tmp_path / "case", row_group_rows=16)
    assert pq.ParquetFile(case / "exchanges.parquet").num_row_groups == 5
    result = match(case, config(workers=1))
    assert len(cross(result.findings)) >= 5
    assert parquet_reads
    assert all(groups is not None and len(groups) == 1 for _, groups in parquet_reads), parquet_reads
