"""The incident's mechanism: tenants, requests, prefill/decode nodes, KV pool slots, stale pages.

The simulation walks a timeline in order of arrival. Each request belongs to a tenant with its
own habits, asks for one of several models, and has a prompt length drawn from a distribution
with a tail above the real pool ceiling (plus prompts placed just below and just above it).
Requests on the affected model run on a prefill/decode deployment whose decode nodes hold a
pool of slots; a slot keeps the KV pages of the requests it last served. Inside the incident
window the engine has the placeholder bug: a prompt above the ceiling is logged as over the
limit, replaced by a one-token placeholder, "transferred", and the decode node generates from
whatever stale pages the slot holds, so the answer weaves in (damaged) fragments of the previous
occupants' prompts or responses. Outside the window the same engine rejects such prompts.

The ``realistic`` scale (which needs a corpus) makes the traffic harder to read: real text in
prompts and answers, system prompts copied whole by groups of tenants or filled in from shared
templates, forms many tenants fill in with their own values, popular passages and code that
groups of tenants paste, answers that often quote their own prompt, and garbage decoding that
emits natural sentences no tenant sent, which overlap the tenants' text where natural language
does (common phrases), never by a copied run of 12 tokens or more. Those chance overlaps are
unlabelled on purpose: they are what a matcher must not take for leaks.

Everything a later stage should find, and every trap it should not fall into, is recorded in
the truth (see :mod:`forensics.lab.simulate`).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import hashlib
import math
import random
import uuid
from collections.abc import Callable
from typing import Any, Literal

from faker import Faker

from forensics import schema
from forensics.lab.simulate import events as ev
from forensics.lab.simulate import text as tx

AFFECTED_MODEL = "glm-5.3"
#: (model the customer asks for, routed deployment name, affected by the bug)
MODELS = (
    (AFFECTED_MODEL, "openai/glm-5.3", True),
    ("qwen3-235b-a22b", "hosted_vllm/qwen3-235b-a22b", False),
    ("llama-4-maverick", "openai/llama-4-maverick", False),
)

WINDOW_START = dt.datetime(2026, 8, 27, tzinfo=dt.UTC)
#: A shared-boilerplate hard negative quotes text at least this many tenants besides the recipient
#: sent before it (the matcher holds text of more than 2 tenants to be common, not anyone's secret).
COMMON_TENANTS = 3


@dataclasses.dataclass(frozen=True)
class Scale:
    """Size of a simulated incident."""

    name: str
    ceiling: int  # real pool size (max_total_num_tokens)
    advertised: int  # context_len, the advertised window
    tenants: int
    requests: int
    days_before: int
    window_days: int
    days_after: int
    prefill_nodes: int
    decode_nodes: int
    slots: int
    pool_paragraphs: int
    p_big_affected: float  # chance a request on the affected model has a prompt above the ceiling
    p_big_other: float
    p_near: float  # chance of a prompt just below, and again just above, the ceiling
    median_tokens: int
    max_answer_tokens: int
    #: Realistic traffic (needs a corpus): prompts and answers of real text, templates and popular passages
    #: that groups of tenants share, garbage decoding of natural sentences. Off for the original scales.
    realistic: bool = False
    #: Fragment lengths as (lowest, highest tokens, weight) buckets; None: the original mix.
    fragment_mix: tuple[tuple[int, int, float], ...] | None = None


SCALES: dict[str, Scale] = {
    # Scaled-down deployment (pool of 8,192 tokens) so dozens of suspects fit in a few MB.
    "small": Scale("small", 8192, 16384, 12, 440, 1, 3, 1, 2, 2, 6, 60, 0.2, 0.01, 0.035, 450, 450),
    # The real deployment of the reference incident: 681,280-token pool, 1,048,576 advertised.
    "medium": Scale("medium", 681280, 1048576, 24, 2500, 2, 5, 2, 3, 3, 12, 160, 0.012, 0.002, 0.004, 1800, 900),
    "large": Scale("large", 681280, 1048576, 40, 13500, 3, 8, 3, 4, 4, 16, 240, 0.02, 0.003, 0.004, 3500, 1200),
    # Realistic traffic at the scaled-down pool: 220 tenants, some 15,000 requests of corpus text (needs --corpus),
    # many short fragments (a third of them 8-15 tokens) so recall by length is measurable.
    "realistic": Scale("realistic", 8192, 16384, 220, 23000, 2, 4, 1, 3, 3, 12, 60, 0.045, 0.004, 0.004, 400, 600,
                       realistic=True, fragment_mix=((4, 7, 0.06), (8, 15, 0.34), (16, 63, 0.3), (64, 255, 0.2), (256, 400, 0.1))),
}


def iso_z(t: float) -> str:
    """UTC ISO 8601 with ``Z`` and microseconds (truth and split logs)."""
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclasses.dataclass
class Tenant:
    """A customer and its habits."""

    tenant_id: str
    name: str
    kinds: tuple[str, ...]
    weight: float
    model_weights: tuple[float, ...]
    p_big: float
    system_prompt: str
    system_shared: bool
    p_stream: float
    p_parts: float
    p_boilerplate: float
    p_quote: float
    users: tuple[str, ...]
    team_id: str
    key_hash: str
    key_alias: str
    pool: list[str]
    answers: list[str]
    form: int | None = None  # realistic: the shared form (tx.FORMS) this tenant fills in
    popular: tuple[int, ...] = ()  # realistic: the popular passages (Simulation.popular) this tenant pastes
    p_popular: float = 0.0


@dataclasses.dataclass
class PromptSpec:
    """Everything needed to rebuild a prompt (prompts are rebuilt, not kept in memory)."""

    tenant: int
    seed: int
    target_chars: int
    parts: bool
    boilerplate: str | None  # "mit_license" | "article" | None
    injected: list[str] = dataclasses.field(default_factory=list)
    popular: int | None = None  # realistic: index of a popular passage (Simulation.popular) the prompt carries


@dataclasses.dataclass
class Prompt:
    """A built prompt: the messages as sent, the canonical text and labelled regions of it."""

    messages: list[dict[str, Any]]
    text: str
    regions: list[tuple[int, int, str, str]]  # (start, end, kind, label); kind private|shared|injected


@dataclasses.dataclass
class Occupant:
    """The request whose KV pages a decode slot holds."""

    index: int
    request_id: str
    tenant: int
    spec: PromptSpec
    response_text: str
    received: float
    completed: float
    suspect: bool


@dataclasses.dataclass
class Exchange:
    """One request as the gateway saw it, ready for the writers."""

    index: int
    request_id: str
    tenant: Tenant
    user_id: str
    model: str
    model_routed: str
    received: float
    first_token: float
    completed: float
    status: str  # success | failure
    status_code: int
    messages: list[dict[str, Any]]
    prompt_text: str
    response_text: str
    stream: bool
    finish_reason: str | None
    max_tokens: int
    reported_prompt_tokens: int | None
    completion_tokens: int
    error: str | None
    error_class: str | None
    incomplete: bool = False  # split logs: the request was never answered
    request_lost: bool = False  # split logs: the request line was rotated away, only the response is left


class Simulation:
    """One simulated incident. :meth:`run` drives it and calls the two sinks."""

    def __init__(self, seed: int, scale: Scale, corpus: tx.Corpus | None = None,
                 corpus_part: tuple[int, int] | None = None) -> None:
        self.seed = seed
        #: (part, parts): this incident's tenants own only that share of the corpus's documents (see ``simulate``).
        self.corpus_part = corpus_part
        self.scale = scale
        self.corpus = corpus
        self.rng = random.Random(f"forensics-sim:{seed}")
        self.fk = Faker(tx.LOCALE)
        self.ceiling = scale.ceiling
        self.window_start = WINDOW_START.timestamp()
        self.window_end = self.window_start + scale.window_days * 86400
        self.t0 = self.window_start - scale.days_before * 86400
        self.t1 = self.window_end + scale.days_after * 86400
        if scale.realistic and corpus is None:
            raise ValueError(f"scale {scale.name!r} needs a corpus")
        #: Template wording every tenant sends (not a tenant's own text); the realistic scale has more.
        self.phrases = tx.REALISTIC_PHRASES if scale.realistic else tx.TEMPLATE_PHRASES
        self.own_share = 0.5 if scale.realistic else 0.0
        self.reserve: tx.Reserve | None = None  # realistic: corpus text no tenant owns
        self.popular: list[tuple[str, str]] = []  # realistic: (text, name) of passages groups of tenants paste
        self._sentences: list[str] = []
        self._stock: Any = None  # realistic: token runs the texts of two or more owners hold (tx.stock_runs)
        self._sentence_at = 0
        self.article = self._article()
        self.tenants = self._tenants()
        self.prefill = [f"prefill-{i}" for i in range(scale.prefill_nodes)]
        self.decode = [f"decode-{i}" for i in range(scale.decode_nodes)]
        self.node_ip = {n: f"10.0.{4 + i // 8}.{10 + i % 8 + (0 if n.startswith('prefill') else 100)}" for i, n in enumerate(self.prefill + self.decode)}
        self.slots: dict[str, list[collections.deque[Occupant]]] = {
            d: [collections.deque(maxlen=2) for _ in range(scale.slots)] for d in self.decode
        }
        self.pending_later: list[dict[str, Any]] = []
        # shared text name -> tenants that have sent it so far: a suspect may only quote boilerplate
        # that is really common by then, or the "hard negative" would be a private leak in the logs.
        self.shared_senders: dict[str, set[int]] = collections.defaultdict(set)
        self.lost_requests = 0  # marked request_lost (only the split-log writer drops their request lines)
        self.truth: dict[str, Any] = {
            "suspects": [],
            "fragments": [],
            "hard_negatives": [],
            "scan_negatives": [],
            "engine_anomalies": [],
        }
        self.counts: collections.Counter[str] = collections.Counter()

    # -----------------------------------------------------------------------------------------
    # setup
    # -----------------------------------------------------------------------------------------

    def _faker(self, key: str) -> Faker:
        """The shared Faker, re-seeded for ``key`` (a stable function of the run seed)."""
        digest = hashlib.sha256(f"{self.seed}:{key}".encode()).digest()
        self.fk.seed_instance(int.from_bytes(digest[:8], "big"))
        return self.fk

    def _rng(self, key: str) -> random.Random:
        return random.Random(f"{self.seed}:{key}")

    def _article(self) -> str:
        if self.corpus is not None:
            return self.corpus.documents[0][:6000]
        fk, rng = self._faker("article"), self._rng("article")
        title = fk.catch_phrase().title()
        paras = [f"{title}\n\n{fk.paragraph(nb_sentences=6)}"]
        for _ in range(5):
            paras.append(fk.paragraph(nb_sentences=rng.randint(5, 8)))
        return "\n\n".join(paras)

    def _tenants(self) -> list[Tenant]:
        s = self.scale
        rng = self._rng("tenants")
        corpus_docs: list[list[str]] = [[] for _ in range(s.tenants)]
        corpus_answers: list[list[str]] = [[] for _ in range(s.tenants)]
        if self.corpus is not None:
            # Each document (with its duplicates and the answers it quotes) belongs to one tenant
            # only: a leaked passage must be rare. Document 0 is the article everyone sends.
            n_docs = len(self.corpus.documents)
            groups = [g for g in tx.owner_groups(self.corpus) if 0 not in g]
            def reserve_apart(gs: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
                """(reserved, owned): every eighth group belongs to no tenant (realistic scale): passages groups of
                tenants paste, and the natural sentences a model emits when it decodes from garbage."""
                reserved = [g for j, g in enumerate(gs) if s.realistic and j % 8 == 7]
                return reserved, [g for j, g in enumerate(gs) if not (s.realistic and j % 8 == 7)]

            others: list[list[int]] = []  # the groups other parts' tenants own (corpus_part)
            if self.corpus_part is None:
                rng.shuffle(groups)
                reserve_groups, groups = reserve_apart(groups)
            else:
                # Chosen in the corpus's own order (the same in every incident), so every part has the same reserve
                # and no two parts' tenants own one text: incidents merged into a bigger one keep their private
                # text private (read as one incident, a document several seeds' tenants each owned was text
                # several customers sent, and its leaks could name none of them).
                part, parts = self.corpus_part
                reserve_groups, candidates = reserve_apart(groups)
                groups = candidates[part::parts]
                others = [g for j, g in enumerate(candidates) if j % parts != part]
                rng.shuffle(groups)
            if s.realistic:
                reserved = [self._corpus_item(k) for g in reserve_groups for k in g]
                # (owner, token hashes) of the text tenants send: their own items, the article all of them may
                # send (-1), the popular passages of groups of them (-2, -3, ...); with a corpus part, the other
                # parts' items too, each its own owner (another incident's customer): no popular passage or
                # garbage sentence copies them, and a run one of them shares with a tenant's text is no leak.
                owned = [(-1, tx.token_hashes(self.article))] + [(j % s.tenants, tx.token_hashes(self._corpus_item(k)))
                                                                 for j, g in enumerate(groups) for k in g]
                owned += [(s.tenants + j, tx.token_hashes(self._corpus_item(k))) for j, g in enumerate(others) for k in g]
                self.reserve = tx.reserve_material(reserved, owned=tx.token_runs([], hashes=[h for _, h in owned]))
                self.popular = ([(q, f"popular_quote_{k}") for k, q in enumerate(self.reserve.quotes)]
                                + [(c, f"popular_code_{k}") for k, c in enumerate(self.reserve.code)])
                owned += [(-2 - k, tx.token_hashes(text)) for k, (text, _) in enumerate(self.popular)]
                self._stock = tx.stock_runs(owned)
                self._sentences = list(self.reserve.sentences)
                self._rng("sentences").shuffle(self._sentences)
            for j, group in enumerate(groups):
                for k in group:
                    if k < n_docs:
                        corpus_docs[j % s.tenants].append(self.corpus.documents[k])
                    else:
                        corpus_answers[j % s.tenants].append(self.corpus.answers[k - n_docs])
        tenants = []
        used: set[str] = set()
        for i in range(s.tenants):
            fk = self._faker(f"tenant:{i}")
            company = fk.company()
            slug = "".join(c if c.isalnum() else "-" for c in company.lower()).strip("-")
            slug = "-".join(p for p in slug.split("-") if p)[:24]
            if i % 3 == 2:
                tid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
            elif i == 3:
                # An org id typed by a human: spaces, a slash, accents (reports must make safe names).
                tid = f"{company} / Équipe Zürich"
            else:
                tid = f"org-{slug}-{rng.getrandbits(16):04x}"
            while tid in used:
                tid += "x"
            used.add(tid)
            kinds = tuple(sorted(rng.sample(tx.DOC_KINDS, rng.randint(1, 3))))
            # Long-document customers chose the affected model for its advertised window.
            heavy = i % 3 == 0  # a fixed share, so the suspect count varies little between seeds
            mw = (0.75, 0.1, 0.15) if heavy else (rng.uniform(0.15, 0.5), rng.uniform(0.2, 0.5), rng.uniform(0.1, 0.4))
            # A fixed share of customers copied a popular template (the first, the most copied, by a
            # third of them), so that every run has boilerplate many tenants really send.
            popular = 0 if i % 3 == 1 else 1 if i % 6 == 5 else None
            shared = popular is not None
            if s.realistic:
                system, shared = self._realistic_system(i, company, fk)
            elif popular is not None:
                system = tx.POPULAR_SYSTEM_PROMPTS[popular]
            else:
                system = (
                    f"You are the internal assistant of {company}. {fk.catch_phrase()}. Escalate anything about "
                    f"{fk.bs()} to {fk.name()} ({fk.email()}). {fk.paragraph(nb_sentences=2)}"
                )
            pool: list[str] = []
            for d in corpus_docs[i]:
                pool.extend(tx.split_paragraphs(d))
                if len(pool) >= s.pool_paragraphs:
                    break
            pool = pool[: (s.pool_paragraphs * 3 // 4 if s.realistic else s.pool_paragraphs // 2)] if corpus_docs[i] else pool
            while len(pool) < s.pool_paragraphs:
                pool.append(tx.paragraph(kinds[len(pool) % len(kinds)], fk, rng))
            tenants.append(
                Tenant(
                    tenant_id=tid,
                    name=company,
                    kinds=kinds,
                    weight=rng.lognormvariate(0, 0.5),
                    model_weights=mw,
                    p_big=(2.2 if heavy else 0.3),
                    system_prompt=system,
                    system_shared=shared,
                    p_stream=rng.choice((0.0, 0.5, 0.9)),
                    p_parts=rng.choice((0.0, 0.0, 0.3, 0.8)),
                    p_boilerplate=rng.choice((0.05, 0.1, 0.3)),
                    p_quote=rng.choice((0.02, 0.08)),
                    users=tuple(f"u-{rng.randint(100, 9999)}" for _ in range(rng.randint(1, 6))),
                    team_id=f"team-{rng.getrandbits(32):08x}",
                    key_hash=hashlib.sha256(f"{self.seed}:key:{i}".encode()).hexdigest(),
                    key_alias=f"{slug or 'key'}-prod",
                    pool=pool,
                    answers=corpus_answers[i][:200],
                )
            )
        if s.realistic:
            self._realistic_habits(tenants)
        return tenants

    def _corpus_item(self, k: int) -> str:
        """Corpus item ``k``: documents first, then answers (as numbered by tx.owner_groups)."""
        assert self.corpus is not None
        n = len(self.corpus.documents)
        return self.corpus.documents[k] if k < n else self.corpus.answers[k - n]

    def _realistic_system(self, i: int, company: str, fk: Faker) -> tuple[str, bool]:
        """A realistic tenant's system prompt: a popular one copied whole (shared) or a template filled in (private)."""
        rng = self._rng(f"system:{i}")
        whole = tx.POPULAR_SYSTEM_PROMPTS + tx.REALISTIC_SYSTEM_PROMPTS
        if rng.random() < 0.35:
            # A few are copied by many tenants, the others by a handful (Zipf-like).
            return whole[min(int(rng.paretovariate(1.2)) - 1, len(whole) - 1)], True
        k = rng.randrange(len(tx.SYSTEM_TEMPLATES) + 1)
        if k == len(tx.SYSTEM_TEMPLATES):
            return (f"You are the internal assistant of {company}. {fk.catch_phrase()}. Escalate anything about "
                    f"{fk.bs()} to {fk.name()} ({fk.email()}). {fk.paragraph(nb_sentences=2)}"), False
        return tx.system_template(k, company, fk, rng), False

    def _realistic_habits(self, tenants: list[Tenant]) -> None:
        """Forms, popular passages and own-prompt quoting of the realistic scale's tenants."""
        rng = self._rng("realistic:habits")
        for t in tenants:
            if rng.random() < 0.6:
                t.form = min(int(rng.paretovariate(1.0)) - 1, len(tx.FORMS) - 1)
            t.p_popular = rng.choice((0.0, 0.05, 0.15, 0.3))
            t.p_quote = rng.choice((0.03, 0.1, 0.25))
        members: list[list[int]] = [[] for _ in tenants]
        for k in range(len(self.popular)):
            # Popularity from a pair of tenants to a quarter of them.
            size = rng.choice((2, 2, 3, 4, 5, 8, 12, 20, 35, 55))
            for ti in rng.sample(range(len(tenants)), min(size, len(tenants))):
                members[ti].append(k)
        for t, ks in zip(tenants, members):
            t.popular = tuple(ks)

    # -----------------------------------------------------------------------------------------
    # text
    # -----------------------------------------------------------------------------------------

    def build_prompt(self, spec: PromptSpec) -> Prompt:
        """Rebuild a prompt from its spec: same spec, same messages and text."""
        tenant = self.tenants[spec.tenant]
        rng = self._rng(f"prompt:{spec.seed}")
        fk = self._faker(f"prompt:{spec.seed}")
        kind = rng.choice(tenant.kinds)
        instr = rng.choice(tx.INSTRUCTIONS[kind])
        system = tenant.system_prompt
        sep = "\n" if spec.parts else "\n\n"
        prefix = f"<|system|>\n{system}\n\n<|user|>\n{instr}{sep}"
        regions: list[tuple[int, int, str, str]] = [
            (len("<|system|>\n"), len("<|system|>\n") + len(system), "shared" if tenant.system_shared else "private", "system_prompt"),
            (len(prefix) - len(sep) - len(instr), len(prefix) - len(sep), "shared", "instruction"),
        ]
        if self.scale.realistic:
            # A freshly filled form, a fresh document of the tenant's kind, or one of its own texts.
            r = rng.random()
            if tenant.form is not None and r < 0.35:
                first = (tx.form(tenant.form, fk, rng), "private", "form")
            elif 0.35 <= r < 0.5:
                first = (tx.paragraph(kind, fk, rng), "private", "document")
            else:
                first = (tenant.pool[rng.randrange(len(tenant.pool))], "private", "document")
            blocks: list[tuple[str, str, str]] = [first]
        else:
            blocks = [(tx.paragraph(kind, fk, rng), "private", "document")]
        if spec.boilerplate == "mit_license":
            blocks.append((tx.MIT_LICENSE, "shared", "mit_license"))
        elif spec.boilerplate == "article":
            blocks.append((self.article, "shared", "article"))
        if spec.popular is not None:
            blocks.append((self.popular[spec.popular][0], "shared", self.popular[spec.popular][1]))
        for extra in spec.injected:
            blocks.append((extra, "injected", "later_prompt"))
        need = spec.target_chars - len(prefix)
        have = sum(len(b[0]) for b in blocks) + 2 * (len(blocks) - 1)
        order: list[int] = []
        while have < need:
            if not order:  # each pool paragraph once before any repeats, as a real document reads
                order = list(range(len(tenant.pool)))
                rng.shuffle(order)
            p = tenant.pool[order.pop()]
            blocks.append((p, "private", "document"))
            have += len(p) + 2
        body_parts: list[str] = []
        pos = len(prefix)
        for i, (b, kind_, label) in enumerate(blocks):
            if i:
                body_parts.append("\n\n")
                pos += 2
            body_parts.append(b)
            regions.append((pos, pos + len(b), kind_, label))
            pos += len(b)
        body = "".join(body_parts)
        if len(body) > need > 0:
            # Cut the last (private) paragraph so the prompt has exactly the planned length.
            n_fixed = 1 + (spec.boilerplate is not None) + (spec.popular is not None) + len(spec.injected)
            fixed = sum(len(b[0]) for b in blocks[:n_fixed])
            if need >= fixed + 2 * n_fixed:
                body = body[:need]
                end = len(prefix) + need
                regions = [(a, min(b, end), k, lab) for a, b, k, lab in regions if a < end]
        if spec.parts:
            content: Any = [{"type": "text", "text": instr}, {"type": "text", "text": body}]
            if rng.random() < 0.15:
                content.insert(1, {"type": "image_url", "image_url": {"url": f"https://files.example.invalid/{spec.seed}.png"}})
        else:
            content = instr + sep + body
        messages = [{"role": "system", "content": system}, {"role": "user", "content": content}]
        text = prefix + body
        return Prompt(messages, text, _merge_private(regions))

    def ordinary_answer(self, ex_index: int, tenant: Tenant, prompt: Prompt, target_chars: int, quote: bool) -> tuple[str, dict[str, Any] | None]:
        """An honest answer; sometimes it quotes its own prompt (a labelled hard negative)."""
        rng = self._rng(f"answer:{ex_index}")
        if self.scale.realistic:
            return self._realistic_answer(rng, tenant, prompt, target_chars, quote)
        fk = self._faker(f"answer:{ex_index}")
        pieces = [rng.choice(("Here is what I found.", "Sure.", "Summary:", "Based on the document you provided:", "Certainly."))]
        if tenant.answers and rng.random() < 0.7:
            pieces.append(tenant.answers[rng.randrange(len(tenant.answers))])
        q: dict[str, Any] | None = None
        while sum(len(p) + 1 for p in pieces) < target_chars:
            if quote and q is None and len(pieces) >= 2:
                span = _pick_span(prompt.regions, rng, rng.randint(30, 120) * 4, prompt.text)
                if span:
                    a, b = span
                    start = sum(len(p) + 1 for p in pieces) + 3  # after the joining space and the quote mark
                    pieces.append('> "' + prompt.text[a:b] + '"')
                    q = {"response_start": start, "response_end": start + (b - a), "prompt_start": a, "prompt_end": b}
                    continue
            pieces.append(fk.paragraph(nb_sentences=rng.randint(2, 5)) if rng.random() < 0.8 else f"- {fk.name()}: {fk.sentence()}")
        return " ".join(pieces), q

    def _realistic_answer(self, rng: random.Random, tenant: Tenant, prompt: Prompt, target_chars: int,
                          quote: bool) -> tuple[str, dict[str, Any] | None]:
        """An honest answer of real text: the tenant's own corpus answers (or its own documents), cut to length."""
        pieces = [rng.choice(("Here is what I found.", "Sure.", "Summary:", "Based on the document you provided:", "Certainly.",
                              "Great question!", "Here's a summary of the main points:"))]
        source = tenant.answers or tenant.pool
        q: dict[str, Any] | None = None
        quote_at = rng.randint(1, 3)
        while (have := sum(len(p) + 1 for p in pieces)) < target_chars:
            if quote and q is None and len(pieces) >= quote_at:
                span = _pick_span(prompt.regions, rng, rng.randint(15, 120) * 4, prompt.text, phrases=self.phrases,
                                  own_share=self.own_share, also=_not_stock(self._stock))
                if span:
                    a, b = span
                    opener = rng.choice(('> "', 'As the document says, "', 'You wrote: "', '"'))
                    pieces.append(opener + prompt.text[a:b] + '"')
                    q = {"response_start": have + len(opener), "response_end": have + len(opener) + (b - a),
                         "prompt_start": a, "prompt_end": b}
                    continue
                quote = False
            text = source[rng.randrange(len(source))]
            room = max(target_chars - have, 160)
            if len(text) > room:  # an answer cut at max_tokens, or the part of a document the answer draws on
                start = 0 if rng.random() < 0.7 else rng.randrange(len(text) - room)
                cut = text.rfind(" ", start, start + room)
                text = text[start : cut if cut > start + room // 2 else start + room].strip()
            if text:
                pieces.append(text)
        return " ".join(pieces), q

    def babble(self, rng: random.Random, fk: Faker, n_chars: int) -> str:
        """What a model emits when it decodes from garbage: fluent-ish, unrelated words."""
        out: list[str] = []
        if self._sentences:
            # Realistic: fluent natural sentences that no tenant sent, each used once (until they run out),
            # overlapping the tenants' text only where natural language does, and now and then a stuck loop.
            while sum(len(p) + 1 for p in out) < n_chars:
                if rng.random() < 0.04:
                    w = fk.word()
                    out.append(" ".join([w] * rng.randint(3, 8)))
                    continue
                if self._sentence_at >= len(self._sentences):
                    self._sentence_at = 0
                    rng.shuffle(self._sentences)
                out.append(self._sentences[self._sentence_at])
                self._sentence_at += 1
            return " ".join(out)
        while sum(len(p) + 1 for p in out) < n_chars:
            r = rng.random()
            if r < 0.1:
                w = fk.word()
                out.append(" ".join([w] * rng.randint(3, 8)))
            else:
                out.append(fk.sentence(nb_words=rng.randint(5, 14)))
        return " ".join(out)

    # -----------------------------------------------------------------------------------------
    # the timeline
    # -----------------------------------------------------------------------------------------

    def run(self, on_exchange: Callable[[Exchange], None], on_engine: Callable[[str, float, ev.EngineEvent], None], on_tick: Callable[[float], None]) -> None:
        """Generate every request in arrival order; ``on_tick(t)`` says no later event is before t."""
        s = self.scale
        rng = self.rng
        mean_gap = (self.t1 - self.t0) / s.requests
        t = self.t0
        weights = [tn.weight for tn in self.tenants]
        for node in self.prefill + self.decode:
            self._startup(node, self.t0 + 5, on_engine, "")
            self._startup(node, self.window_start - 600 + 7, on_engine, " (release with placeholder path)")
            self._startup(node, self.window_end + 3600 + 7, on_engine, " (fixed release)")
        i = 0
        while True:
            hour = (t / 3600) % 24
            diurnal = 0.35 + 0.65 * (0.5 + 0.5 * math.sin((hour - 8) / 24 * 2 * math.pi))
            t += rng.expovariate(diurnal / mean_gap)
            if t >= self.t1 - 600:
                break
            on_tick(t)
            ti = rng.choices(range(len(self.tenants)), weights)[0]
            self._request(i, t, ti, on_exchange, on_engine)
            i += 1
        on_tick(float("inf"))
        self.counts["requests"] = i

    def _startup(self, node: str, t: float, on_engine: Callable[[str, float, ev.EngineEvent], None], note: str) -> None:
        s = self.scale
        role: Literal["prefill", "decode"] = "prefill" if node.startswith("prefill") else "decode"
        on_engine(node, t, ev.ServerStarted(role, "zai-org/GLM-5.3", AFFECTED_MODEL, 8, note))
        on_engine(node, t + 31, ev.WeightsLoaded())
        on_engine(node, t + 33, ev.MemoryPool(s.ceiling, s.advertised))

    def _draw_tokens(self, rng: random.Random, tenant: Tenant, affected: bool) -> tuple[int, str]:
        s = self.scale
        r = rng.random()
        p_big = (s.p_big_affected if affected else s.p_big_other) * tenant.p_big
        if affected and r < s.p_near:
            return rng.randint(s.ceiling - max(4, s.ceiling // 500), s.ceiling - 2), "near_below"
        if affected and r < 2 * s.p_near:
            return rng.randint(s.ceiling + 1, s.ceiling + max(4, s.ceiling // 500)), "near_above"
        if r < 2 * s.p_near + p_big:
            return rng.randint(s.ceiling + 1, int(min(s.advertised * 0.95, s.ceiling * 1.45))), "big"
        tokens = int(rng.lognormvariate(math.log(s.median_tokens), 1.0))
        return max(40, min(tokens, int(s.ceiling * 0.9))), "normal"

    def _request(self, i: int, t: float, ti: int, on_exchange: Callable[[Exchange], None], on_engine: Callable[[str, float, ev.EngineEvent], None]) -> None:
        s = self.scale
        rng = self._rng(f"request:{i}")
        tenant = self.tenants[ti]
        model, routed, affected = MODELS[rng.choices(range(len(MODELS)), tenant.model_weights)[0]]
        tokens, klass = self._draw_tokens(rng, tenant, affected)
        cpt = rng.uniform(3.8, 4.2)  # characters per token of this text
        boiler = None
        if rng.random() < tenant.p_boilerplate:
            boiler = "mit_license" if rng.random() < 0.6 else "article"
        spec = PromptSpec(ti, rng.getrandbits(48), round(tokens * cpt), rng.random() < tenant.p_parts, boiler)
        if tenant.popular:
            prng = self._rng(f"popular:{i}")
            if prng.random() < tenant.p_popular:
                spec.popular = prng.choice(tenant.popular)
        # A passage an earlier suspect response carried turns up in this later prompt.
        later = None
        for k, p in enumerate(self.pending_later):
            if p["not_before"] < t and p["tenant"] != ti:
                later = self.pending_later.pop(k)
                spec.injected.append(later["text"])
                break
        prompt = self.build_prompt(spec)
        real_tokens = round(len(prompt.text) / cpt)
        shared_names = self._shared_names(tenant, spec)
        # Ordinary requests of the unaffected models (never stale pages, never sources) without
        # boilerplate may lose their request line to log rotation on the first day (split logs).
        lost = (not affected and not shared_names and t < self.t0 + 86400 and klass == "normal"
                and self.lost_requests < 8 and self._rng(f"rotated:{i}").random() < 0.25)
        self.lost_requests += lost
        for name in shared_names:
            self.shared_senders[name].add(ti)
        request_id = f"chatcmpl-{rng.getrandbits(96):024x}"
        if later is not None:
            start = next(a for a, b, k, lab in prompt.regions if k == "injected")
            later["label"].update(
                later_request_id=request_id,
                later_tenant_id=tenant.tenant_id,
                later_start=start,
                later_end=start + len(later["text"]),
                later_received_at=iso_z(t),
            )
            self.truth["hard_negatives"].append(later["label"])
        in_window = self.window_start <= t < self.window_end
        stream = rng.random() < tenant.p_stream
        user = rng.choice(tenant.users)
        max_tokens = rng.choice((256, 512, 1024, s.max_answer_tokens))
        room = rng.getrandbits(63)
        over = real_tokens > self.ceiling
        queue = rng.uniform(0.02, 0.4)
        base = dict(index=i, request_id=request_id, tenant=tenant, user_id=user, model=model, model_routed=routed,
                    received=t, messages=prompt.messages, prompt_text=prompt.text, stream=stream, max_tokens=max_tokens)
        if lost:
            base["request_lost"] = True

        if klass in ("big", "near_above", "near_below") and not (affected and in_window and over):
            why = {"near_below": "near_ceiling_below"}.get(klass, "over_ceiling_other_model" if not affected else "over_ceiling_outside_window")
            if affected or klass != "near_below":
                self.truth["scan_negatives"].append(
                    {"kind": why, "request_id": request_id, "tenant_id": tenant.tenant_id, "model": model,
                     "received_at": iso_z(t), "prompt_tokens": real_tokens}
                )

        if not affected:
            self._ordinary(base, rng, tenant, prompt, real_tokens, cpt, queue, on_exchange, None)
            return
        prefill = rng.choice(self.prefill)
        decode = rng.choice(self.decode)
        obj = {"rid": request_id, "bootstrap_host": self.node_ip[prefill], "bootstrap_port": 8998, "bootstrap_room": room, "stream": stream}
        t_arrive = t + queue
        on_engine(prefill, t_arrive, ev.RequestReceived(request_id, obj, prompt.messages, real_tokens, max_tokens))
        if over:
            on_engine(prefill, t_arrive + 0.002, ev.InputTooLong(request_id, real_tokens, self.ceiling - 1))
            on_engine(prefill, t_arrive + 0.003, ev.ExceedsMaxTokens(request_id, real_tokens, self.ceiling))
            if not in_window:
                self._rejected(base, rng, prefill, obj, real_tokens, t_arrive, on_exchange, on_engine)
                return
            self._suspect(base, rng, tenant, prompt, real_tokens, cpt, klass, prefill, decode, obj, t_arrive, on_exchange, on_engine)
            return
        prefill_s = real_tokens / 15000 + rng.uniform(0.01, 0.08)
        t_pf = t_arrive + prefill_s
        cached = rng.choice((0, 0, 0, min(real_tokens, 1024)))
        if rng.random() < 0.5:
            on_engine(prefill, t_pf - 0.001, ev.PrefillBatch(real_tokens - cached, cached, token_usage=rng.uniform(0.01, 0.9),
                                                             queued=rng.randint(0, 3)))
        if in_window and rng.random() < 0.012:
            self._transfer_failure(base, rng, prefill, decode, obj, real_tokens, t_pf, on_exchange, on_engine)
            return
        on_engine(prefill, t_pf, ev.ReqTimeStats(request_id, room, real_tokens, cached, 0, "prefill", duration_ms=rng.uniform(0.5, 40)))
        quote = klass == "near_below" and rng.random() < 0.5
        ex = self._ordinary(base, rng, tenant, prompt, real_tokens, cpt, queue + prefill_s, on_exchange, quote or None)
        self._occupy(decode, rng, t_pf, Occupant(i, request_id, ti, spec, ex.response_text, t, ex.completed, False))
        self._decode_lines(decode, rng, ex, obj, real_tokens, cached, on_engine)
        if in_window and rng.random() < 0.006:
            other = rng.getrandbits(63)
            on_engine(decode, t_pf + 0.01, ev.ContextCorruption(request_id, room, other, buffer_index=rng.randint(0, 63)))
            self.truth["engine_anomalies"].append(
                {"kind": "context_corruption", "request_id": request_id, "tenant_id": tenant.tenant_id, "bootstrap_room": room,
                 "other_bootstrap_room": other, "decode_node": decode}
            )

    def _ordinary(self, base: dict[str, Any], rng: random.Random, tenant: Tenant, prompt: Prompt, real_tokens: int, cpt: float,
                  latency: float, on_exchange: Callable[[Exchange], None], quote: bool | None) -> Exchange:
        out_tokens = max(8, min(int(rng.lognormvariate(math.log(180), 0.7)), base["max_tokens"]))
        if quote is None:
            quote = rng.random() < tenant.p_quote
        answer, q = self.ordinary_answer(base["index"], tenant, prompt, round(out_tokens * cpt), quote)
        completion = round(len(answer) / cpt)
        if q is not None:
            self.truth["hard_negatives"].append(
                {"kind": "own_prompt_quote", "request_id": base["request_id"], "tenant_id": tenant.tenant_id, **q}
            )
        first = base["received"] + latency + (0 if base["model"] == AFFECTED_MODEL else real_tokens / 20000)
        done = first + completion / rng.uniform(30, 90)
        reported: int | None = real_tokens
        incomplete = base["model"] != AFFECTED_MODEL and rng.random() < 0.004 and not base.get("request_lost")
        ex = Exchange(**base, first_token=first, completed=done, status="success", status_code=200, response_text=answer,
                      finish_reason="length" if completion >= base["max_tokens"] else "stop", reported_prompt_tokens=reported,
                      completion_tokens=completion, error=None, error_class=None, incomplete=incomplete)
        on_exchange(ex)
        self.counts["ordinary"] += 1
        return ex

    def _decode_lines(self, decode: str, rng: random.Random, ex: Exchange, obj: dict[str, Any], input_len: int, cached: int,
                      on_engine: Callable[[str, float, ev.EngineEvent], None]) -> None:
        t = ex.completed
        on_engine(decode, t - 0.001, ev.ReqTimeStats(ex.request_id, obj["bootstrap_room"], input_len, cached, ex.completion_tokens, "decode",
                                                     duration_ms=(ex.completed - ex.first_token) * 1000))
        fr: dict[str, Any] = {"type": ex.finish_reason}
        if ex.finish_reason == "length":
            fr["length"] = ex.completion_tokens
        meta = {"id": ex.request_id, "finish_reason": fr, "prompt_tokens": input_len, "completion_tokens": ex.completion_tokens,
                "cached_tokens": cached, "e2e_latency": round(ex.completed - ex.received, 3)}
        on_engine(decode, t, ev.RequestFinished(ex.request_id, obj, {"text": ex.response_text, "meta_info": meta}))
        if rng.random() < 0.3:
            on_engine(decode, t + 0.0005, ev.DecodeBatch(running=rng.randint(1, 40), tokens=rng.randint(1000, self.scale.ceiling),
                                                         token_usage=rng.uniform(0.05, 0.97), throughput=rng.uniform(200, 2400)))

    def _occupy(self, decode: str, rng: random.Random, t_start: float, occ: Occupant,
                prefer_tenant: int | None = None) -> tuple[int, collections.deque[Occupant]]:
        """Put ``occ`` in a slot of ``decode`` free at ``t_start``; return the slot and its history before."""
        slots = self.slots[decode]
        free = [k for k, h in enumerate(slots) if not h or h[-1].completed < t_start]
        if not free:  # every slot busy: the scheduler waits for the one that frees first
            free = [min(range(len(slots)), key=lambda k: slots[k][-1].completed)]
        if prefer_tenant is not None:
            same = [k for k in free if slots[k] and slots[k][-1].tenant == prefer_tenant]
            free = same or free
        k = rng.choice(free)
        before = collections.deque(slots[k], maxlen=2)
        slots[k].append(occ)
        return k, before

    def _rejected(self, base: dict[str, Any], rng: random.Random, prefill: str, obj: dict[str, Any], real_tokens: int, t_arrive: float,
                  on_exchange: Callable[[Exchange], None], on_engine: Callable[[str, float, ev.EngineEvent], None]) -> None:
        msg = (f"Input length ({real_tokens} tokens) exceeds the maximum allowed length ({self.ceiling - 1} tokens). "
               "Use a shorter input or enable --allow-auto-truncate.")
        t = t_arrive + 0.004
        meta = {"id": base["request_id"], "finish_reason": {"type": "abort", "message": msg, "status_code": 400, "err_type": "BadRequestError"},
                "prompt_tokens": real_tokens, "completion_tokens": 0, "cached_tokens": 0, "e2e_latency": round(t - base["received"], 3)}
        on_engine(prefill, t, ev.RequestFinished(base["request_id"], obj, {"text": "", "meta_info": meta}))
        ex = Exchange(**base, first_token=t, completed=t + 0.01, status="failure", status_code=400, response_text="", finish_reason=None,
                      reported_prompt_tokens=round(len(base["prompt_text"]) / 4.1), completion_tokens=0,
                      error=f"litellm.BadRequestError: OpenAIException - {msg}", error_class="BadRequestError")
        on_exchange(ex)
        self.counts["rejected"] += 1

    def _transfer_failure(self, base: dict[str, Any], rng: random.Random, prefill: str, decode: str, obj: dict[str, Any], real_tokens: int,
                          t: float, on_exchange: Callable[[Exchange], None], on_engine: Callable[[str, float, ev.EngineEvent], None]) -> None:
        rid, room = base["request_id"], obj["bootstrap_room"]
        on_engine(prefill, t, ev.BootstrapFailed(rid, room, f"{self.node_ip[decode]}:{rng.randint(17000, 17999)}"))
        t2 = t + rng.uniform(0.5, 3)
        on_engine(decode, t2, ev.TransferFailed(rid, room))
        meta = {"id": rid, "finish_reason": {"type": "abort", "message": "KV transfer failed", "status_code": 500, "err_type": "InternalServerError"},
                "prompt_tokens": real_tokens, "completion_tokens": 0, "cached_tokens": 0, "e2e_latency": round(t2 - base["received"], 3)}
        on_engine(decode, t2 + 0.001, ev.RequestFinished(rid, obj, {"text": "", "meta_info": meta}))
        ex = Exchange(**base, first_token=t2, completed=t2 + 0.01, status="failure", status_code=500, response_text="", finish_reason=None,
                      reported_prompt_tokens=round(len(base["prompt_text"]) / 4.1), completion_tokens=0,
                      error="litellm.InternalServerError: OpenAIException - KV transfer failed", error_class="InternalServerError")
        on_exchange(ex)
        self.counts["transfer_failures"] += 1

    # -----------------------------------------------------------------------------------------
    # the bug
    # -----------------------------------------------------------------------------------------

    def _suspect(self, base: dict[str, Any], rng: random.Random, tenant: Tenant, prompt: Prompt, real_tokens: int, cpt: float, klass: str,
                 prefill: str, decode: str, obj: dict[str, Any], t_arrive: float,
                 on_exchange: Callable[[Exchange], None], on_engine: Callable[[str, float, ev.EngineEvent], None]) -> None:
        rid, room = base["request_id"], obj["bootstrap_room"]
        t_pf = t_arrive + rng.uniform(0.005, 0.05)  # a one-token prefill is instant
        on_engine(prefill, t_pf, ev.ReqTimeStats(rid, room, 1, 0, 0, "prefill", duration_ms=rng.uniform(0.3, 2)))
        ti = next(k for k, tn in enumerate(self.tenants) if tn is tenant)
        fk = self._faker(f"suspect:{base['index']}")
        want_self = rng.random() < 0.12
        placeholder = Occupant(base["index"], rid, ti, PromptSpec(ti, 0, 0, False, None), "", base["received"], float("inf"), True)
        slot, history = self._occupy(decode, rng, t_pf, placeholder, prefer_tenant=ti if want_self else None)
        # Stale pages usable as sources: finished before this request arrived, not themselves placeholders.
        stale = [o for o in reversed(history) if o.completed < base["received"] and not o.suspect]
        outcome = "leak"
        if not stale:
            outcome = "empty_slot"
        elif rng.random() < 0.1:
            outcome, stale = "no_fragment", []
        elif len(stale) > 1 and rng.random() < 0.35:
            outcome = "two_sources"
        else:
            stale = stale[:1]
        segments: list[tuple[str, dict[str, Any] | None]] = []
        n_out = rng.randint(60, self.scale.max_answer_tokens)
        budget = round(n_out * cpt)
        for occ in stale:
            occ_prompt: Prompt | None = None
            for _ in range(rng.choices((1, 2, 3), (0.65, 0.28, 0.07))[0]):
                kind = "prompt" if (rng.random() < 0.7 or not occ.response_text) else "response"
                if kind == "prompt":
                    occ_prompt = occ_prompt or self.build_prompt(occ.spec)
                    src_text, regions = occ_prompt.text, occ_prompt.regions
                else:
                    src_text = occ.response_text
                    regions = [(min(40, len(src_text)), len(src_text), "private", "response")]
                want = _fragment_tokens(rng, self.scale.fragment_mix)
                span = _pick_span(regions, rng, round(want * cpt), src_text, phrases=self.phrases, own_share=self.own_share,
                                  also=_not_stock(self._stock))
                if span is None:
                    continue
                a, b = span
                frag = self._fragment(rng, fk, src_text, a, b, cpt)
                label = "self_tenant" if occ.tenant == ti else "leak"
                frag.update(
                    source_request_id=occ.request_id, source_tenant_id=self.tenants[occ.tenant].tenant_id, source_kind=kind,
                    source_received_at=iso_z(occ.received), source_completed_at=iso_z(occ.completed), label=label,
                    is_leak=label == "leak",
                )
                segments.append((frag.pop("text"), frag))
        # Only text at least COMMON_TENANTS other tenants have already sent is common knowledge.
        common = [(text, name) for text, name in self.shared_texts()
                  if len(self.shared_senders[name] - {ti}) >= COMMON_TENANTS]
        if common and rng.random() < 0.25:
            shared_text, name = rng.choice(common)
            span = _pick_span([(0, len(shared_text), "private", name)], rng, round(rng.randint(20, 120) * cpt), shared_text, own=False)
            if span:
                frag = self._fragment(rng, fk, shared_text, span[0], span[1], cpt, light=True)
                frag.update(source_request_id=None, source_tenant_id=None, source_kind="shared", shared_text=name,
                            label="shared_boilerplate", is_leak=False)
                segments.append((frag.pop("text"), frag))
        later_text = None
        if rng.random() < 0.12:
            later_text = self.babble(rng, fk, rng.randint(25, 80) * 4)
            segments.append((later_text, {"label": "later_prompt_only"}))
        rng.shuffle(segments)
        # Weave: babble between the stale fragments, as decoding from mixed pages reads.
        pieces: list[str] = []
        pos = 0
        fillers = max(len(segments) + 1, 2)
        filler_chars = max(budget - sum(len(s[0]) for s in segments), 40 * fillers)
        placed: list[tuple[str, dict[str, Any] | None, int]] = []
        for k in range(len(segments) + 1):
            f = self.babble(rng, fk, filler_chars // fillers)
            if k:
                pieces.append(" ")
                pos += 1
            pieces.append(f)
            pos += len(f)
            if k < len(segments):
                pieces.append(rng.choice((" ", "\n", "\n\n")))
                pos += len(pieces[-1])
                seg, meta = segments[k]
                placed.append((seg, meta, pos))
                pieces.append(seg)
                pos += len(seg)
        response = "".join(pieces)
        completion = round(len(response) / cpt)
        finish = "length" if rng.random() < 0.6 else "stop"
        max_tokens = completion if finish == "length" else max(base["max_tokens"], completion + 1)
        first = t_pf + rng.uniform(0.05, 0.3)
        done = first + completion / rng.uniform(30, 90)
        base = {**base, "max_tokens": max_tokens}
        ex = Exchange(**base, first_token=first, completed=done, status="success", status_code=200, response_text=response,
                      finish_reason=finish, reported_prompt_tokens=1, completion_tokens=completion, error=None, error_class=None)
        placeholder.response_text, placeholder.completed = response, done
        fragment_ids = []
        for seg, meta, start in placed:
            if meta is None:
                continue
            if meta["label"] == "later_prompt_only":
                self.pending_later.append({
                    "not_before": done + rng.uniform(600, 6 * 3600), "tenant": ti, "text": seg,
                    "label": {"kind": "later_prompt_only", "recipient_request_id": rid, "recipient_tenant_id": tenant.tenant_id,
                              "recipient_start": start, "recipient_end": start + len(seg), "recipient_completed_at": iso_z(done)},
                })
                continue
            fid = f"F{len(self.truth['fragments']) + 1:05d}"
            fragment_ids.append(fid)
            row = {"fragment_id": fid, "recipient_request_id": rid, "recipient_tenant_id": tenant.tenant_id,
                   "recipient_start": start, "recipient_end": start + len(seg), **meta}
            self.truth["fragments"].append(row)
            if not row["is_leak"]:
                self.truth["hard_negatives"].append({"kind": row["label"], "fragment_id": fid, "recipient_request_id": rid,
                                                     "recipient_tenant_id": tenant.tenant_id, "source_request_id": row["source_request_id"],
                                                     "source_tenant_id": row["source_tenant_id"],
                                                     "recipient_start": start, "recipient_end": start + len(seg)})
        on_exchange(ex)
        self._decode_lines(decode, rng, ex, obj, 1, 0, on_engine)
        self.truth["suspects"].append({
            "request_id": rid, "tenant_id": tenant.tenant_id, "model": base["model"], "received_at": iso_z(base["received"]),
            "completed_at": iso_z(done), "prompt_tokens": real_tokens, "reported_prompt_tokens": 1, "length_class": klass,
            "reasons": ["engine_signature", "over_ceiling_in_window"], "prefill_node": prefill, "decode_node": decode,
            "bootstrap_room": room, "slot": slot, "outcome": outcome, "fragment_ids": fragment_ids,
        })
        self.counts["suspects"] += 1

    def shared_texts(self) -> list[tuple[str, str]]:
        """The boilerplate suspects may quote: (text, name), names as in ``shared_text`` of the truth."""
        texts = [(tx.MIT_LICENSE, "mit_license"), (self.article, "article"), (tx.POPULAR_SYSTEM_PROMPTS[0], "popular_system_prompt")]
        if self.scale.realistic:
            texts.append((tx.POPULAR_SYSTEM_PROMPTS[1], "popular_system_prompt_1"))
            texts.extend((p, f"popular_system_prompt_{k + 2}") for k, p in enumerate(tx.REALISTIC_SYSTEM_PROMPTS))
            texts.extend(self.popular)
        return texts

    def _shared_names(self, tenant: Tenant, spec: PromptSpec) -> list[str]:
        """Names of the shared texts a prompt carries whole."""
        names = [spec.boilerplate] if spec.boilerplate else []
        if tenant.system_prompt == tx.POPULAR_SYSTEM_PROMPTS[0]:
            names.append("popular_system_prompt")
        elif self.scale.realistic and tenant.system_shared:
            names.extend(name for text, name in self.shared_texts() if text == tenant.system_prompt)
        if spec.popular is not None:
            names.append(self.popular[spec.popular][1])
        return names

    def _fragment(self, rng: random.Random, fk: Faker, src: str, a: int, b: int, cpt: float, light: bool = False) -> dict[str, Any]:
        """Cut ``src[a:b]``, damage it, and describe it (the caller adds where it came from)."""
        kinds: list[str] = []
        if rng.random() > (0.6 if light else 0.3):
            kinds = sorted(rng.sample(tx.DAMAGE_KINDS, rng.choices((1, 2, 3), (0.5, 0.35, 0.15))[0]))
        if "truncate" in kinds and b - a > 24:
            b = rng.randint(a + (b - a) // 2, b - 3)  # cut mid-word, as a stopped decode does
        rate = rng.uniform(0.03, 0.12 if light else 0.25)
        raw = src[a:b]
        damaged, fraction = tx.damage(raw, [k for k in kinds if k != "truncate"], rate, rng, fk)
        if not damaged.strip():
            damaged, kinds, fraction = raw, [], 0.0
        return {"text": damaged, "source_start": a, "source_end": b, "tokens": max(1, round((b - a) / cpt)), "chars": b - a,
                "damage": kinds, "damage_fraction": round(fraction, 4), "damage_rate": round(rate if kinds else 0.0, 4)}


def _fragment_tokens(rng: random.Random, mix: tuple[tuple[int, int, float], ...] | None = None) -> int:
    """A fragment length: a handful of tokens to a few hundred (``mix``: the scale's buckets, if it has its own)."""
    if mix is not None:
        lo, hi, _ = rng.choices(mix, [w for _, _, w in mix])[0]
        return rng.randint(lo, hi)
    bucket = rng.choices((0, 1, 2, 3), (0.3, 0.35, 0.23, 0.12))[0]
    lo, hi = ((4, 15), (16, 63), (64, 255), (256, 400))[bucket]
    return rng.randint(lo, hi)


def _pick_span(regions: list[tuple[int, int, str, str]], rng: random.Random, chars: int, text: str,
               own: bool = True, phrases: tuple[str, ...] = tx.TEMPLATE_PHRASES, own_share: float = 0.0,
               also: Callable[[str], bool] | None = None) -> tuple[int, int] | None:
    """A word-aligned span of about ``chars`` characters inside one private region.

    With ``own`` (the default) the span must carry at least ``tx.MIN_OWN_CHARS`` characters that are
    not document template (every tenant's tables share a header; ``phrases`` is the template wording):
    text that every tenant sends is nobody's leak, so a fragment of it would be wrongly labelled.
    ``own_share``: the least share of the passage's letters and digits that must be its own (the
    realistic scale fills its templates with words other tenants' values share, so a little own
    text at the edge of a template is not enough). ``also``: a further check the passage must pass
    (the realistic scale's: not mostly wording that other tenants' real text also holds).
    """
    cands = [(a, b) for a, b, k, _ in regions if k == "private" and b - a >= 16]
    if not cands:
        return None
    weights = [b - a for a, b in cands]
    for _ in range(4):
        span = _one_span(cands, weights, rng, chars, text)
        if span is not None and (not own or (_own_enough(text[span[0] : span[1]], phrases, own_share)
                                             and (also is None or also(text[span[0] : span[1]])))):
            return span
    return None


def _own_enough(passage: str, phrases: tuple[str, ...], share: float) -> bool:
    if not share:
        return tx.own_chars(passage, phrases) >= tx.MIN_OWN_CHARS
    own = tx.own_chars(passage, phrases, edges_first=True)
    return own >= tx.MIN_OWN_CHARS and own >= share * sum(c.isalnum() for c in passage)


def _not_stock(stock: Any) -> Callable[[str], bool] | None:
    """A check that a passage is not mostly wording other owners also hold (realistic scale), or None.

    Such a passage is common text (the same benchmark answer in several tenants' documents): no
    one could say whose it is, so it is not made a leak (nor a self-tenant fragment or an own quote).
    """
    return None if stock is None else (lambda passage: not tx.mostly_stock(passage, stock))


def _one_span(cands: list[tuple[int, int]], weights: list[int], rng: random.Random, chars: int, text: str) -> tuple[int, int] | None:
    a, b = rng.choices(cands, weights)[0]
    chars = min(chars, b - a)
    start = rng.randint(a, b - chars)
    # Begin at a word start and end at a word end: a fragment is decoded tokens, not a slice of one.
    while start > a and not text[start - 1].isspace():
        start -= 1
    end = min(start + chars, b)
    while end < b and not text[end].isspace():
        end += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    while start < end and text[start].isspace():
        start += 1
    return (start, end) if end - start >= 8 else None


def _merge_private(regions: list[tuple[int, int, str, str]]) -> list[tuple[int, int, str, str]]:
    """Join adjacent private document regions (separated by a blank line) into one."""
    out: list[tuple[int, int, str, str]] = []
    for r in sorted(regions):
        if out and r[2] == "private" and out[-1][2] == "private" and r[3] == out[-1][3] == "document" and r[0] - out[-1][1] <= 2:
            out[-1] = (out[-1][0], r[1], "private", "document")
        else:
            out.append(r)
    return out


def check_prompt(prompt: Prompt) -> None:
    """The canonical text of the messages is the text the regions point into (self-check)."""
    text, _ = schema.render_messages(prompt.messages)
    if text != prompt.text:
        raise AssertionError("prompt text differs from render_messages of its messages")
