"""``prefill-delayer check-log PATH...``: exit 0 clean, 1 violations found, 2 unusable input.

Options are checked before any log is read; the JSON report is written whole
or not at all. The checks themselves are ``conformance.check_logs``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from ..files import out_dir_problem, out_file_problem, write_atomically

PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="decision log files or folders; several ranks' logs together")
    parser.add_argument("--json", metavar="FILE", help="write the machine-readable report here")
    parser.add_argument("--traces", metavar="DIR", help="write each flagged window as a trace `prefill-delayer replay` reproduces")
    parser.add_argument("--plot", metavar="FILE.png", help="draw a per-rank timeline of decisions and the delay-run histogram (needs matplotlib)")
    parser.add_argument(
        "--own-profile",
        action="store_true",
        help="check each log against this build's definition of the profile it recorded, even when it was written "
        "under another spec or with another configuration than the other logs (ranks are compared only within one "
        "configuration)",
    )


def options_problem(args: Any) -> Optional[str]:
    """The first bad option, before any work starts."""
    problem = out_file_problem("--json", args.json) or out_dir_problem("--traces", args.traces) or out_file_problem("--plot", args.plot)
    if problem:
        return problem
    if args.plot:
        if Path(args.plot).suffix.lower() not in PLOT_SUFFIXES:
            return f"--plot {args.plot}: expected a file name ending in {', '.join(PLOT_SUFFIXES)}"
        from ..conformance.plot import matplotlib_problem

        return matplotlib_problem()
    return None


def main(args: Any) -> int:
    from ..conformance import check_logs
    from ..conformance.logread import LogError
    from ..conformance.summary import text

    try:
        report, data, written = check_logs(args.paths, own_profile=args.own_profile, traces=args.traces)
    except LogError as exc:
        print(f"prefill-delayer check-log: {exc}", file=sys.stderr)
        return 2
    if args.plot:
        from ..conformance.plot import plot

        plot(report, args.plot)
    if args.json:
        write_atomically(args.json, json.dumps(data, indent=1) + "\n")
    print(text(report, data, written))
    if args.plot:
        print(f"plot: {args.plot}")
    return 1 if report.violations else 0
