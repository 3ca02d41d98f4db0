"""What a run records, pass by pass, and the summary the tables, the JSON and the plots read."""

from __future__ import annotations

import bisect
import math
from array import array
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Callable, Optional, Sequence

from .config import SimConfig, Variant

ESTIMATIONS = ("none", "mixed", "all")
STATUS_CODES = {name: i for i, name in enumerate(ESTIMATIONS)}
# "": nothing to prefill (no reason given); "off": no policy (the estimation is still computed from which
# ranks reached a call site).
NO_REASON, OFF_REASON = "", "off"
# What a rank asked of its policy in a pass.
ASK_NONE, ASK_ADMIT_ALLOWED, ASK_ADMIT_VETOED, ASK_CHUNK = 0, 1, 2, 3


def reasons_of(profile: Optional[str]) -> tuple[str, ...]:
    """The reason codes of a run: none, then the policy's own reasons (``off``: no policy)."""
    if profile is None:
        return (NO_REASON, OFF_REASON)
    from ..spec.registry import policy_of

    return (NO_REASON,) + tuple(r for r in policy_of(profile).reasons if r != NO_REASON)


@dataclass(frozen=True)
class PassTrace:
    """One rank in one pass, as the differential test compares the backends."""

    negotiated: Optional[tuple[int, int, int, int]]  # negotiate's (running, max_prefill_bs, max_running, queue), if prefillable
    chunk: bool  # the negotiation came from add_chunked_req
    verdict: Optional[bool]
    decision: str  # gathered status / reason
    running: int  # running requests at the admission
    queue: int  # waiting requests at the admission
    admitted: tuple[int, ...]  # request ids admitted from the queue
    prefilled: tuple[tuple[int, int], ...]  # (request id, tokens) prefilled this pass
    decode: int  # requests decoded this pass
    finished: tuple[int, ...]  # request ids whose last token the result processing of this pass committed


@dataclass(frozen=True)
class Summary:
    """The table's figures over the measured window (``warmup_s`` to the end)."""

    passes: int
    sim_seconds: float
    input_tok_s: float
    output_tok_s: float
    ttft_p50_s: Optional[float]
    ttft_p99_s: Optional[float]
    ttft_requests: int
    unserved: int  # requests of the window still without a first token at the end (not in the TTFTs)
    unserved_oldest_s: Optional[float]  # the longest of their waits so far
    running_per_rank: float  # time-weighted mean
    running_p5: int
    running_p95: int
    queue_per_rank: float
    token_usage: float
    split_share: float  # passes where some ranks prefill while others do not
    mixed_share: float  # passes whose gathered status is "mixed"
    veto_share: Optional[float]  # vetoed / all admission negotiations (a rank with a queue and no chunk in progress)
    admission_asks: int
    delay_runs: int
    delay_run_mean: float
    delay_run_max: int
    decisions: dict[str, float]  # "estimation/reason" -> share of rank-passes
    completed: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RunResult:
    """One variant's run: settings, per-pass records, requests."""

    def __init__(self, variant: Variant, config: SimConfig, workload: Any, binding: Any = None) -> None:
        self.variant = variant
        self.binding = binding  # the policy's ``SimBinding`` (None: off)
        self.reasons = reasons_of(variant.profile)
        self.reason_codes = {name: i for i, name in enumerate(self.reasons)}
        self.config = config
        self.workload = workload
        dp = config.dp_size
        self.dp = dp
        self.t0 = array("d")
        self.dt = array("d")
        self.status = bytearray()
        self.decision = bytearray()  # per pass x rank: estimation * len(reasons) + reason
        self.allowed = bytearray()  # per pass x rank: the verdict let the rank prefill
        self.ask = bytearray()  # per pass x rank: ASK_*
        self.prefill = array("q")  # per pass x rank: prefill tokens
        self.decode = array("l")  # per pass x rank: requests decoded
        self.new_seqs = array("l")  # per pass x rank: requests admitted from the queue (SGLang's log "#new-seq")
        self.running = array("l")  # per pass x rank, at the pass's start
        self.queue = array("l")  # per pass x rank, at the pass's start
        self.usage = array("d")  # per pass: mean token usage over ranks, at the pass's start
        self.out_tokens = array("q")  # per pass
        self.end_s = 0.0
        self.capped = False  # whether the pass cap ended the run (engine.same_window evens the times out)
        self.drained_s: Optional[float] = None  # when nothing was left to arrive or serve, if that ended the run
        self.requests: list[Any] = []
        self.negotiations: list[int] = []  # each rank's delayer passes (one per scheduler pass)
        self.peak_kv = 0  # the most KV tokens any rank held
        self.health_checks: list[tuple[float, int, bool]] = []  # each probe: (sent at, rank, taken in: False if dropped)
        self.log_failures: list[str] = []  # each rank's decision log that stopped in the run: "rank R: why"
        self.trace: list[tuple["PassTrace", ...]] = []  # per pass, per rank (only with SimConfig.trace)
        self._summary: Optional[Summary] = None

    # ----- recording -----------------------------------------------------------

    def recorder(self) -> Callable[..., None]:
        t0, dt, status, decision, ask, allowed = self.t0, self.dt, self.status, self.decision, self.ask, self.allowed
        prefill, running, queue, usage, out_tokens = self.prefill, self.running, self.queue, self.usage, self.out_tokens
        decode, new_seqs = self.decode, self.new_seqs
        width = len(self.reasons)
        codes = {(e, r): STATUS_CODES[e] * width + i for e in ESTIMATIONS for i, r in enumerate(self.reasons)}
        dp = self.dp
        trace = self.trace if self.config.trace else None

        def record(now, pass_s, group, work, finished, tokens) -> None:
            t0.append(now)
            dt.append(pass_s)
            outcomes = group.outcomes
            status.append(STATUS_CODES[outcomes[0].estimation])
            total_usage = 0.0
            for o, r, (p, d) in zip(outcomes, group.ranks, work):
                decision.append(codes[o.estimation, o.reason])
                allowed.append(o.allow)
                if r.negotiated is None and not r.gate_refused:
                    ask.append(ASK_NONE)
                elif r.negotiated_for_chunk:
                    ask.append(ASK_CHUNK)
                else:
                    ask.append(ASK_ADMIT_ALLOWED if o.allow else ASK_ADMIT_VETOED)
                prefill.append(p)
                decode.append(d)
                new_seqs.append(len(r.admitted))
                running.append(r.running_at_start)
                queue.append(r.queue_at_start)
                total_usage += r.usage_at_start
            usage.append(total_usage / dp)
            out_tokens.append(tokens)
            if trace is not None:
                negotiates = group.gather is not None  # without a delayer nothing negotiates
                trace.append(tuple(
                    PassTrace(
                        negotiated=r.negotiated if negotiates else None, chunk=r.negotiated_for_chunk and negotiates,
                        verdict=r.verdict if negotiates else None,
                        decision=self.decision_name(decision[-dp + i]), running=r.running_at_start, queue=r.queue_at_start,
                        admitted=tuple(q.rid for q in r.admitted),
                        prefilled=tuple((q.rid, n) for q, n in (r.batch or ())),
                        decode=work[i][1], finished=tuple(q.rid for q in finished[i] if not q.health_check),
                    )
                    for i, r in enumerate(group.ranks)
                ))

        return record

    def finish(self, end_s: float, requests: list[Any]) -> None:
        self.end_s = end_s
        self.requests = requests
        self._summary = None

    # ----- reading ---------------------------------------------------------------

    def reason(self, code: int) -> str:
        """The reason of a recorded decision code."""
        return self.reasons[code % len(self.reasons)]

    def decision_name(self, code: int) -> str:
        return f"{ESTIMATIONS[code // len(self.reasons)]}/{self.reason(code) or '-'}"

    @property
    def passes(self) -> int:
        return len(self.t0)

    def window_start(self) -> int:
        """Index of the first pass of the measured window."""
        return bisect.bisect_left(self.t0, self.config.warmup_s)

    def new_seqs_per_window(self, window_s: float = 30.0) -> list[list[int]]:
        """Each whole ``window_s`` of the measured window: every rank's new sequences (admissions), as the
        reporter of SGLang #35241 counted them (``#new-seq`` of the prefill-batch log lines per 30 s)."""
        dp, t0 = self.dp, self.t0
        k0 = self.window_start()
        if k0 >= self.passes:
            return []
        start = t0[k0]
        windows = int((self.end_s - start) // window_s)
        counts = [[0] * dp for _ in range(windows)]
        new_seqs = self.new_seqs
        for k in range(k0, self.passes):
            w = int((t0[k] - start) // window_s)
            if w >= windows:
                break
            row = counts[w]
            for i in range(dp):
                row[i] += new_seqs[k * dp + i]
        return counts

    def summary(self) -> Summary:
        if self._summary is None:
            self._summary = self._summarize()
        return self._summary

    def _summarize(self) -> Summary:
        dp = self.dp
        k0 = self.window_start()
        n = self.passes - k0
        start = self.t0[k0] if n else self.end_s
        seconds = max(self.end_s - start, 1e-12) if n else 0.0
        lo, hi = k0 * dp, self.passes * dp
        prefill_tokens = sum(self.prefill[lo:hi])
        out = sum(self.out_tokens[k0:])
        dts = self.dt[k0:]
        total_dt = sum(dts) or 1.0
        running = self.running[lo:hi]
        queue = self.queue[lo:hi]
        run_tw = sum(dts[k] * sum(running[k * dp : (k + 1) * dp]) for k in range(n)) / total_dt / dp if n else 0.0
        queue_tw = sum(dts[k] * sum(queue[k * dp : (k + 1) * dp]) for k in range(n)) / total_dt / dp if n else 0.0
        usage_tw = sum(dts[k] * self.usage[k0 + k] for k in range(n)) / total_dt if n else 0.0
        ordered = sorted(running)
        p5 = ordered[int(0.05 * (len(ordered) - 1))] if ordered else 0
        p95 = ordered[int(0.95 * (len(ordered) - 1))] if ordered else 0
        split = 0
        prefill = self.prefill
        for k in range(k0, self.passes):
            row = prefill[k * dp : (k + 1) * dp]
            some = any(row)
            if some and not all(row):
                split += 1
        mixed = sum(1 for k in range(k0, self.passes) if self.status[k] == STATUS_CODES["mixed"])
        asks = self.ask[lo:hi]
        admit = asks.count(ASK_ADMIT_ALLOWED) + asks.count(ASK_ADMIT_VETOED)
        vetoed = asks.count(ASK_ADMIT_VETOED)
        runs = self.delay_runs(k0)
        counts = Counter(self.decision[lo:hi])
        total = max(sum(counts.values()), 1)
        decisions = {self.decision_name(code): c / total for code, c in sorted(counts.items(), key=lambda kv: -kv[1])}
        ttfts, waits = self._ttfts()
        return Summary(
            passes=n,
            sim_seconds=seconds,
            input_tok_s=prefill_tokens / seconds if n else 0.0,
            output_tok_s=out / seconds if n else 0.0,
            ttft_p50_s=_percentile(ttfts, 0.50),
            ttft_p99_s=_percentile(ttfts, 0.99),
            ttft_requests=len(ttfts),
            unserved=len(waits),
            unserved_oldest_s=max(waits) if waits else None,
            running_per_rank=run_tw,
            running_p5=p5,
            running_p95=p95,
            queue_per_rank=queue_tw,
            token_usage=usage_tw,
            split_share=split / n if n else 0.0,
            mixed_share=mixed / n if n else 0.0,
            veto_share=vetoed / admit if admit else None,
            admission_asks=admit,
            delay_runs=len(runs),
            delay_run_mean=sum(runs) / len(runs) if runs else 0.0,
            delay_run_max=max(runs) if runs else 0,
            decisions=decisions,
            completed=sum(1 for r in self.requests if r.finish_s is not None and r.finish_s >= start),
        )

    def _ttfts(self) -> tuple[list[float], list[float]]:
        """TTFTs of the requests that arrived in the window and got a first token; the waits so far of the others."""
        warm = self.config.warmup_s
        values, waits = [], []
        for r in self.requests:
            if r.arrival < warm:
                continue
            if r.first_token_s is None:
                waits.append(self.end_s - r.arrival)
            else:
                values.append(r.first_token_s - r.arrival)
        values.sort()
        return values, waits

    def delay_runs(self, k0: int = 0) -> list[int]:
        """Lengths (in passes) of every rank's runs of consecutive held passes (the verdict did not let it
        prefill: SGLang's ``delay``) from pass ``k0`` on."""
        dp = self.dp
        runs = []
        for r in range(dp):
            length = 0
            for allowed in self.allowed[k0 * dp + r :: dp]:
                if not allowed:
                    length += 1
                elif length:
                    runs.append(length)
                    length = 0
            if length:
                runs.append(length)
        return runs

    # ----- series for the plots --------------------------------------------------

    def throughput_series(self, bins: int = 60) -> tuple[list[float], list[float]]:
        """(bin centres in s, input tok/s per bin) over the whole run."""
        if not self.passes or self.end_s <= 0:
            return [], []
        width = self.end_s / bins
        tokens = [0.0] * bins
        dp = self.dp
        for k in range(self.passes):
            b = min(int((self.t0[k] + self.dt[k]) / width), bins - 1) if width > 0 else 0
            tokens[b] += sum(self.prefill[k * dp : (k + 1) * dp])
        return [(i + 0.5) * width for i in range(bins)], [t / width for t in tokens]

    def progress_spread(self, max_points: int = 600) -> tuple[list[float], list[list[float]]]:
        """(times, per rank: cumulative prefill minus the ranks' mean, in chunks) at pass ends."""
        dp, chunk = self.dp, self.config.chunked_prefill_size
        step = max(1, self.passes // max_points)
        cum = [0] * dp
        times: list[float] = []
        lines: list[list[float]] = [[] for _ in range(dp)]
        for k in range(self.passes):
            row = self.prefill[k * dp : (k + 1) * dp]
            for r in range(dp):
                cum[r] += row[r]
            if k % step == 0 or k == self.passes - 1:
                mean = sum(cum) / dp
                times.append(self.t0[k] + self.dt[k])
                for r in range(dp):
                    lines[r].append((cum[r] - mean) / chunk)
        return times, lines

    def decision_window(self, passes: int = 120) -> tuple[list[list[int]], list[list[bool]], int]:
        """The last ``passes`` passes, ranks x passes: the reason code (plus ``len(reasons)`` where the rank
        had nothing to prefill, so it asked nothing), whether the rank prefilled, and the first pass's index."""
        dp, idle = self.dp, len(self.reasons)
        first = max(0, self.passes - passes)
        grid = [
            [(self.decision[k * dp + r] % idle) + (idle if self.ask[k * dp + r] == ASK_NONE else 0) for k in range(first, self.passes)]
            for r in range(dp)
        ]
        prefilled = [[self.prefill[k * dp + r] > 0 for k in range(first, self.passes)] for r in range(dp)]
        return grid, prefilled, first

    def running_series(self, bins: int = 60) -> tuple[list[float], list[float]]:
        """(bin centres in s, time-weighted mean running requests per rank in each bin)."""
        if not self.passes or self.end_s <= 0:
            return [], []
        width = self.end_s / bins
        weight = [0.0] * bins
        total = [0.0] * bins
        dp = self.dp
        for k in range(self.passes):
            b = min(int(self.t0[k] / width), bins - 1)
            weight[b] += self.dt[k]
            total[b] += self.dt[k] * sum(self.running[k * dp : (k + 1) * dp]) / dp
        xs = [(i + 0.5) * width for i in range(bins) if weight[i] > 0]
        ys = [total[i] / weight[i] for i in range(bins) if weight[i] > 0]
        return xs, ys


def _percentile(values: Sequence[float], q: float) -> Optional[float]:
    if not values:
        return None
    k = q * (len(values) - 1)
    f = math.floor(k)
    c = min(f + 1, len(values) - 1)
    return values[f] + (values[c] - values[f]) * (k - f)
