"""SIGINT and SIGTERM stop a run cleanly, and within seconds even when it is busy in native code.

:func:`signals_stop_the_run` makes both signals raise :class:`forensics.errors.Interrupted` in
the main thread, so the run unwinds through its ``finally`` blocks: worker pools killed
(forensics.workers), the half-built report folder removed (forensics.report.report_folder), the
previous report untouched. Native code may hold the main thread for long (a DuckDB query, a
Parquet read) or swallow the signal into its own error (DuckDB: "Query interrupted"): the signal
also wakes a watchdog thread through the signal wakeup fd, which calls ``on_stuck`` if the
process is still there after :data:`GRACE_SECONDS`. The CLI passes the function that says why
and exits (it is the only module that prints or exits).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from forensics.errors import Interrupted

#: Seconds a signalled run has to unwind (kill its workers, remove its temporary folder) before
#: ``on_stuck`` is called.
GRACE_SECONDS = 5.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: The signal the current block received, if any (see :func:`stop_if_signalled`).
_received: list[int] = []


def stop_if_signalled() -> None:
    """Raise Interrupted if the running block received SIGINT or SIGTERM. Python drops an exception raised where
    it cannot propagate (a weakref or ctypes callback, ``__del__``): the handler's was lost there, and the run went
    on and replaced the report (a review). Called before a step that cannot be undone."""
    if _received:
        raise Interrupted(_received[0])


@contextlib.contextmanager
def signals_stop_the_run(on_stuck: Callable[[int], None]) -> Iterator[None]:
    """For the block: SIGINT/SIGTERM raise Interrupted in the main thread; ``on_stuck(signum)``
    runs in a watchdog thread if the process has not ended :data:`GRACE_SECONDS` after the signal.

    An exception that leaves the block after a signal (native code's own error) is re-raised as
    Interrupted. Without a signal, the previous handlers are put back at the end (tests run
    commands in-process); after one, the watchdog stays armed until the process is gone. Outside
    the main thread (where Python cannot set handlers) the block runs as it is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    first = _received
    first.clear()

    def handler(signum: int, frame: Any) -> None:
        if not first:  # a second Ctrl-C must not interrupt the clean-up of the first
            first.append(signum)
            raise Interrupted(signum)

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def watchdog() -> None:
        signum = 0
        while signum not in SIGNALS:  # any other handled signal also writes its number
            signum = os.read(read_end, 1)[0]
            if signum == 0:  # the block ended without a signal
                os.close(read_end)
                return
        threading.Event().wait(GRACE_SECONDS)
        on_stuck(signum)

    threading.Thread(target=watchdog, name="interrupt-watchdog", daemon=True).start()
    old_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    old = {signum: signal.signal(signum, handler) for signum in SIGNALS}
    try:
        yield
        # The handler's exception may have been dropped where it was raised (see stop_if_signalled): the block ran
        # to its end, and still must not end as if no signal came.
        stop_if_signalled()
    except BaseException as exc:
        if first and not isinstance(exc, Interrupted):
            raise Interrupted(first[0]) from exc
        raise
    finally:
        if not first:
            _received.clear()
            for signum, previous in old.items():
                signal.signal(signum, previous)
            signal.set_wakeup_fd(old_fd)
            os.write(write_end, b"\0")
            os.close(write_end)
