"""Cloudflare AI Gateway logs as its REST API returns them (log-formats.md §4).

A log object (``GET /accounts/{account}/ai-gateway/gateways/{gateway}/logs``, and the log detail)
carries ``id``, ``created_at``, ``provider``, ``model``, ``path``, ``success``, ``status_code``,
``cached``, ``duration`` (ms), ``tokens_in``, ``tokens_out`` and ``metadata`` (the request's
``cf-aig-metadata`` header: a JSON string from the REST API, an object from the Workers binding).
The bodies come from ``…/logs/{id}/request`` and ``…/logs/{id}/response``; an export puts them
in ``request`` and ``response`` (objects or JSON strings). Without them the log detail's
``request_head`` / ``response_head`` are used: the start of each body, whole only when
``request_head_complete`` / ``response_head_complete`` is true.

The tenant is a metadata key (Cloudflare has no notion of a customer of its own): ``tenant_field``
names it (``metadata.customer``, or just ``customer``), and ``auto`` tries :data:`METADATA_TENANTS`.

A file holds JSON Lines (one log object a line), a JSON array of log objects, the API's envelope
``{"result": [...], "success": true, ...}``, or several of those one after the other (pages
appended). Arrays and envelopes are read a record at a time (:func:`read_records`), never whole;
their records are numbered by position (the n-th log object of the file) since a minified page is
a single line.
"""

from __future__ import annotations

import dataclasses
import gzip
import re
import zlib
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import zstandard

from forensics.errors import json_name
from forensics.ingest.base import FileContext, Output, Quarantined, prompt_fields, provenance
from forensics.ingest.fields import (
    NoTenant,
    RecordError,
    as_str,
    body_prompt,
    chunks_text,
    error_body,
    events_text,
    first_objects,
    get_path,
    json_string,
    json_value,
    loads_object,
    maybe_json,
    no_tenant_value,
    opt_count,
    opt_int,
    opt_str,
    req_str,
    response_text,
    stream_flag,
    time_field,
    unread_prompt,
)
from forensics.ingest.reader import (
    BOM,
    CHUNK,
    FileProblem,
    Line,
    Span,
    ZstdTruncatedError,
    compression_of,
    read_lines,
    utf8_text,
)
from forensics.ingest.reader import _open as open_decompressed  # the same transparent .gz/.zst reading as every format
from forensics.ingest.registry import LogFormat, RecordKind, register
from forensics.ingest.resync import next_record

#: Metadata keys ``tenant_field = "auto"`` tries, in order: the names teams give the customer.
METADATA_TENANTS = ("tenant_id", "tenant", "organization_id", "org_id", "customer_id", "customer", "team_id")
#: Keys of a log object that only AI Gateway logs have together (with ``id`` and ``created_at``).
SIGNS = {"provider", "tokens_in", "tokens_out", "cached", "success", "duration", "request_head", "response_head",
         "request_head_complete", "response_head_complete", "model_type", "custom_cost"}
#: Envelope key of the REST API's answer that holds the log objects.
RESULT = b"result"
#: The API envelope's flag: ``false`` on an error response (a rejected token, a rate limit), whose ``result``
#: is empty: saved in place of a page, it holds none of that page's logs.
SUCCESS = b"success"
#: The most of a file's first line read to tell JSON Lines from an array or envelope.
HEAD_LIMIT = 64 << 20
#: Longest top-level value that is not JSON (junk between pages) kept as one record to quarantine.
JUNK_LIMIT = 4096
_PAGE_HEAD = re.compile(rb'\{\s*"result"\s*:\s*\[')
_KEY = re.compile(r'"([A-Za-z_][A-Za-z0-9_]*)"\s*:')
_STRUCTURE = re.compile(rb'["\[\]{},:]')
_SPACE = b" \t\r\n"
BOM_AND_SPACE = BOM + _SPACE


# --- reading: JSON Lines, or arrays / envelopes record by record ---------------------------------


def _read_some(fh: BinaryIO) -> bytes:
    """Up to CHUNK bytes. ``read1``: a damaged compressed stream still gives the bytes decoded
    before the damage, where ``read(n)`` would drop them with the error."""
    read: Callable[[int], bytes] = getattr(fh, "read1", fh.read)
    return read(CHUNK)


def _json_lines(path: Path) -> bool:
    """Whether the file is JSON Lines: not an array (first byte ``[``), not a pretty-printed
    object (a first line of ``{`` alone) and not a one-line API envelope.

    A first line that is broken JSON still means JSON Lines: a partial write is one bad line of
    many, and reading line by line keeps the lines after it.
    """
    head = bytearray()
    try:
        with open_decompressed(path) as fh:
            while len(head) < HEAD_LIMIT and (chunk := _read_some(fh)):
                if not head:
                    chunk = chunk.lstrip(BOM_AND_SPACE)
                head += chunk
                if head[:1] == b"[" or b"\n" in chunk:
                    break
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error, zstandard.ZstdError):
        pass  # the reader reports what is wrong with the file
    data = bytes(head)
    if data[:1] == b"[" or (len(data) >= HEAD_LIMIT and b"\n" not in data):
        return False  # an array, or a first value too long to be a line worth holding: scanned
    line = data.split(b"\n", 1)[0].strip(_SPACE)
    if line == b"{":
        return False
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        # An API page cut short (a failed download, the next page appended on the next line) is pages still.
        return _PAGE_HEAD.match(line) is None
    return not (isinstance(obj, dict) and isinstance(obj.get("result"), list))


def read_records(path: Path, problems: list[FileProblem], span: Span | None = None) -> Iterator[Line]:
    """The file's log objects: lines of a JSON Lines file, else array elements read as a stream.

    An array, an envelope or several of them are scanned a buffer at a time: only the record being
    read is held, whatever the file's size. A record cut off by the end of the file is yielded as
    it is (its parse quarantines it); an array left open is a ``truncated`` file problem.

    A record cut short in the middle of the file (a torn write, a failed download with the next page
    appended after it) leaves the scanner out of step: its strings and brackets no longer pair, and the
    records after it would be read as part of it. So a record that is not whole JSON is searched for the
    first line inside it that starts a log object or an API page (:func:`forensics.ingest.resync.next_record`); when there is
    one, the cut record ends there and the file is read again from it, with the brackets that held the
    cut record (:class:`_Scanner`'s context).
    """
    if _json_lines(path):
        yield from read_lines(path, problems, span)
        return
    state: _Resume | None = _Resume()
    while state is not None:
        state = yield from _scan(path, problems, state)


@dataclasses.dataclass(frozen=True)
class _Resume:
    """Where a scan of an array or envelope file starts: a byte offset of the decompressed stream, the
    containers open there, the depth of the array holding records, and the records counted before."""

    offset: int = 0
    context: tuple[int, ...] = ()
    records_at: int | None = None
    count: int = 0
    failed_pages: int = 0  # API error pages met before (reported once, at the end of the file)


def _scan(path: Path, problems: list[FileProblem], start: _Resume) -> Generator[Line, None, _Resume | None]:
    """The records from ``start`` on; returns where to read again when a record cut short was found."""
    scanner = _Scanner(start.context, start.records_at, start.count, start.offset, start.failed_pages)
    try:
        with open_decompressed(path) as fh:
            head: bytes | None = b"" if start.offset == 0 else None  # the first bytes, until a BOM can be told
            skip = start.offset
            while chunk := _read_some(fh):
                if skip:
                    drop = min(skip, len(chunk))
                    chunk, skip = chunk[drop:], skip - drop
                    if not chunk:
                        continue
                if head is not None:
                    head += chunk
                    if len(head) < len(BOM):
                        continue
                    chunk, head = scanner.past_bom(head), None
                for line in scanner.feed(chunk):
                    found = _after_cut(line, scanner, ahead=lambda offset: _bytes_at(path, offset))
                    if found is None:
                        yield line
                        continue
                    yield from found[0]
                    return dataclasses.replace(found[1], failed_pages=scanner.failed_pages)
            if head:
                yield from scanner.feed(scanner.past_bom(head))
    except (EOFError, gzip.BadGzipFile, zlib.error, zstandard.ZstdError) as exc:
        yield from scanner.finish()
        what = compression_of(path) or "compressed"
        problems.append(FileProblem(scanner.count, f"{what} stream is truncated or corrupt after record {scanner.count} "
                                    f"({type(exc).__name__}: {exc}); the records before were read. Fix: copy or export the "
                                    "file again and re-ingest it",
                                    "truncated" if isinstance(exc, (EOFError, ZstdTruncatedError)) else "corrupt"))
        return None
    except OSError as exc:
        yield from scanner.finish()
        problems.append(FileProblem(scanner.count, f"file could not be read after record {scanner.count} ({exc})", "unreadable"))
        return None
    for line in scanner.finish():
        found = _after_cut(line, scanner, last=True)
        if found is not None:
            yield from found[0]
            return dataclasses.replace(found[1], failed_pages=scanner.failed_pages)
        yield line
    if scanner.failed_pages:
        pages = "an API page says" if scanner.failed_pages == 1 else f"{scanner.failed_pages} API pages say"
        problems.append(FileProblem(scanner.count, f'{pages} "success": false: an error response (a rejected token, a rate '
                                    "limit) saved in place of a page of logs, holding none of them; those logs are "
                                    "missing from the case. Fix: download the page again and ingest it", "missing"))
    if scanner.open_arrays:
        problems.append(FileProblem(scanner.count, f"the JSON array ends without its closing ']' after record {scanner.count}: "
                                    "the export was cut short. Fix: export the logs again (the records before were read)",
                                    "truncated"))
    return None


def _log_or_page(obj: Any) -> str | None:
    """``page`` for an API page (its ``result`` list), ``log`` for a log object, else None (a nested object
    of a pretty-printed log has not a log's keys)."""
    if isinstance(obj, dict) and isinstance(obj.get("result"), list):
        return "page"
    return "log" if isinstance(obj, dict) and _is_log(set(obj)) else None


#: How far past a record out of step the file is read again to find where whole records go on, when what the
#: scanner holds ends first (a chunk boundary just after it): beyond any real log (a prompt of megabytes).
LOOK_AHEAD = 32 << 20


def _bytes_at(path: Path, offset: int, size: int = LOOK_AHEAD) -> bytes:
    """Up to ``size`` bytes of the (decompressed) file from ``offset``: read again, only after a record out of step."""
    try:
        with open_decompressed(path) as fh:
            while offset > 0:
                skipped = fh.read(min(offset, CHUNK))
                if not skipped:
                    return b""
                offset -= len(skipped)
            return fh.read(size)
    except (OSError, EOFError, gzip.BadGzipFile, zlib.error, zstandard.ZstdError):
        return b""  # the scan reports what is wrong with the file


def _after_cut(line: Line, scanner: _Scanner, last: bool = False,
               ahead: Callable[[int], bytes] | None = None) -> tuple[list[Line], _Resume] | None:
    """For a record just read that is not whole JSON, or that the brackets after it show out of step: when a
    log object or page starts inside it or after it, the lines to yield (the record up to there, cut short; or
    the record, whole, and what lies between it and the next one) and where to read again; else None (the
    record as it is: a bad record between good ones).

    Looked at: a record with a string across a line break (a cut inside a string runs on to the next line),
    the file's last record (a cut between values nests the records after it inside it), and an array's record
    followed by something that is no separator (a piece torn out between two strings leaves every string
    whole but brackets missing, and a later bracket was taken for the end of the records' array)."""
    out_of_step = scanner.last_context[1] is not None and scanner.byte_after_last(len(line.raw)) not in (None, *b",]")
    if not (scanner.last_broken or last or out_of_step):
        return None
    try:
        orjson.loads(line.raw)
        whole = True
    except orjson.JSONDecodeError:
        whole = False
    if whole and not out_of_step:
        return None
    after = len(line.raw) - 1 if whole else 0  # a whole record stands: the next one is looked for after it
    window = scanner.held_from_last()
    found = next_record(window, after, _log_or_page)
    if found is None and ahead is not None and not last:
        # What the scanner holds may end before the next record does: read on from the record's start.
        window = ahead(scanner.last_offset)
        found = next_record(window, after, _log_or_page)
    if found is None:
        return None
    at, kind = found
    if at >= len(line.raw) and not window[len(line.raw):at].strip(_SPACE + b","):
        return None  # the next record starts there anyway: the scanner is in step
    context, records_at = ((), None) if kind == "page" else scanner.last_context
    if whole:
        # The record stands; what lies between it and the next (brackets out of step, no whole log) is one more
        # line, quarantined as not JSON, so that nothing read is left uncounted.
        between = window[len(line.raw):at].strip(_SPACE + b",")
        lines = [line, Line(line.number + 1, utf8_text(between), between)]
        return lines, _Resume(scanner.last_offset + at, context, records_at, line.number + 1)
    cut = window[:at].rstrip(_SPACE + b",")
    return [Line(line.number, utf8_text(cut), cut)], _Resume(scanner.last_offset + at, context, records_at, line.number)


class _Scanner:
    """Splits a stream of JSON values into log records without parsing them.

    Top-level values follow one another (whitespace between): an array's elements are records; an
    object whose key ``result`` holds an array (the API envelope) gives that array's elements, the
    rest of the envelope being dropped; any other object is a record itself. Strings are skipped
    by a regular expression, so a prompt of megabytes costs a few calls, not a loop per character.
    """

    def __init__(self, context: tuple[int, ...] = (), records_at: int | None = None, count: int = 0,
                 offset: int = 0, failed_pages: int = 0) -> None:
        self.buf = bytearray()
        self.pos = 0  # next byte to look at
        self.stack: list[int] = list(context)  # open containers: ord('[') or ord('{')
        self.records_at = records_at  # the stack depth whose array holds records
        self.offset = offset  # where buf[0] lies in the (decompressed) file
        # The last record's start in the file, and the containers that held it with the depth of its array
        # (taken when it starts: a record cut short may leave the brackets after it out of step).
        self.last_offset = offset
        self.start_context: tuple[tuple[int, ...], int | None] = ((), None)
        self.last_context: tuple[tuple[int, ...], int | None] = ((), None)
        self.last_index = 0  # where the last record starts in buf, while it is being yielded
        self.string_start = 0  # where the string being read starts in buf
        # A string of the record being read spans a line break, which JSON strings never hold: the record was
        # cut short and the scanner took its strings for structure (and the last record's, once read).
        self.broken = False
        self.last_broken = False
        self.start: int | None = None  # where the record being read began
        self.in_string = False
        self.key_start: int | None = None  # a top-level object's key being read
        self.last_key: bytes | None = None
        self.expect_key = False
        self.junk = False  # a top-level value that is not JSON: runs to the end of its line
        self.count = count
        self.value_at: int | None = None  # where a top-level ``success`` value starts in buf, while it is read
        self.said_failure = False  # the top-level object being read says ``"success": false``
        self.envelope_from: int | None = None  # the records counted when it turned out an API envelope
        self.failed_pages = failed_pages  # API envelopes with no records that say ``"success": false``

    def past_bom(self, head: bytes) -> bytes:
        """The file's first bytes without a byte order mark, the offsets moved past it."""
        text = head.removeprefix(BOM)
        self.offset += len(head) - len(text)
        return text

    def byte_after_last(self, size: int) -> int | None:
        """The first byte after the record being yielded on (``size`` bytes from its start) that is not white
        space, or None when the bytes read end first (valid only while it is yielded)."""
        buf, i = self.buf, self.last_index + size
        while i < len(buf) and buf[i] in _SPACE:
            i += 1
        return buf[i] if i < len(buf) else None

    def held_from_last(self) -> bytes:
        """The bytes held from the start of the record being yielded on (valid only while it is yielded):
        the record, and what the scanner has read after it."""
        return bytes(self.buf[self.last_index:])

    @property
    def open_arrays(self) -> bool:
        """Whether the stream ended inside an array or object."""
        return bool(self.stack)

    def _record(self, end: int) -> Iterator[Line]:
        assert self.start is not None
        raw = bytes(self.buf[self.start:end]).strip(_SPACE)
        self.last_broken, self.broken = self.broken, False
        if raw:
            lead = self.start
            while self.buf[lead] in _SPACE:
                lead += 1
            self.last_index = lead
            self.last_offset = self.offset + lead
            self.last_context = self.start_context
        self.start = None
        if raw:
            self.count += 1
            yield Line(self.count, utf8_text(raw), raw)

    def _string_end(self, buf: bytearray, n: int) -> int:
        """Where the string being read ends (its closing quote), or -1 when it goes on past ``n``.

        A quote is found with ``find`` (C speed over megabytes of prompt) and is the end unless an
        odd run of backslashes precedes it. When the bytes run out, ``pos`` stays before any
        trailing backslashes, so an escape split between reads is judged whole; a backslash run
        therefore never starts before ``pos``.
        """
        floor = p = self.pos
        while True:
            q = buf.find(b'"', p, n)
            if q < 0:
                k = n
                while k > p and buf[k - 1] == 0x5C:
                    k -= 1
                self.pos = k
                return -1
            k = q
            while k > floor and buf[k - 1] == 0x5C:
                k -= 1
            if (q - k) % 2 == 0:
                return q
            p = q + 1  # an escaped quote

    def feed(self, chunk: bytes) -> Iterator[Line]:
        """Take the next bytes; yield every record they complete."""
        self.buf += chunk
        buf = self.buf
        n = len(buf)
        while self.pos < n:
            if self.junk:
                cut = buf.find(b"\n", self.pos)
                if cut < 0 and n - (self.start or 0) < JUNK_LIMIT:
                    self.pos = n
                    break
                end = cut if cut >= 0 else n
                yield from self._record(end)
                self.junk, self.pos = False, end
                continue
            if self.in_string:
                end = self._string_end(buf, n)
                if end < 0:  # the string goes on in the next bytes
                    break
                self.in_string = False
                if buf.find(b"\n", self.string_start, end) >= 0:
                    self.broken = True  # JSON has no line break inside a string: brackets out of step
                self.pos = end + 1
                if self.key_start is not None:
                    self.last_key = bytes(buf[self.key_start:end])
                    self.key_start = None
                continue
            depth = len(self.stack)
            if depth == 0 and self.start is None:
                while self.pos < n and buf[self.pos] in _SPACE:
                    self.pos += 1
                if self.pos >= n:
                    break
                c = buf[self.pos]
                if c == 0x5B:  # [
                    self.stack.append(c)
                    self.records_at = 1
                    self.pos += 1
                elif c == 0x7B:  # {  a record, unless it turns out to be an envelope
                    self.stack.append(c)
                    self.start, self.expect_key, self.last_key = self.pos, True, None
                    self.said_failure, self.envelope_from = False, None
                    self.start_context = ((), None)
                    self.pos += 1
                else:
                    self.start, self.junk = self.pos, True
                    self.start_context = ((), None)
                continue
            if self.records_at is not None and depth == self.records_at and self.start is None:
                while self.pos < n and buf[self.pos] in _SPACE:
                    self.pos += 1
                if self.pos >= n:
                    break
                if buf[self.pos] not in b",]":
                    self.start = self.pos  # the first byte of an element, whatever it is
                    self.start_context = (tuple(self.stack), self.records_at)
            m = _STRUCTURE.search(buf, self.pos)
            if m is None:
                self.pos = n
                break
            i, c = m.start(), buf[m.start()]
            self.pos = i + 1
            if c == 0x22:  # "
                self.in_string, self.string_start = True, i + 1
                if depth == 1 and self.stack[0] == 0x7B and self.expect_key:
                    self.key_start, self.expect_key = i + 1, False
            elif c in b"[{":
                if (c == 0x5B and depth == 1 and self.stack[0] == 0x7B and self.records_at is None
                        and self.last_key == RESULT):
                    # The API envelope: its result array holds the records; the envelope is no record.
                    self.start, self.records_at = None, 2
                    self.envelope_from = self.count
                self.stack.append(c)
            elif c in b"]}":
                if depth == 1 and self.value_at is not None:
                    self._top_value_ends(i)
                if self.records_at is not None and depth == self.records_at and self.start is not None:
                    yield from self._record(i)
                if self.stack:
                    self.stack.pop()
                if depth == 1 and self.said_failure and self.envelope_from == self.count:
                    self.failed_pages += 1  # an error response in place of a page: no records, "success": false
                if self.records_at is not None and len(self.stack) < self.records_at:
                    self.records_at = None
                if not self.stack and self.start is not None:  # a bare log object ends
                    yield from self._record(i + 1)
            elif c == 0x2C:  # ,
                if depth == 1 and self.value_at is not None:
                    self._top_value_ends(i)
                if self.records_at is not None and depth == self.records_at and self.start is not None:
                    yield from self._record(i)
                if depth == 1 and self.stack[0] == 0x7B:
                    self.expect_key = True
            elif c == 0x3A and depth == 1:  # :  after a top-level key
                self.expect_key = False
                self.value_at = i + 1 if self.last_key == SUCCESS else None  # a small value: held until read
        # Keep only what a record still needs: the record being read, or the unread rest.
        keep = self.pos if self.start is None else self.start
        if self.key_start is not None:
            keep = min(keep, self.key_start)
        if self.value_at is not None:
            keep = min(keep, self.value_at)
        if keep:
            del buf[:keep]
            self.offset += keep
            self.string_start = max(0, self.string_start - keep)
            self.pos -= keep
            if self.start is not None:
                self.start -= keep
            if self.key_start is not None:
                self.key_start -= keep
            if self.value_at is not None:
                self.value_at -= keep

    def _top_value_ends(self, end: int) -> None:
        """A top-level ``success`` value ends at ``end``: note whether it is ``false`` (counted when the object it
        belongs to closes as an API envelope without records; a log object says the same of a failed call)."""
        assert self.value_at is not None
        self.said_failure = bytes(self.buf[self.value_at:end]).strip(_SPACE) == b"false"
        self.value_at = None

    def finish(self) -> Iterator[Line]:
        """The end of the stream: a record left open is yielded as read (cut short)."""
        if self.start is not None:
            yield from self._record(len(self.buf))
        self.buf.clear()
        self.pos = 0


# --- parsing one log object ---------------------------------------------------------------------


def _keys_of_head(lines: list[str]) -> set[str]:
    """Key names in the first lines of an array or envelope (for sniffing: no parse needed)."""
    return set(_KEY.findall("\n".join(lines)[:65536]))


def _is_log(keys: set[str]) -> bool:
    return {"id", "created_at"} <= keys and len(keys & SIGNS) >= 3




def _sse_events(text: str) -> Iterator[str]:
    """The data of a server-sent-events body's events (``data: ...`` lines), ``[DONE]`` left out."""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]" or not data:
            continue
        yield data


def _sse_chunks(text: str, field: str, problems: list[str]) -> tuple[list[Any], bool]:
    """The chunk objects of a server-sent-events body, and whether an event cannot be read (the
    answer is then not whole). An unreadable event before the last is noted in ``problems``; the
    last one is the stream cut short, which ``response_truncated`` says."""
    out: list[Any] = []
    events = _sse_events(text)
    for data in events:
        try:
            out.append(json_value(data))
        except orjson.JSONDecodeError:
            after = sum(1 for _ in events)
            if after:
                problems.append(f"{field} is an event stream whose event {len(out) + 1} of {len(out) + 1 + after} "
                                "is not valid JSON; the response text is unknown")
            return out, True
    return out, False


class NoMetadataTenant(NoTenant):
    """A log whose metadata names no customer under the configured key."""

    def __init__(self, log_id: str, record: int, fields: tuple[str, ...], present: list[str]) -> None:
        have = (f"its metadata has {', '.join(repr(k[:40]) for k in present[:8])}" if present else "it has no metadata")
        RecordError.__init__(
            self,
            f"no tenant: log {log_id[:80]!r} (record {record}) has none of {', '.join(fields)}; {have}",
            fix='set tenant_field (case file or --tenant-field) to the metadata key that names the customer, '
                'e.g. tenant_field = "metadata.customer"',
        )


def resolve_tenant(obj: Mapping[str, Any], tenant_field: str, log_id: str, record: int) -> tuple[str, str]:
    """The tenant id and the path that gave it.

    ``auto`` tries ``metadata.<key>`` for each of METADATA_TENANTS; a configured path is read from
    the log object, and a bare key that is no field of the log is read from its metadata.
    """
    if tenant_field in ("auto", ""):
        chain = tuple(f"metadata.{k}" for k in METADATA_TENANTS)
    elif "." in tenant_field or tenant_field in obj:
        chain = (tenant_field,)
    else:
        chain = (f"metadata.{tenant_field}",)
    for field in chain:
        value = get_path(obj, field)
        if no_tenant_value(value):
            continue
        return as_str(value, field), field
    metadata = maybe_json(obj.get("metadata"), "metadata")
    present = sorted(str(k) for k in metadata) if isinstance(metadata, Mapping) else []
    raise NoMetadataTenant(log_id, record, chain, present)


class CloudflareParser:
    """AI Gateway log objects from the REST API (JSON Lines, arrays or API envelopes)."""

    name = "cloudflare-ai-gateway"

    def sniff(self, lines: list[str], file_name: str) -> bool:
        """A log object's keys (``id``, ``created_at`` and three of SIGNS) on the first objects, or
        in the head of an array or envelope."""
        objects = first_objects(lines)
        if objects:
            if any(_is_log(set(o)) for o in objects):
                return True
            envelopes = [o["result"] for o in objects if isinstance(o.get("result"), list)]
            return any(isinstance(r, dict) and _is_log(set(r)) for e in envelopes for r in e[:5])
        head = "\n".join(lines).lstrip()
        return head[:1] in ("[", "{") and _is_log(_keys_of_head(lines))

    def parse(self, text: str, line_number: int, ctx: FileContext) -> Output:
        """One log object into an exchange row, or a quarantine reason."""
        try:
            obj = loads_object(text)
            row = self._row(obj, line_number, ctx)
        except RecordError as exc:
            return Quarantined(str(exc), no_tenant=isinstance(exc, NoTenant))
        row.update(provenance(ctx, line_number, text, "cloudflare_log"))
        return "exchanges", row

    def _row(self, obj: dict[str, Any], record: int, ctx: FileContext) -> dict[str, Any]:
        log_id = req_str(obj, "id")
        received, assumed = time_field(obj, "created_at", ctx.zone)
        if received is None:  # time_field raises for a missing required field; this keeps the type exact
            raise RecordError("missing required field 'created_at'")
        tenant, tenant_field = resolve_tenant(obj, ctx.tenant_field, log_id, record)
        problems: list[str] = []
        request, request_cut = self._side(obj, "request", problems)
        request = self._universal(request, obj, problems)
        if request is not None and not isinstance(request, Mapping):
            raise RecordError(f"request is a {type(request).__name__}, expected the chat request object")
        request = request or {}
        response, response_cut = self._side(obj, "response", problems)
        prompt, nontext, n_messages = body_prompt(request, "request", response)
        if prompt is None and not request_cut and (note := unread_prompt(request, "request")):
            problems.append(note)
        text, finish, usage, stream_cut = self._response(response, problems)
        response_cut = response_cut or stream_cut
        code = opt_int(obj.get("status_code"), "status_code", problems, 0, 999)
        duration = opt_int(obj.get("duration"), "duration", problems, 0, 10**12)
        reported = opt_count(obj.get("tokens_in"), "tokens_in", problems)
        if reported is None:
            reported = opt_count(usage.get("prompt_tokens"), "response.usage.prompt_tokens", problems)
        completion = opt_count(obj.get("tokens_out"), "tokens_out", problems)
        if completion is None:
            completion = opt_count(usage.get("completion_tokens"), "response.usage.completion_tokens", problems)
        success = obj.get("success")
        failed = (success is False or (code is not None and code >= 400)
                  or (error_body(response) and "choices" not in response))
        routed = response.get("model") if isinstance(response, Mapping) and isinstance(response.get("model"), str) else None
        # A raw event stream for an answer shows the call streamed, whatever the request body says or leaves out.
        sse = isinstance(response, str) and response.lstrip().startswith(("data:", "event:", ":"))
        stream = True if sse else stream_flag(request)
        row: dict[str, Any] = {
            "request_id": log_id,
            "tenant_id": tenant,
            "tenant_field": tenant_field,
            "user_id": self._user(obj),
            "model": opt_str(obj, "model") or (request.get("model") if isinstance(request.get("model"), str) else None),
            "model_routed": routed,
            "received_at": received,
            "completed_at": received + duration * 1000 if duration is not None else None,
            "status": "failure" if failed else "success",
            "status_code": code,
            "finish_reason": finish,
            "stream": stream if isinstance(stream, bool) else None,
            "response_text": None if response_cut else text,
            "response_truncated": response_cut,
            "reported_completion_tokens": completion,
            "completion_tokens": completion,
            "zone_assumed": ctx.zone if assumed else None,
            "problems": "; ".join(problems) or None,
        }
        row.update(prompt_fields(None if request_cut else prompt, nontext, n_messages, reported, ctx))
        if request_cut:
            # The log kept the start of the request only: the prompt is longer than anything read.
            row["prompt_truncated"] = True
        return row

    @staticmethod
    def _user(obj: Mapping[str, Any]) -> str | None:
        for field in ("metadata.user_id", "metadata.user"):
            value = get_path(obj, field)
            if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "":
                return str(value)
        return None

    @staticmethod
    def _side(obj: Mapping[str, Any], side: str, problems: list[str]) -> tuple[Any, bool]:
        """One body (``request`` or ``response``): the whole body, else the head when it is whole.

        Returns the body and whether it is cut short (then it is None and a problem is noted).
        """
        if obj.get(side) not in (None, ""):
            body, cut = json_string(obj[side], side, "log")
            if cut:
                problems.append(f"{side} is cut short (its JSON ends early); its text is unknown")
            return body, cut
        head = obj.get(f"{side}_head")
        if head in (None, ""):
            return None, False
        if obj.get(f"{side}_head_complete") is not True:
            size = opt_int(obj.get(f"{side}_size"), f"{side}_size", problems, 0)
            problems.append(f"{side}_head is only the start of the {side} body"
                            + (f" ({size} bytes in all)" if size is not None else "")
                            + f"; its text is unknown. Export the whole body with GET .../logs/{{id}}/{side}")
            return None, True
        body, cut = json_string(head, f"{side}_head", "log")
        if cut:
            problems.append(f"{side}_head is cut short (its JSON ends early); its text is unknown")
        return body, cut

    @staticmethod
    def _universal(request: Any, obj: Mapping[str, Any], problems: list[str]) -> Any:
        """A universal-endpoint request (a list of provider steps): the step this log is of."""
        if not isinstance(request, list):
            return request
        step = opt_int(obj.get("step"), "step", problems, 0, len(request) - 1 if request else 0) or 0
        if not request:
            return None
        item = request[step]
        if not isinstance(item, Mapping):
            raise RecordError(f"request[{step}] is a {type(item).__name__}, expected a universal-endpoint step object")
        return item.get("query")

    @staticmethod
    def _response(response: Any, problems: list[str]) -> tuple[str | None, str | None, dict[str, Any], bool]:
        """Text, finish reason, usage and whether a streamed body is cut short; an answer that is
        there but cannot be read is noted in ``problems``."""
        if isinstance(response, str):
            if response.lstrip().startswith(("data:", "event:", ":")):  # the raw event stream of a streamed answer
                items, cut = _sse_chunks(response, "response", problems)
                if items and not any(isinstance(i, Mapping) and ("choices" in i or "error" in i or i.get("object") == "error")
                                     for i in items):  # no chat chunk, and no chat error either
                    got = events_text(items, "response")  # the Responses API's events, or Anthropic's
                    if got is None:
                        problems.append("response is an event stream of a shape not known to hold the answer; response text unknown")
                        return None, None, {}, cut
                    return (*got, cut)
                streamed, finish, usage = chunks_text(items, "response")
                return streamed, finish, usage, cut
            return response, None, {}, False  # a provider answering in plain text
        if isinstance(response, Mapping) and "choices" not in response and "error" not in response:
            # Workers AI answers {"response": "..."}, or {"result": {"response": "..."}} over REST.
            result = response.get("result")
            inner: Mapping[str, Any] = result if isinstance(result, Mapping) else response
            answer, used = inner.get("response"), inner.get("usage")
            if isinstance(answer, str):
                return answer, None, dict(used) if isinstance(used, Mapping) else {}, False
        text, finish, usage = response_text(response, "response")
        if text is None and isinstance(response, Mapping) and response and "error" not in response:
            # Another provider's answer (Anthropic's content list, say): the answer is there, unread.
            problems.append(f"response is {json_name(response)} of a shape not known to hold the answer; "
                            "response text unknown")
        return text, finish, usage, False


_parser = CloudflareParser()
FORMAT = register(LogFormat(
    name=_parser.name,
    summary="Cloudflare AI Gateway logs from its REST API (JSON Lines, JSON arrays or API envelopes); tenant from a metadata key",
    table="exchanges",
    sniff=_parser.sniff,
    parse=_parser.parse,
    sniff_order=40,
    kinds=(RecordKind("cloudflare_log", precedence=1),),
    read=read_records,
    splittable=False,  # an array's records span lines
))
