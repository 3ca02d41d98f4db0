"""Every release 0.5.14-0.5.23, read from its wheel: the plugin framework, and the API ``install`` gives it.

For each release (``pip download sglang==X --no-deps``; its scheduler and
delayer files cached beside the release cache of ``runtime._upstream``):

* it has ``sglang.srt.plugins.load_plugins``, ``HookRegistry`` and
  ``HookType.REPLACE``, and ``run_scheduler_process`` calls ``load_plugins()``
  first, so the plugin reaches every scheduler process;
* the class ``install`` / the plugin bind for that release accepts exactly the
  call its scheduler makes, has the release's own constructor parameters in
  order, and its executor's ``finalize`` takes the keyword the scheduler passes.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from prefill_delayer.integrations.sglang.releases import API_OF_RELEASE, classes_for
from prefill_delayer.integrations.sglang.upstream import cache_dir
from delayer_spec import RELEASES

pytestmark = pytest.mark.registry

MEMBERS = {
    "scheduler.py": "sglang/srt/managers/scheduler.py",
    "prefill_delayer.py": "sglang/srt/managers/prefill_delayer.py",
    "plugins__init__.py": "sglang/srt/plugins/__init__.py",
    "hook_registry.py": "sglang/srt/plugins/hook_registry.py",
}
_failed: list[str] = []


def release_files(version: str) -> Path:
    """The folder with the four files of release ``version``, fetched on first use; skips when it cannot be."""
    folder = cache_dir() / f"sglang-{version}" / "api"
    if all((folder / name).is_file() for name in MEMBERS):
        return folder
    if _failed:
        pytest.skip(_failed[0])
    with tempfile.TemporaryDirectory(prefix="prefill-delayer-wheel-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", f"sglang=={version}", "--no-deps", "--dest", tmp, "--quiet",
               "--no-input", "--disable-pip-version-check", "--timeout", "30"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as err:
            done = None
            reason = f"pip download sglang=={version} failed: {err}"
        wheels = list(Path(tmp).glob("*.whl"))
        if done is None or done.returncode != 0 or len(wheels) != 1:
            reason = reason if done is None else f"pip download sglang=={version}: exit {done.returncode}, {len(wheels)} wheels"
            _failed.append(reason)
            pytest.skip(reason)
        folder.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as z:
            for name, member in MEMBERS.items():
                partial = folder / f".{name}.partial"
                partial.write_bytes(z.read(member))
                partial.replace(folder / name)
    return folder


def _tree(folder: Path, name: str) -> ast.Module:
    return ast.parse((folder / name).read_text())


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_release_has_the_plugin_framework_and_its_scheduler_loads_plugins(version: str) -> None:
    folder = release_files(version)
    plugins, hooks, scheduler = (_tree(folder, n) for n in ("plugins__init__.py", "hook_registry.py", "scheduler.py"))
    assert any(isinstance(n, ast.FunctionDef) and n.name == "load_plugins" for n in plugins.body)
    assert "HookRegistry.apply_hooks()" in ast.unparse(plugins)
    registry = _class(hooks, "HookRegistry")
    assert {"register", "apply_hooks"} <= {n.name for n in registry.body if isinstance(n, ast.FunctionDef)}
    assert "REPLACE" in {t.id for n in _class(hooks, "HookType").body if isinstance(n, ast.Assign) for t in n.targets
                         if isinstance(t, ast.Name)}
    entry = next(n for n in scheduler.body if isinstance(n, ast.FunctionDef) and n.name == "run_scheduler_process")
    assert ast.unparse(entry.body[0]) == "load_plugins()"
    imported = {a.name for n in scheduler.body if isinstance(n, ast.ImportFrom)
                and n.module == "sglang.srt.managers.prefill_delayer" for a in n.names}
    assert {"PrefillDelayer", "PrefillDelayerSinglePassExecutor"} <= imported


@pytest.mark.parametrize("version", list(RELEASES))
def test_install_gives_each_release_the_constructor_and_finalize_its_scheduler_calls(version: str) -> None:
    folder = release_files(version)
    scheduler, theirs = _tree(folder, "scheduler.py"), _tree(folder, "prefill_delayer.py")
    delayer, executor = classes_for(version, "hardened")
    assert API_OF_RELEASE[version] and delayer.profile == "hardened"

    # The scheduler's one construction binds to ours, keywords as it passes them.
    calls = [n for n in ast.walk(scheduler) if isinstance(n, ast.Call) and ast.unparse(n.func) == "PrefillDelayer"]
    assert len(calls) == 1 and not calls[0].args
    inspect.signature(delayer).bind(**{k.arg: None for k in calls[0].keywords})

    # The release's own parameters, in order and with their defaults; ours adds keyword-only extras only.
    own = _method(_class(theirs, "PrefillDelayer"), "__init__").args
    own_params = [(a.arg, None) for a in own.args[1:]]
    for i, d in enumerate(own.defaults, start=len(own_params) - len(own.defaults)):
        own_params[i] = (own_params[i][0], ast.literal_eval(d))
    ours = [(p.name, None if p.default is inspect.Parameter.empty else p.default)
            for p in inspect.signature(delayer).parameters.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert ours == own_params
    assert [p.name for p in inspect.signature(delayer).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY] == ["profile", "gather", "clock", "params"]

    # finalize: the keyword the scheduler passes, and a return value where the release has one.
    finalize_calls = [n for n in ast.walk(scheduler) if isinstance(n, ast.Call)
                      and ast.unparse(n.func) == "prefill_delayer_single_pass.finalize"]
    assert len(finalize_calls) == 1
    (keyword,) = [k.arg for k in finalize_calls[0].keywords]
    own_finalize = _method(_class(theirs, "PrefillDelayerSinglePassExecutor"), "finalize")
    assert [a.arg for a in own_finalize.args.kwonlyargs] == [keyword]
    params = inspect.signature(executor.finalize).parameters
    assert list(params) == ["self", keyword] and params[keyword].kind is inspect.Parameter.KEYWORD_ONLY
    returns = inspect.signature(executor.finalize).return_annotation
    assert (own_finalize.returns is not None) == (returns in (int, "int")), (version, returns)
