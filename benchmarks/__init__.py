"""Benchmarks that print numbers against their targets; nothing in the package imports them.

    python -m prefill_delayer.benchmarks.runtime        # µs per pass: bare collective, ours, the seed, on gloo ranks
    python -m prefill_delayer.benchmarks.runtime_instructions  # instructions per pass (callgrind), against another build
    python -m prefill_delayer.benchmarks.decision_log   # the decision log's cost per pass, check-log's speed
    python -m prefill_delayer.benchmarks.sim            # simulator passes per second at DP=8
    python -m prefill_delayer.benchmarks.sglang_shell   # the SGLang shell against SGLang 0.5.23's own class

Each ends with one verdict line and exits 0 when it met every target it judged, 1 when it
missed one (so a script or CI can act on it), 2 when it could not run (a bad option is one line
naming it), 130 on Ctrl-C and 143 on SIGTERM (one line each; what it wrote in a temporary folder
is removed), 141 when the reader of its report has gone (``| head -1``), as the CLI.
"""

from __future__ import annotations

import signal
import sys

from ..cli import interrupted


def _interrupted_while_loading(signum: int, frame: Optional[FrameType]) -> NoReturn:
    """Ctrl-C before ``run_main`` runs (while ``python -m`` imports the benchmark's modules, or its options are read):
    the CLI's one line and 130, where Python would print a traceback of the import it stopped. Nothing has been
    written yet, so there is nothing to remove."""
    module = sys.orig_argv[sys.orig_argv.index("-m") + 1] if "-m" in sys.orig_argv else "prefill_delayer.benchmarks"
    raise SystemExit(interrupted(f"python -m {module}"))


# ``python -m prefill_delayer.benchmarks.X`` imports this package first, while sys.argv[0] is still "-m" (runpy sets
# it to X's path only once X is found): from here until ``run_main`` takes over, Ctrl-C is one line. Imported any
# other way (a test, a script), the process's own Ctrl-C handling is left alone.
if sys.argv[:1] == ["-m"]:
    signal.signal(signal.SIGINT, _interrupted_while_loading)

import argparse  # noqa: E402 (after the handler: Ctrl-C while these load is one line too)
from dataclasses import dataclass  # noqa: E402
from types import FrameType  # noqa: E402
from typing import Callable, NoReturn, Optional, Sequence  # noqa: E402

MISSED = 1  # the exit status of a benchmark that missed a target
TERMINATED = 128 + signal.SIGTERM  # what a shell reports for a command ended by SIGTERM (`timeout`, `kill`)


def verdict(missed: Sequence[str], not_judged: Sequence[str] = ()) -> int:
    """Print the closing line; the exit status: 0 every judged target met, ``MISSED`` otherwise (naming which)."""
    unjudged = f" (not judged: {'; '.join(not_judged)})" if not_judged else ""
    if missed:
        print(f"MISSED TARGET: {'; '.join(missed)}{unjudged}")
        return MISSED
    print(f"every target met{unjudged}")
    return 0


def parser(module: str, doc: str) -> argparse.ArgumentParser:
    """The CLI's parser: a bad option is one line naming it, exit 2 (a traceback and exit 1 would read as a missed
    target)."""
    from ..cli.command import Parser

    return Parser(prog=f"python -m prefill_delayer.benchmarks.{module}", description=doc.split("\n\n")[0])


def _integer(text: str, low: int, why: str, high: Optional[int] = None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        wanted = f"an integer in [{low}, {high}]" if high is not None else f"an integer >= {low}{why}"
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")
    return value


def at_least(low: int, why: str = "", high: Optional[int] = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``low`` (``why`` says why that bound, when it is not 1), <= ``high`` if
    given."""
    return lambda text: _integer(text, low, why, high)


def integers_at_least(low: int) -> Callable[[str], list[int]]:
    """An argparse ``type``: one or more comma-separated integers, each >= ``low``."""

    def parse(text: str) -> list[int]:
        values = [_integer(x.strip(), low, "") for x in text.split(",") if x.strip()]
        if not values:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers >= {low}, got {text!r}")
        return values

    return parse


# The tables: each column as wide as its widest cell, so that the rows line up whatever the names. A benchmark prints
# a row as soon as it is measured (its runs take seconds to minutes each), so the widths cannot wait for the last row:
# each column is given the cells known before the first one (the profiles, workloads and world sizes to run) and the
# width its numbers' format fills, and takes the widest of those and its header. Columns are two spaces apart, so that
# a cell's own single spaces (``poisson, saturated``) never read as a column's edge.
GUTTER = "  "
US_WIDTH = 8  # µs per pass to one decimal: up to 99999.9


@dataclass(frozen=True)
class Column:
    """A column: its header, the cells known before the first row, the width its numbers fill, and whether it
    reads left-aligned (names) or right-aligned (numbers, so that their digits line up)."""

    header: str
    known: Sequence[str] = ()
    width: int = 0
    left: bool = False


class Table:
    """Rows of ``len(columns)`` cells, each padded to its column's width; the header is a row like the others.

    Rows print as they are measured, so a cell wider than its column (a timing past ``US_WIDTH``) cannot widen the
    rows above it: it takes the room it needs from the gutter and from the next cells' padding, and the columns
    after it keep their edges wherever that room suffices (a single space always separates two cells)."""

    def __init__(self, *columns: Column) -> None:
        self.columns = columns
        self.widths = [max(c.width, len(c.header), *(len(cell) for cell in c.known)) for c in columns]

    def header(self) -> str:
        return self.row(*(c.header for c in self.columns))

    def row(self, *cells: str) -> str:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.columns)} columns")
        line, start = "", 0  # ``start``: where the column being written starts in a row of cells that fit
        for j, (c, w, cell) in enumerate(zip(self.columns, self.widths, cells)):
            own = start if c.left else start + w - len(cell)
            line = line.ljust(max(own, len(line) + 1 if j else 0)) + cell  # its own place, or a space after the last
            start += w + len(GUTTER)
        return line.rstrip()


def timing_columns(other: str) -> list[Column]:
    """The columns the timing benchmarks share (``runtime`` against the seed, ``sglang_shell`` against SGLang's own
    class): wall or cpu, the µs per pass of the bare collective, ours and ``other``, ours and ``other``'s extra beyond
    the bare collective, and the ratio of the extras."""
    microseconds = ("bare", "ours", other, "ours extra", f"{other} extra")
    return [Column("time", ("wall", "cpu"), left=True), *(Column(h, width=US_WIDTH) for h in microseconds), Column("ratio")]


def us_cell(x: Optional[float]) -> str:
    """A timing cell: µs per pass to one decimal, ``-`` where there is none (the seed not timed)."""
    return "-" if x is None else f"{x:.1f}"


def ratio_cell(x: Optional[float]) -> str:
    """A ratio cell, ``-`` where the denominator is within noise."""
    return "-" if x is None else f"{x:.2f}"


class CouldNotRun(Exception):
    """What keeps a benchmark from measuring (a rank that died or never reported): ``run_main`` says it in one line
    and exits 2, where a traceback and 1 would read as a missed target."""


class Terminated(BaseException):
    """SIGTERM raised where the benchmark is, so that its ``with`` blocks unwind (its temporary folder goes) as on
    Ctrl-C; a BaseException, so that no ``except Exception`` takes it for a failure to retry."""


def _terminate(signum: int, frame: Optional[FrameType]) -> NoReturn:
    raise Terminated()


def run_main(prog: str, body: Callable[[], int]) -> int:
    """``body()``'s status; Ctrl-C as the CLI says it (one line, 130) and SIGTERM alike (one line, 143), each after the
    benchmark's ``with`` blocks have removed what they made. Its report's reader gone (``| head -1``) ends it as the
    CLI ends (141, quiet), and a full stdout or a benchmark that could not run (``CouldNotRun``) is one line (2):
    none is a traceback and 1, a missed target."""
    from ..cli.command import broken_pipe, stdout_named
    from ..files import OutputError

    previous = signal.signal(signal.SIGTERM, _terminate)
    loading = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C is a KeyboardInterrupt from here
    try:
        with stdout_named():
            code = body()
            sys.stdout.flush()  # here, not at the interpreter's exit, where a closed pipe is a second error
        return code
    except BrokenPipeError as exc:
        return broken_pipe(prog, exc)
    except (OutputError, CouldNotRun) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupted(prog)
    except Terminated:
        print(f"{prog}: terminated", file=sys.stderr)
        return TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, loading)
