"""Timestamps of every input format, to microseconds since the epoch in UTC.

Accepted: ISO 8601 with ``Z`` or an offset; ISO 8601 or ``YYYY-MM-DD HH:MM:SS[.f]`` with no zone
(read in the case's zone, and the assumption reported); epoch seconds (int or float) and epoch
milliseconds (told apart by magnitude), as numbers or numeric strings.
"""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from zoneinfo import ZoneInfo

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: Epoch values above this are milliseconds (1e11 seconds is the year 5138).
MS_THRESHOLD = 100_000_000_000


class TimeError(ValueError):
    """A value that is not a timestamp we can read."""


@lru_cache(maxsize=32)
def _zone(name: str) -> dt.tzinfo:
    return dt.timezone.utc if name == "UTC" else ZoneInfo(name)


def _from_epoch(value: float) -> int:
    if value != value or value in (float("inf"), float("-inf")):
        raise TimeError(f"{value!r} is not a time")
    if abs(value) >= MS_THRESHOLD:
        return int(round(value * 1000))
    return int(round(value * 1_000_000))


def to_micros(value: object, zone: str = "UTC") -> tuple[int, bool]:
    """Microseconds since the epoch (UTC) and whether the zone had to be assumed."""
    if isinstance(value, bool) or value is None:
        raise TimeError(f"{value!r} is not a time")
    if isinstance(value, (int, float)):
        return _from_epoch(float(value)), False
    if not isinstance(value, str):
        raise TimeError(f"a {type(value).__name__} is not a time")
    text = value.strip()
    if not text:
        raise TimeError("empty time")
    try:
        return _from_epoch(float(text)), False
    except ValueError:
        pass
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise TimeError(f"{value!r} is not an ISO 8601 time or epoch number") from None
    assumed = t.tzinfo is None
    if assumed:
        t = t.replace(tzinfo=_zone(zone))
    delta = t - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds, assumed
