"""A pure step over a policy's table: for tests, check-log, simulation and the proofs' replay.

``Step`` binds one configuration to its policy and table; ``negotiate`` selects
the one row whose guards hold (the table is proved to partition) and applies it
with the policy's ``decide``. No machine is involved.
"""

from __future__ import annotations

from typing import Any, Optional

from ..spec.ops import PY
from ..spec.table import Table, Transition, holds


class Step:
    """One configuration's policy and table, stepped on Python values."""

    def __init__(self, config: Any, table: Optional[Table] = None) -> None:
        self.config = config
        self.policy = config.policy
        self.table = table if table is not None else self.policy.build_table(config.profile)
        self._sources = frozenset(self.table.sources)

    @property
    def init(self) -> Any:
        return self.policy.init

    def view(self, rows: Any) -> Any:
        """The view of the policy rows the collective handed this rank: every rank's, or the one reduced row."""
        return self.policy.view_of(PY, self.config, rows)

    def local(self, state: Any, now: Any, inp: Any) -> Any:
        """The guards' view of ``state`` at clock reading ``now`` with this rank's inputs (needs a finalized state)."""
        if state.control not in self._sources:
            raise ValueError(f"negotiate from {state.control!r}: finalize the previous pass first")
        return self.policy.local_for(PY, state, now, inp)

    def select(self, state: Any, view: Any, local: Any) -> Transition:
        """The one ``negotiate`` row whose guards hold."""
        memo: dict = {}
        c = self.config
        for t in self.table.by_source[state.control]:
            if holds(t, PY, c, view, local, memo):
                return t
        raise AssertionError(f"no negotiate transition from {state.control!r} holds for {view}, {local}")

    def decide(self, t: Transition, view: Any, local: Any, o: Any = PY) -> Any:
        """Apply the fired row: the pass's decision and the rank's next state (``o``: the operator layer)."""
        return self.policy.decide(o, self.config, t, view, local)

    def negotiate(self, state: Any, view: Any, local: Any) -> Any:
        """One ``negotiate``: pure."""
        return self.decide(self.select(state, view, local), view, local)

    def finalize(self, state: Any) -> Any:
        """The ``finalize`` event: the table's finalize row from ``state``'s control, if any."""
        dest = self.table.finalized(state.control)
        return state if dest == state.control else state._replace(control=dest)
