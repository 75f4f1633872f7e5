"""Build small case folders for the matcher tests by writing the canonical tables directly."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from forensics.config import CaseConfig
from forensics.lab.cases import SuspectKey, suspect_rows, write_case

T0 = dt.datetime(2026, 8, 29, 10, 0, tzinfo=dt.UTC)


def at(minutes: float) -> dt.datetime:
    """A time ``minutes`` after the case's reference time."""
    return T0 + dt.timedelta(minutes=minutes)


def exchange(rid: str, tenant: str, minute: float, prompt: str = "", response: str = "",
             duration: float = 1.0, **extra: Any) -> dict[str, Any]:
    """One exchanges row: received at ``minute``, completed ``duration`` minutes later."""
    row = {"request_id": rid, "tenant_id": tenant, "received_at": at(minute),
           "completed_at": at(minute + duration), "prompt_text": prompt, "response_text": response,
           "model": "glm-5.3", "status": "success"}
    row.update(extra)
    return row


def make_case(root: Path, rows: list[dict[str, Any]], suspect_ids: list[SuspectKey],
              engine_signature: tuple[SuspectKey, ...] = (), row_group_rows: int | None = None) -> Path:
    """Write exchanges.parquet and suspects.parquet for ``rows``; ``suspect_ids`` are suspects.

    A suspect is a request id, or a (request id, tenant) pair when two tenants share the id.
    ``row_group_rows`` splits the exchanges file into row groups of that many rows (the unit
    the matcher's worker processes read).
    """
    return write_case(root, rows, suspects=suspect_rows(rows, suspect_ids, engine_signature=engine_signature),
                      row_group_rows=row_group_rows)


def config(**match: Any) -> CaseConfig:
    """A configuration whose [match] section is ``match``."""
    return CaseConfig(sections={"match": dict(match)} if match else {})
