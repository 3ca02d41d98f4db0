"""Drop-in ``PrefillDelayer`` / ``PrefillDelayerSinglePassExecutor``: SGLang's delayer API over ``runtime.core``.

SGLang's scheduler builds a ``PrefillDelayer`` (the seed's constructor) and, once
per pass, a ``PrefillDelayerSinglePassExecutor`` whose
``negotiate_should_allow_prefill`` its call sites ask and whose ``finalize``
ends the pass. These classes keep that API for any policy that declares how
SGLang's call sites drive it (``Policy.host``): the call's arguments, the idle
pass, the metrics, the settings line; the policy's profile picks it. The pass
itself is ``PolicyCore``'s.
"""

from __future__ import annotations

import logging
from types import MappingProxyType
from typing import Any, Callable, Mapping, Optional

from ..spec.config import Config
from ..spec.errors import ConfigError
from ..spec.policy import ALL_GATHER
from ..spec.registry import DEFAULT_PROFILE, policy_of
from . import metrics as _metrics
from .core import CROSSCHECK_ENV, PolicyCore
from .envelope import Envelope
from .gather import Collective, default_gather
from .metrics import record_single_pass_result
from .server_args import server_arg

__all__ = ["CROSSCHECK_ENV", "PrefillDelayer", "PrefillDelayerSinglePassExecutor", "check_params", "host_config",
           "own_params"]

logger = logging.getLogger(__name__)


def host_config(profile: str, server_args: Any, dp_size: int, attn_tp_size: int, attn_cp_size: int,
                max_delay_passes: Any, token_usage_low_watermark: Any,
                params: Optional[Mapping[str, Any]] = None) -> Config:
    """The configuration SGLang's constructor arguments give the policy of ``profile``.

    Parameters the policy keeps in SGLang's settings are read from ``server_args``
    (``Param.server_arg``); SGLang passes ``max_delay_passes`` and
    ``token_usage_low_watermark`` itself, to the policy's parameters of those names.
    ``params`` sets the policy's own parameters that SGLang keeps nowhere (``aligned``'s
    ``quorum_percent``, say); naming one SGLang sets, or none of the policy's, is an error.
    """
    policy = policy_of(profile)
    if policy.host is None:
        raise ConfigError(
            f"profile {profile!r} is {policy.title}, which SGLang's PrefillDelayer call sites cannot drive: "
            "use it through prefill_delayer.runtime.PolicyCore"
        )
    names = {p.name for p in policy.params}
    values: dict[str, Any] = {"dp_size": dp_size, "attn_tp_size": attn_tp_size, "attn_cp_size": attn_cp_size, "profile": profile}
    for p in policy.params:
        if p.server_arg is not None:
            values[p.name] = server_arg(server_args, p.server_arg, f"profile {profile!r}")
    for name, value in (("max_delay_passes", max_delay_passes), ("token_usage_low_watermark", token_usage_low_watermark)):
        if name in names:
            values[name] = value
    values.update(check_params(profile, params if params is not None else {}))
    return policy.config_cls(**values)


# What SGLang's scheduler gives the delayer itself: the constructor's two settings, and the layout.
_SGLANG_GIVES = frozenset({"max_delay_passes", "token_usage_low_watermark", "dp_size", "attn_tp_size", "attn_cp_size",
                           "profile", "enable_dp_attention"})


def own_params(profile: str) -> tuple[Any, ...]:
    """The parameters of ``profile``'s policy that SGLang keeps nowhere (no server argument, not the constructor's):
    what ``params`` and the plugin's ``PREFILL_DELAYER_PARAMS`` may set (``aligned``'s ``quorum_percent``, say)."""
    return tuple(p for p in policy_of(profile).params if p.server_arg is None and p.name not in _SGLANG_GIVES)


def check_params(profile: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` if each is one of ``own_params(profile)`` with a valid value; ``ConfigError`` naming the first that
    is not, and the ones that may be set."""
    own = {p.name: p for p in own_params(profile)}
    if not isinstance(params, Mapping):
        raise ConfigError(f"params must map the profile's parameter names to values ({{'quorum_percent': 75}}, say), "
                          f"got {type(params).__name__} {params!r}")
    for name, value in params.items():
        param = own.get(name)
        if param is None:
            raise ConfigError(f"{name!r} is not a parameter of profile {profile!r} that SGLang leaves to the policy "
                              f"(those are: {', '.join(sorted(own)) or 'none'})")
        if not param.check(value):
            raise ConfigError(f"invalid {name}={value!r}: expected {param.valid}")
    return dict(params)


class PrefillDelayer:
    """Negotiates, once per scheduler pass, whether this pass may prefill.

    The seed's signature plus keyword-only extras: ``profile`` (any profile of a
    policy SGLang's call sites drive, or ``sglang-X`` for the release X whose
    decisions to make bit for bit; default ``spec.registry.DEFAULT_PROFILE``,
    SGLang 0.5.14-0.5.16's delayer, defects included), ``gather`` (a ``gather(row) -> rows`` callable that replaces the
    collective; see ``runtime.inprocess``), ``clock`` (seconds, default
    ``time.perf_counter``; read exactly once per pass) and ``attn_cp_size``
    (attention context-parallel ranks per DP group, for the profiles whose
    layout has it) and ``debug_log_enabled`` (SGLang 0.5.18's switch for the debug log
    lines, which also need ``SGLANG_PREFILL_DELAYER_DEBUG_LOG``).

    ``decision_log`` turns on the decision log (``runtime.decision_log``): a file
    path, a folder (``rank{global_rank}.jsonl`` in it), a writable text file or a
    ``DecisionLogOptions``; ``None`` (default) leaves it to the environment variable
    ``PREFILL_DELAYER_DECISION_LOG=DIR``, ``False`` turns it off. ``close()`` flushes it.

    ``server_args`` is read for ``enable_dp_attention``, ``disable_overlap_schedule``
    and the policy's parameters SGLang keeps there (for SGLang's delayer:
    ``prefill_delayer_queue_min_ratio``, ``prefill_delayer_max_delay_ms`` and
    ``prefill_max_requests``), as the releases read them; every parameter is
    validated (``ConfigError``). Without ``gather`` the collective is a
    ``torch.distributed`` all-gather chosen as the seed chooses it (see
    ``runtime.gather.default_gather``).
    """

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
        profile: str = DEFAULT_PROFILE,
        gather: Optional[Collective] = None,
        clock: Optional[Callable[[], float]] = None,
        attn_cp_size: int = 1,
        decision_log: Any = None,
        debug_log_enabled: bool = True,
        params: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.config = c = host_config(profile, server_args, dp_size, attn_tp_size, attn_cp_size, max_delay_passes,
                                      token_usage_low_watermark, params)
        if not isinstance(debug_log_enabled, bool):  # the string 'false' would turn the debug lines on
            raise ConfigError(f"debug_log_enabled must be a bool, got {type(debug_log_enabled).__name__} {debug_log_enabled!r}")
        _metrics.check_collector(metrics_collector)
        self.policy = c.policy
        self.host = self.policy.host
        # The seed's attribute names, for code and tests that read them.
        self.dp_size = dp_size
        self.enable_dp_attention = c.enable_dp_attention
        self._metrics_collector = metrics_collector
        # As the releases from 0.5.18 on: the debug log needs both the variable and this switch.
        self._debug_log_enabled = _metrics._DEBUG_LOG and bool(debug_log_enabled)
        logger.info(self.host.settings(c))
        if gather is None and self.policy.collective != ALL_GATHER:  # an all-reduce policy: the same group, reduced
            from .reduce import default_reduce

            gather = default_reduce(server_args, cpu_group, device, device_group, c)
        if gather is None:
            gather = default_gather(server_args, cpu_group, device, device_group, c.world_size, Envelope(c).row_len)
        self._core = PolicyCore(c, gather, clock=clock, decision_log=decision_log,
                                registry=getattr(metrics_collector, "registry", None))
        # The call's arguments are the inputs: the core's own compiled pass, with their names and defaults.
        self.negotiate = self._core.negotiate if self.host.inputs is None else _bind_call(self.host, self._core.negotiate)
        # The inputs the plugin reads from the scheduler itself, which an executor takes by name (``read_from_scheduler``).
        self.read_names = frozenset(f.name for f in self.host.reads)
        self.finalize = self._core.finalize  # type: ignore[method-assign]

    # ----- state -------------------------------------------------------------

    @property
    def core(self) -> PolicyCore:
        return self._core

    @property
    def state(self) -> Any:
        """Control state and extended variables (the policy's ``State``)."""
        return self._core.state

    @property
    def passes(self) -> int:
        """Passes negotiated successfully so far."""
        return self._core.passes

    @property
    def decision_log(self) -> Any:
        """The decision log, or ``None`` when it is off."""
        return self._core.decision_log

    def close(self) -> None:
        """Flush and close the decision log (if any); the delayer itself needs no closing."""
        self._core.close()

    def __getattr__(self, name: str) -> Any:
        host = self.__dict__.get("host")
        if host is not None and name in host.flags:
            return getattr(self._core.state, host.flags[name])
        core = self.__dict__.get("_core")
        if core is not None:  # the core's own attributes (its gather, group, fingerprint), for callers that read them
            return getattr(core, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        host = self.__dict__.get("host")
        if host is not None and name in host.flags:
            field = host.flags[name]
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {value!r}")
            self._core.set_variable(field, value)
            return
        core = self.__dict__.get("_core")
        if core is not None and name.startswith("_") and name not in self.__dict__ and name in core.__dict__:
            setattr(core, name, value)  # the core's own private attribute (its state, say), as reads of it are delegated
            return
        object.__setattr__(self, name, value)

    # ----- one pass ----------------------------------------------------------

    def finalize(self) -> Any:
        """End of pass: fire the table's ``finalize``."""
        return self._core.finalize()

    def skip(self) -> None:
        """This rank's host skips this pass's negotiation, which its peers may run (``PolicyCore.skip``)."""
        self._core.skip()

    # The seed's private name, for drop-in call sites.
    def _negotiate_should_allow_prefill(self, *args: Any, **kwargs: Any) -> Any:
        """One whole pass outside an executor: negotiate, then end the pass (``finalize``).

        SGLang's scheduler (0.5.14-0.5.23) reaches the delayer only through
        ``PrefillDelayerSinglePassExecutor``, whose ``finalize`` ends the pass; a caller
        of this private name (SGLang 0.5.23's own tests call it so) has no executor to
        end it. Ending it here keeps this rank's pass stamp equal to its peers', whichever
        of the two entry points each rank uses in a pass. A pass that raised is not ended,
        as an executor's is not (its ``finalize`` is never reached).
        """
        result = self.negotiate(*args, **kwargs)
        self._core.finalize()
        return result


def _bind_call(host: Any, negotiate: Callable[..., Any]) -> Callable[..., Any]:
    """``negotiate`` with the signature of SGLang's call (its names and defaults), the arguments mapped to the inputs.

    Generated once per delayer, so a pass pays one plain call for the keyword handling.
    """
    params = ", ".join(f.name if f.default is None else f"{f.name}={f.default!r}" for f in host.call + host.reads)
    names = ", ".join(f.name for f in host.call)
    reads = "".join(f", {f.name}" for f in host.reads)  # after the call's inputs, as ``HostBinding.reads`` says
    body = f"_negotiate({names}{reads})" if host.inputs is None else f"_negotiate(*_inputs({names}){reads})"
    namespace: dict[str, Any] = {"_negotiate": negotiate, "_inputs": host.inputs}
    exec(f"def negotiate({params}):\n    return {body}\n", namespace)
    fn: Callable[..., Any] = namespace["negotiate"]
    fn.__doc__ = "One pass: gather every rank's row and fire the policy's negotiate (PolicyCore.negotiate)."
    return fn


class PrefillDelayerSinglePassExecutor:
    """One scheduler pass: negotiate at most once, then ``finalize`` records and ends the pass.

    Exactly the seed's behaviour: later ``negotiate_should_allow_prefill`` calls
    return the cached verdict; ``finalize`` negotiates as the idle pass (for
    SGLang's delayer: not prefillable, all counts 0; SGLang 0.5.23's own
    ``finalize`` calls ``negotiate_should_allow_prefill(local_prefillable=False)``
    likewise) when nothing did, so every rank runs exactly one collective per
    pass and its pass stamp stays its peers', then records the outcome; it then
    fires the table's ``finalize``.
    """

    # The inputs read from the scheduler for this pass (``read_from_scheduler``); none by default, without a dict
    # made per pass (an executor is built every pass).
    _reads: Mapping[str, Any] = MappingProxyType({})

    def __init__(self, prefill_delayer: PrefillDelayer, token_usage: float) -> None:
        self._prefill_delayer = prefill_delayer
        self._token_usage = token_usage
        self._result: Any = None

    def read_from_scheduler(self, name: str, value: Any) -> None:
        """An input the policy reads from the scheduler itself (``HostBinding.reads``), for this pass's negotiation.

        The plugin's hooks call it before the call site that negotiates (``integrations.sglang.readings``); it is
        checked with the other inputs when the pass negotiates. A reading after that is an error, never dropped.
        """
        if name not in self._prefill_delayer.read_names:
            raise ValueError(f"{name!r} is not an input the policy reads from the scheduler "
                             f"(it reads: {', '.join(sorted(self._prefill_delayer.read_names)) or 'none'})")
        if self._result is not None:
            raise RuntimeError(f"{name} read from the scheduler after this pass negotiated: the pass's decision did "
                               "not see it (the reading's hook must run before the call site that negotiates)")
        self._reads = {**self._reads, name: value}  # a new mapping: the class's empty one is shared
        # This pass negotiates with the readings: the variant that passes them (the plain pass has no test for them).
        self.negotiate_should_allow_prefill = self._negotiate_with_reads  # type: ignore[method-assign]

    @property
    def _called(self) -> bool:
        return self._result is not None

    def pass_view(self) -> Any:
        """The view this pass negotiated on (``PolicyCore.pass_view``): for the plugin's action on a refusal."""
        if self._result is None:
            raise RuntimeError("this pass has not negotiated: there is no view yet")
        return self._prefill_delayer.core.pass_view()

    def finalize(self, *, actual_prefill: bool) -> None:
        result = self._result
        delayer = self._prefill_delayer
        if result is None:
            self.negotiate_should_allow_prefill(**delayer.host.idle_call)
            result = self._result
        if delayer._debug_log_enabled or delayer._metrics_collector is not None:  # else the record does nothing
            record_single_pass_result(actual_prefill, result, delayer._metrics_collector, delayer.host,
                                      debug_log_enabled=delayer._debug_log_enabled)
        delayer.finalize()

    def negotiate_should_allow_prefill(
        self,
        local_prefillable: bool,
        running_batch: int = 0,
        max_prefill_bs: int = 0,
        max_running_requests: int = 0,
        waiting_queue_len: int = 0,
    ) -> bool:
        result = self._result
        if result is None:
            result = self._result = self._prefill_delayer.negotiate(
                local_prefillable, self._token_usage, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len
            )
        return result.output_allow  # type: ignore[no-any-return]

    def _negotiate_with_reads(self, local_prefillable: bool, *args: Any, **named: Any) -> bool:
        """``negotiate_should_allow_prefill`` of a pass that read inputs from the scheduler: the call's arguments as
        SGLang passes them, then the readings by name."""
        result = self._result
        if result is None:
            result = self._result = self._prefill_delayer.negotiate(
                local_prefillable, self._token_usage, *args, **named, **self._reads)
        return result.output_allow  # type: ignore[no-any-return]
