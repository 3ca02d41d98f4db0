"""What one rank sends in the all-gather, and how the gathered view folds the rows.

The seed's five fields come first; gathered-timeout and gathered-max-running-requests
read the next two. The runtime appends its envelope after them (``runtime.envelope``:
the input-error mask and the configuration fingerprint), the same for every policy.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ...fields import BOOL, COUNT, Field
from ...policy import ALL, Agg
from . import guards
from .variables import Local, PassInput

ROW = (
    Field("prefillable", BOOL, "this rank can prefill (local_prefillable)"),
    Field("force", BOOL, "prefillable and KV usage below the low watermark (local_force)"),
    Field("running_batch", COUNT, "its running batch"),
    Field("max_prefill_bs", COUNT, "its max_prefill_bs"),
    Field("waiting_queue_len", COUNT, "its waiting queue"),
    Field("timeout_expired", BOOL, "its wait hit max_delay_ms on its own clock (wait_expired)"),
    Field("max_running_requests", COUNT, "its max_running_requests"),
)


def local_row(o: Any, c: Any, inp: PassInput, s: Local) -> list[Any]:
    """This rank's row: the fields of ``ROW``, in order."""
    return [
        o.b2i(inp.local_prefillable),
        o.b2i(guards.local_force(o, c, inp.local_prefillable, inp.token_usage)),
        inp.running_batch,
        inp.max_prefill_bs,
        inp.waiting_queue_len,
        o.b2i(guards.wait_expired(o, c, s)),
        inp.max_running_requests,
    ]


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


# The fold, as data: what each View field is, over which rows.
VIEW = (
    Agg("n", "count", None, doc="counted rows"),
    Agg("num_prefillable", "sum", "prefillable"),
    Agg("num_force", "sum", "force"),
    Agg("running_batch", "max", "running_batch", sym="RB"),
    Agg("max_prefill_bs", "max", "max_prefill_bs", sym="PB"),
    Agg("waiting_queue_len", "max", "waiting_queue_len", sym="WQ"),
    # As SGLang 0.5.22 reads its gathered flag: the max over the counted rows.
    Agg("timeout_any", "any", "timeout_expired"),
    # Ours (gathered-max-running-requests): every gathered row, so no rank's value is lost.
    Agg("mrr_max", "max", "max_running_requests", over=ALL),
)


def view_domain(o: Any, c: Any, v: View) -> list:
    """Exactly what rows can give (``aggregate-view`` proves both directions for every layout)."""
    from ...fields import MAX_COUNT

    def count(x: Any) -> Any:
        return o.And(x >= 0, x <= MAX_COUNT)

    return [
        v.n >= 1,
        0 <= v.num_force,
        v.num_force <= v.num_prefillable,  # a row's force flag implies its prefillable flag
        v.num_prefillable <= v.n,
        # force needs the watermark on and some usage (>= 0) strictly below it
        o.Or(o.Not(v.num_force > 0), o.And(c.watermark_on, c.watermark > 0)),
        count(v.running_batch),
        count(v.max_prefill_bs),
        count(v.waiting_queue_len),
        count(v.mrr_max),
    ]


def status_name(o: Any, c: Any, v: View) -> Any:
    """The seed's ``input_estimation`` string (``all`` is tested first, as the seed does).

    Written with ``o.If`` so that ``fsm.compiled`` can derive it too; it needs an
    operator layer whose ``If`` takes strings (``PyOps``, ``fsm.compiled.SrcOps``).
    """
    return o.If(guards.status_all(o, c, v, None), "all", o.If(guards.status_none(o, c, v, None), "none", "mixed"))
