"""The case file (`spec/case-file.md`): what the team knows before a run.

A case file is TOML. Unknown keys are an error naming the key (a typo must not silently change a
notification list); a missing required key is an error that shows an example line. Every value
remembers where it came from (``file``, ``option``, ``auto-detected`` or ``default``) so the
manifest can record it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import tomllib
import unicodedata
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from forensics import settings
from forensics.errors import ConfigError


def input_formats() -> tuple[str, ...]:
    """Formats an ``[[inputs]]`` entry may name: ``auto`` and every registered log format."""
    # Imported here: the registry fills as forensics.ingest loads, which imports this module.
    from forensics.ingest.registry import FORMATS

    return ("auto", *FORMATS.names())


#: Stage sections of the case file. [match] keys are checked by the match stage (its parameters),
#: [report] keys by the report stage (forensics.report.notices.REPORT_KEYS) and notify_within_hours
#: here; [scan] takes no keys yet, so any key there is a typo and refused here.
SECTIONS = ("scan", "match", "report")
SECTION_KEYS: dict[str, set[str]] = {"scan": set(), "report": {s.key for s in settings.section("report")}}
#: Hours a customer on the list may wait for its notice before ``forensics audit`` flags it overdue.
NOTIFY_WITHIN_HOURS = settings.get("report", "notify_within_hours").default
#: Allowed range of notify_within_hours (inclusive): an hour to a year.
NOTIFY_BOUNDS = settings.get("report", "notify_within_hours").bounds()

EXAMPLES = {
    "name": 'name = "glm-5.3-kv-pool"',
    "model": 'model = "glm-5.3"            # or models = ["glm-5.3", "glm-5.3-fast"]',
    "window_start": 'window_start = "2026-08-27T00:00:00Z"',
    "window_end": 'window_end = "2026-09-09T00:00:00Z"',
    "real_ceiling_tokens": 'real_ceiling_tokens = 681280   # or "auto"',
    "advertised_window_tokens": 'advertised_window_tokens = 1048576   # or "auto"',
}

TOP_KEYS = {
    "name",
    "model",
    "models",
    "window_start",
    "window_end",
    "real_ceiling_tokens",
    "advertised_window_tokens",
    "tenant_field",
    "timezone",
    "tokenizer",
    "description",
    "inputs",
    "execution",
    *SECTIONS,
}

#: ``[execution]``: how a run executes (engine, master), never what it finds: kept out of the
#: recorded configuration, so a report is byte-identical whichever engine produced it.
EXECUTION_DEFAULTS: dict[str, str] = {s.key: s.default for s in settings.section("execution")}


#: The keys of an ``[inputs.fields]`` mapping profile (canonical exchange columns), from the settings table.
PROFILE_KEYS = tuple(s.key for s in settings.section("inputs.fields"))
#: Keys every mapping profile must map (and one of PROFILE_PROMPT_KEYS).
PROFILE_REQUIRED = ("request_id", "tenant_id", "received_at", "model", "response_text")
PROFILE_PROMPT_KEYS = ("prompt_messages", "prompt_text")
#: The named ``time_format`` values; anything else must be a strftime pattern (it holds a % directive).
TIME_FORMATS = settings.get("inputs", "time_format").choices
PROFILE_EXAMPLE = ('[inputs.fields]\nrequest_id = "meta.rid"\ntenant_id = ["account.org", "account.key_hash"]\n'
                   'received_at = "ts_start"\nmodel = "req.model"\nprompt_messages = "req.messages"\n'
                   'response_text = "resp.choices.0.message.content"')


@dataclasses.dataclass(frozen=True)
class Profile:
    """A mapping profile (``format = "mapped"``): where each canonical column lives in a record.

    ``fields`` pairs each mapped key with its paths (tried in order, the first non-empty wins),
    in the order of PROFILE_KEYS so equal profiles compare and serialise alike.
    """

    fields: tuple[tuple[str, tuple[str, ...]], ...]
    time_format: str = "auto"

    def paths(self, key: str) -> tuple[str, ...]:
        """The paths of ``key`` (empty when the profile does not map it)."""
        return dict(self.fields).get(key, ())

    def to_json(self) -> dict[str, Any]:
        """The profile as the case file writes it (a single path as a string)."""
        return {"time_format": self.time_format,
                "fields": {k: p[0] if len(p) == 1 else list(p) for k, p in self.fields}}


@dataclasses.dataclass
class InputSpec:
    """One ``[[inputs]]`` entry: a file or folder, its format and, for ``mapped``, its profile."""

    path: Path
    format: str = "auto"
    profile: Profile | None = None
    timezone: str | None = None  # the zone of its times with no zone, over the case's and its format's own


@dataclasses.dataclass
class CaseConfig:
    """The resolved case configuration and where each value came from."""

    name: str = "case"
    models: list[str] = dataclasses.field(default_factory=list)
    window_start: dt.datetime | None = None
    window_end: dt.datetime | None = None
    real_ceiling_tokens: int | str | None = None  # an int, or "auto" until resolved
    advertised_window_tokens: int | str | None = "auto"
    tenant_field: str = "auto"
    timezone: str = "UTC"
    tokenizer: Path | None = None
    description: str = ""
    inputs: list[InputSpec] = dataclasses.field(default_factory=list)
    sections: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    # [match] and [report] values given as command-line options, over the file's (kept apart: the manifest records
    # the file's tables as the file's, which verify holds to the case file's copy)
    options: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    execution: dict[str, str] = dataclasses.field(default_factory=lambda: dict(EXECUTION_DEFAULTS))
    file: Path | None = None
    sources: dict[str, str] = dataclasses.field(default_factory=dict)

    def source(self, key: str) -> str:
        """Where ``key``'s value came from."""
        return self.sources.get(key, "default")

    def set(self, key: str, value: Any, source: str) -> None:
        """Set a value and record its origin (``option``, ``auto-detected``...)."""
        if key == "timezone":
            value = _parse_zone(value, key)
        elif key in ("window_start", "window_end"):
            value = parse_utc(value, key)
        elif key in ("real_ceiling_tokens", "advertised_window_tokens"):
            value = _parse_tokens(value, key)
        elif key == "models":
            value = [value] if isinstance(value, str) else list(value)
        setattr(self, key, value)
        self.sources[key] = source

    def section(self, name: str) -> dict[str, Any]:
        """The ``[name]`` table as the run uses it: the case file's, with the values options gave over it."""
        return {**self.sections.get(name, {}), **self.options.get(name, {})}

    def section_source(self, name: str, key: str) -> str:
        """Where ``[name] key`` came from: ``option``, ``file`` or ``default``."""
        if key in self.options.get(name, {}):
            return "option"
        return "file" if key in self.sections.get(name, {}) else "default"

    def validate(self) -> None:
        """Checks that need no data: window order, ceiling below the advertised window."""
        if self.window_start and self.window_end and self.window_end <= self.window_start:
            raise ConfigError(
                f"window_end ({iso(self.window_end)}) is not after window_start ({iso(self.window_start)})"
                + self._origins("window_end", "window_start"),
                file=self._file_of("window_start", "window_end"),
                fix="window_end is exclusive and must come after window_start",
            )
        c, a = self.real_ceiling_tokens, self.advertised_window_tokens
        if isinstance(c, int) and isinstance(a, int) and c > a:
            # An engine's own startup lines are not a slip of the hand: vLLM refuses to start unless its KV
            # cache holds one request of the maximum length, so its pool is routinely above the window.
            if self.source("real_ceiling_tokens") == "auto-detected":
                raise ConfigError(
                    f"real_ceiling_tokens ({c}, read from the engine's startup lines) is above advertised_window_tokens "
                    f"({a})", file=self.file,
                    fix="this engine's pool is larger than the window: a prompt the window admits cannot overflow it, "
                        "so there is nothing to scan for; if the provider advertised a larger window, give "
                        "advertised_window_tokens as that number",
                )
            raise ConfigError(
                f"real_ceiling_tokens ({c}) is above advertised_window_tokens ({a})"
                + self._origins("real_ceiling_tokens", "advertised_window_tokens"),
                file=self._file_of("real_ceiling_tokens", "advertised_window_tokens"),
                fix="the real pool ceiling is the smaller figure; check the two values are not swapped (if the pool "
                    "really is larger than the window, a prompt the window admits cannot overflow it: nothing to scan for)",
            )

    def _origins(self, *keys: str) -> str:
        """Where ``keys``' values came from, for an error about them, when an option gave one (an option's value was
        blamed on the case file)."""
        said = {"option": "given as an option", "file": "from the case file", "default": "the default",
                "auto-detected": "read from the engine logs"}
        if not any(self.source(k) == "option" for k in keys):
            return ""
        return " (" + "; ".join(f"{k} {said.get(self.source(k), self.source(k))}" for k in keys) + ")"

    def _file_of(self, *keys: str) -> Path | None:
        """The case file, when it gave one of ``keys`` (an error naming it must be about what it says)."""
        return self.file if any(self.source(k) == "file" for k in keys) else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready record of every value and its origin (for config.json and manifests)."""
        values = {
            "name": self.name,
            "models": self.models,
            "window_start": iso(self.window_start) if self.window_start else None,
            "window_end": iso(self.window_end) if self.window_end else None,
            "real_ceiling_tokens": self.real_ceiling_tokens,
            "advertised_window_tokens": self.advertised_window_tokens,
            "tenant_field": self.tenant_field,
            "timezone": self.timezone,
            "tokenizer": str(self.tokenizer) if self.tokenizer else None,
            "description": self.description,
            "inputs": [{"path": str(i.path), "format": i.format, **({"timezone": i.timezone} if i.timezone else {}),
                        **(i.profile.to_json() if i.profile else {})} for i in self.inputs],
            "sections": self.sections,
        }
        # Absent when no option gave a value that can change the result (--workers cannot): a report is byte-identical
        # whatever the processes that made it, and a run given no option records what it always did.
        recorded = {name: {k: v for k, v in sorted(table.items()) if settings.get(name, k).result}
                    for name, table in sorted(self.options.items())}
        if any(recorded.values()):
            values["options"] = {name: table for name, table in recorded.items() if table}
        return {"values": values, "sources": {k: "option" if k == "options" else self.source(k) for k in values}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaseConfig:
        """Rebuild a configuration written by :meth:`to_json`."""
        v = data["values"]
        cfg = cls(
            name=v["name"],
            models=list(v["models"]),
            window_start=parse_utc(v["window_start"], "window_start") if v["window_start"] else None,
            window_end=parse_utc(v["window_end"], "window_end") if v["window_end"] else None,
            real_ceiling_tokens=v["real_ceiling_tokens"],
            advertised_window_tokens=v["advertised_window_tokens"],
            tenant_field=v["tenant_field"],
            timezone=v["timezone"],
            tokenizer=Path(v["tokenizer"]) if v["tokenizer"] else None,
            description=v.get("description", ""),
            inputs=[InputSpec(Path(i["path"]), i["format"],
                              parse_profile(i["fields"], i.get("time_format"), "inputs") if "fields" in i else None,
                              _parse_zone(i["timezone"], "inputs.timezone") if i.get("timezone") is not None else None)
                    for i in v["inputs"]],
            sections=v.get("sections", {}),
            options=v.get("options", {}),
        )
        cfg.sources = dict(data.get("sources", {}))
        return cfg


def iso(t: dt.datetime) -> str:
    """UTC ISO 8601 with ``Z`` (the only time format the outputs use)."""
    t = t.astimezone(dt.UTC).replace(tzinfo=None)
    # Not strftime("%Y"): it does not zero-pad years before 1000 (glibc), isoformat always does.
    return t.isoformat(timespec="microseconds" if t.microsecond else "seconds") + "Z"


def _time_example(key: str) -> str:
    """How to write time ``key``: the case file's example line, or an option's (``--now 2026-09-02T10:00:00Z``)."""
    if key in EXAMPLES:
        return EXAMPLES[key]
    return f"{key} 2026-09-02T10:00:00Z" if key.startswith("--") else f'{key} = "2026-09-02T10:00:00Z"'


def parse_utc(value: Any, key: str) -> dt.datetime:
    """Parse a case-file time; it must carry a zone (``Z`` or an offset)."""
    if isinstance(value, dt.datetime):
        t = value
    elif isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ConfigError(
                f"{key} = {value!r} is not an ISO 8601 time", fix=f"write it like {_time_example(key)}"
            ) from None
    else:
        raise ConfigError(f"{key} must be a time string, got {type(value).__name__}", fix=f"write it like {_time_example(key)}")
    if t.tzinfo is None:
        raise ConfigError(f"{key} = {value!r} has no zone", fix="end it with Z (UTC) or an offset such as +02:00")
    try:
        return t.astimezone(dt.UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is a time before the year 1 in UTC
        raise ConfigError(f"{key} = {value!r} lies outside the years 1 to 9999 in UTC",
                          fix=f"give a time within them, e.g. {_time_example(key)}") from None


def utc_or_none(value: Any) -> dt.datetime | None:
    """A time with a zone (:func:`parse_utc`), or None for anything else."""
    try:
        return parse_utc(value, "time") if value is not None else None
    except ConfigError:
        return None


def _parse_zone(value: Any, key: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{key} must be a zone name string", fix='timezone = "UTC"')
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"{key} = {value!r} is not a known time zone", fix='use an IANA name such as "UTC" or "Europe/Berlin"') from None
    return value


#: Allowed range (inclusive) of the token-count settings: far above any model's window, but a
#: typo of a few extra digits (or a value past 64 bits) is refused instead of silently making
#: every request fit under the ceiling.
TOKEN_BOUNDS = settings.get("", "real_ceiling_tokens").bounds()
#: The numeric top-level keys of the case file (the [match] ones are in forensics.match.tiers).
NUMERIC_KEYS = ("real_ceiling_tokens", "advertised_window_tokens")


def _parse_tokens(value: Any, key: str) -> int | str:
    if value == "auto":
        return "auto"
    # ASCII digits only: str.isdigit() also takes "²" (which int() refuses) and other scripts' digits.
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    lo, hi = TOKEN_BOUNDS
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ConfigError(f"{key} = {value!r} is not a positive whole number from {lo} to {hi} or \"auto\"",
                          fix=EXAMPLES.get(key))
    return value


def load_case_file(path: str | Path, provided: frozenset[str] = frozenset()) -> CaseConfig:
    """Read and check a case file; relative input and tokenizer paths become absolute. A required key named in
    ``provided`` (given as an option, see :func:`apply_options`) may be missing from the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("case file not found", file=path, fix="give the path of a CASE.toml (see spec/case-file.md)")
    try:
        # (utf-8-sig: a byte order mark, which Windows editors write, is no TOML but no error of the case either)
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except UnicodeDecodeError:
        raise ConfigError("case file is not UTF-8", file=path, fix="save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"case file is not valid TOML ({exc})", file=path, fix="correct the TOML syntax") from None
    return config_from_mapping(data, base=path.parent, file=path, provided=provided)


def _path_of(base: Path, value: Any, key: str, file: Path | None) -> Path:
    """The case file's path setting ``key`` made absolute (relative to the case file's folder), or a ConfigError
    naming the key: a value that is not a non-empty string (5 read as the file "5"), or a path that cannot be
    resolved (a link that leads to itself, a name too long: "internal error" before)."""
    if not isinstance(value, str) or not value.strip():
        if key.startswith("--"):
            raise ConfigError(f"{key} {value!r} is not a path", file=file, fix=f"give a file, e.g. {key} tokenizer.json")
        raise ConfigError(f"{key} = {value!r} is not a path", file=file, fix=f'write it as a string, e.g. {key.split(".")[-1]} = '
                          + ('"tokenizer.json"' if key == "tokenizer" else '"logs"'))
    try:
        return (base / value).resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: a link loop (Python 3.11's resolve)
        raise ConfigError(f"{key} = {value!r} cannot be followed ({exc})", file=file,
                          fix="check the path: a link that leads to itself, or a name too long for the file system") from None


def _nul_at(value: Any, where: str) -> str | None:
    """The key path of the first string under ``value`` that holds a NUL character, or None."""
    if isinstance(value, str):
        return where if "\x00" in value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _nul_at(item, f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def config_from_mapping(data: dict[str, Any], base: Path, file: Path | None = None,
                        provided: frozenset[str] = frozenset()) -> CaseConfig:
    """Build a configuration from parsed case-file data (tests call this directly); a required key named in
    ``provided`` (an option gives it) may be missing."""
    nul = _nul_at(data, "")
    if nul is not None:
        # No path, name or setting holds one: as a path it failed deep inside the file system calls.
        raise ConfigError(f"{nul} holds a NUL character (\\u0000)", file=file, fix="remove it from the value")
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} in the case file",
            file=file,
            fix=f"known keys are: {', '.join(sorted(TOP_KEYS))} (a typo must not silently change the result)",
        )
    cfg = CaseConfig(file=file)
    for key in ("name", "window_start", "window_end", "real_ceiling_tokens"):
        if key not in data and key not in provided:
            raise ConfigError(f"missing required key {key!r}", file=file, fix=f"add a line such as: {EXAMPLES[key]}")
    if "model" not in data and "models" not in data and "models" not in provided:
        raise ConfigError("missing required key 'model'", file=file, fix=f"add a line such as: {EXAMPLES['model']}")
    if "model" in data and "models" in data:
        raise ConfigError("both 'model' and 'models' are set", file=file, fix="keep one: models = [\"a\", \"b\"]")
    for key, value in data.items():
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"[{key}] must be a table", file=file, fix=f"write it as a [{key}] section")
            if key in SECTION_KEYS and set(value) - SECTION_KEYS[key]:
                bad = sorted(set(value) - SECTION_KEYS[key])[0]
                known = ", ".join(sorted(SECTION_KEYS[key])) or "none yet"
                raise ConfigError(f"unknown key {bad!r} in [{key}]", file=file, fix=f"keys [{key}] takes: {known}")
            if key == "report" and "notify_within_hours" in value:
                notify_within_hours(value, file)
            if key == "match":
                # Checked here, before any stage runs, so a bad value fails in seconds, not after ingest.
                from forensics.match.tiers import params_from

                params_from(value, file=file)
            if key == "report":
                from forensics.report.notices import report_settings

                report_settings(value, file=file)
            cfg.sections[key] = dict(value)
            cfg.sources["sections"] = "file"  # (it was recorded as "default", beside the file's own [match] values)
            continue
        if key == "execution":
            cfg.execution = execution_settings(value, file)
            continue
        if key == "inputs":
            cfg.inputs = _parse_inputs(value, base, file)
            cfg.sources["inputs"] = "file"
            continue
        if key == "model":
            key, value = "models", value
        value = _top_value(key, value, base, key, file)
        try:
            cfg.set(key, value, "file")
        except ConfigError as exc:
            exc.file = str(file) if file else None
            raise
    cfg.validate()
    return cfg


def _top_value(key: str, value: Any, base: Path, where: str, file: Path | None) -> Any:
    """A top-level value checked as the case file's and an option's alike (``where`` names whichever gave it): the
    set methods parse times, zones and token counts; these are the checks they do not make."""
    if key == "models":
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not items or not all(isinstance(m, str) and m.strip() for m in items):
            raise ConfigError(("" if where == key else f"{where}: ") + "model(s) must be a non-empty string or list of "
                              "strings", file=file, fix=EXAMPLES["model"])
    if key == "tokenizer":
        value = _path_of(base, value, where, file)
    if key in ("name", "tenant_field", "description") and not isinstance(value, str):
        raise ConfigError(f"{where} must be a string", file=file, fix=f'{key} = "..."')
    if key == "tenant_field" and not value.strip():
        # Read as "auto" while the manifest said the case file had set it.
        raise ConfigError(f"{where} is empty", file=file, fix='tenant_field = "auto" (the usual fields), or the field that names the customer')
    # It names the report folder and every notice: a name with nothing visible (spaces, zero-width
    # or format characters) is as good as none.
    if key == "name" and not any(unicodedata.category(ch)[0] not in "CZ" for ch in value):
        raise ConfigError(f"{'required key ' + repr(key) if where == key else where} is empty", file=file,
                          fix=f"give the case a name, such as: {EXAMPLES['name']}")
    return value


#: Options of top-level keys the settings table has no row for (they have no default, or are free text).
TOP_OPTIONS = {"name": "--name", "models": "--model", "window_start": "--window-start", "window_end": "--window-end",
               "description": "--description"}
#: The sections whose keys ``forensics run`` takes as options (besides the top level's).
OPTION_SECTIONS = ("", "match", "report", "execution")


def option_name(key: str) -> str:
    """The command-line option that gives case-file key ``key`` (of the top level, [match], [report] or
    [execution]: no key is in two of them)."""
    if key in TOP_OPTIONS:
        return TOP_OPTIONS[key]
    row = _option_row(key)
    return (row.cli or "--" + key.replace("_", "-")).split("/")[0]


def _option_row(key: str) -> settings.Setting:
    rows = [s for s in settings.SETTINGS if s.key == key and s.section in OPTION_SECTIONS]
    if len(rows) != 1:
        raise KeyError(f"no single case-file key {key!r} an option gives")
    return rows[0]


def apply_options(cfg: CaseConfig, options: dict[str, Any], base: Path | None = None) -> None:
    """Set on ``cfg`` the case-file values given as command-line options (``None``: not given), each checked as the
    case file's would be and recorded as coming from an ``option``; relative paths are relative to ``base`` (the
    working folder). An error names the option, not the case file."""
    base = Path.cwd() if base is None else base
    tables: dict[str, dict[str, Any]] = {}
    for key, value in options.items():
        if value is None or value == [] or value == ():
            continue
        where = option_name(key)
        section_name = "" if key in TOP_OPTIONS else _option_row(key).section
        if section_name == "":
            value = list(value) if isinstance(value, tuple) else str(value) if isinstance(value, Path) else value
            set_option(cfg, key, _top_value(key, value, base, where, None), where)
        elif section_name == "execution":
            cfg.execution = execution_settings({**cfg.execution, key: value}, option=where)
        else:
            _check_option(_option_row(key), value, where)
            tables.setdefault(section_name, {})[key] = value
    if "match" in tables:
        from forensics.match.tiers import params_from

        params_from(cfg.sections.get("match", {}), tables["match"])  # its errors name the option
    for name, table in tables.items():
        cfg.options[name] = {**cfg.options.get(name, {}), **table}
    cfg.validate()


def set_option(cfg: CaseConfig, key: str, value: Any, where: str) -> None:
    """Set top-level ``key`` as given by option ``where`` (``--window-start``): a model given twice is one model, and an
    error says which option gave the value and how to write it (the set methods word it for the case file's key)."""
    if key == "models":
        value = list(dict.fromkeys([value] if isinstance(value, str) else value))
    try:
        cfg.set(key, value, "option")
    except ConfigError as exc:
        fix = (f"write it like {where} 2026-08-27T00:00:00Z"
               if key in ("window_start", "window_end") and (exc.fix or "").startswith("write it like") else exc.fix)
        raise ConfigError(f"{where}: {exc.message}", fix=fix) from None


def _check_option(row: settings.Setting, value: Any, where: str) -> None:
    """A [report] option's value against its row (a [match] one is checked by the match stage's rules)."""
    if row.section != "report":
        return
    if row.kind == "choice" and value not in row.choices:
        raise ConfigError(f"{where} {value!r} is not allowed", fix=f"use {row.allowed()}")
    if row.kind == "int" and row.low is not None and row.high is not None and not row.low <= value <= row.high:
        raise ConfigError(f"{where} {value!r} is out of range", fix=f"use {row.allowed()}")


def notify_within_hours(report: dict[str, Any], file: Path | None = None) -> int | float:
    """``[report] notify_within_hours`` (default 72), checked: a number of hours from 1 to 8760."""
    value = report.get("notify_within_hours", NOTIFY_WITHIN_HOURS)
    lo, hi = NOTIFY_BOUNDS
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ConfigError(f"[report] notify_within_hours = {value!r} is not a number of hours from {lo} to {hi}", file=file,
                          fix="write it like: notify_within_hours = 72")
    return value


def execution_settings(value: Any, file: Path | None = None, option: str | None = None) -> dict[str, str]:
    """The ``[execution]`` table checked against the settings table, with the defaults filled in.

    ``option`` names the CLI option a single value came from, so its error names that instead.
    """
    if not isinstance(value, dict):
        raise ConfigError("[execution] must be a table", file=file, fix='write it as\n[execution]\nengine = "spark"')
    known = {s.key: s for s in settings.section("execution")}
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} in [execution]", file=file,
                          fix=f"keys [execution] takes: {', '.join(sorted(known))}")
    out = dict(EXECUTION_DEFAULTS)
    for key, v in value.items():
        s = known[key]
        name = option or s.name
        if s.kind == "choice" and v not in s.choices:
            raise ConfigError(f"{name} = {v!r} is not a known {key}", file=None if option else file,
                              fix=f"use {s.allowed()}")
        if s.kind == "text" and (not isinstance(v, str) or not v.strip()):
            raise ConfigError(f"{name} must be a non-empty string", file=None if option else file,
                              fix=f'write it like: {key} = "{s.default}"')
        out[key] = v
    return out


def _parse_inputs(value: Any, base: Path, file: Path | None) -> list[InputSpec]:
    if not isinstance(value, list):
        raise ConfigError("inputs must be a list of [[inputs]] tables", file=file, fix='[[inputs]]\npath = "logs"\nformat = "auto"')
    specs = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or "path" not in item:
            raise ConfigError(f"inputs[{i}] has no path", file=file, fix='add path = "logs/gateway" to the [[inputs]] entry')
        extra = sorted(set(item) - {"path", "format", "timezone", "time_format", "fields"})
        if extra:
            raise ConfigError(f"unknown key {extra[0]!r} in inputs[{i}]", file=file,
                              fix="an [[inputs]] entry takes path, format and timezone (and, for format = \"mapped\", "
                                  "time_format and an [inputs.fields] table)")
        zone = None
        if "timezone" in item:
            try:
                zone = _parse_zone(item["timezone"], f"inputs[{i}].timezone")
            except ConfigError as exc:
                exc.file = str(file) if file else None
                raise
        if not isinstance(item["path"], str) or not item["path"]:
            # A number was read as a file name ("5") and a list as a pattern ("['gateway']") matching nothing.
            raise ConfigError(f"inputs[{i}].path must be a non-empty string, got {item['path']!r}", file=file,
                              fix='path = "logs/gateway" (one [[inputs]] entry per path, or a pattern such as "logs/*.jsonl")')
        fmt = item.get("format", "auto")
        known = input_formats()
        if fmt not in known:
            raise ConfigError(f"inputs[{i}].format = {fmt!r} is not a known format", file=file, fix=f"use one of {', '.join(known)}")
        profile = None
        if fmt == "mapped":
            if "fields" not in item:
                raise ConfigError(f"inputs[{i}] has format = \"mapped\" but no [inputs.fields] table", file=file,
                                  fix=f"name where each column lives, after the [[inputs]] entry:\n{PROFILE_EXAMPLE}")
            profile = parse_profile(item["fields"], item.get("time_format"), f"inputs[{i}]", file)
        else:
            for key in ("fields", "time_format"):
                if key in item:
                    what = "[inputs.fields]" if key == "fields" else "time_format"
                    raise ConfigError(f"inputs[{i}] has {what} but format = {fmt!r}", file=file,
                                      fix='a mapping profile is read only with format = "mapped"; set it, or remove '
                                          f"{what}")
        # A "[" in the case file's folder ("[INC-7] leak") is no character class: a pattern's fixed part is
        # the folders that exist as written (forensics.ingest.patterns.split_pattern).
        specs.append(InputSpec(_path_of(base, item["path"], f"inputs[{i}].path", file), fmt, profile, zone))
    return specs


def _check_path(path: Any, where: str, file: Path | None) -> str:
    """One dotted path of a mapping profile: a string of non-empty parts."""
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{where} = {path!r} is not a path", file=file,
                          fix='write a dotted path such as "body.messages", "choices.0.message.content" or a CSV column name')
    if any(part == "" for part in path.split(".")):
        raise ConfigError(f"{where} = {path!r} has an empty part (a leading, trailing or doubled dot)", file=file,
                          fix='write it like "resp.choices.0.message.content"')
    return path


def parse_profile(fields: Any, time_format: Any, where: str, file: Path | None = None) -> Profile:
    """Check an ``[inputs.fields]`` table and its ``time_format``; return the :class:`Profile`.

    A key that names no canonical column, a required key left out, a value that is not a path
    (or a non-empty list of paths) and an unknown time format are each a :class:`ConfigError`
    naming the key, before any file is read.
    """
    if not isinstance(fields, dict):
        raise ConfigError(f"{where}.fields must be a table", file=file, fix=f"write it as:\n{PROFILE_EXAMPLE}")
    unknown = sorted(set(fields) - set(PROFILE_KEYS))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} in [inputs.fields] of {where}: it names no canonical column", file=file,
                          fix=f"the keys are: {', '.join(PROFILE_KEYS)} (see docs/settings.md)")
    missing = [k for k in PROFILE_REQUIRED if k not in fields]
    if not any(k in fields for k in PROFILE_PROMPT_KEYS):
        missing.append(" or ".join(PROFILE_PROMPT_KEYS))
    if missing:
        raise ConfigError(f"[inputs.fields] of {where} does not map the required key {missing[0]}", file=file,
                          fix=f"add a line naming where it lives in a record, e.g.:\n{PROFILE_EXAMPLE}")
    mapped: list[tuple[str, tuple[str, ...]]] = []
    for key in PROFILE_KEYS:
        if key not in fields:
            continue
        value = fields[key]
        label = f"[inputs.fields] {key} of {where}"
        if isinstance(value, list):
            if not value:
                raise ConfigError(f"{label} is an empty list", file=file, fix=f'give at least one path: {key} = ["a.b", "c"]')
            paths = tuple(_check_path(p, f"{label}[{n}]", file) for n, p in enumerate(value))
        else:
            paths = (_check_path(value, label, file),)
        mapped.append((key, paths))
    if time_format is None:
        time_format = "auto"
    if not isinstance(time_format, str) or (time_format not in TIME_FORMATS and "%" not in time_format):
        raise ConfigError(f"{where}.time_format = {time_format!r} is not a time format", file=file,
                          fix=f"use one of {', '.join(TIME_FORMATS)} or a strftime pattern such as \"%d/%m/%Y %H:%M:%S\"")
    return Profile(tuple(mapped), time_format)


def save(cfg: CaseConfig, path: Path) -> None:
    """Write the resolved configuration as JSON (used as a case's config.json)."""
    from forensics.case import write_json

    write_json(path, cfg.to_json())


def load_saved(path: Path) -> CaseConfig:
    """Read a configuration written by :func:`save`."""
    return CaseConfig.from_json(json.loads(path.read_text(encoding="utf-8")))
