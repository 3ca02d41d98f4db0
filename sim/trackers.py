"""How a rank's scheduler tracks ``max_prefill_bs``, the value the slot trigger compares free slots with.

Three generations, each a copy of the scheduler code of the releases named:

* ``lifetime`` (0.5.14-0.5.16): ``self.max_prefill_bs = max(self.max_prefill_bs,
  len(can_run_list))`` after every non-empty admission, never lowered: the lifetime
  high-watermark #32880 blames for the starvation;
* ``decay`` (0.5.17, from #32880): the same high-watermark, multiplied by 0.998 at
  the start of every ``get_new_batch_prefill`` (a half-life of about 350 passes),
  passed to the delayer as ``int(...)``;
* ``window`` (0.5.18-0.5.23, #34284): ``RecentPrefillBatchSizeTracker``, the
  largest of the last 16 non-empty prefill attempts; a vetoed attempt counts
  with the executor's estimate ``min(max(waiting, 1), max(max_running - running, 1))``
  (``PrefillDelayerSinglePassExecutor._estimate_attempted_prefill_bs``).
"""

from __future__ import annotations

from collections import deque
from typing import Optional

from ..spec.registry import known_profile, policies, policy_of, resolve_profile
from .errors import SimInputError

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
_TRACKER_OF_RELEASE = {r: t for t, rs in TRACKER_RELEASES.items() for r in rs}
assert {r for pol in policies() for p in pol.profiles for r in p.releases} <= set(_TRACKER_OF_RELEASE), (
    "every SGLang release a profile is needs a tracker"
)


def release_for(name: str) -> Optional[str]:
    """The SGLang release a profile or release name stands for (None: a profile of ours, or ``off``).

    ``sglang-X`` is release X; a profile is its newest release; a profile of
    ours (no release) postdates every release.
    """
    if name.startswith("sglang-") and name[len("sglang-"):] in _TRACKER_OF_RELEASE:
        return name[len("sglang-"):]
    if not known_profile(name):  # "off": no delayer, today's scheduler
        return None
    profile = resolve_profile(name)
    releases = policy_of(profile).profile(profile).releases
    return releases[-1] if releases else None


def tracker_for(name: str) -> str:
    """The tracker of the SGLang release a profile or release name stands for (the newest for ours)."""
    release = release_for(name)
    return _TRACKER_OF_RELEASE[release] if release is not None else WINDOW


class MaxPrefillBsTracker:
    """One rank's ``max_prefill_bs``, updated where its release's scheduler updates it."""

    __slots__ = ("kind", "_value", "_window", "value")

    def __init__(self, kind: str) -> None:
        if kind not in TRACKERS:
            raise SimInputError(f"unknown max_prefill_bs tracker {kind!r}: expected one of {', '.join(TRACKERS)}")
        self.kind = kind
        self._value = 0.0
        self._window: deque[int] = deque(maxlen=WINDOW_SIZE)
        # What the scheduler passes to the delayer: ``int(self.max_prefill_bs)``, kept with ``_value`` (read twice a
        # rank and pass: the facts and the call site's arguments).
        self.value = 0

    def start_pass(self) -> None:
        """Top of ``get_new_batch_prefill``: 0.5.17 decays here, once per pass."""
        if self.kind == DECAY:
            self._value *= DECAY_PER_PASS
            self.value = int(self._value)

    def end_pass(self, batch_size: int, negotiated: Optional[tuple[int, int, int, int]]) -> None:
        """After the pass: ``batch_size`` requests admitted (0: none); ``negotiated`` the arguments the pass
        negotiated with (running_batch, max_prefill_bs, max_running_requests, waiting_queue_len), if it did: an
        attempt that admitted nothing counts in the window with their estimate (``attempted_prefill_bs``), made only
        then."""
        if self.kind == WINDOW:
            observed = batch_size
            if not observed and negotiated is not None:
                running, _, mrr, waiting = negotiated
                observed = attempted_prefill_bs(running, mrr, waiting)
            if observed <= 0:
                return
            # The window's max after appending ``observed``, rescanned only when the max itself drops out.
            window = self._window
            evicted = window[0] if len(window) == WINDOW_SIZE else None
            window.append(observed)
            if observed >= self._value:
                self._value = observed
            elif evicted == self._value:
                self._value = max(window)
            else:
                return
            self.value = int(self._value)
        elif batch_size > self._value:
            self._value = batch_size
            self.value = int(batch_size)


def attempted_prefill_bs(running_batch: int, max_running_requests: int, waiting_queue_len: int) -> int:
    """SGLang 0.5.18+'s estimate of a vetoed attempt's batch size (DP attention: the local limit as is)."""
    # min(max(waiting_queue_len, 1), max(max_running_requests - running_batch, 1)), without the builtins' calls
    free_slots = max_running_requests - running_batch
    if free_slots < 1:
        free_slots = 1
    wanted = waiting_queue_len if waiting_queue_len > 1 else 1
    return wanted if wanted < free_slots else free_slots
