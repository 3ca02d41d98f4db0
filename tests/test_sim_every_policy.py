"""Every policy of the registry in the simulator: the scheduler facts its binding reads, and the scheduler actions
its binding declares (a hold that also holds the chunk in progress; a prefill phase that idles the other ranks)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from prefill_delayer.sim import Lengths, Poisson, SimConfig, Variant, run_variant
from prefill_delayer.sim.policy_site import Facts
from prefill_delayer.sim.rank import RankScheduler
from prefill_delayer.sim.trackers import MaxPrefillBsTracker
from prefill_delayer.sim.workload import Request
from prefill_delayer.spec.registry import all_profiles, policies, policy_of

SIMULATED = [p for p in all_profiles() if policy_of(p).sim is not None]
MIXED = Poisson(rate=4.0, prompt=Lengths(300, 3000), output=Lengths(20, 120))


def config(**kw) -> SimConfig:
    base = dict(dp_size=3, max_running_requests=8, max_total_tokens=40_000, chunked_prefill_size=1024,
                max_prefill_tokens=2048, passes=240)
    base.update(kw)
    return SimConfig(**base)


def test_every_policy_of_the_registry_has_a_binding() -> None:
    assert [pol.name for pol in policies() if pol.sim is None] == []
    assert SIMULATED == list(all_profiles())


@pytest.mark.parametrize("profile", SIMULATED)
def test_every_profile_runs_through_the_api(profile: str) -> None:
    r = run_variant(config(), Variant.of(profile), MIXED)
    s = r.summary()
    assert r.passes == 240 and s.input_tok_s > 0 and s.completed > 0
    assert r.negotiations == [r.passes] * r.dp  # one negotiation per pass on every rank
    assert set(r.reason(c) for c in r.decision) <= set(policy_of(profile).reasons) | {""}


def test_every_profile_runs_through_the_command_line(capsys) -> None:
    from prefill_delayer.cli import main

    argv = ["simulate", "--workload", "poisson", "--rate", "4", "--prompt-tokens", "300:3000", "--output-tokens", "20:120",
            "--dp-size", "3", "--max-running-requests", "8", "--chunked-prefill-size", "1024", "--passes", "80",
            "--no-progress"]
    for profile in SIMULATED:
        argv += ["--profile", profile]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for profile in SIMULATED:
        assert f"| {profile} |" in out


# ----- the facts, against the rank model's state ---------------------------------------------------------


def rank(**kw) -> RankScheduler:
    return RankScheduler(0, config(**kw), None, MaxPrefillBsTracker("window"))


def one_pass(r: RankScheduler, now: float) -> None:
    """A pass without a policy: admission (every call site proceeds), launch, the previous result."""
    batch = r.schedule(now, lambda _args: True)
    r.finish_schedule(batch)
    r.run(batch)
    r.process_results(now)


def test_the_facts_of_a_rank_with_a_chunk_in_progress_and_a_queue() -> None:
    r = rank()
    r.receive(Request(1, 1.0, 3000, 4), False)
    r.receive(Request(2, 2.0, 500, 4), False)
    f0 = r.facts(2.5)
    assert type(f0) is Facts and len(f0) == len(Facts._fields)  # built without Facts' __new__: every field given
    assert Facts(*f0) == f0
    assert f0.pending_prefill_tokens == 3500 and not f0.chunk_in_progress and f0.chunk_tokens_left == 0
    assert f0.head_fits and f0.oldest_wait_s == pytest.approx(1.5) and f0.has_requests and not f0.backlog
    assert f0.prefill_budget == 1024 and f0.running_batch == 0 and not f0.extended
    one_pass(r, 3.0)  # request 1 is cut at the chunk budget: 1024 tokens in, the rest a chunk in progress
    assert r.chunked is not None and r.chunked.rid == 1 and list(q.rid for q in r.waiting) == [2]
    f = r.facts(5.0)
    assert f.chunk_in_progress and f.chunk_tokens_left == 3000 - 1024 == r.chunked.prompt - r.chunked.prefilled
    assert f.pending_prefill_tokens == 500 + 1976
    assert f.oldest_wait_s == pytest.approx(3.0)  # request 2 arrived at 2.0
    assert f.backlog and f.extended and f.has_requests and f.head_fits and f.waiting_queue_len == 1
    for _ in range(3):  # the chunk's rest (1024, then 952 with 72 of request 2 cut after it), then request 2's rest
        one_pass(r, 6.0)
    assert r.chunked is None and not r.waiting
    f = r.facts(7.0)
    assert f.pending_prefill_tokens == 0 and not f.chunk_in_progress and f.oldest_wait_s == 0.0 and not f.head_fits
    assert not f.backlog and f.running_batch == len(r.running) >= 1 and f.has_requests


def test_head_fits_reads_the_slots_and_the_kv_left() -> None:
    r = rank(max_running_requests=1)
    r.receive(Request(1, 0.0, 100, 50), False)
    one_pass(r, 0.0)
    r.receive(Request(2, 0.0, 100, 50), False)
    assert len(r.running) == 1 and not r.facts(1.0).head_fits  # no request slot left
    r = rank(max_total_tokens=1000)
    r.receive(Request(1, 0.0, 900, 50), False)
    r.receive(Request(2, 0.0, 200, 50), False)
    one_pass(r, 0.0)
    f = r.facts(1.0)
    assert r.allocated == 900 and not f.head_fits and f.token_usage == pytest.approx(0.9)  # 200 + a page > 100 left


def test_facts_are_what_the_bindings_read() -> None:
    fields = set(Facts._fields)
    for pol in policies():
        probe = Facts(0.5, 2, 1, 8, 3, True, True, 4000, True, 700, True, 1.25, True, True, 1024)
        assert len(pol.sim.inputs(probe)) == len(pol.inputs) and len(pol.sim.idle_inputs(probe)) == len(pol.inputs)
    assert {"pending_prefill_tokens", "chunk_in_progress", "chunk_tokens_left", "head_fits", "oldest_wait_s",
            "backlog", "has_requests", "prefill_budget"} <= fields


# ----- the scheduler actions ------------------------------------------------------------------------------

# Long prompts (several chunks) on ranks that also decode: the coalescer's alignment gate holds often.
CHUNKY = Poisson(rate=3.0, prompt=Lengths(2000, 6000), output=Lengths(40, 160))


def chunks_in_progress(r) -> list[list[bool]]:
    """Per pass and rank: whether the rank started the pass with a chunk in progress (from the trace)."""
    prompt = {q.rid: q.prompt for q in r.requests}
    done: dict[int, int] = {}
    partial = [None] * r.dp
    out = []
    for passes in r.trace:
        out.append([p is not None for p in partial])
        for i, t in enumerate(passes):
            for rid, n in t.prefilled:
                done[rid] = done.get(rid, 0) + n
                partial[i] = rid if done[rid] < prompt[rid] else (None if partial[i] == rid else partial[i])
    return out


def held_with_chunk(r) -> tuple[int, int]:
    """(rank-passes held while a chunk was in progress, of those the ones that prefilled anyway)."""
    dp, held, prefilled = r.dp, 0, 0
    for k, row in enumerate(chunks_in_progress(r)):
        for i, chunk in enumerate(row):
            if chunk and not r.allowed[k * dp + i]:
                held += 1
                prefilled += r.prefill[k * dp + i] > 0
    return held, prefilled


@pytest.mark.parametrize("profile", ["atom-coalescer", "atom-coalescer-1611"])
def test_a_coalescer_hold_keeps_the_chunk_in_progress_pending(profile: str, monkeypatch) -> None:
    cfg = config(trace=True, passes=300)
    r = run_variant(cfg, Variant.of(profile), CHUNKY)
    held, prefilled = held_with_chunk(r)
    assert held > 5 and prefilled == 0
    # Without the action (a hold lets the chunk go on, as SGLang's add_chunked_req would), held chunks prefill.
    pol = policy_of(profile)
    monkeypatch.setattr(pol, "sim", replace(pol.sim, gates_partial_chunk=False))
    held, prefilled = held_with_chunk(run_variant(cfg, Variant.of(profile), CHUNKY))
    assert held > 5 and prefilled == held


def test_sglangs_delayer_lets_a_chunk_go_on_whatever_the_verdict(monkeypatch) -> None:
    cfg = config(trace=True, passes=300)
    held, prefilled = held_with_chunk(run_variant(cfg, Variant.of("sglang-0.5.22"), CHUNKY))
    assert held > 0 and prefilled == held
    # Declared at the prefill adder's call sites too, a veto at add_chunked_req holds the chunk.
    pol = policy_of("sglang-0.5.22")
    monkeypatch.setattr(pol, "sim", replace(pol.sim, gates_partial_chunk=True))
    held, prefilled = held_with_chunk(run_variant(cfg, Variant.of("sglang-0.5.22"), CHUNKY))
    assert held > 0 and prefilled == 0


def decoding_beside_a_prefill(r) -> tuple[int, int]:
    """On passes where some rank prefills: (rank-passes of the others with running requests, of those the decoding ones)."""
    dp, others, decoding = r.dp, 0, 0
    for k in range(r.passes):
        row = r.prefill[k * dp : (k + 1) * dp]
        if not any(row):
            continue
        for i in range(dp):
            if row[i] == 0 and r.running[k * dp + i] > 0:
                others += 1
                decoding += r.decode[k * dp + i] > 0
    return others, decoding


@pytest.mark.parametrize("profile", ["lockstep", "lockstep-hardened"])
def test_lockstep_ranks_without_prefill_idle_in_a_prefill_phase(profile: str, monkeypatch) -> None:
    cfg = config(passes=300)
    others, decoding = decoding_beside_a_prefill(run_variant(cfg, Variant.of(profile), CHUNKY))
    assert others > 10 and decoding == 0
    # The same delayer without the phase: the ranks beside a prefill decode.
    base = decoding_beside_a_prefill(run_variant(cfg, Variant.of("sglang-0.5.22"), CHUNKY))
    assert base[1] > 10
    pol = policy_of(profile)
    monkeypatch.setattr(pol, "sim", replace(pol.sim, prefill_phase=None))
    others, decoding = decoding_beside_a_prefill(run_variant(cfg, Variant.of(profile), CHUNKY))
    assert decoding > 10


def test_the_scheduler_settings_give_the_parameters_they_stand_for() -> None:
    from prefill_delayer.sim.policy_site import policy_config

    cfg = config(chunked_prefill_size=4096, max_running_requests=16)
    atom = policy_config("atom-coalescer", 3, cfg.policy_settings())
    assert atom.max_num_batched_tokens == 4096
    assert policy_config("atom-coalescer", 3, cfg.policy_settings(), (("max_num_batched_tokens", 777),)).max_num_batched_tokens == 777
    assert policy_config("trtllm-adp-balance", 3, cfg.policy_settings()).max_batch_size == 16
