"""The delayer's variables, their initial values and TypeOK; its per-pass inputs; what the guards see.

VARIABLES control, delayed_count, wait_start, skip_first_armed (the seed's
``_state`` and ``skip_first_delayer``). ``wait_start`` is read on each rank's own
clock, so ranks in step share every variable but it (``SHARED``).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from ...fields import BOOL, COUNT, MAX_COUNT, OPT_SECONDS, USAGE, Field

IDLE, DELAYING, RELEASED = "idle", "delaying", "released"
STATES = (IDLE, DELAYING, RELEASED)
STATE_DOC = {
    IDLE: "no wait in progress (delayed_count = 0)",
    DELAYING: "a prefill is being held back (delayed_count >= 1, wait_start set)",
    RELEASED: "this pass allowed prefill; finalize returns to idle",
}


class State(NamedTuple):
    """Control state and extended variables of one rank's delayer."""

    control: str = IDLE
    delayed_count: int = 0
    wait_start: Optional[float] = None
    skip_first_armed: bool = True


INIT = State()  # Init: idle, no delays, no wait, the one-shot skip armed
STATE_FIELDS = (
    Field("delayed_count", COUNT, "consecutive delays so far in the current wait", sym="count"),
    Field("wait_start", OPT_SECONDS, "this rank's clock when the wait began", sym="start"),
    Field("skip_first_armed", BOOL, "the one-shot skip (the seed's skip_first_delayer)", sym="armed"),
)
SHARED = ("control", "delayed_count", "skip_first_armed")


def type_ok(o: Any, c: Any, st: Any) -> Any:
    """TypeOK, the part every pass keeps: idle with no delays, or delaying with at least one."""
    idle, delaying = st.control == IDLE, st.control == DELAYING
    return o.And(o.Or(idle, delaying), o.Or(o.Not(idle), st.delayed_count == 0), o.Or(o.Not(delaying), st.delayed_count >= 1))


# ----- inputs: the arguments of one negotiate call --------------------------------------


class PassInput(NamedTuple):
    """The arguments of one ``negotiate`` call on one rank."""

    local_prefillable: bool
    token_usage: float
    running_batch: int = 0
    max_prefill_bs: int = 0
    max_running_requests: int = 0
    waiting_queue_len: int = 0


INPUTS = (
    Field("local_prefillable", BOOL, "this rank has prefill work it could run now", trace="prefillable", sym="pre"),
    Field("token_usage", USAGE, "this rank's KV token usage, 0..1", sym="tu"),
    Field("running_batch", COUNT, "requests in this rank's running batch", default=0, sym="rb"),
    Field("max_prefill_bs", COUNT, "the scheduler's max_prefill_bs tracker", default=0, sym="pb"),
    Field("max_running_requests", COUNT, "this rank's max_running_requests", default=0, sym="mrr"),
    Field("waiting_queue_len", COUNT, "requests in this rank's waiting queue", default=0, sym="wq"),
)
INPUT_FIELDS = tuple(f.name for f in INPUTS)


class Local(NamedTuple):
    """This rank's extended state and local readings for one pass.

    ``wait_start`` equals ``now`` when no wait is in progress, so elapsed time is
    0 there rather than undefined.
    """

    waiting: Any
    delayed_count: Any
    wait_start: Any
    skip_first_armed: Any
    now: Any
    mrr: Any  # this rank's max_running_requests argument


LOCAL_INPUTS = ("max_running_requests",)


def local_for(o: Any, st: Any, now: Any, inp: Any) -> Local:
    """The guards' view of state ``st`` at clock reading ``now`` with this rank's inputs."""
    waiting = st.control == DELAYING
    return Local(waiting, st.delayed_count, o.If(waiting, st.wait_start, now), st.skip_first_armed, now, inp.max_running_requests)


def local_domain(o: Any, c: Any, st: Any, now: Any, inp: Any) -> list:
    """What a rank satisfies before any pass besides TypeOK: counts in range, a wait begun no later than now."""
    return [
        st.delayed_count >= 0, st.delayed_count <= MAX_COUNT,
        inp.max_running_requests >= 0, inp.max_running_requests <= MAX_COUNT,
        o.Or(o.Not(st.control == DELAYING), st.wait_start <= now),
    ]
