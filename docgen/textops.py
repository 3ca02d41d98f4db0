"""A third implementation of the operator layer: guards evaluated to readable formulas.

``PyOps`` evaluates a guard on Python values and ``Z3Ops`` builds Z3 terms;
``TextOps`` builds small expression objects (``Expr``) that support Python's
arithmetic and comparison operators and print as Python-like formulas. Calling
a guard function on symbolic configuration / view / local objects therefore
yields the formula the code computes, e.g. ``effective_max_running_requests -
RB < PB`` for ``slot_trigger`` -- derived from the definition, never written
beside it.

Two things need more than operator overloading:

* structural ``if``s on the configuration (``if c.enable_dp_attention:``):
  configuration flags are ``Flag`` objects whose truth value is looked up in an
  assignment, and ``render`` re-runs the guard for every assignment of the flags
  it reads, giving a ``Case`` tree (collapsed where both branches agree);
* calls from one guard to another (``slot_trigger(o, c, v, s)``): the guard is
  re-bound to globals in which every other guard is a stub returning its name,
  so each formula reads one level deep; a called guard whose formula is a single
  comparison is inlined instead of named.
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional, Union

from ..fsm.operators import Operators
from ..spec.glossary import ARG, CONFIG, LOCAL, VIEW
from ..spec.ops import Ops
from ..spec.registry import policy_of

# Binding strength, loosest first (as in Python).
IFEXP, OR, AND, NOT, CMP, ADD, MUL, UNARY, ATOM = range(9)

_ARITH_PREC = {"+": ADD, "-": ADD, "*": MUL, "/": MUL, "//": MUL, "%": MUL}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def _paren(x: "Expr", min_prec: int) -> str:
    return x.text if x.prec >= min_prec else f"({x.text})"


def lift(x: Any) -> "Expr":
    """A Python constant as an ``Expr`` (expressions pass through)."""
    if isinstance(x, Expr):
        return x
    if x is True:
        return TRUE
    if x is False:
        return FALSE
    if isinstance(x, (int, float)):
        return Expr(repr(x), UNARY if x < 0 else ATOM)
    if x is None:
        return Expr("None")
    raise TypeError(f"cannot render {x!r} in a formula")


class Expr(Operators):
    """A formula: its text, its binding strength, and enough structure to negate it."""

    __slots__ = ("text", "prec", "cmp", "neg", "const")

    def __init__(self, text: str, prec: int = ATOM, cmp: Optional[tuple] = None, neg: Optional["Expr"] = None, const: Optional[bool] = None) -> None:
        self.text = text
        self.prec = prec
        self.cmp = cmp  # (op, left, right) when this is a comparison
        self.neg = neg  # x when this is ``not x``
        self.const = const  # True / False for the constants

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"

    def __bool__(self) -> bool:
        raise TypeError(
            f"symbolic value {self.text!r} used as a Python bool: guards must combine pass-dependent "
            "values with o.And / o.Or / o.Not / o.If (only configuration flags may steer a Python if)"
        )

    # Operators (fsm.operators) call these two.
    def _bin(self, op: str, other: Any, reflected: bool = False) -> "Expr":
        prec = _ARITH_PREC[op]
        a, b = (lift(other), self) if reflected else (self, lift(other))
        return Expr(f"{_paren(a, prec)} {op} {_paren(b, prec + 1)}", prec)

    def _cmp(self, op: str, other: Any) -> "Expr":
        # Comparisons are non-associative: both sides bind tighter than the comparison.
        b = lift(other)
        return Expr(f"{_paren(self, CMP + 1)} {op} {_paren(b, CMP + 1)}", CMP, cmp=(op, self, b))

    def __neg__(self) -> "Expr":
        return Expr(f"-{_paren(self, UNARY)}", UNARY)


TRUE = Expr("True", const=True)
FALSE = Expr("False", const=False)


class Flag(Expr):
    """A structural configuration switch: prints as its name, and may steer a Python ``if``."""

    __slots__ = ("name", "branches")

    def __init__(self, text: str, name: str, branches: "Branches") -> None:
        super().__init__(text)
        self.name = name
        self.branches = branches

    def __bool__(self) -> bool:
        return self.branches.decide(self.name)


class Branches:
    """One assignment of the configuration flags; records which flags a run asked about."""

    def __init__(self, assignment: dict[str, bool]) -> None:
        self.assignment = dict(assignment)
        self.asked: list[str] = []

    def decide(self, name: str) -> bool:
        if name not in self.asked:
            self.asked.append(name)
        return self.assignment.get(name, False)


class TextOps:
    """The operator layer on ``Expr``: And/Or drop neutral constants, Not negates comparisons."""

    TRUE = TRUE
    FALSE = FALSE

    @staticmethod
    def _junction(xs: Iterable[Any], absorbing: Expr, neutral: Expr, word: str, item_prec: int, prec: int) -> Expr:
        """``and`` (absorbing ``False``) or ``or`` (absorbing ``True``) of ``xs``, constants dropped."""
        items = []
        for x in map(lift, xs):
            if x.const is absorbing.const:
                return absorbing
            if x.const is not neutral.const:
                items.append(x)
        if not items:
            return neutral
        if len(items) == 1:
            return items[0]
        return Expr(f" {word} ".join(_paren(x, item_prec) for x in items), prec)

    @staticmethod
    def And(*xs: Any) -> Expr:
        return TextOps._junction(xs, FALSE, TRUE, "and", AND, AND)

    @staticmethod
    def Or(*xs: Any) -> Expr:
        # ``a and b or c`` is right in Python but hard to read: bracket every conjunction.
        return TextOps._junction(xs, TRUE, FALSE, "or", NOT, OR)

    @staticmethod
    def Not(x: Any) -> Expr:
        x = lift(x)
        if x.const is not None:
            return FALSE if x.const else TRUE
        if x.neg is not None:
            return x.neg
        if x.cmp is not None:  # exact: every compared value is an int or a non-NaN real
            op, a, b = x.cmp
            return a._cmp(_NEGATE[op], b)
        return Expr(f"not {_paren(x, NOT)}", NOT, neg=x)

    @staticmethod
    def If(c: Any, a: Any, b: Any) -> Expr:
        c, a, b = lift(c), lift(a), lift(b)
        return Expr(f"{_paren(a, OR)} if {_paren(c, OR)} else {_paren(b, IFEXP)}", IFEXP)

    @staticmethod
    def Min(a: Any, b: Any) -> Expr:
        return Expr(f"min({lift(a)}, {lift(b)})")

    @staticmethod
    def MaxOf(xs: Iterable[Any]) -> Expr:
        return Expr(f"max({', '.join(str(lift(x)) for x in xs)})")

    @staticmethod
    def SumOf(xs: Iterable[Any]) -> Expr:
        return Expr(f"sum({', '.join(str(lift(x)) for x in xs)})")

    @staticmethod
    def b2i(b: Any) -> Expr:
        return Expr(f"int({lift(b)})")

    @staticmethod
    def ceil_div(a: Any, b: Any) -> Expr:
        return Expr(f"ceil({lift(a) / b})")

    @staticmethod
    def floor_mul(a: Any, ratio: Any) -> Expr:
        """``int(a * ratio)`` in IEEE doubles, as the seed computes it."""
        return Expr(f"int({lift(a) * ratio})")

    @staticmethod
    def ratio_at_least(num: Any, den: Any, ratio: Any) -> Expr:
        """``num / den >= ratio``, the quotient in IEEE doubles."""
        return (lift(num) / den)._cmp(">=", ratio)

    @staticmethod
    def num(x: Any) -> Expr:
        return lift(x)


TEXT = TextOps()

# ----- symbolic stand-ins for c, v, s ----------------------------------------

def by_scope(policy: Any) -> dict[str, dict[str, Any]]:
    """The policy's glossary, by scope and attribute."""
    out: dict[str, dict[str, Any]] = {}
    for sym in policy.symbols:
        out.setdefault(sym.scope, {})[sym.attr] = sym
    return out


UNDOCUMENTED = "undocumented: add it to the policy's glossary (Policy.symbols)"


class _Symbolic:
    """Attribute access yields the glossary's symbol; unknown attributes render under their own name."""

    def __init__(self, scope: str, branches: Branches, missing: set, symbols: dict[str, dict[str, Any]]) -> None:
        self._scope = scope
        self._branches = branches
        self._missing = missing
        self._symbols = symbols

    def __getattr__(self, attr: str) -> Expr:
        if attr.startswith("_"):
            raise AttributeError(attr)
        sym = self._symbols.get(self._scope, {}).get(attr)
        if sym is None:
            self._missing.add((self._scope, attr))
            return Expr(attr)
        if sym.flag:
            return Flag(sym.shown, attr, self._branches)
        return Expr(sym.shown)


class SymConfig(_Symbolic):
    """The configuration of one profile: the profile is concrete, everything else symbolic."""

    def __init__(self, profile: str, branches: Branches, missing: set, symbols: dict[str, dict[str, Any]]) -> None:
        super().__init__(CONFIG, branches, missing, symbols)
        self.profile = profile
        self.features = policy_of(profile).features_of(profile)


# ----- rendering a guard -----------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    text: str
    expr: Expr = field(compare=False, repr=False)


@dataclass(frozen=True)
class Case:
    """``yes`` when configuration flag ``flag`` is on, else ``no``."""

    flag: str
    yes: "Tree"
    no: "Tree"


Tree = Union[Leaf, Case]


def guard_functions(policy: Any) -> dict[str, Callable[..., Any]]:
    """Every guard of ``policy``, in definition order (read now, so patches show)."""
    return policy.guard_functions()  # type: ignore[no-any-return]


def flag_shown(policy: Any, name: str) -> str:
    sym = by_scope(policy).get(CONFIG, {}).get(name)
    return sym.shown if sym is not None else name


class Renderer:
    """Renders the guards of one profile as ``Tree``s of formulas, one call level deep."""

    def __init__(self, profile: str) -> None:
        self.profile = profile
        self.policy = policy_of(profile)
        self.symbols = by_scope(self.policy)
        self.functions = guard_functions(self.policy)
        self.missing: set = set()  # (scope, attr) read by a guard but not in the glossary
        self._trees: dict[str, Tree] = {}
        self._active: list[str] = []

    def tree(self, name: str) -> Tree:
        if name not in self._trees:
            if name in self._active:
                raise RecursionError(f"guard {name!r} calls itself: " + " -> ".join(self._active + [name]))
            self._active.append(name)
            try:
                self._trees[name] = self._explore(name, {})
            finally:
                self._active.pop()
        return self._trees[name]

    def inline_expr(self, name: str) -> Optional[Expr]:
        """The formula to show in place of a call to ``name``: inlined if a single comparison
        that calls no other guard (``status_all``), else ``None`` (the call shows by name)."""
        t = self.tree(name)
        if self._callees(name):
            return None
        if isinstance(t, Leaf) and (t.expr.cmp is not None or t.expr.const is not None):
            return t.expr
        return None

    def expr(self, name: str) -> Expr:
        """``name``'s formula when it has no configuration case split, else its name."""
        t = self.tree(name)
        return t.expr if isinstance(t, Leaf) else Expr(name)

    def _callees(self, name: str) -> list[str]:
        fn = self.functions[name]
        names = fn.__code__.co_names if isinstance(fn, types.FunctionType) else ()
        return [other for other in self.functions if other != name and other in names]

    def _explore(self, name: str, assignment: dict[str, bool]) -> Tree:
        branches = Branches(assignment)
        result = self._run(name, branches)
        free = [f for f in branches.asked if f not in assignment]
        if not free:
            return Leaf(result.text, result)
        flag = free[0]
        yes = self._explore(name, {**assignment, flag: True})
        no = self._explore(name, {**assignment, flag: False})
        return yes if yes == no else Case(flag, yes, no)

    def _run(self, name: str, branches: Branches) -> Expr:
        fn = self.functions[name]
        c = SymConfig(self.profile, branches, self.missing, self.symbols)
        symbols = {
            "o": TEXT,
            "c": c,
            "v": _Symbolic(VIEW, branches, self.missing, self.symbols),
            "s": _Symbolic(LOCAL, branches, self.missing, self.symbols),
        }
        args = []
        for param in inspect.signature(fn).parameters:
            if param not in symbols:
                symbols[param] = _Symbolic(ARG, branches, self.missing, self.symbols).__getattr__(param)
            args.append(symbols[param])
        standard = tuple(symbols[k] for k in ("c", "v", "s"))
        return lift(self._rebound(fn, name, standard)(*args))

    def _rebound(self, fn: Callable[..., Any], name: str, standard: tuple) -> Callable[..., Any]:
        """``fn`` with every other guard it calls by name replaced by a stub."""
        if not isinstance(fn, types.FunctionType):
            return fn
        renderer = self

        def stub(callee: str) -> Callable[..., Expr]:
            def call(*args: Any, **kwargs: Any) -> Expr:
                same_inputs = all(any(a is s for s in standard) for a in args[1:]) and not kwargs
                inlined = renderer.inline_expr(callee) if same_inputs else None
                return inlined if inlined is not None else Expr(callee)

            return call

        stubs = {other: stub(other) for other in self._callees(name)}
        if not stubs:
            return fn
        rebound = types.FunctionType(fn.__code__, {**fn.__globals__, **stubs}, fn.__name__, fn.__defaults__, fn.__closure__)
        rebound.__kwdefaults__ = fn.__kwdefaults__
        return rebound


_checked: Ops = TEXT  # mypy: the formula layer implements the operator interface
