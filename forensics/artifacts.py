"""The records the stages hand each other, typed: one frozen dataclass per JSON file or row.

==========================  ======================  ==========================================
artifact                    file                    ``format`` (``schema_version``)
==========================  ======================  ==========================================
:class:`IngestManifest`     CASE/manifest.json      ``forensics-case/1``
:class:`ScanRecord`         CASE/scan.json          ``forensics-scan/1``
:class:`Finding`            a row of evidence.*     (the columns of ``schema.EVIDENCE``)
:class:`MatchRecord`        CASE/match.json         ``forensics-match/1``
:class:`ReportManifest`     REPORT/manifest.json    ``forensics-report/1``
==========================  ======================  ==========================================

Each stage builds its artifact and writes ``to_json()``; readers call ``from_json()``, which checks
the ``format`` key and the type of every typed field and names the file and key that is wrong.
The JSON is the contract: ``to_json(from_json(data)) == data``, keys a later version adds are kept
in ``extra`` (adding a key does not change the version; renaming or dropping one does). Sections
whose content is a free-form listing (query descriptions, anomaly rows, the null model) stay JSON
values: their keys are documented where they are written.

A request is keyed by :class:`RequestKey` (request id and tenant: two customers may send the same
request id) wherever Python code groups or looks up requests.

Artifacts also answer ``artifact["key"]`` with the JSON value of that key, so code written against
the earlier dicts (scripts, notebooks) reads the same values; new code reads the fields.
"""

from __future__ import annotations

import dataclasses
import types
import typing
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, NamedTuple, Self

from forensics import schema
from forensics.errors import CaseError, json_name

#: The format of REPORT/manifest.json (the stages' formats are in forensics.schema).
REPORT_FORMAT = "forensics-report/1"

#: A JSON value (object, array, string, number, true/false, null) in a free-form section.
Json = Any
JsonObject = Mapping[str, Json]


class RequestKey(NamedTuple):
    """A request's identity: its id and its tenant (None when the logs named no tenant).

    A tuple, so it hashes and compares like the ``(request_id, tenant_id)`` pairs the tables hold.
    """

    request_id: str
    tenant_id: str | None

    def sort_key(self) -> tuple[str, bool, str]:
        """The order of every table of requests: by id, then tenant, no tenant last."""
        return (self.request_id, self.tenant_id is None, self.tenant_id or "")


def customer_key(tenant: str | None) -> str | None:
    """The key of the customer a tenant id names: the id under NFC. Ids that are the same text by Unicode's
    canonical equivalence (a name typed on another system) name one customer."""
    return None if tenant is None else unicodedata.normalize("NFC", tenant)


def model_key(name: str) -> str:
    """A model name without case, surrounding spaces or a provider prefix (``openai/glm-5.3``): one model."""
    return name.strip().rsplit("/", 1)[-1].strip().casefold()


def _key(name: str) -> dict[str, str]:
    """Field metadata: the JSON key of a field whose Python name differs."""
    return {"json": name}


def _version(value: str) -> Any:
    """The ``schema_version`` field of an artifact: written as its ``format`` key."""
    return dataclasses.field(default=value, kw_only=True, metadata=_key("format"))


def _optional() -> Any:
    """A field left out of the JSON when it is None (a section only some records have)."""
    return dataclasses.field(default=None, kw_only=True, metadata={"omit_none": True})


@dataclasses.dataclass(frozen=True)
class Record:
    """Base of every artifact: ``to_json``/``from_json`` by field, nested records recursively."""

    #: The format (name/version) a reader insists on; None for a nested section.
    FORMAT: ClassVar[str | None] = None
    extra: JsonObject = dataclasses.field(default_factory=dict, kw_only=True, repr=False)

    def to_json(self) -> dict[str, Json]:
        """The JSON object written to the file (its keys are sorted when written)."""
        out: dict[str, Json] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            value = getattr(self, f.name)
            if value is None and f.metadata.get("omit_none"):
                continue
            out[f.metadata.get("json", f.name)] = _dump(value)
        out.update({k: v for k, v in self.extra.items() if k not in out})
        return out

    @classmethod
    def from_json(cls, data: Json, *, file: Path | None = None, where: str = "") -> Self:
        """The artifact of a parsed JSON object; CaseError naming the file and key when it is not one."""
        label = where or "the record"
        if not isinstance(data, Mapping):
            raise CaseError(f"{label} is {json_name(data)}, expected an object", file=file, fix=_FIX)
        if cls.FORMAT is not None and data.get("format") != cls.FORMAT:
            raise CaseError(f"format is {data.get('format')!r}, expected {cls.FORMAT!r}", file=file,
                            fix="re-run the stage that writes it with this version of forensics")
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        known: set[str] = set()
        for f in dataclasses.fields(cls):
            if f.name == "extra":
                continue
            key = f.metadata.get("json", f.name)
            known.add(key)
            path = f"{where}.{key}" if where else key
            if key not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise CaseError(f"the record has no {path}", file=file, fix=_FIX)
                continue
            values[f.name] = _load(hints[f.name], data[key], file, path)
        return cls(**values, extra={k: v for k, v in data.items() if k not in known})

    @classmethod
    def read(cls, path: Path, stage: str) -> Self:
        """The artifact in the JSON file ``path`` written by ``stage``; CaseError when absent or not one."""
        import json

        path = Path(path)
        if not path.is_file():
            raise CaseError(f"{path.name} does not exist", file=path, fix=f"run `forensics {stage}` first")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CaseError(f"cannot read {path.name} ({exc})", file=path, fix=f"run `forensics {stage}` again") from None
        return cls.from_json(data, file=path)

    def __getitem__(self, key: str) -> Json:
        """The value of a JSON key, as the record was read before it was typed (see the module doc)."""
        for f in dataclasses.fields(self):
            if f.metadata.get("json", f.name) == key and f.name != "extra":
                return _dump(getattr(self, f.name))  # the JSON value: objects as dicts, arrays as lists
        return self.extra[key]


_FIX = "re-run the stage that writes it; a file edited by hand is no evidence"


def _dump(value: Any) -> Json:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, tuple) and not isinstance(value, RequestKey):
        return [_dump(v) for v in value]
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _dump(v) for k, v in value.items()}
    return value


def _load(hint: Any, value: Json, file: Path | None, path: str) -> Any:
    """``value`` checked against the field's type; tuples from arrays, records from objects."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:  # its own message names what inside the value is wrong
            return _load(options[0], value, file, path)
        for option in options:
            try:
                return _load(option, value, file, path)
            except CaseError:
                continue
        raise CaseError(f"{path} is {json_name(value)}, expected {_type_name(hint)}", file=file, fix=_FIX)
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_json(value, file=file, where=path)
    if origin is tuple:
        if not isinstance(value, list):
            raise CaseError(f"{path} is {json_name(value)}, expected an array", file=file, fix=_FIX)
        item = typing.get_args(hint)[0]
        return tuple(_load(item, v, file, f"{path}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise CaseError(f"{path} is {json_name(value)}, expected an object", file=file, fix=_FIX)
        item = typing.get_args(hint)[1]
        return {k: _load(item, v, file, f"{path}.{k}") for k, v in value.items()}
    ok = {int: lambda v: isinstance(v, int) and not isinstance(v, bool),
          float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          str: lambda v: isinstance(v, str), bool: lambda v: isinstance(v, bool)}[hint]
    if not ok(value):
        raise CaseError(f"{path} is {json_name(value)}, expected {_type_name(hint)}", file=file, fix=_FIX)
    return value


def _type_name(hint: Any) -> str:
    names = {int: "a whole number", float: "a number", str: "a string", bool: "true or false", type(None): "null"}
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    def name(a: Any) -> str:
        origin = typing.get_origin(a) or a
        if isinstance(origin, type) and (issubclass(origin, Record) or issubclass(origin, Mapping)):
            return "an object"
        return names.get(a, "an array")

    return " or ".join(name(a) for a in args)


# ------------------------------------------------------------------------------------------
# ingest: CASE/manifest.json
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Orphans(Record):
    """Split logs: halves with no other half."""

    request_only: int = 0
    response_only: int = 0


@dataclasses.dataclass(frozen=True)
class DamagedRecords(Record):
    """Records from damaged input (``exchanges.damage``), in all and per reason."""

    total: int = 0
    by_reason: Mapping[str, int] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class TableCounts(Record):
    """Rows of the case tables ingest wrote."""

    exchanges: int
    engine_events: int = 0
    quarantine: int = 0


@dataclasses.dataclass(frozen=True)
class IngestManifest(Record):
    """CASE/manifest.json: every input file with its counts, the tables' rows, what was reconciled.

    ``files`` and ``skipped_inputs`` hold one JSON object per file (see forensics/ingest/__init__.py
    for their keys: path, sha256, format, lines, ingested, quarantined, blank, duplicate, status...).
    """

    FORMAT: ClassVar[str | None] = schema.CASE_FORMAT
    files: tuple[JsonObject, ...]
    tables: TableCounts
    timezone: str | None = None
    zone_assumed_rows: int = 0
    tenant_field: Json = None
    tokenizer: str | None = None
    duplicate_requests: int = 0
    superseded_variants: int = 0
    orphans: Orphans = dataclasses.field(default_factory=Orphans)
    truncated_prompts: int = 0
    requests_without_tenant: int = 0
    implausible_reported_counts: int = 0
    records_with_problems: int = 0
    records_from_damaged_input: DamagedRecords = dataclasses.field(default_factory=DamagedRecords)
    request_id_collisions: int = 0
    time_range: tuple[str, ...] | None = None  # (first, last) ISO 8601, None when no record has a time
    models: tuple[tuple[Json, ...], ...] = ()  # (model, exchanges), most used first
    prompt_tokens_sources: Mapping[str, int] = dataclasses.field(default_factory=dict)
    skipped_inputs: tuple[JsonObject, ...] = ()
    reconciled: bool = True
    notes: tuple[str, ...] = ()
    tool: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # With a tokenizer: the size band that decided rows without it (the rule, counts, ceiling per file).
    prompt_tokens_band: JsonObject | None = _optional()
    # With a tokenizer: its file's SHA-256 (two tokenizers are most often both named tokenizer.json).
    tokenizer_sha256: str | None = _optional()
    # What this ingest did to the case's earlier content (a log that grew replaced by its complete copy): the case's
    # history, not its content, so no report carries it (a re-run from the final files could never repeat it).
    history: tuple[str, ...] | None = _optional()
    # (tenant, field, other tenant): customer ids another customer's records hold in a later tenant field, which may
    # name one customer (forensics.ingest.tenant_aliases).
    tenant_aliases: tuple[tuple[str, str, str], ...] | None = _optional()
    schema_version: str = _version(schema.CASE_FORMAT)


# ------------------------------------------------------------------------------------------
# scan: CASE/scan.json
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ScanParameters(Record):
    """The scope and limits the scan used, with where each limit came from."""

    models: str
    window_start: str | None
    window_end: str | None
    real_ceiling_tokens: int | str | None
    real_ceiling_tokens_source: str
    advertised_window_tokens: int | None
    advertised_window_tokens_source: str
    window_compared_with: str


@dataclasses.dataclass(frozen=True)
class SuspectCounts(Record):
    """Suspect responses, in all and by what flagged them."""

    total: int
    borderline: int
    engine_signature: int
    reported_count_below_ceiling: int
    by_reason: Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class Anomaly(Record):
    """One anomaly query's rows: the count is complete, ``listed`` keeps the first ones."""

    title: str
    rows: int
    listed: tuple[JsonObject, ...]


@dataclasses.dataclass(frozen=True)
class Limit(Record):
    """A resolved limit (the KV-pool ceiling or the advertised window): its value, where it came
    from, and what each engine node's startup lines said."""

    value: int | str | None
    source: str  # file | option | auto-detected | default
    detected: int | None  # what the engine logs give, whatever the case file said
    nodes_used: str  # "prefill" when the logs tell roles (the prefill side decides), else "all"
    prefill_nodes: tuple[str, ...]
    per_node: Mapping[str, tuple[int, ...]]
    values_of_nodes_used: tuple[int, ...]
    values_of_all_nodes: tuple[int, ...]
    nodes_disagree: bool
    note: str | None = _optional()  # how a disagreement was settled
    #: Per node, values of its startup lines not in effect in the window (a later restart before it replaced them,
    #: or logged after it): not counted. Left out when every line counted.
    not_in_effect: Mapping[str, tuple[int, ...]] | None = _optional()
    #: Auto-detected: per node of the deciding side whose startup lines all come after the window, their values, left
    #: out (what it ran in the window is not shown).
    not_shown_in_window: Mapping[str, tuple[int, ...]] | None = _optional()


@dataclasses.dataclass(frozen=True)
class ScanLimits(Record):
    """The limits the scan used, and those the engine's own over-limit lines name (a cross-check)."""

    real_ceiling_tokens: Limit
    advertised_window_tokens: Limit
    engine_over_limit_lines: Mapping[str, tuple[int, ...]]


@dataclasses.dataclass(frozen=True)
class ScanRecord(Record):
    """CASE/scan.json: parameters, resolved limits, per-query rows, suspects, band, anomalies."""

    FORMAT: ClassVar[str | None] = schema.SCAN_FORMAT
    parameters: ScanParameters
    limits: ScanLimits
    queries: tuple[JsonObject, ...]  # each query's description and rows
    suspect_counts: SuspectCounts
    exposure_band: tuple[JsonObject, ...]  # rows of the exposure_band summary query
    anomalies: Mapping[str, Anomaly]
    warnings: tuple[str, ...]
    stage: str = "scan"
    schema_version: str = _version(schema.SCAN_FORMAT)

    @property
    def exposure_band_requests(self) -> int:
        """Requests in the exposure band over every model and day."""
        return sum(int(r["requests"]) for r in self.exposure_band)


# ------------------------------------------------------------------------------------------
# match: evidence rows and CASE/match.json
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Finding:
    """One row of evidence.* (or review.*, which adds ``why_not_notified``): schema.EVIDENCE's columns."""

    finding_id: str
    recipient_request_id: str
    recipient_tenant_id: str | None
    source_request_id: str
    source_tenant_id: str | None
    source_kind: str
    relation: str
    tier: str | None
    tier_rule: str | None
    score: float
    matched_tokens: int
    longest_run: int
    recipient_start: int
    recipient_end: int
    source_start: int
    source_end: int
    rarity: float
    informative_tokens: int
    regions: int
    other_source_requests: int
    expected_by_chance: float | None
    strength_bits: float
    same_decode_node: bool | None
    recipient_decode_node: str | None
    source_decode_node: str | None
    seconds_before: float | None
    records_since_source_on_node: int | None
    mechanism_factor: float | None
    expected_by_chance_with_mechanism: float | None
    recipient_damage: str | None
    source_damage: str | None
    passages: str
    records_since_source_on_model: int | None = None  # gateway logs only (see forensics.match.recent)
    why_not_notified: str | None = None  # review rows only

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Finding:
        """A finding from a row holding at least the evidence columns (other keys are ignored)."""
        values: dict[str, Any] = {name: row.get(name) for name in _FINDING_FIELDS}
        return cls(**values)

    def to_row(self, columns: tuple[str, ...] = schema.REVIEW_CSV) -> dict[str, Any]:
        """The row of a table or CSV: ``columns`` in their order."""
        return {c: getattr(self, c) for c in columns}

    @property
    def recipient(self) -> RequestKey:
        """The suspect request whose response holds the passage."""
        return RequestKey(self.recipient_request_id, self.recipient_tenant_id)

    @property
    def source(self) -> RequestKey:
        """The request whose text the passage matches."""
        return RequestKey(self.source_request_id, self.source_tenant_id)

    @property
    def cross_tenant(self) -> bool:
        """Whether the finding is exposure (another tenant's text), not same-tenant overlap."""
        return self.relation == "cross_tenant"

    def __getitem__(self, key: str) -> Any:
        """A column by name, as the row read before it was typed (see the module doc)."""
        if key not in _FINDING_FIELDS:
            raise KeyError(key)
        return getattr(self, key)


_FINDING_FIELDS = tuple(f.name for f in dataclasses.fields(Finding))
assert set(_FINDING_FIELDS) == set(schema.REVIEW.names), "Finding and schema.REVIEW must hold the same columns"


@dataclasses.dataclass(frozen=True)
class Searched(Record):
    """What the match stage searched."""

    suspects: int
    suspects_searched: int
    suspects_missing_from_exchanges: tuple[JsonObject, ...]  # request_id, tenant_id of each
    suspects_with_empty_response: int
    suspects_without_completed_at: int
    target_kgrams: int
    records: int
    records_without_received_at: int
    texts: int
    chars: int
    tokens: int
    prompt_tokens: int
    response_tokens: int
    kgram_hits_kept_after_rarity_and_own_context: int
    source_texts_verified: int
    sources: str
    lookback: str
    same_decode_node: bool
    # SHA-256 of the suspects.parquet searched: a report refuses a case scanned again since.
    suspects_sha256: str | None = _optional()
    # Public constants (forensics.match.public) blanked in the responses searched, suspects and controls.
    public_constants_masked: int | None = _optional()


@dataclasses.dataclass(frozen=True)
class FindingCounts(Record):
    """Findings of the match stage by relation and tier."""

    total: int
    cross_tenant: int
    same_tenant: int
    cross_tenant_confirmed: int
    cross_tenant_probable: int
    suspects_with_cross_tenant_evidence: int
    exposed_tenants: int
    review: int
    on_damaged_data: int


@dataclasses.dataclass(frozen=True)
class DamageRecord(Record):
    """Findings and review candidates resting on damaged records."""

    column_in_exchanges: bool
    findings_on_damaged_data: tuple[str, ...]
    review_on_damaged_data: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class ControlRecord(Record):
    """The control sample (non-suspect responses) and the findings it got: the false-positive rate."""

    requested: int
    size: int
    sample: str
    length_classes: JsonObject
    findings: int
    responses_with_findings: int
    request_ids_with_findings: tuple[str, ...]
    false_positive_rate: float | None


@dataclasses.dataclass(frozen=True)
class MatchRecord(Record):
    """CASE/match.json: parameters and their origins, what was searched, findings, null, control."""

    FORMAT: ClassVar[str | None] = schema.MATCH_FORMAT
    parameters: JsonObject  # MatchParams.record(): the settings that change results
    parameter_sources: Mapping[str, str]  # option | file | default, per parameter
    versions: JsonObject
    searched: Searched
    findings: FindingCounts
    tiering: str
    null: JsonObject  # the null model, its calibration and the rules' false-positive rates (findings.decide)
    damage: DamageRecord
    control: ControlRecord
    schema_version: str = _version(schema.MATCH_FORMAT)


# ------------------------------------------------------------------------------------------
# report: REPORT/manifest.json
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ReportParameters(Record):
    """Every parameter the report rests on: the case file's, and those the scan and match recorded."""

    case: JsonObject  # CaseConfig.to_json(), input paths relative to the inputs root
    scan: JsonObject
    match: JsonObject
    report: JsonObject


@dataclasses.dataclass(frozen=True)
class ReportManifest(Record):
    """REPORT/manifest.json: inputs and outputs with their hashes, parameters, versions, counts.

    Input paths are relative to ``inputs_root``, itself relative to the report folder.
    """

    FORMAT: ClassVar[str | None] = REPORT_FORMAT
    case: str
    inputs_root: str
    inputs: tuple[JsonObject, ...]  # path, sha256, size, format, counts... (report.manifest.input_entries)
    reconciliation: JsonObject
    parameters: ReportParameters
    stage_records: Mapping[str, str]  # file name: SHA-256
    queries: tuple[JsonObject, ...]  # path, sha256
    severity_patterns: Mapping[str, str]
    versions: Mapping[str, str]
    counts: JsonObject
    outputs: tuple[JsonObject, ...] = ()  # path, size, sha256 of every output
    outputs_excluded: tuple[str, ...] = ()
    ledgers: Mapping[str, JsonObject] | None = _optional()  # entries and head of each ledger rendered with
    case_file: Mapping[str, str] | None = _optional()  # path and sha256 of the case file, when there is one
    # The key of the references notices cite (hex): the first render's, kept by every later one (forensics.report)
    references_key: str | None = _optional()
    # Per customer on the list (its id as the logs hold it): since when a report has listed it, the time the audit's
    # deadline runs from; carried from the report this one replaces, so logs added later do not move it
    listed_since: Mapping[str, str] | None = _optional()
    schema_version: str = _version(REPORT_FORMAT)
