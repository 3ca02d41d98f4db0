"""The constructor each SGLang release's scheduler calls, 0.5.14 to 0.5.23, over the same shell.

Read off each release's ``sglang/srt/managers/prefill_delayer.py`` and the
``PrefillDelayer(...)`` call in its ``scheduler.py``:

| releases | constructor | settings from | executor's ``finalize`` |
|---|---|---|---|
| 0.5.14-0.5.17 | ``(dp_size, attn_tp_size, cpu_group, server_args, max_delay_passes, token_usage_low_watermark, metrics_collector=None, device="cpu", device_group=None)`` | ``server_args`` | ``(*, actual_prefill)`` |
| 0.5.18 | the same plus ``debug_log_enabled=True`` | ``server_args``; DP attention from ``get_parallel()`` | ``(*, actual_prefill_bs) -> int`` |
| 0.5.19-0.5.20 | ``(dp_size, attn_tp_size, cpu_group, max_delay_passes, token_usage_low_watermark, metrics_collector=None, device="cpu", device_group=None, debug_log_enabled=True)`` | ``get_schedule()``, ``get_parallel()`` | as 0.5.18 |
| 0.5.21 | ``(cpu_group, max_delay_passes, token_usage_low_watermark, metrics_collector=None, device="cpu", device_group=None, debug_log_enabled=True)`` | the same, DP size and attn-TP size too | as 0.5.18 |
| 0.5.22-0.5.23 | ``(max_delay_passes, token_usage_low_watermark, metrics_collector=None, debug_log_enabled=True)`` | ``get_parallel()`` (groups included), ``get_schedule()`` | as 0.5.18 |

Each class reads exactly what its release reads, from where it reads it, and
hands the rest to ``shell.ShellDelayer``; ``classes_for`` binds a profile.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

from ...runtime.gather import GatherFn
from .shell import PassExecutor, PrefillDelayer, PrefillDelayerSinglePassExecutor, ShellDelayer


class PrefillDelayer_0_5_14(ShellDelayer):
    """SGLang 0.5.14-0.5.17: every setting from ``server_args``."""

    def __init__(
        self,
        dp_size: int,
        attn_tp_size: int,
        cpu_group: Any,
        server_args: Any,
        max_delay_passes: int,
        token_usage_low_watermark: Optional[float],
        metrics_collector: Optional[Any] = None,
        device: Any = "cpu",
        device_group: Any = None,
        *,
        profile: Optional[str] = None,
        gather: Optional[GatherFn] = None,
        clock: Optional[Callable[[], float]] = None,
        params: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self._build_core(
            num_dp_ranks=dp_size,
            attn_dp_enabled=server_args.enable_dp_attention,
            attn_tp_size=attn_tp_size,
            attn_cp_size=1,
            settings=server_args,
            cpu_group=cpu_group, device_group=device_group, device=device,
            max_delay_passes=max_delay_passes, token_usage_low_watermark=token_usage_low_watermark,
            metrics_collector=metrics_collector, debug_log_enabled=True, profile=profile, gather=gather, clock=clock,
            params=params,
        )


class PrefillDelayer_0_5_18(ShellDelayer):
    """SGLang 0.5.18: 0.5.14's constructor plus ``debug_log_enabled``; DP attention from ``get_parallel()``."""

    def __init__(
        self,
        dp_size: int,
        attn_tp_size: int,
        cpu_group: Any,
        server_args: Any,
        max_delay_passes: int,
        token_usage_low_watermark: Optional[float],
        metrics_collector: Optional[Any] = None,
        device: Any = "cpu",
        device_group: Any = None,
        debug_log_enabled: bool = True,
        *,
        profile: Optional[str] = None,
        gather: Optional[GatherFn] = None,
        clock: Optional[Callable[[], float]] = None,
        params: Optional[Mapping[str, Any]] = None,
    ) -> None:
        from sglang.srt.runtime_context import get_parallel

        self._build_core(
            num_dp_ranks=dp_size,
            attn_dp_enabled=get_parallel().enable_dp_attention,
            attn_tp_size=attn_tp_size,
            attn_cp_size=1,
            settings=server_args,
            cpu_group=cpu_group, device_group=device_group, device=device,
            max_delay_passes=max_delay_passes, token_usage_low_watermark=token_usage_low_watermark,
            metrics_collector=metrics_collector, debug_log_enabled=debug_log_enabled, profile=profile, gather=gather,
            clock=clock, params=params,
        )


class PrefillDelayer_0_5_19(ShellDelayer):
    """SGLang 0.5.19-0.5.20: no ``server_args``; settings from ``get_schedule()``."""

    def __init__(
        self,
        dp_size: int,
        attn_tp_size: int,
        cpu_group: Any,
        max_delay_passes: int,
        token_usage_low_watermark: Optional[float],
        metrics_collector: Optional[Any] = None,
        device: Any = "cpu",
        device_group: Any = None,
        debug_log_enabled: bool = True,
        *,
        profile: Optional[str] = None,
        gather: Optional[GatherFn] = None,
        clock: Optional[Callable[[], float]] = None,
        params: Optional[Mapping[str, Any]] = None,
    ) -> None:
        from sglang.srt.runtime_context import get_parallel, get_schedule

        schedule = get_schedule()
        self._build_core(
            num_dp_ranks=dp_size,
            attn_dp_enabled=get_parallel().enable_dp_attention,
            attn_tp_size=attn_tp_size,
            attn_cp_size=1,
            settings=schedule,
            cpu_group=cpu_group, device_group=device_group, device=device,
            max_delay_passes=max_delay_passes, token_usage_low_watermark=token_usage_low_watermark,
            metrics_collector=metrics_collector, debug_log_enabled=debug_log_enabled, profile=profile, gather=gather,
            clock=clock, params=params,
        )


class PrefillDelayer_0_5_21(ShellDelayer):
    """SGLang 0.5.21: DP size and attn-TP size from ``get_parallel()`` too; the groups still passed."""

    def __init__(
        self,
        cpu_group: Any,
        max_delay_passes: int,
        token_usage_low_watermark: Optional[float],
        metrics_collector: Optional[Any] = None,
        device: Any = "cpu",
        device_group: Any = None,
        debug_log_enabled: bool = True,
        *,
        profile: Optional[str] = None,
        gather: Optional[GatherFn] = None,
        clock: Optional[Callable[[], float]] = None,
        params: Optional[Mapping[str, Any]] = None,
    ) -> None:
        from sglang.srt.runtime_context import get_parallel, get_schedule

        parallel, schedule = get_parallel(), get_schedule()
        self._build_core(
            num_dp_ranks=parallel.dp_size,
            attn_dp_enabled=parallel.enable_dp_attention,
            attn_tp_size=parallel.attn_tp_size,
            attn_cp_size=1,
            settings=schedule,
            cpu_group=cpu_group, device_group=device_group, device=device,
            max_delay_passes=max_delay_passes, token_usage_low_watermark=token_usage_low_watermark,
            metrics_collector=metrics_collector, debug_log_enabled=debug_log_enabled, profile=profile, gather=gather,
            clock=clock, params=params,
        )


# The first release of each constructor, and its classes.
API_CLASSES: dict[str, tuple[type, type]] = {
    "0.5.14": (PrefillDelayer_0_5_14, PassExecutor),
    "0.5.18": (PrefillDelayer_0_5_18, PrefillDelayerSinglePassExecutor),
    "0.5.19": (PrefillDelayer_0_5_19, PrefillDelayerSinglePassExecutor),
    "0.5.21": (PrefillDelayer_0_5_21, PrefillDelayerSinglePassExecutor),
    "0.5.22": (PrefillDelayer, PrefillDelayerSinglePassExecutor),
}
API_OF_RELEASE: dict[str, str] = {
    "0.5.14": "0.5.14", "0.5.15": "0.5.14", "0.5.16": "0.5.14", "0.5.17": "0.5.14",
    "0.5.18": "0.5.18",
    "0.5.19": "0.5.19", "0.5.20": "0.5.19",
    "0.5.21": "0.5.21",
    "0.5.22": "0.5.22", "0.5.23": "0.5.22",
}


def classes_for(release: str, profile: str, params: Optional[Mapping[str, Any]] = None) -> tuple[type, type]:
    """``(PrefillDelayer, PrefillDelayerSinglePassExecutor)`` for SGLang ``release``'s scheduler, deciding as ``profile``
    with ``params`` (its parameters SGLang keeps nowhere).

    ``release`` must be a key of ``API_OF_RELEASE`` (``KeyError`` otherwise);
    ``profile`` and ``params`` are stored as given and validated when a delayer is built.
    """
    delayer, executor = API_CLASSES[API_OF_RELEASE[release]]
    bound = type(
        "PrefillDelayer",
        (delayer,),
        {"profile": profile, "params": MappingProxyType(dict(params or {})), "__module__": delayer.__module__,
         "__qualname__": "PrefillDelayer",
         "__doc__": f"{delayer.__doc__}\n\nBound to profile {profile!r} for SGLang {release}."},
    )
    return bound, executor
