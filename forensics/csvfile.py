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


#: Default-ignorable code points that are no control or format character (Unicode's DerivedCoreProperties): a
#: combining grapheme joiner, Hangul and Khmer fillers, Mongolian and standard variation selectors. They show as
#: nothing, so "acme" and "acme" + U+034F read alike: they are escaped too (a variation selector after a symbol,
#: an emoji's own, excepted).
_INVISIBLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0100-\U000e01ef]")


def escape_controls(text: str) -> str:
    """``text`` with control, format and other invisible characters shown as escapes (one line, nothing hidden).

    A backslash is doubled, so the escape of a real newline (``\\n``) never reads the same as an
    id that holds a backslash and an ``n``: two different ids never show alike.
    """
    if text.isprintable() and "\\" not in text and not _INVISIBLE.search(text):
        return text
    return "".join(
        "\\\\" if ch == "\\"
        else ch.encode("unicode_escape").decode("ascii") if _hidden(text, i, ch) else ch
        for i, ch in enumerate(text)
    )


def visible(text: str) -> str:
    """``text`` without the characters that show as nothing (format characters and those of ``_INVISIBLE``)."""
    if text.isprintable() and not _INVISIBLE.search(text):
        return text
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf" and not _INVISIBLE.match(ch))


def _hidden(text: str, i: int, ch: str) -> bool:
    if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
        return True
    if not _INVISIBLE.match(ch):
        return False
    # U+FE0E/U+FE0F after a symbol pick its text or emoji form ("\u2764\ufe0f", a red heart): shown as it is.
    return not ("\ufe0e" <= ch <= "\ufe0f" and i > 0 and unicodedata.category(text[i - 1]) == "So")


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
    return cells_text(header, ([cell(v) for v in row] for row in rows))


def cells_text(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """:func:`csv_text` of cells already written as :func:`cell` writes them (read back from one of these files)."""
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(list(header))
    writer.writerows(rows)
    return buf.getvalue()


def csv_text_of_columns(header: Sequence[str], columns: Sequence[Sequence[Any]]) -> str:
    """:func:`csv_text` of a table given column by column (each ``columns[i]`` holds ``header[i]``'s values)."""
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(list(header))
    writer.writerows(zip(*([cell(v) for v in values] for values in columns), strict=True))
    return buf.getvalue()
