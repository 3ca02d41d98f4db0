"""A pure step function over the spec's table: for tests, simulation and the proofs' replay."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from ..spec.ops import PY
from ..spec.table import DELAYING, IDLE, RELEASED, Effect, Table, Transition, holds
from ..spec.view import Local, View, status_name


class State(NamedTuple):
    """Control state and extended variables of one rank's delayer."""

    control: str = IDLE
    delayed_count: int = 0
    wait_start: Optional[float] = None
    skip_first_armed: bool = True


INITIAL_STATE = State()


class Decision(NamedTuple):
    """The seed's ``_NegotiateOutput`` fields, in its order (``next_state`` is ours)."""

    next_state: State
    input_estimation: str
    output_allow: bool
    output_reason: str
    num_prefillable: int
    num_token_watermark_force_allow: int
    wait_forward_passes: int = 0
    wait_seconds: float = 0.0


def local_for(state: State, now: float, mrr: int) -> Local:
    """The guards' view of ``state`` at clock reading ``now`` (needs a finalized state)."""
    if state.control == RELEASED:
        raise ValueError("negotiate from 'released': finalize the previous pass first")
    waiting = state.control == DELAYING
    return Local(waiting, state.delayed_count, state.wait_start if waiting else now, state.skip_first_armed, now, mrr)


def select(c: Any, table: Table, state: State, view: View, local: Local) -> Transition:
    """The one ``negotiate`` row whose guards hold (the table is proved to partition)."""
    memo: dict = {}
    for t in table.by_source[state.control]:
        if holds(t, PY, c, view, local, memo):
            return t
    raise AssertionError(f"no negotiate transition from {state.control!r} holds for {view}, {local}")


def decide(c: Any, t: Transition, view: View, local: Local, o: Any = PY) -> Decision:
    """Apply the fired transition ``t``: the pass's decision and the rank's next state.

    ``o`` is the operator layer: ``PyOps`` for values; ``fsm.compiled`` passes its
    source-emitting layer to derive the compiled step's return expression from here.
    """
    e = Effect(t, o, c, view, local)
    return Decision(
        next_state=State(t.dest, e.delayed_count, e.wait_start, e.skip_first_armed),
        input_estimation=status_name(o, c, view),
        output_allow=e.allow,
        output_reason=e.reason,
        num_prefillable=view.num_prefillable,
        num_token_watermark_force_allow=view.num_force,
        wait_forward_passes=e.wait_forward_passes,
        wait_seconds=e.wait_seconds,
    )


def step(c: Any, table: Table, state: State, view: View, local: Local) -> Decision:
    """One ``negotiate``: pure, no machine involved."""
    return decide(c, select(c, table, state, view, local), view, local)


def finalize(state: State) -> State:
    """The ``finalize`` event: released -> idle; delaying stays."""
    return state._replace(control=IDLE) if state.control == RELEASED else state
