"""The policy interface: what a policy module declares, and all that the other packages read.

A policy reads like a TLA+ module, each part a small pure function or a table of
data over the operator layer (``spec.ops``):

* its variables (``State``, ``control`` first) and ``init``, with ``type_ok``;
* its per-pass inputs, and what the guards see of the state and the inputs
  (``local_for``);
* the row each rank sends (``row``, ``local_row``) and how the gathered view
  folds the rows (``view``: one ``Agg`` per field, the fold as data);
* its guards and its transition table, with ``decide`` for a fired row's
  effects and decision;
* its configuration (a ``PolicyConfig`` subclass) with the parameters' validation;
* its profiles, each a set of named features, and the engine releases each is;
* the catalogue properties that apply to it (``Invariant``: a monitor or a
  structural check), with the expected verdict per profile.

``fsm``, ``runtime``, ``proofs``, ``traces``, ``conformance``, ``sim`` and
``docgen`` take a ``Policy`` (``spec.registry.policy_of``) and never name one.
"""

from __future__ import annotations

import functools
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from .fields import BOOL, COUNT, MAX_COUNT, OPT_SECONDS, SECONDS, USAGE, Field, value_problem
from .ops import PY

_VALUE_KINDS = (COUNT, USAGE, SECONDS, OPT_SECONDS)  # the kinds ``value_problem`` checks

PROVED, REFUTED, UNKNOWN = "proved", "refuted", "unknown"
COUNTED, ALL = "counted", "all"  # which rows an aggregate reads: the first of each DP group, or every one
AGG_KINDS = ("count", "sum", "max", "any")
# The one collective of a pass: every rank's row to every rank, or the rows reduced slot by slot.
ALL_GATHER, ALL_REDUCE_SUM, ALL_REDUCE_MAX = "all_gather", "all_reduce_sum", "all_reduce_max"
COLLECTIVES = (ALL_GATHER, ALL_REDUCE_SUM, ALL_REDUCE_MAX)
# The view folds an all-reduce can compute: its op's own, "any" (the reduced 0/1 slot > 0), and the count (dp_dim).
REDUCIBLE = {ALL_REDUCE_SUM: ("sum", "any", "count"), ALL_REDUCE_MAX: ("max", "any", "count")}


@dataclass(frozen=True)
class Agg:
    """One field of the gathered view: ``kind`` of row field ``field`` over ``over`` rows.

    ``count`` is the number of counted rows (``field`` None); ``any`` is "the sum
    is > 0" of a 0/1 field. ``sym`` is the field's Z3 variable stem.
    """

    name: str
    kind: str
    field: Optional[str]
    over: str = COUNTED
    doc: str = ""
    sym: str = ""

    def __post_init__(self) -> None:
        if self.kind not in AGG_KINDS or self.over not in (COUNTED, ALL) or (self.kind == "count") != (self.field is None):
            raise ValueError(f"view field {self.name}: not a fold this interface knows ({self.kind} of {self.field} over {self.over})")


@dataclass(frozen=True)
class Param:
    """One configuration parameter: its default, its valid range in words, and the check."""

    name: str
    default: Any
    valid: str
    check: Callable[[Any], bool]
    server_arg: Optional[str] = None  # where an SGLang scheduler keeps it (server_args / get_schedule()), if anywhere
    runs_as_off: Any = None  # a value at which the policy defers no prefill, so it serves as no policy would (None: none)


@dataclass(frozen=True)
class Feature:
    """One change of a policy: the behaviour before and after, why, and where it shows."""

    id: str
    topic: str
    before: str
    after: str
    why: str
    upstream: tuple[int, ...]  # public issue / PR numbers of the engine
    since: Optional[str]  # first release with it; None: ours
    shows_in: tuple[str, ...]  # guard names, or transition names without the source prefix
    invariant: str = ""  # the catalogue property the feature changes, if any


@dataclass(frozen=True)
class Profile:
    name: str
    features: frozenset[str]
    releases: tuple[str, ...]  # the engine releases whose code this profile is, bit for bit
    summary: str
    # (parameter, value): the defaults this profile gives parameters left unset (an engine's tuned default set)
    defaults: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class Invariant:
    """A catalogue property as it applies to one policy.

    ``check`` is a monitor (``spec.monitors``: a run invariant, written once and
    evaluated on Python values and on Z3 terms alike) or the name of a
    structural check the proofs know (``guards-partition``, ``aggregate-view``,
    ``refinement``). ``expected`` is the status ``prefill-delayer prove`` must
    find for each profile: the regression contract.
    """

    id: str
    statement: str
    expected: Mapping[str, str]
    check: Any
    note: str = ""


@dataclass(frozen=True)
class TraceSchema:
    """How the policy's passes read in a counterexample trace: per-rank inputs, and the expected decisions."""

    inputs: tuple[Field, ...]  # the negotiate inputs, in the trace's key order (the clock is ``now_s``, last)
    expect: tuple[Field, ...]  # decision fields, trace names in ``Field.trace``
    config: tuple[str, ...] = ()  # the config's keys in a written trace, in order (default: the parameters')


@dataclass(eq=False)
class Policy:
    """Everything one policy declares; see the module docstring for what each part is.

    Not frozen, so a test can patch one part (a feature, the table) and see every
    consumer follow; compared by identity (one object per policy, in the registry).
    """

    name: str
    title: str
    summary: str
    source: str  # what was read, with the version or commit
    upstream_url: str  # an issue or PR of the engine, by number: "https://github.com/.../issues/{}"
    # configuration and profiles
    config_cls: type
    params: tuple[Param, ...]
    profiles: tuple[Profile, ...]
    features: tuple[Feature, ...]
    default_profile: str
    release_aliases: Mapping[str, str]  # "sglang-0.5.20" -> "sglang-0.5.19": names that resolve to a profile
    # variables
    states: tuple[str, ...]
    state_doc: Mapping[str, str]
    state_cls: type
    state_fields: tuple[Field, ...]  # the extended variables, after ``control``
    init: Any
    type_ok: Callable[..., Any]  # (o, c, st) -> Bool
    shared: tuple[str, ...]  # state fields ranks in step share (the rest are read on a rank's own clock)
    # inputs, and the guards' view of a rank
    inputs: tuple[Field, ...]
    input_cls: type
    local_cls: type
    local_for: Callable[..., Any]  # (o, st, now, inp) -> Local
    local_inputs: tuple[str, ...]  # the inputs local_for reads (besides the clock): a rank's own arguments
    local_domain: Callable[..., list]  # (o, c, st, now, inp) -> what every reachable rank satisfies locally
    # row and view
    row: tuple[Field, ...]
    local_row: Callable[..., list]  # (o, c, inp, local) -> this rank's row
    view: tuple[Agg, ...]
    view_cls: type
    view_domain: Callable[..., list]  # (o, c, v) -> exactly what rows can give (proved by aggregate-view)
    # guards and table
    guards: Any  # the guards' module, read when used (so a patched guard shows everywhere)
    table_guards: tuple[str, ...]  # the guards a table row may name
    reasons: tuple[str, ...]
    effect_doc: Mapping[str, str]
    keep_doc: str  # what an effect-free row does to the variables
    build_table: Callable[[str], Any]
    decision_cls: type  # NamedTuple: next_state, then the outputs (output_allow, output_reason among them)
    decision_fields: tuple[Field, ...]  # the outputs after next_state
    decide: Callable[..., Any]  # (o, c, t, v, s) -> Decision
    decision_key: tuple[str, ...]  # what ranks in agreement decide alike
    # properties
    invariants: tuple[Invariant, ...]
    # glossary (docs): the symbols the guards read
    symbols: tuple[Any, ...]
    trace: TraceSchema
    log: Any  # what a decision-log line records of a rank (``spec.schema.LogSchema``)
    # the parts the proofs need beyond the above (``spec.policy.ProofHooks``)
    proof: Any
    # how an SGLang scheduler's delayer call sites drive it (``spec.policy.HostBinding``), or None
    host: Any = None
    # how the simulator's scheduler feeds it and acts on it (``spec.policy.SimBinding``)
    sim: Any = None
    extras: Mapping[str, Any] = field(default_factory=dict)
    # the guards, by name, when the guards' module holds more than guards (else every public function of it)
    guard_names: tuple[str, ...] = ()
    # the pass's one collective (``ALL_GATHER``, or an all-reduce whose op folds every view field: ``REDUCIBLE``)
    collective: str = ALL_GATHER
    # a BOOL local input that stands for "this rank's collective raised": the runtime sets it (never a caller), and a
    # profile that fails open decides on it locally; None: a failed collective raises on the rank that saw it
    collective_failure: Optional[str] = None
    # (config) -> whether its profile fails open: decides on the failure input instead of raising
    fails_open: Callable[[Any], bool] = lambda c: False

    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise ValueError(f"policy {self.name}: unknown collective {self.collective!r}, expected one of {COLLECTIVES}")
        if self.collective != ALL_GATHER:
            kinds = REDUCIBLE[self.collective]
            wrong = [a.name for a in self.view if a.kind not in kinds or a.over != COUNTED]
            if wrong:
                raise ValueError(f"policy {self.name}: an {self.collective} cannot fold view fields {wrong} "
                                 f"(it folds {', '.join(kinds)} over the counted rows)")
            signed = [f.name for f in self.row if f.kind not in (BOOL, COUNT)]
            if signed:  # 0 is then the identity of both ops, which is what a rank that is not counted sends
                raise ValueError(f"policy {self.name}: an all-reduce row holds counts and flags only, not {signed}")
        if self.collective_failure is not None and self.collective_failure not in self.local_inputs:
            raise ValueError(f"policy {self.name}: collective_failure {self.collective_failure!r} must be a local input")

    # ----- derived, for every consumer ------------------------------------------------

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)

    def profile(self, name: str) -> Profile:
        return next(p for p in self.profiles if p.name == name)

    def features_of(self, profile: str) -> frozenset[str]:
        return self.profile(profile).features

    @property
    def invariant_ids(self) -> tuple[str, ...]:
        return tuple(inv.id for inv in self.invariants)

    def invariant(self, prop: str) -> Optional[Invariant]:
        return next((inv for inv in self.invariants if inv.id == prop), None)

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.inputs)

    @property
    def row_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.row)

    @property
    def count_field(self) -> str:
        """The view field that counts the counted rows (the DP groups): the proofs' induction runs over it."""
        counts = [a.name for a in self.view if a.kind == "count"]
        if len(counts) != 1:
            raise ValueError(f"policy {self.name}: the view needs exactly one count field, has {counts}")
        return counts[0]

    @property
    def state_names(self) -> tuple[str, ...]:
        return self.state_cls._fields  # type: ignore[attr-defined, no-any-return]

    @property
    def decision_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.decision_fields)

    def guard_functions(self) -> dict[str, Callable[..., Any]]:
        """Every public function of the guards' module, in definition order (read now, so patches show),
        except the helpers it imports from the rest of the spec."""
        module = self.guards
        if self.guard_names:
            return {name: getattr(module, name) for name in self.guard_names}
        package = module.__name__.rpartition(".")[0]
        return {
            name: fn
            for name, fn in vars(module).items()
            if not name.startswith("_")
            and isinstance(fn, types.FunctionType)
            and (fn.__module__ == module.__name__ or not fn.__module__.startswith(package + "."))
        }

    # ----- the gathered view, folded as ``view`` declares ------------------------------

    def counted_rows(self, c: Any, rows: Sequence[Sequence[Any]]) -> Sequence[Sequence[Any]]:
        """The first row of each DP group (attn_cp x attn_tp ranks, DP-major), from all rows in global rank order."""
        return rows[:: c.group_size][: c.dp_dim]

    def gathered_view(self, o: Any, c: Any, rows: Sequence[Sequence[Any]]) -> Any:
        """Fold the rows into the view the guards read, one ``Agg`` at a time, in declaration order. Python values
        (``o`` is ``PY``, the README's stepping API) are checked first (``check_rows``)."""
        if o is PY:
            self.check_rows(c, rows)
        counted = rows[:: c.group_size][: c.dp_dim]
        values = []
        for kind, i, over_all in self._fold_plan:
            src = rows if over_all else counted
            if i is None:  # count: validated with the Agg
                values.append(len(src))
            elif kind == "max":
                values.append(o.MaxOf([r[i] for r in src]))
            elif kind == "sum":
                values.append(o.SumOf(r[i] for r in src))
            else:  # any: the sum of a 0/1 field is positive
                values.append(o.SumOf(r[i] for r in src) > 0)
        return self.view_cls(*values)

    def check_rows(self, c: Any, rows: Any) -> None:
        """``TypeError`` / ``ValueError`` naming the first malformed row or value of ``rows`` (every rank's row, in
        global rank order): else a short row fails deep in a fold with a bare ``IndexError``, a string one with a
        ``TypeError`` from ``sum``, and too few rows or a negative count are folded into a wrong view without a word."""
        highs = self._row_highs
        if highs is not None and type(rows) is list and len(rows) == c.world_size and all(
                type(row) is list and len(row) >= len(highs)
                and all(type(v) is int and 0 <= v <= hi for v, hi in zip(row, highs)) for row in rows):
            return  # the usual rows, at a few checks per value: what the slow path below would accept
        names = ", ".join(self.row_names)
        if isinstance(rows, (str, bytes)) or not hasattr(rows, "__len__"):
            raise TypeError(f"rows: expected a list of {c.world_size} rows (every rank's, in global rank order), "
                            f"got {type(rows).__name__} {rows!r:.60}")
        if len(rows) != c.world_size:
            raise ValueError(f"rows: expected {c.world_size} rows (every rank's, in global rank order: dp_size x "
                             f"attn_cp_size x attn_tp_size), got {len(rows)}")
        for r, row in enumerate(rows):
            if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
                raise TypeError(f"rows[{r}]: expected a row of {len(self.row)} values ({names}), "
                                f"got {type(row).__name__} {row!r:.60}")
            if len(row) < len(self.row):  # a longer row is a gathered one: the runtime's envelope follows, unread
                raise ValueError(f"rows[{r}]: expected {len(self.row)} values ({names}), got {len(row)}")
            for i, (f, v) in enumerate(zip(self.row, row)):
                why = _row_value_problem(f.kind, v)
                if why is not None:
                    raise why[0](f"rows[{r}][{i}] ({f.name}): {why[1]}")

    @functools.cached_property
    def _row_highs(self) -> Optional[tuple[int, ...]]:
        """Each row field's largest value, for ``check_rows``' fast path (``None``: a field is neither flag nor count)."""
        highs = {BOOL: 1, COUNT: MAX_COUNT}
        return None if any(f.kind not in highs for f in self.row) else tuple(highs[f.kind] for f in self.row)

    def received_rows(self, c: Any) -> int:
        """How many rows a pass's collective hands each rank: every rank's, or one reduced row."""
        return c.world_size if self.collective == ALL_GATHER else 1

    def view_of(self, o: Any, c: Any, received: Sequence[Sequence[Any]]) -> Any:
        """The view from what the collective handed this rank (``received_rows`` rows): the fold of the gathered
        rows, or the reduced row read slot by slot (what the fold gives, since every field is the op's own fold)."""
        if self.collective == ALL_GATHER:
            return self.gathered_view(o, c, received)
        if o is PY:
            self.check_reduced(c, received)
        (reduced,) = received
        values = []
        for kind, i, _ in self._fold_plan:
            if i is None:
                values.append(c.dp_dim)
            elif kind == "any":
                values.append(reduced[i] > 0)
            else:
                values.append(reduced[i])
        return self.view_cls(*values)

    def check_reduced(self, c: Any, received: Any) -> None:
        """``TypeError`` / ``ValueError`` naming what is wrong with the one row an all-reduce hands a rank (``check_rows``
        for the reduced row): else two rows fail with a bare "too many values to unpack", a short row with an
        ``IndexError``, and a value no reduce gives is read into a wrong view without a word. Each slot is its row
        field reduced over the counted rows (a rank that is not counted sends 0): under ``ALL_REDUCE_SUM`` a sum, up to
        ``dp_dim`` times one rank's largest value (a flag's sum, which ``sum`` and ``any`` read, up to ``dp_dim``);
        under ``ALL_REDUCE_MAX`` the largest, which ``max`` and ``any`` read."""
        highs = self._row_highs
        assert highs is not None  # an all-reduce row holds counts and flags only (``__post_init__``)
        summed = self.collective == ALL_REDUCE_SUM
        scale = c.dp_dim if summed else 1
        if type(received) is list and len(received) == 1 and type(received[0]) is list and len(received[0]) >= len(highs) \
                and all(type(v) is int and 0 <= v <= hi * scale for v, hi in zip(received[0], highs)):
            return  # the usual row, at a few checks per value: what the slow path below would accept
        names = ", ".join(self.row_names)
        what = f"the one row an {self.collective} hands each rank, its slots reduced over the DP ranks"
        if isinstance(received, (str, bytes)) or not hasattr(received, "__len__"):
            raise TypeError(f"rows: expected a list of 1 row ({what}), got {type(received).__name__} {received!r:.60}")
        if len(received) != 1:
            raise ValueError(f"rows: expected 1 row ({what}), got {len(received)}")
        row = received[0]
        if isinstance(row, (str, bytes)) or not hasattr(row, "__len__"):
            raise TypeError(f"rows[0]: expected a row of {len(self.row)} values ({names}), got {type(row).__name__} {row!r:.60}")
        if len(row) < len(self.row):  # a longer row is the reduced one whole: the runtime's envelope follows, unread
            raise ValueError(f"rows[0]: expected {len(self.row)} values ({names}), got {len(row)}")
        ranks = "1 DP rank's" if c.dp_dim == 1 else f"{c.dp_dim} DP ranks'"
        for i, (f, v, hi) in enumerate(zip(self.row, row, highs)):
            each = "0 or 1" if f.kind == BOOL else f"0 to {hi}"
            how = f"the sum of {ranks} values, each {each}" if summed else f"the largest of the DP ranks' values, each {each}"
            if not isinstance(v, int) or isinstance(v, bool) and (summed or f.kind != BOOL):  # a flag's maximum is a flag
                raise TypeError(f"rows[0][{i}] ({f.name}): expected an int ({how}), got {type(v).__name__} {v!r:.60}")
            if not 0 <= v <= hi * scale:
                raise ValueError(f"rows[0][{i}] ({f.name}): expected an int in [0, {hi * scale}] ({how}), got {v!r}")

    @functools.cached_property
    def _fold_plan(self) -> tuple[tuple[str, Optional[int], bool], ...]:
        """Each view field's (kind, row index, over all rows), read once from ``view``."""
        index = {f.name: i for i, f in enumerate(self.row)}
        return tuple((a.kind, None if a.field is None else index[a.field], a.over == ALL) for a in self.view)

    def control_code(self, control: str) -> int:
        """The control state as the integer the proofs encode it by."""
        return self.states.index(control)


def _row_value_problem(kind: str, value: Any) -> Optional[tuple[type[Exception], str]]:
    """Why ``value`` cannot be a row's ``kind`` field, with the exception that says it: a flag travels as 0 or 1 (an
    int, or a bool), a count as an int in ``[0, MAX_COUNT]``; the other kinds as their inputs (``value_problem``)."""
    if kind == BOOL:
        if not isinstance(value, int):
            return TypeError, f"expected 0 or 1, got {type(value).__name__} {value!r:.60}"
        return None if value in (0, 1) else (ValueError, f"expected 0 or 1, got {value!r}")
    if kind not in _VALUE_KINDS:
        return None
    why = value_problem(kind, value)
    if why is None:
        return None
    wrong_type = isinstance(value, bool) or not isinstance(value, int if kind == COUNT else (int, float))
    return (TypeError if wrong_type else ValueError), why


@dataclass(frozen=True)
class ProofHooks:
    """What the proofs need of a policy beyond its spec: the scope, symbolic stand-ins, witnesses.

    Every function here is written over the symbolic operator layer (``o.Int``,
    ``o.Real``, ``o.Bool`` make variables), so the spec imports no solver.
    """

    outputs: tuple[str, ...]  # the decision fields the proofs encode, in the order they build them
    families: Callable[..., list]  # (profile, scope) -> the structural variants a property is checked on
    scope_ranges: Callable[..., str]  # (families) -> the parameter ranges a proof on them covers, in words
    layout_range: str  # what aggregate-view's proof covers, in words
    default_scope: Any  # the Scope ``prove`` uses by default
    scope_of: Callable[..., Any]  # (dp_size=None, **pinned parameters) -> the Scope of ``prove``'s options
    scope_options: tuple["ScopeOption", ...]  # the parameters ``prove`` offers to pin, one option each
    sym_config: Callable[..., Any]  # (o, family, tag) -> the configuration with its numbers symbolic
    config_domain: Callable[..., list]  # (o, c) -> the valid range of the symbolic numbers
    concrete: Callable[..., Any]  # (family, scope) -> the family at one value of each "every value" switch
    # aggregate-view: rows and views that witness completeness
    witness_row: Callable[..., tuple]  # (o, c, v) -> (inputs, local) of a row that adds one counted rank to a view
    split_view: Callable[..., Any]  # (o, v) -> the view of one counted row fewer (to pair with witness_row)
    idle_row: Callable[..., tuple]  # (o,) -> (inputs, local) of a row that adds nothing
    layout_witness: Callable[..., tuple]  # (o, c, v, group, counted, groups) -> (inputs, local) of a rank of a concrete layout
    reference: Optional[Callable[..., Any]] = None  # refinement: (o, c, st, v, now, inp) -> (outputs by name, next state)
    reference_row: Optional[Callable[..., list]] = None  # (o, c, inp, local) -> the row, as the release's code builds it
    # bounded model checking: trace-friendly parameter ranges, and readable numbers
    bmc_config: Callable[..., tuple] = lambda o, c: ([], None)  # (o, c) -> (assertions, (value, ranks) -> the trace's config)
    bmc_soft: Callable[..., list] = lambda o, c: []  # (o, c) -> [(term, weight)] preferences on the configuration
    bmc_search: Mapping[str, tuple] = field(default_factory=dict)  # property -> (family picker, first restriction[, fewest passes])


@dataclass(frozen=True)
class ScopeOption:
    """A ``prove`` option that pins one parameter the proofs otherwise take at every value."""

    option: str  # "--queue-min-ratio"
    param: str  # the parameter it pins
    type: type
    help: str
    wanted: str  # the valid values, after "must be": "a number in (0, 1048576]"


@dataclass(frozen=True)
class HostBinding:
    """How an SGLang scheduler's ``PrefillDelayer`` call sites drive a policy.

    ``inputs`` maps the call's arguments (``local_prefillable, token_usage,
    running_batch, max_prefill_bs, max_running_requests, waiting_queue_len``) to
    the policy's inputs (None: the call's arguments, then ``reads``, are the
    inputs); ``idle_call`` are the arguments of a pass that reached no
    call site; ``metrics`` reads SGLang's outcome metrics from a decision;
    ``flags`` are state variables SGLang's code sets from outside, by attribute.
    """

    call: tuple[Field, ...]
    inputs: Optional[Callable[..., tuple]]  # None: the call's arguments are the inputs, in order
    idle_call: Mapping[str, Any]
    metrics: Callable[[Any], tuple]  # decision -> (forward_passes, wait_seconds, input_estimation)
    flags: Mapping[str, str] = field(default_factory=dict)  # attribute -> state field
    settings: Callable[[Any], str] = lambda c: ""  # the settings line the constructor logs, in SGLang's words
    debug_line: Callable[[Any, bool], Optional[str]] = lambda d, actual: None  # SGLang's debug log line for a pass, if any
    # inputs that are no argument of SGLang's call: the plugin reads each from the scheduler itself
    # (``integrations/sglang/readings``) and hands it to the pass's executor; they follow the call's in the inputs
    reads: tuple[Field, ...] = ()
    # a ``max_prefill_bs`` tracker (``spec.trackers``; ``decay`` so far) the delayer keeps itself from the executor's
    # ``finalize(actual_prefill_bs=)`` (SGLang 0.5.18 on) and negotiates with in place of the scheduler's argument;
    # None: the scheduler's
    own_max_prefill_bs: Optional[str] = None
    # (the policy's configuration) -> the prompt tokens left above which a refusal also holds this rank's chunk in
    # flight (``holds_chunk``; the plugin parks it at ``add_chunked_req``, which reads ``chunk_tokens_left``); None:
    # the chunk goes on whatever the verdict, as SGLang's ``add_chunked_req`` does
    chunk_hold: Callable[[Any], Optional[int]] = lambda c: None
    # (the refused pass's view) -> whether a chunk past that threshold waits for this group (read after the refusal)
    chunk_hold_waits: Callable[[Any], bool] = lambda v: True


def holds_chunk(threshold: Optional[int], tokens_left: int) -> bool:
    """Whether a refusal may hold a chunk in flight with ``tokens_left`` prompt tokens left, under a hold threshold
    (``HostBinding.chunk_hold``; None: no hold): while more than the threshold is left. The plugin asks it before it
    negotiates, and ``HostBinding.chunk_hold_waits`` after the refusal (``chunk_held``, the two in one)."""
    return threshold is not None and tokens_left > threshold


def chunk_held(host: "HostBinding", config: Any, tokens_left: int, view: Callable[[], Any]) -> bool:
    """After a refusal: whether it holds the rank's chunk in flight, by the host's threshold on ``config`` and its
    test of the pass's ``view`` (called only past the threshold). What the simulator applies; the plugin the same."""
    return holds_chunk(host.chunk_hold(config), tokens_left) and host.chunk_hold_waits(view())


@dataclass(frozen=True)
class SimBinding:
    """Where the simulated scheduler consults the policy, which scheduler facts feed its inputs, and how the
    scheduler acts on a verdict beyond admitting or not (declared here, so the simulator names no policy)."""

    call_site: str  # "admission": inside the prefill adder, as SGLang's delayer; "gate": before admission
    inputs: Callable[..., tuple]  # (facts) -> the policy's inputs for a rank that asks
    idle_inputs: Callable[..., tuple]  # (facts) -> the inputs of a rank that reached no call site
    outcome: Callable[[Any], tuple] = lambda d: ("", d.output_allow, d.output_reason, 0)  # (estimation, allow, reason, forward_passes)
    colours: Mapping[str, str] = field(default_factory=dict)  # reason -> colour in the simulator's timeline plot
    # whether a refusal also holds a chunked prefill in progress (its next chunk waits); False: the chunk goes on
    # whatever the verdict, as SGLang's add_chunked_req does; or (the rank's policy core after the refusal, the rank's
    # facts) -> that, pass by pass (``aligned``'s opt-in hold: ``chunk_held``)
    gates_partial_chunk: Union[bool, Callable[[Any, Any], bool]] = False
    # (decision) -> the pass is a prefill phase on every rank: a rank without a prefill batch idles instead of
    # decoding; None: a rank that does not prefill decodes
    prefill_phase: Optional[Callable[[Any], bool]] = None
    # (the simulated scheduler's settings, by SGLang's names) -> the policy parameters they stand for (a --set wins)
    params: Callable[[Mapping[str, Any]], Mapping[str, Any]] = lambda s: {}


def with_states(cls: Any, names: Sequence[str]) -> None:
    """Check that a State class has ``control`` first and ``names`` after it."""
    if tuple(cls._fields) != ("control", *names):
        raise ValueError(f"{cls.__name__} must be (control, {', '.join(names)}), got {cls._fields}")
