"""Plain output stays plain: values from logs and file names are never read as rich markup or emoji
codes, in --json, CSV, tables or help (issue 11, item 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_run import _row

from forensics.cli import main

TENANT = ":x: [b]acme[/b] [red]"
FILE = ":x:[b]f[i].jsonl"  # no "/" in a file name: an opening tag is enough to be eaten


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


@pytest.fixture
def case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    # Relative, short paths so a table never has to fold the file name.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / FILE).write_text(
        _row("r-1", TENANT, "2026-08-28T09:00:00Z", "hello there", "general kenobi", 3) + "\n", encoding="utf-8")
    code, _, _ = _run(["ingest", "logs", "--case", "case", "-q"], capsys)
    assert code == 0
    return Path("case")


def test_ingest_json_and_table_show_the_file_name_literally(case: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["ingest", "logs", "--case", "case2", "--json", "-q"], capsys)
    assert code == 0
    data = json.loads(out)  # nothing but the JSON document on stdout
    assert [Path(f["path"]).name for f in data["files"]] == [FILE]
    assert FILE in out and "\u274c" not in out
    code, out, _ = _run(["ingest", "logs", "--case", "case3"], capsys)
    assert FILE in out and "\u274c" not in out


def test_query_json_csv_and_table_show_the_tenant_literally(case: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sql = "SELECT tenant_id, source_file FROM exchanges"
    for fmt in ("json", "csv", "table"):
        code, out, _ = _run(["query", "--case", str(case), "--format", fmt, sql], capsys)
        assert code == 0
        assert TENANT in out, (fmt, out)
        assert FILE in out, (fmt, out)
        assert "\u274c" not in out
    code, out, _ = _run(["query", "--case", str(case), "--format", "json", sql], capsys)
    assert json.loads(out)[0]["tenant_id"] == TENANT


def test_a_column_name_with_markup_stays_literal(case: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["query", "--case", str(case), 'SELECT 1 AS "[b]n[/b] :x:"'], capsys)
    assert code == 0 and "[b]n[/b] :x:" in out


def test_an_error_naming_a_file_keeps_its_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["run", str(tmp_path / ":x:[b]case[/b].toml")], capsys)
    assert code == 2 and ":x:[b]case[/b].toml" in err


def test_help_keeps_literal_brackets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["match", "--help"], capsys)
    assert code == 0
    assert "Case file (TOML) for [match]" in " ".join(out.split())


@pytest.mark.parametrize(("value", "shown"), [
    (True, "true"), (False, "false"), (0, "0"), (-3, "-3"), (2.5, "2.5"), (1e-05, "1e-05"), (None, ""),
    ("=1+1", "'=1+1"), ("a\nb", "a\\nb"), ([1, "x"], "1;x"),
])
def test_a_csv_cell_shows_each_kind_of_value_as_before(value: object, shown: str) -> None:
    # Numbers take a short path now (most cells of the evidence files); a boolean, a subclass of int,
    # must still read true/false, and text keeps its formula guard and escapes.
    from forensics import csvfile

    assert csvfile.cell(value) == shown
