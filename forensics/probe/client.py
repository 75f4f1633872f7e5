"""A minimal OpenAI-compatible chat completions client on the standard library.

``http.client`` talks only to the host in the base URL: no proxy from the environment, no
redirects followed, nothing else contacted. One request at a time; 429 and 5xx are retried with
exponential backoff (``Retry-After`` honoured when it is no longer than the backoff cap), every
other failure is returned as it is, so the caller can record it as evidence.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from forensics.errors import ProbeError, json_name

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
ERROR_EXCERPT = 300
READ_CHUNK = 65536
# The probe asks for two markers, --max-tokens 64 by default: a few hundred bytes of JSON, some
# 20 KB streamed (an event of a few hundred bytes per token). 4 MiB leaves room for thousands of
# tokens; an answer larger than that is a broken or hostile server, and reading it whole could
# exhaust the memory of the machine running the probe.
MAX_REPLY_BYTES = 4 * 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Reply:
    """What one chat request got back (after retries)."""

    status: int | None  # HTTP status of the last attempt; None when no response arrived
    content: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    attempts: int
    error: str | None  # "timeout", "connection refused", "HTTP 400: ...", ...

    @property
    def answered(self) -> bool:
        """Whether the endpoint produced an answer (HTTP 200 with content, possibly empty)."""
        return self.status == 200 and self.content is not None


@dataclasses.dataclass(frozen=True)
class ClientSettings:
    """How to talk to the endpoint."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 120.0
    retries: int = 3
    backoff: float = 1.0
    backoff_cap: float = 30.0
    max_tokens: int = 64
    stream: bool = False


class ChatClient:
    """Sends one user message at a time to ``{base_url}/chat/completions``."""

    def __init__(self, settings: ClientSettings, sleep: Callable[[float], None] = time.sleep) -> None:
        self.settings = settings
        self._sleep = sleep
        shown = shown_url(settings.base_url)
        try:
            parsed = urllib.parse.urlsplit(settings.base_url)
        except ValueError:  # e.g. an unclosed [ of an IPv6 address
            parsed = urllib.parse.urlsplit("")
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ProbeError(
                f"--base-url {shown!r} is not an http(s) URL",
                fix="give the API root, e.g. http://127.0.0.1:8000/v1",
            )
        # Only the host, port and path are used: a user name, password or query would silently
        # not be sent, and the URL is written into the report.
        if "@" in parsed.netloc:
            raise ProbeError(f"--base-url {shown!r} holds a user name or password, which the probe does not send "
                             "and must not write into its report",
                             fix="leave them out of the URL; give the API key with --api-key-env")
        if parsed.query:
            raise ProbeError(f"--base-url {shown!r} has a query string, which the probe does not send",
                             fix="give the API root alone, e.g. http://127.0.0.1:8000/v1")
        self._scheme = parsed.scheme
        self._host = parsed.hostname
        try:
            self._port = parsed.port
        except ValueError:
            raise ProbeError(f"--base-url {shown!r} has a bad port", fix="e.g. http://127.0.0.1:8000/v1") from None
        self._path = parsed.path.rstrip("/") + "/chat/completions"

    def _redact(self, text: str) -> str:
        # A misbehaving server may echo the Authorization header back in an error body.
        key = self.settings.api_key
        return text.replace(key, "[redacted]") if key else text

    def complete(self, text: str, max_attempts: int | None = None) -> Reply:
        """Send ``text`` as the single user message; retry 429/5xx; never raise for the endpoint's failures.

        ``max_attempts`` (default ``retries + 1``) lets the caller keep retries inside a token budget.
        """
        s = self.settings
        limit = s.retries + 1 if max_attempts is None else max(1, max_attempts)
        body: dict[str, Any] = {
            "model": s.model,
            "messages": [{"role": "user", "content": text}],
            "max_tokens": s.max_tokens,
            "temperature": 0,
            "stream": s.stream,
        }
        if s.stream:
            body["stream_options"] = {"include_usage": True}
        payload = json.dumps(body).encode("utf-8")
        attempt = 0
        while True:
            attempt += 1
            reply, retry_after = self._once(payload, attempt)
            if reply.status not in RETRY_STATUSES or attempt >= limit:
                return reply
            delay = min(s.backoff * (2 ** (attempt - 1)), s.backoff_cap)
            if retry_after is not None:
                if retry_after > s.backoff_cap:  # the endpoint asks for a long pause: stop here, say so
                    return dataclasses.replace(reply, error=f"{reply.error} (Retry-After {retry_after:g} s is above the backoff cap)")
                delay = retry_after
            self._sleep(delay)

    def _connection(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self.settings.timeout)

    def _once(self, payload: bytes, attempt: int) -> tuple[Reply, float | None]:
        s = self.settings
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream" if s.stream else "application/json"}
        if s.api_key:
            headers["Authorization"] = f"Bearer {s.api_key}"
        deadline = time.monotonic() + s.timeout
        conn = self._connection()
        cutoff: threading.Timer | None = None
        expired = threading.Event()
        try:
            conn.connect()
            sock = conn.sock  # the response reads from it even after the connection hands it over
            # The socket timeout bounds one read, and http.client reads many inside one call (a 1xx interim
            # response at a time, a header line, a chunk size, a trailer line): a server feeding them slowly held a
            # request far past --timeout. When the time is up the socket is shut, whatever is reading it.
            cutoff = threading.Timer(max(0.0, deadline - time.monotonic()), _shut, (sock, expired))
            cutoff.daemon = True
            cutoff.start()
            conn.request("POST", self._path, body=payload, headers=headers)
            _time_left(sock, deadline)
            resp = conn.getresponse()
            if resp.status != 200:
                raw = _read(resp, sock, deadline, ERROR_EXCERPT * 4)
                excerpt = self._redact(raw.decode("utf-8", "replace"))[:ERROR_EXCERPT]
                where = resp.getheader("Location") if 300 <= resp.status < 400 else None
                redirect = (f" (a redirect to {self._redact(where)[:200]!r}, not followed: the probe talks only to the "
                            "URL given)" if where else "")
                return (Reply(resp.status, None, None, None, attempt,
                              f"HTTP {resp.status}{redirect}: {' '.join(excerpt.split())}"),
                        _retry_after(resp.getheader("Retry-After")))
            encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
            if encoding not in ("identity", ""):
                return Reply(200, None, None, None, attempt, f"HTTP 200 but the answer is compressed (Content-Encoding: "
                                                             f"{encoding[:40]}), which the probe did not ask for"), None
            if s.stream:
                reply = self._read_stream(_lines(resp, sock, deadline), attempt)
            else:
                if resp.length is not None and resp.length > MAX_REPLY_BYTES:
                    raise _TooLarge
                raw = _read(resp, sock, deadline, MAX_REPLY_BYTES + 1)
                if len(raw) > MAX_REPLY_BYTES:
                    raise _TooLarge
                reply = self._read_json(raw, attempt)
            if expired.is_set():  # shut while the last read ended: what was read may be cut short
                return Reply(200 if s.stream else None, None, None, None, attempt,
                             f"timeout after {s.timeout:g} s{' (stream)' if s.stream else ''}"), None
            return reply, None
        except _TooLarge:
            return Reply(200, None, None, None, attempt, f"HTTP 200 but the answer is over {MAX_REPLY_BYTES >> 20} MiB, far more "
                                                         f"than --max-tokens {s.max_tokens} asks for; not read further"), None
        except TimeoutError:
            return Reply(None, None, None, None, attempt, f"timeout after {s.timeout:g} s"), None
        except ConnectionRefusedError:
            return Reply(None, None, None, None, attempt, "connection refused"), None
        except (OSError, http.client.HTTPException) as exc:
            if expired.is_set():  # the socket shut at the deadline
                return Reply(None, None, None, None, attempt, f"timeout after {s.timeout:g} s"), None
            return Reply(None, None, None, None, attempt, self._redact(f"{type(exc).__name__}: {exc}")), None
        finally:
            if cutoff is not None:
                cutoff.cancel()
            conn.close()

    def _read_json(self, raw: bytes, attempt: int) -> Reply:
        try:
            # A stray byte that is not UTF-8 (a model's or a proxy's) must not hide the answer: read as a stream is.
            data = json.loads(raw.decode("utf-8", "replace"))
            message = data["choices"][0]["message"]
            if not isinstance(message, dict):
                raise TypeError(message)
            content = message["content"] if "content" in message or not _reasoning(message) else None
        except RecursionError:
            return Reply(200, None, None, None, attempt, "HTTP 200 but the answer is JSON nested too deep to read")
        except (ValueError, KeyError, IndexError, TypeError):
            return Reply(200, None, None, None, attempt, "HTTP 200 without choices[0].message.content")
        try:
            # A reasoning model writes its reasoning beside the content (and may spend --max-tokens
            # on it alone): markers, its own or a leaked prompt's, can be in either.
            text = _joined(_reasoning(message), _text(content, "choices[0].message.content"))
            prompt_tokens, completion_tokens = _usage(data.get("usage"))
        except _Malformed as exc:
            return Reply(200, None, None, None, attempt, f"HTTP 200 but {exc}")
        return Reply(200, text, prompt_tokens, completion_tokens, attempt, None)

    def _read_stream(self, lines: Iterator[bytes], attempt: int) -> Reply:
        parts: list[str] = []
        prompt_tokens = completion_tokens = None
        done = False
        while True:
            try:
                raw = next(lines, None)
            except TimeoutError:
                return Reply(200, None, None, None, attempt, f"timeout after {self.settings.timeout:g} s (stream)")
            if raw is None:
                break
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue  # blank separators, comments (": keep-alive"), event: lines
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except RecursionError:
                return Reply(200, None, None, None, attempt, "HTTP 200 but a stream chunk is JSON nested too deep to read")
            except ValueError:
                return Reply(200, None, None, None, attempt, "stream chunk is not JSON")
            try:
                parts.append(_chunk_text(chunk))
                # Servers may send "usage": null (or {}) on every chunk before the last one.
                if chunk.get("usage") not in (None, {}):
                    prompt_tokens, completion_tokens = _usage(chunk["usage"])
            except _Malformed as exc:
                return Reply(200, None, None, None, attempt, f"HTTP 200 but {exc}")
        if not done:
            return Reply(200, None, None, None, attempt, "stream ended without data: [DONE]")
        return Reply(200, "".join(parts), prompt_tokens, completion_tokens, attempt, None)


def shown_url(url: str) -> str:
    """``url`` as it may be printed or written: any user name, password and query replaced by [redacted]."""
    url = re.sub(r"^((?:[^:/?#]+:)?//)?[^/?#]*@", r"\1[redacted]@", url)
    return re.sub(r"\?[^#]*", "?[redacted]", url, count=1)


def _time_left(sock: socket.socket, deadline: float) -> None:
    # The socket timeout bounds each read, not the request: a server trickling a byte at a time
    # would never trip it. Every read gets only what is left of --timeout.
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    sock.settimeout(left)


#: What ends a line of an event stream: CRLF, LF or a lone CR.
_LINE_END = re.compile(rb"\r\n|\n|\r")


def _shut(sock: socket.socket, expired: threading.Event) -> None:
    """Shut ``sock`` at a request's deadline: whatever read is waiting on it returns."""
    expired.set()
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already closed
        pass


class _TooLarge(Exception):
    """The answer is over MAX_REPLY_BYTES."""


def _read(resp: http.client.HTTPResponse, sock: socket.socket, deadline: float, limit: int) -> bytes:
    """The body up to ``limit`` bytes, within the deadline."""
    buf = bytearray()
    while len(buf) < limit:
        _time_left(sock, deadline)
        chunk = resp.read1(min(READ_CHUNK, limit - len(buf)))
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def _lines(resp: http.client.HTTPResponse, sock: socket.socket, deadline: float) -> Iterator[bytes]:
    """The body's lines (without their newline), read within the deadline; _TooLarge past MAX_REPLY_BYTES."""
    pending = bytearray()
    total = 0
    while True:
        _time_left(sock, deadline)
        chunk = resp.read1(READ_CHUNK)
        if not chunk:
            break
        total += len(chunk)
        if total > MAX_REPLY_BYTES:
            raise _TooLarge
        pending += chunk
        if b"\n" in chunk or b"\r" in chunk:
            # LF, CRLF or a lone CR ends a line (the event stream format allows all three); a CR at the very end may
            # be the first half of a CRLF, so it waits for the next chunk.
            *lines, rest = _LINE_END.split(bytes(pending))
            if rest == b"" and pending.endswith(b"\r"):
                lines, rest = lines[:-1], lines[-1] + b"\r" if lines else b"\r"
            pending = bytearray(rest)
            yield from lines
    if pending:
        yield from _LINE_END.split(bytes(pending))


class _Malformed(ValueError):
    """An HTTP 200 answer of a shape the probe cannot read; the message says which field and why."""


def _text(value: Any, where: str) -> str:
    # A string, null (no text: the answer is empty) or, as OpenAI-compatible servers may send, a
    # list of content parts whose text parts are the answer (other parts, e.g. a refusal, hold none).
    if value is None or isinstance(value, str):
        return value or ""
    if not isinstance(value, list):
        raise _Malformed(f"{where} is {json_name(value)}, not a string or a list of content parts")
    texts = []
    for part in value:
        if not isinstance(part, dict):
            raise _Malformed(f"{where} is an array holding {json_name(part)}, not content parts")
        if part.get("type", "text") == "text":
            if not isinstance(part.get("text"), str):
                raise _Malformed(f"{where} has a text part whose text is {json_name(part.get('text'))}")
            texts.append(part["text"])
        elif part.get("type") == "thinking" and isinstance(part.get("thinking"), str | list):
            # A reasoning model's thinking in the content (Anthropic: a string; Mistral: text parts).
            thinking = part["thinking"]
            texts.append(thinking if isinstance(thinking, str) else _text(thinking, f"{where} thinking"))
    return "".join(texts)


def _chunk_text(chunk: Any) -> str:
    if not isinstance(chunk, dict):
        raise _Malformed(f"a stream chunk is {json_name(chunk)}, not an object")
    choices = chunk.get("choices") or []
    if not isinstance(choices, list):
        raise _Malformed(f"a stream chunk's choices is {json_name(choices)}, not a list")
    pieces = []
    for choice in choices:
        if not isinstance(choice, dict):
            raise _Malformed(f"a stream chunk's choice is {json_name(choice)}, not an object")
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise _Malformed(f"a stream chunk's delta is {json_name(delta)}, not an object")
        pieces.append(_joined(_reasoning(delta), _text(delta.get("content"), "a stream chunk's delta.content")))
    return "".join(pieces)


def _reasoning(message: dict[str, Any]) -> str:
    """The reasoning a message or delta carries: ``reasoning_content`` (SGLang, DeepSeek) or ``reasoning``
    (vLLM); empty when neither is text."""
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str) and message[key]:
            return str(message[key])
    return ""


def _joined(reasoning: str, content: str) -> str:
    # Both are searched for markers, as one text (the search ignores what lies between markers).
    return f"{reasoning}\n{content}" if reasoning and content else reasoning or content


def _usage(usage: Any) -> tuple[int | None, int | None]:
    if usage is None:
        return None, None
    if not isinstance(usage, dict):
        raise _Malformed(f"usage is {json_name(usage)}, not an object")
    p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
    # bool is an int in Python, not a count in JSON.
    return (p if isinstance(p, int) and not isinstance(p, bool) else None,
            c if isinstance(c, int) and not isinstance(c, bool) else None)


def _retry_after(value: str | None) -> float | None:
    # Only the delta-seconds form; an HTTP date is treated as absent (the backoff applies).
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None
