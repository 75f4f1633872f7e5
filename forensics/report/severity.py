"""Severity of leaked text: which classes of secret or personal data a span holds, offline.

Credentials are recognised by their provider prefixes and shapes (patterns kept as data in
``patterns/severity.toml`` so the team can add its own); numbers are only counted when their
checksum holds (Luhn for cards, ISO 7064 mod 97 for IBANs, the national rules for ids), using
python-stdnum; phone numbers come from the phonenumbers library (libphonenumber's metadata).
A look-alike that fails its checksum is not a finding: an order number is not a card.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re
import tomllib
from collections.abc import Callable
from importlib import resources
from typing import Any

import phonenumbers
from stdnum import iban as _iban
from stdnum import luhn as _luhn
from stdnum.br import cpf as _br_cpf
from stdnum.es import dni as _es_dni
from stdnum.in_ import aadhaar as _aadhaar
from stdnum.it import codicefiscale as _it_cf
from stdnum.us import ssn as _us_ssn

from forensics.errors import ConfigError

NONE = "none"
#: Credential kinds a person chose (no hash of them is shown: see Hit.shown_sha256).
GUESSABLE_KINDS = frozenset({"password_assignment"})
#: Phone-number-shaped runs (7-15 digits with the usual separators), checked by libphonenumber.
_PHONE_CANDIDATE = re.compile(r"(?<![\w+.-])(?:\+|\(\+?)?\d[\d ().-]{5,18}\d(?![\w.-]|-\d)")
#: Region assumed for phone numbers written without a country code.
PHONE_REGION = "US"


#: Every Unicode space separator read as one ASCII space (a character for a character, so every offset stays): a
#: card number written with no-break or thin spaces is the same number. Not a tab: four numbers in the columns of
#: a table are no card.
#: (Unicode's category Zs, written out: no scan of the code points at import.)
_SPACES = dict.fromkeys([0x00A0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000], " ")


def _digits(value: str) -> str:
    return re.sub(r"[^0-9A-Za-z]", "", value)


VALIDATORS: dict[str, Callable[[str], bool]] = {
    "luhn": lambda v: 13 <= len(_digits(v)) <= 19 and _luhn.is_valid(_digits(v)),
    "iban": lambda v: _iban.is_valid(_digits(v)),
    "us_ssn": lambda v: _us_ssn.is_valid(v),
    "in_aadhaar": lambda v: _aadhaar.is_valid(_digits(v)),
    "es_dni": lambda v: _es_dni.is_valid(_digits(v)),
    "br_cpf": lambda v: _br_cpf.is_valid(_digits(v)),
    "it_codice_fiscale": lambda v: _it_cf.is_valid(v),
}


@dataclasses.dataclass(frozen=True)
class Pattern:
    """One severity pattern of the data file."""

    cls: str
    kind: str
    regex: re.Pattern[str]
    validator: str | None


@dataclasses.dataclass(frozen=True)
class Hit:
    """One secret or personal datum found in a text: where, what, and how it may be shown."""

    start: int
    end: int
    cls: str
    kind: str
    value: str

    @property
    def sha256(self) -> str:
        """SHA-256 of the exact value (lets the owner confirm which secret without showing it)."""
        return hashlib.sha256(self.value.encode("utf-8", "surrogatepass")).hexdigest()

    @property
    def shown_sha256(self) -> str | None:
        """The SHA-256 a packet shows: only of a machine-made credential (a key, a token, a private key), whose
        value no one can find again from its hash. A card, account, id or phone number has too few possible values
        beside the digits its mask shows (a card's middle six: a million guesses, under a second), and a password
        falls to a dictionary: their hash would undo their mask, so it is not shown."""
        return self.sha256 if self.cls == "credential" and self.kind not in GUESSABLE_KINDS else None

    @property
    def masked(self) -> str:
        """A preview that identifies the value to its owner without disclosing it."""
        return mask(self.value, self.cls)

    def to_json(self) -> dict[str, Any]:
        """The hit as packets show it: never the value itself."""
        return {"class": self.cls, "kind": self.kind, "start": self.start, "end": self.end,
                "sha256": self.shown_sha256, "masked": self.masked}


@dataclasses.dataclass(frozen=True)
class Classifier:
    """Finds severity hits in text with the patterns of a data file."""

    classes: tuple[str, ...]
    patterns: tuple[Pattern, ...]

    def rank(self, cls: str) -> int:
        """0 for the most severe class; ``len(classes)`` for ``none``."""
        return self.classes.index(cls) if cls in self.classes else len(self.classes)

    def highest(self, classes: list[str]) -> str:
        """The most severe of ``classes`` (``none`` when empty)."""
        return min(classes, key=self.rank, default=NONE)

    def find(self, text: str) -> list[Hit]:
        """Every hit in ``text``, sorted by position; overlapping hits keep the most severe."""
        hits: list[Hit] = []
        spaced = text.translate(_SPACES)  # matched; each hit's value is the original text
        for pat in self.patterns:
            for m in pat.regex.finditer(spaced):
                group = "value" if "value" in pat.regex.groupindex else 0
                start, end = m.span(group)
                if pat.validator is not None:
                    valid = _first_valid(m.group(group), VALIDATORS[pat.validator])
                    if valid is None:
                        continue
                    end = start + len(valid)
                hits.append(Hit(start, end, pat.cls, pat.kind, text[start:end]))
        if "phone" in self.classes:
            # libphonenumber's own matcher is slow on digit-heavy text; a cheap regex finds the
            # candidates and libphonenumber decides which are real, valid numbers.
            for m in _PHONE_CANDIDATE.finditer(spaced):
                try:
                    number = phonenumbers.parse(m.group(0), PHONE_REGION)
                except phonenumbers.NumberParseException:
                    continue
                if phonenumbers.is_valid_number(number):
                    hits.append(Hit(m.start(), m.end(), "phone", "phone_number", text[m.start():m.end()]))
        # Most severe first, then longest, then earliest: a card number is not also a phone.
        hits.sort(key=lambda h: (self.rank(h.cls), -(h.end - h.start), h.start, h.kind))
        kept: list[Hit] = []
        for h in hits:
            if all(h.end <= k.start or h.start >= k.end for k in kept):
                kept.append(h)
        return sorted(kept, key=lambda h: (h.start, h.end, h.kind))

    def classify(self, text: str) -> str:
        """The most severe class found in ``text`` (``none`` when nothing is)."""
        return self.highest([h.cls for h in self.find(text)])


def _first_valid(value: str, check: Callable[[str], bool]) -> str | None:
    """``value`` or its longest prefix ending before a separator that passes ``check``.

    Regexes for spaced numbers are greedy (``4111 1111 1111 1111 2024`` runs on into the next
    number); trying prefixes at separator boundaries recovers the real one.
    """
    candidates = [value] + [value[:i] for i in range(len(value) - 1, 0, -1) if value[i] in " -"]
    for cand in candidates:
        cand = cand.rstrip(" -")
        if cand and check(cand):
            return cand
    return None


def mask(value: str, cls: str) -> str:
    """Mask a value: keep a short head (a provider prefix) and tail, star the middle."""
    n = len(value)
    if cls in ("payment_card", "iban", "national_id", "phone"):
        # Numbers: only the last four characters, separators kept so the shape is recognisable.
        seen = 0
        out = []
        for ch in reversed(value):
            if ch.isalnum():
                seen += 1
                out.append(ch if seen <= 4 else "*")
            else:
                out.append(ch)
        return "".join(reversed(out))
    if cls == "email" and "@" in value:
        local, _, domain = value.partition("@")
        return (local[:1] + "***@" + domain) if local else "***@" + domain
    if n <= 8:
        return "*" * n
    head = min(len(value) // 4, 8)
    m = re.match(r"[A-Za-z]+[-_]", value)  # keep a provider prefix such as sk- or ghp_
    if m and len(m.group(0)) <= 12:
        head = max(head, len(m.group(0)))
    tail = 4 if n >= 20 else 2
    # At most 16 stars: a 100-character key needs no 90-star preview to be recognised.
    return value[:head] + "*" * min(n - head - tail, 16) + value[n - tail:]


def load_patterns(text: str, origin: str = "patterns") -> Classifier:
    """Build a classifier from a patterns TOML text (see ``patterns/severity.toml``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"severity patterns are not valid TOML ({exc})", file=origin, fix="correct the TOML syntax") from None
    classes = tuple(data.get("classes", ()))
    pats = []
    for i, item in enumerate(data.get("pattern", [])):
        cls, kind, regex = item.get("class"), item.get("kind"), item.get("regex")
        if cls not in classes or not kind or not isinstance(regex, str):
            raise ConfigError(f"pattern {i} needs a class of {list(classes)}, a kind and a regex", file=origin,
                              fix='[[pattern]]\nclass = "credential"\nkind = "..."\nregex = \'...\'')
        validator = item.get("validator")
        if validator is not None and validator not in VALIDATORS:
            raise ConfigError(f"pattern {kind!r} names unknown validator {validator!r}", file=origin,
                              fix=f"use one of {', '.join(sorted(VALIDATORS))}")
        flags = re.IGNORECASE if "i" in item.get("flags", "") else 0
        try:
            compiled = re.compile(regex, flags)
        except re.error as exc:
            raise ConfigError(f"pattern {kind!r} is not a valid regex ({exc})", file=origin, fix="correct the regex") from None
        pats.append(Pattern(cls, kind, compiled, validator))
    return Classifier(classes, tuple(pats))


def patterns_text() -> str:
    """The shipped patterns file's text (hashed into the manifest)."""
    return resources.files("forensics.report").joinpath("patterns/severity.toml").read_text(encoding="utf-8")


@functools.cache
def default_classifier() -> Classifier:
    """The classifier of the shipped patterns file."""
    return load_patterns(patterns_text(), "forensics/report/patterns/severity.toml")
