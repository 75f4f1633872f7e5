"""``forensics run``: finding the case file, clear errors, and the whole pipeline end to end."""

from __future__ import annotations

import csv
import datetime as dt
import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from forensics import api
from forensics.cli import main
from forensics.config import load_case_file
from forensics.errors import CaseError, ConfigError
from forensics.run import find_case_file

CASE_TOML = """name = "e2e"
model = "glm-5.3"
window_start = "2026-08-27T00:00:00Z"
window_end = "2026-09-09T00:00:00Z"
real_ceiling_tokens = 2000
advertised_window_tokens = 8192

[[inputs]]
format = "litellm"
path = "gateway"
"""

SECRET = ("Project Nightjar acquisition terms: the buyer pays forty one million euros in three tranches, "
          "escrow held by Banque Lumiere, closing on the ninth of September, deploy key AKIAZ7QW3ERT5YUI8OPL.")


def _row(rid: str, tenant: str, t: str, prompt: str, answer: str, prompt_tokens: int) -> str:
    return json.dumps({
        "request_id": rid, "call_type": "acompletion", "api_key": "k-" + tenant, "startTime": t, "endTime": t,
        "model": "openai/glm-5.3", "model_group": "glm-5.3", "organization_id": tenant, "team_id": "",
        "end_user": "", "status": "success", "messages": {}, "prompt_tokens": prompt_tokens,
        "completion_tokens": 50, "total_tokens": prompt_tokens + 50,
        "proxy_server_request": {"model": "glm-5.3", "messages": [{"role": "user", "content": prompt}]},
        "response": {"id": rid, "object": "chat.completion", "model": "glm-5.3",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]},
        "metadata": {},
    })


def write_logs(root: Path, leak: bool = True, oversize: bool = True) -> Path:
    (root / "gateway").mkdir(parents=True)
    filler = " ".join(f"row {i} of the shipping ledger for the northern depot" for i in range(900 if oversize else 5))
    rows = [
        _row("r-1", "acme", "2026-08-28T09:00:00Z", "Please review: " + SECRET, "Reviewed, looks fine.", 60),
        _row("r-2", "globex", "2026-08-28T10:00:00Z", "Short question about invoices?", "Here is the answer.", 8),
        # An over-ceiling prompt with the placeholder's impossible count; its answer carries acme's text.
        _row("r-3", "globex", "2026-08-28T11:00:00Z", filler,
             ("Summary: " + SECRET) if leak else "A short summary of the ledger.", 1),
    ]
    (root / "gateway" / "spend.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "case.toml").write_text(CASE_TOML, encoding="utf-8")
    return root


def test_find_case_file(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text("x")
    assert find_case_file(tmp_path) == tmp_path / "a.toml"
    assert find_case_file(tmp_path / "a.toml") == tmp_path / "a.toml"
    (tmp_path / "b.toml").write_text("x")
    with pytest.raises(ConfigError, match="2 case files"):
        find_case_file(tmp_path)
    (tmp_path / "case.toml").write_text("x")
    assert find_case_file(tmp_path) == tmp_path / "case.toml"
    with pytest.raises(ConfigError, match="no such"):
        find_case_file(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no case file"):
        find_case_file(empty)


def test_run_with_a_missing_input_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "case.toml").write_text(CASE_TOML)
    with pytest.raises(SystemExit) as exc:
        main(["run", str(tmp_path), "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "gateway" in err and "Traceback" not in err


def test_run_refuses_a_report_inside_an_input_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    with pytest.raises(SystemExit) as exc:
        main(["run", str(logs), "--out", str(logs / "gateway" / "reports"), "--quiet"])
    assert exc.value.code == 2
    assert "outside the input folders" in capsys.readouterr().err


def test_run_refuses_a_report_inside_the_folder_of_an_input_pattern(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``path = "logs/*"`` with --out logs/reports: the guard looked only at folder inputs, so the next run
    ingested the previous report. The folder before the pattern's first wildcard is checked too."""
    logs = write_logs(tmp_path / "logs")
    (logs / "case.toml").write_text(CASE_TOML.replace('path = "gateway"', 'path = "*"'), encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["run", str(logs), "--out", str(logs / "reports"), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "lies inside the input folder" in err and "outside the input folders" in err
    assert not (logs / "reports").exists()


@pytest.mark.parametrize("pattern, refused", [
    ("*", True), ("**/*.jsonl", True), ("rep*/c*", True), ("rep*/x", False), ("*.jsonl", False), ("gateway/*.jsonl", False),
    ("g*/*", False), ("2026-*/**/*.json", False), ("link*", True), ("link/*", True), ("link/*.json", False), (".rep*/*", False),
])
def test_a_pattern_input_is_refused_only_when_it_could_reach_the_report(tmp_path: Path, pattern: str, refused: bool) -> None:
    """A pattern beside the case file (``*.jsonl``) cannot reach ``reports/...``; it was refused as if its
    whole folder were read. ``*`` (which matches the reports folder, walked whole) and ``**`` can."""
    from forensics.run import report_reachable

    (tmp_path / "gateway").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")  # a link an input pattern follows to the report
    report = tmp_path / ("elsewhere/case" if pattern.startswith("link") else "reports/case")
    assert report_reachable(tmp_path / pattern, report) is refused


@pytest.mark.parametrize("out, refused", [("case", True), (".out/case", False), ("_temporary/case", False)])
def test_a_folder_input_reaches_a_report_only_where_its_walk_goes(tmp_path: Path, out: str, refused: bool) -> None:
    """A folder walk skips hidden and bookkeeping folders: a report there is never read, and was refused."""
    from forensics.run import report_reachable

    (tmp_path / "gateway").mkdir()
    assert report_reachable(tmp_path / "gateway", tmp_path / "gateway" / out) is refused


@pytest.mark.parametrize("pattern, refused", [("gateway/**/*.json", False), ("gateway/*/case/packets/*.json", True)])
def test_a_report_a_pattern_reads_through_a_link_inside_a_log_folder_is_refused(tmp_path: Path, pattern: str,
                                                                               refused: bool) -> None:
    """gateway/latest links to the folder holding the first run's report. A ``*`` part follows the link, as
    ingest does, so the second run would read that report; the check looked only at matched folders around
    it. A ``**`` part never follows a link to a folder (ingest names it as not followed): out of reach."""
    from forensics.run import report_reachable

    (tmp_path / "gateway" / "node1").mkdir(parents=True)
    (tmp_path / "elsewhere" / "case" / "packets").mkdir(parents=True)
    (tmp_path / "elsewhere" / "case" / "packets" / "notice.json").write_text("{}")
    (tmp_path / "gateway" / "latest").symlink_to(tmp_path / "elsewhere")
    assert report_reachable(tmp_path / pattern, tmp_path / "elsewhere" / "case") is refused


def test_run_with_a_double_star_pattern_ends_on_folder_links_that_loop(tmp_path: Path) -> None:
    """``logs/**/*.jsonl`` with two links to folders above them: glob followed every link, 2**n paths deep
    until the names grew too long (it never ended). The run now reads the logs and names each link."""
    logs = write_logs(tmp_path / "logs")
    (logs / "gateway" / "up").symlink_to("..")
    (logs / "gateway" / "again").symlink_to("..")
    (logs / "case.toml").write_text(CASE_TOML.replace('path = "gateway"', 'path = "**/*.jsonl"'), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "forensics", "run", str(logs), "--out", str(tmp_path / "out"), "--quiet",
                           "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    manifest = json.loads((tmp_path / "out" / "e2e" / "case" / "manifest.json").read_text(encoding="utf-8"))
    skipped = {Path(e["path"]).name: e["kind"] for e in manifest["skipped_inputs"]}
    assert skipped == {"up": "symlink_to_folder", "again": "symlink_to_folder"}
    assert manifest["tables"]["exchanges"] > 0


needs_stages = pytest.mark.skipif(
    not (hasattr(api, "scan") and hasattr(api, "match")), reason="the scan and match stages are not in this checkout yet"
)


@needs_stages
def test_run_end_to_end_finds_the_leak(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    with pytest.raises(SystemExit) as exc:
        main(["run", str(logs), "--out", str(tmp_path / "out")])
    assert exc.value.code == 1
    printed = capsys.readouterr().out
    assert "report written to" in printed and "stages" in printed
    rd = tmp_path / "out" / "e2e"
    notes = (rd / "notifications.csv").read_text()
    assert "acme,exposed" in notes and "globex,recipient" in notes
    assert api.verify(rd).ok
    # Every stage's JSON record says what it is and in which version, for the tools that read it.
    formats = {name: json.loads((rd / name).read_text())["format"] for name in ("scan.json", "match.json", "manifest.json")}
    formats["case/manifest.json"] = json.loads((rd / "case" / "manifest.json").read_text())["format"]
    assert formats == {"scan.json": "forensics-scan/1", "match.json": "forensics-match/1",
                       "manifest.json": "forensics-report/1", "case/manifest.json": "forensics-case/1"}


def test_run_prints_that_records_naming_no_customer_were_quarantined(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A tenant rule that fits some records only quarantined the others: `run` printed nothing of it, and the list
    silently lost their customers (a review)."""
    logs = write_logs(tmp_path / "logs")
    nameless = json.loads(_row("r-9", "", "2026-08-28T12:00:00Z", "hello", "hi", 8)) | {"api_key": ""}
    (logs / "gateway" / "other.jsonl").write_text(json.dumps(nameless) + "\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        main(["run", str(logs), "--out", str(tmp_path / "out")])
    printed = " ".join(capsys.readouterr().err.split())
    assert "warning: 1 record in 1 file name no customer by the tenant rule (tenant_field 'auto')" in printed
    assert "other.jsonl (1)" in printed


def test_the_report_manifest_records_the_tokenizers_sha256(tmp_path: Path) -> None:
    """The token counts that made each suspect come from the tokenizer file: the report named it, not its content
    (a review: a swapped tokenizer showed only as drift under verify --rerun)."""
    import hashlib  # noqa: PLC0415

    from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: PLC0415

    logs = write_logs(tmp_path / "logs")
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "row": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(logs / "tokenizer.json"))
    (logs / "case.toml").write_text(CASE_TOML.replace("[[inputs]]", 'tokenizer = "tokenizer.json"\n\n[[inputs]]', 1),
                                    encoding="utf-8")
    result = api.run(logs / "case.toml", tmp_path / "out")
    man = json.loads((result.case_dir.parent / "manifest.json").read_text(encoding="utf-8"))
    assert man["reconciliation"]["tokenizer"] == "tokenizer.json"
    assert man["reconciliation"]["tokenizer_sha256"] == hashlib.sha256((logs / "tokenizer.json").read_bytes()).hexdigest()


@pytest.mark.parametrize("suspects_team", ["team-a", "team-b"])
def test_a_teams_key_with_no_organisation_is_not_named_exposed_to_its_own_organisation(tmp_path: Path,
                                                                                       suspects_team: str) -> None:
    """A customer's keys with and without its organisation set are two customer ids under the default tenant rule:
    the organisation's text in an answer to the team's key named the organisation exposed, confirmed, with no
    warning (a review). The records of the organisation hold the team's id: the finding goes to review, and a
    warning names the pair. A team of another organisation's is another customer."""
    logs = write_logs(tmp_path / "logs")
    rows = [json.loads(line) for line in (logs / "gateway" / "spend.jsonl").read_text(encoding="utf-8").splitlines()]
    rows[0]["team_id"] = "team-a"  # acme's request, sent with a key of its team-a (its metadata says so too)
    rows[0]["metadata"] = {"user_api_key_org_id": "acme", "user_api_key_team_id": "team-a"}
    rows[2]["organization_id"], rows[2]["team_id"] = "", suspects_team  # the suspect, sent with a key of no organisation
    (logs / "gateway" / "spend.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = api.run(logs / "case.toml", tmp_path / "out")
    report_dir = result.case_dir.parent
    listed = {(r["tenant_id"], r["role"]) for r in csv.DictReader((report_dir / "notifications.csv").open(encoding="utf-8"))}
    review = list(csv.DictReader((report_dir / "review.csv").open(encoding="utf-8")))
    if suspects_team == "team-b":
        assert ("acme", "exposed") in listed and (suspects_team, "recipient") in listed
        assert not any("may be one customer" in w for w in result.notes)
        return
    assert ("acme", "exposed") not in listed and ("team-a", "recipient") in listed
    (row,) = [r for r in review if r["source_tenant_id"] == "acme"]
    assert row["why_not_notified"].startswith("the records of acme hold team-a in team_id, a later tenant field")
    (warning,) = [w for w in result.notes if "may be one customer" in w]
    # One id, held in two fields: counted once (a second review counted two ids).
    assert warning.startswith("1 customer id of the case is held by another customer's records in a later tenant "
                              "field: 'team-a' (metadata.user_api_key_team_id and team_id of 'acme')")


SAMPLE = Path(__file__).resolve().parents[1] / "sample_logs"


def _sample_with(tmp_path: Path, old: str, new: str) -> Path:
    """The shipped sample incident whose case file says ``new`` where it says ``old``."""
    root = tmp_path / "logs"
    for part in ("gateway", "engine"):
        shutil.copytree(SAMPLE / part, root / part)
    text = (SAMPLE / "case.toml").read_text(encoding="utf-8")
    assert old in text
    (root / "case.toml").write_text(text.replace(old, new), encoding="utf-8")
    return root / "case.toml"


def test_an_engine_format_that_reads_none_of_its_files_lines_is_a_warning_naming_the_right_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """format = "vllm" for SGLang logs kept every line as an unknown event, without a word: the ceiling's
    cross-check and every engine signature were lost, and the list changed (a review)."""
    case = _sample_with(tmp_path, 'format = "sglang"', 'format = "vllm"')
    with pytest.raises(SystemExit):
        main(["run", str(case), "--out", str(tmp_path / "out")])
    printed = " ".join(capsys.readouterr().err.split())
    for node in ("decode-0_0.log", "decode-1_0.log", "prefill-0_0.log", "prefill-1_0.log"):
        assert (f"warning: engine/{node}: none of its" in printed
                and "is a record of the format given for it, 'vllm' (its lines read as sglang)" in printed)
    assert "Fix: give the format that matches" in printed


def test_the_format_warnings_of_every_ingest_of_a_run_are_printed(tmp_path: Path) -> None:
    """A mapped input is ingested by a call of its own after the others: the warnings of the first call were lost."""
    from test_ingest_mapped import PROFILE, jsonl, record  # noqa: PLC0415

    case = _sample_with(tmp_path, 'format = "sglang"', 'format = "vllm"')
    jsonl(case.parent / "mapped.jsonl", [record(1), record(2)])
    case.write_text(case.read_text(encoding="utf-8") + PROFILE.format(path="mapped.jsonl"), encoding="utf-8")
    result = api.run(case, tmp_path / "out")
    assert sum("is a record of the format given for it, 'vllm'" in w for w in result.notes) == 4


def test_a_file_of_the_right_format_whose_records_name_no_customer_is_not_blamed_on_its_format(tmp_path: Path) -> None:
    """Its records set aside for naming no customer, a LiteLLM log named as LiteLLM was said to be of another
    format, with a fix to give the format that matches (a review)."""
    case = _sample_with(tmp_path, 'name = "sim-small-seed7"', 'name = "sim-small-seed7"')
    nameless = json.loads(_row("r-9", "", "2026-08-28T12:00:00Z", "hello", "hi", 8)) | {"api_key": ""}
    (case.parent / "gateway" / "nameless.jsonl").write_text(json.dumps(nameless) + "\n", encoding="utf-8")
    result = api.run(case, tmp_path / "out")
    assert not any("format given for it" in w for w in result.notes)
    assert any(w.startswith("1 record in 1 file name no customer") and "nameless.jsonl (1)" in w
               and ', or "auto"' not in w for w in result.notes)


def test_a_file_of_the_right_format_none_of_whose_records_can_be_read_is_named_with_the_reason(tmp_path: Path) -> None:
    """Every record lacking its start time, a LiteLLM log named as LiteLLM went without a word (a second review)."""
    case = _sample_with(tmp_path, 'path = "gateway"', 'path = "broken"')
    broken = case.parent / "broken"
    broken.mkdir()
    rows = [json.loads(_row(f"r-{i}", "acme", "2026-08-28T12:00:00Z", "hello", "hi", 8)) for i in range(3)]
    (broken / "spend.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "startTime"}) + "\n"
                                                for r in rows), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        api.run(case, tmp_path / "out")
    assert ("spend.jsonl: none of its 3 lines could be read as litellm; the first line's reason: missing required "
            "field 'startTime'") in str(info.value)


def _broken_input(case: Path, rows: list[dict], fmt: str | None) -> None:
    """A second gateway input, ``broken/spend.jsonl`` holding ``rows``, in the case file (its format given or not)."""
    (case.parent / "broken").mkdir()
    (case.parent / "broken" / "spend.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    entry = '\n[[inputs]]\npath = "broken"\n' + (f'format = "{fmt}"\n' if fmt else "")
    case.write_text(case.read_text(encoding="utf-8") + entry, encoding="utf-8")


def _no_start(i: int) -> dict:
    return {k: v for k, v in json.loads(_row(f"r-{i}", "acme", "2026-08-28T12:00:00Z", "hello", "hi", 8)).items()
            if k != "startTime"}


@pytest.mark.parametrize("fmt", ["litellm", None], ids=["given", "sniffed"])
def test_an_unreadable_file_of_the_right_format_is_said_and_the_report_verifies_by_a_rerun(tmp_path: Path,
                                                                                           fmt: str | None) -> None:
    """Sniffed, the file's format went without a word; given, the warning was in the report's notes but not in its
    re-run's, which ingests format by format: verify --rerun called an honest report drift (a third review)."""
    case = _sample_with(tmp_path, 'name = "sim-small-seed7"', 'name = "sim-small-seed7"')
    _broken_input(case, [_no_start(i) for i in range(3)], fmt)
    result = api.run(case, tmp_path / "out")
    assert any(w.startswith("broken/spend.jsonl: none of its 3 lines could be read as litellm; the first line's reason: "
                            "missing required field 'startTime'") for w in result.notes), result.notes
    checked = api.verify(result.case_dir.parent, rerun=True)
    assert checked.ok, [str(d) for d in checked.drift]


def test_an_unreadable_file_under_two_names_is_said_once_and_the_report_verifies_by_a_rerun(tmp_path: Path) -> None:
    """The same unreadable content under a second name in the same ingest took the warning away (the second name
    counted as held before), and the re-run, ingesting format by format, said it: drift (a fourth review)."""
    case = _sample_with(tmp_path, 'name = "sim-small-seed7"', 'name = "sim-small-seed7"')
    rows = [_no_start(i) for i in range(3)]
    _broken_input(case, rows, "litellm")
    (case.parent / "misc").mkdir()
    (case.parent / "misc" / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    case.write_text(case.read_text(encoding="utf-8") + '\n[[inputs]]\npath = "misc"\n', encoding="utf-8")
    result = api.run(case, tmp_path / "out")
    assert sum("none of its 3 lines could be read as litellm" in w for w in result.notes) == 1, result.notes
    checked = api.verify(result.case_dir.parent, rerun=True)
    assert checked.ok, [str(d) for d in checked.drift]


def test_records_naming_no_customer_are_left_out_of_the_unreadable_files_warning(tmp_path: Path) -> None:
    """One record naming no customer, then two lacking their start time: the warning gave the first one's reason
    and counted three unreadable lines (a third review)."""
    case = _sample_with(tmp_path, 'name = "sim-small-seed7"', 'name = "sim-small-seed7"')
    nameless = json.loads(_row("r-9", "", "2026-08-28T12:00:00Z", "hello", "hi", 8)) | {"api_key": ""}
    _broken_input(case, [nameless, _no_start(1), _no_start(2)], "litellm")
    result = api.run(case, tmp_path / "out")
    (unread,) = [w for w in result.notes if w.startswith("broken/spend.jsonl: none of its")]
    assert unread.startswith("broken/spend.jsonl: none of its 2 lines could be read as litellm; the first line's "
                             "reason: missing required field 'startTime'")
    assert any(w.startswith("1 record in 1 file name no customer") for w in result.notes)


def test_the_note_on_records_naming_no_customer_is_printed_once_with_the_cases_counts(tmp_path: Path) -> None:
    """A mapped input's ingest said the note again with its counts: the run printed both (a second review)."""
    from test_ingest_mapped import PROFILE, jsonl, record  # noqa: PLC0415

    case = _sample_with(tmp_path, 'name = "sim-small-seed7"', 'name = "sim-small-seed7"')
    nameless = json.loads(_row("r-9", "", "2026-08-28T12:00:00Z", "hello", "hi", 8)) | {"api_key": ""}
    (case.parent / "gateway" / "nameless.jsonl").write_text(json.dumps(nameless) + "\n", encoding="utf-8")
    jsonl(case.parent / "mapped.jsonl", [record(1), record(2), record(3, account={})])
    case.write_text(case.read_text(encoding="utf-8") + PROFILE.format(path="mapped.jsonl"), encoding="utf-8")
    result = api.run(case, tmp_path / "out")
    (note,) = [w for w in result.notes if "name no customer" in w]
    assert note.startswith("2 records in 2 files name no customer")


def test_a_gateway_format_that_reads_no_record_stops_the_run_naming_the_files_not_the_model(tmp_path: Path) -> None:
    """The run stopped at the scan with "model 'glm-5.3' never appears in the exchanges": the cause was the
    format given for the gateway logs."""
    case = _sample_with(tmp_path, 'format = "litellm"', 'format = "openai-split"')
    with pytest.raises(ConfigError) as info:
        api.run(case, tmp_path / "out")
    text = str(info.value)
    assert "no gateway record was read from the case's inputs" in text and "never appears" not in text
    assert "litellm-callbacks-2026-08-27.jsonl: none of its 79 lines is a record of the format given for it, " \
           "'openai-split' (its lines read as litellm)" in text


@needs_stages
def test_run_twice_gives_identical_reports(tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs")
    a = api.run(logs, tmp_path / "a").report.report_dir
    b = api.run(logs / "case.toml", tmp_path / "b").report.report_dir

    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and not p.relative_to(root).as_posix().startswith("case/")}

    assert files(a) == files(b)


@needs_stages
def test_run_without_a_leak_exposes_nobody(tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs", leak=False)
    result = api.run(logs, tmp_path / "out")
    # The over-ceiling request is still suspect: its recipient is told (tier possible), nobody is exposed.
    assert [(n.tenant_id, n.role, n.tier) for n in result.report.notices] == [("globex", "recipient", "possible")]


@needs_stages
def test_run_with_nothing_found_exits_zero(tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs", leak=False, oversize=False)
    with pytest.raises(SystemExit) as exc:
        main(["run", str(logs / "case.toml"), "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 0
    assert (tmp_path / "out" / "e2e" / "notifications.csv").read_text().count("\n") == 1  # header only


@needs_stages
def test_a_log_whose_file_name_is_not_utf8_is_read_and_named(tmp_path: Path) -> None:
    """A Latin-1 file name (a Windows or zip export): the run stopped with an internal error writing
    the manifest, after every row of that file had been quarantined. Its rows are now read; the tables
    show the name's odd byte as \\xe9 and the manifests record the name exactly, so verify finds it."""
    import os

    import pyarrow.parquet as pq

    logs = write_logs(tmp_path / "logs")
    os.rename(logs / "gateway" / "spend.jsonl", os.fsencode(logs / "gateway") + b"/spend-caf\xe9.jsonl")
    report = api.run(logs, tmp_path / "out").report.report_dir
    notes = (report / "notifications.csv").read_text()
    assert "acme,exposed" in notes and "globex,recipient" in notes
    files = json.loads((report / "case" / "manifest.json").read_text(encoding="utf-8"))["files"]
    assert [(f["path"], f["ingested"], f["quarantined"]) for f in files] == [("gateway/spend-caf\udce9.jsonl", 3, 0)]
    sources = {r["source_file"] for r in pq.read_table(report / "case" / "exchanges.parquet").to_pylist()}
    assert sources == {"gateway/spend-caf\\xe9.jsonl"}
    (entry,) = json.loads((report / "manifest.json").read_text(encoding="utf-8"))["inputs"]
    assert entry["path"].endswith("spend-caf\udce9.jsonl") and entry["time_range"]
    assert api.verify(report).ok and api.verify(report, rerun=True).ok


@needs_stages
def test_a_report_refuses_a_match_of_other_suspects(tmp_path: Path) -> None:
    """Scanned again with a narrower window after the match, the case held the new suspects beside the old
    match's evidence: the report named recipients that were no longer suspects, and verify said OK. The
    report now refuses until the match is run again."""
    from forensics.errors import CaseError

    logs = write_logs(tmp_path / "logs")
    config = load_case_file(logs / "case.toml")
    case = tmp_path / "case"
    api.ingest(case, [logs / "gateway"], config=config)
    api.scan(case, config)
    api.match(case, config)
    narrower = load_case_file(logs / "case.toml")
    narrower.set("window_end", "2026-08-28T10:30:00Z", "option")  # before the suspect response
    assert api.scan(case, narrower).suspects == 0
    with pytest.raises(CaseError, match="scanned again after the match"):
        api.report(case, narrower, tmp_path / "out")
    api.match(case, narrower)
    rd = api.report(case, narrower, tmp_path / "out").report_dir
    assert "recipient" not in (rd / "notifications.csv").read_text()


@needs_stages
def test_a_report_refuses_a_case_file_whose_window_the_scan_did_not_use(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Scanned with --window-end, then reported with --config case.toml: summary.md and the manifest stated the
    case file's window while the suspects came from another, and verify said OK. The report now refuses,
    naming both values."""
    logs = write_logs(tmp_path / "logs")
    case, toml = str(tmp_path / "case"), str(logs / "case.toml")
    for argv in (["ingest", "--case", case, "--config", toml, str(logs / "gateway")],
                 ["scan", "--case", case, "--config", toml, "--window-end", "2026-08-28T10:30:00Z"],
                 ["match", "--case", case]):
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--quiet"])
        assert exc.value.code in (0, 1)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["report", "--case", case, "--config", toml, "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "window_end = 2026-09-09T00:00:00Z (the scan used 2026-08-28T10:30:00Z)" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "e2e").exists()
    # The case file the scan did use is accepted.
    (logs / "case.toml").write_text(CASE_TOML.replace("2026-09-09T00:00:00Z", "2026-08-28T10:30:00Z"), encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["report", "--case", case, "--config", toml, "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 0
    assert "| window | 2026-08-27T00:00:00Z to 2026-08-28T10:30:00Z (end exclusive) |" in (
        tmp_path / "out" / "e2e" / "summary.md").read_text(encoding="utf-8")


def _permission_bits_apply() -> list[str]:
    """A command prefix under which this user is held to permission bits: none for a plain user, setpriv
    dropping the override capabilities for root; the test is skipped where neither works."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, "--bounding-set=-dac_override,-dac_read_search,-fowner"] if setpriv else []
    if not prefix or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("running as root and cannot drop CAP_DAC_OVERRIDE (setpriv): permission bits would not apply")
    return prefix


def _cli_as_user(prefix: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, sys.executable, "-m", "forensics", *args], capture_output=True, text=True)


@needs_stages
@pytest.mark.parametrize("mode", [0o555, 0o300], ids=["read-only", "unlistable"])
def test_a_read_only_report_folder_is_refused_before_any_work(tmp_path: Path, mode: int) -> None:
    """A report folder made read-only (frozen by an auditor): the new report was swapped in, then removing the old
    one failed with an internal error, leaving it half deleted as .NAME+new-*, and every later run failed the same
    way. The run is now refused up front, naming the folder and the fix; the old report stays whole."""
    prefix = _permission_bits_apply()
    logs, out = write_logs(tmp_path / "logs"), tmp_path / "out"
    rd = api.run(logs, out).report.report_dir
    before = (rd / "manifest.json").read_bytes()
    os.chmod(rd, mode)  # an unlistable folder (write and enter, no read) cannot be emptied either
    try:
        proc = _cli_as_user(prefix, "run", str(logs), "--out", str(out), "--quiet")
        assert proc.returncode == 2, proc.stderr
        assert str(rd) in proc.stderr and "internal error" not in proc.stderr and len(proc.stderr.splitlines()) == 1
        if mode == 0o555:  # an unlistable one is already refused as it is listed (permission denied)
            assert "cannot read and write" in proc.stderr and f"chmod -R u+rwx {rd}" in proc.stderr
        assert sorted(p.name for p in out.iterdir()) == [".e2e+lock", "e2e"]
        assert (rd / "manifest.json").read_bytes() == before and api.verify(rd).ok
    finally:
        os.chmod(rd, 0o700)


@needs_stages
def test_a_leftover_that_cannot_be_deleted_is_a_warning_naming_it(tmp_path: Path) -> None:
    """The leftover of an earlier run (.NAME+new-*) holding a read-only folder: every later run stopped with an
    internal error. The run now writes its report and warns, naming the leftover and how to delete it."""
    prefix = _permission_bits_apply()
    logs, out = write_logs(tmp_path / "logs"), tmp_path / "out"
    leftover = out / ".e2e+new-abcd1234"
    (leftover / "packets").mkdir(parents=True)
    (leftover / "packets" / "notice.md").write_text("an old notice", encoding="utf-8")
    os.chmod(leftover / "packets", 0o555)
    try:
        proc = _cli_as_user(prefix, "run", str(logs), "--out", str(out), "--quiet")
        assert proc.returncode == 1, proc.stderr
        assert f"warning: {leftover}: an old report folder could not be deleted" in proc.stderr
        assert f"chmod -R u+rwx {leftover} && rm -rf {leftover}" in proc.stderr and "internal error" not in proc.stderr
        assert api.verify(out / "e2e").ok
    finally:
        os.chmod(leftover / "packets", 0o700)


def test_an_old_folder_that_cannot_be_deleted_after_the_swap_is_returned_not_raised(tmp_path: Path) -> None:
    """Once the new folder is in place, failing to delete the old one is no failure of the swap: its path is
    returned for the caller to warn about (it raised PermissionError, and the run reported an internal error)."""
    prefix = _permission_bits_apply()
    final, new, aside = tmp_path / "report", tmp_path / "new", tmp_path / "aside"
    (final / "plots").mkdir(parents=True)
    (final / "plots" / "a.svg").write_text("old", encoding="utf-8")
    new.mkdir()
    (new / "summary.md").write_text("new", encoding="utf-8")
    os.chmod(final / "plots", 0o555)
    code = ("import sys; from pathlib import Path; from forensics.case import replace_folder; "
            "print(replace_folder(*map(Path, sys.argv[1:])))")
    proc = subprocess.run([*prefix, sys.executable, "-c", code, str(new), str(final), str(aside)], capture_output=True, text=True)
    try:
        assert proc.returncode == 0, proc.stderr
        assert (final / "summary.md").read_text(encoding="utf-8") == "new"
        left = Path(proc.stdout.strip())
        assert left in (new, aside) and (left / "plots" / "a.svg").read_text(encoding="utf-8") == "old"
    finally:
        for folder in (new, aside):
            if (folder / "plots").is_dir():
                os.chmod(folder / "plots", 0o700)


@needs_stages
@pytest.mark.parametrize(("code", "fix"), [(errno.ENOSPC, "free space on the disk"), (errno.EDQUOT, "disk quota"),
                                           (errno.EROFS, "writable file system"), (errno.EACCES, "give this user access")])
def test_a_full_disk_is_an_error_naming_the_file_and_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch, code: int, fix: str) -> None:
    """A full disk (or a quota, a read-only file system, a denied permission) was an "internal error ... this is a
    bug in forensics". It is now one line naming the file and the fix, exit 2."""
    from forensics.report import safe

    def full(path: Path, *args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(safe, "write_text", full)
    logs = write_logs(tmp_path / "logs")
    with pytest.raises(SystemExit) as exc:
        main(["run", str(logs), "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {tmp_path / 'out'}/") and f": {os.strerror(code)}. Fix: " in err and fix in err
    assert "internal error" not in err and "bug" not in err and len(err.splitlines()) == 1
    monkeypatch.setenv("FORENSICS_DEBUG", "1")  # a developer asks for the traceback: it is raised, as for a bug
    with pytest.raises(OSError):
        main(["run", str(logs), "--out", str(tmp_path / "out2"), "--quiet"])


@needs_stages
def test_odd_file_names_of_an_engine_log_and_of_a_skipped_file_are_read_and_shown(tmp_path: Path) -> None:
    """An SGLang log whose name holds a byte that is not UTF-8 had every line quarantined (its node, named
    after the file, could not be stored); a file of no known format under such a name stopped the run
    with an internal error while the summary showed the note naming it."""
    import os

    import pyarrow.parquet as pq

    logs = write_logs(tmp_path / "logs")
    (logs / "engine").mkdir()
    engine = os.fsencode(logs / "engine") + b"/prefill-\xe9_0.log"
    with open(engine, "w", encoding="utf-8") as fh:
        fh.write("[2026-08-28 10:59:00 TP0] server_args=ServerArgs(model_path='m', disaggregation_mode='prefill', "
                 "served_model_name='glm-5.3')\n[2026-08-28 10:59:01 TP0] max_total_num_tokens=2000, context_len=8192\n")
    with open(os.fsencode(logs / "gateway") + b"/notes\xe9.txt", "w", encoding="utf-16") as fh:
        fh.write("not UTF-8: skipped, and a note names it\n")
    (logs / "case.toml").write_text(CASE_TOML + '\n[[inputs]]\nformat = "sglang"\npath = "engine"\n', encoding="utf-8")
    report = api.run(logs, tmp_path / "out").report.report_dir
    files = {f["path"]: f for f in json.loads((report / "case" / "manifest.json").read_text(encoding="utf-8"))["files"]}
    assert files["engine/prefill-\udce9_0.log"]["ingested"] == 2 and files["engine/prefill-\udce9_0.log"]["quarantined"] == 0
    nodes = {r["node"] for r in pq.read_table(report / "case" / "engine_events.parquet").to_pylist()}
    assert nodes == {"prefill-\\xe9"}
    assert "notes\\udce9.txt" in (report / "summary.md").read_text(encoding="utf-8")
    assert "notes\\udce9.txt" in (report / "summary.html").read_text(encoding="utf-8")
    assert api.verify(report).ok


def test_the_commands_a_warning_gives_quote_the_path() -> None:
    """The leftover warning's fix is a line to paste into a shell: with --out "/srv/My Reports" the unquoted
    path made rm -rf delete /srv/My and Reports/..."""
    from forensics.report import _leftover

    line = _leftover(Path("/srv/My Reports/.case+old-1"))
    assert "chmod -R u+rwx '/srv/My Reports/.case+old-1' && rm -rf '/srv/My Reports/.case+old-1'" in line


@pytest.mark.parametrize("pattern", ["**", "*/*"])
def test_a_report_in_a_bookkeeping_folder_is_out_of_a_patterns_reach(tmp_path: Path, pattern: str) -> None:
    """A first run's report in logs/_temporary/: ingest drops matches under a bookkeeping folder, but the
    reach check looked at every glob match and refused the second run."""
    from forensics.run import report_reachable

    report = tmp_path / "logs" / "_temporary" / "case"
    (report / "packets").mkdir(parents=True)
    (report / "packets" / "notice.json").write_text("{}")
    (tmp_path / "logs" / "gateway.jsonl").write_text("")
    assert not report_reachable(tmp_path / "logs" / pattern, report)


@needs_stages
def test_a_suspect_whose_answer_only_the_split_response_log_kept_exposes_its_source(tmp_path: Path) -> None:
    """The spend log lost r-3's answer (the callback failed); the split response log kept it, with acme's
    secret in it. The suspect was searched with no text and acme was missing from the list."""
    logs = write_logs(tmp_path / "logs")
    spend = logs / "gateway" / "spend.jsonl"
    lines = spend.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[2])
    assert record["request_id"] == "r-3"
    answer = record["response"]["choices"][0]["message"]["content"]
    record["response"] = {}
    spend.write_text("\n".join([*lines[:2], json.dumps(record)]) + "\n", encoding="utf-8")
    (logs / "split").mkdir()
    (logs / "split" / "responses.jsonl").write_text(json.dumps({
        "request_id": "r-3", "timestamp": "2026-08-28T11:00:05Z", "status_code": 200,
        "body": {"choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}]}}) + "\n", encoding="utf-8")
    case = CASE_TOML + '\n[[inputs]]\nformat = "openai-split"\npath = "split"\n'
    (logs / "case.toml").write_text(case, encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["run", str(logs), "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 1
    with open(tmp_path / "out" / "e2e" / "notifications.csv", newline="", encoding="utf-8") as fh:
        listed = {(r["tenant_id"], r["role"]) for r in csv.DictReader(fh)}
    assert ("acme", "exposed") in listed and ("globex", "recipient") in listed


@needs_stages
@pytest.mark.parametrize("how", ["absolute", "from inside", "case file from inside", "through a link"])
def test_a_relative_pattern_works_in_a_case_folder_named_with_brackets(tmp_path: Path, how: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """"[INC-7] leak": the case file's folder is a fixed part of a relative pattern, but its "[" was read as a
    character class and every pattern matched nothing; escaped, the escape went into the report's record of
    its inputs, and a re-run after the folder moved matched nothing again."""
    logs = write_logs(tmp_path / "[INC-7] leak")
    (logs / "case.toml").write_text(CASE_TOML.replace('path = "gateway"', 'path = "gateway/*.jsonl"'), encoding="utf-8")
    (tmp_path / "current").symlink_to(logs)
    given = {"absolute": str(logs), "from inside": ".", "case file from inside": "case.toml",
             "through a link": str(tmp_path / "current")}[how]
    monkeypatch.chdir(logs)
    with pytest.raises(SystemExit) as exc:
        main(["run", given, "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 1
    manifest = json.loads((tmp_path / "out" / "e2e" / "case" / "manifest.json").read_text(encoding="utf-8"))
    assert [Path(f["path"]).name for f in manifest["files"]] == ["spend.jsonl"]
    report = json.loads((tmp_path / "out" / "e2e" / "manifest.json").read_text(encoding="utf-8"))
    assert [i["path"] for i in report["parameters"]["case"]["values"]["inputs"]] == ["gateway/*.jsonl"]
    moved = tmp_path / "[INC-8] moved"
    logs.rename(moved)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(tmp_path / "out" / "e2e"), "--inputs", str(moved), "--rerun"])
    assert exc.value.code == 0


def test_a_case_is_not_scanned_or_reported_with_another_incidents_case_file(tmp_path: Path) -> None:
    """Two incidents whose case files share a name, built stage by stage into one --out: scan took the other
    incident's case file, and the second report replaced the first one's folder without a word, keeping its
    verdicts and notices records. Both are refused now, naming what differs."""
    from forensics import api
    from forensics.errors import OutputError

    first, second = write_logs(tmp_path / "a"), write_logs(tmp_path / "b", leak=False)
    cfg_a, cfg_b = load_case_file(first / "case.toml"), load_case_file(second / "case.toml")
    out = tmp_path / "out"
    for logs, cfg, case in ((first, cfg_a, tmp_path / "case-a"), (second, cfg_b, tmp_path / "case-b")):
        api.ingest(case, [logs / "gateway"], config=cfg)
    with pytest.raises(ConfigError, match="inputs hold none of the files this case ingested"):
        api.scan(tmp_path / "case-a", cfg_b)
    for cfg, case in ((cfg_a, tmp_path / "case-a"), (cfg_b, tmp_path / "case-b")):
        api.scan(case, cfg)
        api.match(case, cfg)
    api.report(tmp_path / "case-a", cfg_a, out)
    before = sorted((p.relative_to(out).as_posix(), p.read_bytes()) for p in (out / "e2e").rglob("*") if p.is_file())
    with pytest.raises(OutputError, match="holds the report of another case"):
        api.report(tmp_path / "case-b", cfg_b, out)
    assert sorted((p.relative_to(out).as_posix(), p.read_bytes()) for p in (out / "e2e").rglob("*") if p.is_file()) == before
    api.report(tmp_path / "case-a", cfg_a, out)  # the same case again: replaced, as always
    # A run, as a stage-by-stage report: the other incident's run is refused, the same case file's runs replace.
    runs = tmp_path / "runs"
    api.run(first / "case.toml", runs)
    with pytest.raises(OutputError, match="holds the report of another case"):
        api.run(second / "case.toml", runs)
    with (first / "gateway" / "spend.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("\n")  # the same incident's logs exported again: every file another SHA-256
    api.run(first / "case.toml", runs)


def test_run_shows_the_scans_warnings_and_quiet_keeps_them_off_the_screen(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The scan's warnings (here two customer ids alike but for case) reached only summary.md in a run, not the
    screen nor --json; and --quiet printed the match's. Now a run prints and returns them, and --quiet does not."""
    logs = write_logs(tmp_path / "logs")
    extra = _row("r-4", "ACME", "2026-08-28T12:00:00Z", "Another short question?", "Another short answer.", 8)
    with (logs / "gateway" / "spend.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(extra + "\n")
    runs = {}
    for flag in ("--quiet", "--json", None):
        with pytest.raises(SystemExit):
            main(["run", str(logs), "--out", str(tmp_path / f"out{flag}"), *([flag] if flag else [])])
        runs[flag] = capsys.readouterr()
    alike = "differ only in case"
    assert runs["--quiet"].err == "" and runs["--quiet"].out == ""
    assert any(alike in w for w in json.loads(runs["--json"].out)["warnings"])
    assert alike in runs[None].err


def test_an_ingest_given_no_case_file_keeps_the_cases_saved_settings(tmp_path: Path) -> None:
    """More logs added to a case begun with a case file, by an ingest given none: the defaults were saved over the
    case's name, models and window, so the next scan found no model and the report was named "case"."""
    from forensics import api
    from forensics.config import load_saved

    logs = write_logs(tmp_path / "logs")
    cfg = load_case_file(logs / "case.toml")
    api.ingest(tmp_path / "case", [logs / "gateway"], config=cfg)
    api.ingest(tmp_path / "case", [logs / "gateway"], config=api.make_config(None, timezone="UTC"))
    saved = load_saved(tmp_path / "case" / "config.json")
    assert (saved.name, saved.models, saved.window_start) == (cfg.name, cfg.models, cfg.window_start)
    assert (saved.timezone, saved.source("timezone")) == ("UTC", "option")  # what the ingest was told is kept too
    assert api.scan(tmp_path / "case", api.config_for_case(tmp_path / "case")).suspects >= 1


def test_a_log_given_to_run_a_folder_it_cannot_make_and_a_refused_ingest_are_clear(tmp_path: Path,
                                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A log named where run takes a case file was told "case file is not UTF-8. Fix: save it as UTF-8"; an --out
    on a file system that holds no folders (/proc) was an internal error; and an ingest refused before any work
    left a new case folder behind (its lock and staging folder)."""
    logs = write_logs(tmp_path / "logs")
    log = logs / "gateway" / "spend.jsonl"
    with pytest.raises(SystemExit) as exc:
        main(["run", str(log), "--out", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "this is not a case file" in err and "forensics ingest" in err
    if Path("/proc/self").is_dir():
        with pytest.raises(SystemExit) as exc:
            main(["run", str(logs), "--out", "/proc/forensics-out", "-q"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "cannot be created" in err and "internal error" not in err
    unknown = tmp_path / "notes.txt"
    unknown.write_text("not a log of any kind\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["ingest", "--case", str(tmp_path / "new-case"), str(unknown), "-q"])
    # Only its lock is left: another run waiting on it must not take a lock file no later run sees.
    assert exc.value.code == 2 and [p.name for p in (tmp_path / "new-case").iterdir()] == [".lock"]


def test_the_scans_check_of_a_case_file_reads_no_log_it_can_tell_by_place_and_size(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Logs ingested without the case file are recorded under other names than the case file gives them: the scan's
    check hashed every one of them on every scan. A file found where the ingest read it, of its size, is enough."""
    import forensics.report as report_module
    from forensics import api

    logs = write_logs(tmp_path / "logs")
    (logs / "gateway" / "more.jsonl").write_text(_row("r-9", "acme", "2026-08-28T12:00:00Z", "q", "a", 8) + "\n",
                                                  encoding="utf-8")
    api.ingest(tmp_path / "case", [logs / "gateway"])  # no case file: names as given here
    hashed: list[Path] = []
    real = report_module.file_sha256
    monkeypatch.setattr(report_module, "file_sha256", lambda p: hashed.append(Path(p)) or real(p))
    api.scan(tmp_path / "case", load_case_file(logs / "case.toml"))
    assert hashed == []


def test_an_empty_log_two_incidents_share_does_not_make_them_one(tmp_path: Path) -> None:
    """An empty day's log (the same SHA-256 in both incidents) was taken for a shared input: the other incident's run
    replaced the report and took over its verdicts. Only files that held records count."""
    from forensics import api
    from forensics.errors import OutputError

    first, second = write_logs(tmp_path / "a"), write_logs(tmp_path / "b", leak=False)
    for logs in (first, second):
        (logs / "gateway" / "empty-day.jsonl").write_text("", encoding="utf-8")
    api.run(first / "case.toml", tmp_path / "out")
    with pytest.raises(OutputError, match="holds the report of another case"):
        api.run(second / "case.toml", tmp_path / "out")


def test_the_scan_takes_its_own_case_file_after_the_logs_grew_in_place(tmp_path: Path) -> None:
    """A log found where the ingest read it is this incident's even when it grew since: the scan refused the case's
    own case file after its logs were appended to in place."""
    from forensics import api

    logs = write_logs(tmp_path / "logs")
    cfg = load_case_file(logs / "case.toml")
    api.ingest(tmp_path / "case", [logs / "gateway"], config=cfg)
    with (logs / "gateway" / "spend.jsonl").open("a", encoding="utf-8") as fh:
        fh.write("\n")
    assert api.scan(tmp_path / "case", cfg).suspects >= 1


def test_a_log_read_as_a_duplicate_of_its_copy_still_marks_the_same_incident(tmp_path: Path) -> None:
    """A log beside its gzipped copy: whichever is read first gets the records, the other reads none (duplicates).
    Counting only files with records read, a moved incident with a copy added was another case to the run."""
    import gzip

    from forensics import api

    logs = write_logs(tmp_path / "logs")
    api.run(logs / "case.toml", tmp_path / "out")
    moved = logs.rename(tmp_path / "logs-moved")
    data = (moved / "gateway" / "spend.jsonl").read_bytes()
    (moved / "gateway" / "a-spend.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
    assert api.run(moved / "case.toml", tmp_path / "out").report.report_dir.is_dir()


def _failed_with_engine_text(tmp_path: Path, streamed: bool) -> tuple[Path, Path, list[dict[str, Any]]]:
    """The incident with globex's over-long call r-3 logged by LiteLLM as a failure with no answer, and the decode
    node's request.finished line holding what it generated (acme's text); its request body says ``stream`` only when
    ``streamed`` (as real logs hold a call made without streaming: OpenAI's default). The logs, the spend log, its rows."""
    logs = write_logs(tmp_path / "logs", leak=False)
    spend = logs / "gateway" / "spend.jsonl"
    rows = [json.loads(line) for line in spend.read_text(encoding="utf-8").splitlines()]
    rows[2] |= {"status": "failure", "response": {}, "completion_tokens": 0}
    assert "stream" not in rows[2]["proxy_server_request"]
    if streamed:
        rows[2]["proxy_server_request"]["stream"] = True
    spend.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (logs / "engine").mkdir()
    finished = {"timestamp": "2026-08-28T11:00:04", "event": "request.finished", "rid": "r-3",
                "obj": {"rid": "r-3", "bootstrap_room": 7, "stream": streamed},
                "out": {"text": "Summary: " + SECRET, "meta_info": {"id": "r-3", "finish_reason": {"type": "abort"},
                                                                   "prompt_tokens": 1, "completion_tokens": 60}}}
    (logs / "engine" / "decode-0_0.log").write_text(json.dumps(finished) + "\n", encoding="utf-8")
    (logs / "case.toml").write_text(CASE_TOML + '\n[[inputs]]\nformat = "sglang"\npath = "engine"\n', encoding="utf-8")
    return logs, spend, rows


def test_a_suspect_whose_gateway_log_lost_its_answer_is_searched_with_what_the_decode_node_logged(tmp_path: Path) -> None:
    """A stream that broke part-way: LiteLLM logged a failure with no answer, while the decode node's request.finished
    line holds the text it generated from the stale pages. The suspect was searched with nothing, and the customer
    whose text it carried was missed (a review)."""
    logs, _, _ = _failed_with_engine_text(tmp_path, streamed=True)
    result = api.run(logs, tmp_path / "out")
    assert [(n.tenant_id, n.role) for n in result.report.notices] == [("acme", "exposed"), ("globex", "recipient")]
    rows = pl.read_parquet(result.case_dir / "exchanges.parquet").filter(pl.col("request_id") == "r-3").to_dicts()
    assert rows[0]["response_text"] == "Summary: " + SECRET
    assert (rows[0]["response_source_file"], rows[0]["response_source_line"]) == ("engine/decode-0_0.log", 1)
    notes = json.loads((result.case_dir / "manifest.json").read_text(encoding="utf-8"))["notes"]
    assert any("took the text the decode node logged" in n for n in notes)
    assert "took the text the decode node logged" in (result.report.report_dir / "summary.md").read_text(encoding="utf-8")
    assert api.verify(result.report.report_dir, rerun=True).ok


def test_a_call_made_without_streaming_that_timed_out_at_the_gateway_names_nobody(tmp_path: Path) -> None:
    """A call made without streaming timed out at the gateway (LiteLLM logged a failure, no answer) while the decode
    node went on to generate from the stale pages. Its answer is sent whole at the end: the customer got the error,
    not the text. The ingest gave it the decode node's text, and the customer whose text it held was named exposed,
    confirmed (a review). It is now no suspect, and the scan lists it for a look."""
    logs, spend, rows = _failed_with_engine_text(tmp_path, streamed=False)
    result = api.run(logs, tmp_path / "out")
    assert result.report.notices == []
    row = pl.read_parquet(result.case_dir / "exchanges.parquet").filter(pl.col("request_id") == "r-3").to_dicts()[0]
    assert not row["response_text"] and row["response_source_file"] is None
    scan = json.loads((result.case_dir / "scan.json").read_text(encoding="utf-8"))
    assert scan["anomalies"]["undelivered_output"]["rows"] == 1
    assert any("anomalies.undelivered_output" in w for w in scan["warnings"])
    # The same call streamed delivered what was generated before it broke: a suspect, its source named.
    rows[2]["proxy_server_request"]["stream"] = True
    spend.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    streamed = api.run(logs, tmp_path / "out2")
    assert [(n.tenant_id, n.role) for n in streamed.report.notices] == [("acme", "exposed"), ("globex", "recipient")]


@pytest.mark.parametrize("split_after", [True, False], ids=["split-log-later", "split-log-first"])
def test_a_request_logged_cut_and_whole_is_quoted_and_tiered_from_the_copy_that_holds_the_passage(
        tmp_path: Path, split_after: bool) -> None:
    """A spend log keeps a prompt's head and tail (LiteLLM's sanitiser) beside the answer; a split log keeps the whole
    prompt without it: the ingest keeps both rows. The match found acme's passage in the whole prompt, the report read
    its offsets in the cut copy and quoted text that was never exposed; the suspect, logged the same way, was tiered
    from its cut copy ("only a truncated copy was logged") and its suspects.csv row lost the spend log's completion
    time and usage (a review)."""
    from forensics.lab.simulate.writers import truncate_for_db

    logs = write_logs(tmp_path / "logs")
    spend = logs / "gateway" / "spend.jsonl"
    rows = [json.loads(line) for line in spend.read_text(encoding="utf-8").splitlines()]
    filler = " ".join(f"harbour ledger line {i} balanced" for i in range(70))
    whole = {"r-1": "Intake note: " + filler + " " + SECRET + ". " + filler.replace("harbour", "river"),
             "r-3": rows[2]["proxy_server_request"]["messages"][0]["content"]}
    split = []
    for row in rows:
        if row["request_id"] in whole:
            messages = [{"role": "user", "content": whole[row["request_id"]]}]
            row["proxy_server_request"] = truncate_for_db({"model": "glm-5.3", "messages": messages})
            # (a front log that records the request as it arrives may hold it first: both copies empty at the
            # offsets, the recipient's and the source's, were then the pair read alike, and nothing was quoted)
            first = {"r-1": "2026-08-28T08:59:59.500Z", "r-3": "2026-08-28T10:59:59.800Z"}[row["request_id"]]
            when = row["startTime"].replace(":00Z", ":00.500Z") if split_after else first
            split.append({"request_id": row["request_id"], "timestamp": when,
                          "tenant_id": row["organization_id"], "body": {"model": "glm-5.3", "messages": messages}})
    assert SECRET[:40] not in rows[0]["proxy_server_request"]["messages"][0]["content"]  # cut from the spend log
    spend.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (logs / "split").mkdir()
    (logs / "split" / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in split), encoding="utf-8")
    (logs / "case.toml").write_text(CASE_TOML + '\n[[inputs]]\nformat = "openai-split"\npath = "split"\n',
                                    encoding="utf-8")
    result = api.run(logs, tmp_path / "out")
    assert [(n.tenant_id, n.role, n.tier) for n in result.report.notices] == [("acme", "exposed", "confirmed"),
                                                                              ("globex", "recipient", "confirmed")]
    rd = result.report.report_dir
    letter = next((rd / "packets").glob("acme-*/notice.md")).read_text(encoding="utf-8")
    assert "Project Nightjar acquisition terms" in letter
    with (rd / "suspects.csv").open(encoding="utf-8", newline="") as fh:
        (suspect,) = list(csv.DictReader(fh))
    assert (suspect["request_id"], suspect["completed_at"], suspect["reported_prompt_tokens"]) == (
        "r-3", "2026-08-28T11:00:00Z", "1")


def test_logs_added_with_later_records_do_not_move_a_listed_customers_deadline(tmp_path: Path) -> None:
    """The audit's deadline ran from the report's last log record: a re-run with one later record of another model
    (more logs arrive: they always hold later traffic) moved every customer's deadline, and overdue customers were
    not overdue any more (a review)."""
    from forensics.review import ledger  # noqa: PLC0415

    logs = write_logs(tmp_path / "logs")
    first = api.run(logs, tmp_path / "out").report.report_dir
    now = dt.datetime(2026, 9, 3, 6, tzinfo=dt.UTC)
    assert {r["tenant_id"]: r["overdue"] for r in ledger.audit(first, now).rows} == {"acme": True, "globex": True}
    late = json.loads(_row("r-9", "initech", "2026-09-06T12:00:00Z", "hello", "hi", 8)) | {"model": "other-model",
                                                                                           "model_group": "other-model"}
    (logs / "gateway" / "later.jsonl").write_text(json.dumps(late) + "\n", encoding="utf-8")
    again = api.run(logs, tmp_path / "out").report.report_dir
    man = json.loads((again / "manifest.json").read_text(encoding="utf-8"))
    assert man["counts"]["last_received"] == "2026-09-06T12:00:00Z"
    assert man["listed_since"] == {"acme": "2026-08-28T11:00:00Z", "globex": "2026-08-28T11:00:00Z"}
    assert {r["tenant_id"]: r["overdue"] for r in ledger.audit(again, now).rows} == {"acme": True, "globex": True}
    assert api.verify(again, rerun=True).ok
    # Edited later in the manifest alone, a customer's time is drift.
    man["listed_since"]["acme"] = "2026-09-07T00:00:00Z"
    (again / "manifest.json").write_text(json.dumps(man, indent=2, sort_keys=True, ensure_ascii=False) + "\n",
                                         encoding="utf-8")
    assert any("listed_since gives 1 customer(s) a time" in str(d) for d in api.verify(again).drift)


def test_litellm_times_with_no_zone_are_utc_whatever_the_zone_the_engine_logs_need(tmp_path: Path) -> None:
    """The engine nodes log local time with no zone, so the team sets timezone to it; LiteLLM writes UTC with no zone
    (log-formats.md), and its times were read in the engine's zone: a suspect eight hours off fell out of the window
    (a review). The engine's lines still follow the case's timezone."""
    logs = write_logs(tmp_path / "logs")
    spend = logs / "gateway" / "spend.jsonl"
    spend.write_text(spend.read_text(encoding="utf-8").replace("T11:00:00Z", "T11:00:00"), encoding="utf-8")
    (logs / "engine").mkdir()
    (logs / "engine" / "prefill-0_0.log").write_text(
        "[2026-08-28 19:00:00 TP0] Input length (9000 tokens) exceeds the maximum allowed length (1999 tokens). "
        "Use a shorter input or enable --allow-auto-truncate., self.rid='r-3'\n", encoding="utf-8")
    (logs / "case.toml").write_text(CASE_TOML.replace('[[inputs]]', 'timezone = "Asia/Shanghai"\n\n[[inputs]]', 1)
                                    + '\n[[inputs]]\nformat = "sglang"\npath = "engine"\n', encoding="utf-8")
    result = api.run(logs, tmp_path / "out")
    row = pl.read_parquet(result.case_dir / "exchanges.parquet").filter(pl.col("request_id") == "r-3").to_dicts()[0]
    assert row["received_at"].isoformat() == "2026-08-28T11:00:00+00:00" and row["zone_assumed"] == "UTC"
    events = pl.read_parquet(result.case_dir / "engine_events.parquet").to_dicts()
    assert [e["time"].isoformat() for e in events] == ["2026-08-28T11:00:00+00:00"]  # 19:00 in Shanghai
    notes = json.loads((result.case_dir / "manifest.json").read_text(encoding="utf-8"))["notes"]
    assert "1 records had timestamps with no zone; they were read as UTC (as litellm writes them, whatever the case's " \
           "timezone Asia/Shanghai)" in notes
    assert [(n.tenant_id, n.role) for n in result.report.notices] == [("acme", "exposed"), ("globex", "recipient")]


def test_an_inputs_entry_gives_the_zone_of_its_own_times_over_the_case_and_the_format(tmp_path: Path,
                                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A LiteLLM proxy whose host writes local time: its [[inputs]] entry says so, over the format's UTC (a review found
    no way to say it once LiteLLM times were read as UTC)."""
    logs = write_logs(tmp_path / "logs")
    spend = logs / "gateway" / "spend.jsonl"
    spend.write_text(spend.read_text(encoding="utf-8").replace("T11:00:00Z", "T19:00:00"), encoding="utf-8")
    (logs / "case.toml").write_text(CASE_TOML.replace('path = "gateway"', 'path = "gateway"\ntimezone = "Asia/Shanghai"'),
                                    encoding="utf-8")
    result = api.run(logs, tmp_path / "out")
    row = pl.read_parquet(result.case_dir / "exchanges.parquet").filter(pl.col("request_id") == "r-3").to_dicts()[0]
    assert row["received_at"].isoformat() == "2026-08-28T11:00:00+00:00" and row["zone_assumed"] == "Asia/Shanghai"
    notes = json.loads((result.case_dir / "manifest.json").read_text(encoding="utf-8"))["notes"]
    assert any("read as Asia/Shanghai (the [[inputs]] timezone of gateway/spend.jsonl)" in n for n in notes), notes
    man = json.loads((result.report.report_dir / "manifest.json").read_text(encoding="utf-8"))
    assert man["parameters"]["case"]["values"]["inputs"] == [{"format": "litellm", "path": "gateway",
                                                              "timezone": "Asia/Shanghai"}]
    assert api.verify(result.report.report_dir, rerun=True).ok
    (logs / "case.toml").write_text(CASE_TOML.replace('path = "gateway"', 'path = "gateway"\ntimezone = "Mars/Base"'),
                                    encoding="utf-8")
    with pytest.raises(SystemExit) as exc:
        main(["run", str(logs), "--out", str(tmp_path / "out"), "-q"])
    assert exc.value.code == 2
    assert "inputs[0].timezone = 'Mars/Base' is not a known time zone" in capsys.readouterr().err


def _engine_line_case(tmp_path: Path, entries: str) -> Path:
    """write_logs plus one engine text line (no zone in its time) and the case file's [[inputs]] given."""
    logs = write_logs(tmp_path / "logs")
    (logs / "engine").mkdir()
    (logs / "engine" / "prefill-0_0.log").write_text(
        "[2026-08-28 13:00:00 TP0] Input length (9000 tokens) exceeds the maximum allowed length (1999 tokens). "
        "Use a shorter input or enable --allow-auto-truncate., self.rid='r-3'\n", encoding="utf-8")
    (logs / "case.toml").write_text(CASE_TOML.split("[[inputs]]")[0] + entries, encoding="utf-8")
    return logs


def test_the_stage_commands_read_an_inputs_entrys_own_zone_from_the_case_file(tmp_path: Path) -> None:
    """`forensics ingest --config` read the engine logs in the case's zone though their [[inputs]] entry gave its own,
    and the report recorded the entry's zone as applied (a review)."""
    entries = ('[[inputs]]\nformat = "litellm"\npath = "gateway"\n\n'
               '[[inputs]]\nformat = "sglang"\npath = "engine"\ntimezone = "Europe/Berlin"\n')
    logs = _engine_line_case(tmp_path, entries)
    case = tmp_path / "case"
    with pytest.raises(SystemExit) as exc:
        main(["ingest", str(logs / "gateway"), str(logs / "engine"), "--case", str(case), "--config",
              str(logs / "case.toml"), "-q"])
    assert exc.value.code == 0
    [event] = pl.read_parquet(case / "engine_events.parquet").to_dicts()
    assert event["time"].isoformat() == "2026-08-28T11:00:00+00:00"  # 13:00 in Berlin (summer time)
    # A case file giving the engine entry another zone than the case was read with is refused by the report.
    (logs / "other.toml").write_text(entries.replace("Europe/Berlin", "Asia/Tokyo").join(
        [CASE_TOML.split("[[inputs]]")[0], ""]), encoding="utf-8")
    for stage in (["scan", "--case", str(case), "--config", str(logs / "case.toml")],
                  ["match", "--case", str(case), "--config", str(logs / "case.toml")]):
        with pytest.raises(SystemExit):
            main([*stage, "-q"])
    with pytest.raises(ConfigError, match="its times with no zone read as Europe/Berlin, here Asia/Tokyo"):
        api.report(case, api.make_config(logs / "other.toml"), tmp_path / "out")


@pytest.mark.parametrize(("entries", "zone"), [
    # The entry naming the file itself wins over the folder's, whichever comes first.
    ('[[inputs]]\npath = "engine"\nformat = "sglang"\n\n[[inputs]]\npath = "engine/prefill-0_0.log"\nformat = "auto"\n'
     'timezone = "Asia/Tokyo"\n', "Asia/Tokyo"),
    ('[[inputs]]\npath = "engine/prefill-0_0.log"\nformat = "auto"\ntimezone = "Asia/Tokyo"\n\n'
     '[[inputs]]\npath = "engine"\nformat = "sglang"\n', "Asia/Tokyo"),
])
def test_the_most_specific_inputs_entry_gives_a_files_zone_and_verify_rerun_agrees(tmp_path: Path, entries: str,
                                                                                   zone: str) -> None:
    """Two entries holding one file: which zone it got hung on their order, and run and verify --rerun (which ingests
    format by format) disagreed, so the honest report could not be verified (a review)."""
    logs = _engine_line_case(tmp_path, '[[inputs]]\nformat = "litellm"\npath = "gateway"\n\n' + entries)
    result = api.run(logs, tmp_path / "out")
    [event] = pl.read_parquet(result.case_dir / "engine_events.parquet").to_dicts()
    assert event["time"].isoformat() == "2026-08-28T04:00:00+00:00" and event["zone_assumed"] == zone
    summary = (result.report.report_dir / "summary.md").read_text(encoding="utf-8")
    assert "| input lines whose time zone was assumed (Asia/Tokyo) |" in summary  # not the case's UTC
    verified = api.verify(result.report.report_dir, rerun=True)
    assert verified.ok, verified.drift


def test_two_inputs_entries_as_specific_with_different_zones_are_an_error_naming_both(tmp_path: Path) -> None:
    entries = ('[[inputs]]\nformat = "litellm"\npath = "gateway"\n\n[[inputs]]\nformat = "sglang"\npath = "engine"\n'
               'timezone = "Asia/Tokyo"\n\n[[inputs]]\nformat = "sglang"\npath = "engine"\ntimezone = "UTC"\n')
    logs = _engine_line_case(tmp_path, entries)
    with pytest.raises(ConfigError, match=r"2 \[\[inputs\]\] entries hold .*prefill-0_0.log with different timezones"):
        api.run(logs, tmp_path / "out")


@pytest.mark.parametrize("through_a_link", [False, True])
def test_a_pattern_and_a_folder_holding_a_file_with_different_zones_are_an_error(tmp_path: Path,
                                                                               through_a_link: bool) -> None:
    """`engine/*/*.log` in New York time and `engine/eu` in Berlin: ranked by depth, the pattern overrode the folder
    named through a link; ranked by the files each held, the zone moved when files were added beside it (reviews).
    Only nesting decides now; a pattern and a folder that overlap with different zones are said."""
    entries = ('[[inputs]]\nformat = "litellm"\npath = "gateway"\n\n[[inputs]]\nformat = "sglang"\npath = "engine/*/*.log"\n'
               'timezone = "America/New_York"\n\n[[inputs]]\nformat = "sglang"\npath = "engine/eu"\ntimezone = "Europe/Berlin"\n')
    logs = _engine_line_case(tmp_path, entries)
    if through_a_link:
        (tmp_path / "n").mkdir()
        (logs / "engine" / "prefill-0_0.log").rename(tmp_path / "n" / "prefill-0_0.log")
        (logs / "engine" / "eu").symlink_to(tmp_path / "n")
    else:
        (logs / "engine" / "eu").mkdir()
        (logs / "engine" / "prefill-0_0.log").rename(logs / "engine" / "eu" / "prefill-0_0.log")
    with pytest.raises(ConfigError, match=r"2 \[\[inputs\]\] entries hold .*prefill-0_0.log with different timezones"):
        api.run(logs, tmp_path / "out")


def test_the_deepest_folder_gives_the_zone_whatever_else_the_outer_one_holds(tmp_path: Path) -> None:
    """`engine` in UTC and `engine/eu` in Berlin, the outer folder holding nothing but the inner: counted by files they
    tied, and the run was refused (a review); the deeper folder decides, with or without files beside it."""
    entries = ('[[inputs]]\nformat = "litellm"\npath = "gateway"\n\n[[inputs]]\nformat = "sglang"\npath = "engine"\n'
               'timezone = "UTC"\n\n[[inputs]]\nformat = "sglang"\npath = "engine/eu"\ntimezone = "Europe/Berlin"\n')
    logs = _engine_line_case(tmp_path, entries)
    (logs / "engine" / "eu").mkdir()
    (logs / "engine" / "prefill-0_0.log").rename(logs / "engine" / "eu" / "prefill-0_0.log")
    for extra in (None, "decode-7_0.log"):
        if extra:
            (logs / "engine" / extra).write_text("[2026-08-28 13:00:00 TP0] Decode batch, #running-req: 1\n",
                                                 encoding="utf-8")
        result = api.run(logs, tmp_path / "out")
        zones = {e["node"]: e["zone_assumed"] for e in pl.read_parquet(result.case_dir / "engine_events.parquet").to_dicts()}
        assert zones["prefill-0"] == "Europe/Berlin" and zones.get("decode-7", "UTC") == "UTC"
        assert api.verify(result.report.report_dir, rerun=True).ok


def test_empty_files_alike_in_two_inputs_of_different_zones_are_no_conflict(tmp_path: Path) -> None:
    """An empty log in the gateway folder (UTC, LiteLLM's) and one in the engine folder (the case's Berlin): the same
    content (none) under two zones refused the run, though no time of it can be misread (a third review)."""
    logs = _engine_line_case(tmp_path, '[[inputs]]\nformat = "litellm"\npath = "gateway"\n\n[[inputs]]\nformat = "sglang"\n'
                                       'path = "engine"\n')
    (logs / "case.toml").write_text((logs / "case.toml").read_text(encoding="utf-8").replace(
        "[[inputs]]", 'timezone = "Europe/Berlin"\n\n[[inputs]]', 1), encoding="utf-8")
    (logs / "gateway" / "litellm-empty.jsonl").write_bytes(b"")
    (logs / "engine" / "decode-2_0.log").write_bytes(b"")
    result = api.run(logs, tmp_path / "out")
    assert [(n.tenant_id, n.role) for n in result.report.notices] == [("acme", "exposed"), ("globex", "recipient")]


def test_a_file_added_without_the_case_file_is_read_in_its_entrys_zone(tmp_path: Path) -> None:
    """Logs added with `forensics ingest` and no --config were read in the case's zone beside siblings read in their
    [[inputs]] entry's (a third review): the case's saved entries give it."""
    entries = ('[[inputs]]\nformat = "litellm"\npath = "gateway"\n\n[[inputs]]\nformat = "sglang"\npath = "engine"\n'
               'timezone = "Europe/Berlin"\n')
    logs = _engine_line_case(tmp_path, entries)
    case = tmp_path / "case"
    api.ingest(case, [logs / "gateway", logs / "engine"], config=api.make_config(logs / "case.toml"))
    (logs / "engine" / "decode-0_0.log").write_text(
        "[2026-08-28 13:00:05 TP0] Context corruption detected: Request r-3 (bootstrap_room=11) received metadata from "
        "bootstrap_room=12. Metadata buffer index: 3. This indicates metadata buffer index collision.\n", encoding="utf-8")
    api.ingest(case, [logs / "engine"])
    times = sorted(e["time"].isoformat() for e in pl.read_parquet(case / "engine_events.parquet").to_dicts())
    assert times == ["2026-08-28T11:00:00+00:00", "2026-08-28T11:00:05+00:00"]


@pytest.mark.parametrize("other_format", ["auto", "litellm"])
def test_the_same_log_under_two_entries_of_different_zones_is_an_error_whatever_their_formats(tmp_path: Path,
                                                                                              other_format: str) -> None:
    """One spend log with times lacking a zone in two entries, Tokyo and New York: it was read once, in the zone the
    order of the formats' names chose, with no word, and verify --rerun then failed (a fourth review)."""
    logs = write_logs(tmp_path / "logs")
    spend = logs / "gateway" / "spend.jsonl"
    spend.write_text(spend.read_text(encoding="utf-8").replace("T11:00:00Z", "T11:00:00"), encoding="utf-8")
    (logs / "copy").mkdir()
    shutil.copy(spend, logs / "copy" / "spend.jsonl")
    (logs / "case.toml").write_text(CASE_TOML.split("[[inputs]]")[0] + (
        '[[inputs]]\nformat = "litellm"\npath = "gateway"\ntimezone = "Asia/Tokyo"\n\n'
        f'[[inputs]]\nformat = "{other_format}"\npath = "copy"\ntimezone = "America/New_York"\n'), encoding="utf-8")
    with pytest.raises(ConfigError, match="the same content is under two inputs whose times with no zone are read in "
                                          "different zones"):
        api.run(logs, tmp_path / "out")


def test_empty_logs_under_two_entries_of_different_zones_run_and_verify(tmp_path: Path) -> None:
    logs = write_logs(tmp_path / "logs")
    for folder in ("gw-a", "gw-b"):
        (logs / folder).mkdir()
        (logs / folder / "spend-empty.jsonl").write_bytes(b"")
    (logs / "case.toml").write_text(CASE_TOML + (
        '\n[[inputs]]\nformat = "litellm"\npath = "gw-a"\ntimezone = "Asia/Tokyo"\n\n'
        '[[inputs]]\nformat = "litellm"\npath = "gw-b"\ntimezone = "America/New_York"\n'), encoding="utf-8")
    result = api.run(logs, tmp_path / "out")
    verified = api.verify(result.report.report_dir, rerun=True)
    assert verified.ok, verified.drift


@pytest.mark.parametrize("damage", ["missing", "corrupt", "bad_zone"])
def test_an_ingest_without_the_case_file_refuses_a_case_whose_saved_configuration_it_cannot_read(tmp_path: Path,
                                                                                               damage: str) -> None:
    """With config.json gone or garbled, a file added without --config was read in the case's zone beside siblings read
    in their entry's, with no word (a fourth review)."""
    entries = ('[[inputs]]\nformat = "litellm"\npath = "gateway"\n\n[[inputs]]\nformat = "sglang"\npath = "engine"\n'
               'timezone = "Europe/Berlin"\n')
    logs = _engine_line_case(tmp_path, entries)
    case = tmp_path / "case"
    api.ingest(case, [logs / "gateway", logs / "engine"], config=api.make_config(logs / "case.toml"))
    saved = case / "config.json"
    if damage == "missing":
        saved.unlink()
    elif damage == "corrupt":
        saved.write_text("{", encoding="utf-8")
    else:
        saved.write_text(saved.read_text(encoding="utf-8").replace("Europe/Berlin", "Mars/Olympus"), encoding="utf-8")
    (logs / "engine" / "decode-0_0.log").write_text("[2026-08-28 13:00:05 TP0] Decode batch, #running-req: 1\n",
                                                    encoding="utf-8")
    with pytest.raises(CaseError, match="config.json|saved configuration"):
        api.ingest(case, [logs / "engine"])


@pytest.mark.parametrize("below", [".rotated", "_temporary"])
def test_a_folder_holds_no_file_of_a_subfolder_its_walk_skips(tmp_path: Path, below: str) -> None:
    """`engine` in Berlin and `engine/.rotated/*.log` in Tokyo: the folder's walk never reads the hidden subfolder, yet
    the path prefix counted it as holding the file, and the run was refused (a sixth review): the pattern decides."""
    entries = ('[[inputs]]\nformat = "litellm"\npath = "gateway"\n\n[[inputs]]\nformat = "sglang"\npath = "engine"\n'
               f'timezone = "Europe/Berlin"\n\n[[inputs]]\nformat = "sglang"\npath = "engine/{below}/*.log"\n'
               'timezone = "Asia/Tokyo"\n')
    logs = _engine_line_case(tmp_path, entries)
    (logs / "engine" / below).mkdir()
    (logs / "engine" / "prefill-0_0.log").rename(logs / "engine" / below / "prefill-0_0.log")
    result = api.run(logs, tmp_path / "out")
    [event] = pl.read_parquet(result.case_dir / "engine_events.parquet").to_dicts()
    assert event["zone_assumed"] == "Asia/Tokyo"
    assert api.verify(result.report.report_dir, rerun=True).ok


def test_a_catch_all_folder_with_no_zone_takes_no_side_against_a_pattern_that_gives_one(tmp_path: Path) -> None:
    """`.` with no timezone and `engine/*.log` in Berlin: an entry giving no zone counted as disagreeing, and the run
    was refused (a sixth review)."""
    entries = ('[[inputs]]\nformat = "auto"\npath = "."\n\n[[inputs]]\nformat = "sglang"\npath = "engine/*.log"\n'
               'timezone = "Europe/Berlin"\n')
    logs = _engine_line_case(tmp_path, entries)
    result = api.run(logs / "case.toml", tmp_path / "out")
    [event] = pl.read_parquet(result.case_dir / "engine_events.parquet").to_dicts()
    assert event["zone_assumed"] == "Europe/Berlin"
