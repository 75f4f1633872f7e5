"""A corpus of damaged inputs, generated at test time, through the whole ``forensics run``.

Every kind of damage an export can carry sits next to valid records of a real leak (whose
tenants have hostile ids): the run must finish with no internal error, quarantine exactly what
cannot be used (counted per file), keep everything else, and write nothing outside ``--out``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import zstandard

from forensics import api
from forensics.cli import main

SECRET = ("Project Nightjar acquisition terms: the buyer pays forty one million euros in three tranches, "
          "escrow held by Banque Lumiere, closing on the ninth of September, deploy key AKIAZ7QW3ERT5YUI8OPL.")
FILLER = " ".join(f"row {i} of the shipping ledger for the northern depot" for i in range(900))
# Tenant ids a hostile or broken export can carry: path traversal, a newline, bidi controls, Windows
# reserved names, spreadsheet formulas. The leak runs from EXPOSED to RECIPIENT, so both get packets.
EXPOSED = '=HYPERLINK("http://evil.example/x","open me")'
RECIPIENT = "../../../../outside/CON\n\u202eexe.txt"
HOSTILE_TENANTS = ["NUL", "aux.txt", "..\\..\\windows\\system32", "@SUM(1+1)*cmd|' /C calc'!A0", "\u2067right-to-left\u2069", "nul\u0000byte"]

CASE_TOML = """name = "corpus"
model = "glm-5.3"
window_start = "2026-08-27T00:00:00Z"
window_end = "2026-09-09T00:00:00Z"
real_ceiling_tokens = 2000
advertised_window_tokens = 8192

[[inputs]]
format = "litellm"
path = "gateway"

[[inputs]]
format = "openai-split"
path = "split"

[[inputs]]
format = "sglang"
path = "engine"
"""


def spend(rid: str, tenant: str, prompt: str, answer: str, prompt_tokens: int = 40, t: str = "2026-08-28T09:00:00Z", **extra: Any) -> str:
    """A valid LiteLLM spend-log row."""
    return json.dumps({
        "request_id": rid, "call_type": "acompletion", "api_key": "k-1", "startTime": t, "endTime": t,
        "model": "openai/glm-5.3", "model_group": "glm-5.3", "organization_id": tenant, "team_id": "", "end_user": "",
        "status": "success", "messages": {}, "prompt_tokens": prompt_tokens, "completion_tokens": 50,
        "proxy_server_request": {"model": "glm-5.3", "messages": [{"role": "user", "content": prompt}]},
        "response": {"id": rid, "object": "chat.completion", "model": "glm-5.3",
                     "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}]},
        "metadata": {}, **extra,
    }, ensure_ascii=False)


def split_request(rid: str, tenant: str, **changes: Any) -> str:
    return json.dumps({"request_id": rid, "timestamp": "2026-08-30T03:12:09Z", "tenant_id": tenant, "user_id": "=1+2",
                       "body": {"model": "glm-5.3", "messages": [{"role": "user", "content": f"question of {rid}"}]}, **changes},
                      ensure_ascii=False)


def split_response(rid: str, **changes: Any) -> str:
    return json.dumps({"request_id": rid, "timestamp": "2026-08-30T03:12:19Z", "status_code": 200,
                       "body": {"choices": [{"index": 0, "message": {"content": f"answer to {rid}"}, "finish_reason": "stop"}]},
                       **changes})


def lines(*records: str, end: str = "\n") -> bytes:
    return (end.join(records) + end).encode("utf-8")


def build_corpus(root: Path) -> dict[str, int]:
    """Write the damaged incident under ``root``; return the quarantine rows expected per input path."""
    gateway, split, engine = root / "gateway", root / "split", root / "engine"
    for folder in (gateway, split, engine):
        folder.mkdir(parents=True)
    (root / "case.toml").write_text(CASE_TOML)
    expected: dict[str, int] = {}

    # The leak itself, among hostile tenant ids; one line carries raw NUL bytes (not JSON: quarantined).
    main_rows = [
        spend("r-1", EXPOSED, "Please review: " + SECRET, "Reviewed, looks fine.", 60),
        spend("r-2", RECIPIENT, FILLER, "Summary: " + SECRET, 1, t="2026-08-28T11:00:00Z"),
        *(spend(f"r-h{i}", tenant, f"short question {i} about invoices?", "Here is the answer.", 8) for i, tenant in enumerate(HOSTILE_TENANTS)),
    ]
    (gateway / "spend.jsonl").write_bytes(lines(*main_rows) + b'{"request_id": "r-nul\x00\x00", "startTime": 1}\n')
    expected["gateway/spend.jsonl"] = 1

    # BOM and CRLF: nothing lost. CR-only (classic Mac): read line by line, the broken line alone quarantined.
    (gateway / "bom-crlf.jsonl").write_bytes(b"\xef\xbb\xbf" + lines(spend("r-10", "acme", "a", "b"), spend("r-11", "acme", "c", "d"), end="\r\n"))
    expected["gateway/bom-crlf.jsonl"] = 0
    (gateway / "old-mac.jsonl").write_bytes(lines(spend("r-12", "acme", "a", "b"), "{broken", spend("r-13", "acme", "c", "d"), end="\r"))
    expected["gateway/old-mac.jsonl"] = 1

    # Truncated compressed streams: the readable lines kept, the unreadable rest one quarantine row.
    body = lines(*(spend(f"r-z{i}", "globex", f"question {i} " * 20, "fine") for i in range(60)))
    gz = gzip.compress(body, mtime=0)
    (gateway / "cut.jsonl.gz").write_bytes(gz[: len(gz) // 2])
    expected["gateway/cut.jsonl.gz"] = 1
    zst = zstandard.ZstdCompressor().compress(body.replace(b'"r-z', b'"r-y'))
    (gateway / "cut.jsonl.zst").write_bytes(zst[: len(zst) // 2])
    expected["gateway/cut.jsonl.zst"] = 1

    # Invalid UTF-8 in one line; a whole file in UTF-16 (skipped with the iconv fix).
    (gateway / "latin1.jsonl").write_bytes(lines(spend("r-20", "acme", "a", "b")) + spend("r-21", "acme", "café", "b").encode("latin-1") + b"\n")
    expected["gateway/latin1.jsonl"] = 1
    (gateway / "utf16.jsonl").write_bytes(lines(spend("r-22", "acme", "a", "b")).decode().encode("utf-16"))
    expected["gateway/utf16.jsonl"] = 1

    # Very long lines: a 4 MB prompt is ingested whole, 4 MB of garbage is one quarantined line with a
    # short excerpt. Lines are read as bytes one at a time and nothing is kept per byte of a line, so
    # 40 MB behaves the same, only ten times slower; 4 MB is past every buffer size (1 MB read chunks).
    big = "lorem ipsum dolor sit amet " * 150_000
    (gateway / "long-lines.jsonl").write_bytes(lines(spend("r-30", "acme", big, "ok"), "x" * 4_000_000))
    expected["gateway/long-lines.jsonl"] = 1

    # Hostile file names: a newline, a bidi override, a Windows reserved name.
    (gateway / "CON.jsonl").write_bytes(lines(spend("r-40", "acme", "a", "b")))
    expected["gateway/CON.jsonl"] = 0
    (gateway / "line\nbreak\u202etxt.jsonl").write_bytes(lines(spend("r-41", "acme", "a", "b"), "[1, 2]"))
    expected["gateway/line\nbreak\u202etxt.jsonl"] = 1

    # Split logs: hostile tenant ids are kept; a time of 1e30 and a non-object body are quarantined;
    # an HTTP status of 1e30 is only a problem note on a kept response.
    (split / "requests.jsonl").write_bytes(lines(
        split_request("s-1", "AUX"), split_request("s-2", "..\\..\\evil"), split_request("s-3", "tab\there"),
        split_request("s-4", "acme", timestamp=1e30), split_request("s-5", "acme", body=[1, 2]),
    ))
    expected["split/requests.jsonl"] = 2
    (split / "responses.jsonl").write_bytes(lines(
        split_response("s-1"), split_response("s-2", status_code=1e30), split_response("s-3", timestamp=1787973141500000),
    ))
    expected["split/responses.jsonl"] = 0

    # Engine logs: every line is kept as an event, except one that is not UTF-8. NUL bytes, absurd
    # figures and unknown lines are content. Next to them, entries that are not regular files.
    (engine / "prefill-0_0.log").write_bytes(
        b"[2026-08-27 00:00:05 TP0] max_total_num_tokens=2000, chunked_prefill_size=8192, context_len=8192\n"
        b"[2026-08-27 00:00:06 TP0] max_total_num_tokens=99999999999999999999999999, context_len=-5\n"
        b"[2026-08-28 11:00:01 TP0] Request r-2 exceeds the maximum number of tokens: 9000 > 2000\n"
        b"garbage \x00\x00 with NULs\n"
        b"[2026-08-28 11:00:02 TP0] \xff\xfe not utf-8\n"
        b'{"timestamp": 1e30, "event": "request.finished", "rid": "r-2", "obj": {"bootstrap_room": -1}}\n'
    )
    expected["engine/prefill-0_0.log"] = 1
    (engine / "gone_0.log").symlink_to("rotated-away_0.log")
    expected["engine/gone_0.log"] = 1
    (engine / "passwd_0.log").symlink_to("/etc/passwd")
    expected["engine/passwd_0.log"] = 1
    os.mkfifo(engine / "pipe_0.log")
    expected["engine/pipe_0.log"] = 1
    return expected


def snapshot(root: Path, skip: Path) -> dict[str, tuple[int, int, str]]:
    """Mode, mtime and content hash of every entry under ``root`` except the ``skip`` folder."""
    out = {}
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if Path(folder) / d != skip]
        for name in [*dirs, *names]:
            p = Path(folder) / name
            st = os.lstat(p)
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else ""
            out[str(p.relative_to(root))] = (st.st_mode, st.st_mtime_ns, digest)
    return out


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[str, int]]:
    # Temporary files and the working folder are inside tmp_path too, so a stray write shows up.
    (tmp_path / "tmp").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    monkeypatch.chdir(tmp_path / "cwd")
    root = tmp_path / "incident"
    return root, build_corpus(root)


def test_corpus_runs_clean_with_exact_quarantine(tmp_path: Path, corpus: tuple[Path, dict[str, int]]) -> None:
    root, expected = corpus
    out = tmp_path / "out"
    before = snapshot(tmp_path, out)
    result = api.run(root, out)
    assert snapshot(tmp_path, out) == before  # nothing written outside --out (the case folder is inside it)

    man = json.loads((result.case_dir / "manifest.json").read_text())
    assert man["reconciled"] is True
    for f in man["files"]:
        assert f["lines"] == f["ingested"] + f["quarantined"] + f["blank"] + f["duplicate"], f
    rows = pq.read_table(result.case_dir / "quarantine.parquet").to_pylist()
    by_file = Counter(r["source_file"] for r in rows)
    assert {os.path.relpath(root / p, root): by_file.get(p, 0) for p in expected} == expected
    assert set(by_file) == set(expected) - {p for p, n in expected.items() if n == 0}
    assert all("Fix:" in r["reason"] for r in rows)
    assert all(r["excerpt"] is None or len(r["excerpt"]) <= 200 for r in rows)
    assert {e["path"]: e["kind"] for e in man["skipped_inputs"]} == {
        "engine/gone_0.log": "dangling_symlink", "engine/passwd_0.log": "symlink_outside_root", "engine/pipe_0.log": "fifo"}
    assert b"/etc/" not in (result.case_dir / "manifest.json").read_bytes()

    # Everything valid was kept, hostile ids unchanged; the leak between two hostile tenants is found.
    tenants = set(pq.read_table(result.case_dir / "exchanges.parquet", columns=["tenant_id"]).column(0).to_pylist())
    assert {EXPOSED, RECIPIENT, "AUX", "..\\..\\evil", "tab\there", *HOSTILE_TENANTS} <= tenants
    roles = {(n.tenant_id, n.role) for n in result.report.notices}
    assert {(EXPOSED, "exposed"), (RECIPIENT, "recipient")} <= roles

    # Every report file is inside the report folder, named safely, and verifies.
    report = result.report.report_dir
    for p in report.rglob("*"):
        assert p.resolve().is_relative_to(report.resolve())
        assert "\n" not in p.name and "\u202e" not in p.name and ".." not in p.relative_to(report).parts
    assert api.verify(report).ok
    # The report's manifest says which input entries were not read, as the case's does.
    report_man = json.loads((report / "manifest.json").read_text())
    assert report_man["reconciliation"]["skipped_inputs"] == man["skipped_inputs"]


def test_corpus_through_the_cli_is_no_internal_error(tmp_path: Path, corpus: tuple[Path, dict[str, int]],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    root, _ = corpus
    out = tmp_path / "out"
    before = snapshot(tmp_path, out)
    with pytest.raises(SystemExit) as exc:
        main(["run", str(root), "--out", str(out), "--quiet"])
    captured = capsys.readouterr()
    assert exc.value.code == 1, captured.err  # findings: the leak; never 2 (error)
    assert "internal error" not in captured.err and "Traceback" not in captured.err
    assert snapshot(tmp_path, out) == before
