"""``prefill-delayer simulate``: tables, JSON, plot, progress, and bad input as one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    for row in ("| seed | lifetime | ", "| sglang-0.5.20 | window | ", "| off | window | "):
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


def _bad_trace(tmp_path: Path) -> str:
    path = tmp_path / "bad.csv"
    path.write_text("arrival,prompt_tokens,output_tokens\n0,100,5\n0.5,lots,5\n")
    return str(path)


BAD = [
    (["--rate", "0"], "rate must be a finite number of requests per second > 0, got 0.0"),
    (["--rate", "-2"], "rate must be a finite number of requests per second > 0, got -2.0"),
    (["--chunked-prefill-size", "0"], "chunked_prefill_size (the chunk budget)=0: expected an integer >= 1"),
    (["--dp-size", "0"], "--dp-size must be an integer in [1, 256], got 0"),
    (["--profile", "sglang-9.9"], "unknown profile 'sglang-9.9': expected one of seed, sglang-0.5.17"),
    (["--passes", "0"], "passes=0: expected an integer >= 1"),
    (["--max-total-tokens", "1000"], "(2000 prompt + 40 output tokens) could never be admitted"),
    # SGLang's admission wants a page more than the prompt and a reserve token beside the output: 2,043 tokens here
    (["--max-total-tokens", "2042"], "needs more than max_total_tokens 2042 (page size 1)"),
    (["--max-total-tokens", "2100", "--page-size", "1000"], "needs more than max_total_tokens 2100 (page size 1000)"),
    (["--page-size", "2000000"], "page_size=2000000 exceeds max_total_tokens=1000000"),
    (["--concurrency", "4"], "--concurrency does not apply to --workload poisson"),
    (["--max-delay-passes", "-1"], "invalid max_delay_passes=-1"),
    (["--token-usage-low-watermark", "1.5"], "invalid token_usage_low_watermark=1.5"),
    (["--mixed-chunk", "--max-running-requests", "2000"], "chunked_prefill_size=1024 must exceed max_running_requests=2000"),
    (["--prompt-tokens", "9:3"], "--prompt-tokens must be N or LO:HI with integers 1 <= LO <= HI, got '9:3'"),
    (["--warmup", "5", "--duration", "5"], "--warmup 5 must be shorter than --duration 5: the tables measure"),
]


@pytest.mark.parametrize("extra, message", BAD)
def test_bad_input_is_one_line_and_exit_2(capsys, extra, message):
    assert cli([*SMALL, *extra]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("prefill-delayer simulate: ") and err.count("\n") == 1, err
    assert message in err


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
    rows = [line for line in out.splitlines() if line.endswith(" running/rank)")]
    assert len(rows) == 4 and all(" passes/s (" in row for row in rows), out
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
