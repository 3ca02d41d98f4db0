"""Every profile a comparison shows covers the same simulated time: a pass cap ends a slower profile's run
later (its passes take longer), so without this its TTFT and unserved requests were measured over more time."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from prefill_delayer.cli import main

RUN = ["simulate", "--workload", "poisson", "--rate", "20", "--prompt-tokens", "1000:4000", "--output-tokens", "100:800",
       "--profile", "seed", "--profile", "off", "--max-delay-passes", "10"]


def _simulate(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*RUN, *argv])
    return rc, out.getvalue(), err.getvalue()


def test_every_compared_profile_covers_the_same_measured_window(tmp_path: Path) -> None:
    rc, out, err = _simulate("--passes", "600", "--json", str(tmp_path / "sim.json"))
    assert rc == 0, err
    results = json.loads((tmp_path / "sim.json").read_text())["results"]
    summaries = {r["name"]: r["summary"] for r in results}
    seconds = [s["sim_seconds"] for s in summaries.values()]
    passes = [s["passes"] for s in summaries.values()]
    # The same time to within one pass (a run stops at the first pass that reaches the other's end)...
    assert max(seconds) - min(seconds) <= 0.5, summaries
    # ...which the faster-passing profile reaches in more passes than the other: the cap ended only the first.
    assert min(passes) < max(passes) == 600, passes
    assert f"Measured: {min(seconds):.0f} simulated s per profile" in out


def test_a_pass_cap_inside_the_warmup_is_refused(tmp_path: Path) -> None:
    rc, out, err = _simulate("--passes", "100", "--warmup", "100", "--json", str(tmp_path / "sim.json"))
    assert rc == 2 and out == "" and err.count("\n") == 1, (out, err)
    assert err.startswith("prefill-delayer simulate: --passes 100 ends profile ") and "inside the 100 s --warmup" in err
    assert not (tmp_path / "sim.json").exists()


def test_a_scenario_whose_duration_falls_inside_its_warmup_is_refused() -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["simulate", "--scenario", "32880", "--duration", "100"])
    assert (rc, out.getvalue()) == (2, "")
    assert err.getvalue() == ("prefill-delayer simulate: --warmup 120 must be shorter than --duration 100: the tables "
                              "measure the simulated time after the warm-up, and none would be left\n")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["simulate", "--scenario", "32880", "--passes", "100"]) == 2
    assert "inside the 120 s --warmup: nothing would be measured" in err.getvalue()
