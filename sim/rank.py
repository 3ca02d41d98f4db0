"""One DP rank's scheduler, modelled on SGLang 0.5.23's ``Scheduler`` and ``PrefillAdder`` (the ``model`` backend).

What each part mirrors (``sglang/srt/managers/``, ``sglang/srt/mem_cache/prefill_budget.py``):

* ``schedule`` = ``Scheduler.get_new_batch_prefill``: the policy's pass (``policy_site.PolicySite``,
  the executor's shape) on the rank's facts, the admission, ``finalize``, ``max_prefill_bs``'s
  tracker (``trackers``); a policy consulted before admission (a gate) decides whether it runs;
* ``_admit`` = ``Scheduler._get_new_batch_prefill_raw`` with ``PrefillAdder``: the early
  returns (``batch_is_full`` or an empty queue without a chunked request; no request
  slot), ``add_chunked_req`` (negotiates, ignores the verdict, takes
  ``min(chunk left, KV left)``), then the FCFS queue with ``add_one_req_ignore_eos``
  (the requests have fixed output lengths): ``prefill_max_requests``, the KV fit
  of the page-rounded prompt (``PrefillBudget.can_allocate_prefill``) and the
  ignore-EOS headroom walk over the requests' remaining outputs, the delayer (a
  veto ends admission), a prompt longer than the chunk left is cut there and
  becomes the chunked request; ``_update_prefill_budget`` charges the page-rounded
  extend to the chunk and input budgets and reserves it plus a page plus the
  output (``min(max_new_tokens, 4096)``, none for a cut chunk) in KV;
  ``budget_state`` after each admission (out of KV: ``batch_is_full``);
* ``run`` = ``get_next_batch_to_run``: the prefill batch if there is one, else a
  decode of the running batch without the requests whose last token is still in
  flight (``_reqs_finishing_inflight``); ``--mixed-chunk`` decodes them in prefill
  passes too, their tokens taken from the budgets first;
* ``process_results`` = ``process_batch_result`` one pass late, as
  ``event_loop_overlap`` runs it: after the next pass's admission and launch. So
  that admission still counts the requests the previous pass finished as running,
  their KV as held, and their clients' next requests have not arrived.

KV is allocated in pages (``PagedTokenToKVPoolAllocator``): a request holds
``ceil(tokens / page_size)`` pages, its prompt as prefilled and one token per
decode step after the first (the first output token comes from the prefill).

Bookkeeping (no per-request loop per pass): a decode step gives every running request but
those whose last token is in flight one token, so the rank counts its decode steps
(``_steps``) and keeps each running request's step of its last token (``Request.done_at``,
set when its first token is processed; its output left is ``done_at - _steps``), with the
running requests by that step (``_by_done``): a pass touches only the requests that join,
get their first token or finish. The results are the per-request loops' exactly.

Simplifications: no prefix cache (the ``sglang`` backend has one); no retraction
(the ignore-EOS headroom check keeps decode within KV for fixed output lengths);
FCFS.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Optional

from .config import SimConfig
from .policy_site import Facts, PolicySite
from .trackers import MaxPrefillBsTracker
from .workload import Request

_new_tuple = tuple.__new__

# What ``schedule`` asks with when this rank negotiates as prefillable:
# (running_batch, max_prefill_bs, max_running_requests, waiting_queue_len).
NegotiateArgs = tuple[int, int, int, int]
Ask = Callable[[NegotiateArgs], bool]  # a call site's negotiation: the verdict for these arguments
Batch = list[tuple[Request, int]]  # (request, tokens prefilled this pass)
Launch = tuple[list[Request], bool, int, bool]  # (joined the running batch, decoded it, requests in the batch, ran)
_NOTHING_LAUNCHED: Launch = ([], False, 0, False)  # (its list is never appended to)

LOAD_STALL_REFRESH_S = 0.05  # scheduler.LOAD_STALL_REFRESH_S
CLIP_MAX_NEW_TOKENS = 4096  # schedule_policy.CLIP_MAX_NEW_TOKENS (SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION's default)
IGNORE_EOS_RESERVE_TOKENS = 1  # schedule_policy.IGNORE_EOS_RESERVE_TOKENS


def _ceil(tokens: int, page: int) -> int:
    return -(-tokens // page) * page


def _insert_state(states: list[tuple[int, int]], req: Request) -> None:
    """``add_req_state(req, insert_sort=True)``: before the first state with as much output left or more
    (and, as SGLang's loop has it, before the last one when none has)."""
    left_new = req.output
    i = 0
    for i in range(len(states)):
        if left_new <= states[i][0]:
            break
    states.insert(i, (left_new, req.prompt))


class RankScheduler:
    """A DP rank: waiting queue, running batch, at most one chunked request, a paged KV pool, its delayer."""

    def __init__(self, rank: int, config: SimConfig, delayer: Optional[PolicySite], tracker: MaxPrefillBsTracker) -> None:
        self.rank = rank
        self.delayer = delayer
        self._phased = delayer is not None and delayer.has_prefill_phase  # a pass can be a prefill phase
        self.tracker = tracker
        self._mrr = config.max_running_requests
        self._capacity = config.max_total_tokens // config.page_size * config.page_size
        self._page = config.page_size
        self._chunk = config.chunked_prefill_size
        self._input_budget = config.max_prefill_tokens
        self._mixed = config.enable_mixed_chunk
        self._pmr = config.prefill_max_requests
        self.waiting: deque[Request] = deque()
        self.chunked: Optional[Request] = None
        self.batch_is_full = False
        self.running: list[Request] = []  # running_batch.reqs, in admission order
        self.allocated = 0  # KV tokens held (whole pages)
        self._clipped_left = 0  # sum over running of min(output left, CLIP_MAX_NEW_TOKENS), kept as they change
        # The running requests past their first token ("tracked"): a tracked request's output left is
        # done_at - _steps (module docstring).
        self._steps = 0  # decode steps whose result has been processed
        self._by_done: dict[int, list[Request]] = {}  # tracked requests by done_at, each list in admission order
        self._near = 0  # tracked requests with at most CLIP_MAX_NEW_TOKENS output left
        # tracked requests by (prompt + output - done_at) % page: which start a KV page at a step (page > 1)
        self._residues: Optional[dict[int, int]] = {} if config.page_size > 1 else None
        self._max_output = 0  # the longest output this rank has taken (bounds every request's output left)
        self.peak_kv = 0
        self.dropped_health_checks = 0
        # The pass in progress, and the one whose result is not processed yet (overlap).
        self.executor: Optional[PolicySite] = None
        self.extended = False  # the previous pass ran a prefill batch
        self.had_work = False  # this pass started with a waiting request or a chunk in progress
        self.gate_refused = False  # a policy consulted before admission deferred this pass's prefill
        self.chunk_held = False  # this pass's refusal held the chunk in progress (``SimBinding.gates_partial_chunk``)
        self.idled = False  # a prefill phase idled this rank's decode (``SimBinding.prefill_phase``)
        self.backlog = False  # the last pass whose admission ran left requests waiting
        self._waiting_tokens = 0  # the prompt tokens of the waiting queue
        self.negotiated: Optional[NegotiateArgs] = None
        self.negotiated_for_chunk = False  # the call site was add_chunked_req (the verdict is ignored)
        self.verdict: Optional[bool] = None
        self.admitted: list[Request] = []  # requests admitted from the waiting queue this pass
        self.batch: Optional[Batch] = None  # this pass's prefill batch
        self.running_at_start = 0
        self.queue_at_start = 0
        self.usage_at_start = 0.0
        # The last pass's batch, whose outputs come out at process_results: the requests that joined the
        # running batch in it (their first token), whether it decoded the running batch, its requests.
        self._flight_new: list[Request] = []
        self._flight_decoded = False
        self._flight_count = 0
        self._flight_ones = 0  # of _flight_new, those of one output token (it finishes them)
        self._ran = False  # whether this rank's last pass ran a batch (its result is queued)
        self._launched: Launch = _NOTHING_LAUNCHED  # this pass's batch, once launched (and whether it ran)
        self._last_extend = False  # whether the batch whose result is pending was a prefill
        self._launched_extend = False
        self._running_batch = 0  # running_batch's size once this pass's batch is launched
        self._snapshot = (0, 0)  # the last published load snapshot
        self._publish_counter = 0
        self._last_stall_publish = -float("inf")

    # ----- observations ------------------------------------------------------

    @property
    def token_usage(self) -> float:
        return self.allocated / self._capacity

    def idle(self) -> bool:
        """Nothing to schedule and no result to process."""
        return not self.waiting and self.chunked is None and not self.running and not self._ran

    def load(self) -> tuple[int, int]:
        """The last load snapshot this rank published (running + waiting requests, KV tokens used + waiting prompts)."""
        return self._snapshot

    def publish_load(self, group_ran: bool, interval: int) -> None:
        """``publish_load_snapshot`` at the top of ``process_batch_result``: after a prefill always, else every
        ``interval``-th result (``--load-snapshot-publish-interval``); no result to process, no snapshot."""
        if not (self._ran or group_ran):  # no batch (not even an idle one) last pass: nothing is processed
            return
        if not self._last_extend:
            self._publish_counter += 1
            if self._publish_counter < interval:
                return
        self._publish_counter = 0
        self._snapshot = (self._running_batch + len(self.waiting), self.allocated + self._waiting_tokens)

    # ----- requests in -----------------------------------------------------------

    def receive(self, req: Request, group_ran: bool) -> bool:
        """``process_input_requests``: a health check is dropped unless this scheduler is fully idle."""
        if req.health_check and not self._fully_idle(group_ran):
            self.dropped_health_checks += 1
            return False
        self.waiting.append(req)
        self._waiting_tokens += req.prompt
        if req.output > self._max_output:
            self._max_output = req.output
        return True

    def on_idle(self, now: float) -> None:
        """``Scheduler.on_idle`` (no batch this pass nor the last, on any rank): it republishes the load snapshot,
        at once if nothing is left, else every ``LOAD_STALL_REFRESH_S`` (50 ms) while requests wait."""
        if not self.waiting and self.chunked is None and not self.running:
            self._publish_counter = 0
        elif now - self._last_stall_publish >= LOAD_STALL_REFRESH_S:
            self._last_stall_publish = now
            self._publish_counter = 0
        else:
            return
        self._snapshot = (len(self.waiting), self.allocated + self._waiting_tokens)

    def _fully_idle(self, group_ran: bool) -> bool:
        # is_fully_idle(for_health_check=True): nothing running, chunked or waiting, and with
        # overlap no queued result; under DP attention every rank ran a batch (idle or not)
        # whenever one rank had work.
        return not self.running and self.chunked is None and not self.waiting and not group_ran

    def facts(self, now: float, usage: Optional[float] = None) -> Facts:
        """What this rank's scheduler knows at the start of the pass at ``now``: the policy's inputs come from these.
        ``usage``: the token usage, when the caller has it already."""
        waiting, chunked, running = self.waiting, self.chunked, self.running
        n_running = len(running)
        left = chunked.prompt - chunked.prefilled if chunked is not None else 0
        head_fits = False
        oldest_wait = 0.0
        if waiting:
            head = waiting[0]
            if n_running < self._mrr and not (self.batch_is_full and n_running):
                # can_allocate_prefill for the head alone: its page-rounded prompt and a page, beyond what the
                # running requests have reserved for their outputs (and, with mixed chunks, their decode tokens)
                reserved = self._clipped_left + (n_running if self._mixed else 0)
                page = self._page
                head_fits = -(-head.prompt // page) * page + page <= self._capacity - self.allocated - reserved  # _ceil
            oldest_wait = now - head.arrival
            if oldest_wait < 0.0:  # max(0.0, ...), without the call (once per rank and pass)
                oldest_wait = 0.0
        prefillable = bool(waiting) or chunked is not None
        # In Facts' field order, every field given: the tuple built as NamedTuple's own __new__ builds it, without
        # that Python-level call (once per rank and pass).
        return _new_tuple(Facts, (
            self.allocated / self._capacity if usage is None else usage, n_running, self.tracker.value, self._mrr, len(waiting), self.extended,
            prefillable, self._waiting_tokens + left, chunked is not None, left, head_fits, oldest_wait, self.backlog,
            prefillable or bool(running), self._chunk,
        ))

    # ----- one pass: admission ------------------------------------------------

    def schedule(self, now: float, ask: Ask) -> Optional[Batch]:
        """``get_new_batch_prefill``'s admission at ``now``: calls ``ask`` with the negotiate arguments once if this
        rank negotiates as prefillable, and admits by its verdict; returns the prefill batch (None: no prefill).

        ``ask`` is where the rank's collective round happens (``engine.ModelGroup``): on the lock-step gather it
        runs the next rank's admission up to its own ask, nested, so every rank reaches its call site in rank
        order before any verdict comes back, as SGLang's ranks all reach the all-gather before it returns."""
        self.tracker.start_pass()
        usage = self.allocated / self._capacity
        waiting, chunked = self.waiting, self.chunked
        self.had_work = bool(waiting) or chunked is not None
        self.negotiated = None
        self.negotiated_for_chunk = False
        self.verdict = None
        self.gate_refused = False
        self.chunk_held = False
        self.admitted = []
        self.running_at_start = len(self.running)
        self.queue_at_start = len(waiting)
        self.usage_at_start = usage
        # No policy (``off``): the call sites are still reached and ask, and the
        # engine answers "allow" without a collective.
        site = self.delayer
        if site is None:
            self.executor = None
            return self._admit(ask)
        self.executor = site.begin(self.facts(now, usage))
        if not site.gate_first:
            return self._admit(ask)
        # A gate before admission (a scheduler method): a rank with prefill work asks it, and a
        # refusal means get_new_batch_prefill does not run; a rank without asks nothing (its
        # finalize negotiates the same inputs).
        if not self.had_work:
            return None
        if not ask((len(self.running), self.tracker.value, self._mrr, len(waiting))):
            self.gate_refused = True
            if site.gates_partial_chunk or chunked is None:
                self.chunk_held = chunked is not None
                return None
            return self._admit(None, chunk_only=True)  # the chunk goes on, nothing new is admitted
        return self._admit(None)

    def _admit(self, ask: Optional[Ask], chunk_only: bool = False) -> Optional[Batch]:
        """The prefill adder; ``ask``: its call sites ask the policy through it (None: every call site proceeds);
        ``chunk_only``: only the chunk in progress goes on (a refusal that does not hold it)."""
        waiting, chunked, running, mrr, page = self.waiting, self.chunked, self.running, self._mrr, self._page
        n_running = len(running)
        if n_running == 0:
            self.batch_is_full = False
        if (self.batch_is_full or not waiting) and chunked is None:
            return None
        if mrr - n_running <= 0 and chunked is None:  # get_num_allocatable_reqs() <= 0
            self.batch_is_full = True
            return None
        # PrefillAdder.__init__ and its PrefillBudget.
        mixed = n_running if self._mixed else 0
        rem_chunk = self._chunk - mixed
        rem_input = self._input_budget - mixed
        free = self._capacity - self.allocated
        total_offset = mixed + self._clipped_left  # sum over running of min(output left, CLIP_MAX_NEW_TOKENS)
        current_offset = mixed
        args = (n_running, self.tracker.value, mrr, len(waiting))
        allow: Optional[bool] = None
        batch: Batch = []
        if chunked is not None:  # add_chunked_req
            rem_total = free - total_offset
            rem = min(rem_chunk, rem_total) if rem_total > 0 else rem_chunk  # available_chunk_tokens
            self.negotiated = args
            self.negotiated_for_chunk = True
            allow = self.verdict = ask(args) if ask is not None else True
            if not allow and self.executor is not None and self.executor.gates_partial_chunk:
                self.chunk_held = True  # the refusal holds the chunk too (and, as any veto, ends admission)
                return None
            # otherwise a mid-chunk rank prefills regardless of the verdict (SGLang's add_chunked_req)
            left = chunked.prompt - chunked.prefilled
            n = min(left, rem)
            truncated = n < left
            ext = -(-n // page) * page  # _ceil, inline in the admission's hot path
            immediate = ext + page
            total_offset += immediate + (0 if truncated else min(chunked.output, CLIP_MAX_NEW_TOKENS))
            current_offset += immediate
            rem_input -= ext
            rem_chunk -= ext
            batch.append((chunked, n))
            if not truncated:
                self.chunked = None
        states: Optional[list[tuple[int, int]]] = None  # add_one_req_ignore_eos's req_states, built when first walked
        reached: list[Request] = []  # the requests that got to the walk, in order (each adds its state)
        for req in (() if chunk_only else waiting):
            # budget_state() == OTHER; out of KV (NO_TOKEN) is not a stop here: add_one_req finds it below
            if (free - total_offset > 0 and free - current_offset > 0) and (rem_input <= 0 or rem_chunk <= 0):
                break
            if len(batch) >= mrr - n_running:  # get_num_allocatable_reqs
                self.batch_is_full = True
                break
            if self._pmr is not None and len(batch) >= self._pmr:  # add_one_req: AddReqResult.OTHER
                break
            extend = req.prompt
            paged_input = -(-extend // page) * page + page  # _ceil, inline
            if not paged_input <= min(free - current_offset, free - total_offset):  # can_allocate_prefill: NO_TOKEN
                self.batch_is_full = bool(batch) or n_running > 0
                break
            reached.append(req)
            cur_rem = free - current_offset - paged_input
            # The walk below fails only if some request's output left times the requests from it on
            # reaches cur_rem: with every output left at most the longest output, it cannot when
            # cur_rem exceeds that bound (then the walk, and building its list, is skipped).
            no_room = False
            if cur_rem <= (n_running + len(batch) + 1) * (self._max_output + IGNORE_EOS_RESERVE_TOKENS):
                if states is None:
                    states = self._req_states(reached, batch)
                else:
                    _insert_state(states, req)
                freed = 0
                count = len(states)
                for i, (left, occupied) in enumerate(states):
                    bs = count - i
                    if cur_rem + freed - left * bs <= IGNORE_EOS_RESERVE_TOKENS * bs:
                        no_room = True
                        break
                    freed += occupied
            if no_room:  # NO_TOKEN
                self.batch_is_full = bool(batch) or n_running > 0
                break
            if allow is None:
                self.negotiated = args
                allow = self.verdict = ask(args) if ask is not None else True
            if not allow:  # the delayer's veto: AddReqResult.OTHER
                break
            if extend <= rem_chunk:
                n, max_new = extend, min(req.output, CLIP_MAX_NEW_TOKENS)
            else:
                n, max_new = rem_chunk, 0
                self.chunked = req  # the new chunked request
            ext = -(-n // page) * page  # _ceil, inline
            immediate = ext + page
            total_offset += immediate + max_new
            current_offset += immediate
            rem_input -= ext
            rem_chunk -= ext
            batch.append((req, n))
            self.admitted.append(req)
            # budget_state() after the admission: NO_TOKEN (with a request admitted) or OTHER ends it
            if not (free - total_offset > 0 and free - current_offset > 0):
                self.batch_is_full = True
                break
            if rem_input <= 0 or rem_chunk <= 0:
                break
        if not batch:
            return None
        for req in self.admitted:
            waiting.popleft()
            self._waiting_tokens -= req.prompt
        return batch

    def _req_states(self, reached: list[Request], batch: Batch) -> list[tuple[int, int]]:
        """``req_states`` as ``add_one_req_ignore_eos`` has it once ``reached[-1]`` added its own: built at the
        first request that got there (with the running batch and what was in the batch then), sorted, then one
        insertion per later request."""
        first = reached[0]
        before = batch[:len(batch) - (len(reached) - 1)]  # the batch as it was when the first one got there
        states = [(left, r.prompt + r.output - left) for r in (first, *self.running, *(b for b, _ in before))
                  if (left := self._left(r)) > 0]
        states.sort(key=lambda s: s[0])
        for req in reached[1:]:
            _insert_state(states, req)
        return states

    def _left(self, req: Request) -> int:
        """``req``'s output left (``max_new_tokens - len(output_ids)``): all of it before its first token."""
        done = req.done_at
        return req.output if done is None else done - self._steps

    def _n_last_in_flight(self) -> int:
        """How many running requests have their last token in the pending result (``_reqs_finishing_inflight``)."""
        n = self._flight_ones
        if self._flight_decoded:
            n += len(self._by_done.get(self._steps + 1, ()))
        return n

    def finish_schedule(self, batch: Optional[Batch]) -> None:
        """End of ``get_new_batch_prefill``: the executor's finalize, then the tracker.

        The batch size the tracker observes is ``ScheduleBatch.batch_size()`` after
        ``mix_with_running``: with mixed chunks the decoding requests count too.
        """
        if self.executor is not None:
            self.executor.finalize(actual_prefill=batch is not None)
        size = 0
        if batch:
            size = len(batch)
            if self._mixed:
                size += len(self.running) - self._n_last_in_flight()
        self.tracker.end_pass(size, self.negotiated)

    # ----- one pass: the forward and the results ---------------------------------

    def run(self, batch: Optional[Batch]) -> tuple[int, int]:
        """Launch this pass's batch: (prefill tokens, decoding requests); KV allocated as SGLang allocates it.

        Runs before the previous pass's result is processed (``process_results``), as the overlap loop does.
        """
        self.extended = bool(batch)
        if not self.gate_refused:  # the admission ran: what it left waiting (a held pass keeps the last one's)
            self.backlog = bool(self.waiting)
        page = self._page
        prefill_tokens = 0
        if batch:
            for req, n in batch:
                before = _ceil(req.prefilled, page)
                req.prefilled += n
                self.allocated += _ceil(req.prefilled, page) - before
                prefill_tokens += n
        # A prefill phase (the policy's decision says so): a rank without a prefill batch runs an idle batch.
        self.idled = not batch and self._phased and self.executor is not None and self.executor.prefill_phase()
        decodes = (self._mixed or not batch) and not self.idled
        # The decode step: all but _reqs_finishing_inflight (last token in flight); each stores one more token's KV.
        n_decoding = len(self.running) - self._n_last_in_flight() if decodes else 0
        if n_decoding:
            self.allocated += n_decoding if page == 1 else page * self._pages_started()
        if self.allocated > self.peak_kv:
            self.peak_kv = self.allocated
        # running_batch as the launch leaves it: a mixed step empties it, a prefill step keeps it
        # (the new prefills merge at the next pass), a decode step is the batch decoded.
        if batch:
            self._running_batch = 0 if self._mixed and self.running else len(self.running)
        else:
            self._running_batch = n_decoding
        self._launched_extend = bool(batch)
        # Requests whose prompt is complete join the running batch (the merge at the next pass).
        joined: list[Request] = []
        if batch:
            for req, _ in batch:
                if req.prefilled == req.prompt:
                    self.running.append(req)
                    self._clipped_left += min(req.output - req.out, CLIP_MAX_NEW_TOKENS)
                    joined.append(req)
        self._launched = (joined, decodes, n_decoding + len(joined), prefill_tokens > 0 or n_decoding > 0)
        return prefill_tokens, n_decoding

    def _pages_started(self) -> int:
        """Of this decode step's requests, those whose step stores its token's KV in a new page (page > 1).

        A request holds the KV of its prompt and every output but the last (one more in flight); the
        step's token starts a page when that count is a multiple of the page. For a tracked request it is
        ``prompt + output - done_at + _steps - 1 + in_flight``: those of one residue class of
        ``prompt + output - done_at`` (``_residues``) start a page at the same steps.
        """
        page, steps, residues = self._page, self._steps, self._residues
        assert residues is not None
        in_flight = 1 if self._flight_decoded else 0  # every tracked request is in a decode step's result
        want = (1 - steps - in_flight) % page
        n = residues.get(want, 0)
        if in_flight:  # those whose last token is in flight are not decoded
            n -= sum(1 for r in self._by_done.get(steps + 1, ()) if self._residue(r) == want)
        # the ones that joined the pending batch: in flight, no output processed yet (KV: the prompt)
        return n + sum(1 for r in self._flight_new if r.output > 1 and r.prompt % page == 0)

    def _residue(self, req: Request) -> int:
        return (req.prompt + req.output - req.done_at) % self._page  # type: ignore[operator]

    def process_results(self, t_result: float) -> tuple[list[Request], int, int]:
        """The previous pass's result, available at ``t_result``: one output token per request in its batch.

        Returns (finished requests, output tokens, first tokens). Then this pass's batch becomes the pending one.
        """
        joined = self._flight_new
        # min(output left, CLIP) drops by 1 for each request in the batch with at most CLIP left
        clipped = 0
        finished: list[Request] = []
        if self._flight_decoded:
            clipped = self._near
            finished = self._step()
        for req in joined:  # their first token: tracked from now on, unless it is their last
            req.first_token_s = t_result
            if req.output <= CLIP_MAX_NEW_TOKENS:
                clipped += 1
            if req.output <= 1:
                finished.append(req)
            else:
                self._track(req)
        tokens = self._flight_count
        if finished:
            page = self._page
            for req in finished:
                req.out = req.output
                req.finish_s = t_result
                self.allocated -= _ceil(req.prompt + req.out - 1, page)
                self.running.remove(req)
            self.batch_is_full = False
        self._clipped_left -= clipped  # (a finished request's term is 0: nothing more when it leaves)
        new, self._flight_decoded, self._flight_count, self._ran = self._launched
        self._flight_new = new
        self._flight_ones = sum(1 for req in new if req.output <= 1) if new else 0
        self._launched = _NOTHING_LAUNCHED
        self._last_extend = self._launched_extend
        return finished, tokens, len(joined)

    def _step(self) -> list[Request]:
        """A decode step's result: every tracked request has one token less left; returns those it finishes."""
        self._steps = steps = self._steps + 1
        done = self._by_done.pop(steps, [])
        self._near += len(self._by_done.get(steps + CLIP_MAX_NEW_TOKENS, ())) - len(done)
        residues = self._residues
        if residues is not None:
            for req in done:
                residues[self._residue(req)] -= 1
        return done

    def _track(self, req: Request) -> None:
        """``req`` has its first token (``output - 1`` left): from now on the decode steps count its tokens."""
        req.done_at = done = self._steps + req.output - 1
        bucket = self._by_done.get(done)
        if bucket is None:
            self._by_done[done] = [req]
        else:
            bucket.append(req)
        if done - self._steps <= CLIP_MAX_NEW_TOKENS:
            self._near += 1
        residues = self._residues
        if residues is not None:
            key = self._residue(req)
            residues[key] = residues.get(key, 0) + 1

    def sync_outputs(self) -> None:
        """Write each running request's output count back to ``Request.out`` (the steps count it, not the request)."""
        for req in self.running:
            req.out = req.output - self._left(req)
