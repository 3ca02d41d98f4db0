"""The model checked against SGLang's own scheduler code: both backends on the same workloads, pass by pass.

``WORKLOADS`` are the cases ``tests/test_sim_differential.py`` runs in the
environment where SGLang 0.5.23's scheduler imports (CI's ``.ci/sglang-scheduler``
step): both calibration scenarios, Poisson under and over saturation, bursty
arrivals, prompts longer than the chunk close to the KV capacity (with 64-token
pages), the model fixes' own cases (health checks on the shared rotation with
``total_requests`` dispatch, mixed chunks, the seed's starvation), ``aligned``
over saturation, where its busy rule decides, with its opt-in quorum, with its
opt-in chunk hold and with both, and no delayer. ``compare``
runs one on both backends and says where their per-pass records first differ
(which ranks negotiated, with which inputs and verdicts, what each admitted and
prefilled, what finished) and how far apart the summary metrics are;
``python -m prefill_delayer.sim.differential`` prints the table.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from .config import SimConfig, Variant
from .cost import SGLANG_32880
from .engine import run_variant
from .errors import counted
from .trackers import WINDOW, own_tracker
from .result import PassTrace, RunResult
from .workload import Burst, Bursty, Lengths, LongPrompt, Mix, Poisson, Workload

METRICS = ("input_tok_s", "ttft_p50_s", "ttft_p99_s", "mixed_share", "output_tok_s", "running_per_rank", "token_usage")
SUMMARY = ("input_tok_s", "ttft_p50_s", "ttft_p99_s", "mixed_share")  # the goal: within 2% on every workload
TOLERANCE = 0.02


@dataclass(frozen=True)
class Case:
    config: SimConfig
    workload: Workload
    profile: str
    why: str

    def variant(self) -> Variant:
        # SGLang 0.5.23's scheduler tracks max_prefill_bs with its window, and a policy that keeps its own tracker
        # negotiates with that one instead: the model runs the same.
        return Variant.of(self.profile, tracker=own_tracker(self.profile) or WINDOW)


_SMALL: dict[str, Any] = dict(dp_size=4, max_running_requests=32, max_total_tokens=200_000, chunked_prefill_size=4096, max_prefill_tokens=8192,
                              passes=500, trace=True)

WORKLOADS: dict[str, Case] = {
    "35241": Case(
        SimConfig(dp_size=8, max_running_requests=64, max_total_tokens=1_000_000, chunked_prefill_size=8192, max_prefill_tokens=16384,
                  passes=500, health_check_interval_s=2.0, resubmit_gap_s=0.06, trace=True),
        LongPrompt(concurrency=16, prompt=Lengths(60000, 60000), output=Lengths(1, 1)), "sglang-0.5.22",
        "calibration #35241: DP=8, C16 60k-token prompts, 1 output token, health checks on the user rotation"),
    "32880": Case(
        SimConfig(dp_size=16, max_running_requests=128, max_total_tokens=1_300_000, chunked_prefill_size=8192, max_prefill_tokens=16384,
                  passes=300, cost=SGLANG_32880, trace=True),
        Mix((Burst(count=16 * 80, prompt=Lengths(64, 64), output=Lengths(200, 600)),
             Poisson(rate=5.0, prompt=Lengths(2000, 6000), output=Lengths(500, 1500)))), "seed",
        "calibration #32880: DP=16, a refill wave of 80 per rank, then Poisson 5 req/s"),
    "poisson-under": Case(SimConfig(**_SMALL), Poisson(rate=2.0, prompt=Lengths(500, 4000), output=Lengths(20, 200)), "sglang-0.5.22",
                          "Poisson under saturation"),
    "poisson-over": Case(SimConfig(**_SMALL), Poisson(rate=12.0, prompt=Lengths(500, 4000), output=Lengths(20, 200)), "hardened",
                         "Poisson over saturation"),
    "bursty": Case(SimConfig(**_SMALL), Bursty(rate=4.0, burst=12, prompt=Lengths(200, 3000), output=Lengths(10, 150)), "sglang-0.5.22",
                   "bursts of 12"),
    "long-kv": Case(
        SimConfig(**{**_SMALL, "max_running_requests": 16, "max_total_tokens": 60_000, "page_size": 64}),
        Poisson(rate=3.0, prompt=Lengths(8000, 30000), output=Lengths(50, 400)), "sglang-0.5.22",
        "prompts of 2-7 chunks close to the KV capacity, 64-token pages"),
    "health-total-requests": Case(
        SimConfig(**{**_SMALL, "load_balance_method": "total_requests", "health_check_interval_s": 1.0}),
        Poisson(rate=8.0, prompt=Lengths(500, 4000), output=Lengths(20, 200)), "sglang-0.5.22",
        "total_requests dispatch from the load snapshots, health checks on its budget"),
    "mixed-chunk": Case(SimConfig(**{**_SMALL, "enable_mixed_chunk": True}),
                        Poisson(rate=10.0, prompt=Lengths(500, 4000), output=Lengths(20, 200)), "sglang-0.5.22",
                        "--mixed-chunk"),
    "aligned": Case(SimConfig(**_SMALL), Poisson(rate=12.0, prompt=Lengths(500, 4000), output=Lengths(20, 200)), "aligned",
                    "aligned over saturation: the max_prefill_bs its delayer keeps (decay) against the model's decay "
                    "tracker, and the chunk it reads"),
    "aligned-busy": Case(SimConfig(**_SMALL),
                         Mix((Poisson(rate=8.0, prompt=Lengths(200, 1000), output=Lengths(50, 300)),
                              Poisson(rate=0.4, prompt=Lengths(16000, 48000), output=Lengths(50, 300)))), "aligned",
                         "aligned on long prompts among short ones: a rank at half its KV pool holds another's "
                         "low-load force (the busy rule)"),
    "aligned-quorum": Case(SimConfig(**{**_SMALL, "policy_params": (("quorum_percent", 75),)}),
                           Poisson(rate=12.0, prompt=Lengths(500, 4000), output=Lengths(100, 400)), "aligned",
                           "aligned with quorum_percent 75 near saturation: a mixed pass 3 of 4 ranks have work for "
                           "allows, a rank queuing behind a full batch has work (the queue it reads)"),
    "aligned-chunk-hold": Case(SimConfig(**{**_SMALL, "max_running_requests": 16,
                                            "policy_params": (("chunk_hold_tokens", 2048),)}),
                               Poisson(rate=6.0, prompt=Lengths(500, 16000), output=Lengths(20, 200)), "aligned",
                               "aligned with chunk_hold_tokens 2048 on prompts of up to 4 chunks, 16 running slots: a "
                               "refused chunk with more than 2,048 tokens left, every rank with work, is parked at "
                               "add_chunked_req (the plugin's AROUND hook); beside a rank with none it goes on"),
    "aligned-both": Case(SimConfig(**{**_SMALL, "max_running_requests": 16,
                                      "policy_params": (("chunk_hold_tokens", 2048), ("quorum_percent", 75))}),
                         Poisson(rate=6.0, prompt=Lengths(500, 16000), output=Lengths(20, 200)), "aligned",
                         "aligned with both opt-ins, the chunk hold's case with quorum_percent 75: the quorum allows "
                         "mixed passes and refused chunks are parked in one run (both plugin hooks at once)"),
    "off": Case(SimConfig(**_SMALL), Poisson(rate=6.0, prompt=Lengths(500, 4000), output=Lengths(20, 200)), "off",
                "no delayer"),
}


@dataclass(frozen=True)
class Comparison:
    name: str
    model: RunResult
    sglang: RunResult
    first_difference: Optional[int]  # the first pass whose records differ, None if none does
    seconds: tuple[float, float]  # wall time of each backend

    def relative(self, metric: str) -> Optional[float]:
        a, b = getattr(self.model.summary(), metric), getattr(self.sglang.summary(), metric)
        if a is None or b is None:
            return None
        if b == 0:
            return 0.0 if a == 0 else float("inf")
        return (a - b) / b

    def differing(self, k: int) -> list[tuple[int, PassTrace, PassTrace]]:
        return [(i, x, y) for i, (x, y) in enumerate(zip(self.model.trace[k], self.sglang.trace[k])) if x != y]


def compare(name: str) -> Comparison:
    case = WORKLOADS[name]
    runs, seconds = {}, []
    for scheduler in ("model", "sglang"):
        start = time.perf_counter()
        runs[scheduler] = run_variant(case.config.replace(scheduler=scheduler), case.variant(), case.workload)
        seconds.append(time.perf_counter() - start)
    a, b = runs["model"], runs["sglang"]
    first = next((k for k in range(min(a.passes, b.passes)) if a.trace[k] != b.trace[k]), None)
    if first is None and a.passes != b.passes:
        first = min(a.passes, b.passes)
    return Comparison(name, a, b, first, (seconds[0], seconds[1]))


def _fmt(metric: str, x: Optional[float]) -> str:
    if x is None:
        return "-"
    if metric.startswith("ttft"):
        return f"{x:.3f} s"
    if metric.endswith("share"):
        return f"{100 * x:.1f}%"
    if metric == "token_usage":
        return f"{x:.3f}"
    return f"{x:,.1f}"


def table(comparisons: Sequence[Comparison]) -> str:
    rows = ["| workload | passes | first differing pass | " + " | ".join(f"{m} (model / sglang)" for m in METRICS) + " | largest gap |",
            "|---|---:|---:|" + "---|" * len(METRICS) + "---:|"]
    for c in comparisons:
        gaps = [abs(g) for g in (c.relative(m) for m in SUMMARY) if g is not None]
        cells = [f"{_fmt(m, getattr(c.model.summary(), m))} / {_fmt(m, getattr(c.sglang.summary(), m))}" for m in METRICS]
        rows.append(f"| {c.name} | {c.model.passes} | {'none' if c.first_difference is None else c.first_difference} | "
                    + " | ".join(cells) + f" | {100 * max(gaps, default=0.0):.2f}% |")
    return "\n".join(rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m prefill_delayer.sim.differential", description=__doc__.split("\n\n")[0])
    p.add_argument("workloads", nargs="*", metavar="WORKLOAD", help=f"any of {', '.join(WORKLOADS)} (default: all)")
    args = p.parse_args(argv)
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload {unknown[0]!r}: expected one of {', '.join(WORKLOADS)}")
    from .sglang_backend import require_scheduler
    from .errors import SimInputError

    try:
        require_scheduler("the comparison", "python -m prefill_delayer.sim.differential")
    except SimInputError as err:
        print(f"python -m prefill_delayer.sim.differential: {err}", file=sys.stderr)
        return 2
    comparisons = []
    for name in args.workloads or WORKLOADS:
        c = compare(name)
        print(f"{name}: {counted(c.model.passes, 'pass', 'passes')}, model {c.seconds[0]:.1f} s, sglang {c.seconds[1]:.1f} s "
              f"({c.sglang.passes / c.seconds[1]:.1f} passes/s)", file=sys.stderr)
        comparisons.append(c)
    print(table(comparisons))
    return 0


if __name__ == "__main__":
    sys.exit(main())
