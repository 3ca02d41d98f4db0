"""Benchmark: µs per pass of the bare collective, this runtime, and the seed, over real gloo ranks.

    python -m prefill_delayer.benchmarks.runtime [--worlds 1,2,4] [--passes 200] [--rounds 15]

For each world size, that many processes join a gloo group on 127.0.0.1 and
time, in interleaved rounds (so drift hits all three alike):

* ``bare``: ``torch.distributed.all_gather_single`` of one row as long as ours
  (the policy's fields and the envelope) into a preallocated buffer — the floor
  any implementation pays;
* ``ours``: one scheduler pass through ``PrefillDelayerSinglePassExecutor``
  (negotiate + finalize) of this runtime;
* ``seed``: the same pass through the classes of SGLang's seed release
  (``SEED_RELEASE`` of the delayer policy), fetched once from the package registry and
  run with stubs for its sglang imports (``runtime._upstream``), when available.

Both delayers see the same inputs (a rotating mix of none / mixed / all /
watermark passes). The figure that matters is the cost *beyond* the bare
collective; the ratio ours/seed of those is printed. A last section times the
same passes with the collective replaced by a local copy (one process), which
isolates the Python cost from gloo's noise. This is not a test: timings on a
shared two-core machine vary by tens of percent between runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import sys
import time
import warnings
from datetime import timedelta
from typing import Any, Callable, Optional

from . import Column, CouldNotRun, Table, at_least, integers_at_least, parser, ratio_cell, run_main, timing_columns, us_cell, verdict
from ..runtime.server_args import ServerArgs
from ..spec.config import plain

# Per runner ("bare", "ours", "seed"), one (wall, CPU) µs-per-pass pair per round.
Timings = dict[str, list[tuple[float, float]]]
SERVER_ARGS: dict[str, Any] = dict(enable_dp_attention=True, prefill_delayer_queue_min_ratio=0.5, prefill_delayer_max_delay_ms=None)
MAX_DELAY_PASSES = 30
WATERMARK = 0.5
RATIO_TARGET = 0.25  # ours extra per pass <= 1/4 of the seed's, on CPU, every world


def _inputs(world: int, rank: int, k: int) -> tuple[bool, float, int, int, int, int]:
    """(prefillable, token_usage, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len) of pass k."""
    kind = k % 4
    if kind == 0:  # nobody can prefill
        return False, 0.9, 0, 0, 0, 0
    if kind == 1:  # mixed
        return rank % 2 == 0 or world == 1, 0.9, 40, 16, 256, 4
    if kind == 2:  # all, queue trigger may hold
        return True, 0.9, 100, 80, 1024, 10
    return True, 0.3 if rank == 0 else 0.9, 100, 80, 1024, 10  # watermark force


def _pass(executor_cls: Any, delayer: Any, world: int, rank: int, k: int) -> None:
    prefillable, usage, rb, pb, mrr, wq = _inputs(world, rank, k)
    ex = executor_cls(delayer, usage)
    if prefillable:
        allow = ex.negotiate_should_allow_prefill(prefillable, rb, pb, mrr, wq)
        ex.finalize(actual_prefill=allow)
    else:
        ex.finalize(actual_prefill=False)


def _seed_delayer(world: int, group: Any) -> tuple[Any, Any]:
    """``(module, PrefillDelayer)`` of the seed release, gathering over ``group``."""
    from ..integrations.sglang.upstream import SEED_RELEASE, release_delayer

    return release_delayer(
        SEED_RELEASE, group=group, server_args=ServerArgs(**SERVER_ARGS), dp_size=world, attn_tp_size=1,
        max_delay_passes=MAX_DELAY_PASSES, token_usage_low_watermark=WATERMARK,
    )


def _our_delayer(world: int, group: Any, gather: Any = None) -> Any:
    from ..runtime.delayer import PrefillDelayer

    return PrefillDelayer(world, 1, group, ServerArgs(**SERVER_ARGS), MAX_DELAY_PASSES, WATERMARK, gather=gather)


def _time_block(fn: Callable[[int], None], passes: int, start: int) -> tuple[float, float]:
    """(wall, this thread's CPU) µs per pass. CPU time excludes waiting for peers and time
    stolen by other processes, so it isolates each implementation's own cost on a busy machine."""
    c0, t0 = time.thread_time(), time.perf_counter()
    for k in range(start, start + passes):
        fn(k)
    t1, c1 = time.perf_counter(), time.thread_time()
    return (t1 - t0) / passes * 1e6, (c1 - c0) / passes * 1e6


def _worker(rank: int, world: int, port: int, passes: int, rounds: int, with_seed: bool, queue: Any) -> None:
    warnings.filterwarnings("ignore", message=r".*NumPy.*")
    # The seed calls the deprecated all_gather_into_tensor; the warning's cost stays, its text is noise.
    warnings.filterwarnings("ignore", message=r".*all_gather_into_tensor.*deprecated.*")
    import torch
    import torch.distributed as dist

    from ..runtime.delayer import PrefillDelayerSinglePassExecutor

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=60))
    try:
        group = dist.group.WORLD
        ours = _our_delayer(world, group)
        row_len = ours.core.envelope.row_len
        send = torch.zeros(row_len, dtype=torch.int64)
        recv = torch.zeros(world * row_len, dtype=torch.int64)
        runners: dict[str, Callable[[int], None]] = {
            "bare": lambda k: dist.all_gather_single(recv, send, group=group),
            "ours": lambda k: _pass(PrefillDelayerSinglePassExecutor, ours, world, rank, k),
        }
        if with_seed:
            seed, seed_delayer = _seed_delayer(world, group)
            runners["seed"] = lambda k: _pass(seed.PrefillDelayerSinglePassExecutor, seed_delayer, world, rank, k)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
        k = 0
        for name, fn in runners.items():  # warm-up
            dist.barrier()
            _time_block(fn, max(passes // 4, 8), k)
        k += 1000
        for _ in range(rounds):
            for name, fn in runners.items():
                dist.barrier()
                times[name].append(_time_block(fn, passes, k))
            k += passes
        queue.put((rank, times))
        dist.barrier()  # no rank tears its group down while a peer is still in the last collective
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(worker: Callable[..., None], world: int, args: tuple, timeout_s: float) -> dict[int, Any]:
    """Run ``worker(rank, world, port, *args, queue)`` in ``world`` spawned processes joined on a free
    loopback port; each puts ``(rank, report)`` on the queue. Every rank's report, or an error naming
    the ranks that died or were late; no process outlives the call. Ctrl-C is the parent's alone (the
    ranks start with it blocked, then ignore it): its ``KeyboardInterrupt`` ends them, where each rank
    would print its own traceback."""
    import multiprocessing as mp

    from ..workers import ctrl_c_held, run_leaving_ctrl_c

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=run_leaving_ctrl_c, args=(worker, r, world, port, *args, queue), daemon=True)
             for r in range(world)]
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        with ctrl_c_held():
            for p in procs:
                p.start()
        while len(results) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                late = sorted(set(range(world)) - set(results))
                raise CouldNotRun(f"world {world}: ranks {late} did not report within {plain(timeout_s)} s")
            try:
                rank, report = queue.get(timeout=min(left, 1.0))
                results[rank] = report
            except Exception:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                if dead:
                    codes = [procs[r].exitcode for r in dead]
                    raise CouldNotRun(f"world {world}: ranks {dead} exited with {codes} (a rank's own error, if any, is "
                                      "above)") from None
        for p in procs:
            p.join(10)
    finally:
        _end(procs)
    return results


def _end(procs: list[Any]) -> None:
    """Kill the processes still running, all stopped first: a rank killed while a peer runs on fails the peer's
    collective, and the peer prints that error's traceback before its own kill comes."""
    running = [p for p in procs if p.is_alive()]
    for p in running:
        os.kill(p.pid, signal.SIGSTOP)
    for p in running:
        p.kill()
    for p in running:
        p.join(5)


def run_world(world: int, passes: int, rounds: int, with_seed: bool, timeout_s: float = 300.0) -> Timings:
    """(wall, CPU) µs/pass per runner and round.

    Wall: the slowest rank's (the one the scheduler waits for). CPU: the mean over
    ranks, each rank's own cost; the maximum of four noisy per-rank CPU times on two
    shared cores mostly measures the noise.
    """
    results: dict[int, Timings] = spawn_ranks(_worker, world, (passes, rounds, with_seed), timeout_s)
    return {
        name: [
            (
                max(res[name][k][0] for res in results.values()),
                statistics.fmean(res[name][k][1] for res in results.values()),
            )
            for k in range(rounds)
        ]
        for name in results[0]
    }


def run_local(passes: int, rounds: int, with_seed: bool) -> Timings:
    """The Python cost alone: world 1, the collective replaced by a copy into a preallocated buffer."""
    warnings.filterwarnings("ignore", message=r".*NumPy.*")
    import torch

    from ..runtime.delayer import PrefillDelayerSinglePassExecutor

    ours = _our_delayer(1, None, gather=lambda row: [list(row)])
    runners: dict[str, Callable[[int], None]] = {"ours": lambda k: _pass(PrefillDelayerSinglePassExecutor, ours, 1, 0, k)}
    if with_seed:
        seed, sd = _seed_delayer(1, lambda row: [list(row)])
        buf = sd._global_info_buffer

        def gather_info(local_prefillable: bool, local_token_watermark_force_allow: bool, running_batch: int = 0,
                        max_prefill_bs: int = 0, waiting_queue_len: int = 0) -> Any:
            # The seed's _gather_info with the collective replaced by a copy (no stub in the timed path).
            local = torch.tensor([int(local_prefillable), int(local_token_watermark_force_allow), running_batch,
                                  max_prefill_bs, waiting_queue_len], dtype=torch.int64)
            buf.flatten().copy_(local)
            return buf[:, 0, :]

        sd._gather_info = gather_info
        runners["seed"] = lambda k: _pass(seed.PrefillDelayerSinglePassExecutor, sd, 1, 0, k)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
    for fn in runners.values():
        _time_block(fn, max(passes // 4, 8), 0)
    k = 1000
    for _ in range(rounds):
        for name, fn in runners.items():
            times[name].append(_time_block(fn, passes, k))
        k += passes
    return times


def main(argv: Optional[list[str]] = None) -> int:
    """Exit 2 with one line naming a bad option; 130 on Ctrl-C, 143 on SIGTERM."""
    p = parser("runtime", __doc__)
    p.add_argument("--worlds", type=integers_at_least(1), default="1,2,4", help="comma-separated world sizes (default 1,2,4)")
    p.add_argument("--passes", type=at_least(1), default=200, help="passes per timed block (default 200)")
    p.add_argument("--rounds", type=at_least(1), default=15, help="interleaved rounds; medians are reported (default 15)")
    p.add_argument("--no-seed", action="store_true", help="skip the seed even when it is found")
    args = p.parse_args(argv)
    return run_main(p.prog, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from ..integrations.sglang.upstream import SEED_RELEASE, ReleaseUnavailable, release_source
    from ..runtime.delayer import CROSSCHECK_ENV

    if os.environ.pop(CROSSCHECK_ENV, None) is not None:  # the ranks inherit the environment
        print(f"{CROSSCHECK_ENV} unset for the benchmark: it times the production path")

    seed = False
    if args.no_seed:
        print("seed: not timed (--no-seed)")
    else:
        try:
            print(f"seed: SGLang {SEED_RELEASE} ({release_source(SEED_RELEASE)})")
            seed = True
        except ReleaseUnavailable as err:
            print(f"seed: not found (only bare and ours are timed): {err}")
    print("µs per pass, median of interleaved rounds; 'extra' = cost beyond the bare collective, paired by round;")
    print("wall = elapsed time of the slowest rank; cpu = main-thread CPU time, mean over ranks (robust to waiting and to a busy machine)")
    table = Table(Column("world", [*map(str, args.worlds), "local"]), *timing_columns("seed"))
    print(table.header())
    cpu_ratios: dict[str, Optional[float]] = {}
    for world in args.worlds:
        cpu_ratios[f"world {world}"] = _report(table, str(world), run_world(world, args.passes, args.rounds, seed))
    cpu_ratios["local"] = _report(table, "local", run_local(args.passes * 5, args.rounds, seed))
    print("local = one process, the collective replaced by a copy into a buffer: the Python cost alone")
    if not seed:
        return verdict([], ["ours extra <= 1/4 of the seed's needs the seed"])
    shown = ", ".join(f"{k} {v:.2f}" if v is not None else f"{k} -" for k, v in cpu_ratios.items())
    print(f"target: ours extra <= 1/4 of the seed's (aim <= 1/10); cpu ratios: {shown}")
    missed = [f"{k}: ours extra is {v:.2f} of the seed's" for k, v in cpu_ratios.items() if v is not None and v > RATIO_TARGET]
    unjudged = [f"{k}: the seed's extra is within noise" for k, v in cpu_ratios.items() if v is None]
    return verdict(missed, unjudged)


def _report(table: Table, label: str, times: Timings) -> Optional[float]:
    """Print the wall and CPU rows of one world; return the CPU ratio (``None`` without the seed).

    bare / ours / seed are medians over rounds. The extras are medians of the
    per-round differences from that round's bare collective, so that drift
    between rounds (other processes, frequency changes) cancels.
    """

    def extra(name: str, i: int) -> Optional[float]:
        if name not in times:
            return None
        bare = times.get("bare", [(0.0, 0.0)] * len(times[name]))
        return statistics.median(t[i] - b[i] for t, b in zip(times[name], bare))

    ratio: Optional[float] = None
    for i, kind in enumerate(("wall", "cpu")):
        med = {name: statistics.median(t[i] for t in ts) for name, ts in times.items()}
        ours_x, seed_x = extra("ours", i), extra("seed", i)
        ratio = ours_x / seed_x if ours_x is not None and seed_x is not None and seed_x > 0 else None  # else: noise
        times_us = (med.get("bare", 0.0), med.get("ours"), med.get("seed"), ours_x, seed_x)
        print(table.row(label, kind, *map(us_cell, times_us), ratio_cell(ratio)), flush=True)
    return ratio


if __name__ == "__main__":
    sys.exit(main())
