"""An independent Z3 encoding of the released policies, for ``refinement``.

Written from the releases' code (SGLang 0.5.14 ... 0.5.23) and our two fixes as
nested conditionals in raw Z3, switched by the profile's feature ids; it shares
no guard or table code with the spec. Only the arithmetic primitives of
``z3ops`` are reused: ``floor_mul_term`` (int(RB * ratio): exact double rounding
at a configured ratio, tested against Python itself; every ratio at once as one
uninterpreted function) and ``ceil_div_term`` (exact for a configured dp_size;
every dp_size at once likewise), so that both encodings read the same value.
"""

from __future__ import annotations

from typing import Any

import z3

from ..spec import profiles as f
from .model import CTRL, REASON_CODE, Outcome, SymConfig, SymState
from .z3ops import ceil_div_term, exact_real, floor_mul_term

IDLE, DELAYING = CTRL["idle"], CTRL["delaying"]


def reference_local_force(c: SymConfig, prefillable: Any, token_usage: Any) -> Any:
    """force = prefillable and W is not None and token_usage < W (strict)."""
    return z3.And(prefillable, c.watermark_on, token_usage < exact_real(c.watermark))


def reference_timeout_flag(c: SymConfig, waiting: Any, now: Any, start: Any) -> Any:
    return z3.And(waiting, (now - start) * 1000 >= exact_real(c.max_delay_ms))


def reference_pass(c: SymConfig, st: SymState, v: Any, now: Any, mrr_local: Any, side: list) -> Outcome:
    feats = c.features
    waiting = st.ctrl == DELAYING
    count = z3.If(waiting, st.count, 0)
    wait_s = z3.If(waiting, now - st.start, 0)

    def release(reason: str, armed: Any = None) -> tuple:
        return (REASON_CODE[reason], True, count, wait_s, IDLE, 0, z3.RealVal(0), st.armed if armed is None else armed)

    def delay(armed: Any = None) -> tuple:
        start = z3.If(waiting, st.start, now)
        return (REASON_CODE["delay"], False, 0, z3.RealVal(0), DELAYING, count + 1, start, st.armed if armed is None else armed)

    def pick(cond: Any, a: tuple, b: tuple) -> tuple:
        return tuple(z3.If(cond, x, y) for x, y in zip(a, b))

    all_ = v.num_prefillable == v.n
    none = v.num_prefillable == 0
    force = v.num_force > 0
    under_cap = count < c.max_delay_passes - 1

    # --- all branch ---
    mrr = v.mrr_max if f.GATHERED_MRR in feats else mrr_local
    if not c.enable_dp_attention:
        mrr = ceil_div_term(mrr, c.dp_size, side)
    slot = mrr - v.running_batch < v.max_prefill_bs
    if c.queue_on:
        q_raw = floor_mul_term(v.running_batch, c.queue_ratio, side)
        cap = c.pmr if (f.QUEUE_CAPACITY in feats and c.pmr_on) else v.max_prefill_bs
        q = z3.If(q_raw < cap, q_raw, cap)
        if f.GATHERED_TIMEOUT in feats:
            timed_out = v.timeout_any
        else:
            timed_out = z3.And(waiting, (now - st.start) * 1000 >= exact_real(c.max_delay_ms))
        queue = z3.And(v.running_batch > 0, q > 0, v.waiting_queue_len < q, z3.Not(timed_out))
    else:
        queue = z3.BoolVal(False)
    if f.SKIP_SLOT_ONLY in feats:
        # Only the slot trigger consumes the one-shot skip.
        skip = z3.And(st.armed, slot)
        wants = z3.Or(z3.And(slot, z3.Not(st.armed)), queue)
    else:
        skip = z3.And(z3.Or(slot, queue), st.armed)
        wants = z3.And(z3.Or(slot, queue), z3.Not(st.armed))
    armed_after = z3.And(st.armed, z3.Not(skip))
    if f.ALL_BRANCH_CAP in feats:
        held = pick(under_cap, delay(armed_after), release("wait_timeout", armed_after))
    else:
        held = delay(armed_after)
    allow_reason = z3.If(waiting, REASON_CODE["wait_success"], REASON_CODE["no_wait"])
    allowed = (allow_reason,) + release("no_wait", armed_after)[1:]
    all_branch = pick(wants, held, allowed)

    mixed_branch = pick(force, release("token_watermark"), pick(under_cap, delay(), release("wait_timeout")))
    all_branch = pick(force, release("token_watermark"), all_branch)
    res = pick(all_, all_branch, pick(none, release(""), mixed_branch))
    reason, allow, wfp, ws, nctrl, ncount, nstart, narmed = res
    return Outcome(reason, allow, wfp, ws, SymState(nctrl, ncount, nstart, narmed))
