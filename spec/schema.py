"""The decision log's and the trace files' schema, by name, for every policy: written here once, versioned.

The runtime's decision log (``runtime.decision_log``) writes lines in this
schema and ``check-log`` (``conformance.logread``) reads them; ``prove`` writes
traces and ``replay`` and ``check-log`` read them (``traces.format``). Each
format names every field from the policy's own declarations (its state
variables, decision fields, row fields, inputs), so a new policy needs no new
format code.

Versions. Format 1 is the first and only one: a header line, then one line per
pass (``pass``), per failed pass (``fail``) and per variable set from outside
(``set``). A log written in another version is refused with a message that says
which versions this build reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from .fields import Field

LOG_FORMAT = 1
LOG_FORMATS_READ = (1,)
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
    row is derived from). ``inputs_from_row(row, readings)`` rebuilds the rank's
    inputs from its own policy row and its readings, so check-log can hold the
    row the rank sent against the one the spec's ``local_row`` gives.
    """

    readings: tuple[tuple[str, str], ...]
    inputs_from_row: Callable[[Any, dict[str, Any]], Any]
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
