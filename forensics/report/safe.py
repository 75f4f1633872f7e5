"""Writing report files safely: private permissions, safe names, spreadsheet-proof CSV cells.

The report folder holds customers' secrets (masked, but still sensitive) and the incident's full
evidence, so every folder is created 0700 and every file 0600. Tenant and request ids come from
logs an attacker may have shaped, so nothing taken from them reaches a file name unsanitised.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from forensics import csvfile
from forensics.case import atomic_open, atomic_path, make_private_dirs
from forensics.errors import OutputError

#: Characters kept in a folder name; everything else becomes ``_``.
_SAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
#: Longest readable prefix kept from an id (the hash suffix keeps names unique).
NAME_PREFIX_CHARS = 40
#: Cell starts that spreadsheets read as formulas (OWASP CSV injection list, plus tab/CR).


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) 0700 whatever the umask; an existing folder keeps its mode."""
    return make_private_dirs(path)


def safe_name(identifier: str) -> str:
    """A file-name-safe, collision-free folder name for an id from a log.

    A readable ASCII prefix (no separators, no leading dots, so no traversal) plus 10 hex digits of
    the SHA-256 of the exact id: two ids that sanitise to the same prefix still get different
    names, and the same id always gets the same name.
    """
    digest = hashlib.sha256(identifier.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    ascii_text = unicodedata.normalize("NFKD", identifier).encode("ascii", "ignore").decode("ascii")
    prefix = _SAFE_CHARS.sub("_", ascii_text).strip("._-")[:NAME_PREFIX_CHARS].strip("._-")
    return f"{prefix}-{digest}" if prefix else digest


def clean_text(value: str, limit: int | None = None) -> str:
    """One-line display text: control characters shown as escapes, optionally shortened.

    The escaping is the CSVs' (``csvfile.escape_controls``): an id reads the same in the summary,
    the notices and notifications.csv, and two different ids never read the same.
    """
    text = csvfile.escape_controls(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def shorten(value: str, limit: int) -> str:
    """``value`` cut to ``limit`` characters (with an ellipsis), not yet escaped for display.

    Text is shortened raw and escaped once, where it is rendered: escaping twice would double
    the backslashes of the first escape.
    """
    return value if len(value) <= limit else value[: limit - 1] + "…"


def csv_bytes(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> bytes:
    """RFC 4180 CSV (CRLF line ends, minimal quoting) with every cell neutralised (forensics.csvfile)."""
    return csvfile.csv_text(header, rows).encode("utf-8")


def write_bytes(path: Path, data: bytes) -> None:
    """Write a private (0600) file atomically."""
    with atomic_open(path, "wb") as fh:
        fh.write(data)


def write_text(path: Path, text: str) -> None:
    """Write a private (0600) UTF-8 text file atomically (``\\n`` line ends on every platform).

    A lone surrogate (a file name's byte that is not UTF-8, as a note names the file) is written as its
    escape, ``\\udce9``, as the manifests write it: no note can stop a report."""
    write_bytes(path, text.encode("utf-8", "backslashreplace"))


def new_private_dir(path: Path) -> Path:
    """Create the folder ``path``, which must not exist yet, 0700 whatever the umask; return it.

    For folders inside a report folder being built (see ``report_folder``), which no one else
    writes: an existing entry there, a link included, is an OutputError, never written through.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        raise OutputError("already exists in the report folder being built", file=path, fix=_COLLISION) from None
    os.chmod(path, 0o700)  # mkdir's mode is masked by the umask
    return path


def write_new(path: Path, data: bytes) -> None:
    """Write a private (0600) file that must not exist yet, inside a report folder being built.

    That folder is swapped into place only when complete (``report_folder``), so its files need no
    temporary file and rename each, as :func:`write_bytes` makes: the packets, two files per notified
    customer, spent most of the report stage on them (3,548 packets on the 4 GB benchmark incident).
    ``O_EXCL`` and ``O_NOFOLLOW`` refuse anything already there, a link included.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except FileExistsError:
        raise OutputError("already exists in the report folder being built", file=path, fix=_COLLISION) from None
    with open(fd, "wb") as fh:
        os.fchmod(fd, 0o600)  # the umask may have taken bits from the mode (the open file's, not a path's)
        fh.write(data)


#: What to do when a name in a report folder being built is taken: only two ids that share a folder
#: name (see :func:`safe_name`: the same readable prefix and 10 hex digits of SHA-256) can cause it.
_COLLISION = "two ids in this case map to one folder name: a bug, please report it (the previous report was kept)"


def copy_file(src: Path, dst: Path) -> None:
    """Copy a file byte for byte into a private (0600) file."""
    with atomic_path(dst) as tmp, open(src, "rb") as fin, open(tmp, "wb") as fout:
        while chunk := fin.read(1 << 20):
            fout.write(chunk)


#: Characters that are markup wherever they stand: code, emphasis, links, HTML, table cells, strikethrough.
_MD_ANYWHERE = re.compile(r"([\\`*\[\]<>|~])")
#: ``_`` is emphasis only at a word's edge (CommonMark), so snake_case names stay readable.
_MD_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
#: An entity such as ``&amp;`` would be decoded.
_MD_ENTITY = re.compile(r"&(?=#?\w+;)")
#: At the start of a paragraph these begin a heading, list, quote or rule.
_MD_LINE_START = re.compile(r"^([#+=-])|^(\d+)([.)])")
#: What GFM's autolink extension makes a link of with no markup at all: a scheme's ``://`` (GitHub
#: takes http and https, GitLab any scheme) and ``www.`` in any case; and a ``//host`` that starts no
#: scheme (linkify, as in editors' previews). A backslash escape inside each leaves plain text.
_MD_AUTOLINK = re.compile(r":(?=//)|(?<=[Ww][Ww][Ww])\.|(?<=(?<![:/])/)/")
#: An email address's ``@`` (and so ``mailto:`` and ``xmpp:`` too). GitHub's parser (cmark-gfm) finds
#: addresses in the text once joined, escapes and character references decoded, so only an element
#: between the two halves keeps them apart: ``<wbr>``, which renders as nothing.
_MD_EMAIL_AT = re.compile(r"(?<=\S)@(?=\S)")


def md_escape(value: str, limit: int | None = 200, *, paragraph: bool = False, links: bool = False) -> str:
    """Text safe inside a Markdown table cell or inline (``paragraph``: at the start of a
    paragraph), with no markup and no line breaks.

    Escaped only where Markdown would read markup, so prose keeps its parentheses and names
    their underscores; control characters are visible escapes (``clean_text``). A heading, list
    or quote can only begin a paragraph, never a table cell, so only a paragraph escapes them.
    A web or email address is kept from becoming a link a reader clicks (a hostile id; an email's
    ``@`` gets a ``<wbr>`` before it), unless ``links``: for the team's own text, whose contact
    address should stay a link.
    """
    text = clean_text(value, limit)
    text = _MD_ANYWHERE.sub(r"\\\1", text)
    text = _MD_UNDERSCORE.sub(r"\\_", text)
    text = _MD_ENTITY.sub(r"\\&", text)
    if not links:
        text = _MD_EMAIL_AT.sub("<wbr>@", _MD_AUTOLINK.sub(r"\\\g<0>", text))
    if not paragraph:
        return text
    return _MD_LINE_START.sub(lambda m: "\\" + m.group(1) if m.group(1) else m.group(2) + "\\" + m.group(3), text)


#: A line end in text the team wrote (a case file's multi-line string): LF, CRLF or a lone CR.
_LINE_END = re.compile(r"\r\n|\r|\n")


def text_lines(value: str) -> list[str]:
    """The lines of text the team wrote in the case file (``description``, ``[report]`` texts).

    Only for the team's own text, which is shown with its line breaks: text from the logs shows a
    line break as an escape (:func:`clean_text`), so that two different ids never read the same.
    """
    return _LINE_END.split(value)


def md_lines(value: str, *, inline: bool = False) -> str:
    """Text the team wrote, which may span lines, as Markdown paragraphs: each line escaped as
    :func:`md_escape` escapes a paragraph's start (a later line could otherwise begin a list or a
    heading), a line break kept as a hard break and a blank line starting a new paragraph.

    ``inline``: the text continues a sentence, so its first line starts no paragraph. Addresses
    stay links: the text is the team's own.
    """
    paragraphs: list[list[str]] = [[]]
    for line in text_lines(value.strip()):
        line = line.strip()  # surrounding blanks would read as a code block or a hard break
        if line:
            starts = not (inline and len(paragraphs) == 1 and not paragraphs[0])
            paragraphs[-1].append(md_escape(line, None, paragraph=starts, links=True))
        elif paragraphs[-1]:
            paragraphs.append([])
    # A backslash at a line's end is a hard break (CommonMark); trailing spaces would be lost to editors.
    return "\n\n".join("\\\n".join(lines) for lines in paragraphs if lines)


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of bytes."""
    return hashlib.sha256(data).hexdigest()

