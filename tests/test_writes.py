"""Where the tool writes: only inside --out and the case folder, never through a symbolic link,
atomically (a failed run leaves the previous report whole), under a lock, and privately."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_run import write_logs

from forensics import api
from forensics.cli import main

NAME = "e2e"  # the case name in test_run's case file


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exc:
        main([*args, "--quiet"])
    return int(exc.value.code), capsys.readouterr().err


def _forensics(*args: str, **kwargs: object) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "forensics", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)  # type: ignore[call-overload]



def _without_the_leak(root: Path) -> Path:
    """The logs written by ``write_logs(root)`` again, their suspect answer without the leak: the same incident's
    logs exported anew (another incident's report under the same name is never replaced)."""
    from test_run import CASE_TOML

    shutil.rmtree(root)
    logs = write_logs(root, leak=False)
    assert (logs / "case.toml").read_text(encoding="utf-8") == CASE_TOML
    return logs


def test_a_report_folder_that_is_a_symlink_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / NAME).symlink_to(elsewhere)
    code, err = _cli(["run", str(logs), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "symbolic link" in err and "internal error" not in err
    assert list(elsewhere.iterdir()) == []  # no customer's data went where the link points


def test_a_symlink_inside_the_report_is_refused_and_the_report_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    out = tmp_path / "out"
    rd = api.run(logs, out).report.report_dir
    elsewhere = tmp_path / "elsewhere"
    (rd / "packets").rename(elsewhere)
    (rd / "packets").symlink_to(elsewhere)
    before, before_elsewhere = _files(rd), _files(elsewhere)
    code, err = _cli(["run", str(logs), "--out", str(out)], capsys)
    assert code == 2 and "symbolic link" in err and str(rd / "packets") in err and "internal error" not in err
    assert _files(rd) == before and _files(elsewhere) == before_elsewhere
    assert os.path.islink(rd / "packets")


def test_out_or_case_naming_a_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    afile = tmp_path / "afile"
    afile.write_text("not a folder\n")
    code, err = _cli(["run", str(logs), "--out", str(afile)], capsys)
    assert code == 2 and "not a folder" in err and str(afile) in err and "internal error" not in err
    code, err = _cli(["ingest", "--case", str(afile), str(logs / "gateway")], capsys)
    assert code == 2 and "not a folder" in err and str(afile) in err and "internal error" not in err
    assert afile.read_text() == "not a folder\n"


def test_a_failed_run_leaves_the_previous_report_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    rd = api.run(write_logs(tmp_path / "leak"), out).report.report_dir
    before = _files(rd)
    from forensics.report import summary

    def broken(*args: object, **kwargs: object) -> str:
        raise OSError(28, "No space left on device")

    # Fails after notifications.csv and the packets of the new (different) report are written.
    monkeypatch.setattr(summary, "render_html", broken)
    with pytest.raises(OSError, match="No space"):
        api.run(_without_the_leak(tmp_path / "leak"), out)
    assert _files(rd) == before
    assert sorted(p.name for p in out.iterdir()) == [f".{NAME}+lock", NAME]  # no half-built folder left


def test_a_new_report_replaces_the_old_one_entirely(tmp_path: Path) -> None:
    out = tmp_path / "out"
    api.run(write_logs(tmp_path / "leak"), out)
    rd = api.run(_without_the_leak(tmp_path / "leak"), out).report.report_dir
    manifest = json.loads((rd / "manifest.json").read_text())
    on_disk = {k for k in _files(rd) if not k.startswith("case/") and k != "manifest.json"}
    assert on_disk == {o["path"] for o in manifest["outputs"]}  # no packet of the first run's exposed tenant
    assert api.verify(rd).ok


def test_stray_files_are_never_outputs_nor_deleted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.txt").write_text("our incident folder\n")
    rd = api.run(logs, out).report.report_dir
    outputs = [o["path"] for o in json.loads((rd / "manifest.json").read_text())["outputs"]]
    assert not any("README" in p for p in outputs)
    (rd / "analyst-notes.md").write_text("call acme first\n")
    before = _files(rd)
    code, err = _cli(["run", str(logs), "--out", str(out)], capsys)
    assert code == 2 and "analyst-notes.md" in err and "did not write" in err
    assert _files(rd) == before and (out / "README.txt").read_text() == "our incident folder\n"


def _wait_for(pattern: str, root: Path, proc: subprocess.Popen[str]) -> Path:
    while proc.poll() is None:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
        time.sleep(0.002)
    raise AssertionError(f"the run ended before {pattern} appeared: {proc.communicate()}")


def test_a_second_run_into_the_same_out_stops_naming_the_first(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    out = tmp_path / "out"
    first = _forensics("run", str(logs), "--out", str(out), "--quiet")
    try:
        _wait_for("*/case/staging", out, first)  # the run is in its ingest stage
        os.kill(first.pid, signal.SIGSTOP)  # hold the first run mid-way
        code, err = _cli(["run", str(logs), "--out", str(out)], capsys)
        assert code == 2 and f"pid {first.pid}" in err and "another forensics run" in err
        assert not (out / NAME).exists()  # the second run wrote nothing
    finally:
        os.kill(first.pid, signal.SIGCONT)
    _, first_err = first.communicate(timeout=120)
    assert first.returncode == 1, first_err
    assert api.verify(out / NAME).ok


def test_a_case_being_written_is_locked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    case = tmp_path / "case"
    code, _ = _cli(["ingest", "--case", str(case), str(logs / "gateway")], capsys)
    assert code == 0
    holder = subprocess.Popen(
        [sys.executable, "-c", ("import sys; from forensics.case import case_lock\n"
                                "with case_lock(sys.argv[1]):\n    print('held', flush=True); sys.stdin.read()"), str(case)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        for args in (["ingest", "--case", str(case), str(logs / "gateway")], ["scan", "--case", str(case)]):
            code, err = _cli(args, capsys)
            assert code == 2 and f"pid {holder.pid}" in err and str(case) in err
    finally:
        holder.communicate("")
    code, _ = _cli(["ingest", "--case", str(case), str(logs / "gateway")], capsys)
    assert code == 0  # the lock is gone with its holder


def _modes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): oct(stat.S_IMODE(p.lstat().st_mode)) for p in [root, *root.rglob("*")]}


def test_everything_created_is_private_whatever_the_umask(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)  # a folder the user made: it keeps its mode
    old = os.umask(0)
    try:
        api.run(logs, shared / "new" / "reports")
        code, _ = _cli(["ingest", "--case", str(shared / "cases" / "c1"), str(logs / "gateway")], capsys)
        assert code == 0
    finally:
        os.umask(old)
    modes = _modes(shared)
    assert modes.pop(".") == "0o755"
    assert modes and {m for p, m in modes.items() if (shared / p).is_dir()} == {"0o700"}
    assert {m for p, m in modes.items() if not (shared / p).is_dir()} == {"0o600"}
    assert "cases/c1/staging" in modes and "new/reports/e2e/case/staging" in modes


def test_where_paths_cannot_be_swapped_in_one_step_the_report_is_still_replaced(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import forensics.case

    monkeypatch.setattr(forensics.case, "_exchange", lambda a, b: False)  # no renameat2 (not Linux, or an old kernel)
    out = tmp_path / "out"
    api.run(write_logs(tmp_path / "leak"), out)
    rd = api.run(_without_the_leak(tmp_path / "leak"), out).report.report_dir
    assert "acme" not in (rd / "notifications.csv").read_text() and api.verify(rd).ok
    assert sorted(p.name for p in out.iterdir()) == [f".{NAME}+lock", NAME]


def test_a_lock_file_that_is_a_symlink_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = write_logs(tmp_path / "logs")
    out = tmp_path / "out"
    out.mkdir()
    (out / f".{NAME}+lock").symlink_to(tmp_path / "victim")
    code, err = _cli(["run", str(logs), "--out", str(out)], capsys)
    assert code == 2 and "symbolic link" in err and "internal error" not in err
    assert not (tmp_path / "victim").exists() and not (out / NAME).exists()


def test_report_on_a_runs_own_case_keeps_that_case(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    rd = api.run(write_logs(tmp_path / "logs"), out).report.report_dir
    before = _files(rd)
    code, _ = _cli(["report", "--case", str(rd / "case"), "--out", str(out)], capsys)
    assert code == 1
    assert {k: v for k, v in _files(rd).items() if k.startswith("case/")} == {k: v for k, v in before.items() if k.startswith("case/")}
    assert api.verify(rd).ok


def test_a_signal_between_the_two_renames_puts_the_old_report_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import forensics.case
    from forensics.errors import Interrupted

    monkeypatch.setattr(forensics.case, "_exchange", lambda a, b: False)
    final, new = tmp_path / "report", tmp_path / "new"
    for folder, text in ((final, "old"), (new, "new")):
        folder.mkdir()
        (folder / "notifications.csv").write_text(text)
    real_rename, calls = os.rename, []

    def rename(src: object, dst: object) -> None:
        calls.append(src)
        if len(calls) == 2:  # the old report is aside, the new one not yet in
            raise Interrupted(signal.SIGTERM)
        real_rename(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(Interrupted):
        forensics.case.replace_folder(new, final, tmp_path / "aside")
    assert (final / "notifications.csv").read_text() == "old" and not (tmp_path / "aside").exists()


def test_a_signature_beside_the_manifest_does_not_block_the_next_report(tmp_path: Path) -> None:
    out, logs = tmp_path / "out", write_logs(tmp_path / "logs")
    rd = api.run(logs, out).report.report_dir
    (rd / "manifest.json.sig").write_bytes(b"c2lnbmF0dXJl\n")  # what `--sign` leaves next to the manifest
    rd = api.run(logs, out).report.report_dir
    assert not (rd / "manifest.json.sig").exists()  # it signed the old manifest: the new report has none


def test_a_case_built_stage_by_stage_inside_the_report_folder_is_kept(tmp_path: Path) -> None:
    from forensics.config import load_case_file

    logs = write_logs(tmp_path / "logs")
    cfg = load_case_file(logs / "case.toml")
    case = tmp_path / "out" / NAME / "case"  # where `run` keeps it, built here command by command
    api.ingest(case, [logs / "gateway"], config=cfg)
    api.scan(case, cfg)
    api.match(case, cfg)
    tables = _files(case)
    rd = api.report(case, cfg, tmp_path / "out").report_dir
    assert rd == tmp_path / "out" / NAME and _files(rd / "case") == tables and api.verify(rd).ok


def test_packet_files_are_new_private_files_and_never_written_through_what_is_there(tmp_path: Path) -> None:
    from forensics.errors import OutputError
    from forensics.report import safe

    old = os.umask(0o277)  # would leave a file 0400 and a folder 0500 without the explicit modes
    try:
        folder = safe.new_private_dir(tmp_path / "packets")
        safe.write_new(folder / "notice.md", b"# notice\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "notice.md").stat().st_mode) == 0o600
    assert (folder / "notice.md").read_bytes() == b"# notice\n"
    target = tmp_path / "elsewhere.txt"
    target.write_bytes(b"theirs")
    (folder / "notice.json").symlink_to(target)
    with pytest.raises(OutputError, match="already exists"):
        safe.write_new(folder / "notice.json", b"{}")
    with pytest.raises(OutputError, match="already exists"):
        safe.write_new(folder / "notice.md", b"again")
    with pytest.raises(OutputError, match="already exists"):
        safe.new_private_dir(folder)
    assert target.read_bytes() == b"theirs" and (folder / "notice.md").read_bytes() == b"# notice\n"
