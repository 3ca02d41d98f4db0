"""What an operator reads when a pass's rows are bad or a constructor argument is: one line naming the rank, the field,
the value and what was expected, or the argument and what it must be; never a dump of row bytes or a traceback from
inside the runtime.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

import pytest

from prefill_delayer.runtime import CollectiveError, ConfigMismatchError, PeerInputError, PolicyCore, PrefillDelayer, ServerArgs, run_ranks
from prefill_delayer.runtime.envelope import envelope_positions
from prefill_delayer.spec import ConfigError
from prefill_delayer.spec.fields import MAX_COUNT
from prefill_delayer.spec.registry import policy_of
from runtime_harness import results, spawn_gloo

SA = {"enable_dp_attention": True}
GOOD = {"running_batch": 0, "max_prefill_bs": 1, "max_running_requests": 10, "waiting_queue_len": 3}
NO_TEXT = ("the values are unknown: rank 1 sent no text when asked for them (a rank of another build of this package, "
           "or another collective on the group)")


def _answers_with_its_pass_row(gather: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A rank of a build without the detail round: its next collective after a refused pass sends a pass row."""
    sent: list[list[int]] = []

    def answer(row: Any) -> Any:
        sent.append(list(row))
        return gather(sent[0] if len(sent) == 2 else row)

    return answer


def _peer_input_messages(world: int, bad: dict[int, dict[str, Any]], no_text: frozenset[int] = frozenset()) -> list[str]:
    """Every rank's PeerInputError message, rank r negotiating with ``bad.get(r)`` over ``GOOD``."""
    def body(rank: int, gather: Any) -> str:
        g = _answers_with_its_pass_row(gather) if rank in no_text else gather
        d = PrefillDelayer(world, 1, None, ServerArgs(**SA), 30, None, gather=g)
        with pytest.raises(PeerInputError) as info:
            d.negotiate(True, 0.5, **{**GOOD, **bad.get(rank, {})})
        return str(info.value)

    return run_ranks(world, body)


def test_a_peer_that_sends_no_text_for_its_values_is_named_not_dumped() -> None:
    """Its pass row was decoded as text: the line printed 63 NUL bytes, a newline and the fingerprint's raw bytes
    ('rank 1: \\x00\\x00...\\n\\x1aE)...'). Now the fields its row's error mask names, and why the values are unknown."""
    msgs = _peer_input_messages(2, {1: {"waiting_queue_len": -3}}, no_text=frozenset({1}))
    assert msgs == [f"pass 1: invalid negotiate input on rank 1 (rank 1: waiting_queue_len); {NO_TEXT}"] * 2


def test_a_peer_without_text_beside_one_with_it() -> None:
    """One bad rank's values are read, the other's are named as unknown: each rank is told apart."""
    msgs = _peer_input_messages(3, {1: {"waiting_queue_len": -3}, 2: {"running_batch": -1}}, no_text=frozenset({1}))
    assert len(set(msgs)) == 1
    assert msgs[0] == (f"pass 1: invalid negotiate input on ranks 1, 2 (rank 1: waiting_queue_len; rank 2: running_batch=-1 "
                       f"(expected 0 <= value <= {MAX_COUNT})); {NO_TEXT}")


def test_a_peer_input_error_says_the_value_and_the_range_it_missed() -> None:
    """The line said 'rank 1: max_running_requests=2147483648' and not what the runtime takes."""
    msgs = _peer_input_messages(2, {1: {"max_running_requests": MAX_COUNT + 1}})
    assert msgs == [f"pass 1: invalid negotiate input on rank 1 (rank 1: max_running_requests={MAX_COUNT + 1} "
                    f"(expected 0 <= value <= {MAX_COUNT}))"] * 2


def test_a_mismatch_with_a_peer_that_sends_no_field_hashes_says_the_field_is_unknown() -> None:
    """Its pass row was compared as field hashes: 'they differ in policy ...; build every rank with the same policy',
    where both ranks ran one policy and differed in max_delay_passes."""
    def body(rank: int, gather: Any) -> str:
        g = _answers_with_its_pass_row(gather) if rank == 1 else gather
        d = PrefillDelayer(2, 1, None, ServerArgs(**SA), 30 + rank, None, gather=g)
        with pytest.raises(ConfigMismatchError) as info:
            d.negotiate(True, 0.5, **GOOD)
        return str(info.value)

    msgs = run_ranks(2, body)
    assert len(set(msgs)) == 1 and "they differ in" not in msgs[0], msgs[0]
    assert ("; which field differs is unknown: rank 1 sent no field hashes when asked for them (a rank of another build "
            "of this package, or another collective on the group)); build every rank with the same max_delay_passes, "
            "token_usage_low_watermark, server_args, dp_size, attn_tp_size and profile") in msgs[0]


def _no_text_over_gloo(rank: int, world: int) -> dict[str, Any]:
    import torch.distributed as dist

    from prefill_delayer.runtime import TorchGather

    row_len = envelope_positions(policy_of("seed")).n
    gather = _answers_with_its_pass_row(TorchGather(dist.group.WORLD, "cpu", world, row_len)) if rank == 1 else None
    d = PrefillDelayer(world, 1, dist.group.WORLD, ServerArgs(**SA), 30, None, gather=gather)
    out: dict[str, Any] = {}
    try:
        d.negotiate(True, 0.5, **{**GOOD, **({"waiting_queue_len": -3} if rank == 1 else {})})
    except PeerInputError as err:
        out["message"] = str(err)
    return out


@pytest.mark.multiprocess
def test_a_peer_that_sends_no_text_over_real_gloo_ranks() -> None:
    outs = results(spawn_gloo(2, _no_text_over_gloo))
    assert outs == [{"message": f"pass 1: invalid negotiate input on rank 1 (rank 1: waiting_queue_len); {NO_TEXT}"}] * 2


# ----- what a gather returned in place of rows ----------------------------------------------------------------


def _gathered(world: int, change: Callable[[list[list[int]]], Any], profile: str = "seed") -> list[str]:
    """Every rank's CollectiveError message when its gather hands back ``change(rows)``."""
    def body(rank: int, gather: Any) -> str:
        d = PrefillDelayer(world, 1, None, ServerArgs(**SA), 30, None, profile=profile,
                           gather=lambda row: change([list(r) for r in gather(row)]))
        with pytest.raises(CollectiveError) as info:
            d.negotiate(True, 0.5, **GOOD)
        assert d.passes == 0
        return str(info.value).split(" returned ", 1)[1]  # after the gather's name, which differs per rank

    outs = run_ranks(world, body)
    assert len(set(outs)) == 1
    return outs


def test_floats_from_a_gather_name_the_rank_and_the_field() -> None:
    """A TypeError ('unsupported operand type(s) for >>: 'float' and 'int'') from inside the envelope's checks."""
    first = policy_of("seed").row_names[0]
    assert _gathered(2, lambda rows: [rows[0], [float(x) for x in rows[1]]]) == [
        f"float 1.0 as rank 1's {first}, where a row holds ints (int64): a gather returns the rows as it was given them"] * 2


@pytest.mark.parametrize(("change", "says"), [
    (lambda rows: [rows[0], rows[1][:-1]], "9 values from rank 1, expected a row of 10 values from each rank"),
    (lambda rows: [rows[0], None], "NoneType None from rank 1, expected a row of 10 values from each rank"),
    (lambda rows: None, "NoneType None, expected a list of 2 rows of 10 ints, one per rank"),
    (lambda rows: rows + rows, "4 rows, expected 2 rows of 10 values, one per rank"),
])
def test_a_row_of_another_shape_names_the_rank_that_sent_it(change: Callable[[Any], Any], says: str) -> None:
    """'returned 2 rows of lengths [9, 10]' said no rank; None in place of the rows was a TypeError."""
    assert _gathered(2, change) == [says] * 2


def test_an_all_reduce_envelope_no_valid_rows_give_names_its_slot() -> None:
    """It printed the envelope's ints ([0, 7, 0, 0, 83458, 3482618882, ...])."""
    profile = "vllm-48246"
    policy = policy_of(profile)
    config = policy.config_cls(profile=profile, dp_size=2, enable_dp_attention=True)
    k = len(policy.row)

    def body(rank: int, gather: Any) -> str:
        def skewed(row: Any) -> Any:
            rows = [list(r) for r in gather(row)]
            rows[1][k + 1] = 7  # a rank slot with no bad rank counted
            return rows

        with pytest.raises(CollectiveError) as info:
            PolicyCore(config, skewed).negotiate(local_prefillable=True)
        return str(info.value).split(" returned ", 1)[1]

    assert run_ranks(2, body) == ["an envelope no set of valid rows gives: bad_rank_sum 7 where valid rows give 0"] * 2


def test_an_all_reduce_of_no_ints_names_its_slot() -> None:
    """A custom all-reduce that returned a float where the row holds ints: a TypeError from the envelope's arithmetic."""
    from prefill_delayer.runtime.reduce import ReduceEnvelope, reduce_rows

    profile = "vllm-48246"
    config = policy_of(profile).config_cls(profile=profile, dp_size=2, enable_dp_attention=True)
    env = ReduceEnvelope(config, 0)

    def body(rank: int, gather: Any) -> str:
        class HalfReduce:
            def all_reduce(self, row: Any) -> Any:
                reduced = reduce_rows(gather(row), env.op, env.row_len)
                return [*reduced[:-1], reduced[-1] + 0.5]

            __call__ = all_reduce

        with pytest.raises(CollectiveError) as info:
            PolicyCore(config, HalfReduce()).negotiate(local_prefillable=True)
        return str(info.value).split(" returned ", 1)[1]

    outs = run_ranks(2, body)
    assert len(set(outs)) == 1 and outs[0].startswith("float ")
    assert outs[0].endswith(f" as {env.row_fields[-1]}, where the row holds ints (int64)"), outs[0]


# ----- the constructor's arguments ---------------------------------------------------------------------------


def _build(**changes: Any) -> PrefillDelayer:
    kw: dict[str, Any] = {"dp_size": 1, "attn_tp_size": 1, "cpu_group": None, "server_args": ServerArgs(),
                          "max_delay_passes": 30, "token_usage_low_watermark": 0.5, "gather": lambda row: [row]}
    return PrefillDelayer(**{**kw, **changes})


@pytest.mark.parametrize(("changes", "says"), [
    ({"server_args": None}, "server_args (NoneType) has no prefill_delayer_queue_min_ratio, which profile 'seed' reads: "
                            "pass SGLang's ServerArgs, or prefill_delayer.runtime.ServerArgs outside SGLang"),
    ({"server_args": SimpleNamespace(enable_dp_attention=False, prefill_delayer_queue_min_ratio=None,
                                     prefill_delayer_max_delay_ms=None, prefill_max_requests=None), "gather": None},
     "server_args (SimpleNamespace) has no disable_overlap_schedule, which the choice of the gather's group reads: pass "
     "SGLang's ServerArgs, or prefill_delayer.runtime.ServerArgs outside SGLang"),
    ({"server_args": ServerArgs(disable_overlap_schedule="false"), "gather": None},  # type: ignore[arg-type]
     "server_args.disable_overlap_schedule must be a bool, got str 'false'"),
    ({"params": [("quorum_percent", 75)]}, "params must map the profile's parameter names to values ({'quorum_percent': "
                                           "75}, say), got list [('quorum_percent', 75)]"),
    ({"params": ""}, "params must map the profile's parameter names to values ({'quorum_percent': 75}, say), got str ''"),
    ({"debug_log_enabled": "false"}, "debug_log_enabled must be a bool, got str 'false'"),
    ({"metrics_collector": object()}, "metrics_collector must have observe_prefill_delayer_outcome(forward_passes=, "
                                      "wait_seconds=, input_estimation=, output_allow=, output_reason=, actual_execution=) "
                                      "(SGLang's SchedulerMetricsCollector, or PrometheusPrefillDelayerMetrics), got object"),
])
def test_a_constructor_argument_it_cannot_use_is_a_config_error_naming_it(changes: dict[str, Any], says: str) -> None:
    """Before: AttributeError ('NoneType' object has no attribute 'prefill_delayer_queue_min_ratio'; 'list' object has
    no attribute 'items'), the string 'false' taken as true (the debug lines on; the device group chosen, then refused as
    'disable_overlap_schedule=True'), '' taken as no parameters, and a metrics collector without the method taken, to
    fail the first pass's finalize with an AttributeError that left the pass unended."""
    with pytest.raises(ConfigError) as info:
        _build(**changes)
    assert str(info.value) == says


# ----- the variables ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["quorum_percent=75,", ",quorum_percent=75", "quorum_percent=75,,busy_watermark=0.5", ","])
def test_an_empty_part_of_the_params_variable_is_refused(text: str) -> None:
    """It was skipped: a parameter lost from the list (a variable that expanded to nothing) ran at its default."""
    from prefill_delayer.integrations.sglang.plugin import parse_params

    with pytest.raises(ConfigError) as info:
        parse_params(text)
    assert str(info.value) == f"PREFILL_DELAYER_PARAMS: expected NAME=VALUE[,NAME=VALUE], got {text!r}, which has an empty part"


@pytest.mark.parametrize("text", ["", "  "])
def test_a_blank_params_variable_sets_nothing(text: str) -> None:
    from prefill_delayer.integrations.sglang.plugin import parse_params

    assert parse_params(text) == {}


@pytest.mark.parametrize("name", ["PREFILL_DELAYER_DECISION_LOG_MAX_MB", "PREFILL_DELAYER_DECISION_LOG_KEEP"])
@pytest.mark.parametrize("raw", ["7_5", "\u0663"])
def test_a_log_size_variable_is_read_as_every_setting_is(monkeypatch: pytest.MonkeyPatch, name: str, raw: str) -> None:
    """int() read 7_5 as 75 (a 75 MB log where 7.5 was meant) and Arabic-Indic digits as digits; parse_setting, the one
    reader of settings, refuses both, as simulate --set and PREFILL_DELAYER_PARAMS do."""
    from prefill_delayer.runtime.decision_log import options_from

    monkeypatch.setenv(name, raw)
    with pytest.raises(ConfigError) as info:
        options_from("decision.jsonl")
    assert str(info.value) == f"expected NAME=VALUE with a number in plain digits (0-9, no '_'), got '{name}={raw}'"


@pytest.mark.parametrize("timeout_s", [float("inf"), 1e300, True, "5"])
def test_an_in_process_group_refuses_a_timeout_its_barrier_cannot_wait(timeout_s: Any) -> None:
    """inf and 1e300 were taken, then the first gather raised OverflowError ('timestamp out of range for platform
    time_t'); True was one second; '5' a TypeError."""
    import threading

    from prefill_delayer.runtime import InProcessGroup

    with pytest.raises(ValueError) as info:
        InProcessGroup(2, timeout_s)
    assert str(info.value) == f"timeout_s must be a number of seconds in (0, {threading.TIMEOUT_MAX:g}], got {timeout_s!r}"
