"""Decision logs read in bounded chunks: where each chunk's lines are, and the lines of one chunk as columns.

check-log never reads a whole log: it reads each file's header, then splits
each run into chunks of consecutive pass numbers, the same numbers for every
rank (what the cross-rank checks compare). A pass line's number is found at a
byte offset by reading the line there, so a chunk's boundaries are found by a
binary search over each file (its pass lines are in pass order, as the runtime
writes them; a file that is not is refused, since a search over it would be
meaningless). Each chunk is then parsed alone, in any process.

Format 2 lines are numbers only: a chunk's pass lines parse as one flat JSON
array (each line's brackets blanked, its newline a comma, once the bytes show
every line holds exactly the header's count of values) into one float matrix,
validated column by column (``FILE:LINE`` and what is wrong on the first bad
value). A chunk whose bytes do not pass is parsed line by line, which names the
bad line. Format 1 lines are parsed one by one, by the format-1 reader
(``logread.parse_pass``), and turned into columns.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import re
import struct
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np

from ..spec.fields import BOOL, CONTROL, COUNT, OPT_SECONDS, REASON, SECONDS, TEXT, USAGE
from ..spec.schema import KIND_FAIL, KIND_HEADER, KIND_PASS, KIND_SET, MODE_FULL, digest_of_bytes, enums, pass_columns, view_kind
from .columns import MAX_EXACT, Model, RankCols
from .logread import (
    FailRec, LogError, RankLog, SetRec, _parse_fail, _parse_set, _show, _type_name, first_line, not_json,
    parse_header, parse_pass,
)

try:  # orjson parses a chunk's lines in one call; the standard library's json is the same format, slower
    import orjson

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover - orjson is part of the check extra
    _loads = json.loads

_V1_PASS = re.compile(rb'^\{"kind":\s*"pass".*?"pass":\s*(\d+)')


@dataclass
class FileInfo:
    """One log file: its header, where its body starts, and its first and last pass."""

    path: str
    header: dict[str, Any]
    format: int
    mode: Optional[str]
    body: int  # offset of the line after the header
    size: int
    first: Optional[int]
    last: Optional[int]
    last_wall: Optional[float] = None  # the wall clock of its last pass: when its run ended, as far as this file says
    first_wall: Optional[float] = None  # the wall clock of its first pass


def _number(line: bytes, fmt: int) -> Optional[int]:
    """The pass number of a pass line, or None for any other line."""
    if fmt == 2:
        if line[:1] != b"[":
            return None
        try:
            return int(line[1:line.index(b",")])
        except ValueError:
            return None
    m = _V1_PASS.match(line)
    return int(m.group(1)) if m else None


def _next_pass(f: Any, off: int, end: int, fmt: int) -> tuple[Optional[int], Optional[int], int]:
    """(start, number) of the first pass line that starts at or after ``off`` (and before ``end``), and where the line ends."""
    if off > 0:
        f.seek(off - 1)
        if f.read(1) != b"\n":
            f.readline()
    else:
        f.seek(0)
    while True:
        pos = f.tell()
        if pos >= end:
            return None, None, pos
        line = f.readline()
        if not line:
            return None, None, pos
        n = _number(line, fmt)
        if n is not None and line.endswith(b"\n"):
            return pos, n, pos + len(line)


def offset_of(f: Any, info: FileInfo, target: int) -> int:
    """The start of the first pass line of ``info`` whose number is >= ``target`` (its end of file when none)."""
    lo, hi = info.body, info.size
    while hi - lo > 16384:
        mid = (lo + hi) // 2
        pos, n, after = _next_pass(f, mid, hi, info.format)
        if pos is None or n is None or n >= target:
            hi = mid if pos is None else pos
        else:
            lo = after
    pos = lo
    while pos < hi:
        p, n, after = _next_pass(f, pos, hi, info.format)
        if p is None or n is None:
            return hi
        if n >= target:
            return p
        pos = after
    return hi


def scan_file(path: str) -> tuple[Optional[tuple[dict[str, Any], Any, FileInfo]], Optional[str]]:
    """A file's header, configuration and layout, or a note why it holds nothing; ``LogError`` for a bad header."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise LogError(f"{path}: cannot open it: {exc.strerror or exc}") from None
    with f:
        raw = f.readline()
        o, note = first_line(Path(path), path, raw)
        if o is None:
            return None, note
        try:
            header, config = read_header(o)
        except ValueError as exc:
            raise LogError(f"{path}:1: {exc}") from None
        fmt = header["format"]
        mode = header.get("mode")
        body = len(raw)
        f.seek(0, 2)
        size = f.tell()
        info = FileInfo(path, header, fmt, mode, body, size, None, None)
        pos, first, _ = _next_pass(f, body, size, fmt)
        info.first = first
        if pos is not None:
            f.seek(pos)
            wall = _wall(f.readline(), fmt)
            info.first_wall = None if wall is None else wall + (header["started"] if fmt == 2 else 0.0)
        if first is not None:  # the last pass line: search back from the end
            back = 4096
            while True:
                start = max(body, size - back)
                f.seek(start)
                lines = f.read(size - start).split(b"\n")
                found = [n for n in (_number(x + b"\n", fmt) for x in (lines[1:] if start > body else lines)[:-1]) if n is not None]
                if found or start == body:
                    info.last = found[-1] if found else first
                    tail = [x for x in (lines[1:] if start > body else lines)[:-1] if _number(x + b"\n", fmt) is not None]
                    wall = _wall(tail[-1], fmt) if tail else None
                    info.last_wall = None if wall is None else wall + (header["started"] if fmt == 2 else 0.0)
                    break
                back *= 4
        return (header, config, info), None


def _wall(line: bytes, fmt: int) -> Optional[float]:
    """The ``wall`` of a pass line (format 2: its second value, seconds since the header's ``started``), or None."""
    try:
        o = json.loads(line)
        w = o[1] if fmt == 2 else o.get("wall")
    except (ValueError, IndexError, TypeError, AttributeError):
        return None
    return float(w) if isinstance(w, (int, float)) and not isinstance(w, bool) else None


def read_header(o: Any) -> tuple[dict[str, Any], Any]:
    """A log's header and the configuration it records, by every rule of the format it names (``ValueError`` when
    it breaks one): a file's first line, or a header a node's digest kept (``digest``)."""
    if not isinstance(o, dict):
        raise ValueError(f"a header is an object, got {_type_name(o)}")
    header, config = parse_header(o)  # first: its fields missing, all named
    if o.get("kind") != KIND_HEADER:
        raise ValueError(f"field 'kind' expected {KIND_HEADER!r}, got {_show(o.get('kind'))}")
    if header["format"] == 2:
        _check_columns(header, config)
    return header, config


def _check_columns(header: dict[str, Any], config: Any) -> None:
    policy = config.policy
    want = [name for name, _ in pass_columns(policy)]
    got = header.get("columns")
    if header.get("mode") not in ("compact", MODE_FULL):
        raise ValueError(f"field 'mode' expected 'compact' or 'full', got {_show(header.get('mode'))}")
    if not isinstance(got, list) or got[: len(want)] != want:
        raise ValueError("its pass lines' columns are not this build's for the policy (field 'columns'); check the log "
                         "with the build that wrote it")
    if header.get("enums") != enums(policy):
        raise ValueError("its control states, reasons or texts are numbered otherwise than in this build (field 'enums')")


# ----- one chunk -------------------------------------------------------------------------------


@dataclass
class Segment:
    """Bytes ``[start, end)`` of file ``fi`` of a rank, whose first line is line ``line`` of the file."""

    fi: int
    path: str
    start: int
    end: int
    line: int
    last: bool  # the segment ends the file
    cut: bool = False  # its last line lacks its newline (set when read)
    data: bytes = b""  # its bytes, when every line is a complete format-2 pass line (set when read)


@dataclass
class ChunkLines:
    """What a chunk of one rank holds besides its pass lines."""

    fails: list = field(default_factory=list)
    sets: list = field(default_factory=list)
    notes: list = field(default_factory=list)


def read_segments(segs: list[Segment]) -> list[tuple[Segment, list[bytes]]]:
    """Each segment's bytes, as a copy of the segment (``data``, ``cut`` set) with its lines: the task's own
    segments stay as planned, so a chunk's result does not carry the chunk's bytes back from a worker."""
    out: list[tuple[Segment, list[bytes]]] = []
    for seg in segs:
        with open(seg.path, "rb") as f:
            f.seek(seg.start)
            data = f.read(seg.end - seg.start)
        if data.endswith(b"\n") and data[:1] == b"[" and b"{" not in data:  # format 2, pass lines only: parsed whole
            out.append((replace(seg, data=data), []))
            continue
        lines = data.split(b"\n")
        if lines and lines[-1] == b"":
            lines.pop()
            out.append((seg, lines))
        else:
            out.append((replace(seg, cut=bool(lines) and seg.last), lines))
    return out


def _kind_of_line(o: Any) -> Optional[str]:
    return o.get("kind") if isinstance(o, dict) else None


def _other_line(raw: bytes, log: RankLog, seg: Segment, lineno: int, extra: ChunkLines) -> None:
    """A fail or set line (either format), or the error for anything else."""
    where = f"{seg.path}:{lineno}"
    try:
        o = json.loads(raw)
    except ValueError as exc:
        raise LogError(f"{where}: not JSON ({not_json(exc)})") from None
    kind = _kind_of_line(o)
    try:
        if kind == KIND_FAIL:
            extra.fails.append(FailRec(*_parse_fail(o, log), seg.fi, lineno))
        elif kind == KIND_SET:
            extra.sets.append(SetRec(*_parse_set(o, log), seg.fi, lineno))
        elif kind == KIND_HEADER:
            raise ValueError("a second header in one file")
        elif kind == KIND_PASS or isinstance(o, list):
            raise ValueError("a malformed pass line")
        else:
            raise ValueError(f"unknown line kind {_show(kind)}; expected header, pass, fail or set")
    except ValueError as exc:
        raise LogError(f"{where}: {exc}") from None


def _cut_note(seg: Segment, lineno: int, raw: bytes) -> str:
    return f"{seg.path}:{lineno}: last line cut short ({len(raw)} bytes, not complete JSON): a crash mid-write? ignored"


def parse_v1(log: RankLog, model: Model, pieces: list[tuple[Segment, list[bytes]]]) -> tuple[RankCols, ChunkLines]:
    """Format-1 lines, one by one through the format-1 reader, then as columns."""
    extra = ChunkLines()
    recs = []
    for seg, lines in pieces:
        for j, raw in enumerate(lines):
            lineno = seg.line + j
            is_last = seg.cut and j == len(lines) - 1
            try:
                o = json.loads(raw)
            except ValueError as exc:
                if is_last:
                    extra.notes.append(_cut_note(seg, lineno, raw))
                    break
                raise LogError(f"{seg.path}:{lineno}: not JSON ({not_json(exc)})") from None
            if _kind_of_line(o) == KIND_PASS:
                try:
                    recs.append(parse_pass(o, log, seg.fi, lineno))
                except ValueError as exc:
                    raise LogError(f"{seg.path}:{lineno}: {exc}") from None
            else:
                _other_line(raw, log, seg, lineno, extra)
    return cols_of_records(model, recs, log.group_rank), extra


def cols_of_records(model: Model, recs: list, place: Optional[int]) -> RankCols:
    """Format-1 records as columns (the rows are every rank's, so the view is folded from them)."""
    from ..runtime.envelope import PASS_MASK, Envelope

    env = Envelope(model.c)
    k = env.n_policy
    n = len(recs)
    rows = np.array([r.rows for r in recs], dtype=np.int64).reshape(n, env.flat_len)
    state_cols = lambda get: model.state([model.from_values(kind, [getattr(get(r), name) for r in recs], name)  # noqa: E731
                                          for name, kind in model.state_kinds])
    before = state_cols(lambda r: r.before)
    after = state_cols(lambda r: r.decision.next_state)
    dec = model.decision(after, [model.from_values(kind, [getattr(r.decision, name) for r in recs], name)
                                 for name, kind in model.decision_kinds])
    readings = {key: model.from_values(kind, [r.readings[key] for r in recs]) for key, kind in model.reading_kinds}
    return RankCols(
        number=np.array([r.number for r in recs], dtype=np.int64), now=np.array([r.now for r in recs], dtype=np.float64),
        readings=readings, own=(rows[:, place * env.row_len:place * env.row_len + k].T.copy() if place is not None
                                else np.zeros((k, n), dtype=np.int64)), view=None, before=before, decision=dec,
        digest=np.array([digest_of_bytes(row.astype("<i8").tobytes()) for row in rows], dtype=np.int64), rows=rows,
        fi=np.array([r.fi for r in recs], dtype=np.int64), line=np.array([r.line for r in recs], dtype=np.int64), recs=recs,
        stamp=rows[:, (place or 0) * env.row_len + env.f_stamp] & PASS_MASK,  # equal on every row of a pass that was decided
    )


_WANT = {BOOL: "0 or 1", COUNT: "an integer >= 0", SECONDS: "a number", USAGE: "a number >= 0",
         OPT_SECONDS: "a number (-0.0: unset)"}


def parse_v2(log: RankLog, model: Model, pieces: list[tuple[Segment, list[bytes]]]) -> tuple[RankCols, ChunkLines]:
    """Format-2 lines: every pass line of the chunk parsed in one call into one matrix, then checked and split into columns."""
    extra = ChunkLines()
    full = log.header.get("mode") == MODE_FULL
    columns = model.columns
    width = len(columns) + (log.flat_len if full else 0)
    texts: list[bytes] = []  # the pass lines of segments read line by line, not yet in a blob
    lines_of: list[int] = []
    fis: list[int] = []
    blobs, line_parts, fi_parts = [], [], []  # blobs: pass lines, each ended by a newline
    for seg, lines in pieces:
        if seg.data:
            count = count_byte(seg.data, b"\n")
            blobs.append(seg.data)
            line_parts.append(np.arange(seg.line, seg.line + count, dtype=np.int64))
            fi_parts.append(np.full(count, seg.fi, dtype=np.int64))
            continue
        if texts:
            blobs.append(b"\n".join(texts) + b"\n")
            line_parts.append(np.array(lines_of, dtype=np.int64))
            fi_parts.append(np.array(fis, dtype=np.int64))
            texts, lines_of, fis = [], [], []
        cut = seg.cut
        for j, raw in enumerate(lines):
            lineno = seg.line + j
            if raw[:1] == b"[":
                if cut and j == len(lines) - 1:
                    try:
                        _loads(raw)
                    except ValueError:
                        extra.notes.append(_cut_note(seg, lineno, raw))
                        break
                texts.append(raw)
                lines_of.append(lineno)
                fis.append(seg.fi)
            elif cut and j == len(lines) - 1:
                try:
                    json.loads(raw)
                except ValueError:
                    extra.notes.append(_cut_note(seg, lineno, raw))
                    break
                _other_line(raw, log, seg, lineno, extra)
            else:
                _other_line(raw, log, seg, lineno, extra)
    if texts:
        blobs.append(b"\n".join(texts) + b"\n")
        line_parts.append(np.array(lines_of, dtype=np.int64))
        fi_parts.append(np.array(fis, dtype=np.int64))
    line = np.concatenate(line_parts) if line_parts else np.zeros(0, np.int64)
    fi = np.concatenate(fi_parts) if fi_parts else np.zeros(0, np.int64)
    n = len(line)
    ncols = len(columns)
    rows = None
    whole = b"".join(blobs)
    if any(b in whole for b in _NOT_NUMBERS):  # numpy would read '"1.5"' and true as numbers: name the line instead
        _first_bad_line(whole[:-1].split(b"\n"), line, fi, log, width)
    rules = _column_rules(model, log)
    m = None if full else _flat_matrix(whole, n, width, rules[2])
    if m is None:
        try:
            values = _loads(b"[" + whole[:-1].replace(b"\n", b",") + b"]")
            if full:  # the rows hold fingerprints beyond a float's 53 bits: integers of their own
                rows = np.array([v[ncols:] for v in values], dtype=np.int64).reshape(n, width - ncols)
                values = [v[:ncols] for v in values]
            m = np.array(values, dtype=np.float64).reshape(n, ncols)
        except (ValueError, TypeError, OverflowError):
            _first_bad_line(whole[:-1].split(b"\n"), line, fi, log, width)
            raise
    _validate(m, rules, log, line, fi)
    return _cols_of_matrix(m, model, line, fi, rows), extra


def count_byte(data: bytes, byte: bytes) -> int:
    """How many times ``byte`` is in ``data``: numpy counts a byte several times faster than ``bytes.count``."""
    return int(np.count_nonzero(np.frombuffer(data, np.uint8) == byte[0]))


_NOT_NUMBERS = (b'"', b"t", b"f", b"n")  # a byte that starts or is in a string, true, false or null, never in a number
_FLAT = bytes.maketrans(b"[]\n", b"  ,")  # a line's brackets to blanks, its end to a comma: one flat JSON array


@functools.lru_cache(maxsize=16)
def _packer(row_codes: str, n: int) -> struct.Struct:
    """``n`` rows of ``row_codes`` (one struct code per column), little-endian: compiled once per chunk size (1.4 ms
    for 6,000 rows; a run's chunks but its last have one size)."""
    runs = "".join(f"{len(list(g))}{code}" for code, g in itertools.groupby(row_codes))
    return struct.Struct("<" + runs * n)


def _flat_matrix(whole: bytes, n: int, width: int, ints: Optional[np.ndarray] = None) -> Optional[np.ndarray]:
    """The ``n`` pass lines in ``whole`` (each ``[v,...]`` and a newline) as an ``n x width`` float matrix, parsed
    as one flat array: about 40% less time than a nested parse, which builds a list per line and numpy a row from
    each (6,000 lines of SGLang's delayer: 9.8 ms nested, about 6 ms flat).

    The flat parse cannot see where a line ends, so the bytes are checked first: every line holds one ``[`` at its
    start, one ``]`` before its newline and ``width - 1`` commas. ``None`` when they do not, or the values are
    not all numbers: the nested parse then finds and names the bad line.

    ``ints`` marks the columns that hold integers: their values are packed as int64 (no float object made of
    each, which a double's slot takes: 84% of a delayer's values, 3.5 -> 2.2 ms for 5,700 lines of 16 ranks)
    and then converted by numpy, rounding as a double's slot would. A value that is not an integer there (or past
    int64) fails the pack, and the nested parse takes the chunk; ``_validate`` then names it."""
    if n == 0 or len(whole) < 2 or whole[-1:] != b"\n":
        return None
    a = np.frombuffer(whole, np.uint8)
    newlines = np.flatnonzero(a == 10)
    if len(newlines) != n or np.count_nonzero(a == 91) != n or np.count_nonzero(a == 93) != n:
        return None
    starts = np.empty(n, np.int64)
    starts[0], starts[1:] = 0, newlines[:-1] + 1
    if not ((a[starts] == 91).all() and (a[newlines - 1] == 93).all()):
        return None
    commas = a == 44
    if np.count_nonzero(commas) != n * (width - 1):
        return None
    # each line's commas, summed in bytes (without a cast of every byte) when a line's count fits: a count that
    # wrapped past 255 would make the total above larger than n * (width - 1)
    per_line = np.add.reduceat(commas.view(np.uint8), starts, dtype=np.uint8 if width < 256 else np.int64)
    if not (per_line == width - 1).all():
        return None
    try:
        values = _loads(b"[" + whole[:-1].translate(_FLAT) + b"]")
        if len(values) != n * width:
            return None
        m = np.empty((n, width), dtype=np.float64)
        if ints is None or not ints.any():
            struct.pack_into(f"<{n * width}d", m.data, 0, *values)  # 16% faster than np.fromiter
            return m
        _packer("".join("q" if x else "d" for x in ints), n).pack_into(m.data, 0, *values)
        cols = np.flatnonzero(ints)
        m[:, cols] = m.view(np.int64)[:, cols]
        return m
    except (ValueError, TypeError, OverflowError, struct.error):
        return None


def _where(log: RankLog, fi: np.ndarray, line: np.ndarray, i: int) -> str:
    return f"{log.files[int(fi[i])]}:{int(line[i])}"


def _first_bad_line(texts: list[bytes], line: np.ndarray, fi: np.ndarray, log: RankLog, width: int) -> None:
    for i, raw in enumerate(texts):
        try:
            o = _loads(raw)
        except ValueError as exc:
            raise LogError(f"{_where(log, fi, line, i)}: not JSON ({str(exc).split(':')[0]})") from None
        if not isinstance(o, list) or len(o) != width:
            got = f"{len(o)} values" if isinstance(o, list) else "not an array"
            raise LogError(f"{_where(log, fi, line, i)}: a pass line of {width} values (the header's columns) expected, got {got}")
        bad = next((j for j, v in enumerate(o) if type(v) not in (int, float) or isinstance(v, bool)), None)
        if bad is not None:
            name = log.header["columns"][bad] if bad < len(log.header["columns"]) else f"value {bad}"
            raise LogError(f"{_where(log, fi, line, i)}: field '{name}' expected a number, got {_show(o[bad])}")
    raise LogError(f"{log.files[0]}: a pass line this build cannot read")


_BIG = np.finfo(np.float64).max


def _column_rules(model: Model, log: RankLog) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Each column's bounds ``[lo, hi)``, whether it holds integers, and what a bad value was expected to be."""
    sizes = {CONTROL: len(model.policy.states), REASON: len(model.policy.reasons)}
    rules: list[tuple[float, float, bool, str]] = []  # (lo, hi, whole, want) of each column
    for name, kind in model.columns:
        rule: tuple[float, float, bool, str]
        if kind in (CONTROL, REASON) or (kind == TEXT and name.split(".", 1)[-1] in model.texts):
            size = sizes.get(kind) or len(model.texts[name.split(".", 1)[-1]])
            rule = (0, size, True, f"an index in [0, {size}) (the header's enums)")
        elif kind == BOOL:
            rule = (0, 2, True, _WANT[kind])
        elif kind == COUNT:
            rule = (1 if name == "pass" else 0, MAX_EXACT, True, "an integer >= 1" if name == "pass" else _WANT[kind])
        elif kind == USAGE:
            rule = (0, math.inf, False, _WANT[kind])
        elif kind in (SECONDS, OPT_SECONDS):
            rule = (-math.inf, math.inf, False, _WANT[kind])
        else:  # a free text in a numbers-only line
            raise LogError(f"{log.files[0]}: column {name} is text; this build reads only numbers in format 2")
        rules.append(rule)
    return (np.array([r[0] for r in rules], np.float64), np.array([r[1] for r in rules], np.float64),
            np.array([r[2] for r in rules], bool), [r[3] for r in rules])


def _validate(m: np.ndarray, rules: tuple[np.ndarray, np.ndarray, np.ndarray, list[str]], log: RankLog, line: np.ndarray,
              fi: np.ndarray) -> None:
    """Every value of its kind (finite, in its column's ``_column_rules``: bounds, an integer where it counts or
    indexes), every line of its rank's file, the whole matrix at once; the first bad one, column by column, is an
    error with ``FILE:LINE``."""
    lo, hi, whole, want = rules
    x = m[:, : len(lo)]
    # bounds within the finite floats, so NaN and both infinities fail them; whole-matrix operations only (a
    # fancy-indexed update of the integer columns took 7 times as long)
    ok = (x >= np.maximum(lo, -_BIG)) & (x < np.minimum(hi, _BIG)) & ((x == np.floor(x)) | ~whole)
    if ok.all():
        return
    j = int(np.argmin(ok.all(axis=0)))
    i = int(np.argmin(ok[:, j]))
    v = float(x[i, j])  # the matrix is floats: a whole number is shown as the integer the line holds
    raise LogError(f"{_where(log, fi, line, i)}: field '{log.header['columns'][j]}' expected {want[j]}, "
                   f"got {_show(int(v) if v.is_integer() and abs(v) < 2**53 else v)}")


def _cols_of_matrix(m: np.ndarray, model: Model, line: np.ndarray, fi: np.ndarray, rows: Optional[np.ndarray]) -> RankCols:
    by_name = {name: j for j, (name, _) in enumerate(model.columns)}
    p = model.policy

    def col(name: str, kind: str, field_name: str = "") -> np.ndarray:
        return model.typed(kind, m[:, by_name[name]], field_name)

    readings = {key: col(key, kind) for key, kind in model.reading_kinds}
    own = m[:, [by_name[f"row.{f.name}"] for f in p.row]].T.astype(np.int64)
    view = tuple(col(f"view.{a.name}", view_kind(a)) for a in p.view)
    before = model.state([col(f"before.{nm}", k) for nm, k in model.state_kinds])
    after = model.state([col(f"after.{nm}", k) for nm, k in model.state_kinds])
    dec = model.decision(after, [col(f"decision.{nm}", k, nm) for nm, k in model.decision_kinds])
    return RankCols(
        number=m[:, 0].astype(np.int64), now=m[:, by_name["now"]], readings=readings, own=own, view=p.view_cls(*view),
        before=before, decision=dec, digest=m[:, by_name["digest"]].astype(np.int64), rows=rows, fi=fi, line=line,
        stamp=m[:, by_name["pass_stamp"]].astype(np.int64),
    )


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
