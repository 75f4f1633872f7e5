"""One module per log format; importing this package registers every one of them.

A module here builds a :class:`forensics.ingest.registry.LogFormat` and registers it at import.
Modules are imported in sorted name order, so the registry is the same in every process (the
ingest pool's workers import it afresh); the order formats are sniffed in is their declared
``sniff_order``, not the import order.
"""

from __future__ import annotations

import importlib
import pkgutil


def _import_all() -> list[str]:
    """Import every format module of this package; return their names."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{__name__}.{name}")
    return names


MODULES = _import_all()
