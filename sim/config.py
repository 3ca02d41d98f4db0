"""The settings of one simulation, validated up front (``SimInputError`` names the bad one)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from ..spec.registry import param_named
from ..spec.errors import ConfigError
from ..spec.fields import MAX_COUNT
from ..spec.registry import known_profile, resolve_profile
from .cost import SGLANG_35241, WATCHDOG_S, CostModel
from .dispatch import HEALTH_DISPATCH, METHODS, ROUND_ROBIN, health_dispatch_for
from .errors import SimInputError
from .trackers import NONE, TRACKERS, own_tracker, release_for, tracker_for

GATHERS = ("lockstep", "threads")
# SGLang's --prefill-delayer-* settings (and --prefill-max-requests) the simulated scheduler passes its policy,
# checked by the default policy's own parameters.
DELAYER_SETTINGS = ("max_delay_passes", "token_usage_low_watermark", "queue_min_ratio", "max_delay_ms", "prefill_max_requests")
# The scheduler's settings a policy's parameters may stand for (a budget, a slot count), by SGLang's names.
SCHEDULER_SETTINGS = ("max_running_requests", "max_total_tokens", "chunked_prefill_size", "max_prefill_tokens", "page_size")
MODEL, SGLANG = "model", "sglang"
SCHEDULERS = (MODEL, SGLANG)  # the model of SGLang 0.5.23's scheduler, or SGLang 0.5.23's own code
OFF = "off"  # the variant without a delayer (SGLang without --enable-prefill-delayer)


def _int_at_least(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SimInputError(f"invalid {name}={value!r}: expected an integer >= {low}")


def _count(name: str, value: Any) -> None:
    """One of a rank's engine counts (requests, tokens): the policies gather them, and their parameters stand for
    them, as counts (``spec.fields.MAX_COUNT`` at most), so a larger one would stop a run at its first gather."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_COUNT:
        raise SimInputError(f"invalid {name}={value!r}: expected an integer in [1, {MAX_COUNT}], the counts a policy's "
                            "gathered rows carry")


def _seconds(name: str, value: Any, allow_none: bool = True, positive: bool = False) -> None:
    """Finite seconds, at least 0 (above 0 where ``positive``), one message for every bad value."""
    if value is None and allow_none:
        return
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or (value <= 0 if positive else value < 0)):
        raise SimInputError(f"invalid {name}={value!r}: expected a finite number of seconds {'>' if positive else '>='} 0")


@dataclass(frozen=True)
class SimConfig:
    """The engine (per DP rank, as each rank's scheduler sees it), the delayer's settings, and the run's length.

    ``max_running_requests`` and ``max_total_tokens`` are per DP rank (SGLang
    divides the server's ``--max-running-requests`` by the DP size).
    ``chunked_prefill_size`` is the per-pass chunk budget; ``max_prefill_tokens``
    the per-pass input budget (SGLang's ``rem_input_tokens``); ``page_size`` the KV
    page (``--page-size``: 1, or 256 for DeepSeek-V4). ``scheduler`` picks the
    backend: ``model`` (``rank.RankScheduler``) or ``sglang`` (SGLang 0.5.23's own
    scheduler code, ``sglang_backend``; ``prefix_cache`` there turns its radix cache on).
    ``load_balance_method`` is the DP controller's; ``health_check_interval_s``
    sends a ``GET /health`` generation probe that often (None: none), and
    ``resubmit_gap_s`` spaces the closed-loop clients' next requests when several
    finish in one pass (the j-th arrives ``j * resubmit_gap_s`` after the first).
    ``trace`` keeps every pass's per-rank details (``RunResult.trace``) for the
    differential test.
    """

    dp_size: int = 8
    max_running_requests: int = 128
    max_total_tokens: int = 1_000_000
    chunked_prefill_size: int = 16384
    max_prefill_tokens: int = 16384
    enable_mixed_chunk: bool = False
    # The delayer (SGLang's --prefill-delayer-* options).
    max_delay_passes: int = 30
    token_usage_low_watermark: Optional[float] = None
    queue_min_ratio: Optional[float] = None
    max_delay_ms: Optional[float] = None
    prefill_max_requests: Optional[int] = None
    # The run.
    passes: int = 10_000
    duration_s: Optional[float] = None
    warmup_s: float = 0.0
    seed: int = 0
    cost: CostModel = field(default=SGLANG_35241)
    gather: str = "lockstep"
    page_size: int = 1
    scheduler: str = MODEL
    prefix_cache: bool = False
    load_balance_method: str = ROUND_ROBIN
    health_check_interval_s: Optional[float] = None
    resubmit_gap_s: float = 0.0
    trace: bool = False
    # Any other parameter of the simulated policy, by the spec's name (``--set NAME=VALUE``).
    policy_params: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        _int_at_least("dp_size (ranks)", self.dp_size, 1)
        _count("max_running_requests", self.max_running_requests)
        _count("max_total_tokens", self.max_total_tokens)
        _count("chunked_prefill_size (the chunk budget)", self.chunked_prefill_size)
        _count("max_prefill_tokens", self.max_prefill_tokens)
        _count("page_size", self.page_size)
        if self.page_size > self.max_total_tokens:
            raise SimInputError(f"page_size={self.page_size} exceeds max_total_tokens={self.max_total_tokens}: the KV pool "
                                "would hold no whole page")
        _int_at_least("passes", self.passes, 1)
        _int_at_least("seed", self.seed, 0)
        _seconds("duration_s", self.duration_s, positive=True)
        _seconds("warmup_s", self.warmup_s, allow_none=False)
        if self.duration_s is not None and self.warmup_s >= self.duration_s:
            raise SimInputError(f"warmup_s={self.warmup_s:g} must be shorter than duration_s={self.duration_s:g}")
        if not isinstance(self.enable_mixed_chunk, bool):
            raise SimInputError(f"invalid enable_mixed_chunk={self.enable_mixed_chunk!r}: expected a bool")
        if self.enable_mixed_chunk and self.chunked_prefill_size <= self.max_running_requests:
            raise SimInputError(
                f"with mixed chunks each running request's decode token comes out of the chunk budget: "
                f"chunked_prefill_size={self.chunked_prefill_size} must exceed max_running_requests={self.max_running_requests}"
            )
        if self.scheduler not in SCHEDULERS:
            raise SimInputError(f"invalid scheduler={self.scheduler!r}: expected one of {', '.join(SCHEDULERS)}")
        if self.prefix_cache and self.scheduler != SGLANG:
            raise SimInputError("prefix_cache needs scheduler=sglang (the model has no prefix cache)")
        if self.load_balance_method not in METHODS:
            raise SimInputError(f"invalid load_balance_method={self.load_balance_method!r}: expected one of {', '.join(METHODS)}")
        _seconds("health_check_interval_s", self.health_check_interval_s, positive=True)
        _seconds("resubmit_gap_s", self.resubmit_gap_s, allow_none=False)
        if self.gather not in GATHERS:
            raise SimInputError(f"invalid gather={self.gather!r}: expected one of {', '.join(GATHERS)}")
        if not isinstance(self.cost, CostModel):
            raise SimInputError(f"invalid cost={self.cost!r}: expected a CostModel")
        self._check_longest_pass()
        self._check_clock()
        for name in DELAYER_SETTINGS:
            spec = param_named(name)
            if not spec.check(getattr(self, name)):
                raise SimInputError(f"invalid {name}={getattr(self, name)!r}: expected {spec.valid}")

    def _check_longest_pass(self) -> None:
        """The longest pass these settings allow (every rank prefilling a whole chunk and decoding every running
        request) within SGLang's watchdog: a longer one is no deployment's, and a run of such passes draws millions
        of arrivals into each (each held in memory) and never gets far."""
        chunk, running, cost = self.chunked_prefill_size, self.max_running_requests, self.cost
        work = [(chunk, running)] * self.dp_size
        longest = cost.pass_seconds(work)
        if longest > WATCHDOG_S:
            parts = cost.terms(work)
            most = max(parts, key=lambda name: parts[name])
            raise SimInputError(
                f"a pass of {chunk} prefill tokens and {running} decoding requests on each of {self.dp_size} ranks "
                f"(chunked_prefill_size, max_running_requests, dp_size) takes {longest:.3g} s, most of it from cost "
                f"{most}={getattr(cost, most):.4g}: past {WATCHDOG_S:g} s, SGLang's default --watchdog-timeout, at which a "
                "server takes its forward batch for hung and exits")

    def _check_clock(self) -> None:
        """A duration the simulated clock can reach: a float's step grows with its value, and where it passes the
        shortest pass the clock no longer counts one (at --duration 1e308 a pass moves it not at all, so the run
        never reached its end and held every pass it ran, gigabytes within minutes)."""
        shortest = min(self.cost.idle_pass_s, self.cost.shortest_forward_s())
        if self.duration_s is not None and math.ulp(self.duration_s) > shortest:
            most = math.ldexp(1.0, math.frexp(shortest)[1] + 52)  # from 2**(e+52) on, the step exceeds 2**(e-1) <= shortest
            raise SimInputError(
                f"invalid duration_s={self.duration_s!r}: the simulated clock, a 64-bit float, steps by "
                f"{math.ulp(self.duration_s):.3g} s there, more than the shortest pass ({shortest:g} s), which it could not "
                f"count: expected less than {most:.4g} s")

    def delayer_settings(self) -> dict[str, Any]:
        """SGLang's delayer options of this run, by name (a policy takes those it has a parameter of)."""
        return {name: getattr(self, name) for name in DELAYER_SETTINGS}

    def policy_settings(self) -> dict[str, Any]:
        """What a simulated policy may take of this run: the delayer options, and the scheduler's own settings
        (per rank) that a ``SimBinding.params`` maps onto parameters of its policy."""
        return {**self.delayer_settings(), **{name: getattr(self, name) for name in SCHEDULER_SETTINGS}}

    def replace(self, **changes: Any) -> "SimConfig":
        return replace(self, **changes)


def _own_tracker(given: str, tracker: Optional[str]) -> tuple[str, str]:
    """``NAME+TRACKER``: the profile and its tracker, or a usage error saying what is wrong with the suffix."""
    name, _, suffix = given.rpartition("+")
    if suffix not in TRACKERS:
        raise SimInputError(f"--profile {given}: after '+' comes a max_prefill_bs tracker ({', '.join(TRACKERS)}), "
                            f"got {suffix!r}")
    if tracker is not None:
        raise SimInputError(f"--profile {given} names its own tracker; --tracker {tracker} sets every profile's: give one")
    if name == OFF:
        raise SimInputError(f"--profile {given}: {OFF} runs no delayer, so no tracker feeds one")
    return name, suffix  # Variant.of resolves the profile, then refuses its own tracker


@dataclass(frozen=True)
class Variant:
    """One policy to simulate: a profile or release name, the ``max_prefill_bs`` tracker and the health-check dispatch.

    ``name`` is what the user asked for (``seed``, ``sglang-0.5.18``, ``hardened``);
    ``profile`` the canonical profile; ``tracker`` and ``health_dispatch`` the ones
    chosen explicitly or, by default, those of the release ``name`` stands for
    (``trackers.tracker_for``, ``dispatch.health_dispatch_for``).
    """

    name: str
    profile: Optional[str]  # None: no delayer at all (``off``)
    tracker: str  # ``trackers.NONE`` for off: no delayer reads max_prefill_bs
    tracker_source: str  # "release", "policy" (one it keeps itself, ``trackers.own_tracker``), "option", or "none" (off)
    health_dispatch: str = "separate"
    health_source: str = "release"

    @classmethod
    def of(cls, name: Any, tracker: Optional[str] = None, health_dispatch: Optional[str] = None) -> "Variant":
        """``name`` may carry its own tracker as the label writes it, ``NAME+TRACKER`` (``aligned+window``): one
        profile run with another tracker beside the others with their own (``tracker`` sets every profile's)."""
        if tracker is not None and tracker not in TRACKERS:
            raise SimInputError(f"unknown max_prefill_bs tracker {tracker!r}: expected one of {', '.join(TRACKERS)}")
        given = name
        if isinstance(name, str) and "+" in name:
            name, tracker = _own_tracker(name, tracker)
        if health_dispatch is not None and health_dispatch not in HEALTH_DISPATCH:
            raise SimInputError(f"unknown health-check dispatch {health_dispatch!r}: expected one of {', '.join(HEALTH_DISPATCH)}")
        if name == OFF:
            profile = None
        else:
            if not known_profile(name):
                try:
                    resolve_profile(name)
                except ConfigError as exc:
                    raise SimInputError(f"{exc}; or {OFF} (no delayer)") from None
            profile = resolve_profile(name)
        release = release_for(name) if name != OFF else None
        variant = cls(
            name, profile,
            NONE if name == OFF else tracker if tracker is not None else tracker_for(name),  # --tracker: the others'
            "none" if name == OFF else "option" if tracker is not None else "policy" if own_tracker(name) else "release",
            health_dispatch if health_dispatch is not None else health_dispatch_for(release),
            "option" if health_dispatch is not None else "release",
        )
        if given != name and variant.tracker == variant.default_tracker():
            raise SimInputError(f"--profile {given}: {variant.tracker} is {name}'s own tracker already; name it {name}")
        return variant

    def default_tracker(self) -> str:
        return tracker_for(self.name) if self.name != OFF else NONE

    @property
    def tracked_name(self) -> str:
        """The name, with the tracker when it is not the release's own (``aligned+window``): what ``--profile`` takes."""
        return self.name if self.tracker == self.default_tracker() else f"{self.name}+{self.tracker}"

    @property
    def label(self) -> str:
        """The name, with the tracker and the health-check dispatch when they are not the release's own."""
        label = self.tracked_name
        release = release_for(self.name) if self.name != OFF else None
        if self.health_dispatch != health_dispatch_for(release):
            label += f"+health-{self.health_dispatch}"
        return label
