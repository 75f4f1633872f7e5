"""review.html, the evidence viewer (issue 15, item 1): built from the report and its case, windowed
around the passages, hostile text inert; filtering and keyboard navigation run in headless Chromium.

Chromium is Debian's (`apt-get install -y chromium`); the browser tests are skipped with a reason
when it is absent, except where FORENSICS_REQUIRE_CHROMIUM is set (CI must not skip silently).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_report_case import make_case

from forensics import schema
from forensics.case import write_table
from forensics.cli import main
from forensics.errors import CaseError
from forensics.report import report, verify
from forensics.review import viewer

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("FORENSICS_REQUIRE_CHROMIUM"),
    reason="Chromium not installed (apt-get install -y chromium)",
)
PAYLOAD = ' <img src=x onerror="window.pwned=1"></script><script>window.pwned=2</script><b>bold</b> &amp;'
FILLER = "filler text nobody leaked. " * 160_000  # about 4.3 MB after acme's prompt


@pytest.fixture
def page(tmp_path: Path) -> Path:
    """A report whose hostile tenant's response carries markup and whose exposed prompt is 4 MB."""
    case, cfg, _ = make_case(tmp_path)
    rows = pq.read_table(case / "exchanges.parquet").to_pylist()
    for r in rows:
        if r["request_id"] == "r-hostile-1":
            r["response_text"] += PAYLOAD  # after the passage: its offsets stay right
        if r["request_id"] == "r-acme-1":
            r["prompt_text"] += FILLER
    write_table(case / "exchanges.parquet", pa.Table.from_pylist(rows, schema=schema.EXCHANGES), schema.EXCHANGES)
    rd = report(case, cfg, tmp_path / "out").report_dir
    return viewer.build(rd, case)


def _data(path: Path) -> dict:
    m = re.search(r'<script type="application/json" id="evidence">(.*?)</script>', path.read_text(encoding="utf-8"), re.S)
    assert m
    return json.loads(m.group(1))


def test_every_finding_with_both_texts_windowed_around_the_passages(page: Path) -> None:
    data = _data(page)
    assert sorted(f["finding_id"] for f in data["findings"]) == ["f-0001", "f-0002", "f-0003"]
    f1 = next(f for f in data["findings"] if f["finding_id"] == "f-0001")
    assert f1["recipient_tenant"] == "globex" and f1["source_tenant"] == "acme" and f1["tier"] == "confirmed"
    marked = "".join(p["t"] for p in f1["source_parts"] if p.get("hl"))
    assert "Project Bluefin. Deploy with key" in marked
    assert "credential" in f1["severity"]
    # The 4 MB prompt is cut to the passage and its context; what is left out is counted.
    assert f1["source_chars"] > 4_000_000
    assert page.stat().st_size < 200_000
    shown = sum(len(p.get("t", "")) for p in f1["source_parts"])
    assert shown + sum(p.get("gap", 0) for p in f1["source_parts"]) == f1["source_chars"]


def test_hostile_text_cannot_close_the_data_element(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert "<img" not in text and "window.pwned" in text  # present only as escaped data
    assert text.count("<script") == 2 and text.count("</script>") == 2
    assert "Content-Security-Policy" in text and "default-src 'none'" in text and "http" not in text.replace("http-equiv", "")


def test_viewer_is_deterministic_and_does_not_disturb_the_report(page: Path) -> None:
    first = page.read_bytes()
    rd = page.parent
    case = rd.parent.parent / "case"
    assert viewer.build(rd, case).read_bytes() == first
    assert verify(rd).ok  # a derived file, not an unexpected output
    with pytest.raises(SystemExit) as exc:
        main(["viewer", str(rd), "--case", str(case)])
    assert exc.value.code == 0


def test_viewer_is_the_same_whatever_way_the_report_folder_is_named(page: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Given as ".", the folder named none: the title lost the report's name and the bytes differed."""
    first = page.read_bytes()
    rd = page.parent
    monkeypatch.chdir(rd)
    assert viewer.build(Path("."), rd.parent.parent / "case").read_bytes() == first
    assert f"Evidence viewer: {rd.name}".encode() in first


def test_viewer_without_the_case_is_a_clear_error(tmp_path: Path) -> None:
    case, cfg, _ = make_case(tmp_path)
    rd = report(case, cfg, tmp_path / "out").report_dir
    with pytest.raises(CaseError, match="case folder"):
        viewer.build(rd)


PROBE = """<script>
const out = {};
const cards = () => [...document.querySelectorAll('section.card')];
const shown = () => cards().filter(c => getComputedStyle(c).display !== 'none');
out.cards = cards().length;
out.marks = cards().map(c => c.querySelectorAll('mark').length);
out.pwned = window.pwned || null;
out.imgs = document.querySelectorAll('img').length;
out.bold = document.querySelectorAll('.text b').length;
out.literal = [...document.querySelectorAll('.text')].some(t => t.textContent.includes('<img src=x onerror='));
const sel = document.getElementById('f-customer');
sel.value = 'acme'; sel.dispatchEvent(new Event('change'));
out.acme = shown().length;
const tier = document.getElementById('f-tier');
tier.value = 'probable'; tier.dispatchEvent(new Event('change'));
out.acme_probable = shown().length;
sel.value = ''; tier.value = ''; tier.dispatchEvent(new Event('change'));
out.all = shown().length;
const key = k => document.dispatchEvent(new KeyboardEvent('keydown', {key: k, bubbles: true}));
key('j'); key('j'); key('ArrowDown'); key('k');
out.current = cards().findIndex(c => c.classList.contains('current'));
out.fetched = performance.getEntriesByType('resource').map(e => e.name);
document.body.insertAdjacentHTML('beforeend', '<pre id="probe"></pre>');
document.getElementById('probe').textContent = 'PROBE' + JSON.stringify(out) + 'END';
</script></body>"""


def _chromium(tmp_path: Path, html: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / "profile"
    profile.mkdir(exist_ok=True)
    try:
        return subprocess.run(
            [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}", *args,
             html.as_uri()], capture_output=True, text=True, timeout=120, check=False)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@needs_chromium
def test_page_runs_under_its_own_strict_csp(page: Path, tmp_path: Path) -> None:
    proc = _chromium(tmp_path, page, "--dump-dom")
    # The cards exist only if the hashed script ran; the hostile markup never became elements.
    assert proc.stdout.count('class="card') == 3, proc.stderr[-2000:]
    assert "<img" not in proc.stdout and "3 of 3 shown" in proc.stdout
    shot = tmp_path / "shot.png"
    _chromium(tmp_path, page, "--window-size=1200,900", f"--screenshot={shot}")
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


@needs_chromium
def test_filters_keyboard_and_inert_hostile_text_in_chromium(page: Path, tmp_path: Path) -> None:
    text = page.read_text(encoding="utf-8")
    # The probe copy lets inline scripts run (the page's hash admits only its own).
    csp = re.search(r'content="(default-src [^"]*)"', text)
    assert csp
    probe = text.replace(csp.group(1), "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
    probe = probe.replace("</body>", PROBE)
    target = tmp_path / "probe.html"
    target.write_text(probe, encoding="utf-8")
    proc = _chromium(tmp_path, target, "--dump-dom")
    found = re.findall(r'<pre id="probe">PROBE(.*?)END</pre>', proc.stdout)
    assert found, f"no probe output; chromium exit {proc.returncode}: {proc.stderr[-2000:]}"
    got = json.loads(found[-1].replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert got["cards"] == 3 and all(n >= 2 for n in got["marks"])  # passages marked in both texts
    assert got["pwned"] is None and got["imgs"] == 0 and got["bold"] == 0 and got["literal"] is True
    assert got["acme"] == 2 and got["acme_probable"] == 1 and got["all"] == 3
    assert got["current"] == 1  # j, j, down: third card (clamped to the last); k: back to the second
    assert got["fetched"] == []


SPOOF = "abc\u202egnp.exe\nnext"  # a right-to-left override and a line break in a customer id


def _renamed_case(tmp_path: Path) -> tuple[Path, object]:
    """The test case with the hostile customer renamed to SPOOF in every table of the case."""
    from test_report_case import HOSTILE

    case, cfg, _ = make_case(tmp_path)
    for path in sorted(case.glob("*.parquet")):
        table = pq.read_table(path)
        columns = [pa.array([SPOOF if v == HOSTILE else v for v in col.to_pylist()], col.type)
                   if pa.types.is_string(col.type) else col for col in table.columns]
        pq.write_table(pa.Table.from_arrays(columns, schema=table.schema), path)
    return case, cfg


def test_ids_are_shown_as_the_csvs_show_them(tmp_path: Path) -> None:
    """An id holding U+202E showed its end reversed ("gnp.exe" read "exe.png"), one holding a line break collapsed
    in the customer filter: the page carries ids written out as the CSVs and notes write them."""
    from forensics.report import safe

    case, cfg = _renamed_case(tmp_path)
    page = viewer.build(report(case, cfg, tmp_path / "out").report_dir, case)
    tenants = {t for f in _data(page)["findings"] for t in (f["recipient_tenant"], f["source_tenant"])}
    assert safe.clean_text(SPOOF) in tenants and "abc\\u202egnp.exe\\nnext" in tenants
    assert not any("\u202e" in t or "\n" in t for t in tenants)


@needs_chromium
def test_ids_with_invisible_or_bidirectional_characters_are_written_out(tmp_path: Path) -> None:
    case, cfg = _renamed_case(tmp_path)
    page = viewer.build(report(case, cfg, tmp_path / "out").report_dir, case)
    proc = _chromium(tmp_path, page, "--dump-dom")
    assert proc.stdout.count('class="card') >= 1, proc.stderr[-2000:]
    options = re.findall(r"<option[^>]*>([^<]*)</option>", proc.stdout)
    assert "abc\\u202egnp.exe\\nnext" in options, options
    shown = options + re.findall(r'<div class="meta">([^<]*)</div>', proc.stdout)
    assert not any("\u202e" in t or "\n" in t for t in shown)
