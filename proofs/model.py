"""Symbolic configuration, view, state and one pass, built from the spec's table and guards.

Nothing here restates a guard: ``encode_pass`` asks ``spec.table.holds`` and
``spec.table.Effect`` for Z3 terms through ``Z3Ops``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import z3

from ..spec.config import MAX_WORLD_SIZE
from ..spec.inputs import MAX_COUNT
from ..spec.profiles import features_of
from ..spec.table import DELAYING, IDLE, REASONS, Effect, Table, holds
from ..spec.view import Local, View
from .families import SYMBOLIC_PARAMETERS, Family, Scope, families  # noqa: F401 - re-exported
from .z3ops import Z3Ops

# Substituting the many definitional equalities (fresh max/floor variables, the
# nested If terms of the table) before the SMT core runs makes these queries
# several times faster than z3's default solver; answers and models are the same.
SOLVER_TACTIC = ("simplify", "propagate-values", "solve-eqs", "smt")

CTRL = {IDLE: 0, DELAYING: 1}
REASON_CODE = {r: i for i, r in enumerate(REASONS)}
STUCK = -1  # reason code when no row fires (the partition proof rules it out)


@dataclass
class SymConfig:
    """The guards' view of a configuration with the numeric parameters symbolic.

    Structural choices (profile, queue trigger on/off and its ratio,
    prefill_max_requests set or not, DP attention and, without it, dp_size)
    stay concrete: they pick which formula is built. Everything else is a Z3
    variable, so a proof covers every value.
    """

    profile: str
    enable_dp_attention: bool
    dp_size: Any
    attn_tp_size: int
    queue_on: bool
    queue_ratio: float
    max_delay_passes: Any
    max_delay_ms: Any
    watermark_on: Any
    watermark: Any
    pmr_on: bool = False
    pmr: Any = 0
    attn_cp_size: int = 1

    @property
    def features(self) -> frozenset[str]:
        return features_of(self.profile)

    @property
    def dp_dim(self) -> Any:
        return self.dp_size if self.enable_dp_attention else 1

    @property
    def group_size(self) -> int:
        return self.attn_cp_size * self.attn_tp_size

    def domain(self) -> list:
        dom = [self.max_delay_passes >= 0, self.max_delay_ms > 0, self.watermark >= 0, self.watermark <= 1]
        if isinstance(self.dp_size, z3.ArithRef):
            dom += [self.dp_size >= 1, self.dp_size <= MAX_WORLD_SIZE]
        if self.pmr_on:
            dom += [self.pmr >= 1, self.pmr <= MAX_COUNT]
        return dom

    def bound(self) -> Any:
        """max(max_delay_passes - 1, 0): the longest allowed run of delays."""
        return z3.If(self.max_delay_passes >= 1, self.max_delay_passes - 1, 0)


def sym_config(fam: Family, tag: str = "") -> SymConfig:
    """The family's configuration with every parameter of ``SYMBOLIC_PARAMETERS`` a Z3 variable
    (and dp_size too, with DP attention or when the scope covers every dp_size)."""
    symbolic = {
        "max_delay_passes": z3.Int(f"max_delay_passes{tag}"),
        "max_delay_ms": z3.Real(f"max_delay_ms{tag}"),
        "token_usage_low_watermark": (z3.Bool(f"watermark_on{tag}"), z3.Real(f"watermark{tag}")),
    }
    assert set(symbolic) == {name for name, _ in SYMBOLIC_PARAMETERS}
    watermark_on, watermark = symbolic["token_usage_low_watermark"]
    return SymConfig(
        profile=fam.profile,
        enable_dp_attention=fam.enable_dp_attention,
        dp_size=z3.Int(f"dp_size{tag}") if fam.enable_dp_attention or fam.dp_size is None else fam.dp_size,
        attn_tp_size=1,
        queue_on=fam.queue_ratio is not None,
        queue_ratio=fam.queue_ratio if fam.queue_ratio is not None else 0.0,
        max_delay_passes=symbolic["max_delay_passes"],
        max_delay_ms=symbolic["max_delay_ms"],
        watermark_on=watermark_on,
        watermark=watermark,
        pmr_on=fam.pmr_on,
        pmr=z3.Int(f"prefill_max_requests{tag}") if fam.pmr_on else 0,
    )


def count_domain(x: Any) -> Any:
    return z3.And(x >= 0, x <= MAX_COUNT)


def sym_view(c: SymConfig, tag: str) -> tuple[View, list]:
    """An aggregate view for any number of counted ranks, with what the rows guarantee."""
    n = c.dp_size if c.enable_dp_attention else z3.IntVal(1)
    v = View(
        n=n,
        num_prefillable=z3.Int(f"num_prefillable{tag}"),
        num_force=z3.Int(f"num_force{tag}"),
        running_batch=z3.Int(f"RB{tag}"),
        max_prefill_bs=z3.Int(f"PB{tag}"),
        waiting_queue_len=z3.Int(f"WQ{tag}"),
        timeout_any=z3.Bool(f"timeout_any{tag}"),
        mrr_max=z3.Int(f"mrr_max{tag}"),
    )
    return v, view_domain(v, c)


def view_domain(v: View, c: SymConfig) -> list:
    """Exactly what rows can give: ``aggregates`` proves every view of rows is in it, and
    every view in it is the view of some rows, for each rank layout."""
    return [
        v.n >= 1,
        0 <= v.num_force,
        v.num_force <= v.num_prefillable,  # a row's force flag implies its prefillable flag
        v.num_prefillable <= v.n,
        # force needs the watermark on and some usage (>= 0) strictly below it
        z3.Implies(v.num_force > 0, z3.And(c.watermark_on, c.watermark > 0)),
        count_domain(v.running_batch),
        count_domain(v.max_prefill_bs),
        count_domain(v.waiting_queue_len),
        count_domain(v.mrr_max),
    ]


@dataclass
class SymState:
    ctrl: Any  # Int: 0 idle, 1 delaying
    count: Any
    start: Any  # Real
    armed: Any  # Bool

    @staticmethod
    def fresh(tag: str) -> "SymState":
        return SymState(z3.Int(f"ctrl{tag}"), z3.Int(f"count{tag}"), z3.Real(f"start{tag}"), z3.Bool(f"armed{tag}"))

    @staticmethod
    def initial() -> "SymState":
        return SymState(z3.IntVal(CTRL[IDLE]), z3.IntVal(0), z3.RealVal(0), z3.BoolVal(True))

    def wellformed(self) -> Any:
        """What every reachable state satisfies (proved inductive by wait-accounting)."""
        return z3.And(
            z3.Or(self.ctrl == CTRL[IDLE], self.ctrl == CTRL[DELAYING]),
            z3.Implies(self.ctrl == CTRL[IDLE], self.count == 0),
            z3.Implies(self.ctrl == CTRL[DELAYING], self.count >= 1),
        )

    def local(self, now: Any, mrr: Any) -> Local:
        waiting = self.ctrl == CTRL[DELAYING]
        return Local(waiting, self.count, z3.If(waiting, self.start, now), self.armed, now, mrr)


@dataclass
class Outcome:
    """One pass (negotiate, then finalize) as terms: the decision and the next state."""

    reason: Any  # Int code, STUCK if no row fired
    allow: Any
    wfp: Any
    wait_seconds: Any
    next: SymState

    def decision_eq(self, other: "Outcome") -> Any:
        return z3.And(self.allow == other.allow, self.reason == other.reason, self.wfp == other.wfp)

    def shared_state_eq(self, other: "Outcome") -> Any:
        return z3.And(self.next.ctrl == other.next.ctrl, self.next.count == other.next.count, self.next.armed == other.next.armed)


def encode_pass(o: Z3Ops, c: SymConfig, table: Table, st: SymState, v: View, s: Local) -> Outcome:
    """The table's first-match semantics over both source states, as nested If terms."""
    out = Outcome(
        reason=z3.IntVal(STUCK),
        allow=z3.BoolVal(False),
        wfp=z3.IntVal(0),
        wait_seconds=z3.RealVal(0),
        next=SymState(st.ctrl, st.count, st.start, st.armed),
    )
    rows = [t for src in (IDLE, DELAYING) for t in table.by_source[src]]
    for t in reversed(rows):
        fire = z3.And(st.ctrl == CTRL[t.source], holds(t, o, c, v, s))
        e = Effect(t, o, c, v, s)
        nctrl = CTRL[DELAYING] if t.dest == DELAYING else CTRL[IDLE]  # released -> idle at finalize
        nstart = e.wait_start if e.wait_start is not None else z3.RealVal(0)
        out = Outcome(
            reason=z3.If(fire, REASON_CODE[t.reason], out.reason),
            allow=z3.If(fire, z3.BoolVal(e.allow), out.allow),
            wfp=z3.If(fire, e.wait_forward_passes, out.wfp),
            wait_seconds=z3.If(fire, e.wait_seconds, out.wait_seconds),
            next=SymState(
                z3.If(fire, nctrl, out.next.ctrl),
                z3.If(fire, e.delayed_count, out.next.count),
                z3.If(fire, nstart, out.next.start),
                z3.If(fire, o.And(e.skip_first_armed), out.next.armed),
            ),
        )
    return out
