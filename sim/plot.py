"""The figure: input throughput over time for every profile, then per profile the ranks' prefill
progress (drift from the ranks' mean, in chunks) and the decision timeline (rank x time).

matplotlib is imported here only, with the non-interactive Agg backend; it is
the optional ``plot`` extra (part of ``all``): the simulation needs nothing of it.
"""

from __future__ import annotations

from typing import Sequence

from .errors import SimInputError
from .result import REASONS, RunResult

# One colour per reason, in REASONS order.
REASON_COLOURS = {
    "": "#d9d9d9",  # none: nobody could prefill
    "no_wait": "#2ca02c",
    "wait_success": "#1f77b4",
    "delay": "#d62728",
    "wait_timeout": "#ff7f0e",
    "token_watermark": "#9467bd",
    "off": "#8c8c8c",
}
REASON_LABELS = {"": "none (nothing to prefill)", "off": "no delayer"}


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
    fig = plt.figure(figsize=(max(7.0, 3.6 * n), 7.6), dpi=dpi)
    grid = fig.add_gridspec(3, n, height_ratios=[1.1, 1.0, 0.9], hspace=0.55, wspace=0.3)
    ax = fig.add_subplot(grid[0, :])
    for r in results:
        t, tps = r.throughput_series()
        ax.plot(t, [x / 1000 for x in tps], label=r.variant.label, lw=1.2)
    ax.set_ylabel("input k tok/s")
    ax.set_xlabel("simulated s")
    warm = results[0].config.warmup_s
    if warm > 0:
        ax.axvspan(0, warm, color="#eeeeee", lw=0)
    ax.legend(loc="lower right", fontsize=7, ncol=min(n, 6))
    ax.set_title(title or "Input throughput over time", fontsize=10)
    cmap = ListedColormap([REASON_COLOURS[x] for x in REASONS])
    for i, r in enumerate(results):
        pa = fig.add_subplot(grid[1, i])
        times, lines = r.progress_spread()
        for rank, line in enumerate(lines):
            pa.plot(times, line, lw=0.8)
        pa.set_title(f"{r.variant.label}: prefill progress - mean", fontsize=8)
        pa.set_ylabel("chunks" if i == 0 else "")
        pa.tick_params(labelsize=7)
        ta = fig.add_subplot(grid[2, i])
        image, end = r.decision_image()
        ta.imshow(image, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=len(REASONS) - 1,
                  extent=(0, end, r.dp - 0.5, -0.5))
        ta.set_title(f"{r.variant.label}: decisions", fontsize=8)
        ta.set_xlabel("simulated s", fontsize=7)
        ta.set_ylabel("rank" if i == 0 else "")
        ta.tick_params(labelsize=7)
    present = sorted({c & 7 for r in results for c in set(r.decision)})
    handles = [Patch(color=REASON_COLOURS[REASONS[c]], label=REASON_LABELS.get(REASONS[c], REASONS[c])) for c in present]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7, frameon=False)
    try:
        fig.savefig(path, dpi=dpi)
    except OSError as exc:
        raise SimInputError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)
