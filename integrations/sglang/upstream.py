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
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import types
import zipfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional

from ...spec.policies.sglang_delayer.profiles import RELEASES, SEED_RELEASE
from . import release_stubs as stubs

__all__ = [
    "CACHE_ENV", "RELEASES", "ReleaseUnavailable", "SEED_RELEASE", "cache_dir", "load_release",
    "parallel_context", "release_delayer", "release_source",
]

CACHE_ENV = "PREFILL_DELAYER_CACHE"
MEMBER = "sglang/srt/managers/prefill_delayer.py"  # the file's path inside a wheel; an sdist nests it deeper
PIP_SOCKET_TIMEOUT_S = 30
PIP_TIMEOUT_S = 600.0  # the whole download; wheels are tens of MB


class ReleaseUnavailable(RuntimeError):
    """A release's ``prefill_delayer.py`` is neither cached nor obtainable from the package registry."""

    def __init__(self, version: str, target: Path, detail: str) -> None:
        super().__init__(
            f"SGLang {version}: the package registry could not be reached or did not provide the release "
            f"({detail}). To work offline, pre-fill the cache: on a connected machine run "
            f"'python -m pip download sglang=={version} --no-deps', take {MEMBER} out of the wheel (a zip) "
            f"and put it at {target} (the cache is ${CACHE_ENV}, else $XDG_CACHE_HOME/prefill-delayer, "
            "else ~/.cache/prefill-delayer)."
        )
        self.version = version
        self.target = target


def cache_dir() -> Path:
    """Where fetched releases live: ``$PREFILL_DELAYER_CACHE``, else the XDG cache, else ``~/.cache``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "prefill-delayer"


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
    with tempfile.TemporaryDirectory(prefix="prefill-delayer-pip-") as tmp:
        archive = _download(version, Path(tmp), target)
        data = _member(archive, version, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=".prefill_delayer.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(partial, 0o644)  # mkstemp's 0600 would hide the cache from other users of a shared one
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def _pip_command(version: str, dest: Path) -> list[str]:
    return [
        sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps", "--dest", str(dest),
        "--quiet", "--no-input", "--disable-pip-version-check", "--timeout", str(PIP_SOCKET_TIMEOUT_S),
    ]


def _download(version: str, dest: Path, target: Path) -> Path:
    """Run pip; return the one archive it left in ``dest``."""
    try:
        done = subprocess.run(_pip_command(version, dest), capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ReleaseUnavailable(version, target, f"pip download did not finish within {PIP_TIMEOUT_S:g} s") from None
    except OSError as err:
        raise ReleaseUnavailable(version, target, f"pip could not be run: {err}") from err
    archives = sorted(p for p in dest.iterdir() if p.is_file())
    if done.returncode != 0 or len(archives) != 1:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:]) or f"{len(archives)} files downloaded"
        raise ReleaseUnavailable(version, target, f"pip download exited with {done.returncode}: {tail}")
    return archives[0]


def _member(archive: Path, version: str, target: Path) -> bytes:
    """The bytes of ``MEMBER`` in a wheel (zip) or an sdist (tar), without extracting anything else."""
    suffix = "/" + MEMBER
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            names = [n for n in z.namelist() if n == MEMBER or n.endswith(suffix)]
            if names:
                return z.read(min(names, key=len))
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as t:
            members = [m for m in t.getmembers() if m.isfile() and (m.name == MEMBER or m.name.endswith(suffix))]
            if members:
                f = t.extractfile(min(members, key=lambda m: len(m.name)))
                assert f is not None
                return f.read()
    raise ReleaseUnavailable(version, target, f"{archive.name} has no {MEMBER}")


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

