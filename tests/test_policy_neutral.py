"""The packages that take a policy name none: every policy-specific word lives in its spec module.

A word is policy-specific when a policy declares it: its name, profiles and
release aliases, control states, state variables, inputs, row and view fields,
guards, reasons, features and parameters. The scan reads what code *uses*
(attribute names, keyword arguments and string constants, through ``ast``),
not prose in comments and docstrings, so ``v.delayed_count`` or
``profile == "seed"`` in ``proofs/`` fails here while a docstring that explains
SGLang's delayer does not.

Shared by every policy, and so not specific: the layout parameters of
``spec.config.layout_params`` and ``profile``. Words of one or two letters
(``n``) are too short to tell a view field from a loop variable and are left out.
SGLang's delayer API (``runtime/delayer.py``) keeps SGLang's own argument names
for its call sites, which ``HostBinding.call`` declares.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from prefill_delayer.spec import registry
from prefill_delayer.spec.config import layout_params

PACKAGE = Path(__file__).resolve().parents[1]
FOLDERS = ("fsm", "proofs", "runtime", "conformance", "docgen", "traces", "sim")
# SGLang's delayer API: SGLang's call sites pass these by name (``HostBinding.call``), and its
# constructor takes ``max_delay_passes`` and ``token_usage_low_watermark`` positionally.
# Its metrics take ``max_delay_passes`` for SGLang's bucket rule; its example sets SGLang's arguments.
HOST_API = {
    "runtime/delayer.py": ("max_delay_passes", "token_usage_low_watermark"),
    "runtime/metrics.py": ("max_delay_passes",),
    "runtime/example.py": ("max_delay_passes", "token_usage_low_watermark", "max_delay_ms"),
}
# Words that only look like a policy's: (file, word) -> what they are there.
HOMONYMS = {
    ("runtime/decision_log.py", "open"): "the log's failure stage (opening its file), a label of its error counter",
    ("sim/plot.py", "open"): "PIL's Image.open",
    ("sim/rank.py", "waiting"): "the rank's waiting queue",
    ("sim/engine.py", "waiting"): "the rank's waiting queue",
    ("sim/engine.py", "idle"): "a rank with nothing to do (RankScheduler.idle)",
    ("sim/config.py", "lockstep"): "the single-threaded gather (--gather lockstep)",
    ("sim/gather.py", "lockstep"): "the single-threaded gather (--gather lockstep)",
    ("sim/calibrate.py", "uniform"): "prompt lengths drawn uniformly",
    **{(f"sim/{name}.py", "seed"): "the run's RNG seed" for name in ("bound", "calibrate", "cli", "config", "engine", "options", "report", "suite_run", "suite_sweep", "workload")},
}


def sim_words(rel: str) -> set[str]:
    """What the simulator may name: it models SGLang's scheduler, so the facts it offers every policy
    (``sim.policy_site.Facts``, named as SGLang's scheduler names them) and the SGLang delayer options its
    simulated server takes (``sim.config.DELAYER_SETTINGS``) are its own words, as is the executor API's
    ``local_prefillable``; its calibration scenarios (``options.SCENARIOS``, ``calibrate``) reproduce SGLang
    issues on the releases they were reported on, and the differential workloads (``differential``) pick
    profiles (and set a parameter of one), so they name them."""
    if not rel.startswith("sim/"):
        return set()
    from prefill_delayer.sim.config import DELAYER_SETTINGS
    from prefill_delayer.sim.policy_site import Facts

    words = set(Facts._fields) | set(DELAYER_SETTINGS) | {"local_prefillable"}
    if rel in ("sim/options.py", "sim/calibrate.py", "sim/differential.py"):
        words |= {name for pol in registry.policies() for name in (*pol.profile_names, *pol.release_aliases)}
    if rel == "sim/differential.py":
        words |= {p.name for pol in registry.policies() for p in pol.params}
    return words


def policy_words() -> dict[str, str]:
    """Each policy-specific word, with the policy and the part that declares it."""
    shared = {p.name for p in layout_params()} | {"profile"}
    words: dict[str, str] = {}
    for pol in registry.policies():
        parts = {
            "policy": [pol.name],
            "profile": list(pol.profile_names) + list(pol.release_aliases),
            "control state": list(pol.states),
            "state variable": [f.name for f in pol.state_fields],
            "input": [f.name for f in pol.inputs],
            "row field": [f.name for f in pol.row],
            "view field": [a.name for a in pol.view],
            "guard": list(pol.guard_names),
            "reason": list(pol.reasons),
            "feature": [f.id for f in pol.features],
            "parameter": [p.name for p in pol.params],
        }
        for part, names in parts.items():
            for name in names:
                if len(name) > 2 and name not in shared:
                    words.setdefault(name, f"{pol.name}'s {part}")
    return words


def used_words(source: str) -> list[tuple[int, str]]:
    """(line, word) for every attribute name, keyword argument and string constant the code uses."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            found.append((node.lineno, node.attr))
        elif isinstance(node, ast.keyword) and node.arg is not None:
            found.append((node.value.lineno, node.arg))
        elif isinstance(node, ast.arg):
            found.append((node.lineno, node.arg))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            found.append((node.lineno, node.value))
    return found


def host_words(rel: str) -> set[str]:
    if rel not in HOST_API:
        return set()
    extra = HOST_API[rel]
    return {f.name for pol in registry.policies() if pol.host is not None for f in pol.host.call} | set(extra)


def findings(folders: tuple[str, ...] = FOLDERS) -> list[str]:
    words = policy_words()
    out = []
    for folder in folders:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            rel = path.relative_to(PACKAGE).as_posix()
            allowed = host_words(rel) | sim_words(rel)
            for line, word in used_words(path.read_text(encoding="utf-8")):
                if word in words and word not in allowed and (rel, word) not in HOMONYMS:
                    out.append(f"{rel}:{line}: {word!r} ({words[word]})")
    return out


def test_the_policy_words_are_many_and_from_every_policy() -> None:
    words = policy_words()
    owners = {why.split("'s ")[0] for why in words.values()}
    assert owners == {pol.name for pol in registry.policies()}
    assert {"delayed_count", "wait_start", "sglang-0.5.22", "below_min_bs", "pdi-0.5.23"} <= set(words)


@pytest.mark.parametrize(
    "snippet, word",
    [
        ("def f(s):\n    return s.delayed_count + 1\n", "delayed_count"),
        ("def f(c):\n    return c.profile == 'sglang-0.5.22'\n", "sglang-0.5.22"),
        ("def f(v):\n    return g(below_min_bs=v)\n", "below_min_bs"),
    ],
)
def test_the_scan_sees_a_policy_word_in_code(snippet: str, word: str) -> None:
    assert word in {w for _, w in used_words(snippet)}
    assert word in policy_words()


def test_the_scan_leaves_docstrings_alone() -> None:
    assert "delayed_count" not in {w for _, w in used_words('def f():\n    """reads delayed_count"""\n    return 1\n')}


def test_no_package_that_takes_a_policy_names_one() -> None:
    found = findings()
    assert not found, "policy-specific words outside spec/:\n" + "\n".join(found)
