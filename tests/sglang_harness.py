"""Helpers for the tests against a real SGLang install: the skip, and SGLang's delayer module reading a rank's clock.

SGLang's runtime context on a gloo rank comes from ``integrations.sglang.cpu_context``
(SGLang's own objects, nothing stubbed; see there).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import types
from importlib import metadata
from pathlib import Path
from typing import Callable, Optional

from prefill_delayer.integrations.sglang.cpu_context import layout_widths, publish_context  # noqa: F401 - re-exported

SGLANG_RELEASE = "0.5.23"
THEIR_MODULE = "sglang.srt.managers.prefill_delayer"
# The two names the plugin replaces, as module.qualname: ours, and SGLang's own.
OURS = ["prefill_delayer.integrations.sglang.shell.PrefillDelayer",
        "prefill_delayer.integrations.sglang.shell.PrefillDelayerSinglePassExecutor"]
THEIRS = ["sglang.srt.managers.prefill_delayer.PrefillDelayer",
          "sglang.srt.managers.prefill_delayer.PrefillDelayerSinglePassExecutor"]


def sglang_skip_reason() -> Optional[str]:
    """Why the SGLang tests cannot run here, or ``None`` (without importing SGLang)."""
    if importlib.util.find_spec("sglang") is None:
        return (f"SGLang is not installed: pip install --no-deps sglang=={SGLANG_RELEASE} "
                "(and the extra sglang-test) to run the tests against it")
    try:
        version = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return "sglang is importable but has no distribution metadata"
    if version != SGLANG_RELEASE:
        return f"these tests are written against SGLang {SGLANG_RELEASE}; {version} is installed"
    return None


def run_python(script: str, env: dict[str, str], timeout_s: float = 120.0) -> subprocess.CompletedProcess:
    """``script`` in a fresh interpreter (a REPLACE must not leak into other tests), the tests on its path.

    The plugin's variables come only from ``env``: the caller's own settings never leak in.
    """
    full_env = {k: v for k, v in os.environ.items() if k not in ("PREFILL_DELAYER_PROFILE", "SGLANG_PLUGINS")}
    # The tests' own helpers first, then the caller's path (which may put a checkout's package before the install).
    path = os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")) if p)
    full_env.update(env, PYTHONWARNINGS="ignore", PYTHONPATH=path)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=timeout_s, env=full_env)


def their_module(clock: Callable[[], float]) -> types.ModuleType:
    """SGLang's ``prefill_delayer`` module reading ``clock`` where it reads ``time.perf_counter``.

    Its ``_State`` takes ``time.perf_counter`` as a dataclass default factory at
    import, so the module is imported (first, in this process) with the clock in
    place, and its module-level ``time`` is then bound to one that has the clock.
    """
    import time

    assert THEIR_MODULE not in sys.modules, "SGLang's prefill_delayer was imported before its clock was set"
    real = time.perf_counter
    time.perf_counter = clock
    try:
        module = importlib.import_module(THEIR_MODULE)
    finally:
        time.perf_counter = real
    module.time = types.SimpleNamespace(perf_counter=clock)  # type: ignore[attr-defined]
    return module
