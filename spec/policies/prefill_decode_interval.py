"""SGLang's ``--prefill-decode-interval`` gate (#35017), read from the 0.5.23 wheel's ``scheduler.py``.

What 0.5.23 does (``Scheduler._should_defer_prefill`` and
``_arm_prefill_decode_interval``, around ``get_next_batch_to_run``):

* after a pass whose batch is an extend (prefill) batch, ``remaining`` is set to
  ``prefill_decode_interval``; with DP attention the flag is
  ``is_extend_in_batch``, the max over the first rank of each DP group in the
  mlp-sync all-gather (``MLPSyncBatchInfo``), so a rank that only decoded is
  re-armed by a peer's prefill;
* on the next pass, with ``remaining > 0``: a rank whose *own* running batch holds
  fewer than ``prefill_decode_interval_min_bs`` requests resets ``remaining`` to 0
  and may prefill; otherwise it decrements ``remaining`` and skips
  ``get_new_batch_prefill`` (decode only).

As a policy with one collective per pass: each rank's row carries whether its
previous pass ran an extend batch (``extended``; a rank that deferred cannot have)
and whether its own running batch is below ``min_bs``; a pass first applies the
previous pass's arming from the gathered flag, then decides. The 0.5.23 profile
reads the small-batch test on each rank's own batch, as the release does; ours
reads it from the gather, and arms only after the rank's own prefill pass.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, NamedTuple

from .dp_scope import Family, Scope, families
from ..config import Config, Layout, count_in, layout_params
from ..fields import BOOL, COUNT, MAX_COUNT, REASON, Field
from ..glossary import ARG, CONFIG, LOCAL, VIEW, Symbol
from ..monitors import Agreement, GroupRunBound, RunBound
from ..policy import (
    COUNTED, PROVED, REFUTED, Agg, Feature, Invariant, Param, Policy, Profile, ProofHooks, SimBinding, TraceSchema,
)
from ..schema import LogSchema
from ..table import NEGOTIATE, Table, Transition, lits, resolve

NAME = "prefill-decode-interval"

# ----- features and profiles -----------------------------------------------------------

GATHERED_MIN_BS = "gathered-min-bs"
ARM_AFTER_OWN_PREFILL = "arm-after-own-prefill"
FEATURES = (
    Feature(
        GATHERED_MIN_BS,
        "the small-batch test",
        before="each rank compares its own running batch with prefill_decode_interval_min_bs",
        after="a rank sends whether its running batch is below min_bs; the interval is reset when any counted rank's is",
        why="with min_bs > 0, ranks on both sides of min_bs decide differently, and a deferring rank skips the "
        "delayer's all-gather its peers run",
        upstream=(35017,),
        since=None,
        shows_in=("small_batch",),
        invariant="agreement",
    ),
    Feature(
        ARM_AFTER_OWN_PREFILL,
        "arming the interval",
        before="any pass whose gathered is_extend_in_batch is set arms the interval, also on a rank that deferred",
        after="the interval is armed only after a pass on which this rank itself was allowed to prefill",
        why="a deferring rank re-armed by its peers' prefills defers for as long as they keep prefilling",
        upstream=(35017,),
        since=None,
        shows_in=("armed_remaining",),
        invariant="bounded-delay",
    ),
)
PROFILES = (
    Profile("pdi-0.5.23", frozenset(), ("0.5.23",), "SGLang 0.5.23's --prefill-decode-interval gate, bit for bit"),
    Profile("pdi-hardened", frozenset(f.id for f in FEATURES), (), "the gate with the small-batch test gathered and "
            "arming only after the rank's own prefill"),
)
_PROFILE = {p.name: p for p in PROFILES}


def has(c: Any, feature: str) -> bool:
    if feature not in {f.id for f in FEATURES}:
        raise KeyError(f"unknown feature {feature!r}")
    return feature in c.features


# ----- configuration --------------------------------------------------------------------

PARAMETERS = (
    Param("prefill_decode_interval", 0, f"integer in [0, {MAX_COUNT}] (0: off)", count_in(0, MAX_COUNT),
          server_arg="prefill_decode_interval", runs_as_off=0),
    Param("prefill_decode_interval_min_bs", 0, f"integer in [0, {MAX_COUNT}]", count_in(0, MAX_COUNT),
          server_arg="prefill_decode_interval_min_bs"),
    *layout_params(),
    Param("profile", "pdi-0.5.23", "one of " + ", ".join(_PROFILE), lambda v: isinstance(v, str) and v in _PROFILE),
)


@dataclass(frozen=True)
class GateConfig(Config):
    prefill_decode_interval: int = 0
    prefill_decode_interval_min_bs: int = 0
    dp_size: int = 1
    attn_tp_size: int = 1
    attn_cp_size: int = 1
    enable_dp_attention: bool = False
    profile: str = "pdi-0.5.23"

    policy_name = NAME

    def __post_init__(self) -> None:
        self._validate(PARAMETERS)

    @property
    def interval(self) -> int:
        return self.prefill_decode_interval

    @property
    def min_bs(self) -> int:
        return self.prefill_decode_interval_min_bs


# ----- variables, inputs, what the guards see ----------------------------------------------

OPEN, COUNTING = "open", "counting"
STATES = (OPEN, COUNTING)
STATE_DOC = {OPEN: "no decode rounds owed (remaining = 0)", COUNTING: "remaining decode rounds before the next prefill"}


class State(NamedTuple):
    control: str = OPEN
    remaining: int = 0
    allowed_last: bool = False  # the previous pass let this rank prefill (a fresh scheduler has run no pass)


INIT = State()
STATE_FIELDS = (
    Field("remaining", COUNT, "decode rounds owed before the next prefill (_prefill_decode_interval_remaining)", sym="rem"),
    Field("allowed_last", BOOL, "the previous pass let this rank prefill", sym="allowed"),
)


def type_ok(o: Any, c: Any, st: Any) -> Any:
    return o.And(o.Or(st.control == OPEN, st.control == COUNTING), (st.control == OPEN) == (st.remaining == 0), st.remaining >= 0)


class GateInput(NamedTuple):
    """What the scheduler knows at ``get_next_batch_to_run``."""

    running_batch: int
    extended: bool = False  # this rank's previous pass ran an extend (prefill) batch


INPUTS = (
    Field("running_batch", COUNT, "requests in this rank's running batch", sym="rb"),
    Field("extended", BOOL, "this rank's previous pass ran an extend batch", default=False, sym="ext"),
)


class Local(NamedTuple):
    remaining: Any
    allowed_last: Any
    running_batch: Any


def local_for(o: Any, st: Any, now: Any, inp: Any) -> Local:
    return Local(st.remaining, st.allowed_last, inp.running_batch)


def local_domain(o: Any, c: Any, st: Any, now: Any, inp: Any) -> list:
    return [st.remaining <= MAX_COUNT, inp.running_batch >= 0, inp.running_batch <= MAX_COUNT]


# ----- the row and the view ----------------------------------------------------------------

ROW = (
    Field("extended", BOOL, "this rank ran an extend batch last pass (and was allowed to)"),
    Field("below_min_bs", BOOL, "its running batch holds fewer than min_bs requests"),
)


def below_min_bs(o: Any, c: Any, running_batch: Any) -> Any:
    """This rank's running batch is below prefill_decode_interval_min_bs."""
    return running_batch < c.min_bs


def local_row(o: Any, c: Any, inp: GateInput, s: Local) -> list:
    return [o.b2i(o.And(inp.extended, s.allowed_last)), o.b2i(below_min_bs(o, c, inp.running_batch))]


class View(NamedTuple):
    n: Any
    extend_any: Any  # is_extend_in_batch: some counted rank ran an extend batch last pass
    below_any: Any  # some counted rank's running batch is below min_bs


VIEW_FOLD = (
    Agg("n", "count", None, doc="counted rows"),
    Agg("extend_any", "any", "extended", COUNTED),
    Agg("below_any", "any", "below_min_bs", COUNTED),
)


def view_domain(o: Any, c: Any, v: View) -> list:
    return [v.n >= 1, o.Or(o.Not(v.below_any), c.min_bs >= 1)]


# ----- guards --------------------------------------------------------------------------------


def armed_remaining(o: Any, c: Any, v: Any, s: Any) -> Any:
    """``remaining`` after the previous pass's arming: the interval if a counted rank extended
    (and, with arm-after-own-prefill, this rank was allowed to), else as it was."""
    arm = o.And(v.extend_any, c.interval > 0)
    if has(c, ARM_AFTER_OWN_PREFILL):
        arm = o.And(arm, s.allowed_last)
    return o.If(arm, c.interval, s.remaining)


def owed(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Decode rounds are owed this pass."""
    return armed_remaining(o, c, v, s) > 0


def small_batch(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The running batch is too small for the interval: this rank's own (0.5.23), or any counted rank's (gathered-min-bs)."""
    if has(c, GATHERED_MIN_BS):
        return v.below_any
    return below_min_bs(o, c, s.running_batch)


def last_owed(o: Any, c: Any, v: Any, s: Any) -> Any:
    """This pass pays the last decode round owed."""
    return armed_remaining(o, c, v, s) == 1


TABLE_GUARDS = ("owed", "small_batch", "last_owed")

# ----- the table, its effects, the decision ----------------------------------------------------

REASONS = ("no_interval", "small_batch", "decode_interval")
DEFER, RESET = "defer", "reset"
EFFECT_DOC = {
    DEFER: "remaining = armed_remaining - 1; allowed_last = false",
    RESET: "remaining = 0; allowed_last = true",
}


def build_table(profile: str) -> Table:
    from ..registry import resolve_profile

    profile = resolve_profile(profile)
    rows: list[Transition] = []
    for src in STATES:
        rows += [
            Transition(f"{src}_open", NEGOTIATE, src, OPEN, lits("!owed"), "no_interval", (RESET,), True),
            Transition(f"{src}_small", NEGOTIATE, src, OPEN, lits("owed", "small_batch"), "small_batch", (RESET,), True),
            Transition(f"{src}_defer_last", NEGOTIATE, src, OPEN, lits("owed", "!small_batch", "last_owed"), "decode_interval", (DEFER,)),
            Transition(f"{src}_defer", NEGOTIATE, src, COUNTING, lits("owed", "!small_batch", "!last_owed"), "decode_interval", (DEFER,)),
        ]
    return resolve(profile, STATES, rows, {name: globals()[name] for name in TABLE_GUARDS})


class Decision(NamedTuple):
    next_state: State
    output_allow: bool
    output_reason: str


DECISION_FIELDS = (
    Field("output_allow", BOOL, "this pass may prefill (get_new_batch_prefill runs)", trace="allow"),
    Field("output_reason", REASON, "why", trace="reason"),
)
DECISION_KEY = ("output_allow", "output_reason")


def decide(o: Any, c: Any, t: Transition, v: Any, s: Any) -> Decision:
    if DEFER in t.effects:
        nxt = State(t.dest, armed_remaining(o, c, v, s) - 1, False)
    else:
        nxt = State(t.dest, 0, True)
    return Decision(nxt, t.allows, t.reason)  # type: ignore[arg-type]


# ----- properties ----------------------------------------------------------------------------


def defers(o: Any, c: Any, v: Any, d: Any) -> Any:
    return o.Not(d.output_allow)


def _run_couple(o: Any, c: Any, st: Any, run: Any) -> Any:
    """A run of defers began at most ``interval`` owed rounds ago, and none was re-armed inside it."""
    return o.And(o.Or(run == 0, o.Not(st.allowed_last)), run + st.remaining <= c.interval, run >= 0)


def _interval(o: Any, c: Any) -> Any:
    return c.interval


def _all(*refuted: str) -> dict[str, str]:
    return {p.name: (REFUTED if p.name in refuted else PROVED) for p in PROFILES}


INVARIANTS = (
    Invariant("guards-partition", "from each state, exactly one negotiate guard holds for every input", _all(), "guards-partition"),
    Invariant(
        "bounded-delay",
        "every run of consecutive deferred passes is at most prefill_decode_interval passes long",
        _all("pdi-0.5.23"),
        RunBound(
            "bounded-delay", counts=defers, limit=_interval, couple=_run_couple,
            trace_text="rank {rank} defers {length} consecutive passes (passes {start}..{end}), more than "
            "prefill_decode_interval = {limit}",
            log_text="defers {run}+ consecutive passes (from pass {start}), more than prefill_decode_interval = {limit}",
            log_text_done="defers {run} consecutive passes (passes {start}..{end}), more than prefill_decode_interval = {limit}",
        ),
        "0.5.23: a deferring rank is re-armed by its peers' prefills",
    ),
    Invariant(
        "agreement",
        "ranks that share state and gathered table decide alike (allow, reason) and stay in step, whatever their "
        "running batches",
        _all("pdi-0.5.23"),
        Agreement("agreement"),
        "0.5.23 compares each rank's own running batch with min_bs",
    ),
    Invariant(
        "agreement-equal-args",
        "agreement for ranks whose running batches are equal",
        _all(),
        Agreement("agreement-equal-args", equal_args=True),
    ),
    Invariant(
        "joint-progress",
        "in every window of prefill_decode_interval + 1 consecutive passes there is a pass on which no rank defers",
        _all("pdi-0.5.23"),
        GroupRunBound(
            "joint-progress", counts=defers, window=lambda o, c: c.interval + 1, couple=_run_couple,
            window_text="prefill_decode_interval + 1", who="defers", some="a deferring rank",
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
        "the table equals an independent encoding of 0.5.23's _should_defer_prefill and _arm_prefill_decode_interval",
        _all(),
        "refinement",
    ),
)


def reference_pass(o: Any, c: Any, st: Any, v: Any, now: Any, inp: Any) -> tuple[dict, tuple]:
    """0.5.23's two methods, restated: arm from the previous pass, then defer or not."""
    arm = o.And(v.extend_any, c.interval > 0)
    if ARM_AFTER_OWN_PREFILL in c.features:
        arm = o.And(arm, st.allowed_last)
    remaining = o.If(arm, c.interval, st.remaining)
    small = v.below_any if GATHERED_MIN_BS in c.features else inp.running_batch < c.min_bs
    defer = o.And(remaining != 0, o.Not(small))
    after = o.If(defer, remaining - 1, 0)
    reason = o.If(remaining == 0, 0, o.If(small, 1, 2))
    control = o.If(after == 0, 0, 1)
    return {"output_reason": reason, "output_allow": o.Not(defer)}, (control, after, o.Not(defer))


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    return [o.If(o.And(inp.extended, s.allowed_last), 1, 0), o.If(inp.running_batch < c.min_bs, 1, 0)]


# ----- what the proofs range over ------------------------------------------------------------


@dataclass
class SymConfig(Layout):
    profile: str
    enable_dp_attention: bool
    dp_size: Any
    attn_tp_size: int
    interval: Any
    min_bs: Any
    attn_cp_size: int = 1

    @property
    def features(self) -> frozenset[str]:
        return _PROFILE[self.profile].features


def sym_config(o: Any, fam: Family, tag: str = "") -> SymConfig:
    return SymConfig(fam.profile, fam.enable_dp_attention, o.Int(f"dp_size{tag}") if fam.enable_dp_attention else 1, 1,
                     o.Int(f"interval{tag}"), o.Int(f"min_bs{tag}"))


def config_domain(o: Any, c: SymConfig) -> list:
    dom = [c.interval >= 0, c.interval <= MAX_COUNT, c.min_bs >= 0, c.min_bs <= MAX_COUNT]
    if not isinstance(c.dp_size, int):
        dom += [c.dp_size >= 1]
    return dom


def scope_ranges(fams: Any) -> str:
    return "dp_size any >= 1, prefill_decode_interval any >= 0, prefill_decode_interval_min_bs any >= 0"


def witness_row(o: Any, c: Any, v: Any) -> tuple:
    return GateInput(o.If(v.below_any, 0, c.min_bs), v.extend_any), Local(o.IntVal(0), o.BoolVal(True), o.If(v.below_any, 0, c.min_bs))


def layout_witness(o: Any, c: Any, v: Any, group: int, counted: bool, groups: int) -> tuple:
    return witness_row(o, c, v)


def bmc_config(o: Any, c: SymConfig) -> tuple[list, Any]:
    assertions = [*config_domain(o, c), c.interval >= 1, c.interval <= 4, c.min_bs <= 1000]

    def trace_config(val: Any, ranks: int) -> dict:
        return {"dp_size": ranks, "attn_tp_size": 1, "enable_dp_attention": True, "prefill_decode_interval": val(c.interval),
                "prefill_decode_interval_min_bs": val(c.min_bs), "attn_cp_size": 1}

    return assertions, trace_config


def _sim_inputs(facts: Any) -> GateInput:
    return GateInput(facts.running_batch, facts.extended)


SYMBOLS = (
    Symbol(VIEW, "n", "n", "counted rows"),
    Symbol(VIEW, "extend_any", "is_extend_in_batch", "some counted rank ran an extend batch last pass"),
    Symbol(VIEW, "below_any", "below_any", "some counted rank's running batch is below min_bs (read with gathered-min-bs)"),
    Symbol(LOCAL, "remaining", "remaining", "decode rounds owed"),
    Symbol(LOCAL, "allowed_last", "allowed_last", "the previous pass let this rank prefill"),
    Symbol(LOCAL, "running_batch", "running_bs", "this rank's running batch size"),
    Symbol(CONFIG, "interval", "prefill_decode_interval", "prefill_decode_interval"),
    Symbol(CONFIG, "min_bs", "min_bs", "prefill_decode_interval_min_bs"),
    Symbol(ARG, "running_batch", "running_bs", "this rank's running batch size"),
)

POLICY = Policy(
    name=NAME,
    title="SGLang's prefill-decode interval",
    summary="after a prefill, run prefill_decode_interval decode-only passes before the next prefill (SGLang 0.5.23, #35017)",
    source="sglang/srt/managers/scheduler.py (_should_defer_prefill, _arm_prefill_decode_interval) and "
    "managers/scheduler_components/dp_attn.py (is_extend_in_batch) of the SGLang 0.5.23 wheel",
    upstream_url="https://github.com/sgl-project/sglang/issues/{}",
    config_cls=GateConfig,
    params=PARAMETERS,
    profiles=PROFILES,
    features=FEATURES,
    default_profile="pdi-0.5.23",
    release_aliases={},
    states=STATES,
    state_doc=STATE_DOC,
    state_cls=State,
    state_fields=STATE_FIELDS,
    init=INIT,
    type_ok=type_ok,
    shared=("control", "remaining", "allowed_last"),
    inputs=INPUTS,
    input_cls=GateInput,
    local_cls=Local,
    local_for=local_for,
    local_inputs=("running_batch",),
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
                      "prefill_decode_interval", "prefill_decode_interval_min_bs", "attn_cp_size")),
    log=LogSchema(
        readings=(("running_batch", "running_batch"), ("extended", "extended")),
        inputs_from_row=lambda o, row, r: GateInput(r["running_batch"], r["extended"]),
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
        idle_row=lambda o: (GateInput(o.IntVal(0), o.BoolVal(False)), Local(o.IntVal(0), o.BoolVal(False), o.IntVal(0))),
        layout_witness=layout_witness,
        reference=reference_pass,
        reference_row=reference_row,
        bmc_config=bmc_config,
        bmc_search={
            "bounded-delay": (lambda f: f.enable_dp_attention, None),
            "agreement": (lambda f: f.enable_dp_attention, None),
            "joint-progress": (lambda f: f.enable_dp_attention, None),
        },
    ),
    host=None,  # SGLang's delayer call sites do not reach it: it is a scheduler method, before them
    sim=SimBinding(call_site="gate", inputs=_sim_inputs, idle_inputs=_sim_inputs, gates_partial_chunk=True,
                   outcome=lambda d: ("", d.output_allow, d.output_reason, 0),
                   colours={"no_interval": "#2ca02c", "small_batch": "#1f77b4", "decode_interval": "#d62728"}),
    extras={"docs": {
        "engine": "SGLang",
        "releases_intro": "SGLang 0.5.23's `Scheduler._should_defer_prefill` and `_arm_prefill_decode_interval` "
        "(`sglang/srt/managers/scheduler.py`, #35017), as published on the package registry, are the profile "
        "`pdi-0.5.23`; `pdi-hardened` adds ours. The gate has no call site in SGLang's delayer API: the runtime runs "
        "it as a policy of its own (`runtime.PolicyCore`), and the simulator consults it before admission.",
    }},
    guard_names=("below_min_bs", "armed_remaining", "owed", "small_batch", "last_owed"),
)
