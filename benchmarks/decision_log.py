"""Benchmark of the decision log: its cost per pass in the runtime, and check-log's speed.

    python -m prefill_delayer.benchmarks.decision_log [--passes 4000] [--rounds 15] [--check-passes 5000]

1. **Runtime cost.** One rank over the in-process gather
   (``runtime.InProcessGroup``), one scheduler pass per iteration through
   ``PrefillDelayerSinglePassExecutor`` (negotiate + finalize, the inputs of
   ``benchmarks.runtime``), with the log off and on, in interleaved rounds. The cost
   is CPU time of the whole process (``time.process_time``), so the writer
   thread's formatting-free work (join, write, flush) counts too; the figure
   is the median over rounds of (on - off) per pass. Target: <= 10 µs.
2. **check-log's speed.** A 4-rank run over the in-process gather writes its
   logs (``--check-passes`` passes per rank, a mix of every kind of pass); then
   ``check-log``'s whole path (read, re-fire every pass through the
   ``transitions`` machine, agreement, invariants, summary) runs on them, pinned
   to one core. Target: >= 20,000 pass records (one rank's line of one pass)
   per second.

Not a test: on a shared machine the figures move by tens of percent between runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

from . import verdict
from .runtime import MAX_DELAY_PASSES, SERVER_ARGS, WATERMARK, _inputs
from ..runtime.delayer import CROSSCHECK_ENV, PrefillDelayer, PrefillDelayerSinglePassExecutor
from ..runtime.example import mixed_workload
from ..runtime.inprocess import InProcessGroup, run_ranks
from ..runtime.server_args import ServerArgs

RUNTIME_TARGET_US = 10.0
CHECK_TARGET_PER_S = 20_000


def _delayer(gather: Any, decision_log: Any) -> PrefillDelayer:
    return PrefillDelayer(1, 1, None, ServerArgs(**SERVER_ARGS), MAX_DELAY_PASSES, WATERMARK, gather=gather,
                          decision_log=decision_log)


def _one_pass(delayer: PrefillDelayer, k: int) -> None:
    prefillable, usage, rb, pb, mrr, wq = _inputs(1, 0, k)
    ex = PrefillDelayerSinglePassExecutor(delayer, usage)
    if prefillable:
        ex.finalize(actual_prefill=ex.negotiate_should_allow_prefill(prefillable, rb, pb, mrr, wq))
    else:
        ex.finalize(actual_prefill=False)


def _block(fn: Callable[[int], None], passes: int, start: int) -> float:
    """Process CPU µs per pass (every thread of the process: the log's writer included)."""
    c0 = time.process_time()
    for k in range(start, start + passes):
        fn(k)
    return (time.process_time() - c0) / passes * 1e6


def runtime_cost(passes: int, rounds: int, folder: Path) -> tuple[float, float, float]:
    """(median µs per pass off, on, median per-round difference)."""
    off = _delayer(InProcessGroup(1).gather_for(0), False)
    on = _delayer(InProcessGroup(1).gather_for(0), folder / "bench.jsonl")
    runners = {"off": lambda k: _one_pass(off, k), "on": lambda k: _one_pass(on, k)}
    times: dict[str, list[float]] = {"off": [], "on": []}
    k = 0
    for fn in runners.values():  # warm-up
        _block(fn, passes // 4, k)
    k += passes
    for _ in range(rounds):
        for name, fn in runners.items():
            times[name].append(_block(fn, passes, k))
        k += passes
    on.close()
    log = on.decision_log
    assert log is not None and log.failure is None, log and log.failure
    extra = statistics.median(b - a for a, b in zip(times["off"], times["on"]))
    return statistics.median(times["off"]), statistics.median(times["on"]), extra


def write_logs(folder: Path, passes: int, world: int = 4, profile: str = "hardened") -> None:
    """A ``world``-rank run over the in-process gather, each rank logging into ``folder``."""
    sa = ServerArgs(enable_dp_attention=True, prefill_delayer_queue_min_ratio=0.5, prefill_delayer_max_delay_ms=20.0)

    def rank_main(rank: int, gather: Any) -> None:
        clock = [1000.0]
        d = PrefillDelayer(world, 1, None, sa, 8, 0.5, gather=gather, clock=lambda: clock[0], profile=profile,
                           decision_log=folder)
        for k in range(passes):
            clock[0] += 0.004
            prefillable, usage, rb, pb, mrr, wq = mixed_workload(rank, world, k)
            ex = PrefillDelayerSinglePassExecutor(d, usage)
            ex.finalize(actual_prefill=ex.negotiate_should_allow_prefill(prefillable, rb, pb, mrr, wq) if prefillable else False)
        d.close()

    run_ranks(world, rank_main, timeout_s=60.0)


def check_speed(folder: Path) -> tuple[int, int, float, str]:
    """(pass records, violations, CPU seconds, result line) of check-log on ``folder``, pinned to one core."""
    from ..conformance import check_logs as run

    pinned = ""
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[-1]})
        pinned = f" (pinned to CPU {cpus[-1]})"
    try:
        c0 = time.process_time()
        report, _, _ = run([str(folder)])
        cpu = time.process_time() - c0
    finally:
        if pinned:
            os.sched_setaffinity(0, set(cpus))
    return report.checked["conformance"], report.violations, cpu, pinned


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m prefill_delayer.benchmarks.decision_log", description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=4000, help="passes per timed block (default 4000)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds; medians are reported (default 15)")
    parser.add_argument("--check-passes", type=int, default=5000, help="passes per rank of the 4-rank log check-log reads (default 5000)")
    args = parser.parse_args(argv)
    if os.environ.pop(CROSSCHECK_ENV, None) is not None:
        print(f"{CROSSCHECK_ENV} unset for the benchmark: it times the production path")
    os.environ.pop("PREFILL_DELAYER_DECISION_LOG", None)  # the log is turned on and off here, explicitly
    with tempfile.TemporaryDirectory(prefix="prefill-delayer-bench-log-") as tmp:
        folder = Path(tmp)
        off, on, extra = runtime_cost(args.passes, args.rounds, folder)
        print(f"runtime, 1 rank, in-process gather: {off:.2f} µs per pass with the log off, {on:.2f} on "
              f"(process CPU, writer thread included; median of {args.rounds} rounds of {args.passes} passes)")
        missed = []
        print(f"decision log: {extra:.2f} µs extra per pass (target <= {RUNTIME_TARGET_US:g}): "
              + ("ok" if extra <= RUNTIME_TARGET_US else "OVER TARGET"))
        if extra > RUNTIME_TARGET_US:
            missed.append(f"the decision log costs {extra:.2f} µs per pass, more than {RUNTIME_TARGET_US:g}")
        logs = folder / "run"
        logs.mkdir()
        write_logs(logs, args.check_passes)
        records, violations, cpu, pinned = check_speed(logs)
        rate = records / cpu
        print(f"check-log: {records} pass records (4 ranks x {args.check_passes} passes) read and checked in "
              f"{cpu:.2f} s CPU{pinned}, {violations} violation(s)")
        print(f"check-log: {rate:,.0f} pass records per second on one core (target >= {CHECK_TARGET_PER_S:,}): "
              + ("ok" if rate >= CHECK_TARGET_PER_S else "UNDER TARGET"))
        if rate < CHECK_TARGET_PER_S:
            missed.append(f"check-log reads {rate:,.0f} pass records per second, fewer than {CHECK_TARGET_PER_S:,}")
    return verdict(missed)


if __name__ == "__main__":
    sys.exit(main())
