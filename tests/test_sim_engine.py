"""The simulator's engine: the real delayer on every rank, lock-step passes, SGLang's call sites, conservation."""

from __future__ import annotations

import re

import pytest

from prefill_delayer.sim import Burst, Lengths, LongPrompt, Mix, Poisson, SimConfig, TraceReplay, Variant, run_variant, simulate
from prefill_delayer.sim.errors import SimInputError
from prefill_delayer.sim.result import ASK_ADMIT_VETOED, ASK_CHUNK
from prefill_delayer.sim.trackers import (
    DECAY,
    LIFETIME,
    WINDOW,
    WINDOW_SIZE,
    MaxPrefillBsTracker,
    attempted_prefill_bs,
    own_tracker,
    tracker_for,
)
from delayer_spec import PROFILES, RELEASES

POISSON = Poisson(rate=2.0, prompt=Lengths(300, 3000), output=Lengths(5, 60))


def small(**kw) -> SimConfig:
    base = dict(dp_size=3, max_running_requests=8, max_total_tokens=40_000, chunked_prefill_size=1024, max_prefill_tokens=2048, passes=300)
    base.update(kw)
    return SimConfig(**base)


def _first_profile_per_collective() -> list[str]:
    """One simulated profile for each collective a policy declares (the all-gather, each all-reduce op)."""
    from prefill_delayer.sim.options import SIMULATED
    from prefill_delayer.spec.registry import policy_of

    first: dict[str, str] = {"all_gather": "sglang-0.5.22"}
    for name in SIMULATED:
        first.setdefault(policy_of(name).collective, name)
    return list(first.values())


@pytest.mark.parametrize("profile", _first_profile_per_collective())
def test_lockstep_and_threaded_gathers_make_the_same_run(profile, monkeypatch):
    """The single-thread lock-step gather and a thread per rank over InProcessGroup are the same collective, for
    each kind of collective: for an all-reduce the lock-step ends reduce once a round, the threaded ranks each."""
    import prefill_delayer.runtime.reduce as runtime_reduce
    import prefill_delayer.sim.gather as sim_gather
    from prefill_delayer.spec.registry import policy_of

    reductions = {"lockstep": 0, "threads": 0}
    gather_kind = ["lockstep"]

    def counted(rows, op, row_len, _real=runtime_reduce.reduce_rows):
        reductions[gather_kind[0]] += 1
        return _real(rows, op, row_len)

    monkeypatch.setattr(sim_gather, "reduce_rows", counted)
    monkeypatch.setattr(runtime_reduce, "reduce_rows", counted)
    runs = {}
    for g in ("lockstep", "threads"):
        gather_kind[0] = g
        runs[g] = run_variant(small(gather=g), Variant.of(profile), POISSON)
    a, b = runs["lockstep"], runs["threads"]
    assert a.passes == b.passes == 300
    assert bytes(a.decision) == bytes(b.decision)
    assert a.prefill.tobytes() == b.prefill.tobytes()
    assert a.running.tobytes() == b.running.tobytes()
    assert len(set(a.decision)) > 2  # the run exercised several outcomes, not one
    if policy_of(profile).collective == "all_gather":
        assert reductions == {"lockstep": 0, "threads": 0}
    else:
        assert reductions == {"lockstep": 300, "threads": 300 * 3}


@pytest.mark.parametrize("profile", _first_profile_per_collective())
def test_lockstep_ranks_share_one_compiled_step_deciding_once_for_equal_arguments(profile, monkeypatch):
    """The lock-step group's cores run one compiled step (compiled once, not once a rank), whose negotiate is
    computed again only when a rank's arguments differ from the last computed ones; with the threaded gather each
    rank compiles and computes its own (the run is the same: the test above)."""
    import prefill_delayer.fsm.compiled as compiled

    built: list = []
    computed: list = []
    real_init = compiled.CompiledStep.__init__

    def counting_init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        built.append(self)
        real_negotiate = self.negotiate

        def negotiate(*a):
            computed.append(a)
            return real_negotiate(*a)

        self.negotiate = negotiate

    monkeypatch.setattr(compiled.CompiledStep, "__init__", counting_init)
    r = run_variant(small(), Variant.of(profile), POISSON)
    assert len(built) == 1 and r.passes == 300
    # arguments equal to either of the last two computed are not computed again
    assert all(a not in computed[max(0, i - 2):i] for i, a in enumerate(computed))
    assert r.passes <= len(computed) < 2 * r.passes  # a round computes once, or twice (two sets of arguments)
    built.clear()
    computed.clear()
    t = run_variant(small(gather="threads"), Variant.of(profile), POISSON)
    assert len(built) == 3 and len(computed) == 3 * t.passes


@pytest.mark.parametrize("world", [1, 8, 16, 64])
def test_the_loop_runs_in_a_frame_with_room_for_every_rank(world):
    """``with_stack_room`` returns what it runs, from a frame of at least 1,024 unused slots a rank (its locals are
    never assigned), so the lock-step round's nested frames fit in the chunk CPython gives that frame."""
    import sys

    from prefill_delayer.sim.gather import _SLOTS_PER_RANK, with_stack_room

    def caller_locals() -> int:
        return sys._getframe(1).f_code.co_nlocals

    assert with_stack_room(world, lambda: 7) == 7
    assert with_stack_room(world, caller_locals) >= _SLOTS_PER_RANK * world


@pytest.mark.parametrize("profile", [*PROFILES, "sglang-0.5.20"])
def test_every_rank_negotiates_exactly_once_per_pass(profile):
    r = run_variant(small(passes=150), Variant.of(profile), POISSON)
    assert r.passes == 150
    assert r.negotiations == [150, 150, 150]


def test_same_seed_same_run_other_seed_other_run():
    a, b, c = (run_variant(small(seed=s, passes=200), Variant.of("seed"), POISSON) for s in (7, 7, 8))
    assert bytes(a.decision) == bytes(b.decision) and a.prefill.tobytes() == b.prefill.tobytes()
    assert [r.arrival for r in a.requests] == [r.arrival for r in b.requests]
    assert [r.arrival for r in a.requests] != [r.arrival for r in c.requests]


def test_a_mixed_workload_is_deterministic_too():
    """Requests arriving together (a wave) keep one order from run to run."""
    wl = Mix((Burst(count=12, prompt=Lengths(10, 500), output=Lengths(2, 30)), POISSON))
    a, b = (run_variant(small(passes=150), Variant.of("seed"), wl) for _ in range(2))
    assert [(q.rank, q.prompt, q.output) for q in a.requests] == [(q.rank, q.prompt, q.output) for q in b.requests]
    assert bytes(a.decision) == bytes(b.decision)


def test_a_finite_trace_is_served_completely_and_tokens_add_up():
    rows = tuple((0.05 * i, 200 + 137 * i, 1 + (i % 7) * 9) for i in range(40))
    trace = TraceReplay(rows=rows, name="t.csv", lines=tuple(range(2, 42)))
    config = small(passes=100_000)
    for variant in ("seed", "hardened", "off"):
        r = run_variant(config, Variant.of(variant), trace)
        assert len(r.requests) == 40
        assert all(q.finish_s is not None and q.arrival <= q.first_token_s <= q.finish_s for q in r.requests)
        assert sum(r.prefill) == sum(p for _, p, _ in rows)
        assert sum(r.out_tokens) == sum(o for _, _, o in rows)
        assert 0 < r.peak_kv <= config.max_total_tokens
        assert max(r.running) <= config.max_running_requests
        # Round-robin dispatch: request i went to rank i % dp.
        assert [q.rank for q in sorted(r.requests, key=lambda q: q.rid)] == [i % 3 for i in range(40)]


def test_kv_capacity_bounds_admission():
    """A KV pool for about two requests at a time: never exceeded, and requests still all finish."""
    rows = tuple((0.0, 3000, 1000) for _ in range(12))
    config = small(dp_size=2, max_total_tokens=8500, passes=100_000)
    r = run_variant(config, Variant.of("hardened"), TraceReplay(rows=rows))
    assert all(q.finish_s is not None for q in r.requests)
    assert r.peak_kv <= 8500
    assert max(r.running) <= 2


def test_a_request_that_never_fits_is_refused_up_front():
    with pytest.raises(SimInputError, match=r"t.csv:7 \(4000 prompt \+ 1000 output tokens\) could never be admitted"):
        run_variant(small(max_total_tokens=4000), Variant.of("seed"), TraceReplay(rows=((0.0, 4000, 1000),), name="t.csv", lines=(7,)))


def test_mid_chunk_rank_prefills_although_the_verdict_is_delay():
    """SGLang's add_chunked_req reports prefillable and ignores the verdict; a new admission obeys it."""
    # Rank 0 gets a 3-chunk prompt; rank 1 never has work: every pass with a prefill is "mixed".
    rows = ((0.0, 3 * 1024, 2),)
    config = small(dp_size=2, max_delay_passes=4, passes=12)
    r = run_variant(config, Variant.of("seed"), TraceReplay(rows=rows))
    rank0 = [(r.ask[2 * k], r.reason(r.decision[2 * k]), r.prefill[2 * k]) for k in range(r.passes)]
    # Rank 0's new admission is vetoed three times (max_delay_passes - 1), then released by wait_timeout.
    vetoed = [k for k, (ask, _, _) in enumerate(rank0) if ask == ASK_ADMIT_VETOED]
    assert vetoed == [0, 1, 2] and all(rank0[k][2] == 0 for k in vetoed)
    assert rank0[3][1] == "wait_timeout" and rank0[3][2] == 1024
    continuing = [k for k, (ask, _, _) in enumerate(rank0) if ask == ASK_CHUNK]
    assert continuing, "the chunked request never continued"
    assert any(rank0[k][1] == "delay" for k in continuing), "expected a continuing chunk under a delay verdict"
    assert all(rank0[k][2] > 0 for k in continuing), "a mid-chunk rank must prefill whatever the verdict"
    assert sum(p for *_, p in rank0) == 3 * 1024


STARVE_CONFIG = dict(
    dp_size=2, max_running_requests=16, max_total_tokens=200_000, chunked_prefill_size=2048, max_prefill_tokens=4096,
    duration_s=120.0, passes=100_000, warmup_s=20.0,
)
STARVE_LOAD = Mix((Burst(count=2 * 12, prompt=Lengths(16, 16), output=Lengths(100, 200)),
                   Poisson(rate=1.5, prompt=Lengths(500, 1500), output=Lengths(100, 300))))


def test_the_seed_starves_admission_after_a_burst_and_capped_profiles_do_not():
    """#32880 in small: a 12-request burst ratchets the seed's max_prefill_bs; the all branch then vetoes."""
    seed, capped, hardened = simulate(SimConfig(**STARVE_CONFIG), [Variant.of(n) for n in ("seed", "sglang-0.5.17", "hardened")], STARVE_LOAD)
    s = seed.summary()
    assert s.decisions["all/delay"] > 0.9
    assert s.veto_share > 0.9
    assert s.running_p95 <= 16 - 12 + 3  # clamped near max_running_requests - max_prefill_bs
    assert s.queue_per_rank > 5 and s.unserved > 10
    for other in (capped, hardened):
        o = other.summary()
        assert o.decisions.get("all/delay", 0.0) < 0.05
        assert o.queue_per_rank < 1 and o.running_per_rank > s.running_per_rank
        assert o.ttft_p50_s < s.ttft_p50_s / 10


def test_without_a_delayer_nothing_is_vetoed():
    r = run_variant(small(), Variant.of("off"), POISSON)
    assert r.negotiations == [0, 0, 0]
    assert r.summary().veto_share == 0.0
    assert set(r.summary().decisions) <= {"none/off", "mixed/off", "all/off"}


def test_mixed_chunks_decode_during_prefill_passes():
    rows = tuple((0.0, 2000, 50) for _ in range(6)) + ((1.0, 30_000, 5),)
    plain = run_variant(small(dp_size=1, passes=100_000), Variant.of("off"), TraceReplay(rows=rows))
    mixed = run_variant(small(dp_size=1, passes=100_000, enable_mixed_chunk=True), Variant.of("off"), TraceReplay(rows=rows))

    def decoded_while_prefilling(r):
        return sum(r.decode[k] for k in range(r.passes) if r.prefill[k])

    assert decoded_while_prefilling(plain) == 0  # SGLang runs the prefill batch; the running requests wait
    assert decoded_while_prefilling(mixed) > 0
    assert sum(mixed.out_tokens) == sum(plain.out_tokens) == sum(o for *_, o in rows)


def test_long_prompt_drift_starts_ranks_whole_chunks_apart():
    wl = LongPrompt(concurrency=2, prompt=Lengths(4096, 4096), output=Lengths(1, 1), drift=(0, 2))
    r = run_variant(small(dp_size=2, passes=4), Variant.of("off"), wl)
    first = sorted(r.requests, key=lambda q: q.rid)[:2]
    assert [q.prompt for q in first] == [4096, 4096 - 2 * 1024]
    with pytest.raises(SimInputError, match="drift lists 2 ranks, but dp_size is 3"):
        run_variant(small(dp_size=3, passes=4), Variant.of("off"), wl)


# ----- max_prefill_bs trackers ------------------------------------------------


def test_each_release_has_its_schedulers_tracker():
    assert tracker_for("seed") == LIFETIME
    assert [tracker_for(f"sglang-{r}") for r in ("0.5.14", "0.5.16", "0.5.17", "0.5.18", "0.5.23")] == [LIFETIME, LIFETIME, DECAY, WINDOW, WINDOW]
    assert tracker_for("sglang-0.5.19") == tracker_for("hardened") == WINDOW
    assert {tracker_for(f"sglang-{r}") for r in RELEASES} == {LIFETIME, DECAY, WINDOW}
    v = Variant.of("sglang-0.5.18")
    assert (v.profile, v.tracker, v.tracker_source, v.label) == ("sglang-0.5.17", WINDOW, "release", "sglang-0.5.18")
    v = Variant.of("seed", "window")
    assert (v.tracker, v.tracker_source, v.label) == (WINDOW, "option", "seed+window")


def test_a_profile_names_its_own_tracker_as_the_label_writes_it():
    # NAME+TRACKER: one profile with another tracker, beside the others with their own (--tracker sets every one's).
    # aligned's own is the decay its delayer keeps (HostBinding.own_max_prefill_bs): aligned+window is it fed
    # 0.5.23's window instead.
    assert Variant.of("aligned").tracker == tracker_for("aligned") == own_tracker("aligned") == DECAY
    assert (Variant.of("aligned").tracker_source, Variant.of("hardened").tracker_source) == ("policy", "release")
    assert own_tracker("hardened") is None and own_tracker("off") is None
    v = Variant.of("aligned+window")
    assert (v.name, v.profile, v.tracker, v.tracker_source, v.tracked_name, v.label) == (
        "aligned", "aligned", WINDOW, "option", "aligned+window", "aligned+window")
    assert Variant.of("sglang-0.5.18+lifetime").label == "sglang-0.5.18+lifetime"
    for given, why in (("aligned+foo", "after '+' comes a max_prefill_bs tracker"),
                       ("off+decay", "off runs no delayer"),
                       ("aligned+decay", "decay is aligned's own tracker already; name it aligned"),
                       ("hardened+window", "window is hardened's own tracker already"),
                       ("sglang-0.5.17+decay", "decay is sglang-0.5.17's own tracker already"),
                       ("nope+decay", "unknown profile 'nope'")):
        with pytest.raises(SimInputError, match=re.escape(why)):
            Variant.of(given)
    with pytest.raises(SimInputError, match="names its own tracker; --tracker window sets every profile's"):
        Variant.of("aligned+window", "window")


def test_lifetime_tracker_never_decays():
    t = MaxPrefillBsTracker(LIFETIME)
    for bs in (3, 80, 2, 0, 1):
        t.start_pass()
        t.end_pass(bs, (0, 0, 128, 50))
    assert t.value == 80


def test_decay_tracker_loses_0_2_percent_per_pass():
    t = MaxPrefillBsTracker(DECAY)
    t.end_pass(100, None)
    for _ in range(350):
        t.start_pass()
        t.end_pass(0, None)
    assert t.value == int(100 * 0.998**350) == 49


def test_window_tracker_keeps_the_last_16_attempts_vetoed_ones_estimated():
    # a vetoed attempt's arguments: (running_batch, max_prefill_bs, max_running_requests, waiting_queue_len)
    t = MaxPrefillBsTracker(WINDOW)
    t.end_pass(100, None)
    for _ in range(WINDOW_SIZE - 1):
        t.end_pass(0, (60, 0, 128, 3))
    assert t.value == 100
    t.end_pass(0, (124, 0, 128, 50))
    assert t.value == 4
    t.end_pass(0, None)  # decode-only pass: no attempt, the window does not age
    assert t.value == 4
    assert attempted_prefill_bs(running_batch=60, max_running_requests=128, waiting_queue_len=50) == 50
    assert attempted_prefill_bs(running_batch=128, max_running_requests=128, waiting_queue_len=50) == 1
    assert attempted_prefill_bs(running_batch=10, max_running_requests=128, waiting_queue_len=0) == 1
