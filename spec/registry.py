"""Every policy of the spec, and the profile names that pick one.

Profile names are unique across policies, so a profile (or a release name that
resolves to one) picks its policy. The order here is the order of ``prove``'s
columns and of the docs.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

from .errors import ConfigError
from .policy import Policy

DEFAULT_PROFILE = "seed"  # what a configuration without a profile is: SGLang 0.5.14-0.5.16's delayer


@functools.lru_cache(maxsize=1)
def policies() -> tuple[Policy, ...]:
    """Every policy, loaded on first use (the policy modules import the spec's core, not this module)."""
    from .policies import (
        aligned, atom_930, atom_coalescer, prefill_decode_interval, sglang_delayer, sglang_lockstep, trtllm_adp_balance,
        vllm_prefill_cadence, vllm_prefill_delayer,
    )

    found = (sglang_delayer.POLICY, prefill_decode_interval.POLICY, vllm_prefill_cadence.POLICY, trtllm_adp_balance.POLICY,
             atom_coalescer.POLICY, atom_930.POLICY, vllm_prefill_delayer.POLICY, sglang_lockstep.POLICY, aligned.POLICY)
    names = [p for pol in found for p in pol.profile_names]
    owner = {a: pol.name for pol in found for a in pol.release_aliases}
    clash = [a for pol in found for a in pol.release_aliases if a in names and pol.release_aliases[a] != a]
    if len(names) != len(set(names)) or clash or sum(len(pol.release_aliases) for pol in found) != len(owner):
        raise AssertionError(f"profile and release names must be unique across policies: {names}, {sorted(owner)}")
    return found


@functools.lru_cache(maxsize=None)
def _by_profile() -> dict[str, Policy]:
    return {p: pol for pol in policies() for p in pol.profile_names}


@functools.lru_cache(maxsize=None)
def _aliases() -> dict[str, str]:
    return {a: p for pol in policies() for a, p in pol.release_aliases.items()}


def all_profiles() -> tuple[str, ...]:
    """Every canonical profile, policy by policy."""
    return tuple(p for pol in policies() for p in pol.profile_names)


def known_profile(name: Any) -> bool:
    """Whether ``resolve_profile`` accepts ``name``."""
    return isinstance(name, str) and (name in _by_profile() or name in _aliases())


def resolve_profile(name: Any) -> str:
    """The canonical profile of ``name``: a profile, or a release name (``sglang-X``) of a policy we read.

    Raises ``ConfigError`` listing the known names otherwise, so
    ``profile=f"sglang-{sglang.__version__}"`` either works or says why not.
    """
    if isinstance(name, str):
        if name in _by_profile():
            return name
        alias = _aliases().get(name)
        if alias is not None:
            return alias
    known = ", ".join(all_profiles())
    releases = ", ".join(_aliases())
    raise ConfigError(f"unknown profile {name!r}: expected one of {known}, or a release: {releases}")


def host_profiles() -> tuple[str, ...]:
    """The canonical profiles SGLang's delayer API (``PrefillDelayer`` and its executor) can run: a ``HostBinding``'s."""
    return tuple(p for pol in policies() if pol.host is not None for p in pol.profile_names)


def resolve_host_profile(name: Any) -> str:
    """``resolve_profile`` for what SGLang's delayer API runs; ``ConfigError`` naming exactly those names otherwise."""
    profile = resolve_profile(name) if known_profile(name) else None
    if profile is not None and _by_profile()[profile].host is not None:
        return profile
    hosts = host_profiles()
    releases = ", ".join(a for pol in policies() if pol.host is not None for a in pol.release_aliases)
    if profile is None:
        why = f"unknown profile {name!r}"
    else:
        pol = _by_profile()[profile]
        no_host = pol.extras.get("no_host")
        why = (f"profile {name!r} is of policy {pol.name}, which SGLang's PrefillDelayer does not run"
               + (f" ({no_host})" if no_host else ""))
    raise ConfigError(f"{why}: expected one of {', '.join(hosts)}, or a release: {releases}")


def policy_of(profile: Any) -> Policy:
    """The policy ``profile`` (a profile or release name; None: the default) belongs to."""
    return _by_profile()[resolve_profile(DEFAULT_PROFILE if profile is None else profile)]


def own_max_prefill_bs(profile: Any) -> Optional[str]:
    """The ``max_prefill_bs`` tracker ``profile``'s policy keeps itself in place of the scheduler's argument
    (``HostBinding.own_max_prefill_bs``); None: it keeps none, has no host binding, or is no profile (``off``)."""
    if not known_profile(profile):
        return None
    host = policy_of(profile).host
    return host.own_max_prefill_bs if host is not None else None


@functools.lru_cache(maxsize=None)
def policy_named(name: str) -> Policy:
    for pol in policies():
        if pol.name == name:
            return pol
    raise KeyError(f"no policy named {name!r}")


def param_named(name: str) -> Any:
    """The ``Param`` called ``name`` of the first policy that has one (what it may be, in words and as a check)."""
    for pol in policies():
        for p in pol.params:
            if p.name == name:
                return p
    raise KeyError(f"no policy has a parameter {name!r}")
