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
    # the passes-per-second target is judged at DP=8 only: here it says it was not
    assert capsys.readouterr().out.splitlines()[-1] == (
        "every target met (not judged: 10,000 passes/s (needs --dp-size 8 and the lockstep gather))")


def test_the_simulator_benchmark_judges_passes_per_second_on_the_lockstep_gather_at_dp_8(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    argv = ["--passes", "20", "--dp-size", "8", "--profile", "hardened", "--gather", "lockstep"]
    monkeypatch.setattr(sim, "TARGET_RATE", 1e12)  # no run is that fast
    assert sim.main(argv) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("MISSED TARGET: hardened runs ") and "fewer than 1,000,000,000,000" in last
    monkeypatch.setattr(sim, "TARGET_RATE", 1.0)
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


def test_the_instruction_count_benchmark_judges_against_the_other_build(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path
) -> None:
    """The arithmetic and the verdict, with the callgrind counts given; the counted loop itself runs as written."""
    import subprocess
    import sys

    from prefill_delayer.benchmarks import runtime_instructions as ri

    other = tmp_path / "prefill_delayer" / "benchmarks"
    other.mkdir(parents=True)
    (other / "runtime.py").write_text("")
    per_pass = {None: 1000, str(tmp_path): 1000}

    def count(passes: int, seed: int, path, out_dir: str) -> int:
        return 5_000_000 + passes * per_pass[path] + seed  # the start cancels out, the seed moves nothing here

    monkeypatch.setattr(ri, "_count", count)
    monkeypatch.setattr(ri.shutil, "which", lambda name: "/usr/bin/" + name)
    argv = ["--passes", "10,30", "--seeds", "0,1", "--vs", str(tmp_path)]
    assert ri.main(argv) == 0
    out = capsys.readouterr().out
    assert "median over 2 hash seeds: 1,000" in out and "(+0.0%)" in out and out.endswith("every target met\n")
    per_pass[None] = 1010  # +1%: past what the hash seed and the layout move
    assert ri.main(argv) == 1
    assert capsys.readouterr().out.splitlines()[-1].startswith("MISSED TARGET: 1,010 instructions per pass, more than")
    per_pass[None] = 1004  # +0.4%: inside it
    assert ri.main(argv) == 0
    capsys.readouterr()
    assert ri.main(["--passes", "10,30"]) == 0  # nothing to judge against: said so
    assert "(not judged: no --vs build to compare with)" in capsys.readouterr().out
    for bad in (["--passes", "30,10"], ["--passes", "x"], ["--vs", str(tmp_path / "nothing")]):
        with pytest.raises(SystemExit) as exit_:
            ri.main(bad)
        assert exit_.value.code == 2
    monkeypatch.setattr(ri.shutil, "which", lambda name: None)
    assert ri.main([]) == 2 and "valgrind is not installed" in capsys.readouterr().err
    done = subprocess.run([sys.executable, "-c", ri.CHILD, "5"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
