"""The ``prefill-delayer`` command: prove, replay, docs, simulate, check-log.

``SUBCOMMANDS`` is the one table: each row names the module that adds the
subcommand's options (argparse only, cheap), checks them before any work, and
runs it. A subcommand's module is imported when its options are added; what it
runs imports its machinery only then, so ``docs`` needs no z3 and ``prove``
needs no torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from typing import Any, Optional, Sequence


@dataclass(frozen=True)
class Subcommand:
    """One row of the table: the name, its one-line help, and the module that implements it.

    The module has ``add_arguments(parser)``, ``options_problem(args) -> str | None``
    (the first bad option, before any work) and ``main(args) -> int``.
    """

    name: str
    help: str
    module: str


SUBCOMMANDS = (
    Subcommand("prove", "prove the invariant catalogue with Z3 (exit 0 iff every property has its expected status)", "prove"),
    Subcommand("replay", "re-run a counterexample trace through the runtime (exit 0 iff its violation reproduces)", "replay"),
    Subcommand("docs", "generate docs/transitions.md (and its diagram) from the spec", "docs"),
    Subcommand("simulate", "run a workload through the real delayer on N lock-step DP ranks; compare profiles", "simulate"),
    Subcommand("check-log", "hold decision logs against the spec (exit 0 clean, 1 violations, 2 unreadable input)", "check_log"),
)


def _module(cmd: Subcommand) -> Any:
    return importlib.import_module(f"{__package__}.{cmd.module}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prefill-delayer",
        description="Prove, replay and document SGLang's prefill-delay policy as an explicit FSM.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for cmd in SUBCOMMANDS:
        _module(cmd).add_arguments(sub.add_parser(cmd.name, help=cmd.help))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit 2 with one line on stderr for any bad input; argparse does the same for usage errors."""
    args = build_parser().parse_args(argv)
    module = _module(next(c for c in SUBCOMMANDS if c.name == args.command))
    problem = module.options_problem(args)
    if problem is not None:
        print(f"prefill-delayer {args.command}: {problem}", file=sys.stderr)
        return 2
    try:
        return int(module.main(args))
    except OSError as exc:  # e.g. the disk filled up while writing the report: say so, no traceback
        print(f"prefill-delayer {args.command}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
