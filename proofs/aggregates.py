"""aggregate-view: the aggregate view is exactly what the rows give, for any policy.

The single-step proofs read an abstract view (``model.sym_view``) over any
number of ranks. ``view_induction`` proves, for every number of DP groups and
every number of ranks per group, that the views of the rows are exactly the
abstract view's domain. As a cross-check, this module also builds real rows
with the policy's ``local_row`` for concrete layouts (up to 3 DP groups x 3 ranks
per group, DP attention on and off), folds them with ``gathered_view``, and
proves the result is (a) inside the abstract view's domain and (b) equal to an
independent definition of each aggregate over the rows the policy's
``reference_row`` gives; and (c) that every view in the domain is the view of
some rows (the policy's ``layout_witness``), so the abstract domain is neither
weaker nor stronger than the rows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import z3

from ..spec.policy import ALL, PROVED
from .model import concrete_count, input_domain, sym_input, sym_state, sym_view
from .properties import Check, solve
from .view_induction import check_view_induction
from .z3ops import Z3Ops

MAX_DP = 3
GROUP_SIZES = (1, 2, 3)  # attn_cp_size x attn_tp_size


def layouts() -> list[tuple[bool, int, int]]:
    """(enable_dp_attention, dp_dim, ranks per DP group) for every concrete layout checked."""
    out = [(True, dp, g) for g in GROUP_SIZES for dp in range(1, MAX_DP + 1)]
    out += [(False, 1, g) for g in GROUP_SIZES]
    return out


def layout_config(policy: Any, o: Z3Ops, fam: Any, dp_attn: bool, dp_dim: int, group: int) -> Any:
    """The family's symbolic configuration, for one concrete rank layout (the group as attn_tp ranks)."""
    c = policy.proof.sym_config(o, fam)
    return replace(c, enable_dp_attention=dp_attn, dp_size=dp_dim if dp_attn else c.dp_size, attn_tp_size=group)


def _is_max(m: Any, xs: list) -> Any:
    return z3.And(z3.And(*[m >= x for x in xs]), z3.Or(*[m == x for x in xs]))


def check_layout(policy: Any, fam: Any, dp_attn: bool, dp_dim: int, tp: int, timeout_ms: int) -> Check:
    o = Z3Ops()
    c = layout_config(policy, o, fam, dp_attn, dp_dim, tp)
    world = dp_dim * tp
    dom = policy.proof.config_domain(o, c)
    rows, refs = [], []
    for r in range(world):
        st = sym_state(policy, f"{r}")
        now = z3.Real(f"now{r}")
        inp = sym_input(policy, f"{r}", policy.input_names)
        local = policy.local_for(o, st, now, inp)
        dom += input_domain(policy, inp) + policy.local_domain(o, c, st, now, inp)
        rows.append(policy.local_row(o, c, inp, local))
        refs.append(policy.proof.reference_row(o, c, inp, local))
    view = policy.gathered_view(o, c, rows)
    counted = [refs[g * tp] for g in range(dp_dim)]
    index = {name: i for i, name in enumerate(policy.row_names)}
    expected = []
    for a in policy.view:
        value = getattr(view, a.name)
        src = refs if a.over == ALL else counted
        if a.kind == "count":
            expected.append(value == dp_dim)
        elif a.kind == "sum":
            expected.append(value == z3.Sum([r[index[a.field]] for r in src]))
        elif a.kind == "max":
            expected.append(_is_max(value, [r[index[a.field]] for r in src]))
        else:
            expected.append(value == z3.Or(*[r[index[a.field]] > 0 for r in src]))
    # (a) the abstract domain the single-step proofs assume, instantiated on this view.
    assumed = z3.And(*policy.view_domain(o, c, concrete_count(policy, view)))
    status, model, why = solve(dom + o.side + [z3.Not(z3.And(*expected, assumed))], timeout_ms)
    label = f"{'dp-attn' if dp_attn else 'tp-only'} dp={dp_dim} tp={tp}"
    return Check(status, label, model=model, why=why)


def check_layout_complete(policy: Any, fam: Any, dp_attn: bool, dp_dim: int, tp: int, timeout_ms: int) -> Check:
    """(c) every view in the abstract domain is the view of some rows of this layout (the policy's witness)."""
    o = Z3Ops()
    c = layout_config(policy, o, fam, dp_attn, dp_dim, tp)
    abstract = sym_view(policy, o, c, "_abs")[0]._replace(**{policy.count_field: z3.IntVal(dp_dim)})
    adom = policy.view_domain(o, c, abstract)
    rows = []
    for r in range(dp_dim * tp):
        inp, local = policy.proof.layout_witness(o, c, abstract, r // tp, r % tp == 0, dp_dim)
        rows.append(policy.local_row(o, c, inp, local))
    view = policy.gathered_view(o, c, rows)
    same = z3.And(*[a == b for a, b in zip(view, abstract)])
    status, model, why = solve(policy.proof.config_domain(o, c) + adom + o.side + [z3.Not(same)], timeout_ms)
    return Check(status, f"complete {'dp-attn' if dp_attn else 'tp-only'} dp={dp_dim} tp={tp}", model=model, why=why)


def check_aggregate_view(policy: Any, fams: list, timeout_ms: int) -> Check:
    """The induction (every layout) for each family, then the concrete layouts as a cross-check."""
    for f in fams:
        res = check_view_induction(policy, f, timeout_ms)
        if res.status != PROVED:
            return res
    fam = fams[0]
    if policy.proof.reference_row is not None:
        for dp_attn, dp_dim, tp in layouts():
            for check in (check_layout, check_layout_complete):
                res = check(policy, fam, dp_attn, dp_dim, tp, timeout_ms)
                if res.status != PROVED:
                    return res
    return Check(
        PROVED,
        fam.label(),
        f"by induction: any number of DP groups and ranks per group; cross-checked on {len(layouts())} "
        f"layouts up to {MAX_DP * max(GROUP_SIZES)} ranks, both directions",
    )
