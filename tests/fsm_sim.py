"""In-process simulation of one pass on every rank of the gather, through the FSM.

Each rank builds its row with ``spec.view.local_row`` (plus the envelope the
runtime appends: input error, fingerprint, pass stamp), every rank sees the same gathered
rows, and each rank's delayer negotiates on the view and its own local
reading. Used by the conformance, stateful and edge-case tests; no torch involved.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from prefill_delayer.fsm import DelayerMachine
from delayer_spec import Decision, State, finalize, local_for, step
from prefill_delayer.fsm.compiled import CompiledStep
from prefill_delayer.runtime.envelope import Envelope
from delayer_spec import ROW_FIELDS, PassInput, View, gathered_view, local_row
from prefill_delayer.spec.config import Config
from delayer_spec import validate_pass_input
from prefill_delayer.spec.ops import PY
from delayer_spec import build_table
from prefill_delayer.spec.table import Table
from delayer_spec import Local

from reference import RankInput, RefState, reference_pass


@lru_cache(maxsize=None)
def _tail(config: Config) -> tuple[int, ...]:
    """The runtime's envelope of a valid row of ``config`` on pass 1: no error, the fingerprint, the pass stamp."""
    env = Envelope(config)
    return (*env.tail, env.stamp(1))


def build_rows(config: Config, inputs: Sequence[PassInput], locals_: Sequence[Local]) -> list[list]:
    tail = list(_tail(config))
    rows = []
    for inp, loc in zip(inputs, locals_):
        validate_pass_input(inp)
        row = local_row(PY, config, inp, loc) + tail
        assert len(row) == len(ROW_FIELDS)
        rows.append(row)
    return rows


def machines_pass(
    config: Config, machines: Sequence[DelayerMachine], inputs: Sequence[PassInput], nows: Sequence[float]
) -> tuple[View, list[Local], list[Decision]]:
    """One negotiate on every rank's ``DelayerMachine`` (not finalized)."""
    assert len(machines) == len(inputs) == len(nows) == config.world_size
    locals_ = [local_for(m.state, now, inp.max_running_requests) for m, inp, now in zip(machines, inputs, nows)]
    view = gathered_view(PY, config, build_rows(config, inputs, locals_))
    return view, locals_, [m.negotiate(view, loc) for m, loc in zip(machines, locals_)]


def states_pass(
    config: Config, table: Table, states: Sequence[State], inputs: Sequence[PassInput], nows: Sequence[float]
) -> tuple[View, list[Local], list[Decision]]:
    """The same pass through the pure ``step`` function, from finalized states."""
    assert len(states) == len(inputs) == len(nows) == config.world_size
    locals_ = [local_for(s, now, inp.max_running_requests) for s, inp, now in zip(states, inputs, nows)]
    view = gathered_view(PY, config, build_rows(config, inputs, locals_))
    return view, locals_, [step(config, table, s, view, loc) for s, loc in zip(states, locals_)]


@lru_cache(maxsize=None)
def compiled_for(config: Config) -> CompiledStep:
    """The runtime's compiled step for ``config``, its rows ending as the runtime's do."""
    return CompiledStep(config, row_tail=_tail(config))


def compiled_pass(
    config: Config, states: Sequence[State], inputs: Sequence[PassInput], nows: Sequence[float]
) -> tuple[list[list[int]], list[Decision]]:
    """The same pass through ``fsm.compiled``: every rank's row, then every rank's decision."""
    compiled = compiled_for(config)
    rows = [compiled.row(s, now, *inp) for s, inp, now in zip(states, inputs, nows)]
    flat = [x for r in rows for x in r]
    return rows, [compiled.negotiate(s, now, inp.max_running_requests, flat) for s, inp, now in zip(states, inputs, nows)]


def assert_same_decisions(got: Sequence[Decision], want: Sequence[Decision]) -> None:
    """Equal field by field *and* in type (``repr`` tells ``True`` from ``1`` and ``0`` from ``0.0``)."""
    assert [repr(d) for d in got] == [repr(d) for d in want]


class Cluster:
    """Every rank of one gather, three ways: ``DelayerMachine``, pure ``step`` and the reference.

    ``run`` plays one pass (negotiate then finalize on every rank), asserts the
    three agree on every field and the next state, and returns the FSM's decisions.
    """

    def __init__(self, config: Config) -> None:
        self.config = config
        self.table = build_table(config.profile)
        self.machines = [DelayerMachine(config) for _ in range(config.world_size)]
        self.states = [State() for _ in range(config.world_size)]
        self.refs = [RefState() for _ in range(config.world_size)]

    def run(self, inputs: Sequence[PassInput], nows: Sequence[float]) -> list[Decision]:
        _, _, by_machine = machines_pass(self.config, self.machines, inputs, nows)
        _, _, by_step = states_pass(self.config, self.table, self.states, inputs, nows)
        by_ref = reference_pass(
            self.config,
            [RankInput(i.local_prefillable, i.token_usage, i.running_batch, i.max_prefill_bs,
                       i.waiting_queue_len, i.max_running_requests, now) for i, now in zip(inputs, nows)],
            self.refs,
        )
        assert by_machine == by_step
        rows, by_compiled = compiled_pass(self.config, self.states, inputs, nows)
        assert rows == build_rows(self.config, inputs, [local_for(s, now, i.max_running_requests)
                                                        for s, i, now in zip(self.states, inputs, nows)])
        assert_same_decisions(by_compiled, by_step)
        for m, d, o in zip(self.machines, by_step, by_ref):
            assert (d.output_allow, d.output_reason, d.input_estimation, d.num_prefillable,
                    d.num_token_watermark_force_allow, d.wait_forward_passes, d.wait_seconds) == (
                o.allow, o.reason, o.input_estimation, o.num_prefillable, o.num_force,
                o.wait_forward_passes, o.wait_seconds)
            after = finalize(d.next_state)
            assert m.finalize() == after
            assert repr(compiled_for(self.config).finalize(d.next_state)) == repr(after)
            wait = o.next_state.wait
            assert (after.control == "delaying") == (wait is not None)
            assert (after.delayed_count, after.wait_start) == (wait if wait is not None else (0, None))
            assert after.skip_first_armed == o.next_state.skip_first_delayer
        self.states = [finalize(d.next_state) for d in by_step]
        self.refs = [o.next_state for o in by_ref]
        return by_step
