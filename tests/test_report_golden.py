"""Golden report files for the shipped ``sample_logs/``: the whole pipeline, compared byte for byte.

Regenerate after an intended change (and review the diff):

    FORENSICS_REGEN_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_report_golden.py
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from forensics import api

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_logs"
GOLDEN = Path(__file__).resolve().parent / "golden" / "report"
#: Manifest keys that depend on the machine or the output location, not on the inputs.
VOLATILE = ("versions", "inputs_root")


def _normalised(report_dir: Path) -> dict[str, bytes]:
    files = {}
    for p in sorted(report_dir.rglob("*")):
        rel = p.relative_to(report_dir).as_posix()
        if not p.is_file() or rel.startswith("case/"):
            continue
        data = p.read_bytes()
        if rel == "manifest.json":
            man = json.loads(data)
            for key in VOLATILE:
                man.pop(key, None)
            data = (json.dumps(man, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
        files[rel] = data
    return files


@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample_logs/ is not in this checkout yet")
@pytest.mark.skipif(not (hasattr(api, "scan") and hasattr(api, "match")), reason="scan and match stages not in this checkout yet")
def test_sample_logs_report_matches_golden(tmp_path: Path) -> None:
    result = api.run(SAMPLE, tmp_path / "out")
    got = _normalised(result.report.report_dir)
    if os.environ.get("FORENSICS_REGEN_GOLDEN"):
        shutil.rmtree(GOLDEN, ignore_errors=True)
        for rel, data in got.items():
            (GOLDEN / rel).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / rel).write_bytes(data)
        pytest.skip("golden files regenerated")
    assert GOLDEN.is_dir(), "no golden files yet: run with FORENSICS_REGEN_GOLDEN=1"
    want = {p.relative_to(GOLDEN).as_posix(): p.read_bytes() for p in sorted(GOLDEN.rglob("*")) if p.is_file()}
    assert sorted(got) == sorted(want)
    for rel in want:
        assert got[rel] == want[rel], f"{rel} differs from tests/golden/report/{rel}"
    assert api.verify(result.report.report_dir).ok
