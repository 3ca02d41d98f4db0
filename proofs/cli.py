"""The ``prefill-delayer`` command: prove, replay, docs.

Subcommands import their machinery lazily, so ``docs`` needs no z3 and
``prove`` needs no torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Optional, Sequence

from ..spec.profiles import PROFILES
from .cli_checks import docs_problem, prove_problem


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prefill-delayer",
        description="Prove, replay and document SGLang's prefill-delay policy as an explicit FSM.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    prove = sub.add_parser("prove", help="prove the invariant catalogue with Z3 (exit 0 iff every property has its expected status)")
    prove.add_argument(
        "--profile",
        action="append",
        metavar="NAME",
        help=f"profile to check: {', '.join(PROFILES)}, or sglang-X for a release X (repeatable; default: all {len(PROFILES)})",
    )
    prove.add_argument("--json", metavar="PATH", help="write the JSON report here")
    prove.add_argument("--traces", metavar="DIR", help="write counterexample traces into DIR")
    prove.add_argument("--timeout-ms", type=int, default=20000, help="Z3 timeout per query (default 20000)")
    prove.add_argument("--queue-min-ratio", type=float, default=None, metavar="R", help="prove at your deployment's queue ratio only (its double rounding exact); default: every ratio at once")
    prove.add_argument("--dp-size", type=int, default=None, metavar="N", help="prove at one dp_size for the layouts without DP attention; default: every dp_size at once")
    prove.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes, one per profile (default: up to 2)")

    replay = sub.add_parser("replay", help="re-run a counterexample trace through the runtime (exit 0 iff its violation reproduces)")
    replay.add_argument("trace", metavar="TRACE", help="trace JSON written by `prove --traces`")

    docs = sub.add_parser("docs", help="generate docs/transitions.md (and its diagram) from the spec")
    docs.add_argument("--check", action="store_true", help="exit 1 with a diff when the committed docs are stale")
    docs.add_argument("--out", metavar="DIR", default=None, help="docs folder (default: the repository's docs/)")

    from ..sim.options import add_arguments as add_simulate_arguments  # argparse only: no simulator, no matplotlib

    simulate = sub.add_parser("simulate", help="run a workload through the real delayer on N lock-step DP ranks; compare profiles")
    add_simulate_arguments(simulate)

    from ..conformance.cli import add_arguments as add_check_log_arguments  # argparse only: nothing is read yet

    check_log = sub.add_parser("check-log", help="hold decision logs against the spec (exit 0 clean, 1 violations, 2 unreadable input)")
    add_check_log_arguments(check_log)
    return parser


def _runner(command: str) -> Callable[[Any], int]:
    """The subcommand's ``main``, imported only now: ``docs`` needs no z3, ``prove`` no torch."""
    if command == "prove":
        from .prove import main as run
    elif command == "replay":
        from .replay import main as run
    elif command == "simulate":
        from ..sim.cli import run
    elif command == "check-log":
        from ..conformance.cli import main as run
    else:
        from ..fsm.docs import main as run
    return run


def _problem(args: argparse.Namespace) -> Optional[str]:
    """The first bad option, found before any work starts (``replay`` checks its trace itself)."""
    if args.command == "prove":
        return prove_problem(args)
    if args.command == "docs":
        return docs_problem(args)
    if args.command == "check-log":
        from ..conformance.cli import options_problem

        return options_problem(args)
    return None


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit 2 with one line on stderr for any bad input; argparse does the same for usage errors."""
    args = build_parser().parse_args(argv)
    problem = _problem(args)
    if problem is not None:
        print(f"prefill-delayer {args.command}: {problem}", file=sys.stderr)
        return 2
    try:
        return _runner(args.command)(args)
    except OSError as exc:  # e.g. the disk filled up while writing the report: say so, no traceback
        print(f"prefill-delayer {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
