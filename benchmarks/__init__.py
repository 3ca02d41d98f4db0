"""Benchmarks that print numbers against their targets; nothing in the package imports them.

    python -m prefill_delayer.benchmarks.runtime        # µs per pass: bare collective, ours, the seed, on gloo ranks
    python -m prefill_delayer.benchmarks.runtime_instructions  # instructions per pass (callgrind), against another build
    python -m prefill_delayer.benchmarks.decision_log   # the decision log's cost per pass, check-log's speed
    python -m prefill_delayer.benchmarks.sim            # simulator passes per second at DP=8
    python -m prefill_delayer.benchmarks.sglang_shell   # the SGLang shell against SGLang 0.5.23's own class

Each ends with one verdict line and exits 0 when it met every target it judged, 1 when it
missed one (so a script or CI can act on it), 2 when it could not run.
"""

from __future__ import annotations

from typing import Sequence

MISSED = 1  # the exit status of a benchmark that missed a target


def verdict(missed: Sequence[str], not_judged: Sequence[str] = ()) -> int:
    """Print the closing line; the exit status: 0 every judged target met, ``MISSED`` otherwise (naming which)."""
    unjudged = f" (not judged: {'; '.join(not_judged)})" if not_judged else ""
    if missed:
        print(f"MISSED TARGET: {'; '.join(missed)}{unjudged}")
        return MISSED
    print(f"every target met{unjudged}")
    return 0
