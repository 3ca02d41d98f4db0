"""The operator layer guards are written in.

Guards use Python's comparison and arithmetic operators (which work on ints,
floats and Z3 terms alike) plus the few operations below, which Python cannot
overload (``and``/``or``/``not``/``if``) or whose meaning must be pinned exactly
(ceil-division, ``int(x * ratio)`` and ``a / b >= ratio`` in IEEE doubles, max/sum over ranks).
``PyOps`` evaluates them on Python values; ``proofs.z3ops.Z3Ops`` builds Z3
terms, ``fsm.compiled.SrcOps`` Python source and ``docgen.textops.TextOps``
readable formulas, each implementing ``Ops``, so a guard is written once.
``SymbolicOps`` adds the variables the proofs' stand-ins are made of.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Protocol


class Ops(Protocol):
    """The operator layer every guard, row, fold, effect and monitor is written over."""

    FALSE: Any

    def And(self, *xs: Any) -> Any: ...

    def Or(self, *xs: Any) -> Any: ...

    def Not(self, x: Any) -> Any: ...

    def If(self, c: Any, a: Any, b: Any) -> Any: ...

    def Min(self, a: Any, b: Any) -> Any: ...

    def MaxOf(self, xs: Iterable[Any]) -> Any: ...

    def SumOf(self, xs: Iterable[Any]) -> Any: ...

    def b2i(self, b: Any) -> Any: ...

    def ceil_div(self, a: Any, b: Any) -> Any: ...

    def floor_mul(self, a: Any, ratio: Any) -> Any: ...

    def ratio_at_least(self, num: Any, den: Any, ratio: Any) -> Any: ...

    def num(self, x: Any) -> Any: ...


class SymbolicOps(Ops, Protocol):
    """``Ops`` plus symbolic variables and constants: what the proofs' stand-ins are built from."""

    def Int(self, name: str) -> Any: ...

    def Real(self, name: str) -> Any: ...

    def Bool(self, name: str) -> Any: ...

    def IntVal(self, x: int) -> Any: ...

    def RealVal(self, x: Any) -> Any: ...

    def BoolVal(self, x: bool) -> Any: ...

    def ToReal(self, x: Any) -> Any: ...


@dataclass(frozen=True)
class AnyValue:
    """Stands for every value of a parameter in (0, high] at once: a proof over it holds for all of them.

    ``floor_mul`` reads it as "int(a * r) for some r in the range", a sound
    over-approximation the solver can decide.
    """

    what: str
    high: float

    def __repr__(self) -> str:
        return f"{self.what} in (0, {int(self.high)}]"


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
    def ratio_at_least(num: int, den: int, ratio: float) -> bool:
        """``num / den >= ratio`` with the quotient in IEEE doubles (``den >= 1``): a fill target, say."""
        return num / den >= ratio

    @staticmethod
    def num(x: Any) -> Any:
        """Lift a configuration number; identity here, exact rational in Z3."""
        return x


PY = PyOps()


def _conforms(o: Ops) -> Ops:
    """mypy checks every implementation against ``Ops`` where it is passed here."""
    return o


_conforms(PY)
