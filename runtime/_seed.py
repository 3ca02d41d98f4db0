"""Load SGLang's original ``prefill_delayer.py`` (the seed) without SGLang, for the benchmark and parity tests.

The seed imports two things from SGLang: ``sglang.srt.environ.envs`` (for the
NCCL switch) and ``sglang.srt.utils.get_bool_env_var``. They are provided by
stub modules for the duration of the load only (the previous ``sys.modules``
entries are put back), so a real SGLang elsewhere is never shadowed.
"""

from __future__ import annotations

import os
import sys
import threading
import types
from pathlib import Path
from typing import Callable, Iterator, Optional

from .server_args import NCCL_ENV, get_bool_env_var

SEED_FILE = "prefill_delayer.py"
SEED_ENV = "PREFILL_DELAYER_SEED"
_STUBBED = ("sglang", "sglang.srt", "sglang.srt.environ", "sglang.srt.utils")


def _candidates() -> Iterator[Path]:
    if os.environ.get(SEED_ENV):
        yield Path(os.environ[SEED_ENV])
    repo = Path(__file__).resolve().parent.parent
    yield repo.parent / "shared" / "seed" / SEED_FILE
    yield Path("/work/shared/seed") / SEED_FILE


def find_seed() -> Optional[Path]:
    """The seed's path: ``$PREFILL_DELAYER_SEED``, ``../shared/seed`` next to the repository, or /work/shared/seed."""
    for path in _candidates():
        if path.is_file():
            return path
    return None


class _EnvFlag:
    def __init__(self, name: str) -> None:
        self.name = name

    def get(self) -> bool:
        return get_bool_env_var(self.name)


def _stub_modules() -> dict[str, types.ModuleType]:
    sglang, srt = types.ModuleType("sglang"), types.ModuleType("sglang.srt")
    environ, utils = types.ModuleType("sglang.srt.environ"), types.ModuleType("sglang.srt.utils")
    environ.envs = types.SimpleNamespace(**{NCCL_ENV: _EnvFlag(NCCL_ENV)})  # type: ignore[attr-defined]
    utils.get_bool_env_var = get_bool_env_var  # type: ignore[attr-defined]
    sglang.srt, srt.environ, srt.utils = srt, environ, utils  # type: ignore[attr-defined]
    return {"sglang": sglang, "sglang.srt": srt, "sglang.srt.environ": environ, "sglang.srt.utils": utils}


_loads = 0
_lock = threading.Lock()  # the stubs live in sys.modules during a load: one load at a time


def load_seed(path: Optional[Path] = None, *, clock: Optional[Callable[[], float]] = None) -> types.ModuleType:
    """A fresh module object of the seed.

    ``clock`` replaces ``time.perf_counter`` inside that module only (its calls
    and its ``_State`` default factory), which is how a test gives each seeded
    rank its own clock; the seed's ``import time`` line is swapped for a
    namespace holding ``clock``.
    """
    path = path or find_seed()
    if path is None:
        raise FileNotFoundError("the seed prefill_delayer.py was not found (set $PREFILL_DELAYER_SEED)")
    source = Path(path).read_text()
    with _lock:
        return _load(path, source, clock)


def _load(path: Path, source: str, clock: Optional[Callable[[], float]]) -> types.ModuleType:
    global _loads
    _loads += 1
    module = types.ModuleType(f"_prefill_delayer_seed_{_loads}")
    module.__file__ = str(path)
    if clock is not None:
        if "\nimport time\n" not in source:
            raise RuntimeError(f"{path}: no 'import time' line to replace with the injected clock")
        source = source.replace("\nimport time\n", "\n", 1)
        module.time = types.SimpleNamespace(perf_counter=clock)  # type: ignore[attr-defined]
    from .gather import import_torch

    import_torch()  # the seed imports torch; import it here with the numpy warning silenced
    saved = {name: sys.modules.get(name) for name in _STUBBED}
    sys.modules.update(_stub_modules())
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
        sys.modules.pop(module.__name__, None)
    return module
