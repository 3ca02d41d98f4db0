"""A command whose extra is not installed says which package is missing and which extra brings it (exit 2),
not a ``ModuleNotFoundError`` traceback (exit 1, which ``prove`` documents as "a property does not hold").

The missing package is simulated in a fresh interpreter: ``sys.modules[name] = None`` makes its import fail
as it fails where it is not installed.
"""

from __future__ import annotations

import os
import subprocess
import sys

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
