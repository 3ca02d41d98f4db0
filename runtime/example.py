"""Run the delayer across real ranks under the standard launcher, printing each rank's decisions.

    torchrun --nproc-per-node 4 -m prefill_delayer.runtime.example [--passes 8] [--profile seed] [--workload mixed]

Each rank joins the default process group (``env://``: torchrun sets
MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE; gloo, CPU), builds a
``PrefillDelayer`` over it with DP attention on (``dp_size`` = world size,
``attn_tp_size`` = 1) and drives a small scripted workload through
``PrefillDelayerSinglePassExecutor``, as a scheduler would: every rank runs the
same number of passes, and every pass is exactly one all-gather. This is the
code path a multi-node deployment uses; only the launcher's flags differ.

``--workload mixed`` runs a busier, pseudo-random mix instead (nobody ready,
some ranks ready, everyone ready with the queue trigger on, a low-KV-usage
rank, everyone ready without a trigger) on the real clock, ``--pass-ms`` apart,
with the queue trigger's timeout at ``--max-delay-ms``: a run worth a decision
log (``PREFILL_DELAYER_DECISION_LOG=DIR``) and a ``prefill-delayer check-log``.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
import warnings
from datetime import timedelta
from typing import Optional

from ..spec.config import plain
from ..spec.errors import ConfigError
from ..spec.fields import reason_name
from ..spec.registry import DEFAULT_PROFILE, host_profiles, policy_of, resolve_host_profile
from .delayer import PrefillDelayer, PrefillDelayerSinglePassExecutor
from .server_args import ServerArgs

# The profiles SGLang's delayer call sites (this example's) can drive.
PROFILES = host_profiles()


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


def mixed_workload(rank: int, world: int, k: int) -> tuple[bool, float, int, int, int, int]:
    """``--workload mixed``: the same pseudo-random kind of pass on every rank, in blocks of two passes."""
    kind = random.Random(k // 2).randrange(11)
    if kind in (0, 1):
        return False, 0.9, 0, 0, 256, 0
    if kind in (2, 3, 4):
        return rank % 2 == 0, 0.9, 40, 16, 256, 4
    if kind in (5, 6, 7):
        return True, 0.9, 100, 80, 256, 10 + k % 70
    if kind == 8:
        return True, 0.3 if rank == 1 else 0.9, 100, 80, 1024, 10
    return True, 0.9, 10, 8, 1024, 40


LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _say(problem: str) -> None:
    """One line on stderr, from the first rank only: the other ranks hit the same problem (same arguments, same
    environment) and would only repeat it."""
    if os.environ.get("RANK", "0") == "0":
        print(f"prefill-delayer example: {problem}", file=sys.stderr)


def _problem(args: argparse.Namespace) -> Optional[str]:
    """The first bad option, before the process group is joined."""
    if args.passes < 1:
        return f"--passes must be an integer >= 1, got {args.passes}"
    for name in ("timeout_s", "pass_ms", "max_delay_ms"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            return f"--{name.replace('_', '-')} must be a number > 0, got {plain(value)}"
    try:
        args.profile = resolve_host_profile(args.profile)
    except ConfigError as err:
        return f"--profile: {err}"
    # Here, once, not in each rank's PrefillDelayer after it has joined the process group.
    cap = next((p for p in policy_of(args.profile).params if p.name == "max_delay_passes"), None)
    if cap is not None and not cap.check(args.max_delay_passes):
        return f"--max-delay-passes: expected {cap.valid}, got {args.max_delay_passes}"
    missing = [v for v in LAUNCHER_ENV if not os.environ.get(v)]
    if missing:
        return (f"run it under a launcher that sets {', '.join(missing)}: "
                "torchrun --nproc-per-node N -m prefill_delayer.runtime.example")
    return None


def main(argv: Optional[list[str]] = None) -> int:
    """Exit 2 with one line (the first rank's) for a bad option or configuration, on every rank alike."""
    parser = argparse.ArgumentParser(prog="torchrun --nproc-per-node N -m prefill_delayer.runtime.example")
    parser.add_argument("--passes", type=int, default=8, help="passes per rank (default 8)")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, metavar="NAME",
                        help=f"{', '.join(PROFILES)}, or sglang-X for a release X (default {DEFAULT_PROFILE})")
    parser.add_argument("--max-delay-passes", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=30.0, help="collective timeout of the process group")
    parser.add_argument("--workload", choices=("scripted", "mixed"), default="scripted")
    parser.add_argument("--pass-ms", type=float, default=2.0, help="mixed workload: time between passes (default 2)")
    parser.add_argument("--max-delay-ms", type=float, default=10.0, help="mixed workload: queue trigger timeout (default 10)")
    args = parser.parse_args(argv)
    problem = _problem(args)
    if problem is not None:
        _say(problem)
        return 2
    mixed = args.workload == "mixed"

    warnings.filterwarnings("ignore", message=r".*NumPy.*")
    try:
        import torch.distributed as dist
    except ImportError:  # the runtime extra is not installed: the user's install, said once, not a traceback per rank
        _say("needs torch, which is not installed: pip install 'prefill-delayer[runtime]'")
        return 2

    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=args.timeout_s))
    try:
        rank, world = dist.get_rank(), dist.get_world_size()
        try:
            delayer = PrefillDelayer(
                dp_size=world,
                attn_tp_size=1,
                cpu_group=dist.group.WORLD,
                server_args=ServerArgs(enable_dp_attention=True, prefill_delayer_queue_min_ratio=0.5 if mixed else None,
                                       prefill_delayer_max_delay_ms=args.max_delay_ms if mixed else None),
                max_delay_passes=args.max_delay_passes,
                token_usage_low_watermark=0.5,
                profile=args.profile,
            )
        except ConfigError as err:  # an option or PREFILL_DELAYER_DECISION_LOG_*: the same on every rank
            _say(str(err))
            return 2
        lines = []
        reasons: dict[str, int] = {}
        next_pass = time.perf_counter()
        for k in range(args.passes):
            prefillable, usage, rb, pb, mrr, wq = (mixed_workload if mixed else workload)(rank, world, k)
            if mixed:  # a scheduler's pace, not a busy loop
                next_pass += args.pass_ms / 1000.0
                time.sleep(max(0.0, next_pass - time.perf_counter()))
            executor = PrefillDelayerSinglePassExecutor(delayer, usage)
            allow = executor.negotiate_should_allow_prefill(prefillable, rb, pb, mrr, wq) if prefillable else False
            executor.finalize(actual_prefill=allow)  # negotiates as not prefillable if nothing did
            d = executor._result
            assert d is not None
            reason = reason_name(d.output_reason)  # as check-log names it
            reasons[reason] = reasons.get(reason, 0) + 1
            lines.append(
                f"[rank {rank}/{world}] pass {k}: prefillable={prefillable!s:5} -> allow={d.output_allow!s:5} "
                f"reason={reason:16} input={d.input_estimation:5} "
                f"waited={d.wait_forward_passes} state={delayer.state.control}"
            )
        if mixed:  # one line per rank: the decision log has every pass
            lines = [f"[rank {rank}/{world}] {args.passes} passes: " + ", ".join(f"{r} {n}" for r, n in sorted(reasons.items()))]
        delayer.close()
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
