"""Drop-in ``PrefillDelayer`` / ``PrefillDelayerSinglePassExecutor`` driving the spec's FSM.

One pass, on every rank: read the clock once, validate the input, build this
rank's row (the spec's ``local_row`` plus the input-error mask and the
configuration fingerprint), all-gather the rows, check them, and step the FSM
on them. No guard is restated here: the step is ``fsm.compiled.CompiledStep``,
the transition table compiled from the spec's rows and guards for this
configuration (the ``transitions`` machine's own event dispatch costs more per
pass than the policy). With ``PREFILL_DELAYER_CROSSCHECK=1`` every pass is also
fired through the ``transitions`` machine (``fsm.DelayerMachine``) and any
difference raises ``AssertionError``; the test suite runs that way.

Failures never half-update the delayer: a pass computes its next state without
touching the current one and stores it only once the pass has succeeded.
Errors whose cause is in the gathered rows (a bad input on some rank, a
configuration mismatch) are raised identically on every rank, after a
collective every rank took part in.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any, Callable, NoReturn, Optional, Sequence

from ..fsm import INITIAL_STATE, DelayerMachine, Decision, State, local_for
from ..fsm.compiled import CompiledStep
from ..spec.config import Config
from ..spec.errors import ConfigError, PassInputError
from ..spec.inputs import CLOCK, args_problems, clock_problem, mask_fields, problems_mask
from ..spec.ops import PY
from ..spec.table import IDLE
from ..spec.view import F_ERROR, F_FINGERPRINT, ROW_LEN, gathered_view
from .decision_log import DecisionLog, open_decision_log
from .errors import CollectiveError, ConfigMismatchError, PeerInputError
from .gather import GatherFn, default_gather, describe
from . import metrics as _metrics
from .metrics import record_single_pass_result
from .server_args import get_bool_env_var

# Fire every pass through the ``transitions`` machine too and compare (tests, debugging).
CROSSCHECK_ENV = "PREFILL_DELAYER_CROSSCHECK"

logger = logging.getLogger(__name__)

# The row a rank with a bad input sends: the policy fields are zero, the
# error mask says which inputs were bad, the fingerprint is still checked.
_N_POLICY_FIELDS = F_ERROR
assert F_FINGERPRINT == F_ERROR + 1 == ROW_LEN - 1
_INPUT_NAMES = ("local_prefillable", "token_usage", "running_batch", "max_prefill_bs", "max_running_requests",
                "waiting_queue_len")


class PrefillDelayer:
    """Negotiates, once per scheduler pass, whether this pass may prefill.

    The seed's signature plus keyword-only extras: ``profile`` (any profile of
    ``spec.profiles``, or ``sglang-X`` for the release X whose decisions to make
    bit for bit; default "seed", SGLang 0.5.14-0.5.16, defects included),
    ``gather`` (a ``gather(row) -> rows`` callable that replaces the collective;
    see ``runtime.inprocess``), ``clock`` (seconds, default ``time.perf_counter``;
    read exactly once per pass) and ``attn_cp_size`` (attention context-parallel
    ranks per DP group, profiles from sglang-0.5.22 on) and ``debug_log_enabled``
    (SGLang 0.5.18's switch for the debug log lines, which also need
    ``SGLANG_PREFILL_DELAYER_DEBUG_LOG``).

    ``decision_log`` turns on the decision log (``runtime.decision_log``): a file
    path, a folder (``rank{global_rank}.jsonl`` in it), a writable text file or a
    ``DecisionLogOptions``; ``None`` (default) leaves it to the environment variable
    ``PREFILL_DELAYER_DECISION_LOG=DIR``, ``False`` turns it off. ``close()`` flushes it.

    ``server_args`` is read for ``enable_dp_attention``, ``disable_overlap_schedule``,
    ``prefill_delayer_queue_min_ratio``, ``prefill_delayer_max_delay_ms`` and
    ``prefill_max_requests``, as the releases read them; every parameter is
    validated (``spec.Config`` raises ``ConfigError``). Without ``gather`` the collective is a
    ``torch.distributed`` all-gather chosen as the seed chooses it (see
    ``runtime.gather.default_gather``).
    """

    def __init__(
        self,
        dp_size: int,
        attn_tp_size: int,
        cpu_group: Any,
        server_args: Any,
        max_delay_passes: int,
        token_usage_low_watermark: Optional[float],
        metrics_collector: Optional[Any] = None,
        device: Any = "cpu",
        device_group: Any = None,
        *,
        profile: str = "seed",
        gather: Optional[GatherFn] = None,
        clock: Optional[Callable[[], float]] = None,
        attn_cp_size: int = 1,
        decision_log: Any = None,
        debug_log_enabled: bool = True,
    ) -> None:
        self.config = Config(
            max_delay_passes=max_delay_passes,
            token_usage_low_watermark=token_usage_low_watermark,
            queue_min_ratio=server_args.prefill_delayer_queue_min_ratio,
            max_delay_ms=server_args.prefill_delayer_max_delay_ms,
            prefill_max_requests=server_args.prefill_max_requests,
            dp_size=dp_size,
            attn_tp_size=attn_tp_size,
            attn_cp_size=attn_cp_size,
            enable_dp_attention=server_args.enable_dp_attention,
            profile=profile,
        )
        c = self.config
        # The seed's attribute names, for code and tests that read them.
        self.dp_size = dp_size
        self.enable_dp_attention = c.enable_dp_attention
        self._max_delay_passes = c.max_delay_passes
        self._token_usage_low_watermark = c.token_usage_low_watermark
        self._queue_min_ratio = c.queue_min_ratio
        self._max_delay_ms = c.max_delay_ms
        self._queue_trigger_enabled = c.queue_on
        self._metrics_collector = metrics_collector
        # As the releases from 0.5.18 on: the debug log needs both the variable and this switch.
        self._debug_log_enabled = _metrics._DEBUG_LOG and bool(debug_log_enabled)
        logger.info(
            f"PrefillDelayer initialized with "
            f"max_delay_passes={c.max_delay_passes} "
            f"token_usage_low_watermark={c.token_usage_low_watermark} "
            f"queue_min_ratio={c.queue_min_ratio} "
            f"max_delay_ms={c.max_delay_ms} "
            f"queue_trigger_enabled={c.queue_on} "
            f"profile={c.profile}"
        )

        if clock is not None and not callable(clock):
            raise ConfigError(f"clock must be a callable returning seconds, got {clock!r}")
        self._clock: Callable[[], float] = clock if clock is not None else time.perf_counter
        if gather is None:
            gather = default_gather(server_args, cpu_group, device, device_group, c.world_size, ROW_LEN)
        elif not callable(gather):
            raise ConfigError(f"gather must be a callable gather(row) -> rows, got {gather!r}")
        else:
            size = getattr(gather, "world_size", None)
            if size is not None and size != c.world_size:
                raise ConfigError(
                    f"the gather's group has {size} ranks but the configuration needs {c.world_size} "
                    "(dp_size x attn_cp_size x attn_tp_size with DP attention, else attn_cp_size x attn_tp_size)"
                )
        self._gather: GatherFn = gather
        # A gather that can hand back the concatenated rows (``TorchGather``) saves
        # building per-rank lists; any other is flattened after a shape check.
        self._gather_flat: Optional[Callable[[Sequence[int]], Sequence[int]]] = getattr(gather, "gather_flat", None)
        self._group = describe(gather)
        self._world_size = c.world_size
        self._flat_len = c.world_size * ROW_LEN
        self._fingerprint = c.fingerprint()
        self._error_row_head = [0] * _N_POLICY_FIELDS
        # The compiled row ends with input_error = 0 and the configuration fingerprint.
        self._step = CompiledStep(c, row_tail=(0, self._fingerprint))
        self._shadow: Optional[DelayerMachine] = DelayerMachine(c, self._step.table) if get_bool_env_var(CROSSCHECK_ENV) else None
        self._state: State = INITIAL_STATE
        self._passes = 0
        # Last: the header it writes records the finished configuration.
        self._log: Optional[DecisionLog] = open_decision_log(
            decision_log, c, gather, registry=getattr(metrics_collector, "registry", None)
        )
        if self._log is not None:
            weakref.finalize(self, self._log.close)  # flushed when the delayer goes, and at exit

    # ----- state -------------------------------------------------------------

    @property
    def state(self) -> State:
        """Control state and extended variables (``fsm.State``)."""
        return self._state

    @property
    def passes(self) -> int:
        """Passes negotiated successfully so far."""
        return self._passes

    @property
    def decision_log(self) -> Optional[DecisionLog]:
        """The decision log, or ``None`` when it is off."""
        return self._log

    def close(self) -> None:
        """Flush and close the decision log (if any); the delayer itself needs no closing."""
        if self._log is not None:
            self._log.close()

    @property
    def skip_first_delayer(self) -> bool:
        """The seed's one-shot flag (``skip_first_armed``); settable, as SGLang's tests do."""
        return self._state.skip_first_armed

    @skip_first_delayer.setter
    def skip_first_delayer(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"skip_first_delayer must be a bool, got {value!r}")
        self._state = self._state._replace(skip_first_armed=value)
        if self._log is not None:
            self._log.flag_set(self._passes, value)

    # ----- one pass ----------------------------------------------------------

    def negotiate(
        self,
        local_prefillable: bool,
        token_usage: float,
        running_batch: int = 0,
        max_prefill_bs: int = 0,
        max_running_requests: int = 0,
        waiting_queue_len: int = 0,
    ) -> Decision:
        """One pass: gather every rank's row and fire the FSM's ``negotiate``.

        Returns the seed's output fields (``fsm.Decision``). A pass left in
        ``released`` by a caller that never finalized is finalized first (the
        seed has no finalize of its own, and SGLang's tests call this
        repeatedly). Raises ``PeerInputError`` / ``ConfigMismatchError`` on
        every rank alike, ``CollectiveError`` when the gather fails; in every
        case the state is as before the call.
        """
        step = self._step
        state = step.finalize(self._state)
        pass_number = self._passes + 1
        problems = args_problems(
            local_prefillable, token_usage, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len
        )
        clock_error: Optional[Exception] = None
        try:
            now = self._clock()
        except Exception as err:  # still take part in the gather: the peers must not hang
            now, clock_error = None, err
        problem = clock_problem(now, clock_error)
        if problem is not None:
            problems = [*problems, (CLOCK, problem)]
        if problems:
            row = self._error_row_head + [problems_mask(problems), self._fingerprint]
        else:
            row = step.row(state, now, local_prefillable, token_usage, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len)
        gather_flat = self._gather_flat
        try:
            flat = gather_flat(row) if gather_flat is not None else self._gather(row)
        except Exception as err:
            failure = CollectiveError(
                f"pass {pass_number}: all-gather over {self._group} failed: {type(err).__name__}: {err}",
                pass_number=pass_number,
                group=self._group,
            )
            if self._log is not None:
                self._log_failed(pass_number, now, None, state, failure, local_prefillable, token_usage, running_batch,
                                 max_prefill_bs, max_running_requests, waiting_queue_len)
            raise failure from err
        try:
            if gather_flat is None:
                flat = self._flatten(flat, pass_number)
            if (
                problems
                or len(flat) != self._flat_len
                or flat[F_FINGERPRINT::ROW_LEN].count(self._fingerprint) != self._world_size
                or any(flat[F_ERROR::ROW_LEN])
            ):
                self._reject(flat, pass_number, problems, clock_error)
        except Exception as failure:
            if self._log is not None:
                self._log_failed(pass_number, now, flat, state, failure, local_prefillable, token_usage, running_batch,
                                 max_prefill_bs, max_running_requests, waiting_queue_len)
            raise
        decision = step.negotiate(state, now, max_running_requests, flat)
        if self._shadow is not None:
            self._crosscheck(state, now, max_running_requests, flat, decision)
        self._state = decision.next_state
        self._passes = pass_number
        log = self._log
        if log is not None:
            log.passed(pass_number, now, token_usage, max_running_requests, flat, state, decision)
        return decision

    # The seed's private name, for drop-in call sites.
    _negotiate_should_allow_prefill = negotiate

    def finalize(self) -> State:
        """End of pass: fire the FSM's ``finalize`` (released -> idle; delaying stays)."""
        before = self._state
        after = self._step.finalize(before)
        if self._shadow is not None and before.control != IDLE:  # no finalize row from idle: already finalized
            self._shadow.restore(before)
            want = self._shadow.finalize()
            if want != after:
                raise AssertionError(f"compiled finalize gave {after}, the transitions machine {want}")
        self._state = after
        return after

    def _log_failed(self, pass_number: int, now: Any, flat: Any, state: State, failure: BaseException, *args: Any) -> None:
        """A failed pass's line in the decision log: the error, the inputs, the rows if any came back."""
        assert self._log is not None
        self._log.failed(pass_number, now, dict(zip(_INPUT_NAMES, args)), flat, state, failure)

    def _flatten(self, rows: Sequence[Sequence[int]], pass_number: int) -> list[int]:
        """A custom gather's rows, concatenated, after checking their shape."""
        if len(rows) != self._world_size or any(len(r) != ROW_LEN for r in rows):
            lengths = sorted({len(r) for r in rows})
            raise CollectiveError(
                f"pass {pass_number}: all-gather over {self._group} returned {len(rows)} rows of lengths {lengths}, "
                f"expected {self._world_size} rows of {ROW_LEN}",
                pass_number=pass_number,
                group=self._group,
            )
        return [x for r in rows for x in r]

    def _crosscheck(self, state: State, now: float, mrr: int, flat: Sequence[int], decision: Decision) -> None:
        """Fire the same pass through the ``transitions`` machine; any difference is a bug here."""
        machine = self._shadow
        assert machine is not None
        rows = [flat[i : i + ROW_LEN] for i in range(0, len(flat), ROW_LEN)]
        machine.restore(state)
        want = machine.negotiate(gathered_view(PY, self.config, rows), local_for(state, now, mrr))
        if want != decision:
            raise AssertionError(f"compiled step gave {decision}, the transitions machine {want} (state {state}, rows {rows})")

    def _reject(
        self, flat: Sequence[int], pass_number: int, problems: list[tuple[str, str]], clock_error: Optional[Exception] = None
    ) -> NoReturn:
        """Raise the error the gathered rows call for; every rank reaches the same verdict."""
        if len(flat) != self._flat_len:
            raise CollectiveError(
                f"pass {pass_number}: all-gather over {self._group} returned {len(flat)} values, "
                f"expected {self._world_size} rows of {ROW_LEN}",
                pass_number=pass_number,
                group=self._group,
            )
        rows = [flat[i : i + ROW_LEN] for i in range(0, len(flat), ROW_LEN)]
        fingerprints = {rank: r[F_FINGERPRINT] for rank, r in enumerate(rows)}
        if len(set(fingerprints.values())) > 1:
            raise ConfigMismatchError(pass_number=pass_number, fingerprints=fingerprints, local_config=self.config.as_dict())
        bad = {rank: mask_fields(r[F_ERROR]) or [f"error mask {r[F_ERROR]}"] for rank, r in enumerate(rows) if r[F_ERROR]}
        local = (
            PassInputError("invalid negotiate input: " + "; ".join(f"{name}: {why}" for name, why in problems))
            if problems
            else None
        )
        if local is not None and clock_error is not None:
            local.__cause__ = clock_error
        if bad:
            raise PeerInputError(pass_number=pass_number, bad_fields=bad) from local
        if local is not None:  # the gather dropped our error mask: still refuse the pass
            raise local
        # One fingerprint on every row, but not this rank's: the gather lost this rank's own row.
        raise CollectiveError(
            f"pass {pass_number}: all-gather over {self._group} returned rows that all carry fingerprint "
            f"{rows[0][F_FINGERPRINT]:#018x}, none this rank's {self._fingerprint:#018x}: its own row is missing",
            pass_number=pass_number,
            group=self._group,
        )


class PrefillDelayerSinglePassExecutor:
    """One scheduler pass: negotiate at most once, then ``finalize`` records and ends the pass.

    Exactly the seed's behaviour: later ``negotiate_should_allow_prefill`` calls
    return the cached verdict; ``finalize`` negotiates as not prefillable (all
    counts 0) when nothing did, so every rank runs exactly one collective per
    pass, then records the outcome; it then fires the FSM's ``finalize``.
    """

    def __init__(self, prefill_delayer: PrefillDelayer, token_usage: float) -> None:
        self._prefill_delayer = prefill_delayer
        self._token_usage = token_usage
        self._result: Optional[Decision] = None

    @property
    def _called(self) -> bool:
        return self._result is not None

    def finalize(self, *, actual_prefill: bool) -> None:
        result = self._result
        if result is None:
            self.negotiate_should_allow_prefill(local_prefillable=False)
            result = self._result
        delayer = self._prefill_delayer
        record_single_pass_result(actual_prefill, result, delayer._metrics_collector, debug_log_enabled=delayer._debug_log_enabled)
        delayer.finalize()

    def negotiate_should_allow_prefill(
        self,
        local_prefillable: bool,
        running_batch: int = 0,
        max_prefill_bs: int = 0,
        max_running_requests: int = 0,
        waiting_queue_len: int = 0,
    ) -> bool:
        result = self._result
        if result is None:
            result = self._result = self._prefill_delayer.negotiate(
                local_prefillable, self._token_usage, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len
            )
        return result.output_allow
