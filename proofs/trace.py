"""Counterexample traces (DESIGN §6): concrete passes from freshly built delayers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONFIG_KEYS = (
    "dp_size",
    "attn_tp_size",
    "enable_dp_attention",
    "max_delay_passes",
    "token_usage_low_watermark",
    "queue_min_ratio",
    "max_delay_ms",
)
RANK_KEYS = ("prefillable", "token_usage", "running_batch", "max_prefill_bs", "waiting_queue_len", "max_running_requests", "now_s")
EXPECT_KEYS = ("allow", "reason", "wait_forward_passes")


def validate_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """Raise ValueError naming the first thing a trace lacks; return it unchanged."""
    for key in ("property", "profile", "config", "passes", "violation"):
        if key not in trace:
            raise ValueError(f"trace lacks {key!r}")
    missing = [k for k in CONFIG_KEYS if k not in trace["config"]]
    if missing:
        raise ValueError(f"trace config lacks {missing}")
    world = trace["config"]["dp_size"] * trace["config"]["attn_tp_size"] if trace["config"]["enable_dp_attention"] else trace["config"]["attn_tp_size"]
    for i, p in enumerate(trace["passes"]):
        if len(p.get("ranks", [])) != world or len(p.get("expect", [])) != world:
            raise ValueError(f"pass {i}: expected {world} ranks and {world} expectations")
        for r in p["ranks"]:
            if set(r) != set(RANK_KEYS):
                raise ValueError(f"pass {i}: rank entry keys {sorted(r)} != {sorted(RANK_KEYS)}")
        for e in p["expect"]:
            if set(e) != set(EXPECT_KEYS):
                raise ValueError(f"pass {i}: expect keys {sorted(e)} != {sorted(EXPECT_KEYS)}")
    return trace


def write_trace(trace: dict[str, Any], directory: str | Path) -> Path:
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    out = path / f"{trace['profile']}-{trace['property']}.json"
    out.write_text(json.dumps(validate_trace(trace), indent=1) + "\n")
    return out


def load_trace(path: str | Path) -> dict[str, Any]:
    return validate_trace(json.loads(Path(path).read_text()))
