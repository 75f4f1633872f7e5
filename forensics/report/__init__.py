"""Report stage: notification list, per-customer packets, incident summary, audit manifest.

``report(case, config, out)`` reads the case folder (exchanges, quarantine, suspects, evidence,
scan.json, match.json, the ingest manifest) and writes ``OUT/<case name>/`` as in
spec/outputs.md. Every file is private (0600, folders 0700) and byte-identical for the same
inputs and parameters.

Where and how it writes (:func:`report_folder`): the new report is built in a fresh private
folder next to the old one (``OUT/.<name>+new-*``) and swapped into place only when complete, so
a crash, a signal or a second run never leaves a half-written or mixed report; the old report
is kept until then. ``OUT/.<name>+lock`` is held meanwhile: a second run into the same report
folder stops with the holder's pid. A report folder that is a symbolic link, holds one, or holds
files forensics did not write is refused, never written through or silently deleted.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import glob
import io
import json
import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from forensics import csvfile, interrupts, schema
from forensics.artifacts import IngestManifest, JsonObject, ReportManifest, ReportParameters, ScanRecord
from forensics.case import Case, case_lock, file_sha256, find_symlink, folder_lock, make_private_dirs, replace_folder
from forensics.config import CaseConfig, InputSpec, apply_options, iso, load_saved, parse_utc, utc_or_none
from forensics.errors import CaseError, ConfigError, InputError, OutputError, first_few
from forensics.progress import Reporter, reporter
from forensics.report import data as case_data
from forensics.report import manifest, notices, safe, summary
from forensics.report.manifest import VerifyResult, verify
from forensics.report.severity import default_classifier, patterns_text
from forensics.review import LEDGERS, OWN_FILES

__all__ = ["ReportResult", "VerifyResult", "check_ingest_scope", "check_scan_scope", "report", "report_dir_for", "report_folder", "verify", "write_report"]

#: Stage records copied into the report folder (and hashed with the other outputs).
STAGE_RECORDS = ("scan.json", "match.json")
#: Top-level entries of the report folder that are not report outputs (the run's case folder).
NOT_OUTPUTS = {"case"}
#: The folder of a report that holds a copy of the case file the report was made with.
CASE_FILE_DIR = "case_file"
#: Files forensics writes next to manifest.json but not among its outputs: the detached
#: signature of ``--sign`` (issue 11, item 7). A new report may replace them.
MANIFEST_COMPANIONS = {manifest.MANIFEST, manifest.SIGNATURE}


@dataclasses.dataclass
class ReportResult:
    """What the report stage wrote."""

    report_dir: Path
    notices: list[notices.Notice]
    suspects: int
    findings: int
    cross_tenant_findings: int
    packets: list[str]
    outputs: list[JsonObject]  # path, size, sha256 of each output (manifest.json's outputs)
    warnings: list[str] = dataclasses.field(default_factory=list)  # what the user must clean up, once written
    notes: list[str] = dataclasses.field(default_factory=list)  # what the user must know (verdicts out of effect...)

    @property
    def has_findings(self) -> bool:
        """Whether anyone must be notified (any suspect response or finding)."""
        return bool(self.notices)

    def by_role_and_tier(self) -> dict[str, dict[str, int]]:
        """Customers to notify per role (exposed, recipient) and tier."""
        tiers: dict[str, dict[str, int]] = {}
        for n in self.notices:
            tiers.setdefault(n.role, {}).setdefault(n.tier, 0)
            tiers[n.role][n.tier] += 1
        return tiers

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary for the CLI."""
        tiers = self.by_role_and_tier()
        return {
            "report": str(self.report_dir), "suspects": self.suspects, "findings": self.findings,
            "cross_tenant_findings": self.cross_tenant_findings,
            "customers_exposed": sum(1 for n in self.notices if n.role == "exposed"),
            "customers_recipient": sum(1 for n in self.notices if n.role == "recipient"),
            "by_role_and_tier": tiers, "packets": len(self.packets), "outputs": len(self.outputs),
            "warnings": self.warnings, "notes": self.notes,
        }


_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,80}$")


def report_dir_for(out: Path, case_name: str) -> Path:
    """``OUT/<case name>``; a name unfit for a folder gets a sanitised, hashed form."""
    name = case_name if _PLAIN_NAME.match(case_name) and ".." not in case_name else safe.safe_name(case_name)
    return Path(out) / name


def _queries_root() -> Path | None:
    pkg = Path(__file__).resolve().parent.parent
    for cand in (pkg / "_queries", pkg.parent / "queries"):
        if cand.is_dir():
            return cand
    return None


def _query_hashes() -> list[dict[str, str]]:
    root = _queries_root()
    if root is None:
        return []
    return [{"path": p.relative_to(root).as_posix(), "sha256": file_sha256(p)} for p in sorted(root.rglob("*.sql"))]


def _table_csv(case_dir: Path, name: str, columns: tuple[str, ...], order: str) -> bytes:
    """A stage CSV rebuilt from its Parquet table when the stage left none."""
    con = Case(case_dir).connect()
    try:
        rows = con.execute(f"SELECT {', '.join(columns)} FROM {name} ORDER BY {order}").fetchall()
    finally:
        con.close()
    return safe.csv_bytes(columns, [[case_data.iso(v) if hasattr(v, "astimezone") else v for v in r] for r in rows])


#: The evidence files' row order (outputs.md: recipient_request_id, source_request_id; then the rest to break ties:
#: two customers may send one id).
EVIDENCE_ORDER = ("recipient_request_id, source_request_id, recipient_tenant_id NULLS LAST, source_tenant_id NULLS LAST, "
                  "source_kind, recipient_start, finding_id")
#: Why a finding an analyst dismissed is in the report's review.csv.
DISMISSED_WHY = "dismissed by an analyst (verdicts.jsonl)"


def _decided_stage_csvs(report_dir: Path, evidence_bytes: bytes, decided: dict[str, str]) -> bytes:
    """Rewrite the report's evidence.csv and review.csv (copies of the match stage's) as the analysts decided, and
    return evidence.csv's bytes: a dismissed finding moves to review.csv (``why_not_notified`` says so), a confirmed
    candidate to evidence.csv (tier confirmed, the verdict its rule). They listed the match's findings whatever the
    verdicts, so notifications.csv could not be rebuilt from them. Cells stay as the match wrote them."""
    from forensics.review.verdicts import CONFIRMED_RULE, raw_id

    def table(data: bytes) -> tuple[list[str], list[dict[str, str]]]:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
        header = rows[0] if rows else []
        return header, [dict(zip(header, r)) for r in rows[1:]]

    review_path = report_dir / "review.csv"
    ev_header, evidence = table(evidence_bytes)
    rv_header, review = table(review_path.read_bytes()) if review_path.is_file() else (list(schema.REVIEW_CSV), [])

    def verdict(row: dict[str, str]) -> str | None:  # decided by the id as the match wrote it (a cell shows it)
        return decided.get(raw_id(row.get("finding_id", "")))

    def key(row: dict[str, str]) -> tuple[Any, ...]:
        def text(name: str) -> tuple[int, str]:  # the id as the logs hold it; an empty cell (null) last
            shown = row.get(name, "")
            return (1, "") if shown == "" else (0, csvfile.uncell(shown) or shown)
        # outputs.md's order, recipient request id then source request id; two customers may send one id: then
        # by the recipient's tenant, the source's
        return (text("recipient_request_id"), text("source_request_id"), text("recipient_tenant_id"),
                text("source_tenant_id"), row.get("source_kind", ""), _number(row.get("recipient_start", "")),
                row.get("finding_id", ""))

    confirmed = [row | {"tier": "confirmed", "tier_rule": csvfile.cell(CONFIRMED_RULE)} for row in review if verdict(row) == "confirm"]
    dismissed = [row | {"why_not_notified": csvfile.cell(DISMISSED_WHY)} for row in evidence if verdict(row) == "dismiss"]
    listed = sorted([r for r in evidence if verdict(r) != "dismiss"] + confirmed, key=key)
    waiting = sorted([r for r in review if verdict(r) != "confirm"] + dismissed, key=key)
    data = csvfile.cells_text(ev_header, [[r.get(c, "") for c in ev_header] for r in listed]).encode("utf-8")
    safe.write_bytes(report_dir / "evidence.csv", data)
    if review_path.is_file() or waiting:
        safe.write_bytes(review_path, csvfile.cells_text(rv_header, [[r.get(c, "") for c in rv_header] for r in waiting]).encode("utf-8"))
    return data


def _stage_rows(case: Path) -> list[dict[str, str]]:
    """The findings verdicts can name (the match stage's evidence and review tables), each with the columns that
    place its passage, as evidence.csv and review.csv write them (the cells a verdict records)."""
    from forensics.review.verdicts import PASSAGE_KEYS

    c = Case(case)
    rows: list[dict[str, str]] = []
    con = c.connect()
    try:
        for table in ("evidence", "review"):
            if not c.has(table):
                continue
            names = ("finding_id", *PASSAGE_KEYS, "passages")  # every passage of a finding: its extent decides
            for values in con.execute(f"SELECT {', '.join(names)} FROM {table}").fetchall():
                rows.append({k: "" if v is None else csvfile.cell(str(v)) for k, v in zip(names, values)})
    finally:
        con.close()
    return rows


def _number(shown: str) -> float:
    """A number cell's value for sorting (an empty or odd cell first)."""
    try:
        return float(shown)
    except ValueError:
        return float("-inf")


def _copy_stage_csv(case_dir: Path, report_dir: Path, name: str, columns: tuple[str, ...], order: str) -> bytes:
    src = case_dir / f"{name}.csv"
    if src.is_file():
        safe.copy_file(src, report_dir / f"{name}.csv")
        return src.read_bytes()
    data = _table_csv(case_dir, name, columns, order)
    safe.write_bytes(report_dir / f"{name}.csv", data)
    return data


def _inputs_root(cfg: CaseConfig, files: list[dict[str, Any]]) -> Path:
    if cfg.file is not None:
        return Path(cfg.file).resolve().parent
    paths = [Path(str(f.get("path") or f.get("file"))).resolve().parent for f in files if f.get("path") or f.get("file")]
    paths += [Path(i.path).resolve() if Path(i.path).is_dir() else Path(i.path).resolve().parent for i in cfg.inputs]
    if not paths:
        return Path.cwd()
    return Path(os.path.commonpath([str(p) for p in paths]))


#: Keys of the ingest manifest that the report manifest repeats as its ``reconciliation``.
RECONCILIATION_KEYS = ("tables", "reconciled", "notes", "timezone", "zone_assumed_rows", "tenant_field", "tokenizer",
                       "tokenizer_sha256", "skipped_inputs")


def _time_ranges(case_dir: Path) -> dict[str, list[str]]:
    con = Case(case_dir).connect()
    try:
        rows = con.execute(
            "SELECT source_file, min(t), max(t) FROM ("
            " SELECT source_file, received_at AS t FROM exchanges UNION ALL"
            " SELECT response_source_file, completed_at FROM exchanges WHERE response_source_file IS NOT NULL UNION ALL"
            " SELECT source_file, time FROM engine_events) WHERE source_file IS NOT NULL GROUP BY 1"
        ).fetchall()
    finally:
        con.close()
    out: dict[str, list[str]] = {}
    for r in rows:
        span = [case_data.iso(r[1]), case_data.iso(r[2])]
        out[str(r[0])] = out[str(Path(r[0]).resolve())] = span
    return out


def _stray_files(folder: Path, carried: str | None) -> list[str]:
    """Files of an existing report folder that its manifest does not list as forensics' own.

    ``carried``: the entry holding the case folder being reported, which moves into the new report.
    """
    # Read as plain JSON, not as a ReportManifest: a report an older version wrote (no format key)
    # must still be recognised as forensics' own, or it could never be replaced by a new one.
    try:
        man = json.loads((folder / manifest.MANIFEST).read_text(encoding="utf-8"))
        recorded = {o["path"] for o in man["outputs"]}
        excluded = set(man.get("outputs_excluded", [])) & NOT_OUTPUTS
    except (OSError, ValueError, KeyError, TypeError):  # no readable manifest: nothing in it is known to be ours
        recorded, excluded = set(), set()
    if carried is not None:
        excluded.add(carried)
    stray = []
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_dir() or rel.split("/")[0] in excluded or rel in recorded or rel in MANIFEST_COMPANIONS or rel in OWN_FILES:
            continue
        if p.name.startswith(".") and p.name.endswith(".tmp"):  # an atomic write's leftover (old versions wrote in place)
            continue
        stray.append(rel)
    return stray


def _carried(keep: Path | None, final: Path) -> str | None:
    """The top-level entry of the report folder ``final`` that holds the case folder ``keep``, if any."""
    if keep is None or not keep.resolve().is_relative_to(final.resolve()) or keep.resolve() == final.resolve():
        return None
    top = keep.resolve().relative_to(final.resolve()).parts[0]
    return top if top in NOT_OUTPUTS else None  # anywhere else it would be hashed as an output next time


def _check_replaceable(final: Path, carried: str | None) -> None:
    """Refuse to replace a report folder that is or holds a symbolic link, is a file, or holds others' files."""
    link = find_symlink(final)
    if link is not None:
        where = "the report folder is" if link == final else "the report folder holds"
        raise OutputError(f"{where} a symbolic link: a report is never written through one", file=link,
                          fix="remove the link (and find out who made it), or choose another --out")
    if not os.path.lexists(final):
        return
    if not final.is_dir():
        raise OutputError("the report folder's path is not a folder", file=final, fix="move it away or choose another --out")
    stray = _stray_files(final, carried)
    if stray:
        shown = ", ".join(stray[:5]) + (f" and {len(stray) - 5} more" if len(stray) > 5 else "")
        raise OutputError(f"the report folder holds files forensics did not write ({shown}); a new report replaces "
                          "the whole folder", file=final, fix="move those files out of it, or choose another --out")
    # Checked before any work: found only once the new report is in place, the old one would be left half deleted.
    for folder in (final, *sorted(p for p in final.rglob("*") if p.is_dir())):
        # Removing a folder's entries takes listing it (read) as well as writing and entering it.
        if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
            raise OutputError("the report folder holds a folder this user cannot read and write, so the old report could "
                              "not be removed when the new one replaces it", file=folder,
                              fix=f"make it readable and writable (chmod -R u+rwx {shlex.quote(str(final))}), or choose "
                                  "another --out")


def check_same_incident(final: Path, case: Path, case_file: Path | None) -> None:
    """Refuse to replace the report folder ``final`` with the report of ``case`` when it holds another incident's
    report: none of its inputs is one the case read, and it was not built from the same case file (two case files
    named alike, or two cases without one, both called "case"). Replaced, it would have gone without a word, and
    its records of verdicts and notices sent would have been carried into the new one. A report of the same case
    file (logs added, left out, or exported again) or sharing an input with the case is replaced. Called by
    ``report`` and ``run`` while they hold the report folder's lock, before the swap."""
    if not (final / manifest.MANIFEST).is_file() or not (case / "manifest.json").is_file():
        return
    try:
        old = json.loads((final / manifest.MANIFEST).read_text(encoding="utf-8"))
        new = json.loads((case / "manifest.json").read_text(encoding="utf-8")).get("files")
        inputs = old.get("inputs")
    except (OSError, ValueError, AttributeError):
        return  # an unreadable old manifest: nothing to compare (verify names it)
    old_shas = _logged(inputs)
    new_shas = _logged(new)
    if not old_shas or not new_shas or old_shas & new_shas:
        return
    recorded = old.get("case_file") if isinstance(old.get("case_file"), dict) else None
    root = old.get("inputs_root")
    if case_file is not None and recorded is not None and isinstance(recorded.get("path"), str) and isinstance(root, str):
        if (final / root / recorded["path"]).resolve() == Path(case_file).resolve():
            return  # the same case file: this incident's logs, exported again
    built = ("no case file" if recorded is None else "a case file, and this report is given none" if case_file is None
             else "another case file")
    raise OutputError(f"the report folder holds the report of another case: none of its {len(old_shas)} input file"
                      f"{'s' if len(old_shas) != 1 else ''} that held records is one this case read, and it was built from "
                      f"{built}; replacing it would carry its records of verdicts and notices sent into this one", file=final,
                      fix=("give --config the case file the report was built from, if this is the same incident's logs "
                           "exported again; else " if case_file is None and recorded is not None else "")
                      + "give this case's report another --out (or another case name), or move the old report away")


def _logged(entries: Any) -> set[str]:
    """The SHA-256 of the input files (manifest entries) that held records: an empty log or a file skipped (a note
    beside the logs) is no mark of an incident, and two incidents may share one."""
    if not isinstance(entries, list):
        return set()
    return {e["sha256"] for e in entries if isinstance(e, dict) and isinstance(e.get("sha256"), str) and _held_records(e)}


def _held_records(entry: dict[str, Any]) -> bool:
    """Whether a manifest entry's file held records: read, or found already read from another copy (its duplicate
    count: a log and its gzipped copy, whichever was read first)."""
    counts = [entry[k] for k in ("ingested", "duplicate") if isinstance(entry.get(k), int)]
    return sum(counts) > 0


def _leftover(path: Path) -> str:
    """The warning for an old report (or a killed run's leftover) that could not be deleted."""
    quoted = shlex.quote(str(path))  # a line to copy into a shell: a space in --out must not split it
    return (f"{path}: an old report folder could not be deleted (most often a folder in it that cannot be read or "
            f"written); it still holds customer data. Fix: chmod -R u+rwx {quoted} && rm -rf {quoted}")


@contextlib.contextmanager
def report_folder(out: Path, case_name: str, keep: Path | None = None, warnings: list[str] | None = None) -> Iterator[Path]:
    """Lock ``OUT/<case name>`` and yield a fresh private folder to build its new report in.

    When the block ends without an error the new folder replaces the report folder (atomically
    where the system can, see :func:`forensics.case.replace_folder`); otherwise it is deleted
    and the old report stays as it was. ``keep``: a case folder being read that lies inside the
    old report folder (``run``'s ``case/``), moved into the new one. ``OUT`` itself may exist
    (its mode is left alone) or is created private; it must not be a file. ``warnings`` gets a
    line for each old folder that could not be deleted (the new report is in place all the same).
    """
    warnings = [] if warnings is None else warnings
    out = Path(out)
    if os.path.lexists(out) and not out.is_dir():
        raise OutputError("--out is not a folder", file=out, fix="give --out a folder (or a path that does not exist yet)")
    make_private_dirs(out)
    final = report_dir_for(out, case_name)
    with folder_lock(out / f".{final.name}+lock", f"the report folder {final}"):
        carried = _carried(keep, final) if os.path.isdir(final) else None
        _check_replaceable(final, carried)
        # Leftovers of a run killed mid-way (only a run holding this lock makes or removes them).
        for stale in sorted(glob.glob(glob.escape(str(out / f".{final.name}+")) + "*")):
            if os.path.isdir(stale) and not os.path.islink(stale) and Path(stale).name.split("+", 1)[1][:4] in ("new-", "old-"):
                try:
                    shutil.rmtree(stale)
                except OSError:  # in the way of nothing: the new report is built under another name
                    warnings.append(_leftover(Path(stale)))
        building = Path(tempfile.mkdtemp(prefix=f".{final.name}+new-", dir=out))
        moved = False
        try:
            os.chmod(building, 0o700)
            _carry_ledgers(final, building)
            yield building
            interrupts.stop_if_signalled()  # (a signal whose exception was lost must not let the report be replaced)
            if carried is not None:
                moved = True
                os.rename(final / carried, building / carried)
            left = replace_folder(building, final, out / f".{final.name}+old-{os.getpid()}")
        except BaseException:
            # Stopped before the swap: the case folder carried over goes back to the old report.
            if moved and carried and os.path.isdir(building / carried) and not os.path.lexists(final / carried):
                os.rename(building / carried, final / carried)
            shutil.rmtree(building, ignore_errors=True)
            raise
        if left is not None:
            warnings.append(_leftover(left))


def _carry_ledgers(final: Path, building: Path) -> None:
    """Copy the old report's ledgers (verdicts, notices sent) into the new one, byte for byte.

    They are records of people's decisions, not outputs: a re-render must never lose or change
    them. Copied, not moved, so a failed rebuild leaves the old report whole.
    """
    from forensics.review import chain

    for name in LEDGERS:
        src = final / name
        if not os.path.isfile(src) or os.path.islink(src):
            recorded, _ = chain.recorded_prefix(final, name)
            if recorded:
                # Rendered without it, the report would record no such ledger and verify would pass: the
                # decisions or notices sent would be gone from the record without a trace.
                raise CaseError(f"{name} is {'not a plain file' if os.path.lexists(src) else 'missing'}: the report was "
                                f"rendered with {recorded} line(s) of it", file=src,
                                fix="restore it from the copy the team keeps (review, notified and verify print its last "
                                    "line's hash) before rendering again; a report never starts a ledger afresh over a lost one")
            continue
        chain.read_report_ledger(final, name)  # nothing is rendered from edited decisions
        safe.write_bytes(building / name, src.read_bytes())


def _ledgers(report_dir: Path) -> dict[str, dict[str, Any]]:
    """Each ledger present in ``report_dir``: its line count and last line's hash (for the manifest)."""
    from forensics.review import chain

    out = {}
    for name in LEDGERS:
        if (report_dir / name).is_file():
            c = chain.read_valid(report_dir / name)
            out[name] = {"entries": len(c.entries), "head": c.head}
    return out


def _config_for(case: Path, config: CaseConfig | None) -> CaseConfig:
    """The configuration to report with: ``config``, with what the earlier stages auto-detected."""
    if config is None:
        if not (case / "config.json").is_file():
            raise CaseError("the case has no config.json", file=case, fix="run `forensics ingest` first or give --config")
        return load_saved(case / "config.json")
    if (case / "config.json").is_file():
        # A case file may say "auto"; the earlier stages recorded what they detected.
        saved = load_saved(case / "config.json")
        for key in ("real_ceiling_tokens", "advertised_window_tokens"):
            if getattr(config, key) == "auto" and isinstance(getattr(saved, key), int):
                config.set(key, getattr(saved, key), saved.source(key) if saved.source(key) != "default" else "auto-detected")
    return config


def check_scan_scope(case: Path, config: CaseConfig) -> None:
    """Refuse a case file whose models, window or limits differ from those the case was scanned with.

    The report states them as its scope (summary.md, the manifest's ``parameters.case``, which
    ``verify --rerun`` scans with again): taken from another case file than the scan's, the report
    would describe a search that never ran and verify would find nothing wrong. Refused rather than
    replaced by the scan's values, so the manifest never records values as coming from a case file
    that does not hold them.
    """
    case = Path(case)
    if not (case / "scan.json").is_file():
        return  # not scanned: the report says which stage to run
    used = ScanRecord.read(case / "scan.json", "scan").parameters
    scanned = {"models": _model_set((used.models or "").split(",")),
               "window_start": used.window_start, "window_end": used.window_end,
               "real_ceiling_tokens": used.real_ceiling_tokens, "advertised_window_tokens": used.advertised_window_tokens}
    config = _config_for(case, config)  # "auto" limits as the scan resolved them
    given = {"models": _model_set(config.models),
             "window_start": iso(config.window_start) if config.window_start else None,
             "window_end": iso(config.window_end) if config.window_end else None,
             "real_ceiling_tokens": config.real_ceiling_tokens, "advertised_window_tokens": config.advertised_window_tokens}
    differ = [f"{key} = {_shown(given[key])} (the scan used {_shown(scanned[key])})" for key in scanned
              if given[key] != scanned[key] and given[key] != "auto"]  # "auto" the scan left unresolved: nothing to state
    if differ:
        raise ConfigError(f"the case file says {'; '.join(differ)}: the report would state a scope the scan did not use",
                          file=config.file, fix="give --config the case file the scan used (or make this one say what it "
                                                "used), or scan and match again with this one: forensics scan --case "
                                                f"{shlex.quote(str(case))}"
                                                + (f" --config {shlex.quote(str(config.file))}" if config.file else "")
                                                + f", then forensics match --case {shlex.quote(str(case))}")


def check_ingest_scope(case: Path, config: CaseConfig, content_only: bool = False) -> None:
    """Refuse a case file whose inputs or reading settings differ from those the case was ingested with.

    ``content_only`` (the scan's check: it reads the tables, not the names): only what makes other tables, the
    time zone and the tenant field, and inputs none of which the case ingested (another incident's case file);
    the names, sizes and reading a re-run would repeat, and inputs added or left out, are the report's.

    The report's manifest records the case file's inputs, time zone, tenant field and tokenizer, and
    ``verify --rerun`` ingests from them again: taken from a case ingested otherwise (other logs, or the
    same logs read in another zone), the manifest would name logs the report never read, and the re-run
    would build other tables and call a sound report drifted. Refused, as :func:`check_scan_scope`
    refuses another scope.

    The case file's inputs must list the files the ingest read, under the names it recorded them by (the
    tables' ``source_file``: a re-run names them relative to the case file), of the size it read (a log grown
    since would give the re-run more lines), read alike (the format the case file gives, or the one sniffed
    again; the same mapping profile) and with the same entries not read (:func:`_inputs_differ`); with a
    tokenizer, the ceiling rows were decided against by their size must be the case file's
    (:func:`_ceiling_differs`). An input that cannot be listed (moved away) is not compared: verify names
    missing inputs itself.
    """
    case = Path(case)
    if not (case / "manifest.json").is_file():
        return  # not ingested: the report says which stage to run
    ingested = IngestManifest.read(case / "manifest.json", "ingest")
    differ = [f"{key} = {_shown(given)} (the ingest used {_shown(used)})"
              for key, given, used in (("timezone", config.timezone, ingested.timezone),
                                       ("tenant_field", config.tenant_field, ingested.tenant_field))
              if used is not None and given != used]
    tokenizer = Path(config.tokenizer) if config.tokenizer else None
    used_sha = ingested.tokenizer_sha256
    if not content_only and ((tokenizer.name if tokenizer else None) != ingested.tokenizer or (
            tokenizer is not None and isinstance(used_sha, str) and tokenizer.is_file() and file_sha256(tokenizer) != used_sha)):
        differ.append(f"tokenizer = {_shown(tokenizer.name if tokenizer else None)} (the ingest used "
                      f"{_shown(ingested.tokenizer)}{', another file of that name' if tokenizer and ingested.tokenizer == tokenizer.name else ''})")
    if config.inputs:
        differ += (_holds_none_ingested(case, config, ingested.files) if content_only
                   else _inputs_differ(case, config, ingested.files, ingested.skipped_inputs))
    if ingested.tokenizer is not None and not content_only:  # (without one no row was decided by its size)
        differ += _ceiling_differs(config, ingested.files, ingested.prompt_tokens_band)
    if differ:
        raise ConfigError(f"the case file says {'; '.join(differ)}: the report's manifest would name inputs and "
                          "settings the case was not read with, and verify --rerun would ingest those instead",
                          file=config.file, fix="ingest the logs again with this case file (forensics run CASE.toml runs "
                                                "every stage from it), or give --config the case file the ingest used")


def _ceiling_differs(config: CaseConfig, files: Iterable[Any], band: Any) -> list[str]:
    """The ceiling an ingest with a tokenizer decided rows against by their size (``prompt_tokens_band``'s
    ``ceiling_by_file``), where it is not the case file's: a re-run would count other rows exactly."""
    if not config.tokenizer:
        return []  # the tokenizer check names the difference
    expected = config.real_ceiling_tokens if isinstance(config.real_ceiling_tokens, int) else None
    by_file = band.get("ceiling_by_file") if isinstance(band, dict) else None
    by_file = by_file if isinstance(by_file, dict) else {}
    used = {by_file.get(f["sha256"]) for f in files if isinstance(f, dict) and isinstance(f.get("sha256"), str)
            and f.get("format") and str(f.get("status") or "").startswith("ingested")}
    if used and used != {expected}:
        shown = ", ".join(sorted(_shown(c) for c in used))
        return [f"real_ceiling_tokens = {_shown(expected)} at ingest (the ingest decided rows by their size against {shown})"]
    return []


def _read_alike(entry: dict[str, Any], spec: InputSpec, path: Path) -> bool:
    """Whether a re-run reads ``path`` as the ingest did (``entry``: its manifest entry): in the format the case
    file gives it (``spec``) or, with none, the one sniffed again; skipped or read alike."""
    from forensics.ingest import JSON_ARRAY_STATUS, sniff
    from forensics.ingest.registry import FORMATS, AmbiguousFormat

    status, fmt = str(entry.get("status") or ""), entry.get("format")
    if status.startswith(("skipped: not UTF-8", "skipped: an archive")):
        return True  # skipped whatever the format
    if status == JSON_ARRAY_STATUS:  # skipped again, sniffed or given, unless given a format that reads arrays
        return spec.format == "auto" or FORMATS.get(spec.format).json_lines
    if spec.format != "auto":
        # A file skipped as of no known format, ambiguous or damaged at its head was sniffed: forced, it is read.
        return status.startswith("skipped: Parquet") or fmt == spec.format
    if status.startswith("skipped: Parquet"):
        return False  # only a format given for it skips a Parquet file so
    try:
        sniffed = sniff(path)
    except (AmbiguousFormat, OSError):
        sniffed = None
    return sniffed is None if status.startswith("skipped") else fmt == sniffed


def _holds_none_ingested(case: Path, config: CaseConfig, files: Iterable[Any]) -> list[str]:
    """The scan's check of a case file's inputs (:func:`check_ingest_scope`, ``content_only``): a sentence when none
    of the files they hold is one the case ingested (another incident's case file), else nothing. It stops at the
    first file that is: one found where the ingest read it, of its size, or of the content of an ingested file (a
    file is hashed only when an ingested file has its size)."""
    from forensics.ingest import display_path, expand_inputs, named_path

    base = Path(config.file).parent if config.file else None
    # The files that held records (an empty log or a skipped note beside the logs marks no incident).
    entries = [f for f in files if isinstance(f, dict) and isinstance(f.get("sha256"), str) and _held_records(f)]
    shas = {f["sha256"] for f in entries}
    sizes = {f["size"] for f in entries if isinstance(f.get("size"), int)}
    # A file where the ingest read one is this incident's log, grown or exported again in place since.
    places = {p for f in entries if isinstance(f.get("abs_paths"), list) for p in f["abs_paths"]}
    other: set[str] = set()
    for spec in config.inputs:
        try:
            found, _ = expand_inputs([spec.path], exclude=case)
        except (InputError, OSError):
            continue  # moved away: nothing to compare
        for path, _ in found:
            try:
                if str(named_path(path)) in places:
                    return []
                size = path.stat().st_size
                if size in sizes and file_sha256(path) in shas:
                    return []
            except OSError:
                pass
            other.add(display_path(path, base))
    if not other:
        return []
    return [f"inputs hold none of the files this case ingested ({len(other)} other file{'s' if len(other) > 1 else ''}: "
            f"{first_few(sorted(other), 3)})"]


def _inputs_differ(case: Path, config: CaseConfig, files: Iterable[Any], skipped_inputs: Iterable[Any] = ()) -> list[str]:
    """How the files ``config``'s inputs list differ from the ingested ``files`` (the ingest manifest's
    entries), in words; empty when a re-run from them reads the same files under the same names.

    Files are matched by the name the ingest records (``source_file`` in the tables): relative to the case
    file's folder, as a re-run names them. A file under no recorded name is hashed only when an ingested
    file has its size (so a file never ingested is refused without reading it)."""
    from forensics.ingest import display_path, expand_inputs, input_zones, named_path
    from forensics.ingest.registry import zone_for

    base = Path(config.file).parent if config.file else None
    recorded: dict[str, list[dict[str, Any]]] = {}  # name -> entries (several: other content under one name)
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("sha256"), str):
            continue
        names: list[Any] = f["paths"] if isinstance(f.get("paths"), list) else [f.get("path")]
        for name in names:
            if isinstance(name, str):
                recorded.setdefault(name, []).append(f)
    shas = {f["sha256"] for entries in recorded.values() for f in entries}
    sizes = {f["size"] for entries in recorded.values() for f in entries if isinstance(f.get("size"), int)}
    unread: list[str] = []
    renamed: dict[str, str] = {}  # SHA-256 -> the name a re-run gives it
    grown: list[str] = []
    moved: list[str] = []
    versions: list[str] = []
    formats: list[str] = []
    named: set[str] = set()
    special: set[tuple[str, str]] = set()  # entries not read (links out, devices...): (name, kind)
    listed_all = True
    listings: list[tuple[InputSpec, list[tuple[Path, bool]]]] = []
    for spec in config.inputs:
        try:
            found, passed = expand_inputs([spec.path], exclude=case)
        except (InputError, OSError):
            listed_all = False  # moved away: verify names missing inputs; what it held cannot be compared
            continue
        special |= {(display_path(item.path, base), item.kind) for item in passed}
        listings.append((spec, found))
    # The zones a re-run reads their times in (once for every file: per entry, it globbed and walked again each time)
    zones = input_zones([path for _, found in listings for path, _ in found], config, exclude=case)
    for spec, found in listings:
        for path, _ in found:
            name = display_path(path, base)
            named.add(name)
            try:
                size = path.stat().st_size
                entries = recorded.get(name)
                if entries is None:
                    sha = file_sha256(path) if size in sizes else None
                    if sha is not None and sha in shas:
                        renamed.setdefault(sha, name)
                    else:
                        unread.append(name)
                    continue
            except OSError:
                unread.append(name)  # unreadable now: a re-run could not read it either
                continue
            if len(entries) > 1:
                versions.append(name)
                continue
            entry = entries[0]
            places = entry.get("abs_paths")
            if isinstance(places, list) and places and str(named_path(path)) not in places:
                moved.append(name)  # a copy elsewhere: the manifest records where the inputs lie
                continue
            if isinstance(entry.get("size"), int) and size != entry["size"]:
                grown.append(name)
            if not _read_alike(entry, spec, path):
                formats.append(f"{name}: {entry.get('format') or str(entry.get('status') or 'no known format')}, "
                               f"here {spec.format if spec.format != 'auto' else 'sniffed again'}")
            elif spec.profile is not None and entry.get("profile") != spec.profile.to_json():
                formats.append(f"{name}: another mapping profile")
            elif entry.get("format") and entry.get("zone_assumed"):  # (content with no time lacking a zone reads alike)
                had = entry.get("zone") or zone_for(entry.get("format"), config.timezone)
                want = zones.get(path) or zone_for(entry.get("format"), config.timezone)
                if had != want:
                    formats.append(f"{name}: its times with no zone read as {had}, here {want}")
    left_out = [name for name, entries in recorded.items()
                if name not in named and not any(f["sha256"] in renamed for f in entries)] if listed_all else []
    differ = []
    for what, names in (("this case did not ingest", unread),
                        ("this case recorded under another name than a re-run from this case file gives it (ingested without this "
                         "case file, through a linked folder, or from another folder)",
                         list(renamed.values())),
                        ("this case ingested from another folder", moved),
                        ("changed in size since the ingest read them", grown),
                        ("ingested in more than one version under that name", versions)):
        if names:
            differ.append(f"inputs include {len(names)} file{'s' if len(names) > 1 else ''} {what} ({first_few(sorted(names), 3)})")
    if formats:
        differ.append(f"inputs read {len(formats)} file{'s' if len(formats) > 1 else ''} otherwise than the ingest did "
                      f"({first_few(sorted(formats), 3)})")
    if left_out:
        differ.append(f"inputs leave out {len(left_out)} file{'s' if len(left_out) > 1 else ''} this case ingested "
                      f"({first_few(sorted(left_out), 3)})")
    recorded_special = {(str(e.get("path")), str(e.get("kind"))) for e in skipped_inputs if isinstance(e, dict)}
    if listed_all and special != recorded_special:
        changed = sorted(f"{name} ({kind})" for name, kind in special ^ recorded_special)
        differ.append(f"inputs hold other entries that are not read than the ingest found ({first_few(changed, 3)})")
    return differ


def _model_set(names: Iterable[str]) -> str:
    """Model names as a set, in words: the same ones listed in another order, or spaced otherwise (as
    scan.json's one line lists them), are the same scope."""
    return ", ".join(sorted({name.strip() for name in names if name.strip()}))


def _shown(value: Any) -> str:
    return "(not set)" if value is None or value == "" else str(value)


def report(case: Path, config: CaseConfig | None, out: Path, progress: Reporter | None = None,
           sign: Path | None = None, options: dict[str, Any] | None = None) -> ReportResult:
    """Write the report folder ``OUT/<case name>/`` for a case that has been scanned and matched.

    ``options``: [report] values given on the command line (by key; ``None``: not given), over the case's.

    The case is read under its shared lock (no ingest, scan or match may change it meanwhile);
    the report folder is written as :func:`report_folder` says. ``sign``: an Ed25519 private key
    whose signature of manifest.json (manifest.json.sig) is written before the folder is swapped
    in, so a report is never in place unsigned when a signature was asked for.
    """
    case = Path(case)
    reading = case_lock(case, shared=True) if case.is_dir() else contextlib.nullcontext()
    warnings: list[str] = []
    with reading:  # the checks read the stage records the report is built from: no stage may change them meanwhile
        if config is not None:
            check_scan_scope(case, config)
            check_ingest_scope(case, config)
        config = _config_for(case, config)
        if options:
            apply_options(config, options)
        with report_folder(out, config.name, keep=case, warnings=warnings) as building:
            check_same_incident(report_dir_for(out, config.name), case, config.file)
            result = render_over(case, config, building, report_dir_for(out, config.name), progress, sign)
    result.report_dir = report_dir_for(out, config.name)
    result.warnings = warnings
    return result


def render_over(case: Path, config: CaseConfig, building: Path, before: Path, progress: Reporter | None,
                sign: Path | None) -> ReportResult:
    """Write the report into ``building`` as the one to replace the report at ``before``: with what that one carries
    (its references' key, since when it listed each customer), said when it was signed and this one is not, and
    signed with ``sign``, inside the folder before it is swapped in (``report`` and ``run`` both)."""
    result = write_report(case, config, building, progress, carried_references_key(before), carried_listed_since(before))
    result.notes.extend(unsigned_note(before, sign))
    sign_report(building, sign)
    return result


def unsigned_note(before: Path, key: Path | None) -> list[str]:
    """The note for a render with no key that replaces a signed report (the signature goes with it, as it would no
    longer match; said, since whoever relies on it must sign again)."""
    if key is not None or not (Path(before) / manifest.SIGNATURE).is_file():
        return []
    return [f"the report this one replaces was signed ({manifest.SIGNATURE}); this one is not, and the old signature is "
            "gone with it: give --sign KEY.pem to sign it"]


def sign_report(report_dir: Path, key: Path | None) -> None:
    """Write manifest.json.sig with ``key`` into a report being built (nothing without a key)."""
    if key is not None:
        from forensics.verify import seal

        seal(report_dir, key)


def carried_listed_since(report_dir: Path) -> dict[str, str]:
    """Since when the report in ``report_dir`` listed each customer (its manifest's ``listed_since``; a report written
    before that was recorded listed each customer of its notifications.csv since its last log record), for the render
    that replaces it. Empty when there is no report there."""
    try:
        man = json.loads((Path(report_dir) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(man, dict):
        return {}
    since = man.get("listed_since")
    if isinstance(since, dict):
        return {str(k): str(v) for k, v in since.items() if isinstance(v, str)}
    last = (man.get("counts") or {}).get("last_received") if isinstance(man.get("counts"), dict) else None
    listed = listed_tenants(Path(report_dir))
    return {t: last for t in sorted(listed)} if listed and isinstance(last, str) and last else {}


def listed_tenants(report_dir: Path) -> set[str] | None:
    """The customers of a report's notifications.csv, by their ids as the logs hold them; None when it cannot be read."""
    try:
        with open(report_dir / "notifications.csv", newline="", encoding="utf-8") as fh:
            return {csvfile.uncell(r.get("tenant_id") or "") or "" for r in csv.DictReader(fh)}
    except (OSError, ValueError, csv.Error):
        return None


def listed_since_now(notices_rows: list[Any], last_received: str | None, carried: dict[str, str]) -> dict[str, str] | None:
    """Since when each customer of the list has been listed: the carried time of one the report it replaces listed (never
    later than this report's last record), else this report's last record (no report can predate it). Added logs hold
    later records: the report's last record moved every customer's deadline, and a notice sent late became on time."""
    if not last_received:
        return None
    now = parse_utc(last_received, "counts.last_received")
    out: dict[str, str] = {}
    for tenant in sorted({n.tenant_id for n in notices_rows}):
        kept = utc_or_none(carried.get(tenant))  # (an unreadable carried time counts as none)
        out[tenant] = iso(min(kept, now) if kept is not None else now)
    return out or None


def carried_references_key(report_dir: Path) -> bytes | None:
    """The key of the references the report in ``report_dir`` cited (its manifest's ``references_key``), for the
    render that replaces it: the references in notices already sent must keep naming the same findings. A report
    written before the key was recorded keyed them with its evidence.csv's bytes, which give it again. None when
    there is no report there."""
    try:
        man = json.loads((Path(report_dir) / "manifest.json").read_text(encoding="utf-8"))
        key = man.get("references_key") if isinstance(man, dict) else None
        if isinstance(key, str) and len(key) == 64:
            return bytes.fromhex(key)
        if key is None and (Path(report_dir) / "evidence.csv").is_file():
            return notices.evidence_key((Path(report_dir) / "evidence.csv").read_bytes())
        return None
    except (OSError, ValueError):
        return None


def write_report(case: Path, config: CaseConfig, report_dir: Path, progress: Reporter | None = None,
                 references_key: bytes | None = None, listed_since: dict[str, str] | None = None) -> ReportResult:
    """Write every report file into ``report_dir``, a new empty folder (see :func:`report_folder`).

    ``references_key``: the key of the references notices cite, kept from the report this one replaces
    (:func:`carried_references_key`); a first render derives it from its evidence. ``listed_since``: since when the
    report this one replaces listed each customer (:func:`carried_listed_since`)."""
    case = Path(case)
    config = _config_for(case, config)
    task = reporter(progress).task("report", total=6)
    classifier = default_classifier()
    data = case_data.load(case, classifier, config.models)
    ledgers = _ledgers(report_dir)  # refuses a broken chain: no list may rest on edited decisions
    decided: dict[str, str] = {}
    notes: list[str] = []
    if ledgers.get("verdicts.jsonl", {}).get("entries"):
        from forensics.review import VERDICTS, chain, verdicts

        entries = chain.read_valid(report_dir / VERDICTS, verdicts.REQUIRED).entries
        verdicts.check_entries(entries, report_dir / VERDICTS)
        # Logs added since a verdict may have given its finding another id: it follows its passage, or is out of effect.
        resolution = verdicts.resolve(entries, _stage_rows(case))
        decided = verdicts.decisions(entries, resolution)
        case_data.apply_verdicts(data, classifier, entries, decided, frozenset(resolution.widened))
        data.verdict_resolution = resolution
        ledgers["verdicts.jsonl"].update(resolution.to_json())
        notes.extend(verdicts.resolution_notes(resolution))
    task.advance()

    for record in STAGE_RECORDS:  # the stages' own records (parameters, control sample) travel with the report
        if (case / record).is_file():
            safe.copy_file(case / record, report_dir / record)
    _copy_stage_csv(case, report_dir, "suspects", schema.SUSPECTS_CSV, "received_at NULLS LAST, request_id, tenant_id NULLS LAST")
    if (case / "review.csv").is_file():  # candidates that put nobody on the list, for an analyst to look at
        safe.copy_file(case / "review.csv", report_dir / "review.csv")
    evidence_bytes = _copy_stage_csv(case, report_dir, "evidence", schema.EVIDENCE_CSV, EVIDENCE_ORDER)
    if decided:
        evidence_bytes = _decided_stage_csvs(report_dir, evidence_bytes, decided)

    rows = notices.build_notices(data, classifier)
    safe.write_bytes(report_dir / "notifications.csv", safe.csv_bytes(notices.NOTIFICATION_COLUMNS, [n.csv_row() for n in rows]))
    # The reference key is the first render's evidence: the same for the same evidence, unknown to customers, and kept
    # by every later render (a verdict or logs added re-keyed every reference, and a customer quoting one from a notice
    # sent could no longer be traced).
    key = references_key or notices.evidence_key(evidence_bytes)
    refs = notices.references(data.findings, key)
    safe.write_bytes(report_dir / "references.csv", safe.csv_bytes(
        ("reference", "finding_id", "recipient_request_id", "recipient_tenant_id", "source_request_id", "source_tenant_id"),
        [[refs[f.finding_id], f.finding_id, *f.recipient_key, *f.source_key] for f in data.findings],
    ))
    task.advance()
    packets = notices.write_packets(report_dir, rows, data, refs, config.name, classifier,
                                    notices.report_settings(config.section("report"), config.file))
    task.advance()

    svgs = summary.build_plots(config, data, rows)
    plots_dir = safe.private_dir(report_dir / "plots")
    for pid, svg in svgs.items():
        safe.write_text(plots_dir / f"{pid}.svg", svg)
    secs = summary.sections(config, data, rows)
    if data.verdicts:
        from forensics.review.verdicts import summary_section

        secs.append(summary_section(data.verdicts, data.verdict_resolution))
    title = f"Incident summary: {config.name}"
    safe.write_text(report_dir / "summary.md", summary.render_md(title, secs))
    safe.write_text(report_dir / "summary.html", summary.render_html(title, secs, svgs))
    if config.file is not None and Path(config.file).is_file():
        # The case file is kept with the report (spec/case-file.md), byte for byte, among the outputs the manifest
        # hashes: the manifest named it by a path beside the inputs, which a report sent on alone does not carry. In a
        # folder of its own, so that no command looking for a case file in the report's folder takes it for one.
        make_private_dirs(report_dir / CASE_FILE_DIR)
        safe.write_bytes(report_dir / CASE_FILE_DIR / Path(config.file).name, Path(config.file).read_bytes())
    task.advance()

    files = [dict(f) for f in data.ingest.files]
    root = _inputs_root(config, files)
    inputs = manifest.input_entries(files, root, _time_ranges(case))
    cfg_json = config.to_json()
    # Absolute input paths would differ per clone: record them relative to the inputs root.
    cfg_json["values"]["inputs"] = [
        {"path": Path(_rel_or_self(i.path, root)).as_posix(), "format": i.format,
         **({"timezone": i.timezone} if i.timezone else {}),  # its own zone, when the entry gives one
         **(i.profile.to_json() if i.profile else {})} for i in config.inputs  # a mapped input's profile too
    ]
    if cfg_json["values"].get("tokenizer"):
        cfg_json["values"]["tokenizer"] = _rel_or_self(Path(cfg_json["values"]["tokenizer"]), root)
    has_case_file = config.file is not None and Path(config.file).is_file()
    body = ReportManifest(
        case=config.name,
        inputs_root=Path(_rel(root, report_dir)).as_posix(),
        inputs=tuple(inputs),
        # The JSON values as the ingest manifest holds them (keys a later version adds included).
        reconciliation={k: v for k, v in data.ingest.to_json().items() if k in RECONCILIATION_KEYS},
        parameters=ReportParameters(case=cfg_json, scan=data.scan.parameters.to_json(),
                                    match=data.match.parameters, report=config.section("report")),
        stage_records={r: file_sha256(case / r) for r in STAGE_RECORDS if (case / r).is_file()},
        queries=tuple(_query_hashes()),
        severity_patterns={"path": "forensics/report/patterns/severity.toml",
                           "sha256": safe.sha256_bytes(patterns_text().encode("utf-8"))},
        versions=manifest.versions(),
        counts=data.counts | {"suspects": len(data.suspects), "findings": len(data.findings),
                              "notifications": len(rows), "packets": len(packets)},
        # What verify holds the ledgers to: this prefix must stay as it was (lines may follow).
        ledgers=ledgers or None,
        # ``copy``: where the report keeps it (a report of an earlier release keeps none, and records none).
        case_file=({"path": _rel_or_self(Path(config.file), root), "sha256": file_sha256(Path(config.file)),
                    "copy": f"{CASE_FILE_DIR}/{Path(config.file).name}"}
                   if has_case_file and config.file is not None else None),
        references_key=key.hex(),
        listed_since=listed_since_now(rows, data.counts.get("last_received"), listed_since or {}),
    )
    written = manifest.write(report_dir, body, NOT_OUTPUTS)
    task.advance()
    task.close()
    cross = sum(1 for f in data.findings if f.cross_tenant)
    return ReportResult(report_dir, rows, len(data.suspects), len(data.findings), cross, packets, list(written.outputs),
                        notes=notes)


def _rel(path: Path, start: Path) -> str:
    return os.path.relpath(Path(path).resolve(), Path(start).resolve())


def _rel_or_self(path: Path, root: Path) -> str:
    """``path`` relative to ``root`` (a relative ``path`` is taken from the working folder)."""
    p = Path(path).resolve()
    try:
        return p.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return Path(_rel(p, root)).as_posix()

