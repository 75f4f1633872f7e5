"""How long stages report progress without printing: the CLI passes a reporter in.

Library code calls ``progress.task(name, total)`` and then ``advance(n)`` on what it returns;
the CLI's reporter draws rich progress bars on stderr, tests pass nothing.
"""

from __future__ import annotations

from typing import Protocol


class Task(Protocol):
    """One unit of long work."""

    def advance(self, n: float = 1) -> None:
        """Record ``n`` more units done."""

    def close(self) -> None:
        """The work is over."""


class Reporter(Protocol):
    """Something that shows progress (the CLI's rich bars)."""

    def task(self, description: str, total: float | None = None) -> Task:
        """Start a unit of work of ``total`` units (None when unknown)."""


class _NullTask:
    def advance(self, n: float = 1) -> None:
        pass

    def close(self) -> None:
        pass


class NullReporter:
    """Reports nothing (library default)."""

    def task(self, description: str, total: float | None = None) -> Task:
        return _NullTask()


def reporter(progress: Reporter | None) -> Reporter:
    """``progress`` or a reporter that does nothing."""
    return progress if progress is not None else NullReporter()
