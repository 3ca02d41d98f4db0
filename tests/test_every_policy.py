"""Every policy of the registry, one generic property test: random runs through the runtime, checked by the catalogue.

Nothing here names a policy. For each profile hypothesis draws a configuration
from the policy's own parameters (values each ``Param.check`` accepts), a
layout, and passes of per-rank inputs from the kinds the policy declares, with
clocks that skew. The ranks run ``PolicyCore`` over the in-process gather (each
pass also fired through the ``transitions`` machine: the suite runs with
``PREFILL_DELAYER_CROSSCHECK=1``), with decision logs. Then:

* every run invariant that ``prove`` proves for the profile, read from its
  monitor, holds on the decisions (``traces.violations``);
* ``check-log`` re-reads the logs and finds no divergence from the spec, and any
  invariant finding is one the catalogue expects of the profile (a known defect);
  an all-reduce policy's logs (the reduced row, no rank's own) it refuses by name.

A new policy is covered the moment it is registered; a kind of input the
strategies below do not know fails here, by name.
"""

from __future__ import annotations

import random
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prefill_delayer.conformance import check_logs
from prefill_delayer.conformance.checks import CONFORMANCE
from prefill_delayer.conformance.logread import LogError
from prefill_delayer.spec.policy import ALL_GATHER
from prefill_delayer.runtime import PolicyCore, run_ranks
from prefill_delayer.spec.config import layout_params
from prefill_delayer.spec.errors import ConfigError
from prefill_delayer.spec.fields import BOOL, COUNT, OPT_SECONDS, SECONDS, USAGE
from prefill_delayer.spec.monitors import Agreement
from prefill_delayer.spec.policy import PROVED
from prefill_delayer.spec.registry import policies
from prefill_delayer.spec.schema import expect_of
from prefill_delayer.traces.violations import decisions_of, find_violation, replayable

PROFILES = [(pol.name, p) for pol in policies() for p in pol.profile_names]
LAYOUT = {p.name for p in layout_params()} | {"profile"}
# Values tried for each parameter: those its check accepts (small ones, so that bounds are reached).
CANDIDATES = (None, 0, 1, 2, 3, 5, 0.0, 0.1, 0.5, 1.0, 2.0, 3.0, 1000.0, 5000.0)
VALUES: dict[str, list[Any]] = {
    BOOL: [False, True],
    COUNT: [0, 0, 1, 2, 3, 4, 8, 16],
    USAGE: [0.0, 0.5, 0.8, 0.9, 1.0],
    SECONDS: [0.0, 1.0, 2.0],
    OPT_SECONDS: [None, 0.0, 1.0],
}
INPUTS = {kind: st.sampled_from(values) for kind, values in VALUES.items()}
STEPS_S = st.sampled_from([0.0, 0.001, 0.5, 1.0, 3.0])


def _policy(name: str) -> Any:
    return next(p for p in policies() if p.name == name)


@st.composite
def configs(draw: Any, policy: Any, profile: str) -> Any:
    values: dict[str, Any] = {"profile": profile}
    for p in policy.params:
        if p.name in LAYOUT:
            continue
        accepted = [v for v in CANDIDATES if p.check(v)] or [p.default]
        values[p.name] = draw(st.sampled_from(accepted))
    values["enable_dp_attention"] = draw(st.booleans())
    values["dp_size"] = draw(st.integers(1, 3))
    values["attn_tp_size"] = draw(st.integers(1, 2))
    try:
        return policy.config_cls(**values)
    except ConfigError:
        return draw(st.nothing())


@st.composite
def runs(draw: Any, policy: Any, profile: str) -> tuple[Any, list[list[tuple]], list[list[float]]]:
    c = draw(configs(policy, profile))
    world = c.world_size
    unknown = [f.name for f in policy.inputs if f.kind not in INPUTS]
    assert not unknown, f"{policy.name}: no strategy for inputs {unknown} (kinds {[f.kind for f in policy.inputs]})"
    passes = draw(st.integers(4, 14))
    same_inputs = draw(st.booleans())  # all ranks pass equal inputs: agreement-equal-args applies
    inputs, clocks = [], []
    now = [0.0] * world
    for _ in range(passes):
        one = tuple(draw(INPUTS[f.kind]) for f in policy.inputs)
        inputs.append([one if same_inputs else tuple(draw(INPUTS[f.kind]) for f in policy.inputs) for _ in range(world)])
        now = [t + draw(STEPS_S) for t in now]
        clocks.append(list(now))
    return c, inputs, clocks


def _run(c: Any, inputs: list[list[tuple]], clocks: list[list[float]], folder: str) -> list[list[dict[str, Any]]]:
    policy = c.policy

    def rank_main(rank: int, gather: Any) -> list[dict[str, Any]]:
        now = [0.0]
        core = PolicyCore(c, gather, clock=lambda: now[0], decision_log=folder)
        out = []
        for per_rank, times in zip(inputs, clocks):
            now[0] = times[rank]
            out.append(expect_of(policy, core.negotiate(*per_rank[rank])))
            core.finalize()
        core.close()
        return out

    per_rank = run_ranks(c.world_size, rank_main)
    return [[per_rank[r][k] for r in range(c.world_size)] for k in range(len(inputs))]


@pytest.mark.parametrize("policy_name, profile", PROFILES, ids=[p for _, p in PROFILES])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_random_runs_keep_what_the_catalogue_proves(policy_name: str, profile: str, data: Any) -> None:
    policy = _policy(policy_name)
    c, inputs, clocks = data.draw(runs(policy, profile))
    with tempfile.TemporaryDirectory() as folder:
        expects = _run(c, inputs, clocks, folder)
        equal_inputs = all(len(set(per_rank)) == 1 for per_rank in inputs)
        names = [f.trace_name for f in policy.trace.inputs]
        passes = [{"ranks": [dict(zip(names, x), now_s=t) for x, t in zip(per_rank, times)], "expect": e}
                  for per_rank, times, e in zip(inputs, clocks, expects)]
        trace = {"profile": profile, "config": {k: v for k, v in c.as_dict().items() if k != "profile"}, "passes": passes}
        decisions = decisions_of(policy, expects)
        for prop in replayable(policy):
            inv = policy.invariant(prop)
            if inv.expected[profile] != PROVED:
                continue
            if isinstance(inv.check, Agreement) and inv.check.equal_args and not equal_inputs:
                continue
            assert find_violation(prop, trace, decisions) is None, (prop, c, inputs)
        if policy.collective != ALL_GATHER:
            # Its lines record the one reduced row, not the rank's own: check-log refuses them by name.
            with pytest.raises(LogError, match=f"whose collective is an {policy.collective}: check-log reads logs of all-gather"):
                check_logs([folder])
            return
        report, data_, _ = check_logs([folder])
        diverged = [f.message for f in report.findings if f.category == CONFORMANCE]
        assert not diverged, diverged
        unexpected = [(f.property, f.message) for f in report.findings if not f.known_defect]
        assert not unexpected, (c, unexpected)


# ----- every policy over real gloo ranks -------------------------------------------------------

BAD = {BOOL: "yes", COUNT: -1, USAGE: float("nan"), SECONDS: float("inf"), OPT_SECONDS: float("nan")}


def _gloo_scenario(rank: int, world: int, profile: str, runs: list[list[tuple]]) -> dict[str, Any]:
    """One group: a run of passes, a pass with one bad input on rank 1, then a rank built with other parameters."""
    from prefill_delayer.runtime.errors import ConfigMismatchError, PeerInputError
    from prefill_delayer.spec.registry import policy_of

    policy = policy_of(profile)
    c = policy.config_cls(profile=profile, dp_size=world, enable_dp_attention=True)
    core = PolicyCore.over_group(c, clock=lambda: 0.0, decision_log=False)
    out: dict[str, Any] = {"decisions": []}
    for per_rank in runs:
        out["decisions"].append(expect_of(policy, core.negotiate(*per_rank[rank])))
        core.finalize()
    before = core.state
    args = list(runs[-1][rank])
    if rank == 1:
        args[0] = BAD[policy.inputs[0].kind]
    try:
        core.negotiate(*args)
    except PeerInputError as err:
        out["bad_input"] = (type(err).__name__, policy.inputs[0].name in str(err), core.state == before)
    numeric = next(p for p in policy.params if p.name not in LAYOUT and isinstance(p.default, int) and p.check(p.default + 1))
    other = policy.config_cls(profile=profile, dp_size=world, enable_dp_attention=True,
                              **{numeric.name: numeric.default + rank})
    try:
        PolicyCore.over_group(other, clock=lambda: 0.0, decision_log=False).negotiate(*runs[0][rank])
    except ConfigMismatchError as err:
        out["mismatch"] = type(err).__name__
    return out


@pytest.mark.multiprocess
@pytest.mark.parametrize("policy_name", [pol.name for pol in policies()])
def test_every_policy_over_gloo_fails_a_bad_pass_on_every_rank(policy_name: str) -> None:
    """Two gloo ranks per policy: the decisions are the in-process ones; a bad input on one rank and a rank with
    other parameters fail the pass on every rank alike, the state left as it was."""
    from runtime_harness import spawn_gloo

    policy = _policy(policy_name)
    profile = policy.default_profile
    rng = random.Random(policy_name)
    runs = [[tuple(rng.choice(VALUES[f.kind]) for f in policy.inputs) for _ in range(2)] for _ in range(6)]
    out = spawn_gloo(2, _gloo_scenario, profile, runs)
    assert all(status == "ok" for status, _ in out.values()), out
    results = [out[r][1] for r in range(2)]
    c = policy.config_cls(profile=profile, dp_size=2, enable_dp_attention=True)
    with tempfile.TemporaryDirectory() as folder:
        assert [results[0]["decisions"], results[1]["decisions"]] == [[p[r] for p in _run(c, runs, [[0.0, 0.0]] * 6,
                                                                                            folder)] for r in range(2)]
    for r in results:
        assert r["bad_input"] == ("PeerInputError", True, True)
        assert r["mismatch"] == "ConfigMismatchError"
