"""The aligned policy: hardened's delayer with the no-decode hold, pass by pass, in the proofs and in the simulator."""

from __future__ import annotations

from typing import Any

import pytest

from prefill_delayer.spec.ops import PY
from prefill_delayer.spec.policies import aligned
from prefill_delayer.spec.policies.aligned import guards as aligned_guards
from prefill_delayer.spec.registry import policy_of
from prefill_delayer.spec.table import holds

HOLD = aligned_guards.NO_DECODE_HOLD


def _config(profile: str, **kw: Any) -> Any:
    return policy_of(profile).config_cls(profile=profile, dp_size=2, enable_dp_attention=True, **kw)


def _run(profile: str, passes: list[tuple[list[Any], list[Any]]], **kw: Any) -> list[tuple[bool, str]]:
    """Two ranks' passes through the spec's own table: each pass is both ranks' inputs; (allow, reason) of rank 0."""
    pol = policy_of(profile)
    c = _config(profile, **kw)
    table = pol.build_table(profile)
    states = [pol.init, pol.init]
    out = []
    for now, inputs in enumerate(passes):
        ins = [pol.input_cls(*x[:len(pol.inputs)]) for x in inputs]  # hardened reads no chunk: its six inputs
        locals_ = [pol.local_for(PY, st, float(now), inp) for st, inp in zip(states, ins)]
        rows = [pol.local_row(PY, c, inp, loc) for inp, loc in zip(ins, locals_)]
        v = pol.gathered_view(PY, c, rows)
        decided = []
        for st, loc in zip(states, locals_):
            fired = [t for t in table.by_source[st.control] if holds(t, PY, c, v, loc)]
            assert len(fired) == 1, fired
            d = pol.decide(PY, c, fired[0], v, loc)
            nxt = d.next_state
            decided.append((d, nxt._replace(control=table.finalized(nxt.control))))
        states = [n for _, n in decided]
        out.append((decided[0][0].output_allow, decided[0][0].output_reason))
    return out


# rank 0 has work (no decode), rank 1 has none: the #35241 loop's mixed pass
NO_DECODE_MIXED = ([True, 0.5, 0, 1, 64, 1], [False, 0.5, 0, 0, 64, 0])
DECODE_MIXED = ([True, 0.5, 0, 1, 64, 1], [False, 0.5, 3, 0, 64, 0])


def test_the_table_is_hardeneds_with_the_delays_guarded_the_must_fire_the_quorum_and_the_long_chunk_allow() -> None:
    mine = {t.name: t for t in aligned.build_table("aligned")}
    theirs = {t.name: t for t in policy_of("hardened").build_table("hardened")}
    assert set(mine) - set(theirs) == {"idle_mixed_fire", "delaying_mixed_fire", "idle_all_chunk", "delaying_all_chunk",
                                       "idle_mixed_quorum", "delaying_mixed_quorum"}
    for name, t in theirs.items():
        extra = ("wait_hidden", "not quorum") if name.endswith(("mixed_delay", "mixed_timeout")) else ()
        extra += ("not long_chunk",) if name.endswith(("all_delay", "all_timeout")) else ()
        assert tuple(lit.text() for lit in mine[name].lits) == tuple(lit.text() for lit in t.lits) + extra
    assert mine["idle_mixed_fire"].reason == "no_decode" and mine["idle_mixed_fire"].allows
    assert tuple(lit.text() for lit in mine["idle_mixed_fire"].lits)[-1] == "not quorum"
    q = mine["delaying_mixed_quorum"]
    assert q.reason == "quorum" and q.allows and q.effects == ("clear",)
    assert tuple(lit.text() for lit in q.lits) == ("status_mixed", "not exists_force", "quorum")
    chunk = mine["delaying_all_chunk"]
    assert chunk.reason == "long_chunk" and chunk.allows and chunk.effects == ("clear", "consume_skip")
    assert tuple(lit.text() for lit in chunk.lits) == ("status_all", "not exists_force", "delay_wanted", "long_chunk")


def test_a_mixed_pass_with_no_decode_holds_at_most_the_hold_then_fires() -> None:
    got = _run("aligned", [NO_DECODE_MIXED] * (HOLD + 3), max_delay_passes=30)
    assert got[:HOLD] == [(False, "delay")] * HOLD
    assert got[HOLD] == (True, "no_decode")
    # hardened holds the same passes up to its cap
    theirs = _run("hardened", [NO_DECODE_MIXED] * (HOLD + 3), max_delay_passes=30)
    assert theirs == [(False, "delay")] * (HOLD + 3)


def test_with_decode_running_it_is_hardened_pass_for_pass() -> None:
    passes = [DECODE_MIXED] * 12 + [NO_DECODE_MIXED] * 2 + [DECODE_MIXED] * 20
    for kw in ({"max_delay_passes": 30}, {"max_delay_passes": 5}, {"max_delay_passes": 30, "token_usage_low_watermark": 0.9}):
        assert _run("aligned", [DECODE_MIXED] * 40, **kw) == _run("hardened", [DECODE_MIXED] * 40, **kw)
    # a short cap fires before the hold: hardened's wait_timeout
    assert _run("aligned", passes, max_delay_passes=5) == _run("hardened", passes, max_delay_passes=5)


def test_a_broken_hold_guard_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("z3")
    from prefill_delayer.proofs.prove import run_catalogue

    good = run_catalogue(["aligned"], properties=["no-decode-hold", "refinement", "bounded-delay"])
    assert all(r.ok and r.status == "proved" for r in good), [(r.property, r.status) for r in good]
    # the hold counted one pass too long, or decode ignored: the property or the reference catches it
    for broken in (lambda o, c, v, s: o.Or(v.running_batch > 0, s.delayed_count < HOLD + 1),
                   lambda o, c, v, s: o.Or(v.running_batch >= 0, s.delayed_count < HOLD)):
        monkeypatch.setattr(aligned_guards, "wait_hidden", broken)
        results = run_catalogue(["aligned"], properties=["no-decode-hold", "refinement"])
        bad = {r.property: r.status for r in results}
        assert bad == {"no-decode-hold": "refuted", "refinement": "refuted"}, bad
        # the counterexample's watermark is SGLang's option alone: aligned's own low-load one is off in its config
        trace = next(r.trace for r in results if r.property == "no-decode-hold")
        assert trace is not None and trace["config"]["low_load_watermark"] is None, trace and trace["config"]
        replayed = aligned.AlignedConfig(**trace["config"])
        assert replayed.watermark_on == (trace["config"]["token_usage_low_watermark"] is not None)
        monkeypatch.undo()


def test_every_release_refutes_the_hold_with_its_shortest_run_and_replay_reproduces_it() -> None:
    """no-decode-hold, in SGLang's delayer's catalogue: from fresh delayers the shortest counterexample is one pass
    longer than the hold (no shorter run can show it), and the spec's runtime replays it to the same violation."""
    pytest.importorskip("z3")
    from prefill_delayer.proofs.prove import run_catalogue
    from prefill_delayer.traces.replay import replay

    results = run_catalogue(["sglang-0.5.17", "sglang-0.5.22", "hardened", "aligned"], properties=["no-decode-hold"])
    assert {r.profile: r.status for r in results} == {"sglang-0.5.17": "refuted", "sglang-0.5.22": "refuted",
                                                     "hardened": "refuted", "aligned": "proved"}
    for r in results:
        if r.profile == "aligned":
            assert r.trace is None
            continue
        assert r.ok and len(r.trace["passes"]) == HOLD + 1, (r.profile, r.note)
        assert r.trace["config"]["max_delay_passes"] > HOLD + 1  # a cap any lower ends the wait first
        reproduced, lines = replay(r.trace)
        assert reproduced, lines[-1]
        assert f"delays {HOLD + 1} consecutive mixed passes with no decode anywhere" in lines[-1], lines[-1]


@pytest.mark.parametrize("profile, held", [("sglang-0.5.17", True), ("aligned", False)])
def test_the_35241_loop_in_the_simulator_breaks_the_hold_for_the_release_only(
        profile: str, held: bool, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The release's counterexample as the simulator's #35241 loop: its ranks write the runtime's decision logs
    (``PREFILL_DELAYER_DECISION_LOG``), and check-log finds the hold broken, a known defect of the release; the
    same run under aligned is clean."""
    from prefill_delayer.cli import main
    from prefill_delayer.conformance import check_logs

    monkeypatch.setenv("PREFILL_DELAYER_DECISION_LOG", str(tmp_path))
    assert main(["simulate", "--scenario", "35241", "--drift", "3,3,0,2,3,3,2,3", "--profile", profile,
                 "--duration", "200", "--warmup", "0"]) == 0
    report, _, _ = check_logs([str(tmp_path)])
    found = [f for f in report.findings if f.property == "no-decode-hold"]
    if held:
        assert found and all(f.known_defect for f in found), found
        assert all(f"more than {HOLD}" in f.message for f in found)
        assert {r for f in found for r in f.ranks} == set(range(8))  # every rank of the group waits: the loop's pass
    else:
        assert found == [] and report.findings == [], report.findings


def test_the_plugin_path_builds_it_with_sglangs_constructor_arguments() -> None:
    from types import SimpleNamespace

    from prefill_delayer.runtime.delayer import host_config

    args = SimpleNamespace(prefill_delayer_queue_min_ratio=None, prefill_delayer_max_delay_ms=None, prefill_max_requests=None,
                           enable_dp_attention=True, chunked_prefill_size=4096)
    c = host_config("aligned", args, 2, 1, 1, 30, None)
    assert c.profile == "aligned" and c.policy.host is not None and c.max_delay_passes == 30
    # the long-chunk threshold is SGLang's chunk size; its "no chunking" (-1) turns the rule off
    assert c.long_chunk_tokens == 4096 and c.long_chunk_on
    off = host_config("aligned", SimpleNamespace(**{**vars(args), "chunked_prefill_size": -1}), 2, 1, 1, 30, None)
    assert off.long_chunk_tokens is None and not off.long_chunk_on
    # the busy rule reads beside aligned's own low-load watermark, which SGLang's option, when set, replaces
    assert c.busy_watermark == aligned.busy.BUSY_WATERMARK and c.busy_on
    sglangs = host_config("aligned", args, 2, 1, 1, 30, 0.3)
    assert sglangs.watermark == 0.3 and not sglangs.busy_on


@pytest.fixture(scope="module")
def loop_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    import json

    from prefill_delayer.cli import main

    runs: dict[str, dict[str, Any]] = {}
    loop = ["simulate", "--scenario", "35241", "--health-dispatch", "shared", "--no-progress"]
    for tag, extra in (("", ["--profile", "hardened", "--profile", "aligned", "--profile", "off"]),
                       ("must-fire", ["--profile", "aligned", "--set", "low_load_watermark=none"])):
        path = tmp_path_factory.mktemp("sim") / "loop.json"
        assert main([*loop, *extra, "--json", str(path)]) == 0
        runs.update({r["name"] + (f"/{tag}" if tag else ""): r["summary"] for r in json.loads(path.read_text())["results"]})
    return runs


def test_in_the_35241_loop_it_serves_more_and_sooner_than_hardened(loop_runs: dict[str, dict[str, Any]]) -> None:
    """The must-fire alone (the low-load watermark off): it beats both hardened and off in the loop."""
    mine, hardened, off = loop_runs["aligned/must-fire"], loop_runs["hardened"], loop_runs["off"]
    assert mine["input_tok_s"] > hardened["input_tok_s"] and mine["input_tok_s"] > off["input_tok_s"]
    assert mine["ttft_p99_s"] < 0.95 * hardened["ttft_p99_s"] and mine["ttft_p99_s"] < off["ttft_p99_s"]
    assert mine["decisions"].get("mixed/no_decode", 0) > 0 and mine["mixed_share"] < hardened["mixed_share"]


def test_in_the_35241_loop_the_low_load_watermark_allows_as_off_does(loop_runs: dict[str, dict[str, Any]]) -> None:
    """By default the loop's KV usage (a few %) is below low_load_watermark: every pass that can prefill is a
    force-allow, so aligned serves as off does, sooner than hardened."""
    mine, hardened, off = loop_runs["aligned"], loop_runs["hardened"], loop_runs["off"]
    assert mine["input_tok_s"] == off["input_tok_s"] and mine["ttft_p99_s"] == off["ttft_p99_s"]
    assert mine["ttft_p99_s"] < hardened["ttft_p99_s"]
    assert mine["decisions"].get("mixed/delay", 0) == 0 and mine["decisions"].get("mixed/token_watermark", 0) > 0


def test_low_load_watermark_is_the_force_allow_watermark_unless_sglangs_is_set() -> None:
    from prefill_delayer.spec.errors import ConfigError
    from prefill_delayer.spec.policies.aligned import LOW_LOAD_WATERMARK

    c = _config("aligned")
    assert c.low_load_watermark == LOW_LOAD_WATERMARK and c.watermark_on and c.watermark == LOW_LOAD_WATERMARK
    c = _config("aligned", token_usage_low_watermark=0.5)
    assert c.watermark_on and c.watermark == 0.5
    c = _config("aligned", low_load_watermark=None)
    assert not c.watermark_on and c.watermark == 0.0
    with pytest.raises(ConfigError):
        _config("aligned", low_load_watermark=1.5)
    assert not _config("hardened").watermark_on


# ----- the busy rule: aligned's own watermark forces nothing while some rank is busy --------------------------------

# Both ranks can prefill, nothing runs, and the slot trigger holds (max_running_requests 0): rank 0's KV usage is
# below the low-load watermark (0.28), rank 1's is `usage`.
def _low_beside(usage: float) -> tuple[list[Any], list[Any]]:
    return [True, 0.1, 0, 1, 0, 1, 0], [True, usage, 0, 1, 0, 1, 0]


def test_a_low_rank_beside_a_busy_one_forces_nothing_while_the_watermark_is_aligneds_own() -> None:
    kw = {"max_delay_passes": 30}
    skip = [_low_beside(0.6)]  # the first all pass with a trigger uses the one-shot skip
    assert _run("aligned", skip + [_low_beside(0.6)] * 2, **kw) == [(True, "no_wait"), (False, "delay"), (False, "delay")]
    # the other rank below busy_watermark (0.5): the low rank forces, as hardened's watermark does
    assert _run("aligned", [_low_beside(0.49)] * 3, **kw) == [(True, "token_watermark")] * 3
    # the rule off, or SGLang's own watermark set (its semantics, every rank's usage aside): the low rank forces
    assert _run("aligned", [_low_beside(0.6)] * 3, busy_watermark=None, **kw) == [(True, "token_watermark")] * 3
    assert _run("aligned", [_low_beside(0.6)] * 3, token_usage_low_watermark=0.28, **kw) == [(True, "token_watermark")] * 3
    assert _run("aligned", [_low_beside(0.6)] * 3, busy_watermark=0.7, **kw) == [(True, "token_watermark")] * 3
    # a busy rank that cannot prefill holds the force as well: it is the group's load, not its work
    idle_busy = ([True, 0.1, 0, 1, 0, 1, 0], [False, 0.9, 0, 0, 0, 0, 0])
    assert _run("aligned", [idle_busy] * 2, **kw)[0] != (True, "token_watermark")
    assert _run("aligned", [idle_busy] * 2, busy_watermark=None, **kw) == [(True, "token_watermark")] * 2


def test_busy_watermark_is_checked_against_the_low_load_watermark() -> None:
    from prefill_delayer.spec.errors import ConfigError
    from prefill_delayer.spec.policies.aligned import busy

    c = _config("aligned")
    assert c.busy_watermark == busy.BUSY_WATERMARK and c.busy_on and c.busy_min == busy.BUSY_WATERMARK
    assert not _config("aligned", token_usage_low_watermark=0.28).busy_on  # SGLang's watermark: its semantics
    assert not _config("aligned", low_load_watermark=None).busy_on
    assert not _config("aligned", busy_watermark=None).busy_on
    for bad in ({"busy_watermark": 0.28}, {"busy_watermark": 0.2}, {"low_load_watermark": 0.6}):
        with pytest.raises(ConfigError, match="must be above low_load_watermark"):
            _config("aligned", **bad)
    for bad_value in (0.0, 1.5, float("nan"), "half"):
        with pytest.raises(ConfigError, match="busy_watermark"):
            _config("aligned", busy_watermark=bad_value)
    assert _config("aligned", low_load_watermark=0.6, busy_watermark=None).low_load_watermark == 0.6


def test_a_broken_busy_guard_or_row_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference (refinement) catches a force guard that ignores the busy rank; aggregate-view catches a row whose
    bit ignores whether the rule is on (its view would leave the domain the guards are proved over)."""
    pytest.importorskip("z3")
    from prefill_delayer.proofs.prove import run_catalogue
    from prefill_delayer.spec.policies.aligned import chunk, quorum
    from prefill_delayer.spec.policies.sglang_delayer import guards as delayer_guards

    monkeypatch.setattr(aligned_guards, "exists_force", delayer_guards.exists_force)
    bad = {r.property: r.status for r in run_catalogue(["aligned"], properties=["refinement"])}
    assert bad == {"refinement": "refuted"}, bad
    monkeypatch.undo()
    pol = policy_of("aligned")
    monkeypatch.setattr(pol, "local_row", lambda o, c, inp, s: [*chunk.local_row(o, c, inp, s), o.b2i(
        o.Not(inp.token_usage < o.num(c.busy_min))), o.b2i(quorum.work_bit(o, c, inp))])
    bad = {r.property: r.status for r in run_catalogue(["aligned"], properties=["aggregate-view"])}
    assert bad == {"aggregate-view": "refuted"}, bad


def _measure(suite: str, workload: str, seed: int, *sets: str) -> Any:
    """aligned's row on one workload of a suite at the suite's load, with ``--set`` values (simulate's own path)."""
    import argparse

    from prefill_delayer.sim import suite_run
    from prefill_delayer.sim.options import add_arguments, settings
    from prefill_delayer.sim.suite import SUITES

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["--suite", suite, "--seed", str(seed)] + [x for kv in sets for x in ("--set", kv)]
    s, given = settings(parser.parse_args(argv))
    spec = next(w for w in SUITES[suite] if w.name == workload)
    case, variants = suite_run.plan(spec, ["aligned"], s, given)
    return suite_run.measure(case, variants[0])


def test_on_the_long_short_mix_the_busy_rule_holds_what_the_watermark_gave_away() -> None:
    """The suite's long-short mix at seed 1: with the rule off the low-load watermark forces beside half-full ranks
    and the TTFT p99 is 11.0 s; with it, 7.0 s. Below the watermark's load (DP=16) nothing moves."""

    def p99(workload: str, seed: int, *sets: str) -> float:
        return _measure("default", workload, seed, *sets).ttft_p99_s  # type: ignore[no-any-return]

    assert p99("long-short", 1) < 0.7 * p99("long-short", 1, "busy_watermark=none")
    assert p99("dp16", 0) == p99("dp16", 0, "busy_watermark=none")


# ----- the long-chunk allow: the one input read from the scheduler beyond SGLang's call -----------------------------

# Every rank can prefill and the slot trigger holds (max_running_requests 0 - running batch 0 < max_prefill_bs 1), so
# hardened delays an all pass once the one-shot skip is used; rank 1 is mid-way through a chunk of `left` tokens.
def _all_pass(left: int) -> tuple[list[Any], list[Any]]:
    return [True, 0.5, 0, 1, 0, 1, 0], [True, 0.5, 0, 1, 0, 1, left]


def test_an_all_pass_beside_a_long_chunk_allows_at_once_and_a_short_chunk_changes_nothing() -> None:
    kw = {"max_delay_passes": 30, "low_load_watermark": None, "long_chunk_tokens": 1000}
    skip = [_all_pass(0)]  # the first all pass with a trigger uses the one-shot skip
    assert _run("aligned", skip + [_all_pass(0)] * 2 + [_all_pass(1000)], **kw) == [
        (True, "no_wait"), (False, "delay"), (False, "delay"), (True, "long_chunk")]
    short = skip + [_all_pass(999)] * 4
    assert _run("aligned", short, **kw) == _run("hardened", short, max_delay_passes=30) == [(True, "no_wait")] + [
        (False, "delay")] * 4
    # the rule off (SGLang's --chunked-prefill-size -1): hardened pass for pass, whatever the chunk
    off = skip + [_all_pass(10**6)] * 4
    assert _run("aligned", off, **{**kw, "long_chunk_tokens": -1}) == _run("hardened", off, max_delay_passes=30)
    # the chunk counts only on a rank that can prefill: an idle rank's reading is no long chunk
    idle = [[True, 0.5, 0, 1, 0, 1, 0], [False, 0.5, 0, 0, 0, 0, 5000]]
    assert _run("aligned", [idle] * 3, **kw) == _run("hardened", [idle] * 3, max_delay_passes=30)


def test_a_broken_long_chunk_guard_or_row_is_refuted(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference (refinement) catches a guard that counts one chunk too few; aggregate-view catches a row whose bit
    ignores whether the rank can prefill (its view would leave the domain the guards are proved over)."""
    pytest.importorskip("z3")
    from prefill_delayer.proofs.prove import run_catalogue
    from prefill_delayer.spec.policies.aligned import busy, chunk, quorum

    good = run_catalogue(["aligned"], properties=["refinement", "aggregate-view"])
    assert {r.property: r.status for r in good} == {"refinement": "proved", "aggregate-view": "proved"}
    monkeypatch.setattr(aligned_guards, "long_chunk", lambda o, c, v, s: v.num_long_chunk > 1)
    bad = {r.property: r.status for r in run_catalogue(["aligned"], properties=["refinement"])}
    assert bad == {"refinement": "refuted"}, bad
    monkeypatch.undo()
    pol = policy_of("aligned")
    monkeypatch.setattr(pol, "local_row", lambda o, c, inp, s: [*chunk.base_row.local_row(o, c, inp, s), o.b2i(
        o.And(c.long_chunk_on, inp.chunk_tokens_left >= c.long_chunk_min)), o.b2i(busy.busy_bit(o, c, inp)),
        o.b2i(quorum.work_bit(o, c, inp))])
    bad = {r.property: r.status for r in run_catalogue(["aligned"], properties=["aggregate-view"])}
    assert bad == {"aggregate-view": "refuted"}, bad


def test_the_executor_takes_the_chunk_the_plugins_hook_reads_and_refuses_a_late_or_unknown_reading() -> None:
    """The hook on PrefillAdder.add_chunked_req hands the chunk's tokens left to the pass's executor, which negotiates
    with it; a reading after the pass negotiated, or of an input the policy does not read, raises (never dropped)."""
    from types import SimpleNamespace

    from prefill_delayer.integrations.sglang.readings import READINGS
    from prefill_delayer.runtime.delayer import PrefillDelayer, PrefillDelayerSinglePassExecutor
    from prefill_delayer.spec.errors import PassInputError

    args = SimpleNamespace(prefill_delayer_queue_min_ratio=None, prefill_delayer_max_delay_ms=None, prefill_max_requests=None,
                           enable_dp_attention=True, chunked_prefill_size=256, disable_overlap_schedule=False)
    delayer = PrefillDelayer(1, 1, None, args, 30, None, profile="aligned", gather=lambda row: [row], decision_log=False)
    hook = READINGS["chunk_tokens_left"].hook_for("0.5.23")

    def one_pass(fill: int, prefix: int) -> Any:
        executor = PrefillDelayerSinglePassExecutor(delayer, token_usage=0.5)
        if fill:  # the scheduler's chunked request: its whole prompt, and what is already in the KV cache
            hook(SimpleNamespace(prefill_delayer_single_pass=executor),
                 SimpleNamespace(full_untruncated_fill_ids=[5] * fill, prefix_len=prefix))
        executor.negotiate_should_allow_prefill(True, running_batch=0, max_prefill_bs=1, max_running_requests=0,
                                                waiting_queue_len=1)
        result = executor._result
        executor.finalize(actual_prefill=result.output_allow)
        return result.output_allow, result.output_reason

    # 256 tokens left is a whole chunk (chunked_prefill_size), 255 is not
    assert [one_pass(0, 0), one_pass(0, 0), one_pass(1000, 744), one_pass(1000, 745)] == [
        (True, "no_wait"), (False, "delay"), (True, "long_chunk"), (False, "delay")]
    executor = PrefillDelayerSinglePassExecutor(delayer, token_usage=0.5)
    with pytest.raises(ValueError, match="'nope' is not an input the policy reads"):
        executor.read_from_scheduler("nope", 1)
    executor.read_from_scheduler("chunk_tokens_left", -3)
    with pytest.raises(PassInputError, match="chunk_tokens_left"):
        executor.negotiate_should_allow_prefill(True)
    executor = PrefillDelayerSinglePassExecutor(delayer, token_usage=0.5)
    executor.negotiate_should_allow_prefill(True)
    with pytest.raises(RuntimeError, match="after this pass negotiated"):
        executor.read_from_scheduler("chunk_tokens_left", 300)
    hardened = PrefillDelayer(1, 1, None, args, 30, None, profile="hardened", gather=lambda row: [row], decision_log=False)
    with pytest.raises(ValueError, match=r"it reads: none"):
        PrefillDelayerSinglePassExecutor(hardened, token_usage=0.5).read_from_scheduler("chunk_tokens_left", 300)


def test_the_plugins_executor_negotiates_with_aligneds_own_decayed_max_prefill_bs() -> None:
    """SGLang 0.5.18+'s executor (the shell's): for aligned it decays its own mark when built (the top of
    get_new_batch_prefill), raises it to what finalize(actual_prefill_bs=) is handed, and the pass negotiates with it
    whatever max_prefill_bs the scheduler's call passes; hardened's passes negotiate with the call's."""
    from types import SimpleNamespace

    from prefill_delayer.integrations.sglang.releases import PrefillDelayer_0_5_14
    from prefill_delayer.integrations.sglang.shell import PrefillDelayerSinglePassExecutor

    args = SimpleNamespace(enable_dp_attention=True, disable_overlap_schedule=True, chunked_prefill_size=4096,
                           prefill_delayer_queue_min_ratio=None, prefill_delayer_max_delay_ms=None, prefill_max_requests=None)
    negotiated: dict[str, list[int]] = {}
    for profile in ("aligned", "hardened"):
        index = policy_of(profile).row_names.index("max_prefill_bs")
        seen = negotiated[profile] = []

        def gather(row: Any, seen: list[int] = seen, index: int = index) -> list[Any]:
            seen.append(row[index])
            return [row]

        delayer = PrefillDelayer_0_5_14(1, 1, None, args, 30, None, profile=profile, gather=gather)
        # (the scheduler's max_prefill_bs at the call, the batch the pass admits) per pass
        for scheduler_bs, admitted in ((9, 5), (9, 0), (9, 0), (9, 2), (9, 0)):
            executor = PrefillDelayerSinglePassExecutor(delayer, token_usage=0.5)
            executor.negotiate_should_allow_prefill(True, running_batch=0, max_prefill_bs=scheduler_bs,
                                                    max_running_requests=8, waiting_queue_len=5)
            assert executor.finalize(actual_prefill_bs=admitted) == (admitted or 5)  # the scheduler's window's, as before
    # the mark: 0; 5 x 0.998 = 4.99; 4.98; 4.97; then max(4.97, 2) decayed, 4.96
    assert negotiated["aligned"] == [0, 4, 4, 4, 4]
    assert negotiated["hardened"] == [9] * 5


def test_on_every_release_the_plugin_runs_it_on_it_negotiates_with_the_decaying_tracker() -> None:
    """From 0.5.18 on the executor keeps the mark (finalize is handed actual_prefill_bs); 0.5.17's executor is not,
    and there the scheduler's own argument is the decaying mark already; 0.5.14-0.5.16 refuse aligned (its chunk)."""
    from prefill_delayer.integrations.sglang.readings import readings_for
    from prefill_delayer.integrations.sglang.releases import API_CLASSES, API_OF_RELEASE
    from prefill_delayer.integrations.sglang.shell import PrefillDelayerSinglePassExecutor
    from prefill_delayer.spec.trackers import TRACKER_OF_RELEASE

    own = policy_of("aligned").host.own_max_prefill_bs
    reads = tuple(f.name for f in policy_of("aligned").host.reads)
    runs = []
    for release in API_OF_RELEASE:
        try:
            readings_for(reads, release)
        except ValueError:
            continue
        runs.append(release)
        keeps_it = issubclass(API_CLASSES[API_OF_RELEASE[release]][1], PrefillDelayerSinglePassExecutor)
        assert keeps_it or TRACKER_OF_RELEASE[release] == own, release
        assert keeps_it == (release != "0.5.17"), release
    assert runs == [f"0.5.{n}" for n in range(17, 24)]


def test_the_plugin_says_where_aligneds_max_prefill_bs_comes_from_and_refuses_a_release_with_neither() -> None:
    from prefill_delayer.integrations.sglang.plugin import PluginError, _max_prefill_bs

    assert _max_prefill_bs("aligned", "0.5.23") == _max_prefill_bs("aligned", "0.5.18") == (
        "max_prefill_bs: its own decay mark, from the executor's finalize(actual_prefill_bs=), in place of the scheduler's")
    assert _max_prefill_bs("aligned", "0.5.17") == "max_prefill_bs: the scheduler's, decay in 0.5.17"
    assert _max_prefill_bs("hardened", "0.5.23") == ""
    with pytest.raises(PluginError, match="SGLang 0.5.16's scheduler tracks lifetime"):
        _max_prefill_bs("aligned", "0.5.16")


# quorum_percent (opt-in): rank 0 can prefill while its decode runs; rank 1 reaches no call site, with nothing queued
# or with requests queued behind a full running batch (its finalize row: no counts, only the plugin's reading).
READY = [True, 0.5, 3, 1, 64, 1, 0, 0]
NOTHING_QUEUED = [False, 0.5, 0, 0, 0, 0, 0, 0]
FULL = [False, 0.5, 0, 0, 0, 0, 0, 4]


def test_the_quorum_allows_a_mixed_pass_the_rest_have_no_work_for_and_holds_for_a_full_rank() -> None:
    """With quorum_percent set, a mixed pass on which that share of the counted ranks have work, but not all, allows at
    once (quorum): the hold would wait for a request to reach the idle rank. A rank whose requests queue behind a full
    batch has work: the hold waits for a slot, as hardened's, and the ranks prefill together once it frees."""
    assert _run("aligned", [(READY, NOTHING_QUEUED)] * 3, quorum_percent=50) == [(True, "quorum")] * 3
    assert _run("aligned", [(READY, FULL)] * 3, quorum_percent=50) == [(False, "delay")] * 3
    assert _run("aligned", [(READY, NOTHING_QUEUED)] * 3, quorum_percent=51) == [(False, "delay")] * 3
    assert _run("aligned", [(READY, NOTHING_QUEUED)] * 3) == [(False, "delay")] * 3  # off by default
    # with nothing decoding the must-fire is next in line; the quorum comes first
    no_decode = [True, 0.5, 0, 1, 64, 1, 0, 0]
    assert _run("aligned", [(no_decode, NOTHING_QUEUED)], quorum_percent=50) == [(True, "quorum")]
    assert _config("aligned", quorum_percent=75).quorum_on and not _config("aligned").quorum_on


@pytest.mark.parametrize("bad", [0, 101, 75.0, "75", True])
def test_quorum_percent_is_an_integer_percentage(bad: Any) -> None:
    from prefill_delayer.spec.errors import ConfigError

    with pytest.raises(ConfigError, match="quorum_percent"):
        _config("aligned", quorum_percent=bad)


def test_in_the_simulator_the_quorum_cuts_the_holds_below_saturation_and_keeps_them_at_it() -> None:
    """Chat with long outputs at 80% load (held out, seed 0): the holds on mixed passes most ranks are ready for wait
    for arrivals, and the quorum at 75 takes TTFT p99 from 1.92 s to 1.02 s; at saturation (Poisson at 100%) the ranks
    that cannot prefill have requests queued, the quorum seldom fires, and the group serves within 0.5% as much."""
    def measure(suite: str, workload: str, *sets: str) -> Any:
        return _measure(suite, workload, 0, *sets)

    plain, quorum = measure("held-out", "chat-long-out"), measure("held-out", "chat-long-out", "quorum_percent=75")
    assert quorum.ttft_p99_s < 0.6 * plain.ttft_p99_s, (plain.ttft_p99_s, quorum.ttft_p99_s)
    plain, quorum = measure("default", "poisson-100"), measure("default", "poisson-100", "quorum_percent=75")
    assert quorum.input_tok_s > 0.995 * plain.input_tok_s, (plain.input_tok_s, quorum.input_tok_s)


def test_the_delayer_takes_the_policys_own_parameters_and_refuses_what_sglang_sets() -> None:
    """``params`` sets a parameter SGLang keeps nowhere (aligned's quorum_percent); one SGLang's settings give
    (long_chunk_tokens is --chunked-prefill-size, max_delay_passes the constructor's), or no parameter of the policy,
    is refused with the ones it may set."""
    from types import SimpleNamespace

    from prefill_delayer.runtime.delayer import PrefillDelayer
    from prefill_delayer.spec.errors import ConfigError

    args = SimpleNamespace(prefill_delayer_queue_min_ratio=None, prefill_delayer_max_delay_ms=None, prefill_max_requests=None,
                           enable_dp_attention=True, chunked_prefill_size=256, disable_overlap_schedule=False)

    def delayer(**params: Any) -> Any:
        return PrefillDelayer(1, 1, None, args, 30, None, profile="aligned", gather=lambda row: [row],
                              decision_log=False, params=params)

    assert delayer(quorum_percent=75).config.quorum_percent == 75
    assert delayer().config.quorum_percent is None
    assert delayer(chunk_hold_tokens=4096).config.chunk_hold_tokens == 4096
    assert delayer().config.chunk_hold_tokens is None
    for bad in ({"long_chunk_tokens": 100}, {"max_delay_passes": 4}, {"nope": 1}):
        with pytest.raises(ConfigError,
                           match="those are: busy_watermark, chunk_hold_tokens, low_load_watermark, quorum_percent"):
            delayer(**bad)
    with pytest.raises(ConfigError, match="quorum_percent"):
        delayer(quorum_percent=0)
    for bad_hold in (-1, 1.5, "4096"):
        with pytest.raises(ConfigError, match="chunk_hold_tokens"):
            delayer(chunk_hold_tokens=bad_hold)


# ----- the chunk hold (opt-in): a refusal holds the chunk in flight too -------------------------------------------


def test_with_chunk_hold_tokens_a_refused_chunk_waits_while_more_than_that_is_left_and_every_rank_has_work() -> None:
    """In the simulator (4 ranks, 4,096-token chunks, prompts of 500-16,000, 6 a second): without the hold every
    refused chunk prefills anyway, as SGLang's add_chunked_req goes on. With chunk_hold_tokens=2048 a refused chunk
    prefills nothing that pass only when every rank has prefill work (a call site reached, or requests queued); a
    refused chunk that goes on with more than 2,048 tokens left does so beside a rank with none."""
    from prefill_delayer.sim.config import SimConfig, Variant
    from prefill_delayer.sim.engine import run_variant
    from prefill_delayer.sim.trackers import own_tracker
    from prefill_delayer.sim.workload import Lengths, Poisson

    def refused_chunks(*params: tuple[str, Any]) -> list[tuple[Any, bool]]:
        """Each refused chunk's prefill that pass, and whether every rank had work then."""
        config = SimConfig(dp_size=4, max_running_requests=32, max_total_tokens=200_000, chunked_prefill_size=4096,
                           max_prefill_tokens=8192, passes=400, trace=True, policy_params=params)
        run = run_variant(config, Variant.of("aligned", tracker=own_tracker("aligned")),
                          Poisson(rate=6.0, prompt=Lengths(500, 16000), output=Lengths(20, 200)))
        return [(t.prefilled, all(r.negotiated is not None or r.queue > 0 for r in ranks))
                for ranks in run.trace for t in ranks if t.chunk and t.verdict is False]

    plain = refused_chunks()
    assert plain and all(prefilled for prefilled, _ in plain), "a refused chunk goes on whatever the verdict"
    held = refused_chunks(("chunk_hold_tokens", 2048))
    parked = [work for prefilled, work in held if not prefilled]
    beside_idle = [prefilled for prefilled, work in held if prefilled and prefilled[0][1] > 2048]
    assert parked and all(parked), "a chunk is parked only while every rank has work"
    assert beside_idle and not any(work for prefilled, work in held if prefilled and prefilled[0][1] > 2048)
    assert all(len(prefilled) == 1 for prefilled, _ in held if prefilled)  # the chunk alone: nothing else admitted


def test_on_the_long_short_mix_the_chunk_hold_cuts_the_tail_and_moves_no_short_prompt_workload() -> None:
    """The suite's long-short mix at seed 0: chunk_hold_tokens=4096 takes the TTFT p99 from 6.69 s to 5.55 s (ATOM's
    coalescer, which holds chunks too, 7.24 s); bursty arrivals of short prompts leave no chunk with over 4,096 tokens
    left, and do not move."""
    plain, held = _measure("default", "long-short", 0), _measure("default", "long-short", 0, "chunk_hold_tokens=4096")
    assert held.ttft_p99_s < 0.85 * plain.ttft_p99_s, (plain.ttft_p99_s, held.ttft_p99_s)
    assert held.input_tok_s > 0.995 * plain.input_tok_s
    assert _measure("default", "bursty", 0, "chunk_hold_tokens=4096").ttft_p99_s == _measure("default", "bursty", 0).ttft_p99_s
