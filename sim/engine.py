"""The lock-step engine: N ranks, one scheduler pass at a time, each rank's own ``PolicyCore``.

A pass, on every rank at once, in the order of SGLang 0.5.23's ``event_loop_overlap``:

1. requests (and ``GET /health`` probes) that have arrived by the pass's start are
   dispatched by the DP controller (``dispatch.Dispatcher``) and taken in by their
   rank's scheduler (a busy one drops a probe);
2. each rank's scheduler runs ``get_next_batch_to_run`` up to the point where the
   policy's ``SimBinding`` says it is consulted (SGLang's delayer: the prefill adder's
   call sites; a gate: before admission), with one collective round in the middle
   where every rank's policy (``policy_site.PolicySite``) negotiates over the
   in-process gather (``gather``), with the simulated clock (a rank that asked
   nothing negotiates its idle inputs);
3. each rank launches its batch (a pass lasts as the cost model says, ``cost``)
   and only then processes the *previous* pass's result: its finished requests
   leave, their clients send their next request, which arrives for the next pass.

The scheduler of each rank is a backend (``SimConfig.scheduler``): the model
(``rank.RankScheduler``), or SGLang 0.5.23's own code (``sglang_backend``). When no
rank has anything to do the clock jumps to the next arrival (no pass).
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from ..runtime.core import PolicyCore
from ..runtime.server_args import ServerArgs
from .config import SGLANG, SimConfig, Variant
from .dispatch import Dispatcher
from .errors import SimInputError
from .gather import make_gather, with_stack_room
from .policy_site import PolicySite, binding_of, policy_config
from .rank import NegotiateArgs, RankScheduler
from .result import RunResult
from .trackers import LIFETIME, MaxPrefillBsTracker
from .workload import Request, Workload, largest_request

if TYPE_CHECKING:
    from .sglang_backend import SGLangGroup

# progress(variant label, passes done, passes planned, simulated seconds, final=False)
Progress = Callable[..., None]
HEALTH_PROMPT, HEALTH_OUTPUT = 1, 1  # http_server.health_generate: input_ids=[0], max_new_tokens=1
LOAD_SNAPSHOT_INTERVAL = 15  # --load-snapshot-publish-interval's default: a snapshot every 15 decode results


class _Outcome:
    """The delayer's ``metrics_collector``: keeps the last pass's outcome, as SGLang's metrics see it."""

    __slots__ = ("estimation", "allow", "reason", "forward_passes")

    def __init__(self) -> None:
        self.estimation, self.allow, self.reason, self.forward_passes = "", True, "", 0

    def observe_prefill_delayer_outcome(
        self, forward_passes: int, wait_seconds: float, input_estimation: str, output_allow: bool, output_reason: str, actual_execution: bool
    ) -> None:
        self.estimation, self.allow, self.reason, self.forward_passes = input_estimation, output_allow, output_reason, forward_passes


def check_fits(config: SimConfig, workload: Workload) -> None:
    """Every request must be admissible on an empty rank, or it would wait forever at the head of its queue: the
    rank's own admission decides (SGLang's ``PrefillAdder`` wants the prompt in whole pages, a page more, the output
    and a reserve token in the KV pool), tried on the request that needs the most."""
    largest = largest_request(workload)
    if largest is None:
        return
    prompt, output, where = largest
    rank = RankScheduler(0, config, None, MaxPrefillBsTracker(LIFETIME))
    rank.receive(Request(0, 0.0, prompt, output), group_ran=False)
    if rank.schedule(0.0, _allow) is None:
        raise SimInputError(
            f"{where} ({prompt} prompt + {output} output tokens) could never be admitted: SGLang's admission on an empty "
            f"rank needs more than max_total_tokens={config.max_total_tokens} (page_size={config.page_size})"
        )


class HealthProbes:
    """``GET /health`` every ``interval`` seconds, from the first at ``interval``."""

    __slots__ = ("interval", "next_s", "sent")

    def __init__(self, interval: Optional[float]) -> None:
        self.interval = interval
        self.next_s = interval if interval is not None else math.inf
        self.sent = 0

    def due(self, t: float) -> list[float]:
        out = []
        while self.next_s <= t:
            out.append(self.next_s)
            self.sent += 1
            self.next_s = self.sent * self.interval + self.interval  # type: ignore[operator]
        return out


def delayer_server_args(config: SimConfig) -> ServerArgs:
    """The settings every rank's delayer reads (SGLang's ``--prefill-delayer-*``, ``--prefill-max-requests`` and
    ``--chunked-prefill-size``, which ``aligned``'s plugin delayer reads as its ``long_chunk_tokens``)."""
    return ServerArgs(
        enable_dp_attention=True,
        prefill_delayer_queue_min_ratio=config.queue_min_ratio,
        prefill_delayer_max_delay_ms=config.max_delay_ms,
        prefill_max_requests=config.prefill_max_requests,
        chunked_prefill_size=config.chunked_prefill_size,
    )


def run_variant(config: SimConfig, variant: Variant, workload: Workload, progress: Optional[Progress] = None) -> RunResult:
    """Simulate one policy on ``workload``; deterministic for a given ``config.seed``."""
    check_fits(config, workload)
    dp = config.dp_size
    source = workload.start_source(config.seed)
    source.bind(dp, config.chunked_prefill_size)
    clock_now = [0.0]
    # The policies read simulated seconds (the pass's start): clock_now[0], by a call made in C (once per rank and pass)
    clock: Callable[[], float] = functools.partial(clock_now.__getitem__, 0)

    outcomes = [_Outcome() for _ in range(dp)]
    gather = None
    binding = None
    if variant.profile is not None:
        binding = binding_of(variant.profile)
        gather = make_gather(config.gather, dp)
    result = RunResult(variant, config, workload, binding)
    try:
        group: ModelGroup | SGLangGroup
        if config.scheduler == SGLANG:
            from .sglang_backend import SGLangGroup

            group = SGLangGroup(config, variant, workload, outcomes, gather, clock)
        else:
            policy_conf = policy_config(variant.profile, dp, config.policy_settings(), config.policy_params) \
                if variant.profile is not None else None
            group = ModelGroup([
                RankScheduler(
                    r, config,
                    PolicySite(PolicyCore(policy_conf, gather.gather_for(r, policy_conf.policy.collective), clock=clock),
                               binding, outcomes[r])
                    if gather is not None and policy_conf is not None else None,
                    MaxPrefillBsTracker(variant.tracker),
                )
                for r in range(dp)
            ], outcomes, gather)
        try:
            with_stack_room(dp, lambda: _loop(config, variant, group, source, clock_now, result, progress))
        finally:
            group.close()
        result.log_failures = log_failures(group.ranks)
    finally:
        if gather is not None:
            gather.close()
    return result


def log_failures(ranks: Sequence[Any]) -> list[str]:
    """Each rank whose decision log (``PREFILL_DELAYER_DECISION_LOG``) stopped in the run, and why. The runtime goes
    on without it, as a server must; a simulation asked for the log, so its command says so at the end."""
    out = []
    for k, r in enumerate(ranks):
        log = r.delayer.core.decision_log if r.delayer is not None else None
        if log is not None and log.failure is not None:
            out.append(f"rank {k}: {log.failure}")
    return out


class ModelGroup:
    """The model backend's ranks, driven one pass at a time (``sglang_backend.SGLangGroup`` is the other).

    A group gives the engine: ``ranks`` (each with the attributes the record reads:
    ``running_at_start``, ``queue_at_start``, ``usage_at_start``, ``negotiated``,
    ``negotiated_for_chunk``, ``verdict``, ``admitted``, ``batch``), ``receive``,
    ``idle``, ``loads``, ``step``, ``negotiations``, ``peak_kv`` and ``close``.
    """

    def __init__(self, ranks: list[RankScheduler], outcomes: list[_Outcome], gather) -> None:
        self.ranks = ranks
        self.outcomes = outcomes
        self.gather = gather
        self._ran = False  # whether any rank ran a forward last pass (then every rank ran a batch, idle or not)
        self._now = 0.0  # the pass in progress's start, read by the rank calls
        # Each rank's pass up to the end of its admission, built once: the collective round runs them.
        self._calls = [self._rank_pass(r) for r in ranks] if gather is not None else []

    def _rank_pass(self, r: RankScheduler) -> Callable[[], None]:
        """Rank ``r``'s ``get_new_batch_prefill``: its admission, whose call site negotiates through its policy's
        executor (the gather inside runs the next rank's call, on the lock-step gather), then ``finalize``, which
        negotiates the idle inputs when no call site asked (every rank takes part in the round once)."""
        ask = r.delayer.ask  # type: ignore[union-attr]
        group = self

        def rank_pass() -> None:
            batch = r.schedule(group._now, ask)
            r.finish_schedule(batch)
            r.batch = batch

        return rank_pass

    def receive(self, rank: int, req: Request, group_ran: bool) -> bool:
        return self.ranks[rank].receive(req, group_ran)

    def idle(self) -> bool:
        return all(r.idle() for r in self.ranks)

    def loads(self) -> list[tuple[int, int]]:
        return [r.load() for r in self.ranks]

    def step(self, now: float) -> tuple[list[tuple[int, int]], list[list[Request]], int]:
        """One pass: admission (with the collective round), launch, then the previous pass's result at ``now``.

        Returns each rank's work (prefill tokens, decoding requests), each rank's finished
        requests, and the output tokens the result processing produced.
        """
        ranks = self.ranks
        # The collective round: every rank negotiates once (finalize negotiates as not prefillable).
        if self.gather is not None:
            self._now = now
            self.gather.run_round(self._calls)
        else:
            _no_delayer(ranks, now, self.outcomes)
        if self.outcomes[0].estimation == "":  # a policy with no estimation of its own: which ranks had prefill work
            _estimate(ranks, self.outcomes)
        work = [r.run(r.batch) for r in ranks]
        finished = []
        tokens = 0
        ran = self._ran
        self._ran = any(p or d for p, d in work)
        for r in ranks:
            r.publish_load(ran, LOAD_SNAPSHOT_INTERVAL)
            done, out, _ = r.process_results(now)
            if not ran and not self._ran:  # event_loop_overlap: no batch now nor last pass (MLP sync: on any rank)
                r.on_idle(now)
            finished.append(done)
            tokens += out
        return work, finished, tokens

    def negotiations(self) -> list[int]:
        return [r.delayer.passes if r.delayer is not None else 0 for r in self.ranks]

    def peak_kv(self) -> int:
        return max(r.peak_kv for r in self.ranks)

    def close(self) -> None:
        """Close each rank's policy core: its decision log, when ``PREFILL_DELAYER_DECISION_LOG`` asked for one,
        flushed and whole when the run returns (not only when the process exits); and write the running
        requests' output counts back (``RankScheduler.sync_outputs``)."""
        for r in self.ranks:
            r.sync_outputs()
            if r.delayer is not None:
                r.delayer.core.close()


def _loop(config: SimConfig, variant: Variant, group, source, clock_now, result: RunResult, progress: Optional[Progress]) -> None:
    dp = config.dp_size
    cost = config.cost
    duration = config.duration_s if config.duration_s is not None else math.inf
    passes = config.passes
    label = result.variant.label
    dispatcher = Dispatcher(config.load_balance_method, variant.health_dispatch, dp)
    probes = HealthProbes(config.health_check_interval_s)
    gap = config.resubmit_gap_s
    now = 0.0
    done = 0
    ran = False  # whether any rank ran a forward in the last pass (DP attention: then every rank did)
    report_every = max(1, min(500, passes // 100))
    rec = result.recorder()
    requests: list[Request] = []
    probe_id = 0
    if progress is not None:
        progress(label, 0, passes, 0.0)
    while done < passes and now < duration:
        arrivals = source.due(now)
        probe_times = probes.due(now)
        if probe_times:
            for t in probe_times:
                probe_id -= 1
                arrivals.append(Request(probe_id, t, HEALTH_PROMPT, HEALTH_OUTPUT, health_check=True))
            arrivals.sort(key=lambda q: q.arrival)
        if arrivals:
            loads = group.loads()
            for req in arrivals:
                if not req.health_check:
                    dispatcher.refresh(now, loads)
                req.rank = dispatcher.route(req.prompt, req.health_check)
                taken = group.receive(req.rank, req, ran)
                if req.health_check:
                    result.health_checks.append((req.arrival, req.rank, taken))
                else:
                    requests.append(req)
        if group.idle():
            t = min(source.next_arrival(), probes.next_s)
            if t == math.inf:  # nothing left to arrive or serve: a trace run out
                result.drained_s = now
                break
            if t >= duration:  # idle until --duration, which ends the window as it ends every profile's
                now = duration
                break
            now = t
            ran = False
            continue
        clock_now[0] = now
        work, finished, out_tokens = group.step(now)
        pass_s = cost.pass_seconds(work)
        ran = any(p or d for p, d in work)
        rec(now, pass_s, group, work, finished, out_tokens)
        # The previous pass's finished requests: their clients send their next request.
        j = 0
        for rank_done in finished:
            for req in rank_done:
                if not req.health_check:
                    source.finished(req, now + j * gap)
                    j += 1
        now += pass_s
        done += 1
        if progress is not None and done % report_every == 0:
            progress(label, done, passes, now)
    result.finish(now, requests)
    result.capped = done >= passes  # ended by the pass cap, not at --duration or with nothing left to do
    result.negotiations = group.negotiations()
    result.peak_kv = group.peak_kv()
    if progress is not None:
        progress(label, done, passes, now, final=True)


def _estimate(ranks: Sequence[RankScheduler], outcomes: list[_Outcome]) -> None:
    """The pass's status from the ranks' prefill work (none, mixed, all), for a policy whose decision has none."""
    working = sum(r.had_work for r in ranks)
    estimation = "none" if working == 0 else "all" if working == len(ranks) else "mixed"
    for o in outcomes:
        o.estimation = estimation


def _allow(_args: NegotiateArgs) -> bool:
    return True


def _no_delayer(ranks: Sequence[RankScheduler], now: float, outcomes: list[_Outcome]) -> None:
    """Without a delayer every call site proceeds; the status is still recorded, for comparison."""
    for r in ranks:
        r.batch = r.schedule(now, _allow)
    asking = sum(r.negotiated is not None for r in ranks)  # the ranks whose admission reached a call site
    estimation = "none" if asking == 0 else "all" if asking == len(ranks) else "mixed"
    for r, o in zip(ranks, outcomes):
        r.finish_schedule(r.batch)
        o.estimation, o.allow, o.reason, o.forward_passes = estimation, True, "off", 0


def simulate(config: SimConfig, variants: Sequence[Variant], workload: Workload, progress: Optional[Progress] = None) -> list[RunResult]:
    """Run every variant on the same workload and settings."""
    if not variants:
        raise SimInputError("no profile to simulate")
    check_fits(config, workload)
    results = [run_variant(config, v, workload, progress) for v in variants]
    return same_window(config, variants, workload, results, progress)


def same_window(config: SimConfig, variants: Sequence[Variant], workload: Workload, results: list[RunResult],
                progress: Optional[Progress] = None) -> list[RunResult]:
    """Every profile over the same simulated time: a pass cap ends each run at another time (a slower profile's
    passes take longer), so the runs that went past the earliest capped end are run again up to it, uncapped.

    A comparison over unequal times inflates the slower profiles' TTFT and unserved requests.
    """
    capped = [r.end_s for r in results if r.capped]
    if not capped:
        return _idle_to(max(r.end_s for r in results), results)
    horizon = min(capped)
    if horizon <= config.warmup_s:
        first = next(r for r in results if r.capped and r.end_s == horizon)
        raise SimInputError(
            f"--passes {config.passes} ends profile {first.variant.label} at {horizon:.1f} simulated s, inside the "
            f"{config.warmup_s:g} s --warmup: nothing would be measured; raise --passes or shorten --warmup")
    again = replace(config, passes=sys.maxsize, duration_s=horizon)
    return _idle_to(horizon, [run_variant(again, v, workload, progress) if r.end_s > horizon else r
                              for v, r in zip(variants, results)])


def _idle_to(horizon: float, results: list[RunResult]) -> list[RunResult]:
    """A run that served everything before ``horizon`` (a trace run out) sits idle to it: each profile is then
    measured over the same seconds, so the same tokens give the same tok/s, not more for the one that finished
    first (its finish is ``drained_s``, which the header reports)."""
    for r in results:
        if r.drained_s is not None and r.end_s < horizon:
            r.finish(horizon, r.requests)
    return results


__all__ = ["check_fits", "run_variant", "simulate"]
