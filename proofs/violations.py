"""Recognise a recorded violation in per-rank decisions: shared by ``prove`` and ``replay``."""

from __future__ import annotations

from typing import Any, Optional, Sequence

Decisions = Sequence[Sequence[dict[str, Any]]]  # [pass][rank] -> {allow, reason, wait_forward_passes}


def longest_delay_run(decisions: Decisions, rank: int) -> tuple[int, int]:
    """(length, index of the last pass) of ``rank``'s longest run of consecutive delays."""
    best, best_end, run = 0, -1, 0
    for i, per_rank in enumerate(decisions):
        run = run + 1 if not per_rank[rank]["allow"] else 0
        if run > best:
            best, best_end = run, i
    return best, best_end


def bounded_delay_violation(config: dict[str, Any], decisions: Decisions) -> Optional[str]:
    bound = max(config["max_delay_passes"] - 1, 0)
    for rank in range(len(decisions[0]) if decisions else 0):
        length, end = longest_delay_run(decisions, rank)
        if length > bound:
            return (
                f"rank {rank} delays {length} consecutive passes (passes {end - length + 1}..{end}), "
                f"more than max(max_delay_passes - 1, 0) = {bound}"
            )
    return None


def agreement_violation(config: dict[str, Any], decisions: Decisions) -> Optional[str]:
    def key(d: dict[str, Any]) -> tuple:
        return (d["allow"], d["reason"], d["wait_forward_passes"])

    for i, per_rank in enumerate(decisions):
        for r in range(1, len(per_rank)):
            if key(per_rank[r]) != key(per_rank[0]):
                return (
                    f"pass {i}: rank 0 decides {key(per_rank[0])} but rank {r} decides {key(per_rank[r])} "
                    f"from the same gathered table"
                )
    return None


CHECKS = {"bounded-delay": bounded_delay_violation, "agreement": agreement_violation}


def find_violation(prop: str, config: dict[str, Any], decisions: Decisions) -> Optional[str]:
    if prop not in CHECKS:
        raise ValueError(f"no replayable violation is defined for property {prop!r}")
    return CHECKS[prop](config, decisions)
