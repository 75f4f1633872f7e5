"""The match stage's targets: the suspect responses and a length-matched control sample of
non-suspect responses, with their texts (see ``match/__init__.py``)."""


import collections
import heapq
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import xxhash

from forensics.artifacts import RequestKey
from forensics.case import Case, row_group_batches
from forensics.errors import CaseError
from forensics.match.index import NO_TIME, Target
from forensics.match.stream import (
    PASS_COLUMNS,
    tenant_code,
    to_us,
    value_bytes,
)
from forensics.match.tiers import MatchParams


def _merge_row(target: Target, text: str, truncated: bool, received: int, deadline: int, node: str | None) -> None:
    """Fold another row of a suspect's request into its target (see :func:`load_targets`)."""
    if len(text) > len(target.text):
        target.text = text
    target.prompt_truncated = target.prompt_truncated and truncated
    if received != NO_TIME and (target.received_us == NO_TIME or received < target.received_us):
        target.received_us = received
    if deadline != NO_TIME and (target.deadline_us == NO_TIME or deadline > target.deadline_us):
        target.deadline_us = deadline
    target.decode_node = target.decode_node or node


def _iter_exchanges(path: Path, columns: list[str], batch_rows: int) -> Iterator[pa.RecordBatch]:
    yield from row_group_batches(exchanges_file(path, columns), columns, batch_rows)


def request_key(request_id: str, tenant_id: str | None) -> tuple[str, bool, str]:
    """A request's identity, (request id, tenant), as a sort key (no tenant sorts last).

    Two customers may send the same request id (client-supplied ids, two gateways): every table
    of this stage keys requests by both.
    """
    return RequestKey(request_id, tenant_id).sort_key()


#: A control candidate's response text is kept with it while the sample is drawn when it is at most this
#: many UTF-8 bytes: at most ``control_size`` candidates per length class are held, so at most
#: ``control_size`` x 32 KiB of such text over all classes (6 MiB at the default 200), where the second read
#: of the column for every chosen text took 0.2 s (a third of the targets' loading) on the 1 GB benchmark
#: incident. Longer texts are read again once chosen.
KEEP_CONTROL_TEXT_BYTES = 16 << 10

#: A control target's text not read yet (see :func:`_fill_texts`); compared by identity.
_UNREAD = "\x00unread"


def _size_class(nbytes: int) -> int:
    """Length class of a response for matching the control sample to the suspects: log2 of its bytes."""
    return int(nbytes).bit_length()


def load_targets(case: Case, p: MatchParams) -> tuple[list[Target], dict[str, Any]]:
    """Suspect responses (from the suspects table) and the control sample, with their texts.

    Suspects are (request id, tenant) pairs. The control sample is length-matched to the suspects:
    the ``control_size`` places are shared among length classes (log2 of the response's bytes) as the
    suspects are, largest remainder first, and each class takes its non-suspect responses with the
    smallest xxh64(request id) (ties: the tenant's code); places a class cannot fill go to the
    smallest keys left in any class. The choice never depends on the order of the rows. Candidates
    are kept without their text (at most ``control_size`` per class); a second read fetches the
    texts of the chosen ones.
    """
    sus_path = case.require("suspects", "scan")
    ex_path = case.require("exchanges", "ingest")
    sus = pq.ParquetFile(sus_path).read(columns=["request_id", "tenant_id", "engine_signature", "decode_node",
                                                 "reported_prompt_tokens"]).to_pylist()
    suspects = {(r["request_id"], r["tenant_id"]): r for r in sus}
    found: dict[tuple[str, str | None], Target] = {}
    suspect_classes: collections.Counter[int] = collections.Counter()
    # Per length class, a max-heap (negated keys) of candidates: (-xxh64(request id), -tenant code, row, Target).
    # The row number is unique, so two entries never get as far as comparing their Targets.
    heaps: dict[int, list[tuple[int, int, int, Target]]] = {}
    cols = ["request_id", "tenant_id", "received_at", "completed_at", "decode_node", "prompt_truncated", "response_text"]
    row0 = 0
    for batch in _iter_exchanges(ex_path, cols, 1024):
        rids = batch.column("request_id").to_pylist()
        rec, done = to_us(batch.column("received_at")), to_us(batch.column("completed_at"))
        tenants, nodes = batch.column("tenant_id").to_pylist(), batch.column("decode_node").to_pylist()
        truncated = batch.column("prompt_truncated").to_pylist()
        # Texts become Python strings only for the suspects here (the controls' in a second read).
        texts = batch.column("response_text")
        sizes = value_bytes(texts).tolist()
        for i, rid in enumerate(rids):
            s = suspects.get((rid, tenants[i]))
            if s is None and (not sizes[i] or p.control_size == 0):
                continue
            r_i, d_i = rec[i], done[i]
            received: int = r_i if r_i is not None else NO_TIME
            deadline: int = d_i if d_i is not None else received
            if s is not None:
                known = found.get((rid, tenants[i]))
                if known is None:
                    found[(rid, tenants[i])] = Target(rid, tenants[i], received, deadline, s["decode_node"] or nodes[i],
                                                      bool(s["engine_signature"]), False, texts[i].as_py() or "",
                                                      placeholder_usage=s.get("reported_prompt_tokens") == 1,
                                                      prompt_truncated=bool(truncated[i]))
                else:
                    # A second row of the suspect (the ingest keeps two when each holds what the other lacks: a spend
                    # log's cut prompt with the answer, a split log's whole prompt without it): the answer from the
                    # row that holds the longest, and the prompt is cut only if every row's is. The first row alone
                    # searched an empty answer, or called a prompt the case holds whole cut (a review).
                    _merge_row(known, texts[i].as_py() or "", bool(truncated[i]), received, deadline, nodes[i])
                continue
            heap = heaps.setdefault(_size_class(sizes[i]), [])
            key = (-xxhash.xxh64_intdigest(rid.encode("utf-8", "surrogatepass"), seed=p.seed), -tenant_code(tenants[i]))
            if len(heap) >= p.control_size and key <= heap[0][:2]:
                continue
            # A short text is kept with its candidate (KEEP_CONTROL_TEXT_BYTES); a longer one is read again once chosen.
            text = (texts[i].as_py() or "") if sizes[i] <= KEEP_CONTROL_TEXT_BYTES else _UNREAD
            item = (*key, row0 + i, Target(rid, tenants[i], received, deadline, nodes[i], False, True, text))
            if len(heap) < p.control_size:
                heapq.heappush(heap, item)
            else:
                heapq.heapreplace(heap, item)
        row0 += len(rids)
    for t in found.values():
        suspect_classes[_size_class(len(t.text.encode("utf-8", "surrogatepass")))] += 1
    chosen = _length_matched(heaps, suspect_classes, p.control_size)
    _fill_texts(ex_path, chosen)
    missing = [{"request_id": k[0], "tenant_id": k[1]} for k in sorted(set(suspects) - set(found), key=lambda k: request_key(*k))]
    controls = sorted(chosen.values(), key=lambda t: request_key(t.request_id, t.tenant_id))
    targets = [found[k] for k in sorted(found, key=lambda k: request_key(*k))] + controls
    info = {
        "suspects": len(suspects),
        "suspects_missing_from_exchanges": missing,
        "suspects_with_empty_response": sum(1 for t in found.values() if not t.text),
        "suspects_without_completed_at": sum(1 for t in found.values() if t.deadline_us == t.received_us),
        "control_length_classes": {f"{1 << (c - 1) if c else 0}+ bytes": n for c, n in sorted(
            collections.Counter(_size_class(len(t.text.encode("utf-8", "surrogatepass"))) for t in controls).items())},
        "suspect_length_classes": {f"{1 << (c - 1) if c else 0}+ bytes": n for c, n in sorted(suspect_classes.items())},
    }
    return targets, info


def _length_matched(heaps: dict[int, list[tuple[int, int, int, Target]]], suspect_classes: collections.Counter[int],
                    size: int) -> dict[int, Target]:
    """The control sample by row: places shared among length classes as the suspects are."""
    ordered = {c: sorted(h, reverse=True) for c, h in heaps.items()}  # smallest keys first
    total = sum(suspect_classes.values())
    quota: dict[int, int] = {}
    if total:
        exact = {c: size * n / total for c, n in suspect_classes.items()}
        quota = {c: int(v) for c, v in exact.items()}
        for c in sorted(exact, key=lambda c: (-(exact[c] - quota[c]), c))[: size - sum(quota.values())]:
            quota[c] += 1
    chosen: dict[int, Target] = {}
    for c, n in quota.items():
        for item in ordered.get(c, [])[:n]:
            chosen[item[2]] = item[3]
    rest = sorted((item for h in ordered.values() for item in h if item[2] not in chosen), reverse=True)
    for item in rest[: max(size - len(chosen), 0)]:
        chosen[item[2]] = item[3]
    return chosen


def _fill_texts(path: Path, chosen: dict[int, Target]) -> None:
    """Read the response texts of the rows ``chosen`` that were not kept with them (a second pass over
    that one column, up to the last such row)."""
    rows = sorted(row for row, t in chosen.items() if t.text is _UNREAD)
    if not rows:
        return
    row0, j = 0, 0
    for batch in _iter_exchanges(path, ["response_text"], 4096):
        n = batch.num_rows
        col = batch.column("response_text")
        while j < len(rows) and rows[j] < row0 + n:
            chosen[rows[j]].text = col[rows[j] - row0].as_py() or ""
            j += 1
        row0 += n
        if j == len(rows):
            break


def exchanges_file(path: Path, columns: list[str] = PASS_COLUMNS) -> pq.ParquetFile:
    """The exchanges table, checked to have ``columns`` (by default every column the pass reads)."""
    pf = pq.ParquetFile(path)
    missing = [c for c in columns if c not in pf.schema_arrow.names]
    if missing:
        raise CaseError(f"exchanges table has no column {missing[0]!r}", file=path,
                        fix="re-run `forensics ingest` with this version of forensics")
    return pf
