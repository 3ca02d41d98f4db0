"""The machine's fast transition path (fsm.machine._FastTransition) changes cost, never behaviour."""

from __future__ import annotations

from prefill_delayer.fsm import DelayerMachine
from delayer_spec import local_for, step
from prefill_delayer.spec import PY, Config
from delayer_spec import PassInput, gathered_view, local_row


def _pass(m: DelayerMachine, prefillable: bool) -> tuple:
    c = m.config
    local = local_for(m.state, 1.0, 0)
    rows = [local_row(PY, c, PassInput(prefillable, 0.9), local) + [0, 0], local_row(PY, c, PassInput(False, 0.9), local) + [0, 0]]
    view = gathered_view(PY, c, rows)
    want = step(c, m.table, m.state, view, local)
    return m.negotiate(view, local), want


def test_fast_path_matches_the_step_and_defers_to_the_library_when_callbacks_exist() -> None:
    c = Config(max_delay_passes=3, dp_size=2, enable_dp_attention=True)
    plain, hooked = DelayerMachine(c), DelayerMachine(c)
    entered: list[str] = []
    # A state callback makes the fast path step aside: the library's execute must run it.
    hooked._machine.get_state("delaying").add_callback("enter", lambda *a, **k: entered.append("delaying"))
    for m in (plain, hooked):
        got, want = _pass(m, True)
        assert got == want and m.state == want.next_state and m.state.control == "delaying"
        m.finalize()
    assert entered == ["delaying", "delaying"]  # entered on negotiate, re-entered by finalize's self-loop
