"""Pass identity in the collective: a rank that skips, repeats, restarts, announces a skip or runs another delayer.

Every row carries a pass stamp (``runtime.envelope``): the rank's pass number,
a skip flag and the row's tag. These tests drive each fault on in-process ranks
and on real gloo ranks (2-4), for both policies (SGLang's delayer and the
prefill-decode-interval gate): every rank raises the same ``DesyncError`` on the
same collective, decides nothing, and keeps its state; the controls (every rank
skips, every rank repeats) raise nothing. The mixed rollout (ours on one rank,
SGLang 0.5.23's own class on the other) runs with real SGLang.
"""

from __future__ import annotations

import pickle
import random
import time
from typing import Any

import pytest

from desync_harness import CONTROLS, FOREIGN, KINDS, POLICIES, check_outcome, gloo_plans, inputs, make_config, random_plans, run_plans
from prefill_delayer.runtime import CollectiveError, DesyncError, PolicyCore, run_ranks
from prefill_delayer.runtime.envelope import FIELDS, PASS_MASK, SKIP_FLAG, TAG_SHIFT, Envelope, pass_of, row_tag
from prefill_delayer.spec.registry import policy_named
from runtime_harness import COLLECTIVE_TIMEOUT_S, error_info, spawn_gloo
from sglang_harness import layout_widths, publish_context, sglang_skip_reason


# ----- the stamp ----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_the_stamp_holds_the_pass_the_skip_flag_and_the_rows_tag(policy: str) -> None:
    env = Envelope(make_config(policy, 2))
    assert env.row_fields[-len(FIELDS):] == FIELDS and env.f_stamp == env.row_len - 1
    for number in (1, 2, 77, PASS_MASK, PASS_MASK + 5):
        for skip in (False, True):
            s = env.stamp(number, skip)
            assert 0 <= s < 2**63 and pass_of(s) == number & PASS_MASK
            assert bool(s & SKIP_FLAG) == skip and s >> TAG_SHIFT == env.tag
    tags = {row_tag(policy_named(name)) for name in ("sglang-delayer", "prefill-decode-interval")}
    assert len(tags) == 2 and 0 not in tags  # each policy's rows are its own; a zeroed buffer's are nobody's


@pytest.mark.parametrize("policy", POLICIES)
def test_a_cores_stamp_advances_at_finalize_and_wraps_with_the_pass_number(policy: str) -> None:
    """finalize adds 1 to the stamp (the pass number is its low bits); past pass PASS_MASK it is pass 0's stamp, the
    tag and no skip flag, as ``Envelope.stamp`` gives, and ranks wrapped alike still negotiate together."""
    config = make_config(policy, 2)
    env = Envelope(config)

    def rank_main(rank: int, gather: Any) -> list:
        core = PolicyCore(config, gather, clock=lambda: 0.0)
        seen = []
        for _ in range(3):
            seen.append((core.pass_number, core._stamp == env.stamp(core.pass_number)))
            core.finalize()
        core._stamp = env.stamp(PASS_MASK)  # as after 2**40 - 1 passes
        seen.append(core.pass_number)
        core.finalize()
        seen.append((core.pass_number, core._stamp == env.stamp(0)))
        core.negotiate(*inputs(policy, random.Random(rank)))  # both ranks at pass 0 mod 2**40: one collective
        core.finalize()
        seen.append(core.pass_number)
        return seen

    want = [(1, True), (2, True), (3, True), PASS_MASK, (0, True), 1]
    assert run_ranks(2, rank_main) == [want, want]


def test_desync_error_pickles_with_its_attributes() -> None:
    err = DesyncError(pass_number=4, passes={0: 4, 1: 3}, skipped=(), foreign=(), row_len=10, policy="p", group="g")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, CollectiveError) and str(back) == str(err)
    assert (back.pass_number, back.passes, back.skipped, back.foreign, back.group) == (4, {0: 4, 1: 3}, (), (), "g")


# ----- each fault, on in-process ranks --------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("kind", KINDS + CONTROLS)
@pytest.mark.parametrize("world", [2, 3])
def test_each_fault_on_in_process_ranks(policy: str, kind: str, world: int) -> None:
    plan = {"policy": policy, "kind": kind, "rank": world - 1, "at": 3, "seed": 7}
    plans = [{**plan, "foreign": f} for f in FOREIGN] if kind == "foreign" else [plan]
    outs = run_ranks(world, lambda rank, gather: run_plans(rank, world, lambda c: gather, plans))
    for i, p in enumerate(plans):
        check_outcome(p, [o[i] for o in outs])


def test_the_messages_name_the_ranks_and_their_passes() -> None:
    world = 3
    kinds = ("skip", "repeat", "restart", "announce", "foreign")
    assert set(kinds) == set(KINDS)
    plans = [{"policy": "delayer", "kind": kind, "rank": 1, "at": 4, "seed": 1} for kind in kinds]
    outs = run_ranks(world, lambda rank, gather: run_plans(rank, world, lambda c: gather, plans))
    skip, repeat, restart, announce, foreign = (outs[0][i]["message"] for i in range(len(kinds)))
    assert "paired rows of different passes (ranks 0, 2: at pass 4; rank 1: at pass 5)" in skip
    assert "(ranks 0, 2: at pass 5; rank 1: at pass 4)" in repeat
    assert "(ranks 0, 2: at pass 4; rank 1: at pass 1)" in restart and "restarted with a fresh delayer" in restart
    assert "rank 1 skipped the pass's negotiation that the other ranks ran (ranks 0, 2: at pass 4; rank 1: skipping " \
           "pass 4)" in announce and "--prefill-decode-interval-min-bs" in announce
    assert "rank 1 sent rows that are not sglang-delayer rows" in foreign and "(ranks 0, 2: at pass 4)" in foreign
    assert all(m.endswith("no decision was taken on them") for m in (skip, repeat, restart, announce, foreign))


def test_a_foreign_row_is_named_and_nothing_is_decided() -> None:
    """Rank 1 sends SGLang 0.5.23's own six values (prefillable, force, running batch, max_prefill_bs, waiting
    queue, timeout), zero-padded as a gloo buffer leaves them: no rank of ours decides on them."""
    c = make_config("delayer", 2)

    def rank_main(rank: int, gather: Any) -> Any:
        if rank == 1:
            return gather([1, 0, 3, 2, 5, 0] + [0] * (Envelope(c).row_len - 6))
        core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=False)
        before = (core.state, core.passes, core.pass_number)
        try:
            core.negotiate(True, 0.5, 3, 2, 16, 5)
        except DesyncError as err:
            return error_info(err), (core.state, core.passes, core.pass_number) == before
        return None

    (info, kept), _ = run_ranks(2, rank_main)
    assert kept and info["attrs"]["foreign"] == (1,) and info["attrs"]["passes"] == {0: 1}
    assert "rank 1 sent rows that are not sglang-delayer rows" in info["message"]
    assert "SGLang's own PrefillDelayer, where PREFILL_DELAYER_PROFILE is not set" in info["message"]


def test_a_failed_pass_is_logged_with_the_rows_that_made_it_fail(tmp_path: Any) -> None:
    import json

    world = 2
    plan = {"policy": "delayer", "kind": "announce", "rank": 1, "at": 2, "seed": 3}
    config = make_config("delayer", world)

    def rank_main(rank: int, gather: Any) -> Any:
        core = PolicyCore(config, gather, clock=lambda: 0.0, decision_log=tmp_path)
        core.negotiate(True, 0.5, 0, 0, 16, 2)
        core.finalize()
        try:
            core.skip() if rank == plan["rank"] else core.negotiate(True, 0.5, 0, 0, 16, 2)
        except DesyncError:
            pass
        core.close()

    run_ranks(world, rank_main)
    env = Envelope(config)
    for rank in range(world):
        lines = [json.loads(x) for x in (tmp_path / f"rank{rank}.jsonl").read_text().splitlines()]
        kinds = [x["kind"] if isinstance(x, dict) else "pass" for x in lines]  # a format-2 pass line is an array
        assert kinds == ["header", "pass", "fail"] and lines[0]["row_fields"][-1] == "pass_stamp"
        assert lines[1][lines[0]["columns"].index("pass_stamp")] == 1  # the stamp's pass number, beside the own row
        fail = lines[2]
        assert fail["error"] == "DesyncError" and fail["pass"] == 2
        stamps = fail["rows"][env.f_stamp::env.row_len]
        assert [pass_of(s) for s in stamps] == [2, 2] and [bool(s & SKIP_FLAG) for s in stamps] == [False, True]


# ----- randomised faults on gloo ranks ------------------------------------------------------------------

# Plans per world size: every kind and control in turn (KINDS + CONTROLS), on a random policy, rank and pass.
GLOO_PLANS = {2: 140, 3: 112, 4: 112}


@pytest.mark.multiprocess
@pytest.mark.parametrize("world", sorted(GLOO_PLANS))
def test_randomised_faults_on_gloo_ranks(world: int) -> None:
    rng = random.Random(2200 + world)
    plans = random_plans(rng, world, GLOO_PLANS[world])
    t0 = time.monotonic()
    out = spawn_gloo(world, gloo_plans, plans, timeout_s=120.0)
    elapsed = time.monotonic() - t0
    bad = {r: v for r, v in out.items() if v[0] != "ok"}
    assert not bad, bad
    per_rank = [out[r][1] for r in range(world)]
    counts: dict[str, int] = {}
    for i, plan in enumerate(plans):
        check_outcome(plan, [o[i] for o in per_rank])
        kind = plan["kind"] + (f" ({plan['foreign']})" if plan["kind"] == "foreign" else "")
        counts[f"{kind}/{plan['policy']}"] = counts.get(f"{kind}/{plan['policy']}", 0) + 1
    print(f"world {world}: {len(plans)} runs in {elapsed:.1f} s, by kind/policy: {dict(sorted(counts.items()))}")
    assert {p["kind"] for p in plans} == set(KINDS + CONTROLS)
    assert {p["foreign"] for p in plans if p["kind"] == "foreign"} == set(FOREIGN)


# ----- a mixed rollout: ours on one rank, SGLang 0.5.23's own class on the other ---------------------


def _mixed_rollout(rank: int, world: int, foreign: int) -> dict[str, Any]:
    publish_context(rank, world, layout_widths(world, attn_dp_size=world), {}, gloo_timeout_s=COLLECTIVE_TIMEOUT_S)
    if rank == foreign:  # PREFILL_DELAYER_PROFILE unset on this node: SGLang's own classes
        from sglang.srt.managers.prefill_delayer import PrefillDelayer, PrefillDelayerSinglePassExecutor
    else:
        from prefill_delayer.integrations.sglang import PrefillDelayer, PrefillDelayerSinglePassExecutor
    d = PrefillDelayer(5, None)
    t0 = time.monotonic()
    for k in range(1, 4):
        state = getattr(d, "state", None)
        try:
            ex = PrefillDelayerSinglePassExecutor(d, 0.9)
            ex.negotiate_should_allow_prefill(True, 0, 0, 16, 2)
            ex.finalize(actual_prefill_bs=0)
        except Exception as err:  # noqa: BLE001 - reported: the test says which it must be
            return {"pass": k, "error": error_info(err), "elapsed": time.monotonic() - t0, "kept": d.state == state}
    return {"pass": None}


@pytest.mark.sglang
@pytest.mark.multiprocess
@pytest.mark.skipif(sglang_skip_reason() is not None, reason=str(sglang_skip_reason()))
@pytest.mark.parametrize("world, foreign", [(2, 1), (2, 0), (3, 1), (4, 2)])
def test_a_mixed_rollout_fails_every_rank_of_ours_within_the_timeout(world: int, foreign: int) -> None:
    """SGLang's own rank gathers 6 int64 per rank, ours 10: on gloo the shorter side (theirs) is aborted on its
    first all-gather (SIGABRT, gloo's 'Received data size doesn't match expected size'); each rank of ours raises
    on that same pass, within the group timeout: ``DesyncError`` naming the foreign rank when the foreign rows
    reached it first, else ``CollectiveError`` (the peer gone) saying what such a peer most often is."""
    out = spawn_gloo(world, _mixed_rollout, foreign, destroy=False, timeout_s=120.0)
    assert out[foreign] == ("exit", -6), out  # SIGABRT: not our code, and not catchable
    for rank in (r for r in range(world) if r != foreign):
        status, o = out[rank]
        assert status == "ok" and o["pass"] == 1 and o["kept"], o
        assert o["elapsed"] < COLLECTIVE_TIMEOUT_S + 2.0, o
        err = o["error"]
        if err["type"] == "DesyncError":
            assert err["attrs"]["foreign"] == (foreign,) and "SGLang's own PrefillDelayer" in err["message"]
        else:
            assert err["type"] == "CollectiveError", err
            assert "no pass has succeeded on this group yet" in err["message"]
            assert "SGLang's own PrefillDelayer where PREFILL_DELAYER_PROFILE is not set" in err["message"]
    print(f"world {world}, SGLang's own class on rank {foreign}: " + "; ".join(
        f"rank {r}: {'exit ' + str(v[1]) if v[0] == 'exit' else v[1]['error']['type']}" for r, v in sorted(out.items())))


# ----- the plugin's guard on SGLang 0.5.23's deferral (tests/test_sglang_scheduler.py runs it in the scheduler) --


def test_the_deferral_guard_makes_only_a_deferred_pass_of_ours_skip() -> None:
    from prefill_delayer.integrations.sglang import deferral

    skipped: list[str] = []

    class Ours:  # what the guard needs of our shell: skip_pass
        def skip_pass(self) -> None:
            skipped.append("skip")

    class Scheduler:  # a host with the method the guard wraps, deciding as it is told
        def __init__(self, defer: bool, delayer: Any) -> None:
            self.defer, self.prefill_delayer = defer, delayer

        def _should_defer_prefill(self, running_batch: Any) -> bool:
            return self.defer

    guarded = deferral.guard(Scheduler._should_defer_prefill)
    assert deferral.guard(guarded) is guarded and guarded.__name__ == "_should_defer_prefill"
    Scheduler._should_defer_prefill = guarded  # type: ignore[method-assign]
    assert Scheduler(False, Ours())._should_defer_prefill(None) is False and skipped == []
    assert Scheduler(True, Ours())._should_defer_prefill(None) is True and skipped == ["skip"]
    assert Scheduler(True, object())._should_defer_prefill(None) is True  # SGLang's own class: no skip_pass
    assert Scheduler(True, None)._should_defer_prefill(None) is True and skipped == ["skip"]  # no delayer at all
    assert [r for r in ("0.5.18", "0.5.19", "0.5.22", "0.5.23") if deferral.needs_guard(r)] == ["0.5.23"]
