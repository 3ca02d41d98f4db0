"""``prefill-delayer check-log PATH...``: exit 0 clean, 1 violations found, 2 unusable input.

Options are checked before any log is read (no output may be one of the logs);
the report, the plot and the traces are written together at the end, or none
of them. The checks themselves are ``conformance.check_logs``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from ..files import Outputs
from ..workers import jobs_problem
from ..spec.config import plain

# The formats conformance.plot draws (matplotlib's savefig); each is tested.
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH", help="decision log files or folders; several ranks' logs together")
    parser.add_argument("--json", metavar="FILE", help="write the machine-readable report here")
    parser.add_argument("--traces", metavar="DIR", help="write each flagged window as a trace `prefill-delayer replay` reproduces, "
                        "into DIR, a new or empty folder")
    parser.add_argument("--plot", metavar="FILE.png", help="draw a per-rank timeline of decisions and the delay-run histogram "
                        f"({', '.join(PLOT_SUFFIXES)}; needs matplotlib)")
    parser.add_argument("--exact", action="store_true",
                        help="re-fire every pass through the transitions machine (default: the spec evaluated on columns, "
                        "and the machine on every pass that flags plus a random sample)")
    parser.add_argument("--sample", type=float, default=None, metavar="SHARE",
                        help="share of passes the default path also re-fires through the machine (default 0.005)")
    parser.add_argument("--jobs", type=int, default=None, metavar="N", help="worker processes, at most the cores (default: every "
                        "core, for logs of more than a few chunks)")
    parser.add_argument("--digest", metavar="FILE", help="also write this node's digest for --merge (agreement, group "
                        "invariants and whether every rank logged are checked there, across nodes)")
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


def outputs(args: Any) -> Outputs:
    """The outputs, and the inputs they must not be: the paths given and every log file read from a folder."""
    from ..conformance.logread import expand

    inputs = [*args.paths, *([] if args.merge else expand(args.paths))]  # --merge's paths are digest files
    return (Outputs(inputs).file("--json", args.json).folder("--traces", args.traces, empty=True)
            .file("--plot", args.plot, suffixes=PLOT_SUFFIXES).file("--digest", args.digest))


def options_problem(args: Any) -> Optional[str]:
    """The first bad option (or unreadable input path), before any work starts."""
    from ..conformance.logread import LogError

    if args.sample is not None and not 0.0 <= args.sample <= 1.0:
        return f"--sample must be a share in [0, 1], got {plain(args.sample)}"
    if args.jobs is not None and (problem := jobs_problem("--jobs", args.jobs)) is not None:
        return problem
    if args.merge and (args.traces is not None or args.plot is not None or args.digest is not None or args.exact
                       or args.sample is not None or args.own_profile):
        return ("--merge reads digests, not logs: --traces, --plot, --digest, --exact, --sample and --own-profile "
                "need the logs (give --own-profile and --sample where each node writes its --digest)")
    if args.exact and args.sample is not None:
        return "--exact re-fires every pass through the machine: --sample (a share of the passes) has no effect with it"
    try:
        problem = outputs(args).problem()
    except LogError as exc:
        return str(exc)
    if problem is None and args.plot is not None:
        from ..conformance.plot import matplotlib_problem

        return matplotlib_problem()
    return problem


def _nothing_to_check(report: Any, data: dict[str, Any]) -> Optional[str]:
    """Logs that hold no pass at all (a header, maybe failed passes): nothing was checked, so nothing is clean. Where
    every pass failed, the first failure says why (a ``ConfigMismatchError`` fails the first pass on every rank)."""
    ranks = [r for s in data["sessions"] for r in s["ranks"]]
    if any(r["passes"] for r in ranks):
        return None
    files = [f for r in ranks for f in r["files"]]
    failed = sum(sum(r["failed"].values()) for r in ranks)
    held = f"nothing to check: no pass is logged in {', '.join(files)}, only {'a header' if len(files) == 1 else 'headers'}"
    if not failed:
        return f"{held} (the delayer ran no pass while it logged)"
    fail, log = min(((f, log) for s in report.sessions for log in s.logs for f in log.fails), key=lambda x: (x[0].number, x[1].rank))
    return (f"{held} and {failed} failed pass{'es' * (failed != 1)}: every pass the delayer ran failed; the first, rank "
            f"{log.rank}'s pass {fail.number}: {fail.error}: {fail.message}  [{log.where(fail.fi, fail.line)}]")


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
    plan = outputs(args)
    with plan.writing() as out:
        write = None
        if args.traces is not None:
            def write(path: Any, content: str) -> str:
                return out.write_in("--traces", path.name, content)
        try:
            if args.merge:
                from ..conformance.digest import merge_digests

                report, data = merge_digests(args.paths, jobs=args.jobs)
                written = None
            else:
                digest = None
                if args.digest is not None:
                    from ..conformance.digest import DigestWriter

                    digest = DigestWriter(out.path("--digest"), name=f"--digest {args.digest}")
                report, data, written = check_logs(args.paths, own_profile=args.own_profile, traces=args.traces,
                                                   exact=args.exact, sample=args.sample, jobs=args.jobs,
                                                   plot=args.plot is not None, progress=progress, digest=digest,
                                                   write=write)
        except LogError as exc:
            problem: Optional[str] = str(exc)
        else:
            problem = _nothing_to_check(report, data)
        if problem is not None:
            out.discard()  # nothing of a check that did not happen
            print(f"prefill-delayer check-log: {problem}", file=sys.stderr)
            return 2
        if args.plot is not None:
            from ..conformance.plot import plot

            out.write("--plot", plot(report, Path(args.plot).suffix))
        if args.json is not None:
            out.write("--json", json.dumps(data, indent=1) + "\n")
    print(text(report, data, written))
    if args.plot is not None:
        print(f"plot: {args.plot}")
    return 1 if report.violations else 0
