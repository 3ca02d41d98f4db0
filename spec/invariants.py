"""The invariant catalogue as data: what the proofs must establish, per profile.

``expected`` is the status ``prefill-delayer prove`` must find for each
profile; it was set from what the solver decided on each release's profile,
and is kept as the regression contract (a change that flips a cell fails CI).
"""

from __future__ import annotations

from dataclasses import dataclass

from .profiles import PROFILES

PROVED, REFUTED, UNKNOWN = "proved", "refuted", "unknown"


@dataclass(frozen=True)
class Invariant:
    id: str
    statement: str
    expected: dict[str, str]  # profile -> PROVED | REFUTED
    note: str = ""


def _all(*refuted: str) -> dict[str, str]:
    """PROVED for every profile but those named, which are REFUTED."""
    unknown = set(refuted) - set(PROFILES)
    if unknown:
        raise KeyError(f"unknown profiles {sorted(unknown)}")
    return {p: (REFUTED if p in refuted else PROVED) for p in PROFILES}


_BEFORE_0_5_22 = ("seed", "sglang-0.5.17", "sglang-0.5.19")
_UPSTREAM = _BEFORE_0_5_22 + ("sglang-0.5.22",)

CATALOGUE: tuple[Invariant, ...] = (
    Invariant("guards-partition", "from each state, exactly one negotiate guard holds for every input", _all()),
    Invariant(
        "force-allow",
        "if any counted rank is prefillable with token usage below W, the pass allows with token_watermark",
        _all(),
    ),
    Invariant("none-allows", "if no rank is prefillable, the pass allows", _all()),
    Invariant(
        "bounded-delay",
        "every run of consecutive delays is at most max(max_delay_passes - 1, 0) passes long",
        _all("seed"),
        "seed: the all branch has no pass cap (upstream #29898, capped in 0.5.17 by #32880)",
    ),
    Invariant("mixed-bounded-delay", "the bound holds for runs of mixed passes", _all()),
    Invariant(
        "agreement",
        "ranks that share state and gathered table reach the same decision (allow, reason, "
        "wait_forward_passes) and the same next control state, delayed_count and skip_first_armed, "
        "whatever their local clocks and local arguments",
        _all(*_UPSTREAM),
        "every release reads max_running_requests locally (upstream #32389); before 0.5.22 also the clock",
    ),
    Invariant(
        "agreement-equal-args",
        "agreement for ranks that pass equal arguments (the same max_running_requests): only their clocks differ",
        _all(*_BEFORE_0_5_22),
        "before 0.5.22 the queue timeout reads each rank's own clock (upstream #30521, #32454)",
    ),
    Invariant(
        "joint-progress",
        "in every window of max(max_delay_passes, 1) consecutive passes there is a pass on which no rank delays",
        _all(*_UPSTREAM),
        "without agreement ranks take turns delaying: each respects its own bound, the group never proceeds together",
    ),
    Invariant("wait-accounting", "a release reports exactly the number of consecutive delays before it", _all()),
    Invariant(
        "aggregate-view",
        "for any number of DP groups and any attn_cp x attn_tp ranks per group, DP attention on and off, "
        "the aggregate view the other proofs read is exactly what the rows give (by induction over the rows; "
        "cross-checked on concrete layouts)",
        _all(),
        "makes the aggregate proofs hold for every DP size and layout",
    ),
    Invariant(
        "refinement",
        "the FSM table equals an independently written encoding of each release's code (and of our two fixes)",
        _all(),
    ),
)
BY_ID = {inv.id: inv for inv in CATALOGUE}
