"""Process pools whose workers never outlive the run that started them.

A worker of a plain ``ProcessPoolExecutor`` waits on its task queue forever once its parent is
gone (``kill -9``, an out-of-memory kill): it holds both ends of the queue's pipe, so it never
sees end-of-file, and it can hold hundreds of megabytes. Workers started here

* die with the run: Linux's ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` for a worker whose parent is
  the run, plus a thread polling the process that made the pool (a zombie counts as dead) on
  every system. Under a fork server the death signal cannot help: the worker's parent is the
  server, which lives as long as any worker holds its "alive" pipe, so the poll is what ends them;
* ignore SIGINT: Ctrl-C reaches the whole process group, and the run, not each worker, decides
  how to stop (a worker would otherwise print its own traceback);
* are killed, not waited for, when the run unwinds from an error or a signal
  (:func:`pool_running`), so SIGTERM stops a run within seconds even mid-task.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from multiprocessing.context import BaseContext
from typing import Any

#: prctl(2) option: the signal this process gets when its parent dies.
_PR_SET_PDEATHSIG = 1
#: How often the fallback thread checks the parent (seconds).
POLL_SECONDS = 0.5


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie, dead but not yet reaped by its parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the pid now belongs to another user's process: ours is gone
        return False
    try:
        # A killed run stays a zombie until whoever started it waits for it, which may be never.
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):  # no /proc (not Linux): os.kill's answer stands
        return True
    return state not in (b"Z", b"X")


def _death_signal() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def watch_parent(owner: int | None = None) -> None:
    """Make this process exit as soon as its parent, or the process ``owner``, is gone."""
    parent = os.getppid()
    _death_signal()
    # The parent may have died before the death signal was armed: then nobody will send it.
    if owner is not None and not _alive(owner):
        os._exit(1)

    def poll() -> None:
        stop = threading.Event()
        while not stop.wait(POLL_SECONDS):
            if os.getppid() != parent or (owner is not None and not _alive(owner)):
                os._exit(1)  # nothing to clean up: the parent discards whatever this worker held

    threading.Thread(target=poll, name="watch-parent", daemon=True).start()


def init_worker(owner: int, initializer: Callable[..., Any] | None, initargs: tuple[Any, ...]) -> None:
    """Pool initializer: watch the parent, leave SIGINT to it, then run the pool's own initializer."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    watch_parent(owner)
    if initializer is not None:
        initializer(*initargs)


def process_pool(n: int, context: BaseContext, initializer: Callable[..., Any] | None = None,
                 initargs: tuple[Any, ...] = ()) -> concurrent.futures.ProcessPoolExecutor:
    """A ProcessPoolExecutor of ``n`` workers that die with this process (see the module doc)."""
    return concurrent.futures.ProcessPoolExecutor(
        n, mp_context=context, initializer=init_worker, initargs=(os.getpid(), initializer, initargs)
    )


def terminate(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Kill the pool's workers now (running tasks included) and drop the pool."""
    # ProcessPoolExecutor has no public way to stop running tasks before Python 3.14.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for proc in processes:
        with contextlib.suppress(Exception):
            proc.kill()
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        with contextlib.suppress(Exception):
            proc.join(5)


@contextlib.contextmanager
def pool_running(n: int, context: BaseContext, initializer: Callable[..., Any] | None = None,
                 initargs: tuple[Any, ...] = ()) -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """:func:`process_pool` for a block: waited for on success, killed on any error or signal."""
    pool = process_pool(n, context, initializer, initargs)
    try:
        yield pool
    except BaseException:
        terminate(pool)
        raise
    pool.shutdown(wait=True)
