"""ATOM #930 and vLLM #48246's port inside SGLang 0.5.23: their inputs are what SGLang's call sites pass, so the
plugin runs them.

``PREFILL_DELAYER_PROFILE=atom-930`` (or ``vllm-48246``) replaces SGLang's classes with the shell
for that profile; built from SGLang's own runtime context on two gloo ranks,
the shell reduces over SGLang's TP group with one all-reduce per pass (MAX for
#930, SUM for #48246) and decides as ``PolicyCore`` does on the same arguments. The profiles whose
inputs SGLang does not pass stop the process at start-up, saying which.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from prefill_delayer.runtime import PolicyCore, run_ranks
from prefill_delayer.spec import Config

from runtime_harness import Clock, results, spawn_gloo
from sglang_harness import OURS, layout_widths, publish_context, run_python, sglang_skip_reason

pytestmark = [pytest.mark.sglang, pytest.mark.skipif(sglang_skip_reason() is not None, reason=str(sglang_skip_reason()))]

SCHEDULE = {"prefill_delayer_max_delay_ms": 30.0}
_LOAD = """
import json, logging
logging.basicConfig(level=logging.INFO)
from sglang.srt.plugins import load_plugins
load_plugins()
import sglang.srt.managers.prefill_delayer as pd
print(json.dumps({"module": f"{pd.PrefillDelayer.__module__}.{pd.PrefillDelayer.__name__}", "profile": pd.PrefillDelayer.profile}))
"""


# the profiles the plugin runs here, and what of SGLang's call each reads
READS = {"atom-930": lambda pre, usage: (pre, usage), "vllm-48246": lambda pre, usage: (pre,)}


@pytest.mark.parametrize("profile", sorted(READS))
def test_the_plugin_runs_it(profile: str) -> None:
    done = run_python(_LOAD, {"PREFILL_DELAYER_PROFILE": profile})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out == {"module": OURS[0], "profile": profile}
    assert f"profile {profile} (PREFILL_DELAYER_PROFILE={profile})" in done.stderr


@pytest.mark.parametrize("profile, missing", [("atom-coalescer", "no pending tokens"), ("lockstep", "no prefill_in_flight"),
                                              ("atom-coalescer-hardened", "no partial-chunk flag")])
def test_the_plugin_refuses_what_sglangs_call_sites_cannot_drive(profile: str, missing: str) -> None:
    done = run_python(_LOAD, {"PREFILL_DELAYER_PROFILE": profile})
    assert done.returncode == 1 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"prefill-delayer: PREFILL_DELAYER_PROFILE={profile!r}: ") and missing in last, done.stderr
    assert "atom-930" in last and "Traceback" not in done.stderr


def _trace(seed: int, world: int, passes: int) -> list[list[tuple[bool, float, int]]]:
    rng = random.Random(seed)
    return [[(rng.random() < 0.5, rng.choice([0.1, 0.6, 0.9]), rng.randint(0, 20)) for _ in range(world)] for _ in range(passes)]


def _shell(rank: int, world: int, trace: list, profile: str) -> dict[str, Any]:
    from prefill_delayer.integrations.sglang import PrefillDelayer, PrefillDelayerSinglePassExecutor

    publish_context(rank, world, layout_widths(world, attn_dp_size=world), SCHEDULE)
    clock = Clock(rate=1.0 + 0.5 * rank)  # this rank's clock runs faster than its peer's
    d = PrefillDelayer(4, 0.2, clock=clock, profile=profile)
    out = []
    for step in trace:
        clock.t += 0.01
        pre, usage, waiting = step[rank]
        ex = PrefillDelayerSinglePassExecutor(d, usage)
        allow = ex.negotiate_should_allow_prefill(pre, 3, 2, 64, waiting)
        again = ex.negotiate_should_allow_prefill(pre, 3, 2, 64, waiting)  # a repeat call returns the verdict, no collective
        ex.finalize(actual_prefill_bs=1 if allow and pre else 0)
        out.append((allow, again, ex._result.output_reason))
    return {"decisions": out, "collective": type(d.core._gather).__name__, "config": d.config.as_dict()}


@pytest.mark.multiprocess
@pytest.mark.parametrize("profile", sorted(READS))
def test_the_shell_reduces_over_sglangs_group_and_decides_as_the_core(profile: str) -> None:
    world, trace = 2, _trace(930, 2, 40)
    per_rank = results(spawn_gloo(world, _shell, trace, profile))
    assert all(o["collective"] == "TorchAllReduce" for o in per_rank)
    assert per_rank[0]["config"]["profile"] == profile
    assert per_rank[0]["config"]["max_delay_ms"] == SCHEDULE["prefill_delayer_max_delay_ms"]  # read where SGLang keeps it
    c = Config(**per_rank[0]["config"])

    def rank_main(rank: int, gather: Any) -> list[tuple]:
        clock = Clock(rate=1.0 + 0.5 * rank)
        core = PolicyCore(c, gather, clock=clock, decision_log=False)
        out = []
        for step in trace:
            clock.t += 0.01
            pre, usage, _ = step[rank]
            d = core.negotiate(*READS[profile](pre, usage))
            core.finalize()
            out.append((d.output_allow, d.output_allow, d.output_reason))
        return out

    assert [o["decisions"] for o in per_rank] == run_ranks(world, rank_main)
    reasons = {r for o in per_rank for _, _, r in o["decisions"]}
    assert {"delay", "wait_timeout"} <= reasons  # the skewed clocks are reached
