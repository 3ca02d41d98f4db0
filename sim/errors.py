"""The simulator's errors: each one is a user's mistake, reported on one line, never a traceback."""

from __future__ import annotations

from ..spec.errors import PrefillDelayerError


class SimInputError(PrefillDelayerError, ValueError):
    """A bad simulation setting or workload; the message names the setting and the value."""


class TraceFileError(SimInputError):
    """A malformed request trace; the message starts with ``FILE:LINE`` (``FILE:`` when the file cannot be read)."""

    def __init__(self, path: str, line: int, why: str) -> None:
        super().__init__(f"{path}:{line}: {why}" if line > 0 else f"{path}: {why}")
        self.path = path
        self.line = line
        self.why = why


def counted(n: float, noun: str, plural: str = "") -> str:
    """``1 request``, ``2,048 requests``: a count in a message, its noun agreeing with it (``plural``: where it is
    not the noun with an ``s``). A float past the whole numbers a float holds exactly (2**53), or no finite number,
    is written as Python writes it (``4e+298 requests``), not as hundreds of digits it does not have."""
    if isinstance(n, float) and not abs(n) < 2**53:
        return f"{n:.3g} {plural or noun + 's'}"
    whole = round(n)
    return f"{whole:,} {noun if whole == 1 else plural or noun + 's'}"
