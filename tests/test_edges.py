"""The pitfalls and known defects of the released policies, each as a small hand-checked scenario.

Every pass runs through the ``DelayerMachine`` of every rank, the pure ``step``
and the independent reference (``fsm_sim.Cluster`` asserts the three agree);
the expected values below are worked out by hand from the released code (the seed, SGLang 0.5.16, and later releases).
"""

from __future__ import annotations

import pytest

from delayer_spec import PassInput
from prefill_delayer.spec.config import Config

from fsm_sim import Cluster

TICK = 2.0**-10  # dyadic clock steps: elapsed * 1000 is exact
BOTH = ("seed", "hardened")


def inp(prefillable=True, usage=1.0, rb=0, pb=0, mrr=0, wq=0) -> PassInput:
    return PassInput(prefillable, usage, rb, pb, mrr, wq)


def outcome(decisions):
    """(allow, reason, wait_forward_passes) of every rank."""
    return [(d.output_allow, d.output_reason, d.wait_forward_passes) for d in decisions]


def armed(cluster):
    return [s.skip_first_armed for s in cluster.states]


# ----- int(RB * ratio) in doubles ------------------------------------------


@pytest.mark.parametrize("profile", BOTH)
def test_queue_min_is_int_of_the_double_product(profile):
    assert int(100 * 0.29) == 28  # not 29
    c = Cluster(Config(queue_min_ratio=0.29, profile=profile))
    # q = min(int(100 * 0.29), 80) = 28; WQ = 28 is not < 28: no trigger, the skip stays armed.
    for _ in range(3):
        assert outcome(c.run([inp(rb=100, pb=80, mrr=1024, wq=28)], [0.0])) == [(True, "no_wait", 0)]
        assert armed(c) == [True]


def test_queue_trigger_consumes_the_skip_in_seed_only():
    pass_ = [inp(rb=100, pb=80, mrr=1024, wq=27)]  # 27 < 28: the queue trigger holds, no slot trigger
    seed = Cluster(Config(queue_min_ratio=0.29, profile="seed"))
    assert outcome(seed.run(pass_, [0.0])) == [(True, "no_wait", 0)]
    assert armed(seed) == [False]
    assert outcome(seed.run(pass_, [0.0])) == [(False, "delay", 0)]
    hardened = Cluster(Config(queue_min_ratio=0.29, profile="hardened"))
    assert outcome(hardened.run(pass_, [0.0])) == [(False, "delay", 0)]
    assert armed(hardened) == [True]


# ----- token_usage < W, strict -----------------------------------------------


@pytest.mark.parametrize("profile", BOTH)
def test_watermark_is_strict(profile):
    config = Config(token_usage_low_watermark=0.8, dp_size=2, enable_dp_attention=True, profile=profile)
    at = Cluster(config).run([inp(usage=0.8), inp(False)], [0.0, 0.0])
    assert outcome(at) == [(False, "delay", 0)] * 2
    assert at[0].num_token_watermark_force_allow == 0
    below = Cluster(config).run([inp(usage=0.8 - 1e-12), inp(False)], [0.0, 0.0])
    assert outcome(below) == [(True, "token_watermark", 0)] * 2
    assert below[0].num_token_watermark_force_allow == 1
    # Force needs the rank to be prefillable.
    idle = Cluster(config).run([inp(usage=0.8), inp(False, usage=0.1)], [0.0, 0.0])
    assert outcome(idle) == [(False, "delay", 0)] * 2


@pytest.mark.parametrize("profile", BOTH)
def test_force_in_all_branch_does_not_consume_the_skip(profile):
    c = Cluster(Config(token_usage_low_watermark=0.8, profile=profile))
    # The slot trigger holds (12 - 10 < 5), but force wins first.
    assert outcome(c.run([inp(usage=0.5, rb=10, pb=5, mrr=12)], [0.0])) == [(True, "token_watermark", 0)]
    assert armed(c) == [True]


# ----- (now - start) * 1000 >= max_delay_ms: the boundary counts as expired --------


QUEUE = inp(rb=10, pb=4, mrr=100, wq=2)  # q = min(5, 4) = 4 > WQ = 2; slot: 100 - 10 < 4 is false


def test_timeout_boundary_seed():
    c = Cluster(Config(queue_min_ratio=0.5, max_delay_ms=1000 * TICK, profile="seed"))
    t0 = 1000.0
    assert outcome(c.run([QUEUE], [t0])) == [(True, "no_wait", 0)]  # absorbed by the skip
    assert outcome(c.run([QUEUE], [t0])) == [(False, "delay", 0)]  # the wait starts at t0
    assert outcome(c.run([QUEUE], [t0 + TICK / 2])) == [(False, "delay", 0)]
    last = c.run([QUEUE], [t0 + TICK])  # elapsed * 1000 == max_delay_ms exactly
    assert outcome(last) == [(True, "wait_success", 2)]
    assert last[0].wait_seconds == TICK


def test_timeout_boundary_hardened():
    c = Cluster(Config(queue_min_ratio=0.5, max_delay_ms=1000 * TICK, profile="hardened"))
    t0 = 1000.0
    assert outcome(c.run([QUEUE], [t0])) == [(False, "delay", 0)]  # the skip is for the slot trigger
    assert outcome(c.run([QUEUE], [t0 + TICK / 2])) == [(False, "delay", 0)]
    last = c.run([QUEUE], [t0 + TICK])
    assert outcome(last) == [(True, "wait_success", 2)]
    assert last[0].wait_seconds == TICK
    assert armed(c) == [True]


# ----- ceil(mrr / dp_size) without DP attention --------------------------------


@pytest.mark.parametrize("profile", BOTH)
def test_mrr_is_ceil_divided_without_dp_attention(profile):
    config = Config(dp_size=4, enable_dp_attention=False, profile=profile)
    assert config.world_size == 1
    # ceil(59 / 4) = 15: 15 - 10 < 5 is false (floor division, 14, would trigger).
    c = Cluster(config)
    for _ in range(2):
        assert outcome(c.run([inp(rb=10, pb=5, mrr=59)], [0.0])) == [(True, "no_wait", 0)]
    assert armed(c) == [True]
    # ceil(56 / 4) = 14: 14 - 10 < 5 triggers.
    c = Cluster(config)
    assert outcome(c.run([inp(rb=10, pb=5, mrr=56)], [0.0])) == [(True, "no_wait", 0)]
    assert armed(c) == [False]
    assert outcome(c.run([inp(rb=10, pb=5, mrr=56)], [0.0])) == [(False, "delay", 0)]


# ----- each rank's own clock (#30521, #32454) vs the gathered flag -------------------


def _two_groups(profile):
    return Cluster(Config(queue_min_ratio=0.5, max_delay_ms=1000 * TICK, dp_size=2, enable_dp_attention=True, profile=profile))


def test_seed_ranks_desync_on_their_own_clocks():
    c = _two_groups("seed")
    assert outcome(c.run([QUEUE, QUEUE], [0.0, 0.0])) == [(True, "no_wait", 0)] * 2
    assert outcome(c.run([QUEUE, QUEUE], [0.0, 0.0])) == [(False, "delay", 0)] * 2
    # Rank 0's clock says the wait expired, rank 1's does not: they decide differently.
    assert outcome(c.run([QUEUE, QUEUE], [TICK, TICK / 2])) == [(True, "wait_success", 1), (False, "delay", 0)]
    assert [s.control for s in c.states] == ["idle", "delaying"]


def test_hardened_ranks_agree_on_the_gathered_timeout():
    c = _two_groups("hardened")
    assert outcome(c.run([QUEUE, QUEUE], [0.0, 0.0])) == [(False, "delay", 0)] * 2
    assert outcome(c.run([QUEUE, QUEUE], [TICK, TICK / 2])) == [(True, "wait_success", 1)] * 2
    assert [s.control for s in c.states] == ["idle", "idle"]


@pytest.mark.parametrize("profile", BOTH)
def test_timeout_flag_of_an_uncounted_rank(profile):
    # attn_tp_size 2, no DP attention: rank 1's row is gathered but not counted.
    c = Cluster(Config(queue_min_ratio=0.5, max_delay_ms=1000 * TICK, attn_tp_size=2, profile=profile))
    if profile == "seed":
        c.run([QUEUE, QUEUE], [0.0, 0.0])  # absorbed by the skip
    assert outcome(c.run([QUEUE, QUEUE], [0.0, 0.0])) == [(False, "delay", 0)] * 2
    got = outcome(c.run([QUEUE, QUEUE], [TICK / 2, TICK]))
    if profile == "seed":
        assert got == [(False, "delay", 0), (True, "wait_success", 1)]
    else:  # gathered-timeout reads the counted rows' flags, as SGLang 0.5.22 does: rank 1's is not read
        assert got == [(False, "delay", 0)] * 2


# ----- local max_running_requests (#32389) vs the gathered maximum -----------------


def test_seed_rank_with_zero_mrr_vetoes_alone():
    c = Cluster(Config(dp_size=2, enable_dp_attention=True, profile="seed"))
    passes = [inp(rb=10, pb=5, mrr=0), inp(rb=10, pb=5, mrr=1024)]
    assert outcome(c.run(passes, [0.0, 0.0])) == [(True, "no_wait", 0)] * 2
    assert armed(c) == [False, True]  # rank 0 spent its skip on a trigger only it sees
    assert outcome(c.run(passes, [0.0, 0.0])) == [(False, "delay", 0), (True, "no_wait", 0)]


def test_hardened_reads_the_gathered_mrr():
    c = Cluster(Config(dp_size=2, enable_dp_attention=True, profile="hardened"))
    passes = [inp(rb=10, pb=5, mrr=0), inp(rb=10, pb=5, mrr=1024)]
    for _ in range(3):
        assert outcome(c.run(passes, [0.0, 0.0])) == [(True, "no_wait", 0)] * 2
    assert armed(c) == [True, True]


@pytest.mark.parametrize("profile", BOTH)
def test_uncounted_row_mrr_and_prefillable(profile):
    # Rank 1 (attn-TP rank 1) is not counted: its prefillable and counts are ignored,
    # but hardened's mrr maximum is over ALL gathered rows.
    c = Cluster(Config(attn_tp_size=2, profile=profile))
    passes = [inp(rb=10, pb=5, mrr=12), inp(False, rb=500, pb=0, mrr=1024)]
    first = c.run(passes, [0.0, 0.0])
    assert [(d.input_estimation, d.num_prefillable) for d in first] == [("all", 1)] * 2
    second = outcome(c.run(passes, [0.0, 0.0]))
    if profile == "seed":
        assert armed(c) == [False, True]
        assert second == [(False, "delay", 0), (True, "no_wait", 0)]
    else:
        assert armed(c) == [True, True]
        assert second == [(True, "no_wait", 0)] * 2


# ----- the all branch's pass cap (#29898) ------------------------------------


SLOT = inp(rb=10, pb=5, mrr=12)  # 12 - 10 < 5: the slot trigger holds


def test_seed_all_branch_delays_forever():
    c = Cluster(Config(max_delay_passes=3, profile="seed"))
    assert outcome(c.run([SLOT], [0.0])) == [(True, "no_wait", 0)]
    for k in range(1, 12):
        assert outcome(c.run([SLOT], [float(k)])) == [(False, "delay", 0)]
        assert c.states[0].delayed_count == k


def test_hardened_all_branch_is_capped():
    c = Cluster(Config(max_delay_passes=3, profile="hardened"))
    reasons = [outcome(c.run([SLOT], [float(k)]))[0] for k in range(10)]
    assert reasons == [(True, "no_wait", 0)] + [(False, "delay", 0), (False, "delay", 0), (True, "wait_timeout", 2)] * 3


@pytest.mark.parametrize("passes", [0, 1])
def test_hardened_cap_below_two_never_delays(passes):
    c = Cluster(Config(max_delay_passes=passes, profile="hardened"))
    assert outcome(c.run([SLOT], [0.0])) == [(True, "no_wait", 0)]
    for k in range(1, 4):
        assert outcome(c.run([SLOT], [float(k)])) == [(True, "wait_timeout", 0)]


@pytest.mark.parametrize("profile", BOTH)
@pytest.mark.parametrize("passes", [0, 1])
def test_mixed_cap_below_two_never_delays(profile, passes):
    c = Cluster(Config(max_delay_passes=passes, dp_size=2, enable_dp_attention=True, profile=profile))
    for k in range(3):
        assert outcome(c.run([inp(), inp(False)], [float(k)] * 2)) == [(True, "wait_timeout", 0)] * 2


@pytest.mark.parametrize("profile", BOTH)
def test_mixed_wait_then_none_reports_the_wait(profile):
    c = Cluster(Config(max_delay_passes=30, dp_size=2, enable_dp_attention=True, profile=profile))
    assert outcome(c.run([inp(), inp(False)], [5.0, 7.0])) == [(False, "delay", 0)] * 2
    assert outcome(c.run([inp(), inp(False)], [5.5, 7.25])) == [(False, "delay", 0)] * 2
    done = c.run([inp(False), inp(False)], [6.0, 8.0])
    assert outcome(done) == [(True, "", 2)] * 2
    assert [d.wait_seconds for d in done] == [1.0, 1.0]
    assert [d.input_estimation for d in done] == ["none"] * 2
    assert [s.control for s in c.states] == ["idle"] * 2
