"""Build small case folders for the matcher tests by writing the canonical tables directly."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from forensics import schema
from forensics.case import write_table
from forensics.config import CaseConfig

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


def make_case(root: Path, rows: list[dict[str, Any]], suspect_ids: list[str],
              engine_signature: tuple[str, ...] = (), row_group_rows: int | None = None) -> Path:
    """Write exchanges.parquet and suspects.parquet for ``rows``; ``suspect_ids`` are suspects.

    ``row_group_rows`` splits the exchanges file into row groups of that many rows (the unit
    the matcher's worker processes read).
    """
    root.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema.EXCHANGES)
    pq.write_table(table, root / "exchanges.parquet", row_group_size=row_group_rows or max(len(rows), 1))
    by_id = {r["request_id"]: r for r in rows}
    sus = [{"request_id": r, "tenant_id": by_id[r]["tenant_id"], "model": "glm-5.3",
            "received_at": by_id[r]["received_at"], "completed_at": by_id[r]["completed_at"],
            "reasons": "ceiling", "engine_signature": r in engine_signature,
            "decode_node": by_id[r].get("decode_node")} for r in suspect_ids]
    write_table(root / "suspects.parquet", pa.Table.from_pylist(sus, schema=schema.SUSPECTS), schema.SUSPECTS)
    return root


def config(**match: Any) -> CaseConfig:
    """A configuration whose [match] section is ``match``."""
    return CaseConfig(sections={"match": dict(match)} if match else {})
