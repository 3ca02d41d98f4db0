"""A policy the simulated scheduler consults through the spec's ``SimBinding``, not through SGLang's delayer API.

A policy that SGLang's delayer call sites drive (``Policy.host``) runs in the
simulator as it runs in SGLang: the drop-in ``PrefillDelayer`` and its per-pass
executor. Every other policy runs here: its own ``PolicyCore`` over the
simulator's gather, consulted where its ``SimBinding`` says (``gate``: before
admission, as a scheduler method that decides whether ``get_new_batch_prefill``
runs at all; ``admission``: at the prefill adder's call sites), with the inputs
``SimBinding.inputs`` reads from what the rank's scheduler knows (``Facts``).
The pass is the executor's shape, so the rank drives both kinds alike: ask at
most once, then ``finalize``, which negotiates the idle inputs when nothing asked.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Sequence

from ..runtime.core import PolicyCore
from ..spec.errors import ConfigError
from ..spec.registry import policy_of
from .errors import SimInputError

GATE, ADMISSION = "gate", "admission"
# The layout the simulator sets itself: one attention rank per DP rank, DP attention on.
_LAYOUT = frozenset({"profile", "dp_size", "attn_tp_size", "attn_cp_size", "enable_dp_attention"})


class Facts(NamedTuple):
    """What a simulated rank's scheduler knows at the start of a pass: every ``SimBinding`` reads these."""

    token_usage: float
    running_batch: int
    max_prefill_bs: int
    max_running_requests: int
    waiting_queue_len: int
    extended: bool  # the rank's previous pass ran a prefill (extend) batch
    prefillable: bool  # the rank has prefill work: a waiting request or a chunk in progress


def binding_of(profile: str) -> Any:
    """The profile's ``SimBinding``, or a usage error naming what the simulator lacks."""
    policy = policy_of(profile)
    if policy.sim is None:
        raise SimInputError(
            f"profile {profile!r} is {policy.title}, which the simulator cannot run yet: its scheduler model does not "
            f"give the inputs it reads ({', '.join(policy.input_names)})"
        )
    if policy.sim.call_site not in (GATE, ADMISSION):
        raise SimInputError(f"profile {profile!r}: unknown simulator call site {policy.sim.call_site!r}")
    return policy.sim


def policy_config(profile: str, dp_size: int, settings: dict[str, Any], sets: Sequence[tuple[str, Any]] = ()) -> Any:
    """The policy's configuration for ``dp_size`` DP ranks of one attention rank each (DP attention on).

    ``settings`` (the simulated scheduler's options) and ``sets`` (``--set NAME=VALUE``)
    are taken where the policy has a parameter of that name.
    """
    policy = policy_of(profile)
    names = {p.name for p in policy.params} - _LAYOUT
    values = {k: v for k, v in settings.items() if k in names and v is not None}
    values.update((k, v) for k, v in sets if k in names)
    try:
        return policy.config_cls(profile=profile, dp_size=dp_size, attn_tp_size=1, attn_cp_size=1,
                                 enable_dp_attention=True, **values)
    except ConfigError as exc:
        raise SimInputError(f"profile {profile!r}: {exc}") from None


def check_sets(profiles: Sequence[Optional[str]], sets: Sequence[tuple[str, Any]]) -> None:
    """Every ``--set NAME`` must be a parameter of some simulated policy (else it would do nothing, silently)."""
    names = {p.name for prof in profiles if prof is not None for p in policy_of(prof).params} - _LAYOUT
    for name, _ in sets:
        if name not in names:
            raise SimInputError(
                f"--set {name}: no simulated policy has a parameter of that name (theirs: {', '.join(sorted(names)) or 'none'})"
            )


class PolicySite:
    """One rank's policy: a ``PolicyCore`` and the per-pass executor its scheduler drives."""

    __slots__ = ("core", "binding", "gate_first", "_sink", "_facts", "_decision")

    def __init__(self, core: PolicyCore, binding: Any, sink: Any) -> None:
        self.core = core
        self.binding = binding
        self.gate_first = binding.call_site == GATE
        self._sink = sink  # the rank's outcome record (``observe_prefill_delayer_outcome``)
        self._facts: Optional[Facts] = None
        self._decision: Any = None

    @property
    def passes(self) -> int:
        return self.core.passes

    def begin(self, facts: Facts) -> "PolicySite":
        """Start a pass from the rank's ``facts``; the rank's executor for this pass is the site itself."""
        self._facts = facts
        self._decision = None
        return self

    def negotiate_should_allow_prefill(self, local_prefillable: bool = True, *_: Any) -> bool:
        """The pass's one negotiation, with the binding's inputs (later calls return the same verdict)."""
        if self._decision is None:
            self._decision = self.core.negotiate(*self.binding.inputs(self._facts))
        return bool(self._decision.output_allow)

    def finalize(self, *, actual_prefill: bool) -> None:
        """End of pass: negotiate the idle inputs if nothing asked (one collective per pass), record, finalize."""
        if self._decision is None:
            self._decision = self.core.negotiate(*self.binding.idle_inputs(self._facts))
        estimation, allow, reason, forward_passes = self.binding.outcome(self._decision)
        self._sink.observe_prefill_delayer_outcome(forward_passes, 0.0, estimation, bool(allow), reason, actual_prefill)
        self.core.finalize()


__all__ = ["ADMISSION", "GATE", "Facts", "PolicySite", "binding_of", "check_sets", "policy_config"]
