"""Rotation at ``PREFILL_DELAYER_DECISION_LOG_MAX_MB``: no file grows past the limit, however many lines the
writer thread finds waiting at once (it used to rotate only after writing them all: 1.2 MB files at 1 MB)."""

from __future__ import annotations

from pathlib import Path

import pytest

from decision_log_harness import check_log, read_lines
from prefill_delayer.runtime import PrefillDelayer, ServerArgs
from prefill_delayer.runtime.decision_log import DECISION_LOG_ENV, MAX_MB_ENV, DecisionLogOptions

LIMIT = 2**20


def _run(passes: int, flush_every: int, **kw: object) -> None:
    d = PrefillDelayer(1, 1, None, ServerArgs(enable_dp_attention=True), 5, 0.5, gather=lambda row: [list(row)], **kw)
    for k in range(passes):
        d.negotiate(k % 3 != 0, 0.9)
        if k % flush_every == flush_every - 1:
            d.decision_log.flush()  # the writer drains what waits: up to flush_every lines at once
    d.close()


def test_no_file_passes_one_megabyte(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DECISION_LOG_ENV, str(tmp_path))
    monkeypatch.setenv(MAX_MB_ENV, "1")
    _run(16000, flush_every=6000)  # format 2: about 150 bytes a line; each drain holds over a quarter of a file
    files = sorted(tmp_path.iterdir(), key=lambda p: p.name)
    assert [p.name for p in files] == ["rank0.jsonl", "rank0.jsonl.1", "rank0.jsonl.2"], files
    line = max(len(x) for x in (tmp_path / "rank0.jsonl.1").read_bytes().splitlines(keepends=True))
    for p in files:
        assert p.stat().st_size <= LIMIT, (p.name, p.stat().st_size)
    for p in files[1:]:  # a rotated file was full: one more line would not have fit
        assert p.stat().st_size > LIMIT - line, (p.name, p.stat().st_size)
    rc, out, err = check_log(str(tmp_path))
    assert rc == 0 and "16000 pass records" in out, out + err


def test_a_line_longer_than_the_limit_still_gets_a_file_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _run(6, flush_every=3, decision_log=DecisionLogOptions(path, max_bytes=500, backup_count=10))
    files = sorted(p.name for p in tmp_path.iterdir())
    for name in files:  # every file: its header and exactly one pass, the only way to keep every line
        assert [x["kind"] for x in read_lines(tmp_path / name)] == ["header", "pass"], name
    assert len(files) == 6
