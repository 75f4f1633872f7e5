"""A second gateway in front of a simulated incident's: the same traffic logged again under other ids.

An API front door (a Cloudflare AI Gateway, a second proxy) receives each call a few milliseconds before the gateway
behind it and sees it end a few after, and logs it as split request and response logs under its own request ids and
its own account names. Its logs hold every exchange of the callbacks twice: what the ingest's fold of one exchange
logged twice (``forensics.ingest.copies``) must undo, so that the list stays the one the gateway's logs alone give.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

from forensics.errors import ForensicsError

#: The system prompt a front door that adds one of its own logs at the head of each conversation.
FRONT_DOOR_SYSTEM = "Front door policy v2."
#: The input entries of a simulated LiteLLM case file that the front door's logs join (the callbacks and spend logs
#: keep their own entries; the front door's split logs get theirs).
_INPUTS = ('format = "litellm"\npath = "gateway"',
           'format = "litellm"\npath = "gateway/litellm-*"\n\n[[inputs]]\nformat = "litellm"\npath = "gateway/spend-*"\n\n'
           '[[inputs]]\nformat = "openai-split"\npath = "gateway/frontdoor-*"')


def _iso(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _records(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a callbacks log, plain or compressed (the simulator's damaged lines, and what follows the
    damage in a file it cut short, left out: no gateway logs those twice)."""
    from forensics.ingest.reader import FileProblem, read_lines

    problems: list[FileProblem] = []
    out = []
    for line in read_lines(path, problems):
        try:
            record = json.loads(line.text or "")
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _parsed(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def add_front_door(case_dir: Path, glob: str = "litellm-callbacks-*", own_system_prompt: bool = False,
                   clock_offset: float = 0.0) -> int:
    """Write a front door's split logs beside the callbacks ``glob`` names in the simulated LiteLLM incident at
    ``case_dir`` (every call they log with a conversation and numeric times, under a request id of its own and the
    customer's account name; with ``own_system_prompt``, with a system prompt of its own at the head; with
    ``clock_offset``, its clock that many seconds ahead of the gateway's: a host whose clock drifted, or one writing
    local time as UTC), add them to the case file, and return how many requests it logged."""
    case_file = case_dir / "case.toml"
    text = case_file.read_text(encoding="utf-8")
    if _INPUTS[0] not in text:
        raise ForensicsError(f"{case_file} has no gateway input of a simulated LiteLLM incident to put a front door before",
                             fix="simulate the incident with --format litellm")
    requests, responses = [], []
    for path in sorted((case_dir / "gateway").glob(glob)):
        for row in _records(path):
            s = row.get("standard_logging_object") or row
            if not s.get("messages") or not all(isinstance(s.get(k), int | float) for k in ("startTime", "endTime")):
                continue
            metadata = _parsed(s.get("metadata"))
            account = metadata.get("user_api_key_alias") if isinstance(metadata, dict) else None
            if not account:
                continue
            rid = "fd-" + hashlib.sha1(str(s["id"]).encode()).hexdigest()[:16]
            messages = _parsed(s["messages"])
            if not isinstance(messages, list):
                continue
            if own_system_prompt:
                messages = [{"role": "system", "content": FRONT_DOOR_SYSTEM}, *messages]
            requests.append({"request_id": rid, "timestamp": _iso(s["startTime"] - 0.004 + clock_offset), "tenant_id": account,
                             "body": {"model": s.get("model_group"), "stream": bool(s.get("stream")), "messages": messages}})
            answer = _parsed(s.get("response"))
            half = {"request_id": rid, "timestamp": _iso(s["endTime"] + 0.002 + clock_offset), "status_code": 200}
            if isinstance(answer, dict) and answer.get("choices"):
                responses.append(half | {"body": answer})
            elif isinstance(answer, list) and answer:
                responses.append(half | {"chunks": answer})
    name = ("frontdoor-" + glob.removeprefix("litellm-callbacks-").replace("*", "")).rstrip("-")
    for kind, rows in (("requests", requests), ("responses", responses)):
        (case_dir / "gateway" / f"{name}-{kind}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    case_file.write_text(text.replace(*_INPUTS, 1), encoding="utf-8")
    return len(requests)
