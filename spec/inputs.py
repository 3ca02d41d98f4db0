"""Per-pass input checks for any policy, derived from the kinds its inputs declare.

The runtime checks every pass's arguments before they enter a gathered row; a
bad one on some rank is sent as an error mask (one bit per input, then the
clock), so every rank can name it. The usual arguments pass one generated
comparison chain (exact types, ranges); anything else goes through the
per-field checks, which say what is wrong.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

from .errors import PassInputError
from .fields import value_problem, quick_test

CLOCK = "clock"  # the clock reading is a per-pass input too (``clock=`` is injectable)


class InputChecks:
    """The checks of one policy's inputs: ``problems(*args)``, the error mask and its fields."""

    def __init__(self, policy: Any) -> None:
        self.fields = tuple(policy.inputs)
        self.names = tuple(f.name for f in self.fields)
        self.mask_fields_order = self.names + (CLOCK,)
        self.input_cls = policy.input_cls
        # An expression over the inputs' names (and ``_INF``), true only for arguments with no problem: the usual
        # ones pass it in one comparison chain. A compiled pass may test it inline before calling ``problems``.
        self.quick_source = " and ".join(f"({quick_test(f.kind, name)})" for name, f in zip(self.names, self.fields))
        self.problems: Callable[..., list[tuple[str, str]]] = self._compile()

    def _compile(self) -> Callable[..., list[tuple[str, str]]]:
        params = ", ".join(
            name if f.default is None else f"{name}={f.default!r}" for name, f in zip(self.names, self.fields)
        )
        source = (
            f"def problems({params}):\n"
            f"    if {self.quick_source}:\n"
            f"        return []\n"
            f"    return _slow(_cls({', '.join(self.names)}))\n"
        )
        namespace: dict[str, Any] = {"_INF": math.inf, "_slow": self.input_problems, "_cls": self.input_cls}
        exec(compile(source, "<prefill_delayer.spec.inputs>", "exec"), namespace)
        fn: Callable[..., list[tuple[str, str]]] = namespace["problems"]
        fn.__doc__ = "Every problem of the arguments as (field, explanation); empty when valid."
        return fn

    def input_problems(self, inp: Any) -> list[tuple[str, str]]:
        """Every problem of ``inp`` as (field, explanation); empty when valid."""
        out = []
        for f in self.fields:
            problem = value_problem(f.kind, getattr(inp, f.name))
            if problem is not None:
                out.append((f.name, problem))
        return out

    def mask(self, problems: list[tuple[str, str]]) -> int:
        """Bit i set when field ``mask_fields_order[i]`` is bad: what a gathered row can carry."""
        mask = 0
        for name, _ in problems:
            mask |= 1 << self.mask_fields_order.index(name)
        return mask

    def mask_fields(self, mask: int) -> list[str]:
        return [name for i, name in enumerate(self.mask_fields_order) if mask >> i & 1]

    def validate(self, inp: Any) -> Any:
        """Return ``inp`` or raise ``PassInputError`` naming every bad field and its value."""
        problems = self.input_problems(inp)
        if problems:
            raise PassInputError("invalid negotiate input: " + "; ".join(f"{n}: {why}" for n, why in problems))
        return inp


_CHECKS: dict[str, InputChecks] = {}


def checks_of(policy: Any) -> InputChecks:
    """The (cached) input checks of ``policy``."""
    found = _CHECKS.get(policy.name)
    if found is None:
        found = _CHECKS[policy.name] = InputChecks(policy)
    return found


def describe_problems(problems: list[tuple[str, str]]) -> Optional[str]:
    return "; ".join(f"{n}: {why}" for n, why in problems) if problems else None
