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

PROFILES = ("seed", "hardened")
DEFAULT_MAX_DELAY_MS = 5000.0
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


PARAMETERS: tuple[Param, ...] = (
    Param("max_delay_passes", 30, "integer >= 0", lambda v: _is_int(v) and v >= 0),
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
    Param("dp_size", 1, "integer >= 1", lambda v: _is_int(v) and v >= 1),
    Param("attn_tp_size", 1, "integer >= 1", lambda v: _is_int(v) and v >= 1),
    Param("enable_dp_attention", False, "bool", lambda v: isinstance(v, bool)),
    Param("profile", "seed", " | ".join(PROFILES), lambda v: isinstance(v, str) and v in PROFILES),
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

    def __post_init__(self) -> None:
        for p in PARAMETERS:
            value = getattr(self, p.name)
            if not p.check(value):
                raise ConfigError(f"invalid {p.name}={value!r}: expected {p.valid}")
        if self.max_delay_ms is None:
            object.__setattr__(self, "max_delay_ms", DEFAULT_MAX_DELAY_MS)
        for name in ("token_usage_low_watermark", "queue_min_ratio", "max_delay_ms"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, float(value))

    # Derived views the guards read; structural flags stay Python bools even in proofs.
    @property
    def hardened(self) -> bool:
        return self.profile == "hardened"

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
    def world_size(self) -> int:
        """Ranks taking part in the all-gather."""
        return self.dp_dim * self.attn_tp_size

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def fingerprint(self) -> int:
        """A 62-bit hash of every field, sent in each gathered row to detect mismatched ranks."""
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") >> 2
