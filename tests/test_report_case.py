"""A small case folder written table by table, shared by the report tests, and its basic checks."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from forensics import schema
from forensics.case import write_table
from forensics.config import CaseConfig, config_from_mapping, save
from forensics.lab import cases
from forensics.lab.cases import write_stage_records

UTC = dt.UTC
AWS_KEY = "AKIAZ7QW3ERT5YUI8OPL"
CARD = "4539 1488 0343 6467"  # passes Luhn
HOSTILE = "../../etc/passwd\x1b[31m=cmd|' /C calc'!A0" + "x" * 300

# Text unique to each tenant's prompt: no other tenant's packet may contain any of it.
PROMPTS = {
    "acme": f"<|user|>\nQuarterly merger memo for Project Bluefin. Deploy with key {AWS_KEY} and charge card {CARD} "
            "before the board meets on Thursday at the Lisbon office.",
    "globex": "<|user|>\n" + ("Summarise the enormous archive of shipping manifests for the Rotterdam terminal. " * 3),
    "initech": "<|user|>\nTranslate the TPS report cover sheet guidelines into Portuguese please.",
    "umbrella": "<|user|>\nList the antiviral compound batch numbers stored in freezer unit nine.",
    HOSTILE: "<|user|>\nHostile tenant prompt about quarterly cheese inventory in Gouda warehouses.",
    "=SUM(A1)": "<|user|>\nFormula tenant asks about the weather in Reykjavik harbour tomorrow.",
}
LEAKED = "Project Bluefin. Deploy with key " + AWS_KEY + " and charge card " + CARD
RESPONSES = {
    "r-globex-1": "Here is the summary: Quarterly merger memo for " + LEAKED + " before the board.",
    "r-initech-1": "Obrigado. Nothing useful was produced for this request at all.",
    "r-umbrella-2": "The batch numbers in freezer unit nine are as follows, as you asked before.",
    "r-hostile-1": "Quarterly merger memo for " + LEAKED + " truncated.",
}


def ts(day: int, hour: int = 10) -> dt.datetime:
    return dt.datetime(2026, 8, day, hour, 0, 0, tzinfo=UTC)


def exchange(rid: str, tenant: str, prompt: str, response: str, received: dt.datetime, tokens: int, source: str = "engine") -> dict[str, Any]:
    return {
        "request_id": rid, "tenant_id": tenant, "model": "glm-5.3", "received_at": received,
        "completed_at": received + dt.timedelta(seconds=9), "status": "success", "prompt_text": prompt,
        "prompt_chars": len(prompt), "response_text": response, "prompt_tokens": tokens,
        "prompt_tokens_source": source, "source_file": "gateway.jsonl", "source_line": 1,
    }


def make_case(tmp: Path, *, name: str = "test-case", no_findings: bool = False) -> tuple[Path, CaseConfig, Path]:
    """Write a case folder (and its input logs); return (case dir, config, logs dir)."""
    logs = tmp / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    gateway = logs / "gateway.jsonl"
    gateway.write_text('{"request_id": "r-acme-1"}\n', encoding="utf-8")
    engine = logs / "decode-1_0.log"
    engine.write_text("[2026-08-27 00:00:05 TP0] max_total_num_tokens=681280, context_len=1048576\n", encoding="utf-8")
    case_file = tmp / "case.toml"
    case_file.write_text(
        f'name = "{name}"\nmodel = "glm-5.3"\nwindow_start = "2026-08-27T00:00:00Z"\nwindow_end = "2026-09-02T00:00:00Z"\n'
        'real_ceiling_tokens = 681280\nadvertised_window_tokens = 1048576\n'
        '[[inputs]]\nformat = "litellm"\npath = "logs/gateway.jsonl"\n[[inputs]]\nformat = "sglang"\npath = "logs/decode-1_0.log"\n',
        encoding="utf-8",
    )
    import tomllib

    cfg = config_from_mapping(tomllib.loads(case_file.read_text()), base=tmp, file=case_file)
    case = tmp / "case"
    case.mkdir()
    rows = [
        exchange("r-acme-1", "acme", PROMPTS["acme"], "Noted.", ts(28, 9), 40_000),
        exchange("r-globex-1", "globex", PROMPTS["globex"], RESPONSES["r-globex-1"], ts(28, 11), 812_345),
        exchange("r-initech-1", "initech", PROMPTS["initech"], RESPONSES["r-initech-1"], ts(30), 700_001, "estimate"),
        exchange("r-umbrella-1", "umbrella", PROMPTS["umbrella"], "Freezer nine holds batches.", ts(29, 8), 1_000),
        exchange("r-umbrella-2", "umbrella", PROMPTS["umbrella"], RESPONSES["r-umbrella-2"], ts(29, 12), 900_000),
        exchange("r-hostile-1", HOSTILE, PROMPTS[HOSTILE], RESPONSES["r-hostile-1"], ts(31), 690_000),
        exchange("=r-formula", "=SUM(A1)", PROMPTS["=SUM(A1)"], "Windy.", ts(29, 7), 700_000),
    ]
    exchanges = [dict(r, orphan="request_only" if r["request_id"] == "=r-formula" else None) for r in rows]
    write_table(case / "exchanges.parquet", pa.Table.from_pylist(exchanges, schema=schema.EXCHANGES), schema.EXCHANGES)
    write_table(case / "quarantine.parquet", pa.Table.from_pylist(
        [{"source_file": "gateway.jsonl", "source_line": 7, "reason": "bad JSON", "excerpt": "{oops"}], schema=schema.QUARANTINE),
        schema.QUARANTINE)
    suspects = [] if no_findings else [
        {"request_id": r["request_id"], "tenant_id": r["tenant_id"], "model": "glm-5.3", "received_at": r["received_at"],
         "completed_at": r["completed_at"], "prompt_tokens": r["prompt_tokens"], "prompt_tokens_source": r["prompt_tokens_source"],
         "reasons": "ceiling" if r["request_id"] != "r-initech-1" else "ceiling;engine_signature",
         "borderline": r["request_id"] == "r-initech-1", "engine_signature": r["request_id"] == "r-initech-1"}
        for r in rows if r["prompt_tokens"] > 681_280
    ]
    write_table(case / "suspects.parquet", pa.Table.from_pylist(suspects, schema=schema.SUSPECTS), schema.SUSPECTS)
    acme = PROMPTS["acme"]
    s0 = acme.index(LEAKED)
    evidence = [] if no_findings else [
        {"finding_id": "f-0001", "recipient_request_id": "r-globex-1", "recipient_tenant_id": "globex",
         "source_request_id": "r-acme-1", "source_tenant_id": "acme", "source_kind": "prompt", "relation": "cross_tenant",
         "tier": "confirmed", "tier_rule": "rare verified span >= 16 tokens", "score": 100.0, "matched_tokens": 20,
         "longest_run": 20, "recipient_start": RESPONSES["r-globex-1"].index(LEAKED),
         "recipient_end": RESPONSES["r-globex-1"].index(LEAKED) + len(LEAKED), "source_start": s0, "source_end": s0 + len(LEAKED),
         "rarity": 1.0},
        {"finding_id": "f-0002", "recipient_request_id": "r-hostile-1", "recipient_tenant_id": HOSTILE,
         "source_request_id": "r-acme-1", "source_tenant_id": "acme", "source_kind": "prompt", "relation": "cross_tenant",
         "tier": "probable", "tier_rule": "verified span 8-15 tokens", "score": 92.5, "matched_tokens": 12,
         "longest_run": 10, "recipient_start": RESPONSES["r-hostile-1"].index(LEAKED),
         "recipient_end": RESPONSES["r-hostile-1"].index(LEAKED) + len(LEAKED), "source_start": s0, "source_end": s0 + len(LEAKED),
         "rarity": 0.9},
        {"finding_id": "f-0003", "recipient_request_id": "r-umbrella-2", "recipient_tenant_id": "umbrella",
         "source_request_id": "r-umbrella-1", "source_tenant_id": "umbrella", "source_kind": "prompt", "relation": "same_tenant",
         "tier": "confirmed", "tier_rule": "same tenant", "score": 100.0, "matched_tokens": 9, "longest_run": 9,
         "recipient_start": 4, "recipient_end": 30, "source_start": 10, "source_end": 36, "rarity": 1.0},
    ]
    write_table(case / "evidence.parquet", pa.Table.from_pylist(evidence, schema=schema.EVIDENCE), schema.EVIDENCE)
    # Named as an ingest with the case file names them: relative to its folder.
    files = [{"path": p.relative_to(tmp).as_posix(), "paths": [p.relative_to(tmp).as_posix()], "abs_path": str(p),
              "abs_paths": [str(p)], "sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "size": p.stat().st_size,
              "format": f, "lines": 1, "ingested": 1, "quarantined": 0, "blank": 0, "duplicate": 0}
             for p, f in ((gateway, "litellm"), (engine, "sglang"))]
    write_stage_records(
        case,
        scan=cases.scan_record(models="glm-5.3", window_start="2026-08-27T00:00:00Z", window_end="2026-09-02T00:00:00Z",
                               real_ceiling_tokens=681280, advertised_window_tokens=1048576, suspects=len(suspects)),
        match=cases.match_record(evidence, parameters={"k": 8, "rarity_cap": 3, "control_sample_size": 200},
                                 control_size=200, control_findings=1, false_positive_rate=0.005, records=7),
        ingest=cases.ingest_manifest(files, exchanges=len(rows)),
    )
    save(cfg, case / "config.json")
    return case, cfg, logs


def test_fixture_tables_are_valid(tmp_path: Path) -> None:
    case, cfg, _ = make_case(tmp_path)
    assert json.loads((case / "config.json").read_text())["values"]["name"] == "test-case"
    assert cfg.real_ceiling_tokens == 681280


def test_fixture_stage_records_are_complete_artifacts(tmp_path: Path) -> None:
    # The records are written as the stages write them, so the report reads them as it reads a real case.
    from forensics.report.data import read_records

    case, _, _ = make_case(tmp_path)
    scan, match, ingest = read_records(case)
    assert (scan.parameters.real_ceiling_tokens, scan.suspect_counts.total) == (681280, 5)
    assert (match.control.size, match.control.false_positive_rate, match.findings.cross_tenant) == (200, 0.005, 2)
    assert ingest.tables.exchanges == 7 and [f["format"] for f in ingest.files] == ["litellm", "sglang"]
    for record, name in ((scan, "scan.json"), (match, "match.json"), (ingest, "manifest.json")):
        assert record.to_json() == json.loads((case / name).read_text(encoding="utf-8"))
