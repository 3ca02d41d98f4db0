"""``simulate --suite NAME --jobs N``: a suite's runs on N processes at once.

A suite is hundreds of independent runs (every workload x every policy, at each load and seed of a
sweep), each single-threaded and seeded, so they spread over cores with no change to any figure: a
run's result depends on its case and its policy alone. The parent plans every run first (every
workload checked before any run); the workers (``workers.start_pool``: Ctrl-C the parent's alone,
none outliving the command) take one run at a time and return its row, and the rows come back in the
plan's order, as a serial run gives them.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Optional, Sequence, TypeVar

from ..workers import ended, start_pool
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
    """``--jobs``: a whole number of processes, at least 1."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SimInputError(f"--jobs must be a whole number of processes >= 1, got {jobs!r}")
    return jobs


def _run(job: tuple[int, Callable[[Any, Variant], Any], Any, Variant]) -> tuple[int, Any]:
    k, measure, case, variant = job
    return k, measure(case, variant)


def run_all(plan: Sequence[Task[C]], measure: Callable[[C, Variant], R], jobs: int,
            said: Optional[Callable[[int, int, Task[C], R], None]] = None) -> list[R]:
    """Every run of ``plan`` through ``measure`` (a module-level function: workers get it by name), on ``jobs``
    processes (1: in this one), in the plan's order; ``said(done, total, task, row)`` as each run ends (in the order
    they end)."""
    total = len(plan)
    if min(jobs, total) <= 1:
        rows = []
        for k, task in enumerate(plan):
            rows.append(measure(task.case, task.variant))
            if said is not None:
                said(k + 1, total, task, rows[k])
        return rows
    found: dict[int, R] = {}
    with ended(start_pool(min(jobs, total))) as pool:
        jobs_in = ((k, measure, t.case, t.variant) for k, t in enumerate(plan))
        for done, (k, row) in enumerate(pool.imap_unordered(_run, jobs_in), start=1):
            found[k] = row
            if said is not None:
                said(done, total, plan[k], row)
    return [found[k] for k in range(total)]


__all__ = ["Task", "check_jobs", "run_all"]
