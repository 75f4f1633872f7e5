"""The canary probe: does an endpoint answer long prompts from their own text, and up to what size?

For each level (a fraction of the advertised ``max_input_tokens``) and pair, two distinct prompts
of about that size, filled with their own generated markers (forensics.probe.prompts), are sent
back to back. Each answer is checked for:

``leak``
    markers of any *other* prompt sent in the run (the incident: an over-pool prompt answered
    from the stale cache pages of an earlier one). The evidence names the prompt whose markers
    appeared, which markers and where they sat in it.
``placeholder_usage``
    ``usage.prompt_tokens`` below half the calibrated size of the prompt (the incident's
    placeholder reported ``prompt_tokens = 1``).
``truncated_usage``
    ``usage.prompt_tokens`` below 0.9 of the calibrated size but above half of it: the endpoint read
    only part of the prompt and said so in its count (a silent cut at a smaller real window). Any one
    of the prompt's markers is still quoted from the part it kept, so the answer alone passes.
``incoherent``
    none of the prompt's own markers in the answer. The prompt asks for its first and last
    marker; a real model may get them wrong, change case, split or decorate them, so *any* of its
    own markers anywhere in the answer (ten characters matched case-insensitively, ignoring
    punctuation and spaces) counts as addressing its own prompt. A model that refuses or
    answers in prose only will be flagged: read the report before blaming the cache.
``rejected_below_advertised`` (a warning, not a finding)
    a size refusal (HTTP 400, 413 or 422) for a prompt planned below the advertised maximum:
    the endpoint refuses honestly, but its real ceiling is lower than advertised. Any other
    4xx (401, 403, 404, ...) says nothing about the size: it is an error, and a level with
    nothing but errors is untested.

Answers are never written to the report (on a broken deployment they may hold another
customer's text): only their size, SHA-256 and the markers found in them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forensics.errors import OutputError, ProbeError
from forensics.probe.client import ChatClient, ClientSettings, Reply, shown_url
from forensics.probe.prompts import MarkerIndex, MarkerSource, Prompt, build_prompt
from forensics.tokens import plausible

CALIBRATION_BYTES = (1024, 4096)
# The larger calibration prompt must fit even at 2.5 bytes per token (code-like text).
MIN_INPUT_TOKENS = 2048
PLACEHOLDER_RATIO = 0.5
MAX_TIMEOUT = 86400.0
#: A count below this share of the planned size (above the placeholder's half): the endpoint read only part of the
#: prompt. The calibration fits the endpoint's own counts of prompts built the same way (or the model's tokenizer, to
#: which the template only adds), so a shortfall of a tenth is the prompt's, not the estimate's.
TRUNCATION_RATIO = 0.9
CEILING_TOLERANCE = 0.02
CEILING_MAX_REQUESTS = 20
MIN_TOKENS_PER_BYTE, MAX_TOKENS_PER_BYTE = 1 / 16, 1.0
DEFAULT_LEVELS = (0.5, 0.9, 0.99)
# Covers the default plan (levels 0.5, 0.9, 0.99, one pair) for a 1,048,576-token window.
DEFAULT_MAX_TOTAL_TOKENS = 6_000_000
FINDING_FLAGS = ("leak", "placeholder_usage", "truncated_usage", "incoherent")
# How engines refuse a prompt that is too long: vLLM and SGLang answer 400 ("maximum context
# length", "exceeds the maximum"), TGI 422, a proxy's body limit 413. A 401, 403 or 404 is about
# the key or the URL, so counting it as a refusal would call an untested level clean.
SIZE_REFUSAL_STATUSES = frozenset({400, 413, 422})


@dataclasses.dataclass(frozen=True)
class ProbeSettings:
    """Everything a probe run depends on (the API key is in ``client``, never in the report)."""

    client: ClientSettings
    max_input_tokens: int
    levels: tuple[float, ...] = DEFAULT_LEVELS
    pairs: int = 1
    find_ceiling: bool = False
    max_total_tokens: int = DEFAULT_MAX_TOTAL_TOKENS
    seed: int = 0
    tokenizer: Path | None = None
    api_key_env: str | None = None

    def validate(self) -> None:
        """Raise ProbeError for an option out of range, naming it and the fix."""
        if self.max_input_tokens < MIN_INPUT_TOKENS:
            raise ProbeError(f"--max-input-tokens {self.max_input_tokens} is too small to probe",
                             fix=f"give the advertised maximum input, at least {MIN_INPUT_TOKENS} tokens")
        if not self.levels or any(not 0 < lv <= 1 for lv in self.levels):
            raise ProbeError(f"--levels {','.join(f'{lv:g}' for lv in self.levels)} must be fractions in (0, 1]",
                             fix="e.g. --levels 0.5,0.9,0.99")
        if self.pairs < 1:
            raise ProbeError(f"--pairs {self.pairs} must be at least 1", fix="e.g. --pairs 1")
        c = self.client
        # NaN, infinity and 1e300 seconds reached the socket as an internal error.
        if not (math.isfinite(c.timeout) and 0 < c.timeout <= MAX_TIMEOUT) or c.retries < 0 or c.max_tokens < 8:
            raise ProbeError(f"--timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:g} (a day), --retries "
                             ">= 0 and --max-tokens >= 8", fix="e.g. --timeout 120 --retries 3 --max-tokens 64")


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Tokens of a prompt as a linear function of its UTF-8 size, measured or counted."""

    source: str  # "endpoint usage" or "tokenizer"
    intercept: float  # tokens of the chat template and anything else that does not scale
    tokens_per_byte: float
    samples: tuple[tuple[int, int], ...]  # (bytes, tokens)

    def tokens(self, nbytes: int) -> int:
        """Expected prompt tokens of a prompt of ``nbytes`` bytes."""
        return round(self.intercept + self.tokens_per_byte * nbytes)

    def bytes_for(self, tokens: int) -> int:
        """Bytes a prompt needs to reach ``tokens`` tokens."""
        return max(0, math.floor((tokens - self.intercept) / self.tokens_per_byte))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {"source": self.source, "intercept_tokens": round(self.intercept, 3),
                "tokens_per_byte": round(self.tokens_per_byte, 6), "bytes_per_token": round(1 / self.tokens_per_byte, 4),
                "samples": [{"bytes": b, "tokens": t} for b, t in self.samples]}


@dataclasses.dataclass
class RequestRecord:
    """One prompt sent (or refused by the budget) and what its answer showed."""

    label: str
    phase: str  # calibration, level or ceiling
    level: float | None
    planned_tokens: int
    prompt_bytes: int
    prompt_sha256: str
    markers: int
    status: int | None = None
    error: str | None = None
    attempts: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    answer_chars: int | None = None
    answer_sha256: str | None = None
    own_markers_found: int = 0
    foreign: dict[str, list[tuple[str, int]]] = dataclasses.field(default_factory=dict)
    flags: list[str] = dataclasses.field(default_factory=list)

    @property
    def answered(self) -> bool:
        """HTTP 200 with an answer."""
        return self.status == 200 and self.answer_sha256 is not None

    @property
    def good(self) -> bool:
        """Answered its own prompt, with nothing foreign and a plausible usage count."""
        return self.answered and not any(f in FINDING_FLAGS for f in self.flags)

    @property
    def rejected(self) -> bool:
        """Refused by the endpoint as too large (HTTP 400, 413 or 422); other 4xx are errors."""
        return self.status in SIZE_REFUSAL_STATUSES

    def to_json(self) -> dict[str, Any]:
        """JSON-ready form: evidence only, never the answer text."""
        return {
            "label": self.label, "phase": self.phase, "level": self.level, "planned_tokens": self.planned_tokens,
            "prompt_bytes": self.prompt_bytes, "prompt_sha256": self.prompt_sha256, "markers": self.markers,
            "status": self.status, "error": self.error, "attempts": self.attempts,
            "usage": {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens},
            "answer_chars": self.answer_chars, "answer_sha256": self.answer_sha256,
            "own_markers_found": self.own_markers_found,
            "foreign_markers": [
                {"from_prompt": label, "count": len(found), "markers": [m for m, _ in found[:5]],
                 "positions": [p for _, p in found[:5]]}
                for label, found in sorted(self.foreign.items())
            ],
            "flags": list(self.flags),
        }


@dataclasses.dataclass(frozen=True)
class CeilingResult:
    """The largest prompt size that answered correctly, bracketed by the smallest that did not."""

    healthy_tokens: int  # largest size seen answering correctly
    failing_tokens: int | None  # smallest size seen failing (None: healthy to within 2% of the advertised maximum)
    requests: int
    steps: tuple[str, ...]  # labels of the search's requests, in order
    stopped: str | None  # why the search stopped early, if it did

    def to_json(self, advertised: int) -> dict[str, Any]:
        """JSON-ready form."""
        gap = None if self.failing_tokens is None else self.failing_tokens - self.healthy_tokens
        return {"ceiling_tokens": self.healthy_tokens, "first_failing_tokens": self.failing_tokens,
                "bracket_tokens": gap, "bracket_fraction_of_advertised": None if gap is None else round(gap / advertised, 4),
                "requests": self.requests, "steps": list(self.steps), "stopped": self.stopped}


@dataclasses.dataclass
class ProbeResult:
    """A probe run: calibration, every request with its evidence, the ceiling and the verdict."""

    settings: ProbeSettings
    calibration: Calibration
    requests: list[RequestRecord]
    ceiling: CeilingResult | None
    planned_budget: int
    spent_tokens: int
    stopped: str | None  # why the run stopped before its plan was done (budget), if it did

    @property
    def findings(self) -> list[dict[str, Any]]:
        """One row per request with a leak, a placeholder count or an incoherent answer, and its evidence."""
        rows = []
        for r in self.requests:
            kinds = [f for f in r.flags if f in FINDING_FLAGS]
            if kinds:
                rows.append({"request": r.label, "phase": r.phase, "kinds": kinds, "planned_tokens": r.planned_tokens,
                             "prompt_tokens": r.prompt_tokens, "from_prompts": sorted(r.foreign)})
        return rows

    @property
    def warnings(self) -> list[str]:
        """Rejections below the advertised maximum, errors, levels left untested, early stops."""
        out = []
        for r in self.requests:
            if "rejected_below_advertised" in r.flags:
                out.append(f"{r.label}: rejected at {r.planned_tokens} planned tokens, below the advertised "
                           f"{self.settings.max_input_tokens} ({r.error})")
            elif "error" in r.flags:
                out.append(f"{r.label}: {r.error}")
        for level in self.untested_levels:
            out.append(f"level {level:g}: no request got an answer or a size refusal, so it is untested")
        if self.stopped:
            out.append(self.stopped)
        return out

    @property
    def untested_levels(self) -> list[float]:
        """Levels where every request failed without an answer or a size refusal (or was never sent)."""
        out = []
        for level in self.settings.levels:
            rs = [r for r in self.requests if r.phase == "level" and r.level == level]
            if not any(r.answered or r.rejected for r in rs):
                out.append(level)
        return out

    @property
    def verdict(self) -> str:
        """``findings`` (leak or incoherence), ``untested`` (could not test everything) or ``clean``."""
        if self.findings:
            return "findings"
        if self.untested_levels or self.stopped:
            return "untested"
        return "clean"

    def to_json(self) -> dict[str, Any]:
        """The report: parameters (never the key), calibration, requests, findings, ceiling, verdict."""
        s, c = self.settings, self.settings.client
        return {
            "tool": "forensics probe",
            "verdict": self.verdict,
            "endpoint": {"base_url": shown_url(c.base_url), "model": c.model, "stream": c.stream,
                         "api_key_env": s.api_key_env, "api_key_sent": c.api_key is not None},
            "parameters": {"max_input_tokens": s.max_input_tokens, "levels": list(s.levels), "pairs": s.pairs,
                           "find_ceiling": s.find_ceiling, "max_total_tokens": s.max_total_tokens, "seed": s.seed,
                           "max_tokens": c.max_tokens, "timeout_seconds": c.timeout, "retries": c.retries,
                           "tokenizer": None if s.tokenizer is None else Path(s.tokenizer).name},
            "calibration": self.calibration.to_json(),
            "budget": {"planned_tokens": self.planned_budget, "spent_tokens": self.spent_tokens,
                       "how": "every attempt counts its planned prompt tokens plus max_tokens"},
            "requests": [r.to_json() for r in self.requests],
            "findings": self.findings,
            "warnings": self.warnings,
            "untested_levels": self.untested_levels,
            "ceiling": None if self.ceiling is None else self.ceiling.to_json(s.max_input_tokens),
            "heuristics": {
                "leak": "an answer holds markers of another prompt sent in this run",
                "placeholder_usage": f"usage.prompt_tokens below {PLACEHOLDER_RATIO:g} x the calibrated prompt size",
                "truncated_usage": f"usage.prompt_tokens below {TRUNCATION_RATIO:g} x the calibrated prompt size (above "
                                   f"{PLACEHOLDER_RATIO:g} x): the endpoint read only part of the prompt",
                "incoherent": "an answer holds none of its own prompt's markers (case, spaces and punctuation ignored)",
                "ceiling": f"bisection to within {CEILING_TOLERANCE:.0%} of the advertised maximum, "
                           f"at most {CEILING_MAX_REQUESTS} requests",
            },
        }


def ceiling_steps_bound() -> int:
    """Most requests the ceiling search can send: one at the advertised maximum, then the bisection."""
    return 1 + math.ceil(math.log2(1 / CEILING_TOLERANCE))


def plan_tokens(settings: ProbeSettings) -> int:
    """Tokens the whole plan may cost, counted before anything is sent (prompt + max_tokens per request)."""
    per = settings.client.max_tokens
    n = settings.max_input_tokens
    total = 0
    if settings.tokenizer is None:  # calibration: never more than one token per byte
        total += sum(b + 256 + per for b in CALIBRATION_BYTES)
    total += sum(2 * settings.pairs * (math.ceil(lv * n) + per) for lv in settings.levels)
    if settings.find_ceiling:
        total += ceiling_steps_bound() * (n + per)
    return total


class _Run:
    """State of one probe run: prompts, markers sent, the budget spent and the records."""

    def __init__(self, settings: ProbeSettings, client: ChatClient) -> None:
        self.s = settings
        self.client = client
        self.markers = MarkerSource(settings.seed)
        self.index = MarkerIndex()
        self.records: list[RequestRecord] = []
        self.spent = 0
        self.stopped: str | None = None
        self.calibration: Calibration | None = None

    def prompt(self, label: str, target_bytes: int) -> Prompt:
        p = build_prompt(label, target_bytes, self.markers)
        self.index.add(p)
        return p

    def send(self, prompt: Prompt, phase: str, level: float | None, planned: int) -> RequestRecord | None:
        """Send one prompt within the budget and check its answer; None when the budget is spent."""
        cost = planned + self.s.client.max_tokens
        affordable = (self.s.max_total_tokens - self.spent) // cost if cost > 0 else 0
        if affordable < 1:
            self.stopped = (f"stopped before {prompt.label}: the token budget (--max-total-tokens "
                            f"{self.s.max_total_tokens}) is reached ({self.spent} spent, {cost} needed)")
            return None
        reply = self.client.complete(prompt.text, max_attempts=int(min(affordable, self.s.client.retries + 1)))
        self.spent += reply.attempts * cost
        rec = RequestRecord(prompt.label, phase, level, planned, prompt.bytes, prompt.sha256, len(prompt.markers))
        self._check(rec, prompt, reply)
        self.records.append(rec)
        return rec

    def _check(self, rec: RequestRecord, prompt: Prompt, reply: Reply) -> None:
        rec.status, rec.error, rec.attempts = reply.status, reply.error, reply.attempts
        rec.prompt_tokens, rec.completion_tokens = reply.prompt_tokens, reply.completion_tokens
        if not reply.answered:
            below = rec.planned_tokens <= self.s.max_input_tokens
            rec.flags.append("rejected_below_advertised" if rec.rejected and below else "error")
            return
        answer = reply.content or ""
        rec.answer_chars = len(answer)
        rec.answer_sha256 = hashlib.sha256(answer.encode("utf-8")).hexdigest()
        found = self.index.find(answer)
        rec.own_markers_found = len(found.pop(prompt.label, []))
        rec.foreign = found
        if found:
            rec.flags.append("leak")
        # Calibration prompts are sized by their own usage figures, checked for plausibility there.
        if rec.phase != "calibration" and reply.prompt_tokens is not None and reply.prompt_tokens < PLACEHOLDER_RATIO * rec.planned_tokens:
            rec.flags.append("placeholder_usage")
        elif rec.phase != "calibration" and reply.prompt_tokens is not None and reply.prompt_tokens < TRUNCATION_RATIO * rec.planned_tokens:
            rec.flags.append("truncated_usage")
        if rec.own_markers_found == 0:
            rec.flags.append("incoherent")


def _calibrate_with_endpoint(run: _Run) -> Calibration:
    samples = []
    for i, nbytes in enumerate(CALIBRATION_BYTES):
        p = run.prompt(f"cal-{i + 1}", nbytes)
        rec = run.send(p, "calibration", None, planned=p.bytes)  # one token per byte at most: a safe bound
        if rec is None:
            raise ProbeError("the token budget does not cover the calibration requests", fix="raise --max-total-tokens")
        if not rec.answered:
            raise ProbeError(f"calibration request {p.label} ({p.bytes} bytes) got no answer: {rec.error}",
                             fix="check --base-url, --model and the API key; a probe needs a working endpoint")
        if rec.prompt_tokens is None:
            raise ProbeError("the endpoint reports no usage.prompt_tokens, so prompt sizes cannot be calibrated",
                             fix="pass the model's tokenizer.json with --tokenizer")
        if not plausible(rec.prompt_tokens, p.bytes):
            raise ProbeError(f"calibration request {p.label} ({p.bytes} bytes) reported usage.prompt_tokens "
                             f"{rec.prompt_tokens}, impossible for its size", fix="pass the model's tokenizer.json with --tokenizer")
        samples.append((p.bytes, rec.prompt_tokens))
    (b1, t1), (b2, t2) = samples
    slope = (t2 - t1) / (b2 - b1)
    if not MIN_TOKENS_PER_BYTE <= slope <= MAX_TOKENS_PER_BYTE:
        raise ProbeError(
            f"the endpoint's usage.prompt_tokens ({t1} for {b1} bytes, {t2} for {b2} bytes) gives {slope:.4f} tokens "
            "per byte, which no tokenizer produces", fix="pass the model's tokenizer.json with --tokenizer")
    for rec in run.records:  # the planned size of a calibration prompt is now known properly
        rec.planned_tokens = round(t1 + slope * (rec.prompt_bytes - b1))
    return Calibration("endpoint usage", t1 - slope * b1, slope, tuple(samples))


def _calibrate_with_tokenizer(run: _Run, path: Path) -> Calibration:
    from forensics.tokens import load_tokenizer

    tok = load_tokenizer(Path(path))
    samples = []
    for i, nbytes in enumerate(CALIBRATION_BYTES):
        # Built from the same marker source so the sizing text looks like the real prompts; never sent.
        p = build_prompt(f"cal-{i + 1}", nbytes, run.markers)
        samples.append((p.bytes, len(tok.encode(p.text, add_special_tokens=False).ids)))
    (b1, t1), (b2, t2) = samples
    slope = (t2 - t1) / (b2 - b1)
    if slope <= 0:
        raise ProbeError("the tokenizer gives no more tokens for a longer prompt", file=path, fix="pass the model's tokenizer.json")
    return Calibration("tokenizer", t1 - slope * b1, slope, tuple(samples))


def _level_label(level: float, pair: int, side: str) -> str:
    return f"L{level:g}-p{pair + 1}{side}"


def probe(settings: ProbeSettings, client: ChatClient | None = None,
          on_request: Callable[[RequestRecord], None] | None = None) -> ProbeResult:
    """Run the probe: budget check, calibration, level pairs, optional ceiling search.

    Raises ProbeError when nothing can be tested (bad options, budget too small for the plan,
    endpoint unreachable or unusable for calibration); otherwise returns the result, whose
    ``verdict`` says whether a finding was made or part of the plan could not be tested.
    """
    settings.validate()
    budget = plan_tokens(settings)
    if budget > settings.max_total_tokens:
        raise ProbeError(
            f"the plan may cost up to {budget} tokens ({len(settings.levels)} levels x {settings.pairs} pairs x 2 prompts"
            + (f", ceiling search up to {ceiling_steps_bound()} requests" if settings.find_ceiling else "")
            + f"), above --max-total-tokens {settings.max_total_tokens}; nothing was sent",
            fix=f"raise --max-total-tokens to {budget}, or use fewer --levels/--pairs",
        )
    run = _Run(settings, client or ChatClient(settings.client))
    if settings.tokenizer is not None:
        calibration = _calibrate_with_tokenizer(run, settings.tokenizer)
    else:
        calibration = _calibrate_with_endpoint(run)
    run.calibration = calibration
    if on_request:
        for earlier in run.records:
            on_request(earlier)

    n = settings.max_input_tokens
    for level in sorted(settings.levels):
        target = min(n, int(level * n))
        for pair in range(settings.pairs):
            for side in "ab":
                p = run.prompt(_level_label(level, pair, side), calibration.bytes_for(target))
                rec = run.send(p, "level", level, calibration.tokens(p.bytes))
                if rec is None:
                    break
                if on_request:
                    on_request(rec)
            if run.stopped:
                break
        if run.stopped:
            break

    ceiling = _find_ceiling(run, calibration, on_request) if settings.find_ceiling and not run.stopped else None
    return ProbeResult(settings, calibration, run.records, ceiling, budget, run.spent, run.stopped)


def _find_ceiling(run: _Run, cal: Calibration,
                  on_request: Callable[[RequestRecord], None] | None) -> CeilingResult | None:
    """Bisect between the largest healthy size seen and the advertised maximum.

    Each step is one fresh prompt: on a broken deployment an over-pool prompt is answered from the
    previous prompt's stale pages (foreign markers) or from nothing (no own markers), and an
    honest one rejects it; either way the size fails. None when nothing bounds the ceiling: no
    size failed and the request at the advertised maximum got neither an answer nor a refusal
    (its error, or the budget stop, is among the warnings).
    """
    n = run.s.max_input_tokens
    healthy = [r.planned_tokens for r in run.records if r.good]
    failing = [r.planned_tokens for r in run.records if r.answered and not r.good or r.rejected]
    lo = max(healthy, default=0)
    hi = min([f for f in failing if f > lo], default=None)
    steps: list[str] = []
    stopped = None

    def step(target: int) -> RequestRecord | None:
        p = run.prompt(f"C{len(steps) + 1}", cal.bytes_for(target))
        rec = run.send(p, "ceiling", None, cal.tokens(p.bytes))
        if rec is not None:
            steps.append(rec.label)
            if on_request:
                on_request(rec)
        return rec

    if hi is None and n - lo <= CEILING_TOLERANCE * n:  # a level already answered within 2% of the maximum
        return CeilingResult(lo, None, 0, (), None)
    if hi is None:  # nothing failed yet: try the advertised maximum itself first
        rec = step(n)
        if rec is None or not (rec.answered or rec.rejected):
            # "healthy up to the maximum" would be a claim nothing tested (a 401, a timeout).
            return None
        if rec.good:
            return CeilingResult(rec.planned_tokens, None, len(steps), tuple(steps), None)
        hi = rec.planned_tokens
    while hi - lo > CEILING_TOLERANCE * n and len(steps) < CEILING_MAX_REQUESTS:
        rec = step((lo + hi) // 2)
        if rec is None:
            stopped = run.stopped
            break
        if rec.good:
            lo = max(lo, rec.planned_tokens)
        elif rec.answered or rec.rejected:
            hi = min(hi, rec.planned_tokens)
        else:  # a timeout or server error says nothing about the size: stop rather than guess
            stopped = f"{rec.label}: {rec.error}"
            break
    return CeilingResult(lo, hi, len(steps), tuple(steps), stopped)


def _finding_text(f: dict[str, Any]) -> str:
    kinds = [k + (f" (markers of {', '.join(f['from_prompts'])})" if k == "leak" else "") for k in f["kinds"]]
    return f"{', '.join(kinds)}; planned {f['planned_tokens']} tokens, usage.prompt_tokens {f['prompt_tokens']}"


def finding_text(finding: dict[str, Any]) -> str:
    """One line describing a finding row of ProbeResult.findings."""
    return _finding_text(finding)


def check_out_dir(out_dir: Path) -> None:
    """Refuse an ``--out`` the report cannot be written into, before any request is sent (and any token spent):
    a file there, or a folder that cannot be made or written. It was found after the whole run, as an internal error
    that hid the verdict."""
    import os

    out_dir = Path(out_dir)
    if out_dir.is_symlink() and not out_dir.exists():
        raise OutputError("--out is a link to a folder that is not there", file=out_dir,
                          fix="give a folder for probe.json and probe.md (or make the folder the link names)")
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError("--out is a file, not a folder", file=out_dir, fix="give a folder for probe.json and probe.md")
    # Nothing is made yet (a run refused for its options leaves nothing behind): the folder, or the nearest one above
    # it that is there, must take new files.
    there = out_dir
    while not there.exists() and there != there.parent:
        there = there.parent
    if not there.is_dir():
        raise OutputError(f"--out cannot be made: {there} is a file", file=out_dir, fix="give a folder you can write")
    if not os.access(there, os.W_OK | os.X_OK):
        raise OutputError(f"--out cannot be written: {there} is not writable", file=out_dir, fix="give a folder you can write")


def write_report(result: ProbeResult, out_dir: Path) -> list[Path]:
    """Write probe.json and probe.md into ``out_dir`` (folder 0700, files 0600); return their paths."""
    import json
    import os

    from forensics.case import atomic_open

    out_dir = Path(out_dir)
    data = result.to_json()
    paths = [out_dir / "probe.json", out_dir / "probe.md"]
    try:
        out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(out_dir, 0o700)
        with atomic_open(paths[0]) as fh:
            fh.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        with atomic_open(paths[1]) as fh:
            fh.write(summary_markdown(data))
    except OSError as exc:
        raise OutputError(f"the probe's report could not be written ({exc.strerror or exc})", file=out_dir,
                          fix="give --out a folder you can write; the run's verdict is printed above") from None
    return paths


def summary_markdown(data: dict[str, Any]) -> str:
    """A short human summary of a probe report (the JSON form)."""
    e, p, cal = data["endpoint"], data["parameters"], data["calibration"]
    lines = [
        "# forensics probe", "",
        f"- endpoint: {e['base_url']} model {e['model']} (stream: {e['stream']})",
        (f"- advertised maximum input: {p['max_input_tokens']} tokens; levels {', '.join(f'{x:g}' for x in p['levels'])}; "
         f"pairs {p['pairs']}; seed {p['seed']}"),
        f"- calibration ({cal['source']}): {cal['bytes_per_token']} bytes per token, {cal['intercept_tokens']} fixed tokens",
        f"- budget: {data['budget']['spent_tokens']} of {p['max_total_tokens']} tokens spent",
        f"- verdict: **{data['verdict']}**", "",
    ]
    if data["findings"]:
        lines += ["## Findings", ""]
        for f in data["findings"]:
            lines.append(f"- {f['request']}: {_finding_text(f)}")
        lines.append("")
    if data["warnings"]:
        lines += ["## Warnings", ""] + [f"- {w}" for w in data["warnings"]] + [""]
    c = data["ceiling"]
    if c is not None:
        lines += ["## Ceiling", ""]
        if c["first_failing_tokens"] is None:
            lines.append(f"- answers correctly up to the advertised maximum (largest size tested: {c['ceiling_tokens']} tokens)")
        else:
            lines.append(f"- largest size answering correctly: {c['ceiling_tokens']} tokens; first failing: "
                         f"{c['first_failing_tokens']} ({c['requests']} requests)")
        if c["stopped"]:
            lines.append(f"- search stopped: {c['stopped']}")
        lines.append("")
    lines += ["Answers are not stored; probe.json holds each answer's size, SHA-256 and the markers found in it.", ""]
    return "\n".join(lines)


def api_key_from_env(name: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The API key from the environment variable ``name`` (None: send no key).

    The key is only ever read from the environment, so it never appears on a command line, in
    shell history or in the report (which records the variable's name only).
    """
    import os

    if name is None:
        return None
    value = (os.environ if environ is None else environ).get(name, "")
    if not value.strip():
        raise ProbeError(f"the environment variable {name} (named by --api-key-env) is not set or empty",
                         fix=f"export {name}=<your key> before running, or leave out --api-key-env")
    return value.strip()


def parse_levels(text: str) -> tuple[float, ...]:
    """``"0.5,0.9,0.99"`` as a sorted tuple of distinct fractions; ProbeError when malformed."""
    try:
        levels = tuple(sorted({float(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise ProbeError(f"--levels {text!r} is not a comma-separated list of numbers", fix="e.g. --levels 0.5,0.9,0.99") from None
    if not levels or any(not 0 < lv <= 1 for lv in levels):
        raise ProbeError(f"--levels {text!r} must be fractions of the advertised maximum in (0, 1]", fix="e.g. --levels 0.5,0.9,0.99")
    return levels
