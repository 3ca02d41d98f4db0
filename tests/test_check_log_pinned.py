"""check-log's findings on every log the suite writes, pinned: the same before and after the log's second format.

``tests/data/check_log_pinned.json`` was written by the build that had only
format 1 and the in-memory check-log (``PIN_WRITE=1 pytest tests/test_check_log_pinned.py``
rewrites it; never do so to make a change pass). It was rewritten once since, when
``no-decode-hold`` joined SGLang's delayer's catalogue: each report gained that
check's row (``ok`` on every scenario), and every other row and finding stayed
as pinned (compared field by field). Each scenario's logs are
written again here, in format 1 and, where no test edit is involved, in
format 2's compact and full-rows modes, and checked both ways (the column path
and ``--exact``): every report must equal the pinned one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from check_log_scenarios import PINNED, run_scenario, scenarios

WRITE = os.environ.get("PIN_WRITE") == "1"


@pytest.fixture(scope="module")
def pinned() -> dict[str, Any]:
    if WRITE:
        return {}
    return json.loads(PINNED.read_text())


@pytest.fixture(scope="module", autouse=True)
def _write(pinned: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    yield
    if WRITE:
        got = {name: run_scenario(name, tmp_path_factory.mktemp(name)) for name in scenarios()}
        PINNED.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")


@pytest.mark.parametrize("name", sorted(scenarios()))
def test_findings_are_as_pinned(name: str, pinned: dict[str, Any], tmp_path: Path) -> None:
    if WRITE:
        pytest.skip("writing the pin")
    assert run_scenario(name, tmp_path) == pinned[name]


# Format 2 writes other lines (and other file sizes: rotation cuts elsewhere), so only the scenarios without an edit of
# a format-1 line and without rotation are compared in it.
FORMAT2 = sorted(name for name, (_, edit, _) in scenarios().items() if edit is None and name != "rotated")


@pytest.mark.parametrize("rows", ["compact", "full"])
@pytest.mark.parametrize("name", FORMAT2)
def test_format_2_logs_of_the_same_runs_give_the_same_findings(name: str, rows: str, pinned: dict[str, Any], tmp_path: Path) -> None:
    if WRITE:
        pytest.skip("writing the pin")
    assert run_scenario(name, tmp_path, {"rows": rows}) == pinned[name]


@pytest.mark.parametrize("name", ["clean-4", "seed-skew", "edited-decision", "edited-next-state", "gate-0.5.23"])
def test_the_exact_path_gives_the_same_findings(name: str, pinned: dict[str, Any], tmp_path: Path) -> None:
    if WRITE:
        pytest.skip("writing the pin")
    assert run_scenario(name, tmp_path, extra=("--exact",)) == pinned[name]
