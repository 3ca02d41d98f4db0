"""What one rank sends in the all-gather and what the decision reads from all rows."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from . import guards
from .inputs import PassInput

# One rank's row of the all-gather, in order, the same in every profile. The
# seed's five fields come first; gathered-timeout and gathered-max-running-requests
# read the next two; the last two let every rank detect a peer with a bad input
# or a different configuration.
ROW_FIELDS = (
    "prefillable",
    "force",
    "running_batch",
    "max_prefill_bs",
    "waiting_queue_len",
    "timeout_expired",
    "max_running_requests",
    "input_error",
    "config_fingerprint",
)
ROW_LEN = len(ROW_FIELDS)
F_PREFILLABLE, F_FORCE, F_RB, F_PB, F_WQ, F_TIMEOUT, F_MRR, F_ERROR, F_FINGERPRINT = range(ROW_LEN)


class View(NamedTuple):
    """The aggregates the decision reads, over the counted rows (the first rank of each DP group)."""

    n: Any  # counted rows (dp_size with DP attention, else 1)
    num_prefillable: Any
    num_force: Any
    running_batch: Any  # max over counted rows
    max_prefill_bs: Any  # max
    waiting_queue_len: Any  # max
    timeout_any: Any  # some counted row's wait expired (gathered-timeout reads it)
    mrr_max: Any  # max of max_running_requests over all gathered rows (gathered-max-running-requests)


class Local(NamedTuple):
    """This rank's extended state and local readings for one pass.

    ``wait_start`` equals ``now`` when no wait is in progress, so elapsed time is
    0 there rather than undefined.
    """

    waiting: Any
    delayed_count: Any
    wait_start: Any
    skip_first_armed: Any
    now: Any
    mrr: Any  # this rank's max_running_requests argument


def local_row(o: Any, c: Any, inp: PassInput, s: Local) -> list[Any]:
    """The first seven fields of this rank's row (the runtime appends error and fingerprint)."""
    return [
        o.b2i(inp.local_prefillable),
        o.b2i(guards.local_force(o, c, inp.local_prefillable, inp.token_usage)),
        inp.running_batch,
        inp.max_prefill_bs,
        inp.waiting_queue_len,
        o.b2i(guards.wait_expired(o, c, s)),
        inp.max_running_requests,
    ]


def counted_rows(c: Any, rows: Sequence[Sequence[Any]]) -> Sequence[Sequence[Any]]:
    """The first row of each DP group (attn_cp x attn_tp ranks, DP-major), from all rows in global rank order."""
    return rows[:: c.group_size][: c.dp_dim]


def gathered_view(o: Any, c: Any, rows: Sequence[Sequence[Any]]) -> View:
    """Aggregate the counted rows into the view the guards read."""
    counted = counted_rows(c, rows)
    return View(
        n=len(counted),
        num_prefillable=o.SumOf(r[F_PREFILLABLE] for r in counted),
        num_force=o.SumOf(r[F_FORCE] for r in counted),
        running_batch=o.MaxOf([r[F_RB] for r in counted]),
        max_prefill_bs=o.MaxOf([r[F_PB] for r in counted]),
        waiting_queue_len=o.MaxOf([r[F_WQ] for r in counted]),
        # As SGLang 0.5.22 reads its gathered flag: the max over the counted rows.
        timeout_any=o.SumOf(r[F_TIMEOUT] for r in counted) > 0,
        # Ours (gathered-max-running-requests): every gathered row, so no rank's value is lost.
        mrr_max=o.MaxOf([r[F_MRR] for r in rows]),
    )


def status_name(o: Any, c: Any, v: View) -> Any:
    """The seed's ``input_estimation`` string (``all`` is tested first, as the seed does).

    Written with ``o.If`` so that ``fsm.compiled`` can derive it too; it needs an
    operator layer whose ``If`` takes strings (``PyOps``, ``fsm.compiled.SrcOps``).
    """
    return o.If(guards.status_all(o, c, v, None), "all", o.If(guards.status_none(o, c, v, None), "none", "mixed"))
