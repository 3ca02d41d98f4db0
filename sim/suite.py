"""The benchmark suites of ``prefill-delayer simulate --suite``: workloads as data.

A workload is ``simulate``'s own settings (the option names of ``sim.options``,
a ``scenario`` included) and, for open arrivals, the request streams and the load
as a fraction of the saturated throughput: the rate is derived from the cost model
(``bound.capacity_tok_s``) for the workload's engine and lengths, never written
down. ``sim.suite_run`` runs them; nothing here imports the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

DRIFTED = "3,3,0,2,3,3,2,3"  # the draw of --drift random:3 with --seed 0 (docs/simulation.md's drifted run)

# The engine of the open-arrival workloads (DP attention, one node), and their measured time.
OPEN: Mapping[str, Any] = {"dp_size": 8, "max_running_requests": 128, "duration": 300.0, "warmup": 60.0}
CHAT = ("1000:4000", "100:800")  # prompt and output tokens of the Poisson family


@dataclass(frozen=True)
class Stream:
    """One stream of open arrivals: its share of the requests, their lengths, and ``burst`` requests at once."""

    share: float
    prompt: str
    output: str
    burst: Optional[int] = None


@dataclass(frozen=True)
class SuiteWorkload:
    name: str
    about: str
    options: Mapping[str, Any]  # simulate's settings, by option name (``scenario``: start from it)
    load: Optional[float] = None  # open arrivals: the fraction of the saturated throughput they offer
    streams: tuple[Stream, ...] = field(default_factory=tuple)
    min_bound: Optional[float] = None  # ``--goal``: the share of the bound's input tok/s the goal policy must reach


def _open(name: str, about: str, load: float, *streams: Stream, **options: Any) -> SuiteWorkload:
    return SuiteWorkload(name, about, {**OPEN, **options}, load, streams)


def _35241(name: str, about: str, **options: Any) -> SuiteWorkload:
    return SuiteWorkload(name, about, {"scenario": "35241", **options}, min_bound=0.9)


DEFAULT = (
    SuiteWorkload("32880", "calibration: SGLang #32880 (DP=16, a refill wave, then Poisson 5 req/s at the 0.20 s decode floor)",
                  {"scenario": "32880"}),
    _35241("35241", "calibration: SGLang #35241 (DP=8, closed loop of 16 60k-token prompts, probes every 2 s, each release's dispatch)"),
    _35241("35241-dispatch-0.5.17", "#35241 with 0.5.17's DP dispatch: probes on the user rotation, every 2 s", health_dispatch="shared"),
    _35241("35241-dispatch-0.5.23", "#35241 with 0.5.23's DP dispatch: probes on their own counter (#35721)", health_dispatch="separate"),
    _35241("35241-drift-1", "#35241, one rank a chunk ahead", drift="1,0,0,0,0,0,0,0"),
    _35241("35241-drift-3", f"#35241, ranks drifted by {DRIFTED} chunks", drift=DRIFTED),
    _35241("35241-drift-stair", "#35241, rank r r chunks ahead", drift="0,1,2,3,4,5,6,7"),
    _open("poisson-50", "Poisson at 50% of the saturated throughput, DP=8", 0.5, Stream(1.0, *CHAT)),
    _open("poisson-80", "Poisson at 80% of the saturated throughput, DP=8", 0.8, Stream(1.0, *CHAT)),
    _open("poisson-100", "Poisson at the saturated throughput, DP=8", 1.0, Stream(1.0, *CHAT)),
    _open("poisson-120", "Poisson at 120% of the saturated throughput, DP=8", 1.2, Stream(1.0, *CHAT)),
    _open("bursty", "bursts of 32 requests at Poisson times, 80% of the saturated throughput, DP=8", 0.8, Stream(1.0, *CHAT, burst=32)),
    _open("long-short", "10% long prompts (16k-48k) among short ones (200-1000), 80% of the saturated throughput, DP=8", 0.8,
          Stream(0.1, "16000:48000", "50:200"), Stream(0.9, "200:1000", "50:200")),
    _open("decode-heavy", "short prompts (200-800), long outputs (1000-3000), 80% of the saturated throughput, DP=8", 0.8,
          Stream(1.0, "200:800", "1000:3000")),
    _open("dp16", "Poisson at 80% of the saturated throughput, DP=16", 0.8, Stream(1.0, *CHAT), dp_size=16),
)

# Workloads kept out of the design of ``aligned`` (its low-load watermark was chosen on DEFAULT alone): other loads,
# other mixes of lengths and other DP sizes, to see whether what it gains on DEFAULT holds elsewhere. The first five
# were set aside before the design began; the rest were added once it was done, and no rule was fitted to them.
MIX = ("500:8000", "50:400")
HELD_OUT = (
    _open("poisson-65", "Poisson at 65% of the saturated throughput, DP=8", 0.65, Stream(1.0, *CHAT)),
    _open("poisson-110", "Poisson at 110% of the saturated throughput, DP=8", 1.1, Stream(1.0, *CHAT)),
    _open("mix-500-8000", "prompts 500-8000, outputs 50-400, 70% of the saturated throughput, DP=8", 0.7, Stream(1.0, *MIX)),
    _open("dp4-80", "Poisson at 80% of the saturated throughput, DP=4", 0.8, Stream(1.0, *CHAT), dp_size=4),
    _open("dp4-40", "Poisson at 40% of the saturated throughput, DP=4", 0.4, Stream(1.0, *CHAT), dp_size=4),
    _open("poisson-90", "Poisson at 90% of the saturated throughput, DP=8", 0.9, Stream(1.0, *CHAT)),
    _open("dp16-65", "Poisson at 65% of the saturated throughput, DP=16", 0.65, Stream(1.0, *CHAT), dp_size=16),
    _open("chat-long-out", "prompts 1000-4000, outputs 400-1600, 80% of the saturated throughput, DP=8", 0.8,
          Stream(1.0, "1000:4000", "400:1600")),
    _open("mix-1000-16000", "prompts 1000-16000, outputs 50-400, 60% of the saturated throughput, DP=8", 0.6,
          Stream(1.0, "1000:16000", "50:400")),
    _open("mix-500-8000-85", "the 500-8000 mix at 85% of the saturated throughput, DP=8", 0.85, Stream(1.0, *MIX)),
    _open("mix-500-8000-dp4", "the 500-8000 mix at 70% of the saturated throughput, DP=4", 0.7, Stream(1.0, *MIX), dp_size=4),
    _open("mix-500-8000-dp16", "the 500-8000 mix at 70% of the saturated throughput, DP=16", 0.7, Stream(1.0, *MIX),
          dp_size=16),
    _open("mix-2000-6000-long-out", "prompts 2000-6000, outputs 200-1500, 75% of the saturated throughput, DP=8", 0.75,
          Stream(1.0, "2000:6000", "200:1500")),
)

# Only the reports' scenarios: what the calibration of docs/simulation.md reproduces.
CALIBRATION = tuple(w for w in DEFAULT if "scenario" in w.options)

SUITES: Mapping[str, tuple[SuiteWorkload, ...]] = {"default": DEFAULT, "calibration": CALIBRATION, "held-out": HELD_OUT}
LIST = "list"


def listing() -> str:
    """``--suite list``: every suite and its workloads."""
    lines = []
    for name, workloads in SUITES.items():
        lines.append(f"{name} ({len(workloads)} workloads):")
        lines += [f"  {w.name:<22} {w.about}" for w in workloads]
    return "\n".join(lines)


__all__ = ["DEFAULT", "HELD_OUT", "LIST", "SUITES", "Stream", "SuiteWorkload", "listing"]
