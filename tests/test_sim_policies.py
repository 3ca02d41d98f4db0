"""Policies other than SGLang's delayer in the simulator, through their spec's ``SimBinding`` only.

The prefill-decode interval gate is consulted before admission (a scheduler method): a deferred pass
runs no ``get_new_batch_prefill``, so no rank prefills, a chunk in progress included.
"""

from __future__ import annotations

import pytest

from prefill_delayer.sim import Lengths, LongPrompt, Poisson, SimConfig, Variant, run_variant
from prefill_delayer.sim.errors import SimInputError
from prefill_delayer.sim.policy_site import check_sets, policy_config

LONG = LongPrompt(concurrency=3, prompt=Lengths(4096, 4096), output=Lengths(8, 8))


def config(**kw) -> SimConfig:
    base = dict(dp_size=3, max_running_requests=8, max_total_tokens=40_000, chunked_prefill_size=1024,
                max_prefill_tokens=2048, passes=200)
    base.update(kw)
    return SimConfig(**base)


def runs_of(flags) -> list[int]:
    out, n = [], 0
    for f in flags:
        if f:
            n += 1
        elif n:
            out.append(n)
            n = 0
    return out


@pytest.mark.parametrize("interval", [1, 3])
def test_the_gate_defers_interval_passes_after_each_prefill_on_every_rank(interval: int) -> None:
    r = run_variant(config(policy_params=(("prefill_decode_interval", interval),)), Variant.of("pdi-0.5.23"), LONG)
    dp = r.dp
    prefilled = [any(r.prefill[k * dp : (k + 1) * dp]) for k in range(r.passes)]
    held = [not any(r.allowed[k * dp : (k + 1) * dp]) for k in range(r.passes)]
    assert sum(prefilled) > 10
    # The ranks agree every pass (the gate gathers is_extend_in_batch), and a deferred pass prefills nothing.
    for k in range(r.passes):
        assert len(set(r.allowed[k * dp : (k + 1) * dp])) == 1, f"pass {k}: ranks disagree"
        assert not (held[k] and prefilled[k]), f"pass {k}: a deferred pass prefilled"
    # Every prefill arms the interval: exactly `interval` deferred passes follow it while work remains.
    runs = runs_of(held)
    assert runs and set(runs[:-1]) == {interval}, runs
    assert {r.reason(c) for c in r.decision} >= {"decode_interval", "no_interval"}


def test_a_gate_with_interval_0_is_the_run_without_a_policy() -> None:
    gate = run_variant(config(), Variant.of("pdi-0.5.23"), LONG)
    off = run_variant(config(), Variant.of("off"), LONG)
    assert gate.prefill.tobytes() == off.prefill.tobytes()
    assert all(gate.allowed)


def test_min_bs_above_every_running_batch_never_defers() -> None:
    sets = (("prefill_decode_interval", 4), ("prefill_decode_interval_min_bs", 100))
    r = run_variant(config(policy_params=sets), Variant.of("pdi-0.5.23"), Poisson(rate=3.0, prompt=Lengths(300, 900), output=Lengths(5, 30)))
    assert all(r.allowed) and "small_batch" in {r.reason(c) for c in r.decision}


def test_the_sites_negotiate_once_per_pass_on_every_rank() -> None:
    r = run_variant(config(policy_params=(("prefill_decode_interval", 2),)), Variant.of("pdi-0.5.23"), LONG)
    assert r.negotiations == [r.passes] * r.dp


def test_a_policy_the_simulator_cannot_feed_is_refused_naming_its_inputs(monkeypatch) -> None:
    # Every policy of the registry has a binding; one without (patched away) is refused by name.
    from prefill_delayer.spec.registry import policy_of

    monkeypatch.setattr(policy_of("vllm-0.33.0"), "sim", None)
    with pytest.raises(SimInputError, match=r"vllm-0.33.0.*cannot run yet.*has_decode"):
        run_variant(config(), Variant.of("vllm-0.33.0"), LONG)


def test_set_names_a_parameter_of_some_simulated_policy() -> None:
    check_sets(["pdi-0.5.23", "seed"], (("prefill_decode_interval", 2), ("max_delay_passes", 5)))
    with pytest.raises(SimInputError, match="--set interval: no simulated policy has a parameter of that name"):
        check_sets(["pdi-0.5.23"], (("interval", 2),))
    with pytest.raises(SimInputError, match="pdi-0.5.23"):
        policy_config("pdi-0.5.23", 3, {}, (("prefill_decode_interval", -1),))


def test_simulate_runs_the_gate_from_the_command_line(capsys) -> None:
    from prefill_delayer.cli import main

    argv = ["simulate", "--workload", "long-prompt", "--concurrency", "3", "--prompt-tokens", "4096",
            "--output-tokens", "8", "--dp-size", "3", "--chunked-prefill-size", "1024", "--passes", "100",
            "--profile", "pdi-0.5.23", "--set", "prefill_decode_interval=2", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| pdi-0.5.23 |" in out and "decode_interval" in out


def test_a_profile_without_a_binding_is_refused_in_one_line(capsys, monkeypatch) -> None:
    from prefill_delayer.cli import main
    from prefill_delayer.spec.registry import policy_of

    monkeypatch.setattr(policy_of("vllm-0.33.0"), "sim", None)
    argv = ["simulate", "--workload", "long-prompt", "--concurrency", "3", "--prompt-tokens", "4096",
            "--output-tokens", "8", "--dp-size", "3", "--passes", "50", "--profile", "vllm-0.33.0", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot run yet" in err
