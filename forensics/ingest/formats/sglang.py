"""SGLang engine logs, one file per node (log-formats.md §3).

A file mixes JSON request-log lines and the scheduler's text lines. Every line becomes an engine
event: recognised messages get their fields, anything else is kept as ``unknown`` with its raw
text. The node is the file name's hostname (``{hostname}_{rank}.log``, rotated copies such as
``.log.1``, ``.log-20260829`` or ``.log.2026-08-29`` included); the role comes from the line's
``type=`` field, else from the hostname.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from forensics.ingest.base import FileContext, Output
from forensics.ingest.fields import INT32_MAX, INT64_MAX, INT64_MIN, RecordError, loads, whole_number
from forensics.ingest.registry import LogFormat, register
from forensics.ingest.timeparse import TimeError, to_micros

TEXT_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?)(?: ([^\]]*))?\] ?(.*)$", re.S)
FILE_NAME = re.compile(r"^(?P<host>.+?)_(?P<rank>\d+)\.log$")
#: What a rotation puts after ``.log``: a number (``.1``), logrotate's dateext date (``-20260829``, hourly
#: ``-2026082913``) or Python's TimedRotatingFileHandler's (``.2026-08-29``, ``.2026-08-29_13``, ``_13-05``,
#: ``_13-05-09``).
ROTATED = re.compile(r"\.log(?:\.\d+|[.-]\d{8}(?:\d{2})?|[.-]\d{4}-\d\d-\d\d(?:_\d\d(?:-\d\d){0,2})?)$")

STARTUP_TOTAL = re.compile(r"max_total_num_tokens=(\d+)")
STARTUP_CONTEXT = re.compile(r"context_len=(\d+)")
OVER_LIMIT = re.compile(
    r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\).*?rid='([^']*)'", re.S
)
OVER_LIMIT_NO_RID = re.compile(r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)")
EXCEEDS = re.compile(r"Request (\S+) exceeds the maximum number of tokens: (\d+) > (\d+)")
#: ``ReqTimeStats(rid=..., input_len=...)`` now; ``Req Time Stats(rid=..., input len=..., output len=...)`` before
#: (``Req.log_time_stats``): the older form's line was an unknown event, and the placeholder's decode half was lost.
REQ_TIME_STATS = re.compile(r"Req ?Time ?Stats\(([^)]*)\)")
CORRUPTION = re.compile(
    r"Context corruption detected: Request (\S+) \(bootstrap_room=(\d+)\) received metadata from bootstrap_room=(\d+)"
)
RID_FIELD = re.compile(r"rid='([^']*)'")
ROOM_FIELD = re.compile(r"bootstrap_room=(\d+)")
KV_ERROR = re.compile(r"KVTransferError\(bootstrap_room=(\d+)\)")

MAX_ROOM = 2**64 - 1



def _mapping(value: Any) -> Mapping[str, Any]:
    """``value`` when it is a JSON object, else an empty one (a field of the wrong type says nothing)."""
    return value if isinstance(value, Mapping) else {}

@lru_cache(maxsize=256)
def node_of(file_name: str) -> tuple[str, int | None]:
    """Hostname and rank from ``{hostname}_{rank}.log`` (compression and rotation suffixes ignored)."""
    name = file_name
    for suffix in (".gz", ".zst"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    # A rotated log is the same node's log: its lines must meet those of its successor, which an
    # overlapping rotation (copytruncate) repeats, under one node.
    name = ROTATED.sub(".log", name)
    m = FILE_NAME.match(name)
    if m:
        rank = int(m.group("rank"))
        return m.group("host"), rank if rank <= INT32_MAX else None
    return (name[:-4] if name.endswith(".log") else name), None


def role_of(host: str) -> str | None:
    """``prefill`` or ``decode`` when the hostname says so."""
    low = host.lower()
    if "prefill" in low:
        return "prefill"
    if "decode" in low:
        return "decode"
    return None


_role_of = lru_cache(maxsize=256)(role_of)


def _room(value: Any) -> int | None:
    """A bootstrap room (an unsigned 64-bit number), else None (the raw line is kept in ``message``)."""
    room = whole_number(value)
    return room if room is not None and 0 <= room <= MAX_ROOM else None


def _int(value: Any) -> int | None:
    """A whole number that fits in 64 bits, else None (the raw line is kept in ``message``)."""
    number = whole_number(value)
    return number if number is not None and INT64_MIN <= number <= INT64_MAX else None


def _kv_pairs(text: str) -> dict[str, str]:
    pairs = {}
    for item in text.split(","):
        # The key and value are stripped on both sides: stripping the item first would change nothing.
        key, sep, value = item.partition("=")
        if sep:
            # "input len" (the older Req Time Stats line) is "input_len"
            pairs["_".join(key.split())] = value.strip().strip("'\"")
    return pairs


class SGLangParser:
    """Per-node SGLang logs: JSON request-log lines and scheduler text lines."""

    name = "sglang"

    def sniff(self, lines: list[str], file_name: str) -> bool:
        """Scheduler text lines or request.* JSON events."""
        for text in lines[:10]:
            if TEXT_LINE.match(text):
                return True
            if text.startswith("{"):
                try:
                    obj = loads(text)
                except RecordError:
                    continue
                if isinstance(obj, dict) and str(obj.get("event", "")).startswith("request.") and "rid" in obj:
                    return True
        return False

    def parse(self, text: str, line_number: int, ctx: FileContext) -> Output:
        """Every line is an event; never quarantined for its content."""
        host, rank = node_of(ctx.file_name)  # cached: one file name, many lines
        row: dict[str, Any] = {
            "node": host,
            "rank": rank,
            "role": _role_of(host),
            "event": "unknown",
            "message": text,
            "source_file": ctx.display_path,
            "source_sha256": ctx.sha256,
            "source_line": line_number,
        }
        first = text[:1]
        if first == "[":  # a scheduler line (the common case): no need to strip a copy of the line
            self._text_line(text, row, ctx)
        elif first == "{" or text.lstrip().startswith("{"):
            self._json_line(text, row, ctx)
        else:
            self._text_line(text, row, ctx)
        return "engine_events", row

    def _time(self, value: Any, row: dict[str, Any], ctx: FileContext) -> None:
        try:
            micros, assumed = to_micros(value, ctx.zone)
        except TimeError:
            return
        row["time"] = micros
        if assumed:
            row["zone_assumed"] = ctx.zone

    def _json_line(self, text: str, row: dict[str, Any], ctx: FileContext) -> None:
        try:
            obj = loads(text)
        except RecordError:
            return  # kept as an unknown event with its raw text
        if not isinstance(obj, dict):
            return
        self._time(obj.get("timestamp"), row, ctx)
        event = obj.get("event")
        if event == "request.received":
            row["event"] = "request_received"
        elif event == "request.finished":
            row["event"] = "request_finished"
        else:
            return
        rid = obj.get("rid")
        req, out = _mapping(obj.get("obj")), _mapping(obj.get("out"))
        meta = _mapping(out.get("meta_info"))
        row["rid"] = rid if isinstance(rid, str) else (req.get("rid") if isinstance(req.get("rid"), str) else None)
        row["bootstrap_room"] = _room(req.get("bootstrap_room"))
        finish = meta.get("finish_reason")
        if isinstance(finish, Mapping):
            row["finish_reason"] = finish.get("type") if isinstance(finish.get("type"), str) else None
        elif isinstance(finish, str):
            row["finish_reason"] = finish
        row["prompt_tokens"] = _int(meta.get("prompt_tokens"))
        row["completion_tokens"] = _int(meta.get("completion_tokens"))
        row["output_len"] = row["completion_tokens"]
        if isinstance(out.get("text"), str):
            row["output_text"] = out["text"]

    def _text_line(self, text: str, row: dict[str, Any], ctx: FileContext) -> None:
        m = TEXT_LINE.match(text)
        if not m:
            return
        self._time(m.group(1), row, ctx)
        row["tp"] = m.group(2)
        msg = m.group(3)
        if "max_total_num_tokens=" in msg:
            total = STARTUP_TOTAL.search(msg)
            context = STARTUP_CONTEXT.search(msg)
            row["event"] = "startup"
            row["max_total_num_tokens"] = _int(total.group(1)) if total else None
            row["context_len"] = _int(context.group(1)) if context else None
        elif "exceeds the maximum allowed length" in msg:
            row["event"] = "over_limit"
            m2 = OVER_LIMIT.search(msg) or OVER_LIMIT_NO_RID.search(msg)
            if m2:
                row["input_len"], row["limit"] = _int(m2.group(1)), _int(m2.group(2))
                if m2.re is OVER_LIMIT:
                    row["rid"] = m2.group(3)
        elif (m2 := EXCEEDS.search(msg)) is not None:
            row["event"] = "exceeds_max_tokens"
            row["rid"], row["input_len"], row["limit"] = m2.group(1), _int(m2.group(2)), _int(m2.group(3))
        elif (m2 := REQ_TIME_STATS.search(msg)) is not None:
            kv = _kv_pairs(m2.group(1))
            row["event"] = "req_time_stats"
            row["rid"] = kv.get("rid")
            row["bootstrap_room"] = _room(kv.get("bootstrap_room"))
            row["input_len"] = _int(kv.get("input_len"))
            row["output_len"] = _int(kv.get("output_len"))
            if kv.get("type") in ("prefill", "decode"):
                row["role"] = kv["type"]
        elif (m2 := CORRUPTION.search(msg)) is not None:
            row["event"] = "context_corruption"
            row["rid"], row["bootstrap_room"], row["other_bootstrap_room"] = m2.group(1), _room(m2.group(2)), _room(m2.group(3))
        elif "bootstrap failed" in msg:
            row["event"] = "bootstrap_failed"
            self._rid_room(msg, row)
        elif "transfer failed" in msg:
            row["event"] = "transfer_failed"
            self._rid_room(msg, row)
        elif (m2 := KV_ERROR.search(msg)) is not None:
            row["event"] = "kv_transfer_error"
            row["bootstrap_room"] = _room(m2.group(1))
        elif msg.startswith("Prefill batch"):
            row["event"] = "prefill_batch"
            row["role"] = row["role"] or "prefill"
        elif msg.startswith("Decode batch"):
            row["event"] = "decode_batch"
            row["role"] = row["role"] or "decode"

    @staticmethod
    def _rid_room(msg: str, row: dict[str, Any]) -> None:
        rid = RID_FIELD.search(msg)
        room = ROOM_FIELD.search(msg)
        row["rid"] = rid.group(1) if rid else None
        row["bootstrap_room"] = _room(room.group(1)) if room else None


_parser = SGLangParser()
FORMAT = register(LogFormat(
    name=_parser.name,
    summary="SGLang engine logs, one file per node ({hostname}_{rank}.log): JSON request lines and scheduler text lines",
    table="engine_events",
    sniff=_parser.sniff,
    parse=_parser.parse,
    sniff_order=90,  # last: any bracketed-timestamp text line looks like a scheduler line
))
