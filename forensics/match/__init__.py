"""Match stage: which other customer's content is in each suspect response, where, how sure.

``match(case, config)`` reads ``CASE/suspects.parquet`` and ``CASE/exchanges.parquet`` and writes
``CASE/evidence.parquet`` (schema.EVIDENCE), ``CASE/evidence.csv`` and ``CASE/match.json``.

1. Targets: the suspect responses and a seeded random control sample of non-suspect responses.
   Every k-gram of every target is hashed into a small in-memory index (``index.py``).
2. One streaming pass over every record's prompt and response (``stream.py``, both cores:
   this process and the workers each read their own row ranges, no text passes between them):
   hash, probe, count which tenants held each target k-gram and when (the k-grams this process
   finds common are shared with the workers as it goes, so no process makes hits on them). The hits
   wait for the pass's end, beyond a bound on disk (``spill.py``); then, a part at a time, those that
   survive rarity and own context are verified with rapidfuzz on token slices (``align.py``),
   shared the same way, each task reading only its own source rows; results are gathered in
   row order, so the outputs are the same whatever the number of processes.
3. Rarity and own context, per finding: a matched k-gram in the suspect's own prompt explains
   itself, and for a cross-tenant source so does one the recipient's tenant already held when
   it sent the request (same-tenant overlap is kept, as relation ``same_tenant``); one held by
   more than ``max_tenants`` tenants when the response was produced is common text; the rest
   weigh 1 / (tenants holding it). Tiers follow ``tiers.py``.
4. The evidence model (``chance.py``, :func:`decide`): every candidate's strength in bits, its
   E-value from the case's own null (control responses against earlier texts, suspects against
   later ones: never written, they are chance matches), the decode-node evidence's factor, and the
   tier from their product; a likeness explained by a stronger source goes to review, and so does a copy
   the engine logs place where the suspect's stale pages cannot come from. Findings go to evidence.*,
   every other candidate to review.* with why. The candidates wait on disk while the workers verify, in
   groups of targets, and are read back a group at a time: most are copies of one customer's passage
   (a conversation resends it), dropped there, so that only the rest are held together.

Modules, one concern each: ``targets.py`` (step 1's targets and control sample), ``index.py``
(their k-gram index), ``stream.py`` (the per-batch scan and verification work a process does),
``pool.py`` (sharing the pass among this process and the workers, in row order, with a fallback
when workers fail), ``rarity.py`` (who held each k-gram when), ``spill.py`` (the pass's hits and the
candidate rows, held until they are read), ``verification.py`` (which hits to align, in tasks),
``findings.py`` (evidence, null, E-values, tiers: steps 3 and 4), ``chance.py`` and ``tiers.py`` (the
evidence model and the rules), and this module: the stage entry and match.json.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import rapidfuzz
import xxhash

from forensics import engine, schema
from forensics.artifacts import ControlRecord, DamageRecord, Finding, FindingCounts, MatchRecord, RequestKey, Searched
from forensics.case import Case, atomic_open, file_sha256, write_json, write_table
from forensics.config import CaseConfig
from forensics.match import tuning as tuning_defaults
from forensics.match.findings import (
    RegionScorer,
    csv_text,
    decide,
    engine_facts_beside,
    exchange_copies,
    own_copies_said,
    passages_text,
    record_facts,
    unserved_in_review,
)
from forensics.match.fingerprint import MATCH_TOKENS, SEED, kernels_loading_beside, unicode_version
from forensics.match.index import TargetIndex
from forensics.match.pool import helpers_running, run_pass, workers_to_start
from forensics.match.public import constants_sha256
from forensics.match.rarity import HolderCounts
from forensics.match.sources import SourceRows
from forensics.match.spill import HeldHits
from forensics.match.stream import Scanner
from forensics.match.targets import load_targets
from forensics.match.tiers import MatchParams, looser_confirm, params_from
from forensics.match.tuning import Tuning
from forensics.match.verification import verify_held
from forensics.memory import (
    fewer_collections,
    give_back_above,
    give_back_freed_memory,
    release_arrow_memory,
    reusing_freed_memory,
)
from forensics.progress import Reporter


@dataclasses.dataclass
class MatchResult:
    """What the match stage found and searched (``summary()`` is what the CLI prints)."""

    case: Path
    params: MatchParams
    findings: list[Finding]
    report: MatchRecord  # the content of match.json
    control_findings: list[Finding] = dataclasses.field(default_factory=list)  # never written
    #: Figures of this run that depend on how it ran (e.g. raw k-gram hits before each process
    #: retired common text): useful to tune, never written, as outputs must be byte-identical.
    run_stats: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: Candidates in review only as sent to a model no engine node served, per model (findings.unserved_in_review).
    unserved_models: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def cross_tenant(self) -> list[Finding]:
        """Findings that are cross-tenant exposure."""
        return [f for f in self.findings if f.cross_tenant]

    def summary(self) -> dict[str, Any]:
        """A JSON-ready summary: counts, control sample, and where the outputs are."""
        return {
            "case": str(self.case),
            "findings": self.report.findings.to_json(),
            "searched": self.report.searched.to_json(),
            "control": self.report.control.to_json(),
            "outputs": ["evidence.parquet", "evidence.csv", "review.parquet", "review.csv", "match.json"],
            "warnings": ([f"worker processes failed ({self.run_stats['workers_failed']}); this process did their "
                          "share, with the same results"] if self.run_stats.get("workers_failed") else [])
                        + ([f"{sum(self.unserved_models.values())} candidates are in review.csv only as sent to a model "
                            f"no engine node served: " + ", ".join(f"{m} ({n})" for m, n in self.unserved_models.items())
                            + "; if one of these names the case's model (an alias, another spelling), list it in the "
                              "case file's models and run again"] if self.unserved_models else [])
                        + [w for w in (own_copies_said(self.report.null),) if w]
                        + [w for w in (looser_confirm(params_from(dict(self.report.parameters))),) if w],
        }

def match(case: Path, config: CaseConfig, progress: Reporter | None = None,
          overrides: dict[str, Any] | None = None, tuning: Tuning | None = None) -> MatchResult:
    """Find other tenants' content in the case's suspect responses; write the evidence files.

    Parameters come from ``config.section("match")`` with ``overrides`` (CLI options) on top;
    ``tuning`` (default :data:`forensics.match.tuning.DEFAULT`) changes how it runs, never what it finds.
    Raises ForensicsError subclasses for a missing table or a bad parameter.
    """
    # In `forensics run` this process has just ingested and scanned: malloc and Arrow still hold what those
    # stages freed (37 MiB on the 1 GB benchmark incident), on top of which this stage reaches the run's peak.
    give_back_freed_memory()
    release_arrow_memory()
    with reusing_freed_memory(), fewer_collections():
        return _match(Case(case), params_from(config.section("match"), overrides, file=config.file), config,
                      progress, overrides, tuning or tuning_defaults.DEFAULT)


def _match(c: Case, p: MatchParams, config: CaseConfig, progress: Reporter | None,
           overrides: dict[str, Any] | None, tuning: Tuning) -> MatchResult:
    c.require("suspects", "scan")  # (each missing or damaged table named before anything reads it)
    path = c.require("exchanges", "ingest")
    with helpers_running(workers_to_start(path, p, tuning.inline_bytes), tuning.wait_for_workers) as helpers:
        # First (while the workers start): the engine's facts, and the compiled loops while the targets load.
        with kernels_loading_beside(), engine_facts_beside(c) as engine_facts_done:
            targets, info = load_targets(c, p)
            suspects_sha256 = file_sha256(c.table_path("suspects"))  # what the report checks it was given
            index = TargetIndex(targets, p.k)
            engine_seen = engine_facts_done()
        # The targets' text was read to be tokenized: from here on this process reads their tokens alone, as
        # the workers do (they never receive it). 15 MiB on the 4 GB benchmark incident, held to the stage's end.
        for t in targets:
            t.text = ""
        scanner = Scanner(index, p)
        # The k-grams this process knows are common, shared with the workers as it learns them (exact: see Scanner).
        shared = helpers.shared_mask(index.kgram_count)
        if shared is not None:
            scanner.known_common_file = shared[0]
        helpers.start(scanner)
        if not helpers.n:  # the workers could not be given the scanner: nobody to share with
            shared = None
        shared_now = np.zeros(index.kgram_count, dtype=np.bool_)  # what the file holds
        # Building the index freed as much as it keeps (the targets' text tokenized at once): 137 MiB on
        # the 4 GB benchmark incident that the pass, whose peak comes later, would only partly reuse.
        give_back_freed_memory()
        holders = HolderCounts(index, p, tuning.compact_entries)
        scanner.know_common(holders.common)
        n_hits = pending = 0
        sources = SourceRows()
        stats: dict[str, int] = {}
        with HeldHits(c.root, tuning.memory_hits) as hits:
            for res in run_pass(scanner, path, helpers, progress, tuning.task_bytes, engine.executor_for(config),
                                tuning.pass_in_flight):
                holders.add(res.holder_gid, res.holder_tenant, res.holder_time)
                hits.add(res.hits)
                n_hits += len(res.hits)
                pending += len(res.hits)
                sources.add(res.sources)
                for key, v in res.stats.items():
                    stats[key] = stats.get(key, 0) + v
                if pending > max(tuning.prune_hits, hits.count // 2):
                    # Hits on k-grams that are already common can never become evidence: drop them now.
                    holders.compact()
                    hits.drop_common(index, holders.common)
                    pending = 0
                    give_back_above()  # what the compaction's and the prune's arrays left behind
                hits.spill_above(index, holders.common)
                if shared is not None:
                    known = np.flatnonzero((holders.common | scanner.common) & ~shared_now)
                    if len(known):  # only these bytes are written: the rest of the file is left as it is
                        shared[1][known] = True
                        shared_now[known] = True
            shared = None  # (its file goes with the workers)
            held = holders.finish()
            scanner.end_pass()  # (its look-up and what it learnt: verification reads the targets alone)
            release_arrow_memory()  # the pass's Arrow buffers are not needed again
            give_back_freed_memory()  # and what its steps here left of the heap (363 MiB free on the 4 GB incident)
            stats["hits"] = n_hits
            # Each task's candidates are scored by the process that verified them; only the admissible
            # regions come back and are kept, not every candidate.
            scorer = RegionScorer(targets, held, p, sources.held_twice(), c.root, tuning.memory_rows,
                                  tuning.row_groups, sources)
            pass_jobs = helpers.jobs["workers"]
            try:
                vstats = verify_held(index, p, hits, held, sources, path, helpers, progress, scorer, tuning)
            except BaseException:
                scorer.close()  # (its file, at once: not when the traceback is let go)
                raise
    stats.update(vstats)
    candidates = scorer.take()
    del scorer  # its regions: the rows hold what the findings need
    try:
        # The candidates are read a group of targets at a time (most are copies of a passage, dropped as they are
        # read): first the few groups that may hold copies of an exchange, then all of them for the evidence model.
        survey = candidates.survey(targets)
        keys = survey.sources | {RequestKey(t.request_id, t.tenant_id) for t in targets if not t.control}
        facts = record_facts(path, keys, {RequestKey(t.request_id, t.tenant_id) for t in targets}, engine_seen,
                             tuple(config.models))
        del keys
        facts.aliases = {frozenset((tenant, other)): (tenant, field, other)
                         for tenant, field, other in c.read_manifest().get("tenant_aliases") or ()}
        facts.own_copies, facts.logged_twice, facts.tenant_records = exchange_copies(survey, targets, path, facts.node,
                                                                                    facts.aliases)
        del survey
        rows, null = decide(candidates.groups(), targets, p, facts, held)
    finally:
        candidates.close()
    evidence = [_finding(r) for r in rows if not r["control"] and r["tier"]]
    review = [_finding(r) for r in rows if not r["control"] and not r["tier"] and r["relation"] == "cross_tenant"]
    control_rows = [_finding(r) for r in rows if r["control"] and r["relation"] == "cross_tenant" and r["tier"]]
    n_control = sum(1 for t in targets if t.control)
    flagged = [k.request_id for k in sorted({f.recipient for f in control_rows}, key=RequestKey.sort_key)]
    cross = [f for f in evidence if f.cross_tenant]
    damaged = [f for f in evidence + review if f.recipient_damage or f.source_damage]
    report = MatchRecord(
        parameters=p.record(),
        parameter_sources={key: ("option" if (overrides or {}).get(key) is not None else config.section_source("match", key))
                           for key in p.record()},
        versions={"unicode": unicode_version(), "rapidfuzz": rapidfuzz.__version__, "xxhash": xxhash.VERSION,
                  "hash_seed": SEED, "tokens": MATCH_TOKENS, "public_constants": constants_sha256()},
        searched=Searched(
            suspects=info["suspects"],
            suspects_searched=sum(1 for t in targets if not t.control),
            suspects_missing_from_exchanges=tuple(info["suspects_missing_from_exchanges"]),
            suspects_with_empty_response=info["suspects_with_empty_response"],
            suspects_without_completed_at=info["suspects_without_completed_at"],
            target_kgrams=index.kgram_count,
            records=stats.get("records", 0),
            records_without_received_at=stats.get("records_without_time", 0),
            texts=stats.get("texts", 0),
            chars=stats.get("chars", 0),
            tokens=stats.get("tokens", 0),
            prompt_tokens=stats.get("prompt_tokens", 0),
            response_tokens=stats.get("response_tokens", 0),
            kgram_hits_kept_after_rarity_and_own_context=stats.get("informative_hits", 0),
            source_texts_verified=stats.get("texts_verified", 0),
            sources="every other record's prompt and every non-suspect response received before the "
                    "suspect response completed (completed_at, else received_at)",
            lookback=f"{p.lookback_minutes:g} minutes" if p.lookback_minutes else "off",
            same_decode_node=p.same_decode_node,
            suspects_sha256=suspects_sha256,
            public_constants_masked=index.public_constants_masked,
        ),
        findings=FindingCounts(
            total=len(evidence),
            cross_tenant=len(cross),
            same_tenant=len(evidence) - len(cross),
            cross_tenant_confirmed=sum(1 for f in cross if f.tier == "confirmed"),
            cross_tenant_probable=sum(1 for f in cross if f.tier == "probable"),
            suspects_with_cross_tenant_evidence=len({f.recipient for f in cross}),
            exposed_tenants=len({f.source_tenant_id for f in cross}),
            review=len(review),
            on_damaged_data=len(damaged),
        ),
        tiering=p.tiering,
        null=null,
        damage=DamageRecord(
            column_in_exchanges=facts.has_damage_column,
            findings_on_damaged_data=tuple(sorted(f.finding_id for f in damaged if f.tier)),
            review_on_damaged_data=tuple(sorted(f.finding_id for f in damaged if not f.tier)),
        ),
        control=ControlRecord(
            requested=p.control_size,
            size=n_control,
            sample="non-suspect responses with text, length-matched to the suspects (places shared among "
                   "log2-of-bytes classes as the suspects are), in each class the smallest xxh64(request_id, "
                   "seed), ties by tenant",
            length_classes={"suspects": info["suspect_length_classes"], "control": info["control_length_classes"]},
            findings=len(control_rows),
            responses_with_findings=len(flagged),
            request_ids_with_findings=tuple(flagged),
            false_positive_rate=round(len(flagged) / n_control, 6) if n_control else None,
        ),
    )
    for name, part, table_schema in (("evidence", evidence, schema.EVIDENCE), ("review", review, schema.REVIEW)):
        part_rows = [f.to_row() for f in part]  # every column of both files: the table takes its schema's
        write_table(c.table_path(name), pa.Table.from_pylist(part_rows, schema=table_schema), table_schema)
        with atomic_open(c.root / f"{name}.csv", newline="") as fh:
            fh.write(csv_text(part_rows, schema.REVIEW_CSV if name == "review" else schema.EVIDENCE_CSV))
    write_json(c.root / "match.json", report.to_json())
    return MatchResult(case=c.root, params=p, findings=evidence, report=report, control_findings=control_rows,
                       unserved_models=unserved_in_review(rows),
                       run_stats={"kgram_hits": stats.get("hits", 0), "jobs_here": helpers.jobs["here"],
                                  "jobs_on_workers": helpers.jobs["workers"],
                                  "verification_jobs_on_workers": helpers.jobs["workers"] - pass_jobs,
                                  "workers_failed": helpers.failed})


def _finding(row: dict[str, Any]) -> Finding:
    """The finding of a decided candidate row (its passages shown as text): only the rows that become
    findings are converted, not every candidate pair."""
    row["passages"] = passages_text(row["passages"])
    return Finding.from_row(row)


__all__ = ["MatchParams", "MatchResult", "Tuning", "match", "params_from"]
