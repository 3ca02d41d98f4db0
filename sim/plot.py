"""The figure: input throughput over time for every profile, then per profile the ranks' prefill
progress (drift from the ranks' mean, in chunks) and the decision timeline of the run's last
passes (rank x pass, coloured by the delayer's reason, a dot where the rank prefilled).

Profiles whose runs draw the same in every panel (SGLang releases that share a delayer, a hardened
profile where nothing it hardens happens) are drawn once, labelled ``a = b`` alike in the series'
legend and over their panels: one would hide under the other. A reason has one colour in the whole
figure, and no two reasons the same. The legends sit outside the panels; long titles and legend
entries are wrapped to fit their panel, or the figure.

matplotlib is imported here only, with the non-interactive Agg backend; it is
the optional ``plot`` extra (part of ``all``): the simulation needs nothing of it.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any, Callable, Hashable, Iterator, Sequence, TypeVar

from ..files import write_failed
from .errors import SimInputError
from .result import NO_REASON, OFF_REASON, RunResult

# The simulator's own reasons; a policy's come from its ``SimBinding.colours``, else from PALETTE, then MORE, in order.
OWN_COLOURS = {NO_REASON: "#d9d9d9", OFF_REASON: "#8c8c8c"}  # none: nobody could prefill; off: no policy
PALETTE = ("#2ca02c", "#1f77b4", "#d62728", "#ff7f0e", "#9467bd", "#17becf", "#bcbd22", "#e377c2")
# Past PALETTE: saturated, so none reads as another's pale (nothing to prefill) shade, and none black (the dots).
MORE = ("#8c564b", "#393b79", "#637939", "#7b4173", "#8c6d31", "#ffd92f")
REASON_LABELS = {NO_REASON: "none (nothing to prefill)", OFF_REASON: "no policy"}
T = TypeVar("T")


def assign_colours(names: Sequence[str], wanted: Callable[[str], Sequence[str]]) -> dict[str, str]:
    """A colour per name of ``names``, no two alike: each name takes the first colour it ``wanted`` that no name
    before it took, in the order of ``names``; a name left without one then takes the first colour of PALETTE and
    MORE that none took, and past them one made up (hues a golden angle apart)."""
    given: dict[str, str] = {}
    for name in dict.fromkeys(names):
        taken = set(given.values())
        colour = next((c.lower() for c in wanted(name) if c.lower() not in taken), None)
        if colour is not None:
            given[name] = colour
    spare = (c for c in _spare() if c not in given.values())
    return {name: given.get(name) or next(spare) for name in dict.fromkeys(names)}


def _spare() -> Iterator[str]:
    """PALETTE and MORE, then colours made up: endless and no two alike (so a name always finds one)."""
    import colorsys

    def made_up(k: int) -> str:
        rgb = colorsys.hsv_to_rgb((k * 0.381966) % 1.0, 0.8 - 0.25 * (k // 7 % 2), 0.75 - 0.2 * (k // 14 % 2))
        return "#" + "".join(f"{round(255 * x):02x}" for x in rgb)

    made = set(OWN_COLOURS.values())
    for colour in itertools.chain(PALETTE, MORE, map(made_up, itertools.count())):
        if colour not in made:
            made.add(colour)
            yield colour


def shown_reasons(results: Sequence[RunResult]) -> list[str]:
    """The reasons the timelines of ``results`` show, each once: in the order of the runs, then of their codes."""
    shown: dict[str, None] = {}
    for r in results:
        image = r.decision_window(TIMELINE_PASSES)[0]
        for code in sorted({c % len(r.reasons) for row in image for c in set(row)}):
            shown[r.reasons[code]] = None
    return list(shown)


def reason_colours(results: Sequence[RunResult]) -> dict[str, str]:
    """A colour per reason name of ``results``, the same in every panel of a figure and no two names alike, so the
    legend tells every reason apart. The simulator's own keep OWN_COLOURS; a policy's reason takes the colour its
    binding gives it unless a reason before it took that colour (see ``assign_colours``): the reasons the timelines
    show come first, the reason more of the runs' bindings name before one fewer name (``no_wait`` keeps its green
    beside ``no_interval``), then in the order of the runs and of their reason codes."""
    from matplotlib.colors import to_hex

    wanted: dict[str, list[str]] = {}
    for r in results:
        for name, colour in (r.binding.colours.items() if r.binding is not None else ()):
            wanted.setdefault(name, []).append(to_hex(colour))
    for name, colour in OWN_COLOURS.items():
        wanted[name] = [colour]
    shown = shown_reasons(results)
    order = {name: k for k, name in enumerate(shown)}
    first = assign_colours([*OWN_COLOURS, *sorted(shown, key=lambda x: (-len(wanted.get(x, ())), order[x]))],
                           lambda name: wanted.get(name, ()))
    # The reasons no timeline shows (only their panels' colour maps hold them) after, each still its own colour.
    return assign_colours([*first, *(x for r in results for x in r.reasons)],
                          lambda name: [first[name]] if name in first else wanted.get(name, ()))


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


def same(results: Sequence[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """``results`` grouped where ``key`` (what a panel draws of a run) is equal, in order of first appearance:
    identical runs would draw one line over another, so they are drawn once, labelled ``a = b``."""
    groups: dict[Hashable, list[T]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r)
    return list(groups.values())


def label(group: Sequence[RunResult]) -> str:
    return " = ".join(r.variant.label for r in group)


def _frozen(value: Any) -> Hashable:
    """A nested list/tuple of numbers as nested tuples, to compare and group by."""
    return tuple(_frozen(v) for v in value) if isinstance(value, (list, tuple)) else value


def _drawn(r: RunResult) -> Hashable:
    """All the figure draws of a run: its curves, its prefill progress and its timeline. Runs alike in all of it are
    one group, drawn once and labelled ``a = b`` alike in the series' legend and over the group's panels."""
    return _frozen((r.throughput_series(), r.running_series(), r.progress_spread(), r.decision_window(TIMELINE_PASSES),
                    r.reasons))


def _wrap(text: str, fits: Callable[[str], bool], breaks: str = r"(?<= =) ") -> str:
    """``text`` on as few lines as ``fits``, broken where ``breaks`` matches (by default after a `` =`` of names joined
    by `` = ``), and a part that does not fit on a line alone after its spaces and hyphens."""
    lines: list[str] = []
    for word in re.split(breaks, text):
        if lines and fits(f"{lines[-1]} {word}"):
            lines[-1] += " " + word
            continue
        line = ""
        for piece in re.split(r"(?<=[^\s-][\s-])(?=[^\s-])", word):
            if line and not fits((line + piece).rstrip()):
                lines.append(line.rstrip())
                line = ""
            line += piece
        lines.append(line)
    return "\n".join(lines)


def _fit_titles(fig: Any, axes: Sequence[Any], suptitle: Any = None) -> None:
    """Wrap each of ``axes``' titles (see ``_wrap``) so that no line is wider than its panel, and the figure's title
    ``suptitle`` (the options, broken before a ``--``) so that none is wider than the figure; measured as drawn once
    the layout has placed the panels."""
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    pad = 0.2 * fig.dpi  # the layout's margins at the figure's edges, and some
    texts = [(ax.title, ax.get_window_extent(renderer).width, r"(?<= =) ") for ax in axes]
    if suptitle is not None:
        texts.append((suptitle, fig.bbox.width - pad, r" (?=--)"))
    for text, width, breaks in texts:

        def fits(line: str, text: Any = text, width: float = width) -> bool:
            text.set_text(line)
            return bool(text.get_window_extent(renderer).width <= width)

        text.set_text(_wrap(text.get_text(), fits, breaks))


HANDLE_LENGTH = 3.5  # the series' legend's lines, in font sizes: long enough to show each one's dashes


def _series_labels(fig: Any, labels: Sequence[str], ncol: int, width: float) -> list[str]:
    """``labels`` as the series' legend of ``ncol`` columns shows them: each wrapped (see ``_wrap``) to the widest
    that still puts the legend's columns side by side within ``width`` pixels, as wide as they are where they fit."""
    plt = _pyplot()
    from matplotlib.font_manager import FontProperties

    rc = plt.rcParams
    size = FontProperties(size=rc["legend.fontsize"]).get_size_in_points()
    em = size * fig.dpi / 72
    beside = em * (HANDLE_LENGTH + rc["legend.handletextpad"])  # before each label: its line and the pad to it
    probe = fig.text(0, 0, "", fontsize=size)
    renderer = fig.canvas.get_renderer()

    def px(text: str) -> float:
        probe.set_text(text)
        return float(probe.get_window_extent(renderer).width)

    widths = [px(x) for x in labels]
    # The legend's columns as matplotlib fills them: consecutive runs, the first ones one longer where not even.
    rows, longer = divmod(len(labels), ncol)
    starts = [k * rows + min(k, longer) for k in range(ncol + 1)]
    columns = [widths[a:b] for a, b in zip(starts, starts[1:]) if b > a]

    # Within the legend's pads, its columns and the space between them.
    room = width - em * (2 * rc["legend.borderpad"] + rc["legend.columnspacing"] * (len(columns) - 1))

    def total(cap: float) -> float:
        return sum(min(max(col), cap) + beside for col in columns)

    cap = max(widths, default=0.0)
    if total(cap) > room:
        low, high = 0.0, cap
        for _ in range(40):  # the widest cap that fits, by halving
            mid = (low + high) / 2
            low, high = (mid, high) if total(mid) <= room else (low, mid)
        cap = low
    wrapped = [x if w <= cap else _wrap(x, lambda t: px(t) <= cap) for x, w in zip(labels, widths)]
    probe.remove()
    return wrapped


def plot(results: Sequence[RunResult], path: str, title: str = "", dpi: int = 72, name: str = "") -> None:
    """Save the figure of ``results`` as a PNG at ``path``, its text sized by ``FONTS`` (``name``: as ``save_png``'s)."""
    plt = _pyplot()
    with plt.rc_context(FONTS):
        fig = figure(results, title, dpi)
        save_png(fig, path, name, dpi=dpi)


def save_png(fig: Any, path: str, name: str = "", colors: int = 64, **savefig: Any) -> None:
    """``fig`` written to ``path`` as a palette PNG of ``colors`` colours (``_shrink``), and closed: every figure of
    ``simulate`` (a run's, a suite's, a sweep's, the document's). ``path`` is usually the staged temporary of
    ``files.Outputs``; ``name`` is ``--plot``'s file as the user gave it (else ``path``), which a failed write (a full
    disk) names, worded as every output's (``files.write_failed``): ``--plot FILE: cannot write it: No space left on
    device``."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png", **savefig)
        _shrink(path, colors=colors)
    except OSError as exc:
        raise SimInputError(str(write_failed(f"--plot {name or path}", exc))) from None
    finally:
        _pyplot().close(fig)


def figure(results: Sequence[RunResult], title: str = "", dpi: int = 72) -> Any:
    """The figure (see the module docstring); every legend outside the panels, so none covers data."""
    plt = _pyplot()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    groups = same(results, _drawn)  # the series' legend and the panels alike: one grouping
    colours = reason_colours(results)
    n = len(groups)
    inches = max(11.0, 4.2 * n)
    fig = plt.figure(figsize=(inches, 10.5), dpi=dpi, layout="constrained")
    ncol = min(len(groups), max(4, int(inches / 3.0)))  # a legend entry takes about 3 inches
    names = _series_labels(fig, [label(group) for group in groups], ncol, fig.bbox.width - 0.2 * dpi)
    rows = -(-len(groups) // ncol) * max(x.count("\n") + 1 for x in names)  # the legend's lines of text, at most
    # The first row holds the series' legend alone: above the panels, it covers none of their data.
    grid = fig.add_gridspec(4, n, height_ratios=[0.1 * rows, 1.2, 1.0, 0.9])
    keys = fig.add_subplot(grid[0, :])
    keys.axis("off")
    ax, ax_run = (fig.add_subplot(g) for g in grid[1, :].subgridspec(1, 2))
    warm = results[0].config.warmup_s
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, group in enumerate(groups):
        r = group[0]
        style = dict(color=palette[i % len(palette)], ls=LINE_STYLES[i % len(LINE_STYLES)], marker=MARKERS[i % len(MARKERS)],
                     markevery=(i % MARK_EVERY, MARK_EVERY), ms=6, lw=1.8, label=names[i])
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
    keys.legend(handles=ax.get_legend_handles_labels()[0], loc="center", ncol=ncol, frameon=False,
                handlelength=HANDLE_LENGTH)
    suptitle = fig.suptitle(title) if title else None
    titled = []
    for i, group in enumerate(groups):
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
        own = [colours[x] for x in r.reasons]
        cmap = ListedColormap(own + [_pale(c) for c in own])
        ta.imshow(image, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=2 * len(own) - 1,
                  extent=(first - 0.5, first + width - 0.5, r.dp - 0.5, -0.5))
        xs = [first + k for row in prefilled for k, p in enumerate(row) if p]
        ys = [rank for rank, row in enumerate(prefilled) for p in row if p]
        ta.scatter(xs, ys, s=2.5, c="black", marker="o", linewidths=0)
        ta.set_title(label(group))
        ta.set_xlabel(f"pass (the last {width}; dot: prefilled)")
        if i == 0:
            ta.set_ylabel("rank")
        ta.yaxis.set_major_locator(MaxNLocator(integer=True))
        titled += [pa, ta]
    # The reasons the timelines show, each once: its colour is the same in every panel.
    handles = [Patch(color=colours[x], label=REASON_LABELS.get(x, x)) for x in shown_reasons(results)]
    handles.append(Patch(color=_pale("#d62728"), label="pale: the rank had nothing to prefill"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5), frameon=False)
    _fit_titles(fig, titled, suptitle)
    return fig


def _shrink(path: str, colors: int = 64) -> None:
    """Re-save as a palette PNG of ``colors`` colours: the figure has few colours, and the file gets several times
    smaller. A figure that colours by value (a heatmap) must draw with fewer colours than that, each kept exact."""
    from PIL import Image  # a dependency of matplotlib

    with Image.open(path) as img:
        small = img.convert("RGB").quantize(colors=colors, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)
