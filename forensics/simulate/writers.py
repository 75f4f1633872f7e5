"""Write simulated exchanges and engine lines as the real tools log them (spec/log-formats.md).

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
import random
from pathlib import Path
from typing import IO, Any

import orjson
import zstandard

from forensics.simulate.mechanism import Exchange

#: LiteLLM's DB safeguard (spend-log rows): strings longer than this are cut.
MAX_STRING_LENGTH_PROMPT_IN_DB = 2048
TRUNCATION_NOTE = "Truncation is a DB storage safeguard."


class _Hashing:
    """A raw binary file that counts and hashes what goes through it."""

    def __init__(self, path: Path) -> None:
        self.fh = open(path, "wb")
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
        path.parent.mkdir(parents=True, exist_ok=True)
        self.raw = _Hashing(path)
        self.stream: Any
        if rel.endswith(".gz"):
            self.stream = gzip.GzipFile(filename="", mode="wb", fileobj=self.raw, mtime=0, compresslevel=6)  # type: ignore[arg-type]
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
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%d")


def _zone_less(t: float) -> str:
    """LiteLLM's spend-log time: UTC, no zone, no trailing zeros (``2026-08-29T10:01:54.88``)."""
    d = dt.datetime.fromtimestamp(t, dt.timezone.utc)
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


class GatewayWriter:
    """LiteLLM callback payloads (+ overlapping spend-log exports) or openai-split files."""

    def __init__(self, outputs: Outputs, fmt: str, seed: int, compression: dict[str, str], spend_days: set[str],
                 broken: dict[int, str]) -> None:
        self.out = outputs
        self.fmt = fmt
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
        """Take one exchange: queue its callback/response line, write its request line now."""
        if self.fmt == "litellm":
            self.callbacks.push(ex.completed, ex)
            if day_of(ex.received) in self.spend_days:
                # The DB export is ordered by startTime, which is arrival order.
                self._write(self._series("spend-logs", day_of(ex.received)), self.spend_log(ex), ex)
                self.spend_rows += 1
        else:
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

    def tick(self, t: float) -> None:
        """Write every call that ended before ``t``."""
        for when, ex in self.callbacks.pop_until(t):
            if self.fmt == "litellm":
                self._write(self._series("litellm-callbacks", day_of(when)), self.payload(ex), ex)
            else:
                self._series("responses", day_of(when)).write(self.split_response(ex))

    def _write(self, f: LineFile, line: str, ex: Exchange) -> None:
        defect = self.broken.pop(ex.index, None) if not f.rel.startswith("gateway/spend-logs") else None
        if defect == "partial":
            # A writer killed mid-line; the retried callback wrote the whole record after it.
            n = f.write(line[: self.rng.randint(20, min(400, len(line) - 2))])
            self.quarantine.append({"file": f.rel, "line": n, "reason": "truncated JSON (partial write)", "request_id": ex.request_id})
        elif defect == "bad_time":
            bad = orjson.loads(line)
            obj = bad.get("standard_logging_object", bad)
            for key in ("startTime", "timestamp"):
                if key in obj:
                    obj[key] = "2026-13-45T99:61:00"
            n = f.write(_dumps(bad))
            self.quarantine.append({"file": f.rel, "line": n, "reason": "bad timestamp (copy of the next record)", "request_id": ex.request_id})
        elif defect == "blank":
            f.write("")
            self.blank += 1
        f.write(line)

    # ---- litellm -----------------------------------------------------------------------------

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

    # ---- openai-split ------------------------------------------------------------------------

    def _stamp(self, t: float) -> Any:
        if self.rng.random() < 0.2:
            return int(round(t * 1000))
        return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

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


class EngineWriter:
    """Per-node SGLang logs ``engine/{hostname}_{rank}.log``, lines in time order."""

    def __init__(self, outputs: Outputs) -> None:
        self.out = outputs
        self.lines = Ordered()

    def line(self, node: str, t: float, text: str) -> None:
        """Queue one log line of ``node`` at time ``t``."""
        self.lines.push(t, (node, text))

    def tick(self, t: float) -> None:
        """Write every line timed before ``t``."""
        for _, (node, text) in self.lines.pop_until(t):
            self.out.file(f"engine/{node}_0.log").write(text)


def open_text(path: Path) -> IO[str]:
    """Open a possibly compressed text file for reading (tests and evaluate use it)."""
    import io

    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    if path.suffix == ".zst":
        return io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True), encoding="utf-8")
    return open(path, encoding="utf-8")
