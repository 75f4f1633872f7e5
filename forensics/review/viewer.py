"""review.html: the evidence viewer an analyst reads before deciding (``forensics viewer``).

Every finding and review candidate of a report, the suspect response and the source text side by
side, the matched passages highlighted in both, with tier, E-values, decode-node evidence,
severity and any verdict; filters by customer, tier and severity; keyboard navigation (j/k or the
arrow keys, / to the customer filter).

The page is one self-contained file: inline CSS and script allowed by their hashes in a strict
Content-Security-Policy (nothing else may load or run, no network). Texts come from logs an
attacker may have shaped: they travel as JSON inside a non-executed script element (``<``, ``>``
and ``&`` escaped) and the script only ever sets ``textContent``, so no text can become markup.
Long texts are cut in Python to windows around the passages, so a 4 MB prompt cannot freeze the
page. The file is derived (not hashed by the manifest, dropped by a re-render: run the viewer
again) and byte-identical for the same report and case.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from forensics.case import Case
from forensics.errors import CaseError
from forensics.report import safe
from forensics.report.notices import passages
from forensics.report.severity import NONE, default_classifier
from forensics.review import VERDICTS, VIEWER, chain
from forensics.review.verdicts import deciding, decisions, report_resolution

PAGE = VIEWER
#: Characters of context kept on each side of a passage.
CONTEXT = 400
#: A passage longer than this is shown by its two ends.
MAX_PASSAGE = 6000
FIELDS = ("tier", "tier_rule", "score", "matched_tokens", "rarity", "expected_by_chance", "expected_by_chance_with_mechanism",
          "mechanism_factor", "same_decode_node", "recipient_decode_node", "source_decode_node", "seconds_before",
          "why_not_notified")

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#f6f6f4}
header{position:sticky;top:0;background:#fff;border-bottom:1px solid #ccc;padding:8px 16px;z-index:1}
h1{font-size:17px;margin:0 0 6px}
h2{font-size:15px;margin:0}
label{margin-right:14px}
#count{color:#555}
.card{background:#fff;margin:12px 16px;padding:10px 14px;border:1px solid #ddd;border-radius:6px}
.card.current{outline:3px solid #2b6cb0}
.meta{color:#333;font-size:13px;margin:4px 0}
.meta b{font-weight:600}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:12px}
.text{white-space:pre-wrap;word-break:break-word;font:12px/1.4 ui-monospace,monospace;background:#fafafa;
 border:1px solid #e3e3e3;padding:8px;max-height:420px;overflow:auto}
mark{background:#ffe066}
.gap{color:#888;font-style:italic}
.tier-confirmed{color:#a40000}.tier-probable{color:#b35900}.tier-possible,.tier-review{color:#555}
.verdict{font-weight:600}
.hidden{display:none}
"""

SCRIPT = """
(function(){
const data = JSON.parse(document.getElementById('evidence').textContent);
const list = document.getElementById('list');
function el(tag, cls, text){const e=document.createElement(tag);if(cls)e.className=cls;if(text!==undefined)e.textContent=text;return e;}
function textBox(parts){
  const box = el('div','text');
  for (const p of parts){
    if (p.gap !== undefined) box.appendChild(el('span','gap',' [... '+p.gap+' characters not shown ...] '));
    else box.appendChild(el(p.hl ? 'mark' : 'span', null, p.t));
  }
  return box;
}
const customers = new Set();
const cards = [];
for (const f of data.findings){
  const c = el('section','card');
  c.tabIndex = -1;
  c.dataset.customers = JSON.stringify([f.recipient_tenant, f.source_tenant]);
  c.dataset.tier = f.tier; c.dataset.severity = JSON.stringify(f.severity);
  customers.add(f.recipient_tenant); customers.add(f.source_tenant);
  const h = el('h2', null);
  h.appendChild(el('span', 'tier-'+f.tier, f.tier.toUpperCase()+' '));
  h.appendChild(el('span', null, f.kind+' '+f.finding_id));
  if (f.verdict) h.appendChild(el('span','verdict',' - '+f.verdict+' by '+f.verdict_by));
  c.appendChild(h);
  c.appendChild(el('div','meta','recipient '+f.recipient_tenant+' ('+f.recipient_request_id+')  <-  source '
    +f.source_tenant+' ('+f.source_request_id+', '+f.source_kind+')'));
  c.appendChild(el('div','meta','severity: '+f.severity.join(', ')));
  const m = el('div','meta');
  for (const [k,v] of f.fields){ m.appendChild(el('b',null,k+': ')); m.appendChild(el('span',null,String(v)+'   ')); }
  c.appendChild(m);
  const cols = el('div','cols');
  const left = el('div');
  left.appendChild(el('div','meta','suspect response ('+f.recipient_chars+' characters)'));
  left.appendChild(textBox(f.recipient_parts));
  const right = el('div');
  right.appendChild(el('div','meta','source '+f.source_kind+' ('+f.source_chars+' characters)'));
  right.appendChild(textBox(f.source_parts));
  cols.appendChild(left); cols.appendChild(right); c.appendChild(cols);
  list.appendChild(c); cards.push(c);
}
function fill(id, values){const s=document.getElementById(id);for(const v of [...values].sort()){const o=el('option',null,v);o.value=v;s.appendChild(o);}}
fill('f-customer', customers); fill('f-tier', new Set(data.findings.map(f=>f.tier)));
fill('f-severity', new Set(data.findings.flatMap(f=>f.severity)));
let current = -1;
function visible(){return cards.filter(c=>!c.classList.contains('hidden'));}
function apply(){
  const cu=document.getElementById('f-customer').value, ti=document.getElementById('f-tier').value, se=document.getElementById('f-severity').value;
  for (const c of cards){
    const ok=(!cu||JSON.parse(c.dataset.customers).includes(cu))&&(!ti||c.dataset.tier===ti)&&(!se||JSON.parse(c.dataset.severity).includes(se));
    c.classList.toggle('hidden',!ok);
  }
  document.getElementById('count').textContent = visible().length+' of '+cards.length+' shown';
  current=-1; for (const c of cards) c.classList.remove('current');
}
function move(step){
  const v=visible(); if(!v.length) return;
  const at=v.indexOf(cards[current]);
  const next=v[Math.max(0,Math.min(v.length-1, at<0 ? 0 : at+step))];
  for (const c of cards) c.classList.remove('current');
  next.classList.add('current'); current=cards.indexOf(next); next.focus(); next.scrollIntoView({block:'nearest'});
}
for (const id of ['f-customer','f-tier','f-severity']) document.getElementById(id).addEventListener('change', apply);
document.addEventListener('keydown', e=>{
  if (e.target && e.target.tagName==='SELECT') return;
  if (e.key==='j'||e.key==='ArrowDown'){move(1);e.preventDefault();}
  else if (e.key==='k'||e.key==='ArrowUp'){move(-1);e.preventDefault();}
  else if (e.key==='/'){document.getElementById('f-customer').focus();e.preventDefault();}
});
apply();
})();
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def window(text: str, spans: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """``text`` cut to the passages ``spans`` (highlighted) and CONTEXT characters around each;
    every cut is a ``{"gap": n}`` part saying how many characters are left out."""
    n = len(text)
    spans = sorted((max(0, min(a, n)), max(0, min(b, n))) for a, b in spans if b > a)
    keep: list[list[int]] = []
    for a, b in spans:
        lo, hi = max(0, a - CONTEXT), min(n, b + CONTEXT)
        if keep and lo <= keep[-1][1]:
            keep[-1][1] = max(keep[-1][1], hi)
        else:
            keep.append([lo, hi])
    if not spans:
        keep = [[0, min(n, 2 * CONTEXT)]]
    parts: list[dict[str, Any]] = []
    pos = 0
    for lo, hi in keep:
        if lo > pos:
            parts.append({"gap": lo - pos})
        # Split [lo, hi) at span edges; a long passage shows its two ends.
        edges = sorted({lo, hi, *(x for a, b in spans for x in (a, b) if lo <= x <= hi)})
        for x, y in zip(edges, edges[1:], strict=False):
            hl = any(a <= x and y <= b for a, b in spans)
            if hl and y - x > MAX_PASSAGE:
                half = MAX_PASSAGE // 2
                parts += [{"t": text[x:x + half], "hl": True}, {"gap": y - x - 2 * half}, {"t": text[y - half:y], "hl": True}]
            elif y > x:
                parts.append({"t": text[x:y], "hl": hl})
        pos = hi
    if pos < n:
        parts.append({"gap": n - pos})
    return parts


def _plain(value: Any) -> Any:
    """A value JSON.parse can read back (NaN and infinities are not JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value if isinstance(value, (str, int, float, bool)) else str(value)


def _script_json(data: Any) -> str:
    """JSON that cannot end the script element holding it."""
    text = json.dumps(data, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _rows(case_dir: Path) -> list[dict[str, Any]]:
    """Findings then review candidates, with the full texts they point into."""
    case = Case(case_dir)
    case.require("evidence", "match")
    con = case.connect()
    out: list[dict[str, Any]] = []
    try:
        for kind, table in (("finding", "evidence"), ("review candidate", "review")):
            if table == "review" and not case.has("review"):
                continue
            cur = con.execute(f"""
                SELECT e.*, r.response_text AS _rtext,
                       CASE WHEN e.source_kind = 'response' THEN s.response_text ELSE s.prompt_text END AS _stext
                FROM {table} e
                LEFT JOIN exchanges r ON r.request_id = e.recipient_request_id
                  AND r.tenant_id IS NOT DISTINCT FROM e.recipient_tenant_id
                LEFT JOIN exchanges s ON s.request_id = e.source_request_id
                  AND s.tenant_id IS NOT DISTINCT FROM e.source_tenant_id
                QUALIFY row_number() OVER (PARTITION BY e.finding_id ORDER BY r.received_at, s.received_at) = 1
                ORDER BY e.finding_id""")
            names = [d[0] for d in cur.description]
            out += [dict(zip(names, rec, strict=True), _kind=kind) for rec in cur.fetchall()]
    finally:
        con.close()
    return out


def build(report_dir: Path, case_dir: Path | None = None) -> Path:
    """Write ``report_dir/review.html`` from the report and its case folder (default: ``report_dir/case``)."""
    report_dir = Path(report_dir)
    if not (report_dir / "manifest.json").is_file():
        raise CaseError("not a report folder (no manifest.json)", file=report_dir,
                        fix="give the folder `forensics report` or `forensics run` wrote (OUT/<case name>)")
    case_dir = Path(case_dir) if case_dir is not None else report_dir / "case"
    if not case_dir.is_dir():
        raise CaseError("the report's case folder is not there (the texts are read from it)", file=case_dir,
                        fix="give --case the case folder the report was made from")
    with chain.report_lock(report_dir):
        entries = chain.read_report_ledger(report_dir, VERDICTS).entries
        resolution = report_resolution(report_dir)
        decided = decisions(entries, resolution)
        by = {target: str(e["analyst"]) for target, e in deciding(entries, resolution).items()}  # who decided it
        classifier = default_classifier()
        findings = []
        for r in _rows(case_dir):
            ps = passages(r)
            rtext, stext = r.pop("_rtext") or "", r.pop("_stext") or ""
            spans_text = "".join(rtext[a:b] for a, b, _, _ in ps) + "".join(stext[c:d] for _, _, c, d in ps)
            fid = str(r["finding_id"])
            findings.append({
                "finding_id": fid, "kind": r["_kind"], "tier": r.get("tier") or "review",
                # Ids as the CSVs and notes show them (csvfile.escape_controls): control, format and bidirectional
                # characters written out, so an id holding U+202E cannot show its end reversed.
                "recipient_tenant": safe.clean_text(r.get("recipient_tenant_id") or ""),
                "recipient_request_id": safe.clean_text(str(r["recipient_request_id"])),
                "source_tenant": safe.clean_text(r.get("source_tenant_id") or ""),
                "source_request_id": safe.clean_text(str(r["source_request_id"])),
                "source_kind": r.get("source_kind") or "prompt",
                "severity": sorted({h.cls for h in classifier.find(spans_text)}) or [NONE],
                "fields": [[k, _plain(r[k])] for k in FIELDS if r.get(k) not in (None, "")],
                "verdict": decided.get(fid, ""), "verdict_by": by.get(fid, ""),
                "recipient_chars": len(rtext), "source_chars": len(stext),
                "recipient_parts": window(rtext, [(a, b) for a, b, _, _ in ps]),
                "source_parts": window(stext, [(c, d) for _, _, c, d in ps]),
            })
        # The folder's own name however it was given ("." names none): the same report, the same bytes.
        title = "Evidence viewer: " + safe.clean_text(Path(os.path.abspath(report_dir)).name, 120)
        csp = (f"default-src 'none'; script-src {_csp_hash(SCRIPT)}; style-src {_csp_hash(CSS)}; "
               "img-src 'none'; base-uri 'none'; form-action 'none'")
        from html import escape

        page = (
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">"
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f"<header><h1>{escape(title)}</h1>"
            "<label>customer <select id=\"f-customer\"><option value=\"\">all</option></select></label>"
            "<label>tier <select id=\"f-tier\"><option value=\"\">all</option></select></label>"
            "<label>severity <select id=\"f-severity\"><option value=\"\">all</option></select></label>"
            "<span id=\"count\"></span> <small>j/k or arrows: next/previous; /: customer filter</small></header>"
            "<main id=\"list\"></main>"
            f"<script type=\"application/json\" id=\"evidence\">{_script_json({'findings': findings})}</script>"
            f"<script>{SCRIPT}</script></body></html>\n"
        )
        safe.write_text(report_dir / PAGE, page)
    return report_dir / PAGE
