"""SGLang #37273's phase lockstep as profiles: the PR's own CPU test of ``is_phase_prefill``, restated as facts.

The PR is open and in no release, so no released code can run beside the
profiles. Its test builds SGLang's delayer for DP rank 0 of two (DP attention,
max_delay_passes 100, no watermark, token usage 0.9), fixes rank 1's gathered
row, negotiates once (``local_prefillable``, ``prefill_in_flight``) and asserts
the verdict, ``any_prefill_in_flight`` and the phase. Here rank 1 passes the
inputs that give that row, through ``PolicyCore`` on in-process ranks.
"""

from __future__ import annotations

from typing import Any

import pytest

from prefill_delayer.runtime import PolicyCore, run_ranks
from prefill_delayer.spec import Config

# The PR's remote rows: field 0 prefillable, field 5 the in-flight bit, the rest 0.
CASES = [
    # (test, rank 1 prefillable, rank 1 in flight, rank 0 prefillable, rank 0 in flight) -> (allow, any in flight, phase)
    ("test_in_flight_on_remote_rank_forces_phase_prefill_even_when_delayed", (False, True, True, False), (False, True, True)),
    ("test_local_in_flight_bit_is_gathered_and_forces_phase_prefill", (False, False, True, True), (None, True, True)),
    ("test_nobody_prefillable_is_decode_phase", (False, False, False, False), (True, False, False)),
    ("test_delayed_mixed_pass_without_in_flight_is_decode_phase", (False, False, True, False), (False, False, False)),
    ("test_allowed_prefill_is_prefill_phase", (True, False, True, False), (True, False, True)),
]


def _one_pass(profile: str, remote_pre: bool, remote_flight: bool, pre: bool, flight: bool) -> tuple[Any, list[int]]:
    c = Config(profile=profile, dp_size=2, enable_dp_attention=True, max_delay_passes=100, token_usage_low_watermark=None)

    def rank_main(rank: int, gather: Any) -> tuple[Any, list[int]]:
        rows: list[list[int]] = []

        def recording(row: Any) -> Any:
            rows.append(list(row))
            return gather(row)

        recording.world_size = 2  # type: ignore[attr-defined]
        core = PolicyCore(c, recording, clock=lambda: 0.0, decision_log=False)
        mine = (pre, flight) if rank == 0 else (remote_pre, remote_flight)
        d = core.negotiate(local_prefillable=mine[0], token_usage=0.9, prefill_in_flight=mine[1])
        core.finalize()
        return d, rows[-1]

    return run_ranks(2, rank_main)[0]


@pytest.mark.parametrize("profile", ["lockstep", "lockstep-hardened"])
@pytest.mark.parametrize("name, inputs, want", CASES, ids=[c[0] for c in CASES])
def test_the_prs_own_cases(profile: str, name: str, inputs: tuple, want: tuple) -> None:
    d, my_row = _one_pass(profile, *inputs)
    allow, any_flight, phase = want
    if allow is not None:
        assert d.output_allow is allow
    assert d.phase_prefill is phase
    assert d.phase_prefill == (any_flight or (d.output_allow and d.num_prefillable > 0))
    flight_field = Config(profile=profile).policy.row_names.index("prefill_in_flight")
    assert my_row[flight_field] == int(inputs[3])  # the local bit is gathered, in the row's in-flight field


def test_the_verdict_is_the_delayers() -> None:
    """The lockstep adds the phase only: allow, reason and state are the base delayer's on the same passes."""
    for base, lock in (("sglang-0.5.22", "lockstep"), ("hardened", "lockstep-hardened")):
        for remote, local in ((True, True), (False, True), (False, False), (True, False)):
            d = _one_pass(lock, remote, False, local, False)[0]
            c = Config(profile=base, dp_size=2, enable_dp_attention=True, max_delay_passes=100)

            def rank_main(rank: int, gather: Any, c: Any = c, remote: bool = remote, local: bool = local) -> Any:
                core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=False)
                return core.negotiate(local_prefillable=local if rank == 0 else remote, token_usage=0.9)

            want = run_ranks(2, rank_main)[0]
            assert d[:-1] == tuple(want), (lock, remote, local)
