"""From verified candidates to findings: each pair's evidence (strength, informative tokens,
passages), the decode-node facts, the null model and E-values, the tiers, and the CSV text."""


import array
import bisect
import contextlib
import dataclasses
import functools
import itertools
import math
import operator
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from forensics import csvfile
from forensics.artifacts import customer_key, model_key
from forensics.case import Case, row_group_batches
from forensics.errors import first_few, safe_id
from forensics.logged_twice import SAME_EXCHANGE_US, LoggedRow, logged_rows, same_exchange
from forensics.match import chance, recent
from forensics.match.fingerprint import SEED
from forensics.match.index import NO_TIME, Target, pack_token_hashes
from forensics.match.order import lexsort_ints
from forensics.match.rarity import Holders, holder_entries
from forensics.match.sources import SourceRows
from forensics.match.spill import HeldRows
from forensics.match.stream import (
    NO_TIME_MAX,
    Candidate,
    same_customer,
    search_start,
    tenant_code,
)
from forensics.match.targets import request_key
from forensics.match.tiers import MatchParams, admissible, assign_tier, evalue_tier, text_stands

_TIER_RANK = {"confirmed": 0, "probable": 1}


class Region(NamedTuple):
    """One admissible region of a candidate pair: its evidence and what the pair's row takes from
    its candidate. A tuple, not the candidate and a dict: the scorer holds every region of the
    stage until the rows are built (47,842 on the 256 MB bench incident, about 1 KB each as a
    dict and a candidate)."""

    strength: float
    score: float
    recipient_start: int
    recipient_end: int
    source_start: int
    source_end: int
    relation: str
    rarity: float
    singles_out: float
    informative: int
    rule: tuple[str, str] | None
    rule_null: tuple[str, str] | None
    source_request_id: str
    source_tenant_id: str | None
    source_kind: str
    matched: int
    longest_run: int
    source_received_us: int
    source_row: int = -1  # the source's row of exchanges.parquet (-1: not read from it)
    # The target's token span: where a worker's region lies in the text (a worker's targets have no character
    # offsets, and its regions' recipient_start/end are -1 until collected).
    tok_start: int = -1
    tok_end: int = -1


class Row(Protocol):
    """A candidate pair's row: a dict, or a :class:`CandidateRow` (read and set alike)."""

    def __getitem__(self, name: str, /) -> Any: ...

    def __setitem__(self, name: str, value: Any, /) -> None: ...


R = TypeVar("R", bound=Row)


@dataclasses.dataclass(slots=True, eq=False, repr=False)
class CandidateRow:
    """A candidate pair's row as :class:`RegionScorer` builds it, until the evidence model has dropped the
    copies of each passage (:func:`decide`): read and set as a dict's items (``row["score"]``).

    Not a dict: a third of its size (the evidence model reads a group of targets' rows at once, see
    :class:`CandidateRows`), and 1 in 10 is kept, as a dict (:meth:`as_dict`) the evidence model adds to. A field
    not yet set is an error, not None. Its ``finding_id`` comes only then (:func:`finding_id`).
    """

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
    _singles_out: float
    informative_tokens: int
    regions: int
    strength_bits: float
    _main_bits: float
    passages: list[tuple[int, int, int, int]]
    control: bool
    _target: int
    _source_received_us: int
    _rule: tuple[str, str] | None
    _later: bool
    _null_rules: tuple[str, ...]
    # What the evidence model sets before it drops the copies (decide).
    _copy_of: str | None = dataclasses.field(init=False)
    source_decode_node: str | None = dataclasses.field(init=False)
    same_decode_node: bool | None = dataclasses.field(init=False)
    _unserved: frozenset[str] = dataclasses.field(init=False)
    _ruled_out: str | None = dataclasses.field(init=False)
    other_source_requests: int = dataclasses.field(init=False)
    # Set as it is read back (CandidateRows.groups): its place in the order the pairs were found.
    _found: int = dataclasses.field(init=False)

    # The attribute look-up itself (C code), not a method calling it: rows are read millions of times.
    __getitem__ = object.__getattribute__
    __setitem__ = object.__setattr__

    def as_dict(self) -> dict[str, Any]:
        """The fields set, as a dict."""
        out = {}
        for name in ALL_ROW_FIELDS:
            try:
                out[name] = object.__getattribute__(self, name)
            except AttributeError:
                continue
        return out


#: The fields a :class:`CandidateRow` is built with, in order; all its fields.
ROW_FIELDS = tuple(f.name for f in dataclasses.fields(CandidateRow) if f.init)
ALL_ROW_FIELDS = tuple(f.name for f in dataclasses.fields(CandidateRow))
_row_values = operator.attrgetter(*ROW_FIELDS)


#: A candidate pair's key: (target, source request id, source tenant, source kind, later text).
PairKey = tuple[int, str, str | None, str, bool]
#: The hash :class:`RegionScorer` tells keys found twice by (a test may give every key one hash).
_key_hash = hash


class RegionScorer:
    """:func:`score_candidates` a batch of candidates at a time (in the order they were found).

    Two halves, so that the scoring runs where the candidates were verified: :meth:`score` turns a
    batch into its admissible regions (the same in any process holding the same targets, holders
    and parameters: a worker scores the candidates it found and sends back only the regions, not
    every candidate with its k-gram positions), and :meth:`collect` keeps them, in the order found,
    per pair. The match stage collects every verification task's regions in task order.

    A pair's row is built as soon as the batch that holds its regions is collected, not all at the end:
    the match stage collects while the workers still verify, so this work no longer waits in one
    process after them. A pair whose regions come in several batches (two records with one key, which
    the ingest's one row per request rules out) is built again when :meth:`take` hands the rows over. The
    rows built wait in memory up to ``memory_rows``, then in an anonymous file in ``folder`` (see
    :class:`forensics.match.spill.HeldRows`), until :meth:`take` (or :meth:`close`).
    """

    def __init__(self, targets: list[Target], holders: Holders, p: MatchParams,
                 sources_held_twice: set[tuple[str, str | None]] | None = None, folder: Path | None = None,
                 memory_rows: int = 20_000, groups: int = 1, source_rows: SourceRows | None = None) -> None:
        self.targets, self.holders, self.p = targets, holders, p
        self.vocab, self.df = chance.token_weights([t.tokens.hash for t in targets])
        # Per target, how many other targets hold each token, and the bits that makes (the same float64s as a
        # per-token array of bits, at a quarter of its memory).
        self.others: dict[int, np.ndarray] = {}
        self.bits_by_others = chance.bits_by_others(len(targets))
        self.hashes, self.hash_offset = pack_token_hashes(targets)
        # The regions are kept past their batch only for a pair that can be found again: one whose source
        # (request id, tenant) more than one record holds (None: every pair's). On the 4 GB benchmark incident
        # every pair's regions held 1.03M regions in the match stage's process (about 400 MiB) to its end.
        self.sources_held_twice = sources_held_twice
        self.per_pair: dict[PairKey, list[Region]] = {}
        # Each pair's key and row, in the order found, in ``groups`` groups of targets: beyond memory_rows in a file in
        # ``folder``, as the workers still verify (None: all in memory).
        self._rows = HeldRows(folder, memory_rows, groups)
        # The hash of each key whose regions are not kept: a key found twice is told from two keys of one hash
        # when the rows are read back (a key kept would cost 20 times the memory).
        self._hashes = array.array("q")
        self._stale: set[PairKey] = set()
        self._found = 0  # rows built so far: each row's place in the order found
        self._same: dict[Any, Any] = {}
        # What the first read of the rows needs (see _note). The pairs' sources by their row of exchanges.parquet
        # where ``source_rows`` names it (8 bytes a pair; named by :meth:`take`), else by (request id, tenant): a set
        # of those took 23 MiB of the match stage's process while the workers verified the 4 GB benchmark incident.
        self.source_rows = source_rows
        self.sources: set[tuple[str, str | None]] = set()
        self._source_row = array.array("q")
        self.source_tenants: set[str] = set()
        self._survey_groups: set[int] = set()
        self._customers: dict[Any, int] = {}
        self._copy_hash, self._copy_customer = array.array("q"), array.array("i")
        self._copy_time, self._copy_group = array.array("q"), array.array("i")

    def add(self, cands: list[Candidate]) -> None:
        """Score the regions ``cands`` and keep them (after every earlier batch)."""
        self.collect(self.score(cands))

    def collect(self, scored: list[tuple[PairKey, Region]]) -> None:
        """Keep the regions :meth:`score` gave for a batch (after every earlier batch's) and build the rows
        of the pairs first found in it."""
        per_pair, held, twice, targets = self.per_pair, self._rows, self.sources_held_twice, self.targets
        batch: dict[PairKey, list[Region]] = {}
        for key, region in scored:
            if region.recipient_start < 0:  # a worker's: placed here, where the targets' tokens have their offsets
                tokens = targets[key[0]].tokens
                region = region._replace(recipient_start=int(tokens.start[region.tok_start]),
                                         recipient_end=int(tokens.end[region.tok_end - 1]))
            regs = batch.get(key)
            if regs is None:
                batch[key] = [region]
            else:
                regs.append(region)
        for key, regs in batch.items():
            group = key[0] % held.groups
            if twice is None or (key[1], key[2]) in twice:
                if key in per_pair:
                    per_pair[key].extend(regs)
                    self._stale.add(key)
                    self._survey_groups.add(group)  # (its row, built again, may be another's copy)
                    continue
                per_pair[key] = regs
            else:
                self._hashes.append(_key_hash(key))
            row = self._row(key, regs)
            self._note(key, row, group, regs[0].source_row)
            held.add(group, (key, self._found, _row_values(row)))  # (a tuple pickles in half the time)
            self._found += 1

    def _note(self, key: PairKey, row: CandidateRow, group: int, source_row: int = -1) -> None:
        """Note what the first read of the rows (:meth:`CandidateRows.survey`) needs of a new row: its source and
        tenant, and whether its group of targets may hold a copy of an exchange (:func:`_own_copy_candidates`,
        :func:`_source_copy_groups`): only those groups are read for them."""
        if source_row >= 0 and self.source_rows is not None:
            self._source_row.append(source_row)
        else:
            self.sources.add((key[1], key[2]))
        if key[2] is not None:
            self.source_tenants.add(str(key[2]))
        if row.relation != "cross_tenant" or row._source_received_us == NO_TIME:
            return
        tgt = self.targets[key[0]]
        if (row.source_kind == "response" and tgt.received_us != NO_TIME
                and abs(tgt.received_us - row._source_received_us) <= SAME_EXCHANGE_US):
            self._survey_groups.add(group)
        # Rows of one copy group share this hash (two keys of one hash only add a group to read); a customer is a
        # number (4 bytes a row, as the group's).
        self._copy_hash.append(hash((key[0], row.source_kind, tuple(x[:2] for x in row.passages))))
        customer = customer_key(key[2])
        number = self._customers.get(customer)
        if number is None:
            number = self._customers[customer] = len(self._customers)
        self._copy_customer.append(number)
        self._copy_time.append(row._source_received_us)
        self._copy_group.append(group)

    def score(self, cands: list[Candidate]) -> list[tuple[PairKey, Region]]:
        """The admissible regions of ``cands``, each with its pair's key, in candidate order."""
        targets, p, others, bits = self.targets, self.p, self.others, self.bits_by_others
        vocab, df = self.vocab, self.df
        if not cands:
            return []
        blocks = _block_arrays(cands)
        positions, informative_all, weight_all, bounds = _kgram_facts(cands, targets, self.holders, p,
                                                                      _matched_kgrams(*blocks, p.k))
        facts = _region_facts(cands, self.hashes, self.hash_offset, positions, informative_all, weight_all, bounds, p.k,
                              blocks)
        scored: list[tuple[PairKey, Region]] = []
        # The per-candidate figures as Python numbers once (the same values): reading numpy scalars one by
        # one cost more than the loop's own work.
        informative_tokens, distinct_tokens = facts.informative_tokens.tolist(), facts.distinct.tolist()
        rarities, singles, offset = facts.rarity.tolist(), facts.singles_out.tolist(), facts.offset.tolist()
        add = np.add.reduce  # what ndarray.sum runs (the same sum), without its Python wrapper
        for i in np.flatnonzero(facts.any_informative).tolist():
            c = cands[i]
            info_tokens, distinct = informative_tokens[i], distinct_tokens[i]
            if not admissible(c.score, info_tokens, distinct, p):
                continue
            tgt = targets[c.target]
            relation = "same_tenant" if same_customer(c.source_tenant_id, tgt.tenant_id) else "cross_tenant"
            rarity, singles_out = rarities[i], singles[i]
            matched = facts.matched[offset[i] : offset[i + 1]]
            if c.target not in others:
                others[c.target] = chance.others_holding(tgt.tokens.hash, vocab, df, len(targets))
            strength = float(add(bits[others[c.target][c.tok_start : c.tok_end][matched]]))
            rule = assign_tier(c.score, info_tokens, rarity, c.longest_run, tgt.engine_signature, p, distinct)
            # The old fixed rules, run on the null as on an engine-signature suspect (match.json compares them).
            rule_null = (assign_tier(c.score, info_tokens, rarity, c.longest_run, True, p, distinct)
                         if tgt.control else None)
            scored.append(((c.target, c.source_request_id, c.source_tenant_id, c.source_kind, c.later),
                           Region(strength, c.score, c.recipient_start, c.recipient_end, c.source_start, c.source_end,
                                  relation, rarity, singles_out, info_tokens, rule, rule_null, c.source_request_id,
                                  c.source_tenant_id, c.source_kind, c.matched, c.longest_run, c.source_received_us,
                                  c.source_row, c.tok_start, c.tok_end)))
        return scored

    def rows(self) -> list[CandidateRow]:
        """One row per candidate pair with an admissible region (see :func:`score_candidates`), in the
        order the pairs were first found (with one group of targets; else group by group). The rows are
        handed over, not copied: call it once, after the last batch."""
        held = self.take()
        try:
            return [row for group in held.groups() for row in group]
        finally:
            held.close()

    def take(self) -> "CandidateRows":
        """Every candidate pair's row, handed over (call it once, after the last batch): read back a group of
        targets at a time, as often as needed, until it is closed."""
        hashes = np.frombuffer(self._hashes, dtype=np.int64)
        values, counts = np.unique(hashes, return_counts=True)
        shared = set(values[counts > 1].tolist())  # (almost always none)
        # A pair found in several batches: its row from all its regions.
        rebuilt = {key: self._row(key, self.per_pair[key]) for key in self._stale}
        survey_groups = self._survey_groups | self._copy_groups()
        sources = self.sources
        if self.source_rows is not None:
            for r in np.unique(np.frombuffer(self._source_row, np.int64)).tolist():
                request_id, tenant, _ = self.source_rows[r]
                sources.add((request_id, tenant))
        out = CandidateRows(self._rows, rebuilt, shared, sources, self.source_tenants, survey_groups)
        self._rows, self._hashes, self._stale, self.per_pair = HeldRows(None, 1), array.array("q"), set(), {}
        self.sources, self.source_tenants, self._survey_groups = set(), set(), set()
        self._source_row, self._customers = array.array("q"), {}
        self._copy_hash, self._copy_customer = array.array("q"), array.array("i")
        self._copy_time, self._copy_group = array.array("q"), array.array("i")
        return out

    def close(self) -> None:
        """Drop the rows held (and their file) without handing them over: the stage stopped before :meth:`take`."""
        self._rows.close()

    def _copy_groups(self) -> set[int]:
        """The groups of targets holding rows that may form a copy group (:func:`_source_copy_groups`): rows of one
        hash (_note) from two customers or more, two of them received within SAME_EXCHANGE_US."""
        h, customer = np.frombuffer(self._copy_hash, np.int64), np.frombuffer(self._copy_customer, np.int32)
        t, group = np.frombuffer(self._copy_time, np.int64), np.frombuffer(self._copy_group, np.int32)
        by_time = np.lexsort((t, h))
        hs, ts = h[by_time], t[by_time]
        close = hs[1:][(hs[1:] == hs[:-1]) & (ts[1:] - ts[:-1] <= SAME_EXCHANGE_US)]
        by_customer = np.lexsort((customer, h))
        hs, cs = h[by_customer], customer[by_customer]
        two_customers = hs[1:][(hs[1:] == hs[:-1]) & (cs[1:] != cs[:-1])]
        flagged = np.intersect1d(close, two_customers)
        return set(group[np.isin(h, flagged)].tolist())

    def _row(self, key: PairKey, regs: list[Region]) -> CandidateRow:
        """The row of one candidate pair from all its regions (sorted here, strongest first)."""
        t, later = key[0], key[4]
        tgt = self.targets[t]
        if len(regs) == 1:  # most pairs: one region, one passage (what the general steps give it)
            kept = regs
            best = c = regs[0]
            main = (c.recipient_start, c.recipient_end, c.source_start, c.source_end)
            passages = [main]
        else:
            regs.sort(key=lambda r: (-r.strength, -r.score, r.recipient_start, r.source_start))
            kept = []
            for r in regs:
                if all(r.recipient_end <= x.recipient_start or r.recipient_start >= x.recipient_end for x in kept):
                    kept.append(r)
            best = c = kept[0]
            passages = _merge_passages([(x.recipient_start, x.recipient_end, x.source_start, x.source_end)
                                        for x in kept])
            main = next(x for x in passages if x[0] <= c.recipient_start and c.recipient_end <= x[1])
        if len(kept) == 1:
            rule, informative, strength = c.rule, c.informative, c.strength
            null_rules: tuple[str, ...] = (c.rule_null[1].split(":")[0],) if c.rule_null else ()
        else:
            ranked = [(_TIER_RANK[x.rule[0]], x.rule) for x in kept if x.rule]
            rule = min(ranked)[1] if ranked else None
            null_rules = tuple(sorted({x.rule_null[1].split(":")[0] for x in kept if x.rule_null}))
            informative = sum(x.informative for x in kept)
            strength = sum(x.strength for x in kept)
        # One object per rule text (they vary with the parameters alone), not one per row: 190 bytes a row.
        rule, null_rules = self._same.setdefault(rule, rule), self._same.setdefault(null_rules, null_rules)
        return CandidateRow(
            recipient_request_id=tgt.request_id,
            recipient_tenant_id=tgt.tenant_id,
            source_request_id=c.source_request_id,
            source_tenant_id=c.source_tenant_id,
            source_kind=c.source_kind,
            relation=best.relation,
            tier=None,
            tier_rule=None,
            score=round(c.score, 2),
            matched_tokens=c.matched,
            longest_run=c.longest_run,
            recipient_start=main[0],
            recipient_end=main[1],
            source_start=main[2],
            source_end=main[3],
            rarity=round(best.rarity, 4),
            _singles_out=best.singles_out,
            informative_tokens=informative,
            regions=len(regs),
            strength_bits=round(strength, 3),
            _main_bits=round(best.strength, 3),
            passages=passages,
            control=tgt.control,
            _target=t,
            _source_received_us=c.source_received_us,
            _rule=rule,
            _later=later,
            _null_rules=null_rules,
        )


@dataclasses.dataclass
class CandidateSurvey:
    """What the records are read for before the evidence model (:meth:`CandidateRows.survey`)."""

    #: Every row's source (request id, tenant).
    sources: set[tuple[str, str | None]] = dataclasses.field(default_factory=set)
    #: The rows whose source may be the target's own exchange (:func:`_own_copy_candidates`).
    own_near: list[CandidateRow] = dataclasses.field(default_factory=list)
    #: The groups of rows whose sources may be one exchange logged twice (:func:`_source_copy_groups`).
    copy_groups: list[list[CandidateRow]] = dataclasses.field(default_factory=list)
    #: Every row's source tenant.
    source_tenants: set[str] = dataclasses.field(default_factory=set)


class CandidateRows:
    """The candidate pairs' rows a :class:`RegionScorer` built (:meth:`RegionScorer.take`), a group of targets at a
    time: every row of a target in one group, in the order its pairs were first found (``_found``: its place in
    that order among all rows)."""

    def __init__(self, held: HeldRows, rebuilt: dict[PairKey, CandidateRow], shared: set[int],
                 sources: set[tuple[str, str | None]], source_tenants: set[str], survey_groups: set[int]) -> None:
        self.held, self.rebuilt, self.shared = held, rebuilt, shared
        self.sources, self.source_tenants, self.survey_groups = sources, source_tenants, survey_groups

    def survey(self, targets: list[Target]) -> CandidateSurvey:
        """Every row's source and tenant (handed over: call it once), and the rows that may be copies of an
        exchange, read from the few groups of targets that may hold them."""
        survey = CandidateSurvey(self.sources, source_tenants=self.source_tenants)
        self.sources, self.source_tenants = set(), set()
        for rows in self.groups(sorted(self.survey_groups)):
            survey.own_near += _own_copy_candidates(rows, targets)
            survey.copy_groups += _source_copy_groups(rows)
        return survey

    def groups(self, only: Iterable[int] | None = None) -> Iterator[list[CandidateRow]]:
        """Each group's rows (new rows at every call, whose fields the caller may set; their ``passages`` lists,
        which nothing changes, may be shared); ``only`` those groups. A pair found in two batches although no two
        records hold its source is a ValueError here."""
        for g in range(self.held.groups) if only is None else only:
            seen: set[PairKey] = set()
            rows = []
            for key, found, values in self.held.group(g):
                if key in self.rebuilt:
                    values = _row_values(self.rebuilt[key])
                elif self.shared and _key_hash(key) in self.shared:
                    if key in seen:
                        raise ValueError(f"the regions of candidate pair {key!r} came in two batches, but its source "
                                         "was not known to be held by two records")
                    seen.add(key)
                row = CandidateRow(*values)
                row._found = found
                rows.append(row)
            yield rows

    def close(self) -> None:
        """Drop the rows (and their file) and what was noted of them."""
        self.held.close()
        self.rebuilt, self.sources, self.source_tenants = {}, set(), set()


def finding_id(row: Mapping[str, Any]) -> str:
    """A candidate pair's finding id: a hash of both requests (id and tenant), the source's kind and the
    main passage's spans (the same pair and passage give the same id in every run)."""
    # One f-string, not a join over str() of each part (the same text).
    key = (f"{row['recipient_request_id']}\x1f{_tenant_part(row['recipient_tenant_id'])}\x1f{row['source_request_id']}"
           f"\x1f{_tenant_part(row['source_tenant_id'])}\x1f{row['source_kind']}\x1f{row['recipient_start']}"
           f"\x1f{row['recipient_end']}\x1f{row['source_start']}\x1f{row['source_end']}")
    return "f-" + xxhash.xxh64_hexdigest(key.encode("utf-8", "surrogatepass"), seed=SEED)


def score_candidates(cands: list[Candidate], targets: list[Target], holders: Holders,
                      p: MatchParams) -> list[CandidateRow]:
    """Every admissible candidate pair (target, source request, kind), with its evidence.

    Per region: rarity, own context, informative tokens and strength (bits, see ``chance.py``);
    a region that is not admissible (:func:`tiers.admissible`) is dropped. Per pair: every
    admissible region not overlapping a stronger one is kept as a passage (adjacent passages
    merged into one span); the pair's strength and informative tokens are their sums, and its
    score, spans and rarity those of the strongest passage.
    """
    scorer = RegionScorer(targets, holders, p)
    scorer.add(cands)
    return scorer.rows()


#: Weights whose sums are exact in any order (see :func:`_region_facts`).
_EXACT_WEIGHTS = np.array([0.0, 0.5, 1.0])


class RegionFacts(NamedTuple):
    """Per candidate of a batch (see :func:`_region_facts`)."""

    any_informative: np.ndarray  # whether any matched k-gram is informative
    rarity: np.ndarray  # mean weight of the matched k-grams
    singles_out: np.ndarray  # mean weight of the informative ones
    informative_tokens: np.ndarray  # matched tokens not explained by common or own-context k-grams alone
    distinct: np.ndarray  # different tokens among the matched ones (counted where any k-gram is informative)
    matched: np.ndarray  # per token of the candidates' spans, one after another: matched, not explained away
    offset: np.ndarray  # where each candidate's span starts in ``matched`` (plus the total)


def _region_facts(cands: list[Candidate], hashes: np.ndarray, hash_offset: np.ndarray, positions: np.ndarray,
                  informative: np.ndarray, weight: np.ndarray, bounds: np.ndarray, k: int,
                  blocks: tuple[np.ndarray, np.ndarray] | None = None) -> RegionFacts:
    """Each candidate's evidence counts from its k-gram facts (:func:`_kgram_facts`), every candidate at once;
    ``hashes``: the targets' token hashes one target after another, target i's from ``hash_offset[i]``.

    *Informative tokens* are the matched tokens not covered only by k-grams that are common or own context:
    a token inside an informative k-gram is evidence even where a common k-gram overlaps it ("756,595.48"
    between "Payment of EUR" and "is due to IBAN"). *Distinct* counts the different words among the matched
    tokens: a run of one repeated word is no passage. Array passes over all candidates' spans, where a loop
    of small array calls per candidate was most of the stage's scoring time. The means are sums in order
    over each candidate's k-grams, divided by their count, when every weight is 0, 1/2 or 1 (``max_tenants``
    <= 2, the default): such sums are exact whatever the order. Other weights take numpy's mean per candidate,
    as before, so that a mean of exactly 0.5 is not read as 0.49999999999999994.
    """
    n = len(cands)
    count = np.diff(bounds)
    nonempty = np.flatnonzero(count > 0)

    def sums(values: np.ndarray) -> np.ndarray:
        out = np.zeros(n, dtype=values.dtype)
        if len(nonempty):
            out[nonempty] = np.add.reduceat(values, bounds[:-1][nonempty])
        return out

    n_informative = sums(informative.astype(np.int64))
    if np.isin(weight, _EXACT_WEIGHTS).all():
        total_weight = sums(weight)
        with np.errstate(invalid="ignore", divide="ignore"):
            rarity = np.where(count > 0, total_weight / np.maximum(count, 1), 0.0)
            singles_out = np.where(n_informative > 0, total_weight / np.maximum(n_informative, 1), 0.0)
    else:
        # Weights such as 1/3 (max_tenants >= 3) round differently when summed in another order, and the
        # tiers compare these means with 0.5 and 0.75: numpy's own mean, one candidate at a time.
        rarity, singles_out = np.zeros(n), np.zeros(n)
        for i in np.flatnonzero(n_informative > 0).tolist():
            w, inf = weight[bounds[i] : bounds[i + 1]], informative[bounds[i] : bounds[i + 1]]
            rarity[i], singles_out[i] = float(w.mean()), float(w[inf].mean())
    tok_start = np.array([c.tok_start for c in cands], dtype=np.int64)
    span = np.array([c.tok_end - c.tok_start for c in cands], dtype=np.int64)
    offset = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(span, out=offset[1:])
    total = int(offset[-1])

    def cover(owner: np.ndarray, start: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Tokens of the spans that the intervals [start, start + size) of candidate ``owner`` cover
        (positions relative to the candidate's span, clipped to it, as slicing would)."""
        a = np.clip(start, 0, span[owner])
        b = np.minimum(a + size, span[owner])
        edges = (np.bincount(offset[owner] + a, minlength=total + 1)
                 - np.bincount(offset[owner] + b, minlength=total + 1))
        return np.cumsum(edges[:total]) > 0

    block, block_owner = blocks if blocks is not None else _block_arrays(cands)
    matched = cover(block_owner, block[:, 0] - tok_start[block_owner], block[:, 1])
    token_owner = np.repeat(np.arange(n, dtype=np.int64), span)
    # Different words among the matched tokens: (candidate, token hash) pairs, counted once each.
    at = np.flatnonzero(matched & (n_informative > 0)[token_owner])
    owner_at = token_owner[at]
    h = hashes[hash_offset[np.array([c.target for c in cands], dtype=np.int64)[owner_at]] + tok_start[owner_at]
               + (at - offset[owner_at])]
    order = np.lexsort((h, owner_at))
    owner_at, h = owner_at[order], h[order]
    new = np.ones(len(h), dtype=bool)
    new[1:] = (owner_at[1:] != owner_at[:-1]) | (h[1:] != h[:-1])
    distinct = np.bincount(owner_at[new], minlength=n)
    kgram_owner = np.repeat(np.arange(n, dtype=np.int64), count)
    rel = positions - tok_start[kgram_owner]
    by_common = cover(kgram_owner[~informative], rel[~informative], np.full(int((~informative).sum()), k))
    by_informative = cover(kgram_owner[informative], rel[informative], np.full(int(informative.sum()), k))
    matched &= ~(by_common & ~by_informative)
    informative_tokens = np.bincount(token_owner, weights=matched, minlength=n).astype(np.int64)
    return RegionFacts(n_informative > 0, rarity, singles_out, informative_tokens, distinct, matched, offset)


def _block_arrays(cands: list[Candidate]) -> tuple[np.ndarray, np.ndarray]:
    """Every candidate's matching blocks as rows (target token index, size), candidates in order, and the
    candidate of each row."""
    n_blocks = np.array([len(c.blocks) for c in cands], dtype=np.int64)
    blocks = np.array([b for c in cands for b in c.blocks], dtype=np.int64).reshape(-1, 2)
    return blocks, np.repeat(np.arange(len(cands), dtype=np.int64), n_blocks)


def _matched_kgrams(blocks: np.ndarray, owner: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(candidate, target position) of every k-gram lying inside a matching block of ``k`` or more tokens,
    from :func:`_block_arrays`: the candidates' matched k-grams, derived here for a whole batch at once
    rather than kept as an array per candidate."""
    big = blocks[:, 1] >= k
    start, count, who = blocks[big, 0], blocks[big, 1] - k + 1, owner[big]
    step = np.arange(int(count.sum()), dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)
    return np.repeat(who, count), np.repeat(start, count) + step


def _kgram_facts(cands: list[Candidate], targets: list[Target], holders: Holders, p: MatchParams,
                 kgrams: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per candidate, its distinct matched k-gram positions (ascending) and for each whether it is
    informative (neither own context nor common) and its weight, 1 / (tenants holding it then),
    0 where not informative; candidate i's are ``[bounds[i], bounds[i + 1])``. ``kgrams``: the matched
    k-grams as (candidate, target position), :func:`_matched_kgrams`.

    Every candidate at once: the per-candidate array calls were most of scoring's time, and the
    counts are integers, the same whatever the grouping.
    """
    start, h_tenant, h_time, common_mask, independent = holders
    owner, pos = kgrams
    if not cands or not len(pos):
        return np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.float64), np.zeros(len(cands) + 1, np.int64)
    # Distinct positions per candidate, candidates in order: a lexsort and a dedupe.
    order = lexsort_ints((pos, owner))
    owner, pos = owner[order], pos[order]
    first_of = np.ones(len(pos), dtype=bool)
    first_of[1:] = (owner[1:] != owner[:-1]) | (pos[1:] != pos[:-1])
    owner, pos = owner[first_of], pos[first_of]
    bounds = np.searchsorted(owner, np.arange(len(cands) + 1))
    # The k-gram id of each position: targets' gids lie one after another.
    gid_offset = np.cumsum([0] + [len(t.gids) for t in targets])
    gids = np.concatenate([t.gids for t in targets]) if targets else np.zeros(0, np.int64)
    tgt_of = np.array([c.target for c in cands], dtype=np.int64)
    g = gids[gid_offset[tgt_of[owner]] + pos]
    deadline = np.array([t.deadline_us for t in targets], dtype=np.int64)
    received = np.array([t.received_us for t in targets], dtype=np.int64)
    codes = np.array([tenant_code(t.tenant_id) for t in targets], dtype=np.int64)
    cross = np.array([not same_customer(c.source_tenant_id, targets[c.target].tenant_id) for c in cands], dtype=bool)
    later = np.array([c.later for c in cands], dtype=bool)
    seg, flat = holder_entries(start, g)
    ten, when = h_tenant[flat], h_time[flat]
    cand = owner[seg]
    tt = tgt_of[cand]
    held_then = (ten >= 0) & (when < deadline[tt])
    holders_then = np.bincount(seg, weights=held_then, minlength=len(g))
    own = np.bincount(seg, weights=ten == -(tt + 1), minlength=len(g)) > 0
    # Cross-tenant: text the recipient's tenant already held when it sent the request is not news to it.
    own |= cross[owner] & (np.bincount(seg, weights=(ten == codes[tt]) & (when <= received[tt]), minlength=len(g)) > 0)
    # Text more customers sent, over all time, than the recipient and max_tenants others is public text.
    ever = np.bincount(seg, weights=held_then | independent[flat], minlength=len(g))
    common = (holders_then > p.max_tenants) | (ever > p.max_tenants) | common_mask[g]
    # A later text is searched over all time: text many tenants held by then is common for it.
    common |= later[owner] & (np.bincount(seg, weights=ten >= 0, minlength=len(g)) > p.max_tenants)
    informative = ~own & ~common
    weight = np.where(informative, 1.0 / np.maximum(holders_then, 1.0), 0.0)
    return pos, informative, weight, bounds


#: Passages of one pair closer than this (characters, in both texts, in the same order) are one span.
ADJACENT_CHARS = 24


def _merge_passages(spans: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """Adjacent (recipient, source) spans merged: each gap at most ``ADJACENT_CHARS`` in both texts."""
    out: list[list[int]] = []
    for rs, re_, ss, se in sorted(spans):
        if out and 0 <= rs - out[-1][1] <= ADJACENT_CHARS and 0 <= ss - out[-1][3] <= ADJACENT_CHARS:
            out[-1][1], out[-1][3] = max(out[-1][1], re_), max(out[-1][3], se)
        else:
            out.append([rs, re_, ss, se])
    return [(a, b, c, d) for a, b, c, d in out]


#: What :func:`engine_facts` gives, per request (request id, tenant): the decode nodes of those decoded on several,
#: and those refused and never prefilled.
EngineFacts = tuple[dict[tuple[str, str | None], frozenset[str]], set[tuple[str, str | None]]]


#: A node's log has a gap where two records it places lie further apart than this many times its median spacing
#: (:meth:`RecordFacts.records_on_node_expected`). At a steady rate the spacings are exponential, and one in about a
#: thousand exceeds ten medians: a quiet stretch read as a gap only counts what it holds as the node's, as before.
LOG_GAP_SPACINGS = 10.0


@dataclasses.dataclass
class RecordFacts:
    """What the engine and the ingest recorded about the requests of the findings (no text)."""

    node: dict[tuple[str, str | None], str | None]
    damage: dict[tuple[str, str | None], str | None]
    times: np.ndarray  # every record's received time, sorted (records without one left out)
    node_share: dict[str, float]  # share of records with a known decode node that ran on each
    has_damage_column: bool
    node_times: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # received times per decode node
    # Received times of the records of the models the engine logs serve (those of any record with a decode
    # node) whose own node the logs do not show: a gap in a node's log hides its records among them.
    unplaced_times: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    #: The deployments (:func:`deployment`) each request asked for or was routed to, for the findings' requests
    #: and the targets.
    models: dict[tuple[str, str | None], frozenset[str]] = dataclasses.field(default_factory=dict)
    #: The deployments the engines serve: of the records the engine logs place on a decode node, and the case's
    #: models (empty when a placed record names no model: then unknown).
    engine_models: frozenset[str] = frozenset()
    #: Requests (of the findings) the engine refused as over its limit and never prefilled.
    unprefilled: frozenset[tuple[str, str | None]] = frozenset()
    #: Every decode node of the requests the engine logs show decoded on more than one (a retry; ``node`` and a
    #: target's ``decode_node`` name one of them).
    decode_nodes: dict[tuple[str, str | None], frozenset[str]] = dataclasses.field(default_factory=dict)
    #: The case's models as deployments (``[case] models``).
    case_deployments: frozenset[str] = frozenset()
    #: Every record's received time (records without one left out), and per model column (asked for, routed to)
    #: the :func:`deployment_code` of the deployment the record names there (0: none), row for row.
    record_times: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, np.int64))
    record_deployments: tuple[np.ndarray, ...] = ()
    #: Requests (of the findings) the gateway logged as failed, and those the engine logs show refused over its limit.
    failed: frozenset[tuple[str, str | None]] = frozenset()
    engine_refused: frozenset[tuple[str, str | None]] = frozenset()
    #: Pairs of customer ids that may name one customer (the ingest's ``tenant_aliases``): -> (tenant, field, other).
    aliases: dict[frozenset[str], tuple[str, str, str]] = dataclasses.field(default_factory=dict)
    #: (target index, source request id, source tenant) of the candidates whose source record is the target's own
    #: exchange logged again under another customer id (:func:`own_exchange_copies`).
    own_copies: frozenset[tuple[int, str, str | None]] = frozenset()
    #: (target index, source request id, source tenant) -> (request id, tenant) of the candidates whose source record
    #: is another candidate's source exchange logged again under another customer id (:func:`sources_logged_twice`).
    logged_twice: dict[tuple[int, str, str | None], tuple[str, str | None]] = dataclasses.field(default_factory=dict)
    #: Records the case's logs hold per customer id, for the ids of ``aliases`` the candidates' sources name.
    tenant_records: dict[str, int] = dataclasses.field(default_factory=dict)
    # Those of ``unplaced_times`` the gateway did not log as failed (sorted; all of them without a status column): an
    # answered call decoded on some node, whose log lost it.
    unplaced_answered_times: np.ndarray | None = None
    # Worked out when first asked (see records_on_node_expected).
    _gaps: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict, init=False,
                                                                                    repr=False, compare=False)
    _answered_alone: np.ndarray | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _all_placed: np.ndarray | None = dataclasses.field(default=None, init=False, repr=False, compare=False)

    def times_of(self, deployments: frozenset[str]) -> np.ndarray:
        """Received times (sorted) of the records that asked for or were routed to any of ``deployments``."""
        wanted = np.array(sorted(deployment_code(d) for d in deployments), np.uint64)
        hit = np.zeros(len(self.record_times), bool)
        for codes in self.record_deployments:
            hit |= np.isin(codes, wanted)
        return np.sort(self.record_times[hit])

    def logging_at(self, node: str, when_us: int) -> bool:
        """Whether ``node``'s log was running at ``when_us``: it places records on the node before and after."""
        t = self.node_times.get(node)
        return t is not None and len(t) > 0 and when_us != NO_TIME and int(t[0]) <= when_us <= int(t[-1])

    def records_on_node_since(self, node: str, since_us: int, until_us: int) -> int:
        """Records decoded on ``node`` received in [since, until): the source and every later one."""
        t = self.node_times.get(node)
        return 0 if t is None else self._between(t, since_us, until_us)

    def records_since_on_node_at_most(self, node: str, since_us: int, until_us: int) -> int:
        """:meth:`records_on_node_since` plus the records of the engine's models received in [since, until)
        whose node the engine logs do not show: any of them may have run on ``node``. With a day of one
        node's log missing, the node's count since a day-old source would read a few records, as if the
        source were its latest occupant; this count stays where the logs cannot tell."""
        return self.records_on_node_since(node, since_us, until_us) + self._between(self.unplaced_times, since_us, until_us)

    def records_on_node_expected(self, node: str, since_us: int, until_us: int) -> float:
        """The records ``node`` can be expected to have served of those received in [since, until): the records the
        engine logs place there, and of the records of the engine's models they place nowhere (see
        :meth:`records_since_on_node_at_most`)
        - every one received while the node's log shows a gap (before its first record, after its last, or between
          two records further apart than :data:`LOG_GAP_SPACINGS` times its usual spacing): any may be its own;
        - every answered one (not logged as failed) received while no node's log shows a gap: it decoded on a node
          whose running log lost its line, which may be this one;
        - of the rest, the node's share of the records the logs place on some node in that time: a call that failed
          before any node decoded it is in no node's log, and an answered one received while another node's log shows a
          gap is most likely in that gap.

        Counting every record placed nowhere as the node's (the :meth:`records_since_on_node_at_most` bound) grew a
        node's count with the deployment: on 24 seeds of the realistic scenario merged (75 decode nodes), the failed
        calls of every node's hours more than tripled each node's own records. What this does not see: a node's log
        that loses lines here and there while another node's shows a gap under-counts it by the share it lost.
        """
        placed = self.records_on_node_since(node, since_us, until_us)
        unplaced = self._between(self.unplaced_times, since_us, until_us)
        if until_us <= since_us or not unplaced:
            return float(placed)
        if node not in self.node_times:  # its log shows nothing: every one may be its own
            return float(placed + unplaced)
        # (An answered call outside every node's gaps is outside this node's: counted once.)
        in_gaps = self._in_gaps(node, since_us, until_us)
        answered = self._between(self._answered_outside_gaps(), since_us, until_us)
        all_placed = self._placed_between(since_us, until_us)
        share = placed / all_placed if all_placed else 1.0
        return placed + in_gaps + answered + (unplaced - in_gaps - answered) * share

    @staticmethod
    def _between(times: np.ndarray, since_us: int, until_us: int) -> int:
        """How many of the sorted ``times`` lie in [since, until)."""
        lo, hi = np.searchsorted(times, [since_us, until_us], side="left").tolist()
        return int(hi - lo)

    def _in_gaps(self, node: str, since_us: int, until_us: int) -> int:
        """The records placed nowhere received in [since, until) inside a gap of ``node``'s log (strictly between the
        two records either side of it): the gaps wholly inside the bounds from a running sum, the two at the ends
        counted (a bursty log has thousands of gaps)."""
        starts, ends, cumulative = self._log_gaps(node)
        t = self.unplaced_times
        first = int(np.searchsorted(ends, since_us, side="right"))  # the first gap ending after since
        last = int(np.searchsorted(starts, until_us - 1, side="left"))  # gaps before it open before until - 1
        if last <= first:
            return 0

        def clipped(g: int) -> int:
            a, b = max(int(starts[g]) + 1, since_us), min(int(ends[g]), until_us)
            return self._between(t, a, b) if b > a else 0

        if last - first == 1:
            return clipped(first)
        whole = int(cumulative[last] - cumulative[first])
        return (whole - int(cumulative[first + 1] - cumulative[first]) - int(cumulative[last] - cumulative[last - 1])
                + clipped(first) + clipped(last - 1))

    def _answered_outside_gaps(self) -> np.ndarray:
        """The answered records placed nowhere (sorted) received while no node's log shows a gap."""
        if self._answered_alone is None:
            t = self.unplaced_times if self.unplaced_answered_times is None else self.unplaced_answered_times
            covered = np.zeros(len(t), bool)
            for node in self.node_times:
                starts, ends, _ = self._log_gaps(node)
                g = np.searchsorted(starts, t, side="left") - 1  # the last gap opening strictly before each
                ok = g >= 0
                covered[ok] |= t[ok] < ends[g[ok]]
            self._answered_alone = t[~covered]
        return self._answered_alone

    def _log_gaps(self, node: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The gaps of ``node``'s log, as (after, before) received times of the records either side of each (open
        intervals; the first opens at the earliest time, the last closes at the latest), and the running sum of the
        records placed nowhere inside them (one more element: 0 first)."""
        found = self._gaps.get(node)
        if found is not None:
            return found
        t = self.node_times.get(node, np.zeros(0, np.int64))
        low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
        if len(t) < 2:
            starts, ends = np.array([low], np.int64), np.array([high], np.int64)  # its log shows nothing of its hours
        else:
            spacing = np.diff(t)
            positive = spacing[spacing > 0]
            # The median spacing, over the records that share a time too: with receipt times in whole seconds, most
            # spacings of a busy node are 0 and the median of the rest would be a second whatever its rate.
            usual = float(np.median(positive)) * len(positive) / len(spacing) if len(positive) else 1.0
            wide = np.flatnonzero(spacing > LOG_GAP_SPACINGS * usual)
            starts = np.concatenate(([low], t[wide], [t[-1]])).astype(np.int64)
            ends = np.concatenate(([t[0]], t[wide + 1], [high])).astype(np.int64)
        u = self.unplaced_times
        inside = np.searchsorted(u, ends, side="left") - np.searchsorted(u, starts, side="right")
        found = (starts, ends, np.concatenate(([0], np.cumsum(np.maximum(inside, 0)))).astype(np.int64))
        self._gaps[node] = found
        return found

    def _placed_between(self, since_us: int, until_us: int) -> int:
        """Records the engine logs place on any decode node received in [since, until)."""
        if self._all_placed is None:
            self._all_placed = (np.sort(np.concatenate(list(self.node_times.values()))) if self.node_times
                                else np.zeros(0, np.int64))
        return self._between(self._all_placed, since_us, until_us)

    def records_before(self, when_us: int) -> int:
        """Records received before ``when_us`` (the corpus a target's search covered)."""
        return int(np.searchsorted(self.times, when_us, side="left"))


@functools.lru_cache(maxsize=1 << 12)
def deployment(model: str | None) -> str | None:
    """A model name as the deployment it names: the scan's :func:`~forensics.artifacts.model_key` (no provider
    prefix, case or spaces around it), and no width or separators either (``openai/GLM-5.3``, ``glm_5.3`` and
    ``GLM 5.3`` are one: ``glm-5-3``). None for no name."""
    if model is None:
        return None
    name = _SEPARATORS.sub("-", model_key(unicodedata.normalize("NFKC", model))).strip("-")
    return name or None


_SEPARATORS = re.compile(r"[\W_]+")


@functools.lru_cache(maxsize=1 << 12)
def _deployments(names: tuple[str | None, ...]) -> frozenset[str]:
    """The deployments a record's model names (asked for, routed to) name."""
    return frozenset(d for d in map(deployment, names) if d)


def deployment_code(name: str) -> int:
    """A deployment's name as a 64-bit code (never 0, which stands for none): the records' deployments are held as
    codes, so a log naming a model per record holds eight bytes per record, not the names."""
    return xxhash.xxh3_64_intdigest(name.encode("utf-8", "surrogatepass")) or 1


class _DeploymentCodes:
    """The :func:`deployment_code` of the deployment each value of a model column names, row for row, computed once
    per distinct value (the values' own cache is emptied past :data:`CACHE_CHARS` characters of names). A value longer
    than :data:`LONGEST_NAME` characters, spaces around it aside, is no model's name (a garbled or hostile log): it is coded as written, not
    normalised first, which on a log naming a kilobyte-long model per record cost 40 microseconds a record."""

    CACHE_CHARS = 1 << 23
    LONGEST_NAME = 256

    def __init__(self) -> None:
        self._cache: dict[str, int] = {}
        self._chars = 0

    def _code(self, value: str | None) -> int:
        if value is None:
            return 0
        code = self._cache.get(value)
        if code is None and len(value) > self.LONGEST_NAME and len(value.strip()) > self.LONGEST_NAME:
            return deployment_code(value)
        if code is None:
            named = deployment(value)
            code = deployment_code(named) if named else 0
            if self._chars > self.CACHE_CHARS:
                self._cache.clear()
                self._chars = 0
            self._cache[value] = code
            self._chars += len(value)
        return code

    def of(self, column: pa.Array) -> np.ndarray:
        """The codes of ``column``'s values (a string column), row for row."""
        values, index = _encoded(column)
        return np.array([self._code(v) for v in values], np.uint64)[index]


def _encoded(column: pa.Array) -> tuple[list[Any], np.ndarray]:
    """A column's distinct values (None last, for null) and, row for row, the index of its value among them."""
    import pyarrow.compute as pc  # here, not at import: worker processes never load it

    encoded = pc.dictionary_encode(column)
    values = encoded.dictionary.to_pylist() + [None]
    return values, pc.fill_null(encoded.indices, len(values) - 1).to_numpy(zero_copy_only=False)


def record_facts(path: Path, keys: set[tuple[str, str | None]], target_keys: set[tuple[str, str | None]] | None = None,
                 engine: EngineFacts | None = None, case_models: tuple[str, ...] = ()) -> RecordFacts:
    """Decode node and damage of the requests ``keys`` (request id, tenant), and the corpus's times; the
    deployments of those requests and of ``target_keys``, and the models the engines serve (those of the records
    placed on a decode node, and ``case_models``); from the ``engine`` facts (:func:`engine_facts`), which
    requests ran on more than one decode node, and which of ``keys`` the engine refused over its limit and never
    prefilled (ingest took the refusal's count as the prompt's)."""
    import pyarrow.compute as pc  # here, not at import: worker processes never load it

    pf = pq.ParquetFile(path)
    names = pf.schema_arrow.names
    has_damage = "damage" in names
    model_cols = [c for c in ("model", "model_routed") if c in names]
    has_count = "prompt_tokens_source" in names
    has_status = "status" in names
    cols = (["request_id", "tenant_id", "received_at", "decode_node"] + model_cols
            + (["prompt_tokens_source"] if has_count else []) + (["damage"] if has_damage else [])
            + (["status"] if has_status else []))
    modelled = keys | (target_keys or set())
    wanted = pa.array(sorted({k[0] for k in modelled}), pa.string())
    decode_nodes, refused = engine if engine is not None else ({}, set())
    counted_by_engine: set[tuple[str, str | None]] = set()
    failed: set[tuple[str, str | None]] = set()
    deployments: dict[tuple[str, str | None], frozenset[str]] = {}
    served: set[str] = set()
    served_unknown = False
    node: dict[tuple[str, str | None], str | None] = {}
    damage: dict[tuple[str, str | None], str | None] = {}
    times: list[np.ndarray] = []
    per_node: dict[str, list[np.ndarray]] = {}
    # The received times of the records with no decode node, with the deployments their model columns name (kept
    # for the engines' models only: those of the records placed on a node, either column, compared as deployments).
    unplaced: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (and whether the gateway logged it failed)
    placed_codes: set[int] = set()  # the deployments the records placed on a node name (deployment_code)
    record_times: list[np.ndarray] = []
    record_deployments: list[list[np.ndarray]] = [[] for _ in model_cols]
    case_deployments = frozenset(d for d in map(deployment, case_models) if d)
    codes_of = _DeploymentCodes()
    for batch in row_group_batches(pf, cols, 65536):
        rec = batch.column("received_at").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        times.append(rec.drop_null().to_numpy())
        nodes = batch.column("decode_node")
        for nd in pc.unique(nodes.drop_null()).to_pylist():
            per_node.setdefault(nd, []).append(rec.filter(pc.and_(pc.equal(nodes, nd), pc.is_valid(rec))).to_numpy())
        # Per row, the deployment (deployment_code) each model column names: 0 for none.
        codes = (np.stack([codes_of.of(batch.column(c)) for c in model_cols], axis=1) if model_cols
                 else np.zeros((batch.num_rows, 0), np.uint64))
        is_placed = pc.is_valid(nodes)
        placed_codes.update(int(c) for c in np.unique(codes[is_placed.to_numpy(zero_copy_only=False)]) if c)
        if model_cols:
            placed = pa.table({c: batch.column(c).filter(is_placed) for c in model_cols})
            for names_asked in placed.group_by(model_cols).aggregate([]).to_pylist():
                named = {d for d in map(deployment, names_asked.values()) if d}
                served |= named
                # A placed record that names no model (no name, or one that names no deployment): which models the
                # engines serve is then unknown.
                served_unknown = served_unknown or not named
        elif pc.any(pc.is_valid(nodes)).as_py():
            served_unknown = True
        # Failed calls count too: one refused before any node ran it cannot be told from one a node ran and
        # that then failed (a 504 after streaming) when the node's log is missing.
        no_node = pc.and_(pc.is_null(nodes), pc.is_valid(rec))
        nowhere = no_node.to_numpy(zero_copy_only=False)
        failed_call = (_logged_failed(batch.column("status"))[nowhere] if has_status
                       else np.zeros(int(nowhere.sum()), bool))
        unplaced.append((rec.filter(no_node).to_numpy(), codes[nowhere], failed_call))
        if model_cols:
            valid = pc.is_valid(rec)
            record_times.append(rec.filter(valid).to_numpy())
            valid_codes = codes[valid.to_numpy(zero_copy_only=False)]
            for i, parts in enumerate(record_deployments):
                parts.append(valid_codes[:, i])
        if len(wanted):
            sel = batch.filter(pc.is_in(batch.column("request_id"), value_set=wanted))
            dmg = sel.column("damage").to_pylist() if has_damage else [None] * sel.num_rows
            count = sel.column("prompt_tokens_source").to_pylist() if has_count else [None] * sel.num_rows
            status = sel.column("status").to_pylist() if has_status else [None] * sel.num_rows
            asked = zip(*(sel.column(c).to_pylist() for c in model_cols)) if model_cols else iter(lambda: (), None)
            for rid, ten, nd, dm, src, md, st in zip(sel.column("request_id").to_pylist(), sel.column("tenant_id").to_pylist(),
                                                     sel.column("decode_node").to_pylist(), dmg, count, asked, status):
                if (rid, ten) in modelled:
                    asked_for = _deployments(md)
                    known = deployments.get((rid, ten))
                    deployments[(rid, ten)] = asked_for if known is None else known | asked_for
                if (rid, ten) in keys:
                    node[(rid, ten)] = nd
                    damage[(rid, ten)] = dm
                    if src == "engine":
                        counted_by_engine.add((rid, ten))
                    if st == "failure":
                        failed.add((rid, ten))
    node_times = {n: np.sort(np.concatenate(v)) for n, v in sorted(per_node.items())}
    total = sum(len(v) for v in node_times.values())
    # Compared as deployments, either column: a gap's records written "openai/GLM-5.3", or under a model group
    # with the placed records' model routed, are theirs. One naming no model counts where a placed one names none
    # (served_unknown).
    served_codes = np.array(sorted(placed_codes), np.uint64)
    served_of = [np.isin(c, served_codes).any(axis=1) | (served_unknown & ~c.any(axis=1)) for _, c, _ in unplaced]
    hidden = [t[ok] for (t, _, _), ok in zip(unplaced, served_of)]
    answered = [t[ok & ~failed_call] for (t, _, failed_call), ok in zip(unplaced, served_of)]
    # Refused: ingest took the over-limit line's count as this prompt's (a line of another request under the id, a
    # count its text cannot have, is not taken), and no line shows the prompt prefilled after all.
    unprefilled = frozenset(refused & counted_by_engine & keys)
    if served and not served_unknown:
        served |= case_deployments
    else:
        served = set()
    return RecordFacts(node, damage, np.sort(np.concatenate(times)) if times else np.zeros(0, np.int64),
                        {n: len(v) / total for n, v in node_times.items()} if total else {}, has_damage, node_times,
                        np.sort(np.concatenate(hidden)) if hidden else np.zeros(0, np.int64),
                        deployments, frozenset(served), unprefilled, decode_nodes,
                        case_deployments,
                        np.concatenate(record_times) if record_times else np.zeros(0, np.int64),
                        tuple(np.concatenate(parts) if parts else np.zeros(0, np.uint64) for parts in record_deployments),
                        failed=frozenset(failed), engine_refused=frozenset(refused & keys),
                        unplaced_answered_times=np.sort(np.concatenate(answered)) if answered else np.zeros(0, np.int64))


def _logged_failed(status: pa.Array) -> np.ndarray:
    """Per row, whether the gateway logged the call as failed (``status`` "failure"); none where the column is not
    text (a case table another tool wrote): every call is then read as answered, which counts it whole."""
    import pyarrow.compute as pc  # (as in record_facts: worker processes never load it)

    if pa.types.is_dictionary(status.type):
        status = status.cast(status.type.value_type)
    if not (pa.types.is_string(status.type) or pa.types.is_large_string(status.type)):
        return np.zeros(len(status), bool)
    return np.asarray(pc.fill_null(pc.equal(status, "failure"), False).to_numpy(zero_copy_only=False), bool)


class QueryStopped(Exception):
    """The queries of :func:`engine_facts_beside` were stopped: the stage left before it needed them."""


class QueryWatch:
    """The connection a thread's queries run on, so that another thread can stop them: between queries (the
    next does not start) or during one (DuckDB's ``interrupt``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._con: Any = None
        self._stopped = False

    def running(self, con: Any) -> None:
        """Called by the querying thread with its connection before each query; raises QueryStopped once
        :meth:`stop` has been called."""
        with self._lock:
            if self._stopped:
                raise QueryStopped()
            self._con = con

    def closing(self) -> None:
        """Called by the querying thread before it closes its connection: nothing left to interrupt."""
        with self._lock:
            self._con = None

    def stop(self) -> None:
        """Stop the queries: the running one interrupted, no further one started. A query still starting may miss
        the interrupt: call again until the querying thread has ended."""
        with self._lock:
            self._stopped = True
            if self._con is not None:
                with contextlib.suppress(Exception):  # a query that has just ended: nothing to interrupt
                    self._con.interrupt()


def engine_facts(case: Case, watch: QueryWatch | None = None) -> EngineFacts:
    """From the case's engine logs, per request (request id, tenant) whose engine id no other exchange carries (the
    ``rid_owners`` view, as every engine query decides it): the decode nodes of each decoded on more than one (a
    retry: the exchanges name one of them); and those a prefill node (or one of no stated role) refused as over
    its limit that no line shows prefilled after all (more than the placeholder's one token, on any node).
    Two DuckDB queries (a case without engine logs has no events). The match stage runs them first, while its
    process holds little: DuckDB's memory is its own, and at the end of the stage it would add to the peak; and
    beside its own start (:func:`engine_facts_beside`), ``watch`` then able to stop them."""
    from forensics import queries as q  # here: worker processes never query

    con = case.connect(memory_cap=True)
    try:
        if watch is not None:
            watch.running(con)
        q.install_views(con, [x for x in q.load_queries() if x.kind == "view"])
        retried = q.with_memory_to_spare(con, lambda: con.execute(
            "WITH decoded AS (SELECT rid, list(DISTINCT node ORDER BY node) AS nodes FROM engine_events "
            "WHERE role = 'decode' AND rid IS NOT NULL GROUP BY rid HAVING count(DISTINCT node) > 1) "
            "SELECT o.request_id, o.tenant_id, d.nodes FROM decoded d JOIN rid_owners o ON o.engine_rid = d.rid "
            "WHERE o.exchanges_named = 1").fetchall())
        if watch is not None:
            watch.running(con)
        refused = q.with_memory_to_spare(con, lambda: con.execute(
            "WITH refused AS (SELECT rid FROM engine_events WHERE rid IS NOT NULL AND role IS DISTINCT FROM 'decode' "
            "GROUP BY rid HAVING bool_or(event IN ('over_limit', 'exceeds_max_tokens')) "
            "AND NOT coalesce(bool_or(event NOT IN ('over_limit', 'exceeds_max_tokens') AND input_len > 1), false)) "
            "SELECT o.request_id, o.tenant_id FROM refused r JOIN rid_owners o ON o.engine_rid = r.rid "
            "WHERE o.exchanges_named = 1").fetchall())
    finally:
        if watch is not None:
            watch.closing()
        con.close()
    return {(rid, ten): frozenset(nodes) for rid, ten, nodes in retried}, {(rid, ten) for rid, ten in refused}


@contextlib.contextmanager
def engine_facts_beside(case: Case) -> Iterator[Callable[[], EngineFacts]]:
    """:func:`engine_facts` on a thread of its own while the block goes on; yields the function that waits for
    them (and raises what they raised). DuckDB leaves the interpreter free while it queries, so the match stage
    loads its targets and builds their index meanwhile (the queries took 0.7 s of its serial start on the 1 GB
    benchmark incident). A block left before it waited (an error, Ctrl-C) stops the queries and waits for the
    thread: no query outlives the stage."""
    watch = QueryWatch()
    done: list[EngineFacts] = []
    failed: list[BaseException] = []
    # Not Thread.is_alive: a join that a signal interrupts (Ctrl-C while the stage waits here) leaves the thread
    # marked as ended while it runs on (python/cpython#90882).
    ended = threading.Event()

    def run() -> None:
        try:
            done.append(engine_facts(case, watch))
        except BaseException as exc:  # handed to the waiting thread, which raises it
            failed.append(exc)
        finally:
            ended.set()

    thread = threading.Thread(target=run, name="engine-facts", daemon=True)
    thread.start()

    def facts() -> EngineFacts:
        ended.wait()
        if failed:
            raise failed[0]
        return done[0]

    try:
        yield facts
    finally:
        # Again until the queries have ended: an interrupt that comes as a query is starting (after the check in
        # QueryWatch.running) is lost, and the query would run on.
        while not ended.is_set():
            watch.stop()
            ended.wait(0.05)
        thread.join()


def exchange_copies(survey: CandidateSurvey, targets: list[Target], path: Path,
                    placed: dict[tuple[str, str | None], str | None],
                    aliases: Iterable[frozenset[str]]) -> tuple[frozenset[tuple[int, str, str | None]],
                                                                dict[tuple[int, str, str | None], tuple[str, str | None]],
                                                                dict[str, int]]:
    """The candidates that are one exchange logged twice: :func:`own_exchange_copies`, :func:`sources_logged_twice`,
    and the records the case's logs hold per customer id they and the ``aliases`` name. The few texts and counts
    they need are read in one pass each, for both (they were read three times)."""
    own_near, groups = survey.own_near, survey.copy_groups
    ids = ({r["source_request_id"] for r in own_near} | {targets[r["_target"]].request_id for r in own_near}
           | {r["source_request_id"] for g in groups for r in g})
    logged = logged_rows(path, ids) if ids else {}
    aliased = {t for pair in aliases for t in pair}
    tenants = ({str(r["source_tenant_id"]) for g in groups for r in g if r["source_tenant_id"] is not None}
               | (survey.source_tenants & aliased))
    held = records_of(path, tenants) if tenants else {}
    return (frozenset(own_exchange_copies(own_near, targets, logged)), sources_logged_twice(groups, logged, held, placed),
            held)


def _own_copy_candidates(rows: Sequence[R], targets: list[Target]) -> list[R]:
    """The candidates whose source may be the target's own exchange (:func:`own_exchange_copies`): a source whose
    answer the target's matched, received within :data:`SAME_EXCHANGE_US` of it."""
    return [r for r in rows if r["relation"] == "cross_tenant" and r["source_kind"] == "response"
            and (t := targets[r["_target"]]).received_us != NO_TIME and r["_source_received_us"] != NO_TIME
            and abs(t.received_us - r["_source_received_us"]) <= SAME_EXCHANGE_US]


def own_exchange_copies(near: Sequence[Row], targets: list[Target],
                        logged: dict[tuple[str, str | None], list[LoggedRow]]) -> set[tuple[int, str, str | None]]:
    """The candidates (target index, source request id, source tenant) of ``near`` (:func:`_own_copy_candidates`)
    whose source record is the target's own exchange logged again under another customer id: :func:`same_exchange`
    with it, by the rows ``logged`` (how much of the answer the passages cover says nothing: common and public text is
    left out of them). Such a match is no chance likeness between unrelated texts, nor an exposure: counted in the
    null, the controls' own copies (a day of traffic a second gateway logged under its account names) made every real
    finding look like chance, and the exposed customers fell off the list (a review)."""
    out = set()
    for r in near:
        t = targets[r["_target"]]
        if same_exchange(logged.get((t.request_id, t.tenant_id), []),
                          logged.get((r["source_request_id"], r["source_tenant_id"]), [])):
            out.add((r["_target"], r["source_request_id"], r["source_tenant_id"]))
    return out


def own_copies_said(null: Mapping[str, Any]) -> str | None:
    """The words for the suspect responses whose matches with their own exchange logged again under another customer
    id were left out (``match.json`` ``null.own_exchange_copies_of_suspects``), or None: the stage's warnings and the
    report's summary say it (a warning of the run alone was lost after it, and the dropped source unsaid: a review)."""
    pairs = null.get("own_exchange_copies_of_suspects")
    if not isinstance(pairs, list) or not pairs:
        return None
    shown = [f"{safe_id(str(p[0]))} of {safe_id(str(p[1]))} ~ {safe_id(str(p[2]))} of {safe_id(str(p[3]))}"
             for p in pairs if isinstance(p, list | tuple) and len(p) == 4]
    return (f"{len(pairs)} suspect response(s) matched their own exchange logged again under another customer id (the "
            "same answer and one request's prompt, at the same time), left out as no exposure: "
            + first_few(shown) + " (if two of these are different customers, compare their exchanges; match.json "
            "null.own_exchange_copies_of_suspects lists them all)")


def records_of(path: Path, tenants: set[str]) -> dict[str, int]:
    """How many records the case's logs hold under each customer id of ``tenants``."""
    import duckdb  # here, not at import: worker processes never load it

    con = duckdb.connect()
    try:
        return dict(con.execute("SELECT tenant_id, count(*) FROM read_parquet($path) WHERE tenant_id IN "
                                "(SELECT unnest($tenants)) GROUP BY tenant_id",
                                {"path": str(path), "tenants": sorted(tenants)}).fetchall())
    finally:
        con.close()


def _source_copy_groups(rows: Sequence[R]) -> list[list[R]]:
    """Candidates of one target with the same passages of the response in the same kind of text, from sources of two
    customers or more some two of which were received within :data:`SAME_EXCHANGE_US` (:func:`sources_logged_twice`)."""
    groups: dict[tuple[Any, ...], list[R]] = {}
    for r in rows:
        if r["relation"] == "cross_tenant" and r["_source_received_us"] != NO_TIME:
            # (the response's passages: a copy's own offsets differ where a gateway put a system prompt of its own)
            groups.setdefault((r["_target"], r["source_kind"], tuple(p[:2] for p in r["passages"])), []).append(r)
    near = []
    for group in groups.values():
        if len(group) < 2 or len({customer_key(r["source_tenant_id"]) for r in group}) < 2:
            continue
        times = sorted(r["_source_received_us"] for r in group)
        if any(b - a <= SAME_EXCHANGE_US for a, b in itertools.pairwise(times)):
            near.append(group)
    return near


def sources_logged_twice(near: list[list[R]], logged: dict[tuple[str, str | None], list[LoggedRow]],
                         held: dict[str, int], placed: dict[tuple[str, str | None], str | None]
                         ) -> dict[tuple[int, str, str | None], tuple[str, str | None]]:
    """Candidates of one target whose sources are one exchange logged twice under two customer ids (a spend log
    beside its callback under another tenant field, a second gateway under its own account names): of the groups
    ``near`` (:func:`_source_copy_groups`), sources that are :func:`same_exchange` by the rows ``logged``. Both were
    named exposed: one customer on the list twice, once under an id that is not its own (a review). Each copy but one
    maps to the kept copy's (request id, tenant): the id the case's logs hold the most records under (``held``), as it
    is the one the customer is known by (``placed``: the decode node of each source, the engine logs' word, decides a
    tie)."""
    out: dict[tuple[int, str, str | None], tuple[str, str | None]] = {}
    for group in near:
        # The id kept: the one the logs hold the most records under, then a copy the engine logs place on a node (the
        # service's own record of it, where another gateway's copy carries ids of its own), then the smaller id.
        group.sort(key=lambda r: (-held.get(str(r["source_tenant_id"]), 0),
                                  placed.get((r["source_request_id"], r["source_tenant_id"])) is None,
                                  str(r["source_tenant_id"]), r["source_request_id"]))
        kept: list[R] = []
        for r in group:
            mine = logged.get((r["source_request_id"], r["source_tenant_id"]), [])
            same = next((k for k in kept if not same_customer(k["source_tenant_id"], r["source_tenant_id"])
                         and same_exchange(mine, logged.get((k["source_request_id"], k["source_tenant_id"]), []))),
                        None)
            if same is None:
                kept.append(r)
            else:
                out[(r["_target"], r["source_request_id"], r["source_tenant_id"])] = (same["source_request_id"],
                                                                                      same["source_tenant_id"])
    return out


def _mark_copies(rows: Sequence[Row], facts: RecordFacts) -> None:
    """``_copy_of``: why a candidate's source is another candidate's customer under a second id (the reason its
    finding goes to review), else None. A source exchange logged twice (:func:`sources_logged_twice`), and a passage
    whose two senders' ids the ingest found may name one customer (``tenant_aliases``: the records of one id hold
    the other in a later tenant field), each named the customer twice, once under an id not its own (a review):
    the copy under the id the case's logs hold fewer records under, or the alias's, goes to review."""
    by_target: dict[int, list[Row]] = {}
    for r in rows:
        r["_copy_of"] = None
        twin = facts.logged_twice.get((r["_target"], r["source_request_id"], r["source_tenant_id"]))
        if twin is not None:
            r["_copy_of"] = (f"this source is the exchange {twin[0]} of {twin[1]} logged again under another customer "
                             "id (the same answer and one request's prompt in the logs, at the same time): one "
                             f"customer, named by the id the case's logs hold the most of its records under, {twin[1]}; "
                             "if they are different customers, confirm this finding")
        elif r["relation"] == "cross_tenant":
            by_target.setdefault(r["_target"], []).append(r)
    if not facts.aliases:
        return
    held = facts.tenant_records

    def rank(tenant: str) -> tuple[int, str]:  # the id kept: the one the logs hold the most records under
        return (-held.get(tenant, 0), tenant)

    for group in by_target.values():
        for r in group:
            mine = str(r["source_tenant_id"])
            for s in group:
                theirs = str(s["source_tenant_id"])
                found = facts.aliases.get(frozenset((mine, theirs)))
                if found is None or mine == theirs or rank(theirs) > rank(mine) or not _mostly_inside(r, s):
                    continue
                tenant, field, other = found
                r["_copy_of"] = (f"the records of {tenant} hold {other} in {field}, a later tenant field: the two ids "
                                 f"may name one customer, and this passage's copy under {theirs} (request "
                                 f"{s['source_request_id']}), the id the case's logs hold the most of its records "
                                 "under, names it; if they are different customers, confirm this finding")
                break


def decide(groups: Iterable[list[CandidateRow]], targets: list[Target], p: MatchParams,
           facts: RecordFacts, holders: Holders | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Mechanism evidence, E-values and tiers of every candidate pair; the null model's record.

    ``groups``: the candidate rows, each group every row of its targets (:meth:`CandidateRows.groups`). A group at a
    time, the rows that are copies of another's passage (most of them) are dropped; the rest are decided together.
    Returns the rows (tier None: not notified, ``why_not_notified`` says why) and match.json's ``null`` section.
    """
    # Records received before each target completed, once per target (every row of a target reads it), and those
    # of them its search covered (a lookback, the suspect's decode node only).
    records_before = [facts.records_before(t.deadline_us) for t in targets]
    searched = [_records_searched(t, p, facts) for t in targets]
    # A search's size, per target, over the texts it searched (see SIZE_EXPONENT).
    search_before = {i: _search_size(len(t.tokens.hash) - p.k + 1, searched[i]) for i, t in enumerate(targets)}
    rows: list[dict[str, Any]] = []
    later: list[dict[str, Any]] = []
    own: list[CandidateRow] = []
    copies = 0
    for group in groups:
        kept, kept_later, own_copies, copied_on = _drop_copies(group, targets, p, facts)
        rows += kept
        later += kept_later
        own += own_copies
        copies += copied_on
    # As one read of every row gives them (see _collapsed).
    rows.sort(key=lambda r: (_row_order(r), r["_first_of_group"]))
    later.sort(key=lambda r: (_row_order(r), r["_first_of_group"]))
    for r in later:
        r["finding_id"] = finding_id(r)
    for r in rows:
        tgt = targets[r["_target"]]
        r["finding_id"] = finding_id(r)
        r["recipient_decode_node"] = tgt.decode_node
        known = tgt.received_us != NO_TIME and r["_source_received_us"] != NO_TIME
        r["seconds_before"] = (round((tgt.received_us - r["_source_received_us"]) / 1e6, 3) if known else None)
        r["recipient_damage"] = facts.damage.get((tgt.request_id, tgt.tenant_id))
        r["source_damage"] = facts.damage.get((r["source_request_id"], r["source_tenant_id"]))
        r["search_size"] = search_before[r["_target"]]
        # Only a source received before the suspect can have left the pages it decodes from: one received
        # after it (while it was still being answered) is no earlier occupant of the node, however close.
        r["_on_node_before"] = bool(r["same_decode_node"] and known and r["_source_received_us"] < tgt.received_us)
        r["_alias"] = _one_customer(r, facts)
    _mark_carried_on(rows, targets, p.k, holders)
    _explain_away([r for r in rows if r["_carried_from"] is None])
    for r in rows:
        r.setdefault("_explained_by", None)
        r["_explained_by_node"] = False
        tgt = targets[r["_target"]]
        before_it = r["_on_node_before"]
        r["records_since_source_on_node"] = (
            facts.records_since_on_node_at_most(tgt.decode_node or "", r["_source_received_us"], tgt.received_us)
            if before_it else None)
        # The records the logs place on the node: the window is placed by these (a gap in a log then narrows
        # it), a candidate is tested with the count above (a gap then moves its source further back).
        r["_records_since_placed"] = (facts.records_on_node_since(tgt.decode_node or "", r["_source_received_us"],
                                                                  tgt.received_us) if before_it else None)
    # Gateway logs only: no record is placed on a node, but the gateway still orders the requests, and stale pages
    # belong to requests of the case's models the service received shortly before the suspect, on whichever node.
    # The case's models: those of its case file, and those the suspects asked for or were routed to (the scan chose
    # them on the case file's models; a library call may give none).
    case_models = facts.case_deployments.union(*(facts.models.get((t.request_id, t.tenant_id), frozenset())
                                                 for t in targets if not t.control))
    model_times = facts.times_of(case_models) if not facts.node_share else np.zeros(0, np.int64)
    gateway_only = len(model_times) > 0
    for r in rows:
        tgt = targets[r["_target"]]
        r["records_since_source_on_model"] = (
            int(np.searchsorted(model_times, tgt.received_us, side="left")
                - np.searchsorted(model_times, r["_source_received_us"], side="left"))
            if gateway_only and _before_on_models(r, tgt, facts, case_models) else None)
    _prefer_the_node([r for r in rows if r["_carried_from"] is None])
    _explain_away(later)
    # The null: every cross-tenant pair a control response got is a chance match, and so is every pair a
    # suspect got with a later text (the same steps as for the findings: a pair explained by a stronger one
    # is no finding there either). Search sizes: response k-gram positions x records searched.
    controls = [i for i, t in enumerate(targets) if t.control]
    suspects = [i for i, t in enumerate(targets) if not t.control]
    total = len(facts.times)
    size_of = {i: search_before[i] for i in controls}
    size_of |= {i: _search_size(len(targets[i].tokens.hash) - p.k + 1,
                                total - records_before[i]) for i in suspects}
    # (a source logged twice under two ids is one chance match)
    null_rows = [r for r in rows if r["control"] and r["relation"] == "cross_tenant" and not r["_explained_by"]
                 and not r["_copy_of"]]
    null_rows += [r for r in later if not r["_explained_by"] and not r["_copy_of"]]
    model = chance.NullModel.fit([r["strength_bits"] for r in null_rows], sum(size_of.values()),
                                 len(controls) + len(suspects))
    for r in rows:
        r["expected_by_chance"] = float(f"{model.expected(r['strength_bits'], r['search_size']):.4g}")
    mechanism_known = bool(facts.node_share)
    # Per target, not per row: a suspect has hundreds of candidate rows, and each look-up is a search.
    # (within the search's lookback: a chance candidate's source can lie nowhere earlier)
    served_before = {i: facts.records_on_node_since(t.decode_node, search_start(t, p.lookback_us), t.received_us)
                     if t.decode_node else 0 for i, t in enumerate(targets)}
    # The size of each search had it covered only what the suspect's node can have served in it: the records the
    # logs place there and, of those of the engines' models they place nowhere, the ones it can be expected to have
    # served (all of them in a gap in its log, which hides its own among them), in the same bounds as the search (see
    # _records_searched). An E-value counts the chance matches expected, so the records expected, not the most.
    node_search = {i: _search_size(len(t.tokens.hash) - p.k + 1, min(searched[i], facts.records_on_node_expected(
                       t.decode_node, search_start(t, p.lookback_us), t.deadline_us)))
                   for i, t in enumerate(targets) if t.decode_node is not None}
    for r in rows:
        tgt = targets[r["_target"]]
        k = r["records_since_source_on_node"]
        share = _node_share(tgt, p, facts)
        before = served_before[r["_target"]]
        if k is not None:
            # Chance puts a source on the suspect's node, at least this recent, k times in the n records that
            # node served before the suspect.
            # At most 1 (no evidence either way): the records the logs place on no node can make k exceed the
            # records placed on the node before the suspect, and a source there is no worse than unknown.
            factor = min(max(k, 1) / max(before, 1), 1.0)
            factor_known = True
        elif tgt.decode_node is not None and 0.0 < share < 1.0 and not _in_a_gap(r, tgt, facts):
            # The engine logs put the source elsewhere (another node, or none: another model's request): not
            # where stale pages come from, so the text must carry what the mechanism does not: E grows by 1 /
            # the node's share.
            factor = 1.0 / share
            factor_known = True
        else:
            # The engine logs say nothing about this suspect, or about where this source ran (a gap in them):
            # the text alone decides. Read as "elsewhere", a gap made a leak weaker than no engine logs at all.
            factor = 1.0
            factor_known = False
        r["mechanism_factor"] = float(f"{factor:.4g}")
        # What the text alone is worth may also be read among the texts that could be the suspect's pages: where
        # the source ran on the suspect's decode node, its E-value had the search covered only the records that
        # node can have served in the suspect's search (tiers.text_stands). Read over the whole search only, the
        # same passage counted more chance matches the more nodes and customers the case had: merged into a
        # 5,300-customer incident, 1,152 true pairs went to review for that alone.
        r["_text_on_node"] = (float(f"{model.expected(r['strength_bits'], node_search[r['_target']]):.4g}")
                              if k is not None and 0.0 < share < 1.0 and r["_target"] in node_search else None)
        # The product ranks the candidates; its E-value counts the chance candidates of this search that a
        # product this small would let through (chance.with_mechanism), not the product itself.
        r["_mechanism"] = (share if factor_known else 0.0, before)
        r["_product_test"] = chance.with_mechanism(r["expected_by_chance"] * factor, r["_mechanism"][0],
                                                   model.expected(-math.inf, r["search_size"]), before)
    # The recent-occupant test (recent.py): its window is placed by what the product test alone confirms. With
    # gateway logs only it counts the records of the case's models the service received, on every node together
    # (the product test is then the text's E-value alone).
    placed_by, since_by = (("_records_since_placed", "records_since_source_on_node") if mechanism_known else
                           ("records_since_source_on_model", "records_since_source_on_model"))
    placed = [r[placed_by] for r in rows
              if not r["control"] and not r["_explained_by"] and r["relation"] == "cross_tenant"
              and r[placed_by] is not None
              and float(f"{r['_product_test']:.4g}") <= p.confirm_evalue and r["_singles_out"] >= p.probable_rarity]
    window = recent.choose_window(placed) if mechanism_known or gateway_only else None
    if mechanism_known and window is not None:
        _prefer_the_recent_occupant(rows, window)
    for r in rows:
        r["_in_window"] = recent.window_evalue(r["expected_by_chance"], r[since_by], window, searched[r["_target"]])
        combined = recent.combine(r["_product_test"], r["_in_window"], window)
        r["expected_by_chance_with_mechanism"] = float(f"{combined:.4g}")
        decision: tuple[str, str] | str
        if r["_carried_from"] is not None and p.tiering == "evalue":
            earlier = targets[r["_carried_from"]]
            decision = (f"{r['source_tenant_id']} had received this passage itself, in its suspect response "
                        f"{earlier.request_id}, before it sent this request: a conversation carrying leaked text on, "
                        f"not that customer's own text (the customer it came from is named where its copy matches)")
        elif r["_explained_by"] and p.tiering == "evalue" and r.get("_explained_by_recency"):
            decision = (
                f"the same response text matches another customer's text as strongly (finding {r['_explained_by']}), "
                f"whose copy was among the last {window} records the suspect's decode node served before it, where "
                f"stale pages are found to come from; this copy ran there {r['records_since_source_on_node']} records "
                f"before it")
        elif r["_explained_by"] and p.tiering == "evalue" and not r["_explained_by_node"]:
            decision = (
                f"the same response text matches another customer's text more strongly (finding "
                f"{r['_explained_by']}): this weaker likeness is what similar texts share")
        elif p.tiering == "rules":
            decision = r["_rule"] if r["_rule"] else "no fixed rule (R1, R2, R2b, R3) holds"
        else:
            tgt = targets[r["_target"]]
            # The own-prompt check saw only the head and tail of a truncated prompt: its hidden middle may hold
            # the passage (an answer quoting its own prompt), unless the model is shown never to have seen it.
            hidden = tgt.prompt_truncated and not (tgt.engine_signature or tgt.placeholder_usage)
            decision = evalue_tier(r["expected_by_chance_with_mechanism"], r["rarity"], p, r["_singles_out"],
                                   r["expected_by_chance"], hidden, on_node=r["_text_on_node"])
            if r["_explained_by"] and isinstance(decision, tuple):  # only then is the node what keeps it off
                decision = (
                    f"the same response text matches another customer's text as strongly (finding "
                    f"{r['_explained_by']}), whose copy ran on the suspect's decode node before it; this copy ran on "
                    f"another node, and stale pages come from the suspect's node")
            elif r["_ruled_out"] and isinstance(decision, tuple):  # likewise: said only where it decides
                decision = r["_ruled_out"]
            elif r["_alias"] and isinstance(decision, tuple):
                decision = r["_alias"]
            elif r["_copy_of"] and isinstance(decision, tuple):
                decision = r["_copy_of"]
        if isinstance(decision, tuple):
            r["tier"], r["tier_rule"], r["why_not_notified"] = decision[0], decision[1], None
        else:
            r["tier"], r["tier_rule"], r["why_not_notified"] = None, None, decision
    unexplained_controls = name_the_unexplained(rows, targets, p)
    points = [(r["_target"], r["strength_bits"], size_of[r["_target"]]) for r in null_rows]
    seen = {c for c, _, _ in points}
    points += [(i, float("nan"), size_of[i]) for i in size_of if i not in seen]
    # The controls again, each chance match with its decode-node evidence: the figure the tiers use,
    # checked where every match is known to be chance.
    # The last figure is the recent-occupant window's share of the records searched (0: the source lies
    # outside it; None: the test did not run), so the same two tests are checked on chance matches.
    def in_window(r: dict[str, Any]) -> float | None:
        if window is None:
            return None
        return 0.0 if math.isinf(r["_in_window"]) else recent.window_evalue(
            1.0, r[since_by], window, searched[r["_target"]])

    control_points = [(r["_target"], r["strength_bits"], size_of[r["_target"]], r["mechanism_factor"],
                       *r["_mechanism"], in_window(r)) for r in null_rows if r["control"]]
    seen_controls = {c for c, *_ in control_points}
    # A control with no chance match still says whether its decode node is known (the table's column).
    control_points += [(i, float("nan"), size_of[i], 1.0, _node_share(targets[i], p, facts), 0,
                        None if window is None else 0.0) for i in controls if i not in seen_controls]
    null_e = [(r, model.expected(r["strength_bits"], size_of[r["_target"]])) for r in null_rows]
    searches = len(size_of)
    rules: dict[str, Any] = {}
    control_null = [r for r in null_rows if r["control"]]
    for name in ("R1", "R2", "R2b", "R3"):
        hit = {r["_target"] for r in control_null if name in r["_null_rules"]}
        rules[name] = {"control_responses_with_match": len(hit),
                       "false_positive_rate": round(len(hit) / len(controls), 6) if controls else None}
    for name, limit in (("E1", p.confirm_evalue), ("E2", p.probable_evalue)):
        hit = {r["_target"] for r, e in null_e if e <= limit}
        rules[name] = {"null_searches_with_match": len(hit),
                       "false_positive_rate": round(len(hit) / searches, 6) if searches else None,
                       "expected_false_positives": round(limit * searches, 4),
                       "observed_false_positives": sum(1 for _, e in null_e if e <= limit)}
    if unexplained_controls is not None:
        # E3 on the controls, each treated as an engine-signature suspect (as R1-R3 are above): how often the
        # strongest chance candidate of a response with no finding is let through. Only a control whose
        # strongest E lies above probable_evalue (else E2 names it) and at most unexplained_evalue can be.
        rules["E3"] = {"control_responses_with_match": len(unexplained_controls),
                       "false_positive_rate": round(len(unexplained_controls) / len(controls), 6) if controls else None,
                       "expected_false_positives": round((p.unexplained_evalue - p.probable_evalue) * len(controls), 4),
                       "observed_false_positives": len(unexplained_controls)}
    null = {
        **model.record(),
        "strength": "sum over informative matched tokens of log2((N + 16) / (1 + df)), df = other target responses "
                    "holding the token, N = target responses",
        "search_size": "sqrt(response k-gram positions x records searched (before the response completed; for "
                       "the later-text null, after it))",
        "searches": {"control_responses": len(controls), "suspects_against_later_texts": len(suspects),
                     "chance_matches_from_controls": len(control_null),
                     "chance_matches_from_later_texts": len(null_rows) - len(control_null),
                     "later_texts_copying_the_suspect_left_out": copies,
                     "own_exchange_copies_left_out": len(own)},
        # The suspects' own: named, so that the report says which (a warning of the run alone was lost after it).
        "own_exchange_copies_of_suspects": sorted({
            (targets[r["_target"]].request_id, targets[r["_target"]].tenant_id or "", r["source_request_id"],
             r["source_tenant_id"] or "") for r in own if not r["control"]}),
        "decode_node_evidence": ("present: expected_by_chance_with_mechanism = the chance candidates a search "
                                 "expects with expected_by_chance x mechanism_factor at most this one's "
                                 "(chance.with_mechanism); mechanism_factor = records the suspect's decode node served since "
                                 "the source (with the records of the engine's models the logs place on no node) / "
                                 "records it served before the suspect when the source ran there before it, "
                                 "1 / that node's share of records when it ran elsewhere or on none, 1 when the "
                                 "suspect's node is unknown" if mechanism_known else
                                 "absent: no decode node in the exchanges (gateway logs only); mechanism_factor 1, "
                                 "and the recent-occupant test counts the records of the case's models the service "
                                 "received since the source, on every node together (records_since_source_on_model)"
                                 if gateway_only else
                                 "absent: no decode node in the exchanges (gateway logs only); findings rest on "
                                 "the text alone (mechanism_factor 1)"),

        "recent_occupants": recent.record(window, len(placed), "models" if gateway_only else "node"),
        "rules": rules,
        "calibration": chance.calibration(points),
        "calibration_of_controls_with_mechanism": chance.calibration(points, control_points, window_alone=gateway_only),
    }
    return rows, null


def _drop_copies(pairs: list[CandidateRow], targets: list[Target], p: MatchParams, facts: RecordFacts
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[CandidateRow], int]:
    """Of the candidate rows ``pairs`` (every row of their targets), those :func:`decide` goes on with, as dicts: the
    rows kept, and the later-text rows of the null, each of them without the copies of one customer's passage
    (:func:`_collapse_same_tenant_copies`), in :func:`_row_order`; the rows that are a target's own exchange logged
    again, and how many later texts copy the suspect on (both left out)."""
    # A target's own exchange logged again under another id is neither a finding nor a chance match (see
    # own_exchange_copies): left out, counted (and named in the stage's warnings).
    own = [r for r in pairs if (r["_target"], r["source_request_id"], r["source_tenant_id"]) in facts.own_copies]
    if own:
        pairs = [r for r in pairs if (r["_target"], r["source_request_id"], r["source_tenant_id"]) not in facts.own_copies]
    _mark_copies(pairs, facts)
    # Matches of a suspect with texts that arrived after it are chance (they cannot be the cause), unless the
    # same customer also sent that text earlier (a conversation resends itself): those are left out.
    # A later text sharing a long exact run with the suspect (2 x min_run tokens) copies it on (someone pasted
    # the answer): the reverse of a leak, not a chance likeness; those are left out too.
    earlier = {(r["_target"], customer_key(r["source_tenant_id"])) for r in pairs if not r["_later"]}
    later_pairs = [r for r in pairs if r["_later"] and r["relation"] == "cross_tenant"
                   and (r["_target"], customer_key(r["source_tenant_id"])) not in earlier]
    copies = sum(1 for r in later_pairs if r["longest_run"] >= 2 * p.min_run)
    later_pairs = [r for r in later_pairs if r["longest_run"] < 2 * p.min_run]
    pairs = [r for r in pairs if not r["_later"]]
    # Only what tells a passage's copies apart (_collapse_same_tenant_copies); decide sets the rest for the rows it
    # keeps, each a dict from then on: most rows are copies of a kept row's passage (on the 1 GB benchmark incident,
    # of 114k rows 10k are kept).
    for pair in itertools.chain(pairs, later_pairs):
        tgt = targets[pair["_target"]]
        src_node = facts.node.get((pair["source_request_id"], pair["source_tenant_id"]))
        pair["source_decode_node"] = src_node
        pair["same_decode_node"] = (None if tgt.decode_node is None or src_node is None
                                    else tgt.decode_node == src_node)
    for pair in pairs:
        tgt = targets[pair["_target"]]
        pair["_unserved"] = _unserved_models(pair, tgt, facts)
        pair["_ruled_out"] = _ruled_out_by_engine(pair, tgt, facts)
    return _collapsed(pairs), _collapsed(later_pairs, mind_ruled_out=False), own, copies


def _collapsed(pairs: list[CandidateRow], mind_ruled_out: bool = True) -> list[dict[str, Any]]:
    """:func:`_collapse_same_tenant_copies` of ``pairs`` (in the order found), each row kept as a dict with
    ``_first_of_group``: where its (target, customer) first came in the order found, which orders two rows
    :func:`_row_order` cannot (two targets of one request id and tenant, such as two records of a control) as
    one read of every row did."""
    first: dict[tuple[int, Any], int] = {}
    for r in pairs:
        first.setdefault((r["_target"], customer_key(r["source_tenant_id"])), r["_found"])
    out = []
    for r in _collapse_same_tenant_copies(pairs, mind_ruled_out):
        row = r.as_dict()
        row["_first_of_group"] = first[(r["_target"], customer_key(r["source_tenant_id"]))]
        out.append(row)
    return out


def _before_on_models(r: dict[str, Any], tgt: Target, facts: RecordFacts, case_models: frozenset[str]) -> bool:
    """Whether a candidate's source was received before the suspect and asked for (or was routed to) one of the case's
    models: only then can its pages be the ones the suspect decoded from, on whichever node it ran. The suspect's own
    model is not asked: a suspect is on the case's models, and a control response, whatever its model, stands in for
    one (so the controls check the test as the suspects get it)."""
    if tgt.received_us == NO_TIME or r["_source_received_us"] == NO_TIME or r["_source_received_us"] >= tgt.received_us:
        return False
    return not case_models.isdisjoint(facts.models.get((r["source_request_id"], r["source_tenant_id"]), frozenset()))


def name_the_unexplained(rows: list[dict[str, Any]], targets: list[Target], p: MatchParams) -> set[int] | None:
    """E3: tier ``probable`` the strongest candidate of each suspect that decoded from stale pages (the engine
    signature, or, in the gateway's logs, usage counting the placeholder's one prompt token) and has no finding, when
    its ``expected_by_chance_with_mechanism`` is at most ``unexplained_evalue`` (above ``probable_evalue`` E2
    already holds). Returns the control responses it would name, each treated as an engine-signature suspect:
    the rule's null (their rows keep their tiers, as the old rules' check on them does); None when E3 is off.

    Such a suspect decoded from stale pages: it holds some earlier request's text, and
    the question for it is whose, not whether. When nothing else explains its pages, its strongest candidate
    is the likeliest answer. It must be strongest among all its candidates: its own customer's, and one
    explained away by another customer's stronger text (the two kinds of evidence then disagree), included.
    A tie with another customer names neither. Its text must single the source out (rarity) and not be
    ordinary on its own (tiers.text_stands). Measured on the realistic scenario (seeds 1-3 and 5-7; README
    "The evidence model"); a suspect that already has a finding gets nothing more from it.
    """
    if p.tiering != "evalue" or p.unexplained_evalue <= p.probable_evalue:
        return None
    named: set[int] = set()
    by_target: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_target.setdefault(r["_target"], []).append(r)

    def likelihood(r: dict[str, Any]) -> tuple[bool, float, str]:
        e = r["expected_by_chance_with_mechanism"]
        return (math.isnan(e), e, r["finding_id"])  # an E that could not be computed never comes first

    for t, group in by_target.items():
        tgt = targets[t]
        if not (tgt.control or tgt.engine_signature or tgt.placeholder_usage) or any(r["tier"] for r in group):
            continue
        # A source logged again under another id is its kept copy's candidate (sources_logged_twice), not another.
        group = [r for r in group if not r.get("_copy_of")]
        if not group:
            continue
        best = min(group, key=likelihood)
        e = best["expected_by_chance_with_mechanism"]
        # The strongest candidate is a copy the engine logs rule out as the pages: the text's best answer to
        # "whose pages" is ruled out, and a weaker one is most often a likeness of it; E3 names no one. So too
        # when it may be the recipient's own text under another id of its customer.
        if (best.get("_ruled_out") or best.get("_alias") or best["_explained_by"] or best.get("_carried_from") is not None
                or any(r["expected_by_chance_with_mechanism"] == e
                       and not same_customer(r["source_tenant_id"], best["source_tenant_id"]) for r in group)):
            continue
        if not (best["relation"] == "cross_tenant" and e <= p.unexplained_evalue and best["rarity"] >= p.probable_rarity
                and text_stands(best["expected_by_chance"], best.get("_text_on_node"))):
            continue
        if tgt.control:
            named.add(t)
            continue
        best["tier"], best["why_not_notified"] = "probable", None
        shown = "engine signature" if tgt.engine_signature else "its gateway usage counts the one-token placeholder"
        best["tier_rule"] = (f"E3: the strongest candidate of a suspect with no finding that decoded from stale pages "
                             f"({shown}), expected_by_chance_with_mechanism<={p.unexplained_evalue:g}")
    return named


#: Chance matches grow with the square root of (response k-gram positions x records searched), not in
#: proportion: with exponent 1 the held-out null of the realistic scenario (seeds 1-3) saw 2.5-3.2x the
#: chance matches expected at E <= 0.01 and 0.5-0.6x at E <= 0.5; with 0.5, 0.6-1.5x at E <= 0.01 to
#: 0.1 on every seed (benchmarks/quality.py prints the table).
SIZE_EXPONENT = 0.5


def _records_searched(t: Target, p: MatchParams, facts: RecordFacts) -> int:
    """The records a target's search covered, within the bounds the streaming pass applies (stream.Scanner):
    received before it completed, and since :func:`~forensics.match.stream.search_start`; with ``same_decode_node``, decoded on its node
    (none when that is unknown)."""
    since = search_start(t, p.lookback_us)
    if p.same_decode_node:
        return facts.records_on_node_since(t.decode_node, since, t.deadline_us) if t.decode_node else 0
    return facts.records_before(t.deadline_us) - facts.records_before(since)


def _node_share(t: Target, p: MatchParams, facts: RecordFacts) -> float:
    """The share of the records searched for ``t`` that ran on its decode node (0: unknown): the node's share of
    the records placed on a node; 1 when the search was held to that node (``same_decode_node``), every chance
    candidate then found there."""
    if p.same_decode_node and t.decode_node:
        return 1.0
    return facts.node_share.get(t.decode_node or "", 0.0)


def _search_size(positions: int, records: float) -> float:
    """The size of one search: sqrt(response k-gram positions x records searched), see SIZE_EXPONENT."""
    return float(max(positions, 0) * max(records, 0)) ** SIZE_EXPONENT


#: Share of a passage's k-grams found in the source customer's own earlier suspect response that makes the
#: source's copy a carried-on one (see :func:`_mark_carried_on`).
CARRIED_SHARE = 0.5


def _mark_carried_on(rows: list[dict[str, Any]], targets: list[Target], k: int, holders: Holders | None = None) -> None:
    """Set ``_carried_from`` on each cross-tenant row whose source customer had itself received the passage
    in one of its suspect responses, completed before the source request was sent (the target's index),
    else None.

    A chat client resends the conversation, leaked answer included: the customer a suspect response leaked
    to then holds the leaked text in its own next prompt, and a later suspect holding the same text matches
    that copy as well as the original. The text is not that customer's; its original sender's copy names
    the right one. A passage counts as received when at least :data:`CARRIED_SHARE` of its k-grams came to
    the customer in such earlier suspect responses (several answers that each leaked a part count together)
    and the customer had not sent them itself before the first answer that gave it each (``holders``): a
    suspect answer quoting the customer's own text back leaves it the customer's own.
    """
    # Per customer, its suspects by completion time (and index): those completed by a time are a prefix.
    by_tenant: dict[str | None, list[int]] = {}
    for i, t in enumerate(targets):
        if not t.control and t.gids is not None and len(t.gids) and t.deadline_us != NO_TIME:
            by_tenant.setdefault(customer_key(t.tenant_id), []).append(i)
    for ids in by_tenant.values():
        ids.sort(key=lambda i: (targets[i].deadline_us, i))
    deadlines = {tenant: [targets[i].deadline_us for i in ids] for tenant, ids in by_tenant.items()}
    kgrams: dict[int, np.ndarray] = {}
    for r in rows:
        r["_carried_from"] = None
        received = r["_source_received_us"]
        if r["relation"] != "cross_tenant" or received == NO_TIME:
            continue
        theirs = by_tenant.get(customer_key(r["source_tenant_id"]))
        if theirs is None:
            continue
        earlier = [i for i in theirs[:bisect.bisect_right(deadlines[customer_key(r["source_tenant_id"])], received)]
                   if i != r["_target"]]
        if not earlier:
            continue  # most sources: their customer received no suspect response before
        tgt = targets[r["_target"]]
        starts = tgt.tokens.start
        spans = []
        for a, b, _, _ in r["passages"]:
            i0, i1 = int(np.searchsorted(starts, a, "left")), int(np.searchsorted(starts, b, "left"))
            spans.append(tgt.gids[i0:max(i0, i1 - k + 1)])
        g = np.unique(np.concatenate(spans))
        if not len(g):
            continue
        # K-gram by k-gram: when a suspect answer first gave the customer each one (answers that each leaked a
        # part count together), and whether the customer had sent it itself before then (its own text).
        first = np.full(len(g), NO_TIME_MAX, dtype=np.int64)
        giver = np.full(len(g), -1, dtype=np.int64)
        for i in earlier:  # by completion time
            if i not in kgrams:
                kgrams[i] = np.unique(targets[i].gids)
            new = _members(g, kgrams[i]) & (giver < 0)
            first[new], giver[new] = targets[i].deadline_us, i
        carried = giver >= 0
        if holders is not None and carried.any():
            start, h_tenant, h_time, _, _ = holders
            seg, flat = holder_entries(start, g)
            own = (h_tenant[flat] == tenant_code(r["source_tenant_id"])) & (h_time[flat] < first[seg])
            carried[np.unique(seg[own])] = False  # the customer had sent it itself before: its own text
        if int(carried.sum()) >= CARRIED_SHARE * len(g):
            r["_carried_from"] = int(giver[carried][np.argmin(first[carried])])  # the first answer to give it


def _members(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """``np.isin(values, sorted_set)`` for a sorted, unique ``sorted_set``: one binary search per value
    (``isin`` sorts both arrays again at every call, and the carried-on test calls it per earlier answer)."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return sorted_set[at] == values


def _explain_away(rows: list[dict[str, Any]]) -> None:
    """Mark each cross-tenant pair whose passages lie mostly inside a stronger pair's passages
    with another source tenant (``_explained_by``: that pair's finding id, else None).

    Stale pages leak one customer's text; another customer's similar text (the same form filled
    with other values, another article on the same subject) then matches the leaked passage
    too, more weakly. The response text is explained by the stronger source; the weaker likeness
    is what similar texts share. Pairs of equal strength (the same passage sent by both) stay.

    A stronger copy the engine logs rule out (:func:`_ruled_out_by_engine`) still explains a weaker one away,
    even one whose source ran on the suspect's node: letting such a pair stand named three more wrong customers
    on seeds 2-3 of the realistic scenario (a few words on the node that a long document elsewhere also holds)
    and no true one.
    """
    by_target: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        r["_explained_by"] = None
        if r["relation"] == "cross_tenant":
            by_target.setdefault(r["_target"], []).append(r)
    for group in by_target.values():
        group.sort(key=lambda r: (-r["strength_bits"], r["finding_id"]))
        for i, r in enumerate(group):
            for s in group[:i]:
                if s["strength_bits"] <= r["strength_bits"] or same_customer(s["source_tenant_id"], r["source_tenant_id"]):
                    continue
                if _mostly_inside(r, s):
                    r["_explained_by"] = s["finding_id"]
                    break


def _ruled_out_by_engine(r: Row, tgt: Target, facts: RecordFacts) -> str | None:
    """Why this cross-tenant source copy cannot be the stale pages the suspect decoded from, or None. Each
    reason rests on what the logs show, never on what they lack:
    - a prompt the engine refused as over its limit (the over-limit line ingest took as its count: not one of
      another request under the id) that no line shows prefilled after all: no KV cache held it;
    - with the suspect's decode node known: a copy decoded on another node (none of the nodes the engine logs
      show either request decoded on, a retry included, in common) at a time the suspect's node's own log was
      running (a node whose log files are named per day is not "another node" outside its day);
    - with the suspect's decode node known: a copy whose node is unknown, sent to a model no engine serves (no
      record placed on a node, nor the case's own models, asked for it, compared as deployments) and not the
      suspect's model: another deployment, and a KV pool serves one model.
    A copy whose node is simply unknown stays as the text leaves it. Such a pair goes to review with this
    reason; it still explains weaker likenesses away (:func:`_explain_away`).
    """
    if r["relation"] != "cross_tenant":
        return None
    key = (r["source_request_id"], r["source_tenant_id"])
    if r["source_kind"] == "prompt" and key in facts.unprefilled:
        return ("the engine logs show this request refused as over the engine's limit and never prefilled: its "
                "prompt reached no KV cache, so no stale page holds it (the text may still come from another copy)")
    if tgt.decode_node is None:
        return None
    src_node = r["source_decode_node"]
    if r["same_decode_node"] is False and src_node is not None:
        ran_on = facts.decode_nodes.get(key, frozenset({src_node}))
        suspect_on = facts.decode_nodes.get((tgt.request_id, tgt.tenant_id), frozenset({tgt.decode_node}))
        if not ran_on & suspect_on and facts.logging_at(tgt.decode_node, r["_source_received_us"]):
            return (f"the engine logs place this copy on decode node {src_node} and the suspect on "
                    f"{tgt.decode_node}, whose log was running then: stale pages come from the suspect's own node "
                    f"(the text may still come from another copy, or an earlier attempt of a retried call, that the "
                    f"logs do not show)")
        return None
    sent_to = r["_unserved"]
    if sent_to:
        return (f"this copy was sent to {', '.join(sorted(sent_to))}, a model no engine node served (no record the "
                f"engine logs place on a node asked for it, nor is it one of the case's models): another deployment "
                f"(a KV pool serves one model), so no stale page of the suspect's node holds it (unless a first "
                f"attempt of a call that fell back to it ran on the engines)")
    return None


def _in_a_gap(r: dict[str, Any], tgt: Target, facts: RecordFacts) -> bool:
    """Whether a candidate's source is a request the engine logs place on no node although it was answered and sent
    to a model their nodes serve, or to the suspect's own: a gap in the logs (a node's file missing, an hour rotated
    away, a request id two customers sent, which no engine line can be given to), which says nothing of where it ran.
    A source sent to another model (another deployment: its own KV pool) is no gap, nor is one the gateway logged as
    failed (most never reached an engine: a review found every source the rule first took, on seeds 1-6, to be such
    a call, one of them named on the list) or one the engine logs show refused."""
    key = (r["source_request_id"], r["source_tenant_id"])
    if r["source_decode_node"] is not None or key in facts.failed or key in facts.engine_refused:
        return False
    return _served(facts.models.get(key, frozenset()), tgt, facts)


def _served(sent_to: frozenset[str], tgt: Target, facts: RecordFacts) -> bool:
    """Whether a request sent to the deployments ``sent_to`` went where the suspect's stale pages can come from: a
    model the engine nodes serve, or the suspect's own."""
    return bool(sent_to & facts.engine_models or sent_to & facts.models.get((tgt.request_id, tgt.tenant_id), frozenset()))


def _one_customer(r: dict[str, Any], facts: RecordFacts) -> str | None:
    """Why a cross-tenant pair's two customer ids may name one customer, or None: the records of one hold the
    other's id in a later tenant field (a team's key with no organisation set names the team, the team's other
    records its organisation). Named on the list, a customer's own text read as another's (a review): such a pair
    goes to review, where an analyst who knows the two are different customers confirms it."""
    if r["relation"] != "cross_tenant":
        return None
    found = facts.aliases.get(frozenset((str(r["recipient_tenant_id"]), str(r["source_tenant_id"]))))
    if found is None:
        return None
    tenant, field, other = found
    return (f"the records of {tenant} hold {other} in {field}, a later tenant field: the two ids may name one customer "
            f"(a team's key with no organisation set, beside the team's records that name its organisation), and a "
            f"customer's own text is no exposure; if they are different customers, confirm this finding")


def _unserved_models(r: Row, tgt: Target, facts: RecordFacts) -> frozenset[str]:
    """The models (deployments) a cross-tenant source copy whose node is unknown was sent to, when no engine
    node served them and the suspect, whose node is known, did not ask for them (see
    :func:`_ruled_out_by_engine`); else empty."""
    if r["relation"] != "cross_tenant" or tgt.decode_node is None or r["source_decode_node"] is not None:
        return frozenset()
    sent_to = facts.models.get((r["source_request_id"], r["source_tenant_id"]), frozenset())
    if facts.engine_models and sent_to and not _served(sent_to, tgt, facts):
        return sent_to
    return frozenset()


def unserved_in_review(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Per model no engine node served: the candidates in review for that reason alone (a customer's copy sent to
    it), so that an alias of the case's model the case file does not list shows up."""
    counts: dict[str, int] = {}
    for r in rows:
        if not r["control"] and not r["tier"] and r["_unserved"] and r["why_not_notified"] == r["_ruled_out"]:
            for name in r["_unserved"]:
                counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def _mostly_inside(r: Row, s: Row) -> bool:
    """Whether at least half of pair ``r``'s passages (their recipient characters) lie inside ``s``'s."""
    own = sum(b - a for a, b, _, _ in r["passages"])
    shared = sum(max(0, min(b, d) - max(a, c)) for a, b, _, _ in r["passages"] for c, d, _, _ in s["passages"])
    return bool(own) and shared * 2 >= own


def _prefer_the_node(rows: list[dict[str, Any]]) -> None:
    """Where the text cannot tell two customers apart, let the engine logs: mark each cross-tenant pair,
    not yet explained, whose passages lie mostly inside those of another customer's pair at least as strong
    (the same passage sent by both: :func:`_explain_away` keeps both) when that pair's source ran on the
    suspect's decode node before it and this one's on another node of the engine logs. Stale pages come from
    the suspect's node: the text then names one customer, not two. ``_explained_by`` is that pair's finding
    id, ``_explained_by_node`` True.

    Only a known other node decides: with the suspect's node or the source's unknown (gateway logs only, a
    gap in the engine logs, another model's records) both pairs stay, as the text alone leaves them, and so
    do they when the other copy ran on the suspect's node too, even after it arrived (timestamps of a second,
    or clocks a little apart, cannot order two records that close).
    """
    by_target: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r["relation"] == "cross_tenant" and not r["_explained_by"]:
            by_target.setdefault(r["_target"], []).append(r)
    for group in by_target.values():
        on_node = [s for s in group if s["records_since_source_on_node"] is not None]
        if not on_node:
            continue
        for r in group:
            if r["same_decode_node"] is not False:
                continue
            for s in sorted(on_node, key=lambda s: (-s["strength_bits"], s["finding_id"])):
                if s["strength_bits"] < r["strength_bits"] or same_customer(s["source_tenant_id"], r["source_tenant_id"]):
                    continue
                if _mostly_inside(r, s):
                    r["_explained_by"], r["_explained_by_node"] = s["finding_id"], True
                    break


def _prefer_the_recent_occupant(rows: list[dict[str, Any]], window: int) -> None:
    """Where two customers sent the passage and both copies ran on the suspect's decode node before it, let the order
    there decide: mark each cross-tenant pair, not yet explained, whose source ran more than ``window`` records before
    the suspect (the recent-occupant window the case's own confirmed findings place) and whose passages lie mostly
    inside those of another customer's pair at least as strong whose source is within it. Stale pages come from the
    node's recent occupants: a public text two customers pasted named both, the one pasted 600 records back too (a
    review). ``_explained_by`` is that pair's finding id, ``_explained_by_recency`` True. Two copies both in the window,
    or both beyond it, stay, as the text leaves them."""
    by_target: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        if r["relation"] == "cross_tenant" and not r["_explained_by"] and r["records_since_source_on_node"] is not None:
            by_target.setdefault(r["_target"], []).append(r)
    for group in by_target.values():
        # Not a copy carried on (its customer had received the passage: the customer it came from is named where its
        # copy matches, and a review found the true source sent to review by such a copy) nor one the engine rules out.
        recent_ones = sorted((s for s in group if 1 <= s["records_since_source_on_node"] <= window
                              and s["_carried_from"] is None and not s["_ruled_out"]),
                             key=lambda s: (-s["strength_bits"], s["finding_id"]))
        for r in group:
            if r["records_since_source_on_node"] <= window:
                continue
            for s in recent_ones:
                if s["strength_bits"] >= r["strength_bits"] and not same_customer(s["source_tenant_id"], r["source_tenant_id"]) \
                        and _mostly_inside(r, s):
                    r["_explained_by"], r["_explained_by_recency"] = s["finding_id"], True
                    break


#: Which copy of a passage :func:`_collapse_same_tenant_copies` keeps first: on the suspect's decode node, unknown, elsewhere.
_NODE_RANK = {True: 0, None: 1, False: 2}


def _collapse_same_tenant_copies(rows: list[R], mind_ruled_out: bool = True) -> list[R]:
    """One row per passage and source tenant: a tenant that sent the same text in several requests
    (every turn of a conversation resends it) exposed it once.

    Among rows of one recipient and one source tenant, a row whose passage (its strongest) overlaps
    one of a kept row's passages by at least half of the shorter span is a copy of it; one is kept:
    a copy the engine logs do not rule out first (:func:`_ruled_out_by_engine`: a customer is ruled out only
    where every copy of the passage is), a source on the recipient's decode node next (where stale pages come
    from), then the one whose copy of that passage matches best, then the most recent (the latest occupant's);
    ``other_source_requests`` counts the rest. The null keeps its copies as before the engine's rule: the
    control responses' rows (whose strengths the null is fitted to, like the later-text rows, collapsed with
    ``mind_ruled_out`` False) must not lean to weaker chance matches.

    Copies are compared on the passage they share (the row's strongest), not on the pair's total:
    an older copy that also shares some other phrase with the response is no likelier the source
    of this passage than the latest copy, and citing it moved the decode-node evidence (records
    since the source) back to the older request.
    """
    def rank(r: Row) -> tuple[Any, ...]:
        return (mind_ruled_out and not r["control"] and r["_ruled_out"] is not None, _NODE_RANK[r["same_decode_node"]],
                -r["_main_bits"], -r["_source_received_us"], r["source_request_id"], r["source_kind"])

    groups: dict[tuple[int, Any], list[R]] = {}
    for r in rows:
        groups.setdefault((r["_target"], customer_key(r["source_tenant_id"])), []).append(r)
    out = []
    for group in groups.values():
        if len(group) == 1:  # most (recipient, source tenant) pairs: one row, nothing to collapse
            group[0]["other_source_requests"] = 0
            out.append(group[0])
            continue
        kept: list[R] = []
        for r in sorted(group, key=rank):
            a, b = r["recipient_start"], r["recipient_end"]
            for k in kept:
                # Against every passage the kept row lists, not only its strongest: a passage it already
                # lists is not a new one because another copy matches it best there.
                if any((min(b, d) - max(a, c)) * 2 >= min(b - a, d - c) for c, d, _, _ in k["passages"]):
                    k["other_source_requests"] += 1
                    break
            else:
                r["other_source_requests"] = 0
                kept.append(r)
        out.extend(kept)
    out.sort(key=_row_order)
    return out


def _row_order(r: Row) -> tuple[Any, ...]:
    """Evidence rows by recipient request id, source request id (outputs.md's order; two customers may send one id:
    then by the recipient's tenant, the source's), kind, start."""
    recipient = request_key(r["recipient_request_id"], r["recipient_tenant_id"])
    source = request_key(r["source_request_id"], r["source_tenant_id"])
    return (recipient[0], source[0], recipient, source, r["source_kind"], r["recipient_start"])


def _tenant_part(tenant: str | None) -> str:
    """A tenant id as part of a finding id's key (no tenant is a value no tenant id can be)."""
    return "\x00" if tenant is None else tenant


def passages_text(passages: list[tuple[int, int, int, int]]) -> str:
    """``recipient_start:recipient_end=source_start:source_end`` per passage, ``;``-joined."""
    return ";".join(f"{a}:{b}={c}:{d}" for a, b, c, d in passages)


#: Columns of the evidence CSVs shown with a fixed number format (the Parquet tables keep the values).
CSV_FORMATS = {"score": "{:.2f}", "rarity": "{:.4f}", "expected_by_chance": "{:.3g}"}


def csv_text(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> str:
    """The evidence or review CSV of ``rows``: ``columns`` in order, a few numbers in fixed formats."""
    shown = []
    for c in columns:
        values = [r.get(c) for r in rows]
        fmt = CSV_FORMATS.get(c)
        if fmt is not None:
            # A boolean is shown as true/false like any other (csvfile.cell), never as a number.
            values = [v if v is None or type(v) is bool else fmt.format(v) for v in values]
        shown.append(values)
    return csvfile.csv_text_of_columns(columns, shown)
