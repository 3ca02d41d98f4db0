"""Bounded model checking from fresh ranks: the shortest concrete counterexample, for any policy.

Ranks are encoded one by one: each builds its row with the policy's
``local_row`` on its own clock, the rows are folded with the policy's
``gathered_view``, and each rank fires the table through ``encode_pass``. A
violation is the property's own monitor (``spec.monitors``) unrolled over the
passes. The model's numbers are kept exactly representable as doubles (integer
seconds, usage in 1/1024ths, the policy's ``bmc_config`` for its parameters) so
the trace replays through real float code unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional

import z3

from ..spec.fields import BOOL, COUNT, REASON, USAGE
from ..spec.monitors import Agreement, GroupRunBound, PassRule, RunBound
from ..spec.table import Table
from .model import SOLVER_TACTIC, Outcome, encode_pass, initial_state, raw
from .z3ops import Z3Ops

RANKS = 2
MAX_PASSES = 6
SMALL = 1000  # bound on counts in traces, for readable numbers
USAGE_SCALE = 1024  # a usage in 1/1024ths is exact as a double
SAME_LOCAL_ARGS = "same-local-args"
ALLOW_DIFFERS = "allow-differs"


class Unrolling:
    """``k`` passes of ``RANKS`` DP ranks (DP attention on, attn-TP 1)."""

    def __init__(self, policy: Any, fam: Any, table: Table, k: int) -> None:
        self.policy = policy
        self.o = Z3Ops()
        self.c = replace(policy.proof.sym_config(self.o, fam), enable_dp_attention=True, dp_size=RANKS, attn_tp_size=1)
        c = self.c
        self.assertions, self.trace_config = policy.proof.bmc_config(self.o, c)
        self.assertions = list(self.assertions)
        fields = policy.trace.inputs
        self.inputs: list[list[dict[str, Any]]] = []
        self.outs: list[list[Outcome]] = []
        self.views: list[Any] = []
        states = [initial_state(policy) for _ in range(RANKS)]
        prev_now: list[Any] = [None] * RANKS
        for p in range(k):
            rows, locals_, ins = [], [], []
            for r in range(RANKS):
                x = {f.name: (z3.Bool if f.kind == BOOL else z3.Int)(f"{f.sym_name}_{p}_{r}") for f in fields}
                x["now"] = z3.Int(f"now_{p}_{r}")
                self.assertions += [a for f in fields if f.kind == USAGE for a in (x[f.name] >= 0, x[f.name] <= USAGE_SCALE)]
                self.assertions.append(x["now"] >= 0)
                self.assertions += [z3.And(x[f.name] >= 0, x[f.name] <= SMALL) for f in fields if f.kind == COUNT]
                if prev_now[r] is not None:
                    self.assertions.append(x["now"] >= prev_now[r])  # clocks are monotonic
                prev_now[r] = x["now"]
                values = {f.name: z3.ToReal(x[f.name]) / USAGE_SCALE if f.kind == USAGE else x[f.name] for f in fields}
                inp = policy.input_cls(**values)
                now = z3.ToReal(x["now"])
                local = policy.local_for(self.o, states[r], now, inp)
                rows.append(policy.local_row(self.o, c, inp, local))
                locals_.append(local)
                ins.append(x)
            view = policy.gathered_view(self.o, c, rows)
            outs = [encode_pass(policy, self.o, c, table, states[r], view, locals_[r]) for r in range(RANKS)]
            states = [out.next for out in outs]
            self.inputs.append(ins)
            self.outs.append(outs)
            self.views.append(view)
        self.assertions += self.o.side


Violation = Callable[[Unrolling], Any]


def violation_of(monitor: Any) -> Violation:
    """The monitor's violation, unrolled: some pass whose run (or decisions) breaks it."""
    if isinstance(monitor, RunBound):

        def run_too_long(u: Unrolling) -> Any:
            o, c = u.o, u.c
            runs = [0] * RANKS
            bad = []
            for view, outs in zip(u.views, u.outs):
                runs = [monitor.step(o, c, runs[r], view, outs[r].decision) for r in range(RANKS)]
                bad += [z3.Not(monitor.ok(o, c, run)) for run in runs]
            return z3.Or(*bad)

        return run_too_long
    if isinstance(monitor, PassRule):

        def rule_broken(u: Unrolling) -> Any:
            """At some pass some rank's decision breaks the rule, on that pass's gathered view."""
            return z3.Or(*[monitor.violated(u.o, u.c, view, out.decision) for view, outs in zip(u.views, u.outs) for out in outs])

        return rule_broken
    if isinstance(monitor, Agreement):

        def ranks_disagree(u: Unrolling) -> Any:
            """At some pass two ranks decide differently from the same gathered table."""
            return z3.Or(*[z3.Not(outs[0].decision_eq(outs[r])) for outs in u.outs for r in range(1, RANKS)])

        return ranks_disagree
    if isinstance(monitor, GroupRunBound):

        def no_window_without(u: Unrolling) -> Any:
            """Some window of ``window`` consecutive passes has a counting rank on every pass."""
            o, c = u.o, u.c
            k = len(u.outs)
            some = [z3.Or(*[monitor.counts(o, c, view, out.decision) for out in outs]) for view, outs in zip(u.views, u.outs)]
            w = monitor.window(o, c)
            starts = []
            for i in range(k):
                inside = [z3.Implies(j < i + w, some[j]) for j in range(i, k)]
                starts.append(z3.And(i + w <= k, *inside))
            return z3.Or(*starts)

        return no_window_without
    raise TypeError(f"no bounded model check for {type(monitor).__name__}")


def same_local_args(u: Unrolling) -> Any:
    """Ranks pass the same local inputs (the policy's ``local_inputs``): only their clocks differ."""
    names = u.policy.local_inputs
    return z3.And(*[ins[0][n] == ins[r][n] for ins in u.inputs for r in range(1, RANKS) for n in names])


def allow_differs(u: Unrolling) -> Any:
    """Some pass has ranks of which one may prefill and another may not (not only their reasons differ)."""
    return z3.Or(*[outs[0].allow != outs[r].allow for outs in u.outs for r in range(1, RANKS)])


RESTRICTIONS: dict[str, Violation] = {SAME_LOCAL_ARGS: same_local_args, ALLOW_DIFFERS: allow_differs}


def shortest(policy: Any, fam: Any, table: Table, violation: Violation, extra: Optional[Violation] = None, timeout_ms: int = 20000,
             max_passes: int = MAX_PASSES, first_k: int = 1) -> tuple[str, Optional[dict]]:
    """The shortest run from fresh ranks that shows ``violation``, trying ``first_k`` passes first (no shorter run
    can show it: a run bound's violation needs its limit plus one passes).

    ("refuted", trace); ("none", None) when no run of up to ``max_passes`` shows it;
    ("timeout", None) or ("unknown", None) when the solver could not decide.
    """
    for k in range(first_k, max_passes + 1):
        u = Unrolling(policy, fam, table, k)
        s = z3.Then(*SOLVER_TACTIC).solver()
        s.set("timeout", timeout_ms)
        s.add(*u.assertions)
        if extra is not None:
            s.add(extra(u))
        s.add(violation(u))
        r = s.check()
        if r == z3.sat:
            return "refuted", concretize(u, _readable(u, s.assertions(), timeout_ms) or s.model())
        if r != z3.unsat:
            return ("timeout" if s.reason_unknown() in ("timeout", "canceled") else "unknown"), None
    return "none", None


def all_of(*parts: Optional[Violation]) -> Optional[Violation]:
    """The conjunction of the given restrictions (``None`` ones skipped), or ``None``."""
    given = [p for p in parts if p is not None]
    if not given:
        return None
    return lambda u: z3.And(*[p(u) for p in given])


def _readable(u: Unrolling, assertions: Any, timeout_ms: int) -> Optional[z3.ModelRef]:
    """Re-solve preferring ranks that differ only where they must, and small numbers."""
    opt = z3.Optimize()
    opt.set("timeout", timeout_ms)
    opt.add(assertions)
    fields = u.policy.trace.inputs
    keys = [f.name for f in fields] + ["now"]
    for ins in u.inputs:
        for r in range(1, RANKS):
            for key in keys:
                opt.add_soft(ins[r][key] == ins[0][key], weight=4)
        for x in ins:
            for f in fields:
                if f.kind == USAGE:
                    opt.add_soft(x[f.name] == USAGE_SCALE, weight=1)
            for f in fields:
                if f.kind == COUNT:
                    opt.add_soft(x[f.name] <= 16, weight=1)
    for term, weight in u.policy.proof.bmc_soft(u.o, u.c):
        opt.add_soft(term, weight=weight)
    return opt.model() if opt.check() == z3.sat else None


def concretize(u: Unrolling, m: z3.ModelRef) -> dict:
    def val(t: Any) -> Any:
        v = m.eval(raw(t), model_completion=True)
        if z3.is_true(v) or z3.is_false(v):
            return z3.is_true(v)
        return v.as_long()

    policy = u.policy
    passes = []
    for ins, outs in zip(u.inputs, u.outs):
        ranks = []
        for x in ins:
            entry: dict[str, Any] = {}
            for f in policy.trace.inputs:
                value = val(x[f.name])
                entry[f.trace_name] = value / USAGE_SCALE if f.kind == USAGE else value
            entry["now_s"] = float(val(x["now"]))
            ranks.append(entry)
        expect = []
        for o in outs:
            e = {}
            for f in policy.trace.expect:
                value = val(o.outputs[f.name])
                e[f.trace_name] = policy.reasons[value] if f.kind == REASON else value
            expect.append(e)
        passes.append({"ranks": ranks, "expect": expect})
    return {"config": u.trace_config(val, RANKS), "passes": passes}
