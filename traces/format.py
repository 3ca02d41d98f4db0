"""Counterexample traces: concrete passes from freshly built delayers.

``validate_trace`` is shared by the writer (``prove --traces``) and the reader
(``replay``), so a trace that can be written can be replayed, and a trace that
cannot be replayed is refused up front with the place of its first problem
(``passes[3].ranks[1].running_batch``) instead of failing deep in the runtime.
Every key is the policy's own (``spec.schema``): its parameters, its inputs by
trace name, its decision key.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Optional

from ..files import read_input
from ..spec.errors import ConfigError
from ..spec.fields import BOOL, COUNT, INT64_MAX, MAX_COUNT, REASON, USAGE
from ..spec.registry import known_profile, policy_of, resolve_profile
from ..spec.schema import TRACE_CLOCK, TRACE_TOP_KEYS, config_keys, trace_expect_keys, trace_rank_keys

TOP_KEYS = TRACE_TOP_KEYS


class TraceError(ValueError):
    """A trace that cannot be replayed; ``path`` names where (empty: the whole file)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


class TraceReadError(TraceError):
    """The file cannot be read or is not JSON: nothing inside it was looked at."""


# ----- describing values -------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, as the user wrote it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _show(value: Any, limit: int = 60) -> str:
    """``value`` as JSON text, cut short so one bad entry keeps the message on one line."""
    if _is_int(value) and value.bit_length() > 256:  # too long to show, and maybe to convert to text
        return f"(an integer of {value.bit_length()} bits)"
    try:
        text = json.dumps(value, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _got(value: Any) -> str:
    return f"got {_json_type(value)} {_show(value)}" if value is not None else "got null"


def _at(path: str, key: Any) -> str:
    """``path`` extended by an object key or an array index."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


# ----- checks of single values -------------------------------------------------


def _need_object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TraceError(path, f"expected an object, {_got(value)}")
    return value


def _need_list(value: Any, path: str, length: Optional[int] = None, what: str = "entries") -> list[Any]:
    if not isinstance(value, list):
        raise TraceError(path, f"expected an array, {_got(value)}")
    if length is not None and len(value) != length:
        raise TraceError(path, f"expected {length} {what}, got {len(value)}")
    return value


def _need_keys(obj: dict[str, Any], path: str, keys: tuple[str, ...], strict: bool) -> None:
    """Every key of ``keys`` present; with ``strict``, no other key either."""
    missing = [k for k in keys if k not in obj]
    if missing:
        names = ", ".join(repr(k) for k in missing)
        what = "top-level key" if not path else "field"
        raise TraceError(path, f"missing {what}{'s' if len(missing) > 1 else ''} {names}")
    if strict:
        unknown = [k for k in obj if k not in keys]
        if unknown:
            raise TraceError(_at(path, unknown[0]), "unknown field; expected only " + ", ".join(keys))


def _check_bool(value: Any, path: str) -> None:
    if not isinstance(value, bool):
        raise TraceError(path, f"expected true or false, {_got(value)}")


def _check_count(value: Any, path: str, high: int) -> None:
    """An exact integer in [0, high]: no bool, no 3.0, no 1e400."""
    if not _is_int(value):
        raise TraceError(path, f"expected an integer in [0, {high}], {_got(value)}")
    if not 0 <= value <= high:
        raise TraceError(path, f"expected an integer in [0, {high}], got {_show(value)}")


def _check_amount(value: Any, path: str, unit: str) -> None:
    """A finite number >= 0 (integers only up to int64's max, so it converts to a float)."""
    if not _is_number(value):
        raise TraceError(path, f"expected a finite number >= 0{unit}, {_got(value)}")
    if _is_int(value) and value > INT64_MAX:
        raise TraceError(path, f"expected a finite number >= 0{unit} and at most {INT64_MAX}, got {_show(value)}")
    if not (math.isfinite(value) and value >= 0):
        raise TraceError(path, f"expected a finite number >= 0{unit}, got {_show(value)}")


def _check_reason(value: Any, path: str, reasons: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in reasons:
        known = ", ".join(repr(r) for r in reasons)
        raise TraceError(path, f"unknown reason {_show(value)}; expected one of {known}")


def _check_of(kind: str, reasons: tuple[str, ...], high: int) -> Callable[[Any, str], None]:
    if kind == BOOL:
        return _check_bool
    if kind == USAGE:
        return lambda v, p: _check_amount(v, p, "")
    if kind == COUNT:
        return lambda v, p: _check_count(v, p, high)
    if kind == REASON:
        return lambda v, p: _check_reason(v, p, reasons)
    raise ValueError(f"no trace check for kind {kind!r}")


def rank_checks(policy: Any) -> dict[str, Callable[[Any, str], None]]:
    """A trace's per-rank entry: each input by its trace name, then the clock."""
    checks = {f.trace_name: _check_of(f.kind, policy.reasons, MAX_COUNT) for f in policy.trace.inputs}
    checks[TRACE_CLOCK] = lambda v, p: _check_amount(v, p, " (seconds)")
    assert tuple(checks) == trace_rank_keys(policy)
    return checks


def expect_checks(policy: Any) -> dict[str, Callable[[Any, str], None]]:
    """A trace's expected decision per rank: the decision key by trace names."""
    checks = {f.trace_name: _check_of(f.kind, policy.reasons, INT64_MAX) for f in policy.trace.expect}
    assert tuple(checks) == trace_expect_keys(policy)
    return checks


# ----- checks of the parts -----------------------------------------------------


def _check_entries(obj: Any, path: str, checks: dict[str, Callable[[Any, str], None]]) -> None:
    """An object with exactly the keys of ``checks``, each value passing its check."""
    _need_keys(_need_object(obj, path), path, tuple(checks), strict=True)
    for key, check in checks.items():
        check(obj[key], _at(path, key))


def _check_names(trace: dict[str, Any]) -> Any:
    """``profile`` a known one, ``property`` one of its policy's with a replayable violation, ``violation`` text."""
    from .violations import replayable

    if not known_profile(trace["profile"]):
        try:
            resolve_profile(trace["profile"])
        except ConfigError as exc:
            raise TraceError("profile", str(exc)) from None
    policy = policy_of(trace["profile"])
    prop = trace["property"]
    names = replayable(policy)
    if not isinstance(prop, str) or prop not in names:
        raise TraceError("property", f"unknown property {_show(prop)}; replayable: {', '.join(names)}")
    if not isinstance(trace["violation"], str):
        raise TraceError("violation", f"expected a string, {_got(trace['violation'])}")
    return policy


def _check_config(policy: Any, config: Any, profile: str) -> Any:
    """The trace's configuration as the policy's configuration class builds it (whose message is passed on)."""
    keys = policy.trace.config or config_keys(policy)
    _need_keys(_need_object(config, "config"), "config", keys, strict=True)
    try:
        return policy.config_cls(profile=profile, **config)
    except ConfigError as exc:
        raise TraceError("config", str(exc)) from None


def _check_pass(policy: Any, p: Any, path: str, world: int) -> None:
    _need_keys(_need_object(p, path), path, ("ranks", "expect"), strict=False)
    what = f"entries (one per rank: world size {world})"
    for part, checks in (("ranks", rank_checks(policy)), ("expect", expect_checks(policy))):
        entries = _need_list(p[part], _at(path, part), world, what)
        for r, entry in enumerate(entries):
            _check_entries(entry, _at(_at(path, part), r), checks)


def validate_trace(trace: Any) -> dict[str, Any]:
    """Return ``trace`` unchanged, or raise ``TraceError`` naming its first problem and where."""
    if not isinstance(trace, dict):
        raise TraceError("", f"expected a JSON object at the top level, {_got(trace)}")
    _need_keys(trace, "", TOP_KEYS, strict=False)
    policy = _check_names(trace)
    world = _check_config(policy, trace["config"], trace["profile"]).world_size
    passes = _need_list(trace["passes"], "passes")
    if not passes:
        raise TraceError("passes", "expected at least one pass, got an empty array")
    for i, p in enumerate(passes):
        _check_pass(policy, p, _at("passes", i), world)
    return trace


# ----- files -------------------------------------------------------------------


def trace_file(trace: dict[str, Any]) -> tuple[str, str]:
    """``(file name, text)`` of ``trace``, validated first, so every written trace replays."""
    validate_trace(trace)
    return f"{trace['profile']}-{trace['property']}.json", json.dumps(trace, indent=1) + "\n"


def _read_text(path: str | Path) -> str:
    try:
        return read_input(path).decode("utf-8")
    except OSError as exc:
        raise TraceReadError("", f"cannot open it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceReadError("", f"not UTF-8 text (bad byte at offset {exc.start})") from None


def parse_trace(text: str) -> Any:
    """The JSON value of ``text``; ``TraceReadError`` with line and column when it is not JSON."""
    if not text.strip():
        raise TraceReadError("", "the file is empty; expected a JSON object")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceReadError("", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except RecursionError:
        raise TraceReadError("", "invalid JSON: nested too deeply") from None
    except ValueError as exc:  # an integer literal with more digits than Python converts (3.11+)
        raise TraceReadError("", f"invalid JSON: {str(exc).split(';')[0]}") from None


def load_trace(path: str | Path) -> dict[str, Any]:
    """The validated trace in file ``path``; ``TraceError`` (a ``ValueError``) says what is wrong and where."""
    return validate_trace(parse_trace(_read_text(path)))
