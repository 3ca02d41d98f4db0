"""Format 2 and the streaming check-log: lines whose size does not grow with the world, the rows rebuilt and their
digest checked, a missing rank, the full-rows mode, the gate policy, the column path against the machine under a
mutated guard and a mutated table, and the merge of two nodes' digests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from prefill_delayer.conformance import check_logs
from prefill_delayer.spec.schema import rows_digest

from check_log_scenarios import _gate
from decision_log_harness import check_log, edit_pass, write_inprocess_logs


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_a_line_does_not_grow_with_the_world(tmp_path: Path) -> None:
    sizes = {}
    for world in (2, 4, 8):
        folder = tmp_path / f"w{world}"
        write_inprocess_logs(folder, world=world, passes=40)
        lines = (folder / "rank0.jsonl").read_text().splitlines()[1:]
        sizes[world] = sum(map(len, lines)) / len(lines)
        assert all(isinstance(json.loads(x), list) for x in lines)
    assert max(sizes.values()) - min(sizes.values()) < 8, sizes  # the view's numbers may take a digit more
    assert sizes[8] < 200


def test_the_digest_is_the_gathered_rows(tmp_path: Path) -> None:
    write_inprocess_logs(tmp_path, world=2, passes=5, log_options={"rows": "full"})
    header, *lines = (json.loads(x) for x in (tmp_path / "rank1.jsonl").read_text().splitlines())
    cols = header["columns"]
    for values in lines:
        rows = values[cols.index("digest") + 1:]
        assert values[cols.index("digest")] == rows_digest(rows) and len(rows) == 2 * 10  # 7 policy fields, the error, the fingerprint, the pass stamp


def test_an_edited_own_row_breaks_the_digest_and_the_view_of_the_rebuilt_rows(tmp_path: Path) -> None:
    write_inprocess_logs(tmp_path, world=4, passes=30)

    def change(values: list, columns: list) -> None:
        values[columns.index("row.waiting_queue_len")] += 7

    edit_pass(tmp_path / "rank2.jsonl", 12, change)
    report, data, _ = check_logs([str(tmp_path)])
    got = {(f.property, f.pass_number) for f in report.findings}
    assert got == {("digest", 12), ("view", 12)}, got  # the rows rebuilt are not the rows the ranks saw, nor their fold


def test_with_one_rank_missing_the_digests_still_compare_the_rows(tmp_path: Path) -> None:
    write_inprocess_logs(tmp_path, world=4, passes=30)
    (tmp_path / "rank3.jsonl").unlink()
    rc, out, err = check_log(str(tmp_path), "--json", str(tmp_path / "r.json"))
    assert rc == 1, out + err  # the desync check says a rank of the gather logged nothing; nothing else is found
    report = _json(tmp_path / "r.json")
    assert report["checked"] == {"conformance": 90, "agreement": 30}
    assert [(f["property"], f["pass"], f["ranks"]) for f in report["findings"]] == [("every-rank-logged", 1, [0, 1, 2])]

    def change(values: list, columns: list) -> None:
        values[columns.index("digest")] ^= 1

    edit_pass(tmp_path / "rank1.jsonl", 9, change)
    report, _, _ = check_logs([str(tmp_path)])
    assert [(f.property, f.pass_number, f.ranks) for f in report.findings] == [("every-rank-logged", 1, [0, 1, 2]),
                                                                              ("rows-differ", 9, [0, 1])]


def test_a_bad_value_is_file_and_line(tmp_path: Path) -> None:
    write_inprocess_logs(tmp_path, world=2, passes=10)
    edit_pass(tmp_path / "rank0.jsonl", 4, lambda v, c: v.__setitem__(c.index("before.control"), 9))
    rc, out, err = check_log(str(tmp_path))
    assert rc == 2 and f"{tmp_path / 'rank0.jsonl'}:5: field 'before.control' expected an index in [0, 3) (the header's enums), got 9\n" in err, err
    assert "got 9.0" not in err  # the line holds the integer 9


def _edit_lines(path: Path, edits: dict[int, Any]) -> None:
    """Replace pass lines by their line number (the header is line 1) with ``edits[k](text)``."""
    lines = path.read_text().splitlines(keepends=True)
    for k, fn in edits.items():
        lines[k - 1] = fn(lines[k - 1].rstrip("\n")) + "\n"
    path.write_text("".join(lines))


@pytest.mark.parametrize("edits, says", [
    # a value moved from one line to the next: the chunk's total of values is right, the flat parse alone would not see it
    ({4: lambda t: t[:-1] + ",7]", 5: lambda t: t[: t.rindex(",")] + "]"}, ":4: a pass line of 37 values (the header's columns) expected, got 38"),
    ({6: lambda t: t.replace(",", ',"1.5",', 1)[:-1].rsplit(",", 1)[0] + "]"}, ":6: field 'wall' expected a number, got \"1.5\""),
    ({7: lambda t: "[true" + t[t.index(","):]}, ":7: field 'pass' expected a number, got true"),
    ({3: lambda t: t.replace(",", ",[1],", 1)[:-1].rsplit(",", 1)[0] + "]"}, ":3: field 'wall' expected a number, got [1]"),
    ({8: lambda t: t + " [1]"}, ":8: not JSON"),
])
def test_a_malformed_pass_line_is_named_though_the_chunk_is_parsed_as_one_flat_array(
        tmp_path: Path, edits: dict, says: str) -> None:
    write_inprocess_logs(tmp_path, world=2, passes=10)
    path = tmp_path / "rank0.jsonl"
    width = len(_json_header(path)["columns"])
    assert width == 37, width  # the edits above are written for the delayer's compact columns
    _edit_lines(path, edits)
    rc, out, err = check_log(str(tmp_path))
    assert rc == 2 and out == "" and f"{path}{says}" in err, err


def test_the_flat_parse_reads_what_a_line_by_line_parse_reads_and_refuses_a_shifted_value(tmp_path: Path) -> None:
    import numpy as np

    from prefill_delayer.conformance.chunks import _flat_matrix

    write_inprocess_logs(tmp_path, world=4, passes=40)
    lines = (tmp_path / "rank1.jsonl").read_bytes().splitlines(keepends=True)[1:]
    whole = b"".join(lines)
    want = np.array([json.loads(x) for x in lines], dtype=np.float64)
    got = _flat_matrix(whole, len(lines), want.shape[1])
    assert got is not None and np.array_equal(got, want)
    # the integer columns packed as int64: the same matrix, and the same signed zeros in the float columns
    ints = np.array([all(type(json.loads(x)[j]) is int for x in lines) for j in range(want.shape[1])])
    assert 0 < ints.sum() < len(ints)
    got = _flat_matrix(whole, len(lines), want.shape[1], ints)
    assert got is not None and np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))
    j = int(np.flatnonzero(ints)[1])  # an integer column given a float, then an integer past int64: the nested parse's
    for value in ("3.0", str(2**64)):
        edited = json.loads(lines[5])
        edited[j] = "@"
        bad = b"".join(lines[:5]) + json.dumps(edited, separators=(",", ":")).replace('"@"', value).encode() + b"\n"
        assert _flat_matrix(bad + b"".join(lines[6:]), len(lines), want.shape[1], ints) is None
    shifted = lines[0].replace(b"]", b",1]") + lines[1][: lines[1].rindex(b",")] + b"]\n" + b"".join(lines[2:])
    assert _flat_matrix(shifted, len(lines), want.shape[1]) is None  # the right total of values, two lines wrong
    assert _flat_matrix(whole, len(lines), want.shape[1] + 1) is None


def _json_header(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text().splitlines()[0])


def test_the_gate_policy_logs_and_checks_in_format_2(tmp_path: Path) -> None:
    _gate(tmp_path / "h", "pdi-hardened")
    report, data, _ = check_logs([str(tmp_path / "h")])
    assert data["result"] == "clean" and data["checked"] == {"conformance": 24, "agreement": 12}
    assert json.loads((tmp_path / "h" / "rank0.jsonl").read_text().splitlines()[0])["format"] == 2
    _gate(tmp_path / "r", "pdi-0.5.23")
    report, data, _ = check_logs([str(tmp_path / "r")])
    assert {"agreement", "bounded-delay", "joint-progress"} <= {f.property for f in report.findings}
    assert all(f.known_defect for f in report.findings)


# ----- the column path catches what the machine catches ----------------------------------------


def _flagged(folder: Path, exact: bool) -> tuple[set, set]:
    report, _, _ = check_logs([str(folder)], exact=exact, sample=0.0)
    return {(f.property, f.pass_number, tuple(f.ranks)) for f in report.findings}, {f.property for f in report.findings}


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("clean")
    write_inprocess_logs(folder, world=4, passes=80, profile="hardened")
    return folder


def test_a_mutated_guard_is_flagged_by_both_paths(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from delayer_spec import POLICY, guards

    assert _flagged(clean, False)[0] == set() == _flagged(clean, True)[0]
    monkeypatch.setattr(guards, "below_cap", lambda o, c, v, s: s.delayed_count < c.max_delay_passes)
    monkeypatch.setattr(POLICY, "build_table", POLICY.build_table)  # the table resolves guards by name: rebuilt per check
    machine, props = _flagged(clean, True)
    column, _ = _flagged(clean, False)
    assert machine and "decision" in props and "paths-differ" not in props
    assert column == machine  # every pass the machine flags, the column path flags (and sends to the machine)


def test_a_mutated_table_is_flagged_by_both_paths(clean: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from delayer_spec import POLICY

    build = POLICY.build_table

    def swapped(profile: str) -> Any:
        table = build(profile)
        rows = [dataclasses.replace(t, reason="wait_success") if t.name == "idle_all_allow" else t for t in table]
        return type(table)(table.profile, table.states, tuple(rows))

    monkeypatch.setattr(POLICY, "build_table", swapped)
    machine, props = _flagged(clean, True)
    column, _ = _flagged(clean, False)
    assert machine and "decision" in props and "paths-differ" not in props
    assert column == machine


# ----- logs over two nodes ---------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["hardened", "seed-skew"])
def test_the_merge_of_two_nodes_digests_finds_what_one_check_finds(tmp_path: Path, scenario: str) -> None:
    logs = tmp_path / "logs"
    if scenario == "hardened":
        write_inprocess_logs(logs, world=4, passes=60)
    else:
        write_inprocess_logs(logs, world=4, passes=8, profile="seed", max_delay_passes=100, rates=[1.0, 1.0, 1.3, 1.3], skip=False,
                             inputs=lambda rank, k: (True, 0.9, 100, 80, 1024, 10),
                             server_args={"enable_dp_attention": True, "prefill_delayer_queue_min_ratio": 0.5,
                                          "prefill_delayer_max_delay_ms": 15.0})
    whole_rc, _, _ = check_log(str(logs), "--json", str(tmp_path / "all.json"))
    nodes = [tmp_path / "node-a", tmp_path / "node-b"]  # ranks 0, 1 on one node, 2, 3 on the other
    for node in nodes:
        node.mkdir()
    for rank in range(4):
        shutil.copy(logs / f"rank{rank}.jsonl", nodes[rank // 2] / f"rank{rank}.jsonl")
    for node in nodes:
        rc, out, err = check_log(str(node), "--digest", str(node.with_suffix(".digest")))
        assert rc in (0, 1), err
    rc, out, err = check_log("--merge", *(str(n.with_suffix(".digest")) for n in nodes), "--json", str(tmp_path / "m.json"))
    whole, merged = _json(tmp_path / "all.json"), _json(tmp_path / "m.json")
    assert rc == whole_rc, out + err
    key = lambda f: (f["category"], f["property"], f["pass"], f["ranks"], f["message"])  # noqa: E731
    assert sorted(map(key, merged["findings"])) == sorted(map(key, whole["findings"]))
    for part in ("checked", "findings_counts", "decisions_by_reason", "delay_run_lengths", "wait_seconds", "result"):
        assert merged[part] == whole[part], part
    if scenario == "seed-skew":
        assert any(f["property"] == "agreement-equal-args" for f in merged["findings"])  # found across the two nodes
    rc, _, err = check_log("--merge", str(nodes[0].with_suffix(".digest")), str(nodes[0].with_suffix(".digest")))
    assert rc == 2 and "in two digests" in err


def test_a_chunk_result_does_not_carry_the_chunk_s_bytes_back(tmp_path: Path) -> None:
    """A worker's result goes back to the parent through a pipe: the lines it parsed stay in the worker (they made
    every result of a 16-rank group-day about 16 MB bigger), and the planned task is left as planned."""
    import pickle

    from prefill_delayer.conformance.checks import build_sessions
    from prefill_delayer.conformance.stream import DEFAULT_SAMPLE, check_chunk, plan, scan

    write_inprocess_logs(tmp_path, world=4, passes=300)
    logs, _ = scan([str(tmp_path)])
    sessions, _ = build_sessions(logs, False)
    (task,) = plan(sessions[0], False, DEFAULT_SAMPLE)
    planned = pickle.dumps(task)
    out = check_chunk(task)
    assert len(out.ranks[0].number) == 300
    assert pickle.dumps(task) == planned and pickle.dumps(out.task) == planned
    log_bytes = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert all(seg.data == b"" for segs in out.task.segments for seg in segs)
    assert len(pickle.dumps(out)) < log_bytes, (len(pickle.dumps(out)), log_bytes)


@pytest.mark.parametrize("log_options", [None, {"rows": "full"}, {"format": 1}], ids=["compact", "full", "format-1"])
def test_the_sample_s_records_converted_together_are_each_pass_s_record(tmp_path: Path, log_options: Any) -> None:
    """The machine's sample converts its passes' columns at once (``records``, ``py_views``); each is what
    converting every entry alone (``_py``, as a format-1 line gives it) gives, and ``record`` is the same."""
    import numpy as np

    from prefill_delayer.conformance.checks import build_sessions
    from prefill_delayer.conformance.chunks import parse_v1, parse_v2, read_segments
    from prefill_delayer.conformance.logread import PassRec
    from prefill_delayer.conformance.stream import _model, _py, _rank_log, plan, py_state, py_views, record, records, scan

    def one_by_one(cols: Any, i: int) -> Any:
        if cols.recs is not None:
            return cols.recs[i]
        dec = cols.decision
        return PassRec(int(cols.number[i]), float(cols.now[i]), {k: _py(v[i]) for k, v in cols.readings.items()},
                       cols.rows[i].tolist() if cols.rows is not None else None, py_state(cols.before, i),
                       type(dec)(py_state(dec.next_state, i), *(_py(c[i]) for c in dec[1:])), 0.0, int(cols.fi[i]),
                       int(cols.line[i]))

    write_inprocess_logs(tmp_path, world=4, passes=80, log_options=log_options)
    logs, _ = scan([str(tmp_path)])
    sessions, _ = build_sessions(logs, False)
    (task,) = plan(sessions[0], False, 0.0)
    model, _, _ = _model(sessions[0].config)
    idx = np.array([0, 3, 4, 41, 79])
    for (header, files), segs in zip(task.logs, task.segments):
        log = _rank_log(header, files)
        cols, _ = (parse_v2 if header["format"] == 2 else parse_v1)(log, model, read_segments(segs))
        want = repr([one_by_one(cols, int(i)) for i in idx])  # values and their types
        assert repr(records(cols, idx)) == want and repr([record(cols, int(i)) for i in idx]) == want
        if cols.view is not None:
            want = [model.policy.view_cls(*(_py(v[i]) if isinstance(v, np.ndarray) else v for v in cols.view)) for i in idx]
            assert repr(py_views(model, cols.view, idx)) == repr(want)


def test_the_worker_pool_finds_what_one_process_finds_and_leaves_no_worker(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks checked in two worker processes, forked from this process or, while it runs another thread, from a fork
    server, stitched in order: the same report as one process, every worker reaped when check-log returns."""
    import multiprocessing
    import threading

    from prefill_delayer.conformance import stream

    write_inprocess_logs(tmp_path, world=4, passes=700)

    def change(values: list, columns: list) -> None:
        values[columns.index("row.waiting_queue_len")] += 7

    for number in (90, 350, 640):  # in three different chunks of 100 passes
        edit_pass(tmp_path / "rank2.jsonl", number, change)
    monkeypatch.setattr(stream, "CHUNK_RECORDS", 400)  # 100 passes of 4 ranks a chunk: 7 chunks
    reports = {}
    for jobs, busy in ((1, False), (2, False), (2, True)):
        # with another thread running, the workers come from a fork server, not a fork of this process
        other = threading.Event()
        helper = threading.Thread(target=other.wait) if busy else None
        if helper is not None:
            helper.start()
        methods: list = []
        real_context = multiprocessing.get_context

        def recording(method: Any = None, methods: list = methods, real: Any = real_context) -> Any:
            methods.append(method)
            return real(method)

        monkeypatch.setattr(multiprocessing, "get_context", recording)
        try:
            rc, out, err = check_log(str(tmp_path), "--jobs", str(jobs), "--json", str(tmp_path / f"r{jobs}{busy}.json"))
        finally:
            monkeypatch.setattr(multiprocessing, "get_context", real_context)
            other.set()
            if helper is not None:
                helper.join()
        assert rc == 1, out + err
        assert methods == ([] if jobs == 1 else ["forkserver" if busy else "fork"]), methods
        reports[jobs, busy] = _json(tmp_path / f"r{jobs}{busy}.json")
        assert multiprocessing.active_children() == []
    got = {(f["property"], f["pass"]) for f in reports[2, False]["findings"]}
    assert got == {(p, n) for n in (90, 350, 640) for p in ("digest", "view")}, got
    assert reports[2, False]["checked"]["conformance"] == 2800
    for key in ((2, False), (2, True)):
        assert {k: v for k, v in reports[key].items() if k != "tool"} == {k: v for k, v in reports[1, False].items()
                                                                         if k != "tool"}, key


def test_a_chunk_s_reasons_go_back_as_codes_and_read_back_as_the_logged_strings(tmp_path: Path) -> None:
    """A worker sends each pass's output reason as a small integer into the chunk's names: the stitcher reads back
    the strings the column path built, and a reason outside the policy's (a format-1 line may hold any) keeps its own
    name rather than taking a neighbour's."""
    import numpy as np

    from prefill_delayer.conformance.checks import build_sessions
    from prefill_delayer.conformance.chunks import parse_v2, read_segments
    from prefill_delayer.conformance.stream import DEFAULT_SAMPLE, _model, _rank_log, check_chunk, plan, scan

    write_inprocess_logs(tmp_path, world=4, passes=300)
    logs, _ = scan([str(tmp_path)])
    sessions, _ = build_sessions(logs, False)
    (task,) = plan(sessions[0], False, DEFAULT_SAMPLE)
    model, _, _ = _model(sessions[0].config)
    out = check_chunk(task)
    for ro, ((header, files), segs) in zip(out.ranks, zip(task.logs, task.segments)):
        cols, _ = parse_v2(_rank_log(header, files), model, read_segments(segs))
        want = np.asarray(cols.decision.output_reason)
        assert ro.reason_codes.dtype == np.int16 and ro.reason.tolist() == want.tolist()
        assert sum(ro.reasons.values()) == len(want) and len(ro.reasons) > 1
    known = sorted(model.policy.reasons)
    odd = np.array([known[-1], "zz-not-a-reason", known[0], ""])
    names, codes = model.reason_codes(odd)
    assert [names[c] for c in codes] == odd.tolist()


def test_take_cuts_every_column_of_a_tuple_to_some_passes_and_keeps_its_constants() -> None:
    """``decide`` runs on each fired row's passes only: ``take`` cuts a view or a ``Local`` to them (passes are the
    last axis, a per-rank column too) and leaves a configuration's constants as they are."""
    from typing import NamedTuple

    import numpy as np

    from prefill_delayer.conformance.columns import take

    class T(NamedTuple):
        a: Any
        b: Any
        c: Any

    t = T(np.arange(5), 7, np.arange(15).reshape(3, 5))
    got = take(t, np.array([1, 4]), 5)
    assert type(got) is T and got.a.tolist() == [1, 4] and got.b == 7 and got.c.tolist() == [[1, 4], [6, 9], [11, 14]]


def test_no_more_workers_than_the_log_has_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--jobs 500`` on 300 passes (at most five chunks of 64 passes) starts five workers, not 500, and finds what one
    process finds."""
    from prefill_delayer.conformance import stream

    write_inprocess_logs(tmp_path, world=2, passes=300)
    started: list[int] = []
    real = stream.start_workers

    def recording(jobs: int, **kw: Any) -> Any:
        started.append(jobs)
        return real(jobs, **kw)

    monkeypatch.setattr(stream, "start_workers", recording)
    monkeypatch.setattr("prefill_delayer.workers.cores", lambda: 500)  # a machine where 500 workers may run
    rc, out, err = check_log(str(tmp_path), "--jobs", "500", "--json", str(tmp_path / "many.json"))
    assert rc == 0 and err == "", out + err
    assert started == [5], started
    monkeypatch.setattr(stream, "start_workers", real)
    rc, out, err = check_log(str(tmp_path), "--jobs", "1", "--json", str(tmp_path / "one.json"))
    assert rc == 0, out + err
    assert ({k: v for k, v in _json(tmp_path / "many.json").items() if k != "tool"}
            == {k: v for k, v in _json(tmp_path / "one.json").items() if k != "tool"})
