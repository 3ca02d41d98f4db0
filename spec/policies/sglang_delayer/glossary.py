"""Names and meanings of the symbols the delayer's guards read, as data.

The generated docs (``docgen``) render each guard as a formula by
evaluating it on symbolic stand-ins for ``c``, ``v`` and ``s``; this table says
what each attribute is called there and what it means. A guard that reads an
attribute missing here still renders, under its Python name, marked
undocumented (and the docs tests fail until it is added).
"""

from __future__ import annotations

from ...glossary import ARG, CONFIG, LOCAL, VIEW, Symbol

SYMBOLS: tuple[Symbol, ...] = (
    # the gathered view (row.View), over the counted rows unless said otherwise
    Symbol(VIEW, "n", "n", "counted rows: the first rank of each DP group (dp_size with DP attention, else 1)"),
    Symbol(VIEW, "num_prefillable", "num_prefillable", "counted rows with prefillable = 1"),
    Symbol(VIEW, "num_force", "num_force", "counted rows with force = 1 (the seed's num_token_watermark_force_allow)"),
    Symbol(VIEW, "running_batch", "RB", "max of running_batch over the counted rows"),
    Symbol(VIEW, "max_prefill_bs", "PB", "max of max_prefill_bs over the counted rows"),
    Symbol(VIEW, "waiting_queue_len", "WQ", "max of waiting_queue_len over the counted rows"),
    Symbol(VIEW, "timeout_any", "timeout_any", "some counted row has timeout_expired = 1 (read with gathered-timeout)"),
    Symbol(VIEW, "mrr_max", "mrr_max", "max of max_running_requests over all gathered rows (read with gathered-max-running-requests)"),
    # this rank's extended state and local readings (variables.Local)
    Symbol(LOCAL, "waiting", "waiting", "a wait is in progress (control state delaying)"),
    Symbol(LOCAL, "delayed_count", "delayed_count", "consecutive delays so far in the current wait (0 when none)"),
    Symbol(LOCAL, "wait_start", "wait_start", "this rank's clock when the wait began, seconds (= now when no wait)"),
    Symbol(LOCAL, "skip_first_armed", "skip_first_armed", "the one-shot skip (the seed's skip_first_delayer), true at construction"),
    Symbol(LOCAL, "now", "now", "this rank's clock reading for this pass, seconds"),
    Symbol(LOCAL, "mrr", "mrr_local", "this rank's own max_running_requests argument"),
    # the configuration (config.DelayerConfig), including its derived views
    Symbol(CONFIG, "enable_dp_attention", "enable_dp_attention", "DP attention is on", flag=True),
    Symbol(CONFIG, "watermark_on", "watermark_on", "token_usage_low_watermark is set", flag=True),
    Symbol(CONFIG, "queue_on", "queue_on", "queue_min_ratio is set (the queue trigger exists)", flag=True),
    Symbol(CONFIG, "pmr_on", "prefill_max_requests_set", "prefill_max_requests is set", flag=True),
    Symbol(CONFIG, "pmr", "prefill_max_requests", "prefill_max_requests (SGLang's admission cap per prefill batch)"),
    Symbol(CONFIG, "watermark", "W", "token_usage_low_watermark"),
    Symbol(CONFIG, "queue_ratio", "R", "queue_min_ratio"),
    Symbol(CONFIG, "max_delay_passes", "max_delay_passes", "max_delay_passes"),
    Symbol(CONFIG, "max_delay_ms", "max_delay_ms", "max_delay_ms (None means 5000)"),
    Symbol(CONFIG, "dp_size", "dp_size", "dp_size"),
    # parameters of the local guards
    Symbol(ARG, "prefillable", "prefillable", "this rank's local_prefillable argument"),
    Symbol(ARG, "token_usage", "token_usage", "this rank's KV token usage, 0..1"),
)
