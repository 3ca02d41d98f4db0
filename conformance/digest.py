"""Logs spread over nodes: each node's digest of its own logs, and the merge that checks across nodes without the logs.

A rank's log lives on its node, so everything about one rank is checked there
(``check-log PATH... --digest FILE``): conformance, its own row, the pass rules,
the run bounds and reports, the summary's counts. What needs every rank of a
gather is left to the merge: agreement (decisions and gathered-rows digests
compared pass by pass), the group run bounds, for compact logs the rows
rebuilt from every rank's own row (their digest and their fold against what
each rank logged), and the desync checks: every rank logged, the pass stamps
compared pass by pass (ranks on two nodes whose pass numbers drift apart), and
each collective the runtime refused, one finding with every rank that logged
it. A node's digest keeps, per chunk and rank, exactly what that comparison
reads (``stream.CrossCols``: a few numbers per pass record, deflated; the
stamp as its offset from the pass number, 0 while the ranks are in step) and
each rank's fail records (``FAIL_FIELDS``), beside the node's per-rank findings
and counts, as a zip of ``.npy`` arrays and one ``meta.json``, written chunk by
chunk and renamed into place when whole.

``check-log --merge DIGEST...`` groups the digests' runs (same configuration,
spec, gather and run order), checks that no rank comes twice, and runs the same
cross-rank checks and stitching as a single check-log does; so a merge of the
digests of logs split over nodes reports what one check-log over all the logs
reports. ``node_digest(paths, out)`` is the per-node step as a plain function,
for any engine that maps a function over nodes (Ray, Dask).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import zipfile
import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import numpy as np

from ..files import OutputError, Outputs, write_failed
from ..spec.config import Config
from ..spec.schema import KIND_HEADER, MODE_COMPACT
from .checks import Finding, LogStats, Report, Session, divergence_is_no_known_defect
from .desync import REFUSED
from .logread import DIGEST_TOOL, ZIP_MAGIC, FailRec, LogError, RankLog, _is_count, _show, _type_name, expand, refuse_empty
from .stream import CHUNK_RECORDS, MIN_CHUNK_PASSES, ChunkOut, CrossCols, Stitcher, _model, cross_check

# 2: the fail records with their place and, for refused collectives, their message; the stamp as an offset
DIGEST_FORMAT = 2
TOOL = DIGEST_TOOL  # meta.json's "tool" (logread recognises a digest given as a log by it)
# A rank's fail record in its digest: a list of these FailRec fields (not the state before: the merge reads none).
# The message is kept for a collective the runtime refused (``desync.desync_errors`` groups the ranks by it) and
# empty for the other errors, so a rank failing every pass adds a few numbers per pass, not its messages.
FAIL_FIELDS = tuple(k for k in FailRec._fields if k != "before")


def _fail_row(f: FailRec) -> list[Any]:
    return [getattr(f, k) if k != "message" or f.error == REFUSED else "" for k in FAIL_FIELDS]


def _fail_of(row: list[Any]) -> FailRec:
    return FailRec(**dict(zip(FAIL_FIELDS, row)), before=None)


# A rank's stats in meta.json: every LogStats field but the waits (an array member of their own); a Finding's, but
# its session (the merge numbers the sessions), its pass number under the key "pass".
_STATS_SKIP = ("waits",)
_FINDING_SKIP = ("session",)
_FINDING_KEYS = {"pass_number": "pass"}


def _stats_dict(st: LogStats) -> dict[str, Any]:
    """JSON writes the Counters as objects (their int keys as strings) and the gaps' tuples as arrays."""
    return {f.name: getattr(st, f.name) for f in dataclasses.fields(st) if f.name not in _STATS_SKIP}


def _stats_of(d: dict[str, Any], waits: np.ndarray) -> LogStats:
    return LogStats(**{k: STATS.fields[k].load(v) for k, v in d.items()}, waits=[waits])


def _finding_dict(f: Finding) -> dict[str, Any]:
    return {_FINDING_KEYS.get(x.name, x.name): getattr(f, x.name) for x in dataclasses.fields(f) if x.name not in _FINDING_SKIP}


def _finding_of(d: dict[str, Any], session: int) -> Finding:
    back = {v: k for k, v in _FINDING_KEYS.items()}
    return Finding(session=session, **{back.get(k, k): v for k, v in d.items()})


# ----- meta.json's layout: declared once, checked whole when a digest is opened --------------------------------
#
# The writer writes the objects above (the stats and findings from their dataclasses' fields) and the literal objects
# of ``DigestWriter._close``; ``META`` says what each place holds, and a digest whose meta.json differs anywhere, a
# field missing or one it does not declare included, is refused with the place named. So a field the writer gains
# and the layout lacks fails every test that merges a digest.


class _Damage(Exception):
    """Place ``where`` of meta.json does not hold what the layout says (``why``)."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where, self.why = where, why


def _at(where: str, key: Any) -> str:
    return f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)


class _Kind:
    """What one place of meta.json holds; ``load`` makes of a checked value what the merge reads."""

    def check(self, v: Any, where: str) -> None:
        raise NotImplementedError

    def load(self, v: Any) -> Any:
        return v


@dataclass(frozen=True)
class _Leaf(_Kind):
    wanted: str
    ok: Callable[[Any], bool]
    convert: Optional[Callable[[Any], Any]] = None

    def check(self, v: Any, where: str) -> None:
        if not self.ok(v):
            raise _Damage(where, f"expected {self.wanted}, got {_show(v)}")

    def load(self, v: Any) -> Any:
        return v if self.convert is None else self.convert(v)


@dataclass(frozen=True)
class _Optional(_Kind):
    kind: _Kind

    def check(self, v: Any, where: str) -> None:
        if v is not None:
            self.kind.check(v, where)


@dataclass(frozen=True)
class _Array(_Kind):
    """A list of ``item``, at least ``least`` long."""

    item: _Kind
    least: int = 0

    def check(self, v: Any, where: str) -> None:
        if not isinstance(v, list):
            raise _Damage(where, f"expected an array, got {_type_name(v)}")
        if len(v) < self.least:
            raise _Damage(where, f"expected at least {self.least} element(s), got {len(v)}")
        for i, x in enumerate(v):
            self.item.check(x, _at(where, i))


@dataclass(frozen=True)
class _Row(_Kind):
    """A list of fixed length: one kind per element; loaded as a tuple."""

    items: tuple[_Kind, ...]

    def check(self, v: Any, where: str) -> None:
        if not isinstance(v, list) or len(v) != len(self.items):
            raise _Damage(where, f"expected an array of {len(self.items)}, got {_show(v)}")
        for i, (kind, x) in enumerate(zip(self.items, v)):
            kind.check(x, _at(where, i))

    def load(self, v: Any) -> Any:
        return tuple(v)


@dataclass(frozen=True)
class _Counts(_Kind):
    """An object of counts by name (a ``Counter``; an entry left out is a count of 0), its names of kind ``key``."""

    key: _Leaf

    def check(self, v: Any, where: str) -> None:
        if not isinstance(v, dict):
            raise _Damage(where, f"expected an object, got {_type_name(v)}")
        for k, n in v.items():
            entry = f"{where}[{json.dumps(k)}]"
            if not self.key.ok(k):
                raise _Damage(entry, f"expected the name of {self.key.wanted}")
            COUNT.check(n, entry)

    def load(self, v: Any) -> Any:
        return Counter({self.key.load(k): n for k, n in v.items()})


@dataclass(frozen=True)
class _Object(_Kind):
    """An object of exactly these fields; ``rule(value)``: a place below it and why, for what no one field says."""

    fields: dict[str, _Kind]
    rule: Optional[Callable[[dict[str, Any]], Optional[tuple[str, str]]]] = None

    def check(self, v: Any, where: str) -> None:
        if not isinstance(v, dict):
            raise _Damage(where, f"expected an object, got {_type_name(v)}")
        for k, kind in self.fields.items():
            if k not in v:
                raise _Damage(_at(where, k), "missing")
            kind.check(v[k], _at(where, k))
        extra = [k for k in v if k not in self.fields]
        if extra:
            raise _Damage(_at(where, extra[0]), "not a field of a digest's meta.json")
        broken = self.rule(v) if self.rule is not None else None
        if broken is not None:
            raise _Damage(_at(where, broken[0]) if broken[0] else where, broken[1])


class _Header(_Kind):
    """A log's header, as the node's log held it: by the log reader's rules (``chunks.read_header``), and naming the
    configuration its fingerprint says (check-log refuses a log whose configuration it does not rebuild exactly)."""

    def check(self, v: Any, where: str) -> None:
        from .checks import fingerprint_problem
        from .chunks import read_header

        try:
            header, config = read_header(v)
        except ValueError as exc:
            raise _Damage(where, str(exc)) from None
        problem = fingerprint_problem(header, config)
        if problem is not None:
            raise _Damage(_at(where, "fingerprint"), problem)


COUNT = _Leaf("an integer >= 0", _is_count)
TEXT = _Leaf("a string", lambda v: isinstance(v, str))
FLAG = _Leaf("true or false", lambda v: type(v) is bool)
NAME = _Leaf("a reason or an error", lambda k: True)
RUN_LENGTH = _Leaf("a run length (an integer >= 1)", lambda k: k.isascii() and k.isdigit() and int(k) >= 1, int)
PROPERTY = _Leaf("a category/property", lambda k: "/" in k)

STATS = _Object({
    "passes": COUNT, "first": _Optional(COUNT), "last": _Optional(COUNT), "gaps": _Array(_Row((COUNT, COUNT))),
    "failed": _Counts(NAME), "sets": COUNT, "reasons": _Counts(NAME), "delay_runs": _Counts(RUN_LENGTH),
    "cut_runs": COUNT, "open_run": COUNT, "mixed": COUNT, "mixed_waits_ended": _Counts(NAME),
})
FINDING = _Object({
    "category": TEXT, "property": TEXT, "pass": COUNT, "ranks": _Array(COUNT), "message": TEXT, "where": _Array(TEXT),
    "first_pass": _Optional(COUNT), "known_defect": FLAG,
})
_FAIL_KINDS = {"number": COUNT, "error": TEXT, "message": TEXT, "fi": COUNT, "line": COUNT}
FAIL = _Row(tuple(_FAIL_KINDS[k] for k in FAIL_FIELDS))


def _fails_in_files(rank: dict[str, Any]) -> Optional[tuple[str, str]]:
    """A fail record's place is an index into its rank's files."""
    fi = FAIL_FIELDS.index("fi")
    for i, row in enumerate(rank["fails"]):
        if row[fi] >= len(rank["files"]):
            return f"fails[{i}]", f"file {row[fi]} of a rank of {len(rank['files'])} file(s)"
    return None


def _one_run(session: dict[str, Any]) -> Optional[tuple[str, str]]:
    """A session's ranks are of one run: one configuration, spec and gather (the key the merge groups them by), each
    rank once."""
    ranks = session["ranks"]
    seen: set[int] = set()
    for r, rank in enumerate(ranks):
        if _key(rank) != _key(ranks[0]):
            return f"ranks[{r}].header", "not of the configuration, spec or gather of the session's first rank"
        if rank["header"]["rank"] in seen:
            return f"ranks[{r}].header.rank", f"rank {rank['header']['rank']} twice in one session"
        seen.add(rank["header"]["rank"])
    return None


RANK = _Object({"header": _Header(), "files": _Array(TEXT, least=1), "notes": _Array(TEXT), "stats": STATS,
                "fails": _Array(FAIL)}, rule=_fails_in_files)
SESSION = _Object({"ranks": _Array(RANK, least=1), "chunks": _Array(_Object({"lo": COUNT, "hi": COUNT})),
                   "findings": _Array(FINDING)}, rule=_one_run)
META = _Object({"tool": TEXT, "format": COUNT, "spec_hash": TEXT, "sessions": _Array(SESSION),
                "counts": _Counts(PROPERTY), "notes": _Array(TEXT), "checked": COUNT, "refired": COUNT})


class DigestWriter:
    """A node's digest, written as check-log goes (``keep`` of ``stream.check_stream``) and closed with its report.

    ``name``: the digest as a failed write names it (the command's option and the file the user gave; else ``path``):
    a full disk's ``[Errno 28] No space left on device`` alone names no file. ``path`` is the temporary that its
    caller (``files.Outputs``, as ``check-log --digest`` and ``node_digest`` use it) renames into place with its
    other outputs, keeping a replaced file's mode and a link's target, so it is written as it is: one way of
    writing a digest, not a rename of its own beside it.
    """

    def __init__(self, path: "str | os.PathLike[str]", name: str) -> None:
        self.tmp = Path(path)
        self.name = name
        try:
            self.zip = zipfile.ZipFile(self.tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1)
        except OSError as exc:  # named as the caller named it, not as the temporary beside it
            raise LogError(f"{self.name}: cannot write the digest there: {exc.strerror or exc}") from None
        self.chunks: dict[int, list[dict[str, Any]]] = {}

    def discard(self) -> None:
        """The check failed: no digest, and no temporary left beside where it would have gone. Closing the archive
        writes its index, which fails again on a full disk: the temporary goes all the same."""
        try:
            with contextlib.suppress(OSError):
                self.zip.close()
        finally:
            self.tmp.unlink(missing_ok=True)

    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """A failed write (a full disk) as the error that names the digest, not the temporary written."""
        try:
            yield
        except OutputError:
            raise
        except OSError as exc:
            raise write_failed(self.name, exc) from None

    def _array(self, name: str, a: np.ndarray) -> None:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.ascontiguousarray(a), allow_pickle=False)
        self.zip.writestr(name, buf.getvalue())

    def add(self, s: Session, out: ChunkOut) -> None:
        assert out.cross_cols is not None
        j = len(self.chunks.setdefault(s.index, []))
        for r, cc in enumerate(out.cross_cols):
            buf = io.BytesIO()
            np.savez_compressed(buf, **cc.arrays(""))
            with self._writing():
                self.zip.writestr(zipfile.ZipInfo(f"s{s.index}/c{j}/r{r}.npz"), buf.getvalue(), compress_type=zipfile.ZIP_STORED)
        self.chunks[s.index].append({"lo": out.task.lo, "hi": out.task.hi})

    def close(self, report: Report, data: dict[str, Any]) -> None:
        try:
            with self._writing():
                self._close(report, data)
        except BaseException:
            self.discard()
            raise

    def _close(self, report: Report, data: dict[str, Any]) -> None:
        sessions = []
        for s in report.sessions:
            ranks = []
            for r, log in enumerate(s.logs):
                st = report.stats[(s.index, log.rank)]
                waits = [np.asarray(w, dtype=np.float64).reshape(-1) for w in st.waits]
                self._array(f"s{s.index}/waits/r{r}", np.concatenate(waits) if waits else np.zeros(0))
                ranks.append({"header": log.header, "files": log.files, "notes": log.notes, "stats": _stats_dict(st),
                              "fails": [_fail_row(f) for f in log.fails]})
            findings = [f for f in report.findings if f.session == s.index and getattr(f, "scope", "rank") == "rank"]
            sessions.append({"ranks": ranks, "chunks": self.chunks.get(s.index, []),
                             "findings": [_finding_dict(f) for f in findings]})
        rank_counts = {f"{c}/{p}": n - report.cross_counts.get((c, p), 0) for (c, p), n in report.counts.items()}
        meta = {"tool": TOOL, "format": DIGEST_FORMAT, "spec_hash": data["spec_hash"], "sessions": sessions,
                "counts": {k: v for k, v in rank_counts.items() if v}, "notes": data["notes"],
                "checked": report.checked["conformance"], "refired": report.refired}
        self.zip.writestr("meta.json", json.dumps(meta))
        self.zip.close()


def node_digest(paths: list[str], out: "str | os.PathLike[str]", **options: Any) -> dict[str, Any]:
    """The per-node step of a fleet check: check-log over this node's logs, writing its digest to ``out``.

    A plain function (paths in, a file and the node's JSON report out), so any
    engine that maps functions over nodes can run it: ``ray.get([ray.remote(node_digest).options(...)...])``
    or ``dask.distributed.Client.map``; then ``check-log --merge`` the digests.
    ``out`` is written as ``check-log --digest`` writes it (``files.Outputs``, errors naming it ``out``): never over
    one of the logs, a file replaced keeping its mode, a symlink's target replaced, nothing left after a failure.
    """
    from . import check_logs

    if isinstance(paths, (str, os.PathLike)):  # a str is a sequence too: its characters were read as paths
        raise TypeError(f"paths: a list of this node's log files or folders, got {type(paths).__name__} {str(paths)!r}: "
                        f"pass [{str(paths)!r}]")
    target = os.fspath(out)
    with Outputs([*paths, *expand(paths)]).file("out", target).writing() as staged:
        writer = DigestWriter(staged.path("out"), name=f"out {target}")
        _, data, _ = check_logs(paths, digest=writer, **options)
    return data


# ----- the merge ----------------------------------------------------------------------------


TAKES = "--merge takes the digest files that each node's check-log --digest wrote"
# What reading a member of a damaged archive raises: a bad header or CRC, a deflated stream cut or corrupted.
_DAMAGED = (OSError, zipfile.BadZipFile, EOFError, zlib.error)


def _cut_digest(path: str) -> Optional[str]:
    """The line for a digest cut short (a copy that stopped, a full disk): its archive's index, at the end, is gone,
    but its first member, at the start, is one a digest writes (``s0/...`` or ``meta.json``)."""
    try:
        with open(path, "rb") as f:
            head = f.read(30 + 256)
            size = os.fstat(f.fileno()).st_size
    except OSError:
        return None
    if head[:4] != ZIP_MAGIC or len(head) < 30:
        return None
    name = head[30:30 + int.from_bytes(head[26:28], "little")]
    if name != b"meta.json" and not (name[:1] == b"s" and name[1:].split(b"/")[0].isdigit() and b"/" in name):
        return None
    return (f"{path}: a check-log digest cut short or damaged ({size} bytes, the archive's index at its end is "
            "missing): copy the node's digest again, or write it again with check-log --digest")


def _not_a_digest(path: str) -> str:
    """Why a file that is no zip archive is no digest; a decision log given to --merge is called one."""
    cut = _cut_digest(path)
    if cut is not None:
        return cut
    try:
        with open(path, "rb") as f:
            first = json.loads(f.readline(2**20))
    except (OSError, ValueError, RecursionError):
        first = None
    if isinstance(first, dict) and first.get("kind") == KIND_HEADER:
        return f"{path}: a decision log, not a check-log digest: check logs without --merge; {TAKES}"
    return f"{path}: not a check-log digest: {TAKES}"


class _Digest:
    """One node's digest, checked whole when opened (every member's CRC, meta.json's layout, every array it names),
    so a damaged or truncated copy is one line naming the file, not a failure half-way through the merge."""

    def __init__(self, path: str) -> None:
        self.path = path
        if Path(path).is_dir():
            raise LogError(f"{path}: is a folder: {TAKES}")
        try:
            self.zip = zipfile.ZipFile(path)
        except FileNotFoundError:
            raise LogError(f"{path}: no such file: {TAKES}") from None
        except OSError as exc:
            raise LogError(f"{path}: cannot open it: {exc.strerror or exc}") from None
        except (zipfile.BadZipFile, EOFError, ValueError):
            raise LogError(_not_a_digest(path)) from None
        try:
            self.meta = json.loads(self.zip.read("meta.json"))
        except KeyError:
            raise LogError(_cut_digest(path) or f"{path}: not a check-log digest (a zip archive without a digest's "
                           f"meta.json): {TAKES}") from None
        except _DAMAGED as exc:
            raise LogError(f"{path}: a damaged check-log digest (meta.json: {exc}): write the node's digest again") from None
        except ValueError:  # JSONDecodeError, UnicodeDecodeError
            raise LogError(f"{path}: not a check-log digest (its meta.json is not JSON): {TAKES}") from None
        if not isinstance(self.meta, dict):
            raise LogError(f"{path}: not a check-log digest (its meta.json is not a digest's): {TAKES}")
        if self.meta.get("tool") != TOOL:
            raise LogError(f"{path}: not a check-log digest (meta.json tool: expected {TOOL!r}, got "
                           f"{_show(self.meta['tool']) if 'tool' in self.meta else 'none'}): {TAKES}")
        fmt = self.meta.get("format")
        if _is_count(fmt) and fmt != DIGEST_FORMAT:
            raise LogError(f"{path}: a check-log digest of format {fmt}, this build merges format "
                           f"{DIGEST_FORMAT}: write the node's digest again with this build's check-log --digest")
        try:
            META.check(self.meta, "")
        except _Damage as exc:
            raise LogError(f"{path}: a damaged check-log digest (meta.json {exc.where}: {exc.why}): write the node's "
                           "digest again") from None
        self.names = set(self.zip.namelist())
        try:
            bad = self.zip.testzip()
        except _DAMAGED as exc:
            raise LogError(f"{path}: a damaged check-log digest ({type(exc).__name__}: {exc}): write the node's digest "
                           "again") from None
        if bad is not None:
            raise LogError(f"{path}: a damaged check-log digest ({bad} fails its CRC check): write the node's digest again")
        missing = [name for name in self._named() if name not in self.names]
        if missing:
            raise LogError(f"{path}: a damaged check-log digest ({missing[0]} is missing, {len(missing)} in all): write "
                           "the node's digest again")

    def _named(self) -> list[str]:
        """Every member meta.json names (its layout checked: ``META``)."""
        names = []
        for i, s in enumerate(self.meta["sessions"]):
            for r in range(len(s["ranks"])):
                names.append(f"s{i}/waits/r{r}")
                names += [f"s{i}/c{j}/r{r}.npz" for j in range(len(s["chunks"]))]
        return names

    def read(self, name: str) -> Any:
        """A member's arrays (an ``.npz``) or array, a member that is not one being a damaged digest."""
        try:
            data = io.BytesIO(self.zip.read(name))
            if name.endswith(".npz"):
                return np.load(data, allow_pickle=False)
            return np.lib.format.read_array(data, allow_pickle=False)
        except (*_DAMAGED, KeyError, ValueError) as exc:
            raise LogError(f"{self.path}: a damaged check-log digest ({name}: {exc}): write the node's digest "
                           "again") from None


def _key(rank: dict[str, Any]) -> tuple:
    h = rank["header"]
    return (h["fingerprint"], h["spec_hash"], tuple(h["group_ranks"] or ()))


def merge_digests(paths: list[str], jobs: Optional[int] = None) -> tuple[Report, dict[str, Any]]:
    """(report, JSON data) of the digests of several nodes, as one check-log over all their logs would give."""
    from .summary import summary_data

    refuse_empty(paths, "a digest file")
    digests = [_Digest(p) for p in paths]
    specs = {d.meta["spec_hash"] for d in digests}
    if len(specs) > 1:
        raise LogError(f"the digests were written by builds of different specs ({', '.join(sorted(specs))}): merge digests of one build")
    # the runs of every digest, grouped: same configuration, spec and gather; then by start, as check-log orders runs
    groups: dict[tuple, list[list[tuple[_Digest, int, int]]]] = {}
    for d in digests:
        by_key: dict[tuple, list[int]] = {}
        for i, s in enumerate(d.meta["sessions"]):
            by_key.setdefault(_key(s["ranks"][0]), []).append(i)
        for key, idxs in by_key.items():
            runs = groups.setdefault(key, [])
            idxs.sort(key=lambda i: min(r["header"]["started"] for r in d.meta["sessions"][i]["ranks"]))
            for n, i in enumerate(idxs):
                while len(runs) <= n:
                    runs.append([])
                runs[n] += [(d, i, r) for r in range(len(d.meta["sessions"][i]["ranks"]))]
    sessions: list[Session] = []
    members: list[list[tuple[_Digest, int, int]]] = []
    for runs in groups.values():
        for run in runs:
            seen: dict[int, str] = {}
            for d, i, r in run:
                rank = d.meta["sessions"][i]["ranks"][r]["header"]["rank"]
                if rank in seen:
                    raise LogError(f"rank {rank} is in two digests ({seen[rank]} and {d.path}): give each node's digest once")
                seen[rank] = d.path
            run.sort(key=lambda m: (m[0].meta["sessions"][m[1]]["ranks"][m[2]]["header"]["group_rank"] or 0,
                                    m[0].meta["sessions"][m[1]]["ranks"][m[2]]["header"]["rank"]))
            logs = []
            for d, i, r in run:
                info = d.meta["sessions"][i]["ranks"][r]
                log = RankLog(info["header"], Config(**info["header"]["config"]))
                log.files, log.notes = list(info["files"]), list(info["notes"])
                log.fails = [_fail_of(row) for row in info["fails"]]
                logs.append(log)
            sessions.append(Session(len(sessions), logs[0].config, logs[0].spec_hash, logs))
            members.append(run)
    report = Report(sessions)
    report.notes += [n for d in digests for n in d.meta["notes"]] + _configurations_note(groups)
    for s, run in zip(sessions, members):
        model, _, step = _model(s.config)
        stitch = Stitcher(report, s, model, step)
        for (d, i, r), log in zip(run, s.logs):
            info = d.meta["sessions"][i]["ranks"][r]
            report.stats[(s.index, log.rank)] = _stats_of(info["stats"], d.read(f"s{i}/waits/r{r}"))
        for d, i in {(d, i) for d, i, _ in run}:
            report.findings += [_finding_of(f, s.index) for f in d.meta["sessions"][i]["findings"]]
        compact = all(log.header.get("format") == 2 and log.header.get("mode") == MODE_COMPACT for log in s.logs)
        for lo, hi in _ranges(run):
            cols = [_load(d, i, r, lo, hi) for d, i, r in run]
            stitch._cross(cross_check(s, model, cols, compact))
        stitch.session_checks()
        report.checked["conformance"] += sum(report.stats[(s.index, log.rank)].passes for log in s.logs)
    for d in digests:
        for key, n in d.meta["counts"].items():
            c, p = key.split("/", 1)
            report.counts[(c, p)] += n
    report.findings.sort(key=lambda f: (f.session, f.pass_number, f.category, f.property))
    divergence_is_no_known_defect(report)  # a node's divergence unmarks an agreement finding seen only across nodes
    data = summary_data(report, [])
    return report, data


def _configurations_note(groups: dict[tuple, list[list[tuple[_Digest, int, int]]]]) -> list[str]:
    """A note when the digests hold several configurations or gather groups, each named with its digests.

    One check-log over the logs checks several configurations each against its own only when they ran one after
    another (a restart with a new configuration) and refuses them at once (the logs of different deployments); a
    digest keeps no clock of a run's end to tell the two, so the merge checks each run against its own and says so,
    where it merged a world of 4 ranks with one of 2 without a word."""
    if len(groups) < 2:
        return []
    heads = [(d.meta["sessions"][i]["ranks"][r]["header"], list(dict.fromkeys(d.path for run in runs for d, _, _ in run)))
             for runs in groups.values() for d, i, r in runs[0][:1]]
    configs = [h["config"] for h, _ in heads]
    differ = [k for k in dict.fromkeys(k for c in configs for k in c) if len({json.dumps(c.get(k)) for c in configs}) > 1]
    gathers = len({tuple(h["group_ranks"] or ()) for h, _ in heads}) > 1

    def shown(h: dict[str, Any]) -> str:
        parts = [f"world {h['world_size']}", *(f"{k}={h['config'].get(k)}" for k in differ)]
        if gathers:
            parts.append(f"gather ranks {', '.join(map(str, h['group_ranks']))}" if h["group_ranks"] else "the whole world")
        return ", ".join(parts)

    what = "configurations" if differ else "gather groups"
    each = "; ".join(f"{shown(h)}: " + ", ".join(paths) for h, paths in heads)
    return [f"the digests hold {len(heads)} {what} ({each}): "
            "each run is checked against its own, as one check-log does for a restart with a new configuration; if "
            "these are the digests of different deployments, merge each deployment's digests on their own"]


def _ranges(run: list[tuple[_Digest, int, int]]) -> list[tuple[int, int]]:
    chunks = [c for d, i in {(d, i) for d, i, _ in run} for c in d.meta["sessions"][i]["chunks"]]
    if not chunks:
        return []
    lo, hi = min(c["lo"] for c in chunks), max(c["hi"] for c in chunks)
    step = max(MIN_CHUNK_PASSES, CHUNK_RECORDS // max(1, len(run)))
    return [(a, min(a + step, hi)) for a in range(lo, hi, step)]


def _load(d: _Digest, i: int, r: int, lo: int, hi: int) -> CrossCols:
    """Rank ``r`` of session ``i`` of digest ``d``: its columns for passes [lo, hi)."""
    parts = []
    for j, c in enumerate(d.meta["sessions"][i]["chunks"]):
        if c["hi"] <= lo or c["lo"] >= hi:
            continue
        parts.append(_chunk(d, i, j, r))
        parts[-1] = parts[-1].take((parts[-1].number >= lo) & (parts[-1].number < hi))
    if not parts:
        empty = _chunk(d, i, 0, r)
        return empty.take(np.zeros(len(empty.number), dtype=bool))
    return _concat(parts)


def _chunk(d: _Digest, i: int, j: int, r: int) -> CrossCols:
    npz = d.read(f"s{i}/c{j}/r{r}.npz")
    return CrossCols.from_arrays(npz.__getitem__, list(npz.files), "")


def _concat(parts: list[CrossCols]) -> CrossCols:
    if len(parts) == 1:
        return parts[0]

    def cat(get: Any) -> np.ndarray:
        return np.concatenate([get(p) for p in parts])

    def dcat(name: str) -> dict:
        return {k: np.concatenate([getattr(p, name)[k] for p in parts]) for k in getattr(parts[0], name)}

    def logged_view(p: CrossCols) -> tuple:
        assert p.view is not None, "a rank's chunks are of one run, whose files share its header's format: all log the view or none"
        return p.view

    view = None if parts[0].view is None else tuple(np.concatenate([logged_view(p)[i] for p in parts])
                                                    for i in range(len(parts[0].view)))
    return CrossCols(cat(lambda p: p.number), cat(lambda p: p.digest), dcat("keys"), dcat("nexts"), dcat("befores"),
                     dcat("readings"), cat(lambda p: p.reason), cat(lambda p: p.mixed), dcat("groups"),
                     np.concatenate([p.own for p in parts], axis=1), view, cat(lambda p: p.fi), cat(lambda p: p.line))
