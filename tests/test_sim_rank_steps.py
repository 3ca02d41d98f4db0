"""The model backend's step bookkeeping (``rank.RankScheduler``'s ``_steps``, ``Request.done_at``) against the
per-request loops it replaces: every pass, a shadow of each rank keeps each request's output count and in-flight
flag as those loops did, and the rank must agree on the decoded requests, the finished ones (in order), the
first tokens, the KV held and every running request's output left."""

from __future__ import annotations

from typing import Any

import pytest

from prefill_delayer.sim import Burst, Lengths, Mix, Poisson, SimConfig, Variant, run_variant
from prefill_delayer.sim.engine import ModelGroup
from prefill_delayer.sim.rank import CLIP_MAX_NEW_TOKENS, RankScheduler


def _ceil(tokens: int, page: int) -> int:
    return -(-tokens // page) * page


class Shadow:
    """One rank as the per-request loops kept it: ``out`` and ``flight`` per request, the running list, the KV."""

    def __init__(self, page: int, mixed: bool) -> None:
        self.page, self.mixed = page, mixed
        self.out: dict[int, int] = {}
        self.flight: set[int] = set()
        self.prefilled: dict[int, int] = {}
        self.running: list[Any] = []
        self.in_flight: list[Any] = []
        self.allocated = 0

    def step(self, r: RankScheduler, work: tuple[int, int], finished: list[Any], now: float) -> None:
        page, batch = self.page, r.batch or []
        for req, n in batch:  # the launch: prefill KV
            before = self.prefilled.get(id(req), 0)
            self.prefilled[id(req)] = before + n
            self.allocated += _ceil(before + n, page) - _ceil(before, page)
        decoding = []
        if (self.mixed or not batch) and not r.idled:
            decoding = [q for q in self.running if not (id(q) in self.flight and self.out[id(q)] + 1 >= q.output)]
        assert len(decoding) == work[1]
        for q in decoding:
            if (q.prompt + self.out[id(q)] + (id(q) in self.flight) - 1) % page == 0:
                self.allocated += page
        launched = list(decoding)
        for req, _ in batch:
            if self.prefilled[id(req)] == req.prompt:
                self.running.append(req)
                self.out[id(req)] = 0
                launched.append(req)
        done = []  # the previous pass's result
        for q in self.in_flight:
            self.out[id(q)] += 1
            if self.out[id(q)] == 1:
                assert q.first_token_s == now
            if self.out[id(q)] >= q.output:
                done.append(q)
        assert [q.rid for q in finished] == [q.rid for q in done]
        for q in done:
            assert q.finish_s == now and q.out == q.output
            self.allocated -= _ceil(q.prompt + q.output - 1, page)
            self.running.remove(q)
        self.in_flight = launched
        self.flight = {id(q) for q in launched}
        assert r.allocated == self.allocated
        assert [q.rid for q in r.running] == [q.rid for q in self.running]
        lefts = [q.output - self.out[id(q)] for q in self.running]
        assert [r._left(q) for q in r.running] == lefts
        assert r._clipped_left == sum(min(left, CLIP_MAX_NEW_TOKENS) for left in lefts)


def _check_every_pass(monkeypatch: pytest.MonkeyPatch, config: SimConfig) -> list[int]:
    shadows: dict[int, list[Shadow]] = {}
    passes = [0]
    step = ModelGroup.step

    def checked(self: ModelGroup, now: float):
        work, finished, tokens = step(self, now)
        ranks = shadows.setdefault(id(self), [Shadow(config.page_size, config.enable_mixed_chunk) for _ in self.ranks])
        for shadow, r, w, done in zip(ranks, self.ranks, work, finished):
            shadow.step(r, w, done, now)
        passes[0] += 1
        return work, finished, tokens

    monkeypatch.setattr(ModelGroup, "step", checked)
    return passes


CASES = {
    "page 1, saturated": dict(max_running_requests=32),
    "page 16, KV-bound, outputs past the clip": dict(page_size=16, max_total_tokens=120_000),
    "page 7, mixed chunks": dict(page_size=7, enable_mixed_chunk=True, chunked_prefill_size=4096, max_prefill_tokens=6000),
}
WORKLOAD = Mix((Poisson(rate=12.0, prompt=Lengths(200, 6000), output=Lengths(1, 5000)),
                Burst(count=40, prompt=Lengths(10, 300), output=Lengths(1, 2), at=2.0)))


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("profile", ["sglang-0.5.22", "hardened", "lockstep", "trtllm-adp-balance", "off"])
def test_the_step_bookkeeping_is_the_per_request_loops(monkeypatch: pytest.MonkeyPatch, case: str, profile: str) -> None:
    config = SimConfig(dp_size=3, passes=600, **CASES[case])
    passes = _check_every_pass(monkeypatch, config)
    result = run_variant(config, Variant.of(profile), WORKLOAD)
    assert passes[0] == result.passes == 600
    assert any(q.finish_s is not None for q in result.requests)
    unfinished = [q for q in result.requests if q.finish_s is None and q.first_token_s is not None]
    assert unfinished and all(0 < q.out < q.output for q in unfinished)  # written back at the end (sync_outputs)
