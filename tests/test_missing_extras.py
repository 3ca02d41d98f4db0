"""A command whose extra is not installed says which package is missing and which extra brings it (exit 2),
not a ``ModuleNotFoundError`` traceback (exit 1, which ``prove`` documents as "a property does not hold").

The missing package is simulated in a fresh interpreter: ``sys.modules[name] = None`` makes its import fail
as it fails where it is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SHIM = "import sys; sys.modules[{name!r}] = None; {then}"


def _without(name: str, then: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", SHIM.format(name=name, then=then)], capture_output=True, text=True,
                          timeout=120, env=full)


def _one_line(done: subprocess.CompletedProcess, *fragments: str) -> None:
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    for fragment in fragments:
        assert fragment in done.stderr, done.stderr


def test_prove_without_z3_names_it_and_the_proofs_extra() -> None:
    done = _without("z3", "from prefill_delayer.cli import main; sys.exit(main(['prove', '--profile', 'hardened']))")
    _one_line(done, "prefill-delayer prove: ", "z3-solver", "pip install 'prefill-delayer[proofs]'")


def test_the_example_without_torch_names_it_and_the_runtime_extra() -> None:
    launcher = dict(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    done = _without("torch", "from prefill_delayer.runtime.example import main; sys.exit(main([]))", launcher)
    _one_line(done, "prefill-delayer example: ", "torch", "pip install 'prefill-delayer[runtime]'")


def _fake_sglang(root: Path) -> dict[str, str]:
    """SGLang 0.5.23 whose scheduler imports huggingface_hub, first on the path (the real one may be installed)."""
    managers = root / "sglang" / "srt" / "managers"
    managers.mkdir(parents=True)
    (root / "sglang" / "__init__.py").write_text('__version__ = "0.5.23"\n')
    (root / "sglang" / "srt" / "__init__.py").write_text("")
    (managers / "__init__.py").write_text("")
    (managers / "scheduler.py").write_text("import huggingface_hub\n")
    return {"PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_sglang_s_scheduler_without_a_module_it_imports_names_it_and_the_environment(tmp_path: Path) -> None:
    """Before: 'sglang.srt.managers.scheduler does not import (ModuleNotFoundError: No module named ...)', and the
    comparison, which has no such option, said '--scheduler sglang needs'."""
    from prefill_delayer.sim.sglang_backend import SCHEDULER_ENV

    env = _fake_sglang(tmp_path)
    missing = "the Python module huggingface_hub, which sglang.srt.managers.scheduler imports, is not installed; "
    builds = f"`bash .ci/sglang-scheduler` (in the repository) builds {SCHEDULER_ENV}, an environment where it imports: run "
    done = _without("huggingface_hub", "from prefill_delayer.sim.differential import main; sys.exit(main(['off']))", env)
    _one_line(done, "python -m prefill_delayer.sim.differential: the comparison needs SGLang 0.5.23's scheduler, which "
              "does not import here: " + missing + builds + f"{SCHEDULER_ENV}/bin/python -m prefill_delayer.sim.differential\n")
    simulate = ["simulate", "--scheduler", "sglang", "--workload", "poisson", "--rate", "1", "--prompt-tokens", "100",
                "--output-tokens", "5", "--passes", "10", "--profile", "off"]
    done = _without("huggingface_hub", f"from prefill_delayer.cli import main; sys.exit(main({simulate!r}))", env)
    _one_line(done, "prefill-delayer simulate: --scheduler sglang needs SGLang 0.5.23's scheduler, which does not import "
              "here: " + missing + builds + f"{SCHEDULER_ENV}/bin/prefill-delayer\n")
    assert "ModuleNotFoundError" not in done.stderr
    ci = (Path(__file__).resolve().parents[1] / ".ci" / "sglang-scheduler").read_text()
    assert f"venv={SCHEDULER_ENV}\n" in ci  # the environment the message names is the one the script builds
