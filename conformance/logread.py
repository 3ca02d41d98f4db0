"""Reading decision logs: files and folders into one record list per rank and run.

What is tolerated and what is not (``LogError`` carries ``FILE:LINE`` and what is wrong):

* a last line cut short (a crash mid-write) is skipped and noted; any other
  line that is not JSON, or not a well-formed header / pass / fail / set line,
  stops the read. A file whose only line is cut short has no complete header:
  it is skipped and noted (its rank counts as unlogged) when that line is the
  start of a header as the runtime writes one (a rank that crashed, or whose
  disk filled, while its header was written), and refused otherwise: bytes
  that do not start like a header are no decision log, whatever crashed;
* a check-log digest, a trace or a report given as a log is called what it is;
* a run's files (``rankN.jsonl``, ``rankN.jsonl.1`` ...) are joined by the run id
  in their headers and ordered by pass number; a run whose first files were
  rotated away starts where its oldest remaining file does (noted);
* the same pass twice in one run, a line of another rank, or a line whose
  profile, spec hash or fingerprint differ from its file's header are errors.

The format itself is ``runtime.decision_log``'s; nothing here imports torch.
"""

from __future__ import annotations

import json
import math
import os
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

from ..files import empty_name
from ..runtime.envelope import Envelope
from ..runtime.reduce import envelope_for
from ..spec.config import Config
from ..spec.policy import ALL_GATHER
from ..spec.errors import ConfigError
from ..spec.fields import BOOL, CONTROL, COUNT, OPT_SECONDS, REASON, SECONDS, TEXT, USAGE
from ..spec.schema import HEADER_KEYS, KIND_FAIL, KIND_HEADER, KIND_PASS, KIND_SET, LOG_FORMATS_READ, TRACE_TOP_KEYS, decision_keys, state_keys

LOG_NAME = re.compile(r".*\.jsonl(\.\d+)?$")
_NUM = (int, float)
_INTLIKE = {int, bool}


class LogError(ValueError):
    """Input that cannot be checked; the message says where (``FILE:LINE``) and what is wrong."""


class PassRec(NamedTuple):
    """One successful pass of one rank, as logged (``decision.next_state`` is the state after).

    ``readings`` are the rank's logged readings, by key (the policy's ``LogSchema``).
    """

    number: int
    now: float
    readings: dict
    rows: Optional[list]  # the gathered rows, concatenated in rank order; None where the line has none (format 2 compact)
    before: Any
    decision: Any
    wall: float
    fi: int  # index of the file in ``RankLog.files``
    line: int


class FailRec(NamedTuple):
    number: int
    error: str
    message: str
    before: Any
    fi: int
    line: int


class SetRec(NamedTuple):
    after_pass: int
    name: str  # the state variable set
    value: bool
    fi: int
    line: int


@dataclass
class RankLog:
    """Everything one rank logged in one run (one delayer's life), across its rotated files."""

    header: dict[str, Any]
    config: Config
    files: list[str] = field(default_factory=list)
    parts: list[int] = field(default_factory=list)
    passes: list[PassRec] = field(default_factory=list)
    fails: list[FailRec] = field(default_factory=list)
    sets: list[SetRec] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    flat_len: int = field(init=False)  # values in a pass's gathered rows

    def __post_init__(self) -> None:
        self.schema = LineSchema.of(self.config)
        self.flat_len = self.config.policy.received_rows(self.config) * self.schema.row_len

    @property
    def rank(self) -> int:
        return self.header["rank"]

    @property
    def group_rank(self) -> Optional[int]:
        return self.header["group_rank"]

    @property
    def run(self) -> str:
        return self.header["run"]

    @property
    def fingerprint(self) -> int:
        return self.header["fingerprint"]

    @property
    def spec_hash(self) -> str:
        return self.header["spec_hash"]

    @property
    def profile(self) -> str:
        return self.header["profile"]

    @property
    def started(self) -> float:
        return self.header["started"]

    def where(self, fi: int, line: int) -> str:
        return f"{self.files[fi]}:{line}"

    def label(self) -> str:
        return f"rank {self.rank}"


# ----- one line ----------------------------------------------------------------------------


def _type_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "an array"
    if isinstance(v, dict):
        return "an object"
    return type(v).__name__


def _show(v: Any, limit: int = 50) -> str:
    text = json.dumps(v)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_count(v: Any) -> bool:
    return type(v) is int and v >= 0


def _is_real(v: Any) -> bool:
    return type(v) in _NUM and math.isfinite(v)


def _kind_ok(kind: str, v: Any, names: frozenset) -> bool:
    if kind == BOOL:
        return type(v) is bool
    if kind == COUNT:
        return _is_count(v)
    if kind in (SECONDS, USAGE):
        return _is_real(v)
    if kind == OPT_SECONDS:
        return v is None or _is_real(v)
    return v in names  # CONTROL, REASON, TEXT: one of the names


def _kind_wanted(kind: str, names: frozenset) -> str:
    return {
        BOOL: "true or false", COUNT: "an integer >= 0", SECONDS: "a number", USAGE: "a number",
        OPT_SECONDS: "null or a number",
    }.get(kind) or "one of " + ", ".join(sorted(repr(n) if n == "" else n for n in names))


class LineSchema:
    """What a pass line of one policy holds, by name: its state and decision objects, its readings."""

    _cache: dict[str, "LineSchema"] = {}

    def __init__(self, policy: Any, row_len: int) -> None:
        self.policy = policy
        self.row_len = row_len
        self.state_keys = state_keys(policy)
        self.state_kinds = (CONTROL,) + tuple(f.kind for f in policy.state_fields)
        self.decision_keys = decision_keys(policy)
        self.decision_kinds = tuple(f.kind for f in policy.decision_fields)
        self.readings = policy.log.readings
        by_name = {f.name: f for f in policy.inputs}
        self.reading_kinds = tuple(by_name[name].kind for name, _ in self.readings)
        self.names = {CONTROL: frozenset(policy.states), REASON: frozenset(policy.reasons), TEXT: None}
        self.state_cls, self.decision_cls = policy.state_cls, policy.decision_cls

    @classmethod
    def of(cls, config: Config) -> "LineSchema":
        policy = config.policy
        found = cls._cache.get(policy.name)
        if found is None:
            found = cls._cache[policy.name] = cls(policy, envelope_for(config).row_len)
        return found

    def _ok(self, kind: str, v: Any) -> bool:
        if kind == TEXT:
            return isinstance(v, str)
        return _kind_ok(kind, v, self.names.get(kind) or frozenset())

    def state_problem(self, o: Any, name: str) -> Optional[str]:
        if not isinstance(o, dict):
            return f"field '{name}' expected an object, got {_type_name(o)}"
        for key in self.state_keys:
            if key not in o:
                return f"field '{name}' lacks '{key}'"
        for key, kind in zip(self.state_keys, self.state_kinds):
            if not self._ok(kind, o[key]):
                return f"field '{name}.{key}' expected {_kind_wanted(kind, self.names.get(kind) or frozenset())}, got {_show(o[key])}"
        return None

    def state(self, o: dict[str, Any]) -> Any:
        return self.state_cls(*(o[k] for k in self.state_keys))

    def decision_problem(self, d: Any) -> Optional[str]:
        if not isinstance(d, dict):
            return f"field 'decision' expected an object, got {_type_name(d)}"
        for key in self.decision_keys:
            if key not in d:
                return f"field 'decision' lacks '{key}'"
        for key, kind in zip(self.decision_keys, self.decision_kinds):
            if not self._ok(kind, d[key]):
                return f"field 'decision.{key}' expected {_kind_wanted(kind, self.names.get(kind) or frozenset())}, got {_show(d[key])}"
        return None

    def decision(self, d: dict[str, Any], after: Any) -> Any:
        return self.decision_cls(after, *(d[k] for k in self.decision_keys))

    def readings_problem(self, o: dict[str, Any]) -> Optional[str]:
        for (_, key), kind in zip(self.readings, self.reading_kinds):
            if not _kind_ok(kind, o[key], frozenset()):
                return f"field '{key}' expected {_kind_wanted(kind, frozenset())}, got {_show(o[key])}"
        return None

    def _quick(self) -> Any:
        """``valid``, generated from the kinds: one expression per pass, as a hand-written check would be."""
        def test(kind: str, x: str) -> str:
            if kind == BOOL:
                return f"type({x}) is bool"
            if kind == COUNT:
                return f"type({x}) is int and {x} >= 0"
            if kind in (SECONDS, USAGE):
                return f"type({x}) in _NUM and _finite({x})"
            if kind == OPT_SECONDS:
                return f"({x} is None or (type({x}) in _NUM and _finite({x})))"
            if kind == TEXT:
                return f"type({x}) is str"
            return f"{x} in _names_{kind}"

        parts = [test(k, f"b[{i}]") for i, k in enumerate(self.state_kinds)]
        parts += [test(k, f"a[{i}]") for i, k in enumerate(self.state_kinds)]
        parts += [test(k, f"d[{i + 1}]") for i, k in enumerate(self.decision_kinds)]
        parts += [test(k, f"r[{key!r}]") for (_, key), k in zip(self.readings, self.reading_kinds)]
        source = "def valid(b, d, r):\n    a = d[0]\n    return " + " and ".join(f"({p})" for p in parts) + "\n"
        namespace = {"_NUM": _NUM, "_finite": math.isfinite, f"_names_{CONTROL}": self.names[CONTROL],
                     f"_names_{REASON}": self.names[REASON]}
        exec(compile(source, "<prefill_delayer.conformance.logread>", "exec"), namespace)
        return namespace["valid"]

    def valid(self, before: Any, dec: Any, readings: dict) -> bool:
        """The quick check of a parsed pass: every state, decision and reading of its kind."""
        quick = self.__dict__.get("_valid")
        if quick is None:
            quick = self.__dict__["_valid"] = self._quick()
        return bool(quick(before, dec, readings))


def _pass_problem(o: dict[str, Any], log: RankLog) -> Optional[str]:
    """The first problem of a pass line (run only once the quick checks failed, to say what is wrong)."""
    schema = log.schema
    for key in ("pass", "rank", "wall", "now", *(k for _, k in schema.readings), "rows", "before", "decision", "after",
                "profile", "spec_hash", "fingerprint"):
        if key not in o:
            return f"a pass line without field '{key}'"
    if type(o["pass"]) is not int or o["pass"] < 1:
        return f"field 'pass' expected an integer >= 1, got {_show(o['pass'])}"
    for key in ("wall", "now"):
        if not _is_real(o[key]):
            return f"field '{key}' expected a number, got {_show(o[key])}"
    problem = schema.readings_problem(o)
    if problem:
        return problem
    rows, n = o["rows"], log.config.policy.received_rows(log.config)  # every rank's row, or one reduced row
    if not isinstance(rows, list) or len(rows) != n * schema.row_len or not set(map(type, rows)) <= _INTLIKE:
        got = f"{len(rows)} entries" if isinstance(rows, list) else _type_name(rows)
        return f"field 'rows' expected {n * schema.row_len} integers ({n} ranks of {schema.row_len}), got {got}"
    for name in ("before", "after"):
        problem = schema.state_problem(o[name], name)
        if problem:
            return problem
    problem = schema.decision_problem(o["decision"])
    if problem:
        return problem
    for key, want in (("rank", log.rank), ("profile", log.profile), ("spec_hash", log.spec_hash),
                      ("fingerprint", log.fingerprint)):
        if o[key] != want:
            return f"field '{key}' is {_show(o[key])} but the file's header says {_show(want)}"
    return None


def parse_pass(o: dict[str, Any], log: RankLog, fi: int, line: int) -> PassRec:
    """A pass line as a record; ``ValueError`` with what is wrong when it is malformed."""
    schema = log.schema
    try:
        rows = o["rows"]
        before = schema.state(o["before"])
        dec = schema.decision(o["decision"], schema.state(o["after"]))
        readings = {key: o[key] for _, key in schema.readings}
        rec = PassRec(o["pass"], o["now"], readings, rows, before, dec, o["wall"], fi, line)
        n, now, wall = rec.number, rec.now, rec.wall
        if (
            type(n) is int and n >= 1
            and type(now) in _NUM and type(wall) in _NUM and math.isfinite(now)
            and type(rows) is list and len(rows) == log.flat_len and set(map(type, rows)) <= _INTLIKE
            and o["rank"] == log.rank and o["fingerprint"] == log.fingerprint
            and o["spec_hash"] == log.spec_hash and o["profile"] == log.profile
            and schema.valid(before, dec, readings)
        ):
            return rec
    except (KeyError, TypeError, IndexError):
        pass
    raise ValueError(_pass_problem(o, log) or "a malformed pass line")


def parse_header(o: dict[str, Any]) -> tuple[dict[str, Any], Config]:
    """A header line's fields and the configuration it records; ``ValueError`` when malformed."""
    missing = [k for k in HEADER_KEYS if k not in o]
    if missing:
        raise ValueError(f"a header without field{'s' if len(missing) > 1 else ''} {', '.join(repr(k) for k in missing)}")
    if o["format"] not in LOG_FORMATS_READ:
        raise ValueError(f"decision log format {_show(o['format'])}; this build reads format "
                         f"{', '.join(map(str, LOG_FORMATS_READ))}")
    for key in ("rank", "world_size", "fingerprint", "part"):
        if not _is_count(o[key]):
            raise ValueError(f"field '{key}' expected an integer >= 0, got {_show(o[key])}")
    for key in ("profile", "spec_hash", "run"):
        if not isinstance(o[key], str) or not o[key]:
            raise ValueError(f"field '{key}' expected a non-empty string, got {_show(o[key])}")
    if not _is_real(o["started"]):
        raise ValueError(f"field 'started' expected a number, got {_show(o['started'])}")
    if not isinstance(o["config"], dict):
        raise ValueError(f"field 'config' expected an object, got {_type_name(o['config'])}")
    try:
        config = Config(**o["config"])  # the profile it records picks the policy
    except TypeError as exc:
        raise ValueError(f"this build cannot read its configuration ({str(exc).replace('__init__() ', '')})") from None
    except ConfigError as exc:
        raise ValueError(f"its configuration is invalid in this build: {exc}") from None
    if config.world_size != o["world_size"]:
        raise ValueError(f"world_size {o['world_size']} but its configuration has {config.world_size} ranks in the gather")
    if config.policy.collective != ALL_GATHER:  # a reduced row holds no rank's own row to re-fire it from
        raise ValueError(f"a log of {config.policy.title}, whose collective is an {config.policy.collective}: check-log "
                         "reads logs of all-gather policies only (each line records the reduced row, not the rank's own)")
    fields = list(Envelope(config).row_fields)
    if o.get("row_fields", fields) != fields:
        raise ValueError(f"its rows hold {_show(o['row_fields'], 200)} but this build's hold {_show(fields, 200)}: "
                         "written by another build of the runtime; check it with the build that wrote it")
    gr = o["group_rank"]
    if gr is not None and not (_is_count(gr) and gr < config.world_size):
        raise ValueError(f"field 'group_rank' expected null or an integer in [0, {config.world_size}), got {_show(gr)}")
    ranks = o["group_ranks"]
    if ranks is not None and not (isinstance(ranks, list) and len(ranks) == config.world_size and all(_is_count(r) for r in ranks)):
        raise ValueError(f"field 'group_ranks' expected null or {config.world_size} ranks, got {_show(ranks)}")
    return o, config


def _parse_fail(o: dict[str, Any], log: RankLog) -> tuple[int, str, str, Any]:
    for key in ("pass", "error", "message", "before"):
        if key not in o:
            raise ValueError(f"a fail line without field '{key}'")
    if type(o["pass"]) is not int or o["pass"] < 1:
        raise ValueError(f"field 'pass' expected an integer >= 1, got {_show(o['pass'])}")
    if not isinstance(o["error"], str) or not isinstance(o["message"], str):
        raise ValueError("fields 'error' and 'message' expected strings")
    problem = log.schema.state_problem(o["before"], "before")
    if problem:
        raise ValueError(problem)
    return o["pass"], o["error"], o["message"], log.schema.state(o["before"])


def _parse_set(o: dict[str, Any], log: RankLog) -> tuple[int, str, bool]:
    if not _is_count(o.get("after_pass")):
        raise ValueError(f"field 'after_pass' expected an integer >= 0, got {_show(o.get('after_pass'))}")
    flags = log.config.policy.log.set_flags
    names = [k for k in flags if k in o]
    if len(names) != 1:
        raise ValueError(f"a set line sets one of {', '.join(flags) or 'no variable'}, got {sorted(set(o) - {'kind', 'rank', 'after_pass', 'wall'})}")
    name = names[0]
    if type(o[name]) is not bool:
        raise ValueError(f"field '{name}' expected true or false, got {_show(o[name])}")
    return o["after_pass"], name, o[name]


# ----- files -------------------------------------------------------------------------------


def refuse_empty(paths: Sequence[str], what: str) -> None:
    """An empty path, before any path is read: ``Path("")`` is the current folder, whose logs were checked unasked.
    Refused as an output option's empty name is; ``what`` is what a ``PATH`` names."""
    if any(os.fspath(p) == "" for p in paths):
        raise LogError(empty_name("PATH", what))


def expand(paths: Sequence[str]) -> list[Path]:
    """The log files named by ``paths``: files as given, folders' ``*.jsonl`` and ``*.jsonl.N``."""
    refuse_empty(paths, "a log file or folder")
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(q for q in path.iterdir() if q.is_file() and LOG_NAME.match(q.name))
            if not found:
                raise LogError(f"{p}: no decision logs in this folder (expected rank*.jsonl files, as "
                               "PREFILL_DELAYER_DECISION_LOG=DIR writes them)")
            out += found
        elif path.is_file():
            out.append(path)
        elif path.exists():
            raise LogError(f"{p}: not a file or a folder")
        else:
            raise LogError(f"{p}: no such file or folder")
    seen: set[Path] = set()
    unique = []
    for q in out:
        key = q.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(q)
    return unique


def other_document(o: Any, name: str) -> Optional[str]:
    """What a JSON document given as a log is, when it is one of this package's other files."""
    if not isinstance(o, dict):
        return None
    if all(k in o for k in TRACE_TOP_KEYS):
        return (f"{name} is a counterexample trace (as prove --traces and check-log --traces write them), not a decision "
                f"log: prefill-delayer replay {name} re-runs it")
    if o.get("tool") == "prefill-delayer check-log":
        return f"{name} is a check-log report (check-log --json), not a decision log"
    if {"spec_hash", "seconds", "results"} <= o.keys():
        return f"{name} is a prove report (prove --json), not a decision log"
    return None


# The "tool" of a digest's meta.json (``conformance.digest``), and how every zip archive starts.
DIGEST_TOOL = "prefill-delayer check-log digest"
ZIP_MAGIC = b"PK\x03\x04"


def digest_file(path: Path, name: str) -> Optional[str]:
    """What a check-log digest given as a log is, or None (any other file, a damaged digest included)."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != ZIP_MAGIC:
                return None
        with zipfile.ZipFile(path) as z:
            meta = json.loads(z.read("meta.json"))
    except (OSError, zipfile.BadZipFile, KeyError, ValueError, RuntimeError, RecursionError):
        return None
    if not isinstance(meta, dict) or meta.get("tool") != DIGEST_TOOL:
        return None
    return (f"{name} is a check-log digest (what check-log --digest writes on each node), not a decision log: give it "
            f"to --merge with the other nodes' digests (prefill-delayer check-log --merge {name} ...)")


# A header line as the runtime writes it starts with its kind (``runtime.decision_log``), whitespace aside.
_HEADER_START = b'{"kind":"header"'


def cut_header(raw: bytes) -> bool:
    """Whether a first line cut short (no newline) is the start of a header line: a rank that crashed, or whose
    disk filled, while its header was written; or only NUL bytes, what a file system can leave of a file whose
    blocks were allotted but never written before a power loss. Other bytes are no decision log."""
    if raw and not raw.strip(b"\0"):
        return True
    compact = re.sub(rb"\s+", b"", raw[:4 * len(_HEADER_START)])
    return bool(compact) and compact[:len(_HEADER_START)] == _HEADER_START[:len(compact)]


def no_complete_header(name: str, size: int, why: str = "") -> str:
    """A file whose only line is cut short: it holds nothing to check (and, given, the likely ``why``)."""
    return f"{name}: no complete header line (its only line is cut short at {size} bytes{': ' + why if why else ''})"


def cut_first_line(path: Path, name: str, raw: bytes) -> str:
    """The note on a file whose only line is cut short, when it is a header cut short; else ``LogError``."""
    if not cut_header(raw):
        raise LogError(f"{name}:1: not a decision log: its only line ({len(raw)} bytes, no newline) is not the start of "
                       "a header line")
    why = ("its only line is NUL bytes: a power loss before its header reached the disk?" if not raw.strip(b"\0") else
           "a crash, or a full disk, while its header was written?")
    return f"{no_complete_header(name, len(raw), why)}: ignored, its rank counts as unlogged"


def not_json(exc: ValueError) -> str:
    """What is wrong with a line that is not JSON, in the reader's words, not the decoder's."""
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    if isinstance(exc, UnicodeDecodeError):
        return f"byte {exc.object[exc.start]:#04x}, {exc.start} bytes into the line, is not UTF-8 text"
    return str(exc).split(";")[0]


def whole_file_document(path: Path) -> Any:
    """The file as one JSON document (a trace or a report is indented over many lines), or None (not one, or too big)."""
    try:
        if path.stat().st_size > 64 * 2**20:
            return None
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None


def first_line(path: Path, name: str, raw: bytes) -> tuple[Optional[dict[str, Any]], Optional[str]]:
    """A log's first line (``raw``, b"" for an empty file) as its header record, or the note on a file that holds
    nothing to check: empty, or its header cut short. ``LogError`` for a file that is no decision log, called what it
    is where it is one of this package's other files (a node's digest, a trace, a report)."""
    if not raw:
        return None, f"{name}: empty (no header): a crash before the first write? ignored"
    try:
        o = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer too long to convert
        other = digest_file(path, name) or other_document(whole_file_document(path), name)
        if other is not None:
            raise LogError(other) from None
        if not raw.endswith(b"\n"):  # no complete header: noted if it is one cut short, else refused
            return None, cut_first_line(path, name, raw)
        raise LogError(f"{name}:1: not JSON ({not_json(exc)})") from None
    if not isinstance(o, dict) or o.get("kind") != KIND_HEADER:
        other = other_document(o, name) if not isinstance(o, dict) or "kind" not in o else None
        raise LogError(other or f"{name}:1: not a decision log: its first line is not a header")
    return o, None


class _Reader:
    def __init__(self) -> None:
        self.logs: dict[tuple[int, str], RankLog] = {}
        self.empty: list[str] = []
        self.nothing: list[str] = []  # why each file held no record, for the error when none did

    def read(self, path: Path) -> None:
        name = str(path)
        try:
            f = open(path, "rb")
        except OSError as exc:
            raise LogError(f"{name}: cannot open it: {exc.strerror or exc}") from None
        loads = json.loads
        with f:
            raw = f.readline()
            head, note = first_line(path, name, raw)
            if head is None:
                self.empty.append(note or name)
                self.nothing.append(no_complete_header(name, len(raw)) if raw else f"{name} is empty")
                return
            try:
                log, fi = self._header(head, name)
            except ValueError as exc:
                raise LogError(f"{name}:1: {exc}") from None
            for lineno, raw in enumerate(f, 2):
                try:
                    o = loads(raw)
                except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer too long to convert
                    if not raw.endswith(b"\n"):  # only the last line can lack its newline: cut short by a crash
                        log.notes.append(f"{name}:{lineno}: last line cut short ({len(raw)} bytes, not complete JSON): "
                                         "a crash mid-write? ignored")
                        break
                    raise LogError(f"{name}:{lineno}: not JSON ({not_json(exc)})") from None
                kind = o.get("kind") if isinstance(o, dict) else None
                try:
                    if kind == KIND_PASS:
                        log.passes.append(parse_pass(o, log, fi, lineno))
                    elif kind == KIND_HEADER:
                        log, fi = self._header(o, name)
                    elif kind == KIND_FAIL:
                        log.fails.append(FailRec(*_parse_fail(o, log), fi, lineno))
                    elif kind == KIND_SET:
                        log.sets.append(SetRec(*_parse_set(o, log), fi, lineno))
                    else:
                        raise ValueError(f"unknown line kind {_show(kind)}; expected header, pass, fail or set")
                except ValueError as exc:
                    raise LogError(f"{name}:{lineno}: {exc}") from None

    def _header(self, o: dict[str, Any], name: str) -> tuple[RankLog, int]:
        header, config = parse_header(o)
        key = (header["rank"], header["run"])
        log = self.logs.get(key)
        if log is None:
            log = self.logs[key] = RankLog(header, config)
        else:
            for k in ("config", "fingerprint", "profile", "spec_hash", "group_rank", "world_size", "group_ranks"):
                if header[k] != log.header[k]:
                    raise ValueError(f"field '{k}' differs from that of the same run's other file {log.files[0]}")
        if header["part"] in log.parts:
            raise ValueError(f"part {header['part']} of run {header['run']} of rank {header['rank']} appears twice "
                             f"(also in {log.files[log.parts.index(header['part'])]})")
        log.files.append(name)
        log.parts.append(header["part"])
        return log, len(log.files) - 1


def read_logs(paths: Sequence[str]) -> tuple[list[RankLog], list[str]]:
    """Every (rank, run) log in ``paths`` with its records in pass order, and notes on files that held nothing."""
    reader = _Reader()
    for path in expand(paths):
        reader.read(path)
    if not reader.logs:
        raise LogError(f"nothing to check: {', '.join(reader.nothing)}; a decision log starts with a header line, "
                       "then one line per pass")
    logs = sorted(reader.logs.values(), key=lambda g: (g.started, g.rank))
    for log in logs:
        _order(log)
    return logs, reader.empty


def _order(log: RankLog) -> None:
    """Passes in pass order (files may come in any order); a pass logged twice is an error."""
    log.passes.sort(key=lambda r: r.number)
    for a, b in zip(log.passes, log.passes[1:]):
        if a.number == b.number:
            raise LogError(
                f"{log.where(b.fi, b.line)}: pass {b.number} of rank {log.rank} (run {log.run}) is logged twice "
                f"(also at {log.where(a.fi, a.line)})"
            )
    log.fails.sort(key=lambda r: r.number)
    log.sets.sort(key=lambda r: r.after_pass)
    if min(log.parts) > 0:
        log.notes.append(f"rank {log.rank}: the run's first {min(log.parts)} file(s) are gone (rotated away); "
                         f"its log starts at pass {log.passes[0].number if log.passes else '-'}")
