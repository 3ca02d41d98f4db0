"""Each invariant of the catalogue as Z3 queries over the spec's table.

A property is checked per structural ``Family`` over the aggregate view with
a symbolic rank count (so for every DP size) and symbolic numeric parameters.
``unsat`` of the negation is a proof; ``sat`` is a refutation (a model);
anything else is ``unknown`` and never reported as proved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Optional

import z3

from ..spec.invariants import PROVED, REFUTED, UNKNOWN
from ..spec.table import Table, holds
from .model import CTRL, REASON_CODE, SOLVER_TACTIC, Family, Outcome, SymConfig, SymState, count_domain, encode_pass, sym_config, sym_view
from .reference_z3 import reference_pass
from .z3ops import Z3Ops

IDLE, DELAYING = CTRL["idle"], CTRL["delaying"]


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


def _solve(assertions: list, timeout_ms: int) -> Solved:
    s = z3.Then(*SOLVER_TACTIC).solver()
    s.set("timeout", timeout_ms)
    s.add(*assertions)
    r = s.check()
    if r == z3.unsat:
        return Solved(PROVED, None, "")
    if r == z3.sat:
        return Solved(REFUTED, s.model(), "")
    return Solved(UNKNOWN, None, s.reason_unknown())


@dataclass
class PassSetup:
    """One symbolic pass from a well-formed state: everything a single-step property needs."""

    o: Z3Ops
    c: SymConfig
    st: SymState
    v: Any
    now: Any
    mrr: Any
    out: Outcome
    assumptions: list


def one_pass(fam: Family, table: Table, tag: str = "") -> PassSetup:
    o = Z3Ops()
    c = sym_config(fam)
    st = SymState.fresh(tag)
    v, vdom = sym_view(c, tag)
    now, mrr = z3.Real(f"now{tag}"), z3.Int(f"mrr{tag}")
    out = encode_pass(o, c, table, st, v, st.local(now, mrr))
    assumptions = c.domain() + vdom + [st.wellformed(), count_domain(st.count), count_domain(mrr)] + o.side
    return PassSetup(o, c, st, v, now, mrr, out, assumptions)


def check_partition(fam: Family, table: Table, timeout_ms: int) -> Check:
    """From each source state, exactly one negotiate row's guards hold."""
    o = Z3Ops()
    c = sym_config(fam)
    st = SymState.fresh("")
    v, vdom = sym_view(c, "")
    now, mrr = z3.Real("now"), z3.Int("mrr")
    s = st.local(now, mrr)
    for src in ("idle", "delaying"):
        conds = [holds(t, o, c, v, s) for t in table.by_source[src]]
        exactly_one = z3.PbEq([(cd, 1) for cd in conds], 1)
        status, model, why = _solve(
            c.domain() + vdom + [st.ctrl == CTRL[src], st.wellformed(), count_domain(mrr), z3.Not(exactly_one)] + o.side,
            timeout_ms,
        )
        if status != PROVED:
            return Check(status, fam.label(), f"from {src}", model, why=why)
    return Check(PROVED, fam.label())


def check_force_allow(fam: Family, table: Table, timeout_ms: int) -> Check:
    p = one_pass(fam, table)
    claim = z3.And(p.out.allow, p.out.reason == REASON_CODE["token_watermark"])
    status, model, why = _solve(p.assumptions + [p.v.num_force > 0, z3.Not(claim)], timeout_ms)
    return Check(status, fam.label(), model=model, why=why)


def check_none_allows(fam: Family, table: Table, timeout_ms: int) -> Check:
    p = one_pass(fam, table)
    status, model, why = _solve(p.assumptions + [p.v.num_prefillable == 0, z3.Not(p.out.allow)], timeout_ms)
    return Check(status, fam.label(), model=model, why=why)


def check_bounded_delay_step(fam: Family, table: Table, timeout_ms: int) -> Check:
    """Induction: delayed_count <= bound holds initially and is preserved by every pass.

    wait-accounting proves delayed_count is the length of the current run of delays.
    """
    p = one_pass(fam, table)
    bound = p.c.bound()
    init = SymState.initial()
    base = z3.And(init.wellformed(), init.count <= bound)
    post = z3.And(p.out.next.wellformed(), p.out.next.count <= bound)
    status, model, why = _solve(p.assumptions + [p.st.count <= bound, z3.Not(z3.And(base, post))], timeout_ms)
    return Check(status, fam.label(), "inductive step" if status == PROVED else "inductive step fails", model, why=why)


def check_mixed_bounded_delay(fam: Family, table: Table, timeout_ms: int) -> Check:
    """A delay on a mixed pass never takes the run past the bound, from any state."""
    p = one_pass(fam, table)
    mixed = z3.And(p.v.num_prefillable > 0, p.v.num_prefillable < p.v.n)
    delayed = z3.Not(p.out.allow)
    status, model, why = _solve(p.assumptions + [mixed, delayed, z3.Not(p.out.next.count <= p.c.bound())], timeout_ms)
    return Check(status, fam.label(), model=model, why=why)


def check_wait_accounting(fam: Family, table: Table, timeout_ms: int) -> Check:
    """delayed_count counts the run: +1 per delay, reported and reset by the release."""
    p = one_pass(fam, table)
    waiting = p.st.ctrl == DELAYING
    release_ok = z3.And(
        p.out.wfp == p.st.count,
        p.out.wait_seconds == z3.If(waiting, p.now - p.st.start, 0),
        p.out.next.ctrl == IDLE,
        p.out.next.count == 0,
    )
    delay_ok = z3.And(
        p.out.reason == REASON_CODE["delay"],
        p.out.wfp == 0,
        p.out.next.ctrl == DELAYING,
        p.out.next.count == p.st.count + 1,
        p.out.next.start == z3.If(waiting, p.st.start, p.now),
    )
    claim = z3.And(p.out.reason != -1, z3.If(p.out.allow, release_ok, delay_ok), p.out.next.wellformed())
    status, model, why = _solve(p.assumptions + [z3.Not(claim)], timeout_ms)
    return Check(status, fam.label(), model=model, why=why)


@dataclass
class PairSetup:
    """Two ranks that share the control state, delayed_count, skip flag and gathered view,
    each with its own clock, wait start and max_running_requests argument."""

    o: Z3Ops
    c: SymConfig
    st: SymState
    v: Any
    outs: list
    assumptions: list


def rank_pair(fam: Family, table: Table, equal_args: bool) -> PairSetup:
    o = Z3Ops()
    c = sym_config(fam)
    st = SymState.fresh("")
    v, vdom = sym_view(c, "")
    outs, extra, mrrs = [], [], []
    for r in ("a", "b"):
        now, start, mrr = z3.Real(f"now_{r}"), z3.Real(f"start_{r}"), z3.Int(f"mrr_{r}")
        mine = SymState(st.ctrl, st.count, start, st.armed)
        outs.append(encode_pass(o, c, table, mine, v, mine.local(now, mrr)))
        extra += [count_domain(mrr), start <= now]
        mrrs.append(mrr)
    if equal_args:
        extra.append(mrrs[0] == mrrs[1])
    assumptions = c.domain() + vdom + extra + [st.wellformed(), count_domain(st.count)] + o.side
    return PairSetup(o, c, st, v, outs, assumptions)


def check_agreement_step(fam: Family, table: Table, timeout_ms: int, equal_args: bool = False) -> Check:
    """Two ranks sharing state and gathered view, with their own clocks, wait starts and mrr
    (``equal_args``: the same mrr, so only the clocks differ)."""
    p = rank_pair(fam, table, equal_args)
    a, b = p.outs
    differ = z3.Not(z3.And(a.decision_eq(b), a.shared_state_eq(b)))
    status, model, why = _solve(p.assumptions + [differ], timeout_ms)
    return Check(status, fam.label(), model=model, why=why)


def check_agreement_equal_args(fam: Family, table: Table, timeout_ms: int) -> Check:
    return check_agreement_step(fam, table, timeout_ms, equal_args=True)


def check_joint_progress(fam: Family, table: Table, timeout_ms: int) -> Check:
    """Induction over any two ranks of the group (so over every rank count).

    J: the two ranks share control state, delayed_count and skip flag, and
    delayed_count <= bound. J holds for fresh delayers; the step shows every pass
    keeps J and that a pass on which some rank delays is one on which both delay
    and delayed_count grows by one. So W = max(max_delay_passes, 1) > bound
    consecutive passes with a delaying rank would take delayed_count past the
    bound: every window of W passes has a pass on which no rank delays.
    """
    p = rank_pair(fam, table, equal_args=False)
    a, b = p.outs
    bound = p.c.bound()
    window = z3.If(p.c.max_delay_passes >= 1, p.c.max_delay_passes, 1)
    init = SymState.initial()
    base = z3.And(init.wellformed(), init.count <= bound, window > bound)
    some_delay = z3.Or(z3.Not(a.allow), z3.Not(b.allow))
    step = z3.And(
        a.shared_state_eq(b),
        a.next.wellformed(),
        a.next.count <= bound,
        z3.Implies(some_delay, z3.And(z3.Not(a.allow), z3.Not(b.allow), a.next.count == p.st.count + 1)),
    )
    status, model, why = _solve(p.assumptions + [p.st.count <= bound, z3.Not(z3.And(base, step))], timeout_ms)
    return Check(status, fam.label(), "inductive step" if status == PROVED else "inductive step fails", model, why=why)


def check_refinement(fam: Family, table: Table, timeout_ms: int) -> Check:
    """The table's outcome equals the independent encoding of the releases' code (``reference_z3``) on every input."""
    p = one_pass(fam, table)
    side: list = []
    ref = reference_pass(p.c, p.st, p.v, p.now, p.mrr, side)
    same = z3.And(
        p.out.reason == ref.reason,
        p.out.allow == ref.allow,
        p.out.wfp == ref.wfp,
        p.out.wait_seconds == ref.wait_seconds,
        p.out.next.ctrl == ref.next.ctrl,
        p.out.next.count == ref.next.count,
        p.out.next.start == ref.next.start,
        p.out.next.armed == ref.next.armed,
    )
    status, model, why = _solve(p.assumptions + side + [z3.Not(same)], timeout_ms)
    return Check(status, fam.label(), model=model, why=why)


SINGLE_STEP: dict[str, Callable[[Family, Table, int], Check]] = {
    "guards-partition": check_partition,
    "force-allow": check_force_allow,
    "none-allows": check_none_allows,
    "bounded-delay": check_bounded_delay_step,
    "mixed-bounded-delay": check_mixed_bounded_delay,
    "agreement": check_agreement_step,
    "agreement-equal-args": check_agreement_equal_args,
    "joint-progress": check_joint_progress,
    "wait-accounting": check_wait_accounting,
    "refinement": check_refinement,
}
