"""The analyst's notebook API: a case's tables and a report's files as polars LazyFrames.

    >>> import forensics, polars as pl
    >>> c = forensics.open_case("reports/sim-small-seed7")        # a report folder or a case folder
    >>> c.evidence.filter(pl.col("tier") == "confirmed").group_by("source_tenant_id").len().collect()
    >>> c.exchanges.join(c.suspects, on=["request_id", "tenant_id"]).select("tenant_id", "prompt_tokens").collect()

The stages' JSON records come typed (``forensics.artifacts``): ``c.scan_record().suspect_counts.total``,
``c.match_record().control.false_positive_rate``, ``c.ingest_manifest().tables.exchanges``.

Nothing is read until a frame is collected, and nothing is ever written: the case stays evidence.
Parquet tables keep their schema (``forensics/schema.py``); the report's CSV files are read as text
(ids such as ``007`` stay ids) except their counts, exactly as written (a cell the report guarded
against spreadsheet formulas keeps its leading apostrophe).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import polars as pl

from forensics.artifacts import IngestManifest, MatchRecord, ReportManifest, ScanRecord
from forensics.errors import CaseError
from forensics.review import VERDICTS

#: Case tables (Parquet in the case folder) and the stage that writes each.
CASE_TABLES = {
    "exchanges": "ingest",
    "engine_events": "ingest",
    "quarantine": "ingest",
    "suspects": "scan",
    "evidence": "match",
    "review": "match",
}

#: Report files (CSV in the report folder), with their integer columns.
REPORT_TABLES = {
    "notifications": ("n_requests", "n_findings"),
    "references": (),
}


@dataclasses.dataclass(frozen=True)
class OpenCase:
    """A case folder (and, when known, the report folder built from it), table by table.

    Each attribute named in ``CASE_TABLES`` or ``REPORT_TABLES`` is a fresh ``pl.LazyFrame``;
    :meth:`tables` lists those present.
    """

    case: Path
    report: Path | None

    def tables(self) -> list[str]:
        """Names of the tables present, case tables first, in data-flow order."""
        names = [n for n in CASE_TABLES if (self.case / f"{n}.parquet").is_file()]
        if self.report is not None:
            names += [n for n in REPORT_TABLES if (self.report / f"{n}.csv").is_file()]
        return names

    def frame(self, name: str) -> pl.LazyFrame:
        """The table ``name`` as a LazyFrame; an error naming the stage that writes it when absent."""
        if name in CASE_TABLES:
            path = self.case / f"{name}.parquet"
            if not path.is_file():
                raise CaseError(f"{path} does not exist",
                                     fix=f"run `forensics {CASE_TABLES[name]}` on this case first")
            frame = pl.scan_parquet(path)
            return self._as_decided(name, frame) if name in ("evidence", "review") else frame
        if name in REPORT_TABLES:
            if self.report is None:
                raise CaseError(f"{name} is a report file and {self.case} is a case folder with no report",
                                     fix="open the report folder instead (forensics report --case ... --out ...)")
            path = self.report / f"{name}.csv"
            if not path.is_file():
                raise CaseError(f"{path} does not exist", fix="run `forensics report` for this case first")
            ints = REPORT_TABLES[name]
            frame = pl.scan_csv(path, infer_schema=False)
            return frame.with_columns([pl.col(c).cast(pl.Int64) for c in ints]) if ints else frame
        raise CaseError(f"no table named {name!r}",
                             fix=f"known tables: {', '.join([*CASE_TABLES, *REPORT_TABLES])}")

    def _as_decided(self, name: str, frame: pl.LazyFrame) -> pl.LazyFrame:
        """The match's evidence or review table as the report's verdicts leave it (as its evidence.csv and review.csv
        are): a dismissed finding in review, a confirmed candidate in evidence (tier confirmed). Opened with its
        report, ``evidence`` grouped a dismissed customer as exposed, beside a list that no longer named it."""
        if self.report is None or not (self.report / VERDICTS).is_file():
            return frame
        from forensics.report import DISMISSED_WHY
        from forensics.review import chain
        from forensics.review.verdicts import CONFIRMED_RULE, decisions, report_resolution

        n, _ = chain.recorded_prefix(self.report, VERDICTS)  # the verdicts the report was rendered with
        decided = decisions(chain.read_valid(self.report / VERDICTS).entries[:n], report_resolution(self.report))
        dismissed = sorted(k for k, v in decided.items() if v == "dismiss")
        confirmed = sorted(k for k, v in decided.items() if v == "confirm")
        if not decided:
            return frame
        other_name = "review" if name == "evidence" else "evidence"
        other_path = self.case / f"{other_name}.parquet"
        leaving, coming = (dismissed, confirmed) if name == "evidence" else (confirmed, dismissed)
        kept = frame.filter(~pl.col("finding_id").is_in(leaving))
        if not other_path.is_file() or not coming:
            return kept
        moved = pl.scan_parquet(other_path).filter(pl.col("finding_id").is_in(coming))
        if name == "evidence":
            moved = moved.with_columns(tier=pl.lit("confirmed"), tier_rule=pl.lit(CONFIRMED_RULE))
        else:
            moved = moved.with_columns(why_not_notified=pl.lit(DISMISSED_WHY))
        columns = kept.collect_schema().names()
        return pl.concat([kept, moved.select([c for c in columns if c in moved.collect_schema().names()])], how="diagonal")

    def ingest_manifest(self) -> IngestManifest:
        """CASE/manifest.json: the input files, their counts and the tables' rows."""
        return IngestManifest.read(self.case / "manifest.json", "ingest")

    def scan_record(self) -> ScanRecord:
        """CASE/scan.json: the scan's parameters, limits, suspects by query, anomalies."""
        return ScanRecord.read(self.case / "scan.json", "scan")

    def match_record(self) -> MatchRecord:
        """CASE/match.json: the match parameters, what was searched, findings, the control sample."""
        return MatchRecord.read(self.case / "match.json", "match")

    def report_manifest(self) -> ReportManifest:
        """REPORT/manifest.json: inputs and outputs with their hashes (CaseError for a case with no report)."""
        if self.report is None:
            raise CaseError(f"{self.case} is a case folder with no report", fix="open the report folder instead")
        return ReportManifest.read(self.report / "manifest.json", "report")

    def __getattr__(self, name: str) -> pl.LazyFrame:
        if name.startswith("_") or (name not in CASE_TABLES and name not in REPORT_TABLES):
            raise AttributeError(name)
        return self.frame(name)


def open_case(path: str | Path, case: str | Path | None = None) -> OpenCase:
    """Open a case folder, or a report folder (its ``case/`` inside), for reading with polars.

    ``case``: the case folder of a report written by ``forensics report --case CASE`` (such a report holds no
    ``case/``; ``forensics run`` puts it inside). Raises CaseError when ``path`` holds neither a case nor a report.
    """
    root = Path(path)
    if case is not None:
        if not (Path(case) / "exchanges.parquet").is_file():
            raise CaseError(f"{case} is not a case folder (no exchanges.parquet)", fix="give the folder given to --case")
        if not (root / "manifest.json").is_file():
            raise CaseError(f"{root} is not a report folder (no manifest.json)", fix="give the folder the report wrote")
        return OpenCase(Path(case), root)
    if (root / "exchanges.parquet").is_file():
        parent = root.parent
        return OpenCase(root, parent if (parent / "notifications.csv").is_file() else None)
    if (root / "case" / "exchanges.parquet").is_file():
        return OpenCase(root / "case", root)
    if (root / "manifest.json").is_file() and (root / "notifications.csv").is_file():
        raise CaseError(f"{root} is a report folder with no case/ inside (written by `forensics report`)",
                        fix=f"give its case folder too: open_case({str(root)!r}, case='CASE') with the folder given to --case")
    raise CaseError(f"{root} is neither a case folder (exchanges.parquet) nor a report folder (case/)",
                         fix="give the folder `forensics ingest --case` wrote, or one `forensics run` printed")
