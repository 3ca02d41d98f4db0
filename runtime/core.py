"""One rank of any policy over one collective per pass: the runtime's core.

One pass, on every rank: read the clock once, validate the inputs, build this
rank's row (the policy's ``local_row``, compiled, then the envelope), all-gather
the rows, check them, and step the compiled table on them. No guard is restated
here: the step is ``fsm.compiled.CompiledStep``, the policy's table compiled for
this configuration. With ``PREFILL_DELAYER_CROSSCHECK=1`` every pass is also
fired through the ``transitions`` machine (``fsm.DelayerMachine``) and any
difference raises ``AssertionError``; the test suite runs that way.

Failures never half-update the state: a pass computes its next state without
touching the current one and stores it only once the pass has succeeded.
Errors whose cause is in the gathered rows (a bad input on some rank, a
configuration mismatch, rows of another pass or of another delayer) are raised
identically on every rank, after a collective every rank took part in
(``runtime.envelope``).

Each row carries the rank's pass number (``pass_stamp``). A pass ends at
``finalize()``, which advances it; ``negotiate`` never does. So a rank that
ends a pass without negotiating (a skip) or negotiates twice before ending one
(a repeat) sends another pass number than its peers on the next collective,
and every rank raises ``DesyncError`` there instead of deciding on rows of
different passes. ``skip()`` announces a skip in the pass itself.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import time
import types
import weakref
from typing import Any, Callable, Optional, Sequence, cast

from ..fsm import DelayerMachine, Step
from ..fsm.compiled import CompiledStep
from ..spec.errors import ConfigError
from ..spec.fields import SECONDS, clock_problem, quick_test
from ..spec.inputs import CLOCK, checks_of
from ..spec.policy import ALL_GATHER
from .decision_log import DecisionLog, open_decision_log
from .envelope import PASS_MASK, Envelope, ensure_rows, envelope_positions
from .errors import CollectiveError
from .gather import Collective, GatherFn, describe
# Fire every pass through the ``transitions`` machine too and compare (tests, debugging).
CROSSCHECK_ENV = "PREFILL_DELAYER_CROSSCHECK"
CROSSCHECK_ON, CROSSCHECK_OFF = ("1", "true"), ("", "0", "false")  # as SGLang's bool variables, case-insensitive


def crosscheck_on() -> bool:
    """Whether ``PREFILL_DELAYER_CROSSCHECK`` turns the cross-check on; a value it does not take (``yes``, ``2``) is a
    ``ConfigError``, not the cross-check silently off."""
    raw = os.environ.get(CROSSCHECK_ENV, "")
    value = raw.strip().lower()
    if value not in CROSSCHECK_ON + CROSSCHECK_OFF:
        raise ConfigError(f"{CROSSCHECK_ENV}={raw!r}: expected 1 or true (on), or 0, false or unset (off)")
    return value in CROSSCHECK_ON


class PolicyCore:
    """One rank's policy: its state, one all-gather per pass, the decision log.

    ``negotiate(*inputs)`` takes the policy's inputs in declaration order (defaults
    filled for the ones left out); ``finalize()`` ends the pass. ``gather`` is a
    ``gather(row) -> rows`` callable (``runtime.gather``, ``runtime.inprocess``);
    ``clock`` returns seconds and is read exactly once per pass.
    """

    def __new__(cls, config: Any, *args: Any, **kwargs: Any) -> "PolicyCore":
        if cls is PolicyCore and config.policy.collective != ALL_GATHER:  # an all-reduce policy: runtime.reduce's core
            from .reduce import ReduceCore

            cls = ReduceCore
        return object.__new__(cls)

    def __init__(
        self,
        config: Any,
        gather: Collective,
        *,
        clock: Optional[Callable[[], float]] = None,
        decision_log: Any = None,
        registry: Any = None,
    ) -> None:
        self.config = c = config
        self.policy = policy = c.policy
        if clock is not None and not callable(clock):
            raise ConfigError(f"clock must be a callable returning seconds, got {clock!r}")
        self._clock: Callable[[], float] = clock if clock is not None else time.perf_counter
        if not callable(gather):
            raise ConfigError(f"gather must be a callable gather(row) -> rows, got {gather!r}")
        size = getattr(gather, "world_size", None)
        if size is not None and size != c.world_size:
            raise ConfigError(
                f"the gather's group has {size} ranks but the configuration needs {c.world_size} "
                "(dp_size x attn_cp_size x attn_tp_size with DP attention, else attn_cp_size x attn_tp_size)"
            )
        # An all-reduce comes only to an all-reduce policy's core (``__new__``), which calls its ``all_reduce`` instead.
        self._gather = cast(GatherFn, gather)
        # A gather that can hand back the concatenated rows (``TorchGather``) saves
        # building per-rank lists; any other is flattened after a shape check.
        self._gather_flat: Optional[Callable[[Sequence[int]], Sequence[int]]] = getattr(gather, "gather_flat", None)
        self._group = describe(gather)
        self.envelope = env = self._make_envelope(c, gather)
        self._world_size = c.world_size
        self._flat_len = env.flat_len
        self._fingerprint = env.fingerprint
        self._fingerprints, self._no_errors = [env.fingerprint] * c.world_size, [0] * c.world_size  # the pass's checks
        self._n = env.row_len
        self._f_error, self._f_fingerprint = env.f_error, env.f_fingerprint
        # An all-reduce's row (``runtime.reduce``) is reduced, not one row per rank: it carries no pass stamp.
        self._f_stamp: Optional[int] = getattr(env, "f_stamp", None)
        self._problems = env.checks.problems
        # The compiled row ends with the envelope of a valid row, the stamp's slot 0 (each pass sets it: no append).
        row_tail = (*env.tail, 0) if self._f_stamp is not None else tuple(env.tail)
        # A gather whose ranks run in one thread, round by round (the simulator's lock-step gather), may offer
        # ``shared_step(key, make)``: one step for every rank's core of the same key, compiled once (``make``).
        shared = getattr(gather, "shared_step", None)
        make = functools.partial(CompiledStep, c, row_tail=row_tail, row_len=env.row_len)
        self._step = shared((c, row_tail, env.row_len), make) if shared is not None else make()
        self._finalizing = self._step.finalizing
        self._shadow: Optional[DelayerMachine] = DelayerMachine(c, self._step.table) if crosscheck_on() else None
        self._pure = Step(c, self._step.table)
        self._state = policy.init
        self._passes = 0
        self._flat: Optional[Sequence[int]] = None  # the last pass's gathered rows (``pass_view``)
        # The stamp of the pass this rank is on, 1 + the passes it ended (finalize): the pass number is its low bits
        # (``Envelope.stamp``), so finalize adds 1, and the stamp after pass PASS_MASK's wraps to pass 0 (mod 2**40,
        # as the rows carry it). An all-reduce's core, whose row carries no stamp, keeps the bare pass number so.
        self._stamp = env.stamp(1) if self._f_stamp is not None else 1
        self._stamp_wrap = self._stamp + PASS_MASK
        # Last: the header it writes records the finished configuration.
        self._log: Optional[DecisionLog] = open_decision_log(decision_log, c, gather, registry=registry)
        self.negotiate = types.MethodType(self._pass_function(), self)  # type: ignore[method-assign]
        if self._log is not None:
            weakref.finalize(self, self._log.close)  # flushed when the delayer goes, and at exit

    @classmethod
    def over_group(cls, config: Any, group: Any = None, *, device: Any = "cpu", **kwargs: Any) -> "PolicyCore":
        """A core whose rows are all-gathered over a ``torch.distributed`` group (``None``: the default group).

        The gather (``runtime.gather.TorchGather``) is sized from the
        configuration, so a caller of any policy needs nothing but the group.
        """
        if config.policy.collective != ALL_GATHER:
            from .reduce import ReduceEnvelope, TorchAllReduce

            row_len = ReduceEnvelope(config, 0).row_len
            return cls(config, TorchAllReduce(group, device, config.world_size, row_len, config.policy.collective), **kwargs)
        from .gather import TorchGather

        return cls(config, TorchGather(group, device, config.world_size, Envelope(config).row_len), **kwargs)

    def _make_envelope(self, config: Any, gather: Any) -> Any:
        """The runtime's part of each row for this core's collective (``runtime.reduce`` has the all-reduce's)."""
        return Envelope(config)

    def _pass_function(self) -> Callable[..., Any]:
        """The pass compiled for this policy's inputs and collective."""
        return _compiled_pass(self.policy.name)

    # ----- state -------------------------------------------------------------

    def pass_view(self) -> Any:
        """The view this rank's last pass decided from (every rank's row, as the step reads them): for a host's action
        on the verdict that reads the group (``HostBinding.chunk_hold_waits``), off the hot path."""
        if self._flat is None:
            raise RuntimeError("no pass has negotiated on this core yet: there is no view")
        return self._pure.view(self.envelope.policy_rows(self._flat))

    @property
    def state(self) -> Any:
        """Control state and extended variables (the policy's ``State``)."""
        return self._state

    @property
    def passes(self) -> int:
        """Passes negotiated successfully so far."""
        return self._passes

    @property
    def pass_number(self) -> int:
        """The pass this rank is on, as its rows stamp it: 1 + the passes it ended with ``finalize()`` (mod 2**40)."""
        return self._stamp & PASS_MASK

    @property
    def decision_log(self) -> Optional[DecisionLog]:
        """The decision log, or ``None`` when it is off."""
        return self._log

    def close(self) -> None:
        """Flush and close the decision log (if any); the core itself needs no closing."""
        if self._log is not None:
            self._log.close()

    def set_variable(self, name: str, value: Any) -> None:
        """Set a state variable from outside (SGLang's callers set the seed's one-shot skip); logged."""
        self._state = self._state._replace(**{name: value})
        if self._log is not None:
            self._log.flag_set(self._passes, name, value)

    # ----- one pass ----------------------------------------------------------

    def negotiate(self, *args: Any) -> Any:
        """One pass: gather every rank's row and fire the table's ``negotiate``; ``args`` are the policy's inputs.

        Returns the policy's decision. A pass left unfinalized by a caller is
        finalized first, but stays the same pass: its rows carry the same pass
        number, so a rank that negotiates twice while its peers move on makes
        every rank raise ``DesyncError``. Raises ``PeerInputError`` /
        ``ConfigMismatchError`` / ``DesyncError`` on every rank alike,
        ``CollectiveError`` when the gather fails; in every case the state is
        as before the call. Each core replaces this method by
        the same pass compiled for its policy's inputs (``_PASS``: named
        parameters with their defaults, no argument tuple to pack and unpack).
        """
        return self.negotiate(*args)  # the instance's compiled pass, bound in __init__

    def finalize(self) -> Any:
        """End of pass: fire the table's ``finalize`` (for SGLang's delayer: released -> idle; delaying stays).

        Advances the pass number the rows carry, whether or not this pass negotiated:
        a pass ended without a negotiation is a skip, which the next collective shows.
        """
        # one int addition and a comparison (no bitwise operation on the 63-bit stamp, no second counter): the cost
        # of the stamp at the end of a pass
        stamp = self._stamp + 1
        self._stamp = stamp if stamp != self._stamp_wrap else stamp - PASS_MASK - 1
        before = self._state
        after = self._step.finalize(before) if before[0] in self._finalizing else before
        if self._shadow is not None and after != before:  # a state without a finalize row is already finalized
            self._shadow.restore(before)
            want = self._shadow.finalize()
            if want != after:
                raise AssertionError(f"compiled finalize gave {after}, the transitions machine {want}")
        self._state = after
        return after

    def skip(self) -> None:
        """This rank's host skips this pass's negotiation: take part in the pass's one all-gather as skipping.

        When every rank skips, nothing is decided and nothing changes: the pass
        is not counted, as a pass where no rank negotiated. When some rank
        negotiates this pass instead, every rank raises the same ``DesyncError``
        (naming the skipping ranks) and the state is as before, so that no rank
        decides on a pass some ranks did not take part in, and no rank's
        all-gather pairs with another collective of the skipping rank's. Other
        failures are ``negotiate``'s (``CollectiveError``, ``ConfigMismatchError``).
        """
        env = self.envelope
        pass_number, stamp = self._passes + 1, self._stamp
        flat: Optional[Sequence[int]] = None
        try:
            flat = self._gather_rows(env.skip_row(stamp), pass_number)
            if env.all_skipped(flat, stamp):
                return
            env.reject(flat, pass_number, self._group, [], None, self._gather_again)
        except Exception as failure:
            if self._log is not None:
                self._log.failed(pass_number, None, {}, flat, self._state, failure)
            raise

    def _gather_rows(self, row: list[int], pass_number: int) -> Sequence[int]:
        """Every rank's row, concatenated; ``CollectiveError`` when the gather fails or returns another shape."""
        gather_flat = self._gather_flat
        try:
            if gather_flat is not None:
                return gather_flat(row)
            rows = self._gather(row)
        except Exception as err:
            raise self._gather_failure(err, pass_number) from err
        return ensure_rows(rows, self.envelope, pass_number, self._group)

    def _gather_failure(self, err: BaseException, pass_number: int) -> CollectiveError:
        """The error of a gather that raised. Before any pass has succeeded, it says what a peer that
        left the very first all-gather most often is: a rank without this delayer (on gloo, the rank
        whose rows are shorter is aborted, and its peers see it go)."""
        hint = ""
        if self._passes == 0:
            hint = (f" (no pass has succeeded on this group yet: if a peer runs another delayer, such as SGLang's own "
                    f"PrefillDelayer where PREFILL_DELAYER_PROFILE is not set, whose rows are not these "
                    f"{self._n} values, gloo aborts it on its first all-gather with 'Received data size doesn't "
                    "match expected size'; every rank with the plugin logs 'prefill-delayer active')")
        return CollectiveError(
            f"pass {pass_number}: all-gather over {self._group} failed: {type(err).__name__}: {err}{hint}",
            pass_number=pass_number, group=self._group,
        )

    def _unclean(self, flat: Sequence[int], pass_number: int, problems: list, clock_error: Optional[BaseException],
                 stamp: int) -> list[int]:
        """The pass's quick check of the gathered rows failed. It compares columns with lists, so rows that came
        back as another sequence (a ``gather_flat`` returning a tuple or an array) are checked again by the
        envelope's own test and go on, as a list, when clean; anything else raises the error they call for."""
        envelope: Envelope = self.envelope  # an all-gather's (an all-reduce's core has its own pass)
        if not problems and not isinstance(flat, list) and envelope.clean(flat, stamp):
            return list(flat)
        envelope.reject(flat, pass_number, self._group, problems, clock_error, self._gather_again)

    def _gather_again(self, row: list[int]) -> Sequence[int]:
        """One more row through this pass's gather (a rejected pass's detail: ``runtime.failure_detail``)."""
        if self._gather_flat is not None:
            return self._gather_flat(row)
        return [x for r in self._gather(row) for x in r]

    def _inputs_dict(self, args: Sequence[Any]) -> dict[str, Any]:
        return dict(zip(self.policy.input_names, args))

    def _crosscheck(self, state: Any, now: float, args: Sequence[Any], flat: Sequence[int], decision: Any) -> None:
        """Fire the same pass through the ``transitions`` machine; any difference is a bug here."""
        machine = self._shadow
        assert machine is not None
        rows = self.envelope.policy_rows(flat)
        machine.restore(state)
        inp = self.policy.input_cls(*args)
        want = machine.negotiate(self._pure.view(rows), self._pure.local(state, now, inp))
        if want != decision:
            raise AssertionError(f"compiled step gave {decision}, the transitions machine {want} (state {state}, rows {rows})")


# One pass, the hot path, compiled per policy: ``{params}`` are the policy's inputs with their
# defaults, ``{args}`` the same names, ``{local}`` the inputs the compiled negotiate reads.
_PASS = """
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
    except Exception as err:  # still take part in the gather: the peers must not hang
        now, clock_error = None, err
    if clock_error is not None or not ({clock_valid}):  # the usual reading passes this test alone
        problem = _clock_problem(now, clock_error)
        if problem is not None:
            problems = [*problems, (_CLOCK, problem)]
    stamp = self._stamp
    if problems:
        row = self.envelope.error_row(problems, stamp)
    else:
        row = step.row(state, now, {args})
        row[{f_stamp}] = stamp
    gather_flat = self._gather_flat
    try:
        flat = gather_flat(row) if gather_flat is not None else self._gather(row)
    except Exception as err:
        failure = self._gather_failure(err, pass_number)
        if self._log is not None:
            self._log.failed(pass_number, now, self._inputs_dict(({args},)), None, state, failure)
        raise failure from err
    try:
        if gather_flat is None:
            try:  # a row's length, lazily
                shaped = len(flat) == self._world_size and not any(map(({n}).__ne__, map(len, flat)))
            except TypeError:  # no rows came back (None, a number): ensure_rows says what did
                shaped = False
            if not shaped:
                _ensure_rows(flat, self.envelope, pass_number, self._group)  # raises, saying what came back
            flat = list(_chain(flat))
        # Every rank's row carries this configuration's fingerprint, this pass's stamp and no error: the
        # fingerprint and error columns compared whole with this rank's own (``world`` copies), the stamp counted.
        if (
            problems
            or len(flat) != self._flat_len
            or flat[{f_fingerprint}::{n}] != self._fingerprints
            or flat[{f_error}::{n}] != self._no_errors
            or flat[{f_stamp}::{n}].count(stamp) != self._world_size
        ):
            flat = self._unclean(flat, pass_number, problems, clock_error, stamp)
    except Exception as failure:
        if self._log is not None:
            self._log.failed(pass_number, now, self._inputs_dict(({args},)), flat, state, failure)
        raise
    decision = step.negotiate(state, now, {local}flat)
    self._flat = flat
    if self._shadow is not None:
        self._crosscheck(state, now, ({args},), flat, decision)
    self._state = decision.next_state
    self._passes = pass_number
    log = self._log
    if log is not None:
        log.passed(pass_number, now, ({readings}), flat, state, decision)
    return decision
"""


_PASS_LOCALS = frozenset({"self", "step", "state", "pass_number", "problems", "clock_error", "now", "err", "problem", "row", "stamp",
                          "gather_flat", "flat", "failure", "decision", "log", "shaped"})


@functools.lru_cache(maxsize=None)
def _compiled_pass(policy_name: str) -> Callable[..., Any]:
    """The pass of ``_PASS`` for one policy's inputs (names, defaults, local inputs, logged readings)."""
    from ..spec.registry import policy_named

    policy = policy_named(policy_name)
    names = list(policy.input_names)  # the callers' keywords: SGLang's argument names, for its delayer
    clash = set(names) & _PASS_LOCALS
    if clash:
        raise ValueError(f"{policy_name}: inputs named {sorted(clash)} would shadow the pass's own variables")
    params = ", ".join(n if f.default is None else f"{n}={f.default!r}" for n, f in zip(names, policy.inputs))
    by_name = dict(zip(policy.input_names, names))
    source = _PASS.format(
        **envelope_positions(policy)._asdict(),  # the envelope's places in a row: literals, as they are the policy's
        params=params,
        args=", ".join(names),
        local="".join(f"{by_name[n]}, " for n in policy.local_inputs),
        readings="".join(f"{by_name[n]}, " for n, _ in policy.log.readings),
        valid=checks_of(policy).quick_source,  # the input checks' own test, inline: no call for valid arguments
        clock_valid=quick_test(SECONDS, "now"),
    )
    namespace: dict[str, Any] = {"_clock_problem": clock_problem, "_CLOCK": CLOCK, "_ensure_rows": ensure_rows,
                                 "_chain": itertools.chain.from_iterable, "_INF": math.inf}
    exec(compile(source, f"<prefill_delayer.runtime.core pass of {policy_name}>", "exec"), namespace)
    fn: Callable[..., Any] = namespace["negotiate"]
    fn.__doc__ = PolicyCore.negotiate.__doc__
    return fn
