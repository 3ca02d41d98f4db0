"""Per-pass inputs of one rank, validated before they enter a gathered row."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .errors import PassInputError

# Counts travel as int64 but are bounded well below it: the proofs model
# int(running_batch * ratio) exactly over this domain, and no scheduler has
# two billion requests in one batch.
MAX_COUNT = 2**31 - 1

INPUT_FIELDS = (
    "local_prefillable",
    "token_usage",
    "running_batch",
    "max_prefill_bs",
    "max_running_requests",
    "waiting_queue_len",
)


class PassInput(NamedTuple):
    """The arguments of one ``negotiate`` call on one rank."""

    local_prefillable: bool
    token_usage: float
    running_batch: int = 0
    max_prefill_bs: int = 0
    max_running_requests: int = 0
    waiting_queue_len: int = 0


def _count_problem(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected an int, got {type(value).__name__} {value!r}"
    if not 0 <= value <= MAX_COUNT:
        return f"expected 0 <= value <= {MAX_COUNT}, got {value!r}"
    return None


_INF = math.inf


def args_problems(
    local_prefillable: Any,
    token_usage: Any,
    running_batch: Any = 0,
    max_prefill_bs: Any = 0,
    max_running_requests: Any = 0,
    waiting_queue_len: Any = 0,
) -> list[tuple[str, str]]:
    """``input_problems`` of the arguments as passed, without building a ``PassInput``.

    The runtime calls this once per pass. The usual arguments (a ``bool``, a finite
    ``float`` >= 0 and four ``int`` values in range, by exact type) are accepted by one
    expression; anything else goes through ``input_problems``. The quick test only
    accepts what ``input_problems`` accepts (a hypothesis test checks that both give
    the same answer on arbitrary values).
    """
    if (
        local_prefillable.__class__ is bool
        and token_usage.__class__ is float
        and 0.0 <= token_usage < _INF
        and running_batch.__class__ is int
        and 0 <= running_batch <= MAX_COUNT
        and max_prefill_bs.__class__ is int
        and 0 <= max_prefill_bs <= MAX_COUNT
        and max_running_requests.__class__ is int
        and 0 <= max_running_requests <= MAX_COUNT
        and waiting_queue_len.__class__ is int
        and 0 <= waiting_queue_len <= MAX_COUNT
    ):
        return []
    return input_problems(
        PassInput(local_prefillable, token_usage, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len)
    )


def input_problems(inp: PassInput) -> list[tuple[str, str]]:
    """Every problem of ``inp`` as (field, explanation); empty when valid."""
    problems: list[tuple[str, str]] = []
    if not isinstance(inp.local_prefillable, bool):
        problems.append(
            ("local_prefillable", f"expected a bool, got {type(inp.local_prefillable).__name__} {inp.local_prefillable!r}")
        )
    tu = inp.token_usage
    if isinstance(tu, bool) or not isinstance(tu, (int, float)):
        problems.append(("token_usage", f"expected a float, got {type(tu).__name__} {tu!r}"))
    elif not (math.isfinite(tu) and tu >= 0.0):
        problems.append(("token_usage", f"expected a finite number >= 0, got {tu!r}"))
    for name in INPUT_FIELDS[2:]:
        problem = _count_problem(getattr(inp, name))
        if problem is not None:
            problems.append((name, problem))
    return problems


# The clock reading is a per-pass input too (``clock=`` is injectable): a bad one
# is reported through the same error mask, after the negotiate arguments.
CLOCK = "clock"
MASK_FIELDS = INPUT_FIELDS + (CLOCK,)


def clock_problem(now: Any, error: BaseException | None = None) -> str | None:
    """Why a clock reading cannot be used (``error``: what the clock raised), or ``None``.

    Called once per pass: a finite ``float`` (what ``time.perf_counter`` returns)
    is accepted by the first test.
    """
    if error is None and now.__class__ is float and -_INF < now < _INF:
        return None
    if error is not None:
        return f"the clock raised {type(error).__name__}: {error}"
    if isinstance(now, bool) or not isinstance(now, (int, float)):
        return f"expected seconds as a float, got {type(now).__name__} {now!r}"
    if not math.isfinite(now):
        return f"expected a finite reading, got {now!r}"
    return None


def problems_mask(problems: list[tuple[str, str]]) -> int:
    """Bit i set when field ``MASK_FIELDS[i]`` is bad: what a gathered row can carry."""
    mask = 0
    for name, _ in problems:
        mask |= 1 << MASK_FIELDS.index(name)
    return mask


def mask_fields(mask: int) -> list[str]:
    return [name for i, name in enumerate(MASK_FIELDS) if mask >> i & 1]


def validate_pass_input(inp: PassInput) -> PassInput:
    """Return ``inp`` or raise ``PassInputError`` naming every bad field and its value."""
    problems = input_problems(inp)
    if problems:
        raise PassInputError("invalid negotiate input: " + "; ".join(f"{n}: {why}" for n, why in problems))
    return inp
