"""SGLang 0.5.23's prefill-decode interval, per rank: the deferred pass takes part in the delayer's all-gather.

What 0.5.23 does (``sglang/srt/managers/scheduler.py``): ``get_next_batch_to_run``
asks ``Scheduler._should_defer_prefill(running_batch)`` before
``get_new_batch_prefill``; with ``--prefill-decode-interval`` armed and
``--prefill-decode-interval-min-bs`` above 0, each rank compares *its own*
running batch with ``min_bs``. A rank at or above it defers: it skips
``get_new_batch_prefill``, and with it the delayer's all-gather, while a peer
below ``min_bs`` runs it. With DP attention both then run the mlp-sync
all-gather (``prepare_mlp_sync_batch_raw``) on the same ``tp_group.cpu_group``,
so the prefilling rank's delayer gather pairs with the deferring rank's
mlp-sync gather. On gloo (what ``tests/test_sglang_scheduler.py`` runs) the
rank whose rows are shorter (the delayer's: 6 int64 in SGLang's own class, 10
in ours, against 11) aborts (``gloo::EnforceNotMet``: "Received data size
doesn't match expected size"), the other reads the delayer's row as its
mlp-sync row, silently, and fails on its next collective with the peer gone.

The guard: after ``_should_defer_prefill`` returns True on a rank whose delayer is
ours, the delayer takes part in the pass's all-gather as skipping
(``PolicyCore.skip``). When every rank defers, nothing is decided and nothing
changes (as in SGLang, the pass is not the delayer's); when some rank runs
``get_new_batch_prefill`` instead, every rank raises the same ``DesyncError`` in
that pass, naming the deferring ranks, before any mlp-sync gather can pair with
the wrong collective. Releases 0.5.19 to 0.5.22 defer on every rank alike
(``_should_defer_prefill()`` takes no batch and reads only the interval, armed
from the gathered ``is_extend_in_batch``), and 0.5.14 to 0.5.18 do not defer,
so they need no guard (read from each release's ``scheduler.py``).
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
TARGET = f"{SCHEDULER_MODULE}.Scheduler._should_defer_prefill"
# The releases whose _should_defer_prefill reads the rank's own running batch (read from each release's scheduler.py).
PER_RANK_RELEASES = ("0.5.23",)
_GUARDED = "_prefill_delayer_deferral_guard"


def needs_guard(release: str) -> bool:
    """Whether ``release``'s scheduler may defer prefill on some ranks and not others."""
    return release in PER_RANK_RELEASES


def skip_deferred_pass(deferred: Any, scheduler: Any, *args: Any, **kwargs: Any) -> Any:
    """The AFTER hook of ``Scheduler._should_defer_prefill``: a deferred pass takes part in the delayer's gather."""
    if deferred:
        skip = getattr(getattr(scheduler, "prefill_delayer", None), "skip_pass", None)
        if skip is not None:  # ours (SGLang's own class has no skip_pass; a rank without a delayer gathers nothing)
            skip()
    return deferred


def guard(original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (``Scheduler._should_defer_prefill``) followed by ``skip_deferred_pass``: what ``install`` puts in place."""
    if getattr(original, _GUARDED, False):
        return original

    @functools.wraps(original)
    def _should_defer_prefill(self: Any, *args: Any, **kwargs: Any) -> Any:
        return skip_deferred_pass(original(self, *args, **kwargs), self, *args, **kwargs)

    setattr(_should_defer_prefill, _GUARDED, True)
    return _should_defer_prefill


def scheduler_loaded() -> bool:
    """The scheduler module is imported in this process: a scheduler process (``run_scheduler_process`` lives there)."""
    return SCHEDULER_MODULE in sys.modules
