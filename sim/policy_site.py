"""A policy the simulated scheduler consults through the spec's ``SimBinding``, not through SGLang's delayer API.

On the ``sglang`` backend a policy that SGLang's delayer call sites drive
(``Policy.host``) runs as it runs in SGLang: the drop-in ``PrefillDelayer`` and
its per-pass executor. On the model backend every policy runs here: its own
``PolicyCore`` over the simulator's gather, consulted where its ``SimBinding`` says (``gate``: before
admission, as a scheduler method that decides whether ``get_new_batch_prefill``
runs at all; ``admission``: at the prefill adder's call sites), with the inputs
``SimBinding.inputs`` reads from what the rank's scheduler knows (``Facts``).
The pass is the executor's shape, so the rank drives both kinds alike: ask at
most once, then ``finalize``, which negotiates the idle inputs when nothing asked.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple, Optional, Sequence

from ..runtime.core import PolicyCore
from ..spec.errors import ConfigError
from ..spec.registry import policy_of
from .errors import SimInputError

GATE, ADMISSION = "gate", "admission"
# The layout the simulator sets itself: one attention rank per DP rank, DP attention on.
_LAYOUT = frozenset({"profile", "dp_size", "attn_tp_size", "attn_cp_size", "enable_dp_attention"})


class Facts(NamedTuple):
    """What a simulated rank's scheduler knows at the start of a pass: every ``SimBinding`` reads these.

    Each is read from the rank model's state (``rank.RankScheduler.facts``), never set by a policy.
    """

    token_usage: float  # KV tokens held / the pool's capacity
    running_batch: int  # requests in the running batch: past their prefill, decoding (a chunk in progress is not one)
    max_prefill_bs: int
    max_running_requests: int
    waiting_queue_len: int
    extended: bool  # the rank's previous pass ran a prefill (extend) batch
    prefillable: bool  # the rank has prefill work: a waiting request or a chunk in progress
    pending_prefill_tokens: int = 0  # prompt tokens still to prefill: the waiting prompts plus the chunk's rest
    chunk_in_progress: bool = False  # a chunked prefill is part-way: its next chunk is this pass's (add_chunked_req)
    chunk_tokens_left: int = 0  # the prompt tokens the chunk in progress has still to prefill
    head_fits: bool = False  # the head of the queue could be admitted now: a request slot, and KV for its prompt
    oldest_wait_s: float = 0.0  # how long the oldest waiting request has queued, simulated seconds (0: none waits)
    backlog: bool = False  # the last pass whose admission ran left requests waiting
    has_requests: bool = False  # the rank holds unfinished requests: waiting, chunked or running
    prefill_budget: int = 0  # the tokens one prefill pass may take (chunked_prefill_size)


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


def policy_config(profile: str, dp_size: int, settings: Mapping[str, Any], sets: Sequence[tuple[str, Any]] = ()) -> Any:
    """The policy's configuration for ``dp_size`` DP ranks of one attention rank each (DP attention on).

    ``settings`` (the simulated scheduler's options, ``SimConfig.policy_settings``) are taken where the
    policy has a parameter of that name, and where its ``SimBinding.params`` says one stands for another
    of its parameters; ``sets`` (``--set NAME=VALUE``) win over both.
    """
    policy = policy_of(profile)
    names = {p.name for p in policy.params} - _LAYOUT
    values = dict(policy.sim.params(settings)) if policy.sim is not None else {}
    values.update((k, v) for k, v in settings.items() if k in names and v is not None)
    values.update((k, v) for k, v in sets if k in names)
    try:
        return policy.config_cls(profile=profile, dp_size=dp_size, attn_tp_size=1, attn_cp_size=1,
                                 enable_dp_attention=True, **values)
    except ConfigError as exc:
        message = str(exc)
        given = {name for name, _ in sets}
        for name in given:  # a value the user gave with --set is named so (``--set NAME=VALUE``)
            message = re.sub(rf"(?<![\w-]){re.escape(name)}=", f"--set {name}=", message)
        for name, setting in _stood_for(policy, settings).items():  # a value a scheduler setting gave, by its name
            if name not in given:
                message = re.sub(rf"(?<![\w-]){re.escape(name)}=", f"{setting}=", message)
        raise SimInputError(f"profile {profile!r}: {message}") from None


def _stood_for(policy: Any, settings: Mapping[str, Any]) -> dict[str, str]:
    """Each parameter of ``policy`` a scheduler setting stands for (``SimBinding.params``), and that setting: what
    the user gave is the setting (``--chunked-prefill-size``), so a check of the parameter names it. A parameter
    stands for the setting without which the binding no longer gives it the same value."""
    if policy.sim is None:
        return {}
    given = dict(policy.sim.params(settings))
    out: dict[str, str] = {}
    for setting in settings:
        rest = policy.sim.params({k: v for k, v in settings.items() if k != setting})
        out.update((name, setting) for name, value in given.items() if name not in rest or rest[name] != value)
    return out


def as_off(profile: str, dp_size: int, settings: Mapping[str, Any], sets: Sequence[tuple[str, Any]] = ()) -> Optional[str]:
    """``prefill_decode_interval 0 (off)`` where ``profile``, so configured, defers no prefill and runs as off does
    (its rows would otherwise read as the policy's own: the spec's ``Param.runs_as_off``); None where it defers."""
    config = policy_config(profile, dp_size, settings, sets)
    for param in policy_of(profile).params:
        value = param.runs_as_off
        if value is not None and getattr(config, param.name) == value:
            gloss = re.search(rf"\({value}: ([^)]*)\)", param.valid)
            return f"{param.name} {value}" + (f" ({gloss.group(1)})" if gloss else "")
    return None


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

    __slots__ = ("core", "binding", "gate_first", "_sink", "_facts", "_decision", "_negotiate", "_inputs", "_idle_inputs",
                 "_outcome", "_observe", "_finalize")

    def __init__(self, core: PolicyCore, binding: Any, sink: Any) -> None:
        self.core = core
        self.binding = binding
        self.gate_first = binding.call_site == GATE
        self._sink = sink  # the rank's outcome record (``observe_prefill_delayer_outcome``)
        self._facts: Optional[Facts] = None
        self._decision: Any = None
        # What a pass calls, bound once (a pass runs them once a rank): the core's compiled pass and finalize, the
        # binding's functions, the sink's record.
        self._negotiate = core.negotiate
        self._finalize = core.finalize
        self._inputs, self._idle_inputs, self._outcome = binding.inputs, binding.idle_inputs, binding.outcome
        self._observe = sink.observe_prefill_delayer_outcome

    @property
    def passes(self) -> int:
        return self.core.passes

    def begin(self, facts: Facts) -> "PolicySite":
        """Start a pass from the rank's ``facts``; the rank's executor for this pass is the site itself."""
        self._facts = facts
        self._decision = None
        return self

    def ask(self, _args: Any) -> bool:
        """A call site's ``negotiate_should_allow_prefill`` (``rank.Ask``): the pass's one negotiation, with the
        binding's inputs read from the pass's facts, not the call site's arguments (a second call, the same verdict)."""
        decision = self._decision
        if decision is None:
            decision = self._decision = self._negotiate(*self._inputs(self._facts))
        return bool(decision.output_allow)

    @property
    def gates_partial_chunk(self) -> bool:
        """Whether this pass's refusal holds the chunk in progress too (the binding's declaration, or its rule on the
        policy's core after the refusal and this pass's facts)."""
        gates = self.binding.gates_partial_chunk
        return bool(gates(self.core, self._facts)) if callable(gates) else bool(gates)

    def prefill_phase(self) -> bool:
        """After ``finalize``: whether the pass's decision makes it a prefill phase, where a rank without a
        prefill batch idles instead of decoding (the binding's ``prefill_phase``; none: never)."""
        phase = self.binding.prefill_phase
        return phase is not None and self._decision is not None and bool(phase(self._decision))

    @property
    def has_prefill_phase(self) -> bool:
        """Whether a pass can be a prefill phase at all (the binding declares ``prefill_phase``)."""
        return self.binding.prefill_phase is not None

    def finalize(self, *, actual_prefill: bool) -> None:
        """End of pass: negotiate the idle inputs if nothing asked (one collective per pass), record, finalize."""
        decision = self._decision
        if decision is None:
            decision = self._decision = self._negotiate(*self._idle_inputs(self._facts))
        estimation, allow, reason, forward_passes = self._outcome(decision)
        self._observe(forward_passes, 0.0, estimation, bool(allow), reason, actual_prefill)
        self._finalize()


__all__ = ["ADMISSION", "GATE", "Facts", "PolicySite", "binding_of", "check_sets", "policy_config"]
