"""TensorRT-LLM's attention-DP balance: the profile against the cases of ``PyExecutor._balance_adp_requests``, as facts.

The registry's ``tensorrt-llm`` is a stub that downloads the wheel from NVIDIA's
own index, so the released code cannot be run here. Each case below is one
branch of ``_balance_adp_requests`` (NVIDIA/TensorRT-LLM,
``tensorrt_llm/_torch/pyexecutor/py_executor.py``), read from the source and
written as gathered inputs, the two counts before, and what the code returns
and leaves; the profile must do exactly that through ``PolicyCore`` on every
rank. The last case is the run the proofs refute the hold bound with.
"""

from __future__ import annotations

from typing import Any

import pytest

from prefill_delayer.runtime import PolicyCore, run_ranks
from prefill_delayer.spec.policies.trtllm_adp_balance import BalanceConfig, State

T, B, MBS = 3, 2, 4
# (name, per-rank (num_ctx, num_gen), (waiting, batched) before, context requests run?, (waiting, batched) after)
CASES = [
    ("ready, all decode, batching owed: hold and count it", [(1, 1), (2, 3)], (0, 0), False, (0, 1)),
    ("ready, all decode, batching owed, the waiting count resets", [(1, 1), (1, 1)], (2, 1), False, (0, 2)),
    ("ready, all decode, batching spent: run and reset it", [(1, 1), (1, 2)], (0, B), True, (0, 0)),
    ("ready, a rank without decode: run, batching count kept", [(1, 0), (1, 1)], (1, 1), True, (0, 1)),
    ("a rank without context, all decode: hold and count the wait", [(0, 1), (1, 1)], (0, 1), False, (1, 1)),
    ("a rank without context, the wait reaches timeout_iters: run", [(0, 1), (1, 1)], (T - 1, 1), True, (0, 1)),
    ("a rank without context and one without decode: run", [(0, 1), (1, 0)], (1, 0), True, (0, 0)),
    ("a full rank (num_gen >= max_batch_size) is not ready", [(1, MBS), (1, 1)], (0, 0), False, (1, 0)),
]


def _one_pass(profile: str, per_rank: list[tuple[int, int]], before: tuple[int, int]) -> list[tuple[bool, tuple[int, int]]]:
    c = BalanceConfig(timeout_iters=T, batching_wait_iters=B, max_batch_size=MBS, dp_size=len(per_rank),
                      enable_dp_attention=True, profile=profile)
    waiting, batched = before
    start = State("waiting" if waiting else "open", waiting, batched)

    def rank_main(rank: int, gather: Any) -> tuple[bool, tuple[int, int]]:
        core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=False)
        core._state = start  # the counts the case starts from (the state a previous pass left)
        d = core.negotiate(*per_rank[rank])
        return d.output_allow, (core.state.waiting, core.state.batched)

    return run_ranks(len(per_rank), rank_main)


@pytest.mark.parametrize("name, per_rank, before, runs, after", CASES, ids=[c[0] for c in CASES])
def test_the_profile_takes_each_branch_of_balance_adp_requests(name: str, per_rank: list, before: tuple, runs: bool,
                                                                after: tuple) -> None:
    assert _one_pass("trtllm-adp-balance", per_rank, before) == [(runs, after)] * len(per_rank)


def test_the_two_holds_chain_past_timeout_plus_batching() -> None:
    """Waiting, then one batching hold, then waiting again: the waiting count restarts on the ready pass and the
    batching count survives the wait, so the run of holds outgrows timeout_iters + batching_wait_iters."""
    c = BalanceConfig(timeout_iters=T, batching_wait_iters=B, max_batch_size=MBS, dp_size=2, enable_dp_attention=True)
    not_ready, ready = [(0, 1), (1, 1)], [(1, 1), (1, 1)]
    passes = [not_ready, not_ready, ready, not_ready, not_ready, ready, not_ready, not_ready, ready]

    def rank_main(rank: int, gather: Any) -> list[bool]:
        core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=False)
        return [core.negotiate(*p[rank]).output_allow for p in passes]

    runs = run_ranks(2, rank_main)
    assert runs[0] == runs[1]
    held = runs[0].index(True)
    assert held == (T - 1) * (B + 1) + B > T + B  # 8 consecutive holds


def test_the_hardened_profile_bounds_the_same_run_by_the_timeout() -> None:
    c = BalanceConfig(timeout_iters=T, batching_wait_iters=B, max_batch_size=MBS, dp_size=2, enable_dp_attention=True,
                      profile="adp-hardened")
    not_ready, ready = [(0, 1), (1, 1)], [(1, 1), (1, 1)]
    passes = [not_ready, not_ready, ready, not_ready, not_ready, ready, not_ready, not_ready, ready]

    def rank_main(rank: int, gather: Any) -> list[bool]:
        core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=False)
        return [core.negotiate(*p[rank]).output_allow for p in passes]

    runs = run_ranks(2, rank_main)
    longest = max(len(r) for r in "".join("h" if not a else " " for a in runs[0]).split())
    assert longest <= T - 1
