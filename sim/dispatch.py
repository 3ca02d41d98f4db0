"""The DP controller: which rank each request goes to (SGLang 0.5.23's ``DataParallelController``).

Read off ``sglang/srt/managers/data_parallel_controller.py`` of 0.5.23 and 0.5.17:

* ``round_robin`` (the default): ``round_robin_scheduler``, one counter over the ranks;
* ``total_requests`` / ``total_tokens``: ``DPBudget.dispatch``, the rank with the
  fewest requests (running + waiting) or KV tokens (used + waiting prompts) in its
  last load snapshot, plus a speculative +1 request (+ the prompt's tokens) for
  every request sent since; the snapshots are re-read at most every 20 ms
  (``refresh_load_budget``), and a scheduler publishes one after each batch result;
* ``follow_bootstrap_room`` needs PD disaggregation's bootstrap rooms: not simulated.

Health checks (``GET /health`` with generation on sends a ``HEALTH_CHECK_*``
request of one token, ``max_new_tokens=1``) are dispatched as each release does:

* ``shared`` (0.5.14-0.5.22): through the same ``dispatching`` as user requests, so
  under round robin a probe takes the next slot of the user rotation (#35241, #35721);
* ``separate`` (0.5.23, #35721): ``dispatch_health_check``, its own round-robin
  counter (``health_round_robin_counter``), the user rotation untouched.

The receiving scheduler drops a probe unless it is fully idle
(``Scheduler.process_input_requests``, ``is_fully_idle(for_health_check=True)``):
under load a probe never runs, it only moves the rotation (``shared``).
"""

from __future__ import annotations

from typing import Optional, Sequence

from .errors import SimInputError

ROUND_ROBIN, TOTAL_REQUESTS, TOTAL_TOKENS = "round_robin", "total_requests", "total_tokens"
METHODS = (ROUND_ROBIN, TOTAL_REQUESTS, TOTAL_TOKENS)
SHARED, SEPARATE = "shared", "separate"
HEALTH_DISPATCH = (SHARED, SEPARATE)
REFRESH_S = 0.02  # DataParallelController.refresh_load_budget: at most once per 20 ms
# The releases whose DP controller dispatches health checks each way.
HEALTH_DISPATCH_RELEASES = {
    SHARED: ("0.5.14", "0.5.15", "0.5.16", "0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22"),
    SEPARATE: ("0.5.23",),
}


class Dispatcher:
    """One run's DP controller: ``route`` a request (its prompt's tokens) or a health check to a rank."""

    __slots__ = ("method", "health", "dp", "_rr", "_health_rr", "_requests", "_tokens", "_refreshed", "routed_health")

    def __init__(self, method: str, health: str, dp_size: int) -> None:
        if method not in METHODS:
            raise SimInputError(f"unknown load balance method {method!r}: expected one of {', '.join(METHODS)}")
        if health not in HEALTH_DISPATCH:
            raise SimInputError(f"unknown health-check dispatch {health!r}: expected one of {', '.join(HEALTH_DISPATCH)}")
        self.method, self.health, self.dp = method, health, dp_size
        self._rr = 0  # round_robin_counter
        self._health_rr = 0  # health_round_robin_counter (0.5.23)
        self._requests = [0] * dp_size  # DPBudget.total_requests
        self._tokens = [0] * dp_size  # DPBudget.total_tokens
        self._refreshed = -1.0
        self.routed_health = [0] * dp_size  # probes sent to each rank

    def refresh(self, now: float, loads: Sequence[tuple[int, int]]) -> None:
        """``refresh_load_budget`` before a dispatch: ``loads`` is each rank's last snapshot (requests, tokens)."""
        if self.method == ROUND_ROBIN or (self._refreshed >= 0 and now - self._refreshed < REFRESH_S):
            return
        self._refreshed = now
        for r, (requests, tokens) in enumerate(loads):
            self._requests[r] = requests
            self._tokens[r] = tokens

    def route(self, prompt_tokens: int, health_check: bool = False) -> int:
        if health_check and self.health == SEPARATE:
            rank = self._health_rr % self.dp
            self._health_rr = (self._health_rr + 1) % self.dp
        elif self.method == ROUND_ROBIN:
            rank = self._rr % self.dp
            self._rr = (self._rr + 1) % self.dp
        else:
            if self.method == TOTAL_REQUESTS:
                rank = self._requests.index(min(self._requests))
            else:
                rank = min(range(self.dp), key=lambda i: (self._tokens[i], self._requests[i]))
            self._requests[rank] += 1
            self._tokens[rank] += prompt_tokens if self.method == TOTAL_TOKENS else 0
        if health_check:
            self.routed_health[rank] += 1
        return rank


def health_dispatch_for(release: Optional[str]) -> str:
    """How ``release``'s DP controller sends health checks (a profile of ours postdates every release: ``separate``)."""
    for kind, releases in HEALTH_DISPATCH_RELEASES.items():
        if release in releases:
            return kind
    return SEPARATE
