"""The decision log: one JSON line per pass, enough to re-derive the pass's decision from the spec alone.

Off by default. ``PrefillDelayer(..., decision_log=PATH | FILE | DecisionLogOptions)``
turns it on, or the environment variable ``PREFILL_DELAYER_DECISION_LOG=DIR``,
which writes ``DIR/rank{global_rank}.jsonl`` (so it works unchanged inside
SGLang, whose scheduler builds the delayer itself). ``prefill-delayer check-log``
replays the lines through the ``transitions`` machine.

Lines (``kind`` first):

The schema is ``spec.schema``, by the policy's own names; format 2 by default
(``DecisionLogOptions.format``), in mode ``compact`` (``rows="full"`` for
incidents, or ``PREFILL_DELAYER_DECISION_LOG_ROWS=full``). Lines:

* ``header``, first in every file: the full configuration, its fingerprint, the
  profile, the spec hash, this rank's place in the gather, the run id, and the
  field names of the rows, states and decisions (format 2: the pass line's
  ``columns`` and ``enums``, the mode, the digest's definition);
* ``pass``, per successful pass. Format 2: one JSON array of numbers, its size
  independent of the world: pass number, wall time, this rank's clock reading,
  its readings (the policy's ``LogSchema.readings``; for SGLang's delayer
  ``token_usage`` and ``max_running_requests`` as ``mrr``), its own row, the
  view it decided on, the state before (finalized), the decision, the state
  after and a digest of the gathered rows (``spec.schema.rows_digest``), which
  check-log holds against the rows rebuilt from every rank's own row; ``full``
  mode appends every rank's row. Format 1: an object with the gathered rows of
  every rank exactly as received, then profile, spec hash and fingerprint;
* ``fail``, per failed pass (``PeerInputError``, ``ConfigMismatchError``,
  ``CollectiveError``): the error and what the pass had seen;
* ``set``: a state variable set from outside (the seed's ``skip_first_delayer``).

Why the hot path looks like this: a pass must cost at most a few µs more with
the log on. The line is formatted directly (no dict, no ``json.dumps``; a
list of plain ints is valid JSON as ``str`` prints it), appended to a deque,
and a daemon thread writes, flushes (every ``flush_interval_s``, and at
``close``) and rotates by size. A log that cannot be written never breaks a
pass: the first failure is reported once (``logging``), counted in
``prefill_delayer_decision_log_errors_total``, and the log stops.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import math
import os
import socket
import struct
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Optional, Sequence, Union

from ..spec.config import Config, parse_setting
from ..spec.errors import ConfigError
from ..spec.fields import BOOL, CONTROL, COUNT, OPT_SECONDS, REASON, SECONDS, TEXT, USAGE
from ..spec.policy import ALL_GATHER
from ..spec.schema import (
    DIGEST, KIND_FAIL, KIND_HEADER, KIND_PASS, KIND_SET, LOG_FORMAT, LOG_FORMATS_READ, MODE_COMPACT, MODE_FULL, decision_keys,
    digest_of_bytes, enums, pass_columns, state_keys,
)
from .envelope import FIELDS as ENVELOPE_FIELDS
from .metrics import count_decision_log_error

logger = logging.getLogger(__name__)


def _reduced_fields(config: Any) -> tuple[str, ...]:
    """The fields of an all-reduce policy's row (its lines record the one reduced row)."""
    from .reduce import ReduceEnvelope

    return ReduceEnvelope(config, 0).row_fields


DECISION_LOG_ENV = "PREFILL_DELAYER_DECISION_LOG"
MAX_MB_ENV = "PREFILL_DELAYER_DECISION_LOG_MAX_MB"
KEEP_ENV = "PREFILL_DELAYER_DECISION_LOG_KEEP"
ROWS_ENV = "PREFILL_DELAYER_DECISION_LOG_ROWS"
# How the log is written: read with a log to write (the variable's, or a path in code), never on their own.
HOW_ENVS = (MAX_MB_ENV, KEEP_ENV, ROWS_ENV)
FORMAT = LOG_FORMAT
DEFAULT_MAX_BYTES = 256 * 2**20
DEFAULT_BACKUP_COUNT = 8
DEFAULT_FLUSH_INTERVAL_S = 0.5
# Lines waiting for the writer thread; beyond this the writer is stuck (a hung
# disk): the log stops rather than grow without bound.
MAX_PENDING = 1 << 17


_BOOL = {True: "true", False: "false"}
_flt = float.__repr__


@functools.lru_cache(maxsize=1)
def build_spec_hash() -> str:
    """This build's ``spec.hashing.spec_hash()``, read once per process."""
    from ..spec.hashing import spec_hash

    return spec_hash()


@dataclass(frozen=True)
class DecisionLogOptions:
    """Where and how to log.

    ``target``: a path ending in ``.jsonl`` (or an existing file) is the log file;
    any other path is a folder, created if missing, holding ``rank{global_rank}.jsonl``
    (so ranks sharing one setting never share one file; a folder's name may hold dots,
    ``logs-sglang-0.5.17``); or a writable text file object (written to and flushed,
    never rotated or closed here). Rotated files
    are ``NAME.1`` (newest) to ``NAME.{backup_count}``.
    """

    target: Union[str, "os.PathLike[str]", IO[str]]
    max_bytes: int = DEFAULT_MAX_BYTES
    backup_count: int = DEFAULT_BACKUP_COUNT
    flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S
    folder: bool = False  # ``target`` is a folder whatever its name (the environment variable's)
    format: int = FORMAT  # 2; 1 writes the first format (every rank's rows in every line), for tools that read only it
    rows: str = MODE_COMPACT  # format 2: "compact" (own row and digest) or "full" (every rank's row too, for incidents)

    def __post_init__(self) -> None:
        if self.format not in LOG_FORMATS_READ or isinstance(self.format, bool):
            raise ConfigError(f"decision log: format must be one of {', '.join(map(str, LOG_FORMATS_READ))}, got {self.format!r}")
        if self.rows not in (MODE_COMPACT, MODE_FULL):
            raise ConfigError(f"decision log: rows must be {MODE_COMPACT!r} or {MODE_FULL!r}, got {self.rows!r}")
        for name, low in (("max_bytes", 1), ("backup_count", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"decision log: {name} must be an int >= {low}, got {value!r}")
        f = self.flush_interval_s
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not (0 < f <= 1.0):
            raise ConfigError(f"decision log: flush_interval_s must be a number in (0, 1], got {f!r}")
        t = self.target
        if not isinstance(t, (str, os.PathLike)) and not callable(getattr(t, "write", None)):
            raise ConfigError(f"decision_log must be a path, a folder or a writable text file, got {t!r}")
        if isinstance(t, (str, os.PathLike)) and not os.fspath(t):
            raise ConfigError("decision_log: empty path")


def _env_int(name: str, default: int, scale: int = 1) -> int:
    """A whole-number variable, read as every setting is (``spec.config.parse_setting``: no ``7_5``, which ``int``
    reads as 75)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default * scale
    try:
        value = parse_setting(f"{name}={raw}")[1]
    except ValueError as err:
        raise ConfigError(str(err)) from None
    low = 0 if name == KEEP_ENV else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{name}={raw!r}: expected a whole number >= {low}")
    return value * scale


def _env_rows() -> str:
    raw = os.environ.get(ROWS_ENV, "").strip()
    if raw not in ("", MODE_COMPACT, MODE_FULL):
        raise ConfigError(f"{ROWS_ENV}={raw!r}: expected {MODE_COMPACT} (the default) or {MODE_FULL}")
    return raw or MODE_COMPACT


def _refuse_how_without_log() -> None:
    """``ConfigError`` naming the ``HOW_ENVS`` set while no log is asked for: taken silently, a log the operator sized
    or asked in full would simply not exist (as ``PREFILL_DELAYER_PARAMS`` without a profile, nothing to apply to)."""
    given = [f"{name}={os.environ[name]!r}" for name in HOW_ENVS if os.environ.get(name, "").strip()]
    if not given:
        return
    if len(given) == 1:
        raise ConfigError(f"{given[0]} needs {DECISION_LOG_ENV}, the decision log whose setting it is (set "
                          f"{DECISION_LOG_ENV}=DIR to write the log, or unset it)")
    raise ConfigError(f"{', '.join(given[:-1])} and {given[-1]} need {DECISION_LOG_ENV}, the decision log whose settings "
                      f"they are (set {DECISION_LOG_ENV}=DIR to write the log, or unset them)")


def options_from(decision_log: Any) -> Optional[DecisionLogOptions]:
    """The constructor's ``decision_log=`` (``None``: the environment decides; ``False``: off) as options;
    ``ConfigError`` for a bad variable, or one of ``HOW_ENVS`` set where the environment asks for no log."""
    if decision_log is False:
        return None
    if decision_log is None:
        where = os.environ.get(DECISION_LOG_ENV, "").strip()
        if not where:
            _refuse_how_without_log()
            return None
        return DecisionLogOptions(
            Path(where),
            max_bytes=_env_int(MAX_MB_ENV, DEFAULT_MAX_BYTES // 2**20, 2**20),
            backup_count=_env_int(KEEP_ENV, DEFAULT_BACKUP_COUNT),
            folder=True,
            rows=_env_rows(),
        )
    if isinstance(decision_log, DecisionLogOptions):
        return decision_log
    return DecisionLogOptions(
        decision_log,
        max_bytes=_env_int(MAX_MB_ENV, DEFAULT_MAX_BYTES // 2**20, 2**20),
        backup_count=_env_int(KEEP_ENV, DEFAULT_BACKUP_COUNT),
        rows=_env_rows(),
    )


def place_in_gather(gather: Any) -> tuple[int, Optional[int], Optional[list[int]]]:
    """(global rank, rank in the gather, the gather's global ranks) as far as they are known.

    A ``TorchGather`` knows all three; an in-process gather its rank; any other
    gather takes the process's global rank when torch.distributed is up, else 0.
    torch is never imported here: a gather over torch has imported it already.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is not None and not (dist.is_available() and dist.is_initialized()):
        dist = None  # not up: no rank to ask it for
    group_rank = getattr(gather, "rank", None)
    if isinstance(group_rank, bool) or not isinstance(group_rank, int):
        group_rank = None
    group = getattr(gather, "_group", None) if type(gather).__name__ == "TorchGather" else None
    if dist is not None and type(gather).__name__ == "TorchGather":
        ranks: Optional[list[int]]
        try:
            ranks = list(dist.get_process_group_ranks(group if group is not None else dist.group.WORLD))
        except Exception:  # noqa: BLE001 - an old torch, a group object it does not know: unknown, not fatal
            ranks = None
        return dist.get_rank(), group_rank, ranks
    if group_rank is not None:
        return group_rank, group_rank, None
    return (dist.get_rank() if dist is not None else 0), None, None


def _safe(x: Any) -> Any:
    """A value for a ``fail`` line: JSON as is where it can be, else its repr."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return x if math.isfinite(x) else repr(x)
    if isinstance(x, (list, tuple)):
        return [_safe(v) for v in x]
    return repr(x)


def _text_of(kind: str, expr: str) -> str:
    """An f-string fragment writing ``expr`` (a value of ``kind``) as JSON."""
    if kind in (CONTROL, REASON, TEXT):
        return f'"{{{expr}}}"'
    if kind == BOOL:
        return f"{{_BOOL[bool({expr})]}}"
    if kind == COUNT:
        return f"{{{expr}:d}}"
    if kind in (SECONDS, USAGE):
        return f"{{_flt(float({expr}))}}"
    if kind == OPT_SECONDS:
        return f'{{"null" if {expr} is None else _flt(float({expr}))}}'
    raise ValueError(f"no log text for kind {kind!r}")


def _compile(source: str, name: str) -> Any:
    namespace: dict[str, Any] = {"_BOOL": _BOOL, "_flt": _flt}
    exec(compile(source, f"<prefill_delayer.runtime.decision_log {name}>", "exec"), namespace)
    return namespace[name]


@functools.lru_cache(maxsize=None)
def _formatters(policy_name: str) -> tuple[Any, Any, Any]:
    """(state text, decision text, readings text) of a policy: f-strings generated from its fields' kinds,
    so a line is formatted directly (no dict, no json.dumps) for any policy."""
    from ..spec.registry import policy_named

    policy = policy_named(policy_name)
    kinds = [CONTROL] + [f.kind for f in policy.state_fields]
    parts = ",".join(f'"{name}":{_text_of(kind, f"s[{i}]")}' for i, (name, kind) in enumerate(zip(state_keys(policy), kinds)))
    state = _compile(f"def state_text(s):\n    return f'{{{{{parts}}}}}'\n", "state_text")
    parts = ",".join(f'"{f.name}":{_text_of(f.kind, f"d[{i + 1}]")}' for i, f in enumerate(policy.decision_fields))
    decision = _compile(f"def decision_text(d):\n    return f'{{{{{parts}}}}}'\n", "decision_text")
    by_name = {f.name: f for f in policy.inputs}
    # Each reading ends with its comma, so a policy with no readings writes none.
    parts = "".join(f'"{key}":{_text_of(by_name[name].kind, f"r[{i}]")},' for i, (name, key) in enumerate(policy.log.readings))
    readings = _compile(f"def readings_text(r):\n    return f'{parts}'\n", "readings_text")
    return state, decision, readings


def _field2(kind: str, expr: str, values: tuple[str, ...] = ()) -> tuple[str, str]:
    """``(conversion, expression)`` writing ``expr`` as format 2 does (``spec.schema``): numbers only. The line is
    one ``%`` format: ``%d`` writes a bool as 1 / 0 and costs half of an f-string's ``:d`` (37 fields a line of
    SGLang's delayer). Unlike ``:d`` it would take a float too; every ``%d`` field is an int or a bool by
    construction (the gathered int64 rows, the compiled step's state and decision)."""
    if kind in (BOOL, COUNT):
        return "%d", expr
    if kind == CONTROL:
        return "%d", f"_CONTROL[{expr}]"
    if kind == REASON:
        return "%d", f"_REASON[{expr}]"
    if kind == TEXT:  # an enumerated text as its index; a free one (no values) as a JSON string, as format 1
        return ("%d", f"_TEXT_{id(values)}[{expr}]") if values else ('"%s"', expr)
    if kind == OPT_SECONDS:
        return "%s", f'("-0.0" if {expr} is None else _flt(float({expr}) + 0.0))'
    if kind in (SECONDS, USAGE):
        return "%r", f"float({expr})"  # a float's repr, as format 1's _flt
    raise ValueError(f"no format-2 log text for kind {kind!r}")


@functools.lru_cache(maxsize=None)
def _line2(config: Config, place: int, full: bool) -> Any:
    """``line(number, wall, now, readings, flat, before, decision, digest)`` of format 2 for one configuration and
    place in the gather: one ``%`` format generated from the policy's columns; the own row is a slice of ``flat`` and
    the view the fold the compiled step reads (``gathered_view`` over source), so neither is restated here."""
    from ..fsm.compiled import Src, SrcOps, lit
    from .envelope import PASS_MASK, Envelope

    policy = config.policy
    env = Envelope(config)
    n, k = env.row_len, env.n_policy
    rows = [[Src(f"flat[{i}]", index=i) for i in range(r * n, (r + 1) * n)] for r in range(config.world_size)]
    view = policy.gathered_view(SrcOps(), config, rows)
    cols = pass_columns(policy)
    by_kind = dict(cols)
    fields = [("%d", "number"), ("%.3f", "wall"), ("%r", "float(now)")]
    fields += [_field2(by_kind[key], f"readings[{i}]") for i, (_, key) in enumerate(policy.log.readings)]
    fields += [("%d", f"flat[{place * n + i}]") for i in range(k)]
    fields.append(("%d", f"flat[{place * n + env.f_stamp}] & {PASS_MASK}"))  # the stamp's pass number (its tag is the policy's)
    for a, value in zip(policy.view, view):
        conversion, expr = _field2(by_kind[f"view.{a.name}"], lit(value))
        if conversion == "%d" and not isinstance(value, Src):  # fixed by the configuration (the world size): in the format
            conversion, expr = conversion % value, ""
        fields.append((conversion, expr))
    state_kinds = [CONTROL] + [f.kind for f in policy.state_fields]
    fields += [_field2(kind, f"before[{i}]") for i, kind in enumerate(state_kinds)]
    fields += [_field2(f.kind, f"decision[{i + 1}]", f.values) for i, f in enumerate(policy.decision_fields)]
    fields += [_field2(kind, f"decision[0][{i}]") for i, kind in enumerate(state_kinds)]
    fields.append(("%d", "digest"))
    if full:
        fields.append(("%s", "','.join(map(str, flat))"))
    template = "[" + ",".join(conversion for conversion, _ in fields) + "]\n"
    source = (
        "def line(number, wall, now, readings, flat, before, decision, digest):\n"
        f"    return {template!r} % ({', '.join(expr for _, expr in fields if expr)},)\n"
    )
    namespace: dict[str, Any] = {"_flt": _flt, "_CONTROL": {s: i for i, s in enumerate(policy.states)},
                                 "_REASON": {r: i for i, r in enumerate(policy.reasons)},
                                 **{f"_TEXT_{id(f.values)}": {v: i for i, v in enumerate(f.values)}
                                    for f in policy.decision_fields if f.values}}
    exec(compile(source, f"<prefill_delayer.runtime.decision_log line of {policy.name}>", "exec"), namespace)
    return namespace["line"]


def state_text(s: Any, policy_name: Optional[str] = None) -> str:
    """A state as the log writes it (JSON, keys the policy's ``State`` fields)."""
    name = policy_name if policy_name is not None else _policy_of_state(s)
    return _formatters(name)[0](s)  # type: ignore[no-any-return]


def _policy_of_state(s: Any) -> str:
    from ..spec.registry import policies

    for pol in policies():
        if type(s) is pol.state_cls:
            return pol.name
    raise TypeError(f"{type(s).__name__} is no policy's State")


class DecisionLog:
    """One rank's decision log: formats lines on the caller's thread, writes them on its own."""

    def __init__(
        self,
        options: DecisionLogOptions,
        config: Config,
        *,
        rank: int,
        group_rank: Optional[int],
        group_ranks: Optional[Sequence[int]],
        registry: Any = None,
    ) -> None:
        self.options = options
        self.config = config
        self.rank = rank
        self.registry = registry
        self.run = uuid.uuid4().hex[:16]
        self.active = True  # False once closed or failed: every method returns at once
        self.failure: Optional[str] = None  # why the log stopped, when it failed
        self.lines_written = 0
        self.path: Optional[Path] = None
        self._file: Optional[IO[str]] = None
        self._owns_file = False
        self._part = 0
        self._bytes = 0
        self._header_bytes = 0
        self._pending: collections.deque[str] = collections.deque()
        self._io_lock = threading.RLock()
        self._fail_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._batch = 1024
        policy = config.policy
        self._state_text, self._decision_text, self._readings_text = _formatters(policy.name)
        self._state_cache: dict[Any, str] = {}
        fp = config.fingerprint()
        started = time.time()
        self.format = options.format
        self.mode = options.rows
        mode_note = None
        if self.format == 2 and self.mode == MODE_COMPACT and group_rank is None:
            # Without its place in the gather a rank cannot tell its own row: the line carries every rank's.
            self.mode, mode_note = MODE_FULL, "this rank's place in the gather is unknown: every rank's row is logged"
            logger.warning("prefill-delayer decision log (rank %d): %s", rank, mode_note)
        if self.format == 2 and policy.collective != ALL_GATHER:
            # Format 2 logs a rank's own row; an all-reduce hands each rank only the reduced one.
            self.format, mode_note = 1, f"{policy.title} all-reduces: its lines record the one reduced row (format 1)"
            logger.info("prefill-delayer decision log (rank %d): %s", rank, mode_note)
        self._line = None
        self._started = started
        if self.format == 2:
            from .envelope import Envelope

            self._line = _line2(config, group_rank or 0, self.mode == MODE_FULL)
            self._pack = struct.Struct(f"<{Envelope(config).flat_len}q").pack
        self._header = {
            "kind": KIND_HEADER,
            "format": self.format,
            "rank": rank,
            "group_rank": group_rank,
            "world_size": config.world_size,
            "group_ranks": None if group_ranks is None else list(group_ranks),
            "config": config.as_dict(),
            "fingerprint": fp,
            "profile": config.profile,
            "spec_hash": build_spec_hash(),
            "run": self.run,
            "started": started,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "row_fields": list(policy.row_names + ENVELOPE_FIELDS if policy.collective == ALL_GATHER else _reduced_fields(config)),
            "state_fields": list(state_keys(policy)),
            "decision_fields": list(decision_keys(policy)),
        }
        if mode_note and self.format == 1:
            self._header["format_note"] = mode_note
        if self.format == 2:
            from .envelope import Envelope

            columns = [name for name, _ in pass_columns(policy)]
            if self.mode == MODE_FULL:
                columns += [f"rows.{r}.{f}" for r in range(config.world_size) for f in Envelope(config).row_fields]
            self._header.update({
                "mode": self.mode, "columns": columns, "enums": enums(policy),
                "digest": DIGEST, **({"mode_note": mode_note} if mode_note else {}),
            })
        # The constant start and end of every pass line.
        self._head = f'{{"kind":"{KIND_PASS}","rank":{rank:d},"pass":'
        self._tail = f',"profile":{json.dumps(config.profile)},"spec_hash":"{self._header["spec_hash"]}","fingerprint":{fp:d}}}\n'
        try:
            self._open()
        except Exception as err:  # noqa: BLE001 - reported and counted, never raised into the scheduler
            self._fail("open", err)
            self._close_file()
            return
        self._thread = threading.Thread(target=self._run, name=f"prefill-delayer-decision-log-rank{rank}", daemon=True)
        self._thread.start()

    # ----- the caller's side (the scheduler's thread) -----------------------------------

    def passed(self, number: int, now: float, readings: tuple, flat: Sequence[int], before: Any, decision: Any) -> None:
        """Queue the line of a successful pass (a few µs; never raises)."""
        if not self.active:
            return
        if self._line is not None:
            try:
                line = self._line(number, time.time() - self._started, now, readings, flat, before, decision,
                                  digest_of_bytes(self._pack(*flat)))
            except Exception as err:  # noqa: BLE001
                self._fail("encode", err)
                return
            self._queue(line)
            return
        try:
            cache = self._state_cache
            b = cache.get(before)
            if b is None:
                b = self._state_text(before)
                if len(cache) < _STATE_CACHE:
                    cache[before] = b
            after = decision[0]
            a = cache.get(after)
            if a is None:
                a = self._state_text(after)
                if len(cache) < _STATE_CACHE:
                    cache[after] = a
            rows = str(flat) if set(map(type, flat)) == _INTS else json.dumps(list(flat), default=int)
            line = (
                f'{self._head}{number:d},"wall":{_flt(time.time())},"now":{_flt(float(now))},'
                f'{self._readings_text(readings)}"rows":{rows},"before":{b},'
                f'"decision":{self._decision_text(decision)},"after":{a}{self._tail}'
            )
        except Exception as err:  # noqa: BLE001
            self._fail("encode", err)
            return
        self._queue(line)

    def failed(self, number: int, now: Any, inputs: dict[str, Any], flat: Optional[Sequence[Any]], before: Any,
               error: BaseException) -> None:
        """Queue the line of a failed pass (the error, and what the pass had seen)."""
        if not self.active:
            return
        try:
            line = json.dumps({
                "kind": KIND_FAIL, "rank": self.rank, "pass": number, "wall": time.time(), "now": _safe(now),
                "inputs": {k: _safe(v) for k, v in inputs.items()},
                "rows": None if flat is None else _safe(list(flat)),
                "before": json.loads(self._state_text(before)),
                "error": type(error).__name__, "message": str(error),
                "profile": self.config.profile, "spec_hash": self._header["spec_hash"],
                "fingerprint": self._header["fingerprint"],
            }) + "\n"
        except Exception as err:  # noqa: BLE001
            self._fail("encode", err)
            return
        self._queue(line)

    def flag_set(self, after_pass: int, name: str, value: bool) -> None:
        """Queue a ``set`` line: state variable ``name`` was set from outside after pass ``after_pass``."""
        if self.active:
            self._queue(json.dumps({"kind": KIND_SET, "rank": self.rank, "after_pass": after_pass, "wall": time.time(),
                                    name: bool(value)}) + "\n")

    def _queue(self, line: str) -> None:
        pending = self._pending
        pending.append(line)
        n = len(pending)
        if n >= self._batch:
            if n == self._batch:
                self._wake.set()
            elif n >= MAX_PENDING:
                self._fail("behind", RuntimeError(f"{n} lines waiting: the writer is stuck"))

    # ----- the writer's side ---------------------------------------------------------------

    def flush(self) -> None:
        """Write every queued line now (tests; ``close``)."""
        if self.active:
            self._drain()

    def close(self) -> None:
        """Write what is queued, stop the writer, close a file this log opened. Idempotent."""
        if not self.active:
            return
        self._drain()
        with self._io_lock:
            if not self.active:  # the last write failed
                return
            self.active = False
            self._stopped.set()
            self._wake.set()
            self._close_file()

    def _run(self) -> None:
        interval = self.options.flush_interval_s
        while not self._stopped.is_set():
            self._wake.wait(interval)
            self._wake.clear()
            if not self._stopped.is_set():
                self._drain()
        if self.failure is not None:  # stopped by a failure on the caller's side: let go of the file here
            with self._io_lock:
                self._close_file()

    def _drain(self) -> None:
        with self._io_lock:
            f = self._file
            if f is None or not self.active:
                return
            pending = self._pending
            lines = []
            try:
                while True:
                    lines.append(pending.popleft())
            except IndexError:
                pass
            if not lines:
                return
            try:
                text = "".join(lines)
                size = len(text.encode()) if self._owns_file else 0
                if self._owns_file and self._bytes + size > self.options.max_bytes:
                    self._write_rotating(lines)
                else:
                    f.write(text)
                    f.flush()
                    self._bytes += size
                self.lines_written += len(lines)
            except Exception as err:  # noqa: BLE001
                self._fail("write", err)
                self._close_file()

    def _open(self) -> None:
        target = self.options.target
        if not isinstance(target, (str, os.PathLike)):
            self._file = target  # type: ignore[assignment]
            self._write_header()
            return
        path = Path(target)
        if self.options.folder or not (path.suffix == ".jsonl" or (path.exists() and not path.is_dir())):
            _make_folder(path)
            path = path / f"rank{self.rank}.jsonl"
        self.path = path
        self._owns_file = True
        if path.exists() and path.stat().st_size > 0:  # an earlier run's log: keep it, as a rotated file
            self._shift()
        self._file = open(path, "w", encoding="utf-8")
        self._bytes = 0
        self._write_header()

    def _write_header(self) -> None:
        assert self._file is not None
        text = json.dumps({**self._header, "part": self._part}) + "\n"
        self._file.write(text)
        self._file.flush()
        self._header_bytes = len(text.encode())
        self._bytes += self._header_bytes

    def _shift(self) -> None:
        """path -> path.1 -> ... -> path.N; the oldest beyond ``backup_count`` is removed."""
        assert self.path is not None
        keep = self.options.backup_count
        base = str(self.path)
        if keep == 0:
            self.path.unlink()
            return
        oldest = Path(f"{base}.{keep}")
        if oldest.exists():
            oldest.unlink()
        for i in range(keep - 1, 0, -1):
            src = Path(f"{base}.{i}")
            if src.exists():
                src.rename(f"{base}.{i + 1}")
        self.path.rename(f"{base}.1")

    def _write_rotating(self, lines: list[str]) -> None:
        """Write ``lines``, rotating before any line that would take the file past ``max_bytes``.

        A file never grows past the limit, except by the one line a fresh file
        always takes after its header (a line longer than the limit has to go somewhere).
        """
        for line in lines:
            n = len(line.encode())
            fresh = self._bytes <= self._header_bytes  # only the header so far: the line goes here whatever its size
            if not fresh and self._bytes + n > self.options.max_bytes:
                assert self._file is not None
                self._file.flush()
                self._rotate()
            assert self._file is not None
            self._file.write(line)
            self._bytes += n
        assert self._file is not None
        self._file.flush()

    def _rotate(self) -> None:
        self._close_file()
        self._shift()
        self._part += 1
        assert self.path is not None
        self._file = open(self.path, "w", encoding="utf-8")
        self._bytes = 0
        self._write_header()

    def _close_file(self) -> None:
        f, self._file = self._file, None
        if f is not None and self._owns_file:
            try:
                f.close()
            except OSError:
                pass
        elif f is not None:
            try:
                f.flush()
            except (OSError, ValueError):
                pass

    def _fail(self, reason: str, err: BaseException) -> None:
        """Stop logging: report once, count once; the scheduler never sees it."""
        with self._fail_lock:
            if self.failure is not None:
                return
            self.failure = f"{reason}: {type(err).__name__}: {err}"
            self.active = False
        self._stopped.set()
        self._wake.set()
        self._pending.clear()
        counted = count_decision_log_error(reason, self.registry)
        where = self.path if self.path is not None else self.options.target
        logger.error(
            "prefill-delayer decision log (rank %d, %s) stopped: cannot %s: %s: %s; passes go on without it%s",
            self.rank, where, {"open": "open it", "write": "write it", "encode": "encode a line",
                               "behind": "keep up"}.get(reason, reason),
            type(err).__name__, err, "" if counted else " (prometheus_client not installed: not counted as a metric)",
        )


def _make_folder(path: Path) -> None:
    """``path`` made a folder, with its parents; a file in the way is named as such, not ``FileExistsError: File
    exists``."""
    for where in (path, *path.parents):
        if where.exists():
            if not where.is_dir():
                raise NotADirectoryError(f"{where} is a file; expected a folder" + ("" if where == path else f" (for {path})"))
            break
    path.mkdir(parents=True, exist_ok=True)


_INTS = {int}
_STATE_CACHE = 4096  # states whose text is kept: the few a run revisits, not one per clock reading


def open_decision_log(decision_log: Any, config: Config, gather: Any, registry: Any = None) -> Optional[DecisionLog]:
    """The log the constructor's ``decision_log=`` and the environment ask for, or ``None`` (off)."""
    options = options_from(decision_log)
    if options is None:
        return None
    rank, group_rank, group_ranks = place_in_gather(gather)
    return DecisionLog(options, config, rank=rank, group_rank=group_rank, group_ranks=group_ranks, registry=registry)
