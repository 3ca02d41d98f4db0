"""Every output option of every subcommand, held to the same rules (``files.Outputs``).

``prove --json/--traces``, ``docs --out``, ``check-log --json/--traces/--plot`` and
``simulate --json/--plot``: each refuses a path that is one of the command's inputs,
writes through symlinks, refuses a file that is not a regular one (exit 2, before
any work), respects the umask, checks the place by trying (not ``os.access``, which
says yes to root), checks plot formats up front, and writes all of the command's
outputs or none of them.

The commands run in this process. ``prove`` runs on results computed once here by
the real catalogue (its output handling is what is tested, not Z3 again); the other
commands run for real on small inputs.
"""

from __future__ import annotations

import builtins
import contextlib
import copy
import errno
import io
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest


from prefill_delayer import files
from prefill_delayer.cli import main as cli
from prefill_delayer.cli.check_log import PLOT_SUFFIXES as CHECK_LOG_PLOT_SUFFIXES

try:
    import pygraphviz  # noqa: F401

    HAVE_PYGRAPHVIZ = True
except ImportError:
    HAVE_PYGRAPHVIZ = False
try:
    import matplotlib  # noqa: F401

    HAVE_MATPLOTLIB = True
except ImportError:
    HAVE_MATPLOTLIB = False
try:
    import z3  # noqa: F401

    HAVE_Z3 = True
except ImportError:
    HAVE_Z3 = False

SIM = ["simulate", "--dp-size", "2", "--passes", "60", "--max-running-requests", "8", "--chunked-prefill-size", "1024",
       "--workload", "poisson", "--rate", "3", "--prompt-tokens", "200:2000", "--output-tokens", "5:40", "--profile", "hardened"]

# What each command needs beyond its outputs; the function that does its work (made to fail in the
# tests that must stop before any work).
WORK = {
    "prove": ("prefill_delayer.proofs.prove", "run_parallel"),
    "docs": ("prefill_delayer.docgen", "rendered"),
    "check-log": ("prefill_delayer.conformance", "check_logs"),
    "simulate": ("prefill_delayer.sim.cli", "simulate"),
}
# (command, option, a file name it takes); folder options have no suffix.
FILE_OPTIONS = [("prove", "--json", "r.json"), ("check-log", "--json", "r.json"), ("check-log", "--plot", "t.png"),
                ("check-log", "--digest", "n.digest"), ("simulate", "--json", "s.json"), ("simulate", "--plot", "s.png")]
FOLDER_OPTIONS = [("prove", "--traces"), ("docs", "--out"), ("check-log", "--traces")]


def _needs(command: str, option: str) -> list[Any]:
    marks = []
    if command == "prove":
        marks.append(pytest.mark.skipif(not HAVE_Z3, reason="prove needs z3 ([proofs] extra)"))
    if command == "docs":
        marks.append(pytest.mark.skipif(not HAVE_PYGRAPHVIZ, reason="docs needs pygraphviz ([docs] extra)"))
    if option == "--plot":
        marks.append(pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="--plot needs matplotlib ([plot] extra)"))
    return marks


def _file_cases() -> list[Any]:
    return [pytest.param(c, o, n, marks=_needs(c, o), id=f"{c}{o}") for c, o, n in FILE_OPTIONS]


def _folder_cases() -> list[Any]:
    return [pytest.param(c, o, marks=_needs(c, o), id=f"{c}{o}") for c, o in FOLDER_OPTIONS]


@pytest.fixture(scope="module")
def seed_results() -> list[Any]:
    if not HAVE_Z3:
        return []
    from prefill_delayer.proofs.prove import run_catalogue

    return run_catalogue(("seed",))


@pytest.fixture
def command(seed_logs: Path, seed_results: list[Any], monkeypatch: pytest.MonkeyPatch) -> Callable[..., list[str]]:
    """``command(name, *outputs)``: the argv of a small run of subcommand ``name`` with those output options."""
    if HAVE_Z3:
        from prefill_delayer.proofs import prove

        monkeypatch.setattr(prove, "run_parallel", lambda *a, **k: copy.deepcopy(seed_results))

    def argv(name: str, *outputs: str) -> list[str]:
        base = {"prove": ["prove", "--profile", "seed"], "docs": ["docs"], "check-log": ["check-log", str(seed_logs)],
                "simulate": SIM}[name]
        return [*base, *outputs]

    return argv


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any command that starts its work fails the test: its outputs must be refused first."""
    import importlib

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the work started before the outputs were checked")

    for module, name in WORK.values():
        try:
            monkeypatch.setattr(importlib.import_module(module), name, refuse, raising=False)
        except ImportError:
            pass


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli(argv)
    return rc, out.getvalue(), err.getvalue()


def refused(argv: list[str], *fragments: str) -> str:
    """The command exits 2 with one line on stderr holding every fragment."""
    rc, out, err = run(argv)
    assert rc == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"prefill-delayer {argv[0]}: "), err
    for f in fragments:
        assert f in err, err
    return err


def tree(root: Path) -> list[str]:
    """Everything under ``root``, hidden files included, as relative paths."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def looks_written(path: Path) -> None:
    """The file holds what its option writes: a JSON document, a picture in its suffix's format, or a digest (a zip)."""
    data = path.read_bytes()
    magic = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF", ".digest": b"PK\x03\x04"}
    if path.suffix in magic:
        assert data.startswith(magic[path.suffix]), data[:16]
    elif path.suffix == ".svg":
        assert b"<svg" in data[:2000], data[:200]
    else:
        json.loads(data)


# ----- through symlinks ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "option", "file"), _file_cases())
def test_a_file_option_writes_through_a_symlink(command: Any, tmp_path: Path, name: str, option: str, file: str) -> None:
    real = tmp_path / "real" / file
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / f"link-{file}"
    link.symlink_to(real)
    dangling = tmp_path / f"dangling-{file}"
    dangling.symlink_to(tmp_path / "real" / f"new-{file}")
    for given, target in ((link, real), (dangling, tmp_path / "real" / f"new-{file}")):
        rc, out, err = run(command(name, option, str(given)))
        assert rc in (0, 1) and err == "", err
        assert given.is_symlink() and os.readlink(given) == str(target)  # the link stays a link
        looks_written(target)
    assert tree(tmp_path / "real") == sorted([file, f"new-{file}"])  # no temporary file left beside them


@pytest.mark.parametrize(("name", "option"), _folder_cases())
def test_a_folder_option_writes_through_a_symlink(command: Any, tmp_path: Path, name: str, option: str) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    rc, out, err = run(command(name, option, str(link)))
    assert rc in (0, 1) and err == "", err
    assert link.is_symlink() and os.readlink(link) == str(real)
    written = tree(real)
    assert written and not [w for w in written if w.startswith(".")], written
    for w in written:
        looks_written(real / w) if w.endswith(".json") else None


# ----- regular files only -------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "option", "file"), _file_cases())
def test_a_file_option_refuses_a_device_or_a_fifo(command: Any, no_work: None, tmp_path: Path, name: str, option: str,
                                                  file: str) -> None:
    fifo = tmp_path / f"fifo{Path(file).suffix}"
    os.mkfifo(fifo)
    refused(command(name, option, str(fifo)), f"{option} {fifo} is a FIFO, not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    if option == "--json":  # /dev/null has no plot suffix: the suffix would be refused instead
        refused(command(name, option, "/dev/null"), "--json /dev/null is a character device, not a regular file")
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    link = tmp_path / f"link{Path(file).suffix}"
    link.symlink_to(fifo)
    refused(command(name, option, str(link)), f"is a FIFO (through the link, {fifo}), not a regular file")


@pytest.mark.parametrize(("name", "option"), _folder_cases())
def test_a_folder_option_refuses_a_fifo_or_a_file(command: Any, no_work: None, tmp_path: Path, name: str, option: str) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused(command(name, option, str(fifo)), f"{option} {fifo} is a FIFO; expected a folder")
    plain = tmp_path / "plain"
    plain.write_text("x\n")
    refused(command(name, option, str(plain)), f"{option} {plain} is a file; expected a folder")
    assert plain.read_text() == "x\n"


@pytest.mark.parametrize(("name", "option"), [c for c in _folder_cases() if c.values[1] == "--traces"])
def test_a_traces_folder_must_be_new_or_empty(command: Any, no_work: None, tmp_path: Path, name: str, option: str) -> None:
    """An earlier run's traces stayed beside this run's, and nothing told them apart: refused before the work."""
    old = tmp_path / "t"
    old.mkdir()
    for n in ("seed-agreement.json", "b.json", "c.json", "d.json"):
        (old / n).write_text("{}\n")
    refused(command(name, option, str(old)),
            f"{option} {old} is not empty (b.json, c.json, d.json and 1 more): name a new or empty folder")
    assert tree(old) == ["b.json", "c.json", "d.json", "seed-agreement.json"]  # an empty one: the symlink test's


@pytest.mark.parametrize(("name", "option", "file"), _file_cases())
def test_a_file_option_refuses_a_dash(command: Any, no_work: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      name: str, option: str, file: str) -> None:
    """``-`` reads as standard output, where each command writes its report: every command wrote a file called ``-``
    instead; now one line before the work, and ``./-`` names that file."""
    monkeypatch.chdir(tmp_path)
    refused(command(name, option, "-"), f"{option} -: {option} writes a file, not standard output, which has the "
            "command's own report; name the file (./- for one called -)")
    assert tree(tmp_path) == []


# ----- the umask ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "option", "file"), _file_cases())
def test_a_new_file_gets_the_umask_and_a_replaced_one_keeps_its_mode(command: Any, tmp_path: Path, name: str, option: str,
                                                                     file: str) -> None:
    new = tmp_path / "a" / "b" / file
    with umask(0o027):
        rc, _, err = run(command(name, option, str(new)))
    assert rc in (0, 1), err
    assert stat.S_IMODE(new.stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o750
    with umask(0o002):
        rc, _, err = run(command(name, option, str(new)))
    assert rc in (0, 1), err
    assert stat.S_IMODE(new.stat().st_mode) == 0o640  # an existing file keeps its mode when it is replaced
    other = tmp_path / f"other-{file}"
    with umask(0o002):
        rc, _, err = run(command(name, option, str(other)))
    assert stat.S_IMODE(other.stat().st_mode) == 0o664


@pytest.mark.parametrize(("name", "option"), _folder_cases())
def test_a_folder_option_gets_the_umask(command: Any, tmp_path: Path, name: str, option: str) -> None:
    folder = tmp_path / "x" / "out"
    with umask(0o077):
        rc, _, err = run(command(name, option, str(folder)))
    assert rc in (0, 1), err
    assert stat.S_IMODE(folder.stat().st_mode) == stat.S_IMODE((tmp_path / "x").stat().st_mode) == 0o700
    written = list(folder.iterdir())
    assert written and {stat.S_IMODE(p.stat().st_mode) for p in written} == {0o600}


# ----- never an input, never twice ----------------------------------------------------------------------


def test_check_log_refuses_to_write_over_its_logs(seed_logs: Path, no_work: None, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    for p in seed_logs.iterdir():
        (logs / p.name).write_bytes(p.read_bytes())
    a, b = logs / "rank0.jsonl", logs / "rank1.jsonl"
    before = {p.name: p.read_bytes() for p in logs.iterdir()}
    refused(["check-log", str(a), str(b), "--json", str(a)], f"--json {a} is an input file of this command ({a})")
    refused(["check-log", str(logs), "--json", str(b)], f"--json {b} is an input file of this command ({b})")
    hard = tmp_path / "hard.jsonl"
    os.link(a, hard)
    refused(["check-log", str(a), "--json", str(hard)], f"--json {hard} is an input file")
    link = tmp_path / "link.jsonl"
    link.symlink_to(a)
    refused(["check-log", str(link), "--json", str(a)], f"--json {a} is an input file of this command ({link})")
    refused(["check-log", str(logs), "--traces", str(logs)], f"--traces {logs} is an input folder of this command")
    png = tmp_path / "log.png"
    png.write_bytes(a.read_bytes())
    refused(["check-log", str(png), "--plot", str(png)], f"--plot {png} is an input file")
    refused(["check-log", str(a), "--json", str(tmp_path / "x.png"), "--plot", str(tmp_path / "x.png")],
            "--json", "and --plot", "name the same file")
    assert {p.name: p.read_bytes() for p in logs.iterdir()} == before and hard.read_bytes() == before["rank0.jsonl"]


def test_simulate_refuses_to_write_over_its_trace(no_work: None, tmp_path: Path) -> None:
    trace = tmp_path / "arrivals.csv"
    trace.write_text("arrival,prompt_tokens,output_tokens\n0.0,100,10\n0.5,200,20\n")
    run_trace = ["simulate", "--workload", "trace", "--trace", str(trace), "--passes", "20", "--profile", "hardened"]
    refused([*run_trace, "--json", str(trace)], f"--json {trace} is an input file of this command")
    png = tmp_path / "arrivals.png"
    png.write_bytes(trace.read_bytes())
    refused([*run_trace[:4], str(png), *run_trace[5:], "--plot", str(png)], f"--plot {png} is an input file")
    both = tmp_path / "both.png"
    refused([*run_trace, "--json", str(both), "--plot", str(both)], "name the same file")
    assert trace.read_text().startswith("arrival,") and not both.exists()


# ----- checked by trying, named, never empty ------------------------------------------------------------


@pytest.mark.parametrize(("name", "option", "file"), _file_cases())
def test_an_unusable_place_is_found_by_trying_not_by_os_access(command: Any, no_work: None, monkeypatch: pytest.MonkeyPatch,
                                                               name: str, option: str, file: str) -> None:
    """``/proc`` takes no new file, for root too; ``os.access`` is made to say yes to everything, as it does to root."""
    monkeypatch.setattr(os, "access", lambda *a, **k: True)
    refused(command(name, option, f"/proc/nope/{file}"), f"{option} /proc/nope/{file}: its folder /proc/nope would be "
            "created in /proc, which cannot take new files")
    # an existing folder that creates no files is not "No such file or directory", as the error number has it
    refused(command(name, option, f"/proc/{file}"), f"{option} /proc/{file}: its folder /proc cannot take new files (it "
            "exists, but its filesystem creates no files in it)")
    refused(command(name, option, ""), f"{option} needs a file name, got an empty string")


@pytest.mark.parametrize(("name", "option"), _folder_cases())
def test_an_unusable_folder_is_found_by_trying(command: Any, no_work: None, monkeypatch: pytest.MonkeyPatch, name: str,
                                               option: str) -> None:
    monkeypatch.setattr(os, "access", lambda *a, **k: True)
    refused(command(name, option, "/proc/nope"), f"{option} /proc/nope would be created in /proc, which cannot take new files")
    refused(command(name, option, ""), f"{option} needs a folder name, got an empty string")


@pytest.mark.skipif(not HAVE_Z3, reason="prove needs z3")
def test_prove_writes_no_trace_when_its_report_cannot_be_written(command: Any, tmp_path: Path) -> None:
    """The issue's case: ``--traces t --json /proc/nope/r.json`` used to exit 2 with 12 traces written."""
    refused(command("prove", "--traces", str(tmp_path / "t"), "--json", "/proc/nope/r.json"), "--json /proc/nope/r.json")
    assert tree(tmp_path) == []


# ----- plot formats, up front ---------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".svg", ".pdf", ".jpg", ".txt", ""])
def test_simulate_plot_takes_only_png_and_says_so_before_the_run(no_work: None, tmp_path: Path, suffix: str) -> None:
    plot = tmp_path / f"figure{suffix}"
    refused([*SIM, "--json", str(tmp_path / "s.json"), "--plot", str(plot)], f"--plot {plot}: expected a file name ending in .png")
    assert tree(tmp_path) == []


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="--plot needs matplotlib")
@pytest.mark.parametrize("suffix", CHECK_LOG_PLOT_SUFFIXES)
def test_check_log_plot_writes_every_format_it_accepts(seed_logs: Path, tmp_path: Path, suffix: str) -> None:
    plot = tmp_path / f"timeline{suffix.upper() if suffix == '.png' else suffix}"
    rc, out, err = run(["check-log", str(seed_logs), "--plot", str(plot)])
    assert rc == 1 and err == "", err
    data = plot.read_bytes()
    assert data.startswith({".png": b"\x89PNG", ".svg": b"<?xml", ".pdf": b"%PDF"}[suffix]), data[:16]
    assert tree(tmp_path) == [plot.name]


@pytest.mark.parametrize("suffix", [".jpg", ".txt", ""])
def test_check_log_plot_refuses_other_formats_before_reading(seed_logs: Path, no_work: None, tmp_path: Path, suffix: str) -> None:
    plot = tmp_path / f"timeline{suffix}"
    refused(["check-log", str(seed_logs), "--plot", str(plot)], f"--plot {plot}: expected a file name ending in .png, .svg, .pdf")


# ----- all or nothing -----------------------------------------------------------------------------------


ALL_OUTPUTS = [
    pytest.param("prove", ["--traces", "out/t", "--json", "out/r.json"], marks=_needs("prove", ""), id="prove"),
    pytest.param("docs", ["--out", "out/docs"], marks=_needs("docs", ""), id="docs"),
    pytest.param("check-log", ["--traces", "out/t", "--json", "out/r.json", "--plot", "out/p.png", "--digest", "out/n.digest"],
                 marks=_needs("check-log", "--plot"), id="check-log"),
    pytest.param("simulate", ["--plot", "out/s.png", "--json", "out/s.json"], marks=_needs("simulate", "--plot"), id="simulate"),
]


@pytest.mark.parametrize(("name", "outputs"), ALL_OUTPUTS)
def test_a_failure_while_writing_leaves_no_output(command: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str,
                                                  outputs: list[str]) -> None:
    """The last file a command writes fails (a full disk): none of the others appears, nor the folders made for them."""
    argv = command(name, *[str(tmp_path / o) if "/" in o else o for o in outputs])
    fill = files._fill
    fills: list[str] = []

    def counted(path: str, data: Any) -> None:
        fills.append(path)
        fill(path, data)

    monkeypatch.setattr(files, "_fill", counted)
    assert run(argv)[0] in (0, 1)
    assert len([p for p in (tmp_path / "out").rglob("*") if p.is_file()]) >= 2  # more than one output to lose
    last = len(fills)
    shutil.rmtree(tmp_path / "out")
    fills.clear()

    def fails_last(path: str, data: Any) -> None:
        counted(path, data)
        if len(fills) == last:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(files, "_fill", fails_last)
    rc, out, err = run(argv)
    assert rc == 2 and "No space left on device" in err and err.count("\n") == 1, err
    # the file named as the user asked for it, with its option (the OSError itself names none): not a temporary
    assert any(f"{o.split()[0]} {tmp_path / 'out'}" in err for o in outputs if o.startswith("--")), err
    assert ".part" not in err, err
    assert tree(tmp_path) == []  # nothing written, no folder created for it, no temporary file left


class _FullDisk(io.FileIO):
    """A file on a disk with ``room`` bytes free: every write past them fails, as on a real full disk."""

    room = 0

    def write(self, data: Any) -> int:
        if self.tell() + len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


@contextlib.contextmanager
def full_disk(monkeypatch: pytest.MonkeyPatch, folder: Path, room: int) -> Iterator[None]:
    """Files opened for writing in ``folder`` (by ``open``, or by ``io.open`` as zipfile opens the digest) fill the
    disk after ``room`` bytes."""
    real = io.open

    def opener(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if not (set(mode) & set("wax") and isinstance(file, (str, os.PathLike)) and Path(file).parent == folder):
            return real(file, mode, *args, **kwargs)
        raw = _FullDisk(file, mode.replace("b", "").replace("t", ""))
        raw.room = room
        buffered = io.BufferedRandom(raw) if "+" in mode else io.BufferedWriter(raw)
        return buffered if "b" in mode else io.TextIOWrapper(buffered, encoding=kwargs.get("encoding") or "utf-8")

    with monkeypatch.context() as m:
        m.setattr(io, "open", opener)
        m.setattr(builtins, "open", opener)
        yield


@pytest.mark.parametrize("share", [0.0, 0.5, 0.99])
def test_check_log_digest_on_a_full_disk_is_named_and_leaves_nothing(seed_logs: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path, share: float) -> None:
    """It exited 2 with an unnamed ``[Errno 28] No space left on device`` and left its temporary behind: discarding the
    digest closed its archive first, which wrote to the full disk again and raised before the temporary was removed.
    The disk fills at the first write, half-way, and on the archive's last bytes (its index, written when it closes)."""
    whole = tmp_path / "whole.digest"
    rc, _, err = run(["check-log", str(seed_logs), "--digest", str(whole)])
    assert rc == 1 and whole.stat().st_size > 1000, err
    out = tmp_path / "out"
    digest = out / "n.digest"
    with full_disk(monkeypatch, out, int(whole.stat().st_size * share)):
        refused(["check-log", str(seed_logs), "--digest", str(digest), "--json", str(out / "r.json")],
                f"--digest {digest}: cannot write it: No space left on device")
    assert tree(tmp_path) == ["whole.digest"]


def test_node_digest_on_a_full_disk_is_named_and_leaves_nothing(seed_logs: Path, monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    """The plain function's digest, written beside its target and renamed: the error names the file it was asked for,
    by the parameter that named it."""
    from prefill_delayer.conformance.digest import node_digest

    digest = tmp_path / "n.digest"
    with full_disk(monkeypatch, tmp_path, 0), pytest.raises(files.OutputError) as caught:
        node_digest([str(seed_logs)], str(digest))
    assert str(caught.value) == f"out {digest}: cannot write it: No space left on device"
    assert tree(tmp_path) == []


def test_simulate_writes_no_json_when_its_plot_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from prefill_delayer.sim import plot as sim_plot
    from prefill_delayer.sim.errors import SimInputError

    def broken(results: Any, path: str, title: str = "", name: str = "") -> None:
        Path(path).write_bytes(b"half a figure")
        raise SimInputError(f"--plot {name or path}: the figure failed")

    monkeypatch.setattr(sim_plot, "plot", broken)
    err = refused([*SIM, "--json", str(tmp_path / "s.json"), "--plot", str(tmp_path / "s.png")],
                  f"--plot {tmp_path / 's.png'}: the figure failed")
    assert ".part" not in err  # the message names the user's file, not the temporary one
    assert tree(tmp_path) == []


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="--plot needs matplotlib")
@pytest.mark.parametrize("room", [0, 10_000])
@pytest.mark.parametrize("suffix", CHECK_LOG_PLOT_SUFFIXES)
def test_check_log_plot_on_a_full_disk_is_named_and_leaves_nothing(seed_logs: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path, suffix: str, room: int) -> None:
    """matplotlib wrote the figure into the output file: a full disk was an unnamed ``[Errno 28] No space left on
    device`` for .png and .svg, and for .pdf exit 1 (the code for violations) with a traceback ending in matplotlib's
    own ``AttributeError: 'Stream' object has no attribute 'pos'``. An output already there stays whole."""
    report = tmp_path / "r.json"
    report.write_text('{"old": true}\n')
    plot = tmp_path / "p" / f"timeline{suffix}"
    with full_disk(monkeypatch, plot.parent, room):
        refused(["check-log", str(seed_logs), "--json", str(report), "--traces", str(tmp_path / "t"), "--plot", str(plot)],
                f"--plot {plot}: cannot write it: No space left on device")
    assert report.read_text() == '{"old": true}\n' and tree(tmp_path) == ["r.json"]


SUITE = ["simulate", "--suite", "calibration", "--profile", "off", "--duration", "2", "--no-progress"]


@pytest.mark.skipif(not HAVE_MATPLOTLIB, reason="--plot needs matplotlib")
@pytest.mark.parametrize("room", [0, 10_000])
@pytest.mark.parametrize("argv", [SIM, SUITE, [*SUITE, "--seeds", "0-1"]], ids=["run", "suite", "sweep"])
def test_simulate_plot_on_a_full_disk_is_named_as_every_failed_write_and_leaves_nothing(monkeypatch: pytest.MonkeyPatch,
                                                                                        tmp_path: Path, room: int,
                                                                                        argv: list[str]) -> None:
    """A run's figure said ``--plot FILE: No space left on device``, a suite's and a sweep's ``[Errno 28] No space left
    on device`` naming nothing, where every other output says ``cannot write it`` (the wording of
    ``files.write_failed``). An output already there stays whole."""
    report = tmp_path / "s.json"
    report.write_text('{"old": true}\n')
    plot = tmp_path / "p" / "s.png"
    with full_disk(monkeypatch, plot.parent, room):
        err = refused([*argv, "--json", str(report), "--plot", str(plot)])
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert err == f"prefill-delayer simulate: {files.write_failed(f'--plot {plot}', full)}\n"
    assert report.read_text() == '{"old": true}\n' and tree(tmp_path) == ["s.json"]


# ----- the module itself --------------------------------------------------------------------------------


def test_outputs_refuses_writing_one_file_twice(tmp_path: Path) -> None:
    plan = files.Outputs().folder("--traces", str(tmp_path / "t"))
    with pytest.raises(files.OutputError, match="written twice"):
        with plan.writing() as out:
            out.write_in("--traces", "a.json", "1")
            out.write_in("--traces", "a.json", "2")
    assert tree(tmp_path) == []


def test_an_interrupt_while_staging_leaves_nothing(tmp_path: Path) -> None:
    plan = files.Outputs().file("--json", str(tmp_path / "n" / "r.json")).folder("--traces", str(tmp_path / "n" / "t"))
    with pytest.raises(KeyboardInterrupt):
        with plan.writing() as out:
            out.write("--json", "{}")
            out.write_in("--traces", "a.json", "{}")
            raise KeyboardInterrupt
    assert tree(tmp_path) == []


def test_simulate_without_matplotlib_says_so_before_the_run(no_work: None, monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    refused([*SIM, "--plot", str(tmp_path / "s.png")], "--plot needs matplotlib", "prefill-delayer[plot]")
    assert tree(tmp_path) == []
