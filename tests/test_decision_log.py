"""The runtime's decision log: off by default, on by keyword or environment, what a line holds, failed passes,
flushing, rotation, and a log that cannot be written (reported once, counted, never breaking a pass)."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from delayer_spec import INITIAL_STATE
from prefill_delayer.runtime import (
    CollectiveError,
    ConfigMismatchError,
    PeerInputError,
    PrefillDelayer,
    ServerArgs,
    run_ranks,
)
from prefill_delayer.runtime.decision_log import (
    DECISION_LOG_ENV, KEEP_ENV, MAX_MB_ENV, ROWS_ENV, DecisionLogOptions, open_decision_log, options_from,
)
from prefill_delayer.spec import Config, ConfigError
from delayer_spec import ROW_FIELDS
from prefill_delayer.spec.hashing import spec_hash

from decision_log_harness import check_log, read_lines, write_inprocess_logs

SA = ServerArgs(enable_dp_attention=True, prefill_delayer_queue_min_ratio=0.5)


def _delayer(world: int, gather: Any, **kw: Any) -> PrefillDelayer:
    return PrefillDelayer(world, 1, None, kw.pop("server_args", SA), kw.pop("max_delay_passes", 5), 0.5, gather=gather, **kw)


# ----- off, on ----------------------------------------------------------------------------


def test_off_by_default_and_explicitly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DECISION_LOG_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    d = _delayer(1, lambda row: [list(row)])
    d.negotiate(True, 0.9)
    assert d.decision_log is None and list(tmp_path.iterdir()) == []
    monkeypatch.setenv(DECISION_LOG_ENV, str(tmp_path / "logs"))
    off = _delayer(1, lambda row: [list(row)], decision_log=False)  # False wins over the environment
    assert off.decision_log is None and not (tmp_path / "logs").exists()


def test_environment_variable_writes_one_file_per_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "logs" / "not-yet-there"
    monkeypatch.setenv(DECISION_LOG_ENV, str(folder))
    decisions: dict[int, list] = {}

    def rank_main(rank: int, gather: Any) -> None:
        d = _delayer(2, gather, profile="hardened")
        decisions[rank] = [d.negotiate(rank == 0 or k >= 2, 0.9, 10, 4, 64, 2) for k in range(4)]
        d.close()

    run_ranks(2, rank_main)
    assert sorted(p.name for p in folder.iterdir()) == ["rank0.jsonl", "rank1.jsonl"]
    for rank in (0, 1):
        lines = read_lines(folder / f"rank{rank}.jsonl")
        header, passes = lines[0], lines[1:]
        c = Config(**header["config"])
        assert header["kind"] == "header" and header["rank"] == rank == header["group_rank"]
        assert header["config"] == c.as_dict() and c.profile == "hardened" and c.dp_size == 2
        assert header["fingerprint"] == c.fingerprint() and header["spec_hash"] == spec_hash()
        assert header["row_fields"] == list(ROW_FIELDS) and header["part"] == 0
        assert [p["pass"] for p in passes] == [1, 2, 3, 4] and all(p["kind"] == "pass" for p in passes)
        assert header["format"] == 2 and header["mode"] == "compact" and header["columns"][:3] == ["pass", "wall", "now"]
        for p, d in zip(passes, decisions[rank]):
            assert p["mrr"] == 64 and p["token_usage"] == 0.9
            # the own row holds the policy's fields; the envelope's pass stamp has a column of its own (its pass number)
            assert p["row"][6] == 64 and len(p["row"]) == len(ROW_FIELDS) - 3 and p["pass_stamp"] == 1
            assert p["view"]["mrr_max"] == 64 and p["view"]["n"] == 2
            dec = p["decision"]
            assert (dec["output_allow"], dec["output_reason"], dec["wait_forward_passes"], dec["wait_seconds"]) == (
                d.output_allow, d.output_reason, d.wait_forward_passes, d.wait_seconds)
            assert dec["input_estimation"] == d.input_estimation and dec["num_prefillable"] == d.num_prefillable
            assert tuple(p["after"].values()) == tuple(d.next_state)
        assert tuple(passes[0]["before"].values()) == tuple(INITIAL_STATE)
        assert passes[0]["digest"] == read_lines(folder / f"rank{1 - rank}.jsonl")[1]["digest"]  # the same gathered table


@pytest.mark.parametrize("where, named", [("a-file", "a-file"), ("a-file/logs", "a-file")])
def test_a_decision_log_folder_that_is_a_file_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture, where: str, named: str) -> None:
    """PREFILL_DELAYER_DECISION_LOG names a folder: a file there used to read 'cannot open it: FileExistsError: [Errno 17]
    File exists'. The passes go on without the log, as for any log that cannot be opened."""
    (tmp_path / "a-file").write_text("kept\n")
    monkeypatch.setenv(DECISION_LOG_ENV, str(tmp_path / where))
    with caplog.at_level(logging.ERROR):
        d = _delayer(1, lambda row: [list(row)])
    d.negotiate(True, 0.9)
    d.close()
    log = d.decision_log
    assert log is not None and log.failure is not None
    assert f"{tmp_path / named} is a file; expected a folder" in log.failure and "File exists" not in log.failure, log.failure
    assert f"{tmp_path / named} is a file; expected a folder" in caplog.text
    assert (tmp_path / "a-file").read_text() == "kept\n"


@pytest.mark.parametrize("name", ["sglang-0.5.17", "logs.2026-12-07"])
def test_a_new_folder_whose_name_holds_dots_is_a_folder(tmp_path: Path, name: str) -> None:
    """Any path but a .jsonl file is a folder: a run's folder is often named for a release or a date. (A refusal of
    new paths with a suffix, tried once, refused these.)"""
    d = _delayer(1, lambda row: [list(row)], decision_log=tmp_path / name)
    d.close()
    assert (tmp_path / name / "rank0.jsonl").is_file()


def test_keyword_path_folder_and_writable_file(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    d = _delayer(1, lambda row: [list(row)], decision_log=str(path))
    d.negotiate(True, 0.9)
    d.close()
    assert [x["kind"] for x in read_lines(path)] == ["header", "pass"]
    d = _delayer(1, lambda row: [list(row)], decision_log=tmp_path)  # an existing folder: rank{r}.jsonl in it
    d.negotiate(False, 0.9)
    d.close()
    assert [x["kind"] for x in read_lines(tmp_path / "rank0.jsonl")] == ["header", "pass"]
    d = _delayer(1, lambda row: [list(row)], decision_log=tmp_path / "new" / "folder")  # not .jsonl: a folder, created
    d.negotiate(False, 0.9)
    d.close()
    assert [x["kind"] for x in read_lines(tmp_path / "new" / "folder" / "rank0.jsonl")] == ["header", "pass"]
    buf = io.StringIO()
    d = _delayer(1, lambda row: [list(row)], decision_log=buf)
    d.negotiate(True, 0.9)
    d.close()
    assert not buf.closed  # the caller's file: flushed, not closed
    header, line = (json.loads(x) for x in buf.getvalue().splitlines())
    assert header["kind"] == "header" and isinstance(line, list) and line[0] == 1  # a format-2 pass line: pass 1
    for bad in (123, b"bytes", ""):
        with pytest.raises(ConfigError, match="decision_log"):
            _delayer(1, lambda row: [list(row)], decision_log=bad)


# ----- failed passes and the skip flag ---------------------------------------------------------


def test_failed_passes_are_logged_as_such(tmp_path: Path) -> None:
    def rank_main(rank: int, gather: Any) -> list[str]:
        got = []
        d = _delayer(2, gather, decision_log=tmp_path / "a")
        d.negotiate(rank == 0, 0.9)
        try:
            d.negotiate(True, 0.9, waiting_queue_len=-1 if rank == 1 else 0)
        except PeerInputError as err:
            got.append(type(err).__name__)
        m = _delayer(2, gather, max_delay_passes=3 + rank, decision_log=tmp_path / "b")
        try:
            m.negotiate(True, 0.9)
        except ConfigMismatchError as err:
            got.append(type(err).__name__)
        d.close()
        m.close()
        return got

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert run_ranks(2, rank_main) == [["PeerInputError", "ConfigMismatchError"]] * 2
    for rank in (0, 1):
        a = read_lines(tmp_path / "a" / f"rank{rank}.jsonl")
        assert [x["kind"] for x in a] == ["header", "pass", "fail"]
        fail = a[2]
        assert fail["error"] == "PeerInputError" and fail["pass"] == 2 and "rank 1: waiting_queue_len" in fail["message"]
        assert fail["before"] == a[1]["after"] and fail["inputs"]["waiting_queue_len"] == (-1 if rank == 1 else 0)
        assert len(fail["rows"]) == 2 * len(ROW_FIELDS)
        b = read_lines(tmp_path / "b" / f"rank{rank}.jsonl")
        assert [x["kind"] for x in b] == ["header", "fail"] and b[1]["error"] == "ConfigMismatchError"

    def broken(row: Any) -> Any:
        raise TimeoutError("peer gone")

    d = _delayer(1, broken, decision_log=tmp_path / "c.jsonl")
    with pytest.raises(CollectiveError):
        d.negotiate(True, 0.9)
    d.skip_first_delayer = False
    d.close()
    c = read_lines(tmp_path / "c.jsonl")
    assert [x["kind"] for x in c] == ["header", "fail", "set"]
    assert c[1]["error"] == "CollectiveError" and c[1]["rows"] is None and "peer gone" in c[1]["message"]
    assert c[2]["after_pass"] == 0 and c[2]["skip_first_armed"] is False


# ----- buffering, rotation ----------------------------------------------------------------


def test_lines_are_flushed_within_a_second_and_at_close(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    d = _delayer(1, lambda row: [list(row)], decision_log=DecisionLogOptions(path, flush_interval_s=1.0))
    d.negotiate(True, 0.9)
    assert len(path.read_text().splitlines()) == 1  # the header is written at once; the pass is buffered
    t0 = time.monotonic()
    while len(path.read_text().splitlines()) < 2 and time.monotonic() - t0 < 3.0:
        time.sleep(0.02)
    assert len(path.read_text().splitlines()) == 2 and time.monotonic() - t0 <= 1.5
    d.negotiate(True, 0.9)
    d.close()  # written at close, without waiting for the writer's next round
    assert len(path.read_text().splitlines()) == 3
    d.negotiate(True, 0.9)  # a pass after close works, unlogged
    assert len(path.read_text().splitlines()) == 3


def test_rotation_keeps_a_capped_number_of_files_each_with_a_header(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    opts = DecisionLogOptions(path, max_bytes=4000, backup_count=2)
    d = _delayer(1, lambda row: [list(row)], decision_log=opts)
    for k in range(60):
        d.negotiate(k % 3 != 0, 0.9)
        d.decision_log.flush()
    d.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["r.jsonl", "r.jsonl.1", "r.jsonl.2"]
    parts = []
    for name in files:
        lines = read_lines(tmp_path / name)
        assert lines[0]["kind"] == "header" and all(x["kind"] == "pass" for x in lines[1:])
        assert (tmp_path / name).stat().st_size <= 4000 + 1000
        parts.append(lines[0]["part"])
    assert parts[0] > parts[1] > parts[2] > 0  # the oldest parts were removed
    rc, out, err = check_log(str(tmp_path))
    assert rc == 0, out + err
    assert "first" in out and "rotated away" in out and "result: clean" in out
    # A new run into the same path keeps the old one as a rotated file.
    d = _delayer(1, lambda row: [list(row)], decision_log=opts)
    d.negotiate(True, 0.9)
    d.close()
    assert [x["kind"] for x in read_lines(path)] == ["header", "pass"]
    assert read_lines(tmp_path / "r.jsonl.1")[0]["run"] != read_lines(path)[0]["run"]


# ----- a log that cannot be written ------------------------------------------------------------


class _FullDisk(io.StringIO):
    """A file whose writes fail with ENOSPC after the header."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def write(self, s: str) -> int:
        self.calls += 1
        if self.calls > 1:
            raise OSError(28, "No space left on device")
        return super().write(s)


def test_a_log_that_cannot_be_written_stops_once_counted_and_never_breaks_a_pass(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from prefill_delayer.runtime import PrometheusPrefillDelayerMetrics

    reg = prometheus_client.CollectorRegistry()
    metrics = PrometheusPrefillDelayerMetrics(5, registry=reg, labels={"tp_rank": 0})
    full = _FullDisk()
    caplog.set_level(logging.ERROR, logger="prefill_delayer.runtime.decision_log")
    d = _delayer(1, lambda row: [list(row)], decision_log=full, metrics_collector=metrics)
    for k in range(5):
        d.negotiate(True, 0.9)
        d.decision_log.flush()
    assert d.passes == 5 and d.decision_log.failure is not None and "No space left" in d.decision_log.failure
    assert full.calls == 2  # the header, one failed write, then nothing
    assert len([r for r in caplog.records if "decision log" in r.getMessage()]) == 1
    assert reg.get_sample_value("prefill_delayer_decision_log_errors_total", {"reason": "write"}) == 1.0

    # A path that cannot be opened (inside a file): the delayer works, the failure is reported and counted once.
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    caplog.clear()
    d = _delayer(1, lambda row: [list(row)], decision_log=blocker / "log.jsonl", metrics_collector=metrics)
    assert d.negotiate(True, 0.9).output_allow is True and d.passes == 1
    assert d.decision_log.failure.startswith("open:")
    assert len([r for r in caplog.records if "decision log" in r.getMessage()]) == 1
    assert reg.get_sample_value("prefill_delayer_decision_log_errors_total", {"reason": "open"}) == 1.0


def test_options_are_validated() -> None:
    for kw in ({"max_bytes": 0}, {"backup_count": -1}, {"flush_interval_s": 2.0}, {"flush_interval_s": 0}):
        with pytest.raises(ConfigError):
            DecisionLogOptions("x.jsonl", **kw)
    assert open_decision_log(False, Config(), None) is None


def test_bad_size_variables_are_config_errors(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(DECISION_LOG_ENV, str(tmp_path))
    monkeypatch.setenv("PREFILL_DELAYER_DECISION_LOG_MAX_MB", "lots")
    with pytest.raises(ConfigError, match="PREFILL_DELAYER_DECISION_LOG_MAX_MB"):
        _delayer(1, lambda row: [list(row)])


@pytest.mark.parametrize("given, message", [
    ({MAX_MB_ENV: "64"}, "PREFILL_DELAYER_DECISION_LOG_MAX_MB='64' needs PREFILL_DELAYER_DECISION_LOG, the decision log "
                         "whose setting it is (set PREFILL_DELAYER_DECISION_LOG=DIR to write the log, or unset it)"),
    ({KEEP_ENV: "0"}, "PREFILL_DELAYER_DECISION_LOG_KEEP='0' needs PREFILL_DELAYER_DECISION_LOG, the decision log "
                      "whose setting it is (set PREFILL_DELAYER_DECISION_LOG=DIR to write the log, or unset it)"),
    ({MAX_MB_ENV: "64", KEEP_ENV: "2", ROWS_ENV: "full"},
     "PREFILL_DELAYER_DECISION_LOG_MAX_MB='64', PREFILL_DELAYER_DECISION_LOG_KEEP='2' and "
     "PREFILL_DELAYER_DECISION_LOG_ROWS='full' need PREFILL_DELAYER_DECISION_LOG, the decision log whose settings they "
     "are (set PREFILL_DELAYER_DECISION_LOG=DIR to write the log, or unset them)"),
])
def test_how_the_log_is_written_without_a_log_to_write_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, given: dict[str, str], message: str) -> None:
    """The size, the files kept and the rows shape a log: set without PREFILL_DELAYER_DECISION_LOG they were taken
    without a word and no log was written (as PREFILL_DELAYER_PARAMS without a profile, which stops). With a log in
    code (decision_log=PATH) they apply to it; decision_log=False turns the log off whatever the environment says."""
    monkeypatch.delenv(DECISION_LOG_ENV, raising=False)
    for name in (MAX_MB_ENV, KEEP_ENV, ROWS_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in given.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        _delayer(1, lambda row: [list(row)])
    assert str(info.value) == message
    assert _delayer(1, lambda row: [list(row)], decision_log=False).decision_log is None
    on = options_from(tmp_path / "decision.jsonl")
    assert on is not None and (on.max_bytes, on.backup_count) == (int(given.get(MAX_MB_ENV, 256)) * 2**20,
                                                                   int(given.get(KEEP_ENV, 8)))


def test_a_blank_size_variable_without_a_log_is_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DECISION_LOG_ENV, raising=False)
    for name in (MAX_MB_ENV, KEEP_ENV, ROWS_ENV):
        monkeypatch.setenv(name, " ")
    assert _delayer(1, lambda row: [list(row)]).decision_log is None


# ----- imports ---------------------------------------------------------------------------------


def test_runtime_and_check_log_import_neither_torch_nor_z3_nor_matplotlib(tmp_path: Path) -> None:
    write_inprocess_logs(tmp_path, world=2, passes=6)
    code = (
        "import sys, prefill_delayer.runtime, prefill_delayer.runtime.decision_log\n"
        "from prefill_delayer.cli import main\n"
        f"rc = main(['check-log', {str(tmp_path)!r}, '--json', {str(tmp_path / 'r.json')!r}])\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'z3', 'hypothesis', 'matplotlib'})\n"
        "print(rc, bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 []"
