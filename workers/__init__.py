"""Worker processes of every subcommand that spreads its work (``prove``, ``check-log``, ``simulate --suite``):
started, interrupted and ended the same way; the runtime benchmark's gloo ranks start and leave Ctrl-C alike
(``ctrl_c_held``, ``run_leaving_ctrl_c``).

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


def jobs_problem(option: str, jobs: int) -> Optional[str]:
    """Why ``option`` (each subcommand's ``--jobs``) cannot start ``jobs`` workers here, or ``None``: at least one, and
    at most the cores this process may run on. Every worker is one single-threaded process (a profile's Z3, a chunk of
    logs, a simulated run), so one past the cores only shares them, holding work of its own in memory: ``simulate
    --suite --jobs 1000000`` forked a process per run, 330 on two cores. Fewer workers start where there is less work
    than ``jobs`` (N is the most at once)."""
    if jobs < 1:
        return f"{option} must be an integer >= 1, got {jobs}"
    have = cores()
    if jobs > have:
        return (f"{option} {jobs:,}: at most {have} here: this process may run on {have} core{'' if have == 1 else 's'}, "
                "and each worker is one single-threaded process, so a process more would only share them, holding "
                "work of its own in memory")
    return None


@contextlib.contextmanager
def ctrl_c_held() -> Iterator[None]:
    """SIGINT blocked in this thread for the block: a process started in it is born with SIGINT blocked (the mask
    survives fork and exec), so that not even a Ctrl-C arriving while it starts reaches it; one that arrives meanwhile
    is this process's once the block ends."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _leave_ctrl_c_to_parent() -> None:
    """In a worker started under ``ctrl_c_held``, first: SIGINT ignored from now on, then unblocked (one that arrived
    while it started is dropped)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def run_leaving_ctrl_c(target: Callable[..., None], *args: Any) -> None:
    """A ``multiprocessing.Process`` target (start it under ``ctrl_c_held``): ``target(*args)`` in a process that
    leaves Ctrl-C to its parent, for processes that are not a pool's (``start_pool``)."""
    _leave_ctrl_c_to_parent()
    target(*args)


def _init(then: Optional[Callable[[], None]]) -> None:
    _leave_ctrl_c_to_parent()
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
    with ctrl_c_held():
        return ctx.Pool(jobs, initializer=_init, initargs=(initializer,), maxtasksperchild=maxtasksperchild)


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


__all__ = ["cores", "ctrl_c_held", "ended", "run_leaving_ctrl_c", "start_pool"]
