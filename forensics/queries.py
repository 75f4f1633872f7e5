"""The query files: list them, check their headers, run them with named ``$parameters``.

A query is a ``.sql`` file under ``queries/<area>/`` holding one DuckDB statement over the case's
views (``exchanges``, ``engine_events``, ... see forensics.case) and the helper views of
``queries/views/``. It opens with a comment header::

    -- id: above_ceiling                  (the file's name without .sql)
    -- kind: suspect                      (view | suspect | anomaly | summary)
    -- title: one line
    -- returns: what one returned row means
    -- param: ceiling BIGINT the real pool ceiling   (one line per parameter), or
    -- params: none

The parameters a header declares must be exactly the ``$names`` its SQL uses, so a query can
neither silently ignore a value nor depend on one nobody passes. User values never enter SQL
text: they are bound as DuckDB named parameters.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import pyarrow as pa
import pyarrow.dataset as pads

from forensics import csvfile, schema
from forensics.case import Case
from forensics.config import iso, parse_utc
from forensics.errors import ConfigError, QueryError

T = TypeVar("T")

KINDS = ("view", "suspect", "anomaly", "summary")
#: Parameter types a header may declare, and how a ``--param k=v`` string becomes a value.
PARAM_TYPES = ("BIGINT", "DOUBLE", "VARCHAR", "VARCHAR[]", "TIMESTAMPTZ", "BOOLEAN")
HEADER_KEYS = ("id", "kind", "title", "returns", "param", "params")

_HEADER_LINE = re.compile(r"^--\s*(?P<key>[a-z]+)\s*:\s*(?P<value>.*)$")
_PARAM = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s+(?P<type>[A-Z]+(?:\[\])?)\s*(?P<doc>.*)$")
# Strings, quoted identifiers and comments are removed before looking for $names, so a `$` in
# a literal is not mistaken for a parameter.
_STRIP = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/", re.S)
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclasses.dataclass(frozen=True)
class Param:
    """One declared ``$parameter``."""

    name: str
    type: str
    doc: str


@dataclasses.dataclass(frozen=True)
class Query:
    """A checked query file."""

    id: str
    kind: str
    title: str
    returns: str
    params: tuple[Param, ...]
    area: str
    path: Path
    sql: str
    sha256: str

    @property
    def param_names(self) -> tuple[str, ...]:
        """Names of the declared parameters, in header order."""
        return tuple(p.name for p in self.params)

    def describe(self) -> dict[str, Any]:
        """JSON-ready description (for listings and the stage record)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "area": self.area,
            "title": self.title,
            "returns": self.returns,
            "params": {p.name: p.type for p in self.params},
            "file": f"{self.area}/{self.path.name}",
            "sha256": self.sha256,
        }


def query_root() -> Path:
    """The folder of shipped queries: ``queries/`` in a checkout, ``forensics/_queries`` installed."""
    here = Path(__file__).resolve().parent
    for candidate in (here.parent / "queries", here / "_queries"):
        if candidate.is_dir():
            return candidate
    raise QueryError("the query files are missing", file=here.parent / "queries", fix="reinstall forensics")


def parse_query(path: Path, area: str | None = None) -> Query:
    """Read one query file and check its header against its SQL."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        text = raw.decode("utf-8")
    except OSError as exc:
        raise QueryError(f"cannot read the query file ({exc.strerror})", file=path) from None
    except UnicodeDecodeError:
        raise QueryError("query file is not UTF-8", file=path, fix="save it as UTF-8") from None
    fields: dict[str, str] = {}
    params: list[Param] = []
    params_none = False
    lines = text.splitlines()
    body_start = len(lines)
    for n, line in enumerate(lines, start=1):
        stripped = line.strip()
        if not stripped.startswith("--"):
            body_start = n - 1
            break
        m = _HEADER_LINE.match(stripped)
        if not m or m.group("key") not in HEADER_KEYS:
            continue  # a free comment in the header
        key, value = m.group("key"), m.group("value").strip()
        if key == "param":
            pm = _PARAM.match(value)
            if not pm:
                raise QueryError(f"bad parameter line {value!r}", file=path, line=n,
                                 fix="write it as: -- param: name TYPE what it means")
            if pm.group("type") not in PARAM_TYPES:
                raise QueryError(f"parameter {pm.group('name')} has unknown type {pm.group('type')}", file=path, line=n,
                                 fix=f"use one of {', '.join(PARAM_TYPES)}")
            if any(p.name == pm.group("name") for p in params):
                raise QueryError(f"parameter {pm.group('name')} is declared twice", file=path, line=n)
            params.append(Param(pm.group("name"), pm.group("type"), pm.group("doc").strip()))
        elif key == "params":
            if value != "none":
                raise QueryError("'params:' only takes 'none'", file=path, line=n,
                                 fix="declare each parameter on its own '-- param: name TYPE doc' line")
            params_none = True
        else:
            if key in fields:
                raise QueryError(f"header key {key!r} appears twice", file=path, line=n)
            fields[key] = value
    for key in ("id", "kind", "title", "returns"):
        if not fields.get(key):
            raise QueryError(f"the header has no {key!r} line", file=path, line=1,
                             fix=f"start the file with comment lines such as '-- {key}: ...' (see queries/README.md)")
    qid = fields["id"]
    if qid != path.stem:
        raise QueryError(f"header id {qid!r} differs from the file name {path.stem!r}", file=path, line=1,
                         fix="the id is the file name without .sql")
    if fields["kind"] not in KINDS:
        raise QueryError(f"kind {fields['kind']!r} is not one of {', '.join(KINDS)}", file=path)
    if params_none and params:
        raise QueryError("the header says 'params: none' and declares parameters", file=path)
    if not params_none and not params:
        raise QueryError("the header declares no parameters", file=path, fix="add '-- params: none' when it takes none")
    sql = "\n".join(lines[body_start:]).strip().rstrip(";").strip()
    if not sql:
        raise QueryError("the query file holds no SQL after its header", file=path)
    used = set(_DOLLAR.findall(_STRIP.sub(" ", sql)))
    declared = {p.name for p in params}
    if used - declared:
        raise QueryError(f"the SQL uses ${sorted(used - declared)[0]} which the header does not declare", file=path,
                         fix="add a '-- param:' line for it")
    if declared - used:
        raise QueryError(f"the header declares ${sorted(declared - used)[0]} which the SQL never uses", file=path,
                         fix="remove the '-- param:' line or use the parameter")
    if fields["kind"] == "view" and params:
        raise QueryError("a view cannot take parameters", file=path, fix="make it a query of another kind")
    return Query(
        id=qid, kind=fields["kind"], title=fields["title"], returns=fields["returns"], params=tuple(params),
        area=area or path.parent.name, path=path, sql=sql, sha256=hashlib.sha256(raw).hexdigest(),
    )


def load_queries(root: Path | None = None) -> list[Query]:
    """Every query file under ``root`` (default: the shipped queries), checked, sorted by area and id."""
    root = Path(root) if root is not None else query_root()
    queries = [parse_query(p, p.parent.relative_to(root).as_posix()) for p in sorted(root.rglob("*.sql"))]
    seen: dict[str, Path] = {}
    for q in queries:
        if q.id in seen:
            raise QueryError(f"query id {q.id!r} is used twice ({seen[q.id]} and {q.path})", file=q.path,
                             fix="ids are unique across areas")
        seen[q.id] = q.path
    return sorted(queries, key=lambda q: (q.area, q.id))


def find_query(name: str, queries: list[Query] | None = None) -> Query | None:
    """The shipped query with id ``name`` (or ``area/name``), or None."""
    for q in queries if queries is not None else load_queries():
        if name in (q.id, f"{q.area}/{q.id}", f"{q.area}/{q.id}.sql"):
            return q
    return None


def install_views(con: duckdb.DuckDBPyConnection, queries: list[Query]) -> None:
    """Create the helper views (``kind: view``) on a connection that already has the case views."""
    for q in queries:
        if q.kind == "view":
            try:
                con.execute(f'CREATE OR REPLACE VIEW "{q.id}" AS {q.sql}')  # q.id is a checked file stem
            except duckdb.Error as exc:
                raise QueryError(f"view {q.id} does not compile: {_first_line(exc)}", file=q.path) from None


def _ident(name: str) -> str:
    """``name`` as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def materialize_views(con: duckdb.DuckDBPyConnection, queries: list[Query]) -> None:
    """Compute every helper view (``kind: view``, installed by :func:`install_views`) once into a
    temporary table that the view then reads, for a connection that runs many queries over tables
    that do not change while it is open (the scan stage).

    A view is a query, run again by every query that reads it: each of the scan's engine-log queries
    rebuilt ``exchange_keys`` and its owners from the whole case, 1.5-3 s apiece on the 4 GB benchmark
    incident; with the views computed once the stage went from 13.7 to 4.6 s there, with the same
    rows. Views are computed in the order given (the shipped ones by id); each is right whether the
    views it reads were computed before it or not.
    """
    for q in queries:
        if q.kind != "view":
            continue
        # Named with a "/", which no file name (a view's id) holds: no view or query is shadowed by it.
        table = "temp." + _ident(f"{q.id}/computed")
        compute = f"CREATE TEMP TABLE {table} AS SELECT * FROM {_ident(q.id)}"
        try:
            with_memory_to_spare(con, functools.partial(con.execute, compute))
            con.execute(f"CREATE OR REPLACE VIEW {_ident(q.id)} AS SELECT * FROM {table}")
        except duckdb.Error as exc:
            raise QueryError(f"view {q.id} could not be computed: {_first_line(exc)}", file=q.path) from None


def run_query(con: duckdb.DuckDBPyConnection, query: Query, params: Mapping[str, Any]) -> pa.Table:
    """Run a query with its declared parameters bound by name; returns an Arrow table."""
    missing = [p.name for p in query.params if p.name not in params]
    if missing:
        raise QueryError(f"query {query.id} needs parameter {missing[0]}", file=query.path,
                         fix=f"pass --param {missing[0]}=... ({_param(query, missing[0]).type})")
    bound = {p.name: params[p.name] for p in query.params}
    try:
        return with_memory_to_spare(con, lambda: con.sql(query.sql, params=bound or None).to_arrow_table())
    except duckdb.Error as exc:
        raise QueryError(f"query {query.id} failed: {_first_line(exc)}", file=query.path) from None


def with_memory_to_spare(con: duckdb.DuckDBPyConnection, run: Callable[[], T]) -> T:
    """``run()`` (a query on ``con``); if DuckDB runs out of memory under the connection's cap (an
    operator it cannot spill), ``run()`` once more with DuckDB's own limit, then the cap back.

    The cap bounds memory, never answers. Where the connection's settings are locked (the
    read-only connection of ``forensics query``) the cap stays and the out-of-memory error is raised.
    """
    try:
        return run()
    except duckdb.OutOfMemoryException:
        try:
            cap = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
            con.execute("RESET memory_limit")
        except duckdb.Error:
            cap = None
        if cap is None:
            raise
    try:
        return run()
    finally:
        con.execute(f"SET memory_limit = '{cap}'")  # DuckDB's own text of the cap, read back above


def convert_param(name: str, text: str, type_: str | None) -> Any:
    """Turn a ``--param name=text`` string into a value of the declared type (guessed when undeclared)."""
    try:
        if type_ == "BIGINT":
            return int(text)
        if type_ == "DOUBLE":
            return float(text)
        if type_ == "BOOLEAN":
            low = text.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(text)
            return low in ("true", "1", "yes")
        if type_ == "VARCHAR[]":
            return [item.strip() for item in text.split(",") if item.strip()]
        if type_ == "TIMESTAMPTZ":
            return parse_utc(text, name)
        if type_ == "VARCHAR":
            return text
    except (ValueError, ConfigError):
        raise QueryError(f"--param {name}={text!r} is not a valid {type_}", fix=_example(type_)) from None
    # Undeclared (the analyst's own SQL): a whole number stays a number, anything else a string
    # (cast it in SQL, e.g. $t::TIMESTAMPTZ).
    if re.fullmatch(r"-?\d+", text.strip()):
        return int(text)
    return text


def parse_param_options(items: list[str]) -> dict[str, str]:
    """``["k=v", ...]`` into a dict; a malformed item is a QueryError."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()):
            raise QueryError(f"--param {item!r} is not name=value", fix="write it like --param ceiling=681280")
        out[key.strip()] = value
    return out


def _example(type_: str | None) -> str:
    return {
        "BIGINT": "a whole number, e.g. 681280",
        "DOUBLE": "a number, e.g. 0.5",
        "BOOLEAN": "true or false",
        "VARCHAR[]": "a comma-separated list, e.g. glm-5.3,glm-5.3-fast",
        "TIMESTAMPTZ": "an ISO 8601 time with a zone, e.g. 2026-08-27T00:00:00Z",
    }.get(type_ or "", "a value")


def _param(query: Query, name: str) -> Param:
    return next(p for p in query.params if p.name == name)


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


# ------------------------------------------------------------------------------------------
# Read-only access for the analyst's own SQL
# ------------------------------------------------------------------------------------------


def read_only_connection(case_dir: Path, queries: list[Query] | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection over the case's tables that cannot touch any file.

    The tables are handed to DuckDB as Arrow datasets (read by Arrow, not by DuckDB), then DuckDB's
    file system access is switched off and the setting locked: ``COPY ... TO``, ``ATTACH``,
    ``read_csv('/etc/...')`` and ``SET`` all fail. Whatever an analyst's SQL does, it can only
    change this in-memory connection, never the case.
    """
    case = Case(case_dir)
    if not case.root.is_dir():
        raise QueryError("case folder not found", file=case.root, fix="give the folder that `forensics ingest --case` wrote")
    if not case.table_path("exchanges").exists():
        # Read as a case, a report folder (or any other) answered every query with no rows: "nothing quarantined".
        inner = case.root / "case"
        raise QueryError("not a case folder: it holds no exchanges table", file=case.root,
                         fix=f"give the report's case folder ({inner})" if Case(inner).table_path("exchanges").exists()
                         else "give the folder that `forensics ingest --case` wrote")
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    for name, table_schema in schema.TABLES.items():
        path = case.table_path(name)
        source: Any = pads.dataset(path, format="parquet") if path.exists() else table_schema.empty_table()
        con.register(f"_src_{name}", source)
        con.execute(f"CREATE VIEW {name} AS SELECT * FROM _src_{name}")  # name is a schema table name
    install_views(con, queries if queries is not None else load_queries())
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def check_read_only_sql(sql: str) -> str:
    """The SQL if it is one SELECT (or WITH ... SELECT) statement; a QueryError otherwise."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"the SQL does not parse: {_first_line(exc)}", fix="check the SQL syntax") from None
    if len(statements) != 1:
        raise QueryError(f"give exactly one SQL statement (got {len(statements)})", fix="run statements one at a time")
    if statements[0].type != duckdb.StatementType.SELECT:
        raise QueryError(f"only SELECT queries are allowed here (got {statements[0].type.name})",
                         fix="`forensics query` is read-only; it never changes the case")
    return sql.strip().rstrip(";")


def run_sql(con: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any]) -> pa.Table:
    """Run the analyst's own SELECT with named parameters (only those the SQL uses are bound)."""
    sql = check_read_only_sql(sql)
    used = set(_DOLLAR.findall(_STRIP.sub(" ", sql)))
    missing = sorted(used - set(params))
    if missing:
        raise QueryError(f"the SQL uses ${missing[0]} but no value was given", fix=f"pass --param {missing[0]}=...")
    bound = {k: v for k, v in params.items() if k in used}
    try:
        return con.sql(sql, params=bound or None).to_arrow_table()
    except duckdb.Error as exc:
        raise QueryError(f"the query failed: {_first_line(exc)}") from None


# ------------------------------------------------------------------------------------------
# Rendering values the same way in CSV, JSON and tables
# ------------------------------------------------------------------------------------------


def plain(value: Any) -> Any:
    """A JSON-ready form of a DuckDB/Arrow value: times as UTC ISO 8601 with Z, lists kept."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return iso(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    return value


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    """The table's rows as JSON-ready dicts."""
    return [{k: plain(v) for k, v in row.items()} for row in table.to_pylist()]


def csv_text(table: pa.Table, columns: list[str] | None = None) -> str:
    """RFC 4180 CSV (CRLF line ends, a header row) of the table's columns."""
    columns = columns or table.column_names
    return csvfile.csv_text(columns, ([plain(row[c]) for c in columns] for row in table.select(columns).to_pylist()))


def query_case(
    case_dir: Path, name_or_sql: str, params: Mapping[str, str], defaults: Mapping[str, Any] | None = None
) -> tuple[pa.Table, Query | None]:
    """Run a shipped query (by id) or the analyst's own SELECT (text, or a ``.sql`` file) read-only.

    ``params`` are ``--param`` strings, converted to the types a shipped query declares;
    ``defaults`` (the case's resolved configuration) fill a shipped query's parameters not given.
    Returns the rows and the shipped query that produced them (None for the analyst's SQL).
    """
    shipped = load_queries()
    query = find_query(name_or_sql, shipped)
    con = read_only_connection(case_dir, shipped)
    try:
        if query is not None:
            if query.kind == "view":
                return run_sql(con, f'SELECT * FROM "{query.id}"', {}), query
            unknown = sorted(set(params) - set(query.param_names))
            if unknown:
                raise QueryError(f"query {query.id} takes no parameter {unknown[0]}", file=query.path,
                                 fix=f"its parameters: {', '.join(query.param_names) or 'none'}")
            values = {k: v for k, v in (defaults or {}).items() if k in query.param_names}
            for p in query.params:
                if p.name in params:
                    values[p.name] = convert_param(p.name, params[p.name], p.type)
            return run_query(con, query, values), query
        sql = name_or_sql
        if name_or_sql.strip().endswith(".sql") and "\n" not in name_or_sql:
            path = Path(name_or_sql.strip())
            if not path.is_file():
                raise QueryError(f"no shipped query named {path.stem!r} and no such file", file=path,
                                 fix="`forensics query --list` shows the shipped queries")
            try:
                sql = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise QueryError(f"cannot read the SQL file ({exc})", file=path) from None
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_/]*", name_or_sql.strip()):
            raise QueryError(f"no shipped query named {name_or_sql!r}",
                             fix="`forensics query --list` shows the shipped queries; or give SQL text")
        values = {k: convert_param(k, v, None) for k, v in params.items()}
        return run_sql(con, sql, values), None
    finally:
        con.close()
