"""The figure: input throughput over time for every profile, then per profile the ranks' prefill
progress (drift from the ranks' mean, in chunks) and the decision timeline of the run's last
passes (rank x pass, coloured by the delayer's reason, a dot where the rank prefilled).

Profiles whose runs draw the same (SGLang releases that share a delayer, a hardened profile
where nothing it hardens happens) are drawn once, labelled ``a = b``: one would hide under the
other. The legends sit outside the panels.

matplotlib is imported here only, with the non-interactive Agg backend; it is
the optional ``plot`` extra (part of ``all``): the simulation needs nothing of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

from .errors import SimInputError
from .result import NO_REASON, OFF_REASON, RunResult

# The simulator's own reasons; a policy's come from its ``SimBinding.colours``, else from PALETTE in order.
OWN_COLOURS = {NO_REASON: "#d9d9d9", OFF_REASON: "#8c8c8c"}  # none: nobody could prefill; off: no policy
PALETTE = ("#2ca02c", "#1f77b4", "#d62728", "#ff7f0e", "#9467bd", "#17becf", "#bcbd22", "#e377c2")
REASON_LABELS = {NO_REASON: "none (nothing to prefill)", OFF_REASON: "no policy"}


def reason_colours(result: RunResult) -> list[str]:
    """One colour per reason code of ``result``."""
    given = dict(result.binding.colours) if result.binding is not None else {}
    spare = iter(c for c in PALETTE if c not in given.values())
    return [OWN_COLOURS.get(x) or given.get(x) or next(spare, "#000000") for x in result.reasons]
TIMELINE_PASSES = 120


def _pale(colour: str) -> tuple[float, float, float]:
    """``colour`` mixed 70% with white."""
    rgb = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    return tuple(c + (1 - c) * 0.7 for c in rgb)  # type: ignore[return-value]


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SimInputError(
            "--plot needs matplotlib, which is not installed: pip install 'prefill-delayer[plot]'"
        ) from None
    return plt


# Text sizes in points: the figure is saved at 72 dpi, so a point is a pixel, and 10 px is about the least
# that reads without zooming.
FONTS = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "xtick.labelsize": 10, "ytick.labelsize": 10,
         "legend.fontsize": 11, "figure.titlesize": 14}
# One line style per series, so series that overlap stay told apart where their colours hide one another.
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
MARK_EVERY = 6  # a marker every 6th point, each series starting at another one so markers do not sit on markers


def same(results: Sequence[RunResult], key: Callable[[RunResult], Hashable]) -> list[list[RunResult]]:
    """``results`` grouped where ``key`` (what a panel draws of a run) is equal, in order of first appearance:
    identical runs would draw one line over another, so they are drawn once, labelled ``a = b``."""
    groups: dict[Hashable, list[RunResult]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    return list(groups.values())


def label(group: Sequence[RunResult]) -> str:
    return " = ".join(r.variant.label for r in group)


def _frozen(value: Any) -> Hashable:
    """A nested list/tuple of numbers as nested tuples, to compare and group by."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _curves(r: RunResult) -> Hashable:
    return _frozen((r.throughput_series(), r.running_series()))


def _panels(r: RunResult) -> Hashable:
    return _frozen((r.progress_spread(), r.decision_window(TIMELINE_PASSES), r.reasons, reason_colours(r)))


def plot(results: Sequence[RunResult], path: str, title: str = "", dpi: int = 72) -> None:
    """Save the figure of ``results`` as a PNG at ``path``, its text sized by ``FONTS``."""
    plt = _pyplot()
    with plt.rc_context(FONTS):
        fig = figure(results, title, dpi)
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, dpi=dpi)
            _shrink(path)
        except OSError as exc:
            raise SimInputError(f"--plot {path}: {exc.strerror or exc}") from None
        finally:
            plt.close(fig)


def figure(results: Sequence[RunResult], title: str = "", dpi: int = 72) -> Any:
    """The figure (see the module docstring); every legend outside the panels, so none covers data."""
    plt = _pyplot()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    curves = same(results, _curves)
    columns = same(results, _panels)
    n = len(columns)
    inches = max(11.0, 4.2 * n)
    fig = plt.figure(figsize=(inches, 10.5), dpi=dpi, layout="constrained")
    ncol = min(len(curves), max(4, int(inches / 3.0)))  # a legend entry takes about 3 inches
    # The first row holds the series' legend alone: above the panels, it covers none of their data.
    grid = fig.add_gridspec(4, n, height_ratios=[0.1 * -(-len(curves) // ncol), 1.2, 1.0, 0.9])
    keys = fig.add_subplot(grid[0, :])
    keys.axis("off")
    ax, ax_run = (fig.add_subplot(g) for g in grid[1, :].subgridspec(1, 2))
    warm = results[0].config.warmup_s
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, group in enumerate(curves):
        r = group[0]
        style = dict(color=palette[i % len(palette)], ls=LINE_STYLES[i % len(LINE_STYLES)], marker=MARKERS[i % len(MARKERS)],
                     markevery=(i % MARK_EVERY, MARK_EVERY), ms=6, lw=1.8, label=label(group))
        t, tps = r.throughput_series()
        ax.plot(t, [x / 1000 for x in tps], **style)
        t, running = r.running_series()
        ax_run.plot(t, running, **style)
    for a, ylabel, what in ((ax, "input k tok/s", "input throughput"), (ax_run, "running requests / rank", "running requests per rank")):
        a.set_ylabel(ylabel)
        a.set_xlabel("simulated s")
        if warm > 0:
            a.axvspan(0, warm, color="#eeeeee", lw=0, label="_warm-up")
        a.set_title(what + (" (grey: warm-up)" if warm > 0 else ""))
        a.set_ylim(bottom=0)
    keys.legend(handles=ax.get_legend_handles_labels()[0], loc="center", ncol=ncol, frameon=False, handlelength=3.5)
    if title:
        fig.suptitle(title)
    for i, group in enumerate(columns):
        r = group[0]
        pa = fig.add_subplot(grid[2, i])
        times, lines = r.progress_spread()
        for rank, line in enumerate(lines):
            pa.plot(times, line, lw=0.8)
        pa.set_title(label(group))
        pa.set_xlabel("simulated s")
        if i == 0:
            pa.set_ylabel("prefill progress\n- ranks' mean (chunks)")
        ta = fig.add_subplot(grid[3, i])
        image, prefilled, first = r.decision_window(TIMELINE_PASSES)
        width = len(image[0]) if image and image[0] else 1
        # Reason colours; the same paler where the rank had nothing to prefill (it asked nothing).
        colours = reason_colours(r)
        cmap = ListedColormap(colours + [_pale(c) for c in colours])
        ta.imshow(image, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=2 * len(colours) - 1,
                  extent=(first - 0.5, first + width - 0.5, r.dp - 0.5, -0.5))
        xs = [first + k for row in prefilled for k, p in enumerate(row) if p]
        ys = [rank for rank, row in enumerate(prefilled) for p in row if p]
        ta.scatter(xs, ys, s=2.5, c="black", marker="o", linewidths=0)
        ta.set_title(label(group))
        ta.set_xlabel(f"pass (the last {width}; dot: prefilled)")
        if i == 0:
            ta.set_ylabel("rank")
        ta.yaxis.set_major_locator(MaxNLocator(integer=True))
    seen: dict[tuple[str, str], None] = {}
    for r in results:
        colours = reason_colours(r)
        for code in sorted({c % len(r.reasons) for row in r.decision_window(TIMELINE_PASSES)[0] for c in set(row)}):
            seen[(REASON_LABELS.get(r.reasons[code], r.reasons[code]), colours[code])] = None
    handles = [Patch(color=colour, label=text) for text, colour in seen]
    handles.append(Patch(color=_pale("#d62728"), label="pale: the rank had nothing to prefill"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5), frameon=False)
    return fig


def _shrink(path: str) -> None:
    """Re-save as a 64-colour palette PNG: the figure has few colours, and the file gets several times smaller."""
    from PIL import Image  # a dependency of matplotlib

    with Image.open(path) as img:
        small = img.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)
