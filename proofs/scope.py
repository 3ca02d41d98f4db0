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
    """Where the proved properties hold, generated from the families they are checked on: a line per policy.

    One policy gives one line, ``scope: ...``; several give one ``scope of <policy>: ...`` line each,
    in the order of ``profiles``.
    """
    by_policy: dict[Any, list[str]] = {}
    for p in profiles:
        by_policy.setdefault(policy_of(p), []).append(p)
    lines = []
    for policy, mine in by_policy.items():
        ranges = sorted({policy.proof.scope_ranges(policy.proof.families(p, scope_for(policy, options))) for p in mine})
        layout = policy.proof.layout_range if layouts_proved else "the abstract view only (aggregate-view not proved)"
        head = "scope" if len(by_policy) == 1 else f"scope of {policy.title}"
        lines.append(f"{head}: every proved property holds for {' | '.join(ranges)}; layouts: {layout}")
    return "\n".join(lines)
