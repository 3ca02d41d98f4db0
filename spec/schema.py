"""The decision log's and the trace files' schema, by name, for every policy: written here once, versioned.

The runtime's decision log (``runtime.decision_log``) writes lines in this
schema and ``check-log`` (``conformance.logread``) reads them; ``prove`` writes
traces and ``replay`` and ``check-log`` read them (``traces.format``). Each
format names every field from the policy's own declarations (its state
variables, decision fields, row fields, inputs), so a new policy needs no new
format code.

Versions. Both have a header line, then one line per pass, per failed pass
(``fail``) and per variable set from outside (``set``); a log written in another
version is refused with a message that says which versions this build reads.

* Format 1: every line a JSON object; a pass line holds the gathered rows of
  every rank, so it grows with the world size (about 680 bytes at world 2).
* Format 2 (the default): a pass line is a JSON array of numbers in the order the
  header's ``columns`` name (``pass_columns``): the pass, the wall time (seconds
  since the header's ``started``, to the millisecond), the clock, the readings,
  this rank's own row, ``pass_stamp`` (the pass number its row's stamp carried,
  which check-log compares across ranks), the view it decided on, the state before, the decision,
  the state after and ``digest``, a 48-bit hash of the gathered rows
  (``rows_digest``); booleans are 0/1, control states, reasons and texts with
  declared values their index in the header's ``enums``, and an unset optional
  clock ``-0.0`` (a set one is written ``+ 0.0``, which only turns -0.0 into
  0.0, equal in every comparison), so a line is numbers only. Its size does not
  depend on the world. Mode ``full`` (for incidents) appends every rank's row.
  ``fail`` and ``set`` lines are JSON objects, as in format 1.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .fields import BOOL, COUNT, Field

LOG_FORMAT = 2
LOG_FORMATS_READ = (1, 2)
MODE_COMPACT, MODE_FULL = "compact", "full"  # format 2: own row and digest only, or every rank's row too
DIGEST = "blake2b-48 of the gathered rows as little-endian int64, concatenated in rank order"
KIND_HEADER, KIND_PASS, KIND_FAIL, KIND_SET = "header", "pass", "fail", "set"
HEADER_KEYS = ("format", "rank", "group_rank", "world_size", "group_ranks", "config", "fingerprint", "profile",
               "spec_hash", "run", "started", "part")
# The keys of a pass line, in order; ``READINGS`` stands for the policy's logged readings.
READINGS = "<readings>"
PASS_KEYS = ("kind", "rank", "pass", "wall", "now", READINGS, "rows", "before", "decision", "after", "profile", "spec_hash",
             "fingerprint")
FAIL_KEYS = ("pass", "error", "message", "before")

TRACE_TOP_KEYS = ("property", "profile", "config", "passes", "violation")
TRACE_CLOCK = "now_s"


@dataclass(frozen=True)
class LogSchema:
    """What a pass line records of a rank beyond the gathered rows: its readings, and how to rebuild its inputs.

    ``readings`` are (input name, key in the line): the inputs the decision needs
    that the rows do not carry for this rank (its local inputs, and what its own
    row is derived from). ``inputs_from_row(o, row, readings)`` rebuilds the rank's
    inputs from its own policy row and its readings, so check-log can hold the
    row the rank sent against the one the spec's ``local_row`` gives.
    """

    readings: tuple[tuple[str, str], ...]
    # (o, row, readings) -> the inputs, written over the operator layer (check-log runs it on whole columns)
    inputs_from_row: Callable[[Any, Any, dict[str, Any]], Any]
    set_flags: tuple[str, ...] = ()  # state variables a ``set`` line may carry
    # check-log's summary: its reasons in the order it lists them (default: the policy's), and which passes are
    # "mixed" (some counted ranks could prefill, others not), from the decision
    reason_order: tuple[str, ...] = ()
    mixed: Optional[Callable[[Any, Any], bool]] = None
    # check-log's traces start from fresh ranks: a pass that takes ``init`` to a logged state that differs from it
    # only in ``set_flags``: (the per-rank trace entry, the expected decision, the pass's note, what it does), or
    # None when the state is ``init`` itself
    bridge: Optional[Callable[[Any], Optional[tuple[dict[str, Any], dict[str, Any], str, str]]]] = None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(key for _, key in self.readings)


def state_keys(policy: Any) -> tuple[str, ...]:
    """A state object's keys in a log line: the policy's ``State`` fields."""
    return tuple(policy.state_cls._fields)


def decision_keys(policy: Any) -> tuple[str, ...]:
    """A decision object's keys in a log line: the policy's decision fields, after ``next_state``."""
    return tuple(f.name for f in policy.decision_fields)


def config_keys(policy: Any) -> tuple[str, ...]:
    """A trace's ``config`` keys: every parameter but the profile (the trace names it at the top)."""
    return tuple(p.name for p in policy.params if p.name != "profile")


def trace_rank_keys(policy: Any) -> tuple[str, ...]:
    """A trace pass's per-rank keys: the inputs by their trace names, then the clock."""
    return tuple(f.trace_name for f in policy.trace.inputs) + (TRACE_CLOCK,)


def trace_expect_keys(policy: Any) -> tuple[str, ...]:
    """A trace pass's expected decision per rank: the decision key by trace names."""
    return tuple(f.trace_name for f in policy.trace.expect)


def expect_of(policy: Any, decision: Any) -> dict[str, Any]:
    """A decision as a trace's ``expect`` entry."""
    return {f.trace_name: getattr(decision, f.name) for f in policy.trace.expect}


def inputs_of_trace(policy: Any, entry: dict[str, Any]) -> Any:
    """A trace's per-rank entry as the policy's inputs (the clock is read apart)."""
    by_trace = {f.trace_name: f.name for f in policy.trace.inputs}
    values = {by_trace[k]: v for k, v in entry.items() if k in by_trace}
    return policy.input_cls(**values)


class TraceDecision:
    """A trace's ``expect`` entry read back by the decision's field names (what monitors read)."""

    __slots__ = ("_values",)

    def __init__(self, policy: Any, entry: dict[str, Any]) -> None:
        self._values = {f.name: entry[f.trace_name] for f in policy.trace.expect}

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"a trace records only {', '.join(self._values)}, not {name}") from None


def field_names(fields: tuple[Field, ...]) -> tuple[str, ...]:
    return tuple(f.name for f in fields)


# ----- format 2 -----------------------------------------------------------------------------


def view_kind(agg: Any) -> str:
    """A view field's kind in a log line: ``any`` folds to a boolean, every other fold to a count."""
    return BOOL if agg.kind == "any" else COUNT


def pass_columns(policy: Any, readings: bool = True) -> list[tuple[str, str]]:
    """(name, kind) of every value of a format-2 pass line, in order (``full`` mode appends the rows)."""
    from .fields import CONTROL, SECONDS

    by_name = {f.name: f for f in policy.inputs}
    state = [("control", CONTROL)] + [(f.name, f.kind) for f in policy.state_fields]
    cols = [("pass", COUNT), ("wall", SECONDS), ("now", SECONDS)]
    cols += [(key, by_name[name].kind) for name, key in policy.log.readings] if readings else []
    cols += [(f"row.{f.name}", COUNT) for f in policy.row]
    cols.append(("pass_stamp", COUNT))  # the pass number of the row's stamp (the runtime's envelope): 40 bits, exact in a float
    cols += [(f"view.{a.name}", view_kind(a)) for a in policy.view]
    cols += [(f"before.{n}", k) for n, k in state]
    cols += [(f"decision.{f.name}", f.kind) for f in policy.decision_fields]  # a TEXT with ``values``: its index
    cols += [(f"after.{n}", k) for n, k in state]
    cols.append(("digest", COUNT))
    return cols


_LE = struct.Struct("<q")


def digest_of_bytes(data: bytes | memoryview) -> int:
    """The digest of gathered rows already packed as little-endian int64 (what ``rows_digest`` hashes)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=6).digest(), "little")


def rows_digest(flat: Any) -> int:
    """``DIGEST`` of the concatenated gathered rows (ints): equal digests, equal rows."""
    return digest_of_bytes(struct.pack(f"<{len(flat)}q", *flat))


def enums(policy: Any) -> dict[str, list[str]]:
    """What the indices of a format-2 line stand for: control states, reasons, each enumerated text field's values."""
    out = {"control": list(policy.states), "reason": list(policy.reasons)}
    out.update({f"decision.{f.name}": list(f.values) for f in policy.decision_fields if f.values})
    return out
