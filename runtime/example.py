"""Run the delayer across real ranks under the standard launcher, printing each rank's decisions.

    torchrun --nproc-per-node 4 -m prefill_delayer.runtime.example [--passes 8] [--profile seed]

Each rank joins the default process group (``env://``: torchrun sets
MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; gloo, CPU), builds a
``PrefillDelayer`` over it with DP attention on (``dp_size`` = world size,
``attn_tp_size`` = 1) and drives a small scripted workload through
``PrefillDelayerSinglePassExecutor``, as a scheduler would: every rank runs the
same number of passes, and every pass is exactly one all-gather. This is the
code path a multi-node deployment uses; only the launcher's flags differ.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from datetime import timedelta
from typing import Optional

from .delayer import PrefillDelayer, PrefillDelayerSinglePassExecutor
from .server_args import ServerArgs


def workload(rank: int, world: int, k: int) -> tuple[bool, float, int, int, int, int]:
    """(prefillable, token_usage, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len) on pass k.

    Passes 0-2: only even ranks have prefill work (mixed: the delayer holds it
    back so ranks prefill together); 3: everyone has work (released); then
    decode-only passes, then a low-KV-usage rank forces a prefill.
    """
    if k < 3:
        return rank % 2 == 0, 0.9, 32, 16, 256, 4
    if k == 3:
        return True, 0.9, 32, 16, 256, 4
    if k % 4 == 0:
        return False, 0.9, 32, 0, 256, 0
    return rank == world - 1 or k % 2 == 0, 0.2 if rank == world - 1 else 0.9, 32, 16, 256, 4


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="torchrun --nproc-per-node N -m prefill_delayer.runtime.example")
    parser.add_argument("--passes", type=int, default=8)
    parser.add_argument("--profile", choices=("seed", "hardened"), default="seed")
    parser.add_argument("--max-delay-passes", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=30.0, help="collective timeout of the process group")
    args = parser.parse_args(argv)

    warnings.filterwarnings("ignore", message=r".*NumPy.*")
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=args.timeout_s))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        delayer = PrefillDelayer(
            dp_size=world,
            attn_tp_size=1,
            cpu_group=dist.group.WORLD,
            server_args=ServerArgs(enable_dp_attention=True),
            max_delay_passes=args.max_delay_passes,
            token_usage_low_watermark=0.5,
            profile=args.profile,
        )
        lines = []
        for k in range(args.passes):
            prefillable, usage, rb, pb, mrr, wq = workload(rank, world, k)
            executor = PrefillDelayerSinglePassExecutor(delayer, usage)
            allow = executor.negotiate_should_allow_prefill(prefillable, rb, pb, mrr, wq) if prefillable else False
            executor.finalize(actual_prefill=allow)  # negotiates as not prefillable if nothing did
            d = executor._result
            assert d is not None
            lines.append(
                f"[rank {rank}/{world}] pass {k}: prefillable={prefillable!s:5} -> allow={d.output_allow!s:5} "
                f"reason={d.output_reason or '-':15} input={d.input_estimation:5} "
                f"waited={d.wait_forward_passes} state={delayer.state.control}"
            )
        # Print rank by rank so the output is readable.
        for r in range(world):
            dist.barrier()
            if r == rank:
                print("\n".join(lines), flush=True)
                time.sleep(0.05)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
