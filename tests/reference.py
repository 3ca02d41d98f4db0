"""An independent reference model of one pass of the prefill delayer, on every rank.

Written as plain nested conditionals from the released code
(``PrefillDelayer._negotiate_should_allow_prefill_pure`` of SGLang 0.5.14 ...
0.5.23) line by line where it can, plus our two fixes, each switched by the
profile's feature id. It deliberately does NOT import ``spec.guards``,
``spec.table``, ``spec.view`` or ``spec.ops``: the FSM is built from those, and
this model is what the FSM is compared against. Only ``Config`` (its parameters
and its profile's feature ids) is read.

A rank's state is the seed's: ``wait`` is ``None`` (no wait in progress) or
``(delayed_count, start_time)``, plus the one-shot ``skip_first_delayer``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Sequence


class RankInput(NamedTuple):
    """One rank's arguments to ``negotiate`` for one pass, and its clock reading."""

    prefillable: bool
    token_usage: float
    running_batch: int = 0
    max_prefill_bs: int = 0
    waiting_queue_len: int = 0
    max_running_requests: int = 0
    now: float = 0.0


@dataclass(frozen=True)
class RefState:
    wait: Optional[tuple[int, float]] = None  # (delayed_count, start_time)
    skip_first_delayer: bool = True


class RefOutcome(NamedTuple):
    allow: bool
    reason: str
    input_estimation: str
    num_prefillable: int
    num_force: int
    wait_forward_passes: int
    wait_seconds: float
    next_state: RefState


def _max_delay_ms(config) -> float:
    return 5000.0 if config.max_delay_ms is None else float(config.max_delay_ms)


def reference_pass(config, ranks: Sequence[RankInput], states: Sequence[RefState]) -> list[RefOutcome]:
    """One pass on every rank of the gather (``ranks`` in global rank order)."""
    feats = config.features
    if config.enable_dp_attention:
        dp_dim = config.dp_size
    else:
        dp_dim = 1
    per_group = config.attn_cp_size * config.attn_tp_size
    if len(ranks) != dp_dim * per_group or len(states) != len(ranks):
        raise ValueError("one input and one state per rank of the gather")
    watermark = config.token_usage_low_watermark
    max_ms = _max_delay_ms(config)

    # --- what each rank sends ---------------------------------------------
    sent = []
    for inp, st in zip(ranks, states):
        force = False
        if inp.prefillable:
            if watermark is not None:
                if inp.token_usage < watermark:
                    force = True
        expired = False
        if st.wait is not None:
            if (inp.now - st.wait[1]) * 1000.0 >= max_ms:
                expired = True
        sent.append(
            {
                "prefillable": 1 if inp.prefillable else 0,
                "force": 1 if force else 0,
                "rb": inp.running_batch,
                "pb": inp.max_prefill_bs,
                "wq": inp.waiting_queue_len,
                "expired": expired,
                "mrr": inp.max_running_requests,
            }
        )

    # --- the releases read the (dp_dim, [attn_cp_size *] attn_tp_size, 5|6) table's [:, 0, :]
    tp0 = []
    for dp in range(dp_dim):
        tp0.append(sent[dp * per_group + 0])

    min_prefillable = min(r["prefillable"] for r in tp0)
    max_prefillable = max(r["prefillable"] for r in tp0)
    if min_prefillable > 0:
        status = "all"
    elif max_prefillable == 0:
        status = "none"
    else:
        status = "mixed"
    any_force = max(r["force"] for r in tp0) > 0
    num_prefillable = sum(r["prefillable"] for r in tp0)
    num_force = sum(r["force"] for r in tp0)
    rb_max = max(r["rb"] for r in tp0)
    pb_max = max(r["pb"] for r in tp0)
    wq_max = max(r["wq"] for r in tp0)
    # 0.5.22: tp0_info[:, 5].max() > 0, over the counted rows only
    any_expired = False
    for r in tp0:
        if r["expired"]:
            any_expired = True
    # ours: over ALL gathered rows
    gathered_mrr_max = max(r["mrr"] for r in sent)

    outcomes = []
    for inp, st in zip(ranks, states):
        outcomes.append(
            _decide(
                config, feats, max_ms, inp, st, status, any_force, num_prefillable, num_force,
                rb_max, pb_max, wq_max, any_expired, gathered_mrr_max,
            )
        )
    return outcomes


def _decide(config, feats, max_ms, inp, st, status, any_force, num_prefillable, num_force,
            rb_max, pb_max, wq_max, any_expired, gathered_mrr_max) -> RefOutcome:
    now = inp.now
    prev = st.wait
    skip = st.skip_first_delayer

    if prev is not None:
        wait_passes = prev[0]
        wait_secs = now - prev[1]
    else:
        wait_passes = 0
        wait_secs = 0.0

    def release(reason: str, skip_after: bool) -> RefOutcome:
        return RefOutcome(True, reason, status, num_prefillable, num_force, wait_passes, wait_secs,
                          RefState(None, skip_after))

    def delay(skip_after: bool) -> RefOutcome:
        if prev is None:
            nxt = (1, now)
        else:
            nxt = (prev[0] + 1, prev[1])
        return RefOutcome(False, "delay", status, num_prefillable, num_force, 0, 0.0, RefState(nxt, skip_after))

    if status == "all":
        if any_force:
            return release("token_watermark", skip)

        if "gathered-max-running-requests" in feats:
            mrr = gathered_mrr_max
        else:
            mrr = inp.max_running_requests
        if not config.enable_dp_attention:
            mrr = (mrr + config.dp_size - 1) // config.dp_size

        queue = False
        if config.queue_min_ratio is not None and rb_max > 0:
            capacity = pb_max
            if "queue-capacity" in feats and config.prefill_max_requests is not None:
                capacity = config.prefill_max_requests
            q = min(int(rb_max * config.queue_min_ratio), capacity)
            queue = q > 0 and wq_max < q
            if queue:
                if "gathered-timeout" in feats:
                    if any_expired:
                        queue = False
                else:
                    if prev is not None:
                        if (now - prev[1]) * 1000.0 >= max_ms:
                            queue = False

        slot = mrr - rb_max < pb_max

        if "skip-slot-only" in feats:
            if slot and skip:
                # the one-shot skip absorbs the slot trigger only
                skip = False
                slot = False
            held = slot or queue
        else:
            held = False
            if slot or queue:
                if skip:
                    skip = False
                else:
                    held = True
        if held:
            if "all-branch-cap" in feats:
                delayed = prev[0] if prev is not None else 0
                if delayed < config.max_delay_passes - 1:
                    return delay(skip)
                else:
                    return release("wait_timeout", skip)
            return delay(skip)

        if prev is not None:
            return release("wait_success", skip)
        else:
            return release("no_wait", skip)

    elif status == "none":
        return release("", skip)

    else:  # mixed
        if any_force:
            return release("token_watermark", skip)
        delayed = prev[0] if prev is not None else 0
        if delayed < config.max_delay_passes - 1:
            return delay(skip)
        else:
            return release("wait_timeout", skip)
