"""A rejected pass says why in words, the same on every rank: the configuration field that differs, the bad value.

The rows carry only a fingerprint and an error mask; on those failure paths every
rank sends one more row through the same gather (``runtime.failure_detail``).
"""

from __future__ import annotations

from typing import Any

import pytest

from prefill_delayer.runtime import ConfigMismatchError, PeerInputError, PrefillDelayer, run_ranks
from prefill_delayer.runtime.failure_detail import row_texts, text_row
from prefill_delayer.runtime.server_args import ServerArgs
from prefill_delayer.spec.fields import MAX_COUNT
from runtime_harness import results, spawn_gloo

SA = {"enable_dp_attention": True}


def _mismatch(world: int, differ: dict[int, dict[str, Any]]) -> list[str]:
    """The ConfigMismatchError message of every rank, rank r built with ``differ.get(r)`` on top of the defaults."""
    def body(rank: int, gather: Any) -> str:
        kw: dict[str, Any] = {"max_delay_passes": 3, "token_usage_low_watermark": 0.5, "server_args": dict(SA)}
        for k, v in differ.get(rank, {}).items():
            kw["server_args"].update(v) if k == "server_args" else kw.update({k: v})
        d = PrefillDelayer(world, 1, None, ServerArgs(**kw.pop("server_args")), kw.pop("max_delay_passes"),
                           kw.pop("token_usage_low_watermark"), gather=gather, **kw)
        with pytest.raises(ConfigMismatchError) as info:
            d.negotiate(True, 0.9)
        return str(info.value)

    return run_ranks(world, body)


@pytest.mark.parametrize(("differ", "field"), [
    ({2: {"max_delay_passes": 4}}, "max_delay_passes"),
    ({0: {"token_usage_low_watermark": 0.25}}, "token_usage_low_watermark"),
    ({1: {"profile": "hardened"}}, "profile"),
    ({1: {"server_args": {"prefill_delayer_queue_min_ratio": 0.5}}}, "queue_min_ratio"),
    ({1: {"max_delay_passes": 4, "profile": "hardened"}}, "max_delay_passes, profile"),
])
def test_a_mismatch_names_the_field_that_differs(differ: dict[int, dict[str, Any]], field: str) -> None:
    msgs = _mismatch(3, differ)
    assert len(set(msgs)) == 1, msgs
    assert f"they differ in {field} (" in msgs[0] and f"build every rank with the same {field}" in msgs[0]
    assert "fingerprint 0x" in msgs[0]


def test_a_peer_input_error_names_every_bad_value_on_every_rank() -> None:
    def body(rank: int, gather: Any) -> tuple[str, dict]:
        d = PrefillDelayer(3, 1, None, ServerArgs(**SA), 3, 0.5, gather=gather)
        with pytest.raises(PeerInputError) as info:
            d.negotiate(True, float("nan") if rank == 1 else 0.9, running_batch=-1 if rank == 1 else 0,
                        waiting_queue_len=-7 if rank == 2 else 0)
        return str(info.value), info.value.bad_values

    outs = run_ranks(3, body)
    assert len({o[0] for o in outs}) == 1
    # rank 2's one value with what it expected; rank 1's two values, whose expectations would not fit its row
    one = f"waiting_queue_len=-7 (expected 0 <= value <= {MAX_COUNT})"
    assert outs[0][0] == f"pass 1: invalid negotiate input on ranks 1, 2 (rank 1: token_usage=nan, running_batch=-1; rank 2: {one})"
    assert outs[0][1] == {1: "token_usage=nan, running_batch=-1", 2: one}


def test_without_the_second_row_the_message_says_what_is_unknown() -> None:
    """A gather that fails when asked again: the pass still fails alike, and the message says the detail is missing."""
    def body(rank: int, gather: Any) -> str:
        calls = {"n": 0}

        def once(row: Any) -> Any:
            calls["n"] += 1
            if calls["n"] > 1:
                raise TimeoutError("peer gone")
            return gather(row)

        d = PrefillDelayer(2, 1, None, ServerArgs(**SA), 3 + rank, 0.5, gather=once)
        with pytest.raises(ConfigMismatchError) as info:
            d.negotiate(True, 0.9)
        return str(info.value)

    msg = run_ranks(2, body)[0]
    assert "which field differs is unknown: asking the ranks failed: TimeoutError: peer gone" in msg
    assert "build every rank with the same max_delay_passes, token_usage_low_watermark" in msg


def test_text_rows_round_trip_and_cut_at_a_character() -> None:
    assert row_texts(text_row("token_usage=nan", 3) + text_row("", 3), 3) == ["token_usage=nan", ""]
    long = "prefillable=é" * 10
    cut = row_texts(text_row(long, 2), 2)[0]
    assert cut.endswith("...") and len(cut.encode()) <= 16 and long.startswith(cut[:-3])


def _over_gloo(rank: int, world: int) -> dict[str, str]:
    import torch.distributed as dist

    out = {}
    sa = ServerArgs(**SA)
    d = PrefillDelayer(world, 1, dist.group.WORLD, sa, 3 + rank, 0.5)
    try:
        d.negotiate(True, 0.9)
    except ConfigMismatchError as err:
        out["mismatch"] = str(err)
    d = PrefillDelayer(world, 1, dist.group.WORLD, sa, 3, 0.5)
    try:
        d.negotiate(True, 0.9, waiting_queue_len=-3 if rank == 1 else 0)
    except PeerInputError as err:
        out["bad"] = str(err)
    after = d.negotiate(True, 0.9)  # the extra row kept the group in step
    out["after"] = after.output_reason
    return out


@pytest.mark.multiprocess
def test_the_detail_over_real_gloo_ranks() -> None:
    outs = results(spawn_gloo(2, _over_gloo))
    assert outs[0] == outs[1]
    assert "they differ in max_delay_passes" in outs[0]["mismatch"]
    assert outs[0]["bad"] == f"pass 1: invalid negotiate input on rank 1 (rank 1: waiting_queue_len=-3 (expected 0 <= value <= {MAX_COUNT}))"
    assert outs[0]["after"] == "no_wait"
