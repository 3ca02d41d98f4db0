"""The proofs' fast connectives build exactly the terms z3's own functions build, of the same Python type.

``proofs.z3ops`` makes the C call of ``z3.And``/``Or``/``Not``/``If``, of ``x == n``, and (in a prove worker) of the
comparisons and ``+``/``-`` directly when the arguments need no coercion, and falls back to z3's function otherwise. A difference in a term would change what the proofs
prove; a difference in the order terms are created in would change the models Z3 finds, and so the traces.
"""

from __future__ import annotations

import z3

from prefill_delayer.proofs import z3ops
from prefill_delayer.proofs.model import SymEnum

P, Q = z3.Bools("fast_p fast_q")
X, Y = z3.Ints("fast_x fast_y")
R = z3.Real("fast_r")
S = z3.String("fast_s")

CASES = [
    ("And", (P, Q)), ("And", (P,)), ("And", (P, True)), ("And", (False, Q, P)),
    ("Or", (P, Q)), ("Or", (Q,)), ("Or", (P, False)),
    ("Not", (P,)), ("Not", (True,)),
    ("If", (P, Q, P)), ("If", (P, X, Y)), ("If", (P, X, 3)), ("If", (P, 3, Y)), ("If", (P, z3.IntVal(2), Y)),
    ("If", (P, R, X)), ("If", (P, X, R)), ("If", (P, 1.5, R)), ("If", (P, R, 2)), ("If", (P, 2, 3)),
    ("If", (P, "all", "mixed")), ("If", (P, "none", S)), ("If", (P, S, "all")), ("If", (P, True, Q)),
]


def _z3_builds(name: str, args: tuple) -> object:
    if name == "Not":
        return z3.Not(z3ops.to_bool(args[0]))
    if name in ("And", "Or"):
        return getattr(z3, name)(*[z3ops.to_bool(a) for a in args])
    return z3.If(*args)


def test_each_fast_connective_builds_z3_s_own_term_and_type() -> None:
    for name, args in CASES:
        fast, slow = getattr(z3ops, name)(*args), _z3_builds(name, args)
        assert fast.eq(slow), (name, args, fast, slow)
        assert type(fast) is type(slow), (name, args, type(fast), type(slow))
        assert fast.get_id() == slow.get_id()  # hash-consed: the very same node


def test_if_on_a_python_condition_picks_a_branch_without_a_term() -> None:
    assert z3ops.If(True, X, 3) is X
    assert z3ops.If(False, X, 3) == 3


def test_empty_and_or_are_the_constants() -> None:
    assert z3.is_true(z3ops.And()) and z3.is_false(z3ops.Or())


def test_a_control_state_compares_as_z3_compares_its_code() -> None:
    st = SymEnum(X, ("idle", "delaying"))
    for other in ("idle", "delaying", 1, Y, SymEnum(Y, ("idle", "delaying"))):
        code = st._code(other)
        assert (st == other).eq(X == code)
    assert z3ops.EqInt(R, 1).eq(R == 1)  # a real term: z3's own comparison, which casts the int to a real


ARITHMETIC_CASES = [
    (X, Y), (X, 3), (X, -2), (z3.IntVal(2), Y), (z3.IntVal(2), 5), (R, R), (R, X), (X, R), (R, 2), (X, 1.5), (R, 0.5),
    (X, True), (X, z3.RealVal(1)), (z3.ToReal(X), R),
]


def test_each_fast_operator_builds_z3_s_own_term_and_type() -> None:
    """The prove workers' comparisons and arithmetic: the very node z3's own operator makes, for operands of one sort,
    an int beside an integer term, and everything z3 must coerce (a real beside an int, a float, a bool)."""
    for name, fast in z3ops.FAST_ARITHMETIC.items():
        slow_op = z3ops.SLOW_ARITHMETIC[name]
        for a, b in ARITHMETIC_CASES:
            f, s = fast(a, b), slow_op(a, b)
            assert f.eq(s), (name, a, b, f, s)
            assert type(f) is type(s), (name, a, b, type(f), type(s))
            assert f.get_id() == s.get_id()
    assert z3ops.FAST_ARITHMETIC["__eq__"](X, None) is False  # as z3: a term is never None


def test_fast_arithmetic_installs_on_z3_s_arithref_and_comes_off_again() -> None:
    own = dict(vars(z3.ArithRef))
    try:
        z3ops.fast_arithmetic()
        assert z3.ArithRef.__ge__ is z3ops.FAST_ARITHMETIC["__ge__"]
        assert (X >= 3).eq(z3ops.SLOW_ARITHMETIC["__ge__"](X, 3)) and (X - Y).eq(z3ops.SLOW_ARITHMETIC["__sub__"](X, Y))
        assert len({X, Y, X}) == 2  # still hashable: __eq__ set on the class after it was made keeps __hash__
    finally:
        z3ops.fast_arithmetic(False)
    assert dict(vars(z3.ArithRef)) == own


def _traces_of(profile: str, slow: bool) -> list:
    """``profile``'s counterexample traces, in a process forked for it (fresh Z3 state), built with z3's own
    connectives and operators when ``slow``, else with the fast ones a prove worker installs."""
    if not slow:
        z3ops.fast_arithmetic()
    if slow:
        from prefill_delayer.proofs import model

        def and_(*xs: object) -> object:
            return z3.And(*[z3ops.to_bool(x) for x in xs]) if xs else z3.BoolVal(True)

        def or_(*xs: object) -> object:
            return z3.Or(*[z3ops.to_bool(x) for x in xs]) if xs else z3.BoolVal(False)

        def not_(x: object) -> object:
            return z3.Not(z3ops.to_bool(x))

        def if_(c: object, a: object, b: object) -> object:
            return (a if c else b) if isinstance(c, bool) else z3.If(c, a, b)

        def eq_int(x: object, n: int) -> object:
            return x == n

        for where in (z3ops, model):
            for name, f in (("And", and_), ("Or", or_), ("Not", not_), ("If", if_), ("EqInt", eq_int)):
                if hasattr(where, name):
                    setattr(where, name, f)
        for name, f in (("And", and_), ("Or", or_), ("Not", not_), ("If", if_)):
            setattr(z3ops.Z3Ops, name, staticmethod(f))
    from prefill_delayer.proofs.prove import run_catalogue

    return [r.trace for r in run_catalogue((profile,), {}) if r.trace is not None]


def test_the_fast_paths_leave_every_counterexample_as_z3_s_own_functions_find_it() -> None:
    """Z3's models depend on the order its nodes were created in: the same terms made in another order would
    find other (equally short) counterexamples. Each run is in a fresh forked process."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        fast = pool.apply(_traces_of, ("sglang-0.5.22", False))
        slow = pool.apply(_traces_of, ("sglang-0.5.22", True))
    assert len(fast) == 3 and fast == slow
