"""``fsm.compiled``: derived from the spec's guards and table (never a copy), and equal to ``fsm.step``.

Agreement on random passes is checked in ``test_stateful`` (every pass, every
rank, rows and decisions) and on the conformance cases through ``fsm_sim``;
here: that changing a guard changes the compiled code with it, that a guard
the generator cannot follow fails loudly, large worlds, the runtime's
cross-check, and the quick input check.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from delayer_spec import STATES, PROFILES
from delayer_spec import INITIAL_STATE, Decision, State, local_for, step
from prefill_delayer.fsm.compiled import CompiledStep, NoTransition
from prefill_delayer.runtime import PrefillDelayer, ServerArgs
from prefill_delayer.spec import PY, Config
from delayer_spec import PassInput, gathered_view, guards, local_row
from delayer_spec import MAX_COUNT, args_problems, input_problems
from delayer_spec import build_table
from prefill_delayer.spec.table import Table
from prefill_delayer.spec.errors import ConfigError

from fsm_sim import assert_same_decisions
from guard_mutants import EQUIVALENT, mutants, patched

QUEUE = Config(max_delay_passes=4, token_usage_low_watermark=0.5, queue_min_ratio=0.29, dp_size=2, enable_dp_attention=True)


def _compile(c: Config, table: Table | None = None) -> CompiledStep:
    return CompiledStep(c, table, row_tail=(0, 0))  # input_error, fingerprint: as _reference's rows


def _decide(compiled: CompiledStep, state: State, now: float, inputs: list[PassInput]) -> Decision:
    """Rank 0's decision for one pass in which every rank has ``state`` and reads ``now``."""
    rows = [compiled.row(state, now, *inp) for inp in inputs]
    return compiled.negotiate(state, now, inputs[0].max_running_requests, [x for r in rows for x in r])


def _reference(c: Config, state: State, now: float, inputs: list[PassInput], table: Table | None = None) -> Decision:
    """The same pass through ``fsm.step`` (``table``: built now from the guards, unless given)."""
    local = local_for(state, now, inputs[0].max_running_requests)
    rows = [local_row(PY, c, inp, local) + [0, 0] for inp in inputs]
    return step(c, table or build_table(c.profile), state, gathered_view(PY, c, rows), local)


def test_a_changed_table_guard_changes_the_compiled_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    c = QUEUE.replace(max_delay_passes=3)
    mixed = [PassInput(True, 0.9), PassInput(False, 0.9)]
    at_cap = State("delaying", 2, 0.0, False)  # delayed_count == max_delay_passes - 1: the cap
    before = _compile(c)
    assert _decide(before, at_cap, 0.001, mixed).output_reason == "wait_timeout"
    monkeypatch.setattr(guards, "below_cap", lambda o, c, v, s: s.delayed_count <= c.max_delay_passes - 1)
    after = _compile(c)
    assert after.source != before.source and "(count <= 2)" in after.source
    assert _decide(after, at_cap, 0.001, mixed).output_reason == "delay"
    assert_same_decisions([_decide(after, at_cap, 0.001, mixed)], [_reference(c, at_cap, 0.001, mixed)])


def test_a_changed_inner_guard_changes_the_compiled_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    # slot_trigger is not in the table: it reaches the compiled code through delay_wanted.
    c = QUEUE.replace(queue_min_ratio=None)
    full = [PassInput(True, 0.9, 100, 10, 110, 0)] * 2  # free slots (10) == one prefill batch: no trigger
    state = INITIAL_STATE._replace(skip_first_armed=False)
    assert _decide(_compile(c), state, 0.0, full).output_reason == "no_wait"
    original = guards.slot_trigger
    monkeypatch.setattr(
        guards, "slot_trigger", lambda o, c, v, s: guards.effective_max_running_requests(o, c, v, s) - v.running_batch <= v.max_prefill_bs
    )
    assert _decide(_compile(c), state, 0.0, full).output_reason == "delay"
    monkeypatch.setattr(guards, "slot_trigger", original)
    assert _decide(_compile(c), state, 0.0, full).output_reason == "no_wait"


def test_a_guard_that_branches_on_pass_data_cannot_be_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    def branching(o, c, v, s):  # a Python ``if`` on the view: only o.If can be compiled
        return True if v.num_force > 0 else False

    monkeypatch.setattr(guards, "exists_force", branching)
    with pytest.raises(TypeError, match="used as a Python bool"):
        _compile(QUEUE)


def test_a_hole_in_the_table_raises_no_transition() -> None:
    full = build_table("seed")
    holed = Table("seed", STATES, tuple(t for t in full if t.name != "idle_none"))
    compiled = _compile(QUEUE, holed)
    with pytest.raises(NoTransition):
        _decide(compiled, INITIAL_STATE, 0.0, [PassInput(False, 0.9)] * 2)


def test_wrong_state_and_wrong_row_count_are_refused() -> None:
    compiled = _compile(QUEUE)
    with pytest.raises(ValueError, match="released"):
        compiled.negotiate(INITIAL_STATE._replace(control="released"), 0.0, 0, [0] * 18)
    with pytest.raises(ValueError):  # one row short: the unpacking fails
        compiled.negotiate(INITIAL_STATE, 0.0, 0, [0] * 9)
    released = INITIAL_STATE._replace(control="released", skip_first_armed=False)
    done = compiled.finalize(released)
    assert type(done) is State and done == INITIAL_STATE._replace(skip_first_armed=False)
    assert compiled.finalize(State("delaying", 2, 1.5, True)) == State("delaying", 2, 1.5, True)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("dp_size,attn_tp_size,dp_attention", [(16, 4, True), (8, 2, False), (1, 1, False)])
def test_large_and_small_worlds(profile: str, dp_size: int, attn_tp_size: int, dp_attention: bool) -> None:
    c = QUEUE.replace(profile=profile, dp_size=dp_size, attn_tp_size=attn_tp_size, enable_dp_attention=dp_attention)
    compiled = _compile(c)
    world = c.world_size
    for k, state in enumerate([INITIAL_STATE, State("delaying", 2, 0.25, False), State("delaying", 1, 0.0, True)]):
        inputs = [PassInput(r % 3 != k, 0.9, 100 + r, 28 + k, 1024 - r, r % 7) for r in range(world)]
        got = _decide(compiled, state, 5.0 + k, inputs)
        assert_same_decisions([got], [_reference(c, state, 5.0 + k, inputs)])
        assert isinstance(got, Decision) and isinstance(got.next_state, State)


def test_the_runtime_cross_check_catches_a_divergent_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFILL_DELAYER_CROSSCHECK", "1")
    args = ServerArgs(enable_dp_attention=True, prefill_delayer_queue_min_ratio=0.29)
    d = PrefillDelayer(1, 1, None, args, 4, 0.5, gather=lambda row: [list(row)])
    assert d.negotiate(False, 0.9).output_allow  # cross-checked and equal
    d.finalize()
    # Swap in a step compiled from a table whose "none" rows release with another reason.
    table = build_table("seed")
    wrong = Table("seed", STATES, tuple(t if not t.name.endswith("_none") else t.__class__(**{**t.__dict__, "reason": "no_wait"}) for t in table))
    d.core._step = CompiledStep(d.config, wrong, row_tail=d.core._step.row_tail, row_len=d.core._step.row_len)
    before = d.state
    with pytest.raises(AssertionError, match="transitions machine"):
        d.negotiate(False, 0.9)
    assert d.state == before and d.passes == 1


VALUES = st.one_of(
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([MAX_COUNT, MAX_COUNT + 1, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.inf, -0.0, 0.0, 1.0, None, "1", 1.5]),
)


@given(st.lists(VALUES, min_size=6, max_size=6))
def test_the_quick_input_check_decides_as_input_problems(values: list) -> None:
    assert args_problems(*values) == input_problems(PassInput(*values))


@given(st.booleans(), st.floats(0.0, 1e300), st.lists(st.integers(0, MAX_COUNT), min_size=4, max_size=4))
def test_valid_inputs_pass_the_quick_check(prefillable: bool, usage: float, counts: list[int]) -> None:
    assert args_problems(prefillable, usage, *counts) == [] == input_problems(PassInput(prefillable, usage, *counts))


# ----- every guard mutant: the compiled code follows the mutated guard ---------------------

MUTANT_CONFIGS = [
    QUEUE.replace(max_delay_ms=2.0),
    QUEUE.replace(max_delay_ms=2.0, profile="hardened"),
    QUEUE.replace(dp_size=3, attn_tp_size=2, enable_dp_attention=False, queue_min_ratio=0.5, max_delay_ms=2.0),
    QUEUE.replace(dp_size=6, max_delay_ms=2.0, profile="hardened"),  # 6 counted rows: strided aggregates
]


def _sample_passes(c: Config, rng: random.Random, n: int) -> list[tuple[State, float, list[PassInput]]]:
    """Passes near every guard's boundary: counts around the triggers, usage around the
    watermark, states at and around the cap, clocks around max_delay_ms."""
    out = []
    for _ in range(n):
        control = rng.choice(["idle", "delaying", "delaying"])
        state = State(control, rng.randint(1, 4) if control == "delaying" else 0,
                      0.0 if control == "delaying" else None, rng.random() < 0.3)
        now = rng.choice([0.0, 0.001, 0.002, 0.003])
        rb, pb = rng.choice([0, 1, 28, 29, 100]), rng.choice([0, 1, 28, 29, 80])
        inputs = [
            PassInput(rng.random() < 0.8, rng.choice([0.3, 0.5, 0.9]), rb, pb,
                      rng.choice([0, max(0, rb + pb - 1), rb + pb, rb + pb + 1, 1024]), rng.choice([0, 1, 13, 14, 15, 28, 29]))
            for _ in range(c.world_size)
        ]
        out.append((state, now, inputs))
    return out


@pytest.mark.parametrize("name,label,occurrence,src", mutants(), ids=[f"{m[0]}:{m[1]}#{m[2]}" for m in mutants()])
def test_the_compiled_step_follows_every_guard_mutant(monkeypatch: pytest.MonkeyPatch, name: str, label: str,
                                                     occurrence: int, src: str) -> None:
    rng = random.Random(f"{name}:{label}:{occurrence}")
    samples = {c: _sample_passes(c, rng, 150) for c in MUTANT_CONFIGS}
    before = {c: _compile(c) for c in MUTANT_CONFIGS}
    original = {c: [_decide(before[c], *p) for p in samples[c]] for c in MUTANT_CONFIGS}
    monkeypatch.setattr(guards, name, patched(name, src))
    changed = 0
    for c in MUTANT_CONFIGS:
        compiled, table = _compile(c), build_table(c.profile)  # both built after the patch
        got = [_decide(compiled, *p) for p in samples[c]]
        assert_same_decisions(got, [_reference(c, *p, table) for p in samples[c]])  # step reads the mutant directly
        changed += sum(g != o for g, o in zip(got, original[c]))
    if (name, label, occurrence) not in EQUIVALENT:
        assert changed, f"no sampled pass tells {name} ({label} #{occurrence}) from the original"


@pytest.mark.parametrize("value", ["yes", "on", "2", "enabled"])
def test_a_cross_check_setting_it_does_not_take_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """Any value but the accepted ones used to leave the cross-check off without a word."""
    monkeypatch.setenv("PREFILL_DELAYER_CROSSCHECK", value)
    args = ServerArgs(enable_dp_attention=True, prefill_delayer_queue_min_ratio=0.29)
    with pytest.raises(ConfigError, match=f"PREFILL_DELAYER_CROSSCHECK='{value}': expected 1 or true"):
        PrefillDelayer(1, 1, None, args, 4, 0.5, gather=lambda row: [list(row)])


@pytest.mark.parametrize(("value", "on"), [("1", True), ("TRUE", True), (" true ", True), ("0", False), ("false", False), ("", False)])
def test_the_cross_check_settings_it_takes(monkeypatch: pytest.MonkeyPatch, value: str, on: bool) -> None:
    monkeypatch.setenv("PREFILL_DELAYER_CROSSCHECK", value)
    args = ServerArgs(enable_dp_attention=True, prefill_delayer_queue_min_ratio=0.29)
    d = PrefillDelayer(1, 1, None, args, 4, 0.5, gather=lambda row: [list(row)])
    assert (d.core._shadow is not None) is on
