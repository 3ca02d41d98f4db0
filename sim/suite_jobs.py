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

from ..workers import ended, jobs_problem, start_pool
from .config import Variant
from .errors import SimInputError

C = TypeVar("C")
R = TypeVar("R")


class Task(Generic[C]):
    """A run of the plan: its label on progress lines (a sweep's cell), its case and its policy."""

    __slots__ = ("label", "case", "variant")

    def __init__(self, label: str, case: C, variant: Variant) -> None:
        self.label, self.case, self.variant = label, case, variant


def check_jobs(jobs: object) -> int:
    """``--jobs``: a whole number of processes, from 1 to the cores (``workers.jobs_problem``, as every subcommand's)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int):
        raise SimInputError(f"--jobs must be an integer >= 1, got {jobs!r}")
    problem = jobs_problem("--jobs", jobs)
    if problem is not None:
        raise SimInputError(problem)
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
    with ended(start_pool(min(jobs, total))) as pool:  # --jobs is the most at once: a worker a run at the most

        def start_next() -> None:
            """The plan's next run, handed to the workers (none once the plan is done)."""
            task = next(tasks, None)
            if task is not None:
                k = len(found) + len(running)
                running[k] = task
                pool.apply_async(_run, ((k, measure, task.case, task.variant),), callback=ended_runs.put,
                                 error_callback=ended_runs.put)

        for _ in range(2 * min(jobs, total)):  # a run queued behind each busy worker: none waits on this process's planning
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
