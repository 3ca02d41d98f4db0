"""A profile chosen where SGLang builds no delayer: the scheduler process stops, saying so.

SGLang builds its ``PrefillDelayer`` in ``Scheduler.init_schedule_policy``, and
only under ``--enable-prefill-delayer``: without the flag the scheduler keeps
``self.prefill_delayer = None``, so the profile ``PREFILL_DELAYER_PROFILE`` names
would never decide a pass, and nothing would say so. With the flag, a
PD-disaggregation decode engine builds none either, and SGLang logs why
("Ignoring --enable-prefill-delayer on decode engine ..."); that is its own
decision, said in its own words, and is left to it.

So the plugin hooks ``init_schedule_policy`` (AFTER) in a scheduler process and
asks what the scheduler decided: no delayer and the flag unset stops the
process with one line. Where each release reads the flag, in that method
(read off each release's ``sglang/srt/managers/scheduler.py``, 0.5.14 to 0.5.23):
``self.server_args.enable_prefill_delayer`` in 0.5.14-0.5.16,
``get_schedule().enable_prefill_delayer`` from 0.5.17 on.
"""

from __future__ import annotations

from typing import Any, Callable

from .announce import PROFILE_ENV

SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
TARGET = f"{SCHEDULER_MODULE}.Scheduler.init_schedule_policy"
FLAG = "--enable-prefill-delayer"


def _flag_of_server_args(scheduler: Any) -> bool:
    return bool(scheduler.server_args.enable_prefill_delayer)


def _flag_of_schedule(scheduler: Any) -> bool:
    from sglang.srt.runtime_context import get_schedule

    return bool(get_schedule().enable_prefill_delayer)


# How each release's init_schedule_policy reads the flag (see the module docstring).
FLAG_READ: dict[str, Callable[[Any], bool]] = {
    **{f"0.5.{n}": _flag_of_server_args for n in (14, 15, 16)},
    **{f"0.5.{n}": _flag_of_schedule for n in range(17, 24)},
}


def missing_flag(setting: str) -> str:
    """The line that stops a scheduler built without the flag, ``setting`` the variable's value."""
    return (f"prefill-delayer: {PROFILE_ENV}={setting} is set but SGLang runs without {FLAG}: no delayer would run, "
            f"so the profile would decide nothing; add {FLAG}, or unset {PROFILE_ENV}")


def require_delayer(release: str, setting: str) -> Callable[..., None]:
    """The AFTER hook of ``Scheduler.init_schedule_policy`` for ``release``: ``SystemExit`` with ``missing_flag`` when
    the scheduler built no delayer and the flag is unset (``KeyError`` for a release not in ``FLAG_READ``)."""
    flag_set = FLAG_READ[release]

    def after_init_schedule_policy(result: Any, scheduler: Any, *args: Any, **kwargs: Any) -> None:
        if getattr(scheduler, "prefill_delayer", None) is None and not flag_set(scheduler):
            raise SystemExit(missing_flag(setting))  # SystemExit: SGLang's `except Exception` would log a traceback

    return after_init_schedule_policy
