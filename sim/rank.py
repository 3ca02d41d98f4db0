"""One DP rank's scheduler, modelled on SGLang 0.5.23's ``Scheduler`` and ``PrefillAdder``.

What each part mirrors (``sglang/srt/managers/``):

* ``schedule`` = ``Scheduler.get_new_batch_prefill``: build a
  ``PrefillDelayerSinglePassExecutor`` on the token usage, run the admission,
  ``finalize`` it, feed ``max_prefill_bs``'s tracker (``trackers``);
* ``_admit`` = ``Scheduler._get_new_batch_prefill_raw`` with
  ``PrefillAdder.add_chunked_req`` / ``add_one_req`` (``schedule_policy.py``):
  the early returns (nothing to do, batch full, no request slot), the
  continuing chunk first, then the FCFS waiting queue until a budget runs out:
  ``max_running_requests`` (``get_num_allocatable_reqs``), the KV tokens
  (``PrefillBudget.check_prefill``: ``total_tokens < remaining_total``), the
  chunk and input budgets (``budget_state``), ``prefill_max_requests``;
  a request longer than the chunk left is cut there and becomes the chunked request;
* the delayer is consulted exactly where SGLang consults it: by
  ``add_chunked_req`` (reporting prefillable and ignoring the verdict: a
  mid-chunk rank prefills regardless) and by ``add_one_req`` after its budget
  checks, a veto ending the admission (``AddReqResult.OTHER``); a pass that
  reaches neither negotiates as not prefillable in the executor's ``finalize``;
  one collective per rank per pass;
* ``run`` = ``get_next_batch_to_run`` / ``update_running_batch``: a pass runs
  the prefill batch if there is one (the running requests wait, unless
  ``enable_mixed_chunk`` decodes them in the same pass, their tokens taken from
  the chunk budget first), else decodes the running batch one token each;
  requests whose prompt is complete produce their first token and join the
  running batch after the pass (``process_batch_result_prefill``, then the merge
  at the next ``get_next_batch_to_run``).

Simplifications, all on the safe side of SGLang's own accounting: page size 1;
no prefix cache; each admitted request reserves its whole prompt plus output
in KV (SGLang's ``new_token_ratio`` estimate taken as 1, the output length
being known), so decode never runs out of memory and retraction is not
modelled; one chunked request per rank (FCFS, as SGLang tracks one).
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Generator, Optional

from .config import SimConfig
from .policy_site import Facts, PolicySite
from .trackers import MaxPrefillBsTracker, attempted_prefill_bs
from .workload import Request

# What ``schedule`` yields when this rank negotiates as prefillable:
# (running_batch, max_prefill_bs, max_running_requests, waiting_queue_len).
NegotiateArgs = tuple[int, int, int, int]
Batch = list[tuple[Request, int]]  # (request, tokens prefilled this pass)


class RankScheduler:
    """A DP rank: waiting queue, running batch, at most one chunked request, a KV pool, its delayer."""

    def __init__(self, rank: int, config: SimConfig, delayer: Optional[PolicySite], tracker: MaxPrefillBsTracker) -> None:
        self.rank = rank
        self.delayer = delayer
        self.tracker = tracker
        self._mrr = config.max_running_requests
        self._capacity = config.max_total_tokens
        self._chunk = config.chunked_prefill_size
        self._input_budget = config.max_prefill_tokens
        self._mixed = config.enable_mixed_chunk
        self._pmr = config.prefill_max_requests
        self.waiting: deque[Request] = deque()
        self.chunked: Optional[Request] = None
        self.batch_is_full = False
        self._running: list[tuple[int, int, Request]] = []  # heap of (decode_end, rid, req)
        self.decode_steps = 0
        self.committed = 0  # KV tokens reserved: prompt + output of every admitted, unfinished request
        self.kv_used = 0  # KV tokens held: prefilled prompt + generated tokens
        self.peak_kv = 0
        # The pass in progress.
        self.executor: Optional[PolicySite] = None
        self.extended = False  # the previous pass ran a prefill batch
        self.had_work = False  # this pass started with a waiting request or a chunk in progress
        self.negotiated: Optional[NegotiateArgs] = None
        self.negotiated_for_chunk = False  # the call site was add_chunked_req (the verdict is ignored)
        self.new_admissions = 0  # requests admitted from the waiting queue this pass
        self.running_at_start = 0
        self.queue_at_start = 0
        self.usage_at_start = 0.0

    # ----- observations ------------------------------------------------------

    @property
    def running(self) -> int:
        """``len(running_batch.reqs)``."""
        return len(self._running)

    @property
    def token_usage(self) -> float:
        return self.kv_used / self._capacity

    def idle(self) -> bool:
        return not self.waiting and self.chunked is None and not self._running

    # ----- one pass: admission ------------------------------------------------

    def schedule(self) -> Generator[NegotiateArgs, bool, Optional[Batch]]:
        """``get_new_batch_prefill``'s admission: yields the negotiate arguments once if this rank negotiates
        as prefillable (send the verdict back), returns the prefill batch (None: no prefill this pass)."""
        self.tracker.start_pass()
        usage = self.kv_used / self._capacity
        waiting, chunked = self.waiting, self.chunked
        self.had_work = bool(waiting) or chunked is not None
        self.negotiated = None
        self.negotiated_for_chunk = False
        self.new_admissions = 0
        self.running_at_start = len(self._running)
        self.queue_at_start = len(waiting)
        self.usage_at_start = usage
        # No policy (``off``): the call sites are still reached and yield, and the
        # engine answers "allow" without a collective.
        site = self.delayer
        if site is None:
            self.executor = None
            return (yield from self._admit(True))
        facts = Facts(usage, len(self._running), self.tracker.value, self._mrr, len(waiting), self.extended, self.had_work)
        self.executor = site.begin(facts)
        if not site.gate_first:
            return (yield from self._admit(True))
        # A gate before admission (a scheduler method): a rank with prefill work asks it, and a
        # refusal means get_new_batch_prefill does not run; a rank without asks nothing (its
        # finalize negotiates the same inputs).
        if not self.had_work:
            return None
        if not (yield (len(self._running), self.tracker.value, self._mrr, len(waiting))):
            return None
        return (yield from self._admit(False))

    def _admit(self, consult: bool) -> Generator[NegotiateArgs, bool, Optional[Batch]]:
        """The prefill adder; ``consult``: its call sites ask the policy (else every call site proceeds)."""
        waiting, chunked, n_running, mrr = self.waiting, self.chunked, len(self._running), self._mrr
        if n_running == 0:
            self.batch_is_full = False
        if (self.batch_is_full or not waiting) and chunked is None:
            return None
        if mrr - n_running <= 0 and chunked is None:
            self.batch_is_full = True
            return None
        mixed = n_running if self._mixed else 0
        rem_chunk = self._chunk - mixed
        rem_input = self._input_budget - mixed
        rem_total = self._capacity - self.committed - mixed
        args = (n_running, self.tracker.value, mrr, len(waiting))
        allow: Optional[bool] = None
        batch: Batch = []
        if chunked is not None:  # PrefillAdder.add_chunked_req
            self.negotiated = args
            self.negotiated_for_chunk = True
            allow = (yield args) if consult else True  # a mid-chunk rank prefills regardless of the verdict
            n = min(chunked.prompt - chunked.prefilled, rem_chunk)
            batch.append((chunked, n))
            rem_chunk -= n
            rem_input -= n
            if chunked.prefilled + n == chunked.prompt:
                self.chunked = None
        admitted = 0
        for req in waiting:
            if rem_input <= 0 or rem_chunk <= 0:  # budget_state() == OTHER
                break
            if len(batch) >= mrr - n_running:  # get_num_allocatable_reqs
                self.batch_is_full = True
                break
            # PrefillAdder.add_one_req
            if self._pmr is not None and len(batch) >= self._pmr:
                break
            extend = req.prompt
            total = extend + req.output
            if not total < rem_total:  # PrefillBudget.check_prefill: NO_TOKEN
                self.batch_is_full = bool(batch) or n_running > 0
                break
            n = extend if extend <= rem_chunk else rem_chunk
            if allow is None:
                self.negotiated = args
                allow = (yield args) if consult else True
            if not allow:  # the delayer's veto: AddReqResult.OTHER
                break
            batch.append((req, n))
            admitted += 1
            self.committed += total
            rem_total -= total
            rem_chunk -= n
            rem_input -= n
            if n < extend:
                self.chunked = req  # the new chunked request
        if not batch:
            return None
        for _ in range(admitted):
            waiting.popleft()
        self.new_admissions = admitted
        return batch

    def finish_schedule(self, batch: Optional[Batch]) -> None:
        """End of ``get_new_batch_prefill``: the executor's finalize, then the tracker."""
        if self.executor is not None:
            self.executor.finalize(actual_prefill=batch is not None)
        attempted = None
        if self.negotiated is not None:
            running, _, mrr, waiting = self.negotiated
            attempted = attempted_prefill_bs(running, mrr, waiting)
        self.tracker.end_pass(len(batch) if batch else 0, attempted)

    # ----- one pass: the forward -------------------------------------------------

    def run(self, batch: Optional[Batch]) -> tuple[int, int]:
        """What this rank computes this pass: (prefill tokens, decoding requests)."""
        self.extended = bool(batch)
        prefill_tokens = 0
        if batch:
            for req, n in batch:
                req.prefilled += n
                prefill_tokens += n
            self.kv_used += prefill_tokens
            if self.kv_used > self.peak_kv:
                self.peak_kv = self.kv_used
            decoding = len(self._running) if self._mixed else 0
        else:
            decoding = len(self._running)
        return prefill_tokens, decoding

    def end_pass(self, batch: Optional[Batch], decoded: int, t_end: float) -> tuple[list[Request], int, int]:
        """After the pass ends at ``t_end``: decode bookkeeping, finished prefills join.

        Returns (finished requests, output tokens made, first tokens made).
        """
        finished: list[Request] = []
        running = self._running
        tokens = 0
        if decoded:
            self.decode_steps += 1
            self.kv_used += decoded
            if self.kv_used > self.peak_kv:
                self.peak_kv = self.kv_used
            tokens += decoded
            steps = self.decode_steps
            while running and running[0][0] <= steps:
                req = heapq.heappop(running)[2]
                self._release(req, t_end)
                finished.append(req)
        firsts = 0
        if batch:
            for req, _ in batch:
                if req.prefilled == req.prompt:
                    req.first_token_s = t_end
                    firsts += 1
                    self.kv_used += 1
                    if self.kv_used > self.peak_kv:
                        self.peak_kv = self.kv_used
                    if req.output <= 1:
                        self._release(req, t_end)
                        finished.append(req)
                    else:
                        req.decode_end = self.decode_steps + req.output - 1
                        heapq.heappush(running, (req.decode_end, req.rid, req))
        if finished:
            self.batch_is_full = False
        return finished, tokens + firsts, firsts

    def _release(self, req: Request, t_end: float) -> None:
        req.finish_s = t_end
        self.committed -= req.prompt + req.output
        self.kv_used -= req.prompt + req.output
