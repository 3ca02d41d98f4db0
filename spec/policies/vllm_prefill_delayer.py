"""vLLM #48246's PrefillDelayer, a port of SGLang's delayer to vLLM's DP engine (closed, not merged).

What was read: vllm-project/vllm pull request #48246, "[Feature] PrefillDelayer for better
DPA scheduling" (simondanielsson, opened 2026-07-10, closed unmerged), and the issue it fixes,
#48106 (2026-07-09, which points at SGLang #14201 and ATOM's delayer as the references). Its
description says it is "adopted from SGL/ATOM" and tests it by benchmarks only (DeepSeek-V3 at
DP 8 on MI300: `vllm bench serve` sweeps and a GSM8k non-regression); it names no unit test. Its
diff is not public: no stored copy of the PR's branch exists, and the author's fork
(simondanielsson/vllm, newest commit 17918d781 of 2026-07-02) predates it and has no delayer.
#54564, the same title by the same author (2026-08-31, closed), has an empty description. What
the PR does is therefore modelled from what is known of it: a count of prefillable ranks from
the DP sync, and a mixed pass held up to 30 passes or 5000 ms on the rank's own clock (ATOM
#930's defaults, ``spec/policies/atom_930.py``).

Per step every DP rank adds whether it can prefill (a waiting request it would admit) to vLLM's
DP all-reduce (SUM), so each rank reads the number of prefillable ranks; then, in this order:
none or all prefillable allows (``""``, and ``no_wait`` or ``wait_success`` after a wait); a
mixed step delays while ``delayed_count < max_delay_passes`` and ``elapsed_ms < max_delay_ms``,
``elapsed_ms`` read on the rank's own clock from the wait's first delay; else it allows
(``wait_timeout``). Only the clock is local, so ranks whose clocks disagree about 5000 ms
decide differently on the same count, and their wait counts part ways.

Inferred (none of it is stated, each is what a port of SGLang's or #930's delayer keeps or
drops): no KV low watermark (the description names none; SGLang's is off by default, so at the
defaults nothing changes) and so no forced allow; no first-call skip (#930's was ATOM's); the
count is synced on every step that decides (vLLM's own ``sync_dp_state`` otherwise runs only on
every ``dp_sync_interval``-th step, and a count from an older step would not be this step's);
the clock is read once per step, so a first delay measures 0 ms; the verdict holds back new
admissions only, a chunked prefill already running goes on (SGLang's delayer gates the waiting
queue, not the running one); the reasons are SGLang's labels.

As a policy: the row is the prefillable bit and a second slot, the wait's timeout on the rank's
own clock (``timeout_expired``), which only ``vllm-48246-hardened`` reads (as SGLang 0.5.22 gathers
its own); the collective an all-reduce (SUM). The catalogue adds ``all-allows``: with every rank
prefillable, the step allows, the delayer's must-fire.

SGLang's call sites give its one input (``local_prefillable``), so the SGLang plugin runs it too:
``PREFILL_DELAYER_PROFILE=vllm-48246``. The simulator consults it at the prefill adder's call sites.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, NamedTuple, Optional

from ..config import Config, SymLayout, count_in, is_real, layout_params
from ..fields import BOOL, COUNT, MAX_COUNT, OPT_SECONDS, REASON, SECONDS, TEXT, Field
from ..glossary import ARG, CONFIG, LOCAL, VIEW, Symbol
from ..monitors import Agreement, GroupRunBound, PassRule, RunBound
from ..policy import (
    ALL_REDUCE_SUM, PROVED, REFUTED, Agg, Feature, HostBinding, Invariant, Param, Policy, Profile, ProofHooks, SimBinding,
    TraceSchema,
)
from ..schema import LogSchema
from ..table import FINALIZE, Table, Transition, negotiate_row, resolve
from .dp_scope import RankFamily, Scope, dp_size_range, rank_families
from .sglang_delayer.variables import INPUTS as SGLANG_CALL

NAME = "vllm-prefill-delayer"
PR = 48246
RELEASE = "vllm-48246"
HARDENED = "vllm-48246-hardened"
DEFAULT_MAX_DELAY_MS = 5000.0

# ----- features and profiles -----------------------------------------------------------

GATHERED_TIMEOUT = "gathered-timeout"
FEATURES = (
    Feature(
        GATHERED_TIMEOUT,
        "the wait's timeout",
        before="each rank compares elapsed_ms on its own clock with max_delay_ms after the all-reduce",
        after="each rank adds whether its wait has run max_delay_ms on its own clock, and every rank reads "
        "whether any has",
        why="ranks whose clocks straddle max_delay_ms decide differently on one count: one prefills while the "
        "others delay, and their delayed_count parts ways",
        upstream=(PR,),
        since=None,
        shows_in=("timed_out", "within_budget"),
        invariant="agreement",
    ),
)
PROFILES = (
    Profile(RELEASE, frozenset(), (), f"vLLM #{PR}'s PrefillDelayer as its description gives it: the count of "
            "prefillable ranks from the DP all-reduce, the timeout on each rank's own clock"),
    Profile(HARDENED, frozenset(f.id for f in FEATURES), (), "the same delayer with the timeout reduced too"),
)
_PROFILE = {p.name: p for p in PROFILES}


def has(c: Any, feature: str) -> bool:
    if feature not in {f.id for f in FEATURES}:
        raise KeyError(f"unknown feature {feature!r}")
    return feature in c.features


# ----- configuration --------------------------------------------------------------------

PARAMETERS = (
    Param("max_delay_passes", 30, f"integer in [0, {MAX_COUNT}]", count_in(0, MAX_COUNT)),
    Param("max_delay_ms", None, f"None (= {DEFAULT_MAX_DELAY_MS:g}) or a finite number > 0",
          lambda v: v is None or (is_real(v) and math.isfinite(v) and v > 0.0), server_arg="prefill_delayer_max_delay_ms"),
    *(p if p.name != "enable_dp_attention" else Param(p.name, True, p.valid, p.check, p.server_arg) for p in layout_params()),
    Param("profile", RELEASE, "one of " + ", ".join(_PROFILE), lambda v: isinstance(v, str) and v in _PROFILE),
)


@dataclass(frozen=True)
class VllmDelayerConfig(Config):
    max_delay_passes: int = 30
    max_delay_ms: Optional[float] = None
    dp_size: int = 1
    attn_tp_size: int = 1
    attn_cp_size: int = 1
    enable_dp_attention: bool = True
    profile: str = RELEASE

    policy_name = NAME

    def __post_init__(self) -> None:
        self._validate(PARAMETERS)
        object.__setattr__(self, "max_delay_ms", DEFAULT_MAX_DELAY_MS if self.max_delay_ms is None else float(self.max_delay_ms))


# ----- variables, inputs, what the guards see ----------------------------------------------

IDLE, DELAYING, RELEASED = "idle", "delaying", "released"
STATES = (IDLE, DELAYING, RELEASED)
STATE_DOC = {
    IDLE: "no wait in progress (delayed_count = 0)",
    DELAYING: "a mixed step's prefill is held back (delayed_count >= 1, the wait's start on this rank's clock)",
    RELEASED: "this step allowed prefill; finalize returns to idle",
}


class State(NamedTuple):
    control: str = IDLE
    delayed_count: int = 0
    wait_start: Optional[float] = None  # the wait's first delay, on this rank's clock


INIT = State()
STATE_FIELDS = (
    Field("delayed_count", COUNT, "consecutive delays of the wait", sym="count"),
    Field("wait_start", OPT_SECONDS, "this rank's clock at the wait's first delay", sym="start"),
)


def type_ok(o: Any, c: Any, st: Any) -> Any:
    idle, delaying = st.control == IDLE, st.control == DELAYING
    return o.And(o.Or(idle, delaying), o.Or(o.Not(idle), st.delayed_count == 0), o.Or(o.Not(delaying), st.delayed_count >= 1))


class VllmDelayerInput(NamedTuple):
    """What the scheduler passes each step."""

    local_prefillable: bool


INPUTS = (
    Field("local_prefillable", BOOL, "this rank has a waiting request it would admit this step", trace="prefillable",
          sym="pre"),
)


class Local(NamedTuple):
    waiting: Any
    delayed_count: Any
    wait_start: Any  # = now when no wait is in progress
    now: Any


def local_for(o: Any, st: Any, now: Any, inp: Any) -> Local:
    waiting = st.control == DELAYING
    return Local(waiting, st.delayed_count, o.If(waiting, st.wait_start, now), now)


def local_domain(o: Any, c: Any, st: Any, now: Any, inp: Any) -> list:
    return [st.delayed_count >= 0, st.delayed_count <= MAX_COUNT, o.Or(o.Not(st.control == DELAYING), st.wait_start <= now)]


# ----- the row and the view ----------------------------------------------------------------

ROW = (
    Field("prefillable", BOOL, "this rank can prefill (summed: the number of prefillable ranks)"),
    Field("timeout_expired", BOOL, "(ours) its wait has run max_delay_ms on its own clock"),
)


def wait_expired(o: Any, c: Any, s: Any) -> Any:
    """A wait is in progress and this rank's own clock says max_delay_ms has passed since its first delay."""
    return o.And(s.waiting, (s.now - s.wait_start) * 1000.0 >= o.num(c.max_delay_ms))


def local_row(o: Any, c: Any, inp: Any, s: Local) -> list:
    return [o.b2i(inp.local_prefillable), o.b2i(wait_expired(o, c, s))]


class View(NamedTuple):
    n: Any
    num_prefillable: Any
    any_expired: Any


VIEW_FOLD = (
    Agg("n", "count", None, doc="counted rows (the DP ranks)"),
    Agg("num_prefillable", "sum", "prefillable"),
    Agg("any_expired", "any", "timeout_expired"),
)


def view_domain(o: Any, c: Any, v: View) -> list:
    return [v.n >= 1, v.num_prefillable >= 0, v.num_prefillable <= v.n]


# ----- guards --------------------------------------------------------------------------------


def uniform(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Status all or none: no rank, or every rank, is prefillable."""
    return o.Or(v.num_prefillable == 0, v.num_prefillable == v.n)


def some_prefillable(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Some rank can prefill (of a uniform step: all can)."""
    return v.num_prefillable > 0


def timed_out(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The wait has run max_delay_ms: on this rank's clock (#48246), or on some rank's (gathered-timeout)."""
    if has(c, GATHERED_TIMEOUT):
        return v.any_expired
    return (s.now - s.wait_start) * 1000.0 >= o.num(c.max_delay_ms)


def within_budget(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Another delay stays within max_delay_passes and max_delay_ms."""
    return o.And(s.delayed_count < c.max_delay_passes, o.Not(timed_out(o, c, v, s)))


TABLE_GUARDS = ("uniform", "some_prefillable", "within_budget")
GUARD_NAMES = ("wait_expired", "uniform", "some_prefillable", "timed_out", "within_budget")

# ----- the table, its effects, the decision ----------------------------------------------------

REASONS = ("", "no_wait", "wait_success", "delay", "wait_timeout")
BUMP, CLEAR = "bump", "clear"
EFFECT_DOC = {
    BUMP: "delayed_count += 1; wait_start = wait_start if waiting else now",
    CLEAR: "delayed_count = 0; wait_start = none",
}


def build_table(profile: str) -> Table:
    from ..registry import resolve_profile

    profile = resolve_profile(profile)
    rows: list[Transition] = []
    for src in (IDLE, DELAYING):

        def row(name: str, dest: str, guards: tuple[str, ...], reason: str, *effects: str, src: str = src) -> Transition:
            return negotiate_row(src, name, dest, guards, reason, *effects, allows=dest == RELEASED)

        rows += [
            row("none", RELEASED, ("uniform", "!some_prefillable"), "", CLEAR),
            row("all", RELEASED, ("uniform", "some_prefillable"), "wait_success" if src == DELAYING else "no_wait", CLEAR),
            row("mixed_delay", DELAYING, ("!uniform", "within_budget"), "delay", BUMP),
            row("mixed_timeout", RELEASED, ("!uniform", "!within_budget"), "wait_timeout", CLEAR),
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
    Field("input_estimation", TEXT, "all, none or mixed: the status the count gives"),
    Field("output_allow", BOOL, "this rank may admit new prefills this step", trace="allow"),
    Field("output_reason", REASON, "why", trace="reason"),
    Field("wait_forward_passes", COUNT, "the delays an allow ends"),
    Field("wait_seconds", SECONDS, "the wait an allow ends, on this rank's clock"),
)
DECISION_KEY = ("output_allow", "output_reason", "wait_forward_passes")


def status_name(o: Any, c: Any, v: Any) -> Any:
    return o.If(uniform(o, c, v, None), o.If(some_prefillable(o, c, v, None), "all", "none"), "mixed")


def decide(o: Any, c: Any, t: Transition, v: Any, s: Any) -> Decision:
    count, start = (s.delayed_count + 1, s.wait_start) if BUMP in t.effects else (0, None)
    return Decision(State(t.dest, count, start), status_name(o, c, v), t.allows, t.reason,  # type: ignore[arg-type]
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
        "all-allows", "if every rank is prefillable, the step allows (no_wait, or wait_success after a wait)", _all(),
        PassRule("all-allows", premise=lambda o, c, v, d: v.num_prefillable == v.n,
                 claim=lambda o, c, v, d: o.And(d.output_allow, o.Or(d.output_reason == "no_wait",
                                                                     d.output_reason == "wait_success")),
                 explain=lambda v, d: f"every rank is prefillable, yet the step decides allow={d.output_allow} "
                 f"reason={d.output_reason!r}"),
    ),
    Invariant(
        "none-allows", "if no rank is prefillable, the step allows", _all(),
        PassRule("none-allows", premise=lambda o, c, v, d: v.num_prefillable == 0, claim=lambda o, c, v, d: d.output_allow,
                 explain=lambda v, d: "no rank is prefillable, yet the step delays"),
    ),
    Invariant(
        "bounded-delay", "every run of consecutive delays is at most max_delay_passes steps long", _all(),
        RunBound(
            "bounded-delay", counts=delays, limit=_passes, couple=_run_is_count,
            trace_text="rank {rank} delays {length} consecutive steps (steps {start}..{end}), more than max_delay_passes = {limit}",
            log_text="delays {run}+ consecutive steps (from pass {start}), more than max_delay_passes = {limit}",
            log_text_done="delays {run} consecutive steps (passes {start}..{end}), more than max_delay_passes = {limit}",
        ),
    ),
    Invariant(
        "agreement",
        "ranks that share state and the reduced count decide alike (allow, reason, delays ended) and stay in step, "
        "whatever their clocks",
        _all(RELEASE),
        Agreement("agreement"),
        f"#{PR} reads the timeout on each rank's own clock",
    ),
    Invariant(
        "agreement-equal-args", "agreement for ranks that pass equal arguments: only their clocks differ", _all(RELEASE),
        Agreement("agreement-equal-args", equal_args=True),
        "the clock is the delayer's only local input",
    ),
    Invariant(
        "joint-progress", "in every window of max_delay_passes + 1 consecutive steps there is one on which no rank delays",
        _all(RELEASE),
        GroupRunBound("joint-progress", counts=delays, window=lambda o, c: c.max_delay_passes + 1, couple=_run_is_count,
                      window_text="max_delay_passes + 1", who="delays", some="a delaying rank"),
    ),
    Invariant("aggregate-view", "for any number of DP ranks, the reduced count and flag are exactly what the ranks' "
              "slots give", _all(), "aggregate-view"),
    Invariant("refinement", f"the table equals an independent encoding of #{PR}'s delayer as described (and of the fix)",
              _all(), "refinement"),
)


def reference_pass(o: Any, c: Any, st: Any, v: Any, now: Any, inp: Any) -> tuple[dict, tuple]:
    """SGLang's negotiation over the count, in its own order; next state (after finalize) as (control code, count, start)."""
    codes = {r: i for i, r in enumerate(REASONS)}
    waiting = st.control == DELAYING
    count = o.If(waiting, st.delayed_count, 0)
    start = o.If(waiting, st.wait_start, now)
    status = o.If(v.num_prefillable == v.n, 2, o.If(v.num_prefillable == 0, 0, 1))  # 0 none, 1 mixed, 2 all
    expired = v.any_expired if GATHERED_TIMEOUT in c.features else (now - start) * 1000 >= o.num(c.max_delay_ms)
    allow_reason = o.If(status == 2, o.If(count > 0, codes["wait_success"], codes["no_wait"]),
                        o.If(status == 0, codes[""], codes["wait_timeout"]))
    delay = o.And(status == 1, count < c.max_delay_passes, o.Not(expired))
    reason = o.If(delay, codes["delay"], allow_reason)
    return ({"output_reason": reason, "output_allow": o.Not(delay), "wait_forward_passes": o.If(delay, 0, count)},
            (o.If(delay, 1, 0), o.If(delay, count + 1, 0), o.If(delay, start, o.RealVal(0))))


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    expired = o.And(s.waiting, (s.now - s.wait_start) * 1000 >= o.num(c.max_delay_ms))
    return [o.If(inp.local_prefillable, 1, 0), o.If(expired, 1, 0)]


# ----- what the proofs range over ------------------------------------------------------------


@dataclass
class SymConfig(SymLayout):
    profile: str
    dp_size: Any
    max_delay_passes: Any
    max_delay_ms: Any
    enable_dp_attention: bool = True
    attn_tp_size: int = 1
    attn_cp_size: int = 1


def sym_config(o: Any, fam: RankFamily, tag: str = "") -> SymConfig:
    return SymConfig(fam.profile, o.Int(f"dp_size{tag}") if fam.dp_size is None else fam.dp_size,
                     o.Int(f"max_delay_passes{tag}"), o.Real(f"max_delay_ms{tag}"))


def config_domain(o: Any, c: SymConfig) -> list:
    dom = [c.max_delay_passes >= 0, c.max_delay_passes <= MAX_COUNT, c.max_delay_ms > 0]
    if not isinstance(c.dp_size, int):
        dom += [c.dp_size >= 1]
    return dom


def witness_row(o: Any, c: Any, v: Any) -> tuple:
    now = o.If(v.any_expired, c.max_delay_ms / 1000, 0)
    return VllmDelayerInput(v.num_prefillable >= 1), Local(v.any_expired, o.IntVal(1), o.RealVal(0), now)


def split_view(o: Any, v: Any) -> Any:
    """The view of the rows besides the witness's: one prefillable row fewer, the flag as it was."""
    return v._replace(n=v.n - 1, num_prefillable=v.num_prefillable - o.If(v.num_prefillable >= 1, 1, 0))


def idle_row(o: Any) -> tuple:
    return VllmDelayerInput(o.BoolVal(False)), Local(o.BoolVal(False), o.IntVal(0), o.RealVal(0), o.RealVal(0))


def layout_witness(o: Any, c: Any, v: Any, group: int, counted: bool, groups: int) -> tuple:
    if not counted:
        return idle_row(o)
    for _ in range(group):
        v = split_view(o, v)
    return witness_row(o, c, v)


def bmc_config(o: Any, c: SymConfig) -> tuple[list, Any]:
    ms = o.Int("max_delay_ms_int")
    assertions = [*config_domain(o, c), c.max_delay_passes >= 2, c.max_delay_passes <= 10, ms >= 1, ms <= 100_000,
                  c.max_delay_ms == o.ToReal(ms)]

    def trace_config(val: Any, ranks: int) -> dict:
        return {"max_delay_passes": val(c.max_delay_passes), "max_delay_ms": float(val(ms)), "dp_size": ranks,
                "attn_tp_size": 1, "attn_cp_size": 1, "enable_dp_attention": True}

    return assertions, trace_config


def _settings(c: Any) -> str:
    return (f"PrefillDelayer initialized: dp_size={c.dp_size} max_delay_passes={c.max_delay_passes} "
            f"max_delay_ms={c.max_delay_ms} profile={c.profile}")


def _host_inputs(local_prefillable: Any, *ignored: Any) -> tuple:
    """SGLang's call (prefillable, then what the port does not read) as the delayer's one input."""
    return (local_prefillable,)


SYMBOLS = (
    Symbol(VIEW, "n", "n", "counted rows: the DP ranks"),
    Symbol(VIEW, "num_prefillable", "num_prefillable", "SUM of slot 0: the number of prefillable ranks"),
    Symbol(VIEW, "any_expired", "any_expired", "SUM of slot 1 > 0: some rank's wait has run max_delay_ms (gathered-timeout)"),
    Symbol(LOCAL, "waiting", "waiting", "a wait is in progress (control state delaying)"),
    Symbol(LOCAL, "delayed_count", "delayed_count", "consecutive delays of the wait"),
    Symbol(LOCAL, "wait_start", "wait_start", "this rank's clock at the wait's first delay (= now when none)"),
    Symbol(LOCAL, "now", "now", "this rank's clock reading, seconds"),
    Symbol(CONFIG, "max_delay_passes", "max_delay_passes", "max_delay_passes"),
    Symbol(CONFIG, "max_delay_ms", "max_delay_ms", "max_delay_ms"),
    Symbol(ARG, "prefillable", "prefillable", "this rank's local_prefillable argument"),
)

POLICY = Policy(
    name=NAME,
    title=f"vLLM's prefill delayer (#{PR})",
    summary="delays a mixed step up to max_delay_passes steps or max_delay_ms on the rank's own clock, from the "
    f"number of prefillable ranks in one all_reduce(SUM); vllm-project/vllm #{PR} (closed), as its description has it",
    source=f"vllm-project/vllm #{PR}'s description and #48106 (the diff is not public; what is inferred is in the "
    "module's docstring)",
    upstream_url="https://github.com/vllm-project/vllm/pull/{}",
    config_cls=VllmDelayerConfig,
    params=PARAMETERS,
    profiles=PROFILES,
    features=FEATURES,
    default_profile=RELEASE,
    release_aliases={},
    states=STATES,
    state_doc=STATE_DOC,
    state_cls=State,
    state_fields=STATE_FIELDS,
    init=INIT,
    type_ok=type_ok,
    shared=("control", "delayed_count"),
    inputs=INPUTS,
    input_cls=VllmDelayerInput,
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
                      config=("max_delay_passes", "max_delay_ms", "dp_size", "attn_tp_size", "attn_cp_size",
                              "enable_dp_attention")),
    log=LogSchema(
        readings=(("local_prefillable", "prefillable"),),  # no own row: every input read
        inputs_from_row=lambda o, row, r: VllmDelayerInput(r["prefillable"]),
        reason_order=("delay", "no_wait", "wait_success", "wait_timeout", ""),
        mixed=lambda v, d: d.input_estimation == "mixed",
    ),
    proof=ProofHooks(
        outputs=("output_reason", "output_allow", "wait_forward_passes"),
        families=rank_families,
        scope_ranges=lambda fams: f"{dp_size_range(fams)}, max_delay_passes any >= 0, max_delay_ms any > 0",
        layout_range="any number of DP ranks (one reduced row)",
        default_scope=Scope(),
        scope_of=lambda dp_size=None, **_: Scope(dp_size),
        scope_options=(),
        sym_config=sym_config,
        config_domain=config_domain,
        concrete=lambda fam, scope: RankFamily(fam.profile, fam.dp_size if fam.dp_size is not None else 4),
        witness_row=witness_row,
        split_view=split_view,
        idle_row=idle_row,
        layout_witness=layout_witness,
        reference=reference_pass,
        reference_row=reference_row,
        bmc_config=bmc_config,
        bmc_search={"agreement": (lambda f: True, None), "agreement-equal-args": (lambda f: True, None),
                    "joint-progress": (lambda f: True, None)},
    ),
    host=HostBinding(
        call=SGLANG_CALL,  # SGLang's own call: its delayer's inputs
        inputs=_host_inputs,
        idle_call={"local_prefillable": False},
        metrics=lambda d: (d.wait_forward_passes, d.wait_seconds, d.input_estimation),
        settings=_settings,
    ),
    # the simulator runs it as SGLang's delayer: at the prefill adder's call sites (a running chunk goes on)
    sim=SimBinding(call_site="admission", inputs=lambda f: VllmDelayerInput(True),
                   idle_inputs=lambda f: VllmDelayerInput(False),
                   outcome=attrgetter("input_estimation", "output_allow", "output_reason", "wait_forward_passes"),  # a C call
                   colours={"no_wait": "#2ca02c", "wait_success": "#1f77b4", "delay": "#d62728", "wait_timeout": "#ff7f0e"}),
    extras={"docs": {
        "replayed_by": f"; #{PR}'s code is not public to run it",
        "engine": "vLLM",
        "no_features": f"none: #{PR} as described",
        "releases_intro": f"vLLM #{PR} was closed unmerged and its diff is not public; the profile `{RELEASE}` is its "
        "description (the count of prefillable ranks from the DP all-reduce, 30 passes or 5000 ms on the rank's own "
        f"clock), with what is inferred written in `spec/policies/vllm_prefill_delayer.py`. The collective is vLLM's DP "
        "`all_reduce(SUM)`.",
    }},
    guard_names=GUARD_NAMES,
    collective=ALL_REDUCE_SUM,
)
