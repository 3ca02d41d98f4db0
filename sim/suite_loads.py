"""``simulate --suite NAME --load-scale X --load-scale Y ...``: one suite at several offered loads.

A verdict at one load can sit a few percent from a policy's saturation cliff: below it, a policy
that never holds wins on TTFT; a few percent above it, the same policy's queues grow without end.
The sweep runs the suite once per load (``suite_run.run_suite``, its offered loads scaled) and sets
each workload's TTFT p99 and input tok/s side by side, load by load, and with ``--goal`` how many
workloads each policy meets at each load. The calibration scenarios keep their own arrivals, so the
by-load tables leave them out (the goal counts keep them). ``--json`` holds each load's whole suite
document (``suite_run.suite_doc``); ``--plot`` draws TTFT p99 against the load, a panel per workload.
Both are written after the last run, or neither.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TextIO

from ..files import Outputs
from .report import Column, markdown
from .suite_goal import WorkloadGoal, misses_said
from .suite_run import Case, Row, _s, _tok, load_label, run_suite, standings, suite_doc


@dataclass(frozen=True)
class Load:
    """The suite run at one offered-load scale."""

    scale: float
    cases: list[Case]
    rows: list[Row]
    wall_s: float


def _scaled_workloads(loads: Sequence[Load]) -> list[str]:
    """The workloads whose arrivals scale (a load share), in the suite's order."""
    return [c.spec.name for c in loads[0].cases if c.spec.load is not None]


def _runs(loads: Sequence[Load]) -> tuple[list[str], dict[tuple[float, str, str], Row]]:
    """The policies, in the run's order, and every run by (scale, workload, policy)."""
    return (list(dict.fromkeys(r.policy for r in loads[0].rows)),
            {(ld.scale, r.workload, r.policy): r for ld in loads for r in ld.rows})


def by_load_table(loads: Sequence[Load], cell: Callable[[Row], str]) -> str:
    """Workload x policy, a column per load: ``cell`` of that run."""
    policies, found = _runs(loads)
    lines = [(w, p) for w in _scaled_workloads(loads) for p in policies]
    columns: list[Column[tuple[str, str]]] = [
        Column("workload", "", lambda x: x[0], align="---"),
        Column("policy", "", lambda x: x[1], align="---"),
        *(Column(load_label(ld.scale), "", lambda x, s=ld.scale: cell(found[(s, *x)])) for ld in loads),
    ]
    return markdown(columns, lines)


def goal_by_load_table(goal: str, judged: Sequence[dict[str, list[WorkloadGoal]]], loads: Sequence[Load]) -> str:
    """Every policy's count of workloads meeting ``--goal``'s goal at each load, most at the first load first; then
    what the goal policy misses at each load, with the figures it misses by."""
    first = judged[0]
    order = sorted(first, key=lambda p: -sum(g.met for g in first[p]))
    columns: list[Column[str]] = [
        Column("policy", "", lambda p: p, align="---"),
        *(Column(load_label(ld.scale), "", lambda p, k=k: f"{sum(g.met for g in judged[k][p])} of {len(judged[k][p])}")
          for k, ld in enumerate(loads)),
    ]
    misses = "\n".join(f"- {load_label(ld.scale)}: {misses_said(judged[k][goal])}" for k, ld in enumerate(loads))
    return (f"Goal met, by offered load: every policy judged against all the others at each load\n\n"
            f"{markdown(columns, order)}\n\n{goal} misses, by offered load:\n{misses}")


def report(name: str, loads: Sequence[Load], goal: Optional[tuple[str, Sequence[dict[str, list[WorkloadGoal]]]]]) -> str:
    """The sweep's tables: TTFT p99 and input tok/s by load, and with a goal (its policy, and each load's
    standings), the counts by load."""
    loads_text = ", ".join(load_label(ld.scale) for ld in loads)
    policies = len(dict.fromkeys(r.policy for r in loads[0].rows))
    kept = len(_scaled_workloads(loads))
    text = (f"Suite {name} at offered loads {loads_text}: {len(loads[0].cases)} workloads x {policies} policies at each "
            f"({kept} whose arrivals scale; the calibration scenarios keep their own and are left out below)\n\n"
            f"TTFT p99, by offered load\n\n{by_load_table(loads, lambda r: _s(r.ttft_p99_s))}\n\n"
            f"Input tok/s, by offered load\n\n{by_load_table(loads, lambda r: _tok(r.input_tok_s))}")
    if goal is not None:
        text += "\n\n" + goal_by_load_table(goal[0], goal[1], loads)
    return text


def _seconds(v: float, _: Any = None) -> str:
    return f"{v:g}"


def _mantissa(v: float) -> float:
    """2 for 0.2, 20 and 200: which minor ticks of a log axis get a label."""
    return round(v / 10 ** math.floor(math.log10(v)), 6) if v > 0 else 0.0


def plot(name: str, loads: Sequence[Load], path: str) -> None:
    """TTFT p99 against the offered load, a panel per workload whose load scales, a line per policy (the bound's
    dashed), on a log axis: a cliff shows as a line that leaves the others."""
    from .plot import _pyplot, _shrink

    plt = _pyplot()
    from matplotlib import ticker

    names = _scaled_workloads(loads)
    policies, found = _runs(loads)
    bounds = {(ld.scale, c.spec.name): c.bound.ttft(0.99) for ld in loads for c in ld.cases}
    order = sorted(loads, key=lambda ld: ld.scale)
    xs = [ld.scale for ld in order]
    cols = min(4, len(names))
    rows_n = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(3.4 * cols, 2.6 * rows_n + 0.9), dpi=80, squeeze=False)
    colors = plt.get_cmap("tab20" if len(policies) > 10 else "tab10")
    for k, w in enumerate(names):
        ax = axes[k // cols][k % cols]
        for i, p in enumerate(policies):
            ax.plot(xs, [found[(x, w, p)].ttft_p99_s for x in xs], marker="o", markersize=3, linewidth=1.2,
                    color=colors(i % colors.N), linestyle=("-", ":", "-.")[i // colors.N % 3], label=p)  # past 20: dotted
        ax.plot(xs, [bounds[(x, w)] for x in xs], linestyle="--", color="black", linewidth=1.0, label="bound")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(_seconds))
        ax.yaxis.set_minor_formatter(ticker.FuncFormatter(lambda v, _: _seconds(v) if _mantissa(v) in (2, 5) else ""))
        ax.set_title(w, fontsize=9)
        ax.set_xticks(xs, [f"{x:g}" for x in xs], fontsize=7)
        ax.tick_params(axis="y", which="both", labelsize=7)
        ax.grid(True, which="major", alpha=0.3)
        if k % cols == 0:
            ax.set_ylabel("TTFT p99 (s)", fontsize=8)
        if k + cols >= len(names):  # no panel below it
            ax.set_xlabel("offered load, x the suite's", fontsize=8)
    for k in range(len(names), rows_n * cols):
        axes[k // cols][k % cols].axis("off")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    fig.suptitle(f"suite {name}: TTFT p99 against the offered load", fontsize=10)
    legend_rows = math.ceil(len(labels) / min(len(labels), 6))
    fig.tight_layout(rect=(0, 0.01 + 0.025 * legend_rows, 1, 0.97))
    fig.savefig(path, format="png")
    plt.close(fig)
    _shrink(path)


def sweep(name: str, profiles: Sequence[str], scales: Sequence[float], goal: Optional[str], s: dict[str, Any],
          given: set[str], outputs: Outputs, stdout: TextIO, progress: Optional[TextIO]) -> int:
    """Run the suite at each scale, in the order given, then print and write the sweep."""
    loads: list[Load] = []
    started = time.perf_counter()
    for scale in scales:
        t0 = time.perf_counter()
        cases, rows = run_suite(name, profiles, s, given, progress, scale, label=f"{load_label(scale)} ")
        loads.append(Load(scale, cases, rows, time.perf_counter() - t0))
    wall = time.perf_counter() - started
    judged = [] if goal is None else [standings(ld.cases, ld.rows) for ld in loads]  # once, for the text and the JSON
    text = report(name, loads, None if goal is None else (goal, judged))
    stdout.write(text + f"\n\nwall time: {wall:.0f} s for {sum(len(ld.rows) for ld in loads)} runs\n")
    with outputs.writing() as out:  # both files or neither
        if s["json"]:
            runs = [suite_doc(name, ld.cases, ld.rows, ld.wall_s,
                              None if goal is None else (goal, judged[k]), ld.scale)
                    for k, ld in enumerate(loads)]
            out.write("--json", json.dumps({"suite": name, "load_scales": list(scales), "wall_s": wall, "runs": runs},
                                           indent=1) + "\n")
        if s["plot"]:
            plot(name, loads, out.path("--plot"))
    return 0


__all__ = ["Load", "by_load_table", "goal_by_load_table", "plot", "report", "sweep"]
