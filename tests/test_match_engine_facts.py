"""The engine's facts (retried and refused requests) are queried on a thread while the match stage loads its
targets: the same facts as queried alone, their errors raised where the stage waits for them, and no query left
running when the stage leaves early."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest
from match_helpers import at, exchange

from forensics import queries
from forensics.case import Case
from forensics.errors import CaseError
from forensics.lab.cases import write_case
from forensics.match.findings import QueryStopped, QueryWatch, engine_facts, engine_facts_beside


def _event(rid: str, node: str, role: str, minute: float, event: str, tokens: int) -> dict[str, Any]:
    return {"source_file": f"{node}.log", "source_line": 1, "node": node, "role": role, "time": at(minute),
            "event": event, "rid": rid, "input_len": tokens, "message": f"rid={rid} {event}"}


def _case(root: Path) -> Case:
    """ann's request decoded on two nodes (a retry); bob's refused as over the limit and never prefilled."""
    rows = [exchange("a1", "ann", -10, prompt="one two three", response="four five"),
            exchange("b1", "bob", -9, prompt="six seven", response="", prompt_tokens=700_000,
                     prompt_tokens_source="engine"),
            exchange("c1", "cid", -8, prompt="eight", response="nine")]
    events = [_event("a1", "decode-1", "decode", -10, "req_time_stats", 3),
              _event("a1", "decode-2", "decode", -9.5, "req_time_stats", 3),
              _event("b1", "prefill-0", "prefill", -9, "over_limit", 700_000),
              _event("c1", "decode-1", "decode", -8, "req_time_stats", 1)]
    return Case(write_case(root, rows, engine_events=events))


def test_the_facts_queried_beside_are_those_queried_alone(tmp_path: Path) -> None:
    case = _case(tmp_path / "case")
    alone = engine_facts(case)
    assert alone == ({("a1", "ann"): frozenset({"decode-1", "decode-2"})}, {("b1", "bob")})
    with engine_facts_beside(case) as facts:
        assert facts() == alone
        assert facts() == alone  # waiting again gives them again


def test_a_failed_query_raises_where_the_stage_waits(tmp_path: Path) -> None:
    case = _case(tmp_path / "case")
    (case.root / "engine_events.parquet").write_bytes(b"PAR1 not a parquet file")
    with pytest.raises(CaseError) as alone:
        engine_facts(case)
    with engine_facts_beside(case) as facts, pytest.raises(CaseError) as beside:
        facts()
    assert str(beside.value) == str(alone.value) and "engine_events table cannot be read" in str(beside.value)


def _slow_first_query(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[str]]:
    """The engine facts' first query made one that runs for about a minute: an event set as it starts, and the
    name of the exception that ended it (none if it ran to its end)."""
    started = threading.Event()
    ended: list[str] = []

    def slow(con: duckdb.DuckDBPyConnection, run: Any) -> Any:
        started.set()
        try:
            return con.execute("SELECT sum(hash(i)) FROM range(10000000000) t(i)").fetchall()
        except BaseException as exc:
            ended.append(type(exc).__name__)
            raise

    monkeypatch.setattr(queries, "with_memory_to_spare", slow)
    return started, ended


def test_a_stage_that_leaves_early_stops_the_running_query(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Leaving the block must interrupt the query, not wait for it (an interrupt lost as the query starts lets it
    # end normally, and the test fails).
    case = _case(tmp_path / "case")
    started, ended = _slow_first_query(monkeypatch)
    with pytest.raises(KeyError, match="the stage failed"), engine_facts_beside(case):
        assert started.wait(60)
        raise KeyError("the stage failed")  # the error the caller sees is its own, not the query's
    assert ended == ["InterruptException"]
    assert not [t for t in threading.enumerate() if t.name == "engine-facts"]


def test_a_signal_while_the_stage_waits_for_the_facts_stops_the_query(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # Ctrl-C while the stage waits: a join that a signal interrupts leaves the thread marked as ended while it
    # runs on (python/cpython#90882), and the query ran on after the stage had left.
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("Python delivers signals to the main thread only")
    case = _case(tmp_path / "case")
    class Stopped(Exception):
        pass

    def handler(signum: int, frame: Any) -> None:
        raise Stopped()

    started, ended = _slow_first_query(monkeypatch)
    previous = signal.signal(signal.SIGINT, handler)
    try:
        with pytest.raises(Stopped), engine_facts_beside(case) as facts:
            assert started.wait(60)
            threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
            facts()
    finally:
        signal.signal(signal.SIGINT, previous)
    assert ended == ["InterruptException"]
    assert not [t for t in threading.enumerate() if t.name == "engine-facts"]


def test_a_stopped_watch_starts_no_further_query() -> None:
    watch = QueryWatch()
    con = duckdb.connect(":memory:")
    watch.running(con)
    watch.closing()
    watch.stop()  # nothing running: nothing to interrupt
    with pytest.raises(QueryStopped):
        watch.running(con)
    assert con.execute("SELECT 1").fetchall() == [(1,)]  # the connection itself is left as it was
    con.close()
