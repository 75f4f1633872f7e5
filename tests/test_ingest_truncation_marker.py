"""LiteLLM's truncation marker counts as a cut only where LiteLLM cuts: in a string of a spend-log row (or of
a mapped export of one), at 35 % of what the string kept. The same words elsewhere are the customer's text:
read as a cut, they made up a prompt of a trillion characters and put the customer on the list as a
recipient of a suspect response.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from forensics import api
from forensics.config import load_case_file
from forensics.ingest.fields import litellm_cuts, truncation

MARKER = "... (litellm_truncated skipped 999999999999 chars. Truncation is a DB storage safeguard.) ..."
PASTED = f"why does my log say {MARKER} in the middle of my prompt?"
LONG = "clause " * 3000
CUT = LONG[:716] + f"... (litellm_truncated skipped {len(LONG) - 2048} chars. Truncation is a DB storage safeguard.) ..." + LONG[-1332:]


def spend(prompt: str, answer: str = "ok") -> dict[str, Any]:
    return {"request_id": "chatcmpl-1", "call_type": "acompletion", "api_key": "k", "startTime": "2026-08-29T10:00:00Z",
            "endTime": "2026-08-29T10:00:05Z", "model": "openai/glm-5.3", "model_group": "glm-5.3", "team_id": "team-a",
            "status": "success", "proxy_server_request": {"messages": [{"role": "user", "content": prompt}]},
            "response": {"choices": [{"index": 0, "message": {"content": answer}, "finish_reason": "stop"}]}}


def payload(prompt: str, answer: str = "ok") -> dict[str, Any]:
    return {"id": "chatcmpl-1", "call_type": "acompletion", "startTime": 1787997000.0, "endTime": 1787997005.0,
            "model": "glm-5.3", "model_group": "glm-5.3", "messages": [{"role": "user", "content": prompt}],
            "response": {"choices": [{"index": 0, "message": {"content": answer}}]},
            "metadata": {"user_api_key_org_id": "acme"}}


def ingested(tmp_path: Path, record: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "litellm.jsonl"
    path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    api.ingest(tmp_path / "case", [path], fmt="litellm")
    rows = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize("make", [spend, payload], ids=["spend_log", "callback_payload"])
def test_a_prompt_that_quotes_the_marker_is_whole(tmp_path: Path, make: Any) -> None:
    row = ingested(tmp_path, make(PASTED))
    assert row["prompt_truncated"] is False
    assert row["prompt_chars"] == len(row["prompt_text"]) < 200
    assert row["prompt_tokens"] < 100


@pytest.mark.parametrize("make", [spend, payload], ids=["spend_log", "callback_payload"])
def test_an_answer_that_quotes_the_marker_is_whole(tmp_path: Path, make: Any) -> None:
    assert ingested(tmp_path, make("hello", answer=PASTED))["response_truncated"] is False


def test_a_spend_log_cut_is_still_read_as_one(tmp_path: Path) -> None:
    row = ingested(tmp_path, spend(CUT, answer=CUT))
    assert row["prompt_truncated"] is True and row["response_truncated"] is True
    assert row["prompt_chars"] == len(row["prompt_text"]) - len(CUT) + len(LONG)  # the whole string's length


def test_a_callback_payload_is_never_cut(tmp_path: Path) -> None:
    """LiteLLM cuts only the strings it stores in its spend-log table: a payload holds the whole text."""
    row = ingested(tmp_path, payload(CUT))
    assert row["prompt_truncated"] is False and row["prompt_chars"] == len(row["prompt_text"])


@pytest.mark.parametrize("limit", [2048, 1000, 10_000])
def test_a_cut_at_any_configured_limit_is_recognised(limit: int) -> None:
    """``MAX_STRING_LENGTH_PROMPT_IN_DB`` may be set: the head is int(0.35 * limit), the tail the rest
    (LiteLLM's Python and JavaScript round the tail differently: both are recognised)."""
    text = "word " * 5000
    head = int(limit * 0.35)
    for tail in (limit - head, int(limit * 0.65)):
        marker = f"... (litellm_truncated skipped {len(text) - head - tail} chars) ..."
        cut = text[:head] + marker + text[len(text) - tail:]
        assert litellm_cuts({"messages": [{"content": cut}]}) == {marker: 1}
        assert truncation(f"<|user|>\n{cut}", litellm_cuts([cut]))[1] == len("<|user|>\n") + len(text)


def test_the_marker_anywhere_else_in_a_string_is_text() -> None:
    assert not litellm_cuts(PASTED, [PASTED], {"a": PASTED}, MARKER, MARKER + LONG, LONG + MARKER)
    assert truncation(PASTED, litellm_cuts(PASTED)) == (False, len(PASTED), len(PASTED.encode()))
    assert truncation(CUT) == (False, len(CUT), len(CUT.encode()))  # no cuts given: the format never cuts


def test_a_mapped_export_of_spend_logs_is_read_as_litellm_cuts_them(tmp_path: Path) -> None:
    records = [{"rid": "r-1", "org": "acme", "ts": "2026-08-29T10:00:00Z", "messages": [{"role": "user", "content": CUT}], "model": "glm-5.3",
                "answer": "ok"},
               {"rid": "r-2", "org": "acme", "ts": "2026-08-29T10:00:01Z", "messages": [{"role": "user", "content": PASTED}], "model": "glm-5.3",
                "answer": PASTED}]
    (tmp_path / "export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (tmp_path / "case.toml").write_text(
        'name = "marker"\nmodel = "glm-5.3"\nwindow_start = "2026-01-01T00:00:00Z"\nwindow_end = "2027-01-01T00:00:00Z"\n'
        'real_ceiling_tokens = 100000\n\n[[inputs]]\nformat = "mapped"\npath = "export.jsonl"\n\n[inputs.fields]\n'
        'request_id = "rid"\ntenant_id = "org"\nreceived_at = "ts"\nmodel = "model"\nprompt_messages = "messages"\nresponse_text = "answer"\n',
        encoding="utf-8")
    cfg = load_case_file(tmp_path / "case.toml")
    api.ingest(tmp_path / "case", [cfg.inputs[0].path], fmt="mapped", config=cfg, profile=cfg.inputs[0].profile)
    rows = {r["request_id"]: r for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()}
    assert rows["r-1"]["prompt_truncated"] is True
    assert rows["r-2"]["prompt_truncated"] is False and rows["r-2"]["response_truncated"] is False
    assert rows["r-2"]["prompt_chars"] == len(rows["r-2"]["prompt_text"])


#: The note current LiteLLM versions put in the marker: parentheses of its own.
CURRENT_NOTE = ("Truncation is a DB storage safeguard. Full, untruncated data is logged to logging callbacks (OTEL, "
                "Datadog, etc.). To increase the truncation limit, set `MAX_STRING_LENGTH_PROMPT_IN_DB` in your env.")


def litellm_cut(text: str, note: str = CURRENT_NOTE, limit: int = 2048) -> str:
    """What LiteLLM's spend-log writer makes of a long string (its Python code's rounding)."""
    head, tail = int(limit * 0.35), int(limit * 0.65)
    return f"{text[:head]}... (litellm_truncated skipped {len(text) - head - tail} chars. {note}) ...{text[len(text) - tail:]}"


def test_the_current_note_with_its_own_parentheses_is_a_cut(tmp_path: Path) -> None:
    """The marker pattern stopped at the note's "(OTEL, Datadog, etc.)": current LiteLLM's cuts were read as text."""
    row = ingested(tmp_path, spend(litellm_cut(LONG), answer=litellm_cut(LONG)))
    assert row["prompt_truncated"] is True and row["response_truncated"] is True
    assert row["prompt_chars"] == len("<|user|>\n") + len(LONG)


def test_a_marker_quoted_inside_a_string_litellm_then_cut_leaves_the_cut_read() -> None:
    quoted = "my log says ... (litellm_truncated skipped 5 chars) ... why? " + LONG
    cut = litellm_cut(quoted)
    cuts = litellm_cuts(cut)
    assert sum(cuts.values()) == 1 and "skipped 5 chars" not in next(iter(cuts))
    assert truncation(cut, cuts)[:2] == (True, len(quoted))


def test_a_short_string_with_the_marker_at_35_percent_is_text() -> None:
    hostile = "a" * 35 + "... (litellm_truncated skipped 999999999999 chars) ..." + "b" * 65
    assert not litellm_cuts(hostile)


def test_a_cut_counted_in_utf16_units_is_recognised() -> None:
    """A JavaScript port of the writer counts UTF-16 units: ten emoji in the head move the marker ten characters."""
    text = "\U0001f600" * 10 + LONG
    cut = text[:706] + "... (litellm_truncated skipped 1 chars) ..." + text[-1332:]
    assert sum(litellm_cuts(cut).values()) == 1


@pytest.mark.parametrize("filler", ["\U0001f600" * 300, "\\ud83d" * 60])
def test_a_short_prompt_with_emoji_or_escapes_and_the_marker_is_text(filler: str) -> None:
    """The slack once counted every emoji and escaped surrogate of the string: a 381-character prompt
    quoting the marker read as a cut of a trillion characters."""
    prompt = "why does my log say ... (litellm_truncated skipped 999999999999 chars) ... here? " + filler
    assert not litellm_cuts(prompt)


def test_an_unclosed_marker_typed_before_a_real_cut_does_not_hide_it() -> None:
    """Matches do not overlap: "... (litellm_truncated skipped 12 chars" left open, then the real marker,
    then ":) ..." was one long match that swallowed the real cut."""
    text = "see ... (litellm_truncated skipped 12 chars and more " + LONG + " bye " + LONG + " ok:) ..."
    cut = litellm_cut(text, note="Truncation is a DB storage safeguard.")
    cuts = litellm_cuts(cut)
    assert sum(cuts.values()) == 1
    rendered = f"<|user|>\n{cut}"
    assert truncation(rendered, cuts)[:2] == (True, len("<|user|>\n") + len(text))


def test_a_cut_of_text_holding_an_escape_written_as_text_is_recognised() -> None:
    """Pasted JSON writes an emoji as the twelve characters \\ud83d\\ude80: counted as two lone surrogates the
    ingest had escaped, they moved the head by ten and the cut was missed (an over-length prompt read short)."""
    text = json.dumps({"title": "Launch \U0001f680"}) + " " + LONG
    assert "\\ud83d" in text
    cut = litellm_cut(text)
    assert sum(litellm_cuts(cut).values()) == 1
    assert truncation(cut, litellm_cuts(cut))[:2] == (True, len(text))


def test_many_markers_in_one_string_are_judged_in_one_pass() -> None:
    """Each marker recounted the whole string on both sides of it: minutes for a pasted log of a few hundred
    kilobytes. The answer is what counts here; benchmarks measure time."""
    pasted = "... (litellm_truncated skipped 1 chars) ... \U0001f600 \\ud83d " * 5000
    assert not litellm_cuts(pasted)
