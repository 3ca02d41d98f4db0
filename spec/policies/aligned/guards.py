"""The aligned policy's guards: the delayer's, three more that ask whether a delay is still worth it, and the
delayer's force guard, which a busy rank holds back while the watermark is aligned's own (``busy``).

A delayed mixed pass costs little while the ranks that cannot prefill run a
decode batch: the wait overlaps useful work. When no counted rank has a running
batch every held pass is lost on every rank, so the hold is cut to a few passes:
enough for ranks whose chunks end a few passes apart to line up, not the whole
max_delay_passes.
"""

from __future__ import annotations

from typing import Any

from ..sglang_delayer import guards as _delayer
from ..sglang_delayer.properties import NO_DECODE_HOLD
from .busy import busy_hold

_GUARD_ORDER = (
    "local_force", "wait_expired", "status_none", "status_all", "status_mixed", "exists_force", "below_cap",
    "effective_max_running_requests", "slot_trigger", "queue_capacity", "queue_min", "queue_timed_out", "queue_trigger",
    "skip_consumed", "delay_wanted",
)
_OWN = ("exists_force",)  # the delayer's guards aligned writes anew (below), around the delayer's own
_DELAYER_GUARDS = tuple(name for name in _GUARD_ORDER if name not in _OWN)


def __getattr__(name: str) -> Any:
    """The delayer's guards, unchanged (hardened's features pick their variants), read when used: a patched
    delayer guard shows here too."""
    if name in _DELAYER_GUARDS:
        return getattr(_delayer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# NO_DECODE_HOLD, the stall give-up when no decode hides the wait: at most this many delays, counted in passes (no
# clock). It is the bound of the delayer's catalogue property no-decode-hold, which aligned proves and every release
# refutes.


def exists_force(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Some counted rank is prefillable below the watermark, and, while that watermark is aligned's own, no counted
    rank is busy (``busy``: a low rank beside a half-full one is a drained rank, not a group at low load)."""
    return o.And(_delayer.exists_force(o, c, v, s), o.Not(busy_hold(o, c, v)))


def wait_hidden(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Another delay is worth it: some counted rank runs a decode batch that overlaps it, or the wait is still
    shorter than NO_DECODE_HOLD passes (a short hold lets ranks whose chunks end a few passes apart line up)."""
    return o.Or(v.running_batch > 0, s.delayed_count < NO_DECODE_HOLD)


def long_chunk(o: Any, c: Any, v: Any, s: Any) -> Any:
    """Some counted rank is mid-way through a chunked prompt with at least long_chunk_tokens left: it prefills every
    pass whatever the verdict, so delaying the others aligns nothing with it (``chunk``)."""
    return v.num_long_chunk > 0


def quorum(o: Any, c: Any, v: Any, s: Any) -> Any:
    """At least quorum_percent of the counted ranks have prefill work, but not all (the rule on; in integers, so
    exact): the hold would wait for a request to reach a rank with none, costing the ready ranks' requests a pass
    each to save at most one pass's attention term (``quorum``)."""
    return o.And(c.quorum_on, o.Not(v.num_work * 100 < c.quorum_min * v.n), v.num_work < v.n)


GUARD_NAMES = _GUARD_ORDER + ("wait_hidden", "long_chunk", "quorum")
TABLE_GUARDS = ("status_none", "status_all", "status_mixed", "exists_force", "below_cap", "delay_wanted", "wait_hidden",
                "long_chunk", "quorum")

__all__ = ["GUARD_NAMES", "NO_DECODE_HOLD", "TABLE_GUARDS", "exists_force", "long_chunk", "quorum", "wait_hidden"]
