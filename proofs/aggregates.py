"""aggregate-view: the aggregate view is exactly what the rows give.

The single-step proofs read an abstract view (``model.sym_view``) over any
number of ranks. ``view_induction`` proves, for every number of DP groups and
every number of ranks per group, that the views of the rows are exactly the
abstract view's domain. As a cross-check, this module also builds real rows
with the spec's ``local_row`` for concrete layouts (up to 3 DP groups x 3 ranks
per group, DP attention on and off), aggregates them with the spec's
``gathered_view``, and proves the result is
(a) inside the abstract view's domain and (b) equal to an independent
definition of each aggregate over the rows; and (c) that every view in the
domain is the view of some rows (a witness built from it), so the abstract
domain is neither weaker nor stronger than the rows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import z3

from ..spec.inputs import PassInput
from ..spec.invariants import PROVED
from ..spec.view import Local, gathered_view, local_row
from .model import Family, count_domain, sym_config, sym_view, view_domain
from .properties import Check, _solve
from .reference_z3 import reference_local_force, reference_timeout_flag
from .view_induction import check_view_induction
from .z3ops import Z3Ops

MAX_DP = 3
GROUP_SIZES = (1, 2, 3)  # attn_cp_size x attn_tp_size


def layouts() -> list[tuple[bool, int, int]]:
    """(enable_dp_attention, dp_dim, ranks per DP group) for every concrete layout checked."""
    out = [(True, dp, g) for g in GROUP_SIZES for dp in range(1, MAX_DP + 1)]
    out += [(False, 1, g) for g in GROUP_SIZES]
    return out


def layout_config(fam: Family, dp_attn: bool, dp_dim: int, group: int) -> Any:
    """The family's symbolic configuration, for one concrete rank layout (the group as attn_tp ranks)."""
    c = sym_config(fam)
    return replace(c, enable_dp_attention=dp_attn, dp_size=dp_dim if dp_attn else c.dp_size, attn_tp_size=group)


def _is_max(m: Any, xs: list) -> Any:
    return z3.And(z3.And(*[m >= x for x in xs]), z3.Or(*[m == x for x in xs]))


def check_layout(fam: Family, dp_attn: bool, dp_dim: int, tp: int, timeout_ms: int) -> Check:
    o = Z3Ops()
    c = layout_config(fam, dp_attn, dp_dim, tp)
    world = dp_dim * tp
    dom = c.domain()
    rows, ranks = [], []
    for r in range(world):
        pre, tu = z3.Bool(f"pre{r}"), z3.Real(f"tu{r}")
        rb, pb, wq, mrr = (z3.Int(f"{f}{r}") for f in ("rb", "pb", "wq", "mrr"))
        waiting, now, start = z3.Bool(f"waiting{r}"), z3.Real(f"now{r}"), z3.Real(f"start{r}")
        dom += [tu >= 0] + [count_domain(x) for x in (rb, pb, wq, mrr)]
        inp = PassInput(pre, tu, rb, pb, mrr, wq)
        local = Local(waiting, z3.IntVal(0), start, z3.BoolVal(False), now, mrr)
        rows.append(local_row(o, c, inp, local) + [0, 0])
        ranks.append((pre, tu, rb, pb, wq, mrr, waiting, now, start))
    view = gathered_view(o, c, rows)
    counted = [ranks[g * tp] for g in range(dp_dim)]
    expected = z3.And(
        view.n == dp_dim,
        view.num_prefillable == z3.Sum([z3.If(k[0], 1, 0) for k in counted]),
        view.num_force == z3.Sum([z3.If(reference_local_force(c, k[0], k[1]), 1, 0) for k in counted]),
        _is_max(view.running_batch, [k[2] for k in counted]),
        _is_max(view.max_prefill_bs, [k[3] for k in counted]),
        _is_max(view.waiting_queue_len, [k[4] for k in counted]),
        view.timeout_any == z3.Or(*[reference_timeout_flag(c, k[6], k[7], k[8]) for k in counted]),
        _is_max(view.mrr_max, [k[5] for k in ranks]),
    )
    # (a) the abstract domain the single-step proofs assume, instantiated on this view.
    assumed = z3.And(*view_domain(view._replace(n=z3.IntVal(view.n)), c))
    status, model, why = _solve(dom + o.side + [z3.Not(z3.And(expected, assumed))], timeout_ms)
    label = f"{'dp-attn' if dp_attn else 'tp-only'} dp={dp_dim} tp={tp}"
    return Check(status, label, model=model, why=why)


def check_layout_complete(fam: Family, dp_attn: bool, dp_dim: int, tp: int, timeout_ms: int) -> Check:
    """(c) every view in the abstract domain is the view of some rows of this layout.

    The rows are a witness built from the abstract view: counted rank g is
    prefillable iff g < num_prefillable and below the watermark iff
    g < num_force; every rank reports the maxima; every rank's wait has
    expired iff timeout_any (only the counted ranks' flags are read). The spec's ``local_row`` and ``gathered_view``
    then give back exactly the abstract view.
    """
    o = Z3Ops()
    c = layout_config(fam, dp_attn, dp_dim, tp)
    abstract = sym_view(c, "_abs")[0]._replace(n=z3.IntVal(dp_dim))
    adom = view_domain(abstract, c)
    rows = []
    for r in range(dp_dim * tp):
        g = r // tp if r % tp == 0 else dp_dim  # non-counted ranks: neither prefillable nor forcing
        pre = z3.And(z3.BoolVal(g < dp_dim), g < abstract.num_prefillable)
        tu = z3.If(g < abstract.num_force, z3.RealVal(0), c.watermark)
        now = z3.If(abstract.timeout_any, c.max_delay_ms / 1000, 0)
        inp = PassInput(pre, tu, abstract.running_batch, abstract.max_prefill_bs, abstract.mrr_max, abstract.waiting_queue_len)
        local = Local(abstract.timeout_any, z3.IntVal(1), z3.RealVal(0), z3.BoolVal(False), now, abstract.mrr_max)
        rows.append(local_row(o, c, inp, local) + [0, 0])
    view = gathered_view(o, c, rows)
    same = z3.And(*[a == b for a, b in zip(view, abstract)])
    status, model, why = _solve(c.domain() + adom + o.side + [z3.Not(same)], timeout_ms)
    return Check(status, f"complete {'dp-attn' if dp_attn else 'tp-only'} dp={dp_dim} tp={tp}", model=model, why=why)


def check_aggregate_view(fams: list[Family], timeout_ms: int) -> Check:
    """The induction (every layout) for each family, then the concrete layouts as a cross-check."""
    for f in fams:
        res = check_view_induction(f, timeout_ms)
        if res.status != PROVED:
            return res
    fam = fams[0]
    for dp_attn, dp_dim, tp in layouts():
        for check in (check_layout, check_layout_complete):
            res = check(fam, dp_attn, dp_dim, tp, timeout_ms)
            if res.status != PROVED:
                return res
    return Check(
        PROVED,
        fam.label(),
        f"by induction: any number of DP groups and ranks per group; cross-checked on {len(layouts())} "
        f"layouts up to {MAX_DP * max(GROUP_SIZES)} ranks, both directions",
    )
