"""How the delayer meets the world: SGLang's call sites, counterexample traces, the simulator.

The delayer *is* SGLang's ``PrefillDelayer``, so its inputs are the arguments of
SGLang's call (``negotiate_should_allow_prefill`` and the token usage the
executor is built with), unchanged.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from ...fields import SECONDS, Field
from ...policy import HostBinding, SimBinding, TraceSchema
from ...schema import LogSchema
from .table import DECISION_FIELDS
from .variables import INPUTS, PassInput


def _metrics(d: Any) -> tuple:
    """SGLang's outcome metrics read the wait a release ends and the gathered status."""
    return d.wait_forward_passes, d.wait_seconds, d.input_estimation


def _settings(c: Any) -> str:
    """SGLang's own line, as its constructor logs it (plus the profile)."""
    return (
        f"PrefillDelayer initialized with "
        f"max_delay_passes={c.max_delay_passes} "
        f"token_usage_low_watermark={c.token_usage_low_watermark} "
        f"queue_min_ratio={c.queue_min_ratio} "
        f"max_delay_ms={c.max_delay_ms} "
        f"queue_trigger_enabled={c.queue_on} "
        f"profile={c.profile}"
    )


def _debug_line(output: Any, actual_execution: bool) -> Any:
    """The seed's ``_record_single_pass_result`` debug lines (``SGLANG_PREFILL_DELAYER_DEBUG_LOG``)."""
    if output.output_allow and output.output_reason == "wait_timeout":
        return (
            f"PrefillDelayer timeout thus not forbid prefill "
            f"(num_prefillable={output.num_prefillable}, actual_execution={actual_execution})"
        )
    if output.output_allow and output.output_reason == "token_watermark":
        return (
            f"PrefillDelayer force allow prefill due to low watermark. "
            f"(num_prefillable={output.num_prefillable}, "
            f"num_token_watermark_force_allow={output.num_token_watermark_force_allow}, "
            f"actual_execution={actual_execution})"
        )
    if output.output_reason not in ("", "wait_success", "no_wait", "delay"):
        raise AssertionError(f"unexpected output_reason {output.output_reason!r}")
    return None


HOST = HostBinding(
    call=INPUTS,
    inputs=None,  # the call's arguments are the inputs, in order
    idle_call={"local_prefillable": False},  # a pass that reached no call site: the executor's finalize, all counts 0
    metrics=_metrics,
    flags={"skip_first_delayer": "skip_first_armed"},  # SGLang's tests and callers set the one-shot skip
    settings=_settings,
    debug_line=_debug_line,
)

def _bridge(state: Any) -> Any:
    """A pass that consumes the one-shot skip on every rank and decides nothing else: every rank prefillable, the
    slot trigger holding with max_running_requests 0 and max_prefill_bs 1, no running batch, no queue, token usage
    1.0 (an ``all`` pass that allows with ``no_wait``), after which fresh ranks are in ``state``."""
    if state.skip_first_armed:
        return None
    inputs = {"prefillable": True, "token_usage": 1.0, "running_batch": 0, "max_prefill_bs": 1, "waiting_queue_len": 0,
              "max_running_requests": 0}
    expect = {"allow": True, "reason": "no_wait", "wait_forward_passes": 0}
    return inputs, expect, "consumes the one-shot skip, as the logged states at the window's start have it", "it consumes the one-shot skip flag"


LOG = LogSchema(
    readings=(("token_usage", "token_usage"), ("max_running_requests", "mrr")),
    inputs_from_row=lambda o, row, r: PassInput(o.Not(row[0] == 0), r["token_usage"], row[2], row[3], r["mrr"], row[4]),
    set_flags=("skip_first_armed",),
    reason_order=("delay", "no_wait", "wait_success", "wait_timeout", "token_watermark", ""),
    mixed=lambda v, d: d.input_estimation == "mixed",
    bridge=_bridge,
)

TRACE = TraceSchema(
    # The trace's per-rank keys, in order (prefillable, token_usage, the counts), then now_s.
    inputs=tuple(sorted(INPUTS, key=lambda f: ("local_prefillable", "token_usage", "running_batch", "max_prefill_bs",
                                                 "waiting_queue_len", "max_running_requests").index(f.name))),
    expect=tuple(f for f in DECISION_FIELDS if f.name in ("output_allow", "output_reason"))
    + (Field("wait_forward_passes", DECISION_FIELDS[5].kind, DECISION_FIELDS[5].doc),),
    config=("dp_size", "attn_tp_size", "attn_cp_size", "enable_dp_attention", "max_delay_passes", "token_usage_low_watermark",
            "queue_min_ratio", "max_delay_ms", "prefill_max_requests"),
)
CLOCK_FIELD = Field("now", SECONDS, "this rank's clock reading, seconds", trace="now_s", sym="now")


# A call site's inputs after local_prefillable, read from the simulated rank's facts of the same names in one C call
# (the simulator asks once per rank and pass).
SIM_FACTS = attrgetter(*PassInput._fields[1:])
_new = tuple.__new__


def _sim_inputs(facts: Any) -> PassInput:
    return _new(PassInput, (True, *SIM_FACTS(facts)))


def _sim_idle(facts: Any) -> PassInput:
    return PassInput(False, facts.token_usage)


SIM = SimBinding(
    call_site="admission",
    inputs=_sim_inputs,
    idle_inputs=_sim_idle,
    outcome=attrgetter("input_estimation", "output_allow", "output_reason", "wait_forward_passes"),  # a C call
    colours={"no_wait": "#2ca02c", "wait_success": "#1f77b4", "delay": "#d62728", "wait_timeout": "#ff7f0e",
             "token_watermark": "#9467bd"},
)
