"""The delayer's configuration: its parameters, their validation, and the views the guards read.

``PARAMETERS`` is the one place that says what each parameter may be; the
validation and the generated docs both read it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ...config import Config, count_in, is_int, is_real, layout_params, plain
from ...errors import ConfigError
from ...fields import MAX_COUNT
from ...policy import Param
from .profiles import ATTN_CP_LAYOUT, PROFILE_BY_NAME, PROFILES, RELEASES

POLICY_NAME = "sglang-delayer"
DEFAULT_MAX_DELAY_MS = 5000.0
# Upper bound for queue_min_ratio: keeps running_batch * ratio finite (the
# seed would raise OverflowError from int(inf)) and inside the integer domain
# the proofs model exactly.
MAX_QUEUE_MIN_RATIO = float(2**20)

PARAMETERS: tuple[Param, ...] = (
    Param("max_delay_passes", 30, f"integer in [0, {MAX_COUNT}]", count_in(0, MAX_COUNT)),
    Param(
        "token_usage_low_watermark",
        None,
        "None (off) or a finite number in [0, 1]",
        lambda v: v is None or (is_real(v) and math.isfinite(v) and 0.0 <= v <= 1.0),
    ),
    Param(
        "queue_min_ratio",
        None,
        f"None (queue trigger off) or a finite number in (0, {plain(MAX_QUEUE_MIN_RATIO)}]",
        lambda v: v is None or (is_real(v) and math.isfinite(v) and 0.0 < v <= MAX_QUEUE_MIN_RATIO),
        server_arg="prefill_delayer_queue_min_ratio",
    ),
    Param(
        "max_delay_ms",
        None,
        f"None (= {DEFAULT_MAX_DELAY_MS:g}) or a finite number > 0",
        lambda v: v is None or (is_real(v) and math.isfinite(v) and v > 0.0),
        server_arg="prefill_delayer_max_delay_ms",
    ),
    Param(
        "prefill_max_requests",
        None,
        f"None (unset) or an integer in [1, {MAX_COUNT}]",
        lambda v: v is None or (is_int(v) and 1 <= v <= MAX_COUNT),
        server_arg="prefill_max_requests",
    ),
    *layout_params(f"; above 1 only in profiles with {ATTN_CP_LAYOUT}"),
    Param(
        "profile",
        "seed",
        "one of " + ", ".join(PROFILES) + ", or sglang-X for a release X in " + ", ".join(RELEASES),
        lambda v: isinstance(v, str) and (v in PROFILE_BY_NAME or (v.startswith("sglang-") and v[len("sglang-"):] in RELEASES)),
    ),
)
PARAMETER_BY_NAME = {p.name: p for p in PARAMETERS}


@dataclass(frozen=True)
class DelayerConfig(Config):
    """A validated configuration of the delayer. Construction raises ``ConfigError`` on any bad field."""

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

    policy_name = POLICY_NAME

    def __post_init__(self) -> None:
        self._validate(self._parameters())
        if self.attn_cp_size > 1 and ATTN_CP_LAYOUT not in self.features:
            raise ConfigError(
                f"invalid attn_cp_size={self.attn_cp_size!r}: profile {self.profile!r} predates attention context "
                f"parallelism ({ATTN_CP_LAYOUT}); use 1, or a profile from sglang-0.5.22 on"
            )
        if self.max_delay_ms is None:
            object.__setattr__(self, "max_delay_ms", DEFAULT_MAX_DELAY_MS)
        for name in ("token_usage_low_watermark", "queue_min_ratio", "max_delay_ms"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, float(value))

    @classmethod
    def _parameters(cls) -> tuple[Param, ...]:
        """The parameters this configuration validates (a policy built on this one names its own profiles)."""
        return PARAMETERS

    # Derived views the guards read; structural flags stay Python bools even in proofs.
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


def delay_bound(o: Any, c: Any) -> Any:
    """max(max_delay_passes - 1, 0): the longest run of delays a rank may have."""
    return o.If(c.max_delay_passes >= 1, c.max_delay_passes - 1, 0)


def progress_window(o: Any, c: Any) -> Any:
    """max(max_delay_passes, 1): every window this long has a pass on which no rank delays."""
    return o.If(c.max_delay_passes >= 1, c.max_delay_passes, 1)
