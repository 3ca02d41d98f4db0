"""Worker processes of every subcommand that spreads its work (``prove``, ``check-log``, ``simulate --suite``):
started, interrupted and ended the same way.

A base layer: it imports nothing of the package. What every pool gets, and why:

* Ctrl-C is the parent's alone. The workers start with SIGINT blocked (so not even one arriving while
  they start reaches them) and then ignore it; the parent's ``KeyboardInterrupt`` ends them
  (``ended``). Without it every worker prints its own traceback over the parent's one line.
* A fork where it is safe: a process that runs no other thread forks its workers, which then start in
  milliseconds with everything the parent imported and built. Forking a process with other threads
  can copy a lock another thread holds, so there a fork server (which imports ``preload`` once)
  forks them instead, and spawn where there is no fork server. Tasks and results are pickled either
  way, so the start method changes no result.
* No worker outlives the command: ``ended`` closes and joins the pool when the work is done, and
  terminates and joins it on any exception, ``KeyboardInterrupt`` included.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from typing import Any, Callable, Iterator, Optional, Sequence


def cores() -> int:
    """The cores this process may run on."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def _init(then: Optional[Callable[[], None]]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if then is not None:
        then()


def start_pool(jobs: int, *, preload: Sequence[str] = (), initializer: Optional[Callable[[], None]] = None,
               maxtasksperchild: Optional[int] = None) -> Any:
    """``jobs`` worker processes that leave Ctrl-C to the parent; ``initializer`` runs in each after that, and
    ``preload`` names the modules a fork server imports once (when one is used)."""
    methods = multiprocessing.get_all_start_methods()
    ctx: Any
    if "fork" in methods and threading.active_count() == 1:
        ctx = multiprocessing.get_context("fork")
    elif "forkserver" in methods:
        ctx = multiprocessing.get_context("forkserver")
        if preload:
            ctx.set_forkserver_preload(list(preload))
    else:
        ctx = multiprocessing.get_context("spawn")
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return ctx.Pool(jobs, initializer=_init, initargs=(initializer,), maxtasksperchild=maxtasksperchild)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextlib.contextmanager
def ended(pool: Any) -> Iterator[Any]:
    """The pool, closed and joined once the block is done; terminated and joined if it raises."""
    try:
        yield pool
    except BaseException:
        pool.terminate()
        pool.join()
        raise
    pool.close()
    pool.join()


__all__ = ["cores", "ended", "start_pool"]
