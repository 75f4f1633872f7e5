"""The one way every output CSV is written: RFC 4180, UTF-8, CRLF, cells safe for spreadsheets.

Ids and text come from untrusted logs. A cell that a spreadsheet would evaluate as a formula
(starting with ``=``, ``+``, ``-``, ``@``, TAB or CR) gets a leading ``'``; numbers are written as
numbers. Control and format characters (a terminal escape, a newline, a right-to-left override
inside a hostile id) are written as ``\\xNN``/``\\uNNNN`` escapes, never raw; every CSV applies the
same rule, so an id reads the same in every file. The Parquet tables keep the exact values.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any

from forensics.config import iso

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
#: A cell that starts with the neutralising quote gets one too, so "'=x" and "=x" stay distinct.
QUOTED_START = (*FORMULA_START, "'")


def escape_controls(text: str) -> str:
    """``text`` with control and format characters shown as escapes (one line, nothing hidden).

    A backslash is doubled, so the escape of a real newline (``\\n``) never reads the same as an
    id that holds a backslash and an ``n``: two different ids never show alike.
    """
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(
        "\\\\" if ch == "\\"
        else ch.encode("unicode_escape").decode("ascii") if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch
        for ch in text
    )


def cell(value: Any) -> str:
    """One CSV cell: empty for null, true/false for booleans, UTC ISO times, ';'-joined lists."""
    kind = type(value)
    if kind is int or kind is float:  # most cells of the evidence files (a bool is not an int here)
        return str(value)
    if isinstance(value, str):
        return "'" + escape_controls(value) if value.startswith(QUOTED_START) else escape_controls(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return iso(value if value.tzinfo else value.replace(tzinfo=dt.UTC))
    if isinstance(value, (list, tuple)):
        return ";".join(cell(v) for v in value)
    return str(value)


#: The escapes :func:`escape_controls` writes (a doubled backslash; unicode_escape's forms).
_ESCAPE = re.compile(r"\\(\\|[ntr]|x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")
_NAMED = {"\\": "\\", "n": "\n", "t": "\t", "r": "\r"}


def uncell(shown: str) -> str | None:
    """The string a text cell was written from (the inverse of :func:`cell` on strings), or None when no
    string is written as ``shown`` (a cell edited by hand, a number's text is its own string)."""
    for body in ((shown[1:], shown) if shown.startswith("'") else (shown,)):
        raw = _ESCAPE.sub(lambda m: _NAMED.get(m.group(1)) or chr(int(m.group(1)[1:], 16)), body)
        if cell(raw) == shown:
            return raw
    return None


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """The whole CSV document: a header row, then one line per row."""
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(list(header))
    for row in rows:
        writer.writerow([cell(v) for v in row])
    return buf.getvalue()


def csv_text_of_columns(header: Sequence[str], columns: Sequence[Sequence[Any]]) -> str:
    """:func:`csv_text` of a table given column by column (each ``columns[i]`` holds ``header[i]``'s values)."""
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(list(header))
    writer.writerows(zip(*([cell(v) for v in values] for values in columns), strict=True))
    return buf.getvalue()
