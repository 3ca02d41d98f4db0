"""An in-process multi-rank all-gather (threads), for tests, simulations and trace replay.

Same contract as the torch gather — ``gather(row) -> rows`` in rank order — but
the ranks are threads of one process, so a replay or a simulation needs no
process group. A ``threading.Barrier`` with a timeout stands in for the
collective: a rank that never arrives makes the others raise, never hang.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional, Sequence, TypeVar

from .gather import GatherFn

T = TypeVar("T")


class InProcessGroup:
    """``world_size`` ranks (threads) exchanging one row each per pass.

    Rows are double-buffered by pass parity, so one barrier per pass suffices:
    a rank can only write pass k+2's slot after every rank has reached pass
    k+1's barrier, i.e. after every rank has read pass k.
    """

    def __init__(self, world_size: int, timeout_s: float = 10.0) -> None:
        if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
            raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
        # A bound the barrier can wait (``threading.TIMEOUT_MAX``): inf was taken, then overflowed in the first gather.
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s <= threading.TIMEOUT_MAX:
            raise ValueError(f"timeout_s must be a number of seconds in (0, {threading.TIMEOUT_MAX:g}], got {timeout_s!r}")
        self.world_size = world_size
        self.timeout_s = float(timeout_s)
        self._barrier = threading.Barrier(world_size, timeout=self.timeout_s)
        self._slots: list[list[Optional[list[int]]]] = [[None] * world_size, [None] * world_size]

    def gather_for(self, rank: int) -> GatherFn:
        """The ``gather`` callable of ``rank`` (0-based, global rank order)."""
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.world_size:
            raise ValueError(f"rank must be an int in [0, {self.world_size}), got {rank!r}")
        return _RankGather(self, rank)

    def abort(self) -> None:
        """Break the barrier: every rank waiting in (or later entering) a gather raises at once."""
        self._barrier.abort()

    def _exchange(self, rank: int, parity: int, row: Sequence[int]) -> list[list[int]]:
        slots = self._slots[parity]
        slots[rank] = list(row)
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise TimeoutError(
                f"in-process gather: rank {rank} gave up waiting for its peers "
                f"(a peer failed, or none arrived within {self.timeout_s:g} s)"
            ) from None
        return [list(r) for r in slots]  # type: ignore[arg-type]


class _RankGather:
    """One rank's end of an ``InProcessGroup``; counts its own passes for the parity."""

    def __init__(self, group: InProcessGroup, rank: int) -> None:
        self._group = group
        self.rank = rank
        self.world_size = group.world_size
        self._passes = 0
        self.description = f"in-process group ({group.world_size} ranks, this rank {rank})"

    def __call__(self, row: Sequence[int]) -> list[list[int]]:
        parity = self._passes & 1
        rows = self._group._exchange(self.rank, parity, row)
        self._passes += 1
        return rows

    def __repr__(self) -> str:
        return f"<gather of {self.description}>"


def run_ranks(world_size: int, fn: Callable[[int, GatherFn], T], timeout_s: float = 10.0) -> list[T]:
    """Run ``fn(rank, gather)`` for every rank in its own thread; return the results in rank order.

    The first error raised by any rank is re-raised here; the group is aborted
    at that moment, so the other ranks leave their gathers at once instead of
    waiting. ``timeout_s`` bounds each gather; after a failure, a rank still
    running ``timeout_s`` later (stuck outside any gather) is a ``TimeoutError``.
    """
    group = InProcessGroup(world_size, timeout_s)
    results: list[Any] = [None] * world_size
    errors: list[tuple[int, BaseException]] = []
    lock = threading.Lock()

    def body(rank: int) -> None:
        try:
            results[rank] = fn(rank, group.gather_for(rank))
        except BaseException as err:  # noqa: BLE001 - reported to the caller below
            with lock:
                errors.append((rank, err))
            group.abort()

    threads = [threading.Thread(target=body, args=(r,), name=f"rank-{r}", daemon=True) for r in range(world_size)]
    for t in threads:
        t.start()
    # Every gather is bounded by timeout_s, so as long as no rank has failed the
    # run makes progress; once one has, the rest get timeout_s to unwind.
    failed_at: Optional[float] = None
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(0.05)
        if errors and failed_at is None:
            failed_at = time.monotonic()
        if failed_at is not None and time.monotonic() - failed_at > timeout_s + 1.0:
            alive = ", ".join(t.name for t in threads if t.is_alive())
            raise TimeoutError(f"run_ranks: {alive} still running {timeout_s + 1.0:g} s after a peer failed") from errors[0][1]
    if errors:
        raise errors[0][1]
    return results
