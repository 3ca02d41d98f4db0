"""Ctrl-C in every subcommand: one line on stderr, exit 130, no worker left, no output written.

Each command runs as its own process, sent SIGINT the way a terminal sends it
(to its whole process group). To interrupt it at a known point, the command runs
through a launcher that stalls it right after it has staged its first output file
(``files._fill``, through which every output passes; ``replay``, which writes
nothing, stalls in its replay): the interrupt then lands where a half-written
output would show. ``prove`` is also interrupted unpatched, while its worker
processes prove; the command, while it loads its own modules; and the runtime
benchmark, while its gloo ranks run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from prefill_delayer.workers import cores


REPO = Path(__file__).resolve().parents[1]

LAUNCHER = r"""
import os, sys, time
ready = os.environ["STALL_READY"]

def stall():
    open(ready, "w").close()
    time.sleep(120)

if os.environ["STALL_AT"] == "fill":
    from prefill_delayer import files
    fill = files._fill

    def stalled(path, data):
        fill(path, data)
        stall()

    files._fill = stalled
else:
    from prefill_delayer.traces import replay as module
    real = module.replay

    def stalled(trace):
        real(trace)
        stall()

    module.replay = stalled
from prefill_delayer.cli import main
sys.exit(main(sys.argv[1:]))
"""


IMPORT_LAUNCHER = r"""
import runpy, signal, sys
target, entry, *argv = sys.argv[1:]
assert target not in sys.modules, f"{target} is loaded before the command starts"
fired = []


def interrupt_as_it_loads(event, args):
    # Ctrl-C at the moment the command starts importing `target`, as one that lands while it loads
    if event == "import" and args[0] == target and not fired:
        fired.append(target)
        signal.raise_signal(signal.SIGINT)


if entry == "console-script":  # what the installed script does: import its entry point's object, call it
    from importlib.metadata import entry_points
    (script,) = entry_points(group="console_scripts", name="prefill-delayer")
    sys.argv = [script.name, *argv]
    sys.addaudithook(interrupt_as_it_loads)
    sys.exit(script.load()())
sys.argv = ["prefill_delayer.cli", *argv]
sys.addaudithook(interrupt_as_it_loads)
runpy.run_module("prefill_delayer.cli", run_name="__main__", alter_sys=True)
"""


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def _spawn(argv: list[str], cwd: Path, env: Optional[dict[str, str]] = None) -> subprocess.Popen:
    """The command in a new session (its own process group), with SIGINT at its default whatever ours is."""
    return subprocess.Popen(argv, cwd=cwd, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(cond: Any, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if proc.poll() is not None:
            raise AssertionError(f"the command ended (exit {proc.returncode}) before it could be interrupted: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise AssertionError("the command never reached the point to interrupt")
        time.sleep(0.05)


def _interrupt(proc: subprocess.Popen, group: bool = True) -> tuple[int, str]:
    """SIGINT (to the process group, as a terminal does, or to the process alone); exit status and stderr."""
    try:
        if group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
        rc = proc.wait(timeout=30)
        return rc, proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def _one_line(err: str, command: str) -> None:
    # Graphviz (under docs) may print a Fontconfig warning of the system's own before; it is not ours.
    ours = [line for line in err.splitlines() if not line.startswith("Fontconfig ")]
    assert ours == [f"prefill-delayer {command}: interrupted"], err


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from test_cli_input import good_trace
    import json

    path = tmp_path_factory.mktemp("trace") / "seed-bounded-delay.json"
    path.write_text(json.dumps(good_trace("seed")))
    return path


SIM = ["simulate", "--dp-size", "2", "--passes", "60", "--max-running-requests", "8", "--workload", "poisson", "--rate", "3",
       "--prompt-tokens", "200:2000", "--output-tokens", "5:40", "--profile", "hardened"]

CASES = [
    pytest.param("prove", ["--profile", "seed", "--traces", "out/t", "--json", "out/r.json"], "fill",
                 marks=pytest.mark.skipif(not _has("z3"), reason="prove needs z3"), id="prove"),
    pytest.param("docs", ["--out", "out/docs"], "fill",
                 marks=pytest.mark.skipif(not _has("pygraphviz"), reason="docs needs pygraphviz"), id="docs"),
    pytest.param("check-log", ["{logs}", "--traces", "out/t", "--json", "out/r.json", "--plot", "out/p.png"], "fill",
                 marks=pytest.mark.skipif(not _has("matplotlib"), reason="--plot needs matplotlib"), id="check-log"),
    pytest.param("simulate", [*SIM[1:], "--plot", "out/s.png", "--json", "out/s.json"], "fill",
                 marks=pytest.mark.skipif(not _has("matplotlib"), reason="--plot needs matplotlib"), id="simulate"),
    pytest.param("replay", ["{trace}"], "replay", id="replay"),
]


@pytest.mark.parametrize(("command", "args", "stall_at"), CASES)
def test_ctrl_c_is_one_line_exit_130_and_no_output(tmp_path: Path, seed_logs: Path, trace_file: Path, command: str,
                                                   args: list[str], stall_at: str) -> None:
    ready = tmp_path / "ready"
    argv = [sys.executable, "-c", LAUNCHER, command, *(a.format(logs=seed_logs, trace=trace_file) for a in args)]
    proc = _spawn(argv, tmp_path, {"STALL_AT": stall_at, "STALL_READY": str(ready)})
    _wait_for(ready.exists, proc)
    if stall_at == "fill":
        assert [p for p in _tree(tmp_path / "out") if ".part" in p]  # an output was half-way: staged, not yet in place
    rc, err = _interrupt(proc)
    assert rc == 130, err
    _one_line(err, command)
    assert _tree(tmp_path / "out") == []  # no output, no temporary file, no folder made for them


TWO_CORES = pytest.mark.skipif(cores() < 2, reason="two workers take two cores (--jobs is at most the cores)")
WORKERS = [
    pytest.param(["prove", "--jobs", "2", "--traces", "out/t", "--json", "out/r.json"],
                 marks=[pytest.mark.skipif(not _has("z3"), reason="prove needs z3"), TWO_CORES], id="prove"),
    pytest.param(["simulate", "--suite", "default", "--jobs", "2", "--no-progress", "--json", "out/s.json"],
                 marks=TWO_CORES, id="simulate-suite"),
]


@pytest.mark.parametrize("argv", WORKERS)
@pytest.mark.parametrize("group", [True, False], ids=["to-the-group", "to-the-parent-alone"])
def test_interrupted_while_its_workers_run_ends_them(tmp_path: Path, argv: list[str], group: bool) -> None:
    proc = _spawn([sys.executable, "-m", "prefill_delayer.cli", *argv], tmp_path)
    _wait_for(lambda: len(_children(proc.pid)) >= 2, proc)
    workers = _children(proc.pid)
    time.sleep(0.3)  # into the work
    rc, err = _interrupt(proc, group)
    assert rc == 130, err
    _one_line(err, argv[0])
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [w for w in workers if _alive(w)], "a worker outlived the command"
    assert _tree(tmp_path / "out") == []


@pytest.mark.parametrize("entry", ["console-script", "python-m"])
def test_ctrl_c_while_the_command_loads_is_one_line_exit_130(tmp_path: Path, entry: str) -> None:
    """An interrupt that lands while the command imports its own modules (here: argparse, for its parser), before
    any subcommand runs: one line and 130, not a traceback of the import."""
    done = subprocess.run([sys.executable, "-c", IMPORT_LAUNCHER, "argparse", entry, "prove", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (done.returncode, done.stderr, done.stdout) == (130, "prefill-delayer: interrupted\n", "")


def _in_group(pgid: int) -> list[int]:
    """The live (not yet reaped is not live) processes of process group ``pgid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().split(")")[-1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state != "Z":
            found.append(int(stat.parent.name))
    return found


def _holds_a_socket(pid: int) -> bool:
    try:
        return any(os.readlink(fd).startswith("socket:") for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False


def _spawned_children(pid: int) -> list[int]:
    """The children of ``pid`` that multiprocessing spawned to run a target (not its resource tracker)."""
    found = []
    for child in _children(pid):
        try:
            if b"--multiprocessing-fork" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            pass
    return found


@pytest.mark.skipif(not _has("torch"), reason="the runtime benchmark's ranks need torch")
def test_ctrl_c_while_the_runtime_benchmarks_ranks_run_is_one_line_exit_130_and_ends_them(tmp_path: Path) -> None:
    """SIGINT to the benchmark's process group, as a terminal sends it, once its two gloo ranks are in
    torch.distributed (each holds a socket of its group): one line from the benchmark and 130, no rank's traceback,
    no process of the group left."""
    from prefill_delayer.benchmarks import parser

    module = "prefill_delayer.benchmarks.runtime"
    proc = _spawn([sys.executable, "-m", module, "--worlds", "2", "--rounds", "1000000", "--no-seed"], tmp_path)

    def joined() -> list[int]:
        return [r for r in _spawned_children(proc.pid) if _holds_a_socket(r)]

    _wait_for(lambda: len(joined()) == 2, proc, timeout=60)
    rc, err = _interrupt(proc)
    assert (rc, err) == (130, f"{parser(module.rsplit('.', 1)[1], '').prog}: interrupted\n")
    deadline = time.monotonic() + 10
    while _in_group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_group(proc.pid) == [], "a process of the benchmark outlived it"


# Run as a sitecustomize, before ``python -m`` looks for its module: Ctrl-C at the moment ``target`` starts to load.
INTERRUPT_AT_IMPORT = r"""
import os, signal, sys
target = os.environ["INTERRUPT_AT"]
assert target not in sys.modules, f"{target} is loaded before the benchmark starts"


def interrupt_as_it_loads(event, args):
    if event == "import" and args[0] == target and not getattr(interrupt_as_it_loads, "fired", False):
        interrupt_as_it_loads.fired = True
        signal.raise_signal(signal.SIGINT)


sys.addaudithook(interrupt_as_it_loads)
"""


@pytest.mark.parametrize("target", ["argparse", "prefill_delayer.runtime.server_args"],
                         ids=["the-package-s-imports", "the-module-s-imports"])
def test_ctrl_c_while_a_benchmark_loads_is_one_line_exit_130(tmp_path: Path, target: str) -> None:
    """``python -m prefill_delayer.benchmarks.runtime``, interrupted as the benchmarks' package imports argparse or
    as the benchmark imports the runtime: one line and 130, not a traceback of the import."""
    (tmp_path / "sitecustomize.py").write_text(INTERRUPT_AT_IMPORT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
           "INTERRUPT_AT": target}
    module = "prefill_delayer.benchmarks.runtime"
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (done.returncode, done.stderr, done.stdout) == (130, f"python -m {module}: interrupted\n", "")
