"""Output files of every subcommand: checked before the work starts, written together after it; and input files,
read whole (``read_input``).

A base layer: it imports nothing of the package, so ``prove``, ``docs``, ``check-log``
and ``simulate`` check and write their outputs the same way. A subcommand declares its
output options on an ``Outputs`` (``file("--json", path)``, ``folder("--traces", dir)``),
asks ``problem()`` before any work, and writes inside ``with outputs.writing() as out:``.

What every output option gets, and why:

* a name: an empty one is refused (it used to mean "write nothing", silently), and so is a file
  named ``-``, which reads as standard output, where every command writes its own report (it used
  to write a file called ``-``); ``./-`` names that file;
* never one of the command's inputs (the same file, or an input folder), and never
  the same file as another output option: a report must not replace the log it reports on;
* through symlinks: the file a link points at is replaced, the link stays;
* only regular files: an existing device, FIFO, socket or folder at a file option is
  refused (writing a report over ``/dev/full`` must not turn the device into a file);
* a folder of a run's own files (``folder(..., empty=True)``, the traces) must be new or
  empty: this run's files beside an earlier run's could not be told apart;
* the umask: a new file gets ``0666 & ~umask`` (folders ``0777 & ~umask``); a file
  replaced keeps its mode;
* checks by trying: the folder that will hold an output must take a new file (one is
  created and removed there), and an existing file must open for writing; ``os.access``
  says yes to root for everything, even ``/proc``;
* formats up front: a file option with ``suffixes`` (a plot) names one its writer
  really writes;
* whole or nothing: every output is written to a temporary file beside its target;
  the temporaries replace their targets together, at the end, only when the work
  succeeded. A failure, a bad format or Ctrl-C leaves no output, not even a folder
  created for one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import signal
import stat
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]

_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


class OutputError(OSError):
    """An output that cannot be written; the message names the option. An ``OSError``, so a command's
    handler for failed writes reports it the same way (one line, exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


@dataclass(frozen=True)
class _Output:
    option: str
    value: str
    folder: bool
    suffixes: Optional[tuple[str, ...]]
    empty: bool = False  # a folder that must be new or empty

    @property
    def real(self) -> str:
        """The path written: symlinks followed (a dangling one names the file to create)."""
        return os.path.realpath(self.value)


def _kind(mode: int) -> Optional[str]:
    for test, name in _KINDS:
        if test(mode):
            return name
    return None


def _nearest_existing(path: str) -> str:
    """``path`` itself or its closest ancestor that exists."""
    p = Path(path)
    for candidate in (p, *p.parents):
        if os.path.lexists(candidate):
            return str(candidate)
    return os.path.abspath(os.sep)


def _identity(path: str) -> Optional[tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _try_create_in(base: str) -> Optional[str]:
    """Why no file can be created in folder ``base`` (``None``: one was, and is gone again)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".prefill-delayer-probe-", dir=base)
    except OSError as exc:
        if exc.errno == errno.ENOENT and os.path.isdir(base):  # /proc: "No such file or directory" of a folder that is
            return "it exists, but its filesystem creates no files in it"
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(probe)
    return None


def _folder_problem(where: str) -> Optional[str]:
    """Why folder ``where`` (which may not exist yet) cannot be created and written in, to follow its name."""
    base = _nearest_existing(where)
    if not os.path.isdir(base):
        return "is a file" if base == where else f"is inside {base}, which is a file"
    why = _try_create_in(base)
    if why is None:
        return None
    if base == where:
        return f"cannot take new files ({why})"
    return f"would be created in {base}, which cannot take new files ({why})"


class Outputs:
    """A command's output options: declared, checked before the work, then written together."""

    def __init__(self, inputs: Iterable[PathLike] = ()) -> None:
        self._inputs = [os.fspath(p) for p in inputs]
        self._outputs: dict[str, _Output] = {}

    def file(self, option: str, value: Optional[str], suffixes: Optional[Iterable[str]] = None) -> "Outputs":
        """Declare file option ``option`` (``None``: not given); ``suffixes``: the formats its writer writes."""
        if value is not None:
            self._outputs[option] = _Output(option, value, False, tuple(suffixes) if suffixes is not None else None)
        return self

    def folder(self, option: str, value: Optional[str], empty: bool = False) -> "Outputs":
        """Declare folder option ``option`` (``None``: not given); ``empty``: it must be new or empty, for a folder
        that holds one run's files only (files left from an earlier run would read as this run's)."""
        if value is not None:
            self._outputs[option] = _Output(option, value, True, None, empty)
        return self

    def problem(self) -> Optional[str]:
        """The first output that cannot be written, as one line naming its option; ``None`` when all can."""
        seen: dict[str, _Output] = {}
        for out in self._outputs.values():
            why = _folder_output_problem(out) if out.folder else _file_output_problem(out)
            if why is None:
                why = self._input_problem(out)
            if why is None and out.empty:
                why = _not_empty_problem(out)
            if why is None:
                other = seen.get(out.real)
                if other is not None:
                    why = f"{other.option} {other.value} and {out.option} {out.value} name the same {'folder' if out.folder else 'file'}"
            if why is not None:
                return why
            seen[out.real] = out
        return None

    def _input_problem(self, out: _Output) -> Optional[str]:
        mine = _identity(out.real)
        for given in self._inputs:
            same = os.path.realpath(given) == out.real or (mine is not None and _identity(given) == mine)
            if same:
                what = "an input folder" if os.path.isdir(given) else "an input file"
                return f"{out.option} {out.value} is {what} of this command ({given}); name another {'folder' if out.folder else 'file'}"
        return None

    @contextlib.contextmanager
    def writing(self) -> Iterator["Staged"]:
        """Stage the outputs; they replace their targets when the block ends without an exception, else none does."""
        problem = self.problem()
        if problem is not None:
            raise OutputError(problem)
        staged = Staged(self._outputs)
        try:
            yield staged
        except BaseException:
            staged.discard()
            raise
        staged.commit()


def empty_name(option: str, what: str = "a file") -> str:
    """The one wording of an empty name, given to an output or an input option alike: it would mean the current
    folder, or, once, "write nothing", silently."""
    return f"{option} needs {what} name, got an empty string"


def _file_output_problem(out: _Output) -> Optional[str]:
    opt, value = out.option, out.value
    if value == "":
        return empty_name(opt)
    if value == "-":  # not standard output: the command's report is there, and the two would be one stream
        return (f"{opt} -: {opt} writes a file, not standard output, which has the command's own report; "
                "name the file (./- for one called -)")
    real = out.real
    try:
        st: Optional[os.stat_result] = os.stat(real)
    except (FileNotFoundError, NotADirectoryError):  # not there yet (or inside a file: said below)
        st = None
    except OSError as exc:
        return f"{opt} {value}: {exc.strerror or exc}"
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = _kind(st.st_mode) or "not a regular file"
        if kind == "a folder":
            return f"{opt} {value} is a folder; expected a file name"
        via = f" (through the link, {real})" if real != os.path.abspath(value) else ""
        return f"{opt} {value} is {kind}{via}, not a regular file; expected a file name"
    if out.suffixes is not None and Path(value).suffix.lower() not in out.suffixes:
        return f"{opt} {value}: expected a file name ending in {', '.join(out.suffixes)}"
    if st is not None:
        try:
            os.close(os.open(real, os.O_WRONLY))  # opening for writing changes nothing: no O_TRUNC
        except OSError as exc:
            return f"{opt} {value} is not writable ({exc.strerror or exc})"
    parent = os.path.dirname(real)
    why = _folder_problem(parent)
    return None if why is None else f"{opt} {value}: its folder {os.path.dirname(value) or '.'} {why}"


def _folder_output_problem(out: _Output) -> Optional[str]:
    opt, value = out.option, out.value
    if value == "":
        return empty_name(opt, "a folder")
    real = out.real
    if os.path.exists(real) and not os.path.isdir(real):
        kind = _kind(os.stat(real).st_mode)
        return f"{opt} {value} is {'a file' if kind is None else kind}; expected a folder"
    why = _folder_problem(real)
    return None if why is None else f"{opt} {value} {why}; expected a folder"


def _not_empty_problem(out: _Output) -> Optional[str]:
    """Why a folder that must be new or empty is neither (``None``: it is, or it cannot be listed, which the
    writability check says)."""
    try:
        held = sorted(os.listdir(out.real))
    except OSError:
        return None
    if not held:
        return None
    shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
    return f"{out.option} {out.value} is not empty ({shown}): name a new or empty folder, so that only this run's files are in it"


class Staged:
    """The outputs being written: each a temporary file beside its target until ``commit``."""

    def __init__(self, outputs: dict[str, _Output]) -> None:
        self._outputs = outputs
        self._temps: list[tuple[str, str]] = []  # (temporary, target)
        self._targets: set[str] = set()
        self._made: list[str] = []  # folders created for the outputs, outermost first

    def _output(self, option: str, folder: bool) -> _Output:
        out = self._outputs.get(option)
        if out is None or out.folder != folder:
            raise KeyError(f"{option} is not a {'folder' if folder else 'file'} output of this command")
        return out

    def _makedirs(self, folder: str) -> None:
        missing = []
        p = Path(folder)
        while not os.path.lexists(p):
            missing.append(str(p))
            p = p.parent
        for d in reversed(missing):
            os.mkdir(d)  # 0777 & ~umask
            self._made.append(d)

    def _temp(self, target: str, suffix: str) -> str:
        """A new empty file beside ``target``, created with the umask's mode (or the mode ``target`` has)."""
        if target in self._targets:
            raise OutputError(f"{target} would be written twice")
        folder = os.path.dirname(target)
        self._makedirs(folder)
        try:
            existing = os.stat(target)
        except FileNotFoundError:
            existing = None
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise OutputError(f"{target} is {_kind(existing.st_mode) or 'not a regular file'}; cannot write a file there")
        for _ in range(100):
            tmp = os.path.join(folder, f".{os.path.basename(target)}.{secrets.token_hex(4)}.part{suffix}")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - 100 random names taken
            raise OutputError(f"cannot create a temporary file in {folder}")
        self._temps.append((tmp, target))
        self._targets.add(target)
        try:
            if existing is not None:
                os.fchmod(fd, stat.S_IMODE(existing.st_mode))
        finally:
            os.close(fd)
        return tmp

    def path(self, option: str) -> str:
        """A temporary file for file option ``option`` with the target's suffix, for writers that take a name (a plot)."""
        out = self._output(option, folder=False)
        with _naming(option, out.value):
            return self._temp(out.real, Path(out.value).suffix)

    def write(self, option: str, data: Union[str, bytes]) -> None:
        """The whole content of file option ``option``."""
        tmp = self.path(option)
        with _naming(option, self._outputs[option].value):
            _fill(tmp, data)

    def write_in(self, option: str, name: str, data: Union[str, bytes]) -> str:
        """File ``name`` inside folder option ``option``; returns its path as the user named the folder."""
        out = self._output(option, folder=True)
        if not name or os.sep in name or name in (".", ".."):
            raise ValueError(f"not a file name: {name!r}")
        shown = os.path.join(out.value, name)
        with _naming(option, shown):
            _fill(self._temp(os.path.join(out.real, name), ""), data)
        return shown

    def discard(self) -> None:
        """Remove every temporary file and every folder created for them."""
        for tmp, _ in self._temps:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        for d in reversed(self._made):
            with contextlib.suppress(OSError):
                os.rmdir(d)
        self._temps.clear()
        self._made.clear()

    def commit(self) -> None:
        """Every temporary replaces its target, with Ctrl-C held back until all have (then it is delivered)."""
        with _sigint_held():
            try:
                for tmp, target in self._temps:
                    with _naming("", target):
                        os.replace(tmp, target)
            except BaseException:
                self.discard()
                raise
        self._temps.clear()
        self._made.clear()


@contextlib.contextmanager
def _naming(option: str, shown: str) -> Iterator[None]:
    """An ``OSError`` while writing an output (a full disk: ``[Errno 28] No space left on device``, which names no
    file) as an ``OutputError`` naming the option and the file the user asked for, not the temporary beside it."""
    try:
        yield
    except OutputError:
        raise
    except OSError as exc:
        raise write_failed(f"{option} {shown}" if option else shown, exc) from None


def write_failed(where: str, exc: OSError) -> OutputError:
    """``exc``, raised while writing output ``where`` (an option and its file, or ``stdout``), as the error that names
    it: ``[Errno 28] No space left on device`` alone does not say which output filled the disk."""
    return OutputError(f"{where}: cannot write it: {exc.strerror or exc}")


def _fill(path: str, data: Union[str, bytes]) -> None:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with open(path, "wb") as f:
        f.write(raw)


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT blocked for the block (main thread, where Python handles it); a pending one arrives after it."""
    can = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    if can:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if can:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


# ----- input files: read whole, but never from a device, and interruptible ------------------------------------------

_READ_CHUNK = 1 << 20  # a read this size returns to Python between chunks, so Ctrl-C ends an endless input


def read_input(path: PathLike) -> bytes:
    """The bytes of input file ``path``, read to its end in chunks; an ``OSError`` whose ``strerror`` says why not.

    Why not a plain ``read()``: one ``read()`` of ``/dev/zero`` grows one buffer until memory runs out, and Ctrl-C
    waits for it to return. A regular file or a pipe (``--trace <(zcat trace.csv.gz)``) is read; a folder, a
    device or a socket is refused, and so is an empty name, which would otherwise open the current folder."""
    if not os.fspath(path):
        raise OSError(errno.ENOENT, "no file name given (an empty string)")
    fd = os.open(path, os.O_RDONLY)  # a folder opens too, so that it is named as one below
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{_kind(mode) or 'not a regular file'}, not a file")
    with open(fd, "rb", buffering=0) as f:
        chunks = []
        while chunk := f.read(_READ_CHUNK):
            chunks.append(chunk)
    return b"".join(chunks)
