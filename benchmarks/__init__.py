"""Benchmarks that print numbers against their targets; nothing in the package imports them.

    python -m prefill_delayer.benchmarks.runtime        # µs per pass: bare collective, ours, the seed, on gloo ranks
    python -m prefill_delayer.benchmarks.runtime_instructions  # instructions per pass (callgrind), against another build
    python -m prefill_delayer.benchmarks.decision_log   # the decision log's cost per pass, check-log's speed
    python -m prefill_delayer.benchmarks.sim            # simulator passes per second at DP=8
    python -m prefill_delayer.benchmarks.sglang_shell   # the SGLang shell against SGLang 0.5.23's own class

Each ends with one verdict line and exits 0 when it met every target it judged, 1 when it
missed one (so a script or CI can act on it), 2 when it could not run (a bad option is one line
naming it), 130 on Ctrl-C and 143 on SIGTERM (one line each; what it wrote in a temporary folder
is removed), 141 when the reader of its report has gone (``| head -1``), as the CLI.
"""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType
from typing import Callable, NoReturn, Optional, Sequence

MISSED = 1  # the exit status of a benchmark that missed a target
TERMINATED = 128 + signal.SIGTERM  # what a shell reports for a command ended by SIGTERM (`timeout`, `kill`)


def verdict(missed: Sequence[str], not_judged: Sequence[str] = ()) -> int:
    """Print the closing line; the exit status: 0 every judged target met, ``MISSED`` otherwise (naming which)."""
    unjudged = f" (not judged: {'; '.join(not_judged)})" if not_judged else ""
    if missed:
        print(f"MISSED TARGET: {'; '.join(missed)}{unjudged}")
        return MISSED
    print(f"every target met{unjudged}")
    return 0


def parser(module: str, doc: str) -> argparse.ArgumentParser:
    """The CLI's parser: a bad option is one line naming it, exit 2 (a traceback and exit 1 would read as a missed
    target)."""
    from ..cli.command import Parser

    return Parser(prog=f"python -m prefill_delayer.benchmarks.{module}", description=doc.split("\n\n")[0])


def _integer(text: str, low: int, why: str, high: Optional[int] = None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        wanted = f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}{why}"
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
    return value


def at_least(low: int, why: str = "", high: Optional[int] = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low`` (``why`` says why that bound, when it is not 1), <= ``high`` if
    given."""
    return lambda text: _integer(text, low, why, high)


def integers_at_least(low: int) -> Callable[[str], list[int]]:
    """An argparse ``type``: one or more comma-separated integers, each >= ``low``."""

    def parse(text: str) -> list[int]:
        values = [_integer(x.strip(), low, "") for x in text.split(",") if x.strip()]
        if not values:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers >= {low}, got {text!r}")
        return values

    return parse


class Terminated(BaseException):
    """SIGTERM raised where the benchmark is, so that its ``with`` blocks unwind (its temporary folder goes) as on
    Ctrl-C; a BaseException, so that no ``except Exception`` takes it for a failure to retry."""


def _terminate(signum: int, frame: Optional[FrameType]) -> NoReturn:
    raise Terminated()


def run_main(prog: str, body: Callable[[], int]) -> int:
    """``body()``'s status; Ctrl-C as the CLI says it (one line, 130) and SIGTERM alike (one line, 143), each after the
    benchmark's ``with`` blocks have removed what they made. Its report's reader gone (``| head -1``) ends it as the
    CLI ends (141, quiet), and a full stdout is one line naming it (2): neither is a traceback and 1, a missed target."""
    from ..cli import interrupted
    from ..cli.command import broken_pipe, stdout_named
    from ..files import OutputError

    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        with stdout_named():
            code = body()
            sys.stdout.flush()  # here, not at the interpreter's exit, where a closed pipe is a second error
        return code
    except BrokenPipeError as exc:
        return broken_pipe(prog, exc)
    except OutputError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted(prog)
    except Terminated:
        print(f"{prog}: terminated", file=sys.stderr)
        return TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)
