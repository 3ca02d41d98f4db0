"""Benchmark: machine instructions per runtime pass, counted by callgrind (so machine load does not move them).

    python -m prefill_delayer.benchmarks.runtime_instructions [--passes 2000,6000] [--seeds 0,1,2] [--vs DIR]

The pass is the runtime benchmark's own (``benchmarks.runtime``): one
scheduler pass through SGLang's ``PrefillDelayerSinglePassExecutor`` on one
in-process rank, the collective replaced by a copy (the rotating none / mixed /
all / watermark inputs). Each count runs the pass loop under
``valgrind --tool=callgrind`` twice, for two numbers of passes, and divides the
difference by the difference of passes, so the interpreter's start and the
imports cancel out. Python's hash seed and the address layout move a count by up
to about 0.3%; the median over ``--seeds`` is reported. ``--vs DIR`` counts another build the same
way (a checkout made visible as ``DIR/prefill_delayer``) and judges this one
against it. Needs valgrind; about 20 s a seed and build.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Optional

WARMUP = 200
TOLERANCE = 0.005  # what the hash seed and the process's address layout move a count by (±0.3% seen)
# The counted child, run as ``python -c`` against the build on its path, so every build is counted with the same
# loop: the runtime benchmark's pass, module-level as the figures in the README were counted.
CHILD = """
import sys
from prefill_delayer.benchmarks.runtime import _our_delayer, _pass
from prefill_delayer.runtime.delayer import PrefillDelayerSinglePassExecutor
n = int(sys.argv[1])
ours = _our_delayer(1, None, gather=lambda row: [list(row)])
for k in range({warmup}):
    _pass(PrefillDelayerSinglePassExecutor, ours, 1, 0, k)
for k in range(1000, 1000 + n):
    _pass(PrefillDelayerSinglePassExecutor, ours, 1, 0, k)
""".format(warmup=WARMUP)


def _count(passes: int, seed: int, path: Optional[str], out_dir: str) -> int:
    """Instructions of the whole process running ``passes`` passes (callgrind's 'Collected'); ``path``: a folder
    holding another build as ``prefill_delayer`` (None: this one)."""
    out = os.path.join(out_dir, f"callgrind.{passes}.{seed}")
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    if path is not None:
        env["PYTHONPATH"] = path  # else this interpreter's own import path: the build this benchmark is part of
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c", CHILD, str(passes)],
        capture_output=True, text=True, env=env, check=False,
    )
    found = re.search(r"Collected : (\d+)", proc.stderr)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind run of {passes} passes failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
    return int(found.group(1))


def _per_pass(passes: list[int], seeds: list[int], path: Optional[str], label: str, out_dir: str) -> list[float]:
    counts = []
    for seed in seeds:
        low, high = (_count(n, seed, path, out_dir) for n in passes)
        counts.append((high - low) / (passes[1] - passes[0]))
        print(f"  {label}, hash seed {seed}: {counts[-1]:,.0f} instructions per pass", flush=True)
    return counts


MAX_HASH_SEED = 2**32 - 1  # the largest PYTHONHASHSEED the interpreter takes


def _ints(text: str, what: str, parser: argparse.ArgumentParser, high: Optional[int] = None) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        parser.error(f"{what} takes comma-separated integers, not {text!r}")
    if not values:
        parser.error(f"{what} needs at least one value")
    if high is not None and not all(0 <= v <= high for v in values):
        parser.error(f"{what} takes integers in [0, {high}], got {text!r}")
    return values


def main(argv: Optional[list[str]] = None) -> int:
    """Exit 2 with one line naming a bad option, or without valgrind; 130 on Ctrl-C, 143 on SIGTERM."""
    from . import parser as benchmark_parser, run_main

    parser = benchmark_parser("runtime_instructions", __doc__)
    parser.add_argument("--passes", default="2000,6000", help="the two numbers of passes (default 2000,6000)")
    parser.add_argument("--seeds", default="0,1,2", help="PYTHONHASHSEED values, one count each (default 0,1,2)")
    parser.add_argument("--vs", metavar="DIR", help="also count the build in DIR/prefill_delayer (another checkout), "
                        "with the same loop and seeds, and judge this one against it")
    args = parser.parse_args(argv)
    if args.vs is not None and not os.path.isfile(os.path.join(args.vs, "prefill_delayer", "benchmarks", "runtime.py")):
        parser.error(f"--vs {args.vs}: no prefill_delayer/benchmarks/runtime.py there (give the folder that holds the "
                     "checkout as prefill_delayer)")
    passes = _ints(args.passes, "--passes", parser)
    seeds = _ints(args.seeds, "--seeds", parser, MAX_HASH_SEED)
    if len(passes) != 2 or not 0 <= passes[0] < passes[1]:
        parser.error("--passes takes two numbers of passes, the smaller first (for example 2000,6000)")
    return run_main(parser.prog, lambda: _run(args, passes, seeds))


def _run(args: argparse.Namespace, passes: list[int], seeds: list[int]) -> int:
    if shutil.which("valgrind") is None:
        print("runtime_instructions: valgrind is not installed here (the count needs callgrind)", file=sys.stderr)
        return 2
    from . import verdict

    with tempfile.TemporaryDirectory(prefix="prefill-delayer-callgrind-") as out_dir:
        print(f"counting {passes[0]} and {passes[1]} passes under callgrind, {len(seeds)} hash seeds ...", flush=True)
        try:
            ours = statistics.median(_per_pass(passes, seeds, None, "this build", out_dir))
            other = statistics.median(_per_pass(passes, seeds, args.vs, args.vs, out_dir)) if args.vs else None
        except RuntimeError as err:
            print(f"runtime_instructions: {err}", file=sys.stderr)
            return 2
    line = f"instructions per pass (the executor's pass, one in-process rank), median over {len(seeds)} hash seeds: {ours:,.0f}"
    if other is not None:
        line += f"; {args.vs}: {other:,.0f} ({(ours / other - 1) * 100:+.1f}%)"
    print(line)
    missed = []
    if other is not None and ours > other * (1 + TOLERANCE):
        missed.append(f"{ours:,.0f} instructions per pass, more than {args.vs}'s {other:,.0f} (+{TOLERANCE:.1%} allowed)")
    return verdict(missed, [] if other is not None else ["no --vs build to compare with"])


if __name__ == "__main__":
    sys.exit(main())
