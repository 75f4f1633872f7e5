"""One exchange logged twice under two customer ids: the rule that tells it, shared by the ingest and the match.

A spend-log export that names teams beside callbacks that name organisations, or a second gateway in front of the
first logging under its own request ids and account names, holds the same traffic twice. Two logged rows are one
exchange when they hold the same answer and one request's prompt (:func:`prompts_alike`), received within
:data:`SAME_EXCHANGE_US` of each other, one's run holding the other's (:func:`same_exchange`). The ingest folds the
copies of customer ids that many exchanges link (:mod:`forensics.ingest.copies`); the match stage tells the few left
(:mod:`forensics.match.findings`).
"""

from __future__ import annotations

from pathlib import Path

#: Candidates whose source was received within this of the target's (or, of one target, of another candidate's source)
#: are checked for one exchange logged twice (a spend log beside its callback under another tenant field, a second
#: gateway in front of the first under its own ids and account names): :func:`same_exchange` decides.
SAME_EXCHANGE_US = 10_000_000
#: Two gateways' clocks may disagree by this much (:func:`same_exchange`).
SAME_EXCHANGE_SKEW_US = 1_000_000
#: A prompt shorter than this is no evidence that another ending in it is the same request.
SAME_EXCHANGE_MIN_SUFFIX = 64
#: Characters at the end of two prompts compared where a log cut one short (a spend log keeps 65% of 2,048 at the end).
SAME_EXCHANGE_CUT_TAIL = 1024
#: Characters at the head of two prompts compared where a log cut one short (a spend log keeps 35% of 2,048 there).
SAME_EXCHANGE_CUT_HEAD = 512

#: One logged row of a request, as :func:`logged_rows` reads it: its prompt (as :data:`PLAIN` makes it), whether the
#: log cut it short (LiteLLM's spend-log strings), its answer's MD5, when it was received and completed (microseconds;
#: completed None where not logged, or not a time: before the call began, or hours after), and the prompt tokens its
#: gateway reported (both logs of one call report the same usage).
LoggedRow = tuple[str, bool, str, int, int | None, int | None]

#: A logged text as :func:`logged_rows` compares it (DuckDB): CRLF as LF, no white space at its end.
PLAIN = "rtrim(replace(coalesce({0}, ''), chr(13) || chr(10), chr(10)), ' ' || chr(9) || chr(10) || chr(13))"
#: A completion time as :func:`logged_rows` reads it (DuckDB): none where it is before the call was received, or
#: hours after (bad data).
COMPLETED_US = ("CASE WHEN completed_at >= received_at AND completed_at <= received_at + INTERVAL 1 HOUR "
                "THEN epoch_us(completed_at) END")


def logged_rows(path: Path, ids: set[str]) -> dict[tuple[str, str | None], list[LoggedRow]]:
    """Per request (id, tenant) of ``ids``: each logged row with an answer (see :data:`LoggedRow`), to tell the same
    exchange logged twice (:func:`same_exchange`). Texts are compared with line ends as LF and no white space at their
    end (two gateways log one text so: a trailing newline made two copies of an exchange two customers' texts, a
    review); a completion time before the call was received, or hours after, is no time (bad data). Read for a few
    candidates only: a suspect's prompt may be megabytes."""
    import duckdb  # here, not at import: worker processes never load it

    con = duckdb.connect()
    try:
        found = con.execute(
            f"SELECT request_id, tenant_id, {PLAIN.format('prompt_text')}, coalesce(prompt_truncated, false), "
            f"md5({PLAIN.format('response_text')}), epoch_us(received_at), {COMPLETED_US}, reported_prompt_tokens "
            "FROM read_parquet($path) WHERE request_id IN (SELECT unnest($ids)) AND length(response_text) > 0 "
            "AND received_at IS NOT NULL",
            {"path": str(path), "ids": sorted(ids)}).fetchall()
    finally:
        con.close()
    rows: dict[tuple[str, str | None], list[LoggedRow]] = {}
    for rid, tenant, prompt, cut, digest, received, completed, usage in found:
        rows.setdefault((rid, tenant), []).append((prompt, bool(cut), digest, received, completed, usage))
    return rows


def only_gateway_blocks(head: str) -> bool:
    """Whether the text a gateway put before a request's prompt is only blocks of its own (system messages, tools), as
    the canonical rendering writes them (``<|role|>`` blocks joined by blank lines): a head holding user or assistant
    turns is another conversation, which a canned question may end (a review)."""
    if not (head.startswith("<|") and head.endswith("\n\n")):
        return False
    return all(block.split("|>", 1)[0] in ("system", "developer", "tools") for block in head[2:-2].split("\n\n<|"))


def prompts_alike(a: str, cut_a: bool, b: str, cut_b: bool) -> str | None:
    """How two logged prompts are one request's, or None where they are not: ``"same"`` (the same text, of
    :data:`SAME_EXCHANGE_MIN_SUFFIX` characters or more), ``"short"`` (the same shorter text: two customers may both
    send "continue"), ``"held"`` (one ends in the other whole after blocks a gateway adds of its own: system
    messages, tools), ``"cut"`` (a log cut one short: the same first :data:`SAME_EXCHANGE_CUT_HEAD` and last
    :data:`SAME_EXCHANGE_CUT_TAIL` characters), ``"unknown"`` (a log kept no prompt: the usage the gateways reported
    decides, :func:`same_exchange`). Two customers' prompts from one template differ in their question; the tail
    alone is often all template, and so is the head, but not both around another question (reviews)."""
    if not a or not b:
        return "unknown"
    if a == b:
        return "same" if len(a) >= SAME_EXCHANGE_MIN_SUFFIX else "short"
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    head = long_[:len(long_) - len(short)]
    if long_.endswith(short) and short.startswith("<|") and only_gateway_blocks(head):
        return "held"
    ends = SAME_EXCHANGE_CUT_HEAD + SAME_EXCHANGE_CUT_TAIL
    if (cut_a or cut_b) and min(len(a), len(b)) >= ends and a[:SAME_EXCHANGE_CUT_HEAD] == b[:SAME_EXCHANGE_CUT_HEAD] \
            and a[-SAME_EXCHANGE_CUT_TAIL:] == b[-SAME_EXCHANGE_CUT_TAIL:]:
        return "cut"
    return None


def runs_together(how: str | None, same_usage: bool, ra: int, ca: int | None, rb: int, cb: int | None) -> bool:
    """Whether two logged rows whose prompts are alike as ``how`` (:func:`prompts_alike`; None: not alike) and whose
    answers are the same are one exchange by their times and usage (``same_usage``: both reported the same prompt
    tokens): received within :data:`SAME_EXCHANGE_US` of each other, and, where both logged when they completed,
    one's run holds the other's give or take :data:`SAME_EXCHANGE_SKEW_US` at each end (a gateway in front receives a
    call first, seconds first over a guardrail or a queue, and sees it end last). A completion time one did not log
    may be passed over only where the prompts are the same long text, or one is the other after a gateway's own
    blocks with the same usage reported: a short turn ("continue", after a customer's own system prompt too), a
    prompt cut short, or none logged, with the time of one end unknown, could be another request's (reviews found
    true sources dropped each way: a stale-page source is another request that ended before the suspect arrived, or
    ran inside a queued suspect's run, whatever its answer)."""
    if how is None or (how == "unknown" and not same_usage):  # no prompt to compare: the same usage must tie them
        return False
    if abs(ra - rb) > SAME_EXCHANGE_US:
        return False
    skew = SAME_EXCHANGE_SKEW_US
    if ca is None or cb is None:
        # (a customer's own system prompt before a short turn reads as a gateway's: the usage must tie them too)
        return how == "same" or (how == "held" and same_usage)
    return (ra <= rb + skew and cb <= ca + skew) or (rb <= ra + skew and ca <= cb + skew)


def same_exchange(a: list[LoggedRow], b: list[LoggedRow]) -> bool:
    """Whether two requests' logged rows are one exchange logged twice: some row of each with the same answer, one
    request's prompt (:func:`prompts_alike`; where no prompt was logged, the same prompt usage the gateways
    reported), and their times together (:func:`runs_together`)."""
    for prompt_a, cut_a, da, ra, ca, ua in a:
        for prompt_b, cut_b, db, rb, cb, ub in b:
            how = prompts_alike(prompt_a, cut_a, prompt_b, cut_b) if da == db else None
            if runs_together(how, ua is not None and ua == ub, ra, ca, rb, cb):
                return True
    return False
