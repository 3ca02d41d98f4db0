"""``prefill-delayer check-log PATH...``: exit 0 clean, 1 violations found, 2 unusable input.

``proofs.cli`` parses the arguments (``add_arguments``) and imports this
module only for this subcommand. Options are checked before any log is read;
the JSON report is written whole or not at all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

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
    from ..proofs.cli_checks import out_dir_problem, out_file_problem

    problem = out_file_problem("--json", args.json) or out_dir_problem("--traces", args.traces) or out_file_problem("--plot", args.plot)
    if problem:
        return problem
    if args.plot:
        if Path(args.plot).suffix.lower() not in PLOT_SUFFIXES:
            return f"--plot {args.plot}: expected a file name ending in {', '.join(PLOT_SUFFIXES)}"
        from .plot import matplotlib_problem

        return matplotlib_problem()
    return None


def _write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it: the old file or the new one, never half of it."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent if str(target.parent) else ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(paths: list[str], *, own_profile: bool = False, traces: Optional[str] = None) -> tuple[Any, dict[str, Any], Optional[list]]:
    """(report, JSON data, trace entries); ``LogError`` for input that cannot be checked."""
    from .checks import build_sessions, check
    from .logread import read_logs
    from .summary import summary_data

    logs, empty = read_logs(paths)
    sessions, notes = build_sessions(logs, own_profile)
    report = check(sessions, notes)
    data = summary_data(report, empty)
    written = None
    if traces:
        from .traces import export_traces

        written = export_traces(report, traces)
        data["traces"] = written
    return report, data, written


def main(args: Any) -> int:
    from .logread import LogError
    from .summary import text

    try:
        report, data, written = run(args.paths, own_profile=args.own_profile, traces=args.traces)
    except LogError as exc:
        print(f"prefill-delayer check-log: {exc}", file=sys.stderr)
        return 2
    if args.plot:
        from .plot import plot

        plot(report, args.plot)
    if args.json:
        _write_atomically(args.json, json.dumps(data, indent=1) + "\n")
    print(text(report, data, written))
    if args.plot:
        print(f"plot: {args.plot}")
    return 1 if report.violations else 0
