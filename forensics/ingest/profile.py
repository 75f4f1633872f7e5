"""``forensics profile suggest``: a starting mapping profile guessed from a sample of a log file.

The fields of the file's first records are listed as dotted paths (as ``[inputs.fields]`` writes
them) with an example value, and each canonical column is guessed from field names and value
shapes. The guess is a start for the analyst to check, never a profile to trust unread: every
guess that could be wrong says so in a comment of the TOML block, and the tenant always does
(the customer field decides who is notified).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from forensics.config import PROFILE_KEYS
from forensics.csvfile import escape_controls
from forensics.errors import InputError
from forensics.ingest.formats.mapped import container, decoded, sample
from forensics.ingest.reader import foreign_encoding
from forensics.ingest.timeparse import NUMBER, TimeError, to_micros

#: Records read by default.
SAMPLE_RECORDS = 200
#: Characters of an example value shown.
EXAMPLE_CHARS = 60
#: How deep into nested objects (and JSON strings) fields are listed, and how many at most.
MAX_DEPTH = 8
MAX_FIELDS = 400


@dataclasses.dataclass
class Field:
    """One dotted path found in the sample: in how many records, its value types, an example."""

    path: str
    present: int = 0
    types: list[str] = dataclasses.field(default_factory=list)
    example: Any = None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (the example shown, truncated and escaped)."""
        return {"path": self.path, "present": self.present, "types": self.types, "example": shown(self.example)}


@dataclasses.dataclass
class Guess:
    """The paths guessed for one canonical column, and why the analyst should check it (if so)."""

    key: str
    paths: list[str]
    uncertain: str | None = None


@dataclasses.dataclass
class Suggestion:
    """What ``profile suggest`` found in a file and the profile it guesses."""

    file: str
    container: str
    records: int
    whole_file: bool
    fields: list[Field]
    guesses: list[Guess]
    time_format: str
    time_note: str | None
    toml: str = ""
    #: Records of the sample that are no JSON object or CSV record: (line or row, why), never silently left out.
    unreadable: list[tuple[int, str]] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready summary (for ``--json``)."""
        return {
            "file": self.file, "container": self.container, "records": self.records, "whole_file": self.whole_file,
            "fields": [f.to_json() for f in self.fields],
            "guess": {g.key: {"paths": g.paths, "uncertain": g.uncertain} for g in self.guesses},
            "time_format": self.time_format, "time_note": self.time_note, "toml": self.toml,
            "unreadable": [{"line": n, "why": why} for n, why in self.unreadable],
        }


def shown(value: Any) -> str:
    """An example value in at most EXAMPLE_CHARS characters (objects as JSON); whoever prints it
    escapes its control characters (the CLI does, JSON output does)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 3] + "..."


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def field_paths(records: list[dict[str, Any]]) -> list[Field]:
    """Every dotted path of the records (objects, lists at index 0, JSON strings decoded), sorted."""
    fields: dict[str, Field] = {}

    def visit(value: Any, path: str, depth: int) -> None:
        if path:
            f = fields.get(path)
            if f is None:
                if len(fields) >= MAX_FIELDS:
                    return
                f = fields[path] = Field(path)
            if value is not None and value != "":
                f.present += 1
                if f.example is None:
                    f.example = value
            kind = _type(value)
            if kind not in f.types:
                f.types.append(kind)
        if depth >= MAX_DEPTH:
            return
        inner = decoded(value) if path else value
        if isinstance(inner, Mapping):
            for key in inner:
                visit(inner[key], f"{path}.{key}" if path else str(key), depth + 1)
        elif isinstance(inner, list) and inner:
            visit(inner[0], f"{path}.0", depth + 1)

    for record in records:
        visit(record, "", 0)
    for f in fields.values():
        f.types.sort()
    return sorted(fields.values(), key=lambda f: f.path)


# ---- guessing ---------------------------------------------------------------------------------


def _leaf(path: str) -> str:
    """The last part of a path that is not a list index, lower-cased without _ and -."""
    parts = [p for p in path.split(".") if not p.isdigit()]
    return re.sub(r"[_\-]", "", parts[-1].lower()) if parts else ""


def _depth(path: str) -> int:
    return path.count(".")


def _names(fields: list[Field], names: tuple[str, ...], kinds: tuple[str, ...]) -> list[str]:
    """Paths whose leaf is one of ``names`` (earlier names first, then shallower), of a value kind."""
    ranked = []
    for f in fields:
        leaf = _leaf(f.path)
        if leaf in names and f.present and set(f.types) - {"null"} <= set(kinds):
            ranked.append((names.index(leaf), _depth(f.path), f.path))
    return [p for _, _, p in sorted(ranked)]


def _counts(fields: list[Field], names: tuple[str, ...]) -> list[str]:
    """Number paths such as ``usage.in`` or ``tokens.output``: a short name under usage or tokens."""
    found = []
    for f in fields:
        parts = [p.lower() for p in f.path.split(".")]
        if len(parts) >= 2 and parts[-2] in ("usage", "tokens", "token_usage") and parts[-1] in names \
                and f.present and set(f.types) - {"null"} <= {"number", "string"}:
            found.append(f.path)
    return sorted(found, key=lambda p: (_depth(p), p))


def _is_chat(value: Any) -> bool:
    """A ChatCompletion object or a list of chunks (also as a JSON string)."""
    value = decoded(value)
    if isinstance(value, Mapping):
        return isinstance(value.get("choices"), list)
    return isinstance(value, list) and bool(value) and isinstance(decoded(value[0]), Mapping) and "choices" in decoded(value[0])


def _is_messages(value: Any) -> bool:
    value = decoded(value)
    return isinstance(value, list) and bool(value) and all(isinstance(m, Mapping) and "content" in m for m in value)


def _is_time(value: Any) -> bool:
    try:
        to_micros(value)
    except TimeError:
        return False
    return True


def _chat_paths(fields: list[Field], records: list[dict[str, Any]]) -> list[str]:
    """Paths holding a ChatCompletion or chunk list in some record, shallowest first."""
    from forensics.ingest.formats.mapped import resolve

    found = []
    for f in fields:
        if "object" in f.types or "list" in f.types or "string" in f.types:
            if any(_is_chat(resolve(r, f.path)) for r in records[:50]):
                found.append(f.path)
    # Not a path inside another one found (its choices.0 ... are read through it).
    kept = [p for p in found if not any(p != q and p.startswith(q + ".") for q in found)]
    return sorted(kept, key=lambda p: (_depth(p), p))


TENANT_NAMES = (
    ("organizationid", "orgid", "organization", "org", "tenantid", "tenant", "accountid", "account", "customerid", "customer",
     "userapikeyorgid"),
    ("teamid", "team", "userapikeyteamid", "projectid", "project", "workspaceid", "workspace"),
    ("userapikeyuserid",),
    ("apikey", "apikeyhash", "keyhash", "userapikeyhash", "userapikey", "hashedapikey", "keyid"),
)


def _tenant(fields: list[Field]) -> list[str]:
    """Tenant candidates, organisation before team before key-owner before API key."""
    ranked = []
    for f in fields:
        leaf = _leaf(f.path)
        if not f.present or not set(f.types) - {"null"} <= {"string", "number"}:
            continue
        for rank, names in enumerate(TENANT_NAMES):
            if leaf in names:
                ranked.append((rank, _depth(f.path), names.index(leaf), f.path))
    return [p for *_, p in sorted(ranked)][:4]


def guess(fields: list[Field], records: list[dict[str, Any]]) -> list[Guess]:
    """A guessed path list for each canonical column found (in the order of the settings table)."""
    from forensics.ingest.formats.mapped import resolve

    text, num = ("string", "number"), ("number", "string")
    g: dict[str, Guess] = {}

    def put(key: str, paths: list[str], uncertain: str | None = None) -> None:
        if paths:
            g[key] = Guess(key, list(dict.fromkeys(paths)), uncertain)

    ids = _names(fields, ("requestid", "rid", "id", "callid", "responseid", "traceid", "uuid"), text)
    put("request_id", ids[:1], None if ids and _leaf(ids[0]) == "requestid" else
        "is this the id of one request (not of a trace, session or chunk)?")
    tenant = _tenant(fields)
    put("tenant_id", tenant, "which field names the CUSTOMER? it decides who is notified"
        + ("; the later paths are fallbacks, tried in order" if len(tenant) > 1 else ""))
    put("user_id", _names(fields, ("userid", "enduser", "user", "requestuserid"), text)[:1], "the end user, not the tenant?")
    starts = [p for p in _names(fields, ("requestcreatedat", "starttime", "start", "startedat", "createdat", "created",
                                         "receivedat", "requesttime", "tsstart", "startts", "starttimestamp", "timestamp", "ts", "time"), ("string", "number"))
              if any(_is_time(resolve(r, p)) for r in records[:20])]
    put("received_at", starts[:1], None if starts and _leaf(starts[0]) in ("requestcreatedat", "starttime", "receivedat")
        else "is this when the request was received?")
    ends = [p for p in _names(fields, ("responsecreatedat", "endtime", "end", "endedat", "completedat", "completed",
                                       "finishedat", "responsetime", "tsend", "endts", "endtimestamp"), ("string", "number"))
            if any(_is_time(resolve(r, p)) for r in records[:20])]
    put("completed_at", ends[:1])
    models = _names(fields, ("modelgroup", "model", "modelname", "modelid"), text)
    put("model", models[:2], "the model asked for (a model group before the deployment)?" if len(models) > 1 else None)
    messages = [f.path for f in fields if ("list" in f.types or "string" in f.types)
                and _leaf(f.path) in ("messages", "input", "prompt") and any(_is_messages(resolve(r, f.path)) for r in records[:20])]
    messages.sort(key=lambda p: (_depth(p), p))
    put("prompt_messages", messages[:2])
    prompts = [p for p in _names(fields, ("prompt", "input", "inputtext", "prompttext", "query"), ("string",))
               if p not in messages]
    put("prompt_text", prompts[:1], "plain-text prompt: is this the whole prompt the model read?")
    chats = _chat_paths(fields, records)
    chunk_lists = [f.path for f in fields if _leaf(f.path) in ("streameddata", "chunks") and "list" in f.types]
    answers = _names(fields, ("output", "response", "completion", "outputtext", "responsetext", "answer", "content"), ("string",))
    answers = [p for p in answers if not any(p.startswith(c + ".") for c in chats)]
    response = chats + [p for p in chunk_lists if p not in chats] if chats else answers[:1]
    put("response_text", response, None if chats else "is this the whole answer text the customer received?")
    put("prompt_tokens", (_names(fields, ("prompttokens", "tokensin", "inputtokens", "prompttokencount", "ntokensin"), num)
                          + _counts(fields, ("in", "input", "prompt")))[:1])
    put("completion_tokens", (_names(fields, ("completiontokens", "tokensout", "outputtokens", "completiontokencount"), num)
                              + _counts(fields, ("out", "output", "completion")))[:1])
    put("status", _names(fields, ("status", "statuscode", "responsestatus", "httpstatus", "httpstatuscode"), text)[:1])
    put("stream", _names(fields, ("stream", "streaming", "isstream"), ("bool", "string"))[:1])
    return [g[k] for k in PROFILE_KEYS if k in g]


def _time_format(fields: list[Field], guesses: list[Guess], records: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The time_format to suggest and, when unsure, why."""
    from forensics.ingest.formats.mapped import resolve

    received = next((g for g in guesses if g.key == "received_at"), None)
    if received is None:
        return "auto", "no time field was recognised"
    values = [resolve(r, received.paths[0]) for r in records[:20]]
    values = [v for v in values if v not in (None, "")]
    if values and all(isinstance(v, str) and not NUMBER.fullmatch(v.strip()) for v in values):
        return "iso", None
    return "auto", "epoch numbers: seconds, ms or µs are told apart by magnitude; set epoch_s, epoch_ms or epoch_us to fix the unit"


def _toml_string(text: str) -> str:
    """A TOML basic string (what TOML forbids raw is escaped; a hostile field name stays inert)."""
    out = json.dumps(text, ensure_ascii=False)
    return out.replace("\x7f", "\\u007F").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render_toml(s: Suggestion) -> str:
    """The ``[[inputs]]`` block of a suggestion, with a comment on every uncertain guess."""
    lines = [
        f"# Starting profile for {escape_controls(s.file)}, guessed from {'its' if s.whole_file else 'its first'} "
        f"{s.records} records ({s.container}).",
        "# CHECK every line: UNCERTAIN marks a guess to confirm; keys commented out were not found.",
        "[[inputs]]",
        'format = "mapped"',
        f"path = {_toml_string(s.file)}",
        f"time_format = {_toml_string(s.time_format)}" + (f"  # UNCERTAIN: {s.time_note}" if s.time_note else ""),
        "",
        "[inputs.fields]",
    ]
    by_key = {g.key: g for g in s.guesses}
    for key in PROFILE_KEYS:
        item = by_key.get(key)
        if item is None:
            if key in ("request_id", "tenant_id", "received_at", "model", "response_text", "prompt_messages"):
                lines.append(f'# {key} = "?"  # NOT FOUND: name the field that holds it')
            continue
        value = _toml_string(item.paths[0]) if len(item.paths) == 1 else "[" + ", ".join(map(_toml_string, item.paths)) + "]"
        lines.append(f"{key} = {value}" + (f"  # UNCERTAIN: {item.uncertain}" if item.uncertain else ""))
    return "\n".join(lines) + "\n"


def suggest(path: str | Path, records: int = SAMPLE_RECORDS) -> Suggestion:
    """Read the first ``records`` records of ``path`` and guess a mapping profile for it."""
    file = Path(path)
    if not file.is_file():
        raise InputError("no such file", file=file, fix="give the path of one log file (JSON Lines, JSON array, CSV or Parquet)")
    if records < 1:
        raise InputError(f"--records {records} reads nothing", fix="give a number of records from 1")
    encoding = foreign_encoding(file)
    if encoding is not None:
        raise InputError(f"the file is {encoding} text, not UTF-8", file=file,
                         fix=f"convert it first, e.g. iconv -f {encoding} -t UTF-8 FILE > FILE.utf8")
    try:
        kind = container(file)
        unreadable: list[tuple[int, str]] = []
        objects, whole = sample(file, records, unreadable)
    except OSError as exc:
        raise InputError(f"cannot read the file ({exc.strerror or exc})", file=file, fix="check the path and its permissions") from None
    if not objects:
        first = f" (line {unreadable[0][0]}: {unreadable[0][1]})" if unreadable else ""
        raise InputError(f"no JSON object or CSV record found in the first records{first}", file=file,
                         fix="give a JSON Lines, JSON array, CSV (with a header) or Parquet log of one record per request")
    fields = field_paths(objects)
    guesses = guess(fields, objects)
    time_format, note = _time_format(fields, guesses, objects)
    result = Suggestion(str(path), kind, len(objects), whole, fields, guesses, time_format, note, unreadable=unreadable)
    result.toml = render_toml(result)
    return result
