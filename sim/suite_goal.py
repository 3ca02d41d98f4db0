"""``simulate --suite NAME --goal POLICY``: is one policy at least as good as every other on each workload?

A team choosing a policy asks this of the suite's table, workload by workload, and
the answer is easy to get wrong by eye (which policy is best differs per column and
per workload). The goal, per workload, against the other policies of the same run:

- input tok/s at least the best other's, within ``TOK_SLACK``;
- TTFT p99 at most the best other's, within ``P99_SLACK``;
- input tok/s at least ``off``'s, within ``OFF_SLACK`` (when ``off`` ran);
- input tok/s at least the workload's ``min_bound`` fraction of the bound, where it has one.

It reads the rows the suite already measured: nothing is run again. The standings
judge every policy run by the same goal, each against all the others, so a team
sees whether any policy meets it everywhere, and which workloads each one gives up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from .config import OFF
from .report import Column, markdown

if TYPE_CHECKING:
    from .suite_run import Row

TOK_SLACK = 0.01  # input tok/s: within 1% of the best other policy's
P99_SLACK = 0.05  # TTFT p99: within 5% of the best other policy's
OFF_SLACK = 0.01  # input tok/s: within 1% of off's


@dataclass(frozen=True)
class Check:
    """One line of the goal on one workload: what the goal policy has, what it must reach, and whether it does."""

    name: str
    value: float
    reference: float  # the best other policy's figure (or off's, or the bound's share); the slack is the goal's
    against: str  # the policy (or the share of the bound) it comes from
    met: bool


@dataclass(frozen=True)
class WorkloadGoal:
    workload: str
    checks: tuple[Check, ...]

    @property
    def met(self) -> bool:
        return all(c.met for c in self.checks)


def judge(workload: str, mine: Row, others: Sequence[Row], min_bound: Optional[float]) -> WorkloadGoal:
    """The goal on one workload: ``mine`` is the goal policy's row, ``others`` every other policy's."""
    checks: list[Check] = []
    tok = mine.input_tok_s
    if others:
        best = max(others, key=lambda r: r.input_tok_s)
        checks.append(Check("input tok/s", tok, best.input_tok_s, best.policy, tok >= best.input_tok_s * (1 - TOK_SLACK)))
        timed = [(r.ttft_p99_s, r) for r in others if r.ttft_p99_s is not None]
        p99 = mine.ttft_p99_s
        if timed and p99 is not None:
            quick_p99, quick = min(timed, key=lambda t: t[0])
            checks.append(Check("TTFT p99", p99, quick_p99, quick.policy, p99 <= quick_p99 * (1 + P99_SLACK)))
    off = [r for r in others if r.policy == OFF]
    if off:
        ref = off[0].input_tok_s
        checks.append(Check("input tok/s vs off", tok, ref, OFF, tok >= ref * (1 - OFF_SLACK)))
    if min_bound is not None:
        limit = mine.bound.input_tok_s * min_bound
        checks.append(Check("share of the bound", tok, limit, f"{100 * min_bound:.0f}% of the bound", tok >= limit))
    return WorkloadGoal(workload, tuple(checks))


def _figures(c: Check) -> str:
    def num(x: float) -> str:
        return f"{x:.3f} s" if c.name == "TTFT p99" else f"{x / 1000:.2f}k"

    return f"{num(c.value)} vs {num(c.reference)} {c.against}"


def _cell(c: Check) -> str:
    return f"{_figures(c)}: {'met' if c.met else '**missed**'}"


def misses_said(goals: Sequence[WorkloadGoal]) -> str:
    """Each workload the goal misses, with the figures of each line it misses ("none" when it misses none)."""
    return ", ".join(f"{g.workload} ({'; '.join(f'{c.name} {_figures(c)}' for c in g.checks if not c.met)})"
                     for g in goals if not g.met) or "none"


def goal_table(policy: str, goals: Sequence[WorkloadGoal]) -> str:
    """One row per workload, one column per line of the goal, then how many workloads meet all of it."""
    names = list(dict.fromkeys(c.name for g in goals for c in g.checks))

    def column(name: str) -> Column[WorkloadGoal]:
        return Column(name, "", lambda g: next((_cell(c) for c in g.checks if c.name == name), "-"), align="---")

    columns: list[Column[WorkloadGoal]] = [Column("workload", "", lambda g: g.workload, align="---"), *map(column, names),
                                           Column("goal", "", lambda g: "met" if g.met else "**missed**", align="---")]
    met = sum(g.met for g in goals)
    return (f"Goal of {policy}, each cell its figure vs the one it is judged against: input tok/s at most "
            f"{100 * TOK_SLACK:g}% below the best other policy's, TTFT p99 at most {100 * P99_SLACK:g}% above the best "
            f"other's, input tok/s at most {100 * OFF_SLACK:g}% below off's, and the workload's share of the bound where it "
            f"sets one\n\n{markdown(columns, goals)}\n\n"
            f"goal met on {met} of {len(goals)} workloads")


def missed(goals: Sequence[WorkloadGoal]) -> list[str]:
    """The workloads on which the goal is missed, in the suite's order."""
    return [g.workload for g in goals if not g.met]


def standings_table(by_policy: Mapping[str, Sequence[WorkloadGoal]]) -> str:
    """Every policy judged by the same goal against all the others: how many workloads each meets, most first
    (ties in the run's order), and which it misses."""
    order = sorted(by_policy, key=lambda p: -sum(g.met for g in by_policy[p]))
    total = max((len(g) for g in by_policy.values()), default=0)
    columns: list[Column[str]] = [
        Column("policy", "", lambda p: p, align="---"),
        Column("goal met", "", lambda p: f"{sum(g.met for g in by_policy[p])} of {len(by_policy[p])}"),
        Column("missed on", "", lambda p: ", ".join(missed(by_policy[p])) or "-", align="---"),
    ]
    everywhere = [p for p in order if not missed(by_policy[p])]
    verdict = (f"met on every workload by {', '.join(everywhere)}" if everywhere
               else f"no policy run meets it on all {total} workloads")
    return (f"Standings: every policy judged by the same goal, each against all the others\n\n{markdown(columns, order)}"
            f"\n\n{verdict}")


__all__ = ["Check", "WorkloadGoal", "goal_table", "judge", "missed", "misses_said", "standings_table"]
