"""Python's arithmetic and comparison operators for symbolic values, written once.

Guards use plain operators (``v.running_batch > 0``, ``s.delayed_count + 1``).
Two readings of the operator layer evaluate them on symbolic values:
``docgen.textops.Expr`` (readable formulas for the docs) and ``fsm.compiled.Src``
(Python source for the runtime). Both route every operator through two hooks:
``_bin(op, other, reflected)`` for arithmetic and ``_cmp(op, other)`` for comparisons.
"""

from __future__ import annotations

from typing import Any


class Operators:
    """Routes ``+ - * / // %`` to ``_bin`` and ``< <= > >= == !=`` to ``_cmp``."""

    __slots__ = ()

    def _bin(self, op: str, other: Any, reflected: bool = False) -> Any:
        raise NotImplementedError

    def _cmp(self, op: str, other: Any) -> Any:
        raise NotImplementedError

    __hash__ = object.__hash__  # ``__eq__`` builds a formula; identity stays hashable

    def __add__(self, o: Any) -> Any:
        return self._bin("+", o)

    def __radd__(self, o: Any) -> Any:
        return self._bin("+", o, True)

    def __sub__(self, o: Any) -> Any:
        return self._bin("-", o)

    def __rsub__(self, o: Any) -> Any:
        return self._bin("-", o, True)

    def __mul__(self, o: Any) -> Any:
        return self._bin("*", o)

    def __rmul__(self, o: Any) -> Any:
        return self._bin("*", o, True)

    def __truediv__(self, o: Any) -> Any:
        return self._bin("/", o)

    def __rtruediv__(self, o: Any) -> Any:
        return self._bin("/", o, True)

    def __floordiv__(self, o: Any) -> Any:
        return self._bin("//", o)

    def __rfloordiv__(self, o: Any) -> Any:
        return self._bin("//", o, True)

    def __mod__(self, o: Any) -> Any:
        return self._bin("%", o)

    def __rmod__(self, o: Any) -> Any:
        return self._bin("%", o, True)

    def __lt__(self, o: Any) -> Any:
        return self._cmp("<", o)

    def __le__(self, o: Any) -> Any:
        return self._cmp("<=", o)

    def __gt__(self, o: Any) -> Any:
        return self._cmp(">", o)

    def __ge__(self, o: Any) -> Any:
        return self._cmp(">=", o)

    def __eq__(self, o: Any) -> Any:  # type: ignore[override]
        return self._cmp("==", o)

    def __ne__(self, o: Any) -> Any:  # type: ignore[override]
        return self._cmp("!=", o)
