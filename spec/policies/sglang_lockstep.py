"""SGLang's DP-attention phase lockstep (sgl-project/sglang #37273, open), on top of SGLang's prefill delayer.

What was read: the PR's description and review (#37273, 2026-08-31 .. 09-01) and its CPU
test of the phase verdict (five cases: a remote rank's chunk in flight makes a delayed
pass a prefill pass; the local in-flight bit is gathered in the row's last field; nobody
prefillable is a decode pass; a delayed mixed pass without a chunk in flight is a decode
pass; an allowed prefill is a prefill pass), which ``tests/test_lockstep.py`` restates.
The PR's code is not public in full; what follows is inferred from those.

What it does: ``--enable-dp-phase-lockstep`` makes every pass extend-or-idle or
decode-or-idle on all ranks. The phase rides the delayer's negotiation all-gather, with
one more field: ``prefill_in_flight``, 1 iff ``PrefillAdder.add_chunked_req`` admitted a
chunk this pass (a parked hybrid-SWA chunk reports 0). Every rank computes
``is_phase_prefill = any_prefill_in_flight or (output_allow and num_prefillable > 0)``
from the gathered rows; in a prefill phase a rank without prefill work runs an idle batch
instead of decoding. Inferred: the delayer's verdict itself is unchanged (the in-flight
bit only adds to the phase), the PR is against SGLang after 0.5.23, so its delayer is
0.5.22-0.5.23's (``lockstep``); ``lockstep-hardened`` runs it on the hardened delayer.

As a policy: the delayer's variables, guards and table, read from
``spec/policies/sglang_delayer`` (not restated); its row, view, inputs and decision each
one field longer; the phase a decision output, in the decision key (ranks in
agreement run the same phase). The catalogue adds ``decode-progress``: in every window of
max(max_delay_passes, 1) + 1 passes one is a decode phase. No profile has it: a chunk in
flight on any rank keeps every other rank idle for as long as its prompt has chunks, which
the scheduler's input, not the policy, bounds.

SGLang 0.5.23's call sites do not pass ``prefill_in_flight`` (its ``add_chunked_req``
negotiates before the chunk is admitted), and the idle batch is the scheduler's, so the
plugin does not run these profiles (the README says what the scheduler would pass). The
simulator supplies the in-flight bit (a rank with a chunk in progress negotiates at
``add_chunked_req``, which admits it whatever the verdict) and acts on the phase
(``SimBinding.prefill_phase``): in a prefill phase a rank without a prefill batch idles
instead of decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import collections
from typing import Any

from ..fields import BOOL, Field
from ..glossary import VIEW, Symbol
from ..monitors import GroupRunBound
from ..policy import REFUTED, Agg, Invariant, Param, Profile, TraceSchema
from . import sglang_delayer as base
from .sglang_delayer import bindings, config as base_config, properties, reference, scope

NAME = "sglang-lockstep"
IN_FLIGHT = "prefill_in_flight"

# ----- profiles: the delayer's features, the release's or the hardened set --------------------

_BASE_OF = {"lockstep": "sglang-0.5.22", "lockstep-hardened": "hardened"}
PROFILES = (
    Profile("lockstep", base.POLICY.features_of("sglang-0.5.22"), (),
            "PR #37273's phase lockstep on SGLang 0.5.22-0.5.23's delayer"),
    Profile("lockstep-hardened", base.POLICY.features_of("hardened"), (), "the phase lockstep on the hardened delayer"),
)
_NAMES = tuple(p.name for p in PROFILES)

PARAMETERS = tuple(
    p if p.name != "profile" else Param("profile", "lockstep", "one of " + ", ".join(_NAMES),
                                        lambda v: isinstance(v, str) and v in _NAMES)
    for p in base.PARAMETERS
)


@dataclass(frozen=True)
class LockstepConfig(base.DelayerConfig):
    """The delayer's configuration; its profiles are the lockstep's."""

    profile: str = "lockstep"

    policy_name = NAME

    @classmethod
    def _parameters(cls) -> tuple[Param, ...]:
        return PARAMETERS

# ----- inputs, row, view, decision: the delayer's, one field longer ------------------------------


def _extended(base: Any, name: str, field: str, *default: Any) -> Any:
    """``base``'s NamedTuple with one more field last (with ``default``, if given): the lockstep's one field more."""
    defaults = (*base._field_defaults.values(), *default)
    return collections.namedtuple(name, (*base._fields, field), defaults=defaults or None)


LockstepInput = _extended(base.PassInput, "LockstepInput", IN_FLIGHT, False)
IN_FLIGHT_INPUT = Field(IN_FLIGHT, BOOL, "add_chunked_req admitted a chunk on this rank this pass", default=False,
                        trace=IN_FLIGHT, sym="inflight")
INPUTS = base.POLICY.inputs + (IN_FLIGHT_INPUT,)
ROW = base.POLICY.row + (Field(IN_FLIGHT, BOOL, "a chunk of this rank's is in flight this pass"),)


def local_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    return base.local_row(o, c, inp, s) + [o.b2i(inp.prefill_in_flight)]


View = _extended(base.View, "View", "in_flight_any")  # some counted rank has a chunk in flight
VIEW_FOLD = base.POLICY.view + (Agg("in_flight_any", "any", IN_FLIGHT),)


Decision = _extended(base.Decision, "Decision", "phase_prefill", False)
PHASE_FIELD = Field("phase_prefill", BOOL, "is_phase_prefill: any_prefill_in_flight or (output_allow and num_prefillable > 0)",
                    trace="phase_prefill")
DECISION_FIELDS = base.POLICY.decision_fields + (PHASE_FIELD,)


def phase_prefill(o: Any, v: Any, allow: Any) -> Any:
    """is_phase_prefill: a chunk in flight on some counted rank, or an allowed pass with prefill work somewhere."""
    return o.Or(v.in_flight_any, o.And(allow, v.num_prefillable > 0))


def decide(o: Any, c: Any, t: Any, v: Any, s: Any) -> Any:
    d = base.decide(o, c, t, v, s)
    return Decision(*d, phase_prefill=phase_prefill(o, v, t.allows))


# ----- properties: the delayer's, each profile expected as its base; and decode-progress -----------


def _decode_window(o: Any, c: Any) -> Any:
    return base_config.progress_window(o, c) + 1


DECODE_PROGRESS = GroupRunBound(
    "decode-progress",
    counts=lambda o, c, v, d: d.phase_prefill,
    window=_decode_window,
    couple=lambda o, c, st, run: run >= 0,
    window_text="max(max_delay_passes, 1) + 1",
    who="is in a prefill phase",
    some="a prefill phase (ranks without prefill work idle)",
)


def _as_base(inv: Invariant) -> Invariant:
    return replace(inv, expected={p: inv.expected[b] for p, b in _BASE_OF.items()})


INVARIANTS = tuple(_as_base(inv) for inv in properties.INVARIANTS) + (
    Invariant(
        "decode-progress",
        "in every window of max(max_delay_passes, 1) + 1 consecutive passes there is a decode phase (no rank idled)",
        {p: REFUTED for p in _NAMES},
        DECODE_PROGRESS,
        "a chunk in flight on one rank keeps the pass a prefill phase: every other rank idles as long as its prompt "
        "has chunks",
    ),
)


def reference_pass(o: Any, c: Any, st: Any, v: Any, now: Any, inp: Any) -> tuple[dict, tuple]:
    outputs, nxt = reference.reference_pass(o, c, st, v, now, inp)
    return {**outputs, "phase_prefill": o.Or(v.in_flight_any, o.And(outputs["output_allow"], v.num_prefillable > 0))}, nxt


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    return reference.reference_row(o, c, inp, s) + [o.If(inp.prefill_in_flight, 1, 0)]


# ----- the proofs' stand-ins: the delayer's, the in-flight field added -------------------------


def _with_flight(made: tuple, flight: Any) -> tuple:
    inp, local = made
    return LockstepInput._make((*inp, flight)), local


def witness_row(o: Any, c: Any, v: Any) -> tuple:
    return _with_flight(scope.witness_row(o, c, v), v.in_flight_any)


def idle_row(o: Any) -> tuple:
    return _with_flight(scope.idle_row(o), o.BoolVal(False))


def layout_witness(o: Any, c: Any, v: Any, group: int, counted: bool, groups: int) -> tuple:
    return _with_flight(scope.layout_witness(o, c, v, group, counted, groups), o.And(counted, v.in_flight_any))


def _bridge(state: Any) -> Any:
    made = bindings.LOG.bridge(state) if bindings.LOG.bridge is not None else None
    if made is None:
        return None
    inputs, expect, note, what = made
    return {**inputs, IN_FLIGHT: False}, {**expect, "phase_prefill": True}, note, what


_new = tuple.__new__


def _sim_inputs(facts: Any) -> Any:
    """The delayer's inputs (a call site asks as prefillable, with the facts the delayer's binding reads) and the
    in-flight bit: a rank with a chunk in progress negotiates at add_chunked_req, which admits the chunk whatever the
    verdict, so its chunk is in flight this pass."""
    return _new(LockstepInput, (True, *bindings.SIM_FACTS(facts), facts.chunk_in_progress))


def _sim_idle(facts: Any) -> Any:
    return LockstepInput._make((*bindings.SIM.idle_inputs(facts), facts.chunk_in_progress))


B = base.POLICY.proof
POLICY = replace(
    base.POLICY,
    name=NAME,
    title="SGLang's DP-attention phase lockstep (#37273)",
    summary="every pass is a prefill phase or a decode phase on all ranks, from one more gathered bit (a chunk in "
    "flight) on top of SGLang's prefill delayer; ranks without prefill work idle in a prefill phase (open PR #37273)",
    source="sgl-project/sglang #37273 (open): its description, review and CPU test of is_phase_prefill; the delayer "
    "is spec/policies/sglang_delayer",
    config_cls=LockstepConfig,
    params=PARAMETERS,
    profiles=PROFILES,
    default_profile="lockstep",
    release_aliases={},
    inputs=INPUTS,
    input_cls=LockstepInput,
    row=ROW,
    local_row=local_row,
    view=VIEW_FOLD,
    view_cls=View,
    decision_cls=Decision,
    decision_fields=DECISION_FIELDS,
    decide=decide,
    decision_key=base.POLICY.decision_key + ("phase_prefill",),
    invariants=INVARIANTS,
    symbols=base.POLICY.symbols + (
        Symbol(VIEW, "in_flight_any", "any_prefill_in_flight", "some counted rank has a chunk in flight this pass"),
    ),
    trace=TraceSchema(inputs=bindings.TRACE.inputs + (IN_FLIGHT_INPUT,), expect=bindings.TRACE.expect + (PHASE_FIELD,),
                      config=bindings.TRACE.config),
    log=replace(
        bindings.LOG,
        inputs_from_row=lambda o, row, r: LockstepInput._make((*bindings.LOG.inputs_from_row(o, row, r), o.Not(row[7] == 0))),
        bridge=_bridge,
    ),
    proof=replace(
        B,
        outputs=B.outputs + ("phase_prefill",),
        witness_row=witness_row,
        idle_row=idle_row,
        layout_witness=layout_witness,
        reference=reference_pass,
        reference_row=reference_row,
        bmc_search={**B.bmc_search, "decode-progress": (lambda f: f.enable_dp_attention and f.queue_ratio is None, None)},
    ),
    host=None,  # SGLang 0.5.23's call sites pass no prefill_in_flight: see the README
    sim=replace(bindings.SIM, inputs=_sim_inputs, idle_inputs=_sim_idle, prefill_phase=lambda d: d.phase_prefill),
    extras={"no_host": "its call sites pass no prefill_in_flight (add_chunked_req negotiates before the chunk is admitted), and the idle batch of a prefill phase is the scheduler's", "docs": {
        "replayed_by": "; the PR is in no release to run it (the profiles are checked against its own test instead)",
        "engine": "SGLang",
        "no_features": "none",
        "releases_intro": "PR #37273 is open and in no release; `lockstep` runs it on SGLang 0.5.22-0.5.23's delayer "
        "(the features of `sglang-0.5.22`), `lockstep-hardened` on `hardened`'s.",
    }},
)
