"""A hash of the spec's source, stamped on generated docs and proof reports."""

from __future__ import annotations

import hashlib
from pathlib import Path


def spec_hash() -> str:
    """sha256 (first 16 hex digits) over every module of ``spec/``, in name order."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
    return digest.hexdigest()[:16]
