"""Bounded model checking from freshly built delayers: the shortest concrete counterexample.

Ranks are encoded one by one: each builds its row with the spec's
``local_row`` on its own clock, the rows are aggregated with the spec's
``gathered_view``, and each rank fires the table through ``encode_pass``. The
model's numbers are kept exactly representable as doubles (integer seconds,
integer milliseconds, token usage in 1/1024ths) so the trace replays through
real float code unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Optional

import z3

from ..spec.inputs import PassInput
from ..spec.table import REASONS, Table
from ..spec.view import gathered_view, local_row
from .model import SOLVER_TACTIC, Family, Outcome, SymState, encode_pass, sym_config
from .z3ops import Z3Ops

RANKS = 2
MAX_PASSES = 6
SMALL = 1000  # bound on counts in traces, for readable numbers
TU_SCALE = 1024


class Unrolling:
    """``k`` passes of ``RANKS`` DP ranks (DP attention on, attn-TP 1)."""

    def __init__(self, fam: Family, table: Table, k: int) -> None:
        self.o = Z3Ops()
        self.c = replace(sym_config(fam), enable_dp_attention=True, dp_size=RANKS, attn_tp_size=1)
        c = self.c
        self.ms = z3.Int("max_delay_ms_int")
        self.wm = z3.Int("watermark_1024")
        self.assertions: list = [
            *c.domain(),
            c.max_delay_passes >= 2,  # a bound of 0 would make the example degenerate
            c.max_delay_passes <= 10,
            self.ms >= 1,
            self.ms <= 100_000,
            c.max_delay_ms == z3.ToReal(self.ms),
            self.wm >= 0,
            self.wm <= TU_SCALE,
            c.watermark == z3.ToReal(self.wm) / TU_SCALE,
        ]
        if c.pmr_on:
            self.assertions.append(c.pmr <= SMALL)
        self.inputs: list[list[dict[str, Any]]] = []
        self.outs: list[list[Outcome]] = []
        states = [SymState.initial() for _ in range(RANKS)]
        prev_now: list[Any] = [None] * RANKS
        for p in range(k):
            rows, locals_, ins = [], [], []
            for r in range(RANKS):
                x = {
                    "prefillable": z3.Bool(f"pre_{p}_{r}"),
                    "tu": z3.Int(f"tu_{p}_{r}"),
                    "running_batch": z3.Int(f"rb_{p}_{r}"),
                    "max_prefill_bs": z3.Int(f"pb_{p}_{r}"),
                    "waiting_queue_len": z3.Int(f"wq_{p}_{r}"),
                    "max_running_requests": z3.Int(f"mrr_{p}_{r}"),
                    "now": z3.Int(f"now_{p}_{r}"),
                }
                self.assertions += [x["tu"] >= 0, x["tu"] <= TU_SCALE, x["now"] >= 0]
                self.assertions += [z3.And(x[f] >= 0, x[f] <= SMALL) for f in ("running_batch", "max_prefill_bs", "waiting_queue_len", "max_running_requests")]
                if prev_now[r] is not None:
                    self.assertions.append(x["now"] >= prev_now[r])  # clocks are monotonic
                prev_now[r] = x["now"]
                tu = z3.ToReal(x["tu"]) / TU_SCALE
                now = z3.ToReal(x["now"])
                local = states[r].local(now, x["max_running_requests"])
                inp = PassInput(x["prefillable"], tu, x["running_batch"], x["max_prefill_bs"], x["max_running_requests"], x["waiting_queue_len"])
                rows.append(local_row(self.o, c, inp, local) + [0, 0])
                locals_.append(local)
                ins.append(x)
            view = gathered_view(self.o, c, rows)
            outs = [encode_pass(self.o, c, table, states[r], view, locals_[r]) for r in range(RANKS)]
            states = [out.next for out in outs]
            self.inputs.append(ins)
            self.outs.append(outs)
        self.assertions += self.o.side

    def bound(self) -> Any:
        return self.c.bound()


Violation = Callable[[Unrolling], Any]


def too_long_delay(u: Unrolling) -> Any:
    """Some rank's run of delays exceeds max(max_delay_passes - 1, 0)."""
    return z3.Or(*[out.next.count > u.bound() for outs in u.outs for out in outs])


def ranks_disagree(u: Unrolling) -> Any:
    """At some pass two ranks decide differently from the same gathered table."""
    return z3.Or(*[z3.Not(outs[0].decision_eq(outs[r])) for outs in u.outs for r in range(1, RANKS)])


def window(u: Unrolling) -> Any:
    """max(max_delay_passes, 1): the joint-progress window."""
    return z3.If(u.c.max_delay_passes >= 1, u.c.max_delay_passes, 1)


def no_joint_progress(u: Unrolling) -> Any:
    """Some window of ``window(u)`` consecutive passes has a delaying rank on every pass."""
    k = len(u.outs)
    some_delay = [z3.Or(*[z3.Not(out.allow) for out in outs]) for outs in u.outs]
    w = window(u)
    starts = []
    for i in range(k):
        inside = [z3.Implies(j < i + w, some_delay[j]) for j in range(i, k)]
        starts.append(z3.And(i + w <= k, *inside))
    return z3.Or(*starts)


def same_local_args(u: Unrolling) -> Any:
    """Ranks pass the same max_running_requests: only their clocks differ."""
    return z3.And(*[ins[0]["max_running_requests"] == ins[r]["max_running_requests"] for ins in u.inputs for r in range(1, RANKS)])


def shortest(fam: Family, table: Table, violation: Violation, extra: Optional[Violation] = None, timeout_ms: int = 20000, max_passes: int = MAX_PASSES) -> tuple[str, Optional[dict]]:
    """The shortest run from fresh delayers that shows ``violation``.

    ("refuted", trace); ("none", None) when no run of up to ``max_passes`` shows it;
    ("timeout", None) or ("unknown", None) when the solver could not decide.
    """
    for k in range(1, max_passes + 1):
        u = Unrolling(fam, table, k)
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
    for ins in u.inputs:
        for r in range(1, RANKS):
            for key in ("prefillable", "tu", "running_batch", "max_prefill_bs", "waiting_queue_len", "max_running_requests", "now"):
                opt.add_soft(ins[r][key] == ins[0][key], weight=4)
        for x in ins:
            opt.add_soft(x["tu"] == TU_SCALE, weight=1)
            for key in ("running_batch", "max_prefill_bs", "waiting_queue_len", "max_running_requests"):
                opt.add_soft(x[key] <= 16, weight=1)
    opt.add_soft(u.c.watermark_on == False, weight=2)  # noqa: E712 - a Z3 term, not a Python comparison
    return opt.model() if opt.check() == z3.sat else None


def concretize(u: Unrolling, m: z3.ModelRef) -> dict:
    def val(t: Any) -> Any:
        v = m.eval(t, model_completion=True)
        if z3.is_true(v) or z3.is_false(v):
            return z3.is_true(v)
        return v.as_long()

    c = u.c
    passes = []
    for ins, outs in zip(u.inputs, u.outs):
        ranks = [
            {
                "prefillable": val(x["prefillable"]),
                "token_usage": val(x["tu"]) / TU_SCALE,
                "running_batch": val(x["running_batch"]),
                "max_prefill_bs": val(x["max_prefill_bs"]),
                "waiting_queue_len": val(x["waiting_queue_len"]),
                "max_running_requests": val(x["max_running_requests"]),
                "now_s": float(val(x["now"])),
            }
            for x in ins
        ]
        expect = [{"allow": val(o.allow), "reason": REASONS[val(o.reason)], "wait_forward_passes": val(o.wfp)} for o in outs]
        passes.append({"ranks": ranks, "expect": expect})
    return {
        "config": {
            "dp_size": RANKS,
            "attn_tp_size": 1,
            "enable_dp_attention": True,
            "max_delay_passes": val(c.max_delay_passes),
            "token_usage_low_watermark": val(u.wm) / TU_SCALE if val(c.watermark_on) else None,
            "queue_min_ratio": c.queue_ratio if c.queue_on else None,
            "max_delay_ms": float(val(u.ms)),
            "prefill_max_requests": val(c.pmr) if c.pmr_on else None,
            "attn_cp_size": 1,
        },
        "passes": passes,
    }
