"""The one line each process logs when the plugin (or ``install``) put our classes in place.

Its own module, below both the plugin and the shell: the plugin announces, and
every shell constructor flushes a line that was pending because logging was not
set up yet when the plugin registered.
"""

from __future__ import annotations

import logging
from typing import Optional

PROFILE_ENV = "PREFILL_DELAYER_PROFILE"

logger = logging.getLogger("prefill_delayer.integrations.sglang")

_announced = False
_pending: Optional[str] = None


def announce(release: str, profile: str, setting: str, how: str, guarded: bool = False) -> None:
    """Log the line now if logging would show it; else when the first delayer is built.

    A scheduler process loads plugins before it sets up logging, so a line
    logged then would be lost; the delayer is built after.
    """
    global _pending
    from ...spec.hashing import spec_hash

    if _announced:
        return
    _pending = (
        f"prefill-delayer active ({how}): SGLang {release}'s PrefillDelayer and "
        f"PrefillDelayerSinglePassExecutor replaced; profile {profile} "
        f"({PROFILE_ENV if how == 'plugin' else 'install'}={setting}), spec {spec_hash()}"
        + ("; Scheduler._should_defer_prefill hooked: a deferred pass takes part in the delayer's all-gather"
           if guarded else "")
    )
    flush_announcement()


def flush_announcement() -> None:
    """Log the pending line once per process, as soon as logging shows INFO lines (every shell constructor asks)."""
    global _announced, _pending
    if _pending is not None and not _announced and logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
        _announced = True
        logger.info(_pending)
        _pending = None
