"""Timestamps of every input format, to microseconds since the epoch in UTC.

Accepted: ISO 8601 with ``Z`` or an offset; ISO 8601 or ``YYYY-MM-DD HH:MM:SS[.f]`` with no zone
(read in the case's zone, and the assumption reported); epoch numbers (JSON numbers or numeric
strings) in seconds, milliseconds, microseconds or nanoseconds, told apart by magnitude:

=================  ===========================  ==========================
unit               absolute value               present-day example
=================  ===========================  ==========================
seconds            below 1e11                   ``1787790732.6``
milliseconds       1e11 up to 1e14              ``1787790732626``
microseconds       1e14 up to 1e17              ``1787790732626112``
nanoseconds        1e17 up to 1e20              ``1787790732626112000``
=================  ===========================  ==========================

Each band is three decades wide, so a present-day time in any unit lands in the middle of its
own band. Anything larger, and any time outside :data:`MIN_YEAR` .. :data:`MAX_YEAR`, is refused
with a :class:`TimeError` (the record is quarantined): such a value is damage or a placeholder,
and a year the outputs cannot write must never reach a table.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from functools import lru_cache
from zoneinfo import ZoneInfo

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
#: Upper bounds (exclusive) of the magnitude bands, with the microseconds one unit is worth.
EPOCH_BANDS = ((10**11, 1_000_000), (10**14, 1_000), (10**17, 1), (10**20, None))
#: Times outside these years are refused: no log of an LLM service predates the Unix epoch, and
#: Python's datetime (hence every report) ends with the year 9999.
MIN_YEAR = 1970
MAX_YEAR = 9999
MIN_MICROS = 0
MAX_MICROS = (dt.datetime.max.replace(tzinfo=dt.UTC) - EPOCH) // dt.timedelta(microseconds=1)  # 9999-12-31T23:59:59.999999Z
# A plain decimal number (no underscores, no "nan"/"inf" words: those are not times).
NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
RANGE_HINT = f"times must lie in the years {MIN_YEAR} to {MAX_YEAR}"


class TimeError(ValueError):
    """A value that is not a timestamp we can read."""


@lru_cache(maxsize=32)
def _zone(name: str) -> dt.tzinfo:
    return dt.UTC if name == "UTC" else ZoneInfo(name)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _from_epoch(value: int | float, shown: object) -> int:
    """Microseconds of an epoch number in the unit its magnitude tells."""
    if isinstance(value, float) and not math.isfinite(value):
        raise TimeError(f"{_shown(shown)} is not a time")
    magnitude = abs(value)
    band = next((unit for bound, unit in EPOCH_BANDS if magnitude < bound), False)
    if band is False:
        raise TimeError(f"{_shown(shown)} is too large for an epoch time in any unit (s, ms, µs, ns)")
    micros_per_unit = band
    if micros_per_unit is None:  # nanoseconds: integer arithmetic keeps every digit
        micros = value // 1000 if isinstance(value, int) else round(value / 1000)
    elif isinstance(value, int):
        micros = value * micros_per_unit
    else:
        micros = round(value * micros_per_unit)
    return _in_range(micros, shown)


def _in_range(micros: int, shown: object) -> int:
    if not MIN_MICROS <= micros <= MAX_MICROS:
        raise TimeError(f"{_shown(shown)} is outside the years {MIN_YEAR} to {MAX_YEAR}")
    return micros


def _number(text: str) -> int | float | None:
    """The epoch number a string spells, or None when it is not a plain number."""
    if not NUMBER.fullmatch(text):
        return None
    if re.fullmatch(r"[+-]?\d+", text):
        if len(text.lstrip("+-")) > 30:  # far beyond every band; int() of it would be wasted work
            return float("inf")
        return int(text)
    return float(text)


_LEAP = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d):60(?:[.,]\d+)?(.*)")


def _leap_second(text: str) -> dt.datetime | None:
    """A leap second (``23:59:60``, valid ISO 8601 that Python's datetime cannot hold) as the last
    microsecond before it ends, so it keeps its place among its neighbours; None for anything else."""
    m = _LEAP.fullmatch(text)
    if m is None:
        return None
    try:
        return dt.datetime.fromisoformat(f"{m.group(1)}:59.999999{m.group(2)}")
    except ValueError:
        return None


def to_micros(value: object, zone: str = "UTC") -> tuple[int, bool]:
    """Microseconds since the epoch (UTC) and whether the zone had to be assumed.

    Raises :class:`TimeError` for anything that is not a time in :data:`MIN_YEAR` ..
    :data:`MAX_YEAR` (its message is fit for a quarantine reason).
    """
    if isinstance(value, bool) or value is None:
        raise TimeError(f"{value!r} is not a time")
    if isinstance(value, (int, float)):
        return _from_epoch(value, value), False
    if not isinstance(value, str):
        raise TimeError(f"a {type(value).__name__} is not a time")
    text = value.strip()
    if not text:
        raise TimeError("empty time")
    # Four ASCII digits then "-" is a date, never a plain number (a "-" there could only follow an
    # exponent's "e"): the common ISO form skips the number check.
    if not (text[4:5] == "-" and text[:4].isascii() and text[:4].isdigit()):
        number = _number(text)
        if number is not None:
            return _from_epoch(number, value), False
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        leap = _leap_second(text)
        if leap is None:
            raise TimeError(f"{_shown(value)} is not an ISO 8601 time or epoch number") from None
        t = leap
    assumed = t.tzinfo is None
    if assumed:
        try:
            t = t.replace(tzinfo=_zone(zone))
        except (OverflowError, ValueError):
            raise TimeError(f"{_shown(value)} is outside the years {MIN_YEAR} to {MAX_YEAR}") from None
    # Subtraction of aware datetimes never overflows, even for year 1 or 9999 with an offset.
    delta = t - EPOCH
    # Whole microseconds of the timedelta, as delta // timedelta(microseconds=1) gives them, without dividing.
    return _in_range((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds, value), assumed
