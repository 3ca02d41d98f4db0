"""A benchmark that misses its target exits non-zero (1), naming what it missed; one that meets all exits 0."""

from __future__ import annotations

import pytest

from prefill_delayer import benchmarks
from prefill_delayer.benchmarks import decision_log, sim


def test_the_verdict_line_and_status(capsys: pytest.CaptureFixture) -> None:
    assert benchmarks.verdict([]) == 0 and capsys.readouterr().out == "every target met\n"
    assert benchmarks.verdict(["x is 3, more than 2"], ["y needs z"]) == benchmarks.MISSED == 1
    assert capsys.readouterr().out == "MISSED TARGET: x is 3, more than 2 (not judged: y needs z)\n"


def test_the_simulator_benchmark_exits_1_when_it_misses(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    argv = ["--passes", "20", "--dp-size", "2", "--profile", "hardened", "--gather", "lockstep"]
    monkeypatch.setattr(sim, "TARGET_S", 0.0)  # no run is that fast
    assert sim.main(argv) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("MISSED TARGET: the slowest run takes ")
    monkeypatch.setattr(sim, "TARGET_S", 1e9)
    assert sim.main(argv) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "every target met"


def test_the_decision_log_benchmark_exits_1_when_it_misses(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    argv = ["--passes", "200", "--rounds", "1", "--records", "3200", "--exact-records", "1600", "--jobs", "1"]
    monkeypatch.setenv("PREFILL_DELAYER_CROSSCHECK", "1")  # the benchmark unsets it; it comes back after the test
    monkeypatch.setattr(decision_log, "CHECK_TARGET_PER_S", 10**12)
    monkeypatch.setattr(decision_log, "RUNTIME_TARGET_US", 1e9)
    monkeypatch.setattr(decision_log, "BYTES_TARGET", 10**9)
    monkeypatch.setattr(decision_log, "RSS_TARGET_MB", 10**9)
    assert decision_log.main(argv) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("MISSED TARGET: check-log reads ") and "fewer than 1,000,000,000,000" in last
    monkeypatch.setattr(decision_log, "CHECK_TARGET_PER_S", 0)
    assert decision_log.main(argv) == 0
