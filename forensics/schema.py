"""The canonical tables of a case, one Arrow schema each.

Every ingester yields record batches validated against these schemas; every later stage reads
them. Columns may be added; never renamed or dropped (other stages and tools read them).

How a chat ``messages`` array becomes one prompt text
-----------------------------------------------------
Later stages report character offsets into ``prompt_text``, so its construction is a contract:

* Messages are taken in array order. Each becomes a block ``<|ROLE|>\\nTEXT`` where ``ROLE`` is the
  message's ``role`` (``user`` when absent) and ``TEXT`` its content; blocks are joined with
  ``\\n\\n`` (see :func:`render_messages`).
* A string ``content`` is used as is (no normalisation: CRLF, accents and emoji are kept byte for
  byte, so offsets point at what the customer sent).
* A list ``content`` contributes its ``text`` parts (``{"type": "text", "text": ...}``, or a bare
  string item) joined with ``\\n``; other parts (images, audio, files) carry no prompt text and are
  counted in ``prompt_nontext_parts``.
* ``null`` content (an assistant turn with only tool calls) contributes an empty ``TEXT``.
* The model reads more than the message texts, and the engine counts it: tool calls, tool
  definitions and a system prompt given beside the messages are rendered too (see
  :func:`render_request`), so the prompt's size, token count and matchable text include them:

  - A message's tool calls (``tool_calls``, each ``{"function": {"name", "arguments"}}``, and the
    legacy ``function_call``) follow its ``TEXT``, each as ``<|tool_call|>\\nNAME\\nARGUMENTS``,
    joined with ``\\n`` (a message with no text is its calls alone). ``ARGUMENTS`` is the string as
    sent (what the model wrote, byte for byte); arguments given as an object are written as compact
    JSON with sorted keys, and so is a call of another shape (no ``function``, ``name`` or
    ``arguments``), whole, after ``<|tool_call|>\\n``.
  - In a list ``content``, an Anthropic ``tool_use`` part is a call like those, its ``input`` as
    ``ARGUMENTS``, and a ``tool_result`` part contributes the text of its ``content`` (a string or
    text parts; its other parts are counted in ``prompt_nontext_parts``).
  - The request's top-level ``system`` (Anthropic's Messages API: a string, used as is, or a list
    of text blocks, read as a list ``content``; anything else as compact JSON with sorted keys)
    comes first, as a block ``<|system|>\\nTEXT``.
  - Then the tool definitions (``tools``, then the legacy ``functions``), after the leading
    ``system`` messages too (LiteLLM's callback payload moves a top-level system into them), one block
    ``<|tools|>\\n`` followed by each definition as compact JSON with sorted keys (a string as it
    is), one per line.
  - "Compact JSON with sorted keys" is orjson's (no spaces, non-ASCII text as it is), so the same
    request gives the same text on every run whatever the key order it was logged with.
  - The system and tools blocks each count as a message in ``prompt_messages``.

  A request with none of these renders exactly as its messages alone.
* A legacy completions ``prompt`` (a string, or a list of strings) is used without role markers;
  a list is joined with ``\\n\\n``.
* A Responses API request (``/v1/responses``) renders as a chat request: its ``instructions`` are the
  top-level system, its ``input`` (a string: one user message; or a list of items) the messages; a
  list content's ``input_text`` and ``output_text`` parts are text parts; see :func:`_from_items`
  for the items that are not messages.

The response text is what the customer received in ``choices[0]``: its assistant content (for
streams: the ``delta.content`` pieces of choice 0 concatenated in order), and what a reasoning model
or an agent's model wrote beside it, which stale pages reach as much as the content (see
:func:`render_answer`):

* The reasoning (``reasoning_content``, as SGLang, DeepSeek and LiteLLM write it, or ``reasoning``,
  as vLLM and OpenRouter do; for streams their pieces in order; ``thinking`` parts of a list
  content, Anthropic's a string, Mistral's a list of text parts) comes first, as a block ``<|reasoning|>\\nREASONING``; the answer follows it as a
  block ``<|assistant|>\\nTEXT`` (``\\n\\n`` between them), and is left out when it is empty (an
  answer cut short while the model was still reasoning).
* The tool calls (``tool_calls``, the legacy ``function_call``, Anthropic ``tool_use`` parts) follow
  the content as the prompt's do: ``<|tool_call|>\\nNAME\\nARGUMENTS``, joined with ``\\n``. A
  streamed call is its pieces joined per call (by ``index``, else by ``id``, else the call of the
  piece before): the name, and the arguments in order.
* An Anthropic Messages answer (``content`` a list of blocks, no ``choices``) is read the same way,
  and so is a Responses API answer (its ``output`` items: ``reasoning`` items' ``reasoning_text``
  content, else their summary, as the reasoning; ``message`` items' ``output_text`` parts as the
  content; ``function_call`` items as the tool calls).

A response with none of these renders exactly as its content alone. When a response has several
choices, each becomes a block ``<|choice N|>\\nTEXT`` joined with ``\\n\\n`` (every choice may
carry foreign content). (The reasoning of earlier assistant turns resent in a request is not part
of the prompt text: most chat templates drop it, and it is matched as the earlier answer's text.)

Damaged input: the ``damage`` column
------------------------------------
``exchanges.damage`` says whether the record a row was built from can be trusted: null when it is
clean, else the reasons among :data:`DAMAGE_REASONS`, each once, joined with ``;`` in that
(alphabetical) order, e.g. ``quarantined_neighbour;truncated_file``:

* ``truncated_file``: the record comes from a file whose compressed stream is damaged. When the
  stream is cut short (or the file could not be read on), only the last record read before the cut
  is marked: everything before it decoded exactly as written, and what is missing after it is a
  gap of the case (the file entry's ``stream_damage`` in ``manifest.json``), not a defect of these
  rows. When the stream is corrupt (bad data, checksum mismatch), every record of the file is
  marked: garbage may have been decoded before the damage was noticed. So is every record of an
  uncompressed file whose bytes changed between its hash and its reading (a log rewritten, replaced
  or cut short while it was ingested: its rows are not those its SHA-256 covers).
* ``quarantined_neighbour``: a line within :data:`DAMAGE_NEIGHBOUR_LINES` physical lines of the
  record, in the same file, was quarantined (bad JSON, bad UTF-8, a field that could not be read):
  the file is partly garbled next to it. The quarantine row that stands for a damaged stream's
  unreadable rest does not count (that is ``truncated_file``).
* ``truncated_copy_only``: the kept copy of the request holds LiteLLM's truncated spend-log string
  (``prompt_truncated`` or ``response_truncated``): no copy with the whole text was ingested.

A request seen in several exports is one row; among equally complete copies a clean one wins
(see forensics.ingest.finalize), so a record with a clean copy elsewhere is not marked, and the
row's reasons are those of the copy that was kept. For split logs a row has the reasons of both
its request and its response half. :func:`damage_reasons` reads the column back.

Times are ``timestamp[us, tz=UTC]``. ``bootstrap_room`` is ``uint64`` (SGLang draws it from
``[0, 2**63)`` but we do not rely on that).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa

#: The format (name/version) each stage writes into its JSON record, so a reader can tell what it
#: holds: the version goes up when a key changes meaning or goes away (adding a key does not).
SCAN_FORMAT = "forensics-scan/1"
MATCH_FORMAT = "forensics-match/1"
CASE_FORMAT = "forensics-case/1"

TS = pa.timestamp("us", tz="UTC")

#: Why a row's record cannot be fully trusted (``exchanges.damage``), in the order they are joined.
DAMAGE_REASONS = ("quarantined_neighbour", "truncated_copy_only", "truncated_file")
#: A quarantined line this many lines (or fewer) before or after a record marks it quarantined_neighbour.
DAMAGE_NEIGHBOUR_LINES = 1

#: Where a trusted ``prompt_tokens`` figure came from, best first.
TOKEN_SOURCES = ("tokenizer", "engine", "reported", "estimate", "unknown")

EXCHANGES = pa.schema(
    [
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("tenant_id", pa.string()),
        pa.field("tenant_field", pa.string()),  # which input field named the tenant
        pa.field("user_id", pa.string()),
        pa.field("model", pa.string()),  # the name the customer asked for (model_group / body.model)
        pa.field("model_routed", pa.string()),  # the deployment it was routed to, when logged
        pa.field("received_at", TS),
        pa.field("completed_at", TS),
        pa.field("status", pa.string()),  # success | failure | incomplete (request never answered)
        pa.field("status_code", pa.int32()),
        pa.field("finish_reason", pa.string()),
        pa.field("stream", pa.bool_()),
        pa.field("prompt_text", pa.large_string()),
        pa.field("prompt_chars", pa.int64()),  # length of the original prompt (known even if truncated)
        pa.field("prompt_bytes", pa.int64()),  # its UTF-8 size (reconstructed when truncated)
        pa.field("prompt_messages", pa.int32()),  # messages in the chat request
        pa.field("prompt_truncated", pa.bool_()),  # the log kept only head and tail of the prompt
        pa.field("prompt_nontext_parts", pa.int32()),
        pa.field("response_text", pa.large_string()),
        pa.field("response_truncated", pa.bool_()),
        pa.field("reported_prompt_tokens", pa.int64()),  # the figure the log gave, untouched
        pa.field("reported_completion_tokens", pa.int64()),
        pa.field("reported_prompt_tokens_plausible", pa.bool_()),  # null when it cannot be judged
        pa.field("prompt_tokens", pa.int64()),  # the trusted figure
        pa.field("prompt_tokens_source", pa.string()),  # one of TOKEN_SOURCES
        pa.field("prompt_tokens_low", pa.int64()),  # error band of prompt_tokens (equal when exact)
        pa.field("prompt_tokens_high", pa.int64()),
        pa.field("completion_tokens", pa.int64()),
        pa.field("rid", pa.string()),  # the engine's request id, when it differs from request_id
        pa.field("bootstrap_room", pa.uint64()),
        pa.field("prefill_node", pa.string()),
        pa.field("decode_node", pa.string()),
        pa.field("orphan", pa.string()),  # split logs: request_only | response_only; else null
        pa.field("zone_assumed", pa.string()),  # zone used for zone-less times, null when all had one
        pa.field("record_kind", pa.string()),  # spend_log | logging_payload | split | ...
        pa.field("source_format", pa.string()),
        pa.field("source_file", pa.string()),
        pa.field("source_sha256", pa.string()),
        pa.field("source_line", pa.int64()),
        pa.field("response_source_file", pa.string()),  # where the answer was logged when not in the record itself:
        # a split log's response half, or the decode node's request.finished line of a record that logged none
        pa.field("response_source_line", pa.int64()),
        pa.field("problems", pa.string()),  # fields that could not be used and were left null
        pa.field("record_hash", pa.string()),  # xxh3-128 of the record's line, for de-duplication
        pa.field("damage", pa.string()),  # null when clean, else ';'-joined DAMAGE_REASONS (see above)
    ]
)

#: Columns of the exchanges table that only the finaliser can decide (they depend on other lines
#: and other files), absent from the per-file staging Parquet.
FINALIZED_EXCHANGE_COLUMNS = ("damage",)
#: The exchanges schema of the per-file staging Parquet.
EXCHANGES_STAGED = pa.schema([f for f in EXCHANGES if f.name not in FINALIZED_EXCHANGE_COLUMNS])

#: Event kinds recognised in engine logs; anything else is ``unknown`` with its raw text.
ENGINE_EVENT_KINDS = (
    "startup",  # max_total_num_tokens / context_len line
    "request_received",
    "request_finished",
    "output_delta",  # vLLM: one streamed piece of a response ("Generated response X (streaming delta)")
    "over_limit",  # "Input length (N tokens) exceeds the maximum allowed length"
    "exceeds_max_tokens",  # "Request X exceeds the maximum number of tokens: N > M"
    "req_time_stats",
    "context_corruption",
    "bootstrap_failed",
    "transfer_failed",
    "kv_transfer_error",
    "prefill_batch",
    "decode_batch",
    "unknown",
)

ENGINE_EVENTS = pa.schema(
    [
        pa.field("node", pa.string(), nullable=False),
        pa.field("rank", pa.int32()),
        pa.field("role", pa.string()),  # prefill | decode | null when the file does not tell
        pa.field("time", TS),
        pa.field("tp", pa.string()),  # TP rank label of a text line ("TP0")
        pa.field("event", pa.string(), nullable=False),  # one of ENGINE_EVENT_KINDS
        pa.field("rid", pa.string()),
        pa.field("bootstrap_room", pa.uint64()),
        pa.field("other_bootstrap_room", pa.uint64()),  # context corruption: the room it got
        pa.field("input_len", pa.int64()),  # tokens of the real input (over-limit) or as processed
        pa.field("output_len", pa.int64()),
        pa.field("limit", pa.int64()),  # the limit an over-limit line names
        pa.field("max_total_num_tokens", pa.int64()),
        pa.field("context_len", pa.int64()),
        pa.field("finish_reason", pa.string()),
        pa.field("prompt_tokens", pa.int64()),  # meta_info.prompt_tokens as the engine reported it
        pa.field("completion_tokens", pa.int64()),
        pa.field("output_text", pa.large_string()),
        pa.field("message", pa.large_string(), nullable=False),  # the raw line (JSON or text)
        pa.field("zone_assumed", pa.string()),
        pa.field("source_file", pa.string()),
        pa.field("source_sha256", pa.string()),
        pa.field("source_line", pa.int64()),
    ]
)

QUARANTINE = pa.schema(
    [
        pa.field("source_file", pa.string(), nullable=False),
        pa.field("source_sha256", pa.string()),
        pa.field("source_line", pa.int64()),  # null when the problem is the whole file
        pa.field("source_format", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("excerpt", pa.string()),  # at most EXCERPT_CHARS characters of the line
    ]
)

EXCERPT_CHARS = 200

SUSPECTS = pa.schema(
    [
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("tenant_id", pa.string()),
        pa.field("model", pa.string()),
        pa.field("received_at", TS),
        pa.field("completed_at", TS),
        pa.field("prompt_tokens", pa.int64()),
        pa.field("prompt_tokens_source", pa.string()),
        pa.field("prompt_tokens_low", pa.int64()),
        pa.field("prompt_tokens_high", pa.int64()),
        pa.field("reported_prompt_tokens", pa.int64()),  # the log's own figure (the placeholder's 1 during the bug)
        pa.field("reasons", pa.string()),  # sorted, ';'-joined query ids
        pa.field("borderline", pa.bool_()),  # only an estimate straddling the ceiling says so
        pa.field("engine_signature", pa.bool_()),
        pa.field("prefill_node", pa.string()),
        pa.field("decode_node", pa.string()),
        pa.field("bootstrap_room", pa.uint64()),
    ]
)

# The CSV files of spec/outputs.md: each column listed once, here (scan, match and report read these).
#: Columns of suspects.csv: the contract's first (spec/outputs.md), then the rest of the table.
SUSPECTS_CSV = (
    "request_id", "tenant_id", "model", "received_at", "prompt_tokens", "prompt_tokens_source", "reasons",
    "completed_at", "prompt_tokens_low", "prompt_tokens_high", "reported_prompt_tokens", "borderline",
    "engine_signature", "prefill_node", "decode_node", "bootstrap_room",
)
#: Columns of evidence.csv, in order: the contract of spec/outputs.md, then ours.
EVIDENCE_CSV = (
    "finding_id", "recipient_request_id", "recipient_tenant_id", "source_request_id", "source_tenant_id",
    "source_kind", "tier", "score", "matched_tokens", "recipient_start", "recipient_end", "source_start",
    "source_end", "rarity", "relation", "tier_rule", "longest_run", "informative_tokens", "regions",
    "other_source_requests", "expected_by_chance", "strength_bits", "same_decode_node", "recipient_decode_node",
    "source_decode_node", "seconds_before", "records_since_source_on_node", "mechanism_factor",
    "expected_by_chance_with_mechanism", "recipient_damage", "source_damage", "passages", "records_since_source_on_model",
)
#: Columns of review.csv: evidence.csv's, then why the candidate put nobody on the list.
REVIEW_CSV = EVIDENCE_CSV + ("why_not_notified",)

TIERS = ("confirmed", "probable", "possible")

EVIDENCE = pa.schema(
    [
        pa.field("finding_id", pa.string(), nullable=False),
        pa.field("recipient_request_id", pa.string(), nullable=False),
        pa.field("recipient_tenant_id", pa.string()),
        pa.field("source_request_id", pa.string(), nullable=False),
        pa.field("source_tenant_id", pa.string()),
        pa.field("source_kind", pa.string()),  # prompt | response
        pa.field("relation", pa.string()),  # cross_tenant | same_tenant
        pa.field("tier", pa.string()),  # one of TIERS
        pa.field("tier_rule", pa.string()),  # the rule that set the tier
        pa.field("score", pa.float64()),  # 0..100 alignment similarity
        pa.field("matched_tokens", pa.int64()),
        pa.field("longest_run", pa.int64()),
        pa.field("recipient_start", pa.int64()),  # character offsets, end exclusive
        pa.field("recipient_end", pa.int64()),
        pa.field("source_start", pa.int64()),
        pa.field("source_end", pa.int64()),
        pa.field("rarity", pa.float64()),  # 1.0 = every matched k-gram unique to the source tenant
        pa.field("informative_tokens", pa.int64()),  # matched tokens neither own context nor common text
        pa.field("regions", pa.int64()),  # separate matching regions of this pair (the row shows the best)
        pa.field("other_source_requests", pa.int64()),  # more requests of the source tenant holding this passage
        pa.field("expected_by_chance", pa.float64()),  # E-value: matches this strong expected among unrelated texts
        pa.field("strength_bits", pa.float64()),  # information in the informative matched tokens (match/chance.py)
        pa.field("same_decode_node", pa.bool_()),  # null when either decode node is unknown
        pa.field("recipient_decode_node", pa.string()),
        pa.field("source_decode_node", pa.string()),
        pa.field("seconds_before", pa.float64()),  # source received this long before the suspect request
        pa.field("records_since_source_on_node", pa.int64()),  # records that decode node served since the source (with those the engine logs place nowhere)
        pa.field("records_since_source_on_model", pa.int64()),  # gateway logs only: records of the case's models received since the source, on any node
        pa.field("mechanism_factor", pa.float64()),  # chance of a source this recent on that node (null: not on it)
        pa.field("expected_by_chance_with_mechanism", pa.float64()),  # E-value of expected_by_chance x mechanism_factor
        pa.field("recipient_damage", pa.string()),  # exchanges.damage of the suspect record (null: clean)
        pa.field("source_damage", pa.string()),  # exchanges.damage of the source record (null: clean)
        pa.field("passages", pa.string()),  # every passage: recipient_start:end=source_start:end, ';'-joined
    ]
)

#: Candidates that put nobody on the list (review.csv): the evidence columns and why.
REVIEW = pa.schema(list(EVIDENCE) + [pa.field("why_not_notified", pa.string())])

#: Exchanges logged twice under two customer ids that the ingest folded into one (forensics.ingest.copies): each row
#: left the exchanges table, and names the row it is a copy of.
LOGGED_TWICE = pa.schema(
    [
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("tenant_id", pa.string()),
        pa.field("source_file", pa.string()),
        pa.field("source_line", pa.int64()),
        pa.field("received_at", TS),
        pa.field("kept_request_id", pa.string()),  # the row kept in exchanges
        pa.field("kept_tenant_id", pa.string()),
        pa.field("prompts", pa.string()),  # how the two prompts are one request's: same | short | held | cut | unknown
    ]
)

TABLES: Mapping[str, pa.Schema] = {
    "exchanges": EXCHANGES,
    "engine_events": ENGINE_EVENTS,
    "quarantine": QUARANTINE,
    "suspects": SUSPECTS,
    "evidence": EVIDENCE,
    "review": REVIEW,
    "logged_twice": LOGGED_TWICE,
}


#: Content part types whose ``text`` is text: Chat Completions' and Anthropic's ``text``, the Responses
#: API's ``input_text`` (a request) and ``output_text`` (an answer, or an earlier one resent).
TEXT_PARTS = ("text", "input_text", "output_text")


def _content_text(content: Any, tool_parts: str | None = None) -> tuple[str, int]:
    """Text of one message ``content`` and how many non-text parts it had. With ``tool_parts`` (a
    prompt's content, not an answer's: where it is, for errors) Anthropic ``tool_use`` and
    ``tool_result`` parts are text too."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    if isinstance(content, list):
        texts: list[str] = []
        nontext = 0
        for j, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") in TEXT_PARTS and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif tool_parts and isinstance(part, Mapping) and part.get("type") == "tool_use":
                texts.append(call_text(part.get("name"), part.get("input"), f"{tool_parts}[{j}]"))
            elif tool_parts and isinstance(part, Mapping) and part.get("type") == "tool_result":
                result = part.get("content")
                if result is None or isinstance(result, str | list):
                    text, n = _content_text(result)
                else:
                    text, n = json_text(result, f"{tool_parts}[{j}].content"), 0
                texts.append(text)
                nontext += n
            else:
                nontext += 1
        return "\n".join(texts), nontext
    raise TypeError(f"message content is a {type(content).__name__}, expected a string or a list of parts")


def json_text(value: Any, where: str) -> str:
    """``value`` as compact JSON with sorted keys (non-ASCII text as it is): the same text every run.

    orjson writes at most 255 levels; the loader reads up to 1,024, so a deeper value (valid JSON a
    client sent) is written by the standard library instead, and one deeper than it recurses (about
    1,000 levels) without recursion. Raises ``TypeError`` naming ``where`` only for a value none can write."""
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS).decode("utf-8")
    except orjson.JSONEncodeError:
        pass
    try:
        return json.dumps(value, default=str, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except RecursionError:
        return _json_deep(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{where} cannot be written as JSON ({type(exc).__name__})") from None


class _Raw(str):
    """Text :func:`_json_deep` writes as it is (a bracket, a separator, a key)."""


def _json_deep(value: Any) -> str:
    """What ``json.dumps`` with sorted keys and compact separators writes, for a value nested deeper than
    it can recurse: the same text, built with a stack of what is left to write."""
    out: list[str] = []
    todo: list[Any] = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, _Raw):
            out.append(item)
        elif isinstance(item, Mapping):
            out.append("{")
            todo.append(_Raw("}"))
            keys = sorted(item, key=str)
            for i in range(len(keys) - 1, -1, -1):
                todo.append(item[keys[i]])
                todo.append(_Raw(("," if i else "") + json.dumps(str(keys[i]), ensure_ascii=False) + ":"))
        elif isinstance(item, list | tuple):
            out.append("[")
            todo.append(_Raw("]"))
            for i in range(len(item) - 1, -1, -1):
                todo.append(item[i])
                if i:
                    todo.append(_Raw(","))
        else:
            out.append(json.dumps(item, default=str, ensure_ascii=False))
    return "".join(out)


def call_text(name: Any, arguments: Any, where: str) -> str:
    """One tool call as text (in a prompt or an answer): ``<|tool_call|>``, its name and its arguments on three lines."""
    name_text = name if isinstance(name, str) else "" if name is None else json_text(name, where)
    args_text = arguments if isinstance(arguments, str) else "" if arguments is None else json_text(arguments, where)
    return f"<|tool_call|>\n{name_text}\n{args_text}"


def _calls_text(msg: Mapping[str, Any], where: str) -> list[str]:
    """The tool calls of one message (legacy ``function_call``, then ``tool_calls``) as prompt text."""
    texts: list[str] = []
    for key in ("function_call", "tool_calls"):
        value = msg.get(key)
        if absent(value):
            continue
        for j, call in enumerate(value if isinstance(value, list) else [value]):
            at = f"{where}.{key}[{j}]" if isinstance(value, list) else f"{where}.{key}"
            function = call.get("function") if isinstance(call, Mapping) and "function" in call else call
            if isinstance(function, Mapping) and ("name" in function or "arguments" in function):
                texts.append(call_text(function.get("name"), function.get("arguments"), at))
            else:  # a call of another shape: all of it
                texts.append(f"<|tool_call|>\n{json_text(call, at)}")
    return texts


def absent(value: Any) -> bool:
    """A request part that holds nothing: null, an empty string, list or object."""
    return value is None or (isinstance(value, str | list | Mapping) and not value)


def request_parts(body: Mapping[str, Any]) -> tuple[Any, list[Any]]:
    """What a chat request body holds beside its messages that the model reads: its top-level
    ``system`` and its tool definitions (``tools``, then the legacy ``functions``), for
    :func:`render_request`."""
    tools: list[Any] = []
    for key in ("tools", "functions"):
        value = body.get(key)
        if not absent(value):
            tools.extend(value if isinstance(value, list) else [value])
    return body.get("system"), tools


def render_request(messages: Sequence[Any], system: Any = None, tools: Sequence[Any] = ()) -> tuple[str, int, int]:
    """Render a chat request into the canonical prompt text (see the module notes): the top-level
    ``system``, the tool definitions, then the ``messages`` with their tool calls.

    Returns the text, the number of non-text parts and the number of messages (each message, and
    the system and tools blocks when present). Raises ``TypeError`` (with a message fit for a
    quarantine row) when ``messages`` is not a list of message objects, or a part cannot be read.
    A Responses API input list (items with a ``type`` and no ``role``) is read as its messages
    (see :func:`_from_items`).
    """
    if not isinstance(messages, list):
        raise TypeError(f"messages is a {type(messages).__name__}, expected a list")
    blocks: list[str] = []
    nontext = 0
    if any(isinstance(m, Mapping) and "role" not in m and responses_kind(m.get("type")) for m in messages):
        messages, nontext = _from_items(messages)  # a Responses API input (LiteLLM logs it as the messages)
    if not absent(system):
        if isinstance(system, str | list):
            text, n = _content_text(system, tool_parts="system")
            nontext += n
        else:
            text = json_text(system, "system")
        blocks.append(f"<|system|>\n{text}")
    tools_block = ("<|tools|>\n" + "\n".join(t if isinstance(t, str) else json_text(t, "tools") for t in tools)
                   if tools else None)
    # The tools follow the system prompt, whether it came beside the messages or as their leading system
    # messages (LiteLLM's callback payload moves a top-level system into them): one request, one text.
    leading = next((i for i, m in enumerate(messages) if not (isinstance(m, Mapping) and m.get("role") == "system")),
                   len(messages))
    for i, msg in enumerate(messages):
        if i == leading and tools_block is not None:
            blocks.append(tools_block)
            tools_block = None
        if not isinstance(msg, Mapping):
            raise TypeError(f"messages[{i}] is a {type(msg).__name__}, expected an object")
        role = msg.get("role") or "user"
        if not isinstance(role, str):
            raise TypeError(f"messages[{i}].role is a {type(role).__name__}, expected a string")
        text, n = _content_text(msg.get("content"), tool_parts=f"messages[{i}].content")
        nontext += n
        calls = _calls_text(msg, f"messages[{i}]")
        if calls:
            text = "\n".join(([text] if text else []) + calls)
        blocks.append(f"<|{role}|>\n{text}")
    if tools_block is not None:  # no message after the system ones
        blocks.append(tools_block)
    return "\n\n".join(blocks), nontext, len(blocks)


#: Keys only a Responses API request body has beside its ``input`` (an embeddings, moderation or speech
#: body has an ``input`` too, and a speech body ``instructions`` with its ``voice``).
RESPONSES_REQUEST_KEYS = frozenset(("instructions", "previous_response_id", "max_output_tokens", "reasoning", "text",
                                    "store", "conversation", "truncation", "include", "background", "tools", "tool_choice",
                                    "parallel_tool_calls", "prompt_cache_key", "stream", "temperature", "top_p"))
#: Body keys of the other requests that have an ``input``: embeddings, and speech.
NOT_RESPONSES_KEYS = frozenset(("encoding_format", "dimensions", "voice", "input_type"))


def is_responses_request(body: Mapping[str, Any], declared: bool = False) -> bool:
    """Whether a request ``body`` is a Responses API request (``/v1/responses``): its ``input`` a list of
    Responses items (each a message, with a ``role``, or an item of a Responses ``type``), or a string
    beside a key only such a request has (or ``declared`` by the gateway, as LiteLLM's ``call_type``). An
    embeddings, moderation or speech request's ``input`` (strings, token ids, or text and image parts) is
    not a prompt."""
    value = body.get("input")
    if not NOT_RESPONSES_KEYS.isdisjoint(body):
        return False
    if isinstance(value, str):
        return declared or not RESPONSES_REQUEST_KEYS.isdisjoint(body)
    if not (isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value)):
        return False
    if declared or not RESPONSES_REQUEST_KEYS.isdisjoint(body):
        return True
    # A list of items: messages (a role), or items of the Responses API's kinds alone (a multimodal
    # moderation input's content parts, or another embeddings API's typed inputs, are not).
    return any("role" in v for v in value) or all(v.get("type") == "message" or responses_kind(v.get("type")) for v in value)


def is_responses_output(resp: Mapping[str, Any]) -> bool:
    """Whether an answer is a Responses API answer: ``object`` is ``response``, or its ``output`` is a list
    holding an item of a Responses type (another provider's ``output`` of strings is not)."""
    output = resp.get("output")
    if not isinstance(output, list):
        return False
    return resp.get("object") == "response" or any(
        isinstance(item, Mapping) and isinstance(item.get("type"), str)
        and item["type"] in ("message", "reasoning", "function_call", "custom_tool_call") for item in output)


def render_responses_input(body: Mapping[str, Any]) -> tuple[str, int, int]:
    """Render a Responses API request body (``/v1/responses``) as :func:`render_request` renders a chat
    request: its ``instructions`` as the top-level system, its tool definitions, and its ``input``, a
    string (one user message) or a list of items (see :func:`render_request`). Raises ``TypeError``
    as :func:`render_request` does."""
    value, (system, tools) = body.get("input"), request_parts(body)
    instructions = body.get("instructions") if absent(system) else system
    if isinstance(value, str):
        return render_request([{"role": "user", "content": value}], instructions, tools)
    if not isinstance(value, list):
        raise TypeError(f"input is a {type(value).__name__}, expected a string or a list of items")
    return render_request(value, instructions, tools)


def responses_kind(kind: Any) -> bool:
    """Whether an item ``type`` is one of the Responses API's kinds that are no message: calls and their
    outputs (``function_call``, ``mcp_call``, ``*_call_output``), ``reasoning``, item references, MCP
    listings and approvals, compactions. (A chat message dumped by another library may carry a ``type``
    of its own, LangChain's ``human`` or ``ai``: it stays a message.)"""
    return isinstance(kind, str) and (kind in ("reasoning", "item_reference", "compaction")
                                      or kind.endswith(("_call", "_call_output")) or kind.startswith("mcp_"))


def _from_items(items: list[Any]) -> tuple[list[Any], int]:
    """Responses API input items as chat messages, and how many carry no text. A message item (with a
    ``role``) is a message; a ``function_call`` (or ``custom_tool_call``) item is an assistant message
    holding that call, and so is another ``*_call`` item with a name or arguments (an MCP tool's call the
    server ran, followed by its ``output`` as a ``tool`` message); a ``function_call_output``
    (``custom_tool_call_output``) item is a ``tool`` message holding its output; a ``reasoning`` item is
    left out (as the reasoning of earlier turns is in a chat request); any other (an item reference, a
    tool listing) carries no text."""
    messages: list[Any] = []
    other = 0
    for i, item in enumerate(items):
        kind = item.get("type") if isinstance(item, Mapping) and isinstance(item.get("type"), str) else None
        if not isinstance(item, Mapping) or "role" in item or not responses_kind(kind):
            messages.append(item)  # a message (or not an object: render_request names it)
        elif kind in ("function_call", "custom_tool_call") or (
                isinstance(kind, str) and kind.endswith("_call") and ("name" in item or "arguments" in item)):
            arguments = item.get("arguments", item.get("input"))
            messages.append({"role": "assistant", "content": None,
                             "tool_calls": [{"function": {"name": item.get("name"), "arguments": arguments}}]})
            if kind not in ("function_call", "custom_tool_call") and not absent(item.get("output")):
                output = item["output"]  # a call the server ran itself (an MCP tool's): its output is in the item
                messages.append({"role": "tool", "content": output if isinstance(output, str | list)
                                 else json_text(output, f"input[{i}].output")})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            messages.append({"role": "tool", "content": output if output is None or isinstance(output, str | list)
                             else json_text(output, f"input[{i}].output")})
        elif kind != "reasoning":
            other += 1
    return messages, other


def render_messages(messages: Sequence[Any]) -> tuple[str, int]:
    """Render a chat ``messages`` array into the canonical prompt text (:func:`render_request` with
    no system or tools beside the messages).

    Returns the text and the number of non-text content parts. Raises ``TypeError`` (with a
    message fit for a quarantine row) when the array is not a list of message objects.
    """
    text, nontext, _ = render_request(messages)
    return text, nontext


def render_prompt(prompt: Any) -> str:
    """Render a legacy completions ``prompt`` (string or list of strings)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "\n\n".join(prompt)
    raise TypeError(f"prompt is a {type(prompt).__name__}, expected a string or a list of strings")


def render_answer(content: str, reasoning: str = "", calls: Sequence[str] = ()) -> str:
    """One choice's response text from its content, its reasoning and its tool calls (each already
    rendered by :func:`call_text`), as the module notes describe."""
    body = "\n".join(([content] if content else []) + list(calls)) if calls else content
    if not reasoning:
        return body
    return f"<|reasoning|>\n{reasoning}\n\n<|assistant|>\n{body}" if body else f"<|reasoning|>\n{reasoning}"


def answer_parts(message: Mapping[str, Any], where: str) -> tuple[str, str, list[str]]:
    """The content, reasoning and rendered tool calls of an assistant ``message`` (a ChatCompletion
    message, a whole chunk delta, or an Anthropic Messages answer). Raises ``TypeError`` naming
    ``where`` when the content is neither a string nor a list of parts, or a call cannot be written."""
    reasoning = reasoning_text(message)
    content = message.get("content")
    calls: list[str] = []
    if isinstance(content, list):
        texts: list[str] = []
        thoughts: list[str] = [reasoning] if reasoning else []
        for j, part in enumerate(content):
            if isinstance(part, str):
                texts.append(part)
            elif not isinstance(part, Mapping):
                continue
            elif part.get("type", "text") in TEXT_PARTS and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif part.get("type") == "thinking" and isinstance(part.get("thinking"), str | list):
                # Anthropic's thinking is a string; Mistral's (Magistral) a list of text parts.
                thoughts.append(part["thinking"] if isinstance(part["thinking"], str) else _content_text(part["thinking"])[0])
            elif part.get("type") == "tool_use":
                calls.append(call_text(part.get("name"), part.get("input"), f"{where}.content[{j}]"))
        content, reasoning = "\n".join(texts), "\n".join(t for t in thoughts if t)
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise TypeError(f"response content is a {type(content).__name__}, expected a string")
    return content, reasoning, calls + _calls_text(message, where)


def reasoning_text(message: Mapping[str, Any]) -> str:
    """A message's or delta's reasoning: ``reasoning_content``, else ``reasoning`` (vLLM's newer name);
    empty when neither is a non-empty string (OpenRouter's ``reasoning`` object, say)."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
    return ""


def render_choices(texts: Iterable[str]) -> str:
    """Join the assistant texts of a response's choices (index order) into the response text."""
    items = list(texts)
    if len(items) == 1:
        return items[0]
    return "\n\n".join(f"<|choice {i}|>\n{t}" for i, t in enumerate(items))


def join_damage(reasons: Iterable[str | None]) -> str | None:
    """The ``damage`` value for a set of reasons (or ``;``-joined reason lists): each reason once,
    in :data:`DAMAGE_REASONS` order; None when there is none."""
    found: set[str] = set()
    for item in reasons:
        if item:
            found.update(r for r in item.split(";") if r)
    unknown = found.difference(DAMAGE_REASONS)
    if unknown:
        raise ValueError(f"unknown damage reasons {sorted(unknown)}; expected some of {DAMAGE_REASONS}")
    return ";".join(r for r in DAMAGE_REASONS if r in found) or None


def damage_reasons(value: str | None) -> tuple[str, ...]:
    """The reasons of one ``damage`` value (empty when the record is clean)."""
    return tuple(r for r in value.split(";") if r) if value else ()


def empty_table(name: str) -> pa.Table:
    """An empty table with the named canonical schema."""
    return TABLES[name].empty_table()
