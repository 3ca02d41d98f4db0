"""The proofs' scope: every rank count and layout (the view by induction), every queue ratio and
every dp_size (sound over-approximations), and a scope line generated from the checks."""

from __future__ import annotations

import math
import random

import pytest

z3 = pytest.importorskip("z3")

from prefill_delayer.proofs import view_induction  # noqa: E402
from prefill_delayer.proofs import scope as _scope  # noqa: E402
from prefill_delayer.spec.policies.sglang_delayer.scope import ANY_RATIO, Scope, families  # noqa: E402
from prefill_delayer.spec.policy import Policy  # noqa: E402
from prefill_delayer.proofs.prove import check_property, run_catalogue  # noqa: E402
from delayer_spec import POLICY, view  # noqa: E402
from delayer_spec import MAX_QUEUE_MIN_RATIO  # noqa: E402
from delayer_spec import MAX_COUNT  # noqa: E402
from delayer_spec import PROFILES  # noqa: E402
from delayer_spec import build_table  # noqa: E402
from prefill_delayer.proofs.z3ops import ceil_div_term, floor_mul_term  # noqa: E402

pytestmark = pytest.mark.proofs

F = view


def scope_line(profiles, scope, layouts):
    """The scope line of ``prove`` for the options a ``Scope`` stands for."""
    options = {} if scope == Scope() else {"queue_min_ratio": scope.queue_ratio, "dp_size": scope.dp_size}
    return _scope.scope_line(profiles, options, layouts)


def _mutant(field: str, make):
    """gathered_view with one field recomputed by ``make(o, c, rows, counted)``."""
    original = Policy.gathered_view

    def gathered_view(self, o, c, rows):
        v = original(self, o, c, rows)
        return v._replace(**{field: make(o, c, rows, self.counted_rows(c, rows))})

    return gathered_view


MUTANTS = {
    "num_prefillable sum -> max": _mutant("num_prefillable", lambda o, c, rows, cnt: o.MaxOf([r[F.F_PREFILLABLE] for r in cnt])),
    "num_force sum -> max": _mutant("num_force", lambda o, c, rows, cnt: o.MaxOf([r[F.F_FORCE] for r in cnt])),
    "running_batch max -> sum": _mutant("running_batch", lambda o, c, rows, cnt: o.SumOf(r[F.F_RB] for r in cnt)),
    "running_batch of the second rank of each group": _mutant(
        "running_batch", lambda o, c, rows, cnt: o.MaxOf([r[F.F_RB] for r in rows[1:: c.group_size][: c.dp_dim]])
    ),
    "waiting_queue_len over all rows": _mutant("waiting_queue_len", lambda o, c, rows, cnt: o.MaxOf([r[F.F_WQ] for r in rows])),
    "timeout_any > 0 -> >= 0": _mutant("timeout_any", lambda o, c, rows, cnt: o.SumOf(r[F.F_TIMEOUT] for r in cnt) >= 0),
    "timeout_any over all rows": _mutant("timeout_any", lambda o, c, rows, cnt: o.SumOf(r[F.F_TIMEOUT] for r in rows) > 0),
    "mrr_max over the counted rows only": _mutant("mrr_max", lambda o, c, rows, cnt: o.MaxOf([r[F.F_MRR] for r in cnt])),
    "n counts every row": _mutant("n", lambda o, c, rows, cnt: len(rows)),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_aggregate_view_fails_on_a_mutated_aggregate(monkeypatch, name):
    monkeypatch.setattr(Policy, "gathered_view", MUTANTS[name])
    fam = families("hardened", Scope())[0]
    assert view_induction.check_view_induction(POLICY, fam, 20000).status == "refuted"


def test_aggregate_view_proves_the_spec_for_every_layout():
    for fam in families("hardened", Scope()):
        res = view_induction.check_view_induction(POLICY, fam, 20000)
        assert res.status == "proved", res.note
    folds = view_induction.view_folds(POLICY)
    assert {k: (f.kind, f.scope) for k, f in folds.items()}["mrr_max"] == ("max", "all")


def test_strict_watermark_is_what_the_view_domain_says(monkeypatch):
    """local_force's strict < is what makes num_force > 0 need W > 0: a <= there breaks the induction."""
    from delayer_spec import guards

    monkeypatch.setattr(guards, "local_force", lambda o, c, p, tu: o.And(p, c.watermark_on, tu <= o.num(c.watermark)))
    fam = families("seed", Scope())[0]
    assert view_induction.check_view_induction(POLICY, fam, 20000).status == "refuted"


def test_any_ratio_is_a_sound_over_approximation():
    """Every int(n * r) a real ratio gives satisfies what the proofs assume for ANY_RATIO."""
    rng = random.Random(7)
    ratios = [rng.choice([1e-9, 0.1, 0.29, 0.5, 1.0, 3.7, MAX_QUEUE_MIN_RATIO]) * rng.random() or 1e-9 for _ in range(200)]
    ratios += [1e-300, MAX_QUEUE_MIN_RATIO, 0.29, 0.1]
    for r in ratios:
        if not 0 < r <= MAX_QUEUE_MIN_RATIO:
            continue
        for n in (0, 1, 2, 3, 100, rng.randrange(MAX_COUNT), MAX_COUNT):
            side: list = []
            x = z3.Int("n")
            term = floor_mul_term(x, ANY_RATIO, side)
            s = z3.Solver()
            s.add(*side, x == n, term == int(n * r))
            assert s.check() == z3.sat, (n, r)


def test_any_dp_size_ceil_is_a_sound_over_approximation():
    for a in (0, 1, 2, 7, 128, MAX_COUNT):
        for d in (1, 2, 3, 16, 65536):
            side: list = []
            x, y = z3.Int("a"), z3.Int("d")
            term = ceil_div_term(x, y, side)
            s = z3.Solver()
            s.add(*side, x == a, y == d, term == math.ceil(a / d))
            assert s.check() == z3.sat, (a, d)


def test_every_profile_is_proved_for_every_ratio_and_dp_size():
    results = run_catalogue(PROFILES, properties=["guards-partition", "bounded-delay", "agreement-equal-args", "refinement"])
    assert all(r.ok for r in results), [(r.profile, r.property, r.status, r.note) for r in results if not r.ok]
    fams = families("hardened", Scope())
    assert any(f.queue_ratio is ANY_RATIO for f in fams) and all(f.dp_size is None for f in fams)


def test_a_refutation_is_shown_at_a_concrete_ratio():
    res = check_property("agreement-equal-args", "sglang-0.5.19", build_table("sglang-0.5.19"), Scope(), 20000)
    assert res.status == "refuted" and res.trace["config"]["queue_min_ratio"] == 0.5


def test_scope_line_says_any_for_every_range():
    line = scope_line(PROFILES, Scope(), True)
    assert "dp_size any >= 1" in line and f"any in (0, {int(MAX_QUEUE_MIN_RATIO)}]" in line
    assert "any number of DP groups, any attn_cp x attn_tp ranks per group, DP attention on and off" in line
    pinned = scope_line(PROFILES, Scope(0.29, 3), True)
    assert "0.29" in pinned and "3 without" in pinned and "queue_min_ratio off or any" not in pinned
    assert "abstract view only" in scope_line(PROFILES, Scope(), False)


@pytest.mark.parametrize("profile", ["atom-930", "atom-coalescer", "vllm-48246"])
def test_a_reduced_row_policy_s_scope_line_says_the_dp_size_proved(profile):
    """These policies prove at the --dp-size given (their families fix it); the line said "any >= 1" whatever it was."""
    from prefill_delayer.spec.registry import policy_of

    scope = policy_of(profile).proof.scope_of(dp_size=4)
    assert "dp_size 4," in _scope.scope_line((profile,), {"dp_size": 4}, True)
    assert all(f.dp_size == 4 for f in policy_of(profile).proof.families(profile, scope))
    assert "dp_size any >= 1," in _scope.scope_line((profile,), {}, True)


def test_cli_prints_the_scope_line(capsys):
    from prefill_delayer.cli import main

    assert main(["prove", "--profile", "hardened", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert scope_line(("hardened",), Scope(), True) in out


def test_unknown_results_say_the_timeout_caused_them(capsys):
    from prefill_delayer.cli import main

    assert main(["prove", "--profile", "hardened", "--jobs", "1", "--timeout-ms", "1"]) == 1
    out = capsys.readouterr().out
    assert "unknown because the solver hit --timeout-ms 1" in out
    assert "is unknown, expected proved" in out
