"""Drop-in ``PrefillDelayer`` / ``PrefillDelayerSinglePassExecutor`` driving the spec's FSM.

One pass, on every rank: read the clock once, validate the input, build this
rank's row with ``spec.view.local_row`` (plus the input-error mask and the
configuration fingerprint), all-gather the rows, check them, aggregate them
with ``spec.view.gathered_view`` and fire the ``transitions`` machine built from
the spec's table. No guard is restated here: what the pass decides is what
the table's transition that fires says.

Failures never half-update the delayer: the machine's state is snapshotted
before the pass and restored on any error. Errors whose cause is in the
gathered rows (a bad input on some rank, a configuration mismatch) are raised
identically on every rank, after a collective every rank took part in.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, NoReturn, Optional, Sequence

from ..fsm import DelayerMachine, Decision, State, local_for
from ..spec.config import Config
from ..spec.errors import ConfigError, PassInputError
from ..spec.inputs import PassInput, input_problems, mask_fields, problems_mask
from ..spec.ops import PY
from ..spec.table import IDLE, RELEASED
from ..spec.view import F_ERROR, F_FINGERPRINT, ROW_LEN, gathered_view, local_row
from .errors import CollectiveError, ConfigMismatchError, PeerInputError
from .gather import GatherFn, default_gather, describe
from .metrics import record_single_pass_result

logger = logging.getLogger(__name__)

# The row a rank with a bad input sends: the policy fields are zero, the
# error mask says which inputs were bad, the fingerprint is still checked.
_N_POLICY_FIELDS = F_ERROR
assert F_FINGERPRINT == F_ERROR + 1 == ROW_LEN - 1


class PrefillDelayer:
    """Negotiates, once per scheduler pass, whether this pass may prefill.

    The seed's signature plus three keyword-only extras (DESIGN §6):
    ``profile`` ("seed": the seed's decisions bit for bit, defects included;
    "hardened": DESIGN §3), ``gather`` (a ``gather(row) -> rows`` callable that
    replaces the collective; see ``runtime.inprocess``) and ``clock`` (seconds,
    default ``time.perf_counter``; read exactly once per pass).

    ``server_args`` is read for ``enable_dp_attention``, ``disable_overlap_schedule``,
    ``prefill_delayer_queue_min_ratio`` and ``prefill_delayer_max_delay_ms``, as
    the seed reads them; every parameter is validated (``spec.Config`` raises
    ``ConfigError``). Without ``gather`` the collective is a
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
    ) -> None:
        self.config = Config(
            max_delay_passes=max_delay_passes,
            token_usage_low_watermark=token_usage_low_watermark,
            queue_min_ratio=server_args.prefill_delayer_queue_min_ratio,
            max_delay_ms=server_args.prefill_delayer_max_delay_ms,
            dp_size=dp_size,
            attn_tp_size=attn_tp_size,
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
                    "(dp_size x attn_tp_size with DP attention, else attn_tp_size)"
                )
        self._gather: GatherFn = gather
        self._group = describe(gather)
        self._world_size = c.world_size
        self._fingerprint = c.fingerprint()
        self._error_row_head = [0] * _N_POLICY_FIELDS
        self._machine = DelayerMachine(c)
        # Mirror of the machine's state, updated by every method that moves the
        # machine (it is private to this object): saves rebuilding it per pass.
        self._state: State = self._machine.state
        self._passes = 0

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
    def skip_first_delayer(self) -> bool:
        """The seed's one-shot flag (``skip_first_armed``); settable, as SGLang's tests do."""
        return self._state.skip_first_armed

    @skip_first_delayer.setter
    def skip_first_delayer(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"skip_first_delayer must be a bool, got {value!r}")
        state = self._state._replace(skip_first_armed=value)
        self._machine.restore(state)
        self._state = state

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
        """One pass: gather every rank's row and fire the machine's ``negotiate``.

        Returns the seed's output fields (``fsm.Decision``). A pass left in
        ``released`` by a caller that never finalized is finalized first (the
        seed has no finalize of its own, and SGLang's tests call this
        repeatedly). Raises ``PeerInputError`` / ``ConfigMismatchError`` on
        every rank alike, ``CollectiveError`` when the gather fails; in every
        case the state is as before the call.
        """
        machine = self._machine
        before = self._state
        pass_number = self._passes + 1
        inp = PassInput(local_prefillable, token_usage, running_batch, max_prefill_bs, max_running_requests, waiting_queue_len)
        problems = input_problems(inp)
        try:
            if before.control == RELEASED:
                state = machine.finalize()
            else:
                state = before
            now = self._clock()
            if problems:
                local = None
                row = self._error_row_head + [problems_mask(problems), self._fingerprint]
            else:
                local = local_for(state, now, max_running_requests)
                row = local_row(PY, self.config, inp, local)
                row.append(0)
                row.append(self._fingerprint)
            try:
                rows = self._gather(row)
            except Exception as err:
                raise CollectiveError(
                    f"pass {pass_number}: all-gather over {self._group} failed: {type(err).__name__}: {err}",
                    pass_number=pass_number,
                    group=self._group,
                ) from err
            if len(rows) != self._world_size or problems:
                self._reject(rows, pass_number, problems)
            fingerprint = self._fingerprint
            for r in rows:
                if len(r) != ROW_LEN or r[F_FINGERPRINT] != fingerprint or r[F_ERROR]:
                    self._reject(rows, pass_number, problems)
            decision = machine.negotiate(gathered_view(PY, self.config, rows), local)
        except BaseException:
            machine.restore(before)
            self._state = before
            raise
        self._state = decision.next_state
        self._passes = pass_number
        return decision

    # The seed's private name, for drop-in call sites.
    _negotiate_should_allow_prefill = negotiate

    def finalize(self) -> State:
        """End of pass: fire the machine's ``finalize`` (released -> idle; delaying stays)."""
        if self._state.control != IDLE:  # the table has no finalize from idle: already finalized
            self._state = self._machine.finalize()
        return self._state

    def _reject(self, rows: Sequence[Sequence[int]], pass_number: int, problems: list[tuple[str, str]]) -> NoReturn:
        """Raise the error the gathered rows call for; every rank reaches the same verdict."""
        bad_shape = len(rows) != self._world_size or any(len(r) != ROW_LEN for r in rows)
        if bad_shape:
            shape = f"{len(rows)} rows of lengths {sorted({len(r) for r in rows})}"
            raise CollectiveError(
                f"pass {pass_number}: all-gather over {self._group} returned {shape}, "
                f"expected {self._world_size} rows of {ROW_LEN}",
                pass_number=pass_number,
                group=self._group,
            )
        fingerprints = {rank: r[F_FINGERPRINT] for rank, r in enumerate(rows)}
        if len(set(fingerprints.values())) > 1:
            raise ConfigMismatchError(pass_number=pass_number, fingerprints=fingerprints, local_config=self.config.as_dict())
        bad = {rank: mask_fields(r[F_ERROR]) or [f"error mask {r[F_ERROR]}"] for rank, r in enumerate(rows) if r[F_ERROR]}
        local = (
            PassInputError("invalid negotiate input: " + "; ".join(f"{name}: {why}" for name, why in problems))
            if problems
            else None
        )
        if bad:
            raise PeerInputError(pass_number=pass_number, bad_fields=bad) from local
        if local is not None:  # the gather dropped our error mask: still refuse the pass
            raise local
        raise AssertionError("_reject called on acceptable rows")  # pragma: no cover


class PrefillDelayerSinglePassExecutor:
    """One scheduler pass: negotiate at most once, then ``finalize`` records and ends the pass.

    Exactly the seed's behaviour: later ``negotiate_should_allow_prefill`` calls
    return the cached verdict; ``finalize`` negotiates as not prefillable (all
    counts 0) when nothing did, so every rank runs exactly one collective per
    pass, then records the outcome; it then fires the machine's ``finalize``.
    """

    def __init__(self, prefill_delayer: PrefillDelayer, token_usage: float) -> None:
        self._prefill_delayer = prefill_delayer
        self._token_usage = token_usage
        self._result: Optional[Decision] = None

    @property
    def _called(self) -> bool:
        return self._result is not None

    def finalize(self, *, actual_prefill: bool) -> None:
        if not self._called:
            self.negotiate_should_allow_prefill(local_prefillable=False)
        record_single_pass_result(
            actual_execution=actual_prefill,
            output=self._result,
            metrics_collector=self._prefill_delayer._metrics_collector,
        )
        self._prefill_delayer.finalize()

    def negotiate_should_allow_prefill(
        self,
        local_prefillable: bool,
        running_batch: int = 0,
        max_prefill_bs: int = 0,
        max_running_requests: int = 0,
        waiting_queue_len: int = 0,
    ) -> bool:
        if not self._called:
            self._result = self._prefill_delayer.negotiate(
                local_prefillable=local_prefillable,
                token_usage=self._token_usage,
                running_batch=running_batch,
                max_prefill_bs=max_prefill_bs,
                max_running_requests=max_running_requests,
                waiting_queue_len=waiting_queue_len,
            )
        return self._result.output_allow
