"""Workloads: where the requests come from, and when.

Every workload is a recipe (a frozen dataclass) that ``start`` turns into a
fresh ``Source`` for one run, so every profile of a comparison sees the same
requests: arrivals and lengths come from ``random.Random(seed)`` streams that
do not depend on what the scheduler does. Open-loop recipes (``Poisson``,
``Bursty``, ``Burst``, ``TraceReplay``) fix every arrival up front; the
closed-loop ``LongPrompt`` keeps ``concurrency`` requests in flight, a client
sending its next request the moment its previous one finishes, as
``bench_serving --max-concurrency`` does. ``Mix`` runs several side by side.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence, TypeGuard, Union

from ..spec.config import plain
from .errors import SimInputError, counted


class Request:
    """One request; times in simulated seconds."""

    __slots__ = ("rid", "arrival", "prompt", "output", "prefilled", "out", "done_at", "first_token_s", "finish_s", "rank", "client", "health_check")

    def __init__(self, rid: int, arrival: float, prompt: int, output: int, client: Optional[int] = None,
                 health_check: bool = False) -> None:
        self.rid = rid
        self.arrival = arrival
        self.prompt = prompt  # tokens to prefill
        self.output = output  # tokens to generate (the first comes from the last prefill chunk)
        self.prefilled = 0
        self.out = 0  # output tokens the scheduler has processed (one pass behind the forward; see done_at)
        # The model backend: the rank's decode step (``RankScheduler._steps``) whose result carries the last output
        # token, set once the first one is processed (None before). While the request runs the rank derives its
        # output count from it (``out`` is written back when it finishes, or when the run ends).
        self.done_at: Optional[int] = None
        self.first_token_s: Optional[float] = None
        self.finish_s: Optional[float] = None
        self.rank = -1
        self.client = client
        self.health_check = health_check  # GET /health's generation probe (never counted in the results)

    def __repr__(self) -> str:
        return f"Request(rid={self.rid}, arrival={self.arrival:.3f}, prompt={self.prompt}, output={self.output})"


@dataclass(frozen=True)
class Lengths:
    """A token count: fixed (``lo == hi``) or uniform over ``[lo, hi]``."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        if not (_is_int(self.lo) and _is_int(self.hi) and 1 <= self.lo <= self.hi):
            raise SimInputError(f"invalid token count {self.lo!r}:{self.hi!r}: expected integers 1 <= LO <= HI")

    @classmethod
    def parse(cls, text: Union[str, int, "Lengths"], what: str = "token count") -> "Lengths":
        """``N`` or ``LO:HI``."""
        if isinstance(text, Lengths):
            return text
        if _is_int(text):
            return cls._checked(text, text, what, str(text))
        parts = str(text).split(":")
        try:
            values = [int(p) for p in parts]
        except ValueError:
            raise SimInputError(f"{what} must be N or LO:HI with integers >= 1, got {text!r}") from None
        if len(values) == 1:
            return cls._checked(values[0], values[0], what, text)
        if len(values) == 2:
            return cls._checked(values[0], values[1], what, text)
        raise SimInputError(f"{what} must be N or LO:HI with integers >= 1, got {text!r}")

    @classmethod
    def _checked(cls, lo: int, hi: int, what: str, text: object) -> "Lengths":
        if not 1 <= lo <= hi:
            raise SimInputError(f"{what} must be N or LO:HI with integers 1 <= LO <= HI, got {text!r}")
        return cls(lo, hi)

    def draw(self, rng: random.Random) -> int:
        return self.lo if self.lo == self.hi else rng.randint(self.lo, self.hi)

    def __str__(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}:{self.hi}"


def _is_int(x: object) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool)


def _positive_rate(name: str, rate: object) -> float:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        raise SimInputError(f"{name} must be a finite number of requests per second > 0, got {plain(rate)}")
    return float(rate)


def _start_time(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise SimInputError(f"{name} must be a finite number of seconds >= 0, got {plain(value)}")
    return float(value)


# ----- sources ---------------------------------------------------------------


class Source:
    """A run's stream of requests: ``due(t)`` hands over every request that has arrived by ``t``."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Request]] = []
        self._next_rid = 0

    def _push(self, arrival: float, prompt: int, output: int, client: Optional[int] = None) -> Request:
        req = Request(self._next_rid, arrival, prompt, output, client)
        self._next_rid += 1
        heapq.heappush(self._heap, (arrival, req.rid, req))
        return req

    def _refill(self, until: float) -> None:
        """Generate lazily-made arrivals up to ``until`` (open-loop streams override this)."""

    def next_arrival(self) -> float:
        """When the next request arrives (``inf``: no request is coming unless one finishes)."""
        self._refill(-math.inf)  # an open-loop stream makes at least its next arrival
        return self._heap[0][0] if self._heap else math.inf

    def due(self, t: float) -> list[Request]:
        self._refill(t)
        out = []
        heap = self._heap
        while heap and heap[0][0] <= t:
            out.append(heapq.heappop(heap)[2])
        return out

    def finished(self, req: Request, t: float) -> None:
        """``req`` finished at ``t`` (closed-loop sources send the client's next request)."""

    def bind(self, dp_size: int, chunk_tokens: int) -> None:
        """The layout the run uses (``LongPrompt``'s drift is counted in chunks)."""


class _StreamSource(Source):
    """Arrivals from an endless generator of (time, count), made on demand."""

    def __init__(self, times: Iterator[tuple[float, int]], prompt: Lengths, output: Lengths, rng: random.Random) -> None:
        super().__init__()
        self._times = times
        self._prompt, self._output, self._rng = prompt, output, rng
        self._generated_until = -math.inf
        self._pending: Optional[tuple[float, int]] = None

    def _refill(self, until: float) -> None:
        while True:
            if self._pending is None:
                self._pending = next(self._times, None)
                if self._pending is None:
                    return
            t, count = self._pending
            # Always keep one arrival queued, so next_arrival() can see it.
            if t > until and self._heap:
                return
            for _ in range(count):
                self._push(t, self._prompt.draw(self._rng), self._output.draw(self._rng))
            self._pending = None
            if t > until:
                return


class _ClosedLoopSource(Source):
    def __init__(self, recipe: "LongPrompt", rng: random.Random) -> None:
        super().__init__()
        self._recipe, self._rng = recipe, rng
        self._offsets: list[int] = []

    def bind(self, dp_size: int, chunk_tokens: int) -> None:
        recipe = self._recipe
        recipe.check_drift(chunk_tokens)
        drift = recipe.drift_for(dp_size, self._rng)
        self._offsets = [d * chunk_tokens for d in drift]
        for client in range(recipe.concurrency):
            prompt = recipe.prompt.draw(self._rng)
            # Round-robin dispatch sends client i's first request to rank i % dp_size:
            # the first request of each rank starts drift[rank] chunks into its prompt.
            if client < dp_size and self._offsets[client]:
                prompt -= self._offsets[client]  # at least a token: check_drift
            self._push(0.0, prompt, recipe.output.draw(self._rng), client)

    def finished(self, req: Request, t: float) -> None:
        if req.client is not None:
            self._push(t, self._recipe.prompt.draw(self._rng), self._recipe.output.draw(self._rng), req.client)


class _MixSource(Source):
    def __init__(self, parts: Sequence[Source]) -> None:
        super().__init__()
        self._parts = list(parts)

    def bind(self, dp_size: int, chunk_tokens: int) -> None:
        for p in self._parts:
            p.bind(dp_size, chunk_tokens)

    def next_arrival(self) -> float:
        return min((p.next_arrival() for p in self._parts), default=math.inf)

    def due(self, t: float) -> list[Request]:
        tagged = [(r.arrival, i, r.rid, r) for i, p in enumerate(self._parts) for r in p.due(t)]
        tagged.sort(key=lambda x: x[:3])  # arrival, then part, then the part's own order: deterministic
        out = [x[3] for x in tagged]
        # Request ids are unique across the mix: renumber in arrival order.
        for r in out:
            r.rid = self._next_rid
            self._next_rid += 1
        return out

    def finished(self, req: Request, t: float) -> None:
        for p in self._parts:
            p.finished(req, t)


# ----- recipes ---------------------------------------------------------------


def _poisson_times(rate: float, start: float, stop: float, rng: random.Random, count: int = 1) -> Iterator[tuple[float, int]]:
    t = start
    while True:
        t += rng.expovariate(rate)
        if t >= stop:
            return
        yield t, count


@dataclass(frozen=True)
class Poisson:
    """Open-loop Poisson arrivals at ``rate`` requests per second, from ``start`` until ``stop``."""

    rate: float
    prompt: Lengths
    output: Lengths
    start: float = 0.0
    stop: float = math.inf

    def __post_init__(self) -> None:
        _positive_rate("rate", self.rate)
        _start_time("start", self.start)
        if not (isinstance(self.stop, (int, float)) and self.stop > self.start):
            raise SimInputError(f"stop must be after start ({self.start:g} s), got {self.stop!r}")

    def start_source(self, seed: int) -> Source:
        rng = random.Random(seed)
        return _StreamSource(_poisson_times(self.rate, self.start, self.stop, rng), self.prompt, self.output, rng)

    def describe(self) -> str:
        return f"Poisson {self.rate:g} req/s, prompt {self.prompt}, output {self.output}"


@dataclass(frozen=True)
class Bursty:
    """Open-loop bursts: ``burst`` requests arrive together, bursts at Poisson times; ``rate`` requests/s on average."""

    rate: float
    burst: int
    prompt: Lengths
    output: Lengths
    start: float = 0.0

    def __post_init__(self) -> None:
        _positive_rate("rate", self.rate)
        _start_time("start", self.start)
        if not _is_int(self.burst) or self.burst < 1:
            raise SimInputError(f"burst must be an integer >= 1 (requests per burst), got {self.burst!r}")

    def start_source(self, seed: int) -> Source:
        rng = random.Random(seed)
        times = _poisson_times(self.rate / self.burst, self.start, math.inf, rng, self.burst)
        return _StreamSource(times, self.prompt, self.output, rng)

    def describe(self) -> str:
        return f"bursts of {self.burst}, {self.rate:g} req/s on average, prompt {self.prompt}, output {self.output}"


@dataclass(frozen=True)
class Burst:
    """One wave of ``count`` requests arriving together at ``at`` (a refill after a drain, a cold start)."""

    count: int
    prompt: Lengths
    output: Lengths
    at: float = 0.0

    def __post_init__(self) -> None:
        _start_time("at", self.at)
        if not _is_int(self.count) or self.count < 1:
            raise SimInputError(f"count must be an integer >= 1, got {self.count!r}")

    def start_source(self, seed: int) -> Source:
        rng = random.Random(seed)
        return _StreamSource(iter([(self.at, self.count)]), self.prompt, self.output, rng)

    def describe(self) -> str:
        return f"a wave of {self.count} at {self.at:g} s, prompt {self.prompt}, output {self.output}"


@dataclass(frozen=True)
class LongPrompt:
    """Closed loop: ``concurrency`` clients, each sending its next long prompt when its last request finishes.

    ``drift`` starts rank r's first request ``drift[r]`` chunks into its prompt, so
    the ranks begin out of phase by whole prefill chunks: a tuple with one entry
    per DP rank, or ``("random", K)`` for a seeded draw from 0..K per rank.
    """

    concurrency: int
    prompt: Lengths
    output: Lengths
    drift: tuple = ()

    def __post_init__(self) -> None:
        if not _is_int(self.concurrency) or self.concurrency < 1:
            raise SimInputError(f"concurrency must be an integer >= 1, got {self.concurrency!r}")
        d = self.drift
        if d and d[0] == "random":
            if len(d) != 2 or not _is_int(d[1]) or d[1] < 0:
                raise SimInputError(f"drift random:K needs an integer K >= 0, got {d!r}")
        elif not all(_is_int(x) and x >= 0 for x in d):
            raise SimInputError(f"drift must list whole chunks >= 0 per rank, got {d!r}")

    def check_drift(self, chunk_tokens: int, given: Optional[str] = None) -> None:
        """A rank's first request starts its drift's chunks into its prompt: at as many chunks as the prompt has, or
        more, none is left to prefill, and the source would cut the drift to the prompt's end (a drift other than the
        one given), so ``SimInputError``. It names the drift as ``given`` (``simulate --drift``'s text) or as this
        recipe holds it, and the settings by their Python names (the command names its options)."""
        d = self.drift
        drawn = bool(d) and d[0] == "random"
        most = d[1] if drawn else max(d, default=0)
        lo = self.prompt.lo
        chunks = -(-lo // chunk_tokens)  # the shortest prompt's: any request may draw it
        if most >= chunks:
            prompt = f"a {lo:,}-token prompt" if lo == self.prompt.hi else f"the shortest prompt, {lo:,} tokens,"
            raise SimInputError(f"drift={repr(d) if given is None else given}: a rank's first request "
                                f"{'may start up to' if drawn else 'would start'} {counted(most, 'chunk')} into its prompt, "
                                f"and {prompt} has {counted(chunks, 'chunk')} of at most {chunk_tokens:,} tokens "
                                f"(chunked_prefill_size): nothing would be left to prefill; at most {chunks - 1}")

    def drift_for(self, dp_size: int, rng: random.Random) -> list[int]:
        d = self.drift
        if not d:
            return [0] * dp_size
        if d[0] == "random":
            return [rng.randint(0, d[1]) for _ in range(dp_size)]
        if len(d) != dp_size:
            raise SimInputError(f"drift lists {len(d)} ranks, but dp_size is {dp_size}")
        return list(d)

    def start_source(self, seed: int) -> Source:
        return _ClosedLoopSource(self, random.Random(seed))

    def drawn_drift(self, dp_size: int, seed: int) -> Optional[list[int]]:
        """The per-rank drift a ``random:K`` drift draws for ``seed`` (the source's first draws), else None."""
        if not self.drift or self.drift[0] != "random":
            return None
        return self.drift_for(dp_size, random.Random(seed))

    def describe(self) -> str:
        drift = ""
        if self.drift:
            drift = f", drift {'random:' + str(self.drift[1]) if self.drift[0] == 'random' else ','.join(map(str, self.drift))} chunks"
        return f"closed loop, {self.concurrency} in flight, prompt {self.prompt}, output {self.output}{drift}"


@dataclass(frozen=True)
class TraceReplay:
    """Replay of a request trace: rows of (arrival s, prompt tokens, output tokens), see ``sim.trace``."""

    rows: tuple[tuple[float, int, int], ...]
    name: str = "trace"
    lines: tuple[int, ...] = ()  # each row's line in the file, for errors that name it
    origin_s: float = 0.0  # the file's first arrival, which the replay's time 0 stands for

    def start_source(self, seed: int) -> Source:
        src = Source()
        for arrival, prompt, output in self.rows:
            src._push(arrival, prompt, output)
        return src

    def describe(self) -> str:
        shifted = f", arrivals from its first at {self.origin_s:g} s, replayed from 0 s" if self.origin_s else ""
        return f"trace {self.name} ({counted(len(self.rows), 'request')}{shifted})"


@dataclass(frozen=True)
class Mix:
    """Several workloads side by side (each with its own RNG stream)."""

    parts: tuple = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.parts:
            raise SimInputError("a Mix needs at least one workload")

    def start_source(self, seed: int) -> Source:
        return _MixSource([p.start_source(seed * 1000003 + i) for i, p in enumerate(self.parts)])

    def describe(self) -> str:
        return " + ".join(p.describe() for p in self.parts)


Workload = Union[Poisson, Bursty, Burst, LongPrompt, TraceReplay, Mix]


def endless(workload: Workload) -> bool:
    """Whether requests keep coming as long as a run goes on (open arrivals with no stop, a closed loop), so that a run
    with no end of its own in simulated time ends at its pass cap, never sooner (a trace, a wave run out)."""
    if isinstance(workload, Mix):
        return any(endless(p) for p in workload.parts)
    if isinstance(workload, Poisson):
        return workload.stop == math.inf
    return isinstance(workload, (Bursty, LongPrompt))


def largest_request(workload: Workload) -> Optional[tuple[int, int, str]]:
    """The request of the workload that needs the most KV tokens (prompt + output): its prompt, its output, and what
    it is; None if unknown (a generator's longest prompt with its longest output)."""
    if isinstance(workload, Mix):
        found = [x for x in (largest_request(p) for p in workload.parts) if x is not None]
        return max(found, key=lambda x: x[0] + x[1]) if found else None
    if isinstance(workload, TraceReplay):
        if not workload.rows:
            return None
        i = max(range(len(workload.rows)), key=lambda k: workload.rows[k][1] + workload.rows[k][2])
        where = f"{workload.name}:{workload.lines[i]}" if workload.lines else f"{workload.name} request {i + 1}"
        return workload.rows[i][1], workload.rows[i][2], where
    return workload.prompt.hi, workload.output.hi, "the longest prompt with the longest output"
