"""Rows for the query cases and the scan tests, written by the shared builder (forensics.lab.cases).

Rows name only the columns that matter; the rest are null. Times may be ISO strings.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from forensics.lab import cases

MODEL = "glm-5.3"
CEILING = 681280
ADVERTISED = 1048576
WINDOW = ("2026-08-27T00:00:00Z", "2026-09-09T00:00:00Z")


def exchange(request_id: str, **kw: Any) -> dict[str, Any]:
    """An exchange row with plausible defaults: an exact 1,000-token prompt answered in the window."""
    row: dict[str, Any] = {
        "request_id": request_id,
        "tenant_id": "acme",
        "model": MODEL,
        "received_at": "2026-08-29T10:00:00Z",
        "completed_at": "2026-08-29T10:00:05Z",
        "status": "success",
        "prompt_text": "hello",
        "response_text": "an answer",
        "prompt_tokens": 1000,
        "prompt_tokens_source": "tokenizer",
    }
    row.update(kw)
    for key in ("low", "high"):
        if f"prompt_tokens_{key}" not in kw:
            row[f"prompt_tokens_{key}"] = row["prompt_tokens"]
    return row


def event(node: str, kind: str, **kw: Any) -> dict[str, Any]:
    """An engine event row; the role comes from the node name unless given."""
    role = "prefill" if "prefill" in node else "decode" if "decode" in node else None
    row: dict[str, Any] = {"node": node, "role": role, "event": kind, "message": f"{kind} on {node}",
                           "time": "2026-08-29T10:00:01Z"}
    row.update(kw)
    return row


def startup(node: str, pool: int = CEILING, context: int = ADVERTISED) -> dict[str, Any]:
    """A startup line of a node."""
    return event(node, "startup", max_total_num_tokens=pool, context_len=context, time="2026-08-27T00:00:05Z")


def signature_events(rid: str, room: int, real_len: int = 812345, prefill: str = "prefill-0",
                     decode: str = "decode-0", output: int = 256) -> list[dict[str, Any]]:
    """The bug's engine trace: over-limit on prefill, placeholder prefill, decode output."""
    return [
        event(prefill, "over_limit", rid=rid, input_len=real_len, limit=CEILING - 1),
        event(prefill, "exceeds_max_tokens", rid=rid, input_len=real_len, limit=CEILING),
        event(prefill, "req_time_stats", rid=rid, bootstrap_room=room, input_len=1, output_len=0),
        event(decode, "req_time_stats", rid=rid, bootstrap_room=room, input_len=1, output_len=output),
    ]


def write_case(root: Path, exchanges: Iterable[dict[str, Any]], events: Iterable[dict[str, Any]] | None = None) -> Path:
    """A case folder holding the given exchanges (and engine events, when given)."""
    return cases.write_case(root, exchanges, engine_events=events)
