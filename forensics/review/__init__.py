"""From findings to notices sent: analyst verdicts, the notification ledger and the audit.

A report folder may hold, next to what ``forensics report`` writes:

- ``verdicts.jsonl``: every analyst decision on a finding or review candidate (forensics.review.verdicts);
- ``notices.jsonl``: every notice sent to a customer (forensics.review.ledger);
- ``audit.csv``: the last ``forensics audit`` (derived; rewritten by each audit, dropped by a re-render);
- ``review.html``: the evidence viewer (forensics.review.viewer; derived, dropped by a re-render).

The two ledgers are hash-chained (forensics.review.chain), carried byte for byte into every
rebuilt report folder, and never among the manifest's hashed outputs (they grow after the report
is rendered). Instead the manifest's ``ledgers`` records, for each, how many lines it had and the
hash of the last one when the report was rendered; ``forensics verify`` checks the whole chain and
that this recorded prefix is still there unchanged.
"""

from __future__ import annotations

VERDICTS = "verdicts.jsonl"
NOTICES = "notices.jsonl"
AUDIT = "audit.csv"
VIEWER = "review.html"
#: Ledgers a report folder keeps across re-renders (appended to, never rewritten).
LEDGERS = (VERDICTS, NOTICES)
#: Files of a report folder forensics writes outside the manifest's outputs.
OWN_FILES = frozenset((*LEDGERS, AUDIT, VIEWER))
