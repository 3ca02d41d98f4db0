"""The pass cost model: how long one lock-step scheduler pass takes.

With DP attention every rank runs each forward pass together (the MoE layers
exchange tokens across ranks), so a pass lasts as long as its slowest rank::

    pass_s = max over ranks of  base_s + prefill_token_s * prefill_tokens + decode_request_s * decode_requests

A rank with nothing to run still takes part (an idle batch) and costs ``base_s``.

Default coefficients (``SGLANG_35241``), and where each comes from:

* ``prefill_token_s`` = (1.397 s - ``base_s``) / 16,384 tokens, so that a pass
  prefilling one full 16k chunk lasts 1.397 s: the p50 interval between
  full-chunk prefill completions reported in SGLang #35241 (DeepSeek-V4-Pro,
  TP=8, DP=8, DP attention, 16k chunks); 8 ranks x 16,384 tokens per 1.397 s is
  93.8k tok/s, the healthy regime's ~95k tok/s input throughput in the same report;
* ``base_s`` = 0.040 s and ``decode_request_s`` = 0.0002 s: a decode step of a
  large MoE with DP attention; #35241 does not report decode step times, so these
  two are assumptions, stated as such; the calibration scenarios are decided by
  prefill passes (#35241) or counted in passes (#32880), not by these two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import SimInputError


_CHUNK_PASS_S, _CHUNK_TOKENS = 1.397, 16384  # SGLang #35241: p50 full-chunk interval
_BASE_S = 0.040  # assumed decode-step floor


@dataclass(frozen=True)
class CostModel:
    base_s: float = _BASE_S
    prefill_token_s: float = (_CHUNK_PASS_S - _BASE_S) / _CHUNK_TOKENS
    decode_request_s: float = 0.0002
    source: str = "SGLang #35241 (prefill slope); decode terms assumed"

    def __post_init__(self) -> None:
        for name in ("base_s", "prefill_token_s", "decode_request_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise SimInputError(f"invalid cost {name}={value!r}: expected a finite number of seconds >= 0")
        if self.base_s <= 0 and self.prefill_token_s <= 0 and self.decode_request_s <= 0:
            raise SimInputError("invalid cost model: every coefficient is 0, so simulated time never advances")

    def rank_seconds(self, prefill_tokens: int, decode_requests: int) -> float:
        return self.base_s + self.prefill_token_s * prefill_tokens + self.decode_request_s * decode_requests

    def describe(self) -> str:
        return (
            f"pass_s = max_r({self.base_s:g} + {self.prefill_token_s:.4g}*prefill_tokens + "
            f"{self.decode_request_s:g}*decode_requests)  [{self.source}]"
        )


SGLANG_35241 = CostModel()
