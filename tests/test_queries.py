"""The query files: every shipped query against its cases (tests/query_cases/<id>.json), the
header checks, and the read-only connection an analyst's own SQL runs on."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from query_cases.build import event, exchange, write_case

from forensics import queries as q
from forensics.case import Case
from forensics.errors import QueryError

CASES_DIR = Path(__file__).parent / "query_cases"
SHIPPED = q.load_queries()


def _case_files() -> list[Path]:
    return sorted(CASES_DIR.glob("*.json"))


def _cases() -> list[Any]:
    out = []
    for path in _case_files():
        spec = json.loads(path.read_text(encoding="utf-8"))
        for i, case in enumerate(spec["cases"]):
            out.append(pytest.param(spec, case, id=f"{spec['query']}[{i}]"))
    return out


def _bind(query: q.Query, values: dict[str, Any]) -> dict[str, Any]:
    """Case parameters as the CLI would pass them: strings through the declared type, lists as lists."""
    bound = {}
    for p in query.params:
        if p.name not in values:
            continue
        v = values[p.name]
        bound[p.name] = v if v is None or isinstance(v, list) else q.convert_param(p.name, str(v), p.type)
    return bound


@pytest.mark.parametrize("views", ["views", "computed_views"])
@pytest.mark.parametrize(("spec", "case"), _cases())
def test_query_case(tmp_path: Path, spec: dict[str, Any], case: dict[str, Any], views: str) -> None:
    """Each case on the analyst's connection (views) and as the scan stage runs it (the helper views
    computed once into tables, ``materialize_views``): the same rows both ways."""
    query = q.find_query(spec["query"], SHIPPED)
    assert query is not None, f"no shipped query {spec['query']}"
    exchanges = [exchange(**row) for row in case.get("exchanges", [])]
    events = [event(row.pop("node"), row.pop("event"), **row) for row in map(dict, case.get("engine_events", []))]
    root = write_case(tmp_path / "case", exchanges, events)
    params = _bind(query, spec.get("params", {}) | case.get("params", {}))
    if views == "views":
        con = q.read_only_connection(root, SHIPPED)
    else:
        con = Case(root).connect(memory_cap=True)
        con.execute("SET TimeZone = 'UTC'")  # as the scan stage does
        q.install_views(con, SHIPPED)
        q.materialize_views(con, SHIPPED)
    try:
        if query.kind == "view":
            table = q.run_sql(con, f"SELECT * FROM {query.id}", {})
        else:
            table = q.run_query(con, query, params)
    finally:
        con.close()
    got = [[q.plain(row[c]) for c in case["columns"]] for row in table.to_pylist()]
    expected = case["rows"]
    if case.get("sort"):  # a view has no order of its own
        got, expected = sorted(got, key=json.dumps), sorted(expected, key=json.dumps)
    assert got == expected, case["name"]


def test_every_query_has_a_valid_header_and_cases() -> None:
    ids = {x.id for x in SHIPPED}
    with_cases = {json.loads(p.read_text(encoding="utf-8"))["query"]: p for p in _case_files()}
    assert ids, "no query files found"
    assert sorted(ids - set(with_cases)) == [], "queries without test cases"
    assert sorted(set(with_cases) - ids) == [], "test cases for queries that do not exist"
    for qid, path in with_cases.items():
        assert path.stem == qid
        assert json.loads(path.read_text(encoding="utf-8"))["cases"], f"{path.name} has no case"
    for x in SHIPPED:
        assert x.title and x.returns and x.kind in q.KINDS
        assert x.path.stem == x.id


def test_the_scan_area_has_the_queries_the_stage_needs() -> None:
    kinds = {x.id: x.kind for x in SHIPPED if x.area == "scan"}
    for qid in ("above_ceiling", "engine_signature", "borderline"):
        assert kinds[qid] == "suspect"
    for qid in ("context_corruption", "transfer_failures", "decode_without_prefill"):
        assert kinds[qid] == "anomaly"
    assert kinds["exposure_band"] == "summary"


# ---------------------------------------------------------------------------------------------
# header checks


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / "scan" / f"{name}.sql"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


GOOD = """-- id: good
-- kind: anomaly
-- title: a good query
-- returns: one row per exchange above $n (a dollar in a comment is no parameter)
-- param: n BIGINT the limit
SELECT request_id, '$not_a_param' AS s FROM exchanges WHERE prompt_tokens > $n
"""


def test_a_good_header_parses(tmp_path: Path) -> None:
    query = q.parse_query(_write(tmp_path, "good", GOOD))
    assert (query.id, query.kind, query.param_names, query.area) == ("good", "anomaly", ("n",), "scan")
    assert len(query.sha256) == 64


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("noid", GOOD.replace("-- id: good\n", ""), "no 'id' line"),
        ("other", GOOD, "differs from the file name"),
        ("good", GOOD.replace("-- title: a good query\n", ""), "no 'title' line"),
        ("good", GOOD.replace("kind: anomaly", "kind: magic"), "kind 'magic'"),
        ("good", GOOD.replace("BIGINT", "INTEGER"), "unknown type"),
        ("good", GOOD.replace("-- param: n BIGINT the limit\n", ""), "declares no parameters"),
        ("good", GOOD.replace("-- param: n BIGINT the limit\n", "-- params: none\n"), "does not declare"),
        ("good", GOOD.replace("-- param: n BIGINT the limit\n", "-- param: n BIGINT x\n-- param: m BIGINT y\n"),
         "never uses"),
        ("good", GOOD.replace("kind: anomaly", "kind: view"), "view cannot take parameters"),
        ("good", GOOD.split("SELECT")[0], "no SQL"),
    ],
)
def test_bad_headers_are_refused_with_the_file(tmp_path: Path, name: str, text: str, message: str) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(QueryError) as info:
        q.parse_query(path)
    assert message in str(info.value)
    assert info.value.file == str(path)


def test_duplicate_ids_across_areas_are_refused(tmp_path: Path) -> None:
    _write(tmp_path, "good", GOOD)
    other = tmp_path / "match" / "good.sql"
    other.parent.mkdir()
    other.write_text(GOOD, encoding="utf-8")
    with pytest.raises(QueryError, match="used twice"):
        q.load_queries(tmp_path)


# ---------------------------------------------------------------------------------------------
# parameters and the read-only connection


def test_params_are_bound_never_formatted(tmp_path: Path) -> None:
    root = write_case(tmp_path / "case", [exchange("a", tenant_id="x'; DROP TABLE exchanges; --")])
    con = q.read_only_connection(root, SHIPPED)
    try:
        hostile = "x'; DROP TABLE exchanges; --"
        rows = q.run_sql(con, "SELECT request_id FROM exchanges WHERE tenant_id = $t", {"t": hostile}).to_pylist()
        assert rows == [{"request_id": "a"}]
        assert q.run_sql(con, "SELECT count(*) AS n FROM exchanges", {}).to_pylist() == [{"n": 1}]
    finally:
        con.close()


@pytest.mark.parametrize(
    ("text", "type_", "value"),
    [
        ("681280", "BIGINT", 681280),
        ("glm-5.3, glm-5.3-fast", "VARCHAR[]", ["glm-5.3", "glm-5.3-fast"]),
        ("true", "BOOLEAN", True),
        ("42", None, 42),
        ("2026-08-27", None, "2026-08-27"),
    ],
)
def test_param_conversion(text: str, type_: str | None, value: Any) -> None:
    assert q.convert_param("p", text, type_) == value


@pytest.mark.parametrize(("text", "type_"), [("12x", "BIGINT"), ("2026-08-27T00:00:00", "TIMESTAMPTZ"), ("maybe", "BOOLEAN")])
def test_bad_param_values_are_query_errors(text: str, type_: str) -> None:
    with pytest.raises(QueryError, match="not a valid"):
        q.convert_param("p", text, type_)


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM exchanges",
        "DROP VIEW exchanges",
        "COPY exchanges TO 'out.csv'",
        "CREATE TABLE t AS SELECT 1",
        "SELECT 1; SELECT 2",
        "ATTACH 'x.duckdb'",
        "SET enable_external_access = true",
    ],
)
def test_only_one_select_is_accepted(sql: str) -> None:
    with pytest.raises(QueryError):
        q.check_read_only_sql(sql)


def test_the_analyst_connection_cannot_touch_files(tmp_path: Path) -> None:
    root = write_case(tmp_path / "case", [exchange("a")])
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    con = q.read_only_connection(root, SHIPPED)
    try:
        target = str(root / "exchanges.parquet").replace("'", "''")
        for sql in (f"COPY (SELECT 1 AS x) TO '{target}'", f"SELECT * FROM read_parquet('{target}')",
                    "SET enable_external_access = true"):
            with pytest.raises(Exception):  # noqa: B017 - DuckDB raises its own permission/config errors
                con.execute(sql)
        # ...while the case's own views still read.
        assert q.run_sql(con, "SELECT count(*) AS n FROM exchanges", {}).to_pylist() == [{"n": 1}]
    finally:
        con.close()
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before


def test_query_case_runs_a_shipped_query_with_defaults_and_overrides(tmp_path: Path) -> None:
    root = write_case(tmp_path / "case", [exchange("big", prompt_tokens=700000), exchange("mid", prompt_tokens=600000)])
    defaults = {"models": ["glm-5.3"], "window_start": q.parse_utc("2026-08-27T00:00:00Z", "w"),
                "window_end": q.parse_utc("2026-09-09T00:00:00Z", "w"), "ceiling": 681280}
    rows, query = q.query_case(root, "above_ceiling", {}, defaults)
    assert query is not None and rows.column("request_id").to_pylist() == ["big"]
    rows, _ = q.query_case(root, "above_ceiling", {"ceiling": "500000"}, defaults)
    assert rows.column("request_id").to_pylist() == ["big", "mid"]
    with pytest.raises(QueryError, match="needs parameter ceiling"):
        q.query_case(root, "above_ceiling", {}, {k: v for k, v in defaults.items() if k != "ceiling"})
    with pytest.raises(QueryError, match="takes no parameter"):
        q.query_case(root, "above_ceiling", {"celing": "1"}, defaults)
    with pytest.raises(QueryError, match="no shipped query"):
        q.query_case(root, "above_celing", {}, defaults)
    sql_file = tmp_path / "mine.sql"
    sql_file.write_text("-- my own\nSELECT request_id FROM exchanges WHERE prompt_tokens >= $n ORDER BY 1\n", encoding="utf-8")
    rows, query = q.query_case(root, str(sql_file), {"n": "650000"})
    assert query is None and rows.column("request_id").to_pylist() == ["big"]


def test_csv_text_is_rfc4180_with_iso_times_and_neutralised_text(tmp_path: Path) -> None:
    import pyarrow as pa

    from forensics.config import parse_utc

    table = pa.table({"id": ["=cmd()", 'a "b", c'], "t": [parse_utc("2026-08-29T10:00:00Z", "t"), None],
                      "n": [-1, 2], "ok": [True, None]})
    text = q.csv_text(table)
    assert text == 'id,t,n,ok\r\n\'=cmd(),2026-08-29T10:00:00Z,-1,true\r\n"a ""b"", c",,2,\r\n'


def _capped(tmp_path: Path, name: str, sql: str, title: str) -> tuple[Any, q.Query, Path]:
    """A DuckDB connection capped at 2 MB and a one-query file ``name`` holding ``sql``."""
    import duckdb

    path = tmp_path / f"{name}.sql"
    path.write_text(f"-- id: {name}\n-- kind: anomaly\n-- title: {title}\n-- returns: one row\n-- params: none\n{sql}\n",
                    encoding="utf-8")
    con = duckdb.connect(":memory:")
    con.execute("SET memory_limit = '2MB'")
    return con, q.parse_query(path, "scan"), path


#: An aggregate DuckDB cannot spill: over a 2 MB cap it fails with "Out of Memory Error".
WIDE = "SELECT length(string_agg(i::VARCHAR, ',')) AS n FROM range(3000000) t(i)"


def test_a_query_that_cannot_keep_under_the_memory_cap_runs_again_without_it(tmp_path: Path) -> None:
    # The scan caps DuckDB's memory so its joins spill instead of growing with the incident; an
    # operator that cannot spill (one big string_agg here) must still give its answer, not fail.
    con, query, _ = _capped(tmp_path, "wide", WIDE, "one long aggregate")
    table = q.run_query(con, query, {})
    assert table.column("n").to_pylist() == [len(",".join(str(i) for i in range(3_000_000)))]


def test_a_query_that_fails_for_another_reason_is_still_an_error_naming_the_file(tmp_path: Path) -> None:
    con, query, path = _capped(tmp_path, "bad", "SELECT 'a'::INTEGER AS n", "casts text to a number")
    with pytest.raises(QueryError, match="query bad failed: Conversion Error") as err:
        q.run_query(con, query, {})
    assert str(path) in str(err.value)


def test_the_cap_is_back_for_the_next_query_after_one_ran_without_it(tmp_path: Path) -> None:
    con, query, _ = _capped(tmp_path, "wide", WIDE, "one long aggregate")
    q.run_query(con, query, {})
    number, unit = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0].split()
    assert unit == "MiB" and 1.5 < float(number) <= 2.0  # the cap again (as DuckDB reads it back), not its default


def test_out_of_memory_on_a_locked_connection_says_so_not_that_the_setting_is_locked(tmp_path: Path) -> None:
    # `forensics query` runs an analyst's SQL on a connection whose settings are locked: the cap
    # cannot be lifted there, and the error to tell is the one the query met.
    con, query, _ = _capped(tmp_path, "wide", WIDE, "one long aggregate")
    con.execute("SET lock_configuration = true")
    with pytest.raises(QueryError, match="query wide failed: Out of Memory Error") as err:
        q.run_query(con, query, {})
    assert "Cannot change configuration" not in str(err.value)


def test_computed_views_are_computed_once_and_read_from_then_on(tmp_path: Path) -> None:
    root = write_case(tmp_path / "case", [exchange("a"), exchange("gw-b", rid="eng-b")], [])
    con = Case(root).connect(memory_cap=True)
    try:
        q.install_views(con, SHIPPED)
        q.materialize_views(con, SHIPPED)
        # The scan's tables do not change while it runs; were the views still queries, they would read the
        # emptied exchanges here.
        con.execute("CREATE TEMP TABLE no_exchanges AS SELECT * FROM exchanges LIMIT 0")
        con.execute("CREATE OR REPLACE VIEW exchanges AS SELECT * FROM no_exchanges")
        keys = sorted(con.execute("SELECT request_id, engine_rid FROM exchange_keys").fetchall())
        owners = sorted(con.execute("SELECT engine_rid, request_id FROM rid_owners").fetchall())
    finally:
        con.close()
    assert keys == [("a", "a"), ("gw-b", "eng-b")]
    assert owners == [("a", "a"), ("eng-b", "gw-b")]


def test_a_view_that_cannot_be_computed_is_an_error_naming_its_file(tmp_path: Path) -> None:
    root = write_case(tmp_path / "case", [exchange("a")], [])
    (tmp_path / "queries" / "views").mkdir(parents=True)
    (tmp_path / "queries" / "views" / "broken.sql").write_text(
        "-- id: broken\n-- title: request ids as numbers\n-- kind: view\n-- returns: n\n-- params: none\n"
        "SELECT CAST(request_id AS INTEGER) AS n FROM exchanges\n", encoding="utf-8")  # fails when run, not when created
    own = q.load_queries(tmp_path / "queries")
    con = Case(root).connect(memory_cap=True)
    try:
        q.install_views(con, own)
        with pytest.raises(QueryError, match="view broken could not be computed") as err:
            q.materialize_views(con, own)
    finally:
        con.close()
    assert err.value.file is not None and str(err.value.file).endswith("broken.sql")
