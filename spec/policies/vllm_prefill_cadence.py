"""vLLM's prefill cadence (#44558, ``--prefill-schedule-interval``), read from the vllm 0.33.0 wheel.

What 0.33.0 does on a DP (MoE) engine, ``vllm/v1/engine/core.py`` and
``vllm/v1/core/sched/scheduler.py``:

* ``DPEngineCoreProc._should_throttle_prefills``: a step is throttled when
  ``prefill_schedule_interval > 1 and step_counter % prefill_schedule_interval != 0``;
  ``step_counter`` counts the busy loop's iterations since the DP wave began and
  is the same on every DP rank (every rank steps in lockstep);
* ``Scheduler.schedule(throttle_prefills)``: ``defer_prefills = (throttle_prefills
  and not self.prefill_capacity_bound) and any(not r.is_prefill_chunk for r in
  self.running)``: a throttled step defers every prefill (new admissions and
  running chunks) unless this rank's last release step left its waiting queue
  non-empty (``prefill_capacity_bound``, set at the end of every step that did not
  defer) or this rank runs no decode;
* ``_has_global_unfinished_reqs``, at the end of every loop iteration:
  ``step_counter += 1``; on step 1 and every ``dp_sync_interval``-th step the
  ranks all-reduce whether any has unfinished requests (``sync_dp_state``, a SUM
  of 0/1), and when none has the wave ends: ``step_counter = 0``.

As a policy with one collective per pass, the pass applies the previous
iteration's end first (the increment, and the wave's end from the gathered
``unfinished``), then decides. The counters are kept as residues
(``step_counter mod prefill_schedule_interval``, ``mod dp_sync_interval``) and
whether the counter is 0, which is all the release reads of it. The capacity
flag and "some decode runs" are the scheduler's, read per rank as inputs: the
release compares each rank's own, so ranks on either side of them decide
differently; ``cadence-hardened`` gathers both (any rank capacity-bound releases
all; a rank with no decode to hide the wait releases all).

The engine's collective is an all-reduce (SUM) of [has_unfinished, pending_pause];
here every rank's row is all-gathered and folded with ``any``, which is that
all-reduce's meaning (the pause handshake is not modelled).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, NamedTuple

from .dp_scope import Family, Scope, families
from ..config import Config, Layout, count_in, layout_params
from ..fields import BOOL, COUNT, MAX_COUNT, REASON, Field
from ..glossary import CONFIG, LOCAL, VIEW, Symbol
from ..monitors import Agreement, GroupRunBound, PassRule, RunBound
from ..policy import (
    COUNTED, PROVED, REFUTED, Agg, Feature, Invariant, Param, Policy, Profile, ProofHooks, SimBinding, TraceSchema,
)
from ..schema import LogSchema
from ..table import NEGOTIATE, Table, Transition, lits, resolve

NAME = "vllm-prefill-cadence"
RELEASE = "vllm-0.33.0"
HARDENED = "cadence-hardened"

# ----- features and profiles -----------------------------------------------------------

GATHERED_RELEASE = "gathered-release"
FEATURES = (
    Feature(
        GATHERED_RELEASE,
        "the throttle's two exceptions",
        before="a rank releases a throttled step when its own prefill_capacity_bound is set or its own running "
        "batch holds no decode",
        after="each rank sends both; a throttled step is released on every rank when any rank is capacity-bound "
        "or runs no decode",
        why="the flags are rank-local: on a throttled step one rank prefills while its peers defer, the DP step "
        "the cadence is there to avoid",
        upstream=(44558,),
        since=None,
        shows_in=("capacity_release", "decode_running"),
        invariant="agreement",
    ),
)
PROFILES = (
    Profile(RELEASE, frozenset(), (), "vLLM 0.33.0's --prefill-schedule-interval on a DP engine, bit for bit"),
    Profile(HARDENED, frozenset(f.id for f in FEATURES), (), "the cadence with both exceptions gathered"),
)
_PROFILE = {p.name: p for p in PROFILES}


def has(c: Any, feature: str) -> bool:
    if feature not in {f.id for f in FEATURES}:
        raise KeyError(f"unknown feature {feature!r}")
    return feature in c.features


# ----- configuration --------------------------------------------------------------------

PARAMETERS = (
    Param("prefill_schedule_interval", 1, f"integer in [1, {MAX_COUNT}] (1: every step)", count_in(1, MAX_COUNT),
          server_arg="prefill_schedule_interval", runs_as_off=1),
    Param("dp_sync_interval", 16, f"integer in [1, {MAX_COUNT}]", count_in(1, MAX_COUNT), server_arg="dp_sync_interval"),
    *layout_params(),
    Param("profile", RELEASE, "one of " + ", ".join(_PROFILE), lambda v: isinstance(v, str) and v in _PROFILE),
)


@dataclass(frozen=True)
class CadenceConfig(Config):
    prefill_schedule_interval: int = 1
    dp_sync_interval: int = 16
    dp_size: int = 1
    attn_tp_size: int = 1
    attn_cp_size: int = 1
    enable_dp_attention: bool = False
    profile: str = RELEASE

    policy_name = NAME

    def __post_init__(self) -> None:
        self._validate(PARAMETERS)

    @property
    def interval(self) -> int:
        return self.prefill_schedule_interval

    @property
    def sync(self) -> int:
        return self.dp_sync_interval


# ----- variables, inputs, what the guards see ----------------------------------------------

ON, OFF = "on_cadence", "off_cadence"
STATES = (ON, OFF)
STATE_DOC = {ON: "step_counter is a multiple of prefill_schedule_interval: the step admits prefill",
             OFF: "between two cadence steps: a step that defers unless an exception holds"}


class State(NamedTuple):
    control: str = ON
    cad: int = 0  # step_counter mod prefill_schedule_interval, at this pass
    syn: int = 0  # step_counter mod dp_sync_interval
    fresh: bool = True  # step_counter == 0: the wave has just begun
    ran: bool = False  # a pass has run (the next one counts it)


INIT = State()
STATE_FIELDS = (
    Field("cad", COUNT, "step_counter mod prefill_schedule_interval", sym="cad"),
    Field("syn", COUNT, "step_counter mod dp_sync_interval", sym="syn"),
    Field("fresh", BOOL, "step_counter == 0", sym="fresh"),
    Field("ran", BOOL, "a pass has run since the engine started", sym="ran"),
)


def type_ok(o: Any, c: Any, st: Any) -> Any:
    return o.And(
        o.Or(st.control == ON, st.control == OFF),
        st.cad >= 0, st.cad < c.interval, st.syn >= 0, st.syn < c.sync,
        (st.control == ON) == (st.cad == 0),
        o.Or(o.Not(st.fresh), o.And(st.cad == 0, st.syn == 0)),
        o.Or(st.ran, st.fresh),  # before the first pass the counter reads 0
    )


class CadenceInput(NamedTuple):
    """What the scheduler knows when ``schedule`` runs, and what the previous iteration left."""

    has_decode: bool = True  # some running request is past its prefill: any(not r.is_prefill_chunk for r in running)
    capacity_bound: bool = False  # the scheduler's prefill_capacity_bound
    unfinished: bool = True  # has_unfinished_requests() after the previous iteration


INPUTS = (
    Field("has_decode", BOOL, "some running request is past its prefill", default=True, sym="dec"),
    Field("capacity_bound", BOOL, "prefill_capacity_bound: the last release step left the waiting queue non-empty",
          default=False, sym="capb"),
    Field("unfinished", BOOL, "the rank had unfinished requests after the previous iteration", default=True, sym="unf"),
)


class Local(NamedTuple):
    cad: Any
    syn: Any
    fresh: Any
    ran: Any
    has_decode: Any
    capacity_bound: Any


def local_for(o: Any, st: Any, now: Any, inp: Any) -> Local:
    return Local(st.cad, st.syn, st.fresh, st.ran, inp.has_decode, inp.capacity_bound)


def local_domain(o: Any, c: Any, st: Any, now: Any, inp: Any) -> list:
    return []


# ----- the row and the view ----------------------------------------------------------------

ROW = (
    Field("unfinished", BOOL, "the rank had unfinished requests after the previous iteration (sync_dp_state's [0])"),
    Field("no_decode", BOOL, "no running request of the rank is past its prefill"),
    Field("capacity_bound", BOOL, "the rank's prefill_capacity_bound"),
)


def local_row(o: Any, c: Any, inp: CadenceInput, s: Local) -> list:
    return [o.b2i(inp.unfinished), o.b2i(o.Not(s.has_decode)), o.b2i(s.capacity_bound)]


class View(NamedTuple):
    n: Any
    unfinished_any: Any  # sync_dp_state: some counted rank has unfinished requests
    no_decode_any: Any
    capacity_any: Any


VIEW_FOLD = (
    Agg("n", "count", None, doc="counted rows"),
    Agg("unfinished_any", "any", "unfinished", COUNTED),
    Agg("no_decode_any", "any", "no_decode", COUNTED),
    Agg("capacity_any", "any", "capacity_bound", COUNTED),
)


def view_domain(o: Any, c: Any, v: View) -> list:
    return [v.n >= 1]


# ----- guards --------------------------------------------------------------------------------


def wave_ends(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The previous iteration ended the DP wave: it was step 1 or a dp_sync_interval-th step
    (``_has_global_unfinished_reqs`` syncs then) and no rank had unfinished requests."""
    synced = o.Or(s.fresh, s.syn + 1 >= c.sync)
    return o.And(s.ran, synced, o.Not(v.unfinished_any))


def cadence_step(o: Any, c: Any, v: Any, s: Any) -> Any:
    """step_counter mod prefill_schedule_interval on this pass: the previous iteration counted,
    restarted at 0 by the wave's end."""
    counted = o.If(s.cad + 1 >= c.interval, 0, s.cad + 1)
    return o.If(wave_ends(o, c, v, s), 0, o.If(s.ran, counted, s.cad))


def sync_step(o: Any, c: Any, v: Any, s: Any) -> Any:
    """step_counter mod dp_sync_interval on this pass."""
    counted = o.If(s.syn + 1 >= c.sync, 0, s.syn + 1)
    return o.If(wave_ends(o, c, v, s), 0, o.If(s.ran, counted, s.syn))


def at_zero(o: Any, c: Any, v: Any, s: Any) -> Any:
    """step_counter reads 0 on this pass: the wave has just (re)ran."""
    return o.If(s.ran, wave_ends(o, c, v, s), s.fresh)


def throttled(o: Any, c: Any, v: Any, s: Any) -> Any:
    """``_should_throttle_prefills``: interval > 1 and the step is not a multiple of it."""
    return o.And(c.interval > 1, cadence_step(o, c, v, s) != 0)


def capacity_release(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The throttle yields to a backed-up queue: this rank's flag (0.33.0), or any counted rank's (gathered-release)."""
    if has(c, GATHERED_RELEASE):
        return v.capacity_any
    return s.capacity_bound


def decode_running(o: Any, c: Any, v: Any, s: Any) -> Any:
    """A decode hides the wait: on this rank (0.33.0), or on every counted rank (gathered-release)."""
    if has(c, GATHERED_RELEASE):
        return o.Not(v.no_decode_any)
    return s.has_decode


TABLE_GUARDS = ("throttled", "capacity_release", "decode_running")

# ----- the table, its effects, the decision ----------------------------------------------------

REASONS = ("no_wait", "capacity_bound", "no_decode", "delay")
COUNT_STEP = "count"
EFFECT_DOC = {COUNT_STEP: "cad, syn = the step's residues; fresh = the wave restarted; ran = true"}


def build_table(profile: str) -> Table:
    from ..registry import resolve_profile

    profile = resolve_profile(profile)
    rows: list[Transition] = []
    for src in STATES:
        rows += [
            Transition(f"{src}_step", NEGOTIATE, src, ON, lits("!throttled"), "no_wait", (COUNT_STEP,), True),
            Transition(f"{src}_capacity", NEGOTIATE, src, OFF, lits("throttled", "capacity_release"), "capacity_bound",
                       (COUNT_STEP,), True),
            Transition(f"{src}_no_decode", NEGOTIATE, src, OFF, lits("throttled", "!capacity_release", "!decode_running"),
                       "no_decode", (COUNT_STEP,), True),
            Transition(f"{src}_defer", NEGOTIATE, src, OFF, lits("throttled", "!capacity_release", "decode_running"),
                       "delay", (COUNT_STEP,)),
        ]
    return resolve(profile, STATES, rows, {name: globals()[name] for name in TABLE_GUARDS})


class Decision(NamedTuple):
    next_state: State
    output_allow: bool
    output_reason: str


DECISION_FIELDS = (
    Field("output_allow", BOOL, "this step may prefill (defer_prefills is false)", trace="allow"),
    Field("output_reason", REASON, "why", trace="reason"),
)
DECISION_KEY = ("output_allow", "output_reason")


def decide(o: Any, c: Any, t: Transition, v: Any, s: Any) -> Decision:
    nxt = State(t.dest, cadence_step(o, c, v, s), sync_step(o, c, v, s), at_zero(o, c, v, s), True)
    return Decision(nxt, t.allows, t.reason)  # type: ignore[arg-type]


# ----- properties ----------------------------------------------------------------------------


def defers(o: Any, c: Any, v: Any, d: Any) -> Any:
    return o.Not(d.output_allow)


def _hold_bound(o: Any, c: Any) -> Any:
    return c.interval - 1


def _run_couple(o: Any, c: Any, st: Any, run: Any) -> Any:
    """A run of deferred steps lies between two cadence steps: it is no longer than the residue it reached."""
    return o.And(run >= 0, run <= st.cad)


def _all(*refuted: str) -> dict[str, str]:
    return {p.name: (REFUTED if p.name in refuted else PROVED) for p in PROFILES}


MUST_FIRE = PassRule(
    "must-fire",
    premise=lambda o, c, v, d: o.Or(v.no_decode_any, v.capacity_any),
    claim=lambda o, c, v, d: d.output_allow,
    explain=lambda v, d: "some counted rank runs no decode or is capacity-bound, yet this rank defers its prefill "
    f"(reason {d.output_reason!r}) while that rank prefills",
)
INVARIANTS = (
    Invariant("guards-partition", "from each state, exactly one negotiate guard holds for every input", _all(), "guards-partition"),
    Invariant(
        "bounded-delay",
        "every run of consecutive deferred steps is at most prefill_schedule_interval - 1 steps long",
        _all(),
        RunBound(
            "bounded-delay", counts=defers, limit=_hold_bound, couple=_run_couple,
            trace_text="rank {rank} defers {length} consecutive steps (passes {start}..{end}), more than "
            "prefill_schedule_interval - 1 = {limit}",
            log_text="defers {run}+ consecutive steps (from pass {start}), more than prefill_schedule_interval - 1 = {limit}",
            log_text_done="defers {run} consecutive steps (passes {start}..{end}), more than "
            "prefill_schedule_interval - 1 = {limit}",
        ),
    ),
    Invariant(
        "must-fire",
        "when some counted rank runs no decode or its queue is backed up, no rank defers its prefill",
        _all(RELEASE),
        MUST_FIRE,
        "0.33.0 releases only the rank whose own flag is set; its peers defer on the same step",
    ),
    Invariant(
        "agreement",
        "ranks that share the step counter and the gathered rows decide alike whatever their own decode and "
        "capacity flags",
        _all(RELEASE),
        Agreement("agreement"),
        "0.33.0 reads each rank's own prefill_capacity_bound and running batch",
    ),
    Invariant(
        "agreement-equal-args",
        "agreement for ranks with equal decode and capacity flags (there is no clock to skew)",
        _all(),
        Agreement("agreement-equal-args", equal_args=True),
    ),
    Invariant(
        "joint-progress",
        "in every window of prefill_schedule_interval consecutive steps there is one on which no rank defers",
        _all(),
        GroupRunBound(
            "joint-progress", counts=defers, window=lambda o, c: c.interval, couple=_run_couple,
            window_text="prefill_schedule_interval", who="defers", some="a deferring rank",
        ),
    ),
    Invariant(
        "aggregate-view",
        "for any number of DP groups and any attn_cp x attn_tp ranks per group, the view is exactly what the rows give",
        _all(),
        "aggregate-view",
    ),
    Invariant(
        "refinement",
        "the table equals an independent encoding of 0.33.0's _should_throttle_prefills, the defer_prefills "
        "expression of Scheduler.schedule and _has_global_unfinished_reqs",
        _all(),
        "refinement",
    ),
)


def reference_pass(o: Any, c: Any, st: Any, v: Any, now: Any, inp: Any) -> tuple[dict, tuple]:
    """0.33.0's code, restated over residues: end the previous iteration, then throttle and defer or not."""
    step1 = st.fresh  # the previous iteration was step 0, so the counter now reads 1: a sync step
    syn = o.If(st.ran, o.If(st.syn + 1 == c.sync, 0, st.syn + 1), st.syn)
    cad = o.If(st.ran, o.If(st.cad + 1 == c.interval, 0, st.cad + 1), st.cad)
    new_wave = o.And(st.ran, o.Or(step1, syn == 0), o.Not(v.unfinished_any))
    cad = o.If(new_wave, 0, cad)
    syn = o.If(new_wave, 0, syn)
    throttle = o.And(c.interval > 1, cad != 0)
    gathered = GATHERED_RELEASE in c.features
    bound = v.capacity_any if gathered else inp.capacity_bound
    decode = o.Not(v.no_decode_any) if gathered else inp.has_decode
    defer = o.And(throttle, o.Not(bound), decode)
    reason = o.If(o.Not(throttle), 0, o.If(bound, 1, o.If(o.Not(decode), 2, 3)))
    control = o.If(cad == 0, 0, 1)
    zero = o.If(st.ran, new_wave, st.fresh)
    return {"output_reason": reason, "output_allow": o.Not(defer)}, (control, cad, syn, zero, o.BoolVal(True))


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    return [o.If(inp.unfinished, 1, 0), o.If(inp.has_decode, 0, 1), o.If(inp.capacity_bound, 1, 0)]


# ----- what the proofs range over ------------------------------------------------------------


@dataclass
class SymConfig(Layout):
    profile: str
    enable_dp_attention: bool
    dp_size: Any
    attn_tp_size: int
    interval: Any
    sync: Any
    attn_cp_size: int = 1

    @property
    def features(self) -> frozenset[str]:
        return _PROFILE[self.profile].features


def sym_config(o: Any, fam: Family, tag: str = "") -> SymConfig:
    return SymConfig(fam.profile, fam.enable_dp_attention, o.Int(f"dp_size{tag}") if fam.enable_dp_attention else 1, 1,
                     o.Int(f"interval{tag}"), o.Int(f"sync{tag}"))


def config_domain(o: Any, c: SymConfig) -> list:
    dom = [c.interval >= 1, c.interval <= MAX_COUNT, c.sync >= 1, c.sync <= MAX_COUNT]
    if not isinstance(c.dp_size, int):
        dom += [c.dp_size >= 1]
    return dom


def scope_ranges(fams: Any) -> str:
    return "dp_size any >= 1, prefill_schedule_interval any >= 1, dp_sync_interval any >= 1"


def witness_row(o: Any, c: Any, v: Any) -> tuple:
    inp = CadenceInput(o.Not(v.no_decode_any), v.capacity_any, v.unfinished_any)
    return inp, Local(o.IntVal(0), o.IntVal(0), o.BoolVal(True), o.BoolVal(False), inp.has_decode, inp.capacity_bound)


def layout_witness(o: Any, c: Any, v: Any, group: int, counted: bool, groups: int) -> tuple:
    return witness_row(o, c, v)


def idle_row(o: Any) -> tuple:
    inp = CadenceInput(o.BoolVal(True), o.BoolVal(False), o.BoolVal(False))
    return inp, Local(o.IntVal(0), o.IntVal(0), o.BoolVal(True), o.BoolVal(False), inp.has_decode, inp.capacity_bound)


def bmc_config(o: Any, c: SymConfig) -> tuple[list, Any]:
    assertions = [*config_domain(o, c), c.interval <= 4, c.sync <= 4]

    def trace_config(val: Any, ranks: int) -> dict:
        return {"dp_size": ranks, "attn_tp_size": 1, "enable_dp_attention": True,
                "prefill_schedule_interval": val(c.interval), "dp_sync_interval": val(c.sync), "attn_cp_size": 1}

    return assertions, trace_config


def _sim_inputs(facts: Any) -> CadenceInput:
    """The simulated scheduler's facts as the step's inputs: a decode runs (a running request past its prefill),
    the last admitting step left requests waiting (prefill_capacity_bound), the rank holds unfinished requests.
    The throttle runs before admission and defers running chunks too (``defer_prefills``)."""
    return CadenceInput(facts.running_batch > 0, facts.backlog, facts.has_requests)


SYMBOLS = (
    Symbol(VIEW, "n", "n", "counted rows"),
    Symbol(VIEW, "unfinished_any", "any_unfinished", "some counted rank had unfinished requests (sync_dp_state)"),
    Symbol(VIEW, "no_decode_any", "any_no_decode", "some counted rank runs no decode"),
    Symbol(VIEW, "capacity_any", "any_capacity_bound", "some counted rank is capacity-bound"),
    Symbol(LOCAL, "cad", "cad", "step_counter mod prefill_schedule_interval before this pass"),
    Symbol(LOCAL, "syn", "syn", "step_counter mod dp_sync_interval before this pass"),
    Symbol(LOCAL, "fresh", "fresh", "step_counter was 0"),
    Symbol(LOCAL, "ran", "ran", "a pass has run"),
    Symbol(LOCAL, "has_decode", "has_decode", "this rank runs a decode"),
    Symbol(LOCAL, "capacity_bound", "capacity_bound", "this rank's prefill_capacity_bound"),
    Symbol(CONFIG, "interval", "N", "prefill_schedule_interval"),
    Symbol(CONFIG, "sync", "S", "dp_sync_interval"),
)

POLICY = Policy(
    name=NAME,
    title="vLLM's prefill cadence",
    summary="on a DP engine, admit prefill only on steps whose shared step counter is a multiple of "
    "--prefill-schedule-interval, unless the rank runs no decode or its queue is backed up (vLLM #44558, 0.33.0)",
    source="vllm/v1/engine/core.py (DPEngineCoreProc._should_throttle_prefills, _has_global_unfinished_reqs, "
    "run_busy_loop), vllm/v1/core/sched/scheduler.py (Scheduler.schedule: defer_prefills, prefill_capacity_bound) "
    "and vllm/config/parallel.py (sync_dp_state) of the vllm 0.33.0 wheel",
    upstream_url="https://github.com/vllm-project/vllm/pull/{}",
    config_cls=CadenceConfig,
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
    shared=("control", "cad", "syn", "fresh", "ran"),
    inputs=INPUTS,
    input_cls=CadenceInput,
    local_cls=Local,
    local_for=local_for,
    local_inputs=("has_decode", "capacity_bound"),
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
    trace=TraceSchema(inputs=INPUTS, expect=DECISION_FIELDS, config=("dp_size", "attn_tp_size", "enable_dp_attention",
                      "prefill_schedule_interval", "dp_sync_interval", "attn_cp_size")),
    log=LogSchema(
        readings=(),
        inputs_from_row=lambda o, row, r: CadenceInput(row[1] == 0, o.Not(row[2] == 0), o.Not(row[0] == 0)),
    ),
    proof=ProofHooks(
        outputs=("output_reason", "output_allow"),
        families=families,
        scope_ranges=scope_ranges,
        layout_range="any number of DP groups, any attn_cp x attn_tp ranks per group, DP attention on and off",
        default_scope=Scope(),
        scope_of=lambda dp_size=None, **_: Scope(dp_size),
        scope_options=(),
        sym_config=sym_config,
        config_domain=config_domain,
        concrete=lambda fam, scope: Family(fam.profile, fam.enable_dp_attention, 4),
        witness_row=witness_row,
        split_view=lambda o, v: v._replace(n=v.n - 1),
        idle_row=idle_row,
        layout_witness=layout_witness,
        reference=reference_pass,
        reference_row=reference_row,
        bmc_config=bmc_config,
        bmc_search={
            "agreement": (lambda f: f.enable_dp_attention, None),
            "must-fire": (lambda f: f.enable_dp_attention, None),
        },
    ),
    host=None,  # SGLang's call sites do not run it; vLLM's scheduler would pass the three inputs (README)
    sim=SimBinding(call_site="gate", inputs=_sim_inputs, idle_inputs=_sim_inputs, gates_partial_chunk=True,
                   colours={"no_wait": "#2ca02c", "capacity_bound": "#ff7f0e", "no_decode": "#9467bd", "delay": "#d62728"}),
    extras={"docs": {
        "engine": "vLLM",
        "releases_intro": "vLLM 0.33.0's `DPEngineCoreProc._should_throttle_prefills` and the `defer_prefills` "
        "expression of `Scheduler.schedule` (#44558), as published on the package registry, are the profile "
        "`vllm-0.33.0`; `cadence-hardened` gathers the two exceptions.",
    }},
    guard_names=("wave_ends", "cadence_step", "sync_step", "at_zero", "throttled", "capacity_release", "decode_running"),
)
