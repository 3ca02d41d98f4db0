"""What ``pip install .`` (not editable) installs: every package folder of the repository, each under
``prefill_delayer`` (a folder left out of pyproject's list is missing from the wheel, and the installed
command fails on import: ``spec.policies`` was)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10
    tomllib = pytest.importorskip("tomli")


def test_every_package_folder_is_in_the_wheel() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    dirs = config["package-dir"]
    folders = {p.parent for p in REPO.glob("**/__init__.py")
               if not any(part.startswith(".") or part in ("tests", "build") for part in p.relative_to(REPO).parts)}
    expected = set()
    for folder in folders:
        rel = folder.relative_to(REPO).parts
        # the package whose folder is the longest prefix of this one; the rest of the path names the subpackage
        name, base = max(((n, Path(d).parts) for n, d in dirs.items() if rel[: len(Path(d).parts)] == Path(d).parts),
                         key=lambda item: len(item[1]))
        expected.add(".".join([name, *rel[len(base):]]))
    assert expected == listed, (sorted(expected - listed), sorted(listed - expected))
