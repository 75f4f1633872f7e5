"""Golden report files for the shipped ``sample_logs/``: the whole pipeline, compared byte for byte.

Regenerate after an intended change (and review the diff):

    FORENSICS_REGEN_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_report_golden.py
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
from pathlib import Path

import duckdb
import pytest

from forensics import api

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "sample_logs"
GOLDEN = Path(__file__).resolve().parent / "golden" / "report"
#: Manifest keys that depend on the machine or the output location, not on the inputs, or that
#: record the other stages' files (query texts, scan.json, match.json), which their own tests cover:
#: a reworded query header must not break this stage's golden files.
VOLATILE = ("versions", "inputs_root", "queries", "stage_records")
OTHER_STAGES = ("scan.json", "match.json")


def _normalised(report_dir: Path) -> dict[str, bytes]:
    files = {}
    for p in sorted(report_dir.rglob("*")):
        rel = p.relative_to(report_dir).as_posix()
        if not p.is_file() or rel.startswith("case/") or rel in OTHER_STAGES:
            continue
        data = p.read_bytes()
        if rel == "manifest.json":
            man = json.loads(data)
            for key in VOLATILE:
                man.pop(key, None)
            man["outputs"] = [o for o in man["outputs"] if o["path"] not in OTHER_STAGES]
            data = (json.dumps(man, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()
        files[rel] = data
    return files


def _shingles(text: str | None, n: int = 8) -> set[str]:
    words = re.findall(r"\w+", text or "")
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def _packet_leaks(report_dir: Path) -> list[tuple[str, str]]:
    """(packet, other tenant) pairs where a packet holds another tenant's id or 8 words of its prompts
    that the packet's own customer never sent or received."""
    con = duckdb.connect()
    rows = con.execute("SELECT tenant_id, prompt_text, response_text FROM read_parquet($1)",
                       [str(report_dir / "case" / "exchanges.parquet")]).fetchall()
    prompts: dict[str, set[str]] = {}
    seen: dict[str, set[str]] = {}
    for tenant, prompt, response in rows:
        prompts.setdefault(tenant, set()).update(_shingles(prompt))
        seen.setdefault(tenant, set()).update(_shingles(prompt) | _shingles(response))
    leaks = []
    notices = csv.DictReader(io.StringIO((report_dir / "notifications.csv").read_text(encoding="utf-8")))
    for tenant, packet in sorted({(n["tenant_id"], n["packet"]) for n in notices}):
        text = (report_dir / packet / "notice.md").read_text(encoding="utf-8")
        text += json.dumps(json.loads((report_dir / packet / "notice.json").read_text(encoding="utf-8")), ensure_ascii=False)
        words = _shingles(text)
        for other, theirs in prompts.items():
            if other != tenant and (other in text or (words & theirs) - seen.get(tenant, set())):
                leaks.append((packet, other))
    return leaks


@pytest.mark.skipif(not SAMPLE.is_dir(), reason="sample_logs/ is not in this checkout yet")
@pytest.mark.skipif(not (hasattr(api, "scan") and hasattr(api, "match")), reason="scan and match stages not in this checkout yet")
def test_sample_logs_report_matches_golden(tmp_path: Path) -> None:
    result = api.run(SAMPLE, tmp_path / "out")
    assert _packet_leaks(result.report.report_dir) == []
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
