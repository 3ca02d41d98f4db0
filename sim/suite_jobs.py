"""``simulate --suite NAME --jobs N``: a suite's runs on N processes at once.

A suite is hundreds of independent runs (every workload x every policy, at each load and seed of a
sweep), each single-threaded and seeded, so they spread over cores with no change to any figure: a
run's result depends on its case and its policy alone. The parent hands out the runs of a plan it
builds as it goes (a sweep plans a cell when its runs are about to start), a few more than the workers
at a time; the workers (``workers.start_pool``: Ctrl-C the parent's alone, none outliving the command)
take one run at a time and return its row, and the rows come back in the plan's order, as a serial run
gives them.
"""

from __future__ import annotations

import queue
from typing import Any, Callable, Generic, Iterable, Optional, TypeVar

from ..workers import cores, ended, start_pool
from .config import Variant
from .errors import SimInputError, counted

C = TypeVar("C")
R = TypeVar("R")


class Task(Generic[C]):
    """A run of the plan: its label on progress lines (a sweep's cell), its case and its policy."""

    __slots__ = ("label", "case", "variant")

    def __init__(self, label: str, case: C, variant: Variant) -> None:
        self.label, self.case, self.variant = label, case, variant


def check_jobs(jobs: object, runs: int, what: str) -> int:
    """``--jobs``: a whole number of processes, at least 1, and no more than the cores or the ``runs`` (``what`` makes
    them): each run is one single-threaded process, so a process past the cores only shares them while holding a run
    of its own in memory, and one past the runs has none to run (``--jobs 1000000`` started a process per run, 330 of
    them on two cores, where a sweep's thousands of runs would start thousands)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SimInputError(f"--jobs must be a whole number of processes >= 1, got {jobs!r}")
    have = cores()
    if jobs > min(have, runs):
        if runs < have:
            why = (f"there {'is' if runs == 1 else 'are'} {counted(runs, 'run')} ({what}), so a process more would have "
                   "none to run")
        else:
            why = (f"this process may run on {counted(have, 'core')}, and each run is one single-threaded process, so "
                   "a process more would only share them, holding a run of its own in memory")
        raise SimInputError(f"--jobs {jobs:,}: at most {min(have, runs)} here: {why}")
    return jobs


def _run(job: tuple[int, Callable[[Any, Variant], Any], Any, Variant]) -> tuple[int, Any]:
    k, measure, case, variant = job
    return k, measure(case, variant)


def run_all(plan: Iterable[Task[C]], total: int, measure: Callable[[C, Variant], R], jobs: int,
            said: Optional[Callable[[int, int, Task[C], R], None]] = None) -> list[R]:
    """Every run of ``plan`` (``total`` of them, taken from it only as they are about to start) through ``measure``
    (a module-level function: workers get it by name), on ``jobs`` processes (1: in this one), in the plan's order;
    ``said(done, total, task, row)`` as each run ends (in the order they end)."""
    tasks = iter(plan)
    if jobs <= 1 or total <= 1:
        rows = []
        for k, task in enumerate(tasks):
            rows.append(measure(task.case, task.variant))
            if said is not None:
                said(k + 1, total, task, rows[k])
        return rows
    found: dict[int, R] = {}
    running: dict[int, Task[C]] = {}
    ended_runs: queue.SimpleQueue = queue.SimpleQueue()  # (k, row) as each run ends, or what a worker raised
    with ended(start_pool(jobs)) as pool:

        def start_next() -> None:
            """The plan's next run, handed to the workers (none once the plan is done)."""
            task = next(tasks, None)
            if task is not None:
                k = len(found) + len(running)
                running[k] = task
                pool.apply_async(_run, ((k, measure, task.case, task.variant),), callback=ended_runs.put,
                                 error_callback=ended_runs.put)

        for _ in range(2 * jobs):  # a run queued behind each busy worker: none waits on this process's planning
            start_next()
        while running:
            got = ended_runs.get()
            if isinstance(got, BaseException):
                raise got
            k, row = got
            task = running.pop(k)
            found[k] = row
            start_next()
            if said is not None:
                said(len(found), total, task, row)
    return [found[k] for k in range(len(found))]


__all__ = ["Task", "check_jobs", "run_all"]
