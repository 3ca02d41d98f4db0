"""``prefill-delayer simulate``: build the run from the options, simulate, print the tables.

Any mistake in the options, the trace or the workload is one line on stderr and
exit 2 (``prefill-delayer``'s ``main`` prints it); the run itself writes the tables
on stdout, the progress bar (when shown) on stderr.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Optional, TextIO

from ..files import Outputs
from ..runtime.decision_log import options_from
from ..spec.errors import ConfigError
from .config import SimConfig, Variant
from .cost import SGLANG_32880, SGLANG_35241, CostModel
from .engine import simulate
from .errors import SimInputError
from .options import PROGRESS_AUTO, SCENARIOS, settings
from ..spec.registry import policy_of
from .policy_site import binding_of, check_sets, policy_config
from .report import report, to_json
from .trace import load_trace
from .trackers import WINDOW, own_tracker
from .workload import Burst, Bursty, Lengths, LongPrompt, Mix, Poisson, Workload

# Which workloads each workload option applies to.
_APPLIES = {
    "rate": ("poisson", "bursty"),
    "burst": ("bursty",),
    "concurrency": ("long-prompt",),
    "drift": ("long-prompt",),
    "prompt_tokens": ("poisson", "bursty", "long-prompt"),
    "output_tokens": ("poisson", "bursty", "long-prompt"),
    "trace": ("trace",),
}
_WORKLOAD_KEYS = (*_APPLIES, "wave", "wave_prompt_tokens", "wave_output_tokens")
# sim.plot saves the figure, then re-saves it as a palette PNG (its ``_shrink``): PNG is all it writes.
PLOT_SUFFIXES = (".png",)
MAX_DP_SIZE = 256  # a pass's cost grows with the ranks (every rank's gather); past this one pass takes seconds
_REQUIRED = {
    "poisson": ("rate", "prompt_tokens", "output_tokens"),
    "bursty": ("rate", "burst", "prompt_tokens", "output_tokens"),
    "long-prompt": ("concurrency", "prompt_tokens", "output_tokens"),
    "trace": ("trace",),
}


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def build(args: argparse.Namespace) -> tuple[SimConfig, list[Variant], Workload, dict[str, Any]]:
    """The run's settings from the options; ``SimInputError`` for anything wrong."""
    s, given = settings(args)
    scenario = s["scenario"]
    if scenario is not None and "workload" in given and given and s["workload"] != SCENARIOS[scenario].get("workload"):
        # Another workload than the scenario's: its workload options no longer apply.
        for key in _WORKLOAD_KEYS:
            if key not in given:
                s[key] = None
    problem = outputs(s).problem()
    if problem:
        raise SimInputError(problem)
    if s["plot"] is not None:
        from .plot import _pyplot

        _pyplot()  # matplotlib is there, before the run rather than after it
    if "duration" in given and "passes" not in given:
        s["passes"] = sys.maxsize  # --duration alone: the run ends at that simulated time, not at 10,000 passes
    dp = s["dp_size"]
    if isinstance(dp, bool) or not isinstance(dp, int) or not 1 <= dp <= MAX_DP_SIZE:
        raise SimInputError(f"--dp-size must be an integer in [1, {MAX_DP_SIZE}], got {dp!r}")
    warmup, duration = s["warmup"], s["duration"]
    if isinstance(warmup, (int, float)) and isinstance(duration, (int, float)) and 0 < duration <= warmup:
        raise SimInputError(f"--warmup {warmup:g} must be shorter than --duration {duration:g}: the tables measure the "
                            "simulated time after the warm-up, and none would be left")
    config = _config(s)
    workload = _workload(s, given, config)
    tracker = s["tracker"]

    def tracker_of(name: str) -> Any:
        # SGLang 0.5.23's own scheduler: its tracker, whatever the profile's release had, or the one the profile's
        # delayer keeps itself (aligned's decay), which is what runs there
        if config.scheduler == "sglang" and tracker is None and "+" not in name:  # NAME+TRACKER names its own
            return own_tracker(name) or WINDOW
        return tracker

    variants = [Variant.of(name, tracker_of(name), s["health_dispatch"]) for name in dict.fromkeys(s["profile"])]
    check_sets([v.profile for v in variants], config.policy_params)
    for v in variants:  # every profile can be simulated, with its settings, before any run starts
        if v.profile is not None:
            binding_of(v.profile)
            policy_config(v.profile, config.dp_size, config.policy_settings(), config.policy_params)
            if config.scheduler == "sglang" and policy_of(v.profile).host is None:
                raise SimInputError(f"--scheduler sglang: profile {v.profile!r} is {policy_of(v.profile).title}, which "
                                    "SGLang's delayer call sites do not drive: simulate it with --scheduler model")
            if config.scheduler == "sglang":
                from .sglang_backend import host_params

                host_params(v.profile, config.policy_params)
    if config.scheduler == "sglang":
        from .sglang_backend import require_scheduler

        require_scheduler()  # one line and exit 2 where SGLang's scheduler does not import
    return config, variants, workload, s


def outputs(s: dict[str, Any]) -> Outputs:
    """``--json`` and ``--plot``; neither may be the ``--trace`` the run reads."""
    return Outputs([s["trace"]] if s["trace"] else []).file("--json", s["json"]).file("--plot", s["plot"], suffixes=PLOT_SUFFIXES)


COSTS = {"35241": SGLANG_35241, "32880": SGLANG_32880}
_COST_OPTIONS = {"cost_floor": "floor_s", "cost_attn_token": "attn_token_s", "cost_attn_decode": "attn_decode_s",
                 "cost_moe_token": "moe_token_s", "cost_idle_pass": "idle_pass_s"}


def _config(s: dict[str, Any]) -> SimConfig:
    cost = COSTS[s["cost"] or "35241"]
    changes = {field: s[key] for key, field in _COST_OPTIONS.items() if s[key] is not None}
    if changes:
        cost = CostModel(**{**{f: getattr(cost, f) for f in _COST_OPTIONS.values()}, **changes},
                         source=f"{cost.source}; --cost-* options: {', '.join(sorted(changes))}")
    return SimConfig(
        dp_size=s["dp_size"],
        max_running_requests=s["max_running_requests"],
        max_total_tokens=s["max_total_tokens"],
        chunked_prefill_size=s["chunked_prefill_size"],
        max_prefill_tokens=s["max_prefill_tokens"],
        enable_mixed_chunk=s["mixed_chunk"],
        max_delay_passes=s["max_delay_passes"],
        token_usage_low_watermark=s["token_usage_low_watermark"],
        queue_min_ratio=s["queue_min_ratio"],
        max_delay_ms=s["max_delay_ms"],
        prefill_max_requests=s["prefill_max_requests"],
        passes=s["passes"],
        duration_s=s["duration"],
        warmup_s=s["warmup"],
        seed=s["seed"],
        cost=cost,
        gather=s["gather"],
        policy_params=tuple(s["set"]),
        page_size=s["page_size"],
        scheduler=s["scheduler"],
        prefix_cache=s["prefix_cache"],
        load_balance_method=s["load_balance_method"],
        health_check_interval_s=s["health_check_interval"],
        resubmit_gap_s=s["resubmit_gap"],
    )


def _workload(s: dict[str, Any], given: set[str], config: SimConfig) -> Workload:
    kind = s["workload"]
    if kind is None:
        raise SimInputError("no workload: name one with --workload {poisson,bursty,long-prompt,trace}, or start from --scenario")
    for key, kinds in _APPLIES.items():
        if key in given and kind not in kinds:
            raise SimInputError(f"{_flag(key)} does not apply to --workload {kind} (only to {', '.join(kinds)})")
    for key in ("wave_prompt_tokens", "wave_output_tokens"):
        if key in given and s["wave"] is None:
            raise SimInputError(f"{_flag(key)} needs --wave")
    if "wave" in given and kind == "long-prompt":
        raise SimInputError("--wave does not apply to --workload long-prompt (a closed loop keeps --concurrency requests in flight)")
    missing = [_flag(k) for k in _REQUIRED[kind] if s[k] is None]
    if missing:
        raise SimInputError(f"--workload {kind} needs {', '.join(missing)}")
    if kind == "trace":
        main: Workload = load_trace(s["trace"])
    else:
        prompt = Lengths.parse(s["prompt_tokens"], "--prompt-tokens")
        output = Lengths.parse(s["output_tokens"], "--output-tokens")
        _rate_within_capacity(s["rate"], config)
        if kind == "poisson":
            main = Poisson(rate=s["rate"], prompt=prompt, output=output)
        elif kind == "bursty":
            main = Bursty(rate=s["rate"], burst=s["burst"], prompt=prompt, output=output)
        else:
            main = LongPrompt(concurrency=s["concurrency"], prompt=prompt, output=output, drift=_drift(s["drift"], config.dp_size))
    wave = s["wave"]
    if wave is None:
        return main
    if isinstance(wave, bool) or not isinstance(wave, int) or wave < 1:
        raise SimInputError(f"--wave must be an integer >= 1 (requests per rank), got {wave!r}")
    wave_prompt = s["wave_prompt_tokens"] or s["prompt_tokens"]
    wave_output = s["wave_output_tokens"] or s["output_tokens"]
    if wave_prompt is None or wave_output is None:
        raise SimInputError("--wave needs --wave-prompt-tokens and --wave-output-tokens with --workload trace")
    burst = Burst(
        count=wave * config.dp_size,
        prompt=Lengths.parse(wave_prompt, "--wave-prompt-tokens"),
        output=Lengths.parse(wave_output, "--wave-output-tokens"),
    )
    return Mix((burst, main))


def _rate_within_capacity(rate: Any, config: SimConfig) -> None:
    """Refuse an arrival rate past anything the group could run: more requests arriving in one shortest pass than
    every rank's running slots together. Such a run never ends its passes (each pass admits a flood of arrivals)
    and its queues grow without bound; no comparison is read from it."""
    if rate is None or isinstance(rate, bool) or not isinstance(rate, (int, float)):
        return
    slots = config.dp_size * config.max_running_requests
    if rate * config.cost.floor_s > slots:
        raise SimInputError(
            f"--rate {rate:g}: {rate * config.cost.floor_s:,.0f} requests would arrive in one {config.cost.floor_s:g} s pass, "
            f"more than the {slots} requests all {config.dp_size} ranks run at once; at most "
            f"{slots / config.cost.floor_s:,.0f} req/s here")


def _drift(text: Optional[str], dp_size: int) -> tuple:
    if text is None:
        return ()
    text = str(text).strip()
    if text.startswith("random:"):
        try:
            k = int(text[len("random:"):])
        except ValueError:
            k = -1
        if k < 0:
            raise SimInputError(f"--drift random:K needs an integer K >= 0, got {text!r}")
        return ("random", k)
    try:
        values = [int(x) for x in text.split(",")]
    except ValueError:
        raise SimInputError(f"--drift must be whole chunks per rank (D or D,D,...) or random:K, got {text!r}") from None
    if any(v < 0 for v in values):
        raise SimInputError(f"--drift chunks must be >= 0, got {text!r}")
    if len(values) == 1:
        return tuple(values * dp_size)
    if len(values) != dp_size:
        raise SimInputError(f"--drift lists {len(values)} ranks, but --dp-size is {dp_size}")
    return tuple(values)


class ProgressBar:
    """``label [#####.....] 45%  4500 passes, 3200 passes/s`` redrawn on one stderr line."""

    def __init__(self, config: SimConfig, stream: TextIO) -> None:
        self._stream = stream
        self._passes = config.passes
        self._duration = config.duration_s
        self._last = 0.0
        self._started: dict[str, float] = {}

    def __call__(self, label: str, done: int, planned: int, sim_s: float = 0.0, final: bool = False) -> None:
        now = time.perf_counter()
        start = self._started.setdefault(label, now)
        if not final and now - self._last < 0.1:
            return
        self._last = now
        frac = done / self._passes
        if self._duration:
            frac = max(frac, sim_s / self._duration)
        frac = min(frac, 1.0) if not final else 1.0
        rate = done / max(now - start, 1e-9)
        bar = "#" * int(frac * 30)
        self._stream.write(f"\r{label:>16} [{bar:<30}] {100 * frac:3.0f}%  {done} passes, {rate:,.0f} passes/s ")
        if final:
            self._stream.write("\n")
        self._stream.flush()


def main(args: argparse.Namespace, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    try:  # PREFILL_DELAYER_DECISION_LOG and its options, as every rank's policy will read them: checked before any run
        options_from(None)
    except ConfigError as exc:
        raise SimInputError(str(exc)) from None
    if getattr(args, "suite", None) is not None:
        from .suite_run import main as suite

        return suite(args, stdout, stderr)
    if getattr(args, "goal", None) is not None:
        raise SimInputError("--goal applies with --suite only: it judges a policy against the others over a suite's workloads")
    if getattr(args, "load_scale", None) is not None:
        raise SimInputError("--load-scale applies with --suite only: it scales each suite workload's load; give --rate here")
    for name, instead in (("seeds", "run it once per --seed"), ("jobs", "a single run is one process")):
        if getattr(args, name, None) is not None:
            raise SimInputError(f"--{name} applies with --suite only: {instead}")
    config, variants, workload, s = build(args)
    given = settings(args)[1]
    show = s["progress"]
    if show == PROGRESS_AUTO:
        show = stderr.isatty()
    progress = ProgressBar(config, stderr) if show else None
    try:
        results = simulate(config, variants, workload, progress)
    except KeyboardInterrupt:
        if progress is not None:
            stderr.write("\n")  # end the progress bar's line: the interrupt is said on a line of its own
        raise
    with outputs(s).writing() as out:  # both files or neither
        if s["plot"] is not None:
            from .plot import plot

            staged = out.path("--plot")
            try:
                plot(results, staged, title=plot_title(s, given))
            except SimInputError as exc:
                raise SimInputError(str(exc).replace(staged, s["plot"])) from None
        if s["json"] is not None:
            out.write("--json", to_json(results, s["scenario"]) + "\n")
    stdout.write(report(results, s["wide"]) + "\n")
    return 0


def plot_title(s: dict[str, Any], given: set[str]) -> str:
    """The scenario and the options that changed it, e.g. ``SGLang #35241 (--drift 3,3,0,2)``."""
    quiet = {"plot", "json", "wide", "progress", "profile", "tracker", "gather", "scheduler"}
    changed = " ".join(
        " ".join(f"--set {name}={value}" for name, value in s[k]) if k == "set"
        else f"{_flag(k)}" + ("" if s[k] is True else f" {s[k]}")
        for k in sorted(given - quiet)
    )
    base = f"SGLang #{s['scenario']}" if s["scenario"] else ""
    if base and changed:
        return f"{base} ({changed})"
    return base or changed


def run(args: argparse.Namespace) -> int:
    """The subcommand's entry point: a user's mistake is one line on stderr and exit 2, never a traceback."""
    try:
        return main(args)
    except SimInputError as exc:
        sys.stderr.write(f"prefill-delayer simulate: {exc}\n")
        return 2
