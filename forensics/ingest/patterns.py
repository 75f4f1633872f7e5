"""Glob patterns for inputs: ``glob.glob(pattern, recursive=True)``, except that ``**`` never follows a link
to a folder.

Python's ``**`` (before 3.13) descends into every link to a folder it meets. A link to a folder above it
(``logs/node1/up -> ..``, a loop) made the search endless, and one to a folder elsewhere read its files
as if they were under the pattern's folder. A folder walk of ingest never follows such links either;
bash's globstar, ``find`` and Python 3.13's pathlib (by default) do the same. The links met below a ``**`` are
listed, so that ingest can name each one as not followed.

Before a ``**`` part, a ``*`` part still matches a link to a folder and looks inside it
(``nodes/*/gateway.jsonl`` with ``nodes/a`` a link): one level, named by the pattern, as in a shell.
Folders the search cannot list are returned too: glob passed over them without a word, and their
logs were missing from a case that looked complete.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
import os
from collections.abc import Iterator
from pathlib import Path

from forensics.errors import InputError

RECURSIVE = "**"

#: What a folder that does not exist, or is a file, raises when listed: no match, nothing unread.
_NOT_THERE = (FileNotFoundError, NotADirectoryError)


@dataclasses.dataclass
class Expansion:
    """What a pattern matched, and what its search passed over: each said, never silently dropped."""

    matches: list[str]  # sorted, each once
    links: list[str]  # links to folders met below a ``**`` part and not followed, sorted
    unlisted: list[OSError]  # folders the search could not list (their ``filename`` names them)
    fixed: Path  # the pattern's fixed folder (:func:`split_pattern`): the matches' input root
    rest: list[str]  # the pattern's parts after it


def split_pattern(pattern: Path) -> tuple[Path, list[str]]:
    """``pattern``'s fixed folder and the parts after it. The fixed folder is every leading part without a
    wildcard, and every one that exists as written and, read as a wildcard, would match nothing else: a case
    folder named "[INC-7] leak" is that folder, not a character class (glob read it as one and the pattern
    matched nothing). A part that is both (a stray folder named ``*`` beside ``node-1``) is an error: either
    reading silently leaves files out.
    """
    fixed: list[str] = []
    parts = list(pattern.parts)
    while parts:
        part = parts[0]
        if glob.has_magic(part):
            if not os.path.lexists(os.path.join(*fixed, part)):
                break
            folder = os.path.join(*fixed) if fixed else os.curdir
            try:
                names = os.listdir(folder)
            except OSError:
                names = []
            others = sorted(n for n in fnmatch.filter(names, part) if n != part
                            and not (n.startswith(".") and not part.startswith(".")))
            if others:
                raise InputError(
                    f"the pattern's part {part!r} is both the name of an entry of {folder} and a wildcard matching "
                    f"{len(others)} other entries ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''})",
                    file=pattern, fix=f"rename that entry, or write the part as {glob.escape(part)!r} to mean it alone "
                                      "(or give the folders you mean without a wildcard)")
        fixed.append(parts.pop(0))
    return Path(*fixed), parts


def glob_matches(pattern: str | Path) -> Expansion:
    """The paths ``pattern`` matches, as ``glob.glob(pattern, recursive=True)`` gives them where no link to a
    folder lies below a ``**`` part; hidden names are matched only by a part that starts with ``.``. Its fixed
    folder is taken as written (:func:`split_pattern`).

    Below a ``**`` part, a link to a folder is neither descended into nor matched (whether a ``**``, a
    ``*`` or a plain name after it meets it): it is listed in ``links``. Folders that cannot be listed are
    listed in ``unlisted`` (glob passed over them without a word). Where glob differs only by its quirks,
    this follows the files: ``a/**`` matches ``a/`` only when ``a`` is a folder (glob gives ``nope/`` for a
    folder that does not exist).
    """
    fixed, parts = split_pattern(Path(pattern))
    search = _Search()
    start = "" if fixed == Path() else str(fixed)
    if parts and start and not os.path.isdir(start):
        return Expansion([], [], [], fixed, parts)
    found = set(search.match(start, parts, below=False)) if parts else ({start} if os.path.lexists(start) else set())
    return Expansion(sorted(found), sorted(search.links), sorted(search.unlisted, key=lambda e: str(e.filename)),
                     fixed, parts)


def _join(folder: str, name: str) -> str:
    return os.path.join(folder, name) if folder else name


def _is_dir(entry: os.DirEntry[str], follow: bool) -> bool:
    try:
        return entry.is_dir(follow_symlinks=follow)
    except OSError:
        return False


class _Search:
    """One pattern's search: what it met on the way (links not followed, folders not listed)."""

    def __init__(self) -> None:
        self.links: set[str] = set()
        self.unlisted: list[OSError] = []

    def entries(self, folder: str) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(folder or os.curdir) as it:
                return sorted(it, key=lambda e: e.name)
        except _NOT_THERE:
            return []
        except OSError as exc:
            if exc.filename is None:
                exc.filename = folder or os.curdir
            self.unlisted.append(exc)
            return []

    def match(self, folder: str, parts: list[str], below: bool) -> Iterator[str]:
        """The paths below ``folder`` that ``parts`` match (``folder`` itself when there are none);
        ``below``: a ``**`` part came before (links to folders are then not followed)."""
        if not parts:
            yield folder
            return
        part, rest = parts[0], parts[1:]
        if part == RECURSIVE:
            yield from self.recurse(folder, rest, top=True)
        elif glob.has_magic(part):
            for entry in self.entries(folder):
                if entry.name.startswith(".") and not part.startswith("."):
                    continue
                if not fnmatch.fnmatchcase(entry.name, part):
                    continue
                path = _join(folder, entry.name)
                if below and entry.is_symlink() and _is_dir(entry, follow=True):
                    self.links.add(path)
                elif not rest:
                    yield path
                elif _is_dir(entry, follow=True):
                    yield from self.match(path, rest, below)
        else:
            path = _join(folder, part)
            if below and os.path.islink(path) and os.path.isdir(path):
                self.links.add(path)
            elif not rest:
                if os.path.lexists(path):
                    yield path
            elif os.path.isdir(path):
                yield from self.match(path, rest, below)

    def recurse(self, folder: str, rest: list[str], top: bool) -> Iterator[str]:
        """``**`` then ``rest``: ``rest`` in ``folder`` and in every folder below it, never through a link to a
        folder (each one met is kept in ``links``). With no ``rest``, every entry below ``folder``, and
        ``folder/`` itself when it is where the ``**`` starts."""
        if rest:
            yield from self.match(folder, rest, below=True)
        elif folder and top:
            yield folder + os.sep
        for entry in self.entries(folder):
            if entry.name.startswith("."):
                continue
            path = _join(folder, entry.name)
            if _is_dir(entry, follow=False):
                if not rest:
                    yield path
                yield from self.recurse(path, rest, top=False)
            elif _is_dir(entry, follow=True):
                self.links.add(path)
            elif not rest:
                yield path
