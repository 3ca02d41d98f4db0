"""``prefill-delayer simulate``: build the run from the options, simulate, print the tables.

Any mistake in the options, the trace or the workload is one line on stderr and
exit 2 (``prefill-delayer``'s ``main`` prints it); the run itself writes the tables
on stdout, the progress bar (when shown) on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import re
import sys
import time
from array import array
from typing import Any, Iterable, Iterator, Optional, Sequence, TextIO

from ..files import Outputs, empty_name
from ..runtime.core import crosscheck_on
from ..runtime.decision_log import DECISION_LOG_ENV, options_from
from ..spec.config import in_setting_words, plain
from ..spec.errors import ConfigError
from .config import OFF, SimConfig, Variant
from .cost import SGLANG_32880, SGLANG_35241, CostModel
from .engine import check_fits, simulate
from .errors import SimInputError, counted
from .options import BASE, PROGRESS_AUTO, SCENARIOS, settings
from ..spec.registry import policy_of
from .policy_site import binding_of, check_sets, policy_config
from .report import report, to_json
from .trace import load_trace
from .trackers import WINDOW, own_tracker
from .workload import Burst, Bursty, Lengths, LongPrompt, Mix, Poisson, Request, Workload, endless

# Which workloads each workload option applies to.
_APPLIES = {
    "rate": ("poisson", "bursty"),
    "burst": ("bursty",),
    "concurrency": ("long-prompt",),
    "drift": ("long-prompt",),
    "prompt_tokens": ("poisson", "bursty", "long-prompt"),
    "output_tokens": ("poisson", "bursty", "long-prompt"),
    "trace": ("trace",),
    "resubmit_gap": ("long-prompt",),  # the gap between a closed loop's clients; open arrivals have none
}
_WORKLOAD_KEYS = (*_APPLIES, "wave", "wave_prompt_tokens", "wave_output_tokens")
# sim.plot saves the figure, then re-saves it as a palette PNG (its ``_shrink``): PNG is all it writes.
PLOT_SUFFIXES = (".png",)
MAX_DP_SIZE = 256  # a pass's cost grows with the ranks (every rank's gather); past this one pass takes seconds
# A closed loop's clients each hold a request from the start (about 300 bytes: a million take 300 MB and 4 s to
# set up); past the group's running slots they only wait in its queues, so more shows nothing new.
MAX_CONCURRENCY = 1_000_000
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
                s[key] = BASE[key]
    if "health_dispatch" in given and s["health_check_interval"] is None:
        raise SimInputError("--health-dispatch needs --health-check-interval: with no GET /health probes there is "
                            "nothing to dispatch")
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
        raise SimInputError(f"--warmup {plain(warmup)} must be shorter than --duration {plain(duration)}: the tables measure the "
                            "simulated time after the warm-up, and none would be left")
    config = _config(s)
    _probes_within_capacity(config, given)
    workload = _workload(s, given, config)
    tracker = s["tracker"]

    def tracker_of(name: str) -> Any:
        # SGLang 0.5.23's own scheduler: its tracker, whatever the profile's release had, or the one the profile's
        # delayer keeps itself (aligned's decay), which is what runs there
        if config.scheduler == "sglang" and tracker is None and "+" not in name:  # NAME+TRACKER names its own
            return own_tracker(name) or WINDOW
        return tracker

    variants = [Variant.of(name, tracker_of(name), s["health_dispatch"]) for name in dict.fromkeys(s["profile"])]
    _passes_within_memory(config, workload, len(variants))
    if tracker is not None and all(v.profile is None for v in variants):
        raise SimInputError(f"--tracker {tracker}: off runs no delayer, so nothing reads max_prefill_bs and no tracker "
                            "runs; --tracker sets it for the profiles with a delayer")
    check_sets_once(config.policy_params)
    check_sets([v.profile for v in variants], config.policy_params)
    check_sets_no_option(config.policy_params)
    for v in variants:  # every profile can be simulated, with its settings, before any run starts
        if v.profile is not None:
            binding_of(v.profile)
            with options_named():
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


def check_sets_once(sets: Sequence[tuple[str, Any]]) -> None:
    """A ``--set NAME`` given twice: the last value would reach the policies while ``--json`` listed both; refused, as
    ``PREFILL_DELAYER_PARAMS`` refuses a name given twice."""
    seen: set[str] = set()
    for name, _ in sets:
        if name in seen:
            raise SimInputError(f"--set {name} is given twice: give each parameter once")
        seen.add(name)


def check_sets_no_option(sets: Sequence[tuple[str, Any]]) -> None:
    """A ``--set NAME`` where NAME is one of the run's own settings, which an option sets: the ``--set`` value would
    reach the policies while the header, ``--json`` and the scheduler model kept the option's, so it is refused."""
    for name, _ in sets:
        key = _OPTION_OF.get(name)
        if key is not None:
            raise SimInputError(f"--set {name}: the option {_flag(key)} sets it, for every policy that takes it, and the "
                                f"header and --json show that option's value: give {_flag(key)} instead")


def outputs(s: dict[str, Any]) -> Outputs:
    """``--json`` and ``--plot``; neither may be the ``--trace`` the run reads."""
    return Outputs([s["trace"]] if s["trace"] else []).file("--json", s["json"]).file("--plot", s["plot"], suffixes=PLOT_SUFFIXES)


COSTS = {"35241": SGLANG_35241, "32880": SGLANG_32880}
_COST_OPTIONS = {"cost_floor": "floor_s", "cost_attn_token": "attn_token_s", "cost_attn_decode": "attn_decode_s",
                 "cost_moe_token": "moe_token_s", "cost_idle_pass": "idle_pass_s"}
# Each option (its key in the settings) and the ``SimConfig`` field it sets; ``--set`` and the cost are built apart.
_CONFIG_FIELDS = {
    "dp_size": "dp_size", "max_running_requests": "max_running_requests", "max_total_tokens": "max_total_tokens",
    "chunked_prefill_size": "chunked_prefill_size", "max_prefill_tokens": "max_prefill_tokens",
    "mixed_chunk": "enable_mixed_chunk", "max_delay_passes": "max_delay_passes",
    "token_usage_low_watermark": "token_usage_low_watermark", "queue_min_ratio": "queue_min_ratio",
    "max_delay_ms": "max_delay_ms", "prefill_max_requests": "prefill_max_requests", "passes": "passes",
    "duration": "duration_s", "warmup": "warmup_s", "seed": "seed", "gather": "gather", "page_size": "page_size",
    "scheduler": "scheduler", "prefix_cache": "prefix_cache", "load_balance_method": "load_balance_method",
    "health_check_interval": "health_check_interval_s", "resubmit_gap": "resubmit_gap_s",
}
# The names a setting's message may use (``SimConfig``'s fields, the cost model's, the workloads' arguments),
# each with the option that gives it.
_OPTION_OF = {**{f: k for k, f in _CONFIG_FIELDS.items()}, **{f: k for k, f in _COST_OPTIONS.items()},
              **{k: k for k in ("rate", "burst", "concurrency", "drift")}}


_FLOAT = r"-?\d+(?:\.\d+(?:e[+-]\d+)?|e[+-]\d+)"  # a finite float as Python writes it (-5.0, 0.5, 1e-05, 1.5e+20)


def in_options(message: str) -> str:
    """A message of ``SimConfig``, ``CostModel`` or a workload names their fields (the Python API's names:
    ``invalid max_running_requests=0``); the command's user gave options, so it names those
    (``invalid --max-running-requests 0``), its value as they typed it (``invalid --duration -5``, where the Python
    API's float reads ``duration_s=-5.0``: the option's ``float`` added the ``.0``)."""
    def option(m: re.Match) -> str:
        key = _OPTION_OF.get(m.group(2))
        if key is None or not (m.group(3) or "_" in m.group(2)):  # a plain word is prose unless ``=`` follows it
            return m.group(0)
        if not m.group(3):
            return _flag(key)
        return f"{_flag(key)} {plain(float(m.group(4))) if m.group(4) else ''}"

    # ``[cost ]name[ (a gloss)]=[value]`` and any other snake_case name of a setting; a leading ``rate must ...``
    message = re.sub(rf"(?<![\w-])(?<!--set )(cost )?([a-z]+(?:_[a-z]+)*)((?: \([^)]*\))?=)?((?<==){_FLOAT}(?![\w.]))?",
                     option, message)
    return _unset_in_words(re.sub(r"^(rate|burst|concurrency)( )", lambda m: _flag(m.group(1)) + " ", message))


def _unset_in_words(message: str) -> str:
    """The spec writes a parameter's unset value as Python's ``None (off) or ...``: ``--set`` takes it as ``none``, and
    an option has no such value, it is left out (``expected a number in [0, 1], or no --token-usage-low-watermark
    (off)``)."""
    if "--set " in message:
        return in_setting_words(message)
    return re.sub(r"^(.*?invalid (--[a-z-]+) .*?: expected )None \((?:= )?([^)]*)\) or (.*)$", r"\1\4, or no \2 (\3)", message)


@contextlib.contextmanager
def options_named() -> Iterator[None]:
    """``SimInputError``s raised inside, in the command's options (``in_options``)."""
    try:
        yield
    except SimInputError as exc:
        raise SimInputError(in_options(str(exc))) from None


def _config(s: dict[str, Any]) -> SimConfig:
    cost = COSTS[s["cost"] or "35241"]
    changes = {field: s[key] for key, field in _COST_OPTIONS.items() if s[key] is not None}
    with options_named():
        if changes:
            cost = CostModel(**{**{f: getattr(cost, f) for f in _COST_OPTIONS.values()}, **changes},
                             source=f"{cost.source}; --cost-* options: {', '.join(sorted(changes))}")
        return SimConfig(**{field: s[key] for key, field in _CONFIG_FIELDS.items()}, cost=cost,
                         policy_params=tuple(s["set"]))


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
        if not s["trace"]:  # an empty name: the trace reader would say so, but not name the option
            raise SimInputError(empty_name("--trace"))
        main: Workload = load_trace(s["trace"])
    else:
        prompt = Lengths.parse(s["prompt_tokens"], "--prompt-tokens")
        output = Lengths.parse(s["output_tokens"], "--output-tokens")
        _rate_within_capacity(s["rate"], config, given)
        with options_named():
            if kind == "poisson":
                main = Poisson(rate=s["rate"], prompt=prompt, output=output)
            elif kind == "bursty":
                main = Bursty(rate=s["rate"], burst=s["burst"], prompt=prompt, output=output)
            else:
                main = LongPrompt(concurrency=s["concurrency"], prompt=prompt, output=output,
                                  drift=_drift(s["drift"], config.dp_size))
                main.check_drift(config.chunked_prefill_size, given=s["drift"])
                _concurrency_within_memory(main.concurrency, config)
        if isinstance(main, Bursty):
            _held_within_memory(f"--burst {main.burst:,}", main.burst, "--burst", 1,
                                f"each burst's {counted(main.burst, 'request')} would arrive together")
    wave = s["wave"]
    if wave is None:
        return main
    if isinstance(wave, bool) or not isinstance(wave, int) or wave < 1:
        raise SimInputError(f"--wave must be an integer >= 1 (requests per rank), got {wave!r}")
    _held_within_memory(f"--wave {wave:,}", wave * config.dp_size, "--wave", config.dp_size,
                        f"{counted(wave * config.dp_size, 'request')}, {wave:,} on each of {counted(config.dp_size, 'rank')}, "
                        "would arrive together at t=0")
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


def running_slots(config: SimConfig) -> int:
    """The requests all ranks run at once."""
    return config.dp_size * config.max_running_requests


def max_rate(config: SimConfig) -> float:
    """The most requests per second a run takes: every rank's running slots filled in each shortest pass. Past it a
    run never ends its passes (each pass admits a flood of arrivals) and its queues grow without bound; no
    comparison is read from it."""
    return running_slots(config) / config.cost.shortest_forward_s()


def _rate_within_capacity(rate: Any, config: SimConfig, given: set[str]) -> None:
    """A rate past ``max_rate``; a rate that is no finite number is the workload's to refuse (``--rate inf``: one line
    saying it must be finite, not a count of infinitely many requests)."""
    if rate is None or isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate):
        return
    if rate > max_rate(config):
        shortest = config.cost.shortest_forward_s()
        raise SimInputError(
            f"--rate {plain(rate)}: {counted(rate * shortest, 'request')} would arrive in {_shortest_pass(config, given)}, "
            f"more than {_at_once(config)}; at most {_per_s(max_rate(config))} req/s here")


def _shortest_pass(config: SimConfig, given: set[str]) -> str:
    """``one 0.04 s pass``, with the ``--cost-*`` options given that make the shortest forward that long
    (``one 300 s pass (--cost-moe-token 300)``): a rate refused for a pass the user lengthened names the option that
    did, not only the rate."""
    cost = config.cost
    shortest = cost.shortest_forward_s()
    if shortest == cost.floor_s:
        parts = {"floor_s"}
    else:  # the forward's own terms (CostModel.terms), of the work that makes the shortest pass
        work = next(w for w in ([(1, 0)], [(0, 1)]) if cost.pass_seconds(w) == shortest)
        parts = {field for field, t in cost.terms(work).items() if field != "floor_s" and t > 0}
    options = [f"{_flag(key)} {plain(getattr(cost, field))}" for key, field in _COST_OPTIONS.items()
               if field in parts and key in given]
    return f"one {shortest:g} s pass" + (f" ({', '.join(options)})" if options else "")


def _per_s(rate: float) -> str:
    """A rate in a message: whole above 100 (25,600), else to three digits (3.41, not 3; 0.00341, not 0)."""
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def _at_once(config: SimConfig) -> str:
    """``the 512 requests all 8 ranks run at once``, in words that agree with one rank and one request too."""
    ranks = "its one rank runs" if config.dp_size == 1 else f"all {config.dp_size} ranks run"
    return f"the {counted(running_slots(config), 'request')} {ranks} at once"


def _probes_within_capacity(config: SimConfig, given: set[str]) -> None:
    """GET /health's probes are requests too: more of them per pass than the ranks run at once floods the queues
    without bound (an interval of 1e-9 s took every byte of memory)."""
    interval = config.health_check_interval_s
    most = max_rate(config)
    if interval is not None and 1.0 / interval > most:
        shortest = config.cost.shortest_forward_s()
        raise SimInputError(
            f"--health-check-interval {plain(interval)}: {counted(shortest / interval, 'probe')} would arrive in "
            f"{_shortest_pass(config, given)}, more than {_at_once(config)}; at least {1.0 / most:.3g} s here")


def _concurrency_within_memory(concurrency: int, config: SimConfig) -> None:
    if concurrency > MAX_CONCURRENCY:
        raise SimInputError(f"--concurrency {concurrency:,}: at most {MAX_CONCURRENCY:,} clients (each holds a request in "
                            f"memory from the start, about 300 bytes); past {_at_once(config)}, the rest only "
                            "wait in their queues")


def machine_memory() -> int:
    """The bytes of memory of the host the command runs on, all of it: what a run must hold at once can never be
    more."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def in_bytes(n: float) -> str:
    """A size in a message: 512 MiB, 23.5 GiB, 1,452 TiB."""
    for unit, power in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 2**power:
            x = n / 2**power
            return f"{x:.3g} {unit}" if x < 100 else f"{x:,.0f} {unit}"
    return f"{n:,.0f} bytes"


# A request's own object (``Request``, its slots): the least each request a run holds takes of its memory.
REQUEST_BYTES = sys.getsizeof(Request(0, 0.0, 1, 1))


def _held_within_memory(given: str, requests: int, option: str, per: int, arriving: str) -> None:
    """Requests that arrive together (a ``--wave``, a ``--burst``) are made at once and held in memory from then on,
    ``REQUEST_BYTES`` each at the least: more than the machine's memory would take every byte of it before the first
    pass ran (a wave of a billion per rank grew by 120 MB/s and never began). ``per``: requests per unit of
    ``option``."""
    need, have = requests * REQUEST_BYTES, machine_memory()
    if need > have:
        raise SimInputError(f"{given}: {arriving}, each held in memory from then on, at least {REQUEST_BYTES} bytes "
                            f"apiece (a request's own object): at least {in_bytes(need)}, more than the host's "
                            f"{in_bytes(have)} of memory; past {option} {have // (REQUEST_BYTES * per):,} they cannot fit in it")


def pass_record_bytes(config: SimConfig) -> int:
    """The least a run keeps of each pass it runs: an entry in each of ``RunResult``'s per-pass records (arrays, one
    entry a pass or one a rank-pass), kept until the tables."""
    from .result import RunResult

    records = [a for a in vars(RunResult(Variant.of(OFF), config, None)).values() if isinstance(a, (array, bytearray))]
    return sum(a.itemsize if isinstance(a, array) else 1 for a in records)


def _passes_within_memory(config: SimConfig, workload: Workload, profiles: int) -> None:
    """``--passes`` with no end of its own (no ``--duration``, arrivals that never stop): every profile's run goes on to
    its last pass and keeps a record of each (``pass_record_bytes``), all held until the tables; where that cannot fit
    in the machine's memory, the run would fail after hours (at --passes 10**12 it grew without end, at 0%)."""
    if config.duration_s is not None or not endless(workload):
        return
    record = pass_record_bytes(config)
    need, have = config.passes * record * profiles, machine_memory()
    if need > have:
        raise SimInputError(
            f"--passes {config.passes:,}: with no --duration, every run ({counted(profiles, 'profile')}) goes on to its "
            f"last pass and keeps a record of every pass until the tables, at least {record} bytes each: at least "
            f"{in_bytes(need)}, more than the host's {in_bytes(have)} of memory; past --passes "
            f"{have // (record * profiles):,} it cannot fit in it (--duration ends a run at a simulated time instead)")


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
        self._stream.write(f"\r{label:>16} [{bar:<30}] {100 * frac:3.0f}%  {counted(done, 'pass', 'passes')}, {rate:,.0f} passes/s ")
        if final:
            self._stream.write("\n")
        self._stream.flush()


def main(args: argparse.Namespace, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    problem = crosscheck_problem() or decision_log_problem()
    if problem is not None:
        raise SimInputError(problem)
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
    with options_named():  # every request can be admitted (each run checks it again): said in the options given
        check_fits(config, workload)
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
    check_measured(results)
    with outputs(s).writing() as out:  # both files or neither
        if s["plot"] is not None:
            from .plot import plot

            plot(results, out.path("--plot"), title=plot_title(s, given), name=s["plot"])
        if s["json"] is not None:
            out.write("--json", to_json(results, s["scenario"]) + "\n")
    stdout.write(report(results, s["wide"]) + "\n")
    check_logs_whole((r.variant.tracked_name, r.log_failures) for r in results)
    return 0


def check_measured(results: Sequence[Any]) -> None:
    """After the runs, before the tables and outputs: a measured window in which no profile ran a pass (--duration 1e-9,
    a trace served before the warm-up ended) has nothing to show; refused, naming the options that made it so, rather
    than a table of zeros under 'Measured: 0 simulated s'. Whether a pass runs there depends on the arrivals, so it is
    known only now (a warm-up as long as the run is refused before it)."""
    if any(r.summary().passes for r in results):
        return
    r = results[0]
    c = r.config
    warm, end = plain(c.warmup_s), f"{r.end_s:.3g}"
    if r.capped:  # the warm-up holds the first pass, so a run of none measured is one that ran out inside it
        raise SimInputError(f"--passes {c.passes}: the run's passes ran out at {end} simulated s, none of them after the "
                            f"{warm} s --warmup: nothing would be measured; raise --passes or shorten --warmup")
    if r.drained_s is not None:  # a trace served in passes that all began inside the warm-up
        raise SimInputError(f"--warmup {warm}: every request was served by {r.drained_s:.3g} simulated s, in passes that "
                            "all began within the warm-up: nothing would be measured; shorten --warmup")
    after = " after the --warmup" if c.warmup_s > 0 else ""
    raise SimInputError(f"--duration {plain(c.duration_s)}: no pass ran in the measured window, {warm} to {end} simulated "
                        f"s{after}: nothing would be measured; give a longer --duration"
                        + (" or a shorter --warmup" if c.warmup_s > 0 else ""))


def crosscheck_problem() -> Optional[str]:
    """A ``PREFILL_DELAYER_CROSSCHECK`` value the runtime does not take, before any run (every rank would raise it)."""
    try:
        crosscheck_on()
    except ConfigError as exc:
        return str(exc)
    return None


def decision_log_problem() -> Optional[str]:
    """Why the decision log ``PREFILL_DELAYER_DECISION_LOG`` asks for cannot be written (its options, or a folder
    that cannot be made or take files), before any run: a server goes on without its log, but a simulation run to
    write one would otherwise end with exit 0 and no log."""
    try:  # the options as every rank's policy will read them
        options = options_from(None)
    except ConfigError as exc:
        return str(exc)
    if options is None:
        return None
    return Outputs().folder(f"{DECISION_LOG_ENV}:", str(options.target)).problem()


def check_logs_whole(runs: Iterable[tuple[str, Sequence[str]]]) -> None:
    """After the tables and outputs: a ``SimInputError`` (one line, exit 2) when some rank's decision log stopped in
    a run (``RunResult.log_failures``: a full disk, say). The runtime logged each as it happened and went on, as a
    server must; the command's exit status says the log it was asked for is not whole."""
    stopped = [(name, failures) for name, failures in runs if failures]
    if not stopped:
        return
    ranks = sum(len(f) for _, f in stopped)
    name, failures = stopped[0]
    raise SimInputError(f"the decision log stopped on {counted(ranks, 'rank')} in {counted(len(stopped), 'run')} "
                        f"(first: {name}, {failures[0]}); the files in "
                        f"{os.environ.get(DECISION_LOG_ENV, '').strip()} end early: the tables above stand, the log does not")


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
