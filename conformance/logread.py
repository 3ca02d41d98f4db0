"""Reading decision logs: files and folders into one record list per rank and run.

What is tolerated and what is not (``LogError`` carries ``FILE:LINE`` and what is wrong):

* a last line cut short (a crash mid-write) is skipped and noted; any other
  line that is not JSON, or not a well-formed header / pass / fail / set line,
  stops the read;
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
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Optional, Sequence

from ..fsm.step import Decision, State
from ..runtime.decision_log import DECISION_FIELDS, FORMAT, KIND_FAIL, KIND_HEADER, KIND_PASS, KIND_SET, STATE_FIELDS
from ..spec.config import Config
from ..spec.errors import ConfigError
from ..spec.table import REASONS, STATES
from ..spec.view import ROW_LEN

LOG_NAME = re.compile(r".*\.jsonl(\.\d+)?$")
_NUM = (int, float)
_INTLIKE = {int, bool}
_STATES = frozenset(STATES)
_REASONS = frozenset(REASONS)
_ESTIMATES = frozenset(("all", "none", "mixed"))
HEADER_KEYS = ("format", "rank", "group_rank", "world_size", "group_ranks", "config", "fingerprint", "profile",
               "spec_hash", "run", "started", "part")


class LogError(ValueError):
    """Input that cannot be checked; the message says where (``FILE:LINE``) and what is wrong."""


class PassRec(NamedTuple):
    """One successful pass of one rank, as logged (``decision.next_state`` is the state after)."""

    number: int
    now: float
    token_usage: float
    mrr: int
    rows: list  # the gathered rows, concatenated in rank order
    before: State
    decision: Decision
    wall: float
    fi: int  # index of the file in ``RankLog.files``
    line: int


class FailRec(NamedTuple):
    number: int
    error: str
    message: str
    before: State
    fi: int
    line: int


class SetRec(NamedTuple):
    after_pass: int
    skip_first_armed: bool
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
        self.flat_len = self.config.world_size * ROW_LEN

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


def _state_problem(o: Any, name: str) -> Optional[str]:
    if not isinstance(o, dict):
        return f"field '{name}' expected an object, got {_type_name(o)}"
    for key in STATE_FIELDS:
        if key not in o:
            return f"field '{name}' lacks '{key}'"
    if o["control"] not in _STATES:
        return f"field '{name}.control' expected one of {', '.join(STATES)}, got {_show(o['control'])}"
    if not _is_count(o["delayed_count"]):
        return f"field '{name}.delayed_count' expected an integer >= 0, got {_show(o['delayed_count'])}"
    if o["wait_start"] is not None and not _is_real(o["wait_start"]):
        return f"field '{name}.wait_start' expected null or a number, got {_show(o['wait_start'])}"
    if type(o["skip_first_armed"]) is not bool:
        return f"field '{name}.skip_first_armed' expected true or false, got {_show(o['skip_first_armed'])}"
    return None


def _state(o: dict[str, Any]) -> State:
    return State(o["control"], o["delayed_count"], o["wait_start"], o["skip_first_armed"])


def _decision_problem(d: Any) -> Optional[str]:
    if not isinstance(d, dict):
        return f"field 'decision' expected an object, got {_type_name(d)}"
    for key in DECISION_FIELDS:
        if key not in d:
            return f"field 'decision' lacks '{key}'"
    if d["input_estimation"] not in _ESTIMATES:
        return f"field 'decision.input_estimation' expected all, none or mixed, got {_show(d['input_estimation'])}"
    if type(d["output_allow"]) is not bool:
        return f"field 'decision.output_allow' expected true or false, got {_show(d['output_allow'])}"
    if d["output_reason"] not in _REASONS:
        return f"field 'decision.output_reason' expected one of {', '.join(repr(r) for r in REASONS)}, got {_show(d['output_reason'])}"
    for key in ("num_prefillable", "num_token_watermark_force_allow", "wait_forward_passes"):
        if not _is_count(d[key]):
            return f"field 'decision.{key}' expected an integer >= 0, got {_show(d[key])}"
    if not _is_real(d["wait_seconds"]):
        return f"field 'decision.wait_seconds' expected a number, got {_show(d['wait_seconds'])}"
    return None


def _pass_problem(o: dict[str, Any], log: RankLog) -> Optional[str]:
    """The first problem of a pass line (run only once the quick checks failed, to say what is wrong)."""
    for key in ("pass", "rank", "wall", "now", "token_usage", "mrr", "rows", "before", "decision", "after",
                "profile", "spec_hash", "fingerprint"):
        if key not in o:
            return f"a pass line without field '{key}'"
    if type(o["pass"]) is not int or o["pass"] < 1:
        return f"field 'pass' expected an integer >= 1, got {_show(o['pass'])}"
    for key in ("wall", "now", "token_usage"):
        if not _is_real(o[key]):
            return f"field '{key}' expected a number, got {_show(o[key])}"
    if not _is_count(o["mrr"]):
        return f"field 'mrr' expected an integer >= 0, got {_show(o['mrr'])}"
    rows, n = o["rows"], log.config.world_size
    if not isinstance(rows, list) or len(rows) != n * ROW_LEN or not set(map(type, rows)) <= _INTLIKE:
        got = f"{len(rows)} entries" if isinstance(rows, list) else _type_name(rows)
        return f"field 'rows' expected {n * ROW_LEN} integers ({n} ranks of {ROW_LEN}), got {got}"
    for name in ("before", "after"):
        problem = _state_problem(o[name], name)
        if problem:
            return problem
    problem = _decision_problem(o["decision"])
    if problem:
        return problem
    for key, want in (("rank", log.rank), ("profile", log.profile), ("spec_hash", log.spec_hash),
                      ("fingerprint", log.fingerprint)):
        if o[key] != want:
            return f"field '{key}' is {_show(o[key])} but the file's header says {_show(want)}"
    return None


def parse_pass(o: dict[str, Any], log: RankLog, fi: int, line: int) -> PassRec:
    """A pass line as a record; ``ValueError`` with what is wrong when it is malformed."""
    try:
        b, a, d, rows = o["before"], o["after"], o["decision"], o["rows"]
        rec = PassRec(
            o["pass"], o["now"], o["token_usage"], o["mrr"], rows, _state(b),
            Decision(_state(a), d["input_estimation"], d["output_allow"], d["output_reason"], d["num_prefillable"],
                     d["num_token_watermark_force_allow"], d["wait_forward_passes"], d["wait_seconds"]),
            o["wall"], fi, line,
        )
        n, now, tu, mrr, _, before, dec, wall, _, _ = rec
        after = dec[0]
        if (
            type(n) is int and n >= 1 and type(mrr) is int and mrr >= 0
            and type(now) in _NUM and type(tu) in _NUM and type(wall) in _NUM
            and type(rows) is list and len(rows) == log.flat_len and set(map(type, rows)) <= _INTLIKE
            and o["rank"] == log.rank and o["fingerprint"] == log.fingerprint
            and o["spec_hash"] == log.spec_hash and o["profile"] == log.profile
            and before[0] in _STATES and type(before[1]) is int and type(before[3]) is bool
            and after[0] in _STATES and type(after[1]) is int and type(after[3]) is bool
            and (before[2] is None or type(before[2]) in _NUM) and (after[2] is None or type(after[2]) in _NUM)
            and dec[1] in _ESTIMATES and type(dec[2]) is bool and dec[3] in _REASONS
            and type(dec[4]) is int and type(dec[5]) is int and type(dec[6]) is int and type(dec[7]) in _NUM
            and before[1] >= 0 and after[1] >= 0 and dec[4] >= 0 and dec[5] >= 0 and dec[6] >= 0
            and math.isfinite(now) and math.isfinite(tu) and math.isfinite(dec[7])
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
    if o["format"] != FORMAT:
        raise ValueError(f"decision log format {_show(o['format'])}; this build reads format {FORMAT}")
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
        config = Config(**o["config"])
    except TypeError as exc:
        raise ValueError(f"this build cannot read its configuration ({str(exc).replace('__init__() ', '')})") from None
    except ConfigError as exc:
        raise ValueError(f"its configuration is invalid in this build: {exc}") from None
    if config.world_size != o["world_size"]:
        raise ValueError(f"world_size {o['world_size']} but its configuration has {config.world_size} ranks in the gather")
    gr = o["group_rank"]
    if gr is not None and not (_is_count(gr) and gr < config.world_size):
        raise ValueError(f"field 'group_rank' expected null or an integer in [0, {config.world_size}), got {_show(gr)}")
    ranks = o["group_ranks"]
    if ranks is not None and not (isinstance(ranks, list) and len(ranks) == config.world_size and all(_is_count(r) for r in ranks)):
        raise ValueError(f"field 'group_ranks' expected null or {config.world_size} ranks, got {_show(ranks)}")
    return o, config


def _parse_fail(o: dict[str, Any]) -> tuple[int, str, str, State]:
    for key in ("pass", "error", "message", "before"):
        if key not in o:
            raise ValueError(f"a fail line without field '{key}'")
    if type(o["pass"]) is not int or o["pass"] < 1:
        raise ValueError(f"field 'pass' expected an integer >= 1, got {_show(o['pass'])}")
    if not isinstance(o["error"], str) or not isinstance(o["message"], str):
        raise ValueError("fields 'error' and 'message' expected strings")
    problem = _state_problem(o["before"], "before")
    if problem:
        raise ValueError(problem)
    return o["pass"], o["error"], o["message"], _state(o["before"])


def _parse_set(o: dict[str, Any]) -> tuple[int, bool]:
    if not _is_count(o.get("after_pass")):
        raise ValueError(f"field 'after_pass' expected an integer >= 0, got {_show(o.get('after_pass'))}")
    if type(o.get("skip_first_armed")) is not bool:
        raise ValueError(f"field 'skip_first_armed' expected true or false, got {_show(o.get('skip_first_armed'))}")
    return o["after_pass"], o["skip_first_armed"]


# ----- files -------------------------------------------------------------------------------


def expand(paths: Sequence[str]) -> list[Path]:
    """The log files named by ``paths``: files as given, folders' ``*.jsonl`` and ``*.jsonl.N``."""
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


class _Reader:
    def __init__(self) -> None:
        self.logs: dict[tuple[int, str], RankLog] = {}
        self.empty: list[str] = []

    def read(self, path: Path) -> None:
        name = str(path)
        try:
            f = open(path, "rb")
        except OSError as exc:
            raise LogError(f"{name}: cannot open it: {exc.strerror or exc}") from None
        log: Optional[RankLog] = None
        fi = -1
        loads = json.loads
        lineno = 0
        with f:
            for lineno, raw in enumerate(f, 1):
                try:
                    o = loads(raw)
                except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer too long to convert
                    if not raw.endswith(b"\n"):  # only the last line can lack its newline: cut short by a crash
                        note = f"{name}:{lineno}: last line cut short ({len(raw)} bytes, not complete JSON): a crash mid-write? ignored"
                        if log is not None:
                            log.notes.append(note)
                        else:
                            self.empty.append(note)
                        break
                    what = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc).split(";")[0]
                    raise LogError(f"{name}:{lineno}: not JSON ({what})") from None
                kind = o.get("kind") if isinstance(o, dict) else None
                try:
                    if kind == KIND_PASS and log is not None:
                        log.passes.append(parse_pass(o, log, fi, lineno))
                    elif kind == KIND_HEADER:
                        log, fi = self._header(o, name)
                    elif log is None:
                        raise ValueError("not a decision log: its first line is not a header"
                                         if lineno == 1 else f"a {kind} line before any header")
                    elif kind == KIND_FAIL:
                        log.fails.append(FailRec(*_parse_fail(o), fi, lineno))
                    elif kind == KIND_SET:
                        log.sets.append(SetRec(*_parse_set(o), fi, lineno))
                    else:
                        raise ValueError(f"unknown line kind {_show(kind)}; expected header, pass, fail or set")
                except ValueError as exc:
                    raise LogError(f"{name}:{lineno}: {exc}") from None
        if log is None and not any(n.startswith(f"{name}:") for n in self.empty):
            self.empty.append(f"{name}: empty (no header): a crash before the first write? ignored")

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
        raise LogError("no decision log records in " + ", ".join(paths) + (": " + "; ".join(reader.empty) if reader.empty else ""))
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
