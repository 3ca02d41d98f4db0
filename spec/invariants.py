"""The invariant catalogue (DESIGN §5) as data: what the proofs must establish."""

from __future__ import annotations

from dataclasses import dataclass

PROVED, REFUTED, UNKNOWN = "proved", "refuted", "unknown"


@dataclass(frozen=True)
class Invariant:
    id: str
    statement: str
    expected: dict[str, str]  # profile -> PROVED | REFUTED
    note: str = ""


CATALOGUE: tuple[Invariant, ...] = (
    Invariant(
        "guards-partition",
        "from each state, exactly one negotiate guard holds for every input",
        {"seed": PROVED, "hardened": PROVED},
    ),
    Invariant(
        "force-allow",
        "if any counted rank is prefillable with token usage below W, the pass allows with token_watermark",
        {"seed": PROVED, "hardened": PROVED},
    ),
    Invariant("none-allows", "if no rank is prefillable, the pass allows", {"seed": PROVED, "hardened": PROVED}),
    Invariant(
        "bounded-delay",
        "every run of consecutive delays is at most max(max_delay_passes - 1, 0) passes long",
        {"seed": REFUTED, "hardened": PROVED},
        "seed: the all branch has no pass cap (upstream #29898)",
    ),
    Invariant(
        "mixed-bounded-delay",
        "the bound holds for runs of mixed passes",
        {"seed": PROVED, "hardened": PROVED},
    ),
    Invariant(
        "agreement",
        "ranks that share state and gathered table reach the same decision (allow, reason, "
        "wait_forward_passes) and the same next control state, delayed_count and skip_first_armed, "
        "whatever their local clocks and local arguments",
        {"seed": REFUTED, "hardened": PROVED},
        "seed: the queue timeout reads each rank's own clock (upstream #30521, #32454)",
    ),
    Invariant(
        "wait-accounting",
        "a release reports exactly the number of consecutive delays before it",
        {"seed": PROVED, "hardened": PROVED},
    ),
    Invariant(
        "aggregate-view",
        "for per-rank encodings of every layout up to 8 DP groups x attn-TP 2, DP attention on and off, "
        "the aggregate view the other proofs read is exactly what the rows give",
        {"seed": PROVED, "hardened": PROVED},
        "makes the aggregate proofs hold for every DP size",
    ),
    Invariant(
        "refinement",
        "the FSM table equals an independently written encoding of DESIGN §2 (seed) / §3 (hardened)",
        {"seed": PROVED, "hardened": PROVED},
    ),
)
BY_ID = {inv.id: inv for inv in CATALOGUE}
