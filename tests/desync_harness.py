"""Desync faults for the tests: one rank skips, repeats, restarts or announces a skip while its peers negotiate.

``run_plans(rank, world, gather_for, plans)`` plays each plan on this rank and
returns what happened, as plain data (the tests run it on in-process ranks and
on gloo ranks alike). A plan is ``{"policy", "kind", "rank", "at", "seed"}``:
passes ``1..at-1`` are clean on every rank; on pass ``at`` rank ``rank`` does
the fault while the others negotiate as usual, and every rank goes on until it
raises (at most two more passes). The kinds:

* ``skip``: the rank ends pass ``at`` without negotiating (``finalize`` alone);
* ``repeat``: it negotiates pass ``at`` twice before ending it;
* ``restart``: it replaces its core by a fresh one (pass 1) at pass ``at``;
* ``announce``: it announces the skip (``PolicyCore.skip``) in pass ``at``;
* ``all-skip`` / ``all-repeat``: every rank does it (controls: nothing is wrong).

All ranks run the same number of collectives in every kind, so one group can
play plan after plan.
"""

from __future__ import annotations

import random
from typing import Any, Callable

KINDS = ("skip", "repeat", "restart", "announce")
CONTROLS = ("all-skip", "all-repeat")
POLICIES = ("delayer", "gate")
# What the faulty rank (every rank, for a control) does on pass ``at`` instead of negotiating and finalizing.
FAULT_STEPS = {"skip": ["finalize"], "repeat": ["negotiate", "negotiate", "finalize"],
               "restart": ["restart", "negotiate", "finalize"], "announce": ["skip"],
               "all-skip": ["skip"], "all-repeat": ["negotiate", "negotiate", "finalize"]}


def make_config(policy: str, world: int) -> Any:
    """A configuration of ``policy`` for ``world`` ranks of DP attention."""
    if policy == "delayer":
        from prefill_delayer.spec import Config

        return Config(dp_size=world, enable_dp_attention=True, max_delay_passes=4, token_usage_low_watermark=0.2,
                      profile="hardened")
    from prefill_delayer.spec.policies.prefill_decode_interval import GateConfig

    return GateConfig(prefill_decode_interval=2, prefill_decode_interval_min_bs=3, dp_size=world, enable_dp_attention=True,
                      profile="pdi-hardened")


def inputs(policy: str, rng: random.Random) -> tuple:
    """One pass's inputs of ``policy``, drawn from ``rng``."""
    if policy == "delayer":
        return (rng.random() < 0.7, rng.choice([0.1, 0.5, 0.9]), rng.randint(0, 20), rng.randint(0, 8),
                rng.choice([16, 32]), rng.randint(0, 10))
    return (rng.randint(0, 6), rng.random() < 0.5)


def _snapshot(core: Any) -> tuple:
    return (core.state, core.passes, core.pass_number)


def play(rank: int, world: int, gather_for: Callable[[Any], Any], plan: dict[str, Any]) -> dict[str, Any]:
    """One plan on this rank: where it raised (or that it did not), the error, and whether the core kept its state."""
    from prefill_delayer.runtime import PolicyCore
    from prefill_delayer.spec import PrefillDelayerError

    config = make_config(plan["policy"], world)
    rng = random.Random(plan["seed"] * 1000 + rank)

    def new_core() -> Any:
        return PolicyCore(config, gather_for(config), clock=lambda: 0.0, decision_log=False)

    core = new_core()
    faulty = plan["kind"].startswith("all-") or rank == plan["rank"]
    at = plan["at"]
    calls = 0
    for k in range(1, at + 3):
        steps: list[str] = ["negotiate", "finalize"]
        if k == at and faulty:
            steps = FAULT_STEPS[plan["kind"]]
        for what in steps:
            if what == "restart":
                core = new_core()
                continue
            if what == "finalize":
                core.finalize()
                continue
            before = _snapshot(core)
            calls += 1
            try:
                if what == "skip":
                    core.skip()
                else:
                    core.negotiate(*inputs(plan["policy"], rng))
            except PrefillDelayerError as err:
                return {"raised": True, "pass": k, "call": calls, "error": type(err).__name__, "message": str(err),
                        "passes": dict(getattr(err, "passes", {})), "skipped": list(getattr(err, "skipped", ())),
                        "kept": _snapshot(core) == before}
    return {"raised": False, "calls": calls, "pass_number": core.pass_number, "passes": core.passes}


def run_plans(rank: int, world: int, gather_for: Callable[[Any], Any], plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every plan in turn on this rank (``gather_for(config)`` gives a gather for a new core)."""
    return [play(rank, world, gather_for, plan) for plan in plans]


def gloo_plans(rank: int, world: int, plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``run_plans`` over the default gloo group (``runtime_harness.spawn_gloo``), each core with its own gather."""
    from prefill_delayer.runtime import TorchGather
    from prefill_delayer.runtime.envelope import Envelope

    return run_plans(rank, world, lambda c: TorchGather(None, "cpu", c.world_size, Envelope(c).row_len), plans)


def random_plans(rng: random.Random, world: int, n: int) -> list[dict[str, Any]]:
    """``n`` plans: every kind and control in turn, each on a random policy, rank and pass."""
    kinds = KINDS + CONTROLS
    return [{"policy": rng.choice(POLICIES), "kind": kinds[i % len(kinds)], "rank": rng.randrange(world),
             "at": rng.randint(2, 6), "seed": rng.randrange(1 << 30)} for i in range(n)]


def check_outcome(plan: dict[str, Any], outcome: list[dict[str, Any]]) -> None:
    """Every rank raised the same ``DesyncError`` on the same collective with its state kept (or, for a control,
    no rank raised); ``AssertionError`` saying which plan otherwise."""
    where = f"plan {plan}: {outcome}"
    if plan["kind"] in CONTROLS:
        assert not any(o["raised"] for o in outcome), where
        assert len({(o["calls"], o["pass_number"]) for o in outcome}) == 1, where
        return
    assert all(o["raised"] and o["error"] == "DesyncError" and o["kept"] for o in outcome), where
    assert len({o["message"] for o in outcome}) == 1 and len({o["call"] for o in outcome}) == 1, where
    fault, others = outcome[plan["rank"]], [o for r, o in enumerate(outcome) if r != plan["rank"]]
    at = plan["at"]
    sent = fault["passes"]
    if plan["kind"] == "announce":
        assert fault["skipped"] == [plan["rank"]] and all(p == at for p in sent.values()), where
    elif plan["kind"] == "restart":
        assert sent[plan["rank"]] == 1 and all(sent[r] == at for r in sent if r != plan["rank"]), where
    elif plan["kind"] == "skip":  # the skipper is a pass ahead on the collective of its peers' pass ``at``
        assert sent[plan["rank"]] == at + 1 and all(o["pass"] == at for o in others), where
    else:  # repeat: the repeater is still on pass ``at`` on its peers' pass ``at + 1``
        assert sent[plan["rank"]] == at and all(o["pass"] == at + 1 for o in others), where
