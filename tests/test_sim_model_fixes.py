"""The model backend's overlap lag, dispatch, health checks, cost model and page size (no SGLang needed).

The pass-by-pass agreement with SGLang 0.5.23's own scheduler is tests/test_sim_differential.py;
these are the properties each fix must have on its own.
"""

from __future__ import annotations

import pytest

from prefill_delayer.sim import Lengths, LongPrompt, Poisson, SimConfig, TraceReplay, Variant, run_variant
from prefill_delayer.sim.cost import SGLANG_35241, CostModel
from prefill_delayer.sim.dispatch import ROUND_ROBIN, SEPARATE, SHARED, TOTAL_REQUESTS, Dispatcher, health_dispatch_for
from prefill_delayer.sim.errors import SimInputError


def small(**kw) -> SimConfig:
    base = dict(dp_size=2, max_running_requests=8, max_total_tokens=40_000, chunked_prefill_size=1024, max_prefill_tokens=2048, passes=200)
    base.update(kw)
    return SimConfig(**base)


def test_a_result_is_seen_one_pass_after_its_forward():
    # One request of 100 prompt tokens, 3 output tokens, on one rank: pass 0 prefills it; with the
    # overlap scheduler its first token is processed at pass 1's start (after pass 1 launched a decode
    # that does not include it: its result was still in flight), so decode passes follow.
    r = run_variant(small(dp_size=1), Variant.of("off"), TraceReplay(rows=((0.0, 100, 3),)))
    (q,) = r.requests
    assert r.prefill[0] == 100
    assert q.first_token_s == pytest.approx(r.t0[1])  # processed one pass late, not at the end of pass 0
    assert q.finish_s == pytest.approx(r.t0[3])  # tokens 2 and 3 decoded at passes 1 and 2, seen at 2 and 3
    assert list(r.decode[:3]) == [0, 1, 1]


def test_a_pass_without_a_forward_costs_the_idle_pass_not_the_floor():
    cost = CostModel(floor_s=0.04, idle_pass_s=0.0015)
    assert cost.pass_seconds([(0, 0)] * 8) == 0.0015
    assert cost.pass_seconds([(0, 1)] + [(0, 0)] * 7) == 0.04


def test_moe_runs_over_every_ranks_tokens_attention_per_rank():
    c = SGLANG_35241
    full = c.pass_seconds([(16384, 0)] * 8)
    two = c.pass_seconds([(16384, 0)] * 2 + [(0, 0)] * 6)
    one = c.pass_seconds([(16384, 0)] + [(0, 0)] * 7)
    assert full == pytest.approx(1.397, abs=1e-6) and one == pytest.approx(0.401, abs=1e-6)  # the two numbers it is fitted to
    assert one < two < full
    # attention is the slowest rank's, the MoE term the sum over ranks
    assert two == pytest.approx(16384 * c.attn_token_s + 2 * 16384 * c.moe_token_s)


def test_round_robin_health_checks_shared_take_a_slot_of_the_user_rotation():
    shared, separate = Dispatcher(ROUND_ROBIN, SHARED, 4), Dispatcher(ROUND_ROBIN, SEPARATE, 4)
    for d in (shared, separate):
        d.route(100), d.route(100)
        d.route(1, health_check=True)
    assert shared.route(100) == 3  # the probe took rank 2's slot
    assert separate.route(100) == 2  # its own counter: the user rotation is untouched
    assert health_dispatch_for("0.5.17") == health_dispatch_for("0.5.22") == SHARED
    assert health_dispatch_for("0.5.23") == health_dispatch_for(None) == SEPARATE


def test_total_requests_dispatch_goes_to_the_least_loaded_rank_and_counts_its_own_sends():
    d = Dispatcher(TOTAL_REQUESTS, SEPARATE, 3)
    d.refresh(0.0, [(5, 0), (1, 0), (3, 0)])
    assert [d.route(10) for _ in range(4)] == [1, 1, 1, 2]  # 1 -> 2 -> 3 (a tie with rank 2: the lower index) -> 4
    d.refresh(0.01, [(0, 0), (0, 0), (0, 0)])  # within 20 ms: the snapshots are not re-read
    assert d.route(10) != 0


def test_a_busy_scheduler_drops_health_checks_and_the_probes_are_reported():
    cfg = small(dp_size=2, health_check_interval_s=0.5, passes=400)
    r = run_variant(cfg, Variant.of("sglang-0.5.17"), Poisson(rate=20.0, prompt=Lengths(500, 1500), output=Lengths(20, 60)))
    assert r.health_checks and all(t for t, *_ in r.health_checks)
    dropped = [h for h in r.health_checks if not h[2]]
    assert dropped  # under this load a probe finds a busy rank
    assert not any(q.health_check for q in r.requests)  # never counted as requests


def test_shared_health_dispatch_changes_a_round_robin_closed_loop_separate_does_not():
    workload = LongPrompt(concurrency=4, prompt=Lengths(5000, 5000), output=Lengths(1, 1))
    base = small(dp_size=2, passes=600, resubmit_gap_s=0.03)
    quiet = run_variant(base, Variant.of("sglang-0.5.17"), workload)
    runs = {h: run_variant(base.replace(health_check_interval_s=0.7), Variant.of("sglang-0.5.17", health_dispatch=h), workload) for h in (SHARED, SEPARATE)}
    assert list(runs[SEPARATE].prefill) == list(quiet.prefill)  # probes on their own counter leave the rotation alone
    assert list(runs[SHARED].prefill) != list(quiet.prefill)


def test_pages_round_kv_up():
    one = run_variant(small(dp_size=1), Variant.of("off"), TraceReplay(rows=((0.0, 100, 3),)))
    paged = run_variant(small(dp_size=1, page_size=64), Variant.of("off"), TraceReplay(rows=((0.0, 100, 3),)))
    assert one.peak_kv == 102  # the prompt and the outputs but the last
    assert paged.peak_kv == 128  # two pages
    with pytest.raises(SimInputError):
        small(page_size=0)


def test_new_seqs_per_window_count_every_admission_once():
    rows = tuple((0.1 * i, 200, 2) for i in range(40))
    r = run_variant(small(passes=10_000, warmup_s=0.0), Variant.of("off"), TraceReplay(rows=rows))
    windows = r.new_seqs_per_window(0.5)
    assert windows and all(len(w) == 2 for w in windows)
    assert sum(r.new_seqs) == 40
    assert sum(map(sum, windows)) <= 40


def test_the_load_snapshot_counts_the_waiting_prompts_it_tracks(monkeypatch: pytest.MonkeyPatch):
    # The snapshot's token load reads the waiting queue's prompt tokens as tracked on arrival and admission
    # (O(1) a pass, where a sum over a long queue made large DP sizes slow): they must be the queue's own.
    from prefill_delayer.sim.rank import RankScheduler

    seen = []
    publish, idle = RankScheduler.publish_load, RankScheduler.on_idle

    def check(self):
        seen.append(len(self.waiting))
        assert self._waiting_tokens == sum(r.prompt for r in self.waiting)

    monkeypatch.setattr(RankScheduler, "publish_load", lambda self, *a: (publish(self, *a), check(self))[0])
    monkeypatch.setattr(RankScheduler, "on_idle", lambda self, *a: (idle(self, *a), check(self))[0])
    run_variant(small(passes=400), Variant.of("hardened"),
                Poisson(rate=40.0, prompt=Lengths(500, 3000), output=Lengths(20, 200)))
    assert max(seen) > 5  # a queue did build up
