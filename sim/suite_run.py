"""``prefill-delayer simulate --suite NAME``: every workload of a suite against every policy, beside its bound.

Each workload is built through ``simulate``'s own option handling (``cli.build``),
its open-arrival rate derived from the cost model (``bound``); each run is the
simulator's ordinary ``run_variant``. The table gives every policy's input
throughput and TTFT p50/p99, absolute and as a fraction of the workload's bound
(``bound.bound``): input tok/s over the bound's, the bound's TTFT over the
policy's, so 100% is the limit and nothing exceeds it. ``--json`` and ``--plot``
are written together after the last run, or neither.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence, TextIO

from ..files import Outputs
from ..runtime.decision_log import DECISION_LOG_ENV
from ..spec.config import plain
from ..spec.fields import MAX_COUNT
from ..spec.registry import all_profiles, policy_of
from .bound import Bound, Slopes, arrivals, bound, capacity_tok_s, demand, percentile, window_capacity_tok_s
from .cli import PLOT_SUFFIXES, build, check_logs_whole, max_rate, options_named, running_slots
from .config import OFF, SimConfig, Variant
from .engine import check_fits, run_variant
from .errors import SimInputError, counted
from .options import PROGRESS_AUTO, settings
from .report import Column, as_off_notes, legend, markdown
from .result import RunResult
from .suite import LIST, SUITES, Stream, SuiteWorkload, listing
from .suite_goal import WorkloadGoal, goal_table, judge, missed, standings_table
from .suite_jobs import Task, check_jobs, run_all
from .workload import Bursty, Lengths, Mix, Poisson, Workload

# The options a suite run takes; every other one is a workload's own setting.
SUITE_OPTIONS = ("suite", "profile", "set", "passes", "duration", "seed", "seeds", "jobs", "gather", "json", "plot",
                 "progress", "goal", "load_scale")


def default_profiles() -> list[str]:
    """No delayer, then every profile whose policy the simulator can run (it has a ``SimBinding``), from the
    registry: a policy that gains one is in the suite with no change here."""
    return [OFF, *(p for p in all_profiles() if policy_of(p).sim is not None)]


QUANTILES = (0.5, 0.99)  # the TTFT percentiles of a bound that the tables, --json, --goal and --plot read


@dataclass(frozen=True)
class KeptBound(Bound):
    """A bound as a suite keeps it: its throughputs and its TTFT at ``QUANTILES``, in place of the per-request TTFTs
    they are read from (thousands of floats a workload: over a megabyte a default-suite cell, held for every cell of a
    sweep and copied into every row a worker sends back)."""

    at: tuple[tuple[float, Optional[float]], ...] = ()

    @classmethod
    def of(cls, b: Bound) -> "KeptBound":
        if isinstance(b, KeptBound):
            return b
        figures = {f.name: getattr(b, f.name) for f in fields(Bound)}
        return cls(**{**figures, "ttfts": ()}, at=tuple((q, b.ttft(q)) for q in QUANTILES))

    def ttft(self, q: float) -> Optional[float]:
        for at, value in self.at:
            if at == q:
                return value
        raise ValueError(f"a suite keeps its bound's TTFT at {QUANTILES} only, not at {q}")


@dataclass
class Case:
    """One workload, ready to run: its settings, its requests and its bound over the planned window."""

    spec: SuiteWorkload
    config: SimConfig
    workload: Workload
    bound: Bound
    rate: Optional[float]  # open arrivals: requests per second
    own: Optional[tuple[float, float]] = None  # a --duration shorter than its own cut its warm-up: (warm-up, duration)


@dataclass
class Row:
    workload: str
    policy: str
    input_tok_s: float
    ttft_p50_s: Optional[float]
    ttft_p99_s: Optional[float]
    bound: Bound
    wall_s: float
    tpot_p50_s: Optional[float] = None  # time per output token after the first (None: no request decoded twice)
    tpot_p99_s: Optional[float] = None
    log_failures: tuple[str, ...] = ()  # the run's decision logs that stopped (``RunResult.log_failures``)

    def fractions(self) -> tuple[Optional[float], Optional[float], Optional[float]]:
        b = self.bound
        return (self.input_tok_s / b.input_tok_s if b.input_tok_s else None,
                _ratio(b.ttft(0.50), self.ttft_p50_s), _ratio(b.ttft(0.99), self.ttft_p99_s))


def _ratio(limit: Optional[float], value: Optional[float]) -> Optional[float]:
    if limit is None or value is None or value <= 0:
        return None
    return limit / value


def _stream(s: Stream, rate: float) -> Workload:
    prompt, output = Lengths.parse(s.prompt, "prompt tokens"), Lengths.parse(s.output, "output tokens")
    if s.burst is not None:
        return Bursty(rate=rate, burst=s.burst, prompt=prompt, output=output)
    return Poisson(rate=rate, prompt=prompt, output=output)


def _streams(spec: SuiteWorkload, total_rate: float) -> Workload:
    parts = [_stream(s, s.share * total_rate) for s in spec.streams]
    return parts[0] if len(parts) == 1 else Mix(tuple(parts))


def _namespace(spec: SuiteWorkload, profiles: Sequence[str], rate: Optional[float], sets: Sequence[Any]) -> argparse.Namespace:
    opts = dict(spec.options)
    if sets:
        opts["set"] = list(sets)
    if spec.streams:  # simulate's options for the first stream (checked by build); the suite builds the mix itself
        first = spec.streams[0]
        opts.update(workload="bursty" if first.burst is not None else "poisson", rate=rate or 1.0,
                    prompt_tokens=first.prompt, output_tokens=first.output)
        if first.burst is not None:
            opts["burst"] = first.burst
    return argparse.Namespace(**opts, profile=list(profiles))


def plan(spec: SuiteWorkload, profiles: Sequence[str], s: dict[str, Any], given: set[str],
         scale: float = 1.0) -> tuple[Case, list[Variant]]:
    """The workload's settings, variants, requests and bound, cut or stretched by ``--duration`` (``--passes`` cuts), its offered load
    by ``scale`` (``--load-scale``; the case's ``spec`` is the workload as run)."""
    config, variants, workload, _ = build(_namespace(spec, profiles, None, s["set"]))
    rate = None
    if spec.load is not None:
        spec = replace(spec, load=spec.load * scale)
    if spec.streams:
        if spec.load is None:
            raise SimInputError(f"suite workload {spec.name}: open streams need a load")
        unit = _streams(spec, 1.0)
        slopes = Slopes.of(config.cost, config.dp_size, config.chunked_prefill_size, config.max_running_requests)
        d = demand(unit)
        rate = spec.load * capacity_tok_s(slopes, config, d) / d.prompt
        most = max_rate(config)
        if rate > most:  # a --load-scale far past the suite's loads: named as the option given, not as a --rate
            raise SimInputError(f"--load-scale {plain(scale)}: suite workload {spec.name} would offer {rate:,.0f} req/s, more "
                                f"than its {config.dp_size} ranks' {running_slots(config)} running "
                                f"slots take in one {config.cost.floor_s:g} s pass ({most:,.0f} req/s): at most "
                                f"--load-scale {scale * most / rate:.3g} there")
        config, variants, _, _ = build(_namespace(spec, profiles, rate, s["set"]))
        workload = _streams(spec, rate)
    scaled = _scaled(spec, config, s, given)
    check_fits(scaled, workload)
    own = (config.warmup_s, config.duration_s or 0.0) if scaled.warmup_s != config.warmup_s else None
    return Case(spec, scaled, workload, KeptBound.of(bound(scaled, workload)), rate, own), variants


def _scaled(spec: SuiteWorkload, config: SimConfig, s: dict[str, Any], given: set[str]) -> SimConfig:
    own, warm = config.duration_s, config.warmup_s
    changes: dict[str, Any] = {"seed": s["seed"], "gather": s["gather"]}
    if own is None:
        raise SimInputError(f"suite workload {spec.name} has no duration")
    if "duration" in given:
        d = s["duration"]
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or d <= 0:
            raise SimInputError(f"--duration must be simulated seconds > 0, got {plain(d)}")
        if d < own:  # shorter: the warm-up shrinks with it
            changes.update(duration_s=float(d), warmup_s=warm * d / own)
        else:  # longer: the same warm-up, a longer measured window (a p99 from more requests)
            changes["duration_s"] = float(d)
    if "passes" in given:
        changes["passes"] = s["passes"]
    with options_named():  # --passes 0, --seed -1: named as the options given
        return config.replace(**changes)


def ttfts_censored(r: RunResult) -> list[float]:
    """The TTFT of every request that arrived in the measured window, one still waiting at the end counted
    at its wait so far (so a policy that starves requests does not look faster)."""
    warm, end = r.config.warmup_s, r.end_s
    return [(q.first_token_s if q.first_token_s is not None else end) - q.arrival for q in r.requests if q.arrival >= warm]


def tpots(r: RunResult) -> list[float]:
    """Each window request's time per output token after its first (TPOT: what a decode pass stretched by a prefill
    costs the requests decoding through it), for the requests that finished with more than one output token."""
    warm = r.config.warmup_s
    return [(q.finish_s - q.first_token_s) / (q.output - 1) for q in r.requests
            if q.arrival >= warm and q.output > 1 and q.finish_s is not None and q.first_token_s is not None]


def measure(case: Case, variant: Variant) -> Row:
    """Run one policy on one workload, against the bound of the run's own measured window."""
    start = time.perf_counter()
    r = run_variant(case.config, variant, case.workload)
    wall = time.perf_counter() - start
    if r.end_s <= case.config.warmup_s:
        raise SimInputError(f"workload {case.spec.name}: the run ended at {r.end_s:.1f} s, inside its "
                            f"{case.config.warmup_s:g} s warm-up: give more --passes")
    b = (case.bound if math.isclose(r.end_s, case.config.duration_s or 0.0, rel_tol=0.02)
         else KeptBound.of(bound(case.config, case.workload, r.end_s)))
    b = run_bound(b, r, case)
    ttfts = ttfts_censored(r)
    tpot = tpots(r)
    return Row(case.spec.name, variant.tracked_name, r.summary().input_tok_s, percentile(ttfts, 0.50), percentile(ttfts, 0.99), b,
               wall, percentile(tpot, 0.50), percentile(tpot, 0.99), tuple(r.log_failures))


def _log_folder(label: str, case: Case, variant: Variant) -> str:
    """Where a run's decision log goes under ``PREFILL_DELAYER_DECISION_LOG``'s folder: ``WORKLOAD/POLICY``, after
    a sweep's cell (``x1.03-seed-3/WORKLOAD/POLICY``). Each run has its own folder, so runs on several processes
    never rotate each other's files, and the hundreds of a suite do not push each other out of the kept rotation."""
    cell = "-".join(label.split())
    return os.path.join(*([cell] if cell else []), case.spec.name, variant.tracked_name)


def _measure_logged(task: tuple[Case, str], variant: Variant) -> Row:
    """``measure``, with the decision log (when one is asked for) in the run's own folder."""
    case, folder = task
    base = os.environ.get(DECISION_LOG_ENV, "").strip()
    if not base:
        return measure(case, variant)
    os.environ[DECISION_LOG_ENV] = os.path.join(base, folder)
    try:
        return measure(case, variant)
    finally:
        os.environ[DECISION_LOG_ENV] = base


def run_bound(b: Bound, r: RunResult, case: Case) -> Bound:
    """The bound over this run's own measured window: the cost model's limit with the decode the run did in it,
    and (open arrivals) what had arrived by its end, less what it had prefilled before the window (a run
    slower in the warm-up has a backlog left to serve)."""
    k0 = r.window_start()
    start = r.t0[k0] if k0 < r.passes else r.end_s
    seconds = r.end_s - start
    if seconds <= 0:
        return b
    c = case.config
    slopes = Slopes.of(c.cost, c.dp_size, c.chunked_prefill_size, c.max_running_requests)
    capacity = window_capacity_tok_s(slopes, c, seconds, sum(r.decode[k0 * r.dp :]))
    offered = b.offered_tok_s
    if not b.closed_loop:
        arrived = sum(q.prompt for q in arrivals(case.workload, c, r.end_s))
        offered = max(arrived - sum(r.prefill[: k0 * r.dp]), 0) / seconds
    return replace(b, input_tok_s=min(capacity, offered), capacity_tok_s=capacity, offered_tok_s=offered)


def _tok(x: float) -> str:
    return f"{x / 1000:.1f}k"


def _s(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:.2f} s" if x < 10 else f"{x:.1f} s"


def _ms(x: Optional[float]) -> str:
    return "-" if x is None else f"{1000 * x:.0f} ms"


def _pct(x: Optional[float]) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


Line = tuple[Case, Optional[Row]]  # a row of the results table: the workload's bound (no Row), or one policy's run
_OF_BOUND = ("the figure to its left as a fraction of the run's own bound, the limit over that run's measured window "
             "(the decode it did there, and what had arrived less what it prefilled before the window): input tok/s "
             "over the bound's, the bound's TTFT over the policy's (100% is the limit)")


def _of_bound(k: int) -> Column[Line]:
    return Column("of bound", _OF_BOUND, lambda x: "" if x[1] is None else _pct(x[1].fractions()[k]))


def _rate(c: Case) -> str:
    return f"{c.rate:.2f} req/s" if c.rate is not None else "closed loop" if c.bound.closed_loop else "scenario's"


WORKLOAD_COLUMNS: tuple[Column[Case], ...] = (
    Column("workload", "the suite's workload (--suite list shows its settings)", lambda c: c.spec.name, align="---"),
    Column("what", "what it sends", lambda c: c.spec.about, align="---"),
    Column("DP", "DP ranks", lambda c: str(c.config.dp_size)),
    Column("rate", "open arrivals' requests per second: the workload's load (a fraction of the capacity) over the mean "
           "prompt; closed loop: a fixed number in flight; scenario's: the calibration scenario's own", _rate),
    Column("capacity (cost model)", "the most input tok/s the cost model allows for the workload's lengths (aligned "
           "full-chunk prefill, decode at its cheapest)", lambda c: _tok(c.bound.capacity_tok_s)),
    Column("offered", "input tok/s that arrives", lambda c: _tok(c.bound.offered_tok_s)),
    Column("bound limited by", "the lower of the two, the bound's input tok/s",
           lambda c: "capacity" if c.bound.capacity_tok_s <= c.bound.offered_tok_s else "arrivals", align="---"),
)
RESULT_COLUMNS: tuple[Column[Line], ...] = (
    Column("workload", WORKLOAD_COLUMNS[0].meaning, lambda x: x[0].spec.name, align="---"),
    Column("policy", "the profile run (off: no delayer); **bound**: the workload's steady-state limit with no backlog "
           "(a run's own bound, which its of-bound cells divide by, differs with a short window or a warm-up backlog)",
           lambda x: "**bound**" if x[1] is None else x[1].policy, align="---"),
    Column("input tok/s", "prompt tokens prefilled per simulated second over the measured window",
           lambda x: _tok(x[0].bound.input_tok_s if x[1] is None else x[1].input_tok_s)),
    _of_bound(0),
    Column("TTFT p50", "median time to first token of the window's requests, one still waiting at the end counted at "
           "its wait so far", lambda x: _s(x[0].bound.ttft(0.5) if x[1] is None else x[1].ttft_p50_s)),
    _of_bound(1),
    Column("TTFT p99", "99th percentile of the same", lambda x: _s(x[0].bound.ttft(0.99) if x[1] is None else x[1].ttft_p99_s)),
    _of_bound(2),
    Column("TPOT p50", "median time per output token after the first, over the window's requests that finished with more "
           "than one (the bound sets none; -: no such request)", lambda x: "" if x[1] is None else _ms(x[1].tpot_p50_s)),
    Column("TPOT p99", "99th percentile of the same", lambda x: "" if x[1] is None else _ms(x[1].tpot_p99_s)),
)


def table(cases: Sequence[Case], rows: Sequence[Row]) -> str:
    """Every policy x workload: the bound's row first, then each policy's, absolute and as a fraction of the bound."""
    lines: list[Line] = []
    for case in cases:
        lines.append((case, None))
        lines += [(case, row) for row in rows if row.workload == case.spec.name]
    return markdown(RESULT_COLUMNS, lines)


def workloads_table(cases: Sequence[Case]) -> str:
    """What each workload is, its rate (derived from the cost model) and what bounds its input throughput."""
    return markdown(WORKLOAD_COLUMNS, cases)


def goals(policy: str, cases: Sequence[Case], rows: Sequence[Row]) -> list[WorkloadGoal]:
    """``--goal``: ``policy`` judged against every other policy run, workload by workload."""
    out = []
    for c in cases:
        here = [r for r in rows if r.workload == c.spec.name]
        mine = next(r for r in here if r.policy == policy)
        out.append(judge(c.spec.name, mine, [r for r in here if r.policy != policy], c.spec.min_bound))
    return out


def standings(cases: Sequence[Case], rows: Sequence[Row]) -> dict[str, list[WorkloadGoal]]:
    """``--goal``'s standings: every policy run judged as ``goals`` judges one, in the run's order."""
    return {p: goals(p, cases, rows) for p in dict.fromkeys(r.policy for r in rows)}


def to_json(name: str, cases: Sequence[Case], rows: Sequence[Row], wall_s: float,
            goal: Optional[tuple[str, Mapping[str, Sequence[WorkloadGoal]]]] = None, load_scale: float = 1.0,
            seed: int = 0) -> str:
    return json.dumps(suite_doc(name, cases, rows, wall_s, goal, load_scale, seed), indent=1)


def suite_doc(name: str, cases: Sequence[Case], rows: Sequence[Row], wall_s: float,
              goal: Optional[tuple[str, Mapping[str, Sequence[WorkloadGoal]]]] = None,
              load_scale: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """``--json``'s document for one run of the suite (a sweep holds one per cell: a load at a seed)."""
    doc: dict[str, Any] = {
        "suite": name,
        "load_scale": load_scale,
        "seed": seed,
        "wall_s": wall_s,
        "workloads": [
            {
                "name": c.spec.name,
                "about": c.spec.about,
                "dp_size": c.config.dp_size,
                "load": c.spec.load,
                "rate_req_s": c.rate,
                "duration_s": c.config.duration_s,
                "warmup_s": c.config.warmup_s,
                "bound": {"input_tok_s": c.bound.input_tok_s, "capacity_tok_s": c.bound.capacity_tok_s,
                          "offered_tok_s": c.bound.offered_tok_s, "ttft_p50_s": c.bound.ttft(0.5),
                          "ttft_p99_s": c.bound.ttft(0.99), "closed_loop": c.bound.closed_loop},
                "results": [
                    dict(zip(("input_frac", "ttft_p50_frac", "ttft_p99_frac"), r.fractions()),
                         policy=r.policy, input_tok_s=r.input_tok_s, ttft_p50_s=r.ttft_p50_s, ttft_p99_s=r.ttft_p99_s,
                         tpot_p50_s=r.tpot_p50_s, tpot_p99_s=r.tpot_p99_s,
                         run_bound_input_tok_s=r.bound.input_tok_s, wall_s=r.wall_s)
                    for r in rows if r.workload == c.spec.name
                ],
            }
            for c in cases
        ],
    }
    if goal is not None:
        policy, table = goal
        judged = table[policy]
        doc["goal"] = {"policy": policy, "met": sum(g.met for g in judged), "workloads": [
            {"name": g.workload, "met": g.met, "checks": [vars(ch) for ch in g.checks]} for g in judged],
            "standings": [{"policy": p, "met": sum(g.met for g in gs), "missed": missed(gs)} for p, gs in table.items()]}
    return doc


def plot(cases: Sequence[Case], rows: Sequence[Row], path: str, title: str, name: str = "") -> None:
    """Three heatmaps, policy x workload: input tok/s, TTFT p50 and TTFT p99 as a fraction of the bound."""
    from .plot import _pyplot, save_png

    plt = _pyplot()
    names = [c.spec.name for c in cases]
    policies = list(dict.fromkeys(r.policy for r in rows))
    cell = {(r.policy, r.workload): r.fractions() for r in rows}
    # 5% steps: a palette PNG keeps 20 colours exact, where a continuous scale came out banded, a cell at 25% brown
    colours = plt.get_cmap("RdYlGn", 20)
    fig, axes = plt.subplots(3, 1, figsize=(max(8.0, 0.75 * len(names) + 2.5), 1.2 + 3 * (0.42 * len(policies) + 1.0)), dpi=80)
    for k, (ax, what) in enumerate(zip(axes, ("input tok/s", "TTFT p50", "TTFT p99"))):
        grid = [[(cell.get((p, w)) or (None, None, None))[k] for w in names] for p in policies]
        values = [[math.nan if v is None else 100 * v for v in line] for line in grid]  # percent, as the cells read
        im = ax.imshow(values, cmap=colours, vmin=0.0, vmax=100.0, aspect="auto")
        for i, line in enumerate(grid):
            for j, v in enumerate(line):
                ax.text(j, i, "-" if v is None else f"{100 * v:.0f}", ha="center", va="center", fontsize=7,
                        color="black" if v is None or 0.25 < v < 0.85 else "white")
        ax.set_yticks(range(len(policies)), policies, fontsize=8)
        ax.set_xticks(range(len(names)), names if k == 2 else [""] * len(names), rotation=40, ha="right", fontsize=8)
        ax.set_title(f"{what}, % of the bound" + (" (bound / policy)" if k else ""), fontsize=9)
        bar = fig.colorbar(im, ax=ax, fraction=0.025, pad=0.01, ticks=range(0, 101, 25))
        bar.ax.tick_params(labelsize=7)
        bar.set_label("% of the bound", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    save_png(fig, path, name, colors=256)


# Options of a single run that a suite refuses for a reason of their own (the rest: each workload has its settings).
_NOT_IN_SUITE = {"wide": "the suite's table has its own columns, every policy beside its workload's bound"}


def _check_options(given: set[str]) -> None:
    extra = sorted(given - set(SUITE_OPTIONS) - {"scenario"})
    if "scenario" in given or extra:
        key = "scenario" if "scenario" in given else extra[0]
        flag = "--" + key.replace("_", "-")
        takes = ["--progress/--no-progress" if o == "progress" else "--" + o.replace("_", "-") for o in SUITE_OPTIONS
                 if o != "suite"]
        why = _NOT_IN_SUITE.get(key, "each workload has its own settings (--suite list shows them)")
        raise SimInputError(f"{flag} does not apply with --suite: {why}; {', '.join(takes[:-1])} and {takes[-1]} do")


Planned = list[tuple[Case, list[Variant]]]


def plan_suite(name: str, profiles: Sequence[str], s: dict[str, Any], given: set[str], scale: float = 1.0) -> Planned:
    """Every workload of suite ``name``, planned against every profile, its offered load times ``scale``: every
    workload checked before any run."""
    return [plan(w, profiles, s, given, scale) for w in SUITES[name]]


def runs_of(planned: Planned) -> int:
    """The runs of a planned suite: each workload with each of its policies."""
    return sum(len(variants) for _, variants in planned)


def run_planned(groups: Iterable[tuple[str, Planned]], total: int, jobs: int,
                progress: Optional[TextIO] = None) -> list[tuple[list[Case], list[Row]]]:
    """Every run of every planned suite (``(label, planned)``: a sweep has one per cell, taken from ``groups`` only
    when its runs are about to start), ``total`` runs in all, ``jobs`` at once: each suite's cases and its rows in
    its plan's order; a line per run on ``progress`` as it ends, after its suite's label."""
    taken: list[tuple[list[Case], int]] = []  # each suite's cases and its count of runs, as its runs start

    def tasks() -> Iterator[Task[tuple[Case, str]]]:
        for label, planned in groups:
            taken.append(([case for case, _ in planned], runs_of(planned)))
            for case, variants in planned:
                for v in variants:
                    yield Task(label, (case, _log_folder(label, case, v)), v)

    def said(done: int, total: int, task: Task[tuple[Case, str]], row: Row) -> None:
        assert progress is not None
        progress.write(f"{task.label}[{done}/{total}] {row.workload} {row.policy}: {_tok(row.input_tok_s)} tok/s "
                       f"({_pct(row.fractions()[0])} of bound), {row.wall_s:.1f} s\n")
        progress.flush()

    rows = run_all(tasks(), total, _measure_logged, jobs, None if progress is None else said)
    out, k = [], 0
    for cases, n in taken:
        out.append((cases, rows[k:k + n]))
        k += n
    return out


def run_suite(name: str, profiles: Sequence[str], s: dict[str, Any], given: set[str],
              progress: Optional[TextIO] = None, scale: float = 1.0, label: str = "",
              jobs: int = 1) -> tuple[list[Case], list[Row]]:
    """Every workload of suite ``name`` against every profile, its offered loads times ``scale``, ``jobs`` runs at
    once; a line per run on ``progress``, after ``label``."""
    planned = plan_suite(name, profiles, s, given, scale)
    return run_planned([(label, planned)], runs_of(planned), jobs, progress)[0]


def load_label(scale: float) -> str:
    """How a ``--load-scale`` is named in titles, columns and progress lines: x1.03, as it was typed (two scales
    ``:g`` rounds alike would read as one)."""
    return f"x{plain(scale)}"


def scaled(scale: float) -> str:
    """How a suite's title names a ``--load-scale`` other than 1 (nothing for 1)."""
    return "" if scale == 1 else f", offered loads {load_label(scale)}"


def check_seeds(text: Any) -> list[range]:
    """``--seeds``: seeds and ranges of seeds, comma-separated (``0-7``, ``0,3,5``, ``0-2,9``), each once; the ranges,
    checked for repeats without listing their seeds (``0-99999999999`` is no list to build: ``check_runs``)."""
    ranges: list[range] = []
    for part in str(text).split(","):
        lo, dash, hi = part.strip().partition("-")
        if not (lo.isdigit() and (not dash or hi.isdigit())) or (dash and int(hi) < int(lo)):
            raise SimInputError(f"--seeds takes seeds and ranges of seeds >= 0, comma-separated (0-7, 0,3,5), got {text!r}")
        ranges.append(range(int(lo), int(hi if dash else lo) + 1))
    covered = -1  # the highest seed of the ranges so far, in order of their first: a range starting at or below it repeats
    for r in sorted(ranges, key=lambda r: r.start):
        if r.start <= covered:
            raise SimInputError(f"--seeds: seed {r.start} is given twice in {text!r}")
        covered = r.stop - 1
    return ranges


def runs_asked(name: str, profiles: Sequence[str], scales: Sequence[float], seeds: Sequence[range]) -> int:
    """A sweep's runs: every workload of suite ``name`` with every policy, at each load and seed (counted, not listed)."""
    return len(SUITES[name]) * len(profiles) * len(scales) * sum(len(r) for r in seeds)


def check_runs(name: str, profiles: Sequence[str], scales: Sequence[float], seeds: Sequence[range], text: Any) -> None:
    """A sweep is a run of every workload with every policy at each load and seed: a count of runs, at most
    ``MAX_COUNT`` as every count the spec declares, checked before the seeds are listed or any cell planned."""
    per_seed = runs_asked(name, profiles, scales, [range(1)])
    count = sum(len(r) for r in seeds)
    if count * per_seed > MAX_COUNT:
        at = f" at {len(scales)} loads" if len(scales) > 1 else ""
        raise SimInputError(f"--seeds {text}: {count:,} seeds, each a run of suite {name}'s {len(SUITES[name])} workloads "
                            f"with {counted(len(profiles), 'policy', 'policies')}{at}, would be {count * per_seed:,} runs, "
                            f"more than {MAX_COUNT:,}, the most of any count in the spec")


def check_load_scales(xs: Sequence[Any]) -> list[float]:
    """``--load-scale``, once or more: finite numbers > 0, each given once."""
    seen: list[float] = []
    for x in xs:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x <= 0:
            raise SimInputError(f"--load-scale must be a number > 0 (1.03: 3% more load), got {plain(x)}")
        if float(x) in seen:
            raise SimInputError(f"--load-scale {plain(x)} is given twice")
        seen.append(float(x))
    return seen


def warmups_cut(cases: Sequence[Case]) -> str:
    """The warm-up each run got where ``--duration`` cut it (each workload has its own, shrunk in proportion to a
    shorter run), workloads alike said together; empty where none was cut."""
    groups: dict[tuple[float, float, float], list[str]] = {}
    for c in cases:
        if c.own is not None:
            groups.setdefault((c.config.warmup_s, *c.own), []).append(c.spec.name)
    if not groups:
        return ""
    duration = next(c.config.duration_s for c in cases if c.own is not None)
    parts = [f"{_s(warm)} for {', '.join(names)} ({own:g} s of {'its' if len(names) == 1 else 'their'} {whole:g} s)"
             for (warm, own, whole), names in groups.items()]
    return (f"Warm-ups: --duration {plain(duration)} is shorter than these workloads' own runs, so each warm-up was cut in "
            f"proportion: {'; '.join(parts)}")


def suite_notes(cases: Sequence[Case], policies: Sequence[str]) -> list[str]:
    """The lines under a suite's title: the policies that ran as off, the warm-ups ``--duration`` cut."""
    as_off = as_off_notes(((p, Variant.of(p).profile) for p in policies), cases[0].config) if cases else []
    return [line for line in (*as_off, warmups_cut(cases)) if line]


def report(name: str, cases: Sequence[Case], rows: Sequence[Row], scale: float = 1.0) -> str:
    """The workloads and their bounds (the policies that ran as off, the warm-ups ``--duration`` cut), then every
    policy x workload."""
    policies = list(dict.fromkeys(r.policy for r in rows))
    title = f"Suite {name}{scaled(scale)}: {counted(len(cases), 'workload')} x {counted(len(policies), 'policy', 'policies')}"
    head = "\n".join([title, *suite_notes(cases, policies)])
    return (f"{head}\n\n{workloads_table(cases)}\n\n{table(cases, rows)}"
            f"\n\nColumns:\n{legend((*WORKLOAD_COLUMNS, *RESULT_COLUMNS))}")


def main(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    s, given = settings(args)
    name = s["suite"]
    if name == LIST:
        extra = sorted((given - {"suite", "progress"}) | ({"profile"} if getattr(args, "profile", None) else set()))
        if extra:
            flags = ", ".join("--" + k.replace("_", "-") for k in extra)
            raise SimInputError(f"--suite list lists the suites' workloads and runs nothing: {flags} "
                                f"{'does' if len(extra) == 1 else 'do'} not apply")
        stdout.write(listing() + "\n")
        return 0
    if name not in SUITES:
        raise SimInputError(f"unknown suite {name!r}: expected one of {', '.join(SUITES)}, or {LIST}")
    _check_options(given | ({"scenario"} if getattr(args, "scenario", None) is not None else set()))
    scales = check_load_scales(s["load_scale"])
    if "seed" in given and "seeds" in given:
        raise SimInputError("give --seed N (one run) or --seeds LIST (a run at each), not both")
    ranges = check_seeds(s["seeds"]) if "seeds" in given else [range(s["seed"], s["seed"] + 1)]
    check_jobs(s["jobs"])
    if scales != [1.0] and all(w.load is None for w in SUITES[name]):
        raise SimInputError(f"--load-scale: no workload of suite {name} has a load to scale (its scenarios keep their own "
                            "arrivals); --suite list shows each suite's")
    outputs = Outputs().file("--json", s["json"]).file("--plot", s["plot"], suffixes=PLOT_SUFFIXES)
    problem = outputs.problem()  # every output checked before the runs, as simulate checks its own
    if problem:
        raise SimInputError(problem)
    if s["plot"]:
        from .plot import _pyplot

        _pyplot()  # one line and exit 2 before the runs where matplotlib is missing
    profiles = list(dict.fromkeys(s["profile"])) if "profile" in given else default_profiles()
    for profile in profiles:  # a misspelt profile is the mistake to name, before --goal looks for one among them
        Variant.of(profile, s["tracker"])
    goal = s["goal"]
    if goal is not None and goal not in profiles:
        raise SimInputError(f"--goal {goal}: not among the policies run ({', '.join(profiles)}); give it with --profile")
    if goal is not None and len(profiles) < 2:
        raise SimInputError(f"--goal {goal}: no other policy to judge it against; give another with --profile")
    if "seeds" in given:
        check_runs(name, profiles, scales, ranges, s["seeds"])
    seeds = [seed for r in ranges for seed in r]
    show = s["progress"]
    if show == PROGRESS_AUTO:
        show = stderr.isatty()
    if len(scales) > 1 or len(seeds) > 1:
        from .suite_sweep import sweep  # the sweep builds on this module

        return sweep(name, profiles, scales, seeds, goal, s, given, outputs, stdout, stderr if show else None)
    scale, s = scales[0], dict(s, seed=seeds[0])
    started = time.perf_counter()
    cases, rows = run_suite(name, profiles, s, given, stderr if show else None, scale, jobs=s["jobs"])
    wall = time.perf_counter() - started
    table = standings(cases, rows) if goal is not None else None
    judged = "" if table is None else f"\n\n{goal_table(goal, table[goal])}\n\n{standings_table(table)}"
    stdout.write(report(name, cases, rows, scale) + judged + f"\n\nwall time: {wall:.0f} s for {counted(len(rows), 'run')}\n")
    with outputs.writing() as out:  # both files or neither
        if s["json"]:
            out.write("--json", to_json(name, cases, rows, wall, None if table is None else (goal, table), scale,
                                        s["seed"]) + "\n")
        if s["plot"]:
            plot(cases, rows, out.path("--plot"), f"suite {name}{scaled(scale)}: every policy as a fraction of the bound",
                 s["plot"])
    check_logs_whole((f"{r.workload} {r.policy}", r.log_failures) for r in rows)
    return 0


__all__ = ["Case", "KeptBound", "Planned", "QUANTILES", "Row", "SUITE_OPTIONS", "check_load_scales", "check_runs", "check_seeds", "default_profiles", "goals", "load_label", "main", "measure", "plan", "plan_suite", "plot", "report",
           "run_bound", "run_planned", "run_suite", "runs_asked", "runs_of", "scaled", "standings", "suite_doc", "table", "tpots", "ttfts_censored",
           "warmups_cut"]
