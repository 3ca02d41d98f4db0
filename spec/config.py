"""Configuration of the delayer and its validation.

``PARAMETERS`` is the one place that says what each parameter may be; the
validation and the generated docs both read it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .errors import ConfigError
from .inputs import MAX_COUNT
from .profiles import ATTN_CP_LAYOUT, PROFILES, RELEASES, features_of, known_profile, resolve_profile

DEFAULT_MAX_DELAY_MS = 5000.0
# Ranks in one all-gather: far above any deployment, and small enough that the
# compiled step (one expression per gathered value) is built in about a second.
MAX_WORLD_SIZE = 2**16
# Upper bound for queue_min_ratio: keeps running_batch * ratio finite (the
# seed would raise OverflowError from int(inf)) and inside the integer domain
# the proofs model exactly.
MAX_QUEUE_MIN_RATIO = float(2**20)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


@dataclass(frozen=True)
class Param:
    """One configuration parameter: its default, its valid range in words, and the check."""

    name: str
    default: Any
    valid: str
    check: Callable[[Any], bool]


def _count(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: _is_int(v) and lo <= v <= hi


PARAMETERS: tuple[Param, ...] = (
    Param("max_delay_passes", 30, f"integer in [0, {MAX_COUNT}]", _count(0, MAX_COUNT)),
    Param(
        "token_usage_low_watermark",
        None,
        "None (off) or a finite number in [0, 1]",
        lambda v: v is None or (_is_real(v) and math.isfinite(v) and 0.0 <= v <= 1.0),
    ),
    Param(
        "queue_min_ratio",
        None,
        f"None (queue trigger off) or a finite number in (0, {MAX_QUEUE_MIN_RATIO:g}]",
        lambda v: v is None
        or (_is_real(v) and math.isfinite(v) and 0.0 < v <= MAX_QUEUE_MIN_RATIO),
    ),
    Param(
        "max_delay_ms",
        None,
        f"None (= {DEFAULT_MAX_DELAY_MS:g}) or a finite number > 0",
        lambda v: v is None or (_is_real(v) and math.isfinite(v) and v > 0.0),
    ),
    Param(
        "prefill_max_requests",
        None,
        f"None (unset) or an integer in [1, {MAX_COUNT}]",
        lambda v: v is None or (_is_int(v) and 1 <= v <= MAX_COUNT),
    ),
    Param("dp_size", 1, f"integer in [1, {MAX_WORLD_SIZE}]", _count(1, MAX_WORLD_SIZE)),
    Param("attn_tp_size", 1, f"integer in [1, {MAX_WORLD_SIZE}]", _count(1, MAX_WORLD_SIZE)),
    Param(
        "attn_cp_size",
        1,
        f"integer in [1, {MAX_WORLD_SIZE}]; above 1 only in profiles with {ATTN_CP_LAYOUT}",
        _count(1, MAX_WORLD_SIZE),
    ),
    Param("enable_dp_attention", False, "bool", lambda v: isinstance(v, bool)),
    Param(
        "profile",
        "seed",
        "one of " + ", ".join(PROFILES) + ", or sglang-X for a release X in " + ", ".join(RELEASES),
        known_profile,
    ),
)
PARAMETER_BY_NAME = {p.name: p for p in PARAMETERS}


@dataclass(frozen=True)
class Config:
    """A validated configuration. Construction raises ``ConfigError`` on any bad field."""

    max_delay_passes: int = 30
    token_usage_low_watermark: Optional[float] = None
    queue_min_ratio: Optional[float] = None
    max_delay_ms: Optional[float] = None
    dp_size: int = 1
    attn_tp_size: int = 1
    enable_dp_attention: bool = False
    profile: str = "seed"
    # Added with the release profiles; last, so positional construction keeps its meaning.
    prefill_max_requests: Optional[int] = None
    attn_cp_size: int = 1

    def __post_init__(self) -> None:
        for p in PARAMETERS:
            value = getattr(self, p.name)
            if not p.check(value):
                raise ConfigError(f"invalid {p.name}={value!r}: expected {p.valid}")
        # A release name (sglang-0.5.20) is stored as the profile it is (sglang-0.5.19).
        object.__setattr__(self, "profile", resolve_profile(self.profile))
        if self.attn_cp_size > 1 and ATTN_CP_LAYOUT not in self.features:
            raise ConfigError(
                f"invalid attn_cp_size={self.attn_cp_size!r}: profile {self.profile!r} predates attention context "
                f"parallelism ({ATTN_CP_LAYOUT}); use 1, or a profile from sglang-0.5.22 on"
            )
        if self.world_size > MAX_WORLD_SIZE:
            raise ConfigError(
                f"invalid layout: {self.world_size} ranks in the gather (dp_size x attn_cp_size x attn_tp_size with DP "
                f"attention, else attn_cp_size x attn_tp_size), expected at most {MAX_WORLD_SIZE}"
            )
        if self.max_delay_ms is None:
            object.__setattr__(self, "max_delay_ms", DEFAULT_MAX_DELAY_MS)
        for name in ("token_usage_low_watermark", "queue_min_ratio", "max_delay_ms"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, float(value))

    # Derived views the guards read; structural flags stay Python bools even in proofs.
    @property
    def features(self) -> frozenset[str]:
        """The profile's features (``spec.profiles``): what the guards and the table ask for."""
        return features_of(self.profile)

    @property
    def pmr_on(self) -> bool:
        return self.prefill_max_requests is not None

    @property
    def pmr(self) -> int:
        return 0 if self.prefill_max_requests is None else self.prefill_max_requests

    @property
    def watermark_on(self) -> bool:
        return self.token_usage_low_watermark is not None

    @property
    def watermark(self) -> float:
        return 0.0 if self.token_usage_low_watermark is None else self.token_usage_low_watermark

    @property
    def queue_on(self) -> bool:
        return self.queue_min_ratio is not None

    @property
    def queue_ratio(self) -> float:
        return 0.0 if self.queue_min_ratio is None else self.queue_min_ratio

    @property
    def dp_dim(self) -> int:
        """Number of DP groups in the gather (the seed's ``dp_size_dim``)."""
        return self.dp_size if self.enable_dp_attention else 1

    @property
    def group_size(self) -> int:
        """Ranks per DP group in the gather; the first of each group is counted."""
        return self.attn_cp_size * self.attn_tp_size

    @property
    def world_size(self) -> int:
        """Ranks taking part in the all-gather."""
        return self.dp_dim * self.group_size

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> int:
        """A 62-bit hash of every field, sent in each gathered row to detect mismatched ranks."""
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") >> 2
