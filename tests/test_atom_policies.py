"""ATOM's two delayers as profiles, checked against ATOM's own tests (restated here as facts) and on the runtime.

ATOM publishes nothing to the package registry, so no released code can run
beside the profiles. Instead every case of ROCm/ATOM's ``tests/test_prefill_delayer.py``
(commit ffdf3bb5ddf8, the coalescer of #1611) is restated below, with the
delayer that file builds (``make_delayer``: #1611's defaults, dp_size 1, or 2
with a sibling rank whose contribution the test injects into the all-reduce),
and run through ``PolicyCore`` on in-process ranks: rank 0 is the test's
delayer, rank 1 (dp_size 2) passes the inputs that give the sibling's slots.
ATOM's per-reason counters (``_stat_fire_fill`` ...) are our reasons.
#930 has no tests of its own; its cases are read from its code path by path.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any, Optional

import pytest

from prefill_delayer.runtime import PolicyCore, run_ranks
from prefill_delayer.spec import Config, ConfigError
from prefill_delayer.spec.policies.atom_coalescer import AtomCoalescerConfig

MAX_BATCHED = 16384
# ATOM's counters, as the reasons they count (the first call is counted by none).
STAT = {
    "fill": ("no_wait", "wait_success"), "stall": ("stall",), "ttft": ("wait_timeout",), "kv": ("token_watermark", "kv_high"),
    "partial": ("partial_timeout",), "nodecode": ("no_decode",), "queue_ms": ("queue_age",), "vacuous": ("",),
    "hold": ("delay",),
}
# ``call``'s defaults in ATOM's test file.
CALL = {"prefillable": True, "pending_tokens": 0, "running_decode_batch": 64, "kv_usage": 0.5, "has_partial": False,
        "oldest_waiting_age_ms": 0.0}
MIXED = {"prefillable": False, "pending_tokens": 0, "running_decode_batch": 0}  # _add_rank({}): a sibling that adds nothing
ALIGNED = {"prefillable": True, "pending_tokens": MAX_BATCHED, "running_decode_batch": 64}  # _add_rank({0: 1, 1: MAX, 2: 64})


@dataclass
class Case:
    """One of ATOM's tests: ``make_delayer(**make)``, the first call (its ``skip_first``), then ``calls``.

    Each call is (arguments beyond ``call``'s defaults, the return ATOM asserts or None); ``stats`` what ATOM
    asserts of its counters at the end; ``sibling`` the other rank's arguments (dp_size 2).
    """

    name: str
    make: dict[str, Any]
    calls: list[tuple[dict[str, Any], Optional[bool]]]
    stats: dict[str, int] = field(default_factory=dict)
    sibling: Optional[dict[str, Any]] = None
    skip_first: bool = True


def _c(returns: Optional[bool] = None, **kwargs: Any) -> tuple[dict[str, Any], Optional[bool]]:
    return kwargs, returns


CASES = [
    Case("TestSkipFirst.test_first_call_fires", {}, [], skip_first=False),
    Case("TestFillTarget.test_holds_below_target", {}, [_c(False, pending_tokens=1000)], {"hold": 1}),
    Case("TestFillTarget.test_fires_at_target", {}, [_c(True, pending_tokens=12000)], {"fill": 1}),
    Case("TestFillTarget.test_fires_exactly_at_threshold", {}, [_c(True, pending_tokens=11469)]),
    Case("TestMustFireBounds.test_no_decode_fires", {}, [_c(True, pending_tokens=1000, running_decode_batch=0)],
         {"nodecode": 1}),
    Case("TestMustFireBounds.test_kv_high_fires", {}, [_c(True, pending_tokens=1000, kv_usage=0.95)], {"kv": 1}),
    Case("TestMustFireBounds.test_kv_low_fires_when_watermark_set", {"token_usage_low_watermark": 0.2},
         [_c(True, pending_tokens=1000, kv_usage=0.1)], {"kv": 1}),
    Case("TestMustFireBounds.test_kv_low_disabled_by_default", {}, [_c(False, pending_tokens=1000, kv_usage=0.001)]),
    Case("TestMustFireBounds.test_ttft_bound_fires", {"ttft_max_ticks": 3, "stall_ticks": 1000},
         [_c(False, pending_tokens=1000), _c(False, pending_tokens=2000), _c(False, pending_tokens=3000),
          _c(True, pending_tokens=4000)], {"ttft": 1}),
    Case("TestQueueAgeGuard.test_disabled_by_default", {}, [_c(False, pending_tokens=1000, oldest_waiting_age_ms=1e9)]),
    Case("TestQueueAgeGuard.test_fires_when_queue_age_exceeds_threshold",
         {"max_queue_ms": 5000, "ttft_max_ticks": 1000, "stall_ticks": 1000},
         [_c(False, pending_tokens=1000, oldest_waiting_age_ms=1000), _c(True, pending_tokens=1000, oldest_waiting_age_ms=6000)],
         {"queue_ms": 1}),
    Case("TestQueueAgeGuard.test_age_guard_beats_alignment_gate", {"dp_size": 2, "max_queue_ms": 5000, "ttft_max_ticks": 1000},
         [_c(True, pending_tokens=1000, oldest_waiting_age_ms=6000)], {"queue_ms": 1}, sibling=MIXED),
    Case("TestQueueAgeGuard.test_age_guard_gated_on_prefillable",
         {"max_queue_ms": 5000, "ttft_max_ticks": 1000, "stall_ticks": 1000},
         [_c(True, prefillable=False, pending_tokens=0, oldest_waiting_age_ms=9000)], {"queue_ms": 0}),
    Case("TestStall.test_stall_fires_when_queue_not_growing", {"stall_ticks": 3, "ttft_max_ticks": 1000},
         [_c(False, pending_tokens=1000)] * 3 + [_c(True, pending_tokens=1000)], {"stall": 1}),
    Case("TestStall.test_growth_resets_stall", {"stall_ticks": 2, "ttft_max_ticks": 1000},
         [_c(False, pending_tokens=1000), _c(False, pending_tokens=1000), _c(False, pending_tokens=2000),
          _c(False, pending_tokens=2000), _c(True, pending_tokens=2000)]),
    Case("TestPartial.test_small_partial_does_not_fire_immediately",
         {"partial_max_ticks": 3, "ttft_max_ticks": 1000, "stall_ticks": 1000},
         [_c(False, pending_tokens=500, has_partial=True)] * 2),
    Case("TestPartial.test_partial_fires_after_partial_deadline",
         {"partial_max_ticks": 2, "ttft_max_ticks": 1000, "stall_ticks": 1000},
         [_c(False, pending_tokens=500, has_partial=True)] * 2 + [_c(True, pending_tokens=500, has_partial=True)],
         {"partial": 1}),
    Case("TestPartial.test_partial_deadline_tighter_than_ttft",
         {"partial_max_ticks": 2, "ttft_max_ticks": 1000, "stall_ticks": 1000},
         [_c(pending_tokens=500, has_partial=True)] * 2 + [_c(True, pending_tokens=500, has_partial=True)], {"ttft": 0}),
    Case("TestVacuous.test_no_prefillable_rank_allows", {}, [_c(True, prefillable=False, pending_tokens=0)], {"vacuous": 1}),
    Case("TestAlignmentGate.test_mixed_holds_even_when_full", {"dp_size": 2, "ttft_max_ticks": 1000},
         [_c(False, pending_tokens=MAX_BATCHED)], {"hold": 1}, sibling=MIXED),
    Case("TestAlignmentGate.test_aligned_fires_when_full", {"dp_size": 2, "ttft_max_ticks": 1000},
         [_c(True, pending_tokens=MAX_BATCHED)], {"fill": 1}, sibling=ALIGNED),
    Case("TestAlignmentGate.test_mixed_released_by_ttft", {"dp_size": 2, "ttft_max_ticks": 2, "stall_ticks": 1000},
         [_c(False, pending_tokens=MAX_BATCHED)] * 2 + [_c(True, pending_tokens=MAX_BATCHED)], {"ttft": 1}, sibling=MIXED),
    Case("TestStatsDistinct.test_fill_and_stall_counted_separately", {"stall_ticks": 2, "ttft_max_ticks": 1000},
         [_c(pending_tokens=1000), _c(pending_tokens=1000), _c(True, pending_tokens=1000), _c(True, pending_tokens=12000)],
         {"stall": 1, "fill": 1}),
]
# ATOM's other test class, TestParamClamps, is about the constructor: test_param_clamps below.


def make_delayer(**kwargs: Any) -> AtomCoalescerConfig:
    """``make_delayer``'s defaults (#1611's set, which the profile atom-coalescer-1611 is) and its overrides."""
    values = {"dp_size": 1, "max_num_batched_tokens": MAX_BATCHED, "kv_high_watermark": 0.9,
              "token_usage_low_watermark": None, "profile": "atom-coalescer-1611", **kwargs}
    return AtomCoalescerConfig.from_engine(**values)


def run_case(case: Case, profile: str = "atom-coalescer-1611") -> tuple[list[Any], Any]:
    """Rank 0's decisions for the case's calls (the first call included) and its state at the end."""
    c = make_delayer(**case.make).replace(profile=profile)
    first = {**CALL, "pending_tokens": 0}
    calls = [first] + [{**CALL, **kw} for kw, _ in case.calls]
    sibling = {**CALL, **(case.sibling or {})}

    def rank_main(rank: int, gather: Any) -> tuple[list[Any], Any]:
        core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=False)
        out = []
        for kw in calls:
            out.append(core.negotiate(**(kw if rank == 0 else sibling)))
            core.finalize()
        return out, core.state

    return run_ranks(c.world_size, rank_main)[0]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_atoms_own_test_cases(case: Case) -> None:
    decisions, state = run_case(case)
    first, rest = decisions[0], decisions[1:]
    assert first.output_allow and first.output_reason == "first_call"
    assert state.first_call is False  # ATOM: d._first is False
    for (kw, want), d in zip(case.calls, rest):
        if want is not None:
            assert d.output_allow is want, (case.name, kw, d)
    counted = [d.output_reason for d in rest]
    for stat, count in case.stats.items():
        assert sum(counted.count(r) for r in STAT[stat]) == count, (case.name, stat, counted)


def test_the_cases_cover_every_test_of_atoms_file() -> None:
    """Every test function of ATOM's tests/test_prefill_delayer.py at ffdf3bb5 is restated (the clamps below)."""
    atom_tests = {
        "TestSkipFirst": ["test_first_call_fires"],
        "TestFillTarget": ["test_holds_below_target", "test_fires_at_target", "test_fires_exactly_at_threshold"],
        "TestMustFireBounds": ["test_no_decode_fires", "test_kv_high_fires", "test_kv_low_fires_when_watermark_set",
                               "test_kv_low_disabled_by_default", "test_ttft_bound_fires"],
        "TestQueueAgeGuard": ["test_disabled_by_default", "test_fires_when_queue_age_exceeds_threshold",
                              "test_age_guard_beats_alignment_gate", "test_age_guard_gated_on_prefillable"],
        "TestStall": ["test_stall_fires_when_queue_not_growing", "test_growth_resets_stall"],
        "TestPartial": ["test_small_partial_does_not_fire_immediately", "test_partial_fires_after_partial_deadline",
                        "test_partial_deadline_tighter_than_ttft"],
        "TestVacuous": ["test_no_prefillable_rank_allows"],
        "TestAlignmentGate": ["test_mixed_holds_even_when_full", "test_aligned_fires_when_full", "test_mixed_released_by_ttft"],
        "TestStatsDistinct": ["test_fill_and_stall_counted_separately"],
    }
    assert sorted(c.name for c in CASES) == sorted(f"{k}.{t}" for k, ts in atom_tests.items() for t in ts)


def test_param_clamps(caplog: pytest.LogCaptureFixture) -> None:
    """ATOM's TestParamClamps: its constructor clamps (with a warning); our configuration refuses the raw values."""
    with caplog.at_level(logging.WARNING):
        assert make_delayer(target_fill=1.5).target_fill == 1.0
        assert 0.0 < make_delayer(target_fill=0.0).target_fill <= 0.1
        d = make_delayer(ttft_max_ticks=0, partial_max_ticks=-3, stall_ticks=0)
    assert (d.ttft_max_ticks, d.partial_max_ticks, d.stall_ticks) == (1, 1, 1)
    assert sum("clamping" in r.getMessage() for r in caplog.records) == 5
    for bad in ({"target_fill": 1.5}, {"target_fill": 0.0}, {"ttft_max_ticks": 0}, {"stall_ticks": -1}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            Config(profile="atom-coalescer", **bad)


def test_both_default_sets_are_profiles() -> None:
    """#1611's defaults and #1670's, as ATOM's envs.py has them before and after #1670."""
    old, new = Config(profile="atom-coalescer-1611"), Config(profile="atom-coalescer")
    assert (old.target_fill, old.ttft_max_ticks, old.partial_max_ticks, old.stall_ticks) == (0.7, 30, 8, 3)
    assert (new.target_fill, new.ttft_max_ticks, new.partial_max_ticks, new.stall_ticks) == (0.9, 200, 100, 10)
    assert Config(profile="atom-coalescer-hardened").ttft_max_ticks == 200
    assert Config(profile="atom-coalescer", ttft_max_ticks=7).ttft_max_ticks == 7  # a set value is kept


def test_the_1670_defaults_hold_longer_on_the_same_ticks() -> None:
    """What #1670's re-tuning changes: a tick that fired at 0.7 holds at 0.9 (11469 of 16384 tokens)."""
    case = Case("fill", {}, [_c(pending_tokens=11469)])
    old, _ = run_case(case, "atom-coalescer-1611")
    c = make_delayer().replace(profile="atom-coalescer", target_fill=None, ttft_max_ticks=None, partial_max_ticks=None,
                                stall_ticks=None)
    assert c.target_fill == 0.9

    def rank_main(rank: int, gather: Any) -> list[Any]:
        core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=False)
        return [core.negotiate(**{**CALL, "pending_tokens": p}) for p in (0, 11469)]

    new = run_ranks(1, rank_main)[0]
    assert old[1].output_reason == "no_wait" and new[1].output_reason == "delay"


def test_fill_is_the_double_quotient() -> None:
    """The fill test is ATOM's ``g_pending / budget >= target_fill`` in doubles, at the threshold's edge."""
    rng = random.Random(19)
    for _ in range(300):
        mnbt, fill = rng.randint(1, 50_000), rng.choice([0.7, 0.9, 0.3, 0.05, 1.0, rng.random() or 0.5])
        edge = int(fill * mnbt)
        for pending in (edge - 1, edge, edge + 1):
            if pending < 0:
                continue
            c = AtomCoalescerConfig(max_num_batched_tokens=mnbt, target_fill=fill, profile="atom-coalescer")

            def rank_main(rank: int, gather: Any, c: Any = c, pending: int = pending) -> Any:
                core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=False)
                core.negotiate(**CALL)
                core.finalize()
                return core.negotiate(**{**CALL, "pending_tokens": pending})

            d = run_ranks(1, rank_main)[0]
            assert (d.output_reason == "no_wait") == (pending / mnbt >= fill), (mnbt, fill, pending, d)


# ----- #930: no tests of its own; its code path by path ------------------------------------------------


def _run_930(profile: str, calls: list[list[tuple[bool, float]]], clocks: list[list[float]], **params: Any) -> list[list[Any]]:
    """Per pass, each rank's decision, every rank with its own clock readings."""
    world = len(calls[0])
    c = Config(profile=profile, dp_size=world, **params)

    def rank_main(rank: int, gather: Any) -> list[Any]:
        now = [0.0]
        core = PolicyCore(c, gather, clock=lambda: now[0], decision_log=False)
        out = []
        for k, per_rank in enumerate(calls):
            now[0] = clocks[k][rank]
            out.append(core.negotiate(*per_rank[rank]))
            core.finalize()
        return out

    per_rank = run_ranks(world, rank_main)
    return [[per_rank[r][k] for r in range(world)] for k in range(len(calls))]


def test_930_paths() -> None:
    mixed = [(True, 0.9), (False, 0.9)]
    # The watermark comes before the one-shot skip, which then stays armed.
    out = _run_930("atom-930", [[(True, 0.1), (False, 0.9)], mixed], [[0.0, 0.0]] * 2, token_usage_low_watermark=0.2)
    assert [d.output_reason for d in out[0]] == ["token_watermark"] * 2
    assert [d.output_reason for d in out[1]] == ["first_call"] * 2
    # After the skip: a mixed tick delays up to max_delay_passes ticks, then allows with wait_timeout.
    out = _run_930("atom-930", [mixed] * 5, [[0.0, 0.0]] * 5, max_delay_passes=3)
    assert [d[0].output_reason for d in out] == ["first_call", "delay", "delay", "delay", "wait_timeout"]
    assert out[4][0].wait_forward_passes == 3
    # all and none allow; after delays, all is a wait_success.
    out = _run_930("atom-930", [mixed, mixed, [(True, 0.9)] * 2, [(False, 0.9)] * 2, [(True, 0.9)] * 2], [[0.0, 0.0]] * 5)
    assert [d[0].output_reason for d in out] == ["first_call", "delay", "wait_success", "", "no_wait"]


def test_930_clock_skew_splits_the_ranks_and_the_gathered_timeout_does_not() -> None:
    """Rank 1's clock runs ahead: on #930 it times out alone; atom-930-hardened times both out on the same tick."""
    mixed = [(True, 0.9), (False, 0.9)]
    clocks = [[0.0, 0.0], [1.0, 1.0], [2.0, 9.0], [3.0, 10.0]]
    out = _run_930("atom-930", [mixed] * 4, clocks, max_delay_ms=5000.0)
    assert [(d[0].output_reason, d[1].output_reason) for d in out[1:3]] == [("delay", "delay"), ("delay", "wait_timeout")]
    out = _run_930("atom-930-hardened", [mixed] * 4, clocks, max_delay_ms=5000.0)
    assert [(d[0].output_reason, d[1].output_reason) for d in out[1:3]] == [("delay", "delay"), ("wait_timeout", "wait_timeout")]
