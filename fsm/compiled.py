"""The transition table of one concrete configuration, compiled to Python: the runtime's per-pass path.

Why: firing an event of the ``transitions`` machine walks the library's event
dispatch (event data, condition objects, callback lists) and costs more per
pass than the guards themselves. The machine stays the model — the docs are
drawn from it, the tests and the runtime's cross-check (``PREFILL_DELAYER_CROSSCHECK=1``)
compare against it — and this module derives, from the *same* table rows and
the *same* guard functions, one straight-line Python function per event.

How: ``SrcOps`` is a fourth reading of the operator layer (after ``PyOps``,
``Z3Ops`` and ``TextOps``) whose values are Python *source* (``Src``). The
configuration is concrete, so its structural ``if``\\ s are decided and its
numbers become literals; the rows, this rank's state and the clock are
symbolic names. Running the policy's own functions on them —
``local_row``, ``gathered_view``, each table row's guard functions
in table order (laid out as a decision tree, see ``_Generator.select``),
``decide`` for the fired row's effects, ``local_for`` for what the
guards see of the state — yields the source, which is compiled once per
delayer. Nothing here states a guard or names a policy: change a guard
and the compiled code changes with it (``tests/test_compiled.py`` checks both
that and agreement with the machine on random passes).

Semantics are ``PyOps``' exactly: the same comparisons on the same Python
ints and floats (``int(RB * ratio)`` in doubles, ``(a + b - 1) // b``), with
``and``/``or`` used only on booleans so they yield the same ``bool`` as
``all``/``any``.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any, Callable, Iterable, Optional, Sequence

from ..spec.fields import BOOL
from ..spec.ops import Ops
from ..spec.table import FINALIZE, Table, Transition
from .operators import Operators


class Src(Operators):
    """A Python expression (fully parenthesised), and whether it always yields a ``bool``."""

    __slots__ = ("code", "is_bool", "negates", "index")

    def __init__(self, code: str, is_bool: bool = False, negates: Optional["Src"] = None, index: Optional[int] = None) -> None:
        self.code = code
        self.is_bool = is_bool
        self.negates = negates  # x, when this is ``not x``
        self.index = index  # i, when this is ``flat[i]`` (one field of one gathered row)

    def __repr__(self) -> str:
        return f"Src({self.code!r})"

    def __bool__(self) -> bool:
        raise TypeError(
            f"pass-dependent value {self.code!r} used as a Python bool: guards must combine such values "
            "with o.And / o.Or / o.Not / o.If (only configuration values may steer a Python if)"
        )

    # Operators (fsm.operators) call these two.
    def _bin(self, op: str, other: Any, reflected: bool = False) -> "Src":
        a, b = (lit(other), self.code) if reflected else (self.code, lit(other))
        return Src(f"({a} {op} {b})")

    def _cmp(self, op: str, o: Any) -> "Src":
        return Src(f"({self.code} {op} {lit(o)})", is_bool=True)

    def __neg__(self) -> "Src":
        return Src(f"(-{self.code})")


def lit(x: Any) -> str:
    """Source for ``x``: an expression's code, or a literal that evaluates to exactly ``x``."""
    if isinstance(x, Src):
        return x.code
    if x is None or isinstance(x, (bool, int, str)):
        return repr(x)
    if isinstance(x, float):
        if math.isnan(x):
            raise ValueError("NaN has no place in a compiled guard")
        if math.isinf(x):
            return "1e999" if x > 0 else "(-1e999)"
        return repr(x)  # repr round-trips every finite double exactly
    raise TypeError(f"cannot compile the constant {x!r}")


def _is_bool(x: Any) -> bool:
    return x.is_bool if isinstance(x, Src) else isinstance(x, bool)


def _as_bool_code(x: Src) -> str:
    return x.code if x.is_bool else f"bool({x.code})"


class SrcOps:
    """``PyOps``' operations on ``Src``: constants fold, the rest becomes source.

    ``facts`` maps the code of conditions already decided on the path being
    generated to their value (inside ``if X:``, ``X`` is true), so a guard
    re-reading a decided condition folds to a constant instead of re-testing it.
    Sound because every name in the generated code is assigned once per pass.
    """

    FALSE = False

    def __init__(self) -> None:
        self.facts: dict[str, bool] = {}

    def _known(self, x: Any) -> Any:
        if isinstance(x, Src):
            return self.facts.get(x.code, x)
        return x

    def _junction(self, xs: Iterable[Any], absorbing: bool, word: str) -> Any:
        """``and`` (``absorbing`` False) or ``or`` (True) of ``xs``, constants folded as ``all``/``any`` would."""
        items: list[Src] = []
        for x in map(self._known, xs):
            if not isinstance(x, Src):
                if bool(x) == absorbing:
                    return absorbing
                continue
            items.append(x)
        if not items:
            return not absorbing
        if len(items) == 1:
            return items[0] if items[0].is_bool else Src(f"bool({items[0].code})", True)
        return Src("(" + f" {word} ".join(_as_bool_code(x) for x in items) + ")", True)

    def And(self, *xs: Any) -> Any:
        return self._junction(xs, False, "and")

    def Or(self, *xs: Any) -> Any:
        return self._junction(xs, True, "or")

    def Not(self, x: Any) -> Any:
        x = self._known(x)
        return Src(f"(not {x.code})", True, negates=x) if isinstance(x, Src) else not x

    def If(self, c: Any, a: Any, b: Any) -> Any:
        c = self._known(c)
        if not isinstance(c, Src):
            return a if c else b
        return Src(f"({lit(a)} if {c.code} else {lit(b)})", _is_bool(a) and _is_bool(b))

    @staticmethod
    def Min(a: Any, b: Any) -> Any:
        if not isinstance(a, Src) and not isinstance(b, Src):
            return a if a <= b else b
        # ``a if a <= b else b`` with each side evaluated once, in that order; fresh
        # names per call, so a ``Min`` nested in ``b`` cannot overwrite this one's ``a``.
        k = next(_FRESH)
        return Src(f"(_min{k}a if (_min{k}a := {lit(a)}) <= (_min{k}b := {lit(b)}) else _min{k}b)")

    @staticmethod
    def MaxOf(xs: Iterable[Any]) -> Any:
        xs = list(xs)
        if not any(isinstance(x, Src) for x in xs):
            return max(xs)
        if len(xs) == 1:
            return xs[0]
        return Src(f"max({_strided(xs) or ', '.join(lit(x) for x in xs)})")

    @staticmethod
    def SumOf(xs: Iterable[Any]) -> Any:
        xs = list(xs)
        if not any(isinstance(x, Src) for x in xs):
            return sum(xs)
        if len(xs) == 1:
            return xs[0]
        strided = _strided(xs)
        return Src(f"sum({strided})" if strided else "(" + " + ".join(lit(x) for x in xs) + ")")

    def b2i(self, b: Any) -> Any:
        b = self._known(b)
        return Src(f"(1 if {b.code} else 0)") if isinstance(b, Src) else (1 if b else 0)

    @staticmethod
    def ceil_div(a: Any, b: Any) -> Any:
        return (a + b - 1) // b

    @staticmethod
    def floor_mul(a: Any, ratio: Any) -> Any:
        if not isinstance(a, Src) and not isinstance(ratio, Src):
            return int(a * ratio)
        return Src(f"int({lit(a)} * {lit(ratio)})")

    @staticmethod
    def ratio_at_least(num: Any, den: Any, ratio: Any) -> Any:
        if not any(isinstance(x, Src) for x in (num, den, ratio)):
            return num / den >= ratio
        return Src(f"({lit(num)} / {lit(den)} >= {lit(ratio)})", is_bool=True)

    @staticmethod
    def num(x: Any) -> Any:
        return x


_FRESH = itertools.count()


_INLINE_UP_TO = 4


def _strided(xs: Sequence[Any]) -> Optional[str]:
    """``flat[a:b:k]`` when ``xs`` are ``flat[a]``, ``flat[a + k]``, ... (one field of evenly spaced
    rows, as every aggregate over ranks is): one slice instead of an expression per rank."""
    found = [x.index if isinstance(x, Src) else None for x in xs]
    if len(found) <= _INLINE_UP_TO or None in found:
        return None  # a few indexings are cheaper than building a slice
    indices = [i for i in found if i is not None]
    step = indices[1] - indices[0]
    if step <= 0 or any(b - a != step for a, b in zip(indices, indices[1:])):
        return None
    return f"{_FLAT}[{indices[0]}:{indices[-1] + 1}:{step}]"

# Names in the generated source.
_FLAT, _NOW = "flat", "now"


class _Unavailable:
    """An input ``negotiate`` is not given (only the policy's ``local_inputs`` are): any use is a bug of the policy."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        raise TypeError(f"local_for read input {self.name!r}, which is not among the policy's local_inputs")


def _input_names(policy: Any) -> list[str]:
    return [f"i_{f.sym_name}" for f in policy.inputs]


def _state_names(policy: Any) -> list[str]:
    return ["control"] + [f.sym_name for f in policy.state_fields]


def _symbolic_state(policy: Any, control: str) -> Any:
    """The policy's ``State`` at ``control`` with its variables as the generated function's names."""
    return policy.state_cls(control, *(Src(f.sym_name, is_bool=f.kind == BOOL) for f in policy.state_fields))


def _symbolic_input(policy: Any, local_only: bool) -> Any:
    """The policy's input with every field (or only its ``local_inputs``) as the generated function's names."""
    values: list[Any] = []
    for f, name in zip(policy.inputs, _input_names(policy)):
        if local_only and f.name not in policy.local_inputs:
            values.append(_Unavailable(f.name))
        else:
            values.append(Src(name, is_bool=f.kind == BOOL))
    return policy.input_cls(*values)


def _indent(lines: Sequence[str], n: int) -> list[str]:
    return [" " * n + line for line in lines]


_VIEW_NAME = re.compile(r"\bv_([a-z_]+)\b")


def _learn(facts: dict[str, bool], x: Src, value: bool) -> dict[str, bool]:
    """``facts`` plus ``x == value`` (and, for ``x = not y``, ``y == not value``)."""
    learned = {**facts, x.code: value}
    while x.negates is not None:
        x, value = x.negates, not value
        learned[x.code] = value
    return learned


class _Generator:
    """Generates the source of one configuration's ``row``, ``negotiate`` and ``finalize``."""

    def __init__(self, c: Any, table: Table, row_len: int) -> None:
        self.c = c
        self.policy = c.policy
        self.table = table
        self.row_len = row_len
        self.o = SrcOps()
        self.received = self.policy.received_rows(c)  # every rank's row, or one reduced row
        rows = [[Src(f"{_FLAT}[{i}]", index=i) for i in range(r * row_len, (r + 1) * row_len)] for r in range(self.received)]
        # The view's fields, each computed (once) where a path first needs it.
        self.view_defs: dict[str, str] = {}
        names: dict[str, Any] = {}
        for name, value in self.policy.view_of(self.o, c, rows)._asdict().items():
            if isinstance(value, Src):
                self.view_defs[f"v_{name}"] = value.code
                names[name] = Src(f"v_{name}", value.is_bool)
            else:
                names[name] = value  # known for this configuration (the number of counted rows)
        self.view = self.policy.view_cls(**names)

    def _local(self, control: str, local_only: bool = True) -> Any:
        """What the guards see of a state at ``control``: the policy's ``local_for`` on the names."""
        p = self.policy
        return p.local_for(self.o, _symbolic_state(p, control), Src(_NOW), _symbolic_input(p, local_only))

    def _define(self, code: str, defined: frozenset) -> tuple[list[str], frozenset]:
        """Assignments of the view fields ``code`` reads that this path has not computed yet."""
        needed = {f"v_{m}" for m in _VIEW_NAME.findall(code)} - defined
        lines = [f"{name} = {expr}" for name, expr in self.view_defs.items() if name in needed]
        return lines, defined | needed

    def _decision(self, t: Transition, local: Any, facts: dict[str, bool]) -> str:
        """``Decision(State(...), ...)`` of the fired row, as the policy's ``decide`` computes it."""
        self.o.facts = facts
        d = self.policy.decide(self.o, self.c, t, self.view, local)
        state = ", ".join(lit(x) for x in d.next_state)
        rest = ", ".join(lit(x) for x in d[1:])
        return f"_new(_Decision, (_new(_State, ({state})), {rest}))"

    def select(
        self, rows: Sequence[Transition], local: Any, known: dict[str, bool], facts: dict[str, bool], defined: frozenset
    ) -> list[str]:
        """Source that returns the decision of the first row of ``rows`` whose guards all hold.

        The chain a ``transitions`` machine runs (each row's guards in order, the
        first row that passes fires), laid out as a decision tree so that no guard
        is evaluated twice on a pass: ``known`` holds the guards decided on this
        path (one that folds to a constant for this configuration is decided
        without code), ``facts`` the conditions tested, ``defined`` the view
        fields computed. Rows contradicted by ``known`` drop out; when the first
        remaining row has every guard decided, it fires.
        """
        live = [t for t in rows if all(known.get(lit.guard, lit.positive) == lit.positive for lit in t.lits)]
        if not live:
            return ["raise _NoTransition(state, now, flat)"]
        first = live[0]
        pending = [(lit, fn) for lit, fn in zip(first.lits, first.fns) if lit.guard not in known]
        if not pending:
            code = self._decision(first, local, facts)
            lines, _ = self._define(code, defined)
            return [*lines, f"return {code}  # {first.name}"]
        lit_, fn = pending[0]
        self.o.facts = facts
        value = self.o._known(fn(self.o, self.c, self.view, local))
        if not isinstance(value, Src):
            return self.select(live, local, {**known, lit_.guard: bool(value)}, facts, defined)
        lines, defined = self._define(value.code, defined)
        cond = value.code if value.is_bool else f"bool({value.code})"
        return [
            *lines,
            f"if {cond}:  # {lit_.guard}",
            *_indent(self.select(live, local, {**known, lit_.guard: True}, _learn(facts, value, True), defined), 4),
            "else:",
            *_indent(self.select(live, local, {**known, lit_.guard: False}, _learn(facts, value, False), defined), 4),
        ]

    def source(self, row_tail: Sequence[int]) -> str:
        c, table, o, p = self.c, self.table, self.o, self.policy
        inp = _symbolic_input(p, local_only=False)
        inputs = _input_names(p)
        local_args = [n for f, n in zip(p.inputs, inputs) if f.name in p.local_inputs]
        states = _state_names(p)
        out: list[str] = []

        # row(state, now, *inputs) -> this rank's row: local_row's fields, then row_tail.
        out.append(f"def row(state, {_NOW}, {', '.join(inputs)}):")
        out.append(f"    {', '.join(states)} = state")
        for i, src in enumerate(table.sources):
            o.facts = {}
            fields = [lit(x) for x in p.local_row(o, c, inp, self._local(src, local_only=False))] + [lit(x) for x in row_tail]
            out.append(f"    {'if' if i == 0 else 'elif'} control == {src!r}:")
            out.append(f"        return [{', '.join(fields)}]")
        out.append("    raise _bad_source(control, 'negotiate')")

        # negotiate(state, now, *local inputs, flat) -> Decision: the table's rows for the state.
        out.append(f"def negotiate(state, {_NOW}, {''.join(a + ', ' for a in local_args)}{_FLAT}):")
        out.append(f"    {', '.join(states)} = state")
        out.append(f"    if len({_FLAT}) != {self.received * self.row_len}:")
        out.append(f"        raise _bad_rows(len({_FLAT}), {self.received}, {self.row_len})")
        for i, src in enumerate(table.sources):
            out.append(f"    {'if' if i == 0 else 'elif'} control == {src!r}:")
            out += _indent(self.select(table.by_source[src], self._local(src), {}, {}, frozenset()), 8)
        out.append("    raise _bad_source(control, 'negotiate')")

        # finalize(state) -> State: the table's finalize rows; a state without one is already finalized.
        out.append("def finalize(state):")
        out.append("    control = state[0]")
        for t in finalize_rows(table):
            out.append(f"    if control == {t.source!r}:")
            out.append(f"        return _new(_State, ({t.dest!r},) + state[1:])")
        out.append("    return state")
        return "\n".join(out) + "\n"


def finalize_rows(table: Table) -> list[Transition]:
    """The table's finalize rows that change the control state: from any other state ``finalize`` is the identity."""
    return [t for t in table if t.event == FINALIZE and t.dest != t.source]


class NoTransition(AssertionError):
    """No row of the table held: impossible while ``guards-partition`` is proved."""


def source(c: Any, table: Table, row_tail: Sequence[int] = (), row_len: Optional[int] = None) -> str:
    """The module source compiled for ``c``: ``row``, ``negotiate`` and ``finalize``."""
    n = len(c.policy.row) + len(row_tail) if row_len is None else row_len
    return _Generator(c, table, n).source(row_tail)


def _bad_rows(length: int, world: int, row_len: int) -> ValueError:
    return ValueError(f"the gathered rows hold {length} values, expected {world} rows of {row_len}")


def _bad_source(control: Any, event: str) -> ValueError:
    return ValueError(f"no {event} transition leaves state {control!r} (finalize the previous pass first)")


class CompiledStep:
    """``row``, ``negotiate`` and ``finalize`` of one configuration, compiled from its policy.

    * ``row(state, now, *inputs) -> list``: the policy's row for this rank
      (``local_row``), then ``row_tail``'s constants;
    * ``negotiate(state, now, *local_inputs, flat) -> Decision``: ``local_inputs``
      are the inputs the policy's ``local_for`` reads (for SGLang's delayer,
      ``max_running_requests``); ``flat`` is every rank's row, concatenated in
      global rank order (``world_size * row_len`` ints: the policy's fields, then
      the runtime's envelope), or for a policy whose collective is an
      all-reduce the one reduced row; a wrong length raises ``ValueError``;
    * ``finalize(state) -> State``.

    ``state`` must be the policy's ``State``. Equal, pass for pass, to
    ``fsm.Step`` (and so to ``DelayerMachine``) on the same inputs.
    """

    def __init__(self, config: Any, table: Optional[Table] = None, row_tail: Sequence[int] = (), row_len: Optional[int] = None) -> None:
        self.config = config
        self.policy = config.policy
        self.table = table if table is not None else self.policy.build_table(config.profile)
        self.row_tail = tuple(row_tail)
        self.row_len = len(self.policy.row) + len(self.row_tail) if row_len is None else row_len
        self.source = source(config, self.table, self.row_tail, self.row_len)
        namespace: dict[str, Any] = {
            "_new": tuple.__new__,
            "_State": self.policy.state_cls,
            "_Decision": self.policy.decision_cls,
            "_NoTransition": NoTransition,
            "_bad_source": _bad_source,
            "_bad_rows": _bad_rows,
        }
        name = f"<prefill_delayer.fsm.compiled {config.profile} world={config.world_size}>"
        exec(compile(self.source, name, "exec"), namespace)
        self.row: Callable[..., list] = namespace["row"]
        self.negotiate: Callable[..., Any] = namespace["negotiate"]
        self.finalize: Callable[[Any], Any] = namespace["finalize"]
        # The control states ``finalize`` changes (``state[0]``): a caller may skip the call for any other.
        self.finalizing = frozenset(t.source for t in finalize_rows(self.table))

    def __repr__(self) -> str:
        return f"CompiledStep({self.config!r})"


_checked: Ops = SrcOps()  # mypy: the source-emitting layer implements the operator interface
