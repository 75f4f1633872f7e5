"""vLLM engine logs: the RequestLogger lines of ``--enable-log-requests`` (log-formats.md §4).

A line is ``LEVEL MM-DD HH:MM:SS [file.py:N] message`` (older releases: ``file.py:N]`` without
the opening bracket; recent ones prefix ``(APIServer pid=N)``). The request lines, all keyed by
the request id, come in these variants:

- up to v0.10: ``Received request ID: prompt: '…', params: SamplingParams(…), prompt_token_ids:
  […], [prompt_embeds shape: …, ]lora_request: …[, prompt_adapter_request: …].`` (one line);
- from v0.10: ``Request ID details: prompt: '…', prompt_token_ids: […], prompt_embeds shape: ….``
  (logged at DEBUG) and ``Received request ID: params: SamplingParams(…), lora_request: ….``;
- ``Generated response ID[ (streaming complete| streaming delta)]: output: '…',
  output_token_ids: […], finish_reason: …`` (``--enable-log-outputs``);
- ``Aborted request ID.`` / ``Aborted request(s) ID.`` (the engine gave up on the request: a
  ``request_finished`` with ``finish_reason`` abort, as SGLang logs one; a line naming several
  comma-joined ids cannot name one request and stays ``unknown``);
- NixlConnector's ``Releasing expired KV blocks for request ID which were retrieved by 0 decode
  worker(s) …`` on a prefill node: no decode node fetched the KV cache, a failed hand-over
  (``bootstrap_failed``, SGLang's ``Prefill bootstrap failed``).

The prompt and output are Python ``repr`` strings; ``len(prompt_token_ids)`` is the prompt's
exact length in tokens as the engine saw it, kept in ``input_len``. The KV-cache line (``GPU KV
cache size: N tokens``) and the ``Maximum concurrency for N tokens per request`` line give the
pool size and the advertised window, as SGLang's startup line does. Every line is kept as an
engine event; one not understood stays ``unknown`` with its raw text. vLLM's default time format
has no year, so such a line's ``time`` is null (a ``--log-config`` with a full date fills it).

The node is the file name's hostname (``{hostname}_{rank}.log``, its rotated copies included, as
for SGLang). In a disaggregated deployment (a prefill and a decode vLLM instance per request,
NixlConnector) the hostname names the role, as for SGLang (``prefill-2``, ``decode-5``): the decode
node is then known, which the matcher's mechanism evidence uses. A hostname naming neither is a server doing both (role null).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from forensics.case import surrogates_escaped
from forensics.ingest.base import FileContext, Output
from forensics.ingest.formats.sglang import node_of, role_of
from forensics.ingest.registry import LogFormat, register
from forensics.ingest.timeparse import TimeError, to_micros

LINE = re.compile(
    r"^(?:\([^)]*\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<time>(?:\d{4}-)?\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?) "
    r"\[?[\w.<>-]+:\d+\] (?P<msg>.*)$",
    re.S,
)
RECEIVED = re.compile(r"^Received request (\S+?): (?=prompt: |params: )")
DETAILS = re.compile(r"^Request (\S+?) details: (?=prompt)")
GENERATED = re.compile(r"^Generated response (\S+?)(?P<stream> \(streaming (?:complete|delta)\))?: output: ")
TOKEN_IDS = re.compile(r"\[(?:\d+(?:, \d+)*)?\]|None")
FINISH = re.compile(r"finish_reason: (\w+)")
ABORTED = re.compile(r"^Aborted request(?:\(s\))? ([^\s,]+)\.$")
EXPIRED = re.compile(r"^Releasing expired KV blocks for request (\S+) which were retrieved by 0 (?:decode|remote) worker")
KV_CACHE = re.compile(r"KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request")
FULL_DATE = re.compile(r"^\d{4}-")


class Unreadable(ValueError):
    """A field of a request line that cannot be read (cut line, unterminated quote)."""


def py_string(text: str, pos: int) -> tuple[str | None, int]:
    """The Python ``repr`` string (or ``None``) starting at ``pos``, and the position after it."""
    if text.startswith("None", pos):
        return None, pos + 4
    quote = text[pos:pos + 1]
    if quote not in ("'", '"'):
        raise Unreadable("not a quoted string")
    i = pos + 1
    while i < len(text):
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if c == quote:
            try:
                value = ast.literal_eval(text[pos:i + 1])
            except (ValueError, SyntaxError) as exc:
                raise Unreadable(str(exc)) from None
            if not isinstance(value, str):
                raise Unreadable("not a string")
            # A lone surrogate (an answer cut inside an emoji) as its escape's text, as the JSON formats write it:
            # the tables hold UTF-8, and the event would be lost.
            return surrogates_escaped(value), i + 1
        i += 1
    raise Unreadable("unterminated quote")


def token_count(text: str, key: str) -> int | None:
    """How many ids the ``key: […]`` list after the first ``key: `` holds; None if absent or cut."""
    start = text.find(key + ": ")
    if start < 0:
        return None
    m = TOKEN_IDS.match(text, start + len(key) + 2)
    if m is None or m.group(0) == "None":
        return None
    ids = m.group(0)
    # Counting separators keeps a million-id list cheap: the ids themselves are not needed.
    return 0 if ids == "[]" else ids.count(",") + 1


def _whole(text: str) -> int | None:
    digits = text.replace(",", "")
    return int(digits) if digits.isdigit() and len(digits) <= 18 else None


class VLLMParser:
    """vLLM server logs: RequestLogger request and response lines, KV-cache startup lines."""

    name = "vllm"

    def sniff(self, lines: list[str], file_name: str) -> bool:
        """Lines in vLLM's logger layout (``INFO 08-29 10:01:54 [file.py:N] …``)."""
        return any(LINE.match(text) for text in lines[:10])

    def parse(self, text: str, line_number: int, ctx: FileContext) -> Output:
        """Every line is an event; never quarantined for its content."""
        host, rank = node_of(ctx.file_name)
        row: dict[str, Any] = {
            "node": host,
            "rank": rank,
            "role": role_of(host),  # null unless the hostname names a prefill or decode instance
            "event": "unknown",
            "message": text,
            "source_file": ctx.display_path,
            "source_sha256": ctx.sha256,
            "source_line": line_number,
        }
        m = LINE.match(text)
        if m is None:
            return "engine_events", row
        if FULL_DATE.match(m.group("time")):
            try:
                micros, assumed = to_micros(m.group("time").replace(",", "."), ctx.zone)
            except TimeError:
                pass
            else:
                row["time"] = micros
                row["zone_assumed"] = ctx.zone if assumed else None
        self._message(m.group("msg"), row)
        return "engine_events", row

    def _message(self, msg: str, row: dict[str, Any]) -> None:
        if (m := RECEIVED.match(msg) or DETAILS.match(msg)) is not None:
            # Both lines log the one reception of the request (newer releases split it in two).
            row["event"] = "request_received"
            row["rid"] = m.group(1)
            if not msg.startswith("prompt: ", m.end()):
                # The params-first line names no ids, or (--enable-log-request-prompts) only a
                # preview of them: its count is not the prompt's length.
                return
            try:
                _, end = py_string(msg, m.end() + len("prompt: "))
            except Unreadable:
                return  # a cut or broken line: the rid is known, the rest is in message
            # Read the ids after the prompt: the prompt's own text may contain "prompt_token_ids: ".
            row["input_len"] = token_count(msg[end:], "prompt_token_ids")
        elif (m := GENERATED.match(msg)) is not None:
            delta = m.group("stream") == " (streaming delta)"
            row["event"] = "output_delta" if delta else "request_finished"
            row["rid"] = m.group(1)
            try:
                output, end = py_string(msg, m.end())
            except Unreadable:
                return  # a cut or broken line: the rid is known, the rest is in message
            row["output_text"] = output
            rest = msg[end:]
            row["output_len"] = row["completion_tokens"] = token_count(rest, "output_token_ids")
            finish = FINISH.search(rest)
            if finish and finish.group(1) != "None":
                row["finish_reason"] = finish.group(1)
        elif (m := ABORTED.match(msg)) is not None:
            row["event"] = "request_finished"
            row["rid"] = m.group(1)
            row["finish_reason"] = "abort"
        elif (m := EXPIRED.match(msg)) is not None:
            row["event"] = "bootstrap_failed"
            row["rid"] = m.group(1)
        else:
            total, window = KV_CACHE.search(msg), CONCURRENCY.search(msg)
            if total or window:
                row["event"] = "startup"
                row["max_total_num_tokens"] = _whole(total.group(1)) if total else None
                row["context_len"] = _whole(window.group(1)) if window else None


_parser = VLLMParser()
FORMAT = register(LogFormat(
    name=_parser.name,
    summary="vLLM server logs (--enable-log-requests): RequestLogger lines joined by request id, KV-cache startup lines",
    table="engine_events",
    sniff=_parser.sniff,
    parse=_parser.parse,
    sniff_order=80,  # before sglang; its lines start with a level name, never with '['
))
