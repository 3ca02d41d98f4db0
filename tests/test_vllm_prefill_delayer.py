"""vLLM #48246's PrefillDelayer as profiles: what the closed PR says it does, restated as facts, and its proofs.

The PR was closed unmerged and its diff is not public, so no code of it can run
beside the profiles and no test of its own exists to restate (its description
tests by benchmarks only). What is known is restated here as cases, each run
through ``PolicyCore`` on in-process ranks with each rank's own clock: the count
of prefillable ranks from the DP all-reduce (SUM) decides all, none or mixed; a
mixed step is held up to 30 passes or 5000 ms on the rank's own clock, and then
released. What the module infers beyond that (no watermark, no first-call skip)
is checked against ATOM #930, the delayer it names as its model: after #930's
one-shot skip and with its watermark off, the two decide alike on every step.
"""

from __future__ import annotations

import random
from typing import Any, Sequence

import pytest

from prefill_delayer.runtime import PolicyCore, run_ranks
from prefill_delayer.spec import Config
from prefill_delayer.spec.policy import ALL_REDUCE_SUM
from prefill_delayer.spec.registry import policy_named

RELEASE, HARDENED = "vllm-48246", "vllm-48246-hardened"


def _run(profile: str, calls: Sequence[Sequence[bool]], clocks: Sequence[Sequence[float]] = (), **params: Any) -> list[list[Any]]:
    """Per step, each rank's decision; ``clocks[k][r]`` is rank r's clock on step k (default 0 everywhere)."""
    world = len(calls[0])
    c = Config(profile=profile, dp_size=world, **params)

    def rank_main(rank: int, gather: Any) -> list[Any]:
        now = [0.0]
        core = PolicyCore(c, gather, clock=lambda: now[0], decision_log=False)
        out = []
        for k, per_rank in enumerate(calls):
            now[0] = clocks[k][rank] if clocks else 0.0
            out.append(core.negotiate(local_prefillable=per_rank[rank]))
            core.finalize()
        return out

    per_rank = run_ranks(world, rank_main)
    return [[per_rank[r][k] for r in range(world)] for k in range(len(calls))]


# ----- what the PR's description says ----------------------------------------------------------------


def test_the_defaults_are_30_passes_and_5000_ms_and_the_collective_is_the_dp_all_reduce() -> None:
    c = Config(profile=RELEASE, dp_size=8)
    assert (c.max_delay_passes, c.max_delay_ms) == (30, 5000.0)
    pol = policy_named("vllm-prefill-delayer")
    assert pol.collective == ALL_REDUCE_SUM and pol.row_names[0] == "prefillable"
    assert pol.input_names == ("local_prefillable",)  # no watermark, no other argument
    assert Config(profile=HARDENED, dp_size=8).max_delay_ms == 5000.0


@pytest.mark.parametrize("profile", [RELEASE, HARDENED])
def test_the_count_of_prefillable_ranks_decides_all_none_or_mixed(profile: str) -> None:
    world = 4
    for count in range(world + 1):
        (step,) = _run(profile, [[r < count for r in range(world)]])
        status = "none" if count == 0 else "all" if count == world else "mixed"
        assert {d.input_estimation for d in step} == {status}, count
        want = {"none": (True, ""), "all": (True, "no_wait"), "mixed": (False, "delay")}[status]
        assert {(d.output_allow, d.output_reason) for d in step} == {want}, count


@pytest.mark.parametrize("profile", [RELEASE, HARDENED])
def test_a_mixed_step_is_held_30_passes_then_released(profile: str) -> None:
    mixed = [True, False, True]
    out = _run(profile, [mixed] * 32)
    assert all(d.output_reason == "delay" and not d.output_allow for step in out[:30] for d in step)
    assert [(d.output_allow, d.output_reason, d.wait_forward_passes) for d in out[30]] == [(True, "wait_timeout", 30)] * 3
    assert all(d.output_reason == "delay" for d in out[31])  # a new wait begins


@pytest.mark.parametrize("profile", [RELEASE, HARDENED])
def test_a_mixed_step_is_held_5000_ms_on_the_clock_then_released(profile: str) -> None:
    mixed = [True, False]
    clocks = [[1.2 * k] * 2 for k in range(6)]  # 0, 1.2, ..., 6.0 s: the wait's start is the first delay's reading
    out = _run(profile, [mixed] * 6, clocks)
    assert [d[0].output_reason for d in out] == ["delay"] * 5 + ["wait_timeout"]  # 4.8 s < 5 s <= 6.0 s
    assert out[5][0].wait_forward_passes == 5 and out[5][0].wait_seconds == pytest.approx(6.0)


@pytest.mark.parametrize("profile", [RELEASE, HARDENED])
def test_all_after_a_wait_is_a_wait_success(profile: str) -> None:
    out = _run(profile, [[True, False], [True, False], [True, True], [False, False]])
    assert [d[0].output_reason for d in out] == ["delay", "delay", "wait_success", ""]
    assert out[2][0].wait_forward_passes == 2


def test_the_ranks_own_clocks_split_them_and_the_reduced_timeout_does_not() -> None:
    """Rank 1's clock runs ahead: on #48246 it times out alone; the hardened profile times both out on one step."""
    mixed = [True, False]
    clocks = [[0.0, 0.0], [1.0, 1.0], [2.0, 9.0], [3.0, 10.0]]
    out = _run(RELEASE, [mixed] * 4, clocks)
    assert [(d[0].output_reason, d[1].output_reason) for d in out[:3]] == [("delay", "delay")] * 2 + [("delay", "wait_timeout")]
    assert [d.next_state.delayed_count for d in out[2]] == [3, 0]  # their wait counts have parted
    out = _run(HARDENED, [mixed] * 4, clocks)
    assert [(d[0].output_reason, d[1].output_reason) for d in out[:3]] == [("delay", "delay")] * 2 + [("wait_timeout",) * 2]


def test_it_decides_as_atom_930_after_its_skip_with_the_watermark_off() -> None:
    """The port's model (#930, the 30 passes and 5000 ms it keeps): the same verdicts on random runs, once #930's
    one-shot skip is spent on a step both allow."""
    rng, seen = random.Random(48246), set()
    for world in (2, 3, 4):
        for _ in range(12):
            steps = [[rng.random() < 0.6 for _ in range(world)] for _ in range(40)]
            clock, skew, clocks = 0.0, [rng.uniform(0, 1.5) for _ in range(world)], []
            for _ in range(41):  # each rank's own clock, skewed: both delayers read it alike
                clock += rng.choice([0.0, 0.3, 1.1])
                clocks.append([clock + skew[r] for r in range(world)])
            ours = _run(RELEASE, [[False] * world, *steps], clocks, max_delay_passes=5, max_delay_ms=2000.0)
            atom = _run_930([[False] * world, *steps], clocks)
            assert [[(d.output_allow, d.output_reason, d.wait_forward_passes) for d in s] for s in ours[1:]] == \
                [[(d.output_allow, d.output_reason, d.wait_forward_passes) for d in s] for s in atom[1:]]
            seen |= {(d.output_reason, d.wait_forward_passes == 5) for s in ours for d in s}
    # the runs reach every reason, and the timeout both ways: after 5 passes and on the clock before them
    assert {("delay", False), ("wait_success", False), ("no_wait", False), ("", False), ("wait_timeout", True),
            ("wait_timeout", False)} <= seen


def _run_930(calls: Sequence[Sequence[bool]], clocks: Sequence[Sequence[float]]) -> list[list[Any]]:
    world = len(calls[0])
    c = Config(profile="atom-930", dp_size=world, max_delay_passes=5, max_delay_ms=2000.0)

    def rank_main(rank: int, gather: Any) -> list[Any]:
        now = [0.0]
        core = PolicyCore(c, gather, clock=lambda: now[0], decision_log=False)
        out = []
        for k, per_rank in enumerate(calls):
            now[0] = clocks[k][rank]
            out.append(core.negotiate(per_rank[rank], 0.5))
            core.finalize()
        return out

    per_rank = run_ranks(world, rank_main)
    return [[per_rank[r][k] for r in range(world)] for k in range(len(calls))]


# ----- the proofs: verdicts, counterexamples, replay -----------------------------------------------------

REFUTED = {("agreement", RELEASE), ("agreement-equal-args", RELEASE), ("joint-progress", RELEASE)}


@pytest.fixture(scope="module")
def results() -> list:
    pytest.importorskip("z3")
    from prefill_delayer.proofs.prove import run_catalogue

    return run_catalogue((RELEASE, HARDENED))


@pytest.mark.proofs
def test_the_verdicts(results: list) -> None:
    assert [r for r in results if not r.ok] == []
    assert {(r.property, r.profile) for r in results if r.status == "refuted"} == REFUTED
    for profile in (RELEASE, HARDENED):
        have = {r.property for r in results if r.profile == profile}
        assert have == {"guards-partition", "all-allows", "none-allows", "bounded-delay", "agreement",
                        "agreement-equal-args", "joint-progress", "aggregate-view", "refinement"}, profile


@pytest.mark.proofs
def test_every_refuted_cell_replays_and_the_hardened_profile_shows_none_of_it(results: list) -> None:
    from prefill_delayer.traces.format import validate_trace
    from prefill_delayer.traces.replay import run_trace
    from prefill_delayer.traces.violations import find_violation

    for r in (r for r in results if r.status == "refuted"):
        trace = r.trace
        validate_trace(trace)
        assert 2 <= len(trace["passes"]) <= 3, (r.property, len(trace["passes"]))  # a first delay measures 0 ms
        decisions = run_trace(trace)
        assert decisions == [p["expect"] for p in trace["passes"]], r.property
        assert find_violation(r.property, trace, decisions) is not None
        assert find_violation(r.property, trace, run_trace(trace, profile=HARDENED)) is None, r.property
        # the only local input is the clock: the ranks' readings differ on some step
        assert any(len({x["now_s"] for x in p["ranks"]}) > 1 for p in trace["passes"]), r.property


@pytest.mark.proofs
def test_prove_finds_the_clock_when_the_hardened_profile_reads_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefill_delayer.proofs.prove import run_catalogue
    from prefill_delayer.spec.policies import vllm_prefill_delayer as mod

    monkeypatch.setattr(mod, "timed_out", lambda o, c, v, s: (s.now - s.wait_start) * 1000.0 >= o.num(c.max_delay_ms))
    got = {r.property: r for r in run_catalogue((HARDENED,), properties=("agreement", "refinement"))}
    assert got["agreement"].status == "refuted" and not got["agreement"].ok
    assert got["refinement"].status == "refuted"  # the independent encoding still reads the reduced flag
