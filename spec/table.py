"""Transition tables as data, for any policy.

A row names its guards (functions of the policy's guards module, each possibly
negated); the row fires when all hold. For every source state the rows of
``negotiate`` are proved to partition the input space (``guards-partition``), so
their order in the table does not matter. What a fired row does (its effects on
the variables, its decision) is the policy's ``decide``; the row only names its
effects, so the docs can say them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional

from .ops import PY

NEGOTIATE, FINALIZE = "negotiate", "finalize"
EVENTS = (NEGOTIATE, FINALIZE)
EVENT_DOC = {
    NEGOTIATE: "one per pass, after the all-gather; reads the gathered view",
    FINALIZE: "end of the pass",
}


@dataclass(frozen=True)
class Lit:
    """A guard, or its negation."""

    guard: str
    positive: bool = True

    def text(self) -> str:
        return self.guard if self.positive else f"not {self.guard}"


def lits(*names: str) -> tuple[Lit, ...]:
    """``lits("status_mixed", "!exists_force")``: a leading ``!`` negates."""
    return tuple(Lit(n[1:], False) if n.startswith("!") else Lit(n) for n in names)


@dataclass(frozen=True)
class Transition:
    name: str
    event: str
    source: str
    dest: str
    lits: tuple[Lit, ...]
    reason: Optional[str]  # None: the event emits no decision
    effects: tuple[str, ...] = ()  # the policy's effect names, in the order the docs show them
    allows: bool = False  # the decision lets this pass prefill
    # The guard functions, resolved from the policy's guards when the table is built.
    fns: tuple[Callable[..., Any], ...] = field(default=(), compare=False, repr=False)

    def guard_text(self) -> str:
        return " and ".join(lit.text() for lit in self.lits) or "always"


class Table(tuple):
    """The rows of one profile, with the ``negotiate`` rows indexed by source state."""

    profile: str
    states: tuple[str, ...]
    by_source: dict[str, tuple[Transition, ...]]

    def __new__(cls, profile: str, states: tuple[str, ...], rows: tuple[Transition, ...]) -> "Table":
        table = super().__new__(cls, rows)
        table.profile = profile
        table.states = states
        table.by_source = {src: tuple(t for t in rows if t.event == NEGOTIATE and t.source == src) for src in states}
        return table

    @property
    def sources(self) -> tuple[str, ...]:
        """The states ``negotiate`` leaves from, in state order."""
        return tuple(s for s in self.states if self.by_source[s])

    def finalized(self, control: str) -> str:
        """The control state ``finalize`` leads to from ``control`` (itself when no row leaves it)."""
        for t in self:
            if t.event == FINALIZE and t.source == control:
                return t.dest
        return control


def negotiate_row(src: str, name: str, dest: str, guards: tuple[str, ...], reason: str, *effects: str, allows: bool) -> Transition:
    """The ``negotiate`` row ``{src}_{name}``: its guards as ``lits`` names (``"!g"`` negated), its reason and effects."""
    return Transition(f"{src}_{name}", NEGOTIATE, src, dest, lits(*guards), reason, effects, allows)


def resolve(profile: str, states: tuple[str, ...], rows: list[Transition], guards: Mapping[str, Callable[..., Any]]) -> Table:
    """The table of ``profile`` with each row's guard functions looked up in ``guards``."""
    return Table(profile, states, tuple(replace(t, fns=tuple(guards[lit.guard] for lit in t.lits)) for t in rows))


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
        value = None if memo is None else memo.get(lit.guard)
        if value is None:
            value = _kept(memo, lit.guard, fn, o, c, v, s)
        values.append(value if lit.positive else o.Not(value))
    return o.And(*values)


def _kept(memo: Optional[dict], key: Any, fn: Callable[..., Any], o: Any, *args: Any) -> Any:
    """``fn(o, *args)``, kept in ``memo`` under ``key`` when building it defined no fresh variable (nothing appended
    to ``o.side``): Z3 hash-conses terms, so building it again would give the very same term, at a cost. A term that
    defines one (a ceiling, a maximum) is built each time, as before, so the formula keeps each of its definitions."""
    side = getattr(o, "side", None)
    before = None if side is None else len(side)
    value = fn(o, *args)
    if memo is not None and (side is None or len(side) == before):
        memo[key] = value
    return value
