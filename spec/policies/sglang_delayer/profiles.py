"""Profiles as sets of named features, and the SGLang releases each profile is.

A profile is never tested by name outside this module: the guards and the
table ask ``has(c, FEATURE)``. Each feature is one change of the policy, with
the behaviour before and after in words, the public SGLang numbers behind it,
the first release that shipped it (``None``: ours, in ``hardened`` only) and
where it shows (``shows_in``: guard names or transition-name suffixes). The
generated docs put the derived formulas next to these words, and the docs tests
check that every guard or transition that differs between two profiles is
covered by some feature here.
"""

from __future__ import annotations

from typing import Any

from ...policy import Feature, Profile

UPSTREAM_ISSUE_URL = "https://github.com/sgl-project/sglang/issues/{}"  # GitHub forwards PR numbers too

# Feature ids, the names the guards and the table ask for.
ALL_BRANCH_CAP = "all-branch-cap"
QUEUE_CAPACITY = "queue-capacity"
GATHERED_TIMEOUT = "gathered-timeout"
ATTN_CP_LAYOUT = "attn-cp-layout"
GATHERED_MRR = "gathered-max-running-requests"
SKIP_SLOT_ONLY = "skip-slot-only"


FEATURES: tuple[Feature, ...] = (
    Feature(
        ALL_BRANCH_CAP,
        "pass cap in the all branch",
        before="while the slot or queue trigger holds, delay, with no cap on the number of passes",
        after="when a trigger holds but delayed_count >= max_delay_passes - 1, allow with wait_timeout, as mixed passes do",
        why="while the slot trigger holds the delayer delays forever; in production it vetoed ~97% of admissions "
        "on a saturated engine",
        upstream=(29898, 32880),
        since="0.5.17",
        shows_in=("all_delay", "all_timeout"),
        invariant="bounded-delay",
    ),
    Feature(
        QUEUE_CAPACITY,
        "the queue trigger's target",
        before="queue_min = min(int(RB * ratio), PB): capped by the gathered max_prefill_bs, an observed high-watermark",
        after="queue_min = min(int(RB * ratio), prefill_max_requests) when prefill_max_requests is set, else as before",
        why="under trickle arrivals max_prefill_bs stays near one, so every request satisfies the trigger at once "
        "and prefills stay fragmented",
        upstream=(35191,),
        since="0.5.19",
        shows_in=("queue_capacity",),
    ),
    Feature(
        GATHERED_TIMEOUT,
        "queue-wait timeout",
        before="each rank decides (now - wait_start) * 1000 >= max_delay_ms on its own clock, after the gather",
        after="each rank sends its timeout_expired flag in the gather and the decision reads the max over the "
        "counted rows",
        why="ranks near the boundary decide differently and the schedulers desync",
        upstream=(30521, 32454),
        since="0.5.22",
        shows_in=("queue_timed_out",),
        invariant="agreement-equal-args",
    ),
    Feature(
        ATTN_CP_LAYOUT,
        "gather layout with context parallelism",
        before="the gather spans dp x attn_tp ranks; attention context parallelism is not supported",
        after="the gather spans the TP group, DP-major over attn_cp_size x attn_tp_size ranks per DP group; the "
        "first rank of each DP group is counted",
        why="SGLang 0.5.22 gathers over the whole TP group, which includes the attention context-parallel ranks",
        upstream=(),
        since="0.5.22",
        shows_in=(),
    ),
    Feature(
        GATHERED_MRR,
        "max_running_requests",
        before="this rank's own argument (ceil-divided by dp_size when DP attention is off)",
        after="the maximum over all gathered ranks (then ceil-divided by dp_size when DP attention is off)",
        why="the value is local, not gathered, so ranks can disagree; a path that passes 0 (the executor's finalize "
        "does) makes one rank veto alone",
        upstream=(32389,),
        since=None,
        shows_in=("effective_max_running_requests",),
        invariant="agreement",
    ),
    Feature(
        SKIP_SLOT_ONLY,
        "the one-shot skip_first_delayer",
        before="consumed by either trigger, slot or queue",
        after="consumed only by the slot trigger, which it exists for",
        why="the skip exists for the slot trigger, yet the queue trigger can use it up",
        upstream=(),
        since=None,
        shows_in=("skip_consumed", "delay_wanted"),
    ),
)
FEATURE_BY_ID = {f.id: f for f in FEATURES}


def _upstream_until(version: str) -> frozenset[str]:
    return frozenset(f.id for f in FEATURES if f.since is not None and _key(f.since) <= _key(version))


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


_RELEASE_GROUPS = (
    ("seed", ("0.5.14", "0.5.15", "0.5.16"), "SGLang 0.5.14-0.5.16's PrefillDelayer bit for bit, defects included"),
    ("sglang-0.5.17", ("0.5.17", "0.5.18"), "SGLang 0.5.17-0.5.18: the all branch capped by max_delay_passes"),
    ("sglang-0.5.19", ("0.5.19", "0.5.20", "0.5.21"), "SGLang 0.5.19-0.5.21: the queue target capped by prefill_max_requests"),
    ("sglang-0.5.22", ("0.5.22", "0.5.23"), "SGLang 0.5.22-0.5.23: the queue timeout gathered; attn_cp layouts"),
)
PROFILE_DEFS: tuple[Profile, ...] = tuple(
    Profile(name, _upstream_until(releases[0]), releases, summary) for name, releases, summary in _RELEASE_GROUPS
) + (
    Profile(
        "hardened",
        frozenset(f.id for f in FEATURES),
        (),
        "every upstream feature plus our fixes: the gathered max_running_requests and a skip only the slot trigger consumes",
    ),
)
PROFILE_BY_NAME = {p.name: p for p in PROFILE_DEFS}
PROFILES = tuple(PROFILE_BY_NAME)
RELEASES = {release: p.name for p in PROFILE_DEFS for release in p.releases}
SEED_RELEASE = "0.5.16"  # the release the seed is, as fetched from the package registry


def release_aliases() -> dict[str, str]:
    """``sglang-X`` for every release X we read: the profile it is."""
    return {f"sglang-{release}": name for release, name in RELEASES.items()}


def resolve_profile(name: Any) -> str:
    """The canonical profile of ``name`` (``spec.registry.resolve_profile``: any policy's, or a release)."""
    from ...registry import resolve_profile as resolve

    return resolve(name)


def features_of(profile: str) -> frozenset[str]:
    """The features of ``profile``: this policy's, or of a policy built on it (SGLang's phase lockstep)."""
    from ...registry import policy_of

    name = resolve_profile(profile)
    return policy_of(name).features_of(name)


def has(c: Any, feature: str) -> bool:
    """Whether configuration ``c`` (concrete, symbolic or rendered) has ``feature``: a plain bool."""
    if feature not in FEATURE_BY_ID:
        raise KeyError(f"unknown feature {feature!r}")
    return feature in c.features
