"""The kinds of value a policy declares (its inputs, state, row, decision), and their checks.

A policy names each value once with its kind; the runtime's input checks, the
trace and log readers, the proofs' symbolic variables and the docs all read the
kind, so no consumer restates what a value may be.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

# Counts travel as int64 but are bounded well below it: the proofs model
# int(running_batch * ratio) exactly over this domain, and no scheduler has
# two billion requests in one batch.
MAX_COUNT = 2**31 - 1
INT64_MAX = 2**63 - 1

BOOL = "bool"  # True / False
COUNT = "count"  # an int in [0, MAX_COUNT]
USAGE = "usage"  # a finite float >= 0 (a share such as KV token usage)
SECONDS = "seconds"  # a finite float (a clock reading, a duration)
OPT_SECONDS = "seconds or none"  # None, or a finite float
CONTROL = "control"  # one of the policy's control states
REASON = "reason"  # one of the policy's reasons
TEXT = "text"  # a short string (e.g. SGLang's input_estimation)
KINDS = (BOOL, COUNT, USAGE, SECONDS, OPT_SECONDS, CONTROL, REASON, TEXT)
# The empty reason (no rank had prefill work) as reports and the example print it: one name everywhere.
NO_REASON_NAME = "none-prefillable"


def reason_name(reason: str) -> str:
    """A decision's reason as printed: the reason itself, or ``NO_REASON_NAME`` for the empty one."""
    return reason if reason else NO_REASON_NAME

_INF = math.inf


@dataclass(frozen=True)
class Field:
    """One named value of a policy.

    ``default`` is an input's default in the call (``REQUIRED``: none);
    ``trace`` its name in trace files, ``sym`` the stem of its Z3 variables
    (both default to ``name``).
    """

    name: str
    kind: str
    doc: str = ""
    default: Any = None
    trace: str = ""
    sym: str = ""
    values: tuple[str, ...] = ()  # a ``TEXT`` field's possible values, when they are few (logs write the index)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"field {self.name}: unknown kind {self.kind!r}")

    @property
    def trace_name(self) -> str:
        return self.trace or self.name

    @property
    def sym_name(self) -> str:
        return self.sym or self.name


REQUIRED = object()  # an input without a default


def value_problem(kind: str, value: Any) -> Optional[str]:
    """Why ``value`` is not a valid ``kind`` (the runtime's message), or ``None``."""
    if kind == BOOL:
        if not isinstance(value, bool):
            return f"expected a bool, got {type(value).__name__} {value!r}"
        return None
    if kind == COUNT:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"expected an int, got {type(value).__name__} {value!r}"
        if not 0 <= value <= MAX_COUNT:
            return f"expected 0 <= value <= {MAX_COUNT}, got {value!r}"
        return None
    if kind == USAGE:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected a float, got {type(value).__name__} {value!r}"
        if not (math.isfinite(value) and value >= 0.0):
            return f"expected a finite number >= 0, got {value!r}"
        return None
    if kind in (SECONDS, OPT_SECONDS):
        if value is None and kind == OPT_SECONDS:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected seconds as a float, got {type(value).__name__} {value!r}"
        if not math.isfinite(value):
            return f"expected a finite reading, got {value!r}"
        return None
    raise ValueError(f"no input check for kind {kind!r}")


def quick_test(kind: str, name: str) -> str:
    """A Python expression over variable ``name`` true only for values ``value_problem`` accepts.

    By exact type (``x.__class__ is float``), so the usual values pass in one
    comparison chain; anything else goes to ``value_problem`` for the message.
    """
    if kind == BOOL:
        return f"{name}.__class__ is bool"
    if kind == COUNT:
        return f"{name}.__class__ is int and 0 <= {name} <= {MAX_COUNT}"
    if kind == USAGE:
        return f"{name}.__class__ is float and 0.0 <= {name} < _INF"
    if kind == SECONDS:
        return f"{name}.__class__ is float and -_INF < {name} < _INF"
    raise ValueError(f"no quick test for kind {kind!r}")


def clock_problem(now: Any, error: BaseException | None = None) -> str | None:
    """Why a clock reading cannot be used (``error``: what the clock raised), or ``None``.

    Called once per pass: a finite ``float`` (what ``time.perf_counter`` returns)
    is accepted by the first test.
    """
    if error is None and now.__class__ is float and -_INF < now < _INF:
        return None
    if error is not None:
        return f"the clock raised {type(error).__name__}: {error}"
    return value_problem(SECONDS, now)
