"""Reading input files line by line: compression, encodings and damaged files.

A file is read as bytes, one line at a time, so a 20 MB line costs 20 MB and no more. ``.gz`` and
``.zst`` are decompressed as a stream (told by their magic bytes, not only their suffix). What
can go wrong with a whole file (truncated stream, unreadable file) is reported as a
:class:`FileProblem` after the lines that could be read, so nothing already read is lost.
"""

from __future__ import annotations

import dataclasses
import errno
import gzip
import hashlib
import io
import os
import re
import stat
import zlib
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import xxhash
import zstandard

from forensics.case import sha256_of

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BOM = b"\xef\xbb\xbf"
CHUNK = 1 << 20
#: The read buffer of an input file read line by line, not the file system's block (4 KB here): a log line is
#: often longer, and reading one then took several reads and a join (a 64 MB span of LiteLLM records:
#: 0.061 -> 0.020 s). A look at a file's first bytes keeps the small default, or it would read a megabyte.
LINE_BUFFER = 1 << 20


@dataclasses.dataclass
class Line:
    """One physical line: its 1-based number and its text (None when it is not valid UTF-8)."""

    number: int
    text: str | None
    raw: bytes
    # The line ran on past the bytes hashed (a live log's last line, half written when the file was
    # hashed): ``raw`` is what was hashed of it, not a whole record.
    cut: bool = False
    # The line's own ending as written (LF, CRLF or CR; empty for a last line without one): a record that
    # spans lines (a quoted CSV field) joins its lines with these, so the field keeps the customer's bytes.
    end: bytes = b"\n"
    # What the reader changed on the way to the record's text, for the row's ``problems`` (a Parquet NaN made null).
    notes: tuple[str, ...] = ()


#: What went wrong with a file as a whole (``FileProblem.kind``):
#: ``truncated``: a compressed stream ends early. What was read before is exactly what was written
#: (gzip and zstd decode front to back), only the rest is missing.
#: ``corrupt``: a compressed stream is damaged (bad data, checksum mismatch): garbage may have been
#: decoded before the damage was noticed, so no line of the file is beyond doubt; or a file's bytes
#: changed between its hash and its reading (:class:`Span` digest).
#: ``unreadable``: the operating system could not read on (an I/O error): like ``truncated``.
#: ``missing``: a part of the file that should hold logs holds none (an API error response saved in place of a
#: page): the logs it stands for are missing, and nothing that was read is in doubt.
PROBLEM_KINDS = ("truncated", "corrupt", "unreadable", "missing")


@dataclasses.dataclass
class FileProblem:
    """A problem with the file as a whole, found after ``after_line`` lines were read."""

    after_line: int
    reason: str
    kind: str = "corrupt"  # one of PROBLEM_KINDS


class NotRegularFile(OSError):
    """The path is not (or is no longer) a regular file: a FIFO, socket, device or folder."""


def open_regular(path: Path, buffering: int = -1) -> BinaryIO:
    """Open a regular file for reading, refusing anything else without waiting on it.

    The folder walk already skips FIFOs and devices; this closes the gap of an entry replaced
    after it was examined. Opening a FIFO for reading blocks until a writer comes, unless
    O_NONBLOCK is given; on a regular file O_NONBLOCK changes nothing.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        return os.fdopen(fd, "rb", buffering=buffering)
    except BaseException:
        os.close(fd)
        raise


def sha256_file(path: Path, limit: int | None = None) -> str:
    """SHA-256 of a file's bytes as stored (compressed files are hashed compressed); of its first ``limit``
    bytes when given (fewer when the file is shorter)."""
    with open_regular(path) as fh:
        return sha256_of(fh, limit)


def compression_of(path: Path) -> str | None:
    """``gzip``, ``zstd`` or None, told by the file's first bytes."""
    with open_regular(path) as fh:
        head = fh.read(4)
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    return None


class ZstdTruncatedError(zstandard.ZstdError):
    """The input ended inside a zstd frame: the file is cut short."""


class _ZstdRaw(io.RawIOBase):
    """A zstd stream over several frames that, unlike zstandard's stream_reader, notices when
    the input ends inside a frame (a truncated file) and raises instead of ending quietly."""

    def __init__(self, raw: BinaryIO) -> None:
        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._pending = b""
        self._offset = 0
        self._in_frame = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while self._offset >= len(self._pending):
            self._pending, self._offset = b"", 0
            chunk = self._raw.read(CHUNK)
            if not chunk:
                if self._in_frame:
                    raise ZstdTruncatedError("input ended inside a zstd frame")
                return 0
            while chunk:
                self._in_frame = True
                self._pending += self._obj.decompress(chunk)
                if self._obj.eof:
                    self._in_frame = False
                    chunk = self._obj.unused_data
                    self._obj = self._dctx.decompressobj()
                else:
                    chunk = b""
        n = min(len(buffer), len(self._pending) - self._offset)
        buffer[:n] = memoryview(self._pending)[self._offset:self._offset + n]
        self._offset += n
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


class _GzipReader(gzip.GzipFile):
    """A gzip reader that closes the file under it: GzipFile leaves a file object it was given open."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw)
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def _open(path: Path, buffering: int = -1) -> BinaryIO:
    kind = compression_of(path)
    raw = open_regular(path, buffering)  # closed by the caller through the wrapper
    if kind == "gzip":
        return _GzipReader(raw)  # type: ignore[return-value]
    if kind == "zstd":
        return io.BufferedReader(_ZstdRaw(raw), buffer_size=CHUNK)
    return raw


def utf8_text(raw: bytes) -> str | None:
    """A line's or record's text, or None when its bytes are not UTF-8 (the caller quarantines it as such)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def without_bom(line: Line) -> Line:
    """``line`` without a byte order mark at its start, when it starts a record: logs appended one after another
    (``cat a.jsonl b.jsonl``, exports that each begin with the mark) put a log's first bytes at a later line's
    start, where the mark made a valid record invalid JSON or hid a CSV header. No record begins with one."""
    if line.raw.startswith(BOM):
        line.raw = line.raw[len(BOM):]
        if line.text is not None and line.text.startswith("\ufeff"):
            line.text = line.text[1:]
    return line


NEWLINE = re.compile(rb"\r\n|\r|\n")


def cr_line_endings(path: Path) -> bool:
    """Whether the file's first line ends with a bare CR (classic Mac OS line endings).

    Such a file is read with CR, CRLF and LF all ending a line. Any other file is read by LF (a
    CR before it is dropped), because a CR inside a JSON line is whitespace, not a line end.
    """
    try:
        with _open(path) as fh:
            last = b""
            while chunk := fh.read(CHUNK):
                data = last + chunk
                m = NEWLINE.search(data)
                if m is None:
                    last = data[-1:]
                    continue
                if m.group() == b"\r" and m.end() == len(data):
                    last = data[-1:]  # a CR at the end of a chunk: an LF may follow in the next
                    continue
                return m.group() == b"\r"
            return last == b"\r"
    except (OSError, EOFError, zlib.error, zstandard.ZstdError):
        return False  # read_lines reports what is wrong with the file


def _universal_lines(fh: BinaryIO) -> Iterator[bytes]:
    """Lines ended by CR, CRLF or LF (each with its ending, as a file's lines come), read a chunk at a time."""
    pending = bytearray()
    while chunk := fh.read(CHUNK):
        # Only the new bytes (and a CR left at the end of the last chunk) can hold a line end.
        scan = max(0, len(pending) - 1)
        pending += chunk
        start = 0
        for m in NEWLINE.finditer(pending, scan):
            if m.group() == b"\r" and m.end() == len(pending):
                break  # maybe the first half of a CRLF split between chunks
            yield bytes(pending[start:m.end()])
            start = m.end()
        del pending[:start]
    if pending:  # the last line, maybe ended by a final CR
        yield bytes(pending)


@dataclasses.dataclass(frozen=True)
class Span:
    """A byte range of an uncompressed file that starts at a line start, and that line's number."""

    start: int
    end: int | None  # None: to the end of the file
    first_line: int
    # xxh3-64 of the span's bytes as they were hashed (None: not taken): checked as the span is read,
    # so a file rewritten or replaced since it was hashed is known, not parsed under the old SHA-256.
    digest: int | None = None


def count_lf(chunk: bytes) -> int:
    """The LF bytes in ``chunk``, counted by numpy, which lets go of the GIL (``bytes.count`` holds it):
    the threads that hash several files side by side then count their lines side by side too."""
    return int(np.count_nonzero(np.frombuffer(chunk, np.uint8) == 10))


def scan_file(path: Path, split_bytes: int) -> tuple[str, list[Span]]:
    """SHA-256 of the file and, for an uncompressed file, line-aligned spans of ~``split_bytes``.

    One pass over the bytes: the spans let several processes parse one big file side by side
    while line numbers stay those of the whole file. An uncompressed file's last span ends where
    the hashing did, so that what is parsed is what the SHA-256 covers, however a live log grows.
    """
    h = hashlib.sha256()
    # Spans are cut at LFs: a compressed file, or one whose lines end with CR, is read whole.
    compressed = compression_of(path) is not None or cr_line_endings(path)
    spans: list[Span] = []
    start, first_line, lines_before, pos = 0, 1, 0, 0
    span_hash = xxhash.xxh3_64()
    with open_regular(path) as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
            fed = 0  # bytes of this chunk in the span digests so far
            while not compressed and pos + len(chunk) - start >= split_bytes:
                cut = chunk.find(b"\n", max(0, start + split_bytes - pos))
                if cut < 0:
                    break
                end = pos + cut + 1
                span_hash.update(chunk[fed:cut + 1])
                fed = cut + 1
                spans.append(Span(start, end, first_line, span_hash.intdigest()))
                span_hash = xxhash.xxh3_64()
                first_line = lines_before + chunk.count(b"\n", 0, cut + 1) + 1
                start = end
            if not compressed:
                span_hash.update(chunk[fed:])
            lines_before += count_lf(chunk)
            pos += len(chunk)
    spans.append(Span(start, None, first_line) if compressed else Span(start, pos, first_line, span_hash.intdigest()))
    return h.hexdigest(), spans


def read_lines(path: Path, problems: list[FileProblem], span: Span | None = None, max_line: int | None = None,
               decode: bool = True) -> Iterator[Line]:
    """Yield the file's lines (without line endings); append whole-file problems to ``problems``.

    A UTF-8 BOM on the first line is dropped; LF, CRLF and (in a file whose first line ends so)
    bare CR endings are accepted. A line that is not valid UTF-8 is yielded with ``text=None`` so
    the caller can quarantine it. ``span`` limits reading to a byte range of an uncompressed file
    (see :func:`scan_file`). ``max_line`` (for peeking only) reads at most that many bytes of a
    line ending in LF at a time: the rest of a longer line comes as the next line. With
    ``decode=False`` every line comes undecoded (``text=None``): the caller decodes the lines it
    needs as text, and tells those that are not UTF-8 itself.
    """
    number = 0
    kind: str | None = None
    try:
        # Inside the try: a file removed (or made unreadable) since it was hashed is an unreadable file.
        kind = compression_of(path)
        cr = cr_line_endings(path)
        with _open(path, LINE_BUFFER) as fh:
            lines: Iterator[bytes] = _universal_lines(fh) if cr else (fh if max_line is None else iter(partial(fh.readline, max_line), b""))
            check = None
            if span is not None and (span.start or span.end is not None):
                fh.seek(span.start)
                number = span.first_line - 1
                lines = _bounded(fh, span.end)
                check = xxhash.xxh3_64() if span.digest is not None and span.end is not None else None
            for raw in lines:
                number += 1
                cut = type(raw) is _Cut
                if check is not None:
                    check.update(raw)
                if number == 1 and raw.startswith(BOM):
                    raw = raw[len(BOM):]
                whole = raw
                if raw.endswith(b"\n"):
                    raw = raw[:-1]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                end = whole[len(raw):]
                text: str | None = None
                if decode:
                    try:
                        text = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        pass
                yield Line(number, text, raw, cut, end)
            if check is not None and span is not None and span.end is not None and check.intdigest() != span.digest:
                problems.append(FileProblem(
                    number, f"the file changed while it was read: its bytes {span.start:,}-{span.end:,} are not those "
                    "its SHA-256 was taken of (rewritten, replaced or cut short since), so no row read from it is "
                    "beyond doubt. Fix: copy the logs where nothing writes to them and ingest the copy", "corrupt"))
    except (EOFError, gzip.BadGzipFile, zlib.error, zstandard.ZstdError) as exc:
        what = {"gzip": "gzip", "zstd": "zstd"}.get(kind or "", "compressed")
        problems.append(
            FileProblem(
                number,
                f"{what} stream is truncated or corrupt after line {number} ({type(exc).__name__}: {exc}); "
                f"the lines before were read. Fix: copy or export the file again and re-ingest it",
                "truncated" if isinstance(exc, (EOFError, ZstdTruncatedError)) else "corrupt",
            )
        )
    except OSError as exc:
        problems.append(FileProblem(number, f"file could not be read after line {number} ({exc})", "unreadable"))


class _Cut(bytes):
    """A line :func:`_bounded` cut where the span ended."""


def _bounded(fh: BinaryIO, end: int | None) -> Iterator[bytes]:
    pos = fh.tell()
    for raw in fh:
        if end is not None and pos >= end:
            return
        if end is not None and pos + len(raw) > end:
            yield _Cut(raw[: end - pos])  # a last line half written when hashed: what was hashed of it, not what came after
            return
        pos += len(raw)
        yield raw


#: The most of one line sniffing reads: a first line of gigabytes (a JSON array written on one
#: line) is judged by its start, never held whole; a JSON Lines record up to this size is whole.
PEEK_LINE_BYTES = 64 << 20


def peek_lines(path: Path, limit: int = 20, max_bytes: int = 8 << 20) -> list[str]:
    """Up to ``limit`` non-blank decodable lines from the start of a file, for format sniffing.

    A line longer than PEEK_LINE_BYTES is given cut (its start, the last line given).
    """
    lines: list[str] = []
    seen = 0
    problems: list[FileProblem] = []
    for line in read_lines(path, problems, max_line=PEEK_LINE_BYTES):
        seen += len(line.raw)
        cut = len(line.raw) >= PEEK_LINE_BYTES - 1  # its line end was not reached (or only its CR)
        # A cut may split a character: the start of the line is still the start.
        text = line.raw.decode("utf-8", errors="ignore") if cut else line.text
        if text is not None and text.strip():
            lines.append(text)
        if cut or len(lines) >= limit or seen > max_bytes:
            break
    return lines


def head_damage(path: Path) -> str | None:
    """Why no line could be read from the start of a compressed file (a stream cut or corrupt before its
    first line ends), or None: what to tell where its format could not be told from its first lines."""
    problems: list[FileProblem] = []
    for line in read_lines(path, problems, max_line=PEEK_LINE_BYTES):
        if line.raw.strip():
            return None
    if not problems:
        return None
    # The reader's reason speaks of lines read before the damage and carries its own fix: here none was read.
    reason = problems[0].reason.split(". Fix: ")[0].replace("; the lines before were read", "")
    return reason.replace(" after line 0 ", " before its first line ")


#: Fewest zero bytes in a file's first 4 KiB that can make it UTF-16/32 without a byte order mark.
MIN_ENCODING_ZEROS = 16


def head_bytes(path: Path, size: int = 4096) -> bytes:
    """The first ``size`` bytes of the file once decompressed (none when they cannot be read)."""
    try:
        with _open(path) as fh:
            return bytes(fh.read(size))
    except (OSError, EOFError, zlib.error, zstandard.ZstdError):
        return b""


def archive_of(head: bytes) -> str | None:
    """``tar`` or ``zip`` when a file whose first bytes (decompressed) are ``head`` is such an archive, else None: its
    members are files of their own, which a log reader would read as lines of header bytes and text run together."""
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08")):
        return "zip"
    if head[257:262] == b"ustar":  # POSIX and GNU tar headers
        return "tar"
    return None


def foreign_encoding(path: Path, head: bytes | None = None) -> str | None:
    """The name of a non-UTF-8 text encoding the file's first bytes betray (UTF-16/32), or None. ``head``: those
    bytes (:func:`head_bytes`), when already read."""
    head = head_bytes(path) if head is None else head
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "UTF-32"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16"
    # Without a byte order mark: UTF-8 text holds no zero byte. UTF-16 has one beside each ASCII character,
    # always on the same side of its pair (a tenth of the bytes or more even in Cyrillic or CJK text, whose
    # JSON stays ASCII); UTF-32 has one in the same place of every four. A long run of zero bytes (what a
    # crash or logrotate's copytruncate leaves) has them on both sides and is a broken line, not an encoding;
    # so is binary data, whose zero bytes fall anywhere.
    runs = [len(r) for r in re.findall(rb"\x00+", head)]
    zeros = sum(runs)
    # A few zero bytes tell nothing (a NUL in a short UTF-8 line of "{\x00" sits on one side by chance):
    # UTF-16 of one short JSON line already has more.
    if zeros < MIN_ENCODING_ZEROS or zeros < len(head) // 16 or sum(n for n in runs if n >= 4) * 2 > zeros:
        return None
    quads = [head[i::4].count(0) for i in range(4)]
    n4 = len(head) // 4
    # UTF-32's two high bytes are zero for every character of the common planes: two places side by side.
    if n4 and (min(quads[2], quads[3]) >= 0.95 * n4 or min(quads[0], quads[1]) >= 0.95 * n4):
        return "UTF-32"
    pairs = (quads[0] + quads[2], quads[1] + quads[3])
    return "UTF-16" if max(pairs) >= 0.9 * zeros else None
