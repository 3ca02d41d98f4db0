"""``prefill-delayer simulate``: tables, JSON, plot, progress, and bad input as one line and exit 2."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from prefill_delayer.cli import build_parser
from prefill_delayer.cli import main as cli
from prefill_delayer.sim.cli import build
from prefill_delayer.benchmarks import sim as bench

SMALL = ["simulate", "--dp-size", "2", "--passes", "120", "--max-running-requests", "8", "--chunked-prefill-size", "1024",
         "--workload", "poisson", "--rate", "3", "--prompt-tokens", "200:2000", "--output-tokens", "5:40"]


def test_prints_a_table_per_profile_and_the_decisions(capsys):
    assert cli([*SMALL, "--profile", "seed", "--profile", "sglang-0.5.20", "--profile", "off", "--wide"]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # no progress bar: stderr is not a terminal
    assert "| profile | max_prefill_bs tracker | passes | input tok/s" in out
    for row in ("| seed | lifetime | ", "| sglang-0.5.20 | window | ", "| off | none | "):
        assert row in out
    # the pass cap (120) ends the first run to reach it; the others run to the same simulated time
    passes = [int(line.split("|")[3]) for line in out.splitlines() if line.startswith(("| seed ", "| sglang-0.5.20 ", "| off "))
              and line.split("|")[3].strip().isdigit()]
    assert len(passes) == 3 and max(passes) == 120, passes
    assert "Decisions by status/reason" in out and "Cost: pass_s = max(" in out


COMPACT = ("profile", "input tok/s", "TTFT p50", "TTFT p99", "unserved at end (oldest wait)", "mixed passes")
WIDE = ("profile", "max_prefill_bs tracker", "passes", "input tok/s", "output tok/s", "TTFT p50", "TTFT p99",
        "unserved at end (oldest wait)", "running/rank mean (p5-p95)", "queue/rank", "token usage", "prefill/idle split passes",
        "mixed passes", "admissions vetoed", "delay runs: n, mean, max")


def _explains(out: str, headings: tuple[str, ...]) -> bool:
    """The legend after the table (after ``Columns``) has one line ``- HEADING: meaning`` per heading, in order."""
    lines = out.split("\nColumns", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
    return len(lines) == len(headings) and all(line.startswith(f"- {h}: ") and len(line) > len(h) + 12 for line, h in zip(lines, headings))


def test_the_default_table_is_compact_with_a_legend_and_wide_has_every_column(tmp_path, capsys):
    """The default table: the columns policies are compared by, each explained in one line; --wide: every column,
    and the JSON is the same document either way (every figure is in it)."""
    argv = [*SMALL, "--profile", "seed", "--profile", "off"]
    assert cli([*argv, "--json", str(tmp_path / "compact.json")]) == 0
    out = capsys.readouterr().out
    assert "| " + " | ".join(COMPACT) + " |\n|---|" + "---:|" * (len(COMPACT) - 1) + "\n| seed | " in out
    assert _explains(out, COMPACT), out
    assert "--wide shows all 15" in out
    assert not any(h in out for h in ("tracker", "output tok/s", "running/rank", "queue/rank", "token usage", "vetoed", "delay runs")), out
    assert cli([*argv, "--wide", "--json", str(tmp_path / "wide.json")]) == 0
    out = capsys.readouterr().out
    assert "| " + " | ".join(WIDE) + " |\n|---|---|" + "---:|" * (len(WIDE) - 2) + "\n| seed | lifetime | " in out
    assert _explains(out, WIDE), out
    assert (tmp_path / "compact.json").read_text() == (tmp_path / "wide.json").read_text()
    assert set(json.loads((tmp_path / "wide.json").read_text())["results"][0]["summary"]) >= {
        "passes", "output_tok_s", "running_per_rank", "queue_per_rank", "token_usage", "split_share", "veto_share", "delay_runs"}


def test_json_report(tmp_path, capsys):
    path = tmp_path / "out" / "r.json"
    assert cli([*SMALL, "--profile", "hardened", "--tracker", "lifetime", "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    (res,) = doc["results"]
    assert (res["name"], res["label"], res["tracker"], res["tracker_chosen_by"]) == ("hardened", "hardened+lifetime", "lifetime", "option")
    assert res["summary"]["passes"] == 120 and doc["settings"]["dp_size"] == 2
    assert set(res["summary"]["decisions"]) and abs(sum(res["summary"]["decisions"].values()) - 1) < 1e-9


def test_plot_writes_a_png(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = tmp_path / "fig.png"
    assert cli([*SMALL, "--profile", "seed", "--profile", "hardened", "--plot", str(path)]) == 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_progress_bar_only_when_asked(capsys):
    assert cli([*SMALL, "--profile", "seed", "--progress"]) == 0
    err = capsys.readouterr().err
    assert "seed [" in err and "passes/s" in err and "100%" in err
    assert cli([*SMALL, "--profile", "seed", "--no-progress"]) == 0
    assert capsys.readouterr().err == ""


def test_a_scenario_with_overrides(capsys):
    assert cli(["simulate", "--scenario", "35241", "--duration", "60", "--warmup", "10", "--profile", "seed", "--drift", "0,1,0,1,0,1,0,1",
                "--wide"]) == 0
    out = capsys.readouterr().out
    assert "Engine: DP=8" in out and "drift 0,1,0,1,0,1,0,1 chunks" in out and "| seed | lifetime |" in out


def test_duration_alone_lifts_the_pass_cap():
    argv = [a for a in SMALL if a not in ("--passes", "120")]
    config = build(build_parser().parse_args([*argv, "--duration", "50"]))[0]
    assert config.passes == sys.maxsize and config.duration_s == 50
    assert build(build_parser().parse_args([*SMALL, "--duration", "50"]))[0].passes == 120


def test_a_trace_replay(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.1},{300 + i},{3 + i % 4}\n" for i in range(20)))
    assert cli(["simulate", "--workload", "trace", "--trace", str(trace), "--dp-size", "2", "--profile", "seed"]) == 0
    assert f"trace {trace} (20 requests)" in capsys.readouterr().out


def test_a_trace_says_where_it_starts_and_that_it_ran_out_before_the_duration(tmp_path, capsys):
    """A trace is replayed from its first arrival, and a run whose requests were all served before --duration ends
    there: the header says both, which the measured seconds alone do not."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n50,1000,10\n60,2000,10\n")
    argv = ["simulate", "--workload", "trace", "--trace", str(trace), "--duration", "100", "--warmup", "0", "--profile", "off"]
    assert cli(argv) == 0
    out = capsys.readouterr().out
    assert f"trace {trace} (2 requests, arrivals from its first at 50 s, replayed from 0 s)" in out
    assert re.search(r"Measured: 10 simulated s .*\(every request had arrived and been served by 10\.\d s, "
                     r"before --duration 100\)", out), out
    assert cli(["simulate", "--scenario", "35241", "--duration", "205", "--profile", "off"]) == 0
    assert "every request had arrived" not in capsys.readouterr().out  # a closed loop never runs out


def test_a_trace_measures_every_profile_over_the_same_seconds(tmp_path, capsys):
    """Every profile serves a trace's tokens in full; the one that finishes first sits idle to the last one's end,
    so the same tokens read the same tok/s (not more for the faster one: before, each profile was measured to its
    own last completion), and the header and --json say when each had served everything."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n" + "".join(f"{i * 0.01:.2f},{2000 + 37 * (i % 50)},{20 + i % 30}\n"
                                                                         for i in range(600)))
    out_json = tmp_path / "r.json"
    argv = ["simulate", "--workload", "trace", "--trace", str(trace), "--dp-size", "4", "--profile", "off",
            "--profile", "sglang-0.5.23", "--json", str(out_json)]
    assert cli(argv) == 0
    out = capsys.readouterr().out
    results = json.loads(out_json.read_text())["results"]
    served = {r["label"]: r["served_all_s"] for r in results}
    assert all(s is not None for s in served.values()) and len(set(served.values())) == 2, served  # they differ
    seconds = {r["label"]: r["summary"]["sim_seconds"] for r in results}
    assert len(set(seconds.values())) == 1, seconds
    assert max(served.values()) == pytest.approx(next(iter(seconds.values())), abs=1e-9)
    assert len({r["summary"]["input_tok_s"] for r in results}) == 1
    assert all(r["summary"]["unserved"] == 0 for r in results)
    said = ", ".join(f"{label} {s:.1f} s" for label, s in served.items())
    assert f"(every request had arrived and been served: {said}; each profile measured to the last)" in out, out


def test_an_idle_engine_is_measured_to_the_duration(tmp_path):
    """A run idle when --duration comes (its next request arrives later) is measured to --duration, not to its
    last pass: before, an idle tail was left out of the window and the tok/s read high."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n0,1000,5\n90,1000,5\n")
    out_json = tmp_path / "r.json"
    assert cli(["simulate", "--workload", "trace", "--trace", str(trace), "--duration", "50", "--profile", "off",
                "--json", str(out_json)]) == 0
    (r,) = json.loads(out_json.read_text())["results"]
    assert r["summary"]["sim_seconds"] == pytest.approx(50.0, abs=0.05) and r["served_all_s"] is None
    assert r["summary"]["input_tok_s"] == pytest.approx(1000 / r["summary"]["sim_seconds"])


def test_the_scenario_s_resubmit_gap_leaves_with_its_closed_loop(capsys):
    """--resubmit-gap belongs to a closed loop: another workload than #35241's drops the scenario's, not refused."""
    config = build(build_parser().parse_args(["simulate", "--scenario", "35241", "--workload", "poisson", "--rate", "3",
                                              "--prompt-tokens", "100", "--output-tokens", "10"]))[0]
    assert config.resubmit_gap_s == 0.0


def _bad_trace(tmp_path: Path) -> str:
    path = tmp_path / "bad.csv"
    path.write_text("arrival,prompt_tokens,output_tokens\n0,100,5\n0.5,lots,5\n")
    return str(path)


BAD = [
    (["--rate", "0"], "--rate must be a finite number of requests per second > 0, got 0\n"),
    (["--rate", "-2"], "--rate must be a finite number of requests per second > 0, got -2\n"),
    (["--chunked-prefill-size", "0"], "invalid --chunked-prefill-size 0: expected an integer in [1, 2147483647]"),
    (["--dp-size", "0"], "--dp-size must be an integer in [1, 256], got 0"),
    (["--profile", "sglang-9.9"], "unknown profile 'sglang-9.9': expected one of seed, sglang-0.5.17"),
    (["--passes", "0"], "invalid --passes 0: expected an integer >= 1"),
    (["--max-total-tokens", "1000"], "(2000 prompt + 40 output tokens) could never be admitted"),
    # SGLang's admission wants a page more than the prompt and a reserve token beside the output: 2,043 tokens here
    (["--max-total-tokens", "2042"], "needs more than --max-total-tokens 2042 (--page-size 1)"),
    (["--max-total-tokens", "2100", "--page-size", "1000"], "needs more than --max-total-tokens 2100 (--page-size 1000)"),
    (["--page-size", "2000000"], "--page-size 2000000 exceeds --max-total-tokens 1000000"),
    (["--concurrency", "4"], "--concurrency does not apply to --workload poisson"),
    (["--max-delay-passes", "-1"], "invalid --max-delay-passes -1"),
    (["--token-usage-low-watermark", "1.5"], "invalid --token-usage-low-watermark 1.5"),
    (["--mixed-chunk", "--max-running-requests", "2000"], "--chunked-prefill-size 1024 must exceed --max-running-requests 2000"),
    (["--prompt-tokens", "9:3"], "--prompt-tokens must be N or LO:HI with integers 1 <= LO <= HI, got '9:3'"),
    (["--warmup", "5", "--duration", "5"], "--warmup 5 must be shorter than --duration 5: the tables measure"),
    (["--workload", "bursty", "--burst", "0"], "--burst must be an integer >= 1 (requests per burst), got 0"),
    (["--cost-idle-pass", "0"], "invalid --cost-idle-pass 0: a pass without a forward must take some time"),
    (["--health-check-interval", "0"], "invalid --health-check-interval 0: expected a finite number of seconds > 0"),
    (["--prefix-cache"], "--prefix-cache needs --scheduler sglang"),
    (["--duration", "-5"], "invalid --duration -5: expected a finite number of seconds > 0"),
    (["--duration", "0"], "invalid --duration 0: expected a finite number of seconds > 0"),
    # options a Poisson run would drop without a word
    (["--resubmit-gap", "1"], "--resubmit-gap does not apply to --workload poisson (only to long-prompt)"),
    (["--health-dispatch", "shared"], "--health-dispatch needs --health-check-interval: with no GET /health probes"),
    # a --set of a setting with its own option: the header and --json would show the option's value
    (["--max-delay-passes", "10", "--set", "max_delay_passes=5"], "--set max_delay_passes: the option --max-delay-passes sets it"),
    (["--set", "max_delay_passes=5"], "give --max-delay-passes instead"),
    (["--profile", "pdi-0.5.23", "--set", "prefill_decode_interval=-1"],
     "profile 'pdi-0.5.23': invalid --set prefill_decode_interval=-1: expected integer"),
]


@pytest.mark.parametrize("extra, message", BAD)
def test_bad_input_is_one_line_and_exit_2(capsys, extra, message):
    assert cli([*SMALL, *extra]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("prefill-delayer simulate: ") and err.count("\n") == 1, err
    assert message in err
    # the options given, never a field's name=value (a policy's parameter after --set is the user's own NAME=VALUE)
    assert not re.search(r"(?<!--set )\b[a-z]+_[a-z_]+=", err), err


def test_an_empty_trace_name_is_refused_naming_the_option(capsys):
    """``--trace ""`` is refused as an empty output name is, naming the option (the reader's own line began ': ')."""
    assert cli(["simulate", "--workload", "trace", "--trace", ""]) == 2
    assert capsys.readouterr().err == "prefill-delayer simulate: --trace needs a file name, got an empty string\n"


def test_malformed_trace_names_file_and_line(tmp_path, capsys):
    path = _bad_trace(tmp_path)
    assert cli(["simulate", "--workload", "trace", "--trace", path]) == 2
    err = capsys.readouterr().err
    assert err == f"prefill-delayer simulate: {path}:3: prompt_tokens must be an integer >= 1, got 'lots'\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["simulate"], "no workload: name one with --workload"),
        (["simulate", "--workload", "long-prompt", "--prompt-tokens", "100", "--output-tokens", "1"], "--workload long-prompt needs --concurrency"),
        (["simulate", "--scenario", "35241", "--drift", "1,2"], "--drift lists 2 ranks, but --dp-size is 8"),
        (["simulate", "--scenario", "35241", "--drift", "random:x"], "--drift random:K needs an integer K >= 0"),
        (["simulate", "--scenario", "35241", "--wave", "3"], "--wave does not apply to --workload long-prompt"),
        (["simulate", "--scenario", "32880", "--json", "/dev/null/x.json"], "--json /dev/null/x.json"),
    ],
)
def test_more_bad_settings(capsys, argv, message):
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("prefill-delayer simulate: ") and message in err and err.count("\n") == 1


def test_argparse_rejects_malformed_numbers(capsys):
    with pytest.raises(SystemExit) as exc:
        cli([*SMALL, "--rate", "fast"])
    assert exc.value.code == 2
    assert "argument --rate: invalid float value: 'fast'" in capsys.readouterr().err


def test_command_line_bad_input_has_no_traceback_and_the_cli_imports_no_simulator(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "prefill_delayer.cli", "simulate", "--workload", "trace", "--trace", _bad_trace(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and ":3: prompt_tokens" in proc.stderr
    probe = (
        "import sys; import prefill_delayer.cli as c; c.build_parser(); "
        "heavy = [m for m in ('matplotlib', 'torch', 'prefill_delayer.sim.engine', 'prefill_delayer.runtime') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_bench_smoke(capsys):
    status = bench.main(["--passes", "30", "--dp-size", "2", "--profile", "seed", "--gather", "lockstep,threads"])
    out = capsys.readouterr().out
    assert (status, out.splitlines()[-1].startswith("every target met")) in ((0, True), (1, False)), out
    header = next(line for line in out.splitlines() if line.startswith("workload  "))
    assert "  passes/s  " in header and header.endswith("  running/rank"), out
    rows = [line for line in out.splitlines() if line.startswith(tuple(bench.workloads(2)))]
    assert len(rows) == 4 and all("  seed  " in row for row in rows), out
    assert "target: 10,000 passes at DP=8" in out


@pytest.mark.parametrize("name, value, message", [
    ("PREFILL_DELAYER_DECISION_LOG_MAX_MB", "abc", "PREFILL_DELAYER_DECISION_LOG_MAX_MB='abc': expected a whole number >= 1"),
    ("PREFILL_DELAYER_DECISION_LOG_KEEP", "-1", "PREFILL_DELAYER_DECISION_LOG_KEEP='-1': expected a whole number >= 0"),
    ("PREFILL_DELAYER_DECISION_LOG_ROWS", "bogus", "PREFILL_DELAYER_DECISION_LOG_ROWS='bogus': expected compact"),
])
def test_a_bad_decision_log_option_is_one_line_before_any_run(tmp_path, monkeypatch, capsys, name, value, message):
    logs = tmp_path / "logs"
    monkeypatch.setenv("PREFILL_DELAYER_DECISION_LOG", str(logs))
    monkeypatch.setenv(name, value)
    assert cli([*SMALL, "--profile", "hardened"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("prefill-delayer simulate: ") and err.count("\n") == 1 and message in err, err
    assert not logs.exists()  # no rank opened its log


def test_a_cross_check_setting_it_does_not_take_is_one_line_before_any_run(monkeypatch, capsys):
    monkeypatch.setenv("PREFILL_DELAYER_CROSSCHECK", "yes")
    assert cli([*SMALL, "--profile", "hardened"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("prefill-delayer simulate: PREFILL_DELAYER_CROSSCHECK='yes': expected 1 or true (on), "
                                 "or 0, false or unset (off)\n"), err
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--passes", "20", "--dp-size", "2", "--profile", "hardened"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "PREFILL_DELAYER_CROSSCHECK='yes'" in err, err


@pytest.mark.parametrize("where, message", [
    ("a-file", "a-file is a file; expected a folder"),
    ("a-file/logs", "is inside"),
])
def test_a_decision_log_folder_that_cannot_be_made_is_one_line_before_any_run(tmp_path, monkeypatch, capsys, where,
                                                                            message):
    """A server goes on without a log it cannot open; a simulation asked for one, so it says so before any run."""
    (tmp_path / "a-file").write_text("kept\n")
    monkeypatch.setenv("PREFILL_DELAYER_DECISION_LOG", str(tmp_path / where))
    assert cli([*SMALL, "--profile", "hardened"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("prefill-delayer simulate: PREFILL_DELAYER_DECISION_LOG: ") and message in err, err
    assert err.count("\n") == 1 and (tmp_path / "a-file").read_text() == "kept\n"


class _FullAfterHeader:
    """A rank's log file on a disk that fills up once the header is written: every later write fails."""

    def __init__(self, f: Any) -> None:
        self._f = f

    def write(self, text: str) -> int:
        raise OSError(28, "No space left on device")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _disk_full_after_header(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefill_delayer.runtime import decision_log

    real = decision_log.DecisionLog._open

    def opened(self: Any) -> None:
        real(self)
        self._file = _FullAfterHeader(self._file)

    monkeypatch.setattr(decision_log.DecisionLog, "_open", opened)


def test_a_decision_log_that_stops_in_the_run_fails_the_command_after_the_tables(tmp_path, monkeypatch, capsys):
    """The runtime goes on without its log (a server must); the run's tables and --json are whole and written, and the
    command ends with one line and exit 2, where it used to end with exit 0 and logs of a header each."""
    _disk_full_after_header(monkeypatch)
    monkeypatch.setenv("PREFILL_DELAYER_DECISION_LOG", str(tmp_path / "logs"))
    assert cli([*SMALL, "--profile", "hardened", "--profile", "off", "--json", str(tmp_path / "r.json")]) == 2
    out, err = capsys.readouterr()
    assert "| hardened |" in out and json.loads((tmp_path / "r.json").read_text())
    last = err.splitlines()[-1]
    assert last.startswith("prefill-delayer simulate: the decision log stopped on 2 ranks in 1 run (first: hardened, "
                           "rank 0: write: OSError: [Errno 28] No space left on device)"), err
    assert f"the files in {tmp_path / 'logs'} end early" in last


def test_a_suite_whose_decision_log_stops_fails_after_its_tables(tmp_path, monkeypatch, capsys):
    _disk_full_after_header(monkeypatch)
    monkeypatch.setenv("PREFILL_DELAYER_DECISION_LOG", str(tmp_path / "logs"))
    assert cli(["simulate", "--suite", "calibration", "--duration", "20", "--profile", "hardened", "--profile", "off"]) == 2
    out, err = capsys.readouterr()
    assert "Suite calibration" in out and "wall time:" in out
    assert err.splitlines()[-1].startswith("prefill-delayer simulate: the decision log stopped on "), err
    assert " runs (first: " in err.splitlines()[-1]


def test_a_suite_writes_each_run_s_decision_log_into_its_own_folder(tmp_path, monkeypatch, capsys):
    """Runs on two processes into one folder rotated each other's files (check-log then saw interleaved
    configurations); each run now has DIR/WORKLOAD/POLICY, and each checks clean on its own."""
    monkeypatch.setenv("PREFILL_DELAYER_DECISION_LOG", str(tmp_path / "logs"))
    argv = ["simulate", "--suite", "calibration", "--duration", "5", "--profile", "hardened", "--profile", "off",
            "--jobs", "2", "--no-progress"]
    assert cli(argv) == 0
    capsys.readouterr()
    runs = sorted(p.parent.relative_to(tmp_path / "logs").as_posix() for p in (tmp_path / "logs").rglob("rank0.jsonl"))
    assert runs == sorted(f"{w}/hardened" for w in ("32880", "35241", "35241-dispatch-0.5.17", "35241-dispatch-0.5.23",
                                                   "35241-drift-1", "35241-drift-3", "35241-drift-stair"))
    assert not list((tmp_path / "logs").rglob("*.jsonl.1"))  # no run rotated another's log
    for run in runs:
        assert cli(["check-log", str(tmp_path / "logs" / run)]) == 0, run
    assert "result: clean" in capsys.readouterr().out


def test_a_run_without_a_decision_log_has_no_log_failures(tmp_path, monkeypatch, capsys):
    """The check that fails the command reads the logs' own failure: with logs that write, exit 0."""
    monkeypatch.setenv("PREFILL_DELAYER_DECISION_LOG", str(tmp_path / "logs"))
    assert cli([*SMALL, "--profile", "hardened"]) == 0
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["rank0.jsonl", "rank1.jsonl"]


@pytest.mark.parametrize("concurrency, message", [
    ("100000000", "--concurrency 100,000,000: at most 1,000,000 clients"),
    ("0", "--concurrency must be an integer >= 1, got 0"),
])
def test_a_closed_loop_s_concurrency_is_bounded(capsys, concurrency, message):
    """A hundred million clients used to take gigabytes before the first pass; now one line, exit 2."""
    argv = ["simulate", "--workload", "long-prompt", "--concurrency", concurrency, "--prompt-tokens", "1000",
            "--output-tokens", "10", "--passes", "20", "--profile", "off"]
    assert cli(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err, err


@pytest.mark.parametrize("message, said", [
    ("invalid chunked_prefill_size (the chunk budget)=0: expected", "invalid --chunked-prefill-size 0: expected"),
    ("prefix_cache needs scheduler=sglang (the model has no prefix cache)",
     "--prefix-cache needs --scheduler sglang (the model has no prefix cache)"),
    ("invalid cost idle_pass_s=0: a pass", "invalid --cost-idle-pass 0: a pass"),
    # the value as the option was typed: its float's .0 is argparse's; integers and text stay as they are
    ("invalid duration_s=-5.0: expected", "invalid --duration -5: expected"),
    ("invalid cost floor_s=2e+20: expected", "invalid --cost-floor 2e+20: expected"),
    ("invalid max_delay_ms=1e-05: expected", "invalid --max-delay-ms 1e-05: expected"),
    ("invalid max_total_tokens=123456789012345678901: expected", "invalid --max-total-tokens 123456789012345678901: expected"),
    ("invalid gather='x.0': expected", "invalid --gather 'x.0': expected"),
    ("rate must be a finite number", "--rate must be a finite number"),
    # prose and the policy's own parameter names stay as they are
    ("the rate at which passes run", "the rate at which passes run"),
    ("--set max_delay_passes=3: no such", "--set max_delay_passes=3: no such"),
    ("max_total_tokens (a gloss) stays", "--max-total-tokens (a gloss) stays"),
])
def test_a_setting_s_message_names_the_option_that_gives_it(message, said):
    from prefill_delayer.sim.cli import in_options

    assert in_options(message) == said


@pytest.mark.parametrize("argv, said", [
    # one rank, one running slot: 'the 1 request its one rank runs at once', not '1 requests all 1 ranks run'
    (["--workload", "poisson", "--rate", "100", "--prompt-tokens", "10", "--output-tokens", "1"],
     "--rate 100: 4 requests would arrive in one 0.04 s pass, more than the 1 request its one rank runs at once; "
     "at most 25 req/s here"),
    (["--workload", "poisson", "--rate", "1", "--prompt-tokens", "10", "--output-tokens", "1", "--health-check-interval",
      "0.001"], "more than the 1 request its one rank runs at once; at least 0.04 s here"),
    (["--workload", "long-prompt", "--concurrency", "2000000", "--prompt-tokens", "10", "--output-tokens", "1"],
     "past the 1 request its one rank runs at once, the rest only wait in their queues"),
    # an unset delayer setting is an option left out, not Python's None; --set takes it as none
    (["--workload", "poisson", "--rate", "1", "--prompt-tokens", "10", "--output-tokens", "1",
      "--token-usage-low-watermark", "2"],
     "expected a finite number in [0, 1], or no --token-usage-low-watermark (off)"),
    (["--workload", "poisson", "--rate", "1", "--prompt-tokens", "10", "--output-tokens", "1", "--max-delay-ms", "-5"],
     "expected a finite number > 0, or no --max-delay-ms (5000)"),
    (["--workload", "poisson", "--rate", "1", "--prompt-tokens", "10", "--output-tokens", "1", "--profile", "aligned",
      "--set", "quorum_percent=500"], "invalid --set quorum_percent=500: expected none (off) or an integer in [1, 100]"),
    # a check between two parameters names the one given with --set as such, and says none as --set takes it
    (["--workload", "poisson", "--rate", "1", "--prompt-tokens", "10", "--output-tokens", "1", "--profile", "aligned",
      "--set", "busy_watermark=0.1"], "profile 'aligned': --set busy_watermark=0.1 must be above low_load_watermark=0.28 "
     "(a rank below the watermark is never a busy one), or none to turn the busy rule off"),
    (["--workload", "poisson", "--rate", "1", "--prompt-tokens", "10", "--output-tokens", "1", "--profile", "aligned",
      "--set", "low_load_watermark=0.6"], "profile 'aligned': busy_watermark=0.5 must be above --set "
     "low_load_watermark=0.6 (a rank below the watermark is never a busy one), or none to turn the busy rule off"),
])
def test_messages_are_plain_english(capsys, argv, said):
    """Counts agree with their noun, and an unset value is said as the operator gives it (no 'None', no '1 requests')."""
    assert cli(["simulate", "--dp-size", "1", "--max-running-requests", "1", "--passes", "5", "--profile", "off", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1, err
    assert not re.search(r"\bNone\b|\b1 (requests|ranks)\b", err), err


def test_counts_of_one_are_singular(tmp_path, capsys):
    trace = tmp_path / "one.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n0,100,3\n")
    assert cli(["simulate", "--workload", "trace", "--trace", str(trace), "--dp-size", "1", "--profile", "off"]) == 0
    assert f"trace {trace} (1 request)" in capsys.readouterr().out
    assert cli(["simulate", "--suite", "calibration", "--duration", "5", "--profile", "off", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Suite calibration: 7 workloads x 1 policy\n"), out[:80]


@pytest.mark.parametrize("prompt, drift, said", [
    ("2000", "5", "--drift 5: a rank's first request would start 5 chunks into its prompt, and a 2,000-token prompt has "
     "2 chunks of at most 1,024 tokens (--chunked-prefill-size): nothing would be left to prefill; at most 1"),
    ("2000", "2", "would start 2 chunks into its prompt, and a 2,000-token prompt has 2 chunks"),
    ("2000", "0,2", "would start 2 chunks into its prompt"),
    ("500:4000", "random:1", "--drift random:1: a rank's first request may start up to 1 chunk into its prompt, and the "
     "shortest prompt, 500 tokens, has 1 chunk of at most 1,024 tokens (--chunked-prefill-size): nothing would be left "
     "to prefill; at most 0"),
])
def test_a_drift_past_the_prompt_is_refused(capsys, prompt, drift, said):
    """A drift of as many chunks as the prompt has used to be cut to the prompt's end without a word (its first
    request one token long): the run was not the drift given."""
    argv = ["simulate", "--workload", "long-prompt", "--concurrency", "4", "--prompt-tokens", prompt, "--output-tokens",
            "1", "--dp-size", "2", "--chunked-prefill-size", "1024", "--passes", "20", "--profile", "off", "--drift", drift]
    assert cli(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("prefill-delayer simulate: --drift ") and err.count("\n") == 1, err
    assert said in err, err
    assert cli([*argv[:-1], "1" if ":" not in prompt else "random:0"]) == 0  # one chunk fewer runs
    assert "drift " in capsys.readouterr().out


def test_off_claims_no_tracker(tmp_path, capsys):
    """off has no delayer, so nothing reads max_prefill_bs: --tracker sets the others' and off's label and column say
    none (before: 'off+lifetime', tracker lifetime); --tracker with off alone would do nothing, and is refused."""
    path = tmp_path / "r.json"
    assert cli([*SMALL, "--tracker", "lifetime", "--profile", "off", "--profile", "seed", "--wide", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "| off | none | " in out and "| seed | lifetime | " in out and "off+" not in out, out
    got = [(r["label"], r["tracker"], r["tracker_chosen_by"]) for r in json.loads(path.read_text())["results"]]
    assert got == [("off", "none", "none"), ("seed", "lifetime", "option")]
    assert cli([*SMALL, "--tracker", "lifetime", "--profile", "off"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("prefill-delayer simulate: --tracker lifetime: off runs no delayer, so nothing reads "
                                 "max_prefill_bs and no tracker runs; --tracker sets it for the profiles with a delayer\n")


def test_a_policy_whose_settings_defer_nothing_is_said_to_run_as_off(capsys):
    """SGLang's gate at interval 0 and vLLM's cadence at 1, their engines' defaults, defer no prefill: their rows were
    off's, with nothing to say so (before: the header named no interval). The header says it, naming the setting."""
    assert cli([*SMALL, "--profile", "off", "--profile", "pdi-0.5.23", "--profile", "pdi-hardened", "--profile",
                "vllm-0.33.0", "--profile", "hardened"]) == 0
    head = capsys.readouterr().out.split("\n\n", 1)[0].splitlines()
    assert head[-2:] == [
        "As off: pdi-0.5.23 and pdi-hardened ran with prefill_decode_interval 0 (off), at which they defer no prefill and "
        "run as off does (--set prefill_decode_interval=N for another interval)",
        "As off: vllm-0.33.0 ran with prefill_schedule_interval 1 (every step), at which it defers no prefill and runs as "
        "off does (--set prefill_schedule_interval=N for another interval)"], head
    assert cli([*SMALL, "--profile", "pdi-0.5.23", "--profile", "cadence-hardened", "--set", "prefill_decode_interval=3",
                "--set", "prefill_schedule_interval=4"]) == 0
    assert "As off" not in capsys.readouterr().out
    assert cli(["simulate", "--suite", "calibration", "--duration", "5", "--profile", "cadence-hardened", "--profile",
                "off", "--no-progress"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("As off: cadence-hardened ran with prefill_schedule_interval 1")


def test_a_policy_at_its_runs_as_off_value_serves_as_off_does(tmp_path):
    """Every parameter the spec marks ``runs_as_off``: its policy at that value gives off's figures, run for run, on
    a workload where a deferring policy would not (so the "As off" line says something true, and a spec that marks
    a value that still defers fails here)."""
    from prefill_delayer.spec.registry import all_profiles, policy_of

    marked = {p.name: p.runs_as_off for prof in all_profiles() for p in policy_of(prof).params if p.runs_as_off is not None}
    assert set(marked) == {"prefill_decode_interval", "prefill_schedule_interval"}, marked
    base = ["simulate", "--workload", "poisson", "--rate", "40", "--prompt-tokens", "500:3000", "--output-tokens",
            "20:200", "--dp-size", "4", "--duration", "20", "--profile", "off"]
    for name, value in marked.items():
        profile = next(prof for prof in all_profiles() if any(p.name == name for p in policy_of(prof).params))
        figures = {}
        for setting in (value, value + 3):
            out = tmp_path / f"{name}-{setting}.json"
            assert cli([*base, "--profile", profile, "--set", f"{name}={setting}", "--json", str(out)]) == 0
            off, run = (r["summary"] for r in json.loads(out.read_text())["results"])
            figures[setting] = {k: (off[k], run[k]) for k in ("input_tok_s", "ttft_p50_s", "ttft_p99_s", "passes")}
        assert all(a == b for a, b in figures[value].values()), (name, figures[value])
        assert any(a != b for a, b in figures[value + 3].values()), (name, figures[value + 3])  # and it can differ




@pytest.mark.parametrize("extra, said", [
    (["--rate", "inf"], "prefill-delayer simulate: --rate must be a finite number of requests per second > 0, got inf\n"),
    (["--rate", "1e400"], "prefill-delayer simulate: --rate must be a finite number of requests per second > 0, got inf\n"),
    (["--workload", "bursty", "--burst", "4", "--rate", "inf"],
     "prefill-delayer simulate: --rate must be a finite number of requests per second > 0, got inf\n"),
    # a finite rate far past the engine's: the count that would arrive is said as a float writes it, not in 299 digits
    (["--rate", "1e300"], "prefill-delayer simulate: --rate 1e+300: 4e+298 requests would arrive in one 0.04 s pass, "
     "more than the 16 requests all 2 ranks run at once; at most 400 req/s here\n"),
])
def test_a_rate_that_is_no_finite_number_is_one_line(capsys, extra, said):
    """--rate inf (or 1e400, which a float reads as inf) ended in an OverflowError's traceback and exit 1: the
    capacity check counted the infinitely many requests that would arrive in one pass."""
    assert cli([*SMALL, *extra]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", said)


@pytest.mark.parametrize("extra, said", [
    # each coefficient is a part of one pass: past SGLang's watchdog (300 s by default) no deployment's pass has it
    (["--cost-floor", "1e308", "--cost-idle-pass", "1e308"], "invalid --cost-floor 1e+308: expected at most 300 s, "
     "SGLang's default --watchdog-timeout, past which a server takes its forward batch for hung and exits"),
    (["--cost-moe-token", "1e300"], "invalid --cost-moe-token 1e+300: expected at most 300 s"),
    (["--cost-idle-pass", "301"], "invalid --cost-idle-pass 301: expected at most 300 s"),
    # a rate refused for a pass the user lengthened names the option that lengthened it
    (["--cost-floor", "100"], "--rate 3: 300 requests would arrive in one 100 s pass (--cost-floor 100), more than the 16 "
     "requests all 2 ranks run at once; at most 0.16 req/s here\n"),
    # past the floor, the shortest pass is one prefill token's or one decoding request's: the option that sets it
    (["--rate", "100", "--cost-attn-token", "0.25", "--cost-attn-decode", "0.2"], "--rate 100: 20 requests would arrive "
     "in one 0.200009 s pass (--cost-attn-decode 0.2), more than"),
    (["--rate", "100", "--cost-attn-token", "0.2", "--cost-attn-decode", "0.25"], "--rate 100: 20 requests would arrive "
     "in one 0.200009 s pass (--cost-attn-token 0.2), more than"),
])
def test_a_cost_coefficient_no_deployment_has_is_one_line_naming_it(capsys, extra, said):
    """--cost-floor 1e308 ended in an OverflowError's traceback; --cost-moe-token 1e300 blamed --rate 5 with a
    300-digit count of requests."""
    assert cli([*SMALL, *extra]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("prefill-delayer simulate: ") and err.count("\n") == 1 and said in err, err


def test_a_pass_longer_than_sglang_s_watchdog_is_refused_before_any_run():
    """Each coefficient within bounds, the longest pass the engine allows still may not be: 299 s per prefill token made
    passes of days, each drawing its arrivals into memory (gigabytes within a minute, and no end). Refused as the
    settings are built, naming the options and the coefficient that makes it long."""
    args = build_parser().parse_args([*SMALL, "--cost-attn-token", "299"])
    with pytest.raises(ValueError) as exc:
        build(args)
    assert str(exc.value) == (
        "a pass of 1024 prefill tokens and 8 decoding requests on each of 2 ranks (--chunked-prefill-size, "
        "--max-running-requests, --dp-size) takes 3.06e+05 s, most of it from --cost-attn-token 299: past 300 s, SGLang's "
        "default --watchdog-timeout, at which a server takes its forward batch for hung and exits")
    # the same settings with the chunk that fits stay a run
    build(build_parser().parse_args([*SMALL, "--cost-attn-token", "0.2"]))


@pytest.mark.parametrize("extra", [
    ["--profile", "hardened"], ["--profile", "seed"], ["--profile", "aligned"], ["--profile", "sglang-0.5.17"],
    ["--profile", "lockstep"], ["--profile", "hardened", "--gather", "threads"],
    [],  # every profile: it named trtllm-adp-balance's max_batch_size, which the option stands for
])
def test_an_engine_count_past_what_a_row_carries_names_the_option_before_any_run(capsys, extra):
    """--max-running-requests 2147483648 failed the first pass's gather: exit 1 and a 23 KB chained traceback
    printing the rows' raw bytes, or, where a policy's parameter stands for the option, a line blaming that
    parameter. The bound is the spec's count (MAX_COUNT), checked with the other settings, before any run."""
    from prefill_delayer.spec.fields import MAX_COUNT

    too_many = str(MAX_COUNT + 1)
    assert cli([*SMALL, "--max-running-requests", too_many, *extra]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"prefill-delayer simulate: invalid --max-running-requests {too_many}: expected an integer "
                              f"in [1, {MAX_COUNT}], the counts a policy's gathered rows carry\n")


@pytest.mark.parametrize("option", ["--chunked-prefill-size", "--max-prefill-tokens", "--max-total-tokens", "--page-size"])
def test_every_engine_count_is_bounded_by_what_a_row_carries(capsys, option):
    """--chunked-prefill-size 99999999999999999999 was blamed on atom-coalescer's max_num_batched_tokens."""
    assert cli([*SMALL, option, "99999999999999999999"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"prefill-delayer simulate: invalid {option} 99999999999999999999: expected an integer in [1, "), err
    assert err.count("\n") == 1


@pytest.mark.parametrize("profile, setting, option", [
    ("atom-coalescer", "chunked_prefill_size", "--chunked-prefill-size"),
    ("trtllm-adp-balance", "max_running_requests", "--max-running-requests"),
    ("aligned", "chunked_prefill_size", "--chunked-prefill-size"),
])
def test_a_policy_parameter_that_stands_for_an_engine_option_is_named_as_that_option(profile, setting, option):
    """A policy's parameter given by a scheduler setting (``SimBinding.params``) is checked by the policy: its
    message names the setting the user gave (said as the option by the command), not the parameter they never typed."""
    from prefill_delayer.sim.cli import in_options
    from prefill_delayer.sim.config import SimConfig
    from prefill_delayer.sim.errors import SimInputError
    from prefill_delayer.sim.policy_site import policy_config

    settings = {**SimConfig(dp_size=2).policy_settings(), setting: 2**31}
    with pytest.raises(SimInputError) as exc:
        policy_config(profile, 2, settings)
    assert str(exc.value).startswith(f"profile '{profile}': invalid {setting}=2147483648: expected "), exc.value
    assert in_options(str(exc.value)).startswith(f"profile '{profile}': invalid {option} 2147483648: expected ")


@pytest.mark.parametrize("argv", [
    [*SMALL, "--profile", "aligned"],
    ["simulate", "--suite", "default", "--profile", "aligned", "--duration", "1"],
])
def test_a_set_given_twice_is_refused(capsys, argv):
    """The last --set used to win, silently, while --json's settings.policy_params listed both; PREFILL_DELAYER_PARAMS,
    --seeds and --load-scale refuse a name or value given twice, and so does --set now."""
    assert cli([*argv, "--set", "quorum_percent=1", "--set", "quorum_percent=100"]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", "prefill-delayer simulate: --set quorum_percent is given twice: give each parameter once\n")


@pytest.mark.parametrize("both", [["--progress", "--no-progress"], ["--no-progress", "--progress"]])
def test_progress_and_no_progress_together_are_a_usage_error(capsys, both):
    """Both were taken, the last one winning, silently."""
    with pytest.raises(SystemExit) as exit_:
        cli([*SMALL, "--profile", "seed", *both])
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and out == "" and err.count("\n") == 1, err
    assert f"argument {both[1]}: not allowed with argument {both[0]}" in err, err


def _first_duration_the_clock_cannot_reach() -> float:
    """The first power of two where a float's step exceeds the default cost model's shortest pass (an idle one)."""
    from prefill_delayer.sim.cost import SGLANG_35241

    shortest = min(SGLANG_35241.idle_pass_s, SGLANG_35241.shortest_forward_s())
    x = 1.0
    while math.ulp(x) <= shortest:
        x *= 2
    return x


def test_a_duration_the_simulated_clock_cannot_count_to_is_refused_before_any_run():
    """--duration 1e308 ran without end (3.7 GB after ten minutes): there a pass does not move the clock at all."""
    from prefill_delayer.sim.errors import SimInputError

    too_far = _first_duration_the_clock_cannot_reach()
    with pytest.raises(SimInputError) as exc:
        build(build_parser().parse_args([*SMALL, "--duration", "1e308"]))
    assert str(exc.value) == ("invalid --duration 1e+308: the simulated clock, a 64-bit float, steps by 2e+292 s there, "
                              f"more than the shortest pass (0.0015 s), which it could not count: expected less than "
                              f"{too_far:.4g} s")
    with pytest.raises(SimInputError, match=r"^invalid --duration 8796093022208: .* steps by 0\.00195 s there"):
        build(build_parser().parse_args([*SMALL, "--duration", repr(too_far)]))
    build(build_parser().parse_args([*SMALL, "--duration", repr(math.nextafter(too_far, 0))]))  # the last it can


def test_a_suite_s_duration_the_clock_cannot_count_to_is_one_line(capsys):
    assert cli(["simulate", "--suite", "calibration", "--profile", "off", "--duration", "1e308"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("prefill-delayer simulate: invalid --duration 1e+308: the simulated clock, ")
    assert err.count("\n") == 1


@pytest.mark.parametrize("suite, profiles, seeds, count", [
    ("default", ["off", "seed"], "0-99999999999", 100_000_000_000),
    ("calibration", ["off"], "0-2147483647", 2_147_483_648),  # one policy: a run per workload at each seed
])
def test_seeds_are_a_count_of_runs(capsys, suite, profiles, seeds, count):
    """--seeds 0-99999999999 was taken: the sweep began to list (and compare) a hundred billion seeds. The seeds
    are a count of runs (each a run of every workload with every policy), at most the spec's count bound."""
    from prefill_delayer.spec.fields import MAX_COUNT
    from prefill_delayer.sim.suite import SUITES

    workloads = len(SUITES[suite])
    policies = "1 policy" if len(profiles) == 1 else f"{len(profiles)} policies"
    argv = ["simulate", "--suite", suite, *(a for p in profiles for a in ("--profile", p)), "--seeds", seeds]
    assert cli(argv) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"prefill-delayer simulate: --seeds {seeds}: {count:,} seeds, each a run of suite {suite}'s "
                              f"{workloads} workloads with {policies}, would be {count * workloads * len(profiles):,} "
                              f"runs, more than {MAX_COUNT:,}, the most of any count in the spec\n")


def test_a_seed_repeated_in_a_range_is_found_without_listing_the_range(capsys):
    assert cli(["simulate", "--suite", "default", "--seeds", "5,0-99999999999"]) == 2
    assert capsys.readouterr().err == "prefill-delayer simulate: --seeds: seed 5 is given twice in '5,0-99999999999'\n"


POISSON_ONE = ["simulate", "--workload", "poisson", "--rate", "5", "--prompt-tokens", "100", "--output-tokens", "10",
               "--dp-size", "2"]


def test_a_run_with_no_pass_in_its_measured_window_is_refused_and_writes_nothing(tmp_path, capsys):
    """--duration 1e-9 printed 'Measured: 0 simulated s', a table of zeros and an empty decisions table, exit 0:
    no request arrives before the end. Known only once the arrivals are drawn, so after the run, before any output."""
    out_json = tmp_path / "r.json"
    assert cli([*POISSON_ONE, "--profile", "seed", "--duration", "1e-9", "--json", str(out_json)]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", "prefill-delayer simulate: --duration 1e-09: no pass ran in the measured window, 0 to 1e-09 "
                              "simulated s: nothing would be measured; give a longer --duration\n")
    assert not out_json.exists()


def test_a_trace_served_within_the_warm_up_is_refused(tmp_path, capsys):
    trace = tmp_path / "one.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n0,100,3\n")
    assert cli(["simulate", "--workload", "trace", "--trace", str(trace), "--warmup", "5", "--dp-size", "1",
                "--profile", "off"]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(r"prefill-delayer simulate: --warmup 5: every request was served by 0\.\d+ simulated s, in "
                        r"passes that all began within the warm-up: nothing would be measured; shorten --warmup\n", err), err


def test_a_pass_cap_that_ends_the_run_before_the_window_s_first_pass_is_refused(capsys):
    """The cap's end past the warm-up (so the runs' own check let it by), its last pass begun inside it."""
    (first,) = simulate_cli([*POISSON_ONE, "--passes", "1", "--profile", "off"])
    warmup = first.t0[0] + first.dt[0] / 2  # inside the one pass: it began before, it ends after
    assert cli([*POISSON_ONE, "--passes", "1", "--profile", "off", "--warmup", repr(warmup)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("prefill-delayer simulate: --passes 1: the run's passes ran out at ") and err.endswith(
        " s --warmup: nothing would be measured; raise --passes or shorten --warmup\n"), err


def simulate_cli(argv: list[str]) -> list[Any]:
    """The runs ``simulate`` would make for ``argv``."""
    from prefill_delayer.sim.engine import simulate

    config, variants, workload, _ = build(build_parser().parse_args(argv))
    return simulate(config, variants, workload)


def test_a_short_measured_window_is_said_as_it_is(capsys):
    """One pass (a delayed one, 1.5 ms) was said as 'Measured: 0 simulated s', an empty window's figure."""
    (r,) = simulate_cli([*POISSON_ONE, "--profile", "seed", "--passes", "1"])
    assert cli([*POISSON_ONE, "--profile", "seed", "--passes", "1"]) == 0
    out = capsys.readouterr().out
    assert r.summary().passes == 1 and f"\nMeasured: {r.summary().sim_seconds:.2g} simulated s per profile" in out, out
    assert "\nMeasured: 0.0015 simulated s per profile after a 0 s warm-up\n" in out, out


def _refused_at_once(argv: list[str]) -> tuple[int, str, str]:
    """The command in a process of its own, which must end within a minute (a run it starts would not): its exit
    status (2), stdout and stderr."""
    done = subprocess.run([sys.executable, "-m", "prefill_delayer.cli", *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    return done.returncode, done.stdout, done.stderr


POISSON = ["simulate", "--workload", "poisson", "--rate", "10", "--prompt-tokens", "1000", "--output-tokens", "100",
           "--no-progress"]


@pytest.mark.parametrize("argv, option, per", [
    (["--wave", "1000000000"], "--wave", 8),  # a wave of N per rank on each of the default 8 ranks
    (["--workload", "bursty", "--burst", "1000000000"], "--burst", 1),
])
def test_requests_arriving_together_past_the_machine_s_memory_are_refused_before_the_run(argv, option, per):
    """``--wave 1000000000`` and ``--burst 1000000000`` made their requests at once before the first pass (3.7 GB in
    30 s, and on, showing nothing); now one line and exit 2 at once, the bound from the host's memory and the
    least a request takes."""
    rc, out, err = _refused_at_once([*POISSON, *argv])
    from prefill_delayer.sim.cli import REQUEST_BYTES, in_bytes, machine_memory

    requests = 10**9 * per
    assert out == "" and err.count("\n") == 1 and err.startswith(f"prefill-delayer simulate: {option} 1,000,000,000: "), err
    assert (f"each held in memory from then on, at least {REQUEST_BYTES} bytes apiece (a request's own object): at least "
            f"{in_bytes(requests * REQUEST_BYTES)}, more than the host's {in_bytes(machine_memory())} of memory; "
            f"past {option} {machine_memory() // (REQUEST_BYTES * per):,} they cannot fit in it\n") in err, err


@pytest.mark.parametrize("argv, said", [
    (["--wave", "2000", "--passes", "20", "--profile", "off"],
     "--wave 2,000: 16,000 requests, 2,000 on each of 8 ranks, would arrive together at t=0, each held in memory"),
    (["--workload", "bursty", "--burst", "20000", "--passes", "20", "--profile", "off"],
     "--burst 20,000: each burst's 20,000 requests would arrive together, each held in memory"),
    (["--passes", "20000", "--profile", "off"],
     "--passes 20,000: with no --duration, every run (1 profile) goes on to its last pass and keeps a record of every "
     "pass until the tables"),
])
def test_what_a_run_holds_is_measured_against_the_memory_there_is(monkeypatch, capsys, argv, said):
    """On a machine of 1 MiB, a wave, a burst or a pass count that fits a larger one: refused, the bound derived
    from that memory (these ran before, whatever the memory)."""
    from prefill_delayer.sim import cli as sim_cli

    monkeypatch.setattr(sim_cli, "machine_memory", lambda: 2**20, raising=False)
    assert cli([*POISSON, *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and said in err and "more than the host's 1 MiB of memory" in err, err


def test_passes_past_the_machine_s_memory_are_refused_where_the_run_would_reach_them(monkeypatch, capsys, tmp_path):
    """``--passes 1000000000000`` ran at 0% for years, every pass's record held; refused where every run goes on to
    its last pass (no --duration, arrivals that never stop), its bound from the machine's memory and the least a run
    keeps of a pass. With --duration, or a trace that runs out, the cap is not what ends the run: those still run."""
    rc, out, err = _refused_at_once([*POISSON, "--passes", str(10**12)])
    from prefill_delayer.sim.cli import in_bytes, machine_memory, pass_record_bytes
    from prefill_delayer.sim.config import SimConfig
    from prefill_delayer.sim.options import SIMULATED

    per = pass_record_bytes(SimConfig())
    profiles = len(SIMULATED)  # every simulated profile, the default
    assert out == "" and err == (
        f"prefill-delayer simulate: --passes 1,000,000,000,000: with no --duration, every run ({profiles} profiles) goes "
        f"on to its last pass and keeps a record of every pass until the tables, at least {per} bytes each: at least "
        f"{in_bytes(10**12 * per * profiles)}, more than the host's {in_bytes(machine_memory())} of memory; past "
        f"--passes {machine_memory() // (per * profiles):,} it cannot fit in it (--duration ends a run at a simulated time "
        "instead)\n"), err
    monkeypatch.setattr("prefill_delayer.sim.cli.machine_memory", lambda: 2**20)
    assert cli([*POISSON, "--passes", "20000", "--duration", "1", "--profile", "off"]) == 0
    trace = tmp_path / "t.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n0,100,5\n0.5,200,5\n")
    assert cli(["simulate", "--workload", "trace", "--trace", str(trace), "--passes", "20000", "--profile", "off"]) == 0
