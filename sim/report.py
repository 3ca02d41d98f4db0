"""Tables (Markdown, readable in a terminal too) and the JSON document of a comparison."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Generic, Iterable, Optional, Sequence, TypeVar

from ..spec.config import plain
from .config import SimConfig
from .result import RunResult, Summary


def _secs(x: Optional[float]) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:.0f} ms" if x < 1 else f"{x:.1f} s"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _tok(x: float) -> str:
    return f"{x / 1000:.1f}k" if x >= 1000 else f"{x:.0f}"


def _drawn(workload: Any, c: Any) -> str:
    """What a ``--drift random:K`` drew, rank by rank: the run is reproducible only if the user can see it."""
    drawn = getattr(workload, "drawn_drift", None)
    got = drawn(c.dp_size, c.seed) if drawn is not None else None
    return f" (drew {','.join(map(str, got))})" if got is not None else ""


def _ended_early(results: Sequence[RunResult]) -> str:
    """When the runs stopped with nothing left to arrive or serve (a trace that ran out), before ``--duration`` or
    with none: when each profile had served everything, which the measured seconds alone do not say. The
    window is the same for every profile (``engine.same_window``: one that finished first sits idle to the
    last one's end), so this is where a faster profile shows on a trace."""
    drained = [r for r in results if r.drained_s is not None]
    if not drained or any(r.capped for r in results):
        return ""
    duration = results[0].config.duration_s
    before = f", before --duration {plain(duration)}" if duration is not None and math.isfinite(duration) else ""
    if len(results) == 1:
        return f" (every request had arrived and been served by {drained[0].end_s:.1f} s{before})"
    when = ", ".join(f"{r.variant.label} {r.drained_s:.1f} s" for r in drained)
    return f" (every request had arrived and been served{before}: {when}; each profile measured to the last)"


def as_off_notes(runs: Iterable[tuple[str, Optional[str]]], config: SimConfig) -> list[str]:
    """A line for the policies (``(label, profile)``) whose settings here defer no prefill, so that they ran as off
    does: said, where their rows would read as the policy's own."""
    from .policy_site import as_off  # the runtime's policy core: not for the parser, which imports this module

    found: dict[str, list[str]] = {}
    for label, profile in runs:
        setting = as_off(profile, config.dp_size, config.policy_settings(), config.policy_params) if profile else None
        if setting is not None:
            found.setdefault(setting, []).append(label)
    return [f"As off: {', '.join(labels[:-1]) + ' and ' if len(labels) > 1 else ''}{labels[-1]} ran with {setting}, "
            f"at which {'they defer' if len(labels) > 1 else 'it defers'} no prefill and "
            f"run{'' if len(labels) > 1 else 's'} as off does (--set {setting.split()[0]}=N for another interval)" for setting, labels in found.items()]


def _measured(seconds: float) -> str:
    """The measured window's seconds: whole from one second on (780), a short one as it is (0.0015, which ``.0f``
    wrote as 0, an empty window's figure)."""
    return f"{seconds:.0f}" if seconds >= 1 else f"{seconds:.2g}"


def header(results: Sequence[RunResult]) -> str:
    r = results[0]
    c = r.config
    s = r.summary()
    knobs = [f"DP={c.dp_size}", f"max_running_requests={c.max_running_requests}/rank", f"KV {c.max_total_tokens} tokens/rank",
             f"chunk {c.chunked_prefill_size}", f"max_prefill_tokens {c.max_prefill_tokens}", f"max_delay_passes {c.max_delay_passes}"]
    if c.enable_mixed_chunk:
        knobs.append("mixed chunks")
    for name, value in (("watermark", c.token_usage_low_watermark), ("queue_min_ratio", c.queue_min_ratio),
                        ("max_delay_ms", c.max_delay_ms), ("prefill_max_requests", c.prefill_max_requests)):
        if value is not None:
            knobs.append(f"{name} {plain(value)}")
    if c.page_size != 1:
        knobs.append(f"page {c.page_size}")
    if c.scheduler != "model":
        knobs.append(f"scheduler {c.scheduler}")
    dpc = [c.load_balance_method]
    if c.health_check_interval_s is None:
        dpc.append("no health checks")
    else:
        dispatch = sorted({v.variant.health_dispatch for v in results})
        dpc.append(f"GET /health every {plain(c.health_check_interval_s)} s ({'/'.join(dispatch)} dispatch)")
    if c.resubmit_gap_s:
        dpc.append(f"resubmit gap {1000 * c.resubmit_gap_s:g} ms")
    lines = [
        "Engine: " + ", ".join(knobs),
        "DP controller: " + ", ".join(dpc),
        f"Workload: {r.workload.describe()}{_drawn(r.workload, c)} (seed {c.seed})",
        f"Cost: {c.cost.describe()}",
        f"Measured: {_measured(s.sim_seconds)} simulated s per profile after a {c.warmup_s:g} s warm-up{_ended_early(results)}",
        *as_off_notes(((r.variant.label, r.variant.profile) for r in results), c),
    ]
    return "\n".join(lines)


T = TypeVar("T")


@dataclass(frozen=True)
class Column(Generic[T]):
    """One column of a table: its heading, a one-line meaning (the legend's), and how a row's cell is written.
    ``compact``: the column is in the default table; every column is in ``--wide``'s."""

    heading: str
    meaning: str
    cell: Callable[[T], str]
    compact: bool = True
    align: str = "---:"  # the Markdown alignment cell: numbers right, names left


def markdown(columns: Sequence[Column[T]], rows: Iterable[T]) -> str:
    """A Markdown table of ``rows``, one cell per column."""
    def line(cells: Iterable[str]) -> str:
        return "|" + "|".join(f" {x} " if x else " " for x in cells) + "|"

    body = [line(c.cell(row) for c in columns) for row in rows]
    return "\n".join([line(c.heading for c in columns), "|" + "|".join(c.align for c in columns) + "|", *body])


def legend(columns: Sequence[Column[Any]]) -> str:
    """One line per heading: what it means (a heading that repeats, with the same meaning, is said once)."""
    meanings = dict.fromkeys((c.heading, c.meaning) for c in columns)
    headings = [h for h, _ in meanings]
    if len(set(headings)) != len(headings):
        raise ValueError(f"one heading, two meanings: {sorted(h for h in headings if headings.count(h) > 1)}")
    return "\n".join(f"- {h}: {m}" for h, m in meanings)


def _unserved(s: Summary) -> str:
    return f"{s.unserved} ({_secs(s.unserved_oldest_s)})" if s.unserved else "0"


# The comparison table's columns, in order: the default table shows the compact ones, --wide all of them.
COLUMNS: tuple[Column[RunResult], ...] = (
    Column("profile", "the policy profile simulated, +TRACKER and +health-DISPATCH where an option overrides its release's own",
           lambda r: r.variant.label, align="---"),
    Column("max_prefill_bs tracker", "how max_prefill_bs is tracked: lifetime high-watermark, decayed per pass, or a "
           "window of recent batches; none for off, which has no delayer to read it", lambda r: r.variant.tracker, compact=False, align="---"),
    Column("passes", "scheduler passes in the measured window (every profile covers the same simulated time)",
           lambda r: str(r.summary().passes), compact=False),
    Column("input tok/s", "prompt tokens prefilled per simulated second, all ranks, over the measured window "
           "(after --warmup)", lambda r: _tok(r.summary().input_tok_s)),
    Column("output tok/s", "tokens decoded per simulated second, all ranks", lambda r: _tok(r.summary().output_tok_s),
           compact=False),
    Column("TTFT p50", "median time to first token of the window's requests that got one",
           lambda r: _secs(r.summary().ttft_p50_s)),
    Column("TTFT p99", "99th percentile of the same", lambda r: _secs(r.summary().ttft_p99_s)),
    Column("unserved at end (oldest wait)", "the window's requests still without a first token at the end (not in "
           "the TTFTs), and the longest wait among them", lambda r: _unserved(r.summary())),
    Column("running/rank mean (p5-p95)", "running requests per rank: time-weighted mean (5th-95th percentile over "
           "rank-passes)", lambda r: f"{r.summary().running_per_rank:.1f} ({r.summary().running_p5}-{r.summary().running_p95})",
           compact=False),
    Column("queue/rank", "waiting requests per rank, time-weighted mean", lambda r: f"{r.summary().queue_per_rank:.1f}",
           compact=False),
    Column("token usage", "KV cache token usage, time-weighted mean (0-1)", lambda r: f"{r.summary().token_usage:.2f}",
           compact=False),
    Column("prefill/idle split passes", "share of passes where some ranks prefill while others do not",
           lambda r: _pct(r.summary().split_share), compact=False),
    Column("mixed passes", "share of passes whose gathered status is mixed (some ranks could prefill, others not)",
           lambda r: _pct(r.summary().mixed_share)),
    Column("admissions vetoed", "of the negotiations of a rank that wanted to admit a new request, the share answered "
           "delay", lambda r: _pct(r.summary().veto_share), compact=False),
    Column("delay runs: n, mean, max", "every rank's runs of consecutive delay verdicts: how many, their mean and "
           "longest length in passes",
           lambda r: f"{r.summary().delay_runs}, {r.summary().delay_run_mean:.1f}, {r.summary().delay_run_max}", compact=False),
)


def columns(wide: bool = False) -> tuple[Column[RunResult], ...]:
    """The comparison table's columns: the compact ones, or with ``wide`` every one."""
    return COLUMNS if wide else tuple(c for c in COLUMNS if c.compact)


def table(results: Sequence[RunResult], wide: bool = False) -> str:
    """One row per profile: throughput, TTFT, unserved requests and mixed passes; ``wide`` adds running, queue,
    token usage, the split passes, vetoes and delay runs."""
    return markdown(columns(wide), results)


def decisions_table(results: Sequence[RunResult], min_share: float = 0.0005) -> str:
    """Share of rank-passes by gathered status / reason (``-``: no reason, the none branch)."""
    names: dict[str, float] = {}
    for r in results:
        for k, v in r.summary().decisions.items():
            names[k] = names.get(k, 0.0) + v
    cols = [k for k, v in sorted(names.items(), key=lambda kv: -kv[1]) if v >= min_share]
    rows = ["| profile | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for r in results:
        d = r.summary().decisions
        rows.append(f"| {r.variant.label} | " + " | ".join(_pct(d.get(k, 0.0)) if d.get(k) else "-" for k in cols) + " |")
    return "\n".join(rows)


def report(results: Sequence[RunResult], wide: bool = False) -> str:
    """The header, the comparison table and its legend, then the decisions by reason."""
    shown = columns(wide)
    more = "" if wide else f" (--wide shows all {len(COLUMNS)})"
    return "\n\n".join([header(results), table(results, wide), f"Columns{more}:\n" + legend(shown),
                        "Decisions by status/reason (share of rank-passes; -: no reason, the none branch):", decisions_table(results)])


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def to_json(results: Sequence[RunResult], scenario: Optional[str] = None) -> str:
    r0 = results[0]
    config = asdict(r0.config)
    doc = {
        "scenario": scenario,
        "settings": config,
        "workload": r0.workload.describe(),
        "cost": r0.config.cost.describe(),
        "results": [
            {
                "name": r.variant.name,
                "label": r.variant.label,
                "profile": r.variant.profile,
                "tracker": r.variant.tracker,
                "tracker_chosen_by": r.variant.tracker_source,
                "summary": r.summary().as_dict(),
                "served_all_s": r.drained_s,  # when nothing was left to arrive or serve (a trace run out), else null
            }
            for r in results
        ],
    }
    return json.dumps(_clean(doc), indent=2)
