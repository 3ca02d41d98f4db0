"""The transition table of every profile, as data.

A row names its guards (functions of ``guards``, each possibly negated); the
row fires when all hold. For every source state the rows of ``negotiate`` are
proved to partition the input space (``guards-partition``), so their order in
the table does not matter. Effects are written here once and read by the FSM,
the proofs and the docs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from . import guards
from .ops import PY
from .profiles import ALL_BRANCH_CAP, features_of, resolve_profile

IDLE, DELAYING, RELEASED = "idle", "delaying", "released"
STATES = (IDLE, DELAYING, RELEASED)
NEGOTIATE, FINALIZE = "negotiate", "finalize"
EVENTS = (NEGOTIATE, FINALIZE)
# Reasons, in the seed's spelling.
REASONS = ("", "token_watermark", "delay", "wait_timeout", "no_wait", "wait_success")

STATE_DOC = {
    IDLE: "no wait in progress (delayed_count = 0)",
    DELAYING: "a prefill is being held back (delayed_count >= 1, wait_start set)",
    RELEASED: "this pass allowed prefill; finalize returns to idle",
}
EVENT_DOC = {
    NEGOTIATE: "one per pass, after the all-gather; reads the gathered view",
    FINALIZE: "end of the pass",
}

# Effect on delayed_count / wait_start.
BUMP, CLEAR, KEEP = "bump", "clear", "keep"
# Effect on skip_first_armed.
CONSUME_SKIP = "consume_skip"

EFFECT_DOC = {
    BUMP: "delayed_count += 1; wait_start = wait_start if waiting else now",
    CLEAR: "delayed_count = 0; wait_start = none",
    KEEP: "unchanged",
    CONSUME_SKIP: "skip_first_armed = skip_first_armed and not skip_consumed",
}


@dataclass(frozen=True)
class Lit:
    """A guard, or its negation."""

    guard: str
    positive: bool = True

    def text(self) -> str:
        return self.guard if self.positive else f"not {self.guard}"


@dataclass(frozen=True)
class Transition:
    name: str
    event: str
    source: str
    dest: str
    lits: tuple[Lit, ...]
    reason: Optional[str]  # None: the event emits no decision
    count_effect: str = KEEP
    skip_effect: str = KEEP
    # The guard functions, resolved from ``guards`` when the table is built.
    fns: tuple[Callable[..., Any], ...] = field(default=(), compare=False, repr=False)

    @property
    def allows(self) -> bool:
        return self.dest == RELEASED

    def guard_text(self) -> str:
        return " and ".join(lit.text() for lit in self.lits) or "always"


def _lits(*names: str) -> tuple[Lit, ...]:
    return tuple(Lit(n[1:], False) if n.startswith("!") else Lit(n) for n in names)


class Table(tuple):
    """The rows of one profile, with the ``negotiate`` rows indexed by source state."""

    profile: str
    by_source: dict[str, tuple[Transition, ...]]

    def __new__(cls, profile: str, rows: tuple[Transition, ...]) -> "Table":
        table = super().__new__(cls, rows)
        table.profile = profile
        table.by_source = {
            src: tuple(t for t in rows if t.event == NEGOTIATE and t.source == src) for src in STATES
        }
        return table


def build_table(profile: str) -> Table:
    """All transitions of ``profile`` (any name ``spec.profiles.resolve_profile`` takes), guards resolved now."""
    profile = resolve_profile(profile)
    capped = ALL_BRANCH_CAP in features_of(profile)
    rows: list[Transition] = []
    for src in (IDLE, DELAYING):
        released_reason = "wait_success" if src == DELAYING else "no_wait"
        rows += [
            Transition(f"{src}_none", NEGOTIATE, src, RELEASED, _lits("status_none"), "", CLEAR),
            Transition(f"{src}_force", NEGOTIATE, src, RELEASED, _lits("!status_none", "exists_force"), "token_watermark", CLEAR),
            Transition(f"{src}_mixed_delay", NEGOTIATE, src, DELAYING, _lits("status_mixed", "!exists_force", "below_cap"), "delay", BUMP),
            Transition(f"{src}_mixed_timeout", NEGOTIATE, src, RELEASED, _lits("status_mixed", "!exists_force", "!below_cap"), "wait_timeout", CLEAR),
        ]
        all_delay = ("status_all", "!exists_force", "delay_wanted")
        if capped:
            rows += [
                Transition(f"{src}_all_delay", NEGOTIATE, src, DELAYING, _lits(*all_delay, "below_cap"), "delay", BUMP, CONSUME_SKIP),
                Transition(f"{src}_all_timeout", NEGOTIATE, src, RELEASED, _lits(*all_delay, "!below_cap"), "wait_timeout", CLEAR, CONSUME_SKIP),
            ]
        else:
            rows.append(Transition(f"{src}_all_delay", NEGOTIATE, src, DELAYING, _lits(*all_delay), "delay", BUMP, CONSUME_SKIP))
        rows.append(
            Transition(f"{src}_all_allow", NEGOTIATE, src, RELEASED, _lits("status_all", "!exists_force", "!delay_wanted"), released_reason, CLEAR, CONSUME_SKIP)
        )
    rows += [
        Transition("released_finalize", FINALIZE, RELEASED, IDLE, (), None),
        Transition("delaying_finalize", FINALIZE, DELAYING, DELAYING, (), None),
    ]
    return Table(
        profile,
        tuple(Transition(**{**t.__dict__, "fns": tuple(getattr(guards, lit.guard) for lit in t.lits)}) for t in rows),
    )


def holds(t: Transition, o: Any, c: Any, v: Any, s: Any, memo: Optional[dict] = None) -> Any:
    """Whether ``t``'s guards all hold (a bool, or a Z3 term under ``Z3Ops``).

    ``memo`` (one dict per pass) lets the rows of one source share guard values.
    On Python values the conjunction short-circuits (guards are pure, so this
    is the same conjunction, evaluated lazily: the runtime's hot path).
    """
    if o is PY:
        for lit, fn in zip(t.lits, t.fns):
            if memo is None:
                value = fn(o, c, v, s)
            else:
                value = memo.get(lit.guard)
                if value is None:
                    value = memo[lit.guard] = fn(o, c, v, s)
            if (not value) == lit.positive:
                return False
        return True
    values = []
    for lit, fn in zip(t.lits, t.fns):
        value = fn(o, c, v, s)
        values.append(value if lit.positive else o.Not(value))
    return o.And(*values)


class Effect:
    """What a fired ``negotiate`` transition emits and leaves behind."""

    __slots__ = ("allow", "reason", "wait_forward_passes", "wait_seconds", "delayed_count", "wait_start", "skip_first_armed")

    def __init__(self, t: Transition, o: Any, c: Any, v: Any, s: Any) -> None:
        self.allow = t.allows
        self.reason = t.reason
        # A release reports the wait it ends; Local makes both 0 when there was none.
        self.wait_forward_passes = s.delayed_count if t.allows else 0
        self.wait_seconds = s.now - s.wait_start if t.allows else 0.0
        if t.count_effect == BUMP:
            self.delayed_count, self.wait_start = s.delayed_count + 1, s.wait_start
        else:
            self.delayed_count, self.wait_start = 0, None
        if t.skip_effect == CONSUME_SKIP:
            self.skip_first_armed = o.And(s.skip_first_armed, o.Not(guards.skip_consumed(o, c, v, s)))
        else:
            self.skip_first_armed = s.skip_first_armed
