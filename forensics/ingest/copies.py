"""Exchanges logged twice under two customer ids, folded into one by the finaliser.

A second gateway in front of the first, logging under its own request ids and account names, or a spend-log export
naming teams beside callbacks naming organisations, holds the same traffic twice. Kept as two exchanges, every
suspect named its customer twice (once under a name that is not the customer's own), and every source's text was held
by two customer ids, so its passages read as common and the exposed list could empty (a review).

Two rows are one exchange by the rule the match stage uses (:mod:`forensics.logged_twice`): the same answer, one
request's prompt, received within 10 s, one's run holding the other's. Two real customers' exchanges can meet it (the
same long question, answered alike at the same moment), so one pair proves nothing: rows are folded only where two
customer ids are linked by :data:`FOLD_MIN_LINKS` exchanges or more. Each set of copies keeps the rows of one id, the
same id for every exchange of those customers: the one the engine logs place on a node most often (the service's own
record names the inner gateway's request), then the one the logs hold the most records under, then the smaller. The
others leave the exchanges table for ``logged_twice.parquet``, which names the row each is a copy of; their lines
count as duplicates of their files.
"""

from __future__ import annotations

from collections import Counter as Tally
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from forensics import schema
from forensics.artifacts import customer_key
from forensics.case import ParquetSink
from forensics.ingest.registry import FORMATS
from forensics.logged_twice import (
    COMPLETED_US,
    PLAIN,
    SAME_EXCHANGE_CUT_HEAD,
    SAME_EXCHANGE_CUT_TAIL,
    SAME_EXCHANGE_MIN_SUFFIX,
    SAME_EXCHANGE_US,
    runs_together,
)

#: Two customer ids are folded into one only where this many of their exchanges are copies of each other: one pair
#: may be two customers asking the same long question at the same moment and answered alike.
FOLD_MIN_LINKS = 2


def prompts_alike_sql(a: str, cut_a: str, b: str, cut_b: str) -> str:
    """:func:`forensics.logged_twice.prompts_alike` as a DuckDB expression over two prompts as :data:`PLAIN` makes
    them (``a``, ``b``) and whether each was cut (``cut_a``, ``cut_b``): the same answer for every pair (a test holds
    the two to each other), computed where the texts are, so no prompt is read into Python."""
    short = f"(CASE WHEN length({a}) <= length({b}) THEN {a} ELSE {b} END)"
    long_ = f"(CASE WHEN length({a}) <= length({b}) THEN {b} ELSE {a} END)"
    head = f"left({long_}, length({long_}) - length({short}))"
    blocks = (f"list_bool_and(list_transform(string_split(substr({head}, 3, length({head}) - 4), chr(10) || chr(10) || '<|'),"
              " lambda x: split_part(x, '|>', 1) IN ('system', 'developer', 'tools')))")
    only_gateway = f"(starts_with({head}, '<|') AND ends_with({head}, chr(10) || chr(10)) AND {blocks})"
    ends = SAME_EXCHANGE_CUT_HEAD + SAME_EXCHANGE_CUT_TAIL
    return f"""(CASE
        WHEN {a} = '' OR {b} = '' THEN 'unknown'
        WHEN {a} = {b} THEN CASE WHEN length({a}) >= {SAME_EXCHANGE_MIN_SUFFIX} THEN 'same' ELSE 'short' END
        WHEN ends_with({long_}, {short}) AND starts_with({short}, '<|') AND coalesce({only_gateway}, false) THEN 'held'
        WHEN ({cut_a} OR {cut_b}) AND least(length({a}), length({b})) >= {ends}
             AND left({a}, {SAME_EXCHANGE_CUT_HEAD}) = left({b}, {SAME_EXCHANGE_CUT_HEAD})
             AND right({a}, {SAME_EXCHANGE_CUT_TAIL}) = right({b}, {SAME_EXCHANGE_CUT_TAIL}) THEN 'cut'
        END)"""


_WHITE = "' ' || chr(9) || chr(10) || chr(13)"
_LF = "chr(13) || chr(10), chr(10)"

#: A key every two answers the same as :data:`PLAIN` makes them share (a cheap first sieve): the first 64 characters of
#: the answer with CRLF as LF, with no white space at their end. (The first 200 characters hold 64 whatever their
#: CRLFs; two texts the same but for white space at their end have the same first 64, or the same whole text, either
#: way without that white space.) Computing PLAIN on every answer cost 1.4 s of the 1 GB incident's ingest; this, 0.1 s.
ANSWER_KEY = f"hash(rtrim(left(replace(left(response_text, 200), {_LF}), 64), {_WHITE}))"
def core_sql(p: str) -> str:
    """A DuckDB expression: the prompt ``p`` (as :data:`PLAIN` makes it) without the blocks of a gateway's own roles
    (system, developer, tools) at its head, as :func:`forensics.logged_twice.only_gateway_blocks` reads blocks. Two
    prompts one request's whole, or one after a gateway's blocks, have the same (a test holds it): the sieve's key."""
    segments = f"string_split(substr({p}, 3), chr(10) || chr(10) || '<|')"
    first = (f"list_position(list_transform({segments}, lambda x: split_part(x, '|>', 1) "
             "NOT IN ('system', 'developer', 'tools')), true)")
    return (f"(CASE WHEN NOT starts_with({p}, '<|') THEN {p} WHEN {first} IS NULL THEN '' "
            f"ELSE '<|' || array_to_string(list_slice({segments}, {first}, length({segments})), chr(10) || chr(10) || '<|') END)")


def cut_sql(p: str) -> str:
    """A DuckDB expression: the ends of the prompt ``p`` (as :data:`PLAIN` makes it) a cut log keeps, where it is long
    enough to be told by them (:func:`forensics.logged_twice.prompts_alike`'s ``cut``), else NULL."""
    return (f"(CASE WHEN length({p}) >= {SAME_EXCHANGE_CUT_HEAD + SAME_EXCHANGE_CUT_TAIL} THEN left({p}, "
            f"{SAME_EXCHANGE_CUT_HEAD}) || chr(0) || right({p}, {SAME_EXCHANGE_CUT_TAIL}) END)")


#: Each candidate row's sieve keys, its prompt read once (as :data:`PLAIN` makes it): ``core`` (:func:`core_sql`; NULL
#: for a prompt shorter than SAME_EXCHANGE_MIN_SUFFIX, which folds nothing), ``ends`` (:func:`cut_sql`, where a log cut
#: the prompt, or it is long enough to be another's whole), and ``bare`` (no prompt logged).
KEYS_SQL = """
SELECT pos, CASE WHEN length(p) >= {min_prompt} THEN hash({core}) END AS core, hash({ends}) AS ends,
       coalesce(cut, false) AS cut, p = '' AS bare
FROM (SELECT file_row_number AS pos, {plain_prompt} AS p, prompt_truncated AS cut
      FROM read_parquet($path, file_row_number = true) WHERE file_row_number IN (SELECT pos FROM candidates))
"""

#: Pairs of the keyed candidates (``keyed``: pos, tenant_id, source_file, k, received, bucket, core, ends, cut, bare)
#: whose keys may make them one exchange: the same answer key (``k``, or none asked: rows with no answer) in one 10 s
#: bucket or the next, and one request's prompt by its core, or by its ends where one was cut, or a row with none.
#: Joined on keys, never on the answer alone: a canned answer thousands of customers get to prompts of one template
#: would pair every two of them.
NEAR_SQL = """
spread AS (SELECT * EXCLUDE (bucket), bucket + unnest([-1, 0, 1]) AS bucket FROM keyed),
near AS (
    SELECT a.pos AS pos_a, b.pos AS pos_b, a.tenant_id AS t_a, b.tenant_id AS t_b, a.source_file AS f_a,
           b.source_file AS f_b, a.received AS r_a, b.received AS r_b
    FROM keyed a JOIN spread b ON a.k IS NOT DISTINCT FROM b.k AND a.core = b.core AND a.bucket = b.bucket
    UNION ALL
    SELECT a.pos, b.pos, a.tenant_id, b.tenant_id, a.source_file, b.source_file, a.received, b.received
    FROM (SELECT * FROM keyed WHERE cut) a JOIN spread b ON a.k IS NOT DISTINCT FROM b.k AND a.ends = b.ends
                                                        AND a.bucket = b.bucket
    UNION ALL
    SELECT a.pos, b.pos, a.tenant_id, b.tenant_id, a.source_file, b.source_file, a.received, b.received
    FROM (SELECT * FROM keyed WHERE bare) a JOIN spread b ON a.k IS NOT DISTINCT FROM b.k AND a.bucket = b.bucket
),
pairs AS (
    SELECT DISTINCT least(pos_a, pos_b) AS pos_a, greatest(pos_a, pos_b) AS pos_b FROM near
    WHERE pos_a <> pos_b AND t_a <> t_b AND f_a IS DISTINCT FROM f_b AND abs(r_a - r_b) <= {window} {more}
)
"""

#: Pairs of rows of two customer ids with the same answer received within 10 s of each other, logged in two files (one
#: log never holds one exchange twice under two ids; two customers' rows alike in one export are two customers'). Rows
#: are named by their place in the table. Only the rows of (answer key, 10 s) cells two ids in two files share have
#: their prompts read: computing PLAIN on every answer and prompt cost over a second of the 1 GB incident's ingest.
ANSWERED_PAIRS_SQL = """
WITH answered AS (
    SELECT file_row_number AS pos, tenant_id, source_file, {answer_key} AS k, epoch_us(received_at) AS received,
           epoch_us(received_at) // {window} AS bucket
    FROM read_parquet($path, file_row_number = true)
    WHERE tenant_id IS NOT NULL AND received_at IS NOT NULL AND length(response_text) > 0
),
cells AS (
    SELECT k, bucket FROM (SELECT k, tenant_id, source_file, bucket + unnest([-1, 0, 1]) AS bucket FROM answered)
    GROUP BY k, bucket HAVING count(DISTINCT tenant_id) > 1 AND count(DISTINCT source_file) > 1
),
candidates AS (SELECT DISTINCT a.* FROM answered a JOIN cells c ON c.k = a.k AND c.bucket = a.bucket),
keys AS ({keys}),
keyed AS (SELECT * FROM candidates JOIN keys USING (pos)),
{near},
answers AS (
    SELECT pos, md5(answer) AS digest, answer <> '' AS said FROM (
        SELECT file_row_number AS pos, {plain_answer} AS answer FROM read_parquet($path, file_row_number = true)
        WHERE file_row_number IN (SELECT pos_a FROM pairs UNION SELECT pos_b FROM pairs))
)
SELECT p.pos_a, p.pos_b FROM pairs p JOIN answers x ON x.pos = p.pos_a JOIN answers y ON y.pos = p.pos_b
WHERE x.said AND x.digest = y.digest
"""

#: Pairs of rows of two linked customer ids ($first, $second: the pairs, side by side) received within 10 s of each
#: other in two files, one of which logged no answer (a request whose answer one gateway lost, or whose call failed),
#: whose prompts may be one request's by their core or ends (no row with no prompt: :func:`_linked_together`).
UNANSWERED_PAIRS_SQL = """
WITH linked AS (SELECT unnest($first) AS t1, unnest($second) AS t2),
partners AS (SELECT t1 AS tenant_id, t2 AS partner FROM linked UNION ALL SELECT t2, t1 FROM linked),
rows AS (
    SELECT file_row_number AS pos, tenant_id, source_file, NULL::UBIGINT AS k, epoch_us(received_at) AS received,
           epoch_us(received_at) // {window} AS bucket,
           coalesce(rtrim(response_text, ' ' || chr(9) || chr(10) || chr(13)), '') = '' AS unanswered
    FROM read_parquet($path, file_row_number = true)
    WHERE received_at IS NOT NULL AND tenant_id IN (SELECT tenant_id FROM partners)
),
cells AS (SELECT DISTINCT r.tenant_id, bucket + unnest([-1, 0, 1]) AS bucket FROM rows r WHERE unanswered),
candidates AS (
    SELECT r.* EXCLUDE (unanswered) FROM rows r WHERE r.unanswered OR EXISTS (
        SELECT 1 FROM partners p JOIN cells c ON c.tenant_id = p.partner
        WHERE p.tenant_id = r.tenant_id AND c.bucket = r.bucket)
),
keys AS ({keys}),
keyed AS (SELECT c.*, k2.* EXCLUDE (pos) FROM candidates c JOIN keys k2 USING (pos) WHERE NOT k2.bare),
{near}
SELECT pos_a, pos_b FROM pairs
"""

#: More candidate pairs than this (thousands of customers sending one long prompt at the same moments from two logs)
#: are not checked one by one: the fold is left out, and the note says so.
MAX_PAIRS = 2_000_000


class TooManyPairs(Exception):
    """More than :data:`MAX_PAIRS` candidate pairs."""


#: The pairs a query above named ($pos_a, $pos_b: side by side), with how their prompts are alike and what
#: :func:`forensics.logged_twice.runs_together` needs.
ALIKE_SQL = """
WITH pairs AS (SELECT unnest($pos_a) AS pos_a, unnest($pos_b) AS pos_b),
rows AS (
    SELECT file_row_number AS pos, {plain_prompt} AS prompt, coalesce(prompt_truncated, false) AS cut,
           epoch_us(received_at) AS received, {completed} AS completed, reported_prompt_tokens AS usage
    FROM read_parquet($path, file_row_number = true)
    WHERE file_row_number IN (SELECT pos_a FROM pairs UNION SELECT pos_b FROM pairs)
)
SELECT p.pos_a, p.pos_b, {how}, x.received, x.completed, x.usage, y.received, y.completed, y.usage
FROM pairs p JOIN rows x ON x.pos = p.pos_a JOIN rows y ON y.pos = p.pos_b
ORDER BY p.pos_a, p.pos_b
"""

#: What the fold needs of every row some pair names: its keys, where it was logged and whether the engine placed it.
ROWS_SQL = """
SELECT file_row_number AS pos, request_id, tenant_id, source_file, source_line, source_sha256, record_kind,
       response_source_file, response_source_line, received_at,
       decode_node IS NOT NULL OR prefill_node IS NOT NULL AS placed, {plain_answer} = '' AS unanswered
FROM read_parquet($path, file_row_number = true) WHERE file_row_number IN (SELECT unnest($positions))
"""


@dataclass
class Folded:
    """What :func:`fold_logged_twice` did: the rows folded, the customer ids linked (kept id, folded id, exchanges),
    the lines folded per file (SHA-256), which count as duplicates, and whether the fold was left out."""

    rows: int = 0
    linked: list[tuple[str, str, int]] = field(default_factory=list)
    lines: Tally[str] = field(default_factory=Tally)
    left_out: bool = False  # too many candidate pairs to check (MAX_PAIRS): nothing was folded


def fold_logged_twice(con: Any, path: Path, copies_path: Path, files: list[dict[str, Any]]) -> Folded:
    """Fold the exchanges of the table at ``path`` that are one exchange logged twice under two customer ids (see the
    module's words), write them to ``copies_path`` (always: empty where none), and say what was folded. ``files``: the
    case's input files (``path``, ``sha256``), to count a joined split row's response line too."""
    folded = Folded()
    try:
        return _fold(con, path, copies_path, files, folded)
    except TooManyPairs:
        folded.rows, folded.linked, folded.lines, folded.left_out = 0, [], Tally(), True
        _write_copies(copies_path, [])
        return folded


def _fold(con: Any, path: Path, copies_path: Path, files: list[dict[str, Any]], folded: Folded) -> Folded:
    """:func:`fold_logged_twice`'s work (:class:`TooManyPairs` where the candidates are too many to check)."""
    # (a short prompt folds nothing: two customers' monitors may send one "say hello" on the minute, day after day)
    copies = [(a, b, how) for a, b, how, same_usage, times in _alike(con, path, ANSWERED_PAIRS_SQL, {})
              if how != "short" and runs_together(how, same_usage, *times)]
    if not copies:
        _write_copies(copies_path, [])
        return folded
    positions = sorted({p for a, b, _ in copies for p in (a, b)})
    rows = {r[0]: r for r in con.execute(ROWS_SQL.format(plain_answer=PLAIN.format("response_text")), {"path": str(path), "positions": positions}).fetchall()}
    tenant = {pos: r[2] for pos, r in rows.items()}
    # The customer ids two or more exchanges link (ids that are one text under Unicode's NFC are one customer already).
    links: dict[frozenset[str], set[tuple[int, int]]] = {}
    for a, b, _ in copies:
        if customer_key(tenant[a]) != customer_key(tenant[b]):
            links.setdefault(frozenset((tenant[a], tenant[b])), set()).add((a, b))
    linked = {pair for pair, found in links.items() if len(found) >= FOLD_MIN_LINKS}
    if not linked:
        _write_copies(copies_path, [])
        return folded
    parent: dict[int, int] = {}

    def root(p: int) -> int:
        while parent.get(p, p) != p:
            parent[p] = parent.get(parent[p], parent[p])
            p = parent[p]
        return p

    how_of: dict[int, str] = {}

    def join(a: int, b: int, how: str | None) -> None:
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        parent[root(b)] = root(a)
        how_of.setdefault(b, how or "")
        how_of.setdefault(a, how or "")

    for a, b, how in copies:
        if frozenset((tenant[a], tenant[b])) in linked:
            join(a, b, how)
    placed: Tally[str] = Tally(tenant[p] for p in parent if rows[p][10])
    held = dict(con.execute("SELECT tenant_id, count(*) FROM read_parquet($path) WHERE tenant_id IN (SELECT unnest($t)) "
                            "GROUP BY 1", {"path": str(path), "t": sorted({tenant[p] for p in parent})}).fetchall())

    def rank(t: str) -> tuple[int, int, str]:
        return (-placed.get(t, 0), -held.get(t, 0), t)

    # A linked pair's exchange that one log holds with no answer (a call that failed, an answer a gateway lost) is a
    # copy by its prompt and times alone: left, each named the customer's text again under the other id. Only where the
    # row without an answer is the one folded: the answer the other id's row holds is never dropped.
    ordered = sorted(tuple(sorted(pair)) for pair in linked)
    more = [(a, b, how) for a, b, how, _, times in _alike(
                con, path, UNANSWERED_PAIRS_SQL, {"first": [p[0] for p in ordered], "second": [p[1] for p in ordered]})
            if _linked_together(how, *times)]
    if more:
        extra = {r[0]: r for r in con.execute(ROWS_SQL.format(plain_answer=PLAIN.format("response_text")), {"path": str(path), "positions": sorted(
            {p for a, b, _ in more for p in (a, b)} - set(rows))}).fetchall()}
        rows.update(extra)
        tenant.update({pos: r[2] for pos, r in extra.items()})
        for a, b, how in more:
            folded_side = a if rank(tenant[a]) > rank(tenant[b]) else b
            if rows[folded_side][11]:
                join(a, b, how)

    groups: dict[int, list[int]] = {}
    for p in parent:
        groups.setdefault(root(p), []).append(p)
    out: list[dict[str, Any]] = []
    pair_counts: Tally[tuple[str, str]] = Tally()
    joined = {k.joined for k in FORMATS.kinds() if k.half is not None and k.joined}
    sha_of = {f["path"]: f["sha256"] for f in files}
    for members in groups.values():
        keep = min((tenant[p] for p in members), key=rank)
        kept = min(p for p in members if tenant[p] == keep)
        for p in sorted(members):
            if tenant[p] == keep:
                continue
            r = rows[p]
            out.append({"request_id": r[1], "tenant_id": r[2], "source_file": r[3], "source_line": r[4],
                        "received_at": r[9], "kept_request_id": rows[kept][1], "kept_tenant_id": keep,
                        "prompts": how_of.get(p), "pos": p})
            pair_counts[(keep, r[2])] += 1
            folded.lines[r[5]] += 1
            if r[6] in joined and r[7] is not None and r[7] in sha_of:  # the answer's line of a joined split row
                folded.lines[sha_of[r[7]]] += 1
    out.sort(key=lambda r: (r["kept_tenant_id"], r["tenant_id"], r["request_id"], r["pos"]))
    _drop_rows(path, {r["pos"] for r in out})
    _write_copies(copies_path, out)
    folded.rows = len(out)
    folded.linked = sorted(((k, t, n) for (k, t), n in pair_counts.items()), key=lambda x: (-x[2], x[0], x[1]))
    return folded


def _linked_together(how: str | None, ra: int, ca: int | None, rb: int, cb: int | None) -> bool:
    """:func:`forensics.logged_twice.runs_together` for two rows of ids already linked as one customer, one of which
    logged no answer: the prompts must be one request's at length (the same text of 64 characters or more, one after a
    gateway's own blocks, or cut), and where one logged no completion time (a request whose answer was never logged),
    its time received decides alone; no usage is asked (a split request half reports none)."""
    if how not in ("same", "held", "cut") or abs(ra - rb) > SAME_EXCHANGE_US:
        return False
    if ca is None or cb is None:
        return True
    return runs_together(how, True, ra, ca, rb, cb)


def _alike(con: Any, path: Path, pairs_sql: str, params: dict[str, Any]
           ) -> list[tuple[int, int, str | None, bool, tuple[int, int | None, int, int | None]]]:
    """The pairs ``pairs_sql`` names, each with how their prompts are alike, whether they reported the same usage, and
    their times (received and completed, of each) as :func:`forensics.logged_twice.runs_together` takes them."""
    plain_answer = PLAIN.format("response_text")
    keys = KEYS_SQL.format(min_prompt=SAME_EXCHANGE_MIN_SUFFIX, core=core_sql("p"), ends=cut_sql("p"),
                           plain_prompt=PLAIN.format("prompt_text"))
    more = ("" if pairs_sql is ANSWERED_PAIRS_SQL else
            "AND (pos_a IN (SELECT pos FROM rows WHERE unanswered) OR pos_b IN (SELECT pos FROM rows WHERE unanswered)) "
            "AND EXISTS (SELECT 1 FROM partners x WHERE x.tenant_id = t_a AND x.partner = t_b)")
    near = NEAR_SQL.format(window=SAME_EXCHANGE_US, more=more)
    pairs = con.execute(pairs_sql.format(plain_answer=plain_answer, answer_key=ANSWER_KEY, keys=keys, near=near,
                                         window=SAME_EXCHANGE_US) + f" LIMIT {MAX_PAIRS + 1}",
                        {"path": str(path), **params}).fetchall()
    if len(pairs) > MAX_PAIRS:
        raise TooManyPairs
    if not pairs:  # (the prompts are never read)
        return []
    sql = ALIKE_SQL.format(plain_prompt=PLAIN.format("prompt_text"), completed=COMPLETED_US,
                           how=prompts_alike_sql("x.prompt", "x.cut", "y.prompt", "y.cut"))
    found = con.execute(sql, {"path": str(path), "pos_a": [a for a, _ in pairs], "pos_b": [b for _, b in pairs]})
    return [(a, b, how, ua is not None and ua == ub, (ra, ca, rb, cb))
            for a, b, how, ra, ca, ua, rb, cb, ub in found.fetchall()]


def _drop_rows(path: Path, positions: set[int]) -> None:
    """Write the table at ``path`` again without the rows at ``positions`` (row groups as they were, less those)."""
    sink = ParquetSink(path, schema.EXCHANGES)
    try:
        pf = pq.ParquetFile(path)
        start = 0
        for g in range(pf.num_row_groups):
            table = pf.read_row_group(g)
            here = [p - start for p in positions if start <= p < start + table.num_rows]
            if here:
                keep = pc.invert(pc.is_in(pa.array(range(table.num_rows), pa.int64()), value_set=pa.array(here, pa.int64())))
                table = table.filter(keep)
            start += pf.metadata.row_group(g).num_rows
            sink.write_batch(table)
        sink.close()
    except BaseException:
        sink.abort()
        raise


def _write_copies(path: Path, rows: list[dict[str, Any]]) -> None:
    """``logged_twice.parquet``: each folded row and the row it is a copy of."""
    names = schema.LOGGED_TWICE.names
    table = pa.table({n: [r[n] for r in rows] for n in names}, schema=schema.LOGGED_TWICE)
    with ParquetSink(path, schema.LOGGED_TWICE) as sink:
        sink.write_batch(table)
