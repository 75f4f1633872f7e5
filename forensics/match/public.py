"""Public constants: strings every model has read, left out of the responses searched.

A suspect's answer holding the AWS documentation's example key, jwt.io's example token or the SHA-256 of
nothing, and one or two customers who pasted the same string, named those customers: the string's pieces
weigh like rare words (see the matcher's tokens), and a string held by so few customers is no proof, within
the case, that it is public. A model writes these from memory. So before the responses searched (suspects
and controls alike) are tokenized, each such constant in them is replaced by spaces of its length: it makes
no k-gram, weighs nothing, and every offset into the response stays as it was. The list is short and only
holds strings published as examples or as the result of hashing nothing; a customer's own key is never on it.
``match.json`` records how many were left out (``searched.public_constants_masked``) and the list's SHA-256
(``versions.public_constants``).
"""

from __future__ import annotations

import functools
import hashlib
import re

#: Each entry: a constant as published. Digits-only entries also match with a space or hyphen between any two
#: digits (a card number as printed); every entry matches in any letter case (the matcher folds case).
PUBLIC_CONSTANTS: tuple[str, ...] = (
    # AWS documentation's example credentials
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "AKIAI44QH8DHBEXAMPLE",
    "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY",
    # JSON Web Tokens: the HS256 and RS256 headers, jwt.io's example payload and signature
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9",
    "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ",
    "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    # hashes of the empty input: MD5, SHA-1, SHA-256, SHA-512
    "d41d8cd98f00b204e9800998ecf8427e",
    "da39a3ee5e6b4b0d3255bfef95601890afd80709",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
    # Stripe's documentation test keys and test cards
    "sk_test_4eC39HqLyjWDarjtT1zdp7dc",
    "pk_test_TYooMQauvdEDq54NiTphI7jx",
    "sk_test_BQokikJOvBiI2HlWgH4olfQ2",
    "4242424242424242",
    "4111111111111111",
    "5555555555554444",
    "378282246310005",
    # the nil UUID and the example UUID of RFC 4122's readers (Wikipedia, most tutorials)
    "00000000-0000-0000-0000-000000000000",
    "123e4567-e89b-12d3-a456-426614174000",
)


def _entry_pattern(entry: str) -> str:
    if entry.isdigit():
        return "[ -]?".join(re.escape(ch) for ch in entry)
    return re.escape(entry)


@functools.cache
def _pattern() -> re.Pattern[str]:
    # Longest first, so a constant holding another is taken whole; never inside a longer run of letters and digits.
    entries = sorted(PUBLIC_CONSTANTS, key=len, reverse=True)
    return re.compile(r"(?<![A-Za-z0-9_])(?:" + "|".join(_entry_pattern(e) for e in entries) + r")(?![A-Za-z0-9_])",
                      re.IGNORECASE)


def constants_sha256() -> str:
    """SHA-256 of the list (one entry a line), recorded with the match stage's versions."""
    return hashlib.sha256("".join(e + "\n" for e in PUBLIC_CONSTANTS).encode()).hexdigest()


def mask_public(text: str) -> tuple[str, int]:
    """``text`` with each public constant replaced by spaces of its length, and how many were."""
    pattern = _pattern()
    if not pattern.search(text):
        return text, 0
    count = 0

    def blank(m: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return " " * (m.end() - m.start())

    return pattern.sub(blank, text), count
