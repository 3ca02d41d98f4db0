"""Options that used to run without end or fail with a traceback: an arrival rate past any capacity, a DP size
past what one pass can gather in reasonable time. Each is one line on stderr and exit 2, before any run."""

from __future__ import annotations

import contextlib
import io
import time

import pytest

from prefill_delayer.cli import main

BASE = ["simulate", "--workload", "poisson", "--prompt-tokens", "1000:2000", "--output-tokens", "100:200", "--passes", "500"]


def _simulate(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*BASE, *argv])
    return rc, out.getvalue(), err.getvalue()


def test_a_rate_past_any_capacity_is_refused_up_front() -> None:
    t0 = time.monotonic()
    rc, out, err = _simulate("--rate", "1e6")
    assert time.monotonic() - t0 < 5.0
    assert rc == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert err.startswith("prefill-delayer simulate: --rate 1000000: 40,000 requests would arrive in one 0.04 s pass")
    assert "at most 25,600 req/s here" in err


@pytest.mark.parametrize("dp", ["0", "257", "100000"])
def test_the_dp_size_is_bounded(dp: str) -> None:
    rc, out, err = _simulate("--rate", "1", "--dp-size", dp)
    assert (rc, out, err) == (2, "", f"prefill-delayer simulate: --dp-size must be an integer in [1, 256], got {dp}\n")


def test_a_health_check_interval_past_any_capacity_is_refused_up_front() -> None:
    """An interval of 1e-9 s sent 40 million probes a pass: the process took every byte of memory and was killed."""
    t0 = time.monotonic()
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["simulate", "--scenario", "35241", "--profile", "hardened", "--passes", "300", "--warmup", "0",
                   "--health-check-interval=1e-9"])
    assert time.monotonic() - t0 < 5.0
    assert rc == 2 and out.getvalue() == "" and err.getvalue().count("\n") == 1, (out.getvalue(), err.getvalue())
    assert err.getvalue().startswith("prefill-delayer simulate: --health-check-interval 1e-09: 40,000,000 probes would "
                                     "arrive in one 0.04 s pass, more than the 512 requests all 8 ranks run at once")


def test_no_cost_floor_bounds_the_rate_by_the_shortest_forward() -> None:
    """--cost-floor 0 divided by zero (a ZeroDivisionError traceback); the shortest pass is then one token's."""
    rc, out, err = _simulate("--rate", "5", "--cost-floor", "0")
    assert rc == 0 and err == "" and "| hardened |" in out, err
    rc, out, err = _simulate("--rate", "1e9", "--cost-floor", "0")
    assert rc == 2 and "requests would arrive in one 2.44751e-05 s pass" in err, err
