"""Field access shared by the JSON parsers: typed getters whose failures become quarantine rows."""

from __future__ import annotations

import bisect
import collections
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import orjson

from forensics import schema
from forensics.case import surrogates_escaped
from forensics.ingest.timeparse import RANGE_HINT, TimeError, to_micros


class RecordError(ValueError):
    """A record that cannot be used; the message is the quarantine reason (with the fix)."""

    def __init__(self, reason: str, fix: str | None = None) -> None:
        if fix is None and "fix:" not in reason.lower():
            fix = "correct or re-export this record and ingest the file again (the rest of the file was ingested)"
        super().__init__(f"{reason}. Fix: {fix}" if fix else reason)


class NoTenant(RecordError):
    """A record that names no customer: it cannot be put on any list, so it is quarantined."""

    def __init__(self, fields: str) -> None:
        super().__init__(
            f"no tenant: none of {fields} is set in this record",
            fix="set tenant_field (case file or --tenant-field) to the field that names the customer",
        )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def named_twice(names: list[str]) -> dict[str, list[int]]:
    """The column names a CSV header or a Parquet schema gives more than once, with their places (0-based). Columns
    with no name (a spreadsheet's note columns) name no field a format reads."""
    places: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        places.setdefault(name, []).append(i)
    return {name: at for name, at in places.items() if len(at) > 1 and name}


def columns_differ(name: str, at: list[int], where: str, named_in: str = "") -> str:
    """Why a record (``where``: "record", "row") whose columns ``at`` of one name hold different values is not
    read: as an object, the last would win, maybe another customer's id. ``named_in``: where the fix renames them."""
    columns = ", ".join(str(i + 1) for i in at[:-1]) + f" and {at[-1] + 1}"
    return (f"columns {columns} are {'both' if len(at) == 2 else 'all'} named {name!r} and hold different values in "
            f"this {where}: which one the export meant is unknown. Fix: rename or drop all but one of them"
            f"{' in the ' + named_in if named_in else ''} and ingest the file again")

def _bounded(text: str) -> int | float:
    value = int(text)
    return value if -(2**63) <= value < 2**64 else float(value)  # orjson reads an integer beyond 64 bits as a float


def json_value(text: str | bytes) -> Any:
    """orjson's parse; a lone surrogate escape (``"\\ud83d"``: valid JSON that orjson refuses, written by a
    JavaScript gateway that cuts a string inside an emoji) is parsed again, as strictly as orjson would
    otherwise (no NaN or infinities; an integer beyond 64 bits a float, as orjson reads it), with each lone
    surrogate written as its escape's text (:func:`_mended`). Nesting deeper than Python's recursion allows
    (about 900) is refused, as orjson refuses beyond 1,024. Raises orjson's JSONDecodeError."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if "surrogate" not in str(exc):
            raise
        try:
            # Bytes are decoded strictly first: an encoded surrogate is invalid UTF-8, as orjson says.
            plain = text.decode("utf-8") if isinstance(text, bytes) else text
            return _mended(json.loads(plain, parse_constant=_no_constant, parse_float=_finite, parse_int=_bounded))
        except (ValueError, RecursionError, UnicodeDecodeError):
            raise exc from None


def _mended(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) written as the six characters of its
    escape (``\\udc00``). Not U+FFFD: two customer ids that differ only there (a gateway writes a header's
    non-UTF-8 bytes as ``\\udcXX``) must stay two customers, and the evidence shows what was sent."""
    if isinstance(value, str):
        return surrogates_escaped(value)
    if isinstance(value, list):
        return [_mended(v) for v in value]
    if isinstance(value, dict):
        return {_mended(k): _mended(v) for k, v in value.items()}
    return value


def loads(text: str) -> Any:
    """Parse JSON; raise RecordError with the position on failure.

    A lone surrogate escape (``"\\ud83d"``) is valid JSON that orjson refuses: such a line is parsed again
    and the surrogate becomes the text of its escape (``\\ud83d``), so one cut emoji does not cost the record.
    """
    try:
        return json_value(text)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"invalid JSON ({exc})", fix="repair or re-export the line (a partial write or a cut copy)") from None


def loads_object(text: str) -> dict[str, Any]:
    """Parse a line that must hold one JSON object."""
    obj = loads(text)
    if not isinstance(obj, dict):
        raise RecordError(f"line is a JSON {type(obj).__name__}, expected an object")
    return obj


def first_objects(lines: list[str], limit: int = 5) -> list[dict[str, Any]]:
    """The JSON objects among the first ``limit`` lines (for format sniffing)."""
    objects = []
    for text in lines[:limit]:
        try:
            obj = loads(text)
        except RecordError:
            continue
        if isinstance(obj, dict):
            objects.append(obj)
    return objects


def maybe_json(value: Any, field: str) -> Any:
    """A field that exports give either as a JSON value or as a JSON-encoded string."""
    if isinstance(value, str):
        stripped = value.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                return json_value(value)
            except orjson.JSONDecodeError:
                raise RecordError(f"{field} is a string that is not valid JSON") from None
    return value


def get_path(obj: Mapping[str, Any], dotted: str) -> Any:
    """Value at a dotted path (``metadata.user_api_key_org_id``), decoding JSON strings on the way."""
    cur: Any = obj
    for i, part in enumerate(dotted.split(".")):
        if i:
            cur = maybe_json(cur, dotted.rsplit(".", 1)[0])
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return cur


def req_str(obj: Mapping[str, Any], field: str) -> str:
    """A required id-like field: a non-empty string (an integer is accepted as its digits)."""
    value = obj.get(field)
    if value is None or value == "":
        raise RecordError(f"missing required field {field!r}", fix=f"re-export the log with {field!r} (it identifies the request)")
    return as_str(value, field)


def no_tenant_value(value: Any) -> bool:
    """Whether a tenant field's value names no customer: absent, null, or only white space (spaces tell no
    customer apart, and the formats must agree on it: the same export read another way gives the same list)."""
    return value is None or (isinstance(value, str) and not value.strip())


def as_str(value: Any, field: str) -> str:
    """A string field; integers become their digits, anything else is a wrong type."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise RecordError(f"field {field!r} is a {type(value).__name__}, expected a string")


def stream_flag(body: Any) -> bool | None:
    """Whether a call streamed, from its logged request body: its ``stream`` flag; false where a body that holds the
    prompt (``messages``, ``prompt`` or ``input``) has none, as OpenAI's API defaults it (its SDKs leave the key out
    unless streaming); None where no such body was logged, or the flag is not a boolean. Read as unknown, a call
    made without streaming that timed out at the gateway was taken to have delivered its answer (a review)."""
    if not isinstance(body, Mapping):
        return None
    value = body.get("stream")
    if isinstance(value, bool):
        return value
    if "stream" in body:
        return None
    return False if any(k in body for k in ("messages", "prompt", "input")) else None


def opt_str(obj: Mapping[str, Any], field: str) -> str | None:
    """An optional string field; empty strings count as absent."""
    value = obj.get(field)
    if value is None or value == "":
        return None
    return as_str(value, field)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# A whole number as exports write it: ASCII digits (int() would also take "²" or "1_000").
WHOLE = re.compile(r"[+-]?[0-9]+")


def whole_number(value: Any) -> int | None:
    """The whole number a JSON value holds (an int, an integral float or a digit string), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():  # never NaN or an infinity
        return int(value)
    if isinstance(value, str) and len(value) <= 40 and WHOLE.fullmatch(value.strip()):
        return int(value.strip())
    return None


def opt_int(value: Any, field: str, problems: list[str], low: int = INT64_MIN, high: int = INT64_MAX) -> int | None:
    """An optional whole number (numeric strings accepted) in ``low`` .. ``high``.

    A figure that is not a whole number, or is out of range (by default: does not fit in 64 bits),
    must not cost the record its text: it becomes null and a problem is noted on the row (the
    ``problems`` column).
    """
    if value is None or value == "":
        return None
    number = whole_number(value)
    if number is None:
        problems.append(f"{field} = {_short(value)} is not a whole number; ignored")
        return None
    if not low <= number <= high:
        problems.append(f"{field} = {_short(value)} is out of range ({low} to {high}); ignored")
        return None
    return number


def opt_count(value: Any, field: str, problems: list[str]) -> int | None:
    """An optional token count: a whole number from 0 that fits in 64 bits (see :func:`opt_int`)."""
    return opt_int(value, field, problems, 0, INT64_MAX)


def _short(value: Any) -> str:
    """A value as shown in a problem note: its JSON-ish repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def time_field(obj: Mapping[str, Any], field: str, zone: str, required: bool = True) -> tuple[int | None, bool]:
    """A timestamp field as epoch microseconds and whether its zone was assumed."""
    value = obj.get(field)
    if value is None or value == "":
        if required:
            raise RecordError(f"missing required field {field!r}")
        return None, False
    try:
        return to_micros(value, zone)
    except TimeError as exc:
        raise RecordError(f"field {field!r}: {exc}", fix=f"times must be ISO 8601 or epoch s/ms/µs/ns; {RANGE_HINT}") from None


# LiteLLM keeps 35 % head and 65 % tail of strings over 2,048 characters and puts this marker
# between them; the skipped count lets us reconstruct the original length. A count of more than
# twelve digits (a terabyte string) is not LiteLLM's and would overflow the length columns. The
# note after the count holds parentheses of its own in current versions ("(OTEL, Datadog, etc.)"),
# never another marker: an unclosed one a customer typed must not swallow the real one after it.
TRUNCATION_RE = re.compile(r"\.\.\. \(litellm_truncated skipped ([0-9]{1,12}) chars"
                           r"(?:[^()]|\((?!litellm_truncated)[^()]*\))*\) \.\.\.")

#: The shortest limit taken for LiteLLM's (2,048 unless configured): a marker at 35 % of a shorter string
#: is a customer's text that only looks like a cut.
MIN_CUT_LIMIT = 256
_MENDED = re.compile(r"\\ud[89a-f][0-9a-f]{2}")
#: A character beyond the Basic Multilingual Plane (two UTF-16 units). The regex engine finds them some 30 times
#: faster than a loop in Python over every character of a long cut string (an eighth of a spend log's parse).
_ASTRAL = re.compile("[\U00010000-\U0010FFFF]")


def _cuts_in(value: str) -> Iterator[re.Match[str]]:
    """The markers of one string at LiteLLM's place (:func:`litellm_cuts`), in one pass over it whatever
    their number: the characters LiteLLM counted differently (an astral character is two UTF-16 units; a
    lone surrogate, one code point, the ingest wrote as its six-character escape, which a customer's
    pasted JSON may hold as text too) are located once and counted on each side of a marker by bisection."""
    astral = [] if value.isascii() else [m.start() for m in _ASTRAL.finditer(value)]
    escaped = [e.start() for e in _MENDED.finditer(value)] if "\\ud" in value else []
    for m in TRUNCATION_RE.finditer(value):
        head_chars, tail_chars = m.start(), len(value) - m.end()
        a_head = bisect.bisect_left(astral, m.start())
        a_tail = len(astral) - bisect.bisect_left(astral, m.end())
        e_head = bisect.bisect_left(escaped, m.start())
        e_tail = len(escaped) - bisect.bisect_left(escaped, m.end())
        if any(_placed(head_chars + wide * a_head - 5 * mended * e_head,
                       head_chars + tail_chars + wide * (a_head + a_tail) - 5 * mended * (e_head + e_tail))
               for wide in (0, 1)  # code points (LiteLLM), UTF-16 units (its JavaScript ports)
               for mended in ((0, 1) if escaped else (0,))):
            yield m


def _placed(head: int, kept: int) -> bool:
    """Whether a marker after ``head`` of the ``kept`` characters of its string is where LiteLLM puts it."""
    return kept >= MIN_CUT_LIMIT - 1 and any(head == int(limit * 0.35) for limit in (kept, kept + 1))


def litellm_cuts(*values: Any) -> collections.Counter[str]:
    """The LiteLLM truncation markers in the strings of JSON ``values`` that sit where LiteLLM puts one.

    LiteLLM cuts a string over its limit M (2,048 characters unless configured, at least
    :data:`MIN_CUT_LIMIT` here) to its first ``int(0.35 * M)`` characters, the marker, and its last
    ``int(0.65 * M)`` (or ``M`` minus the head): a marker stands at 35 % of what its string kept,
    counted in code points (LiteLLM) or UTF-16 units (ports of it in JavaScript). The same words
    anywhere else (a customer asking about a LiteLLM log, pasting one; a marker quoted inside a string
    LiteLLM then cut) are the customer's text, not a cut: counted as one, they made up a prompt length
    and a token count, and could put the customer on the list as a recipient.
    """
    found: collections.Counter[str] = collections.Counter()
    stack = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            if "litellm_truncated" not in value:
                continue
            found.update(m.group(0) for m in _cuts_in(value))
        elif isinstance(value, Mapping):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


def holds_cut(text: str | None, cuts: Callable[[], collections.Counter[str]]) -> bool:
    """Whether ``text`` holds one of LiteLLM's cuts; ``cuts`` (:func:`litellm_cuts` of the record's source
    values) is read only when the text holds the marker's name."""
    return text is not None and "litellm_truncated" in text and truncation(text, cuts())[0]


def truncation(text: str, cuts: collections.Counter[str] | None = None) -> tuple[bool, int, int]:
    """Whether ``text`` carries LiteLLM truncation markers, and the original chars and UTF-8 bytes.

    ``cuts``: the markers of the record's source strings that are LiteLLM's (:func:`litellm_cuts`);
    ``None`` where the format never cuts (a marker there is the customer's text). The bytes of the
    skipped part are unknown; they are taken as one byte per skipped character scaled by the visible
    text's bytes-per-character ratio.
    """
    if not cuts or "litellm_truncated" not in text:
        n = len(text)
        return False, n, len(text.encode("utf-8"))
    left = collections.Counter(cuts)
    skipped = 0
    marker_chars = 0
    for m in TRUNCATION_RE.finditer(text):
        if left[m.group(0)] <= 0:
            continue
        left[m.group(0)] -= 1
        skipped += int(m.group(1))
        marker_chars += len(m.group(0))
    if not marker_chars:
        n = len(text)
        return False, n, len(text.encode("utf-8"))
    visible = len(text) - marker_chars
    visible_bytes = len(text.encode("utf-8")) - marker_chars
    ratio = visible_bytes / visible if visible else 1.0
    return True, visible + skipped, int(round(visible_bytes + skipped * ratio))


#: An object holding one of these (and a role) is an assistant message: its text, reasoning or tool calls.
ANSWER_KEYS = frozenset(("content", "tool_calls", "function_call", "reasoning_content", "reasoning"))


def error_body(value: Any) -> bool:
    """An answer body with an ``error`` key, or vLLM's and SGLang's ``{"object": "error", ...}``: an API
    error, unless it is a Responses API answer (which always carries ``"error"``, null when it
    succeeded, and its own ``status``)."""
    if isinstance(value, Mapping) and value.get("object") == "error":
        return True
    if not (isinstance(value, Mapping) and "error" in value):
        return False
    return not schema.is_responses_output(value) or value.get("error") is not None or value.get("status") == "failed"


def message_text(message: Any, where: str = "response") -> str:
    """The answer text of a ChatCompletion ``message`` (or an Anthropic Messages answer): its
    reasoning, content and tool calls, rendered as forensics.schema describes."""
    if not isinstance(message, Mapping):
        return ""
    try:
        return schema.render_answer(*schema.answer_parts(message, where))
    except TypeError as exc:
        raise RecordError(str(exc)) from None


def response_text(resp: Any, field: str = "response") -> tuple[str | None, str | None, dict[str, Any]]:
    """Text, finish reason and usage of a ChatCompletion, a chunk list, or an error/empty body.

    Returns ``(None, None, {})`` for an empty body (a failure). Raises RecordError on a shape that
    is neither.
    """
    resp = maybe_json(resp, field)
    if resp is None or resp == {} or resp == [] or resp == "":
        return None, None, {}
    if isinstance(resp, list):
        return chunks_text(resp, field)
    if not isinstance(resp, Mapping):
        raise RecordError(f"{field} is a {type(resp).__name__}, expected a ChatCompletion object or chunk list")
    if error_body(resp) and "choices" not in resp:
        return None, None, {}
    choices = resp.get("choices")
    usage_value = resp.get("usage")
    usage: Mapping[str, Any] = usage_value if isinstance(usage_value, Mapping) else {}
    if choices is None:
        if isinstance(resp.get("content"), list) and resp.get("type", "message") == "message":
            # An Anthropic Messages answer: its content blocks are the answer (text, thinking, tool use).
            stop = resp.get("stop_reason")
            return message_text(resp, field), stop if isinstance(stop, str) else None, dict(usage)
        if schema.is_responses_output(resp):
            return _responses_answer(resp["output"], field), _responses_finish(resp), _responses_usage(usage)
        if "role" in resp and not ANSWER_KEYS.isdisjoint(resp):  # the assistant message alone
            return message_text(resp, field), None, dict(usage)
        return None, None, dict(usage)
    if not isinstance(choices, list):
        raise RecordError(f"{field}.choices is a {type(choices).__name__}, expected a list")
    # By index, then place: two choices under one index (or a boolean one, which is no index) both keep
    # their text; the later one replaced the earlier, which might be the one holding the leak.
    texts: dict[tuple[int, int], str] = {}
    finish: str | None = None
    for i, choice in enumerate(choices):
        if not isinstance(choice, Mapping):
            raise RecordError(f"{field}.choices[{i}] is not an object")
        idx = choice.get("index", i)
        key = (idx if type(idx) is int else i, i)
        if "message" in choice:
            texts[key] = message_text(choice.get("message"), f"{field}.choices[{i}].message")
        elif isinstance(choice.get("text"), str):  # legacy completions
            texts[key] = choice["text"]
        else:
            texts[key] = ""
        if finish is None and isinstance(choice.get("finish_reason"), str):
            finish = choice["finish_reason"]
    text = schema.render_choices(texts[k] for k in sorted(texts)) if texts else ""
    return text, finish, dict(usage)


def _responses_answer(output: list[Any], field: str) -> str:
    """The answer text of a Responses API answer's ``output`` items: its messages' text, its reasoning
    items' text (their ``reasoning_text`` content, else their summary) and its function calls, rendered
    as a chat answer is (see forensics.schema)."""
    content: list[str] = []
    reasoning: list[str] = []
    calls: list[str] = []
    try:
        for i, item in enumerate(output):
            if not isinstance(item, Mapping):
                continue
            kind, where = item.get("type"), f"{field}.output[{i}]"
            if kind == "message" or "role" in item:
                text, thought, item_calls = schema.answer_parts(item, where)
                content.extend([text] if text else [])
                reasoning.extend([thought] if thought else [])
                calls.extend(item_calls)
            elif kind == "reasoning":
                for key in ("content", "summary"):
                    parts = item.get(key)
                    texts = [p["text"] for p in parts if isinstance(p, Mapping) and isinstance(p.get("text"), str)] \
                        if isinstance(parts, list) else []
                    if any(texts):
                        reasoning.append("\n".join(texts))
                        break
            elif kind in ("function_call", "custom_tool_call"):
                calls.append(schema.call_text(item.get("name"), item.get("arguments", item.get("input")), where))
    except TypeError as exc:
        raise RecordError(str(exc)) from None
    return schema.render_answer("\n".join(content), "\n".join(reasoning), calls)


def _responses_finish(resp: Mapping[str, Any]) -> str | None:
    """A Responses API answer's finish: why it is incomplete (``max_output_tokens``), else its status."""
    details = resp.get("incomplete_details")
    if resp.get("status") == "incomplete" and isinstance(details, Mapping) and isinstance(details.get("reason"), str):
        return str(details["reason"])
    status = resp.get("status")
    return status if isinstance(status, str) else None


def _responses_usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """A Responses API answer's usage with the chat names beside its own: its ``input_tokens`` count the
    whole prompt, cached tokens included (``input_tokens_details.cached_tokens`` is a part of them)."""
    named = dict(usage)
    for theirs, ours in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens")):
        if theirs in named and ours not in named:
            named[ours] = named[theirs]
    return named


def events_text(events: list[Any], field: str) -> tuple[str | None, str | None, dict[str, Any]] | None:
    """The answer of a streamed event list that is not ChatCompletion chunks: the Responses API's (its
    ``response.completed`` event, or ``response.incomplete``, holds the whole answer) or Anthropic's
    Messages stream (content blocks started, then grown by deltas: text, thinking and a tool use's JSON
    input). None when the events are of neither kind."""
    blocks: dict[int, dict[str, Any]] = {}
    stop: str | None = None
    usage: dict[str, Any] = {}
    anthropic = False
    # A Responses stream cut before its last event: per output item, the item if it finished, else the text
    # streamed for it (the item that was being written when the stream stopped is where a leak may be)
    items: dict[int, Any] = {}
    deltas: dict[tuple[int, str], list[str]] = {}
    for n, event in enumerate(events):
        if not isinstance(event, Mapping):
            continue
        kind = event.get("type")
        if kind in ("response.completed", "response.incomplete", "response.failed") and isinstance(event.get("response"), Mapping):
            return response_text(event["response"], f"{field}[{n}].response")
        at = event["output_index"] if type(event.get("output_index")) is int else 0
        if kind == "response.output_item.done" and isinstance(event.get("item"), Mapping):
            items[at] = event["item"]
        elif kind in RESPONSES_DELTAS and isinstance(event.get("delta"), str):
            deltas.setdefault((at, RESPONSES_DELTAS[kind]), []).append(event["delta"])
        index = event.get("index")
        if kind == "message_start" and isinstance(event.get("message"), Mapping):
            anthropic = True
            got = event["message"].get("usage")
            usage = dict(got) if isinstance(got, Mapping) else usage
        elif kind == "content_block_start" and type(index) is int and isinstance(event.get("content_block"), Mapping):
            anthropic = True
            block = dict(event["content_block"])
            if block.get("type") == "tool_use":
                block["input"] = ""  # grown by its input_json_delta pieces: the JSON as the model wrote it
            blocks[index] = block
        elif kind == "content_block_delta" and type(index) is int and isinstance(event.get("delta"), Mapping):
            anthropic = True
            block = blocks.setdefault(index, {"type": "text", "text": ""})
            for key, piece in (("text", "text"), ("thinking", "thinking"), ("input", "partial_json")):
                value = event["delta"].get(piece)
                if isinstance(value, str):
                    before = block.get(key)
                    block[key] = (before if isinstance(before, str) else "") + value
        elif kind == "message_delta":
            anthropic = True
            delta, got = event.get("delta"), event.get("usage")
            if isinstance(delta, Mapping) and isinstance(delta.get("stop_reason"), str):
                stop = delta["stop_reason"]
            if isinstance(got, Mapping):
                usage.update(got)
    if anthropic:
        return message_text({"content": [blocks[k] for k in sorted(blocks)]}, field), stop, usage
    if items or deltas:
        streamed = {at: [_streamed_item(part, deltas[at, part]) for part in ("reasoning", "content") if (at, part) in deltas]
                    for at, _ in deltas if at not in items}
        output = [item for at in sorted(set(items) | set(streamed)) for item in ([items[at]] if at in items else streamed[at])]
        return _responses_answer(output, field), None, {}
    return None


def _streamed_item(part: str, pieces: list[str]) -> dict[str, Any]:
    """An output item of a Responses stream that never finished, from the text streamed for it."""
    text = "".join(pieces)
    if part == "reasoning":
        return {"type": "reasoning", "content": [{"type": "reasoning_text", "text": text}]}
    return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}


#: The Responses API's streamed text events: which part of the answer each grows.
RESPONSES_DELTAS = {"response.output_text.delta": "content", "response.reasoning_text.delta": "reasoning",
                    "response.reasoning_summary_text.delta": "reasoning"}


def chunks_text(chunks: list[Any], field: str = "chunks") -> tuple[str | None, str | None, dict[str, Any]]:
    """Reassemble streamed ChatCompletionChunk objects: delta pieces per choice, in order (the
    content, the reasoning, and each tool call's name and arguments), rendered as a whole answer.
    A list of another API's stream events (objects with a ``type``) is read by :func:`events_text`;
    of an unknown kind, the text is None (unknown, not an empty answer)."""
    # A streamed answer has a chunk per token or so: this loop runs hundreds of times per record,
    # so plain dicts with a string content and nothing else (the shape every export writes) take the
    # short way, and anything else the general checks of maybe_json / _Streamed.add, with the same results.
    plain = _plain_stream(chunks)
    if plain is not None:
        return plain
    answers: dict[int, _Streamed] = {}
    finish: str | None = None
    usage: dict[str, Any] = {}
    events: list[Mapping[str, Any]] = []  # objects that are no chunk: another API's stream events
    chunked = False  # whether any object is a ChatCompletion chunk (has choices)
    for n, chunk in enumerate(chunks):
        if type(chunk) is not dict:
            chunk = maybe_json(chunk, f"{field}[{n}]")
            if not isinstance(chunk, Mapping):
                raise RecordError(f"{field}[{n}] is a {type(chunk).__name__}, expected a chunk object")
        if "choices" in chunk:
            chunked = True
        elif isinstance(chunk.get("type"), str) and "error" not in chunk and chunk.get("object") != "error":
            events.append(chunk)  # (a chat error chunk, vLLM's {"object": "error", "type": ...}, is none)
        chunk_usage = chunk.get("usage")
        if chunk_usage is not None and isinstance(chunk_usage, Mapping):
            usage = dict(chunk_usage)
        for i, choice in enumerate(chunk.get("choices") or []):
            if type(choice) is not dict and not isinstance(choice, Mapping):
                raise RecordError(f"{field}[{n}].choices[{i}] is not an object")
            idx = choice.get("index", 0)
            if type(idx) is not int:  # a boolean is no index: True was choice 1
                idx = 0
            delta = choice.get("delta")
            if delta is None and "message" in choice:
                delta = choice["message"]
            answer = answers.get(idx)
            if answer is None:
                answers[idx] = answer = _Streamed()
            content = _plain_content(delta)
            if content is not None:
                answer.content.append(content)
            else:
                answer.add(delta, f"{field}[{n}].choices[{i}]")
            reason = choice.get("finish_reason")
            if reason is not None and isinstance(reason, str):
                finish = reason
    if events and not chunked:  # the Responses API's or Anthropic's events; of another kind, the text is unknown
        return events_text(events, field) or (None, finish, usage)
    if not answers:
        return "", finish, usage
    return schema.render_choices(answers[k].text() for k in sorted(answers)), finish, usage


def _plain_stream(chunks: list[Any]) -> tuple[str, str | None, dict[str, Any]] | None:
    """:func:`chunks_text` of the one shape nearly every streamed answer has, in one tight pass: every chunk
    a dict whose ``choices`` is empty or one choice of index 0 with a delta of string content alone (or with
    its role, or empty reasoning and calls), ``usage`` absent or an object. None for anything else, which
    the general loop reads (this pass has no effect of its own, so the result is the same either way)."""
    pieces: list[str] = []
    append = pieces.append
    finish: str | None = None
    usage: dict[str, Any] | None = None
    for chunk in chunks:
        if type(chunk) is not dict:
            return None
        choices = chunk.get("choices")
        if choices:
            if type(choices) is not list or len(choices) != 1:
                return None
            choice = choices[0]
            if type(choice) is not dict:
                return None
            idx = choice.get("index", 0)
            if type(idx) is int and idx != 0:
                return None
            content = _plain_content(choice.get("delta"))
            if content is None:
                return None
            append(content)
            reason = choice.get("finish_reason")
            if reason is not None and isinstance(reason, str):
                finish = reason
        elif "choices" not in chunk:
            return None  # another API's stream event, or an object of no known kind
        chunk_usage = chunk.get("usage")
        if chunk_usage is not None:
            if type(chunk_usage) is not dict:
                return None
            usage = chunk_usage
    if not pieces:
        return None  # no choice at all: the general loop says what that is
    answer = _Streamed()
    answer.content = pieces
    return schema.render_choices([answer.text()]), finish, dict(usage) if usage is not None else {}


def _plain_content(delta: Any) -> str | None:
    """A delta's content when the delta is a dict whose string content is all it adds (with its role, or empty
    reasoning and calls: the shape every export writes); else None, and the delta is read in full."""
    if type(delta) is dict and type(content := delta.get("content")) is str and (
            len(delta) == 1 or (len(delta) == 2 and "role" in delta) or _plain(delta)):
        return content
    return None


def _plain(delta: dict[str, Any]) -> bool:
    """A delta with nothing but its content to add (its reasoning and calls absent or empty)."""
    return not (delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls") or delta.get("function_call"))


class _Streamed:
    """One choice of a streamed answer, gathered piece by piece."""

    __slots__ = ("calls", "content", "current", "ident", "last", "reasoning")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        # (group, arrival) -> (name pieces, argument pieces, the whole text of a call of another shape); the
        # groups sort as an unstreamed message renders them: content tool use parts, the legacy function
        # call, then the tool calls, each group in the order its calls first came
        self.calls: dict[tuple[int, int], tuple[list[str], list[str], str | None]] = {}
        self.current: dict[Any, tuple[int, int]] = {}  # the call a piece's index (or id) now stands for
        self.ident: dict[tuple[int, int], str] = {}  # a call's id, once a piece gave one
        self.last: tuple[int, int] | None = None

    def add(self, delta: Any, where: str) -> None:
        """The pieces of one ``delta`` (any shape; a whole ``message`` too), read by the rules of an
        unstreamed message (forensics.schema.answer_parts) piece by piece."""
        if not isinstance(delta, Mapping):
            return
        reasoning = schema.reasoning_text(delta)
        if reasoning:
            self.reasoning.append(reasoning)
        content = delta.get("content")
        if isinstance(content, list):  # text parts (and a whole message's thinking and tool use)
            try:
                text, thought, calls = schema.answer_parts({"content": content}, where)
            except TypeError as exc:
                raise RecordError(str(exc)) from None
            self.content.append(text)
            if thought:
                self.reasoning.append(thought)
            for call in calls:
                self.calls[(0, len(self.calls))] = ([], [], call)
        elif isinstance(content, str):
            self.content.append(content)
        elif content is not None:
            raise RecordError(f"response content is a {type(content).__name__}, expected a string")
        for group, key in ((1, "function_call"), (2, "tool_calls")):
            value = delta.get(key)
            if schema.absent(value):
                continue
            for j, call in enumerate(value if isinstance(value, list) else [value]):
                self._piece(group, call, f"{where}.delta.{key}[{j}]")

    def _piece(self, group: int, call: Any, where: str) -> None:
        """One piece of a call. The legacy function call is one call; a tool call's piece belongs to the call
        its ``index`` (else its ``id``) names, else to the call of the piece before it. A piece starts a new
        call when its id differs from the id of the call its index names (a server reusing index 0), or,
        with neither, when it names another function than a call already whole (calls sent one by one)."""
        function = call.get("function") if isinstance(call, Mapping) and "function" in call else call
        if not (isinstance(function, Mapping) and ("name" in function or "arguments" in function)):
            if not (isinstance(call, Mapping) and set(call) <= {"index", "id", "type", "function"}):
                self.calls[(group, len(self.calls))] = ([], [], _whole_call(call, where))  # another shape: all of it
            return
        index = call.get("index") if isinstance(call, Mapping) else None
        ident = call.get("id") if isinstance(call, Mapping) and isinstance(call.get("id"), str) and call["id"] else None
        got, args = function.get("name"), function.get("arguments")
        try:
            name_piece = got if isinstance(got, str) or got is None else schema.json_text(got, where)
            args_piece = args if isinstance(args, str) or args is None else schema.json_text(args, where)
        except TypeError as exc:
            raise RecordError(str(exc)) from None
        slot: Any = "function" if group == 1 else ("index", index) if type(index) is int else ("id", ident) if ident else None
        key = self.current.get(slot) if slot is not None else self.last
        if key is not None and key[0] != group:
            key = None
        if key is not None and ident and self.ident.get(key, ident) != ident:
            key = None  # the same index, another call
        if key is not None and slot is None and name_piece and "".join(self.calls[key][0]) not in ("", name_piece) \
                and self.calls[key][1]:
            key = None  # no index or id: a new function named after a call already whole
        if key is None:
            key = (group, len(self.calls))
            self.calls[key] = ([], [], None)
        if slot is not None:
            self.current[slot] = key
        if ident:
            self.ident.setdefault(key, ident)
            self.current[("id", ident)] = key
        self.last = key
        name, arguments, _ = self.calls[key]
        # The name comes whole in a call's first piece; a server that repeats it in every piece adds nothing.
        if name_piece and "".join(name) != name_piece:
            name.append(name_piece)
        if args_piece is not None:
            arguments.append(args_piece)

    def text(self) -> str:
        """The choice's answer text (see forensics.schema)."""
        calls: list[str] = []
        for key in sorted(self.calls):
            name, arguments, whole = self.calls[key]
            calls.append(whole if whole is not None else schema.call_text("".join(name), "".join(arguments), "tool_calls"))
        return schema.render_answer("".join(self.content), "".join(self.reasoning), calls)


def _whole_call(call: Any, where: str) -> str:
    """A call of another shape than ``{"function": {"name", "arguments"}}``, whole, as its unstreamed text."""
    try:
        return f"<|tool_call|>\n{schema.json_text(call, where)}"
    except TypeError as exc:
        raise RecordError(str(exc)) from None


def body_prompt(request: Mapping[str, Any], where: str, answer: Any = None) -> tuple[str | None, int, int]:
    """The prompt of an OpenAI-style request body: (text, non-text parts, messages) from its
    ``messages`` with what the model reads beside them (a top-level ``system``, tool definitions:
    see forensics.schema), from a legacy ``prompt``, or from a Responses API ``input``; (None, 0, 0)
    when it has none. ``where`` names the body in errors (``request_body``, ``request``); the record's
    ``answer``, when it is a Responses API answer, says that a bare ``input`` is such a request's."""
    try:
        if "messages" in request:
            messages = request["messages"]
            if not isinstance(messages, list):
                raise RecordError(f"{where}.messages is a {type(messages).__name__}, expected a list of messages")
            return schema.render_request(messages, *schema.request_parts(request))
        if "prompt" in request:
            return schema.render_prompt(request["prompt"]), 0, 1
        declared = isinstance(answer, Mapping) and schema.is_responses_output(answer)
        if schema.is_responses_request(request, declared):  # a Responses API request (/v1/responses)
            return schema.render_responses_input(request)
    except TypeError as exc:
        raise RecordError(f"{where}.{exc}") from None
    return None, 0, 0


def unread_prompt(request: Any, where: str) -> str | None:
    """A note for ``problems`` when the request body ``request`` holds something :func:`body_prompt` found no prompt
    in (a Gemini ``contents`` body, say): the prompt is there, unread, and the row must say so, not look empty."""
    if not isinstance(request, Mapping) or not request:
        return None
    keys = ", ".join(sorted(str(k) for k in request)[:6])
    return f"{where} is an object (keys: {keys}) of a shape not known to hold the prompt; prompt text unknown"


def json_string(value: Any, field: str, record: str = "record") -> tuple[Any, bool]:
    """A field an export writes as a string holding JSON (or plain text), decoded, and whether its
    JSON was cut short (valid up to where the text ends: an export's size limit).

    A value that is not a string is returned as it is; an empty string is absent; text that does
    not start like JSON stays text; JSON broken other than at its end is a RecordError naming
    ``field`` (the fix: re-export the ``record`` with it intact).
    """
    if not isinstance(value, str):
        return value, False
    stripped = value.strip()
    if stripped[:1] not in ("{", "["):
        return (None if stripped == "" else value), False
    try:
        return json_value(stripped), False
    except orjson.JSONDecodeError as exc:
        if "end of data" in str(exc):
            return None, True
        raise RecordError(f"{field} is a string that is not valid JSON ({exc})",
                          fix=f"re-export the {record} with its {field} intact") from None
