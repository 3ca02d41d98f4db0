"""Runtime tests over in-process ranks (threads): the conformance cases (ours and SGLang's seed), the pure FSM, failure handling."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from delayer_spec import ATTN_CP_LAYOUT, PROFILES, SEED_RELEASE, features_of
from delayer_spec import INITIAL_STATE, finalize, local_for, step
from prefill_delayer.runtime import (
    CollectiveError,
    ConfigMismatchError,
    InProcessGroup,
    PeerInputError,
    PrefillDelayer,
    PrefillDelayerSinglePassExecutor,
    ServerArgs,
    run_ranks,
)
from prefill_delayer.spec import PY, Config, ConfigError, PassInputError, PrefillDelayerError
from delayer_spec import F_FINGERPRINT, ROW_LEN, PassInput, gathered_view, local_row
from delayer_spec import build_table

from runtime_harness import Clock, Recorder, cases_path, decision_tuple, require_release, seed_delayer


def delayer(world: int, gather: Any, *, dp_attention: bool = True, profile: str = "seed", clock: Any = None,
            max_delay_passes: int = 3, watermark: Any = 0.8, ratio: Any = None, max_delay_ms: Any = None,
            metrics: Any = None) -> PrefillDelayer:
    sa = ServerArgs(enable_dp_attention=dp_attention, prefill_delayer_queue_min_ratio=ratio, prefill_delayer_max_delay_ms=max_delay_ms)
    return PrefillDelayer(world if dp_attention else 1, 1 if dp_attention else world, None, sa, max_delay_passes, watermark,
                          metrics, profile=profile, gather=gather, clock=clock)


# ----- import hygiene ----------------------------------------------------------


def test_import_pulls_in_neither_torch_nor_z3_nor_hypothesis() -> None:
    code = (
        "import sys, prefill_delayer.runtime as rt\n"
        "rt.run_ranks(2, lambda r, g: rt.PrefillDelayer(2, 1, None, rt.ServerArgs(enable_dp_attention=True), 3, None, gather=g).negotiate(True, 0.5))\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'z3', 'hypothesis', 'prometheus_client'))\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ----- conformance cases over thread ranks ---------------------------------------


def _conformance_cases() -> list[dict[str, Any]]:
    return json.loads(cases_path().read_text())["multi_rank"]


def _run_case(case: dict[str, Any], rank: int, gather: Any, make: Any) -> Any:
    clock = Clock(t=100.0)
    d = make(case, gather, clock)
    out = None
    for call in case["calls"]:
        clock.t += call.get("advance_s", 0.0)

        def arg(name: str, default: Any = 0) -> Any:
            v = call.get(name, default)  # noqa: B023 - called within this iteration
            return v[rank] if isinstance(v, list) else v

        out = d._negotiate_should_allow_prefill(
            local_prefillable=arg("prefillable"), token_usage=arg("token_usage"), running_batch=arg("running_batch"),
            max_prefill_bs=arg("max_prefill_bs"), max_running_requests=arg("max_running_requests"),
            waiting_queue_len=arg("waiting_queue_len"),
        )
    return out


def _check_case(case: dict[str, Any], outs: list[Any]) -> None:
    exp = case["expect"]
    for rank, o in enumerate(outs):
        where = f"{case['name']} rank {rank}"
        assert o.output_allow == exp["allow"], where
        assert o.output_reason == exp["reason"], where
        if "wait_forward_passes" in exp:
            assert o.wait_forward_passes == exp["wait_forward_passes"], where
        if exp.get("wait_seconds_positive"):
            assert o.wait_seconds > 0, where


def _ours(case: dict[str, Any], gather: Any, clock: Any) -> PrefillDelayer:
    return delayer(4, gather, clock=clock, max_delay_passes=case["max_delay_passes"], watermark=case["watermark"],
                   ratio=case["queue_min_ratio"], max_delay_ms=case["max_delay_ms"])


@pytest.mark.parametrize("case", _conformance_cases(), ids=lambda c: c["name"])
def test_conformance_case_in_process(case: dict[str, Any]) -> None:
    _check_case(case, run_ranks(4, lambda rank, g: _run_case(case, rank, g, _ours)))


@pytest.mark.registry
@pytest.mark.parametrize("case", _conformance_cases(), ids=lambda c: c["name"])
def test_conformance_case_holds_for_the_seed_too(case: dict[str, Any]) -> None:
    """The cases describe the seed: SGLang's seed release, with a clock per rank, passes them as well."""
    require_release(SEED_RELEASE)

    def make(case: dict[str, Any], gather: Any, clock: Any) -> Any:
        sa = ServerArgs(enable_dp_attention=True, prefill_delayer_queue_min_ratio=case["queue_min_ratio"],
                        prefill_delayer_max_delay_ms=case["max_delay_ms"])
        return seed_delayer(4, 1, sa, case["max_delay_passes"], case["watermark"], gather, clock=clock)

    _check_case(case, run_ranks(4, lambda rank, g: _run_case(case, rank, g, make)))


# ----- random traces (parity with every SGLang release: tests/test_releases.py) -----


def _random_setup(rng: random.Random) -> dict[str, Any]:
    dp_attention = rng.random() < 0.6
    if dp_attention:  # world = dp_size x attn_tp_size; only attn-TP rank 0 of each DP group counts
        dp, attn_tp = rng.choice([(1, 1), (2, 1), (3, 1), (4, 1), (2, 2), (1, 2)])
    else:  # the group is the attn-TP group; dp_size only divides max_running_requests
        dp, attn_tp = rng.choice([1, 2, 4]), rng.choice([1, 2, 3])
    world = attn_tp * (dp if dp_attention else 1)
    return dict(
        world=world,
        dp_attention=dp_attention,
        dp_size=dp,
        attn_tp=attn_tp,
        max_delay_passes=rng.choice([0, 1, 2, 3, 5]),
        watermark=rng.choice([None, 0.5]),
        ratio=rng.choice([None, 0.29, 0.5, 1.0]),
        max_delay_ms=rng.choice([None, 30.0, 50.0]),
        rates=[rng.choice([1.0, 1.0, 1.3]) for _ in range(world)],
    )


def _random_pass(rng: random.Random, world: int) -> list[dict[str, Any]]:
    kind = rng.random()
    # Every rank's host ends the pass the same way (the executor's finalize, or none: the next negotiate
    # finalizes implicitly). A rank that ends a pass its peers do not end is a desync (tests/test_desync.py).
    use_executor = rng.random() < 0.5
    out = []
    for _ in range(world):
        out.append(dict(
            prefillable=(rng.random() < 0.5) if kind < 0.4 else kind < 0.8,
            token_usage=rng.choice([0.3, 0.5, 0.9, 0.9]),
            running_batch=rng.choice([0, 3, 10, 100, 100]),
            max_prefill_bs=rng.choice([0, 8, 80]),
            max_running_requests=rng.choice([0, 16, 128, 1024]),
            waiting_queue_len=rng.choice([0, 1, 10, 64]),
            use_executor=use_executor,
            actual_prefill=rng.random() < 0.8,
        ))
    return out


def _drive(d: Any, executor_cls: Any, clock: Clock, passes: list[list[dict[str, Any]]], rank: int, dt: float) -> list[tuple]:
    out = []
    for k, p in enumerate(passes):
        clock.t = k * dt
        a = p[rank]
        args = dict(running_batch=a["running_batch"], max_prefill_bs=a["max_prefill_bs"],
                    max_running_requests=a["max_running_requests"], waiting_queue_len=a["waiting_queue_len"])
        if a["use_executor"]:
            ex = executor_cls(d, a["token_usage"])
            if a["prefillable"]:
                ex.negotiate_should_allow_prefill(True, **args)
            ex.finalize(actual_prefill=a["actual_prefill"])
            res = ex._result
        else:
            res = d._negotiate_should_allow_prefill(local_prefillable=a["prefillable"], token_usage=a["token_usage"], **args)
        out.append(decision_tuple(res))
    return out


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("trace_seed", range(15))
def test_runtime_equals_the_pure_step(profile: str, trace_seed: int) -> None:
    """The runtime (machine, row packing, gather, implicit finalize) decides what the pure ``fsm.step`` decides."""
    rng = random.Random(1000 + trace_seed)
    s = _random_setup(rng)
    # Attention context parallelism (profiles that have it): each DP group gathers cp x attn_tp ranks.
    cp = 2 if ATTN_CP_LAYOUT in features_of(profile) and trace_seed % 3 == 0 else 1
    world, dp, attn_tp = s["world"] * cp, s["dp_size"], s["attn_tp"]
    rates = [rate for rate in s["rates"] for _ in range(cp)]
    passes = [_random_pass(rng, world) for _ in range(12)]
    pmr = rng.choice([None, 1, 3])
    sa = ServerArgs(enable_dp_attention=s["dp_attention"], prefill_delayer_queue_min_ratio=s["ratio"],
                    prefill_delayer_max_delay_ms=s["max_delay_ms"], prefill_max_requests=pmr)
    config = Config(s["max_delay_passes"], s["watermark"], s["ratio"], s["max_delay_ms"], dp, attn_tp, s["dp_attention"], profile,
                    prefill_max_requests=pmr, attn_cp_size=cp)
    table = build_table(profile)

    def ours(rank: int, gather: Any) -> tuple:
        clock = Clock(rate=rates[rank])
        d = PrefillDelayer(dp, attn_tp, None, sa, s["max_delay_passes"], s["watermark"], profile=profile, gather=gather, clock=clock,
                           attn_cp_size=cp)
        return _drive(d, PrefillDelayerSinglePassExecutor, clock, passes, rank, 0.02), d.state

    got = run_ranks(world, ours)
    states = [INITIAL_STATE] * world
    for k, p in enumerate(passes):
        locals_, rows = [], []
        for r in range(world):
            a = p[r]
            if a["use_executor"] and not a["prefillable"]:  # finalize negotiates as not prefillable, counts 0
                inp = PassInput(False, a["token_usage"])
            else:
                inp = PassInput(a["prefillable"], a["token_usage"], a["running_batch"], a["max_prefill_bs"],
                                a["max_running_requests"], a["waiting_queue_len"])
            now = Clock(t=k * 0.02, rate=rates[r])()  # the very reading the runtime's clock gives
            local = local_for(finalize(states[r]), now, inp.max_running_requests)
            locals_.append(local)
            rows.append(local_row(PY, config, inp, local) + [0, config.fingerprint()])
        view = gathered_view(PY, config, rows)
        for r in range(world):
            dec = step(config, table, finalize(states[r]), view, locals_[r])
            assert got[r][0][k] == decision_tuple(dec), f"pass {k} rank {r}"
            states[r] = dec.next_state
    for r in range(world):  # the executor finalizes its pass, and so does a bare negotiate (a whole pass)
        assert got[r][1] == finalize(states[r])


# ----- hardened agreement vs seed divergence under clock skew ----------------------


def _skew_run(profile: str) -> list[list[tuple]]:
    """Queue trigger with max_delay_ms=50; ranks 2, 3 run their clocks 30% fast."""
    rates = [1.0, 1.0, 1.3, 1.3]

    def body(rank: int, gather: Any) -> list[tuple]:
        clock = Clock(rate=rates[rank], offset=1000.0 + 7.0 * rank)
        d = delayer(4, gather, profile=profile, clock=clock, max_delay_passes=100, watermark=None, ratio=0.5, max_delay_ms=50.0)
        d.skip_first_delayer = False
        out = []
        for k in range(4):
            clock.t = 0.02 * k
            res = d.negotiate(True, 0.9, running_batch=100, max_prefill_bs=80, max_running_requests=1024, waiting_queue_len=10)
            out.append((res.output_allow, res.output_reason, res.wait_forward_passes))
        return out

    return run_ranks(4, body)


def test_hardened_ranks_agree_under_clock_skew() -> None:
    outs = _skew_run("hardened")
    assert all(o == outs[0] for o in outs), outs
    assert outs[0] == [(False, "delay", 0), (False, "delay", 0), (True, "wait_success", 2), (False, "delay", 0)]


def test_seed_ranks_diverge_under_the_same_skew() -> None:
    """The seed's known defect (upstream #30521): the fast-clock ranks time out a pass early."""
    outs = _skew_run("seed")
    assert outs[0] == outs[1] and outs[2] == outs[3]
    assert outs[0][2] == (False, "delay", 0) and outs[2][2] == (True, "wait_success", 2)  # same pass, different verdicts
    assert outs[0][3] == (True, "wait_success", 3) and outs[2][3] == (False, "delay", 0)  # and they stay out of step


# ----- executor semantics -------------------------------------------------------


def test_executor_negotiates_once_and_finalize_fills_in() -> None:
    calls: list[list[int]] = []

    def gather(row: list[int]) -> list[list[int]]:
        calls.append(list(row))
        return [row]

    rec = Recorder()
    d = delayer(1, gather, metrics=rec)
    ex = PrefillDelayerSinglePassExecutor(d, 0.9)
    assert ex.negotiate_should_allow_prefill(True, 5, 4, 64, 2) is True
    assert ex.negotiate_should_allow_prefill(False) is True  # cached, no second collective
    ex.finalize(actual_prefill=True)
    assert len(calls) == 1 and d.state.control == "idle"
    ex2 = PrefillDelayerSinglePassExecutor(d, 0.9)
    ex2.finalize(actual_prefill=False)  # nothing negotiated: negotiates as not prefillable, counts 0
    assert len(calls) == 2 and calls[1][:5] == [0, 0, 0, 0, 0]
    assert [c["output_reason"] for c in rec.calls] == ["no_wait", ""]
    assert rec.calls[0] == dict(forward_passes=0, wait_seconds=0.0, input_estimation="all", output_allow=True,
                                output_reason="no_wait", actual_execution=True)


def test_direct_negotiate_finalizes_the_previous_pass_implicitly() -> None:
    d = delayer(1, lambda row: [row])
    first = d.negotiate(True, 0.9)
    assert first.output_allow and d.state.control == "released"
    second = d.negotiate(True, 0.9)  # no finalize in between, as SGLang's tests do
    assert second.output_reason == "no_wait" and d.passes == 2
    assert d.finalize().control == "idle" and d.finalize().control == "idle"  # finalize from idle is a no-op


def test_skip_first_delayer_is_the_machines_flag() -> None:
    d = delayer(1, lambda row: [row], max_delay_passes=5)
    assert d.skip_first_delayer is True
    d.skip_first_delayer = False
    assert d.state.skip_first_armed is False
    with pytest.raises(TypeError):
        d.skip_first_delayer = 0  # type: ignore[assignment]
    # the slot trigger holds (150 - 100 < 80): without the one-shot skip the first such pass delays
    assert d.negotiate(True, 0.9, running_batch=100, max_prefill_bs=80, max_running_requests=150).output_reason == "delay"


# ----- failures -----------------------------------------------------------------


def test_bad_input_on_one_rank_raises_the_same_error_everywhere() -> None:
    def body(rank: int, gather: Any) -> Any:
        d = delayer(3, gather)
        ok = d.negotiate(True, 0.9)
        before = d.state
        try:
            if rank == 1:
                d.negotiate(True, float("nan"), running_batch=-1)
            else:
                d.negotiate(True, 0.9)
        except PeerInputError as err:
            assert d.state == before and d.passes == 1
            after = d.negotiate(False, 0.9)  # the group is still in step
            return str(err), err.bad_fields, err.pass_number, err.__cause__, ok.output_reason, after.output_reason
        raise AssertionError("no error")

    outs = run_ranks(3, body)
    assert len({o[0] for o in outs}) == 1
    msg, bad, pass_number = outs[0][:3]
    assert bad == {1: ("token_usage", "running_batch")} and pass_number == 2
    assert "rank 1" in msg and "token_usage" in msg and "running_batch" in msg
    assert isinstance(outs[1][3], PassInputError) and "nan" in str(outs[1][3])  # the offender chains its detail
    assert outs[0][3] is None and outs[2][3] is None
    assert all(o[5] == "" for o in outs)


def test_config_mismatch_raises_on_every_rank_on_the_first_pass() -> None:
    def body(rank: int, gather: Any) -> Any:
        d = delayer(3, gather, max_delay_passes=3 if rank < 2 else 4)
        with pytest.raises(ConfigMismatchError) as info:
            d.negotiate(True, 0.9)
        assert d.state == INITIAL_STATE and d.passes == 0
        return str(info.value), info.value.fingerprints

    outs = run_ranks(3, body)
    assert len({o[0] for o in outs}) == 1
    assert "ranks 0, 1" in outs[0][0] and "rank 2" in outs[0][0] and "pass 1" in outs[0][0]
    assert isinstance(ConfigMismatchError(pass_number=1, fingerprints={}, local_config={}), ConfigError)


def test_collective_failure_leaves_the_state_untouched() -> None:
    fail = {"now": False}

    def gather(row: list[int]) -> list[list[int]]:
        if fail["now"]:
            raise OSError("connection reset")
        return [row, [0] * 7 + row[7:]]  # the peer never has prefill work: every prefillable pass is mixed

    d = delayer(2, gather, max_delay_passes=5)
    assert d.negotiate(True, 0.9).output_reason == "delay"
    before, passes = d.state, d.passes
    assert before.control == "delaying" and before.delayed_count == 1
    fail["now"] = True
    with pytest.raises(CollectiveError) as info:
        d.negotiate(True, 0.9)
    assert d.state == before and d.passes == passes == 1
    assert info.value.pass_number == 2 and "pass 2" in str(info.value) and "OSError" in str(info.value)
    assert isinstance(info.value, PrefillDelayerError) and isinstance(info.value.__cause__, OSError)
    fail["now"] = False
    again = d.negotiate(True, 0.9)  # the wait simply continues
    assert again.output_reason == "delay" and d.state.delayed_count == 2 and d.state.wait_start == before.wait_start


def test_collective_failure_from_released_rolls_back_the_implicit_finalize() -> None:
    box = {"fail": False}

    def gather(row: list[int]) -> list[list[int]]:
        if box["fail"]:
            raise TimeoutError("peer gone")
        return [row]

    d = delayer(1, gather)
    d.negotiate(True, 0.9)
    released = d.state
    assert released.control == "released"
    box["fail"] = True
    with pytest.raises(CollectiveError):
        d.negotiate(True, 0.9)
    assert d.state == released


def test_malformed_gather_result_is_a_collective_error() -> None:
    d = delayer(2, lambda row: [row])  # one row for a world of two
    with pytest.raises(CollectiveError, match=f"expected 2 rows of {ROW_LEN}"):
        d.negotiate(True, 0.9)
    d = delayer(2, lambda row: [row, row[:5]])
    with pytest.raises(CollectiveError, match=f"returned 5 values from rank 1, expected a row of {ROW_LEN} values from each rank"):
        d.negotiate(True, 0.9)
    assert d.state == INITIAL_STATE


class _FlatGather:
    """A gather offering ``gather_flat`` (as ``TorchGather`` does), returning what it is told to."""

    def __init__(self, make: Any) -> None:
        self.make = make

    def __call__(self, row: Any) -> Any:  # pragma: no cover - the delayer prefers gather_flat
        raise AssertionError("gather_flat should have been used")

    def gather_flat(self, row: Any) -> Any:
        return self.make(list(row))


def test_malformed_flat_gather_result_is_a_collective_error() -> None:
    d = delayer(2, _FlatGather(lambda row: row + row[:-1]))  # one value short
    with pytest.raises(CollectiveError, match=f"returned {2 * ROW_LEN - 1} values, expected 2 rows of {ROW_LEN}"):
        d.negotiate(True, 0.9)
    assert d.state == INITIAL_STATE and d.passes == 0
    ok = delayer(2, _FlatGather(lambda row: row + row))
    assert ok.negotiate(True, 0.9).output_allow  # the flat path, well formed


def test_a_flat_gather_may_return_any_sequence_of_ints() -> None:
    """The pass's quick check compares columns with lists; a tuple or an array of the same ints is as good."""
    import array

    for make in (lambda row: tuple(row + row), lambda row: array.array("q", row + row)):
        d = delayer(2, _FlatGather(make))
        for _ in range(3):
            assert d.negotiate(True, 0.9).output_allow
            d.finalize()
        assert d.passes == 3
    bad = delayer(2, _FlatGather(lambda row: tuple(row + row[:-1]) + (1,)))  # the second rank's stamp is wrong
    with pytest.raises(CollectiveError):
        bad.negotiate(True, 0.9)


def test_a_gather_that_loses_this_ranks_row_is_a_collective_error() -> None:
    foreign = delayer(1, lambda row: [list(row)], max_delay_passes=7)._fingerprint
    d = delayer(1, lambda row: [row[:F_FINGERPRINT] + [foreign] + row[F_FINGERPRINT + 1:]])  # one row, not this rank's
    with pytest.raises(CollectiveError, match="its own row is missing"):
        d.negotiate(True, 0.9)
    assert d.state == INITIAL_STATE


def test_a_dead_thread_rank_makes_the_others_raise_within_the_timeout() -> None:
    group = InProcessGroup(2, timeout_s=0.3)
    d = delayer(2, group.gather_for(0))
    t0 = time.monotonic()
    with pytest.raises(CollectiveError, match="gave up waiting"):
        d.negotiate(True, 0.9)
    assert time.monotonic() - t0 < 2.0 and d.state == INITIAL_STATE


def test_run_ranks_reraises_the_first_error_and_releases_the_rest() -> None:
    def body(rank: int, gather: Any) -> None:
        if rank == 0:
            raise ValueError("boom")
        gather([rank])
        gather([rank])

    t0 = time.monotonic()
    with pytest.raises(ValueError, match="boom"):
        run_ranks(3, body, timeout_s=5.0)
    assert time.monotonic() - t0 < 2.0  # the abort released ranks 1, 2 without waiting 5 s
    assert [t for t in threading.enumerate() if t.name.startswith("rank-")] == []


def test_in_process_group_keeps_passes_apart() -> None:
    def body(rank: int, gather: Any) -> list[list[list[int]]]:
        return [gather([rank, k]) for k in range(50)]

    outs = run_ranks(3, body)
    for rows in outs:
        assert rows == [[[r, k] for r in range(3)] for k in range(50)]


# ----- construction -------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_delay_passes=-1), "max_delay_passes"),
    (dict(token_usage_low_watermark=float("nan")), "token_usage_low_watermark"),
    (dict(server_args=ServerArgs(prefill_delayer_queue_min_ratio=0.0)), "queue_min_ratio"),
    (dict(server_args=ServerArgs(prefill_delayer_max_delay_ms=-5)), "max_delay_ms"),
    (dict(profile="fast"), "profile"),
    (dict(dp_size=0), "dp_size"),
    (dict(gather=42), "gather must be a callable"),
    (dict(clock=3.0), "clock must be a callable"),
])
def test_bad_configuration_is_rejected(kwargs: dict[str, Any], match: str) -> None:
    args: dict[str, Any] = dict(dp_size=1, attn_tp_size=1, cpu_group=None, server_args=ServerArgs(), max_delay_passes=3,
                                token_usage_low_watermark=None, gather=lambda row: [row])
    args.update(kwargs)
    with pytest.raises(ConfigError, match=match):
        PrefillDelayer(**args)


def test_gather_world_size_must_match_the_configuration() -> None:
    group = InProcessGroup(3)
    with pytest.raises(ConfigError, match="3 ranks but the configuration needs 2"):
        PrefillDelayer(2, 1, None, ServerArgs(enable_dp_attention=True), 3, None, gather=group.gather_for(0))
    # DP attention off: the group is the attn-TP group
    PrefillDelayer(4, 3, None, ServerArgs(), 3, None, gather=group.gather_for(0))


def test_device_group_path_needs_a_device_group(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="device_group is required"):
        PrefillDelayer(1, 1, None, ServerArgs(disable_overlap_schedule=True), 3, None)
    monkeypatch.setenv("SGLANG_NCCL_ALL_GATHER_IN_OVERLAP_SCHEDULER_SYNC_BATCH", "1")
    with pytest.raises(ConfigError, match="device_group is required"):
        PrefillDelayer(1, 1, None, ServerArgs(), 3, None)
    # a gather= replaces the collective entirely: no group needed on either path
    PrefillDelayer(1, 1, None, ServerArgs(disable_overlap_schedule=True), 3, None, gather=lambda row: [row])


def test_default_gather_needs_torch_distributed() -> None:
    import torch.distributed as dist

    assert not dist.is_initialized()
    with pytest.raises(ConfigError, match="init_process_group"):
        PrefillDelayer(1, 1, None, ServerArgs(), 3, None)


def test_clock_is_read_once_per_pass() -> None:
    reads = []

    def clock() -> float:
        reads.append(1)
        return 10.0 + len(reads)

    d = delayer(2, lambda row: [row, [1] + row[1:]], clock=clock)  # the peer always has prefill work
    assert d.negotiate(False, 0.9).output_reason == "delay"  # mixed; the wait starts at the pass's reading
    assert d.state.wait_start == 11.0
    assert d.negotiate(True, 0.9).wait_seconds == 12.0 - 11.0
    ex = PrefillDelayerSinglePassExecutor(d, 0.9)
    ex.finalize(actual_prefill=False)
    assert len(reads) == 3 and d.state.wait_start == 13.0


@pytest.mark.parametrize("reading", ["raise", float("nan"), float("inf"), "12.5", None, True])
def test_a_bad_clock_on_one_rank_raises_the_same_error_everywhere(reading: Any) -> None:
    """The clock is injectable, so its reading is checked like an input: the rank with the bad
    reading still takes part in the gather (nobody hangs) and every rank raises the same error."""

    def body(rank: int, gather: Any) -> Any:
        calls = []

        def clock() -> Any:
            calls.append(1)
            if rank == 1 and len(calls) == 2:
                if reading == "raise":
                    raise OSError("clock source gone")
                return reading
            return float(len(calls))

        d = delayer(2, gather, clock=clock)
        first = d.negotiate(True, 0.9)
        before = d.state
        with pytest.raises(PeerInputError) as info:
            d.negotiate(True, 0.9)
        assert d.state == before and d.passes == 1
        after = d.negotiate(False, 0.9)  # the group is still in step
        return str(info.value), info.value.bad_fields, info.value.__cause__, first.output_reason, after.output_reason

    outs = run_ranks(2, body)
    assert outs[0][0] == outs[1][0] and outs[0][1] == outs[1][1] == {1: ("clock",)}
    assert "rank 1" in outs[0][0] and "clock" in outs[0][0]
    cause = outs[1][2]
    assert isinstance(cause, PassInputError) and "clock" in str(cause) and outs[0][2] is None
    if reading == "raise":
        assert isinstance(cause.__cause__, OSError) and "clock source gone" in str(cause)
    assert outs[0][4] == outs[1][4] == ""


def test_an_int_clock_reading_is_accepted() -> None:
    d = delayer(1, lambda row: [list(row)], clock=lambda: 7)
    assert d.negotiate(True, 0.9).output_allow
