"""``prefill-delayer prove``: run the catalogue, print the matrix, write the report and traces."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from typing import Any, Optional, Sequence

from ..spec.hashing import spec_hash
from ..spec.policy import PROVED, UNKNOWN
from ..spec.registry import all_profiles, resolve_profile
from .checks import prove_options, prove_outputs, prove_problem, releases_note, scope_options


def add_arguments(prove: argparse.ArgumentParser) -> None:
    profiles = all_profiles()
    prove.add_argument(
        "--profile",
        action="append",
        metavar="NAME",
        help=f"profile to check: {', '.join(profiles)}, or sglang-X for a release X (repeatable; default: all {len(profiles)})",
    )
    prove.add_argument("--json", metavar="PATH", help="write the JSON report here")
    prove.add_argument("--traces", metavar="DIR", help="write counterexample traces into DIR, a new or empty folder")
    prove.add_argument("--timeout-ms", type=int, default=20000, help="Z3 timeout per query (default 20000)")
    for _, opt in scope_options():
        prove.add_argument(opt.option, type=opt.type, default=None, metavar=opt.param.split("_")[-1][0].upper(), help=opt.help)
    prove.add_argument("--dp-size", type=int, default=None, metavar="N", help="prove at one dp_size for the layouts without DP attention; default: every dp_size at once")
    prove.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="processes, one per profile, at most the cores (default: up to 2)")


def z3_problem() -> Optional[str]:
    """Why the proofs cannot run here, or ``None``: z3 comes with an extra that the check-only install leaves out,
    and its absence is the user's install, not a property that fails (exit 1)."""
    try:
        importlib.import_module("z3")
    except ImportError:
        return "needs z3 (the z3-solver package), which is not installed: pip install 'prefill-delayer[proofs]'"
    return None


def options_problem(args: Any) -> Optional[str]:
    """The first bad option; then whether z3 is there, before any work."""
    problem = prove_problem(args)
    return problem if problem is not None else z3_problem()


def format_matrix(results: Sequence[Any]) -> str:
    """Properties x profiles; each cell the status, with ``!`` and the expected one where they differ."""
    props = list(dict.fromkeys(r.property for r in results))
    profs = list(dict.fromkeys(r.profile for r in results))
    cell = {(r.property, r.profile): r for r in results}

    def text(r: Optional[Any]) -> str:
        if r is None:
            return "-"
        return r.status if r.ok else f"{r.status}! (expected {r.expected})"

    rows = [("property", *profs)] + [(prop, *(text(cell.get((prop, p))) for p in profs)) for prop in props]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(args: Any) -> int:
    """The proofs first; then the report and the traces are written together (or, on any failure, neither)."""
    from ..proofs.prove import run_parallel
    from ..proofs.scope import scope_line
    from ..traces.format import trace_file

    profiles = tuple(dict.fromkeys(resolve_profile(p) for p in args.profile)) if args.profile else all_profiles()
    t0 = time.perf_counter()
    options = prove_options(args)
    results = run_parallel(profiles, args.timeout_ms, args.jobs, options)
    total = time.perf_counter() - t0
    with prove_outputs(args).writing() as out:
        if args.traces is not None:
            for r in results:
                if r.trace is not None:
                    r.trace_path = out.write_in("--traces", *trace_file(r.trace))
        if args.json is not None:
            report = {"spec_hash": spec_hash(), "seconds": round(total, 3), "results": [r.as_json() for r in results]}
            out.write("--json", json.dumps(report, indent=1) + "\n")
    print(format_matrix(results))
    for line in releases_note(getattr(args, "profiles_given", None)):
        print(line)
    layouts = all(r.ok and r.status == PROVED for r in results if r.property == "aggregate-view")
    print(f"\nspec {spec_hash()}; {len(results)} checks in {total:.2f} s wall")
    print(scope_line(profiles, options, layouts))
    for r in results:
        if r.trace is not None:
            where = f" -> {r.trace_path}" if r.trace_path else ""
            print(f"{r.profile} {r.property}: {r.trace['violation']}{where}")
    for r in results:
        if r.status == UNKNOWN:
            print(f"{r.profile} {r.property}: {r.note}")
    bad = [r for r in results if not r.ok]
    if bad:
        print("\nFAILED: " + ", ".join(f"{r.profile}/{r.property} is {r.status}, expected {r.expected}" for r in bad))
        return 1
    return 0
