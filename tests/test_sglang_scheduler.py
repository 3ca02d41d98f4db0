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
import subprocess
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


# A scheduler process up to its first pass, in its order: import the scheduler module, load_plugins(), join the
# world, publish SGLang's runtime context, and a bare Scheduler (__new__) with what Scheduler.__init__ sets before
# init_schedule_policy, read as it reads them; then SGLang's own init_schedule_policy builds the delayer.
_BARE_SCHEDULER = """
    import faulthandler, json, logging, os, sys
    from datetime import timedelta
    faulthandler.enable()  # a process gloo aborts prints where it was
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
    publish_context(rank, {world}, {layout!r}, {schedule!r}, gloo_timeout_s=10.0)
    s = scheduler.Scheduler.__new__(scheduler.Scheduler)
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
"""

_SCHEDULER_PROCESS = _BARE_SCHEDULER + """
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


def _run_schedulers(script: str, setting: Optional[str], tmp: Path, name: str,
                    rank_env: Any) -> list[subprocess.CompletedProcess]:
    """``script`` as two scheduler processes under ``PREFILL_DELAYER_PROFILE=setting`` (unset for None), each with
    ``rank_env(rank)`` in its environment; skips (fails under ``REQUIRE``) where the scheduler does not import."""
    env = {} if setting is None else {"PREFILL_DELAYER_PROFILE": setting}
    init_file = tmp / f"init-{name}-{setting}"
    with ThreadPoolExecutor(WORLD) as pool:
        runs = list(pool.map(lambda rank: run_python(script, {
            **env, "RANK": str(rank), "INIT_FILE": str(init_file), **rank_env(rank)}, timeout_s=300.0), range(WORLD)))
    for done in runs:
        if done.stdout.startswith(NO_SCHEDULER):
            why = done.stdout.strip()[len(NO_SCHEDULER):]
            message = (f"sglang.srt.managers.scheduler does not import in this environment ({why}); it needs "
                       "torchvision, whose PyPI build needs CUDA torch: `bash .ci/sglang-scheduler` builds an "
                       "environment where it imports, and runs these tests there")
            if os.environ.get(REQUIRE) == "1":
                pytest.fail(f"{REQUIRE}=1 but {message}")
            pytest.skip(message)
    return runs


def _scheduler_processes(setting: Optional[str], tmp: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Two scheduler processes' start-up and passes under ``PREFILL_DELAYER_PROFILE=setting`` (unset for None)."""
    script = _SCHEDULER_PROCESS.format(no_scheduler=NO_SCHEDULER, world=WORLD, layout=LAYOUT, schedule=SCHEDULE)
    runs = _run_schedulers(script, setting, tmp, "passes", lambda rank: {"PASSES": json.dumps(make_passes(rank))})
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


# ----- SGLang 0.5.23's --prefill-decode-interval with --prefill-decode-interval-min-bs > 0 -------------------
#
# The smallest real part of get_next_batch_to_run that decides deferral and runs both gathers, in its order:
# Scheduler._should_defer_prefill(running_batch) (SGLang's own); when it does not defer, the delayer's pass as
# get_new_batch_prefill runs it (the scheduler module's executor, negotiate, finalize(actual_prefill_bs=));
# then prepare_mlp_sync_batch_raw (SGLang's own: the mlp-sync all-gather, on the same tp_group.cpu_group as the
# delayer's on gloo) on the batch the pass runs; then Scheduler._arm_prefill_decode_interval (SGLang's own) on
# what the mlp-sync gather returned. The batches are SGLang's ScheduleBatch of real Req objects: a decode batch of
# the running requests, an extend batch of the admitted ones.

INTERVAL = {"prefill_decode_interval": 2, "prefill_decode_interval_min_bs": 4, "prefill_delayer_max_delay_passes": 3}
# Per pass and rank: (running batch size, waiting requests). Pass 1 prefills on both ranks and arms the interval;
# passes 2-3 defer on both (both running batches at or above min_bs 4); pass 4 prefills on both and re-arms it;
# pass 5 straddles min_bs: rank 0's batch (2) is below it, so rank 0 runs get_new_batch_prefill and the delayer's
# all-gather, while rank 1 (6) defers and goes straight to the mlp-sync all-gather.
INTERVAL_PLAN = [[(0, 2), (0, 2)], [(6, 0), (6, 0)], [(6, 0), (6, 0)], [(6, 2), (6, 2)], [(2, 1), (6, 0)], [(2, 1), (6, 0)]]
STRADDLE = 5

_INTERVAL_PROCESS = _BARE_SCHEDULER + """
    from array import array
    import torch
    from types import SimpleNamespace
    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.scheduler_components.dp_attn import prepare_mlp_sync_batch_raw
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    # What init_chunked_prefill sets for the interval, and require_mlp_sync() (DP attention: mlp sync is required).
    s.prefill_decode_interval = get_schedule().prefill_decode_interval or 0
    s._prefill_decode_interval_remaining = 0
    s.prefill_decode_interval_min_bs = get_schedule().prefill_decode_interval_min_bs
    s.require_mlp_sync = True
    spec = SpeculativeAlgorithm.NONE
    runner = SimpleNamespace(spec_algorithm=spec, model_config=None, prefill_cuda_graph_runner=None)
    made = [0]

    def reqs(k):
        made[0] += k
        return [Req(f"r{{rank}}-{{made[0] - i}}", "", array("i", [1, 2, 3]), SamplingParams()) for i in range(k)]

    def idle():
        return ScheduleBatch(reqs=[], forward_mode=ForwardMode.IDLE, spec_algorithm=spec)

    def name(c): return c.__module__ + "." + c.__qualname__
    print(json.dumps({{"delayer": name(type(s.prefill_delayer))}}), flush=True)
    for p, per_rank in enumerate(json.loads(os.environ["PLAN"]), 1):
        running_bs, waiting = per_rank[rank]
        rec = {{"pass": p, "remaining": s._prefill_decode_interval_remaining}}
        running = ScheduleBatch(reqs=reqs(running_bs), forward_mode=ForwardMode.DECODE,
                                seq_lens_cpu=torch.full((running_bs,), 8), spec_algorithm=spec)
        try:
            rec["deferred"] = s._should_defer_prefill(running)
            batch = running
            if not rec["deferred"]:
                ex = scheduler.PrefillDelayerSinglePassExecutor(s.prefill_delayer, token_usage=0.5)
                rec["allow"] = allow = ex.negotiate_should_allow_prefill(waiting > 0, running_bs, 0, 16, waiting)
                bs = waiting if allow else 0
                ex.finalize(actual_prefill_bs=bs)
                if bs:
                    batch = ScheduleBatch(reqs=reqs(bs), forward_mode=ForwardMode.EXTEND, extend_num_tokens=3 * bs,
                                          extend_lens=[3] * bs, prefix_lens=[0] * bs, extend_logprob_start_lens=[3] * bs,
                                          return_logprob=False, spec_algorithm=spec)
            batch = prepare_mlp_sync_batch_raw(batch, model_runner=runner, get_idle_batch=idle, disable_cuda_graph=True,
                                               require_mlp_tp_gather=True, disable_overlap_schedule=False,
                                               offload_tags=set())
            rec["mlp_num_tokens"] = batch.global_num_tokens
            s._arm_prefill_decode_interval(batch)
        except Exception as err:
            rec["error"] = {{"type": type(err).__name__, "message": str(err),
                            "passes": getattr(s.prefill_delayer, "passes", None)}}
            print(json.dumps(rec), flush=True)
            break
        print(json.dumps(rec), flush=True)
    print(json.dumps({{"done": True}}), flush=True)
"""


def _interval_processes(setting: Optional[str], tmp: Path) -> list[tuple[int, list[dict[str, Any]], str]]:
    """Two scheduler processes through INTERVAL_PLAN: (return code, the JSON lines printed, stderr) per rank."""
    script = _INTERVAL_PROCESS.format(no_scheduler=NO_SCHEDULER, world=WORLD, layout=LAYOUT, schedule=INTERVAL)
    runs = _run_schedulers(script, setting, tmp, "interval", lambda rank: {"PLAN": json.dumps(INTERVAL_PLAN)})
    return [(done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr) for done in runs]


def test_prefill_decode_interval_min_bs_with_sglangs_own_delayer_aborts_one_rank_and_misleads_the_other(
        tmp_path: Path) -> None:
    """The hazard, on SGLang 0.5.23's own code: on the pass that straddles min_bs, rank 0's delayer all-gather
    (6 int64 a rank) pairs with rank 1's mlp-sync all-gather (11 int64 a rank) on tp_group.cpu_group. gloo aborts
    rank 0 (the shorter rows) every time. What rank 1's mlp-sync gather does depends on whether rank 0's row
    reached it before rank 0 died: either it returns rank 0's delayer row as rank 0's mlp-sync row (its first
    value, prefillable = 1, read as rank 0's num_tokens) and rank 1 fails on its next collective, its peer gone;
    or the mlp-sync gather itself fails, its peer gone. No rank hangs; no rank says which collectives paired."""
    (rc0, out0, err0), (rc1, out1, err1) = _interval_processes(None, tmp_path)
    assert out0[0]["delayer"] == THEIRS[0] == out1[0]["delayer"]
    passes0, passes1 = out0[1:], out1[1:]
    # Passes 1-4: both ranks defer together or prefill together; the two gathers pair as they should.
    for p in range(STRADDLE - 1):
        assert passes0[p]["deferred"] == passes1[p]["deferred"] and passes0[p]["mlp_num_tokens"] == passes1[p]["mlp_num_tokens"]
    assert [p["deferred"] for p in passes1[:STRADDLE]] == [False, True, True, False, True]
    assert passes1[STRADDLE - 1]["remaining"] == 2  # armed by pass 4's prefill, on both ranks alike
    # Pass 5: rank 0 does not defer and dies in the delayer's all-gather, printing nothing more.
    assert rc0 == -6 and len(passes0) == STRADDLE - 1, (rc0, out0, err0)
    assert "Received data size doesn't match expected size" in err0
    assert "in _gather_info" in err0 and "prefill_delayer.py" in err0  # in the delayer's all-gather
    # Rank 1 deferred and ran the mlp-sync gather against rank 0's delayer gather.
    straddle = passes1[STRADDLE - 1]
    assert straddle["pass"] == STRADDLE and straddle["deferred"], out1
    if "error" in straddle:  # rank 0 died before its row reached rank 1: the mlp-sync gather fails
        failed = straddle
    else:  # it "succeeded", with rank 0's delayer row in rank 0's place, and the next collective fails
        assert straddle["mlp_num_tokens"] == [1, 6], out1
        failed = passes1[STRADDLE]
        assert failed["pass"] == STRADDLE + 1, out1
    assert failed["error"]["type"] == "RuntimeError", out1
    assert any(m in failed["error"]["message"] for m in ("Connection reset by peer", "Connection closed by peer")), out1
    # It reports the failure and goes on; gloo may abort it as it tears down (its peer gone), but it never hangs.
    assert out1[-1] == {"done": True} and rc1 in (0, -6), (rc1, out1, err1)
    print(f"SGLang's own delayer, pass {STRADDLE}: rank 0 aborted (rc {rc0}) in the delayer's all-gather; rank 1's "
          + ("mlp-sync gather failed" if failed is straddle else "mlp-sync gather returned [1, 6], pass "
             f"{STRADDLE + 1} failed") + f" (rc {rc1})")


def test_prefill_decode_interval_min_bs_with_ours_raises_desync_on_both_ranks_in_that_pass(tmp_path: Path) -> None:
    """With the plugin, the deferred pass takes part in the delayer's all-gather (the Scheduler._should_defer_prefill
    hook): passes 1-4 decide as SGLang's own class does (the deferred passes are no delayer pass, as in SGLang),
    and on pass 5 both ranks raise the same DesyncError, naming rank 1 as the rank that skipped, before any mlp-sync
    gather; no rank aborts and no rank reads another collective's rows."""
    theirs = _interval_processes(None, tmp_path)
    (rc0, out0, err0), (rc1, out1, err1) = _interval_processes("sglang", tmp_path)
    assert rc0 == rc1 == 0, (err0, err1)
    assert out0[0]["delayer"] == OURS[0] == out1[0]["delayer"]
    for stderr in (err0, err1):
        active = [line for line in stderr.splitlines() if "prefill-delayer active" in line]
        assert len(active) == 1 and "Scheduler._should_defer_prefill hooked" in active[0], stderr
    for (_, their_out, _), our_out in zip(theirs, (out0, out1)):
        assert our_out[1:STRADDLE] == their_out[1:STRADDLE]  # the same decisions, deferrals and mlp-sync rows
    e0, e1 = out0[STRADDLE]["error"], out1[STRADDLE]["error"]
    assert out0[STRADDLE]["pass"] == out1[STRADDLE]["pass"] == STRADDLE
    assert e0 == {**e1, "passes": e0["passes"]} and e0["type"] == "DesyncError" and "mlp_num_tokens" not in out1[STRADDLE]
    assert "rank 1 skipped the pass's negotiation that the other ranks ran (rank 0: at pass 3; rank 1: skipping pass 3)" \
        in e0["message"], e0
    assert e0["passes"] == e1["passes"] == 2  # the delayer's passes 1 and 4; the state is as before pass 5
    assert out0[-1] == out1[-1] == {"done": True}


# ----- a mixed rollout through the scheduler's own start-up: PREFILL_DELAYER_PROFILE set on one rank only ----------


@pytest.mark.parametrize("foreign", [0, 1])
def test_a_mixed_rollout_of_scheduler_processes_fails_the_rank_of_ours_with_one_line(
        tmp_path: Path, foreign: int) -> None:
    """Two scheduler processes as above, ``PREFILL_DELAYER_PROFILE=sglang`` on one only (a rolling restart, a typo
    in one node's environment): load_plugins() replaces SGLang's classes on that rank and leaves SGLang's own on the
    other. On the first pass SGLang's own rank (6 int64 a row against 10) is aborted by gloo; ours raises on that
    pass with one line, a DesyncError naming the foreign rank or a CollectiveError saying what a vanished peer most
    often is; no process hangs (tests/test_desync.py bounds the time to the group's timeout)."""
    script = _SCHEDULER_PROCESS.format(no_scheduler=NO_SCHEDULER, world=WORLD, layout=LAYOUT, schedule=SCHEDULE)
    runs = _run_schedulers(script, None, tmp_path, f"mixed-{foreign}", lambda rank: {
        "PASSES": json.dumps(make_passes(rank)), **({} if rank == foreign else {"PREFILL_DELAYER_PROFILE": "sglang"})})
    theirs, ours = runs[foreign], runs[1 - foreign]
    assert "prefill-delayer active" not in theirs.stderr and SETTINGS_LINE in theirs.stderr, theirs.stderr
    assert theirs.returncode == -6 and "Received data size doesn't match expected size" in theirs.stderr, theirs
    assert "in _gather_info" in theirs.stderr, theirs.stderr  # SGLang's own delayer's all-gather, on its first pass
    assert "prefill-delayer active" in ours.stderr and ours.returncode == 1, ours
    last = ours.stderr.strip().splitlines()[-1].removeprefix(f"[rank{1 - foreign}]: ")  # torch's rank prefix
    if last.startswith("prefill_delayer.runtime.errors.DesyncError: "):
        assert f"rank {foreign} sent rows that are not sglang-delayer rows" in last, last
        assert "SGLang's own PrefillDelayer, where PREFILL_DELAYER_PROFILE is not set" in last, last
    else:
        assert last.startswith("prefill_delayer.runtime.errors.CollectiveError: pass 1: "), last
        assert "no pass has succeeded on this group yet" in last, last
        assert "SGLang's own PrefillDelayer where PREFILL_DELAYER_PROFILE is not set" in last, last
    print(f"mixed rollout, SGLang's own class on rank {foreign}: rank {foreign} rc {theirs.returncode}; "
          f"rank {1 - foreign} (ours) {last.split(':')[0].rsplit('.', 1)[-1]}")
