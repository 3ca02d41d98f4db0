"""The lock-step engine: N ranks, one scheduler pass at a time, each rank's own ``PolicyCore``.

A pass, on every rank at once:

1. requests that have arrived by the pass's start are dispatched round-robin
   over the ranks (SGLang's ``DataParallelController.round_robin_scheduler``);
2. each rank runs its scheduler (``rank.RankScheduler.schedule``) up to the
   point where the policy's ``SimBinding`` says it is consulted (SGLang's
   delayer: the prefill adder's call sites; a gate: before admission);
3. one collective round: every rank's policy (``policy_site.PolicySite``)
   negotiates, over the in-process gather (``gather``), with the simulated
   clock; a rank that asked nothing negotiates its idle inputs;
4. each rank finishes its admission with its verdict, finalizes the pass
   and runs its forward; the pass lasts as long as the slowest rank (``cost``);
5. finished requests leave, and closed-loop clients send their next request.

When no rank has anything to do the clock jumps to the next arrival (no pass).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

from ..runtime.core import PolicyCore
from .config import SimConfig, Variant
from .errors import SimInputError
from .gather import make_gather
from .policy_site import PolicySite, binding_of, policy_config
from .rank import RankScheduler
from .result import RunResult
from .trackers import MaxPrefillBsTracker
from .workload import Request, Workload, largest_request

# progress(variant label, passes done, passes planned, simulated seconds, final=False)
Progress = Callable[..., None]


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
    """Every request must fit one rank's KV pool, or it would wait forever at the head of its queue."""
    largest = largest_request(workload)
    if largest is not None and largest[0] >= config.max_total_tokens:
        tokens, where = largest
        raise SimInputError(
            f"{where} needs {tokens} KV tokens (prompt + output), but max_total_tokens is {config.max_total_tokens}: "
            "it could never be admitted"
        )


def run_variant(config: SimConfig, variant: Variant, workload: Workload, progress: Optional[Progress] = None) -> RunResult:
    """Simulate one policy on ``workload``; deterministic for a given ``config.seed``."""
    check_fits(config, workload)
    dp = config.dp_size
    source = workload.start_source(config.seed)
    source.bind(dp, config.chunked_prefill_size)
    clock_now = [0.0]

    def clock() -> float:  # the policies read simulated seconds (the pass's start)
        return clock_now[0]

    outcomes = [_Outcome() for _ in range(dp)]
    gather = None
    sites: list[Optional[PolicySite]] = [None] * dp
    if variant.profile is not None:
        binding = binding_of(variant.profile)
        policy_conf = policy_config(variant.profile, dp, config.delayer_settings(), config.policy_params)
        gather = make_gather(config.gather, dp)
        sites = [PolicySite(PolicyCore(policy_conf, gather.gather_for(r), clock=clock), binding, outcomes[r]) for r in range(dp)]
    ranks = [RankScheduler(r, config, sites[r], MaxPrefillBsTracker(variant.tracker)) for r in range(dp)]
    result = RunResult(variant, config, workload, sites[0].binding if sites[0] is not None else None)
    try:
        _loop(config, ranks, outcomes, gather, source, clock_now, result, progress)
    finally:
        if gather is not None:
            gather.close()
    return result


def _loop(config, ranks, outcomes, gather, source, clock_now, result: RunResult, progress: Optional[Progress]) -> None:
    dp = config.dp_size
    cost = config.cost
    base, per_prefill, per_decode = cost.base_s, cost.prefill_token_s, cost.decode_request_s
    duration = config.duration_s if config.duration_s is not None else math.inf
    passes = config.passes
    label = result.variant.label
    rr = 0  # the round-robin dispatcher's counter
    now = 0.0
    done = 0
    report_every = max(1, min(500, passes // 100))
    rec = result.recorder()
    requests: list[Request] = []
    if progress is not None:
        progress(label, 0, passes, 0.0)
    while done < passes and now < duration:
        for req in source.due(now):
            req.rank = rr
            ranks[rr].waiting.append(req)
            requests.append(req)
            rr = rr + 1 if rr + 1 < dp else 0
        if all(r.idle() for r in ranks):
            t = source.next_arrival()
            if t == math.inf or t >= duration:
                break
            now = t
            continue
        clock_now[0] = now
        # Admission up to the delayer's call site, on every rank.
        gens, asks, batches = [], [], [None] * dp
        for i, r in enumerate(ranks):
            gen = r.schedule()
            try:
                asks.append(next(gen))
                gens.append(gen)
            except StopIteration as stop:
                batches[i] = stop.value
                asks.append(None)
                gens.append(None)
        # The collective round: every rank negotiates once (finalize negotiates as not prefillable).
        verdicts: list[Optional[bool]] = [None] * dp
        if gather is not None:
            gather.run_round([_call(r, ask, verdicts, i) for i, (r, ask) in enumerate(zip(ranks, asks))])
        else:
            _no_delayer(asks, verdicts, outcomes)
        # Admission with the verdict, the executor's finalize, the forward.
        pass_s = 0.0
        work = []
        for i, r in enumerate(ranks):
            gen = gens[i]
            if gen is not None:
                try:
                    gen.send(verdicts[i])
                    raise AssertionError("a rank asked its policy twice in one pass")
                except StopIteration as stop:
                    batches[i] = stop.value
                r.finish_schedule(batches[i])
            else:
                r.tracker.end_pass(0, None)
            prefill, decode = r.run(batches[i])
            work.append((prefill, decode))
            t = base + per_prefill * prefill + per_decode * decode
            if t > pass_s:
                pass_s = t
        end = now + pass_s
        finished_all = []
        out_tokens = 0
        for i, r in enumerate(ranks):
            finished, tokens, _ = r.end_pass(batches[i], work[i][1], end)
            out_tokens += tokens
            finished_all.extend(finished)
        if outcomes[0].estimation == "":  # a policy with no estimation of its own: which ranks had prefill work
            _estimate(ranks, outcomes)
        rec(now, pass_s, ranks, outcomes, batches, work, asks, out_tokens)
        for req in finished_all:
            source.finished(req, end)
        now = end
        done += 1
        if progress is not None and done % report_every == 0:
            progress(label, done, passes, now)
    result.finish(now, requests)
    result.negotiations = [r.delayer.passes if r.delayer is not None else 0 for r in ranks]
    result.peak_kv = max(r.peak_kv for r in ranks)
    if progress is not None:
        progress(label, done, passes, now, final=True)


def _call(rank: RankScheduler, ask, verdicts: list, i: int) -> Callable[[], None]:
    executor = rank.executor
    if ask is None:
        # No call site reached: the executor's finalize negotiates as not prefillable, then records.
        return lambda: executor.finalize(actual_prefill=False)

    def negotiate() -> None:
        verdicts[i] = executor.negotiate_should_allow_prefill(True, *ask)

    return negotiate


def _estimate(ranks: Sequence[RankScheduler], outcomes: list[_Outcome]) -> None:
    """The pass's status from the ranks' prefill work (none, mixed, all), for a policy whose decision has none."""
    working = sum(r.had_work for r in ranks)
    estimation = "none" if working == 0 else "all" if working == len(ranks) else "mixed"
    for o in outcomes:
        o.estimation = estimation


def _no_delayer(asks: list, verdicts: list, outcomes: list[_Outcome]) -> None:
    """Without a delayer every call site proceeds; the status is still recorded, for comparison."""
    asking = sum(a is not None for a in asks)
    estimation = "none" if asking == 0 else "all" if asking == len(asks) else "mixed"
    for i, a in enumerate(asks):
        verdicts[i] = True if a is not None else None
        o = outcomes[i]
        o.estimation, o.allow, o.reason, o.forward_passes = estimation, True, "off", 0


def simulate(config: SimConfig, variants: Sequence[Variant], workload: Workload, progress: Optional[Progress] = None) -> list[RunResult]:
    """Run every variant on the same workload and settings."""
    if not variants:
        raise SimInputError("no profile to simulate")
    check_fits(config, workload)
    return [run_variant(config, v, workload, progress) for v in variants]


__all__ = ["check_fits", "run_variant", "simulate"]
