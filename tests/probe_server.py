"""An OpenAI-compatible chat completions server on loopback that reproduces the incident's bug.

The fake engine has a real KV pool of ``pool_tokens`` tokens in its own counting (UTF-8 bytes / 4,
rounded up, plus a fixed chat-template overhead; or a tokenizer's count when given one).

``buggy``
    A prompt above the pool is swapped for a one-token placeholder: the answer is generated from
    the pool's stale pages, i.e. a window out of the middle of the last prompt that did fit, with
    HTTP 200 and ``usage.prompt_tokens = 1``. A prompt that fits is answered from its own text and
    its pages become the pool's content.
``fixed``
    A prompt above the pool is rejected with HTTP 400 (vLLM's wording); others answered.
``healthy``
    The pool is as large as the advertised window.
``truncating``
    A prompt above the pool is cut to the head that fits and answered from it, with the cut prompt's
    count in ``usage`` (a silently smaller window).
``slow``
    Holds every request until released (or 10 s), for timeout tests.

The "model" does what the probe's prompt asks: it repeats the first and the last marker it can
see in its context, loosely formatted (the first one upper-cased, in backticks), the way a real
model might; with no marker in its context it says so.

Options for the safety tests: ``fail_first`` answers that many requests with ``fail_status``
(429 with ``Retry-After: retry_after``, 0 by default) before serving; ``echo_auth`` answers 401 quoting the
Authorization header; ``usage=False`` leaves usage out; ``chunk_delay`` trickles a stream.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MARKER = re.compile(r"zq[a-z0-9]{10}")
TEMPLATE_TOKENS = 12  # "<|user|> ... <|assistant|>" and friends
STALE_WINDOW_CHARS = 3000


def bytes_tokens(text: str) -> int:
    """The fake tokenizer: 4 bytes per token, rounded up."""
    return math.ceil(len(text.encode("utf-8")) / 4)


class FakeEngine:
    """The serving engine's state: mode, pool, and a log of what was received."""

    def __init__(self, mode: str = "buggy", pool_tokens: int = 13_000, advertised: int = 20_000,
                 count: Callable[[str], int] = bytes_tokens) -> None:
        self.mode = mode
        self.pool_tokens = advertised if mode == "healthy" else pool_tokens
        self.count = count
        self.fail_first = 0
        self.fail_status = 429
        self.retry_after = "0"
        self.echo_auth = False
        self.usage = True
        self.chunk_delay = 0.0  # seconds between streamed chunks (a trickling server)
        # A reasoning model that spends its few tokens thinking: the answer in this field
        # ("reasoning_content" as SGLang writes it, "reasoning" as vLLM does), the content null.
        self.reasoning = ""
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Forget the pool and the log (a freshly started engine)."""
        self.pool = ""  # text whose KV pages the pool holds
        self.received: list[dict[str, Any]] = []

    def prompt_tokens(self, text: str) -> int:
        """Tokens of a one-message prompt, template included."""
        return self.count(text) + TEMPLATE_TOKENS

    def handle(self, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, str], dict[str, Any]]:
        """Serve one request: (status, extra headers, JSON body)."""
        with self.lock:
            self.received.append({"body": body, "headers": headers})
            if len(self.received) <= self.fail_first:
                extra = {"Retry-After": self.retry_after} if self.fail_status == 429 else {}
                return self.fail_status, extra, {"error": {"message": "try again later"}}
        if self.echo_auth:
            return 401, {}, {"error": {"message": f"invalid key in header {headers.get('Authorization')}"}}
        if self.mode == "slow":
            self.release.wait(10)
        text = body["messages"][-1]["content"]
        n = self.prompt_tokens(text)
        with self.lock:
            if n <= self.pool_tokens:
                self.pool, context, reported = text, text, n
            elif self.mode == "truncating":  # keeps the head that fits and says so in its count, silently otherwise
                keep = len(text) * self.pool_tokens // n
                context, reported = text[:keep], self.prompt_tokens(text[:keep])
            elif self.mode == "fixed":
                return 400, {}, {"error": {"message": f"This model's maximum context length is {self.pool_tokens} "
                                                      f"tokens. However, you requested {n} tokens.", "type": "BadRequestError"}}
            else:  # the bug: placeholder in, stale pages out
                start = len(self.pool) // 3
                context, reported = self.pool[start:start + STALE_WINDOW_CHARS], 1
        answer = self.answer(context)
        usage = {"prompt_tokens": reported, "completion_tokens": self.count(answer),
                 "total_tokens": reported + self.count(answer)}
        return 200, {}, {"answer": answer, "usage": usage if self.usage else None}

    @staticmethod
    def answer(context: str) -> str:
        """What the fake model says: the first and last marker it sees, loosely formatted."""
        markers = MARKER.findall(context)
        if not markers:
            return "I do not see any markers in your message."
        return f"The first marker is `{markers[0].upper()}` and the last one is {markers[-1]}."


def _handler(engine: FakeEngine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _json(self, status: int, extra: dict[str, str], data: dict[str, Any]) -> None:
            raw = json.dumps(data).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in extra.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def do_POST(self) -> None:
            if not self.path.endswith("/chat/completions"):
                self._json(404, {}, {"error": {"message": "not found"}})
                return
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, extra, data = engine.handle(body, dict(self.headers.items()))
            if status != 200:
                self._json(status, extra, data)
                return
            answer, usage, model = data["answer"], data["usage"], body.get("model")
            if not body.get("stream"):
                message = {"role": "assistant", "content": None, engine.reasoning: answer} if engine.reasoning else {
                    "role": "assistant", "content": answer}
                out = {"id": "cmpl-1", "object": "chat.completion", "model": model,
                       "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
                if usage:
                    out["usage"] = usage
                self._json(200, {}, out)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            pieces = [answer[i:i + 7] for i in range(0, len(answer), 7)]
            for piece in pieces:
                engine.release.wait(engine.chunk_delay)
                self.wfile.flush()
                chunk = {"object": "chat.completion.chunk", "model": model,
                         "choices": [{"index": 0, "delta": {engine.reasoning or "content": piece}, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if usage and (body.get("stream_options") or {}).get("include_usage"):
                last = {"object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}
                self.wfile.write(f"data: {json.dumps(last)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")

    return Handler


class ProbeServer:
    """A FakeEngine served on 127.0.0.1 at an ephemeral port, in a background thread."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(engine))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        """The API root to give the probe."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ProbeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.engine.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()
