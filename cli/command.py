"""The ``prefill-delayer`` command: prove, replay, docs, simulate, check-log (``run``; the package's ``main``
guards Ctrl-C while this module loads, then calls it).

``SUBCOMMANDS`` is the one table: each row names the module that adds the
subcommand's options (argparse only, cheap), checks them before any work, and
runs it, and says what its exit statuses mean. A subcommand's module is imported
when its options are added; what it runs imports its machinery only then, so
``docs`` needs no z3 and ``prove`` needs no torch.

Whatever goes wrong is one line on stderr: a usage error (exit 2, the line names
the subcommand and points at its ``--help`` instead of printing its usage, which
for ``simulate`` is two dozen lines), a bad option or input (2), a failed write
(2), Ctrl-C (130: the outputs are written together at the end, so an
interrupted command leaves none). A reader that closes the pipe early (``| head``) ends the
command quietly with 141, as it ends any Unix filter (SIGPIPE).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import select
import sys
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Iterator, NoReturn, Optional, Sequence

from . import INTERRUPTED, interrupted

if TYPE_CHECKING:
    from _typeshed import SupportsWrite  # argparse's own type for the stream it prints to

READER_GONE = 141  # 128 + SIGPIPE, what a shell reports for a filter whose reader closed the pipe (`| head`)


@dataclass(frozen=True)
class Subcommand:
    """One row of the table: the name, its one-line help, the module that implements it, its exit statuses.

    The module has ``add_arguments(parser)``, ``options_problem(args) -> str | None``
    (the first bad option, before any work) and ``main(args) -> int``.
    """

    name: str
    help: str
    module: str
    exits: str


SUBCOMMANDS = (
    Subcommand("prove", "prove the invariant catalogue with Z3 (exit 0 iff every property has its expected status)", "prove",
               "0 every property has its expected status; 1 some property does not; 2 a bad option or an output that cannot be written"),
    Subcommand("replay", "re-run a counterexample trace through the runtime (exit 0 iff its violation reproduces)", "replay",
               "0 the recorded violation happens again; 1 it does not; 2 the trace cannot be read (one line on stderr says why)"),
    Subcommand("docs", "generate docs/transitions.md (and its diagram) from the spec", "docs",
               "0 written (or, with --check, up to date); 1 --check found them stale; 2 the folder cannot be used"),
    Subcommand("simulate", "run a workload through the real delayer on N lock-step DP ranks; compare profiles", "simulate",
               "0 simulated; 2 a bad option, trace or workload, or an output that cannot be written"),
    Subcommand("check-log", "hold decision logs against the spec (exit 0 clean, 1 violations, 2 unreadable input)", "check_log",
               "0 clean; 1 violations found; 2 input it cannot check, or an output that cannot be written"),
)

DESCRIPTION = (
    "SGLang's prefill-delay policy as an explicit finite-state machine: prove its invariants with Z3 (prove), "
    "replay a counterexample through the runtime (replay), generate its docs (docs), simulate policies on a serving "
    "workload (simulate), and hold production decision logs against the spec (check-log)."
)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the command, then ``--help``, not the whole usage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}; see {self.prog} --help\n")

    def _print_message(self, message: str, file: Optional[SupportsWrite[str]] = None) -> None:
        """argparse's (``--help``, ``--version``, a usage error), flushed, and a reader gone (``--help | head``) ends the
        command quietly with 141 as any output of it does (argparse's own swallows the error: exit 0 having printed
        nothing, or Python's 'Exception ignored ... BrokenPipeError' and 120)."""
        stream = file or sys.stderr
        if not message or stream is None:
            return
        try:
            stream.write(message)
            flush = getattr(stream, "flush", None)  # argparse's streams are files; a writer without one buffers nothing
            if flush is not None:
                flush()
        except BrokenPipeError:
            if _reader_gone():
                raise SystemExit(READER_GONE) from None
            raise


class _Version(argparse.Action):
    """``--version``: the package's version and the hash of the spec its decisions come from (read only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version and the spec hash, and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        from importlib.metadata import PackageNotFoundError, version

        from ..spec.hashing import spec_hash

        try:
            ours = version("prefill-delayer")
        except PackageNotFoundError:
            ours = "(not installed)"
        parser._print_message(f"prefill-delayer {ours}, spec {spec_hash()}\n", sys.stdout)
        parser.exit(0)


def _module(cmd: Subcommand) -> Any:
    return importlib.import_module(f"{__package__}.{cmd.module}")


def build_parser() -> Parser:
    parser = Parser(prog="prefill-delayer", description=DESCRIPTION,
                    epilog=f"Ctrl-C stops any command with exit {INTERRUPTED}, leaving none of its outputs.")
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for cmd in SUBCOMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help[0].upper() + cmd.help[1:] + ".",
                           epilog=f"exit status: {cmd.exits}; {INTERRUPTED} interrupted (Ctrl-C)")
        _module(cmd).add_arguments(p)
        parser.commands[cmd.name] = p
    return parser


def _parse(parser: Parser, argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """Options a subcommand does not know are its usage error, not the top-level parser's."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _reader_gone() -> bool:
    """Whether stdout or stderr is a pipe whose reader has closed it; if so, both are pointed at the null device, so
    that the interpreter's last flush at exit finds nothing to fail on and prints no second error."""
    gone = False
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            closed = any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
        except (AttributeError, OSError, ValueError):  # no poll() on this platform, or not a real file
            continue
        if closed:
            _discard(stream)
            gone = True
    return gone


def _discard(stream: IO[str]) -> None:
    """Point ``stream``'s file descriptor at the null device (where it has one), so that what is still buffered for it
    goes nowhere instead of failing again at the interpreter's last flush."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)


class _NamedStdout:
    """``sys.stdout`` whose failed write or flush (``> /dev/full``) is an ``OutputError`` naming stdout, as a failed
    ``--json`` names its file: ``[Errno 28] No space left on device`` alone does not say which output it was. A reader
    gone stays a ``BrokenPipeError`` (exit 141)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def _named(self, exc: OSError) -> OSError:
        from ..files import write_failed

        if isinstance(exc, BrokenPipeError):
            return exc
        _discard(self._stream)  # what is left cannot be written either: the last flush at exit must not fail (120)
        return write_failed("stdout", exc)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise self._named(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise self._named(exc) from None

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, ...: the stream's own
        return getattr(self._stream, name)


@contextlib.contextmanager
def stdout_named() -> Iterator[None]:
    """``sys.stdout`` as ``_NamedStdout`` for the block: a failed write to it names stdout."""
    stdout = sys.stdout
    if stdout is not None:
        sys.stdout = _NamedStdout(stdout)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout = stdout


def run(argv: Optional[Sequence[str]] = None) -> int:
    """Exit 2 with one line on stderr for any bad input; 130, with one line, on Ctrl-C."""
    with stdout_named():
        return _main(argv)


def broken_pipe(name: str, exc: BrokenPipeError) -> int:
    """The status of command ``name`` whose output broke: 141 and quiet when its reader has gone (``| head``: it has
    what it wanted, as with any Unix filter), else one line on stderr and 2."""
    if _reader_gone():
        return READER_GONE
    print(f"{name}: {exc}", file=sys.stderr)
    return 2


def _main(argv: Optional[Sequence[str]]) -> int:
    name = "prefill-delayer"
    try:
        args = _parse(build_parser(), argv)  # argparse's own output (--help, --version, a usage error): Parser's
        name = f"prefill-delayer {args.command}"
        module = _module(next(c for c in SUBCOMMANDS if c.name == args.command))
        problem = module.options_problem(args)
        if problem is not None:
            print(f"{name}: {problem}", file=sys.stderr)
            return 2
        code = int(module.main(args))
        sys.stdout.flush()  # here, not at the interpreter's exit, where a closed pipe is a second error
        return code
    except BrokenPipeError as exc:
        return broken_pipe(name, exc)
    except OSError as exc:  # e.g. the disk filled up while writing the report: say so, no traceback
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted(name)

