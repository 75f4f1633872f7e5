"""The toolkit's errors: every failure a user can cause is one of these.

Each error carries what went wrong, where (file and line when there is one) and how to fix it,
so the CLI can print one clear line and exit 2 instead of a traceback. The helpers at the end word
the values those messages (and the notes and warnings of the stages) name.
"""

from __future__ import annotations

import json
from pathlib import Path


class ForensicsError(Exception):
    """A failure the user can act on: a message, an optional location and a fix."""

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        line: int | None = None,
        fix: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line
        self.fix = fix

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file if self.line is None else f"{self.file}:{self.line}"
            where += ": "
        fix = f" Fix: {self.fix}" if self.fix else ""
        return f"{where}{self.message}.{fix}" if not self.message.endswith(".") else f"{where}{self.message}{fix}"


class ConfigError(ForensicsError):
    """A case file or option is missing, unknown or inconsistent."""


class InputError(ForensicsError):
    """An input file cannot be read at all (not a single bad record: those are quarantined)."""


class CaseError(ForensicsError):
    """A case folder is missing a stage's output or is inconsistent."""


class QueryError(ForensicsError):
    """A query file is malformed, or a query failed."""


class ProbeError(ForensicsError):
    """An endpoint cannot be probed: bad options, budget too small, unreachable or unusable."""


class OutputError(ForensicsError):
    """A folder the tool must write is unsafe (a symbolic link, a file, foreign content) or locked."""


class LockError(OutputError):
    """Another run is writing the same case or report folder."""


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: the run unwinds (workers killed, temporary folders removed).

    Not an Exception, so no ``except Exception`` on the way swallows it; not a KeyboardInterrupt,
    so click does not turn it into its own "Aborted!".
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class RegistryError(ForensicsError):
    """A log format plug-in is declared wrongly: a duplicate name, or a record kind two formats claim."""


class MissingExtraError(ForensicsError, ImportError):
    """An optional part of the toolkit is used without the extra that installs its dependencies.

    Also an ImportError, so code that treats the part as optional (``pytest.importorskip``,
    ``try: import ... except ImportError``) keeps working.
    """


def json_name(value: object) -> str:
    """What a JSON value is, in words, for an error message ("an object", "an array", "null", ...)."""
    return {dict: "an object", list: "an array", str: "a string", bool: "true/false", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def safe_id(value: str | None) -> str:
    """An id as a note shows it: quoted, control characters escaped, cut to 60 characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


def shown_ids(ids: list[str]) -> str:
    """The first few of ``ids`` for a note, each quoted and escaped (:func:`safe_id`)."""
    return first_few([safe_id(r) for r in ids])


def first_few(names: list[str], n: int = 5) -> str:
    """The first ``n`` of ``names`` for a note, with ", ..." when there are more."""
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")
