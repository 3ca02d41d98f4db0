"""``python -m prefill_delayer.runtime.example``: bad options and configurations are one line and exit 2
(from the first rank only), release names are profiles, and a reason is printed as check-log prints it.

A world of one rank runs it under the launcher's environment set by hand (what torchrun sets); the
multi-rank run under torchrun itself is in tests/test_runtime_multiprocess.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Optional

import pytest

from prefill_delayer.spec.fields import NO_REASON_NAME

EXAMPLE = [sys.executable, "-m", "prefill_delayer.runtime.example"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(*args: str, launcher: bool = True, rank: str = "0", env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    if launcher:
        full.update(RANK=rank, WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_port()), LOCAL_RANK="0")
    full.update(env or {}, OMP_NUM_THREADS="1")
    return subprocess.run([*EXAMPLE, *args], capture_output=True, text=True, timeout=120, env=full)


def _one_line(done: subprocess.CompletedProcess, fragment: str) -> None:
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("prefill-delayer example: ") and fragment in done.stderr, done.stderr


@pytest.mark.parametrize(("args", "env", "fragment"), [
    (["--passes", "-1"], {}, "--passes must be an integer >= 1, got -1"),
    (["--passes", "0"], {}, "--passes must be an integer >= 1, got 0"),
    (["--profile", "fast"], {}, "--profile: unknown profile 'fast': expected one of seed"),
    (["--profile", "pdi-hardened"], {}, "which SGLang's PrefillDelayer does not run"),
    (["--pass-ms", "nan"], {}, "--pass-ms must be a number > 0, got nan"),
    (["--max-delay-passes", "-1"], {}, "--max-delay-passes: expected integer in [0, 2147483647], got -1"),
    ([], {"PREFILL_DELAYER_DECISION_LOG": "logs", "PREFILL_DELAYER_DECISION_LOG_MAX_MB": "lots"},
     "PREFILL_DELAYER_DECISION_LOG_MAX_MB='lots': expected a whole number >= 1"),
])
def test_a_bad_option_or_setting_is_one_line(args: list[str], env: dict[str, str], fragment: str) -> None:
    _one_line(_run(*args, env=env), fragment)


def test_only_the_first_rank_says_it() -> None:
    done = _run("--passes", "-1", rank="1")
    assert done.returncode == 2 and done.stderr == "" and done.stdout == ""


def test_a_bad_max_delay_passes_is_found_once_where_the_options_are_parsed() -> None:
    """It was checked only by each rank's PrefillDelayer, after joining the process group (without a launcher, the
    line asked for one instead): now with the other options, before the launcher is looked for."""
    _one_line(_run("--max-delay-passes", "-1", launcher=False), "--max-delay-passes: expected integer in [0, 2147483647], got -1")
    _one_line(_run("--max-delay-passes", "2147483648", launcher=False), "got 2147483648")


def test_without_the_launcher_it_says_how_to_run_it() -> None:
    _one_line(_run(launcher=False), "run it under a launcher that sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: "
              "torchrun --nproc-per-node N -m prefill_delayer.runtime.example")


def test_a_release_name_is_its_profile_and_reasons_are_named_as_check_log_names_them() -> None:
    done = _run("--profile", "sglang-0.5.20", "--passes", "6")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 6 and all(line.startswith("[rank 0/1] pass ") for line in lines)
    assert any(f"reason={NO_REASON_NAME} " in line for line in lines)
    assert not any("reason=- " in line for line in lines)
    mixed = _run("--workload", "mixed", "--passes", "40", "--pass-ms", "0.5")
    assert mixed.returncode == 0, mixed.stderr
    assert f"{NO_REASON_NAME} " in mixed.stdout and ", none " not in mixed.stdout and ": none " not in mixed.stdout
