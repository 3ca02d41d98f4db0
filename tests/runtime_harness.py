"""Helpers for the runtime tests: real gloo ranks in child processes, and SGLang's released delayers in threads.

``spawn_gloo(world, scenario, *args)`` runs ``scenario(rank, world, *args)`` in
``world`` processes that joined one gloo group on 127.0.0.1 (free port, short
collective timeout) and returns each rank's result or error as plain data. The
children fork from a forkserver that has torch preloaded (fast starts), every
wait is bounded, and no child outlives the call.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import time
import traceback
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Optional

COLLECTIVE_TIMEOUT_S = 4.0

_ctx: Optional[Any] = None


def _context() -> Any:
    global _ctx
    if _ctx is None:
        from multiprocessing import forkserver

        _ctx = mp.get_context("forkserver")
        _ctx.set_forkserver_preload(["torch", "torch.distributed", "prefill_delayer.runtime"])
        # Start it now, with torch's "no numpy" import warning silenced for it and its children.
        old = os.environ.get("PYTHONWARNINGS")
        os.environ["PYTHONWARNINGS"] = "ignore:Failed to initialize NumPy"
        try:
            forkserver.ensure_running()
        finally:
            if old is None:
                del os.environ["PYTHONWARNINGS"]
            else:
                os.environ["PYTHONWARNINGS"] = old
    return _ctx


def cases_path() -> Path:
    """The conformance cases (tests/data/seed_cases.json)."""
    return Path(__file__).parent / "data" / "seed_cases.json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def error_info(err: BaseException) -> dict[str, Any]:
    """An exception as plain data (type, message, attributes, cause)."""
    cause = err.__cause__
    return {
        "type": type(err).__name__,
        "message": str(err),
        "attrs": {k: v for k, v in vars(err).items() if isinstance(v, (int, str, dict, tuple, list, float))},
        "cause": None if cause is None else {"type": type(cause).__name__, "message": str(cause)},
    }


def _entry(rank: int, world: int, port: int, timeout_s: float, destroy: bool, scenario: Callable[..., Any], args: tuple,
           queue: Any) -> None:
    warnings.filterwarnings("ignore", message=r".*NumPy.*")
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch.distributed as dist

    try:
        dist.init_process_group(
            "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
        )
        result = scenario(rank, world, *args)
        queue.put((rank, "ok", result))
    except BaseException as err:  # noqa: BLE001 - reported to the parent
        queue.put((rank, "error", {**error_info(err), "traceback": traceback.format_exc()}))
    finally:
        queue.close()
        queue.join_thread()
    if not destroy:  # a group with a dead member: tearing it down could block, and the result is already sent
        os._exit(0)
    if dist.is_initialized():
        dist.destroy_process_group()


def spawn_gloo(world: int, scenario: Callable[..., Any], *args: Any, timeout_s: float = 60.0,
               collective_timeout_s: float = COLLECTIVE_TIMEOUT_S, destroy: bool = True) -> dict[int, tuple[str, Any]]:
    """``{rank: ("ok", result) | ("error", info) | ("exit", exitcode)}`` for every rank."""
    ctx = _context()
    queue = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=_entry, args=(r, world, port, collective_timeout_s, destroy, scenario, args, queue), daemon=True)
        for r in range(world)
    ]
    for p in procs:
        p.start()
    out: dict[int, tuple[str, Any]] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < world and time.monotonic() < deadline:
            try:
                rank, status, value = queue.get(timeout=0.2)
                out[rank] = (status, value)
            except Exception:  # queue.Empty
                for r, p in enumerate(procs):
                    if r not in out and p.exitcode is not None and queue.empty():
                        out[r] = ("exit", p.exitcode)
        for p in procs:
            p.join(max(0.1, min(10.0, deadline - time.monotonic())))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        queue.close()
    missing = [r for r in range(world) if r not in out]
    if missing:
        raise TimeoutError(f"ranks {missing} reported nothing within {timeout_s} s")
    return out


def results(out: dict[int, tuple[str, Any]]) -> list[Any]:
    """The per-rank results, failing with every rank's traceback when one did not succeed."""
    bad = {r: v for r, v in out.items() if v[0] != "ok"}
    if bad:
        details = "\n".join(f"rank {r}: {v[0]}: {v[1].get('traceback', v[1]) if isinstance(v[1], dict) else v[1]}" for r, v in sorted(bad.items()))
        raise AssertionError(f"ranks failed:\n{details}")
    return [out[r][1] for r in range(len(out))]


class Clock:
    """A settable clock: ``clock()`` returns ``offset + rate * t``; tests move ``t``."""

    def __init__(self, t: float = 0.0, rate: float = 1.0, offset: float = 0.0) -> None:
        self.t, self.rate, self.offset = t, rate, offset

    def __call__(self) -> float:
        return self.offset + self.rate * self.t


def decision_tuple(d: Any) -> tuple:
    """The seed's output fields of a decision (ours or the seed's), comparable across implementations."""
    return (
        d.input_estimation,
        bool(d.output_allow),
        d.output_reason,
        int(d.num_prefillable),
        int(d.num_token_watermark_force_allow),
        int(d.wait_forward_passes),
        float(d.wait_seconds),
    )


def seed_delayer(dp_size: int, attn_tp_size: int, server_args: Any, max_delay_passes: int, watermark: Optional[float],
                 gather: Callable[[list[int]], list[list[int]]], metrics: Any = None,
                 clock: Optional[Callable[[], float]] = None) -> Any:
    """SGLang's seed release's own ``PrefillDelayer``, its collective replaced by ``gather`` (call ``require_release`` first)."""
    from prefill_delayer.integrations.sglang.upstream import SEED_RELEASE, release_delayer

    return release_delayer(
        SEED_RELEASE, group=gather, server_args=server_args, dp_size=dp_size, attn_tp_size=attn_tp_size,
        max_delay_passes=max_delay_passes, token_usage_low_watermark=watermark, metrics_collector=metrics, clock=clock,
    )[1]


_registry_failure: list[str] = []  # the first fetch failure: the registry is not asked again this session


def require_release(version: str) -> Path:
    """SGLang ``version``'s ``prefill_delayer.py`` from the cache or the package registry, else skip the test."""
    import pytest

    from prefill_delayer.integrations.sglang.upstream import ReleaseUnavailable, cache_dir, release_source

    target = cache_dir() / f"sglang-{version}" / "prefill_delayer.py"
    if _registry_failure and not target.is_file():
        pytest.skip(f"SGLang {version} is not cached and the registry already failed this session: {_registry_failure[0]}")
    try:
        return release_source(version)
    except ReleaseUnavailable as err:
        _registry_failure.append(str(err))
        pytest.skip(str(err))


def finalize_release(executor: Any, actual_prefill_bs: int) -> None:
    """A release executor's ``finalize``: ``actual_prefill_bs`` from 0.5.18 on, the bool ``actual_prefill`` before."""
    import inspect

    if "actual_prefill_bs" in inspect.signature(executor.finalize).parameters:
        executor.finalize(actual_prefill_bs=actual_prefill_bs)
    else:
        executor.finalize(actual_prefill=actual_prefill_bs > 0)


class Recorder:
    """A metrics collector that records every observation."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def observe_prefill_delayer_outcome(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)
