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
        ins = [pol.input_cls(*x) for x in inputs]
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


def test_the_table_is_hardeneds_with_the_mixed_delays_guarded_and_the_must_fire() -> None:
    mine = {t.name: t for t in aligned.build_table("aligned")}
    theirs = {t.name: t for t in policy_of("hardened").build_table("hardened")}
    assert set(mine) - set(theirs) == {"idle_mixed_fire", "delaying_mixed_fire"}
    for name, t in theirs.items():
        extra = ("wait_hidden",) if name.endswith(("mixed_delay", "mixed_timeout")) else ()
        assert tuple(lit.text() for lit in mine[name].lits) == tuple(lit.text() for lit in t.lits) + extra
    assert mine["idle_mixed_fire"].reason == "no_decode" and mine["idle_mixed_fire"].allows


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
                           enable_dp_attention=True)
    c = host_config("aligned", args, 2, 1, 1, 30, None)
    assert c.profile == "aligned" and c.policy.host is not None and c.max_delay_passes == 30


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
