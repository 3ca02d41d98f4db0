"""check-log on logs of in-process runs: clean runs, edited logs flagged on exactly the edited pass, each
invariant able to fail, traces that replay, the plot, the JSON report, and every kind of bad input.

The logs here are written in format 1 (``V1``), whose lines are JSON objects a test can edit by name; format 2's
own edits and checks are in ``tests/test_log_format_2.py``."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from delayer_spec import PROFILES

from decision_log_harness import (
    check_log, edit_line, mixed_inputs, read_lines, write_inprocess_logs, write_seed_unbounded_logs,
)

V1 = {"format": 1}


@pytest.fixture(scope="module")
def clean_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("clean")
    write_inprocess_logs(folder, world=4, passes=80, profile="hardened", log_options=V1)
    return folder


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


# ----- clean runs --------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_checks_clean(tmp_path: Path, profile: str) -> None:
    write_inprocess_logs(tmp_path, world=2, passes=70, profile=profile, log_options=V1)
    rc, out, err = check_log(str(tmp_path), "--json", str(tmp_path / "report.json"))
    assert rc == 0 and err == "", out + err
    report = _json(tmp_path / "report.json")
    assert report["result"] == "clean" and report["checked"]["conformance"] == 140 and report["checked"]["agreement"] == 70
    reasons = report["decisions_by_reason"]
    for reason in ("delay", "no_wait", "wait_success", "wait_timeout", "token_watermark", "none-prefillable"):
        assert reasons.get(reason, 0) > 0, (reason, reasons)  # the mix reaches every kind of decision


def test_summary_of_a_clean_four_rank_run(clean_logs: Path, tmp_path: Path) -> None:
    rc, out, err = check_log(str(clean_logs), "--json", str(tmp_path / "r.json"))
    assert rc == 0, out + err
    for text in ("4 rank log(s) in 1 run(s), 320 pass records", "rank 3: 80 passes (1..80)", "decisions by reason",
                 "delay-run lengths", "wait seconds (releases after a wait", "mixed passes", "result: clean"):
        assert text in out, text
    assert all(line.split()[-1] == "ok" for line in out.splitlines() if line.startswith(("  conformance", "  agreement", "  invariant")))
    report = _json(tmp_path / "r.json")
    s = report["sessions"][0]
    assert s["passes"] == 80 and s["passes_compared"] == 80 and s["ranks_logged"] == 4
    assert sum(s["mixed_resolved"].values()) == s["mixed_passes"] > 0
    assert sum(int(k) * v for k, v in report["delay_run_lengths"].items()) > 0
    w = report["wait_seconds"]
    assert w["count"] > 0 and 0 < w["p50"] <= w["p90"] <= w["p99"] <= w["max"]


def test_wait_seconds_print_three_figures_and_the_unit(clean_logs: Path) -> None:
    """The wait percentiles printed the clock's float to six figures and no unit ('p50 0.627357'); they print three
    significant figures and 's', as the JSON keeps the exact values."""
    rc, out, err = check_log(str(clean_logs))
    assert rc == 0, out + err
    line = next(line for line in out.splitlines() if line.startswith("wait seconds (releases after a wait"))
    shown = re.findall(r"(p50|p90|p99|max) (\S+) (\S+)", line.split(": ", 1)[1])
    assert [q for q, _, _ in shown] == ["p50", "p90", "p99", "max"], line
    for _, value, unit in shown:
        assert unit == "s" and len(value.replace(".", "").lstrip("0")) == 3, line
    from prefill_delayer.conformance.summary import seconds

    assert [seconds(x) for x in (0.627357, 3.96904, 4.00054, 29.54, 99.96, 312.4, 1234.4)] == [
        "0.627 s", "3.97 s", "4.00 s", "29.5 s", "100 s", "312 s", "1234 s"]


# ----- edited logs are flagged where they were edited ---------------------------------------


def test_an_edited_decision_is_flagged_on_exactly_that_pass(clean_logs: Path, tmp_path: Path) -> None:
    logs = _copy(clean_logs, tmp_path / "logs")
    edited = edit_line(logs / "rank1.jsonl",
                       lambda o: o["kind"] == "pass" and o["pass"] > 20 and o["decision"]["output_reason"] == "no_wait",
                       lambda o: o["decision"].update(output_reason="wait_success"))
    rc, out, err = check_log(str(logs), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    findings = _json(tmp_path / "r.json")["findings"]
    k = edited["pass"]
    assert {f["pass"] for f in findings} == {k}
    conformance = [f for f in findings if f["category"] == "conformance"]
    assert [(f["property"], f["ranks"]) for f in conformance] == [("decision", [1])]
    assert "output_reason 'wait_success' (spec: 'no_wait')" in conformance[0]["message"]
    assert conformance[0]["where"] == [f"{logs / 'rank1.jsonl'}:{k + 1}"]
    assert {f["property"] for f in findings} == {"decision", "agreement-equal-args"}  # rank 1 now disagrees too
    assert "VIOLATED" in out and "result: 2 violation(s)" in out


def test_each_invariant_can_fail(clean_logs: Path, tmp_path: Path) -> None:
    def flagged(edit: Any, pick: Any) -> set[tuple[str, int]]:
        logs = _copy(clean_logs, tmp_path / f"logs{len(list(tmp_path.iterdir()))}")
        line = edit_line(logs / "rank0.jsonl", lambda o: o["kind"] == "pass" and pick(o), edit)
        rc, out, _ = check_log(str(logs), "--json", str(logs / "r.json"))
        assert rc == 1, out
        return line["pass"], {(f["property"], f["pass"]) for f in _json(logs / "r.json")["findings"]}

    k, got = flagged(lambda o: o["decision"].update(output_reason="no_wait"),
                     lambda o: o["decision"]["output_reason"] == "token_watermark")
    assert ("force-allow", k) in got and ("decision", k) in got
    k, got = flagged(lambda o: o["decision"].update(output_allow=False, output_reason="delay"),
                     lambda o: o["decision"]["input_estimation"] == "none" and o["pass"] > 30)
    assert ("none-allows", k) in got
    k, got = flagged(lambda o: o["decision"].update(wait_forward_passes=o["decision"]["wait_forward_passes"] + 1),
                     lambda o: o["decision"]["output_reason"] in ("wait_success", "wait_timeout"))
    assert ("wait-accounting", k) in got
    k, got = flagged(lambda o: o["decision"].update(wait_seconds=o["decision"]["wait_seconds"] * 2),
                     lambda o: o["decision"]["wait_forward_passes"] > 0)
    assert ("wait-accounting", k) in got
    k, got = flagged(lambda o: o["after"].update(delayed_count=o["after"]["delayed_count"] + 1),
                     lambda o: o["decision"]["output_reason"] == "delay")
    assert ("next-state", k) in got and ("continuity", k + 1) in got
    k, got = flagged(lambda o: o.update(token_usage=0.1), lambda o: o["rows"][0] == 1 and o["rows"][1] == 0)
    assert ("row", k) in got  # rank 0 would have sent its force flag


def test_seed_unbounded_delay_is_flagged_and_its_trace_replays(tmp_path: Path) -> None:
    """The seed's all branch has no cap: the slot trigger delays for as long as it holds (a known defect)."""
    logs = tmp_path / "logs"
    write_seed_unbounded_logs(logs, log_options=V1)
    rc, out, err = check_log(str(logs), "--traces", str(tmp_path / "traces"), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    assert "bounded-delay" in out and "a known defect of profile seed" in out
    report = _json(tmp_path / "r.json")
    bd = [f for f in report["findings"] if f["property"] == "bounded-delay"]
    assert [(f["ranks"], f["first_pass"], f["pass"]) for f in bd] == [([0], 2, 5), ([1], 2, 5)]
    assert "11 consecutive passes (passes 2..12)" in bd[0]["message"]
    traces = [t for t in report["traces"] if t["path"]]
    assert [t["property"] for t in traces] == ["bounded-delay", "joint-progress"]
    trace = json.loads(Path(traces[0]["path"]).read_text())
    assert trace["source"]["synthetic_first_pass"] is True  # pass 1 consumed the skip; the window starts at pass 2
    from prefill_delayer.cli import main

    for t in traces:
        assert main(["replay", t["path"]]) == 0


def test_a_verdict_counts_passes_and_rank_passes_apart(tmp_path: Path) -> None:
    """Both seed ranks break bounded-delay on pass 5: two findings, one per rank, on one pass. The verdict said
    'VIOLATED on 2 pass(es)'; it says the passes and the rank-passes, as the JSON's entry does, and past the findings
    the report lists it gives the count and what the listed ones cover, never a count of passes it does not know."""
    from prefill_delayer.conformance import check_logs
    from prefill_delayer.conformance.summary import summary_data, text

    logs = tmp_path / "logs"
    write_seed_unbounded_logs(logs, log_options=V1)
    rc, out, err = check_log(str(logs), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    report = _json(tmp_path / "r.json")
    assert [(f["property"], f["pass"], f["ranks"]) for f in report["findings"]] == [
        ("bounded-delay", 5, [0]), ("bounded-delay", 5, [1]), ("joint-progress", 5, [0, 1])]
    counted = {v["property"]: (v["violations"], v["listed"], v["passes"], v["rank_passes"]) for v in report["checks"]}
    assert counted["bounded-delay"] == (2, 2, 1, 2) and counted["joint-progress"] == (1, 1, 1, None), counted
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("  invariant ")}
    known = "a known defect of profile seed: prove refutes it"
    assert lines["bounded-delay"].endswith(f"VIOLATED on 1 pass (2 rank-passes; {known})"), out
    assert lines["joint-progress"].endswith(f"VIOLATED on 1 pass ({known})"), out  # one finding naming both ranks
    checked, _, _ = check_logs([str(logs)])
    checked.counts[("invariant", "bounded-delay")] = 500  # as if more were found than the report keeps
    shown = text(checked, summary_data(checked, []))
    assert f"VIOLATED 500 times (the 2 --json lists: on 1 pass, 2 rank-passes; {known})" in shown, shown


def test_agreement_violation_under_clock_skew_and_its_trace(tmp_path: Path) -> None:
    """The seed reads the queue timeout on each rank's own clock (upstream #30521): fast clocks split the group."""
    def queue(rank: int, k: int) -> tuple:
        return True, 0.9, 100, 80, 1024, 10

    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=4, passes=8, profile="seed", max_delay_passes=100, inputs=queue,
                         rates=[1.0, 1.0, 1.3, 1.3], skip=False,
                         server_args={"enable_dp_attention": True, "prefill_delayer_queue_min_ratio": 0.5,
                                      "prefill_delayer_max_delay_ms": 15.0}, log_options=V1)
    rc, out, err = check_log(str(logs), "--traces", str(tmp_path / "t"), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    report = _json(tmp_path / "r.json")
    first = [f for f in report["findings"] if f["category"] == "agreement"][0]
    assert first["property"] == "agreement-equal-args" and first["known_defect"]
    assert "from the same state and gathered rows" in first["message"]
    assert not [f for f in report["findings"] if f["category"] == "conformance"]  # the runtime did what the spec says
    written = [t for t in report["traces"] if t["path"] and t["property"] == "agreement-equal-args"]
    assert len(written) == 1 and written[0]["passes"][1] == first["pass"]
    from prefill_delayer.cli import main

    assert main(["replay", written[0]["path"]]) == 0


# ----- plot, output files ----------------------------------------------------------------------


def test_plot_writes_a_png(clean_logs: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "timeline.png"
    rc, out, err = check_log(str(clean_logs), "--plot", str(png))
    assert rc == 0, out + err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


@pytest.mark.parametrize("log_format", [1, 2])
def test_the_plot_s_timeline_holds_every_logged_decision(log_format: int, tmp_path: Path) -> None:
    """Each rank's row of the timeline has one cell per logged pass: held where the summary counts a holding
    reason, each allowing reason's colour as often as the summary counts it, blank only where nothing was logged.
    (The streaming check-log holds no records: a timeline read from them was blank.)"""
    from collections import Counter

    from prefill_delayer.conformance import check_logs
    from prefill_delayer.conformance.plot import categories, timeline_grid

    write_inprocess_logs(tmp_path, world=4, passes=80, profile="hardened", log_options={"format": log_format})
    report, _, _ = check_logs([str(tmp_path)], plot=True)
    _, index = categories(report)
    (s,) = report.sessions
    lo, hi, grid = timeline_grid(report, s.index, len(s.logs), index)
    assert (lo, hi) == (1, 80)
    for row, log in enumerate(s.logs):
        st = report.stats[(s.index, log.rank)]
        cells = Counter(grid[row].tolist())
        assert st.passes == 80 and cells[0] == 0
        held = sum(n for reason, n in st.reasons.items() if reason not in index)
        assert cells[1] == held > 0
        for reason, code in index.items():
            assert cells[code] == st.reasons[reason], reason
        assert sum(cells.values()) == 80


def test_the_plot_s_histogram_draws_the_run_bounds_the_policy_declares(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The #35241 loop under the release breaks no-decode-hold (8), and the histogram drew only bounded-delay's bound
    (29). Its lines are every rank run bound of the policy, read from its monitors, each named, the violated ones
    marked and drawn even where they would be off the scale; the seed's open run breaks bounded-delay (3)."""
    from prefill_delayer.cli import main
    from prefill_delayer.conformance import check_logs
    from prefill_delayer.conformance.plot import limits_drawn, run_limits

    logs = tmp_path / "sim-logs"
    monkeypatch.setenv("PREFILL_DELAYER_DECISION_LOG", str(logs))
    assert main(["simulate", "--scenario", "35241", "--drift", "3,3,0,2,3,3,2,3", "--profile", "sglang-0.5.17",
                 "--duration", "200", "--warmup", "0", "--no-progress"]) == 0
    monkeypatch.delenv("PREFILL_DELAYER_DECISION_LOG")
    report, _, _ = check_logs([str(logs)])
    limits = run_limits(report)  # max_delay_passes 30: runs of at most 29
    assert limits == [(8, ["no-decode-hold"], ["no-decode-hold"]), (29, ["bounded-delay", "mixed-bounded-delay"], [])]
    assert limits_drawn(limits, longest=29) == (limits, [])
    assert limits_drawn(limits, longest=1) == (limits[:1], limits[1:])  # 8 is past 2 x 1 + 5, but violated: drawn
    write_seed_unbounded_logs(tmp_path / "seed", log_options=V1)
    report, _, _ = check_logs([str(tmp_path / "seed")])
    limits = run_limits(report)
    assert limits == [(3, ["bounded-delay", "mixed-bounded-delay"], ["bounded-delay"]), (8, ["no-decode-hold"], [])]
    assert limits_drawn(limits, longest=1) == (limits[:1], limits[1:])  # 8, far past any run of 1: named, not drawn


def test_plot_without_matplotlib_is_a_clear_error(clean_logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    rc, out, err = check_log(str(clean_logs), "--plot", str(tmp_path / "x.png"))
    assert rc == 2 and "needs matplotlib" in err and "prefill-delayer[plot]" in err and out == ""
    rc, _, err = check_log(str(clean_logs), "--plot", str(tmp_path / "x.txt"))
    assert rc == 2 and "ending in .png" in err


# ----- bad input --------------------------------------------------------------------------------


def test_a_truncated_last_line_is_tolerated_and_reported(clean_logs: Path, tmp_path: Path) -> None:
    logs = _copy(clean_logs, tmp_path / "logs")
    path = logs / "rank2.jsonl"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 150])  # a crash in the middle of the last line
    rc, out, err = check_log(str(logs))
    assert rc == 0, out + err
    assert f"{path}:81: last line cut short" in out and "rank 2: 79 passes (1..79)" in out


def test_a_corrupt_line_stops_with_file_and_line(clean_logs: Path, tmp_path: Path) -> None:
    logs = _copy(clean_logs, tmp_path / "logs")
    path = logs / "rank0.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[5] = lines[5][:40] + "\n"
    path.write_text("".join(lines))
    rc, out, err = check_log(str(logs))
    assert rc == 2 and out == "" and err.startswith(f"prefill-delayer check-log: {path}:6: not JSON"), err
    lines[5] = json.dumps({**json.loads(lines[6]), "rows": [1, 2, 3]}) + "\n"
    path.write_text("".join(lines))
    rc, _, err = check_log(str(logs))
    assert rc == 2 and f"{path}:6: field 'rows' expected 40 integers (4 ranks of 10), got 3 entries" in err
    lines[5] = json.dumps({**json.loads(lines[6]), "decision": {"output_allow": "yes"}}) + "\n"
    path.write_text("".join(lines))
    rc, _, err = check_log(str(logs))
    assert rc == 2 and f"{path}:6: field 'decision' lacks 'input_estimation'" in err
    lines[5] = lines[7]  # the same pass twice
    path.write_text("".join(lines))
    rc, _, err = check_log(str(logs))
    assert rc == 2 and "is logged twice" in err
    path.write_text("".join(lines[1:]))  # no header
    rc, _, err = check_log(str(path))
    assert rc == 2 and f"{path}:1: not a decision log: its first line is not a header" in err


def test_spec_hash_or_configuration_that_differ(clean_logs: Path, tmp_path: Path) -> None:
    # Another spec than this build's: an error, or --own-profile checks against this build's profile.
    logs = _copy(clean_logs, tmp_path / "spec")
    for p in logs.iterdir():
        p.write_text(p.read_text().replace(read_lines(p)[0]["spec_hash"], "0123456789abcdef"))
    rc, out, err = check_log(str(logs))
    assert rc == 2 and "different spec than this build's" in err and "--own-profile" in err
    rc, out, err = check_log(str(logs), "--own-profile")
    assert rc == 0 and "written under another spec (0123456789abcdef)" in out, out + err
    # Logs of two configurations, one run after the other: each checked against its own (a restart); logging at
    # the same time they are an error (tests/test_check_log_input.py), or --own-profile checks each against its own.
    other = tmp_path / "other"
    write_inprocess_logs(other, world=2, passes=20, profile="seed", max_delay_passes=5, log_options=V1)
    rc, out, err = check_log(str(clean_logs), str(other))
    assert rc == 0 and "2 configurations, one after another" in out, out + err
    rc, out, err = check_log(str(clean_logs), str(other), "--own-profile")
    assert rc == 0 and "run 1: profile seed, world 2" in out and "run 0: profile hardened, world 4" in out, out + err
    # A configuration this build cannot rebuild exactly (its fingerprint differs): never checked.
    bad = _copy(clean_logs, tmp_path / "fp")
    edit_line(bad / "rank0.jsonl", lambda o: o["kind"] == "header", lambda o: o["config"].update(max_delay_passes=9))
    for flag in ((), ("--own-profile",)):
        rc, _, err = check_log(str(bad), *flag)
        assert rc == 2 and "does not rebuild the logged configuration exactly" in err, err
    # Another format, or a field this build does not know.
    edit_line(bad / "rank0.jsonl", lambda o: o["kind"] == "header", lambda o: o.update(format=3))
    rc, _, err = check_log(str(bad / "rank0.jsonl"))
    assert rc == 2 and "rank0.jsonl:1: decision log format 3; this build reads format 1, 2" in err


def test_gaps_are_reported_not_guessed_over(clean_logs: Path, tmp_path: Path) -> None:
    logs = _copy(clean_logs, tmp_path / "logs")
    path = logs / "rank2.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if json.loads(line).get("pass") not in (30, 31, 32)))
    rc, out, err = check_log(str(logs), "--json", str(tmp_path / "r.json"))
    assert rc == 0, out + err
    assert "rank 2: 77 passes (1..80), 0 failed, gaps 30..32" in out
    ranks = _json(tmp_path / "r.json")["sessions"][0]["ranks"]
    assert ranks[2]["gaps"] == [[30, 32]] and ranks[0]["gaps"] == []


def test_passes_missing_inside_a_log_are_a_note_and_the_result_says_so(clean_logs: Path, tmp_path: Path) -> None:
    logs = _copy(clean_logs, tmp_path / "logs")
    for rank in range(4):  # a stretch lost on every rank: the per-rank figures alone read "clean"
        path = logs / f"rank{rank}.jsonl"
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(line for line in lines if not 40 <= (json.loads(line).get("pass") or 0) <= 49))
    rc, out, err = check_log(str(logs), "--json", str(tmp_path / "r.json"))
    assert rc == 0, out + err
    assert ("ranks 0, 1, 2, 3: passes 40..49 (10 in all, each) missing from the log, with no fail line for them" in out
            and "result: clean on the passes logged; 40 pass(es) missing from the logs (notes)" in out), out
    report = _json(tmp_path / "r.json")
    assert report["missing_passes"] == 40 and report["sessions"][0]["ranks"][1]["missing_passes"] == [[40, 49]]
    rc, out, err = check_log(str(clean_logs))
    assert rc == 0 and out.rstrip().endswith("result: clean") and "missing" not in out, out


def test_a_failed_pass_is_no_missing_pass() -> None:
    from prefill_delayer.conformance.summary import missing_passes

    assert missing_passes([(5, 9), (20, 20)], [6, 7, 20, 30]) == [(5, 5), (8, 9)]
    assert missing_passes([(5, 9)], []) == [(5, 9)] and missing_passes([], [3]) == []


def test_files_of_two_runs_given_as_one_are_named_and_not_blamed_on_agreement(tmp_path: Path) -> None:
    """Ranks 0-1 of one run beside ranks 2-3 of another, a minute later: the note says what the folder holds, and a
    pass whose rows differ is no agreement violation (agreement is a claim about ranks that gathered the same rows)."""
    write_inprocess_logs(tmp_path / "a", world=4, passes=40)
    write_inprocess_logs(tmp_path / "b", world=4, passes=40, inputs=lambda rank, k: mixed_inputs(rank, k + 3))
    mix = tmp_path / "mix"
    mix.mkdir()
    for rank, run in ((0, "a"), (1, "a"), (2, "b"), (3, "b")):
        lines = (tmp_path / run / f"rank{rank}.jsonl").read_text().splitlines(keepends=True)
        header = json.loads(lines[0])
        header["started"] += 60.0 * (run == "b")
        (mix / f"rank{rank}.jsonl").write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    rc, out, err = check_log(str(mix), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    assert re.search(r"run 0: ranks 2, 3 logged pass 1 6\d\.\d s after ranks 0, 1", out), out
    assert "the files of different runs?" in out
    findings = _json(tmp_path / "r.json")["findings"]
    differ = {f["pass"] for f in findings if f["property"] == "rows-differ"}
    assert differ, findings
    assert not [f for f in findings if f["property"].startswith("agreement") and f["pass"] in differ], findings
    assert "rows-differ: ... and" in out and "more (--json lists up to 200 of each property)" in out, out
    rc, out, err = check_log(str(tmp_path / "a"))
    assert rc == 0 and "different runs" not in out, out + err


def test_restarted_runs_in_one_folder_are_checked_as_runs(tmp_path: Path) -> None:
    write_inprocess_logs(tmp_path, world=2, passes=15, log_options=V1)
    write_inprocess_logs(tmp_path, world=2, passes=10)  # the first run's files become rank*.jsonl.1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.jsonl", "rank0.jsonl.1", "rank1.jsonl", "rank1.jsonl.1"]
    rc, out, err = check_log(str(tmp_path))
    assert rc == 0 and "in 2 run(s), 50 pass records" in out, out + err
    (tmp_path / "rank1.jsonl.1").unlink()
    rc, out, err = check_log(str(tmp_path))
    assert rc == 2 and "different numbers of runs (rank 0: 2, rank 1: 1" in err


@pytest.mark.parametrize("case", ["empty folder", "missing", "empty file", "no records"])
def test_unusable_input_is_exit_2_with_one_line(tmp_path: Path, case: str) -> None:
    if case == "empty folder":
        target, expected = tmp_path, "no decision logs in this folder"
    elif case == "missing":
        target, expected = tmp_path / "nope", "no such file or folder"
    elif case == "empty file":
        target = tmp_path / "rank0.jsonl"
        target.write_text("")
        expected = f"nothing to check: {target} is empty; a decision log starts with a header line"
    else:
        target = tmp_path / "rank0.jsonl"
        target.write_text('{"kind": "hea')  # only a cut header
        expected = f"nothing to check: {target}: no complete header line (its only line is cut short at 13 bytes)"
    rc, out, err = check_log(str(target))
    assert rc == 2 and out == "" and expected in err and err.count("\n") == 1, err


def test_bad_options_are_refused_before_reading(clean_logs: Path, tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    rc, _, err = check_log(str(clean_logs), "--json", str(tmp_path / "dir"))
    assert rc == 2 and "--json" in err and "is a folder" in err
    (tmp_path / "f").write_text("")
    rc, _, err = check_log(str(clean_logs), "--traces", str(tmp_path / "f"))
    assert rc == 2 and "--traces" in err


def test_one_trace_per_window_and_a_cap_per_property(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import prefill_delayer.conformance.traces as traces

    def two_runs(rank: int, k: int) -> tuple:  # two long slot-trigger runs, a pass with no prefill between them
        return (False, 0.9, 0, 0, 0, 0) if k == 8 else (True, 0.9, 100, 80, 150, 10)

    logs = tmp_path / "logs"
    write_inprocess_logs(logs, world=2, passes=16, profile="seed", max_delay_passes=3, inputs=two_runs,
                         server_args={"enable_dp_attention": True}, log_options=V1)
    rc, out, _ = check_log(str(logs), "--traces", str(tmp_path / "all"), "--json", str(tmp_path / "all.json"))
    assert rc == 1
    windows = [tuple(t["passes"]) for t in _json(tmp_path / "all.json")["traces"] if t["property"] == "bounded-delay"]
    assert windows == [(2, 4), (10, 12)]  # one per run, both ranks' findings share it; the second run starts fresh at 10
    monkeypatch.setattr(traces, "MAX_TRACES_PER_PROPERTY", 1)
    rc, out, _ = check_log(str(logs), "--traces", str(tmp_path / "capped"))
    assert "traces (bounded-delay): 1 more window(s) of run 0 not written: at most 1 per property and run" in out
    assert len(list((tmp_path / "capped").glob("seed-bounded-delay-*.json"))) == 1


def test_a_violation_names_the_profile_of_the_run_that_violated_it_not_every_run_s(tmp_path: Path) -> None:
    """A folder holding a seed run (which refutes bounded-delay) and a clean hardened run: the violated check names
    the seed alone as the profile whose known defect it is (it named both)."""
    logs = tmp_path / "logs"
    write_seed_unbounded_logs(logs / "seed", log_options=V1)
    write_inprocess_logs(logs / "hardened", world=2, passes=40)
    rc, out, err = check_log(str(logs / "seed"), str(logs / "hardened"), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err
    assert "2 run(s)" in out and "a known defect of profile seed:" in out and "hardened" not in [
        p for c in _json(tmp_path / "r.json")["checks"] if c["property"] == "bounded-delay" for p in c["profiles"]], out
