"""How a scheduler tracks ``max_prefill_bs``, the value the delayer's slot trigger compares free slots with.

Three generations of SGLang's scheduler code, by release (``TRACKER_RELEASES``):

* ``lifetime`` (0.5.14-0.5.16): ``self.max_prefill_bs = max(self.max_prefill_bs,
  len(can_run_list))`` after every non-empty admission, never lowered: the lifetime
  high-watermark #32880 blames for the starvation;
* ``decay`` (0.5.17, from #32880): the same high-watermark, multiplied by 0.998 at
  the start of every ``get_new_batch_prefill`` (a half-life of about 350 passes),
  passed to the delayer as ``int(...)``;
* ``window`` (0.5.18-0.5.23, #34284): ``RecentPrefillBatchSizeTracker``, the
  largest of the last 16 non-empty prefill attempts; a vetoed attempt counts
  with the executor's estimate.

A policy may keep its own instead of the scheduler's (``HostBinding.own_max_prefill_bs``):
``DecayingMax`` is the ``decay`` tracker as data the delayer's executor updates, at its
construction (the top of ``get_new_batch_prefill``) and at ``finalize(actual_prefill_bs=)``,
and the simulator runs the same object for ``decay``, so the two cannot drift apart.
"""

from __future__ import annotations

LIFETIME, DECAY, WINDOW = "lifetime", "decay", "window"
TRACKERS = (LIFETIME, DECAY, WINDOW)
DECAY_PER_PASS = 0.998  # SGLang 0.5.17 scheduler.get_new_batch_prefill
WINDOW_SIZE = 16  # SGLANG_PREFILL_DELAYER_MAX_PREFILL_BS_WINDOW_SIZE's default
# The releases whose scheduler uses each tracker.
TRACKER_RELEASES = {
    LIFETIME: ("0.5.14", "0.5.15", "0.5.16"),
    DECAY: ("0.5.17",),
    WINDOW: ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"),
}
TRACKER_OF_RELEASE = {r: t for t, rs in TRACKER_RELEASES.items() for r in rs}


class DecayingMax:
    """SGLang 0.5.17's ``max_prefill_bs``: the largest batch admitted, decayed ×0.998 at the top of every pass.

    ``value`` is what the delayer negotiates with (``int()`` of the mark, as 0.5.17 passes it).
    """

    __slots__ = ("_mark", "value")

    def __init__(self) -> None:
        self._mark = 0.0
        self.value = 0

    def start_pass(self) -> None:
        """The top of ``get_new_batch_prefill``: decay once per pass."""
        self._mark *= DECAY_PER_PASS
        self.value = int(self._mark)

    def observe(self, batch_size: int) -> None:
        """The pass admitted ``batch_size`` requests (0: none): raise the mark to it."""
        if batch_size > self._mark:
            self._mark = batch_size
            self.value = int(batch_size)
