"""The runtime's all-reduce on real gloo groups (2-4 ranks): decisions, and today's failure handling without rows.

ATOM's delayers and vLLM #48246's decide from one ``all_reduce`` (SUM for the
coalescer and #48246's count, MAX for #930); ``PolicyCore.over_group`` reduces
over ``torch.distributed`` for them.
Checked here on loopback gloo groups with a short collective timeout: the
decisions equal an in-process run's; one bad input, several, another
configuration, a dead peer each fail the pass on every rank alike with the
state kept, except where the profile itself fails open (ATOM's coalescer),
whose rank then decides alone.
"""

from __future__ import annotations

import os
import random
import time
from typing import Any

import pytest

from prefill_delayer.runtime import PolicyCore, run_ranks
from prefill_delayer.runtime.errors import CollectiveError, ConfigMismatchError, PeerInputError
from prefill_delayer.runtime.reduce import ReduceCore, TorchAllReduce
from prefill_delayer.spec import Config

from runtime_harness import COLLECTIVE_TIMEOUT_S, error_info, results, spawn_gloo

pytestmark = pytest.mark.multiprocess


def _coalescer_inputs(rng: random.Random, world: int, passes: int) -> list[list[dict[str, Any]]]:
    return [[{"prefillable": rng.random() < 0.8, "pending_tokens": rng.choice([0, 5, 40, 200]),
              "running_decode_batch": rng.choice([0, 8, 8, 8]), "kv_usage": rng.choice([0.1, 0.5, 0.5, 0.95]),
              "has_partial": rng.random() < 0.2, "oldest_waiting_age_ms": rng.choice([0.0, 10.0, 900.0])}
             for _ in range(world)] for _ in range(passes)]


def _930_inputs(rng: random.Random, world: int, passes: int) -> list[list[dict[str, Any]]]:
    return [[{"local_prefillable": rng.random() < 0.6, "token_usage": rng.choice([0.05, 0.5, 0.9])} for _ in range(world)]
            for _ in range(passes)]


def _48246_inputs(rng: random.Random, world: int, passes: int) -> list[list[dict[str, Any]]]:
    return [[{"local_prefillable": rng.random() < 0.6} for _ in range(world)] for _ in range(passes)]


CONFIGS = {
    "atom-coalescer": dict(max_num_batched_tokens=64, ttft_max_ticks=4, stall_ticks=2, partial_max_ticks=3,
                           token_usage_low_watermark=0.2, max_queue_ms=500.0),
    "atom-930": dict(max_delay_passes=3, token_usage_low_watermark=0.2),
    "vllm-48246": dict(max_delay_passes=3),
}
INPUTS = {"atom-coalescer": _coalescer_inputs, "atom-930": _930_inputs, "vllm-48246": _48246_inputs}
# per profile: a good call, the field a bad call breaks and its bad value, and a parameter to mismatch
GOOD = {"atom-coalescer": {"prefillable": True, "pending_tokens": 1}, "atom-930": {"local_prefillable": True, "token_usage": 0.5},
        "vllm-48246": {"local_prefillable": True}}
BAD = {"atom-coalescer": ("pending_tokens", -1), "atom-930": ("token_usage", -1), "vllm-48246": ("local_prefillable", 1)}
OTHER = {"atom-coalescer": ("token_usage_low_watermark", 0.3), "atom-930": ("token_usage_low_watermark", 0.3),
         "vllm-48246": ("max_delay_passes", 4)}


def _decide(core: Any, run: list, rank: int) -> list[tuple]:
    out = []
    for per_rank in run:
        d = core.negotiate(**per_rank[rank])
        core.finalize()
        out.append((d.output_allow, d.output_reason, d.wait_forward_passes))
    return out


def _over_gloo(rank: int, world: int, profile: str, seed: int) -> dict[str, Any]:
    c = Config(profile=profile, dp_size=world, **CONFIGS[profile])
    run = INPUTS[profile](random.Random(seed), world, 30)
    core = PolicyCore.over_group(c, clock=lambda: 0.0, decision_log=False)
    return {"kind": type(core).__name__, "collective": type(core._gather).__name__, "decisions": _decide(core, run, rank),
            "group": core._group}


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("profile", ["atom-coalescer", "atom-930", "vllm-48246"])
def test_over_gloo_the_reduce_decides_as_in_process(profile: str, world: int) -> None:
    per_rank = results(spawn_gloo(world, _over_gloo, profile, world))
    c = Config(profile=profile, dp_size=world, **CONFIGS[profile])
    run = INPUTS[profile](random.Random(world), world, 30)
    want = run_ranks(world, lambda r, g: _decide(PolicyCore(c, g, clock=lambda: 0.0, decision_log=False), run, r))
    assert [o["decisions"] for o in per_rank] == want
    assert all(o["kind"] == "ReduceCore" and o["collective"] == "TorchAllReduce" for o in per_rank)
    op = c.policy.collective.removeprefix("all_reduce_").upper()
    assert f"all_reduce {op}, {world} ranks" in per_rank[0]["group"]
    assert len({d[0] for o in per_rank for d in o["decisions"]}) == 2  # the runs both hold and release


def _failures(rank: int, world: int, profile: str) -> dict[str, Any]:
    c = Config(profile=profile, dp_size=world, **CONFIGS[profile])
    good, (bad_field, bad) = GOOD[profile], BAD[profile]
    core = PolicyCore.over_group(c, clock=lambda: 0.0, decision_log=False)
    core.negotiate(**good)
    core.finalize()
    out: dict[str, Any] = {}
    for label, bad_ranks in (("one", {1}), ("several", {1, world - 1})):
        state, passes = core.state, core.passes
        try:
            core.negotiate(**{**good, bad_field: bad if rank in bad_ranks else good[bad_field]})
        except PeerInputError as err:
            out[label] = {**error_info(err), "kept": core.state == state and core.passes == passes}
    name, value = OTHER[profile]
    other = Config(profile=profile, dp_size=world, **{**CONFIGS[profile], **({name: value} if rank == 0 else {})})
    try:
        PolicyCore.over_group(other, clock=lambda: 0.0, decision_log=False).negotiate(**good)
    except ConfigMismatchError as err:
        out["mismatch"] = error_info(err)
    core.negotiate(**good)  # the group still works after the refused passes
    out["after"] = core.passes
    return out


@pytest.mark.parametrize("world", [3])
@pytest.mark.parametrize("profile", ["atom-coalescer", "atom-930", "vllm-48246"])
def test_over_gloo_a_bad_pass_fails_on_every_rank_alike(profile: str, world: int) -> None:
    per_rank = results(spawn_gloo(world, _failures, profile))
    field = BAD[profile][0]
    for o in per_rank:
        assert o["one"]["message"] == per_rank[0]["one"]["message"]
        assert o["one"]["message"].endswith(f"invalid negotiate input on rank 1 (rank 1: {field})") and o["one"]["kept"]
        assert o["several"]["message"] == per_rank[0]["several"]["message"] and o["several"]["kept"]
        assert "several ranks" in o["several"]["message"] or "2 ranks" in o["several"]["message"]
        assert o["mismatch"]["type"].endswith("ConfigMismatchError") and o["mismatch"]["message"] == per_rank[0]["mismatch"]["message"]
        assert o["after"] == 2
    assert per_rank[1]["one"]["cause"]["type"] == "PassInputError" and per_rank[0]["one"]["cause"] is None
    if profile == "atom-coalescer":
        assert "pending_tokens: 2 ranks" in per_rank[0]["several"]["message"]


def _dead_peer(rank: int, world: int, profile: str) -> dict[str, Any]:
    c = Config(profile=profile, dp_size=world, **CONFIGS["atom-coalescer"])
    core = PolicyCore.over_group(c, clock=lambda: 0.0, decision_log=False)
    call = {"prefillable": True, "pending_tokens": 1, "running_decode_batch": 8, "kv_usage": 0.5}
    core.negotiate(**call)  # the first call
    core.finalize()
    core.negotiate(**call)  # a hold: the fill is low
    core.finalize()
    if rank == world - 1:
        os._exit(0)  # dies between ticks, as a crashed scheduler would
    before, t0 = core.state, time.monotonic()
    try:
        d = core.negotiate(**call)
    except CollectiveError as err:
        return {"elapsed": time.monotonic() - t0, "error": error_info(err), "kept": core.state == before, "held": before.hold_ticks}
    return {"elapsed": time.monotonic() - t0, "error": None, "decision": (d.output_allow, d.output_reason), "state": tuple(core.state),
            "held": before.hold_ticks}


@pytest.mark.parametrize("profile, fails_open", [("atom-coalescer-hardened", False), ("atom-coalescer", True)])
def test_a_dead_peer(profile: str, fails_open: bool) -> None:
    """The hardened profile raises on every survivor with its state kept; ATOM's own fails open on each survivor."""
    out = spawn_gloo(3, _dead_peer, profile, destroy=False)
    assert out[2] == ("exit", 0)
    for rank in (0, 1):
        status, o = out[rank]
        assert status == "ok", o
        assert o["elapsed"] < COLLECTIVE_TIMEOUT_S + 2.0 and o["held"] == 1
        if fails_open:
            assert o["error"] is None and o["decision"] == (True, "fail_open") and o["state"][:5] == ("released", 0, 0, 0, False)
        else:
            assert o["error"]["type"] == "CollectiveError" and o["kept"] and "pass 3" in o["error"]["message"]
            assert "all_reduce SUM, 3 ranks" in o["error"]["message"]


def test_a_reduce_policy_gets_the_reduce_core() -> None:
    c = Config(profile="atom-930", dp_size=2)
    assert run_ranks(2, lambda r, g: type(PolicyCore(c, g, decision_log=False))) == [ReduceCore, ReduceCore]
    with pytest.raises(Exception, match="initialized torch.distributed"):
        TorchAllReduce(None, "cpu", 2, 8, "all_reduce_max")
