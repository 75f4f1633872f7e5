"""Write simulated exchanges and engine lines as the real tools log them (spec/log-formats.md).

One writer class per log format, registered under the format's ingest name: a gateway writer
(``litellm``, ``openai-split``, ``helicone``) renders each exchange, an engine writer (``sglang``,
``vllm``) renders the engine events the mechanism emits (forensics.lab.simulate.events). Adding a
simulated format is one writer class here.

Lines are written in time order through a small heap per output stream (an event may be
produced before an earlier-timed one of another request); the heap only ever holds requests in
flight, so memory stays flat however long the run. Compressed files are byte-identical for the
same content: gzip with mtime 0 and no file name, zstd at a fixed level.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import heapq
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, ClassVar, TypeVar

import orjson
import zstandard

from forensics.case import make_private_dirs
from forensics.errors import ConfigError, RegistryError
from forensics.lab.simulate import events as ev
from forensics.lab.simulate.mechanism import Exchange

#: LiteLLM's DB safeguard (spend-log rows): strings longer than this are cut.
MAX_STRING_LENGTH_PROMPT_IN_DB = 2048
TRUNCATION_NOTE = "Truncation is a DB storage safeguard."


class _Hashing:
    """A raw binary file that counts and hashes what goes through it."""

    def __init__(self, path: Path) -> None:
        # Simulated logs hold made-up customer data, private like every file forensics creates.
        self.fh = os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")
        os.fchmod(self.fh.fileno(), 0o600)  # whatever the umask
        self.sha = hashlib.sha256()
        self.bytes = 0

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        self.bytes += len(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


class LineFile:
    """One output file of lines, optionally .gz or .zst, with its line count and hash."""

    def __init__(self, root: Path, rel: str) -> None:
        self.rel = rel
        path = root / rel
        make_private_dirs(path.parent)
        self.raw = _Hashing(path)
        self.stream: Any
        if rel.endswith(".gz"):
            self.stream = gzip.GzipFile(filename="", mode="wb", fileobj=self.raw, mtime=0, compresslevel=6)
        elif rel.endswith(".zst"):
            self.stream = zstandard.ZstdCompressor(level=9).stream_writer(self.raw, closefd=False)  # type: ignore[arg-type]
        else:
            self.stream = self.raw
        self.lines = 0
        self.chars = 0

    def write(self, line: str) -> int:
        """Write one line (without its newline); returns its 1-based line number."""
        data = line.encode("utf-8") + b"\n"
        self.stream.write(data)
        self.lines += 1
        self.chars += len(data)
        return self.lines

    def close(self) -> dict[str, Any]:
        """Finish the file and describe it."""
        if self.stream is not self.raw:
            self.stream.close()
        self.raw.close()
        return {"path": self.rel, "bytes": self.raw.bytes, "lines": self.lines, "sha256": self.raw.sha.hexdigest()}


class Outputs:
    """Every output file of a run, opened on demand and closed in order."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.open: dict[str, LineFile] = {}
        self.done: list[dict[str, Any]] = []

    def file(self, rel: str) -> LineFile:
        """The open file ``rel`` (opened now if needed)."""
        f = self.open.get(rel)
        if f is None:
            f = self.open[rel] = LineFile(self.root, rel)
        return f

    def close(self, rel: str) -> None:
        """Close one file (when its day is over)."""
        f = self.open.pop(rel, None)
        if f is not None:
            self.done.append(f.close())

    def close_all(self) -> list[dict[str, Any]]:
        """Close every file; the sorted list of what was written."""
        for rel in sorted(self.open):
            self.close(rel)
        return sorted(self.done, key=lambda d: d["path"])


class Ordered:
    """A heap of (time, seq, payload) released in time order once the clock has passed it."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Any]] = []
        self.seq = 0

    def push(self, t: float, payload: Any) -> None:
        """Queue ``payload`` at time ``t``."""
        heapq.heappush(self.heap, (t, self.seq, payload))
        self.seq += 1

    def pop_until(self, t: float) -> list[tuple[float, Any]]:
        """Everything queued before ``t``, in order."""
        out = []
        while self.heap and self.heap[0][0] < t:
            when, _, payload = heapq.heappop(self.heap)
            out.append((when, payload))
        return out


def day_of(t: float) -> str:
    """The UTC date of an epoch time."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d")


def _zone_less(t: float) -> str:
    """LiteLLM's spend-log time: UTC, no zone, no trailing zeros (``2026-08-29T10:01:54.88``)."""
    d = dt.datetime.fromtimestamp(t, dt.UTC)
    text = d.strftime("%Y-%m-%dT%H:%M:%S")
    if d.microsecond:
        text += ("." + f"{d.microsecond:06d}").rstrip("0")
    return text


def truncate_for_db(value: Any) -> Any:
    """LiteLLM's spend-log sanitiser: every long string keeps 35% head, the rest tail, and a marker."""
    if isinstance(value, str):
        if len(value) > MAX_STRING_LENGTH_PROMPT_IN_DB:
            start = int(MAX_STRING_LENGTH_PROMPT_IN_DB * 0.35)
            end = MAX_STRING_LENGTH_PROMPT_IN_DB - start
            skipped = len(value) - start - end
            return f"{value[:start]}... (litellm_truncated skipped {skipped} chars. {TRUNCATION_NOTE}) ...{value[len(value) - end:]}"
        return value
    if isinstance(value, list):
        return [truncate_for_db(v) for v in value]
    if isinstance(value, dict):
        return {k: truncate_for_db(v) for k, v in value.items()}
    return value


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def completion(ex: Exchange, usage: bool = True) -> dict[str, Any]:
    """The OpenAI ``ChatCompletion`` body of a successful exchange."""
    body: dict[str, Any] = {
        "id": ex.request_id,
        "object": "chat.completion",
        "created": int(ex.completed),
        "model": ex.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": ex.response_text}, "finish_reason": ex.finish_reason}],
    }
    if usage:
        body["usage"] = _usage(ex)
    return body


def _usage(ex: Exchange) -> dict[str, Any]:
    p = ex.reported_prompt_tokens or 0
    return {"prompt_tokens": p, "completion_tokens": ex.completion_tokens, "total_tokens": p + ex.completion_tokens}


def chunks(ex: Exchange, rng: random.Random, usage: bool) -> list[dict[str, Any]]:
    """The streamed ``ChatCompletionChunk`` objects whose deltas concatenate to the answer."""
    text = ex.response_text
    out: list[dict[str, Any]] = []
    pos = 0
    first = True
    while pos < len(text) or first:
        n = rng.randint(2, 24)
        piece = text[pos : pos + n]
        pos += n
        delta: dict[str, Any] = {"content": piece}
        if first:
            delta = {"role": "assistant", "content": piece}
            first = False
        out.append({"id": ex.request_id, "object": "chat.completion.chunk", "created": int(ex.first_token), "model": ex.model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    out[-1]["choices"][0]["finish_reason"] = ex.finish_reason
    if usage:
        out[-1]["usage"] = _usage(ex)
    return out


W = TypeVar("W", bound=type)

#: Gateway and engine writers by format name (the name ingest reads the files under).
GATEWAY_WRITERS: dict[str, type[GatewayWriter]] = {}
ENGINE_WRITERS: dict[str, type[EngineWriter]] = {}


def _registered(table: dict[str, Any]) -> Callable[[W], W]:
    """Class decorator: register a writer under its ``name``; a duplicate name is an error."""
    def add(cls: W) -> W:
        name = cls.name  # type: ignore[attr-defined]
        if name in table:
            raise RegistryError(f"a simulator writer for format {name!r} is already registered", fix="give each writer its own format name")
        table[name] = cls
        return cls
    return add


def gateway_writer(name: str) -> type[GatewayWriter]:
    """The gateway writer of format ``name``; an unknown name is a ConfigError listing the known ones."""
    if name not in GATEWAY_WRITERS:
        raise ConfigError(f"unknown format {name!r}", fix=f"use one of {', '.join(GATEWAY_WRITERS)}")
    return GATEWAY_WRITERS[name]


def engine_writer(name: str) -> type[EngineWriter]:
    """The engine writer of format ``name``; an unknown name is a ConfigError listing the known ones."""
    if name not in ENGINE_WRITERS:
        raise ConfigError(f"unknown engine format {name!r}", fix=f"use one of {', '.join(ENGINE_WRITERS)}")
    return ENGINE_WRITERS[name]


class GatewayWriter:
    """What every gateway writer shares: daily files, the defects written next to records, the
    calls queued until they end, and the counts truth.json reports."""

    name: ClassVar[str]
    #: What the simulation's README says ``gateway/`` holds.
    describes: ClassVar[str] = "the gateway logs"
    #: The keys of a record's time that a ``bad_time`` defect spoils, and the impossible time it writes
    #: there (in the format's own way of writing times).
    time_keys: ClassVar[tuple[str, ...]] = ("startTime", "timestamp")
    bad_time: ClassVar[str] = "2026-13-45T99:61:00"

    def __init__(self, outputs: Outputs, seed: int, compression: dict[str, str], spend_days: set[str],
                 broken: dict[int, str]) -> None:
        self.out = outputs
        self.rng = random.Random(f"{seed}:gateway")
        self.compression = compression  # day -> "" | ".gz" | ".zst"
        self.spend_days = spend_days
        self.broken = broken  # exchange index -> defect to write next to its record
        self.callbacks = Ordered()  # written when the call ends
        self.current: dict[str, str] = {}
        self.quarantine: list[dict[str, Any]] = []
        self.blank = 0
        self.spend_rows = 0
        self.orphans: list[dict[str, Any]] = []

    # ---- routing -----------------------------------------------------------------------------

    def _series(self, prefix: str, day: str) -> LineFile:
        rel = f"gateway/{prefix}-{day}.jsonl{self.compression.get(day, '')}"
        old = self.current.get(prefix)
        if old is not None and old != rel:
            self.out.close(old)
        self.current[prefix] = rel
        return self.out.file(rel)

    def exchange(self, ex: Exchange) -> None:
        """Take one exchange when the gateway receives it; by default it is logged when the call ends
        (queued for :meth:`ended`). A format that logs at arrival writes here instead."""
        self.callbacks.push(ex.completed, ex)

    def ended(self, when: float, ex: Exchange) -> None:
        """Write what is logged when the call ends (at ``when``)."""
        raise NotImplementedError

    def tick(self, t: float) -> None:
        """Write every call that ended before ``t``."""
        for when, ex in self.callbacks.pop_until(t):
            self.ended(when, ex)

    def _write(self, f: LineFile, line: str, ex: Exchange) -> None:
        defect = self.broken.pop(ex.index, None) if not f.rel.startswith("gateway/spend-logs") else None
        if defect == "partial":
            # A writer killed mid-line; the retried callback wrote the whole record after it.
            n = f.write(line[: self.rng.randint(20, min(400, len(line) - 2))])
            self.quarantine.append({"file": f.rel, "line": n, "reason": "truncated JSON (partial write)", "request_id": ex.request_id})
        elif defect == "bad_time":
            bad = orjson.loads(line)
            obj = bad.get("standard_logging_object", bad)
            for key in self.time_keys:
                if key in obj:
                    obj[key] = self.bad_time
            n = f.write(_dumps(bad))
            self.quarantine.append({"file": f.rel, "line": n, "reason": "bad timestamp (copy of the next record)", "request_id": ex.request_id})
        elif defect == "blank":
            f.write("")
            self.blank += 1
        f.write(line)


@_registered(GATEWAY_WRITERS)
class LiteLLMWriter(GatewayWriter):
    """LiteLLM callback payloads, and spend-log exports overlapping them on some days."""

    name = "litellm"
    describes = "the LiteLLM logs (callback payloads, and spend-log exports overlapping them on two days)"

    def exchange(self, ex: Exchange) -> None:
        """Queue the callback payload; on a spend-log day, write the spend-log row now."""
        self.callbacks.push(ex.completed, ex)
        if day_of(ex.received) in self.spend_days:
            # The DB export is ordered by startTime, which is arrival order.
            self._write(self._series("spend-logs", day_of(ex.received)), self.spend_log(ex), ex)
            self.spend_rows += 1

    def ended(self, when: float, ex: Exchange) -> None:
        """The callback payload, in the file of the day the call ended."""
        self._write(self._series("litellm-callbacks", day_of(when)), self.payload(ex), ex)

    def _metadata(self, ex: Exchange) -> dict[str, Any]:
        md: dict[str, Any] = {
            "user_api_key_hash": ex.tenant.key_hash,
            "user_api_key_alias": ex.tenant.key_alias,
            "user_api_key_org_id": ex.tenant.tenant_id,
            "user_api_key_team_id": ex.tenant.team_id,
            "user_api_key_user_id": ex.user_id,
            "requester_ip_address": "",
            "spend_logs_metadata": None,
        }
        if ex.status == "failure":
            md["error_information"] = {"error_code": str(ex.status_code), "error_class": ex.error_class, "error_message": ex.error,
                                       "llm_provider": "openai", "traceback": ""}
        return md

    def payload(self, ex: Exchange) -> str:
        """A ``StandardLoggingPayload`` line, bare or wrapped, with the encodings real callbacks mix."""
        rng = self.rng
        response: Any = None
        if ex.status == "success":
            response = chunks(ex, rng, usage=True) if (ex.stream and rng.random() < 0.5) else completion(ex)
        messages: Any = ex.messages
        metadata: Any = self._metadata(ex)
        if rng.random() < 0.25:
            messages = _dumps(messages)
        if rng.random() < 0.2 and response is not None:
            response = _dumps(response)
        if rng.random() < 0.2:
            metadata = _dumps(metadata)
        slo = {
            "id": ex.request_id,
            "trace_id": f"{rng.getrandbits(128):032x}",
            "call_type": "acompletion",
            "stream": ex.stream,
            "status": ex.status,
            "custom_llm_provider": ex.model_routed.split("/")[0],
            "startTime": round(ex.received, 6),
            "endTime": round(ex.completed, 6),
            "completionStartTime": round(ex.first_token, 6),
            "model": ex.model_routed.split("/", 1)[1],
            "model_group": ex.model,
            "api_base": "http://sglang-router:30000/v1" if ex.model == "glm-5.3" else "http://inference.internal/v1",
            "prompt_tokens": ex.reported_prompt_tokens or 0,
            "completion_tokens": ex.completion_tokens,
            "total_tokens": (ex.reported_prompt_tokens or 0) + ex.completion_tokens,
            "response_cost": 0.0,
            "end_user": ex.user_id if rng.random() < 0.6 else "",
            "metadata": metadata,
            "messages": messages,
            "response": response,
            "model_parameters": {"max_tokens": ex.max_tokens, "stream": ex.stream},
            "error_str": ex.error,
            "cache_hit": False,
            "request_tags": [],
        }
        if rng.random() < 0.5:
            return _dumps({"event": "success" if ex.status == "success" else "failure", "standard_logging_object": slo})
        return _dumps(slo)

    def spend_log(self, ex: Exchange) -> str:
        """A ``LiteLLM_SpendLogs`` row as exported with row_to_json: long strings truncated."""
        rng = self.rng
        org_on_row = rng.random() < 0.7
        md = self._metadata(ex)
        row = {
            "request_id": ex.request_id,
            "call_type": "acompletion",
            "api_key": ex.tenant.key_hash,
            "spend": 0.0,
            "total_tokens": (ex.reported_prompt_tokens or 0) + ex.completion_tokens,
            "prompt_tokens": ex.reported_prompt_tokens or 0,
            "completion_tokens": ex.completion_tokens,
            "startTime": _zone_less(ex.received),
            "endTime": _zone_less(ex.completed),
            "completionStartTime": _zone_less(ex.first_token),
            "model": ex.model_routed,
            "model_group": ex.model,
            # Orgs were only set on rows for part of the export; the metadata always names it.
            "organization_id": ex.tenant.tenant_id if org_on_row else "",
            "team_id": None if not org_on_row else ex.tenant.team_id,
            "end_user": ex.user_id,
            "user": "",
            "status": ex.status,
            "messages": {},
            "proxy_server_request": {"model": ex.model, "messages": ex.messages, "max_tokens": ex.max_tokens, "stream": ex.stream},
            "response": completion(ex) if ex.status == "success" else {},
            "metadata": md,
            "session_id": f"s-{rng.getrandbits(24):06x}",
            "cache_hit": "False",
            "request_tags": [],
            "api_base": "http://sglang-router:30000/v1",
        }
        return _dumps(truncate_for_db(row))


@_registered(GATEWAY_WRITERS)
class OpenAISplitWriter(GatewayWriter):
    """Split request and response logs, joined by request_id (some halves lost on purpose)."""

    name = "openai-split"
    describes = "the split request and response logs (joined by request_id)"

    def exchange(self, ex: Exchange) -> None:
        """Write the request line now and queue the response line (unless either was lost)."""
        if ex.request_lost:
            # The request log of that hour was rotated away: only the response line is left.
            self.orphans.append({"request_id": ex.request_id, "kind": "response_only"})
            self.callbacks.push(ex.completed, ex)
            return
        f = self._series("requests", day_of(ex.received))
        self._write(f, self.split_request(ex), ex)
        if ex.incomplete:
            self.orphans.append({"request_id": ex.request_id, "kind": "request_only"})
        else:
            self.callbacks.push(ex.completed, ex)

    def ended(self, when: float, ex: Exchange) -> None:
        """The response line, in the file of the day the call ended."""
        self._series("responses", day_of(when)).write(self.split_response(ex))

    def _stamp(self, t: float) -> Any:
        if self.rng.random() < 0.2:
            return int(round(t * 1000))
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

    def split_request(self, ex: Exchange) -> str:
        """A request line of the split format."""
        body = {"model": ex.model, "messages": ex.messages, "max_tokens": ex.max_tokens, "stream": ex.stream}
        return _dumps({"request_id": ex.request_id, "timestamp": self._stamp(ex.received), "tenant_id": ex.tenant.tenant_id,
                       "user_id": ex.user_id, "body": body})

    def split_response(self, ex: Exchange) -> str:
        """A response line of the split format (body, chunks, or an error object)."""
        rec: dict[str, Any] = {"request_id": ex.request_id, "timestamp": self._stamp(ex.completed), "status_code": ex.status_code}
        if ex.status != "success":
            rec["body"] = {"error": {"message": ex.error, "type": ex.error_class, "code": ex.status_code}}
        elif ex.stream:
            rec["chunks"] = chunks(ex, self.rng, usage=self.rng.random() < 0.7)
        else:
            rec["body"] = completion(ex)
        return _dumps(rec)


def _iso_ms(t: float) -> str:
    """Helicone's time: ISO 8601 UTC with milliseconds (``2026-08-29T10:01:54.880Z``)."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@_registered(GATEWAY_WRITERS)
class HeliconeWriter(GatewayWriter):
    """Helicone's ``request_response_rmt`` rows, exported as JSON Lines (one row per request).

    The export (``@helicone/export --format jsonl --include-body``, or a query of the table) is
    ordered by ``request_created_at``, so a row is written when the request arrives, in the file of
    that day. Bodies are JSON strings, as the table stores them; a streamed answer is stored
    either reassembled or as its chunks (``streamed_data``), as Helicone's two stream loggers do.
    The tenant is ``organization_id`` (log-formats.md §4).

    JSON Lines rather than the CSV variant: one record per line lets the simulated defects (a
    partial write, a copy with a bad time, blank lines) sit next to a record as in the other
    gateway formats; in CSV a cut record's open quote would swallow the records after it, which
    no export tool writes. The CSV reader has its own ingest goldens.
    """

    name = "helicone"
    describes = "the Helicone export (request_response_rmt rows with JSON-string bodies)"
    time_keys = ("request_created_at",)

    def exchange(self, ex: Exchange) -> None:
        """Write the exported row now (the export is ordered by arrival)."""
        self._write(self._series("helicone", day_of(ex.received)), self.row(ex), ex)

    def ended(self, when: float, ex: Exchange) -> None:
        """Nothing is queued: the row was written when the request arrived."""

    def row(self, ex: Exchange) -> str:
        """One exported row of ``ex``."""
        rng = self.rng
        request = {"model": ex.model, "messages": ex.messages, "max_tokens": ex.max_tokens, "stream": ex.stream}
        response: dict[str, Any]
        if ex.status != "success":
            response = {"error": {"message": ex.error, "type": ex.error_class, "code": ex.status_code}}
        elif ex.stream and rng.random() < 0.5:
            response = {"streamed_data": chunks(ex, rng, usage=True)}
        else:
            response = completion(ex)
        ok = ex.status == "success"
        row = {
            "response_id": f"{rng.getrandbits(128):032x}",
            "response_created_at": _iso_ms(ex.completed),
            "latency": round((ex.completed - ex.received) * 1000),
            "status": ex.status_code,
            "completion_tokens": ex.completion_tokens if ok else 0,
            # Helicone counts from the upstream usage: none on a failure.
            "prompt_tokens": (ex.reported_prompt_tokens or 0) if ok else 0,
            "model": ex.model,
            "request_id": ex.request_id,
            "request_created_at": _iso_ms(ex.received),
            "user_id": ex.user_id,
            "organization_id": ex.tenant.tenant_id,
            "proxy_key_id": None,
            "threat": False,
            "time_to_first_token": round((ex.first_token - ex.received) * 1000) if ok else None,
            "provider": "CUSTOM",
            "country_code": None,
            "target_url": "http://sglang-router:30000/v1/chat/completions",
            "properties": {"Helicone-Property-Key-Alias": ex.tenant.key_alias},
            "request_body": _dumps(request),
            "response_body": _dumps(response),
        }
        return _dumps(row)


class EngineWriter:
    """Per-node engine logs ``engine/{hostname}_{rank}.log``, lines in time order; a subclass
    renders each engine event as a line of its format."""

    name: ClassVar[str]
    #: What the simulation's README says ``engine/`` holds.
    describes: ClassVar[str] = "the engine logs of each prefill and decode node"

    def __init__(self, outputs: Outputs) -> None:
        self.out = outputs
        self.lines = Ordered()

    def line(self, node: str, t: float, event: ev.EngineEvent) -> None:
        """Queue ``event`` of ``node`` at time ``t``, rendered now (the mechanism may reuse its dicts)."""
        rendered = self.render(t, event)
        # An event an engine says in several lines (or not at all) queues them in order at ``t``.
        for text in [rendered] if isinstance(rendered, str) else rendered:
            self.lines.push(t, (node, text))

    def render(self, t: float, event: ev.EngineEvent) -> str | list[str]:
        """The log line (or lines, none when the format has no line for it) saying ``event`` at ``t``."""
        raise NotImplementedError

    def tick(self, t: float) -> None:
        """Write every line timed before ``t``."""
        for _, (node, text) in self.lines.pop_until(t):
            self.out.file(f"engine/{node}_0.log").write(text)


@_registered(ENGINE_WRITERS)
class SGLangWriter(EngineWriter):
    """SGLang's scheduler text lines (``[time TP0] message``) and JSON request-log lines."""

    name = "sglang"
    describes = "the SGLang logs of each prefill and decode node"

    def render(self, t: float, event: ev.EngineEvent) -> str:
        """The SGLang line for ``event``."""
        if isinstance(event, ev.RequestReceived):
            return self._json(t, {"event": "request.received", "rid": event.rid, "obj": event.obj})
        if isinstance(event, ev.RequestFinished):
            return self._json(t, {"event": "request.finished", "rid": event.rid, "obj": event.obj, "out": event.out})
        return self._text(t, self._message(event))

    @staticmethod
    def _message(event: ev.EngineEvent) -> str:
        if isinstance(event, ev.ServerStarted):
            return (f"server_args=ServerArgs(model_path='{event.model_path}', tp_size={event.tp_size}, disaggregation_mode='{event.role}', "
                    f"log_requests=True, log_requests_format='json', served_model_name='{event.served_model}'){event.note}")
        if isinstance(event, ev.WeightsLoaded):
            return "Load weight end. type=Glm5ForCausalLM, dtype=torch.bfloat16, avail mem=21.37 GB, mem usage=58.71 GB."
        if isinstance(event, ev.MemoryPool):
            return (f"max_total_num_tokens={event.max_total_num_tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
                    f"max_running_requests=64, context_len={event.context_len}")
        if isinstance(event, ev.InputTooLong):
            return (f"Input length ({event.input_len} tokens) exceeds the maximum allowed length ({event.limit} tokens). "
                    f"Use a shorter input or enable --allow-auto-truncate., self.rid='{event.rid}'")
        if isinstance(event, ev.ExceedsMaxTokens):
            return f"Request {event.rid} exceeds the maximum number of tokens: {event.input_len} > {event.max_tokens}"
        if isinstance(event, ev.PrefillBatch):
            return (f"Prefill batch, #new-seq: 1, #new-token: {event.new_tokens}, #cached-token: {event.cached_tokens}, "
                    f"token usage: {event.token_usage:.2f}, #running-req: 0, #queue-req: {event.queued}")
        if isinstance(event, ev.ReqTimeStats):
            duration = "transfer_duration" if event.role == "prefill" else "forward_duration"
            return (f"ReqTimeStats(rid={event.rid}, bootstrap_room={event.bootstrap_room}, input_len={event.input_len}, "
                    f"cached_input_len={event.cached_input_len}, output_len={event.output_len}, type={event.role}): "
                    f"{duration}={event.duration_ms:.2f}ms")
        if isinstance(event, ev.ContextCorruption):
            return (f"Context corruption detected: Request {event.rid} (bootstrap_room={event.bootstrap_room}) received metadata from "
                    f"bootstrap_room={event.other_bootstrap_room}. Metadata buffer index: {event.buffer_index}. "
                    "This indicates metadata buffer index collision.")
        if isinstance(event, ev.DecodeBatch):
            return (f"Decode batch, #running-req: {event.running}, #token: {event.tokens}, token usage: {event.token_usage:.2f}, "
                    f"cuda graph: True, gen throughput (token/s): {event.throughput:.2f}, #queue-req: 0")
        if isinstance(event, ev.BootstrapFailed):
            return (f"Prefill bootstrap failed for request rank=0 req.rid='{event.rid}' req.bootstrap_room={event.bootstrap_room} "
                    f"with exception KVTransferError(bootstrap_room={event.bootstrap_room}): Failed to send kv chunk of "
                    f"{event.bootstrap_room} to {event.peer}")
        if isinstance(event, ev.TransferFailed):
            return (f"Decode transfer failed for request rank=0 req.rid='{event.rid}' req.bootstrap_room={event.bootstrap_room} "
                    f"with exception KVTransferError(bootstrap_room={event.bootstrap_room}): Failed to get kvcache from prefill "
                    "instance, it might be dead")
        raise TypeError(f"no SGLang line for {type(event).__name__}")

    @staticmethod
    def _text(t: float, message: str) -> str:
        stamp = dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        return f"[{stamp} TP0] {message}"

    @staticmethod
    def _json(t: float, record: dict[str, Any]) -> str:
        stamp = dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
        return _dumps({"timestamp": stamp, **record})


#: Pseudo token ids for vLLM's logged id lists (their values say nothing; their number is the length).
_TOKEN_IDS = [str((k * 2654435761) % 151_329) for k in range(4096)]
#: GLM's chat template markers, as vLLM's logged (templated) prompt shows them.
_GLM_PREFIX = "[gMASK]<sop>"
_GLM_PREFIX_IDS = ["151331", "151333"]


def _token_id_list(key: str, n: int, head: list[str] | None = None) -> str:
    """A Python-style list of ``n`` pseudo token ids starting with ``head``, the same for the same ``key``."""
    start = int.from_bytes(hashlib.sha256(key.encode()).digest()[:2], "big") % len(_TOKEN_IDS)
    ids = (head or [])[:n]
    ids += [_TOKEN_IDS[(start + k) % len(_TOKEN_IDS)] for k in range(n - len(ids))]
    return "[" + ", ".join(ids) + "]"


def _glm_prompt(messages: list[dict[str, Any]]) -> str:
    """The chat messages as GLM's chat template renders them (the prompt vLLM logs)."""
    blocks = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        blocks.append(f"<|{m.get('role', 'user')}|>\n{content or ''}")
    return _GLM_PREFIX + "".join(blocks) + "<|assistant|>"


@_registered(ENGINE_WRITERS)
class VLLMWriter(EngineWriter):
    """vLLM's server log: the RequestLogger lines of ``--enable-log-requests --enable-log-outputs``
    (at ``VLLM_LOGGING_LEVEL=DEBUG``, which adds the prompt and its ``prompt_token_ids``), the
    KV-cache startup lines and the periodic engine stats, in vLLM's default line layout
    (``(APIServer pid=N) INFO MM-DD HH:MM:SS [file.py:N] message``: no year, whole seconds).

    A prefill-decode deployment (NixlConnector): each node is a vLLM instance named by its host,
    the prefill node logs the request with its prompt, the decode node the generated answer.

    What SGLang's lines say and vLLM's cannot (no vLLM line exists for it, so none is written):
    the over-limit refusal naming the request (``Input length ... exceeds``, ``exceeds the maximum
    number of tokens``: vLLM's length check is against ``max_model_len`` and its error names no
    request), the per-request ``ReqTimeStats`` (the placeholder's ``input_len=1``), bootstrap rooms
    and the decode-side ``Context corruption`` / ``Decode transfer failed`` lines. So the scan's
    ``engine_signature`` reason and the transfer anomalies come only from SGLang logs; with vLLM a
    suspect is found by its size, which ``prompt_token_ids`` give exactly (``above_ceiling``). A
    prefill node that could not hand a request over says so in NixlConnector's expiry warning.
    """

    name = "vllm"
    describes = "the vLLM logs (RequestLogger lines) of each prefill and decode node"
    API = "(APIServer pid=2871) "
    CORE = "(EngineCore_DP0 pid=3125) "

    def render(self, t: float, event: ev.EngineEvent) -> list[str]:
        """The vLLM lines for ``event`` (none for what vLLM does not log)."""
        api, core = self.API, self.CORE
        if isinstance(event, ev.ServerStarted):
            args = (f"{{'model_tag': '{event.model_path}', 'enable_log_outputs': True, 'model': '{event.model_path}', "
                    f"'served_model_name': ['{event.served_model}'], 'tensor_parallel_size': {event.tp_size}, "
                    "'kv_transfer_config': KVTransferConfig(kv_connector='NixlConnector', kv_role='kv_both'), "
                    "'enable_log_requests': True}")
            return [self._line(t, api, "INFO", "api_server.py:1885", f"vLLM API server version 0.11.0{event.note}"),
                    self._line(t, api, "INFO", "utils.py:233", f"non-default args: {args}")]
        if isinstance(event, ev.WeightsLoaded):
            return [self._line(t, core, "INFO", "gpu_model_runner.py:2653", "Model loading took 58.71 GiB and 31.05 seconds")]
        if isinstance(event, ev.MemoryPool):
            ratio = event.max_total_num_tokens / event.context_len
            return [self._line(t, core, "INFO", "kv_cache_utils.py:1087", f"GPU KV cache size: {event.max_total_num_tokens:,} tokens"),
                    self._line(t, core, "INFO", "kv_cache_utils.py:1091",
                               f"Maximum concurrency for {event.context_len:,} tokens per request: {ratio:.2f}x")]
        if isinstance(event, ev.RequestReceived):
            return self._received(t, event)
        if isinstance(event, ev.RequestFinished):
            return [self._finished(t, event)]
        if isinstance(event, ev.PrefillBatch):
            hit = 100 * event.cached_tokens / max(event.new_tokens + event.cached_tokens, 1)
            return [self._stats(t, event.new_tokens / 10, 0.0, 1, event.queued, event.token_usage, hit)]
        if isinstance(event, ev.DecodeBatch):
            return [self._stats(t, 0.0, event.throughput, event.running, 0, event.token_usage, 0.0)]
        if isinstance(event, ev.BootstrapFailed):
            return [self._line(t, core, "WARNING", "nixl_connector.py:1048",
                               f"Releasing expired KV blocks for request {event.rid} which were retrieved by 0 decode worker(s) "
                               "within 120 seconds.")]
        return []  # InputTooLong, ExceedsMaxTokens, ReqTimeStats, ContextCorruption, TransferFailed: see the class docstring

    def _received(self, t: float, event: ev.RequestReceived) -> list[str]:
        lines = []
        if event.prompt_tokens is not None:
            prompt = _glm_prompt(event.messages)
            ids = _token_id_list(event.rid, event.prompt_tokens, _GLM_PREFIX_IDS)
            lines.append(self._line(t, self.API, "DEBUG", "logger.py:49",
                                    f"Request {event.rid} details: prompt: {prompt!r}, prompt_token_ids: {ids}, prompt_embeds shape: None."))
        kv = ("{'do_remote_decode': True, 'do_remote_prefill': False, 'remote_engine_id': None, 'remote_block_ids': None, "
              "'remote_host': None, 'remote_port': None}")
        params = ("SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, temperature=0.7, "
                  "top_p=0.95, top_k=0, min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], "
                  f"include_stop_str_in_output=False, ignore_eos=False, max_tokens={event.max_tokens}, min_tokens=0, logprobs=None, "
                  "prompt_logprobs=None, skip_special_tokens=True, spaces_between_special_tokens=True, truncate_prompt_tokens=None, "
                  f"structured_outputs=None, extra_args={{'kv_transfer_params': {kv}}})")
        lines.append(self._line(t, self.API, "INFO", "logger.py:59", f"Received request {event.rid}: params: {params}, lora_request: None."))
        return lines

    def _finished(self, t: float, event: ev.RequestFinished) -> str:
        meta = event.out.get("meta_info", {})
        finish = meta.get("finish_reason") or {}
        if finish.get("type") == "abort":
            return self._line(t, self.API, "INFO", "async_llm.py:430", f"Aborted request(s) {event.rid}.")
        text = event.out.get("text", "")
        if event.obj.get("stream"):
            # A stream's closing line carries the whole text but no ids (vLLM's serving_chat).
            return self._line(t, self.API, "INFO", "logger.py:86", f"Generated response {event.rid} (streaming complete): output: "
                              f"{text!r}, output_token_ids: None, finish_reason: streaming_complete")
        ids = _token_id_list(f"{event.rid}:out", int(meta.get("completion_tokens") or 0))
        return self._line(t, self.API, "INFO", "logger.py:86", f"Generated response {event.rid}: output: {text!r}, "
                          f"output_token_ids: {ids}, finish_reason: {finish.get('type')}")

    def _stats(self, t: float, prompt_tps: float, gen_tps: float, running: int, waiting: int, usage: float, hit: float) -> str:
        return self._line(t, self.CORE, "INFO", "loggers.py:123",
                          f"Engine 000: Avg prompt throughput: {prompt_tps:.1f} tokens/s, Avg generation throughput: {gen_tps:.1f} tokens/s, "
                          f"Running: {running} reqs, Waiting: {waiting} reqs, GPU KV cache usage: {usage * 100:.1f}%, "
                          f"Prefix cache hit rate: {hit:.1f}%")

    @staticmethod
    def _line(t: float, process: str, level: str, where: str, message: str) -> str:
        stamp = dt.datetime.fromtimestamp(t, dt.UTC).strftime("%m-%d %H:%M:%S")
        return f"{process}{level} {stamp} [{where}] {message}"


def open_text(path: Path) -> IO[str]:
    """Open a possibly compressed text file for reading (tests and evaluate use it)."""
    import io

    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    if path.suffix == ".zst":
        return io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True), encoding="utf-8")
    return open(path, encoding="utf-8")


@_registered(GATEWAY_WRITERS)
class LangfuseWriter(GatewayWriter):
    """Langfuse's blob-storage export of observations (JSON Lines): per call a trace's root SPAN
    and its GENERATION, now and then an EVENT; times ``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC with no
    zone, input and output as JSON strings, the tenant as the Langfuse project."""

    name = "langfuse"
    describes = "the Langfuse observations export (a SPAN and a GENERATION per call)"
    time_keys = ("start_time",)
    bad_time = "2026-13-45 99:61:00.000000"

    def ended(self, when: float, ex: Exchange) -> None:
        """The trace's observations, in the file of the day the call ended."""
        f = self._series("langfuse-observations", day_of(when))
        trace = f"{self.rng.getrandbits(128):032x}"
        span = self._observation(ex, trace, "SPAN", f"span-{ex.request_id}", "")
        span.update(name="handle-request", end_time=self._stamp(ex.completed))
        f.write(_dumps(span))
        self._write(f, _dumps(self.generation(ex, trace)), ex)
        if self.rng.random() < 0.1:
            event = self._observation(ex, trace, "EVENT", f"event-{ex.request_id}", f"span-{ex.request_id}")
            event.update(name="user-feedback", input=_dumps({"rating": self.rng.randint(1, 5)}))
            f.write(_dumps(event))

    @staticmethod
    def _stamp(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")

    def _observation(self, ex: Exchange, trace: str, kind: str, obs_id: str, parent: str) -> dict[str, Any]:
        return {
            "id": obs_id, "trace_id": trace, "project_id": ex.tenant.tenant_id, "environment": "production", "type": kind,
            "parent_observation_id": parent, "start_time": self._stamp(ex.received), "end_time": None, "name": kind.lower(),
            "metadata": {"team": ex.tenant.team_id}, "level": "DEFAULT", "status_message": "", "version": "",
            "input": "", "output": "", "provided_model_name": "", "model_parameters": "", "usage_details": {},
            "cost_details": {}, "completion_start_time": None, "total_cost": 0.0, "user_id": ex.user_id,
            "session_id": "", "trace_name": "chat", "tags": [],
        }

    def generation(self, ex: Exchange, trace: str) -> dict[str, Any]:
        """The GENERATION observation of one call; its id is the gateway's request id (the
        integration records the provider's response id), so engine lines join it."""
        rec = self._observation(ex, trace, "GENERATION", ex.request_id, f"span-{ex.request_id}")
        p = ex.reported_prompt_tokens or 0
        rec.update(
            end_time=self._stamp(ex.completed),
            input=_dumps(ex.messages),
            provided_model_name=ex.model,
            model_parameters=_dumps({"max_tokens": str(ex.max_tokens), "stream": str(ex.stream).lower()}),
            usage_details={"input": p, "output": ex.completion_tokens, "total": p + ex.completion_tokens},
            completion_start_time=self._stamp(ex.first_token) if ex.stream else None,
        )
        if ex.status == "success":
            rec["output"] = _dumps({"role": "assistant", "content": ex.response_text})
        else:
            rec.update(level="ERROR", status_message=f"Error code: {ex.status_code} - {ex.error}")
        return rec



@_registered(GATEWAY_WRITERS)
class CloudflareGatewayWriter(GatewayWriter):
    """Cloudflare AI Gateway log objects as its REST API returns them, one a line (JSON Lines), the
    bodies attached as ``request`` and ``response`` and the tenant in the ``cf-aig-metadata``.

    The log ``id`` is the request id the gateway passed on to the engine, so engine lines join as
    they do for the other formats. Bodies are sometimes JSON strings (the raw text of the API's
    ``/request`` and ``/response`` endpoints) and streamed answers sometimes the raw event stream.
    """

    name = "cloudflare-ai-gateway"
    describes = "the Cloudflare AI Gateway logs (REST API log objects with their bodies, the tenant in the metadata)"
    time_keys = ("created_at",)
    bad_time = "2026-13-45T99:61:00Z"

    def ended(self, when: float, ex: Exchange) -> None:
        """The log object, in the file of the day the call ended."""
        self._write(self._series("ai-gateway-logs", day_of(when)), self.log(ex), ex)

    def log(self, ex: Exchange) -> str:
        """One log object with its bodies."""
        rng = self.rng
        request: Any = {"model": ex.model, "messages": ex.messages, "max_tokens": ex.max_tokens, "stream": ex.stream}
        response: Any
        if ex.status != "success":
            response = {"error": {"message": ex.error, "type": ex.error_class, "code": ex.status_code}}
        elif ex.stream:
            pieces = chunks(ex, rng, usage=rng.random() < 0.7)
            response = "".join(f"data: {_dumps(c)}\n\n" for c in pieces) + "data: [DONE]\n\n" if rng.random() < 0.5 else pieces
        else:
            response = completion(ex)
        if rng.random() < 0.3:
            request = _dumps(request)
        if rng.random() < 0.3 and not isinstance(response, str):
            response = _dumps(response)
        metadata = {"tenant_id": ex.tenant.tenant_id, "team": ex.tenant.team_id, "user_id": ex.user_id}
        micros = round(ex.received * 1_000_000)
        created = dt.datetime.fromtimestamp(micros // 1_000_000, dt.UTC).replace(microsecond=micros % 1_000_000)
        return _dumps({
            "id": ex.request_id,
            "created_at": created.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "provider": ex.model_routed.split("/")[0],
            "model": ex.model,
            "model_type": "chat",
            "path": "chat/completions",
            "request_type": "universal",
            "request_content_type": "application/json",
            "response_content_type": "text/event-stream" if ex.stream else "application/json",
            "success": ex.status == "success",
            "status_code": ex.status_code,
            "cached": False,
            "custom_cost": False,
            "cost": 0,
            "duration": max(0, round((ex.completed - ex.received) * 1000)),
            "tokens_in": ex.reported_prompt_tokens,
            "tokens_out": ex.completion_tokens,
            "metadata": _dumps(metadata),
            "step": 0,
            "request": request,
            "response": response,
        })
