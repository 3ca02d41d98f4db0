"""Policy simulator: serving workloads through the real ``PrefillDelayer`` on N lock-step DP ranks.

    from prefill_delayer.sim import SimConfig, Variant, LongPrompt, Lengths, simulate
    results = simulate(SimConfig(dp_size=8, passes=2000),
                       [Variant.of("seed"), Variant.of("hardened")],
                       LongPrompt(concurrency=16, prompt=Lengths(90000, 90000), output=Lengths(64, 64)))
    print(results[0].summary())

Importing this package is cheap: the engine (and the runtime it drives) loads
on first use of a name below, matplotlib only when a plot is drawn.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SimConfig": "config",
    "Variant": "config",
    "CostModel": "cost",
    "SGLANG_35241": "cost",
    "SimInputError": "errors",
    "TraceFileError": "errors",
    "simulate": "engine",
    "run_variant": "engine",
    "RunResult": "result",
    "Summary": "result",
    "load_trace": "trace",
    "TRACKERS": "trackers",
    "tracker_for": "trackers",
    "Burst": "workload",
    "Bursty": "workload",
    "Lengths": "workload",
    "LongPrompt": "workload",
    "Mix": "workload",
    "Poisson": "workload",
    "TraceReplay": "workload",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
