"""Desync faults for the tests: one rank skips, repeats, restarts, announces a skip or runs a foreign delayer.

``run_plans(rank, world, gather_for, plans)`` plays each plan on this rank and
returns what happened, as plain data (the tests run it on in-process ranks and
on gloo ranks alike). A plan is ``{"policy", "kind", "rank", "at", "seed"}``
(for ``foreign``, ``"foreign"`` may name one of ``FOREIGN``; else the seed picks
it): passes ``1..at-1`` are clean on every rank; on pass ``at`` rank ``rank`` does
the fault while the others negotiate as usual, and every rank goes on until it
raises (at most two more passes). The kinds:

* ``skip``: the rank ends pass ``at`` without negotiating (``finalize`` alone);
* ``repeat``: it negotiates pass ``at`` twice before ending it;
* ``restart``: it replaces its core by a fresh one (pass 1) at pass ``at``;
* ``announce``: it announces the skip (``PolicyCore.skip``) in pass ``at``;
* ``foreign``: from pass ``at`` it runs another delayer: its one collective
  of pass ``at`` sends that delayer's row (``foreign_row``), and it stops there;
* ``all-skip`` / ``all-repeat``: every rank does it (controls: nothing is wrong).

All ranks run the same number of collectives in every kind, so one group can
play plan after plan.
"""

from __future__ import annotations

import random
from typing import Any, Callable

KINDS = ("skip", "repeat", "restart", "announce", "foreign")
CONTROLS = ("all-skip", "all-repeat")
POLICIES = ("delayer", "gate")
# What the faulty rank (every rank, for a control) does on pass ``at`` instead of negotiating and finalizing.
FAULT_STEPS = {"skip": ["finalize"], "repeat": ["negotiate", "negotiate", "finalize"],
               "restart": ["restart", "negotiate", "finalize"], "announce": ["skip"], "foreign": ["foreign"],
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


# The delayers a foreign rank may run, each row fitted to the length of ours (gloo pairs only rows of one length:
# a row of another length aborts the shorter side, as tests/test_desync.py's mixed rollout shows).
FOREIGN = ("sglang-own", "other-policy", "pre-stamp")


def foreign_row(variant: str, policy: str, world: int, pass_number: int, rng: random.Random) -> list[int]:
    """The row a rank running another delayer sends on its pass ``pass_number``, fitted to ``policy``'s row length:

    * ``sglang-own``: SGLang 0.5.23's own class (prefillable, force, running batch, max_prefill_bs, waiting queue,
      timeout);
    * ``other-policy``: ours with the other policy (``POLICIES``), its real row on that pass;
    * ``pre-stamp``: ours, a build from before the pass stamp: the policy's fields, ``input_error`` and
      ``config_fingerprint``, no stamp.
    """
    from prefill_delayer.runtime import PolicyCore
    from prefill_delayer.runtime.envelope import Envelope

    length = Envelope(make_config(policy, world)).row_len
    if variant == "sglang-own":
        row = [int(rng.random() < 0.7), 0, rng.randint(0, 20), rng.randint(0, 8), rng.randint(0, 10), 0]
    else:
        other = POLICIES[1 - POLICIES.index(policy)] if variant == "other-policy" else policy
        sent: list[list[int]] = []

        def capture(row: list[int]) -> list[int]:
            sent.append(list(row))
            raise RuntimeError("captured")  # the row is all this needs: no pass is decided

        core = PolicyCore(make_config(other, world), capture, clock=lambda: 0.0, decision_log=False)
        for _ in range(pass_number - 1):  # passes ended unnegotiated: the core's pass number only
            core.finalize()
        try:
            core.negotiate(*inputs(other, rng))
        except Exception:  # noqa: BLE001 - the capture's own stop, wrapped as the runtime wraps a gather's failure
            pass
        row = sent[0][:-1] if variant == "pre-stamp" else sent[0]
    return (row + [0] * length)[:length]


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
            if what == "foreign":  # another delayer's one collective of the pass, on the same group; not ours to raise
                variant = plan.get("foreign") or FOREIGN[plan["seed"] % len(FOREIGN)]
                gather_for(config)(foreign_row(variant, plan["policy"], world, k, rng))
                return {"raised": False, "foreign": variant, "call": calls + 1}
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
                        "foreign": list(getattr(err, "foreign", ())),
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
             "at": rng.randint(2, 6), "seed": rng.randrange(1 << 30), "foreign": rng.choice(FOREIGN)} for i in range(n)]


def check_outcome(plan: dict[str, Any], outcome: list[dict[str, Any]]) -> None:
    """Every rank of ours raised the same ``DesyncError`` on the same collective with its state kept (or, for a
    control, no rank raised; for ``foreign``, every rank but the foreign one); ``AssertionError`` saying which plan
    otherwise."""
    where = f"plan {plan}: {outcome}"
    if plan["kind"] in CONTROLS:
        assert not any(o["raised"] for o in outcome), where
        assert len({(o["calls"], o["pass_number"]) for o in outcome}) == 1, where
        return
    ours = [o for r, o in enumerate(outcome) if plan["kind"] != "foreign" or r != plan["rank"]]
    assert all(o["raised"] and o["error"] == "DesyncError" and o["kept"] for o in ours), where
    assert len({o["message"] for o in ours}) == 1 and len({o["call"] for o in ours}) == 1, where
    fault, others = outcome[plan["rank"]], [o for r, o in enumerate(outcome) if r != plan["rank"]]
    at = plan["at"]
    if plan["kind"] == "foreign":  # every rank of ours raised on the foreign rank's one collective, naming it alone
        assert not fault["raised"] and fault["call"] == others[0]["call"], where
        assert all(o["pass"] == at and o["foreign"] == [plan["rank"]] for o in others), where
        assert all(o["passes"] == {r: at for r in range(len(outcome)) if r != plan["rank"]} for o in others), where
        return
    sent = fault["passes"]
    if plan["kind"] == "announce":
        assert fault["skipped"] == [plan["rank"]] and all(p == at for p in sent.values()), where
    elif plan["kind"] == "restart":
        assert sent[plan["rank"]] == 1 and all(sent[r] == at for r in sent if r != plan["rank"]), where
    elif plan["kind"] == "skip":  # the skipper is a pass ahead on the collective of its peers' pass ``at``
        assert sent[plan["rank"]] == at + 1 and all(o["pass"] == at for o in others), where
    else:  # repeat: the repeater is still on pass ``at`` on its peers' pass ``at + 1``
        assert sent[plan["rank"]] == at and all(o["pass"] == at + 1 for o in others), where
