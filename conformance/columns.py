"""One rank's logged passes as columns, and the policy evaluated on them: the column path of check-log.

``RankCols`` holds a chunk of one rank's pass lines, one numpy column per
logged value (a format-2 line is numbers only, so a chunk parses into one float
matrix and splits into columns; a format-1 chunk is built from its parsed
records). ``Model`` evaluates the policy's *own* functions on those columns
through ``ArrayOps``: the readings and own row into the inputs
(``LogSchema.inputs_from_row``), ``local_for``, the view (``gathered_view`` of
the rows, or the view the line logged), every table row's guards, ``decide``
for each row that fires, ``local_row``, the pass rules and the counts of the run
monitors. Nothing is restated: a guard mutated in the spec changes what is
computed here, as it changes the ``transitions`` machine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from ..spec.fields import BOOL, CONTROL, COUNT, OPT_SECONDS, REASON, SECONDS, TEXT, USAGE
from ..spec.monitors import GroupRunBound, PassRule, RunBound, RunReport
from ..spec.ops import PY
from ..spec.schema import pass_columns
from ..spec.table import NEGOTIATE
from .arrayops import AO, _arr, _none_nan, broadcast, same

_DTYPE = {BOOL: np.bool_, COUNT: np.int64, USAGE: np.float64, SECONDS: np.float64, OPT_SECONDS: np.float64}
MAX_EXACT = 2.0**53  # integers a float64 holds exactly


def _str_dtype(values: Sequence[str]) -> Any:
    return np.dtype(f"<U{max([len(v) for v in values] + [1])}")


@dataclass
class RankCols:
    """A chunk of one rank's pass lines as columns (``n`` passes, in pass order)."""

    number: np.ndarray
    now: np.ndarray
    readings: dict[str, np.ndarray]
    own: np.ndarray  # (policy row fields, n): the rank's own row
    view: Optional[tuple]  # the view it logged (format 2), else None: folded from ``rows``
    before: Any  # State of columns
    decision: Any  # Decision of columns; ``next_state`` the state after
    digest: np.ndarray  # of the gathered rows: logged (format 2) or computed from them (format 1)
    rows: Optional[np.ndarray]  # (n, world * row_len): every rank's row, when the line has them
    fi: np.ndarray  # file index of each line
    line: np.ndarray  # line number in its file
    recs: Optional[list] = None  # format 1: the parsed records themselves
    fails: list = field(default_factory=list)
    sets: list = field(default_factory=list)
    stamp: Optional[np.ndarray] = None  # the pass number of this rank's row's stamp (format 2 logs it; format 1 rows hold it)

    def __len__(self) -> int:
        return len(self.number)


class Model:
    """One configuration's policy over columns: the state, decision and view classes built from columns, the table."""

    def __init__(self, config: Any, table: Any) -> None:
        self.c = config
        self.policy = p = config.policy
        self.table = table
        self.rows = tuple(t for t in table if t.event == NEGOTIATE)
        self.state_kinds = [(n, k) for n, k in zip(p.state_names, [CONTROL] + [f.kind for f in p.state_fields])]
        self.decision_kinds = [(f.name, f.kind) for f in p.decision_fields]
        self.controls = np.array(p.states, dtype=_str_dtype(p.states))
        self.reasons = np.array(p.reasons, dtype=_str_dtype(p.reasons))
        self._sorted_reasons = np.sort(self.reasons)
        self.texts = {f.name: np.array(f.values, dtype=_str_dtype(f.values)) for f in p.decision_fields if f.values}
        self.sources = np.array(table.sources, dtype=self.controls.dtype)
        finalized = [table.finalized(s) for s in p.states]
        self.finalize_of = np.array(finalized, dtype=self.controls.dtype)
        self.rules = [inv.check for inv in p.invariants if isinstance(inv.check, PassRule)]
        self.runs = [inv.check for inv in p.invariants if isinstance(inv.check, RunBound)]
        self.report = next((inv.check for inv in p.invariants if isinstance(inv.check, RunReport)), None)
        self.groups = [inv.check for inv in p.invariants if isinstance(inv.check, GroupRunBound)]
        self.columns = pass_columns(p)
        by_name = {f.name: f for f in p.inputs}
        self.reading_kinds = [(key, by_name[name].kind) for name, key in p.log.readings]

    # ----- values as columns ----------------------------------------------------------

    def code_of(self, kind: str, name: str, values: np.ndarray) -> np.ndarray:
        """Strings of a CONTROL / REASON / enumerated TEXT column from its indices."""
        table = self.controls if kind == CONTROL else self.reasons if kind == REASON else self.texts[name]
        return table[values.astype(np.int64)]

    def reason_codes(self, reasons: np.ndarray) -> tuple[list[str], np.ndarray]:
        """(names, each entry's index into them) of a column of output reasons: the policy's reasons, sorted, when
        they hold every entry (a search, not a sort of the column); else the column's own distinct values."""
        names = self._sorted_reasons
        codes = np.searchsorted(names, reasons).clip(0, max(0, len(names) - 1))
        if len(names) and (names[codes] == reasons).all():
            return names.tolist(), codes.astype(np.int16)
        distinct, codes = np.unique(reasons, return_inverse=True)
        return distinct.tolist(), codes.astype(np.int16)

    def typed(self, kind: str, col: np.ndarray, name: str = "") -> np.ndarray:
        """A format-2 column (float64) as its kind's column: bools, ints, floats (an unset optional clock: NaN), names."""
        if kind in (CONTROL, REASON) or (kind == TEXT and name in self.texts):
            return self.code_of(kind, name, col)
        if kind == BOOL:
            return col != 0
        if kind == COUNT:
            return col.astype(np.int64)
        if kind == OPT_SECONDS:
            return np.where((col == 0) & np.signbit(col), np.nan, col)
        return col

    def state(self, cols: Sequence[np.ndarray]) -> Any:
        return self.policy.state_cls(*cols)

    def decision(self, after: Any, cols: Sequence[np.ndarray]) -> Any:
        return self.policy.decision_cls(after, *cols)

    def from_values(self, kind: str, values: Sequence[Any], name: str = "") -> np.ndarray:
        """A column from Python values (format 1)."""
        if kind in (CONTROL, REASON, TEXT):
            return np.array(values, dtype=object).astype(str)
        if kind == OPT_SECONDS:
            return np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        return np.array(values, dtype=_DTYPE[kind])

    # ----- the spec on columns --------------------------------------------------------

    def view_of_rows(self, rows: np.ndarray) -> Any:
        """The view of gathered rows ``(n, world * row_len)``, folded by the policy's ``gathered_view``."""
        from ..runtime.envelope import Envelope

        env = Envelope(self.c)
        per_rank = rows.reshape(len(rows), self.c.world_size, env.row_len).transpose(1, 2, 0)[:, : env.n_policy]
        return self.policy.gathered_view(AO, self.c, per_rank)

    def inputs(self, cols: RankCols) -> Any:
        return self.policy.log.inputs_from_row(AO, list(cols.own), cols.readings)

    def evaluate(self, before: Any, view: Any, local: Any, n: int) -> tuple[np.ndarray, Any]:
        """(index of the fired table row per pass, -1 none; the decision of each pass): the table on columns.

        Each row that fires is decided on its own passes only (``decide`` of every fired row on every pass cost
        a third of the check)."""
        c = self.c
        memo: dict[str, Any] = {}  # a guard's value (a column or a constant), by the guard's name
        fired = np.full(n, -1, dtype=np.int64)
        at_source: dict[str, np.ndarray] = {}
        for ti, t in enumerate(self.rows):
            if t.source not in at_source:
                at_source[t.source] = before.control == t.source
            terms: list[Any] = [at_source[t.source]]
            for lit, fn in zip(t.lits, t.fns):
                value = memo.get(lit.guard)
                if value is None:
                    value = memo[lit.guard] = fn(AO, c, view, local)
                terms.append(value if lit.positive else AO.Not(value))
            holds = broadcast(AO.And(*terms), n, np.bool_)
            fired = np.where(holds & (fired < 0), ti, fired)
        passes_of = {int(ti): np.flatnonzero(fired == ti) for ti in np.unique(fired) if ti >= 0}
        decided = {ti: self.policy.decide(AO, c, self.rows[ti], take(view, idx, n), take(local, idx, n))
                   for ti, idx in passes_of.items()}

        def pick(get: Any, kind: str, name: str) -> np.ndarray:
            """Each pass's value from the row it took (a pass that took none: an empty string, or 0)."""
            dtype = self._dtype(kind, name)
            out = np.full(n, "" if dtype.kind == "U" else 0, dtype=dtype)
            for ti, d in decided.items():
                out[passes_of[ti]] = _none_nan(get(d))
            return out

        after = self.state([pick(lambda d, i=i: d.next_state[i], k, nm) for i, (nm, k) in enumerate(self.state_kinds)])
        outs = [pick(lambda d, i=i: d[i + 1], k, nm) for i, (nm, k) in enumerate(self.decision_kinds)]
        return fired, self.decision(after, outs)

    def _dtype(self, kind: str, name: str) -> Any:
        if kind == CONTROL:
            return self.controls.dtype
        if kind == REASON:
            return self.reasons.dtype
        if kind == TEXT:
            return self.texts[name].dtype if name in self.texts else np.dtype("<U64")
        return np.dtype(_DTYPE[kind])

    def check(self, cols: RankCols, place: Optional[int], view: Any) -> dict[str, np.ndarray]:
        """What the column path flags on each pass: the decision, the next state, the own row, no transition, each rule."""
        n, c, p = len(cols), self.c, self.policy
        before, dec = cols.before, cols.decision
        startable = np.isin(before.control, self.sources)
        inp = self.inputs(cols)
        local = p.local_for(AO, before, cols.now, inp)
        fired, want = self.evaluate(before, view, local, n)
        decision_bad = np.zeros(n, dtype=bool)
        for (name, _), got, w in zip(self.decision_kinds, dec[1:], want[1:]):
            decision_bad |= ~same(got, w)
        next_bad = np.zeros(n, dtype=bool)
        for got, w in zip(dec.next_state, want.next_state):
            next_bad |= ~same(got, w)
        out = {"decision": decision_bad, "next-state": next_bad & ~decision_bad, "no-transition": (fired < 0) | ~startable}
        row_bad = np.zeros(n, dtype=bool)
        if place is not None:
            for got, w in zip(cols.own, p.local_row(AO, c, inp, local)):
                row_bad |= ~same(got, broadcast(w, n))
        out["row"] = row_bad
        for rule in self.rules:
            out[rule.id] = broadcast(rule.violated(AO, c, view, dec), n, np.bool_)
        return out

    def counts(self, view: Any, dec: Any, n: int) -> dict[str, np.ndarray]:
        """Each run monitor's ``counts`` on every pass, and each group monitor's (which read the decision only)."""
        out = {f"run:{m.id}": broadcast(m.counts(AO, self.c, view, dec), n, np.bool_) for m in self.runs}
        out.update({f"group:{m.id}": broadcast(m.counts(AO, self.c, None, dec), n, np.bool_) for m in self.groups})
        mixed = self.policy.log.mixed
        out["mixed"] = broadcast(mixed(view, dec), n, np.bool_) if mixed is not None else np.zeros(n, dtype=bool)
        return out

    def limits(self) -> dict[str, int]:
        return {m.id: int(m.limit(PY, self.c)) for m in self.runs} | {m.id: int(m.window(PY, self.c)) for m in self.groups}


def take(values: Any, idx: np.ndarray, n: int) -> Any:
    """A tuple of columns (a view, a ``Local``) cut to the passes ``idx``: a column of ``n`` passes (passes are the
    last axis) is indexed, a constant kept."""
    return type(values)(*[v[..., idx] if _arr(v) and v.ndim and v.shape[-1] == n else v for v in values])


def run_lengths(counts: np.ndarray, starts: np.ndarray, carry: int) -> np.ndarray:
    """``run[i] = run[i - 1] + 1 if counts[i] else 0``, restarted from 0 before every ``starts[i]`` (a gap), ``run[-1] = carry``.

    Vectorised: the run at ``i`` is ``i`` minus the last position at or before it
    that ended a run (a pass that does not count; the pass before a start).
    """
    n = len(counts)
    idx = np.arange(n)
    anchor = np.where(~counts, idx, np.where(starts, idx - 1, -1 - carry))
    anchor = np.maximum.accumulate(anchor) if n else anchor
    return np.where(counts, idx - anchor, 0)
