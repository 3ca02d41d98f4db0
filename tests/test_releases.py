"""Every SGLang release's own ``prefill_delayer.py``, side by side with the profile it resolves to.

For each release 0.5.14 ... 0.5.23 (fetched from the package registry), seeded
random multi-rank traces drive the release's ``PrefillDelayer`` and ours
(profile ``sglang-X``) through their executors and through
``_negotiate_should_allow_prefill``, each rank on its own skewed clock. Every
output field of every pass on every rank, the state after it, the one-shot
``skip_first_delayer`` and every metrics observation must be equal. A
self-check runs releases against the neighbouring profile and requires a
mismatch, so the comparison is able to fail.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Optional

import pytest

from prefill_delayer.runtime import PrefillDelayer, PrefillDelayerSinglePassExecutor, ServerArgs, run_ranks
from prefill_delayer.integrations.sglang.release_stubs import version_key
from delayer_spec import ATTN_CP_LAYOUT, RELEASES, features_of

from runtime_harness import Clock, Recorder, decision_tuple, finalize_release, require_release

pytestmark = pytest.mark.registry

TRACES_PER_RELEASE = 40
REGIME_CHANGE = 0.25  # chance per pass that the ranks' shared scheduler picture changes
SHARED_PICTURE = 0.8  # chance that a rank's picture is the shared one
CLOCK_RATES = (1.0, 1.0, 1.25, 0.8)  # each rank's clock runs at one of these rates: skew
PASS_SECONDS = (0.004, 0.01, 0.02)  # time between passes
MAX_DELAY_MS = (None, 15.0, 30.0, 50.0)  # small next to PASS_SECONDS: queue delays time out
TRICKLE = 0.3  # chance that a picture is the queue trigger's target workload
PICTURE = dict(
    running_batch=(0, 1, 3, 10, 40, 40),
    max_prefill_bs=(0, 1, 4, 8, 16),
    max_running_requests=(0, 8, 16, 48, 128, 128),
    waiting_queue_len=(0, 1, 2, 5, 12),
)
ALL_PREFILLABLE = (0.3, 0.85)  # a regime's kind: below the first, each rank at random; then all; then none
REASONS = {"", "delay", "no_wait", "wait_success", "wait_timeout", "token_watermark"}
# (release, a profile it is not): across every profile boundary, the traces must tell them apart.
WRONG_PROFILES = (
    ("0.5.16", "sglang-0.5.17"),
    ("0.5.17", "seed"),
    ("0.5.18", "sglang-0.5.19"),
    ("0.5.22", "sglang-0.5.19"),
    ("0.5.21", "sglang-0.5.22"),
    ("0.5.23", "hardened"),
)


@dataclass(frozen=True)
class Trace:
    """One random configuration, layout and pass sequence; ``passes[k][rank]`` is that rank's call."""

    name: str
    world: int
    dp_size: int
    attn_tp_size: int
    attn_cp_size: int
    server_args: ServerArgs
    max_delay_passes: int
    watermark: Optional[float]
    rates: tuple[float, ...]
    offsets: tuple[float, ...]
    times: tuple[float, ...]
    passes: tuple[tuple[dict[str, Any], ...], ...]

    def clock(self, rank: int) -> Clock:
        return Clock(rate=self.rates[rank], offset=self.offsets[rank])


def _layout(rng: random.Random, dp_attention: bool, cps: list[int]) -> tuple[int, int, int]:
    """(dp_size, attn_cp_size, attn_tp_size) with at most 4 ranks in the gather."""
    fits = [(dp, cp, tp) for dp in (1, 2, 3, 4) for cp in cps for tp in (1, 2)
            if (dp if dp_attention else 1) * cp * tp <= 4]
    return rng.choice(fits)


def _picture(rng: random.Random) -> dict[str, Any]:
    """One scheduler picture: the values a rank passes to negotiate.

    Some are the queue trigger's target workload (a large running batch, free
    slots, a short waiting queue), so that queue delays last until they time out.
    """
    if rng.random() < TRICKLE:
        return dict(token_usage=0.9, running_batch=rng.choice([10, 40]), max_prefill_bs=rng.choice([4, 8, 16]),
                    max_running_requests=128, waiting_queue_len=rng.choice([0, 1, 2]))
    return dict(
        token_usage=rng.choice([0.3, 0.6, 0.9, 0.9]),
        running_batch=rng.choice(PICTURE["running_batch"]),
        max_prefill_bs=rng.choice(PICTURE["max_prefill_bs"]),
        max_running_requests=rng.choice(PICTURE["max_running_requests"]),
        waiting_queue_len=rng.choice(PICTURE["waiting_queue_len"]),
    )


def _call(rng: random.Random, picture: dict[str, Any], prefillable: bool) -> dict[str, Any]:
    return dict(
        picture,
        prefillable=prefillable,
        executor=rng.random() < 0.7,
        ask_twice=rng.random() < 0.2,  # a second negotiate in one pass: the cached verdict
        ask_when_idle=rng.random() < 0.1,  # an executor asked with local_prefillable=False
        prefill_bs=rng.choice([0, 1, 1, 3, 7]),  # the batch admitted when allowed
    )


def _passes(rng: random.Random, n: int, world: int) -> tuple[tuple[dict[str, Any], ...], ...]:
    """``n`` passes of a regime (shared picture, prefillable mix) that persists a few passes, so that
    delays last long enough to time out; a rank sometimes has a picture of its own."""
    out = []
    for k in range(n):
        if k == 0 or rng.random() < REGIME_CHANGE:
            regime, kind = _picture(rng), rng.random()
        calls = []
        for _ in range(world):
            picture = regime if rng.random() < SHARED_PICTURE else _picture(rng)
            prefillable = rng.random() < 0.5 if kind < ALL_PREFILLABLE[0] else kind < ALL_PREFILLABLE[1]
            calls.append(_call(rng, picture, prefillable))
        out.append(tuple(calls))
    return tuple(out)


def make_trace(version: str, index: int) -> Trace:
    rng = random.Random(f"{version}/{index}")
    dp_attention = rng.random() < 0.5
    dp, cp, tp = _layout(rng, dp_attention, [1, 2] if version_key(version) >= (0, 5, 22) else [1])
    world = (dp if dp_attention else 1) * cp * tp
    server_args = ServerArgs(
        enable_dp_attention=dp_attention,
        prefill_delayer_queue_min_ratio=rng.choice([None, 0.29, 0.5, 1.0]),
        prefill_delayer_max_delay_ms=rng.choice(MAX_DELAY_MS),
        # Set for every release: the older ones ignore it, so their profiles must too.
        prefill_max_requests=rng.choice([None, None, *range(1, 9)]),
    )
    n = rng.randint(20, 30)
    times, t = [], 0.0
    for _ in range(n):
        t += rng.choice(PASS_SECONDS)
        times.append(t)
    return Trace(
        name=f"{version}/{index}", world=world, dp_size=dp, attn_tp_size=tp, attn_cp_size=cp, server_args=server_args,
        max_delay_passes=rng.randint(0, 5), watermark=rng.choice([None, 0.5, 0.7]),
        rates=tuple(rng.choice(CLOCK_RATES) for _ in range(world)),
        offsets=tuple(rng.uniform(0.0, 100.0) for _ in range(world)), times=tuple(times),
        passes=_passes(rng, n, world),
    )


# ----- driving one rank -----------------------------------------------------------------------


def _drive(trace: Trace, rank: int, clock: Clock, delayer: Any, executor_cls: Any,
           finalize: Callable[[Any, int], None], state_of: Callable[[Any], tuple]) -> list[tuple]:
    """Per pass: (decision fields, state, skip_first_delayer) after this rank's calls."""
    out = []
    for k, p in enumerate(trace.passes):
        clock.t = trace.times[k]
        a = p[rank]
        args = dict(running_batch=a["running_batch"], max_prefill_bs=a["max_prefill_bs"],
                    max_running_requests=a["max_running_requests"], waiting_queue_len=a["waiting_queue_len"])
        if a["executor"]:
            ex = executor_cls(delayer, a["token_usage"])
            if a["prefillable"] or a["ask_when_idle"]:
                ex.negotiate_should_allow_prefill(a["prefillable"], **args)
                if a["ask_twice"]:
                    ex.negotiate_should_allow_prefill(a["prefillable"], **{**args, "waiting_queue_len": a["waiting_queue_len"] + 3})
            allowed = ex._result is not None and ex._result.output_allow and a["prefillable"]
            finalize(ex, a["prefill_bs"] if allowed else 0)
            result = ex._result
        else:
            result = delayer._negotiate_should_allow_prefill(local_prefillable=a["prefillable"], token_usage=a["token_usage"], **args)
        out.append((decision_tuple(result), state_of(delayer), delayer.skip_first_delayer))
    return out


def _our_finalize(ex: Any, prefill_bs: int) -> None:
    ex.finalize(actual_prefill=prefill_bs > 0)


def _our_state(d: PrefillDelayer) -> tuple:
    return (d.state.delayed_count, d.state.wait_start)


def _release_state(d: Any) -> tuple:
    s = d._curr_state
    return (s.delayed_count, s.start_time) if s is not None else (0, None)


def ours_rank(trace: Trace, profile: str, rank: int, *, gather: Any = None, group: Any = None) -> tuple[list[tuple], list[dict]]:
    """One rank of ours: over ``gather`` (in-process ranks) or, without it, the ``torch.distributed`` ``group``."""
    clock, rec = trace.clock(rank), Recorder()
    d = PrefillDelayer(trace.dp_size, trace.attn_tp_size, group, trace.server_args, trace.max_delay_passes,
                       trace.watermark, rec, profile=profile, gather=gather, clock=clock, attn_cp_size=trace.attn_cp_size)
    return _drive(trace, rank, clock, d, PrefillDelayerSinglePassExecutor, _our_finalize, _our_state), rec.calls


def release_rank(trace: Trace, version: str, rank: int, group: Any) -> tuple[list[tuple], list[dict]]:
    """One rank of the release, gathering over ``group`` (a gather callable or a ``torch.distributed`` group)."""
    from prefill_delayer.integrations.sglang.upstream import release_delayer

    clock, rec = trace.clock(rank), Recorder()
    module, d = release_delayer(
        version, group=group, server_args=trace.server_args, dp_size=trace.dp_size, attn_tp_size=trace.attn_tp_size,
        attn_cp_size=trace.attn_cp_size, max_delay_passes=trace.max_delay_passes,
        token_usage_low_watermark=trace.watermark, metrics_collector=rec, clock=clock,
    )
    return _drive(trace, rank, clock, d, module.PrefillDelayerSinglePassExecutor, finalize_release, _release_state), rec.calls


def run_ours(trace: Trace, profile: str) -> list[tuple[list[tuple], list[dict]]]:
    return run_ranks(trace.world, lambda rank, gather: ours_rank(trace, profile, rank, gather=gather))


def run_release(trace: Trace, version: str) -> list[tuple[list[tuple], list[dict]]]:
    return run_ranks(trace.world, lambda rank, gather: release_rank(trace, version, rank, gather))


# ----- comparison ------------------------------------------------------------------------------

_release_runs: dict[tuple[str, int], list] = {}


def release_run(version: str, index: int) -> tuple[Trace, list]:
    trace = make_trace(version, index)
    if (version, index) not in _release_runs:
        _release_runs[(version, index)] = run_release(trace, version)
    return trace, _release_runs[(version, index)]


def differences(trace: Trace, want: list, got: list) -> list[str]:
    """Where ``got`` (ours) differs from ``want`` (the release): one line per differing pass or metrics list."""
    out = []
    for rank in range(trace.world):
        if len(want[rank][0]) != len(got[rank][0]):
            out.append(f"{trace.name} rank {rank}: {len(want[rank][0])} passes from the release, {len(got[rank][0])} from ours")
        for k, (w, g) in enumerate(zip(want[rank][0], got[rank][0])):
            if w != g:
                out.append(f"{trace.name} rank {rank} pass {k}: release {w}, ours {g}")
        if want[rank][1] != got[rank][1]:
            out.append(f"{trace.name} rank {rank}: metrics differ: release {want[rank][1]}, ours {got[rank][1]}")
    return out


@pytest.fixture(scope="module")
def releases() -> dict[str, Any]:
    """Every release's source, fetched once; skips the module when the registry cannot be reached."""
    return {version: require_release(version) for version in RELEASES}


@pytest.mark.parametrize("version", list(RELEASES))
def test_release_matches_its_profile(releases: dict[str, Any], version: str) -> None:
    profile = f"sglang-{version}"
    mismatches: list[str] = []
    reasons: set[str] = set()
    passes = 0
    for index in range(TRACES_PER_RELEASE):
        trace, want = release_run(version, index)
        mismatches += differences(trace, want, run_ours(trace, profile))
        reasons |= {step[0][2] for rank in want for step in rank[0]}
        passes += len(trace.passes) * trace.world
    summary = (f"SGLang {version} vs profile {profile} ({RELEASES[version]}): {TRACES_PER_RELEASE} traces, "
               f"{passes} rank-passes compared, {len(mismatches)} mismatches")
    print(summary)
    assert not mismatches, summary + "\n" + "\n".join(mismatches[:10])
    assert reasons == REASONS, f"the traces never reached {sorted(REASONS - reasons)}: they do not exercise every branch"


@pytest.mark.parametrize(("version", "profile"), WRONG_PROFILES)
def test_a_wrong_profile_is_caught(releases: dict[str, Any], version: str, profile: str) -> None:
    """Self-check: the same traces against a profile the release is not must disagree somewhere."""
    mismatches, compared = [], 0
    for index in range(TRACES_PER_RELEASE):
        trace, want = release_run(version, index)
        if trace.attn_cp_size > 1 and ATTN_CP_LAYOUT not in features_of(profile):
            continue  # not a layout that profile accepts
        compared += 1
        mismatches += differences(trace, want, run_ours(trace, profile))
    print(f"self-check: SGLang {version} vs profile {profile}: {compared} traces, {len(mismatches)} mismatches")
    assert mismatches, f"SGLang {version} agreed with profile {profile} on all {compared} traces: the comparison cannot fail"


# ----- over real gloo ranks --------------------------------------------------------------------


def _gloo_scenario(rank: int, world: int, version: str, index: int) -> dict[str, Any]:
    import torch.distributed as dist

    trace = make_trace(version, index)
    group = dist.group.WORLD
    return {"release": release_rank(trace, version, rank, group), "ours": ours_rank(trace, f"sglang-{version}", rank, group=group)}


@pytest.mark.multiprocess
@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])  # torch's all_gather_into_tensor; SGLang's all_gather_single
def test_a_release_over_a_real_process_group_matches_too(releases: dict[str, Any], version: str) -> None:
    """With a ``torch.distributed`` group the stubs call the real collective: two gloo ranks, release and ours."""
    from runtime_harness import results, spawn_gloo

    # Two DP groups of one rank each: both rows are counted.
    index = next(i for i in range(TRACES_PER_RELEASE) if make_trace(version, i).world == 2 == make_trace(version, i).dp_size
                 and make_trace(version, i).server_args.enable_dp_attention)
    outs = results(spawn_gloo(2, _gloo_scenario, version, index))
    trace = make_trace(version, index)
    mismatches = differences(trace, [o["release"] for o in outs], [o["ours"] for o in outs])
    assert not mismatches, "\n".join(mismatches[:10])
    # Both ranks' rows are counted: two prefillable ranks on a pass show the release saw the other rank's row.
    assert max(step[0][3] for step in outs[0]["release"][0]) == 2
