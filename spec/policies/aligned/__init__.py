"""``aligned``: SGLang's prefill delayer, hardened, that never holds a mixed pass no decode can hide.

Ours. Designed with the simulator on SGLang #35241's closed loop (``docs/simulation.md``):
when the DP controller's rotation leaves some ranks without prefill work, every
released profile settles in a persistent ``mixed`` loop in which each mixed pass
delays the prefillable ranks up to ``max_delay_passes`` times. In that loop no rank
runs a decode batch (one output token per request), so the delays overlap
nothing: they cost TTFT and passes and align nothing a later pass would not.

The policy is ``hardened``'s delayer (every variable, input, row field, view field
and guard of ``spec/policies/sglang_delayer``, not restated) with two changes. The
feature ``no-decode-fire``: a mixed pass with no counted rank below the
watermark delays only while some counted rank has a running batch
(``decode_running``: the gathered max of ``running_batch`` is positive);
otherwise it allows at once with reason ``no_decode`` (a must-fire: nothing
hides the wait). With decode running (and the quorum off) it is ``hardened`` pass for pass, so it
keeps every property ``hardened`` proves, the token-watermark force-allow and the
pass cap (the stall give-up, counted in passes, no clock) included. The feature
``long-chunk-allow`` (``chunk``): an ``all`` pass that hardened would hold allows at
once (``long_chunk``) while some counted rank is mid-way through a chunked prompt
with at least ``long_chunk_tokens`` (SGLang's ``--chunked-prefill-size``) left: that
rank prefills whatever the verdict, so the hold aligns nothing with it.

Below the load at which delaying pays it does not delay at all: its own parameter
``low_load_watermark`` (default ``LOW_LOAD_WATERMARK``, 0.28) is the token-usage
watermark of hardened's force-allow whenever SGLang's
``--prefill-delayer-token-usage-low-watermark`` is unset (that option, when set,
replaces it; ``low_load_watermark=None`` turns it off). A pass on which some counted
rank can prefill with its KV token usage below it allows at once
(``token_watermark``), the row and the proved ``force-allow`` of hardened (less the
passes with a busy rank, below); the proofs cover every watermark. KV usage is the
load signal the delayer already reads: it is the running requests weighted by
their context, so it is low when decode slots are free or the prompts are short,
which is where a lone rank's prefill pass costs about the decode floor and a delay
only adds its passes to TTFT (docs/simulation.md, the benchmark suite: at 50% load,
on the decode-heavy mix and on #32880 the delayer's waits are the whole distance to
``off``). Above it the ranks' unaligned prefill passes are what saturates a DP group
(Poisson at 80%: ``off``'s TTFT p99 6.4 s against 0.86 s held), and the policy holds
as hardened does. The value is the simulator's (suite ``default``, 1M KV tokens per
rank): a deployment with another KV pool or context mix should set it. The feature
``busy-hold`` (``busy``): while that watermark is aligned's own, it forces no pass on
which some counted rank's KV usage is at or above ``busy_watermark`` (0.5): a low rank
beside a half-full one has drained, the group is not at low load (the long-short mix:
TTFT p99 11.0 s -> 7.0 s at seed 1, and 20.8 -> 12.3 s at seed 0 over 1,440 s).
The feature ``quorum-allow`` (``quorum``), off unless ``quorum_percent`` is set: a
mixed pass on which at least that percentage of the counted ranks have prefill work,
but not all, allows at once (``quorum``); the hold would wait for a request to reach
a rank with none (chat with long outputs at 80% load: TTFT p99 1.92 s -> 1.02 s at
75). On the suite ``aligned`` was designed on it changes no verdict.
The chunk hold, off unless ``chunk_hold_tokens`` is set, is an action, not a rule:
no verdict changes. A refusal also holds this rank's chunk in flight while more than
that many of its prompt tokens are left and every counted rank has prefill work, so
the chunk waits for the group's next prefill pass instead of running one of its own
(``chunk.chunk_hold``, ``quorum.all_have_work``; the plugin parks it at
``add_chunked_req``, ``integrations/sglang/chunk_hold``). ATOM's coalescer holds its
chunks so, and owes its lead on the long-short mix to it (docs/simulation.md); at
4,096 that mix's TTFT p99 falls by 4-22% (6.69 s -> 5.55 s at seed 0).

Its slot trigger negotiates with SGLang 0.5.17's ``max_prefill_bs``, the largest batch
admitted decayed ×0.998 a pass (``spec.trackers.DecayingMax``), not with the window of the
last 16 attempts that 0.5.18 on passes (#34284): near saturation the window's value swings
with every vetoed attempt's estimate (1-31 on Poisson at 100%), the decayed one holds the
batch the rank really admits, and the slot trigger holds fewer passes for nothing
(docs/simulation.md, the tracker). On 0.5.18 on the delayer keeps it itself, from the
executor's ``finalize(actual_prefill_bs=)`` (``HostBinding.own_max_prefill_bs``), and
negotiates with it in place of the call's ``max_prefill_bs``; on 0.5.17 the call's
argument is that tracker already. The proofs hold for every ``max_prefill_bs``.

Inputs: the arguments of SGLang's delayer call sites (``running_batch`` is already
gathered; ``token_usage`` is the call site's own), run as the plugin and the
simulator's SGLang path run SGLang's delayer, and two more, which the plugin reads
from the scheduler (``HostBinding.reads``) and the decision log records as readings:
``chunk_tokens_left`` (the long-chunk allow) and ``waiting_at_start`` (the quorum's
work bit: a rank whose running batch is full reaches no call site, so SGLang's call
does not say that it has requests queued).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Optional

from ...config import is_int, is_real, plain
from ...errors import ConfigError
from ...fields import MAX_COUNT
from ...monitors import PassRule
from ...policy import PROVED, Feature, Invariant, Param, Profile, chunk_held
from ...table import NEGOTIATE, Transition, lits, resolve
from ...trackers import DECAY
from .. import sglang_delayer as base
from ..sglang_delayer import bindings, properties, reference
from ..sglang_delayer.table import CLEAR, CONSUME_SKIP, REASONS as BASE_REASONS, build_table as base_build_table
from ..sglang_delayer.variables import RELEASED
from . import busy, chunk, guards, quorum

NAME = "aligned"
NO_DECODE_FIRE = "no-decode-fire"
BUSY_HOLD = "busy-hold"
NO_DECODE = "no_decode"
LONG_CHUNK_ALLOW = "long-chunk-allow"
LONG_CHUNK = "long_chunk"
QUORUM_ALLOW = "quorum-allow"
QUORUM = "quorum"
REASONS = BASE_REASONS + (NO_DECODE, LONG_CHUNK, QUORUM)

FEATURE = Feature(
    NO_DECODE_FIRE,
    "a mixed pass no decode hides",
    before="a mixed pass delays while delayed_count < max_delay_passes - 1, whether or not any rank decodes",
    after="a mixed pass (no counted rank below the watermark) delays only while some counted rank has a running "
    "batch; with none it allows at once with no_decode",
    why="SGLang #35241's persistent mixed loop: with no decode batch anywhere each delay idles every rank and aligns "
    "nothing; TTFT p99 pays for up to max_delay_passes delays per admission",
    upstream=(35241,),
    since=None,
    shows_in=("wait_hidden", "mixed_delay", "mixed_timeout", "mixed_fire"),
    invariant="no-decode-hold",
)
CHUNK_FEATURE = Feature(
    LONG_CHUNK_ALLOW,
    "an all pass beside a long chunk",
    before="an all pass whose trigger holds delays, whatever the ranks' chunks in flight",
    after="an all pass whose trigger holds allows at once with long_chunk while some counted rank is mid-way through a "
    "chunked prompt with at least long_chunk_tokens left",
    why="that rank prefills every pass whatever the verdict (add_chunked_req goes on), so the delay aligns nothing with "
    "it and only adds to the other ranks' TTFT (the suite's long-short mix: TTFT p99 8.04 s -> 6.40 s in the "
    "simulator, no other workload moved)",
    upstream=(35241,),
    since=None,
    shows_in=("all_delay", "all_timeout", "all_chunk"),
    invariant="",
)
BUSY_FEATURE = Feature(
    BUSY_HOLD,
    "a low rank beside a busy one",
    before="a pass allows with token_watermark whenever some counted rank can prefill with its KV usage below the "
    "watermark, whatever the others' usage",
    after="while the watermark is aligned's own low_load_watermark (SGLang's unset), a pass on which some counted rank's "
    "KV usage is at or above busy_watermark forces nothing: it decides as though no rank were below the watermark",
    why="a rank below the low-load watermark beside half-full ones has drained, the group is not at low load, and its "
    "forced pass is an unaligned prefill (the suite's long-short mix at seed 1: TTFT p99 11.0 s -> 6.98 s in the "
    "simulator; no workload below the watermark's load moved)",
    upstream=(),
    since=None,
    shows_in=("exists_force",),
    invariant="force-allow",
)
QUORUM_FEATURE = Feature(
    QUORUM_ALLOW,
    "a mixed pass most ranks are ready for (opt-in)",
    before="a mixed pass delays while delayed_count < max_delay_passes - 1 (and, with no decode, the must-fire allows), "
    "however many counted ranks can prefill",
    after="with quorum_percent set, a mixed pass (no counted rank forcing) on which at least quorum_percent of the "
    "counted ranks have prefill work (can prefill, or have requests queued), but not all, allows at once with quorum",
    why="a hold waits for work to reach the last few ranks and saves at most one pass's attention term, while every "
    "request on the ready ranks waits a pass per hold (chat with long outputs at 80% load, seed 0: TTFT p99 1.92 s -> "
    "1.02 s in the simulator at 75; on the suite aligned was designed on it changes no verdict, so it is off by default)",
    upstream=(),
    since=None,
    shows_in=("mixed_quorum",),
    invariant="",
)
PROFILES = (
    Profile(NAME, base.POLICY.features_of("hardened") | {NO_DECODE_FIRE, LONG_CHUNK_ALLOW, BUSY_HOLD, QUORUM_ALLOW}, (),
            "hardened's delayer; a mixed pass with no running decode batch anywhere allows at once (no_decode); an "
            "all pass beside a long chunk in flight allows at once (long_chunk); its own low-load watermark forces "
            "nothing while some rank is busy; with quorum_percent set, a mixed pass most ranks, but not all, have "
            "prefill work for allows at once (quorum)"),
)
_NAMES = tuple(p.name for p in PROFILES)

# The max_prefill_bs the slot trigger negotiates with: SGLang 0.5.17's decaying high-watermark, kept by the delayer
# itself from the executor's finalize(actual_prefill_bs=) (docs above), not 0.5.18+'s window of 16 attempts.
OWN_MAX_PREFILL_BS = DECAY

# The token-usage watermark below which aligned never delays, when SGLang's own option is unset: the load at which
# a delay starts to pay, in KV usage (docs above; the simulator's suite default, 1M KV tokens per rank).
LOW_LOAD_WATERMARK = 0.28

PARAMETERS = tuple(
    p if p.name != "profile" else Param("profile", NAME, "one of " + ", ".join(_NAMES),
                                        lambda v: isinstance(v, str) and v in _NAMES)
    for p in base.PARAMETERS
) + (
    Param("low_load_watermark", LOW_LOAD_WATERMARK,
          "None (off) or a finite number in [0, 1]: the force-allow watermark while token_usage_low_watermark is unset",
          lambda v: v is None or (is_real(v) and math.isfinite(v) and 0.0 <= v <= 1.0)),
    Param("busy_watermark", busy.BUSY_WATERMARK,
          "None (off) or a finite number in (low_load_watermark, 1]: the KV token usage at which a rank is busy; while "
          "some counted rank is, low_load_watermark forces no pass",
          lambda v: v is None or (is_real(v) and math.isfinite(v) and 0.0 < v <= 1.0)),
    Param("long_chunk_tokens", chunk.LONG_CHUNK_TOKENS,
          f"None or an integer <= {MAX_COUNT}: the prompt tokens left of a chunk in flight at which an all pass allows "
          "at once; None, 0 or below (SGLang's --chunked-prefill-size -1: no chunking) turn the rule off",
          lambda v: v is None or (is_int(v) and v <= MAX_COUNT), server_arg="chunked_prefill_size"),
    Param("quorum_percent", None,
          "None (off) or an integer in [1, 100]: a mixed pass on which at least this percentage of the counted ranks, "
          "but not all, have prefill work allows at once (quorum)",
          lambda v: v is None or (is_int(v) and 1 <= v <= 100)),
    Param("chunk_hold_tokens", None,
          f"None (off) or an integer in [0, {MAX_COUNT}]: a refusal also holds this rank's chunk in flight while it has "
          "more than this many prompt tokens left (the plugin parks it at add_chunked_req); no verdict changes",
          lambda v: v is None or (is_int(v) and 0 <= v <= MAX_COUNT)),
)


@dataclass(frozen=True)
class AlignedConfig(base.DelayerConfig):
    """The delayer's configuration; its one profile is ``aligned``; ``low_load_watermark`` is the watermark of the
    force-allow while SGLang's ``token_usage_low_watermark`` is unset (that one, when set, replaces it)."""

    profile: str = NAME
    low_load_watermark: Optional[float] = LOW_LOAD_WATERMARK
    busy_watermark: Optional[float] = busy.BUSY_WATERMARK
    long_chunk_tokens: Optional[int] = chunk.LONG_CHUNK_TOKENS
    quorum_percent: Optional[int] = None
    chunk_hold_tokens: Optional[int] = None

    policy_name = NAME

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.low_load_watermark is not None:
            object.__setattr__(self, "low_load_watermark", float(self.low_load_watermark))
        if self.busy_watermark is not None:
            object.__setattr__(self, "busy_watermark", float(self.busy_watermark))
            if self.low_load_watermark is not None and self.busy_watermark <= self.low_load_watermark:
                raise ConfigError(f"busy_watermark={plain(self.busy_watermark)} must be above low_load_watermark="
                                  f"{plain(self.low_load_watermark)} (a rank below the watermark is never a busy one), or "
                                  "None to turn the busy rule off")
        if self.long_chunk_tokens is not None and self.long_chunk_tokens < 1:  # SGLang's "no chunking": no chunk
            object.__setattr__(self, "long_chunk_tokens", None)

    @property
    def busy_on(self) -> bool:
        """The busy rule is read: a busy watermark, beside aligned's own low-load watermark (SGLang's unset)."""
        return self.busy_watermark is not None and self.token_usage_low_watermark is None and self.low_load_watermark is not None

    @property
    def busy_min(self) -> float:
        """The usage the row compares with (any value while the rule is off: the bit is then 0)."""
        return 1.0 if self.busy_watermark is None else self.busy_watermark

    @property
    def quorum_on(self) -> bool:
        return self.quorum_percent is not None

    @property
    def quorum_min(self) -> int:
        """The percentage the view compares with (any value while the rule is off: the guard is then false)."""
        return 100 if self.quorum_percent is None else self.quorum_percent

    @property
    def long_chunk_on(self) -> bool:
        return self.long_chunk_tokens is not None

    @property
    def long_chunk_min(self) -> int:
        """The threshold the row compares with (any value while the rule is off: the bit is then 0)."""
        return 1 if self.long_chunk_tokens is None else self.long_chunk_tokens

    @classmethod
    def _parameters(cls) -> tuple[Param, ...]:
        return PARAMETERS

    @property
    def watermark_on(self) -> bool:
        return self.token_usage_low_watermark is not None or self.low_load_watermark is not None

    @property
    def watermark(self) -> float:
        if self.token_usage_low_watermark is not None:
            return self.token_usage_low_watermark
        return 0.0 if self.low_load_watermark is None else self.low_load_watermark


# ----- the table: the delayer's, its mixed delay rows guarded by decode_running and the quorum, the must-fire and
# the quorum allow; its all delay rows guarded by long_chunk, and the allow beside a long chunk -------------------


def build_table(profile: str) -> Any:
    """``hardened``'s rows for ``profile``'s features; a mixed pass delays or times out only while decode runs and
    the quorum (when set) is not met, an ``all`` pass only while no counted rank is mid-way through a long chunk."""
    table = base_build_table(profile)
    rows: list[Transition] = []
    for t in table:
        suffix = t.name.partition("_")[2]
        if suffix in ("mixed_delay", "mixed_timeout"):
            t = replace(t, lits=t.lits + lits("wait_hidden", "!quorum"))
        if suffix in ("all_delay", "all_timeout"):
            t = replace(t, lits=t.lits + lits("!long_chunk"))
        rows.append(t)
        if suffix == "mixed_timeout":
            rows.append(Transition(f"{t.source}_mixed_fire", NEGOTIATE, t.source, RELEASED,
                                   lits("status_mixed", "!exists_force", "!wait_hidden", "!quorum"), NO_DECODE, (CLEAR,),
                                   True))
            rows.append(Transition(f"{t.source}_mixed_quorum", NEGOTIATE, t.source, RELEASED,
                                   lits("status_mixed", "!exists_force", "quorum"), QUORUM, (CLEAR,), True))
        if suffix == "all_timeout":
            rows.append(Transition(f"{t.source}_all_chunk", NEGOTIATE, t.source, RELEASED,
                                   lits("status_all", "!exists_force", "delay_wanted", "long_chunk"), LONG_CHUNK,
                                   (CLEAR, CONSUME_SKIP), True))
    return resolve(table.profile, table.states, rows, {name: getattr(guards, name) for name in guards.TABLE_GUARDS})


# ----- the reference: the delayer's encoding, and the must-fire written apart ----------------------------------


def reference_pass(o: Any, c: Any, st: Any, v: Any, now: Any, inp: Any) -> tuple[dict, tuple]:
    """``hardened``'s reference, overridden where a mixed pass without force meets the quorum or has no running batch
    anywhere, and where an ``all`` pass without force that hardened holds (or times out) has a long chunk in flight;
    a busy rank (aligned's own watermark in force) counts no forcing rank."""
    v = v._replace(num_force=o.If(o.And(c.busy_on, v.num_busy > 0), 0, v.num_force))
    outputs, nxt = reference.reference_pass(o, c, st, v, now, inp)
    waiting = st.control == "delaying"
    held = o.If(waiting, st.delayed_count, 0)
    released = {
        "output_allow": True,
        "wait_forward_passes": o.If(waiting, st.delayed_count, 0),
        "wait_seconds": o.If(waiting, now - st.wait_start, 0),
    }
    mixed = o.And(v.num_prefillable > 0, v.num_prefillable < v.n, o.Not(v.num_force > 0))
    # the quorum, from its definition: num_work / n >= quorum_percent / 100, some counted rank with no work
    quorum_allow = o.And(mixed, c.quorum_on, v.num_work * 100 >= c.quorum_min * v.n, v.num_work != v.n)
    fire = o.And(mixed, v.running_batch == 0, held >= guards.NO_DECODE_HOLD)
    hardened_holds = o.Or(outputs["output_reason"] == BASE_REASONS.index("delay"),
                          outputs["output_reason"] == BASE_REASONS.index("wait_timeout"))
    chunk_allow = o.And(v.num_prefillable == v.n, o.Not(v.num_force > 0), hardened_holds, v.num_long_chunk > 0)
    # the skip flag as hardened leaves it: the all pass's trigger consumed it as a delay would have
    nxt_chunk = (reference.IDLE, 0, o.RealVal(0), nxt[3])
    nxt_fire = (reference.IDLE, 0, o.RealVal(0), st.skip_first_armed)
    out = {}
    for k, x in outputs.items():
        x = o.If(chunk_allow, released.get(k, REASONS.index(LONG_CHUNK)), x)
        x = o.If(fire, released.get(k, REASONS.index(NO_DECODE)), x)
        out[k] = o.If(quorum_allow, released.get(k, REASONS.index(QUORUM)), x)
    after = tuple(o.If(o.Or(quorum_allow, fire), a, o.If(chunk_allow, b, x)) for a, b, x in zip(nxt_fire, nxt_chunk, nxt))
    return out, after


# ----- properties: hardened's, and the must-fire ------------------------------------------------------------------

def _as_hardened(inv: Invariant) -> Invariant:
    return replace(inv, expected={NAME: inv.expected["hardened"]})


FORCE_ALLOW = PassRule(
    "force-allow",
    premise=lambda o, c, v, d: o.And(v.num_force > 0, o.Not(busy.busy_hold(o, c, v))),
    claim=properties.FORCE_ALLOW.claim,
    explain=lambda v, d: f"{v.num_force} counted rank(s) are prefillable below the token watermark and no counted rank "
    f"is busy, yet the pass decides allow={d.output_allow} reason={d.output_reason!r}",
)


def _for_aligned(inv: Invariant) -> Invariant:
    """hardened's verdict, but for the stall bound, which is what the must-fire adds (proved here, refuted there), and
    the force-allow, whose premise leaves out a pass with a busy rank while the watermark is aligned's own."""
    if inv.id == "force-allow":
        return replace(inv, statement="if any counted rank is prefillable with token usage below W, and (W being "
                       "aligned's own low_load_watermark) no counted rank's usage is at or above busy_watermark, the "
                       "pass allows with token_watermark", expected={NAME: PROVED}, check=FORCE_ALLOW)
    if inv.id == "no-decode-hold":
        return replace(inv, expected={NAME: PROVED}, note="the must-fire: a mixed pass with no running batch "
                       f"anywhere is held at most {guards.NO_DECODE_HOLD} passes, then allowed")
    return _as_hardened(inv)


INVARIANTS = tuple(_for_aligned(inv) for inv in properties.INVARIANTS if inv.id != "refinement") + (
    Invariant("refinement", "the FSM table equals an independently written encoding of hardened's code with the "
              "no-decode must-fire", {NAME: PROVED}, "refinement"),
)


def _debug_line(output: Any, actual_execution: bool) -> Any:
    """The delayer's debug lines; the must-fire, the long-chunk allow and the quorum log none (no timeout, no
    watermark)."""
    if output.output_reason in (NO_DECODE, LONG_CHUNK, QUORUM):
        return None
    return bindings.HOST.debug_line(output, actual_execution)


def _settings(c: Any) -> str:
    return (bindings.HOST.settings(c) + f" low_load_watermark={c.low_load_watermark} busy_watermark={c.busy_watermark} "
            f"long_chunk_tokens={c.long_chunk_tokens} quorum_percent={c.quorum_percent} "
            f"chunk_hold_tokens={c.chunk_hold_tokens}")


B = base.POLICY.proof
HOST = replace(bindings.HOST, reads=(chunk.CHUNK_FIELD, quorum.QUEUE_FIELD), debug_line=_debug_line, settings=_settings,
               own_max_prefill_bs=OWN_MAX_PREFILL_BS, chunk_hold=chunk.chunk_hold, chunk_hold_waits=quorum.all_have_work)


def _sim_chunk_held(core: Any, facts: Any) -> bool:
    """``SimBinding.gates_partial_chunk``: the host's chunk hold (``chunk_held``) on the simulated chunk's tokens left."""
    return chunk_held(HOST, core.config, facts.chunk_tokens_left, core.pass_view)


def bmc_config(o: Any, c: Any) -> tuple[list, Any]:
    """The delayer's counterexample configuration, with ``low_load_watermark`` off: the counterexample's watermark is
    SGLang's option alone (``token_usage_low_watermark``), so replaying an unset one must not bring ours in (nor the
    busy rule, which reads only beside ours); and a small ``long_chunk_tokens``, so a trace's chunks read at a glance."""
    assertions, trace_config = B.bmc_config(o, c)

    def aligned_trace_config(val: Any, ranks: int) -> dict:
        return {**trace_config(val, ranks), "low_load_watermark": None, "long_chunk_tokens": val(c.long_chunk_min) if val(c.long_chunk_on) else None}

    return [*assertions, c.long_chunk_min <= 1000, o.Not(c.busy_on), o.Not(c.quorum_on)], aligned_trace_config


POLICY = replace(
    base.POLICY,
    name=NAME,
    title="aligned: the hardened delayer with a must-fire when no decode hides the wait, and no hold beside a long chunk",
    summary="hardened's delayer, whose mixed pass with no running decode batch on any rank is held at most "
    f"{guards.NO_DECODE_HOLD} passes, then allowed (ours, from SGLang #35241's persistent mixed loop), and which "
    f"allows at once below {LOW_LOAD_WATERMARK:g} KV token usage (low_load_watermark) unless SGLang's watermark is set "
    f"or some rank is at {busy.BUSY_WATERMARK:g} or above (busy_watermark), "
    "and on an all pass beside a chunk in flight with a whole chunk left (long_chunk), and, with quorum_percent set, "
    "on a mixed pass that share of the ranks have prefill work for, but not all (quorum); its slot trigger negotiates "
    "with SGLang 0.5.17's decaying max_prefill_bs, which its delayer keeps itself on 0.5.18 on",
    source="ours: spec/policies/sglang_delayer's hardened profile and the features no-decode-fire, long-chunk-allow, "
    "busy-hold and quorum-allow",
    config_cls=AlignedConfig,
    params=PARAMETERS,
    profiles=PROFILES,
    features=base.POLICY.features + (FEATURE, CHUNK_FEATURE, BUSY_FEATURE, QUORUM_FEATURE),
    inputs=quorum.INPUTS,
    input_cls=quorum.PassInput,
    row=quorum.ROW,
    local_row=quorum.local_row,
    view=quorum.VIEW,
    view_cls=quorum.View,
    view_domain=quorum.view_domain,
    default_profile=NAME,
    release_aliases={},
    guards=guards,
    guard_names=guards.GUARD_NAMES,
    table_guards=guards.TABLE_GUARDS,
    reasons=REASONS,
    build_table=build_table,
    invariants=INVARIANTS,
    trace=quorum.TRACE,
    log=replace(quorum.LOG, reason_order=bindings.LOG.reason_order[:-1] + (NO_DECODE, LONG_CHUNK, QUORUM, "")),
    proof=replace(B, reference=reference_pass, reference_row=quorum.reference_row, bmc_config=bmc_config,
                  sym_config=quorum.sym_config, config_domain=quorum.config_domain, scope_ranges=quorum.scope_ranges,
                  witness_row=quorum.witness_row, split_view=quorum.split_view, idle_row=quorum.idle_row,
                  layout_witness=quorum.layout_witness),
    host=HOST,
    sim=replace(bindings.SIM, inputs=quorum.sim_inputs, idle_inputs=quorum.sim_idle, params=chunk.sim_params,
                gates_partial_chunk=_sim_chunk_held,
                colours={**bindings.SIM.colours, NO_DECODE: "#17becf", LONG_CHUNK: "#8c564b", QUORUM: "#bcbd22"}),
    symbols=base.POLICY.symbols + quorum.SYMBOLS,
    extras={"docs": {
        "engine": "SGLang",
        "no_features": "none",
        "releases_intro": "Ours, in no release: `aligned` is `hardened` plus the features `no-decode-fire`, "
        "`long-chunk-allow`, `busy-hold` and `quorum-allow` (off unless `quorum_percent` is set); it runs where "
        "`hardened` runs (the simulator's SGLang path, check-log, the plugin on "
        "SGLang 0.5.17 and later, whose `PrefillAdder.add_chunked_req` negotiates with the chunk it reads). It "
        "negotiates with SGLang 0.5.17's decaying `max_prefill_bs` (`spec/trackers.py`): on 0.5.18 on its delayer "
        "keeps that mark itself, from the executor's `finalize(actual_prefill_bs=)`, in place of the scheduler's "
        "argument (`HostBinding.own_max_prefill_bs`).",
        "where": {
            "features": "spec/policies/aligned/__init__.py",
            "invariants": "spec/policies/aligned/__init__.py",
            "scope": "spec/policies/sglang_delayer/scope.py, spec/policies/aligned/chunk.py, spec/policies/aligned/busy.py "
            "and spec/policies/aligned/quorum.py",
            "parameters": "spec/policies/sglang_delayer/config.py and spec/policies/aligned/__init__.py",
        },
    }},
)

__all__ = ["POLICY", "AlignedConfig", "build_table", "reference_pass"]
