"""One request identity everywhere: (request_id, tenant_id).

Two customers may send the same request id (client-supplied ids, two gateways). Every stage must
keep them apart: the scan flags the right one and does not hand the engine's record of one to
both, the matcher searches the right text and never takes one customer's prompt for the other's
own, the report tells the right customer, and evaluate scores both halves of the key.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from match_helpers import config, exchange, make_case

from forensics.match import match

SYLL = ["ka", "ro", "mi", "ten", "val", "dor", "shi", "qua", "lex", "bru", "po", "zan", "fe", "gil", "mur", "sta"]


def text(seed: int, n: int) -> str:
    """``n`` made-up words no other text of these tests shares by accident."""
    rng = np.random.default_rng(seed)
    return " ".join("".join(rng.choice(SYLL, size=int(rng.integers(3, 5)))) for _ in range(n))


def _keys(findings: list[dict[str, Any]]) -> list[tuple[str, str, str, str, str]]:
    return sorted((f["recipient_request_id"], f["recipient_tenant_id"], f["source_request_id"], f["source_tenant_id"],
                   f["relation"]) for f in findings)


# ------------------------------------------------------------------------------------------
# match
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suspect_first", [True, False])
def test_match_searches_the_suspects_own_text_and_the_other_tenants_prompt_is_a_source(
        tmp_path: Path, suspect_first: bool) -> None:
    secret = text(1, 40)
    acme = exchange("req-1", "acme", 0, prompt=f"please keep this: {secret}", response="Noted.")
    bolt = exchange("req-1", "bolt", 5, prompt="a short question", response=f"Here you are. {secret} Bye.")
    rows = [bolt, acme] if suspect_first else [acme, bolt]  # whichever the file holds first
    result = match(make_case(tmp_path / "case", rows, [("req-1", "bolt")]), config())
    # bolt's answer was searched (not acme's "Noted."), and acme's prompt, though it carries the
    # same request id, is not bolt's own prompt: the passage is acme's, exposed to bolt.
    assert _keys(result.findings) == [("req-1", "bolt", "req-1", "acme", "cross_tenant")]
    f = result.findings[0]
    assert f["tier"] == "confirmed"
    assert bolt["response_text"][f["recipient_start"]:f["recipient_end"]] == secret
    assert result.report["searched"]["suspects_searched"] == 1


def test_match_a_suspect_whose_id_another_tenant_reuses_still_discounts_its_own_prompt(tmp_path: Path) -> None:
    own = text(2, 40)
    rows = [
        exchange("req-1", "acme", 0, prompt=f"translate: {own}", response=f"Done: {own}"),  # quotes its own prompt
        exchange("req-1", "bolt", 1, prompt="unrelated question", response="unrelated answer"),
    ]
    result = match(make_case(tmp_path / "case", rows, [("req-1", "acme")]), config())
    assert result.findings == []


def test_match_two_suspects_sharing_an_id_get_their_own_findings_with_distinct_ids(tmp_path: Path) -> None:
    secret = text(3, 40)
    answer = f"Look: {secret} done."
    rows = [
        exchange("src-9", "cato", 0, prompt=f"confidential: {secret}"),
        exchange("req-1", "acme", 5, prompt="q1", response=answer),
        exchange("req-1", "bolt", 6, prompt="q2", response=answer),  # same id, same answer, same offsets
    ]
    result = match(make_case(tmp_path / "case", rows, [("req-1", "acme"), ("req-1", "bolt")]), config())
    assert _keys(result.findings) == [("req-1", "acme", "src-9", "cato", "cross_tenant"),
                                      ("req-1", "bolt", "src-9", "cato", "cross_tenant")]
    assert len({f["finding_id"] for f in result.findings}) == 2
    assert result.report["findings"]["suspects_with_cross_tenant_evidence"] == 2
    rows_csv = list(csv.DictReader(io.StringIO((tmp_path / "case" / "evidence.csv").read_text(encoding="utf-8"))))
    assert [(r["recipient_request_id"], r["recipient_tenant_id"]) for r in rows_csv] == [("req-1", "acme"), ("req-1", "bolt")]


def test_evidence_is_sorted_by_recipient_request_then_source_request_when_two_customers_share_an_id(
        tmp_path: Path) -> None:
    """outputs.md sorts evidence.csv by recipient_request_id, source_request_id: the recipient's tenant came between
    them, so the rows of an id two customers sent were out of that order (a review)."""
    first, second = text(6, 40), text(7, 40)
    rows = [
        exchange("src-a", "cato", 0, prompt=f"confidential: {first}"),
        exchange("src-b", "dana", 1, prompt=f"confidential: {second}"),
        exchange("req-1", "acme", 5, prompt="q1", response=f"Look: {second} done."),
        exchange("req-1", "bolt", 6, prompt="q2", response=f"Look: {first} done."),
    ]
    result = match(make_case(tmp_path / "case", rows, [("req-1", "acme"), ("req-1", "bolt")]), config())
    rows_csv = list(csv.DictReader(io.StringIO((tmp_path / "case" / "evidence.csv").read_text(encoding="utf-8"))))
    assert [(r["recipient_request_id"], r["source_request_id"], r["recipient_tenant_id"]) for r in rows_csv] == [
        ("req-1", "src-a", "bolt"), ("req-1", "src-b", "acme")]
    assert len(result.findings) == 2
    # The report's copy too, sorted again after the analysts' verdicts (here the match's rows, in the old order).
    from forensics.report import _decided_stage_csvs

    report = tmp_path / "report"
    report.mkdir()
    old_order = (tmp_path / "case" / "evidence.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    swapped = "".join(old_order[:1] + old_order[:0:-1]).encode("utf-8")
    shown = list(csv.DictReader(io.StringIO(_decided_stage_csvs(report, swapped, {}).decode("utf-8"))))
    assert [(r["recipient_request_id"], r["source_request_id"]) for r in shown] == [("req-1", "src-a"), ("req-1", "src-b")]


def test_match_sources_sharing_an_id_are_kept_apart(tmp_path: Path) -> None:
    a, b = text(4, 30), text(5, 30)
    rows = [
        exchange("src-1", "acme", 0, prompt=f"mine: {a}"),
        exchange("src-1", "cato", 1, prompt=f"ours: {b}"),
        exchange("req-1", "bolt", 5, prompt="q", response=f"First {a} then {b} end."),
    ]
    result = match(make_case(tmp_path / "case", rows, [("req-1", "bolt")]), config())
    assert _keys(result.findings) == [("req-1", "bolt", "src-1", "acme", "cross_tenant"),
                                      ("req-1", "bolt", "src-1", "cato", "cross_tenant")]
    assert len({f["finding_id"] for f in result.findings}) == 2


def test_match_control_sample_with_a_shared_id_does_not_crash_and_keeps_both(tmp_path: Path) -> None:
    rows = [exchange("dup", tenant, i, prompt=text(10 + i, 20), response=text(20 + i, 20))
            for i, tenant in enumerate(["cato", "dave", "erin"])]
    rows.append(exchange("req-1", "bolt", 9, prompt="q", response=text(30, 20)))
    case = make_case(tmp_path / "case", rows, [("req-1", "bolt")])
    result = match(case, config(control_size=10))
    assert result.report["control"]["size"] == 3
    # A smaller sample is the same choice whatever order the rows come in.
    one = match(case, config(control_size=2)).report["control"]
    make_case(tmp_path / "rev", rows[::-1], [("req-1", "bolt")])
    two = match(tmp_path / "rev", config(control_size=2)).report["control"]
    assert one == two and one["size"] == 2


# ------------------------------------------------------------------------------------------
# scan
# ------------------------------------------------------------------------------------------


def test_scan_flags_the_right_tenant_and_attributes_a_shared_engine_id_to_neither(tmp_path: Path) -> None:
    from query_cases.build import CEILING, MODEL, WINDOW, signature_events, startup, write_case
    from query_cases.build import exchange as qx

    from forensics.config import config_from_mapping
    from forensics.scan import scan

    root = write_case(tmp_path / "case", [
        # Two customers sent the id "client-7": acme's prompt overflowed the pool, bolt's was small.
        qx("client-7", tenant_id="acme", prompt_tokens=812345, prompt_tokens_source="engine", reported_prompt_tokens=1),
        qx("client-7", tenant_id="bolt", prompt_tokens=900, received_at="2026-08-29T10:00:02Z"),
        # An id only one exchange carries: its engine signature still counts.
        qx("r-sig", tenant_id="globex", prompt_tokens=1, prompt_tokens_source="reported", reported_prompt_tokens=1),
    ], [startup("prefill-0"), startup("decode-0")] + signature_events("client-7", 101) + signature_events("r-sig", 102))
    cfg = config_from_mapping({"name": "t", "model": MODEL, "window_start": WINDOW[0], "window_end": WINDOW[1],
                               "real_ceiling_tokens": CEILING}, base=Path("."))
    result = scan(root, cfg)
    rows = list(csv.DictReader(io.StringIO((root / "suspects.csv").read_text(encoding="utf-8"))))
    assert [(r["request_id"], r["tenant_id"], r["reasons"], r["engine_signature"]) for r in rows] == [
        ("client-7", "acme", "above_ceiling", "false"),  # by its own prompt size; the engine's trace is anybody's
        ("r-sig", "globex", "engine_signature", "true"),
    ]
    record = json.loads((root / "scan.json").read_text(encoding="utf-8"))
    shared = record["anomalies"]["engine_rid_shared"]
    assert shared["rows"] == 2
    assert [(r["request_id"], r["tenant_id"], r["engine_signature"]) for r in shared["listed"]] == [
        ("client-7", "acme", True), ("client-7", "bolt", True)]
    (warning,) = [w for w in record["warnings"] if "engine_rid_shared" in w]
    assert warning.startswith("1 engine request id(s) of exchanges in the window are each carried by several exchanges (2 of them in the window")
    assert "1 of those ids carry the engine's bug signature" in warning
    assert result.engine_signature == 1


# ------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------

ACME_PROMPT = "<|user|>\nAcme asks about the quarterly ledger of the northern depot, nothing secret."
INITECH_SECRET = "Initech payroll run for October: transfer ninety thousand to the Lisbon escrow account"
UMBRELLA_ANSWER = "Umbrella compound batch seven sits in freezer unit nine behind the blue door"
GLOBEX_ANSWER = f"Here is your summary. {INITECH_SECRET}. Also: {UMBRELLA_ANSWER}."


def _report_case(tmp: Path) -> tuple[Path, Any]:
    """Four customers all sent request id "r-1": acme's and globex's are suspects; globex's answer
    holds initech's prompt and umbrella's answer; acme's holds nothing found."""
    import pyarrow as pa
    from test_report_case import exchange as rx
    from test_report_case import make_case as report_case
    from test_report_case import ts

    from forensics import schema
    from forensics.case import write_table

    case, cfg, _ = report_case(tmp)
    initech_prompt = f"<|user|>\nPlease check: {INITECH_SECRET} before Friday."
    rows = [
        rx("r-1", "initech", initech_prompt, "Checked.", ts(28, 8), 900),
        rx("r-1", "umbrella", "<|user|>\nWhere is batch seven?", UMBRELLA_ANSWER, ts(28, 9), 900),
        rx("r-1", "acme", ACME_PROMPT, "The ledger shows nothing unusual.", ts(28, 10), 700_001),
        rx("r-1", "globex", "<|user|>\n" + "ship " * 50, GLOBEX_ANSWER, ts(28, 11), 812_345),
    ]
    write_table(case / "exchanges.parquet", pa.Table.from_pylist(rows, schema=schema.EXCHANGES), schema.EXCHANGES)
    suspects = [{"request_id": r["request_id"], "tenant_id": r["tenant_id"], "model": "glm-5.3",
                 "received_at": r["received_at"], "completed_at": r["completed_at"], "prompt_tokens": r["prompt_tokens"],
                 "prompt_tokens_source": "engine", "reasons": "above_ceiling", "borderline": False,
                 "engine_signature": False} for r in rows if r["prompt_tokens"] > 681_280]
    write_table(case / "suspects.parquet", pa.Table.from_pylist(suspects, schema=schema.SUSPECTS), schema.SUSPECTS)
    common = {"recipient_request_id": "r-1", "recipient_tenant_id": "globex", "source_request_id": "r-1",
              "relation": "cross_tenant", "tier": "confirmed", "tier_rule": "R1", "score": 100.0, "matched_tokens": 14,
              "longest_run": 14, "rarity": 1.0, "informative_tokens": 14, "regions": 1, "other_source_requests": 0}
    g0, u0 = GLOBEX_ANSWER.index(INITECH_SECRET), GLOBEX_ANSWER.index(UMBRELLA_ANSWER)
    evidence = [
        common | {"finding_id": "f-initech", "source_tenant_id": "initech", "source_kind": "prompt",
                  "recipient_start": g0, "recipient_end": g0 + len(INITECH_SECRET),
                  "source_start": initech_prompt.index(INITECH_SECRET),
                  "source_end": initech_prompt.index(INITECH_SECRET) + len(INITECH_SECRET)},
        common | {"finding_id": "f-umbrella", "source_tenant_id": "umbrella", "source_kind": "response",
                  "recipient_start": u0, "recipient_end": u0 + len(UMBRELLA_ANSWER),
                  "source_start": 0, "source_end": len(UMBRELLA_ANSWER)},
    ]
    write_table(case / "evidence.parquet", pa.Table.from_pylist(evidence, schema=schema.EVIDENCE), schema.EVIDENCE)
    for name in ("suspects.csv", "evidence.csv"):
        (case / name).unlink(missing_ok=True)
    return case, cfg


def _packet(rd: Path, tenant: str) -> dict[str, Any]:
    (folder,) = [p for p in (rd / "packets").iterdir() if p.name.startswith(tenant + "-")]
    return json.loads((folder / "notice.json").read_text(encoding="utf-8"))


def test_report_tells_each_customer_only_about_its_own_request_with_that_id(tmp_path: Path) -> None:
    from forensics.report import report

    case, cfg = _report_case(tmp_path)
    result = report(case, cfg, tmp_path / "out")
    rd = result.report_dir
    rows = {(r["tenant_id"], r["role"]): r for r in
            csv.DictReader(io.StringIO((rd / "notifications.csv").read_text(encoding="utf-8")))}
    assert sorted(rows) == [("acme", "recipient"), ("globex", "recipient"), ("initech", "exposed"),
                            ("umbrella", "exposed")]
    # acme's r-1 has no finding: globex's findings on its own r-1 must not make acme "confirmed".
    assert (rows[("acme", "recipient")]["tier"], rows[("acme", "recipient")]["n_findings"]) == ("possible", "0")
    assert (rows[("globex", "recipient")]["tier"], rows[("globex", "recipient")]["n_findings"]) == ("confirmed", "2")
    assert all(r["request_ids"] == "r-1" for r in rows.values())
    acme = _packet(rd, "acme")["recipient"]["requests"]
    assert [(r["request_id"], r["tier"], r["foreign_passages"]) for r in acme] == [("r-1", "possible", [])]
    globex = _packet(rd, "globex")["recipient"]["requests"]
    assert [(r["request_id"], r["tier"], len(r["foreign_passages"])) for r in globex] == [("r-1", "confirmed", 2)]
    # umbrella's r-1 answer is no suspect (acme's and globex's r-1 are): its passage is shown to it, masked.
    (spans,) = [r["spans"] for r in _packet(rd, "umbrella")["exposed"]["requests"]]
    assert spans[0]["part"] == "response" and spans[0]["preview"] == UMBRELLA_ANSWER
    summary = (rd / "summary.md").read_text(encoding="utf-8")
    assert "| suspect responses with no cross-tenant finding | 1 |" in summary
    # Every recipient row rests on a suspect or a finding of that very customer.
    suspects = {(r["request_id"], r["tenant_id"]) for r in
                csv.DictReader(io.StringIO((rd / "suspects.csv").read_text(encoding="utf-8")))}
    evidence = list(csv.DictReader(io.StringIO((rd / "evidence.csv").read_text(encoding="utf-8"))))
    for (tenant, role), r in rows.items():
        if role == "recipient":
            assert all((rid, tenant) in suspects or any(
                (e["recipient_request_id"], e["recipient_tenant_id"]) == (rid, tenant) for e in evidence)
                for rid in r["request_ids"].split(";"))


# ------------------------------------------------------------------------------------------
# evaluate
# ------------------------------------------------------------------------------------------


def _truth(path: Path) -> Path:
    """A minimal truth: acme's "r-1" received cato's text; bolt sent an "r-1" of its own."""
    truth = {
        "schema": "forensics-sim-truth/1",
        "suspects": [{"request_id": "r-1", "tenant_id": "acme"}],
        "scan_negatives": [{"request_id": "r-1", "tenant_id": "bolt", "kind": "just_below_ceiling"}],
        "fragments": [{"is_leak": True, "fragment_id": "F1", "recipient_request_id": "r-1", "recipient_tenant_id": "acme",
                       "source_request_id": "s-1", "source_tenant_id": "cato", "source_kind": "prompt", "tokens": 20,
                       "damage": [], "damage_fraction": 0.0, "recipient_start": 0, "recipient_end": 50,
                       "source_start": 0, "source_end": 50}],
        "hard_negatives": [],
        "exposed": ["cato"],
        "recipients": ["acme"],
        "quarantine": {"expected": 0},
    }
    path.write_text(json.dumps(truth), encoding="utf-8")
    return path


def _write_report(folder: Path, suspect_tenant: str, recipient_tenant: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "suspects.csv").write_text(
        "request_id,tenant_id,model,received_at,prompt_tokens,prompt_tokens_source,reasons\r\n"
        f"r-1,{suspect_tenant},glm-5.3,2026-08-29T10:00:00Z,9000,engine,above_ceiling\r\n", encoding="utf-8")
    (folder / "evidence.csv").write_text(
        "finding_id,recipient_request_id,recipient_tenant_id,source_request_id,source_tenant_id,source_kind,tier,score,"
        "matched_tokens,recipient_start,recipient_end,source_start,source_end,rarity\r\n"
        f"f-1,r-1,{recipient_tenant},s-1,cato,prompt,confirmed,100.00,20,0,50,0,50,1.0000\r\n", encoding="utf-8")
    return folder


def test_evaluate_scores_the_request_of_the_right_customer(tmp_path: Path) -> None:
    from forensics.lab.evaluate import evaluate

    truth = _truth(tmp_path / "truth.json")
    right = evaluate(truth, _write_report(tmp_path / "right", "acme", "acme")).to_json()
    assert (right["suspects"]["precision"], right["findings"]["precision"], right["findings"]["recall"]) == (1.0, 1.0, 1.0)
    # bolt's "r-1" is not the suspect and did not receive cato's text: wrong, though the id matches.
    wrong = evaluate(truth, _write_report(tmp_path / "wrong", "bolt", "bolt")).to_json()
    assert (wrong["suspects"]["precision"], wrong["suspects"]["recall"]) == (0.0, 0.0)
    assert wrong["suspects"]["false_positives_by_kind"] == {"just_below_ceiling": 1}
    assert (wrong["findings"]["precision"], wrong["findings"]["recall"]) == (0.0, 0.0)
    assert wrong["findings"]["fragments_located"]["located"] == 0
    assert wrong["findings"]["false_positives_by_kind"] == {"not_a_suspect": 1}


# ------------------------------------------------------------------------------------------
# the whole pipeline
# ------------------------------------------------------------------------------------------


def test_pipeline_keeps_two_customers_with_one_request_id_apart(tmp_path: Path) -> None:
    """acme and globex both sent "r-1": acme's was an ordinary request holding a secret, globex's an
    over-ceiling prompt whose answer leaked acme's secret. Ingest keeps both rows, the scan flags
    globex's, the matcher finds acme's prompt in globex's answer, the report tells each its part."""
    import pyarrow.parquet as pq
    from test_run import SECRET, write_logs

    from forensics import api

    logs = write_logs(tmp_path / "logs")
    spend = logs / "gateway" / "spend.jsonl"
    lines = spend.read_text(encoding="utf-8").splitlines()
    # The leaking request (globex's r-3) now carries acme's request id, as a client-supplied id might.
    spend.write_text("\n".join(line.replace('"r-3"', '"r-1"') for line in lines) + "\n", encoding="utf-8")
    result = api.run(logs, tmp_path / "out")
    case = result.report.report_dir / "case"
    rows = pq.read_table(case / "exchanges.parquet", columns=["request_id", "tenant_id"]).to_pylist()
    assert sorted((r["request_id"], r["tenant_id"]) for r in rows) == [("r-1", "acme"), ("r-1", "globex"),
                                                                       ("r-2", "globex")]
    rd = result.report.report_dir
    suspects = list(csv.DictReader(io.StringIO((rd / "suspects.csv").read_text(encoding="utf-8"))))
    assert [(r["request_id"], r["tenant_id"]) for r in suspects] == [("r-1", "globex")]
    evidence = [r for r in csv.DictReader(io.StringIO((rd / "evidence.csv").read_text(encoding="utf-8")))
                if r["source_tenant_id"] != r["recipient_tenant_id"]]
    assert [(r["recipient_request_id"], r["recipient_tenant_id"], r["source_request_id"], r["source_tenant_id"],
             r["source_kind"], r["tier"]) for r in evidence] == [("r-1", "globex", "r-1", "acme", "prompt", "confirmed")]
    notices = list(csv.DictReader(io.StringIO((rd / "notifications.csv").read_text(encoding="utf-8"))))
    assert [(n["tenant_id"], n["role"], n["tier"], n["request_ids"]) for n in notices] == [
        ("acme", "exposed", "confirmed", "r-1"), ("globex", "recipient", "confirmed", "r-1")]
    (exposed,) = _packet(rd, "acme")["exposed"]["requests"]
    assert exposed["request_id"] == "r-1" and SECRET[:40] in exposed["spans"][0]["preview"]
    assert "recipient" not in _packet(rd, "acme")
    assert api.verify(rd).ok


def test_ingest_split_logs_keep_both_customers_requests_and_give_a_shared_response_to_neither(tmp_path: Path) -> None:
    """Two customers send request id r-1 through a gateway that logs requests and responses apart.
    A request half names its tenant: both are kept (neither is a "duplicate" of the other). The
    response names none, so it cannot say whose answer it is: it is kept unjoined, not given to one."""
    import pyarrow.parquet as pq

    from forensics import api

    logs = tmp_path / "logs"
    logs.mkdir()
    requests = [json.dumps({"request_id": rid, "timestamp": "2026-08-30T03:12:09Z", "tenant_id": tenant,
                            "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": f"from {tenant}"}]}})
                for rid, tenant in (("r-1", "team-a"), ("r-1", "team-b"), ("r-2", "team-a"))]
    responses = [json.dumps({"request_id": rid, "timestamp": "2026-08-30T03:12:19Z", "status_code": 200,
                             "body": {"choices": [{"index": 0, "message": {"content": f"answer {rid}"}, "finish_reason": "stop"}]}})
                 for rid in ("r-1", "r-2")]
    (logs / "requests.jsonl").write_text("\n".join(requests) + "\n")
    (logs / "responses.jsonl").write_text("\n".join(responses) + "\n")
    result = api.ingest(tmp_path / "case", [logs], fmt="openai-split")

    rows = [(r["request_id"], r["tenant_id"], r["orphan"], r["response_text"])
            for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()]
    assert rows == [("r-1", "team-a", "request_only", None), ("r-1", "team-b", "request_only", None),
                    ("r-2", "team-a", None, "answer r-2"), ("r-1", None, "response_only", "answer r-1")]
    assert result.manifest.duplicate_requests == 0 and result.manifest.request_id_collisions == 1
    assert any("given to neither" in n for n in result.manifest.notes)
    assert not any("had different answers" in n for n in result.manifest.notes)  # one answer to r-1
    # A response names no tenant by its nature: not a request that lacks one (set tenant_field would not help).
    assert result.manifest.requests_without_tenant == 0 and not any("name no tenant" in n for n in result.manifest.notes)


def test_an_engine_count_on_a_shared_id_is_nobodys_so_a_small_prompt_sharing_it_is_no_suspect(tmp_path: Path) -> None:
    """bolt reused globex's request id "r-3" for a one-line question. The engine logs name r-3 as an
    over-limit prompt (10,861 tokens), but an id two customers carry cannot tell whose request the engine
    served: ingest must not give either row the engine's count, nodes or room, so each is judged by its
    own prompt, as the scan's shared-id rule says. Before, bolt's 60-byte prompt took the engine's 10,861
    tokens, became an above-ceiling suspect and was told its answer was corrupted."""
    import pyarrow.parquet as pq
    from test_run import _row, write_logs

    from forensics import api

    logs = write_logs(tmp_path / "logs")
    with (logs / "gateway" / "spend.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(_row("r-3", "bolt", "2026-08-28T11:30:00Z", "What is the capital of France? One word, please.",
                      "Paris.", 14) + "\n")
    engine = logs / "engine"
    engine.mkdir()
    (engine / "prefill-0_0.log").write_text(
        "[2026-08-27 00:00:05 TP0] max_total_num_tokens=2000, context_len=8192\n"
        "[2026-08-28 11:00:00 TP0] Input length (10861 tokens) exceeds the maximum allowed length (8191 tokens). "
        "Use a shorter input or enable --allow-auto-truncate., self.rid='r-3'\n", encoding="utf-8")
    (engine / "decode-0_0.log").write_text(
        "[2026-08-27 00:00:05 TP0] max_total_num_tokens=2000, context_len=8192\n"
        "[2026-08-28 11:00:02 TP0] ReqTimeStats(rid=r-3, bootstrap_room=4242, input_len=1, cached_input_len=0, "
        "output_len=50, type=decode): forward_duration=2061.78ms\n", encoding="utf-8")
    with (logs / "case.toml").open("a", encoding="utf-8") as fh:
        fh.write('\n[[inputs]]\nformat = "sglang"\npath = "engine"\n')
    result = api.run(logs, tmp_path / "out")
    case = result.report.report_dir / "case"
    rows = {(r["request_id"], r["tenant_id"]): r for r in pq.read_table(case / "exchanges.parquet").to_pylist()}
    for key in (("r-3", "globex"), ("r-3", "bolt")):
        row = rows[key]
        assert row["prompt_tokens_source"] != "engine", key
        assert (row["rid"], row["decode_node"], row["prefill_node"], row["bootstrap_room"]) == (None, None, None, None), key
    assert rows[("r-3", "bolt")]["prompt_tokens"] < 100  # its own 50-byte question
    rd = result.report.report_dir
    suspects = list(csv.DictReader(io.StringIO((rd / "suspects.csv").read_text(encoding="utf-8"))))
    assert [(r["request_id"], r["tenant_id"], r["reasons"]) for r in suspects] == [("r-3", "globex", "above_ceiling")]
    notices = list(csv.DictReader(io.StringIO((rd / "notifications.csv").read_text(encoding="utf-8"))))
    assert "bolt" not in {n["tenant_id"] for n in notices}
    assert [(n["tenant_id"], n["role"]) for n in notices] == [("acme", "exposed"), ("globex", "recipient")]


def test_a_suspect_response_whose_customer_no_log_names_goes_to_nobody_and_is_said(tmp_path: Path) -> None:
    """Two customers sent r-1 through split logs, so its over-long answer joins neither request: a suspect
    with no customer. It was listed as a recipient with an empty name and a notice addressed to nobody
    (packet e3b0c44298, the hash of the empty string). It is still searched, but only the summary names
    it, for the team to find its customer in other logs."""
    from forensics import api

    logs = tmp_path / "logs"
    logs.mkdir()
    requests = [json.dumps({"request_id": rid, "timestamp": t, "tenant_id": tenant,
                            "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": text}]}})
                for rid, tenant, t, text in (("r-1", "org-a", "2026-08-30T01:00:00Z", "confidential memo " * 3000),
                                             ("r-1", "org-b", "2026-08-30T01:00:00.5Z", "hi"),
                                             ("r-2", "org-c", "2026-08-30T02:00:00Z", "short question"))]
    responses = [json.dumps({"request_id": rid, "timestamp": t, "status_code": 200,
                             "body": {"model": "glm-5.3",
                                      "choices": [{"index": 0, "message": {"content": text}, "finish_reason": "stop"}],
                                      "usage": {"prompt_tokens": tokens, "completion_tokens": 5}}})
                 for rid, t, text, tokens in (("r-1", "2026-08-30T01:00:05Z", "answer one", 13_000),
                                              ("r-2", "2026-08-30T02:00:01Z", "answer", 4))]
    (logs / "requests.jsonl").write_text("\n".join(requests) + "\n")
    (logs / "responses.jsonl").write_text("\n".join(responses) + "\n")
    (tmp_path / "case.toml").write_text('name = "nobody"\nmodel = "glm-5.3"\nwindow_start = "2026-08-27T00:00:00Z"\n'
                                        'window_end = "2026-09-09T00:00:00Z"\nreal_ceiling_tokens = 8192\n'
                                        '[[inputs]]\npath = "logs"\nformat = "openai-split"\n')
    rd = api.run(tmp_path / "case.toml", tmp_path / "out").report.report_dir
    suspects = [(r["request_id"], r["tenant_id"]) for r in csv.DictReader(open(rd / "suspects.csv", newline=""))]
    assert ("r-1", "") in suspects  # searched
    rows = list(csv.DictReader(open(rd / "notifications.csv", newline="")))
    assert all(r["tenant_id"] for r in rows)
    assert not (rd / "packets" / "e3b0c44298").exists()
    summary = (rd / "summary.md").read_text(encoding="utf-8")
    assert "name no customer" in summary and "r-1" in summary
    scan_warnings = json.loads((rd / "scan.json").read_text(encoding="utf-8"))["warnings"]
    # The ids are quoted and escaped, as the notes show them (a hostile id must not drive the terminal).
    assert any("name no customer" in w and w.endswith(': "r-1"') for w in scan_warnings)
    assert api.verify(rd).ok


def test_different_answers_to_an_id_two_customers_sent_are_named_in_the_notes(tmp_path: Path) -> None:
    """beta and gamma both sent id "1" through split logs, and each got its own answer. An answer names no
    customer, so the two cannot be told apart: one is kept, the other counted as its copy. That second
    answer (maybe the leak) vanished with nothing but a duplicate count; the notes now name the id."""
    from forensics import api

    logs = tmp_path / "logs"
    logs.mkdir()
    requests = [json.dumps({"request_id": "1", "timestamp": t, "tenant_id": tenant,
                            "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": f"from {tenant}"}]}})
                for tenant, t in (("beta", "2026-08-30T01:00:00Z"), ("gamma", "2026-08-30T03:00:00Z"))]
    responses = [json.dumps({"request_id": "1", "timestamp": t, "status_code": 200,
                             "body": {"choices": [{"index": 0, "message": {"content": text}, "finish_reason": "stop"}]}})
                 for t, text in (("2026-08-30T01:00:05Z", "BETA ANSWER"), ("2026-08-30T03:00:05Z", "GAMMA ANSWER"))]
    (logs / "requests.jsonl").write_text("\n".join(requests) + "\n")
    (logs / "responses.jsonl").write_text("\n".join(responses) + "\n")
    result = api.ingest(tmp_path / "case", [logs], fmt="openai-split")
    notes = [n for n in result.manifest.notes if "had different answers" in n]
    assert len(notes) == 1 and '"1"' in notes[0]


def _one_request_two_answers(tmp_path: Path, answered_id: str, answers: tuple[tuple[str, str], ...]) -> list[str]:
    """Split logs: acme's request r-1 or r-2 (the answered id's, when it is one), and two answers to
    ``answered_id`` ((time, text) each); the ingest's notes on different answers."""
    from forensics import api

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "requests.jsonl").write_text(json.dumps(
        {"request_id": answered_id if answered_id == "r-2" else "r-1", "timestamp": "2026-08-28T10:00:00Z",
         "tenant_id": "acme", "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": "hello"}]}}) + "\n")
    (logs / "responses.jsonl").write_text("".join(json.dumps(
        {"request_id": answered_id, "timestamp": t, "status_code": 200,
         "body": {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}}) + "\n"
        for t, text in answers))
    result = api.ingest(tmp_path / "case", [logs], fmt="openai-split")
    assert result.manifest.duplicate_requests == 1
    return [n for n in result.manifest.notes if "had different answers" in n]


@pytest.mark.parametrize("second", ["answer B with LEAKED text", "answer A"])
def test_different_answers_to_one_customers_request_are_named_in_the_notes(tmp_path: Path, second: str) -> None:
    """One request, two answers in the split response log (a retried request logs each): one row is kept
    per request id and customer, and the second answer (maybe the leak) was counted as a duplicate and
    named nowhere. The same answer logged twice is a plain copy: no note."""
    notes = _one_request_two_answers(tmp_path, "r-2", (("2026-08-28T10:00:05Z", "answer A"), ("2026-08-28T10:07:00Z", second)))
    if second == "answer A":
        assert not notes
    else:
        assert len(notes) == 1 and '"r-2"' in notes[0] and "one customer" in notes[0]


def test_different_answers_with_no_request_are_named_without_a_customer(tmp_path: Path) -> None:
    """Two different answers to an id no request line names: noted, and not as one customer's request."""
    (note,) = _one_request_two_answers(tmp_path, "r-9", (("2026-08-28T10:00:05Z", "answer A"), ("2026-08-28T10:00:06Z", "answer B")))
    assert '"r-9"' in note and "or by none the request logs name" in note
