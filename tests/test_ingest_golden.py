"""Golden files per input format and variant: small inputs -> the exact rows of every table.

Each folder under tests/golden/ingest/ holds input logs and ``expected.json`` (and a ``case.toml``
when its format is chosen by a case file, as a mapping profile is). Regenerate with
``python -m pytest tests/test_ingest_golden.py --update-golden`` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import check_golden, table_rows

from forensics import api
from forensics.config import load_case_file

GOLDEN = Path(__file__).parent / "golden" / "ingest"
CASES = sorted(p for p in GOLDEN.iterdir() if p.is_dir())


@pytest.mark.parametrize("folder", CASES, ids=[p.name for p in CASES])
def test_golden(folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, update_golden: bool) -> None:
    monkeypatch.chdir(folder)  # provenance paths are recorded relative to the working folder
    inputs = sorted(p.name for p in folder.iterdir() if p.name not in ("expected.json", "case.toml"))
    case = tmp_path / "case"
    if (folder / "case.toml").is_file():  # formats a case file chooses (a mapping profile), never sniffed
        cfg = load_case_file(folder / "case.toml")
        for spec in cfg.inputs:
            result = api.ingest(case, [spec.path], fmt=spec.format, config=cfg, profile=spec.profile)
    else:
        result = api.ingest(case, [Path(name) for name in inputs])
    actual = {
        "exchanges": table_rows(case / "exchanges.parquet"),
        "engine_events": table_rows(case / "engine_events.parquet"),
        "quarantine": table_rows(case / "quarantine.parquet"),
        "files": [
            {k: f[k] for k in ("path", "format", "lines", "ingested", "quarantined", "blank", "duplicate", "reconciled")}
            for f in result.manifest["files"]
        ],
    }
    assert all(f["reconciled"] for f in actual["files"])
    check_golden(actual, folder / "expected.json", update_golden)
