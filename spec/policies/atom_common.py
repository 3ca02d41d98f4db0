"""What ATOM's two delayers share (``atom_coalescer``, ``atom_930``): the low watermark, the proofs' scope, traces' units.

Both read ``token_usage_low_watermark`` as SGLang's delayer does (off, or a
share below which a prefillable rank forces prefill), and both run over the
DP ranks of one all-reduce, so their proofs range over every dp_size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

UPSTREAM_URL = "https://github.com/ROCm/ATOM/pull/{}"
SCALE = 1024  # shares (watermarks) in 1/1024ths in a counterexample: exact doubles


class LowWatermark:
    """The low watermark's views, for a configuration with ``token_usage_low_watermark``."""

    @property
    def low_on(self) -> bool:
        return self.token_usage_low_watermark is not None  # type: ignore[attr-defined, no-any-return]

    @property
    def low(self) -> float:
        low = self.token_usage_low_watermark  # type: ignore[attr-defined]
        return 0.0 if low is None else float(low)


@dataclass(frozen=True)
class Scope:
    """What ``prove`` ranges over: every dp_size, or one (``--dp-size``)."""

    dp_size: Optional[int] = None


def scope_of(dp_size: Optional[int] = None, **_: Any) -> Scope:
    return Scope(dp_size)


def scaled_share(o: Any, name: str, share: Any) -> tuple[Any, list]:
    """An integer ``k`` with ``share == k / SCALE`` in [0, 1]: a counterexample's share, exact as a double."""
    k = o.Int(f"{name}_{SCALE}")
    return k, [k >= 0, k <= SCALE, share == o.ToReal(k) / SCALE]
