"""The metrics hook and the Prometheus collector: SGLang's names, labels, label values and buckets."""

from __future__ import annotations

from typing import Any

import pytest

prometheus_client = pytest.importorskip("prometheus_client")

from prefill_delayer.runtime import (  # noqa: E402
    PrefillDelayer,
    PrefillDelayerSinglePassExecutor,
    PrometheusPrefillDelayerMetrics,
    ServerArgs,
    run_ranks,
)
from prefill_delayer.runtime.metrics import forward_passes_buckets, wait_seconds_buckets  # noqa: E402

LABELS = {"model_name": "m", "engine_type": "unified", "tp_rank": 0}


def sample(registry: Any, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.mark.parametrize("max_delay, expected", [
    (30, [0, 5, 20, 29]),
    (100, [0, 5, 20, 50, 99]),
    (300, [0, 5, 20, 50, 100, 200, 299]),
    (1, [0]),
])
def test_forward_passes_buckets_follow_sglang(max_delay: int, expected: list[int]) -> None:
    assert forward_passes_buckets(max_delay) == expected


def test_wait_seconds_buckets_follow_sglang() -> None:
    assert wait_seconds_buckets() == [0, 1, 2, 5, 10, 20, 50, 100, 200, 500]
    assert wait_seconds_buckets([0.5, 1]) == [0, 0.5, 1]


def test_exposition_uses_sglangs_names_labels_and_buckets() -> None:
    reg = prometheus_client.CollectorRegistry()
    m = PrometheusPrefillDelayerMetrics(30, registry=reg, labels=LABELS)
    m.observe_prefill_delayer_outcome(forward_passes=3, wait_seconds=0.25, input_estimation="all", output_allow=True,
                                      output_reason="wait_success", actual_execution=True)
    m.observe_prefill_delayer_outcome(forward_passes=0, wait_seconds=0.0, input_estimation="mixed", output_allow=False,
                                      output_reason="delay", actual_execution=False)
    m.observe_prefill_delayer_outcome(forward_passes=7, wait_seconds=1.0, input_estimation="all", output_allow=True,
                                      output_reason="no_wait", actual_execution=False)  # allowed but not run: counter only
    text = prometheus_client.generate_latest(reg).decode()
    assert "# TYPE sglang:prefill_delayer_wait_forward_passes histogram" in text
    assert "# TYPE sglang:prefill_delayer_wait_seconds histogram" in text
    assert "# TYPE sglang:prefill_delayer_outcomes_total counter" in text
    base = {k: str(v) for k, v in LABELS.items()}
    passes = "sglang:prefill_delayer_wait_forward_passes"
    assert [sample(reg, passes + "_bucket", **base, le=le) for le in ("0.0", "5.0", "20.0", "29.0", "+Inf")] == [0, 1, 1, 1, 1]
    assert sample(reg, passes + "_sum", **base) == 3.0 and sample(reg, passes + "_count", **base) == 1.0
    seconds = "sglang:prefill_delayer_wait_seconds"
    assert sample(reg, seconds + "_bucket", **base, le="0.0") == 0 and sample(reg, seconds + "_bucket", **base, le="1.0") == 1
    assert sample(reg, seconds + "_count", **base) == 1.0 and sample(reg, seconds + "_sum", **base) == 0.25
    outcomes = "sglang:prefill_delayer_outcomes_total"
    assert sample(reg, outcomes, **base, input_estimation="all", output_allow="true", output_reason="wait_success",
                  actual_execution="true") == 1.0
    assert sample(reg, outcomes, **base, input_estimation="mixed", output_allow="false", output_reason="delay",
                  actual_execution="false") == 1.0
    assert sample(reg, outcomes, **base, input_estimation="all", output_allow="true", output_reason="no_wait",
                  actual_execution="false") == 1.0


def test_reserved_label_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="reserved"):
        PrometheusPrefillDelayerMetrics(30, registry=prometheus_client.CollectorRegistry(), labels={"output_reason": "x"})


def test_delayer_feeds_the_collector_once_per_pass() -> None:
    reg = prometheus_client.CollectorRegistry()
    metrics = [PrometheusPrefillDelayerMetrics(3, registry=reg, labels={"dp_rank": 0})]

    def body(rank: int, gather: Any) -> None:
        d = PrefillDelayer(2, 1, None, ServerArgs(enable_dp_attention=True), 3, None,
                           metrics[0] if rank == 0 else None, gather=gather)
        for prefillable in ([True, False], [True, False], [True, False], [False, False]):
            ex = PrefillDelayerSinglePassExecutor(d, 0.9)
            allow = ex.negotiate_should_allow_prefill(True) if prefillable[rank] else False
            ex.finalize(actual_prefill=allow)

    run_ranks(2, body)

    def outcome(estimation: str, allow: str, reason: str, run: str) -> float:
        return sample(reg, "sglang:prefill_delayer_outcomes_total", dp_rank="0", input_estimation=estimation,
                      output_allow=allow, output_reason=reason, actual_execution=run)

    assert outcome("mixed", "false", "delay", "false") == 2.0
    assert outcome("mixed", "true", "wait_timeout", "true") == 1.0
    assert outcome("none", "true", "", "false") == 1.0
    assert sample(reg, "sglang:prefill_delayer_wait_forward_passes_count", dp_rank="0") == 1.0
    assert sample(reg, "sglang:prefill_delayer_wait_forward_passes_bucket", dp_rank="0", le="2.0") == 1.0
    assert sample(reg, "sglang:prefill_delayer_wait_forward_passes_bucket", dp_rank="0", le="0.0") == 0.0


def test_no_extra_labels_is_a_valid_collector() -> None:
    """Without labels the histograms have no label names: they are observed directly."""
    reg = prometheus_client.CollectorRegistry()
    m = PrometheusPrefillDelayerMetrics(30, registry=reg)
    m.observe_prefill_delayer_outcome(
        forward_passes=3, wait_seconds=0.5, input_estimation="all", output_allow=True, output_reason="wait_success", actual_execution=True
    )
    assert reg.get_sample_value("sglang:prefill_delayer_wait_forward_passes_count") == 1
    assert reg.get_sample_value("sglang:prefill_delayer_wait_seconds_sum") == 0.5
    outcome = dict(input_estimation="all", output_allow="true", output_reason="wait_success", actual_execution="true")
    assert reg.get_sample_value("sglang:prefill_delayer_outcomes_total", outcome) == 1
