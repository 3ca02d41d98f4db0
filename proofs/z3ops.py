"""The operator layer on Z3 terms: the same guard code, read as formulas.

Integers stay integers. ``floor_mul`` is ``int(a * ratio)`` in IEEE doubles,
encoded exactly in linear integer arithmetic for a configured ratio (see
``_rounds_up``); ``num`` lifts a Python float to its exact rational value
(``z3.RealVal(0.29)`` would silently read it as 29/100).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any, Iterable

import z3

from ..spec.fields import MAX_COUNT
from ..spec.ops import AnyValue, SymbolicOps

_fresh = itertools.count()


# Uninterpreted, so that every use of the same running_batch (or of the same
# dividend and divisor) reads the same value, and constrained below only by what
# holds for every ratio (every dp_size): a sound over-approximation.
_TIMES_ANY_RATIO = z3.Function("int_of_times_any_ratio", z3.IntSort(), z3.IntSort())
_CEIL_DIV_ANY = z3.Function("ceil_div_any_divisor", z3.IntSort(), z3.IntSort(), z3.IntSort())
_RATIO_AT_LEAST_ANY = z3.Function("quotient_at_least_any_ratio", z3.IntSort(), z3.IntSort(), z3.BoolSort())


def floor_mul_term(n: Any, ratio: Any, side: list) -> Any:
    """``int(float(n) * ratio)`` for a configured ratio (exact), or for an ``AnyValue`` ratio: a value
    that ranges over everything ``int(n * r)`` can be for some r in (0, high]."""
    if isinstance(ratio, AnyValue):
        f = _TIMES_ANY_RATIO(n)
        # fl(n * r) <= n * high (exact for a power of two, and rounding is monotone); int(0 * r) == 0.
        side.append(z3.And(f >= 0, f <= n * int(ratio.high), z3.Implies(n == 0, f == 0)))
        return f
    return int_of_double_product(n, ratio, side)


def ceil_div_term(a: Any, b: Any, side: list) -> Any:
    """``ceil(a / b)`` for ``a >= 0``: exact for a concrete divisor; for a symbolic one (every
    dp_size at once), a value in [0, a] that is >= 1 when a >= 1, as ceil(a / b) is for b >= 1."""
    if isinstance(b, int):
        if b < 1:
            raise ValueError("ceil_div needs a positive divisor")
        return (a + (b - 1)) / b  # Z3's integer division is floor division for a positive divisor
    f = _CEIL_DIV_ANY(a, b)
    side.append(z3.Implies(b >= 1, z3.And(f >= 0, f <= a, z3.Implies(a >= 1, f >= 1))))
    return f


def ratio_at_least_term(num: Any, den: Any, ratio: Any, side: list) -> Any:
    """``fl(num / den) >= ratio`` for integers ``num >= 0``, ``den >= 1``.

    For a configured ratio, exactly: rounding to nearest is monotone, so the
    double quotient reaches ``ratio`` iff the exact quotient is above the
    midpoint ``m`` between ``ratio`` and the double below it, or equal to it
    when ``ratio``'s significand is even (a tie rounds to even): linear in
    ``num`` and ``den``. For an ``AnyValue`` ratio (every ratio in (0, 1] at
    once): an uninterpreted predicate of ``(num, den)``, constrained only by what
    holds for every such ratio (a quotient >= 1 reaches it, 0 does not).
    """
    if isinstance(ratio, AnyValue):
        if ratio.high > 1:
            raise ValueError("ratio_at_least over every ratio needs ratios in (0, 1]")
        r = _RATIO_AT_LEAST_ANY(num, den)
        side.append(z3.Implies(den >= 1, z3.And(z3.Implies(num >= den, r), z3.Implies(num <= 0, z3.Not(r)))))
        return r
    if not (isinstance(ratio, float) and 0.0 < ratio < 2.0**52):
        raise ValueError(f"ratio {ratio!r} outside the exactly modelled range")
    below = math.nextafter(ratio, 0.0)
    mid = (Fraction(below) + Fraction(ratio)) / 2
    even = _even_significand(ratio)
    n, d = mid.numerator, mid.denominator
    return num * d >= n * den if even else num * d > n * den


def _even_significand(x: float) -> bool:
    """Whether the 53-bit significand of the positive double ``x`` is even."""
    mantissa, _ = math.frexp(x)
    return int(mantissa * 2**53) % 2 == 0


def fresh_int(prefix: str) -> z3.ArithRef:
    return z3.Int(f"{prefix}!{next(_fresh)}")


def to_bool(x: Any) -> z3.BoolRef:
    return z3.BoolVal(x) if isinstance(x, bool) else x


# Fast paths for the connectives the table and the guards build by the thousand. ``z3.And`` and its kin
# check every argument's sort and context in Python before the one C call; for arguments that are
# already Boolean (or, for ``If``, branches of one sort) these make that same C call on the same
# arguments, so the terms, and the order Z3 creates them in, are unchanged (models and traces too).
_BoolRef, _ArithRef, _IntNumRef, _RatNumRef, _SeqRef = z3.BoolRef, z3.ArithRef, z3.IntNumRef, z3.RatNumRef, z3.SeqRef
_ARITH = (_ArithRef, _IntNumRef, _RatNumRef)


def _and_or(make: Any, slow: Any, xs: tuple) -> Any:
    for x in xs:
        if type(x) is not _BoolRef:
            return slow(*[to_bool(y) for y in xs])
    ctx = xs[0].ctx
    arr = (z3.Ast * len(xs))(*[x.ast for x in xs])
    return _BoolRef(make(ctx.ref(), len(xs), arr), ctx)


def And(*xs: Any) -> Any:
    """``z3.And`` over terms and Python bools (``And()`` is true)."""
    return _and_or(z3.Z3_mk_and, z3.And, xs) if xs else z3.BoolVal(True)


def Or(*xs: Any) -> Any:
    """``z3.Or`` over terms and Python bools (``Or()`` is false)."""
    return _and_or(z3.Z3_mk_or, z3.Or, xs) if xs else z3.BoolVal(False)


def Not(x: Any) -> Any:
    if type(x) is not _BoolRef:
        return z3.Not(to_bool(x))
    ctx = x.ctx
    return _BoolRef(z3.Z3_mk_not(ctx.ref(), x.ast), ctx)


def If(c: Any, a: Any, b: Any) -> Any:
    """``z3.If`` for a term condition (a Python bool picks its branch)."""
    if isinstance(c, bool):
        return a if c else b
    if type(c) is _BoolRef:
        ta, tb = type(a), type(b)
        ctx = c.ctx
        ref = ctx.ref()
        if ta is tb is _BoolRef:
            return _BoolRef(z3.Z3_mk_ite(ref, c.ast, a.ast, b.ast), ctx)
        if ta in _ARITH and tb in _ARITH:
            if z3.Z3_is_eq_sort(ref, z3.Z3_get_sort(ref, a.ast), z3.Z3_get_sort(ref, b.ast)):
                return _ArithRef(z3.Z3_mk_ite(ref, c.ast, a.ast, b.ast), ctx)
        elif ta is int and tb in _ARITH and _int_sorted(ref, b):
            a = z3.IntVal(a, ctx)  # as z3.If casts it, before the ite
            return _ArithRef(z3.Z3_mk_ite(ref, c.ast, a.ast, b.ast), ctx)
        elif tb is int and ta in _ARITH and _int_sorted(ref, a):
            b = z3.IntVal(b, ctx)
            return _ArithRef(z3.Z3_mk_ite(ref, c.ast, a.ast, b.ast), ctx)
        elif ta is str and (tb is str or tb is _SeqRef):
            # a text output (SGLang's input_estimation): both arms as z3.If makes them, the first first
            a = z3.StringVal(a, ctx)
            if tb is str:
                b = z3.StringVal(b, ctx)
            return _SeqRef(z3.Z3_mk_ite(ref, c.ast, a.ast, b.ast), ctx)
    return z3.If(c, a, b)


def EqInt(x: Any, n: int) -> Any:
    """``x == n`` for an integer term ``x`` and a Python int, the call ``x == n`` makes (``IntVal(n)`` first)."""
    if type(n) is int and type(x) in _ARITH:
        ctx = x.ctx
        ref = ctx.ref()
        if _int_sorted(ref, x):
            k = z3.IntVal(n, ctx)
            return _BoolRef(z3.Z3_mk_eq(ref, x.ast, k.ast), ctx)
    return x == n


def _int_sorted(ref: Any, x: Any) -> bool:
    return type(x) is _IntNumRef or z3.Z3_get_sort_kind(ref, z3.Z3_get_sort(ref, x.ast)) == z3.Z3_INT_SORT


# The comparisons and the arithmetic the guards write as Python operators (``v.running_batch > 0``,
# ``s.now - s.wait_start``), by the ten thousand a profile. z3's own operators coerce both sides in Python first
# (a sort object made and freed for each side); when both are terms of one sort, or the other side is a Python int
# beside an integer term, the coercion changes nothing but the time, and these make the same C call on the same
# arguments (the int made into the same ``IntVal`` first, as z3's cast does). ``fast_arithmetic`` installs them on
# z3's ``ArithRef`` in a prove worker alone (a process forked for one profile); anything else goes to z3's own.
_MAKE = {"__eq__": z3.Z3_mk_eq, "__ge__": z3.Z3_mk_ge, "__gt__": z3.Z3_mk_gt, "__le__": z3.Z3_mk_le, "__lt__": z3.Z3_mk_lt}
_MAKE_N = {"__add__": z3.Z3_mk_add, "__sub__": z3.Z3_mk_sub}
SLOW_ARITHMETIC = {name: getattr(_ArithRef, name) for name in (*_MAKE, *_MAKE_N)}
_OWN = frozenset(n for n in SLOW_ARITHMETIC if n in vars(_ArithRef))  # defined by ArithRef itself, not inherited


def _same_sort_operand(x: Any, other: Any) -> Any:
    """``other`` as the term z3's coercion would give beside ``x``, where that coercion is the identity or an int's
    ``IntVal``; None where z3's own operator must decide."""
    t = type(other)
    ref = x.ctx.ref()
    if t in _ARITH:
        if z3.Z3_is_eq_sort(ref, z3.Z3_get_sort(ref, x.ast), z3.Z3_get_sort(ref, other.ast)):
            return other
    elif t is int and _int_sorted(ref, x):
        return z3.IntVal(other, x.ctx)
    return None


def _relation(make: Any, a: Any, b: Any) -> Any:
    ctx = a.ctx
    return _BoolRef(make(ctx.ref(), a.ast, b.ast), ctx)


def _sum(make: Any, a: Any, b: Any) -> Any:
    ctx = a.ctx
    return z3.z3._to_expr_ref(make(ctx.ref(), 2, (z3.Ast * 2)(a.ast, b.ast)), ctx)  # z3's _mk_bin, typed as z3 types it


def _fast(name: str, make: Any, build: Any) -> Any:
    slow = SLOW_ARITHMETIC[name]

    def operator(self: Any, other: Any) -> Any:
        b = _same_sort_operand(self, other)
        return slow(self, other) if b is None else build(make, self, b)

    operator.__name__ = name
    return operator


FAST_ARITHMETIC = {**{n: _fast(n, m, _relation) for n, m in _MAKE.items()}, **{n: _fast(n, m, _sum) for n, m in _MAKE_N.items()}}


def fast_arithmetic(on: bool = True) -> None:
    """Install (or, ``on=False``, remove) the fast comparisons and arithmetic on z3's ``ArithRef``. Installed after
    the class was made, ``__eq__`` leaves its ``__hash__`` as it is."""
    for name, f in (FAST_ARITHMETIC if on else SLOW_ARITHMETIC).items():
        if on or name in _OWN:
            setattr(_ArithRef, name, f)
        elif name in vars(_ArithRef):
            delattr(_ArithRef, name)  # inherited again (``__eq__`` is ``ExprRef``'s)



def exact_real(x: Any) -> Any:
    """A Python number as its exact rational Z3 value; Z3 terms pass through."""
    if isinstance(x, bool):
        raise TypeError("a bool is not a number here")
    if isinstance(x, (int, float)):
        f = Fraction(x)
        return z3.RealVal(f"{f.numerator}/{f.denominator}")
    return x


class Z3Ops:
    """Builds Z3 terms; definitions of fresh variables go to ``side`` and must be asserted."""

    FALSE = z3.BoolVal(False)

    def __init__(self) -> None:
        self.side: list[z3.BoolRef] = []
        self._floor_mul: dict[tuple, Any] = {}

    And = staticmethod(And)
    Or = staticmethod(Or)
    Not = staticmethod(Not)
    If = staticmethod(If)

    def Min(self, a: Any, b: Any) -> Any:
        return If(a <= b, a, b)

    def MaxOf(self, xs: Iterable[Any]) -> Any:
        """Max over ranks as a fresh variable bounded by linear constraints, not an If chain."""
        xs = list(xs)
        if len(xs) == 1:
            return xs[0]
        m = fresh_int("max")
        self.side.append(z3.And(*[m >= x for x in xs]))
        self.side.append(z3.Or(*[m == x for x in xs]))
        return m

    def SumOf(self, xs: Iterable[Any]) -> Any:
        xs = list(xs)
        return z3.Sum(xs) if len(xs) > 1 else xs[0]

    def b2i(self, b: Any) -> Any:
        if isinstance(b, bool):
            return int(b)
        return If(b, z3.IntVal(1), z3.IntVal(0))

    def ceil_div(self, a: Any, b: Any) -> Any:
        return ceil_div_term(a, b, self.side)

    def floor_mul(self, a: Any, ratio: Any) -> Any:
        if not (isinstance(ratio, (float, AnyValue))):
            raise TypeError("floor_mul needs the configured ratio as a concrete float, or an AnyValue")
        # Guards of several rows ask for the same product: define it once.
        key = (a.get_id() if isinstance(a, z3.AstRef) else a, ratio)
        if key not in self._floor_mul:
            self._floor_mul[key] = floor_mul_term(a, ratio, self.side)
        return self._floor_mul[key]

    def ratio_at_least(self, num: Any, den: Any, ratio: Any) -> Any:
        return ratio_at_least_term(num, den, ratio, self.side)

    def num(self, x: Any) -> Any:
        return exact_real(x)

    # ----- variables and constants (``spec.ops.SymbolicOps``) -------------------------

    @staticmethod
    def Int(name: str) -> Any:
        return z3.Int(name)

    @staticmethod
    def Real(name: str) -> Any:
        return z3.Real(name)

    @staticmethod
    def Bool(name: str) -> Any:
        return z3.Bool(name)

    @staticmethod
    def IntVal(x: int) -> Any:
        return z3.IntVal(x)

    @staticmethod
    def RealVal(x: Any) -> Any:
        return z3.RealVal(x)

    @staticmethod
    def BoolVal(x: bool) -> Any:
        return z3.BoolVal(x)

    @staticmethod
    def ToReal(x: Any) -> Any:
        return z3.ToReal(x)


def int_of_double_product(n: Any, ratio: float, side: list) -> Any:
    """``int(float(n) * ratio)`` for integer ``0 <= n <= MAX_COUNT``, exactly.

    Let P = n * ratio (exact rational) and f = floor(P). The double product
    fl(P) is P rounded to nearest (ties to even), and int() truncates, so the
    result is f, or f + 1 when P lies within half a spacing below the integer
    k = f + 1 (fl rounds it up to k). The spacing below k is 2^(e-52) for
    k in (2^e, 2^(e+1)) and 2^(e-53) for k = 2^e; k's significand is even
    (k < 2^52), so a tie rounds up. All of it is linear in n for a fixed ratio.
    """
    if ratio == 0.0:
        return z3.IntVal(0)
    if not (ratio > 0.0 and ratio * MAX_COUNT < 2.0**51):
        raise ValueError(f"ratio {ratio!r} outside the exactly modelled range")
    r = Fraction(ratio)
    num, den = r.numerator, r.denominator  # den is a power of two
    if isinstance(n, int):
        return int(n * ratio)
    f = fresh_int("floor")
    prod = n * num
    side.append(f * den <= prod)
    side.append(prod < (f + 1) * den)
    if num.bit_length() + MAX_COUNT.bit_length() <= 53:
        return f  # n * num fits the significand: the double product is exact, int() is floor
    k = f + 1
    top = int((MAX_COUNT * r)) + 2
    cases = []
    for e in range(0, top.bit_length() + 1):
        lo = 2**e
        # P >= k - h  <=>  prod * 2^54 >= k * den * 2^54 - den * h * 2^54, h * 2^54 = 2^(e+1) or 2^e at k = 2^e.
        h54 = z3.If(k == lo, z3.IntVal(2**e), z3.IntVal(2 ** (e + 1)))
        cases.append(z3.And(k >= lo, k < 2 * lo, prod * 2**54 >= k * den * 2**54 - den * h54))
    return f + z3.If(z3.Or(*cases), z3.IntVal(1), z3.IntVal(0))


_checked: SymbolicOps = Z3Ops()  # mypy: the proofs' layer implements the whole symbolic interface
