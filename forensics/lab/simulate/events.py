"""What the simulated engine does, as events; an engine writer renders them in its log format.

The mechanism decides what happens on each node (and draws every random figure); the writer of
the engine format (``sglang`` or ``vllm``, see forensics.lab.simulate.writers) decides how a line of that
format says it. Another engine format is another writer over these same events.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal


@dataclasses.dataclass(frozen=True)
class ServerStarted:
    """The server's arguments at start-up (``note`` is appended to the line, e.g. a release label)."""

    role: Literal["prefill", "decode"]
    model_path: str
    served_model: str
    tp_size: int
    note: str = ""


@dataclasses.dataclass(frozen=True)
class WeightsLoaded:
    """The model weights are loaded."""


@dataclasses.dataclass(frozen=True)
class MemoryPool:
    """The KV pool's size (the real ceiling) and the advertised context window."""

    max_total_num_tokens: int
    context_len: int


@dataclasses.dataclass(frozen=True)
class RequestReceived:
    """A request arrived at a node; ``obj`` is the request object the engine logs.

    ``messages``, ``prompt_tokens`` (the real length) and ``max_tokens`` are what an engine that
    logs the prompt itself (vLLM's RequestLogger) says; SGLang's request log leaves them out.
    """

    rid: str
    obj: dict[str, Any]
    messages: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    prompt_tokens: int | None = None
    max_tokens: int | None = None


@dataclasses.dataclass(frozen=True)
class InputTooLong:
    """The tokenizer manager refused an input longer than ``limit`` tokens."""

    rid: str
    input_len: int
    limit: int


@dataclasses.dataclass(frozen=True)
class ExceedsMaxTokens:
    """The scheduler found a request over the pool's token budget."""

    rid: str
    input_len: int
    max_tokens: int


@dataclasses.dataclass(frozen=True)
class PrefillBatch:
    """A prefill batch ran (one new sequence)."""

    new_tokens: int
    cached_tokens: int
    token_usage: float
    queued: int


@dataclasses.dataclass(frozen=True)
class ReqTimeStats:
    """Per-request timing on a prefill or decode node (``duration_ms`` is transfer or forward time)."""

    rid: str
    bootstrap_room: int
    input_len: int
    cached_input_len: int
    output_len: int
    role: Literal["prefill", "decode"]
    duration_ms: float


@dataclasses.dataclass(frozen=True)
class ContextCorruption:
    """A decode node received another request's metadata buffer."""

    rid: str
    bootstrap_room: int
    other_bootstrap_room: int
    buffer_index: int


@dataclasses.dataclass(frozen=True)
class RequestFinished:
    """A request finished on a node; ``out`` holds the answer text and the engine's meta info."""

    rid: str
    obj: dict[str, Any]
    out: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class DecodeBatch:
    """A decode batch ran."""

    running: int
    tokens: int
    token_usage: float
    throughput: float


@dataclasses.dataclass(frozen=True)
class BootstrapFailed:
    """The prefill node could not send a request's KV cache to its decode peer."""

    rid: str
    bootstrap_room: int
    peer: str


@dataclasses.dataclass(frozen=True)
class TransferFailed:
    """The decode node could not get a request's KV cache from its prefill peer."""

    rid: str
    bootstrap_room: int


EngineEvent = (ServerStarted | WeightsLoaded | MemoryPool | RequestReceived | InputTooLong | ExceedsMaxTokens | PrefillBatch
               | ReqTimeStats | ContextCorruption | RequestFinished | DecodeBatch | BootstrapFailed | TransferFailed)
