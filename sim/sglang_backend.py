"""The ``sglang`` scheduler backend: SGLang 0.5.23's own scheduler code on every simulated rank.

Each rank is a ``Scheduler`` built on CPU without a model
(``integrations.sglang.cpu_scheduler``): real ``Req`` objects from
``process_input_requests``, its ``SchedulePolicy`` and ``PrefillAdder``, its
tree cache, ``ReqToTokenPool`` and ``PagedTokenToKVPoolAllocator`` at the run's
page size, its ``RecentPrefillBatchSizeTracker``, all of it driven through its
own ``get_next_batch_to_run`` / ``get_new_batch_prefill`` and ``run_batch`` /
``process_batch_result`` in ``event_loop_overlap``'s order. The forward is fake
(the next token of every request); the delayer is the profile under test in the
plugin's shell (``integrations.sglang.releases``), over the engine's in-process
gather, so the scheduler's own ``add_chunked_req`` and ``add_one_req`` negotiate
through it: ``PrefillDelayerSinglePassExecutor`` in the scheduler module is the
plugin's while a run lasts, as ``install`` would make it, the profile's readings
of the scheduler (``integrations.sglang.readings``: the chunk in flight, the queue
as admission begins) are hooked where the plugin hooks them, and the module's clock
reads simulated time (``SimulatedTime``).

The scheduler is 0.5.23's, so is its ``max_prefill_bs`` tracker (``window``) for
every profile. It imports only where SGLang's scheduler module does (the
environment ``.ci/sglang-scheduler`` builds); elsewhere ``require_scheduler``
says why in one line.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from ..integrations.sglang.cpu_scheduler import (
    OverlapRank,
    RankSettings,
    SchedulerUnavailable,
    SimulatedTime,
    build_scheduler,
    generate_request,
    health_check_request,
    import_scheduler,
    publish_context,
)
from ..integrations.sglang.releases import PrefillDelayer_0_5_14
from ..integrations.sglang.shell import PrefillDelayerSinglePassExecutor
from .config import SimConfig, Variant
from .errors import SimInputError
from .trackers import WINDOW, own_tracker
from .workload import Request, Workload, largest_request

NegotiateArgs = tuple[int, int, int, int]


# The environment ``.ci/sglang-scheduler`` builds, where SGLang 0.5.23's scheduler imports.
SCHEDULER_ENV = ".venv-sglang-scheduler"


def require_scheduler(needs: str = "--scheduler sglang", command: str = "prefill-delayer") -> Any:
    """SGLang's scheduler module, or ``SimInputError`` with the one line that says why it is not here: what is
    missing, and where it is not (``needs``: what asks for it; ``command``: what to run in that environment)."""
    try:
        return import_scheduler()
    except SchedulerUnavailable as err:
        raise SimInputError(
            f"{needs} needs SGLang 0.5.23's scheduler, which does not import here: {err}; `bash .ci/sglang-scheduler` "
            f"(in the repository) builds {SCHEDULER_ENV}, an environment where it imports: run {SCHEDULER_ENV}/bin/{command}"
        ) from None


class SGLangRank:
    """One rank: SGLang's scheduler in ``event_loop_overlap``'s order, and what the engine reads of a pass."""

    def __init__(self, index: int, scheduler: Any, delayer: Optional[Any]) -> None:
        self.index = index
        self.loop = OverlapRank(scheduler, delayer)
        self.delayer = delayer
        self.inbox: list[Any] = []
        self.reqs: dict[str, tuple[Request, Any]] = {}  # rid -> (our request, SGLang's Req), until it finishes
        # What the record reads of the pass in progress.
        self.negotiated: Optional[NegotiateArgs] = None
        self.negotiated_for_chunk = False
        self.gate_refused = False  # SGLang's delayer is consulted at the admission call sites only
        self.verdict: Optional[bool] = None
        self.admitted: tuple[Request, ...] = ()
        self.batch: Optional[list[tuple[Request, int]]] = None
        self.running_at_start = 0
        self.queue_at_start = 0
        self.usage_at_start = 0.0
        self._chunked_at_start = False
        self.peak_kv = 0
        sched = scheduler
        own = sched.get_new_batch_prefill

        def observed(running_batch: Any) -> Any:  # the delayer's inputs as get_new_batch_prefill starts
            self.running_at_start = running_batch.batch_size()
            self.queue_at_start = len(sched.waiting_queue)
            self.usage_at_start = self.loop.token_usage()
            self._chunked_at_start = sched.chunked_req is not None
            return own(running_batch)

        sched.get_new_batch_prefill = observed

    def record_negotiation(self, args: NegotiateArgs, verdict: bool) -> None:
        if self.negotiated is None:
            self.negotiated = args
            self.negotiated_for_chunk = self._chunked_at_start  # add_chunked_req negotiates first
            self.verdict = verdict

    def take(self, q: Request) -> bool:
        """``process_input_requests`` with one request; False if the scheduler dropped it (a busy one drops a probe)."""
        sched = self.loop.s
        message = health_check_request(str(-q.rid)) if q.health_check else generate_request(str(q.rid), q.prompt, q.output)
        before = len(sched.waiting_queue)
        self.loop.ingest([message])
        if len(sched.waiting_queue) == before:
            return False
        req = sched.waiting_queue[-1]
        self.reqs[req.rid] = (q, req)
        return True

    def begin(self) -> None:
        self.negotiated = None
        self.negotiated_for_chunk = False
        self.verdict = None
        self.batch = None
        self.admitted = ()

    def schedule(self) -> Optional[Any]:
        return self.loop.schedule()

    def describe(self, batch: Optional[Any]) -> tuple[int, int]:
        """The batch's work (prefill tokens, decoding requests), and what it admitted and prefilled."""
        if batch is None or batch.forward_mode.is_idle():
            return 0, 0
        if batch.forward_mode.is_decode():
            return 0, batch.batch_size()
        decoding = {id(r) for r in (batch.decoding_reqs or ())}
        prefilled, admitted = [], []
        tokens = 0
        for req in batch.reqs:
            if id(req) in decoding:
                continue
            q = self.reqs[req.rid][0]
            prefilled.append((q, req.extend_len))
            tokens += req.extend_len
            if req.extend_batch_idx == 1:  # first extend of this request: admitted from the queue this pass
                admitted.append(q)
        self.batch = prefilled
        self.admitted = tuple(admitted)
        return tokens, len(decoding)

    def harvest(self, now: float) -> tuple[list[Request], int]:
        """After the previous result was processed: first tokens and finished requests, at ``now``."""
        finished: list[Request] = []
        tokens = 0
        for rid, (q, req) in list(self.reqs.items()):
            produced = len(req.output_ids)
            if produced > q.out:
                tokens += produced - q.out
                if q.out == 0:
                    q.first_token_s = now
                q.out = produced
                q.prefilled = q.prompt
            if req.finished():
                q.finish_s = now
                finished.append(q)
                del self.reqs[rid]
        used = self.loop.kv_used()
        if used > self.peak_kv:
            self.peak_kv = used
        return finished, tokens


class SGLangGroup:
    """Every rank of one run, each SGLang's own scheduler (the engine's ``ModelGroup`` counterpart)."""

    def __init__(self, config: SimConfig, variant: Variant, workload: Workload, outcomes: list, gather: Any,
                 clock: Callable[[], float]) -> None:
        scheduler_module = require_scheduler()
        # 0.5.23's scheduler tracks with its window; a policy that keeps its own negotiates with that one instead.
        runs = own_tracker(variant.name) or WINDOW
        if variant.profile is not None and variant.tracker != runs:  # off has none: no delayer reads it
            raise SimInputError(
                f"--scheduler sglang runs SGLang 0.5.23's scheduler, whose max_prefill_bs tracker is window"
                f"{'' if runs == WINDOW else f' ({variant.name} keeps its own, {runs})'}; {variant.label} asks for {variant.tracker}"
            )
        largest = largest_request(workload)
        context = (largest[0] + largest[1] if largest is not None else config.max_total_tokens) + 8
        settings = RankSettings(
            dp_size=config.dp_size, max_running_requests=config.max_running_requests, max_total_tokens=config.max_total_tokens,
            chunked_prefill_size=config.chunked_prefill_size, max_prefill_tokens=config.max_prefill_tokens,
            page_size=config.page_size, enable_mixed_chunk=config.enable_mixed_chunk, prefix_cache=config.prefix_cache,
            context_len=min(context, config.max_total_tokens),
        )
        server_args = publish_context(settings)
        self.outcomes = outcomes
        self.gather = gather
        self._module = scheduler_module
        self._saved_executor = scheduler_module.PrefillDelayerSinglePassExecutor
        self._saved_time = scheduler_module.time
        scheduler_module.time = SimulatedTime(clock)
        recorders: dict[int, Callable[[NegotiateArgs, bool], None]] = {}
        scheduler_module.PrefillDelayerSinglePassExecutor = _recording_executor(recorders)
        from .engine import delayer_server_args

        delayer_args = delayer_server_args(config)
        params: dict[str, Any] = {}
        self._hooked: list[tuple[Any, str, Any]] = []
        if gather is not None:
            assert variant.profile is not None, "the engine makes a gather only for a profile (off runs no delayer)"
            params = host_params(variant.profile, config.policy_params)
            self._hooked = _hook_readings(variant.profile, params)
        self.ranks: list[SGLangRank] = []
        for r in range(config.dp_size):
            delayer = None
            if gather is not None:
                delayer = PrefillDelayer_0_5_14(
                    config.dp_size, 1, None, delayer_args, config.max_delay_passes, config.token_usage_low_watermark,
                    outcomes[r], profile=variant.profile, gather=gather.gather_for(r), clock=clock,
                    params=params,
                )
            rank = SGLangRank(r, build_scheduler(settings, server_args), delayer)
            if delayer is not None:
                recorders[id(delayer)] = rank.record_negotiation
            self.ranks.append(rank)

    def receive(self, rank: int, req: Request, group_ran: bool) -> bool:
        """The rank's ``process_input_requests`` at the pass's start (where a busy scheduler drops a health check)."""
        return self.ranks[rank].take(req)

    def idle(self) -> bool:
        for r in self.ranks:
            s = r.loop.s
            if s.waiting_queue or s.chunked_req is not None or not s.running_batch.is_empty() or s.result_queue:
                return False
        return True

    def loads(self) -> list[tuple[int, int]]:
        """Each rank's last published load snapshot (``publish_load_snapshot``), as the DP controller reads them."""
        out = []
        for r in self.ranks:
            load = r.loop.s.load_snapshot_writer.latest
            out.append((0, 0) if load is None else (load.num_running_reqs + load.num_waiting_reqs, load.num_total_tokens))
        return out

    def step(self, now: float) -> tuple[list[tuple[int, int]], list[list[Request]], int]:
        ranks = self.ranks
        for r in ranks:
            r.begin()
        batches: list[Optional[Any]] = [None] * len(ranks)

        def scheduling(i: int) -> Callable[[], None]:
            def run() -> None:
                batches[i] = ranks[i].schedule()
            return run

        calls = [scheduling(i) for i in range(len(ranks))]
        if self.gather is not None:
            self.gather.run_round(calls)
        else:
            for call in calls:
                call()
        work = [r.describe(b) for r, b in zip(ranks, batches)]
        if self.gather is None:
            _no_delayer_status(ranks, self.outcomes)
        if any(p or d for p, d in work):  # the MLP sync: a rank without work runs an idle batch
            for i, r in enumerate(ranks):
                if batches[i] is None:
                    batches[i] = r.loop.idle_batch()
        finished, tokens = [], 0
        for r, b in zip(ranks, batches):
            r.loop.launch(b)
            done, out = r.harvest(now)
            finished.append(done)
            tokens += out
        return work, finished, tokens

    def negotiations(self) -> list[int]:
        return [r.delayer.passes if r.delayer is not None else 0 for r in self.ranks]

    def peak_kv(self) -> int:
        return max(r.peak_kv for r in self.ranks)

    def close(self) -> None:
        self._module.PrefillDelayerSinglePassExecutor = self._saved_executor
        self._module.time = self._saved_time
        for owner, method, original in reversed(self._hooked):
            setattr(owner, method, original)
        for r in self.ranks:  # each delayer's decision log, if one was asked for, whole when the run returns
            if r.delayer is not None:
                r.delayer.core.close()


def host_params(profile: str, sets: Any) -> dict[str, Any]:
    """The ``--set`` values the plugin's delayer for ``profile`` takes: its parameters SGLang keeps nowhere. One that
    SGLang's own settings give there (a server argument, or the constructor's ``max_delay_passes`` and
    ``token_usage_low_watermark``) is a ``SimInputError`` naming them: SGLang's scheduler would not run what it says."""
    from ..runtime.delayer import own_params
    from ..spec.registry import policy_of

    by_name = {p.name: p for p in policy_of(profile).params}
    own = {p.name for p in own_params(profile)}
    out = {}
    for name, value in sets:
        param = by_name.get(name)
        if param is None:  # another simulated profile's parameter (``check_sets`` saw to that)
            continue
        if name not in own:
            given = f"server argument {param.server_arg}" if param.server_arg is not None else "constructor argument"
            flag = "--" + (param.server_arg or name).removeprefix("prefill_delayer_").replace("_", "-")
            raise SimInputError(f"--scheduler sglang: --set {name} is SGLang's {given} there; set it with {flag}")
        out[name] = value
    return out


def _hook_readings(profile: str, params: dict[str, Any]) -> list[tuple[Any, str, Any]]:
    """The profile's readings (and its chunk hold, if ``params`` set one) hooked on 0.5.23's scheduler classes, as
    the plugin hooks them; what to put back."""
    from ..integrations.sglang.plugin import hook_readings, resolve

    choice = resolve(profile, params)
    return hook_readings(choice, choice.reads)


def _recording_executor(recorders: dict[int, Callable[[NegotiateArgs, bool], None]]) -> type:
    """The plugin's executor, telling each rank what it negotiated (the arguments and the verdict)."""

    class Executor(PrefillDelayerSinglePassExecutor):
        def __init__(self, prefill_delayer: Any, token_usage: float) -> None:
            super().__init__(prefill_delayer, token_usage)
            self._record = recorders[id(prefill_delayer)]

        def negotiate_should_allow_prefill(self, local_prefillable: bool, running_batch: int = 0, max_prefill_bs: int = 0,
                                           max_running_requests: int = 0, waiting_queue_len: int = 0) -> bool:
            verdict = super().negotiate_should_allow_prefill(local_prefillable, running_batch, max_prefill_bs,
                                                             max_running_requests, waiting_queue_len)
            if local_prefillable:
                self._record((running_batch, self.negotiated_max_prefill_bs(max_prefill_bs), max_running_requests,
                              waiting_queue_len), verdict)
            return verdict

    Executor.__name__ = Executor.__qualname__ = "PrefillDelayerSinglePassExecutor"
    return Executor


def _no_delayer_status(ranks: list[SGLangRank], outcomes: list) -> None:
    """Without a delayer nothing negotiates; the gathered status is still recorded, from the ranks that prefill.

    (Without a delayer a rank that reaches a call site admits or continues a chunk, so that is the same set.)
    """
    prefilling = sum(1 for r in ranks if r.batch)
    estimation = "none" if prefilling == 0 else "all" if prefilling == len(ranks) else "mixed"
    for o in outcomes:
        o.estimation, o.allow, o.reason, o.forward_passes = estimation, True, "off", 0
