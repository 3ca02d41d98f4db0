"""Recognise a recorded violation in per-rank decisions, from the property's own monitor: for ``prove`` and ``replay``.

A trace's property names one of its policy's monitors (``spec.monitors``); the
monitor is evaluated here on Python values, pass by pass, over the decisions
(``[pass][rank]``: the trace's ``expect`` entries, or what the runtime decided),
and says what it found in the monitor's own words.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..spec.monitors import Agreement, GroupRunBound, PassRule, RunBound
from ..spec.ops import PY
from ..spec.registry import policy_of
from ..spec.schema import TraceDecision, inputs_of_trace

# The monitor kinds a trace can show: what the decisions reveal, with the gathered views the trace's inputs give.
REPLAYABLE = (RunBound, Agreement, GroupRunBound, PassRule)


def replayable(policy: Any) -> tuple[str, ...]:
    """The policy's properties whose violations a trace can record and replay reproduce."""
    return tuple(inv.id for inv in policy.invariants if isinstance(inv.check, REPLAYABLE) and inv.id in policy.proof.bmc_search)


def decisions_of(policy: Any, expects: Sequence[Sequence[dict[str, Any]]]) -> list[list[Any]]:
    """A trace's ``expect`` entries, read by the decision's field names."""
    return [[TraceDecision(policy, e) for e in per_rank] for per_rank in expects]


def _config(trace: dict[str, Any]) -> Any:
    return policy_of(trace["profile"]).config_cls(profile=trace["profile"], **trace["config"])


def run_bound_violation(mon: RunBound, c: Any, decisions: Sequence[Sequence[Any]], views: Sequence[Any]) -> Optional[str]:
    """The first rank's run past the limit, each pass counted on its gathered view and that rank's decision."""
    limit = mon.limit(PY, c)
    for rank in range(len(decisions[0]) if decisions else 0):
        length, end = mon.longest(PY, c, [(view, per_rank[rank]) for view, per_rank in zip(views, decisions)])
        if length > limit:
            return mon.trace_text.format(rank=rank, length=length, start=end - length + 1, end=end, limit=limit)
    return None


def agreement_violation(policy: Any, decisions: Sequence[Sequence[Any]]) -> Optional[str]:
    def key(d: Any) -> tuple:
        return tuple(getattr(d, name) for name in policy.decision_key)

    for i, per_rank in enumerate(decisions):
        for r in range(1, len(per_rank)):
            if key(per_rank[r]) != key(per_rank[0]):
                return (
                    f"pass {i}: rank 0 decides {key(per_rank[0])} but rank {r} decides {key(per_rank[r])} "
                    f"from the same gathered table"
                )
    return None


def pass_views(trace: dict[str, Any]) -> list[Any]:
    """The gathered view of each pass of ``trace``: its inputs stepped from fresh ranks through the spec (``fsm.Step``)."""
    from ..fsm import Step

    c = _config(trace)
    policy = c.policy
    step = Step(c)
    passes = trace["passes"]
    states = [policy.init] * len(passes[0]["ranks"]) if passes else []
    views = []
    for p in passes:
        inputs = [inputs_of_trace(policy, x) for x in p["ranks"]]
        locals_ = [step.local(st, x["now_s"], inp) for st, x, inp in zip(states, p["ranks"], inputs)]
        # the fold of every rank's row: what an all-gather hands each rank, and what an all-reduce's one row reads as
        view = policy.gathered_view(PY, c, [policy.local_row(PY, c, inp, local) for inp, local in zip(inputs, locals_)])
        states = [step.finalize(step.negotiate(st, view, local).next_state) for st, local in zip(states, locals_)]
        views.append(view)
    return views


def pass_rule_violation(rule: PassRule, trace: dict[str, Any], decisions: Sequence[Sequence[Any]]) -> Optional[str]:
    c = _config(trace)
    for i, (view, per_rank) in enumerate(zip(pass_views(trace), decisions)):
        for rank, d in enumerate(per_rank):
            if rule.violated(PY, c, view, d):
                return f"pass {i}: rank {rank}: {rule.explain(view, d)}"
    return None


def group_run_violation(mon: GroupRunBound, c: Any, decisions: Sequence[Sequence[Any]]) -> Optional[str]:
    """A window of ``window`` passes in which every pass has a counting rank."""
    window = mon.window(PY, c)
    run = 0
    for i, per_rank in enumerate(decisions):
        counting = [r for r, d in enumerate(per_rank) if mon.counts(PY, c, None, d)]
        run = run + 1 if counting else 0
        if run >= window:
            start = i - run + 1
            who = "; ".join(
                f"pass {j}: rank {', '.join(str(r) for r, d in enumerate(decisions[j]) if mon.counts(PY, c, None, d))} {mon.who}"
                for j in range(start, i + 1)
            )
            return f"passes {start}..{i} ({window} = {mon.window_text} in a row) each have {mon.some} ({who})"
    return None


def find_violation(prop: str, trace: dict[str, Any], decisions: Optional[Sequence[Sequence[Any]]] = None) -> Optional[str]:
    """What ``prop``'s monitor finds in ``decisions`` (default: the trace's own expectations), or None."""
    policy = policy_of(trace["profile"])
    inv = policy.invariant(prop)
    if inv is None or prop not in replayable(policy):
        raise ValueError(f"no replayable violation is defined for property {prop!r} of {policy.name}")
    if decisions is None:
        decisions = decisions_of(policy, [p["expect"] for p in trace["passes"]])
    elif decisions and decisions[0] and isinstance(decisions[0][0], dict):  # ``expect`` entries, as replay returns them
        decisions = decisions_of(policy, decisions)
    c = _config(trace)
    mon = inv.check
    if isinstance(mon, RunBound):
        return run_bound_violation(mon, c, decisions, pass_views(trace))
    if isinstance(mon, Agreement):
        return agreement_violation(policy, decisions)
    if isinstance(mon, PassRule):
        return pass_rule_violation(mon, trace, decisions)
    return group_run_violation(mon, c, decisions)
