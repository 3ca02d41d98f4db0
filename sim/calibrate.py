"""Reproduce docs/simulation.md: the two calibration scenarios, the benchmark suite, their tables and figures.

    python -m prefill_delayer.sim.calibrate [--out docs] [--drifts 24] [--policies-only] [--suite default] [--only-suite]

Every run is a ``prefill-delayer simulate`` command line (printed above its
table), so each number in the document can be re-run on its own.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path
from typing import Sequence

from .cli import build, plot_title
from .options import add_arguments, settings as option_settings
from .engine import simulate
from .report import decisions_table, header, table
from .result import RunResult

DRIFTED = "3,3,0,2,3,3,2,3"  # the draw of --drift random:3 with --seed 0: a drift the delayer does not repair
MAX_RANK_SLOPE = (1.397 - 0.040) / 16384  # #35241's full 16k-chunk pass as one rank's slope, over the 40 ms floor


def shell_lines(words: Sequence[str], width: int = 100) -> str:
    """A command as the document shows it: whole, so that it pastes into a shell as it is, and broken with ``\\``
    before an option (with its value) that would pass ``width``."""
    units: list[str] = []
    for word in words:
        if units and units[-1].startswith("--") and " " not in units[-1] and not word.startswith("--"):
            units[-1] += " " + word  # an option and its value stay on one line
        else:
            units.append(word)
    lines = [""]
    for word in units:
        if lines[-1].strip() and len(lines[-1]) + 1 + len(word) > width - 2:
            lines.append("    ")
        lines[-1] += (" " if lines[-1].strip() else "") + word
    return " \\\n".join(lines)


def shell_loop(name: str, values: Sequence[str], argv: Sequence[str]) -> str:
    """``prefill-delayer simulate ARGV`` once for each of ``values`` as ``$name``, as a shell loop that pastes as it is."""
    return f"for {name} in {' '.join(values)}; do\n  prefill-delayer simulate {' '.join(argv)}\ndone"


def run(argv: Sequence[str]) -> list[RunResult]:
    """What ``prefill-delayer simulate ARGV`` runs (the figure included), without printing."""
    parser = argparse.ArgumentParser(prog="prefill-delayer simulate")
    add_arguments(parser)
    args = parser.parse_args(list(argv))
    config, variants, workload, settings = build(args)
    results = simulate(config, variants, workload)
    if settings["plot"]:
        from .plot import plot

        plot(results, settings["plot"], title=plot_title(settings, option_settings(args)[1]))
    return results


def section(title: str, argv: Sequence[str], results: Sequence[RunResult], decisions: bool = True) -> str:
    """A run's header and its ``--wide`` table (every column: the document's prose reads them all)."""
    shown = [a for a in argv if not a.startswith("  #")] + ["--wide"] + [a for a in argv if a.startswith("  #")]
    parts = [f"### {title}", "", "```", "prefill-delayer simulate " + " ".join(shown), "```", "", header(results).replace("\n", "  \n"), "",
             table(results, wide=True)]
    if decisions:
        parts += ["", "Decisions by gathered status / reason, share of rank-passes:", "", decisions_table(results)]
    return "\n".join(parts)


def regimes(out: Path, drifts: int) -> str:
    """Input throughput of the #35241 scenario over many random initial drifts, per variant."""
    variants = {
        "seed": ["--profile", "seed"],
        "hardened": ["--profile", "hardened"],
        "off (no delayer)": ["--profile", "off"],
        "seed, --max-delay-passes 5": ["--profile", "seed", "--max-delay-passes", "5"],
        "seed, --max-delay-passes 100": ["--profile", "seed", "--max-delay-passes", "100"],
        "seed, --mixed-chunk": ["--profile", "seed", "--mixed-chunk"],
        "off, --mixed-chunk": ["--profile", "off", "--mixed-chunk"],
    }
    values: dict[str, list[float]] = {k: [] for k in variants}
    mixed: dict[str, list[float]] = {k: [] for k in variants}
    for seed in range(drifts):
        for name, extra in variants.items():
            (r,) = run(["--scenario", "35241", "--drift", "random:3", "--seed", str(seed), *extra])
            values[name].append(r.summary().input_tok_s / 1000)
            mixed[name].append(r.summary().mixed_share)
    rows = [
        f"Input throughput (k tok/s) over {drifts} initial drifts (`--drift random:3 --seed 0..{drifts - 1}`):",
        "",
        "| variant | healthy (>= 85k) | between | LOW (62-79k) | below 62k | min | median | max | mixed passes, median |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, vs in values.items():
        s = sorted(vs)
        healthy = sum(v >= 85 for v in vs)
        low = sum(62 <= v <= 79 for v in vs)
        below = sum(v < 62 for v in vs)
        between = len(vs) - healthy - low - below
        med_mixed = sorted(mixed[name])[len(vs) // 2]
        rows.append(f"| {name} | {healthy} | {between} | {low} | {below} | {s[0]:.1f} | {s[len(s) // 2]:.1f} | {s[-1]:.1f} | {100 * med_mixed:.0f}% |")
    _regimes_plot(values, out / "sim-35241-regimes.png")
    return "\n".join(rows)


def new_seq_stats(r: RunResult) -> tuple[float, float, int]:
    """The reporter's measure: new sequences per rank per 30 s (mean), the mean spread between the ranks
    in a window (max - min), and the largest spread."""
    windows = r.new_seqs_per_window(30.0)
    if not windows:
        return 0.0, 0.0, 0
    spreads = [max(w) - min(w) for w in windows]
    return sum(map(sum, windows)) / (len(windows) * r.dp), sum(spreads) / len(spreads), max(spreads)


def _probes(r: RunResult) -> str:
    sent = len(r.health_checks)
    dropped = sum(1 for *_, taken in r.health_checks if not taken)
    return f"{sent} / {dropped}" if sent else "-"


HEALTH_HEADER = [
    "| run | input tok/s | mixed passes | prefill/idle split passes | #new-seq per rank per 30 s | spread between ranks per 30 s: mean, max | probes sent / dropped |",
    "|---|---:|---:|---:|---:|---:|---:|",
]


def health_row(name: str, r: RunResult) -> str:
    s = r.summary()
    mean, spread, worst = new_seq_stats(r)
    return (f"| {name} | {s.input_tok_s / 1000:.1f}k | {100 * s.mixed_share:.1f}% | {100 * s.split_share:.1f}% | {mean:.1f} "
            f"| {spread:.1f}, {worst} | {_probes(r)} |")


def health_2x2() -> str:
    """#35721's 2x2 on 0.5.17's delayer and tracker: the DP controller's health-check dispatch x health checks on or off."""
    base = ["--scenario", "35241", "--profile", "sglang-0.5.17"]
    rows = ["```\nfor dispatch in shared separate; do for interval in 2 off; do\n"
            f"  prefill-delayer simulate {' '.join(base)} --health-dispatch $dispatch --health-check-interval $interval\n"
            "done; done\n```", "",
            *HEALTH_HEADER]
    for dispatch, label in (("shared", "unpatched (probes on the user rotation, up to 0.5.22)"), ("separate", "patched (#35721, 0.5.23)")):
        for interval in ("2", "off"):
            (r,) = run([*base, "--health-dispatch", dispatch, "--health-check-interval", interval])
            checks = "health checks every 2 s" if interval != "off" else "no health checks"
            rows.append(health_row(f"{label}, {checks}", r))
    return "\n".join(rows)


def sensitivity() -> str:
    """What the #35241 result depends on that nobody measured: the resubmit gap, the probe interval, the idle pass."""
    base = ["--scenario", "35241", "--profile", "sglang-0.5.17", "--health-dispatch", "shared"]
    gaps, intervals, idles = ("0", "0.002", "0.01", "0.03", "0.1", "0.3"), ("1", "5", "10"), ("0.0005", "0.005")
    slowest = ["--cost-moe-token", "0", "--cost-attn-token", f"{MAX_RANK_SLOPE:.4g}"]
    loops = [shell_loop("gap", gaps, [*base, "--resubmit-gap", "$gap"]),
             shell_loop("interval", intervals, [*base, "--health-check-interval", "$interval"]),
             shell_loop("cost", idles, [*base, "--cost-idle-pass", "$cost"]),
             shell_loop("dispatch", ("shared", "separate"), [*base[:-1], "$dispatch", *slowest])]
    rows = ["```\n" + "\n".join(loops) + "\n```", "", *HEALTH_HEADER]
    for gap in gaps:
        (r,) = run([*base, "--resubmit-gap", gap])
        rows.append(health_row(f"resubmit gap {1000 * float(gap):g} ms", r))
    for interval in intervals:
        (r,) = run([*base, "--health-check-interval", interval])
        rows.append(health_row(f"a probe every {interval} s", r))
    for idle in idles:
        (r,) = run([*base, "--cost-idle-pass", idle])
        rows.append(health_row(f"a pass without a forward {1000 * float(idle):g} ms", r))
    # The cost of a pass where only some ranks prefill: the fitted MoE term makes it cheap; a pass
    # as long as its slowest rank (no MoE term, the whole 1.397 s on the attention slope) is the other end.
    for dispatch in ("shared", "separate"):
        (r,) = run([*base[:-1], dispatch, *slowest])
        rows.append(health_row(f"{dispatch} dispatch, pass cost the slowest rank's ({MAX_RANK_SLOPE:.4g} s per token, no MoE term)", r))
    return "\n".join(rows)


# Every policy of the spec, each profile: SGLang's delayer as released and hardened, the gate, the other engines'
# policies, and ours (`aligned`).
# The gate and vLLM's cadence do nothing at their defaults (interval 0 and 1): both run at an interval of 4.
POLICY_PROFILES = ("off", "sglang-0.5.23", "hardened", "pdi-0.5.23", "pdi-hardened", "vllm-0.33.0", "cadence-hardened",
                   "trtllm-adp-balance", "adp-hardened", "atom-coalescer", "atom-coalescer-1611",
                   "atom-coalescer-hardened", "atom-930", "atom-930-hardened", "vllm-48246", "vllm-48246-hardened", "lockstep",
                   "lockstep-hardened", "aligned")
POLICY_SETS = ("--set", "prefill_decode_interval=4", "--set", "prefill_schedule_interval=4")
# The Poisson load: #32880's engine (DP=16, the 0.20 s decode floor) without its refill wave.
POISSON = ("--workload", "poisson", "--dp-size", "16", "--max-running-requests", "128", "--max-total-tokens", "1300000",
           "--chunked-prefill-size", "8192", "--prompt-tokens", "2000:6000", "--output-tokens", "500:1500", "--cost-floor", "0.2",
           "--passes", "1000000", "--duration", "600", "--warmup", "120")
OVERLOAD_RATE = 10.0  # req/s: more than the engine serves without a policy, so what it completes is its capacity


def saturated_rate() -> float:
    """Requests per second the engine completes without a policy when offered more than it can serve."""
    (r,) = run([*POISSON, "--rate", f"{OVERLOAD_RATE:g}", "--profile", "off"])
    s = r.summary()
    return s.completed / s.sim_seconds


def _runs(s) -> str:
    return f"{s.delay_runs}, {s.delay_run_mean:.1f}, {s.delay_run_max}" if s.delay_runs else "0"


def _ttft(v) -> str:
    return "-" if v is None else f"{v:.2f} s" if v < 10 else f"{v:.0f} s"


def policy_table(results: Sequence[RunResult]) -> str:
    rows = ["| profile | input tok/s | TTFT p50 | TTFT p99 | unserved | mixed passes | prefill/idle split passes "
            "| delay/hold runs: n, mean, max |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        s = r.summary()
        rows.append(f"| {r.variant.label} | {s.input_tok_s / 1000:.1f}k | {_ttft(s.ttft_p50_s)} | {_ttft(s.ttft_p99_s)} "
                    f"| {s.unserved} | {100 * s.mixed_share:.1f}% | {100 * s.split_share:.1f}% | {_runs(s)} |")
    return "\n".join(rows)


def policies(out: Path) -> str:
    """Every policy's profiles on the calibration scenarios and on Poisson at 50%, 80% and 100% of saturation."""
    profiles = [a for p in POLICY_PROFILES for a in ("--profile", p)]
    sat = saturated_rate()
    workloads = {
        "#32880": ["--scenario", "32880"],
        "#35241": ["--scenario", "35241"],
        f"#35241 drifted {DRIFTED}": ["--scenario", "35241", "--drift", DRIFTED],
        **{f"Poisson {pct}%": [*POISSON, "--rate", f"{sat * pct / 100:.3f}"] for pct in (50, 80, 100)},
    }
    parts = [f"Saturated throughput: `off` offered {OVERLOAD_RATE:g} req/s on `{' '.join(POISSON)}` completes "
             f"{sat:.3f} req/s in its window; the Poisson rates are 50%, 80% and 100% of that. Each command has "
             f"`--profile` once for each of: {', '.join(POLICY_PROFILES)}."]
    table: dict[str, list[RunResult]] = {}
    for name, argv in workloads.items():
        start = time.perf_counter()
        results = run([*argv, *profiles, *POLICY_SETS])
        table[name] = results
        parts += ["", f"### {name}", "", "```", shell_lines(["prefill-delayer", "simulate", *argv, *profiles, *POLICY_SETS]),
                  "```", "", f"({time.perf_counter() - start:.0f} s wall for {len(results)} profiles)", "",
                  policy_table(results)]
    _policies_plot(table, out / "sim-policies.png")
    return "\n".join(parts)


def _policies_plot(table: dict[str, list[RunResult]], path: Path) -> None:
    """Input throughput relative to ``off`` and TTFT p99, per profile, one marker per workload."""
    from .plot import _pyplot, save_png

    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10.0, 6.6), dpi=80, sharex=True)
    markers = "osD^vP"
    labels = [r.variant.label for r in next(iter(table.values()))]
    xs = range(len(labels))
    for (name, results), marker in zip(table.items(), markers):
        off = next(r.summary().input_tok_s for r in results if r.variant.profile is None) or 1.0
        top.plot(xs, [r.summary().input_tok_s / off for r in results], marker=marker, ls="-", lw=0.8, ms=5, label=name)
        bottom.plot(xs, [r.summary().ttft_p99_s or float("nan") for r in results], marker=marker, ls="-", lw=0.8, ms=5,
                    label=name)
    top.axhline(1.0, color="#7f7f7f", lw=0.8, ls="--")
    top.set_ylabel("input tok/s / off's", fontsize=9)
    fig.suptitle("Every policy on the calibration scenarios and on Poisson at 50/80/100% of saturation", fontsize=10)
    handles, names = top.get_legend_handles_labels()
    fig.legend(handles, names, fontsize=8, ncol=len(names), loc="upper center", bbox_to_anchor=(0.5, 0.955),
               frameon=False, handletextpad=0.3, columnspacing=1.0)
    bottom.set_yscale("log")
    bottom.set_ylabel("TTFT p99, s (log)", fontsize=9)
    bottom.set_xticks(list(xs), labels, rotation=40, ha="right", fontsize=8)
    for ax in (top, bottom):
        ax.tick_params(labelsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    save_png(fig, str(path), dpi=80)


def _regimes_plot(values: dict[str, list[float]], path: Path) -> None:
    from .plot import _pyplot, save_png

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9.0, 3.4), dpi=72)
    rng = random.Random(0)
    for i, (name, vs) in enumerate(values.items()):
        ax.scatter([i + rng.uniform(-0.15, 0.15) for _ in vs], vs, s=14, alpha=0.7)
    ax.axhspan(62, 79, color="#d62728", alpha=0.12, lw=0, label="#35241 LOW: 62-79k tok/s")
    ax.axhline(95, color="#2ca02c", lw=1, ls="--", label="#35241 healthy: ~95k tok/s")
    ax.set_xticks(range(len(values)), [v.replace(", ", "\n") for v in values], fontsize=7)
    ax.set_ylabel("input k tok/s", fontsize=8)
    ax.set_title("#35241 scenario: one dot per initial drift (random:3, seeds 0..N-1)", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    save_png(fig, str(path), dpi=72)


def suite_section(out: Path, name: str) -> str:
    """``prefill-delayer simulate --suite NAME``'s table for the default profiles, and its figure."""
    from .suite_run import default_profiles, plot, report, run_suite

    argv = ["--suite", name, "--plot", str(out / "sim-suite.png")]
    parser = argparse.ArgumentParser(prog="prefill-delayer simulate")
    add_arguments(parser)
    s, given = option_settings(parser.parse_args(argv))
    started = time.perf_counter()
    cases, rows = run_suite(name, default_profiles(), s, given)
    print(f"(suite {name}: {len(rows)} runs in {time.perf_counter() - started:.0f} s)", file=sys.stderr)
    plot(cases, rows, s["plot"], f"suite {name}: every policy as a fraction of the bound", s["plot"])
    head, rest = report(name, cases, rows).split("\n\n", 1)  # the header's lines, each its own in Markdown
    return "\n".join([f"### The suite `{name}`", "", "```", "prefill-delayer simulate " + " ".join(argv), "```", "",
                      head.replace("\n", "  \n") + "\n\n" + rest])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m prefill_delayer.sim.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="docs", help="folder for the PNGs (default: docs)")
    p.add_argument("--drifts", type=int, default=24, help="initial drifts in the #35241 regime sweep (default 24)")
    p.add_argument("--policies-only", action="store_true", help="only the comparison of every policy (and its figure)")
    p.add_argument("--suite", default="default", help="the benchmark suite whose table ends the document (default: default; none: leave it out)")
    p.add_argument("--only-suite", action="store_true", help="print the suite's section only")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if args.policies_only:
        print("## Every policy side by side\n\n" + policies(out))
        print(f"\n(policies: {time.perf_counter() - start:.0f} s)", file=sys.stderr)
        return 0
    if args.only_suite:
        print(suite_section(out, args.suite))
        return 0
    sections = []

    argv1 = ["--scenario", "32880", "--plot", str(out / "sim-32880.png")]
    sections.append(section("#32880: the seed starves admission", argv1, run(argv1)))
    ablation = ["--scenario", "32880", "--profile", "seed", "--profile", "sglang-0.5.22", "--tracker"]
    results = run([*ablation, "window"])[:1] + run([*ablation, "lifetime"])[1:]
    sections.append(section(
        "#32880 ablation: the tracker alone (seed+window), the cap alone (sglang-0.5.22+lifetime)",
        ["--scenario", "32880", "--profile", "seed", "--tracker", "window", "  # and: --profile sglang-0.5.22 --tracker lifetime"],
        results, decisions=False))
    overload = ["--scenario", "32880", "--rate", "8", "--profile", "seed", "--profile", "sglang-0.5.17", "--profile", "sglang-0.5.22", "--profile", "hardened"]
    results = run(overload) + run(["--scenario", "32880", "--rate", "8", "--profile", "seed", "--tracker", "window"]) + run(
        ["--scenario", "32880", "--rate", "8", "--profile", "sglang-0.5.22", "--tracker", "lifetime"])
    sections.append(section(
        "#32880 at 8 req/s, more than any profile serves",
        [*overload, "  # and the two ablations, with --rate 8"], results, decisions=False))

    argv2 = ["--scenario", "35241", "--plot", str(out / "sim-35241.png")]
    sections.append(section("#35241, each release's health-check dispatch", argv2, run(argv2)))
    sections.append("### #35241: the 2x2 of #35721 on 0.5.17\n\n" + health_2x2())
    sections.append("### #35241: sensitivity to what the report does not measure\n\n" + sensitivity())
    argv2b = ["--scenario", "35241", "--health-check-interval", "off", "--profile", "sglang-0.5.17", "--profile", "off"]
    sections.append(section("#35241 without health checks, ranks aligned", argv2b, run(argv2b)))
    argv3 = ["--scenario", "35241", "--drift", DRIFTED, "--plot", str(out / "sim-35241-drift.png")]
    sections.append(section(f"#35241, ranks drifted by {DRIFTED} chunks", argv3, run(argv3)))
    argv4 = ["--scenario", "35241", "--drift", DRIFTED, "--mixed-chunk"]
    sections.append(section(f"#35241, drifted by {DRIFTED} chunks, with --mixed-chunk", argv4, run(argv4)))
    argv5 = ["--scenario", "35241", "--drift", "1,0,0,0,0,0,0,0", "--profile", "seed", "--profile", "off"]
    sections.append(section("#35241, one rank a chunk ahead", argv5, run(argv5)))
    sections.append("### #35241 over many initial drifts\n\n" + regimes(out, args.drifts))
    sections.append("## Every policy side by side\n\n" + policies(out))
    if args.suite != "none":
        sections.append(suite_section(out, args.suite))
    print("\n\n".join(sections))
    print(f"\n(calibration: {time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
