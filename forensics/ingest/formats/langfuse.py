"""Langfuse observations exports, as JSON Lines, CSV or Parquet (log-formats.md §4).

Langfuse's blob-storage export writes one row per observation (``observations/`` and the
enriched ``observations_v2/``): ``id``, ``trace_id``, ``project_id``, ``type``, ``start_time``,
``end_time`` and ``completion_start_time`` (``YYYY-MM-DD HH:MM:SS.ffffff``, UTC with no zone),
``input`` and ``output`` (strings holding JSON or plain text), ``usage_details`` (``input``,
``output``, ``total``), ``provided_model_name``, ``model_parameters`` (a JSON string),
``metadata``, ``level``, ``status_message``, and in the enriched export the trace's ``user_id``.
In CSV every object is a JSON-encoded string and null an empty field; in Parquet the columns are
typed (times, maps), which forensics.ingest.parquet turns into the JSON export's values. The
public API's camelCase names (``traceId``, ``startTime``, ``endTime``, ``model``, ``usage``,
``usageDetails``, ``projectId``, ``userId``) are read too, so observations fetched from the API and
saved as JSON Lines load as well (the v1 API names no project: set ``tenant_field`` then).

Only ``GENERATION`` observations are model calls. The others (``SPAN``, ``EVENT``, ``TOOL``, …)
are well-formed records of something else: each is counted by type in the file's
``skipped_records`` (with the blank lines), never ingested and never quarantined.

The tenant is ``project_id`` (one Langfuse project per customer); ``tenant_field`` may name any
other field or dotted path, e.g. ``user_id`` or ``metadata.customer``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from forensics import schema
from forensics.ingest.base import FileContext, Output, Quarantined, SkippedRecord, prompt_fields, provenance
from forensics.ingest.fields import (
    ANSWER_KEYS,
    INT64_MAX,
    NoTenant,
    RecordError,
    as_str,
    chunks_text,
    error_body,
    first_objects,
    get_path,
    json_string,
    loads_object,
    message_text,
    no_tenant_value,
    opt_count,
    opt_str,
    response_text,
    time_field,
)
from forensics.ingest.formats.helicone import CSV_ERROR
from forensics.ingest.formats.helicone import read_records as read_text_records
from forensics.ingest.parquet import ROW_ERROR, is_parquet, read_rows
from forensics.ingest.reader import FileProblem, Line, Span
from forensics.ingest.registry import LogFormat, RecordKind, register

#: The default tenant: the Langfuse project the observation belongs to.
TENANT_FIELD = "project_id"
#: The observation type that is a model call; every other type is skipped (counted by type).
GENERATION = "GENERATION"
#: Each field as the blob-storage export names it, then as the public API does.
ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id",),
    "trace_id": ("trace_id", "traceId"),
    "project_id": ("project_id", "projectId"),
    "type": ("type",),
    "start_time": ("start_time", "startTime"),
    "end_time": ("end_time", "endTime"),
    "model": ("provided_model_name", "providedModelName", "model"),
    "user_id": ("user_id", "userId"),
    "usage_details": ("usage_details", "usageDetails", "usage", "provided_usage_details", "providedUsageDetails"),
    "model_parameters": ("model_parameters", "modelParameters"),
}
#: Usage keys for the prompt and completion counts: Langfuse's own, then older SDKs' and OpenAI's.
PROMPT_KEYS = ("input", "promptTokens", "prompt_tokens", "input_tokens")
#: Anthropic's ``input_tokens`` leaves out the prompt tokens served from (or written to) a cache, which these keys
#: count apart; OpenAI's ``prompt_tokens`` holds them. The prompt's count is the sum: a long resend served from the
#: prefix cache must not read as a one-token prompt (the placeholder's count).
CACHE_KEYS = ("cache_read_input_tokens", "cache_creation_input_tokens")
#: Langfuse's own ``input`` and ``output`` are what is left of the provider's count once every detail it gave
#: (``prompt_tokens_details``: cached, audio, text tokens...; ``completion_tokens_details``: reasoning...) is taken
#: out into a key of its own, ``input_<detail>`` / ``output_<detail>``, never below 0. See :func:`_with_details`.
DETAILED = {"input": "input_", "output": "output_"}
COMPLETION_KEYS = ("output", "completionTokens", "completion_tokens", "output_tokens")
#: An observation has these together (with ``id``); no other format's record does.
SIGNS = {"trace_id", "type", "start_time"}
CAMEL_SIGNS = {"traceId", "type", "startTime"}


def read_records(path: Path, problems: list[FileProblem], span: Span | None = None) -> Iterator[Line]:
    """The file's observations: Parquet rows, or JSON Lines / CSV records (as Helicone's reader gives them)."""
    if is_parquet(path):
        return read_rows(path, problems, span)
    return read_text_records(path, problems, span)


def csv_header(line: str) -> list[str] | None:
    """The column names when ``line`` is a CSV header (not a JSON object), else None."""
    if line.lstrip().startswith("{"):
        return None
    try:
        return next(csv.reader([line]))
    except (csv.Error, StopIteration):
        return None


def _field(obj: Mapping[str, Any], name: str) -> tuple[Any, str]:
    """The value of a field under the first of its names that is present, and that name."""
    names = ALIASES[name]
    for key in names:
        if key in obj:
            return obj[key], key
    return None, names[0]




def resolve_tenant(obj: Mapping[str, Any], tenant_field: str) -> tuple[str, str]:
    """The tenant id and the field that gave it (``auto`` means project_id)."""
    if tenant_field in ("auto", ""):
        value, field = _field(obj, "project_id")
    else:
        value, field = get_path(obj, tenant_field), tenant_field
    if no_tenant_value(value):
        raise NoTenant(field)
    return as_str(value, field), field


def _count(usage: Mapping[str, Any], keys: tuple[str, ...], field: str, problems: list[str]) -> int | None:
    for key in keys:
        if usage.get(key) not in (None, ""):
            count = opt_count(usage[key], f"{field}.{key}", problems)
            if count is None:
                return None
            if key in DETAILED:
                count = _with_details(count, usage, DETAILED[key], field, problems)
            if key in ("input", "input_tokens"):
                # Anthropic's own names: its ``input_tokens`` leaves out both. Beside Langfuse's ``input`` (as LiteLLM's
                # Langfuse logger writes it) only the cache reads are left out, the cache writes are still inside, and
                # a reads count Langfuse already split off (``input_cache_read``) is the same tokens again.
                apart = CACHE_KEYS if key == "input_tokens" else () if "input_cache_read" in usage else CACHE_KEYS[:1]
                cached = [opt_count(usage[k], f"{field}.{k}", problems) for k in apart if usage.get(k) not in (None, "")]
                count += sum(c for c in cached if c is not None)
            if count > INT64_MAX:
                problems.append(f"{field}.{key} with its detail counts is out of range (more than 64 bits)")
                return None
            return count
    return None


def _with_details(rest: int, usage: Mapping[str, Any], prefix: str, field: str, problems: list[str]) -> int:
    """The provider's count rebuilt from Langfuse's ``input`` (or ``output``) = ``rest`` and its detail keys.

    Langfuse takes each detail out of the count (``rest = max(count - sum of details, 0)``), so the count is
    ``rest`` + the details while ``rest`` is above 0. At 0 the details overlapped (xAI and Qwen count a prompt's
    text tokens, which hold its cached ones): the count is at least the largest detail, which is what is taken
    (the sum would count the cached tokens twice). Read alone, ``input`` was 0 for an 812,345-token prompt.
    """
    details = [opt_count(v, f"{field}.{k}", problems) for k, v in usage.items()
               if isinstance(k, str) and k.startswith(prefix) and v not in (None, "")]
    counts = [d for d in details if d is not None]
    if not counts:
        return rest
    return rest + sum(counts) if rest > 0 else max(counts)


class LangfuseParser:
    """Langfuse observations (GENERATION rows) from a JSON Lines, CSV or Parquet export."""

    name = "langfuse"

    def sniff(self, lines: list[str], file_name: str) -> bool:
        """A JSON object or a CSV header with ``id`` and trace_id, type and start_time (either naming)."""
        if lines:
            header = csv_header(lines[0])
            if header is not None:
                names = {h.strip() for h in header}
                return "id" in names and (SIGNS <= names or CAMEL_SIGNS <= names)
        return any("id" in obj and (SIGNS <= set(obj) or CAMEL_SIGNS <= set(obj)) for obj in first_objects(lines))

    def parse(self, text: str, line_number: int, ctx: FileContext) -> Output:
        """One observation into an exchange row, a skipped record (not a generation), or a quarantine reason."""
        try:
            obj = loads_object(text)
            for marker in (CSV_ERROR, ROW_ERROR):
                if marker in obj:
                    raise RecordError(str(obj[marker]), fix="re-export the file (JSON Lines reads most simply) and ingest it again")
            kind = self._type(obj)
            if kind != GENERATION:
                return SkippedRecord(f"langfuse {kind} observation")
            row = self._row(obj, ctx)
        except RecordError as exc:
            return Quarantined(str(exc), no_tenant=isinstance(exc, NoTenant))
        row.update(provenance(ctx, line_number, text, "langfuse_generation"))
        return "exchanges", row

    @staticmethod
    def _type(obj: Mapping[str, Any]) -> str:
        value = obj.get("type")
        if value is None or value == "":
            raise RecordError("missing required field 'type'", fix="re-export the observations with their type (GENERATION rows are the model calls)")
        if not isinstance(value, str):
            raise RecordError(f"field 'type' is a {type(value).__name__}, expected a string such as GENERATION")
        # A hostile or broken type must not become an unbounded manifest key.
        return value.strip().upper()[:40]

    def _row(self, obj: dict[str, Any], ctx: FileContext) -> dict[str, Any]:
        value, key = _field(obj, "id")
        if value is None or value == "":
            raise RecordError("missing required field 'id'", fix="re-export the observations with 'id' (it identifies the call)")
        request_id = as_str(value, key)
        received, assumed1 = self._time(obj, "start_time", required=True, zone=ctx.zone)
        completed, assumed2 = self._time(obj, "end_time", required=False, zone=ctx.zone)
        tenant, tenant_field = resolve_tenant(obj, ctx.tenant_field)
        problems: list[str] = []

        request, input_cut = json_string(obj.get("input"), "input", "observation")
        if input_cut:
            problems.append("input is cut short (its JSON ends early); the prompt text is unknown")
        response, output_cut = json_string(obj.get("output"), "output", "observation")
        prompt, nontext, n_messages = self._prompt(request, response)
        if output_cut:
            problems.append("output is cut short (its JSON ends early); the response text is unknown")
        text, finish, response_usage = self._response(response, problems)

        usage_value, usage_key = _field(obj, "usage_details")
        usage, _ = json_string(usage_value, usage_key, "observation")
        if usage is not None and not isinstance(usage, Mapping):
            problems.append(f"{usage_key} is a {type(usage).__name__}, not an object of counts; ignored")
            usage = None
        usage = usage or {}
        reported = _count(usage, PROMPT_KEYS, usage_key, problems)
        if reported is None:
            reported = opt_count(response_usage.get("prompt_tokens"), "output.usage.prompt_tokens", problems)
        completion = _count(usage, COMPLETION_KEYS, usage_key, problems)
        if completion is None:
            completion = opt_count(response_usage.get("completion_tokens"), "output.usage.completion_tokens", problems)

        params_value, params_key = _field(obj, "model_parameters")
        try:
            params, _ = json_string(params_value, params_key, "observation")
        except RecordError:
            problems.append(f"{params_key} is not valid JSON; ignored")
            params = None
        stream = params.get("stream") if isinstance(params, Mapping) else None
        if isinstance(stream, str) and stream.lower() in ("true", "false"):
            stream = stream.lower() == "true"  # Langfuse keeps model parameters as strings

        level = opt_str(obj, "level")
        failed = (level or "").upper() == "ERROR" or (error_body(response) and "choices" not in response)
        model_value, model_key = _field(obj, "model")
        user_value, user_key = _field(obj, "user_id")
        # No end and no output: an observation still open when exported (the call never answered).
        routed = response.get("model") if isinstance(response, Mapping) and isinstance(response.get("model"), str) else None
        row: dict[str, Any] = {
            "request_id": request_id,
            "tenant_id": tenant,
            "tenant_field": tenant_field,
            "user_id": None if user_value in (None, "") else as_str(user_value, user_key),
            "model": None if model_value in (None, "") else as_str(model_value, model_key),
            "model_routed": routed,
            "received_at": received,
            "completed_at": completed,
            "status": "failure" if failed else "success" if completed is not None or response is not None or output_cut else "incomplete",
            "status_code": None,
            "finish_reason": finish,
            "stream": stream if isinstance(stream, bool) else None,
            "response_text": None if output_cut else text,
            "response_truncated": output_cut,
            "reported_completion_tokens": completion,
            "completion_tokens": completion,
            "zone_assumed": ctx.zone if (assumed1 or assumed2) else None,
            "problems": "; ".join(problems) or None,
        }
        row.update(prompt_fields(prompt, nontext, n_messages, reported, ctx))
        if input_cut:
            # The export kept the start of the input only: the prompt is longer than anything read.
            row["prompt_truncated"] = True
        return row

    @staticmethod
    def _time(obj: Mapping[str, Any], name: str, required: bool, zone: str) -> tuple[int | None, bool]:
        _, key = _field(obj, name)
        return time_field(obj, key, zone, required=required)

    @staticmethod
    def _prompt(request: Any, answer: Any = None) -> tuple[str | None, int, int]:
        """The prompt of an observation's input: chat messages, one message, an object holding
        ``messages`` (or ``prompt``, or a Responses API ``input``, known by its keys or by the
        observation's ``answer``), or plain text."""
        try:
            if request is None:
                return None, 0, 0
            if isinstance(request, str):
                return schema.render_prompt(request), 0, 1
            if isinstance(request, Mapping):
                if "messages" in request:
                    # Langfuse's OpenAI integration logs the tool definitions beside the messages.
                    messages = request["messages"]
                    if not isinstance(messages, list):
                        raise RecordError(f"input.messages is a {type(messages).__name__}, expected a list of messages")
                    return schema.render_request(messages, *schema.request_parts(request))
                elif "prompt" in request:
                    return schema.render_prompt(request["prompt"]), 0, 1
                elif schema.is_responses_request(request, isinstance(answer, Mapping) and schema.is_responses_output(answer)):
                    return schema.render_responses_input(request)
                elif "role" in request and "content" in request:
                    request = [request]
                else:
                    raise RecordError("input is an object with neither messages, prompt nor role and content (nor is it a Responses API request)",
                                      fix="check that the export holds the model calls' inputs (GENERATION rows)")
            if isinstance(request, list):
                return schema.render_request(request)
        except TypeError as exc:
            raise RecordError(f"input: {exc}") from None
        raise RecordError(f"input is a {type(request).__name__}, expected messages or text")

    @staticmethod
    def _response(response: Any, problems: list[str]) -> tuple[str | None, str | None, dict[str, Any]]:
        """Text, finish reason and usage of an observation's output: the assistant message
        Langfuse's integrations store, a whole ChatCompletion, streamed chunks, or plain text."""
        if response is None:
            return None, None, {}
        if isinstance(response, str):
            return response, None, {}
        if isinstance(response, list):
            if schema.is_responses_output({"output": response}):
                return response_text({"output": response}, "output")  # a Responses API answer's output items
            if all(isinstance(c, Mapping) and "choices" in c for c in response):
                return chunks_text(response, "output")
            if all(isinstance(m, Mapping) and _is_message(m) for m in response):
                return schema.render_choices(message_text(_with_text(m), f"output[{i}]") for i, m in enumerate(response)), None, {}
        elif isinstance(response, Mapping):
            if "choices" in response or schema.is_responses_output(response) or ("error" in response and "content" not in response):
                return response_text(response, "output")  # a ChatCompletion or a Responses API answer
            if _is_message(response):
                return message_text(_with_text(response), "output"), None, {}
            if isinstance(response.get("text"), str):
                return response["text"], None, {}
        problems.append(f"output is a {type(response).__name__} of a shape not known to hold the answer; response text unknown")
        return None, None, {}


def _is_message(output: Mapping[str, Any]) -> bool:
    """An output that is an assistant message: a ``content`` (or a ``role`` beside an answer key), or tool
    calls or reasoning text that are there (a null or empty one beside a ``text``, as the Vercel AI SDK
    writes, is not)."""
    return ("content" in output or ("role" in output and not ANSWER_KEYS.isdisjoint(output))
            or not schema.absent(output.get("tool_calls")) or not schema.absent(output.get("function_call"))
            or bool(schema.reasoning_text(output)))


def _with_text(output: Mapping[str, Any]) -> Mapping[str, Any]:
    """An output message whose answer is its ``text`` (no ``content``): that text as its content."""
    if output.get("content") is None and isinstance(output.get("text"), str):
        return {**output, "content": output["text"]}
    return output


_parser = LangfuseParser()
FORMAT = register(LogFormat(
    name=_parser.name,
    summary="Langfuse observations export (JSON Lines, CSV or Parquet): GENERATION rows; spans and events are counted, not ingested",
    table="exchanges",
    sniff=_parser.sniff,
    parse=_parser.parse,
    sniff_order=40,  # after helicone; an observation has none of the other formats' signs
    kinds=(RecordKind("langfuse_generation", precedence=1),),
    read=read_records,
    splittable=False,  # a quoted CSV field may hold line breaks; a Parquet file is read whole
    parquet=True,
    naive_zone="UTC",  # log-formats.md: written in UTC, with no zone
))
