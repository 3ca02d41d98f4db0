"""SGLang's released ``prefill_delayer.py``, fetched from the package registry and run without SGLang.

The parity tests and the benchmark run the very code each SGLang release
shipped, next to this runtime. ``release_source(version)`` fetches a release
once (``pip download sglang==X --no-deps``) and keeps only that one file in a
cache outside the repository; ``load_release(version)`` executes it as a fresh
module with stubs for its sglang imports (``integrations.sglang.release_stubs``);
``release_delayer`` builds its ``PrefillDelayer`` whatever that release's
constructor takes. Nothing here is imported by ``prefill_delayer.runtime``
itself, and torch is imported only when a release is loaded.
"""

from __future__ import annotations

import inspect
import sys
import tempfile
import threading
import types
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional

from ...spec.policies.sglang_delayer.profiles import RELEASES, SEED_RELEASE
from .. import released
from ..released import CACHE_ENV, cache_dir
from . import release_stubs as stubs

__all__ = [
    "CACHE_ENV", "RELEASES", "ReleaseUnavailable", "SEED_RELEASE", "cache_dir", "load_release",
    "parallel_context", "release_delayer", "release_source",
]

MEMBER = "sglang/srt/managers/prefill_delayer.py"  # the file's path inside a wheel; an sdist nests it deeper
PIP_TIMEOUT_S = 600.0  # the whole download; wheels are tens of MB


class ReleaseUnavailable(released.ReleaseUnavailable):
    """A release's ``prefill_delayer.py`` is neither cached nor obtainable from the package registry."""

    def __init__(self, version: str, target: Path, detail: str) -> None:
        super().__init__("sglang", version, MEMBER, target, detail, shown="SGLang")


def _check_version(version: Any) -> str:
    if not isinstance(version, str) or version not in RELEASES:
        raise ValueError(f"unknown SGLang release {version!r}: expected one of {', '.join(RELEASES)}")
    return version


_fetch_lock = threading.Lock()


def release_source(version: str) -> Path:
    """The cached ``prefill_delayer.py`` of SGLang ``version``, fetched on first use.

    Raises ``ValueError`` for a release not in ``RELEASES`` and
    ``ReleaseUnavailable`` when it is not cached and cannot be downloaded. The
    file appears atomically: a failed fetch leaves no partial file behind.
    """
    target = cache_dir() / f"sglang-{_check_version(version)}" / "prefill_delayer.py"
    if target.is_file():
        return target
    with _fetch_lock:
        if not target.is_file():
            _fetch(version, target)
    return target


def _fetch(version: str, target: Path) -> None:
    unavailable = released.Unavailable("SGLang", version, MEMBER, target, cls=ReleaseUnavailable)
    with tempfile.TemporaryDirectory(prefix="prefill-delayer-pip-") as tmp:
        archive = released.download(_pip_command(version, Path(tmp)), Path(tmp), unavailable, PIP_TIMEOUT_S)
        data = released.member_bytes(archive, MEMBER, unavailable)
    released.write_atomically(target, data)


def _pip_command(version: str, dest: Path) -> list[str]:
    return released.pip_command("sglang", version, dest)


# ----- loading ------------------------------------------------------------------------------

_load_lock = threading.Lock()
_loads = 0


@lru_cache(maxsize=None)
def _compiled(path: str, source: str) -> types.CodeType:
    return compile(source, path, "exec")


def load_release(
    version: str,
    *,
    clock: Optional[Callable[[], float]] = None,
    parallel: Optional[Any] = None,
    schedule: Optional[Any] = None,
) -> types.ModuleType:
    """A fresh module object of SGLang ``version``'s ``prefill_delayer.py``, run unmodified.

    ``clock`` replaces ``time.perf_counter`` in that module only (its calls and
    its ``_State`` default factory): how a test gives each rank its own clock.
    ``parallel`` / ``schedule`` are what the stubbed ``get_parallel()`` /
    ``get_schedule()`` return (releases from 0.5.18 / 0.5.19 on; see
    ``parallel_context``; a ``ServerArgs`` serves as the schedule). Each load is
    independent: nothing is left in ``sys.modules``.
    """
    global _loads
    path = release_source(version)
    code = _compiled(str(path), path.read_text())
    from ...runtime.gather import import_torch

    torch, dist = import_torch()
    served = {**stubs.stub_modules(version, torch, dist, parallel, schedule), **stubs.fake_imports(torch, dist, clock)}
    requested: set[str] = set()
    with _load_lock:
        _loads += 1
        module = types.ModuleType(f"_sglang_{version.replace('.', '_')}_prefill_delayer_{_loads}")
        module.__file__ = str(path)
        module.__builtins__ = stubs.builtins_with_imports(served, requested)  # type: ignore[attr-defined]
        # dataclasses and NamedTuple look the module up while its classes are built.
        sys.modules[module.__name__] = module
        try:
            exec(code, module.__dict__)
        finally:
            sys.modules.pop(module.__name__, None)
    expected = set(stubs.release_imports(version))
    got = {name for name in requested if name.startswith("sglang.")}
    if got != expected:
        raise RuntimeError(f"SGLang {version} imported {sorted(got)}, the stubs expect {sorted(expected)}")
    return module


def parallel_context(
    *,
    dp_size: int,
    attn_tp_size: int,
    enable_dp_attention: bool,
    cpu_group: Any,
    attn_cp_size: int = 1,
    device_group: Any = None,
    device: Any = "cpu",
) -> types.SimpleNamespace:
    """What SGLang's ``get_parallel()`` returns, under the names each release reads (0.5.22 renamed some)."""
    return types.SimpleNamespace(
        enable_dp_attention=enable_dp_attention,
        dp_size=dp_size,
        attn_tp_size=attn_tp_size,
        attn_dp_enabled=enable_dp_attention,
        num_dp_ranks=dp_size,
        attn_cp_size=attn_cp_size,
        tp_group=types.SimpleNamespace(cpu_group=cpu_group, device_group=device_group, device=device),
    )


def release_delayer(
    version: str,
    *,
    group: Any,
    server_args: Any,
    dp_size: int,
    attn_tp_size: int,
    max_delay_passes: int,
    token_usage_low_watermark: Optional[float],
    metrics_collector: Optional[Any] = None,
    attn_cp_size: int = 1,
    clock: Optional[Callable[[], float]] = None,
    device: Any = "cpu",
    device_group: Any = None,
) -> tuple[types.ModuleType, Any]:
    """``(module, PrefillDelayer)`` of SGLang ``version``, gathering over ``group``.

    ``group`` is a ``torch.distributed`` group or a ``gather(row) -> rows``
    callable. The layout and ``server_args`` reach the release the way it reads
    them: constructor arguments (only those its constructor takes, by name),
    ``server_args``, ``get_parallel()`` or ``get_schedule()``.
    """
    parallel = parallel_context(
        dp_size=dp_size, attn_tp_size=attn_tp_size, attn_cp_size=attn_cp_size,
        enable_dp_attention=bool(server_args.enable_dp_attention), cpu_group=group, device_group=device_group, device=device,
    )
    module = load_release(version, clock=clock, parallel=parallel, schedule=server_args)
    offered = dict(
        dp_size=dp_size, attn_tp_size=attn_tp_size, cpu_group=group, server_args=server_args,
        max_delay_passes=max_delay_passes, token_usage_low_watermark=token_usage_low_watermark,
        metrics_collector=metrics_collector, device=device, device_group=device_group,
    )
    takes = inspect.signature(module.PrefillDelayer).parameters
    return module, module.PrefillDelayer(**{k: v for k, v in offered.items() if k in takes})

