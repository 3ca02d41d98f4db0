"""The operator layer guards are written in.

Guards use Python's comparison and arithmetic operators (which work on ints,
floats and Z3 terms alike) plus the few operations below, which Python cannot
overload (``and``/``or``/``not``/``if``) or whose meaning must be pinned exactly
(ceil-division, ``int(x * ratio)`` in IEEE doubles, max/sum over ranks).
``PyOps`` evaluates them on Python values; ``prefill_delayer.proofs.z3ops``
implements the same interface on Z3 terms, so a guard is written once.
"""

from __future__ import annotations

from typing import Any, Iterable


class PyOps:
    """Concrete semantics: exactly what the seed computes in Python."""

    FALSE = False

    @staticmethod
    def And(*xs: Any) -> bool:
        return all(xs)

    @staticmethod
    def Or(*xs: Any) -> bool:
        return any(xs)

    @staticmethod
    def Not(x: Any) -> bool:
        return not x

    @staticmethod
    def If(c: Any, a: Any, b: Any) -> Any:
        return a if c else b

    @staticmethod
    def Min(a: Any, b: Any) -> Any:
        return a if a <= b else b

    @staticmethod
    def MaxOf(xs: Iterable[Any]) -> Any:
        return max(xs)

    @staticmethod
    def SumOf(xs: Iterable[Any]) -> Any:
        return sum(xs)

    @staticmethod
    def b2i(b: Any) -> int:
        return 1 if b else 0

    @staticmethod
    def ceil_div(a: int, b: int) -> int:
        """``ceil(a / b)`` for non-negative ``a`` and positive ``b``, as the seed writes it."""
        return (a + b - 1) // b

    @staticmethod
    def floor_mul(a: int, ratio: float) -> int:
        """``int(a * ratio)`` in IEEE doubles: ``int(100 * 0.29) == 28``."""
        return int(a * ratio)

    @staticmethod
    def num(x: Any) -> Any:
        """Lift a configuration number; identity here, exact rational in Z3."""
        return x


PY = PyOps()
