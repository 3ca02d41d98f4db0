"""What the two profiles are, and what ``hardened`` changes and why, as data.

The behaviour itself lives in the guards and the table; this module only
names each change, the upstream reports behind it, and where the change shows
(``shows_in``: guard names or transition-name suffixes). The generated docs
put the derived seed/hardened formulas next to these words, and the docs tests
check that every guard or transition that differs between the profiles is
covered by some entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

UPSTREAM_ISSUE_URL = "https://github.com/sgl-project/sglang/issues/{}"

PROFILE_SUMMARY = {
    "seed": "bit-for-bit the semantics of SGLang's PrefillDelayer, defects included: drop-in parity, "
    "and the proofs show the defects as concrete counterexamples",
    "hardened": "the same policy with the known defects fixed",
}


@dataclass(frozen=True)
class ProfileChange:
    id: str
    topic: str
    seed: str
    hardened: str
    why: str
    upstream: tuple[int, ...]  # public SGLang issue / PR numbers
    shows_in: tuple[str, ...]  # guard names, or transition names without the source prefix
    invariant: str = ""  # the catalogue property that tells the profiles apart, if any


PROFILE_CHANGES: tuple[ProfileChange, ...] = (
    ProfileChange(
        "all-branch-cap",
        "pass cap in the all branch",
        seed="while the slot or queue trigger holds, delay, with no cap on the number of passes",
        hardened="when a trigger holds but delayed_count >= max_delay_passes - 1, allow with wait_timeout, "
        "as mixed passes do",
        why="while the slot trigger holds the seed delays forever; in production the delayer vetoed "
        "~97% of admissions. SGLang has since capped it by max_delay_passes.",
        upstream=(29898,),
        shows_in=("all_delay", "all_timeout"),
        invariant="bounded-delay",
    ),
    ProfileChange(
        "gathered-timeout",
        "queue-wait timeout",
        seed="each rank decides (now - wait_start) * 1000 >= max_delay_ms on its own clock",
        hardened="each rank sends its timeout_expired flag in the gather and the decision uses the OR "
        "over all gathered ranks",
        why="ranks near the boundary decide differently and the schedulers desync",
        upstream=(30521, 32454),
        shows_in=("queue_timed_out",),
        invariant="agreement",
    ),
    ProfileChange(
        "gathered-max-running-requests",
        "max_running_requests",
        seed="this rank's own argument (ceil-divided by dp_size when DP attention is off)",
        hardened="the maximum over all gathered ranks (then ceil-divided by dp_size when DP attention is off)",
        why="the value is local, not gathered, so ranks can disagree; a path that passes 0 makes one rank veto alone",
        upstream=(32389,),
        shows_in=("effective_max_running_requests",),
        invariant="agreement",
    ),
    ProfileChange(
        "skip-slot-only",
        "the one-shot skip_first_delayer",
        seed="consumed by either trigger, slot or queue",
        hardened="consumed only by the slot trigger, which it exists for",
        why="the skip exists for the slot trigger, yet the seed lets the queue trigger use it up",
        upstream=(),
        shows_in=("skip_consumed", "delay_wanted"),
    ),
)
