"""Recording a pass's outcome: the seed's metrics hook, and a Prometheus collector with SGLang's names.

Any object with ``observe_prefill_delayer_outcome(forward_passes=, wait_seconds=,
input_estimation=, output_allow=, output_reason=, actual_execution=)`` can be
the ``metrics_collector`` (SGLang's ``SchedulerMetricsCollector`` is one).
``PrometheusPrefillDelayerMetrics`` implements it on ``prometheus_client`` with
the metric names, label names, label values and bucket rules SGLang exports, so
dashboards built on SGLang's metrics keep working.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Iterable, Mapping, Optional

from ..spec.errors import ConfigError
from .server_args import DEBUG_LOG_ENV, get_bool_env_var

logger = logging.getLogger(__name__)

# Read once at import, as the seed does.
_DEBUG_LOG = get_bool_env_var(DEBUG_LOG_ENV)

WAIT_FORWARD_PASSES = "sglang:prefill_delayer_wait_forward_passes"
WAIT_SECONDS = "sglang:prefill_delayer_wait_seconds"
OUTCOMES_TOTAL = "sglang:prefill_delayer_outcomes_total"
OUTCOME_LABELS = ("input_estimation", "output_allow", "output_reason", "actual_execution")
DEFAULT_FORWARD_PASSES_BUCKETS = (5, 20, 50, 100, 200)
DEFAULT_WAIT_SECONDS_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500)


def forward_passes_buckets(max_delay_passes: int, buckets: Optional[Iterable[float]] = None) -> list[float]:
    """SGLang's rule: the given (or default) bounds below ``max_delay_passes``, plus 0 and ``max - 1``.

    0 separates "no wait"; ``max - 1`` separates a wait that ran into the cap.
    """
    chosen = buckets or DEFAULT_FORWARD_PASSES_BUCKETS
    return sorted({x for x in chosen if x < max_delay_passes} | {0, max_delay_passes - 1})


def wait_seconds_buckets(buckets: Optional[Iterable[float]] = None) -> list[float]:
    """SGLang's rule: the given (or default) bounds plus 0."""
    return sorted(set(buckets or DEFAULT_WAIT_SECONDS_BUCKETS) | {0})


class PrometheusPrefillDelayerMetrics:
    """The delayer's three SGLang metrics on a ``prometheus_client`` registry.

    ``labels`` are constant labels of this scheduler (SGLang uses model_name,
    engine_type, tp_rank, ...); they come first in every metric's label names,
    as in SGLang. Histograms are observed only when the pass allowed prefill and
    prefill actually ran; the counter counts every pass, with booleans spelt
    ``"true"``/``"false"``.

    ``prometheus_client`` accepts ':' in metric names (the Prometheus data model
    reserves it for recording rules but allows it; only label names exclude it),
    so SGLang's names are used verbatim. A version that rejected them would fail
    here with its own ``ValueError`` rather than export different names.
    """

    def __init__(
        self,
        max_delay_passes: int,
        registry: Any = None,
        labels: Optional[Mapping[str, Any]] = None,
        *,
        forward_passes_bucket_bounds: Optional[Iterable[float]] = None,
        wait_seconds_bucket_bounds: Optional[Iterable[float]] = None,
    ) -> None:
        from prometheus_client import REGISTRY, Counter, Histogram

        if isinstance(max_delay_passes, bool) or not isinstance(max_delay_passes, int) or max_delay_passes < 0:
            raise ValueError(f"max_delay_passes must be an int >= 0, got {max_delay_passes!r}")
        self.labels: dict[str, str] = {str(k): str(v) for k, v in (labels or {}).items()}
        clash = set(self.labels) & set(OUTCOME_LABELS)
        if clash:
            raise ValueError(f"labels {sorted(clash)} are reserved for the outcome counter")
        reg = REGISTRY if registry is None else registry
        self.registry = reg  # the decision log counts its failures here too
        names = list(self.labels)
        self.wait_forward_passes = Histogram(
            WAIT_FORWARD_PASSES,
            "Histogram of forward passes waited by prefill delayer.",
            labelnames=names,
            buckets=forward_passes_buckets(max_delay_passes, forward_passes_bucket_bounds),
            registry=reg,
        )
        self.wait_seconds = Histogram(
            WAIT_SECONDS,
            "Histogram of wait time in seconds by prefill delayer.",
            labelnames=names,
            buckets=wait_seconds_buckets(wait_seconds_bucket_bounds),
            registry=reg,
        )
        self.outcomes_total = Counter(
            OUTCOMES_TOTAL,
            "Prefill delayer outcome counts.",
            labelnames=[*names, *OUTCOME_LABELS],
            registry=reg,
        )
        # Label children resolved once: observing is then a dict lookup and an add. A metric
        # without label names is its own child (prometheus_client refuses .labels() on it).
        self._passes_child = self.wait_forward_passes.labels(**self.labels) if self.labels else self.wait_forward_passes
        self._seconds_child = self.wait_seconds.labels(**self.labels) if self.labels else self.wait_seconds
        self._outcome_children: dict[tuple[str, bool, str, bool], Any] = {}

    def observe_prefill_delayer_outcome(
        self,
        forward_passes: int,
        wait_seconds: float,
        input_estimation: str,
        output_allow: bool,
        output_reason: str,
        actual_execution: bool,
    ) -> None:
        if output_allow and actual_execution:
            self._passes_child.observe(forward_passes)
            self._seconds_child.observe(wait_seconds)
        key = (input_estimation, bool(output_allow), output_reason, bool(actual_execution))
        child = self._outcome_children.get(key)
        if child is None:
            child = self._outcome_children[key] = self.outcomes_total.labels(
                **self.labels,
                input_estimation=input_estimation,
                output_allow=str(bool(output_allow)).lower(),
                output_reason=output_reason,
                actual_execution=str(bool(actual_execution)).lower(),
            )
        child.inc(1)


OBSERVE = "observe_prefill_delayer_outcome"  # what a metrics collector has (SGLang's SchedulerMetricsCollector does)


def check_collector(metrics_collector: Any) -> None:
    """``ConfigError`` for a ``metrics_collector`` without ``observe_prefill_delayer_outcome``: said at construction,
    not as an ``AttributeError`` from the first pass's ``finalize``, which would leave that pass unended."""
    if metrics_collector is not None and not callable(getattr(metrics_collector, OBSERVE, None)):
        raise ConfigError(f"metrics_collector must have {OBSERVE}(forward_passes=, wait_seconds=, input_estimation=, "
                          "output_allow=, output_reason=, actual_execution=) (SGLang's SchedulerMetricsCollector, or "
                          f"PrometheusPrefillDelayerMetrics), got {type(metrics_collector).__name__}")


def record_single_pass_result(
    actual_execution: bool, output: Any, metrics_collector: Optional[Any], host: Any, *, debug_log_enabled: Optional[bool] = None
) -> None:
    """The seed's ``_record_single_pass_result``: optional debug log, then the metrics hook.

    ``host`` is the policy's SGLang binding: its debug line and what SGLang's
    metrics read of a decision (the wait it ends, the gathered status).
    ``debug_log_enabled`` is the releases' per-delayer switch (0.5.18 on: on
    attn-TP rank 0 only), already combined with ``SGLANG_PREFILL_DELAYER_DEBUG_LOG``;
    ``None`` reads the variable alone, as the seed does.
    """
    if _DEBUG_LOG if debug_log_enabled is None else debug_log_enabled:
        line = host.debug_line(output, actual_execution)
        if line is not None:
            logger.info(line)
    if metrics_collector is not None:
        forward_passes, wait_seconds, input_estimation = host.metrics(output)
        metrics_collector.observe_prefill_delayer_outcome(
            forward_passes=forward_passes,
            wait_seconds=wait_seconds,
            input_estimation=input_estimation,
            output_allow=output.output_allow,
            output_reason=output.output_reason,
            actual_execution=actual_execution,
        )


# ----- the decision log's own failures ----------------------------------------------

DECISION_LOG_ERRORS = "prefill_delayer_decision_log_errors_total"
_COUNTER_ATTR = "_prefill_delayer_decision_log_errors"  # the counter, kept on the registry it is registered on
_decision_log_lock = threading.Lock()


def count_decision_log_error(reason: str, registry: Any = None) -> bool:
    """Count a decision log that stopped (``reason``: open, write, encode, behind); False without prometheus_client.

    The counter is ours, not SGLang's: registered on first use, once per registry
    (the default one unless ``registry`` is given).
    """
    try:
        from prometheus_client import REGISTRY, Counter
    except ImportError:
        return False
    reg = REGISTRY if registry is None else registry
    with _decision_log_lock:
        counter = getattr(reg, _COUNTER_ATTR, None)
        if counter is None:
            counter = Counter(
                DECISION_LOG_ERRORS,
                "Prefill delayer decision logs that stopped because they could not be written.",
                labelnames=["reason"],
                registry=reg,
            )
            setattr(reg, _COUNTER_ATTR, counter)
    counter.labels(reason=reason).inc(1)
    return True
