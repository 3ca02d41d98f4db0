"""``prefill-delayer replay TRACE``: re-run a counterexample through the runtime.

One runtime ``PrefillDelayer`` per rank, freshly built, joined by the runtime's
in-process gather; each rank's clock is injected and reads the trace's
``now_s`` for the current pass. Exit 0 iff every decision matches the trace's
expectations and the recorded violation happens again.
"""

from __future__ import annotations

from typing import Any

from .format import validate_trace
from .violations import find_violation


def run_trace(trace: dict[str, Any], profile: str | None = None) -> list[list[dict[str, Any]]]:
    """Every rank's decision for every pass of ``trace``, from the runtime.

    The trace is validated first, so a malformed one is a ``TraceError`` naming
    the bad entry rather than a failure inside one of the rank threads.
    """
    from ..runtime import PrefillDelayer, ServerArgs, run_ranks

    validate_trace(trace)
    cfg = trace["config"]
    passes = trace["passes"]
    world = len(passes[0]["ranks"])
    server_args = ServerArgs(
        enable_dp_attention=cfg["enable_dp_attention"],
        prefill_delayer_queue_min_ratio=cfg["queue_min_ratio"],
        prefill_delayer_max_delay_ms=cfg["max_delay_ms"],
        prefill_max_requests=cfg["prefill_max_requests"],
    )

    def rank_main(rank: int, gather: Any) -> list[dict[str, Any]]:
        clock_now = [0.0]
        delayer = PrefillDelayer(
            cfg["dp_size"],
            cfg["attn_tp_size"],
            None,
            server_args,
            cfg["max_delay_passes"],
            cfg["token_usage_low_watermark"],
            profile=profile or trace["profile"],
            gather=gather,
            clock=lambda: clock_now[0],
            attn_cp_size=cfg["attn_cp_size"],
            decision_log=False,  # a replay is not a deployment: never write into PREFILL_DELAYER_DECISION_LOG's folder
        )
        out = []
        for p in passes:
            x = p["ranks"][rank]
            clock_now[0] = x["now_s"]
            d = delayer.negotiate(
                x["prefillable"],
                x["token_usage"],
                running_batch=x["running_batch"],
                max_prefill_bs=x["max_prefill_bs"],
                max_running_requests=x["max_running_requests"],
                waiting_queue_len=x["waiting_queue_len"],
            )
            out.append({"allow": d.output_allow, "reason": d.output_reason, "wait_forward_passes": d.wait_forward_passes})
        return out

    per_rank = run_ranks(world, rank_main)
    return [[per_rank[r][i] for r in range(world)] for i in range(len(passes))]


def replay(trace: dict[str, Any]) -> tuple[bool, list[str]]:
    """(reproduced, report lines)."""
    decisions = run_trace(trace)
    lines, mismatches = [], 0
    for i, (p, got) in enumerate(zip(trace["passes"], decisions)):
        for r, (want, have) in enumerate(zip(p["expect"], got)):
            same = want == have
            mismatches += not same
            lines.append(
                f"pass {i} rank {r}: now={p['ranks'][r]['now_s']:g} -> allow={have['allow']} reason={have['reason']!r} "
                f"wait_forward_passes={have['wait_forward_passes']}" + ("" if same else f"   (trace expects {want})")
            )
    found = find_violation(trace["property"], trace["config"], decisions)
    if mismatches:
        lines.append(f"NOT REPRODUCED: {mismatches} decisions differ from the trace")
    elif found is None:
        lines.append(f"NOT REPRODUCED: no {trace['property']} violation in the runtime's decisions")
    else:
        lines.append(f"REPRODUCED ({trace['profile']}, {trace['property']}): {found}")
    return (mismatches == 0 and found is not None), lines
