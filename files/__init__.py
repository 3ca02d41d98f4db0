"""Output files of every subcommand: where they may go, and writing them whole or not at all.

A base layer: it imports nothing of the package, so the simulator, ``check-log``,
``prove`` and the CLI all check and write their outputs the same way.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional


def _nearest_existing(path: Path) -> Path:
    """``path`` itself or its closest ancestor that exists (``.`` at worst)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def _unusable_folder(where: Path) -> Optional[str]:
    """Why folder ``where`` (which may not exist yet) cannot be created and written to, after its name."""
    base = _nearest_existing(where)
    if not base.is_dir():
        return "is a file" if base == where else f"is inside {base}, which is a file"
    if not os.access(base, os.W_OK | os.X_OK):
        return "is not writable" if base == where else f"would be created in {base}, which is not writable"
    return None


def out_dir_problem(option: str, value: Optional[str]) -> Optional[str]:
    """``--traces DIR`` / ``--out DIR``: a folder, or one that can be created."""
    if value is None:
        return None
    why = _unusable_folder(Path(value))
    return None if why is None else f"{option} {value} {why}; expected a folder"


def out_file_problem(option: str, value: Optional[str]) -> Optional[str]:
    """``--json PATH``: not a folder, and its folder exists or can be created."""
    if not value:
        return None
    path = Path(value)
    if path.is_dir():
        return f"{option} {value} is a folder; expected a file name"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{option} {value} is not writable"
    why = _unusable_folder(path.parent)
    return None if why is None else f"{option} {value}: its folder {path.parent} {why}"


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it: the old file or the new one, never half of it."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent if str(target.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
