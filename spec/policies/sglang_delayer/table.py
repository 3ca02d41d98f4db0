"""The delayer's transition table for every profile, its effects and its decision.

Each row names its guards (``guards``), the reason it emits and its effects;
``decide`` applies a fired row: the pass's decision (the seed's
``_NegotiateOutput``) and the rank's next state.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ...fields import BOOL, COUNT, REASON, SECONDS, TEXT, Field
from ...table import FINALIZE, NEGOTIATE, Table, Transition, lits, resolve
from . import guards
from .profiles import ALL_BRANCH_CAP, features_of, resolve_profile
from .row import status_name
from .variables import DELAYING, IDLE, RELEASED, STATES, State

# Reasons, in the seed's spelling.
REASONS = ("", "token_watermark", "delay", "wait_timeout", "no_wait", "wait_success")

# Effects on delayed_count / wait_start, and on skip_first_armed.
BUMP, CLEAR, CONSUME_SKIP = "bump", "clear", "consume_skip"
EFFECT_DOC = {
    BUMP: "delayed_count += 1; wait_start = wait_start if waiting else now",
    CLEAR: "delayed_count = 0; wait_start = none",
    CONSUME_SKIP: "skip_first_armed = skip_first_armed and not skip_consumed",
}
KEEP_DOC = "unchanged"


def _row(name: str, src: str, dest: str, guard_names: tuple[str, ...], reason: str, *effects: str) -> Transition:
    return Transition(f"{src}_{name}", NEGOTIATE, src, dest, lits(*guard_names), reason, effects, dest == RELEASED)


def build_table(profile: str) -> Table:
    """All transitions of ``profile`` (a profile or release name), guards resolved now."""
    profile = resolve_profile(profile)
    capped = ALL_BRANCH_CAP in features_of(profile)
    rows: list[Transition] = []
    for src in (IDLE, DELAYING):
        released_reason = "wait_success" if src == DELAYING else "no_wait"
        rows += [
            _row("none", src, RELEASED, ("status_none",), "", CLEAR),
            _row("force", src, RELEASED, ("!status_none", "exists_force"), "token_watermark", CLEAR),
            _row("mixed_delay", src, DELAYING, ("status_mixed", "!exists_force", "below_cap"), "delay", BUMP),
            _row("mixed_timeout", src, RELEASED, ("status_mixed", "!exists_force", "!below_cap"), "wait_timeout", CLEAR),
        ]
        all_delay = ("status_all", "!exists_force", "delay_wanted")
        if capped:
            rows += [
                _row("all_delay", src, DELAYING, (*all_delay, "below_cap"), "delay", BUMP, CONSUME_SKIP),
                _row("all_timeout", src, RELEASED, (*all_delay, "!below_cap"), "wait_timeout", CLEAR, CONSUME_SKIP),
            ]
        else:
            rows.append(_row("all_delay", src, DELAYING, all_delay, "delay", BUMP, CONSUME_SKIP))
        rows.append(_row("all_allow", src, RELEASED, ("status_all", "!exists_force", "!delay_wanted"), released_reason, CLEAR, CONSUME_SKIP))
    rows += [
        Transition("released_finalize", FINALIZE, RELEASED, IDLE, (), None),
        Transition("delaying_finalize", FINALIZE, DELAYING, DELAYING, (), None),
    ]
    return resolve(profile, STATES, rows, {name: getattr(guards, name) for name in guards.TABLE_GUARDS})


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


DECISION_FIELDS = (
    Field("input_estimation", TEXT, "all, none or mixed: the gathered status", values=("all", "none", "mixed")),
    Field("output_allow", BOOL, "this pass may prefill", trace="allow"),
    Field("output_reason", REASON, "why", trace="reason"),
    Field("num_prefillable", COUNT, "counted ranks that can prefill"),
    Field("num_token_watermark_force_allow", COUNT, "counted ranks below the token watermark"),
    Field("wait_forward_passes", COUNT, "the delays a release ends"),
    Field("wait_seconds", SECONDS, "the wait a release ends, on this rank's clock"),
)
DECISION_KEY = ("output_allow", "output_reason", "wait_forward_passes")


def decide(o: Any, c: Any, t: Transition, v: Any, s: Any) -> Decision:
    """Apply the fired row ``t``: the pass's decision and the rank's next state.

    ``o`` is the operator layer: ``PyOps`` for values; ``fsm.compiled`` passes its
    source-emitting layer to derive the compiled step's return expression from here.
    A release reports the wait it ends; ``Local`` makes both 0 when there was none.
    """
    wait_forward_passes = s.delayed_count if t.allows else 0
    wait_seconds = s.now - s.wait_start if t.allows else 0.0
    if BUMP in t.effects:
        count, start = s.delayed_count + 1, s.wait_start
    else:
        count, start = 0, None
    armed = o.And(s.skip_first_armed, o.Not(guards.skip_consumed(o, c, v, s))) if CONSUME_SKIP in t.effects else s.skip_first_armed
    return Decision(
        next_state=State(t.dest, count, start, armed),
        input_estimation=status_name(o, c, v),
        output_allow=t.allows,
        output_reason=t.reason,  # type: ignore[arg-type]
        num_prefillable=v.num_prefillable,
        num_token_watermark_force_allow=v.num_force,
        wait_forward_passes=wait_forward_passes,
        wait_seconds=wait_seconds,
    )
