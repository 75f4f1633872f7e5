"""Glob patterns for inputs: ``glob.glob(pattern, recursive=True)``, except that ``**`` never follows a link
to a folder.

Python's ``**`` (before 3.13) descends into every link to a folder it meets. A link to a folder above it
(``logs/node1/up -> ..``, a loop) made the search endless, and one to a folder elsewhere read its files
as if they were under the pattern's folder. A folder walk of ingest never follows such links either;
bash's globstar, ``find`` and Python 3.13's pathlib (by default) do the same. The links ``**`` meets are
returned, so that ingest can name each one as not followed.

A pattern without a ``**`` part is handed to :func:`glob.glob` as it is. A ``*`` part still matches a
link to a folder and looks inside it (``nodes/*/gateway.jsonl`` with ``nodes/a`` a link): one level,
named by the pattern, as in a shell.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from collections.abc import Iterator

RECURSIVE = "**"


def glob_matches(pattern: str) -> tuple[list[str], list[str]]:
    """The paths ``pattern`` matches (sorted, each once) and the links to folders its ``**`` parts met and
    did not follow (sorted). Hidden names are matched only by a part that starts with ``.``, as glob does.

    Where glob differs only by its quirks, this follows the files: ``a/**`` matches ``a/`` only when
    ``a`` is a folder (glob gives ``nope/`` for a folder that does not exist).
    """
    parts = pattern.split(os.sep)
    if RECURSIVE not in parts:
        return sorted(glob.glob(pattern, recursive=True)), []
    start = os.sep if os.path.isabs(pattern) else ""
    met: set[str] = set()
    found = set(_match(start, [p for p in parts if p], met))
    return sorted(found), sorted(met)


def _entries(folder: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder or os.curdir) as it:
            return sorted(it, key=lambda e: e.name)
    except OSError:
        return []  # as glob: a folder that cannot be listed matches nothing


def _is_dir(entry: os.DirEntry[str], follow: bool) -> bool:
    try:
        return entry.is_dir(follow_symlinks=follow)
    except OSError:
        return False


def _join(folder: str, name: str) -> str:
    return os.path.join(folder, name) if folder else name


def _match(folder: str, parts: list[str], met: set[str]) -> Iterator[str]:
    """The paths below ``folder`` that ``parts`` match (``folder`` itself when there are none)."""
    if not parts:
        yield folder
        return
    part, rest = parts[0], parts[1:]
    if part == RECURSIVE:
        yield from _recurse(folder, rest, met, top=True)
    elif glob.has_magic(part):
        for entry in _entries(folder):
            if entry.name.startswith(".") and not part.startswith("."):
                continue
            if not fnmatch.fnmatchcase(entry.name, part):
                continue
            path = _join(folder, entry.name)
            if not rest:
                yield path
            elif _is_dir(entry, follow=True):
                yield from _match(path, rest, met)
    else:
        path = _join(folder, part)
        if not rest:
            if os.path.lexists(path):
                yield path
        elif os.path.isdir(path):
            yield from _match(path, rest, met)


def _recurse(folder: str, rest: list[str], met: set[str], top: bool) -> Iterator[str]:
    """``**`` then ``rest``: ``rest`` in ``folder`` and in every folder below it, never through a link (each
    link to a folder met is added to ``met``). With no ``rest``, every entry below ``folder``, and ``folder/``
    itself when it is where the ``**`` starts."""
    if rest:
        yield from _match(folder, rest, met)
    elif folder and top:
        yield folder + os.sep
    for entry in _entries(folder):
        if entry.name.startswith("."):
            continue
        path = _join(folder, entry.name)
        if _is_dir(entry, follow=False):
            if not rest:
                yield path
            yield from _recurse(path, rest, met, top=False)
        elif _is_dir(entry, follow=True):
            met.add(path)
        elif not rest:
            yield path
