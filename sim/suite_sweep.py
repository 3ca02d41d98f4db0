"""``simulate --suite NAME --load-scale X --load-scale Y ... --seeds 0-7``: one suite at several offered loads and seeds.

A verdict at one load can sit a few percent from a policy's saturation cliff: below it, a policy
that never holds wins on TTFT; a few percent above it, the same policy's queues grow without end.
At one load, the draw of arrivals decides on which side of the cliff a run lies, so a verdict at one
seed is one draw. The sweep runs the suite once per cell, each load (``suite_run.run_suite``'s
offered loads scaled) at each seed, and sets each workload's TTFT p99 and input tok/s side by side,
cell by cell; with ``--goal``, how many workloads each policy meets in each cell and in all, and
where the goal policy meets and misses, workload by workload. Where the loads vary, the calibration
scenarios keep their own arrivals, so the by-cell tables leave them out (the goal counts keep them).
``--json`` holds each cell's whole suite document (``suite_run.suite_doc``); ``--plot`` draws TTFT
p99 and input tok/s against the load (or the seed), two panels per workload. Both are written after the last run, or
neither.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, TextIO

from ..files import Outputs
from .cli import check_logs_whole
from .report import Column, markdown
from .suite_goal import WorkloadGoal, misses_said
from .bound import Bound
from .errors import counted
from .suite_run import (Case, Planned, Row, _s, _tok, load_label, plan_suite, run_planned, runs_of, standings, suite_doc,
                        suite_notes)


@dataclass(frozen=True)
class Cell:
    """The suite run at one offered-load scale and one seed."""

    scale: float
    seed: int
    cases: list[Case]
    rows: list[Row]


def cell_label(scales: Sequence[float], seeds: Sequence[int], scale: float, seed: int) -> str:
    """A cell's name, by what varies in the sweep: ``x1.03``, ``seed 3``, or ``x1.03 seed 3``."""
    return " ".join(([load_label(scale)] if len(scales) > 1 else []) + ([f"seed {seed}"] if len(seeds) > 1 else []))


@dataclass(frozen=True)
class Sweep:
    """Every cell, loads outer and seeds inner, in the order given."""

    name: str
    scales: list[float]
    seeds: list[int]
    cells: list[Cell]
    wall_s: float

    def label(self, c: Cell) -> str:
        """How a cell is named in columns and progress lines: ``x1.03``, ``seed 3``, or ``x1.03 seed 3``."""
        return cell_label(self.scales, self.seeds, c.scale, c.seed)

    @property
    def axis(self) -> str:
        """What varies: "offered load", "seed" or both."""
        return " and ".join((["offered load"] if len(self.scales) > 1 else []) + (["seed"] if len(self.seeds) > 1 else []))

    def workloads(self) -> list[str]:
        """The workloads the by-cell tables show, in the suite's order: where the loads vary, those whose arrivals
        scale (a load share)."""
        return [c.spec.name for c in self.cells[0].cases if len(self.scales) == 1 or c.spec.load is not None]

    def policies(self) -> list[str]:
        return list(dict.fromkeys(r.policy for r in self.cells[0].rows))

    def found(self) -> dict[tuple[int, str, str], Row]:
        """Every run by (cell index, workload, policy)."""
        return {(k, r.workload, r.policy): r for k, c in enumerate(self.cells) for r in c.rows}


def by_cell_table(sweep: Sweep, cell: Callable[[Row], str]) -> str:
    """Workload x policy, a column per cell: ``cell`` of that run."""
    found = sweep.found()
    lines = [(w, p) for w in sweep.workloads() for p in sweep.policies()]

    def in_cell(k: int) -> Callable[[tuple[str, str]], str]:
        return lambda x: cell(found[(k, x[0], x[1])])

    columns: list[Column[tuple[str, str]]] = [
        Column("workload", "", lambda x: x[0], align="---"),
        Column("policy", "", lambda x: x[1], align="---"),
        *(Column(sweep.label(c), "", in_cell(k)) for k, c in enumerate(sweep.cells)),
    ]
    return markdown(columns, lines)


def _met(goals: Sequence[WorkloadGoal]) -> int:
    return sum(g.met for g in goals)


def goal_by_cell_table(goal: str, judged: Sequence[dict[str, list[WorkloadGoal]]], sweep: Sweep) -> str:
    """Every policy's count of workloads meeting ``--goal``'s goal in each cell and in all, most in all first; then
    the goal policy's verdict on each workload in each cell; then what it misses in each cell, with the figures it
    misses by."""
    cells = sweep.cells
    total = {p: sum(_met(j[p]) for j in judged) for p in judged[0]}
    order = sorted(judged[0], key=lambda p: -total[p])
    judgements = sum(len(j[goal]) for j in judged)

    def met_in(k: int) -> Callable[[str], str]:
        return lambda p: f"{_met(judged[k][p])} of {len(judged[k][p])}"

    columns: list[Column[str]] = [
        Column("policy", "", lambda p: p, align="---"),
        *(Column(sweep.label(c), "", met_in(k)) for k, c in enumerate(cells)),
    ]
    if len(cells) > 1:
        columns.append(Column("all", "", lambda p: f"{total[p]} of {judgements}"))
    names = [g.workload for g in judged[0][goal]]
    verdict = {(k, g.workload): g for k, j in enumerate(judged) for g in j[goal]}

    def said(g: WorkloadGoal) -> str:
        return "met" if g.met else "**" + ", ".join(c.name for c in g.checks if not c.met) + "**"

    def said_in(k: int) -> Callable[[str], str]:
        return lambda w: said(verdict[(k, w)])

    grid: list[Column[str]] = [
        Column("workload", "", lambda w: w, align="---"),
        *(Column(sweep.label(c), "", said_in(k), align="---") for k, c in enumerate(cells)),
        Column("met in", "", lambda w: f"{sum(verdict[(k, w)].met for k in range(len(cells)))} of {len(cells)}"),
    ]
    misses = "\n".join(f"- {sweep.label(c)}: {misses_said(judged[k][goal])}" for k, c in enumerate(cells))
    return (f"Goal met, by {sweep.axis}: every policy judged against all the others in each cell\n\n"
            f"{markdown(columns, order)}\n\n"
            f"{goal}, workload by workload (met, or the lines of the goal it misses)\n\n{markdown(grid, names)}\n\n"
            f"{goal} meets the goal in {total[goal]} of {judgements} judgements\n\n"
            f"{goal} misses, by {sweep.axis}:\n{misses}")


def report(sweep: Sweep, goal: Optional[tuple[str, Sequence[dict[str, list[WorkloadGoal]]]]]) -> str:
    """The sweep's tables: TTFT p99 and input tok/s by cell, and with a goal (its policy, and each cell's standings),
    the counts by cell."""
    where = []
    if len(sweep.scales) > 1:
        where.append("offered loads " + ", ".join(load_label(x) for x in sweep.scales))
    if len(sweep.seeds) > 1:
        where.append("seeds " + ", ".join(map(str, sweep.seeds)))
    cases = sweep.cells[0].cases
    left = len(cases) - len(sweep.workloads())
    text = (f"Suite {sweep.name} at {' and '.join(where)}: {counted(len(cases), 'workload')} x "
            f"{counted(len(sweep.policies()), 'policy', 'policies')} in each of {len(sweep.cells)} cells"
            + (f" ({left} calibration scenarios keep their own arrivals and are left out below)" if left else "")
            + "".join("\n" + line for line in suite_notes(cases, sweep.policies()))  # alike in every cell
            + f"\n\nTTFT p99, by {sweep.axis}\n\n{by_cell_table(sweep, lambda r: _s(r.ttft_p99_s))}"
            f"\n\nInput tok/s, by {sweep.axis}\n\n{by_cell_table(sweep, lambda r: _tok(r.input_tok_s))}")
    if goal is not None:
        text += "\n\n" + goal_by_cell_table(goal[0], goal[1], sweep)
    return text


def _seconds(v: float, _: Any = None) -> str:
    return f"{v:g}"


def log_ticks(ax: Any, lo: float, hi: float) -> None:
    """Labels for a log axis over ``[lo, hi]`` that always give at least two: the decades where it spans more than
    two, 1-2-5 where it spans more than one, and a few round values in between where it spans less (a log axis
    over 2.2-4 s has no decade or 1-2-5 mark inside it, and read no label at all)."""
    from matplotlib import ticker

    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 0.0
    if decades > 2:
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10))
    elif decades > 1:
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    else:
        ax.yaxis.set_major_locator(ticker.FixedLocator(
            [v for v in ticker.MaxNLocator(nbins=4).tick_values(lo, hi) if lo <= v <= hi and v > 0]))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(_seconds))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


Series = tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]  # median, least, most at each x


def sweep_figure(sweep: Sweep) -> Any:
    """Per workload shown, TTFT p99 (log axis) over input tok/s against the offered load, a line per policy and
    the bound's dashed: a cliff shows as a line that leaves the others, in latency and in throughput. With
    several seeds at each load a line is the median over the seeds and the band their range; with one load,
    the x axis is the seed (a dot per policy at each, side by side). Policies alike in every panel are drawn
    once, labelled ``a = b``; the others differ in colour, line style and marker, so one that meets another in
    some panels still shows."""
    from .plot import LINE_STYLES, MARKERS, _pyplot, same

    plt = _pyplot()
    names = sweep.workloads()
    found = sweep.found()
    by_load = len(sweep.scales) > 1
    xs: list[float] = sorted(sweep.scales) if by_load else [float(x) for x in sweep.seeds]
    place = list(range(len(xs))) if not by_load else xs

    def at(x: float) -> list[int]:
        """The cells drawn at ``x``."""
        return [k for k, c in enumerate(sweep.cells) if (c.scale if by_load else float(c.seed)) == x]

    def series(values: Callable[[int], float]) -> Series:
        """Over the cells at each x: the median, the least and the most of ``values`` (nan: none had one)."""
        got = [[values(k) for k in at(x)] for x in xs]
        return (tuple(statistics.median(v) for v in got), tuple(min(v) for v in got), tuple(max(v) for v in got))

    def p99(r: Row) -> float:
        return math.nan if r.ttft_p99_s is None else r.ttft_p99_s  # nan: no request of the window got a token

    def bound_p99(b: Bound) -> float:
        t = b.ttft(0.99)
        return math.nan if t is None else t

    def of_runs(w: str, p: str, f: Callable[[Row], float]) -> Callable[[int], float]:
        """``f`` of the run of ``w`` and ``p`` in each cell."""
        return lambda k: f(found[(k, w, p)])

    metrics: list[tuple[str, Callable[[Row], float], Callable[[Bound], float]]] = [
        ("TTFT p99 (s)", p99, bound_p99),
        ("input k tok/s", lambda r: r.input_tok_s / 1000, lambda b: b.input_tok_s / 1000),
    ]
    drawn = {p: {(w, m): series(of_runs(w, p, f)) for w in names
                 for m, (_, f, _) in enumerate(metrics)} for p in sweep.policies()}  # by (workload, metric)
    groups = same(list(drawn), lambda p: tuple(drawn[p].values()))  # alike in every panel: one line, "a = b"
    labels = [" = ".join(g) for g in groups]

    def bound_of(k: int, w: str) -> Bound:
        return next(c.bound for c in sweep.cells[k].cases if c.spec.name == w)

    cols = min(4, len(names))
    blocks = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(2 * blocks, cols, figsize=(3.4 * cols, 4.4 * blocks + 1.0), dpi=80, squeeze=False)
    colors = plt.get_cmap("tab20" if len(groups) > 10 else "tab10")
    spread = 0.0 if by_load else 0.6 / max(len(groups), 1)
    for j, w in enumerate(names):
        for m, (what, _, of_bound) in enumerate(metrics):
            ax = axes[2 * (j // cols) + m][j % cols]
            for i, g in enumerate(groups):
                line, least, most = drawn[g[0]][(w, m)]
                color = colors(i % colors.N)
                shift = spread * (i - (len(groups) - 1) / 2)
                # by load, the first drawn widest: it shows beside the later ones it meets (seeds' dots stand apart)
                under = (len(groups) - 1 - i) / max(len(groups) - 1, 1) if by_load else 0.5
                ax.plot([x + shift for x in place], line, marker=MARKERS[i % len(MARKERS)], markersize=3 + 3 * under,
                        linewidth=(1.0 + 1.6 * under) if by_load else 0, color=color,
                        linestyle=LINE_STYLES[i % len(LINE_STYLES)], label=labels[i])
                if least != most:
                    ax.fill_between(place, least, most, color=color, alpha=0.12, linewidth=0)
            bounds = [statistics.median(of_bound(bound_of(k, w)) for k in at(x)) for x in xs]
            if by_load:
                ax.plot(place, bounds, linestyle="--", color="black", linewidth=1.0, label="bound")
            else:  # a dash across each seed's dots
                ax.hlines(bounds, [x - 0.4 for x in place], [x + 0.4 for x in place], linestyles="--", colors="black",
                          linewidth=1.0, label="bound")
            if m == 0:
                ax.set_yscale("log")
                lo, hi = ax.get_ylim()
                log_ticks(ax, lo, hi)
                ax.set_title(w, fontsize=9)
            else:  # at least 2% of the top: throughputs a few tok/s apart do not fill the panel as a cliff would
                lo, hi = ax.get_ylim()
                if hi - lo < 0.02 * hi:
                    middle = (hi + lo) / 2
                    ax.set_ylim(middle - 0.01 * hi, middle + 0.01 * hi)
            ax.set_xticks(place, [f"{x:g}" for x in xs], fontsize=7)
            ax.tick_params(axis="y", which="both", labelsize=7)
            ax.grid(True, which="major", alpha=0.3)
            if j % cols == 0:
                ax.set_ylabel(what, fontsize=8)
            if m == 1 and j + cols >= len(names):  # no panel below it
                ax.set_xlabel("offered load, x the suite's" if by_load else "seed", fontsize=8)
    for j in range(len(names), blocks * cols):
        for m in range(len(metrics)):
            axes[2 * (j // cols) + m][j % cols].axis("off")
    handles, legend = axes[0][0].get_legend_handles_labels()
    ncol = min(len(legend), 5)
    fig.legend(handles, legend, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    what = "the offered load" if by_load else "the seed"
    if by_load and len(sweep.seeds) > 1:
        what += f" (median of seeds {', '.join(map(str, sweep.seeds))}; band: their range)"
    fig.suptitle(f"suite {sweep.name}: TTFT p99 and input tok/s against {what}", fontsize=10)
    legend_rows = math.ceil(len(legend) / ncol)
    fig.tight_layout(rect=(0, (0.25 + 0.2 * legend_rows) / (4.4 * blocks + 1.0), 1, 0.97))
    return fig


def plot(sweep: Sweep, path: str, name: str = "") -> None:
    """``sweep_figure`` written to ``path`` as a PNG (``name``: as ``plot.save_png``)."""
    from .plot import save_png

    save_png(sweep_figure(sweep), path, name)


def sweep(name: str, profiles: Sequence[str], scales: Sequence[float], seeds: Sequence[int], goal: Optional[str],
          s: dict[str, Any], given: set[str], outputs: Outputs, stdout: TextIO, progress: Optional[TextIO]) -> int:
    """Run every cell (each load at each seed, in the order given; ``--jobs`` runs at once), then print and write the
    sweep. Every workload is planned at every load before any run, at the first seed; another seed changes only the
    draw of arrivals, which no check reads, so each further cell is planned when its runs are about to start: a sweep
    of many seeds starts at once, and holds only the cells begun, not one per seed asked for."""
    keys = [(x, seed) for x in scales for seed in seeds]
    started = time.perf_counter()
    first = {x: plan_suite(name, profiles, dict(s, seed=seeds[0]), given, x) for x in scales}

    def planned() -> Iterator[tuple[str, Planned]]:
        for x, seed in keys:
            cell = first.pop(x) if seed == seeds[0] else plan_suite(name, profiles, dict(s, seed=seed), given, x)
            yield f"{cell_label(scales, seeds, x, seed)} ", cell

    done = run_planned(planned(), len(keys) * runs_of(first[scales[0]]), s["jobs"], progress)
    cells = [Cell(x, seed, cases, rows) for (x, seed), (cases, rows) in zip(keys, done)]
    result = Sweep(name, list(scales), list(seeds), cells, time.perf_counter() - started)
    judged = [] if goal is None else [standings(c.cases, c.rows) for c in cells]  # once, for the text and the JSON
    text = report(result, None if goal is None else (goal, judged))
    stdout.write(text + f"\n\nwall time: {result.wall_s:.0f} s for {sum(len(c.rows) for c in cells)} runs\n")
    with outputs.writing() as out:  # both files or neither
        if s["json"]:
            runs = [suite_doc(name, c.cases, c.rows, sum(r.wall_s for r in c.rows),
                              None if goal is None else (goal, judged[k]), c.scale, c.seed)
                    for k, c in enumerate(cells)]
            out.write("--json", json.dumps({"suite": name, "load_scales": list(scales), "seeds": list(seeds),
                                            "wall_s": result.wall_s, "runs": runs}, indent=1) + "\n")
        if s["plot"]:
            plot(result, out.path("--plot"), s["plot"])
    check_logs_whole((f"{cell_label(scales, seeds, c.scale, c.seed)} {r.workload} {r.policy}", r.log_failures)
                     for c in cells for r in c.rows)
    return 0


__all__ = ["Cell", "Sweep", "by_cell_table", "cell_label", "goal_by_cell_table", "log_ticks", "plot", "report", "sweep",
           "sweep_figure"]
