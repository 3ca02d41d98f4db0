"""Decision logs from real gloo ranks (world 2 and 4, every profile) check clean; the seed under clock skew shows
the agreement violation, and the trace check-log exports from it replays."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from prefill_delayer.runtime import PrefillDelayer, ServerArgs
from prefill_delayer.runtime.decision_log import DECISION_LOG_ENV
from delayer_spec import PROFILES

from decision_log_harness import MAX_DELAY_PASSES, SERVER_ARGS, WATERMARK, check_log, drive, read_lines
from runtime_harness import Clock, results, spawn_gloo

pytestmark = pytest.mark.multiprocess
PASSES = 60


def _world_group() -> Any:
    import torch.distributed as dist

    return dist.group.WORLD


def _profiles_scenario(rank: int, world: int, root: str) -> dict[str, list[tuple]]:
    """Every profile in turn over the default gloo group, logging; hardened through the environment variable."""
    out = {}
    for profile in PROFILES:
        folder = Path(root) / profile
        clock = Clock(offset=1000.0 + 3.0 * rank)  # one time base, different origins: the clocks do not skew
        kw: dict[str, Any] = {"decision_log": folder}
        if profile == "hardened":
            os.environ[DECISION_LOG_ENV] = str(folder)
            kw = {}
        d = PrefillDelayer(world, 1, _world_group(), ServerArgs(**SERVER_ARGS), MAX_DELAY_PASSES, WATERMARK,
                           profile=profile, clock=clock, **kw)
        try:
            out[profile] = drive(d, clock, rank, PASSES)
        finally:
            d.close()
            os.environ.pop(DECISION_LOG_ENV, None)
    return out


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_logs_of_every_profile_check_clean(tmp_path: Path, world: int) -> None:
    outs = results(spawn_gloo(world, _profiles_scenario, str(tmp_path)))
    for profile in PROFILES:
        folder = tmp_path / profile
        assert sorted(p.name for p in folder.iterdir()) == [f"rank{r}.jsonl" for r in range(world)]
        for rank in range(world):
            lines = read_lines(folder / f"rank{rank}.jsonl")
            header = lines[0]
            assert header["rank"] == rank == header["group_rank"] and header["group_ranks"] == list(range(world))
            got = [(x["decision"]["output_allow"], x["decision"]["output_reason"], x["decision"]["wait_forward_passes"])
                   for x in lines[1:]]
            assert got == [tuple(t) for t in outs[rank][profile]]  # what each rank decided is what it logged
        rc, out, err = check_log(str(folder), "--json", str(tmp_path / f"{profile}.json"))
        assert rc == 0, f"{profile}:\n{out}{err}"
        report = json.loads((tmp_path / f"{profile}.json").read_text())
        assert report["checked"] == {"conformance": world * PASSES, "agreement": PASSES}
        assert all(v["status"] == "ok" for v in report["checks"]), report["checks"]
        assert {"delay", "wait_timeout", "token_watermark"} <= set(report["decisions_by_reason"])


def _skew_scenario(rank: int, world: int, root: str) -> None:
    """The seed, queue trigger, max_delay_ms=50, passes 20 ms apart; ranks 2 and 3 run their clocks 30% fast."""
    clock = Clock(rate=1.3 if rank >= 2 else 1.0, offset=1000.0 + 7.0 * rank)
    sa = ServerArgs(enable_dp_attention=True, prefill_delayer_queue_min_ratio=0.5, prefill_delayer_max_delay_ms=50.0)
    d = PrefillDelayer(world, 1, _world_group(), sa, 100, None, profile="seed", clock=clock, decision_log=root)
    d.skip_first_delayer = False
    for k in range(6):
        clock.t = 0.02 * k
        d.negotiate(True, 0.9, running_batch=100, max_prefill_bs=80, max_running_requests=1024, waiting_queue_len=10)
        d.finalize()
    d.close()


def test_gloo_seed_under_clock_skew_breaks_agreement_and_the_trace_replays(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    results(spawn_gloo(4, _skew_scenario, str(logs)))
    rc, out, err = check_log(str(logs), "--traces", str(tmp_path / "traces"), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    report = json.loads((tmp_path / "r.json").read_text())
    agreement = [f for f in report["findings"] if f["category"] == "agreement"]
    assert agreement and agreement[0]["pass"] == 3 and agreement[0]["property"] == "agreement-equal-args"
    assert "ranks 0, 1: allow=False reason='delay'" in agreement[0]["message"]
    assert "ranks 2, 3: allow=True reason='wait_success' wait_forward_passes=2" in agreement[0]["message"]
    assert not [f for f in report["findings"] if f["category"] == "conformance"]
    traces = [t for t in report["traces"] if t["path"]]
    assert [t["property"] for t in traces] == ["agreement-equal-args"] and traces[0]["passes"] == [1, 3]
    from prefill_delayer.cli import main

    assert main(["replay", traces[0]["path"]]) == 0


# aligned: a mixed wait with no running batch in any row (the hold cut at NO_DECODE_HOLD), then one with rank 0's
# running batch in its row (hardened's wait, to the cap). No clock trigger and no watermark: the passes decide.
ALIGNED_CAP = 12


def _aligned_inputs(rank: int, k: int) -> tuple:
    from prefill_delayer.spec.policies.aligned.guards import NO_DECODE_HOLD

    decoding = k > NO_DECODE_HOLD  # after the first wait's give-up, rank 0's admitted request decodes
    return rank == 0, 0.5, 1 if decoding else 0, 1, 64, 1 if rank == 0 else 0


def _aligned_scenario(rank: int, world: int, folder: str) -> list[tuple]:
    from prefill_delayer.spec.policies.aligned.guards import NO_DECODE_HOLD

    clock = Clock(offset=1000.0 + 3.0 * rank)
    d = PrefillDelayer(world, 1, _world_group(), ServerArgs(enable_dp_attention=True), ALIGNED_CAP, None,
                       profile="aligned", clock=clock, decision_log=folder)
    try:
        return drive(d, clock, rank, NO_DECODE_HOLD + 1 + ALIGNED_CAP, _aligned_inputs)
    finally:
        d.close()


def test_gloo_logs_of_aligned_check_clean_and_a_flipped_give_up_is_found(tmp_path: Path) -> None:
    """aligned's decision logs from 2 gloo ranks name the policy and check clean (its no-decode hold included); the
    same logs with the give-up pass flipped to one more delay are a conformance finding at that pass, on that rank."""
    import shutil

    from prefill_delayer.spec.policies.aligned.guards import NO_DECODE_HOLD

    from decision_log_harness import edit_pass

    logs = tmp_path / "logs"
    outs = results(spawn_gloo(2, _aligned_scenario, str(logs)))
    hold = [(False, "delay", 0)] * NO_DECODE_HOLD + [(True, "no_decode", NO_DECODE_HOLD)]
    cap = [(False, "delay", 0)] * (ALIGNED_CAP - 1) + [(True, "wait_timeout", ALIGNED_CAP - 1)]
    assert outs[0] == outs[1] == hold + cap
    for rank in range(2):
        header = read_lines(logs / f"rank{rank}.jsonl")[0]
        assert header["profile"] == header["config"]["profile"] == "aligned"
    rc, out, err = check_log(str(logs), "--json", str(tmp_path / "clean.json"))
    assert rc == 0, out + err
    report = json.loads((tmp_path / "clean.json").read_text())
    checks = {c["property"]: c["status"] for c in report["checks"]}
    assert checks["no-decode-hold"] == "ok" and set(checks.values()) == {"ok"}, report["checks"]
    assert report["decisions_by_reason"].keys() == {"delay", "no_decode", "wait_timeout"}

    bad = tmp_path / "flipped"
    shutil.copytree(logs, bad)
    reasons = read_lines(bad / "rank1.jsonl")[0]["enums"]["reason"]
    give_up = NO_DECODE_HOLD + 1

    def to_delay(values: list, columns: list) -> None:
        assert values[columns.index("decision.output_reason")] == reasons.index("no_decode")
        values[columns.index("decision.output_allow")] = 0
        values[columns.index("decision.output_reason")] = reasons.index("delay")

    edit_pass(bad / "rank1.jsonl", give_up, to_delay)
    rc, out, err = check_log(str(bad), "--json", str(tmp_path / "bad.json"))
    assert rc == 1, out + err
    found = [(f["category"], f["property"], f["pass"], f["ranks"]) for f in json.loads((tmp_path / "bad.json").read_text())["findings"]]
    assert ("conformance", "decision", give_up, [1]) in found, found
