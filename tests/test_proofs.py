"""The proofs as tests: expected statuses, real counterexamples, and sensitivity to mutations."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("z3")

from prefill_delayer.proofs.prove import run_catalogue  # noqa: E402
from prefill_delayer.traces.format import validate_trace  # noqa: E402
from delayer_spec import guards  # noqa: E402
from delayer_spec import CATALOGUE  # noqa: E402
from delayer_spec import PROFILES  # noqa: E402
from delayer_spec import build_table  # noqa: E402
from prefill_delayer.spec.table import Lit, Table  # noqa: E402
from prefill_delayer.spec.registry import policies  # noqa: E402
from prefill_delayer.spec.policies.sglang_delayer.properties import NO_DECODE_HOLD  # noqa: E402

from guard_mutants import EQUIVALENT, mutants, patched  # noqa: E402

pytestmark = pytest.mark.proofs


@pytest.fixture(scope="module")
def results():
    return run_catalogue(PROFILES)


def test_every_property_has_its_expected_status(results):
    assert {(r.property, r.profile) for r in results} == {(i.id, p) for i in CATALOGUE for p in PROFILES}
    bad = [(r.property, r.profile, r.status, r.expected) for r in results if not r.ok]
    assert not bad


def test_every_refuted_cell_carries_a_short_trace(results):
    refuted = {(r.property, r.profile): r for r in results if r.status == "refuted"}
    assert set(refuted) == {(i.id, p) for i in CATALOGUE for p in PROFILES if i.expected[p] == "refuted"}
    assert len(refuted) == 12 + 5  # no-decode-hold: every profile (aligned is another policy)
    for r in refuted.values():
        validate_trace(r.trace)
        assert r.trace["profile"] == r.profile and r.trace["property"] == r.property
        if r.property == "no-decode-hold":  # a run of one pass more than the hold: no shorter run can show it
            assert len(r.trace["passes"]) == NO_DECODE_HOLD + 1, r.profile
        else:
            assert 1 <= len(r.trace["passes"]) <= 4
        assert r.trace["violation"] and r.trace["violation"] != "?"
    # Before 0.5.22 agreement fails on the clock alone: the ranks pass identical arguments.
    for profile in ("seed", "sglang-0.5.17", "sglang-0.5.19"):
        for prop in ("agreement", "agreement-equal-args"):
            for p in refuted[(prop, profile)].trace["passes"]:
                a, b = p["ranks"]
                assert {k: v for k, v in a.items() if k != "now_s"} == {k: v for k, v in b.items() if k != "now_s"}
    # From 0.5.22 the clock is gathered: only the local max_running_requests is left to disagree on.
    passes = refuted[("agreement", "sglang-0.5.22")].trace["passes"]
    assert any(p["ranks"][0]["max_running_requests"] != p["ranks"][1]["max_running_requests"] for p in passes)


def test_cli_prove_writes_report_and_traces(tmp_path):
    from prefill_delayer.cli import main

    report, traces = tmp_path / "report.json", tmp_path / "traces"
    assert main(["prove", "--json", str(report), "--traces", str(traces)]) == 0
    data = json.loads(report.read_text())
    assert len(data["spec_hash"]) == 16
    assert {r["status"] for r in data["results"]} <= {"proved", "refuted"}
    paths = [r["trace"] for r in data["results"] if r["trace"]]
    refuted = sum(s == "refuted" for pol in policies() for inv in pol.invariants for s in inv.expected.values())
    # 12 of SGLang's delayer and 5 of no-decode-hold, 3 of its interval gate, 18 of the other engines' policies
    # (issue 19) and 2 of no-decode-hold on SGLang's phase lockstep, which runs on the delayer
    assert len(paths) == refuted == 12 + 5 + 3 + 18 + 2 and all((traces / p.split("/")[-1]).exists() for p in paths)
    assert data["seconds"] > 0


# ----- mutation sensitivity ---------------------------------------------------

MUTANTS = mutants()
# Refinement first: it catches most mutants fastest; the rest of the catalogue after it.
ORDER = ["refinement", "aggregate-view"] + [i.id for i in CATALOGUE if i.id not in ("refinement", "aggregate-view")]


def test_mutants_cover_every_guard():
    mutated = {name for name, *_ in MUTANTS}
    assert set(guards.TABLE_GUARDS) | {"local_force", "wait_expired", "slot_trigger", "queue_trigger"} <= mutated
    assert len(MUTANTS) >= 20


@pytest.mark.parametrize("name,label,occurrence,src", MUTANTS, ids=[f"{m[0]}:{m[1]}#{m[2]}" for m in MUTANTS])
def test_prove_fails_on_mutated_guard(monkeypatch, name, label, occurrence, src):
    monkeypatch.setattr(guards, name, patched(name, src))
    results = run_catalogue(properties=ORDER, fail_fast=True)
    caught = [r for r in results if not r.ok]
    if (name, label, occurrence) in EQUIVALENT:
        assert not caught, "listed as equivalent but prove now distinguishes it: remove it from EQUIVALENT"
    else:
        assert caught, f"prove stays green with {name} mutated ({label} #{occurrence})"


def test_prove_fails_without_the_hardened_pass_cap():
    def uncapped(profile: str) -> Table:
        table = build_table(profile)
        rows = []
        for t in table:
            if t.name.endswith("_all_timeout"):
                continue
            if t.name.endswith("_all_delay"):
                keep = tuple(i for i, lit in enumerate(t.lits) if lit != Lit("below_cap"))
                t = type(t)(**{**t.__dict__, "lits": tuple(t.lits[i] for i in keep), "fns": tuple(t.fns[i] for i in keep)})
            rows.append(t)
        return Table(profile, table.states, tuple(rows))

    results = run_catalogue(profiles=("hardened",), table_for=uncapped, properties=["bounded-delay"])
    assert results[0].status == "refuted" and results[0].expected == "proved"


def test_agreement_counterexample_falls_back_to_local_arguments(monkeypatch):
    """A hardened mutant that reads the local max_running_requests again (upstream #32389):
    no clock-only divergence exists, so the search must find one through the local argument."""

    def local_mrr(o, c, v, s):
        return s.mrr if c.enable_dp_attention else o.ceil_div(s.mrr, c.dp_size)

    monkeypatch.setattr(guards, "effective_max_running_requests", local_mrr)
    [res] = run_catalogue(profiles=("hardened",), properties=["agreement"])
    assert res.status == "refuted" and res.trace is not None
    assert any(p["ranks"][0]["max_running_requests"] != p["ranks"][1]["max_running_requests"] for p in res.trace["passes"])


def test_cli_prove_at_another_ratio_and_rejects_a_bad_one(capsys):
    """0.29 is a ratio whose double products round above their exact floor (int(300 * 0.29) == 87)."""
    from prefill_delayer.cli import main

    assert main(["prove", "--queue-min-ratio", "0.29", "--dp-size", "3", "--jobs", "2"]) == 0
    assert "queue_min_ratio off or 0.29" in capsys.readouterr().out
    assert main(["prove", "--queue-min-ratio", "0"]) == 2
    assert "--queue-min-ratio" in capsys.readouterr().err


def test_a_profile_s_counterexamples_do_not_depend_on_the_profiles_proved_before_it():
    """Each profile is proved in a worker forked for it alone: Z3's state left by an earlier profile in the same process
    changed the models it found, so a trace depended on how the pool handed out the profiles (two runs of the whole
    catalogue on two workers differed in 18 of their 40 traces)."""
    from prefill_delayer.proofs.prove import run_parallel

    def traces(profiles, jobs):
        return {(r.profile, r.property): json.dumps(r.trace, sort_keys=True) for r in run_parallel(profiles, 20000, jobs)
                if r.trace is not None}

    one = traces(["seed", "sglang-0.5.19"], 1)
    assert one and one == traces(["sglang-0.5.19", "seed"], 1) == traces(["seed", "sglang-0.5.19"], 2)
