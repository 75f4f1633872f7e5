"""A case table that cannot be read (truncated in a copy, overwritten, not Parquet) is named, with the stage that
writes it again: the stages said "internal error ... a bug in forensics" and named no file."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from match_helpers import at, config, exchange

from forensics.case import TABLE_STAGES
from forensics.errors import CaseError
from forensics.lab.cases import suspect_rows, write_case
from forensics.match import match
from forensics.report import report
from forensics.scan import scan


@pytest.fixture(scope="module")
def matched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small matched case: one leak, engine logs."""
    rng = np.random.default_rng(5)
    passage = " ".join(f"w{int(x)}" for x in rng.integers(0, 10_000, 40))
    rows = [exchange("a1", "acme", 0, prompt=passage, response="ok", decode_node="d1"),
            exchange("b1", "bolt", 5, prompt="hi", response=passage, decode_node="d1")]
    events = [{"source_file": "d1.log", "source_line": 1, "node": "d1", "role": "decode", "time": at(0),
               "event": "req_time_stats", "rid": "a1", "input_len": 40, "message": "rid=a1"}]
    root = tmp_path_factory.mktemp("matched") / "case"
    write_case(root, rows, engine_events=events, suspects=suspect_rows(rows, ["b1"]))
    match(root, config())
    return root


# Each stage and the tables it reads.
READS = [("scan", "exchanges"), ("scan", "engine_events"), ("match", "exchanges"), ("match", "suspects"),
         ("match", "engine_events"), ("report", "suspects"), ("report", "evidence")]


@pytest.mark.parametrize("damage", ["not parquet", "cut short"])
@pytest.mark.parametrize(("stage", "table"), READS, ids=[f"{s}-{t}" for s, t in READS])
def test_a_damaged_case_table_is_named_with_the_stage_that_writes_it(tmp_path: Path, matched: Path, stage: str,
                                                                     table: str, damage: str) -> None:
    case = tmp_path / "case"
    shutil.copytree(matched, case)
    path = case / f"{table}.parquet"
    data = path.read_bytes()
    path.write_bytes(b"PAR1 this is not a Parquet file" if damage == "not parquet" else data[: len(data) // 2])
    with pytest.raises(CaseError) as err:
        if stage == "scan":
            scan(case, config())
        elif stage == "match":
            match(case, config())
        else:
            report(case, config(), tmp_path / "out")
    assert err.value.file == str(path)
    assert f"the case's {table} table cannot be read" in err.value.message
    assert err.value.fix is not None and f"forensics {TABLE_STAGES[table]}" in err.value.fix


def test_the_command_says_which_file_in_one_line_and_exits_2(tmp_path: Path, matched: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from forensics.cli import main

    case = tmp_path / "case"
    shutil.copytree(matched, case)
    (case / "engine_events.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(SystemExit) as exc:
        main(["match", "--case", str(case), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "internal error" not in err
    assert str(case / "engine_events.parquet") in err and "forensics ingest" in err
