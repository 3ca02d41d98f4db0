"""The layout states the dependency direction: each package imports only the layers below it.

``ALLOWED`` is the picture at the top of the README, as data. Two checks read it:

* statically, every ``import`` in every module (function-level ones included, which
  the lazy subcommands use) names only allowed packages;
* dynamically, importing every module of a package in a fresh interpreter loads
  no package outside its allowed set (what a user's ``import`` really pulls in).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import prefill_delayer.spec

ROOT = "prefill_delayer"
REPO = Path(__file__).resolve().parents[1]

# package -> the packages it may import (besides itself), lowest layers first.
ALLOWED: dict[str, set[str]] = {
    "files": set(),
    "workers": set(),
    "spec": set(),
    "fsm": {"spec"},
    "runtime": {"spec", "fsm"},
    "traces": {"files", "spec", "fsm", "runtime"},
    "proofs": {"workers", "spec", "fsm", "traces"},
    "conformance": {"files", "workers", "spec", "fsm", "runtime", "traces"},
    "sim": {"files", "workers", "spec", "fsm", "runtime", "integrations"},
    "integrations": {"spec", "fsm", "runtime"},
    "docgen": {"spec", "fsm", "proofs"},
    "cli": {"files", "workers", "spec", "fsm", "runtime", "traces", "proofs", "conformance", "sim", "docgen"},
    "benchmarks": {"files", "workers", "spec", "fsm", "runtime", "traces", "proofs", "conformance", "sim", "integrations",
                   "cli"},
}


def _package_dirs() -> dict[str, Path]:
    """Each package's folder, from the installed mapping (``prefill_delayer.X`` -> ``X/``)."""
    return {name: REPO / name for name in ALLOWED}


def _module_name(package: str, folder: Path, path: Path) -> str:
    rel = path.relative_to(folder).with_suffix("")
    parts = [ROOT, package, *rel.parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(module: str, path: Path) -> set[str]:
    """The ``prefill_delayer`` packages ``path`` imports anywhere in its body."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
                names = [target] if node.module else [f"{target}.{a.name}" for a in node.names]
            elif node.module:
                names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == ROOT and len(parts) > 1:
                found.add(parts[1])
    return found


def test_the_table_covers_every_package() -> None:
    on_disk = {p.parent.name for p in REPO.glob("*/__init__.py")} - {"tests", "docs"}
    assert on_disk == set(ALLOWED), "a package of the repository is missing from ALLOWED (or gone from disk)"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_static_imports_follow_the_layers(package: str) -> None:
    folder = _package_dirs()[package]
    bad = []
    for path in sorted(folder.rglob("*.py")):
        module = _module_name(package, folder, path)
        for target in sorted(_imported(module, path) - ALLOWED[package] - {package}):
            bad.append(f"{path.relative_to(REPO)} imports prefill_delayer.{target}")
    assert not bad, f"{package} may import only {sorted(ALLOWED[package])}:\n" + "\n".join(bad)


_PROBE = r"""
import importlib, json, pkgutil, sys
root, package = sys.argv[1], sys.argv[2]
pkg = importlib.import_module(f"{root}.{package}")
failed = []
for info in pkgutil.walk_packages(pkg.__path__, f"{root}.{package}."):
    if info.name.endswith("__main__"):
        continue
    try:
        importlib.import_module(info.name)
    except ImportError as exc:  # an optional dependency absent here: its module cannot load anything either
        failed.append(f"{info.name}: {exc}")
loaded = sorted({m.split(".")[1] for m in sys.modules if m.startswith(root + ".") and m.count(".") >= 1})
print(json.dumps({"loaded": loaded, "failed": failed}))
"""


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_importing_a_package_loads_only_the_layers_below(package: str) -> None:
    done = subprocess.run([sys.executable, "-c", _PROBE, ROOT, package], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    extra = set(found["loaded"]) - ALLOWED[package] - {package}
    assert not extra, f"importing every module of {package} loaded {sorted(extra)} (allowed: {sorted(ALLOWED[package])})"


def test_spec_is_the_bottom_layer() -> None:
    """spec imports nothing of the package above it, and no third-party library at all."""
    folder = Path(prefill_delayer.spec.__file__).parent
    third_party = []
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                heads = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                heads = [node.module.split(".")[0]]
            else:
                continue
            third_party += [f"{path.name}: {h}" for h in heads if h not in sys.stdlib_module_names and h != "__future__"]
    assert not third_party, third_party


def test_the_readme_picture_draws_only_allowed_edges() -> None:
    """The README's layer picture shows every package, and each arrow is an allowed import."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("```mermaid", 1)[1].split("```", 1)[0]
    nodes = {line.split("[", 1)[0].strip() for line in block.splitlines() if "[" in line}
    assert nodes == set(ALLOWED)
    edges = [tuple(x.strip() for x in line.split("-->")) for line in block.splitlines() if "-->" in line]
    assert edges and all(b in ALLOWED[a] for a, b in edges), [e for e in edges if e[1] not in ALLOWED[e[0]]]
