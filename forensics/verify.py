"""Checks an auditor can trust, beyond re-hashing a report against its own manifest.

A manifest only proves that files are the ones it lists; whoever can edit a file can edit the
manifest too. So ``forensics verify`` also:

- recomputes what the report's tables imply and compares (:func:`consistency`): the notification
  list from ``suspects.csv`` and ``evidence.csv``, the packets from the notification list, the
  summary's and the manifest's counts from the tables;
- optionally re-runs the whole pipeline from the recorded inputs and parameters into a temporary
  folder and compares every output byte for byte (:func:`rerun`);
- optionally checks an Ed25519 signature of manifest.json (:func:`check_signature`), made by
  ``--sign`` with a key whose public half the team keeps outside the report.

The manifest's SHA-256 (:func:`manifest_sha256`) is printed by every run so the team can record it
somewhere the report's writer cannot reach.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import glob
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from html import unescape
from pathlib import Path
from typing import Any

from forensics import csvfile
from forensics.artifacts import MatchRecord, ReportManifest, RequestKey
from forensics.case import file_sha256, make_private_dirs
from forensics.config import CaseConfig, InputSpec, load_case_file, utc_or_none
from forensics.errors import CaseError, ConfigError, ForensicsError, first_few
from forensics.ingest.patterns import glob_matches
from forensics.progress import Reporter
from forensics.report import CASE_FILE_DIR, RECONCILIATION_KEYS, STAGE_RECORDS, listed_tenants
from forensics.report.manifest import MANIFEST, SIGNATURE, Drift
from forensics.report.notices import packet_path, render_packet_md, unknown_notice_keys
from forensics.report.safe import write_bytes
from forensics.report.summary import count_rows
from forensics.schema import TIERS

#: Files of a report folder that are not outputs hashed by the manifest (the run's case folder
#: is listed by the manifest itself as excluded).
NOT_COMPARED = {MANIFEST, SIGNATURE}


# --------------------------------------------------------------------------------------------
# manifest hash, keys and signatures
# --------------------------------------------------------------------------------------------


def manifest_sha256(report_dir: Path) -> str:
    """SHA-256 of the report's manifest.json, to be recorded outside the report."""
    path = Path(report_dir) / MANIFEST
    if not path.is_file():
        raise CaseError("no manifest.json in the report folder", file=report_dir, fix="give the folder `forensics report` wrote")
    return file_sha256(path)


def keygen(path: Path) -> tuple[Path, Path]:
    """Write a new Ed25519 private key (PEM, 0600) to ``path`` and its public key to ``path.pub``.

    The private key signs reports (``--sign``); the public key, kept by the team or auditor
    outside the report, checks them (``verify --key``). An existing file is never overwritten.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    path = Path(path)
    public = path.with_name(path.name + ".pub")
    for p in (path, public):
        if p.exists() or p.is_symlink():
            raise ConfigError("the key file already exists", file=p, fix="choose a new name; an existing key is never overwritten")
    # A missing folder is made, private (0700), as a key's folder should be: the README's `keygen keys/team.pem`
    # failed on a fresh clone.
    make_private_dirs(path.parent)
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public_pem = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    # O_EXCL: a file appearing between the check above and here is not overwritten either.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_pem)
    fd = os.open(public, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(public_pem)
    return path, public


def _read_key(path: Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read the key file ({exc.strerror})", file=path, fix="give the PEM file `forensics keygen` wrote") from None


def _private_key(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    try:
        key = serialization.load_pem_private_key(_read_key(path), password=None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"not an unencrypted PEM private key ({exc})", file=path,
                          fix="make one with `forensics keygen KEYFILE` or `openssl genpkey -algorithm ed25519 -out KEYFILE`") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"the key is {type(key).__name__}, not Ed25519", file=path,
                          fix="make one with `forensics keygen KEYFILE` or `openssl genpkey -algorithm ed25519 -out KEYFILE`")
    return key


def check_private_key(path: Path) -> None:
    """Raise ConfigError unless ``path`` holds an unencrypted Ed25519 private key (PEM)."""
    _private_key(path)


def _public_key(path: Path) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    data = _read_key(path)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        # The private key also holds the public one; accept it, but only as a fallback.
        key = _private_key(path).public_key()
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"the key is {type(key).__name__}, not Ed25519", file=path,
                          fix="give the public key written by `forensics keygen` (KEYFILE.pub)")
    return key


@dataclasses.dataclass
class Seal:
    """What was recorded about a finished report: its manifest's hash and signature file, if any."""

    manifest_sha256: str
    signature: Path | None

    def summary(self) -> dict[str, Any]:
        """JSON-ready form for the CLI."""
        return {"manifest_sha256": self.manifest_sha256, "signature": str(self.signature) if self.signature else None}


def sealed(report_dir: Path) -> Seal:
    """The finished report's manifest hash and its signature file, if any (nothing is written)."""
    sig_path = Path(report_dir) / SIGNATURE
    return Seal(manifest_sha256(report_dir), sig_path if sig_path.is_file() else None)


def seal(report_dir: Path, key: Path) -> Seal:
    """Sign manifest.json with the Ed25519 private key ``key`` (a detached manifest.json.sig).

    Called on a report being built (see ``report.sign_report``): a rebuilt report starts in an
    empty folder, so no signature of an earlier manifest can be left beside it.
    """
    report_dir = Path(report_dir)
    digest = manifest_sha256(report_dir)
    sig_path = report_dir / SIGNATURE
    signature = _private_key(key).sign((report_dir / MANIFEST).read_bytes())
    write_bytes(sig_path, base64.b64encode(signature) + b"\n")
    return Seal(digest, sig_path)


def check_signature(report_dir: Path, key: Path | None) -> tuple[str, list[Drift]]:
    """The signature's state (``valid``, ``invalid``, ``missing``, ``present, not checked`` or
    ``none``) and the drift it means when a public key was given."""
    from cryptography.exceptions import InvalidSignature

    sig_path = Path(report_dir) / SIGNATURE
    if key is None:
        return ("present, not checked (give --key)" if sig_path.is_file() else "none"), []
    public = _public_key(key)
    if not sig_path.is_file():
        return "missing", [Drift("signature", SIGNATURE, "missing: the report is not signed, but --key was given")]
    try:
        signature = base64.b64decode(sig_path.read_bytes().strip(), validate=True)
        public.verify(signature, (Path(report_dir) / MANIFEST).read_bytes())
    except (InvalidSignature, ValueError):
        return "invalid", [Drift("signature", SIGNATURE, "does not match manifest.json with this key: the manifest changed "
                                 "after signing, or it was signed with another key")]
    return "valid", []


# --------------------------------------------------------------------------------------------
# internal consistency
# --------------------------------------------------------------------------------------------


def _read_csv(path: Path) -> list[dict[str, str]] | None:
    if not path.is_file():
        return None
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


#: How a value that forensics.csvfile neutralises starts once escaped: the ``'`` before it is the added one.
_NEUTRALISED_START = tuple(csvfile.escape_controls(ch) for ch in csvfile.QUOTED_START)


def _unneutralised(text: str) -> str:
    """A CSV cell without the ``'`` that forensics.csvfile puts before a formula-like value or a
    value that starts with ``'`` (so single ids can be joined and compared with the joined
    ``request_ids`` cell, where only the first id can carry one)."""
    if text.startswith("'") and text[1:].startswith(_NEUTRALISED_START):
        return text[1:]
    return text


def _id_list(cell: str) -> list[str]:
    """The ids of a ``request_ids`` cell (or the ids joined for one), as a sorted list.

    Split on ``;`` on both sides of a comparison, so an id that itself holds ``;`` splits the same
    way in the expected and the written cell; sorted, because the report sorts the raw ids and
    the cells hold them escaped (forensics.csvfile), which may sort differently.
    """
    return sorted(_unneutralised(cell).split(";")) if cell else []


def _ids_of(cells: Iterable[str]) -> list[str]:
    """The ids of single-id cells as :func:`_id_list` reads their joined ``request_ids`` cell."""
    shown = [_unneutralised(c) for c in cells]
    return sorted(";".join(shown).split(";")) if shown else []


def _best_tier(tiers: list[str]) -> str:
    known = [t for t in tiers if t in TIERS]
    return min(known, key=TIERS.index, default="possible")


def expected_notifications(suspects: list[dict[str, str]], evidence: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The notification rows that ``suspects.csv`` and ``evidence.csv`` call for, keyed by
    (tenant cell, role): the same rule as the report stage (forensics.report.notices), applied to
    the report's own tables."""
    cross = [e for e in evidence if e.get("relation", "") in ("", "cross_tenant")
             and e["recipient_tenant_id"] != e["source_tenant_id"]]
    by_recipient: dict[RequestKey, list[dict[str, str]]] = {}
    for e in cross:
        by_recipient.setdefault(RequestKey(e["recipient_request_id"], e["recipient_tenant_id"]), []).append(e)
    rows: dict[tuple[str, str], dict[str, Any]] = {}

    def entry(tenant: str, role: str) -> dict[str, Any]:
        return rows.setdefault((tenant, role), {"ids": set(), "tiers": [], "n_findings": 0})

    for s in suspects:
        acc = entry(s["tenant_id"], "recipient")
        acc["ids"].add(s["request_id"])
        acc["tiers"].append(_best_tier([f.get("tier") or "possible" for f in by_recipient.get(RequestKey(s["request_id"], s["tenant_id"]), [])]))
    for f in cross:
        tier = f.get("tier") or "possible"
        for tenant, rid, role in ((f["recipient_tenant_id"], f["recipient_request_id"], "recipient"),
                                  (f["source_tenant_id"], f["source_request_id"], "exposed")):
            acc = entry(tenant, role)
            acc["ids"].add(rid)
            acc["tiers"].append(tier)
            acc["n_findings"] += 1
    return {
        key: {"tier": _best_tier(e["tiers"]), "n_requests": str(len(e["ids"])), "request_ids": _ids_of(e["ids"]),
              "n_findings": str(e["n_findings"])}
        for key, e in rows.items()
        if key[0]  # a request whose customer no log names is nobody's to tell (the summary lists it)
    }


def _shown(value: Any) -> str:
    return repr(";".join(value)) if isinstance(value, list) else repr(value)


def _check_notifications(suspects: list[dict[str, str]], evidence: list[dict[str, str]],
                         notifications: list[dict[str, str]]) -> list[Drift]:
    drift: list[Drift] = []
    expected = expected_notifications(suspects, evidence)
    actual: dict[tuple[str, str], dict[str, str]] = {}
    for i, row in enumerate(notifications, start=2):
        key = (row.get("tenant_id", ""), row.get("role", ""))
        if key in actual:
            drift.append(Drift("consistency", "notifications.csv", f"line {i}: a second row for tenant {key[0]!r} role {key[1]}"))
        actual[key] = row
    for key in sorted(set(expected) - set(actual)):
        drift.append(Drift("consistency", "notifications.csv",
                           f"no row for tenant {key[0]!r} role {key[1]}, which suspects.csv and evidence.csv call for"))
    for key in sorted(set(actual) - set(expected)):
        drift.append(Drift("consistency", "notifications.csv",
                           f"row for tenant {key[0]!r} role {key[1]} follows from no suspect or finding"))
    for key in sorted(set(expected) & set(actual)):
        for column, want in expected[key].items():
            if column not in actual[key]:
                continue
            have: Any = _id_list(actual[key][column]) if column == "request_ids" else actual[key][column]
            if have != want:
                drift.append(Drift("consistency", "notifications.csv",
                                   f"tenant {key[0]!r} role {key[1]}: {column} is {_shown(have)}, the evidence gives {_shown(want)}"))
    return drift


def _check_packets(report_dir: Path, notifications: list[dict[str, str]]) -> list[Drift]:
    drift: list[Drift] = []
    roles: dict[str, set[str]] = {}
    packet_of: dict[str, str] = {}
    ids_of: dict[tuple[str, str], list[str]] = {}
    for row in notifications:
        roles.setdefault(row.get("packet", ""), set()).add(row.get("role", ""))
        packet_of[row.get("packet", "")] = row.get("tenant_id", "")
        ids_of[(row.get("packet", ""), row.get("role", ""))] = _id_list(row.get("request_ids", ""))
    folder = report_dir / "packets"
    present = {f"packets/{p.name}" for p in folder.iterdir()} if folder.is_dir() else set()
    for extra in sorted(present - set(roles)):
        drift.append(Drift("consistency", extra, "packet for no row of notifications.csv"))
    for packet in sorted(roles):
        if packet not in present:
            drift.append(Drift("consistency", packet or "packets/", f"no packet for tenant {packet_of[packet]!r} of notifications.csv"))
            continue
        notice_path = report_dir / packet / "notice.json"
        if not (report_dir / packet / "notice.md").is_file():
            drift.append(Drift("consistency", f"{packet}/notice.md", "missing"))
        try:
            notice = json.loads(notice_path.read_text(encoding="utf-8"))
            tenant = str(notice["tenant_id"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            drift.append(Drift("consistency", f"{packet}/notice.json", f"unreadable ({type(exc).__name__})"))
            continue
        if packet_path(tenant) != packet or csvfile.cell(tenant) != packet_of[packet]:
            drift.append(Drift("consistency", f"{packet}/notice.json",
                               f"is the notice of tenant {csvfile.cell(tenant)!r} (packet {packet_path(tenant)}), "
                               f"not of {packet_of[packet]!r} as notifications.csv says"))
        unknown = unknown_notice_keys(notice)
        if unknown:
            drift.append(Drift("consistency", f"{packet}/notice.json", f"holds keys a notice never has ({', '.join(unknown[:5])}"
                               f"{' and more' if len(unknown) > 5 else ''}): what they hold reaches the customer unseen"))
        md_path = report_dir / packet / "notice.md"
        if md_path.is_file():
            # The letter is rendered from notice.json alone: another customer's letter, or an edited one, is not it.
            written = md_path.read_bytes()
            try:
                # This release's letter, or the previous releases' (a report they wrote still verifies): rendered
                # only when this one's differs.
                same = any(written == render_packet_md(notice, heading_hash_escaped=escaped,
                                                       every_passage_counted=counted).encode("utf-8")
                           for escaped, counted in ((True, True), (True, False), (False, False)))
            except (KeyError, TypeError, ValueError, AttributeError):
                same = False
            if not same:
                drift.append(Drift("consistency", f"{packet}/notice.md",
                                   "is not the letter of the packet's notice.json (another customer's, or edited)"))
        for role in ("recipient", "exposed"):
            if role in notice and role not in roles[packet]:
                # The letter renders every section notice.json holds: one the list does not call for (another
                # customer's exposed requests copied in) would tell this customer of them.
                drift.append(Drift("consistency", f"{packet}/notice.json",
                                   f"holds {role} requests, and notifications.csv gives the customer no {role} row"))
        for role in sorted(roles[packet]):
            # The requests the notice tells of are the row's: a letter rewritten around another customer's
            # request (its notice.json and notice.md both) verified OK.
            part = notice.get(role)
            requests = part.get("requests") if isinstance(part, dict) else None
            told = ([str(r.get("request_id")) for r in requests if isinstance(r, dict)]
                    if isinstance(requests, list) else None)
            have = _ids_of(csvfile.cell(i) for i in told or [])
            if told is None or have != ids_of[(packet, role)]:
                drift.append(Drift("consistency", f"{packet}/notice.json",
                                   f"the {role} requests it tells of differ from notifications.csv's request_ids"))
        told_roles = notice.get("roles", [])
        if not isinstance(told_roles, list) or not all(isinstance(r, str) for r in told_roles):
            drift.append(Drift("consistency", f"{packet}/notice.json", f"roles is {_json(told_roles)}, not a list of roles"))
        elif sorted(told_roles) != sorted(roles[packet]):
            drift.append(Drift("consistency", f"{packet}/notice.json",
                               f"roles {sorted(told_roles)} differ from notifications.csv's {sorted(roles[packet])}"))
    return drift


_MD_ROW = re.compile(r"^\| (.+?) \| (.+?) \|$")
_HTML_ROW = re.compile(r"<tr><td>(.*?)</td><td>(.*?)</td></tr>")


def _summary_rows(report_dir: Path) -> dict[str, dict[str, str]]:
    """The two-column table rows of summary.md and summary.html, label -> value, per file."""
    out: dict[str, dict[str, str]] = {}
    md = report_dir / "summary.md"
    if md.is_file():
        rows: dict[str, str] = {}
        for line in md.read_text(encoding="utf-8").splitlines():
            m = _MD_ROW.match(line)
            if m:
                rows.setdefault(re.sub(r"\\(.)", r"\1", m.group(1)), m.group(2))
        out["summary.md"] = rows
    html = report_dir / "summary.html"
    if html.is_file():
        rows = {}
        for m in _HTML_ROW.finditer(html.read_text(encoding="utf-8")):
            rows.setdefault(unescape(m.group(1)), unescape(m.group(2)))
        out["summary.html"] = rows
    return out


def _check_counts(report_dir: Path, man: ReportManifest, suspects: list[dict[str, str]], evidence: list[dict[str, str]],
                  notifications: list[dict[str, str]]) -> list[Drift]:
    drift: list[Drift] = []
    packets = report_dir / "packets"
    n_packets = sum(1 for p in packets.iterdir() if p.is_dir()) if packets.is_dir() else 0
    counts = dict(man.counts)
    from_tables = {"suspects": len(suspects), "findings": len(evidence), "notifications": len(notifications), "packets": n_packets}
    for key, n in from_tables.items():
        if key in counts and counts[key] != n:
            # As JSON: a count written as the string "6" read "counts.packets is 6, the tables give 6".
            drift.append(Drift("consistency", MANIFEST, f"counts.{key} is {json.dumps(counts[key])}, the tables give {n}"))
    # The summary's own computation, fed with the CSVs as read back (the ingest figures come from
    # the manifest's counts): one source, so a count can only differ if a file was changed.
    want = dict(count_rows(suspects, evidence, notifications, counts))
    if suspects and "engine_signature" not in suspects[0]:  # a suspects.csv of an older version
        del want["suspects with the engine's bug signature"]
    for name, rows in _summary_rows(report_dir).items():
        for label, value in want.items():
            shown = rows.get(label, rows.get("  " + label))
            if value is not None and shown is not None and shown.strip() != str(value):
                drift.append(Drift("consistency", name, f"'{label}' says {shown.strip()}, the tables give {value}"))
    return drift


def _json_file(path: Path) -> Any:
    """A JSON file's content, or None when it cannot be read (the output hashes say what is wrong with it)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _check_records(report_dir: Path, man: ReportManifest) -> list[Drift]:
    """The manifest's copies of what the stage records and the case's own manifest say: the scan's and the match's
    parameters, the records' hashes, the case's time range and table sizes, the ingest's reconciliation. Edited in
    the manifest alone (a ceiling of 8192 made 4096, the last record's time moved, which the audit's deadline runs
    from), they verified OK (a review)."""
    drift: list[Drift] = []
    for name, part in (("scan.json", "scan"), ("match.json", "match")):
        record = _json_file(report_dir / name)
        recorded = record.get("parameters") if isinstance(record, dict) else None
        if recorded is not None and not _same(recorded, getattr(man.parameters, part)):
            drift.append(Drift("consistency", MANIFEST, f"parameters.{part} differ from the parameters {name} records"))
    for name in STAGE_RECORDS:
        sha = man.stage_records.get(name)
        if sha is None and (report_dir / name).is_file():
            drift.append(Drift("consistency", MANIFEST, f"stage_records does not name {name}, which the report holds"))
        elif sha is not None and (report_dir / name).is_file() and file_sha256(report_dir / name) != sha:
            drift.append(Drift("consistency", MANIFEST, f"stage_records names {name} by a SHA-256 it does not have"))
    kept = sorted((report_dir / CASE_FILE_DIR).glob("*")) if (report_dir / CASE_FILE_DIR).is_dir() else []
    recorded = (man.case_file or {}).get("sha256")
    recorded_copy = (man.case_file or {}).get("copy")
    if recorded_copy is not None and not (report_dir / recorded_copy).is_file():
        drift.append(Drift("consistency", recorded_copy, "missing: the manifest records the case file kept there"))
    for kept_copy in kept:  # (a report of an earlier release keeps none)
        if recorded is None or file_sha256(kept_copy) != recorded:
            drift.append(Drift("consistency", f"{CASE_FILE_DIR}/{kept_copy.name}", "is not the case file the manifest "
                               f"records (case_file.sha256 {_json(recorded)})"))
    drift += _check_listed_since(report_dir, man)
    case = _json_file(report_dir / "case" / MANIFEST)  # (a report rendered from a case elsewhere has none)
    if not isinstance(case, dict):
        return drift
    counts, tables, span = man.counts, case.get("tables") or {}, case.get("time_range") or [None, None]
    for key, value in (("first_received", span[0]), ("last_received", span[-1]), ("exchanges", tables.get("exchanges")),
                       ("engine_events", tables.get("engine_events")), ("quarantined", tables.get("quarantine"))):
        if value is not None and counts.get(key) != value:
            drift.append(Drift("consistency", MANIFEST, f"counts.{key} is {_json(counts.get(key))}, the case's manifest "
                               f"gives {_json(value)}"))
    for key in RECONCILIATION_KEYS:
        if key in man.reconciliation and key not in case:
            drift.append(Drift("consistency", MANIFEST, f"reconciliation.{key} is not in the case's manifest"))
        elif key in man.reconciliation and not _same(case[key], man.reconciliation[key]):
            drift.append(Drift("consistency", MANIFEST, f"reconciliation.{key} differs from the case's manifest"))
        elif key in case and key not in man.reconciliation and key not in RECONCILED_SINCE:
            drift.append(Drift("consistency", MANIFEST, f"reconciliation.{key} is missing (the case's manifest has it)"))
    return drift


#: Keys a report's reconciliation repeats from a release on: a report of an earlier release has none of them.
RECONCILED_SINCE = frozenset({"tokenizer_sha256"})


def _check_packet_spans(passages: list[Passage], finding_of: dict[str, str], evidence: list[dict[str, str]]) -> list[Drift]:
    """Each passage a packet tells of against the finding its reference names (references.csv) in the list's evidence
    (``evidence``, as decided): its offsets, every passage, tier, and for an exposed customer the part, score and
    tokens. A span rewritten in a notice (and in evidence.csv) with the hashes fixed verified OK (a review)."""
    from forensics.report.notices import parse_passages

    rows = {e.get("finding_id", ""): e for e in evidence}
    drift: list[Drift] = []
    for packet, role, span in passages:
        where = f"packets/{packet}/notice.json"
        row = rows.get(finding_of.get(str(span.get("reference")), ""))
        if row is None:
            drift.append(Drift("consistency", where, f"tells of reference {_json(span.get('reference'))}, which "
                               "names no finding of evidence.csv"))
            continue
        try:
            ends = tuple(int(row[k]) for k in ("recipient_start", "recipient_end", "source_start", "source_end"))
            passages_of = parse_passages(row.get("passages"), ends)  # type: ignore[arg-type]
            if role == "recipient":
                want: dict[str, Any] = {
                    "response_start": ends[0], "response_end": ends[1], "tier": row["tier"],
                    "all_passages": [{"response_start": a, "response_end": b} for a, b, _, _ in passages_of]}
            else:
                want = {"start": ends[2], "end": ends[3], "part": row.get("source_kind") or "prompt",
                        "tier": row["tier"], "score": float(row["score"]), "matched_tokens": int(row["matched_tokens"]),
                        "all_passages": [{"start": c, "end": d} for _, _, c, d in passages_of]}
        except (KeyError, ValueError):
            continue  # (a malformed evidence.csv is drift of its own)
        shown = dict(span)
        if role != "recipient" and isinstance(shown.get("all_passages"), list):
            # (each passage's offsets; its preview and secrets, as the strongest's, are what the letter renders)
            shown["all_passages"] = [{k: x.get(k) for k in ("start", "end")} if isinstance(x, dict) else x
                                     for x in shown["all_passages"]]
        differ = [k for k in want if shown.get(k) != want[k]]
        if differ:
            drift.append(Drift("consistency", where, f"its {role} passage of reference {span.get('reference')} differs "
                               f"from finding {row.get('finding_id')} of evidence.csv in {', '.join(differ)}"))
    return drift


def consistency(report_dir: Path, man: ReportManifest) -> list[Drift]:
    """Everything the report's own tables imply, compared with what it says: the notification
    list, the packets, and the counts in the summary and the manifest."""
    report_dir = Path(report_dir)
    tables = {name: _read_csv(report_dir / name) for name in ("suspects.csv", "evidence.csv", "notifications.csv")}
    missing = [name for name, rows in tables.items() if rows is None]
    if missing:
        return [Drift("consistency", name, "missing: the notification list cannot be checked without it") for name in missing]
    suspects, evidence, notifications = (tables[n] or [] for n in ("suspects.csv", "evidence.csv", "notifications.csv"))
    ledger_drift, decided = check_ledgers(report_dir, man)
    if any(d.path == "verdicts.jsonl" for d in ledger_drift):
        return ledger_drift + [Drift("consistency", "notifications.csv", "not checked: the verdicts it was rendered with "
                                     "cannot be read back from verdicts.jsonl")]
    review = _read_csv(report_dir / "review.csv") or []
    marked = _marked_by_analysts(evidence, review, decided)
    if decided and evidence and "finding_id" in evidence[0]:
        # The list was rendered honouring the verdicts recorded then: check it against the same.
        from forensics.review.verdicts import adjust_rows

        evidence = adjust_rows(evidence, review, decided)
    for name, rows, columns in (("suspects.csv", suspects, ("request_id", "tenant_id")),
                                ("evidence.csv", evidence, ("recipient_request_id", "recipient_tenant_id", "source_request_id",
                                                            "source_tenant_id", "tier")),
                                # Every column verify recomputes: one deleted went unchecked.
                                ("notifications.csv", notifications, ("tenant_id", "role", "tier", "n_requests",
                                                                      "request_ids", "packet", "n_findings"))):
        absent = [c for c in columns if rows and c not in rows[0]]
        if absent:
            return [Drift("consistency", name, f"has no column {absent[0]!r}")]
    # The packets' passages and the references, read once for the two checks that follow them.
    passages = _packet_passages(report_dir)
    finding_of = {r.get("reference", ""): r.get("finding_id", "") for r in _read_csv(report_dir / "references.csv") or []}
    marked += _person_marks(passages, finding_of, man, decided)
    return (ledger_drift + marked + _check_notifications(suspects, evidence, notifications)
            + _check_packets(report_dir, notifications) + _check_counts(report_dir, man, suspects, evidence, notifications)
            + check_references(report_dir, man) + _check_records(report_dir, man) + _check_packet_spans(passages, finding_of, evidence))


#: A passage a packet tells of: (packet folder name, role, the passage as notice.json holds it).
Passage = tuple[str, str, dict[str, Any]]


def _packet_passages(report_dir: Path) -> list[Passage]:
    """Every passage the packets' notice.json tell of, both roles, packet by packet (an unreadable notice has none:
    the packet checks name it)."""
    out: list[Passage] = []
    for path in sorted((report_dir / "packets").glob("*/notice.json")):
        notice = _json_file(path)
        sides = notice if isinstance(notice, dict) else {}
        for role, key in (("recipient", "foreign_passages"), ("exposed", "spans")):
            part = sides.get(role)
            requests = part.get("requests") if isinstance(part, dict) else None
            for req in requests if isinstance(requests, list) else []:
                spans = req.get(key) if isinstance(req, dict) else None
                out += [(path.parent.name, role, x) for x in (spans if isinstance(spans, list) else []) if isinstance(x, dict)]
    return out


def _person_marks(passages: list[Passage], finding_of: dict[str, str], man: ReportManifest,
                  decided: dict[str, str]) -> list[Drift]:
    """Each packet passage's ``confirmed_by_person`` against the verdicts: the letter tells the customer a person
    checked the passage, so a mark no verdict gives (or one a confirm left out) is drift."""
    from forensics.review import VERDICTS
    from forensics.review.verdicts import Resolution

    record = (man.ledgers or {}).get(VERDICTS)
    widened = {csvfile.cell(f) for f in Resolution.from_json(record).widened}
    wrong: list[str] = []
    for packet, _, x in passages:
        fid = finding_of.get(str(x.get("reference", "")), "")
        person = decided.get(fid) == "confirm" and fid not in widened
        if bool(x.get("confirmed_by_person")) != person:
            wrong.append(f"{packet}: {x.get('reference')}")
    if not wrong:
        return []
    return [Drift("consistency", "packets", f"{len(wrong)} passage(s) say a person confirmed them where the verdicts do not, "
                  f"or leave out a confirm (e.g. {wrong[0]})")]


def _marked_by_analysts(evidence: list[dict[str, str]], review: list[dict[str, str]], decided: dict[str, str]) -> list[Drift]:
    """The rows evidence.csv and review.csv say an analyst decided, against the verdicts as the manifest resolves them:
    with its record edited (or its format mark deleted), review.html, audit and the notebook read other decisions
    than the files show, and the rest of verify, reading the files, found nothing wrong."""
    from forensics.report import DISMISSED_WHY
    from forensics.review.verdicts import CONFIRMED_RULE

    wrong = [r.get("finding_id", "") for r in evidence
             if r.get("tier_rule") == csvfile.cell(CONFIRMED_RULE) and decided.get(r.get("finding_id", "")) != "confirm"]
    wrong += [r.get("finding_id", "") for r in review
              if r.get("why_not_notified") == csvfile.cell(DISMISSED_WHY) and decided.get(r.get("finding_id", "")) != "dismiss"]
    if not wrong:
        return []
    return [Drift("consistency", "verdicts.jsonl", f"{len(wrong)} finding(s) the report's files say an analyst decided are not "
                  f"decided so by the verdicts as the manifest resolves them (e.g. {wrong[0]!r})")]


def check_ledgers(report_dir: Path, man: ReportManifest) -> tuple[list[Drift], dict[str, str]]:
    """The ledgers' hash chains, and the prefix the manifest recorded at render time.

    Lines appended after the report was rendered are no drift (a verdict or a notice sent is
    recorded after the report by nature); an edited, removed or reordered line is, and so is a
    recorded prefix that is no longer there. Returns the drift and the decisions (finding id as
    written in the report's CSVs -> confirm/dismiss) of the verdicts the report was rendered with.
    """
    from forensics.review import LEDGERS, VERDICTS, chain
    from forensics.review.verdicts import Resolution, decisions, resolve

    drift: list[Drift] = []
    recorded = man.ledgers or {}
    decided: dict[str, str] = {}
    for name in LEDGERS:
        path = report_dir / name
        rec = recorded.get(name) if isinstance(recorded.get(name), dict) else None
        if not path.is_file():
            if rec is not None and rec.get("entries"):
                drift.append(Drift("ledger", name, f"missing: the report was rendered with {rec['entries']} line(s) of it"))
            continue
        c = chain.read(path)
        if c.problem:
            drift.append(Drift("ledger", name, f"hash chain broken at {c.problem}"))
        if rec is None:  # every line came after the report was rendered
            continue
        n = rec.get("entries", 0)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            drift.append(Drift("ledger", name, f"the manifest records {_json(n)} as its line count, not a whole number"))
            continue
        if n > len(c.hashes) or (n and c.hashes[n - 1] != rec.get("head")):
            drift.append(Drift("ledger", name, f"the {n} line(s) the report was rendered with are no longer there unchanged"))
            continue
        if name == VERDICTS:  # as the render resolved them (verdicts carried to new finding ids, or out of effect)
            recorded_resolution = Resolution.from_json(rec)
            # The record is what audit, review.html and the notebook follow: it must be what the verdicts and the
            # report's findings give (its evidence.csv and review.csv hold every finding, as the verdicts moved them).
            # An earlier release's report resolved nothing and says so (no format mark): its verdicts count by id.
            again = resolve(c.entries[:n], (_read_csv(report_dir / "evidence.csv") or []) + (_read_csv(report_dir / "review.csv") or []))
            if "resolution" in rec and again.to_json() != {**recorded_resolution.to_json(), "resolution": rec["resolution"]}:
                drift.append(Drift("ledger", name, "the manifest's record of where the verdicts' passages are (carried, partial, "
                                   f"stale) is not what the verdicts and the report's findings give: {_json(again.to_json())}"))
            decided = {csvfile.cell(k): v for k, v in decisions(c.entries[:n], recorded_resolution).items()}
    return drift, decided


def check_references(report_dir: Path, man: ReportManifest) -> list[Drift]:
    """references.csv against the key the manifest records: each reference is the HMAC of its finding id. A key that
    is no key, or references it does not give, are drift (the next render keys references with the recorded one)."""
    from forensics.report.notices import evidence_key, reference
    from forensics.review.verdicts import raw_id

    key = man.references_key
    if key is None:  # a report of an earlier release: its key was its evidence.csv's bytes
        evidence = report_dir / "evidence.csv"
        if not evidence.is_file():
            return []
        key = evidence_key(evidence.read_bytes()).hex()
    try:
        raw = bytes.fromhex(key)
    except ValueError:
        raw = b""
    if len(raw) != 32:
        return [Drift("consistency", MANIFEST, f"references_key {_json(key)} is not a 256-bit key in hex")]
    wrong = [r.get("finding_id", "") for r in _read_csv(report_dir / "references.csv") or []
             if r.get("reference") != reference(raw, raw_id(r.get("finding_id", "")))]
    if wrong:
        return [Drift("consistency", "references.csv", f"{len(wrong)} reference(s) are not those the manifest's references_key "
                      f"gives (e.g. of finding {wrong[0]!r})")]
    return []


def _check_listed_since(report_dir: Path, man: ReportManifest) -> list[Drift]:
    """The manifest's ``listed_since`` (the audit's deadlines run from it) names the customers of notifications.csv,
    each at a time no later than the report's last log record: a customer's time edited later, or one added, moved
    its deadline without a trace."""
    if man.listed_since is None:
        return []
    listed = listed_tenants(report_dir)
    if listed is None:
        return []  # the output check names it
    drift: list[Drift] = []
    if set(man.listed_since) != listed:
        drift.append(Drift("consistency", MANIFEST, "listed_since does not name the customers of notifications.csv"))
    until = utc_or_none(man.counts.get("last_received"))

    def bad(value: Any) -> bool:
        when = utc_or_none(value)
        return when is None or until is None or when > until

    late = sorted(t for t, v in man.listed_since.items() if bad(v))
    if late:
        drift.append(Drift("consistency", MANIFEST, f"listed_since gives {len(late)} customer(s) a time that is not a time "
                                                   "at or before counts.last_received"))
    return drift


def _json(value: Any) -> str:
    """``value`` as JSON, shortened for a message (never for a comparison: :func:`_same`)."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def _same(a: Any, b: Any) -> bool:
    """Whether two JSON values are equal, compared whole: the shortened message form hid an edit past its 200th
    character (a review: the scope's window_start or match's seed edited in the manifest verified OK)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def case_file_parameters(man: ReportManifest, case_file: Path, root: Path) -> list[Drift]:
    """What the manifest says came from the case file, checked against the case file itself.

    The case file is hashed, but a re-run takes its settings from the manifest (stages run one by one
    record options there too). So a report built with another window, pointed back at the honest case
    file, re-ran to its own bytes. Each parameter recorded as coming from the file, the inputs and the
    ``[section]`` tables (they come only from the file) must equal the file's. A parameter recorded as a
    command-line option is the manifest's word alone: the signature (``--sign``) is what vouches for it.
    """
    shown = man.case_file.get("path", case_file.name) if man.case_file else case_file.name
    case = man.parameters.case if isinstance(man.parameters.case, dict) else {}
    values, sources = case.get("values") or {}, case.get("sources") or {}
    # A required key an option gave may be missing from the file (forensics run --ceiling ...); one auto-detected too
    # (--ceiling auto: the scan records the value it read, and the option that asked for it is no longer said)
    given = (frozenset(k for k, src in sources.items() if src in ("option", "auto-detected")) if isinstance(sources, dict)
             else frozenset())
    try:
        mine = load_case_file(case_file, provided=given).to_json()["values"]
    except ConfigError as exc:
        return [Drift("case_file", shown, f"cannot be read as a case file ({exc})")]
    root = Path(os.path.realpath(root))  # the case file's paths are resolved: so must the root be (a link, /tmp)
    mine["inputs"] = [[Path(os.path.relpath(i["path"], root)).as_posix(), i["format"], i.get("timezone")]
                      for i in mine["inputs"]]
    listed = values.get("inputs")
    recorded_inputs: list[Any] = listed if isinstance(listed, list) else []
    theirs = dict(values, inputs=[[i.get("path"), i.get("format"), i.get("timezone")] if isinstance(i, dict) else i
                                  for i in recorded_inputs])
    if mine.get("tokenizer"):
        mine["tokenizer"] = Path(os.path.relpath(mine["tokenizer"], root)).as_posix()
    drift = []
    for key in sorted(set(mine) | set(theirs)):
        if key != "sections" and sources.get(key) != "file":
            continue  # a default, a detected value or an option: not the file's to confirm
        if theirs.get(key) != mine.get(key):
            drift.append(Drift("case_file", shown, f"the manifest records {key} = {_json(theirs.get(key))} as the case "
                                                   f"file's, which says {_json(mine.get(key))}"))
    return drift


# --------------------------------------------------------------------------------------------
# re-run
# --------------------------------------------------------------------------------------------


def _rerun_config(man: ReportManifest, root: Path, manifest_path: Path) -> CaseConfig:
    """The case configuration recorded in a report's manifest, with paths made absolute."""
    try:
        cfg = CaseConfig.from_json(dict(man.parameters.case))
    except (KeyError, TypeError, ValueError, ConfigError) as exc:
        raise CaseError(f"manifest.json records no usable case parameters ({type(exc).__name__}: {exc})",
                        file=manifest_path, fix="re-run needs a report written by this version of `forensics run` or `report`") from None
    cfg.inputs = [InputSpec((root / i.path).resolve(), i.format, i.profile, i.timezone) for i in cfg.inputs]
    if cfg.tokenizer is not None:
        cfg.tokenizer = (root / cfg.tokenizer).resolve()
    if man.case_file:
        cfg.file = (root / man.case_file["path"]).resolve()
    for key in ("real_ceiling_tokens", "advertised_window_tokens"):
        # Detected values are detected again from the inputs, as the original run did.
        if cfg.source(key) == "auto-detected":
            setattr(cfg, key, "auto")
    return cfg


def _match_options(report_dir: Path) -> dict[str, Any]:
    """Match parameters that were given as command-line options (match.json records each origin)."""
    path = report_dir / "match.json"
    if not path.is_file():
        return {}
    try:
        info = MatchRecord.from_json(json.loads(path.read_text(encoding="utf-8")), file=path)
    except (ValueError, CaseError):  # no options to repeat; the output check names the changed file
        return {}
    return {k: info.parameters[k] for k, src in info.parameter_sources.items() if src == "option" and k in info.parameters}


def _added_inputs(by_format: dict[str, list[Path]], man: ReportManifest, root: Path) -> list[str]:
    """The files a re-run would read from the recorded input folders and patterns that the report's manifest does not
    list (relative to ``root``, as it lists them)."""
    from forensics.ingest import expand_inputs

    try:
        found, _ = expand_inputs([p for paths in by_format.values() for p in paths])
    except (OSError, ForensicsError):
        return []  # the re-run says what it cannot read
    recorded = {str(e.get("path")) for e in man.inputs}
    base = Path(os.path.realpath(root))
    shown = (Path(os.path.relpath(Path(os.path.realpath(p.parent)) / p.name, base)).as_posix() for p, _ in found)
    return sorted({rel for rel in shown if rel not in recorded})


def _inputs_by_format(cfg: CaseConfig, man: ReportManifest, root: Path) -> dict[str, list[Path]]:
    by_format: dict[str, list[Path]] = {}
    if cfg.inputs:
        for spec in cfg.inputs:
            by_format.setdefault(spec.format, []).append(spec.path)
    else:  # stages run one by one on files named on the command line: the manifest lists each
        for e in man.inputs:
            by_format.setdefault(e.get("format") or "auto", []).append((root / e["path"]).resolve())
    return by_format


def _compare(original: Path, again: Path, exclude: set[str]) -> list[Drift]:
    def files(root: Path) -> set[str]:
        out = set()
        for p in root.rglob("*"):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and rel.split("/")[0] not in exclude and not rel.startswith(".") and rel not in NOT_COMPARED:
                out.add(rel)
        return out

    drift: list[Drift] = []
    a, b = files(original), files(again)
    for rel in sorted(a | b):
        if rel not in b:
            drift.append(Drift("rerun", rel, "not written by the re-run"))
        elif rel not in a:
            drift.append(Drift("rerun", rel, "written by the re-run but absent from the report"))
        elif (original / rel).read_bytes() != (again / rel).read_bytes():
            drift.append(Drift("rerun", rel, "differs from the re-run's bytes"))

    def manifest_body(root: Path) -> Any:
        body = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        # The only field that depends on where the report lies (the re-run writes elsewhere).
        body.pop("inputs_root", None)
        return body

    def manifest_bytes(root: Path) -> bytes:
        # Byte for byte but for the inputs_root line: a key given twice, or a value spaced otherwise, reads
        # differently to different JSON readers, and parsed alone it would pass.
        return re.sub(rb'(?m)^  "inputs_root": .*$', b'  "inputs_root": ""', (root / MANIFEST).read_bytes(), count=1)

    try:
        mine, theirs = manifest_body(original), manifest_body(again)
        same_bytes = manifest_bytes(original) == manifest_bytes(again)
    except (OSError, ValueError):
        drift.append(Drift("rerun", MANIFEST, "unreadable"))
        return drift
    for key in sorted(set(mine) | set(theirs)):
        if mine.get(key) != theirs.get(key):
            drift.append(Drift("rerun", MANIFEST, f"'{key}' differs from the re-run's"))
    if not same_bytes and not any(d.path == MANIFEST for d in drift):
        drift.append(Drift("rerun", MANIFEST, "differs from the re-run's bytes (the same values written otherwise: "
                                              "a key given twice, other spacing)"))
    return drift


def _copy_ledger_prefixes(report_dir: Path, man: ReportManifest, target: Path) -> None:
    """Give a re-run the ledger lines the report was rendered with (not those added since)."""
    from forensics.review import LEDGERS

    for name, rec in sorted((man.ledgers or {}).items()):
        n = int(rec.get("entries", 0)) if isinstance(rec, dict) else 0
        if n and name in LEDGERS and (report_dir / name).is_file():
            lines = (report_dir / name).read_bytes().split(b"\n")[:n]
            write_bytes(target / name, b"\n".join(lines) + b"\n")


def _input_present(path: Path) -> bool:
    """Whether a recorded input is there to re-run from: a pattern (``gateway/*.jsonl``) when it still
    matches something, as ingest expands it (a pattern is no path that exists)."""
    if path.exists() or not glob.has_magic(str(path)):
        return path.exists()
    return bool(glob_matches(path).matches)


def rerun(report_dir: Path, man: ReportManifest, root: Path, progress: Reporter | None = None) -> list[Drift]:
    """Re-run ingest, scan, match and report from the inputs and parameters the report records,
    into a temporary folder, and list every output that is not byte-identical."""
    from forensics import api
    from forensics.report import NOT_OUTPUTS, report_dir_for

    report_dir = Path(report_dir)
    cfg = _rerun_config(man, root, report_dir / MANIFEST)
    by_format = _inputs_by_format(cfg, man, root)
    if not by_format:
        raise CaseError("the report records no inputs to re-run from", file=report_dir / MANIFEST,
                        fix="--rerun needs a report whose manifest lists its inputs")
    missing = sorted(Path(os.path.relpath(p, root)).as_posix() for paths in by_format.values() for p in paths
                     if not _input_present(p))
    if missing:  # the hash check has already named it; say why nothing was compared
        return [Drift("rerun", MANIFEST, f"not re-run: the recorded input {missing[0]} is missing "
                      "(give --inputs FOLDER when the inputs moved)")]
    added = _added_inputs(by_format, man, root)
    if added:  # a re-run would read them too, and every output would differ with no word of why
        return [Drift("rerun", MANIFEST, f"not re-run: the input folders hold {len(added)} file(s) the report does not "
                      f"record, which a re-run would read ({first_few(added, 3)}): added since the report? give --inputs "
                      "a folder holding only the recorded files")]
    options = _match_options(report_dir)
    with tempfile.TemporaryDirectory(prefix="forensics-rerun-") as tmp:
        out = Path(tmp) / "out"
        case_dir = report_dir_for(out, cfg.name) / "case"
        mapped = {spec.path for spec in cfg.inputs if spec.profile is not None}
        for fmt in sorted(by_format):  # one call per format, as `forensics run` does
            plain = [p for p in by_format[fmt] if p not in mapped]
            if plain:
                # Stages run one by one list each file they read, not the folder they were given: a file of no
                # known format there (a README beside the logs) was a quarantine row, not an error.
                api.ingest(case_dir, plain, fmt=None if fmt == "auto" else fmt, config=cfg, progress=progress,
                           found_in_folder=not cfg.inputs)
        for spec in cfg.inputs:  # each mapped entry on its own, with its profile
            if spec.profile is not None:
                api.ingest(case_dir, [spec.path], fmt=spec.format, config=cfg, progress=progress, profile=spec.profile)
        api.scan(case_dir, cfg, progress=progress)
        api.match(case_dir, cfg, progress=progress, overrides=options or None)
        _copy_ledger_prefixes(report_dir, man, report_dir_for(out, cfg.name))
        carried = {k: v for k, v in (("references_key", man.references_key), ("listed_since", man.listed_since)) if v}
        if carried:  # the references the report cites came from its first render's key, and each customer's time on the
            # list from the renders before it: both kept since
            write_bytes(report_dir_for(out, cfg.name) / MANIFEST, json.dumps(carried).encode())
        again = api.report(case_dir, cfg, out, progress=progress).report_dir
        if "copy" not in (man.case_file or {}) and not (report_dir / CASE_FILE_DIR).exists() \
                and (again / CASE_FILE_DIR).exists():
            # A report of an earlier release kept no copy of its case file, and its manifest records none: the re-run
            # renders it as that release did. (A copy the manifest records, deleted from the report, is drift.)
            from forensics.report import manifest as manifest_file

            shutil.rmtree(again / CASE_FILE_DIR)
            body = manifest_file.read(again)
            earlier = dataclasses.replace(body, case_file={k: v for k, v in (body.case_file or {}).items() if k != "copy"}
                                          if body.case_file is not None else None)
            manifest_file.write(again, earlier, exclude=set(body.outputs_excluded))
        from forensics.review import OWN_FILES

        # The ledgers are people's records, not the pipeline's: check_ledgers covers them.
        exclude = set(man.outputs_excluded) | set(NOT_OUTPUTS) | set(OWN_FILES)
        return _compare(report_dir, again, exclude)
