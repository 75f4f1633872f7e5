"""Severity classes on known strings, and look-alikes that must not match."""

from __future__ import annotations

import pytest

from forensics.errors import ConfigError
from forensics.report.severity import default_classifier, load_patterns, mask

C = default_classifier()

POSITIVE = [
    ("credential", "aws_access_key_id", "deploy with AKIAIOSFODNN7EXAMPLE today"),
    ("credential", "aws_secret_access_key", "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("credential", "openai_api_key", "OPENAI_API_KEY=sk-proj-" + "Ab3dE" * 10 + " end"),
    ("credential", "anthropic_api_key", "key sk-ant-api03-" + "x7Y_" * 23 + "AA ok"),
    ("credential", "github_token", "token ghp_" + "a1B2c3D4e5" * 3 + "F6g7H8 here"),
    ("credential", "slack_token", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("credential", "private_key", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"),
    ("credential", "stripe_secret_key", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"),
    ("credential", "google_api_key", "AIza" + "SyA-1234567890abcdefghijklmnopqrstu"),
    ("payment_card", "card_number", "card 4111 1111 1111 1111 exp 12/29"),
    ("payment_card", "card_number", "amex 378282246310005."),
    ("iban", "iban", "pay to GB82 WEST 1234 5698 7654 32 please"),
    ("iban", "iban", "DE89370400440532013000"),
    ("national_id", "us_ssn", "SSN 536-90-4399"),
    ("national_id", "br_cpf", "CPF 111.444.777-35 do titular"),
    ("national_id", "it_codice_fiscale", "codice fiscale RCCMNL83S18D969H, nato a"),
    ("email", "email", "write to jane.doe+tag@example.co.uk now"),
    ("phone", "phone_number", "call +1 415-555-2671 tomorrow"),
]

#: Numbers as people and word processors write them: no-break, thin and ideographic spaces, lower case. Each was shown in full in a notice, its class "none".
SEPARATED = [
    ("payment_card", "card 4111\u00a01111\u00a01111\u00a01111 exp"),
    ("payment_card", "card 4111\u20091111\u20091111\u20091111 exp"),  # thin spaces
    ("payment_card", "card 4111\u30001111\u30001111\u30001111 exp"),  # ideographic spaces
    ("iban", "iban de89 3704 0044 0532 0130 00 please"),
    ("iban", "IBAN GB82\u00a0WEST\u00a01234\u00a05698\u00a07654\u00a032"),
]

LOOK_ALIKES = [
    "card 4111 1111 1111 1112 fails Luhn",
    "order number 1234567890123456 is not a card",
    "pay to GB82 WEST 1234 5698 7654 33 (wrong checksum)",
    "DE89370400440532013001",
    "SSN 000-12-3456 and 666-12-3456 are never issued",
    "ssn 536 90 4399 and 536 90-4399 are any numbers (an SSN is written with hyphens); 536904399 is any nine digits",
    "scores: 512 34 1987, and the columns 4111\t1111\t1111\t1111 of a table",
    "a table's row 4111  1111  1111  1111 aligned with two spaces",
    "CPF 111.444.777-36 has a wrong check digit; 111.444.777.35 is a version string",
    "RCCMNL83S18D969X has a wrong check letter; ABCDEF12G34H567 is one character short",
    "AKIA in prose is not a key, nor AKIAIOSFODNN7EXAMPL (too short)",
    "sk-ant is the prefix; sk-ant-api03-short is too short",
    "ghp_tooshort",
    "an email-like user@localhost has no domain",
    "version 1.2.3.4 and 2026-08-29 are not phone numbers",
]


@pytest.mark.parametrize(("cls", "kind", "text"), POSITIVE)
def test_known_strings_are_classified(cls: str, kind: str, text: str) -> None:
    hits = C.find(text)
    assert (cls, kind) in {(h.cls, h.kind) for h in hits}, hits
    assert C.classify(text) == cls


@pytest.mark.parametrize(("cls", "text"), SEPARATED)
def test_numbers_with_any_spacing_are_found_and_masked(cls: str, text: str) -> None:
    (hit,) = C.find(text)
    assert hit.cls == cls and hit.value == text[hit.start:hit.end]
    assert sum(ch.isdigit() for ch in hit.masked) <= 4, hit.masked


@pytest.mark.parametrize("text", LOOK_ALIKES)
def test_look_alikes_do_not_match(text: str) -> None:
    assert C.find(text) == [], C.find(text)


def test_card_followed_by_another_number_is_cut_at_the_valid_prefix() -> None:
    hits = C.find("card 4111 1111 1111 1111 2024")
    assert [(h.kind, h.value) for h in hits] == [("card_number", "4111 1111 1111 1111")]


def test_highest_class_wins_and_overlaps_keep_the_most_severe() -> None:
    text = "mail bob@example.com, card 4111-1111-1111-1111, key AKIAIOSFODNN7EXAMPLE"
    assert C.classify(text) == "credential"
    assert [h.cls for h in C.find(text)] == ["email", "payment_card", "credential"]
    assert C.highest(["email", "phone"]) == "email"
    assert C.highest([]) == "none"


def test_offsets_point_at_the_value() -> None:
    text = "x" * 10 + " AKIAIOSFODNN7EXAMPLE"
    (hit,) = C.find(text)
    assert text[hit.start:hit.end] == "AKIAIOSFODNN7EXAMPLE"


def test_masking_never_shows_the_value() -> None:
    for _cls, _, text in POSITIVE:
        for h in C.find(text):
            assert h.value not in h.masked
            assert len(h.sha256) == 64
    assert mask("4111 1111 1111 1111", "payment_card") == "**** **** **** 1111"
    assert mask("jane@example.com", "email") == "j***@example.com"
    assert mask("ghp_" + "A" * 36, "credential").startswith("ghp_")


def test_a_packet_shows_no_hash_that_would_undo_a_mask() -> None:
    """A card number's mask with the unsalted SHA-256 beside it gave the number back: its middle digits are a
    million guesses. Only a machine-made credential's hash is shown."""
    shown = {h.kind: h.to_json()["sha256"] for _, _, text in POSITIVE for h in C.find(text)}
    shown.update({h.kind: h.to_json()["sha256"] for h in C.find("password = hunter2hunter2")})
    for kind in ("card_number", "iban", "us_ssn", "br_cpf", "it_codice_fiscale", "email", "phone_number", "password_assignment"):
        assert shown[kind] is None, kind
    for kind in ("aws_access_key_id", "openai_api_key", "github_token", "private_key", "stripe_secret_key"):
        assert shown[kind] is not None and len(shown[kind]) == 64, kind


def test_bad_pattern_files_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="not a valid regex"):
        load_patterns('classes = ["credential"]\n[[pattern]]\nclass = "credential"\nkind = "x"\nregex = "("\n')
    with pytest.raises(ConfigError, match="unknown validator"):
        load_patterns('classes = ["credential"]\n[[pattern]]\nclass = "credential"\nkind = "x"\nregex = "a"\nvalidator = "nope"\n')
    with pytest.raises(ConfigError, match="needs a class"):
        load_patterns('classes = ["credential"]\n[[pattern]]\nclass = "other"\nkind = "x"\nregex = "a"\n')


def test_the_spaces_read_as_one_are_every_unicode_space_separator() -> None:
    import unicodedata

    from forensics.report.severity import _SPACES

    assert set(_SPACES) == {cp for cp in range(0x110000) if unicodedata.category(chr(cp)) == "Zs"} - {0x20}
