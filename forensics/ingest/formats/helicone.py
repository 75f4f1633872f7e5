"""Helicone exports of ``request_response_rmt``, as CSV or JSON Lines (log-formats.md §4).

One row per request: ``request_id``, ``request_created_at``, ``response_created_at``, ``status``,
``prompt_tokens``, ``completion_tokens``, ``model``, ``organization_id`` (the tenant), ``user_id``,
and the bodies ``request_body`` / ``response_body`` as JSON strings (or JSON values). Helicone's
own export tool (``@helicone/export``) names some of these differently (``response_status``,
``request_user_id``); those names are read too.

A CSV export quotes the JSON-string bodies, so one record may span several physical lines; the
format therefore reads its own files (:func:`read_records`) and is never split across workers.
"""

from __future__ import annotations

import collections
import csv
import io
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from forensics.errors import json_name
from forensics.ingest.base import FileContext, Output, Quarantined, prompt_fields, provenance
from forensics.ingest.fields import (
    INT64_MAX,
    NoTenant,
    RecordError,
    as_str,
    body_prompt,
    chunks_text,
    columns_differ,
    error_body,
    first_objects,
    get_path,
    json_string,
    loads_object,
    named_twice,
    no_tenant_value,
    opt_count,
    opt_int,
    opt_str,
    response_text,
    stream_flag,
    time_field,
    unread_prompt,
)
from forensics.ingest.reader import FileProblem, Line, Span, read_lines, without_bom
from forensics.ingest.registry import LogFormat, RecordKind, register

#: Columns that only a Helicone request/response row has together (with ``request_id``).
SIGNS = {"request_created_at", "request_body", "response_body", "response_created_at"}
#: The default tenant: the organization the row belongs to.
TENANT_FIELD = "organization_id"
#: Set on the JSON object a CSV record becomes when the record itself is broken.
CSV_ERROR = "_csv_error"
#: The longest CSV field read. The csv module's default (128 KiB) would quarantine exactly the
#: records this incident is about, prompts of hundreds of thousands of tokens; a record is read
#: whole anyway (see _records), so the limit only has to stay within the C long the module takes.
CSV_FIELD_LIMIT = 2**31 - 1


def _csv_header(line: str) -> list[str] | None:
    """The column names when ``line`` is a CSV header (not a JSON object), else None."""
    if line.lstrip().startswith("{"):
        return None
    try:
        return next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None


#: How far a record whose quotes do not close is read before they are taken as out of step: such a
#: record is held whole while it is read, to be read again from its second line. Each line counts its
#: bytes plus what holding it costs (a field of millions of empty lines is no small record). Far above
#: any real record: a prompt at the advertised window of a million tokens is a few megabytes.
DAMAGED_RECORD_BYTES = 64 << 20
LINE_COST = 256


def _differing(twice: dict[str, list[int]], fields: list[str]) -> dict[str, Any] | None:
    """The error object of a record whose columns of one name hold different values (which one the export meant
    is unknown: read as an object, the last would win, maybe another customer's id), or None."""
    for name, at in twice.items():
        if len({fields[i] for i in at}) > 1:
            return {CSV_ERROR: "CSV " + columns_differ(name, at, "record", "header")}
    return None


def _records(lines: Iterator[Line], fields: int) -> Iterator[tuple[int, str | None, bytes]]:
    """Group physical lines into CSV records of ``fields`` fields: a record ends where its double quotes balance.

    Yields (first line number, record text, record bytes); a record holding an undecodable line is
    yielded with no text, so the caller quarantines it as not UTF-8. Such a record's quotes are counted
    in its bytes (a double quote is the byte 0x22 in UTF-8 and in the single-byte encodings a stray
    byte comes from), and it stands only if its lines, so grouped, make a record of ``fields`` fields
    (a bad byte inside a quoted field that spans lines). Otherwise its first line goes alone (a torn
    write's stray quote byte) and the lines after it are grouped again: a record cut at the bad line, or
    opened by a stray quote, left the quotes out of step, and every record after it was read from inside
    a quoted field (the customers' records lost). A readable record whose quotes never close before the
    end of the file was cut short: the records after it start where the rest of the file reads as whole
    records again (:func:`_resync`), and only when it never does is the rest of the file that record
    (the last record, cut at the end of the file, its quoted field holding the lines after its first).
    """
    again: collections.deque[Line] = collections.deque()

    def take() -> Line | None:
        return again.popleft() if again else next(lines, None)

    while (first := take()) is not None:
        without_bom(first)  # the start of another export appended to this one
        group = [first]
        quotes = _quotes(first)
        readable = first.text is not None
        size = len(first.raw) + LINE_COST
        at_end = False
        while quotes % 2:
            if size >= DAMAGED_RECORD_BYTES:
                break
            line = take()
            if line is None:
                at_end = True
                break
            group.append(line)
            quotes += _quotes(line)
            readable = readable and line.text is not None
            size += len(line.raw) + LINE_COST
        raw = _joined_raw(group)
        count = None if len(group) == 1 or quotes % 2 else _field_count(raw)
        if len(group) == 1 or count == fields:
            yield first.number, _joined_text(group) if readable else None, raw
        elif readable and count is not None and not _starts_a_record(group, fields):
            # One record whose quotes close but whose fields are one too many or too few: the caller quarantines it
            # for its count. Read line by line, each of its lines was quarantined as a field whose quotes never close.
            yield first.number, _joined_text(group), raw
        elif readable and quotes % 2 and at_end:
            cut = _resync(group, fields)
            torn = group[:cut]
            yield first.number, _joined_text(torn), _joined_raw(torn)
            again.extendleft(reversed(group[cut:]))
        else:
            # Not one record: a damaged line, or the rest of a damaged record (a closing quote left over),
            # opened it. Its first line goes alone; the lines after it are read again.
            yield first.number, None if first.text is None else first.text, first.raw
            again.extendleft(reversed(group[1:]))


def _resync(group: list[Line], fields: int) -> int:
    """Where the records after a record cut short begin: the first line after ``group[0]`` from which the
    rest of ``group`` (every line to the end of the file) reads as whole records of ``fields`` fields, or
    ``len(group)`` when no line does.

    Read from line ``i``, a record ends at the first line where the quotes counted from ``i`` balance;
    whether the rest reads whole from ``i`` is decided from the end backwards, so each line is parsed about
    once (a record is parsed only when everything after it reads whole).
    """
    n = len(group)
    parity = [0] * (n + 1)  # quotes in group[:k], mod 2
    for k, line in enumerate(group):
        parity[k + 1] = parity[k] ^ (_quotes(line) & 1)
    # next_same[p][k]: the smallest k' >= k with parity[k'] == p (n + 1: none)
    next_same = [[n + 1] * (n + 2), [n + 1] * (n + 2)]
    for k in range(n, -1, -1):
        next_same[0][k], next_same[1][k] = next_same[0][k + 1], next_same[1][k + 1]
        next_same[parity[k]][k] = k
    whole = [False] * (n + 1)
    whole[n] = True
    for i in range(n - 1, 0, -1):
        end = next_same[parity[i]][i + 1]  # the record read from line i is group[i:end]
        if end <= n and whole[end] and all(line.text is not None for line in group[i:end]):
            whole[i] = _fits(_joined_raw(group[i:end]), fields)
    return next((i for i in range(1, n) if whole[i]), n)


def _joined_raw(group: list[Line]) -> bytes:
    """The bytes of a record that spans ``group``'s lines, each line ended as it was written (a CRLF inside a
    quoted field is the customer's text, not a line end to normalise)."""
    if len(group) == 1:
        return group[0].raw
    return b"".join(line.raw + line.end for line in group[:-1]) + group[-1].raw


def _joined_text(group: list[Line]) -> str:
    """The text of a record that spans ``group``'s lines (all readable), ended as :func:`_joined_raw`."""
    if len(group) == 1:
        return group[0].text or ""
    return "".join((line.text or "") + line.end.decode("ascii") for line in group[:-1]) + (group[-1].text or "")


def _quotes(line: Line) -> int:
    return line.raw.count(b'"') if line.text is None else line.text.count('"')


def _fits(raw: bytes, fields: int) -> bool:
    """Whether the bytes of a group of lines, read leniently, are one CSV record of ``fields`` fields (a
    damaged line that is a record by itself, its stray quote opening a field, does not make one of the
    lines after it)."""
    return _field_count(raw) == fields


def _field_count(raw: bytes) -> int | None:
    """How many fields the bytes of a group of lines hold when they read (leniently) as one CSV record; None
    when they do not."""
    reader = csv.reader(io.StringIO(raw.decode("utf-8", "replace"), newline=""), strict=True)
    try:
        first = next(reader, None)
        return len(first) if first is not None and next(reader, None) is None else None
    except csv.Error:
        return None


def _starts_a_record(group: list[Line], fields: int) -> bool:
    """Whether a line of ``group`` after its first starts a whole record of ``fields`` fields that ends inside the
    group: then the group is a damaged first line (its stray quote opening a field) and the records after it, not
    one record of another field count. Where telling costs more than reading the group four times over, it is
    taken to (the records then read as before)."""
    n = len(group)
    parity = [0] * (n + 1)  # quotes in group[:k], mod 2
    for k, line in enumerate(group):
        parity[k + 1] = parity[k] ^ (_quotes(line) & 1)
    budget = 4 * sum(len(line.raw) + 1 for line in group)
    following = n + 1  # the first k > i with parity[k] == parity[i]: where the record read from line i ends
    same = [n + 1, n + 1]
    for i in range(n - 1, 0, -1):
        same[parity[i + 1]] = i + 1
        following = same[parity[i]]
        if following > n or any(line.text is None for line in group[i:following]):
            continue
        raw = _joined_raw(group[i:following])
        budget -= len(raw)
        if budget < 0 or _fits(raw, fields):
            return True
    return False


def read_records(path: Path, problems: list[FileProblem], span: Span | None = None) -> Iterator[Line]:
    """The file's records: JSON Lines as they are, CSV records as one JSON object each.

    A CSV record becomes ``{column: value}`` (what a JSON Lines row holds, values as strings) and
    keeps its own bytes in ``raw`` (hashed for duplicates) and the number of its first line. A
    record whose quotes never close or whose field count differs from the header becomes an
    object carrying only the reason, which the parser quarantines. The header is counted as a
    blank line so the file's counts still reconcile.
    """
    lines = read_lines(path, problems, span)
    header: list[str] | None = None
    for line in lines:
        without_bom(line)
        if line.text is None or not line.text.strip():
            yield line
            continue
        if line.text.lstrip("\ufeff \t").startswith("["):
            # Read as CSV, an array's every line was a record of the wrong number of fields, quarantined one by one.
            problems.append(FileProblem(line.number, "the file is a JSON array, which this format does not read (it reads "
                                        "CSV or JSON Lines): its records were not read. Fix: write one object a line "
                                        "(jq -c '.[]' FILE > FILE.jsonl) and ingest that", "unreadable"))
            return
        header = _csv_header(line.text)
        if header is None:  # JSON Lines: every line is a record
            yield line
            yield from lines
            return
        yield Line(line.number, "", line.raw)  # the header holds no record
        break
    if header is None:
        return
    # Names as the format's sniff reads them: "request_id, request_created_at" names request_created_at.
    header = [name.strip() for name in header]
    twice = named_twice(header)
    csv.field_size_limit(CSV_FIELD_LIMIT)  # process-wide, and only ever raised: no other reader lowers it
    for number, text, raw in _records(lines, len(header)):
        if text is None or not text.strip():
            yield Line(number, text, raw)
            continue
        obj: dict[str, Any]
        if text.count('"') % 2:
            obj = {CSV_ERROR: "CSV record has an unterminated quoted field (its quotes never close: the record was "
                              "cut short)"}
        else:
            try:
                fields = next(csv.reader(io.StringIO(text, newline=""), strict=True))
            except csv.Error as exc:
                fields, obj = [], {CSV_ERROR: f"CSV record cannot be read ({exc})"}
            else:
                names = [name.strip() for name in fields]
                if collections.Counter(names) == collections.Counter(header):
                    # The header again, maybe in another column order: exports appended one after another. The
                    # rows after it follow it (read by the first, their customers could be another column's).
                    header, twice = names, named_twice(names)
                    yield Line(number, "", raw)  # a header holds no record
                    continue
                if len(fields) != len(header):
                    obj = {CSV_ERROR: f"CSV record has {len(fields)} fields, the header has {len(header)}"}
                else:
                    obj = _differing(twice, fields) or dict(zip(header, fields, strict=True))
        yield Line(number, orjson.dumps(obj).decode(), raw)




def resolve_tenant(obj: Mapping[str, Any], tenant_field: str) -> tuple[str, str]:
    """The tenant id and the field that gave it (``auto`` means organization_id)."""
    field = TENANT_FIELD if tenant_field in ("auto", "") else tenant_field
    value = get_path(obj, field)
    if no_tenant_value(value):
        raise NoTenant(field)
    return as_str(value, field), field


#: The columns Helicone keeps apart from ``prompt_tokens`` (it stores the provider's prompt count less the cached
#: and audio tokens, and Anthropic's ``input_tokens``, which leaves out cache reads and writes): the prompt's size
#: is their sum. Read alone, a long prompt served mostly from the cache counted a few hundred tokens and fell under
#: the ceiling.
PROMPT_PARTS = ("prompt_cache_read_tokens", "prompt_cache_write_tokens", "prompt_audio_tokens")
COMPLETION_PARTS = ("completion_audio_tokens",)


def _with_parts(count: int | None, obj: Mapping[str, Any], parts: tuple[str, ...], problems: list[str]) -> int | None:
    """``count`` plus the counts Helicone keeps apart from it (each column the row holds)."""
    if count is None:
        return None
    for name in parts:
        part = opt_count(obj.get(name), name, problems)
        if part is not None:
            count += part
    return min(count, INT64_MAX)  # each part fits in 64 bits; their sum must too


class HeliconeParser:
    """Helicone request/response rows from a CSV or JSON Lines export."""

    name = "helicone"

    def sniff(self, lines: list[str], file_name: str) -> bool:
        """A JSON object or a CSV header with request_id and at least two of SIGNS."""
        if lines:
            header = _csv_header(lines[0])
            if header is not None:
                names = {h.strip() for h in header}
                return "request_id" in names and len(names & SIGNS) >= 2
        return any("request_id" in obj and len(set(obj) & SIGNS) >= 2 for obj in first_objects(lines))

    def parse(self, text: str, line_number: int, ctx: FileContext) -> Output:
        """One exported row into an exchange row, or a quarantine reason."""
        try:
            obj = loads_object(text)
            if CSV_ERROR in obj:
                raise RecordError(str(obj[CSV_ERROR]), fix="re-export the file as CSV with every field quoted, or as JSON Lines")
            row = self._row(obj, ctx)
        except RecordError as exc:
            return Quarantined(str(exc), no_tenant=isinstance(exc, NoTenant))
        row.update(provenance(ctx, line_number, text, "helicone_row"))
        return "exchanges", row

    def _row(self, obj: dict[str, Any], ctx: FileContext) -> dict[str, Any]:
        request_id = opt_str(obj, "request_id") or opt_str(obj, "response_id")
        if request_id is None:
            raise RecordError("missing required field 'request_id'", fix="re-export the rows with 'request_id' (it identifies the request)")
        received, assumed1 = time_field(obj, "request_created_at", ctx.zone)
        completed, assumed2 = time_field(obj, "response_created_at", ctx.zone, required=False)
        tenant, tenant_field = resolve_tenant(obj, ctx.tenant_field)
        request, request_cut = json_string(obj.get("request_body"), "request_body", "row")
        if request is not None and not isinstance(request, Mapping):
            raise RecordError(f"request_body is a {type(request).__name__}, expected the chat request object")
        request = request or {}
        response, cut = json_string(obj.get("response_body"), "response_body", "row")
        problems: list[str] = []
        if request_cut:
            problems.append("request_body is cut short (its JSON ends early); the prompt text is unknown")
        if cut:
            problems.append("response_body is cut short (its JSON ends early); the response text is unknown")
        prompt, nontext, n_messages = body_prompt(request, "request_body", response)
        if prompt is None and not request_cut and (note := unread_prompt(request, "request_body")):
            problems.append(note)
        text, finish, usage = self._response(response)
        if text is None and not cut and isinstance(response, Mapping) and response and not error_body(response):
            # Another provider's answer (Gemini's candidates, say): the answer is there, unread.
            problems.append(f"response_body is {json_name(response)} of a shape not known to hold the answer; "
                            "response text unknown")
        status = obj.get("status", obj.get("response_status"))
        # Helicone writes -1 (and other negatives) for a request that never got a response.
        code = opt_int(status, "status", problems, -999, 999)
        reported = _with_parts(opt_count(obj.get("prompt_tokens"), "prompt_tokens", problems), obj, PROMPT_PARTS, problems)
        if reported is None:
            reported = opt_count(usage.get("prompt_tokens"), "response_body.usage.prompt_tokens", problems)
        completion = _with_parts(opt_count(obj.get("completion_tokens"), "completion_tokens", problems), obj,
                                 COMPLETION_PARTS, problems)
        if completion is None:
            completion = opt_count(usage.get("completion_tokens"), "response_body.usage.completion_tokens", problems)
        routed = response.get("model") if isinstance(response, Mapping) and isinstance(response.get("model"), str) else None
        failed = (code is not None and (code < 0 or code >= 400)) or error_body(response)
        # An answer stored as its chunks was streamed, whatever the request body says or leaves out.
        chunked = isinstance(response, Mapping) and "choices" not in response and isinstance(response.get("streamed_data"),
                                                                                              list)
        stream = True if chunked else stream_flag(request)
        row: dict[str, Any] = {
            "request_id": request_id,
            "tenant_id": tenant,
            "tenant_field": tenant_field,
            "user_id": opt_str(obj, "user_id") or opt_str(obj, "request_user_id"),
            "model": opt_str(obj, "model") or (request.get("model") if isinstance(request.get("model"), str) else None),
            "model_routed": routed,
            "received_at": received,
            "completed_at": completed,
            "status": "failure" if failed else "success",
            "status_code": code if code is not None and code >= 0 else None,
            "finish_reason": finish,
            "stream": stream if isinstance(stream, bool) else None,
            "response_text": None if cut else text,
            "response_truncated": cut,
            "reported_completion_tokens": completion,
            "completion_tokens": completion,
            "zone_assumed": ctx.zone if (assumed1 or assumed2) else None,
            "problems": "; ".join(problems) or None,
        }
        row.update(prompt_fields(prompt, nontext, n_messages, reported, ctx))
        if request_cut:
            # The export kept the start of the request only: the prompt is longer than anything read.
            row["prompt_truncated"] = True
        return row

    @staticmethod
    def _response(response: Any) -> tuple[str | None, str | None, dict[str, Any]]:
        if isinstance(response, str):
            # Not JSON (json_string keeps such text as it is): an upstream error page ("Bad Gateway")
            # or a provider answering in plain text. The text is the answer, as Cloudflare and
            # Langfuse read it; the row keeps its prompt.
            return response, None, {}
        # A streamed answer is stored either reassembled (choices) or as its chunks (streamed_data).
        if isinstance(response, Mapping) and "choices" not in response and isinstance(response.get("streamed_data"), list):
            return chunks_text(response["streamed_data"], "response_body.streamed_data")
        return response_text(response, "response_body")


_parser = HeliconeParser()
FORMAT = register(LogFormat(
    name=_parser.name,
    summary="Helicone request_response_rmt export (CSV or JSON Lines) with JSON-string request and response bodies",
    table="exchanges",
    sniff=_parser.sniff,
    parse=_parser.parse,
    sniff_order=30,  # after litellm and openai-split, whose signs it does not share
    kinds=(RecordKind("helicone_row", precedence=1),),
    read=read_records,
    splittable=False,  # a quoted CSV field may hold line breaks
))
