"""The ``transitions`` machine is the table, is built once per delayer, and agrees with ``step``."""

from __future__ import annotations

import pytest
import transitions
from hypothesis import given
from hypothesis import strategies as st

from prefill_delayer.fsm import DelayerMachine
from delayer_spec import INITIAL_STATE, State, finalize, local_for, step
from prefill_delayer.spec import Config
from delayer_spec import PassInput
from delayer_spec import DELAYING, EVENTS, IDLE, RELEASED, STATES, build_table
from delayer_spec import Local, View

from fsm_sim import machines_pass

from delayer_spec import PROFILES  # noqa: E402


def _machines_of(delayer: DelayerMachine) -> list[transitions.Machine]:
    return [v for v in vars(delayer).values() if isinstance(v, transitions.Machine)]


def test_initial_state():
    m = DelayerMachine(Config())
    assert m.state == INITIAL_STATE == State(IDLE, 0, None, True)


@pytest.mark.parametrize("profile", PROFILES)
def test_machine_transitions_are_the_tables_rows(profile):
    table = build_table(profile)
    delayer = DelayerMachine(Config(profile=profile))
    (machine,) = _machines_of(delayer)
    assert set(machine.events) == set(EVENTS)
    assert set(machine.states) == set(STATES)
    for event in EVENTS:
        for source in STATES:
            rows = [t for t in table if t.event == event and t.source == source]
            got = machine.get_transitions(trigger=event, source=source)
            assert [(t.source, t.dest) for t in got] == [(r.source, r.dest) for r in rows]
            assert [len(t.conditions) for t in got] == [1 if r.lits else 0 for r in rows]


def test_machine_is_built_once_per_delayer(monkeypatch):
    built = []
    original = transitions.Machine.__init__

    def counting_init(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(transitions.Machine, "__init__", counting_init)
    config = Config(max_delay_passes=4, queue_min_ratio=0.5, dp_size=2, enable_dp_attention=True, profile="hardened")
    delayers = [DelayerMachine(config), DelayerMachine(config)]
    assert len(built) == 2
    machines = [_machines_of(d) for d in delayers]
    assert [len(ms) for ms in machines] == [1, 1] and machines[0][0] is not machines[1][0]
    shapes = [
        [PassInput(True, 1.0, 10, 5, 12, 0)] * 2,  # slot trigger: absorb, then delays
        [PassInput(True, 1.0), PassInput(False, 1.0)],  # mixed
        [PassInput(False, 1.0)] * 2,  # none
    ]
    for k in range(30):
        machines_pass(config, delayers, shapes[k % 3 if k > 5 else 0], [float(k)] * 2)
        for d in delayers:
            d.finalize()
    assert len(built) == 2
    assert [_machines_of(d) for d in delayers] == machines


def test_negotiate_needs_a_finalized_state():
    config = Config()
    delayer = DelayerMachine(config)
    machines_pass(config, [delayer], [PassInput(False, 1.0)], [0.0])
    assert delayer.state.control == RELEASED
    with pytest.raises(ValueError, match="finalize"):
        local_for(delayer.state, 0.0, 0)
    assert delayer.finalize().control == IDLE
    assert finalize(State(DELAYING, 2, 1.0, False)) == State(DELAYING, 2, 1.0, False)


# Arbitrary views and states, including ones no gather produces (e.g. counts far past
# the cap): wherever the table is defined, the machine and the pure step agree.
COUNT = st.integers(0, 300)


@st.composite
def views(draw, config: Config):
    n = config.dp_dim
    num_prefillable = draw(st.integers(0, n))
    return View(
        n=n,
        num_prefillable=num_prefillable,
        num_force=draw(st.integers(0, num_prefillable)),
        running_batch=draw(COUNT),
        max_prefill_bs=draw(COUNT),
        waiting_queue_len=draw(COUNT),
        timeout_any=draw(st.booleans()),
        mrr_max=draw(COUNT),
    )


@st.composite
def cases(draw):
    config = Config(
        max_delay_passes=draw(st.integers(0, 6)),
        token_usage_low_watermark=draw(st.sampled_from([None, 0.5])),
        queue_min_ratio=draw(st.sampled_from([None, 0.29, 0.5, 1.0, 3.0])),
        max_delay_ms=draw(st.sampled_from([None, 1.0])),
        dp_size=draw(st.integers(1, 4)),
        attn_tp_size=draw(st.integers(1, 2)),
        enable_dp_attention=draw(st.booleans()),
        profile=draw(st.sampled_from(PROFILES)),
    )
    now = draw(st.floats(0.0, 10.0))
    if draw(st.booleans()):
        state = State(DELAYING, draw(st.integers(1, 40)), now - draw(st.floats(0.0, 0.01)), draw(st.booleans()))
    else:
        state = State(IDLE, 0, None, draw(st.booleans()))
    local = local_for(state, now, draw(COUNT))
    return config, state, draw(views(config)), local


@given(cases())
def test_machine_and_step_agree_on_any_view(case):
    config, state, view, local = case
    assert isinstance(local, Local)
    delayer = DelayerMachine(config)
    delayer.restore(state)
    by_machine = delayer.negotiate(view, local)
    by_step = step(config, build_table(config.profile), state, view, local)
    assert by_machine == by_step
    assert delayer.state == by_step.next_state
    assert delayer.finalize() == finalize(by_step.next_state)
    # A delay never reports wait, a release never keeps one.
    if by_step.output_allow:
        assert by_step.next_state.delayed_count == 0 and by_step.next_state.wait_start is None
        assert by_step.wait_forward_passes == state.delayed_count
    else:
        assert by_step.next_state.delayed_count == state.delayed_count + 1
        assert (by_step.wait_forward_passes, by_step.wait_seconds) == (0, 0.0)


# The README's "Stepping the FSM": rows of the hardened profile at dp_size 2 with DP attention (2 ranks).
_GOOD = [1, 0, 0, 0, 0, 0, 0]


@pytest.mark.parametrize(("rows", "error", "message"), [
    (None, TypeError, "rows: expected a list of 2 rows (every rank's, in global rank order), got NoneType None"),
    ("ab", TypeError, "rows: expected a list of 2 rows"),
    ([_GOOD], ValueError, "rows: expected 2 rows (every rank's, in global rank order: dp_size x attn_cp_size x "
                          "attn_tp_size), got 1"),
    ([_GOOD, _GOOD, _GOOD], ValueError, "rows: expected 2 rows"),
    ([[1, 0, 0], _GOOD], ValueError, "rows[0]: expected 7 values (prefillable, force, running_batch, max_prefill_bs, "
                                     "waiting_queue_len, timeout_expired, max_running_requests), got 3"),
    ([_GOOD, "abcdefg"], TypeError, "rows[1]: expected a row of 7 values (prefillable, force"),
    ([None, _GOOD], TypeError, "rows[0]: expected a row of 7 values"),
    ([[1, 0, -5, 0, 0, 0, 0], _GOOD], ValueError, "rows[0][2] (running_batch): expected 0 <= value <= 2147483647, got -5"),
    ([[1, 0, 2.5, 0, 0, 0, 0], _GOOD], TypeError, "rows[0][2] (running_batch): expected an int, got float 2.5"),
    ([[1, "x", 0, 0, 0, 0, 0], _GOOD], TypeError, "rows[0][1] (force): expected 0 or 1, got str 'x'"),
    ([[2, 0, 0, 0, 0, 0, 0], _GOOD], ValueError, "rows[0][0] (prefillable): expected 0 or 1, got 2"),
])
def test_the_readme_stepping_api_names_a_malformed_row(rows, error, message):
    """A short row raised a bare IndexError from the fold, a str or None one a TypeError from deep inside, and one row
    too few or a negative count were folded into a view without a word; now the first bad row or value is named."""
    from prefill_delayer.spec import PY, policy_of

    policy = policy_of("hardened")
    config = policy.config_cls(dp_size=2, enable_dp_attention=True, max_delay_passes=3, profile="hardened")
    assert policy.gathered_view(PY, config, [_GOOD, [0] * 7]).num_prefillable == 1  # the README's rows: fine
    with pytest.raises(error) as info:
        policy.gathered_view(PY, config, rows)
    assert str(info.value).startswith(message), str(info.value)


def _reduced_step(profile: str, dp_size: int):
    from prefill_delayer.fsm.step import Step

    return Step(Config(profile=profile, dp_size=dp_size))


def test_the_stepping_api_takes_every_reduced_row_an_all_reduce_gives():
    """A reduced slot is its field summed (or the largest) over the DP ranks: a sum of flags up to dp_size, a sum of
    counts past one rank's MAX_COUNT; a reduced row whole, its envelope after the policy's fields, reads the same."""
    from prefill_delayer.spec.fields import MAX_COUNT

    vllm = _reduced_step("vllm-48246", 4)  # all_reduce_sum of (prefillable, timeout_expired)
    assert vllm.view([[4, 1]]) == vllm.view([[4, 1, 7, 7]]) == vllm.policy.view_cls(n=4, num_prefillable=4, any_expired=True)
    coalescer = _reduced_step("atom-coalescer", 2)  # all_reduce_sum; slot 1 the pending tokens, a count
    assert coalescer.view([[2, 2 * MAX_COUNT, 0, 2, 0, 0, 0]]).pending == 2 * MAX_COUNT
    atom = _reduced_step("atom-930", 4)  # all_reduce_max of four flags
    assert atom.view([[1, True, 0, 1]]).any_force is True


@pytest.mark.parametrize(("profile", "received", "error", "message"), [
    ("vllm-48246", [[3, 1], [0, 0]], ValueError, "rows: expected 1 row (the one row an all_reduce_sum hands each rank, its "
     "slots reduced over the DP ranks), got 2"),
    ("vllm-48246", [], ValueError, "rows: expected 1 row (the one row an all_reduce_sum hands each rank"),
    ("vllm-48246", None, TypeError, "rows: expected a list of 1 row (the one row an all_reduce_sum hands each rank, its "
     "slots reduced over the DP ranks), got NoneType None"),
    ("vllm-48246", [[3]], ValueError, "rows[0]: expected 2 values (prefillable, timeout_expired), got 1"),
    ("vllm-48246", ["ab"], TypeError, "rows[0]: expected a row of 2 values (prefillable, timeout_expired), got str 'ab'"),
    ("vllm-48246", [[5, 0]], ValueError, "rows[0][0] (prefillable): expected an int in [0, 4] (the sum of 4 DP ranks' "
     "values, each 0 or 1), got 5"),
    ("vllm-48246", [[-1, 0]], ValueError, "rows[0][0] (prefillable): expected an int in [0, 4]"),
    ("vllm-48246", [["3", 0]], TypeError, "rows[0][0] (prefillable): expected an int (the sum of 4 DP ranks' values, each "
     "0 or 1), got str '3'"),
    ("vllm-48246", [[3, True]], TypeError, "rows[0][1] (timeout_expired): expected an int (the sum of"),
    ("atom-coalescer", [[0, 4 * 2**31 - 3, 0, 0, 0, 0, 0]], ValueError, "rows[0][1] (pending_tokens): expected an int in "
     "[0, 4294967294] (the sum of 2 DP ranks' values, each 0 to 2147483647), got 8589934589"),
    ("atom-930", [[2, 0, 0, 0]], ValueError, "rows[0][0] (prefillable): expected an int in [0, 1] (the largest of the DP "
     "ranks' values, each 0 or 1), got 2"),
])
def test_the_stepping_api_names_a_malformed_reduced_row(profile, received, error, message):
    """An all-reduce policy read the one reduced row with no check: two rows raised a bare 'too many values to unpack',
    a short row an IndexError, and a value no reduce gives (a negative or a str, more prefillable ranks than there
    are) was read into a wrong view without a word."""
    step = _reduced_step(profile, 2 if profile == "atom-coalescer" else 4)
    with pytest.raises(error) as info:
        step.view(received)
    assert str(info.value).startswith(message), str(info.value)
