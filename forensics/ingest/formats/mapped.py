"""Mapping profiles: any JSON Lines, JSON array, CSV or Parquet log read through ``[inputs.fields]``.

The case file's ``[[inputs]]`` entry with ``format = "mapped"`` names, for each canonical column,
a dotted path into the record (``req.messages``, ``resp.choices.0.message.content``, a CSV
column name; a column holding a JSON string is entered with ``column.key``), see
spec/case-file.md "Mapping profiles". The format is never sniffed: only a profile says what a
field means. Which container a file is (JSON Lines, a JSON array, CSV or Parquet) is told from
its content.

A record whose request id, tenant or receive time is absent or unusable is quarantined with a
reason naming the profile key, its path and the record; an absent model, prompt or response is
left null and noted on the row (``problems``), as the built-in formats do with a failed call.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import glob
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import orjson

from forensics import schema
from forensics.config import PROFILE_PROMPT_KEYS as PROMPT_KEYS
from forensics.config import PROFILE_REQUIRED, CaseConfig, Profile
from forensics.errors import ConfigError
from forensics.ingest.base import FileContext, Output, Quarantined, prompt_fields, provenance
from forensics.ingest.fields import (
    RecordError,
    error_body,
    holds_cut,
    json_value,
    litellm_cuts,
    loads_object,
    opt_count,
    response_text,
    whole_number,
)
from forensics.ingest.formats.helicone import CSV_ERROR
from forensics.ingest.formats.helicone import read_records as read_csv_or_lines
from forensics.ingest.parquet import ROW_ERROR, read_rows
from forensics.ingest.patterns import glob_matches
from forensics.ingest.reader import FileProblem, Line, Span, open_regular, peek_lines, read_lines
from forensics.ingest.registry import LogFormat, RecordKind, register
from forensics.ingest.resync import JSON_TOKEN, next_record
from forensics.ingest.timeparse import MAX_MICROS, MIN_MICROS, NUMBER, RANGE_HINT, TimeError, to_micros

PARQUET_MAGIC = b"PAR1"
#: Set on the object a Parquet row becomes when the row cannot be read (quarantined with the reason).
#: Records read before any work to check that every mapped key resolves somewhere in the file.
CHECK_RECORDS = 1000
#: Status words that mean the call failed (any other word is a success).
FAILURE_WORDS = {"failure", "failed", "fail", "error"}
#: Keys whose absence from a record costs the record (quarantined); others become null.
RECORD_REQUIRED = ("request_id", "tenant_id", "received_at")
_EPOCH_UNITS = {"epoch_s": 1_000_000, "epoch_ms": 1_000, "epoch_us": 1}
_INDEX = re.compile(r"[0-9]+")


class NoTenantValue(RecordError):
    """A record in which no tenant path of the profile has a value (counted as naming no customer)."""


class _Missing:
    """No value at a path (not even null)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


# ---- containers -------------------------------------------------------------------------------


def container(path: Path) -> str:
    """``parquet``, ``json-array``, ``json-lines`` or ``csv``, told by the file's content."""
    with open_regular(path) as fh:
        if fh.read(4) == PARQUET_MAGIC:
            return "parquet"
    lines = peek_lines(path, limit=1)
    first = lines[0].lstrip("\ufeff \t") if lines else ""
    if first.startswith("["):
        return "json-array"
    if first.startswith("{"):
        return "json-lines"
    return "csv"


def _array_records(path: Path, problems: list[FileProblem]) -> Iterator[Line]:
    """The elements of a top-level JSON array, each numbered by the line it starts on.

    The array is read whole (a JSON array has no record boundary a reader could stop at; export
    JSON Lines for logs bigger than memory). Each element is cut out by its brackets and parsed
    on its own, so one broken element is one quarantined record, not a lost file. An element cut short
    inside a string (a torn write) would pair its quotes with the next elements' and swallow them: a
    string across a line break, which JSON never holds, marks it, and the elements go on at the first
    line after its start that begins an object with keys the array's elements have
    (:func:`forensics.ingest.resync.next_record`). Torn between two strings, its closing brackets lost, an element
    reads the elements after it as its own, and stray closing brackets after one end the array early: there too the
    elements go on at the next line that starts one, the damage one line.
    """
    lines = list(read_lines(path, problems))
    data = b"\n".join(line.raw for line in lines)
    depth, begin, line_no, counted = 0, -1, 1, 0
    keys: set[str] = set()  # the keys of the array's first whole element

    def like_an_element(obj: Any) -> bool:
        return isinstance(obj, dict) and len(obj) >= 2 and (not keys or 2 * len(keys & set(obj)) >= len(keys))

    def element(start: int, end: int) -> Line | None:
        nonlocal line_no, counted
        chunk = data[start:end]
        stripped = chunk.strip()
        if not stripped:
            return None
        first = start + (len(chunk) - len(chunk.lstrip()))
        line_no += data.count(b"\n", counted, first)
        counted = first
        try:
            text: str | None = stripped.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        return Line(line_no, text, stripped)

    closed = False
    at: int | None = 0
    while at is not None:
        resume, at = at, None
        for m in JSON_TOKEN.finditer(data, resume):
            token = m.group()
            if token[:1] == b'"':
                if depth > 1 and b"\n" in token:
                    # A string across a line break: this element was cut short. The elements go on at the first
                    # line that starts one (the cut element ends there); none: read on (a cut at the end).
                    after = next_record(data, begin, like_an_element)
                    if after is not None:
                        end = after[0]
                        while end > begin and data[end - 1] in b" \t\r\n,":
                            end -= 1
                        found = element(begin, end)
                        if found is not None:
                            yield found
                        depth, begin, at = 1, after[0], after[0]
                        break
                continue
            if depth == 0:
                if token != b"[" or closed:
                    break
                depth, begin = 1, m.end()
                continue
            if token in (b"[", b"{"):
                depth += 1
            elif token in (b"]", b"}"):
                depth -= 1
                if depth == 0:
                    found = element(begin, m.start())
                    if found is not None:
                        yield found
                    closed, begin = True, m.end()
                    if token == b"}" and (after := next_record(data, m.start(), like_an_element)) is not None:
                        # An array ends with "]": a stray closing brace after an element, the brackets out of step.
                        # The stray bytes are one line; the elements go on where the next one starts.
                        yield from _damage(element, _between(data, m.start(), after[0]))
                        closed, depth, begin, at = False, 1, after[0], after[0]
                        break
            elif depth == 1:  # a comma between elements
                found = element(begin, m.start())
                if found is not None and not keys and found.text is not None:
                    keys = _keys_of(found.raw)
                yield found if found is not None else Line(_line_of(data, m.start()), '"(an empty element)"', b"")
                begin = m.end()
        if at is not None or not data[begin:].strip():
            continue
        if closed and data[begin:].lstrip()[:1] not in (b",", b"]", b"}"):
            continue  # after the array's end, text that is no stray bracket or separator (JSON Lines appended): said so
        # The file ends inside an element whose closing brackets were lost (torn between two strings: the elements
        # after it read as its own), or text follows the array's end (stray closing brackets): the records go on
        # at the next line that starts an element, if one does; the damage before it is one line.
        after = next_record(data, begin - 1 if closed else begin, like_an_element)
        if after is not None:
            yield from _damage(element, _between(data, begin, after[0]))
            closed, depth, begin, at = False, 1, after[0], after[0]
    if not closed:
        problems.append(FileProblem(len(lines), "the JSON array is not closed (the file is cut short, or is not one JSON "
                                                "array); the elements before were read. Fix: export the file again",
                                    "truncated"))
    elif data[begin:].strip():
        problems.append(FileProblem(len(lines), "text follows the end of the JSON array; it was not read. Fix: export "
                                                "one JSON array per file, or JSON Lines"))


def _damage(element: Callable[[int, int], Line | None], where: tuple[int, int] | None) -> Iterator[Line]:
    """The damaged bytes at ``where`` (see :func:`_between`) as one line for the parser to quarantine."""
    found = element(*where) if where is not None else None
    if found is not None:
        yield found


def _between(data: bytes, start: int, end: int) -> tuple[int, int] | None:
    """``data[start:end]`` without the white space and commas around it, as (start, end); None when nothing is left."""
    while start < end and data[start] in b" \t\r\n,":
        start += 1
    while end > start and data[end - 1] in b" \t\r\n,":
        end -= 1
    return (start, end) if start < end else None


def _keys_of(raw: bytes) -> set[str]:
    """The keys of a JSON object's text (none when it is not one)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return set()
    return set(obj) if isinstance(obj, dict) else set()


def _line_of(data: bytes, pos: int) -> int:
    return data.count(b"\n", 0, pos) + 1


def read_records(path: Path, problems: list[FileProblem], span: Span | None = None) -> Iterator[Line]:
    """The file's records as JSON objects, whatever its container (see :func:`container`).

    CSV and JSON Lines are read as the Helicone format reads them (a CSV record becomes one
    object of strings, its header a blank line).
    """
    kind = container(path)
    if kind == "parquet":
        yield from read_rows(path, problems)  # a row group and a few rows at a time
    elif kind == "json-array":
        yield from _array_records(path, problems)
    else:
        yield from read_csv_or_lines(path, problems, span)


# ---- paths ------------------------------------------------------------------------------------


def decoded(value: Any) -> Any:
    """A string holding a JSON object or array, decoded (a path goes on into it); else as is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json_value(value)
        except orjson.JSONDecodeError:
            return value
    return value


def resolve(record: Any, path: str) -> Any:
    """The value at a dotted path, or MISSING.

    A part is an object key or a list index; at an object the longest run of parts that is a key
    wins (a flattened export's column ``usage.prompt_tokens``). A string holding JSON is decoded
    when the path goes on into it (a body exported as a JSON string).
    """
    parts = path.split(".")
    cur, i = record, 0
    while i < len(parts):
        if i:
            cur = decoded(cur)
        if isinstance(cur, Mapping):
            for j in range(len(parts), i, -1):
                key = ".".join(parts[i:j])
                if key in cur:
                    cur, i = cur[key], j
                    break
            else:
                return MISSING
        elif isinstance(cur, list) and _INDEX.fullmatch(parts[i]):
            index = int(parts[i])
            if index >= len(cur):
                return MISSING
            cur, i = cur[index], i + 1
        else:
            return MISSING
    return cur


def _empty(value: Any) -> bool:
    """No usable value: absent, null, an empty string, list or object (also an empty one as JSON text)."""
    if isinstance(value, str):
        return value.strip() in ("", "{}", "[]")
    return value is None or value is MISSING or value == [] or value == {}


def pick(record: Any, paths: Sequence[str]) -> tuple[Any, str | None]:
    """The first non-empty value of ``paths`` and its path; else the first present (empty) value;
    else (MISSING, None)."""
    present: tuple[Any, str | None] = (MISSING, None)
    for path in paths:
        value = resolve(record, path)
        if not _empty(value):
            return value, path
        if value is not MISSING and present[1] is None:
            present = (value, path)
    return present


# ---- times ------------------------------------------------------------------------------------


def parse_time(value: Any, time_format: str, zone: str) -> tuple[int, bool]:
    """Microseconds since the epoch (UTC) and whether the zone was assumed, as ``time_format`` says."""
    if time_format == "auto":
        return to_micros(value, zone)
    if isinstance(value, bool) or value is None:
        raise TimeError(f"{value!r} is not a time")
    if time_format == "iso":
        if not isinstance(value, str) or NUMBER.fullmatch(value.strip()):
            raise TimeError(f"{_shown(value)} is not an ISO 8601 time (time_format = \"iso\")")
        return to_micros(value, zone)
    if time_format in _EPOCH_UNITS:
        number: int | float
        if isinstance(value, (int, float)):
            number = value
        elif isinstance(value, str) and NUMBER.fullmatch(value.strip()):
            text = value.strip()
            if text.lstrip("+-").isdigit() and len(text.lstrip("+-")) > 30:
                # Far beyond every unit's range (and int() refuses more than 4,300 digits).
                return _in_range(MIN_MICROS - 1 if text.startswith("-") else MAX_MICROS + 1, value), False
            number = int(text) if text.lstrip("+-").isdigit() else float(text)
        else:
            raise TimeError(f"{_shown(value)} is not an epoch number (time_format = \"{time_format}\")")
        if isinstance(number, float) and number != number or number in (float("inf"), float("-inf")):
            raise TimeError(f"{_shown(value)} is not a time")
        micros = number * _EPOCH_UNITS[time_format]
        micros = micros if isinstance(micros, int) else round(micros)
        return _in_range(micros, value), False
    if not isinstance(value, str):
        raise TimeError(f"a {type(value).__name__} is not a time written as {time_format!r}")
    try:
        t = dt.datetime.strptime(value.strip(), time_format)
    except ValueError:
        raise TimeError(f"{_shown(value)} does not match time_format {time_format!r}") from None
    assumed = t.tzinfo is None
    if assumed:
        t = t.replace(tzinfo=dt.UTC if zone == "UTC" else ZoneInfo(zone))
    return _in_range((t - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1), value), assumed


def _in_range(micros: int, shown: Any) -> int:
    if not MIN_MICROS <= micros <= MAX_MICROS:
        raise TimeError(f"{_shown(shown)} is outside the years 1970 to 9999")
    return micros


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ---- records ----------------------------------------------------------------------------------


def _where(ctx: FileContext, line_number: int) -> str:
    unit = "row" if ctx.file_name.lower().endswith((".parquet", ".pq")) else "line"
    return f"{ctx.display_path} {unit} {line_number}"


def _paths(paths: Sequence[str]) -> str:
    return " or ".join(repr(p) for p in paths)


@dataclasses.dataclass
class _Record:
    """One record being mapped: its values by profile key, and what could not be used."""

    obj: dict[str, Any]
    profile: Profile
    where: str
    problems: list[str] = dataclasses.field(default_factory=list)

    def fail(self, key: str, what: str, fix: str | None = None) -> RecordError:
        cls = NoTenantValue if key == "tenant_id" and what == "no value" else RecordError
        return cls(f"profile key {key} ({_paths(self.profile.paths(key))}): {what} in the record at {self.where}",
                           fix=fix)

    def get(self, key: str) -> tuple[Any, str | None]:
        paths = self.profile.paths(key)
        if not paths:
            return MISSING, None
        value, path = pick(self.obj, paths)
        if _empty(value) and key in RECORD_REQUIRED:
            raise self.fail(key, "no value", fix="correct the profile path, or re-export the log with this field "
                            "(the rest of the file was ingested)")
        if _empty(value) and key in PROFILE_REQUIRED:
            self.problems.append(f"{key}: no value at {_paths(paths)}; left null")
        return value, path

    def value(self, key: str) -> Any:
        """The value of ``key`` in this record, None when absent."""
        value, _ = self.get(key)
        return None if value is MISSING else value

    def text(self, key: str) -> str | None:
        value, _ = self.get(key)
        if _empty(value):
            return None
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise self.fail(key, f"a {type(value).__name__}, expected a string")

    def time(self, key: str, zone: str) -> tuple[int | None, bool]:
        value, _ = self.get(key)
        if _empty(value):
            return None, False
        try:
            return parse_time(value, self.profile.time_format, zone)
        except TimeError as exc:
            raise self.fail(key, str(exc), fix=f"set time_format in the [[inputs]] entry to how the times are written "
                                               f"(iso, epoch_s, epoch_ms, epoch_us or a strftime pattern); {RANGE_HINT}") from None


def _prompt(rec: _Record) -> tuple[str | None, int, int]:
    """Prompt text, non-text parts and message count from prompt_messages, else prompt_text."""
    messages, _ = pick(rec.obj, rec.profile.paths("prompt_messages")) if rec.profile.paths("prompt_messages") else (MISSING, None)
    try:
        if not _empty(messages):
            messages = decoded(messages)
            if isinstance(messages, list):
                text, nontext = schema.render_messages(messages)
                return text, nontext, len(messages)
            if isinstance(messages, str):  # a plain-text prompt where messages were expected
                return schema.render_prompt(messages), 0, 1
            raise rec.fail("prompt_messages", f"a {type(messages).__name__}, expected a list of messages")
        prompt, _ = pick(rec.obj, rec.profile.paths("prompt_text")) if rec.profile.paths("prompt_text") else (MISSING, None)
        if not _empty(prompt):
            if isinstance(prompt, str) or isinstance(prompt, list):
                return schema.render_prompt(prompt), 0, 1
            raise rec.fail("prompt_text", f"a {type(prompt).__name__}, expected a string or a list of strings")
    except TypeError as exc:
        key = "prompt_messages" if not _empty(messages) else "prompt_text"
        raise rec.fail(key, str(exc)) from None
    keys = [k for k in ("prompt_messages", "prompt_text") if rec.profile.paths(k)]
    rec.problems.append(f"{' / '.join(keys)}: no value at {_paths([p for k in keys for p in rec.profile.paths(k)])}; left null")
    return None, 0, 0


#: The keys an API error body has besides ``error`` (an answer that is JSON with more keys stays text).
ERROR_BODY_KEYS = {"error", "id", "object", "model", "created", "code", "message", "type", "param", "status", "usage"}


def _is_body(value: Any) -> bool:
    """A ChatCompletion object, a streamed chunk list, a Helicone-style ``streamed_data`` wrapper
    or an API error body."""
    if isinstance(value, Mapping):
        return (isinstance(value.get("choices"), list) or isinstance(value.get("streamed_data"), list)
                or ("error" in value and set(value) <= ERROR_BODY_KEYS))
    return isinstance(value, list) and bool(value) and all(isinstance(c, Mapping) and "choices" in c for c in value)


def _chat_body(value: Any) -> Any:
    """A response body given as a JSON string (see :func:`_is_body`), decoded; anything else as is.

    Only a body of that shape is decoded: an answer that is itself JSON (JSON mode) stays text.
    """
    if isinstance(value, str):
        body = decoded(value)
        if _is_body(body):
            return body
    if isinstance(value, Mapping) and "choices" not in value and isinstance(value.get("streamed_data"), list):
        return value["streamed_data"]
    return value


def _cut_body(value: Any) -> bool:
    """A string that is the start of a ChatCompletion JSON body cut short by the export."""
    if not isinstance(value, str) or value.lstrip()[:1] not in ("{", "[") or decoded(value) is not value:
        return False
    return '"choices"' in value or '"chat.completion' in value


def _response(rec: _Record) -> tuple[str | None, str | None, dict[str, Any], bool, bool]:
    """Response text, finish reason, usage, whether the body is an error, whether it was cut short.

    A path may lead to the text itself, or to a ChatCompletion object or streamed chunk list
    (also as a JSON string), which the shared field helpers read. An empty string is no answer.
    """
    paths = rec.profile.paths("response_text")
    present = False
    first: tuple[str | None, str | None, dict[str, Any], bool, bool] | None = None
    for path in paths:
        value = resolve(rec.obj, path)
        if value is MISSING:
            continue
        present = True
        value = _chat_body(_chat_body(value))  # a JSON string, then a streamed_data wrapper
        if _cut_body(value):
            rec.problems.append(f"response_text: the body at {path!r} is cut short (its JSON ends early); the response "
                                "text is unknown")
            first = first or (None, None, {}, False, True)
            continue
        error = False
        text: str | None
        finish: str | None
        usage: dict[str, Any]
        if value is None or isinstance(value, str):
            text, finish, usage = value or None, None, {}
        elif isinstance(value, (Mapping, list)):
            try:
                text, finish, usage = response_text(value, f"profile key response_text ({path!r})")
            except RecordError as exc:
                raise rec.fail("response_text", str(exc).split(". Fix:")[0]) from None
            error = error_body(value) and "choices" not in value
        else:
            raise rec.fail("response_text", f"a {type(value).__name__}, expected text, a ChatCompletion object or a chunk list")
        if text:
            return text, finish, usage, error, False
        first = first or (text, finish, usage, error, False)
    if not present:
        rec.problems.append(f"response_text: no value at {_paths(paths)}; left null")
    return first or (None, None, {}, False, False)


def _status(rec: _Record, error_body: bool) -> tuple[str, int | None]:
    """(success | failure, HTTP status code) from the status key: a code, or a word."""
    value, _ = rec.get("status")
    failed, code = error_body, None
    number = whole_number(value)
    if _empty(value):
        pass
    elif number is not None and -999 <= number <= 999:
        # Gateways write -1 (and other negatives) for a request that never got a response.
        code = number if number >= 0 else None
        failed = failed or number < 0 or number >= 400
    elif isinstance(value, str) and number is None:
        failed = failed or value.strip().lower() in FAILURE_WORDS
    else:
        rec.problems.append(f"status = {_shown(value)} is neither a status code (-999 to 999) nor a word; ignored")
    return ("failure" if failed else "success"), code


def _stream(rec: _Record) -> bool | None:
    value, _ = rec.get("stream")
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    if not _empty(value):
        rec.problems.append(f"stream = {_shown(value)} is not true or false; ignored")
    return None


def map_record(obj: dict[str, Any], ctx: FileContext, line_number: int) -> dict[str, Any]:
    """The exchange row of one record under the input's profile; RecordError when it cannot be used."""
    profile: Profile = ctx.profile
    rec = _Record(obj, profile, _where(ctx, line_number))
    request_id = rec.text("request_id")
    tenant = rec.text("tenant_id")
    tenant_path = pick(obj, profile.paths("tenant_id"))[1]
    received, assumed1 = rec.time("received_at", ctx.zone)
    completed, assumed2 = rec.time("completed_at", ctx.zone)
    prompt, nontext, n_messages = _prompt(rec)
    text, finish, usage, error_body, cut = _response(rec)
    status, code = _status(rec, error_body)
    reported = opt_count(rec.value("prompt_tokens"), "prompt_tokens", rec.problems)
    if reported is None:
        reported = opt_count(usage.get("prompt_tokens"), "response_text usage.prompt_tokens", rec.problems)
    completion = opt_count(rec.value("completion_tokens"), "completion_tokens", rec.problems)
    if completion is None:
        completion = opt_count(usage.get("completion_tokens"), "response_text usage.completion_tokens", rec.problems)
    row: dict[str, Any] = {
        "request_id": request_id,
        "tenant_id": tenant,
        "tenant_field": tenant_path,
        "user_id": rec.text("user_id"),
        "model": rec.text("model"),
        "model_routed": rec.text("model_routed"),
        "received_at": received,
        "completed_at": completed,
        "status": status,
        "status_code": code,
        "finish_reason": rec.text("finish_reason") or finish,
        "stream": _stream(rec),
        "response_text": text,
        "response_truncated": cut or holds_cut(text, lambda: _cuts(rec, ("response_text",))),
        "reported_completion_tokens": completion,
        "completion_tokens": completion,
        "zone_assumed": ctx.zone if (assumed1 or assumed2) else None,
        "problems": "; ".join(rec.problems) or None,
    }
    cuts = _cuts(rec, ("prompt_messages", "prompt_text")) if prompt and "litellm_truncated" in prompt else None
    row.update(prompt_fields(prompt, nontext, n_messages, reported, ctx, cuts))
    return row


def _cuts(rec: _Record, keys: tuple[str, ...]) -> collections.Counter[str]:
    """LiteLLM's truncation markers in the values the profile maps to ``keys`` (an export of LiteLLM's
    spend logs holds cut strings; the marker's words anywhere else are text: :func:`litellm_cuts`)."""
    return litellm_cuts(*[decoded(resolve(rec.obj, path)) for key in keys for path in rec.profile.paths(key)])


class MappedParser:
    """Records of any JSON/CSV/Parquet log, read through the input's mapping profile."""

    name = "mapped"

    def sniff(self, lines: list[str], file_name: str) -> bool:
        """Never: a mapped file is only read when its [[inputs]] entry says so (with a profile)."""
        return False

    def parse(self, text: str, line_number: int, ctx: FileContext) -> Output:
        """One record into an exchange row, or a quarantine reason naming the profile key."""
        if ctx.profile is None:  # ingest refuses this before any work; a safety net for direct callers
            return Quarantined("format mapped needs a mapping profile. Fix: give the file's [[inputs]] entry an "
                               "[inputs.fields] table")
        try:
            obj = loads_object(text)
            if CSV_ERROR in obj:
                raise RecordError(str(obj[CSV_ERROR]), fix="re-export the file as CSV with every field quoted, or as JSON Lines")
            if ROW_ERROR in obj:
                raise RecordError(str(obj[ROW_ERROR]), fix="correct the value in the export, or export the log as JSON Lines")
            row = map_record(obj, ctx, line_number)
        except RecordError as exc:
            return Quarantined(str(exc), no_tenant=isinstance(exc, NoTenantValue))
        row.update(provenance(ctx, line_number, text, "mapped_row"))
        return "exchanges", row


# ---- checks before any work -------------------------------------------------------------------


def profile_for(paths: Sequence[Path], cfg: CaseConfig) -> Profile:
    """The profile of the case file's ``mapped`` input that holds every one of ``paths``."""
    found = {spec.profile for spec in cfg.inputs if spec.profile is not None and _holds_all(spec.path, paths)}
    if len(found) == 1:
        return found.pop()
    if not found:
        raise ConfigError("format mapped needs a mapping profile, and no [[inputs]] entry with format = \"mapped\" holds "
                          f"{', '.join(str(p) for p in paths)}", file=cfg.file,
                          fix="give --config CASE.toml whose [[inputs]] entry for these logs has format = \"mapped\" and an "
                              "[inputs.fields] table (forensics profile suggest FILE prints a starting one)")
    raise ConfigError(f"{len(found)} mapped [[inputs]] entries hold {', '.join(str(p) for p in paths)}, with different "
                      "profiles", file=cfg.file, fix="ingest each entry's path on its own, or run the case file (forensics run)")


def _holds_all(spec_path: Path, paths: Sequence[Path]) -> bool:
    """Whether an [[inputs]] entry's ``path`` holds every one of ``paths``: the file or folder it names, or, for a
    glob pattern (``logs/**/*.parquet``), the files and folders it matches, as the run expands it (once, not per
    path: thousands of files named at once)."""
    if spec_path.exists() or not glob.has_magic(str(spec_path)):
        return all(_inside(Path(p), spec_path) for p in paths)
    roots = {os.path.realpath(match) for match in glob_matches(spec_path).matches}
    for p in paths:
        # The path itself or a folder above it is a match.
        at = os.path.realpath(p)
        while at not in roots:
            up = os.path.dirname(at)
            if up == at:
                return False
            at = up
    return True


def _inside(path: Path, root: Path) -> bool:
    p, r = os.path.realpath(path), os.path.realpath(root)
    return p == r or p.startswith(r.rstrip(os.sep) + os.sep)


def sample(path: Path, limit: int, unreadable: list[tuple[int, str]] | None = None) -> tuple[list[dict[str, Any]], bool]:
    """The JSON objects among the first ``limit`` records of a file, and whether that is all of it.

    A record that is no JSON object (or CSV record) is left out of the sample and, when
    ``unreadable`` is given, added to it as (line or row, why).
    """
    records: list[dict[str, Any]] = []
    seen = 0
    for line in read_records(path, []):
        if line.text is None and unreadable is not None:
            unreadable.append((line.number, "not valid UTF-8"))
        if line.text is None or not line.text.strip():
            continue
        if seen >= limit:
            return records, False
        seen += 1
        try:
            obj = loads_object(line.text)
        except RecordError as exc:
            if unreadable is not None:
                unreadable.append((line.number, str(exc).split(". Fix: ")[0]))
            continue
        if CSV_ERROR not in obj and ROW_ERROR not in obj:
            records.append(obj)
        elif unreadable is not None:
            unreadable.append((line.number, str(obj.get(CSV_ERROR) or obj.get(ROW_ERROR))))
    return records, True


def check_profile(path: Path, profile: Profile, limit: int = CHECK_RECORDS) -> None:
    """Refuse a profile key whose paths resolve in none of the file's first ``limit`` records.

    A required key is checked on that sample; any other key when the sample is the whole file
    (a field may appear only in later records of a bigger one). The error names the key, its
    paths and the closest fields the file has.
    """
    import difflib

    from forensics.ingest.profile import field_paths

    records, whole = sample(path, limit)
    if not records:
        return
    mapped = dict(profile.fields)
    prompts = [k for k in PROMPT_KEYS if k in mapped]
    checks = [(k, p) for k, p in profile.fields if whole or k in PROFILE_REQUIRED or prompts == [k]]
    if len(prompts) == 2 and not whole:  # either may be the one a record uses: one of them must resolve
        checks.append((" or ".join(prompts), mapped[prompts[0]] + mapped[prompts[1]]))
    for key, paths in checks:
        if any(resolve(obj, p) is not MISSING for obj in records for p in paths):
            continue
        found = [f.path for f in field_paths(records)]
        close = sorted({c for p in paths for c in difflib.get_close_matches(p, found, n=3, cutoff=0.5)})
        scope = f"the {len(records)} records" if whole else f"the first {len(records)} records"
        raise ConfigError(
            f"[inputs.fields] {key} = {' or '.join(repr(p) for p in paths)} resolves in none of {scope} of this file",
            file=path,
            fix=(f"did you mean {' or '.join(repr(c) for c in close)}? " if close else "")
            + "check the path against the fields the file holds (forensics profile suggest FILE lists them)",
        )


_parser = MappedParser()
FORMAT = register(LogFormat(
    name=_parser.name,
    summary="any JSON Lines, JSON array, CSV or Parquet log, through the [inputs.fields] mapping profile of its "
            "[[inputs]] entry (never sniffed)",
    table="exchanges",
    sniff=_parser.sniff,
    parse=_parser.parse,
    sniff_order=1000,  # never claims a file; last for form's sake
    kinds=(RecordKind("mapped_row", precedence=5),),
    read=read_records,
    splittable=False,  # a CSV field may hold line breaks, a JSON array is read whole
    parquet=True,  # read by its own reader (read_records)
))
