"""The evidence CSVs written column by column read exactly as the row-by-row writer wrote them:
every kind of cell (null, booleans, numbers, text that a spreadsheet would run, control characters,
times, lists) and the evidence files' number formats."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics import csvfile
from forensics.match.findings import csv_text

#: Text that exercises every branch of csvfile.cell: formula starts, the neutralising quote,
#: backslashes, control and format characters, and plain words.
TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["=1+1", "+x", "-3", "@a", "\tt", "\rr", "'q", "a\\n", "\x1b[31m", "\u202eabc", "plain", ""]),
)
VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), TEXT,
    st.datetimes(timezones=st.sampled_from([None, dt.UTC])),
    st.lists(st.one_of(st.integers(-5, 5), TEXT), max_size=3),
)


def _row_by_row(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """The writer as it was before the columns were shown at once (the reference)."""
    def shown(r: dict[str, Any], c: str) -> Any:
        v = r.get(c)
        if v is None:
            return None
        if isinstance(v, bool):
            return "true" if v else "false"
        return (f"{v:.2f}" if c == "score" else f"{v:.4f}" if c == "rarity" else f"{v:.3g}"
                if c == "expected_by_chance" else v)

    return csvfile.csv_text(columns, ([shown(r, c) for c in columns] for r in rows))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(VALUE, min_size=3, max_size=3), max_size=6))
def test_columns_at_once_read_as_row_by_row(table: list[list[Any]]) -> None:
    header = ("a", "b", "c")
    columns = [[row[i] for row in table] for i in range(3)]
    assert csvfile.csv_text_of_columns(header, columns) == csvfile.csv_text(header, table)


NUMBER = st.one_of(st.none(), st.booleans(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**6), 10**6))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries({"score": NUMBER, "rarity": NUMBER, "expected_by_chance": NUMBER,
                                       "finding_id": TEXT, "matched_tokens": VALUE}), max_size=6))
def test_evidence_csv_keeps_its_number_formats(rows: list[dict[str, Any]]) -> None:
    columns = ("finding_id", "score", "rarity", "expected_by_chance", "matched_tokens", "absent")
    assert csv_text(rows, columns) == _row_by_row(rows, columns)


def test_a_negative_score_is_neutralised_like_any_cell() -> None:
    text = csv_text([{"score": -1.0, "rarity": 0.5, "expected_by_chance": 1e-7}], ("score", "rarity", "expected_by_chance"))
    assert text.splitlines()[1] == "'-1.00,0.5000,1e-07"


@pytest.mark.parametrize(("text", "shown"), [
    ("acme\u034f", "acme\\u034f"),  # a combining grapheme joiner: shows as nothing
    ("q\u3164", "q\\u3164"),  # a Hangul filler
    ("zeta\ufe0f", "zeta\\ufe0f"),  # a variation selector after a letter
    ("\U000e0101x", "\\U000e0101x"),
    ("I \u2764\ufe0f it", "I \u2764\ufe0f it"),  # an emoji's own selector: shown as it is
])
def test_invisible_characters_are_written_out_so_two_ids_never_read_alike(text: str, shown: str) -> None:
    """Default-ignorable characters that are no control or format character (U+034F, U+3164, U+FE0F) were written
    as they are: "acme" and "acme" + U+034F read the same in notifications.csv, the summary and the notices."""
    from forensics.csvfile import cell, escape_controls, uncell, visible

    assert escape_controls(text) == shown and uncell(cell(text)) == text
    assert visible("acme\u034f") == visible("ac\u200bme") == "acme"
