"""Counterexample traces are real: the runtime reproduces them; the hardened profile does not."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("z3")

from prefill_delayer.cli import main as cli  # noqa: E402
from prefill_delayer.proofs.prove import run_catalogue  # noqa: E402
from prefill_delayer.traces.replay import replay, run_trace  # noqa: E402
from prefill_delayer.traces.violations import find_violation  # noqa: E402
from delayer_spec import PROFILES  # noqa: E402
from delayer_spec import RELEASES  # noqa: E402

pytestmark = pytest.mark.proofs


@pytest.fixture(scope="module")
def traces():
    results = run_catalogue(profiles=("seed",), properties=["bounded-delay", "agreement"])
    return {r.property: r.trace for r in results}


@pytest.mark.parametrize("prop", ["bounded-delay", "agreement"])
def test_runtime_reproduces_seed_counterexample(traces, prop):
    ok, lines = replay(traces[prop])
    assert ok, "\n".join(lines)
    assert lines[-1].startswith("REPRODUCED")


@pytest.mark.parametrize("prop", ["bounded-delay", "agreement"])
def test_hardened_runtime_does_not_violate_on_the_same_inputs(traces, prop):
    decisions = run_trace(traces[prop], profile="hardened")
    assert find_violation(prop, traces[prop], decisions) is None
    # Every hardened rank decided the same at every pass.
    assert all(len({(d["allow"], d["reason"], d["wait_forward_passes"]) for d in per_rank}) == 1 for per_rank in decisions)


def test_cli_replay_exit_codes(tmp_path, traces):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(traces["bounded-delay"]))
    assert cli(["replay", str(good)]) == 0

    # The same passes with a looser cap no longer violate the bound: exit 1.
    loose = copy.deepcopy(traces["bounded-delay"])
    loose["config"]["max_delay_passes"] = 50
    stale = tmp_path / "loose.json"
    stale.write_text(json.dumps(loose))
    assert cli(["replay", str(stale)]) == 1

    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"property": "agreement"}))
    assert cli(["replay", str(broken)]) == 2


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
def test_cli_replay_to_a_full_stdout_names_stdout(tmp_path, traces, unbuffered):
    """`replay TRACE > /dev/full` said only `[Errno 28] No space left on device`, naming no output; now one line naming
    stdout, exit 2 (and no second error from the interpreter's last flush)."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(traces["bounded-delay"]))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"  # the write itself fails, not the flush after it
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "prefill_delayer.cli", "replay", str(good)], stdout=full,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert (done.returncode, done.stderr) == (2, "prefill-delayer replay: stdout: cannot write it: No space left on device\n")


@pytest.fixture(scope="module")
def all_traces():
    """The counterexample of every refuted cell of every profile, as ``prove`` writes it."""
    return {(r.profile, r.property): r.trace for r in run_catalogue(PROFILES) if r.trace is not None}


def _release_decisions(version, trace):
    """Every rank's decision on every pass of ``trace``, made by SGLang ``version``'s own code."""
    from prefill_delayer.runtime import ServerArgs, run_ranks
    from prefill_delayer.integrations.sglang.upstream import release_delayer

    cfg, passes = trace["config"], trace["passes"]
    server_args = ServerArgs(
        enable_dp_attention=cfg["enable_dp_attention"],
        prefill_delayer_queue_min_ratio=cfg["queue_min_ratio"],
        prefill_delayer_max_delay_ms=cfg["max_delay_ms"],
        prefill_max_requests=cfg["prefill_max_requests"],
    )

    def rank_main(rank, gather):
        now = [0.0]
        _, delayer = release_delayer(
            version, group=gather, server_args=server_args, dp_size=cfg["dp_size"], attn_tp_size=cfg["attn_tp_size"],
            attn_cp_size=cfg["attn_cp_size"], max_delay_passes=cfg["max_delay_passes"],
            token_usage_low_watermark=cfg["token_usage_low_watermark"], clock=lambda: now[0],
        )
        out = []
        for p in passes:
            x = p["ranks"][rank]
            now[0] = x["now_s"]
            d = delayer._negotiate_should_allow_prefill(
                x["prefillable"], x["token_usage"], x["running_batch"], x["max_prefill_bs"], x["max_running_requests"], x["waiting_queue_len"]
            )
            out.append({"allow": d.output_allow, "reason": d.output_reason, "wait_forward_passes": d.wait_forward_passes})
        return out

    per_rank = run_ranks(len(passes[0]["ranks"]), rank_main)
    return [[per_rank[r][i] for r in range(len(per_rank))] for i in range(len(passes))]


def test_every_refuted_cell_has_a_trace(all_traces):
    from delayer_spec import CATALOGUE, REFUTED

    assert set(all_traces) == {(p, i.id) for i in CATALOGUE for p, status in i.expected.items() if status == REFUTED}


@pytest.mark.registry
@pytest.mark.parametrize("version", list(RELEASES))
def test_each_release_reproduces_its_profiles_counterexamples(all_traces, version):
    """The traces are about the released code, not only ours: each release makes the trace's decisions
    and shows the violation, for every refuted cell of the profile it resolves to."""
    from runtime_harness import require_release

    require_release(version)
    cells = [(prop, t) for (profile, prop), t in all_traces.items() if profile == RELEASES[version]]
    assert cells, f"profile {RELEASES[version]} has no refuted cell"
    for prop, trace in cells:
        decisions = _release_decisions(version, trace)
        assert decisions == [p["expect"] for p in trace["passes"]], (version, prop)
        assert find_violation(prop, trace, decisions) is not None, (version, prop)


def test_hardened_shows_none_of_every_refuted_cell(all_traces):
    """The same inputs through hardened (through aligned for no-decode-hold, which hardened refutes too: the
    must-fire is aligned's): no violation, and every rank decides the same on every pass."""
    for (profile, prop), trace in all_traces.items():
        decisions = run_trace(trace, profile="aligned" if prop == "no-decode-hold" else "hardened")
        assert find_violation(prop, trace, decisions) is None, (profile, prop)
        assert all(len({(d["allow"], d["reason"], d["wait_forward_passes"]) for d in per_rank}) == 1 for per_rank in decisions)
