"""Helpers for the decision-log tests: runs that write logs (in-process and gloo), check-log in-process, line edits."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any, Callable, Optional

from prefill_delayer.runtime import PrefillDelayer, PrefillDelayerSinglePassExecutor, ServerArgs, run_ranks
from prefill_delayer.runtime.example import mixed_workload

from runtime_harness import Clock

# A small configuration every profile accepts, with every trigger reachable.
SERVER_ARGS = dict(enable_dp_attention=True, prefill_delayer_queue_min_ratio=0.5, prefill_delayer_max_delay_ms=10.0)
MAX_DELAY_PASSES = 4
WATERMARK = 0.5
PASS_SECONDS = 0.0041  # 10 ms never falls on a pass: ranks whose clocks differ by an offset decide alike


def mixed_inputs(rank: int, k: int) -> tuple[bool, float, int, int, int, int]:
    """The example's ``--workload mixed``: nobody prefillable, mixed (delays up to the cap), everyone
    with the queue trigger, a low-KV-usage rank (forced), everyone without a trigger. Its
    max_running_requests is equal on every rank, so every profile's ranks agree under a shared clock."""
    return mixed_workload(rank, 4, k)


def drive(delayer: PrefillDelayer, clock: Clock, rank: int, passes: int,
          inputs: Callable[[int, int], tuple] = mixed_inputs) -> list[tuple]:
    """``passes`` scheduler passes through the executor; each rank's (allow, reason, wait_forward_passes)."""
    out = []
    for k in range(passes):
        clock.t = PASS_SECONDS * k
        prefillable, usage, rb, pb, mrr, wq = inputs(rank, k)
        ex = PrefillDelayerSinglePassExecutor(delayer, usage)
        allow = ex.negotiate_should_allow_prefill(prefillable, rb, pb, mrr, wq) if prefillable else False
        ex.finalize(actual_prefill=allow)
        d = ex._result
        out.append((d.output_allow, d.output_reason, d.wait_forward_passes))
    return out


def slot_full_inputs(rank: int, k: int) -> tuple:
    """Executor inputs whose slot trigger holds on every pass (150 - 100 < 80): the seed delays without a cap."""
    return True, 0.9, 100, 80, 150, 10 + k


def write_seed_unbounded_logs(folder: Path, log_options: Optional[dict[str, Any]] = None) -> list[list[tuple]]:
    """Two seed ranks on the slot trigger: the seed's unbounded delay, so check-log finds violations and writes traces."""
    return write_inprocess_logs(folder, world=2, passes=12, profile="seed", max_delay_passes=4, inputs=slot_full_inputs,
                                server_args={"enable_dp_attention": True}, log_options=log_options)


def write_inprocess_logs(folder: Path, world: int = 4, passes: int = 60, profile: str = "hardened",
                         max_delay_passes: int = MAX_DELAY_PASSES, rates: Optional[list[float]] = None,
                         inputs: Callable[[int, int], tuple] = mixed_inputs, skip: Optional[bool] = None,
                         server_args: Optional[dict[str, Any]] = None,
                         log_options: Optional[dict[str, Any]] = None) -> list[list[tuple]]:
    """A ``world``-rank run over the in-process gather, every rank logging into ``folder``
    (``log_options``: ``DecisionLogOptions`` fields, e.g. the format)."""
    sa = ServerArgs(**(server_args or SERVER_ARGS))
    target: Any = folder
    if log_options is not None:
        from prefill_delayer.runtime.decision_log import DecisionLogOptions

        target = DecisionLogOptions(folder, folder=True, **log_options)

    def rank_main(rank: int, gather: Any) -> list[tuple]:
        clock = Clock(t=0.0, rate=(rates or [1.0] * world)[rank], offset=1000.0 + 3.0 * rank)
        d = PrefillDelayer(world, 1, None, sa, max_delay_passes, WATERMARK, gather=gather, clock=clock,
                           profile=profile, decision_log=target)
        if skip is not None:
            d.skip_first_delayer = skip
        try:
            return drive(d, clock, rank, passes, inputs)
        finally:
            d.close()

    folder.mkdir(parents=True, exist_ok=True)
    return run_ranks(world, rank_main, timeout_s=30.0)


def check_log(*argv: str) -> tuple[int, str, str]:
    """``prefill-delayer check-log ARGV`` in this process: (exit code, stdout, stderr)."""
    from prefill_delayer.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["check-log", *argv])
    return rc, out.getvalue(), err.getvalue()


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every line of a log as an object: format 2's pass arrays named as ``pass_dicts`` names them."""
    raw = [json.loads(line) for line in path.read_text().splitlines()]
    if not raw or raw[0].get("format") != 2:
        return raw
    named = iter(_named(raw[0], [x for x in raw[1:] if isinstance(x, list)]))
    return [next(named) if isinstance(x, list) else x for x in raw]


def edit_line(path: Path, pred: Callable[[dict[str, Any]], bool], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Rewrite the first line of ``path`` for which ``pred`` holds; return it as changed."""
    lines = path.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):
        obj = json.loads(line)
        if pred(obj):
            change(obj)
            lines[i] = json.dumps(obj) + "\n"
            path.write_text("".join(lines))
            return obj
    raise AssertionError(f"no line of {path} matches")


def edit_pass(path: Path, number: int, change: Callable[[list, list], None]) -> None:
    """Rewrite pass ``number``'s format-2 line: ``change(values, columns)`` edits the array in place."""
    lines = path.read_text().splitlines()
    columns = json.loads(lines[0])["columns"]
    for i, line in enumerate(lines[1:], 1):
        values = json.loads(line)
        if isinstance(values, list) and values[0] == number:
            change(values, columns)
            lines[i] = json.dumps(values, separators=(",", ":"))
            path.write_text("\n".join(lines) + "\n")
            return
    raise AssertionError(f"no pass {number} in {path}")


def pass_dicts(path: Path) -> list[dict[str, Any]]:
    """A log's pass lines as objects by name, whatever the format: format 1's as written; format 2's arrays named by the
    header's columns, grouped (``row``, ``view``, ``before``, ``decision``, ``after``), indices and 0/1 decoded."""
    return [x for x in read_lines(path) if x.get("kind") == "pass"]


def _named(header: dict[str, Any], arrays: list[list]) -> list[dict[str, Any]]:
    from prefill_delayer.spec import Config
    from prefill_delayer.spec.schema import pass_columns

    policy = Config(**header["config"]).policy
    kinds = dict(pass_columns(policy))
    enums = header["enums"]
    out = []
    for x in arrays:
        o: dict[str, Any] = {"kind": "pass"}
        for name, v in zip(header["columns"], x):
            kind = kinds.get(name)
            if kind == "bool":
                v = bool(v)
            elif kind == "control":
                v = enums["control"][v]
            elif kind == "reason":
                v = enums["reason"][v]
            elif name in enums:
                v = enums[name][v]
            elif kind == "seconds or none" and v == 0 and math.copysign(1.0, v) < 0:
                v = None
            group, _, key = name.partition(".")
            if key and group in ("row", "view", "before", "decision", "after"):
                o.setdefault(group, {})[key] = v
            elif group == "rows":
                o.setdefault("rows", []).append(v)
            else:
                o[name] = v
        o["row"] = list(o["row"].values())
        out.append(o)
    return out
