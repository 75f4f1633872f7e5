"""The summary says what the tables say (issue 18, items 3 and 4): every count recomputed here
from the report's CSVs, ISO times with four-digit years, Markdown escaped only where Markdown
needs it, and identifiers that never render alike."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from pathlib import Path

import duckdb
import pytest
from test_report_case import make_case
from test_run import CASE_TOML, _row

from forensics import api, csvfile
from forensics.config import iso as config_iso
from forensics.report import report, verify
from forensics.report.data import iso
from forensics.report.safe import md_escape

SAMPLE = Path(__file__).resolve().parent.parent / "sample_logs"


def _csv(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))


def _md_table(md: str, header: str) -> dict[str, str]:
    """The two-column table under ``| header | ...`` in summary.md, label -> value (unescaped)."""
    rows: dict[str, str] = {}
    lines = md.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {header} |") and lines[i + 1].startswith("|---"))
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        label, value = (re.sub(r"\\(.)", r"\1", c.strip()) for c in line.strip("|").split(" | "))
        rows[label] = value
    return rows


@pytest.fixture(scope="module")
def sample_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return api.run(SAMPLE, tmp_path_factory.mktemp("sum") / "out").report.report_dir


def test_every_count_in_the_summary_is_recomputed_from_the_csvs(sample_report: Path) -> None:
    rd = sample_report
    suspects, evidence = _csv(rd / "suspects.csv"), _csv(rd / "evidence.csv")
    notifications = _csv(rd / "notifications.csv")
    manifest = json.loads((rd / "manifest.json").read_text(encoding="utf-8"))
    cross = [e for e in evidence if e["relation"] == "cross_tenant"]
    found_in = {(e["recipient_request_id"], e["recipient_tenant_id"]) for e in cross}

    def tiers(values: list[str]) -> str:
        return " / ".join(str(values.count(t)) for t in ("confirmed", "probable", "possible"))

    exposed = [n["tier"] for n in notifications if n["role"] == "exposed"]
    received = [n["tier"] for n in notifications if n["role"] == "recipient"]
    con = duckdb.connect()
    table = lambda name: f"read_parquet('{rd / 'case' / name}.parquet')"  # noqa: E731
    expected = {
        "requests ingested": con.execute(f"SELECT count(*) FROM {table('exchanges')}").fetchone()[0],
        "customers in the logs": con.execute(f"SELECT count(DISTINCT tenant_id) FROM {table('exchanges')}").fetchone()[0],
        "engine log events": con.execute(f"SELECT count(*) FROM {table('engine_events')}").fetchone()[0],
        "suspect responses": len(suspects),
        "suspects with the engine's bug signature": sum(s["engine_signature"] == "true" for s in suspects),
        "suspect responses with no cross-tenant finding": sum((s["request_id"], s["tenant_id"]) not in found_in
                                                              for s in suspects),
        "cross-tenant findings": len(cross),
        "cross-tenant findings: confirmed / probable / possible": tiers([e["tier"] for e in cross]),
        "same-tenant overlaps (not exposure)": len(evidence) - len(cross),
        "customers exposed": len(exposed),
        "customers exposed: confirmed / probable / possible": tiers(exposed),
        "customers that received a suspect response": len(received),
        "customers that received one: confirmed / probable / possible": tiers(received),
    }
    md = (rd / "summary.md").read_text(encoding="utf-8")
    assert _md_table(md, "what") == {k: str(v) for k, v in expected.items()}
    html = (rd / "summary.html").read_text(encoding="utf-8")
    for label, value in expected.items():
        assert f"<tr><td>{label.replace(chr(39), '&#x27;')}</td><td>{value}</td></tr>" in html, label
    # The time-zone gap, which read "0" next to a note of 1,000 lines: each row says what it counts.
    gaps = _md_table(md, "gap")
    assert gaps["input lines whose time zone was assumed (UTC)"] == str(manifest["reconciliation"]["zone_assumed_rows"])
    assert str(manifest["reconciliation"]["zone_assumed_rows"]) in " ".join(manifest["reconciliation"]["notes"])
    assert gaps["engine log events whose time zone was assumed"] == str(con.execute(
        f"SELECT count(*) FROM {table('engine_events')} WHERE zone_assumed IS NOT NULL").fetchone()[0])
    assert gaps["gateway records whose time zone was assumed (after merging copies)"] == str(con.execute(
        f"SELECT count(*) FROM {table('exchanges')} WHERE zone_assumed IS NOT NULL").fetchone()[0])
    assert verify(rd).ok


def test_verify_names_an_edited_tier_count(sample_report: Path, tmp_path: Path) -> None:
    import shutil

    rd = Path(shutil.copytree(sample_report, tmp_path / "copy"))
    md = (rd / "summary.md").read_text(encoding="utf-8")
    label = "customers that received one: confirmed / probable / possible"
    row = next(line for line in md.splitlines() if line.startswith(f"| {label} |"))
    (rd / "summary.md").write_text(md.replace(row, f"| {label} | 9 / 9 / 9 |"), encoding="utf-8")
    assert any(f"'{label}' says 9 / 9 / 9" in str(d) for d in verify(rd).drift)


def test_markdown_is_escaped_only_where_markdown_needs_it(sample_report: Path) -> None:
    md = (sample_report / "summary.md").read_text(encoding="utf-8")
    assert "\\(" not in md and "\\)" not in md and "(end exclusive)" in md
    assert "| advertised_window_tokens | 16384 |" in md  # an inner underscore is no emphasis
    assert md_escape("a *b* [c](d) <e> f|g `h` _i_ ~j~") == "a \\*b\\* \\[c\\](d) \\<e\\> f\\|g \\`h\\` \\_i\\_ \\~j\\~"
    assert md_escape("# 1. - x", paragraph=True) == "\\# 1. - x" and md_escape("1. first", paragraph=True) == "1\\. first"
    assert md_escape("0.0001") == "0.0001" and "| confirm_evalue | 0.0001 |" in md  # a cell begins no list


def test_iso_times_always_have_four_digit_years(tmp_path: Path) -> None:
    early = dt.datetime(999, 1, 1, tzinfo=dt.UTC)
    assert iso(early) == config_iso(early) == csvfile.cell(early) == "0999-01-01T00:00:00Z"
    assert iso(dt.datetime(5, 3, 4, 1, 2, 3, 7, tzinfo=dt.UTC)) == "0005-03-04T01:02:03.000007Z"
    case, cfg, _ = make_case(tmp_path)
    cfg.set("window_start", "0999-01-01T00:00:00Z", "option")
    scanned = json.loads((case / "scan.json").read_text(encoding="utf-8"))  # as if scanned with that window
    scanned["parameters"]["window_start"] = "0999-01-01T00:00:00Z"
    (case / "scan.json").write_text(json.dumps(scanned), encoding="utf-8")
    md = (report(case, cfg, tmp_path / "out").report_dir / "summary.md").read_text(encoding="utf-8")
    assert "| window | 0999-01-01T00:00:00Z to 2026-09-02T00:00:00Z (end exclusive) |" in md


# ---- identifiers ----------------------------------------------------------------------------

REAL_NEWLINE = "acme\nprod"
BACKSLASH_N = "acme\\nprod"  # a backslash and an n: another customer
MEMO = {
    REAL_NEWLINE: "Project Heron board memo: the buyer pays twelve million euros in two tranches, escrow at Banque "
                  "Soleil, closing on the third of October, and nobody outside finance may read this paragraph.",
    BACKSLASH_N: "Warehouse Osprey audit notes: forty pallets of copper wire went missing between the docks and "
                 "the rail yard in Antwerp, and the night supervisor signed for all of them twice.",
}


def test_two_ids_that_differ_only_by_a_real_newline_never_render_alike(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "gateway").mkdir(parents=True)
    filler = " ".join(f"row {i} of the shipping ledger for the northern depot" for i in range(900))
    rows = [
        _row("r-1", REAL_NEWLINE, "2026-08-28T09:00:00Z", "Please file: " + MEMO[REAL_NEWLINE], "Filed.", 60),
        _row("r-2", BACKSLASH_N, "2026-08-28T09:30:00Z", "Please file: " + MEMO[BACKSLASH_N], "Filed.", 60),
        _row("r-3", "globex", "2026-08-28T11:00:00Z", filler, "Summary: " + MEMO[REAL_NEWLINE], 1),
        _row("r-4", "initech", "2026-08-28T12:00:00Z", filler, "Summary: " + MEMO[BACKSLASH_N], 1),
    ]
    (logs / "gateway" / "spend.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (logs / "case.toml").write_text(CASE_TOML, encoding="utf-8")
    rd = api.run(logs, tmp_path / "out").report.report_dir
    exposed = {n["tenant_id"]: n for n in _csv(rd / "notifications.csv") if n["role"] == "exposed"}
    assert sorted(exposed) == sorted(["acme\\nprod", "acme\\\\nprod"])  # both visible, and different
    md = (rd / "summary.md").read_text(encoding="utf-8")
    html = (rd / "summary.html").read_text(encoding="utf-8")
    titles = set()
    for cell, row in exposed.items():
        title = (rd / row["packet"] / "notice.md").read_text(encoding="utf-8").splitlines()[0]
        assert title.startswith("# Notice of a data incident: acme")
        titles.add(title)
        assert f"<td>{cell}</td><td>exposed</td>" in html
    assert len(titles) == 2
    for raw in (REAL_NEWLINE, BACKSLASH_N):
        assert f"| {md_escape(raw)} | exposed |" in md
    assert md_escape(REAL_NEWLINE) != md_escape(BACKSLASH_N)


def test_the_scan_scope_check_reads_the_models_as_a_set(tmp_path: Path) -> None:
    """The same models listed in another order are the same scope; the check compared them as one string
    and refused the case file."""
    from forensics.errors import ConfigError
    from forensics.report import check_scan_scope

    case, cfg, _ = make_case(tmp_path)
    scanned = json.loads((case / "scan.json").read_text(encoding="utf-8"))
    scanned["parameters"]["models"] = "glm-5.3, qwen3-235b"
    (case / "scan.json").write_text(json.dumps(scanned), encoding="utf-8")
    cfg.set("models", ["qwen3-235b", "glm-5.3"], "option")
    check_scan_scope(case, cfg)
    cfg.set("models", ["qwen3-235b", "glm-5.3 "], "option")  # as the scan record reads it: spaces trimmed
    check_scan_scope(case, cfg)
    cfg.set("models", ["glm-5.3"], "option")
    with pytest.raises(ConfigError, match="the scan used glm-5.3, qwen3-235b"):
        check_scan_scope(case, cfg)
