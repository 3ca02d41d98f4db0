"""The catalogue properties that apply to the delayer, each with its check and its verdict per profile.

``expected`` is the status ``prefill-delayer prove`` must find for each
profile; it was set from what the solver decided on each release's profile,
and is kept as the regression contract (a change that flips a cell fails CI).
Each run invariant is a monitor (``spec.monitors``), defined here once; the
delay bound and the progress window are ``config.delay_bound`` and
``config.progress_window``.
"""

from __future__ import annotations

from typing import Any

from ...monitors import Agreement, GroupRunBound, PassRule, RunBound, RunReport
from ...policy import PROVED, REFUTED, Invariant
from .config import delay_bound, progress_window
from .profiles import PROFILES
from .variables import DELAYING


def _all(*refuted: str) -> dict[str, str]:
    """PROVED for every profile but those named, which are REFUTED."""
    unknown = set(refuted) - set(PROFILES)
    if unknown:
        raise KeyError(f"unknown profiles {sorted(unknown)}")
    return {p: (REFUTED if p in refuted else PROVED) for p in PROFILES}


_BEFORE_0_5_22 = ("seed", "sglang-0.5.17", "sglang-0.5.19")
_UPSTREAM = _BEFORE_0_5_22 + ("sglang-0.5.22",)


# ----- the monitors --------------------------------------------------------------------


def delays(o: Any, c: Any, v: Any, d: Any) -> Any:
    """The pass holds this rank's prefill back."""
    return o.Not(d.output_allow)


def mixed_delay(o: Any, c: Any, v: Any, d: Any) -> Any:
    """The pass delays, and some counted ranks can prefill while others cannot."""
    return o.And(o.Not(d.output_allow), v.num_prefillable > 0, v.num_prefillable < v.n)


# SGLang #35241's persistent mixed loop as a property (ours): a mixed wait that no decode hides lasts at most this
# many passes (``aligned``'s must-fire; every release waits up to max_delay_passes - 1).
NO_DECODE_HOLD = 8


def no_decode_delay(o: Any, c: Any, v: Any, d: Any) -> Any:
    """The pass delays a mixed pass while no counted rank has a running batch: no decode overlaps the wait."""
    return o.And(mixed_delay(o, c, v, d), v.running_batch == 0)


FORCE_ALLOW = PassRule(
    "force-allow",
    premise=lambda o, c, v, d: v.num_force > 0,
    claim=lambda o, c, v, d: o.And(d.output_allow, d.output_reason == "token_watermark"),
    explain=lambda v, d: f"{v.num_force} counted rank(s) are prefillable below the token watermark, yet the pass decides "
    f"allow={d.output_allow} reason={d.output_reason!r}",
)
NONE_ALLOWS = PassRule(
    "none-allows",
    premise=lambda o, c, v, d: v.num_prefillable == 0,
    claim=lambda o, c, v, d: d.output_allow,
    explain=lambda v, d: "no counted rank is prefillable, yet the pass delays",
)
BOUNDED_DELAY = RunBound(
    "bounded-delay",
    counts=delays,
    limit=delay_bound,
    couple=lambda o, c, st, run: run == st.delayed_count,  # delayed_count is the run (wait-accounting)
    trace_text="rank {rank} delays {length} consecutive passes (passes {start}..{end}), more than max(max_delay_passes - 1, 0) = {limit}",
    log_text="delays {run}+ consecutive passes (from pass {start}), more than max(max_delay_passes - 1, 0) = {limit}",
    log_text_done="delays {run} consecutive passes (passes {start}..{end}), more than max(max_delay_passes - 1, 0) = {limit}",
)
MIXED_BOUNDED_DELAY = RunBound(
    "mixed-bounded-delay",
    counts=mixed_delay,
    limit=delay_bound,
    couple=lambda o, c, st, run: run <= st.delayed_count,  # a run of mixed delays is part of the run of delays
    trace_text="rank {rank} delays {length} consecutive mixed passes (passes {start}..{end}), more than {limit}",
    log_text="delays {run} consecutive mixed passes (from pass {start}), more than {limit}",
)
NO_DECODE_HOLD_BOUND = RunBound(
    "no-decode-hold",
    counts=no_decode_delay,
    limit=lambda o, c: NO_DECODE_HOLD,
    couple=lambda o, c, st, run: run <= st.delayed_count,  # such a run is part of the run of delays
    trace_text="rank {rank} delays {length} consecutive mixed passes with no decode anywhere (passes {start}..{end}), "
    "more than {limit}",
    log_text="delays {run} consecutive mixed passes with no running batch on any rank (from pass {start}), more than {limit}",
)
WAIT_ACCOUNTING = RunReport(
    "wait-accounting",
    counts=delays,
    length="wait_forward_passes",
    seconds="wait_seconds",
    couple=lambda o, c, st, run, since: o.And(run == st.delayed_count, o.Or(o.Not(st.control == DELAYING), since == st.wait_start)),
    noun="delays",
)
JOINT_PROGRESS = GroupRunBound(
    "joint-progress",
    counts=delays,
    window=progress_window,
    couple=lambda o, c, st, run: run == st.delayed_count,  # ranks in step share delayed_count: the group's run
    window_text="max(max_delay_passes, 1)",
    who="delays",
    some="a delaying rank",
)


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("guards-partition", "from each state, exactly one negotiate guard holds for every input", _all(), "guards-partition"),
    Invariant(
        "force-allow",
        "if any counted rank is prefillable with token usage below W, the pass allows with token_watermark",
        _all(),
        FORCE_ALLOW,
    ),
    Invariant("none-allows", "if no rank is prefillable, the pass allows", _all(), NONE_ALLOWS),
    Invariant(
        "bounded-delay",
        "every run of consecutive delays is at most max(max_delay_passes - 1, 0) passes long",
        _all("seed"),
        BOUNDED_DELAY,
        "seed: the all branch has no pass cap (upstream #29898, capped in 0.5.17 by #32880)",
    ),
    Invariant("mixed-bounded-delay", "the bound holds for runs of mixed passes", _all(), MIXED_BOUNDED_DELAY),
    Invariant(
        "agreement",
        "ranks that share state and gathered table reach the same decision (allow, reason, "
        "wait_forward_passes) and the same next control state, delayed_count and skip_first_armed, "
        "whatever their local clocks and local arguments",
        _all(*_UPSTREAM),
        Agreement("agreement"),
        "every release reads max_running_requests locally (upstream #32389); before 0.5.22 also the clock",
    ),
    Invariant(
        "agreement-equal-args",
        "agreement for ranks that pass equal arguments (the same max_running_requests): only their clocks differ",
        _all(*_BEFORE_0_5_22),
        Agreement("agreement-equal-args", equal_args=True),
        "before 0.5.22 the queue timeout reads each rank's own clock (upstream #30521, #32454)",
    ),
    Invariant(
        "joint-progress",
        "in every window of max(max_delay_passes, 1) consecutive passes there is a pass on which no rank delays",
        _all(*_UPSTREAM),
        JOINT_PROGRESS,
        "without agreement ranks take turns delaying: each respects its own bound, the group never proceeds together",
    ),
    Invariant("wait-accounting", "a release reports exactly the number of consecutive delays before it", _all(), WAIT_ACCOUNTING),
    Invariant(
        "no-decode-hold",
        f"while no counted rank runs a decode batch, no mixed pass is held more than {NO_DECODE_HOLD} passes in a row, "
        "whatever arrives, completes or is chunked meanwhile: the persistent mixed loop of SGLang #35241, in which every "
        "admission waits up to max_delay_passes with nothing to hide the wait, cannot form",
        _all(*PROFILES),
        NO_DECODE_HOLD_BOUND,
        "every release, and hardened, holds a mixed pass up to max_delay_passes - 1 times whether or not anything "
        "decodes (ours, from #35241)",
    ),
    Invariant(
        "aggregate-view",
        "for any number of DP groups and any attn_cp x attn_tp ranks per group, DP attention on and off, "
        "the aggregate view the other proofs read is exactly what the rows give (by induction over the rows; "
        "cross-checked on concrete layouts)",
        _all(),
        "aggregate-view",
        "makes the aggregate proofs hold for every DP size and layout",
    ),
    Invariant(
        "refinement",
        "the FSM table equals an independently written encoding of each release's code (and of our two fixes)",
        _all(),
        "refinement",
    ),
)
BY_ID = {inv.id: inv for inv in INVARIANTS}
CATALOGUE = INVARIANTS
