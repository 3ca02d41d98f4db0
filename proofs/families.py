"""What the proofs range over, as plain data (no z3): the families of configurations each
property is checked on, and the scope line ``prove`` and the docs print from them.

A ``Family`` fixes the structural choices (profile, DP attention, queue trigger off or on
and at which ratio, prefill_max_requests set or not); ``proofs.model`` builds its symbolic
configuration, in which every parameter of ``SYMBOLIC_PARAMETERS`` is a Z3 variable. The
scope line is computed from these same objects, so it says what the checks cover.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ..spec.config import MAX_QUEUE_MIN_RATIO
from ..spec.profiles import QUEUE_CAPACITY, features_of


class _AnyRatio:
    """Stands for every queue_min_ratio at once: proofs then hold for all of them."""

    def __repr__(self) -> str:
        return f"any ratio in (0, {int(MAX_QUEUE_MIN_RATIO)}]"

    def __reduce__(self) -> str:
        return "ANY_RATIO"  # one instance, across processes too (``prove --jobs``)


ANY_RATIO = _AnyRatio()

# The configuration parameters every family leaves symbolic (``Family.sym_config``
# makes each a Z3 variable over its valid range), with the range as printed.
SYMBOLIC_PARAMETERS = (
    ("max_delay_passes", "any >= 0"),
    ("max_delay_ms", "any > 0"),
    ("token_usage_low_watermark", "off or any in [0, 1]"),
)
PMR_RANGE = "unset or any >= 1"
# aggregate-view's claim, which carries the single-step properties from the abstract view to rows.
LAYOUT_RANGE = "any number of DP groups, any attn_cp x attn_tp ranks per group, DP attention on and off"


@dataclass(frozen=True)
class Family:
    """One structural variant of the configuration the proofs range over."""

    profile: str
    enable_dp_attention: bool
    queue_ratio: Any  # None (trigger off), a configured float, or ANY_RATIO
    dp_size: Optional[int]  # without DP attention: a configured dp_size, or None for every one
    pmr_on: bool = False  # prefill_max_requests set (symbolic value)

    def label(self) -> str:
        dp = "dp-attn" if self.enable_dp_attention else f"tp-only(dp_size={'any' if self.dp_size is None else self.dp_size})"
        q = "queue-off" if self.queue_ratio is None else f"queue={'any' if self.queue_ratio is ANY_RATIO else repr(self.queue_ratio)}"
        return f"{self.profile}/{dp}/{q}" + ("/prefill_max_requests" if self.pmr_on else "")


@dataclass(frozen=True)
class Scope:
    """What the proofs range over: by default every queue ratio and every dp_size at once;
    ``prove --queue-min-ratio R`` / ``--dp-size N`` pin one (R's double rounding exact)."""

    queue_ratio: Any = ANY_RATIO  # a float, or ANY_RATIO
    dp_size: Optional[int] = None  # None: every dp_size

    def concrete_ratio(self) -> float:
        """A ratio for counterexamples, which must be concrete to replay."""
        return 0.5 if self.queue_ratio is ANY_RATIO else self.queue_ratio


def families(profile: str, scope: Scope) -> list[Family]:
    """DP attention on and off, queue trigger off and at the scope's ratio(s);
    where the profile reads prefill_max_requests (queue-capacity), with it unset and set."""
    pmr = (False, True) if QUEUE_CAPACITY in features_of(profile) else (False,)
    return [
        Family(profile, dp_attn, q, scope.dp_size, p)
        for dp_attn in (True, False)
        for q in (None, scope.queue_ratio)
        for p in (pmr if q is not None else (False,))
    ]


def _ratio_text(ratio: Any) -> str:
    if ratio is None:
        return "off"
    return f"any in (0, {int(MAX_QUEUE_MIN_RATIO)}]" if ratio is ANY_RATIO else repr(ratio)


def scope_ranges(fams: Iterable[Family]) -> str:
    """The parameter ranges a property checked on ``fams`` (over the abstract view) holds for."""
    fams = list(fams)
    tp_only = {"any >= 1" if f.dp_size is None else str(f.dp_size) for f in fams if not f.enable_dp_attention}
    dp = "dp_size any >= 1" + (f" with DP attention, {' and '.join(sorted(tp_only))} without" if tp_only != {"any >= 1"} else "")
    ratios = list(dict.fromkeys(_ratio_text(f.queue_ratio) for f in fams))
    # A profile without queue-capacity never reads prefill_max_requests: any value is covered.
    reads_pmr = all(QUEUE_CAPACITY in features_of(f.profile) for f in fams)
    pmr = PMR_RANGE if any(f.pmr_on for f in fams) or not reads_pmr else "unset"
    parts = [dp, f"queue_min_ratio {' or '.join(ratios)}", f"prefill_max_requests {pmr}"]
    parts += [f"{name} {text}" for name, text in SYMBOLIC_PARAMETERS]
    return ", ".join(parts)


def scope_line(profiles: Iterable[str], scope: Scope, layouts_proved: bool) -> str:
    """One line: where the proved properties hold, generated from the families they are checked on."""
    ranges = sorted({scope_ranges(families(p, scope)) for p in profiles})
    layout = LAYOUT_RANGE if layouts_proved else "the abstract view only (aggregate-view not proved)"
    return f"scope: every proved property holds for {' | '.join(ranges)}; layouts: {layout}"
