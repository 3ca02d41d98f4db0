"""Exception types shared by every part, so callers can catch one family."""

from __future__ import annotations


class PrefillDelayerError(Exception):
    """Base of every error this package raises on purpose."""


class ConfigError(PrefillDelayerError, ValueError):
    """A configuration parameter is invalid; the message names it and its value."""


class PassInputError(PrefillDelayerError, ValueError):
    """A per-pass input (negotiate argument or gathered row) is invalid."""
