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


def joint_progress_violation(config: dict[str, Any], decisions: Decisions) -> Optional[str]:
    """A window of max(max_delay_passes, 1) passes in which every pass has a delaying rank."""
    window = max(config["max_delay_passes"], 1)
    run = 0
    for i, per_rank in enumerate(decisions):
        delaying = [r for r, d in enumerate(per_rank) if not d["allow"]]
        run = run + 1 if delaying else 0
        if run >= window:
            start = i - run + 1
            who = "; ".join(
                f"pass {j}: rank {', '.join(str(r) for r, d in enumerate(decisions[j]) if not d['allow'])} delays"
                for j in range(start, i + 1)
            )
            return f"passes {start}..{i} ({window} = max(max_delay_passes, 1) in a row) each have a delaying rank ({who})"
    return None


CHECKS = {
    "bounded-delay": bounded_delay_violation,
    "agreement": agreement_violation,
    "agreement-equal-args": agreement_violation,
    "joint-progress": joint_progress_violation,
}


def find_violation(prop: str, config: dict[str, Any], decisions: Decisions) -> Optional[str]:
    if prop not in CHECKS:
        raise ValueError(f"no replayable violation is defined for property {prop!r}")
    return CHECKS[prop](config, decisions)
