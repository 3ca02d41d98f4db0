"""The ``prefill-delayer`` command: one table of subcommands, each imported only when it runs.

This is what the console script and ``python -m prefill_delayer.cli`` call, and all it imports is ``sys``: the
command's own modules (``command``, the table and the rest) load inside ``main``'s Ctrl-C guard, so that an interrupt
while they load is the same one line and 130 as one while the command runs, not a traceback. (One while the
interpreter starts or loads this package comes before any code of ours runs and cannot be caught.)
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing's own flag, without importing typing before the guard
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .command import Parser

INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command stopped by Ctrl-C


def main(argv: Sequence[str] | None = None) -> int:
    """The command's exit status; Ctrl-C at any point, its own modules' import included, is one line and 130."""
    try:
        from .command import run

        return run(argv)
    except KeyboardInterrupt:  # one that lands before the command's own handler does, or after it
        return interrupted("prefill-delayer")


def interrupted(name: str) -> int:
    """Ctrl-C as every command of the package says it: one line naming the command, the status a shell reports."""
    print(f"{name}: interrupted", file=sys.stderr)
    return INTERRUPTED


def build_parser() -> Parser:
    """The command's parser (``command.build_parser``)."""
    from .command import build_parser

    return build_parser()


__all__ = ["INTERRUPTED", "build_parser", "interrupted", "main"]
