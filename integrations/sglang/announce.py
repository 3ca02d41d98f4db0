"""The one line each process logs when the plugin (or ``install``) put our classes in place.

Its own module, below both the plugin and the shell: the plugin announces, and
every shell constructor flushes a line that was pending because logging was not
set up yet when the plugin registered.

The line must reach the operator. It goes through SGLang's own logger (that of
its plugin loader, ``sglang.srt.plugins``, which logs "Executed general plugin"
beside it; SGLang 0.5.23's ``configure_logger`` sets up the root logger after the
plugins load), at INFO, or at WARNING when the log level hides INFO lines; and
to stderr when logging is not set up at all by the time the first delayer is built.
"""

from __future__ import annotations

import logging
import sys
from typing import Optional

PROFILE_ENV = "PREFILL_DELAYER_PROFILE"
PARAMS_ENV = "PREFILL_DELAYER_PARAMS"  # NAME=VALUE[,NAME=VALUE]: the profile's parameters SGLang keeps nowhere

logger = logging.getLogger("sglang.srt.plugins")  # SGLang 0.5.23's sglang/srt/plugins/__init__.py: getLogger(__name__)

_announced = False
_pending: Optional[str] = None


def announce(release: str, profile: str, setting: str, how: str, guarded: bool = False, reads: tuple[tuple[str, str], ...] = (),
             max_prefill_bs: str = "", params: tuple[tuple[str, object], ...] = ()) -> None:
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
        + (f"; parameters {', '.join(f'{k}={v!r}' for k, v in params)}" if params else "")
        + ("; Scheduler._should_defer_prefill hooked: a deferred pass takes part in the delayer's all-gather"
           if guarded else "")
        + "".join(f"; {where} hooked: reads {name}" for name, where in reads)
        + (f"; {max_prefill_bs}" if max_prefill_bs else "")
    )
    flush_announcement(final=False)


def flush_announcement(final: bool = True) -> None:
    """Log the pending line once per process: through SGLang's logger when logging is set up, else (``final``) to stderr.

    ``announce`` asks with ``final=False`` (logging may come later: the line waits); every shell
    constructor asks with ``final=True`` (a delayer is in use now: the line goes out one way or the other).
    """
    global _announced, _pending
    if _pending is None or _announced:
        return
    if logger.hasHandlers():
        logger.log(logging.INFO if logger.isEnabledFor(logging.INFO) else logging.WARNING, _pending)
    elif final:
        sys.stderr.write(_pending + "\n")
        sys.stderr.flush()
    else:
        return
    _announced = True
    _pending = None
