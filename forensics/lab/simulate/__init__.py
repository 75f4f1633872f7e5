"""Incident simulator: realistic gateway and engine logs of a KV-pool leak, with the known answer.

``simulate(out, seed=..., scale=..., fmt=..., engine_fmt=..., corpus=...)`` writes into ``out``::

    case.toml             the case file (spec/case-file.md); inputs point at the folders below
    gateway/              litellm-callbacks-DAY.jsonl[.gz|.zst] (+ spend-logs-DAY.jsonl for some
                          days, overlapping the callbacks), or requests-/responses-DAY.jsonl, or
                          helicone-DAY.jsonl, or langfuse-observations-DAY.jsonl (one writer per format, forensics.lab.simulate.writers)
    engine/               {hostname}_0.log per prefill and decode node (SGLang JSON + text lines,
                          or vLLM RequestLogger lines with ``engine_fmt="vllm"``)
    truth.json            what really happened (schema below)
    README.md             how the folder was made and the command that regenerates it

Same seed, scale, formats, corpus and Faker version: byte-identical files. The formats only
change how the same incident is written: every format of one seed holds the same requests. Scales: ``small``
(scaled-down pool), ``medium`` and ``large`` (the real pool), ``realistic`` (scaled-down pool, 220
tenants, some 15,000 requests of real text with shared templates and popular passages; needs
``corpus``).

truth.json (``"schema": "forensics-sim-truth/1"``), every list sorted, every time UTC ``Z``:

* ``generator``: forensics and Faker versions, seed, scale, format, corpus folder name, command;
  ``engine_format`` when it is not ``sglang``.
* ``case``: name, model (the affected one), all models, window_start/window_end, real_ceiling_tokens,
  advertised_window_tokens, timezone, tenant_field -- the values written to case.toml.
* ``tenants``: tenant_id, name, document kinds, whether its system prompt is a shared template.
* ``suspects``: one per response generated from stale pages: request_id, tenant_id, model,
  received_at, completed_at, prompt_tokens (the real count), reported_prompt_tokens (1: the
  placeholder), length_class (big | near_above), reasons, prefill_node, decode_node,
  bootstrap_room, slot, outcome (leak | two_sources | no_fragment | empty_slot) and fragment_ids.
* ``fragments``: each passage of stale content woven into a suspect response: fragment_id,
  recipient_request_id/tenant_id, recipient_start/end (character offsets into the response text),
  source_request_id/tenant_id, source_kind (prompt | response | shared), source_start/end
  (offsets into the source's canonical prompt text -- ``forensics.schema.render_messages`` -- or
  response text), tokens, chars, damage (kinds: whitespace, case, punctuation, substitute,
  delete, truncate), damage_fraction (share of words touched), label (leak | self_tenant |
  shared_boilerplate) and is_leak (only ``leak`` is a cross-tenant exposure).
* ``hard_negatives``: traps, by kind: ``shared_boilerplate`` (a suspect quotes text that at least
  ``COMMON_TENANTS`` (3) tenants other than the recipient sent before it), ``self_tenant`` (stale pages of the recipient's own earlier request),
  ``later_prompt_only`` (a suspect response passage that only a *later* prompt of another tenant
  contains: recipient and later request, offsets in both), ``own_prompt_quote`` (an ordinary
  response quoting its own prompt: request_id, response and prompt offsets).
* ``scan_negatives``: prompts above (or just below) the ceiling that are not suspects:
  ``over_ceiling_outside_window`` (rejected by the engine), ``over_ceiling_other_model``,
  ``near_ceiling_below``.
* ``engine_anomalies``: other engine signatures (context corruption) on ordinary requests; they
  are neither suspects nor false positives (evaluate reports them apart).
* ``exposed`` / ``recipients``: sorted tenant ids (sources of leak fragments / owners of suspects),
  and ``exposed_requests``: the source request ids of leak fragments.
* ``quarantine``: ``expected`` count and ``lines`` (file, line, reason) of deliberately bad lines;
  ``blank_lines``; ``spend_log_rows`` (all of them duplicate a callback record); ``orphans`` (split
  logs: ``request_only``, never answered, and ``response_only``, request line rotated away; by kind
  and request_id).
* ``files``: path, bytes, lines and SHA-256 of every log file written; ``counts``.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path
from typing import Any

from forensics.lab import lab_extra_missing

try:
    import faker
except ImportError as exc:  # the lab extra is optional: say how to install it, not a traceback
    raise lab_extra_missing("faker", "forensics simulate") from exc

from forensics import __version__
from forensics.case import make_private_dirs
from forensics.errors import ConfigError, InputError
from forensics.lab.simulate import text as tx
from forensics.lab.simulate.mechanism import AFFECTED_MODEL, MODELS, SCALES, Simulation, iso_z
from forensics.lab.simulate.writers import (
    ENGINE_WRITERS,
    GATEWAY_WRITERS,
    EngineWriter,
    GatewayWriter,
    Outputs,
    day_of,
    engine_writer,
    gateway_writer,
)
from forensics.progress import Reporter, reporter
from forensics.report import safe

#: Gateway and engine formats the simulator writes (one writer class each in forensics.lab.simulate.writers).
FORMATS = tuple(GATEWAY_WRITERS)
ENGINE_FORMATS = tuple(ENGINE_WRITERS)
DEFAULT_ENGINE_FORMAT = "sglang"
TRUTH_SCHEMA = "forensics-sim-truth/1"


@dataclasses.dataclass
class SimulateResult:
    """What a simulation wrote."""

    out: Path
    files: list[dict[str, Any]]
    counts: dict[str, int]
    truth: Path
    case_file: Path

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary for the CLI."""
        return {
            "out": str(self.out),
            "case_file": str(self.case_file),
            "truth": str(self.truth),
            "files": self.files,
            "bytes": sum(f["bytes"] for f in self.files),
            "counts": self.counts,
        }


def command_line(seed: int, scale: str, fmt: str, corpus: Path | None, out: str, engine_fmt: str = DEFAULT_ENGINE_FORMAT,
                 corpus_part: tuple[int, int] | None = None) -> str:
    """The CLI command that regenerates a run (recorded in README.md and truth.json)."""
    cmd = f"forensics simulate --out {out} --seed {seed} --scale {scale} --format {fmt}"
    if engine_fmt != DEFAULT_ENGINE_FORMAT:
        cmd += f" --engine-format {engine_fmt}"
    if corpus is not None:
        cmd += f" --corpus {corpus.name}"
    if corpus_part is not None:
        cmd += f" --corpus-part {corpus_part_text(corpus_part)}"
    return cmd + " --force"


def corpus_part_text(part: tuple[int, int]) -> str:
    """(part, parts) from 0 as the ``K/N`` :func:`parse_corpus_part` reads."""
    return f"{part[0] + 1}/{part[1]}"


def parse_corpus_part(text: str) -> tuple[int, int]:
    """``K/N`` (part K of N, from 1) as the simulator's (part, parts) from 0; a ConfigError saying what to give."""
    k, sep, n = (x.strip() for x in text.strip().partition("/"))
    # (decimal digits only, and few: "²" is a digit int() refuses, and a 5,000-digit number is one it will not read)
    if not sep or not all(x.isdecimal() and len(x) <= 6 for x in (k, n)) or not 1 <= int(k) <= int(n):
        raise ConfigError(f"corpus part {text[:40]!r} is not K/N with 1 <= K <= N (at most six digits each)",
                          fix="give --corpus-part as K/N, for example 2/6 for the second of six incidents to merge")
    return int(k) - 1, int(n)


def simulate(
    out: Path,
    seed: int = 7,
    scale: str = "small",
    fmt: str = "litellm",
    corpus: Path | None = None,
    force: bool = False,
    progress: Reporter | None = None,
    compress: bool = True,
    engine_fmt: str = DEFAULT_ENGINE_FORMAT,
    corpus_part: tuple[int, int] | None = None,
) -> SimulateResult:
    """Simulate one incident into ``out`` (see the module docstring for what is written).

    ``fmt`` is the gateway format, ``engine_fmt`` the engine's (``sglang`` or ``vllm``): the
    same seed gives the same incident in each. ``compress=False`` writes every gateway file plain
    (benchmarks measure generation, not gzip). ``corpus_part`` (part, parts), from 0: the tenants
    own only that share of the corpus's documents, so that incidents of different parts, merged
    into one bigger incident (``benchmarks/run.py``), share no private text; every part has the
    same public text (the article, popular passages, garbage sentences). None: all of it.
    """
    if scale not in SCALES:
        raise ConfigError(f"unknown scale {scale!r}", fix=f"use one of {', '.join(SCALES)}")
    if corpus_part is not None and not 0 <= corpus_part[0] < corpus_part[1]:
        raise ConfigError(f"corpus part {corpus_part[0] + 1} of {corpus_part[1]} does not exist",
                          fix="give a part from 1 to the number of parts")
    if corpus_part is not None and corpus is None:
        raise ConfigError("a corpus part needs a corpus", fix="add --corpus, or leave --corpus-part out")
    writer = gateway_writer(fmt)  # an unknown format is an error before anything is written
    engine_cls = engine_writer(engine_fmt)
    if SCALES[scale].realistic and corpus is None:
        raise ConfigError(f"scale {scale!r} draws its prompts and answers from real text and needs a corpus",
                          fix="add --corpus with a folder of .json/.jsonl/.txt text (the team's is ../shared/corpora)")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError("output path exists and is not a folder", file=out, fix="give --out a folder")
    if out.is_dir() and any(out.iterdir()):
        if not force:
            raise InputError("output folder is not empty", file=out, fix="choose an empty folder or add --force to replace a simulation")
        if not (out / "truth.json").is_file():
            raise InputError("refusing to clear a folder that holds no simulation (no truth.json)", file=out,
                             fix="choose an empty folder")
        for name in ("gateway", "engine"):
            shutil.rmtree(out / name, ignore_errors=True)
        for name in ("case.toml", "truth.json", "README.md"):
            (out / name).unlink(missing_ok=True)
    make_private_dirs(out)
    corpus_data = tx.load_corpus(corpus) if corpus is not None else None
    spec = SCALES[scale]
    sim = Simulation(seed, spec, corpus_data, corpus_part)

    days = []
    t = sim.t0
    while t < sim.t1:
        days.append(day_of(t))
        t += 86400
    # One plain day to read with a pager; the others compressed, as rotated logs usually are.
    compression = {d: "" if k == spec.days_before or not compress else (".gz", ".zst")[k % 2] for k, d in enumerate(days)}
    spend_days = {days[spec.days_before - 1], days[spec.days_before + 1]}
    rng = random.Random(f"{seed}:defects")
    broken: dict[int, str] = {}
    for defect, n in (("partial", 3), ("bad_time", 1), ("blank", 2)):
        for _ in range(n):
            broken[rng.randrange(10, int(spec.requests * 0.8))] = defect

    outputs = Outputs(out)
    gateway = writer(outputs, seed, compression, spend_days, broken)
    engine = engine_cls(outputs)
    task = reporter(progress).task(f"simulate {scale}", total=spec.requests)

    def tick(now: float) -> None:
        gateway.tick(now)
        engine.tick(now)
        task.advance(1)

    sim.run(gateway.exchange, engine.line, tick)
    task.close()
    files = outputs.close_all()

    case_name = f"sim-{scale}-seed{seed}"
    case_values = {
        "name": case_name,
        "model": AFFECTED_MODEL,
        "models_all": [m for m, _, _ in MODELS],
        "window_start": iso_z(sim.window_start).replace(".000000Z", "Z"),
        "window_end": iso_z(sim.window_end).replace(".000000Z", "Z"),
        "real_ceiling_tokens": spec.ceiling,
        "advertised_window_tokens": spec.advertised,
        "timezone": "UTC",
        "tenant_field": "auto",
    }
    cmd = command_line(seed, scale, fmt, corpus, out.name, engine_fmt, corpus_part)
    case_file = out / "case.toml"
    safe.write_text(case_file, _case_toml(case_values, fmt, cmd, engine_fmt))
    truth = _truth(sim, spec.name, seed, fmt, corpus, cmd, case_values, gateway, files)
    if engine_fmt != DEFAULT_ENGINE_FORMAT:  # absent for the default, so earlier simulations keep their bytes
        truth["generator"]["engine_format"] = engine_fmt
    if corpus_part is not None:  # likewise
        truth["generator"]["corpus_part"] = corpus_part_text(corpus_part)
    truth_path = out / "truth.json"
    safe.write_text(truth_path, json.dumps(truth, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    safe.write_text(out / "README.md", _readme(cmd, truth, writer, engine_cls))
    return SimulateResult(out, files, truth["counts"], truth_path, case_file)


def _case_toml(v: dict[str, Any], fmt: str, cmd: str, engine_fmt: str) -> str:
    return (
        f"# Generated by the forensics simulator: {cmd}\n"
        f"name = \"{v['name']}\"\n"
        f"model = \"{v['model']}\"\n"
        f"window_start = \"{v['window_start']}\"\n"
        f"window_end = \"{v['window_end']}\"\n"
        f"real_ceiling_tokens = {v['real_ceiling_tokens']}          # max_total_num_tokens in the engine startup lines\n"
        f"advertised_window_tokens = {v['advertised_window_tokens']}    # context_len in the engine startup lines\n"
        f"tenant_field = \"{v['tenant_field']}\"\n"
        f"timezone = \"{v['timezone']}\"\n"
        f"description = \"Simulated KV-pool placeholder incident (ground truth in truth.json).\"\n"
        "\n[[inputs]]\n"
        f"format = \"{fmt}\"\n"
        "path = \"gateway\"\n"
        "\n[[inputs]]\n"
        f"format = \"{engine_fmt}\"\n"
        "path = \"engine\"\n"
    )


def _truth(sim: Simulation, scale: str, seed: int, fmt: str, corpus: Path | None, cmd: str, case: dict[str, Any],
           gateway: GatewayWriter, files: list[dict[str, Any]]) -> dict[str, Any]:
    t = sim.truth
    leaks = [f for f in t["fragments"] if f["is_leak"]]
    counts = dict(sorted(sim.counts.items()))
    counts.update(
        fragments=len(t["fragments"]),
        leak_fragments=len(leaks),
        finding_pairs=len({(f["recipient_request_id"], f["source_tenant_id"]) for f in leaks}),
        hard_negatives=len(t["hard_negatives"]),
        scan_negatives=len(t["scan_negatives"]),
        tenants=len(sim.tenants),
        files=len(files),
        bytes=sum(f["bytes"] for f in files),
    )
    return {
        "schema": TRUTH_SCHEMA,
        "generator": {
            "forensics_version": __version__,
            "faker_version": faker.VERSION,
            "faker_locale": tx.LOCALE,
            "seed": seed,
            "scale": scale,
            "format": fmt,
            "corpus": corpus.name if corpus is not None else None,
            "command": cmd,
        },
        "case": case,
        "tenants": sorted(({"tenant_id": tn.tenant_id, "name": tn.name, "kinds": list(tn.kinds), "shared_system_prompt": tn.system_shared}
                           for tn in sim.tenants), key=lambda d: d["tenant_id"]),
        "suspects": sorted(t["suspects"], key=lambda d: (d["received_at"], d["request_id"])),
        "fragments": t["fragments"],
        "hard_negatives": sorted(t["hard_negatives"], key=lambda d: (d["kind"], json.dumps(d, sort_keys=True))),
        "scan_negatives": sorted(t["scan_negatives"], key=lambda d: (d["received_at"], d["request_id"])),
        "engine_anomalies": t["engine_anomalies"],
        "exposed": sorted({f["source_tenant_id"] for f in leaks}),
        "exposed_requests": sorted({f["source_request_id"] for f in leaks}),
        "recipients": sorted({s["tenant_id"] for s in t["suspects"]}),
        "quarantine": {"expected": len(gateway.quarantine), "lines": sorted(gateway.quarantine, key=lambda d: (d["file"], d["line"]))},
        "blank_lines": gateway.blank,
        "spend_log_rows": gateway.spend_rows,
        "orphans": sorted(gateway.orphans, key=lambda d: (d["kind"], d["request_id"])),
        "files": files,
        "counts": counts,
    }


def _readme(cmd: str, truth: dict[str, Any], gateway: type[GatewayWriter], engine: type[EngineWriter]) -> str:
    c, g = truth["counts"], truth["generator"]
    case = truth["case"]
    return (
        "# Simulated incident logs\n\n"
        "Generated by the forensics simulator; nothing here is real customer data (names, companies,\n"
        "addresses, IBANs and keys are Faker output or visibly simulated).\n\n"
        "Regenerate byte-identically (from the folder that holds this one; Faker "
        f"{g['faker_version']}):\n\n"
        f"```\n{cmd}\n```\n\n"
        f"- model `{case['model']}`, window {case['window_start']} .. {case['window_end']}, real ceiling "
        f"{case['real_ceiling_tokens']} tokens, advertised window {case['advertised_window_tokens']} (a scaled-down pool)\n"
        f"- {c['requests']} requests from {c['tenants']} tenants; {c['suspects']} suspect responses; "
        f"{c['leak_fragments']} leaked fragments in {c['finding_pairs']} (recipient, source tenant) pairs; "
        f"{c['hard_negatives']} labelled hard negatives\n"
        f"- `case.toml` is the case file; `truth.json` the ground truth (schema in `forensics/lab/simulate/__init__.py`);\n"
        + f"  `gateway/` {gateway.describes};\n"
        + f"  `engine/` {engine.describes}.\n\n"
        "Score a report against the truth: `forensics evaluate --truth truth.json --report REPORT_DIR`.\n"
    )
