"""Configurations: the base every policy's configuration class extends, and the layout they share.

``Config(**parameters)`` builds the configuration of the policy its ``profile``
belongs to (``Config(profile="hardened", ...)`` is the SGLang delayer's): each
policy declares a frozen dataclass subclass with its parameters, and
``PARAMETERS`` (one ``spec.policy.Param`` each) says what each may be. The
layout parameters (how the ranks of one all-gather form DP groups) are the same
for every policy: ``LAYOUT_PARAMS``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from typing import Any, Callable, ClassVar

from .errors import ConfigError
from .policy import Param

# Ranks in one all-gather: far above any deployment, and small enough that the
# compiled step (one expression per gathered value) is built in about a second.
MAX_WORLD_SIZE = 2**16


def is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_real(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def plain(x: Any) -> str:
    """A value as a user would type it on a command line: a whole float without the ``.0`` argparse's ``float`` gives
    it (-1, not -1.0; 1048576, not 1.04858e+06), any other number as Python writes it (0.5, 1e-05), anything else as
    its repr (quoted text). What a message or header quoting an option's value shows."""
    if isinstance(x, float) and math.isfinite(x) and x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return str(x) if is_real(x) else repr(x)


def parse_setting(text: str) -> tuple[str, Any]:
    """``NAME=VALUE``: an integer, a number, true/false, none, or else text (the policy's configuration checks it).
    ``ValueError`` when there is no ``=`` or no name, or for a number as Python's ``int``/``float`` read it and no
    one writes it on a command line (``7_5``, which they read as 75; digits of other scripts). What ``simulate --set``
    and the plugin's ``PREFILL_DELAYER_PARAMS`` read."""
    name, sep, raw = text.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"expected NAME=VALUE, got {text!r}")
    value: Any = raw.strip()
    low = value.lower()
    if low in ("true", "false"):
        value = low == "true"
    elif low == "none":
        value = None
    else:
        for kind in (int, float):
            try:
                number = kind(value)
            except ValueError:
                continue
            if "_" in value or not value.isascii():
                raise ValueError(f"expected NAME=VALUE with a number in plain digits (0-9, no '_'), got {text!r}")
            value = number
            break
    return name.strip(), value


def in_setting_words(message: str) -> str:
    """A configuration error as a ``NAME=VALUE`` setting (``parse_setting``) is written: its unset value is ``none``,
    where the spec, for the Python API, writes ``None`` (``expected None (off) or ...``, ``or None to turn ... off``).
    A setting's text holds no other ``None``: ``parse_setting`` reads ``none`` in any case as the unset value."""
    return re.sub(r"\bNone\b", "none", message)


def count_in(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: is_int(v) and lo <= v <= hi


def layout_params(cp_note: str = "") -> tuple[Param, ...]:
    """dp_size, attn_tp_size, attn_cp_size and enable_dp_attention: the gather's shape."""
    return (
        Param("dp_size", 1, f"integer in [1, {MAX_WORLD_SIZE}]", count_in(1, MAX_WORLD_SIZE)),
        Param("attn_tp_size", 1, f"integer in [1, {MAX_WORLD_SIZE}]", count_in(1, MAX_WORLD_SIZE)),
        Param("attn_cp_size", 1, f"integer in [1, {MAX_WORLD_SIZE}]" + cp_note, count_in(1, MAX_WORLD_SIZE)),
        Param("enable_dp_attention", False, "bool", lambda v: isinstance(v, bool), server_arg="enable_dp_attention"),
    )


class Layout:
    """The gather's shape from the layout parameters: for a configuration, and for the proofs' symbolic one.

    ``dp_size`` may be a Z3 term in a symbolic configuration; the rest are ints.
    """

    # Declared here for the readers typed by the base class (the runtime, check-log); every policy's dataclass
    # sets them (``layout_params``). Layout is no dataclass, so these add no field.
    dp_size: Any
    attn_tp_size: int
    attn_cp_size: int
    enable_dp_attention: bool

    @property
    def dp_dim(self) -> Any:
        """Number of DP groups in the gather (the seed's ``dp_size_dim``)."""
        return self.dp_size if self.enable_dp_attention else 1

    @property
    def group_size(self) -> int:
        """Ranks per DP group in the gather; the first of each group is counted."""
        return self.attn_cp_size * self.attn_tp_size

    @property
    def world_size(self) -> Any:
        """Ranks taking part in the all-gather."""
        return self.dp_dim * self.group_size


class Config(Layout):
    """A validated configuration of some policy. Construction raises ``ConfigError`` on any bad field.

    Subclasses are frozen dataclasses; ``policy_name`` names their policy. The
    layout views (``dp_dim``, ``group_size``, ``world_size``) are the same for all.
    """

    policy_name: ClassVar[str] = ""
    profile: str  # every policy's dataclass declares it: the profile its defaults and features come from
    _features: frozenset[str]

    def __new__(cls, *args: Any, **kwargs: Any) -> "Config":
        if cls is Config:  # the policy's own class, chosen by the profile
            from .registry import policy_of

            cls = policy_of(kwargs.get("profile")).config_cls
        return object.__new__(cls)

    # ----- validation, for the subclasses' __post_init__ ---------------------------------

    def _apply_profile_defaults(self) -> None:
        """Give every parameter left ``None`` the value its profile's default set has for it (``Profile.defaults``).

        An unknown profile is left to ``_validate``, which names the known ones.
        """
        from .registry import known_profile, policy_of, resolve_profile

        if not known_profile(self.profile):
            return
        name = resolve_profile(self.profile)
        for param, value in policy_of(name).profile(name).defaults:
            if getattr(self, param) is None:
                object.__setattr__(self, param, value)

    def _validate(self, params: tuple[Param, ...]) -> None:
        """Check every parameter, resolve the profile, and check the layout's size."""
        from .registry import policy_of, resolve_profile

        for p in params:
            value = getattr(self, p.name)
            if not p.check(value):
                raise ConfigError(f"invalid {p.name}={value!r}: expected {p.valid}")
        # A release name (sglang-0.5.20) is stored as the profile it is (sglang-0.5.19).
        profile = resolve_profile(self.profile)
        if policy_of(profile).name != self.policy_name:
            raise ConfigError(f"profile {profile!r} is a profile of policy {policy_of(profile).name!r}, not {self.policy_name!r}")
        object.__setattr__(self, "profile", profile)
        object.__setattr__(self, "_features", policy_of(profile).features_of(profile))
        if self.world_size > MAX_WORLD_SIZE:
            raise ConfigError(
                f"invalid layout: {self.world_size} ranks in the gather (dp_size x attn_cp_size x attn_tp_size with DP "
                f"attention, else attn_cp_size x attn_tp_size), expected at most {MAX_WORLD_SIZE}"
            )

    # ----- views every consumer reads ------------------------------------------------

    @property
    def policy(self) -> Any:
        """The ``spec.policy.Policy`` this configuration belongs to."""
        from .registry import policy_named

        return policy_named(self.policy_name)

    @property
    def features(self) -> frozenset[str]:
        """The profile's features: what the guards and the table ask for."""
        return self._features

    def replace(self, **changes: Any) -> "Config":
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload, no-any-return]

    def fingerprint(self) -> int:
        """A 62-bit hash of every field, sent in each gathered row to detect mismatched ranks."""
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return int.from_bytes(hashlib.sha256(blob).digest()[:8], "big") >> 2


class SymLayout(Layout):
    """``Layout`` with the profile's features, for a proofs' configuration (``ProofHooks.sym_config``) whose
    dataclass has a ``profile`` field, as ``Config`` reads them from its own."""

    profile: str

    @property
    def features(self) -> frozenset[str]:
        from .registry import policy_of

        return policy_of(self.profile).features_of(self.profile)
