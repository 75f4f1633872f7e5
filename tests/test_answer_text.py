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

from forensics import api, schema
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


# --- the Responses API (/v1/responses): its requests and answers read as chat ones are ----------------------

RESPONSES_BODY = {"model": MODEL, "instructions": "Answer briefly.", "tools": [{"type": "function", "name": "lookup"}], "input": [
    {"role": "user", "content": [{"type": "input_text", "text": "What is due?"}, {"type": "input_image", "image_url": "data:,x"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "earlier thinking"}]},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": "invoices"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "Invoice 42 is due."},
    {"type": "item_reference", "id": "msg_0"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Invoice 42."}]},
    {"role": "user", "content": "And after that?"}]}
RESPONSES_PROMPT = ('<|system|>\nAnswer briefly.\n\n<|tools|>\n{"name":"lookup","type":"function"}\n\n<|user|>\nWhat is due?\n\n'
                    '<|assistant|>\n<|tool_call|>\nlookup\n{"q": "invoices"}\n\n<|tool|>\nInvoice 42 is due.\n\n'
                    '<|assistant|>\nInvoice 42.\n\n<|user|>\nAnd after that?')


def _responses_answer(rid: str, reported: int, text: str, reasoning: str = "", status: str = "completed") -> dict[str, Any]:
    output: list[dict[str, Any]] = [{"type": "reasoning", "id": "rs_2", "summary": [],
                                     "content": [{"type": "reasoning_text", "text": reasoning}]}] if reasoning else []
    output += [{"type": "message", "id": "msg_1", "role": "assistant", "status": status,
                "content": [{"type": "output_text", "text": text, "annotations": []}]},
               {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": '{"q": "next"}'}]
    return {"id": f"resp_{rid}", "object": "response", "model": MODEL, "status": status, "error": None, "output": output,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "usage": {"input_tokens": reported, "input_tokens_details": {"cached_tokens": reported // 2}, "output_tokens": 9}}


def test_a_responses_api_answer_renders_as_a_chat_answer() -> None:
    text, finish, usage = response_text(_responses_answer("r", 812, "Invoice 43.", "Check the next one.", status="incomplete"))
    assert text == ('<|reasoning|>\nCheck the next one.\n\n<|assistant|>\nInvoice 43.\n<|tool_call|>\nlookup\n{"q": "next"}')
    assert finish == "max_output_tokens" and (usage["prompt_tokens"], usage["completion_tokens"]) == (812, 9)
    summary_only = {"object": "response", "status": "completed", "output": [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "A summary."}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Yes."}, {"type": "refusal", "refusal": "x"}]}]}
    assert response_text(summary_only)[:2] == ("<|reasoning|>\nA summary.\n\n<|assistant|>\nYes.", "completed")


RESPONSES_GATEWAYS = ("litellm-spend-log", "openai-split", "helicone", "langfuse", "cloudflare-ai-gateway")


@pytest.mark.parametrize("gateway", RESPONSES_GATEWAYS)
def test_a_responses_api_exchange_is_read_from_every_gateway(tmp_path: Path, gateway: str) -> None:
    """A /v1/responses request has ``input`` and ``instructions``, no ``messages``: split logs quarantined it,
    the others kept it with no prompt text (its size unknown, its text out of the search), and its answer
    (``output`` items) was no text either."""
    logs = _gateway_logs(tmp_path / "logs", gateway, [("resp", "acme", RESPONSES_BODY, 812)],
                         answers={"resp": _responses_answer("resp", 812, "Invoice 43.")})
    api.ingest(tmp_path / "case", [logs], config=_config())
    assert not pq.read_table(tmp_path / "case" / "quarantine.parquet").num_rows
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (row["prompt_text"], row["prompt_nontext_parts"], row["prompt_messages"]) == (RESPONSES_PROMPT, 2, 7)
    assert row["response_text"] == 'Invoice 43.\n<|tool_call|>\nlookup\n{"q": "next"}'
    assert row["reported_prompt_tokens"] == 812


@pytest.mark.parametrize("gateway", ["openai-split", "helicone", "langfuse"])
def test_a_leak_between_chat_and_responses_api_customers_is_found_both_ways(tmp_path: Path, gateway: str) -> None:
    """A Responses API customer's passage leaks into a chat customer's answer, and a chat customer's into a
    Responses API answer's reasoning: both were out of the search before."""
    other = LEAKED.replace("Margarethe", "Ingeborg").replace("Halvorsen", "Brekkestad").replace("Quillfeather", "Osterwald")
    requests = [("src-r", "initech", {"model": MODEL, "input": f"File this for me: {LEAKED}.", "max_output_tokens": 400}, 60),
                ("src-c", "globex", {"model": MODEL, "messages": [{"role": "user", "content": f"Keep this: {other}."}]}, 60),
                ("sus-c", "acme", {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]}, 2600),
                ("sus-r", "umbrella", {"model": MODEL, "input": PROMPT, "max_output_tokens": 400}, 2600)]
    logs = _gateway_logs(tmp_path / "logs", gateway, requests,
                         messages={"sus-c": {"role": "assistant", "content": f"Summary: {LEAKED} and no more."}},
                         answers={"sus-r": _responses_answer("sus-r", 2600, "Nothing to add.", f"Recall that {other} fits.")})
    cfg = _config(real_ceiling_tokens=2000)
    case = tmp_path / "case"
    api.ingest(case, [logs], config=cfg)
    api.scan(case, cfg)
    assert sorted(r["request_id"] for r in pq.read_table(case / "suspects.parquet").to_pylist()) == ["sus-c", "sus-r"]
    api.match(case, cfg)
    found = {(r["recipient_request_id"], r["source_request_id"], r["source_tenant_id"])
             for r in pq.read_table(case / "evidence.parquet").to_pylist()}
    assert found == {("sus-c", "src-r", "initech"), ("sus-r", "src-c", "globex")}


# --- shapes an adversarial review found: each read as its unstreamed form is, none a lost record ----------

@pytest.mark.parametrize("gateway", ["litellm-payload", "openai-split", "helicone"])
def test_tool_call_arguments_nested_deeper_than_python_recurses_keep_the_record(tmp_path: Path, gateway: str) -> None:
    """Arguments 1,010 levels deep (the loader reads 1,024; the standard library writes about 1,000) sent the
    whole record to quarantine once answers' tool calls were rendered: the row, and its answer, were gone."""
    message = {"role": "assistant", "content": "ok", "tool_calls": [{"id": "c", "type": "function",
                                                                     "function": {"name": "f", "arguments": {"DEEP": 1}}}]}
    logs = _gateway_logs(tmp_path / "logs", gateway, [("deep", "acme", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}, 10)],
                         {"deep": message})
    deep = '{"k":' * 1010 + '"leaf"' + "}" * 1010  # more levels than json.dumps writes: spliced in as text
    for path in logs.iterdir():
        text = path.read_text(encoding="utf-8")
        path.write_text(text.replace('{"DEEP": 1}', deep).replace('{\\"DEEP\\": 1}', deep.replace('"', '\\"')), encoding="utf-8")
        assert "DEEP" not in path.read_text(encoding="utf-8")
    api.ingest(tmp_path / "case", [logs], config=_config())
    assert not pq.read_table(tmp_path / "case" / "quarantine.parquet").num_rows
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert row["response_text"].startswith('ok\n<|tool_call|>\nf\n{"k":{"k":') and row["response_text"].count('{"k":') == 1010


# (delta or message, rendered): a whole message given as one streamed delta reads as it does unstreamed
ODD: list[dict[str, Any]] = [
    {"content": "", "function_call": {}},
    {"content": None, "function_call": {}},
    {"content": None, "tool_calls": {"function": {"name": "f", "arguments": "LEAK"}}},  # an object, not a list
    {"content": None, "function_call": "LEAK"},
    {"content": None, "tool_calls": [{"function": {"name": {"n": 1}, "arguments": "x"}}]},  # a name that is no string
    {"content": None, "tool_calls": [{"kind": "custom", "payload": "LEAK"}]},  # a call of another shape
    {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Mistral thinks"}]}, {"type": "text", "text": "Ok."}]},
    {"content": None, "tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "a"}},
                                     {"index": 1, "function": {"name": "g", "arguments": "b"}}]},
]


@pytest.mark.parametrize("message", ODD)
def test_an_odd_message_reads_the_same_streamed_whole_or_unstreamed(message: dict[str, Any]) -> None:
    unstreamed = response_text({"choices": [{"index": 0, "message": {"role": "assistant", **message}}]})[0]
    assert chunks_text([{"choices": [{"index": 0, "delta": message}]}])[0] == unstreamed
    assert "LEAK" not in json.dumps(message) or "LEAK" in unstreamed


def test_streamed_parallel_calls_without_an_index_stay_apart_by_id() -> None:
    chunks = [{"choices": [{"delta": {"tool_calls": [{"id": "a", "function": {"name": "get_weather", "arguments": '{"city":'}}]}}]},
              {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": '"Oslo"}'}}]}}]},  # no id: the call before
              {"choices": [{"delta": {"tool_calls": [{"id": "b", "function": {"name": "get_time", "arguments": '{"tz":"CET"}'}}]}}]}]
    assert chunks_text(chunks)[0] == '<|tool_call|>\nget_weather\n{"city":"Oslo"}\n<|tool_call|>\nget_time\n{"tz":"CET"}'


def test_mistral_thinking_parts_are_reasoning() -> None:
    message = {"role": "assistant", "content": [{"type": "thinking", "thinking": [{"type": "text", "text": "Hm."}]},
                                                {"type": "text", "text": "Yes."}]}
    assert response_text({"choices": [{"message": message}]})[0] == "<|reasoning|>\nHm.\n\n<|assistant|>\nYes."


def test_an_assistant_message_alone_and_responses_output_items_in_langfuse(tmp_path: Path) -> None:
    """A mapping profile pointing at the message, and Langfuse output holding a Responses API answer's items,
    read as no answer."""
    assert response_text({"role": "assistant", "content": "A", "reasoning_content": "LEAK"})[0] == \
        "<|reasoning|>\nLEAK\n\n<|assistant|>\nA"
    output = [{"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Think."}]},
              {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Said."}]},
              {"type": "function_call", "name": "f", "arguments": "{}"}]
    logs = _gateway_logs(tmp_path / "logs", "langfuse", [("lf", "acme", {"model": MODEL, "messages": [{"role": "user", "content": "q"}]}, 10)],
                         answers={"lf": output})  # type: ignore[dict-item]
    api.ingest(tmp_path / "case", [logs], config=_config())
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (row["response_text"], row["problems"]) == ("<|reasoning|>\nThink.\n\n<|assistant|>\nSaid.\n<|tool_call|>\nf\n{}", None)


# --- what a second review found ------------------------------------------------------------------------

@pytest.mark.parametrize("gateway", RESPONSES_GATEWAYS)
def test_a_responses_answer_carrying_error_null_is_no_failure(tmp_path: Path, gateway: str) -> None:
    """Every Responses API answer carries ``"error": null``: it was read as an error body, its text lost and
    the row marked failed."""
    logs = _gateway_logs(tmp_path / "logs", gateway, [("resp", "acme", RESPONSES_BODY, 1)],
                         answers={"resp": _responses_answer("resp", 1, "Invoice 43.")})
    api.ingest(tmp_path / "case", [logs], config=_config())
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (row["status"], row["response_text"].split("\n")[0], row["reported_prompt_tokens"]) == ("success", "Invoice 43.", 1)


@pytest.mark.parametrize("gateway", ["helicone", "langfuse", "openai-split"])
def test_a_part_or_item_type_that_is_no_string_is_no_error(tmp_path: Path, gateway: str) -> None:
    """A content part's or an output item's ``type`` given as a list or an object raised "unhashable type" and
    quarantined the record (and marked its neighbours damaged)."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": [{"type": {"k": 1}, "text": "x"}, {"type": "text", "text": "hello"}]}]}
    message = {"role": "assistant", "content": [{"type": ["x"], "text": "y"}, {"type": "text", "text": "fine"}]}
    logs = _gateway_logs(tmp_path / "logs", gateway, [("odd", "acme", body, 10)], {"odd": message})
    api.ingest(tmp_path / "case", [logs], config=_config())
    assert not pq.read_table(tmp_path / "case" / "quarantine.parquet").num_rows
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (row["prompt_text"], row["response_text"]) == ("<|user|>\nhello", "fine")


def test_an_output_of_strings_is_no_responses_answer() -> None:
    """Another provider's ``{"output": [strings]}`` (Replicate) read as an empty Responses answer, silently."""
    assert response_text({"status": "succeeded", "output": ["Hello", " world"]}) == (None, None, {})


@pytest.mark.parametrize("gateway", ["openai-split", "helicone"])
def test_stored_stream_events_of_another_api_are_read_or_left_unknown(tmp_path: Path, gateway: str) -> None:
    """Split logs' ``chunks`` and Helicone's ``streamed_data`` holding Anthropic's or the Responses API's events
    read as an empty answer; events of no known kind now leave the text unknown, not empty."""
    anthropic = [{"type": "message_start", "message": {"usage": {"input_tokens": 5}}},
                 {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                 {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "streamed words"}},
                 {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}]
    responses = [{"type": "response.completed", "response": _responses_answer("r", 7, "completed words")}]
    unknown = [{"type": "something.else"}]
    requests = [(rid, "acme", {"model": MODEL, "messages": [{"role": "user", "content": "q"}]}, 10) for rid in ("a", "r", "u")]
    logs = _gateway_logs(tmp_path / "logs", gateway, requests)
    for path in logs.iterdir():
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        for record, events in zip(records, (anthropic, responses, unknown)):
            if gateway == "openai-split" and "body" in record and "status_code" in record:
                del record["body"]
                record["chunks"] = events
            elif gateway == "helicone":
                record["response_body"] = json.dumps({"streamed_data": events})
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    api.ingest(tmp_path / "case", [logs], config=_config())
    rows = {r["request_id"]: r["response_text"] for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()}
    assert rows == {"a": "streamed words", "r": 'completed words\n<|tool_call|>\nlookup\n{"q": "next"}', "u": None}


def test_streamed_calls_with_no_index_and_with_an_id_stay_apart() -> None:
    chunks = [{"choices": [{"delta": {"tool_calls": [{"function": {"name": "f", "arguments": '{"x":1}'}}]}}]},
              {"choices": [{"delta": {"tool_calls": [{"id": "call_b", "function": {"name": "g", "arguments": '{"y":2}'}}]}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 1 << 62, "function": {"name": "h", "arguments": "{}"}}]}}]}]
    assert chunks_text(chunks)[0] == '<|tool_call|>\nf\n{"x":1}\n<|tool_call|>\ng\n{"y":2}\n<|tool_call|>\nh\n{}'


def test_streamed_calls_reusing_index_0_or_sent_whole_without_index_stay_apart() -> None:
    """Ollama (and LiteLLM's ollama_chat) send every call at index 0 with its own id; some servers send whole
    calls with neither: they were merged into one call ("read_file\n{...}{...}")."""
    reused = [{"choices": [{"delta": {"tool_calls": [{"index": 0, "id": f"call_{n}", "function": {"name": "read_file", "arguments": args}}]}}]}
              for n, args in ((1, '{"path":"a.rs"}'), (2, '{"path":"b.rs"}'))]
    assert chunks_text(reused)[0] == '<|tool_call|>\nread_file\n{"path":"a.rs"}\n<|tool_call|>\nread_file\n{"path":"b.rs"}'
    whole = {"content": None, "tool_calls": [{"function": {"name": "f", "arguments": '{"x":1}'}}, {"function": {"name": "g", "arguments": '{"y":2}'}}]}
    assert chunks_text([{"choices": [{"delta": whole}]}])[0] == response_text({"choices": [{"message": whole}]})[0] == \
        '<|tool_call|>\nf\n{"x":1}\n<|tool_call|>\ng\n{"y":2}'


@pytest.mark.parametrize("gateway", ["litellm-spend-log", "helicone", "cloudflare-ai-gateway", "openai-split"])
def test_an_embeddings_or_speech_input_is_no_prompt(tmp_path: Path, gateway: str) -> None:
    """A string ``input`` became a chat prompt whatever the request: an embedded document was then a source of
    leaks. Only a body with a key a Responses API request has makes it one."""
    bodies = [("emb", {"model": "embed", "input": "secret doc", "encoding_format": "float"}),
              ("tts", {"model": "tts", "input": "read this", "voice": "alloy", "instructions": "calm"}),
              ("bare", {"model": "embed", "input": "secret doc"}),
              ("resp", {"model": MODEL, "input": "a real question", "max_output_tokens": 50})]
    logs = _gateway_logs(tmp_path / "logs", gateway, [(rid, "acme", body, 10) for rid, body in bodies])
    api.ingest(tmp_path / "case", [logs], config=_config())
    rows = {r["request_id"]: r["prompt_text"] for r in pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()}
    assert rows.get("resp") == "<|user|>\na real question"
    assert all(rows.get(rid) is None for rid in ("emb", "tts", "bare"))


@pytest.mark.parametrize("gateway", ["litellm-spend-log", "helicone", "cloudflare-ai-gateway"])
def test_a_bare_responses_request_is_known_by_its_answer(tmp_path: Path, gateway: str) -> None:
    """The SDK's ``responses.create(model=..., input=...)`` sends nothing else: where the record holds the
    answer, a Responses API answer says the ``input`` is a prompt."""
    logs = _gateway_logs(tmp_path / "logs", gateway, [("bare", "acme", {"model": MODEL, "input": "a real question"}, 10)],
                         answers={"bare": _responses_answer("bare", 10, "An answer.")})
    api.ingest(tmp_path / "case", [logs], config=_config())
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert row["prompt_text"] == "<|user|>\na real question"


# --- what a third review found -------------------------------------------------------------------------

MCP_BODY = {"model": MODEL, "tools": [{"type": "mcp", "server_label": "git"}], "input": [
    {"role": "user", "content": "list my repos"},
    {"type": "mcp_list_tools", "server_label": "git", "tools": [{"name": "repos"}]},
    {"type": "mcp_call", "name": "repos", "arguments": "{}", "output": "alpha, beta"},
    {"role": "user", "content": "and the newest?"}]}


@pytest.mark.parametrize("gateway", ["openai-split", "langfuse", "helicone"])
def test_a_multi_turn_responses_input_with_new_item_kinds_is_read(tmp_path: Path, gateway: str) -> None:
    """Items the Responses API added later (MCP listings and calls) made the whole input no prompt: split logs
    and Langfuse quarantined it, the others kept no text."""
    logs = _gateway_logs(tmp_path / "logs", gateway, [("mcp", "acme", MCP_BODY, 10)])
    api.ingest(tmp_path / "case", [logs], config=_config())
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert row["prompt_text"] == ('<|tools|>\n{"server_label":"git","type":"mcp"}\n\n<|user|>\nlist my repos\n\n'
                                  '<|assistant|>\n<|tool_call|>\nrepos\n{}\n\n<|tool|>\nalpha, beta\n\n<|user|>\nand the newest?')


def test_langfuse_knows_a_bare_responses_input_by_its_output(tmp_path: Path) -> None:
    logs = _gateway_logs(tmp_path / "logs", "langfuse", [("bare", "acme", {"model": MODEL, "input": "a real question"}, 10)],
                         answers={"bare": _responses_answer("bare", 10, "An answer.")})
    api.ingest(tmp_path / "case", [logs], config=_config())
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert row["prompt_text"] == "<|user|>\na real question"


@pytest.mark.parametrize("gateway", ["openai-split", "helicone", "langfuse", "cloudflare-ai-gateway"])
@pytest.mark.parametrize("body", [{"error": {}}, {"error": ""}, {"error": None, "detail": "upstream timeout"},
                                  {"object": "error", "message": "too long", "type": "BadRequestError", "code": 400},
                                  {"object": "response", "status": "failed", "error": {"code": "server_error"}, "output": []}])
def test_an_error_body_still_marks_the_row_failed(tmp_path: Path, gateway: str, body: dict[str, Any]) -> None:
    """An answer with an ``error`` key is an error, as it always was; only a Responses answer's null error is not."""
    logs = _gateway_logs(tmp_path / "logs", gateway, [("e", "acme", {"model": MODEL, "messages": [{"role": "user", "content": "q"}]}, 10)],
                         answers={"e": body})
    api.ingest(tmp_path / "case", [logs], config=_config())
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert (row["status"], row["response_text"]) == ("failure", None)


def test_a_responses_stream_cut_before_its_last_event_keeps_what_it_streamed() -> None:
    done_item = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "LEAKED passage"}]}
    assert chunks_text([{"type": "response.created", "response": {}},
                        {"type": "response.output_item.done", "item": done_item}])[0] == "LEAKED passage"
    assert chunks_text([{"type": "response.created", "response": {}},
                        {"type": "response.reasoning_text.delta", "output_index": 0, "delta": "Thinking "},
                        {"type": "response.output_text.delta", "output_index": 1, "delta": "LEAKED "},
                        {"type": "response.output_text.delta", "output_index": 1, "delta": "passage"}])[0] == \
        "<|reasoning|>\nThinking \n\n<|assistant|>\nLEAKED passage"
    # The item being written when the stream stopped keeps its text beside the items that finished.
    assert chunks_text([{"type": "response.output_item.done", "output_index": 0,
                         "item": {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Think."}]}},
                        {"type": "response.output_item.added", "output_index": 1, "item": {"type": "message"}},
                        {"type": "response.output_text.delta", "output_index": 1, "delta": "LEAKED PASSAGE"}])[0] == \
        "<|reasoning|>\nThink.\n\n<|assistant|>\nLEAKED PASSAGE"


# --- what a fourth review found ------------------------------------------------------------------------

def test_chat_shapes_of_other_libraries_read_as_before() -> None:
    """A LangChain message dumped with its own ``type`` (human, ai) made the whole list Responses items: the
    prompt was empty. Chat streams holding only an error or a usage object read as unknown, not empty."""
    from forensics.ingest.fields import body_prompt
    assert body_prompt({"messages": [{"type": "human", "content": "langchain human"}, {"type": "ai", "content": "langchain ai"}]},
                       "request") == ("<|user|>\nlangchain human\n\n<|user|>\nlangchain ai", 0, 2)
    for chunks in ([{"error": {"message": "boom"}}], [{"object": "error", "type": "BadRequestError", "message": "bad"}],
                   [{"usage": {"prompt_tokens": 3}}], [{"candidates": [{"content": {"parts": [{"text": "x"}]}}]}]):
        assert chunks_text(chunks)[0] == ""  # as before this round: no text (Gemini's stream is not read)


def test_instructions_in_a_chat_body_are_not_read() -> None:
    """``instructions`` is a Responses API key; a chat body carrying one (the engines ignore it) gained a system block."""
    from forensics.ingest.fields import body_prompt
    assert body_prompt({"messages": [{"role": "user", "content": "q"}], "instructions": "ignored"}, "request")[0] == "<|user|>\nq"


@pytest.mark.parametrize(("output", "expected"), [
    ({"text": "answer", "reasoning": None}, "answer"),
    ({"text": "answer", "tool_calls": []}, "answer"),
    ({"text": "answer", "reasoning": [{"type": "reasoning", "text": "x"}]}, "answer"),  # the Vercel AI SDK's shape
    ({"text": "answer", "reasoning": "thinking"}, "<|reasoning|>\nthinking\n\n<|assistant|>\nanswer"),
])
def test_a_langfuse_output_with_text_keeps_it(output: dict[str, Any], expected: str) -> None:
    from forensics.ingest.formats.langfuse import LangfuseParser
    assert LangfuseParser._response(output, []) == (expected, None, {})


def test_an_input_of_typed_items_of_no_responses_kind_is_no_prompt() -> None:
    """An embeddings API's typed inputs (``[{"type": "query", "text": ...}]``) became one empty user message."""
    from forensics.ingest.fields import body_prompt
    assert body_prompt({"model": "embed", "input": [{"type": "query", "text": "q"}]}, "request") == (None, 0, 0)
    assert body_prompt({"model": "m", "input": [{"type": "mcp_list_tools", "tools": []}, {"type": "message", "role": "user",
                                                                                         "content": "hi"}]}, "request")[0] == "<|user|>\nhi"


@pytest.mark.parametrize("gateway", ["litellm-spend-log", "litellm-payload"])
def test_a_legacy_prompt_list_through_litellm_is_read_not_quarantined(tmp_path: Path, gateway: str) -> None:
    """A /v1/completions request whose ``prompt`` is a list of strings was read as chat messages through LiteLLM
    and quarantined ("messages[0] is a str"), its neighbours marked damaged; the other gateways read it."""
    body = {"model": MODEL, "prompt": ["first part", "second part"], "messages": ["first part", "second part"]}
    logs = _gateway_logs(tmp_path / "logs", gateway, [("legacy", "acme", body, 10)])
    if gateway == "litellm-spend-log":  # the spend log keeps the prompt in the request body only
        path = logs / "spend.jsonl"
        record = json.loads(path.read_text(encoding="utf-8"))
        del record["proxy_server_request"]["messages"]
        path.write_text(json.dumps(record) + "\n", encoding="utf-8")
    api.ingest(tmp_path / "case", [logs], config=_config())
    assert not pq.read_table(tmp_path / "case" / "quarantine.parquet").num_rows
    (row,) = pq.read_table(tmp_path / "case" / "exchanges.parquet").to_pylist()
    assert row["prompt_text"] == "first part\n\nsecond part"


def test_two_choices_under_one_index_both_keep_their_text() -> None:
    """The later choice replaced the earlier one's text (maybe the leak), and a boolean index was read as 1."""
    same = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "LEAKED text A"}},
                        {"index": 0, "message": {"role": "assistant", "content": "B"}}]}
    boolean = {"choices": [{"index": True, "message": {"role": "assistant", "content": "LEAKED text C"}},
                           {"index": 1, "message": {"role": "assistant", "content": "D"}}]}
    assert response_text(same)[0] == schema.render_choices(["LEAKED text A", "B"])
    assert response_text(boolean)[0] == schema.render_choices(["LEAKED text C", "D"])
    ordered = {"choices": [{"index": 1, "message": {"content": "second"}}, {"index": 0, "message": {"content": "first"}}]}
    assert response_text(ordered)[0] == schema.render_choices(["first", "second"])


def test_a_streamed_boolean_index_is_no_index() -> None:
    chunks = [{"choices": [{"index": True, "delta": {"content": "LEAKED "}}]},
              {"choices": [{"index": 1, "delta": {"content": "other"}}]},
              {"choices": [{"index": 0, "delta": {"content": "text"}}]}]
    assert chunks_text(chunks, "response")[0] == schema.render_choices(["LEAKED text", "other"])
