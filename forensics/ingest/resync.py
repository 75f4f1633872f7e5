"""Finding where whole records go on after a record cut short inside a JSON array or stream.

A torn write or a cut download leaves a record's string open: read on, its quotes pair with the next
records' and their brackets are taken for text (or their text for brackets), so every record after it
would be read as part of it. JSON holds no raw line break inside a string, so a line break is a place
between values in the file as it was written: the first line after the cut that starts an object which
parses whole, and that the format recognises as a record, is where the records go on.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

#: The tokens that give JSON text its structure: a whole string (skipped, so a bracket or comma inside one does
#: not count), a bracket or a comma.
JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')
#: A line inside a record that begins with an object.
_LINE_OBJECT = re.compile(rb"\n[ \t\r]*\{")


def object_end(data: bytes, start: int) -> int | None:
    """The end (exclusive) of the JSON object that starts at ``data[start]``, by its brackets, or None."""
    depth = 0
    for m in JSON_TOKEN.finditer(data, start):
        token = m.group()
        if token[:1] == b'"' or token == b",":
            continue
        depth += 1 if token in (b"{", b"[") else -1
        if depth == 0:
            return m.end()
    return None


def next_record(data: bytes, start: int, accept: Callable[[Any], Any]) -> tuple[int, Any] | None:
    """The first object after ``data[start]`` that starts a line, parses whole and that ``accept`` takes (a
    true value, returned with the object's offset), or None."""
    for m in _LINE_OBJECT.finditer(data, start + 1):
        at = m.end() - 1
        end = object_end(data, at)
        if end is None:
            continue
        try:
            obj = orjson.loads(data[at:end])
        except orjson.JSONDecodeError:
            continue
        verdict = accept(obj)
        if verdict:
            return at, verdict
    return None
