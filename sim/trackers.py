"""How a simulated rank's scheduler tracks ``max_prefill_bs`` (``spec.trackers`` names the three and their releases).

``MaxPrefillBsTracker`` updates it where each release's scheduler does; ``tracker_for``
picks a profile's: its release's, or, for a profile of ours, the one its policy keeps
itself (``HostBinding.own_max_prefill_bs``), else the newest release's.
"""

from __future__ import annotations

from collections import deque
from typing import Optional

from ..spec.registry import known_profile, own_max_prefill_bs, policies, policy_of, resolve_profile
from ..spec.trackers import (DECAY, DECAY_PER_PASS, LIFETIME, TRACKER_OF_RELEASE as _TRACKER_OF_RELEASE,
                             TRACKER_RELEASES, TRACKERS, WINDOW, WINDOW_SIZE, DecayingMax)
from .errors import SimInputError

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
    """The tracker a profile or release name negotiates with: its release's; for a profile of ours, the one its
    policy keeps itself (``HostBinding.own_max_prefill_bs``), else the newest release's."""
    release = release_for(name)
    if release is not None:
        return _TRACKER_OF_RELEASE[release]
    return own_tracker(name) or WINDOW


# ``off``'s: with no delayer nothing reads max_prefill_bs, so none is tracked (the table says so, not a tracker).
NONE = "none"

# The tracker a profile's policy keeps itself in place of the scheduler's argument (None: none, or ``off``).
own_tracker = own_max_prefill_bs


class MaxPrefillBsTracker:
    """One rank's ``max_prefill_bs``, updated where its release's scheduler updates it."""

    __slots__ = ("kind", "_value", "_window", "_decaying", "value")

    def __init__(self, kind: str) -> None:
        if kind not in TRACKERS and kind != NONE:
            raise SimInputError(f"unknown max_prefill_bs tracker {kind!r}: expected one of {', '.join(TRACKERS)}")
        self.kind = kind
        self._value = 0.0
        self._window: deque[int] = deque(maxlen=WINDOW_SIZE)
        # ``decay``: the spec's object, the one a policy that keeps its own tracker runs in the plugin
        self._decaying = DecayingMax() if kind == DECAY else None
        # What the scheduler passes to the delayer: ``int(self.max_prefill_bs)``, kept with ``_value`` (read twice a
        # rank and pass: the facts and the call site's arguments).
        self.value = 0

    def start_pass(self) -> None:
        """Top of ``get_new_batch_prefill``: 0.5.17 decays here, once per pass."""
        decaying = self._decaying
        if decaying is not None:
            decaying.start_pass()
            self.value = decaying.value

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
        elif self._decaying is not None:
            self._decaying.observe(batch_size)
            self.value = self._decaying.value
        elif batch_size > self._value and self.kind != NONE:
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


__all__ = ["DECAY", "DECAY_PER_PASS", "LIFETIME", "NONE", "TRACKERS", "TRACKER_RELEASES", "WINDOW", "WINDOW_SIZE",
           "MaxPrefillBsTracker", "attempted_prefill_bs", "own_tracker", "release_for", "tracker_for"]
