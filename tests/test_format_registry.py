"""Log formats are registered plug-ins: the registry alone decides which names the case file and
``--format`` accept, which format sniffing picks, and which copy of a request the finaliser keeps.

A toy format registered here (and removed after each test) is used end to end without touching
any other module.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from forensics import api, cli, config
from forensics.errors import ConfigError, InputError, RegistryError
from forensics.ingest.base import (
    FileContext,
    Output,
    Quarantined,
    prompt_fields,
    provenance,
)
from forensics.ingest.parquet import is_parquet, peek_rows
from forensics.ingest.reader import peek_lines
from forensics.ingest.registry import FORMATS, AmbiguousFormat, LogFormat, RecordKind, Registry

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "ingest"

# The same request as the first record of the litellm_payload golden input, as a callback payload.
PAYLOAD = {
    "id": "chatcmpl-p1", "trace_id": "t1", "call_type": "acompletion", "status": "success",
    "startTime": 1787997000.25, "endTime": 1787997004.75, "model": "glm-5.3", "model_group": "glm-5.3",
    "messages": [{"role": "user", "content": "What is the notice period in the Lisbon office lease?"}],
    "response": {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Ninety days."}, "finish_reason": "stop"}]},
    "prompt_tokens": 14, "completion_tokens": 4, "metadata": {"user_api_key_org_id": "org-lisbon"}, "stream": False,
}
TOY_LINE = "TOY|chatcmpl-p1|org-lisbon|1787997000250000|What is the notice period in the Lisbon office lease?|Ninety days."


def _toy_sniff(lines: list[str], file_name: str) -> bool:
    return any(line.startswith("TOY|") for line in lines[:5])


def _toy_parse(text: str, line_number: int, ctx: FileContext) -> Output:
    parts = text.split("|")
    if len(parts) != 6 or parts[0] != "TOY":
        return Quarantined("not a TOY|request_id|tenant|micros|prompt|response line")
    _, request_id, tenant, micros, prompt, response = parts
    row: dict[str, Any] = {
        "request_id": request_id, "tenant_id": tenant, "tenant_field": "tenant", "received_at": int(micros),
        "status": "success", "response_text": response, "response_truncated": False,
    }
    row.update(prompt_fields(f"<|user|>\n{prompt}", 0, 1, None, ctx))
    row.update(provenance(ctx, line_number, text, "toy_record"))
    return "exchanges", row


def _toy(precedence: int = -1, sniff_order: int = 5) -> LogFormat:
    return LogFormat(name="toy-log", summary="a test format", table="exchanges", sniff=_toy_sniff, parse=_toy_parse,
                     sniff_order=sniff_order, kinds=(RecordKind("toy_record", precedence=precedence),))


@pytest.fixture
def toy() -> Iterator[LogFormat]:
    """The toy format in the registry ingest uses, for one test."""
    fmt = FORMATS.register(_toy())
    try:
        yield fmt
    finally:
        FORMATS.unregister(fmt.name)


def _write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --- declaring formats ------------------------------------------------------------------------


def test_a_duplicate_format_name_is_an_error_and_keeps_the_first() -> None:
    litellm = FORMATS.get("litellm")
    with pytest.raises(RegistryError, match="'litellm' is already registered"):
        FORMATS.register(dataclasses.replace(litellm, summary="an impostor"))
    assert FORMATS.get("litellm") is litellm


def test_a_record_kind_declared_by_two_formats_is_an_error() -> None:
    registry = Registry()
    registry.register(_toy())
    other = dataclasses.replace(_toy(), name="toy-two")
    with pytest.raises(RegistryError, match="record kind 'toy_record' is already declared by format 'toy-log'"):
        registry.register(other)
    assert registry.names() == ["toy-log"]


@pytest.mark.parametrize(("change", "message"), [
    ({"name": "Toy Log"}, "not lower-case words"),
    ({"table": "quarantine"}, "table 'quarantine'"),
    ({"kinds": ()}, "declares its record kinds"),
])
def test_a_malformed_declaration_is_an_error(change: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        dataclasses.replace(_toy(), **change)


def test_a_file_two_formats_claim_is_ambiguous_whatever_their_order() -> None:
    registry = Registry()
    claims_all = dataclasses.replace(_toy(), name="claims-all", sniff=lambda lines, name: True, kinds=(RecordKind("a", 0),))
    registry.register(dataclasses.replace(claims_all, sniff_order=50))
    registry.register(_toy(sniff_order=10))
    assert registry.sniff(["anything"], "x.log") == "claims-all"  # one claimant: no doubt
    with pytest.raises(AmbiguousFormat) as raised:
        registry.sniff([TOY_LINE], "x.log")
    assert raised.value.candidates == ["toy-log", "claims-all"]
    text = str(raised.value)
    assert text.startswith("x.log: cannot tell the format of this file: it looks like toy-log or claims-all.")
    assert "--format toy-log" in text and 'format = "toy-log" in its [[inputs]] entry' in text
    assert registry.candidates(["nothing"], "x.log") == ["claims-all"]


def test_a_declared_refinement_wins_over_the_format_it_refines() -> None:
    registry = Registry()
    registry.register(dataclasses.replace(_toy(), name="claims-all", sniff=lambda lines, name: True, kinds=(RecordKind("a", 0),)))
    registry.register(dataclasses.replace(_toy(), refines=("claims-all",)))
    assert registry.candidates([TOY_LINE], "x.log") == ["toy-log"]
    assert registry.sniff([TOY_LINE], "x.log") == "toy-log"
    assert registry.sniff(["anything"], "x.log") == "claims-all"
    with pytest.raises(RegistryError, match="lists itself in refines"):
        dataclasses.replace(_toy(), refines=("toy-log",))


def test_every_sample_and_golden_file_is_claimed_by_exactly_one_format() -> None:
    # The mapped goldens are read through their case file's profile: that format is never sniffed.
    files = [p for p in sorted(GOLDEN.glob("*/*")) if p.name != "expected.json" and not p.parent.name.startswith("mapped_")]
    files += [p for p in sorted(SAMPLE.rglob("*")) if p.is_file() and p.parent != SAMPLE]

    def candidates(p: Path) -> list[str]:
        # As ingest's sniff does: a Parquet file's first rows, shown to the formats that read Parquet.
        if is_parquet(p):
            return [name for name in FORMATS.candidates(peek_rows(p), p.name) if FORMATS.get(name).parquet]
        return FORMATS.candidates(peek_lines(p), p.name)

    claims = {str(p.relative_to(ROOT)): candidates(p) for p in files}
    assert len(claims) > 20 and {k: v for k, v in claims.items() if len(v) != 1} == {}
    by_golden = {p.parent.name: candidates(p)[0] for p in files if p.parent.parent == GOLDEN}
    assert all(fmt is not None and folder.startswith(fmt.replace("-", "_")) for folder, fmt in by_golden.items()), by_golden


def _claims_everything() -> LogFormat:
    return LogFormat(name="greedy-log", summary="claims every file", table="exchanges", sniff=lambda lines, name: True,
                     parse=_toy_parse, sniff_order=99, kinds=(RecordKind("greedy_record", 0),))


def test_ingest_refuses_an_ambiguous_file_named_explicitly(tmp_path: Path, toy: LogFormat, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "export.txt", TOY_LINE)
    FORMATS.register(_claims_everything())
    try:
        with pytest.raises(AmbiguousFormat, match="cannot tell the format of this file: it looks like toy-log or greedy-log") as raised:
            api.ingest(tmp_path / "case", [path])
        assert raised.value.file == str(path)
        assert not (tmp_path / "case" / "manifest.json").exists()
        with pytest.raises(SystemExit) as done:
            cli.main(["ingest", "--case", str(tmp_path / "case2"), str(path)])
        assert done.value.code == 2
        err = capsys.readouterr().err
        assert "export.txt" in err and "toy-log or greedy-log" in err and "--format toy-log" in err
        # Saying which it is settles it.
        result = api.ingest(tmp_path / "case3", [path], fmt="toy-log")
        assert [(f["format"], f["ingested"]) for f in result.manifest["files"]] == [("toy-log", 1)]
    finally:
        FORMATS.unregister("greedy-log")


def test_an_ambiguous_file_in_a_folder_is_a_whole_file_quarantine_row(tmp_path: Path, toy: LogFormat) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    _write(logs / "a-export.txt", TOY_LINE)
    _write(logs / "b-callbacks.jsonl", json.dumps({**PAYLOAD, "id": "chatcmpl-p2"}))
    FORMATS.register(dataclasses.replace(_claims_everything(), sniff=lambda lines, name: name.endswith(".txt")))
    try:
        result = api.ingest(tmp_path / "case", [logs])
    finally:
        FORMATS.unregister("greedy-log")
    files = {f["path"].rsplit("/", 1)[-1]: f for f in result.manifest["files"]}
    assert (files["a-export.txt"]["format"], files["a-export.txt"]["status"]) == (None, "skipped: format ambiguous")
    assert (files["b-callbacks.jsonl"]["format"], files["b-callbacks.jsonl"]["ingested"]) == ("litellm", 1)
    (row,) = pq.read_table(tmp_path / "case" / "quarantine.parquet").to_pylist()
    assert row["source_file"].endswith("a-export.txt") and row["source_line"] is None
    assert row["reason"].startswith("cannot tell the format of this file: it looks like toy-log or greedy-log; file skipped. Fix:")
    assert "--format toy-log" in row["reason"]
    assert [r["request_id"] for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()] == ["chatcmpl-p2"]


def test_the_registered_formats_are_the_documented_ones() -> None:
    # The ingest --format help (docs/cli.md is generated from it) lists the formats a user can pass.
    reference = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    # The help is wrapped: a line may break after any comma, "or", or a hyphen inside a name.
    ingest = re.sub(r"-\n\s+", "-", reference[reference.index("forensics ingest"):])
    documented = re.search(r"--format FORMAT\s+((?:[a-z-]+(?:,\s+|\s+or\s+))+[a-z-]+);\s+sniffed", ingest)
    assert documented is not None
    assert FORMATS.names() == re.split(r",\s+|\s+or\s+", documented.group(1)) == [
        "cloudflare-ai-gateway", "helicone", "langfuse", "litellm", "mapped", "openai-split", "sglang", "vllm"]
    # Sniffing order: a spend-log row would also pass the split-log test, and any bracketed line the engine's.
    # (mapped is never sniffed: its sniff says no to every file.)
    assert [f.name for f in FORMATS.in_sniff_order()] == ["litellm", "openai-split", "helicone", "cloudflare-ai-gateway", "langfuse",
                                                          "vllm", "sglang", "mapped"]


def test_every_registered_format_has_a_golden_folder() -> None:
    folders = [p.name for p in GOLDEN.iterdir() if p.is_dir()]
    for name in FORMATS.names():
        stem = name.replace("-", "_")
        assert [f for f in folders if f == stem or f.startswith(stem + "_")], f"no golden folder for {name} in tests/golden/ingest"


# --- the rest of the pipeline reads the registry ----------------------------------------------


def test_the_case_file_accepts_a_registered_format_and_only_while_registered(tmp_path: Path) -> None:
    case_file = tmp_path / "case.toml"
    case_file.write_text('name = "toy"\nmodel = "glm-5.3"\nwindow_start = "2026-08-27T00:00:00Z"\n'
                         'window_end = "2026-09-09T00:00:00Z"\nreal_ceiling_tokens = 681280\n'
                         'advertised_window_tokens = 1048576\n\n[[inputs]]\npath = "logs"\nformat = "toy-log"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="inputs\\[0\\].format = 'toy-log' is not a known format"):
        config.load_case_file(case_file)
    FORMATS.register(_toy())
    try:
        assert [i.format for i in config.load_case_file(case_file).inputs] == ["toy-log"]
    finally:
        FORMATS.unregister("toy-log")


def test_ingest_sniffs_a_registered_format(tmp_path: Path, toy: LogFormat) -> None:
    path = _write(tmp_path / "export.txt", TOY_LINE)
    result = api.ingest(tmp_path / "case", [path])
    assert [(f["format"], f["ingested"], f["quarantined"]) for f in result.manifest["files"]] == [("toy-log", 1, 0)]
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (row["request_id"], row["tenant_id"], row["record_kind"], row["response_text"]) == \
        ("chatcmpl-p1", "org-lisbon", "toy_record", "Ninety days.")


def test_the_cli_takes_a_registered_format_and_names_them_all_on_a_typo(
    tmp_path: Path, toy: LogFormat, capsys: pytest.CaptureFixture[str],
) -> None:
    path = _write(tmp_path / "export.txt", TOY_LINE)
    with pytest.raises(SystemExit) as done:
        cli.main(["ingest", "--case", str(tmp_path / "case"), "--format", "toy-log", "--json", "-q", str(path)])
    assert done.value.code == 0
    assert [f["format"] for f in json.loads(capsys.readouterr().out)["files"]] == ["toy-log"]
    with pytest.raises(SystemExit) as done:
        cli.main(["ingest", "--case", str(tmp_path / "case2"), "--format", "toy", str(path)])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "unknown format 'toy'" in err and "litellm, mapped, openai-split, sglang, toy-log" in err
    assert not (tmp_path / "case2").exists()


@pytest.mark.parametrize(("precedence", "kept"), [(-1, "toy_record"), (5, "logging_payload")])
def test_the_finaliser_ranks_copies_by_the_registered_precedence(tmp_path: Path, precedence: int, kept: str) -> None:
    # One request in two equally complete exports: the record kind with the lower precedence is kept.
    FORMATS.register(_toy(precedence=precedence))
    try:
        toy_file = _write(tmp_path / "a-export.txt", TOY_LINE)
        payloads = _write(tmp_path / "b-callbacks.jsonl", json.dumps(PAYLOAD))
        result = api.ingest(tmp_path / "case", [toy_file, payloads])
    finally:
        FORMATS.unregister("toy-log")
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert [(r["request_id"], r["record_kind"]) for r in rows] == [("chatcmpl-p1", kept)]
    assert result.manifest["duplicate_requests"] == 1


def test_an_unknown_format_is_an_error_naming_the_registered_ones(tmp_path: Path) -> None:
    path = _write(tmp_path / "export.txt", TOY_LINE)
    with pytest.raises(InputError, match="use one of cloudflare-ai-gateway, helicone, langfuse, litellm, mapped, openai-split, sglang, vllm, or omit"):
        api.ingest(tmp_path / "case", [path], fmt="toy-log")


# --- the simulator writes each format through its own writer ----------------------------------


def test_every_simulator_writer_writes_a_registered_format() -> None:
    from forensics.lab.simulate import FORMATS as SIMULATED
    from forensics.lab.simulate.writers import ENGINE_WRITERS, GATEWAY_WRITERS

    assert list(SIMULATED) == list(GATEWAY_WRITERS)
    assert {"litellm", "openai-split", "helicone", "langfuse", "cloudflare-ai-gateway"} <= set(GATEWAY_WRITERS) and {"sglang", "vllm"} <= set(ENGINE_WRITERS)
    for name in [*GATEWAY_WRITERS, *ENGINE_WRITERS]:
        assert name in FORMATS, f"the simulator writes {name!r}, which ingest does not read"


def test_a_duplicate_simulator_writer_is_an_error() -> None:
    from forensics.lab.simulate import writers

    class Impostor(writers.SGLangWriter):
        name = "sglang"

    with pytest.raises(RegistryError, match="writer for format 'sglang' is already registered"):
        writers._registered(writers.ENGINE_WRITERS)(Impostor)
    assert writers.ENGINE_WRITERS["sglang"] is writers.SGLangWriter


def test_an_unknown_simulated_format_is_an_error_naming_the_writers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["simulate", "--out", str(tmp_path / "sim"), "--format", "sglang"])
    assert done.value.code == 2
    assert "unknown format 'sglang'. Fix: use one of litellm, openai-split, helicone" in capsys.readouterr().err
    assert not (tmp_path / "sim").exists()


def test_the_sglang_writer_says_each_engine_event_as_the_sglang_parser_reads_it() -> None:
    from forensics.lab.simulate import events as ev
    from forensics.lab.simulate.writers import Outputs, SGLangWriter
    from forensics.tokens import Counter

    obj = {"rid": "r1", "bootstrap_room": 42, "stream": False}
    cases: list[tuple[Any, dict[str, Any]]] = [
        (ev.ServerStarted("decode", "m/path", "glm-5.3", 8), {"event": "unknown"}),
        (ev.WeightsLoaded(), {"event": "unknown"}),
        (ev.MemoryPool(681280, 1048576), {"event": "startup", "max_total_num_tokens": 681280, "context_len": 1048576}),
        (ev.RequestReceived("r1", obj), {"event": "request_received", "rid": "r1", "bootstrap_room": 42}),
        (ev.InputTooLong("r1", 700000, 681279), {"event": "over_limit", "rid": "r1", "input_len": 700000, "limit": 681279}),
        (ev.ExceedsMaxTokens("r1", 700000, 681280), {"event": "exceeds_max_tokens", "rid": "r1", "input_len": 700000, "limit": 681280}),
        (ev.PrefillBatch(100, 0, 0.5, 1), {"event": "prefill_batch", "role": "prefill"}),
        (ev.ReqTimeStats("r1", 42, 1, 0, 0, "prefill", 1.5),
         {"event": "req_time_stats", "rid": "r1", "bootstrap_room": 42, "input_len": 1, "output_len": 0, "role": "prefill"}),
        (ev.ReqTimeStats("r1", 42, 900, 0, 12, "decode", 80.0), {"event": "req_time_stats", "input_len": 900, "role": "decode"}),
        (ev.ContextCorruption("r1", 42, 43, 7), {"event": "context_corruption", "rid": "r1", "other_bootstrap_room": 43}),
        (ev.RequestFinished("r1", obj, {"text": "hi", "meta_info": {"finish_reason": {"type": "stop"}, "prompt_tokens": 1}}),
         {"event": "request_finished", "rid": "r1", "output_text": "hi", "finish_reason": "stop", "prompt_tokens": 1}),
        (ev.DecodeBatch(3, 2000, 0.4, 900.0), {"event": "decode_batch", "role": "decode"}),
        (ev.BootstrapFailed("r1", 42, "10.0.0.2:17001"), {"event": "bootstrap_failed", "rid": "r1", "bootstrap_room": 42}),
        (ev.TransferFailed("r1", 42), {"event": "transfer_failed", "rid": "r1", "bootstrap_room": 42}),
    ]
    writer = SGLangWriter(Outputs(Path("unused")))
    sglang = FORMATS.get("sglang")
    ctx = FileContext("engine/node_0.log", "0" * 64, "sglang", "UTC", "auto", Counter(None), "node_0.log")
    assert sglang.sniff([writer.render(1787997000.0, cases[0][0])], "node_0.log")
    for event, expected in cases:
        line = writer.render(1787997000.5, event)
        table, row = sglang.parse(line, 1, ctx)  # type: ignore[misc]
        assert table == "engine_events" and row["time"] is not None, line
        assert {k: row.get(k) for k in expected} == expected, line


SAMPLE = ROOT / "sample_logs"


def _faker_of_sample() -> str | None:
    truth = SAMPLE / "truth.json"
    return json.loads(truth.read_text(encoding="utf-8"))["generator"]["faker_version"] if truth.is_file() else None


@pytest.mark.skipif(_faker_of_sample() is None, reason="sample_logs/ is not in this checkout")
def test_the_writers_reproduce_the_shipped_sample_byte_for_byte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import faker

    from forensics.lab import simulate

    if faker.VERSION != _faker_of_sample():
        pytest.skip(f"sample_logs/ was written with Faker {_faker_of_sample()}, this is Faker {faker.VERSION}")
    generator = json.loads((SAMPLE / "truth.json").read_text(encoding="utf-8"))["generator"]
    monkeypatch.chdir(tmp_path)  # the command recorded in truth.json names the folder, not its path
    result = simulate.simulate(Path("sample_logs"), seed=generator["seed"], scale=generator["scale"], fmt=generator["format"])
    written = sorted(p.relative_to(result.out).as_posix() for p in result.out.rglob("*") if p.is_file())
    shipped = sorted(p.relative_to(SAMPLE).as_posix() for p in SAMPLE.rglob("*") if p.is_file())
    assert written == shipped
    for rel in written:
        assert (result.out / rel).read_bytes() == (SAMPLE / rel).read_bytes(), rel


# --- a format whose records are not lines ------------------------------------------------------


def _array_read(path: Path, problems: list[Any], span: Any) -> Iterator[Any]:
    from forensics.ingest.reader import Line

    for number, item in enumerate(json.loads(path.read_bytes()), 1):
        raw = json.dumps(item, sort_keys=True).encode()
        yield Line(number, raw.decode(), raw)


def _array_parse(text: str, line_number: int, ctx: FileContext) -> Output:
    item = json.loads(text)
    return _toy_parse("|".join(["TOY", item["id"], item["tenant"], str(item["micros"]), item["prompt"], item["answer"]]),
                      line_number, ctx)


def test_a_format_with_its_own_record_reader_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pretty-printed JSON array: its records span lines, so the file must not be cut into spans
    # even when it is bigger than a span.
    import forensics.ingest

    monkeypatch.setattr(forensics.ingest, "SPLIT_BYTES", 64)
    records = [{"id": f"r{i}", "tenant": "org-a", "micros": 1787997000000000 + i, "prompt": "q" * 40, "answer": "a"} for i in (1, 2, 3)]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(records, indent=2), encoding="utf-8")
    assert path.stat().st_size > 4 * 64
    FORMATS.register(LogFormat(name="toy-array", summary="a JSON array of records", table="exchanges",
                               sniff=lambda lines, name: lines[:1] == ["["], parse=_array_parse, sniff_order=5,
                               kinds=(RecordKind("toy_record", 0),), read=_array_read, splittable=False))
    try:
        result = api.ingest(tmp_path / "case", [path])
    finally:
        FORMATS.unregister("toy-array")
    (entry,) = result.manifest["files"]
    assert (entry["format"], entry["lines"], entry["ingested"], entry["quarantined"], entry["reconciled"]) == ("toy-array", 3, 3, 0, True)
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert [(r["request_id"], r["source_line"]) for r in rows] == [("r1", 1), ("r2", 2), ("r3", 3)]


@pytest.mark.parametrize("line, expected", [
    ("[2026-08-29 10:02:03 TP0] Req Time Stats(rid=chatcmpl-8f2c1a, bootstrap_room=4410378323519190018, input len=1, "
     "output len=256, type=decode): prealloc_queue_duration(1.00ms) transfer_queue_duration(0.50ms)",
     {"rid": "chatcmpl-8f2c1a", "bootstrap_room": 4410378323519190018, "input_len": 1, "output_len": 256, "role": "decode"}),
    ("[2026-08-29 10:01:56 TP0] Req Time Stats(rid=r-2, input len=812345, output len=0, type=prefill): queue_duration=1.0ms",
     {"rid": "r-2", "bootstrap_room": None, "input_len": 812345, "output_len": 0, "role": "prefill"}),
    ("[2026-08-29 10:01:56 TP0] ReqTimeStats(rid=r-3, bootstrap_room=7, input_len=1, cached_input_len=0, output_len=9, "
     "type=decode): x", {"rid": "r-3", "bootstrap_room": 7, "input_len": 1, "output_len": 9, "role": "decode"}),
], ids=["older_form_disaggregated", "older_form_no_room", "current_form"])
def test_sglang_request_time_stats_in_either_form(line: str, expected: dict[str, Any]) -> None:
    # SGLang's Req.log_time_stats wrote "Req Time Stats(rid=..., input len=..., output len=...)" before
    # "ReqTimeStats(... input_len=...)": read as an unknown event, the placeholder's decode half was lost.
    from forensics.ingest.base import FileContext
    from forensics.tokens import Counter

    ctx = FileContext("engine/node-b_0.log", "0" * 64, "sglang", "UTC", "auto", Counter(None), "node-b_0.log")
    table, row = FORMATS.get("sglang").parse(line, 1, ctx)  # type: ignore[misc]
    assert table == "engine_events" and row["event"] == "req_time_stats"
    assert {k: row.get(k) for k in expected} == expected
