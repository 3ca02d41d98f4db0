"""Symbolic state, view and one pass of any policy, built from its table and guards.

Nothing here restates a guard or names a policy: ``encode_pass`` asks
``spec.table.holds`` and the policy's ``decide`` for Z3 terms through ``Z3Ops``;
the variables' sorts come from the kinds the policy declares.
"""

from __future__ import annotations

from typing import Any, Sequence

import z3

from ..spec.fields import BOOL, CONTROL, COUNT, MAX_COUNT, OPT_SECONDS, REASON, SECONDS, TEXT, USAGE
from ..spec.table import Table, holds
from .z3ops import And, EqInt, If, Z3Ops

# Substituting the many definitional equalities (fresh max/floor variables, the
# nested If terms of the table) before the SMT core runs makes these queries
# several times faster than z3's default solver; answers and models are the same.
SOLVER_TACTIC = ("simplify", "propagate-values", "solve-eqs", "smt")

STUCK = -1  # reason code when no row fires (the partition proof rules it out)


class SymEnum:
    """An integer-coded name (a control state, a reason) that compares with the names themselves.

    ``st.control == "delaying"`` is the term ``ctrl == 1``, so the policy's own
    predicates (``type_ok``, ``local_for``, monitors) read it as they read a string.
    """

    __slots__ = ("var", "names")

    def __init__(self, var: Any, names: Sequence[str]) -> None:
        self.var = var
        self.names = tuple(names)

    def _code(self, other: Any) -> Any:
        if isinstance(other, SymEnum):
            return other.var
        if isinstance(other, str):
            return self.names.index(other)
        return other

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return EqInt(self.var, self._code(other))

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return self.var != self._code(other)

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"SymEnum({self.var})"


def raw(x: Any) -> Any:
    """The term behind a ``SymEnum``, or ``x`` itself."""
    return x.var if isinstance(x, SymEnum) else x


def count_domain(x: Any) -> Any:
    return z3.And(x >= 0, x <= MAX_COUNT)


def _var(kind: str, name: str) -> Any:
    if kind == BOOL:
        return z3.Bool(name)
    if kind in (COUNT, CONTROL, REASON):
        return z3.Int(name)
    if kind in (SECONDS, OPT_SECONDS, USAGE):
        return z3.Real(name)
    raise ValueError(f"no Z3 variable for kind {kind!r}")


def sym_state(policy: Any, tag: str) -> Any:
    """The policy's ``State`` with every variable a fresh Z3 variable (``ctrl{tag}``, then each field's ``sym``)."""
    control = SymEnum(z3.Int(f"ctrl{tag}"), policy.states)
    return policy.state_cls(control, *(_var(f.kind, f"{f.sym_name}{tag}") for f in policy.state_fields))


def constant(kind: str, value: Any) -> Any:
    """A Python value of ``kind`` as a Z3 constant (``None`` seconds read as 0)."""
    if kind == BOOL:
        return z3.BoolVal(bool(value))
    if kind in (SECONDS, OPT_SECONDS, USAGE):
        return z3.RealVal(0 if value is None else value)
    return z3.IntVal(value)


def initial_state(policy: Any) -> Any:
    """The policy's ``init`` as Z3 constants."""
    init = policy.init
    control = SymEnum(z3.IntVal(policy.control_code(init.control)), policy.states)
    return policy.state_cls(control, *(constant(f.kind, getattr(init, f.name)) for f in policy.state_fields))


def with_fields(policy: Any, st: Any, tag: str, names: Sequence[str]) -> Any:
    """``st`` with the variables ``names`` replaced by fresh ones tagged ``tag`` (a rank's own)."""
    kinds = {f.name: f.kind for f in policy.state_fields}
    syms = {f.name: f.sym_name for f in policy.state_fields}
    return st._replace(**{n: _var(kinds[n], f"{syms[n]}{tag}") for n in names})


def sym_view(policy: Any, o: Z3Ops, c: Any, tag: str) -> tuple[Any, list]:
    """An aggregate view for any number of counted ranks, with what the rows guarantee (the policy's domain)."""
    values = []
    for a in policy.view:
        name = f"{a.sym or a.name}{tag}"
        if a.kind == "count":
            values.append(c.dp_dim if not isinstance(c.dp_dim, int) else z3.IntVal(c.dp_dim))
        elif a.kind == "any":
            values.append(z3.Bool(name))
        else:
            values.append(z3.Int(name))
    v = policy.view_cls(*values)
    return v, policy.view_domain(o, c, v)


def sym_input(policy: Any, tag: str, names: Sequence[str]) -> Any:
    """The policy's input with the fields ``names`` fresh variables (``{sym}{tag}``) and the rest absent (None)."""
    return policy.input_cls(
        *(_var(f.kind, f"{f.sym_name}{tag}") if f.name in names else None for f in policy.inputs)
    )


def input_domain(policy: Any, inp: Any) -> list:
    """What each present input field may be, by its kind."""
    out: list = []
    for f in policy.inputs:
        x = getattr(inp, f.name)
        if x is None or isinstance(x, (bool, int, float)):
            continue
        if f.kind == COUNT:
            out.append(count_domain(x))
        elif f.kind == USAGE:
            out.append(x >= 0)
    return out


class SymDecision:
    """A pass's outputs as terms, read by name as monitors read a decision (``d.output_allow``)."""

    def __init__(self, outputs: dict[str, Any]) -> None:
        self.outputs = outputs

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["outputs"][name]
        except KeyError:
            raise AttributeError(f"the proofs do not encode decision field {name!r}") from None


class Outcome:
    """One pass (negotiate, then finalize) as terms: the outputs and the next state."""

    def __init__(self, policy: Any, outputs: dict[str, Any], next_state: Any) -> None:
        self.policy = policy
        self.outputs = outputs
        self.next = next_state
        self.decision = SymDecision(outputs)

    @property
    def allow(self) -> Any:
        return self.outputs["output_allow"]

    def decision_eq(self, other: "Outcome") -> Any:
        return z3.And(*[raw(self.outputs[k]) == raw(other.outputs[k]) for k in self.policy.decision_key])

    def shared_state_eq(self, other: "Outcome") -> Any:
        return shared_eq(self.policy, self.next, other.next)


def shared_eq(policy: Any, a: Any, b: Any) -> Any:
    return z3.And(*[raw(getattr(a, f)) == raw(getattr(b, f)) for f in policy.shared])


def _default(kind: str) -> Any:
    if kind == REASON:
        return z3.IntVal(STUCK)
    if kind == BOOL:
        return z3.BoolVal(False)
    if kind in (SECONDS, OPT_SECONDS, USAGE):
        return z3.RealVal(0)
    return z3.IntVal(0)


def encode_pass(policy: Any, o: Z3Ops, c: Any, table: Table, st: Any, v: Any, s: Any) -> Outcome:
    """The table's first-match semantics over every source state, as nested If terms."""
    kinds = {f.name: f.kind for f in policy.decision_fields}
    names = policy.proof.outputs
    outputs = {n: _default(kinds[n]) for n in names}
    state_kinds = [CONTROL] + [f.kind for f in policy.state_fields]
    nxt = [raw(x) for x in st]
    rows = [t for src in table.sources for t in table.by_source[src]]
    memo: dict = {}  # the pass's guard terms, shared by the rows that test the same guard
    for t in reversed(rows):
        fire = And(st.control == t.source, holds(t, o, c, v, s, memo))
        d = policy.decide(o, c, t, v, s)
        new = {}
        for n in names:
            value = getattr(d, n)
            if kinds[n] == REASON:
                value = policy.reasons.index(value)
            elif kinds[n] == BOOL and isinstance(value, bool):
                value = z3.BoolVal(value)
            new[n] = If(fire, value, outputs[n])
        outputs = new
        after = []
        for i, (kind, value) in enumerate(zip(state_kinds, d.next_state)):
            if i == 0:
                value = policy.control_code(table.finalized(t.dest))  # the next pass starts finalized
            elif kind == OPT_SECONDS and value is None:
                value = z3.RealVal(0)
            elif kind == BOOL:
                value = o.And(value)
            after.append(If(fire, value, nxt[i]))
        nxt = after
    wrapped = {n: SymEnum(x, policy.reasons) if kinds[n] == REASON else x for n, x in outputs.items()}
    return Outcome(policy, wrapped, policy.state_cls(SymEnum(nxt[0], policy.states), *nxt[1:]))


__all__ = [
    "Outcome", "SOLVER_TACTIC", "STUCK", "SymDecision", "SymEnum", "count_domain", "encode_pass", "initial_state",
    "input_domain", "raw", "shared_eq", "sym_input", "sym_state", "sym_view", "with_fields", "TEXT",
]


def concrete_count(policy: Any, view: Any) -> Any:
    """``view`` with its count field (``Policy.count_field``) as a Z3 constant: a concrete layout counts in Python ints."""
    name = policy.count_field
    return view._replace(**{name: z3.IntVal(getattr(view, name))})
