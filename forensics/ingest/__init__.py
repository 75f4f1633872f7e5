"""Ingest stage (work in progress)."""

from __future__ import annotations

from typing import Any


class IngestResult:  # replaced by the real implementation
    pass


def ingest(*args: Any, **kwargs: Any) -> IngestResult:
    raise NotImplementedError("ingest is being written")
