"""The plugin inside SGLang 0.5.23's own scheduler module (``sglang.srt.managers.scheduler``).

The scheduler imports torchvision, whose PyPI build needs CUDA torch, so these
run in the scheduler environment (``.ci/sglang-scheduler`` builds it and runs
them with ``PREFILL_DELAYER_REQUIRE_SGLANG_SCHEDULER=1``, which turns the skip
into a failure). Elsewhere they skip and say so.

Each case is two fresh interpreters, the ranks of a 2-way DP-attention gloo
world, each doing what a scheduler process does, in its order: import the scheduler module, ``load_plugins()``, publish SGLang's
runtime context, then SGLang's own ``Scheduler.init_schedule_policy`` builds
the delayer (with the scheduler's keywords) and the scheduler module's
``PrefillDelayerSinglePassExecutor`` runs passes over it. Nothing of SGLang is
stubbed: the ``Scheduler`` is bare (``__new__``) with the attributes its
``__init__`` sets before that call, read off the same context.
"""

from __future__ import annotations

import json
import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import pytest

from sglang_harness import OURS, SGLANG_RELEASE, THEIRS, layout_widths, run_python, sglang_skip_reason

pytestmark = [pytest.mark.sglang, pytest.mark.skipif(sglang_skip_reason() is not None, reason=str(sglang_skip_reason()))]

REQUIRE = "PREFILL_DELAYER_REQUIRE_SGLANG_SCHEDULER"
NO_SCHEDULER = "SCHEDULER-DOES-NOT-IMPORT: "
WORLD = 2
# DP attention over the two ranks; a delay cap far above a pass's time keeps the decisions off the clock.
LAYOUT = layout_widths(WORLD, attn_dp_size=WORLD)
SCHEDULE = {"prefill_delayer_max_delay_passes": 3, "prefill_delayer_token_usage_low_watermark": 0.3,
            "prefill_delayer_queue_min_ratio": 0.5, "prefill_delayer_max_delay_ms": 60000.0, "prefill_max_requests": 6}


def make_passes(rank: int, n: int = 16) -> list[tuple]:
    """One rank's passes: token usage, negotiate's five inputs, the batch the scheduler would admit."""
    rng = random.Random(rank)
    out = []
    for _ in range(n):
        wq = rng.randint(0, 10)
        out.append((rng.choice([0.1, 0.6, 0.9]), rng.random() < 0.6, rng.randint(0, 8), rng.randint(0, 3),
                    rng.choice([8, 16]), wq, rng.randint(1, max(wq, 1))))
    return out


_SCHEDULER_PROCESS = """
    import json, logging, os, sys
    from datetime import timedelta
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    try:
        import sglang.srt.managers.scheduler as scheduler
    except Exception as err:
        print("{no_scheduler}" + type(err).__name__ + ": " + str(err).splitlines()[0])
        raise SystemExit(0)
    import torch.distributed as dist
    from sglang.srt.plugins import load_plugins
    from sglang.srt.runtime_context import get_lora, get_memory, get_schedule
    from prefill_delayer.integrations.sglang.cpu_context import publish_context

    load_plugins()  # what run_scheduler_process does first, the scheduler module already imported

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method="file://" + os.environ["INIT_FILE"], rank=rank,
                            world_size={world}, timeout=timedelta(seconds=120))
    publish_context(rank, {world}, {layout!r}, {schedule!r})
    s = scheduler.Scheduler.__new__(scheduler.Scheduler)
    # What Scheduler.__init__ sets before init_schedule_policy, read as it reads them.
    s.server_args = None
    s.schedule_policy = get_schedule().schedule_policy
    s.enable_priority_scheduling = get_schedule().enable_priority_scheduling
    s.schedule_low_priority_values_first = get_schedule().schedule_low_priority_values_first
    s.enable_hierarchical_cache = get_memory().enable_hierarchical_cache
    s.enable_lora = get_lora().enable_lora
    s.tree_cache = None  # prefix caching off: the policy falls back to FCFS
    s.init_metrics_collector()
    s.init_metrics_reporter()
    s.init_schedule_policy()

    returns = []
    for usage, prefillable, rb, pb, mrr, wq, bs in json.loads(os.environ["PASSES"]):
        ex = scheduler.PrefillDelayerSinglePassExecutor(s.prefill_delayer, token_usage=usage)
        allow = ex.negotiate_should_allow_prefill(prefillable, rb, pb, mrr, wq)
        returns.append([allow, ex.finalize(actual_prefill_bs=bs if allow and prefillable else 0)])
    dist.destroy_process_group()

    def name(c): return c.__module__ + "." + c.__qualname__
    print(json.dumps({{
        "names": [name(scheduler.PrefillDelayer), name(scheduler.PrefillDelayerSinglePassExecutor)],
        "built": name(type(s.prefill_delayer)),
        "profile": getattr(s.prefill_delayer, "profile", None),
        "returns": returns,
    }}))
"""


def _scheduler_processes(setting: Optional[str], tmp: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Two scheduler processes' start-up and passes under ``PREFILL_DELAYER_PROFILE=setting`` (unset for None)."""
    script = _SCHEDULER_PROCESS.format(no_scheduler=NO_SCHEDULER, world=WORLD, layout=LAYOUT, schedule=SCHEDULE)
    env = {} if setting is None else {"PREFILL_DELAYER_PROFILE": setting}
    init_file = tmp / f"init-{setting}"
    with ThreadPoolExecutor(WORLD) as pool:
        runs = list(pool.map(lambda rank: run_python(script, {
            **env, "RANK": str(rank), "INIT_FILE": str(init_file), "PASSES": json.dumps(make_passes(rank)),
        }, timeout_s=300.0), range(WORLD)))
    for done in runs:
        if done.stdout.startswith(NO_SCHEDULER):
            why = done.stdout.strip()[len(NO_SCHEDULER):]
            message = (f"sglang.srt.managers.scheduler does not import in this environment ({why}); it needs "
                       "torchvision, whose PyPI build needs CUDA torch: `bash .ci/sglang-scheduler` builds an "
                       "environment where it imports, and runs these tests there")
            if os.environ.get(REQUIRE) == "1":
                pytest.fail(f"{REQUIRE}=1 but {message}")
            pytest.skip(message)
    for done in runs:
        assert done.returncode == 0, done.stderr
    return [json.loads(done.stdout) for done in runs], [done.stderr for done in runs]


# What SGLang's own class and ours print at start-up: the settings the scheduler passed.
SETTINGS_LINE = (f"PrefillDelayer initialized with max_delay_passes={SCHEDULE['prefill_delayer_max_delay_passes']} "
                 f"token_usage_low_watermark={SCHEDULE['prefill_delayer_token_usage_low_watermark']} "
                 f"queue_min_ratio={SCHEDULE['prefill_delayer_queue_min_ratio']} "
                 f"max_delay_ms={SCHEDULE['prefill_delayer_max_delay_ms']} queue_trigger_enabled=True")


@pytest.fixture(scope="module")
def theirs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    outs, stderrs = _scheduler_processes(None, tmp_path_factory.mktemp("theirs"))
    for stderr in stderrs:
        assert "prefill-delayer active" not in stderr and SETTINGS_LINE in stderr, stderr
    return outs


def test_without_the_variable_the_scheduler_keeps_sglangs_own(theirs: list[dict[str, Any]]) -> None:
    for out in theirs:
        assert out["names"] == THEIRS and out["built"] == THEIRS[0] and out["profile"] is None
        assert len(out["returns"]) == len(make_passes(0))
    # The trace is one that exercises the policy: some passes are delayed, some released.
    allows = {allow for out in theirs for allow, _ in out["returns"]}
    assert allows == {True, False}


@pytest.mark.parametrize("setting, profile", [("sglang", "sglang-0.5.22"), ("hardened", "hardened")])
def test_with_the_variable_the_schedulers_own_code_builds_and_drives_ours(
        theirs: list[dict[str, Any]], tmp_path: Path, setting: str, profile: str) -> None:
    ours, stderrs = _scheduler_processes(setting, tmp_path)
    for out, stderr in zip(ours, stderrs):
        assert out["names"] == OURS and out["built"] == OURS[0] and out["profile"] == profile
        active = [line for line in stderr.splitlines() if "prefill-delayer active" in line]
        assert len(active) == 1 and f"SGLang {SGLANG_RELEASE}'s PrefillDelayer" in active[0], stderr
        assert f"{SETTINGS_LINE} profile={profile}" in stderr, stderr
    if profile == "sglang-0.5.22":  # the installed release's policy: what SGLang's own class returned, pass by pass
        assert [out["returns"] for out in ours] == [out["returns"] for out in theirs]
    else:
        assert [len(out["returns"]) for out in ours] == [len(make_passes(0))] * WORLD
