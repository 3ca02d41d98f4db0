"""Tables (Markdown, readable in a terminal too) and the JSON document of a comparison."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any, Optional, Sequence

from .result import RunResult


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
            knobs.append(f"{name} {value:g}")
    if c.page_size != 1:
        knobs.append(f"page {c.page_size}")
    if c.scheduler != "model":
        knobs.append(f"scheduler {c.scheduler}")
    dpc = [c.load_balance_method]
    if c.health_check_interval_s is None:
        dpc.append("no health checks")
    else:
        dispatch = sorted({v.variant.health_dispatch for v in results})
        dpc.append(f"GET /health every {c.health_check_interval_s:g} s ({'/'.join(dispatch)} dispatch)")
    if c.resubmit_gap_s:
        dpc.append(f"resubmit gap {1000 * c.resubmit_gap_s:g} ms")
    lines = [
        "Engine: " + ", ".join(knobs),
        "DP controller: " + ", ".join(dpc),
        f"Workload: {r.workload.describe()}{_drawn(r.workload, c)} (seed {c.seed})",
        f"Cost: {c.cost.describe()}",
        f"Measured: {s.sim_seconds:.0f} simulated s per profile after a {c.warmup_s:g} s warm-up",
    ]
    return "\n".join(lines)


def table(results: Sequence[RunResult]) -> str:
    """One row per profile: throughput, TTFT, running, the split and mixed passes, vetoes, delay runs."""
    rows = [
        "| profile | max_prefill_bs tracker | passes | input tok/s | output tok/s | TTFT p50 | TTFT p99 | unserved at end (oldest wait) | running/rank mean (p5-p95) | queue/rank | token usage | prefill/idle split passes | mixed passes | admissions vetoed | delay runs: n, mean, max |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        s = r.summary()
        unserved = f"{s.unserved} ({_secs(s.unserved_oldest_s)})" if s.unserved else "0"
        rows.append(
            f"| {r.variant.label} | {r.variant.tracker} | {s.passes} | {_tok(s.input_tok_s)} | {_tok(s.output_tok_s)} | {_secs(s.ttft_p50_s)} | {_secs(s.ttft_p99_s)} | {unserved} "
            f"| {s.running_per_rank:.1f} ({s.running_p5}-{s.running_p95}) | {s.queue_per_rank:.1f} | {s.token_usage:.2f} "
            f"| {_pct(s.split_share)} | {_pct(s.mixed_share)} | {_pct(s.veto_share)} "
            f"| {s.delay_runs}, {s.delay_run_mean:.1f}, {s.delay_run_max} |"
        )
    return "\n".join(rows)


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


def report(results: Sequence[RunResult]) -> str:
    return "\n\n".join([header(results), table(results), "Decisions by status/reason (share of rank-passes):", decisions_table(results)])


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
            }
            for r in results
        ],
    }
    return json.dumps(_clean(doc), indent=2)
