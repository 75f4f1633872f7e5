"""The log formats ingest can read, each registered once with everything the pipeline asks of it.

In the manner of plaso's parser manager: a format module (one file in
``forensics/ingest/formats/``) builds a :class:`LogFormat` and passes it to :func:`register`.
Everything that used to list format names by hand reads this registry instead: sniffing,
``--format`` and ``[[inputs]] format`` validation, and the finaliser's choice of the most complete
copy of a request (each record kind's ``precedence``).

Sniffing asks every format: a file exactly one format accepts is of that format; a file two
formats accept is ambiguous (:class:`AmbiguousFormat`, naming both), unless one of them declares
itself a ``refinement`` of the other (a more specific kind of the same records). A wrong guess
would put a log through the wrong parser without a word, so the analyst is asked instead.

A duplicate format name, or a record kind another format already declares, is an error at
import time: a second format under the same name must never silently replace the first.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from forensics.errors import InputError, RegistryError
from forensics.ingest.base import FileContext, Output
from forensics.ingest.reader import FileProblem, Line, Span, read_lines

#: The case tables a format's records go to.
TABLES = ("exchanges", "engine_events")
NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")
KIND = re.compile(r"^[a-z][a-z0-9_]*$")

Sniff = Callable[[list[str], str], bool]
Parse = Callable[[str, int, FileContext], Output]
#: ``parse_raw(raw, line_number, ctx)``: a line's bytes parsed without decoding them first; None
#: when the line must take the decoded way instead (see LogFormat).
ParseRaw = Callable[[bytes, int, FileContext], "Output | NotParsed"]
Read = Callable[[Path, list[FileProblem], Span | None], Iterator[Line]]


@dataclasses.dataclass(frozen=True)
class RecordKind:
    """One kind of exchange record a format writes (``exchanges.record_kind``).

    ``precedence`` ranks the copies of one request found in several exports: the lower number is
    kept when the copies are equally complete (see forensics.ingest.finalize). A ``half`` is
    half a request (its ``request`` or ``response`` side): halves are joined by ``request_id``
    into one row whose record kind is ``joined``.
    """

    name: str
    precedence: int
    half: Literal["request", "response"] | None = None
    joined: str | None = None

    def __post_init__(self) -> None:
        if not KIND.match(self.name) or (self.joined is not None and not KIND.match(self.joined)):
            raise RegistryError(f"record kind {self.name!r} is not a lower-case identifier", fix="name it like spend_log")
        if (self.half is None) != (self.joined is None):
            raise RegistryError(f"record kind {self.name!r}: half and joined go together",
                                fix="give both (a half of a request and the kind of the joined row) or neither")


@dataclasses.dataclass(frozen=True)
class LogFormat:
    """A log format: its name, how to recognise it, how to read one record, what it writes.

    ``sniff(first_lines, file_name)`` tells whether a file is this format. Every format is asked,
    and a file more than one accepts is ambiguous unless one of them lists the others in
    ``refines`` (it reads a more specific kind of their files and wins over them); ``sniff_order``
    (then name) is the order formats are asked and candidates named in. ``parse(text, line_number, ctx)`` turns one non-blank line into
    ``(table, row)``, a ``Quarantined`` or None. ``kinds`` lists the record kinds it writes to
    ``exchanges`` (none for an engine log, whose lines go to ``engine_events``).

    A format whose records are not lines (CSV with quoted line breaks, a JSON array) gives its
    own ``read(path, problems, span)`` yielding one ``Line`` per record (its number, text and
    raw bytes: what is counted, parsed, hashed and quoted in quarantine) and sets
    ``splittable=False``: such a file is then read whole by one worker, never cut into
    line-aligned spans. A format whose ``read`` also reads Parquet files (each row given as one
    JSON object, see forensics.ingest.parquet) sets ``parquet=True``; only such a format may
    claim a Parquet file when sniffing, or be forced on one.
    """

    name: str
    summary: str
    table: Literal["exchanges", "engine_events"]
    sniff: Sniff
    parse: Parse
    sniff_order: int
    kinds: tuple[RecordKind, ...] = ()
    read: Read = read_lines
    splittable: bool = True
    parquet: bool = False
    refines: tuple[str, ...] = ()
    #: Optional, for a format read by lines (the default ``read``): parses a line that starts with
    #: ``{`` from its bytes, sparing the decode to text (a JSON parser takes UTF-8 bytes and checks
    #: them itself). It must give what ``parse`` gives on the decoded text, and return
    #: :data:`NOT_PARSED` for any line it does not settle cleanly (bytes that are not UTF-8 or not
    #: JSON, ...): that line is then decoded and given to ``parse``, so every reason stays the same.
    parse_raw: ParseRaw | None = None
    #: Its records are JSON objects, one a line (JSON Lines): a file that is a JSON array instead is not read
    #: line by line (every line quarantined, the last element alone taken), but skipped, or refused when named,
    #: with the command that converts it.
    json_lines: bool = False
    #: The zone its format documents for the times it writes with none (LiteLLM and Langfuse write UTC): they are read
    #: in it whatever the case's ``timezone``, which is for the logs whose zone-less times are local (an engine's text
    #: lines). One setting for both misread one of them: set to the engine nodes' zone, it moved the spend logs' times.
    naive_zone: str | None = None

    def __post_init__(self) -> None:
        if not NAME.match(self.name):
            raise RegistryError(f"format name {self.name!r} is not lower-case words joined by '-'",
                                fix="name the format like litellm or openai-split")
        if self.table not in TABLES:
            raise RegistryError(f"format {self.name!r}: table {self.table!r} is not one of {', '.join(TABLES)}",
                                fix="write gateway records to exchanges and engine lines to engine_events")
        if (self.table == "exchanges") != bool(self.kinds):
            raise RegistryError(f"format {self.name!r}: a format writing exchanges declares its record kinds, an engine log none",
                                fix="list the record_kind values its rows carry in kinds")
        if self.name in self.refines:
            raise RegistryError(f"format {self.name!r} lists itself in refines", fix="list the formats it is a more specific kind of")


class NotParsed:
    """What ``parse_raw`` returns for a line it leaves to ``parse`` (see :class:`LogFormat`)."""


NOT_PARSED = NotParsed()


class AmbiguousFormat(InputError):
    """More than one registered format accepts a file: the analyst must say which it is."""

    def __init__(self, candidates: list[str], file: str | Path | None = None) -> None:
        self.candidates = list(candidates)
        super().__init__(
            f"cannot tell the format of this file: it looks like {_names(self.candidates)}",
            file=file,
            fix=f"say which it is with --format {self.candidates[0]} (or format = \"{self.candidates[0]}\" in its "
                f"[[inputs]] entry), naming one of {', '.join(self.candidates)}",
        )


def _names(names: list[str]) -> str:
    """``a``, ``a or b``, ``a, b or c``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


class Registry:
    """Registered formats by name. The module-level :data:`FORMATS` is the one ingest uses."""

    def __init__(self) -> None:
        self._formats: dict[str, LogFormat] = {}

    def register(self, fmt: LogFormat) -> LogFormat:
        """Add ``fmt``; a name or record kind already registered is a :class:`RegistryError`."""
        if fmt.name in self._formats:
            raise RegistryError(f"a log format named {fmt.name!r} is already registered",
                                fix="give the new format a name of its own (format names are unique)")
        claimed = {k.name: f.name for f in self._formats.values() for k in f.kinds}
        for kind in fmt.kinds:
            if kind.name in claimed:
                raise RegistryError(f"format {fmt.name!r}: record kind {kind.name!r} is already declared by format {claimed[kind.name]!r}",
                                    fix="give the format's record kinds names of their own")
        self._formats[fmt.name] = fmt
        return fmt

    def unregister(self, name: str) -> None:
        """Remove a format (tests that register a toy format clean up with this)."""
        del self._formats[name]

    def get(self, name: str) -> LogFormat:
        """The format called ``name``; an unknown name is an :class:`InputError` listing the known ones."""
        fmt = self._formats.get(name)
        if fmt is None:
            raise InputError(f"unknown format {name!r}", fix=f"use one of {', '.join(self.names())}, or omit --format to sniff")
        return fmt

    def __contains__(self, name: object) -> bool:
        return name in self._formats

    def __iter__(self) -> Iterator[LogFormat]:
        return iter(self.in_sniff_order())

    def names(self) -> list[str]:
        """Format names, sorted (as shown in errors and help)."""
        return sorted(self._formats)

    def in_sniff_order(self) -> list[LogFormat]:
        """Formats in the order sniffing tries them."""
        return sorted(self._formats.values(), key=lambda f: (f.sniff_order, f.name))

    def candidates(self, lines: list[str], file_name: str) -> list[str]:
        """Every format that claims these first lines, in sniff order, less those a claiming
        format refines (see :attr:`LogFormat.refines`)."""
        claimed = [fmt for fmt in self.in_sniff_order() if fmt.sniff(lines, file_name)]
        refined = {name for fmt in claimed for name in fmt.refines}
        return [fmt.name for fmt in claimed if fmt.name not in refined]

    def sniff(self, lines: list[str], file_name: str) -> str | None:
        """The one format that claims these first lines, or None when none does.

        Two or more (neither refining the other) are an :class:`AmbiguousFormat` naming them.
        """
        names = self.candidates(lines, file_name)
        if len(names) > 1:
            raise AmbiguousFormat(names, file=file_name)
        return names[0] if names else None

    def kinds(self) -> list[RecordKind]:
        """Every registered record kind, by precedence then name."""
        return sorted((k for f in self._formats.values() for k in f.kinds), key=lambda k: (k.precedence, k.name))


#: The registry ingest, the case file and the CLI read; filled when forensics.ingest is imported.
#: Register formats from a module in forensics/ingest/formats/: the ingest pool's worker
#: processes import the package afresh and see only what its modules register.
FORMATS = Registry()


def register(fmt: LogFormat) -> LogFormat:
    """Register ``fmt`` in :data:`FORMATS` (a duplicate name is a :class:`RegistryError`)."""
    return FORMATS.register(fmt)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def precedence_sql(column: str = "record_kind", registry: Registry | None = None) -> str:
    """A SQL expression ranking ``column`` by the registered kinds' precedence (lower wins).

    A kind no format declares (a staged file from a format since removed) ranks after all.
    """
    kinds = (registry or FORMATS).kinds()
    last = max((k.precedence for k in kinds), default=0) + 1
    whens = " ".join(f"WHEN {_quote(k.name)} THEN {k.precedence}" for k in kinds)
    return f"CASE {column} {whens} ELSE {last} END" if whens else str(last)


def half_kinds(half: Literal["request", "response"] | None = None, registry: Registry | None = None) -> str:
    """A SQL list of the kinds that are halves of a request (of one side when ``half`` is given)."""
    names = [k.name for k in (registry or FORMATS).kinds() if k.half is not None and (half is None or k.half == half)]
    # An empty IN list is not SQL; the empty name, which no kind may have, stands for "none".
    return "(" + ", ".join(_quote(n) for n in names or [""]) + ")"


def joined_sql(column: str, registry: Registry | None = None) -> str:
    """A SQL expression giving the joined row's record kind for a half's kind in ``column``."""
    halves = [k for k in (registry or FORMATS).kinds() if k.half is not None]
    if not halves:
        return "NULL::VARCHAR"
    return "CASE " + column + " " + " ".join(f"WHEN {_quote(k.name)} THEN {_quote(k.joined or '')}" for k in halves) + " END"


def zone_for(fmt: str | None, case_zone: str) -> str:
    """The zone a file of format ``fmt`` has its zone-less times read in: the format's documented one, else the case's."""
    if fmt is None or fmt not in FORMATS.names():
        return case_zone
    return FORMATS.get(fmt).naive_zone or case_zone
