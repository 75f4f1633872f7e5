"""Blast-radius forensics for cross-tenant leaks in LLM serving.

Stages (each a library function, the CLI a thin layer over them):
ingest -> scan -> match -> report. See README.md for the data flow.
"""

__version__ = "0.1.0"
