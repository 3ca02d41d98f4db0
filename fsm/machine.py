"""The ``transitions`` state machine, built from a policy's table.

Conditions are the policy's guard functions (evaluated with ``PyOps``), never
copies; effects and decisions come from the policy's ``decide``.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Optional

from transitions import Machine, Transition as _LibTransition

from ..spec.ops import PY
from ..spec.table import FINALIZE, NEGOTIATE, Table, Transition, holds


def add_table(machine: Machine, c: Any, table: tuple[Transition, ...], on_fire: Any = None) -> None:
    """Add every row of ``table`` to ``machine``; conditions evaluate the row's guards."""
    for t in table:
        kwargs: dict[str, Any] = {}
        if t.lits:
            cond = partial(_holds, t, c)
            cond.__name__ = t.guard_text()  # type: ignore[attr-defined]  # shown on diagram edges
            kwargs["conditions"] = [cond]
        if on_fire is not None and t.event == NEGOTIATE:
            kwargs["after"] = [partial(on_fire, t)]
        machine.add_transition(t.event, t.source, t.dest, **kwargs)


def _holds(t: Transition, c: Any, view: Any, local: Any, memo: Optional[dict] = None) -> bool:
    return holds(t, PY, c, view, local, memo)


class _FastTransition(_LibTransition):
    """``transitions``' Transition with a fast path for what ``DelayerMachine`` registers.

    The delayer's machine has only conditions and ``after`` callbacks. The
    library's ``execute`` also walks prepare/before callbacks, state exit/enter
    callbacks and machine-level hooks (all empty here) and logs at every step,
    which costs about as much per pass as the guards themselves. This runs the
    library's steps in the library's order (conditions, state change, after),
    minus the logging and the walks over empty callback lists; prepare/before
    callbacks or machine-level state-change hooks send it to the library's
    ``execute``, state callbacks to the library's ``_change_state``. So the
    behaviour is the library's either way; only the cost differs.
    """

    def execute(self, event_data: Any) -> bool:
        machine = event_data.machine
        if self.prepare or self.before or machine.before_state_change or machine.after_state_change:
            return super().execute(event_data)
        for cond in self.conditions:
            if not cond.check(event_data):
                return False
        if self.dest:
            states = machine.states
            src, dst = states[self.source], states[self.dest]
            if src.on_exit or dst.on_enter or getattr(dst, "final", False):
                self._change_state(event_data)  # the library's: exit/enter callbacks, on_final
            else:
                machine.set_state(self.dest, event_data.model)
                event_data.update(getattr(event_data.model, machine.model_attribute))
        machine.callbacks(self.after, event_data)
        return True


class _Machine(Machine):
    transition_cls = _FastTransition


class _Model:
    """The object ``transitions`` drives; it only carries the control state."""

    state: str


class DelayerMachine:
    """One rank's policy as a ``transitions`` machine plus its extended variables.

    Built once per delayer; ``negotiate`` fires the machine's event with the
    pass's view, and the transition that fires decides the outcome.
    """

    def __init__(self, config: Any, table: Optional[Table] = None) -> None:
        self.config = config
        self.policy = config.policy
        self.table = table if table is not None else self.policy.build_table(config.profile)
        self._model = _Model()
        self._machine = _Machine(
            model=self._model,
            states=list(self.policy.states),
            initial=self.policy.init.control,
            auto_transitions=False,
            send_event=False,
        )
        add_table(self._machine, config, self.table, on_fire=self._fired)
        self._finalizing = frozenset(t.source for t in self.table if t.event == FINALIZE)
        self._vars = self.policy.init
        self._decision: Any = None

    @property
    def state(self) -> Any:
        return self._vars._replace(control=self._model.state)

    def restore(self, state: Any) -> None:
        """Put the machine into ``state``: how the runtime rolls back a failed pass (which may
        have finalized the previous one first) and sets the seed's ``skip_first_delayer``."""
        self._machine.set_state(state.control, model=self._model)
        self._vars = state

    def _fired(self, t: Transition, view: Any, local: Any, memo: Optional[dict] = None) -> None:
        self._decision = self.policy.decide(PY, self.config, t, view, local)

    def negotiate(self, view: Any, local: Any) -> Any:
        self._decision = None
        if not getattr(self._model, NEGOTIATE)(view, local, {}) or self._decision is None:
            raise AssertionError(f"no negotiate transition from {self._model.state!r} holds for {view}, {local}")
        self._vars = self._decision.next_state
        return self._decision

    def finalize(self) -> Any:
        """Fire ``finalize`` when the table has a row for it from the current state (else it is a no-op)."""
        if self._model.state in self._finalizing:
            getattr(self._model, FINALIZE)()
        self._vars = self._vars._replace(control=self._model.state)
        return self.state
