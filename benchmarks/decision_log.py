"""Benchmark of the decision log at fleet scale: its size, its cost in the runtime, check-log's speed and memory.

    python -m prefill_delayer.benchmarks.decision_log [--records 2000000] [--exact-records 200000] [--jobs N]

1. **Runtime cost per pass.** One rank over the in-process gather
   (``runtime.InProcessGroup``), one scheduler pass per iteration through
   ``PrefillDelayerSinglePassExecutor``, with the log off and on, in
   interleaved rounds; process CPU time (the writer thread counts too), median
   over rounds of (on - off) per pass. Then the line of a 16-rank pass alone
   (``DecisionLog.passed`` with 16 ranks' gathered rows, writer included): what
   a rank of a dp16 group pays. Target: <= 10 µs each.
2. **A group-day at reduced scale.** 16 ranks of SGLang's delayer (``hardened``,
   DP attention), each a real ``PolicyCore`` logging format 2 (compact), stepped
   in lock-step in one process (each pass's rows computed by the spec's own
   ``local_row`` and handed to every rank as its all-gather), on a mixed
   workload with clock readings and token usages at full float precision, for
   ``--records`` pass records (>= 2 million). Printed: bytes per rank-pass
   (target <= 200).
3. **check-log on it**, in a child process, as a user runs it: the default
   path (the spec on columns, the machine on flagged and sampled passes, every
   core) over the whole group-day, and ``--exact`` over its first
   ``--exact-records``; records per second (wall time) and the peak RSS of the
   check and all its workers together (sampled). Targets: >= 500,000 records
   per second for the default path, <= 512 MB.

Exits 1 when a target is missed. Not a test: on a shared machine the figures
move by tens of percent between runs.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from . import at_least, parser, run_main, verdict
from .runtime import MAX_DELAY_PASSES, SERVER_ARGS, WATERMARK, _inputs
from ..runtime.delayer import CROSSCHECK_ENV, PrefillDelayer, PrefillDelayerSinglePassExecutor
from ..runtime.example import mixed_workload
from ..runtime.inprocess import InProcessGroup
from ..runtime.server_args import ServerArgs

RUNTIME_TARGET_US = 10.0
BYTES_TARGET = 200
CHECK_TARGET_PER_S = 500_000
RSS_TARGET_MB = 512
WORLD = 16


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
    try:
        for fn in runners.values():  # warm-up
            _block(fn, max(passes // 4, 1), k)
        k += passes
        for _ in range(rounds):
            for name, fn in runners.items():
                times[name].append(_block(fn, passes, k))
            k += passes
    finally:  # interrupted too: the writer thread stops before its folder is removed
        on.close()
    log = on.decision_log
    assert log is not None and log.failure is None, log and log.failure
    extra = statistics.median(b - a for a, b in zip(times["off"], times["on"]))
    return statistics.median(times["off"]), statistics.median(times["on"]), extra


def line_cost(passes: int, folder: Path, rounds: int = 5) -> float:
    """Process CPU µs of one 16-rank pass's line (``DecisionLog.passed``, the writer thread included): the median of
    ``rounds`` rounds, each a fresh log (one round alone moved by up to 40% between runs on a shared machine)."""
    from ..runtime.decision_log import DecisionLog, DecisionLogOptions
    from ..runtime.envelope import Envelope
    from ..spec import Config

    c = Config(profile="hardened", dp_size=WORLD, enable_dp_attention=True, max_delay_passes=8, queue_min_ratio=0.5)
    env = Envelope(c)
    rng = random.Random(1)
    # Each row as the runtime gathers it: the policy's fields, the envelope's constant part, the pass stamp.
    flats = [[v for r in range(WORLD) for v in (rng.randint(0, 1), 0, rng.randint(0, 300), 64, rng.randint(0, 90), 0, 256,
                                                  *env.tail, env.stamp(k + 1))] for k in range(64)]
    assert len(flats[0]) == env.flat_len, (len(flats[0]), env.flat_len)
    policy = c.policy
    state = policy.init
    d = policy.decision_cls(policy.state_cls("delaying", 2, 1000.123456789, False), "mixed", False, "delay", 9, 0, 0, 0.0)
    per_round = []
    for r in range(rounds):
        log = DecisionLog(DecisionLogOptions(folder / f"line-{r}.jsonl"), c, rank=3, group_rank=3, group_ranks=list(range(WORLD)))
        c0 = time.process_time()
        try:
            for k in range(passes):
                log.passed(k + 1, 1000.0 + k * 0.0501234567, (0.8712345678901234, 256), flats[k & 63], state, d)
        finally:  # interrupted too: the writer thread stops before its folder is removed
            log.close()
        assert log.failure is None, f"the decision log stopped, so its cost was not measured: {log.failure}"
        per_round.append((time.process_time() - c0) / passes * 1e6)
    return statistics.median(per_round)


def write_group_day(folder: Path, records: int, world: int = WORLD, seed: int = 0) -> int:
    """``records // world`` passes of a ``world``-rank group, every rank a real ``PolicyCore`` logging into ``folder``;
    returns the passes. The ranks step in lock-step in this process: each pass's rows are the spec's ``local_row`` of each
    rank's inputs, handed to every rank as its all-gather (and checked against the row the rank built)."""
    from ..fsm import Step
    from ..runtime import PolicyCore
    from ..runtime.decision_log import DecisionLogOptions
    from ..runtime.envelope import Envelope
    from ..spec import Config
    from ..spec.ops import PY

    c = Config(profile="hardened", dp_size=world, enable_dp_attention=True, max_delay_passes=8, queue_min_ratio=0.5,
               max_delay_ms=20.0, token_usage_low_watermark=0.5)
    policy, env, step = c.policy, Envelope(c), Step(c)
    rows: list[list[int]] = [[] for _ in range(world)]

    class Lockstep:
        world_size = world

        def __init__(self, rank: int) -> None:
            self.rank = rank

        def __call__(self, row: Sequence[int]) -> list[list[int]]:
            if list(row) != rows[self.rank]:
                raise AssertionError(f"rank {self.rank} built {row}, the spec {rows[self.rank]}")
            return [rows[r] for r in range(world)]

    clocks = [[1000.0 + 7.0 * r] for r in range(world)]

    def clock_of(rank: int) -> Callable[[], float]:
        return lambda: clocks[rank][0]

    cores = [PolicyCore(c, Lockstep(r), clock=clock_of(r),
                        decision_log=DecisionLogOptions(folder, folder=True, max_bytes=2**40)) for r in range(world)]
    rng = random.Random(seed)
    passes = records // world
    try:
        for k in range(passes):
            dt = 0.05 + rng.random() * 0.001
            inputs = []
            for r in range(world):
                clocks[r][0] += dt
                prefillable, usage, rb, pb, mrr, wq = mixed_workload(r, world, k)
                usage = usage - rng.random() * 0.01  # a ratio at full precision, as SGLang's token usage is
                inp = policy.input_cls(prefillable, usage, rb, pb, mrr, wq)
                state = step.finalize(cores[r].state)
                rows[r] = policy.local_row(PY, c, inp, policy.local_for(PY, state, clocks[r][0], inp)) + list(env.tail) + [env.stamp(k + 1)]  # the pass stamp: pass k + 1 (each core ends its passes)
                inputs.append(inp)
            for core, inp in zip(cores, inputs):
                core.negotiate(*inp)
                core.finalize()
    finally:  # interrupted too: every writer thread stops before the folder is removed
        for core in cores:
            core.close()
    return passes


def check_run(folder: Path, *extra: str) -> tuple[int, float, float, str]:
    """(exit code, wall seconds, peak MB of the check and its workers, last line) of ``prefill-delayer check-log``."""
    import subprocess

    import psutil

    cmd = [sys.executable, "-m", "prefill_delayer.cli", "check-log", str(folder), *extra]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    ps = psutil.Process(proc.pid)
    try:
        while proc.poll() is None:
            try:
                procs = [ps] + ps.children(recursive=True)
                peak = max(peak, sum(p.memory_info().rss for p in procs if p.is_running()))
            except psutil.Error:
                pass
            time.sleep(0.1)
    except BaseException:  # interrupted: the check reads the folder about to be removed, so it ends first
        proc.kill()
        proc.communicate()
        raise
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    lines = (out or err).strip().splitlines()
    return proc.returncode, wall, peak / 2**20, lines[-1] if lines else ""


def main(argv: Optional[list[str]] = None) -> int:
    """Exit 2 with one line naming a bad option; 130 on Ctrl-C and 143 on SIGTERM, the temporary folder removed."""
    p = parser("decision_log", __doc__)
    p.add_argument("--passes", type=at_least(1), default=4000, help="passes per timed block of the runtime cost (default 4000)")
    p.add_argument("--rounds", type=at_least(1), default=15, help="interleaved rounds; medians are reported (default 15)")
    whole = f" (one pass of the {WORLD}-rank group)"
    p.add_argument("--records", type=at_least(WORLD, whole), default=2_000_000, help="pass records of the group-day (default 2,000,000)")
    p.add_argument("--exact-records", type=at_least(WORLD, whole), default=200_000, help="records --exact checks (default 200,000)")
    p.add_argument("--jobs", type=at_least(1), default=None, help="check-log's worker processes (default: every core)")
    args = p.parse_args(argv)
    return run_main(p.prog, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if os.environ.pop(CROSSCHECK_ENV, None) is not None:
        print(f"{CROSSCHECK_ENV} unset for the benchmark: it times the production path")
    os.environ.pop("PREFILL_DELAYER_DECISION_LOG", None)  # the log is turned on and off here, explicitly
    missed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="prefill-delayer-bench-log-") as tmp:
        folder = Path(tmp)
        off, on, extra = runtime_cost(args.passes, args.rounds, folder)
        print(f"runtime, 1 rank, in-process gather: {off:.2f} µs per pass with the log off, {on:.2f} on "
              f"(process CPU, writer thread included; median of {args.rounds} rounds of {args.passes} passes)")
        print(f"decision log: {extra:.2f} µs extra per pass (target <= {RUNTIME_TARGET_US:g}): "
              + ("ok" if extra <= RUNTIME_TARGET_US else "OVER TARGET"))
        line16 = line_cost(20_000, folder)
        print(f"decision log: {line16:.2f} µs per pass for one rank of a {WORLD}-rank group (the line alone, writer included, median of 5 rounds; "
              f"target <= {RUNTIME_TARGET_US:g}): " + ("ok" if line16 <= RUNTIME_TARGET_US else "OVER TARGET"))
        if extra > RUNTIME_TARGET_US:
            missed.append(f"the decision log costs {extra:.2f} µs per pass, more than {RUNTIME_TARGET_US:g}")
        if line16 > RUNTIME_TARGET_US:
            missed.append(f"a {WORLD}-rank group's line costs {line16:.2f} µs per pass, more than {RUNTIME_TARGET_US:g}")
        day = folder / "day"
        day.mkdir()
        t0 = time.perf_counter()
        passes = write_group_day(day, args.records)
        records = passes * WORLD
        size = sum(p.stat().st_size for p in day.iterdir())
        per = size / records
        print(f"group-day: {WORLD} ranks x {passes} passes = {records:,} pass records, {size / 2**20:.0f} MB in format 2 "
              f"(written in {time.perf_counter() - t0:.0f} s)")
        print(f"log size: {per:.1f} bytes per rank-pass (target <= {BYTES_TARGET}): " + ("ok" if per <= BYTES_TARGET else "OVER TARGET"))
        if per > BYTES_TARGET:
            missed.append(f"the log takes {per:.1f} bytes per rank-pass, more than {BYTES_TARGET}")
        jobs = ["--jobs", str(args.jobs)] if args.jobs else []
        rc, wall, peak, last = check_run(day, *jobs)
        rate = records / wall
        print(f"check-log (default: columns, machine on flagged and sampled passes): {records:,} records in {wall:.1f} s, "
              f"{rate:,.0f} records per second (target >= {CHECK_TARGET_PER_S:,}): "
              + ("ok" if rate >= CHECK_TARGET_PER_S else "UNDER TARGET") + f"; {last}")
        print(f"check-log peak RSS, all its processes: {peak:.0f} MB (target <= {RSS_TARGET_MB}): "
              + ("ok" if peak <= RSS_TARGET_MB else "OVER TARGET"))
        if rate < CHECK_TARGET_PER_S:
            missed.append(f"check-log reads {rate:,.0f} pass records per second, fewer than {CHECK_TARGET_PER_S:,}")
        if peak > RSS_TARGET_MB:
            missed.append(f"check-log's peak RSS is {peak:.0f} MB, more than {RSS_TARGET_MB}")
        if rc != 0:
            missed.append(f"check-log exits {rc} on the group-day's clean logs, not 0")
        small = folder / "small"
        small.mkdir()
        write_group_day(small, args.exact_records, seed=1)
        rc2, wall2, peak2, last2 = check_run(small, "--exact", *jobs)
        print(f"check-log --exact (every pass through the transitions machine): {args.exact_records:,} records in {wall2:.1f} s, "
              f"{args.exact_records / wall2:,.0f} records per second, peak {peak2:.0f} MB; {last2}")
        if rc2 != 0:
            missed.append(f"check-log --exact exits {rc2} on clean logs, not 0")
    return verdict(missed)


if __name__ == "__main__":
    sys.exit(main())
