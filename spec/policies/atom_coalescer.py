"""ATOM's prefill coalescer (ROCm/ATOM #1611), read from ``atom/model_engine/prefill_delayer.py``.

What was read: ROCm/ATOM at commit ffdf3bb5ddf8 (main, 2026-08-22): the coalescer as #1611
(4b2b574b) wrote it, with #1681's ``cpu_group=None`` path for dp_size 1; its caller
``Scheduler.schedule`` (``atom/model_engine/scheduler.py``); the defaults in
``atom/utils/envs.py`` before and after #1670 (b31cc354: target_fill 0.7 -> 0.9,
ttft_max_ticks 30 -> 200, partial_max_ticks 8 -> 100, stall_ticks 3 -> 10); and
the repository's own tests of it (``tests/test_prefill_delayer.py``), which
``tests/test_atom_policies.py`` restates as facts about these profiles.

Per scheduler tick every DP rank calls ``should_allow_prefill``: it builds 7
int64 slots, ``all_reduce(SUM)`` over the DP group, and decides FIRE/HOLD from
the sums alone, in this order: the first call fires (and skips the
collective); nothing prefillable anywhere fires (vacuous); the must-fire bounds
(no decode anywhere, KV at the high or below the low watermark, a request
queued past max_queue_ms, hold_ticks >= ttft_max_ticks, a partial chunk held
hold_ticks >= partial_max_ticks); the alignment gate (hold while some rank has
no prefill); the fill target (fire once ``G_pending / (n_prefillable *
max_num_batched_tokens) >= target_fill``); the stall give-up (fire after
stall_ticks ticks in which G_pending did not grow). Every variable is updated
from reduced values only, so ranks in step stay in step. A RuntimeError from
the all-reduce makes the rank that saw it admit prefill and reset its episode
(fail open). The verdict gates both phases of ``schedule()``: resuming partial
chunks and admitting new requests.

As a policy: the row is ATOM's 7 slots in ATOM's order, the collective an
all-reduce (SUM), the reasons SGLang's labels where they mean the same
(``""`` vacuous, ``token_watermark``, ``wait_timeout`` for the tick bound,
``no_wait``/``wait_success`` for the fill target reached without/after a hold,
``delay`` for a hold) and new ones where ATOM has its own (``no_decode``,
``kv_high``, ``queue_age``, ``partial_timeout``, ``stall``, ``first_call``,
``fail_open``). Inferred: the runtime runs the collective on the first pass too
(the decision does not read it), so a bad input on the first pass still fails
on every rank; ATOM's argument clamps (target_fill into (0, 1], ticks to >= 1)
are ``AtomCoalescerConfig.from_engine``'s, the configuration itself refuses
values outside those ranges. The fail-open is the profile feature's absence:
``atom-coalescer-hardened`` raises on the rank whose collective failed, as the
runtime does for every other policy.

What the simulator supplies (``SimBinding``, consulted before admission): per
rank and tick, ``prefillable`` (a fresh head that can allocate, or a resumable
partial chunk), ``pending_tokens`` (fresh waiting new-tokens plus the partials'
remaining tokens, capped at max_num_batched_tokens, which is the simulated
chunk budget), the decode requests in the running batch (partial chunks
excluded), KV usage, whether a partial chunk is in flight, the age of the
oldest waiting request; and the scheduler action: a hold skips resuming
partial chunks as well as new admissions (``gates_partial_chunk``).
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from ..config import Config, SymLayout, count_in, is_real, layout_params
from ..fields import BOOL, COUNT, MAX_COUNT, REASON, USAGE, Field
from ..glossary import ARG, CONFIG, LOCAL, VIEW, Symbol
from ..monitors import Agreement, GroupRunBound, PassRule, RunBound
from ..ops import AnyValue
from ..policy import (
    ALL_REDUCE_SUM, PROVED, REFUTED, Agg, Feature, Invariant, Param, Policy, Profile, ProofHooks, SimBinding,
    TraceSchema,
)
from ..schema import LogSchema
from ..table import FINALIZE, Table, Transition, negotiate_row, resolve
from .atom_common import SCALE, UPSTREAM_URL, LowWatermark, Scope, scaled_share, scope_of
from .dp_scope import dp_size_range

NAME = "atom-coalescer"
SOURCE_COMMIT = "ffdf3bb5ddf8a15a64d521a2eeb3bc7438f9ac21"
logger = logging.getLogger(__name__)

# ----- features and profiles -----------------------------------------------------------

FAIL_CLOSED = "fail-closed"
FEATURES = (
    Feature(
        FAIL_CLOSED,
        "a failed all-reduce",
        before="the rank whose all_reduce raised admits prefill this tick and resets its episode (fail open)",
        after="the pass raises CollectiveError on that rank with its state unchanged, as the runtime does for every "
        "policy: no rank decides on a collective its peers may have completed",
        why="peers that completed the reduce hold while it fires; its episode restarts while theirs goes on, so the "
        "ranks leave step and take turns holding",
        upstream=(1611,),
        since=None,
        shows_in=("collective_error",),
        invariant="agreement",
    ),
)
# ATOM's tuned default sets (atom/utils/envs.py): #1611 shipped the first, #1670 promoted the second.
DEFAULTS_1611 = (("target_fill", 0.7), ("ttft_max_ticks", 30), ("partial_max_ticks", 8), ("stall_ticks", 3))
DEFAULTS_1670 = (("target_fill", 0.9), ("ttft_max_ticks", 200), ("partial_max_ticks", 100), ("stall_ticks", 10))
PROFILES = (
    Profile("atom-coalescer", frozenset(), (), "ATOM main's prefill coalescer (#1611) with #1670's defaults: "
            "target_fill 0.9, ttft_max_ticks 200, partial_max_ticks 100, stall_ticks 10", DEFAULTS_1670),
    Profile("atom-coalescer-1611", frozenset(), (), "the same coalescer with #1611's defaults: target_fill 0.7, "
            "ttft_max_ticks 30, partial_max_ticks 8, stall_ticks 3", DEFAULTS_1611),
    Profile("atom-coalescer-hardened", frozenset({FAIL_CLOSED}), (), "the coalescer with #1670's defaults, a failed "
            "all-reduce raising instead of failing open", DEFAULTS_1670),
)
_PROFILE = {p.name: p for p in PROFILES}
_FEATURE_IDS = frozenset(f.id for f in FEATURES)


def has(c: Any, feature: str) -> bool:
    if feature not in _FEATURE_IDS:
        raise KeyError(f"unknown feature {feature!r}")
    return feature in c.features


# ----- configuration --------------------------------------------------------------------


def _fraction(v: Any) -> bool:
    return is_real(v) and math.isfinite(v) and 0.0 < v <= 1.0


def _share(v: Any) -> bool:
    return is_real(v) and math.isfinite(v) and v >= 0.0


_TICKS = count_in(1, MAX_COUNT)
PARAMETERS = (
    Param("max_num_batched_tokens", 16384, f"integer in [1, {MAX_COUNT}]", count_in(1, MAX_COUNT),
          server_arg="max_num_batched_tokens"),
    Param("target_fill", None, "None (the profile's default) or a number in (0, 1]", _fraction),
    Param("ttft_max_ticks", None, f"None (the profile's default) or an integer in [1, {MAX_COUNT}]", _TICKS),
    Param("partial_max_ticks", None, f"None (the profile's default) or an integer in [1, {MAX_COUNT}]", _TICKS),
    Param("stall_ticks", None, f"None (the profile's default) or an integer in [1, {MAX_COUNT}]", _TICKS),
    Param("kv_high_watermark", 0.9, "a finite number >= 0", _share),
    Param("token_usage_low_watermark", None, "None (off) or a number in [0, 1]",
          lambda v: v is None or (_share(v) and v <= 1.0)),
    Param("max_queue_ms", None, "None (off) or a finite number >= 0", lambda v: v is None or _share(v)),
    *(p if p.name != "enable_dp_attention" else Param(p.name, True, p.valid, p.check, p.server_arg) for p in layout_params()),
    Param("profile", "atom-coalescer", "one of " + ", ".join(_PROFILE), lambda v: isinstance(v, str) and v in _PROFILE),
)


@dataclass(frozen=True)
class AtomCoalescerConfig(LowWatermark, Config):
    """A validated configuration of ATOM's coalescer; the four tuned parameters default to the profile's set."""

    max_num_batched_tokens: int = 16384
    target_fill: Optional[float] = None
    ttft_max_ticks: Optional[int] = None
    partial_max_ticks: Optional[int] = None
    stall_ticks: Optional[int] = None
    kv_high_watermark: float = 0.9
    token_usage_low_watermark: Optional[float] = None
    max_queue_ms: Optional[float] = None
    dp_size: int = 1
    attn_tp_size: int = 1
    attn_cp_size: int = 1
    enable_dp_attention: bool = True
    profile: str = "atom-coalescer"

    policy_name = NAME

    def __post_init__(self) -> None:
        self._apply_profile_defaults()
        self._validate(PARAMETERS)
        for name in ("target_fill", "kv_high_watermark", "token_usage_low_watermark", "max_queue_ms"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, float(value))

    @classmethod
    def from_engine(cls, **kwargs: Any) -> "AtomCoalescerConfig":
        """The configuration ATOM's constructor ends up with: its clamps applied, each with ATOM's warning.

        ATOM moves a ``target_fill`` <= 0 to 0.05 and one > 1 to 1.0, and a tick
        bound < 1 to 1; the configuration itself refuses those values.
        """
        fill = kwargs.get("target_fill")
        if fill is not None and is_real(fill) and fill <= 0.0:
            logger.warning("target_fill=%s <= 0 disables coalescing (fires every tick); clamping to a small positive 0.05.", fill)
            kwargs["target_fill"] = 0.05
        elif fill is not None and is_real(fill) and fill > 1.0:
            logger.warning("target_fill=%s > 1.0 is unreachable (fill is capped at 1.0); clamping to 1.0.", fill)
            kwargs["target_fill"] = 1.0
        for name in ("ttft_max_ticks", "partial_max_ticks", "stall_ticks"):
            value = kwargs.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 1:
                logger.warning("%s=%s < 1 would fire on the first tick (bound disabled); clamping to 1.", name, value)
                kwargs[name] = 1
        return cls(**kwargs)

    # what the guards read
    @property
    def kv_high(self) -> float:
        return self.kv_high_watermark

    @property
    def queue_on(self) -> bool:
        return self.max_queue_ms is not None

    @property
    def queue_ms(self) -> float:
        return 0.0 if self.max_queue_ms is None else self.max_queue_ms


# ----- variables, inputs, what the guards see ----------------------------------------------

IDLE, HOLDING, RELEASED = "idle", "holding", "released"
STATES = (IDLE, HOLDING, RELEASED)
STATE_DOC = {
    IDLE: "no hold in progress (hold_ticks = 0, stall_count = 0, no stall check yet)",
    HOLDING: "prefill admission is held back (hold_ticks >= 1)",
    RELEASED: "this tick fired; finalize returns to idle",
}


class State(NamedTuple):
    control: str = IDLE
    hold_ticks: int = 0
    stall_count: int = 0
    prev_pending: int = 0
    stall_checked: bool = False  # a stall check has run this episode (ATOM: _prev_pending is not its -1)
    first_call: bool = True  # the first call is still to come: it fires (ATOM's _first)


INIT = State()
STATE_FIELDS = (
    Field("hold_ticks", COUNT, "consecutive holds of this episode (_hold_ticks)", sym="hold"),
    Field("stall_count", COUNT, "consecutive aligned ticks in which G_pending did not grow (_stall_count)", sym="stall"),
    Field("prev_pending", COUNT, "G_pending at the episode's last stall check (_prev_pending; 0 before its first)", sym="prev"),
    Field("stall_checked", BOOL, "the episode has had a stall check (ATOM's _prev_pending is then not -1)", sym="checked"),
    Field("first_call", BOOL, "the first call is still to come (_first)", sym="first"),
)


def type_ok(o: Any, c: Any, st: Any) -> Any:
    idle, holding = st.control == IDLE, st.control == HOLDING
    return o.And(
        o.Or(idle, holding),
        o.Or(o.Not(idle), o.And(st.hold_ticks == 0, st.stall_count == 0, st.prev_pending == 0, o.Not(st.stall_checked))),
        o.Or(o.Not(holding), st.hold_ticks >= 1),
        o.Or(o.Not(st.first_call), o.And(idle, st.hold_ticks == 0)),
        st.stall_count >= 0, st.prev_pending >= 0,
    )


class CoalescerInput(NamedTuple):
    """``should_allow_prefill``'s arguments, in ATOM's order, then the runtime's collective outcome."""

    prefillable: bool
    pending_tokens: int
    running_decode_batch: int = 0
    kv_usage: float = 0.0
    has_partial: bool = False
    oldest_waiting_age_ms: float = 0.0
    collective_failed: bool = False


INPUTS = (
    Field("prefillable", BOOL, "this rank has admittable prefill work (a fresh head that can allocate, or a resumable "
          "partial)", sym="pre"),
    Field("pending_tokens", COUNT, "fresh waiting new-tokens plus resumable partials' remaining, capped at "
          "max_num_batched_tokens by the caller", sym="pend"),
    Field("running_decode_batch", COUNT, "decode requests running on this rank (partial chunks excluded)", default=0,
          sym="dec"),
    Field("kv_usage", USAGE, "fraction of this rank's KV blocks in use", default=0.0, sym="kv"),
    Field("has_partial", BOOL, "this rank has a chunked prefill in flight", default=False, sym="part"),
    Field("oldest_waiting_age_ms", USAGE, "age of this rank's oldest schedulable waiting request, ms", default=0.0,
          sym="age"),
    Field("collective_failed", BOOL, "this rank's all-reduce raised: the runtime sets it (a caller only to stand for a "
          "failure, in a test or a simulation)", default=False, sym="failed"),
)
COLLECTIVE_FAILED = "collective_failed"


class Local(NamedTuple):
    first_call: Any
    hold_ticks: Any
    stall_count: Any
    prev_pending: Any
    stall_checked: Any
    collective_failed: Any


def local_for(o: Any, st: Any, now: Any, inp: Any) -> Local:
    return Local(st.first_call, st.hold_ticks, st.stall_count, st.prev_pending, st.stall_checked, inp.collective_failed)


def local_domain(o: Any, c: Any, st: Any, now: Any, inp: Any) -> list:
    return [st.hold_ticks <= MAX_COUNT, st.stall_count <= MAX_COUNT, st.prev_pending <= c.dp_size * MAX_COUNT]


# ----- the row and the view ----------------------------------------------------------------

ROW = (
    Field("prefillable", BOOL, "slot 0: this rank can prefill"),
    Field("pending_tokens", COUNT, "slot 1: its pending tokens"),
    Field("running_decode", COUNT, "slot 2: its decode requests"),
    Field("kv_high", BOOL, "slot 3: prefillable with KV usage at or above kv_high_watermark"),
    Field("kv_low", BOOL, "slot 4: prefillable with KV usage below token_usage_low_watermark"),
    Field("has_partial", BOOL, "slot 5: a partial chunk in flight"),
    Field("queue_hot", BOOL, "slot 6: prefillable with its oldest waiting request queued max_queue_ms or more"),
)


def kv_high_flag(o: Any, c: Any, prefillable: Any, kv_usage: Any) -> Any:
    """This rank can prefill and its KV usage is at or above the high watermark."""
    return o.And(prefillable, kv_usage >= o.num(c.kv_high))


def kv_low_flag(o: Any, c: Any, prefillable: Any, kv_usage: Any) -> Any:
    """This rank can prefill and its KV usage is below the low watermark (when one is set)."""
    return o.And(prefillable, c.low_on, kv_usage < o.num(c.low))


def queue_hot_flag(o: Any, c: Any, prefillable: Any, oldest_waiting_age_ms: Any) -> Any:
    """This rank can prefill and its oldest waiting request has queued max_queue_ms or more (when set)."""
    return o.And(prefillable, c.queue_on, oldest_waiting_age_ms >= o.num(c.queue_ms))


def local_row(o: Any, c: Any, inp: Any, s: Local) -> list:
    pre = inp.prefillable
    return [
        o.b2i(pre), inp.pending_tokens, inp.running_decode_batch,
        o.b2i(kv_high_flag(o, c, pre, inp.kv_usage)), o.b2i(kv_low_flag(o, c, pre, inp.kv_usage)),
        o.b2i(inp.has_partial), o.b2i(queue_hot_flag(o, c, pre, inp.oldest_waiting_age_ms)),
    ]


class View(NamedTuple):
    n: Any
    num_prefillable: Any  # n_prefillable
    pending: Any  # G_pending
    running_decode: Any  # G_running_dec
    kv_high_any: Any
    kv_low_any: Any
    partial_any: Any
    queue_hot_any: Any


VIEW_FOLD = (
    Agg("n", "count", None, doc="counted rows (the DP ranks)"),
    Agg("num_prefillable", "sum", "prefillable"),
    Agg("pending", "sum", "pending_tokens", sym="G"),
    Agg("running_decode", "sum", "running_decode", sym="D"),
    Agg("kv_high_any", "any", "kv_high"),
    Agg("kv_low_any", "any", "kv_low"),
    Agg("partial_any", "any", "has_partial"),
    Agg("queue_hot_any", "any", "queue_hot"),
)


def view_domain(o: Any, c: Any, v: View) -> list:
    """Exactly what the rows give: sums within n rows' range, flags only where a prefillable row can raise them."""
    some = v.num_prefillable >= 1
    return [
        v.n >= 1, v.num_prefillable >= 0, v.num_prefillable <= v.n,
        v.pending >= 0, v.pending <= v.n * MAX_COUNT, v.running_decode >= 0, v.running_decode <= v.n * MAX_COUNT,
        o.Or(o.Not(v.kv_high_any), some),
        o.Or(o.Not(v.kv_low_any), o.And(some, c.low_on, o.num(c.low) > 0)),
        o.Or(o.Not(v.queue_hot_any), o.And(some, c.queue_on)),
        # with kv_high_watermark 0 every prefillable row is high; a queue bound of 0 makes every one hot
        o.Or(v.kv_high_any, o.Not(some), o.num(c.kv_high) > 0),
        o.Or(v.queue_hot_any, o.Not(some), o.Not(c.queue_on), o.num(c.queue_ms) > 0),
        # a prefillable row with neither KV flag has usage in [low, high)
        o.Or(v.kv_high_any, v.kv_low_any, o.Not(some), o.Not(c.low_on), o.num(c.low) < o.num(c.kv_high)),
        # one prefillable row with both KV flags has usage in [high, low)
        o.Or(o.Not(v.kv_high_any), o.Not(v.kv_low_any), v.num_prefillable >= 2, o.num(c.kv_high) < o.num(c.low)),
    ]


# ----- guards --------------------------------------------------------------------------------


def is_first_call(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The first call: ATOM fires it unconditionally (and skips the collective)."""
    return s.first_call


def collective_error(o: Any, c: Any, v: Any, s: Any) -> Any:
    """This rank's all-reduce raised (set by the runtime) and the profile fails open: decide alone (with fail-closed the
    runtime raises instead, so no rank ever decides on it)."""
    if has(c, FAIL_CLOSED):
        return o.FALSE
    return s.collective_failed


def vacuous(o: Any, c: Any, v: Any, s: Any) -> Any:
    """No rank can prefill."""
    return v.num_prefillable == 0


def no_decode(o: Any, c: Any, v: Any, s: Any) -> Any:
    """No decode runs anywhere to hide a hold behind."""
    return v.running_decode == 0


def kv_low(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Some prefillable rank's KV usage is below the low watermark (GPU starving)."""
    return v.kv_low_any


def kv_high(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Some prefillable rank's KV usage is at or above the high watermark (cannot accumulate more)."""
    return v.kv_high_any


def queue_hot(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Some prefillable rank's oldest waiting request has queued max_queue_ms or more."""
    return v.queue_hot_any


def ttft_due(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The hold has lasted ttft_max_ticks ticks."""
    return s.hold_ticks >= c.ttft_max_ticks


def partial_due(o: Any, c: Any, v: Any, s: Any) -> Any:
    """A partial chunk is in flight somewhere and the hold has lasted partial_max_ticks ticks."""
    return o.And(v.partial_any, s.hold_ticks >= c.partial_max_ticks)


def aligned(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Every rank can prefill (ATOM's alignment gate holds while n_prefillable < dp_size)."""
    return v.num_prefillable >= v.n


def fill_reached(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The aggregate fills the forward: G_pending / (n_prefillable * max_num_batched_tokens) >= target_fill.

    Read only on aligned passes (n_prefillable = n >= 1), so the budget is positive.
    """
    return o.ratio_at_least(v.pending, v.num_prefillable * c.max_num_batched_tokens, c.target_fill)


def stall_next(o: Any, c: Any, v: Any, s: Any) -> Any:
    """stall_count after this tick's check: one more when G_pending did not grow since the last check, else 0."""
    return o.If(o.And(s.stall_checked, v.pending <= s.prev_pending), s.stall_count + 1, 0)


def stall_due(o: Any, c: Any, v: Any, s: Any) -> Any:
    """G_pending has not grown for stall_ticks aligned ticks: waiting longer is futile."""
    return stall_next(o, c, v, s) >= c.stall_ticks


TABLE_GUARDS = ("is_first_call", "collective_error", "vacuous", "no_decode", "kv_low", "kv_high", "queue_hot", "ttft_due", "partial_due",
                "aligned", "fill_reached", "stall_due")
GUARD_NAMES = ("kv_high_flag", "kv_low_flag", "queue_hot_flag", *TABLE_GUARDS[:10], "fill_reached", "stall_next",
               "stall_due")

# ----- the table, its effects, the decision ----------------------------------------------------

REASONS = ("", "first_call", "fail_open", "no_decode", "token_watermark", "kv_high", "queue_age", "wait_timeout",
           "partial_timeout", "delay", "no_wait", "wait_success", "stall")
RESET, CONSUME_FIRST, HOLD, TRACK_STALL = "reset", "consume_first", "hold", "track_stall"
EFFECT_DOC = {
    RESET: "hold_ticks = 0; stall_count = 0; prev_pending = 0; stall_checked = false",
    CONSUME_FIRST: "first_call = false",
    HOLD: "hold_ticks += 1",
    TRACK_STALL: "stall_count = stall_next; prev_pending = G_pending; stall_checked = true",
}
# The must-fire bounds, in ATOM's order: (row, guard, reason).
_MUST_FIRE = (("no_decode", "no_decode", "no_decode"), ("kv_low", "kv_low", "token_watermark"),
              ("kv_high", "kv_high", "kv_high"), ("queue_age", "queue_hot", "queue_age"),
              ("ttft", "ttft_due", "wait_timeout"), ("partial", "partial_due", "partial_timeout"))


def build_table(profile: str) -> Table:
    from ..registry import resolve_profile

    profile = resolve_profile(profile)
    rows: list[Transition] = []
    for src in (IDLE, HOLDING):

        def row(name: str, dest: str, guards: tuple[str, ...], reason: str, *effects: str, src: str = src) -> Transition:
            return negotiate_row(src, name, dest, guards, reason, *effects, allows=dest == RELEASED)

        rows.append(row("first", RELEASED, ("is_first_call",), "first_call", CONSUME_FIRST, RESET))
        before: tuple[str, ...] = ("!is_first_call",)
        rows.append(row("fail_open", RELEASED, (*before, "collective_error"), "fail_open", RESET))
        before += ("!collective_error",)
        rows.append(row("vacuous", RELEASED, (*before, "vacuous"), "", RESET))
        before += ("!vacuous",)
        for name, guard, reason in _MUST_FIRE:
            rows.append(row(name, RELEASED, (*before, guard), reason, RESET))
            before += (f"!{guard}",)
        rows.append(row("gate_hold", HOLDING, (*before, "!aligned"), "delay", HOLD))
        before += ("aligned",)
        rows.append(row("fill", RELEASED, (*before, "fill_reached"), "wait_success" if src == HOLDING else "no_wait", RESET))
        before += ("!fill_reached",)
        rows.append(row("stall", RELEASED, (*before, "stall_due"), "stall", RESET))
        rows.append(row("hold", HOLDING, (*before, "!stall_due"), "delay", HOLD, TRACK_STALL))
    rows += [
        Transition("released_finalize", FINALIZE, RELEASED, IDLE, (), None),
        Transition("holding_finalize", FINALIZE, HOLDING, HOLDING, (), None),
    ]
    return resolve(profile, STATES, rows, {name: globals()[name] for name in TABLE_GUARDS})


class Decision(NamedTuple):
    next_state: State
    output_allow: bool
    output_reason: str
    num_prefillable: int
    wait_forward_passes: int = 0


DECISION_FIELDS = (
    Field("output_allow", BOOL, "FIRE: this rank may resume partial chunks and admit new prefills this tick",
          trace="allow"),
    Field("output_reason", REASON, "why", trace="reason"),
    Field("num_prefillable", COUNT, "n_prefillable"),
    Field("wait_forward_passes", COUNT, "the holds a fire ends (hold_ticks before the reset)"),
)
DECISION_KEY = ("output_allow", "output_reason", "wait_forward_passes")


def decide(o: Any, c: Any, t: Transition, v: Any, s: Any) -> Decision:
    if RESET in t.effects:
        hold, stall, prev, checked = 0, 0, 0, False
    else:
        hold = s.hold_ticks + 1 if HOLD in t.effects else s.hold_ticks
        if TRACK_STALL in t.effects:
            stall, prev, checked = stall_next(o, c, v, s), v.pending, True
        else:
            stall, prev, checked = s.stall_count, s.prev_pending, s.stall_checked
    first = False if CONSUME_FIRST in t.effects else s.first_call
    return Decision(State(t.dest, hold, stall, prev, checked, first), t.allows, t.reason,  # type: ignore[arg-type]
                    v.num_prefillable, s.hold_ticks if t.allows else 0)


# ----- properties ----------------------------------------------------------------------------


def holds_back(o: Any, c: Any, v: Any, d: Any) -> Any:
    return o.Not(d.output_allow)


def must_fire(o: Any, c: Any, v: Any, d: Any) -> Any:
    """Some rank can prefill and a must-fire bound of the gathered sums holds."""
    return o.And(v.num_prefillable >= 1, o.Or(v.running_decode == 0, v.kv_high_any, v.kv_low_any, v.queue_hot_any))


def _ttft(o: Any, c: Any) -> Any:
    return c.ttft_max_ticks


def _run_is_hold(o: Any, c: Any, st: Any, run: Any) -> Any:
    return run == st.hold_ticks  # every fire resets hold_ticks, every hold adds one


def _all(*refuted: str) -> dict[str, str]:
    return {p.name: (REFUTED if p.name in refuted else PROVED) for p in PROFILES}


_FAIL_OPEN = ("atom-coalescer", "atom-coalescer-1611")
INVARIANTS = (
    Invariant("guards-partition", "from each state, exactly one negotiate guard holds for every input", _all(), "guards-partition"),
    Invariant(
        "force-allow",
        "if some rank can prefill and a must-fire bound holds (no decode anywhere, KV at the high or below the low "
        "watermark, a request queued max_queue_ms or more), the tick fires",
        _all(),
        PassRule("force-allow", premise=must_fire, claim=lambda o, c, v, d: d.output_allow,
                 explain=lambda v, d: f"a must-fire bound holds (decode {v.running_decode}, kv_high {v.kv_high_any}, "
                 f"kv_low {v.kv_low_any}, queue {v.queue_hot_any}), yet the tick holds"),
    ),
    Invariant(
        "none-allows", "if no rank can prefill, the tick fires (vacuous)", _all(),
        PassRule("none-allows", premise=lambda o, c, v, d: v.num_prefillable == 0, claim=lambda o, c, v, d: d.output_allow,
                 explain=lambda v, d: "no rank can prefill, yet the tick holds"),
    ),
    Invariant(
        "bounded-delay",
        "every run of consecutive holds is at most ttft_max_ticks ticks long",
        _all(),
        RunBound(
            "bounded-delay", counts=holds_back, limit=_ttft, couple=_run_is_hold,
            trace_text="rank {rank} holds {length} consecutive ticks (ticks {start}..{end}), more than ttft_max_ticks = {limit}",
            log_text="holds {run}+ consecutive ticks (from pass {start}), more than ttft_max_ticks = {limit}",
            log_text_done="holds {run} consecutive ticks (passes {start}..{end}), more than ttft_max_ticks = {limit}",
        ),
    ),
    Invariant(
        "agreement",
        "ranks that share state and reduced sums decide alike (allow, reason, holds ended) and stay in step, whatever "
        "their own collective's outcome",
        _all(*_FAIL_OPEN),
        Agreement("agreement"),
        "a rank whose all-reduce raised fails open while its peers, which completed it, hold",
    ),
    Invariant(
        "agreement-equal-args",
        "agreement for ranks whose collectives both succeeded (tick counts, no clock: nothing else is local)",
        _all(),
        Agreement("agreement-equal-args", equal_args=True),
    ),
    Invariant(
        "joint-progress",
        "in every window of ttft_max_ticks + 1 consecutive ticks there is one on which no rank holds",
        _all(*_FAIL_OPEN),
        GroupRunBound("joint-progress", counts=holds_back, window=lambda o, c: c.ttft_max_ticks + 1, couple=_run_is_hold,
                      window_text="ttft_max_ticks + 1", who="holds", some="a holding rank"),
        "after a fail-open the ranks' episodes are out of step: they take turns holding",
    ),
    Invariant(
        "aggregate-view",
        "for any number of DP ranks, the reduced sums the decision reads are exactly what the ranks' slots give",
        _all(),
        "aggregate-view",
    ),
    Invariant(
        "refinement",
        "the table equals an independent encoding of ATOM's should_allow_prefill (and of the fail-closed fix)",
        _all(),
        "refinement",
    ),
)


def reference_pass(o: Any, c: Any, st: Any, v: Any, now: Any, inp: Any) -> tuple[dict, tuple]:
    """``should_allow_prefill`` restated as ATOM writes it, one early return after another."""
    codes = {r: i for i, r in enumerate(REASONS)}
    holding = st.control == HOLDING

    def fire(reason: Any, first_after: Any = None) -> tuple:
        return (reason, True, st.hold_ticks, 0, 0, 0, 0, False, st.first_call if first_after is None else first_after)

    prev_pending = o.If(st.stall_checked, st.prev_pending, -1)  # ATOM's _prev_pending, -1 after a reset
    grew = o.Not(v.pending <= prev_pending)
    stall = o.If(grew, 0, st.stall_count + 1)
    hold_gate = (codes["delay"], False, 0, 1, st.hold_ticks + 1, st.stall_count, st.prev_pending, st.stall_checked,
                 st.first_call)
    hold = (codes["delay"], False, 0, 1, st.hold_ticks + 1, stall, v.pending, True, st.first_call)
    budget = v.num_prefillable * c.max_num_batched_tokens
    chain = [
        (st.first_call, fire(codes["first_call"], o.BoolVal(False))),
        (inp.collective_failed if FAIL_CLOSED not in c.features else o.BoolVal(False), fire(codes["fail_open"])),
        (v.num_prefillable == 0, fire(codes[""])),
        (v.running_decode == 0, fire(codes["no_decode"])),
        (v.kv_low_any, fire(codes["token_watermark"])),
        (v.kv_high_any, fire(codes["kv_high"])),
        (v.queue_hot_any, fire(codes["queue_age"])),
        (st.hold_ticks >= c.ttft_max_ticks, fire(codes["wait_timeout"])),
        (o.And(v.partial_any, st.hold_ticks >= c.partial_max_ticks), fire(codes["partial_timeout"])),
        (v.num_prefillable < v.n, hold_gate),
        (o.ratio_at_least(v.pending, budget, c.target_fill), fire(o.If(holding, codes["wait_success"], codes["no_wait"]))),
        (stall >= c.stall_ticks, fire(codes["stall"])),
    ]
    out = hold
    for cond, result in reversed(chain):
        out = tuple(o.If(cond, a, b) for a, b in zip(result, out))
    reason, allow, wfp, control, hold_ticks, stall_count, prev, checked, first_after = out
    return ({"output_reason": reason, "output_allow": allow, "wait_forward_passes": wfp},
            (control, hold_ticks, stall_count, prev, checked, first_after))


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    """ATOM's seven slots, as ``should_allow_prefill`` fills ``_reduce_buf``."""
    pre = inp.prefillable
    high = o.And(pre, inp.kv_usage >= o.num(c.kv_high))
    low = o.And(pre, c.low_on, inp.kv_usage < o.num(c.low))
    hot = o.And(pre, c.queue_on, inp.oldest_waiting_age_ms >= o.num(c.queue_ms))
    return [o.If(pre, 1, 0), inp.pending_tokens, inp.running_decode_batch, o.If(high, 1, 0), o.If(low, 1, 0),
            o.If(inp.has_partial, 1, 0), o.If(hot, 1, 0)]


# ----- what the proofs range over ------------------------------------------------------------

ANY_FILL = AnyValue("any target_fill", 1.0)


@dataclass(frozen=True)
class Family:
    profile: str
    target_fill: Any = ANY_FILL  # ANY_FILL, or one value (a counterexample's)
    dp_size: Optional[int] = None

    def label(self) -> str:
        fill = "any" if self.target_fill == ANY_FILL else repr(self.target_fill)
        return f"{self.profile}/target_fill={fill}"


@dataclass
class SymConfig(SymLayout):
    profile: str
    dp_size: Any
    max_num_batched_tokens: Any
    target_fill: Any
    ttft_max_ticks: Any
    partial_max_ticks: Any
    stall_ticks: Any
    kv_high: Any
    low_on: Any
    low: Any
    queue_on: Any
    queue_ms: Any
    enable_dp_attention: bool = True
    attn_tp_size: int = 1
    attn_cp_size: int = 1


def families(profile: str, scope: Scope) -> list[Family]:
    return [Family(profile, ANY_FILL, scope.dp_size)]


def sym_config(o: Any, fam: Family, tag: str = "") -> SymConfig:
    return SymConfig(
        fam.profile, o.Int(f"dp_size{tag}") if fam.dp_size is None else fam.dp_size, o.Int(f"mnbt{tag}"), fam.target_fill,
        o.Int(f"ttft{tag}"), o.Int(f"partial_ticks{tag}"), o.Int(f"stall_ticks{tag}"), o.Real(f"kv_high{tag}"),
        o.Bool(f"low_on{tag}"), o.Real(f"low{tag}"), o.Bool(f"queue_on{tag}"), o.Real(f"queue_ms{tag}"),
    )


def config_domain(o: Any, c: SymConfig) -> list:
    dom = [c.max_num_batched_tokens >= 1, c.max_num_batched_tokens <= MAX_COUNT, c.kv_high >= 0, c.low >= 0, c.low <= 1,
           c.queue_ms >= 0]
    dom += [x >= 1 for x in (c.ttft_max_ticks, c.partial_max_ticks, c.stall_ticks)]
    dom += [x <= MAX_COUNT for x in (c.ttft_max_ticks, c.partial_max_ticks, c.stall_ticks)]
    if not isinstance(c.dp_size, int):
        dom += [c.dp_size >= 1]
    return dom


def scope_ranges(fams: Any) -> str:
    return (f"{dp_size_range(fams)}, max_num_batched_tokens any >= 1, target_fill any in (0, 1], ttft_max_ticks, "
            "partial_max_ticks and stall_ticks any >= 1, kv_high_watermark any >= 0, token_usage_low_watermark off or any "
            "in [0, 1], max_queue_ms off or any >= 0")


def concrete(fam: Family, scope: Scope) -> Family:
    return Family(fam.profile, 0.5, fam.dp_size if fam.dp_size is not None else 4)


# ----- aggregate-view's witnesses ------------------------------------------------------------


def _witness_usage(o: Any, c: Any, v: Any) -> Any:
    """A KV usage whose flags, on one prefillable row, are the view's (one row) or a subset that covers what
    ``split_view`` leaves out (several rows)."""
    low, high = o.num(c.low), o.num(c.kv_high)
    above_both = o.If(o.And(c.low_on, low > high), low, high)  # high, and not low
    neither = o.If(c.low_on, low, o.RealVal(0))  # in [low, high): the view's domain says it is non-empty
    many = o.If(v.kv_low_any, o.RealVal(0), o.If(v.kv_high_any, above_both, neither))
    one = o.If(v.kv_high_any, o.If(v.kv_low_any, high, above_both), o.If(v.kv_low_any, o.RealVal(0), neither))
    return o.If(v.num_prefillable >= 2, many, one)


def witness_row(o: Any, c: Any, v: Any) -> tuple:
    pre = v.num_prefillable >= 1
    age = o.If(v.queue_hot_any, o.num(c.queue_ms), o.RealVal(0))
    inp = CoalescerInput(pre, o.If(v.pending <= MAX_COUNT, v.pending, MAX_COUNT),
                         o.If(v.running_decode <= MAX_COUNT, v.running_decode, MAX_COUNT), _witness_usage(o, c, v),
                         v.partial_any, age, o.BoolVal(False))
    return inp, Local(o.BoolVal(False), o.IntVal(0), o.IntVal(0), o.IntVal(0), o.BoolVal(False), o.BoolVal(False))


def split_view(o: Any, v: Any) -> Any:
    """The view of the rows besides ``witness_row``'s: one prefillable row fewer; the KV-low flag left to the
    witness when the high one stays; no flags once no prefillable row is left."""
    more = v.num_prefillable >= 2
    return v._replace(
        n=v.n - 1,
        num_prefillable=v.num_prefillable - o.If(v.num_prefillable >= 1, 1, 0),
        pending=v.pending - o.If(v.pending <= MAX_COUNT, v.pending, MAX_COUNT),
        running_decode=v.running_decode - o.If(v.running_decode <= MAX_COUNT, v.running_decode, MAX_COUNT),
        kv_high_any=o.And(v.kv_high_any, more),
        kv_low_any=o.And(v.kv_low_any, more, o.Not(v.kv_high_any)),
        queue_hot_any=o.And(v.queue_hot_any, more),
    )


def idle_row(o: Any) -> tuple:
    inp = CoalescerInput(o.BoolVal(False), o.IntVal(0), o.IntVal(0), o.RealVal(0), o.BoolVal(False), o.RealVal(0),
                         o.BoolVal(False))
    return inp, Local(o.BoolVal(False), o.IntVal(0), o.IntVal(0), o.IntVal(0), o.BoolVal(False), o.BoolVal(False))


def layout_witness(o: Any, c: Any, v: Any, group: int, counted: bool, groups: int) -> tuple:
    """Counted rank g carries the witness of the view left after the first g ranks' witnesses."""
    if not counted:
        return idle_row(o)
    for _ in range(group):
        v = split_view(o, v)
    return witness_row(o, c, v)


# ----- bounded model checking ------------------------------------------------------------------

def bmc_config(o: Any, c: SymConfig) -> tuple[list, Any]:
    (high, in_high), (low, in_low), queue = scaled_share(o, "kv_high", c.kv_high), scaled_share(o, "low", c.low), o.Int("queue_ms_int")
    # a fixed budget keeps the fill test linear (n_prefillable * budget)
    assertions = [*config_domain(o, c), c.max_num_batched_tokens == 16, *in_high, *in_low]
    assertions += [x <= 3 for x in (c.ttft_max_ticks, c.partial_max_ticks, c.stall_ticks)]
    assertions += [queue >= 0, queue <= 100_000, c.queue_ms == o.ToReal(queue)]

    def trace_config(val: Any, ranks: int) -> dict:
        return {
            "max_num_batched_tokens": val(c.max_num_batched_tokens), "target_fill": c.target_fill,
            "ttft_max_ticks": val(c.ttft_max_ticks), "partial_max_ticks": val(c.partial_max_ticks),
            "stall_ticks": val(c.stall_ticks), "kv_high_watermark": val(high) / SCALE,
            "token_usage_low_watermark": val(low) / SCALE if val(c.low_on) else None,
            "max_queue_ms": float(val(queue)) if val(c.queue_on) else None,
            "dp_size": ranks, "attn_tp_size": 1, "attn_cp_size": 1, "enable_dp_attention": True,
        }

    return assertions, trace_config


def bmc_soft(o: Any, c: SymConfig) -> list:
    """A readable counterexample: no low watermark, no queue bound, the high watermark at 1."""
    return [(o.Not(c.low_on), 2), (o.Not(c.queue_on), 2), (c.kv_high == 1, 1)]


def _sim_inputs(facts: Any) -> CoalescerInput:
    """The simulated scheduler's facts as ``should_allow_prefill``'s arguments, every rank every pass, before
    admission: prefillable is a chunk to resume or a head that can be admitted; pending tokens are the waiting
    prompts plus the chunk's rest, capped at the pass's token budget as ATOM's caller caps them."""
    return CoalescerInput(
        prefillable=facts.chunk_in_progress or facts.head_fits,
        pending_tokens=min(facts.pending_prefill_tokens, facts.prefill_budget),
        running_decode_batch=facts.running_batch,
        kv_usage=facts.token_usage,
        has_partial=facts.chunk_in_progress,
        oldest_waiting_age_ms=1000.0 * facts.oldest_wait_s,
    )


def _sim_params(settings: Any) -> dict[str, Any]:
    """ATOM's max_num_batched_tokens is the simulated scheduler's chunk budget (the tokens one pass may take)."""
    return {"max_num_batched_tokens": settings["chunked_prefill_size"]} if "chunked_prefill_size" in settings else {}


SYMBOLS = (
    Symbol(VIEW, "n", "n", "counted rows: the DP ranks (dp_size)"),
    Symbol(VIEW, "num_prefillable", "n_prefillable", "ranks that can prefill (SUM of slot 0)"),
    Symbol(VIEW, "pending", "G_pending", "pending tokens over the ranks (SUM of slot 1)"),
    Symbol(VIEW, "running_decode", "G_running_dec", "decode requests over the ranks (SUM of slot 2)"),
    Symbol(VIEW, "kv_high_any", "any_kv_high", "some prefillable rank's KV usage is at or above kv_high_watermark"),
    Symbol(VIEW, "kv_low_any", "any_kv_low", "some prefillable rank's KV usage is below token_usage_low_watermark"),
    Symbol(VIEW, "partial_any", "any_partial", "some rank has a partial chunk in flight"),
    Symbol(VIEW, "queue_hot_any", "any_queue_hot", "some prefillable rank's oldest request queued max_queue_ms or more"),
    Symbol(LOCAL, "first_call", "first_call", "the first call is still to come"),
    Symbol(LOCAL, "hold_ticks", "hold_ticks", "consecutive holds of this episode"),
    Symbol(LOCAL, "stall_count", "stall_count", "consecutive aligned ticks without growth"),
    Symbol(LOCAL, "prev_pending", "prev_pending", "G_pending at the episode's last stall check"),
    Symbol(LOCAL, "stall_checked", "stall_checked", "the episode has had a stall check"),
    Symbol(LOCAL, "collective_failed", "collective_failed", "this rank's all-reduce raised"),
    Symbol(CONFIG, "kv_high", "kv_high_watermark", "kv_high_watermark"),
    Symbol(CONFIG, "low_on", "low_watermark_set", "token_usage_low_watermark is set", flag=True),
    Symbol(CONFIG, "low", "token_usage_low_watermark", "token_usage_low_watermark"),
    Symbol(CONFIG, "queue_on", "max_queue_ms_set", "max_queue_ms is set", flag=True),
    Symbol(CONFIG, "queue_ms", "max_queue_ms", "max_queue_ms"),
    Symbol(CONFIG, "ttft_max_ticks", "ttft_max_ticks", "ttft_max_ticks"),
    Symbol(CONFIG, "partial_max_ticks", "partial_max_ticks", "partial_max_ticks"),
    Symbol(CONFIG, "stall_ticks", "stall_ticks", "stall_ticks"),
    Symbol(CONFIG, "max_num_batched_tokens", "max_num_batched_tokens", "the prefill token budget of one forward"),
    Symbol(CONFIG, "target_fill", "target_fill", "target_fill"),
    Symbol(ARG, "prefillable", "prefillable", "this rank's prefillable argument"),
    Symbol(ARG, "kv_usage", "kv_usage", "this rank's KV usage"),
    Symbol(ARG, "oldest_waiting_age_ms", "oldest_waiting_age_ms", "this rank's oldest waiting request's age, ms"),
)

POLICY = Policy(
    name=NAME,
    title="ATOM's prefill coalescer",
    summary="holds prefill admission until the reduced pending tokens fill a worthwhile forward, with must-fire bounds "
    "in ticks; ROCm/ATOM #1611 (main, " + SOURCE_COMMIT[:8] + ") with #1670's and #1611's default sets",
    source="atom/model_engine/prefill_delayer.py, scheduler.py and utils/envs.py of ROCm/ATOM at " + SOURCE_COMMIT[:12]
    + " (#1611, #1670, #1681)",
    upstream_url=UPSTREAM_URL,
    config_cls=AtomCoalescerConfig,
    params=PARAMETERS,
    profiles=PROFILES,
    features=FEATURES,
    default_profile="atom-coalescer",
    release_aliases={},
    states=STATES,
    state_doc=STATE_DOC,
    state_cls=State,
    state_fields=STATE_FIELDS,
    init=INIT,
    type_ok=type_ok,
    shared=("control", "hold_ticks", "stall_count", "prev_pending", "stall_checked", "first_call"),
    inputs=INPUTS,
    input_cls=CoalescerInput,
    local_cls=Local,
    local_for=local_for,
    local_inputs=(COLLECTIVE_FAILED,),
    local_domain=local_domain,
    row=ROW,
    local_row=local_row,
    view=VIEW_FOLD,
    view_cls=View,
    view_domain=view_domain,
    guards=sys.modules[__name__],
    table_guards=TABLE_GUARDS,
    reasons=REASONS,
    effect_doc=EFFECT_DOC,
    keep_doc="unchanged",
    build_table=build_table,
    decision_cls=Decision,
    decision_fields=DECISION_FIELDS,
    decide=decide,
    decision_key=DECISION_KEY,
    invariants=INVARIANTS,
    symbols=SYMBOLS,
    trace=TraceSchema(
        inputs=INPUTS,
        expect=(DECISION_FIELDS[0], DECISION_FIELDS[1], DECISION_FIELDS[3]),
        config=("max_num_batched_tokens", "target_fill", "ttft_max_ticks", "partial_max_ticks", "stall_ticks",
                "kv_high_watermark", "token_usage_low_watermark", "max_queue_ms", "dp_size", "attn_tp_size", "attn_cp_size",
                "enable_dp_attention"),
    ),
    log=LogSchema(  # the lines of an all-reduce hold no rank's own row: every input is a reading
        readings=tuple((f.name, f.name) for f in INPUTS),
        inputs_from_row=lambda o, row, r: CoalescerInput(*(r[f.name] for f in INPUTS)),
        reason_order=("delay", "no_wait", "wait_success", "stall", "wait_timeout", "partial_timeout", "no_decode",
                      "token_watermark", "kv_high", "queue_age", "", "first_call", "fail_open"),
    ),
    proof=ProofHooks(
        outputs=("output_reason", "output_allow", "wait_forward_passes"),
        families=families,
        scope_ranges=scope_ranges,
        layout_range="any number of DP ranks (one reduced row)",
        default_scope=Scope(),
        scope_of=scope_of,
        scope_options=(),
        sym_config=sym_config,
        config_domain=config_domain,
        concrete=concrete,
        witness_row=witness_row,
        split_view=split_view,
        idle_row=idle_row,
        layout_witness=layout_witness,
        reference=reference_pass,
        reference_row=reference_row,
        bmc_config=bmc_config,
        bmc_soft=bmc_soft,
        # agreement: first a pass on which one rank prefills and another holds
        bmc_search={"agreement": (lambda f: True, "allow-differs"), "joint-progress": (lambda f: True, None),
                    "bounded-delay": (lambda f: True, None)},
    ),
    host=None,  # SGLang's call sites pass no pending tokens and no partial-chunk flag: see the README
    sim=SimBinding(call_site="gate", inputs=_sim_inputs, idle_inputs=_sim_inputs, gates_partial_chunk=True,
                   params=_sim_params,
                   outcome=lambda d: ("", d.output_allow, d.output_reason, d.wait_forward_passes),
                   colours={"no_wait": "#2ca02c", "wait_success": "#1f77b4", "delay": "#d62728", "wait_timeout": "#ff7f0e",
                            "stall": "#8c564b", "no_decode": "#9467bd", "partial_timeout": "#e377c2", "kv_high": "#7f7f7f",
                            "first_call": "#17becf"}),
    extras={"no_host": "its call sites pass no pending tokens (the waiting queue's new tokens plus the chunked request's remaining ones) and no partial-chunk flag", "docs": {
        "replayed_by": "; ATOM's code is not on the package registry to run it (the profiles are checked against ATOM's own tests instead)",
        "engine": "ATOM",
        "no_features": "none: ATOM's code",
        "releases_intro": "ATOM publishes no releases to the package registry; the profiles are ROCm/ATOM's main at "
        f"`{SOURCE_COMMIT[:12]}` with each default set it has shipped (`atom/utils/envs.py` before and after #1670). "
        "The collective is ATOM's `all_reduce(SUM)` of seven int64 slots.",
    }},
    guard_names=GUARD_NAMES,
    collective=ALL_REDUCE_SUM,
    collective_failure=COLLECTIVE_FAILED,
    fails_open=lambda c: not has(c, FAIL_CLOSED),
)
