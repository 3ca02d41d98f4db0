"""The figure: input throughput over time for every profile, then per profile the ranks' prefill
progress (drift from the ranks' mean, in chunks) and the decision timeline of the run's last
passes (rank x pass, coloured by the delayer's reason, a dot where the rank prefilled).

matplotlib is imported here only, with the non-interactive Agg backend; it is
the optional ``plot`` extra (part of ``all``): the simulation needs nothing of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

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


def plot(results: Sequence[RunResult], path: str, title: str = "", dpi: int = 72) -> None:
    plt = _pyplot()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    n = len(results)
    fig = plt.figure(figsize=(max(8.0, 3.6 * n), 8.0), dpi=dpi)
    grid = fig.add_gridspec(3, max(n, 2), height_ratios=[1.1, 1.0, 0.9], hspace=0.55, wspace=0.3)
    half = max(n, 2) // 2
    ax = fig.add_subplot(grid[0, :half])
    ax_run = fig.add_subplot(grid[0, half:])
    warm = results[0].config.warmup_s
    for r in results:
        t, tps = r.throughput_series()
        ax.plot(t, [x / 1000 for x in tps], label=r.variant.label, lw=1.2)
        t, running = r.running_series()
        ax_run.plot(t, running, label=r.variant.label, lw=1.2)
    for a, ylabel, what in ((ax, "input k tok/s", "input throughput"), (ax_run, "running requests / rank", "running requests per rank")):
        a.set_ylabel(ylabel, fontsize=8)
        a.set_xlabel("simulated s", fontsize=8)
        a.tick_params(labelsize=7)
        if warm > 0:
            a.axvspan(0, warm, color="#eeeeee", lw=0)
        a.set_title(what, fontsize=9)
        a.set_ylim(bottom=0)
    ax.legend(loc="lower right", fontsize=7, ncol=min(n, 3))
    if title:
        fig.suptitle(title, fontsize=10)
    for i, r in enumerate(results):
        pa = fig.add_subplot(grid[1, i] if n > 1 else grid[1, :])
        times, lines = r.progress_spread()
        for rank, line in enumerate(lines):
            pa.plot(times, line, lw=0.6)
        pa.set_title(f"{r.variant.label}: prefill progress - mean", fontsize=8)
        pa.set_ylabel("chunks" if i == 0 else "")
        pa.tick_params(labelsize=7)
        ta = fig.add_subplot(grid[2, i] if n > 1 else grid[2, :])
        image, prefilled, first = r.decision_window(TIMELINE_PASSES)
        width = len(image[0]) if image and image[0] else 1
        # Reason colours; the same paler where the rank had nothing to prefill (it asked nothing).
        colours = reason_colours(r)
        cmap = ListedColormap(colours + [_pale(c) for c in colours])
        ta.imshow(image, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=2 * len(colours) - 1,
                  extent=(first - 0.5, first + width - 0.5, r.dp - 0.5, -0.5))
        xs = [first + k for row in prefilled for k, p in enumerate(row) if p]
        ys = [rank for rank, row in enumerate(prefilled) for p in row if p]
        ta.scatter(xs, ys, s=1.2, c="black", marker="o", linewidths=0)
        ta.set_title(f"{r.variant.label}: last {width} passes (dot: prefilled)", fontsize=8)
        ta.set_xlabel("pass", fontsize=7)
        ta.set_ylabel("rank" if i == 0 else "")
        ta.tick_params(labelsize=7)
    seen: dict[tuple[str, str], None] = {}
    for r in results:
        colours = reason_colours(r)
        for code in sorted({c % len(r.reasons) for row in r.decision_window(TIMELINE_PASSES)[0] for c in set(row)}):
            seen[(REASON_LABELS.get(r.reasons[code], r.reasons[code]), colours[code])] = None
    handles = [Patch(color=colour, label=label) for label, colour in seen]
    handles.append(Patch(color=_pale("#d62728"), label="pale: the rank had nothing to prefill"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7, frameon=False)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=dpi)
        _shrink(path)
    except OSError as exc:
        raise SimInputError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)


def _shrink(path: str) -> None:
    """Re-save as a 64-colour palette PNG: the figure has few colours, and the file gets several times smaller."""
    from PIL import Image  # a dependency of matplotlib

    with Image.open(path) as img:
        small = img.convert("RGB").quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)
