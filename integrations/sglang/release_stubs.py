"""What a released ``prefill_delayer.py`` imports, for running it without SGLang.

Each SGLang release imports a few names from ``sglang.*``; ``release_imports``
says which, by release. The loader (``integrations.sglang.upstream``) serves those stub
modules, a ``time`` whose ``perf_counter`` is the caller's clock, and a
per-module ``torch`` proxy through an ``__import__`` hook in the module's own
builtins: nothing is put into ``sys.modules`` and the real ``torch`` is never
patched, so a real SGLang (or another load running in another thread) is never
shadowed.

The collectives: when the ``group`` a release passes is a plain callable
``gather(row) -> rows`` (``runtime.inprocess`` hands one to each rank), the
stub calls it with this rank's row and copies the rows, flattened, into the
output tensor; any other group (a ``torch.distributed`` process group, or
``None``) goes to the real collective.
"""

from __future__ import annotations

import builtins
import time
import types
from typing import Any, Callable, Mapping, Optional

from ...runtime.server_args import NCCL_ENV, get_bool_env_var

Version = tuple[int, ...]


def version_key(version: str) -> Version:
    return tuple(int(x) for x in version.split("."))


def release_imports(version: str) -> dict[str, tuple[str, ...]]:
    """``{sglang module: names}`` that release ``version`` imports (the import lines of its file)."""
    v = version_key(version)
    imports: dict[str, tuple[str, ...]] = {
        "sglang.srt.environ": ("envs",),
        "sglang.srt.utils": ("get_bool_env_var",),
    }
    if v >= (0, 5, 18):
        imports["sglang.srt.runtime_context"] = ("get_parallel", "get_schedule") if v >= (0, 5, 19) else ("get_parallel",)
    if v >= (0, 5, 21):
        imports["sglang.srt.distributed.utils"] = ("all_gather_single",)
    return imports


class _EnvFlag:
    """SGLang's ``envs.X``: ``.get()`` reads the environment variable at call time."""

    def __init__(self, name: str) -> None:
        self.name = name

    def get(self) -> bool:
        return get_bool_env_var(self.name)


class _Proxy(types.ModuleType):
    """A module that is ``real`` except for the attributes given: patched per loaded release, never globally."""

    def __init__(self, real: types.ModuleType, **overrides: Any) -> None:
        super().__init__(real.__name__)
        self.__dict__.update(overrides)
        self._real = real

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        self.__dict__[name] = value  # later reads are plain lookups: a timed release pays nothing per pass
        return value


def is_gather_fn(group: Any, dist: Any) -> bool:
    """Whether ``group`` is a test's ``gather(row) -> rows`` rather than a ``torch.distributed`` group."""
    process_group = getattr(dist, "ProcessGroup", ())
    return group is not None and callable(group) and not isinstance(group, process_group)


def routed(real: Callable[..., Any], torch: Any, dist: Any) -> Callable[..., Any]:
    """A collective ``(output, input, group=...)``: a gather callable is called, a real group gets ``real``."""

    def collective(output: Any, input_: Any, group: Any = None, **kwargs: Any) -> Any:
        if not is_gather_fn(group, dist):
            return real(output, input_, group=group, **kwargs)
        rows = group([int(x) for x in input_.tolist()])
        flat = [int(x) for row in rows for x in row]
        if len(flat) != output.numel():
            raise RuntimeError(f"gather returned {len(flat)} values, the release's buffer holds {output.numel()}")
        output.copy_(torch.tensor(flat, dtype=output.dtype, device=output.device))
        return None

    return collective


def _context_getter(name: str, value: Optional[Any]) -> Callable[[], Any]:
    def getter() -> Any:
        if value is None:
            raise RuntimeError(f"this release calls {name}(): pass {name[4:]}= to load_release")
        return value

    getter.__name__ = name
    return getter


def stub_modules(version: str, torch: Any, dist: Any, parallel: Optional[Any], schedule: Optional[Any]) -> dict[str, types.ModuleType]:
    """The sglang modules release ``version`` imports, each holding exactly the names it takes."""
    real_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # as SGLang chooses
    names: dict[str, Any] = {
        "envs": types.SimpleNamespace(**{NCCL_ENV: _EnvFlag(NCCL_ENV)}),
        "get_bool_env_var": get_bool_env_var,
        "get_parallel": _context_getter("get_parallel", parallel),
        "get_schedule": _context_getter("get_schedule", schedule),
        "all_gather_single": routed(real_single, torch, dist),
    }
    out = {}
    for module_name, wanted in release_imports(version).items():
        module = types.ModuleType(module_name)
        for name in wanted:
            setattr(module, name, names[name])
        out[module_name] = module
    return out


def fake_imports(torch: Any, dist: Any, clock: Optional[Callable[[], float]]) -> dict[str, types.ModuleType]:
    """``torch`` with its ``distributed.all_gather_into_tensor`` routed, and ``time`` on ``clock`` if given."""
    fake_dist = _Proxy(dist, all_gather_into_tensor=routed(dist.all_gather_into_tensor, torch, dist))
    fakes: dict[str, types.ModuleType] = {"torch": _Proxy(torch, distributed=fake_dist)}
    if clock is not None:
        fakes["time"] = _Proxy(time, perf_counter=clock)
    return fakes


def builtins_with_imports(served: Mapping[str, types.ModuleType], requested: set[str]) -> dict[str, Any]:
    """A copy of the builtins whose ``__import__`` serves ``served`` (recording each name in ``requested``).

    Any other ``sglang`` import is an ``ImportError``: a release whose imports
    differ from ``release_imports`` fails at load, not later. Every other name
    goes to the real import, including those torch's C code imports while a
    release's frame is current (it calls this module's ``__import__`` too).
    """
    real_import = builtins.__import__

    def hooked(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name in served:
            requested.add(name)
            module = served[name]
            if fromlist or "." not in name:
                return module
            raise ImportError(f"a release's 'import {name}' is not served: only 'from {name} import ...'")
        if level == 0 and (name == "sglang" or name.startswith("sglang.")):
            raise ImportError(f"this release imports {name}, which the loader does not stub (see release_imports)")
        return real_import(name, globals, locals, fromlist, level)

    table = dict(vars(builtins))
    table["__import__"] = hooked
    return table
