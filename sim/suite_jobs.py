"""``simulate --suite NAME --jobs N``: a suite's runs on N processes at once.

A suite is hundreds of independent runs (every workload x every policy, at each load and seed of a
sweep), each single-threaded and seeded, so they spread over cores with no change to any figure:
a run's result depends on its case and its policy alone. The parent plans every run first (every
workload checked before any run), then forks the workers, which read the plan they inherit and
return each run's row by its index; the rows come back in the plan's order, as a serial run gives
them. Forking, not spawning: nothing but an index and a row crosses between processes, and a worker
starts in milliseconds. The pool is closed on every way out (an error in a run, Ctrl-C), so no
worker outlives the command.
"""

from __future__ import annotations

import multiprocessing
from typing import Any, Callable, Generic, Optional, Sequence, TypeVar

from .config import Variant
from .errors import SimInputError

C = TypeVar("C")
R = TypeVar("R")


class Task(Generic[C]):
    """A run of the plan: its label on progress lines (a sweep's cell), its case and its policy."""

    __slots__ = ("label", "case", "variant")

    def __init__(self, label: str, case: C, variant: Variant) -> None:
        self.label, self.case, self.variant = label, case, variant


_PLAN: Sequence[Task[Any]] = ()  # the parent's plan, inherited by the forked workers
_MEASURE: Optional[Callable[[Any, Variant], Any]] = None


def check_jobs(jobs: object) -> int:
    """``--jobs``: a whole number of processes, at least 1."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SimInputError(f"--jobs must be a whole number of processes >= 1, got {jobs!r}")
    return jobs


def _run(k: int) -> tuple[int, Any]:
    assert _MEASURE is not None
    task = _PLAN[k]
    return k, _MEASURE(task.case, task.variant)


def run_all(plan: Sequence[Task[C]], measure: Callable[[C, Variant], R], jobs: int,
            said: Optional[Callable[[int, int, Task[C], R], None]] = None) -> list[R]:
    """Every run of ``plan`` through ``measure``, on ``jobs`` processes (1: in this one), in the plan's order;
    ``said(done, total, task, row)`` as each run ends (in the order they end)."""
    global _PLAN, _MEASURE
    total = len(plan)
    if min(jobs, total) <= 1:
        rows = []
        for k, task in enumerate(plan):
            rows.append(measure(task.case, task.variant))
            if said is not None:
                said(k + 1, total, task, rows[k])
        return rows
    found: dict[int, R] = {}
    _PLAN, _MEASURE = plan, measure
    try:
        with multiprocessing.get_context("fork").Pool(min(jobs, total)) as pool:  # __exit__ terminates the workers
            for done, (k, row) in enumerate(pool.imap_unordered(_run, range(total)), start=1):
                found[k] = row
                if said is not None:
                    said(done, total, plan[k], row)
    finally:
        _PLAN, _MEASURE = (), None
    return [found[k] for k in range(total)]


__all__ = ["Task", "check_jobs", "run_all"]
