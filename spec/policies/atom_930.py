"""ATOM's first PrefillDelayer (ROCm/ATOM #930), a port of SGLang's, read from ``atom/model_engine/prefill_delayer.py``.

What was read: ROCm/ATOM at commit 3fa7dc0a6f2a (#930, 2026-05-27): ``prefill_delayer.py``,
its call site at the top of ``Scheduler.schedule`` (``local_prefillable`` from
``_can_admit_head_prefill``, ``token_usage`` from ``_kv_usage``) and its defaults in
``atom/utils/envs.py`` (max_delay_passes 30, max_delay_ms 5000, no low watermark).
#930 has no tests of the delayer; #1611 replaced it (``spec/policies/atom_coalescer.py``).

Per tick every rank sends ``(prefillable, force, not prefillable)`` as int64 in
one ``all_reduce(MAX)``; then, in this order: any rank forcing (prefillable
with KV usage below the low watermark) allows; the first call allows (the
one-shot skip); all or none prefillable allows; a mixed tick delays while
``delayed_count < max_delay_passes`` and ``elapsed_ms < max_delay_ms``, where
``elapsed_ms`` is read on the rank's own ``time.perf_counter`` from the first
delay of the wait; else it allows (timed out). Only the clock is local, so
ranks whose clocks disagree about 5000 ms decide differently.

As a policy: the row is #930's three slots and a fourth, the wait's timeout on
the rank's own clock (``timeout_expired``, as SGLang 0.5.22 gathers it), which
only ``atom-930-hardened`` reads; the collective an all-reduce (MAX). Reasons
are SGLang's labels (``token_watermark``, ``""`` for none, ``no_wait`` /
``wait_success`` for all, ``delay``, ``wait_timeout``) and ``first_call`` for the
skip. Inferred: #930 reads the clock twice in a pass (the wait's start, then
``elapsed_ms``), so a first delay measures a few microseconds; the runtime
reads it once, so that first delay measures 0 ms, the same branch for every
max_delay_ms above a few microseconds.

SGLang's call sites give both inputs (``local_prefillable`` and the executor's
``token_usage``), so the SGLang plugin runs it: ``PREFILL_DELAYER_PROFILE=atom-930``.
A simulator needs nothing beyond what SGLang's delayer reads.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple, Optional

from ..config import Config, SymLayout, count_in, is_real, layout_params
from ..fields import BOOL, COUNT, MAX_COUNT, OPT_SECONDS, REASON, SECONDS, TEXT, USAGE, Field
from ..glossary import ARG, CONFIG, LOCAL, VIEW, Symbol
from ..monitors import Agreement, GroupRunBound, PassRule, RunBound
from ..policy import (
    ALL_REDUCE_MAX, PROVED, REFUTED, Agg, Feature, HostBinding, Invariant, Param, Policy, Profile, ProofHooks, SimBinding,
    TraceSchema,
)
from ..schema import LogSchema
from .sglang_delayer.variables import INPUTS as SGLANG_CALL
from ..table import FINALIZE, Table, Transition, negotiate_row, resolve
from .atom_common import SCALE, UPSTREAM_URL, LowWatermark, Scope, scaled_share, scope_of
from .dp_scope import RankFamily as Family, dp_size_range, rank_families

NAME = "atom-930"
SOURCE_COMMIT = "3fa7dc0a6f2ada0511ef8b1fda70035869d13b99"
DEFAULT_MAX_DELAY_MS = 5000.0

# ----- features and profiles -----------------------------------------------------------

GATHERED_TIMEOUT = "gathered-timeout"
FEATURES = (
    Feature(
        GATHERED_TIMEOUT,
        "the wait's timeout",
        before="each rank compares elapsed_ms on its own perf_counter with max_delay_ms after the all-reduce",
        after="each rank sends whether its wait has run max_delay_ms on its own clock, and every rank reads the MAX",
        why="ranks whose clocks straddle max_delay_ms decide differently on one reduced row: one prefills while the "
        "others delay, and their delayed_count parts ways",
        upstream=(930,),
        since=None,
        shows_in=("timed_out", "within_budget"),
        invariant="agreement",
    ),
)
PROFILES = (
    Profile("atom-930", frozenset(), (), "ATOM #930's PrefillDelayer (" + SOURCE_COMMIT[:8] + "): all_reduce(MAX) of 3 "
            "slots, the timeout on each rank's own clock"),
    Profile("atom-930-hardened", frozenset(f.id for f in FEATURES), (), "the same delayer with the timeout gathered"),
)
_PROFILE = {p.name: p for p in PROFILES}


def has(c: Any, feature: str) -> bool:
    if feature not in {f.id for f in FEATURES}:
        raise KeyError(f"unknown feature {feature!r}")
    return feature in c.features


# ----- configuration --------------------------------------------------------------------

PARAMETERS = (
    Param("max_delay_passes", 30, f"integer in [0, {MAX_COUNT}]", count_in(0, MAX_COUNT)),
    Param("token_usage_low_watermark", None, "None (off) or a number in [0, 1]",
          lambda v: v is None or (is_real(v) and math.isfinite(v) and 0.0 <= v <= 1.0)),
    Param("max_delay_ms", None, f"None (= {DEFAULT_MAX_DELAY_MS:g}) or a finite number > 0",
          lambda v: v is None or (is_real(v) and math.isfinite(v) and v > 0.0), server_arg="prefill_delayer_max_delay_ms"),
    *(p if p.name != "enable_dp_attention" else Param(p.name, True, p.valid, p.check, p.server_arg) for p in layout_params()),
    Param("profile", "atom-930", "one of " + ", ".join(_PROFILE), lambda v: isinstance(v, str) and v in _PROFILE),
)


@dataclass(frozen=True)
class Atom930Config(LowWatermark, Config):
    max_delay_passes: int = 30
    token_usage_low_watermark: Optional[float] = None
    max_delay_ms: Optional[float] = None
    dp_size: int = 1
    attn_tp_size: int = 1
    attn_cp_size: int = 1
    enable_dp_attention: bool = True
    profile: str = "atom-930"

    policy_name = NAME

    def __post_init__(self) -> None:
        self._validate(PARAMETERS)
        object.__setattr__(self, "max_delay_ms", DEFAULT_MAX_DELAY_MS if self.max_delay_ms is None else float(self.max_delay_ms))
        if self.token_usage_low_watermark is not None:
            object.__setattr__(self, "token_usage_low_watermark", float(self.token_usage_low_watermark))


# ----- variables, inputs, what the guards see ----------------------------------------------

IDLE, DELAYING, RELEASED = "idle", "delaying", "released"
STATES = (IDLE, DELAYING, RELEASED)
STATE_DOC = {
    IDLE: "no wait in progress (delayed_count = 0)",
    DELAYING: "a mixed tick's prefill is held back (delayed_count >= 1, the wait's start on this rank's clock)",
    RELEASED: "this tick allowed prefill; finalize returns to idle",
}


class State(NamedTuple):
    control: str = IDLE
    delayed_count: int = 0
    wait_start: Optional[float] = None  # _delay_start_ts, on this rank's clock
    skip_first: bool = True  # _skip_first


INIT = State()
STATE_FIELDS = (
    Field("delayed_count", COUNT, "consecutive delays of the wait (_delayed_count)", sym="count"),
    Field("wait_start", OPT_SECONDS, "this rank's clock at the wait's first delay (_delay_start_ts)", sym="start"),
    Field("skip_first", BOOL, "the one-shot skip (_skip_first)", sym="armed"),
)


def type_ok(o: Any, c: Any, st: Any) -> Any:
    idle, delaying = st.control == IDLE, st.control == DELAYING
    return o.And(o.Or(idle, delaying), o.Or(o.Not(idle), st.delayed_count == 0), o.Or(o.Not(delaying), st.delayed_count >= 1))


class Atom930Input(NamedTuple):
    """``should_allow_prefill``'s arguments."""

    local_prefillable: bool
    token_usage: float


INPUTS = (
    Field("local_prefillable", BOOL, "this rank has a new prefill it would admit this tick", trace="prefillable", sym="pre"),
    Field("token_usage", USAGE, "fraction of this rank's KV blocks in use", sym="tu"),
)


class Local(NamedTuple):
    waiting: Any
    delayed_count: Any
    wait_start: Any  # = now when no wait is in progress
    skip_first: Any
    now: Any


def local_for(o: Any, st: Any, now: Any, inp: Any) -> Local:
    waiting = st.control == DELAYING
    return Local(waiting, st.delayed_count, o.If(waiting, st.wait_start, now), st.skip_first, now)


def local_domain(o: Any, c: Any, st: Any, now: Any, inp: Any) -> list:
    return [st.delayed_count >= 0, st.delayed_count <= MAX_COUNT, o.Or(o.Not(st.control == DELAYING), st.wait_start <= now)]


# ----- the row and the view ----------------------------------------------------------------

ROW = (
    Field("prefillable", BOOL, "slot 0: this rank can prefill"),
    Field("force", BOOL, "slot 1: prefillable with KV usage below the low watermark"),
    Field("not_prefillable", BOOL, "slot 2: this rank cannot prefill"),
    Field("timeout_expired", BOOL, "slot 3 (ours): its wait has run max_delay_ms on its own clock"),
)


def local_force(o: Any, c: Any, prefillable: Any, token_usage: Any) -> Any:
    """This rank can prefill and its KV usage is below the low watermark (strict)."""
    return o.And(prefillable, c.low_on, token_usage < o.num(c.low))


def wait_expired(o: Any, c: Any, s: Any) -> Any:
    """A wait is in progress and this rank's own clock says max_delay_ms has passed since its first delay."""
    return o.And(s.waiting, (s.now - s.wait_start) * 1000.0 >= o.num(c.max_delay_ms))


def local_row(o: Any, c: Any, inp: Any, s: Local) -> list:
    pre = inp.local_prefillable
    return [o.b2i(pre), o.b2i(local_force(o, c, pre, inp.token_usage)), o.b2i(o.Not(pre)), o.b2i(wait_expired(o, c, s))]


class View(NamedTuple):
    n: Any
    any_prefillable: Any
    any_force: Any
    any_not_prefillable: Any
    any_expired: Any


VIEW_FOLD = (
    Agg("n", "count", None, doc="counted rows (the DP ranks)"),
    Agg("any_prefillable", "any", "prefillable"),
    Agg("any_force", "any", "force"),
    Agg("any_not_prefillable", "any", "not_prefillable"),
    Agg("any_expired", "any", "timeout_expired"),
)


def view_domain(o: Any, c: Any, v: View) -> list:
    return [
        v.n >= 1,
        o.Or(v.any_prefillable, v.any_not_prefillable),  # every row is one or the other
        o.Or(v.n >= 2, o.Not(o.And(v.any_prefillable, v.any_not_prefillable))),
        o.Or(o.Not(v.any_force), o.And(v.any_prefillable, c.low_on, o.num(c.low) > 0)),
    ]


# ----- guards --------------------------------------------------------------------------------


def force_any(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Some rank forces: prefillable with KV usage below the low watermark."""
    return v.any_force


def skip_armed(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The one-shot skip is still armed (the first call that is not forced)."""
    return s.skip_first


def uniform(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Status all or none: #930's prefillable_min == prefillable_max."""
    return o.If(v.any_prefillable, 1, 0) == o.If(v.any_not_prefillable, 0, 1)


def some_prefillable(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Some rank can prefill (of a uniform tick: all can)."""
    return v.any_prefillable


def timed_out(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The wait has run max_delay_ms: on this rank's clock (#930), or on some rank's (gathered-timeout)."""
    if has(c, GATHERED_TIMEOUT):
        return v.any_expired
    return (s.now - s.wait_start) * 1000.0 >= o.num(c.max_delay_ms)


def within_budget(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Another delay stays within max_delay_passes and max_delay_ms."""
    return o.And(s.delayed_count < c.max_delay_passes, o.Not(timed_out(o, c, v, s)))


TABLE_GUARDS = ("force_any", "skip_armed", "uniform", "some_prefillable", "within_budget")
GUARD_NAMES = ("local_force", "wait_expired", "force_any", "skip_armed", "uniform", "some_prefillable", "timed_out",
               "within_budget")

# ----- the table, its effects, the decision ----------------------------------------------------

REASONS = ("", "token_watermark", "first_call", "no_wait", "wait_success", "delay", "wait_timeout")
BUMP, CLEAR, CONSUME_SKIP = "bump", "clear", "consume_skip"
EFFECT_DOC = {
    BUMP: "delayed_count += 1; wait_start = wait_start if waiting else now",
    CLEAR: "delayed_count = 0; wait_start = none",
    CONSUME_SKIP: "skip_first = false",
}


def build_table(profile: str) -> Table:
    from ..registry import resolve_profile

    profile = resolve_profile(profile)
    rows: list[Transition] = []
    for src in (IDLE, DELAYING):

        def row(name: str, dest: str, guards: tuple[str, ...], reason: str, *effects: str, src: str = src) -> Transition:
            return negotiate_row(src, name, dest, guards, reason, *effects, allows=dest == RELEASED)

        rows += [
            row("force", RELEASED, ("force_any",), "token_watermark", CLEAR),
            row("skip", RELEASED, ("!force_any", "skip_armed"), "first_call", CLEAR, CONSUME_SKIP),
            row("none", RELEASED, ("!force_any", "!skip_armed", "uniform", "!some_prefillable"), "", CLEAR),
            row("all", RELEASED, ("!force_any", "!skip_armed", "uniform", "some_prefillable"),
                "wait_success" if src == DELAYING else "no_wait", CLEAR),
            row("mixed_delay", DELAYING, ("!force_any", "!skip_armed", "!uniform", "within_budget"), "delay", BUMP),
            row("mixed_timeout", RELEASED, ("!force_any", "!skip_armed", "!uniform", "!within_budget"), "wait_timeout", CLEAR),
        ]
    rows += [
        Transition("released_finalize", FINALIZE, RELEASED, IDLE, (), None),
        Transition("delaying_finalize", FINALIZE, DELAYING, DELAYING, (), None),
    ]
    return resolve(profile, STATES, rows, {name: globals()[name] for name in TABLE_GUARDS})


class Decision(NamedTuple):
    next_state: State
    input_estimation: str
    output_allow: bool
    output_reason: str
    wait_forward_passes: int = 0
    wait_seconds: float = 0.0


DECISION_FIELDS = (
    Field("input_estimation", TEXT, "all, none or mixed: the reduced status"),
    Field("output_allow", BOOL, "this rank may admit new prefills this tick", trace="allow"),
    Field("output_reason", REASON, "why", trace="reason"),
    Field("wait_forward_passes", COUNT, "the delays an allow ends"),
    Field("wait_seconds", SECONDS, "the wait an allow ends, on this rank's clock"),
)
DECISION_KEY = ("output_allow", "output_reason", "wait_forward_passes")


def status_name(o: Any, c: Any, v: Any) -> Any:
    return o.If(uniform(o, c, v, None), o.If(v.any_prefillable, "all", "none"), "mixed")


def decide(o: Any, c: Any, t: Transition, v: Any, s: Any) -> Decision:
    count, start = (s.delayed_count + 1, s.wait_start) if BUMP in t.effects else (0, None)
    skip = False if CONSUME_SKIP in t.effects else s.skip_first
    return Decision(State(t.dest, count, start, skip), status_name(o, c, v), t.allows, t.reason,  # type: ignore[arg-type]
                    s.delayed_count if t.allows else 0, s.now - s.wait_start if t.allows else 0.0)


# ----- properties ----------------------------------------------------------------------------


def delays(o: Any, c: Any, v: Any, d: Any) -> Any:
    return o.Not(d.output_allow)


def _passes(o: Any, c: Any) -> Any:
    return c.max_delay_passes


def _run_is_count(o: Any, c: Any, st: Any, run: Any) -> Any:
    return run == st.delayed_count


def _all(*refuted: str) -> dict[str, str]:
    return {p.name: (REFUTED if p.name in refuted else PROVED) for p in PROFILES}


INVARIANTS = (
    Invariant("guards-partition", "from each state, exactly one negotiate guard holds for every input", _all(), "guards-partition"),
    Invariant(
        "force-allow", "if some rank is prefillable below the low watermark, the tick allows with token_watermark", _all(),
        PassRule("force-allow", premise=lambda o, c, v, d: v.any_force,
                 claim=lambda o, c, v, d: o.And(d.output_allow, d.output_reason == "token_watermark"),
                 explain=lambda v, d: f"a rank forces, yet the tick decides allow={d.output_allow} reason={d.output_reason!r}"),
    ),
    Invariant(
        "none-allows", "if no rank is prefillable, the tick allows", _all(),
        PassRule("none-allows", premise=lambda o, c, v, d: o.Not(v.any_prefillable), claim=lambda o, c, v, d: d.output_allow,
                 explain=lambda v, d: "no rank is prefillable, yet the tick delays"),
    ),
    Invariant(
        "bounded-delay", "every run of consecutive delays is at most max_delay_passes ticks long", _all(),
        RunBound(
            "bounded-delay", counts=delays, limit=_passes, couple=_run_is_count,
            trace_text="rank {rank} delays {length} consecutive ticks (ticks {start}..{end}), more than max_delay_passes = {limit}",
            log_text="delays {run}+ consecutive ticks (from pass {start}), more than max_delay_passes = {limit}",
            log_text_done="delays {run} consecutive ticks (passes {start}..{end}), more than max_delay_passes = {limit}",
        ),
    ),
    Invariant(
        "agreement",
        "ranks that share state and the reduced row decide alike (allow, reason, delays ended) and stay in step, whatever "
        "their clocks",
        _all("atom-930"),
        Agreement("agreement"),
        "#930 reads the timeout on each rank's own perf_counter",
    ),
    Invariant(
        "agreement-equal-args", "agreement for ranks that pass equal arguments: only their clocks differ", _all("atom-930"),
        Agreement("agreement-equal-args", equal_args=True),
        "the clock is #930's only local input",
    ),
    Invariant(
        "joint-progress", "in every window of max_delay_passes + 1 consecutive ticks there is one on which no rank delays",
        _all("atom-930"),
        GroupRunBound("joint-progress", counts=delays, window=lambda o, c: c.max_delay_passes + 1, couple=_run_is_count,
                      window_text="max_delay_passes + 1", who="delays", some="a delaying rank"),
    ),
    Invariant("aggregate-view", "for any number of DP ranks, the reduced flags are exactly what the ranks' slots give",
              _all(), "aggregate-view"),
    Invariant("refinement", "the table equals an independent encoding of #930's should_allow_prefill (and of the fix)",
              _all(), "refinement"),
)


def reference_pass(o: Any, c: Any, st: Any, v: Any, now: Any, inp: Any) -> tuple[dict, tuple]:
    """#930's should_allow_prefill, restated in its own order; next state as (control code, count, start, skip)."""
    codes = {r: i for i, r in enumerate(REASONS)}
    waiting = st.control == DELAYING
    count = o.If(waiting, st.delayed_count, 0)
    start = o.If(waiting, st.wait_start, now)
    prefillable_max = o.If(v.any_prefillable, 1, 0)
    prefillable_min = o.If(v.any_not_prefillable, 0, 1)
    elapsed_expired = v.any_expired if GATHERED_TIMEOUT in c.features else (now - start) * 1000 >= o.num(c.max_delay_ms)

    def allow(reason: Any, skip: Any) -> tuple:
        return (reason, True, count, 0, 0, o.RealVal(0), skip)

    delay = (codes["delay"], False, 0, 1, count + 1, start, st.skip_first)
    chain = [
        (v.any_force, allow(codes["token_watermark"], st.skip_first)),
        (st.skip_first, allow(codes["first_call"], o.BoolVal(False))),
        (prefillable_min == prefillable_max,
         allow(o.If(v.any_prefillable, o.If(waiting, codes["wait_success"], codes["no_wait"]), codes[""]), st.skip_first)),
        (o.And(count < c.max_delay_passes, o.Not(elapsed_expired)), delay),
    ]
    out = allow(codes["wait_timeout"], st.skip_first)
    for cond, result in reversed(chain):
        out = tuple(o.If(cond, a, b) for a, b in zip(result, out))
    reason, ok, wfp, control, ncount, nstart, skip = out
    return {"output_reason": reason, "output_allow": ok, "wait_forward_passes": wfp}, (control, ncount, nstart, skip)


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    force = o.And(inp.local_prefillable, c.low_on, inp.token_usage < o.num(c.low))
    expired = o.And(s.waiting, (s.now - s.wait_start) * 1000 >= o.num(c.max_delay_ms))
    return [o.If(inp.local_prefillable, 1, 0), o.If(force, 1, 0), o.If(inp.local_prefillable, 0, 1), o.If(expired, 1, 0)]


# ----- what the proofs range over ------------------------------------------------------------


@dataclass
class SymConfig(SymLayout):
    profile: str
    dp_size: Any
    max_delay_passes: Any
    max_delay_ms: Any
    low_on: Any
    low: Any
    enable_dp_attention: bool = True
    attn_tp_size: int = 1
    attn_cp_size: int = 1


def sym_config(o: Any, fam: Family, tag: str = "") -> SymConfig:
    return SymConfig(fam.profile, o.Int(f"dp_size{tag}") if fam.dp_size is None else fam.dp_size,
                     o.Int(f"max_delay_passes{tag}"), o.Real(f"max_delay_ms{tag}"), o.Bool(f"low_on{tag}"), o.Real(f"low{tag}"))


def config_domain(o: Any, c: SymConfig) -> list:
    dom = [c.max_delay_passes >= 0, c.max_delay_passes <= MAX_COUNT, c.max_delay_ms > 0, c.low >= 0, c.low <= 1]
    if not isinstance(c.dp_size, int):
        dom += [c.dp_size >= 1]
    return dom


def witness_row(o: Any, c: Any, v: Any) -> tuple:
    usage = o.If(v.any_force, o.RealVal(0), o.If(c.low_on, o.num(c.low), o.RealVal(0)))
    now = o.If(v.any_expired, c.max_delay_ms / 1000, 0)
    return (Atom930Input(v.any_prefillable, usage),
            Local(v.any_expired, o.IntVal(1), o.RealVal(0), o.BoolVal(False), now))


def split_view(o: Any, v: Any) -> Any:
    """The view of the rows besides the witness's: all of them not prefillable when some is, else as the view."""
    return v._replace(n=v.n - 1, any_prefillable=o.And(v.any_prefillable, o.Not(v.any_not_prefillable)),
                      any_force=o.And(v.any_force, o.Not(v.any_not_prefillable)))


def idle_row(o: Any) -> tuple:
    return (Atom930Input(o.BoolVal(False), o.RealVal(0)),
            Local(o.BoolVal(False), o.IntVal(0), o.RealVal(0), o.BoolVal(False), o.RealVal(0)))


def layout_witness(o: Any, c: Any, v: Any, group: int, counted: bool, groups: int) -> tuple:
    if not counted:
        return idle_row(o)
    for _ in range(group):
        v = split_view(o, v)
    return witness_row(o, c, v)


def bmc_config(o: Any, c: SymConfig) -> tuple[list, Any]:
    ms, (wm, in_wm) = o.Int("max_delay_ms_int"), scaled_share(o, "watermark", c.low)
    assertions = [*config_domain(o, c), c.max_delay_passes >= 2, c.max_delay_passes <= 10, ms >= 1, ms <= 100_000,
                  c.max_delay_ms == o.ToReal(ms), *in_wm]

    def trace_config(val: Any, ranks: int) -> dict:
        return {"max_delay_passes": val(c.max_delay_passes),
                "token_usage_low_watermark": val(wm) / SCALE if val(c.low_on) else None,
                "max_delay_ms": float(val(ms)), "dp_size": ranks, "attn_tp_size": 1, "attn_cp_size": 1,
                "enable_dp_attention": True}

    return assertions, trace_config


def _settings(c: Any) -> str:
    """#930's constructor line (plus the profile)."""
    return (f"PrefillDelayer initialized: dp_size={c.dp_size} max_delay_passes={c.max_delay_passes} "
            f"max_delay_ms={c.max_delay_ms} watermark={c.token_usage_low_watermark} profile={c.profile}")


def _host_inputs(local_prefillable: Any, token_usage: Any, *ignored: Any) -> tuple:
    """SGLang's call (prefillable, the executor's token usage, then counts #930 does not read) as #930's inputs."""
    return local_prefillable, token_usage


SYMBOLS = (
    Symbol(VIEW, "n", "n", "counted rows: the DP ranks"),
    Symbol(VIEW, "any_prefillable", "any_prefillable", "MAX of slot 0: some rank can prefill"),
    Symbol(VIEW, "any_force", "force_max", "MAX of slot 1: some rank forces"),
    Symbol(VIEW, "any_not_prefillable", "any_not_prefillable", "MAX of slot 2: some rank cannot prefill"),
    Symbol(VIEW, "any_expired", "any_expired", "MAX of slot 3: some rank's wait has run max_delay_ms (gathered-timeout)"),
    Symbol(LOCAL, "waiting", "waiting", "a wait is in progress (control state delaying)"),
    Symbol(LOCAL, "delayed_count", "delayed_count", "consecutive delays of the wait"),
    Symbol(LOCAL, "wait_start", "delay_start_ts", "this rank's clock at the wait's first delay (= now when none)"),
    Symbol(LOCAL, "skip_first", "skip_first", "the one-shot skip, armed at construction"),
    Symbol(LOCAL, "now", "now", "this rank's clock reading, seconds"),
    Symbol(CONFIG, "low_on", "watermark_set", "token_usage_low_watermark is set", flag=True),
    Symbol(CONFIG, "low", "W", "token_usage_low_watermark"),
    Symbol(CONFIG, "max_delay_passes", "max_delay_passes", "max_delay_passes"),
    Symbol(CONFIG, "max_delay_ms", "max_delay_ms", "max_delay_ms"),
    Symbol(ARG, "prefillable", "prefillable", "this rank's local_prefillable argument"),
    Symbol(ARG, "token_usage", "token_usage", "this rank's KV usage"),
)

POLICY = Policy(
    name=NAME,
    title="ATOM's first prefill delayer (#930)",
    summary="delays a mixed tick up to max_delay_passes ticks or max_delay_ms on the rank's own clock, from one "
    "all_reduce(MAX) of three flags; ROCm/ATOM #930 (" + SOURCE_COMMIT[:8] + ")",
    source="atom/model_engine/prefill_delayer.py, scheduler.py and utils/envs.py of ROCm/ATOM at " + SOURCE_COMMIT[:12] + " (#930)",
    upstream_url=UPSTREAM_URL,
    config_cls=Atom930Config,
    params=PARAMETERS,
    profiles=PROFILES,
    features=FEATURES,
    default_profile="atom-930",
    release_aliases={},
    states=STATES,
    state_doc=STATE_DOC,
    state_cls=State,
    state_fields=STATE_FIELDS,
    init=INIT,
    type_ok=type_ok,
    shared=("control", "delayed_count", "skip_first"),
    inputs=INPUTS,
    input_cls=Atom930Input,
    local_cls=Local,
    local_for=local_for,
    local_inputs=(),
    local_domain=local_domain,
    row=ROW,
    local_row=local_row,
    view=VIEW_FOLD,
    view_cls=View,
    view_domain=view_domain,
    guards=sys.modules[__name__],
    table_guards=TABLE_GUARDS,
    reasons=REASONS,
    effect_doc=EFFECT_DOC,
    keep_doc="unchanged",
    build_table=build_table,
    decision_cls=Decision,
    decision_fields=DECISION_FIELDS,
    decide=decide,
    decision_key=DECISION_KEY,
    invariants=INVARIANTS,
    symbols=SYMBOLS,
    trace=TraceSchema(inputs=INPUTS, expect=(DECISION_FIELDS[1], DECISION_FIELDS[2], DECISION_FIELDS[3]),
                      config=("max_delay_passes", "token_usage_low_watermark", "max_delay_ms", "dp_size", "attn_tp_size",
                              "attn_cp_size", "enable_dp_attention")),
    log=LogSchema(
        readings=(("local_prefillable", "prefillable"), ("token_usage", "token_usage")),  # no own row: every input read
        inputs_from_row=lambda o, row, r: Atom930Input(r["prefillable"], r["token_usage"]),
        set_flags=("skip_first",),
        reason_order=("delay", "no_wait", "wait_success", "wait_timeout", "token_watermark", "", "first_call"),
        mixed=lambda v, d: d.input_estimation == "mixed",
    ),
    proof=ProofHooks(
        outputs=("output_reason", "output_allow", "wait_forward_passes"),
        families=rank_families,
        scope_ranges=lambda fams: f"{dp_size_range(fams)}, max_delay_passes any >= 0, max_delay_ms any > 0, "
        "token_usage_low_watermark off or any in [0, 1]",
        layout_range="any number of DP ranks (one reduced row)",
        default_scope=Scope(),
        scope_of=scope_of,
        scope_options=(),
        sym_config=sym_config,
        config_domain=config_domain,
        concrete=lambda fam, scope: Family(fam.profile, fam.dp_size if fam.dp_size is not None else 4),
        witness_row=witness_row,
        split_view=split_view,
        idle_row=idle_row,
        layout_witness=layout_witness,
        reference=reference_pass,
        reference_row=reference_row,
        bmc_config=bmc_config,
        bmc_soft=lambda o, c: [(o.Not(c.low_on), 2)],
        bmc_search={"agreement": (lambda f: True, None), "agreement-equal-args": (lambda f: True, None),
                    "joint-progress": (lambda f: True, None)},
    ),
    host=HostBinding(
        call=SGLANG_CALL,  # SGLang's own call: its delayer's inputs
        inputs=_host_inputs,
        idle_call={"local_prefillable": False},
        metrics=lambda d: (d.wait_forward_passes, d.wait_seconds, d.input_estimation),
        flags={"skip_first_delayer": "skip_first"},
        settings=_settings,
    ),
    # the simulator runs it as the SGLang plugin does: at the prefill adder's call sites (a chunk goes on)
    sim=SimBinding(call_site="admission", inputs=lambda f: Atom930Input(True, f.token_usage),
                   idle_inputs=lambda f: Atom930Input(False, f.token_usage),
                   outcome=attrgetter("input_estimation", "output_allow", "output_reason", "wait_forward_passes"),  # a C call
                   colours={"no_wait": "#2ca02c", "wait_success": "#1f77b4", "delay": "#d62728", "wait_timeout": "#ff7f0e",
                            "token_watermark": "#9467bd", "first_call": "#17becf"}),
    extras={"docs": {
        "replayed_by": "; ATOM's code is not on the package registry to run it",
        "engine": "ATOM",
        "no_features": "none: ATOM's code",
        "releases_intro": f"ATOM publishes no releases to the package registry; the profile is ROCm/ATOM #930 at "
        f"`{SOURCE_COMMIT[:12]}`. The collective is #930's `all_reduce(MAX)` of int64 slots.",
    }},
    guard_names=GUARD_NAMES,
    collective=ALL_REDUCE_MAX,
)
