"""Split request/response logs joined by ``request_id`` (log-formats.md §2).

Each line becomes a half row (``split_request`` or ``split_response``); the case's finalise step
joins the halves across files and flags the orphans on either side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forensics import schema
from forensics.ingest.base import FileContext, Output, Quarantined, prompt_fields, provenance
from forensics.ingest.fields import (
    NoTenant,
    RecordError,
    as_str,
    chunks_text,
    error_body,
    first_objects,
    loads_object,
    maybe_json,
    no_tenant_value,
    opt_count,
    opt_int,
    opt_str,
    req_str,
    response_text,
    stream_flag,
    time_field,
)
from forensics.ingest.registry import LogFormat, RecordKind, register


def _is_request(obj: Mapping[str, Any]) -> bool:
    # The content decides: some gateways write tenant_id on the response lines too, so tenant_id
    # only tells a line that is neither (a body held as a JSON string, say) for a request.
    body = obj.get("body")
    if isinstance(body, Mapping) and ("messages" in body or "prompt" in body):
        return True
    return "tenant_id" in obj and not _is_response(obj)


def _is_response(obj: Mapping[str, Any]) -> bool:
    body = obj.get("body")
    return "status_code" in obj or "chunks" in obj or (isinstance(body, Mapping) and ("choices" in body or "error" in body))


class OpenAISplitParser:
    """Request lines (tenant, body with messages) and response lines (status, body or chunks)."""

    name = "openai-split"

    def sniff(self, lines: list[str], file_name: str) -> bool:
        """request_id + timestamp with a request body or a response status/chunks."""
        for obj in first_objects(lines):
            if "request_id" in obj and "timestamp" in obj and (_is_request(obj) or _is_response(obj)):
                return True
        return False

    def parse(self, text: str, line_number: int, ctx: FileContext) -> Output:
        """One request or response line into a half row."""
        try:
            obj = loads_object(text)
            if _is_request(obj):
                row = self._request(obj, ctx)
                kind = "split_request"
            elif _is_response(obj):
                row = self._response(obj, ctx)
                kind = "split_response"
            else:
                raise RecordError("neither a request (tenant_id, body.messages) nor a response (status_code, body, chunks)")
        except RecordError as exc:
            return Quarantined(str(exc), no_tenant=isinstance(exc, NoTenant))
        row.update(provenance(ctx, line_number, text, kind))
        return "exchanges", row

    def _request(self, obj: dict[str, Any], ctx: FileContext) -> dict[str, Any]:
        request_id = req_str(obj, "request_id")
        received, assumed = time_field(obj, "timestamp", ctx.zone)
        field = "tenant_id" if ctx.tenant_field in ("auto", "", "tenant_id") else ctx.tenant_field
        tenant_value = obj.get(field)
        if no_tenant_value(tenant_value):
            raise NoTenant(field)
        tenant = as_str(tenant_value, field)
        body = maybe_json(obj.get("body"), "body")
        if not isinstance(body, dict):
            raise RecordError("missing required field 'body' (the chat request)")
        nontext, n_messages = 0, 0
        try:
            if "messages" in body:
                messages = maybe_json(body["messages"], "body.messages")
                prompt, nontext, n_messages = schema.render_request(messages, *schema.request_parts(body))
            elif "prompt" in body:
                prompt, n_messages = schema.render_prompt(body["prompt"]), 1
            elif schema.is_responses_request(body):  # a Responses API request (/v1/responses)
                prompt, nontext, n_messages = schema.render_responses_input(body)
            else:
                raise RecordError("body has neither 'messages' nor 'prompt' (nor is it a Responses API request)")
        except TypeError as exc:
            raise RecordError(f"body.{exc}") from None
        row: dict[str, Any] = {
            "request_id": request_id,
            "tenant_id": tenant,
            "tenant_field": field,
            "user_id": opt_str(obj, "user_id"),
            "model": opt_str(body, "model"),
            "received_at": received,
            "stream": stream_flag(body),
            "zone_assumed": ctx.zone if assumed else None,
        }
        row.update(prompt_fields(prompt, nontext, n_messages, None, ctx))
        return row

    def _response(self, obj: dict[str, Any], ctx: FileContext) -> dict[str, Any]:
        request_id = req_str(obj, "request_id")
        completed, assumed = time_field(obj, "timestamp", ctx.zone)
        problems: list[str] = []
        status_code = opt_int(obj.get("status_code"), "status_code", problems, 0, 999)  # HTTP: three digits
        text: str | None
        if obj.get("chunks") is not None:  # exporters write "chunks": null beside a non-streamed body
            chunks = maybe_json(obj["chunks"], "chunks")
            if not isinstance(chunks, list):
                raise RecordError(f"chunks is a {type(chunks).__name__}, expected a list")
            text, finish, usage = chunks_text(chunks)
            stream = True
        else:
            text, finish, usage = response_text(obj.get("body"), "body")
            stream = None
            chunks = None
        body = maybe_json(obj.get("body"), "body")
        model = body.get("model") if isinstance(body, Mapping) and isinstance(body.get("model"), str) else None
        if model is None and chunks:
            # A streamed answer names its model in every chunk (ChatCompletionChunk.model); with its request half
            # rotated away it is the only record of the model, and without it the suspect fell out of the scope.
            model = next((c["model"] for c in chunks if isinstance(c, Mapping) and isinstance(c.get("model"), str)), None)
        failed = (status_code is not None and status_code >= 400) or error_body(body)
        return {
            "request_id": request_id,
            "model_routed": model,
            "completed_at": completed,
            "status": "failure" if failed else "success",
            "status_code": status_code,
            "finish_reason": finish,
            "stream": stream,
            "response_text": text,
            "response_truncated": False,
            "reported_prompt_tokens": opt_count(usage.get("prompt_tokens"), "usage.prompt_tokens", problems),
            "reported_completion_tokens": opt_count(usage.get("completion_tokens"), "usage.completion_tokens", []),
            "completion_tokens": opt_count(usage.get("completion_tokens"), "usage.completion_tokens", problems),
            "zone_assumed": ctx.zone if assumed else None,
            "problems": "; ".join(problems) or None,
        }


_parser = OpenAISplitParser()
FORMAT = register(LogFormat(
    name=_parser.name,
    summary="split request and response logs (JSON Lines) joined by request_id",
    table="exchanges",
    sniff=_parser.sniff,
    parse=_parser.parse,
    sniff_order=20,  # after litellm: a spend-log row also has request_id and a body-like field
    kinds=(RecordKind("split_request", precedence=1, half="request", joined="split"),
           RecordKind("split_response", precedence=1, half="response", joined="split")),
    json_lines=True,
))
