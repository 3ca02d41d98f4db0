"""check-log over logs spread over nodes, as the README's workflow runs it: each node's ``--digest`` step judges what
its own logs can decide and leaves what needs the other nodes' ranks to ``--merge``; and the files each step takes,
given to the other step or missing, named in one line."""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import zipfile
from pathlib import Path
from typing import Any

import pytest

from decision_log_harness import check_log, write_inprocess_logs

TAKES = "--merge takes the digest files that each node's check-log --digest wrote"


def _report(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def _verdict(report: dict[str, Any], prop: str) -> dict[str, Any]:
    return next(v for v in report["checks"] if v["property"] == prop)


def _one_line(rc: int, out: str, err: str, *fragments: str) -> None:
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, (out, err)
    assert err.startswith("prefill-delayer check-log: "), err
    for f in fragments:
        assert f in err, err


def _nodes(tmp_path: Path, logs: Path, ranks_of: list[list[int]]) -> list[Path]:
    """Each node's folder, holding the logs of its ranks (``ranks_of[node]``)."""
    nodes = []
    for n, ranks in enumerate(ranks_of):
        node = tmp_path / f"node-{n}"
        node.mkdir()
        for rank in ranks:
            shutil.copy(logs / f"rank{rank}.jsonl", node / f"rank{rank}.jsonl")
        nodes.append(node)
    return nodes


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("logs")
    write_inprocess_logs(folder, world=4, passes=30)
    return folder


def _digest(node: Path) -> tuple[int, str, str, dict[str, Any]]:
    rc, out, err = check_log(str(node), "--digest", str(node.with_suffix(".digest")), "--json", str(node.with_suffix(".json")))
    return rc, out, err, _report(node.with_suffix(".json")) if node.with_suffix(".json").exists() else {}


# ----- the per-node step leaves the cross-node checks to the merge -------------------------------


def test_each_node_of_a_clean_run_is_clean_and_says_what_it_leaves_to_the_merge(logs: Path, tmp_path: Path) -> None:
    """The README's workflow on a clean run: ranks 0-1 on one node, 2-3 on another. Each node's --digest step was
    `every-rank-logged VIOLATED` (places 2, 3 logged nothing) with exit 1, for ranks the other node logs."""
    nodes = _nodes(tmp_path, logs, [[0, 1], [2, 3]])
    for node, others in zip(nodes, ("2, 3", "0, 1")):
        rc, out, err, report = _digest(node)
        assert rc == 0 and err == "" and report["findings"] == [], out + err
        assert f"this node's part of the run (--digest): places {others} of the gather have no log here" in out, out
        assert "are left to check-log --merge over every node's digest" in out
        assert "desync      every-rank-logged     left to --merge (the gather's ranks without a log here may log on other nodes)" in out
        assert "invariant   joint-progress        left to --merge (needs the logs of every rank of the gather)" in out
        assert out.rstrip().endswith("result: clean on this node's part; the checks across nodes are check-log --merge's"), out
        assert _verdict(report, "every-rank-logged")["status"] == "left to --merge"
        assert report["sessions"][0]["left_to_merge"].startswith("this node's part of the run (--digest)")
    rc, out, err = check_log("--merge", *(str(n.with_suffix(".digest")) for n in nodes), "--json", str(tmp_path / "m.json"))
    merged = _report(tmp_path / "m.json")
    assert rc == 0 and err == "" and merged["findings"] == [], out + err
    assert _verdict(merged, "every-rank-logged")["status"] == "ok" and merged["sessions"][0]["left_to_merge"] is None
    assert "left to --merge" not in out and "node's part" not in out and out.rstrip().endswith("result: clean")


def test_the_merge_still_flags_a_rank_no_node_logged(logs: Path, tmp_path: Path) -> None:
    """Rank 3's log is on no node: each node's step is clean, the merge of the digests flags place 3, as one check-log
    over the three logs does, and a node's logs checked without --digest are still judged whole."""
    nodes = _nodes(tmp_path, logs, [[0, 1], [2]])
    for node in nodes:
        rc, out, err, report = _digest(node)
        assert rc == 0 and report["findings"] == [], out + err
    rc, out, err = check_log("--merge", *(str(n.with_suffix(".digest")) for n in nodes), "--json", str(tmp_path / "m.json"))
    assert rc == 1 and err == "", out + err
    (f,) = _report(tmp_path / "m.json")["findings"]
    assert f["property"] == "every-rank-logged" and f["ranks"] == [0, 1, 2]
    assert "place 3 of the gather logged nothing (the gather has 4 ranks, logs came from ranks 0, 1, 2)" in f["message"]
    rc, out, err = check_log("--merge", str(nodes[0].with_suffix(".digest")))  # a node's digest alone: ranks 2, 3 unlogged
    assert rc == 1 and "places 2, 3 of the gather logged nothing" in out, out + err
    rc, out, err = check_log(str(nodes[0]))  # no --digest: one check over every log there is, judged whole
    assert rc == 1 and "places 2, 3 of the gather logged nothing" in out and "left to --merge" not in out, out + err


def test_a_node_still_judges_its_own_ranks_logs_ending_apart(logs: Path, tmp_path: Path) -> None:
    """What a node's own logs decide stays the node's: its rank 2's log ends 20 passes before its rank 3's."""
    nodes = _nodes(tmp_path, logs, [[0, 1], [2, 3]])
    cut = nodes[1] / "rank2.jsonl"
    cut.write_text("".join(cut.read_text().splitlines(True)[:11]))  # the header and passes 1..10
    rc, out, err, report = _digest(nodes[1])
    assert rc == 1, out + err
    (f,) = report["findings"]
    assert f["property"] == "every-rank-logged" and f["ranks"] == [2]
    assert "rank 2's log ends at pass 10, its peers' at pass 30" in f["message"]
    assert _verdict(report, "every-rank-logged")["status"] == "violated"
    assert "result: 1 violation(s) on this node's part" in out


def test_a_node_holding_every_rank_decides_everything_itself(logs: Path, tmp_path: Path) -> None:
    (node,) = _nodes(tmp_path, logs, [[0, 1, 2, 3]])
    rc, out, err, report = _digest(node)
    assert rc == 0 and "left to --merge" not in out and "node's part" not in out, out + err
    assert {v["status"] for v in report["checks"]} == {"ok"}


def test_a_merge_of_digests_of_two_worlds_says_so(digest: Path, tmp_path: Path) -> None:
    """A world-4 run's digest and a world-2 run's merged as two runs with no note at all, where one check-log over
    their logs notes the two configurations; the merge cannot tell a restart from two deployments (a digest keeps no
    run's end), so it names each world's digest and says what it did."""
    two = tmp_path / "world2"
    write_inprocess_logs(two, world=2, passes=30)
    rc, out, err, _ = _digest(two)
    assert rc == 0, out + err
    other = two.with_suffix(".digest")
    rc, out, err = check_log("--merge", str(digest), str(other), "--json", str(tmp_path / "m.json"))
    merged = _report(tmp_path / "m.json")
    assert rc == 0 and err == "" and [s["world_size"] for s in merged["sessions"]] == [4, 2], out + err
    note = (f"the digests hold 2 configurations (world 4, dp_size=4: {digest}; world 2, dp_size=2: {other}): each run is "
            "checked against its own, as one check-log does for a restart with a new configuration; if these are the "
            "digests of different deployments, merge each deployment's digests on their own")
    assert merged["notes"] == [note] and f"notes:\n  {note}\n" in out, out
    rc, out, err = check_log("--merge", str(other), "--json", str(tmp_path / "one.json"))
    assert rc == 0 and _report(tmp_path / "one.json")["notes"] == [] and "notes:" not in out, out + err


def test_node_digest_the_plain_function_is_the_node_step(logs: Path, tmp_path: Path) -> None:
    from prefill_delayer.conformance.digest import node_digest

    (node,) = _nodes(tmp_path, logs, [[1, 3]])
    data = node_digest([str(node)], str(tmp_path / "n.digest"))
    assert data["result"] == "clean" and _verdict(data, "every-rank-logged")["status"] == "left to --merge"
    assert (tmp_path / "n.digest").is_file()


def test_node_digest_misuse_is_a_clear_error_and_leaves_nothing(logs: Path, tmp_path: Path) -> None:
    """A str for ``paths`` walked its characters ('/: no decision logs in this folder'); a failed check left the
    digest's temporary behind. A folder made for the digest goes too."""
    from prefill_delayer.conformance.digest import node_digest
    from prefill_delayer.conformance.logread import LogError

    with pytest.raises(TypeError, match=r"paths: a list of this node's log files or folders, got str .*: pass \["):
        node_digest(str(logs), str(tmp_path / "n.digest"))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(LogError):
        node_digest([str(tmp_path / "nothing-here")], str(out / "new" / "n.digest"))
    assert list(out.iterdir()) == []


def test_node_digest_writes_its_file_as_check_log_digest_does(logs: Path, tmp_path: Path) -> None:
    """It wrote ``out`` by a rename of its own: a file it replaced got the umask's mode (0o644 where it was 0o640), a
    symlink was replaced by the digest (the file it pointed at left as it was), a log of its ``paths`` was replaced by
    the digest, a missing folder was 'No such file or directory' and '' a ValueError; now as check-log --digest
    writes it (``files.Outputs``), its errors naming the parameter ``out``."""
    from prefill_delayer.conformance.digest import node_digest
    from prefill_delayer.files import OutputError

    (node,) = _nodes(tmp_path, logs, [[1, 3]])
    kept = tmp_path / "kept.digest"
    kept.write_text("an earlier digest")
    kept.chmod(0o640)
    umask = os.umask(0o022)  # a new file would be 0o644
    try:
        node_digest([str(node)], str(kept))
    finally:
        os.umask(umask)
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and zipfile.is_zipfile(kept)
    target = tmp_path / "target.digest"
    target.write_text("an earlier digest")
    link = tmp_path / "link.digest"
    link.symlink_to(target)
    node_digest([str(node)], str(link))
    assert link.is_symlink() and zipfile.is_zipfile(target)
    made = tmp_path / "new" / "n.digest"
    node_digest([str(node)], str(made))
    assert zipfile.is_zipfile(made)
    log = node / "rank1.jsonl"
    before = log.read_bytes()
    with pytest.raises(OutputError, match=f"^out {log} is an input file of this command"):
        node_digest([str(node)], str(log))
    assert log.read_bytes() == before
    with pytest.raises(OutputError, match="^out needs a file name, got an empty string$"):
        node_digest([str(node)], "")


# ----- each step's files, given to the other step --------------------------------------------------


@pytest.fixture(scope="module")
def digest(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("digest") / "a1.digest"
    rc, _, err = check_log(str(logs), "--digest", str(out))
    assert rc == 0, err
    return out


def test_a_digest_given_as_a_log_is_called_a_digest_for_merge(digest: Path, logs: Path) -> None:
    """It was `a1.digest:1: not JSON ('utf-8' codec can't decode byte ...)`."""
    for given in ((str(digest),), (str(logs), str(digest))):
        rc, out, err = check_log(*given)
        _one_line(rc, out, err, f"{digest} is a check-log digest (what check-log --digest writes on each node), not a "
                  f"decision log: give it to --merge", f"prefill-delayer check-log --merge {digest}")
        assert "codec" not in err and "not JSON" not in err


def test_merge_given_a_folder_says_it_takes_digest_files(logs: Path) -> None:
    """It was `not a check-log digest ([Errno 21] Is a directory: '...')`."""
    rc, out, err = check_log("--merge", str(logs))
    _one_line(rc, out, err, f"{logs}: is a folder: {TAKES}")
    assert "Errno" not in err


@pytest.mark.parametrize("what", ["text", "empty", "missing", "decision log"])
def test_merge_given_something_else_says_plainly_what_it_takes(logs: Path, tmp_path: Path, what: str) -> None:
    """A text file was `not a check-log digest (File is not a zip file)`, a missing one `([Errno 2] ...)`."""
    path = tmp_path / "README.md"
    if what == "text":
        path.write_text("# prefill-delayer\n\nnot a digest\n")
        says = f"{path}: not a check-log digest: {TAKES}"
    elif what == "empty":
        path.write_bytes(b"")
        says = f"{path}: not a check-log digest: {TAKES}"
    elif what == "missing":
        says = f"{path}: no such file: {TAKES}"
    else:
        path = logs / "rank0.jsonl"
        says = f"{path}: a decision log, not a check-log digest: check logs without --merge; {TAKES}"
    rc, out, err = check_log("--merge", str(path))
    _one_line(rc, out, err, says)
    assert "zip file" not in err and "Errno" not in err


def test_a_digest_whose_compressed_meta_json_is_damaged_is_one_line(digest: Path, tmp_path: Path) -> None:
    """A damaged deflate stream raises zlib's own error, which the merge let through as a traceback."""
    bad = tmp_path / "bad.digest"
    raw = bytearray(digest.read_bytes())
    with zipfile.ZipFile(digest) as z:
        info = z.getinfo("meta.json")
    assert info.compress_type == zipfile.ZIP_DEFLATED
    name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)  # the member's local header
    raw[info.header_offset + 30 + name_len + extra_len] = 0x07  # its data starts with a final block of the reserved type
    bad.write_bytes(bytes(raw))
    rc, out, err = check_log("--merge", str(bad))
    _one_line(rc, out, err, f"{bad}: a damaged check-log digest (meta.json: ", "write the node's digest again")


@pytest.mark.parametrize("keep", [0.6, 0.05])
def test_a_digest_cut_short_says_so(digest: Path, tmp_path: Path, keep: float) -> None:
    """A copy that stopped part-way was 'not a check-log digest (a zip archive without a digest's meta.json)' (its
    npz members are zip archives too, so one of theirs was read as the digest's index) or plain 'not a check-log digest'."""
    cut = tmp_path / "cut.digest"
    raw = digest.read_bytes()
    cut.write_bytes(raw[:int(len(raw) * keep)])
    rc, out, err = check_log("--merge", str(cut))
    _one_line(rc, out, err, f"{cut}: a check-log digest cut short or damaged ({int(len(raw) * keep)} bytes, the archive's "
              "index at its end is missing): copy the node's digest again, or write it again with check-log --digest")
