"""The 24 seed conformance cases (from SGLang's own PrefillDelayer tests), through the FSM.

Every case runs through the ``transitions`` machine (``DelayerMachine``) and the
pure ``step`` function; the multi-rank cases also through the independent
reference model. The data's ``about`` field describes the format.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefill_delayer.fsm import DelayerMachine
from delayer_spec import State, finalize
from delayer_spec import local_for, step
from delayer_spec import PassInput, gathered_view
from prefill_delayer.spec.config import Config
from prefill_delayer.spec.ops import PY
from delayer_spec import DELAYING, IDLE, build_table
from delayer_spec import ROW_FIELDS

from fsm_sim import machines_pass, states_pass
from reference import RankInput, RefState, reference_pass

DATA = json.loads((Path(__file__).parent / "data" / "seed_cases.json").read_text())
MULTI = DATA["multi_rank"]
SINGLE = DATA["single_step"]
MULTI_DP = 4
# Distinct per-rank clock origins: only differences on one rank's clock may matter.
CLOCK_ORIGIN = [1000.0, 7.25, 123456.5, 0.0]
COUNT_FIELDS = ("running_batch", "max_prefill_bs", "max_running_requests", "waiting_queue_len")


def test_case_count():
    assert len(MULTI) == 12 and len(SINGLE) == 12
    names = [c["name"] for c in MULTI + SINGLE]
    assert len(set(names)) == 24


def _per_rank(call: dict, key: str, rank: int, default):
    value = call.get(key, default)
    return value[rank] if isinstance(value, list) else value


def _multi_config(case: dict) -> Config:
    return Config(
        max_delay_passes=case["max_delay_passes"],
        token_usage_low_watermark=case["watermark"],
        queue_min_ratio=case["queue_min_ratio"],
        max_delay_ms=case["max_delay_ms"],
        dp_size=MULTI_DP,
        attn_tp_size=1,
        enable_dp_attention=True,
        profile="seed",
    )


def _check_multi(expect: dict, allow, reason, wfp, wait_seconds, input_estimation=None):
    assert allow == expect["allow"]
    assert reason == expect["reason"]
    if "wait_forward_passes" in expect:
        assert wfp == expect["wait_forward_passes"]
    if "wait_seconds_positive" in expect:
        assert (wait_seconds > 0) == expect["wait_seconds_positive"]
    if not allow:
        assert wfp == 0 and wait_seconds == 0.0


@pytest.mark.parametrize("case", MULTI, ids=[c["name"] for c in MULTI])
def test_multi_rank_case(case):
    config = _multi_config(case)
    table = build_table("seed")
    machines = [DelayerMachine(config) for _ in range(MULTI_DP)]
    states = [State() for _ in range(MULTI_DP)]
    refs = [RefState() for _ in range(MULTI_DP)]
    clocks = list(CLOCK_ORIGIN)
    for call in case["calls"]:
        clocks = [t + call.get("advance_s", 0.0) for t in clocks]
        inputs = [
            PassInput(
                _per_rank(call, "prefillable", r, None),
                _per_rank(call, "token_usage", r, None),
                *(_per_rank(call, f, r, 0) for f in COUNT_FIELDS),
            )
            for r in range(MULTI_DP)
        ]
        _, _, by_machine = machines_pass(config, machines, inputs, clocks)
        _, _, by_step = states_pass(config, table, states, inputs, clocks)
        by_ref = reference_pass(
            config,
            [RankInput(i.local_prefillable, i.token_usage, i.running_batch, i.max_prefill_bs,
                       i.waiting_queue_len, i.max_running_requests, now) for i, now in zip(inputs, clocks)],
            refs,
        )
        assert by_machine == by_step
        for m, d in zip(machines, by_machine):
            assert m.finalize() == finalize(d.next_state)
        states = [finalize(d.next_state) for d in by_step]
        refs = [o.next_state for o in by_ref]
    expect = case["expect"]
    for d, o in zip(by_machine, by_ref):
        _check_multi(expect, d.output_allow, d.output_reason, d.wait_forward_passes, d.wait_seconds)
        _check_multi(expect, o.allow, o.reason, o.wait_forward_passes, o.wait_seconds)
        assert (d.input_estimation, d.num_prefillable, d.num_token_watermark_force_allow) == (
            o.input_estimation, o.num_prefillable, o.num_force)


def _single_setup(case: dict):
    rows = case["rows"]
    config = Config(
        max_delay_passes=case.get("max_delay_passes", 3),
        token_usage_low_watermark=case.get("watermark"),
        queue_min_ratio=case.get("queue_min_ratio"),
        max_delay_ms=case.get("max_delay_ms"),
        dp_size=len(rows),
        attn_tp_size=1,
        enable_dp_attention=True,
        profile="seed",
    )
    mrr = case.get("max_running_requests", 0)
    # Pad [prefillable, force, RB, PB, WQ] with timeout_expired, max_running_requests and a zero envelope.
    padded = [list(r) + [0, mrr] + [0] * (len(ROW_FIELDS) - len(r) - 2) for r in rows]
    assert all(len(r) == len(ROW_FIELDS) and r[ROW_FIELDS.index("max_running_requests")] == mrr for r in padded)
    now = 5000.0
    armed = case.get("skip_first_armed", False)
    k = case.get("prev_delayed_count", 0)
    state = State(DELAYING, k, now - case.get("elapsed_s", 0.0), armed) if k > 0 else State(IDLE, 0, None, armed)
    return config, gathered_view(PY, config, padded), local_for(state, now, mrr), state


def _check_single(expect: dict, d):
    assert d.output_allow == expect["allow"]
    assert d.output_reason == expect["reason"]
    if "input_estimation" in expect:
        assert d.input_estimation == expect["input_estimation"]
    if "wait_forward_passes" in expect:
        assert d.wait_forward_passes == expect["wait_forward_passes"]
    if "skip_first_armed_after" in expect:
        assert d.next_state.skip_first_armed == expect["skip_first_armed_after"]
    if "delayed_count_after" in expect:
        assert d.next_state.delayed_count == expect["delayed_count_after"]
    assert d.next_state.control == (DELAYING if not d.output_allow else "released")


@pytest.mark.parametrize("case", SINGLE, ids=[c["name"] for c in SINGLE])
def test_single_step_case(case):
    config, view, local, state = _single_setup(case)
    by_step = step(config, build_table("seed"), state, view, local)
    _check_single(case["expect"], by_step)
    machine = DelayerMachine(config)
    machine.restore(state)
    by_machine = machine.negotiate(view, local)
    assert by_machine == by_step
    assert machine.state == by_step.next_state
