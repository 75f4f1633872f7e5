"""Exchanges logged twice, under two customer ids or under one in two logs, folded into one by the finaliser.

A second gateway in front of the first, logging under its own request ids and account names, or a spend-log export
naming teams beside callbacks naming organisations, holds the same traffic twice. Kept as two exchanges, every
suspect named its customer twice (once under a name that is not the customer's own), and every source's text was held
by two customer ids, so its passages read as common and exposed customers fell off the list (a review).

Two rows are one exchange by the rule the match stage uses (:mod:`forensics.logged_twice`): the same answer, one
request's prompt, received within 10 s, one's run holding the other's. Two real customers' exchanges can meet it (the
same long question, answered alike at the same moment), so one pair proves nothing: two ids are linked only by pairs of
rows of two log files, with long prompts or of one request id, that hold :data:`FOLD_MIN_LINKS` rows or more of each,
in as many 10 s windows, and :data:`FOLD_MIN_COVERAGE` of one id's calls while either was active (:func:`_linked`).
Copies under one id in two logs need no link. The row the engine logs place on a node is kept, whatever its id; between
rows neither placed, each linked pair keeps the id whose paired rows the engine places most often, then the one whose
rows hold whole prompts, then the one the logs hold the most records under. A row folds only into a row it is paired
with that holds as much text (:func:`_holds_as_much`). The folded rows leave the exchanges table for
``logged_twice.parquet``, which names the row each copies; their lines count as duplicates of their files.

Before any of that, the logs' clocks are read off the exchanges two logs both hold (:func:`clock_offsets`): a front door
whose clock drifted, or which writes local time with no zone, logged every copy seconds or hours from its gateway's,
and none folded. The rows of a log read as apart have their times moved onto the other log's clock in the table itself,
so every later stage compares times on one clock.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import heapq
import itertools
from collections import Counter as Tally
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

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
    SAME_EXCHANGE_SKEW_US,
    SAME_EXCHANGE_US,
    runs_together,
)

#: Two customer ids are folded into one only where pairs of rows alike hold this many rows of each, in as many 10 s
#: windows: one pair, or one question and its retry, may be two customers asking the same long question at the same
#: moment and answered alike.
FOLD_MIN_LINKS = 2
#: ... and only where those rows are this share or more of one id's calls that could pair while either id was active: a
#: gateway in front logs nearly all of a customer's calls; two customers' monitors sending one long canary on the
#: minute, each from its own replica's log, are a sliver of either's traffic (a review).
FOLD_MIN_COVERAGE = 0.5

#: Two logs' clocks are read as apart only where this many exchanges or more that both logged (the same answer, once in
#: each log) agree on it within SAME_EXCHANGE_SKEW_US ...
CLOCK_MIN_EXCHANGES = 20
#: ... and are this share or more of the exchanges found in both, by when they completed (a queue or a guardrail in
#: front delays when a call reaches the gateway behind, not when its answer comes back through it) ...
CLOCK_MIN_SHARE = 0.5
#: ... or, where too few logged when they completed, this share or more by when they were received ...
CLOCK_MIN_SHARE_RECEIVED = 0.8
#: ... of this many customers or more (one customer's benchmark, run twice through two gateways hours apart, or a
#: monitor's hourly round, is the same answers at one offset: a review) ...
CLOCK_MIN_CUSTOMERS = 3
#: ... and this share or more of the answers the smaller log holds once while the two overlap: a gateway in front logs
#: nearly every call of the one behind, while two logs of unrelated traffic share a few canned answers, and three
#: customers running one benchmark through two gateways hours apart are a part of either's traffic (a review) ...
CLOCK_MIN_COVER = 0.8
#: ... and by no more than this: a clock set to another time zone is at most 14 hours off.
CLOCK_MAX_US = 15 * 3600 * 1_000_000
#: An answer shorter than this says too little to tell one exchange in two logs by it.
CLOCK_MIN_ANSWER = 128
#: A file of a log whose own exchanges agree on another offset than its log's (another host, named like the others)
#: moves by its own where this many or more of them, and CLOCK_MIN_SHARE_RECEIVED of its exchanges, agree on it.
CLOCK_MIN_FILE_EXCHANGES = 10
#: An answer more logs than this hold once each is a canned one, not one exchange logged again (a front door, a
#: spend log and callbacks hold one exchange three times): left out before logs are paired, so that thousands of
#: folders of one canned answer pair no logs (a review).
CLOCK_MAX_LOGS = 4


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


#: What the fold asks of each row it looks at, its prompt and answer read once (as :data:`PLAIN` makes them), for the
#: rows at the places ``{positions}`` selects, into the temporary table ``fold_facts``: where it was logged and under
#: which ids; ``k`` (:data:`ANSWER_KEY`), ``usage``, ``received`` and ``completed`` (microseconds, as
#: :func:`forensics.logged_twice.runs_together` takes them) and ``bucket`` (10 s); the sieve's keys, ``core``
#: (:func:`core_sql`; NULL where no prompt) and ``ends`` (:func:`cut_sql`; NULL unless long enough: a NULL key's hash
#: would be one value for all); ``long`` (a prompt of SAME_EXCHANGE_MIN_SUFFIX characters or more), ``cut``, ``bare``
#: (no prompt), ``said`` (an answer), ``plen``, and the MD5s of the prompt and the answer. Computed once per row:
#: repeated in each query, the plain prompts of a second gateway's copies of 15,458 requests took 34 s to fold.
FACTS_SQL = """
{verb} SELECT pos, request_id, tenant_id, source_file, source_line, source_sha256, record_kind, response_source_file,
       response_source_line, received_at, placed, cut, p = '' AS bare, answer <> '' AS said, length(p) AS plen, k, usage,
       received, completed, received // {window} AS bucket,
       CASE WHEN p <> '' THEN hash({core}) END AS core, length(p) >= {min_prompt} AS long,
       CASE WHEN length(p) >= {cut_length} THEN hash({ends}) END AS ends, md5(answer) AS digest, md5(p) AS pdigest
FROM (SELECT file_row_number AS pos, request_id, tenant_id, source_file, source_line, source_sha256, record_kind,
             response_source_file, response_source_line, received_at,
             decode_node IS NOT NULL OR prefill_node IS NOT NULL AS placed, coalesce(prompt_truncated, false) AS cut,
             {plain_prompt} AS p, {plain_answer} AS answer, {answer_key} AS k, reported_prompt_tokens AS usage,
             epoch_us(received_at) - {shift} AS received, {completed} - {shift} AS completed
      FROM read_parquet($path, file_row_number = true) {clock_join}
      WHERE received_at IS NOT NULL AND tenant_id IS NOT NULL AND file_row_number IN ({positions}))
"""

#: A log, as the clocks are read: where a row was logged, with every run of digits, UUID and run of eight hex digits
#: or more in its path read as one, and a compressed file's ending dropped (a gateway's day files, hour files, hour
#: folders, rotated files and a log shipper's files are one log: reviews found layouts the reading of dates alone
#: split), and the kind of record it was logged as (a front door writing its own format, or under its own name, beside
#: them is another log). Two hosts ``gw01`` and ``gw02`` are one log so: each file moves only where its own exchanges
#: agree with the log's offset (:func:`clock_offsets`).
LOG_SQL = ("regexp_replace(regexp_replace(regexp_replace(regexp_replace(source_file, '[.](gz|zst|zstd|bz2|xz|lz4)$', ''), "
           "'[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}', '#', 'g'), '[0-9a-fA-F]{8,}', '#', 'g'), "
           "'[0-9]+', '#', 'g') || chr(0) || coalesce(record_kind, '')")

#: The answers the clocks are read off, into the temporary table ``clock_answers``: per row with an answer of
#: CLOCK_MIN_ANSWER characters or more, its log (:data:`LOG_SQL`), the answer's key and length, when it was received and
#: completed (microseconds), its customer id and its file (``file``; ``f``, a number for it: the lists of exchanges
#: carry it, and paths in them took 2.5 KB an exchange, a review).
CLOCK_ANSWERS_SQL = """
CREATE OR REPLACE TEMP TABLE clock_answers AS
WITH answers AS (
    SELECT source_file, coalesce(record_kind, '') AS record_kind, {answer_key} AS k, strlen(response_text) AS n,
           epoch_us(received_at) AS r, {completed} AS c, tenant_id AS t, coalesce(rid, request_id) AS q
    FROM read_parquet($path)
    WHERE tenant_id IS NOT NULL AND received_at IS NOT NULL AND source_file IS NOT NULL
      AND strlen(response_text) >= {min_answer}
),
logs AS (  -- (the path's patterns once a file, not once a row: a third of the reading's time on the 1 GB incident)
    SELECT source_file, record_kind, {log} AS g, dense_rank() OVER (ORDER BY source_file)::INTEGER AS f
    FROM (SELECT DISTINCT source_file, record_kind FROM answers)
)
SELECT g, f, source_file AS file, k, n, r, c, t, q FROM answers JOIN logs USING (source_file, record_kind)
"""

#: Per pair of logs (``a`` before ``b``), each exchange both hold, as how much later than in ``a`` it was received in
#: ``b`` and, where both logged it, completed (microseconds, in order), with its customer id in ``a``: an answer whose
#: first characters (:data:`ANSWER_KEY`, which reads CRLF as LF) each log holds once (a job sending one prompt every day
#: is no one exchange) and at most CLOCK_MAX_LOGS logs hold, its length in both within 5% (two logs' line ends and
#: white space at the end may differ: a review; their plain form on every answer cost half a second a gigabyte).
#: Pairs with fewer than CLOCK_MIN_EXCHANGES are left out.
CLOCK_SQL = """
WITH once AS (SELECT g, k, min(n) AS n, min(r) AS r, min(c) AS c, min(t) AS t, min(f) AS f FROM clock_answers
              GROUP BY g, k HAVING count(*) = 1),
shared AS (SELECT o.* FROM once o SEMI JOIN (SELECT k FROM once GROUP BY k
                                             HAVING count(*) BETWEEN 2 AND {max_logs}) s ON s.k = o.k)
SELECT a.g, b.g, list({{'d': b.r - a.r, 't': a.t, 'fa': a.f, 'fb': b.f}} ORDER BY b.r - a.r, a.t, a.f, b.f),
       coalesce(list({{'d': b.c - a.c, 't': a.t, 'fa': a.f, 'fb': b.f}} ORDER BY b.c - a.c, a.t, a.f, b.f)
                FILTER (WHERE a.c IS NOT NULL AND b.c IS NOT NULL), [])
FROM shared a JOIN shared b ON a.k = b.k AND a.g < b.g AND abs(a.n - b.n) <= 0.05 * greatest(a.n, b.n)
GROUP BY a.g, b.g HAVING count(*) >= {min_exchanges}
ORDER BY a.g, b.g
"""

#: Per log and engine node, each request of the log (held once by it, with its completion time) that the engine logs
#: end on that node alone (``{ends}``: per engine request id ``rid``, when its last event past the prefill was written,
#: ``ended_us``, on ``ended_nodes`` nodes, ``ended_node``, and when its first event anywhere was, ``started_us``), as how
#: much later the node's clock read then than the log's when the log saw the request complete (``d``, microseconds, in
#: order) and how much later the engine's first event than when the log received it (``s``), with its customer id and
#: file. The node's own clock cancels out between two logs (:func:`_engine_edges`).
ENGINE_CLOCK_SQL = """
WITH once AS (SELECT g, q, min(f) AS f, min(t) AS t, min(r) AS r, min(c) AS c FROM clock_answers WHERE c IS NOT NULL
              GROUP BY g, q HAVING count(*) = 1)
SELECT o.g, x.ended_node, list({{'d': x.ended_us - o.c, 's': x.started_us - o.r, 'r': o.r, 't': o.t, 'fa': o.f}}
                               ORDER BY x.ended_us - o.c, o.t, o.f)
FROM once o JOIN {ends} x ON x.rid = o.q AND x.ended_nodes = 1 AND x.ended_us IS NOT NULL
GROUP BY o.g, x.ended_node HAVING count(*) >= {min_exchanges}
ORDER BY o.g, x.ended_node
"""

#: Per log with CLOCK_MIN_EXCHANGES or more requests (held once) the engine logs name (``{ends}``), a file of it and
#: how many of them the engine logs give a time for the end of.
ENGINE_NAMED_SQL = """
WITH once AS (SELECT g, q, min(file) AS file FROM clock_answers GROUP BY g, q HAVING count(*) = 1)
SELECT o.g, min(o.file), count(*) FILTER (WHERE x.ended_us IS NOT NULL AND x.ended_nodes = 1)
FROM once o JOIN {ends} x ON x.rid = o.q
GROUP BY o.g HAVING count(*) >= {min_exchanges}
ORDER BY o.g
"""

#: How many answers each of two logs ($a, $b) holds once (and at most CLOCK_MAX_LOGS logs hold) while they overlap,
#: ``b``'s times taken back by $offset, in the files of each but those whose own exchanges agree on another offset
#: ($xa, $xb: another host's): what the exchanges both hold are a share of (:func:`clock_offsets`).
CLOCK_OVERLAP_SQL = """
WITH own AS (
    SELECT g, k, min(r) - CASE WHEN g = $b THEN $offset ELSE 0 END AS r FROM clock_answers
    WHERE k IN (SELECT k FROM clock_answers GROUP BY k HAVING count(DISTINCT g) <= {max_logs})
    GROUP BY g, k HAVING count(*) = 1 AND g IN ($a, $b)
       AND min(f) NOT IN (SELECT unnest(CASE WHEN g = $a THEN $xa ELSE $xb END))
),
span AS (SELECT max(lo) AS lo, min(hi) AS hi FROM (SELECT min(r) AS lo, max(r) AS hi FROM own GROUP BY g))
SELECT count(*) FILTER (WHERE g = $a), count(*) FILTER (WHERE g = $b) FROM own, span WHERE r BETWEEN span.lo AND span.hi
"""

#: The rows of (answer key, 10 s) cells two log files share: the only rows whose texts the search for evidence reads
#: (rows are named by their place in the table).
CANDIDATES_SQL = """
CREATE OR REPLACE TEMP TABLE fold_candidates AS
WITH answered AS (
    SELECT pos, tenant_id, source_file, k, received, received // {window} AS bucket
    FROM (SELECT file_row_number AS pos, tenant_id, source_file, {answer_key} AS k,
                 epoch_us(received_at) - {shift} AS received
          FROM read_parquet($path, file_row_number = true) {clock_join}
          WHERE tenant_id IS NOT NULL AND received_at IS NOT NULL AND length(response_text) > 0)
),
cells AS (
    SELECT k, bucket FROM (SELECT k, tenant_id, source_file, bucket + unnest([-1, 0, 1]) AS bucket FROM answered)
    GROUP BY k, bucket HAVING count(DISTINCT source_file) > 1
)
SELECT DISTINCT a.* FROM answered a JOIN cells c ON c.k = a.k AND c.bucket = a.bucket
"""

#: Pairs of the candidates that hold the same answer received within 10 s of each other in two log files (one log
#: never holds one exchange twice under two ids: two customers' rows alike in one export are two customers'), with long
#: prompts one request's by their core, or by their ends where one was cut, or one with no prompt beside a row of its
#: request id (one gateway's two exports: LiteLLM's spend log keeps no prompt by default, and its teams' rows were
#: never linked to their organisations', a review): the evidence that links two ids, or the copies under one id (a
#: second gateway keyed like the first). Joined on keys and buckets, never on the answer alone (a canned answer
#: thousands of customers get to one template would pair every two of them).
EVIDENCE_PAIRS_SQL = """
WITH keyed AS (SELECT * FROM fold_facts WHERE said AND long AND NOT bare),
spread AS (SELECT * EXCLUDE (bucket), bucket + unnest([-1, 0, 1]) AS bucket FROM keyed),
near AS (
    SELECT a.pos AS pos_a, b.pos AS pos_b, a.tenant_id AS t_a, b.tenant_id AS t_b, a.source_file AS f_a,
           b.source_file AS f_b, a.received AS r_a, b.received AS r_b, a.digest AS d_a, b.digest AS d_b
    FROM keyed a JOIN spread b ON a.k = b.k AND a.core = b.core AND a.bucket = b.bucket
    UNION ALL
    SELECT a.pos, b.pos, a.tenant_id, b.tenant_id, a.source_file, b.source_file, a.received, b.received, a.digest,
           b.digest
    FROM (SELECT * FROM keyed WHERE cut) a JOIN spread b ON a.k = b.k AND a.ends = b.ends AND a.bucket = b.bucket
    UNION ALL
    SELECT a.pos, b.pos, a.tenant_id, b.tenant_id, a.source_file, b.source_file, a.received, b.received, a.digest,
           b.digest
    FROM (SELECT * FROM fold_facts WHERE said AND bare) a
    JOIN (SELECT * EXCLUDE (bucket), bucket + unnest([-1, 0, 1]) AS bucket FROM fold_facts WHERE said) b
      ON a.k = b.k AND a.bucket = b.bucket AND a.request_id = b.request_id
)
{nearest}
WHERE pos_a <> pos_b AND f_a IS DISTINCT FROM f_b AND abs(r_a - r_b) <= {window} AND d_a = d_b
{nearest_end}
"""

#: Pairs of rows of two linked customer ids ($first, $second: the pairs, side by side) received within 10 s of each
#: other in two log files that may be one exchange: the same answer or one with none, and prompts one request's by
#: their core (any length) or ends, or a row with no prompt beside the same answer and usage. Joined on the partner id,
#: the bucket and a key, so a busy pair of ids stays bounded.
LINKED_PAIRS_SQL = """
WITH linked AS (SELECT unnest($first) AS t1, unnest($second) AS t2),
partners AS (SELECT t1 AS tenant_id, t2 AS partner FROM linked UNION ALL SELECT t2, t1 FROM linked),
keyed AS (SELECT * FROM fold_facts WHERE tenant_id IN (SELECT tenant_id FROM partners)),
spread AS (SELECT * EXCLUDE (bucket), bucket + unnest([-1, 0, 1]) AS bucket FROM keyed),
near AS (
    SELECT a.pos AS pos_a, b.pos AS pos_b, a.tenant_id AS t_a, b.tenant_id AS t_b, a.source_file AS f_a,
           b.source_file AS f_b, a.received AS r_a, b.received AS r_b, a.said AS s_a, b.said AS s_b, a.digest AS d_a,
           b.digest AS d_b
    FROM keyed a JOIN partners p ON p.tenant_id = a.tenant_id
    JOIN spread b ON b.tenant_id = p.partner AND b.bucket = a.bucket AND a.core = b.core
    UNION ALL
    SELECT a.pos, b.pos, a.tenant_id, b.tenant_id, a.source_file, b.source_file, a.received, b.received, a.said,
           b.said, a.digest, b.digest
    FROM (SELECT * FROM keyed WHERE cut) a JOIN partners p ON p.tenant_id = a.tenant_id
    JOIN spread b ON b.tenant_id = p.partner AND b.bucket = a.bucket AND a.ends = b.ends
    UNION ALL
    SELECT a.pos, b.pos, a.tenant_id, b.tenant_id, a.source_file, b.source_file, a.received, b.received, a.said,
           b.said, a.digest, b.digest
    FROM (SELECT * FROM keyed WHERE bare AND said) a JOIN partners p ON p.tenant_id = a.tenant_id
    JOIN spread b ON b.tenant_id = p.partner AND b.bucket = a.bucket AND a.k = b.k AND a.usage = b.usage
)
{nearest}
WHERE pos_a <> pos_b AND f_a IS DISTINCT FROM f_b AND abs(r_a - r_b) <= {window}
  AND (d_a = d_b AND s_a OR NOT s_a OR NOT s_b)
{nearest_end}
"""

#: The pairs a query keeps, out of the rows ``near`` offers: for each row, the :data:`NEAREST` rows of each other id
#: nearest to it in time (then by place); a pair stays where either of its rows keeps it. A load test or a sampling
#: job sending one prompt a thousand times in seconds through both gateways paired every two of its calls (a million
#: pairs, read into Python); one exchange's copy is the call nearest it.
NEAREST_SQL = ("SELECT DISTINCT least(pos_a, pos_b) AS pos_a, greatest(pos_a, pos_b) AS pos_b FROM ("
               "SELECT pos_a, pos_b, row_number() OVER (PARTITION BY pos_a, t_b ORDER BY {first} abs(r_a - r_b), pos_b) "
               "AS nearest FROM (SELECT DISTINCT * FROM near)")
#: Within linked ids, the rows holding the same answer come first: cancelled calls of one prompt, nearer in time and
#: with no answer, took both places of the answered call's copy (a review).
SAME_ANSWER_FIRST = "NOT coalesce(s_a AND s_b AND d_a = d_b, false),"
NEAREST_END = ") WHERE nearest <= {nearest_n}"
#: How many rows of each other id a row keeps as candidates of its copy (:data:`NEAREST_SQL`).
NEAREST = 2

#: More candidate pairs than this in one query (thousands of customers sending one long prompt at the same moments
#: from two logs) are not checked one by one: the fold is left out, and the note says so.
MAX_PAIRS = 2_000_000


class TooManyPairs(Exception):
    """More than :data:`MAX_PAIRS` candidate pairs."""


#: How the prompts of the pairs ($pos_a, $pos_b: side by side) whose prompts differ are alike (``held``, ``cut`` or
#: NULL: :func:`prompts_alike_sql`), with the MD5 of what the longer holds before the shorter's length (of a ``held``
#: pair: the blocks one log put at its head). Only these pairs' prompts are read again.
ALIKE_SQL = """
WITH pairs AS (SELECT unnest($pos_a) AS pos_a, unnest($pos_b) AS pos_b),
rows AS (
    SELECT file_row_number AS pos, {plain_prompt} AS prompt, coalesce(prompt_truncated, false) AS cut
    FROM read_parquet($path, file_row_number = true)
    WHERE file_row_number IN (SELECT pos_a FROM pairs UNION SELECT pos_b FROM pairs)
)
SELECT p.pos_a, p.pos_b, {how},
       CASE WHEN length(x.prompt) <> length(y.prompt) THEN md5(left(CASE WHEN length(x.prompt) > length(y.prompt)
            THEN x.prompt ELSE y.prompt END, abs(length(x.prompt) - length(y.prompt)))) END AS head
FROM pairs p JOIN rows x ON x.pos = p.pos_a JOIN rows y ON y.pos = p.pos_b
"""


class _Row(NamedTuple):
    """What Python asks of a row of ``fold_facts`` (:data:`FACTS_SQL`; its keys and digests stay in DuckDB)."""

    pos: int
    request_id: str
    tenant_id: str
    source_file: str | None
    source_line: int | None
    source_sha256: str | None
    record_kind: str | None
    response_source_file: str | None
    received_at: Any
    placed: bool
    cut: bool
    bare: bool
    said: bool
    plen: int
    usage: int | None
    received: int
    completed: int | None
    pdigest: str


@dataclass(frozen=True)
class ClockOffset:
    """A log (its rows of the kind ``kind`` logged in ``files``, the files whose own exchanges agree; a split log's
    answers in ``answer_files``) whose clock was read as ``offset_us`` (microseconds) later than that of the log of
    ``reference_kind`` rows in the ``reference`` files, by the ``exchanges`` both logged that agree on it, of
    ``customers`` customers (see :func:`clock_offsets`); ``through`` ``engine``: by the log's requests whose end the
    engine logs place on the nodes that also ran the other log's."""

    kind: str
    files: tuple[str, ...]
    answer_files: tuple[str, ...]
    reference_kind: str
    reference: tuple[str, ...]
    offset_us: int
    exchanges: int
    customers: int
    # "exchanges": both logs held them; "engine": requests the engine logs place on a node; "log": none of its own (its
    # files moved with the rest of their log)
    through: str = "exchanges"


@dataclass
class Folded:
    """What :func:`fold_logged_twice` did: the rows folded, the customer ids linked (kept id, folded id, exchanges),
    the lines folded per file (SHA-256), which count as duplicates, the linked pairs of ids whose kept id no engine log
    placed, the copies under one id, and whether the fold was left out."""

    rows: int = 0
    linked: list[tuple[str, str, int]] = field(default_factory=list)
    lines: Tally[str] = field(default_factory=Tally)
    unplaced: int = 0
    same_id: int = 0  # of the rows folded, copies under the same customer id (a second gateway keyed like the first)
    left_out: bool = False  # too many candidate pairs to check (MAX_PAIRS): nothing was folded
    clocks: list[ClockOffset] = field(default_factory=list)  # logs whose times were moved onto another's clock
    unread_clocks: list[ClockOffset] = field(default_factory=list)  # logs alike at an offset not read (for a note)
    engine_unchecked: list[str] = field(default_factory=list)  # logs the engine logs could not check (a file of each)


def fold_logged_twice(con: Any, path: Path, copies_path: Path, files: list[dict[str, Any]],
                      engine_ends: str | None = None) -> Folded:
    """Fold the exchanges of the table at ``path`` that are one exchange logged twice, under two customer ids or under
    one in two logs (see the module's words), write them to ``copies_path`` (always: empty where none), and say what was folded. ``files``: the
    case's input files (``path``, ``sha256``), to count a joined split row's response line too; ``engine_ends``: a
    table of when the engine logs say each request ended, which the logs' clocks are read against too
    (:func:`clock_offsets`)."""
    clocks, unread, unchecked = clock_offsets(con, path, engine_ends)
    shifts = {(f, c.kind): c.offset_us for c in clocks for f in c.files}
    con.execute("CREATE OR REPLACE TEMP TABLE fold_clock AS SELECT unnest($f) AS f, unnest($k) AS kind, "
                "unnest($s)::BIGINT AS shift", {"f": [f for f, _ in shifts], "k": [k for _, k in shifts],
                                                "s": list(shifts.values())})
    try:
        folded, copies = _fold(con, path, files, clocks)
    except TooManyPairs:
        folded, copies = Folded(left_out=True, clocks=clocks), []
    finally:
        con.execute("DROP TABLE IF EXISTS fold_clock")
    folded.unread_clocks = unread
    folded.engine_unchecked = unchecked
    if copies or shifts:
        _rewrite(path, {r["pos"] for r in copies}, shifts)
    _write_copies(copies_path, copies)
    return folded


def _fold(con: Any, path: Path, files: list[dict[str, Any]], clocks: list[ClockOffset]
          ) -> tuple[Folded, list[dict[str, Any]]]:
    """:func:`fold_logged_twice`'s choice of the copies (each a row of ``logged_twice.parquet``, with its place), the
    table untouched; the times of the logs ``clocks`` names are compared on one clock (their offsets in the temporary
    table ``fold_clock``)."""
    folded = Folded(clocks=clocks)
    shifts = {(f, c.kind): c.offset_us for c in clocks for f in c.files}
    shift = {"shift": "coalesce(clock.shift, 0)", "clock_join": "LEFT JOIN fold_clock clock ON clock.f = source_file "
                                                              "AND clock.kind = coalesce(record_kind, '')"
             } if clocks else {"shift": "0", "clock_join": ""}
    # The rows of (answer key, 10 s) cells two ids in two files share, first: where there are none (nearly every
    # case), no prompt is read.
    con.execute(CANDIDATES_SQL.format(answer_key=ANSWER_KEY, window=SAME_EXCHANGE_US, **shift), {"path": str(path)})
    try:
        if not con.execute("SELECT count(*) FROM fold_candidates").fetchall()[0][0]:
            return folded, []
        _facts(con, path, "CREATE OR REPLACE TEMP TABLE fold_facts AS", "SELECT pos FROM fold_candidates", {}, shift)
        rows = _rows(con)
        evidence = [(a, b, how, head) for a, b, how, head in _pairs(con, path, EVIDENCE_PAIRS_SQL, {}, rows)
                    if (how in ("same", "held", "cut") or (how == "unknown" and rows[a].request_id == rows[b].request_id))
                    and _runs_together(how, rows[a], rows[b])]
        if not evidence:
            return folded, []
        # Copies under one customer id (a second gateway keyed like the first) need no link.
        one_id = [e for e in evidence if customer_key(rows[e[0]].tenant_id) == customer_key(rows[e[1]].tenant_id)]
        linked = _linked(con, path, [e[:3] for e in evidence if e not in one_id], rows)
        if not linked and not one_id:
            return folded, []
        ordered = sorted(tuple(sorted(pair)) for pair in linked)
        tenants = sorted({t for pair in linked for t in pair} | {rows[p].tenant_id for e in one_id for p in e[:2]})
        if linked:
            _facts(con, path, "INSERT INTO fold_facts",
                   "SELECT file_row_number FROM read_parquet($path, file_row_number = true) WHERE tenant_id IN "
                   "(SELECT unnest($tenants)) AND file_row_number NOT IN (SELECT pos FROM fold_facts)",
                   {"tenants": sorted({t for pair in linked for t in pair})}, shift)
            rows = _rows(con)
        pairs = _pairs(con, path, LINKED_PAIRS_SQL, {"first": [a for a, _ in ordered], "second": [b for _, b in ordered]},
                       rows) if linked else []
    finally:
        con.execute("DROP TABLE IF EXISTS fold_candidates")
        con.execute("DROP TABLE IF EXISTS fold_facts")
    records = dict(con.execute(
        "SELECT tenant_id, count(*) FROM read_parquet($path) WHERE tenant_id IN (SELECT unnest($t)) GROUP BY 1",
        {"path": str(path), "t": tenants}).fetchall()) if tenants else {}
    involved = {p for a, b, *_ in evidence for p in (a, b)} | {p for a, b, _, _ in pairs for p in (a, b)}
    # Of the rows paired, not of all an id's rows: a front door's account name that is another customer's own id
    # outranked the customer whose gateway rows the engine placed, and that customer's rows folded away (a review).
    on_nodes: Tally[str] = Tally(rows[p].tenant_id for p in involved if rows[p].placed)
    cut_rows: Tally[str] = Tally(rows[p].tenant_id for p in involved if rows[p].cut or rows[p].bare)

    def rank(t: str) -> tuple[int, int, int, str]:
        # The engine's own record names the inner gateway's request; then the id whose rows hold whole prompts (a
        # spend log cuts or drops them); then the id the logs hold the most records under.
        return (-on_nodes.get(t, 0), cut_rows.get(t, 0), -records.get(t, 0), t)

    def row_rank(r: _Row) -> tuple[Any, ...]:
        # The row the engine logs place first, whatever its id: a front door's copy under an account name that is
        # another customer's id is never the row kept (a review); then the id's rank, then the row holding the most.
        return (not r.placed, rank(r.tenant_id), r.cut, r.bare, not r.said, -r.plen, r.pos)

    together = [(rows[a], rows[b], how, head) for a, b, how, head in pairs
                if frozenset((rows[a].tenant_id, rows[b].tenant_id)) in linked
                and (_runs_together(how, rows[a], rows[b]) if rows[a].said and rows[b].said
                     else _linked_together(how, rows[a].received, rows[a].completed, rows[b].received, rows[b].completed))]
    together += [(rows[a], rows[b], how, head) for a, b, how, head in one_id]
    # Blocks a gateway puts at the head of what it logs are its own: the same before the copies of several customers'
    # exchanges. A customer's own system prompt is its own, however often it sends it.
    # (Counted by the ids of the rows that lack the head: one customer's three logs, or its two accounts at a front
    # door, are two pairs of ids around one customer, whose own system block they would pass for a gateway's.)
    heads: dict[str, set[str]] = {}
    for ra, rb, how, head in together:
        if how == "held" and head is not None:
            heads.setdefault(head, set()).add((ra if ra.plen < rb.plen else rb).tenant_id)
    gateway_heads = {head for head, lacking in heads.items() if len(lacking) >= FOLD_MIN_LINKS}
    copy_of: dict[int, tuple[int, str]] = {}
    for ra, rb, how, head in together:
        kept, dropped = (ra, rb) if row_rank(ra) < row_rank(rb) else (rb, ra)
        if not _holds_as_much(kept, dropped, how, head in gateway_heads):
            continue
        # The row it copies: the one nearest it in time (a reseller's account row beside two customers' rows alike
        # copies the one logged with it), then the better-ranked id's.
        best = copy_of.get(dropped.pos)
        if best is None or _nearness(kept, dropped, rank) < _nearness(rows[best[0]], dropped, rank):
            copy_of[dropped.pos] = (kept.pos, how or "")

    def final(pos: int) -> int:
        # A row folds into a row of a better-ranked id, so following the copies ends at a row that stays.
        while pos in copy_of:
            pos = copy_of[pos][0]
        return pos

    out: list[dict[str, Any]] = []
    pair_counts: Tally[tuple[str, str]] = Tally()
    joined = {k.joined for k in FORMATS.kinds() if k.half is not None and k.joined}
    sha_of = {f["path"]: f["sha256"] for f in files}
    for pos in sorted(copy_of):
        r, how = rows[pos], copy_of[pos][1]
        kept = rows[final(pos)]
        out.append({"request_id": r.request_id, "tenant_id": r.tenant_id, "source_file": r.source_file,
                    "source_line": r.source_line, "kept_request_id": kept.request_id,
                    # (on the clock the table's times are moved onto: :func:`clock_offsets`)
                    "received_at": r.received_at - dt.timedelta(
                        microseconds=shifts.get((r.source_file or "", r.record_kind or ""), 0)),
                    "kept_tenant_id": kept.tenant_id, "prompts": how, "pos": pos})
        if customer_key(kept.tenant_id) == customer_key(r.tenant_id):
            folded.same_id += 1
        else:
            pair_counts[(kept.tenant_id, r.tenant_id)] += 1
        if r.source_sha256 is not None:
            folded.lines[r.source_sha256] += 1
        if r.record_kind in joined and r.response_source_file in sha_of:  # the answer's line of a joined split row
            folded.lines[sha_of[str(r.response_source_file)]] += 1
    out.sort(key=lambda r: (r["kept_tenant_id"], r["tenant_id"], r["request_id"], r["pos"]))
    folded.rows = len(out)
    folded.linked = sorted(((k, t, n) for (k, t), n in pair_counts.items()), key=lambda x: (-x[2], x[0], x[1]))
    folded.unplaced = sum(1 for k, _, _ in folded.linked if not on_nodes.get(k, 0))
    return folded, out


def _nearness(kept: _Row, dropped: _Row, rank: Callable[[str], tuple[Any, ...]]) -> tuple[Any, ...]:
    """How near ``kept`` is to being the row ``dropped`` copies: time apart, then its id's rank, then its place."""
    return (abs(kept.received - dropped.received), rank(kept.tenant_id), kept.pos)


def _holds_as_much(kept: _Row, dropped: _Row, how: str | None, gateway_head: bool) -> bool:
    """Whether the ``kept`` row holds every text of the ``dropped`` one its pair says is one exchange (``how`` their
    prompts are alike): never a prompt into a row that logged none, an answer into a row without one, a row the engine
    logs place into one they do not, a whole prompt
    into a cut one, or a cut prompt into a shorter cut (two logs cutting at other lengths). A prompt after blocks at its
    head folds into the shorter only where those blocks are a gateway's own (``gateway_head``: the same before several
    customers' copies) or the engine logs place the kept row (its text is what the engine read: the blocks it lacks
    were never in a cache to leak); a review found a customer's own system block dropped otherwise."""
    if (dropped.said and not kept.said) or (kept.bare and not dropped.bare) or (dropped.placed and not kept.placed):
        return False  # (a row the engine logs place carries the decode node's evidence)
    if how == "cut" and kept.cut and (not dropped.cut or dropped.plen > kept.plen):
        return False
    return not (how == "held" and dropped.plen > kept.plen and not (gateway_head or kept.placed))


class Clocks(NamedTuple):
    """What :func:`clock_offsets` read: the offsets read, those seen but not read (for a note), and the logs whose
    requests the engine logs name without a time for their end (a file of each), where two logs or more have such
    requests: their clocks could not be checked against one another through the engine logs (a review: vLLM's lines
    carry no year by default, and nothing said so)."""

    read: list[ClockOffset]
    unread: list[ClockOffset]
    unchecked: list[str]


def clock_offsets(con: Any, path: Path, engine_ends: str | None = None) -> Clocks:
    """The logs (:data:`LOG_SQL`) of the table at ``path`` whose clocks are apart from the others' by more than two
    gateways' clocks may disagree (SAME_EXCHANGE_SKEW_US), read off the exchanges two logs both hold (:data:`CLOCK_SQL`).
    A front door whose host's clock drifted, or which writes local time with no zone where the case reads UTC, logged
    every copy seconds or hours from its gateway's: the fold, comparing the times, folded none of them, and every
    customer was named twice (a review). Two logs' offset is the one :data:`CLOCK_MIN_EXCHANGES` or more of those
    exchanges agree on within SAME_EXCHANGE_SKEW_US, by when they completed (:data:`CLOCK_MIN_SHARE` or more of them),
    or where too few logged that, when they were received (:data:`CLOCK_MIN_SHARE_RECEIVED`): a queue in front delays
    only the start of a call (a review). They must be of :data:`CLOCK_MIN_CUSTOMERS` customers or more and
    :data:`CLOCK_MIN_COVER` or more of the answers the smaller log holds once while the two overlap (:data:`CLOCK_OVERLAP_SQL`),
    and the offset no more than :data:`CLOCK_MAX_US`. Logs joined by offsets are put on the clock of one consistent
    with the engine logs' by both ends of its requests (:func:`_off_engine`), then of the one whose rows the engine logs
    place most (then with the most rows, then by name), each through the log it agrees with on the most exchanges. A
    log's files move by its offset where most of their own exchanges agree with it (or, where none of its files disagree,
    where they hold none); a file whose own exchanges agree on another offset (:func:`_file_runs`:
    another host, under a name like the others') moves by that one: the first list, one entry per log and offset,
    empty where every clock agrees (nearly every case). The second lists the pairs of logs whose exchanges agree on
    an offset of more than a second but not enough of them to read it (a clock changed during the case, or each log
    carries traffic the other does not see: reviews), each against the one the engine logs place most, for a note.

    Where the engine logs' ends of requests are given (``engine_ends``: a table, see :data:`ENGINE_CLOCK_SQL`), two
    logs that hold no exchange twice are joined too, through the engine nodes that ran both logs' requests
    (:func:`_engine_edges`): two gateway replicas, one on a host whose clock drifted, put a suspect's stale pages after
    it and counted the records a node served before it in the wrong order (a review). Logs joined so are put on the
    clock of one consistent with the engine logs' by both ends of its requests, where one is (then as above): of two
    replicas, the one whose clock is right where the engine's is."""
    con.execute(CLOCK_ANSWERS_SQL.format(log=LOG_SQL, answer_key=ANSWER_KEY, completed=COMPLETED_US,
                                         min_answer=CLOCK_MIN_ANSWER), {"path": str(path)})
    edges: list[_ClockEdge] = []
    unread: list[_ClockEdge] = []
    try:
        for a, b, received, completed in con.execute(CLOCK_SQL.format(
                max_logs=CLOCK_MAX_LOGS, min_exchanges=CLOCK_MIN_EXCHANGES)).fetchall():
            apart, share = ((completed, CLOCK_MIN_SHARE) if len(completed) >= CLOCK_MIN_EXCHANGES
                            else (received, CLOCK_MIN_SHARE_RECEIVED))
            offset, n, customers = _agreed(apart)
            if n < CLOCK_MIN_EXCHANGES or abs(offset) > CLOCK_MAX_US:
                continue
            edge = _ClockEdge(n, a, b, offset, customers, {a: _file_runs(apart, "fa"), b: _file_runs(apart, "fb")})
            agree = n >= share * len(apart) and customers >= CLOCK_MIN_CUSTOMERS
            if agree:
                in_a, in_b = con.execute(CLOCK_OVERLAP_SQL.format(max_logs=CLOCK_MAX_LOGS), {
                    "a": a, "b": b, "offset": offset, "xa": edge.elsewhere(a), "xb": edge.elsewhere(b)}).fetchall()[0]
                agree = n >= CLOCK_MIN_COVER * max(min(in_a, in_b), 1)
            (edges if agree else unread).append(edge)
        on_engine: dict[str, dict[str, _OnNode]] = {}
        hosts: dict[str, tuple[str, set[int]]] = {}  # a host's files under another's log name: its log, its files
        unchecked: list[str] = []
        if engine_ends is not None:
            named = con.execute(ENGINE_NAMED_SQL.format(ends=engine_ends, min_exchanges=CLOCK_MIN_EXCHANGES)).fetchall()
            if len(named) >= 2:
                unchecked = [file for _, file, timed in named if timed < CLOCK_MIN_EXCHANGES]
            on_engine, hosts, written = _on_engine(con.execute(ENGINE_CLOCK_SQL.format(
                ends=engine_ends, min_exchanges=CLOCK_MIN_EXCHANGES)).fetchall())
            read_through, not_read = _engine_edges(on_engine, written)
            edges += read_through
            unread += not_read
        names = dict(con.execute("SELECT DISTINCT f, file FROM clock_answers").fetchall())
    finally:
        con.execute("DROP TABLE IF EXISTS clock_answers")
    unread = [e for e in unread if abs(e.offset) > SAME_EXCHANGE_SKEW_US]
    if not unread and not any(abs(e.offset) > SAME_EXCHANGE_SKEW_US or any(e.elsewhere(g) for g in e.runs)
                              for e in edges):
        return Clocks([], [], unchecked)
    logs = sorted({g for e in edges + unread for g in (e.a, e.b)})
    host_of = {names[f]: (host, log) for host, (log, ids) in hosts.items() for f in ids}
    answer_files: dict[str, list[str]] = {}  # file -> the files a split log's answers of its rows came from
    log_files: dict[str, set[str]] = {}
    # (whether its clock disagrees with the engine's, rows placed on a node, rows, name): the reference comes first
    weight: dict[str, tuple[int, int, int, str]] = {}
    for g, f, placed, n, answers_from in con.execute(  # (the log's name read once a file and kind, as above)
            f"SELECT {LOG_SQL} AS g, source_file, placed, n, answers_from FROM ("
            "SELECT source_file, coalesce(record_kind, '') AS record_kind, count(*) FILTER (WHERE decode_node IS NOT "
            "NULL OR prefill_node IS NOT NULL) AS placed, count(*) AS n, list(DISTINCT response_source_file) FILTER "
            "(WHERE response_source_file IS NOT NULL) AS answers_from FROM read_parquet($path) WHERE source_file IS NOT "
            "NULL GROUP BY source_file, record_kind) WHERE g IN (SELECT unnest($logs)) ORDER BY g, source_file",
            {"path": str(path), "logs": sorted({*logs, *(log for log, _ in hosts.values())})}).fetchall():
        answer_files[f] = sorted(x for x in answers_from or [] if x != f)
        if host_of.get(f, ("", ""))[1] == g:
            g = host_of[f][0]
        log_files.setdefault(g, set()).add(f)
        w = weight.get(g, (_off_engine(on_engine.get(g, {})), 0, 0, g))
        weight[g] = (w[0], w[1] - placed, w[2] - n, g)
    # Each group of logs joined by offsets is put on its reference's clock along the strongest agreements (Prim's tree).
    later: dict[str, tuple[int, str]] = {}  # log -> (later than its group's reference by, the reference)
    through: dict[str, str] = {}  # log -> what the offset that placed it was read off
    touching: dict[str, list[tuple[int, str, str, int, str]]] = {}
    for e in edges:
        for g in {e.a, e.b}:
            touching.setdefault(g, []).append((-e.n, e.a, e.b, e.offset, e.through))
    for start in sorted(logs, key=lambda g: weight.get(g, (1, 0, 0, g))):
        if start in later:
            continue
        later[start] = (0, start)
        # (the strongest edge out of the placed logs, each time: a heap, not a scan of every edge, which took seconds
        # for thousands of pods' logs: a review)
        reach = list(touching.get(start, []))
        heapq.heapify(reach)
        while reach:
            _, a, b, d, via = heapq.heappop(reach)
            if (a in later) == (b in later):
                continue
            placed = b if a in later else a
            later[placed] = (later[a][0] + d, start) if a in later else (later[b][0] - d, start)
            through[placed] = via
            for x in touching.get(placed, []):
                heapq.heappush(reach, x)
    # Which files move, and by how much: through every edge the tree's offsets agree with (a log's files may agree
    # through its second edge only, a review), the strongest first.
    # (file, log) -> (later than the reference by, exchanges, customers, what they were read off): one file may hold
    # two logs (two kinds)
    moves: dict[tuple[str, str], tuple[int, int, int, str]] = {}
    torn: set[str] = set()  # logs some of whose files agree on another offset
    for e in sorted(edges, key=lambda e: (-e.n, e.a, e.b, e.through)):
        if e.a not in later or e.b not in later or later[e.a][1] != later[e.b][1] \
                or abs(later[e.b][0] - later[e.a][0] - e.offset) > SAME_EXCHANGE_SKEW_US:
            continue
        for side, other, sign in ((e.a, e.b, -1), (e.b, e.a, 1)):
            for f, (own, agreeing, total, customers) in sorted(e.runs[side].items()):
                if abs(own - e.offset) <= SAME_EXCHANGE_SKEW_US and 2 * agreeing > total:
                    moves.setdefault((names[f], side), (later[side][0], agreeing, customers, through.get(side, e.through)))
                elif agreeing >= CLOCK_MIN_FILE_EXCHANGES and agreeing >= CLOCK_MIN_SHARE_RECEIVED * total:
                    torn.add(side)
                    # (its own offset against the other log, which the tree has placed)
                    moves.setdefault((names[f], side), (later[other][0] + sign * own, agreeing, customers, e.through))
    seen = {(names[f], g) for e in edges + unread for g, runs in e.runs.items() for f in runs}
    split = set(hosts) | {log for log, _ in hosts.values()}  # (a file with nothing of its own there is no one host's)
    for g in later:  # a moved log's files that hold no exchange move with it, where none of its files is another host
        if abs(later[g][0]) > SAME_EXCHANGE_SKEW_US and g not in torn and g not in split:
            for name in sorted(log_files.get(g, set())):
                if (name, g) not in seen:
                    # (said apart: nothing of its own shows its clock; an engine log that misses its days, a review)
                    moves.setdefault((name, g), (later[g][0], 0, 0, "log"))

    def kind(g: str) -> str:
        return g.split("\0", 1)[1]

    grouped: dict[tuple[str, int, str], list[str]] = {}
    for (f, g), (offset, _, _, via) in moves.items():
        if abs(offset) > SAME_EXCHANGE_SKEW_US:
            grouped.setdefault((g, offset, via), []).append(f)
    moving = {(f, g) for (g, _, _), files in grouped.items() for f in files}
    read = []
    for (g, offset, via), files in sorted(grouped.items()):
        moved = set(files)
        root = later[g][1]
        read.append(ClockOffset(kind(g), tuple(sorted(moved)),
                                tuple(sorted({x for f in moved for x in answer_files.get(f, [])} - moved)),
                                # (the reference's files that stay: a file of another host under the reference's
                                # name moves, a review)
                                kind(root), tuple(sorted(f for f in log_files.get(root, set()) if (f, root) not in moving)),
                                offset, sum(moves[f, g][1] for f in files), max(moves[f, g][2] for f in files), via))

    def on_one_clock(a: str, b: str, d: int) -> bool:
        # Whether the offsets read (none for a log they do not move) put ``b`` ``d`` later than ``a`` already.
        if a in later and b in later and later[a][1] != later[b][1]:
            return False
        return abs(later.get(b, (0, ""))[0] - later.get(a, (0, ""))[0] - d) <= SAME_EXCHANGE_SKEW_US

    def said(e: _ClockEdge) -> ClockOffset:
        first, second, d = (e.a, e.b, e.offset) if weight.get(e.a, (1, 0, 0, e.a)) <= weight.get(e.b, (1, 0, 0, e.b)) \
            else (e.b, e.a, -e.offset)
        return ClockOffset(kind(second), tuple(sorted(log_files.get(second, set()))), (), kind(first),
                           tuple(sorted(log_files.get(first, set()))), d, e.n, e.customers, e.through)

    # (a pair of logs the offsets read put on one clock anyway needs no word)
    return Clocks(read, [said(e) for e in unread if not on_one_clock(e.a, e.b, e.offset)], unchecked)


@dataclass
class _ClockEdge:
    """Two logs' offset as their exchanges agree on it (:func:`clock_offsets`): ``n`` exchanges of ``customers``
    customers say ``b`` is ``offset`` microseconds later than ``a``; ``runs``, per log and file, that file's own
    exchanges (:func:`_file_runs`)."""

    n: int
    a: str
    b: str
    offset: int
    customers: int
    runs: dict[str, dict[int, tuple[int, int, int, int]]]
    through: str = "exchanges"  # "engine": read through the engine nodes that ran both logs' requests

    def elsewhere(self, log: str) -> list[int]:
        """The files of ``log`` most of whose own exchanges agree on another offset (another host's)."""
        return sorted(f for f, (own, agreeing, total, _) in self.runs[log].items()
                      if abs(own - self.offset) > SAME_EXCHANGE_SKEW_US and agreeing >= CLOCK_MIN_FILE_EXCHANGES
                      and agreeing >= CLOCK_MIN_SHARE_RECEIVED * total)


def _file_runs(apart: list[dict[str, Any]], side: str) -> dict[int, tuple[int, int, int, int]]:
    """Per file on one ``side`` (``fa``, ``fb``) of the exchanges two logs both hold (:data:`CLOCK_SQL`, in order): the
    offset most of its own exchanges agree on, how many do, how many it holds, and of how many customers."""
    by: dict[int, list[dict[str, Any]]] = {}
    for x in apart:
        by.setdefault(x[side], []).append(x)
    out = {}
    for f, xs in by.items():
        offset, agreeing, customers = _agreed(xs)
        out[f] = (offset, agreeing, len(xs), customers)
    return out


def _agreed(apart: list[dict[str, Any]]) -> tuple[int, int, int]:
    """Of how much later one log holds each exchange than another (``d``, microseconds, in order; ``t``, its customer
    id): the offset most of them agree on (the median of the largest run within 2 SAME_EXCHANGE_SKEW_US of one
    another), how many agree and of how many customers."""
    best, at, lo = 0, 0, 0
    for hi, x in enumerate(apart):
        while x["d"] - apart[lo]["d"] > 2 * SAME_EXCHANGE_SKEW_US:
            lo += 1
        if hi - lo + 1 > best:
            best, at = hi - lo + 1, lo
    if not best:
        return 0, 0, 0
    return apart[at + (best - 1) // 2]["d"], best, len({x["t"] for x in apart[at:at + best]})


#: The share of a log's requests on a node that must agree on one offset for it to be read: a clock stepped during the
#: case (the engine's, seen by every log, or a gateway's) splits them, and the larger part of each log may fall on
#: either side of the step (a review: an engine's step was read as two logs' clocks an hour apart).
ENGINE_MIN_SHARE = 0.8
#: How far a time an engine text line gives (cut to the second) may lie before the event's.
ENGINE_TIME_SLACK_US = SAME_EXCHANGE_SKEW_US
#: A log's clock is consistent with the engine logs' on a node when its requests, by both ends, allow the two clocks to
#: be this close or closer (:func:`_consistent`).
ENGINE_TOLERANCE_US = SAME_EXCHANGE_SKEW_US // 4
#: The share of a log's requests on a node whose start bounds how far ahead the node's clock can be (a low quantile:
#: a request the engine's own log names late, or one whose id another request reused, must not set it).
ENGINE_START_QUANTILE = 0.1


@dataclass(frozen=True)
class _OnNode:
    """A log's requests that one engine node ran (:data:`ENGINE_CLOCK_SQL`): how much later the node's clock read at
    their end than the log's, as ``n`` of the ``total`` agree on it (:func:`_agreed`), of ``customers`` customers,
    whether that is read (``read``: :data:`ENGINE_MIN_SHARE` or more agree), the most the node's clock can be later than
    the log's by their starts (``most``: the engine cannot begin a request before the gateway received it), and per
    file of the log its own requests there (:func:`_file_runs`). The node's clock is then ``offset`` or more later
    (a gateway completes a request after the engine ends it) and ``most`` or less."""

    offset: int
    n: int
    total: int
    customers: int
    read: bool
    most: int
    runs: dict[int, tuple[int, int, int, int]]


def _on_engine(rows: list[tuple[str, str, list[dict[str, Any]]]]
               ) -> tuple[dict[str, dict[str, _OnNode]], dict[str, tuple[str, set[int]]], dict[str, _Written]]:
    """Per log and engine node, the offset most of the log's requests that node ran agree on (:func:`_agreed`); read
    where :data:`CLOCK_MIN_EXCHANGES` or more and :data:`ENGINE_MIN_SHARE` or more of them do. A log's files whose own
    requests agree on another offset against the nodes, written while the others were (:func:`_hosts`), are another
    host's under a name like the log's (replicas ``litellm-0`` and ``litellm-1`` are one log, :data:`LOG_SQL`): each
    such host is a log of its own here, named after the log, and the second value maps it to the log and its files.
    The third gives, per log, when its requests were received and the time each of its files covers (:class:`_Written`)."""
    by_log: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {}
    for g, node, apart in rows:
        by_log.setdefault(g, []).append((node, apart))
    out: dict[str, dict[str, _OnNode]] = {}
    hosts: dict[str, tuple[str, set[int]]] = {}
    written: dict[str, _Written] = {}
    for g, nodes in sorted(by_log.items()):
        host_of = _hosts(nodes)
        for name in sorted(set(host_of.values())):
            hosts[name + g] = (g, {f for f, h in host_of.items() if h == name})
        for node, apart in nodes:
            parts: dict[str, list[dict[str, Any]]] = {}
            for x in apart:  # (in order, as the lists came)
                parts.setdefault(host_of.get(x["fa"], "") + g, []).append(x)
            for name, xs in sorted(parts.items()):
                written.setdefault(name, _Written([], {})).add(xs)
                offset, n, customers = _agreed(xs)
                starts = sorted(x["s"] for x in xs if x["s"] is not None)
                most = (starts[int(ENGINE_START_QUANTILE * (len(starts) - 1))] + ENGINE_TIME_SLACK_US if starts
                        else offset + CLOCK_MAX_US)
                out.setdefault(name, {})[node] = _OnNode(offset, n, len(xs), customers,
                                                         n >= CLOCK_MIN_EXCHANGES and n >= ENGINE_MIN_SHARE * len(xs),
                                                         most, _file_runs(xs, "fa"))
    return out, hosts, written


def _hosts(nodes: list[tuple[str, list[dict[str, Any]]]]) -> dict[int, str]:
    """The files of one log (its requests per engine node, as :data:`ENGINE_CLOCK_SQL` gives them) that are other hosts'
    under a name like the log's, each named by its host. Two files are one host's where, on a node that ran requests
    of both, the offsets their own requests agree on are within SAME_EXCHANGE_SKEW_US of each other (files a second
    apart or less there, in a chain): the node's own clock cancels out. The host with the most requests keeps the log's
    name; every other one holding CLOCK_MIN_FILE_EXCHANGES requests or more, written while the first was
    (:func:`_at_once`), is named apart."""
    parent: dict[int, int] = {}

    def root(f: int) -> int:
        while parent[f] != f:
            parent[f] = parent[parent[f]]
            f = parent[f]
        return f

    requests: dict[int, int] = {}
    for _, apart in nodes:
        runs = _file_runs(apart, "fa")
        for f, (_, _, total, _) in runs.items():
            parent.setdefault(f, f)
            requests[f] = requests.get(f, 0) + total
        ordered = sorted((own, f) for f, (own, _, _, _) in runs.items())
        for (o1, f1), (o2, f2) in zip(ordered, ordered[1:], strict=False):
            if o2 - o1 <= SAME_EXCHANGE_SKEW_US:
                a, b = root(f1), root(f2)
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for f in sorted(parent):
        groups.setdefault(root(f), []).append(f)
    if len(groups) < 2:
        return {}
    ranked = sorted(groups.values(), key=lambda files: (-sum(requests[f] for f in files), files[0]))
    return {f: f"(host {k}) " for k, files in enumerate(ranked[1:], 1)
            if sum(requests[f] for f in files) >= CLOCK_MIN_FILE_EXCHANGES and _at_once(nodes, ranked[0], files)
            for f in files}


def _at_once(nodes: list[tuple[str, list[dict[str, Any]]]], first: list[int], other: list[int]) -> bool:
    """Whether the files ``other`` (one host's) were written while those of ``first`` were: half or more of their
    requests, on ``first``'s clock (by the two groups' offsets on a node both ran), fall within the time one of
    ``first``'s files covers. Files one after the other at two offsets are a clock stepped, the gateway's or the
    engine's, which one log cannot tell apart: an engine whose clock stepped moved a single right gateway's later files,
    and one whose clock was off for two days moved the gateway's files of those days (reviews)."""
    mine, theirs = set(first), set(other)
    for _, apart in nodes:
        a = sorted(x["d"] for x in apart if x["fa"] in mine)
        b = sorted(x["d"] for x in apart if x["fa"] in theirs)
        if a and b:
            later = a[len(a) // 2] - b[len(b) // 2]  # (how much later the other group's clock reads than the first's)
            break
    else:
        return False
    first_written = _Written([], {})
    first_written.add(x for _, apart in nodes for x in apart if x["fa"] in mine)
    others = [x["r"] - later for _, apart in nodes for x in apart if x["fa"] in theirs]
    return _within(others, list(first_written.spans.values()))


def _within(times: list[int], spans: list[tuple[int, int]]) -> bool:
    """Whether half or more of ``times`` fall within one of ``spans`` (first and last times of files)."""
    starts = sorted(spans)
    ends = list(itertools.accumulate((hi for _, hi in starts), max))  # (the furthest end up to each start)
    inside = 0
    for t in times:
        i = bisect.bisect_right(starts, (t, 2 ** 63)) - 1
        inside += i >= 0 and ends[i] >= t
    return 2 * inside >= len(times)


@dataclass
class _Written:
    """When a log's requests on the engine's nodes were received (its own clock), and per file the first and last."""

    times: list[int]
    spans: dict[int, tuple[int, int]]

    def add(self, requests: Iterable[dict[str, Any]]) -> None:
        """Take in ``requests`` (items of :data:`ENGINE_CLOCK_SQL`'s lists: ``r``, when received; ``fa``, the file)."""
        for x in requests:
            self.times.append(x["r"])
            lo, hi = self.spans.get(x["fa"], (x["r"], x["r"]))
            self.spans[x["fa"]] = (min(lo, x["r"]), max(hi, x["r"]))


#: How many logs before it each log is tried against, in turn, for one it was written beside (:func:`_engine_edges`).
ENGINE_MAX_TRIES = 8


def _engine_edges(on_engine: dict[str, dict[str, _OnNode]], written: dict[str, _Written] | None = None
                  ) -> tuple[list[_ClockEdge], list[_ClockEdge]]:
    """Logs' offsets read through the engine nodes that ran requests of two logs (:func:`_on_engine`): on one node, how
    much later one log's clock reads than the other's is the difference of their offsets against the node's, whatever
    the node's own clock (an engine writing local time, a node whose clock drifted). Where the starts of the requests
    allow the two clocks to be one (:func:`_may_be_one`: a post-call hook or a guardrail after the engine delays one
    log's completions, not its clock; a review), the node says they are. The nodes must agree on it within
    SAME_EXCHANGE_SKEW_US, those that do holding most of the requests: the first list; the second, the pairs whose
    nodes disagree, for the note on clocks not read. Each log is read against the first log before it that shares a
    node with it, the logs in the order of :func:`_engine_order` (a star, not every pair: a case of hundreds of pods'
    logs took minutes, a review). No number of customers is asked: the same request's end seen by two witnesses is no
    coincidence of text, and a replica may serve one customer (a review). Two logs written one after the other (a pod
    renamed at a restart) are not read against each other at an offset (half or more of one's requests, on the other's
    clock, must fall within the time one of the other's files covers, ``written``): a clock stepped at the restart,
    the engine's, would be read as theirs (a review); up to :data:`ENGINE_MAX_TRIES` logs before it are tried."""
    read: list[_ClockEdge] = []
    unread: list[_ClockEdge] = []
    logs = _engine_order(on_engine)
    for i, b in enumerate(logs):
        # (the first few sharing a node: not every earlier log checked, then cut)
        tries = itertools.islice((a for a in logs[:i] if any(on_engine[a][nd].read and on_engine[b][nd].read
                                                            for nd in set(on_engine[a]) & set(on_engine[b]))),
                                 ENGINE_MAX_TRIES)
        for a in tries:
            edge, agree = _engine_edge(on_engine, a, b)
            if edge is None:
                continue
            if abs(edge.offset) > SAME_EXCHANGE_SKEW_US and written is not None \
                    and not _within([t - edge.offset for t in written[b].times], list(written[a].spans.values())):
                continue
            (read if agree else unread).append(edge)
            break
    return read, unread


def _engine_edge(on_engine: dict[str, dict[str, _OnNode]], a: str, b: str) -> tuple[_ClockEdge | None, bool]:
    """The offset of log ``b`` against log ``a`` through the nodes both ran requests on (see :func:`_engine_edges`),
    and whether it is read (the nodes agreeing on it hold most of the requests); None beyond CLOCK_MAX_US."""
    shared = sorted(set(on_engine[a]) & set(on_engine[b]))
    # (offset of b against a on the node, requests it stands for, node)
    votes = [(0 if _may_be_one(on_engine[a][nd], on_engine[b][nd])
              else on_engine[a][nd].offset - on_engine[b][nd].offset, min(on_engine[a][nd].n, on_engine[b][nd].n), nd)
             for nd in shared if on_engine[a][nd].read and on_engine[b][nd].read]

    def support(v: tuple[int, int, str], votes: list[tuple[int, int, str]] = votes) -> tuple[int, int, str]:
        return (sum(w for o, w, _ in votes if abs(o - v[0]) <= SAME_EXCHANGE_SKEW_US), v[1], v[2])

    best = max(votes, key=support)
    agreeing = [v for v in votes if abs(v[0] - best[0]) <= SAME_EXCHANGE_SKEW_US]
    n = sum(w for _, w, _ in agreeing)
    if abs(best[0]) > CLOCK_MAX_US:
        return None, False
    runs = {a: _runs_through(on_engine[a], on_engine[b], shared, 1),
            b: _runs_through(on_engine[b], on_engine[a], shared, -1)}
    customers = max(min(on_engine[a][nd].customers, on_engine[b][nd].customers) for _, _, nd in agreeing)
    return _ClockEdge(n, a, b, best[0], customers, runs, "engine"), 2 * n > sum(w for _, w, _ in votes)


def _engine_order(on_engine: dict[str, dict[str, _OnNode]]) -> list[str]:
    """The logs on the engine's nodes, those consistent with the engine's clock (:func:`_off_engine`) first, then by
    the requests the engine ran, then by name."""
    return sorted(on_engine, key=lambda g: (_off_engine(on_engine[g]), -sum(x.total for x in on_engine[g].values()), g))


def _may_be_one(a: _OnNode, b: _OnNode) -> bool:
    """Whether two logs' requests on one node allow their clocks to be one: the node's clock is ``offset`` to ``most``
    later than each log's, and the two spans overlap (within the slack of a time cut to the second)."""
    return a.offset - b.most <= ENGINE_TOLERANCE_US and b.offset - a.most <= ENGINE_TOLERANCE_US


def _consistent(x: _OnNode) -> bool:
    """Whether a log's clock may be the node's by its requests there: they ended on the node before the log saw them
    complete, and began after the log received them (within :data:`ENGINE_TOLERANCE_US`)."""
    return x.offset <= ENGINE_TOLERANCE_US and x.most >= -ENGINE_TOLERANCE_US


#: A time zone's offsets are whole quarter hours (within this: an offset read off times cut to the second).
ZONE_STEP_US = 15 * 60 * 1_000_000
ZONE_SLACK_US = 2 * SAME_EXCHANGE_SKEW_US


def zone_like(offset_us: int) -> bool:
    """Whether an offset is a time zone's: a whole number of quarter hours, not none (for the note on clocks read)."""
    steps = round(offset_us / ZONE_STEP_US)
    return steps != 0 and abs(offset_us - steps * ZONE_STEP_US) <= ZONE_SLACK_US


def _runs_through(own_nodes: dict[str, _OnNode], other_nodes: dict[str, _OnNode], shared: list[str],
                  sign: int) -> dict[int, tuple[int, int, int, int]]:
    """Per file of a log, its own offset against the other log (``sign`` 1: how much later the other reads than the
    file; -1: the file than the other), through the ``shared`` nodes where the other log's offset is read: the one
    most of the file's requests there agree on, how many do, how many it holds there, and the most customers on one
    node (as :func:`_file_runs`): a file whose own requests sit at another offset than most of its log's moves by its
    own."""
    seen: dict[int, list[tuple[int, int, int, int]]] = {}
    for nd in shared:
        other = other_nodes[nd]
        if other.read:
            for f, (own, agree, total, customers) in own_nodes[nd].runs.items():
                # (by its own ends, and its log's starts there: a file whose completions lag is no clock off either)
                one = _may_be_one(dataclasses.replace(own_nodes[nd], offset=own), other)
                seen.setdefault(f, []).append((0 if one else sign * (own - other.offset), agree, total, customers))
    out: dict[int, tuple[int, int, int, int]] = {}
    for f, parts in sorted(seen.items()):
        best = max(parts, key=lambda p: (sum(q[1] for q in parts if abs(q[0] - p[0]) <= SAME_EXCHANGE_SKEW_US), p[1], -p[0]))
        with_it = [q for q in parts if abs(q[0] - best[0]) <= SAME_EXCHANGE_SKEW_US]
        out[f] = (best[0], sum(q[1] for q in with_it), sum(q[2] for q in parts), max(q[3] for q in with_it))
    return out


def _off_engine(nodes: dict[str, _OnNode]) -> int:
    """0 where a log's clock is consistent with the engine logs' (:func:`_consistent`) on the nodes that ran most of its
    requests: two witnesses of one time; else 1. (A band of two seconds around the engine's times, tried first, let a
    replica 1.5 s off be the reference, and the right one was moved onto it: a review.)"""
    total = sum(x.n for x in nodes.values() if x.read)
    near = sum(x.n for x in nodes.values() if x.read and _consistent(x))
    return 0 if total and 2 * near > total else 1


def _facts(con: Any, path: Path, verb: str, positions: str, params: dict[str, Any], shift: dict[str, str]) -> None:
    """Put the facts (:data:`FACTS_SQL`) of the rows at the places ``positions`` selects into ``fold_facts`` (``verb``:
    create it, or insert into it), their times on one clock (``shift``: what :data:`FACTS_SQL` takes off each row's
    times, and the join that gives it)."""
    con.execute(FACTS_SQL.format(
        verb=verb, positions=positions, window=SAME_EXCHANGE_US, core=core_sql("p"), ends=cut_sql("p"), **shift,
        min_prompt=SAME_EXCHANGE_MIN_SUFFIX, cut_length=SAME_EXCHANGE_CUT_HEAD + SAME_EXCHANGE_CUT_TAIL,
        plain_prompt=PLAIN.format("prompt_text"), plain_answer=PLAIN.format("response_text"), answer_key=ANSWER_KEY,
        completed=COMPLETED_US), {"path": str(path), **params})


def _rows(con: Any) -> dict[int, _Row]:
    """The rows of ``fold_facts``, by place."""
    return {r[0]: _Row(*r) for r in con.execute(f"SELECT {', '.join(_Row._fields)} FROM fold_facts").fetchall()}


def _runs_together(how: str | None, a: _Row, b: _Row) -> bool:
    """:func:`forensics.logged_twice.runs_together` of two rows whose prompts are alike as ``how``."""
    return runs_together(how, a.usage is not None and a.usage == b.usage, a.received, a.completed, b.received,
                         b.completed)


def _linked(con: Any, path: Path, evidence: list[tuple[int, int, str]], rows: dict[int, _Row]) -> set[frozenset[str]]:
    """The pairs of customer ids the ``evidence`` pairs link: on each side :data:`FOLD_MIN_LINKS` rows or more, in as
    many 10 s buckets (one question and its retry are one coincidence, a review), covering :data:`FOLD_MIN_COVERAGE` or
    more of one id's rows that could be such evidence (an answer, a prompt of SAME_EXCHANGE_MIN_SUFFIX characters or
    more) while either id was active: a gateway in front logs nearly all of a customer's calls; two customers sending
    one long canary, or two fixed templates once each, are a sliver of either's traffic (reviews)."""
    found: dict[frozenset[str], set[tuple[int, int]]] = {}
    for a, b, _ in evidence:
        ta, tb = rows[a].tenant_id, rows[b].tenant_id
        if customer_key(ta) != customer_key(tb):  # (ids one text under Unicode's NFC are one customer already)
            found.setdefault(frozenset((ta, tb)), set()).add((a, b))

    def sides(got: set[tuple[int, int]]) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for pair in got:
            for p in pair:
                out.setdefault(rows[p].tenant_id, set()).add(p)
        return out

    def spread(positions: set[int]) -> int:
        return len({rows[p].received // SAME_EXCHANGE_US for p in positions})

    candidates = {pair: sides(got) for pair, got in sorted(found.items(), key=lambda item: sorted(item[0]))}
    candidates = {pair: by_id for pair, by_id in candidates.items()
                  if all(len(ps) >= FOLD_MIN_LINKS and spread(ps) >= FOLD_MIN_LINKS for ps in by_id.values())}
    if not candidates:
        return set()
    tenants = sorted({t for pair in candidates for t in pair})
    active = {t: (lo, hi) for t, lo, hi in con.execute(
        "SELECT tenant_id, min(received_at), max(received_at) FROM read_parquet($path) "
        "WHERE tenant_id IN (SELECT unnest($t)) GROUP BY 1", {"path": str(path), "t": tenants}).fetchall()}
    spans: list[tuple[str, Any, Any, int]] = []  # (id, from, to, its rows paired): both sides of each candidate pair
    for pair, by_id in candidates.items():
        first, second = sorted(pair)
        # (over all the time either was active: their overlap shrank to the two coincidences where one customer's
        # traffic ended as the other's began, a review)
        lo, hi = min(active[first][0], active[second][0]), max(active[first][1], active[second][1])
        spans += [(t, lo, hi, len(by_id[t])) for t in (first, second)]
    eligible = dict(con.execute(
        "WITH s AS (SELECT unnest($t) AS t, unnest($lo) AS lo, unnest($hi) AS hi, unnest($i) AS i) "
        "SELECT s.i, count(e.tenant_id) FROM s LEFT JOIN read_parquet($path) e ON e.tenant_id = s.t "
        "AND e.received_at BETWEEN s.lo AND s.hi AND length(e.response_text) > 0 "
        f"AND length(e.prompt_text) >= {SAME_EXCHANGE_MIN_SUFFIX} GROUP BY s.i",
        {"path": str(path), "t": [x[0] for x in spans], "lo": [x[1] for x in spans], "hi": [x[2] for x in spans],
         "i": list(range(len(spans)))}).fetchall())
    linked = set()
    for k, pair in enumerate(candidates):
        share = max(spans[2 * k + j][3] / max(eligible.get(2 * k + j, 0), 1) for j in (0, 1))
        if share >= FOLD_MIN_COVERAGE:
            linked.add(pair)
    return linked


def _linked_together(how: str | None, ra: int, ca: int | None, rb: int, cb: int | None) -> bool:
    """:func:`forensics.logged_twice.runs_together` for two rows of ids already linked as one customer, one of which
    logged no answer: the prompts must be one request's (the same text, one after a gateway's own blocks, or cut), and
    where one logged no completion time (a request whose answer was never logged), its time received decides alone; no
    usage is asked (a split request half reports none)."""
    if how not in ("same", "short", "held", "cut") or abs(ra - rb) > SAME_EXCHANGE_US:
        return False
    if ca is None or cb is None:
        return True
    return runs_together(how, True, ra, ca, rb, cb)


def _pairs(con: Any, path: Path, pairs_sql: str, params: dict[str, Any], rows: dict[int, _Row]
           ) -> list[tuple[int, int, str | None, str | None]]:
    """The pairs ``pairs_sql`` names, each with how their prompts are alike (:func:`forensics.logged_twice.prompts_alike`)
    and, where the longer holds more at its head, that head's MD5. From the facts where they decide (no prompt; the
    same prompt), else from the texts of those pairs alone (:data:`ALIKE_SQL`)."""
    sql = pairs_sql.format(window=SAME_EXCHANGE_US, nearest_end=NEAREST_END.format(nearest_n=NEAREST),
                           nearest=NEAREST_SQL.format(first="" if pairs_sql is EVIDENCE_PAIRS_SQL else SAME_ANSWER_FIRST))
    found = con.execute(sql + f" LIMIT {MAX_PAIRS + 1}", params).fetchall()
    if len(found) > MAX_PAIRS:
        raise TooManyPairs
    out: list[tuple[int, int, str | None, str | None]] = []
    unlike: list[tuple[int, int]] = []
    for a, b in found:
        ra, rb = rows[a], rows[b]
        if ra.bare or rb.bare:
            out.append((a, b, "unknown", None))
        elif ra.pdigest == rb.pdigest and ra.plen == rb.plen:
            out.append((a, b, "same" if ra.plen >= SAME_EXCHANGE_MIN_SUFFIX else "short", None))
        else:
            unlike.append((a, b))
    if unlike:
        sql = ALIKE_SQL.format(plain_prompt=PLAIN.format("prompt_text"),
                               how=prompts_alike_sql("x.prompt", "x.cut", "y.prompt", "y.cut"))
        out += con.execute(sql, {"path": str(path), "pos_a": [a for a, _ in unlike],
                                 "pos_b": [b for _, b in unlike]}).fetchall()
    return sorted(out, key=lambda pair: (pair[0], pair[1]))


def _rewrite(path: Path, positions: set[int], shifts: dict[tuple[str, str], int]) -> None:
    """Write the table at ``path`` again without the rows at ``positions`` (row groups as they were, less those), the
    times of the rows of each file and kind of record ``shifts`` names moved onto one clock (that many microseconds
    taken off)."""
    sink = ParquetSink(path, schema.EXCHANGES)
    try:
        pf = pq.ParquetFile(path)
        places = sorted(positions)
        start = 0
        for g in range(pf.num_row_groups):
            table = pf.read_row_group(g)
            # (the places in this row group, found by bisection: a second gateway's whole incident folds every other row)
            here = places[bisect.bisect_left(places, start):bisect.bisect_left(places, start + table.num_rows)]
            if here:
                keep = pc.invert(pc.is_in(pa.array(range(table.num_rows), pa.int64()),
                                          value_set=pa.array([p - start for p in here], pa.int64())))
                table = table.filter(keep)
            if shifts:
                table = _moved(table, shifts)
            start += pf.metadata.row_group(g).num_rows
            sink.write_batch(table)
        sink.close()
    except BaseException:
        sink.abort()
        raise


def _moved(table: pa.Table, shifts: dict[tuple[str, str], int]) -> pa.Table:
    """``table`` (its times in microseconds, as :data:`forensics.schema.EXCHANGES` has them) with the received and
    completed times of the rows of each file and kind of record ``shifts`` names moved that many microseconds earlier
    (a file may hold two kinds, LiteLLM's callbacks beside its spend-log rows, on two clocks: a review)."""
    by = pa.array([shifts.get((f, k or ""), 0) if f is not None else 0 for f, k in
                   zip(table.column("source_file").to_pylist(), table.column("record_kind").to_pylist(), strict=True)],
                  pa.int64())
    if not pc.any(pc.not_equal(by, 0)).as_py():
        return table
    for name in ("received_at", "completed_at"):
        col = table.column(name)
        moved = pc.subtract(col.cast(pa.int64()), by)
        table = table.set_column(table.schema.get_field_index(name), name, moved.cast(col.type))
    return table


def _write_copies(path: Path, rows: list[dict[str, Any]]) -> None:
    """``logged_twice.parquet``: each folded row and the row it is a copy of."""
    names = schema.LOGGED_TWICE.names
    table = pa.table({n: [r[n] for r in rows] for n in names}, schema=schema.LOGGED_TWICE)
    with ParquetSink(path, schema.LOGGED_TWICE) as sink:
        sink.write_batch(table)
