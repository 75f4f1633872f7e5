"""summary.html in a real headless Chromium: the page renders its plots and fetches nothing.

Needs Debian's Chromium (`apt-get install -y chromium`); skipped with a reason when it is absent,
except where FORENSICS_REQUIRE_CHROMIUM is set (CI installs it and must not skip silently).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_report_case import make_case

from forensics.report import report

CHROMIUM = Path("/usr/bin/chromium")

# Inserted into a copy of the page (the page itself carries no script): measures every plot as laid
# out and lists every subresource the page loaded.
PROBE = """<pre id="probe"></pre><script>
const plots = [];
for (const svg of document.querySelectorAll('svg.plot')) {
  const r = svg.getBoundingClientRect();
  let bars = 0;
  for (const b of svg.querySelectorAll('rect.bar')) { const bb = b.getBBox(); if (bb.width > 0 && bb.height > 0) bars++; }
  plots.push({id: svg.id, width: r.width, height: r.height, bars: bars, markers: svg.querySelectorAll('line.marker').length});
}
const fetched = performance.getEntriesByType('resource').map(e => e.name);
document.getElementById('probe').textContent = 'PROBE' + JSON.stringify({plots: plots, fetched: fetched}) + 'END';
</script></body>"""


@pytest.mark.skipif(
    not CHROMIUM.exists() and not os.environ.get("FORENSICS_REQUIRE_CHROMIUM"),
    reason="Chromium not installed (apt-get install -y chromium)",
)
def test_summary_renders_with_its_plots_in_chromium(tmp_path: Path) -> None:
    case, cfg, _ = make_case(tmp_path)
    rd = report(case, cfg, tmp_path / "out").report_dir
    page = (rd / "summary.html").read_text(encoding="utf-8")
    assert page.count("</body>") == 1
    # The page's CSP forbids scripts; the probe copy allows inline ones and nothing else.
    probe = page.replace("default-src 'none';", "default-src 'none'; script-src 'unsafe-inline';").replace("</body>", PROBE)
    target = tmp_path / "probe.html"
    target.write_text(probe, encoding="utf-8")
    profile = tmp_path / "profile"
    profile.mkdir()
    proc = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
         "--dump-dom", target.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    shutil.rmtree(profile, ignore_errors=True)
    m = re.search(r"PROBE(.*?)END", proc.stdout)
    assert m, f"no probe output; chromium exit {proc.returncode}: {proc.stderr[-2000:]}"
    result = json.loads(m.group(1).replace("&quot;", '"'))
    plots = {p["id"]: p for p in result["plots"]}
    assert set(plots) == {"plot-per-day", "plot-prompt-length", "plot-tiers"}
    for p in plots.values():
        assert p["width"] > 300 and p["height"] > 100, p
        assert p["bars"] > 0, p
    assert plots["plot-prompt-length"]["markers"] == 2  # real ceiling and advertised window
    assert result["fetched"] == []
