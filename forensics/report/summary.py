"""The incident summary for the team: summary.md, summary.html and the plots they show.

Both documents are rendered from one list of sections so they say the same thing. The HTML is
self-contained: inline CSS and inline SVG, no script, no external reference of any kind.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from html import escape
from typing import Any

from forensics import settings
from forensics.artifacts import Json, JsonObject, RequestKey
from forensics.config import CaseConfig, option_name
from forensics.errors import first_few
from forensics.report import plots, safe
from forensics.report.data import CaseData, iso
from forensics.report.notices import Notice, unattributed

Section = tuple[str, list[Any]]  # (title, blocks); a block is str (paragraph), ("table", head, rows), ("plot", id)


class TeamText(str):
    """A table value the team wrote in the case file (the description): shown with its own line
    breaks, where a value from the logs shows a line break as an escape (safe.clean_text)."""


def _section(obj: JsonObject, key: str) -> JsonObject:
    """``obj[key]`` when it is a JSON object, else an empty one: for the free-form sections of a
    stage record (match.json's null), whose keys the artifacts do not type."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _window_days(cfg: CaseConfig, daily: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """Per-day counts over the whole window (days with nothing are shown as zero)."""
    known = {d: (s, c) for d, s, c in daily}
    days = [dt.date.fromisoformat(d) for d in known]
    if cfg.window_start is not None:
        days.append(cfg.window_start.date())
    if cfg.window_end is not None:
        days.append((cfg.window_end - dt.timedelta(microseconds=1)).date())
    if not days:
        return []
    out: list[Any] = []
    d = min(days)
    while d <= max(days) and len(out) < 400:
        s, c = known.get(d.isoformat(), (0, 0))
        out.append((d.isoformat(), s, c))
        d += dt.timedelta(days=1)
    return out


def build_plots(cfg: CaseConfig, data: CaseData, notices: list[Notice]) -> dict[str, str]:
    """The plots as SVG texts, by id."""
    days = _window_days(cfg, data.daily)
    per_day = plots.grouped_bars(
        "Suspect responses and confirmed findings per day (UTC)", "count", [d for d, _, _ in days],
        [("suspect responses", [s for _, s, _ in days]), ("confirmed findings", [c for _, _, c in days])],
        "plot-per-day",
    )
    markers = []
    if isinstance(cfg.real_ceiling_tokens, int):
        markers.append(("real ceiling", cfg.real_ceiling_tokens))
    if isinstance(cfg.advertised_window_tokens, int):
        markers.append(("advertised window", cfg.advertised_window_tokens))
    lengths = plots.length_histogram("Prompt length of the case's requests", data.prompt_tokens, markers, "plot-prompt-length")
    tiers = ("confirmed", "probable", "possible")
    by_tier = plots.grouped_bars(
        "Customers to notify by tier", "customers", list(tiers),
        [(role, [sum(1 for n in notices if n.role == role and n.tier == t) for t in tiers]) for role in ("exposed", "recipient")],
        "plot-tiers",
    )
    return {"plot-per-day": per_day, "plot-prompt-length": lengths, "plot-tiers": by_tier}


def _scalar_rows(values: Mapping[str, Json]) -> list[list[str]]:
    """(key, value) rows of a record's JSON object, by key; nested objects and arrays left out."""
    return [[str(k), str(v)] for k, v in sorted(values.items()) if not isinstance(v, (Mapping, list))]


TIERS = ("confirmed", "probable", "possible")


def _by_tier(values: list[str]) -> str:
    return " / ".join(str(sum(1 for v in values if v == t)) for t in TIERS)


def count_rows(suspects: list[dict[str, Any]], evidence: list[dict[str, Any]], notifications: list[dict[str, Any]],
               tables: dict[str, Any]) -> list[list[Any]]:
    """The summary's Counts table, computed only from the rows of suspects.csv, evidence.csv and
    notifications.csv (as dicts of their columns) and the ingested tables' counts.

    The one source of these numbers: the report stage calls it with the rows it writes, and
    ``forensics verify`` with the rows it reads back, so the summary says what the tables say.
    """
    cross = [e for e in evidence if (e.get("relation") or "cross_tenant") == "cross_tenant"
             and (e.get("recipient_tenant_id") or "") != (e.get("source_tenant_id") or "")]
    # A CSV cell cannot tell no tenant from an empty one: both are "" here, as in the suspects' rows.
    with_evidence = {RequestKey(str(e["recipient_request_id"]), e.get("recipient_tenant_id") or "") for e in cross}
    roles = {r: [str(n.get("tier") or "possible") for n in notifications if n.get("role") == r] for r in ("exposed", "recipient")}
    return [
        ["requests ingested", tables.get("exchanges")],
        ["customers in the logs", tables.get("tenants")],
        ["engine log events", tables.get("engine_events")],
        ["suspect responses", len(suspects)],
        ["suspects with the engine's bug signature", sum(1 for s in suspects if str(s.get("engine_signature")).lower() == "true")],
        ["suspect responses with no cross-tenant finding", sum(
            1 for s in suspects if RequestKey(str(s["request_id"]), s.get("tenant_id") or "") not in with_evidence)],
        ["cross-tenant findings", len(cross)],
        ["cross-tenant findings: confirmed / probable / possible", _by_tier([str(e.get("tier") or "possible") for e in cross])],
        ["same-tenant overlaps (not exposure)", len(evidence) - len(cross)],
        ["customers exposed", len(roles["exposed"])],
        ["customers exposed: confirmed / probable / possible", _by_tier(roles["exposed"])],
        ["customers that received a suspect response", len(roles["recipient"])],
        ["customers that received one: confirmed / probable / possible", _by_tier(roles["recipient"])],
    ]


def _assumed_zones(notes: Any, case_zone: str) -> str:
    """The zone the ingest read times with no zone in, or "several: see the ingest notes" when its notes give more
    than one (a format's own, an [[inputs]] entry's): the row named the case's zone for lines read in another."""
    said = {n.split("they were read as ", 1)[1].split(" ", 1)[0] for n in (notes or [])
            if isinstance(n, str) and "had timestamps with no zone; they were read as " in n}
    if len(said) > 1:
        return "in several zones: see the ingest notes"
    return said.pop() if said else case_zone


def sections(cfg: CaseConfig, data: CaseData, notices: list[Notice]) -> list[Section]:
    """The summary's content, in order."""
    c = data.counts
    scope = [
        ["case", cfg.name],
        ["models", ", ".join(cfg.models) or "(all)"],
        ["window", f"{iso(cfg.window_start) or '(open)'} to {iso(cfg.window_end) or '(open)'} (end exclusive)"],
        ["real ceiling (tokens)", f"{cfg.real_ceiling_tokens} ({cfg.source('real_ceiling_tokens')})"],
        ["advertised window (tokens)", f"{cfg.advertised_window_tokens} ({cfg.source('advertised_window_tokens')})"],
        ["logs cover", f"{c['first_received'] or '?'} to {c['last_received'] or '?'}"],
    ]
    if cfg.description:
        scope.append(["description", TeamText(safe.shorten(cfg.description, 500))])
    given = sorted({option_name(k) for k, src in cfg.sources.items() if src == "option" and k != "options"}
                   | {option_name(k) for name, table in cfg.options.items() for k in table if settings.get(name, k).result}
                   # a [match] value given to `forensics match` (the stages run one by one): match.json records it
                   | {option_name(k) for k, src in data.match.parameter_sources.items() if src == "option"})
    if given:  # over the case file's values, for this run (the manifest records each as an option's)
        scope.append(["given as options", ", ".join(given)])
    counts = count_rows(
        [{"request_id": s.request_id, "tenant_id": s.tenant_id, "engine_signature": str(s.engine_signature)} for s in data.suspects],
        [f.evidence.to_row() for f in data.findings], [{"role": n.role, "tier": n.tier} for n in notices], c)
    sev: dict[str, int] = {}
    for n in notices:
        if n.role == "exposed":
            sev[n.highest_severity] = sev.get(n.highest_severity, 0) + 1
    ctl = data.match.control
    fp, control_n, control_f = ctl.false_positive_rate, ctl.size, ctl.responses_with_findings
    method = [
        "Suspect responses come from the scan stage's query files (prompt above the real ceiling inside the window "
        "on the case's models, or the engine's own signature of the bug). Each suspect response is then compared "
        "with every other customer's earlier prompts and responses: shared k-grams are found by a hash join, "
        "verified by alignment, and discounted when many customers sent the same text.",
    ]
    method_tables: list[Any] = []
    for stage, params in (("scan", data.scan.parameters.to_json()), ("match", data.match.parameters)):
        rows = _scalar_rows(params)
        if rows:
            method_tables.append(("table", [f"{stage} parameter", "value"], rows))
    method_tables.append(("table", ["what the matcher searched", "value"],
                          [[k, safe.shorten(v, 300)] for k, v in _scalar_rows(data.match.searched.to_json())]))
    control = [
        f"Control sample: the same matcher run over {control_n} "
        f"non-suspect responses found cross-tenant passages in {control_f} of them; "
        f"empirical false-positive rate: {fp if fp is not None else 'not recorded by the match stage'}."
    ]
    null = data.match.null  # free-form: its keys are documented in forensics/match/findings.py
    evidence_model: list[Any] = []
    searches = _section(null, "searches")
    if null:
        evidence_model.append(
            f"Each finding carries expected_by_chance (E): how many matches at least as strong a search of its size "
            f"would produce among unrelated texts, estimated from this case's own null ("
            f"{searches.get('control_responses', null.get('control_responses'))} control responses, and "
            f"{searches.get('suspects_against_later_texts', 0)} suspect responses against texts that arrived after "
            f"them, searched the same way: {null.get('chance_matches')} chance matches). Tiers come from "
            f"expected_by_chance_with_mechanism, the E-value of E times the decode-node evidence's factor "
            f"({data.match.tiering}; see match.json null)."
            + (f" The null was too sparse to fit: {null['fallback']}." if null.get("fallback") else ""))
        evidence_model.append(f"Decode-node evidence: {null.get('decode_node_evidence', 'not recorded')}.")
        recent = _section(null, "recent_occupants")
        if recent and recent.get("ran") and recent.get("scope") == "models":
            evidence_model.append(
                f"Recent-occupant test, with gateway logs only: a source among the last {recent.get('window_records')} "
                f"records of the case's models the service received before the suspect, on any node (placed by the "
                f"{recent.get('confirmed_findings_used')} findings the text alone confirms; records_since_source_on_model) "
                f"also counts: {recent.get('combined')}.")
        elif recent:
            evidence_model.append(
                f"Recent-occupant test: a source among the last {recent.get('window_records')} records on the "
                f"suspect's decode node (placed by the {recent.get('confirmed_findings_used')} findings the product "
                f"test confirms there) also counts: {recent.get('combined')}."
                if recent.get("ran") else f"Recent-occupant test: not run ({recent.get('why')}).")
        calib = _section(null, "calibration")
        crow = [[p.get("evalue_at_most"), p.get("expected"), p.get("observed")] for p in calib.get("points", [])
                if isinstance(p, dict)]
        if crow:
            evidence_model.append(("table", ["E at most", "chance matches expected on the null", "observed"], crow))
        mcal = _section(null, "calibration_of_controls_with_mechanism")
        mrow = [[p.get("evalue_at_most"), p.get("expected"), p.get("observed"), p.get("observed_with_mechanism")]
                for p in mcal.get("points", []) if isinstance(p, dict) and "observed_with_mechanism" in p]
        if mrow:
            evidence_model.append(
                f"The control responses alone ({mcal.get('responses')}), each chance match scored with its own "
                "decode-node evidence as a finding would be:")
            evidence_model.append(("table", ["E at most", "chance matches expected", "observed (E)",
                                             "observed (E with mechanism)"], mrow))
        e3 = _section(_section(null, "rules"), "E3")
        if e3:
            named = sum(1 for f in data.findings if (f.evidence.tier_rule or "").startswith("E3"))
            evidence_model.append(
                f"E3: a suspect shown decoding from stale pages (the engine signature, or usage counting the "
                f"one-token placeholder) holds some earlier request's text; when "
                f"none of its candidates reaches a tier, its strongest one is probable up to "
                f"{data.match.parameters.get('unexplained_evalue')} ({named} finding(s) here). On the control "
                f"responses, each treated as such a suspect, it would have named {e3.get('control_responses_with_match')} "
                f"(expected {e3.get('expected_false_positives')}).")
        evidence_model.append(
            f"Candidates that put nobody on the list are in review.csv ({data.match.findings.review}), each with why.")
    on_damaged = sorted(data.match.damage.findings_on_damaged_data)
    if on_damaged:
        limitations_damage = [
            f"{len(on_damaged)} finding(s) rest on a record from damaged input (a truncated file, a quarantined "
            "neighbouring line, or only a truncated spend-log copy; evidence.csv recipient_damage / source_damage): "
            + ", ".join(safe.shorten(f, 40) for f in on_damaged) + "."]
    else:
        limitations_damage = []
    gaps = [
        ["quarantined input lines", c["quarantined"]],
        ["orphan records (request or response half missing)", c["orphans"]],
        ["prompt token counts only estimated", c["estimated_tokens"]],
        ["prompt token counts unknown", c["unknown_tokens"]],
        ["reported token counts not trusted (impossible for their text)", c["implausible_reported"]],
        ["prompts the log kept truncated (head and tail only)", c["truncated_prompts"]],
        ["borderline suspects (estimate straddles the ceiling)", sum(1 for s in data.suspects if s.borderline)],
        # Input lines count every copy; a gateway record merged from a zone-less spend-log copy and a
        # zoned callback keeps the callback's zone, so the three rows differ and each says what it counts.
        [f"input lines whose time zone was assumed ({_assumed_zones(data.ingest.notes, data.ingest.timezone or cfg.timezone)})",
         data.ingest.zone_assumed_rows],
        ["gateway records whose time zone was assumed (after merging copies)", c["zone_assumed"]],
        ["engine log events whose time zone was assumed", c.get("engine_zone_assumed", "not recorded")],
    ]
    anomaly_rows = [[safe.shorten(a.title, 200), a.rows] for _, a in sorted(data.scan.anomalies.items())]
    warnings = [safe.shorten(w, 500) for w in data.scan.warnings]
    notes = [safe.shorten(n, 500) for n in data.ingest.notes]
    limitations = [
        "Only text that was logged can be matched: truncated prompts are matched on their head and tail only, and a "
        "leak of text that no log kept cannot be found. A suspect response with no verified passage is still "
        "reported (tier possible): its answer was generated from corrupted context.",
        "Token counts that are estimates carry an error band; suspects whose band straddles the ceiling are "
        "marked borderline and should be reviewed by hand.",
    ] + limitations_damage
    from forensics.match.findings import own_copies_said  # (the words the match stage's warning uses)

    own_copies = own_copies_said(data.match.null)
    if own_copies:
        limitations.append(own_copies + ".")
    nobody = unattributed(data)
    if nobody:
        limitations.append(
            f"{len(nobody)} suspect response(s) or leaked texts name no customer (a response that joined no request, "
            "such as an answer to a request id two customers sent): they were searched like any other, but no notice "
            "can go to their customer until other logs name it. Request ids: "
            + first_few([safe.shorten(r, 80) for r in nobody], 20) + ".")
    # notifications.csv joins a row's request ids with ";": an id that holds one cannot be told apart there.
    split = sorted({n.packet for n in notices if any(";" in r for r in n.request_ids)})
    if split:
        limitations.append(
            f"{len(split)} notification row(s) list a request id that contains ';', the separator of the request_ids "
            "cell of notifications.csv, so that cell is ambiguous for them; their packets' notice.json lists the ids "
            "one by one: " + ", ".join(safe.shorten(p, 120) for p in split) + ".")
    out: list[Section] = [
        ("Scope and parameters", [("table", ["item", "value"], scope)]),
        ("Counts", [("table", ["what", "count"], counts), ("plot", "plot-per-day"), ("plot", "plot-tiers")]),
        ("Severity of exposed content", [("table", ["highest severity", "customers"], [[k, v] for k, v in sorted(sev.items())])
                                         if sev else "No exposed customer."]),
        ("Method and thresholds", method + method_tables + [("plot", "plot-prompt-length")]),
        ("Control sample", control),
        ("Evidence model", evidence_model or ["The match stage recorded no null model (an older version)."]),
        ("Data gaps", [("table", ["gap", "count"], gaps)]
         + ([("table", ["quarantine reason", "lines"], [[safe.shorten(r, 120), n] for r, n in data.quarantine_reasons])]
            if data.quarantine_reasons else [])),
        ("Engine anomalies", [("table", ["anomaly (scan stage)", "rows"], anomaly_rows)] if anomaly_rows
         else ["The scan stage recorded no engine anomaly counts."]),
        ("Limitations", limitations + [f"Scan warning: {w}" for w in warnings] + [f"Ingest note: {n}" for n in notes]),
        ("Customers to notify", [("table", ["customer", "role", "tier", "requests", "highest severity", "packet"],
                                  [[safe.shorten(n.tenant_id, 80), n.role, n.tier, len(n.request_ids), n.highest_severity, n.packet]
                                   for n in notices]) if notices else "Nobody: no suspect response was found."]),
    ]
    return out


def _md_cell(value: Any) -> str:
    # A table cell holds no line break: the team's own ones become <br>; its addresses stay links.
    if isinstance(value, TeamText):
        return "<br>".join(safe.md_escape(line, links=True) for line in safe.text_lines(value.strip()))
    return safe.md_escape(str(value))


def _html_cell(value: Any) -> str:
    if isinstance(value, TeamText):
        return "<br>".join(escape(safe.clean_text(line)) for line in safe.text_lines(value.strip()))
    return escape(safe.clean_text(str(value)))


def render_md(title: str, secs: list[Section]) -> str:
    """Markdown with tables; plots are linked SVG files in plots/."""
    lines = [f"# {safe.md_escape(title)}", ""]
    for name, blocks in secs:
        lines += [f"## {name}", ""]
        for b in blocks:
            if isinstance(b, str):
                lines += [safe.md_escape(b, None, paragraph=True), ""]
            elif b[0] == "table":
                lines.append("| " + " | ".join(b[1]) + " |")
                lines.append("|" + "---|" * len(b[1]))
                for row in b[2]:
                    lines.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
                lines.append("")
            elif b[0] == "plot":
                lines += [f"![{b[1]}](plots/{b[1]}.svg)", ""]
    return "\n".join(lines)


CSS = """
body{font-family:sans-serif;max-width:960px;margin:2em auto;color:#222;line-height:1.4}
table{border-collapse:collapse;margin:0.5em 0 1em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}
th{background:#f3f3f3}figure{margin:1em 0}svg.plot{max-width:100%;height:auto;border:1px solid #eee}
"""


def render_html(title: str, secs: list[Section], svgs: dict[str, str]) -> str:
    """One self-contained HTML page: inline CSS and SVG, nothing fetched when it is opened."""
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No network even if a later edit adds a reference: the page forbids every fetch.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{escape(safe.clean_text(title))}</title><style>{CSS}</style></head><body>",
        f"<h1>{escape(safe.clean_text(title))}</h1>",
    ]
    for name, blocks in secs:
        out.append(f"<h2>{escape(name)}</h2>")
        for b in blocks:
            if isinstance(b, str):
                out.append(f"<p>{escape(safe.clean_text(b))}</p>")
            elif b[0] == "table":
                out.append("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in b[1]) + "</tr>")
                for row in b[2]:
                    out.append("<tr>" + "".join(f"<td>{_html_cell(v)}</td>" for v in row) + "</tr>")
                out.append("</table>")
            elif b[0] == "plot":
                out.append(f"<figure>{svgs[b[1]]}</figure>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
