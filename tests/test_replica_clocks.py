"""Two gateway replicas, one on a host whose clock is off: no exchange is logged twice, so no copy shows the offset, but
the engine logs saw every request of both end. Without reading it, that replica's requests were placed hours or
minutes from the other's: a suspect's stale pages seemed to come from requests after it, the records a decode node
served before it were counted in the wrong order, and exposed customers fell off the list (realistic seeds 1-3, a
replica five hours behind: exposed customers 0.995 / 0.815 against 1.000 / 0.953). The ingest reads the replica's
clock through the engine nodes that ran both replicas' requests, and the list is the one a single gateway gives."""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import small_incident_copies

from forensics import api
from forensics.ingest.copies import _engine_edges, _OnNode
from forensics.lab.replicas import REPLICA_NAME, split_replicas

SEED = 7
ENGINE_INPUT = 'format = "sglang"\npath = "engine"'


@pytest.fixture(scope="module")
def incident(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A copy of the simulated small incident (plain files), to edit, per test."""
    return small_incident_copies(tmp_path_factory.mktemp("replicas"), SEED)


@pytest.fixture(scope="module")
def baseline(incident: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of the incident as simulated: one gateway."""
    return Path(api.run(incident("one-gateway") / "case.toml", tmp_path_factory.mktemp("baseline")).report.report_dir)


def _engine_in_local_time(inc: Path) -> None:
    """The engine logs' zone-less times read five hours behind UTC (an engine host writing local time)."""
    case = inc / "case.toml"
    case.write_text(case.read_text(encoding="utf-8").replace(ENGINE_INPUT, ENGINE_INPUT + '\ntimezone = "Etc/GMT+5"'),
                    encoding="utf-8")


def _run(inc: Path, out: Path) -> tuple[Path, dict[str, Any]]:
    report = Path(api.run(inc / "case.toml", out).report.report_dir)
    return report, json.loads((report / "case" / "manifest.json").read_text(encoding="utf-8"))


def _same_list(report: Path, baseline: Path) -> None:
    for name in ("notifications.csv", "suspects.csv"):
        assert (report / name).read_bytes() == (baseline / name).read_bytes(), name


def _names(report: Path) -> list[tuple[str, ...]]:
    with (report / "notifications.csv").open(encoding="utf-8", newline="") as fh:
        return sorted((r["tenant_id"], r["role"], r["tier"], r["request_ids"]) for r in csv.DictReader(fh))


def _received(case: Path) -> dict[str, float]:
    table, _ = api.query_case(case, "SELECT request_id, received_at FROM exchanges WHERE record_kind = 'logging_payload'", {})
    return {r: t.timestamp() for r, t in zip(table.column("request_id").to_pylist(),
                                             table.column("received_at").to_pylist(), strict=True) if t is not None}


@pytest.mark.parametrize("offset", [-18000.0, 600.0], ids=["five-hours-behind", "ten-minutes-ahead"])
def test_a_replica_whose_clock_is_off_is_read_through_the_engine_logs(
        incident: Callable[[str], Path], baseline: Path, tmp_path: Path, offset: float) -> None:
    """Half the calls logged by a second replica whose clock is off: its clock is read through the engine logs, its
    rows' times are moved onto the other replica's clock (which agrees with the engine's), the manifest and a note say
    so, and the list is the one gateway's."""
    inc = incident(f"replica-{offset:+.0f}")
    moved = split_replicas(inc, clock_offset=offset)
    report, manifest = _run(inc, tmp_path / "out")
    _same_list(report, baseline)
    [clock] = manifest["clock_offsets"]
    assert "clock_offsets_unread" not in manifest
    assert clock["read_from"] == "engine logs" and clock["record_kind"] == "logging_payload"
    assert abs(clock["offset_seconds"] - offset) < 1
    assert clock["files"] and all(f.startswith(f"gateway/{REPLICA_NAME}-") for f in clock["files"])
    assert clock["reference"] and all(f.startswith("gateway/litellm-callbacks-") for f in clock["reference"])
    assert clock["customers"] >= 3 and 20 <= clock["exchanges"] <= moved
    note = next(n for n in manifest["notes"] if "read apart from another log's" in n)
    assert REPLICA_NAME in note and "through the engine logs" in note
    # Every row of the replica on one clock with the other's: within a second of when the single gateway logged it.
    one, two = _received(baseline / "case"), _received(report / "case")
    assert one.keys() == two.keys() and max(abs(one[r] - two[r]) for r in one) < 1


def test_replicas_named_alike_are_read_host_by_host(incident: Callable[[str], Path], baseline: Path,
                                                    tmp_path: Path) -> None:
    """Replicas ``litellm-0`` and ``litellm-1`` (a StatefulSet's pods) write files named alike, read as one log: the
    files of the one whose clock is off agree on another offset against the engine nodes than the others, so they are
    read as a host of their own and moved onto the clock of the one whose requests end when the engine says."""
    inc = incident("replicas-named-alike")
    split_replicas(inc, clock_offset=-18000.0, names=("litellm-0-callbacks", "litellm-1-callbacks"))
    report, manifest = _run(inc, tmp_path / "out")
    _same_list(report, baseline)
    [clock] = manifest["clock_offsets"]
    assert clock["read_from"] == "engine logs" and abs(clock["offset_seconds"] + 18000) < 1
    assert clock["files"] and all(f.startswith("gateway/litellm-1-callbacks-") for f in clock["files"])
    assert clock["reference"] and all(f.startswith("gateway/litellm-0-callbacks-") for f in clock["reference"])


def test_a_replica_a_second_and_a_half_off_never_moves_the_right_one(incident: Callable[[str], Path], baseline: Path,
                                                                      tmp_path: Path) -> None:
    """A replica 1.5 s ahead, serving most of the calls: within two seconds of the engine's times it counted as agreeing
    with them, it was the reference as the larger, and the right replica was moved 1.5 s onto it (a review). Bounded by
    both ends of the requests on the node that ended them, so close an offset cannot be told from the time a request
    takes: nothing moves (the same names on the list; its times as each replica logged them)."""
    inc = incident("replica-1.5s")
    split_replicas(inc, clock_offset=1.5, share=0.7)
    report, manifest = _run(inc, tmp_path / "out")
    assert _names(report) == _names(baseline)
    moved = {f for c in manifest.get("clock_offsets", []) for f in c["files"]}
    assert not any(f.startswith("gateway/litellm-callbacks-") for f in moved)


def test_a_replica_whose_completions_lag_is_no_clock_off(incident: Callable[[str], Path], baseline: Path,
                                                          tmp_path: Path) -> None:
    """A replica on a right clock whose calls complete three seconds after the engine ends them (a post-call hook, an
    output guardrail): by the ends alone it read as three seconds off, and its right times were moved (a review). Its
    requests' starts allow its clock to be the engine's: nothing moves."""
    inc = incident("replica-lag")
    split_replicas(inc, clock_offset=0.0)
    for path in sorted((inc / "gateway").glob(f"{REPLICA_NAME}-*")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for row in rows:
            payload = row.get("standard_logging_object") or row
            if isinstance(payload.get("endTime"), int | float):
                payload["endTime"] += 3.0
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _, manifest = _run(inc, tmp_path / "out")
    assert "clock_offsets" not in manifest and "clock_offsets_unread" not in manifest


def test_a_time_zones_offset_is_said_to_be_checked(incident: Callable[[str], Path], tmp_path: Path) -> None:
    """Engine logs and a second replica both writing local time with no zone, five hours from UTC, beside a replica
    writing epoch times: the zone-less replica agrees with the engine and its clock is kept, so the right replica moves
    five hours (which log is wrong, two zone-less witnesses cannot tell: a review). An offset of a time zone is said,
    with what to check."""
    inc = incident("zone-replica")
    _engine_in_local_time(inc)
    split_replicas(inc, clock_offset=0.0)
    for path in sorted((inc / "gateway").glob(f"{REPLICA_NAME}-*")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        for row in rows:
            payload = row.get("standard_logging_object") or row
            for key in ("startTime", "endTime", "completionStartTime"):
                if isinstance(payload.get(key), int | float):  # (as the engine's times are read: five hours later)
                    local = dt.datetime.fromtimestamp(payload[key], dt.UTC) + dt.timedelta(hours=5)
                    payload[key] = local.strftime("%Y-%m-%dT%H:%M:%S.%f")
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    _, manifest = _run(inc, tmp_path / "out")
    [clock] = manifest["clock_offsets"]
    assert abs(abs(clock["offset_seconds"]) - 18000) < 1
    note = next(n for n in manifest["notes"] if "read apart from another log's" in n)
    assert "An offset of a time zone" in note and "set their timezone" in note


def test_hosts_named_alike_leave_the_files_the_engine_logs_miss_where_they_are(incident: Callable[[str], Path],
                                                                             tmp_path: Path) -> None:
    """Replicas named alike, one five hours off, and engine logs that begin on the window's second day: the files of
    the first days show no host's clock, so which host wrote them is unknown. They moved with the larger host's log,
    the right replica's among them (a review); they now stay, and only the files whose own requests show the offset
    move."""
    inc = incident("alike-partial-engine")
    split_replicas(inc, clock_offset=-18000.0, names=("litellm-0-callbacks", "litellm-1-callbacks"))
    for path in sorted((inc / "engine").glob("*.log")):
        kept = [line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                if not (m := re.search(r"(\d{4}-\d\d-\d\d)[ T]\d\d:\d\d:\d\d", line)) or m.group(1) >= "2026-08-27"]
        path.write_text("".join(kept), encoding="utf-8")
    _, manifest = _run(inc, tmp_path / "out")
    moved = {f: c for c in manifest.get("clock_offsets", []) for f in c["files"]}
    assert moved and all(f.startswith("gateway/litellm-1-callbacks-") and f >= "gateway/litellm-1-callbacks-2026-08-27"
                         for f in moved), sorted(moved)
    assert {c["read_from"] for c in moved.values()} == {"engine logs"}


def test_replicas_beside_engine_logs_without_dates_are_said_unchecked(tmp_path: Path) -> None:
    """vLLM's default lines carry no year, so the engine's events have no time: two replicas' clocks could not be
    checked through them, a replica ten minutes off stayed so, and nothing said it (a review). A note now says which
    logs could not be checked, and how to give the engine's lines their dates."""
    from forensics.lab.simulate import simulate

    simulate(tmp_path / "sim", seed=SEED, scale="small", fmt="litellm", engine_fmt="vllm", force=True)
    split_replicas(tmp_path / "sim", clock_offset=600.0)
    _, manifest = _run(tmp_path / "sim", tmp_path / "out")
    assert "clock_offsets" not in manifest
    note = next(n for n in manifest["notes"] if "give no time for their ends" in n)
    assert REPLICA_NAME in note and "litellm-callbacks-" in note and "VLLM_LOGGING_CONFIG_PATH" in note


def test_two_replicas_whose_clocks_agree_move_nothing(incident: Callable[[str], Path], baseline: Path,
                                                      tmp_path: Path) -> None:
    """Two replicas on right clocks: no clock is read or said, and the list is the one gateway's."""
    inc = incident("replicas-right")
    split_replicas(inc, clock_offset=0.0)
    report, manifest = _run(inc, tmp_path / "out")
    _same_list(report, baseline)
    assert "clock_offsets" not in manifest and "clock_offsets_unread" not in manifest
    assert not [n for n in manifest["notes"] if "clock" in n]


def test_an_engine_in_local_time_moves_no_gateway_clock_but_an_off_replica_onto_the_other(
        incident: Callable[[str], Path], tmp_path: Path) -> None:
    """Engine logs whose zone-less times are local time read as UTC are hours off every gateway clock alike: that is no
    gateway's clock off, and nothing moves. A replica ten minutes off beside them is still read, through the nodes
    (whose own clock cancels out), and the list is the one gateway's with the same engine logs."""
    one = incident("engine-local-one-gateway")
    _engine_in_local_time(one)
    base, base_manifest = _run(one, tmp_path / "baseline")
    assert "clock_offsets" not in base_manifest and "clock_offsets_unread" not in base_manifest
    inc = incident("engine-local-replica")
    _engine_in_local_time(inc)
    split_replicas(inc, clock_offset=600.0)
    report, manifest = _run(inc, tmp_path / "out")
    # (no clock agrees with the engine's: the one kept is the replica's the engine places most, so the times the
    # list shows may be ten minutes off; who is on it, and why, is the same)
    assert _names(report) == _names(base)
    [clock] = manifest["clock_offsets"]
    assert clock["read_from"] == "engine logs" and abs(abs(clock["offset_seconds"]) - 600) < 1
    assert "clock_offsets_unread" not in manifest


def _shift_engine(folder: Path, seconds: float, start: str, end: str = "9999") -> None:
    """Move the times of the engine lines in ``folder`` written from ``start`` to before ``end`` (as logged) by
    ``seconds``: an engine host's clock stepped, or off for a while."""
    for path in sorted(folder.glob("*.log")):
        out = []
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", line) or re.search(r'"timestamp": ?"([^"]+)"', line)
            if m and start <= m.group(1).replace("T", " ") < end:
                was = dt.datetime.fromisoformat(m.group(1))
                now = (was + dt.timedelta(seconds=seconds)).isoformat(sep=m.group(1)[10], timespec="microseconds"
                                                                      if "." in m.group(1) else "seconds")
                line = line[:m.start(1)] + now + line[m.end(1):]
            out.append(line)
        path.write_text("".join(out), encoding="utf-8")


@pytest.mark.parametrize("end", ["9999", "2026-08-29"], ids=["stepped-for-good", "off-for-two-days"])
def test_an_engine_whose_clock_stepped_moves_no_gateway_clock(incident: Callable[[str], Path], tmp_path: Path,
                                                              end: str) -> None:
    """One gateway, nothing wrong with it; every engine node's clock stepped an hour ahead on the window's first day
    (an NTP correction, daylight saving time in engine logs of local time), for good or for two days. The gateway's
    day files at the two offsets were read as two hosts, and those of the stepped days were moved an hour (reviews: two
    recipients left a realistic seed's list). A log's files one after the other at two offsets are a clock stepped,
    the gateway's or the engine's, which one log cannot tell: nothing moves, and nothing is said."""
    inc = incident(f"engine-stepped-{end}")
    _shift_engine(inc / "engine", 3600.0, "2026-08-27", end)
    _, manifest = _run(inc, tmp_path / "out")
    assert "clock_offsets" not in manifest and "clock_offsets_unread" not in manifest


def test_a_gateway_renamed_at_a_restart_beside_an_engine_step_moves_nothing(incident: Callable[[str], Path],
                                                                            tmp_path: Path) -> None:
    """One gateway whose files carry its pod's name, which changed at a restart (two logs, one after the other), and
    engine logs whose clock stepped an hour at the same restart: the two logs were read an hour apart through the
    engine, and the later one moved (a review). Logs never written at the same time are not read against each other."""
    inc = incident("pod-renamed")
    for path in sorted((inc / "gateway").glob("litellm-callbacks-*")):
        day = path.name.removeprefix("litellm-callbacks-")
        pod = "kqzrt" if day < "2026-08-28" else "mvwpn"
        path.rename(path.with_name(f"litellm-callbacks-{pod}-{day}"))
    _shift_engine(inc / "engine", 3600.0, "2026-08-28")
    _, manifest = _run(inc, tmp_path / "out")
    assert "clock_offsets" not in manifest and "clock_offsets_unread" not in manifest


def test_two_engine_deployments_naming_their_hosts_alike_are_two_sets_of_nodes(incident: Callable[[str], Path],
                                                                               tmp_path: Path) -> None:
    """Two replicas on right clocks, each in front of its own engine deployment; the second deployment's hosts are named
    as the first's (`decode-0`, in another folder) and its clock is ten minutes ahead. Read by the host's name alone, the two
    deployments were one set of nodes, and the second replica was moved (a review: 30 s). A node is its host's name in
    its folder: nothing moves."""
    inc = incident("two-deployments")
    split_replicas(inc, clock_offset=0.0)
    records = [json.loads(line) for path in (inc / "gateway").glob(f"{REPLICA_NAME}-*")
               for line in path.read_text(encoding="utf-8").splitlines()]
    served = {(r.get("standard_logging_object") or r).get("id") for r in records}
    (inc / "engine-b").mkdir()
    for path in sorted((inc / "engine").glob("*.log")):
        mine, theirs = [], []
        for line in path.read_text(encoding="utf-8").splitlines(keepends=True):
            rid = re.search(r"rid[=\"':]+ ?'?\"?(chatcmpl-[0-9a-f]+)", line)
            if rid is None:
                mine.append(line)
                theirs.append(line)
            else:
                (theirs if rid.group(1) in served else mine).append(line)
        path.write_text("".join(mine), encoding="utf-8")
        (inc / "engine-b" / path.name).write_text("".join(theirs), encoding="utf-8")
    _shift_engine(inc / "engine-b", 600.0, "0000")
    case = inc / "case.toml"
    case.write_text(case.read_text(encoding="utf-8") + '\n[[inputs]]\nformat = "sglang"\npath = "engine-b"\n',
                    encoding="utf-8")
    _, manifest = _run(inc, tmp_path / "out")
    assert "clock_offsets" not in manifest


def test_a_replica_for_two_customers_whose_clock_is_off_is_read(incident: Callable[[str], Path], baseline: Path,
                                                                 tmp_path: Path) -> None:
    """A replica serving two customers alone, its clock ten minutes ahead: the same requests' ends seen by the replica
    and by the engine nodes are no coincidence of text, so no number of customers is asked (a dedicated replica is
    common), and the list is the one gateway's (a review: it was left unread, and a customer gained a request)."""
    inc = incident("replica-two-customers")
    calls = Counter(org for path in (inc / "gateway").glob("litellm-callbacks-*")
                    for line in path.read_text(encoding="utf-8").splitlines() if (org := _org(line)) is not None)
    busiest = {org for org, _ in sorted(calls.items(), key=lambda x: (-x[1], x[0]))[:2]}

    def two(payload: dict[str, Any]) -> bool:
        return _org(payload) in busiest

    assert split_replicas(inc, clock_offset=600.0, serves=two) >= 20
    report, manifest = _run(inc, tmp_path / "out")
    _same_list(report, baseline)
    [clock] = manifest["clock_offsets"]
    assert clock["read_from"] == "engine logs" and abs(clock["offset_seconds"] - 600) < 1 and clock["customers"] == 2
    assert "clock_offsets_unread" not in manifest


def _org(record: str | dict[str, Any]) -> str | None:
    """The organisation a callback line or payload names (its metadata may be a JSON string); None for a broken line."""
    if isinstance(record, str):
        try:
            record = json.loads(record)
        except json.JSONDecodeError:
            return None
    if not isinstance(record, dict):
        return None
    payload = record.get("standard_logging_object", record)
    metadata = payload.get("metadata") if isinstance(payload, dict) else None
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    return metadata.get("user_api_key_org_id") if isinstance(metadata, dict) else None


def _node(offset_s: float, n: int = 40, customers: int = 5, files: dict[int, tuple[float, int]] | None = None,
          most_s: float | None = None) -> _OnNode:
    """A log's requests on a node: the node's clock ``offset_s`` later than the log's by their ends, and at most
    ``most_s`` later by their starts (by default a second more: a time cut to the second)."""
    runs = {f: (int(o * 1e6), k, k, customers) for f, (o, k) in (files or {1: (offset_s, n)}).items()}
    most = offset_s + 1 if most_s is None else most_s
    return _OnNode(int(offset_s * 1e6), n, n, customers, True, int(most * 1e6), runs)


def test_engine_edges_read_an_offset_the_nodes_agree_on_whatever_their_own_clocks() -> None:
    """Two nodes whose own clocks differ by an hour: each says the second log reads 600 s later than the first (the
    difference of the logs' offsets against it), so that is the offset read."""
    on_engine = {"a": {"n1": _node(-0.4), "n2": _node(3600 - 0.4)},
                 "b": {"n1": _node(-600.5, files={2: (-600.5, 40)}), "n2": _node(3000.0, files={2: (3000.0, 40)})}}
    read, unread = _engine_edges(on_engine)
    assert not unread
    [edge] = read
    assert (edge.a, edge.b, edge.through) == ("a", "b", "engine") and abs(edge.offset / 1e6 - 600) < 1.5
    assert edge.runs["b"][2][1:3] == (80, 80)  # (the file's requests on both nodes)


def test_engine_edges_leave_unread_an_offset_the_nodes_disagree_on() -> None:
    """Two nodes, one saying the second log reads ten minutes later, the other that the two read alike: no one offset
    holds most of the requests, so none is read; it is kept for the note on clocks not read."""
    on_engine = {"a": {"n1": _node(0.0), "n2": _node(0.0)}, "b": {"n1": _node(-600.0), "n2": _node(0.0)}}
    read, unread = _engine_edges(on_engine)
    assert not read and len(unread) == 1


def test_engine_edges_read_a_lag_at_one_end_as_no_offset() -> None:
    """A replica whose completions come three seconds after the engine ends the requests (a post-call hook, an output
    guardrail), its clock right: by the ends alone it read as three seconds off and its right times were moved (a
    review). Its requests' starts allow the two clocks to be one, so the offset read is none."""
    on_engine = {"a": {"n1": _node(-0.4), "n2": _node(-0.4)},
                 "b": {"n1": _node(-3.4, most_s=0.6), "n2": _node(-3.4, most_s=0.6)}}
    read, unread = _engine_edges(on_engine)
    assert not unread
    [edge] = read
    assert edge.offset == 0
