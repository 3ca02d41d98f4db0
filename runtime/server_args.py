"""The ``server_args`` fields the policies SGLang's call sites drive read, so callers need no SGLang.

``PrefillDelayer`` reads any object with these attributes (SGLang's own
``ServerArgs`` included); this dataclass is the minimal stand-in for tests,
simulations, the proofs' replay and the example.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from ..spec.errors import ConfigError

# SGLang's switch for riding the NCCL device group in the overlap scheduler's sync.
NCCL_ENV = "SGLANG_NCCL_ALL_GATHER_IN_OVERLAP_SCHEDULER_SYNC_BATCH"
DEBUG_LOG_ENV = "SGLANG_PREFILL_DELAYER_DEBUG_LOG"


@dataclass
class ServerArgs:
    enable_dp_attention: bool = False
    disable_overlap_schedule: bool = False
    prefill_delayer_queue_min_ratio: Optional[float] = None
    prefill_delayer_max_delay_ms: Optional[float] = None
    prefill_max_requests: Optional[int] = None
    # SGLang's --chunked-prefill-size, at its usual value (-1: no chunking); a policy may read it (Param.server_arg)
    chunked_prefill_size: Optional[int] = 8192


def get_bool_env_var(name: str, default: str = "false") -> bool:
    """SGLang's parsing of boolean environment variables ("true"/"1", case-insensitive)."""
    return os.getenv(name, default).strip().lower() in ("true", "1")


def server_arg(server_args: Any, name: str, reader: str) -> Any:
    """``server_args.<name>``; a ``ConfigError`` naming it and its ``reader`` where the object has none (not a
    ``ServerArgs``), never an ``AttributeError`` from inside the constructor."""
    try:
        return getattr(server_args, name)
    except AttributeError:
        raise ConfigError(f"server_args ({type(server_args).__name__}) has no {name}, which {reader} reads: pass "
                          "SGLang's ServerArgs, or prefill_delayer.runtime.ServerArgs outside SGLang") from None


def uses_device_group(server_args: Any) -> bool:
    """Whether the seed would gather over ``device_group`` (NCCL) rather than ``cpu_group`` (gloo)."""
    disable = server_arg(server_args, "disable_overlap_schedule", "the choice of the gather's group")
    if not isinstance(disable, bool):  # the string 'false' would ride the device group
        raise ConfigError(f"server_args.disable_overlap_schedule must be a bool, got {type(disable).__name__} {disable!r}")
    return disable or get_bool_env_var(NCCL_ENV)
