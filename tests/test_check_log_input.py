"""check-log on input that used to be misjudged: a log with nothing to check, an empty file, a file of
another kind, a tampered decision on a profile with known defects, a restart with a new configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from decision_log_harness import check_log, edit_line, read_lines, write_inprocess_logs
from prefill_delayer.runtime import ConfigMismatchError, PrefillDelayer, run_ranks
from prefill_delayer.runtime.server_args import ServerArgs


def _one_line(rc: int, out: str, err: str, *fragments: str) -> None:
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, (out, err)
    assert err.startswith("prefill-delayer check-log: "), err
    for f in fragments:
        assert f in err, err


def test_a_log_without_passes_is_nothing_to_check_not_clean(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=2, passes=3)
    header = tmp_path / "header.jsonl"
    header.write_text((logs / "rank0.jsonl").read_text().splitlines(keepends=True)[0])
    rc, out, err = check_log(str(header))
    _one_line(rc, out, err, f"nothing to check: no pass is logged in {header}, only a header")
    assert "clean" not in out + err
    # A run whose only pass failed (ranks built with different configurations): a header and a failed pass.
    failed = tmp_path / "failed"

    def rank_main(rank: int, gather: Any) -> None:
        d = PrefillDelayer(2, 1, None, ServerArgs(enable_dp_attention=True), 3 + rank, 0.5, gather=gather,
                           decision_log=failed / f"rank{rank}.jsonl")
        with pytest.raises(ConfigMismatchError):
            d.negotiate(True, 0.9)
        d.close()

    failed.mkdir()
    run_ranks(2, rank_main)
    assert [o["kind"] for o in read_lines(failed / "rank0.jsonl")] == ["header", "fail"]
    rc, out, err = check_log(str(failed / "rank0.jsonl"))
    _one_line(rc, out, err, f"nothing to check: no pass is logged in {failed / 'rank0.jsonl'}, only a header and 1 failed pass",
              "every pass the delayer ran failed; the first, rank 0's pass 1: ConfigMismatchError: ", "max_delay_passes",
              f"[{failed / 'rank0.jsonl'}:2]")
    assert "ran no pass" not in err


def test_an_empty_file_says_so_once(tmp_path: Path) -> None:
    empty = tmp_path / "rank0.jsonl"
    empty.write_text("")
    rc, out, err = check_log(str(empty))
    _one_line(rc, out, err, f"nothing to check: {empty} is empty; a decision log starts with a header line")
    assert err.count(str(empty)) == 1 and "ignored" not in err
    rc, out, err = check_log(str(tmp_path))
    _one_line(rc, out, err, f"{empty} is empty")


def test_a_trace_or_a_report_given_as_a_log_is_called_what_it_is(tmp_path: Path) -> None:
    from test_cli_input import good_trace

    trace = tmp_path / "seed-bounded-delay.json"
    trace.write_text(json.dumps(good_trace("seed"), indent=1) + "\n")
    rc, out, err = check_log(str(trace))
    _one_line(rc, out, err, f"{trace} is a counterexample trace", f"prefill-delayer replay {trace}")
    assert "not JSON" not in err
    trace.write_text(json.dumps(good_trace("seed")) + "\n")  # on one line: JSON, but no header
    rc, out, err = check_log(str(trace))
    _one_line(rc, out, err, f"{trace} is a counterexample trace")
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=2, passes=5)
    report = tmp_path / "report.json"
    assert check_log(str(logs), "--json", str(report))[0] == 0
    rc, out, err = check_log(str(report))
    _one_line(rc, out, err, f"{report} is a check-log report (check-log --json), not a decision log")


def test_a_tampered_decision_is_no_known_defect_of_the_profile(tmp_path: Path) -> None:
    """On the seed, agreement-equal-args is a known defect; a disagreement made by editing one rank's log is not it."""
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=4, passes=80, profile="seed", log_options={"format": 1})  # lines editable by name
    edited = edit_line(logs / "rank1.jsonl",
                       lambda o: o["kind"] == "pass" and o["pass"] > 20 and o["decision"]["output_reason"] == "no_wait",
                       lambda o: o["decision"].update(output_reason="wait_success"))
    rc, out, err = check_log(str(logs), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    findings = json.loads((tmp_path / "r.json").read_text())["findings"]
    agreement = [f for f in findings if f["category"] == "agreement"]
    assert [(f["property"], f["pass"]) for f in agreement] == [("agreement-equal-args", edited["pass"])]
    assert not agreement[0]["known_defect"]
    assert f"not a known defect of the profile: the log diverges from the spec at pass {edited['pass']}" in agreement[0]["message"]
    assert "a known defect of profile seed" not in out


def test_a_restart_with_a_new_configuration_is_checked_run_by_run(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=2, passes=30, max_delay_passes=4)
    write_inprocess_logs(logs, world=2, passes=20, max_delay_passes=6)  # the first run's files become rank*.jsonl.1
    assert sorted(p.name for p in logs.iterdir()) == ["rank0.jsonl", "rank0.jsonl.1", "rank1.jsonl", "rank1.jsonl.1"]
    rc, out, err = check_log(str(logs), "--json", str(tmp_path / "r.json"))
    assert rc == 0, out + err
    sessions = json.loads((tmp_path / "r.json").read_text())["sessions"]
    assert [(s["config"]["max_delay_passes"], s["passes"]) for s in sessions] == [(4, 30), (6, 20)]
    assert "2 configurations, one after another" in out
    # Two configurations logging at the same time are no restart: still refused without --own-profile.
    first = read_lines(logs / "rank0.jsonl.1")[0]
    for name in ("rank0.jsonl", "rank1.jsonl"):
        path = logs / name
        lines: list[Any] = [json.loads(line) for line in path.read_text().splitlines()]
        lines[0]["started"] = first["started"]
        for o in lines[1:]:  # format 2's pass lines: [pass, wall (seconds since started), ...]
            o[1] = 1e-3
        path.write_text("".join(json.dumps(o) + "\n" for o in lines))
    rc, out, err = check_log(str(logs))
    _one_line(rc, out, err, "the logs come from 2 different configurations or gather groups")


def test_a_file_of_binary_garbage_among_the_logs_is_refused_naming_it(tmp_path: Path) -> None:
    """100 random bytes, no newline, saved as a rank's log: no header was ever written, and they do not start like one
    (which a rank that crashed while writing its header leaves): not a decision log, exit 2. It was noted as a last
    line cut short by a crash, ignored, and the check went on."""
    import random

    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=4, passes=10)
    path = logs / "rank3.jsonl"
    path.write_bytes(bytes(random.Random(7).choice([b for b in range(256) if b != 0x0A]) for _ in range(100)))
    rc, out, err = check_log(str(logs))
    _one_line(rc, out, err, f"{path}:1: not a decision log: its only line (100 bytes, no newline) is not the start of "
              "a header line")
    assert "cut short" not in err and "ignored" not in err


def test_a_log_of_nul_bytes_is_noted_as_a_power_loss_and_its_rank_counts_as_unlogged(tmp_path: Path) -> None:
    """NUL bytes, what a file system can leave of a file whose blocks were never written before a power loss: no
    header, but no stranger's file either; noted like a header cut short, so the other ranks are still checked."""
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=4, passes=10)
    path = logs / "rank3.jsonl"
    path.write_bytes(b"\0" * 64)
    rc, out, err = check_log(str(logs))
    assert rc == 1 and err == "", out + err
    assert f"{path}: no complete header line (its only line is cut short at 64 bytes: its only line is NUL bytes: a " \
           "power loss before its header reached the disk?): ignored, its rank counts as unlogged" in out, out
    assert "place 3 of the gather logged nothing" in out


def test_a_header_cut_short_is_noted_as_no_complete_header_and_its_rank_counts_as_unlogged(tmp_path: Path) -> None:
    """A rank that crashed (or whose disk filled) while writing its header leaves the header's first bytes: noted, its
    rank unlogged (every-rank-logged flags the run), the other ranks checked."""
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=4, passes=10)
    path = logs / "rank3.jsonl"
    path.write_bytes(path.read_bytes()[:40])
    rc, out, err = check_log(str(logs))
    assert rc == 1 and err == "", out + err
    assert f"{path}: no complete header line (its only line is cut short at 40 bytes: a crash, or a full disk, while its " \
           "header was written?): ignored, its rank counts as unlogged" in out, out
    assert "place 3 of the gather logged nothing" in out and "last line cut short" not in out


def test_a_line_that_is_not_utf8_says_so_in_plain_words(tmp_path: Path) -> None:
    """It said `'utf-8' codec can't decode byte 0xff in position 17: invalid start byte`."""
    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=2, passes=10)
    path = logs / "rank1.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[5] = b'{"kind": "fail", \xff\n'
    path.write_bytes(b"".join(lines))
    rc, out, err = check_log(str(logs))
    _one_line(rc, out, err, f"{path}:6: not JSON (byte 0xff, 17 bytes into the line, is not UTF-8 text)")
    assert "codec" not in err


@pytest.mark.parametrize("merge", [False, True], ids=["logs", "merge"])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 merge: bool) -> None:
    """``check-log ""`` checked the logs in the current folder (``Path("")`` is ``.``) and ``--merge ""`` said
    ``: is a folder``; an output option given an empty name is refused, and so is an input path now."""
    write_inprocess_logs(tmp_path, world=2, passes=3)
    monkeypatch.chdir(tmp_path)
    wanted = "PATH needs a digest file name, got an empty string" if merge else \
        "PATH needs a log file or folder name, got an empty string"
    for given in ([""], ["rank0.jsonl", ""]):
        rc, out, err = check_log(*(["--merge"] if merge else []), *given)
        _one_line(rc, out, err, wanted)
