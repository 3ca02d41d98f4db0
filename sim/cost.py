"""The pass cost model: how long one lock-step scheduler pass takes.

With DP attention each rank runs attention over its own requests, and the MoE
layers run over every rank's tokens together (the ranks exchange tokens in the
all-to-all), so a pass that runs a forward lasts::

    forward_s = max(floor_s,  max over ranks r of attn_s(r)  +  moe_token_s * sum over ranks of tokens(r))
    attn_s(r) = attn_token_s * prefill_tokens(r) + attn_decode_s * decode_requests(r)
    tokens(r) = prefill_tokens(r) + decode_requests(r)

``floor_s`` is the shortest forward (a decode step is bound by reading the
weights, not by its few tokens). A pass where no rank runs a forward (every
rank delayed or empty) runs no model: it polls for requests and runs the
gathers, ``idle_pass_s``.

Default coefficients (``SGLANG_35241``), each fitted to a number SGLang #35241
reports for DeepSeek-V4-Pro, TP=8, DP=8, DP attention (8 GPUs, one node), with
no constant term (the fit's constant is -0.015 s, zero within the data's error):

* 1.397 s, the p50 interval between full 16k-chunk completions on a rank,
  is a pass where all 8 ranks prefill 16,384 tokens:
  ``16384 * attn_token_s + 131072 * moe_token_s = 1.397``;
* 0.401 s, the shortest interval between one rank's full-chunk completions in
  the same measurement (0.2 s scrapes), is a pass where that rank alone
  prefills 16,384 tokens: ``16384 * (attn_token_s + moe_token_s) = 0.401``;
  hence ``moe_token_s`` = 0.996 / 114,688 = 8.68e-6 s and ``attn_token_s`` = 1.58e-5 s;
* check, not fitted: the report's healthy ~94.8k tok/s with an 8k chunk per
  rank (PR #35721's runs) is 8 x 8192 tokens per 0.70 s pass here, 93.8k tok/s.

``floor_s`` = 0.040 s and ``attn_decode_s`` = 0.0002 s per decoding request are
assumptions: #35241's workloads have 1 to 16 output tokens and report no decode
step. ``idle_pass_s`` = 0.0015 s is an estimate of 0.5.23's loop without a batch
(``event_loop_overlap``: the request poll, the delayer's all-gather and the MLP
sync's gather on the CPU group, then ``on_idle``), about 1-2 ms; its exact value
matters only through the delay runs that cost it (docs/simulation.md, sensitivity).

``SGLANG_32880`` keeps the same shape with the floor of #32880's deployment
(Kimi-K3, dp16, decode-bound): 365 delay + 9 allow outcomes per 75 s on a rank
that negotiates every pass is a pass every 0.20 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

from .errors import SimInputError

_FULL_PASS_S, _ONE_RANK_PASS_S, _CHUNK, _RANKS = 1.397, 0.401, 16384, 8  # SGLang #35241
_MOE_TOKEN_S = (_FULL_PASS_S - _ONE_RANK_PASS_S) / (_CHUNK * (_RANKS - 1))
_ATTN_TOKEN_S = _ONE_RANK_PASS_S / _CHUNK - _MOE_TOKEN_S

FIELDS = ("floor_s", "attn_token_s", "attn_decode_s", "moe_token_s", "idle_pass_s")
# The most any one coefficient may be: SGLang's --watchdog-timeout default. A forward batch that runs longer is taken
# for a hang and the server exits, so a floor, one token's or one decoding request's cost above it is a pass no
# deployment runs; a pass without a forward (the loop's poll and gathers) is shorter than one with.
WATCHDOG_S = 300.0


@dataclass(frozen=True)
class CostModel:
    floor_s: float = 0.040
    attn_token_s: float = _ATTN_TOKEN_S
    attn_decode_s: float = 0.0002
    moe_token_s: float = _MOE_TOKEN_S
    idle_pass_s: float = 0.0015
    source: str = "SGLang #35241 (attention and MoE slopes); floor, decode and idle pass assumed"

    def __post_init__(self) -> None:
        for name in FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise SimInputError(f"invalid cost {name}={value!r}: expected a finite number of seconds >= 0")
            if value > WATCHDOG_S:
                raise SimInputError(f"invalid cost {name}={value!r}: expected at most {WATCHDOG_S:g} s, SGLang's default "
                                    "--watchdog-timeout, past which a server takes its forward batch for hung and exits: "
                                    "no deployment's pass has a part that long")
        if self.idle_pass_s <= 0:
            raise SimInputError("invalid cost idle_pass_s=0: a pass without a forward must take some time, or simulated time stalls")
        if self.floor_s <= 0 and self.attn_token_s <= 0 and self.moe_token_s <= 0 and self.attn_decode_s <= 0:
            raise SimInputError("invalid cost model: every forward coefficient is 0, so a forward takes no time")

    def pass_seconds(self, work: Sequence[tuple[int, int]]) -> float:
        """One pass: ``work`` is each rank's (prefill tokens, decoding requests)."""
        attn = 0.0
        tokens = 0
        per_token, per_decode = self.attn_token_s, self.attn_decode_s
        for prefill, decode in work:
            a = per_token * prefill + per_decode * decode
            if a > attn:
                attn = a
            tokens += prefill + decode
        if tokens == 0:
            return self.idle_pass_s
        t = attn + self.moe_token_s * tokens
        return t if t > self.floor_s else self.floor_s

    def terms(self, work: Sequence[tuple[int, int]]) -> dict[str, float]:
        """``pass_seconds``'s forward term by term, by coefficient (the slowest rank's attention, the MoE over every
        rank's tokens, the floor): which coefficient makes a pass long, for a message naming the option to change."""
        attn_token_s, attn_decode_s = self.attn_token_s, self.attn_decode_s
        prefill, decode = max(work, key=lambda w: attn_token_s * w[0] + attn_decode_s * w[1])
        return {"floor_s": self.floor_s, "attn_token_s": attn_token_s * prefill, "attn_decode_s": attn_decode_s * decode,
                "moe_token_s": self.moe_token_s * sum(p + d for p, d in work)}

    def shortest_forward_s(self) -> float:
        """The shortest pass with a forward (one token's, or the floor): how often a scheduler can admit at most."""
        return min(t for t in (self.pass_seconds([(1, 0)]), self.pass_seconds([(0, 1)])) if t > 0)

    def with_(self, **changes: Any) -> "CostModel":
        return replace(self, **changes)

    def describe(self) -> str:
        return (
            f"pass_s = max({self.floor_s:g}, max_r({self.attn_token_s:.4g}*prefill_r + {self.attn_decode_s:g}*decode_r) "
            f"+ {self.moe_token_s:.4g}*sum_r(prefill_r + decode_r)); {self.idle_pass_s:g} s without a forward  [{self.source}]"
        )


SGLANG_35241 = CostModel()
SGLANG_32880 = CostModel(floor_s=0.20, source="SGLang #32880 (decode floor: 374 outcomes per 75 s), #35241 (slopes); rest assumed")
