"""Two ways to run one pass's collective round over every rank's real policy core.

In SGLang each rank's scheduler reaches its delayer call and blocks in the
all-gather until every rank has arrived. Both drivers below run exactly that:
each rank's call is its scheduler's part of the pass (on either backend, the
admission, whose call site negotiates through the rank's executor, and its
finalize), and each rank's own ``PolicyCore.negotiate`` runs with its own row
over a ``gather`` that hands every rank the rows of the pass.

* ``LockstepGather`` (default): one thread. A rank's gather stores its row and
  starts the next rank's call, whose gather does the same; the last rank's
  gather has every row, and each gather returns them as the calls unwind, each
  rank's call then finishing its part. Each ``negotiate`` runs once, in rank
  order, without a thread switch; the ranks are nested ``depth`` deep on the
  stack (a few frames each). For a policy that all-reduces, each end also
  offers ``all_reduce``: the round's rows reduced once, by the runtime's own
  ``reduce_rows``. And each end offers ``shared_step``: the ranks' cores of one
  configuration run one compiled step (``RoundStep``), compiled once, whose
  ``negotiate`` (a pure function of its arguments) is computed once for the
  ranks of a round that pass it equal arguments, as the ranks of a round do.
* ``ThreadedGather``: one thread per rank, over ``runtime.InProcessGroup`` (the
  barrier-based in-process gather of the runtime), driven pass by pass.

``benchmarks.sim`` times both; they make identical decisions (tested).
"""

from __future__ import annotations

import functools
import sys
import threading
from itertools import chain
from typing import Any, Callable, Hashable, Optional, Sequence

from ..runtime.gather import GatherFn
from ..runtime.inprocess import InProcessGroup
from ..runtime.reduce import reduce_rows
from ..spec.policy import ALL_GATHER

Call = Callable[[], None]
_chain = chain.from_iterable
# Stack frames one rank adds while it waits inside its gather (its pass, the admission, the call site, negotiate,
# the gather; or its pass, finalize, negotiate, the gather), with room to spare.
_FRAMES_PER_RANK = 9


class LockstepGather:
    """A single-threaded all-gather for ``world_size`` ranks whose calls are run as one round."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self._rows: list[Optional[Sequence[int]]] = [None] * world_size
        self._calls: Sequence[Call] = ()
        self._flat: list[int] = []
        self._reduced: list[int] = []
        self._reduced_of: Optional[list[int]] = None  # the round's gathered rows the reduction above is of
        self._steps: dict[Hashable, RoundStep] = {}  # shared_step's, by key
        self._needed_depth = sys.getrecursionlimit()
        need = _FRAMES_PER_RANK * world_size + 200
        if need > sys.getrecursionlimit():
            self._needed_depth = need

    def gather_for(self, rank: int, collective: str = ALL_GATHER) -> "_LockstepEnd":
        """Rank ``rank``'s end; for a policy that all-reduces (``collective``, its ``Policy.collective``), one whose
        ``all_reduce`` the runtime's ``ReduceCore`` calls: the round's rows reduced once for every rank."""
        return _LockstepEnd(self, rank) if collective == ALL_GATHER else _LockstepReduceEnd(self, rank, collective)

    def shared_step(self, key: Hashable, make: Callable[[], Any]) -> "RoundStep":
        """The step of every core of this group whose ``key`` (configuration, row tail, row length) is ``key``."""
        step = self._steps.get(key)
        if step is None:
            step = self._steps[key] = RoundStep(make())
        return step

    def run_round(self, calls: Sequence[Call]) -> None:
        """Run every rank's call (each takes part in the gather exactly once)."""
        self._calls = calls
        limit = sys.getrecursionlimit()
        if self._needed_depth > limit:
            sys.setrecursionlimit(self._needed_depth)
        try:
            calls[0]()
        finally:
            if self._needed_depth > limit:
                sys.setrecursionlimit(limit)
            self._calls = ()

    def close(self) -> None:
        """Nothing to release (the threaded driver's counterpart stops its threads)."""


class _LockstepEnd:
    """Rank ``rank``'s gather: ``gather_flat`` is what ``PrefillDelayer`` calls when present."""

    __slots__ = ("_group", "rank", "world_size", "description")

    def __init__(self, group: LockstepGather, rank: int) -> None:
        self._group = group
        self.rank = rank
        self.world_size = group.world_size
        self.description = f"lock-step in-process gather ({group.world_size} ranks, this rank {rank})"

    def gather_flat(self, row: Sequence[int]) -> list[int]:
        """Store this rank's row and start the next rank's call; the last rank's gather has every row, and each
        gather returns them as the calls unwind."""
        group = self._group
        rank = self.rank
        group._rows[rank] = row
        if rank + 1 < group.world_size:
            group._calls[rank + 1]()  # the next rank's pass, up to and through its own gather
        else:
            group._flat = list(_chain(group._rows))  # type: ignore[arg-type]
        return group._flat

    def shared_step(self, key: Hashable, make: Callable[[], Any]) -> "RoundStep":
        """The core's compiled step, shared with the group's other cores of the same ``key``."""
        return self._group.shared_step(key, make)

    def __call__(self, row: Sequence[int]) -> list[list[int]]:
        flat = self.gather_flat(row)
        n = len(row)
        return [flat[i : i + n] for i in range(0, len(flat), n)]


class _LockstepReduceEnd(_LockstepEnd):
    """An end that all-reduces: each rank's gather of the round's rows, reduced by the runtime's ``reduce_rows``
    (what ``ReduceCore`` does over any gather) once a round instead of once a rank; each rank gets its own copy,
    as from ``TorchAllReduce``."""

    __slots__ = ("op",)

    def __init__(self, group: LockstepGather, rank: int, op: str) -> None:
        super().__init__(group, rank)
        self.op = op

    def all_reduce(self, row: Sequence[int]) -> list[int]:
        group = self._group
        flat = self.gather_flat(row)
        if group._reduced_of is not flat:  # the first rank back from this round's gather reduces it
            group._reduced = reduce_rows(group._rows, self.op, len(row))  # type: ignore[arg-type]
            group._reduced_of = flat
        return list(group._reduced)


class RoundStep:
    """A compiled step (``fsm.compiled.CompiledStep``) shared by the cores of one lock-step group.

    ``row`` and ``finalize`` are the step's own. ``negotiate`` is the step's, a
    pure function of its arguments (state, clock, local inputs, gathered rows),
    answered once for arguments equal to the last call's: in a round every rank
    has the same state, clock and rows (the same gathered list), so the first
    rank computes the decision and the others get it (an immutable tuple) for a
    comparison of their arguments (the local inputs may differ between ranks:
    two sets are kept). Anything else is the step's.
    """

    def __init__(self, step: Any) -> None:
        self._compiled = step
        self.row, self.finalize = step.row, step.finalize
        self.negotiate = _negotiate_once(step.negotiate)

    def __getattr__(self, name: str) -> Any:  # table, finalizing, config, source: the compiled step's
        return getattr(self._compiled, name)


def _negotiate_once(negotiate: Callable[..., Any]) -> Callable[..., Any]:
    """``negotiate``, remembering its last two distinct arguments and results: a round's ranks pass one set of
    arguments, or two (a rank that asked at a call site, and one that negotiated its binding's idle inputs, whose
    local inputs may be left at their defaults). A call that raises (bad rows) keeps nothing."""
    args_1: Optional[tuple] = None
    args_2: Optional[tuple] = None
    decision_1: Any = None
    decision_2: Any = None

    def negotiate_once(*args: Any) -> Any:
        nonlocal args_1, args_2, decision_1, decision_2
        if args == args_1:
            return decision_1
        if args == args_2:
            return decision_2
        decision = negotiate(*args)
        args_2, decision_2 = args_1, decision_1
        args_1, decision_1 = args, decision
        return decision

    return negotiate_once


# CPython 3.11+ keeps frames on a data stack of 16 KiB chunks, and frees a chunk when its first frame returns. A
# lock-step round nests every rank's calls (tens of frames a rank): at some depths a function called many times a
# round starts a chunk, and each call maps and unmaps one (measured: the same run up to 37% slower, by the depth it
# started at). ``with_stack_room`` runs the loop in a frame with that much unused room: CPython gives such a frame a
# chunk twice its size, and every frame nested under it fits in the rest.
_SLOTS_PER_RANK = 1024  # 8 KiB of frames a rank, several times what a round nests


@functools.lru_cache(maxsize=None)
def _roomy(slots: int) -> Callable[[Callable[[], Any]], Any]:
    names = ", ".join(f"_{i}" for i in range(slots))
    namespace: dict[str, Any] = {}
    # The locals are never assigned (the branch never runs): they only size the frame.
    exec(compile(f"def roomy(fn):\n    if fn is None:\n        {names} = ()\n    return fn()\n",
                 "<prefill_delayer.sim.gather roomy frame>", "exec"), namespace)
    roomy: Callable[[Callable[[], Any]], Any] = namespace["roomy"]
    return roomy


def with_stack_room(world_size: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` with room on CPython's frame stack for the lock-step rounds of ``world_size`` ranks nested in it."""
    slots = 8192
    while slots < _SLOTS_PER_RANK * world_size:
        slots *= 2
    return _roomy(slots)(fn)


class ThreadedGather:
    """One thread per rank over ``InProcessGroup``; ``run_round`` runs each rank's call in its thread."""

    def __init__(self, world_size: int, timeout_s: float = 60.0) -> None:
        self.world_size = world_size
        self._group = InProcessGroup(world_size, timeout_s)
        self._start = threading.Barrier(world_size + 1)
        self._done = threading.Barrier(world_size + 1)
        self._calls: Sequence[Call] = ()
        self._errors: list[BaseException] = []
        self._stop = False
        self._threads = [threading.Thread(target=self._worker, args=(r,), name=f"sim-rank-{r}", daemon=True) for r in range(world_size)]
        for t in self._threads:
            t.start()

    def gather_for(self, rank: int, collective: str = ALL_GATHER) -> GatherFn:
        """Rank ``rank``'s gather; a policy that all-reduces (``collective``) reduces the rows itself, each rank."""
        return self._group.gather_for(rank)

    def run_round(self, calls: Sequence[Call]) -> None:
        self._calls = calls
        self._start.wait()
        self._done.wait()
        if self._errors:
            error = self._errors[0]
            self.close()
            raise error

    def close(self) -> None:
        if self._stop:
            return
        self._stop = True
        try:
            self._start.wait(timeout=5.0)
        except threading.BrokenBarrierError:
            pass
        for t in self._threads:
            t.join(timeout=5.0)

    def _worker(self, rank: int) -> None:
        while True:
            self._start.wait()
            if self._stop:
                return
            try:
                self._calls[rank]()
            except BaseException as err:  # noqa: BLE001 - re-raised by run_round in the main thread
                self._errors.append(err)
                self._group.abort()
            self._done.wait()


def make_gather(kind: str, world_size: int) -> "LockstepGather | ThreadedGather":
    return LockstepGather(world_size) if kind == "lockstep" else ThreadedGather(world_size)
