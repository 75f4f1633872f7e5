"""Blast-radius forensics for cross-tenant leaks in LLM serving.

Stages (each a library function, the CLI a thin layer over them):
ingest -> scan -> match -> report. See README.md for the data flow.
``forensics.open_case(path)`` gives an analyst a case's tables as polars LazyFrames.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Lazily, so that importing the package (every CLI start) does not import polars.
    if name in ("open_case", "OpenCase"):
        from forensics import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'forensics' has no attribute {name!r}")
