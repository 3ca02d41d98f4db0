"""``prefill-delayer prove``: run the catalogue, print a table, write the report and traces."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from ..spec.config import Config
from ..spec.hashing import spec_hash
from ..spec.invariants import BY_ID, CATALOGUE, PROVED, REFUTED, UNKNOWN
from ..spec.table import Table, build_table
from . import bmc
from .aggregates import check_aggregate_view
from .model import Family, families
from .properties import SINGLE_STEP
from .trace import write_trace
from .violations import find_violation

# The structural defaults the proofs range over; every numeric parameter is symbolic.
PROVE_BASE = Config(dp_size=4, queue_min_ratio=0.5)


@dataclass
class Result:
    property: str
    profile: str
    status: str
    expected: str
    seconds: float
    ranks: Any  # "all" or a number
    note: str = ""
    trace: Optional[dict] = field(default=None, repr=False)
    trace_path: Optional[str] = None

    @property
    def ok(self) -> bool:
        return self.status == self.expected

    def as_json(self) -> dict[str, Any]:
        return {
            "property": self.property,
            "profile": self.profile,
            "status": self.status,
            "expected": self.expected,
            "seconds": round(self.seconds, 4),
            "ranks": self.ranks,
            "trace": self.trace_path,
        }


def _combine(statuses: Sequence[str]) -> str:
    if REFUTED in statuses:
        return REFUTED
    if UNKNOWN in statuses:
        return UNKNOWN
    return PROVED


# Where a single-step refutation must be shown reachable from fresh delayers.
BMC_SEARCH: dict[str, tuple[Callable, Callable[[Family], bool], Optional[Callable]]] = {
    # The slot path: no queue trigger needed.
    "bounded-delay": (bmc.too_long_delay, lambda f: f.enable_dp_attention and f.queue_ratio is None, None),
    # The clock: the queue timeout, ranks passing identical arguments.
    "agreement": (bmc.ranks_disagree, lambda f: f.enable_dp_attention and f.queue_ratio is not None, bmc.same_local_args),
}


def check_property(prop: str, profile: str, table: Table, base: Config, timeout_ms: int) -> Result:
    expected = BY_ID[prop].expected[profile]
    fams = families(profile, base)
    t0 = time.perf_counter()
    if prop == "aggregate-view":
        checks = [check_aggregate_view(fams[0], timeout_ms)]
        status = _combine([c.status for c in checks])
        return Result(prop, profile, status, expected, time.perf_counter() - t0, 16, checks[0].note)
    checks = [SINGLE_STEP[prop](f, table, timeout_ms) for f in fams]
    status = _combine([c.status for c in checks])
    failing = [c.family for c in checks if c.status != PROVED]
    note = f"{len(fams)} families" + (f"; fails in {', '.join(failing)}" if failing else "")
    ranks: Any = "all"
    trace = None
    if status == REFUTED and prop in BMC_SEARCH:
        violation, pick, extra = BMC_SEARCH[prop]
        fam = next(f for f in fams if pick(f))
        _, trace = bmc.shortest(fam, table, violation, extra, timeout_ms)
        if trace is None and extra is not None:  # not the expected defect: any counterexample will do
            _, trace = bmc.shortest(fam, table, violation, None, timeout_ms)
        if trace is None:
            status = UNKNOWN
            note += f"; no run from fresh delayers shows it within {bmc.MAX_PASSES} passes"
        else:
            trace = {"property": prop, "profile": profile, **trace}
            trace["violation"] = find_violation(prop, trace["config"], [p["expect"] for p in trace["passes"]]) or "?"
            ranks = len(trace["passes"][0]["ranks"])
            note += f"; counterexample: {len(trace['passes'])} passes"
    return Result(prop, profile, status, expected, time.perf_counter() - t0, ranks, note, trace)


def run_catalogue(
    profiles: Sequence[str] = ("seed", "hardened"),
    base: Config = PROVE_BASE,
    timeout_ms: int = 20000,
    table_for: Callable[[str], Table] = build_table,
    properties: Optional[Sequence[str]] = None,
    fail_fast: bool = False,
) -> list[Result]:
    """Each property (the catalogue, or ``properties`` in that order) for each profile.

    ``fail_fast`` stops at the first property whose status is not the expected one.
    """
    results = []
    order = [inv.id for inv in CATALOGUE] if properties is None else list(properties)
    for profile in profiles:
        table = table_for(profile)
        for prop in order:
            res = check_property(prop, profile, table, base, timeout_ms)
            results.append(res)
            if fail_fast and not res.ok:
                return results
    return results


def run_parallel(profiles: Sequence[str], timeout_ms: int, jobs: int, base: Config = PROVE_BASE) -> list[Result]:
    """One process per profile (Z3 is single-threaded; CI has two cores)."""
    if jobs <= 1 or len(profiles) <= 1:
        return run_catalogue(profiles, base, timeout_ms=timeout_ms)
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=min(jobs, len(profiles)), mp_context=ctx) as pool:
        parts = pool.map(_run_one_profile, [(p, timeout_ms, base) for p in profiles])
        return [r for part in parts for r in part]


def _run_one_profile(job: tuple[str, int, Config]) -> list[Result]:
    profile, timeout_ms, base = job
    return run_catalogue((profile,), base, timeout_ms=timeout_ms)


def format_table(results: Sequence[Result]) -> str:
    head = ("property", "profile", "status", "expected", "time", "ranks", "")
    rows = [head] + [
        (r.property, r.profile, r.status, r.expected, f"{r.seconds:.2f}s", str(r.ranks), "ok" if r.ok else "MISMATCH")
        for r in results
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(args: Any) -> int:
    profiles = tuple(dict.fromkeys(args.profile)) if args.profile else ("seed", "hardened")
    t0 = time.perf_counter()
    try:
        base = PROVE_BASE.replace(queue_min_ratio=args.queue_min_ratio, dp_size=args.dp_size)
    except ValueError as exc:
        print(f"prove: {exc}")
        return 2
    results = run_parallel(profiles, args.timeout_ms, args.jobs, base)
    total = time.perf_counter() - t0
    if args.traces:
        for r in results:
            if r.trace is not None:
                r.trace_path = str(write_trace(r.trace, args.traces))
    print(format_table(results))
    print(
        f"\nspec {spec_hash()}; numeric parameters symbolic (max_delay_passes >= 0, max_delay_ms > 0, "
        f"watermark off or in [0, 1]); DP ranks: any number; queue trigger off and at ratio "
        f"{base.queue_min_ratio!r}; without DP attention dp_size={base.dp_size}; {total:.2f}s in all"
    )
    for r in results:
        if r.trace is not None:
            where = f" -> {r.trace_path}" if r.trace_path else ""
            print(f"{r.profile} {r.property}: {r.trace['violation']}{where}")
    if args.json:
        report = {"spec_hash": spec_hash(), "results": [r.as_json() for r in results]}
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    bad = [r for r in results if not r.ok]
    if bad:
        print("\nFAILED: " + ", ".join(f"{r.profile}/{r.property} is {r.status}, expected {r.expected}" for r in bad))
        return 1
    return 0
