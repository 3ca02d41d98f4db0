"""An independent encoding of the released policies, for ``refinement``.

Written from the releases' code (SGLang 0.5.14 ... 0.5.23) and our two fixes as
nested conditionals, switched by the profile's feature ids; it shares no guard,
row, table or effect code with this policy's spec. It is written over the
symbolic operator layer, of which it uses only the connectives and the two
arithmetic primitives the releases' code computes with: ``floor_mul``
(int(RB * ratio) in doubles) and ``ceil_div`` (ceil(mrr / dp_size)), so that both
encodings read the same value.
"""

from __future__ import annotations

from typing import Any

from . import profiles as f
from .table import REASONS

IDLE, DELAYING = 0, 1  # the control states' codes (their place in variables.STATES)
CODE = {r: i for i, r in enumerate(REASONS)}


def reference_local_force(o: Any, c: Any, prefillable: Any, token_usage: Any) -> Any:
    """force = prefillable and W is not None and token_usage < W (strict)."""
    return o.And(prefillable, c.watermark_on, token_usage < o.num(c.watermark))


def reference_timeout_flag(o: Any, c: Any, waiting: Any, now: Any, start: Any) -> Any:
    return o.And(waiting, (now - start) * 1000 >= o.num(c.max_delay_ms))


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    """The row as the releases build it, field by field (0.5.22's six fields, plus the gathered mrr)."""
    return [
        o.If(inp.local_prefillable, 1, 0),
        o.If(reference_local_force(o, c, inp.local_prefillable, inp.token_usage), 1, 0),
        inp.running_batch,
        inp.max_prefill_bs,
        inp.waiting_queue_len,
        o.If(reference_timeout_flag(o, c, s.waiting, s.now, s.wait_start), 1, 0),
        inp.max_running_requests,
    ]


def reference_pass(o: Any, c: Any, st: Any, v: Any, now: Any, inp: Any) -> tuple[dict, tuple]:
    """(outputs by name, next state as (control code, delayed_count, wait_start, skip_first_armed))."""
    feats = c.features
    mrr_local = inp.max_running_requests
    waiting = st.control == "delaying"
    count = o.If(waiting, st.delayed_count, 0)
    wait_s = o.If(waiting, now - st.wait_start, 0)

    def release(reason: str, armed: Any = None) -> tuple:
        return (CODE[reason], True, count, wait_s, IDLE, 0, o.RealVal(0), st.skip_first_armed if armed is None else armed)

    def delay(armed: Any = None) -> tuple:
        start = o.If(waiting, st.wait_start, now)
        return (CODE["delay"], False, 0, o.RealVal(0), DELAYING, count + 1, start, st.skip_first_armed if armed is None else armed)

    def pick(cond: Any, a: tuple, b: tuple) -> tuple:
        return tuple(o.If(cond, x, y) for x, y in zip(a, b))

    all_ = v.num_prefillable == v.n
    none = v.num_prefillable == 0
    force = v.num_force > 0
    under_cap = count < c.max_delay_passes - 1

    # --- all branch ---
    mrr = v.mrr_max if f.GATHERED_MRR in feats else mrr_local
    if not c.enable_dp_attention:
        mrr = o.ceil_div(mrr, c.dp_size)
    slot = mrr - v.running_batch < v.max_prefill_bs
    if c.queue_on:
        q_raw = o.floor_mul(v.running_batch, c.queue_ratio)
        cap = c.pmr if (f.QUEUE_CAPACITY in feats and c.pmr_on) else v.max_prefill_bs
        q = o.If(q_raw < cap, q_raw, cap)
        if f.GATHERED_TIMEOUT in feats:
            timed_out = v.timeout_any
        else:
            timed_out = o.And(waiting, (now - st.wait_start) * 1000 >= o.num(c.max_delay_ms))
        queue = o.And(v.running_batch > 0, q > 0, v.waiting_queue_len < q, o.Not(timed_out))
    else:
        queue = o.BoolVal(False)
    if f.SKIP_SLOT_ONLY in feats:
        # Only the slot trigger consumes the one-shot skip.
        skip = o.And(st.skip_first_armed, slot)
        wants = o.Or(o.And(slot, o.Not(st.skip_first_armed)), queue)
    else:
        skip = o.And(o.Or(slot, queue), st.skip_first_armed)
        wants = o.And(o.Or(slot, queue), o.Not(st.skip_first_armed))
    armed_after = o.And(st.skip_first_armed, o.Not(skip))
    if f.ALL_BRANCH_CAP in feats:
        held = pick(under_cap, delay(armed_after), release("wait_timeout", armed_after))
    else:
        held = delay(armed_after)
    allow_reason = o.If(waiting, CODE["wait_success"], CODE["no_wait"])
    allowed = (allow_reason,) + release("no_wait", armed_after)[1:]
    all_branch = pick(wants, held, allowed)

    mixed_branch = pick(force, release("token_watermark"), pick(under_cap, delay(), release("wait_timeout")))
    all_branch = pick(force, release("token_watermark"), all_branch)
    reason, allow, wfp, ws, nctrl, ncount, nstart, narmed = pick(all_, all_branch, pick(none, release(""), mixed_branch))
    outputs = {"output_reason": reason, "output_allow": allow, "wait_forward_passes": wfp, "wait_seconds": ws}
    return outputs, (nctrl, ncount, nstart, narmed)
