"""The response text is the whole answer the customer received: its reasoning and tool calls too.

A reasoning model (SGLang's and DeepSeek's ``reasoning_content``, vLLM's ``reasoning``) writes much of
its answer before the content, and an agent's model answers in tool calls; the response text held the
content alone, so a foreign passage the stale pages put there was never searched, and its customer
never named. The rendering is a contract (offsets point into it), so it is pinned here exactly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from test_scan import GATEWAYS, MODEL, _config, _gateway_logs

from forensics import api
from forensics.ingest.fields import RecordError, chunks_text, response_text

CALL = {"id": "call_1", "type": "function", "function": {"name": "save_note", "arguments": '{"note": "ship it"}'}}
SECOND = {"id": "call_2", "type": "function", "function": {"name": "notify", "arguments": '{"to": "ops"}'}}

# (assistant message, the response text it renders to)
MESSAGES: list[tuple[dict[str, Any], str]] = [
    ({"role": "assistant", "content": "Plain."}, "Plain."),
    ({"role": "assistant", "content": "Plain.", "reasoning_content": None, "reasoning": "", "tool_calls": []}, "Plain."),
    ({"role": "assistant", "content": "Four.", "reasoning_content": "Two and two."},
     "<|reasoning|>\nTwo and two.\n\n<|assistant|>\nFour."),
    ({"role": "assistant", "content": "Four.", "reasoning": "Two and two."},  # vLLM's newer name
     "<|reasoning|>\nTwo and two.\n\n<|assistant|>\nFour."),
    ({"role": "assistant", "content": None, "reasoning_content": "Still thinking about"},  # cut short while reasoning
     "<|reasoning|>\nStill thinking about"),
    ({"role": "assistant", "content": None, "tool_calls": [CALL]}, '<|tool_call|>\nsave_note\n{"note": "ship it"}'),
    ({"role": "assistant", "content": "Saving.", "reasoning_content": "Save it.", "tool_calls": [CALL, SECOND]},
     '<|reasoning|>\nSave it.\n\n<|assistant|>\nSaving.\n<|tool_call|>\nsave_note\n{"note": "ship it"}\n'
     '<|tool_call|>\nnotify\n{"to": "ops"}'),
    ({"role": "assistant", "content": None, "function_call": {"name": "lookup", "arguments": '{"q": "x"}'}},
     '<|tool_call|>\nlookup\n{"q": "x"}'),
    ({"role": "assistant", "content": [{"type": "thinking", "thinking": "Hm."}, {"type": "text", "text": "Yes."},
                                       {"type": "tool_use", "name": "save_note", "input": {"note": "ship it"}}]},
     '<|reasoning|>\nHm.\n\n<|assistant|>\nYes.\n<|tool_call|>\nsave_note\n{"note":"ship it"}'),
]


@pytest.mark.parametrize(("message", "expected"), MESSAGES)
def test_an_answer_renders_its_reasoning_content_and_tool_calls(message: dict[str, Any], expected: str) -> None:
    text, finish, _ = response_text({"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})
    assert (text, finish) == (expected, "stop")


def _chunks(message: dict[str, Any], repeat_name: bool = False) -> list[dict[str, Any]]:
    """``message`` streamed as a server sends it: the reasoning, then the content, a few characters a
    chunk; each tool call's name in its first piece and its arguments in pieces, the calls interleaved."""
    deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
    for key in ("reasoning_content", "reasoning"):
        text = message.get(key) or ""
        deltas += [{key: text[i:i + 3], "content": None} for i in range(0, len(text), 3)]
    content = message.get("content") or ""
    deltas += [{"content": content[i:i + 3]} for i in range(0, len(content), 3)]
    calls = message.get("tool_calls") or []
    for k, call in enumerate(calls):
        deltas.append({"tool_calls": [{"index": k, "id": call["id"], "type": "function",
                                       "function": {"name": call["function"]["name"], "arguments": ""}}]})
    longest = max((len(c["function"]["arguments"]) for c in calls), default=0)
    for i in range(0, longest, 4):
        for k, call in enumerate(calls):
            piece = call["function"]["arguments"][i:i + 4]
            if piece:
                function = {"arguments": piece} | ({"name": call["function"]["name"]} if repeat_name else {})
                deltas.append({"tool_calls": [{"index": k, "function": function}]})
    if "function_call" in message:
        deltas.append({"function_call": message["function_call"]})
    return [{"choices": [{"index": 0, "delta": d}]} for d in deltas] + [{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]


@pytest.mark.parametrize("repeat_name", [False, True])
@pytest.mark.parametrize(("message", "expected"), [m for m in MESSAGES if not isinstance(m[0]["content"], list)])
def test_a_streamed_answer_renders_as_the_whole_one(message: dict[str, Any], expected: str, repeat_name: bool) -> None:
    """Pieces per choice and per call (by index), whichever order the calls' pieces interleave in; a server
    that repeats a call's name in every piece adds nothing."""
    assert chunks_text(_chunks(message, repeat_name)) == (expected, "stop", {})


def test_streamed_choices_keep_their_own_reasoning_and_calls() -> None:
    chunks = [{"choices": [{"index": 1, "delta": {"reasoning_content": "B thinks"}},
                           {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}}]},
              {"choices": [{"index": 1, "delta": {"content": "B says"}}, {"index": 0, "delta": {"content": "A says"}}]}]
    assert chunks_text(chunks)[0] == ("<|choice 0|>\nA says\n<|tool_call|>\nf\n{}\n\n"
                                      "<|choice 1|>\n<|reasoning|>\nB thinks\n\n<|assistant|>\nB says")


@pytest.mark.parametrize(("chunk", "problem"), [
    ({"choices": [{"delta": {"content": 5, "reasoning_content": "x"}}]}, "response content is a int"),
    ({"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": {"k": float("nan")}}}]}}]}, None),
])
def test_odd_streamed_pieces(chunk: dict[str, Any], problem: str | None) -> None:
    """A content that is not text is refused with its place named, as before; arguments streamed as an
    object (not the protocol's string) are written as JSON rather than dropped."""
    if problem is None:
        assert chunks_text([chunk])[0] == "<|tool_call|>\nf\n{\"k\":null}"
    else:
        with pytest.raises(RecordError, match=problem):
            chunks_text([chunk])


LEAKED = ("Margarethe Okonkwo-Lindqvist signed the Halvorsen arbitration waiver on the ninth of March, "
          "account 7719-4402-SKV, with the Tromsø escrow released to Quillfeather Biotech after the recall")
PROMPT = " ".join(f"section {i} of the quarterly filing lists cost centre {i * 7} against budget line {i * 13}" for i in range(160))


def _leak_logs(folder: Path, gateway: str) -> Path:
    """One customer sends a passage; two later over-long requests of two others get answers that carry it
    in their reasoning and in a tool call's arguments only (their content is innocent)."""
    source = {"model": MODEL, "messages": [{"role": "user", "content": f"Please file this: {LEAKED}."}]}
    over_long = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]}
    thinking = {"role": "assistant", "content": "Here is the summary you asked for.",
                "reasoning_content": f"The user wants a summary. {LEAKED} so I should be brief."}
    arguments = json.dumps({"note": LEAKED}, ensure_ascii=False)  # as the model writes them
    calling = {"role": "assistant", "content": None,
               "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "save_note", "arguments": arguments}}]}
    return _gateway_logs(folder, gateway, [("src", "initech", source, 60), ("think", "acme", over_long, 2600),
                                           ("call", "umbrella", over_long, 2600)], {"think": thinking, "call": calling})


@pytest.mark.parametrize("gateway", GATEWAYS)
def test_a_passage_leaked_into_the_reasoning_or_a_tool_call_names_its_customer(tmp_path: Path, gateway: str) -> None:
    """Both suspects' answers carry another customer's passage outside their content. Before, the response
    text was the content alone: no finding, and the exposed customer was not on the list."""
    cfg = _config(real_ceiling_tokens=2000)
    case = tmp_path / "case"
    api.ingest(case, [_leak_logs(tmp_path / "logs", gateway)], config=cfg)
    texts = {r["request_id"]: r["response_text"] for r in pq.read_table(case / "exchanges.parquet").to_pylist()}
    assert texts["think"].startswith("<|reasoning|>\nThe user wants a summary. " + LEAKED)
    assert texts["call"] == f"<|tool_call|>\nsave_note\n{json.dumps({'note': LEAKED}, ensure_ascii=False)}"
    api.scan(case, cfg)
    assert sorted(r["request_id"] for r in pq.read_table(case / "suspects.parquet").to_pylist()) == ["call", "think"]
    api.match(case, cfg)
    found = {(r["recipient_request_id"], r["source_tenant_id"], r["tier"]) for r in pq.read_table(case / "evidence.parquet").to_pylist()}
    assert {(rid, tenant) for rid, tenant, _ in found} == {("think", "initech"), ("call", "initech")}
    for r in pq.read_table(case / "evidence.parquet").to_pylist():  # the offsets point at the passage in the rendered text
        assert LEAKED[:90] in texts[r["recipient_request_id"]][r["recipient_start"]:r["recipient_end"]]


def test_a_streamed_answer_with_reasoning_is_searched_whole(tmp_path: Path) -> None:
    """Split logs that keep the stream's chunks: the reasoning pieces are the answer too."""
    logs = _leak_logs(tmp_path / "logs", "openai-split")
    responses = [json.loads(line) for line in (logs / "responses.jsonl").read_text(encoding="utf-8").splitlines()]
    for record in responses:
        message = record.pop("body")["choices"][0]["message"]
        record["chunks"] = _chunks(message)
    (logs / "responses.jsonl").write_text("".join(json.dumps(r) + "\n" for r in responses), encoding="utf-8")
    cfg = _config(real_ceiling_tokens=2000)
    case = tmp_path / "case"
    api.ingest(case, [logs], config=cfg)
    texts = {r["request_id"]: r["response_text"] for r in pq.read_table(case / "exchanges.parquet").to_pylist()}
    assert texts["think"] == f"<|reasoning|>\nThe user wants a summary. {LEAKED} so I should be brief.\n\n<|assistant|>\nHere is the summary you asked for."
    assert texts["call"] == f"<|tool_call|>\nsave_note\n{json.dumps({'note': LEAKED}, ensure_ascii=False)}"
