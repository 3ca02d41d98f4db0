"""vLLM 0.33.0's own prefill cadence code beside the ``vllm-0.33.0`` profile, on random runs of 2-4 DP ranks.

The released code is taken out of the vllm 0.33.0 wheel from the package
registry (``integrations.released``, cached) and run unmodified on stand-in
engine and scheduler objects:

* ``DPEngineCoreProc._should_throttle_prefills`` and ``_has_global_unfinished_reqs``
  (its ``sync_dp_state`` all-reduce answered with the ranks' OR, as the SUM > 0 is);
* the wave's end in ``run_busy_loop`` (the ``if not self.engines_running`` block);
* from ``Scheduler.schedule``, the ``defer_prefills`` expression and the block that
  sets ``prefill_capacity_bound`` after a step that did not defer.

Every pass, every rank's decision (prefill or defer) and the step counter's
residues must be the profile's, through ``PolicyCore`` over the in-process gather.
"""

from __future__ import annotations

import ast
import logging
import random
from types import SimpleNamespace
from typing import Any

import pytest

from prefill_delayer.integrations.released import ReleaseUnavailable, fetch_files
from prefill_delayer.runtime import PolicyCore, run_ranks
from prefill_delayer.spec.policies.vllm_prefill_cadence import CadenceConfig

pytestmark = pytest.mark.registry

VERSION = "0.33.0"
CORE, SCHEDULER = "vllm/v1/engine/core.py", "vllm/v1/core/sched/scheduler.py"


@pytest.fixture(scope="module")
def released() -> dict[str, Any]:
    """The released pieces, compiled from the wheel's own source."""
    try:
        files = fetch_files("vllm", VERSION, [CORE, SCHEDULER])
    except ReleaseUnavailable as err:
        pytest.skip(str(err))
    core = ast.parse(files[CORE].read_text(encoding="utf-8"))
    engine_cls = next(n for n in core.body if isinstance(n, ast.ClassDef) and n.name == "DPEngineCoreProc")
    methods = [n for n in engine_cls.body if isinstance(n, ast.FunctionDef)
               and n.name in ("_should_throttle_prefills", "_has_global_unfinished_reqs")]
    loop = next(n for n in engine_cls.body if isinstance(n, ast.FunctionDef) and n.name == "run_busy_loop")
    wave_end = next(n for n in ast.walk(loop) if isinstance(n, ast.If) and ast.unparse(n.test) == "not self.engines_running")
    sched = ast.parse(files[SCHEDULER].read_text(encoding="utf-8"))
    sched_cls = next(n for n in sched.body if isinstance(n, ast.ClassDef) and n.name == "Scheduler")
    schedule = next(n for n in sched_cls.body if isinstance(n, ast.FunctionDef) and n.name == "schedule")
    defer = next(n for n in ast.walk(schedule) if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "defer_prefills"
                 and "throttle_prefills" in ast.unparse(n.value))
    capacity = next(n for n in ast.walk(schedule) if isinstance(n, ast.If) and ast.unparse(n.test) == "not defer_prefills"
                    and "prefill_capacity_bound" in ast.unparse(n))
    assert len(methods) == 2
    namespace: dict[str, Any] = {"logger": logging.getLogger("vllm-0.33.0"),
                                 "EngineCoreOutputs": lambda **kw: SimpleNamespace(**kw)}
    exec(compile(ast.Module(body=methods, type_ignores=[]), str(files[CORE]), "exec"), namespace)  # noqa: S102
    return {
        "throttle": namespace["_should_throttle_prefills"],
        "sync": namespace["_has_global_unfinished_reqs"],
        "wave_end": compile(ast.Module(body=[wave_end], type_ignores=[]), str(files[CORE]), "exec"),
        "defer": compile(ast.Expression(body=defer.value), str(files[SCHEDULER]), "eval"),
        "capacity": compile(ast.Module(body=[capacity], type_ignores=[]), str(files[SCHEDULER]), "exec"),
        "namespace": namespace,
    }


class Rank:
    """The attributes of one DP rank's engine and scheduler that the released pieces read and write."""

    def __init__(self, rank: int, interval: int, sync: int, world: list) -> None:
        self.engine = SimpleNamespace(
            prefill_schedule_interval=interval, dp_sync_interval=sync, step_counter=0, current_wave=0,
            engines_running=True, pending_pause=False, ignore_start_dp_wave=False, dp_rank=rank,
            has_coordinator=True, dp_group=None, output_queue=SimpleNamespace(put_nowait=lambda item: None),
        )
        # sync_dp_state: the SUM all-reduce of [has_unfinished, pending_pause] over the ranks of this iteration.
        self.engine.vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(
            sync_dp_state=lambda dp_group, has_unfinished, pending_pause: (any(r.unfinished for r in world), False)))
        self.sched = SimpleNamespace(prefill_capacity_bound=False, running=[], deferred_waiting=[], waiting=0)
        self.sched.get_request_counts = lambda: (len(self.sched.running), self.sched.waiting)
        self.unfinished = True


def _released_run(code: dict[str, Any], run: list, interval: int, sync: int) -> list[list[tuple]]:
    """(allowed, step residues, capacity flag seen) per pass and rank, from vLLM's own code."""
    world: list[Rank] = []
    world.extend(Rank(r, interval, sync, world) for r in range(len(run[0])))
    out = []
    for per_rank in run:
        seen = []
        for r, (decode, waiting_after, unfinished) in zip(world, per_rank):
            e, s = r.engine, r.sched
            cap = s.prefill_capacity_bound
            s.running = [SimpleNamespace(is_prefill_chunk=not decode)]
            throttle = code["throttle"](e)
            defer = eval(code["defer"], {**code["namespace"], "self": s, "throttle_prefills": throttle})  # noqa: S307
            s.waiting, s.deferred_waiting = waiting_after, []
            exec(code["capacity"], {**code["namespace"], "self": s, "defer_prefills": defer})  # noqa: S102
            seen.append((not defer, e.step_counter % interval, e.step_counter % sync, e.step_counter == 0, cap))
            r.unfinished = unfinished
        for r in world:  # the end of the iteration: count it, sync, maybe end the wave
            r.engine.engines_running = code["sync"](r.engine, r.unfinished)
            exec(code["wave_end"], {**code["namespace"], "self": r.engine, "was_running": True})  # noqa: S102
        out.append(seen)
    return out


def _our_run(run: list, interval: int, sync: int, caps: list[list[bool]]) -> list[list[tuple]]:
    world = len(run[0])
    c = CadenceConfig(prefill_schedule_interval=interval, dp_sync_interval=sync, dp_size=world, enable_dp_attention=True)

    def rank_main(rank: int, gather: Any) -> list[tuple]:
        core = PolicyCore(c, gather, clock=lambda: 0.0, decision_log=False)
        unfinished, out = True, []
        for k, per_rank in enumerate(run):
            decode, _, now_unfinished = per_rank[rank]
            d = core.negotiate(decode, caps[k][rank], unfinished)
            core.finalize()
            st = core.state
            out.append((d.output_allow, st.cad, st.syn, st.fresh, caps[k][rank]))
            unfinished = now_unfinished
        return out

    per_rank = run_ranks(world, rank_main)
    return [[per_rank[r][k] for r in range(world)] for k in range(len(run))]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_vllm_0_33_0_decides_as_its_profile_on_random_runs(released: dict[str, Any], world: int) -> None:
    rng = random.Random(world)
    split = waves = 0
    for _ in range(30):
        interval, sync, busy = rng.randint(1, 4), rng.randint(1, 4), rng.choice([0.9, 0.3])
        # Per pass and rank: a decode runs, the waiting queue left after the step, unfinished work after it.
        run = [[(rng.random() < 0.7, rng.choice([0, 0, 1, 3]), rng.random() < busy) for _ in range(world)]
               for _ in range(30)]
        want = _released_run(released, run, interval, sync)
        got = _our_run(run, interval, sync, [[seen[4] for seen in per_rank] for per_rank in want])
        assert got == want, (interval, sync, run)
        split += sum(len({s[0] for s in per_rank}) > 1 for per_rank in want)
        waves += sum(per_rank[0][3] for per_rank in want[1:])
    assert split > 0 and waves > 0  # the runs reach both: ranks deciding apart, and a wave ending


def test_the_released_throttle_is_the_cadence(released: dict[str, Any]) -> None:
    e = SimpleNamespace(prefill_schedule_interval=3, step_counter=0)
    throttled = []
    for step in range(7):
        e.step_counter = step
        throttled.append(released["throttle"](e))
    assert throttled == [False, True, True, False, True, True, False]
