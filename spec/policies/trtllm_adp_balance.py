"""TensorRT-LLM's attention-DP balance (``attention_dp_config``: ``enable_balance``, ``timeout_iters``, ``batching_wait_iters``).

Read from NVIDIA/TensorRT-LLM, ``tensorrt_llm/_torch/pyexecutor/py_executor.py``,
``PyExecutor._balance_adp_requests`` and ``_schedule`` (the version that reads
``attention_dp_enable_balance``, ``attention_dp_time_out_iters`` and
``attention_dp_batching_wait_iters`` from the PyTorch backend config; a later
refactor moves the same code into the scheduler, "logic unchanged"), and
``AttentionDpConfig`` in ``tensorrt_llm/llmapi/llm_args.py`` (defaults: 50 and 10
iterations). The registry's ``tensorrt-llm`` is a stub that downloads the wheel
from NVIDIA's own index, so the profile is checked against the code's cases,
restated as facts (``tests/test_trtllm_adp_balance.py``), not run beside it.

Every iteration, after the scheduler picked its context (prefill) and generation
requests, the ranks ``tp_allgather`` [context requests, generation requests,
tokens] and each decides from the gathered lists alone:

* every rank has context requests and a free slot (generation < max_batch_size):
  the waiting count resets; if every rank also has generation requests, the
  context requests are held while the batching count is below
  ``batching_wait_iters`` (it counts up), else they run and it resets;
* otherwise they are held and the waiting count counts up, unless it reaches
  ``timeout_iters`` or some rank has no generation request: then they run and it
  resets.

The state changes only from gathered values, so ranks agree; but the batching
count survives a waiting phase and the waiting count restarts on each ready
pass, so holds of both kinds chain into a run longer than
``timeout_iters + batching_wait_iters``. ``adp-hardened`` keeps one count of
held passes that the timeout bounds for both kinds.
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

NAME = "trtllm-adp-balance"
RELEASE = "trtllm-adp-balance"
HARDENED = "adp-hardened"

# ----- features and profiles -----------------------------------------------------------

ONE_HOLD_CLOCK = "one-hold-clock"
FEATURES = (
    Feature(
        ONE_HOLD_CLOCK,
        "the timeout's reach",
        before="the waiting count restarts on every pass where all ranks are ready, and the batching wait has no "
        "timeout, so the two kinds of hold alternate into one long run",
        after="one count of consecutive held passes, of either kind; timeout_iters bounds it",
        why="a run of holds longer than timeout_iters + batching_wait_iters keeps every rank's prefill back",
        upstream=(),
        since=None,
        shows_in=("timed_out", "batching_owed", "batch_hold", "batch"),
        invariant="bounded-delay",
    ),
)
PROFILES = (
    Profile(RELEASE, frozenset(), (), "TensorRT-LLM's _balance_adp_requests with enable_balance on"),
    Profile(HARDENED, frozenset(f.id for f in FEATURES), (), "the balance with one hold count the timeout bounds"),
)
_PROFILE = {p.name: p for p in PROFILES}


def has(c: Any, feature: str) -> bool:
    if feature not in {f.id for f in FEATURES}:
        raise KeyError(f"unknown feature {feature!r}")
    return feature in c.features


# ----- configuration --------------------------------------------------------------------

PARAMETERS = (
    Param("timeout_iters", 50, f"integer in [0, {MAX_COUNT}]", count_in(0, MAX_COUNT)),
    Param("batching_wait_iters", 10, f"integer in [0, {MAX_COUNT}]", count_in(0, MAX_COUNT)),
    Param("max_batch_size", 2048, f"integer in [1, {MAX_COUNT}]", count_in(1, MAX_COUNT)),
    *layout_params(),
    Param("profile", RELEASE, "one of " + ", ".join(_PROFILE), lambda v: isinstance(v, str) and v in _PROFILE),
)


@dataclass(frozen=True)
class BalanceConfig(Config):
    timeout_iters: int = 50
    batching_wait_iters: int = 10
    max_batch_size: int = 2048
    dp_size: int = 1
    attn_tp_size: int = 1
    attn_cp_size: int = 1
    enable_dp_attention: bool = False
    profile: str = RELEASE

    policy_name = NAME

    def __post_init__(self) -> None:
        self._validate(PARAMETERS)

    @property
    def timeout(self) -> int:
        return self.timeout_iters

    @property
    def batching(self) -> int:
        return self.batching_wait_iters

    @property
    def mbs(self) -> int:
        return self.max_batch_size


# ----- variables, inputs, what the guards see ----------------------------------------------

OPEN, WAITING = "open", "waiting"
STATES = (OPEN, WAITING)
STATE_DOC = {OPEN: "no waiting iterations counted (adp_ctx_waiting_iters_count = 0)",
             WAITING: "holding context requests until every rank has some (adp_ctx_waiting_iters_count > 0)"}


class State(NamedTuple):
    control: str = OPEN
    waiting: int = 0  # adp_ctx_waiting_iters_count
    batched: int = 0  # adp_ctx_batching_wait_iters_count


INIT = State()
STATE_FIELDS = (
    Field("waiting", COUNT, "adp_ctx_waiting_iters_count", sym="wait"),
    Field("batched", COUNT, "adp_ctx_batching_wait_iters_count", sym="bat"),
)


def type_ok(o: Any, c: Any, st: Any) -> Any:
    return o.And(o.Or(st.control == OPEN, st.control == WAITING), (st.control == WAITING) == (st.waiting > 0),
                 st.waiting >= 0, st.batched >= 0, st.batched <= c.batching,
                 o.Or(st.waiting == 0, st.waiting < c.timeout))


class BalanceInput(NamedTuple):
    """What the scheduler picked this iteration, before the balance."""

    num_ctx: int = 0  # scheduled context requests
    num_gen: int = 0  # scheduled generation requests


INPUTS = (
    Field("num_ctx", COUNT, "context requests the scheduler picked on this rank", default=0, sym="ctx"),
    Field("num_gen", COUNT, "generation requests the scheduler picked on this rank", default=0, sym="gen"),
)


class Local(NamedTuple):
    waiting: Any
    batched: Any
    num_ctx: Any
    num_gen: Any


def local_for(o: Any, st: Any, now: Any, inp: Any) -> Local:
    return Local(st.waiting, st.batched, inp.num_ctx, inp.num_gen)


def local_domain(o: Any, c: Any, st: Any, now: Any, inp: Any) -> list:
    return [inp.num_ctx >= 0, inp.num_gen >= 0]


# ----- the row and the view ----------------------------------------------------------------

ROW = (
    Field("no_ctx", BOOL, "the rank has no context request (num_ctx == 0)"),
    Field("no_gen", BOOL, "the rank has no generation request (num_gen == 0)"),
    Field("batch_full", BOOL, "the rank has no free slot (num_gen >= max_batch_size)"),
)


def local_row(o: Any, c: Any, inp: BalanceInput, s: Local) -> list:
    return [o.b2i(inp.num_ctx == 0), o.b2i(inp.num_gen == 0), o.b2i(inp.num_gen >= c.mbs)]


class View(NamedTuple):
    n: Any
    no_ctx_any: Any
    no_gen_any: Any
    full_any: Any


VIEW_FOLD = (
    Agg("n", "count", None, doc="counted rows"),
    Agg("no_ctx_any", "any", "no_ctx", COUNTED),
    Agg("no_gen_any", "any", "no_gen", COUNTED),
    Agg("full_any", "any", "batch_full", COUNTED),
)


def view_domain(o: Any, c: Any, v: View) -> list:
    """One row has no generation request or a full batch, not both; with max_batch_size 1 it has one of them."""
    return [v.n >= 1, o.Or(v.n >= 2, o.Not(o.And(v.no_gen_any, v.full_any))), o.Or(c.mbs >= 2, v.no_gen_any, v.full_any)]


# ----- guards --------------------------------------------------------------------------------


def ready(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Every rank has context requests and a free slot (all_ranks_have_ctx_requests and free_ctx_slots)."""
    return o.And(o.Not(v.no_ctx_any), o.Not(v.full_any))


def all_gen(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Every rank has generation requests: a hold is hidden behind decode everywhere."""
    return o.Not(v.no_gen_any)


def batching_owed(o: Any, c: Any, v: Any, s: Any) -> Any:
    """adp_ctx_batching_wait_iters_count < batching_wait_iters."""
    return s.batched < c.batching


def timed_out(o: Any, c: Any, v: Any, s: Any) -> Any:
    """adp_ctx_waiting_iters_count + 1 >= timeout_iters: this hold would reach the timeout."""
    return s.waiting + 1 >= c.timeout


def batch_hold(o: Any, c: Any, v: Any, s: Any) -> Any:
    """A ready pass holds for batching: the wait is owed (and, with one-hold-clock, the timeout not reached)."""
    if has(c, ONE_HOLD_CLOCK):
        return o.And(batching_owed(o, c, v, s), o.Not(timed_out(o, c, v, s)))
    return batching_owed(o, c, v, s)


TABLE_GUARDS = ("ready", "all_gen", "batch_hold", "timed_out")

# ----- the table, its effects, the decision ----------------------------------------------------

REASONS = ("no_wait", "no_decode", "wait_timeout", "delay")
BATCH, RELEASE_BATCH, WAIT, RESET = "batch", "release-batch", "wait", "reset"
EFFECT_DOC = {
    BATCH: "batched += 1; waiting = 0 (one-hold-clock: waiting += 1)",
    RELEASE_BATCH: "batched = 0; waiting = 0",
    WAIT: "waiting += 1",
    RESET: "waiting = 0 (one-hold-clock: batched = 0 after a timeout)",
}


def build_table(profile: str) -> Table:
    from ..registry import resolve_profile

    profile = resolve_profile(profile)
    hold_dest = WAITING if ONE_HOLD_CLOCK in _PROFILE[profile].features else OPEN
    rows: list[Transition] = []
    for src in STATES:
        rows += [
            Transition(f"{src}_batch", NEGOTIATE, src, hold_dest, lits("ready", "all_gen", "batch_hold"), "delay", (BATCH,)),
            Transition(f"{src}_go", NEGOTIATE, src, OPEN, lits("ready", "all_gen", "!batch_hold"), "no_wait",
                       (RELEASE_BATCH,), True),
            Transition(f"{src}_ready_no_gen", NEGOTIATE, src, OPEN, lits("ready", "!all_gen"), "no_decode", (RESET,), True),
            Transition(f"{src}_wait", NEGOTIATE, src, WAITING, lits("!ready", "all_gen", "!timed_out"), "delay", (WAIT,)),
            Transition(f"{src}_timeout", NEGOTIATE, src, OPEN, lits("!ready", "all_gen", "timed_out"), "wait_timeout",
                       (RESET,), True),
            Transition(f"{src}_no_gen", NEGOTIATE, src, OPEN, lits("!ready", "!all_gen"), "no_decode", (RESET,), True),
        ]
    return resolve(profile, STATES, rows, {name: globals()[name] for name in TABLE_GUARDS})


class Decision(NamedTuple):
    next_state: State
    output_allow: bool
    output_reason: str


DECISION_FIELDS = (
    Field("output_allow", BOOL, "the iteration runs its context requests", trace="allow"),
    Field("output_reason", REASON, "why", trace="reason"),
)
DECISION_KEY = ("output_allow", "output_reason")


def decide(o: Any, c: Any, t: Transition, v: Any, s: Any) -> Decision:
    one_clock = has(c, ONE_HOLD_CLOCK)
    if BATCH in t.effects:
        nxt = State(t.dest, s.waiting + 1 if one_clock else 0, s.batched + 1)
    elif RELEASE_BATCH in t.effects:
        nxt = State(t.dest, 0, 0)
    elif WAIT in t.effects:
        nxt = State(t.dest, s.waiting + 1, s.batched)
    else:  # a release by the timeout or for want of generation requests
        nxt = State(t.dest, 0, 0 if one_clock else s.batched)
    return Decision(nxt, t.allows, t.reason)  # type: ignore[arg-type]


# ----- properties ----------------------------------------------------------------------------


def holds(o: Any, c: Any, v: Any, d: Any) -> Any:
    return o.Not(d.output_allow)


def _hold_bound(o: Any, c: Any) -> Any:
    return c.timeout + c.batching


def _run_couple(o: Any, c: Any, st: Any, run: Any) -> Any:
    """With one hold count, the run is that count (a held pass leaves it at least 1)."""
    if has(c, ONE_HOLD_CLOCK):
        return run == st.waiting
    return run >= 0


def _all(*refuted: str) -> dict[str, str]:
    return {p.name: (REFUTED if p.name in refuted else PROVED) for p in PROFILES}


INVARIANTS = (
    Invariant("guards-partition", "from each state, exactly one negotiate guard holds for every input", _all(), "guards-partition"),
    Invariant(
        "bounded-delay",
        "every run of consecutive held passes is at most timeout_iters + batching_wait_iters passes long",
        _all(RELEASE),
        RunBound(
            "bounded-delay", counts=holds, limit=_hold_bound, couple=_run_couple,
            trace_text="rank {rank} holds its context requests {length} consecutive passes (passes {start}..{end}), "
            "more than timeout_iters + batching_wait_iters = {limit}",
            log_text="holds {run}+ consecutive passes (from pass {start}), more than timeout_iters + "
            "batching_wait_iters = {limit}",
            log_text_done="holds {run} consecutive passes (passes {start}..{end}), more than timeout_iters + "
            "batching_wait_iters = {limit}",
        ),
        "the batching count survives a waiting phase and the waiting count restarts on every ready pass",
    ),
    Invariant(
        "must-fire",
        "when some counted rank has no generation request (no decode hides a hold), no rank holds",
        _all(),
        PassRule(
            "must-fire",
            premise=lambda o, c, v, d: v.no_gen_any,
            claim=lambda o, c, v, d: d.output_allow,
            explain=lambda v, d: f"some counted rank has no generation request, yet the pass holds ({d.output_reason!r})",
        ),
    ),
    Invariant(
        "agreement",
        "ranks that share the counts and the gathered rows decide alike whatever their own requests",
        _all(),
        Agreement("agreement"),
    ),
    Invariant(
        "agreement-equal-args",
        "agreement for ranks with equal requests (there is no clock to skew)",
        _all(),
        Agreement("agreement-equal-args", equal_args=True),
    ),
    Invariant(
        "joint-progress",
        "in every window of timeout_iters + batching_wait_iters + 1 consecutive passes there is one on which no "
        "rank holds",
        _all(RELEASE),
        GroupRunBound(
            "joint-progress", counts=holds, window=lambda o, c: c.timeout + c.batching + 1, couple=_run_couple,
            window_text="timeout_iters + batching_wait_iters + 1", who="holds", some="a holding rank",
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
        "the table equals an independent encoding of _balance_adp_requests",
        _all(),
        "refinement",
    ),
)


def reference_pass(o: Any, c: Any, st: Any, v: Any, now: Any, inp: Any) -> tuple[dict, tuple]:
    """_balance_adp_requests, restated branch by branch (one-hold-clock: the hardened counts)."""
    free = o.Not(v.full_any)
    have_ctx = o.Not(v.no_ctx_any)
    have_gen = o.Not(v.no_gen_any)
    one = ONE_HOLD_CLOCK in c.features
    timeout_now = st.waiting + 1 >= c.timeout
    owed = o.And(st.batched < c.batching, o.Not(timeout_now)) if one else st.batched < c.batching
    hold_batch = o.And(free, have_ctx, have_gen, owed)
    hold_wait = o.And(o.Not(o.And(free, have_ctx)), have_gen, o.Not(timeout_now))
    ready = o.And(free, have_ctx)
    waiting = o.If(hold_batch, st.waiting + 1 if one else 0, o.If(hold_wait, st.waiting + 1, 0))
    batched = o.If(hold_batch, st.batched + 1,
                   o.If(o.And(ready, have_gen), 0, o.If(o.And(o.Not(ready), have_gen, timeout_now), 0 if one else st.batched,
                                                         o.If(o.Not(have_gen), 0 if one else st.batched, st.batched))))
    allow = o.Not(o.Or(hold_batch, hold_wait))
    reason = o.If(o.Not(allow), 3, o.If(o.Not(have_gen), 1, o.If(ready, 0, 2)))
    control = o.If(waiting > 0, 1, 0)
    return {"output_reason": reason, "output_allow": allow}, (control, waiting, batched)


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    return [o.If(inp.num_ctx == 0, 1, 0), o.If(inp.num_gen == 0, 1, 0), o.If(inp.num_gen >= c.mbs, 1, 0)]


# ----- what the proofs range over ------------------------------------------------------------


@dataclass
class SymConfig(Layout):
    profile: str
    enable_dp_attention: bool
    dp_size: Any
    attn_tp_size: int
    timeout: Any
    batching: Any
    mbs: Any
    attn_cp_size: int = 1

    @property
    def features(self) -> frozenset[str]:
        return _PROFILE[self.profile].features


def sym_config(o: Any, fam: Family, tag: str = "") -> SymConfig:
    return SymConfig(fam.profile, fam.enable_dp_attention, o.Int(f"dp_size{tag}") if fam.enable_dp_attention else 1, 1,
                     o.Int(f"timeout{tag}"), o.Int(f"batching{tag}"), o.Int(f"mbs{tag}"))


def config_domain(o: Any, c: SymConfig) -> list:
    dom = [c.timeout >= 0, c.timeout <= MAX_COUNT, c.batching >= 0, c.batching <= MAX_COUNT, c.mbs >= 1, c.mbs <= MAX_COUNT]
    if not isinstance(c.dp_size, int):
        dom += [c.dp_size >= 1]
    return dom


def scope_ranges(fams: Any) -> str:
    return "dp_size any >= 1, timeout_iters any >= 0, batching_wait_iters any >= 0, max_batch_size any >= 1"


def witness_row(o: Any, c: Any, v: Any) -> tuple:
    inp = BalanceInput(o.If(v.no_ctx_any, 0, 1), o.If(v.full_any, c.mbs, o.If(v.no_gen_any, 0, 1)))
    return inp, Local(o.IntVal(0), o.IntVal(0), inp.num_ctx, inp.num_gen)


def split_view(o: Any, v: Any) -> Any:
    """The other rows' view when ``witness_row`` is one row of ``v``: it gives the full batch, they the empty one."""
    return v._replace(n=v.n - 1, full_any=o.If(v.no_gen_any, o.BoolVal(False), v.full_any))


def layout_witness(o: Any, c: Any, v: Any, group: int, counted: bool, groups: int) -> tuple:
    if group == 0:
        return witness_row(o, c, v)
    rest = split_view(o, v)
    inp = BalanceInput(o.If(v.no_ctx_any, 0, 1), o.If(rest.no_gen_any, 0, o.If(rest.full_any, c.mbs, 1)))
    return inp, Local(o.IntVal(0), o.IntVal(0), inp.num_ctx, inp.num_gen)


def idle_row(o: Any) -> tuple:
    inp = BalanceInput(o.IntVal(1), o.IntVal(1))
    return inp, Local(o.IntVal(0), o.IntVal(0), inp.num_ctx, inp.num_gen)


def bmc_config(o: Any, c: SymConfig) -> tuple[list, Any]:
    assertions = [*config_domain(o, c), c.timeout <= 4, c.batching <= 4, c.mbs <= 16]

    def trace_config(val: Any, ranks: int) -> dict:
        return {"dp_size": ranks, "attn_tp_size": 1, "enable_dp_attention": True, "timeout_iters": val(c.timeout),
                "batching_wait_iters": val(c.batching), "max_batch_size": val(c.mbs), "attn_cp_size": 1}

    return assertions, trace_config


def _sim_inputs(facts: Any) -> BalanceInput:
    """What the simulated scheduler would pick before the balance: context requests (the chunk in progress, and
    waiting requests up to the free slots when the head fits; only whether there are any reaches the row) and
    generation requests (the running batch). The balance empties the iteration's context requests, chunked
    ones included, so a hold holds a chunk in progress too."""
    free = max(0, facts.max_running_requests - facts.running_batch)
    ctx = int(facts.chunk_in_progress) + (min(facts.waiting_queue_len, free) if facts.head_fits else 0)
    return BalanceInput(ctx, facts.running_batch)


def _sim_params(settings: Any) -> dict[str, Any]:
    """The batch's slots are the simulated scheduler's running-request limit."""
    return {"max_batch_size": settings["max_running_requests"]} if "max_running_requests" in settings else {}


SYMBOLS = (
    Symbol(VIEW, "n", "n", "counted rows"),
    Symbol(VIEW, "no_ctx_any", "any_no_ctx", "some counted rank has no context request"),
    Symbol(VIEW, "no_gen_any", "any_no_gen", "some counted rank has no generation request"),
    Symbol(VIEW, "full_any", "any_full", "some counted rank has no free slot"),
    Symbol(LOCAL, "waiting", "waiting", "adp_ctx_waiting_iters_count"),
    Symbol(LOCAL, "batched", "batched", "adp_ctx_batching_wait_iters_count"),
    Symbol(LOCAL, "num_ctx", "num_ctx", "this rank's context requests"),
    Symbol(LOCAL, "num_gen", "num_gen", "this rank's generation requests"),
    Symbol(CONFIG, "timeout", "T", "timeout_iters"),
    Symbol(CONFIG, "batching", "B", "batching_wait_iters"),
    Symbol(CONFIG, "mbs", "max_batch_size", "max_batch_size"),
)

POLICY = Policy(
    name=NAME,
    title="TensorRT-LLM's attention-DP balance",
    summary="hold context requests until every DP rank has some and a free slot, then batching_wait_iters more "
    "iterations while every rank decodes; timeout_iters bounds the first wait (TensorRT-LLM attention_dp_config)",
    source="tensorrt_llm/_torch/pyexecutor/py_executor.py (PyExecutor._balance_adp_requests, _schedule) and "
    "tensorrt_llm/llmapi/llm_args.py (AttentionDpConfig) of NVIDIA/TensorRT-LLM; the registry's tensorrt-llm is a "
    "stub that fetches the wheel from NVIDIA's index",
    upstream_url="https://github.com/NVIDIA/TensorRT-LLM/pull/{}",
    config_cls=BalanceConfig,
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
    shared=("control", "waiting", "batched"),
    inputs=INPUTS,
    input_cls=BalanceInput,
    local_cls=Local,
    local_for=local_for,
    local_inputs=("num_ctx", "num_gen"),
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
                      "timeout_iters", "batching_wait_iters", "max_batch_size", "attn_cp_size")),
    log=LogSchema(
        readings=(("num_ctx", "num_ctx"), ("num_gen", "num_gen")),
        inputs_from_row=lambda o, row, r: BalanceInput(r["num_ctx"], r["num_gen"]),
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
        split_view=split_view,
        idle_row=idle_row,
        layout_witness=layout_witness,
        reference=reference_pass,
        reference_row=reference_row,
        bmc_config=bmc_config,
        bmc_search={
            "bounded-delay": (lambda f: f.enable_dp_attention, None),
            "joint-progress": (lambda f: f.enable_dp_attention, None),
        },
    ),
    host=None,  # SGLang's call sites do not run it (README: what a scheduler would pass)
    sim=SimBinding(call_site="gate", inputs=_sim_inputs, idle_inputs=_sim_inputs, gates_partial_chunk=True,
                   params=_sim_params,
                   colours={"no_wait": "#2ca02c", "no_decode": "#9467bd", "wait_timeout": "#ff7f0e", "delay": "#d62728"}),
    extras={"docs": {
        "engine": "TensorRT-LLM",
        "releases_intro": "TensorRT-LLM's `PyExecutor._balance_adp_requests` (`attention_dp_config.enable_balance`) is "
        "the profile `trtllm-adp-balance`; `adp-hardened` gives both kinds of hold one count the timeout bounds.",
    }},
    guard_names=("ready", "all_gen", "batching_owed", "timed_out", "batch_hold"),
)
