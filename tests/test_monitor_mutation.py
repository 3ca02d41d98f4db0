"""One monitor, three consumers: a mutation of the bounded-delay monitor changes prove, check-log and replay together.

The run invariants are written once, as monitors in the policy's catalogue
(``spec.monitors``). The mutant here keeps every guard and the table, and only
tightens the monitor's limit by one pass. A run of exactly ``max_delay_passes - 1``
delays, legal before, then breaks it, and each consumer has to notice through
the catalogue alone: ``prove`` refutes the property (with a counterexample),
``check-log`` flags the log of that run, and ``replay`` reproduces the run as
a violation. If any of them read the bound from anywhere but the monitor, it
would stay silent here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from delayer_spec import POLICY, Config

from prefill_delayer.conformance import check_logs
from prefill_delayer.proofs.prove import run_catalogue
from prefill_delayer.runtime import PolicyCore, run_ranks
from prefill_delayer.spec.policy import PROVED, REFUTED
from prefill_delayer.spec.schema import expect_of
from prefill_delayer.traces.replay import replay

PROFILE = "hardened"
PROP = "bounded-delay"
MAX_DELAY_PASSES = 3
PASSES = 5


def _config() -> Any:
    return Config(profile=PROFILE, dp_size=2, enable_dp_attention=True, max_delay_passes=MAX_DELAY_PASSES)


def _inputs(rank: int) -> tuple:
    """Rank 0 can prefill and rank 1 cannot: the group delays until the pass bound releases it."""
    return (rank == 0, 0.5, 8, 4, 16, 2)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A decision log and a trace of the same run, recorded before any mutation."""
    folder = tmp_path_factory.mktemp("log")
    c = _config()

    def rank_main(rank: int, gather: Any) -> list[dict[str, Any]]:
        now = [0.0]
        core = PolicyCore(c, gather, clock=lambda: now[0], decision_log=str(folder))
        out = []
        for k in range(PASSES):
            now[0] = float(k)
            out.append(expect_of(POLICY, core.negotiate(*_inputs(rank))))
            core.finalize()
        core.close()
        return out

    per_rank = run_ranks(2, rank_main)
    names = [f.trace_name for f in POLICY.trace.inputs]
    passes = [
        {"ranks": [dict(zip(names, _inputs(r)), now_s=float(k)) for r in range(2)], "expect": [per_rank[r][k] for r in range(2)]}
        for k in range(PASSES)
    ]
    config = {k: v for k, v in c.as_dict().items() if k != "profile"}
    trace = {"property": PROP, "profile": PROFILE, "config": config, "passes": passes, "violation": "?"}
    reasons = [p["expect"][0]["reason"] for p in passes]
    # The run holds for max_delay_passes - 1 passes, exactly the bound, then the bound releases it.
    assert reasons[:MAX_DELAY_PASSES] == ["delay"] * (MAX_DELAY_PASSES - 1) + ["wait_timeout"]
    return folder, trace


@pytest.fixture
def stricter_monitor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounded-delay monitor with its limit one pass lower; nothing else of the policy changes."""
    inv = POLICY.invariant(PROP)
    monitor = inv.check
    stricter = dataclasses.replace(monitor, limit=lambda o, c: monitor.limit(o, c) - 1)
    mutated = tuple(dataclasses.replace(i, check=stricter) if i is inv else i for i in POLICY.invariants)
    monkeypatch.setattr(POLICY, "invariants", mutated)


def _prove() -> Any:
    (result,) = run_catalogue([PROFILE], properties=[PROP])
    return result


def _flagged(folder: Path) -> list[Any]:
    report, _, _ = check_logs([str(folder)])
    return [f for f in report.findings if f.property == PROP]


def test_the_released_monitor_holds_on_all_three(run: tuple[Path, dict[str, Any]]) -> None:
    folder, trace = run
    assert _prove().status == PROVED
    assert _flagged(folder) == []
    reproduced, lines = replay(trace)
    assert not reproduced and lines[-1].startswith(f"NOT REPRODUCED: no {PROP} violation")


def test_a_mutated_monitor_changes_all_three_together(run: tuple[Path, dict[str, Any]], stricter_monitor: None) -> None:
    folder, trace = run
    proved = _prove()
    assert proved.status == REFUTED
    assert proved.trace is not None and proved.trace["property"] == PROP
    assert "consecutive passes" in proved.trace["violation"]
    assert replay(proved.trace)[0], "prove's counterexample does not replay under the same monitor"
    limit = MAX_DELAY_PASSES - 2
    flagged = _flagged(folder)
    assert flagged, "check-log did not read the mutated monitor"
    assert all(f"= {limit}" in f.message for f in flagged)
    reproduced, lines = replay(trace)
    assert reproduced, lines[-1]
    assert f"= {limit}" in lines[-1]
