"""Guard mutants: every comparison flipped and every And/Or swapped, one at a time, in ``spec.guards``.

Used by the proofs' mutation tests (prove must fail) and by the compiled step's
(the compiled code must follow the mutated guard).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from delayer_spec import guards

_FLIP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
_CONNECTIVE = {"And": "Or", "Or": "And"}
# Mutants that are equivalent to the original, with the reason.
EQUIVALENT = {
    # q = min(int(RB * ratio), PB) is 0 when RB = 0, so `q > 0` already implies RB > 0.
    ("queue_trigger", "Gt->GtE", 0),
    # WQ >= 0 and WQ < q already imply q > 0.
    ("queue_trigger", "Gt->GtE", 1),
}


def sites(tree: ast.AST) -> list:
    """Every mutable spot of a parsed guard, in a fixed order: (kind, node, operand index)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            found += [("cmp", node, i) for i, op in enumerate(node.ops) if type(op) in _FLIP]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CONNECTIVE:
            found.append(("conn", node, 0))
    return found


def mutants() -> list[tuple[str, str, int, str]]:
    """(guard name, mutation label, occurrence, mutated source) for every comparison and connective."""
    out = []
    for name, fn in inspect.getmembers(guards, inspect.isfunction):
        src = textwrap.dedent(inspect.getsource(fn))
        counts: dict[str, int] = {}
        for index, (kind, node, i) in enumerate(sites(ast.parse(src))):
            if kind == "cmp":
                label = f"{type(node.ops[i]).__name__}->{_FLIP[type(node.ops[i])].__name__}"
            else:
                label = f"{node.func.attr}->{_CONNECTIVE[node.func.attr]}"
            occurrence = counts.get(label, 0)
            counts[label] = occurrence + 1
            out.append((name, label, occurrence, mutate(src, index)))
    return out


def mutate(src: str, site_index: int) -> str:
    tree = ast.parse(src)
    kind, node, i = sites(tree)[site_index]
    if kind == "cmp":
        node.ops[i] = _FLIP[type(node.ops[i])]()
    else:
        node.func.attr = _CONNECTIVE[node.func.attr]
    return ast.unparse(tree)


def patched(name: str, src: str) -> Any:
    """The guard function ``name`` compiled from the mutated ``src``, in the guards' module namespace."""
    namespace = dict(vars(guards))
    exec(compile(src, f"<mutant {name}>", "exec"), namespace)
    return namespace[name]
