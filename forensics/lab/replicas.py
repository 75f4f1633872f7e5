"""A simulated incident's gateway as two replicas, one of them on a host whose clock is off.

A LiteLLM deployment of any size runs several replicas behind a load balancer, each writing its own callback files,
and every spend-log row carries the clock of the replica that served the call. When one host's clock drifts (NTP
stopped) its records are seconds, minutes or hours off the others' and the engine's, while no exchange is logged twice:
the stale pages of a suspect then seem to come from requests that arrived after it, and the records a decode node
served before a suspect are counted in the wrong order. The ingest must read that replica's clock off the engine logs
(``forensics.ingest.copies.clock_offsets``) so that the list stays the one a single gateway's logs give.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forensics.errors import ForensicsError

#: The name a second replica's callback files take (``litellm-callbacks-DAY`` becomes this, then ``-DAY``): another
#: log beside the first replica's, as two hosts' files are.
REPLICA_NAME = "litellm-replica-b-callbacks"


def _served_by_b(request_id: Any, share: float) -> bool:
    """Whether replica b served the call ``request_id`` (a fixed share of the calls, by a hash of the id)."""
    return int(hashlib.sha256(str(request_id).encode()).hexdigest()[:8], 16) < share * 2 ** 32


def _shifted_iso(value: Any, seconds: float) -> Any:
    """A spend log's zone-less ISO time ``value`` moved ``seconds`` later, written as it was (microseconds when it had
    a fraction); anything else as it was."""
    if not isinstance(value, str):
        return value
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        return value
    moved = (when + dt.timedelta(seconds=seconds)).isoformat(timespec="microseconds" if "." in value else "seconds")
    return moved


def _lines(path: Path) -> list[tuple[str, Any]]:
    """The text lines of a log file, plain or compressed (what a gzip file cut short holds up to the cut), each with
    its JSON value (None for a line that is not JSON: the simulator's damage)."""
    from forensics.ingest.reader import FileProblem, read_lines

    problems: list[FileProblem] = []
    out: list[tuple[str, Any]] = []
    for line in read_lines(path, problems):
        text = line.text or ""
        try:
            out.append((text, json.loads(text)))
        except json.JSONDecodeError:
            out.append((text, None))
    return out


def split_replicas(case_dir: Path, clock_offset: float, share: float = 0.5,
                   serves: Callable[[dict[str, Any]], bool] | None = None,
                   names: tuple[str, str] = ("litellm-callbacks", REPLICA_NAME)) -> int:
    """Serve the calls of the simulated LiteLLM incident at ``case_dir`` from two gateway replicas: a ``share`` of them
    (by a hash of the request id), or those whose callback payload ``serves`` is true of (a replica dedicated to some
    customers), is logged by replica b, in callback files of its own (``names``: the two replicas' files are named
    ``NAME-DAY.jsonl``; by default the first keeps its name and the second is :data:`REPLICA_NAME`) with its clock
    ``clock_offset`` seconds ahead of the other replica's and the engine's, and those calls' spend-log rows carry the
    same clock. Lines that are not JSON objects (the simulator's damage) stay in the first replica's files. Return how
    many calls replica b logged."""
    gateway = case_dir / "gateway"
    callbacks = sorted(gateway.glob("litellm-callbacks-*"))
    if not callbacks:
        raise ForensicsError(f"{gateway} holds no LiteLLM callback files to split between two replicas",
                             fix="simulate the incident with --format litellm")
    served: set[str] = set()
    for path in callbacks:
        day = path.name.removeprefix("litellm-callbacks-").split(".")[0]
        first: list[str] = []
        second: list[str] = []
        for text, record in _lines(path):
            inner = record.get("standard_logging_object") if isinstance(record, dict) else None
            payload: dict[str, Any] | None = inner if isinstance(inner, dict) else record if isinstance(record, dict) else None
            if payload is None or not (serves(payload) if serves is not None else _served_by_b(payload.get("id"), share)):
                first.append(text)
                continue
            for key in ("startTime", "endTime", "completionStartTime"):
                if isinstance(payload.get(key), int | float):
                    payload[key] = round(payload[key] + clock_offset, 6)
            served.add(str(payload.get("id")))
            second.append(json.dumps(record, ensure_ascii=False))
        path.unlink()
        (gateway / f"{names[0]}-{day}.jsonl").write_text("".join(t + "\n" for t in first), encoding="utf-8")
        (gateway / f"{names[1]}-{day}.jsonl").write_text("".join(t + "\n" for t in second), encoding="utf-8")
    for path in sorted(gateway.glob("spend-logs-*")):
        day = path.name.removeprefix("spend-logs-").split(".")[0]
        out: list[str] = []
        for text, row in _lines(path):
            if isinstance(row, dict) and str(row.get("request_id")) in served:
                for key in ("startTime", "endTime", "completionStartTime"):
                    row[key] = _shifted_iso(row.get(key), clock_offset)
                text = json.dumps(row, ensure_ascii=False)
            out.append(text)
        path.unlink()
        (gateway / f"spend-logs-{day}.jsonl").write_text("".join(t + "\n" for t in out), encoding="utf-8")
    return len(served)
