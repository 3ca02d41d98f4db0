"""What the proofs range over, in words (no z3): the scope line ``prove`` and the docs print.

Generated from the families each policy's properties are checked on
(``Policy.proof.families``), so it says what the checks cover.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..spec.registry import policy_of


def scope_for(policy: Any, options: Mapping[str, Any]) -> Any:
    """The policy's scope for ``prove``'s options (``dp_size`` and the parameters it pins); default: every value."""
    return policy.proof.scope_of(**options) if options else policy.proof.default_scope


def scope_line(profiles: Iterable[str], options: Mapping[str, Any], layouts_proved: bool) -> str:
    """One line: where the proved properties hold, generated from the families they are checked on."""
    profiles = list(profiles)
    ranges = sorted({
        policy_of(p).proof.scope_ranges(policy_of(p).proof.families(p, scope_for(policy_of(p), options))) for p in profiles
    })
    layout_texts = list(dict.fromkeys(policy_of(p).proof.layout_range for p in profiles))
    layout = " | ".join(layout_texts) if layouts_proved else "the abstract view only (aggregate-view not proved)"
    return f"scope: every proved property holds for {' | '.join(ranges)}; layouts: {layout}"
