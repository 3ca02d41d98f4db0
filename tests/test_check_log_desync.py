"""check-log's desync checks: a run where some ranks logged nothing, a collective the runtime refused as a desync,
and ranks whose logged pass numbers drift apart (a pass one rank skipped), each flagged with the pass."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from decision_log_harness import check_log, read_lines, write_inprocess_logs
from desync_harness import make_config
from prefill_delayer.runtime import DesyncError, PolicyCore, run_ranks


def _report(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _verdict(report: dict[str, Any], prop: str) -> dict[str, Any]:
    return next(v for v in report["checks"] if v["category"] == "desync" and v["property"] == prop)


def test_a_clean_run_passes_both_desync_checks(tmp_path: Path) -> None:
    write_inprocess_logs(tmp_path, world=3, passes=30)
    rc, out, err = check_log(str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert rc == 0, out + err
    report = _report(tmp_path / "r.json")
    assert _verdict(report, "every-rank-logged")["status"] == _verdict(report, "same-pass")["status"] == "ok"
    assert "desync      every-rank-logged     ok" in out and "desync      same-pass             ok" in out


def test_a_run_where_some_ranks_logged_nothing_is_flagged(tmp_path: Path) -> None:
    write_inprocess_logs(tmp_path, world=4, passes=20)
    (tmp_path / "rank1.jsonl").unlink()
    (tmp_path / "rank3.jsonl").unlink()
    rc, out, err = check_log(str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    report = _report(tmp_path / "r.json")
    (f,) = [f for f in report["findings"] if f["property"] == "every-rank-logged"]
    assert f["ranks"] == [0, 2] and f["pass"] == 1
    assert "places 1, 3 of the gather logged nothing (the gather has 4 ranks, logs came from ranks 0, 2)" in f["message"]
    assert "SGLang's own PrefillDelayer, where PREFILL_DELAYER_PROFILE is not set, writes no log" in f["message"]
    assert _verdict(report, "every-rank-logged")["status"] == "violated"


def test_a_refused_collective_is_one_desync_finding_with_every_rank_that_logged_it(tmp_path: Path) -> None:
    world, at = 3, 4
    config = make_config("delayer", world)

    def rank_main(rank: int, gather: Any) -> None:
        core = PolicyCore(config, gather, clock=lambda: 0.0, decision_log=tmp_path)
        for k in range(1, at + 1):
            try:
                if rank == 2 and k == at:
                    core.skip()  # its scheduler deferred this pass; its peers negotiate it
                else:
                    core.negotiate(rank != 1, 0.5, 2, 1, 16, 3)
                core.finalize()
            except DesyncError:
                break
        core.close()

    run_ranks(world, rank_main)
    assert all(read_lines(tmp_path / f"rank{r}.jsonl")[-1]["error"] == "DesyncError" for r in range(world))
    rc, out, err = check_log(str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    report = _report(tmp_path / "r.json")
    (f,) = [f for f in report["findings"] if f["category"] == "desync"]
    assert f["property"] == "same-pass" and f["pass"] == at and f["ranks"] == [0, 1, 2] and len(f["where"]) == 3
    assert "rank 2 skipped the pass's negotiation that the other ranks ran" in f["message"]
    assert "rank 0 pass 4, rank 1 pass 4, rank 2 pass 4" in f["message"]
    assert [v["status"] for v in report["checks"] if v["category"] != "desync"].count("violated") == 0


def test_ranks_whose_pass_numbers_drift_apart_are_flagged_where_the_drift_starts(tmp_path: Path) -> None:
    """Rank 1's log numbers the passes after 12 one too low, as a rank whose numbering skipped a pass would: its
    pass n is rank 0's n + 1, whose rows carried stamp n + 1 (format 2: the ``pass_stamp`` column of each line)."""
    write_inprocess_logs(tmp_path, world=2, passes=30)
    path = tmp_path / "rank1.jsonl"
    header, *passes = path.read_text().splitlines()
    at = json.loads(header)["columns"].index("pass")
    kept = []
    for x in map(json.loads, passes):
        if x[at] != 12:
            x[at] -= x[at] > 12
            kept.append(json.dumps(x))
    path.write_text("\n".join([header, *kept]) + "\n")
    rc, out, err = check_log(str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    report = _report(tmp_path / "r.json")
    drifts = [f for f in report["findings"] if f["category"] == "desync"]
    assert len(drifts) == 1, drifts
    f = drifts[0]
    assert f["property"] == "same-pass" and f["pass"] == 12 and f["ranks"] == [0, 1]
    assert "rank 1's pass 12 carried pass stamp 13, rank 0's 12: not one collective" in f["message"]
    assert "drift apart by 1 from here, a pass rank 1 ended without negotiating" in f["message"]
    assert f"{path}:" in f["where"][0]
    # --traces says why the desync has no trace (replay runs the ranks in step), and names its pass.
    rc, out, err = check_log(str(tmp_path), "--traces", str(tmp_path / "traces"))
    assert rc == 1 and "trace not written (same-pass, pass 12): a desync" in out and "has no trace" in out, out + err


def test_a_log_whose_rows_lack_the_pass_stamp_is_refused_saying_so(tmp_path: Path) -> None:
    write_inprocess_logs(tmp_path, world=2, passes=5)
    path = tmp_path / "rank0.jsonl"
    lines = read_lines(path)
    lines[0]["row_fields"] = lines[0]["row_fields"][:-1]  # as a build before the pass stamp wrote it
    path.write_text("".join(json.dumps(o) + "\n" for o in lines))
    rc, out, err = check_log(str(tmp_path))
    assert rc == 2 and out == "" and f"{path}:1: its rows hold" in err and "written by another build" in err, err
