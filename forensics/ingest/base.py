"""What every parser shares: the per-file context and the row builders (the registry is in forensics.ingest.registry)."""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator
from typing import Any

import xxhash

from forensics import schema
from forensics.ingest.fields import truncation
from forensics.tokens import Counter

#: Key of an exchange row a parser fills with the (field, id) pairs of the other customer ids its record holds
#: (litellm.other_ids); the staging takes it out of the row (no table has it) and ingest gathers the pairs.
ALIASES_KEY = "_tenant_aliases"


@dataclasses.dataclass
class FileContext:
    """What a parser knows about the file it reads."""

    display_path: str  # as recorded in outputs (relative where possible)
    sha256: str
    format: str
    zone: str
    tenant_field: str
    counter: Counter
    file_name: str = ""
    profile: Any = None  # format "mapped": the input's forensics.config.Profile


@dataclasses.dataclass
class Quarantined:
    """A line that could not be used."""

    reason: str
    no_tenant: bool = False  # the record names no customer (see the tenant_field check)


@dataclasses.dataclass
class SkippedRecord:
    """A well-formed record that holds no model call (a Langfuse SPAN or EVENT observation).

    It is counted with the blank lines (the reconciliation stays lines = ingested + quarantined +
    blank + duplicate) and, by ``kind``, in the file's ``skipped_records`` in the manifest, so an
    auditor sees what was left out and why; it is never a quarantine row (nothing is wrong with it).
    """

    kind: str


# What a parser yields for each input line: a row for a table, a quarantine reason, a record
# that is not an exchange, or None (blank).
Output = tuple[str, dict[str, Any]] | Quarantined | SkippedRecord | None


def record_hash(line: bytes) -> str:
    """Content hash of one input record (for telling identical duplicates from conflicting ones).

    xxh3-128 with a fixed seed: stable across processes and versions, and fast on MB lines.
    """
    return xxhash.xxh3_128_hexdigest(line, seed=0)


def prompt_fields(prompt_text: str | None, nontext: int, messages: int, reported: int | None, ctx: FileContext,
                  cuts: collections.Counter[str] | None = None) -> dict[str, Any]:
    """Prompt length, truncation and trusted token count for an exchange row.

    ``cuts``: the LiteLLM truncation markers of the request's strings (:func:`fields.litellm_cuts`), for
    a format that stores cut strings; by default the prompt is whole, whatever its text says.
    """
    if prompt_text is None:
        tc, ok = ctx.counter.count(None, None, reported, False, messages, nontext)
        return {
            "prompt_text": None, "prompt_chars": None, "prompt_bytes": None, "prompt_messages": messages,
            "prompt_truncated": False,
            "prompt_nontext_parts": nontext, "reported_prompt_tokens": reported,
            "reported_prompt_tokens_plausible": ok, "prompt_tokens": tc.tokens,
            "prompt_tokens_source": tc.source, "prompt_tokens_low": tc.low, "prompt_tokens_high": tc.high,
        }
    truncated, chars, nbytes = truncation(prompt_text, cuts)
    tc, ok = ctx.counter.count(prompt_text, nbytes, reported, truncated, messages, nontext)
    return {
        "prompt_text": prompt_text,
        "prompt_chars": chars,
        "prompt_bytes": nbytes,
        "prompt_messages": messages,
        "prompt_truncated": truncated,
        "prompt_nontext_parts": nontext,
        "reported_prompt_tokens": reported,
        "reported_prompt_tokens_plausible": ok,
        "prompt_tokens": tc.tokens,
        "prompt_tokens_source": tc.source,
        "prompt_tokens_low": tc.low,
        "prompt_tokens_high": tc.high,
    }


def provenance(ctx: FileContext, line_number: int, text: str, kind: str) -> dict[str, Any]:
    """Provenance columns shared by every exchange row."""
    return {
        "record_kind": kind,
        "source_format": ctx.format,
        "source_file": ctx.display_path,
        "source_sha256": ctx.sha256,
        "source_line": line_number,
    }


def iter_schema_names(table: str) -> Iterator[str]:
    """Column names of a canonical table (for filling absent columns with null)."""
    return iter(schema.TABLES[table].names)
