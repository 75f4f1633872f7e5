"""Format invariance (issue 13): one simulated incident, written in every log format, gives one answer.

The simulator writes the same seed through every registered gateway writer (GATEWAY_WRITERS) and
every engine writer (ENGINE_WRITERS); a writer added to forensics.lab.simulate.writers joins these
tests by being registered. Each gateway format is run with the default engine format and each engine
format with the default gateway format, end to end (ingest, scan, match, report), and compared with
the default pair (litellm + sglang): the same suspects, the same findings (evidence
rows) and the same notification list.

What may differ, and why (everything else must be equal):

* Times are compared to the millisecond: Helicone and the split logs keep milliseconds (the
  split logs' epoch form rounds to them), LiteLLM microseconds; ``seconds_before`` follows.
* An engine whose lines cannot say something says nothing about it (ENGINE_GAPS): vLLM's
  RequestLogger has no over-limit refusal naming the request and no bootstrap rooms, so its
  suspects carry no ``engine_signature`` reason; they are found by their exact size
  (``prompt_token_ids``) instead, and must be the same suspects.
* A gateway log that does not hold a figure leaves it empty: a streamed answer in the split logs
  may lack the usage chunk, so ``reported_prompt_tokens`` is compared where both runs have it.
* Statistics over every record the logs hold (``expected_by_chance``, the same with the
  mechanism, ``other_source_requests``) move a little when a format loses records by design (the
  split logs' rotated request lines and unanswered requests, listed as ``orphans`` in
  truth.json); they are compared exactly when neither run lost any, else within what the lost
  records can change. The tiers they decide are always compared exactly.
* ``quarantined_neighbour`` marks the records physically next to a quarantined line, so it follows
  each format's file layout: the same defect sits between two exchange records in a LiteLLM file,
  but between a call's SPAN and GENERATION lines in a Langfuse export. The damage columns are
  compared without that reason; every other reason must be the same.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forensics import api, cli
from forensics.ingest.base import FileContext
from forensics.ingest.registry import FORMATS
from forensics.lab.simulate import events as ev
from forensics.lab.simulate import simulate
from forensics.lab.simulate.mechanism import Exchange, Tenant
from forensics.lab.simulate.writers import ENGINE_WRITERS, GATEWAY_WRITERS, HeliconeWriter, Outputs, VLLMWriter
from forensics.tokens import Counter

SEED = 7
BASE = ("litellm", "sglang")
# Gateway and engine logs are read apart and joined by request id, so each gateway format is run with
# the default engine and each engine format with the default gateway (not every pair: the suite stays short).
COMBINATIONS = ([(g, BASE[1]) for g in GATEWAY_WRITERS if g != BASE[0]]
                + [(BASE[0], e) for e in ENGINE_WRITERS if e != BASE[1]])

#: Suspect columns an engine format cannot fill (see the module docstring), by engine writer.
ENGINE_GAPS: dict[str, set[str]] = {"vllm": {"engine_signature", "bootstrap_room"}}
TIMES = {"received_at", "completed_at", "first_seen", "last_seen"}
DAMAGE = {"damage", "recipient_damage", "source_damage"}
CORPUS_STATISTICS = {"expected_by_chance", "expected_by_chance_with_mechanism", "other_source_requests"}

SUSPECT_KEY = ("request_id", "tenant_id")
EVIDENCE_KEY = ("recipient_request_id", "recipient_tenant_id", "source_request_id", "source_tenant_id", "source_kind",
                "recipient_start", "source_start")
NOTIFICATION_KEY = ("tenant_id", "role")


@dataclasses.dataclass
class Run:
    """One combination simulated and run end to end."""

    gateway: str
    engine: str
    report_dir: Path
    truth: dict[str, Any]

    def rows(self, name: str, key: tuple[str, ...]) -> dict[tuple[str, ...], dict[str, str]]:
        """A report CSV as rows by ``key`` (which must be unique)."""
        with (self.report_dir / name).open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
        keyed = {tuple(r[k] for k in key): r for r in rows}
        assert len(keyed) == len(rows), f"{name}: {key} is not unique"
        return keyed

    @property
    def orphans(self) -> int:
        """Requests this format's logs hold only in part (split logs)."""
        return len(self.truth["orphans"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str], Run]:
    """Simulate and run a combination once per module (the baseline is shared by every test)."""
    done: dict[tuple[str, str], Run] = {}

    def get(gateway: str, engine: str) -> Run:
        if (gateway, engine) not in done:
            root = tmp_path_factory.mktemp(f"{gateway}-{engine}")
            sim = simulate(root / "sim", seed=SEED, scale="small", fmt=gateway, engine_fmt=engine)
            result = api.run(sim.case_file, root / "reports")
            truth = json.loads(sim.truth.read_text(encoding="utf-8"))
            done[(gateway, engine)] = Run(gateway, engine, result.report.report_dir, truth)
        return done[(gateway, engine)]

    return get


def _time(value: str) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _without_neighbour(damage: str) -> str:
    """A damage value without ``quarantined_neighbour`` (a fact of the file layout, see the docstring)."""
    return ";".join(r for r in damage.split(";") if r and r != "quarantined_neighbour")


def _differences(base: Run, other: Run, name: str, key: tuple[str, ...], skip: set[str] | None = None) -> list[str]:
    """Every difference between the two runs' ``name`` rows that the module docstring does not allow."""
    skip = skip or set()
    a, b = base.rows(name, key), other.rows(name, key)
    out = [f"{name}: only in {base.gateway}+{base.engine}: {k}" for k in sorted(set(a) - set(b))]
    out += [f"{name}: only in {other.gateway}+{other.engine}: {k}" for k in sorted(set(b) - set(a))]
    orphans = base.orphans + other.orphans
    for k in sorted(set(a) & set(b)):
        for col, va in a[k].items():
            vb = b[k].get(col)
            if col in skip or va == vb:
                continue
            if col in TIMES:
                ta, tb = _time(va), _time(vb or "")
                if ta is not None and tb is not None and abs(ta - tb) <= dt.timedelta(milliseconds=1):
                    continue
            elif col == "seconds_before" and va and vb and abs(float(va) - float(vb)) <= 0.003:
                continue  # each end known to the millisecond, then rounded to it
            elif col in DAMAGE and _without_neighbour(va) == _without_neighbour(vb or ""):
                continue
            elif col == "reported_prompt_tokens" and (not va or not vb):
                continue
            elif col in CORPUS_STATISTICS and orphans and va and vb:
                if col == "other_source_requests" and abs(int(va) - int(vb)) <= orphans:
                    continue
                # Lost records shrink the search (its size is a square root of records) and may take a chance
                # match out of the null (its counted tail moves by one match in a hundred or so).
                if col != "other_source_requests" and math.isclose(float(va), float(vb), rel_tol=0.05):
                    continue
            out.append(f"{name} {k}: {col} = {va!r} in {base.gateway}+{base.engine}, {vb!r} in {other.gateway}+{other.engine}")
    return out


def test_the_baseline_has_something_to_compare(runs: Callable[[str, str], Run]) -> None:
    base = runs(*BASE)
    assert base.rows("suspects.csv", SUSPECT_KEY) and base.rows("evidence.csv", EVIDENCE_KEY)
    notified = base.rows("notifications.csv", NOTIFICATION_KEY)
    assert {role for _, role in notified} == {"recipient", "exposed"}


@pytest.mark.parametrize(("gateway", "engine"), COMBINATIONS)
def test_every_format_gives_the_same_suspects_findings_and_notifications(runs: Callable[[str, str], Run], gateway: str,
                                                                          engine: str) -> None:
    base, other = runs(*BASE), runs(gateway, engine)
    gaps = ENGINE_GAPS.get(engine, set())
    problems = _differences(base, other, "suspects.csv", SUSPECT_KEY, gaps | ({"reasons"} if gaps else set()))
    problems += _differences(base, other, "evidence.csv", EVIDENCE_KEY)
    problems += _differences(base, other, "notifications.csv", NOTIFICATION_KEY)
    assert not problems, "\n".join(problems[:20])
    if gaps:
        # What the engine cannot say is missing, not guessed: the suspects are found by their size alone.
        suspects = other.rows("suspects.csv", SUSPECT_KEY).values()
        assert {s["reasons"] for s in suspects} == {"above_ceiling"}
        assert {s["engine_signature"] for s in suspects} == {"false"}
        assert {s["prompt_tokens_source"] for s in suspects} == {"engine"}  # prompt_token_ids: the exact length


# --- the vLLM writer says each event as the vllm parser reads it ---------------------------------


def _vllm_rows(file_name: str, lines: list[str]) -> list[dict[str, Any]]:
    vllm = FORMATS.get("vllm")
    ctx = FileContext(f"engine/{file_name}", "0" * 64, "vllm", "UTC", "auto", Counter(None), file_name)
    assert vllm.sniff(lines, file_name)
    rows = []
    for n, line in enumerate(lines, 1):
        table, row = vllm.parse(line, n, ctx)  # type: ignore[misc]
        assert table == "engine_events"
        rows.append(row)
    return rows


def test_the_vllm_writer_says_each_event_as_the_vllm_parser_reads_it() -> None:
    writer = VLLMWriter(Outputs(Path("unused")))
    obj = {"rid": "r1", "bootstrap_room": 42, "stream": False}
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "it's \"quoted\"\nand long"}, {"type": "image_url"}]}]
    finished = {"text": "an 'answer'\nover two lines", "meta_info": {"finish_reason": {"type": "length"}, "completion_tokens": 7}}
    cases: list[tuple[Any, list[dict[str, Any]]]] = [
        (ev.ServerStarted("decode", "m/path", "glm-5.3", 8), [{"event": "unknown"}, {"event": "unknown"}]),
        (ev.MemoryPool(681280, 1048576), [{"event": "startup", "max_total_num_tokens": 681280, "context_len": None},
                                          {"event": "startup", "max_total_num_tokens": None, "context_len": 1048576}]),
        # The prompt's exact length comes from its ids, not from the text.
        (ev.RequestReceived("r1", obj, messages, 9000, 256), [{"event": "request_received", "rid": "r1", "input_len": 9000},
                                                              {"event": "request_received", "rid": "r1", "input_len": None}]),
        (ev.RequestFinished("r1", obj, finished),
         [{"event": "request_finished", "rid": "r1", "output_text": finished["text"], "output_len": 7, "finish_reason": "length"}]),
        (ev.RequestFinished("r1", {**obj, "stream": True}, finished),
         [{"event": "request_finished", "rid": "r1", "output_text": finished["text"], "output_len": None}]),
        (ev.RequestFinished("r1", obj, {"text": "", "meta_info": {"finish_reason": {"type": "abort"}}}),
         [{"event": "request_finished", "rid": "r1", "finish_reason": "abort", "output_text": None}]),
        (ev.BootstrapFailed("r1", 42, "10.0.0.2:17001"), [{"event": "bootstrap_failed", "rid": "r1"}]),
        (ev.DecodeBatch(3, 2000, 0.4, 900.0), [{"event": "unknown"}]),
        # No vLLM line exists for these (the writer's docstring says why): nothing is invented.
        (ev.InputTooLong("r1", 700000, 681279), []),
        (ev.ExceedsMaxTokens("r1", 700000, 681280), []),
        (ev.ReqTimeStats("r1", 42, 1, 0, 0, "prefill", 1.5), []),
        (ev.ContextCorruption("r1", 42, 43, 7), []),
        (ev.TransferFailed("r1", 42), []),
    ]
    for event, expected in cases:
        lines = writer.render(1787997000.5, event)
        assert len(lines) == len(expected), (event, lines)
        if not lines:
            continue
        rows = _vllm_rows("decode-1_0.log", lines)
        for line, row, want in zip(lines, rows, expected, strict=True):
            assert {k: row.get(k) for k in want} == want, line
            assert row["node"] == "decode-1" and row["role"] == "decode"


def test_vllm_logs_of_a_disaggregated_deployment_name_the_decode_node(tmp_path: Path) -> None:
    # Found by the invariance test: the vllm parser dropped the node's role, so no exchange had a decode
    # node and the matcher's mechanism evidence (same decode node, records since) was lost with vLLM.
    (tmp_path / "gw").mkdir()
    (tmp_path / "engine").mkdir()
    row = {"request_id": "r1", "tenant_id": "t1", "timestamp": "2026-08-29T10:00:00Z",
           "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": "hello there"}]}}
    (tmp_path / "gw" / "requests.jsonl").write_text(json.dumps(row) + "\n", encoding="utf-8")
    resp = {"request_id": "r1", "timestamp": "2026-08-29T10:00:02Z", "status_code": 200,
            "body": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}}
    (tmp_path / "gw" / "responses.jsonl").write_text(json.dumps(resp) + "\n", encoding="utf-8")
    writer = VLLMWriter(Outputs(Path("unused")))
    prefill = writer.render(1787997600.0, ev.RequestReceived("r1", {}, row["body"]["messages"], 5, 16))  # type: ignore[index]
    decode = writer.render(1787997602.0, ev.RequestFinished("r1", {}, {"text": "hi", "meta_info": {"completion_tokens": 1}}))
    failed = writer.render(1787997603.0, ev.RequestFinished("r2", {}, {"text": "", "meta_info": {"finish_reason": {"type": "abort"}}}))
    (tmp_path / "engine" / "prefill-0_0.log").write_text("\n".join(prefill) + "\n", encoding="utf-8")
    (tmp_path / "engine" / "decode-3_0.log").write_text("\n".join(decode + failed) + "\n", encoding="utf-8")
    api.ingest(tmp_path / "case", [tmp_path / "gw", tmp_path / "engine"], fmt=None)
    import pyarrow.parquet as pq

    exchange = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()[0]
    assert (exchange["prefill_node"], exchange["decode_node"]) == ("prefill-0", "decode-3")
    assert (exchange["prompt_tokens"], exchange["prompt_tokens_source"]) == (5, "engine")
    events = pq.read_table(tmp_path / "case" / "engine_events.parquet").to_pylist()
    # An aborted request is named (it finished on that node, without output), as SGLang's abort is.
    assert [(e["rid"], e["event"], e["finish_reason"]) for e in events if e["rid"] == "r2"] == [("r2", "request_finished", "abort")]


def test_a_vllm_node_whose_name_says_no_role_serves_both() -> None:
    writer = VLLMWriter(Outputs(Path("unused")))
    lines = writer.render(1787997602.0, ev.RequestFinished("r1", {}, {"text": "hi", "meta_info": {"completion_tokens": 1}}))
    assert [r["role"] for r in _vllm_rows("gpu-7_0.log", lines)] == [None]
    # Several ids on one abort line name no single request: kept with its text, not split into guesses.
    several = lines[0].split("] ")[0] + "] Aborted request(s) r1,r2."
    row = _vllm_rows("gpu-7_0.log", [several])[0]
    assert (row["event"], row.get("rid")) == ("unknown", None)


# --- the Helicone writer -------------------------------------------------------------------------


def _exchange(**over: Any) -> Exchange:
    tenant = Tenant.__new__(Tenant)
    tenant.tenant_id, tenant.key_alias = "org-acme", "acme-prod"
    base: dict[str, Any] = dict(
        index=1, request_id="chatcmpl-1", tenant=tenant, user_id="u-1", model="glm-5.3", model_routed="openai/glm-5.3",
        received=1787997600.123456, first_token=1787997600.5, completed=1787997602.25, status="success", status_code=200,
        messages=[{"role": "user", "content": "a \"quoted\", multi-line\nquestion"}], prompt_text="", response_text="the answer, in full",
        stream=True, finish_reason="stop", max_tokens=256, reported_prompt_tokens=1, completion_tokens=5, error=None, error_class=None)
    base.update(over)
    return Exchange(**base)


def test_helicone_rows_read_back_as_the_exchange_they_were_written_from() -> None:
    helicone = FORMATS.get("helicone")
    ctx = FileContext("gateway/helicone.jsonl", "0" * 64, "helicone", "UTC", "auto", Counter(None), "helicone.jsonl")
    failed = dict(status="failure", status_code=500, response_text="", finish_reason=None, completion_tokens=0,
                  error="KV transfer failed", error_class="InternalServerError")
    seen_chunks = seen_whole = False
    for seed in range(12):  # a streamed answer is written reassembled or as its chunks: both read the same
        writer = HeliconeWriter(Outputs(Path("unused")), seed, {}, set(), {})
        for ex in (_exchange(), _exchange(**failed)):
            line = writer.row(ex)
            assert helicone.sniff([line], "helicone.jsonl")
            table, row = helicone.parse(line, 1, ctx)  # type: ignore[misc]
            assert table == "exchanges", row
            seen_chunks |= "streamed_data" in line
            seen_whole |= ex.status == "success" and "streamed_data" not in line
            assert (row["request_id"], row["tenant_id"], row["user_id"], row["model"]) == ("chatcmpl-1", "org-acme", "u-1", "glm-5.3")
            assert row["received_at"] == 1787997600123000 and row["completed_at"] == 1787997602250000  # milliseconds
            assert row["prompt_text"] == "<|user|>\na \"quoted\", multi-line\nquestion"
            if ex.status == "success":
                assert (row["status"], row["response_text"], row["finish_reason"]) == ("success", "the answer, in full", "stop")
                assert row["reported_prompt_tokens"] == 1  # the placeholder's count, copied as Helicone copies usage
            else:
                assert (row["status"], row["status_code"], row["response_text"]) == ("failure", 500, None)
    assert seen_chunks and seen_whole


def test_simulate_names_both_formats_and_refuses_an_unknown_engine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["simulate", "--out", str(tmp_path / "sim"), "--engine-format", "tgi"])
    assert done.value.code == 2
    assert f"unknown engine format 'tgi'. Fix: use one of {', '.join(ENGINE_WRITERS)}" in capsys.readouterr().err
    assert not (tmp_path / "sim").exists()
    with pytest.raises(SystemExit) as done:
        cli.main(["simulate", "--out", str(tmp_path / "sim"), "--format", "helicone", "--engine-format", "vllm", "-q"])
    assert done.value.code == 0
    case = (tmp_path / "sim" / "case.toml").read_text(encoding="utf-8")
    assert 'format = "helicone"' in case and 'format = "vllm"' in case
    assert "--format helicone --engine-format vllm" in (tmp_path / "sim" / "README.md").read_text(encoding="utf-8")
    truth = json.loads((tmp_path / "sim" / "truth.json").read_text(encoding="utf-8"))
    assert truth["generator"]["engine_format"] == "vllm"
    assert sorted(p.name for p in (tmp_path / "sim" / "engine").iterdir()) == ["decode-0_0.log", "decode-1_0.log",
                                                                                "prefill-0_0.log", "prefill-1_0.log"]
