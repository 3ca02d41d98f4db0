"""A hash of the spec's source, stamped on generated docs and proof reports."""

from __future__ import annotations

import hashlib
from pathlib import Path


def spec_hash() -> str:
    """sha256 (first 16 hex digits) over every module of ``spec/`` and its policies, in path order."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return digest.hexdigest()[:16]
