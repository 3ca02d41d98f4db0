"""The proof scopes of the policies whose only layout choices are the DP size and, for some, DP attention on or off.

``Family`` is the two attention modes of a profile; its scope may fix ``dp_size``
(else the proofs leave it symbolic). The gate, vLLM's cadence and TensorRT-LLM's
balance share it. ``RankFamily`` is the one family of a policy that decides from one
reduced row over the DP ranks (DP attention on): ATOM #930 and vLLM #48246's delayer.
SGLang's delayer and ATOM's coalescer declare their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Family:
    profile: str
    enable_dp_attention: bool
    dp_size: Optional[int] = None

    def label(self) -> str:
        return f"{self.profile}/{'dp-attn' if self.enable_dp_attention else 'tp-only'}"


@dataclass(frozen=True)
class RankFamily:
    """Every number of DP ranks of one reduced row (or one, ``--dp-size``)."""

    profile: str
    dp_size: Optional[int] = None

    def label(self) -> str:
        return f"{self.profile}/dp-ranks"


@dataclass(frozen=True)
class Scope:
    dp_size: Optional[int] = None


def families(profile: str, scope: Scope) -> list[Family]:
    return [Family(profile, dp_attn, scope.dp_size) for dp_attn in (True, False)]


def rank_families(profile: str, scope: Any) -> list[RankFamily]:
    return [RankFamily(profile, scope.dp_size)]


def dp_size_range(fams: Any) -> str:
    """The DP sizes the families were proved at, in the scope line's words: every one, or the one ``--dp-size`` fixed."""
    sizes = sorted({f.dp_size for f in fams if f.dp_size is not None})
    if not sizes or any(f.dp_size is None for f in fams):
        return "dp_size any >= 1"
    return "dp_size " + " and ".join(map(str, sizes))
