"""check-log over logs of any size: chunks of passes, checked on columns in worker processes, stitched in order.

Why this shape: a group-day of logs is tens of millions of pass records, more
than fits in memory and far more than a machine can re-fire one by one. So:

1. **Plan** (here): each file's header is read (``chunks.scan_file``), the runs
   are grouped into sessions (``checks.build_sessions``), and each session's
   pass numbers are cut into chunks of about ``CHUNK_RECORDS`` records; a
   binary search finds each chunk's bytes in every rank's files.
2. **Check a chunk** (``check_chunk``, in a pool of processes, a bounded number
   of chunks in flight): parse each rank's lines into columns, evaluate the
   spec on them (``columns.Model``: the policy's own guards, table, decide and
   monitors through ``ArrayOps``), re-fire through the ``transitions`` machine
   every pass the column path flags plus a random sample (every pass with
   ``--exact``), check the rows each rank saw (the digest of the rows rebuilt
   from every rank's own row, the view folded from them), and compare the
   ranks pass by pass.
3. **Stitch** (``Stitcher``, here, in chunk order): what runs across chunk
   boundaries: gaps and continuity, the run bounds and run reports, the delay
   runs and waits of the summary, the group run bounds, the agreement findings
   (whose text names where the ranks split). All of it on columns.

Memory is bounded by the chunks in flight; the summary keeps counts, the wait
seconds of releases (one float each) and, for ``--plot``, one byte per record.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np

from ..spec.config import Config
from ..spec.schema import MODE_COMPACT, digest_of_bytes
from ..workers import cores, ended
from ..workers import start_pool as start_workers
from .checks import (
    CONFORMANCE, INVARIANT, Finding, LogStats, PassChecker, Report, Session, _apply_sets, _compare, _known,
    _state_differs, build_sessions, divergence_is_no_known_defect,
)
from .chunks import FileInfo, Segment, offset_of, parse_v1, parse_v2, read_segments, scan_file
from .arrayops import broadcast
from .columns import Model, RankCols, run_lengths
from .desync import drift_finding
from .logread import LogError, PassRec, RankLog, expand, no_complete_header

CHUNK_RECORDS = 96 * 1024  # records per chunk (all ranks): about 100 MB at most in a worker while it parses
DEFAULT_SAMPLE = 0.005  # share of passes the default path re-fires through the machine besides those it flags
MIN_SAMPLE = 2  # passes re-fired per rank and chunk at the least
POOL_BYTES = 100  # bytes of a pass record at the least (format 2, 2 ranks): a log this many times 4 chunks gets a pool


# ----- the plan ------------------------------------------------------------------------------


def scan(paths: list[str]) -> tuple[list[RankLog], list[str]]:
    """Every (rank, run) log in ``paths`` from the files' headers, with each file's layout; notes on empty files."""
    return scan_files(expand(paths))


def scan_files(files: list[Path]) -> tuple[list[RankLog], list[str]]:
    """``scan`` of the log files ``logread.expand`` found."""
    logs: dict[tuple[int, str], RankLog] = {}
    empty: list[str] = []
    nothing: list[str] = []  # why each file held no record, for the error when none did
    for path in files:
        found, note = scan_file(str(path))
        if found is None:
            empty.append(note or f"{path}: empty")
            size = path.stat().st_size
            nothing.append(f"{path} is empty" if size == 0 else no_complete_header(str(path), size))
            continue
        header, config, info = found
        key = (header["rank"], header["run"])
        log = logs.get(key)
        if log is None:
            log = logs[key] = RankLog(header, config)
            log.__dict__["infos"] = []
        else:
            for k in ("config", "fingerprint", "profile", "spec_hash", "group_rank", "world_size", "group_ranks", "format", "mode"):
                if header.get(k) != log.header.get(k):
                    raise LogError(f"{path}:1: field '{k}' differs from that of the same run's other file {log.files[0]}")
        if header["part"] in log.parts:
            raise LogError(f"{path}:1: part {header['part']} of run {header['run']} of rank {header['rank']} appears twice "
                           f"(also in {log.files[log.parts.index(header['part'])]})")
        log.files.append(str(path))
        log.parts.append(header["part"])
        log.__dict__["infos"].append(info)
    if not logs:
        raise LogError(f"nothing to check: {', '.join(nothing)}; a decision log starts with a header line, "
                       "then one line per pass")
    out = sorted(logs.values(), key=lambda g: (g.started, g.rank))
    for log in out:
        order = sorted(range(len(log.parts)), key=lambda i: log.parts[i])
        log.files = [log.files[i] for i in order]
        log.parts = [log.parts[i] for i in order]
        log.__dict__["infos"] = [log.__dict__["infos"][i] for i in order]
        infos = infos_of(log)
        for a, b in zip(infos, infos[1:]):
            if a.last is not None and b.first is not None and b.first <= a.last:
                raise LogError(f"{b.path}: its passes ({b.first}..{b.last}) overlap those of the run's earlier file {a.path} "
                               f"({a.first}..{a.last}): pass {b.first} of rank {log.rank} (run {log.run}) is logged twice")
        if min(log.parts) > 0:
            first = next((i.first for i in infos if i.first is not None), None)
            log.notes.append(f"rank {log.rank}: the run's first {min(log.parts)} file(s) are gone (rotated away); "
                             f"its log starts at pass {first if first is not None else '-'}")
    return out, empty


def infos_of(log: RankLog) -> list[FileInfo]:
    return log.__dict__["infos"]  # type: ignore[no-any-return]


def _positions(log: RankLog, bounds: list[int]) -> list[tuple[int, int]]:
    """(file index, byte offset) in ``log`` of each bound: the first line of the chunk that starts there."""
    infos = infos_of(log)
    pos = []
    for j, b in enumerate(bounds):
        if j == 0:
            k = next((i for i, info in enumerate(infos) if info.last is not None and info.last >= b), 0)
            info = infos[k]
            pos.append((k, info.body if info.first is None or b <= info.first else _offset(info, b)))
            continue
        if j == len(bounds) - 1 and b > max((i.last or 0) for i in infos):
            pos.append((len(infos) - 1, infos[-1].size))
            continue
        k = next((i for i, info in enumerate(infos) if info.last is not None and info.last >= b), len(infos) - 1)
        info = infos[k]
        pos.append((k, info.body if info.first is not None and b <= info.first else _offset(info, b)))
    return pos


def _offset(info: FileInfo, b: int) -> int:
    with open(info.path, "rb") as f:
        return offset_of(f, info, b)


@dataclass
class ChunkTask:
    """One chunk of one session: for each rank of the session, its segments; what to do with them."""

    session: int
    index: int
    lo: int  # pass numbers [lo, hi)
    hi: int
    logs: list[tuple[dict, list[str]]]  # each rank's header and files (a worker rebuilds the RankLog)
    segments: list[list[Segment]]
    exact: bool
    sample: float
    cross: bool = False  # return the cross-rank columns (a node's digest file keeps them)


# the line counter's block: one buffer read into and compared in place, which stays in the CPU's cache (16 MB
# blocks, each a new bytes object and a new mask, took four times longer over a 20 MB log: 14 ms, against 3.3)
_COUNT_BLOCK = 1 << 20


def _line_counter() -> Callable[[str, int], int]:
    """Line number at a byte offset of a file, counted once forward per file (the planner asks in order)."""
    state: dict[str, tuple[int, int]] = {}
    buf = bytearray(_COUNT_BLOCK)
    data, hits = np.frombuffer(buf, np.uint8), np.empty(_COUNT_BLOCK, dtype=bool)

    def line_at(path: str, offset: int) -> int:
        pos, lines = state.get(path, (0, 1))
        if offset < pos:
            pos, lines = 0, 1
        with open(path, "rb") as f:
            f.seek(pos)
            left = offset - pos
            while left > 0:
                got = f.readinto(memoryview(buf)[: min(left, _COUNT_BLOCK)])
                if not got:
                    break
                lines += int(np.count_nonzero(np.equal(data[:got], 10, out=hits[:got])))
                left -= got
        state[path] = (offset, lines)
        return lines

    return line_at


MIN_CHUNK_PASSES = 64  # the shortest chunk ``plan`` cuts


def _pass_range(s: Session) -> tuple[int, int]:
    """The passes [lo, hi) some log of session ``s`` holds."""
    firsts = [i.first for log in s.logs for i in infos_of(log) if i.first is not None]
    lasts = [i.last for log in s.logs for i in infos_of(log) if i.last is not None]
    return (min(firsts), max(lasts) + 1) if firsts else (1, 2)


def most_chunks(sessions: list[Session]) -> int:
    """The most chunks ``plan`` can cut the sessions into: more workers than that would only idle."""
    total = 0
    for s in sessions:
        lo, hi = _pass_range(s)
        total += -(-(hi - lo) // MIN_CHUNK_PASSES)
    return max(1, total)


def plan(s: Session, exact: bool, sample: float, cross: bool = False,
         chunk_records: Optional[int] = None, jobs: int = 1) -> Iterator[ChunkTask]:
    """The chunks of session ``s``, in pass order: as many as ``jobs`` divides, none larger than ``chunk_records``
    (so that no worker idles through the last chunk while another checks it)."""
    lo, hi = _pass_range(s)
    step = max(MIN_CHUNK_PASSES, (chunk_records or CHUNK_RECORDS) // max(1, len(s.logs)))
    chunks = -(-(hi - lo) // step)
    if jobs > 1 and chunks > 1:
        chunks = -(-chunks // jobs) * jobs
        step = max(MIN_CHUNK_PASSES, -(-(hi - lo) // chunks))
    bounds = list(range(lo, hi, step)) + [hi]
    line_at = _line_counter()
    where = [_positions(log, bounds) for log in s.logs]
    headers = [(log.header, log.files) for log in s.logs]
    for j in range(len(bounds) - 1):
        segments = []
        for log, pos in zip(s.logs, where):
            infos = infos_of(log)
            (fa, oa), (fb, ob) = pos[j], pos[j + 1]
            segs = []
            for k in range(fa, fb + 1):
                start = oa if k == fa else infos[k].body
                end = ob if k == fb else infos[k].size
                if end > start:
                    segs.append(Segment(k, infos[k].path, start, end, line_at(infos[k].path, start), end == infos[k].size))
            segments.append(segs)
        yield ChunkTask(s.index, j, bounds[j], bounds[j + 1], headers, segments, exact, sample, cross)


def window(s: Session, lo: int, hi: int) -> list[dict[int, PassRec]]:
    """Every rank's records of passes ``lo..hi`` by number (traces read a bounded window); format 2 compact records get
    the gathered rows rebuilt from every rank's own row."""
    from ..runtime.envelope import Envelope

    task = next(plan_range(s, lo, hi + 1))
    model, _, _ = _model(s.config)
    logs = [_rank_log(h, f) for h, f in task.logs]
    cols = [(parse_v2 if log.header["format"] == 2 else parse_v1)(log, model, read_segments(segs))[0]
            for log, segs in zip(logs, task.segments)]
    env = Envelope(s.config)
    maps: list[dict[int, PassRec]] = []
    # each rank's own row with its envelope: no error, the fingerprint, the stamp of a decided pass (no skip flag)
    own = [{int(n): c.own[:, i].tolist() + list(env.tail) + [env.tag_bits | (int(c.stamp[i]) if c.stamp is not None else 0)]
            for i, n in enumerate(c.number)} for c in cols]
    for log, c in zip(logs, cols):
        m = {}
        for i, number in enumerate(c.number.tolist()):
            if not lo <= number <= hi:
                continue
            rows = None
            if c.rows is None and c.recs is None and all(number in o for o in own):
                rows = []
                by_place = {lg.group_rank: o[number] for lg, o in zip(logs, own)}
                for q in range(s.config.world_size):
                    rows += list(by_place.get(q, [0] * env.n_policy + list(env.tail) + [env.tag_bits]))
            m[number] = record(c, i, rows)
        maps.append(m)
    return maps


def plan_range(s: Session, lo: int, hi: int) -> Iterator[ChunkTask]:
    """One chunk holding passes [lo, hi) of session ``s``."""
    line_at = _line_counter()
    headers = [(log.header, log.files) for log in s.logs]
    segments = []
    for log in s.logs:
        infos = infos_of(log)
        (fa, oa), (fb, ob) = _positions(log, [lo, hi])
        segs = []
        for k in range(fa, fb + 1):
            start = oa if k == fa else infos[k].body
            end = ob if k == fb else infos[k].size
            if end > start:
                segs.append(Segment(k, infos[k].path, start, end, line_at(infos[k].path, start), end == infos[k].size))
        segments.append(segs)
    yield ChunkTask(s.index, 0, lo, hi, headers, segments, True, 0.0)


# ----- one chunk, in a worker --------------------------------------------------------------------


@dataclass
class RankOut:
    """What the stitcher needs of one rank's chunk (columns), and the chunk's own findings."""

    number: np.ndarray
    allow: np.ndarray
    # each pass's output reason as an index into reason_names: a chunk's strings would be half of what a worker
    # sends back (60 bytes a pass as numpy's fixed-width text, against one)
    reason_codes: np.ndarray
    now: np.ndarray
    fi: np.ndarray
    line: np.ndarray
    counts: dict[str, np.ndarray]
    report_len: Optional[np.ndarray]
    report_sec: Optional[np.ndarray]
    first_before: Any = None
    last_after: Any = None
    reasons: Counter = field(default_factory=Counter)  # passes per output reason, counted in the worker
    findings: list = field(default_factory=list)
    fails: list = field(default_factory=list)
    sets: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    refired: int = 0
    reason_names: list = field(default_factory=list)

    @property
    def reason(self) -> np.ndarray:
        """Each pass's output reason (strings)."""
        names = np.array(self.reason_names if self.reason_names else [""])
        return names[self.reason_codes]


@dataclass
class CrossOut:
    """The cross-rank facts of a chunk: per pass of the union of the ranks' passes."""

    numbers: np.ndarray
    multi: np.ndarray
    same_state: np.ndarray
    interesting: dict[int, list]  # pass index -> [(rank place, lite record)] for passes whose rows or decisions differ
    complete: np.ndarray
    group_any: dict[str, np.ndarray]
    group_ranks: dict[str, np.ndarray]  # (ranks, passes) counting
    findings: list = field(default_factory=list)
    compared: int = 0
    mixed: int = 0
    mixed_resolved: Counter = field(default_factory=Counter)
    disagreements: int = 0
    # per rank place: where its stamps' drift from the first rank logging the pass changes (``stamp_drift``)
    drift: list = field(default_factory=list)


@dataclass
class ChunkOut:
    task: ChunkTask
    ranks: list[RankOut]
    cross: CrossOut
    cross_cols: Optional[list] = None  # per rank, with ChunkTask.cross: what a node's digest keeps


_CACHE: dict[Any, Any] = {}


def _model(config: Config) -> tuple[Model, Any, Any]:
    key = config.fingerprint()
    found = _CACHE.get(key)
    if found is None:
        from ..fsm import DelayerMachine, Step

        machine = DelayerMachine(config)
        found = _CACHE[key] = (Model(config, machine.table), machine, Step(config, machine.table))
    return found  # type: ignore[no-any-return]


def _rank_log(header: dict, files: list[str]) -> RankLog:
    log = RankLog(header, Config(**header["config"]))
    log.files = list(files)
    return log


class Lite:
    """A pass as the cross-rank comparison reads it (``checks._compare``): rows (their digest), decision, state, readings."""

    __slots__ = ("number", "rows", "decision", "before", "readings", "fi", "line", "own")

    def __init__(self, number: int, rows: Any, decision: Any, before: Any, readings: dict, fi: int, line: int,
                 own: Any = None) -> None:
        self.number, self.rows, self.decision, self.before, self.readings, self.fi, self.line = number, rows, decision, before, readings, fi, line
        self.own = own  # the rank's own policy row (its local inputs may sit there rather than in its readings)


def _py(kind_value: Any) -> Any:
    """A column entry as the Python value a format-1 line would give."""
    if isinstance(kind_value, np.bool_):
        return bool(kind_value)
    if isinstance(kind_value, np.integer):
        return int(kind_value)
    if isinstance(kind_value, np.floating):
        v = float(kind_value)
        return None if v != v else v
    if isinstance(kind_value, np.str_):
        return str(kind_value)
    return kind_value


def py_state(cols: Any, i: int) -> Any:
    return type(cols)(*(_py(c[i]) for c in cols))


def record(cols: RankCols, i: int, rows: Optional[list] = None) -> PassRec:
    """Pass ``i`` of the chunk as a record (``rows``: the gathered rows rebuilt for it, where the line has none)."""
    if cols.recs is not None:
        return cols.recs[i]  # type: ignore[no-any-return]
    rec = records(cols, np.array([i]))[0]
    return rec if rows is None else rec._replace(rows=rows)


def _values(col: np.ndarray, idx: np.ndarray) -> list:
    """``[_py(col[i]) for i in idx]`` in one conversion (the machine's sample reads a few dozen passes a chunk)."""
    vals = col[idx].tolist()
    if col.dtype.kind == "f":
        return [None if v != v else v for v in vals]
    return vals  # type: ignore[no-any-return]


def records(cols: RankCols, idx: np.ndarray) -> list[PassRec]:
    """``[record(cols, i) for i in idx]``, each column converted once for all of them."""
    if cols.recs is not None:
        return [cols.recs[i] for i in idx.tolist()]
    state_t, dec_t, next_t = type(cols.before), type(cols.decision), type(cols.decision.next_state)
    readings = {k: _values(v, idx) for k, v in cols.readings.items()}
    before = [_values(c, idx) for c in cols.before]
    nxt = [_values(c, idx) for c in cols.decision.next_state]
    outs = [_values(c, idx) for c in cols.decision[1:]]
    number, now, fi, line = (cols.number[idx].tolist(), cols.now[idx].tolist(), cols.fi[idx].tolist(),
                             cols.line[idx].tolist())
    rows = cols.rows[idx].tolist() if cols.rows is not None else [None] * len(idx)
    return [PassRec(number[j], now[j], {k: v[j] for k, v in readings.items()}, rows[j], state_t(*(c[j] for c in before)),
                    dec_t(next_t(*(c[j] for c in nxt)), *(c[j] for c in outs)), 0.0, fi[j], line[j])
            for j in range(len(idx))]


def py_views(model: Model, view: Any, idx: np.ndarray) -> list:
    """The policy's view of each pass in ``idx`` as Python values (a constant column stays the constant)."""
    cols = [_values(v, idx) if isinstance(v, np.ndarray) else None for v in view]
    return [model.policy.view_cls(*(c[j] if c is not None else v for c, v in zip(cols, view))) for j in range(len(idx))]


def _order_problem(log: RankLog, cols: RankCols) -> Optional[str]:
    num = cols.number
    if len(num) < 2 or bool((np.diff(num) > 0).all()):
        return None
    order = np.argsort(num, kind="stable")
    s = num[order]
    dup = np.flatnonzero(np.diff(s) == 0)
    if len(dup):
        a, b = order[dup[0]], order[dup[0] + 1]
        return (f"{log.where(int(cols.fi[b]), int(cols.line[b]))}: pass {int(num[b])} of rank {log.rank} (run {log.run}) is "
                f"logged twice (also at {log.where(int(cols.fi[a]), int(cols.line[a]))})")
    i = int(np.argmin(np.diff(num) > 0)) + 1
    return (f"{log.where(int(cols.fi[i]), int(cols.line[i]))}: pass {int(num[i])} comes after pass {int(num[i - 1])}; "
            "a decision log's passes are in pass order (was the file edited?)")


def check_chunk(task: ChunkTask) -> ChunkOut:
    """Everything of one chunk that needs no other chunk (see the module docstring)."""
    logs = [_rank_log(h, f) for h, f in task.logs]
    config = logs[0].config
    model, machine, step = _model(config)
    session = Session(task.session, config, logs[0].spec_hash, logs)
    ranks: list[RankOut] = []
    all_cols: list[RankCols] = []
    views = []
    rng = np.random.default_rng([task.session, task.index])
    for log, segs in zip(logs, task.segments):
        pieces = read_segments(segs)
        fmt = log.header["format"]
        cols, extra = (parse_v2 if fmt == 2 else parse_v1)(log, model, pieces)
        problem = _order_problem(log, cols)
        if problem:
            raise LogError(problem)
        n = len(cols)
        view = cols.view
        if view is None and n:
            assert cols.rows is not None, "a line that logs no view (format 1) logs every rank's row"
            view = model.view_of_rows(cols.rows)
        out = RankOut(cols.number, np.zeros(0, bool), np.zeros(0, np.int16), cols.now, cols.fi, cols.line, {}, None, None,
                      fails=extra.fails, sets=extra.sets, notes=extra.notes)
        if n:
            out.allow = np.asarray(cols.decision.output_allow, dtype=bool)
            out.reason_names, out.reason_codes = model.reason_codes(np.asarray(cols.decision.output_reason))
            codes, firsts, counts = np.unique(out.reason_codes, return_index=True, return_counts=True)
            # in the order the reasons first come (the report lists them so)
            out.reasons = Counter({out.reason_names[int(codes[i])]: int(counts[i]) for i in np.argsort(firsts)})
            out.counts = model.counts(view, cols.decision, n)
            if model.report is not None:
                out.report_len = np.asarray(getattr(cols.decision, model.report.length), dtype=np.int64)
                out.report_sec = np.asarray(getattr(cols.decision, model.report.seconds), dtype=np.float64)
            out.first_before = py_state(cols.before, 0)
            out.last_after = py_state(cols.decision.next_state, n - 1)
            _check_rank(out, session, log, cols, view, model, machine, step, task, rng)
        ranks.append(out)
        all_cols.append(cols)
        views.append(view)
    crossed = [cross_cols(model, c, v) for c, v in zip(all_cols, views)]
    compact = all(log.header.get("format") == 2 and log.header.get("mode") == MODE_COMPACT for log in logs)
    cross = cross_check(session, model, crossed, compact)
    return ChunkOut(task, ranks, cross, crossed if task.cross else None)


def _check_rank(out: RankOut, s: Session, log: RankLog, cols: RankCols, view: Any, model: Model, machine: Any, step: Any,
                task: ChunkTask, rng: Any) -> None:
    """The column path's flags, the machine on the flagged and sampled passes, continuity inside the chunk."""
    n = len(cols)
    place = log.group_rank
    flags = model.check(cols, place, view)
    flagged = np.zeros(n, dtype=bool)
    for mask in flags.values():
        flagged |= mask
    checker = PassChecker(s, log, machine, step)
    findings: list[Finding] = out.findings
    if cols.rows is not None:
        findings += _rows_checks(checker, model, log, cols)
        from ..runtime.envelope import Envelope

        env = Envelope(model.c)
        fp_ok = (cols.rows[:, env.f_fingerprint::env.row_len] == log.fingerprint).all(axis=1)
        err_ok = (cols.rows[:, env.f_error::env.row_len] == 0).all(axis=1)
        flagged |= ~(fp_ok & err_ok)
    if task.exact:
        chosen = np.ones(n, dtype=bool)
    else:
        chosen = flagged | (rng.random(n) < task.sample)
        chosen[rng.choice(n, size=min(n, MIN_SAMPLE), replace=False)] = True
    picked = np.flatnonzero(chosen)
    recs = records(cols, picked)
    views = py_views(model, cols.view, picked) if cols.view is not None else None
    owns = cols.own[:, picked].T.tolist() if cols.rows is None else None
    for j, i in enumerate(picked.tolist()):
        rec = recs[j]
        pv = checker.view(rec) if views is None else views[j]
        found = checker.check(rec, pv, None if owns is None else owns[j])
        findings += found
        if bool(found) != bool(flagged[i]):
            what = ", ".join(sorted({f.property for f in found})) or "nothing"
            col = ", ".join(sorted(k for k, m in flags.items() if m[i])) or "nothing"
            findings.append(checker.finding(CONFORMANCE, "paths-differ", rec, f"the transitions machine finds {what}, the "
                                            f"column path {col}: a bug of check-log (re-run with --exact and report it)"))
    out.refired = int(chosen.sum())
    findings += _continuity_inside(checker, model, step, cols, out.sets)


def _rows_checks(checker: PassChecker, model: Model, log: RankLog, cols: RankCols) -> list[Finding]:
    """A line with every rank's row: its digest is theirs, and the view it logged (format 2) their fold."""
    out: list[Finding] = []
    n = len(cols)
    if log.header["format"] != 2:
        return out
    assert cols.rows is not None and cols.view is not None, "the caller's line holds every rank's row; format 2 logs the view"
    digests = np.array([digest_of_bytes(r.astype("<i8").tobytes()) for r in cols.rows], dtype=np.int64)
    for i in np.flatnonzero(digests != cols.digest)[:50]:
        out.append(checker.finding(CONFORMANCE, "digest", record(cols, int(i)), f"logged digest {int(cols.digest[i])} is not "
                                   f"that of the rows it logged ({int(digests[i])})"))
    folded = model.view_of_rows(cols.rows)
    bad = np.zeros(n, dtype=bool)
    for got, want in zip(cols.view, folded):
        bad |= np.asarray(got != want).reshape(-1) if isinstance(want, np.ndarray) else np.asarray(got != want)
    for i in np.flatnonzero(bad)[:50]:
        out.append(checker.finding(CONFORMANCE, "view", record(cols, int(i)), "the view it logged is not the fold of the rows it logged"))
    return out


def _continuity_inside(checker: PassChecker, model: Model, step: Any, cols: RankCols, sets: list) -> list[Finding]:
    """Each pass after the first of the chunk starts where the previous one left (the first: the stitcher)."""
    n = len(cols)
    if n < 2:
        return []
    after, before = cols.decision.next_state, cols.before
    fin = after.control.copy()
    for src, dst in zip(model.policy.states, model.finalize_of):
        fin = np.where(after.control == src, dst, fin)
    want = [fin] + list(after[1:])
    bad = np.zeros(n - 1, dtype=bool)
    for got, w in zip(before, want):
        from .arrayops import same

        bad |= ~same(got[1:], w[:-1])
    consecutive = np.diff(cols.number) == 1
    by_pass: dict[int, list] = {}
    for x in sets:
        by_pass.setdefault(x.after_pass, []).append((x.name, x.value))
    check = bad & consecutive
    if by_pass:  # a pass followed by a setting change is re-fired whatever its columns say
        check |= consecutive & np.isin(cols.number[:-1], np.fromiter(by_pass, np.int64, len(by_pass)))
    out = []
    for j in np.flatnonzero(check):
        rec = record(cols, int(j) + 1)
        want_before = _apply_sets(step.finalize(py_state(after, int(j))), by_pass.get(int(cols.number[j])))
        if rec.before != want_before:
            out.append(checker.finding(CONFORMANCE, "continuity", rec, "starts from a state the previous pass did not "
                                       f"leave: {_state_differs(rec.before, want_before)}"))
    return out


# ----- across the ranks of a chunk ---------------------------------------------------------------


@dataclass
class CrossCols:
    """What the comparison across ranks reads of one rank's chunk; a node's digest keeps exactly this."""

    number: np.ndarray
    digest: np.ndarray
    keys: dict[str, np.ndarray]  # the decision's ``decision_key`` fields
    nexts: dict[str, np.ndarray]  # the shared fields of the state after
    befores: dict[str, np.ndarray]  # the shared fields of the state before
    readings: dict[str, np.ndarray]  # the local inputs' readings (agreement with equal arguments)
    reason: np.ndarray
    mixed: np.ndarray
    groups: dict[str, np.ndarray]  # each group monitor's counts
    own: np.ndarray
    view: Optional[tuple]
    fi: np.ndarray
    line: np.ndarray
    stamp: Optional[np.ndarray] = None  # the pass number of the rank's row's stamp (``RankCols.stamp``)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        out = {f"{prefix}number": self.number, f"{prefix}digest": self.digest, f"{prefix}reason": self.reason.astype(str),
               f"{prefix}mixed": self.mixed, f"{prefix}own": self.own, f"{prefix}fi": self.fi, f"{prefix}line": self.line}
        if self.stamp is not None:  # as its offset from the logged pass: 0 on every pass of ranks in step, deflated to ~nothing
            out[f"{prefix}stamp_offset"] = self.stamp - self.number
        for part in ("keys", "nexts", "befores", "readings", "groups"):
            for k, v in getattr(self, part).items():
                out[f"{prefix}{part}:{k}"] = np.asarray(v) if np.asarray(v).dtype.kind != "U" else np.asarray(v).astype(str)
        if self.view is not None:
            for i, v in enumerate(self.view):
                out[f"{prefix}view:{i}"] = np.asarray(v)
        return out

    @classmethod
    def from_arrays(cls, get: Callable[[str], Optional[np.ndarray]], names: list[str], prefix: str) -> "CrossCols":
        def part(name: str) -> dict[str, np.ndarray]:
            head = f"{prefix}{name}:"
            return {n[len(head):]: get(n) for n in names if n.startswith(head)}  # type: ignore[misc]

        views = sorted((int(n.rsplit(":", 1)[1]), n) for n in names if n.startswith(f"{prefix}view:"))
        return cls(get(f"{prefix}number"), get(f"{prefix}digest"), part("keys"), part("nexts"), part("befores"),  # type: ignore[arg-type]
                   part("readings"), get(f"{prefix}reason"), get(f"{prefix}mixed"), part("groups"), get(f"{prefix}own"),  # type: ignore[arg-type]
                   tuple(get(n) for _, n in views) if views else None, get(f"{prefix}fi"), get(f"{prefix}line"),  # type: ignore[arg-type]
                   get(f"{prefix}stamp_offset") + get(f"{prefix}number") if f"{prefix}stamp_offset" in names else None)  # type: ignore[operator]

    def take(self, mask: np.ndarray) -> "CrossCols":
        def cut(d: dict) -> dict:
            return {k: v[mask] for k, v in d.items()}

        return CrossCols(self.number[mask], self.digest[mask], cut(self.keys), cut(self.nexts), cut(self.befores),
                         cut(self.readings), self.reason[mask], self.mixed[mask], cut(self.groups), self.own[:, mask],
                         None if self.view is None else tuple(v[mask] if isinstance(v, np.ndarray) else v for v in self.view),
                         self.fi[mask], self.line[mask], None if self.stamp is None else self.stamp[mask])


def cross_cols(model: Model, c: RankCols, view: Any) -> CrossCols:
    p = model.policy
    n = len(c)
    counts = model.counts(view, c.decision, n) if n else {}
    local = {key for name, key in p.log.readings if name in p.local_inputs}
    logged_view = None
    if c.view is not None:
        logged_view = tuple(broadcast(v, n) for v in c.view)
    return CrossCols(
        c.number, c.digest, {k: np.asarray(getattr(c.decision, k)) for k in p.decision_key},
        {k: np.asarray(getattr(c.decision.next_state, k)) for k in p.shared}, {k: np.asarray(getattr(c.before, k)) for k in p.shared},
        {k: v for k, v in c.readings.items() if k in local}, np.asarray(c.decision.output_reason),
        counts.get("mixed", np.zeros(n, bool)), {g.id: counts.get(f"group:{g.id}", np.zeros(n, bool)) for g in model.groups},
        c.own, logged_view, c.fi, c.line, c.stamp)


class _Obj:
    """Named values, as ``checks._compare`` reads a decision and a state."""

    def __init__(self, **kw: Any) -> None:
        self.__dict__.update(kw)


def _lite(model: Model, c: CrossCols, i: int) -> Lite:
    decision = _Obj(**{k: _py(v[i]) for k, v in c.keys.items()}, next_state=_Obj(**{k: _py(v[i]) for k, v in c.nexts.items()}))
    return Lite(int(c.number[i]), int(c.digest[i]), decision, _Obj(**{k: _py(v[i]) for k, v in c.befores.items()}),
                {k: _py(v[i]) for k, v in c.readings.items()}, int(c.fi[i]), int(c.line[i]), [_py(x) for x in c.own[:, i]])


def cross_check(s: Session, model: Model, cols: list[CrossCols], compact: bool) -> CrossOut:
    """The ranks compared pass by pass; the rows rebuilt from their own rows where every rank logged the pass."""
    policy = model.policy
    numbers = np.unique(np.concatenate([c.number for c in cols])) if cols else np.zeros(0, np.int64)
    P, R = len(numbers), len(cols)
    idx = [np.searchsorted(numbers, c.number) for c in cols]
    present = np.zeros((R, P), dtype=bool)
    for r, ix in enumerate(idx):
        present[r, ix] = True

    def matrix(per_rank: list[np.ndarray]) -> np.ndarray:
        """Each rank's column (``cols``' order) as its row of an (R, P) matrix over the passes."""
        values = [np.asarray(v) for v in per_rank]
        dtype = np.result_type(*[v.dtype for v in values]) if values else np.int64
        m = np.zeros((R, P), dtype=dtype)
        for r, (ix, v) in enumerate(zip(idx, values)):
            m[r, ix] = v
        return m

    first = np.argmax(present, axis=0) if R else np.zeros(0, np.int64)

    def equal_to_first(m: np.ndarray) -> np.ndarray:
        head = m[first, np.arange(P)]
        eq = m == head
        if m.dtype.kind == "f":  # an unset optional clock on both sides
            eq |= np.isnan(m) & np.isnan(head)
        return (eq | ~present).all(axis=0)

    agree = np.ones(P, dtype=bool)
    for k in policy.decision_key:
        agree &= equal_to_first(matrix([c.keys[k] for c in cols]))
    for k in policy.shared:
        agree &= equal_to_first(matrix([c.nexts[k] for c in cols]))
    same_state = np.ones(P, dtype=bool)
    for k in policy.shared:
        same_state &= equal_to_first(matrix([c.befores[k] for c in cols]))
    rows_same = equal_to_first(matrix([c.digest for c in cols]))
    count = present.sum(axis=0)
    multi = count > 1
    out = CrossOut(numbers, multi, same_state, {}, count == s.config.world_size, {}, {})
    out.compared = int(multi.sum())
    agree_or_single = agree | ~multi
    out.disagreements = int((~agree_or_single).sum())
    mixed = np.zeros(P, dtype=bool)
    reason = np.empty(P, dtype=object)
    for r, (c, ix) in enumerate(zip(cols, idx)):
        mine = first[ix] == r
        mixed[ix[mine]] = c.mixed[mine]
        reason[ix[mine]] = c.reason[mine]
    out.mixed = int(mixed.sum())
    for p in np.flatnonzero(mixed):
        out.mixed_resolved["split" if not agree_or_single[p] else str(reason[p])] += 1
    for g in model.groups:
        counting = np.zeros((R, P), dtype=bool)
        for r, (c, ix) in enumerate(zip(cols, idx)):
            counting[r, ix] = c.groups[g.id]
        out.group_any[g.id] = np.asarray(counting.any(axis=0))
        out.group_ranks[g.id] = counting
    for p in np.flatnonzero(multi & (~agree | ~rows_same)):
        out.interesting[int(p)] = [(r, _lite(model, cols[r], int(np.searchsorted(cols[r].number, numbers[p]))))
                                   for r in range(R) if present[r, p]]
    if all(c.stamp is not None for c in cols):
        out.drift = stamp_drift(s, cols, idx, present, first, numbers)
    if compact:
        out.findings += _rebuilt_checks(s, model, cols, present, numbers)
    return out


def stamp_drift(s: Session, cols: list[CrossCols], idx: list[np.ndarray], present: np.ndarray, first: np.ndarray,
                numbers: np.ndarray) -> list[list[tuple]]:
    """Per rank place, where the pass number its row's stamp carried stops being that of the first rank logging the
    same pass (or comes back to it): [(drift, pass, first rank's place, its stamp, this rank's, where both logged it)].

    A pass decided by every rank carries one stamp on every row, so ranks that logged pass ``n`` from one collective
    log equal stamps; a drift is one rank's pass ``n`` taken from another collective than its peer's pass ``n``
    (``desync``'s same-pass check)."""
    R, P = present.shape
    m = np.zeros((R, P), dtype=np.int64)
    for r, (c, ix) in enumerate(zip(cols, idx)):
        m[r, ix] = c.stamp  # type: ignore[assignment]
    head = m[first, np.arange(P)]
    drift = m - head
    out: list[list[tuple]] = []
    for r in range(R):
        pos = np.flatnonzero(present[r])
        d = drift[r, pos]
        change = np.ones(len(d), dtype=bool)
        change[1:] = d[1:] != d[:-1]
        events = []
        for p, dv in zip(pos[change].tolist(), d[change].tolist()):
            b = int(first[p])
            i, j = int(np.searchsorted(cols[r].number, numbers[p])), int(np.searchsorted(cols[b].number, numbers[p]))
            where = [s.logs[r].where(int(cols[r].fi[i]), int(cols[r].line[i])), s.logs[b].where(int(cols[b].fi[j]), int(cols[b].line[j]))]
            events.append((int(dv), int(numbers[p]), b, int(head[p]), int(m[r, p]), where))
        out.append(events)
    return out


def _rebuilt_checks(s: Session, model: Model, cols: list[CrossCols], present: np.ndarray, numbers: np.ndarray) -> list[Finding]:
    """Compact logs of every rank of the gather: the rows rebuilt from the ranks' own rows hash to the digest every rank
    logged, and fold to the view every rank logged."""
    logs = s.logs
    if len(logs) != s.config.world_size or any(log.group_rank is None for log in logs):
        return []
    from ..runtime.envelope import Envelope

    env = Envelope(s.config)
    complete = np.flatnonzero(present.all(axis=0))
    if not len(complete):
        return []
    P = len(complete)
    flat = np.empty((P, s.config.world_size, env.row_len), dtype=np.int64)
    flat[:, :, env.f_error:env.f_stamp] = np.array(env.tail, dtype=np.int64)
    pos = [np.searchsorted(c.number, numbers[complete]) for c in cols]
    for r, (log, c) in enumerate(zip(logs, cols)):
        flat[:, log.group_rank, : env.n_policy] = c.own[:, pos[r]].T
        # a decided pass's stamp: the policy's tag and the pass number the rank logged (no skip flag)
        flat[:, log.group_rank, env.f_stamp] = env.tag_bits | (c.stamp[pos[r]] if c.stamp is not None else 0)
    flat2 = flat.reshape(P, -1)
    data = np.ascontiguousarray(flat2, dtype="<i8").data.cast("B")  # each pass's rows hashed in place, not copied
    size = flat2.shape[1] * 8
    digests = np.array([digest_of_bytes(data[i * size:(i + 1) * size]) for i in range(P)], dtype=np.int64)
    folded = model.view_of_rows(flat2)
    out: list[Finding] = []
    bad_digest = np.zeros((len(logs), P), dtype=bool)
    bad_view = np.zeros((len(logs), P), dtype=bool)
    for r, c in enumerate(cols):
        bad_digest[r] = c.digest[pos[r]] != digests
        if c.view is not None:
            for got, want in zip(c.view, folded):
                bad_view[r] |= np.asarray(got[pos[r]] != want)
    for what, bad, text in (("digest", bad_digest, "logged a digest that is not that of the rows rebuilt from every rank's "
                                                    "own row (it saw other rows than the ranks sent)"),
                            ("view", bad_view, "logged a view that is not the fold of the rows rebuilt from every rank's own row")):
        for p in np.flatnonzero(bad.any(axis=0)):
            ranks = [logs[r].rank for r in np.flatnonzero(bad[:, p])]
            number = int(numbers[complete[p]])
            out.append(Finding(CONFORMANCE, what, s.index, number, ranks, f"pass {number}: rank{'s' if len(ranks) > 1 else ''} "
                               f"{', '.join(map(str, ranks))} {text}",
                               [logs[r].where(int(cols[r].fi[pos[r][p]]), int(cols[r].line[pos[r][p]])) for r in np.flatnonzero(bad[:, p])]))
    return out


# ----- stitching, in chunk order -------------------------------------------------------------------


@dataclass
class _RunState:
    run: int = 0
    start: Optional[int] = None  # first pass of the run
    finding: Optional[Finding] = None


@dataclass
class _RankState:
    last: Optional[int] = None
    last_after: Any = None
    hold: int = 0
    hold_first: Optional[tuple[int, float, bool]] = None  # (number, now, mixed) of the hold run's first pass
    hold_known: bool = False
    runs: dict[str, _RunState] = field(default_factory=dict)
    sets: dict[int, list] = field(default_factory=dict)


class Stitcher:
    """One session's chunks, in order, into the report: what crosses chunk boundaries."""

    def __init__(self, report: Report, s: Session, model: Model, step: Any, plot: bool = False) -> None:
        self.report, self.s, self.model, self.step = report, s, model, step
        self.c = s.config
        self.policy = self.c.policy
        self.limits = model.limits()
        self.ranks = [_RankState() for _ in s.logs]
        for log in s.logs:
            report.stats[(s.index, log.rank)] = LogStats()
        self.prev_number: Optional[int] = None
        self.split_since: Optional[tuple[int, str]] = None  # ``checks._compare``'s split: (pass, property)
        # each group monitor's run carried into the next chunk: (its length, its first pass)
        self.group: dict[str, tuple[int, Optional[int]]] = {g.id: (0, None) for g in model.groups}
        self.stats = report.session_stats[s.index] = {"passes": 0, "compared": 0, "mixed": 0, "mixed_resolved": Counter(),
                                                      "disagreements": 0}
        self.plot = plot
        # --plot: per rank, (first pass, one int8 per pass from it: 0 not logged, 1 held, 2 + i allowed by reason i)
        self.timeline: list[list[tuple[int, np.ndarray]]] = [[] for _ in s.logs]
        self.timeline_reasons: list[str] = []  # the i of those cells
        self.refired = 0
        self.drift = [0] * len(s.logs)  # each rank's stamp drift from its peers, carried across chunks

    def add(self, out: ChunkOut) -> None:
        for r, ro in enumerate(out.ranks):
            self._rank(r, ro)
        self._cross(out.cross)

    # -- one rank
    def _finding(self, r: int, category: str, prop: str, number: int, where: str, message: str, first: Optional[int] = None) -> Finding:
        log = self.s.logs[r]
        f = Finding(category, prop, self.s.index, number, [log.rank], f"rank {log.rank} pass {number}: {message}", [where], first,
                    _known(self.c.profile, prop, self.policy))
        self.report.add(f)
        return f

    def _rank(self, r: int, ro: RankOut) -> None:
        log, st, rs, model = self.s.logs[r], self.report.stats[(self.s.index, self.s.logs[r].rank)], self.ranks[r], self.model
        for f in ro.findings:
            self.report.add(f)
        log.fails.extend(ro.fails)
        log.notes.extend(ro.notes)
        st.failed.update(f.error for f in ro.fails)
        st.sets += len(ro.sets)
        for x in ro.sets:
            rs.sets.setdefault(x.after_pass, []).append((x.name, x.value))
        self.refired += ro.refired
        n = len(ro.number)
        if not n:
            return
        num = ro.number
        where = lambda i: log.where(int(ro.fi[i]), int(ro.line[i]))  # noqa: E731
        if rs.last is not None and num[0] <= rs.last:
            raise LogError(f"{where(0)}: pass {int(num[0])} of rank {log.rank} (run {log.run}) comes after pass {rs.last} "
                           "in its log: logged twice or out of order")
        st.passes += n
        if st.first is None:
            st.first = int(num[0])
        st.last = int(num[-1])
        cont = rs.last is not None and num[0] == rs.last + 1
        starts = np.zeros(n, dtype=bool)
        starts[1:] = np.diff(num) != 1
        starts[0] = not cont
        # -- continuity of the chunk's first pass, gaps
        first_rec_where = where(0)
        if cont:
            assert rs.last is not None, "cont: the chunk goes on from the rank's last pass"
            want = _apply_sets(self.step.finalize(rs.last_after), rs.sets.get(rs.last))
            if ro.first_before != want:
                self._finding(r, CONFORMANCE, "continuity", int(num[0]), first_rec_where, "starts from a state the previous pass "
                              f"did not leave: {_state_differs(ro.first_before, want)}")
        elif rs.last is None and num[0] == 1:
            want = _apply_sets(self.policy.init, rs.sets.get(0))
            if ro.first_before != want:
                self._finding(r, CONFORMANCE, "continuity", int(num[0]), first_rec_where, "the first pass does not start from a "
                              f"fresh delayer's state: {_state_differs(ro.first_before, want)}")
        for i in np.flatnonzero(starts):
            prev = int(num[i - 1]) if i > 0 else rs.last
            if prev is not None:
                st.gaps.append((prev + 1, int(num[i]) - 1))
        # -- counts of the summary
        st.reasons.update(ro.reasons)
        mixed = ro.counts.get("mixed", np.zeros(n, bool))
        st.mixed += int(mixed.sum())
        if self.plot:
            self._timeline(r, num, ro.allow, ro.reason)
        # -- the run bounds
        for mon in model.runs:
            self._run_bound(r, mon, ro, starts, cont, where)
        # -- the hold runs: delay-run histogram, cut runs, waits, the run report
        self._holds(r, ro, starts, cont, mixed, where, st)
        rs.last, rs.last_after = int(num[-1]), ro.last_after

    def _timeline(self, r: int, num: np.ndarray, allow: np.ndarray, reason: np.ndarray) -> None:
        """The chunk's cells of rank ``r``'s timeline: one byte per pass (``self.timeline``)."""
        first = int(num.min())
        codes = np.ones(len(num), dtype=np.int8)
        allowed = np.asarray(allow, dtype=bool)
        if allowed.any():
            names, which = np.unique(np.asarray(reason)[allowed], return_inverse=True)
            known = self.timeline_reasons
            known.extend(str(name) for name in names if str(name) not in known)
            codes[allowed] = np.array([2 + known.index(str(name)) for name in names], dtype=np.int8)[which]
        cells = np.zeros(int(num.max()) - first + 1, dtype=np.int8)
        cells[num - first] = codes
        self.timeline[r].append((first, cells))

    def _run_bound(self, r: int, mon: Any, ro: RankOut, starts: np.ndarray, cont: bool, where: Callable[[int], str]) -> None:
        state = self.ranks[r].runs.setdefault(mon.id, _RunState())
        if not cont:
            state.run, state.start, state.finding = 0, None, None
        counts = ro.counts[f"run:{mon.id}"]
        num = ro.number
        limit = self.limits[mon.id]
        run = run_lengths(counts, starts, state.run)
        n = len(num)

        def start_of(i: int) -> int:
            j = i - int(run[i]) + 1
            return int(num[j]) if j >= 0 else int(state.start)  # type: ignore[arg-type]

        # the open finding of an earlier chunk: updated while its run goes on
        ends = np.flatnonzero(~counts | starts)  # where runs end (a pass that does not count; a gap before it)
        if state.finding is not None:
            stop = int(ends[0]) if len(ends) else n
            last = stop - 1
            if last >= 0 and mon.log_text_done is not None:
                self._done(state.finding, mon, int(run[last]), int(num[last]), limit, r)
            if stop < n:
                state.finding = None
        for i in np.flatnonzero(run == limit + 1):
            start = start_of(int(i))
            f = self._finding(r, INVARIANT, mon.id, int(num[i]), where(int(i)),
                              mon.log_text.format(run=limit + 1, start=start, end=int(num[i]), limit=limit), start)
            later = ends[ends > i]
            stop = int(later[0]) if len(later) else n
            last = stop - 1
            if last > i and mon.log_text_done is not None:
                self._done(f, mon, int(run[last]), int(num[last]), limit, r)
            state.finding = f if stop == n else None
        if n:
            state.run = int(run[-1])
            if state.run:
                state.start = start_of(n - 1)
            else:
                state.start = None

    def _done(self, f: Finding, mon: Any, run: int, end: int, limit: int, r: int) -> None:
        f.message = f"rank {self.s.logs[r].rank} pass {f.pass_number}: " + mon.log_text_done.format(
            run=run, start=f.first_pass, end=end, limit=limit)

    def _holds(self, r: int, ro: RankOut, starts: np.ndarray, cont: bool, mixed: np.ndarray, where: Callable[[int], str],
               st: LogStats) -> None:
        """Runs of passes that do not allow (``hold``): the delay-run histogram, cut runs, waits, the run report."""
        rs, num, allow, n = self.ranks[r], ro.number, ro.allow, len(ro.number)
        if not cont:  # a gap before the chunk, or the log's start
            if rs.hold and rs.last is not None:
                st.cut_runs += 1
            rs.hold, rs.hold_first = 0, None
            rs.hold_known = rs.last is None and int(num[0]) == 1
        held = run_lengths(~allow, starts, rs.hold)  # the hold run up to and including each pass
        before = np.zeros(n, dtype=np.int64)  # the hold run just before each pass
        before[1:] = held[:-1]
        before[0] = rs.hold
        before[starts] = 0
        inner = np.flatnonzero(starts[1:]) + 1  # gaps inside the chunk: each cuts the hold run it ends
        st.cut_runs += int((held[inner - 1] > 0).sum())
        seg = np.cumsum(starts)  # segment id of each pass (0: the one continuing from the previous chunk)
        prior = np.cumsum(allow) - allow  # releases before each pass, in the chunk
        seg_start_index = np.zeros(int(seg.max()) + 1 if n else 1, dtype=np.int64)
        seg_start_index[seg[starts]] = np.flatnonzero(starts)
        first_seg_known = rs.hold_known
        rel = np.flatnonzero(allow)
        hold = before[rel]
        known = (prior[rel] - prior[seg_start_index[seg[rel]]]) > 0
        known |= (seg[rel] == seg[0]) & first_seg_known
        hist = np.bincount(hold[known & (hold > 0)])
        for length in np.flatnonzero(hist):
            st.delay_runs[int(length)] += int(hist[length])
        st.cut_runs += int((~known & (hold > 0)).sum())
        # each release's hold run's first pass: in the chunk, or the carried one
        j = rel - hold
        inside = j >= 0
        jj = np.where(inside, j, 0)
        first_now = np.where(inside, ro.now[jj], rs.hold_first[1] if rs.hold_first else np.nan)
        first_mixed = np.where(inside, mixed[jj], rs.hold_first[2] if rs.hold_first else False)
        mon = self.model.report
        if mon is not None and ro.report_len is not None and ro.report_sec is not None:
            want = np.where(hold > 0, ro.now[rel] - first_now, 0.0)
            bad = known & ((ro.report_len[rel] != hold) | (ro.report_sec[rel] != want))
            for q in np.flatnonzero(bad):
                i, h = int(rel[q]), int(hold[q])
                first = ((int(num[j[q]]) if inside[q] else rs.hold_first[0]), float(first_now[q])) if h else None  # type: ignore[index]
                got_length, got_seconds, want_seconds = int(ro.report_len[i]), float(ro.report_sec[i]), float(want[q])
                self._finding(r, INVARIANT, mon.id, int(num[i]), where(i),
                              f"releases after {h} consecutive {mon.noun}"
                              + (f" (since pass {first[0]}, clock {first[1]!r})" if h and first else "")
                              + f" but reports {mon.length}={got_length} {mon.seconds}={got_seconds!r} "
                              f"(expected {h} and {want_seconds!r})", first[0] if h and first else None)
            waits = ro.report_sec[rel][ro.report_len[rel] > 0]
            if len(waits):
                st.waits.append(waits.astype(np.float64))
        ended = (hold > 0) & first_mixed.astype(bool)
        for code, k in Counter(ro.reason_codes[rel][ended].tolist()).items():
            st.mixed_waits_ended[ro.reason_names[code]] += k
        # the carry: the hold run at the end, its first pass, whether its start is known
        rs.hold = int(held[-1])
        if rs.hold:
            k = n - rs.hold
            if k >= 0:
                rs.hold_first = (int(num[k]), float(ro.now[k]), bool(mixed[k]))
        else:
            rs.hold_first = None
        last_seg = int(seg[-1])
        if (seg[rel] == last_seg).any():
            rs.hold_known = True
        else:
            rs.hold_known = first_seg_known if last_seg == int(seg[0]) else False

    # -- across ranks
    def _cross(self, co: CrossOut) -> None:
        """The cross-rank facts of a chunk into the report; its findings tagged ``scope = "cross"`` (a node's digest leaves
        them to the merge) and counted in ``report.cross_counts``."""
        with self._cross_scope():
            self._cross_facts(co)

    @contextlib.contextmanager
    def _cross_scope(self) -> Iterator[None]:
        """Within it, every finding added to the report is tagged ``scope = "cross"`` and counted in ``report.cross_counts``."""
        report = self.report
        add = report.add

        def tagged(f: Finding) -> None:
            f.scope = "cross"  # type: ignore[attr-defined]
            report.cross_counts[(f.category, f.property)] += 1
            add(f)

        report.add = tagged  # type: ignore[method-assign]
        try:
            yield
        finally:
            del report.add

    def _cross_facts(self, co: CrossOut) -> None:
        s, report, stats = self.s, self.report, self.stats
        for f in co.findings:
            report.add(f)
        stats["passes"] += len(co.numbers)
        stats["compared"] += co.compared
        stats["mixed"] += co.mixed
        stats["mixed_resolved"].update(co.mixed_resolved)
        stats["disagreements"] += co.disagreements
        report.checked["agreement"] += co.compared
        for r, events in enumerate(co.drift):
            for d, number, b, base_stamp, stamp, where in events:
                if d != self.drift[r]:
                    self.drift[r] = d
                    if d:
                        report.add(drift_finding(s, r, b, number, base_stamp, stamp, where))
        # agreement findings, with where the ranks split
        multi = np.flatnonzero(co.multi)
        same = co.same_state
        last = -1
        for p in sorted(co.interesting):
            between = multi[(multi > last) & (multi < p)]
            if len(between) and same[between].any():
                self.split_since = None
            _, self.split_since = _compare(report, s, int(co.numbers[p]), co.interesting[p], self.split_since)
            last = p
        between = multi[multi > last]
        if len(between) and same[between].any():
            self.split_since = None
        # the group run bounds: every rank of the gather, on consecutive passes
        num = co.numbers
        n = len(num)
        if not n:
            return
        starts = np.zeros(n, dtype=bool)
        starts[1:] = np.diff(num) != 1
        starts[0] = self.prev_number is not None and num[0] != self.prev_number + 1
        for g in self.model.groups:
            run0, start0 = self.group[g.id]
            if starts[0]:
                run0, start0 = 0, None
            counts = co.complete & co.group_any[g.id]
            run = run_lengths(counts, starts, run0)
            window = self.limits[g.id]
            for at in np.flatnonzero(run == window):
                j = int(at) - window + 1
                first = int(num[j]) if j >= 0 else start0
                counting = sorted(s.logs[r].rank for r in np.flatnonzero(co.group_ranks[g.id][:, at]))
                report.add(Finding(INVARIANT, g.id, s.index, int(num[at]), s.ranks,
                                   f"passes {first}..{int(num[at])} ({window} = {g.window_text} in a row) "
                                   f"each have {g.some} (on pass {int(num[at])}: rank {', '.join(map(str, counting))}): "
                                   "the group never prefills together", [], first, _known(self.c.profile, g.id, self.policy)))
            last_run = int(run[-1])
            if last_run:
                j = n - last_run
                start0 = int(num[j]) if j >= 0 else start0
            else:
                start0 = None
            self.group[g.id] = (last_run, start0)
        self.prev_number = int(num[-1])

    def session_checks(self) -> None:
        """The desync checks over the whole run: the runtime's refused collectives (from the fail lines, one finding
        with every rank that logged one) and every rank logged; both across ranks, so a node's digest leaves them to
        the merge (it keeps the fail records they read), and on a node (``report.node``) the ranks it did not log are
        not judged at all (``desync.every_rank_logged``)."""
        from .desync import desync_errors, every_rank_logged

        with self._cross_scope():
            desync_errors(self.report, self.s)
            every_rank_logged(self.report, self.s)

    def finish(self) -> None:
        for r, log in enumerate(self.s.logs):
            st = self.report.stats[(self.s.index, log.rank)]
            if self.ranks[r].hold:
                st.open_run = self.ranks[r].hold
            log.fails.sort(key=lambda x: x.number)
            log.sets.sort(key=lambda x: x.after_pass)
            self.report.checked["conformance"] += st.passes


# ----- the whole check ---------------------------------------------------------------------------


def start_pool(jobs: int) -> Any:
    """``jobs`` worker processes, or ``None`` for one, started once the logs are scanned and each session's model
    built (``workers.start_pool``): forked, they start with the checker imported and the models built, at no cost
    (each worker built its own before: 65 ms of the first chunk); a fork server imports the checker once."""
    if jobs <= 1:
        return None
    return start_workers(jobs, preload=[__name__, __name__.rsplit(".", 2)[0] + ".fsm"])


def run_chunks(tasks: Iterator[ChunkTask], pool: Any, jobs: int) -> Iterator[ChunkOut]:
    """Each task's result, in task order; with a ``pool`` of ``jobs`` workers, at most ``2 * jobs`` chunks in flight."""
    if pool is None:
        for t in tasks:
            yield check_chunk(t)
        return
    from collections import deque

    pending: deque = deque()
    for t in tasks:
        pending.append(pool.apply_async(check_chunk, (t,)))
        if len(pending) >= 2 * jobs:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


def check_stream(paths: list[str], *, own_profile: bool = False, exact: bool = False, sample: float = DEFAULT_SAMPLE,
                 jobs: Optional[int] = None, plot: bool = False, progress: Optional[Callable[[str], None]] = None,
                 keep: Optional[Callable[[Session, ChunkOut], None]] = None) -> tuple[Report, list[str], dict]:
    """(report, notes on empty files, timelines for the plot) of every log in ``paths``.

    ``keep(session, chunk)`` takes each chunk's result with its cross-rank columns, as a node's digest keeps them
    (``check-log --digest``): the report is then one node's part of the run (``Report.node``)."""
    _CACHE.clear()  # models are built from the policy as it is now (a test may have patched a guard or a monitor)
    # a pool pays for itself only on logs of several chunks, sized by the files' bytes
    files = expand(paths)
    jobs = jobs or (cores() if sum(p.stat().st_size for p in files) > 4 * CHUNK_RECORDS * POOL_BYTES else 1)
    logs, empty = scan_files(files)
    sessions, notes = build_sessions(logs, own_profile)
    for s in sessions:  # built (and what they import, imported) before forked workers copy this process
        _model(s.config)
    jobs = min(jobs, most_chunks(sessions))  # --jobs 3000 on a log of three chunks starts three workers, not 3000
    pool = start_pool(jobs)
    with ended(pool) if pool is not None else contextlib.nullcontext():  # every worker reaped before the result is out
        return _check_sessions(logs, empty, sessions, notes, exact, sample, pool, jobs, plot, progress, keep)


def _check_sessions(logs: list[RankLog], empty: list[str], sessions: list[Session], notes: list[str], exact: bool,
                    sample: float, pool: Any, jobs: int, plot: bool, progress: Optional[Callable[[str], None]],
                    keep: Optional[Callable[[Session, ChunkOut], None]]) -> tuple[Report, list[str], dict]:
    report = Report(sessions, notes=list(notes), node=keep is not None)  # keep: a node's digest is written
    timelines: dict = {}
    total = sum(max(0, (i.last or 0) - (i.first or 0) + 1) for log in logs for i in infos_of(log))
    done = 0
    for s in sessions:
        model, _, step = _model(s.config)
        stitch = Stitcher(report, s, model, step, plot)
        for out in run_chunks(plan(s, exact, sample, cross=keep is not None, jobs=jobs), pool, jobs):
            stitch.add(out)
            if keep is not None:
                keep(s, out)
            done += sum(len(r.number) for r in out.ranks)
            if progress is not None:
                progress(f"{done}/{total} pass records")
        stitch.finish()
        stitch.session_checks()
        report.refired += stitch.refired
        report.window = window  # type: ignore[attr-defined]
        timelines[s.index] = (stitch.timeline_reasons, stitch.timeline)
    report.findings.sort(key=lambda f: (f.session, f.pass_number, f.category, f.property))
    divergence_is_no_known_defect(report)
    return report, empty, timelines
