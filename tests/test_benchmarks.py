"""A benchmark that misses its target exits non-zero (1), naming what it missed; one that meets all exits 0."""

from __future__ import annotations

import importlib.util
import re
import sys

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


def _lines_up(table: list[str]) -> None:
    """Every row's cells start where their header starts (a column of names) or end where it ends (numbers): a cell
    is text with single spaces inside (``poisson, saturated``), and columns are further apart."""
    cell = re.compile(r"\S+(?: \S+)*")
    header, *rows = [[m.span() for m in cell.finditer(line)] for line in table]
    assert rows and all(len(row) == len(header) for row in rows), "\n".join(table)
    for j, (start, end) in enumerate(header):
        assert all(row[j][0] == start for row in rows) or all(row[j][1] == end for row in rows), "\n".join(table)


def test_the_simulator_benchmark_s_columns_line_up_whatever_the_names(capsys: pytest.CaptureFixture) -> None:
    """The names were padded to widths written for shorter ones (a profile to 14): a longer one pushed its row's
    numbers right of the others'."""
    names = ["seed", "atom-coalescer-1611", "sglang-0.5.23", "cadence-hardened"]
    argv = ["--passes", "20", "--dp-size", "2", "--gather", "lockstep", *(a for n in names for a in ("--profile", n))]
    sim.main(argv)
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("DP=2, 20 passes per run"))) + 1
    table = lines[start:lines.index(next(line for line in lines if line.startswith("target: ")))]
    _lines_up(table)
    assert table[0].split()[:3] == ["workload", "gather", "profile"]
    assert [row.split("  ")[0] for row in table[1:]] == [w for w in sim.workloads(2) for _ in names]
    assert [n for row in table[1:] for n in names if f"  {n}  " in row] == names * 2


def test_the_runtime_benchmark_s_columns_line_up_whatever_the_world(monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture) -> None:
    """A world's label was padded to 5: a world of 100,000 ranks pushed its rows right of the others'. The timings
    are given here (the table is under test, not the ranks)."""
    from prefill_delayer.benchmarks import runtime

    times = {"bare": [(20.0, 15.0)], "ours": [(31.5, 24.0)]}
    monkeypatch.setenv("PREFILL_DELAYER_CROSSCHECK", "1")  # the benchmark unsets it; it comes back after the test
    monkeypatch.setattr(runtime, "run_world", lambda *args: times)
    monkeypatch.setattr(runtime, "run_local", lambda *args: times)
    runtime.main(["--worlds", "1,100000", "--no-seed"])
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index(next(line for line in lines if line.lstrip().startswith("world"))):][:7]
    _lines_up(table)
    assert [row.split()[:2] for row in table[1:]] == [[w, k] for w in ("1", "100000", "local") for k in ("wall", "cpu")]


def test_a_number_wider_than_its_column_leaves_the_columns_after_it_in_place() -> None:
    """Rows print as they are measured, so a timing past the column's width (100,000 µs or more) cannot widen the
    rows above it: it pushed the rest of its row right. It now takes the room from the next cells' padding."""
    table = benchmarks.Table(*benchmarks.timing_columns("seed"))
    lines = [table.header(), table.row("wall", "12.5", "31.0", "40.2", "18.5", "27.7", "0.67"),
             table.row("cpu", "123456789.7", "31.0", "40.2", "18.5", "27.7", "0.67")]
    _lines_up([lines[0], lines[1]])
    ends = [m.end() for m in re.finditer(r"\S+(?: \S+)*", lines[0])]  # a header cell may hold a space
    fits, wide = ([m.span() for m in re.finditer(r"\S+", line)] for line in lines[1:])
    assert wide[1] == (4, 15), lines  # one space after the cell before it, not its own start
    assert [end for _, end in wide[2:]] == ends[2:] == [end for _, end in fits[2:]], lines
    # one cell's room is only the next cell's padding: past it, a single space still parts every cell
    crowded = table.row("cpu", "123456789.7", "1234567890.0", "40.2", "18.5", "27.7", "0.67")
    assert crowded.startswith("cpu 123456789.7 1234567890.0 "), crowded
    assert [m.end() for m in re.finditer(r"\S+", crowded)][3:] == ends[3:], crowded


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


BAD_OPTIONS = [
    ("runtime", ["--worlds", "abc"], "argument --worlds: expected an integer >= 1, got 'abc'"),
    ("runtime", ["--worlds", "0"], "argument --worlds: expected an integer >= 1, got '0'"),
    ("runtime", ["--worlds", ","], "argument --worlds: expected comma-separated integers >= 1, got ','"),
    ("runtime", ["--rounds", "-1"], "argument --rounds: expected an integer >= 1, got '-1'"),
    ("runtime", ["--passes", "0"], "argument --passes: expected an integer >= 1, got '0'"),
    ("decision_log", ["--passes", "0"], "argument --passes: expected an integer >= 1, got '0'"),
    ("decision_log", ["--rounds", "0"], "argument --rounds: expected an integer >= 1, got '0'"),
    ("decision_log", ["--records", "-5"], "argument --records: expected an integer >= 16 (one pass of the 16-rank group), got '-5'"),
    ("decision_log", ["--exact-records", "15"], "argument --exact-records: expected an integer >= 16"),
    ("decision_log", ["--jobs", "0"], "argument --jobs: expected an integer >= 1, got '0'"),
    ("sim", ["--passes", "0"], "argument --passes: expected an integer >= 1, got '0'"),
    # simulate's own cap (sim.cli.MAX_DP_SIZE), not the spec's 65,536 (--dp-size 1000 ran, one pass taking seconds)
    ("sim", ["--dp-size", "1000"], "argument --dp-size: expected an integer in [1, 256], got '1000'"),
    ("sim", ["--dp-size", "257"], "argument --dp-size: expected an integer in [1, 256], got '257'"),
    ("sim", ["--profile", "nope"], "--profile: unknown profile 'nope'"),
    ("sim", ["--gather", ""], "--gather takes a comma list of lockstep, threads, got ''"),  # measured nothing, 'every target met'
    ("sim", ["--gather", ","], "--gather takes a comma list of lockstep, threads, got ','"),
    ("sim", ["--gather", "lockstep,x"], "--gather takes a comma list of lockstep, threads, got 'lockstep,x'"),
    ("sglang_shell", ["--world", "0"], "argument --world: expected an integer >= 1, got '0'"),
    ("sglang_shell", ["--passes", "-1"], "argument --passes: expected an integer >= 1, got '-1'"),
    ("sglang_shell", ["--rounds", "0"], "argument --rounds: expected an integer >= 1, got '0'"),
    ("runtime_instructions", ["--seeds", "-1"], "--seeds takes integers in [0, 4294967295], got '-1'"),
]


@pytest.mark.parametrize(("module", "argv", "fragment"), BAD_OPTIONS, ids=[f"{m} {' '.join(a)}" for m, a, _ in BAD_OPTIONS])
def test_a_bad_option_is_one_line_naming_it_and_exit_2(module: str, argv: list[str], fragment: str,
                                                       capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Exit 1 means a missed target: a bad option is refused before any work, as the CLI refuses one."""
    import importlib

    bench = importlib.import_module(f"prefill_delayer.benchmarks.{module}")

    def ran(prog: str, body: object) -> int:
        raise AssertionError(f"{module} {argv} was accepted and ran")  # not the minutes a full run takes to fail

    for owner in (benchmarks, bench):
        monkeypatch.setattr(owner, "run_main", ran, raising=False)
    with pytest.raises(SystemExit) as exit_:
        bench.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"python -m prefill_delayer.benchmarks.{module}: ") and fragment in err, err


def test_ctrl_c_is_one_line_exit_130_and_the_temporary_folder_goes(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                                                   tmp_path) -> None:
    import tempfile

    def interrupted(folder, records, **kwargs) -> int:
        (folder / "part.jsonl").write_text("{}\n")  # something half-written there when Ctrl-C comes
        raise KeyboardInterrupt

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(decision_log, "write_group_day", interrupted)
    monkeypatch.setenv("PREFILL_DELAYER_CROSSCHECK", "1")  # the benchmark unsets it; it comes back after the test
    try:
        code = decision_log.main(["--passes", "20", "--rounds", "1", "--records", "32"])
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped the benchmark (a traceback)")
    assert code == 130
    assert capsys.readouterr().err == "python -m prefill_delayer.benchmarks.decision_log: interrupted\n"
    assert list(tmp_path.iterdir()) == []


def test_sigterm_removes_the_temporary_folder(tmp_path) -> None:
    """``timeout`` ends a benchmark with SIGTERM: its temporary folder (hundreds of MB at full size) goes with it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "prefill_delayer.benchmarks.decision_log", "--passes", "100000", "--rounds", "50"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not any(p.name.startswith("prefill-delayer-bench-log-") for p in tmp_path.iterdir()):
            assert time.monotonic() < deadline and proc.poll() is None, "the benchmark made no temporary folder"
            time.sleep(0.05)
        time.sleep(0.5)  # into the timed rounds, the decision log writing
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, err)
    assert err == "python -m prefill_delayer.benchmarks.decision_log: terminated\n", err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("stdout", ["closed pipe", "/dev/full"])
def test_a_report_that_cannot_be_written_is_not_a_missed_target(stdout: str) -> None:
    """`python -m prefill_delayer.benchmarks.sim | head -1` printed a BrokenPipeError traceback and exited 1, which for a
    benchmark means a missed target; now it ends as the CLI does, 141 and quiet. A full stdout is one line naming it, 2."""
    import os
    import subprocess
    import sys

    if stdout == "/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    argv = [sys.executable, "-m", "prefill_delayer.benchmarks.sim", "--passes", "20", "--dp-size", "2", "--profile",
            "hardened", "--gather", "lockstep"]
    if stdout == "closed pipe":
        read, write = os.pipe()
        os.close(read)  # the reader gone before the first line, so that no race with the start-up decides it
    else:
        write = os.open("/dev/full", os.O_WRONLY)
    try:
        done = subprocess.run(argv, stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    want = (141, "") if stdout == "closed pipe" else (
        2, "python -m prefill_delayer.benchmarks.sim: stdout: cannot write it: No space left on device\n")
    assert (done.returncode, done.stderr) == want


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="the runtime benchmark's ranks need torch")
def test_ranks_that_die_are_one_line_and_exit_2_not_a_missed_target(capsys: pytest.CaptureFixture) -> None:
    """A rank that dies (here each rank's target is ``sys.exit`` called with a rank's arguments, a TypeError in the
    rank) is a benchmark that could not run: one line naming the ranks and 2, where it was a traceback and 1, the
    status of a missed target."""
    from prefill_delayer.benchmarks.runtime import spawn_ranks

    code = benchmarks.run_main("bench", lambda: len(spawn_ranks(sys.exit, 2, (), 60.0)))
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.splitlines()[-1] == "bench: world 2: ranks [0, 1] exited with [1, 1] (a rank's own error, if any, is above)"
