"""Counterexample traces are real: the runtime reproduces them; the hardened profile does not."""

from __future__ import annotations

import copy
import json

import pytest

pytest.importorskip("z3")

from prefill_delayer.proofs.cli import main as cli  # noqa: E402
from prefill_delayer.proofs.prove import run_catalogue  # noqa: E402
from prefill_delayer.proofs.replay import replay, run_trace  # noqa: E402
from prefill_delayer.proofs.violations import find_violation  # noqa: E402

pytestmark = pytest.mark.proofs


@pytest.fixture(scope="module")
def traces():
    results = run_catalogue(profiles=("seed",), properties=["bounded-delay", "agreement"])
    return {r.property: r.trace for r in results}


@pytest.mark.parametrize("prop", ["bounded-delay", "agreement"])
def test_runtime_reproduces_seed_counterexample(traces, prop):
    ok, lines = replay(traces[prop])
    assert ok, "\n".join(lines)
    assert lines[-1].startswith("REPRODUCED")


@pytest.mark.parametrize("prop", ["bounded-delay", "agreement"])
def test_hardened_runtime_does_not_violate_on_the_same_inputs(traces, prop):
    decisions = run_trace(traces[prop], profile="hardened")
    assert find_violation(prop, traces[prop]["config"], decisions) is None
    # Every hardened rank decided the same at every pass.
    assert all(len({(d["allow"], d["reason"], d["wait_forward_passes"]) for d in per_rank}) == 1 for per_rank in decisions)


def test_cli_replay_exit_codes(tmp_path, traces):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(traces["bounded-delay"]))
    assert cli(["replay", str(good)]) == 0

    # The same passes with a looser cap no longer violate the bound: exit 1.
    loose = copy.deepcopy(traces["bounded-delay"])
    loose["config"]["max_delay_passes"] = 50
    stale = tmp_path / "loose.json"
    stale.write_text(json.dumps(loose))
    assert cli(["replay", str(stale)]) == 1

    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"property": "agreement"}))
    assert cli(["replay", str(broken)]) == 2


@pytest.mark.registry
@pytest.mark.parametrize("prop", ["bounded-delay", "agreement"])
def test_seed_itself_reproduces_counterexample(traces, prop):
    """The trace is about the original code, not only ours: SGLang's seed release makes the same decisions."""
    from prefill_delayer.runtime import ServerArgs, run_ranks
    from prefill_delayer.spec.profiles import SEED_RELEASE

    from runtime_harness import require_release, seed_delayer

    require_release(SEED_RELEASE)
    trace = traces[prop]
    cfg, passes = trace["config"], trace["passes"]
    server_args = ServerArgs(
        enable_dp_attention=cfg["enable_dp_attention"],
        prefill_delayer_queue_min_ratio=cfg["queue_min_ratio"],
        prefill_delayer_max_delay_ms=cfg["max_delay_ms"],
        prefill_max_requests=cfg.get("prefill_max_requests"),
    )

    def rank_main(rank, gather):
        now = [0.0]
        delayer = seed_delayer(cfg["dp_size"], cfg["attn_tp_size"], server_args, cfg["max_delay_passes"],
                               cfg["token_usage_low_watermark"], gather, clock=lambda: now[0])
        out = []
        for p in passes:
            x = p["ranks"][rank]
            now[0] = x["now_s"]
            d = delayer._negotiate_should_allow_prefill(
                x["prefillable"], x["token_usage"], x["running_batch"], x["max_prefill_bs"], x["max_running_requests"], x["waiting_queue_len"]
            )
            out.append({"allow": d.output_allow, "reason": d.output_reason, "wait_forward_passes": d.wait_forward_passes})
        return out

    per_rank = run_ranks(len(passes[0]["ranks"]), rank_main)
    decisions = [[per_rank[r][i] for r in range(len(per_rank))] for i in range(len(passes))]
    assert decisions == [p["expect"] for p in passes]
    assert find_violation(prop, cfg, decisions) is not None
