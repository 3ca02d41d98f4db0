"""SGLang's ``PrefillDelayer`` API (0.5.22 on) as a thin shell over the runtime's core.

Why a shell: SGLang constructs its delayer from its own runtime context
(``get_parallel()``, ``get_schedule()``) and calls ``finalize(actual_prefill_bs=)``
on the executor; the policy, the one-collective gather and the failure handling
are the runtime's (``runtime.PrefillDelayer``), which this composes. The shell
only reads SGLang's context, picks the group as SGLang does, and keeps the
executor's attempted-batch estimate (not part of the policy: the scheduler's
``RecentPrefillBatchSizeTracker`` reads it). Anything added to the core (a
per-pass decision log, say) is therefore in this shell too, with nothing to
add here: ``delayer.core`` is that object.

``ShellDelayer`` is the part shared by every release's constructor
(``releases`` holds the older ones); ``PrefillDelayer`` is the current one.
SGLang is imported when a delayer is built, never at import.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

from types import MappingProxyType, SimpleNamespace

from ...runtime.delayer import PrefillDelayer as CoreDelayer
from ...runtime.delayer import PrefillDelayerSinglePassExecutor as CoreExecutor
from ...runtime.gather import GatherFn
from ...spec.errors import ConfigError, PassInputError
from ...spec.inputs import checks_of
from ...spec.registry import own_max_prefill_bs as own_max_prefill_bs_of
from ...spec.registry import policy_of
from ...spec.trackers import DECAY, DecayingMax
from .announce import flush_announcement

# The profile whose decisions are SGLang 0.5.22-0.5.23's bit for bit: the default of this API.
CURRENT_PROFILE = "sglang-0.5.22"


def nccl_env() -> bool:
    """SGLang's switch for riding the NCCL device group (``SGLANG_NCCL_ALL_GATHER_IN_OVERLAP_SCHEDULER_SYNC_BATCH``)."""
    from sglang.srt.environ import envs

    return envs.SGLANG_NCCL_ALL_GATHER_IN_OVERLAP_SCHEDULER_SYNC_BATCH.get()


def own_max_prefill_bs(profile: str) -> Optional[DecayingMax]:
    """The ``max_prefill_bs`` tracker the profile's delayer keeps itself (``HostBinding.own_max_prefill_bs``), fresh;
    None: it negotiates with the scheduler's argument."""
    kind = own_max_prefill_bs_of(profile)
    if kind is None:
        return None
    if kind != DECAY:
        raise ConfigError(f"profile {profile!r} keeps a {kind} max_prefill_bs tracker; the plugin keeps only {DECAY}")
    return DecayingMax()


class ShellDelayer:
    """What every release's shell shares: the core, and the attributes SGLang's code reads.

    ``profile`` (class attribute) is the default profile; the plugin and
    ``install`` bind it on a subclass, since SGLang's scheduler passes none.
    """

    profile: str = CURRENT_PROFILE
    params: Mapping[str, Any] = MappingProxyType({})  # the profile's parameters SGLang keeps nowhere (bound likewise)
    own_max_prefill_bs: Optional[DecayingMax] = None  # set by ``_build_core``

    def _build_core(
        self,
        *,
        num_dp_ranks: int,
        attn_dp_enabled: bool,
        attn_tp_size: int,
        attn_cp_size: int,
        settings: Any,
        cpu_group: Any,
        device_group: Any,
        device: Any,
        max_delay_passes: int,
        token_usage_low_watermark: Optional[float],
        metrics_collector: Optional[Any],
        debug_log_enabled: bool,
        profile: Optional[str],
        gather: Optional[GatherFn],
        clock: Optional[Callable[[], float]],
        params: Optional[Mapping[str, Any]] = None,
    ) -> None:
        # ``settings`` is where the release reads them (``server_args`` or ``get_schedule()``).
        # The core reads the policy's parameters SGLang keeps there (``Param.server_arg``);
        # disable_overlap_schedule selects the device group, so it carries SGLang's own
        # choice (its flag or its NCCL variable).
        chosen = profile if profile is not None else type(self).profile
        kept = {p.server_arg: getattr(settings, p.server_arg) for p in policy_of(chosen).params
                if p.server_arg is not None and p.server_arg != "enable_dp_attention"}
        view = SimpleNamespace(
            enable_dp_attention=attn_dp_enabled,
            disable_overlap_schedule=bool(settings.disable_overlap_schedule or nccl_env()),
            **kept,
        )
        self._core = CoreDelayer(
            num_dp_ranks,
            attn_tp_size,
            cpu_group,
            view,
            max_delay_passes,
            token_usage_low_watermark,
            metrics_collector,
            device,
            device_group,
            profile=chosen,
            gather=gather,
            clock=clock,
            params=params if params is not None else type(self).params,
            attn_cp_size=attn_cp_size,
            debug_log_enabled=debug_log_enabled,
        )
        self.own_max_prefill_bs = own_max_prefill_bs(chosen)
        # Both releases' spellings, for the executor's estimate and for code that reads them.
        self.num_dp_ranks = self.dp_size = num_dp_ranks
        self.attn_dp_enabled = self.enable_dp_attention = self._core.enable_dp_attention
        flush_announcement()  # the plugin's line, if logging was not set up when it registered

    @property
    def core(self) -> CoreDelayer:
        """The runtime's delayer this shell drives (``runtime.PrefillDelayer``)."""
        return self._core

    @property
    def config(self) -> Any:
        return self._core.config

    @property
    def state(self) -> Any:
        return self._core.state

    @property
    def passes(self) -> int:
        return self._core.passes

    @property
    def skip_first_delayer(self) -> bool:
        return self._core.skip_first_delayer

    @skip_first_delayer.setter
    def skip_first_delayer(self, value: bool) -> None:
        self._core.skip_first_delayer = value

    @property
    def _metrics_collector(self) -> Optional[Any]:
        return self._core._metrics_collector

    @property
    def _debug_log_enabled(self) -> bool:
        return self._core._debug_log_enabled

    def skip_pass(self) -> None:
        """This rank's scheduler skips this pass's negotiation (it deferred prefill): take part in the all-gather as
        skipping (``PolicyCore.skip``; ``deferral`` hooks it after ``Scheduler._should_defer_prefill``)."""
        self._core.skip()

    def _negotiate_should_allow_prefill(
        self,
        local_prefillable: bool,
        token_usage: float,
        running_batch: int = 0,
        max_prefill_bs: int = 0,
        max_running_requests: int = 0,
        waiting_queue_len: int = 0,
    ) -> Any:
        """SGLang's private entry point, as its tests call it: one whole pass (the core's
        ``_negotiate_should_allow_prefill``: negotiated, then ended, since no executor ends it)."""
        return self._core._negotiate_should_allow_prefill(
            local_prefillable, token_usage, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len
        )


class PrefillDelayer(ShellDelayer):
    """SGLang 0.5.22-0.5.23's constructor, reading ``get_parallel()`` and ``get_schedule()``.

    From the context: ``num_dp_ranks``, ``attn_dp_enabled``, ``attn_tp_size``,
    ``attn_cp_size`` and ``tp_group`` (its ``cpu_group``, or ``device_group`` on
    ``device`` when ``disable_overlap_schedule`` or
    ``SGLANG_NCCL_ALL_GATHER_IN_OVERLAP_SCHEDULER_SYNC_BATCH`` is set), and the
    queue ratio, ``prefill_delayer_max_delay_ms`` and ``prefill_max_requests``.
    Keyword-only extras, as on the runtime: ``profile`` and ``params`` (default: the
    class's), ``gather`` and ``clock``. Every value is validated (``ConfigError``); unlike
    SGLang, ``disable_overlap_schedule`` is not refused (see ``runtime.gather.default_gather``).
    """

    def __init__(
        self,
        max_delay_passes: int,
        token_usage_low_watermark: Optional[float],
        metrics_collector: Optional[Any] = None,
        debug_log_enabled: bool = True,
        *,
        profile: Optional[str] = None,
        gather: Optional[GatherFn] = None,
        clock: Optional[Callable[[], float]] = None,
        params: Optional[Mapping[str, Any]] = None,
    ) -> None:
        from sglang.srt.runtime_context import get_parallel, get_schedule

        parallel, schedule = get_parallel(), get_schedule()
        tp_group = parallel.tp_group
        self._build_core(
            num_dp_ranks=parallel.num_dp_ranks,
            attn_dp_enabled=parallel.attn_dp_enabled,
            attn_tp_size=parallel.attn_tp_size,
            attn_cp_size=parallel.attn_cp_size,
            settings=schedule,
            cpu_group=tp_group.cpu_group,
            device_group=tp_group.device_group,
            device=tp_group.device,
            max_delay_passes=max_delay_passes,
            token_usage_low_watermark=token_usage_low_watermark,
            metrics_collector=metrics_collector,
            debug_log_enabled=debug_log_enabled,
            profile=profile,
            gather=gather,
            clock=clock,
            params=params,
        )


class PassExecutor:
    """The releases' one-pass protocol over the runtime's executor (the seed's API: ``finalize(*, actual_prefill)``)."""

    def __init__(self, prefill_delayer: ShellDelayer, token_usage: float) -> None:
        self._prefill_delayer = prefill_delayer
        self._pass = CoreExecutor(prefill_delayer.core, token_usage)

    @property
    def _called(self) -> bool:
        return self._pass._called

    @property
    def _result(self) -> Optional[Any]:
        return self._pass._result

    def read_from_scheduler(self, name: str, value: Any) -> None:
        """An input the plugin reads from the scheduler itself (``readings``), for this pass."""
        self._pass.read_from_scheduler(name, value)

    def pass_view(self) -> Any:
        """The view this pass negotiated on, for the plugin's chunk hold (``chunk_hold``)."""
        return self._pass.pass_view()

    def negotiate_should_allow_prefill(
        self,
        local_prefillable: bool,
        running_batch: int = 0,
        max_prefill_bs: int = 0,
        max_running_requests: int = 0,
        waiting_queue_len: int = 0,
    ) -> bool:
        return self._pass.negotiate_should_allow_prefill(
            local_prefillable, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len
        )

    def finalize(self, *, actual_prefill: bool) -> None:
        self._pass.finalize(actual_prefill=actual_prefill)


class PrefillDelayerSinglePassExecutor(PassExecutor):
    """SGLang 0.5.18 on: ``finalize(*, actual_prefill_bs) -> int``, with the attempted-batch estimate.

    ``finalize`` returns ``actual_prefill_bs``, or, when nothing was prefilled,
    the largest batch this pass could have attempted (``min(waiting queue,
    free request slots)``, each at least 1, over the calls with a prefillable
    rank), which SGLang's batch-size tracker observes.

    A profile that keeps its own ``max_prefill_bs`` tracker (``aligned``) has it
    here: the scheduler builds this executor at the top of every
    ``get_new_batch_prefill`` (its start of pass), ``finalize`` hands it the
    batch, and the pass negotiates with its value in place of the call's
    ``max_prefill_bs`` (``negotiated_max_prefill_bs``).
    """

    def __init__(self, prefill_delayer: ShellDelayer, token_usage: float) -> None:
        super().__init__(prefill_delayer, token_usage)
        self._token_usage = token_usage
        self._attempted_prefill_bs = 0
        self._own = own = prefill_delayer.own_max_prefill_bs
        if own is not None:
            own.start_pass()

    def negotiated_max_prefill_bs(self, max_prefill_bs: int) -> int:
        """The ``max_prefill_bs`` this pass negotiates with, given the call's: the delayer's own tracker's, if any."""
        own = self._own
        return max_prefill_bs if own is None else own.value

    def negotiate_should_allow_prefill(
        self,
        local_prefillable: bool,
        running_batch: int = 0,
        max_prefill_bs: int = 0,
        max_running_requests: int = 0,
        waiting_queue_len: int = 0,
    ) -> bool:
        repeat = self._pass._called
        # The first call's arguments are checked by the negotiation (on every rank alike);
        # a repeat call gathers nothing, so its arguments are checked here, before the estimate.
        max_prefill_bs = self.negotiated_max_prefill_bs(max_prefill_bs)
        allow = self._pass.negotiate_should_allow_prefill(
            local_prefillable, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len
        )
        if local_prefillable:
            if repeat:
                policy = self._prefill_delayer.core.policy
                call = (local_prefillable, self._token_usage, running_batch, max_prefill_bs, max_running_requests,
                        waiting_queue_len)
                problems = checks_of(policy).problems(*(call if policy.host.inputs is None else policy.host.inputs(*call)))
                if problems:
                    raise PassInputError("invalid negotiate input: " + "; ".join(f"{n}: {why}" for n, why in problems))
            self._attempted_prefill_bs = max(
                self._attempted_prefill_bs,
                self._estimate_attempted_prefill_bs(
                    running_batch=running_batch,
                    max_running_requests=max_running_requests,
                    waiting_queue_len=waiting_queue_len,
                ),
            )
        return allow

    def _estimate_attempted_prefill_bs(self, *, running_batch: int, max_running_requests: int, waiting_queue_len: int) -> int:
        d = self._prefill_delayer
        local_max_running_requests = max_running_requests
        if not d.attn_dp_enabled:
            local_max_running_requests = (max_running_requests + d.num_dp_ranks - 1) // d.num_dp_ranks
        free_slots = max(local_max_running_requests - running_batch, 1)
        return min(max(waiting_queue_len, 1), free_slots)

    def finalize(self, *, actual_prefill_bs: int) -> int:  # type: ignore[override]
        self._pass.finalize(actual_prefill=actual_prefill_bs > 0)
        if self._own is not None:
            self._own.observe(actual_prefill_bs)
        return actual_prefill_bs or self._attempted_prefill_bs
