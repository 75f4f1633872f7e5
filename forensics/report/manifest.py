"""manifest.json of a report folder, and ``verify``: re-hash inputs and outputs, report drift.

Input paths are stored relative to an ``inputs_root`` (the case file's folder), which is itself
stored relative to the report folder, so a report keeps verifying when the whole tree is moved or
cloned elsewhere. Nothing in the manifest depends on the wall clock.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from forensics.artifacts import REPORT_FORMAT, ReportManifest
from forensics.case import file_sha256, json_text, symlinks_under, table_text
from forensics.errors import CaseError
from forensics.report import safe
from forensics.review import OWN_FILES

MANIFEST = "manifest.json"
#: The detached Ed25519 signature of manifest.json (forensics.verify): made after the manifest,
#: so never among the outputs it lists.
SIGNATURE = "manifest.json.sig"
FORMAT = REPORT_FORMAT
#: Distributions whose versions can change a result.
PACKAGES = ("forensics", "duckdb", "pyarrow", "polars", "rapidfuzz", "xxhash", "tokenizers", "python-stdnum", "phonenumbers")


def versions() -> dict[str, str]:
    """Installed versions of the packages that shape the results (and Python's)."""
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path.resolve(), start.resolve())).as_posix()


#: Folders of a report that hold no outputs (the case beside them): links inside them ship with no packet.
#: A fixed set, not the manifest's own list of exclusions, which whoever edits the manifest can extend.
CASE_FOLDERS = frozenset({"case"})


def output_hashes(report_dir: Path, exclude: set[str]) -> list[dict[str, Any]]:
    """SHA-256 and size of every file under the report folder except ``exclude`` (top-level names)."""
    rows = []
    for p in sorted(report_dir.rglob("*")):
        rel = p.relative_to(report_dir).as_posix()
        if not p.is_file() or rel.split("/")[0] in exclude or rel.startswith(".") or rel in OWN_FILES:
            # The ledgers grow after rendering: the manifest's "ledgers" and verify's chain checks cover them.
            # Hidden files are left out at the top only (a ledger's lock); one inside a packet would ship with it.
            continue
        rows.append({"path": rel, "size": p.stat().st_size, "sha256": file_sha256(p)})
    return rows


def input_entries(files: list[dict[str, Any]], root: Path, ranges: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """The ingest manifest's per-file rows, with paths made relative to ``root``.

    The ingest manifest is read defensively: any of path/file, sha256, size, format, lines,
    ingested/rows, quarantined, blank, duplicate that it has is kept. A file ingested under several
    names (the same SHA-256 saved twice, or a symlink inside the input folder) gets one row per
    name, so ``verify`` re-hashes each: the first name carries the counts, every other one names
    it in ``same_content_as``. A path is the name the file was found under, never a symlink's
    target.
    """

    def rel(p: Path) -> str:
        # The folders are resolved (as ``root`` is) but not the file's own name: a link stays a link.
        named = Path(os.path.realpath(p.parent)) / p.name
        return Path(os.path.relpath(named, root.resolve())).as_posix()

    out = []
    for f in files:
        raw = f.get("path") or f.get("file")
        if not raw:
            continue
        # The ingest stage records a display path (relative to the case file's folder or the
        # working folder it ran in) and the absolute path(s) it read.
        p = Path(f["abs_path"]) if f.get("abs_path") else Path(raw) if Path(raw).is_absolute() else Path.cwd() / raw
        entry: dict[str, Any] = {"path": rel(p)}
        for key in ("sha256", "size", "format", "lines", "ingested", "rows", "quarantined", "blank", "duplicate",
                    "compression", "status", "time_range"):
            if key in f:
                entry[key] = f[key]
        if "size" not in entry and p.is_file():
            entry["size"] = p.stat().st_size
        if "sha256" not in entry and p.is_file():
            entry["sha256"] = file_sha256(p)
        if "time_range" not in entry and ranges:
            # The tables name a file whose name is not UTF-8 by its \xNN form (ingest.table_text).
            for key in (str(p), str(p.resolve()), str(raw), table_text(str(raw))):
                if key in ranges:
                    entry["time_range"] = ranges[key]
                    break
        out.append(entry)
        for other in sorted({rel(Path(a)) for a in f.get("abs_paths", [])} - {entry["path"]}):
            out.append({"path": other, "same_content_as": entry["path"],
                        **{k: entry[k] for k in ("sha256", "size") if k in entry}})
    return sorted(out, key=lambda e: e["path"])


def write(report_dir: Path, body: ReportManifest, exclude: set[str]) -> ReportManifest:
    """Add output hashes to ``body`` and write manifest.json (sorted keys, stable bytes)."""
    body = dataclasses.replace(body, outputs=tuple(output_hashes(report_dir, exclude | {MANIFEST, SIGNATURE})),
                               outputs_excluded=tuple(sorted(exclude)))
    safe.write_text(report_dir / MANIFEST, json_text(body.to_json(), indent=2, sort_keys=True) + "\n")
    return body


def read(report_dir: Path) -> ReportManifest:
    """The manifest.json of a report folder; CaseError naming what is wrong when it is not one."""
    path = Path(report_dir) / MANIFEST
    if not path.is_file():
        raise CaseError("no manifest.json in the report folder", file=report_dir, fix="give the folder `forensics report` wrote")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CaseError(f"manifest.json is not a report manifest ({exc})", file=path, fix="re-run `forensics report`") from None
    try:
        man = ReportManifest.from_json(data, file=path)
    except CaseError as exc:
        raise CaseError(f"manifest.json is not a report manifest ({exc.message})", file=path,
                        fix="re-run `forensics report`") from None
    # The record's types stop at its entries' own fields: every path verify opens must be a string.
    entries = [(f"inputs[{i}]", e) for i, e in enumerate(man.inputs)] + [(f"outputs[{i}]", e) for i, e in enumerate(man.outputs)]
    if man.case_file is not None:
        entries.append(("case_file", man.case_file))
    for where, entry in entries:
        if not isinstance(entry.get("path"), str) or not isinstance(entry.get("sha256", ""), str):
            raise CaseError(f"manifest.json is not a report manifest ({where}: its path and sha256 must be strings)",
                            file=path, fix="re-run `forensics report`")
    return man


@dataclasses.dataclass
class Drift:
    """One difference between the manifest and the files as they are now."""

    kind: str  # input | output | case_file | consistency | rerun | signature
    path: str
    problem: str  # changed | missing | unexpected, or a sentence saying what disagrees with what

    def __str__(self) -> str:
        return f"{self.kind} {self.path}: {self.problem}"


@dataclasses.dataclass
class VerifyResult:
    """What ``verify`` found: checked counts and every drift."""

    report_dir: Path
    checked: int
    drift: list[Drift]
    manifest_sha256: str = ""
    signature: str = "none"  # valid | invalid | missing | none | present, not checked (give --key)
    rerun: bool = False  # whether the pipeline was re-run and compared byte for byte

    @property
    def ok(self) -> bool:
        """Whether nothing drifted."""
        return not self.drift

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"report": str(self.report_dir), "checked": self.checked, "ok": self.ok,
                "drift": [dataclasses.asdict(d) for d in self.drift], "manifest_sha256": self.manifest_sha256,
                "signature": self.signature, "rerun": self.rerun}


def verify(report_dir: Path, inputs_root: Path | None = None, *, key: Path | None = None, rerun: bool = False,
           progress: Any = None) -> VerifyResult:
    """Check a report: its signature (with ``key``, an Ed25519 public key), its inputs and outputs
    re-hashed against manifest.json, its internal consistency (forensics.verify.consistency) and,
    with ``rerun``, a fresh run from the recorded inputs and parameters compared byte for byte."""
    from forensics import verify as checks

    report_dir = Path(report_dir)
    man = read(report_dir)
    root = inputs_root if inputs_root is not None else (report_dir / man.inputs_root).resolve()
    signature, drift = checks.check_signature(report_dir, key)
    checked = 0
    files: list[tuple[str, Path, Mapping[str, Any]]] = [("input", root / e["path"], e) for e in man.inputs]
    if man.case_file:
        files.append(("case_file", root / man.case_file["path"], man.case_file))
    # Where a missing file was looked for, and how to point verify elsewhere: a report handed over or moved finds its
    # inputs relative to its new place, and "missing" alone read as tampering (a review).
    moved_hint = "" if inputs_root is not None else (
        "; if the report was moved or handed over, give the folder the run read its logs and case file from with "
        "--inputs FOLDER")
    for kind, p, e in files:
        checked += 1
        if not p.is_file():
            drift.append(Drift(kind, e["path"], f"missing (looked for at {p}{moved_hint})"))
        elif not e.get("sha256"):  # a report records every file's hash: one taken out let an edited log pass unseen
            drift.append(Drift(kind, e["path"], "the manifest records no SHA-256 for it"))
        elif file_sha256(p) != e["sha256"]:
            drift.append(Drift(kind, e["path"], "changed"))
        elif kind == "case_file":
            drift += checks.case_file_parameters(man, p, root)
    recorded = {o["path"]: o for o in man.outputs}
    for rel, o in sorted(recorded.items()):
        checked += 1
        p = report_dir / rel
        if not p.is_file():
            drift.append(Drift("output", rel, "missing"))
        elif not o.get("sha256"):  # (an edited manifest: it stopped verify with "internal error: KeyError")
            drift.append(Drift("output", rel, "the manifest records no SHA-256 for it"))
        elif file_sha256(p) != o["sha256"]:
            drift.append(Drift("output", rel, "changed"))
    # A report leaves out its case folder and nothing else: an exclusion the manifest adds (a packet's folder) is
    # itself drift, and what it names is checked as any output.
    for name in sorted(set(man.outputs_excluded) - CASE_FOLDERS):
        drift.append(Drift("consistency", MANIFEST, f"outputs_excluded leaves out {name!r}; a report only leaves out "
                                                   f"{', '.join(sorted(CASE_FOLDERS))}"))
    exclude = (set(man.outputs_excluded) & CASE_FOLDERS) | {MANIFEST, SIGNATURE}
    for o in output_hashes(report_dir, exclude):
        if o["path"] not in recorded:
            drift.append(Drift("output", o["path"], "unexpected"))
    for link in sorted(symlinks_under(report_dir)):
        # A report holds files only (run refuses to write through a link): a linked file or folder is hashed
        # as its target is now, and whatever else the target holds would ship with the packet unseen. What
        # the outputs leave out (the case folder beside them) is no output.
        rel = link.relative_to(report_dir).as_posix()
        if rel.split("/")[0] not in CASE_FOLDERS:
            drift.append(Drift("output", rel, "a symbolic link (every output is a file of the report folder itself)"))
    drift += checks.consistency(report_dir, man)
    if rerun:
        drift += checks.rerun(report_dir, man, root, progress)
    return VerifyResult(report_dir, checked, drift, checks.manifest_sha256(report_dir), signature, rerun)
