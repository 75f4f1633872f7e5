"""Notices a customer can read (issue 18, item 5): a plain-language letter, masked per the documented
policy (``[report] mask``), a contact line and what was done from the case file, and the internal
rule text left in evidence.csv."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest
from test_run import CASE_TOML, _row

from forensics import api
from forensics.config import config_from_mapping
from forensics.errors import ConfigError
from forensics.report.notices import ALWAYS_MASKED, CONTACT_DETAILS, NUMBER_DIGITS
from forensics.report.severity import default_classifier

SAMPLE = Path(__file__).resolve().parent.parent / "sample_logs"
CONTACT = "incident-response@provider.example, +44 20 7946 0000"  # written with a full stop in the case file
DONE = "We stopped the faulty engine version on 30 August. We deleted the affected answers from our caches."


def _notices(report_dir: Path) -> dict[str, tuple[str, str]]:
    """packet -> (notice.md, notice.json as text with real characters)."""
    out = {}
    for row in csv.DictReader(io.StringIO((report_dir / "notifications.csv").read_text(encoding="utf-8"))):
        folder = report_dir / row["packet"]
        data = json.loads((folder / "notice.json").read_text(encoding="utf-8"))
        out[row["packet"]] = ((folder / "notice.md").read_text(encoding="utf-8"), json.dumps(data, ensure_ascii=False))
    return out


def _passages(md: str) -> list[str]:
    """The quoted passages of a notice (the code spans on their own line under a list item)."""
    return [line.strip()[1:-1] for line in md.splitlines() if line.startswith("  `") and line.endswith("`")]


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample incident with a contact line and what the provider did in its case file."""
    logs = tmp_path_factory.mktemp("notices") / "logs"
    shutil.copytree(SAMPLE, logs)
    with open(logs / "case.toml", "a", encoding="utf-8") as fh:
        fh.write(f'\n[report]\ncontact = "{CONTACT}."\nactions_taken = "{DONE}"\n')
    return api.run(logs, logs.parent / "out").report.report_dir


def test_no_masked_kind_appears_unmasked_in_any_notice(sample: Path) -> None:
    classifier = default_classifier()
    con_rows = list(csv.DictReader(io.StringIO((sample / "evidence.csv").read_text(encoding="utf-8"))))
    assert con_rows
    import duckdb

    texts = duckdb.connect().execute(
        "SELECT request_id, tenant_id, prompt_text, response_text FROM read_parquet($1)",
        [str(sample / "case" / "exchanges.parquet")]).fetchall()
    masked_values = set()
    for _, _, prompt, response in texts:
        for text in (prompt or "", response or ""):
            masked_values.update(h.value for h in classifier.find(text) if h.cls in ALWAYS_MASKED + CONTACT_DETAILS)
    notices = _notices(sample)
    kinds_seen = set()
    for packet, (md, js) in notices.items():
        for value in masked_values:
            assert value not in md and value not in js, (packet, value)
        for passage in _passages(md):
            kinds_seen.update(h.cls for h in classifier.find(passage))
            for word in passage.split():
                # Every number of NUMBER_DIGITS digits or more (phone, account, record) keeps 4 at most.
                assert sum(ch.isdigit() for ch in word) < NUMBER_DIGITS, (packet, word)
    assert sum(len(_passages(md)) for md, _ in notices.values()) >= 10
    assert not kinds_seen  # nothing a detector recognises is left in a shown passage


def test_the_sample_notice_reads_as_a_letter(sample: Path) -> None:
    notices = _notices(sample)
    rules = {r["tier_rule"] for r in csv.DictReader(io.StringIO((sample / "evidence.csv").read_text(encoding="utf-8")))}
    assert any(rules)  # the rule text is evidence, kept for the team
    for packet, (md, js) in notices.items():
        assert md.startswith("# Notice of a data incident: ")
        assert "Dear customer," in md and "## What happened" in md and "## What we did" in md
        assert f"For questions about this notice, contact {CONTACT}." in md
        assert DONE in md and "## What you should do" in md
        for rule in rules - {""}:
            assert rule not in md and rule not in js, (packet, rule)
        assert "expected_by_chance" not in md and "tier_rule" not in js
    exposed = next(md for md, _ in notices.values() if "## What was exposed" in md)
    assert re.search(r"Part of a conversation your organisation sent on \d{1,2} August 2026 appeared in a response "
                     r"to another customer on \d{1,2} August 2026\.", exposed)
    assert "Phone numbers and email addresses are hidden too." in exposed


def _sentences(md: str) -> list[str]:
    """The template's prose: no headings, tables, quoted passages or technical details."""
    prose = []
    for line in md.split("## Details for your technical team")[0].splitlines():
        if line.startswith(("#", "|", "  `", "  - Found in it")) or not line.strip():
            continue
        line = re.sub(r"^(\d+\.|-)\s+", "", line.strip())
        line = re.sub(r"\(reference ref-[0-9a-f]+\)", "", line)
        prose += [s for s in re.split(r"(?<=[.:?!])\s+", line) if s.strip()]
    return prose


def test_notices_are_written_in_short_sentences(sample: Path) -> None:
    for packet, (md, _) in _notices(sample).items():
        sentences = _sentences(md)
        words = [len(s.split()) for s in sentences]
        assert sentences and max(words) <= 30, (packet, max(zip(words, sentences)))
        assert sum(words) / len(words) <= 16, (packet, sum(words) / len(words))


# ---- the masking policy ---------------------------------------------------------------------

SECRET_PROMPT = ("Please update the customer file. Call Dana Whitfield on (415) 555-0132 or write to "
                 "dana.whitfield@northwind.example about account 7700123498761234 and medical record 4481920. "
                 "The deploy key is AKIAZ7QW3ERT5YUI8OPL and the card on file is 4539 1488 0343 6467.")


def _policy_run(tmp_path: Path, mask: str | None) -> str:
    logs = tmp_path / "logs"
    (logs / "gateway").mkdir(parents=True)
    filler = " ".join(f"row {i} of the shipping ledger for the northern depot" for i in range(900))
    rows = [_row("r-1", "acme", "2026-08-28T09:00:00Z", SECRET_PROMPT, "Updated.", 90),
            _row("r-2", "globex", "2026-08-28T11:00:00Z", filler, "Summary: " + SECRET_PROMPT, 1)]
    (logs / "gateway" / "spend.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (logs / "case.toml").write_text(CASE_TOML + (f'\n[report]\nmask = "{mask}"\n' if mask else ""), encoding="utf-8")
    rd = api.run(logs, tmp_path / "out").report.report_dir
    (md,) = [md for md, _ in _notices(rd).values() if "## What was exposed" in md]
    return md


def test_default_policy_masks_contact_details_and_none_shows_them(tmp_path: Path) -> None:
    masked = _policy_run(tmp_path / "default", None)
    shown = _policy_run(tmp_path / "none", "none")
    for md in (masked, shown):
        # Always masked, except the last 4: secrets, card, account and record numbers.
        for raw in ("AKIAZ7QW3ERT5YUI8OPL", "4539 1488 0343 6467", "7700123498761234", "4481920"):
            assert raw not in md
        assert "************1234" in md and "***1920" in md
    for raw in ("(415) 555-0132", "dana.whitfield@northwind.example"):
        assert raw not in masked and raw in shown
    assert "Phone numbers and email addresses are shown." in shown


@pytest.mark.parametrize(("report", "message"), [
    ({"mask": "partial"}, "[report] mask = 'partial' is not one of default, none"),
    ({"mask": 1}, "[report] mask must be a string"),
    ({"contact": ["a"]}, "[report] contact must be a string"),
    ({"contakt": "x"}, "unknown key 'contakt' in [report]"),
])
def test_bad_report_settings_are_clear_errors(report: dict, message: str, tmp_path: Path) -> None:  # type: ignore[type-arg]
    data = tomllib.loads(CASE_TOML) | {"report": report}
    with pytest.raises(ConfigError) as info:
        config_from_mapping(data, base=tmp_path, file=tmp_path / "case.toml")
    assert message in str(info.value) and "case.toml" in str(info.value) and "Fix:" in str(info.value)


def test_a_customer_id_ending_in_a_hash_keeps_it_in_the_notice_heading() -> None:
    """A "#" at the end of a Markdown heading closes it: "# Notice ...: org #" showed the customer as "org"."""
    from forensics.report.notices import render_packet_md

    golden = sorted((Path(__file__).parent / "golden" / "report" / "packets").glob("*/notice.json"))[0]
    md = render_packet_md(json.loads(golden.read_text(encoding="utf-8")) | {"tenant_id": "org #"})
    assert md.splitlines()[0] == "# Notice of a data incident: org \\#"


@pytest.mark.parametrize("text", ["card 4111  1111  1111  1111 end", "card 4111 - 1111 - 1111 - 1111",
                                  "iban DE89  3704  0044  0532  0130  00", "card 4111\u3000\u30001111\u3000\u30001111\u3000\u30001111"])
def test_a_number_spaced_as_in_a_table_is_masked_in_a_notice(text: str) -> None:
    """Digit groups set apart by two spaces or " - " are no card to the severity detectors (a table's columns), and
    each group is too short to be masked as a word: the number was shown in full."""
    from forensics.report.notices import _masked_preview
    from forensics.report.severity import default_classifier

    shown = _masked_preview(text, default_classifier().find(text))
    assert "4111" not in shown and "3704" not in shown and sum(ch.isdigit() for ch in shown) <= 6, shown


def test_every_passage_of_a_pair_is_classified_and_shown(tmp_path: Path) -> None:
    """A pair's second passage held an e-mail address: only the strongest passage was classified and shown, so the
    list gave the customer no severity, its letter quoted the first passage alone and the recipient's letter said
    it found one passage (a review)."""
    from test_run import SECRET, write_logs

    second = ("Escrow desk contact for the closing: fitz.okonkwo@baptiste-escrow.example, who holds the signed "
              "addendum for tranche seventeen and the Gdansk warehouse lease")
    logs = write_logs(tmp_path / "logs")
    spend = logs / "gateway" / "spend.jsonl"
    rows = [json.loads(line) for line in spend.read_text(encoding="utf-8").splitlines()]
    rows[0]["proxy_server_request"]["messages"][0]["content"] = (
        "Please review: " + SECRET + " " + " ".join(f"depot audit line {i} found nothing unusual" for i in range(40))
        + " " + second)
    rows[2]["response"]["choices"][0]["message"]["content"] = (
        "Summary: " + SECRET + " " + " ".join(f"the valley weather on day {i} stayed mild" for i in range(40))
        + " " + second)
    spend.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    report = api.run(logs, tmp_path / "out").report.report_dir
    with (report / "evidence.csv").open(encoding="utf-8", newline="") as fh:
        (finding,) = [r for r in csv.DictReader(fh) if r["source_tenant_id"] == "acme"]
    assert finding["passages"].count("=") == 2  # one finding, two passages
    listed = {(r["tenant_id"], r["role"]): r for r in csv.DictReader(io.StringIO(
        (report / "notifications.csv").read_text(encoding="utf-8")))}
    assert "email" in listed[("acme", "exposed")]["severity_kinds"].split(";")
    assert "email" in listed[("globex", "recipient")]["severity_kinds"].split(";")
    packet = report / listed[("acme", "exposed")]["packet"]
    letter = (packet / "notice.md").read_text(encoding="utf-8")
    assert "We found 2 passages of this text in that response:" in letter
    assert "Found in it: email" in letter and "fitz.okonkwo@" not in letter  # shown, masked
    notice = json.loads((packet / "notice.json").read_text(encoding="utf-8"))
    (span,) = notice["exposed"]["requests"][0]["spans"]
    assert [[h["kind"] for h in p["secrets"]] for p in span["all_passages"]][1] == ["email"]
    recipient = (report / listed[("globex", "recipient")]["packet"] / "notice.md").read_text(encoding="utf-8")
    assert "we found 2 passages from another customer" in recipient
    assert api.verify(report).ok
    # The letter as the previous release wrote it (findings counted as passages) still verifies (a review of the fix).
    from forensics.report.notices import render_packet_md

    letter_path = report / listed[("globex", "recipient")]["packet"] / "notice.md"
    earlier = render_packet_md(json.loads((letter_path.parent / "notice.json").read_text(encoding="utf-8")),
                               every_passage_counted=False)
    assert "we found 1 passage from another customer" in earlier
    letter_path.write_text(earlier, encoding="utf-8")
    assert [d for d in api.verify(report).drift if d.kind == "consistency"] == []  # (its hash changed, no more)
