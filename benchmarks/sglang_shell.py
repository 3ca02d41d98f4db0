"""Benchmark: the SGLang shell against SGLang's own ``PrefillDelayer``, side by side on gloo ranks.

    python -m prefill_delayer.benchmarks.sglang_shell [--world 2] [--passes 200] [--rounds 15]

Needs SGLang installed (``pip install --no-deps sglang==0.5.23`` and the extra
``sglang-test``). ``world`` processes join one gloo group on 127.0.0.1, build
SGLang's runtime context (``cpu_context.publish_context``: DP attention on,
the queue trigger on) and time, in interleaved rounds as ``benchmarks.runtime`` does:

* ``bare``: ``torch.distributed.all_gather_single`` of one 9-int row, the floor;
* ``ours``: one scheduler pass (executor, negotiate, ``finalize(actual_prefill_bs=)``)
  through ``integrations.sglang`` under profile ``sglang-0.5.22``;
* ``theirs``: the same pass through SGLang's own classes.

The figure is the cost beyond the bare collective, ours over theirs (the
target is <= 0.5). Then, outside the timed blocks, host reads per pass are
counted by instrumenting ``torch.Tensor.item`` and ``torch.Tensor.tolist``:
on a GPU each is a device sync. Not a test: timings on a shared machine vary.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from datetime import timedelta
from typing import Any, Callable, Optional

from . import Table, at_least, parser, ratio_cell, run_main, timing_columns, us_cell, verdict
from .runtime import spawn_ranks

ROW = 9
SCHEDULE = {"prefill_delayer_queue_min_ratio": 0.5, "prefill_delayer_max_delay_ms": None}
MAX_DELAY_PASSES = 30
WATERMARK = 0.5
RATIO_TARGET = 0.5  # ours extra per pass <= half of SGLang's own class's, on CPU
Timings = dict[str, list[tuple[float, float]]]  # per runner, (wall, CPU) µs per pass, one per round


def _inputs(world: int, rank: int, k: int) -> tuple[bool, float, int, int, int, int]:
    """(prefillable, token_usage, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len) of pass k."""
    kind = k % 4
    if kind == 0:  # nobody can prefill
        return False, 0.9, 0, 0, 0, 0
    if kind == 1:  # mixed
        return rank % 2 == 0, 0.9, 40, 16, 256, 4
    if kind == 2:  # all, the queue trigger may hold
        return True, 0.9, 100, 80, 1024, 10
    return True, 0.3 if rank == 0 else 0.9, 100, 80, 1024, 10  # watermark force


def _pass(executor_cls: Any, delayer: Any, world: int, rank: int, k: int) -> None:
    prefillable, usage, rb, pb, mrr, wq = _inputs(world, rank, k)
    ex = executor_cls(delayer, usage)
    allow = ex.negotiate_should_allow_prefill(prefillable, rb, pb, mrr, wq) if prefillable else False
    ex.finalize(actual_prefill_bs=min(wq, 8) if allow else 0)


def _time_block(fn: Callable[[int], None], passes: int, start: int) -> tuple[float, float]:
    c0, t0 = time.thread_time(), time.perf_counter()
    for k in range(start, start + passes):
        fn(k)
    t1, c1 = time.perf_counter(), time.thread_time()
    return (t1 - t0) / passes * 1e6, (c1 - c0) / passes * 1e6


def count_host_reads(fn: Callable[[int], None], passes: int, start: int) -> float:
    """``.item()`` and ``.tolist()`` calls per pass while ``fn`` runs (counted, not read off the code)."""
    import torch

    count = 0
    originals = {name: getattr(torch.Tensor, name) for name in ("item", "tolist")}

    def counting(original: Callable[..., Any]) -> Callable[..., Any]:
        def read(self: Any, *args: Any, **kwargs: Any) -> Any:
            nonlocal count
            count += 1
            return original(self, *args, **kwargs)

        return read

    for name, original in originals.items():
        setattr(torch.Tensor, name, counting(original))
    try:
        for k in range(start, start + passes):
            fn(k)
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
    return count / passes


def _worker(rank: int, world: int, port: int, passes: int, rounds: int, queue: Any) -> None:
    warnings.filterwarnings("ignore")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        import sglang.srt.managers.prefill_delayer as theirs_mod

        from ..integrations.sglang import PrefillDelayer, PrefillDelayerSinglePassExecutor
        from ..integrations.sglang.cpu_context import layout_widths, publish_context

        publish_context(rank, world, layout_widths(world, attn_dp_size=world), SCHEDULE, gloo_timeout_s=60.0)
        group = dist.group.WORLD
        send, recv = torch.zeros(ROW, dtype=torch.int64), torch.zeros(world * ROW, dtype=torch.int64)
        ours = PrefillDelayer(MAX_DELAY_PASSES, WATERMARK, profile="sglang-0.5.22")
        theirs = theirs_mod.PrefillDelayer(max_delay_passes=MAX_DELAY_PASSES, token_usage_low_watermark=WATERMARK)
        runners: dict[str, Callable[[int], None]] = {
            "bare": lambda k: dist.all_gather_single(recv, send, group=group),
            "ours": lambda k: _pass(PrefillDelayerSinglePassExecutor, ours, world, rank, k),
            "theirs": lambda k: _pass(theirs_mod.PrefillDelayerSinglePassExecutor, theirs, world, rank, k),
        }
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
        for fn in runners.values():  # warm-up
            dist.barrier()
            _time_block(fn, max(passes // 4, 8), 0)
        k = 1000
        for _ in range(rounds):
            for name, fn in runners.items():
                dist.barrier()
                times[name].append(_time_block(fn, passes, k))
            k += passes
        reads = {}
        for name in ("ours", "theirs"):
            dist.barrier()
            reads[name] = count_host_reads(runners[name], 40, k)  # 40 passes: ten of each kind
        queue.put((rank, (times, reads)))
        dist.barrier()  # no rank tears its group down while a peer is still in the last collective
    finally:
        dist.destroy_process_group()


def run(world: int, passes: int, rounds: int, timeout_s: float = 600.0) -> tuple[Timings, dict[str, float]]:
    """Per runner and round: (slowest rank's wall, mean over ranks of CPU) µs per pass; and host reads per pass."""
    reports = spawn_ranks(_worker, world, (passes, rounds), timeout_s)
    got: dict[int, tuple[Timings, dict[str, float]]] = {rank: (times, reads) for rank, (times, reads) in reports.items()}
    times0 = got[0][0]
    timings = {
        name: [(max(got[r][0][name][i][0] for r in got), statistics.fmean(got[r][0][name][i][1] for r in got))
               for i in range(rounds)]
        for name in times0
    }
    reads = {name: max(got[r][1][name] for r in got) for name in got[0][1]}
    return timings, reads


def main(argv: Optional[list[str]] = None) -> int:
    """Exit 2 with one line naming a bad option, or when SGLang is not installed; 130 on Ctrl-C, 143 on SIGTERM."""
    p = parser("sglang_shell", __doc__)
    p.add_argument("--world", type=at_least(1), default=2, help="gloo ranks (default 2)")
    p.add_argument("--passes", type=at_least(1), default=200, help="passes per timed block (default 200)")
    p.add_argument("--rounds", type=at_least(1), default=15, help="interleaved rounds; medians are reported (default 15)")
    args = p.parse_args(argv)
    return run_main(p.prog, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    try:
        from importlib.metadata import version

        sglang_version = version("sglang")
    except Exception:  # noqa: BLE001 - any reason SGLang is unusable is reported the same way
        print("SGLang is not installed: pip install --no-deps sglang==0.5.23 (and the extra sglang-test)", file=sys.stderr)
        return 2
    from ..runtime.delayer import CROSSCHECK_ENV

    if os.environ.pop(CROSSCHECK_ENV, None) is not None:
        print(f"{CROSSCHECK_ENV} unset for the benchmark: it times the production path")
    timings, reads = run(args.world, args.passes, args.rounds)
    print(f"SGLang {sglang_version}, world {args.world}, {args.passes} passes x {args.rounds} rounds; µs per pass, medians;")
    print("extra = cost beyond the bare collective, paired by round; wall = slowest rank, cpu = main-thread CPU, mean over ranks")
    table = Table(*timing_columns("theirs"))
    print(table.header())
    for i, kind in enumerate(("wall", "cpu")):
        med = {name: statistics.median(t[i] for t in ts) for name, ts in timings.items()}
        extra = {name: statistics.median(t[i] - b[i] for t, b in zip(timings[name], timings["bare"]))
                 for name in ("ours", "theirs")}
        cpu_extra = extra  # the target is judged on CPU (the last row): robust to waiting and a busy machine
        shown = extra["ours"] / extra["theirs"] if extra["theirs"] > 0 else None  # else: noise above the floor
        print(table.row(kind, *(us_cell(med[name]) for name in ("bare", "ours", "theirs")), us_cell(extra["ours"]),
                        us_cell(extra["theirs"]), ratio_cell(shown)), flush=True)
    print(f"host reads per pass (.item() + .tolist(), counted): ours {reads['ours']:.2f}, theirs {reads['theirs']:.2f}")
    print(f"target: ours extra <= {RATIO_TARGET:g} x theirs (cpu)")
    if cpu_extra["theirs"] <= 0:
        return verdict([], ["SGLang's own extra is within noise"])
    ratio = cpu_extra["ours"] / cpu_extra["theirs"]
    return verdict([f"ours extra is {ratio:.2f} x theirs"] if ratio > RATIO_TARGET else [])


if __name__ == "__main__":
    sys.exit(main())
