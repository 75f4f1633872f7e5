"""LiteLLM proxy logs: spend-log rows and StandardLoggingPayload objects (log-formats.md §1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from forensics import schema
from forensics.ingest.base import ALIASES_KEY, FileContext, Output, Quarantined, prompt_fields, provenance
from forensics.ingest.fields import (
    NoTenant,
    RecordError,
    as_str,
    first_objects,
    get_path,
    holds_cut,
    litellm_cuts,
    loads_object,
    maybe_json,
    no_tenant_value,
    opt_count,
    opt_str,
    req_str,
    response_text,
    stream_flag,
    time_field,
)
from forensics.ingest.registry import NOT_PARSED, LogFormat, NotParsed, RecordKind, register

#: The default tenant rule: the first non-empty of these fields names the customer.
TENANT_CHAIN = (
    "organization_id",
    "team_id",
    "metadata.user_api_key_org_id",
    "metadata.user_api_key_team_id",
    "metadata.user_api_key_user_id",
    "api_key",
    "metadata.user_api_key_hash",
)

SPEND_LOG_KEYS = {"request_id", "startTime", "call_type", "spend", "proxy_server_request", "api_key"}
PAYLOAD_KEYS = {"id", "trace_id", "call_type", "startTime", "messages", "response", "model_group"}


#: A spend-log column and the callback payload's metadata key LiteLLM fills it from: one value under two names.
#: ``tenant_field = "organization_id"`` read in a callback payload, which has no such key, quarantined every
#: payload of the case (a review: the list lost most of its customers, with one note in the summary).
TWIN_FIELDS = {
    "organization_id": "metadata.user_api_key_org_id",
    "team_id": "metadata.user_api_key_team_id",
    "api_key": "metadata.user_api_key_hash",
}
TWIN_FIELDS |= {payload: column for column, payload in TWIN_FIELDS.items()}


#: The fields of TENANT_CHAIN that name an organisation or a team: a record naming its customer by one of them may hold
#: another customer id in a later one (:func:`other_ids`). Not the user and key fields: one organisation holds
#: thousands of those, and a user may belong to several organisations.
ALIAS_FIELDS = TENANT_CHAIN[:4]


def other_ids(record: Mapping[str, Any], tenant: str, field: str, tenant_field: str) -> tuple[tuple[str, str], ...]:
    """(field, id) of the customer ids the record holds in the fields of ALIAS_FIELDS after ``field``, the one that gave
    ``tenant`` (with ``auto`` only): a team's id beside its organisation's. Where another record names its customer by
    such an id (a key with no organisation), the two ids may be one customer (forensics.ingest.finalize.tenant_aliases)."""
    if tenant_field not in ("auto", "") or field not in ALIAS_FIELDS:
        return ()
    out = []
    for later in ALIAS_FIELDS[ALIAS_FIELDS.index(field) + 1:]:
        value = get_path(record, later)
        if no_tenant_value(value) or not isinstance(value, (str, int)) or isinstance(value, bool):
            continue  # (a value no tenant rule would take: as_str refuses it)
        if str(value) != tenant:
            out.append((later, str(value)))
    return tuple(out)


def resolve_tenant(record: Mapping[str, Any], tenant_field: str) -> tuple[str | None, str | None]:
    """The tenant id and the field that gave it (``auto`` walks TENANT_CHAIN; a field named in
    :data:`TWIN_FIELDS` is read under its other name where the record has none under this one)."""
    twin = TWIN_FIELDS.get(tenant_field)
    chain = TENANT_CHAIN if tenant_field in ("auto", "") else (tenant_field, twin) if twin else (tenant_field,)
    for field in chain:
        value = get_path(record, field)
        if no_tenant_value(value):
            continue
        return as_str(value, field), field
    return None, None


class LiteLLMParser:
    """Spend-log rows (``request_id``) and logging payloads (``id``, bare or wrapped)."""

    name = "litellm"

    def sniff(self, lines: list[str], file_name: str) -> bool:
        """Spend-log or payload keys on the first JSON objects."""
        for obj in first_objects(lines):
            if "standard_logging_object" in obj:
                return True
            keys = set(obj)
            if len(keys & SPEND_LOG_KEYS) >= 3 or ("id" in keys and len(keys & PAYLOAD_KEYS) >= 4):
                return True
        return False

    def parse(self, text: str, line_number: int, ctx: FileContext) -> Output:
        """One log record into an exchange row, or a quarantine reason."""
        try:
            obj = loads_object(text)
        except RecordError as exc:
            return Quarantined(str(exc))
        return self._record(obj, line_number, ctx)

    def parse_raw(self, raw: bytes, line_number: int, ctx: FileContext) -> Output | NotParsed:
        """:meth:`parse` of a line's bytes; a line that is not a JSON object (or not UTF-8, which
        orjson checks) is left to :meth:`parse`, which gives it its reason."""
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return NOT_PARSED
        if not isinstance(obj, dict):
            return NOT_PARSED
        return self._record(obj, line_number, ctx)

    def _record(self, obj: dict[str, Any], line_number: int, ctx: FileContext) -> Output:
        try:
            event = None
            if "standard_logging_object" in obj:
                event = obj.get("event")
                obj = maybe_json(obj["standard_logging_object"], "standard_logging_object")
                if not isinstance(obj, dict):
                    raise RecordError("standard_logging_object is not an object")
            if "request_id" in obj:
                row = self._spend_log(obj, ctx)
                kind = "spend_log"
            elif "id" in obj:
                row = self._payload(obj, ctx, event)
                kind = "logging_payload"
            else:
                raise RecordError("missing required field 'request_id' (spend log) or 'id' (logging payload)")
        except RecordError as exc:
            return Quarantined(str(exc), no_tenant=isinstance(exc, NoTenant))
        row.update(provenance(ctx, line_number, "", kind))
        return "exchanges", row

    def _common(self, obj: dict[str, Any], ctx: FileContext, request_id: str, messages: Any,
                parts: Mapping[str, Any], responses: bool = False, spend_log: bool = False) -> dict[str, Any]:
        received, assumed1 = time_field(obj, "startTime", ctx.zone)
        completed, assumed2 = time_field(obj, "endTime", ctx.zone, required=False)
        tenant, tenant_field = resolve_tenant(obj, ctx.tenant_field)
        if tenant is None:
            raise NoTenant(", ".join(TENANT_CHAIN) if ctx.tenant_field in ("auto", "") else ctx.tenant_field)
        metadata = maybe_json(obj.get("metadata"), "metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise RecordError(f"metadata is a {type(metadata).__name__}, expected an object")
        problems: list[str] = []
        if _redacted(messages):
            # LiteLLM's message logging turned off: it logs its placeholder for the whole conversation and every
            # answer text. Read as text, the placeholder was a 7-token prompt: it hid a long prompt from the scan,
            # and its copy outranked a spend-log row holding the real text.
            prompt, nontext, n_messages = None, 0, 0
            # Only the placeholder's parts are unknown: an older LiteLLM put it in the content alone and kept the
            # answer's reasoning and tool calls, which may hold the leak.
            text, finish, usage = response_text(_without_placeholder(maybe_json(obj.get("response"), "response")))
            text = text or None
            problems.append(f"the prompt and answer were redacted by LiteLLM ({REDACTED!r}: message logging turned "
                            "off); their text is unknown")
        else:
            prompt, nontext, n_messages = self._prompt(messages, parts, responses)
            text, finish, usage = response_text(obj.get("response"))
        reported = opt_count(obj.get("prompt_tokens"), "prompt_tokens", problems)
        if reported is None:
            reported = opt_count(usage.get("prompt_tokens"), "response.usage.prompt_tokens", problems)
        completion = opt_count(obj.get("completion_tokens"), "completion_tokens", problems)
        if completion is None:
            completion = opt_count(usage.get("completion_tokens"), "response.usage.completion_tokens", problems)
        model_group = opt_str(obj, "model_group")
        model = opt_str(obj, "model")
        status = opt_str(obj, "status") or "success"
        row: dict[str, Any] = {
            "request_id": request_id,
            "tenant_id": tenant,
            "tenant_field": tenant_field,
            "user_id": opt_str(obj, "end_user") or opt_str(obj, "user"),
            "model": model_group or model,
            "model_routed": model,
            "received_at": received,
            "completed_at": completed,
            "status": "failure" if status in ("failure", "error") else "success",
            "finish_reason": finish,
            "stream": obj.get("stream") if isinstance(obj.get("stream"), bool) else None,
            "response_text": text,
            "response_truncated": spend_log and holds_cut(text, lambda: litellm_cuts(maybe_json(obj.get("response"), "response"))),
            "reported_completion_tokens": completion,
            "completion_tokens": completion,
            "zone_assumed": ctx.zone if (assumed1 or assumed2) else None,
            "problems": "; ".join(problems) or None,
            ALIASES_KEY: other_ids(obj, tenant, tenant_field or "", ctx.tenant_field),
        }
        # Only a spend-log row holds cut strings (a callback payload holds the whole text), and only where LiteLLM cuts.
        # (The messages once: ``parts``, the request body, may hold them too.)
        cuts = (litellm_cuts(messages, *[v for v in parts.values() if v is not messages])
                if spend_log and prompt and "litellm_truncated" in prompt else None)
        row.update(prompt_fields(prompt, nontext, n_messages, reported, ctx, cuts))
        return row

    @staticmethod
    def _prompt(messages: Any, parts: Mapping[str, Any], responses: bool = False) -> tuple[str | None, int, int]:
        """The prompt of the chat ``messages`` with what ``parts`` (the request body, or the payload's
        ``model_parameters``) holds beside them that the model reads: a top-level system, tool definitions;
        with ``responses``, of the Responses API request body ``parts``."""
        if messages is None or messages == {} or messages == "":
            return None, 0, 0
        try:
            if responses:
                return schema.render_responses_input(parts)
            if isinstance(messages, list) and messages and all(isinstance(m, str) for m in messages):
                return schema.render_prompt(messages), 0, 1  # a legacy completions prompt given as a list
            if isinstance(messages, list):
                return schema.render_request(messages, *schema.request_parts(parts))
            if isinstance(messages, str):
                return schema.render_prompt(messages), 0, 1
        except TypeError as exc:
            raise RecordError(str(exc)) from None
        raise RecordError(f"messages is a {type(messages).__name__}, expected a list of messages")

    def _spend_log(self, obj: dict[str, Any], ctx: FileContext) -> dict[str, Any]:
        request_id = req_str(obj, "request_id")
        psr = maybe_json(obj.get("proxy_server_request"), "proxy_server_request")
        messages: Any = None
        responses = False
        if isinstance(psr, dict):
            messages = maybe_json(psr.get("messages"), "proxy_server_request.messages")
            if messages is None and "prompt" in psr:
                messages = psr["prompt"]
            elif messages is None and schema.is_responses_request(psr, declared=_responses_call(obj)):
                messages, responses = psr["input"], True
        if messages in (None, {}, []):
            messages = maybe_json(obj.get("messages"), "messages")
        row = self._common(obj, ctx, request_id, messages, psr if isinstance(psr, dict) else {}, responses, spend_log=True)
        if row["stream"] is None:
            row["stream"] = stream_flag(psr)
        return row

    def _payload(self, obj: dict[str, Any], ctx: FileContext, event: Any) -> dict[str, Any]:
        request_id = req_str(obj, "id")
        messages = maybe_json(obj.get("messages"), "messages")
        # The payload logs the request's other parameters, tool definitions among them, apart from the
        # messages. Not its system: LiteLLM puts a top-level system string into the messages.
        try:
            params = maybe_json(obj.get("model_parameters"), "model_parameters")
        except RecordError:  # a cut string: its tools are not readable, the record is (it never needed them before)
            params = None
        tools = {k: params[k] for k in ("tools", "functions") if k in params} if isinstance(params, Mapping) else {}
        row = self._common(obj, ctx, request_id, messages, tools)
        if event == "failure":
            row["status"] = "failure"
        return row


#: What LiteLLM logs in place of the messages and answer texts when message logging is turned off
#: (``litellm.constants.REDACTED_BY_LITELLM``; ``turn_off_message_logging``, a callback's ``message_logging: false``).
REDACTED = "redacted-by-litellm"


def _redacted(messages: Any) -> bool:
    """Whether ``messages`` is LiteLLM's redaction placeholder, which replaces the whole conversation by one user
    message holding :data:`REDACTED` (in callback payloads and in a spend log's request body alike)."""
    return (isinstance(messages, list) and len(messages) == 1 and isinstance(messages[0], dict)
            and messages[0].get("content") == REDACTED and messages[0].get("role") == "user")


def _without_placeholder(value: Any) -> Any:
    """``value`` (an answer) with every string that is LiteLLM's redaction placeholder taken out (null)."""
    if isinstance(value, dict):
        return {k: _without_placeholder(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_placeholder(v) for v in value]
    return None if value == REDACTED else value


def _responses_call(obj: Mapping[str, Any]) -> bool:
    """Whether a spend-log row is of a Responses API call: its ``call_type``, or its answer's shape."""
    response = obj.get("response")
    return "responses" in str(obj.get("call_type")) or (isinstance(response, Mapping) and schema.is_responses_output(response))


_parser = LiteLLMParser()
FORMAT = register(LogFormat(
    name=_parser.name,
    summary="LiteLLM proxy logs: callback payloads (StandardLoggingPayload, bare or wrapped) and spend-log rows",
    table="exchanges",
    sniff=_parser.sniff,
    parse=_parser.parse,
    parse_raw=_parser.parse_raw,
    json_lines=True,
    sniff_order=10,
    # A callback payload holds the whole text; a spend-log row's long strings are cut (the DB safeguard).
    kinds=(RecordKind("logging_payload", precedence=0), RecordKind("spend_log", precedence=2)),
    naive_zone="UTC",  # log-formats.md: written in UTC, with no zone
))
