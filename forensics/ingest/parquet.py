"""Parquet input files, read row batch by row batch and given to a parser as one JSON object per row.

A format whose exports come as Parquet (Langfuse's blob-storage export writes Parquet by default)
reads them through :func:`read_rows` in its ``read`` hook and sets ``parquet=True`` in its
registration. Each row becomes a :class:`~forensics.ingest.reader.Line` whose number is the row's
1-based position in the file and whose text is the row as a JSON object, so the parser, the
counts, the duplicate hashes and the quarantine excerpts work exactly as for JSON Lines.

Typed columns are turned into what a JSON export of the same data holds: timestamps into ISO 8601
(zone-less when the column has no zone, like the text exports), maps into objects, binary strings
(ClickHouse writes its ``String`` columns as Parquet binary) into text. A row that cannot be turned
into JSON (binary that is not UTF-8, a time Python cannot hold, a map with a repeated key) becomes
an object carrying only :data:`ROW_ERROR`, which the parser quarantines naming the row and column.
A file that cannot be opened, or whose data breaks off, is a whole-file problem after the rows read; a row
group whose pages are damaged behind a whole footer costs its own rows (one problem naming them), and the row
groups after it are read.
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from forensics.ingest.fields import columns_differ, named_twice
from forensics.ingest.reader import FileProblem, Line, Span, open_regular

#: The first (and last) four bytes of every Parquet file.
MAGIC = b"PAR1"
#: Rows turned into Python at once. Rows can hold prompts of megabytes, so batches stay small;
#: Arrow itself holds one row group's columns at a time.
BATCH_ROWS = 16
#: Bytes read from the file at a time: a column chunk is streamed, not loaded whole.
READ_BUFFER = 1 << 20
#: Set on the JSON object a row becomes when the row itself cannot be read.
ROW_ERROR = "_parquet_row_error"
FIX = "Fix: export the file again (or as JSON Lines) and ingest it again"


def is_parquet(path: Path) -> bool:
    """Whether the file starts with the Parquet magic bytes (a compressed file never does)."""
    try:
        with open_regular(path) as fh:
            return fh.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def _default(value: Any) -> Any:
    """JSON for the Python values Arrow gives that orjson does not write itself."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise TypeError("binary value that is not UTF-8 text") from None
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"a {type(value).__name__} value")


def _usable(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with nanosecond times cut to microseconds (the tables' precision), which
    Python's datetime can hold; every other column as it is."""
    columns, changed = [], False
    for field, column in zip(batch.schema, batch.columns, strict=True):
        if pa.types.is_timestamp(field.type) and field.type.unit == "ns":
            column = column.cast(pa.timestamp("us", field.type.tz), safe=False)
            changed = True
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names) if changed else batch


def _nonfinite_in(array: pa.Array) -> bool:
    """Whether a column holds a NaN or infinite float at any depth (told by Arrow: most batches hold none, and
    their rows are then not walked)."""
    kind = array.type
    if isinstance(kind, pa.ExtensionType):
        return _nonfinite_in(array.storage)
    if pa.types.is_floating(kind):
        return bool(pc.any(pc.invert(pc.is_finite(array))).as_py())
    if pa.types.is_struct(kind):
        return any(_nonfinite_in(array.field(i)) for i in range(kind.num_fields))
    if pa.types.is_map(kind):
        return _nonfinite_in(array.keys) or _nonfinite_in(array.items)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _nonfinite_in(array.values)
    if pa.types.is_dictionary(kind):
        return _nonfinite_in(array.dictionary)
    # Any other type with children (list views, unions, types to come): it may hold one, so the rows are walked.
    return kind.num_fields > 0


def _without_nonfinite(value: Any, where: str, found: list[str]) -> Any:
    """``value`` with every NaN or infinite float made null, the path of each added to ``found``. JSON has no such
    numbers (orjson writes them as null): a count of NaN read as absent with no note. Null, the field reads as
    absent as before (never costing the record: an optional time of NaN is no time), and the row says which."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        found.append(where)
        return None
    if isinstance(value, dict):
        return {k: _without_nonfinite(v, f"{where}.{k}" if where else str(k), found) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nonfinite(v, f"{where}[{i}]", found) for i, v in enumerate(value)]
    return value


def _same(a: Any, b: Any) -> bool:
    """Equal values, a NaN or infinity at any depth read as absent (two NaNs agree)."""
    return a == b or _without_nonfinite(a, "", []) == _without_nonfinite(b, "", [])


def _differing_rows(batch: pa.RecordBatch, twice: dict[str, list[int]]) -> dict[int, str]:
    """The rows of ``batch`` whose columns of one name hold different values, with the reason: as a dict, the last
    column would win, maybe another customer's id."""
    out: dict[int, str] = {}
    for name, at in twice.items():
        values = [batch.column(i).to_pylist() for i in at]
        for row in range(batch.num_rows):
            if row not in out and any(not _same(v[row], values[0][row]) for v in values[1:]):
                out[row] = columns_differ(name, at, "row")
    return out


def _pyrows(batch: pa.RecordBatch) -> list[tuple[dict[str, Any] | str, tuple[str, ...]]]:
    """The batch's rows as dicts, each with the paths of its NaN or infinite values (made null); a row that cannot
    be converted, or whose columns of one name differ, is the reason instead."""
    rows = _converted(batch)
    twice = named_twice(batch.schema.names)
    if twice:
        for at, reason in _differing_rows(batch, twice).items():
            rows[at] = reason
    out: list[tuple[dict[str, Any] | str, tuple[str, ...]]] = [(row, ()) for row in rows]
    if any(_nonfinite_in(column) for column in batch.columns):
        for i, item in enumerate(rows):
            if isinstance(item, dict):
                found: list[str] = []
                out[i] = (_without_nonfinite(item, "", found), tuple(found))
    return out


def _converted(batch: pa.RecordBatch) -> list[dict[str, Any] | str]:
    """The batch's rows as dicts; a row that cannot be converted is the reason instead."""
    try:
        return list(batch.to_pylist(maps_as_pydicts="strict"))
    except (pa.ArrowException, ValueError, OverflowError, KeyError, TypeError):
        pass  # one bad value fails the batch: find the row(s) and the column
    out: list[dict[str, Any] | str] = []
    for i in range(batch.num_rows):
        row: dict[str, Any] = {}
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            try:
                row[name] = column.slice(i, 1).to_pylist(maps_as_pydicts="strict")[0]
            except (pa.ArrowException, ValueError, OverflowError, KeyError, TypeError) as exc:
                out.append(f"column {name!r} cannot be read ({type(exc).__name__}: {str(exc)[:160]})")
                break
        else:
            out.append(row)
    return out


def _line(number: int, row: dict[str, Any] | str) -> Line:
    if isinstance(row, dict):
        for name, value in row.items():
            # Decoded here (not in orjson's default hook, whose message is lost) to name the column.
            if isinstance(value, bytes):
                try:
                    row[name] = value.decode("utf-8")
                except UnicodeDecodeError as exc:
                    row = f"column {name!r} is binary that is not UTF-8 text ({exc.reason} at byte {exc.start})"
                    break
    if isinstance(row, dict):
        try:
            raw = orjson.dumps(row, default=_default, option=orjson.OPT_NON_STR_KEYS)
        except TypeError as exc:
            row = f"a value cannot be written as JSON ({exc})"
        else:
            return Line(number, raw.decode("utf-8"), raw)
    raw = orjson.dumps({ROW_ERROR: f"Parquet row {number}: {row}"})
    return Line(number, raw.decode("utf-8"), raw)


#: How a damage reason goes on (:func:`read_rows`); :func:`head_damage` keeps what comes before it.
ROWS_BEFORE = "; the rows before were read"


def read_rows(path: Path, problems: list[FileProblem], span: Span | None = None) -> Iterator[Line]:
    """Yield one Line per row (``span`` is ignored: a Parquet file is read whole by one worker).

    A file that cannot be opened or whose data breaks off is reported in ``problems`` after the
    rows that could be read; nothing read before is lost.
    """
    number = 0
    try:
        with open_regular(path) as fh:
            reader = pq.ParquetFile(fh, buffer_size=READ_BUFFER)
            groups = reader.num_row_groups
            # One row group at a time: a reader over all of them holds on to what it has read
            # (memory grew with the file: 370 MB for 200 MB, 564 MB for 400 MB; now 258 and 291 MB).
            for group in range(groups):
                first, size = number, reader.metadata.row_group(group).num_rows
                try:
                    for batch in reader.iter_batches(batch_size=BATCH_ROWS, row_groups=[group]):
                        for row, nonfinite in _pyrows(_usable(batch)):
                            number += 1
                            line = _line(number, row)
                            if nonfinite:
                                shown = ", ".join(nonfinite[:5]) + (" and more" if len(nonfinite) > 5 else "")
                                line.notes = (f"{shown}: NaN or infinite in the Parquet export, read as absent",)
                            yield line
                except (pa.ArrowException, OSError, ValueError) as exc:
                    # The footer is whole, so the row groups after this one are where it says: they are still read.
                    lost = (f"rows {number + 1} to {first + size} were not read" if number < first + size
                            else "its rows were read, the damage lies after them")
                    problems.append(FileProblem(
                        number, f"Parquet row group {group + 1} of {groups} (rows {first + 1} to {first + size}) is damaged "
                        f"({type(exc).__name__}: {str(exc)[:200]}): {lost}; the other row groups were read. {FIX}", "corrupt"))
                    number = first + size
    except (pa.ArrowException, OSError, ValueError) as exc:
        where = f"after row {number}" if number else "before any row could be read"
        problems.append(FileProblem(
            number, f"Parquet file is damaged or cut short {where} ({type(exc).__name__}: {str(exc)[:200]})"
            f"{ROWS_BEFORE}. {FIX}", "corrupt"))


def head_damage(path: Path) -> str | None:
    """Why no row could be read from the start of a Parquet file (cut short, its footer lost, or
    corrupt before its first row), or None: what to tell where its format could not be told."""
    problems: list[FileProblem] = []
    for _ in read_rows(path, problems):
        return None
    return problems[0].reason.split(ROWS_BEFORE)[0] if problems else None


def peek_rows(path: Path, limit: int = 20) -> list[str]:
    """Up to ``limit`` rows from the start of a Parquet file as JSON lines, for format sniffing."""
    lines: list[str] = []
    problems: list[FileProblem] = []
    for line in read_rows(path, problems):
        if line.text is not None:
            lines.append(line.text)
        if len(lines) >= limit:
            break
    return lines
