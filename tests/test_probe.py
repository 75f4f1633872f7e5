"""forensics probe (issue 16) against a loopback OpenAI-compatible server that reproduces the bug.

The fake engine (tests/probe_server.py) advertises 20,000 tokens and really holds 13,000: in
``buggy`` mode a larger prompt is answered from the stale pages of the last prompt that fitted,
with ``prompt_tokens = 1``; ``fixed`` rejects it with HTTP 400; ``healthy`` holds all 20,000.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import replace as dataclasses_replace
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from probe_server import MARKER, FakeEngine, ProbeServer

from forensics.cli import main
from forensics.errors import ProbeError
from forensics.probe import (
    ClientSettings,
    ProbeResult,
    ProbeSettings,
    plan_tokens,
    probe,
)
from forensics.probe.core import TRUNCATION_RATIO
from forensics.probe.prompts import MarkerIndex, MarkerSource, build_prompt

ADVERTISED, POOL = 20_000, 13_000
KEY = "sk-test-4f1c9e0b7a2d"

Serve = Callable[..., ProbeServer]


@pytest.fixture
def serve() -> Iterator[Serve]:
    servers: list[ProbeServer] = []

    def start(mode: str = "buggy", **engine_attrs: Any) -> ProbeServer:
        engine = FakeEngine(mode, POOL, ADVERTISED, **({"count": engine_attrs.pop("count")} if "count" in engine_attrs else {}))
        for k, v in engine_attrs.items():
            setattr(engine, k, v)
        srv = ProbeServer(engine).__enter__()
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.__exit__(None, None, None)


def _settings(srv: ProbeServer, stream: bool = False, timeout: float = 10.0, retries: int = 3,
              api_key: str | None = None, **kw: Any) -> ProbeSettings:
    client = ClientSettings(srv.base_url, "leaky-model", api_key=api_key, timeout=timeout, retries=retries,
                            backoff=0.01, stream=stream)
    return ProbeSettings(client, ADVERTISED, **kw)


def _by_label(result: ProbeResult) -> dict[str, Any]:
    return {r.label: r for r in result.requests}


def _sent_texts(srv: ProbeServer) -> list[str]:
    return [r["body"]["messages"][-1]["content"] for r in srv.engine.received]


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(["probe", *argv])
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


def _args(srv: ProbeServer, *extra: str) -> list[str]:
    return ["--base-url", srv.base_url, "--model", "leaky-model", "--max-input-tokens", str(ADVERTISED), *extra]


# --- detection ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_buggy_server_answers_from_an_earlier_prompt_and_the_probe_says_whose(serve: Serve, stream: bool) -> None:
    srv = serve("buggy")
    result = probe(_settings(srv, stream=stream))
    assert result.verdict == "findings"
    recs = _by_label(result)
    # At half the advertised window the prompt fits the pool: answered from its own text.
    for label in ("L0.5-p1a", "L0.5-p1b"):
        assert recs[label].good and recs[label].own_markers_found >= 1
    texts = dict(zip([r.label for r in result.requests], _sent_texts(srv)))
    for label in ("L0.9-p1a", "L0.9-p1b", "L0.99-p1a", "L0.99-p1b"):
        rec = recs[label]
        assert set(rec.flags) == {"leak", "placeholder_usage", "incoherent"}
        assert rec.prompt_tokens == 1 and rec.planned_tokens > POOL
        # The evidence names the last prompt that fitted, and its markers really were in that prompt.
        assert list(rec.foreign) == ["L0.5-p1b"]
        for marker, position in rec.foreign["L0.5-p1b"]:
            assert marker in texts["L0.5-p1b"] and marker not in texts[label]
            assert MARKER.findall(texts["L0.5-p1b"])[position] == marker
    assert {f["request"] for f in result.findings} == {"L0.9-p1a", "L0.9-p1b", "L0.99-p1a", "L0.99-p1b"}
    if stream:
        assert all(r["body"]["stream"] and r["body"]["stream_options"] == {"include_usage": True} for r in srv.engine.received)


def test_cli_buggy_exits_1_with_the_evidence_in_a_private_report(serve: Serve, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("buggy")
    out = tmp_path / "probe-report"
    code, stdout, _ = _cli(_args(srv, "--out", str(out)), capsys)
    assert code == 1
    assert "finding: L0.9-p1a: leak (markers of L0.5-p1b)" in stdout and "FINDINGS" in stdout
    data = json.loads((out / "probe.json").read_text())
    assert data["verdict"] == "findings"
    leak = next(r for r in data["requests"] if r["label"] == "L0.9-p1a")
    assert leak["usage"]["prompt_tokens"] == 1 and leak["planned_tokens"] == 18_000
    assert leak["foreign_markers"][0]["from_prompt"] == "L0.5-p1b" and leak["foreign_markers"][0]["count"] >= 1
    assert "leak (markers of L0.5-p1b)" in (out / "probe.md").read_text()
    assert stat.S_IMODE(out.stat().st_mode) == 0o700
    for name in ("probe.json", "probe.md"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600
    # The answer text is never stored: only its hash and the markers found.
    assert "The first marker is" not in (out / "probe.json").read_text()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_a_reasoning_models_answer_is_searched_in_its_reasoning_too(serve: Serve, stream: bool, field: str) -> None:
    """A reasoning model given --max-tokens 64 spends them thinking: the markers, its own and a leaked
    prompt's, are in ``reasoning_content`` (SGLang) or ``reasoning`` (vLLM) and the content is null. The
    probe read the content alone: every answer was "incoherent", the leak unseen."""
    srv = serve("buggy", reasoning=field)
    recs = _by_label(probe(_settings(srv, stream=stream)))
    assert recs["L0.5-p1a"].good and recs["L0.5-p1a"].own_markers_found >= 1
    for label in ("L0.9-p1a", "L0.9-p1b", "L0.99-p1a", "L0.99-p1b"):
        assert "leak" in recs[label].flags and list(recs[label].foreign) == ["L0.5-p1b"]
    healthy = probe(_settings(serve("healthy", reasoning=field), stream=stream))
    assert healthy.verdict == "clean" and all(r.good and r.own_markers_found == 2 for r in healthy.requests)


@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_nested_too_deep_is_an_error_not_a_traceback(serve: Serve, stream: bool) -> None:
    """A hostile server's answer of 100,000 nested arrays made the JSON reader recurse past Python's limit."""
    srv = serve("healthy")
    deep = b"[" * 100_000 + b"]" * 100_000
    _answer_above(srv, POOL, lambda handler, body: _send(handler, b"data: " + deep + b"\n\n" if body["stream"] else deep,
                                                         "text/event-stream" if body["stream"] else "application/json"))
    rec = _by_label(probe(_settings(srv, stream=stream)))["L0.9-p1a"]
    assert rec.flags == ["error"] and "nested too deep" in (rec.error or "")


def test_mistral_thinking_parts_are_searched(serve: Serve) -> None:
    """Magistral writes its reasoning as a content part ``{"type": "thinking", "thinking": [text parts]}``."""
    srv = serve("buggy")

    def thinking(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        stale = srv.engine.pool[len(srv.engine.pool) // 3:]
        parts = [{"type": "thinking", "thinking": [{"type": "text", "text": srv.engine.answer(stale)}]}, {"type": "text", "text": "ok"}]
        _send(handler, _completion(srv, body, parts, usage={"prompt_tokens": 1, "completion_tokens": 9}))

    _answer_above(srv, POOL, thinking)
    recs = _by_label(probe(_settings(srv)))
    assert "leak" in recs["L0.9-p1a"].flags and list(recs["L0.9-p1a"].foreign) == ["L0.5-p1b"]


@pytest.mark.parametrize("stream", [False, True])
def test_healthy_server_is_clean(serve: Serve, stream: bool, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("healthy")
    result = probe(_settings(srv, stream=stream))
    assert result.verdict == "clean" and result.findings == [] and result.warnings == []
    for rec in result.requests:
        assert rec.good and rec.own_markers_found == 2  # first and last, upper-cased and quoted by the model
        assert abs(rec.prompt_tokens - rec.planned_tokens) <= 1  # calibration sizes prompts in the engine's tokens
    srv.engine.reset()
    code, stdout, _ = _cli(_args(srv, *(["--stream"] if stream else [])), capsys)
    assert code == 0 and "CLEAN" in stdout


def test_a_server_that_silently_reads_only_the_head_of_a_prompt_is_a_finding(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    # It answered from the part it kept (its first marker is there) and counted that part: every answer passed,
    # the verdict was CLEAN and the ceiling the advertised maximum.
    srv = serve("truncating")
    result = probe(_settings(srv))
    assert result.verdict != "clean"
    recs = _by_label(result)
    assert recs["L0.5-p1a"].good
    for label in ("L0.9-p1a", "L0.9-p1b", "L0.99-p1a", "L0.99-p1b"):
        assert recs[label].flags == ["truncated_usage"] and recs[label].own_markers_found >= 1
    srv.engine.reset()
    code, stdout, _ = _cli(_args(srv), capsys)
    assert code == 1 and "CLEAN" not in stdout
    # The ceiling is where the count falls a tenth short (the cut itself is not seen closer): not the advertised maximum.
    srv.engine.reset()
    c = probe(_settings(srv, find_ceiling=True)).ceiling
    assert c is not None and c.failing_tokens is not None and POOL <= c.healthy_tokens <= POOL / TRUNCATION_RATIO


def test_fixed_server_rejects_honestly_and_is_no_false_alarm(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("fixed")
    result = probe(_settings(srv))
    assert result.verdict == "clean" and result.findings == []
    recs = _by_label(result)
    assert recs["L0.5-p1a"].good
    for label in ("L0.9-p1a", "L0.9-p1b", "L0.99-p1a", "L0.99-p1b"):
        assert recs[label].status == 400 and recs[label].flags == ["rejected_below_advertised"]
    assert any("rejected at 18000 planned tokens, below the advertised 20000" in w for w in result.warnings)
    srv.engine.reset()
    code, stdout, _ = _cli(_args(srv), capsys)
    assert code == 0 and "warning: L0.9-p1a: rejected" in stdout


def _refuse_above(srv: ProbeServer, tokens: int, status: int, message: str) -> None:
    """Answer every prompt above ``tokens`` (the engine's count) with ``status``, as a gateway might."""
    engine, handle = srv.engine, srv.engine.handle

    def refusing(body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, str], dict[str, Any]]:
        if engine.prompt_tokens(body["messages"][-1]["content"]) > tokens:
            engine.received.append({"body": body, "headers": headers})
            return status, {}, {"error": {"message": message}}
        return handle(body, headers)

    engine.handle = refusing  # type: ignore[method-assign]


@pytest.mark.parametrize("status", [401, 403, 404])
def test_an_auth_or_url_error_at_a_level_is_untested_not_an_honest_refusal(
        serve: Serve, status: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Calibration and the 0.5 level pass; every larger prompt gets an answer that says nothing about its size.
    srv = serve("healthy")
    _refuse_above(srv, POOL, status, "invalid api key")
    out = tmp_path / "r"
    code, stdout, _ = _cli(_args(srv, "--find-ceiling", "--out", str(out)), capsys)
    assert code == 2 and "UNTESTED" in stdout and "CLEAN" not in stdout
    assert f"warning: L0.9-p1a: HTTP {status}" in stdout and "rejected at" not in stdout
    data = json.loads((out / "probe.json").read_text())
    assert data["verdict"] == "untested" and data["untested_levels"] == [0.9, 0.99]
    assert {r["label"]: r["flags"] for r in data["requests"]}["L0.9-p1a"] == ["error"]
    # No size failed, so there is no ceiling to report: nothing claims one.
    assert data["ceiling"] is None and "ceiling" not in stdout and "## Ceiling" not in (out / "probe.md").read_text()


@pytest.mark.parametrize("status", [413, 422])
def test_a_413_or_422_is_a_size_refusal_like_a_400(serve: Serve, status: int) -> None:
    srv = serve("healthy")
    _refuse_above(srv, POOL, status, f"Input length exceeds the maximum allowed length ({POOL} tokens)")
    result = probe(_settings(srv))
    assert result.verdict == "clean"
    assert _by_label(result)["L0.9-p1a"].flags == ["rejected_below_advertised"]


Respond = Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]


def _answer_above(srv: ProbeServer, tokens: int, respond: Respond) -> None:
    """Let ``respond`` write the whole HTTP answer to every prompt above ``tokens``; the engine answers the rest."""
    engine, base = srv.engine, srv.httpd.RequestHandlerClass

    class Handler(base):  # type: ignore[misc, valid-type]
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers["Content-Length"]))
            body = json.loads(raw)
            if engine.prompt_tokens(body["messages"][-1]["content"]) > tokens:
                engine.received.append({"body": body, "headers": dict(self.headers.items())})
                respond(self, body)
                return
            self.rfile = io.BytesIO(raw)  # the engine's handler reads the body again
            super().do_POST()

    srv.httpd.RequestHandlerClass = Handler


def _send(handler: BaseHTTPRequestHandler, raw: bytes, content_type: str = "application/json") -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(raw)))
    handler.end_headers()
    handler.wfile.write(raw)


def _completion(srv: ProbeServer, body: dict[str, Any], content: Any, usage: Any = None) -> bytes:
    """A chat completion answering ``body`` with ``content`` as given (any JSON value) and the engine's usage."""
    n = srv.engine.prompt_tokens(body["messages"][-1]["content"])
    out = {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": n, "completion_tokens": 9} if usage is None else usage}
    return json.dumps(out).encode()


def _events(*chunks: Any) -> bytes:
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


@pytest.mark.parametrize("stream", [False, True])
def test_content_as_a_list_of_text_parts_is_read_as_the_joined_text(serve: Serve, stream: bool) -> None:
    srv = serve("healthy")

    def parts(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        answer = srv.engine.answer(body["messages"][-1]["content"])
        content = [{"type": "text", "text": answer[:20]}, {"type": "text", "text": answer[20:]}]
        if not body["stream"]:
            _send(handler, _completion(srv, body, content))
            return
        usage = {"prompt_tokens": srv.engine.prompt_tokens(body["messages"][-1]["content"]), "completion_tokens": 9}
        _send(handler, _events({"choices": [{"delta": {"content": content}}]}, {"choices": [], "usage": usage}),
              "text/event-stream")

    _answer_above(srv, 0, parts)  # every request, calibration too
    result = probe(_settings(srv, stream=stream))
    assert result.verdict == "clean"
    assert all(r.good and r.own_markers_found == 2 for r in result.requests)


def _content_number(srv: ProbeServer, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    _send(handler, _completion(srv, body, 12345))


def _usage_list(srv: ProbeServer, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    _send(handler, _completion(srv, body, srv.engine.answer(body["messages"][-1]["content"]), usage=[1, 2]))


def _chunk_list(srv: ProbeServer, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    _send(handler, _events([1, 2]), "text/event-stream")


def _delta_number(srv: ProbeServer, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    _send(handler, _events({"choices": [{"delta": {"content": 7}}]}), "text/event-stream")


@pytest.mark.parametrize(("respond", "stream", "reason"), [
    (_content_number, False, "HTTP 200 but choices[0].message.content is a number, not a string or a list of content parts"),
    (_usage_list, False, "HTTP 200 but usage is an array, not an object"),
    (_chunk_list, True, "HTTP 200 but a stream chunk is an array, not an object"),
    (_delta_number, True, "HTTP 200 but a stream chunk's delta.content is a number, not a string or a list of content parts"),
])
def test_an_answer_of_the_wrong_shape_is_an_error_in_the_report(
        serve: Serve, respond: Callable[..., None], stream: bool, reason: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("healthy")
    _answer_above(srv, POOL, lambda handler, body: respond(srv, handler, body))
    out = tmp_path / "r"
    code, stdout, err = _cli(_args(srv, "--out", str(out), *(["--stream"] if stream else [])), capsys)
    assert code == 2 and "UNTESTED" in stdout and "internal error" not in err and "Traceback" not in err
    assert f"warning: L0.9-p1a: {reason}" in stdout
    data = json.loads((out / "probe.json").read_text())
    rec = {r["label"]: r for r in data["requests"]}["L0.9-p1a"]
    assert rec["status"] == 200 and rec["error"] == reason and rec["flags"] == ["error"]
    assert data["untested_levels"] == [0.9, 0.99]


def _word_tokenizer(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_an_answer_about_nothing_is_incoherent_even_without_a_leak(serve: Serve, tmp_path: Path) -> None:
    # A freshly started buggy engine, and no calibration requests (--tokenizer): the pool is empty,
    # so the over-pool answer quotes no marker at all, neither its own nor another prompt's.
    srv = serve("buggy", count=lambda text: len(text.split()))
    result = probe(_settings(srv, levels=(0.9,), tokenizer=_word_tokenizer(tmp_path)))
    rec = _by_label(result)["L0.9-p1a"]
    assert rec.flags == ["placeholder_usage", "incoherent"] and rec.foreign == {}
    assert result.verdict == "findings"


def test_calibration_refuses_an_impossible_usage_count(serve: Serve) -> None:
    srv = serve("buggy")
    srv.engine.pool_tokens = 0  # every prompt gets the placeholder, calibration ones too
    with pytest.raises(ProbeError, match="impossible for its size"):
        probe(_settings(srv))


def test_no_usage_in_the_answers_asks_for_a_tokenizer(serve: Serve) -> None:
    with pytest.raises(ProbeError, match="--tokenizer"):
        probe(_settings(serve("healthy", usage=False)))


# --- ceiling ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["buggy", "fixed"])
def test_ceiling_is_found_within_2_percent_in_at_most_20_requests(serve: Serve, mode: str) -> None:
    srv = serve(mode)
    result = probe(_settings(srv, find_ceiling=True))
    c = result.ceiling
    assert c is not None and c.stopped is None
    assert c.healthy_tokens <= POOL < c.failing_tokens
    assert c.failing_tokens - c.healthy_tokens <= 0.02 * ADVERTISED
    assert 1 <= c.requests <= 20 and len(c.steps) == c.requests
    recs = _by_label(result)
    engine = srv.engine
    texts = dict(zip([r.label for r in result.requests], _sent_texts(srv)))
    for label in c.steps:  # every step is evidence: its size in the engine's own count decides
        fits = engine.prompt_tokens(texts[label]) <= POOL
        assert recs[label].good == fits
    assert result.to_json()["ceiling"]["ceiling_tokens"] == c.healthy_tokens


def test_ceiling_of_a_healthy_server_is_the_advertised_maximum(serve: Serve) -> None:
    result = probe(_settings(serve("healthy"), levels=(0.5, 0.9), find_ceiling=True))
    c = result.ceiling
    assert c is not None and c.failing_tokens is None and c.requests == 1
    assert c.healthy_tokens >= 0.98 * ADVERTISED
    # The default levels already answered at 0.99 of the maximum: within 2%, no request needed.
    result = probe(_settings(serve("healthy"), find_ceiling=True))
    assert result.ceiling is not None and result.ceiling.requests == 0 and result.ceiling.failing_tokens is None
    assert result.ceiling.healthy_tokens == max(r.planned_tokens for r in result.requests) >= 0.98 * ADVERTISED


# --- safety -------------------------------------------------------------------------------------


def test_a_plan_above_the_budget_is_refused_before_anything_is_sent(serve: Serve,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("healthy")
    settings = _settings(srv, max_total_tokens=50_000)
    with pytest.raises(ProbeError, match="nothing was sent"):
        probe(settings)
    code, _, err = _cli(_args(srv, "--max-total-tokens", "50000"), capsys)
    assert code == 2 and f"raise --max-total-tokens to {plan_tokens(settings)}" in " ".join(err.split())
    assert srv.engine.received == []


def test_the_budget_stops_the_run_when_retries_use_it_up(serve: Serve) -> None:
    srv = serve("healthy", fail_first=2)  # two 429s: the first request costs three attempts
    base = _settings(srv)
    settings = _settings(srv, max_total_tokens=plan_tokens(base))
    result = probe(settings)
    assert result.spent_tokens <= settings.max_total_tokens
    assert result.stopped is not None and "token budget" in result.stopped
    assert result.verdict == "untested"
    assert result.requests[0].attempts == 3


def test_429_is_retried_honouring_retry_after(serve: Serve) -> None:
    srv = serve("healthy", fail_first=2)
    result = probe(_settings(srv, levels=(0.5,)))
    assert result.verdict == "clean"
    assert result.requests[0].attempts == 3 and result.requests[0].status == 200
    assert len(srv.engine.received) == len(result.requests) + 2


def test_a_long_retry_after_is_not_waited_for(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("healthy", fail_first=1000, retry_after="3600")
    code, _, err = _cli(_args(srv), capsys)
    assert code == 2 and "Retry-After 3600 s is above the backoff cap" in " ".join(err.split())
    assert len(srv.engine.received) == 1


def test_server_errors_beyond_the_retries_mean_could_not_test(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("healthy", fail_first=1000, fail_status=503)
    code, _, err = _cli(_args(srv, "--retries", "1"), capsys)
    assert code == 2 and "HTTP 503" in err
    assert len(srv.engine.received) == 2  # one try and one retry, then no more
    assert "Traceback" not in err


def test_a_request_slower_than_the_timeout_is_reported(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("slow")
    code, _, err = _cli(_args(srv, "--timeout", "0.3", "--retries", "0"), capsys)
    assert code == 2 and "timeout after 0.3 s" in err


def test_a_stream_trickling_past_the_timeout_is_cut_off(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    # Each chunk arrives well within the socket timeout; the whole answer does not.
    srv = serve("healthy", chunk_delay=0.15)
    code, _, err = _cli(_args(srv, "--stream", "--timeout", "0.5", "--retries", "0"), capsys)
    assert code == 2 and "timeout after 0.5 s (stream)" in err


def _trickle(srv: ProbeServer, handler: BaseHTTPRequestHandler, head: bytes, body: bytes, delay: float) -> None:
    """Write ``head`` at once, then ``body`` a byte every ``delay`` seconds until done, the client gone or the server stopped."""
    try:
        handler.wfile.write(head)
        handler.wfile.flush()
        for i in range(len(body)):
            if srv.engine.release.wait(delay):
                return
            handler.wfile.write(body[i:i + 1])
            handler.wfile.flush()
    except OSError:
        pass


def _trickled_json(srv: ProbeServer, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    # Headers and Content-Length at once, then the body a byte at a time: every read is quick.
    raw = _completion(srv, body, srv.engine.answer(body["messages"][-1]["content"]))
    head = (f"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n").encode()
    _trickle(srv, handler, head, raw, 0.02)


def _trickled_event(srv: ProbeServer, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    # One server-sent event whose line never ends: a line reader waits for its newline forever.
    head = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    _trickle(srv, handler, head, b'data: {"choices": [{"delta": {"content": "' + b"a" * 1000, 0.02)


@pytest.mark.parametrize(("respond", "stream", "message"), [
    (_trickled_json, False, "timeout after 0.5 s"),
    (_trickled_event, True, "timeout after 0.5 s (stream)"),
])
def test_a_body_trickled_a_byte_at_a_time_is_cut_off_at_the_timeout(
        serve: Serve, respond: Callable[..., None], stream: bool, message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("healthy")
    _answer_above(srv, POOL, lambda handler, body: respond(srv, handler, body))
    start = time.monotonic()
    code, stdout, _ = _cli(_args(srv, "--levels", "0.9", "--timeout", "0.5", "--retries", "0",
                                 *(["--stream"] if stream else [])), capsys)
    assert time.monotonic() - start < 3  # two trickled requests of 0.5 s each, not the whole body
    assert code == 2 and f"warning: L0.9-p1a: {message}" in stdout


def _huge_json(srv: ProbeServer, handler: BaseHTTPRequestHandler, body: dict[str, Any], length: bool) -> None:
    # A real answer padded to 6 MB, with or without a Content-Length that says so up front.
    raw = _completion(srv, body, srv.engine.answer(body["messages"][-1]["content"]) + " x" * 3_000_000)
    head = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n" + (f"Content-Length: {len(raw)}\r\n" if length else "")
    try:
        handler.wfile.write(head.encode() + b"\r\n" + raw)
    except OSError:  # the probe hung up once it had read enough
        pass


def _huge_stream(srv: ProbeServer, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    answer = srv.engine.answer(body["messages"][-1]["content"])
    try:
        handler.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        handler.wfile.write(_events({"choices": [{"delta": {"content": answer}}]}, *[{"choices": [{"delta": {"content": " x" * 1000}}]}] * 3000))
    except OSError:
        pass


@pytest.mark.parametrize(("respond", "stream"), [
    (lambda srv, handler, body: _huge_json(srv, handler, body, length=True), False),
    (lambda srv, handler, body: _huge_json(srv, handler, body, length=False), False),
    (_huge_stream, True),
], ids=["json-with-length", "json-until-close", "stream"])
def test_an_answer_over_the_size_cap_is_an_error_not_read_whole(
        serve: Serve, respond: Callable[..., None], stream: bool, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("healthy")
    _answer_above(srv, POOL, lambda handler, body: respond(srv, handler, body))
    out = tmp_path / "r"
    code, stdout, _ = _cli(_args(srv, "--levels", "0.9", "--out", str(out), *(["--stream"] if stream else [])), capsys)
    reason = "HTTP 200 but the answer is over 4 MiB, far more than --max-tokens 64 asks for; not read further"
    assert code == 2 and f"warning: L0.9-p1a: {reason}" in stdout
    rec = {r["label"]: r for r in json.loads((out / "probe.json").read_text())["requests"]}["L0.9-p1a"]
    assert rec["error"] == reason and rec["answer_sha256"] is None


def test_connection_refused_means_could_not_test(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = _cli(["--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", "--max-input-tokens", "20000"], capsys)
    assert code == 2 and "connection refused" in err


def test_api_key_comes_from_the_environment_and_is_never_output(serve: Serve, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PROBE_TEST_KEY", KEY)
    srv = serve("buggy")
    out = tmp_path / "r"
    code, stdout, err = _cli(_args(srv, "--api-key-env", "PROBE_TEST_KEY", "--out", str(out), "--find-ceiling"), capsys)
    assert code == 1
    assert {r["headers"].get("Authorization") for r in srv.engine.received} == {f"Bearer {KEY}"}
    code2, stdout2, err2 = _cli(_args(srv, "--api-key-env", "PROBE_TEST_KEY", "--json"), capsys)
    assert code2 == 1
    assert json.loads(stdout2)["endpoint"] == {"api_key_env": "PROBE_TEST_KEY", "api_key_sent": True,
                                               "base_url": srv.base_url, "model": "leaky-model", "stream": False}
    # A server that echoes the Authorization header in its error body.
    srv.engine.echo_auth = True
    code3, stdout3, err3 = _cli(_args(srv, "--api-key-env", "PROBE_TEST_KEY"), capsys)
    assert code3 == 2 and "[redacted]" in err3
    for text in (stdout, err, stdout2, err2, stdout3, err3, *(p.read_text() for p in out.iterdir())):
        assert KEY not in text


def test_a_missing_key_variable_is_named(serve: Serve, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("PROBE_NO_SUCH_KEY", raising=False)
    srv = serve("healthy")
    code, _, err = _cli(_args(srv, "--api-key-env", "PROBE_NO_SUCH_KEY"), capsys)
    assert code == 2 and "PROBE_NO_SUCH_KEY" in err and srv.engine.received == []


def test_bad_options_are_an_error_not_a_traceback(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("healthy")
    for bad in ("0.5,abc", "0,0.5", "1.5"):
        code, _, err = _cli(_args(srv, "--levels", bad), capsys)
        assert code == 2 and "--levels" in err and "Traceback" not in err
    for option, value in (("--pairs", "0"), ("--timeout", "0"), ("--max-tokens", "1")):
        code, _, err = _cli(_args(srv, option, value), capsys)
        assert code == 2 and option in err and "Traceback" not in err
    code, _, err = _cli(["--base-url", "ftp://host/v1", "--model", "m", "--max-input-tokens", "20000"], capsys)
    assert code == 2 and "is not an http(s) URL" in err
    code, _, err = _cli(["--base-url", srv.base_url, "--model", "m", "--max-input-tokens", "1000"], capsys)
    assert code == 2 and "--max-input-tokens 1000 is too small" in err
    assert srv.engine.received == []


def test_a_base_url_with_credentials_or_a_query_is_refused_without_echoing_them(
        serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Neither was ever sent (only host, port and path are), and the URL is written into the report.
    srv = serve("healthy")
    port = srv.httpd.server_address[1]
    out = tmp_path / "r"
    for url, message in ((f"http://probe:s3cret@127.0.0.1:{port}/v1", "holds a user name or password"),
                         ("http://probe:s3cret@127.0.0.1:bad/v1", "holds a user name or password"),
                         ("ftp://probe:s3cret@127.0.0.1/v1", "is not an http(s) URL"),
                         (f"http://127.0.0.1:{port}/v1?key=s3cret", "has a query string"),
                         ("http://[::1/v1", "is not an http(s) URL")):
        code, stdout, err = _cli(["--base-url", url, "--model", "m", "--max-input-tokens", "20000", "--out", str(out)], capsys)
        assert code == 2 and message in err and "Traceback" not in err and "internal error" not in err, url
        assert "s3cret" not in stdout + err and ("[redacted]" in err or "[::1" in url)
    assert srv.engine.received == [] and not out.exists()


# --- prompts and repeatability ------------------------------------------------------------------


def test_prompts_hold_only_generated_markers_and_never_repeat_one(serve: Serve) -> None:
    srv = serve("healthy")
    probe(_settings(srv, pairs=2, find_ceiling=True))
    seen: set[str] = set()
    for text in _sent_texts(srv):
        head, rest = text.split("\n\n", 1)
        body, tail = rest.rsplit("\n\n", 1)
        assert re.fullmatch(r'Canary check [A-Za-z0-9.-]+\. Below is a list of generated markers: words that start with "zq"\. '
                            r"Reply with only the first marker and the last marker of the list, exactly as written, "
                            r"separated by a space\.", head)
        assert tail == "End of the list. Reply with only the first and the last marker of the list above."
        words = body.split()
        assert all(MARKER.fullmatch(w) for w in words)
        assert not seen & set(words)
        seen |= set(words)


def test_same_seed_same_prompts_and_byte_identical_report(serve: Serve, tmp_path: Path) -> None:
    from forensics.probe import write_report

    srv = serve("buggy")
    reports, sent = [], []
    for run in range(2):
        srv.engine.reset()
        result = probe(_settings(srv, find_ceiling=True, seed=11))
        write_report(result, tmp_path / f"r{run}")
        reports.append((tmp_path / f"r{run}" / "probe.json").read_bytes())
        sent.append(_sent_texts(srv))
    assert sent[0] == sent[1] and reports[0] == reports[1]
    srv.engine.reset()
    probe(_settings(srv, levels=(0.5,), seed=12))
    assert _sent_texts(srv)[0] != sent[0][0]


def test_marker_search_tolerates_what_a_real_model_does_to_a_marker() -> None:
    source = MarkerSource(3)
    own, other = build_prompt("A", 400, source), build_prompt("B", 400, source)
    index = MarkerIndex()
    index.add(own)
    index.add(other)
    m = own.markers[0]
    for answer in (m, m.upper(), f"**`{m}`**", f"{m[:6]} {m[6:]}", f"{m[:7]}-{m[7:]}", f'"{m[2:]}"'):
        assert index.find(answer) == {"A": [(m, 0)]}, answer
    assert index.find(f"first {m}, and also {other.markers[-1]}") == {"A": [(m, 0)], "B": [(other.markers[-1], len(other.markers) - 1)]}
    assert index.find("The first marker is zq and the last one is unclear.") == {}


def test_tokenizer_sizes_prompts_without_calibration_requests(serve: Serve, tmp_path: Path) -> None:
    path = _word_tokenizer(tmp_path)
    srv = serve("healthy", count=lambda text: len(text.split()))
    result = probe(_settings(srv, tokenizer=path))
    assert result.calibration.source == "tokenizer"
    assert [r.phase for r in result.requests] == ["level"] * 6  # nothing sent to calibrate
    assert result.verdict == "clean"
    # The engine counts words plus its template: the tokenizer plan is that, less the template.
    for rec in result.requests:
        assert 0 <= rec.prompt_tokens - rec.planned_tokens <= 13
    assert os.path.basename(str(path)) == result.to_json()["parameters"]["tokenizer"]


def test_the_default_budget_covers_the_default_plan_for_a_1m_window() -> None:
    from forensics.probe import DEFAULT_MAX_TOTAL_TOKENS

    settings = ProbeSettings(ClientSettings("http://127.0.0.1:9/v1", "m"), 1_048_576)
    assert plan_tokens(settings) <= DEFAULT_MAX_TOTAL_TOKENS
    assert plan_tokens(dataclasses_replace(settings, find_ceiling=True)) > DEFAULT_MAX_TOTAL_TOKENS  # README: raise it


def test_a_leak_is_found_from_the_markers_alone_when_usage_is_missing(serve: Serve, tmp_path: Path) -> None:
    srv = serve("buggy", usage=False, count=lambda text: len(text.split()))
    result = probe(_settings(srv, stream=True, tokenizer=_word_tokenizer(tmp_path)))
    recs = _by_label(result)
    assert recs["L0.5-p1b"].good
    assert recs["L0.9-p1b"].flags == ["leak", "incoherent"]  # no usage: no placeholder check, the markers still tell
    assert recs["L0.9-p1b"].prompt_tokens is None and list(recs["L0.9-p1b"].foreign) == ["L0.5-p1b"]
    assert result.verdict == "findings"


def test_the_table_shows_names_literally(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("healthy")
    code, out, _ = _cli(["--base-url", srv.base_url, "--model", ":x:[b]m[/b]", "--max-input-tokens", str(ADVERTISED),
                         "--levels", "0.5"], capsys)
    assert code == 0 and ":x:[b]m[/b]" in out and "\u274c" not in out


def test_interim_responses_fed_without_end_are_cut_off_at_the_timeout(serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    # "100 Continue" every 50 ms: each read quick, http.client reading them all inside one call; a request took the
    # server's whole minute, not --timeout.
    srv = serve("healthy")

    def interim(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        try:
            for _ in range(1200):
                if srv.engine.release.wait(0.05):
                    return
                handler.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                handler.wfile.flush()
        except OSError:
            pass

    _answer_above(srv, POOL, interim)
    start = time.monotonic()
    code, stdout, _ = _cli(_args(srv, "--levels", "0.9", "--timeout", "0.5", "--retries", "0"), capsys)
    assert time.monotonic() - start < 4
    assert code == 2 and "warning: L0.9-p1a: timeout after 0.5 s" in stdout


def test_a_stray_byte_that_is_not_utf8_does_not_hide_a_leak(serve: Serve) -> None:
    # The whole answer was read as "HTTP 200 without choices[0].message.content": the leak and the placeholder unseen.
    srv = serve("buggy")
    engine = srv.engine

    def stray(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        start = len(engine.pool) // 3
        answer = engine.answer(engine.pool[start:start + 3000])
        _send(handler, _completion(srv, body, answer + " caf\u00e9", usage={"prompt_tokens": 1, "completion_tokens": 9})
              .replace(b"caf\\u00e9", b"caf\xe9"))

    _answer_above(srv, POOL, stray)
    result = probe(_settings(srv))
    recs = _by_label(result)
    assert {"leak", "placeholder_usage"} <= set(recs["L0.9-p1a"].flags)


@pytest.mark.parametrize(("respond", "message"), [
    ("gzip", "HTTP 200 but the answer is compressed (Content-Encoding: gzip), which the probe did not ask for"),
    ("redirect", "HTTP 307 (a redirect to 'http://elsewhere.example/v1/chat/completions', not followed"),
])
def test_answers_the_probe_cannot_use_say_why(serve: Serve, respond: str, message: str) -> None:
    srv = serve("healthy")

    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if respond == "gzip":
            raw = gzip.compress(_completion(srv, body, srv.engine.answer(body["messages"][-1]["content"])))
            handler.send_response(200)
            handler.send_header("Content-Encoding", "gzip")
        else:
            raw = b""
            handler.send_response(307)
            handler.send_header("Location", "http://elsewhere.example/v1/chat/completions")
        handler.send_header("Content-Length", str(len(raw)))
        handler.end_headers()
        handler.wfile.write(raw)

    _answer_above(srv, POOL, answer)
    result = probe(_settings(srv, levels=(0.9,), retries=0))
    assert any(message in w for w in result.warnings), result.warnings


def test_a_stream_with_lone_cr_line_ends_is_read(serve: Serve) -> None:
    # The event stream format allows CR alone as a line end: every chunk read as "stream chunk is not JSON".
    srv = serve("healthy")

    def cr(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        n = srv.engine.prompt_tokens(body["messages"][-1]["content"])
        answer = srv.engine.answer(body["messages"][-1]["content"])
        raw = _events({"choices": [{"delta": {"content": answer[:15]}}]}, {"choices": [{"delta": {"content": answer[15:]}}]},
                      {"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 9}}).replace(b"\n", b"\r")
        _send(handler, raw, "text/event-stream")

    _answer_above(srv, POOL, cr)
    result = probe(_settings(srv, stream=True, levels=(0.9,)))
    assert result.verdict == "clean" and all(r.good for r in result.requests)


def test_an_out_that_cannot_be_written_is_refused_before_a_token_is_spent(serve: Serve, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # A file at --out was found after the whole run: an internal error, the verdict (a leak: exit 1) never printed.
    srv = serve("buggy")
    target = tmp_path / "afile"
    target.write_text("x")
    code, _, err = _cli(_args(srv, "--out", str(target)), capsys)
    assert code == 2 and "--out is a file, not a folder" in err and "internal error" not in err
    dangling = tmp_path / "link"
    dangling.symlink_to(tmp_path / "nowhere")
    code, _, err = _cli(_args(srv, "--out", str(dangling)), capsys)
    assert code == 2 and "--out is a link to a folder that is not there" in err
    assert srv.engine.received == []


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "0"])
def test_a_timeout_that_is_no_number_of_seconds_is_refused(serve: Serve, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    srv = serve("healthy")
    code, _, err = _cli(_args(srv, "--timeout", value), capsys)
    assert code == 2 and "--timeout must be a number of seconds above 0" in err and "internal error" not in err
    assert srv.engine.received == []
