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
    parser.add_argument("--exact", action="store_true",
                        help="re-fire every pass through the transitions machine (default: the spec evaluated on columns, "
                        "and the machine on every pass that flags plus a random sample)")
    parser.add_argument("--sample", type=float, default=None, metavar="SHARE",
                        help="share of passes the default path also re-fires through the machine (default 0.005)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N", help="worker processes (default: every core, for logs of "
                        "more than a few chunks)")
    parser.add_argument("--digest", metavar="FILE", help="also write this node's digest (agreement and group invariants still "
                        "to check across nodes) for --merge")
    parser.add_argument("--merge", action="store_true",
                        help="the paths are digest files written by --digest on each node: check agreement and the run "
                        "invariants across them, without the logs")
    parser.add_argument(
        "--own-profile",
        action="store_true",
        help="check each log against this build's definition of the profile it recorded, even when it was written "
        "under another spec or with another configuration than the other logs (ranks are compared only within one "
        "configuration)",
    )


def options_problem(args: Any) -> Optional[str]:
    """The first bad option, before any work starts."""
    problem = (out_file_problem("--json", args.json) or out_dir_problem("--traces", args.traces) or out_file_problem("--plot", args.plot)
               or out_file_problem("--digest", args.digest))
    if problem:
        return problem
    if args.sample is not None and not 0.0 <= args.sample <= 1.0:
        return f"--sample must be a share in [0, 1], got {args.sample}"
    if args.jobs is not None and args.jobs < 1:
        return f"--jobs must be an integer >= 1, got {args.jobs}"
    if args.merge and (args.traces or args.plot or args.digest or args.exact):
        return "--merge reads digests, not logs: --traces, --plot, --digest and --exact need the logs"
    if args.plot:
        if Path(args.plot).suffix.lower() not in PLOT_SUFFIXES:
            return f"--plot {args.plot}: expected a file name ending in {', '.join(PLOT_SUFFIXES)}"
        from ..conformance.plot import matplotlib_problem

        return matplotlib_problem()
    return None


def _progress() -> Any:
    """A line on stderr every few seconds of a long check (none for a short one)."""
    import time

    t0 = time.monotonic()
    last = [t0]

    def say(text: str) -> None:
        now = time.monotonic()
        if now - last[0] >= 5.0:
            last[0] = now
            print(f"prefill-delayer check-log: {text} checked ({now - t0:.0f} s)", file=sys.stderr, flush=True)

    return say


def main(args: Any) -> int:
    from ..conformance import check_logs
    from ..conformance.logread import LogError
    from ..conformance.summary import text

    progress = _progress()
    try:
        if args.merge:
            from ..conformance.digest import merge_digests

            report, data = merge_digests(args.paths, jobs=args.jobs)
            written = None
        else:
            report, data, written = check_logs(args.paths, own_profile=args.own_profile, traces=args.traces, exact=args.exact,
                                               sample=args.sample, jobs=args.jobs, plot=bool(args.plot), progress=progress,
                                               digest=args.digest)
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
