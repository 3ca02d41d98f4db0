"""aggregate-view for every rank count and every layout, by induction over the rows.

Two steps, neither of which restates the view:

1. *Fold structure, read from the spec.* ``view_folds`` runs the spec's own
   ``gathered_view`` on rows of recording symbols (``FoldOps``) and reads off,
   for each ``View`` field, how it aggregates: the number of counted rows, or the
   sum / max / "any > 0" of one row field, over the counted rows or over all
   rows. It asks for several layouts (DP groups x ranks per group) and requires
   one answer: the view is a fold of per-row values by commutative, associative
   operations, so the view of n + 1 rows is the view of n rows merged with one.
   A field that is anything else (another rank counted, a field mixed in, a
   comparison other than "> 0") is reported, and the proof fails.
2. *Induction, in Z3, once.* With ``D(v)`` the abstract view's domain
   (``model.view_domain``) and rows built by the spec's ``local_row`` from
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

from ..spec.inputs import PassInput
from ..spec.invariants import PROVED, REFUTED
from ..spec.view import ROW_FIELDS, Local, View, gathered_view, local_row
from .model import Family, count_domain, sym_config, sym_view, view_domain
from .properties import Check, _solve
from .z3ops import Z3Ops

# What each View field means, written independently of ``spec.view`` (as the glossary and
# the releases' code define it): (kind, row field, over which rows).
MEANING = {
    "n": ("count", None, "counted"),
    "num_prefillable": ("sum", "prefillable", "counted"),
    "num_force": ("sum", "force", "counted"),
    "running_batch": ("max", "running_batch", "counted"),
    "max_prefill_bs": ("max", "max_prefill_bs", "counted"),
    "waiting_queue_len": ("max", "waiting_queue_len", "counted"),
    "timeout_any": ("any", "timeout_expired", "counted"),  # SGLang 0.5.22: tp0_info[:, 5].max() > 0
    "mrr_max": ("max", "max_running_requests", "all"),  # ours: no rank's value is lost
}

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
    field: Optional[int]
    scope: str  # "counted" | "all"


class _LayoutConfig:
    """What ``gathered_view`` reads of a configuration: the layout."""

    def __init__(self, groups: int, group_size: int) -> None:
        self.dp_dim, self.group_size = groups, group_size


def _read(name: str, value: Any, groups: int, size: int) -> FieldFold:
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
    return FieldFold(value.kind, fields.pop(), scope)


def view_folds(layouts: Sequence[tuple[int, int]] = FOLD_LAYOUTS) -> dict[str, FieldFold]:
    """Each View field's fold, read from ``gathered_view``; the same for every layout (else ValueError)."""
    found: Optional[dict[str, FieldFold]] = None
    for groups, size in layouts:
        rows = [[Cell(r, f) for f in range(7)] for r in range(groups * size)]
        view = gathered_view(FoldOps, _LayoutConfig(groups, size), rows)
        folds = {name: _read(name, value, groups, size) for name, value in view._asdict().items()}
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


def merge(v: View, row: Sequence[Any], counted: bool, folds: dict[str, FieldFold]) -> View:
    """The view after one more row (a counted one, or another rank of some DP group)."""
    out = {}
    for name, f in folds.items():
        old = getattr(v, name)
        if f.scope == "counted" and not counted:
            out[name] = old
        elif f.kind == "count":
            out[name] = old + 1
        elif f.kind == "sum":
            out[name] = old + row[f.field]
        elif f.kind == "max":
            out[name] = z3.If(old >= row[f.field], old, row[f.field])
        else:  # any
            out[name] = z3.Or(old, row[f.field] > 0)
    return View(**out)


def _symbolic_row(o: Z3Ops, c: Any, tag: str) -> tuple[list, list]:
    """A row from ``local_row`` of a rank with arbitrary inputs and state, and its domain."""
    pre, tu = z3.Bool(f"pre{tag}"), z3.Real(f"tu{tag}")
    rb, pb, wq, mrr = (z3.Int(f"{f}{tag}") for f in ("rb", "pb", "wq", "mrr"))
    waiting, count, now, start = z3.Bool(f"waiting{tag}"), z3.Int(f"count{tag}"), z3.Real(f"now{tag}"), z3.Real(f"start{tag}")
    dom = [tu >= 0, count >= 0] + [count_domain(x) for x in (rb, pb, wq, mrr)]
    row = local_row(o, c, PassInput(pre, tu, rb, pb, mrr, wq), Local(waiting, count, start, z3.Bool(f"armed{tag}"), now, mrr))
    return row, dom


def _witness_row(o: Z3Ops, c: Any, v: View) -> list:
    """A row that adds one prefillable (and forcing) rank when ``v`` has one, and ``v``'s maxima and flag."""
    pre = v.num_prefillable >= 1
    tu = z3.If(v.num_force >= 1, z3.RealVal(0), c.watermark)
    now = z3.If(v.timeout_any, c.max_delay_ms / 1000, 0)
    inp = PassInput(pre, tu, v.running_batch, v.max_prefill_bs, v.mrr_max, v.waiting_queue_len)
    return local_row(o, c, inp, Local(v.timeout_any, z3.IntVal(1), z3.RealVal(0), z3.BoolVal(False), now, v.mrr_max))


def _same(a: View, b: View) -> Any:
    return z3.And(*[x == y for x, y in zip(a, b)])


def check_view_induction(fam: Family, timeout_ms: int) -> Check:
    label = f"{fam.label()} induction"
    try:
        folds = view_folds()
    except ValueError as exc:
        return Check(REFUTED, label, f"gathered_view is not a fold of the rows: {exc}")
    meant = {k: (f.kind, None if f.field is None else ROW_FIELDS[f.field], f.scope) for k, f in folds.items()}
    wrong = [f"{k} is {meant.get(k)}, means {MEANING[k]}" for k in MEANING if meant.get(k) != MEANING[k]]
    if wrong or set(meant) != set(MEANING):
        return Check(REFUTED, label, "gathered_view's folds differ from what the view means: " + "; ".join(wrong))
    c = replace(sym_config(fam), enable_dp_attention=True)  # n = the number of DP groups, symbolic
    queries = []
    o = Z3Ops()
    # base: one counted row.
    row, rdom = _symbolic_row(o, c, "_b")
    one = gathered_view(o, replace(c, dp_size=1), [row])
    queries.append(("base, sound", rdom, z3.And(*view_domain(one._replace(n=z3.IntVal(one.n)), c))))
    v1, v1dom = sym_view(c, "_b1")
    v1dom = v1dom + [v1.n == 1]
    w1 = gathered_view(o, replace(c, dp_size=1), [_witness_row(o, c, v1)])
    queries.append(("base, complete", v1dom, _same(w1._replace(n=z3.IntVal(w1.n)), v1)))
    # step: a counted row, and a row that is not counted.
    v, vdom = sym_view(c, "_s")
    row, rdom = _symbolic_row(o, c, "_s")
    grown = merge(v, row, True, folds)
    queries.append(("counted row, sound", vdom + rdom, z3.And(*view_domain(grown, c))))
    other = merge(v, row, False, folds)
    queries.append(("other row, sound", vdom + rdom, z3.And(*view_domain(other, c))))
    # complete: every view of n' >= 2 counted rows splits into one of n' - 1 and one row.
    v2, v2dom = sym_view(c, "_c")
    w = _witness_row(o, c, v2)
    less = v2._replace(
        n=v2.n - 1,
        num_prefillable=v2.num_prefillable - z3.If(v2.num_prefillable >= 1, 1, 0),
        num_force=v2.num_force - z3.If(v2.num_force >= 1, 1, 0),
    )
    split = z3.And(*view_domain(less, c), _same(merge(less, w, True, folds), v2))
    queries.append(("counted row, complete", v2dom + [v2.n >= 2], split))
    idle = local_row(o, c, PassInput(z3.BoolVal(False), z3.RealVal(0), 0, 0, 0, 0), Local(z3.BoolVal(False), z3.IntVal(0), z3.RealVal(0), z3.BoolVal(False), z3.RealVal(0), 0))
    queries.append(("other row, complete", vdom, _same(merge(v, idle, False, folds), v)))
    for name, assumptions, claim in queries:
        res = _solve(c.domain() + assumptions + o.side + [z3.Not(claim)], timeout_ms)
        if res.status != PROVED:
            return Check(res.status, label, f"{name} fails", res.model, why=res.why)
    kinds = ", ".join(f"{k}={f.kind}" + ("" if f.scope == "counted" else " over all rows") for k, f in folds.items())
    return Check(PROVED, label, f"any number of DP groups and ranks per group (folds: {kinds})")
