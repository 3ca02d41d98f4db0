"""The simulator's model against SGLang 0.5.23's own scheduler code (``--scheduler sglang``), pass by pass.

Each workload of ``sim.differential.WORKLOADS`` runs on both backends: every pass
must record the same thing on every rank (which ranks negotiated, with which
inputs, the verdicts, what each admitted and prefilled, what finished), and the
summary metrics (input tok/s, TTFT p50/p99, mixed share) must agree within 2%.
SGLang's scheduler imports only in the environment ``.ci/sglang-scheduler``
builds, which runs this file with ``PREFILL_DELAYER_REQUIRE_SGLANG_SCHEDULER=1``
(then it fails instead of skipping); elsewhere it skips and says why.
"""

from __future__ import annotations

import os

import pytest

from prefill_delayer.sim.differential import SUMMARY, TOLERANCE, WORKLOADS, compare

REQUIRE = "PREFILL_DELAYER_REQUIRE_SGLANG_SCHEDULER"


def _scheduler_problem() -> str | None:
    from prefill_delayer.integrations.sglang.cpu_scheduler import SchedulerUnavailable, import_scheduler

    try:
        import_scheduler()
    except SchedulerUnavailable as err:
        return str(err)
    return None


@pytest.fixture(scope="module")
def scheduler_here() -> None:
    problem = _scheduler_problem()
    if problem is not None:
        message = f"SGLang 0.5.23's scheduler does not import here ({problem}); `bash .ci/sglang-scheduler` runs this test"
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 but {message}")
        pytest.skip(message)


pytestmark = pytest.mark.sglang


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_the_model_makes_the_passes_sglangs_scheduler_makes(scheduler_here: None, name: str) -> None:
    c = compare(name)
    assert c.model.passes == c.sglang.passes == WORKLOADS[name].config.passes
    if c.first_difference is not None:
        k = c.first_difference
        shown = "\n".join(f"  rank {i}:\n    model  {x}\n    sglang {y}" for i, x, y in c.differing(k))
        pytest.fail(f"{name}: pass {k} (t={c.model.t0[k]:.3f} s) differs:\n{shown}")
    for metric in SUMMARY:
        gap = c.relative(metric)
        assert gap is not None and abs(gap) <= TOLERANCE, f"{name}: {metric} is {gap:+.2%} off"
    # The runs exercised the delayer and finished requests on both sides: not an empty comparison.
    assert c.model.summary().completed > 0 and len(c.model.trace) == c.model.passes
    if WORKLOADS[name].profile != "off":
        assert any(t.negotiated is not None for row in c.model.trace for t in row)


def test_the_case_with_health_checks_dropped_some_on_both_backends(scheduler_here: None) -> None:
    c = compare("health-total-requests")
    dropped = [sum(1 for *_, taken in r.health_checks if not taken) for r in (c.model, c.sglang)]
    assert dropped[0] == dropped[1] > 0
    assert [h[:2] for h in c.model.health_checks] == [h[:2] for h in c.sglang.health_checks]


@pytest.mark.parametrize("given, tracker", [("aligned+window", "window"), ("sglang-0.5.17", "decay"), ("hardened+decay", "decay")])
def test_sglangs_scheduler_refuses_a_tracker_it_does_not_run(scheduler_here: None, given: str, tracker: str) -> None:
    # 0.5.23's scheduler tracks with its window, and aligned's delayer keeps its decay (the aligned case above):
    # any other pairing would be labelled one thing and run another.
    from prefill_delayer.sim.config import Variant
    from prefill_delayer.sim.engine import run_variant
    from prefill_delayer.sim.errors import SimInputError

    case = WORKLOADS["aligned"]
    with pytest.raises(SimInputError, match=f"whose max_prefill_bs tracker is window.*asks for {tracker}"):
        run_variant(case.config.replace(scheduler="sglang"), Variant.of(given), case.workload)


def test_the_aligned_busy_case_is_one_where_the_busy_rule_decides() -> None:
    # Model only (no scheduler needed): the case above is worth running against SGLang's scheduler only if aligned's
    # busy rule changes its verdicts there. With busy_watermark off the same run forces passes the rule holds.
    from prefill_delayer.sim.engine import run_variant

    case = WORKLOADS["aligned-busy"]
    on = run_variant(case.config, case.variant(), case.workload)
    off = run_variant(case.config.replace(policy_params=(("busy_watermark", None),)), case.variant(), case.workload)
    held = [k for k in range(min(on.passes, off.passes))
            if on.trace[k][0].decision != off.trace[k][0].decision]
    assert held, "the busy rule decides no pass of the aligned-busy case"
    k = held[0]
    assert off.trace[k][0].decision.endswith("/token_watermark")
    assert not on.trace[k][0].decision.endswith("/token_watermark")


def test_the_aligned_quorum_case_is_one_where_the_quorum_decides_and_the_queue_reading_counts() -> None:
    # Model only: the case is worth running against SGLang's scheduler only if the quorum allows passes there that
    # aligned without it holds, and if some rank has work only by the queue the plugin reads (requests queued behind a
    # full running batch, no call site reached).
    from prefill_delayer.sim.engine import run_variant

    case = WORKLOADS["aligned-quorum"]
    on = run_variant(case.config, case.variant(), case.workload)
    off = run_variant(case.config.replace(policy_params=()), case.variant(), case.workload)
    fired = [k for k in range(on.passes) if on.trace[k][0].decision.endswith("/quorum")]
    assert fired, "the quorum decides no pass of the aligned-quorum case"
    assert not off.trace[fired[0]][0].decision.endswith("/quorum")
    assert any(t.negotiated is None and t.queue > 0 for row in on.trace for t in row)


def test_the_aligned_chunk_hold_case_is_one_where_chunks_are_parked() -> None:
    # Model only: the case is worth running against SGLang's scheduler only if a refusal parks a chunk there, one the
    # run without the hold prefills, and if some refused chunk is at or below the threshold and goes on.
    from prefill_delayer.sim.engine import run_variant

    case = WORKLOADS["aligned-chunk-hold"]
    on = run_variant(case.config, case.variant(), case.workload)
    refused = [t for row in on.trace for t in row if t.chunk and t.verdict is False]
    assert any(not t.prefilled for t in refused), "no refused chunk is parked in the aligned-chunk-hold case"
    assert any(t.prefilled for t in refused), "every refused chunk of the aligned-chunk-hold case is parked"
    off = run_variant(case.config.replace(policy_params=()), case.variant(), case.workload)
    assert all(t.prefilled for row in off.trace for t in row if t.chunk and t.verdict is False)


def test_the_aligned_both_case_is_one_where_the_quorum_allows_and_chunks_are_parked() -> None:
    # Model only: with both opt-ins the case is worth running against SGLang's scheduler only if, in one run, the
    # quorum allows passes and a refusal parks a chunk (the plugin's two hooks, the queue reading and the AROUND hold,
    # both deciding).
    from prefill_delayer.sim.engine import run_variant

    case = WORKLOADS["aligned-both"]
    assert dict(case.config.policy_params) == {"chunk_hold_tokens": 2048, "quorum_percent": 75}
    on = run_variant(case.config, case.variant(), case.workload)
    assert any(t.decision.endswith("/quorum") for row in on.trace for t in row), "the quorum decides no pass"
    assert any(t.chunk and t.verdict is False and not t.prefilled for row in on.trace for t in row), "no chunk is parked"


def test_simulate_on_sglangs_scheduler_runs_aligned_with_its_own_parameter_and_refuses_sglangs(
        scheduler_here: None, capsys: pytest.CaptureFixture[str]) -> None:
    # --scheduler sglang runs aligned with the tracker its delayer keeps (not refused as aligned+window), and --set
    # reaches the plugin's delayer there: a parameter SGLang's settings give is refused, naming the option that does.
    from prefill_delayer.cli import main

    run = ["simulate", "--scheduler", "sglang", "--profile", "aligned", "--dp-size", "2", "--passes", "40", "--workload",
           "poisson", "--rate", "20", "--prompt-tokens", "500:2000", "--output-tokens", "50:100", "--no-progress"]
    assert main([*run, "--set", "quorum_percent=75"]) == 0
    capsys.readouterr()
    assert main([*run, "--set", "long_chunk_tokens=100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("--set long_chunk_tokens is SGLang's server argument chunked_prefill_size there; set it with "
                        "--chunked-prefill-size"), err
