"""The ``simulate`` subcommand's options and scenarios: argparse only, so the CLI can list them
without loading the simulator (``sim.cli`` runs it).

Every option defaults to "not given"; a run's settings are the base defaults,
then the ``--scenario``'s, then the options given, in that order.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..spec.config import parse_setting
from ..spec.fields import MAX_COUNT
from ..spec.registry import all_profiles, policy_of
from .suite import SUITES
from .suite_goal import OFF_SLACK, P99_SLACK, TOK_SLACK

# The profiles whose policy the simulated scheduler can consult (the policy has a ``SimBinding``).
SIMULATED = tuple(p for p in all_profiles() if policy_of(p).sim is not None)

WORKLOADS = ("poisson", "bursty", "long-prompt", "trace")
PROGRESS_AUTO = "auto"

# Without --scenario. A workload must be named (--workload or --scenario).
BASE: dict[str, Any] = {
    "dp_size": 8,
    "passes": 10_000,
    "duration": None,
    "warmup": 0.0,
    "seed": 0,
    "max_running_requests": 128,
    "max_total_tokens": 1_000_000,
    "chunked_prefill_size": 16384,
    "max_prefill_tokens": 16384,
    "mixed_chunk": False,
    "page_size": 1,
    "scheduler": "model",
    "prefix_cache": False,
    "load_balance_method": "round_robin",
    "health_check_interval": None,
    "health_dispatch": None,
    "resubmit_gap": 0.0,
    "max_delay_passes": 30,
    "token_usage_low_watermark": None,
    "queue_min_ratio": None,
    "max_delay_ms": None,
    "prefill_max_requests": None,
    "profile": list(SIMULATED),
    "tracker": None,
    "workload": None,
    "rate": None,
    "burst": None,
    "concurrency": None,
    "drift": None,
    "prompt_tokens": None,
    "output_tokens": None,
    "trace": None,
    "wave": None,
    "wave_prompt_tokens": None,
    "wave_output_tokens": None,
    "cost": None,
    "cost_floor": None,
    "cost_attn_token": None,
    "cost_attn_decode": None,
    "cost_moe_token": None,
    "cost_idle_pass": None,
    "gather": "lockstep",
    "set": [],
    "plot": None,
    "json": None,
    "wide": False,
    "progress": PROGRESS_AUTO,
    "goal": None,
    "load_scale": [1.0],
    "seeds": None,
    "jobs": 1,
}

SCENARIOS: dict[str, dict[str, Any]] = {
    # SGLang #32880: Kimi-K3, dp16, 128 running slots per rank, saturated; a refill
    # wave (prefix-cached prompts, few tokens to compute) ratchets max_prefill_bs.
    "32880": {
        "dp_size": 16,
        "max_running_requests": 128,
        "max_total_tokens": 1_300_000,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "workload": "poisson",
        "rate": 5.0,  # what 0.5.17 on serve with the 0.20 s decode floor, and the seed does not
        "prompt_tokens": "2000:6000",
        "output_tokens": "500:1500",
        "wave": 80,
        "wave_prompt_tokens": "64",
        "wave_output_tokens": "200:600",
        "passes": 1_000_000,
        "duration": 900.0,
        "warmup": 120.0,
        "cost": "32880",
        "profile": ["seed", "sglang-0.5.17", "sglang-0.5.18", "hardened"],
    },
    # SGLang #35241: DeepSeek-V4-Pro, DP=8 with DP attention, long prompts, closed loop: as the
    # reporter's runs in PR #35721 (C16, 60k-token prompts, 1 output token, an effective 8k chunk
    # per rank, GET /health polled with generation on: 48-61 probes in a ~100 s run, one per 2 s);
    # --drift sets how far apart (in chunks) the ranks start. The gap between the next requests of
    # clients whose requests finished in the same pass is not in the report: 30 ms is assumed (the
    # tokenizer manager turning one 60k-token prompt into ids); docs/simulation.md shows the result
    # for gaps of 0 to 300 ms.
    "35241": {
        "dp_size": 8,
        "max_running_requests": 64,
        "max_total_tokens": 1_000_000,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        "workload": "long-prompt",
        "concurrency": 16,
        "prompt_tokens": "60000",
        "output_tokens": "1",
        "drift": "0",
        "health_check_interval": 2.0,
        "resubmit_gap": 0.03,
        "passes": 1_000_000,
        "duration": 1200.0,
        "warmup": 200.0,
        "profile": ["sglang-0.5.17", "sglang-0.5.22", "sglang-0.5.23", "hardened", "off"],
    },
}


def _interval(text: str) -> Any:
    """``--health-check-interval``: seconds, or ``off`` (no probes; None). A bad number is the config's error."""
    if text.strip().lower() == "off":
        return None
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds or off, got {text!r}") from None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``simulate`` options (every default is "not given": see the module docstring)."""
    S = argparse.SUPPRESS
    p.add_argument("--suite", metavar="NAME", default=S, help=f"run a benchmark suite ({', '.join(SUITES)}) of workloads against every --profile (default: off and every simulated profile), each beside its bound; --suite list shows the workloads")
    p.add_argument("--goal", metavar="POLICY", default=S, help="with --suite: judge POLICY against every other policy run, workload by workload (input tok/s within "
                   f"{100 * TOK_SLACK:g}%% of the best other's and {100 * OFF_SLACK:g}%% of off's, TTFT p99 within {100 * P99_SLACK:g}%% "
                   "of the best other's, a workload's share of the bound where it sets one), then every policy run judged "
                   "the same way (the standings)")
    p.add_argument("--load-scale", type=float, action="append", metavar="X", default=S, help="with --suite: scale every "
                   "workload's offered load (its share of the saturated throughput) by X (1.03: 3%% more requests per "
                   "second), to see whether a verdict holds a few percent from the suite's loads; the calibration "
                   "scenarios keep their own arrivals. Repeat it to sweep: the suite runs at each X, and the tables, "
                   "--json and --plot give every workload's TTFT p99 and input tok/s against the load (default 1)")
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default=S, help="start from a calibration scenario's settings (SGLang #32880 or #35241); options given override them")
    p.add_argument("--profile", action="append", metavar="NAME", default=S, help=f"policy to simulate (repeatable): {', '.join(SIMULATED)}, sglang-X for a release X, or off (no delayer); NAME+TRACKER (aligned+window) runs one with another max_prefill_bs tracker beside the others with their own; default: every profile, or the scenario's")
    p.add_argument("--tracker", choices=("lifetime", "decay", "window"), default=S, help="max_prefill_bs tracker for every profile; default: each release's own (lifetime up to 0.5.16, decay in 0.5.17, window from 0.5.18; window for hardened, decay for aligned, which keeps its own; off, with no delayer, has none)")
    g = p.add_argument_group("engine (per DP rank)")
    g.add_argument("--dp-size", type=int, metavar="N", default=S, help="DP ranks (default 8)")
    g.add_argument("--max-running-requests", type=int, metavar="N", default=S, help="running requests per rank (default 128)")
    g.add_argument("--max-total-tokens", type=int, metavar="N", default=S, help="KV cache tokens per rank (default 1000000)")
    g.add_argument("--chunked-prefill-size", type=int, metavar="N", default=S, help="chunk budget: prefill tokens per rank per pass (default 16384)")
    g.add_argument("--max-prefill-tokens", type=int, metavar="N", default=S, help="input-token budget per pass (default 16384)")
    g.add_argument("--mixed-chunk", action="store_true", default=S, help="decode the running requests in prefill passes too (SGLang --enable-mixed-chunk)")
    g.add_argument("--page-size", type=int, metavar="N", default=S, help="KV page size in tokens (SGLang --page-size; default 1, DeepSeek-V4 uses 256)")
    g.add_argument("--scheduler", choices=("model", "sglang"), default=S, help="model: this package's model of SGLang 0.5.23's scheduler (default, fast); sglang: SGLang 0.5.23's own scheduler code on every rank (needs an environment where sglang.srt.managers.scheduler imports)")
    g.add_argument("--prefix-cache", action="store_true", default=S, help="--scheduler sglang: SGLang's radix cache on (default: off, --disable-radix-cache)")
    dpc = p.add_argument_group("DP controller")
    dpc.add_argument("--load-balance-method", choices=("round_robin", "total_requests", "total_tokens"), default=S, help="SGLang --load-balance-method (default round_robin)")
    dpc.add_argument("--health-check-interval", type=_interval, metavar="S|off", default=S, help="send GET /health's generation probe every S simulated seconds, or off (default: off; 2 in the #35241 scenario)")
    dpc.add_argument("--health-dispatch", choices=("shared", "separate"), default=S, help="how probes are dispatched: shared with the user rotation (SGLang up to 0.5.22) or on their own counter (0.5.23, #35721); default: each release's own")
    dpc.add_argument("--resubmit-gap", type=float, metavar="S", default=S, help="closed loop: seconds between the next requests of clients whose requests finished in the same pass (default 0)")
    d = p.add_argument_group("delayer (SGLang's --prefill-delayer-* options)")
    d.add_argument("--max-delay-passes", type=int, metavar="N", default=S, help="default 30")
    d.add_argument("--token-usage-low-watermark", type=float, metavar="X", default=S, help="default: off")
    d.add_argument("--queue-min-ratio", type=float, metavar="R", default=S, help="queue trigger; default: off")
    d.add_argument("--max-delay-ms", type=float, metavar="MS", default=S, help="queue-wait cap in simulated ms (default 5000)")
    d.add_argument("--prefill-max-requests", type=int, metavar="N", default=S, help="default: unset")
    d.add_argument("--set", action="append", metavar="NAME=VALUE", type=policy_setting, default=S,
                   help="any other parameter of the simulated policy, by its name in the spec (repeatable), "
                   "e.g. --set prefill_decode_interval=4")
    w = p.add_argument_group("workload")
    w.add_argument("--workload", choices=WORKLOADS, default=S, help="arrivals: poisson, bursty, long-prompt (closed loop) or trace (replay --trace)")
    w.add_argument("--rate", type=float, metavar="R", default=S, help="requests per second (poisson, bursty)")
    w.add_argument("--burst", type=int, metavar="N", default=S, help="requests per burst (bursty); at most what the host's memory holds at once")
    w.add_argument("--concurrency", type=int, metavar="N", default=S, help="requests in flight (long-prompt)")
    w.add_argument("--drift", metavar="D,D,...|random:K", default=S, help="long-prompt: chunks each rank starts ahead (one per rank, or one for all), or a seeded draw from 0..K; "
                   "fewer than the shortest prompt's chunks")
    w.add_argument("--prompt-tokens", metavar="N|LO:HI", default=S, help="prompt tokens, fixed or uniform")
    w.add_argument("--output-tokens", metavar="N|LO:HI", default=S, help="output tokens, fixed or uniform")
    w.add_argument("--trace", metavar="FILE", default=S, help="CSV or JSONL with arrival, prompt_tokens, output_tokens (trace); replayed from its first arrival, "
                   "which becomes simulated time 0, and the run ends when every request has been served or at --duration")
    w.add_argument("--wave", type=int, metavar="N", default=S, help="also N requests per rank arriving together at t=0 (a refill after a drain); at most what this "
                   "machine's memory holds at once")
    w.add_argument("--wave-prompt-tokens", metavar="N|LO:HI", default=S, help="the wave's prompt tokens (default: --prompt-tokens)")
    w.add_argument("--wave-output-tokens", metavar="N|LO:HI", default=S, help="the wave's output tokens (default: --output-tokens)")
    c = p.add_argument_group("pass cost: max(FLOOR, max_r(ATTN_TOKEN*prefill_r + ATTN_DECODE*decode_r) + MOE_TOKEN*sum_r(prefill_r + decode_r)), IDLE_PASS without a forward (seconds)")
    c.add_argument("--cost-floor", type=float, metavar="S", default=S, help="the shortest forward (default 0.040, assumed; 0.20 in the #32880 scenario)")
    c.add_argument("--cost-attn-token", type=float, metavar="S", default=S, help="attention per prefill token on a rank (default 1.58e-5, SGLang #35241)")
    c.add_argument("--cost-attn-decode", type=float, metavar="S", default=S, help="attention per decoding request on a rank (default 0.0002, assumed)")
    c.add_argument("--cost-moe-token", type=float, metavar="S", default=S, help="MoE per token over all ranks (default 8.68e-6, SGLang #35241)")
    c.add_argument("--cost-idle-pass", type=float, metavar="S", default=S, help="a pass where no rank runs a forward (default 0.0015, estimated)")
    r = p.add_argument_group("run and output")
    r.add_argument("--passes", type=int, metavar="N", default=S, help="stop after N passes (default 10000, or none with --duration); without --duration, at most what "
                   "the host's memory holds of every profile's passes")
    r.add_argument("--duration", type=float, metavar="S", default=S, help="stop at S simulated seconds (with --suite: every "
                   "workload's, its warm-up cut in proportion where S is shorter than its own run, as the header says); "
                   "S short of where the simulated clock, a float, steps by more than the shortest pass and could not "
                   "count one")
    r.add_argument("--warmup", type=float, metavar="S", default=S, help="leave the first S simulated seconds out of the table")
    r.add_argument("--seed", type=int, metavar="N", default=S, help="RNG seed (default 0): same seed, same run")
    r.add_argument("--seeds", metavar="LIST", default=S, help="with --suite: run the suite at each seed of LIST (0-7, "
                   "0,3,5), a sweep like --load-scale's (with it, every load at every seed): at one load the draw of "
                   "arrivals decides on which side of a policy's saturation cliff a run lies, so a verdict at one "
                   "seed is one draw; with --goal, each policy's count in each cell and in all, and the goal "
                   f"policy's verdict per workload and cell; at most {MAX_COUNT} runs in all, the most of any count in "
                   "the spec")
    r.add_argument("--jobs", type=int, metavar="N", default=S, help="with --suite: run N of its runs at once, each in "
                   "a process of its own (default 1; at most the cores, as each run is single-threaded); "
                   "the figures are the same as one at a time")
    r.add_argument("--gather", choices=("lockstep", "threads"), default=S, help="in-process gather: one thread in lock-step (default), or a thread per rank over runtime.InProcessGroup")
    r.add_argument("--plot", metavar="PNG", default=S, help="write the figure (needs matplotlib: the [plot] extra)")
    r.add_argument("--json", metavar="PATH", default=S, help="write the results as JSON to the file PATH (not standard "
                   "output, which has the tables: - is refused)")
    r.add_argument("--wide", action="store_true", default=S, help="print every column of the comparison table (default: "
                   "the compact one: throughput, TTFT, unserved requests, mixed passes); --json has every figure either way")
    shown = r.add_mutually_exclusive_group()  # both would be the last one winning, silently
    shown.add_argument("--progress", dest="progress", action="store_const", const=True, default=S, help="show a progress bar on stderr (default: only when stderr is a terminal)")
    shown.add_argument("--no-progress", dest="progress", action="store_const", const=False, default=S, help="never show the progress bar")


def policy_setting(text: str) -> tuple[str, Any]:
    """``--set NAME=VALUE`` (``spec.config.parse_setting``), an argparse type."""
    try:
        return parse_setting(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def settings(args: argparse.Namespace) -> tuple[dict[str, Any], set[str]]:
    """The run's settings (base, then scenario, then given options) and the names given on the command line."""
    given = {k: v for k, v in vars(args).items() if k not in ("command", "scenario")}
    merged = dict(BASE)
    scenario = getattr(args, "scenario", None)
    if scenario is not None:
        merged.update(SCENARIOS[scenario])
    merged.update(given)
    merged["scenario"] = scenario
    return merged, set(given)
