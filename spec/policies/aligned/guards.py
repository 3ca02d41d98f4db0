"""The aligned policy's guards: the delayer's, and one more that asks whether a delay is still worth it.

A delayed mixed pass costs little while the ranks that cannot prefill run a
decode batch: the wait overlaps useful work. When no counted rank has a running
batch every held pass is lost on every rank, so the hold is cut to a few passes:
enough for ranks whose chunks end a few passes apart to line up, not the whole
max_delay_passes.
"""

from __future__ import annotations

from typing import Any

from ..sglang_delayer.guards import (
    below_cap, delay_wanted, effective_max_running_requests, exists_force, local_force, queue_capacity, queue_min,
    queue_timed_out, queue_trigger, skip_consumed, slot_trigger, status_all, status_mixed, status_none, wait_expired,
)


# The stall give-up when no decode hides the wait: at most this many delays, counted in passes (no clock).
NO_DECODE_HOLD = 8


def wait_hidden(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Another delay is worth it: some counted rank runs a decode batch that overlaps it, or the wait is still
    shorter than NO_DECODE_HOLD passes (a short hold lets ranks whose chunks end a few passes apart line up)."""
    return o.Or(v.running_batch > 0, s.delayed_count < NO_DECODE_HOLD)


GUARD_NAMES = (
    "local_force", "wait_expired", "status_none", "status_all", "status_mixed", "exists_force", "below_cap",
    "effective_max_running_requests", "slot_trigger", "queue_capacity", "queue_min", "queue_timed_out", "queue_trigger",
    "skip_consumed", "delay_wanted", "wait_hidden",
)
TABLE_GUARDS = ("status_none", "status_all", "status_mixed", "exists_force", "below_cap", "delay_wanted", "wait_hidden")

__all__ = list(GUARD_NAMES) + ["GUARD_NAMES", "NO_DECODE_HOLD", "TABLE_GUARDS"]
