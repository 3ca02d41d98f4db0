"""The SGLang shell logs too: PREFILL_DELAYER_DECISION_LOG=DIR, unchanged, under SGLang's own runtime context
on gloo ranks, and check-log finds the logs clean."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from prefill_delayer.runtime.decision_log import DECISION_LOG_ENV

from decision_log_harness import PASS_SECONDS, check_log, mixed_inputs, read_lines
from runtime_harness import Clock, results, spawn_gloo
from sglang_harness import layout_widths, publish_context, sglang_skip_reason

pytestmark = [pytest.mark.sglang, pytest.mark.multiprocess,
              pytest.mark.skipif(sglang_skip_reason() is not None, reason=str(sglang_skip_reason()))]

SCHEDULE = {"prefill_delayer_queue_min_ratio": 0.5, "prefill_delayer_max_delay_ms": 10.0}
PASSES = 40


def _shell_scenario(rank: int, world: int, folder: str) -> list[tuple]:
    os.environ[DECISION_LOG_ENV] = folder  # as an operator sets it for the SGLang server
    publish_context(rank, world, layout_widths(world, attn_dp_size=world), SCHEDULE)
    from prefill_delayer.integrations.sglang import PrefillDelayer, PrefillDelayerSinglePassExecutor

    clock = Clock(offset=1000.0 + 3.0 * rank)
    d = PrefillDelayer(4, 0.5, None, True, clock=clock, profile="sglang-0.5.22")  # SGLang 0.5.23's constructor
    out = []
    for k in range(PASSES):
        clock.t = PASS_SECONDS * k
        prefillable, usage, rb, pb, mrr, wq = mixed_inputs(rank, k)
        ex = PrefillDelayerSinglePassExecutor(d, usage)
        allow = ex.negotiate_should_allow_prefill(prefillable, rb, pb, mrr, wq) if prefillable else False
        ex.finalize(actual_prefill_bs=4 if allow else 0)
        out.append((ex._result.output_allow, ex._result.output_reason))
    d.core.close()
    return out


def test_the_sglang_shell_logs_through_the_environment_variable(tmp_path: Path) -> None:
    outs = results(spawn_gloo(2, _shell_scenario, str(tmp_path)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.jsonl", "rank1.jsonl"]
    for rank in (0, 1):
        lines = read_lines(tmp_path / f"rank{rank}.jsonl")
        assert lines[0]["profile"] == "sglang-0.5.22" and lines[0]["group_ranks"] == [0, 1]
        assert [(x["decision"]["output_allow"], x["decision"]["output_reason"]) for x in lines[1:]] == [tuple(t) for t in outs[rank]]
    rc, out, err = check_log(str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert rc == 0, out + err
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["checked"] == {"conformance": 2 * PASSES, "agreement": PASSES}
