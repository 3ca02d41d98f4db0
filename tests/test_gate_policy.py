"""The second policy, SGLang 0.5.23's ``--prefill-decode-interval`` gate, through the runtime and check-log.

* Parity: SGLang 0.5.23's own ``Scheduler._should_defer_prefill`` and
  ``_arm_prefill_decode_interval``, taken out of the installed release's
  ``scheduler.py`` and run on a stand-in scheduler object (the module itself
  does not import here), decide every pass of random runs exactly as the
  ``pdi-0.5.23`` profile does through ``PolicyCore``.
* gloo: two processes run the gate over a real ``torch.distributed``
  all-gather, with decision logs; check-log reads those logs with no code of
  its own for the gate: clean for ``pdi-hardened``, the known defects for
  ``pdi-0.5.23`` when the ranks' running batches straddle ``min_bs``; a bad
  input or another configuration on one rank fails the pass on every rank.
"""

from __future__ import annotations

import ast
import importlib.metadata
import random
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from prefill_delayer.conformance import check_logs
from prefill_delayer.runtime import PeerInputError, PolicyCore, run_ranks
from prefill_delayer.runtime.errors import ConfigMismatchError
from prefill_delayer.spec.policies.prefill_decode_interval import GateConfig

from runtime_harness import spawn_gloo

RELEASE = "0.5.23"
SCHEDULER = "sglang/srt/managers/scheduler.py"
METHODS = ("_should_defer_prefill", "_arm_prefill_decode_interval")


def _released_methods() -> dict[str, Any]:
    """The two methods of the installed SGLang release's ``Scheduler``, compiled from its own source."""
    try:
        dist = importlib.metadata.distribution("sglang")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"SGLang is not installed: the README's set-up installs sglang=={RELEASE} --no-deps")
    assert dist.version == RELEASE, f"the parity is with SGLang {RELEASE}, installed is {dist.version}"
    path = Path(str(dist.locate_file(SCHEDULER)))
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    found = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in METHODS]
    assert sorted(n.name for n in found) == sorted(METHODS), f"{SCHEDULER} of {RELEASE} lacks {METHODS}"
    module = ast.Module(body=found, type_ignores=[])
    namespace: dict[str, Any] = {"Optional": Optional, "ScheduleBatch": object}
    exec(compile(module, str(path), "exec"), namespace)  # noqa: S102 - the release's own code, unmodified
    return {name: namespace[name] for name in METHODS}


class ReleasedGate:
    """The attributes 0.5.23's ``Scheduler.__init__`` gives the gate, with its two methods bound."""

    def __init__(self, methods: dict[str, Any], interval: int, min_bs: int) -> None:
        self.prefill_decode_interval = interval
        self._prefill_decode_interval_remaining = 0
        self.prefill_decode_interval_min_bs = min_bs
        self.require_mlp_sync = True  # DP attention
        self._methods = methods

    def should_defer(self, running_bs: int) -> bool:
        batch = SimpleNamespace(batch_size=lambda: running_bs)
        return bool(self._methods["_should_defer_prefill"](self, batch))

    def arm(self, is_extend_in_batch: bool) -> None:
        # With DP attention every rank holds a batch (its own, or the mlp sync's idle batch) whenever any rank
        # runs one, and its is_extend_in_batch is the gathered flag.
        batch = SimpleNamespace(is_extend_in_batch=is_extend_in_batch, forward_mode=None)
        self._methods["_arm_prefill_decode_interval"](self, batch)


def _random_run(rng: random.Random, world: int, passes: int, min_bs: int) -> list[list[tuple[int, bool]]]:
    """Per pass and rank: (running batch size, has prefill work); batches straddle min_bs."""
    return [[(rng.randint(max(0, min_bs - 2), min_bs + 2), rng.random() < 0.6) for _ in range(world)] for _ in range(passes)]


def _released_run(methods: dict[str, Any], run: list, interval: int, min_bs: int) -> list[list[tuple[bool, int]]]:
    """(allowed, remaining after the pass's decision) per pass and rank, from SGLang's own methods."""
    gates = [ReleasedGate(methods, interval, min_bs) for _ in run[0]]
    out = []
    for per_rank in run:
        allowed = [not g.should_defer(bs) for g, (bs, _) in zip(gates, per_rank)]
        after = [g._prefill_decode_interval_remaining for g in gates]
        extend = any(a and work for a, (_, work) in zip(allowed, per_rank))
        for g in gates:
            g.arm(extend)
        out.append(list(zip(allowed, after)))
    return out


def _our_run(run: list, interval: int, min_bs: int, profile: str = "pdi-0.5.23") -> list[list[tuple[bool, int]]]:
    world = len(run[0])
    c = GateConfig(prefill_decode_interval=interval, prefill_decode_interval_min_bs=min_bs, dp_size=world,
                   enable_dp_attention=True, profile=profile)

    def rank_main(rank: int, gather: Any) -> list[tuple[bool, int]]:
        core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=False)
        extended, out = False, []
        for per_rank in run:
            bs, work = per_rank[rank]
            d = core.negotiate(bs, extended)
            core.finalize()
            extended = d.output_allow and work
            out.append((d.output_allow, core.state.remaining))
        return out

    per_rank = run_ranks(world, rank_main)
    return [[per_rank[r][k] for r in range(world)] for k in range(len(run))]


def test_the_released_methods_are_sglangs_own() -> None:
    methods = _released_methods()
    gate = ReleasedGate(methods, interval=2, min_bs=0)
    gate.arm(True)
    assert [gate.should_defer(5) for _ in range(3)] == [True, True, False]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_pdi_0_5_23_decides_as_the_release_on_random_runs(world: int) -> None:
    methods = _released_methods()
    rng = random.Random(world)
    disagreements = 0
    for _ in range(40):
        interval, min_bs = rng.randint(1, 4), rng.choice([0, 0, 1, 3])
        run = _random_run(rng, world, 25, min_bs)
        want = _released_run(methods, run, interval, min_bs)
        assert _our_run(run, interval, min_bs) == want, (interval, min_bs, run)
        disagreements += sum(len({a for a, _ in per_rank}) > 1 for per_rank in want)
    # The runs reach what the profile is about: ranks of one pass deciding differently.
    assert disagreements > 0


def test_pdi_hardened_keeps_the_ranks_together_on_the_same_runs() -> None:
    rng = random.Random(7)
    for _ in range(20):
        interval, min_bs = rng.randint(1, 4), rng.choice([1, 3])
        run = _random_run(rng, 3, 25, min_bs)
        for per_rank in _our_run(run, interval, min_bs, profile="pdi-hardened"):
            assert len(set(per_rank)) == 1, per_rank


# ----- over gloo, with decision logs ------------------------------------------------------


def _gloo_gate(rank: int, world: int, profile: str, folder: str, min_bs: int, passes: int) -> list[tuple[bool, str]]:
    c = GateConfig(prefill_decode_interval=2, prefill_decode_interval_min_bs=min_bs, dp_size=world,
                   enable_dp_attention=True, profile=profile)
    now = [0.0]
    core = PolicyCore.over_group(c, clock=lambda: now[0], decision_log=folder)
    out, extended = [], False
    for k in range(passes):
        now[0] = 0.01 * k
        # First both ranks' batches reach min_bs; then rank 0's drops below it while rank 1's stays above.
        bs = min_bs + rank if k < passes // 2 else min_bs - 1 + 2 * rank
        d = core.negotiate(bs, extended)
        core.finalize()
        extended = d.output_allow  # every rank has prefill work
        out.append((d.output_allow, d.output_reason))
    core.close()
    return out


def _ok(out: dict[int, tuple[str, Any]]) -> list[Any]:
    assert all(status == "ok" for status, _ in out.values()), out
    return [out[r][1] for r in sorted(out)]


@pytest.mark.multiprocess
def test_the_gate_over_gloo_logs_what_check_log_reads(tmp_path: Path) -> None:
    hardened, release = tmp_path / "hardened", tmp_path / "release"
    runs = _ok(spawn_gloo(2, _gloo_gate, "pdi-hardened", str(hardened), 3, 12))
    assert runs[0] == runs[1] and {a for a, _ in runs[0]} == {True, False}
    report, data, _ = check_logs([str(hardened)])
    assert report.findings == [] and data["result"] == "clean", data["findings"]
    assert sum(data["decisions_by_reason"].values()) == 2 * 12

    runs = _ok(spawn_gloo(2, _gloo_gate, "pdi-0.5.23", str(release), 3, 12))
    assert runs[0] != runs[1]  # rank 0's batch is below min_bs: it never defers, rank 1 does
    report, data, _ = check_logs([str(release)])
    props = {f.property for f in report.findings}
    assert "agreement" in props
    assert all(f.known_defect for f in report.findings if f.property in {"agreement", "bounded-delay", "joint-progress"})


def _gloo_failures(rank: int, world: int) -> list[dict[str, Any]]:
    c = GateConfig(prefill_decode_interval=2, prefill_decode_interval_min_bs=1, dp_size=world, enable_dp_attention=True,
                   profile="pdi-hardened")
    errors = []
    core = PolicyCore.over_group(c, clock=lambda: 0.0, decision_log=False)
    core.negotiate(4, False)
    core.finalize()
    state = core.state
    try:
        core.negotiate(-1 if rank == 1 else 4, False)  # a bad running batch on rank 1
    except PeerInputError as err:
        errors.append({"type": type(err).__name__, "message": str(err), "same_state": core.state == state})
    other = GateConfig(prefill_decode_interval=2 + rank, prefill_decode_interval_min_bs=1, dp_size=world,
                       enable_dp_attention=True, profile="pdi-hardened")
    mismatched = PolicyCore.over_group(other, clock=lambda: 0.0, decision_log=False)
    try:
        mismatched.negotiate(4, False)
    except ConfigMismatchError as err:
        errors.append({"type": type(err).__name__, "message": str(err)})
    return errors


@pytest.mark.multiprocess
def test_the_gate_over_gloo_fails_a_bad_pass_on_every_rank() -> None:
    per_rank = _ok(spawn_gloo(2, _gloo_failures))
    assert per_rank[0] == per_rank[1], per_rank
    bad_input, mismatch = per_rank[0]
    assert bad_input["type"] == "PeerInputError" and "running_batch" in bad_input["message"] and bad_input["same_state"]
    assert mismatch["type"] == "ConfigMismatchError"


def test_check_log_blames_a_later_disagreement_on_the_split_that_caused_it(tmp_path: Path) -> None:
    """Ranks part on unequal running batches (agreement, a defect of 0.5.23); a later pass with equal
    batches still decides apart because their states differ. That pass is the same violation's
    consequence, not a violation of agreement-equal-args (which 0.5.23 keeps)."""
    c = GateConfig(prefill_decode_interval=2, prefill_decode_interval_min_bs=1, dp_size=1, attn_tp_size=2,
                   enable_dp_attention=False, profile="pdi-0.5.23")
    inputs = [[(0, False), (0, False)], [(0, False), (0, False)], [(0, True), (1, False)], [(0, False), (0, False)]]

    def rank_main(rank: int, gather: Any) -> list[str]:
        core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=str(tmp_path))
        out = []
        for per_rank in inputs:
            out.append(core.negotiate(*per_rank[rank]).output_reason)
            core.finalize()
        core.close()
        return out

    reasons = run_ranks(2, rank_main)
    assert reasons[0][2:] == ["small_batch", "no_interval"] and reasons[1][2:] == ["decode_interval", "small_batch"]
    report, _, _ = check_logs([str(tmp_path)])
    found = [(f.pass_number, f.property, f.known_defect) for f in report.findings]
    assert found == [(3, "agreement", True), (4, "agreement", True)], report.findings
    assert "parted on pass 3" in report.findings[1].message
