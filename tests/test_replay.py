"""Counterexample traces are real: the runtime reproduces them; the hardened profile does not."""

from __future__ import annotations

import copy
import json

import pytest

pytest.importorskip("z3")

from prefill_delayer.proofs.cli import main as cli  # noqa: E402
from prefill_delayer.proofs.prove import run_catalogue  # noqa: E402
from prefill_delayer.proofs.replay import replay, run_trace  # noqa: E402
from prefill_delayer.proofs.violations import find_violation  # noqa: E402

pytestmark = pytest.mark.proofs


@pytest.fixture(scope="module")
def traces():
    results = run_catalogue(profiles=("seed",), properties=["bounded-delay", "agreement"])
    return {r.property: r.trace for r in results}


@pytest.mark.parametrize("prop", ["bounded-delay", "agreement"])
def test_runtime_reproduces_seed_counterexample(traces, prop):
    ok, lines = replay(traces[prop])
    assert ok, "\n".join(lines)
    assert lines[-1].startswith("REPRODUCED")


@pytest.mark.parametrize("prop", ["bounded-delay", "agreement"])
def test_hardened_runtime_does_not_violate_on_the_same_inputs(traces, prop):
    decisions = run_trace(traces[prop], profile="hardened")
    assert find_violation(prop, traces[prop]["config"], decisions) is None
    # Every hardened rank decided the same at every pass.
    assert all(len({(d["allow"], d["reason"], d["wait_forward_passes"]) for d in per_rank}) == 1 for per_rank in decisions)


def test_cli_replay_exit_codes(tmp_path, traces):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(traces["bounded-delay"]))
    assert cli(["replay", str(good)]) == 0

    # The same passes with a looser cap no longer violate the bound: exit 1.
    loose = copy.deepcopy(traces["bounded-delay"])
    loose["config"]["max_delay_passes"] = 50
    stale = tmp_path / "loose.json"
    stale.write_text(json.dumps(loose))
    assert cli(["replay", str(stale)]) == 1

    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"property": "agreement"}))
    assert cli(["replay", str(broken)]) == 2
