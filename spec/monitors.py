"""Run invariants as monitors over the per-pass outcomes of the ranks, each written once.

A monitor is data and small functions over the operator layer: a predicate on
one rank's pass (its gathered view ``v`` and decision ``d``), a bound on a run,
a template for what a violation says. The same definition

* evaluates on Python values: ``traces.violations`` (prove's traces and
  replay), ``conformance`` (check-log), the simulator and the stateful tests;
* builds Z3 terms: ``proofs.bmc`` unrolls it over passes for the shortest
  counterexample, and the inductive proofs in ``proofs.properties`` read the
  same predicate and bound, with the policy's ``couple`` (how the monitor's state
  relates to the policy's variables) as the induction's strengthening.

Kinds: ``PassRule`` (every pass, per rank), ``RunBound`` (a run of passes on
which a rank ``counts`` is at most ``limit`` long), ``RunReport`` (a release
reports the run it ends), ``GroupRunBound`` (a run of passes on which some rank
counts is shorter than ``window``), ``Agreement`` (ranks decide alike).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

RANK, GROUP = "rank", "group"

# (o, c, v, d) -> Bool: a predicate on one rank's pass.
PassPredicate = Callable[[Any, Any, Any, Any], Any]


@dataclass(frozen=True)
class PassRule:
    """On every pass of every rank, ``premise`` implies ``claim``.

    ``explain(v, d)`` says, on Python values, what a violating pass did.
    """

    id: str
    premise: PassPredicate
    claim: PassPredicate
    explain: Callable[[Any, Any], str]
    scope: str = RANK

    def violated(self, o: Any, c: Any, v: Any, d: Any) -> Any:
        return o.And(self.premise(o, c, v, d), o.Not(self.claim(o, c, v, d)))


@dataclass(frozen=True)
class RunBound:
    """Every run of consecutive passes on which a rank ``counts`` is at most ``limit(o, c)`` passes long.

    ``couple(o, c, st, run)`` relates the run so far to the rank's variables
    (the induction's strengthening: the run is what the state remembers of it).
    ``trace_text`` says a violation found in a trace; ``log_text`` and
    ``log_text_done`` what check-log says when a run passes the limit and when it
    ends (``None``: the first text stays).
    """

    id: str
    counts: PassPredicate
    limit: Callable[[Any, Any], Any]
    couple: Callable[[Any, Any, Any, Any], Any]
    trace_text: str
    log_text: str
    log_text_done: Optional[str] = None
    scope: str = RANK

    def step(self, o: Any, c: Any, run: Any, v: Any, d: Any) -> Any:
        """The run after one more pass."""
        return o.If(self.counts(o, c, v, d), run + 1, 0)

    def ok(self, o: Any, c: Any, run: Any) -> Any:
        return run <= self.limit(o, c)

    def longest(self, o: Any, c: Any, passes: Sequence[tuple[Any, Any]]) -> tuple[int, int]:
        """(length, index of the last pass) of the first longest run in ``passes`` (``(v, d)`` pairs; Python values)."""
        best, best_end, run = 0, -1, 0
        for i, (v, d) in enumerate(passes):
            run = run + 1 if self.counts(o, c, v, d) else 0
            if run > best:
                best, best_end = run, i
        return best, best_end


@dataclass(frozen=True)
class RunReport:
    """A pass on which a rank stops counting reports the run it ends: ``length`` passes, ``seconds`` on its clock.

    ``couple(o, c, st, run, since)`` relates the run and the clock reading at its
    first pass (``since``) to the rank's variables.
    """

    id: str
    counts: PassPredicate
    length: str  # decision field
    seconds: str  # decision field
    couple: Callable[..., Any]
    noun: str  # what is counted, in check-log's words ("delays")
    scope: str = RANK

    def step(self, o: Any, run: Any, since: Any, counts: Any, now: Any) -> tuple[Any, Any]:
        """(run, since) after one more pass."""
        return o.If(counts, run + 1, 0), o.If(counts, o.If(run == 0, now, since), since)

    def reported(self, o: Any, run: Any, since: Any, d: Any, now: Any) -> Any:
        """On a pass that ends the run: what it reports is the run."""
        want_seconds = o.If(run > 0, now - since, 0.0)
        return o.And(getattr(d, self.length) == run, getattr(d, self.seconds) == want_seconds)


@dataclass(frozen=True)
class GroupRunBound:
    """In every window of ``window(o, c)`` consecutive passes there is one on which no rank counts.

    ``couple(o, c, st, run)`` relates the group's run so far to any rank's
    variables (ranks in step share them). ``who`` names a counting rank's act.
    """

    id: str
    counts: PassPredicate
    window: Callable[[Any, Any], Any]
    couple: Callable[[Any, Any, Any, Any], Any]
    window_text: str
    who: str  # "delays"
    some: str  # "a delaying rank"
    scope: str = GROUP

    def step(self, o: Any, c: Any, run: Any, any_counts: Any) -> Any:
        return o.If(any_counts, run + 1, 0)

    def ok(self, o: Any, c: Any, run: Any) -> Any:
        return run < self.window(o, c)


@dataclass(frozen=True)
class Agreement:
    """Ranks that share their state and gathered rows decide alike (the policy's ``decision_key``) and stay in step.

    ``equal_args``: only for ranks that pass equal local arguments (the
    policy's ``local_inputs``), so only their clocks differ.
    """

    id: str
    equal_args: bool = False
    scope: str = GROUP


MONITOR_KINDS = (PassRule, RunBound, RunReport, GroupRunBound, Agreement)


def is_monitor(check: Any) -> bool:
    return isinstance(check, MONITOR_KINDS)
