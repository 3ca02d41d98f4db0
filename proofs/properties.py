"""Each catalogue property as Z3 queries over a policy's table, read from its definition.

A property is checked per structural ``Family`` (the policy's ``proof.families``)
over the aggregate view with a symbolic rank count (so for every DP size) and
symbolic numeric parameters. Run invariants are the policy's monitors
(``spec.monitors``); each kind has one inductive check here, which reads the
monitor's own predicate and bound and the policy's ``couple`` as the
strengthening. ``unsat`` of the negation is a proof; ``sat`` is a refutation (a
model); anything else is ``unknown`` and never reported as proved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

import z3

from ..spec.monitors import Agreement, GroupRunBound, PassRule, RunBound, RunReport
from ..spec.policy import PROVED, REFUTED, UNKNOWN
from ..spec.table import Table, holds
from .model import (
    SOLVER_TACTIC, Outcome, encode_pass, initial_state, raw, shared_eq, sym_input, sym_state, sym_view, with_fields,
)
from .z3ops import Z3Ops


@dataclass
class Check:
    """The outcome of one property on one family."""

    status: str
    family: str
    note: str = ""
    model: Optional[z3.ModelRef] = field(default=None, repr=False)
    why: str = ""  # for UNKNOWN: the solver's reason ("timeout", "canceled", ...)


class Solved(NamedTuple):
    status: str
    model: Optional[z3.ModelRef]
    why: str  # the solver's reason when UNKNOWN, else ""


def solve(assertions: list, timeout_ms: int) -> Solved:
    s = z3.Then(*SOLVER_TACTIC).solver()
    s.set("timeout", timeout_ms)
    s.add(*assertions)
    r = s.check()
    if r == z3.unsat:
        return Solved(PROVED, None, "")
    if r == z3.sat:
        return Solved(REFUTED, s.model(), "")
    return Solved(UNKNOWN, None, s.reason_unknown())


_solve = solve  # the name the layout checks use


@dataclass
class PassSetup:
    """One symbolic pass from a well-formed state: everything a single-step property needs.

    ``assumptions()`` includes the definitions of the fresh variables made so far
    (a check that builds more terms on ``o`` asks for it after building them).
    """

    policy: Any
    o: Z3Ops
    c: Any
    st: Any
    v: Any
    now: Any
    inp: Any
    out: Outcome
    base: list

    def assumptions(self) -> list:
        return self.base + self.o.side


# One catalogue run's symbolic passes, by family (``shared_passes``): every single-pass property of a profile reads the
# same pass, so its terms are built once, not once a property. None: each call builds its own.
_SHARED: Optional[dict] = None


class shared_passes:
    """Within the block, ``one_pass`` builds each (policy, family, table) pass once and hands the same setup to every
    check. A check may build more terms on it; their side conditions only define fresh variables, which every later
    check's assumptions may then include without constraining anything else."""

    def __enter__(self) -> "shared_passes":
        global _SHARED
        self._outer, _SHARED = _SHARED, {}
        return self

    def __exit__(self, *exc: Any) -> None:
        global _SHARED
        _SHARED = self._outer


def one_pass(policy: Any, fam: Any, table: Table, tag: str = "") -> PassSetup:
    if _SHARED is not None:
        key = (id(policy), fam, id(table), tag)
        hit = _SHARED.get(key)
        if hit is not None and hit[0] is policy and hit[1] is table:
            return hit[2]  # type: ignore[no-any-return]
        setup = _one_pass(policy, fam, table, tag)
        _SHARED[key] = (policy, table, setup)  # the objects kept alive, so their ids are not reused meanwhile
        return setup
    return _one_pass(policy, fam, table, tag)


def _one_pass(policy: Any, fam: Any, table: Table, tag: str = "") -> PassSetup:
    o = Z3Ops()
    c = policy.proof.sym_config(o, fam)
    st = sym_state(policy, tag)
    v, vdom = sym_view(policy, o, c, tag)
    now = z3.Real(f"now{tag}")
    inp = sym_input(policy, tag, policy.local_inputs)
    out = encode_pass(policy, o, c, table, st, v, policy.local_for(o, st, now, inp))
    base = policy.proof.config_domain(o, c) + vdom + [policy.type_ok(o, c, st)] + policy.local_domain(o, c, st, now, inp)
    return PassSetup(policy, o, c, st, v, now, inp, out, base)


def check_partition(policy: Any, fam: Any, table: Table, timeout_ms: int) -> Check:
    """From each source state, exactly one negotiate row's guards hold."""
    o = Z3Ops()
    c = policy.proof.sym_config(o, fam)
    st = sym_state(policy, "")
    v, vdom = sym_view(policy, o, c, "")
    now = z3.Real("now")
    inp = sym_input(policy, "", policy.local_inputs)
    s = policy.local_for(o, st, now, inp)
    for src in table.sources:
        conds = [holds(t, o, c, v, s) for t in table.by_source[src]]
        exactly_one = z3.PbEq([(cd, 1) for cd in conds], 1)
        status, model, why = solve(
            policy.proof.config_domain(o, c) + vdom + [st.control == src, policy.type_ok(o, c, st)]
            + policy.local_domain(o, c, st, now, inp) + [z3.Not(exactly_one)] + o.side,
            timeout_ms,
        )
        if status != PROVED:
            return Check(status, fam.label(), f"from {src}", model, why=why)
    return Check(PROVED, fam.label())


def check_pass_rule(policy: Any, rule: PassRule, fam: Any, table: Table, timeout_ms: int) -> Check:
    """On one pass from any well-formed state, the rule's premise implies its claim."""
    p = one_pass(policy, fam, table)
    bad = rule.violated(p.o, p.c, p.v, p.out.decision)
    status, model, why = solve(p.assumptions() + [bad], timeout_ms)
    return Check(status, fam.label(), model=model, why=why)


def check_run_bound(policy: Any, mon: RunBound, fam: Any, table: Table, timeout_ms: int) -> Check:
    """Induction: the run coupled to the state by ``couple`` stays within the limit, from ``init`` on."""
    p = one_pass(policy, fam, table)
    o, c = p.o, p.c
    run = z3.Int("run")
    init = initial_state(policy)
    base = z3.And(policy.type_ok(o, c, init), mon.couple(o, c, init, 0), mon.ok(o, c, 0))
    after = mon.step(o, c, run, p.v, p.out.decision)
    post = z3.And(policy.type_ok(o, c, p.out.next), mon.couple(o, c, p.out.next, after), mon.ok(o, c, after))
    status, model, why = solve(
        p.assumptions() + [run >= 0, mon.couple(o, c, p.st, run), mon.ok(o, c, run), z3.Not(z3.And(base, post))], timeout_ms
    )
    return Check(status, fam.label(), "inductive step" if status == PROVED else "inductive step fails", model, why=why)


def check_run_report(policy: Any, mon: RunReport, fam: Any, table: Table, timeout_ms: int) -> Check:
    """Induction: a pass that ends a run reports it (its length, and the seconds since its first pass)."""
    p = one_pass(policy, fam, table)
    o, c = p.o, p.c
    run, since = z3.Int("run"), z3.Real("since")
    init = initial_state(policy)
    base = z3.And(policy.type_ok(o, c, init), mon.couple(o, c, init, 0, since))
    counts = mon.counts(o, c, p.v, p.out.decision)
    reported = z3.Or(counts, mon.reported(o, run, since, p.out.decision, p.now))
    run2, since2 = mon.step(o, run, since, counts, p.now)
    post = z3.And(reported, policy.type_ok(o, c, p.out.next), mon.couple(o, c, p.out.next, run2, since2))
    status, model, why = solve(p.assumptions() + [run >= 0, mon.couple(o, c, p.st, run, since), z3.Not(z3.And(base, post))],
                               timeout_ms)
    return Check(status, fam.label(), model=model, why=why)


@dataclass
class PairSetup:
    """Two ranks that share the state variables the policy calls shared and the gathered view,
    each with its own clock, its own other variables and its own local inputs."""

    policy: Any
    o: Z3Ops
    c: Any
    st: Any
    ranks: list
    v: Any
    outs: list
    base: list

    def assumptions(self) -> list:
        return self.base + self.o.side


def rank_pair(policy: Any, fam: Any, table: Table, equal_args: bool) -> PairSetup:
    o = Z3Ops()
    c = policy.proof.sym_config(o, fam)
    st = sym_state(policy, "")
    v, vdom = sym_view(policy, o, c, "")
    own = [f.name for f in policy.state_fields if f.name not in policy.shared]
    outs, extra, inputs, ranks = [], [], [], []
    for r in ("a", "b"):
        now = z3.Real(f"now_{r}")
        mine = with_fields(policy, st, f"_{r}", own)
        inp = sym_input(policy, f"_{r}", policy.local_inputs)
        outs.append(encode_pass(policy, o, c, table, mine, v, policy.local_for(o, mine, now, inp)))
        extra += policy.local_domain(o, c, mine, now, inp)
        inputs.append(inp)
        ranks.append(mine)
    if equal_args:
        extra += [getattr(inputs[0], n) == getattr(inputs[1], n) for n in policy.local_inputs]
    base = policy.proof.config_domain(o, c) + vdom + extra + [policy.type_ok(o, c, st)]
    return PairSetup(policy, o, c, st, ranks, v, outs, base)


def check_agreement(policy: Any, mon: Agreement, fam: Any, table: Table, timeout_ms: int) -> Check:
    """Two ranks sharing state and gathered view, with their own clocks and local inputs
    (``equal_args``: equal local inputs, so only the clocks differ), decide alike and stay in step."""
    p = rank_pair(policy, fam, table, mon.equal_args)
    a, b = p.outs
    differ = z3.Not(z3.And(a.decision_eq(b), a.shared_state_eq(b)))
    status, model, why = solve(p.assumptions() + [differ], timeout_ms)
    return Check(status, fam.label(), model=model, why=why)


def check_group_run(policy: Any, mon: GroupRunBound, fam: Any, table: Table, timeout_ms: int) -> Check:
    """Induction over any two ranks of the group (so over every rank count).

    J: the two ranks share their shared variables, and the group's run is
    coupled to their state and within the window. J holds for fresh ranks; the
    step shows every pass keeps J, so no window of ``window`` passes has a
    counting rank on every pass.
    """
    p = rank_pair(policy, fam, table, equal_args=False)
    o, c = p.o, p.c
    a, b = p.outs
    run = z3.Int("run")
    init = initial_state(policy)
    base = z3.And(policy.type_ok(o, c, init), mon.couple(o, c, init, 0), mon.ok(o, c, 0))
    some = z3.Or(*[mon.counts(o, c, p.v, out.decision) for out in p.outs])
    after = mon.step(o, c, run, some)
    step = z3.And(shared_eq(policy, a.next, b.next), policy.type_ok(o, c, a.next), mon.couple(o, c, a.next, after),
                  mon.ok(o, c, after))
    status, model, why = solve(p.assumptions() + [run >= 0, mon.couple(o, c, p.st, run), mon.ok(o, c, run),
                                                  z3.Not(z3.And(base, step))], timeout_ms)
    return Check(status, fam.label(), "inductive step" if status == PROVED else "inductive step fails", model, why=why)


def check_refinement(policy: Any, fam: Any, table: Table, timeout_ms: int) -> Check:
    """The table's outcome equals the policy's independent encoding of the release's code on every input."""
    ref = policy.proof.reference
    if ref is None:
        return Check(UNKNOWN, fam.label(), "the policy has no independent encoding", why="no reference")
    p = one_pass(policy, fam, table)
    outputs, nxt = ref(p.o, p.c, p.st, p.v, p.now, p.inp)
    same = z3.And(
        *[raw(p.out.outputs[k]) == raw(outputs[k]) for k in policy.proof.outputs],
        *[raw(x) == raw(y) for x, y in zip(p.out.next, nxt)],
    )
    status, model, why = solve(p.assumptions() + [z3.Not(same)], timeout_ms)
    return Check(status, fam.label(), model=model, why=why)


# A check per kind: monitors by their class, structural properties by name.
MONITOR_CHECKS: dict[type, Callable[..., Check]] = {
    PassRule: check_pass_rule,
    RunBound: check_run_bound,
    RunReport: check_run_report,
    Agreement: check_agreement,
    GroupRunBound: check_group_run,
}
STRUCTURAL_CHECKS: dict[str, Callable[..., Check]] = {
    "guards-partition": check_partition,
    "refinement": check_refinement,
}


def single_step(policy: Any, prop: str, fam: Any, table: Table, timeout_ms: int) -> Check:
    """The single-step (or inductive) check of ``prop`` for one family."""
    inv = policy.invariant(prop)
    if inv is None:
        raise KeyError(f"{policy.name} has no property {prop!r}")
    check = inv.check
    if isinstance(check, str):
        return STRUCTURAL_CHECKS[check](policy, fam, table, timeout_ms)
    return MONITOR_CHECKS[type(check)](policy, check, fam, table, timeout_ms)
