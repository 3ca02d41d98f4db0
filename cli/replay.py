"""``prefill-delayer replay TRACE``: re-run a counterexample through the runtime."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Optional


def add_arguments(replay: argparse.ArgumentParser) -> None:
    replay.add_argument("trace", metavar="TRACE", help="trace JSON written by `prove --traces` or `check-log --traces`")


def options_problem(args: Any) -> Optional[str]:
    if not args.trace:  # an empty name would open the current folder
        from ..files import empty_name

        return empty_name("TRACE")
    return None  # the trace itself is checked when it is read


def main(args: Any) -> int:
    """Exit 0: reproduced; 1: not reproduced; 2: the trace cannot be read (one line on stderr)."""
    from ..traces.format import load_trace
    from ..traces.replay import replay

    try:
        trace = load_trace(args.trace)
    except ValueError as exc:
        print(f"prefill-delayer replay: cannot read trace {args.trace}: {exc}", file=sys.stderr)
        return 2
    ok, lines = replay(trace)
    print(f"recorded: {trace['violation']}")
    print("\n".join(lines))
    return 0 if ok else 1
