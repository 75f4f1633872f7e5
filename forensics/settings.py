"""One table of the case file's settings: key, section, type, allowed values, default, CLI option, help.

Validation reads its types and ranges (``forensics/config.py`` for the top level and ``[report]``,
``forensics/match/tiers.py`` for ``[match]``), ``docs/settings.md`` is generated from it
(``python docs/gen_cli.py``) and the options of ``forensics ingest``, ``scan``, ``match`` and ``report`` that
set a value for one run are generated from the rows that name a ``cli`` option (``forensics/cli.py``,
``setting_options``): their type, metavar and help come from here. ``forensics run`` takes every one of them,
as the case file's keys are all its own. Adding a setting is one row here
plus its use; a row whose key nothing reads fails the tests.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class Setting:
    """One case-file key."""

    key: str
    section: str  # "" for the top level, else the table name ("match", "report", "execution", "inputs", "inputs.fields")
    kind: str  # "int", "float", "bool", "choice", "text", "tokens" (a whole number or "auto"), "path"
    # (a dotted path or a list of them), "time_format" (one of choices or a strftime pattern),
    # "file" (a file path, relative to the case file)
    default: Any
    help: str
    low: int | float | None = None  # inclusive range of int, float and tokens settings
    high: int | float | None = None
    choices: tuple[str, ...] = ()
    cli: str | None = None  # the option that sets it for one command, if any ("--on/--off" for a bool)
    result: bool = True  # False: changes how the tool runs, never what it finds
    metavar: str | None = None  # what the option takes in --help; default by kind (N, NUMBER, TEXT...)
    command: str | None = None  # the command of the option; default: scan for the top level, else the section
    required: bool = False  # no default: the case file or the option must give it

    @property
    def option_command(self) -> str:
        """The command whose ``cli`` option sets this setting for one run."""
        return self.command or ("scan" if self.section == "" else self.section)

    @property
    def option_metavar(self) -> str | None:
        """What the option takes, as --help shows it (None for an on/off flag)."""
        if self.kind == "bool":
            return None
        return self.metavar or {"int": "N", "float": "NUMBER", "tokens": "TOKENS|auto", "file": "FILE",
                                "choice": "|".join(self.choices)}.get(self.kind, "TEXT")

    def option_help(self) -> str:
        """The option's --help: the help, the allowed values and the default."""
        parts = [] if self.kind in ("text", "file", "path", "bool") else [self.allowed()]
        if self.default not in (None, ""):
            parts.append(f"default {_shown(self.default)}")
        detail = ", ".join(parts)
        required = f" Required: no default; give it here or as {self.key} in the case file." if self.required else ""
        return f"{self.help[0].upper()}{self.help[1:]}." + (f" {detail[0].upper()}{detail[1:]}." if detail else "") + required

    def bounds(self) -> tuple[int | float, int | float]:
        """(low, high) of a ranged setting; ValueError for one without a range."""
        if self.low is None or self.high is None:
            raise ValueError(f"{self.name} has no range")
        return self.low, self.high

    @property
    def name(self) -> str:
        """How the case file writes it: ``key`` or ``[section] key``."""
        return f"[{self.section}] {self.key}" if self.section else self.key

    def allowed(self) -> str:
        """The allowed values in words, for errors and the docs."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        if self.kind == "bool":
            return "true or false"
        if self.kind == "text":
            return "a string"
        if self.kind == "time_format":
            return "one of " + ", ".join(self.choices) + ", or a strftime pattern"
        if self.kind == "path":
            return "a dotted path, or a list of them tried in order"
        if self.kind == "file":
            return "a file path (relative to the case file)"
        what = {"int": "a whole number", "float": "a number", "tokens": "a whole number"}[self.kind]
        extra = ' or "auto"' if self.kind == "tokens" else ""
        return f"{what} from {_num(self.low)} to {_num(self.high)}{extra}"


def _num(value: float | None) -> str:
    """A bound as people write it: 1,000,000, 0.5."""
    if value is None:
        return ""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _f(key: str, help: str) -> Setting:
    """A key of an ``[inputs.fields]`` mapping profile: where one canonical column lives."""
    return Setting(key, "inputs.fields", "path", None, help)


def _shown(value: Any) -> str:
    """A default as the case file writes it: "auto", true, 0.5, 1,000 (none: not set)."""
    if value is None:
        return "none"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def _m(key: str, kind: str, default: Any, low: float | None, high: float | None, help: str, cli: str | None = None,
       result: bool = True, choices: tuple[str, ...] = (), metavar: str | None = None) -> Setting:
    return Setting(key, "match", kind, default, help, low, high, choices, cli, result, metavar)


SETTINGS: tuple[Setting, ...] = (
    # Required: a pool size read, unasked, from whichever engine logs the case holds would decide who is a
    # suspect; "auto" must be chosen like a number.
    Setting("real_ceiling_tokens", "", "tokens", None, "the KV pool's real size in tokens; auto: from the engine's "
            "startup lines", 1, 1_000_000_000, cli="--ceiling", required=True),
    Setting("advertised_window_tokens", "", "tokens", "auto", "the context window the provider advertised; auto: from "
            "the engine's startup lines", 1, 1_000_000_000, cli="--advertised-window"),
    Setting("tokenizer", "", "file", None, "the model's tokenizers JSON file, for exact token counts; none: estimates",
            cli="--tokenizer", metavar="TOKENIZER.json", command="ingest"),
    Setting("timezone", "", "text", "UTC", "zone of the timestamps that carry none (an IANA name), but for formats that "
            "document theirs (LiteLLM and Langfuse write UTC) and inputs that give their own", cli="--timezone",
            metavar="ZONE", command="ingest"),
    Setting("tenant_field", "", "text", "auto", "the gateway field that names the customer; auto: the usual fields",
            cli="--tenant-field", metavar="FIELD", command="ingest"),
    _m("k", "int", 5, 2, 64, "tokens per k-gram", "--k"),
    _m("min_tokens", "int", 8, 1, 1_000_000, "informative matched tokens for a probable finding (rules)", "--min-tokens"),
    _m("confirm_tokens", "int", 12, 1, 1_000_000, "informative matched tokens for a confirmed finding (rules)",
       "--confirm-tokens"),
    _m("confirm_score", "float", 90.0, 0, 100, "alignment score for a confirmed finding (rules)", "--confirm-score",
       metavar="SCORE"),
    _m("probable_score", "float", 70.0, 0, 100, "alignment score of any candidate", "--probable-score", metavar="SCORE"),
    _m("min_run", "int", 8, 1, 1_000_000, "identical consecutive tokens a short probable finding needs (rules)",
       "--min-run"),
    _m("probable_rarity", "float", 0.5, 0, 1, "a probable finding must not be mostly text other tenants held",
       "--probable-rarity", metavar="RARITY"),
    _m("damaged_score", "float", 85.0, 0, 100, "score of a long damaged passage (rules R2b)", "--damaged-score",
       metavar="SCORE"),
    _m("signature_rarity", "float", 0.75, 0, 1, "rarity of a short finding on an engine-signature suspect (rules R3)",
       "--signature-rarity", metavar="RARITY"),
    _m("confirm_rarity", "float", 0.5, 0, 1, "rarity of a confirmed finding (rules)", "--confirm-rarity",
       metavar="RARITY"),
    _m("max_tenants", "int", 2, 1, 1_000_000, "a k-gram held by more tenants than this is common text",
       "--max-tenants"),
    _m("lookback_minutes", "float", 0.0, 0, 5_256_000, "search only records this recent; 0: every earlier record",
       "--lookback-minutes", metavar="MINUTES"),
    _m("same_decode_node", "bool", False, None, None, "search only records decoded on the suspect's decode node",
       "--same-decode-node/--any-decode-node"),
    _m("control_size", "int", 200, 0, 1_000_000, "non-suspect responses matched as the null and false-positive control",
       "--control-size"),
    _m("seed", "int", 0, 0, 2**64 - 1, "chooses the control sample (a 64-bit xxhash seed)", "--seed"),
    _m("margin", "int", 8, 0, 100_000, "tokens added on each side of a hit cluster before alignment", "--margin"),
    _m("gap", "int", 16, 1, 100_000, "hits further apart than this many tokens start a new cluster", "--gap"),
    _m("tiering", "choice", "evalue", None, None, "evalue: tiers from expected_by_chance_with_mechanism; rules: the "
       "old fixed rules R1-R3, for comparison", "--tiering", choices=("evalue", "rules")),
    _m("confirm_evalue", "float", 0.0001, 0, 1000, "a finding expected by chance at most this often is confirmed "
       "(at most probable_evalue, or a warning says so)", "--confirm-evalue", metavar="E"),
    _m("probable_evalue", "float", 0.001, 0, 1000, "a finding expected by chance at most this often (more often than "
       "confirm_evalue) is probable; weaker candidates go to review.csv",
       "--probable-evalue", metavar="E"),
    _m("unexplained_evalue", "float", 0.002, 0, 1000, "a suspect shown decoding from stale pages (engine signature, "
       "or usage counting the one-token placeholder) with no finding: its strongest candidate is probable (E3) up "
       "to this; at most probable_evalue: off", "--unexplained-evalue", metavar="E"),
    _m("workers", "int", 0, 0, 4096, "processes for the match stage; 0: one per core", "--workers", result=False),
    _m("batch_rows", "int", 16, 1, 1_000_000, "at least this many rows per streamed batch", "--batch-rows",
       result=False),
    Setting("mask", "report", "choice", "default", "what a customer's notice masks: default masks secrets, card, "
            "account and id numbers (but their last 4), phone numbers and emails; none leaves phones and emails",
            choices=("default", "none"), cli="--mask"),
    Setting("contact", "report", "text", "", "the contact line of every notice", cli="--contact"),
    Setting("actions_taken", "report", "text", "", "what the provider did, in every notice", cli="--actions-taken"),
    Setting("notify_within_hours", "report", "int", 72, "hours a customer on the list may wait for its notice before "
            "forensics audit flags it overdue", 1, 8760, cli="--notify-within-hours", metavar="HOURS"),
    Setting("engine", "execution", "choice", "local", "where ingest parsing and the match pass run: local (this "
            "machine's processes) or spark (a Spark cluster, see master); the results are byte-identical",
            choices=("local", "spark"), cli="--engine", command="run", result=False),
    Setting("master", "execution", "text", "local[*]", "the Spark master URL for engine = \"spark\": local[N] (N "
            "cores of this machine), spark://HOST:7077, yarn, k8s://...", result=False, cli="--master", metavar="URL",
            command="run"),
    Setting("timezone", "inputs", "text", None, "zone of this input's timestamps that carry none, over the case's "
            "timezone and its format's own (LiteLLM and Langfuse write UTC); none: those"),
    Setting("time_format", "inputs", "time_format", "auto", 'format = "mapped" only: how its times are written; auto: '
            "ISO 8601 or an epoch number whose unit is told by its magnitude", choices=("auto", "iso", "epoch_s", "epoch_ms",
                                                                                         "epoch_us")),
    # The mapping profile of a format = "mapped" input (spec/case-file.md, "Mapping profiles").
    _f("request_id", "required: the request's id"),
    _f("tenant_id", "required: the customer (a list gives fallbacks, the first non-empty wins)"),
    _f("user_id", "the end user within the tenant"),
    _f("received_at", "required: when the gateway received the request"),
    _f("completed_at", "when the response ended"),
    _f("model", "required: the model the customer asked for"),
    _f("model_routed", "the deployment the request was routed to"),
    _f("prompt_messages", "an OpenAI messages array (or a JSON string of one); this or prompt_text is required"),
    _f("prompt_text", "the prompt as plain text (or a list of strings); this or prompt_messages is required"),
    _f("response_text", "required: the answer's text, or a ChatCompletion object or chunk list (its text, finish "
       "reason and usage are read from it)"),
    _f("prompt_tokens", "the prompt tokens the gateway reported"),
    _f("completion_tokens", "the completion tokens the gateway reported"),
    _f("status", "an HTTP status code, or a word (failure, failed, error: a failure; anything else: success)"),
    _f("finish_reason", "why the answer ended (stop, length, ...)"),
    _f("stream", "whether the answer was streamed (true or false)"),
)

#: The command whose option sets each section's keys (the top level's are scan's).
COMMAND_OF_SECTION = {"": "scan", "match": "match", "report": "report", "execution": "run"}

BY_NAME: dict[tuple[str, str], Setting] = {(s.section, s.key): s for s in SETTINGS}


def section(name: str) -> tuple[Setting, ...]:
    """The settings of one section ("" for the top level)."""
    return tuple(s for s in SETTINGS if s.section == name)


def get(section_name: str, key: str) -> Setting:
    """The setting ``key`` of ``section_name`` (KeyError when the table has none)."""
    return BY_NAME[(section_name, key)]


def markdown() -> str:
    """docs/settings.md: every setting with its type, allowed values, default, CLI option and help."""
    lines = ["# Case-file settings", "",
             "Generated from `forensics/settings.py` by `python docs/gen_cli.py`; do not edit by hand. Every value",
             "is checked when the case file is read: an error names the key, the value and the allowed range.", ""]
    titles = {"": "Top level", "inputs": "[[inputs]]"}
    for name in ("", "match", "report", "execution", "inputs", "inputs.fields"):
        lines += [f"## {titles.get(name, '[' + name + ']')}", "",
                  "| key | allowed | default | option | what it does |", "|---|---|---|---|---|"]
        for s in section(name):
            default = "required" if s.required else f"`{_shown(s.default)}`"
            what = s.help + ("" if s.result else " (how it runs, never what it finds)")
            lines.append(f"| `{s.key}` | {s.allowed()} | {default} | {('`' + s.cli + '`') if s.cli else ''} | {what} |")
        lines.append("")
    return "\n".join(lines)
