"""One exchange logged twice under two customer ids (a spend-log export beside its callbacks under another tenant
field, a second gateway in front of the first under its own ids and account names): the list names each customer
once, under its own id, and the copies are not chance matches (a review: the exposed list emptied)."""

from __future__ import annotations

import csv
import datetime as dt
import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import small_incident_copies

from forensics import api
from forensics.lab.evaluate import evaluate
from forensics.lab.frontdoor import add_front_door

SEED = 3
DAY = "2026-08-26"  # the day before the window: the controls' and the sources' traffic, no suspect's


def _lines(path: Path) -> list[Any]:
    """A log's records, and its broken lines as they are (the simulator leaves some for the quarantine)."""
    out: list[Any] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append(line)
    return out


def _write(path: Path, rows: list[Any]) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in rows),
                    encoding="utf-8")


def _metadata(row: dict[str, Any]) -> dict[str, Any]:
    md = row["metadata"]
    return json.loads(md) if isinstance(md, str) else md


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A copy of the simulated small incident (plain files), to edit, per test."""
    return small_incident_copies(tmp_path_factory.mktemp("twice"), SEED)


def _exposed(inc: Path, out: Path) -> tuple[dict[str, Any], Path]:
    result = api.run(inc / "case.toml", out)
    return evaluate(inc / "truth.json", result.report.report_dir).to_json(), result.report.report_dir


def _review_reasons(report: Path) -> list[str]:
    with (report / "review.csv").open(encoding="utf-8", newline="") as fh:
        return [r["why_not_notified"] for r in csv.DictReader(fh)]


@pytest.mark.parametrize("own_system_prompt", [False, True], ids=["as-sent", "with-its-own-system-prompt"])
def test_a_second_gateway_logging_a_day_under_its_own_ids_names_each_customer_once(
        incident: Callable[[str], Path], tmp_path: Path, own_system_prompt: bool) -> None:
    """An API front door logged the day before the window again, under its own request ids and account names: the
    controls matched their own copies, the chance model took them for chance, and 8 of 10 exposed customers fell off
    the list. Its copies of a source named its account names exposed too. A front door that puts a system prompt of
    its own at the head of what it logs was not recognised by the first fix (a review). Its customers' ids are linked
    by many exchanges, so the ingest now folds the copies before the match stage sees them."""
    inc = incident(f"front-door-{own_system_prompt}")
    logged = add_front_door(inc, f"litellm-callbacks-{DAY}*", own_system_prompt)
    baseline, _ = _exposed(incident(f"as-simulated-{own_system_prompt}"), tmp_path / "baseline")
    scored, report = _exposed(inc, tmp_path / "out")
    assert scored["customers"]["exposed"] == baseline["customers"]["exposed"]
    assert scored["customers"]["exposed"]["precision"] == 1.0 and scored["customers"]["exposed"]["recall"] == 1.0
    manifest = json.loads((report / "case" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["logged_twice"]["rows"] == logged


def _list(report: Path) -> list[tuple[str, str, str]]:
    with (report / "notifications.csv").open(encoding="utf-8", newline="") as fh:
        return sorted((r["tenant_id"], r["role"], r["tier"]) for r in csv.DictReader(fh))


@pytest.mark.parametrize("own_system_prompt", [False, True], ids=["as-sent", "with-its-own-system-prompt"])
def test_a_second_gateway_logging_the_whole_incident_is_folded_at_the_ingest(
        incident: Callable[[str], Path], tmp_path: Path, own_system_prompt: bool) -> None:
    """A front door logging every day, the window included, under its own request ids and account names: every
    suspect named its customer twice (7 of 14 recipients were account names) and a source's text, held under two ids,
    read as common (an exposed customer fell off the list). The ingest folds each copy into the gateway's row: the
    list is the one the gateway's logs alone give, every copy is in logged_twice.parquet, and every file reconciles."""
    inc = incident(f"whole-front-door-{own_system_prompt}")
    logged = add_front_door(inc, "litellm-callbacks-*", own_system_prompt)
    _, baseline = _exposed(incident(f"whole-as-simulated-{own_system_prompt}"), tmp_path / "baseline")
    scored, report = _exposed(inc, tmp_path / "out")
    assert _list(report) == _list(baseline)
    manifest = json.loads((report / "case" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["reconciled"] and manifest["logged_twice"]["rows"] == logged
    copies = pq.read_table(report / "case" / "logged_twice.parquet").to_pylist()
    table, _ = api.query_case(report / "case", "SELECT count(*) AS n FROM logged_twice", {})
    assert table.column("n").to_pylist() == [logged]  # (what the README's query shows)
    assert len(copies) == logged and all(c["request_id"].startswith("fd-") for c in copies)
    assert not any(c["kept_tenant_id"].endswith("-prod") for c in copies)
    assert {c["prompts"] for c in copies} <= ({"held"} if own_system_prompt else {"same", "short"})
    note = next(n for n in manifest["notes"] if "logged twice under two customer ids were folded" in n)
    kept, other, n = manifest["logged_twice"]["linked"][0]
    assert f'"{kept}" ~ "{other}" ({n})' in note
    summary = (report / "summary.md").read_text(encoding="utf-8")
    assert "logged twice under two customer ids were folded" in summary and other in summary


def test_a_second_gateway_whose_clock_reads_local_time_as_utc_is_folded_and_said(
        incident: Callable[[str], Path], tmp_path: Path) -> None:
    """A front door writing local time (UTC-5) with no zone, read as UTC: its copies were logged five hours from the
    gateway's, none folded, and every recipient was named twice. The ingest reads the two clocks off the exchanges
    both logged, folds every copy, moves the front door's times onto the gateway's clock and says so; the list is the
    gateway's alone. One customer sent a single call through it (one exchange links no ids: the match stage's rule
    tells that copy, by the times the tables hold), and its account name stays off the list (a review)."""
    inc = incident("front-door-local-time")
    add_front_door(inc, "litellm-callbacks-*", clock_offset=-18000.0)
    exposed = set(json.loads((inc / "truth.json").read_text(encoding="utf-8"))["exposed_requests"])
    door = {f"fd-{hashlib.sha1(r.encode()).hexdigest()[:16]}" for r in exposed}  # (the front door's ids of them)
    requests = _lines(inc / "gateway" / "frontdoor-requests.jsonl")
    alias = next(r["tenant_id"] for r in requests if r["request_id"] in door)
    keep = next(r["request_id"] for r in requests if r["tenant_id"] == alias and r["request_id"] in door)
    drop = {r["request_id"] for r in requests if r["tenant_id"] == alias and r["request_id"] != keep}
    for kind in ("requests", "responses"):
        path = inc / "gateway" / f"frontdoor-{kind}.jsonl"
        _write(path, [r for r in _lines(path) if r["request_id"] not in drop])
    _, baseline = _exposed(incident("front-door-local-time-baseline"), tmp_path / "baseline")
    _, report = _exposed(inc, tmp_path / "out")
    assert _list(report) == _list(baseline)
    manifest = json.loads((report / "case" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["reconciled"] and manifest["logged_twice"]["rows"] == len(requests) - len(drop) - 1
    [clock] = manifest["clock_offsets"]
    assert "clock_offsets_unread" not in manifest
    # (the split log's two files: when a call was received comes from one, when it completed from the other)
    assert clock["files"] == ["gateway/frontdoor-requests.jsonl"] and clock["record_kind"] == "split"
    assert clock["answer_files"] == ["gateway/frontdoor-responses.jsonl"]
    assert round(clock["offset_seconds"]) == -18000
    assert all(f.startswith("gateway/litellm-callbacks-") for f in clock["reference"]) and clock["customers"] >= 3
    note = next(n for n in manifest["notes"] if "read apart from another log's" in n)
    assert re.search(r'"gateway/frontdoor-requests\.jsonl" \(split records\) -1[78],[09]{3}\.\d{3} s against '
                     r'"gateway/litellm-callbacks-[^"]*" \(and 4 other files\) \(logging_payload records\)', note)
    assert "timezone" in note
    # (the one call's row, on the gateway's clock: within a second of when the gateway's callback says it started)
    table, _ = api.query_case(report / "case", "SELECT received_at FROM exchanges WHERE request_id = $id", {"id": keep})
    gateway_id = next(r for r in exposed if f"fd-{hashlib.sha1(r.encode()).hexdigest()[:16]}" == keep)
    assert abs(table.column("received_at").to_pylist()[0].timestamp() - _gateway_start(inc, gateway_id)) < 1


def _gateway_start(inc: Path, request_id: str) -> float:
    """When the gateway's callback of ``request_id`` says the call started (epoch seconds)."""
    for path in sorted((inc / "gateway").glob("litellm-callbacks-*")):
        for r in _lines(path):
            if isinstance(r, dict) and (r.get("standard_logging_object") or r).get("id") == request_id:
                return float((r.get("standard_logging_object") or r)["startTime"])
    raise AssertionError(request_id)


def test_a_second_gateway_whose_clock_changed_during_the_case_is_said(incident: Callable[[str], Path],
                                                                       tmp_path: Path) -> None:
    """A front door writing local time with no zone across a change of daylight saving time: no one offset holds
    enough of its calls, so none is read and nothing moves; the manifest and a note name the two logs and the offset
    their answers nearly agree on, and tell the team to set the log's time zone."""
    from forensics.config import load_case_file

    inc = incident("front-door-dst")
    add_front_door(inc, "litellm-callbacks-*", clock_offset=-18000.0)
    halves = {}
    for kind in ("requests", "responses"):
        path = inc / "gateway" / f"frontdoor-{kind}.jsonl"
        rows = _lines(path)
        middle = sorted(r["timestamp"] for r in rows)[len(rows) // 2]
        for r in rows:  # (from the middle of the case on, an hour later: summer time ended)
            if r["timestamp"] >= middle:
                at = dt.datetime.fromisoformat(r["timestamp"].replace("Z", "+00:00")) + dt.timedelta(hours=1)
                r["timestamp"] = at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        halves[kind] = middle
        _write(path, rows)
    cfg = load_case_file(inc / "case.toml")
    api.ingest(tmp_path / "case", [spec.path for spec in cfg.inputs], config=cfg,
               path_formats=[None if spec.format == "auto" else spec.format for spec in cfg.inputs])
    manifest = json.loads((tmp_path / "case" / "manifest.json").read_text(encoding="utf-8"))
    assert "clock_offsets" not in manifest
    [unread] = manifest["clock_offsets_unread"]
    assert unread["files"] == ["gateway/frontdoor-requests.jsonl"] and round(unread["offset_seconds"] / 3600) in (-5, -4)
    note = next(n for n in manifest["notes"] if "too few of their calls" in n)
    assert '"gateway/frontdoor-requests.jsonl" (split records) -1' in note and "timezone" in note


def test_a_fold_with_too_many_pairs_to_check_is_left_out_and_said(incident: Callable[[str], Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the cap on candidate pairs the fold is left out whole: every row stays, and the manifest and its note say
    a customer may be named twice."""
    from forensics.config import load_case_file
    from forensics.ingest import copies

    inc = incident("front-door-capped")
    logged = add_front_door(inc, f"litellm-callbacks-{DAY}*", False)
    monkeypatch.setattr(copies, "MAX_PAIRS", 3)
    cfg = load_case_file(inc / "case.toml")
    result = api.ingest(tmp_path / "case", [spec.path for spec in cfg.inputs], config=cfg,
                        path_formats=[None if spec.format == "auto" else spec.format for spec in cfg.inputs])
    manifest = json.loads((tmp_path / "case" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["logged_twice"] == {"rows": 0, "left_out": True} and manifest["reconciled"]
    assert any("logged twice under two customer ids was left out" in n for n in manifest["notes"])
    ids = pq.read_table(tmp_path / "case" / "exchanges.parquet", columns=["request_id"]).column("request_id").to_pylist()
    assert sum(i.startswith("fd-") for i in ids) == logged and result.manifest.tables is not None


@pytest.mark.parametrize("rows", [None, 3], ids=["the-whole-day", "three-rows"])
def test_a_spend_log_export_naming_teams_names_each_customer_once(incident: Callable[[str], Path], tmp_path: Path,
                                                                   rows: int | None) -> None:
    """An older spend-log export of the day before the window names the team (no organization_id), the callbacks the
    organisation: with the whole day, no exposed customer was named; with a few rows, one was named twice, once by
    its team's id."""
    inc = incident(f"spend-{rows}")
    for path in sorted((inc / "gateway").glob("spend-logs-*")):
        if DAY not in path.name:
            path.unlink()
            continue
        kept = _lines(path)[:rows] if rows else _lines(path)
        for row in kept:
            if not isinstance(row, dict):
                continue
            row.pop("organization_id", None)
            row["team_id"] = _metadata(row).get("user_api_key_team_id")
        _write(path, kept)
    scored, report = _exposed(inc, tmp_path / "out")
    assert scored["customers"]["exposed"]["precision"] == 1.0 and scored["customers"]["exposed"]["recall"] == 1.0
    manifest = json.loads((report / "case" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["tenant_aliases"]  # the ingest saw the two ids of one customer


def test_a_suspect_repeating_a_templated_sources_whole_answer_seconds_later_still_names_it(tmp_path: Path) -> None:
    """The stale pages may make a suspect repeat an earlier request's whole answer seconds later, and two customers'
    prompts may share a template's head: that is no copy of the suspect's own exchange (its prompt ends in another
    question), and the source is named. The same exchange logged again under another id is no exposure."""
    from match_helpers import config, exchange, make_case
    from test_shared_request_id import text

    from forensics.match import match

    template = "<|user|>\n" + "You are the claims assistant of Northwind Mutual. Follow the policy manual. " * 5
    answer = "Claim review: " + text(31, 60)
    rows = [  # (prompts as the ingest renders them: "<|role|>" blocks joined by blank lines)
        exchange("src-1", "cato", 0, prompt=template + "Question: " + text(32, 20), response=answer),
        exchange("sus-1", "bolt", 0.05, prompt=template + "Question: " + text(33, 20), response=answer),
    ]
    found = match(make_case(tmp_path / "leak", rows, [("sus-1", "bolt")]), config()).findings
    assert [(f["source_tenant_id"], f["source_kind"]) for f in found if f["relation"] == "cross_tenant"] == [
        ("cato", "response")]
    # The suspect's exchange logged again, under another gateway's id and account name, a few milliseconds apart; a
    # front door receives the call first and may log no completion time (taken to end as it began, such a copy was
    # named exposed, confirmed: a review), and two gateways' clocks may be a little apart.
    copies = {"later": exchange("fd-1", "bolt-account", 0.05 + 0.004 / 60, duration=0.6 / 60,
                                prompt=rows[1]["prompt_text"], response=answer),
              "first, no completion time": exchange("fd-1", "bolt-account", 0.05 - 0.004 / 60, completed_at=None,
                                                    prompt=rows[1]["prompt_text"], response=answer),
              "clocks 0.5 s apart": exchange("fd-1", "bolt-account", 0.05 - 0.5 / 60, duration=0.6 / 60,
                                             prompt=rows[1]["prompt_text"], response=answer),
              # Logged a little otherwise (a trailing newline, CRLF), or with a completion time before it was
              # received (bad data): a copy all the same (a review).
              "prompt with a trailing newline": exchange("fd-1", "bolt-account", 0.05, duration=0.6 / 60,
                                                         prompt=rows[1]["prompt_text"] + "\n", response=answer),
              "answer with a trailing CRLF": exchange("fd-1", "bolt-account", 0.05, duration=0.6 / 60,
                                                      prompt=rows[1]["prompt_text"], response=answer + "\r\n"),
              "completed before received": exchange("fd-1", "bolt-account", 0.05, duration=-60,
                                                    prompt=rows[1]["prompt_text"], response=answer),
              # A front door that forwards the call seconds after receiving it (a guardrail, a queue) and sees it end
              # last: its run holds the suspect's (both ends within 1 s named its account exposed: a review).
              "forwarded 3 s later": exchange("fd-1", "bolt-account", 0.05 - 3 / 60, duration=3.602 / 60,
                                              prompt=rows[1]["prompt_text"], response=answer),
              "a client draining the stream 2 s longer": exchange("fd-1", "bolt-account", 0.05 - 0.004 / 60,
                                                                  duration=2.604 / 60, prompt=rows[1]["prompt_text"],
                                                                  response=answer),
              "forwarded 1.5 s later, no completion time": exchange("fd-1", "bolt-account", 0.05 - 1.5 / 60,
                                                                    completed_at=None, prompt=rows[1]["prompt_text"],
                                                                    response=answer),
              # A gateway whose export kept no prompt of a request that big (Cloudflare's cut request head): named
              # exposed, confirmed (a review); its run holds the suspect's
              "no prompt logged": exchange("fd-1", "bolt-account", 0.05 - 0.004 / 60, duration=0.614 / 60,
                                           prompt=None, prompt_truncated=True, response=answer,
                                           reported_prompt_tokens=1),  # the usage both logs report (the placeholder's)
              "its own system prompt, no completion time": exchange(
                  "fd-1", "bolt-account", 0.05 - 0.004 / 60, completed_at=None, response=answer,
                  prompt="<|system|>\nFront door policy v2.\n\n" + rows[1]["prompt_text"], reported_prompt_tokens=1)}
    for name, copy in copies.items():
        suspect = rows[1] | {"completed_at": rows[1]["received_at"] + dt.timedelta(seconds=0.6), "reported_prompt_tokens": 1}
        twice = match(make_case(tmp_path / name, [suspect, copy], [("sus-1", "bolt")]), config())
        assert [f for f in twice.findings if f["relation"] == "cross_tenant"] == [], name
        # Left out, and said so where the run prints its warnings (not only counted in match.json).
        assert any('"sus-1" of "bolt" ~ "fd-1" of "bolt-account"' in w for w in twice.summary()["warnings"]), name


@pytest.mark.parametrize(("source", "suspect_at", "suspect"), [
    ({"duration": 1 / 60}, 4 / 60, {}),  # the source ended 3 s before the suspect arrived
    ({"duration": 4 / 60}, 8.9 / 60, {}),  # 4.9 s before
    ({"completed_at": None}, 8 / 60, {}),  # the source logged no completion time, received 8 s before
    ({"duration": 1 / 60}, 9 / 60, {"completed_at": None}),  # the suspect logged none (a broken stream)
    ({"duration": 4 / 60}, 4.5 / 60, {}),  # ran 4 s, ended 0.5 s before: runs that overlap give or take 1 s
    ({"duration": 9 / 60}, 9.9 / 60, {}),  # ran 9 s, ended 0.9 s before (received 9.9 s apart)
    ({"completed_at": dt.datetime(2026, 8, 30, tzinfo=dt.UTC)}, 5 / 60, {}),  # a completion time a day late (bad data)
    # A long source that ended just before a short suspect, and two that began together (a review of the time rule:
    # time alone cannot tell these from clocks apart; the prompts, another question each, do)
    ({"duration": 4 / 60}, 4.3 / 60, {}),
    ({"duration": 0.4 / 60}, 0.8 / 60, {"completed_at": None}),
], ids=["ended-3s-before", "ended-4.9s-before", "source-no-completion", "suspect-no-completion", "ended-0.5s-before",
        "ended-0.9s-before-received-9.9s-apart", "completion-a-day-late", "long-source-ended-0.3s-before-a-short-suspect",
        "began-0.8s-apart-suspect-no-completion"])
def test_a_true_source_that_ended_seconds_before_is_no_copy_whatever_the_prompts_share(
        tmp_path: Path, source: dict[str, Any], suspect_at: float, suspect: dict[str, Any]) -> None:
    """A source whose pages a suspect decoded ended before the suspect arrived; the suspect may repeat its whole answer,
    and two prompts may end with the same templated instruction. A 5 s allowance for clocks apart, and a missing
    completion time read as "ran together", took such a source for the suspect's own copy, and its customer vanished
    from the list (a review)."""
    from match_helpers import config, exchange, make_case
    from test_shared_request_id import text

    from forensics.match import match

    instruction = (" Answer in the claims house style: cite the policy clause, list the documents still missing, and "
                   "close with the next step for the customer. Never mention internal tooling.") * 2
    answer = "Claim review: " + text(31, 60)
    rows = [exchange("src-1", "cato", 0, prompt="Question: " + text(32, 20) + instruction, response=answer, **source),
            exchange("sus-1", "bolt", suspect_at, duration=0.6 / 60, prompt="Question: " + text(33, 20) + instruction,
                     response=answer) | suspect]
    found = match(make_case(tmp_path / "case", rows, [("sus-1", "bolt")]), config()).findings
    assert [(f["source_tenant_id"], f["source_kind"]) for f in found if f["relation"] == "cross_tenant"] == [
        ("cato", "response")]


def test_the_suspects_own_copies_left_out_are_named_with_their_ids_escaped() -> None:
    """What the run's warnings and the report's summary say of a suspect's matches with its own copy, left out: each
    pair named (a count in match.json alone left a dropped source unsaid: a review), ids escaped as notes show them."""
    from forensics.match.findings import own_copies_said

    assert own_copies_said({}) is None and own_copies_said({"own_exchange_copies_of_suspects": []}) is None
    said = own_copies_said({"own_exchange_copies_of_suspects": [["r-1", "acme\nevil", "fd-1", "acme-prod\u202e"]]})
    assert said is not None and said.startswith("1 suspect response(s) matched their own exchange")
    assert '"r-1" of "acme\\nevil" ~ "fd-1" of "acme-prod' in said and "\n" not in said


def test_two_sources_received_16_s_apart_are_two_customers_whatever_lies_between(tmp_path: Path) -> None:
    """Sources were grouped as soon as any two neighbours were received within 10 s, and every pair of the group then
    judged by their runs alone: a third request between two customers' copies of a passage sent one of them to review
    as the other's logged again (a review). Each pair must be received within 10 s."""
    from match_helpers import config, exchange, make_case
    from test_shared_request_id import text

    from forensics.match import match

    prompt, answer = "Please keep this: " + text(41, 60), "Kept: " + text(42, 60)
    rows = [exchange("a-1", "cato", 0, duration=30 / 60, prompt=prompt, response=answer),
            exchange("b-1", "cato", 8 / 60, prompt="Another question: " + text(43, 30), response=answer),
            exchange("c-1", "dune", 16 / 60, duration=4 / 60, prompt=prompt, response=answer),
            exchange("sus-1", "bolt", 40 / 60, duration=0.6 / 60, prompt=text(44, 30), response="Here: " + answer)]
    found = match(make_case(tmp_path / "case", rows, [("sus-1", "bolt")]), config()).findings
    named = {f["source_tenant_id"] for f in found if f["relation"] == "cross_tenant" and f["tier"]}
    assert {"cato", "dune"} <= named


@pytest.mark.parametrize("case", ["canned-question-source-no-completion", "canned-question-suspect-no-completion",
                                  "canned-question-inside-a-queued-suspect", "both-cut-one-template-tail",
                                  "no-prompt-inside-a-queued-suspect", "continue-source-no-completion",
                                  "continue-after-the-customers-own-system-prompt", "same-long-prompt-ended-before",
                                  "system-prompt-then-the-same-question-ended-before"])
def test_a_true_source_whose_prompt_another_ends_with_or_whose_cut_tail_is_template_is_named(
        tmp_path: Path, case: str) -> None:
    """A source whose whole prompt is a canned question another conversation ends with, one end's time unknown; and two
    prompts a log cut short (LiteLLM's spend logs keep a long string's head and tail) whose kept tail is one template
    after another question: each was taken for the suspect's own copy and its customer dropped (a review)."""
    from match_helpers import config, exchange, make_case
    from test_shared_request_id import text

    from forensics.match import match

    answer = "Summary of the thread: " + text(51, 60)
    canned = "<|user|>\nSummarise everything above in five bullet points for the account manager, then list the open items."
    rules = " Follow the house rules: " + text(52, 200)  # a long template after the question
    conversation = "<|user|>\n" + text(53, 80) + "\n\n<|assistant|>\nNoted.\n\n" + canned
    if case == "canned-question-inside-a-queued-suspect":  # the source ran while the suspect waited in the queue
        source = exchange("src-1", "cato", 0.5 / 60, duration=1.5 / 60, prompt=canned, response=answer)
        suspect = exchange("sus-1", "bolt", 0, duration=5 / 60, prompt=conversation, response=answer)
    elif case == "no-prompt-inside-a-queued-suspect":  # a response-only record: no prompt logged
        source = exchange("src-1", "cato", 0.5 / 60, duration=1.5 / 60, prompt=None, response=answer,
                          reported_prompt_tokens=900)
        suspect = exchange("sus-1", "bolt", 0, duration=5 / 60, prompt=conversation, response=answer,
                           reported_prompt_tokens=1)
    elif case == "continue-source-no-completion":  # two customers' short turn ("continue"), one end's time unknown
        source = exchange("src-1", "cato", 0, completed_at=None, prompt="<|user|>\ncontinue", response=answer)
        suspect = exchange("sus-1", "bolt", 8 / 60, prompt="<|user|>\ncontinue", response=answer)
    elif case == "continue-after-the-customers-own-system-prompt":  # reads as a gateway's block: the usage differs
        source = exchange("src-1", "cato", 0, completed_at=None, prompt="<|user|>\ncontinue", response=answer,
                          reported_prompt_tokens=3)
        suspect = exchange("sus-1", "bolt", 8 / 60, response=answer, reported_prompt_tokens=1,
                           prompt="<|system|>\nYou are the account assistant of Contoso.\n\n<|user|>\ncontinue")
    elif case == "system-prompt-then-the-same-question-ended-before":  # the runs decide, both times logged
        source = exchange("src-1", "cato", 0, duration=1 / 60, prompt=canned, response=answer)
        suspect = exchange("sus-1", "bolt", 4 / 60, duration=0.6 / 60, response=answer,
                           prompt="<|system|>\nYou are the account assistant of Contoso.\n\n" + canned)
    elif case == "same-long-prompt-ended-before":  # one byte-identical long prompt, both times logged: the runs decide
        source = exchange("src-1", "cato", 0, duration=1 / 60, prompt=canned, response=answer)
        suspect = exchange("sus-1", "bolt", 4 / 60, duration=0.6 / 60, prompt=canned, response=answer)
    elif case.startswith("canned"):
        source = exchange("src-1", "cato", 0, prompt=canned, response=answer,
                          **({"completed_at": None} if case.endswith("source-no-completion") else {"duration": 1 / 60}))
        suspect = exchange("sus-1", "bolt", 8 / 60 if case.endswith("source-no-completion") else 4 / 60,
                           prompt=conversation,
                           response=answer, **({} if case.endswith("source-no-completion") else {"completed_at": None}))
    else:
        source = exchange("src-1", "cato", 0, duration=2 / 60, prompt="Question: " + text(54, 400) + rules,
                          prompt_truncated=True, response=answer)
        suspect = exchange("sus-1", "bolt", 5 / 60, completed_at=None, prompt="Question: " + text(55, 400) + rules,
                           prompt_truncated=True, response=answer)
    found = match(make_case(tmp_path / "case", [source, suspect], [("sus-1", "bolt")]), config()).findings
    assert [f["source_tenant_id"] for f in found if f["relation"] == "cross_tenant"] == ["cato"]


def test_a_front_door_copy_of_a_short_question_with_its_own_system_prompt_is_one_customer(tmp_path: Path) -> None:
    """A front door that logs a system prompt of its own before a short question (under 64 characters once rendered):
    its copy of the source was not recognised, and the customer was named twice, once under the front door's account
    (a review). A whole message block after the gateway's own is the same request at any length."""
    from match_helpers import config, exchange, make_case
    from test_shared_request_id import text

    from forensics.match import match

    question, answer = "<|user|>\nWhat is the status of claim 4471?", "Claim 4471: " + text(61, 60)
    rows = [exchange("a-1", "cato", 0, duration=2 / 60, prompt=question, response=answer),
            exchange("fd-1", "cato-prod", -0.5 / 60, duration=3 / 60,
                     prompt="<|system|>\nFront door policy v2.\n\n" + question, response=answer),
            exchange("sus-1", "bolt", 30 / 60, duration=0.6 / 60, prompt=text(62, 30), response="Here: " + answer)]
    found = match(make_case(tmp_path / "case", rows, [("sus-1", "bolt")]), config()).findings
    assert sorted(f["source_tenant_id"] for f in found if f["relation"] == "cross_tenant" and f["tier"]) == ["cato"]
