"""Benchmarks that print numbers against their targets; nothing in the package imports them.

    python -m prefill_delayer.benchmarks.runtime        # µs per pass: bare collective, ours, the seed, on gloo ranks
    python -m prefill_delayer.benchmarks.decision_log   # the decision log's cost per pass, check-log's speed
    python -m prefill_delayer.benchmarks.sim            # simulator passes per second at DP=8
    python -m prefill_delayer.benchmarks.sglang_shell   # the SGLang shell against SGLang 0.5.23's own class
"""
