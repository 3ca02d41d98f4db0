"""A value the user gave on the command line reads, where a message or a header quotes it, as they typed it.

argparse's ``float`` turns ``--duration -5`` into ``-5.0`` and ``:g`` rounds ``1234.5678`` to ``1234.57``; messages
and headers used to quote either (``invalid --duration -5.0``, ``max_delay_ms 1234.57``, two ``--load-scale`` columns
both named ``x1``). Each command here is run as a user runs it; ``spec.config.plain`` is what they all quote with.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from prefill_delayer.cli import main as cli
from prefill_delayer.spec.config import plain

POISSON = ["simulate", "--workload", "poisson", "--rate", "2", "--prompt-tokens", "100", "--output-tokens", "10",
           "--dp-size", "2", "--profile", "seed", "--no-progress", "--passes", "50"]


@pytest.mark.parametrize("x, shown", [(-5.0, "-5"), (0.0, "0"), (2e6, "2000000"), (0.5, "0.5"), (1e-05, "1e-05"),
                                      (1234.5678, "1234.5678"), (3, "3"), (float("nan"), "nan"), ("2x", "'2x'")])
def test_plain_writes_a_value_as_it_is_typed(x: object, shown: str) -> None:
    assert plain(x) == shown


@pytest.mark.parametrize("argv, said", [
    ([*POISSON, "--rate", "-2"], "--rate must be a finite number of requests per second > 0, got -2\n"),
    ([*POISSON, "--duration", "-5"], "invalid --duration -5: expected"),
    ([*POISSON, "--max-delay-ms", "-1"], "invalid --max-delay-ms -1: expected"),
    ([*POISSON, "--token-usage-low-watermark", "2"], "invalid --token-usage-low-watermark 2: expected"),
    ([*POISSON, "--cost-floor", "-1"], "invalid --cost-floor -1: expected"),
    ([*POISSON, "--resubmit-gap", "-1"], "invalid --resubmit-gap -1: expected"),
    ([*POISSON, "--health-check-interval", "0"], "invalid --health-check-interval 0: expected"),
    ([*POISSON, "--rate", "123456789"], "--rate 123456789: "),
    ([*POISSON, "--warmup", "1234567", "--duration", "1234567"], "--warmup 1234567 must be shorter than --duration 1234567:"),
    (["simulate", "--suite", "default", "--load-scale", "-2"], "got -2\n"),
    (["simulate", "--suite", "default", "--load-scale", "1.0000001", "--load-scale", "1.0000001"],
     "--load-scale 1.0000001 is given twice"),
    (["simulate", "--suite", "default", "--load-scale", "1e9"], "--load-scale 1000000000: "),
    (["simulate", "--suite", "default", "--duration", "-3"], "--duration must be simulated seconds > 0, got -3\n"),
    (["check-log", "--sample", "2", "logs"], "--sample must be a share in [0, 1], got 2\n"),
    # a bound the user is told to stay within, written as one would type it (it read "(0, 1.04858e+06]", 1048576 rounded)
    ([*POISSON, "--queue-min-ratio", "2000000"], "invalid --queue-min-ratio 2000000: expected a finite number in (0, 1048576]"),
    ([*POISSON, "--profile", "aligned", "--set", "busy_watermark=0.1", "--set", "low_load_watermark=0.123456789"],
     "--set busy_watermark=0.1 must be above --set low_load_watermark=0.123456789 "),
])
def test_an_option_s_value_in_a_message(argv: list[str], said: str, capsys: pytest.CaptureFixture) -> None:
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err, err


def test_the_simulate_header_quotes_the_settings_as_typed(capsys: pytest.CaptureFixture) -> None:
    assert cli([*POISSON, "--max-delay-ms", "1234.5678", "--queue-min-ratio", "1", "--health-check-interval", "2.5000001"]) == 0
    engine, controller = capsys.readouterr().out.splitlines()[:2]
    assert engine.endswith(", queue_min_ratio 1, max_delay_ms 1234.5678"), engine
    assert controller == "DP controller: round_robin, GET /health every 2.5000001 s (shared dispatch)", controller


def test_a_load_scale_sweep_names_each_scale_and_the_duration_as_typed(capsys: pytest.CaptureFixture) -> None:
    """Two scales that ``:g`` rounds alike were two columns both named x1."""
    argv = ["simulate", "--suite", "default", "--duration", "0.5000001", "--profile", "off", "--no-progress",
            "--load-scale", "1.0000001", "--load-scale", "1.0000002"]
    assert cli(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("Suite default at offered loads x1.0000001, x1.0000002: "), out[:200]
    assert "\nWarm-ups: --duration 0.5000001 is shorter than these workloads' own runs" in out, out[:400]
    assert "| workload | policy | x1.0000001 | x1.0000002 |" in out


def test_prove_s_scope_line_quotes_the_pinned_ratio_as_typed(capsys: pytest.CaptureFixture) -> None:
    cli(["prove", "--profile", "seed", "--queue-min-ratio", "1"])
    scope = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("scope: "))
    assert ", queue_min_ratio off or 1, " in scope, scope


def test_the_runtime_example_quotes_its_options_as_typed() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "prefill_delayer.runtime.example", "--timeout-s", "-1"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert (done.returncode, done.stderr) == (2, "prefill-delayer example: --timeout-s must be a number > 0, got -1\n")


@pytest.mark.parametrize("value", ["7_5", "0.2_5", "\u0667\u0665"])
def test_a_number_as_only_python_spells_it_is_refused_by_both_setting_readers(value: str, capsys: pytest.CaptureFixture) -> None:
    """Python's int() and float() read 7_5 as 75 (and Arabic-Indic digits as theirs): --set quorum_percent=7_5 ran with
    75, a typo of 7.5 taken as another number. The one reader of NAME=VALUE (``spec.config.parse_setting``) refuses
    it, for --set and PREFILL_DELAYER_PARAMS alike."""
    from prefill_delayer.integrations.sglang.plugin import parse_params
    from prefill_delayer.spec.errors import ConfigError

    said = f"expected NAME=VALUE with a number in plain digits (0-9, no '_'), got 'quorum_percent={value}'"
    with pytest.raises(SystemExit) as exit_:
        cli([*POISSON, "--profile", "aligned", "--set", f"quorum_percent={value}"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and f"argument --set: {said}" in err, err
    with pytest.raises(ConfigError) as exc:
        parse_params(f"low_load_watermark=0.5,quorum_percent={value}")
    assert str(exc.value) == f"PREFILL_DELAYER_PARAMS: {said}"
