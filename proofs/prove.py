"""The catalogue run: every property of every policy on every profile, with traces for the refutations."""

from __future__ import annotations

import builtins
import copy
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from ..spec.monitors import Agreement
from ..spec.policy import PROVED, REFUTED, UNKNOWN
from ..spec.registry import all_profiles, policy_of
from ..spec.table import Table
from ..traces.violations import find_violation
from . import bmc
from .aggregates import check_aggregate_view
from .properties import shared_passes, single_step
from .scope import scope_for

# What the proofs range over by default: every value of every "every value" switch (the
# policy's default scope), every dp_size. ``prove``'s options pin some (``scope_options``).
Options = Mapping[str, Any]
DEFAULT_OPTIONS: Options = {}


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

    @builtins.property  # in this class body ``property`` is the field above
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


def _unknown_note(checks: Sequence[Any], timeout_ms: int) -> str:
    """Why some check came back unknown: the per-query timeout, or the solver's own reason."""
    reasons = sorted({c.why or "no reason given" for c in checks if c.status == UNKNOWN})
    if not reasons:
        return ""
    if all(r in ("timeout", "canceled") for r in reasons):
        return f"unknown because the solver hit --timeout-ms {timeout_ms}"
    return "unknown, not a timeout: the solver said " + ", ".join(repr(r) for r in reasons)


Searched = dict  # (table, family, violation, restrictions) -> bmc.shortest's answer


def _counterexample(
    policy: Any, prop: str, fams: Sequence[Any], table: Table, timeout_ms: int, scope: Any, searched: Searched
) -> tuple[str, Optional[dict]]:
    """The shortest run from fresh ranks showing ``prop``'s violation, or (why not, None).

    ``searched`` holds the searches already run for this table (in one catalogue run):
    agreement's first search (the clock alone) is agreement-equal-args' search.
    """
    pick, first_name, *fewest = policy.proof.bmc_search[prop]
    first_k = fewest[0] if fewest else 1
    monitor = policy.invariant(prop).check
    violation = bmc.violation_of(monitor)
    first_try = bmc.RESTRICTIONS.get(first_name) if first_name else None
    # A property stated for ranks passing equal local inputs keeps that restriction in every search.
    always = bmc.same_local_args if getattr(monitor, "equal_args", False) else None
    fam = policy.proof.concrete(next(f for f in fams if pick(f)), scope)
    if first_try is bmc.same_local_args:
        equal = next((inv for inv in policy.invariants if getattr(inv.check, "equal_args", False)), None)
        if equal is not None and single_step(policy, equal.id, fam, table, timeout_ms).status == PROVED:
            first_try = None  # equal arguments cannot disagree here: go straight to any counterexample
    outcome = "none"
    for extra in ([first_try, None] if first_try is not None else [None]):
        parts = frozenset(x for x in (always, extra) if x is not None)
        # an agreement's violation is the same whatever its id (agreement-equal-args differs by a restriction, in
        # ``parts``); a run monitor's is its own
        what = type(monitor) if isinstance(monitor, Agreement) else monitor
        key = (id(table), fam, what, parts, first_k)
        if key not in searched:
            searched[key] = bmc.shortest(policy, fam, table, violation, bmc.all_of(*parts), timeout_ms, first_k=first_k,
                                         max_passes=max(bmc.MAX_PASSES, first_k + bmc.MAX_PASSES // 2))
        outcome, trace = searched[key]
        if trace is not None:
            return outcome, copy.deepcopy(trace)
        if outcome == "timeout":
            break
    return outcome, None


def check_property(
    prop: str, profile: str, table: Table, scope: Any, timeout_ms: int, searched: Optional[Searched] = None
) -> Result:
    policy = policy_of(profile)
    inv = policy.invariant(prop)
    if inv is None:
        raise KeyError(f"{policy.name} has no property {prop!r}")
    expected = inv.expected[profile]
    fams = policy.proof.families(profile, scope)
    t0 = time.perf_counter()
    if inv.check == "aggregate-view":
        checks = [check_aggregate_view(policy, fams, timeout_ms)]
        status = _combine([c.status for c in checks])
        note = "; ".join(x for x in (checks[0].note, _unknown_note(checks, timeout_ms)) if x)
        return Result(prop, profile, status, expected, time.perf_counter() - t0, "all", note)
    checks = [single_step(policy, prop, f, table, timeout_ms) for f in fams]
    status = _combine([c.status for c in checks])
    failing = [c.family for c in checks if c.status != PROVED]
    note = f"{len(fams)} families" + (f"; not proved in {', '.join(failing)}" if failing else "")
    if status == UNKNOWN:
        note += "; " + _unknown_note(checks, timeout_ms)
    ranks: Any = "all"
    trace = None
    searchable = prop in policy.proof.bmc_search
    if status == REFUTED and not searchable:
        # Over every value at once a model may be an artefact of the over-approximation:
        # keep the refutation only if it holds at a concrete one too.
        again = [single_step(policy, prop, policy.proof.concrete(f, scope), table, timeout_ms) for f in fams]
        if REFUTED not in [c.status for c in again]:
            status = UNKNOWN
            note += "; refuted only over every ratio / dp_size at once, not at a concrete one"
    if status == REFUTED and searchable:
        outcome, trace = _counterexample(policy, prop, fams, table, timeout_ms, scope, {} if searched is None else searched)
        if trace is None:
            status = UNKNOWN
            why = f"the solver hit --timeout-ms {timeout_ms}" if outcome == "timeout" else "none within the passes searched"
            note += f"; no run from fresh delayers shows it ({why})"
        else:
            trace = {"property": prop, "profile": profile, **trace}
            trace["violation"] = find_violation(prop, trace) or "?"
            ranks = len(trace["passes"][0]["ranks"])
            note += f"; counterexample: {len(trace['passes'])} passes"
    return Result(prop, profile, status, expected, time.perf_counter() - t0, ranks, note, trace)


def run_catalogue(
    profiles: Optional[Sequence[str]] = None,
    options: Options = DEFAULT_OPTIONS,
    timeout_ms: int = 20000,
    table_for: Optional[Any] = None,
    properties: Optional[Sequence[str]] = None,
    fail_fast: bool = False,
) -> list[Result]:
    """Each property (the policy's catalogue, or ``properties`` in that order) for each profile.

    ``fail_fast`` stops at the first property whose status is not the expected one.
    """
    results = []
    for profile in profiles if profiles is not None else all_profiles():
        policy = policy_of(profile)
        table = table_for(profile) if table_for is not None else policy.build_table(profile)
        scope = scope_for(policy, options)
        searched: Searched = {}
        order = policy.invariant_ids if properties is None else [p for p in properties if policy.invariant(p) is not None]
        with shared_passes():  # the profile's single-pass checks read one symbolic pass per family
            for prop in order:
                res = check_property(prop, profile, table, scope, timeout_ms, searched)
                results.append(res)
                if fail_fast and not res.ok:
                    return results
    return results


def run_parallel(profiles: Sequence[str], timeout_ms: int, jobs: int, options: Options = DEFAULT_OPTIONS) -> list[Result]:
    """Profiles spread over ``jobs`` worker processes (Z3 is single-threaded; CI has two cores), each profile in a
    worker forked for it alone: Z3's state left by an earlier profile in the same process changes the models it
    finds, so a counterexample would depend on which profiles a worker happened to prove before it.

    The proofs run in workers even for one job, so Ctrl-C is the parent's alone:
    in-process, Z3 takes a SIGINT that arrives during a check as a cancelled query
    (and the proof goes on), and one that arrives in a Z3 object's ``__del__`` is
    printed and ignored. The workers ignore SIGINT (``workers.start_pool``), and any
    exception in the parent, ``KeyboardInterrupt`` included, terminates them before it
    propagates: no worker prints a traceback or outlives the command.
    """
    from ..workers import ended, start_pool

    # the largest catalogues first, so that no slow profile starts last while the other worker idles
    order = sorted(range(len(profiles)), key=lambda i: -len(policy_of(profiles[i]).invariant_ids))
    with ended(start_pool(max(1, min(jobs, len(profiles))), initializer=_worker_init, maxtasksperchild=1)) as pool:
        # one profile at a time: their costs differ tenfold, and map's default chunks of three left one worker
        # with the slow ones at the end
        done = pool.map(_run_one_profile, [(profiles[i], timeout_ms, dict(options)) for i in order], chunksize=1)
    parts: list = [None] * len(profiles)
    for i, part in zip(order, done):
        parts[i] = part
    return [r for part in parts for r in part]


def _worker_init() -> None:
    """A worker (which leaves Ctrl-C to the parent, ``workers.start_pool``) builds terms without z3's Python-side
    argument checks, and keeps z3 from taking SIGINT back."""
    try:
        import z3

        z3.set_param("ctrl_c", False)  # Z3 installs its own SIGINT handler around a check unless told not to
        # z3's Python layer re-checks every argument's sort and context in Python before each C call (as
        # ``python -O`` would skip): a tenth of a catalogue run. The C API still refuses an ill-sorted term;
        # the suite builds the same terms with the checks on, in-process.
        z3.z3.Z3_DEBUG = False
        from .z3ops import fast_arithmetic

        fast_arithmetic()  # the same terms, made without z3's Python-side coercion (z3ops)
    except ImportError:  # pragma: no cover - prove needs z3 anyway
        pass


def _run_one_profile(job: tuple[str, int, dict]) -> list[Result]:
    profile, timeout_ms, options = job
    return run_catalogue((profile,), options, timeout_ms=timeout_ms)
