"""The proof scope of a policy whose only layout choices are DP attention on or off and the DP size.

Its families are the two attention modes of a profile; its scope may fix ``dp_size``
(else the proofs leave it symbolic). The gate, vLLM's cadence and TensorRT-LLM's
balance share this scope; SGLang's delayer and ATOM's policies declare their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Family:
    profile: str
    enable_dp_attention: bool
    dp_size: Optional[int] = None

    def label(self) -> str:
        return f"{self.profile}/{'dp-attn' if self.enable_dp_attention else 'tp-only'}"


@dataclass(frozen=True)
class Scope:
    dp_size: Optional[int] = None


def families(profile: str, scope: Scope) -> list[Family]:
    return [Family(profile, dp_attn, scope.dp_size) for dp_attn in (True, False)]
