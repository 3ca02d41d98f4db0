"""The limit of a workload under the cost model: the input throughput and the TTFT no policy can beat.

docs/simulation.md ("The bound") derives it. In short, with ``C`` the chunk budget
(prefill tokens per rank per pass), ``R`` the running requests per rank and the
slopes read off ``CostModel.pass_seconds`` itself:

* ``a``, seconds per prefill token of a pass where every rank prefills the same
  number of tokens (a perfectly aligned full-chunk pass costs ``a * dp * C``);
* ``b``, seconds per decode token of a pass where every rank decodes the same number;
* ``lone``, seconds per prefill token of a pass where one rank prefills alone,

any pass costs at least ``max(floor, a * P + b * D)`` (P, D: the pass's prefill
and decode tokens over all ranks; the slowest rank's attention is at least their
mean), and a run needs at least ``P / (dp * C)`` and ``D / (dp * R)`` passes, so
an input token costs at least ``max(a + b * delta, floor / (dp * C), floor * delta / (dp * R))``
seconds, ``delta`` the workload's decode tokens per input token. The input
throughput is at most the inverse of that, and at most what arrives (the arrivals
in the measured window; for a closed loop, by Little's law, ``concurrency`` requests
per shortest cycle). A request's TTFT is at least its own prefill alone on its rank,
``max(ceil(p / C) * floor, lone * p)``; with arrivals from outside (not a closed
loop) at least its completion in FCFS order by a server that prefills at the
aligned full-chunk rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from .config import SimConfig
from .cost import CostModel
from .result import _percentile
from .workload import Burst, Bursty, Lengths, LongPrompt, Mix, Poisson, Request, Workload


@dataclass(frozen=True)
class Slopes:
    """The cost model's per-token costs at one engine size, read off ``pass_seconds`` with the floor at 0."""

    aligned_token_s: float  # a: per prefill token, every rank prefilling the same tokens
    decode_token_s: float  # b: per decode token, every rank decoding the same requests
    lone_token_s: float  # per prefill token, one rank prefilling alone
    floor_s: float

    @classmethod
    def of(cls, cost: CostModel, dp: int, chunk: int, running: int) -> "Slopes":
        bare = cost.with_(floor_s=0.0)
        return cls(
            aligned_token_s=bare.pass_seconds([(chunk, 0)] * dp) / (dp * chunk),
            decode_token_s=bare.pass_seconds([(0, running)] * dp) / (dp * running),
            lone_token_s=bare.pass_seconds([(chunk, 0)] + [(0, 0)] * (dp - 1)) / chunk,
            floor_s=cost.floor_s,
        )


def _mean(lengths: Lengths) -> float:
    return (lengths.lo + lengths.hi) / 2


@dataclass(frozen=True)
class Demand:
    """What a workload asks per request on average: prompt tokens and decode tokens (every output token
    after the first, which the last prefill pass yields)."""

    prompt: float
    decode: float

    @property
    def decode_per_input(self) -> float:
        return self.decode / self.prompt if self.prompt else 0.0


def demand(workload: Workload) -> Demand:
    """The mean demand of ``workload``'s requests, each stream weighted by its request rate."""
    parts: list[tuple[float, Lengths, Lengths]] = []
    for part in workload.parts if isinstance(workload, Mix) else (workload,):
        if isinstance(part, (Poisson, Bursty)):
            parts.append((part.rate, part.prompt, part.output))
        elif isinstance(part, LongPrompt):
            parts.append((1.0, part.prompt, part.output))
        elif isinstance(part, Burst):
            continue  # a wave at t=0, before the measured window
        else:
            raise TypeError(f"no demand for {type(part).__name__}")
    total = sum(w for w, _, _ in parts)
    return Demand(
        prompt=sum(w * _mean(p) for w, p, _ in parts) / total,
        decode=sum(w * (_mean(o) - 1) for w, _, o in parts) / total,
    )


def capacity_tok_s(slopes: Slopes, config: SimConfig, d: Demand) -> float:
    """Input tokens per second no schedule exceeds on a workload of demand ``d`` (the formula above)."""
    delta = d.decode_per_input
    dp, chunk, running = config.dp_size, config.chunked_prefill_size, config.max_running_requests
    per_token = max(slopes.aligned_token_s + slopes.decode_token_s * delta,
                    slopes.floor_s / (dp * chunk),
                    slopes.floor_s * delta / (dp * running))
    return 1.0 / per_token


def window_capacity_tok_s(slopes: Slopes, config: SimConfig, seconds: float, decode_tokens: int) -> float:
    """Input tokens per second no schedule exceeds over ``seconds`` in which it decoded ``decode_tokens``
    (the formula above with the run's own decode: a short window can defer decode, so it may prefill faster
    than the steady state's ``capacity_tok_s``)."""
    dp, chunk = config.dp_size, config.chunked_prefill_size
    by_cost = max(seconds - slopes.decode_token_s * decode_tokens, 0.0) / slopes.aligned_token_s if slopes.aligned_token_s else math.inf
    by_passes = seconds * dp * chunk / slopes.floor_s if slopes.floor_s else math.inf
    return min(by_cost, by_passes) / seconds


def aligned_prefill_tok_s(slopes: Slopes, config: SimConfig) -> float:
    """Prefill tokens per second of perfectly aligned full-chunk passes (decode deferred)."""
    return 1.0 / max(slopes.aligned_token_s, slopes.floor_s / (config.dp_size * config.chunked_prefill_size))


def own_prefill_s(slopes: Slopes, chunk: int, prompt: int) -> float:
    """The shortest prefill of one ``prompt``: alone on its rank, in full chunks, each pass at least the floor."""
    return max(math.ceil(prompt / chunk) * slopes.floor_s, slopes.lone_token_s * prompt)


@dataclass(frozen=True)
class Bound:
    """A workload's limit over its measured window ``[start_s, end_s)``."""

    input_tok_s: float
    capacity_tok_s: float  # the cost model's limit alone
    offered_tok_s: float  # what arrives
    ttfts: tuple[float, ...]  # per request of the window: the least TTFT it can have, capped at its wait until end_s
    closed_loop: bool

    def ttft(self, q: float) -> Optional[float]:
        return percentile(self.ttfts, q)


def percentile(values: Sequence[float], q: float) -> Optional[float]:
    """The percentile the simulator's tables use (linear between the nearest ranks)."""
    return _percentile(sorted(values), q)


def arrivals(workload: Workload, config: SimConfig, until: float) -> list[Request]:
    """The requests an open workload sends before ``until`` (the same seeded stream every policy sees)."""
    source = workload.start_source(config.seed)
    source.bind(config.dp_size, config.chunked_prefill_size)
    return sorted(source.due(until), key=lambda r: r.arrival)


def _closed_loop(workload: Workload) -> Optional[LongPrompt]:
    return workload if isinstance(workload, LongPrompt) else None


def _lengths(lengths: Lengths) -> range:
    return range(lengths.lo, lengths.hi + 1)


def bound(config: SimConfig, workload: Workload, end_s: Optional[float] = None) -> Bound:
    """The limit of ``workload`` under ``config``'s cost model and engine, measured from ``config.warmup_s``
    to ``end_s`` (default: the run's duration)."""
    end = end_s if end_s is not None else config.duration_s
    if end is None or end <= config.warmup_s:
        raise ValueError("the bound needs a measured window: a duration beyond the warm-up")
    start = config.warmup_s
    slopes = Slopes.of(config.cost, config.dp_size, config.chunked_prefill_size, config.max_running_requests)
    capacity = capacity_tok_s(slopes, config, demand(workload))
    chunk = config.chunked_prefill_size
    loop = _closed_loop(workload)
    if loop is not None:
        # Little's law: `concurrency` requests in flight, each cycle at least its own prefill and one
        # floor-length pass per decode step.
        prompts, outputs = _lengths(loop.prompt), _lengths(loop.output)
        cycle = (sum(own_prefill_s(slopes, chunk, p) for p in prompts) / len(prompts)
                 + slopes.floor_s * (sum(outputs) / len(outputs) - 1))
        offered = loop.concurrency * _mean(loop.prompt) / cycle
        # A closed loop's arrivals are the policy's own: only the request's own prefill bounds its TTFT.
        ttfts = tuple(own_prefill_s(slopes, chunk, p) for p in prompts)
        return Bound(min(capacity, offered), capacity, offered, ttfts, closed_loop=True)
    requests = arrivals(workload, config, end)
    window = [r for r in requests if r.arrival >= start]
    offered = sum(r.prompt for r in window) / (end - start)
    rate = aligned_prefill_tok_s(slopes, config)
    done = 0.0
    least = []
    for r in requests:  # FCFS at the aligned full-chunk rate, no faster than the request alone on its rank
        done = max(done, r.arrival) + r.prompt / rate
        if r.arrival >= start:
            least.append(min(max(done - r.arrival, own_prefill_s(slopes, chunk, r.prompt)), end - r.arrival))
    return Bound(min(capacity, offered), capacity, offered, tuple(least), closed_loop=False)


def saturated_rate(config: SimConfig, prompt: Lengths, output: Lengths) -> float:
    """Requests per second at the cost model's capacity for requests of these lengths (a Poisson workload
    at a fraction of the saturated throughput is that fraction of this rate)."""
    slopes = Slopes.of(config.cost, config.dp_size, config.chunked_prefill_size, config.max_running_requests)
    d = Demand(_mean(prompt), _mean(output) - 1)
    return capacity_tok_s(slopes, config, d) / d.prompt


__all__ = ["Bound", "Demand", "Slopes", "arrivals", "bound", "capacity_tok_s", "demand", "own_prefill_s", "percentile",
           "saturated_rate", "window_capacity_tok_s"]
