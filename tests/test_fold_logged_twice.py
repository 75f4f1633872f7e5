"""The ingest folds one exchange logged twice under two customer ids (a second gateway under its own request ids and
account names) into one row, where two ids are linked by two exchanges or more; the match stage's rule, computed in
DuckDB, gives the same answer as in Python."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from forensics import schema
from forensics.case import ParquetSink
from forensics.ingest.copies import ANSWER_KEY, core_sql, cut_sql, fold_logged_twice, prompts_alike_sql
from forensics.logged_twice import PLAIN, prompts_alike

T0 = dt.datetime(2026, 8, 26, 9, 0, tzinfo=dt.UTC)
SYSTEM = "<|system|>\nFront door policy v2.\n\n"


def _prompt(n: int) -> str:
    return f"<|user|>\nPlease summarise the quarterly figures of account {n:05d} and list every anomaly you find."


def _row(rid: str, tenant: str, n: int, at: float, answer: str | None = "", *, prompt: str | None = None,
         seconds: float | None = 2.0, node: str | None = None, file: str = "gateway/a.jsonl", line: int = 1,
         kind: str = "logging_payload", usage: int | None = 40) -> dict[str, Any]:
    received = T0 + dt.timedelta(seconds=at)
    return {"request_id": rid, "tenant_id": tenant, "received_at": received,
            "completed_at": None if seconds is None else received + dt.timedelta(seconds=seconds),
            "prompt_text": _prompt(n) if prompt is None else prompt,
            "response_text": f"Answer {n}: the figures hold." if answer == "" else answer,
            "reported_prompt_tokens": usage, "decode_node": node, "source_file": file, "source_line": line,
            "source_sha256": file, "record_kind": kind}


def _fold(tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[Any, list[tuple[str, str]], list[dict[str, Any]]]:
    path = tmp_path / "exchanges.parquet"
    full = [{name: r.get(name) for name in schema.EXCHANGES.names} for r in rows]
    with ParquetSink(path, schema.EXCHANGES) as sink:
        sink.write_batch(pa.Table.from_pylist(full, schema=schema.EXCHANGES))
    files = [{"path": f, "sha256": f} for f in sorted({r["source_file"] for r in rows})]
    con = duckdb.connect()
    try:
        folded = fold_logged_twice(con, path, tmp_path / "logged_twice.parquet", files)
    finally:
        con.close()
    kept = pq.read_table(path, columns=["request_id", "tenant_id"]).to_pylist()
    copies = pq.read_table(tmp_path / "logged_twice.parquet").to_pylist()
    return folded, sorted((r["request_id"], r["tenant_id"]) for r in kept), copies


def _front_door(n: int, at: float, **kw: Any) -> dict[str, Any]:
    return _row(f"fd-{n}", "acme-prod", n, at - 0.004, file="gateway/frontdoor.jsonl", line=n, **kw)


def test_two_linked_exchanges_fold_the_front_doors_copies_into_the_engines_ids(tmp_path: Path) -> None:
    """A front door's copies of two exchanges leave the table; the ids the engine logs place on a node are kept, and
    each copy names the row it copies."""
    rows = [_row("r-1", "org-acme", 1, 0, node="decode-0", line=1), _row("r-2", "org-acme", 2, 60, node="decode-1", line=2),
            _front_door(1, 0, seconds=2.01), _front_door(2, 60, seconds=2.01)]
    folded, kept, copies = _fold(tmp_path, rows)
    assert kept == [("r-1", "org-acme"), ("r-2", "org-acme")]
    assert folded.rows == 2 and folded.linked == [("org-acme", "acme-prod", 2)]
    assert folded.lines == {"gateway/frontdoor.jsonl": 2}
    assert [(c["request_id"], c["kept_request_id"], c["kept_tenant_id"], c["prompts"]) for c in copies] == [
        ("fd-1", "r-1", "org-acme", "same"), ("fd-2", "r-2", "org-acme", "same")]


def test_one_exchange_two_customers_logged_alike_is_not_folded(tmp_path: Path) -> None:
    """Two customers asking the same long question at the same moment, answered alike, may be two customers: one such
    pair links no ids, and both rows stay."""
    rows = [_row("r-1", "org-acme", 1, 0), _row("x-1", "org-other", 1, 0.5, file="gateway/b.jsonl"),
            _row("r-2", "org-acme", 2, 60), _row("x-2", "org-other", 3, 60, file="gateway/b.jsonl")]
    folded, kept, copies = _fold(tmp_path, rows)
    assert folded.rows == 0 and copies == []
    assert len(kept) == 4


def test_two_customers_alike_in_one_log_are_not_folded(tmp_path: Path) -> None:
    """Two customers' rows alike in one export (a test fixture, two customers' scripts) are two customers': one log
    never holds one exchange twice under two ids (a Helicone export's customers were folded into one, a review)."""
    rows = [_row("r-1", "org-acme", 1, 0, line=1), _row("r-2", "org-acme", 2, 60, line=2),
            _row("x-1", "org-other", 1, 0, line=3), _row("x-2", "org-other", 2, 60, line=4)]
    folded, kept, _ = _fold(tmp_path, rows)
    assert folded.rows == 0 and len(kept) == 4


def test_short_prompts_alike_link_no_ids(tmp_path: Path) -> None:
    """Two customers' monitors may send one short "say hello" on the minute, answered alike, day after day: short
    prompts link no ids."""
    hello = "<|user|>\nSay hello"
    rows = [_row(f"r-{n}", "org-acme", n, 60 * n, prompt=hello, answer="Hello!") for n in range(1, 4)]
    rows += [_row(f"x-{n}", "org-other", n, 60 * n + 0.1, prompt=hello, answer="Hello!", file="gateway/b.jsonl")
             for n in range(1, 4)]
    folded, kept, _ = _fold(tmp_path, rows)
    assert folded.rows == 0 and len(kept) == 6


def test_rows_with_no_prompt_link_no_ids(tmp_path: Path) -> None:
    """A spend log that keeps no prompts (LiteLLM's default) beside the callbacks: two customers' classification jobs
    give one-word answers with the same usage at the same moments, so a prompt-less row of one team paired with the
    other customer's callback; those pairs linked the two customers and one's requests were folded into the other's (a
    review). A row with no prompt links only the rows of its own request id (one gateway's two exports)."""
    rows = []
    for cust, offset in (("a", 0.0), ("b", 0.3)):
        for i in range(12):
            label, usage = ("positive", 41) if i % 2 else ("negative", 42)
            prompt = f"<|user|>\nClassify customer {cust}'s review {i} as positive or negative, in one word please."
            for tenant, text, file in ((f"org-{cust}", prompt, "gateway/callbacks.jsonl"), (f"team-{cust}", "", "gateway/spend.jsonl")):
                rows.append(_row(f"{cust}-{i}", tenant, 0, offset + i, prompt=text, answer=label, usage=usage, seconds=0.4,
                                 file=file, line=len(rows) + 1))
    _, _, copies = _fold(tmp_path, rows)
    assert all(c["request_id"][0] == c["kept_request_id"][0] for c in copies)  # (a-... into a-..., b-... into b-...)
    texts = pq.read_table(tmp_path / "exchanges.parquet", columns=["prompt_text"]).column("prompt_text").to_pylist()
    assert sum("customer b's" in (t or "") for t in texts) == 12


def test_a_cut_copy_never_takes_the_place_of_a_whole_prompt(tmp_path: Path) -> None:
    """A spend log cuts a long prompt to its ends; under a team id holding more records it was kept, and the whole
    prompt's middle left the search (a review). The id whose rows hold whole prompts is kept."""
    def whole(n: int) -> str:
        return "<|user|>\n" + f"Head of request {n}. " * 40 + f"SECRET-MIDDLE-{n} " + "the shared tail. " * 90

    rows = []
    for n in (1, 2):
        rows.append(_row(f"r-{n}", "org-acme", n, 60 * n, prompt=whole(n), file="gateway/callbacks.jsonl", line=n))
        rows.append(_row(f"r-{n}", "team-acme", n, 60 * n, prompt=whole(n)[:700] + "[...]" + whole(n)[-1100:],
                         file="gateway/spend.jsonl", line=n) | {"prompt_truncated": True})
    rows += [_row(f"s-{k}", "team-acme", 100 + k, 900 + 60 * k, file="gateway/spend.jsonl", line=10 + k) for k in range(3)]
    folded, _, copies = _fold(tmp_path, rows)
    assert folded.rows == 2 and {c["tenant_id"] for c in copies} == {"team-acme"}
    texts = pq.read_table(tmp_path / "exchanges.parquet", columns=["prompt_text"]).column("prompt_text").to_pylist()
    assert sum("SECRET-MIDDLE" in (t or "") for t in texts) == 2


def test_a_third_id_never_joins_two_customers(tmp_path: Path) -> None:
    """A front door's account carries two customers of the gateway behind it; once, the two send the same long prompt
    together, both in the gateway's one log. Through the account's rows the two were put in one group and one
    customer's exchange folded into the other's (a review): a row folds only into a row it is paired with."""
    rows: list[dict[str, Any]] = []

    def add(rid: str, tenant: str, n: int, at: float, file: str, **kw: Any) -> None:
        rows.append(_row(rid, tenant, n, at, file=file, line=len(rows) + 1, **kw))

    for cust, ns in (("a", (1, 2)), ("c", (3, 4))):
        for n in ns:
            add(f"{cust}-{n}", f"org-{cust}", n, 60 * n, "gateway/inner.jsonl", node="d0")
            add(f"f{cust}-{n}", "reseller-x", n, 60 * n - 0.004, "gateway/front.jsonl")
    add("a-9", "org-a", 9, 300.0, "gateway/inner.jsonl", node="d0")
    add("c-9", "org-c", 9, 300.3, "gateway/inner.jsonl", node="d0")
    add("fa-9", "reseller-x", 9, 299.996, "gateway/front.jsonl")
    add("fc-9", "reseller-x", 9, 300.296, "gateway/front.jsonl")
    _, kept, copies = _fold(tmp_path, rows)
    assert ("c-9", "org-c") in kept and ("a-9", "org-a") in kept
    assert {c["tenant_id"] for c in copies} == {"reseller-x"}
    # Each account row copies the customer row logged with it, not the better-ranked of the two rows alike (the record
    # a team reads before notifying named the wrong customer, a review).
    assert {(c["request_id"], c["kept_tenant_id"]) for c in copies if c["request_id"].endswith("-9")} == {
        ("fa-9", "org-a"), ("fc-9", "org-c")}


def test_a_sliver_of_two_customers_traffic_alike_links_no_ids(tmp_path: Path) -> None:
    """Two customers' monitors send one long canary on the minute, each from its own replica's log, answered alike:
    three pairs linked the two and one's canaries folded (a review). A gateway in front logs nearly all of a customer's
    calls; three of forty are no second gateway."""
    canary = "<|user|>\nHealth check: reply with the word OK and the current model name, nothing else at all."
    rows = []
    for cust, file, offset in (("a", "gateway/replica-1.jsonl", 0.0), ("b", "gateway/replica-2.jsonl", 0.2)):
        for i in range(40):
            at = 30 * i + offset
            text = canary if i % 13 == 0 else None
            rows.append(_row(f"{cust}-{i}", f"org-{cust}", 1000 * (cust == "b") + i, at, prompt=text,
                             answer="OK" if text else "", file=file, line=i + 1))
    folded, kept, _ = _fold(tmp_path, rows)
    assert folded.rows == 0 and len(kept) == 80


def test_a_short_question_of_linked_ids_folds(tmp_path: Path) -> None:
    """Two ids linked by long exchanges: their short question logged by both is one exchange too (the match stage
    treats it so); left, the customer was named twice for it (a review)."""
    short = "<|user|>\nWhat is the status of claim 4471?"
    rows = [_row("r-1", "org-acme", 1, 0, node="decode-0"), _row("r-2", "org-acme", 2, 60, node="decode-0"),
            _row("r-3", "org-acme", 3, 120, prompt=short, node="decode-0"),
            _front_door(1, 0), _front_door(2, 60), _front_door(3, 120, prompt=SYSTEM + short)]
    folded, kept, copies = _fold(tmp_path, rows)
    assert folded.rows == 3 and {t for _, t in kept} == {"org-acme"}
    assert [c["prompts"] for c in copies] == ["same", "same", "held"]


def test_a_spend_log_without_prompts_leaves_a_front_door_folded(tmp_path: Path) -> None:
    """Thousands of one-word answers, each logged by the callbacks and by a spend log with no prompt, paired every
    prompt-less row with every answer alike in its 10 s: over the cap, the fold was left out and a real front door's
    copies were kept (a review). Rows with no prompt pair only within ids already linked."""
    rows = []
    for i in range(3000):
        t, label = f"org-{i % 50}", ("positive", "negative")[i % 2]
        prompt = f"<|user|>\nClassify review {i} of the catalogue as positive or negative, in one word."
        rows.append(_row(f"c-{i}", t, 0, i / 100, prompt=prompt, answer=label, file="gateway/callbacks.jsonl", line=i + 1))
        rows.append(_row(f"s-{i}", t, 0, i / 100, prompt="", answer=label, file="gateway/spend.jsonl", line=i + 1))
    rows += [_row("r-1", "org-acme", 1, 0, node="d0"), _row("r-2", "org-acme", 2, 60, node="d0"),
             _front_door(1, 0), _front_door(2, 60)]
    folded, _, copies = _fold(tmp_path, rows)
    assert not folded.left_out and sorted(c["request_id"] for c in copies) == ["fd-1", "fd-2"]


LEDGER = "<|system|>\nYou are AcmeBooks' ledger assistant.\n\n<|user|>\n"


def _own_traffic(rows: list[dict[str, Any]], tenant: str, file: str, n0: int, at: float) -> None:
    rows += [_row(f"{tenant}-own-{i}", tenant, n0 + i, at + 60 * i, file=file, line=100 + i) for i in range(20)]


def test_one_question_and_its_retry_link_no_ids(tmp_path: Path) -> None:
    """Two customers ask one fixed question together, and one retries it: two pairs, but one coincidence (a review).
    A link needs two rows on each side, in two 10 s windows."""
    ask = LEDGER + "List the ledger checks you run every night and their thresholds, one per line."
    rows = [_row("x-1", "org-x", 0, 0.0, prompt=ask, answer="Checks: balance.", file="gateway/replica-1.jsonl", line=1),
            _row("y-1", "org-y", 0, 0.3, prompt=ask, answer="Checks: balance.", file="gateway/replica-2.jsonl", line=1),
            _row("y-2", "org-y", 0, 0.8, prompt=ask, answer="Checks: balance.", file="gateway/replica-2.jsonl", line=2)]
    _own_traffic(rows, "org-x", "gateway/replica-1.jsonl", 0, 5000)
    _own_traffic(rows, "org-y", "gateway/replica-2.jsonl", 100, 5007)
    folded, _, _ = _fold(tmp_path, rows)
    assert folded.rows == 0


@pytest.mark.parametrize("own_traffic", ["hours-later", "one-after-the-other"])
def test_two_templates_sent_once_each_link_no_ids(tmp_path: Path, own_traffic: str) -> None:
    """Two customers send the same two fixed templates once, 15 s apart, answered alike: the share was measured between
    the first and last pair only, and two of twenty-two calls passed for a second gateway; then over the overlap of
    the two ids' activity, which shrank to the two coincidences where one customer's traffic ended as the other's
    began (reviews). It is measured over all the time either id was active."""
    rows: list[dict[str, Any]] = []
    for tenant, file, off in (("org-x", "gateway/replica-1.jsonl", 0.0), ("org-y", "gateway/replica-2.jsonl", 0.3)):
        rows.append(_row(f"{tenant}-1", tenant, 0, 3600 + off, prompt=LEDGER + "List the nightly checks, one per line.",
                         answer="Checks: balance, gaps.", file=file, line=1))
        rows.append(_row(f"{tenant}-2", tenant, 0, 3615 + off, prompt=LEDGER + "What must a reconciliation report hold?",
                         answer="Mismatches and totals.", file=file, line=2))
        start = 20000 + off if own_traffic == "hours-later" else (0 if tenant == "org-x" else 3700)
        _own_traffic(rows, tenant, file, 100 * (tenant == "org-y"), start)
    folded, _, _ = _fold(tmp_path, rows)
    assert folded.rows == 0


def test_a_front_door_of_short_questions_folds(tmp_path: Path) -> None:
    """A front door logging every call of a customer whose questions are mostly short: the share counted all its calls
    but only long prompts could pair, and the two ids were never linked (a review)."""
    rows = []
    for n in range(10):
        short = None if n % 3 == 0 else f"<|user|>\nStatus of claim {4400 + n}?"
        rows += [_row(f"r-{n}", "org-acme", n, 60 * n, prompt=short, node="decode-0", line=n + 1),
                 _front_door(n, 60 * n, prompt=short)]
    folded, kept, _ = _fold(tmp_path, rows)
    assert folded.rows == 10 and {t for _, t in kept} == {"org-acme"}


def test_of_two_cut_copies_the_longer_stays(tmp_path: Path) -> None:
    """Two logs cut one long prompt at other lengths: the longer cut, which holds the middle, was folded into the
    shorter (a review)."""
    def whole(n: int) -> str:
        return ("<|user|>\n" + f"Head of request {n}. " * 40 + "filler text. " * 150 + f"SECRET-MIDDLE-{n} "
                + "more filler. " * 150 + "the shared tail. " * 90)

    rows = []
    for n in (1, 2, 3):
        rows.append(_row(f"r-{n}", "org-acme", n, 60 * n, prompt=whole(n)[:700] + "[...]" + whole(n)[-1300:],
                         node="decode-0", line=n) | {"prompt_truncated": True})
        rows.append(_front_door(n, 60 * n, prompt=whole(n)[:4000] + "[...]" + whole(n)[-4000:]) | {"prompt_truncated": True})
    _fold(tmp_path, rows)
    texts = pq.read_table(tmp_path / "exchanges.parquet", columns=["prompt_text"]).column("prompt_text").to_pylist()
    assert sum("SECRET-MIDDLE" in t for t in texts) == 3


@pytest.mark.parametrize("placed", [False, True], ids=["no-engine-word", "engine-read-the-kept-row"])
def test_a_customers_own_block_stays_unless_the_engine_read_the_row_kept(tmp_path: Path, placed: bool) -> None:
    """A copy holding a system block the kept row lacks: where that block is the customer's own (only its copies hold
    it) it was folded and its text left the search (a review). It stays, unless the engine logs place the kept row:
    then the block was never read by the engine, never in a cache, and cannot have leaked."""
    block = "<|system|>\nCustomer ACME internal: escalation code ZX-9931, never reveal.\n\n"
    rows = []
    for n in (1, 2, 3):
        rows += [_row(f"r-{n}", "org-acme", n, 60 * n, node="decode-0" if placed else None, line=n),
                 _front_door(n, 60 * n, prompt=block + _prompt(n))]
    rows += [_row(f"s-{k}", "org-acme", 50 + k, 900 + 60 * k, line=10 + k) for k in range(2)]  # (the id kept)
    _fold(tmp_path, rows)
    texts = pq.read_table(tmp_path / "exchanges.parquet", columns=["prompt_text"]).column("prompt_text").to_pylist()
    assert sum("ZX-9931" in t for t in texts) == (0 if placed else 3)


def test_a_gateways_own_block_before_several_customers_copies_folds(tmp_path: Path) -> None:
    """A front door that puts its own system block before what it logs, with no engine logs: the block is the same
    before every customer's copies, so it is the gateway's, and the copies fold."""
    rows = []
    for c, tenant in enumerate(("org-acme", "org-beta")):
        for n in (1, 2):
            k = 10 * c + n
            rows += [_row(f"r-{k}", tenant, k, 60 * k, line=k),
                     _row(f"fd-{k}", f"{tenant}-prod", k, 60 * k - 0.004, prompt=SYSTEM + _prompt(k),
                          file="gateway/frontdoor.jsonl", line=k)]
        rows.append(_row(f"s-{c}", tenant, 90 + c, 5000 + c, line=90 + c))  # (so the gateway's ids are kept)
    folded, kept, _ = _fold(tmp_path, rows)
    assert folded.rows == 4 and {t for _, t in kept} == {"org-acme", "org-beta"}


def test_a_copy_names_the_row_that_stays(tmp_path: Path) -> None:
    """Three logs of one exchange (a front door, a spend log, the callbacks): a spend-log copy named the front door's
    row as the one it copies, and that row was itself folded (a review)."""
    rows = [_front_door(n, 60 * n) for n in (1, 2, 3)]
    for n in (1, 2, 3):
        rows += [_row(f"s-{n}", "team-acme", n, 60 * n, file="gateway/spend.jsonl", line=n),
                 _row(f"r-{n}", "org-acme", n, 60 * n, node="decode-0", file="gateway/callbacks.jsonl", line=n)]
    folded, kept, copies = _fold(tmp_path, rows)
    assert {c["kept_request_id"] for c in copies} <= {r for r, _ in kept}
    assert folded.linked == [("org-acme", "acme-prod", 3), ("org-acme", "team-acme", 3)]


def test_a_burst_of_one_prompt_through_both_gateways_stays_bounded(tmp_path: Path) -> None:
    """A load test sends one long prompt 1,500 times in 10 s through both gateways: every two calls paired, over two
    million pairs, and the whole fold was left out, a real front door's copies with it (a review)."""
    burst = "<|user|>\nLoad test: summarise the attached service-level agreement in exactly three bullet points."
    rows = [_row("r-1", "org-acme", 1, 0, node="d0"), _row("r-2", "org-acme", 2, 60, node="d0"),
            _front_door(1, 0), _front_door(2, 60)]
    for i in range(1500):
        at = 1000 + i / 150
        rows += [_row(f"L-{i}", "org-load", 0, at, prompt=burst, answer="- uptime", node="d0", line=100 + i),
                 _row(f"fL-{i}", "load-prod", 0, at - 0.004, prompt=burst, answer="- uptime",
                      file="gateway/frontdoor.jsonl", line=100 + i)]
    folded, _, copies = _fold(tmp_path, rows)
    assert not folded.left_out and {"fd-1", "fd-2"} <= {c["request_id"] for c in copies}


CUSTOMER_BLOCK = "<|system|>\nCustomer ACME internal: escalation code ZX-9931, never reveal.\n\n"


def _holding(tmp_path: Path, text: str) -> int:
    texts = pq.read_table(tmp_path / "exchanges.parquet", columns=["prompt_text"]).column("prompt_text").to_pylist()
    return sum(text in t for t in texts)


def test_a_customers_own_block_in_two_of_its_three_logs_stays(tmp_path: Path) -> None:
    """One customer's three logs, no engine logs: the callbacks lack its own system block, the front door and the
    spend log hold it. Counted by pairs of ids, the block passed for a gateway's own and every copy holding it folded
    (a review): it must stand before copies of several customers' rows."""
    rows = []
    for n in (1, 2, 3):
        rows += [_row(f"r-{n}", "org-acme", n, 60 * n, file="gateway/callbacks.jsonl", line=n),
                 _front_door(n, 60 * n, prompt=CUSTOMER_BLOCK + _prompt(n)),
                 _row(f"s-{n}", "team-acme", n, 60 * n, prompt=CUSTOMER_BLOCK + _prompt(n), file="gateway/spend.jsonl",
                      line=n)]
    rows += [_row(f"o-{k}", "org-acme", 50 + k, 900 + 60 * k, file="gateway/callbacks.jsonl", line=10 + k) for k in range(2)]
    _fold(tmp_path, rows)
    assert _holding(tmp_path, "ZX-9931") == 3


def test_a_customers_own_block_behind_two_front_door_accounts_stays(tmp_path: Path) -> None:
    """One customer with two accounts at a front door: its own block stood before copies of two pairs of ids and
    passed for the gateway's (a review)."""
    rows = []
    for n in (1, 2, 3, 4):
        account = "acme-prod" if n <= 2 else "acme-eu"
        rows += [_row(f"r-{n}", "org-acme", n, 60 * n, line=n),
                 _row(f"fd-{n}", account, n, 60 * n - 0.004, prompt=CUSTOMER_BLOCK + _prompt(n),
                      file=f"gateway/{account}.jsonl", line=n)]
    rows += [_row(f"o-{k}", "org-acme", 50 + k, 900 + 60 * k, line=10 + k) for k in range(2)]
    _fold(tmp_path, rows)
    assert _holding(tmp_path, "ZX-9931") == 4


def test_cancelled_calls_of_one_prompt_leave_the_answered_copy_folded(tmp_path: Path) -> None:
    """One prompt sent five times in 0.8 s, four cancelled with no answer, all logged by both gateways (the front
    door's clock 0.5 s behind): the answered row's nearest partners were cancelled rows, and its copy stayed (a
    review). Rows holding the same answer are paired first."""
    rows = [_row("r-2", "org-acme", 2, 60, node="d0", line=2), _row("r-3", "org-acme", 3, 120, node="d0", line=3),
            _front_door(2, 60), _front_door(3, 120)]
    for i, at in enumerate((0, 0.2, 0.4, 0.6, 0.8)):
        kw: dict[str, Any] = {} if at == 0.4 else {"answer": None, "seconds": None}
        rows += [_row(f"r-1.{i}", "org-acme", 1, at, node="d0", line=10 + i, **kw),
                 _row(f"fd-1.{i}", "acme-prod", 1, at - 0.5, file="gateway/frontdoor.jsonl", line=10 + i, **kw)]
    _, kept, _ = _fold(tmp_path, rows)
    assert ("fd-1.2", "acme-prod") not in kept


def test_a_front_door_account_named_like_another_customer_keeps_the_customer(tmp_path: Path) -> None:
    """A front door's account name for one customer is another customer's own id: ranked by all its rows the engine
    placed, that other id was kept, and the customer's gateway rows folded away into it (a review). The rows paired
    decide, and a row the engine placed never folds into one it did not."""
    rows = [_row(f"r-{n}", "org-a", n, 60 * n, node="d0", line=n) for n in (1, 2, 3)]
    rows += [_row(f"fd-{n}", "org-b", n, 60 * n - 0.004, file="gateway/frontdoor.jsonl", line=n) for n in (1, 2, 3)]
    rows += [_row(f"b-{k}", "org-b", 50 + k, 900 + 60 * k, node="d1", line=10 + k) for k in range(6)]  # (its own calls)
    _, kept, copies = _fold(tmp_path, rows)
    assert {("r-1", "org-a"), ("r-2", "org-a"), ("r-3", "org-a")} <= set(kept)
    assert sorted(c["request_id"] for c in copies) == ["fd-1", "fd-2", "fd-3"]


def test_a_spend_log_without_prompts_folds_into_the_callbacks_of_its_request_ids(tmp_path: Path) -> None:
    """LiteLLM's spend log keeps no prompt by default; naming teams beside callbacks naming organisations, its rows
    never linked (a row with no prompt links nothing), and the exposed customers fell off the list (a review). A row
    with no prompt is evidence beside a row of its own request id, with the same answer, usage and times."""
    rows = []
    for n in (1, 2, 3):
        rows += [_row(f"r-{n}", "org-acme", n, 60 * n, file="gateway/callbacks.jsonl", line=n),
                 _row(f"r-{n}", "team-acme", n, 60 * n, prompt="", file="gateway/spend.jsonl", line=n)]
    folded, kept, copies = _fold(tmp_path, rows)
    assert folded.linked == [("org-acme", "team-acme", 3)] and {t for _, t in kept} == {"org-acme"}
    assert {c["prompts"] for c in copies} == {"unknown"}


def test_a_second_gateway_keyed_like_the_first_folds(tmp_path: Path) -> None:
    """A front door naming customers by the same ids as the gateway behind it, under its own request ids: its copies
    were left to the match stage, and an exposed customer fell off the list (a review). Copies under one id fold too,
    into the row the engine placed."""
    rows = [_row(f"r-{n}", "org-acme", n, 60 * n, node="d0", line=n) for n in (1, 2)]
    rows += [_row(f"fd-{n}", "org-acme", n, 60 * n - 0.004, file="gateway/frontdoor.jsonl", line=n) for n in (1, 2)]
    folded, kept, copies = _fold(tmp_path, rows)
    assert kept == [("r-1", "org-acme"), ("r-2", "org-acme")] and folded.same_id == 2 and folded.linked == []
    assert [c["kept_request_id"] for c in copies] == ["r-1", "r-2"]


def test_the_kept_id_is_the_same_for_every_exchange_of_a_linked_pair(tmp_path: Path) -> None:
    """With no engine placement, the id the logs hold the most records under is kept, for every exchange: a customer
    is never named under one id for one suspect and the other for the next."""
    rows = [_row("r-1", "org-acme", 1, 0), _row("r-2", "org-acme", 2, 60), _row("r-3", "org-acme", 3, 120),
            _row("r-9", "org-acme", 9, 900, answer="Something else entirely."),
            _front_door(1, 0), _front_door(2, 60), _front_door(3, 120)]
    folded, kept, copies = _fold(tmp_path, rows)
    assert {t for _, t in kept} == {"org-acme"} and folded.rows == 3
    assert {c["kept_tenant_id"] for c in copies} == {"org-acme"}


def test_a_linked_pairs_copy_without_an_answer_folds_and_an_answer_is_never_dropped(tmp_path: Path) -> None:
    """Once two ids are linked, a copy that logged no answer (a request half whose response was lost) folds by its
    prompt and time; a copy holding the answer the kept row lacks stays, so the answer is still searched."""
    rows = [_row("r-1", "org-acme", 1, 0, node="decode-0"), _row("r-2", "org-acme", 2, 60, node="decode-0"),
            _row("r-3", "org-acme", 3, 120, node="decode-0"), _row("r-4", "org-acme", 4, 180, answer=None, node="decode-0"),
            _front_door(1, 0), _front_door(2, 60),
            _front_door(3, 120, answer=None, seconds=None, usage=None),  # its answer lost: folds
            _front_door(4, 180)]  # holds the answer the kept row lacks: stays
    folded, kept, copies = _fold(tmp_path, rows)
    assert sorted(c["request_id"] for c in copies) == ["fd-1", "fd-2", "fd-3"]
    assert ("fd-4", "acme-prod") in kept and ("r-4", "org-acme") in kept


def test_a_joined_split_rows_answer_line_counts_as_a_duplicate_too(tmp_path: Path) -> None:
    """A split log's row holds two lines (the request's and the answer's): both count as duplicates of their files, so
    every file still reconciles."""
    rows = [_row("r-1", "org-acme", 1, 0, node="decode-0"), _row("r-2", "org-acme", 2, 60, node="decode-0")]
    for n, at in ((1, 0), (2, 60)):
        row = _front_door(n, at, kind="split")
        row["response_source_file"], row["response_source_line"] = "gateway/frontdoor-responses.jsonl", n
        rows.append(row)
    rows.append(_row("z", "other", 7, 999, file="gateway/frontdoor-responses.jsonl"))  # (the file, among the inputs)
    folded, _, _ = _fold(tmp_path, rows)
    assert folded.lines == {"gateway/frontdoor.jsonl": 2, "gateway/frontdoor-responses.jsonl": 2}


PROMPT = "<|user|>\n" + "Compare the two contracts clause by clause and name every difference. " * 3
LONG = "<|user|>\n" + "".join(f"Clause {i}: the supplier shall deliver within {i} days. " for i in range(60))
PAIRS = {
    "same long": (PROMPT, False, PROMPT, False),
    "same short": ("<|user|>\ncontinue", False, "<|user|>\ncontinue", False),
    "empty": ("", False, PROMPT, False),
    "other question": (PROMPT, False, PROMPT.replace("two", "three"), False),
    "held after system": (PROMPT, False, SYSTEM + PROMPT, False),
    "held after tools and developer": (PROMPT, False, "<|tools|>\n[]\n\n<|developer|>\nbe brief\n\n" + PROMPT, False),
    "after a user turn": (PROMPT, False, "<|user|>\nhello\n\n" + PROMPT, False),
    "after text with no block": (PROMPT, False, "preface\n\n" + PROMPT, False),
    "head without blank line": (PROMPT, False, "<|system|>\nx\n" + PROMPT, False),
    "suffix not a block": ("tail of it", False, "<|system|>\nx\n\ntail of it", False),
    "cut alike": (LONG, True, LONG[:600] + "[...]" + LONG[-1100:], False),
    "cut not said": (LONG, False, LONG[:600] + "[...]" + LONG[-1100:], False),
    "cut other tail": (LONG, True, LONG[:600] + "[...]" + LONG[-1100:-1] + "!", False),
    "cut too short": (LONG[:1500], True, LONG[:700] + LONG[-800:], False),
    "astral and combining": ("<|user|>\n" + "😀e\u0301" * 40, False, SYSTEM + "<|user|>\n" + "😀e\u0301" * 40, False),
    "astral cut": ("😀" * 2000, True, "😀" * 512 + "x" + "😀" * 1024, False),
    "held by a bare block marker": ("<|", False, "<|system|>\nx\n\n<|", False),
    "empty head block": (PROMPT, False, "<|\n\n" + PROMPT, False),
}


@pytest.mark.parametrize("pair", list(PAIRS.values()), ids=list(PAIRS))
def test_the_rule_in_duckdb_answers_as_in_python(pair: tuple[str, bool, str, bool]) -> None:
    """The ingest asks whether two prompts are one request's in DuckDB, where the texts are; the match stage asks in
    Python: the two must agree on every pair, both ways round."""
    a, cut_a, b, cut_b = pair
    con = duckdb.connect()
    try:
        for x, cx, y, cy in ((a, cut_a, b, cut_b), (b, cut_b, a, cut_a)):
            plain_x = con.execute(f"SELECT {PLAIN.format('$x')}", {"x": x}).fetchone()[0]
            plain_y = con.execute(f"SELECT {PLAIN.format('$y')}", {"y": y}).fetchone()[0]
            got = con.execute(f"SELECT {prompts_alike_sql('$x', '$cx', '$y', '$cy')}",
                              {"x": plain_x, "cx": cx, "y": plain_y, "cy": cy}).fetchone()[0]
            assert got == prompts_alike(plain_x, cx, plain_y, cy)
    finally:
        con.close()


BODY = "Line one of the answer.\nLine two, with the figures.\n" * 6
ANSWERS = {
    "crlf": (BODY, BODY.replace("\n", "\r\n")),
    "white space at the end": (BODY, BODY + " \t\r\n\n"),
    "short with white space": ("Yes.", "Yes.\r\n  "),
    "crlf across the 200th character": ("x" * 199 + "\r\n" + BODY, "x" * 199 + "\n" + BODY),
    "all crlf": ("\r\n" * 150 + "end", "\n" * 150 + "end"),
    "white space at 64": ("y" * 63 + "   " + "z" * 10, "y" * 63 + "   " + "z" * 10 + "\n"),
}


@pytest.mark.parametrize("pair", list(ANSWERS.values()), ids=list(ANSWERS))
def test_the_answer_sieve_keeps_every_two_answers_the_rule_calls_the_same(pair: tuple[str, str]) -> None:
    """The fold sieves answers by a cheap key of their start before it compares them whole: two answers the same as
    the rule compares them (CRLF as LF, no white space at the end) must share the key, or a copy would be missed."""
    a, b = pair
    con = duckdb.connect()
    try:
        def one(text: str, expr: str) -> Any:
            return con.execute(f"SELECT {expr} FROM (SELECT $t AS response_text)", {"t": text}).fetchone()[0]

        assert one(a, PLAIN.format("response_text")) == one(b, PLAIN.format("response_text"))
        assert one(a, ANSWER_KEY) == one(b, ANSWER_KEY)
    finally:
        con.close()


def test_copies_whose_answers_differ_in_line_ends_and_trailing_space_fold(tmp_path: Path) -> None:
    """A gateway that logs CRLF line ends and a trailing newline logs the same answer."""
    rows = [_row("r-1", "org-acme", 1, 0, answer=BODY, node="decode-0"),
            _row("r-2", "org-acme", 2, 60, answer=BODY + "2", node="decode-0"),
            _front_door(1, 0, answer=BODY.replace("\n", "\r\n") + "\n"),
            _front_door(2, 60, answer=(BODY + "2").replace("\n", "\r\n") + "  ")]
    folded, kept, _ = _fold(tmp_path, rows)
    assert folded.rows == 2 and kept == [("r-1", "org-acme"), ("r-2", "org-acme")]


@pytest.mark.parametrize("pair", list(PAIRS.values()), ids=list(PAIRS))
def test_the_prompt_sieve_keeps_every_two_prompts_the_rule_calls_one_requests(pair: tuple[str, bool, str, bool]) -> None:
    """The fold pairs rows by keys of their prompts before it asks the rule: two prompts the rule calls the same or
    one after a gateway's blocks share the core key, two it calls cut share the ends key; else a copy would be missed."""
    a, cut_a, b, cut_b = pair
    con = duckdb.connect()
    try:
        def keys(text: str) -> tuple[Any, Any, str]:
            plain = con.execute(f"SELECT {PLAIN.format('$t')}", {"t": text}).fetchone()[0]
            return (*con.execute(f"SELECT hash({core_sql('$p')}), hash({cut_sql('$p')})", {"p": plain}).fetchone(),
                    plain)

        (core_a, ends_a, plain_a), (core_b, ends_b, plain_b) = keys(a), keys(b)
        how = prompts_alike(plain_a, cut_a, plain_b, cut_b)
        if how in ("same", "held"):
            assert core_a == core_b
        if how == "cut":
            assert ends_a == ends_b
    finally:
        con.close()




def _long_answer(n: int) -> str:
    return f"Answer {n}: " + "the quarterly figures hold, and every anomaly is listed below with its account. " * 3


def _table_times(tmp_path: Path) -> dict[str, Any]:
    return {r["request_id"]: r["received_at"] for r in
            pq.read_table(tmp_path / "exchanges.parquet", columns=["request_id", "received_at"]).to_pylist()}


def _gateway_and_door(count: int, offset: float | Callable[[int], float], door: str = "gateway/frontdoor.jsonl", *,
                      every: float = 60, lag: Callable[[int], float] = lambda n: 0.004, kind: str = "helicone_row",
                      door_file: Callable[[int], str] | None = None, end: str = "") -> list[dict[str, Any]]:
    """A gateway's calls of four customers, placed by the engine logs, and a front door's copies of each under the
    customer's account name: received ``lag`` before the gateway (a queue), completed 2 ms after it, ``offset`` s on
    (per call, where a function), each answer with ``end`` after it."""
    def on(n: int) -> float:
        return offset(n) if callable(offset) else offset

    rows = [_row(f"r-{n}", f"org-{n % 4}", n, every * n, _long_answer(n), node=f"decode-{n % 2}", line=n)
            for n in range(1, count + 1)]
    rows += [_row(f"fd-{n}", f"c{n % 4}-prod", n, every * n - lag(n) + on(n), _long_answer(n) + end,
                  seconds=2.002 + lag(n), file=door_file(n) if door_file else door, line=n, kind=kind)
             for n in range(1, count + 1)]
    return rows


@pytest.mark.parametrize(("offset", "door"), [(7.0, "gateway/frontdoor.jsonl"), (-18000.0, "gateway/frontdoor.jsonl"),
                                             (3600.25, "gateway/o'brien's door\\; DROP TABLE x; --.jsonl")],
                         ids=["drifted-7s", "local-time-as-utc", "an-hour-ahead-named-with-quotes"])
def test_a_front_door_whose_clock_is_off_still_folds_and_its_times_are_moved(tmp_path: Path, offset: float,
                                                                            door: str) -> None:
    """A front door whose host's clock drifted, or which writes local time with no zone where the case reads UTC,
    logged every copy seconds or hours from its gateway's: the fold compared the times as logged, folded none of them,
    and every customer was named twice (realistic seed 1 with a front door 7 s ahead: suspects P 0.500, exposed
    customers R 0.046). The two logs' clocks are read off the exchanges both logged, the copies fold, and the front
    door's times in the tables are moved onto the gateway's clock: its row of a customer it alone logged too (the
    match stage compares times as the tables hold them: a review)."""
    rows = _gateway_and_door(24, offset, door)
    rows.append(_row("fd-solo", "solo-prod", 99, 5000 + offset, _long_answer(99), file=door, line=99, kind="helicone_row"))
    folded, kept, copies = _fold(tmp_path, rows)
    assert kept == sorted([(f"r-{n}", f"org-{n % 4}") for n in range(1, 25)] + [("fd-solo", "solo-prod")])
    assert folded.rows == 24 and {c["kept_request_id"] for c in copies} == {f"r-{n}" for n in range(1, 25)}
    [clock] = folded.clocks
    assert (clock.files, clock.kind, clock.reference, clock.reference_kind) == (
        (door,), "helicone_row", ("gateway/a.jsonl",), "logging_payload")
    # (read off when the calls completed: the front door sees the answer 2 ms after the gateway)
    assert (clock.exchanges, clock.customers, clock.offset_us) == (24, 4, round((offset + 0.002) * 1e6))
    assert _table_times(tmp_path)["fd-solo"] == T0 + dt.timedelta(seconds=4999.998)
    assert {c["received_at"] for c in copies} == {T0 + dt.timedelta(seconds=60 * n - 0.006) for n in range(1, 25)}


def test_clocks_that_agree_are_left_as_they_are(tmp_path: Path) -> None:
    """A front door a few milliseconds ahead, as every gateway in front is: no clock is read as apart, no time moves,
    and the copies fold as before."""
    folded, _, _ = _fold(tmp_path, _gateway_and_door(24, 0.0))
    assert folded.rows == 24 and folded.clocks == []


def test_a_queue_in_front_is_no_clock_offset(tmp_path: Path) -> None:
    """A front door with a right clock that holds half its calls 2.5 s in a queue (a guardrail) before the gateway
    behind receives them: read off when the calls were received, the queue passed for a clock 2.5 s off, the shift
    broke the other half's copies, and account names joined the list (a review). A queue delays only the start of a
    call: the offset is read off when they completed, and every copy folds."""
    folded, kept, _ = _fold(tmp_path, _gateway_and_door(40, 0.0, lag=lambda n: 2.5 if n % 20 < 11 else 0.1))
    assert folded.clocks == [] and folded.rows == 40 and all(t.startswith("org-") for _, t in kept)


@pytest.mark.parametrize("layout", ["frontdoor/2026-08-26-{h:02d}.jsonl", "frontdoor/2026/08/26/{h:02d}/requests.jsonl",
                                    "frontdoor/access.log.{h}", "frontdoor/2026-08-26 {h:02d}.jsonl",
                                    "frontdoor/08-26-{h:02d}.jsonl.gz"],
                         ids=["dashes", "hour-folders", "logrotate", "a-space", "no-year"])
def test_a_front_door_logging_hour_files_has_its_clock_read_over_them_all(tmp_path: Path, layout: str) -> None:
    """A front door whose log shipper writes a file or a folder an hour (a Firehose prefix ``YYYY/MM/DD/HH/``,
    logrotate's ``.1``, ``.2``): no two files shared twenty exchanges, so no clock was read and none of its copies
    folded (reviews). A log's files, their numbers aside, are one log, on one clock."""
    rows = _gateway_and_door(48, 7.0, every=300, door_file=lambda n: layout.format(h=300 * n // 3600))
    folded, kept, _ = _fold(tmp_path, rows)
    assert folded.rows == 48 and all(t.startswith("org-") for _, t in kept)
    [clock] = folded.clocks
    assert len(clock.files) == 5 and clock.reference == ("gateway/a.jsonl",) and round(clock.offset_us / 1e6) == 7


def test_two_gateways_of_one_format_in_one_folder_are_two_logs(tmp_path: Path) -> None:
    """A LiteLLM in front of a LiteLLM, both writing callbacks into one folder under their own names: read as one log,
    every exchange was in it twice, no clock was read, and the front door's account names stayed (a review)."""
    rows = _gateway_and_door(24, 7.0, "gateway/frontdoor-2026-08-26.jsonl", kind="logging_payload")
    folded, kept, _ = _fold(tmp_path, rows)
    assert folded.rows == 24 and all(t.startswith("org-") for _, t in kept) and len(folded.clocks) == 1


def test_a_file_holding_two_kinds_on_two_clocks_moves_only_the_kind_apart(tmp_path: Path) -> None:
    """One LiteLLM file holding its callbacks (UTC) and its spend-log rows (local time, read as UTC: 2 h on): every
    row of the file was moved, the callbacks put 2 h early and the two kinds still apart (a review). A log is a kind of
    record too: only the spend-log rows move, onto the callbacks' clock. (Rows of one file are never folded: the match
    stage's rule tells such copies, by the times the tables hold.)"""
    rows = [_row(f"r-{n}", f"org-{n % 4}", n, 60 * n, _long_answer(n), node="decode-0", file="litellm/proxy.jsonl",
                 line=2 * n) for n in range(1, 25)]
    rows += [_row(f"s-{n}", f"team-{n % 4}", n, 60 * n + 7200, _long_answer(n), file="litellm/proxy.jsonl",
                  line=2 * n + 1, kind="spend_log") for n in range(1, 25)]
    folded, _, _ = _fold(tmp_path, rows)
    [clock] = folded.clocks
    assert (clock.kind, clock.reference_kind, round(clock.offset_us / 1e6)) == ("spend_log", "logging_payload", 7200)
    times = _table_times(tmp_path)
    assert times["r-1"] == T0 + dt.timedelta(seconds=60) and times["s-1"] == T0 + dt.timedelta(seconds=60)


def test_another_system_in_the_front_doors_folder_keeps_its_times(tmp_path: Path) -> None:
    """Beside a front door's file (its clock 2 h behind) lies another system's export of the same kind, its clock right:
    both were moved 2 h, the other system's calls against everyone else's (a review). Files named alike (their digits
    aside) are one log; another name is another log, whose clock no exchange read."""
    rows = _gateway_and_door(24, -7200.0)
    rows += [_row(f"other-{n}", f"org-x{n % 3}", 500 + n, 30 * n + 5, _long_answer(500 + n), file="gateway/other-helicone.jsonl",
                  line=n, kind="helicone_row") for n in range(1, 30)]
    folded, _, _ = _fold(tmp_path, rows)
    assert folded.rows == 24 and [c.files for c in folded.clocks] == [("gateway/frontdoor.jsonl",)]
    assert _table_times(tmp_path)["other-1"] == T0 + dt.timedelta(seconds=35)


@pytest.mark.parametrize("second_log", ["gateway/day-2.jsonl", "gateway-b/day-2.jsonl"], ids=["one-gateway", "two-gateways"])
def test_one_benchmark_run_by_two_customers_on_two_days_is_never_one_exchange(tmp_path: Path, second_log: str) -> None:
    """Two customers run one public benchmark (thirty long questions, one every 20 s, answered alike every time) on two
    days: read as one log's clock 37 hours off, the second customer's calls folded into the first's, and it left the
    case (a review). Two day files of one gateway are one log, on one clock; two gateways' clocks are at most a time
    zone apart."""
    rows = [_row(f"a-{n}", "org-alpha", n, 20 * n, _long_answer(n), file="gateway/day-1.jsonl", line=n) for n in range(30)]
    rows += [_row(f"b-{n}", "org-beta", n, 133_200 + 20 * n + 0.3 * (n % 2), _long_answer(n), file=second_log, line=n)
             for n in range(30)]
    folded, kept, copies = _fold(tmp_path, rows)
    assert folded.clocks == [] and copies == [] and len(kept) == 60


@pytest.mark.parametrize("second_files", ["one", "per-customer"])
def test_a_benchmark_run_through_two_gateways_hours_apart_moves_no_clock(tmp_path: Path, second_files: str) -> None:
    """Three customers run one public benchmark through a gateway, and three others through another gateway three hours
    later, each among its gateway's other traffic: read as the second gateway's clock 3 h off, its whole log moved and
    the second customers' calls folded into the first's (a review). Thirty answers are a sliver of the second
    gateway's while the two overlap: a front door logs nearly every call."""
    rows = [_row(f"a-{n}", f"org-a{n % 3}", n, 20 * n, _long_answer(n), file="gateway/day.jsonl", line=n) for n in range(30)]
    rows += [_row(f"g-{n}", f"org-g{n % 9}", 900 + n, 50 * n, _long_answer(900 + n), file="gateway/day.jsonl", line=100 + n)
             for n in range(200)]
    def second(customer: str) -> str:  # (a file per customer: only the benchmark's files hold exchanges, a review)
        return "gateway-b/day.jsonl" if second_files == "one" else f"gateway-b/customer-{1000 + int(customer[5:])}.jsonl"

    rows += [_row(f"b-{n}", f"org-b{n % 3}", n, 10_800 + 20 * n, _long_answer(n), file=second(f"org-b{n % 3}"), line=n)
             for n in range(30)]
    rows += [_row(f"h-{n}", f"org-h{n % 7}", 2000 + n, 10_000 + 25 * n, _long_answer(2000 + n),
                  file=second(f"org-h{10 + n % 7}"), line=100 + n) for n in range(80)]
    folded, kept, copies = _fold(tmp_path, rows)
    assert folded.clocks == [] and copies == [] and len(kept) == len(rows)
    assert _table_times(tmp_path)["h-0"] == T0 + dt.timedelta(seconds=10_000)


@pytest.mark.parametrize(("layout", "others", "last"), [("gateway/hour={h:02d}/part-00.jsonl", 60, 14),
                                                       ("gateway/2026/08/26/{h:02d}/part-00.jsonl", 60, 14),
                                                       ("gateway/2026/08/26/{h:02d}/part-00.jsonl", 4, 12)],
                         ids=["hive", "firehose", "firehose-quiet-four-hours"])
def test_hour_folders_of_one_gateway_and_an_hourly_monitor_are_one_clock(tmp_path: Path, layout: str, others: int,
                                                                         last: int) -> None:
    """One gateway writing a folder an hour (``hour=09/``), and a monitor sending the same 25 long prompts at the top of
    every hour: each pair of hours read as a clock an hour off, every hour was moved onto the first and the monitor's
    calls folded (a review). An hour folder is one log with the others: its digits aside, the path is the same."""
    rows = []
    for hour in range(9, last + 1):
        for m in range(25):
            rows.append(_row(f"m-{hour}-{m}", "org-monitor" if m % 2 else f"org-m{m % 5}", 3000 + m, 3600 * hour + m * 0.5,
                             _long_answer(3000 + m), file=layout.format(h=hour), line=m + 1))
        for n in range(others):
            rows.append(_row(f"c-{hour}-{n}", f"org-{n % 6}", 100 * hour + n, 3600 * hour + 40 + 50 * n,
                             _long_answer(100 * hour + n), file=layout.format(h=hour), line=100 + n))
    folded, _, copies = _fold(tmp_path, rows)
    assert folded.clocks == [] and folded.unread_clocks == [] and copies == []
    assert _table_times(tmp_path)[f"c-{last}-0"] == T0 + dt.timedelta(seconds=3600 * last + 40)


def test_day_files_of_one_gateway_sharing_daily_jobs_are_one_clock(tmp_path: Path) -> None:
    """Two day files of one gateway share the calls of jobs that send one prompt at one hour every day and get one
    answer: read as one file's clock a day off, each day's calls folded into the day before's as copies under one
    id (a review). One gateway's day files are one log, and a job's answer it holds every day is no one exchange; a
    front door logging it all again, its clock right, folds every copy."""
    rows: list[dict[str, Any]] = []
    door: list[dict[str, Any]] = []
    for day in (0, 1):
        for job in range(40):
            rows.append(_row(f"job-{day}-{job}", f"org-job-{job}", 1000 + job, 86400 * day + 300 * job + 0.3 * day,
                             _long_answer(1000 + job), file=f"gateway/day-{day + 1}.jsonl", line=len(rows) + 1))
        for n in range(25):
            rows.append(_row(f"r-{day}-{n}", f"org-{n % 5}", 100 * (day + 1) + n, 86400 * day + 40 * n + 7,
                             _long_answer(100 * (day + 1) + n), file=f"gateway/day-{day + 1}.jsonl", line=len(rows) + 1))
    for r in rows:
        at = (r["received_at"] - T0).total_seconds() - 0.004
        door.append(_row("fd-" + r["request_id"], r["tenant_id"] + "-prod", 0, at, r["response_text"],
                         prompt=r["prompt_text"], seconds=2.006, file="frontdoor/all.jsonl", line=len(door) + 1,
                         kind="helicone_row"))
    folded, _, copies = _fold(tmp_path, rows + door)
    assert folded.clocks == [] and folded.rows == len(door)
    assert {c["request_id"] for c in copies} == {r["request_id"] for r in door}


@pytest.mark.parametrize("layout", ["files", "folders"])
def test_many_logs_of_canned_answers_read_no_clock_and_stay_bounded(tmp_path: Path, layout: str) -> None:
    """Thousands of small files, or hundreds of folders (one per customer), each holding the same long canned answers
    once: every pair that shared an answer was joined before any threshold, and the ingest ran out of its memory cap (a
    review). An answer more than a few logs hold is canned: no clock is read off it."""
    name = (lambda f: f"gateway/part-{f:05d}.jsonl") if layout == "files" else (lambda f: f"tenant=t{chr(97 + f % 26)}{f}/x.jsonl")
    rows = [_row(f"r-{f}-{n}", f"org-{f % 50}", n, 10 * f + n, _long_answer(n), file=name(f), line=n)
            for f in range(3000 if layout == "files" else 300) for n in range(25 if layout == "folders" else 3)]
    folded, _, copies = _fold(tmp_path, rows)
    assert folded.clocks == [] and copies == []


@pytest.mark.parametrize("end", ["\n", "\r\n\r\n"], ids=["a-newline", "crlfs"])
def test_a_front_door_ending_its_answers_otherwise_has_its_clock_read(tmp_path: Path, end: str) -> None:
    """A front door writing each answer with a line end after it: the clock reading keyed answers by their exact
    length, found no exchange both logs hold, and none of the front door's copies (7 s on) folded (a review). The fold
    reads the two as one text; so does the clock reading."""
    folded, kept, _ = _fold(tmp_path, _gateway_and_door(24, 7.0, end=end))
    assert folded.rows == 24 and all(t.startswith("org-") for _, t in kept) and len(folded.clocks) == 1


@pytest.mark.parametrize(("hosts", "right_share", "other_clock"),
                         [(("gw01", "gw02"), 7, 0.0), (("host1", "host2"), 7, 0.0), (("192.168.1.10", "192.168.1.11"), 7, 0.0),
                          (("node-a1b2c3d4", "node-e5f6a7b8"), 7, 0.0), (("gw01", "gw02"), 2, 0.0),
                          (("gw01", "gw02"), 2, -3600.0)],
                         ids=["gw", "host", "addresses", "hex", "drifted-host-the-smaller", "two-clocks-off"])
def test_two_front_door_hosts_named_alike_keep_their_own_clocks(tmp_path: Path, hosts: tuple[str, str], right_share: int,
                                                               other_clock: float) -> None:
    """Two front-door hosts named alike (``gw01`` and ``gw02``, ``host1`` and ``host2``, two addresses), one 7 s
    ahead: read as one log, the right host's rows were moved 7 s too and its copies stopped folding; where the
    drifted host was the smaller, or the other host's clock was off by another amount, it was read at the majority's
    offset or not at all (reviews). Of a log, the files whose own exchanges agree with its offset move by it, and a
    file whose own exchanges agree on another offset moves by that one: every copy folds."""
    off, right = (f"fd/{h}.jsonl" for h in hosts)
    # (in runs of four calls, so that each host logs every customer's)
    rows = _gateway_and_door(56, 7.0, door_file=lambda n: right if (n // 4) % right_share == 0 else off)
    for r in rows:
        if r["source_file"] == right:
            r["received_at"] += dt.timedelta(seconds=other_clock - 7)
            r["completed_at"] += dt.timedelta(seconds=other_clock - 7)
    folded, kept, _ = _fold(tmp_path, rows)
    assert sorted((c.files, round(c.offset_us / 1e6)) for c in folded.clocks) == sorted(
        [((off,), 7)] + ([((right,), round(other_clock))] if other_clock else []))
    assert folded.rows == 56 and all(t.startswith("org-") for _, t in kept)


def test_a_clock_that_changed_during_the_case_is_said_not_read(tmp_path: Path) -> None:
    """A front door writing local time with no zone across a change of daylight saving time (5 h behind, then 4 h):
    no one offset holds enough of its calls to read, and its copies could not fold. Nothing is moved, and the fold
    says which logs hold answers alike at a fixed offset it did not read, so the note can tell the team to set the
    log's time zone."""
    rows = _gateway_and_door(60, lambda n: -18000.0 if n <= 30 else -14400.0, every=3600)
    folded, _, _ = _fold(tmp_path, rows)
    assert folded.clocks == [] and folded.rows == 0
    assert [(c.files, c.reference) for c in folded.unread_clocks] == [(("gateway/frontdoor.jsonl",), ("gateway/a.jsonl",))]
    assert round(folded.unread_clocks[0].offset_us / 3.6e9) in (-5, -4)
    assert _table_times(tmp_path)["fd-1"] == T0 + dt.timedelta(seconds=3600 - 0.004 - 18000)


def test_a_gateways_compressed_days_are_one_log_with_its_plain_ones(tmp_path: Path) -> None:
    """A gateway whose older day files are compressed (logrotate) and a front door 7 s ahead: read as three logs by
    their endings, the front door's clock was read against the plain days alone, and the compressed days' exchanges,
    at the same offset, were said as an offset not read (a false alarm on realistic seeds 1-3). One log, one clock,
    compressed or not: one offset read, nothing unread."""
    ends = ("gateway/cb-2026-08-25.jsonl.gz", "gateway/cb-2026-08-26.jsonl.zst", "gateway/cb-2026-08-27.jsonl")
    rows = _gateway_and_door(60, 7.0, every=3600)
    for r in rows:
        if r["request_id"].startswith("r-"):
            r["source_file"] = ends[min(int(r["request_id"][2:]) // 24, 2)]
    folded, _, _ = _fold(tmp_path, rows)
    [clock] = folded.clocks
    assert clock.reference == ends and folded.unread_clocks == [] and folded.rows == 60


def test_a_front_door_before_two_gateways_moves_every_day_it_logged(tmp_path: Path) -> None:
    """A front door 7 s ahead writing day files, before one gateway on the first day and another on the second: its
    log joined the others through one of them, and only the files agreeing through that one moved; the other day's
    copies stayed apart (a review). Every file agreeing through any of its log's pairs moves."""
    rows = _gateway_and_door(48, 7.0, every=3600, door_file=lambda n: f"fd/door-2026-08-{26 + (3600 * n) // 86400:02d}.jsonl")
    for r in rows:
        if r["request_id"].startswith("r-") and int(r["request_id"][2:]) * 3600 >= 86400:
            r["source_file"] = "gateway-b/b.jsonl"
    folded, kept, _ = _fold(tmp_path, rows)
    assert folded.rows == 48 and all(t.startswith("org-") for _, t in kept)
    [clock] = folded.clocks
    assert clock.files == ("fd/door-2026-08-26.jsonl", "fd/door-2026-08-27.jsonl", "fd/door-2026-08-28.jsonl")


def test_a_moved_logs_file_holding_no_long_answer_moves_with_it(tmp_path: Path) -> None:
    """A front door 7 s ahead writing hour files, one of whose hours held only a classification job's one-word answers:
    that file held no exchange to read, was not moved, and its rows stayed 7 s off (a review). Where none of a log's
    files is another host's, a file with no exchange moves with it."""
    rows = _gateway_and_door(48, 7.0, every=300, door_file=lambda n: f"frontdoor/2026-08-26-{300 * n // 3600:02d}.jsonl")
    rows.append(_row("fd-job", "job-prod", 500, 3600 * 5 + 7, "positive", file="frontdoor/2026-08-26-05.jsonl", line=500,
                     kind="helicone_row"))
    folded, _, _ = _fold(tmp_path, rows)
    # (said apart from the files whose own exchanges showed the offset: nothing of its own did)
    [alone] = [c for c in folded.clocks if "frontdoor/2026-08-26-05.jsonl" in c.files]
    assert alone.files == ("frontdoor/2026-08-26-05.jsonl",) and alone.through == "log" and alone.exchanges == 0
    assert "frontdoor/2026-08-26-05.jsonl" not in {f for c in folded.clocks if c.through != "log" for f in c.files}
    assert _table_times(tmp_path)["fd-job"] == T0 + dt.timedelta(seconds=3600 * 5 - 0.002)
