"""forensics.open_case: a case's tables and a report's files as polars LazyFrames."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import polars as pl
import pytest

import forensics
from forensics.errors import CaseError
from forensics.run import run

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out")
    return run(REPO / "sample_logs", out).case_dir.parent


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_report_folder_opens_with_every_table_and_reads_what_the_files_say(report: Path) -> None:
    before = _digest(report)
    c = forensics.open_case(report)
    assert c.tables() == ["exchanges", "engine_events", "quarantine", "suspects", "evidence", "review",
                          "notifications", "references"]
    assert isinstance(c.evidence, pl.LazyFrame)
    # The notification list as the CSV holds it, counts as integers, ids as text.
    rows = list(csv.DictReader((report / "notifications.csv").open(encoding="utf-8")))
    frame = c.notifications.collect()
    assert frame.height == len(rows)
    assert frame["tenant_id"].to_list() == [r["tenant_id"] for r in rows]
    assert frame.schema["n_requests"] == pl.Int64 and frame.schema["tenant_id"] == pl.String
    # Analyst questions answer from the case tables: who is exposed, on what evidence.
    exposed = (c.evidence.filter(pl.col("relation") == "cross_tenant").select("source_tenant_id").unique()
               .collect()["source_tenant_id"].to_list())
    listed = frame.filter(pl.col("role") == "exposed")["tenant_id"].to_list()
    assert sorted(exposed) == sorted(listed)
    joined = c.suspects.join(c.exchanges, on=["request_id", "tenant_id"]).select("request_id").collect()
    assert joined.height == c.suspects.collect().height
    assert _digest(report) == before  # reading never writes


def test_a_case_folder_opens_too_and_missing_tables_say_which_stage_makes_them(report: Path, tmp_path: Path) -> None:
    c = forensics.open_case(report / "case")
    assert c.report == report  # the report around it is found
    case = tmp_path / "case"
    case.mkdir()
    (case / "exchanges.parquet").write_bytes((report / "case" / "exchanges.parquet").read_bytes())
    only = forensics.open_case(case)
    assert only.tables() == ["exchanges"]
    with pytest.raises(CaseError, match="forensics scan"):
        only.suspects.collect()
    with pytest.raises(CaseError, match="report"):
        only.notifications.collect()
    with pytest.raises(CaseError, match="neither a case"):
        forensics.open_case(tmp_path / "nothing")
    with pytest.raises(AttributeError):
        _ = only.no_such_table
