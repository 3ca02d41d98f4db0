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
