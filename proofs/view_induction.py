"""aggregate-view for every rank count and every layout, by induction over the rows.

Two steps, neither of which restates the view:

1. *Fold structure, read from the code.* ``view_folds`` runs the policy's
   ``gathered_view`` on rows of recording symbols (``FoldOps``) and reads off,
   for each view field, how it aggregates: the number of counted rows, or the
   sum / max / "any > 0" of one row field, over the counted rows or over all
   rows. It asks for several layouts (DP groups x ranks per group) and requires
   one answer, the one the policy declares (``Policy.view``): the view is a fold
   of per-row values by commutative, associative operations, so the view of
   n + 1 rows is the view of n rows merged with one. A field that is anything
   else (another rank counted, a field mixed in, a comparison other than "> 0")
   is reported, and the proof fails.
2. *Induction, in Z3, once.* With ``D(v)`` the abstract view's domain (the
   policy's ``view_domain``) and rows built by the policy's ``local_row`` from
   arbitrary inputs and state:
   - base: the view of one counted row is in ``D`` with n = 1, and every ``v`` in
     ``D`` with n = 1 is the view of one row;
   - step (a counted row): ``D(v)`` implies ``D(merge(v, row))`` with n + 1, and
     every ``v'`` in ``D`` with n' >= 2 is ``merge(v, row)`` for some ``v`` in ``D``
     and some row (a witness built from ``v'``);
   - step (a row that is not counted: the other attn_cp x attn_tp ranks of a DP
     group): ``D(v)`` implies ``D(merge_all_only(v, row))``, and an idle row leaves
     every view of ``D`` as it is.
   So for every number of DP groups and every group size, the views of the rows
   are exactly ``D``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

import z3

from ..spec.policy import PROVED, REFUTED
from .model import concrete_count, input_domain, sym_input, sym_state, sym_view
from .properties import Check, solve
from .z3ops import Z3Ops

# Layouts the fold structure is read from: (DP groups, ranks per group).
# With one rank per group "counted" and "all" coincide, so those layouts check kind and field only.
FOLD_LAYOUTS = ((2, 3), (4, 2), (1, 2), (1, 1), (3, 1))


@dataclass(frozen=True)
class Cell:
    """Field ``field`` of rank ``rank``'s row."""

    rank: int
    field: int


@dataclass(frozen=True)
class Fold:
    kind: str  # "sum" | "max" | "any" (sum > 0)
    cells: tuple[Cell, ...]

    def __gt__(self, other: Any) -> "Fold":
        if self.kind == "sum" and other == 0:
            return Fold("any", self.cells)
        return Fold(f"unrecognised ({self.kind} > {other!r})", self.cells)

    def __ge__(self, other: Any) -> "Fold":
        return Fold(f"unrecognised ({self.kind} >= {other!r})", self.cells)

    def __lt__(self, other: Any) -> "Fold":
        return Fold(f"unrecognised ({self.kind} < {other!r})", self.cells)

    def __le__(self, other: Any) -> "Fold":
        return Fold(f"unrecognised ({self.kind} <= {other!r})", self.cells)


class FoldOps:
    """Records the aggregates ``gathered_view`` builds."""

    @staticmethod
    def SumOf(xs: Any) -> Fold:
        return Fold("sum", tuple(xs))

    @staticmethod
    def MaxOf(xs: Any) -> Fold:
        return Fold("max", tuple(xs))


@dataclass(frozen=True)
class FieldFold:
    """How one View field aggregates: ``kind`` of row field ``field`` over ``scope`` rows."""

    kind: str  # "count" | "sum" | "max" | "any"
    field: Optional[str]
    scope: str  # "counted" | "all"


class _LayoutConfig:
    """What ``gathered_view`` reads of a configuration: the layout."""

    def __init__(self, groups: int, group_size: int) -> None:
        self.dp_dim, self.group_size = groups, group_size


def _read(name: str, value: Any, groups: int, size: int, index: dict[int, str]) -> FieldFold:
    counted = [g * size for g in range(groups)]
    if isinstance(value, int) and not isinstance(value, bool):
        if value == groups:
            return FieldFold("count", None, "counted")
        raise ValueError(f"{name} is {value} for {groups} DP groups, not their count")
    if not isinstance(value, Fold) or value.kind not in ("sum", "max", "any"):
        raise ValueError(f"{name} is not a sum, max or any over rows: {value!r}")
    fields = {c.field for c in value.cells}
    ranks = [c.rank for c in value.cells]
    if len(fields) != 1:
        raise ValueError(f"{name} mixes row fields {sorted(fields)}")
    if sorted(ranks) == counted and len(ranks) == len(set(ranks)) and size > 1:
        scope = "counted"
    elif sorted(ranks) == counted and size == 1:
        scope = "either"
    elif sorted(ranks) == list(range(groups * size)):
        scope = "all"
    else:
        raise ValueError(f"{name} aggregates ranks {ranks}, neither the first of each DP group {counted} nor all")
    return FieldFold(value.kind, index[fields.pop()], scope)


def view_folds(policy: Any, layouts: Sequence[tuple[int, int]] = FOLD_LAYOUTS) -> dict[str, FieldFold]:
    """Each view field's fold, read from ``gathered_view``; the same for every layout (else ValueError)."""
    found: Optional[dict[str, FieldFold]] = None
    width = len(policy.row)
    index = dict(enumerate(policy.row_names))
    for groups, size in layouts:
        rows = [[Cell(r, f) for f in range(width)] for r in range(groups * size)]
        view = policy.gathered_view(FoldOps, _LayoutConfig(groups, size), rows)
        folds = {name: _read(name, value, groups, size, index) for name, value in view._asdict().items()}
        if found is not None:  # a layout with one rank per group cannot tell the scopes apart
            folds = {k: replace(f, scope=found[k].scope) if f.scope == "either" else f for k, f in folds.items()}
        elif any(f.scope == "either" for f in folds.values()):
            raise ValueError("the first layout must have several ranks per group")
        if found is None:
            found = folds
        elif folds != found:
            diff = [k for k in folds if folds[k] != found[k]]
            raise ValueError(f"the view's folds depend on the layout ({groups} x {size}): {diff}")
    assert found is not None
    return found


def merge(policy: Any, v: Any, row: Sequence[Any], counted: bool, folds: dict[str, FieldFold]) -> Any:
    """The view after one more row (a counted one, or another rank of some DP group)."""
    index = {name: i for i, name in enumerate(policy.row_names)}
    out = {}
    for name, f in folds.items():
        old = getattr(v, name)
        if f.scope == "counted" and not counted:
            out[name] = old
        elif f.kind == "count":
            out[name] = old + 1
        elif f.kind == "sum":
            out[name] = old + row[index[f.field]]
        elif f.kind == "max":
            x = row[index[f.field]]
            out[name] = z3.If(old >= x, old, x)
        else:  # any
            out[name] = z3.Or(old, row[index[f.field]] > 0)
    return policy.view_cls(**out)


def symbolic_row(policy: Any, o: Z3Ops, c: Any, tag: str) -> tuple[list, list]:
    """A row from ``local_row`` of a rank with arbitrary inputs and state, and its domain."""
    st = sym_state(policy, tag)
    now = z3.Real(f"now{tag}")
    inp = sym_input(policy, tag, policy.input_names)
    local = policy.local_for(o, st, now, inp)
    dom = input_domain(policy, inp) + policy.local_domain(o, c, st, now, inp)
    return policy.local_row(o, c, inp, local), dom


def _row_of(policy: Any, o: Z3Ops, c: Any, made: tuple) -> list:
    inp, local = made
    return policy.local_row(o, c, inp, local)


def _same(a: Any, b: Any) -> Any:
    return z3.And(*[x == y for x, y in zip(a, b)])


def _declared(policy: Any) -> dict[str, tuple]:
    return {a.name: (a.kind, a.field, a.over) for a in policy.view}


def check_view_induction(policy: Any, fam: Any, timeout_ms: int) -> Check:
    label = f"{fam.label()} induction"
    try:
        folds = view_folds(policy)
    except ValueError as exc:
        return Check(REFUTED, label, f"gathered_view is not a fold of the rows: {exc}")
    meant = {k: (f.kind, f.field, f.scope) for k, f in folds.items()}
    declared = _declared(policy)
    wrong = [f"{k} is {meant.get(k)}, declared {declared[k]}" for k in declared if meant.get(k) != declared[k]]
    if wrong or set(meant) != set(declared):
        return Check(REFUTED, label, "gathered_view's folds differ from what the view declares: " + "; ".join(wrong))
    hooks = policy.proof
    o = Z3Ops()
    c = replace(hooks.sym_config(o, fam), enable_dp_attention=True)  # n = the number of DP groups, symbolic
    queries = []
    one_group = replace(c, dp_size=1)
    # base: one counted row.
    row, rdom = symbolic_row(policy, o, c, "_b")
    one = policy.gathered_view(o, one_group, [row])
    queries.append(("base, sound", rdom, z3.And(*policy.view_domain(o, c, concrete_count(policy, one)))))
    v1, v1dom = sym_view(policy, o, c, "_b1")
    count = policy.count_field
    v1dom = v1dom + [getattr(v1, count) == 1]
    w1 = policy.gathered_view(o, one_group, [_row_of(policy, o, c, hooks.witness_row(o, c, v1))])
    queries.append(("base, complete", v1dom, _same(concrete_count(policy, w1), v1)))
    # step: a counted row, and a row that is not counted.
    v, vdom = sym_view(policy, o, c, "_s")
    row, rdom = symbolic_row(policy, o, c, "_s")
    grown = merge(policy, v, row, True, folds)
    queries.append(("counted row, sound", vdom + rdom, z3.And(*policy.view_domain(o, c, grown))))
    other = merge(policy, v, row, False, folds)
    queries.append(("other row, sound", vdom + rdom, z3.And(*policy.view_domain(o, c, other))))
    # complete: every view of n' >= 2 counted rows splits into one of n' - 1 and one row.
    v2, v2dom = sym_view(policy, o, c, "_c")
    w = _row_of(policy, o, c, hooks.witness_row(o, c, v2))
    less = hooks.split_view(o, v2)
    split = z3.And(*policy.view_domain(o, c, less), _same(merge(policy, less, w, True, folds), v2))
    queries.append(("counted row, complete", v2dom + [getattr(v2, count) >= 2], split))
    idle = _row_of(policy, o, c, hooks.idle_row(o))
    queries.append(("other row, complete", vdom, _same(merge(policy, v, idle, False, folds), v)))
    for name, assumptions, claim in queries:
        res = solve(hooks.config_domain(o, c) + assumptions + o.side + [z3.Not(claim)], timeout_ms)
        if res.status != PROVED:
            return Check(res.status, label, f"{name} fails", res.model, why=res.why)
    kinds = ", ".join(f"{k}={f.kind}" + ("" if f.scope == "counted" else " over all rows") for k, f in folds.items())
    return Check(PROVED, label, f"any number of DP groups and ranks per group (folds: {kinds})")
