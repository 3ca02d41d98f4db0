"""The plugin inside SGLang 0.5.23's own scheduler module (``sglang.srt.managers.scheduler``).

The scheduler imports packages the extras do not bring (``.ci/sglang-scheduler.txt``)
and torchvision, whose PyPI build needs CUDA torch, so these run in the scheduler
environment (``.ci/sglang-scheduler`` builds it and runs them with
``PREFILL_DELAYER_REQUIRE_SGLANG_SCHEDULER=1``, which turns the skip into a
failure). Elsewhere they skip and say so, after one import attempt a session.

Each case is two fresh interpreters, the ranks of a 2-way DP-attention gloo
world, each doing what a scheduler process does, in its order: import the scheduler module, ``load_plugins()``, publish SGLang's
runtime context, then SGLang's own ``Scheduler.init_schedule_policy`` builds
the delayer (with the scheduler's keywords) and the scheduler module's
``PrefillDelayerSinglePassExecutor`` runs passes over it. Nothing of SGLang is
stubbed: the ``Scheduler`` is bare (``__new__``) with the attributes its
``__init__`` sets before that call, read off the same context. The ``aligned``
cases go further: each rank is the whole ``Scheduler`` for one DP rank on CPU
(``integrations.sglang.cpu_scheduler.build_scheduler``), and real requests pass
through its own ``get_next_batch_to_run``, whose call sites read the delayer's
inputs off the scheduler object.
"""

from __future__ import annotations

import functools
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


# TEARDOWN: every script destroys its process groups before it exits, on every path. With torch 2.14.1, a
# process that exits with a live gloo group aborts in its own teardown (SIGABRT, no Python frame) about one exit
# in four (25 two-rank worlds on loopback, each exiting after three all-gathers: 7 aborted; with
# destroy_process_group() first, 0 of 25, and 0 of 20 where the peer had died): an exit code the test would
# misread as the plugin's.

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
    try:
        s.init_schedule_policy()
    except BaseException:  # a scheduler stopped here (the plugin's SystemExit): its group goes first, see TEARDOWN
        dist.destroy_process_group()
        raise
"""

_SCHEDULER_PROCESS = _BARE_SCHEDULER + """
    returns = []
    try:
        for usage, prefillable, rb, pb, mrr, wq, bs in json.loads(os.environ["PASSES"]):
            ex = scheduler.PrefillDelayerSinglePassExecutor(s.prefill_delayer, token_usage=usage)
            allow = ex.negotiate_should_allow_prefill(prefillable, rb, pb, mrr, wq)
            returns.append([allow, ex.finalize(actual_prefill_bs=bs if allow and prefillable else 0)])
    finally:
        dist.destroy_process_group()  # before exit: see TEARDOWN above

    def name(c): return c.__module__ + "." + c.__qualname__
    print(json.dumps({{
        "names": [name(scheduler.PrefillDelayer), name(scheduler.PrefillDelayerSinglePassExecutor)],
        "built": name(type(s.prefill_delayer)),
        "profile": getattr(s.prefill_delayer, "profile", None),
        "returns": returns,
    }}))
"""


_IMPORT_PROBE = """
    try:
        import sglang.srt.managers.scheduler
    except Exception as err:
        print("{no_scheduler}" + type(err).__name__ + ": " + str(err).splitlines()[0])
"""


@functools.cache
def _scheduler_import_problem() -> Optional[str]:
    """Why the scheduler module does not import here (None where it does), asked once a session: each case would
    otherwise start two interpreters only to find that out, about 50 s of the suite's time where it cannot."""
    done = run_python(_IMPORT_PROBE.format(no_scheduler=NO_SCHEDULER), {}, timeout_s=300.0)
    out = done.stdout.strip()
    return out[len(NO_SCHEDULER):] if out.startswith(NO_SCHEDULER) else None


def _skip_without_scheduler(why: str) -> None:
    message = (f"sglang.srt.managers.scheduler does not import in this environment ({why}); it needs the packages "
               "of .ci/sglang-scheduler.txt and torchvision, whose PyPI build needs CUDA torch: `bash "
               ".ci/sglang-scheduler` builds an environment where it imports, and runs these tests there")
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{REQUIRE}=1 but {message}")
    pytest.skip(message)


def _run_schedulers(script: str, setting: Optional[str], tmp: Path, name: str,
                    rank_env: Any) -> list[subprocess.CompletedProcess]:
    """``script`` as two scheduler processes under ``PREFILL_DELAYER_PROFILE=setting`` (unset for None), each with
    ``rank_env(rank)`` in its environment; skips (fails under ``REQUIRE``) where the scheduler does not import."""
    why = _scheduler_import_problem()
    if why is not None:
        _skip_without_scheduler(why)
    env = {} if setting is None else {"PREFILL_DELAYER_PROFILE": setting}
    init_file = tmp / f"init-{name}-{setting}"
    with ThreadPoolExecutor(WORLD) as pool:
        runs = list(pool.map(lambda rank: run_python(script, {
            **env, "RANK": str(rank), "INIT_FILE": str(init_file), **rank_env(rank)}, timeout_s=300.0), range(WORLD)))
    for done in runs:
        if done.stdout.startswith(NO_SCHEDULER):
            _skip_without_scheduler(done.stdout.strip()[len(NO_SCHEDULER):])
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


@pytest.mark.parametrize("setting, profile", [("sglang", "sglang-0.5.22"), ("hardened", "hardened"), ("aligned", "aligned")])
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
    try:
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
    finally:
        dist.destroy_process_group()  # before exit: see TEARDOWN above
"""


def said(rc: int, out: Any, err: str) -> str:
    """A rank's exit code, what it printed and the end of its stderr, as an assertion's message: a string, which
    pytest prints whole (a tuple it shortens to a few hundred characters, the stderr's end cut off)."""
    return f"rc {rc}; stdout {out}; the end of its stderr:\n{err[-4000:]}"


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
    assert rc0 == -6 and len(passes0) == STRADDLE - 1, said(rc0, out0, err0)
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
    assert out1[-1] == {"done": True} and rc1 in (0, -6), said(rc1, out1, err1)
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
    assert rc0 == rc1 == 0, said(rc0, out0, err0) + "\n\n" + said(rc1, out1, err1)
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


# ----- a profile chosen, and no delayer enabled: SGLang's init_schedule_policy decides, the plugin reads it ----------

_BUILT = _BARE_SCHEDULER + """
    dist.destroy_process_group()  # before exit: see TEARDOWN above
    print(json.dumps({{"built": s.prefill_delayer is not None}}))
"""


def _start_up(setting: str, schedule: dict[str, Any], tmp: Path, name: str) -> list[subprocess.CompletedProcess]:
    """Two scheduler processes' start-up, up to the delayer SGLang's own ``init_schedule_policy`` builds (or not)."""
    script = _BUILT.format(no_scheduler=NO_SCHEDULER, world=WORLD, layout=LAYOUT, schedule=schedule)
    return _run_schedulers(script, setting, tmp, name, lambda rank: {})


def test_a_profile_without_enable_prefill_delayer_stops_each_scheduler_with_one_line(tmp_path: Path) -> None:
    """PREFILL_DELAYER_PROFILE set, --enable-prefill-delayer not: SGLang's init_schedule_policy builds no delayer, so
    the profile decides nothing. Each scheduler went on without a word (built false, exit 0, the plugin's line
    pending); now each stops there with one line naming the variable and the flag (the plugin's AFTER hook on
    init_schedule_policy), no traceback."""
    from prefill_delayer.integrations.sglang.enablement import missing_flag

    for done in _start_up("aligned", {**SCHEDULE, "enable_prefill_delayer": False}, tmp_path, "no-flag"):
        assert done.returncode == 1 and done.stdout == "", said(done.returncode, done.stdout, done.stderr)
        assert done.stderr.strip().splitlines()[-1] == missing_flag("aligned"), done.stderr
        assert missing_flag("aligned").startswith(
            "prefill-delayer: PREFILL_DELAYER_PROFILE=aligned is set but SGLang runs without --enable-prefill-delayer: ")
        assert "Traceback" not in done.stderr and "Failed to apply hooks" not in done.stderr, done.stderr


def test_on_a_decode_engine_sglang_says_why_it_builds_no_delayer_and_the_scheduler_goes_on(tmp_path: Path) -> None:
    """With the flag on a PD-disaggregation decode engine SGLang itself builds no delayer and logs why: its decision,
    in its words; the plugin does not stop that scheduler."""
    from prefill_delayer.integrations.sglang.enablement import FLAG

    for done in _start_up("aligned", {**SCHEDULE, "disaggregation_mode": "decode"}, tmp_path, "decode"):
        assert done.returncode == 0 and json.loads(done.stdout) == {"built": False}, \
            said(done.returncode, done.stdout, done.stderr)
        assert f"Ignoring {FLAG} on decode engine" in done.stderr and "prefill-delayer:" not in done.stderr, done.stderr


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
    assert theirs.returncode == -6 and "Received data size doesn't match expected size" in theirs.stderr, \
        said(theirs.returncode, theirs.stdout, theirs.stderr)
    assert "in _gather_info" in theirs.stderr, theirs.stderr  # SGLang's own delayer's all-gather, on its first pass
    assert "prefill-delayer active" in ours.stderr and ours.returncode == 1, said(ours.returncode, ours.stdout, ours.stderr)
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


# ----- aligned through the scheduler's own get_next_batch_to_run: what it reads of the scheduler ----------------
#
# Each rank is SGLang 0.5.23's own Scheduler for one DP rank on CPU (integrations.sglang.cpu_scheduler.build_scheduler:
# its init_* methods in __init__'s order, real Req objects, SchedulePolicy, PrefillAdder, KV pools, tree cache, a fake
# forward), its delayer built by its own init_schedule_policy after load_plugins() (ours, PREFILL_DELAYER_PROFILE), on
# a gloo tp_group. The passes run get_next_batch_to_run and the launch in event_loop_overlap's order, so every input
# the policy gets is what the scheduler's own call sites read off the scheduler object: add_one_req passes
# self.running_batch.batch_size() and the waiting queue's length; a rank with nothing to admit returns from
# _get_new_batch_prefill_raw before any call site, and finalize negotiates with local_prefillable=False and no other
# argument (as SGLang's own executor does), so its row's running_batch is 0 even while it decodes.

CPU_RANK = {"max_running_requests": 8, "max_total_tokens": 8192, "chunked_prefill_size": 256, "max_prefill_tokens": 1024,
            "page_size": 1, "enable_mixed_chunk": False, "prefix_cache": False, "context_len": 2048}
CAP = 12  # max_delay_passes above aligned's NO_DECODE_HOLD, so the hold and the cap end a wait differently
# No queue trigger, and SGLang's token-usage watermark at 0: no pass is below it, so a mixed pass delays. Set, SGLang's
# option replaces aligned's low_load_watermark (its default 0.28 would allow every pass here, the KV pools a few %
# used): 0 is how an operator turns aligned's low-load allow off through the plugin; hardened reads it as off.
CPU_SCHEDULE = {"enable_prefill_delayer": True, "prefill_delayer_max_delay_passes": CAP,
                "prefill_delayer_max_delay_ms": 60000.0, "prefill_delayer_token_usage_low_watermark": 0.0}
PROMPT, LONG, SHORT = 16, 400, 3  # tokens; LONG outlasts the run, SHORT finishes within a few passes
# A prompt three chunks long (chunked_prefill_size 256, which the plugin gives aligned as long_chunk_tokens): its
# second chunk's pass has 1000 - 256 = 744 tokens left (a long chunk), its third 488, its fourth 232 (not one).
CHUNKED_PROMPT = 1000
# The phases (first pass, what arrives on each rank): a request on rank 0 while no rank decodes; one on each rank
# (both prefill, rank 0's finishes and rank 1's decodes on); one on rank 0 while only rank 1 decodes; one on rank 0
# while rank 0 decodes too (its previous request is in its running batch).
# Then a prompt of CHUNKED_PROMPT tokens on rank 1, chunked over four passes (aligned's chunk_tokens_left), beside a
# short one on rank 0 (an all pass admits both; the chunk goes on whatever the later passes decide).
# Last, three requests on each rank, one on each the pass after: both passes all passes, the second negotiating
# with the batch of three the first admitted (aligned's own max_prefill_bs: int(3 x 0.998) = 2).
NO_DECODE, BOTH, DECODE_ELSEWHERE, DECODE_HERE, CHUNKED, BATCHES = 1, 15, 25, 41, 56, 62
CPU_PLAN_PASSES = 64
ARRIVALS = {NO_DECODE: ([SHORT], []), BOTH: ([SHORT], [LONG]), DECODE_ELSEWHERE: ([LONG], []), DECODE_HERE: ([LONG], []),
            CHUNKED: ([SHORT], [[CHUNKED_PROMPT, SHORT]]), BATCHES: ([SHORT] * 3, [SHORT] * 3),
            BATCHES + 1: ([SHORT], [SHORT])}

_CPU_SCHEDULER_PROCESS = """
    import faulthandler, json, logging, os, sys
    from datetime import timedelta
    faulthandler.enable()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    try:
        import sglang.srt.managers.scheduler as scheduler
    except Exception as err:
        print("{no_scheduler}" + type(err).__name__ + ": " + str(err).splitlines()[0])
        raise SystemExit(0)
    import torch.distributed as dist
    import sglang.srt.runtime_context as rc
    from sglang.srt.distributed.parallel_state import GroupCoordinator
    from sglang.srt.plugins import load_plugins
    from prefill_delayer.integrations.sglang import cpu_scheduler as cs

    load_plugins()  # what run_scheduler_process does first, the scheduler module already imported
    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", init_method="file://" + os.environ["INIT_FILE"], rank=rank, world_size={world},
                            timeout=timedelta(seconds=120))
    settings = cs.RankSettings(dp_size={world}, **{rank_settings!r})
    server_args = cs.publish_context(settings)
    # The delayer on, as --enable-prefill-delayer and its flags would set it, and the DP-wide tp_group a real gloo
    # GroupCoordinator (cpu_scheduler's is the simulator's, without a process group): the delayer gathers over it.
    rc.get_context().override("test", **{schedule!r})
    rc.get_parallel().override_permanently(tp_group=GroupCoordinator(
        group_ranks=[list(range({world}))], local_rank=rank, torch_distributed_backend="gloo", use_pynccl=False,
        use_mscclpp=False, use_custom_allreduce=False, use_torch_symm_mem_all_reduce=False, use_hpu_communicator=False,
        use_xpu_communicator=False, group_name="tp", gloo_timeout=timedelta(seconds=10)))
    s = cs.build_scheduler(settings, server_args)  # its own init_schedule_policy builds the delayer
    def name(c): return c.__module__ + "." + c.__qualname__
    print(json.dumps({{"delayer": name(type(s.prefill_delayer)), "profile": getattr(s.prefill_delayer, "profile", None)}}),
          flush=True)
    loop = cs.OverlapRank(s, s.prefill_delayer)
    seen = {{}}
    own = s.get_new_batch_prefill

    def observed(running_batch):  # what the call sites will read of the scheduler, as get_new_batch_prefill starts
        c = s.chunked_req  # its prompt's tokens not yet in the KV cache: the whole prompt, less the KV it committed
        seen.update(running=running_batch.batch_size(), waiting=len(s.waiting_queue), chunked=c is not None,
                    chunk_left=0 if c is None else len(c.origin_input_ids) - c.kv.kv_committed_len,
                    scheduler_max_prefill_bs=int(s.max_prefill_bs))
        plan = own(running_batch)
        batch = plan.batch_to_run  # the batch its executor's finalize(actual_prefill_bs=) is handed
        seen["prefill_bs"] = 0 if batch is None else batch.batch_size()
        return plan

    s.get_new_batch_prefill = observed
    try:
        for p, per_rank in enumerate(json.loads(os.environ["PLAN"]), 1):
            outputs = per_rank[rank]
            if outputs:  # each an output length (of a {prompt}-token prompt), or [prompt tokens, output length]
                loop.ingest([cs.generate_request(f"r{{rank}}-{{p}}-{{i}}", *(n if isinstance(n, list) else ({prompt}, n)))
                             for i, n in enumerate(outputs)])
            seen.clear()
            batch = loop.schedule()
            loop.launch(batch)
            print(json.dumps({{"pass": p, **seen, "extend": batch is not None and batch.forward_mode.is_extend()}}), flush=True)
        s.prefill_delayer.core.close()  # the decision log flushed
    finally:
        dist.destroy_process_group()  # before exit: see TEARDOWN above
"""


def cpu_plan(arrivals: dict[int, tuple[list[Any], list[Any]]] = ARRIVALS,
             passes: int = CPU_PLAN_PASSES) -> list[list[list[Any]]]:
    """Per pass and rank, the requests that arrive: an output length (a PROMPT-token prompt) or [prompt, output]."""
    plan: list[list[list[Any]]] = [[[] for _ in range(WORLD)] for _ in range(passes)]
    for first, per_rank in arrivals.items():
        plan[first - 1] = [list(x) for x in per_rank]
    return plan


def _cpu_scheduler_processes(setting: str, tmp: Path, rank_settings: dict[str, Any] = CPU_RANK,
                             schedule: dict[str, Any] = CPU_SCHEDULE, plan: Optional[list[list[list[Any]]]] = None,
                             tag: str = "", env: Optional[dict[str, str]] = None) -> tuple[list[list[dict[str, Any]]], Path]:
    """The plan on two CPU schedulers under ``PREFILL_DELAYER_PROFILE=setting``, logging: per rank the JSON lines the
    process printed (its delayer, then a record per pass), and the decision log folder."""
    from prefill_delayer.runtime.decision_log import DECISION_LOG_ENV

    script = _CPU_SCHEDULER_PROCESS.format(no_scheduler=NO_SCHEDULER, world=WORLD, rank_settings=rank_settings,
                                           schedule=schedule, prompt=PROMPT)
    folder = tmp / f"log-{setting}{tag}"
    runs = _run_schedulers(script, setting, tmp, "cpu" + tag, lambda rank: {
        "PLAN": json.dumps(cpu_plan() if plan is None else plan), DECISION_LOG_ENV: str(folder), **(env or {})})
    failed = [(rank, done) for rank, done in enumerate(runs) if done.returncode != 0]
    # every failed rank's end: the first to fail is often not rank 0, whose peer's going only shows in its gather
    assert not failed, "\n".join(f"rank {rank}, rc {done.returncode}: ...{done.stderr[-2500:]}" for rank, done in failed)
    return [[json.loads(line) for line in done.stdout.splitlines()] for done in runs], folder


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[list[dict[str, Any]]], Path]]:
    """aligned and hardened through the same plan (hardened: what aligned must equal wherever the hold is not cut)."""
    tmp = tmp_path_factory.mktemp("cpu")
    return {profile: _cpu_scheduler_processes(profile, tmp) for profile in ("aligned", "hardened")}


# The busy rule inside SGLang's scheduler: SGLang's watermark unset, so aligned's own low-load watermark (0.28) and
# its busy rule (busy_watermark 0.5) are in force. Rank 1's KV pool (3,072 tokens) is over half full once its
# 1,700-token prompt is in (chunked 256 a pass); then a short request arrives on rank 0, whose usage is near 0.
BUSY_RANK = {**CPU_RANK, "max_total_tokens": 3072}
BUSY_SCHEDULE = {**CPU_SCHEDULE, "prefill_delayer_token_usage_low_watermark": None}
BUSY_LOW, BUSY_PASSES = 15, 28
BUSY_ARRIVALS = {1: ([], [[1700, 300]]), BUSY_LOW: ([SHORT], [])}


@pytest.fixture(scope="module")
def busy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[list[dict[str, Any]]], Path]:
    return _cpu_scheduler_processes("aligned", tmp_path_factory.mktemp("busy"), BUSY_RANK, BUSY_SCHEDULE,
                                    cpu_plan(BUSY_ARRIVALS, BUSY_PASSES), tag="-busy")


# The quorum inside SGLang's scheduler, set through the plugin (PREFILL_DELAYER_PARAMS=quorum_percent=50: on two ranks,
# one with work and one with none is a quorum). Nine requests on rank 1 fill its 8 running slots and leave one
# queued; then a short one on rank 0, while rank 1 has work it cannot admit: it reaches no call site, and only the
# queue the plugin reads says it has work.
QUORUM_FULL, QUORUM_PASSES = 5, 18
QUORUM_ARRIVALS = {1: ([], [LONG] * (CPU_RANK["max_running_requests"] + 1)), QUORUM_FULL: ([SHORT], [])}


@pytest.fixture(scope="module")
def quorum_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[list[dict[str, Any]]], Path]:
    return _cpu_scheduler_processes("aligned", tmp_path_factory.mktemp("quorum"), plan=cpu_plan(QUORUM_ARRIVALS,
                                    QUORUM_PASSES), tag="-quorum", env={"PREFILL_DELAYER_PARAMS": "quorum_percent=50"})


# The chunk hold inside SGLang's scheduler, set through the plugin (PREFILL_DELAYER_PARAMS=chunk_hold_tokens=300; the
# chunk is 256). Nine short requests on rank 0 fill its 8 running slots and leave one queued, beside rank 1's
# three-chunk prompt; once the eight finish, the ninth is admitted (HOLD_FREED).
HOLD_FREED, HOLD_PASSES = 5, 16
HOLD_ARRIVALS = {1: ([SHORT] * (CPU_RANK["max_running_requests"] + 1), [[CHUNKED_PROMPT, SHORT]])}


@pytest.fixture(scope="module")
def hold_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[list[dict[str, Any]]], Path]]:
    """The plan with and without chunk_hold_tokens=300."""
    tmp = tmp_path_factory.mktemp("hold")
    return {tag: _cpu_scheduler_processes("aligned", tmp, plan=cpu_plan(HOLD_ARRIVALS, HOLD_PASSES), tag=f"-{tag}",
                                          env=env)
            for tag, env in (("held", {"PREFILL_DELAYER_PARAMS": "chunk_hold_tokens=300"}), ("plain", {}))}


def test_in_sglangs_scheduler_the_chunk_hold_parks_a_refused_chunk_until_the_group_prefills(
        hold_runs: dict[str, tuple[list[list[dict[str, Any]]], Path]], tmp_path: Path) -> None:
    """chunk_hold_tokens, set through the plugin, in SGLang's own scheduler: while rank 0's running batch is full with
    a request queued (it has work it cannot admit), rank 1's chunk in flight is refused and parked (744 tokens left,
    no extend batch); once rank 0's slots free, both prefill in one pass, the chunk beside rank 0's queued request. Then
    rank 0 has nothing queued, and the chunk, refused again with 488 left, goes on: the hold would wait for an arrival.
    The request finishes. Without the hold the chunk runs alone while refused, and rank 0's queued request waits for a
    pass of its own. check-log replays the held run clean, with the parameter in its configuration."""
    from decision_log_harness import check_log

    (held, held_folder), (plain, plain_folder) = hold_runs["held"], hold_runs["plain"]
    logged, plain_logged = _logged(held_folder), _logged(plain_folder)
    chunk = [(held[1][p]["chunk_left"], held[1][p]["extend"]) for p in range(2, HOLD_FREED + 3)]
    assert chunk == [(744, False), (744, False), (744, False), (744, True), (488, True), (232, True)], chunk
    assert _reasons(logged[1], 2, HOLD_FREED + 2) == ["delay"] * 3 + ["wait_success", "delay", "delay"]
    for p in range(2, HOLD_FREED):  # rank 0 full, one queued: it has work, so the refused chunk waits for it
        assert held[0][p]["running"] == CPU_RANK["max_running_requests"] and logged[0][p - 1]["waiting_at_start"] == 1
    assert held[0][HOLD_FREED]["extend"] and held[1][HOLD_FREED]["extend"]  # the chunk beside rank 0's ninth request
    assert logged[0][HOLD_FREED]["waiting_at_start"] == 0  # the next pass: rank 0 has nothing queued, the chunk went on
    assert held[1][HOLD_PASSES]["running"] == 0 and not held[1][HOLD_PASSES]["chunked"]
    assert [(plain[1][p]["chunk_left"], plain[1][p]["extend"]) for p in range(2, 5)] == [(744, True), (488, True),
                                                                                          (232, True)]
    assert _reasons(plain_logged[1], 2, 4) == ["delay"] * 3  # refused, and the chunk went on
    waited = next(p for p in range(HOLD_FREED, HOLD_PASSES + 1) if plain[0][p]["extend"])
    assert waited > HOLD_FREED, "without the hold rank 0's queued request prefills in a pass of its own, later"
    header = json.loads((held_folder / "rank1.jsonl").read_text().splitlines()[0])
    assert header["config"]["chunk_hold_tokens"] == 300, header["config"]
    rc, out, err = check_log(str(held_folder), "--json", str(tmp_path / "held.json"))
    assert rc == 0, out + err


def _logged(folder: Path) -> list[list[dict[str, Any]]]:
    from decision_log_harness import pass_dicts

    return [pass_dicts(folder / f"rank{rank}.jsonl") for rank in range(WORLD)]


def test_in_sglangs_scheduler_a_low_rank_beside_a_busy_one_forces_nothing(
        busy_run: tuple[list[list[dict[str, Any]]], Path]) -> None:
    """SGLang's own scheduler feeds aligned's busy bit from the token usage its executor is built with, on every rank,
    one that reached no call site included: once rank 1 holds over half its KV pool, rank 0's short request (its usage
    near 0, below the low-load watermark) forces nothing, and the mixed wait runs to the no-decode hold instead of
    allowing with token_watermark, as it would without the rule."""
    from prefill_delayer.spec.policies.aligned import busy
    from prefill_delayer.spec.policies.aligned.guards import NO_DECODE_HOLD
    from prefill_delayer.spec.registry import policy_of

    records, folder = busy_run
    logged = _logged(folder)
    fields = policy_of("aligned").row_names
    for rank in range(WORLD):
        assert [x["pass"] for x in logged[rank]] == list(range(1, BUSY_PASSES + 1))
        for x in logged[rank]:
            row = dict(zip(fields, x["row"]))
            assert row["busy"] == int(x["token_usage"] >= busy.BUSY_WATERMARK), (rank, x)
    rows = [[dict(zip(fields, x["row"])) for x in logged[rank]] for rank in range(WORLD)]
    # while rank 1 prefilled below the watermark its own usage forced its passes; later it is busy, and decodes on
    assert "token_watermark" in _reasons(logged[1], 1, BUSY_LOW - 1)
    assert rows[1][BUSY_LOW - 1]["busy"] == 1 and not rows[1][BUSY_LOW - 1]["prefillable"]
    assert rows[0][BUSY_LOW - 1]["force"] == 1, rows[0][BUSY_LOW - 1]
    assert _reasons(logged[0], BUSY_LOW, BUSY_LOW + NO_DECODE_HOLD) == ["delay"] * NO_DECODE_HOLD + ["no_decode"]
    assert records[0][BUSY_LOW + NO_DECODE_HOLD]["extend"]  # the pass that allows prefills rank 0's request


def _verdict(x: dict[str, Any]) -> tuple:
    """A logged decision but its wait in seconds (the wall clock's)."""
    return tuple(v for k, v in x["decision"].items() if k != "wait_seconds")


def _reasons(passes: list[dict[str, Any]], first: int, last: int) -> list[str]:
    return [x["decision"]["output_reason"] for x in passes[first - 1:last]]


def test_aligned_reads_the_schedulers_running_batch_and_cuts_the_hold_only_where_it_is_empty(
        cpu_runs: dict[str, tuple[list[list[dict[str, Any]]], Path]]) -> None:
    """SGLang's own scheduler feeds aligned: every row field is what the scheduler object held at its call site, and
    the verdict follows the one input aligned reads differently from hardened (the gathered running batch): with no
    running batch in any row, the mixed wait ends after NO_DECODE_HOLD passes with no_decode; with one, it runs to
    the pass cap with wait_timeout, as hardened's. A rank that cannot prefill reaches no call site, so its decode
    is not in its row: aligned cuts the hold while only such a rank decodes."""
    from prefill_delayer.spec.policies.aligned.guards import NO_DECODE_HOLD
    from prefill_delayer.spec.registry import policy_of

    aligned, hardened = policy_of("aligned"), policy_of("hardened")
    # The inputs beyond SGLang's call-site arguments, from the spec: every one is read from the scheduler object by
    # the plugin and checked here against what the scheduler held, pass by pass (chunk_tokens_left and
    # waiting_at_start, below).
    assert [f.name for f in aligned.host.reads] == ["chunk_tokens_left", "waiting_at_start"]
    extra = [f for f in aligned.row_names if f not in hardened.row_names]
    assert extra == ["long_chunk", "busy", "has_work"], extra
    assert NO_DECODE_HOLD < CAP - 1
    records, folder = cpu_runs["aligned"]
    for out in records:
        assert out[0] == {"delayer": OURS[0], "profile": "aligned"}, out[0]
    logged = _logged(folder)
    fields = aligned.row_names
    for rank in range(WORLD):
        seen, passes = records[rank][1:], logged[rank]
        assert [x["pass"] for x in seen] == [x["pass"] for x in passes] == list(range(1, CPU_PLAN_PASSES + 1))
        for s, x in zip(seen, passes):
            row = dict(zip(fields, x["row"]))
            # A rank reaches a call site when it has something to admit (no deferral here: the interval is off).
            called = s["waiting"] > 0 or s["chunked"]
            assert bool(row["prefillable"]) == called, (rank, s, row)
            assert row["running_batch"] == (s["running"] if called else 0), (rank, s, row)
            assert row["waiting_queue_len"] == (s["waiting"] if called else 0), (rank, s, row)
            # The chunk in flight, read by the plugin's hook on PrefillAdder.add_chunked_req: the decision log's
            # reading is the scheduler's chunk, and the row's bit says whether it has a whole chunk (256) left.
            assert x["chunk_tokens_left"] == s["chunk_left"], (rank, s, x)
            assert row["long_chunk"] == int(s["chunked"] and s["chunk_left"] >= CPU_RANK["chunked_prefill_size"])
            # The busy bit is read only beside aligned's own low-load watermark: SGLang's option is set here.
            assert row["busy"] == 0, (rank, s, row)
            # The waiting queue as the admission begins, read by the plugin's hook on
            # Scheduler._get_new_batch_prefill_raw on every rank, one that reaches no call site included; the row's
            # work bit (what the opt-in quorum counts) is set on a rank that can prefill or has requests queued.
            assert x["waiting_at_start"] == s["waiting"], (rank, s, x)
            assert row["has_work"] == int(called or s["waiting"] > 0), (rank, s, row)
    # The chunked prompt on rank 1: its chunk passes read 744, 488 and 232 tokens left; the first two are long chunks.
    chunk_passes = [(x["chunk_tokens_left"], dict(zip(fields, x["row"]))["long_chunk"]) for x in logged[1][CHUNKED:]]
    assert chunk_passes[:4] == [(744, 1), (488, 1), (232, 0), (0, 0)], (chunk_passes, records[1][CHUNKED - 1:CHUNKED + 6])
    r0, r1 = records[0][1:], records[1][1:]
    hold = ["delay"] * NO_DECODE_HOLD + ["no_decode"]
    cap = ["delay"] * (CAP - 1) + ["wait_timeout"]
    # No running batch anywhere: the hold is cut.
    assert all(r["running"] == 0 for r in (r0[NO_DECODE - 1], r1[NO_DECODE - 1]))
    assert _reasons(logged[0], NO_DECODE, NO_DECODE + NO_DECODE_HOLD) == hold
    assert r0[NO_DECODE + NO_DECODE_HOLD - 1]["extend"]  # the pass that allows prefills
    # Both prefill together; then rank 1 decodes, rank 0's request is done: only the rank that cannot prefill decodes.
    assert _reasons(logged[0], BOTH, BOTH) == ["no_wait"]
    assert r0[DECODE_ELSEWHERE - 1]["running"] == 0 and r1[DECODE_ELSEWHERE - 1]["running"] == 1
    assert _reasons(logged[0], DECODE_ELSEWHERE, DECODE_ELSEWHERE + NO_DECODE_HOLD) == hold
    # Rank 0's own running batch is in its row: the wait runs to the cap.
    assert r0[DECODE_HERE - 1]["running"] == 1
    assert [x["view"]["running_batch"] for x in logged[0][DECODE_HERE - 1:DECODE_HERE + CAP - 1]] == [1] * CAP
    assert _reasons(logged[0], DECODE_HERE, DECODE_HERE + CAP - 1) == cap
    # hardened on the same schedulers and plan: every one of those waits runs to the cap; from DECODE_HERE on, where
    # both runs' schedulers hold the same requests again, aligned decides as hardened on every pass and rank.
    their_records, their_folder = cpu_runs["hardened"]
    theirs = _logged(their_folder)
    assert their_records[0][0] == {"delayer": OURS[0], "profile": "hardened"}
    assert _reasons(theirs[0], NO_DECODE, NO_DECODE + CAP - 1) == cap
    assert _reasons(theirs[0], DECODE_ELSEWHERE, DECODE_ELSEWHERE + CAP - 1) == cap
    assert _reasons(theirs[0], DECODE_HERE, DECODE_HERE + CAP - 1) == cap
    for rank in range(WORLD):
        assert [_verdict(x) for x in theirs[rank][DECODE_HERE - 1:]] == [_verdict(x) for x in logged[rank][DECODE_HERE - 1:]]


def test_aligned_negotiates_with_its_own_decayed_max_prefill_bs_not_the_schedulers_window(
        cpu_runs: dict[str, tuple[list[list[dict[str, Any]]], Path]]) -> None:
    """aligned's slot trigger reads the max_prefill_bs its delayer keeps (HostBinding.own_max_prefill_bs): SGLang
    0.5.17's mark, decayed x0.998 as each get_new_batch_prefill starts and raised to the batch the scheduler hands the
    executor's finalize. Replayed here from what the scheduler did, pass by pass, it is every logged row's value; the
    scheduler's own (0.5.23's window) differs on the passes shown, and hardened's rows read that one."""
    from prefill_delayer.spec.registry import policy_of

    assert policy_of("aligned").host.own_max_prefill_bs == "decay"
    assert policy_of("hardened").host.own_max_prefill_bs is None
    fields = policy_of("aligned").row_names
    differ = nonzero = 0
    for profile in ("aligned", "hardened"):
        records, folder = cpu_runs[profile]
        logged = _logged(folder)
        for rank in range(WORLD):
            mark, largest = 0.0, 0
            for s, x in zip(records[rank][1:], logged[rank]):
                mark *= 0.998  # SGLang 0.5.17's scheduler.get_new_batch_prefill
                row = dict(zip(fields, x["row"]))
                if row["prefillable"]:  # a rank that reached a call site: its row holds the value it negotiated with
                    if profile == "aligned":
                        assert row["max_prefill_bs"] == int(mark), (rank, s, row, mark)
                        differ += int(mark) != s["scheduler_max_prefill_bs"]
                        nonzero += int(mark) > 0
                    else:
                        assert row["max_prefill_bs"] == s["scheduler_max_prefill_bs"], (rank, s, row)
                mark, largest = max(mark, s["prefill_bs"]), max(largest, s["prefill_bs"])
            assert largest >= 1, (profile, rank)  # each rank admitted a batch: the replay saw it
    # The scheduler's window and aligned's mark are not the same numbers here; and the mark is not 0 throughout (a
    # batch of 1 decays to int(0.998) = 0 at once, one of 2 holds 1 for about 350 passes).
    assert differ >= 3 and nonzero >= 2, (differ, nonzero)


def test_check_log_checks_aligned_logs_of_the_scheduler_and_finds_a_flipped_decision(
        cpu_runs: dict[str, tuple[list[list[dict[str, Any]]], Path]], tmp_path: Path) -> None:
    """The decision logs the schedulers wrote name the policy and check clean, the no-decode hold included; a copy with
    the hold's no_decode pass flipped to a delay is a conformance finding at that pass (check-log exits 1)."""
    import shutil

    from prefill_delayer.spec.policies.aligned.guards import NO_DECODE_HOLD

    from decision_log_harness import check_log, edit_pass

    _, folder = cpu_runs["aligned"]
    rc, out, err = check_log(str(folder), "--json", str(tmp_path / "clean.json"))
    assert rc == 0, out + err
    report = json.loads((tmp_path / "clean.json").read_text())
    assert report["checked"] == {"conformance": WORLD * CPU_PLAN_PASSES, "agreement": CPU_PLAN_PASSES}
    checks = {c["property"]: c["status"] for c in report["checks"]}
    assert checks["no-decode-hold"] == "ok" and set(checks.values()) == {"ok"}, report["checks"]
    assert {"no_decode", "wait_timeout", "delay", "no_wait"} <= set(report["decisions_by_reason"])
    for rank in range(WORLD):
        header = json.loads((folder / f"rank{rank}.jsonl").read_text().splitlines()[0])
        assert header["profile"] == header["config"]["profile"] == "aligned"
        # SGLang's watermark reached the policy through the scheduler's constructor call and replaced low_load_watermark
        assert header["config"]["token_usage_low_watermark"] == 0.0, header["config"]
    bad = tmp_path / "flipped"
    shutil.copytree(folder, bad)
    flipped = NO_DECODE + NO_DECODE_HOLD  # the pass the hold's give-up allows, logged as one more delay

    def to_delay(values: list, columns: list) -> None:
        assert values[columns.index("decision.output_reason")] == reasons.index("no_decode")
        values[columns.index("decision.output_allow")] = 0
        values[columns.index("decision.output_reason")] = reasons.index("delay")

    reasons = json.loads((bad / "rank0.jsonl").read_text().splitlines()[0])["enums"]["reason"]
    edit_pass(bad / "rank0.jsonl", flipped, to_delay)
    rc, out, err = check_log(str(bad), "--json", str(tmp_path / "bad.json"))
    assert rc == 1, out + err
    findings = json.loads((tmp_path / "bad.json").read_text())["findings"]
    assert ("conformance", "decision", flipped, [0]) in [(f["category"], f["property"], f["pass"], f["ranks"])
                                                         for f in findings], findings


def test_in_sglangs_scheduler_the_quorum_allows_beside_an_idle_rank_and_holds_for_a_full_one(
        quorum_run: tuple[list[list[dict[str, Any]]], Path]) -> None:
    """quorum_percent, set through the plugin (PREFILL_DELAYER_PARAMS), in SGLang's own scheduler: rank 1's first
    prefill, beside a rank with nothing queued, allows at once with quorum; once rank 1's running batch is full with a
    request queued, it reaches no call site, its row's work bit comes from the waiting queue the plugin reads, and
    rank 0's short request waits for it (the mixed hold, here to the no-decode give-up), as without the quorum."""
    from prefill_delayer.spec.policies.aligned.guards import NO_DECODE_HOLD
    from prefill_delayer.spec.registry import policy_of

    records, folder = quorum_run
    logged = _logged(folder)
    fields = policy_of("aligned").row_names
    assert _reasons(logged[1], 1, 1) == ["quorum"] and records[1][1]["extend"]
    rows = [[dict(zip(fields, x["row"])) for x in logged[rank]] for rank in range(WORLD)]
    full = rows[1][QUORUM_FULL - 1]
    assert records[1][QUORUM_FULL]["running"] == CPU_RANK["max_running_requests"]
    assert logged[1][QUORUM_FULL - 1]["waiting_at_start"] == 1 and not full["prefillable"] and full["has_work"] == 1
    assert rows[0][QUORUM_FULL - 1]["prefillable"] == 1
    assert _reasons(logged[0], QUORUM_FULL, QUORUM_FULL + NO_DECODE_HOLD) == ["delay"] * NO_DECODE_HOLD + ["no_decode"]


def test_check_log_checks_the_quorum_run_with_the_parameter_it_logged(
        quorum_run: tuple[list[list[dict[str, Any]]], Path], tmp_path: Path) -> None:
    """The quorum run's decision logs carry quorum_percent in their configuration, and check-log replays them clean
    with it; a copy with the quorum pass logged as a delay, or the full rank's reading logged as an empty queue, is a
    conformance finding at that pass and rank."""
    import shutil

    from decision_log_harness import check_log, edit_pass

    _, folder = quorum_run
    rc, out, err = check_log(str(folder), "--json", str(tmp_path / "clean.json"))
    assert rc == 0, out + err
    report = json.loads((tmp_path / "clean.json").read_text())
    assert "quorum" in report["decisions_by_reason"] and {c["status"] for c in report["checks"]} == {"ok"}
    header = json.loads((folder / "rank1.jsonl").read_text().splitlines()[0])
    assert header["config"]["quorum_percent"] == 50, header["config"]
    reasons = header["enums"]["reason"]

    def to_delay(values: list, columns: list) -> None:
        assert values[columns.index("decision.output_reason")] == reasons.index("quorum")
        values[columns.index("decision.output_allow")] = 0
        values[columns.index("decision.output_reason")] = reasons.index("delay")

    def empty_queue(values: list, columns: list) -> None:
        assert values[columns.index("waiting_at_start")] == 1
        values[columns.index("waiting_at_start")] = 0

    for name, number, change in (("flipped", 1, to_delay), ("emptied", QUORUM_FULL, empty_queue)):
        bad = tmp_path / name
        shutil.copytree(folder, bad)
        edit_pass(bad / "rank1.jsonl", number, change)
        rc, out, err = check_log(str(bad), "--json", str(tmp_path / f"{name}.json"))
        assert rc == 1, out + err
        findings = json.loads((tmp_path / f"{name}.json").read_text())["findings"]
        assert any(f["category"] == "conformance" and f["pass"] == number and f["ranks"] == [1] for f in findings), (
            name, findings)
