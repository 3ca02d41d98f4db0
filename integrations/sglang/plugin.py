"""The ``sglang.srt.plugins`` entry point (``register``) and ``install``, the same by hand.

SGLang (0.5.14 on) calls ``register`` in every process that runs
``sglang.srt.plugins.load_plugins()``, the scheduler's included. It does
nothing unless ``PREFILL_DELAYER_PROFILE`` is set (to a profile, a release
``sglang-X``, or ``sglang`` for the installed release's own profile); then it
REPLACEs SGLang's ``PrefillDelayer`` and ``PrefillDelayerSinglePassExecutor``
with classes that have the installed release's constructor and decide as that
profile, and logs one line naming the profile and the spec hash. In a
scheduler process of a release that defers prefill per rank (0.5.23), it also
hooks ``Scheduler._should_defer_prefill`` (AFTER): a deferred pass takes part in
the delayer's all-gather (``deferral``), and the line says so. In every scheduler
process it hooks ``Scheduler.init_schedule_policy`` (AFTER): a scheduler that
built no delayer because ``--enable-prefill-delayer`` is unset stops with one
line, since the profile would decide nothing (``enablement``). A profile that
reads inputs from the scheduler itself (``HostBinding.reads``: ``aligned``'s chunk
in flight and queue) gets a BEFORE hook where each is read (``readings``), and the
line names it; a release where one cannot be read is refused. A profile whose
configuration holds a refused chunk (``aligned``'s ``chunk_hold_tokens``) gets the
chunk's reading and the hold as one AROUND hook instead (``chunk_hold``).
``PREFILL_DELAYER_PARAMS`` (``NAME=VALUE[,NAME=VALUE]``) sets the profile's
parameters that SGLang keeps nowhere (``aligned``'s ``quorum_percent``, say),
checked at start-up; the line names them. Set without ``PREFILL_DELAYER_PROFILE``
it stops the process: there is no profile for them to be parameters of. The
decision log's variables (``PREFILL_DELAYER_DECISION_LOG`` and its ``_MAX_MB``,
``_KEEP``, ``_ROWS``) are checked at start-up too, as the delayers will read them.

A bad value must stop the server, never leave SGLang's own delayer running:
``load_plugins`` logs and swallows any ``Exception`` a plugin raises, so
``register`` turns every failure into ``SystemExit`` with one clear line.
For the same reason this module imports only the standard library at import:
``load_plugins`` also swallows a plugin that fails to load.
"""

from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from . import chunk_hold, deferral, enablement, readings
from .announce import PARAMS_ENV, PROFILE_ENV, announce

INSTALLED = "sglang"  # the value that means: the installed release's own profile
TARGET_MODULE = "sglang.srt.managers.prefill_delayer"
TARGETS = ("PrefillDelayer", "PrefillDelayerSinglePassExecutor")

class PluginError(RuntimeError):
    """SGLang is missing, or is a release whose scheduler we have not read."""


@dataclass(frozen=True)
class Choice:
    """What a setting resolves to."""

    setting: str  # as given
    profile: str  # canonical profile name
    release: str  # the installed SGLang release
    reads: tuple = ()  # the profile's readings of the scheduler in this release (``readings.Reading``)
    max_prefill_bs: str = ""  # where the profile's max_prefill_bs comes from, when not the scheduler's argument as is
    params: tuple = ()  # (name, value) of the profile's parameters SGLang keeps nowhere, as given
    chunk_hold: Optional[int] = None  # the tokens left above which a refusal parks the chunk (``chunk_hold``); None: no hold

    def classes(self) -> tuple[type, type]:
        from .releases import classes_for

        return classes_for(self.release, self.profile, dict(self.params))


def parse_params(text: str) -> dict[str, Any]:
    """``PREFILL_DELAYER_PARAMS``: ``NAME=VALUE[,NAME=VALUE]`` (values as ``simulate --set`` reads them); ``ConfigError``
    for a part that is no ``NAME=VALUE`` (an empty one between commas too: a parameter lost from the list, never
    skipped) or a name given twice. A blank value sets nothing, as an unset one."""
    from ...spec.config import parse_setting
    from ...spec.errors import ConfigError

    out: dict[str, Any] = {}
    if not text.strip():
        return out
    for part in text.split(","):
        if not part.strip():
            raise ConfigError(f"{PARAMS_ENV}: expected NAME=VALUE[,NAME=VALUE], got {text!r}, which has an empty part")
        try:
            name, value = parse_setting(part)
        except ValueError as err:
            raise ConfigError(f"{PARAMS_ENV}: {err}") from None
        if name in out:
            raise ConfigError(f"{PARAMS_ENV}: {name} given twice")
        out[name] = value
    return out


def resolve(setting: str, params: Optional[Mapping[str, Any]] = None) -> Choice:
    """The profile ``setting`` names, and the installed release (whose constructor the classes get); ``params``, the
    profile's parameters SGLang keeps nowhere, checked now with the rest of its configuration.

    ``ConfigError`` for a name that is no profile or known release (listing the
    known ones), or a parameter the profile does not leave to us or a bad value;
    ``PluginError`` when SGLang is absent or its release unknown.
    """
    from ...spec.config import in_setting_words
    from ...spec.errors import ConfigError
    from ...spec.policies.sglang_delayer.profiles import RELEASES
    from ...spec.registry import host_profiles, policy_of, resolve_host_profile

    PROFILES = host_profiles()
    from .releases import API_OF_RELEASE

    try:
        import sglang
    except ImportError as err:
        raise PluginError(f"SGLang is not importable here ({err})") from err
    version = str(getattr(sglang, "__version__", "unknown"))
    known = ", ".join(f"sglang-{r}" for r in RELEASES)
    if setting == INSTALLED:
        if version not in RELEASES:
            raise ConfigError(
                f"{INSTALLED!r} means the profile of the installed SGLang, {version}, which is not a release this "
                f"package knows ({known}); name a profile instead: {', '.join(PROFILES)}"
            )
        profile = resolve_host_profile(f"sglang-{version}")
    else:
        try:  # a profile of a policy without a host binding is refused here, at start-up, with why
            profile = resolve_host_profile(setting)
        except ConfigError as err:
            raise ConfigError(f"{err}; or {INSTALLED!r}, the installed SGLang's own") from None
    if version not in API_OF_RELEASE:
        raise PluginError(
            f"the installed SGLang is {version}, whose PrefillDelayer constructor this package does not know "
            f"(known: {', '.join(API_OF_RELEASE)}); use one of those releases or unset {PROFILE_ENV}"
        )
    try:  # what the profile reads from the scheduler itself must be readable in this release, or nothing runs
        reads = readings.readings_for(tuple(f.name for f in policy_of(profile).host.reads), version)
    except ValueError as err:
        raise PluginError(f"profile {profile!r}: {err}") from None
    given = dict(params or {})
    policy = policy_of(profile)
    try:
        if given:
            from ...runtime.delayer import check_params

            check_params(profile, given)
        # the whole configuration at SGLang's defaults: the checks between parameters too (busy above the watermark)
        config = policy.config_cls(profile=profile, dp_size=1, enable_dp_attention=True, **given)
    except ConfigError as err:
        raise ConfigError(f"{PARAMS_ENV}: {in_setting_words(str(err))}" if given else str(err)) from None
    hold = policy.host.chunk_hold(config)
    if hold is not None and not any(r.target == chunk_hold.TARGET for r in reads):
        raise PluginError(f"profile {profile!r} holds a refused chunk at {chunk_hold.TARGET}, which it does not read")
    return Choice(setting, profile, version, tuple(reads), _max_prefill_bs(profile, version), tuple(given.items()), hold)


def _max_prefill_bs(profile: str, release: str) -> str:
    """How the profile's ``max_prefill_bs`` is had in ``release`` when it keeps its own tracker
    (``HostBinding.own_max_prefill_bs``): by the executor (0.5.18 on, whose ``finalize`` is handed the batch), or as
    the scheduler's argument where the release tracks it so already; ``PluginError`` where neither holds."""
    from ...spec.registry import own_max_prefill_bs

    own = own_max_prefill_bs(profile)
    if own is None:
        return ""
    from ...spec.trackers import TRACKER_OF_RELEASE
    from .releases import API_CLASSES, API_OF_RELEASE
    from .shell import PrefillDelayerSinglePassExecutor

    if issubclass(API_CLASSES[API_OF_RELEASE[release]][1], PrefillDelayerSinglePassExecutor):
        return f"max_prefill_bs: its own {own} mark, from the executor's finalize(actual_prefill_bs=), in place of the scheduler's"
    if TRACKER_OF_RELEASE[release] == own:
        return f"max_prefill_bs: the scheduler's, {own} in {release}"
    raise PluginError(f"profile {profile!r} negotiates with a {own} max_prefill_bs: SGLang {release}'s scheduler tracks "
                      f"{TRACKER_OF_RELEASE[release]}, and its executor's finalize is not handed the batch to keep one")


def _readings(choice: Choice, scheduler_process: bool) -> tuple:
    """The chosen profile's readings, in a scheduler process (none elsewhere: no scheduler, no pass)."""
    if not scheduler_process:
        return ()
    for reading in choice.reads:
        try:  # the method is there, so the framework's hook cannot fail to apply
            readings.target_owner(reading)
        except (ImportError, AttributeError) as err:
            raise PluginError(f"profile {choice.profile!r} reads {reading.name} at {reading.where}, which does not "
                              f"load here ({type(err).__name__}: {err})") from None
    return choice.reads


def register() -> None:
    """The entry point: REPLACE SGLang's two classes when ``PREFILL_DELAYER_PROFILE`` is set; else nothing (but stop
    when ``PREFILL_DELAYER_PARAMS`` or the decision log's variables are set without it)."""
    setting = os.environ.get(PROFILE_ENV, "")
    if setting == "":
        params = os.environ.get(PARAMS_ENV, "")
        if params.strip():  # a profile's parameters, and no profile: dropping them would leave SGLang's delayer running
            raise SystemExit(f"prefill-delayer: {PARAMS_ENV}={params!r} needs {PROFILE_ENV}, the profile whose parameters "
                             f"they are (unset {PARAMS_ENV} for SGLang's own delayer)")
        _no_log_without_profile()
        return
    _check_decision_log()
    try:
        choice = resolve(setting, parse_params(os.environ.get(PARAMS_ENV, "")))
        from sglang.srt.plugins.hook_registry import HookRegistry, HookType

        for name, cls in zip(TARGETS, choice.classes()):
            HookRegistry.register(f"{TARGET_MODULE}.{name}", cls, HookType.REPLACE)
        guarded = deferral.needs_guard(choice.release) and deferral.scheduler_loaded()
        if guarded:
            HookRegistry.register(deferral.TARGET, deferral.skip_deferred_pass, HookType.AFTER)
        if deferral.scheduler_loaded():  # a scheduler process: it must build a delayer for the profile to run
            HookRegistry.register(enablement.TARGET, _delayer_required(choice), HookType.AFTER)
        reads = _readings(choice, readings.scheduler_loaded())
        for reading in reads:
            if _holds_at(choice, reading):  # the chunk's reading and the hold in one hook: it negotiates first
                HookRegistry.register(reading.target, _hold_hook(choice, reading), HookType.AROUND)
            else:
                HookRegistry.register(reading.target, reading.hook_for(choice.release), HookType.BEFORE)
    except Exception as err:  # noqa: BLE001 - any failure stops the process: never SGLang's delayer instead
        raise SystemExit(f"prefill-delayer: {PROFILE_ENV}={setting!r}: {err}") from err
    announce(choice.release, choice.profile, choice.setting, "plugin", guarded, _shown(choice, reads),
             choice.max_prefill_bs, choice.params)


def _no_log_without_profile() -> None:
    """The decision log is written by this package's delayer, which runs only under a profile: SGLang's own writes
    none, so ``PREFILL_DELAYER_DECISION_LOG`` (or how it is written) without a profile was taken without a word, and
    the log the operator asked for never existed."""
    from ...runtime.decision_log import DECISION_LOG_ENV, HOW_ENVS

    given = [f"{name}={os.environ[name]!r}" for name in (DECISION_LOG_ENV, *HOW_ENVS) if os.environ.get(name, "").strip()]
    if given:
        raise SystemExit(f"prefill-delayer: {', '.join(given)} set without {PROFILE_ENV}: SGLang's own delayer writes no "
                         f"decision log (set {PROFILE_ENV}=sglang for the installed release's own profile, with its log, "
                         "or unset the log's variables)")


def _check_decision_log() -> None:
    """The decision log's variables (``PREFILL_DELAYER_DECISION_LOG_*``), read now as every delayer of this process
    will read them: a bad one stops the server at start-up with one line, not each scheduler after its model loads,
    inside SGLang's traceback."""
    from ...runtime.decision_log import options_from
    from ...spec.errors import ConfigError

    try:
        options_from(None)
    except ConfigError as err:
        raise SystemExit(f"prefill-delayer: {err}") from None


def _delayer_required(choice: Choice) -> Any:
    """``enablement``'s AFTER hook of ``Scheduler.init_schedule_policy`` for the choice, its method checked here: a hook
    the framework failed to apply would be logged and skipped, and the missing flag go unsaid again."""
    if choice.release not in enablement.FLAG_READ:
        raise PluginError(f"SGLang {choice.release}: where its scheduler reads {enablement.FLAG} is not known to this "
                          f"plugin (known: {', '.join(enablement.FLAG_READ)})")
    module, cls, method = enablement.TARGET.rsplit(".", 2)
    try:
        getattr(getattr(importlib.import_module(module), cls), method)
    except (ImportError, AttributeError) as err:
        raise PluginError(f"the scheduler's {cls}.{method}, where SGLang builds its delayer, does not load here "
                          f"({type(err).__name__}: {err})") from None
    return enablement.require_delayer(choice.release, choice.setting)


def _hold_hook(choice: Choice, reading: Any) -> Any:
    """The chunk hold's AROUND hook for the choice's release, threshold and the policy's test of the view."""
    from ...spec.registry import policy_of

    assert choice.chunk_hold is not None
    return chunk_hold.around_for(reading, choice.release, choice.chunk_hold, policy_of(choice.profile).host.chunk_hold_waits)


def _holds_at(choice: Choice, reading: Any) -> bool:
    """The reading is where the profile's chunk hold (when set) takes hold: ``add_chunked_req``."""
    return choice.chunk_hold is not None and reading.target == chunk_hold.TARGET


def _shown(choice: Choice, reads: tuple) -> tuple[tuple[str, str], ...]:
    hold = choice.chunk_hold
    return tuple((r.name + (f"; {chunk_hold.shown(hold)}" if hold is not None and _holds_at(choice, r) else ""), r.where)
                 for r in reads)


def install(profile: str = INSTALLED, params: Optional[Mapping[str, Any]] = None) -> tuple[type, type]:
    """Put our classes in place of SGLang's in this process, without the plugin framework; ``params`` sets the
    profile's parameters SGLang keeps nowhere (``PREFILL_DELAYER_PARAMS``' for the plugin).

    Replaces both names in ``sglang.srt.managers.prefill_delayer`` and every
    loaded module that imported them (the scheduler and ``schedule_policy``
    do ``from ... import``), as the framework's REPLACE does; a module imported
    later gets ours from the start. Call it in each scheduler process before
    the scheduler is built. Returns the two classes. Raises ``ConfigError`` /
    ``PluginError`` (nothing is replaced then).
    """
    choice = resolve(profile, params)
    reads = _readings(choice, True)  # called in a scheduler process: its hooks' modules import here
    new = choice.classes()
    module = importlib.import_module(TARGET_MODULE)
    for name, cls in zip(TARGETS, new):
        old = getattr(module, name)
        setattr(module, name, cls)
        for other in list(sys.modules.values()):
            if other is None or other is module:
                continue
            try:
                names = [k for k, v in vars(other).items() if v is old]
            except TypeError:
                continue
            for k in names:
                setattr(other, k, cls)
    guarded = deferral.needs_guard(choice.release) and deferral.scheduler_loaded()
    if guarded:
        scheduler = sys.modules[deferral.SCHEDULER_MODULE].Scheduler
        scheduler._should_defer_prefill = deferral.guard(scheduler._should_defer_prefill)
    hook_readings(choice, reads)
    announce(choice.release, choice.profile, choice.setting, "install", guarded, _shown(choice, reads),
             choice.max_prefill_bs, choice.params)
    return new


def hook_readings(choice: Choice, reads: tuple) -> list[tuple[Any, str, Any]]:
    """Each of ``reads`` hooked on its method in place, as the framework would hook it (BEFORE; the chunk hold's
    AROUND where it takes hold): ``install``'s way, and the simulator's. Returns (class, method, what was there)."""
    hooked = []
    for reading in reads:
        owner, method = readings.target_owner(reading), reading.target.rpartition(".")[2]
        original = getattr(owner, method)
        if _holds_at(choice, reading):
            new = chunk_hold.wrap(original, _hold_hook(choice, reading))
        else:
            new = readings.wrap(original, reading.hook_for(choice.release))
        setattr(owner, method, new)
        hooked.append((owner, method, original))
    return hooked
