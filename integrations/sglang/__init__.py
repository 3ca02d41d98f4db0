"""The delayer inside a real SGLang scheduler.

``PrefillDelayer`` / ``PrefillDelayerSinglePassExecutor`` have the API of SGLang's
current release line (0.5.22-0.5.23) and read SGLang's runtime context; the
plugin (``plugin.register``, the ``sglang.srt.plugins`` entry point) swaps them
in when ``PREFILL_DELAYER_PROFILE`` is set, and ``install(profile)`` does the same
by hand, for every release from 0.5.14 (``releases`` holds the older
constructors). Importing this package imports neither SGLang nor torch: the
classes are loaded on first use, so the plugin entry point cannot fail to load.
"""

from __future__ import annotations

from typing import Any

from .plugin import PROFILE_ENV, PluginError, install, register

__all__ = [
    "PROFILE_ENV",
    "PluginError",
    "PrefillDelayer",
    "PrefillDelayerSinglePassExecutor",
    "install",
    "register",
]


def __getattr__(name: str) -> Any:
    if name in ("PrefillDelayer", "PrefillDelayerSinglePassExecutor"):
        from . import shell

        return getattr(shell, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
