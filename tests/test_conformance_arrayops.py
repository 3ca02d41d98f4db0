"""check-log's operator layer on numpy columns (``conformance.arrayops.ArrayOps``) against the spec's own (``PyOps``)."""

from __future__ import annotations

import warnings

import numpy as np

from prefill_delayer.conformance.arrayops import AO
from prefill_delayer.spec.ops import PY, Ops


def test_every_operator_of_the_spec_is_on_the_columns() -> None:
    """A guard written with any operator of ``spec.ops.Ops`` can be checked on a log: none is missing on columns."""
    wanted = {name for name in vars(Ops) if not name.startswith("_")} | set(Ops.__annotations__)
    assert wanted, "no operator read from spec.ops.Ops"
    assert sorted(name for name in wanted if not hasattr(AO, name)) == []


def test_ratio_at_least_on_columns_is_pyops_on_each_pass() -> None:
    """Entry by entry the same IEEE quotient as ``PyOps``, on the boundaries where rounding decides it, whichever
    argument is a column; a pass whose ``den`` is 0 (one the guard is not read on) gives no warning."""
    num = np.array([1, 2, 29, 7, 0, 5, 3], dtype=np.int64)
    den = np.array([3, 3, 100, 8, 4, 0, 4], dtype=np.int64)
    ratios = (1 / 3, 2 / 3, 0.29, 0.875, 0.6666666666666667, 0.3)
    read = den > 0
    for ratio in ratios:
        want = [PY.ratio_at_least(int(a), int(b), ratio) for a, b in zip(num[read], den[read])]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            columns = AO.ratio_at_least(num, den, ratio)
            num_column = AO.ratio_at_least(num[read], 4, ratio)
            den_column = AO.ratio_at_least(3, den[read], ratio)
        assert columns[read].tolist() == want
        assert num_column.tolist() == [PY.ratio_at_least(int(a), 4, ratio) for a in num[read]]
        assert den_column.tolist() == [PY.ratio_at_least(3, int(b), ratio) for b in den[read]]
        assert AO.ratio_at_least(2, 3, ratio) is PY.ratio_at_least(2, 3, ratio)
    assert {PY.ratio_at_least(2, 3, r) for r in ratios} == {True, False}  # the cases hold both answers
