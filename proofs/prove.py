"""The catalogue run: every property on every profile, with counterexample traces for the refutations."""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from ..spec.profiles import PROFILES
from ..spec.invariants import BY_ID, CATALOGUE, PROVED, REFUTED, UNKNOWN
from ..spec.table import Table, build_table
from . import bmc
from .aggregates import check_aggregate_view
from .families import Family, Scope, families
from .properties import SINGLE_STEP
from ..traces.violations import find_violation

# What the proofs range over by default: every queue ratio and every dp_size.
PROVE_SCOPE = Scope()


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


# Where a single-step refutation must be shown reachable from fresh delayers:
# the family to unroll, and a first restriction to try (the defect expected),
# dropped when it finds nothing (then any counterexample will do).
Search = tuple[Callable, Callable[[Family], bool], Optional[Callable]]


def _dp_attn_queue(f: Family) -> bool:
    return f.enable_dp_attention and f.queue_ratio is not None and not f.pmr_on


BMC_SEARCH: dict[str, Search] = {
    # The slot path: no queue trigger needed.
    "bounded-delay": (bmc.too_long_delay, lambda f: f.enable_dp_attention and f.queue_ratio is None, None),
    # The clock (ranks passing identical arguments) first; else the local max_running_requests.
    "agreement": (bmc.ranks_disagree, _dp_attn_queue, bmc.same_local_args),
    "agreement-equal-args": (bmc.ranks_disagree, _dp_attn_queue, None),
    # Ranks that parted ways take turns delaying.
    "joint-progress": (bmc.no_joint_progress, _dp_attn_queue, None),
}
# Restrictions that are part of a property's statement: every search keeps them.
BMC_ALWAYS: dict[str, Callable] = {"agreement-equal-args": bmc.same_local_args}


def _unknown_note(checks: Sequence[Any], timeout_ms: int) -> str:
    """Why some check came back unknown: the per-query timeout, or the solver's own reason."""
    reasons = sorted({c.why or "no reason given" for c in checks if c.status == UNKNOWN})
    if not reasons:
        return ""
    if all(r in ("timeout", "canceled") for r in reasons):
        return f"unknown because the solver hit --timeout-ms {timeout_ms}"
    return "unknown, not a timeout: the solver said " + ", ".join(repr(r) for r in reasons)


def concrete(fam: Family, scope: Scope) -> Family:
    """``fam`` at one ratio and one dp_size: a counterexample must be concrete to replay."""
    ratio = scope.concrete_ratio() if fam.queue_ratio is not None else None
    return dataclasses.replace(fam, queue_ratio=ratio, dp_size=fam.dp_size if fam.dp_size is not None else 4)


Searched = dict  # (table, family, violation, restrictions) -> bmc.shortest's answer


def _counterexample(
    prop: str, fams: Sequence[Family], table: Table, timeout_ms: int, scope: Scope, searched: Searched
) -> tuple[str, Optional[dict]]:
    """The shortest run from fresh delayers showing ``prop``'s violation, or (why not, None).

    ``searched`` holds the searches already run for this table (in one catalogue run):
    agreement's first search (the clock alone) is agreement-equal-args' search.
    """
    violation, pick, first_try = BMC_SEARCH[prop]
    always = BMC_ALWAYS.get(prop)
    fam = concrete(next(f for f in fams if pick(f)), scope)
    if first_try is bmc.same_local_args and SINGLE_STEP["agreement-equal-args"](fam, table, timeout_ms).status == PROVED:
        first_try = None  # equal arguments cannot disagree here: go straight to any counterexample
    outcome = "none"
    for extra in ([first_try, None] if first_try is not None else [None]):
        parts = frozenset(x for x in (always, extra) if x is not None)
        key = (id(table), fam, violation, parts)
        if key not in searched:
            searched[key] = bmc.shortest(fam, table, violation, bmc.all_of(*parts), timeout_ms)
        outcome, trace = searched[key]
        if trace is not None:
            return outcome, copy.deepcopy(trace)
        if outcome == "timeout":
            break
    return outcome, None


def check_property(
    prop: str, profile: str, table: Table, scope: Scope, timeout_ms: int, searched: Optional[Searched] = None
) -> Result:
    expected = BY_ID[prop].expected[profile]
    fams = families(profile, scope)
    t0 = time.perf_counter()
    if prop == "aggregate-view":
        checks = [check_aggregate_view(fams, timeout_ms)]
        status = _combine([c.status for c in checks])
        note = "; ".join(x for x in (checks[0].note, _unknown_note(checks, timeout_ms)) if x)
        return Result(prop, profile, status, expected, time.perf_counter() - t0, "all", note)
    checks = [SINGLE_STEP[prop](f, table, timeout_ms) for f in fams]
    status = _combine([c.status for c in checks])
    failing = [c.family for c in checks if c.status != PROVED]
    note = f"{len(fams)} families" + (f"; not proved in {', '.join(failing)}" if failing else "")
    if status == UNKNOWN:
        note += "; " + _unknown_note(checks, timeout_ms)
    ranks: Any = "all"
    trace = None
    if status == REFUTED and prop not in BMC_SEARCH:
        # Over every ratio / dp_size a model may be an artefact of the over-approximation:
        # keep the refutation only if it holds at a concrete ratio and dp_size too.
        again = [SINGLE_STEP[prop](concrete(f, scope), table, timeout_ms) for f in fams]
        if REFUTED not in [c.status for c in again]:
            status = UNKNOWN
            note += "; refuted only over every ratio / dp_size at once, not at a concrete one"
    if status == REFUTED and prop in BMC_SEARCH:
        outcome, trace = _counterexample(prop, fams, table, timeout_ms, scope, {} if searched is None else searched)
        if trace is None:
            status = UNKNOWN
            why = f"the solver hit --timeout-ms {timeout_ms}" if outcome == "timeout" else f"none within {bmc.MAX_PASSES} passes"
            note += f"; no run from fresh delayers shows it ({why})"
        else:
            trace = {"property": prop, "profile": profile, **trace}
            trace["violation"] = find_violation(prop, trace["config"], [p["expect"] for p in trace["passes"]]) or "?"
            ranks = len(trace["passes"][0]["ranks"])
            note += f"; counterexample: {len(trace['passes'])} passes"
    return Result(prop, profile, status, expected, time.perf_counter() - t0, ranks, note, trace)


def run_catalogue(
    profiles: Sequence[str] = PROFILES,
    scope: Scope = PROVE_SCOPE,
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
        searched: Searched = {}
        for prop in order:
            res = check_property(prop, profile, table, scope, timeout_ms, searched)
            results.append(res)
            if fail_fast and not res.ok:
                return results
    return results


def run_parallel(profiles: Sequence[str], timeout_ms: int, jobs: int, scope: Scope = PROVE_SCOPE) -> list[Result]:
    """Profiles spread over ``jobs`` processes (Z3 is single-threaded; CI has two cores)."""
    if jobs <= 1 or len(profiles) <= 1:
        return run_catalogue(profiles, scope, timeout_ms=timeout_ms)
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    ctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else None
    with ProcessPoolExecutor(max_workers=min(jobs, len(profiles)), mp_context=ctx) as pool:
        parts = pool.map(_run_one_profile, [(p, timeout_ms, scope) for p in profiles])
        return [r for part in parts for r in part]


def _run_one_profile(job: tuple[str, int, Scope]) -> list[Result]:
    profile, timeout_ms, scope = job
    return run_catalogue((profile,), scope, timeout_ms=timeout_ms)
