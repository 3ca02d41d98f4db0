"""The guards: every decision of the policy, written once.

Each guard is a small pure function ``g(o, c, v, s)`` over
- ``o``: the operator layer (``PyOps`` here, ``Z3Ops`` in the proofs),
- ``c``: the configuration (``Config``, or its symbolic twin in the proofs),
- ``v``: the gathered view (``View``),
- ``s``: this rank's extended state and local readings (``Local``).
Structural choices (the profile's features, queue trigger on/off, DP
attention) are plain Python ``if``s on the configuration; everything that depends on a pass is
written with ``o`` so it evaluates on Python values and builds Z3 terms alike.
The transition table (``table.py``) names these functions; the FSM, the
proofs and the docs all read them from there.
"""

from __future__ import annotations

from typing import Any

from .profiles import GATHERED_MRR, GATHERED_TIMEOUT, QUEUE_CAPACITY, SKIP_SLOT_ONLY, has

# ----- local (per-rank) guards: computed before the gather -----------------


def local_force(o: Any, c: Any, prefillable: Any, token_usage: Any) -> Any:
    """This rank may prefill and its KV usage is below the low watermark (strict)."""
    return o.And(prefillable, c.watermark_on, token_usage < o.num(c.watermark))


def wait_expired(o: Any, c: Any, s: Any) -> Any:
    """A wait is in progress and this rank's own clock says max_delay_ms has passed."""
    return o.And(s.waiting, (s.now - s.wait_start) * 1000.0 >= o.num(c.max_delay_ms))


# ----- status of the pass ---------------------------------------------------


def status_none(o: Any, c: Any, v: Any, s: Any) -> Any:
    """No counted rank can prefill."""
    return v.num_prefillable == 0


def status_all(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Every counted rank can prefill."""
    return v.num_prefillable == v.n


def status_mixed(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Some counted ranks can prefill, some cannot."""
    return o.And(o.Not(status_none(o, c, v, s)), o.Not(status_all(o, c, v, s)))


def exists_force(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Some counted rank is below the token-usage watermark."""
    return v.num_force > 0


def below_cap(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Another delay keeps the wait under max_delay_passes."""
    return s.delayed_count < c.max_delay_passes - 1


# ----- the `all` branch's triggers ------------------------------------------


def effective_max_running_requests(o: Any, c: Any, v: Any, s: Any) -> Any:
    """This rank's own argument, or the gathered maximum (gathered-max-running-requests)."""
    mrr = v.mrr_max if has(c, GATHERED_MRR) else s.mrr
    return mrr if c.enable_dp_attention else o.ceil_div(mrr, c.dp_size)


def slot_trigger(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Free decode slots are fewer than one prefill batch."""
    return effective_max_running_requests(o, c, v, s) - v.running_batch < v.max_prefill_bs


def queue_capacity(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The cap on the queue target: the gathered PB, or prefill_max_requests when set (queue-capacity)."""
    if has(c, QUEUE_CAPACITY) and c.pmr_on:
        return c.pmr
    return v.max_prefill_bs


def queue_min(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The queue length worth waiting for: min(int(RB * ratio), queue_capacity)."""
    return o.Min(o.floor_mul(v.running_batch, c.queue_ratio), queue_capacity(o, c, v, s))


def queue_timed_out(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The queue wait hit max_delay_ms: on this rank's clock, or on some counted rank's (gathered-timeout)."""
    return v.timeout_any if has(c, GATHERED_TIMEOUT) else wait_expired(o, c, s)


def queue_trigger(o: Any, c: Any, v: Any, s: Any) -> Any:
    """The waiting queue is still shorter than ``queue_min`` and the wait has not timed out."""
    if not c.queue_on:
        return o.FALSE
    q = queue_min(o, c, v, s)
    return o.And(
        v.running_batch > 0,
        q > 0,
        v.waiting_queue_len < q,
        o.Not(queue_timed_out(o, c, v, s)),
    )


def skip_consumed(o: Any, c: Any, v: Any, s: Any) -> Any:
    """This pass uses up the one-shot skip: either trigger, or the slot trigger only (skip-slot-only)."""
    absorbing = slot_trigger(o, c, v, s)
    if not has(c, SKIP_SLOT_ONLY):
        absorbing = o.Or(absorbing, queue_trigger(o, c, v, s))
    return o.And(s.skip_first_armed, absorbing)


def delay_wanted(o: Any, c: Any, v: Any, s: Any) -> Any:
    """A trigger holds and is not absorbed by the one-shot skip."""
    slot, queue = slot_trigger(o, c, v, s), queue_trigger(o, c, v, s)
    if has(c, SKIP_SLOT_ONLY):
        return o.Or(o.And(slot, o.Not(s.skip_first_armed)), queue)
    return o.And(o.Or(slot, queue), o.Not(s.skip_first_armed))


# Guards that may appear in the transition table, by name (docs, mutation tests).
TABLE_GUARDS = (
    "status_none",
    "status_all",
    "status_mixed",
    "exists_force",
    "below_cap",
    "delay_wanted",
)
