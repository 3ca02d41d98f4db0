"""``check-log --plot FILE.png``: a per-rank timeline of decisions and the delay-run histogram.

matplotlib is an optional extra (``pip install 'prefill-delayer[plot]'``),
imported only here, and drawn without pyplot's global state (``Figure`` on an
Agg canvas), so the CLI never opens a window.
"""

from __future__ import annotations

import io
from collections import Counter
from typing import Any

from .checks import Report

# The timeline's colours: "not logged", then a held pass, then each allowing reason in the summary's order.
NOT_LOGGED, HELD = "#ffffff", "#d62728"
PALETTE = ("#2ca02c", "#1f77b4", "#ff7f0e", "#9467bd", "#c7c7c7", "#8c564b", "#e377c2", "#17becf")
MAX_SESSIONS_SHOWN = 4


def categories(report: Report) -> tuple[list[tuple[str, str]], dict[str, int]]:
    """(name, colour) of every timeline category, and each allowing reason's index among them."""
    from .summary import reason_name, reason_order

    held = {t.reason for s in report.sessions for t in s.config.policy.build_table(s.config.profile) if t.reason and not t.allows}
    allowing = [r for r in reason_order(report) if r not in held]
    cats = [("not logged", NOT_LOGGED), ("/".join(sorted(held)) or "held", HELD)]
    cats += [(reason_name(r).replace("-", " "), PALETTE[i % len(PALETTE)]) for i, r in enumerate(allowing)]
    return cats, {r: i + 2 for i, r in enumerate(allowing)}


def timeline_grid(report: Report, session: int, ranks: int, index: dict[str, int]) -> tuple[int, int, Any]:
    """(first pass, last pass, grid): one row per rank of the run, one int8 cell per pass, 0 where the rank
    logged no such pass, 1 where its decision held prefill, else its allowing reason's category (``index``).
    Read from the timelines check-log streams for ``--plot`` (``Report.timelines``: one byte per pass and
    rank, ``stream.Stitcher._timeline``), never from records held in memory: the run is not held."""
    import numpy as np

    names, per_rank = report.timelines.get(session) or ([], [[] for _ in range(ranks)])
    spans = [(first, first + len(cells) - 1) for chunks in per_rank for first, cells in chunks]
    lo, hi = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (1, 1)
    lut = np.array([0, 1] + [index[name] for name in names], dtype=np.int8)  # stream's cell -> category
    grid = np.zeros((ranks, hi - lo + 1), dtype=np.int8)
    for row, chunks in enumerate(per_rank):
        for first, cells in chunks:
            logged = np.flatnonzero(cells)
            grid[row, first - lo + logged] = lut[cells[logged]]
    return lo, hi, grid


def matplotlib_problem() -> str | None:
    """Why ``--plot`` cannot work here, or ``None``."""
    try:
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as exc:
        return f"--plot needs matplotlib ({exc}); install it with pip install 'prefill-delayer[plot]'"
    return None


def plot(report: Report, suffix: str) -> bytes:
    """The timeline of every run (up to four) and the delay-run histogram, as a file of format ``suffix`` (``.png``).

    Drawn into memory, not into the output file: the command writes the bytes with its other outputs, so a full disk
    is one line naming ``--plot`` (matplotlib's writers fail unnamed, and its PDF writer, once a write failed, raises
    an ``AttributeError`` of its own while it closes the file)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    sessions = report.sessions[:MAX_SESSIONS_SHOWN]
    heights = [max(1.2, 0.45 * len(s.logs) + 0.8) for s in sessions] + [2.6]
    fig = Figure(figsize=(12, sum(heights) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights})
    cats, index = categories(report)
    cmap = ListedColormap([color for _, color in cats])
    for ax, s in zip(axes, sessions):
        lo, hi, grid = timeline_grid(report, s.index, len(s.logs), index)
        ax.imshow(grid, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=len(cats) - 1,
                  extent=(lo - 0.5, hi + 0.5, len(s.logs) - 0.5, -0.5))
        ax.set_yticks(range(len(s.logs)), [f"rank {log.rank}" for log in s.logs])
        ax.set_xlabel("pass")
        c = s.config
        first = c.policy.params[0].name
        ax.set_title(f"run {s.index}: profile {c.profile}, world {c.world_size}, {first} {getattr(c, first)}: "
                     "decision per rank and pass", fontsize=10, loc="left")
        place = {log.rank: i for i, log in enumerate(s.logs)}
        fails = [(f.number, place[log.rank]) for log in s.logs for f in log.fails]
        if fails:
            ax.scatter([x for x, _ in fails], [y for _, y in fails], marker="x", color="black", s=18, label="failed pass")
        flagged = [(f.pass_number, place[r]) for f in report.findings if f.session == s.index for r in f.ranks if r in place]
        if flagged:
            ax.scatter([x for x, _ in flagged], [y - 0.38 for _, y in flagged], marker="v", color="black", s=22,
                       zorder=3, clip_on=False)
    handles = [Patch(facecolor=color, edgecolor="#555555", label=name) for name, color in cats[1:]]
    handles.append(Patch(facecolor="black", label="▼ violation / x failed pass"))
    axes[0].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    _histogram(axes[-1], report)
    buf = io.BytesIO()
    fig.savefig(buf, format=suffix.lower().lstrip("."), dpi=110)
    return buf.getvalue()


def run_limits(report: Report) -> list[tuple[int, list[str], list[str]]]:
    """The limits the histogram draws: every run bound of a rank the runs' policies declare (their ``RunBound``
    monitors, the ones check-log checks), each counting held passes of some kind (any delay, a mixed one, one with no
    decode anywhere), so its runs are parts of the delay runs drawn. (limit, its invariants, those violated), by limit."""
    from ..spec.monitors import RunBound
    from ..spec.ops import PY
    from .checks import INVARIANT

    by_limit: dict[int, list[str]] = {}
    for s in report.sessions:
        for inv in s.config.policy.invariants:
            if isinstance(inv.check, RunBound):
                ids = by_limit.setdefault(int(inv.check.limit(PY, s.config)), [])
                if inv.id not in ids:
                    ids.append(inv.id)
    return [(b, ids, [i for i in ids if report.counts[(INVARIANT, i)]]) for b, ids in sorted(by_limit.items())]


def limits_drawn(limits: list[tuple[int, list[str], list[str]]], longest: int) -> tuple[list, list]:
    """(drawn as lines, named off the scale): a limit far beyond every run would squash the bars, so it is only named;
    a violated one is drawn all the same (the run that broke it may be one the histogram leaves out, cut or open)."""
    near = [x for x in limits if x[0] <= 2 * longest + 5 or x[2]]
    return near, [x for x in limits if x not in near]


def _histogram(ax: Any, report: Report) -> None:
    from matplotlib.ticker import MaxNLocator

    hist: Counter = Counter()
    for st in report.stats.values():
        hist.update(st.delay_runs)
    if hist:
        xs = sorted(hist)
        ax.bar(xs, [hist[x] for x in xs], width=0.8, color=HELD)
    else:
        ax.text(0.5, 0.5, "no complete delay run", transform=ax.transAxes, ha="center", va="center")
    longest = max(hist, default=1)
    near, far = limits_drawn(run_limits(report), longest)
    right = max([longest, *(b for b, _, _ in near)]) + 1.5
    ax.set_xlim(0.4, right)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for k, (b, ids, bad) in enumerate(near):
        label = f"{', '.join(ids)} ≤ {b}" + ("" if not bad else " VIOLATED" if bad == ids else f": {', '.join(bad)} VIOLATED")
        ax.axvline(b + 0.5, color="black", linestyle="-" if bad else "--", linewidth=1.8 if bad else 1)
        left = b + 0.5 > (0.4 + right) / 2  # in the right half, the label goes left of its line
        ax.text(b + 0.5, 0.97 - 0.13 * k, f" {label} ", transform=ax.get_xaxis_transform(),
                ha="right" if left else "left", va="top", fontsize=8, fontweight="bold" if bad else "normal",
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    if far:
        ax.text(0.99, 0.97 - 0.13 * len(near), "; ".join(f"{', '.join(ids)} ≤ {b}" for b, ids, _ in far) + ": off the scale",
                transform=ax.transAxes, ha="right", va="top", fontsize=8)
    ax.set_xlabel("delay-run length (consecutive delayed passes of one rank)")
    ax.set_ylabel("runs")
    ax.set_title("delay-run lengths, all ranks (complete runs); lines: the policy's run bounds, each over its own held passes",
                 fontsize=10, loc="left")
