"""``prefill-delayer replay TRACE``: re-run a counterexample through the runtime.

One runtime core (``runtime.PolicyCore``) per rank, freshly built, joined by the
runtime's in-process gather; each rank's clock is injected and reads the
trace's ``now_s`` for the current pass. Exit 0 iff every decision matches the
trace's expectations and the recorded violation happens again.
"""

from __future__ import annotations

from typing import Any

from ..spec.registry import policy_of
from ..spec.schema import expect_of, inputs_of_trace
from .format import validate_trace
from .violations import decisions_of, find_violation


def run_trace(trace: dict[str, Any], profile: str | None = None) -> list[list[dict[str, Any]]]:
    """Every rank's decision for every pass of ``trace`` (as ``expect`` entries), from the runtime.

    The trace is validated first, so a malformed one is a ``TraceError`` naming
    the bad entry rather than a failure inside one of the rank threads.
    ``profile`` replays the same inputs under another profile: of the policy, or of a policy with the same inputs
    and parameters (``aligned``, on a trace of SGLang's delayer).
    """
    from ..runtime import PolicyCore, run_ranks

    validate_trace(trace)
    policy = policy_of(profile or trace["profile"])
    config = policy.config_cls(profile=profile or trace["profile"], **trace["config"])
    passes = trace["passes"]
    world = len(passes[0]["ranks"])

    failure = policy.collective_failure  # an input the runtime sets: replayed as this rank's collective failing

    def rank_main(rank: int, gather: Any) -> list[dict[str, Any]]:
        clock_now = [0.0]
        fails = [False]
        collective = gather if failure is None else _Failing(gather, fails)
        # A replay is not a deployment: never write into PREFILL_DELAYER_DECISION_LOG's folder.
        core = PolicyCore(config, collective, clock=lambda: clock_now[0], decision_log=False)
        out = []
        for p in passes:
            x = p["ranks"][rank]
            clock_now[0] = x["now_s"]
            inp = inputs_of_trace(policy, x)
            if failure is not None:
                fails[0] = bool(getattr(inp, failure))
                inp = [v for f, v in zip(policy.inputs, inp) if f.name != failure]
            d = core.negotiate(*inp)
            out.append(expect_of(policy, d))
        return out

    per_rank = run_ranks(world, rank_main)
    return [[per_rank[r][i] for r in range(world)] for i in range(len(passes))]


class _Failing:
    """A rank's gather that takes part in the exchange, then raises when the trace says its collective failed:
    the peers complete theirs, as when one rank's side of a collective times out."""

    def __init__(self, gather: Any, fails: list[bool]) -> None:
        self._gather, self._fails = gather, fails
        self.rank, self.world_size = gather.rank, gather.world_size
        self.description = getattr(gather, "description", repr(gather))

    def __call__(self, row: Any) -> Any:
        rows = self._gather(row)
        if self._fails[0]:
            raise RuntimeError("the trace's collective failure on this rank")
        return rows


def replay(trace: dict[str, Any]) -> tuple[bool, list[str]]:
    """(reproduced, report lines)."""
    policy = policy_of(trace["profile"])
    decisions = run_trace(trace)
    lines, mismatches = [], 0
    for i, (p, got) in enumerate(zip(trace["passes"], decisions)):
        for r, (want, have) in enumerate(zip(p["expect"], got)):
            same = want == have
            mismatches += not same
            shown = " ".join(f"{k}={v!r}" for k, v in have.items())
            lines.append(
                f"pass {i} rank {r}: now={p['ranks'][r]['now_s']:g} -> {shown}" + ("" if same else f"   (trace expects {want})")
            )
    found = find_violation(trace["property"], trace, decisions_of(policy, decisions))
    if mismatches:
        lines.append(f"NOT REPRODUCED: {mismatches} decisions differ from the trace")
    elif found is None:
        lines.append(f"NOT REPRODUCED: no {trace['property']} violation in the runtime's decisions")
    else:
        lines.append(f"REPRODUCED ({trace['profile']}, {trace['property']}): {found}")
    return (mismatches == 0 and found is not None), lines
