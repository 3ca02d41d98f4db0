"""The operator layer on numpy columns: the spec's own guards, table and monitors evaluated on many passes at once.

A fifth reading of ``spec.ops.Ops`` (after ``PyOps``, ``Z3Ops``, ``SrcOps`` and
``TextOps``): every value is a numpy array holding one entry per pass (or a
Python constant, which a configuration's numbers are), so one call of a guard
decides it for a whole chunk of a decision log. Semantics are ``PyOps``'
exactly, entry by entry: the same IEEE doubles (``int(a * ratio)`` truncates
the same product), floor division on the same integers, ``a if a <= b else b``
for ``Min``. An optional clock unset (``None``) is NaN. Python's ``and`` / ``or``
/ ``if`` on a column raise (numpy refuses to make a column a bool), so a guard
that steers on a pass value outside ``o`` fails loudly here, as under ``SrcOps``.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Iterable

import numpy as np

from ..spec.ops import Ops


def _arr(x: Any) -> bool:
    return isinstance(x, np.ndarray)


def _none_nan(x: Any) -> Any:
    return np.nan if x is None else x


class ArrayOps:
    """``PyOps`` on numpy columns (and Python constants, which stay Python where no column is involved)."""

    FALSE = False

    @staticmethod
    def And(*xs: Any) -> Any:
        cols = []
        for x in xs:
            if _arr(x):
                cols.append(x)
            elif not x:
                return False
        return functools.reduce(np.logical_and, cols) if cols else True

    @staticmethod
    def Or(*xs: Any) -> Any:
        cols = []
        for x in xs:
            if _arr(x):
                cols.append(x)
            elif x:
                return True
        return functools.reduce(np.logical_or, cols) if cols else False

    @staticmethod
    def Not(x: Any) -> Any:
        return np.logical_not(x) if _arr(x) else not x

    @staticmethod
    def If(c: Any, a: Any, b: Any) -> Any:
        if not _arr(c):
            return a if c else b
        return np.where(c, _none_nan(a), _none_nan(b))

    @staticmethod
    def Min(a: Any, b: Any) -> Any:
        if not _arr(a) and not _arr(b):
            return a if a <= b else b
        return np.where(a <= b, a, b)

    @staticmethod
    def MaxOf(xs: Iterable[Any]) -> Any:
        xs = list(xs)
        if not any(_arr(x) for x in xs):
            return max(xs)
        return functools.reduce(np.maximum, xs)

    @staticmethod
    def SumOf(xs: Iterable[Any]) -> Any:
        return functools.reduce(operator.add, xs, 0)

    @staticmethod
    def b2i(b: Any) -> Any:
        return np.asarray(b, dtype=np.int64) if _arr(b) else (1 if b else 0)

    @staticmethod
    def ceil_div(a: Any, b: Any) -> Any:
        return (a + b - 1) // b

    @staticmethod
    def floor_mul(a: Any, ratio: Any) -> Any:
        if not _arr(a) and not _arr(ratio):
            return int(a * ratio)
        return np.trunc(np.asarray(a, dtype=np.float64) * ratio).astype(np.int64)

    @staticmethod
    def ratio_at_least(num: Any, den: Any, ratio: Any) -> Any:
        """``num / den >= ratio`` with the quotient in IEEE doubles, as ``PyOps``. A column holds every pass, also those
        a guard is not read on (where ``den`` may be 0): their entries are never read, so numpy's warning is not shown."""
        if not any(_arr(x) for x in (num, den, ratio)):
            return num / den >= ratio
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.asarray(num, dtype=np.float64) / np.asarray(den, dtype=np.float64) >= ratio

    @staticmethod
    def num(x: Any) -> Any:
        return x


AO = ArrayOps()


def _conforms(o: Ops) -> Ops:
    return o


_conforms(AO)


def broadcast(x: Any, n: int, dtype: Any = None) -> np.ndarray:
    """A column of ``n`` entries from a column or a constant (``None``: NaN)."""
    if _arr(x):
        return x if dtype is None or x.dtype == dtype else x.astype(dtype)
    return np.full(n, _none_nan(x), dtype=dtype)


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Entry-wise equality, NaN equal to NaN (an unset optional clock on both sides)."""
    eq = a == b
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        eq = eq | (np.isnan(a.astype(np.float64)) & np.isnan(b.astype(np.float64)))
    return np.asarray(eq, dtype=bool)
