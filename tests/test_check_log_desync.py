"""check-log's desync checks: a run where some ranks logged nothing, a collective the runtime refused as a desync,
and ranks whose logged pass numbers drift apart (a pass one rank skipped), each flagged with the pass; and the same
findings from the digests of two nodes, each holding some of the ranks' logs, merged."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

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
    assert "its files not given (give every rank's files, or their folder; one node's logs go through" in f["message"]
    assert "SGLang's own PrefillDelayer, where PREFILL_DELAYER_PROFILE is not set, writes no log" in f["message"]
    assert _verdict(report, "every-rank-logged")["status"] == "violated"


def _write_refused_collective(folder: Path, world: int, at: int) -> None:
    """``world`` ranks whose last rank skips pass ``at`` while its peers negotiate it: every rank logs a DesyncError."""
    config = make_config("delayer", world)

    def rank_main(rank: int, gather: Any) -> None:
        core = PolicyCore(config, gather, clock=lambda: 0.0, decision_log=folder)
        for k in range(1, at + 1):
            try:
                if rank == world - 1 and k == at:
                    core.skip()  # its scheduler deferred this pass; its peers negotiate it
                else:
                    core.negotiate(rank != 1, 0.5, 2, 1, 16, 3)
                core.finalize()
            except DesyncError:
                break
        core.close()

    run_ranks(world, rank_main)
    assert all(read_lines(folder / f"rank{r}.jsonl")[-1]["error"] == "DesyncError" for r in range(world))


def _renumber_after(path: Path, at: int) -> None:
    """Number a compact log's passes after ``at`` one too low, as a rank whose numbering skipped a pass would: its
    pass n is its peers' n + 1, whose rows carried stamp n + 1 (the ``pass_stamp`` column of each line)."""
    header, *passes = path.read_text().splitlines()
    col = json.loads(header)["columns"].index("pass")
    kept = []
    for x in map(json.loads, passes):
        if x[col] != at:
            x[col] -= x[col] > at
            kept.append(json.dumps(x))
    path.write_text("\n".join([header, *kept]) + "\n")


def test_a_refused_collective_is_one_desync_finding_with_every_rank_that_logged_it(tmp_path: Path) -> None:
    world, at = 3, 4
    _write_refused_collective(tmp_path, world, at)
    rc, out, err = check_log(str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    report = _report(tmp_path / "r.json")
    (f,) = [f for f in report["findings"] if f["category"] == "desync"]
    assert f["property"] == "same-pass" and f["pass"] == at and f["ranks"] == [0, 1, 2] and len(f["where"]) == 3
    assert "rank 2 skipped the pass's negotiation that the other ranks ran" in f["message"]
    assert "rank 0 pass 4, rank 1 pass 4, rank 2 pass 4" in f["message"]
    assert [v["status"] for v in report["checks"] if v["category"] != "desync"].count("violated") == 0


def test_ranks_whose_pass_numbers_drift_apart_are_flagged_where_the_drift_starts(tmp_path: Path) -> None:
    """Rank 1's log numbers the passes after 12 one too low (``_renumber_after``)."""
    write_inprocess_logs(tmp_path, world=2, passes=30)
    path = tmp_path / "rank1.jsonl"
    _renumber_after(path, 12)
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


# ----- the same over two nodes: each node's digest, merged ----------------------------------------


def _over_two_nodes(tmp_path: Path, logs: Path, world: int, node_of: Callable[[int], int]) -> tuple[int, dict, list[dict]]:
    """Rank ``r``'s log on node ``node_of(r)`` (0 or 1), check-log --digest on each node, then --merge of the two digests:
    (the merge's exit code, its report, the two nodes' own reports)."""
    nodes = [tmp_path / "node-a", tmp_path / "node-b"]
    for node in nodes:
        node.mkdir()
    for rank in range(world):
        shutil.copy(logs / f"rank{rank}.jsonl", nodes[node_of(rank)] / f"rank{rank}.jsonl")
    alone = []
    for node in nodes:
        rc, out, err = check_log(str(node), "--digest", str(node.with_suffix(".digest")), "--json", str(node.with_suffix(".json")))
        assert rc in (0, 1) and err == "", out + err
        alone.append(_report(node.with_suffix(".json")))
    rc, out, err = check_log("--merge", *(str(n.with_suffix(".digest")) for n in nodes), "--json", str(tmp_path / "m.json"))
    assert err == "", err
    return rc, _report(tmp_path / "m.json"), alone


def _whole(tmp_path: Path, logs: Path) -> dict:
    rc, out, err = check_log(str(logs), "--json", str(tmp_path / "all.json"))
    assert rc in (0, 1) and err == "", out + err
    return _report(tmp_path / "all.json")


def _keys(report: dict) -> list[tuple]:
    return sorted((f["category"], f["property"], f["pass"], f["ranks"], f["message"]) for f in report["findings"])


def test_a_clean_run_over_two_nodes_merges_clean(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=4, passes=30)
    rc, merged, alone = _over_two_nodes(tmp_path, logs, 4, lambda r: r // 2)
    assert rc == 0 and merged["findings"] == [], merged["findings"]
    assert _verdict(merged, "every-rank-logged")["status"] == _verdict(merged, "same-pass")["status"] == "ok"
    assert all(not any(f["property"] == "same-pass" for f in node["findings"]) for node in alone)


def test_pass_numbers_drifting_apart_across_two_nodes_are_found_by_the_merge(tmp_path: Path) -> None:
    """Ranks 2 and 3 (node b) both number the passes after 12 one too low: on its own each node's ranks are in step
    (no desync finding on either node: the ranks each lacks are the merge's to judge); only the merge compares their
    stamps with ranks 0 and 1's (node a)."""
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=4, passes=30)
    for rank in (2, 3):
        _renumber_after(logs / f"rank{rank}.jsonl", 12)
    rc, merged, alone = _over_two_nodes(tmp_path, logs, 4, lambda r: r // 2)
    assert [[f["property"] for f in node["findings"] if f["category"] == "desync"] for node in alone] == [[], []]
    assert rc == 1
    drifts = [f for f in merged["findings"] if f["category"] == "desync"]
    assert [(f["property"], f["pass"], f["ranks"]) for f in drifts] == [("same-pass", 12, [0, 2]), ("same-pass", 12, [0, 3])], drifts
    for f, rank in zip(drifts, (2, 3)):
        assert f"rank {rank}'s pass 12 carried pass stamp 13, rank 0's 12: not one collective" in f["message"]
        assert f"drift apart by 1 from here, a pass rank {rank} ended without negotiating" in f["message"]
        assert f"node-b/rank{rank}.jsonl:" in f["where"][0] and "node-a/rank0.jsonl:" in f["where"][1]
    assert _verdict(merged, "same-pass")["status"] == "violated" and _verdict(merged, "every-rank-logged")["status"] == "ok"
    assert _keys(merged) == _keys(_whole(tmp_path, logs))  # what one check-log over every log finds


def test_a_refused_collective_over_two_nodes_is_one_finding_with_every_rank(tmp_path: Path) -> None:
    """Ranks 0 and 1 on node a, rank 2 (the one that skipped) on node b: each node saw part of the refused collective;
    the merge reports it once, with the three ranks' fail records, as one check-log over the three logs does."""
    logs = tmp_path / "logs"
    world, at = 3, 4
    _write_refused_collective(logs, world, at)
    rc, merged, alone = _over_two_nodes(tmp_path, logs, world, lambda r: r // 2)
    assert rc == 1
    (f,) = [f for f in merged["findings"] if f["category"] == "desync"]
    assert f["property"] == "same-pass" and f["pass"] == at and f["ranks"] == [0, 1, 2] and len(f["where"]) == 3
    assert "rank 0 pass 4, rank 1 pass 4, rank 2 pass 4" in f["message"]
    assert "rank 2 skipped the pass's negotiation that the other ranks ran" in f["message"]
    assert merged["findings_counts"] == _whole(tmp_path, logs)["findings_counts"]
    assert _keys(merged) == _keys(_whole(tmp_path, logs))


def test_a_digest_of_an_earlier_format_is_refused_saying_so(tmp_path: Path) -> None:
    from prefill_delayer.conformance.digest import DIGEST_FORMAT

    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=2, passes=5)
    new, old = tmp_path / "new.digest", tmp_path / "old.digest"
    rc, out, err = check_log(str(logs), "--digest", str(new))
    assert rc == 0, out + err
    with zipfile.ZipFile(new) as src, zipfile.ZipFile(old, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "meta.json":
                data = json.dumps({**json.loads(data), "format": DIGEST_FORMAT - 1}).encode()
            dst.writestr(name, data)
    rc, out, err = check_log("--merge", str(old))
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, out + err
    assert f"old.digest: a check-log digest of format {DIGEST_FORMAT - 1}, this build merges format {DIGEST_FORMAT}" in err
    assert "write the node's digest again with this build's check-log --digest" in err


def _rewritten(src_path: Path, dst_path: Path, change: Any) -> None:
    """A copy of a digest with ``change(name, data)`` applied to each member (None: the member left out)."""
    with zipfile.ZipFile(src_path) as src, zipfile.ZipFile(dst_path, "w") as dst:
        for name in src.namelist():
            data = change(name, src.read(name))
            if data is not None:
                dst.writestr(name, data)


@pytest.mark.parametrize("damage, says", [
    ("flip", "fails its CRC check"),
    ("drop-chunk", "r0.npz is missing"),
    ("only-meta", "is missing"),
    ("garbage-chunk", "r0.npz:"),
    ("meta-list", "not a check-log digest"),
    ("meta-no-format", "(meta.json format: missing)"),
    ("meta-no-sessions", "(meta.json sessions: missing)"),
])
def test_a_damaged_digest_is_one_line_naming_it(tmp_path: Path, damage: str, says: str) -> None:
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=2, passes=5)
    good, bad = tmp_path / "good.digest", tmp_path / "bad.digest"
    rc, out, err = check_log(str(logs), "--digest", str(good))
    assert rc == 0, out + err
    if damage == "flip":  # one byte of a chunk's data, inside the archive: the member's CRC no longer matches
        raw = bytearray(good.read_bytes())
        with zipfile.ZipFile(good) as z:
            info = z.getinfo("s0/c0/r0.npz")
        raw[info.header_offset + 30 + len(info.filename) + info.compress_size // 2] ^= 0xFF
        bad.write_bytes(bytes(raw))
    else:
        def change(name: str, data: bytes) -> Optional[bytes]:
            meta = json.loads(data) if name == "meta.json" else None
            if damage == "drop-chunk" and name == "s0/c0/r0.npz":
                return None
            if damage == "only-meta" and name != "meta.json":
                return None
            if damage == "garbage-chunk" and name == "s0/c0/r0.npz":
                return b"not an array"
            if damage == "meta-list" and meta is not None:
                return b"[1]"
            if damage == "meta-no-format" and meta is not None:
                return json.dumps({k: v for k, v in meta.items() if k != "format"}).encode()
            if damage == "meta-no-sessions" and meta is not None:
                return json.dumps({k: v for k, v in meta.items() if k != "sessions"}).encode()
            return data
        _rewritten(good, bad, change)
    rc, out, err = check_log("--merge", str(bad))
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, out + err
    assert "bad.digest: " in err and says in err and "Traceback" not in err, err


@pytest.mark.parametrize("kept, says", [
    (21, "rank 2's log ends at pass 20, its peers' at pass 60"),
    (1, "rank 2's log holds no pass, its peers' at pass 60"),
])
def test_a_rank_log_that_ends_before_its_peers_is_found_alone_and_in_the_merge(tmp_path: Path, kept: int, says: str) -> None:
    """Rank 2's log cut after its header and ``kept - 1`` passes (a full disk, a copy cut short): every-rank-logged
    names it, on one check-log and on the merge of two nodes' digests; ranks ending one pass apart stay clean (the
    drift test above)."""
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=4, passes=60)
    path = logs / "rank2.jsonl"
    path.write_text("".join(path.read_text().splitlines(True)[:kept]))
    whole = _whole(tmp_path, logs)
    (f,) = [f for f in whole["findings"] if f["property"] == "every-rank-logged"]
    assert f["ranks"] == [2] and says in f["message"] and "are not checked" in f["message"], f
    assert _verdict(whole, "every-rank-logged")["status"] == "violated"
    if kept == 1:  # its line of decisions by reason says so; it was "rank 2: " and nothing
        rc, out, _ = check_log(str(logs))
        assert "    rank 2: no pass logged\n" in out, out
    rc, merged, _ = _over_two_nodes(tmp_path, logs, 4, lambda r: r // 2)
    assert rc == 1 and [g["message"] for g in merged["findings"] if g["property"] == "every-rank-logged"] == [f["message"]]


@pytest.mark.parametrize(("given", "says"), [
    (("--sample", "0.5"), "--merge reads digests, not logs"),
    (("--own-profile",), "--merge reads digests, not logs"),
])
def test_an_option_the_merge_would_not_use_is_refused(tmp_path: Path, given: tuple[str, ...], says: str) -> None:
    """--sample and --own-profile act on the logs each node checks: given to --merge they would be dropped without a
    word, so the command names where they belong instead."""
    write_inprocess_logs(tmp_path / "logs", world=2, passes=10)
    digest = tmp_path / "node.digest"
    rc, out, err = check_log(str(tmp_path / "logs"), "--digest", str(digest))
    assert rc == 0, out + err
    rc, out, err = check_log("--merge", str(digest), *given)
    assert rc == 2 and says in err and "--own-profile and --sample where each node writes its --digest" in err, err
    assert err.count("\n") == 1 and out == ""


def test_exact_with_a_sample_share_is_refused(tmp_path: Path) -> None:
    """--exact re-fires every pass; a --sample share beside it would be ignored."""
    write_inprocess_logs(tmp_path, world=2, passes=10)
    rc, out, err = check_log(str(tmp_path), "--exact", "--sample", "0.1")
    assert rc == 2 and "--exact re-fires every pass" in err and err.count("\n") == 1, err
