"""The proofs of the other engines' policies (ATOM #1611 and #930, SGLang #37273): verdicts, counterexamples, replay.

Every refuted cell's shortest counterexample replays through the runtime (a
rank's failed collective injected where the trace says so); the hardened
profile of the same policy shows none of it on the same inputs, or, for a
failed collective, refuses the pass instead of deciding alone. A mutated
feature or phase changes the verdicts, so the checks can fail.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

pytest.importorskip("z3")

import z3  # noqa: E402

from prefill_delayer.proofs.prove import run_catalogue  # noqa: E402
from prefill_delayer.proofs.z3ops import Z3Ops  # noqa: E402
from prefill_delayer.runtime.errors import CollectiveError  # noqa: E402
from prefill_delayer.spec.policies import atom_coalescer, sglang_lockstep  # noqa: E402
from prefill_delayer.spec.policies.sglang_delayer.properties import NO_DECODE_HOLD  # noqa: E402
from prefill_delayer.spec.registry import policy_named  # noqa: E402
from prefill_delayer.traces.format import validate_trace  # noqa: E402
from prefill_delayer.traces.replay import run_trace  # noqa: E402
from prefill_delayer.traces.violations import find_violation  # noqa: E402

pytestmark = pytest.mark.proofs

POLICIES = ("atom-coalescer", "atom-930", "sglang-lockstep")
PROFILES = tuple(p for name in POLICIES for p in policy_named(name).profile_names)
HARDENED = {"atom-coalescer": "atom-coalescer-hardened", "atom-coalescer-1611": "atom-coalescer-hardened",
            "atom-930": "atom-930-hardened", "lockstep": "lockstep-hardened", "lockstep-hardened": "lockstep-hardened"}
# The matrix these policies must show (refuted cells; every other applicable cell is proved).
REFUTED = {
    ("agreement", "atom-coalescer"), ("joint-progress", "atom-coalescer"),
    ("agreement", "atom-coalescer-1611"), ("joint-progress", "atom-coalescer-1611"),
    ("agreement", "atom-930"), ("agreement-equal-args", "atom-930"), ("joint-progress", "atom-930"),
    ("agreement", "lockstep"), ("joint-progress", "lockstep"),
    ("decode-progress", "lockstep"), ("decode-progress", "lockstep-hardened"),
    ("no-decode-hold", "lockstep"), ("no-decode-hold", "lockstep-hardened"),  # the delayer's hold, as every release's
}


@pytest.fixture(scope="module")
def results() -> list:
    return run_catalogue(PROFILES)


def test_the_verdicts(results: list) -> None:
    assert [r for r in results if not r.ok] == []
    assert {(r.property, r.profile) for r in results if r.status == "refuted"} == REFUTED
    assert all(r.status == "proved" for r in results if (r.property, r.profile) not in REFUTED)
    # the catalogue applies to every policy: the cells the issue names, for each profile
    for profile in PROFILES:
        have = {r.property for r in results if r.profile == profile}
        assert {"agreement", "agreement-equal-args", "bounded-delay", "force-allow", "none-allows", "joint-progress",
                "guards-partition", "aggregate-view", "refinement"} <= have, profile


def test_every_refuted_cell_replays_and_the_hardened_profile_shows_none_of_it(results: list) -> None:
    for r in results:
        if r.status != "refuted":
            continue
        trace = r.trace
        validate_trace(trace)
        longest = NO_DECODE_HOLD + 1 if r.property == "no-decode-hold" else 6  # the hold's run cannot be shorter
        assert 1 <= len(trace["passes"]) <= longest and trace["violation"] not in ("", "?"), (r.profile, r.property)
        decisions = run_trace(trace)
        assert decisions == [p["expect"] for p in trace["passes"]], (r.profile, r.property)
        assert find_violation(r.property, trace, decisions) is not None
        hardened = HARDENED[r.profile]
        failing = any(x.get("collective_failed") for p in trace["passes"] for x in p["ranks"])
        if failing:  # the fail-open's counterexample: the hardened profile refuses the failed pass on that rank
            with pytest.raises(CollectiveError, match="all-reduce .* failed"):
                run_trace(trace, profile=hardened)
        elif r.property in ("decode-progress", "no-decode-hold"):  # no hardened profile bounds them: the chunk in
            # flight is the scheduler's input; the hold is aligned's must-fire, which the lockstep does not run
            assert find_violation(r.property, trace, run_trace(trace, profile=hardened)) is not None
        else:
            assert find_violation(r.property, trace, run_trace(trace, profile=hardened)) is None, (r.profile, r.property)


def test_the_counterexamples_are_the_defects_named() -> None:
    by = {(r.property, r.profile): r.trace for r in run_catalogue(("atom-coalescer", "atom-930"), properties=("agreement",))}
    fail_open = by[("agreement", "atom-coalescer")]
    split = [p for p in fail_open["passes"] if len({e["allow"] for e in p["expect"]}) == 2]
    assert split and any(e["reason"] == "fail_open" for e in split[0]["expect"])  # one rank fails open, its peer holds
    clock = by[("agreement", "atom-930")]  # #930 has no local argument but its clock: the ranks' clocks differ
    assert any(p["ranks"][0]["now_s"] != p["ranks"][1]["now_s"] for p in clock["passes"])


def test_prove_finds_the_fail_open_when_the_hardened_profile_loses_its_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    profiles = tuple(replace(p, features=frozenset()) if p.name == "atom-coalescer-hardened" else p
                     for p in atom_coalescer.PROFILES)
    monkeypatch.setattr(atom_coalescer, "PROFILES", profiles)
    monkeypatch.setattr(atom_coalescer, "_PROFILE", {p.name: p for p in profiles})
    monkeypatch.setattr(atom_coalescer.POLICY, "profiles", profiles)
    got = {r.property: r for r in run_catalogue(("atom-coalescer-hardened",), properties=("agreement", "joint-progress"))}
    assert got["agreement"].status == "refuted" and not got["agreement"].ok
    assert got["joint-progress"].status == "refuted"


def test_refinement_catches_another_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """The phase as 'some rank is allowed' only (the in-flight bit ignored): the independent encoding disagrees."""
    monkeypatch.setattr(sglang_lockstep, "phase_prefill", lambda o, v, allow: o.And(allow, v.num_prefillable > 0))
    (r,) = run_catalogue(("lockstep",), properties=("refinement",))
    assert r.status == "refuted"


def test_the_fill_operator_is_exact_for_a_configured_ratio() -> None:
    o, rng = Z3Ops(), random.Random(5)
    for ratio in (0.7, 0.9, 0.5, 1.0, 0.05, 0.1, rng.random()):
        for _ in range(400):
            den = rng.randint(1, 60_000)
            num = max(0, int(ratio * den) + rng.randint(-2, 2)) if rng.random() < 0.7 else rng.randint(0, 2 * den)
            term = o.ratio_at_least(z3.IntVal(num), z3.IntVal(den), ratio)
            assert z3.is_true(z3.simplify(term)) == (num / den >= ratio), (ratio, num, den)
