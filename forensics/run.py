"""``forensics run``: ingest -> scan -> match -> report in one call, from a case file or a log folder.

The pipeline module: it imports the stages and calls them in order (``forensics.api`` re-exports
``run``; nothing here imports ``api``).

The case folder of a run lives inside the report folder (``OUT/<name>/case/``) so a report and
the tables it came from travel together; it is rebuilt from scratch on every run (a stale
staged file must never leak into a new run) and is not among the hashed report outputs.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import glob
import os
import shlex
import time
from pathlib import Path
from typing import Any

from forensics.artifacts import Record
from forensics.case import locked_case
from forensics.config import TOP_KEYS, CaseConfig, apply_options, execution_settings, load_case_file
from forensics.engine import executor_for
from forensics.errors import ConfigError, first_few
from forensics.ingest import IngestResult, ingest, pattern_drops, side_entry
from forensics.ingest.patterns import glob_matches
from forensics.match import match
from forensics.progress import Reporter
from forensics.report import (
    ReportResult,
    check_same_incident,
    render_over,
    report_dir_for,
    report_folder,
)
from forensics.scan import scan

CASE_SUBDIR = "case"

# The stages the pipeline runs, each holding the case folder's lock while it writes
# (forensics.case.folder_lock) as the library API's stages do; looked up when a run calls them.
ingest_stage = locked_case(ingest, create=True)
scan_stage = locked_case(scan)
match_stage = locked_case(match)


@dataclasses.dataclass(frozen=True)
class StageTiming(Record):
    """One stage of a run: how long it took and what it produced (never written to the report)."""

    stage: str
    seconds: float
    rows: int | None  # what it produced: exchanges, suspects, evidence rows, notifications
    note: str  # what ``rows`` counts


@dataclasses.dataclass
class RunResult:
    """The outcome of every stage of one run."""

    case_dir: Path
    config: CaseConfig
    report: ReportResult
    stages: list[StageTiming]
    #: The scan's and the match's warnings (engine signatures outside the scope, look-alike ids, candidates in
    #: review only); the report's own (``report.warnings``) are what the user must clean up.
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def has_findings(self) -> bool:
        """Whether anyone must be notified."""
        return self.report.has_findings

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary for the CLI."""
        summary = self.report.summary()
        return ({"case": self.config.name, "case_dir": str(self.case_dir), "stages": [s.to_json() for s in self.stages]}
                | summary | {"warnings": [*self.notes, *summary["warnings"]]})


def _may_be_case_file(path: Path) -> bool:
    """Whether a ``*.toml`` in a folder can be the case file: it is not another tool's TOML (such as
    pyproject.toml) whose top-level keys are none of the case file's. A file that does not parse
    stays a candidate, so its syntax error is reported instead of being skipped silently."""
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return True
    return not data or bool(set(data) & TOP_KEYS)


def find_case_file(path: Path) -> Path:
    """The case file named by ``path``: the file itself, or the one ``*.toml`` in a log folder."""
    path = Path(path)
    if path.is_file():
        if path.suffix.lower() != ".toml" and not _may_be_toml(path):
            # A log named in its place: "case file is not UTF-8" (a .gz) or "not valid TOML" sent the user to fix it.
            raise ConfigError("this is not a case file: run takes a case file (CASE.toml) or a folder holding one",
                              file=path, fix="give the case file (spec/case-file.md), which names this log among its "
                                             "[[inputs]], or read the log alone with: forensics ingest --case DIR "
                                             f"{shlex.quote(str(path))}")
        return path
    if not path.is_dir():
        raise ConfigError("no such case file or log folder", file=path, fix="give a CASE.toml or a folder that holds one")
    found = sorted(p for p in path.glob("*.toml") if p.is_file())
    tomls = [p for p in found if _may_be_case_file(p)]
    if len(tomls) == 1:
        return tomls[0]
    named = [p for p in tomls if p.name == "case.toml"]
    if named:
        return named[0]
    if not tomls:
        others = f" ({', '.join(p.name for p in found)} has none of the case-file keys)" if found else ""
        raise ConfigError(f"the log folder holds no case file (*.toml){others}", file=path,
                          fix="add a case.toml (see spec/case-file.md) or give its path")
    raise ConfigError(f"the log folder holds {len(tomls)} case files ({', '.join(p.name for p in tomls)})", file=path,
                      fix="name one of them, or call the one to use case.toml")


def _may_be_toml(path: Path) -> bool:
    """Whether a file not named ``*.toml`` reads as TOML text (a case file under another name)."""
    import tomllib

    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 20)  # a case file is a few kilobytes; a log is read no further
        tomllib.loads(head.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return True


def report_reachable(spec_path: Path, report_dir: Path) -> bool:
    """Whether an input path could read the report folder: a folder holding it, or a pattern that could
    match it or a folder around it (a matched folder is read whole, links followed). ``logs/*.jsonl``
    beside ``logs/reports/`` cannot: the next run would not ingest the report.

    For a pattern, both what it matches now (a matched folder, or a link to one, around the report)
    and what it could match once the report exists (its parts against the report's path below the
    pattern's fixed part, as glob matches them: hidden names only by a part that starts with ".",
    ``**`` any number of folders).
    """
    report = Path(os.path.realpath(report_dir))
    if spec_path.exists() or not glob.has_magic(str(spec_path)):  # a folder named with [ ] is a folder
        return spec_path.is_dir() and _walk_reaches(report, Path(os.path.realpath(spec_path)))
    expansion = glob_matches(spec_path)  # as ingest expands it: ** follows no folder link
    fixed_folder = expansion.fixed
    for found in map(Path, expansion.matches):
        if pattern_drops(found, fixed_folder):  # ingest leaves it out too
            continue
        real = Path(os.path.realpath(found))
        if real.is_relative_to(report) or (found.is_dir() and _walk_reaches(report, real)):
            return True
    base = Path(os.path.realpath(fixed_folder))
    if not report.is_relative_to(base):
        return False
    return _could_match(report.relative_to(base).parts, tuple(expansion.rest))


def _walk_reaches(report: Path, folder: Path) -> bool:
    """Whether reading ``folder`` whole reaches ``report``: it lies inside, and not under a hidden folder or
    a dataset writer's bookkeeping folder, which a folder walk skips."""
    return report.is_relative_to(folder) and not any(_unwalked(name) for name in report.relative_to(folder).parts)


def _unwalked(name: str) -> bool:
    return name.startswith(".") or side_entry(name, folder=True)


def _could_match(names: tuple[str, ...], wanted: tuple[str, ...]) -> bool:
    """Whether the pattern parts ``wanted`` match the path ``names`` or a folder around it (whose whole
    tree is then read), as glob matches parts and ingest keeps its matches (no bookkeeping folders)."""
    if not names:  # the pattern reaches the report's folder or into it
        return True
    if not wanted:  # a folder around the report, read whole
        return not any(_unwalked(name) for name in names)
    if wanted[0] == "**":  # zero or more folders, never hidden ones
        return _could_match(names, wanted[1:]) or (not _unwalked(names[0]) and _could_match(names[1:], wanted))
    if (names[0].startswith(".") and not wanted[0].startswith(".")) or side_entry(names[0], folder=True):
        return False
    return fnmatch.fnmatchcase(names[0], wanted[0]) and _could_match(names[1:], wanted[1:])


def run(config_or_log_dir: Path, out: Path, progress: Reporter | None = None, sign: Path | None = None,
        engine: str | None = None, options: dict[str, Any] | None = None) -> RunResult:
    """Run every stage for a case file (or the case file in a log folder); write ``OUT/<name>/``.

    ``options`` are case-file values given on the command line, by key (``real_ceiling_tokens``, ``models``,
    ``probable_evalue``, ``contact``...; ``None``: not given): each overrides the case file's, and the manifest
    records it as an option's (:func:`forensics.config.apply_options`). ``engine`` (``local`` or ``spark``; the
    ``--engine`` option) overrides the case file's ``[execution] engine``: where ingest parsing and the match
    pass run, never what they find.

    Everything, the case folder included, is built in a fresh folder next to the report folder
    and swapped in when the report is complete (:func:`forensics.report.report_folder`): an
    interrupted or failed run leaves the previous report as it was, and a re-run starts afresh.
    """
    given = {key: value for key, value in (options or {}).items() if value is not None and value not in ([], ())}
    cfg = load_case_file(find_case_file(Path(config_or_log_dir)), provided=frozenset(given))
    if given:
        apply_options(cfg, given)
    if engine is not None:
        cfg.execution = execution_settings({**cfg.execution, "engine": engine}, option="--engine")
    executor_for(cfg)  # Spark starts here, once: no PySpark, no Java or a bad master fails before any work
    if not cfg.inputs:
        raise ConfigError("the case file has no [[inputs]]", file=cfg.file, fix='add [[inputs]]\npath = "logs"\nformat = "auto"')
    for spec in cfg.inputs:
        try:
            exists = spec.path.exists()
        except OSError as exc:  # a name too long for the file system
            raise ConfigError(f"input {spec.path.name[:80]} cannot be read ({exc.strerror})", file=cfg.file,
                              fix=f"check the [[inputs]] path {spec.path}") from None
        if not exists and not glob.has_magic(str(spec.path)):  # a pattern is expanded by ingest
            raise ConfigError(f"input {spec.path.name} does not exist", file=cfg.file, fix=f"check the [[inputs]] path {spec.path}")
    report_dir = report_dir_for(Path(out), cfg.name)
    for spec in cfg.inputs:
        # A report an input could read would be ingested by the next run and change its result.
        if report_reachable(spec.path, report_dir):
            raise ConfigError(f"the report folder {report_dir.resolve()} lies inside the input folder or pattern "
                              f"{spec.path}", file=cfg.file, fix="choose an --out outside the input folders")
    stages: list[StageTiming] = []
    warnings: list[str] = []
    notes: list[str] = []
    with report_folder(Path(out), cfg.name, warnings=warnings) as building:
        case_dir = building / CASE_SUBDIR
        t0 = time.monotonic()
        # One call for every [[inputs]] entry but the mapped ones, each with its own format, so the case
        # tables are rebuilt once; entries in format order, as when each format was a call of its own.
        plain = sorted((spec for spec in cfg.inputs if spec.profile is None), key=lambda spec: spec.format)
        ingested: IngestResult | None = None
        if plain:
            ingested = ingest_stage(case_dir, [spec.path for spec in plain], config=cfg, progress=progress,
                                    path_formats=[None if spec.format == "auto" else spec.format for spec in plain])
        for spec in cfg.inputs:  # each mapped entry with its own profile, in case-file order
            if spec.profile is not None:
                ingested = ingest_stage(case_dir, [spec.path], fmt=spec.format, config=cfg, progress=progress,
                                        profile=spec.profile)
        if ingested is not None:  # (each ingest's warnings cover every file of the case so far: the last one's, all)
            read_as = ingested.warnings
            notes.extend(read_as)
            if not ingested.manifest.tables.exchanges:
                # The scan would stop on the case's model, never seen: the cause is the inputs (a wrong format given
                # for the gateway logs reads no record of them), which the ingest's warnings name.
                said = [w.rsplit(". Fix: ", 1)[0] for w in read_as]
                raise ConfigError("no gateway record was read from the case's inputs: the case has no exchanges"
                                  + (f" ({first_few(said, 3)})" if said else ""),
                                  file=cfg.file, fix="check each [[inputs]] entry's path and format (leave format out to "
                                  "have it sniffed); `forensics ingest` of an input into a case folder keeps its "
                                  "quarantine.parquet, which says why each record was not read")
        # Another incident's report under this name is never replaced (its verdicts and notices carried over).
        check_same_incident(report_dir, case_dir, cfg.file)
        tables = ingested.manifest.tables if ingested is not None else None
        stages.append(StageTiming("ingest", round(time.monotonic() - t0, 3), tables.exchanges if tables else None,
                                  f"quarantined {tables.quarantine if tables else 0}"))

        t0 = time.monotonic()
        scanned = scan_stage(case_dir, cfg, progress=progress)
        # (Printed by the stage run alone; in a run they were only in summary.md: engine signatures outside the
        # scope, look-alike ids, a near model name.)
        notes.extend(scanned.summary()["warnings"])
        stages.append(StageTiming("scan", round(time.monotonic() - t0, 3), scanned.suspects, "suspect responses"))

        t0 = time.monotonic()
        matched = match_stage(case_dir, cfg, progress=progress)
        notes.extend(matched.summary()["warnings"])
        stages.append(StageTiming("match", round(time.monotonic() - t0, 3), len(matched.findings), "evidence rows"))

        t0 = time.monotonic()
        reported = render_over(case_dir, cfg, building, report_dir, progress, sign)
        stages.append(StageTiming("report", round(time.monotonic() - t0, 3), len(reported.notices), "notifications"))
    reported.report_dir = report_dir
    reported.warnings = warnings
    return RunResult(report_dir / CASE_SUBDIR, cfg, reported, stages, notes + reported.notes)
