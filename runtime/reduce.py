"""The runtime's all-reduce: one collective per pass for a policy that declares one (``Policy.collective``).

A policy whose view is a fold an all-reduce computes (sums, or maxima, and
flags, over the counted rows) can decide from the reduced row alone, as
ATOM's delayers do with ``all_reduce(SUM)`` / ``all_reduce(MAX)`` over int64
slots. Each rank contributes its row (a rank that is not counted: zeros, the
identity of both ops for counts and flags), then the envelope; every rank
receives the one reduced row and steps the compiled table on it.

The envelope keeps today's failure handling without per-rank rows, from
reduced values only, so every rank reaches the same verdict:

* a bad input: each bad rank adds 1 to a count and its rank + 1 to a rank slot
  (SUM), or raises a flag and sends its rank + 1 and -(rank + 1) (MAX), and a 1
  in the slot of every bad field; one bad rank is named with its fields, as the
  gather names it, several by their number;
* a configuration mismatch: SUM sends each 16-bit chunk of the fingerprint and
  its square (all equal iff ``world * sum(x^2) == sum(x)^2`` for every chunk:
  the variance is zero), MAX sends the fingerprint and its negation (all equal
  iff the max is minus the max of the negations);
* a dead peer or another failure of the collective: ``CollectiveError`` on the
  rank that saw it, unless the policy's profile fails open
  (``Policy.collective_failure``): that rank then decides on its own, with the
  policy's failure input set, and logs the failed collective.

``ReduceCore`` is ``runtime.PolicyCore`` with this envelope and pass; building
a ``PolicyCore`` for such a policy gives one. Its collective is a callable
with ``all_reduce(row) -> reduced`` (``TorchAllReduce``), or any
``gather(row) -> rows`` (``runtime.inprocess``), whose rows it reduces itself
with the same op.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import math
import operator
from typing import Any, Callable, NoReturn, Optional, Sequence

from ..spec.errors import ConfigError, PassInputError
from ..spec.fields import SECONDS, clock_problem, quick_test
from ..spec.inputs import CLOCK, checks_of
from ..spec.policy import ALL_GATHER, ALL_REDUCE_MAX, ALL_REDUCE_SUM
from .core import CollectiveError, PolicyCore
from .errors import ConfigMismatchError, PeerInputError, shown
from .gather import collective_group, import_torch

logger = logging.getLogger(__name__)

CHUNK_BITS, CHUNKS = 16, 4  # a 62-bit fingerprint in four chunks: a square summed over 2^16 ranks fits int64
NONE_BAD = -(2**62)  # MAX: the negated-rank slot of a rank without a bad input


def _chunks(fp: int) -> list[int]:
    return [(fp >> (CHUNK_BITS * k)) & ((1 << CHUNK_BITS) - 1) for k in range(CHUNKS)]


class ReduceEnvelope:
    """Positions and checks of one configuration's reduced row (the policy's fields, then the envelope)."""

    def __init__(self, config: Any, rank: Optional[int]) -> None:
        self.config = config
        self.policy = policy = config.policy
        self.op = policy.collective
        self.checks = checks_of(policy)
        self.fields = self.checks.mask_fields_order  # inputs, then the clock
        self.n_policy = len(policy.row)
        self.world_size = config.world_size
        self.fingerprint = config.fingerprint()
        if rank is None and config.group_size > 1:
            raise ConfigError(
                f"{policy.name} all-reduces over {config.world_size} ranks in DP groups of {config.group_size}: "
                "its collective must know this rank's place in the group (a rank attribute)"
            )
        self.rank = 0 if rank is None else rank
        self.counted = self.rank % config.group_size == 0
        if self.op == ALL_REDUCE_SUM:
            self.env_fields = ("bad_ranks", "bad_rank_sum", *(f"bad_{f}" for f in self.fields),
                               *(f"fp{k}{sq}" for k in range(CHUNKS) for sq in ("", "_sq")))
            chunks = _chunks(self.fingerprint)
            self.fp_tail = [x for ch in chunks for x in (ch, ch * ch)]
            self.tail = tuple([0, 0] + [0] * len(self.fields) + self.fp_tail)
            self.clean_tail = [self.world_size * x for x in self.tail]
        elif self.op == ALL_REDUCE_MAX:
            self.env_fields = ("bad_any", "bad_rank_max", "bad_rank_neg", *(f"bad_{f}" for f in self.fields), "fp", "fp_neg")
            self.fp_tail = [self.fingerprint, -self.fingerprint]
            self.tail = tuple([0, 0, NONE_BAD] + [0] * len(self.fields) + self.fp_tail)
            self.clean_tail = list(self.tail)
        else:
            raise ValueError(f"{policy.name}: {self.op!r} is not an all-reduce")
        self.row_len = self.n_policy + len(self.env_fields)
        self.flat_len = self.row_len  # what the collective hands back: one row
        self.identity = [0] * self.n_policy
        # PolicyCore reads these of a gather envelope; the reduced row has no per-rank columns.
        self.f_error = self.n_policy
        self.f_fingerprint = self.row_len - len(self.fp_tail)

    @property
    def row_fields(self) -> tuple[str, ...]:
        return self.policy.row_names + self.env_fields

    def contribution(self, row: list[int]) -> list[int]:
        """This rank's share of the reduce: its row, or the identity when it is not counted."""
        return row if self.counted else self.identity + row[self.n_policy:]

    def error_row(self, problems: list[tuple[str, str]]) -> list[int]:
        bad = [1 if any(name == f for name, _ in problems) else 0 for f in self.fields]
        me = self.rank + 1
        head = [1, me] if self.op == ALL_REDUCE_SUM else [1, me, -me]
        return self.identity + head + bad + self.fp_tail

    def clean(self, reduced: Sequence[int]) -> bool:
        return len(reduced) == self.row_len and list(reduced[self.n_policy:]) == self.clean_tail

    def policy_rows(self, reduced: Sequence[int]) -> list[Sequence[int]]:
        """The one reduced row's policy fields (what the view reads)."""
        return [reduced[: self.n_policy]]

    def _same_fingerprints(self, env: Sequence[int]) -> tuple[bool, str]:
        """Whether every rank sent one fingerprint, from the reduced slots alone (the same answer on every rank)."""
        fp = env[len(env) - len(self.fp_tail):]
        if self.op == ALL_REDUCE_SUM:
            spread = [k for k in range(CHUNKS) if self.world_size * fp[2 * k + 1] != fp[2 * k] ** 2]
            return not spread, f"the all-reduced fingerprint chunks {spread} have a spread over the ranks"
        return fp[0] == -fp[1], f"the all-reduced fingerprints range from {-fp[1]:#018x} to {fp[0]:#018x}"

    def reject(self, reduced: Sequence[int], pass_number: int, group: str, problems: list[tuple[str, str]],
               clock_error: Optional[BaseException] = None) -> NoReturn:
        """Raise the error the reduced row calls for; every rank reaches the same verdict."""
        if len(reduced) != self.row_len:
            raise CollectiveError(
                f"pass {pass_number}: all-reduce over {group} returned {len(reduced)} values, expected {self.row_len}",
                pass_number=pass_number, group=group,
            )
        for name, x in zip(self.row_fields, reduced):
            try:
                operator.index(x)
            except TypeError:  # a custom collective's floats, say: said here, never a TypeError below
                raise CollectiveError(
                    f"pass {pass_number}: all-reduce over {group} returned {shown(x)} as {name}, where the "
                    "row holds ints (int64)", pass_number=pass_number, group=group,
                ) from None
        env = list(reduced[self.n_policy:])
        same, spread = self._same_fingerprints(env)
        if not same:
            raise _config_mismatch(pass_number, spread, self.config.as_dict())
        nfields = len(self.fields)
        first_bad = 2 if self.op == ALL_REDUCE_SUM else 3
        flags = env[first_bad:first_bad + nfields]
        named = [f for f, x in zip(self.fields, flags) if x]
        local = PassInputError("invalid negotiate input: " + "; ".join(f"{n}: {why}" for n, why in problems)) if problems else None
        if local is not None and clock_error is not None:
            local.__cause__ = clock_error
        if env[0]:
            if self.op == ALL_REDUCE_SUM:
                one = env[0] == 1
                rank, count = env[1] - 1, env[0]
            else:
                one = env[1] == -env[2]
                rank, count = env[1] - 1, None
            if one:
                raise PeerInputError(pass_number=pass_number, bad_fields={rank: named}) from local
            raise _several_bad(pass_number, count, dict(zip(self.fields, flags)), self.op) from local
        if local is not None:  # the collective lost our error: still refuse the pass
            raise local
        off = ", ".join(f"{name} {got} where valid rows give {want}"
                        for name, got, want in zip(self.env_fields, env, self.clean_tail) if got != want)
        raise CollectiveError(
            f"pass {pass_number}: all-reduce over {group} returned an envelope no set of valid rows gives: {off}",
            pass_number=pass_number, group=group,
        )


def _config_mismatch(pass_number: int, spread: str, local_config: Any) -> ConfigMismatchError:
    """A ``ConfigMismatchError`` seen in the reduced fingerprint slots: no per-rank list, the same message on every rank."""
    err = ConfigMismatchError.__new__(ConfigMismatchError)
    ConfigError.__init__(err, f"pass {pass_number}: ranks of the group were built with different configurations ({spread}); "
                              "build every rank with the same parameters, layout and profile")
    err.pass_number, err.fingerprints, err.local_config = pass_number, {}, dict(local_config)
    return err


def _several_bad(pass_number: int, count: Optional[int], fields: dict[str, int], op: str) -> PeerInputError:
    """A ``PeerInputError`` of several ranks: the reduced slots say how many (SUM) and which fields, not which ranks."""
    who = f"{count} ranks" if count is not None else "several ranks"
    if op == ALL_REDUCE_SUM:
        parts = "; ".join(f"{f}: {n} rank{'s' if n > 1 else ''}" for f, n in fields.items() if n)
    else:
        parts = ", ".join(f for f, n in fields.items() if n)
    err = PeerInputError.__new__(PeerInputError)
    PassInputError.__init__(err, f"pass {pass_number}: invalid negotiate input on {who} ({parts})")
    err.pass_number, err.bad_fields = pass_number, {}
    return err


def envelope_for(config: Any, rank: Optional[int] = 0) -> Any:
    """The runtime's envelope of ``config``'s rows: ``runtime.envelope.Envelope`` for an all-gather, else this one
    (what a decision log's ``rows`` hold: every rank's rows, or the one reduced row)."""
    if config.policy.collective == ALL_GATHER:
        from .envelope import Envelope

        return Envelope(config)
    return ReduceEnvelope(config, rank)


def reduce_rows(rows: Sequence[Sequence[int]], op: str, row_len: int) -> list[int]:
    """The elementwise SUM or MAX of a gather's rows: what the all-reduce would give."""
    if not rows or any(len(r) != row_len for r in rows):
        raise ValueError(f"expected rows of {row_len} values, got lengths {sorted({len(r) for r in rows})}")
    if op == ALL_REDUCE_SUM:
        return [sum(col) for col in zip(*rows)]
    return [max(col) for col in zip(*rows)]


class TorchAllReduce:
    """``torch.distributed.all_reduce`` of one int64 row per rank, into a preallocated buffer.

    As ``runtime.gather.TorchGather``: one collective and one host read per
    pass, the row written through a ``ctypes`` view of the buffer's host memory.
    """

    def __init__(self, group: Any, device: Any, world_size: int, row_len: int, op: str, *, group_name: str = "cpu_group") -> None:
        torch, dist = import_torch()
        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigError(f"the all-reduce needs an initialized torch.distributed process group for its {group_name}")
        size = dist.get_world_size(group)
        if size < 0:
            raise ConfigError(f"this process is not a member of the {group_name} it was given")
        if size != world_size:
            raise ConfigError(f"{group_name} has {size} ranks but the configuration needs {world_size}: pass the group the "
                              "policy reduces over")
        self._dist, self._group = dist, group
        self._op = dist.ReduceOp.SUM if op == ALL_REDUCE_SUM else dist.ReduceOp.MAX
        self.rank: int = dist.get_rank(group)
        self.world_size, self.row_len = world_size, row_len
        self.device = torch.device(device)
        self.description = (f"{group_name} ({dist.get_backend(group)}, all_reduce {op[len('all_reduce_'):].upper()}, "
                            f"{world_size} ranks, device {self.device}, this rank {self.rank})")
        self._buf = torch.zeros(row_len, dtype=torch.int64, device=self.device)
        self._on_host = self.device.type == "cpu"
        host = self._buf if self._on_host else torch.zeros(row_len, dtype=torch.int64, pin_memory=self.device.type == "cuda")
        self._host = host
        self._view = (ctypes.c_int64 * row_len).from_address(host.data_ptr())

    def all_reduce(self, row: Sequence[int]) -> list[int]:
        self._view[:] = row  # type: ignore[call-overload]  # ctypes takes any sequence (typeshed: a list)
        if not self._on_host:
            self._buf.copy_(self._host, non_blocking=True)
        self._dist.all_reduce(self._buf, op=self._op, group=self._group)
        if not self._on_host:
            self._host.copy_(self._buf)
        return self._view[:]

    __call__ = all_reduce  # the collective ``ReduceCore`` calls (a gather's rows it would reduce itself)

    def __repr__(self) -> str:
        return f"TorchAllReduce({self.description})"


def default_reduce(server_args: Any, cpu_group: Any, device: Any, device_group: Any, config: Any) -> TorchAllReduce:
    """The all-reduce over the group SGLang's delayer would gather over (``runtime.gather.default_gather``'s choice)."""
    group, on, name = collective_group(server_args, cpu_group, device, device_group)
    return TorchAllReduce(group, on, config.world_size, ReduceEnvelope(config, 0).row_len, config.policy.collective,
                          group_name=name)


class ReduceCore(PolicyCore):
    """``PolicyCore`` for a policy whose collective is an all-reduce (what ``PolicyCore(...)`` builds for one)."""

    def _make_envelope(self, config: Any, gather: Any) -> Any:
        rank = getattr(gather, "rank", None)
        return ReduceEnvelope(config, rank if isinstance(rank, int) and not isinstance(rank, bool) else None)

    def _pass_function(self) -> Callable[..., Any]:
        env = self.envelope
        self._reduce: Optional[Callable[[Sequence[int]], Sequence[int]]] = getattr(self._gather, "all_reduce", None)
        self._contribution = env.contribution
        self._clean_tail, self._k = env.clean_tail, env.n_policy
        policy = self.policy
        self._fails_open = policy.collective_failure is not None and bool(policy.fails_open(self.config))
        return _compiled_reduce_pass(policy.name)

    def _collect(self, row: list[int]) -> Sequence[int]:
        """The reduced row: the collective's own all-reduce, or the rows of a gather reduced here."""
        if self._reduce is not None:
            return self._reduce(row)
        rows = self._gather(row)
        return reduce_rows(rows, self.envelope.op, self.envelope.row_len)

    def _failed_open(self, err: BaseException, pass_number: int, state: Any, now: Any, args: tuple) -> Any:
        """The policy's own fail-open: decide on this rank alone, the failure input set, on an empty reduced row."""
        logger.warning("%s: pass %d: all-reduce over %s failed (%s: %s); this rank decides alone (the profile fails open)",
                       self.policy.name, pass_number, self._group, type(err).__name__, err)
        if self._log is not None:
            failure = CollectiveError(f"pass {pass_number}: all-reduce over {self._group} failed: {type(err).__name__}: {err}",
                                      pass_number=pass_number, group=self._group)
            self._log.failed(pass_number, now, self._inputs_dict(args), None, state, failure)
        empty = [0] * self.envelope.row_len
        local = [True if n == self.policy.collective_failure else v for n, v in zip(self.policy.input_names, args)
                 if n in self.policy.local_inputs]
        decision = self._step.negotiate(state, now, *local, empty)
        self._state = decision.next_state
        self._passes = pass_number
        return decision


# One pass over an all-reduce, compiled per policy as ``core._PASS`` is: ``{params}`` the inputs with their
# defaults, ``{args}`` the same names, ``{local}`` the local inputs the compiled negotiate reads, ``{readings}``
# what the decision log records. The failure input (``Policy.collective_failure``) is False unless the collective
# raised; a caller may pass True to stand for that (a test, a simulator), and the pass then decides as the failed rank.
_REDUCE_PASS = """
def negotiate(self, {params}):
    step = self._step
    state = self._state
    if state[0] in self._finalizing:  # a pass that negotiated and did not end with finalize
        state = step.finalize(state)
    pass_number = self._passes + 1
    problems = [] if {valid} else self._problems({args})
    clock_error = None
    try:
        now = self._clock()
    except Exception as err:  # still take part in the reduce: the peers must not hang
        now, clock_error = None, err
    if clock_error is not None or not ({clock_valid}):  # the usual reading passes this test alone
        problem = _clock_problem(now, clock_error)
        if problem is not None:
            problems = [*problems, (_CLOCK, problem)]
    row = self.envelope.error_row(problems) if problems else self._contribution(step.row(state, now, {args}))
    try:
        reduced = self._collect(row)
    except Exception as err:
        if self._fails_open and not problems:
            return self._failed_open(err, pass_number, state, now, ({args},))
        failure = _CollectiveError(
            f"pass {{pass_number}}: all-reduce over {{self._group}} failed: {{type(err).__name__}}: {{err}}",
            pass_number=pass_number,
            group=self._group,
        )
        if self._log is not None:
            self._log.failed(pass_number, now, self._inputs_dict(({args},)), None, state, failure)
        raise failure from err
    try:
        if problems or len(reduced) != self._flat_len or reduced[self._k:] != self._clean_tail:
            self.envelope.reject(reduced, pass_number, self._group, problems, clock_error)
    except Exception as failure:
        if self._log is not None:
            self._log.failed(pass_number, now, self._inputs_dict(({args},)), reduced, state, failure)
        raise
    decision = step.negotiate(state, now, {local}reduced)
    if self._shadow is not None:
        self._crosscheck(state, now, ({args},), reduced, decision)
    self._state = decision.next_state
    self._passes = pass_number
    log = self._log
    if log is not None:
        log.passed(pass_number, now, ({readings}), reduced, state, decision)
    return decision
"""


@functools.lru_cache(maxsize=None)
def _compiled_reduce_pass(policy_name: str) -> Callable[..., Any]:
    from ..spec.registry import policy_named

    policy = policy_named(policy_name)
    params = ", ".join(f.name if f.default is None else f"{f.name}={f.default!r}" for f in policy.inputs)
    source = _REDUCE_PASS.format(params=params, args=", ".join(policy.input_names),
                                 local="".join(f"{n}, " for n in policy.local_inputs),
                                 readings="".join(f"{n}, " for n, _ in policy.log.readings),
                                 valid=checks_of(policy).quick_source, clock_valid=quick_test(SECONDS, "now"))
    namespace: dict[str, Any] = {"_clock_problem": clock_problem, "_CLOCK": CLOCK, "_CollectiveError": CollectiveError,
                                 "_INF": math.inf}
    exec(compile(source, f"<prefill_delayer.runtime.reduce pass of {policy_name}>", "exec"), namespace)
    fn: Callable[..., Any] = namespace["negotiate"]
    fn.__doc__ = PolicyCore.negotiate.__doc__
    return fn
