"""The generated transition docs (issue 5): current, derived from the spec, and checked."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import math
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from prefill_delayer import docgen as docs
from prefill_delayer.docgen.textops import UNDOCUMENTED, Case, Leaf, Renderer, TextOps, guard_functions
from prefill_delayer.cli import main as cli_main
from delayer_spec import config_module
from delayer_spec import POLICY, guards, invariants, profiles, table
from prefill_delayer.spec import hashing
from prefill_delayer.spec.registry import all_profiles, policies, policy_named, policy_of
from prefill_delayer.spec.hashing import spec_hash
from prefill_delayer.spec.config import Config
from prefill_delayer.spec.glossary import ARG, CONFIG, LOCAL, VIEW
from delayer_spec import SYMBOLS
from prefill_delayer.spec.ops import PY
from delayer_spec import Local, View

REPO = Path(__file__).resolve().parent.parent
HAVE_PYGRAPHVIZ = importlib.util.find_spec("pygraphviz") is not None
needs_pygraphviz = pytest.mark.skipif(not HAVE_PYGRAPHVIZ, reason="rendering the picture needs pygraphviz ([docs] extra)")


@pytest.fixture(scope="module")
def generated() -> str:
    return docs.generate()


# ----- the committed files are what the spec generates -------------------------


def test_committed_doc_regenerates_identically(generated: str) -> None:
    committed = (REPO / "docs" / docs.DOC_NAME).read_text(encoding="utf-8")
    assert committed == generated, "docs/transitions.md is stale: run `prefill-delayer docs`"


def test_committed_picture_carries_current_stamp() -> None:
    svg = (REPO / "docs" / docs.PICTURE_NAME).read_bytes()
    assert b"<svg" in svg
    assert docs.picture_stamp(svg) == docs.diagram_digest(), "docs/transitions.svg is stale: run `prefill-delayer docs`"


def test_generation_is_deterministic(generated: str) -> None:
    assert docs.generate() == generated
    assert f"spec hash `{spec_hash()}`" in generated


def test_repo_docs_dir_is_the_checkout() -> None:
    assert docs.repo_docs_dir() == REPO / "docs"


def test_outside_a_checkout_out_is_required(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(hashing, "__file__", str(tmp_path / "site-packages" / "prefill_delayer" / "spec" / "hashing.py"))
    with pytest.raises(docs.DocsError, match="--out"):
        docs.repo_docs_dir()
    from prefill_delayer.cli import docs as docs_cli

    assert docs_cli.main(SimpleNamespace(check=True, out=None)) == 2
    assert "--out" in capsys.readouterr().err


# ----- the doc follows the spec -------------------------------------------------


def test_changing_a_guard_changes_the_doc(monkeypatch: pytest.MonkeyPatch, generated: str) -> None:
    assert "`delayed_count < max_delay_passes - 1`" in generated

    def below_cap(o, c, v, s):  # noqa: ANN001 - a guard, as spec.guards writes them
        """Another delay keeps the wait under max_delay_passes."""
        return s.delayed_count <= c.max_delay_passes - 1

    monkeypatch.setattr(guards, "below_cap", below_cap)
    changed = docs.generate()
    assert changed != generated
    assert "`delayed_count <= max_delay_passes - 1`" in changed
    assert "`delayed_count < max_delay_passes - 1`" not in changed
    # the negated use in the timeout rows follows too
    assert "delayed_count > max_delay_passes - 1" in changed


def test_changing_a_guard_docstring_changes_the_doc(monkeypatch: pytest.MonkeyPatch, generated: str) -> None:
    def exists_force(o, c, v, s):  # noqa: ANN001
        """Some counted rank is starving for KV space."""
        return v.num_force > 0

    monkeypatch.setattr(guards, "exists_force", exists_force)
    changed = docs.generate()
    assert "Some counted rank is starving for KV space." in changed and changed != generated


def test_changing_a_reason_changes_the_doc(monkeypatch: pytest.MonkeyPatch, generated: str) -> None:
    digest = docs.diagram_digest()
    original = POLICY.build_table

    def build_table(profile: str) -> table.Table:
        rows = original(profile)
        return table.Table(
            profile,
            table.STATES,
            tuple(dataclasses.replace(t, reason="slot_timeout") if t.name.endswith("mixed_timeout") else t for t in rows),
        )

    monkeypatch.setattr(POLICY, "build_table", build_table)
    changed = docs.generate()
    assert changed != generated
    assert '`"slot_timeout"`' in changed
    assert 'negotiate / allow "slot_timeout" [status_mixed and not exists_force and not below_cap]' in changed
    assert docs.diagram_digest() != digest  # the committed picture's stamp no longer matches


def test_changing_profile_data_changes_the_doc(monkeypatch: pytest.MonkeyPatch, generated: str) -> None:
    first = POLICY.features[0]
    monkeypatch.setattr(POLICY, "features", (dataclasses.replace(first, why="because."),) + POLICY.features[1:])
    changed = docs.generate()
    assert "Why: because." in changed and changed != generated


# ----- the Mermaid text ----------------------------------------------------------


def _expected_label(t: table.Transition) -> str:
    if t.reason is None:
        head = t.event
    elif t.dest == table.DELAYING:
        head = f"{t.event} / delay"
    else:
        head = f'{t.event} / allow "{t.reason}"'
    return f"{head} [{t.guard_text()}]" if t.lits else head


def test_every_profile_has_a_diagram_of_its_own_table() -> None:
    groups = docs.diagram_groups()
    assert sorted(p for g in groups for p in g) == sorted(all_profiles())
    for g in groups:
        assert all(tuple(policy_of(p).build_table(p)) == tuple(policy_of(g[0]).build_table(g[0])) for p in g)
    # One diagram per distinct table of a policy (a policy built on another's table, SGLang's lockstep on its
    # delayer, draws its own).
    assert len({(policy_of(g[0]).name, tuple(policy_of(g[0]).build_table(g[0]))) for g in groups}) == len(groups)


@pytest.mark.parametrize("profile", config_module.PROFILES)
def test_mermaid_has_every_state_and_transition(profile: str, generated: str) -> None:
    text = docs.mermaid(next(g for g in docs.diagram_groups() if profile in g))
    assert text in generated
    lines = [line.strip() for line in text.splitlines()]
    assert "stateDiagram-v2" in lines
    for s in table.STATES:
        assert f'state "{s}" as {s}' in lines
    assert "[*] --> idle" in lines
    edges: dict[tuple[str, str], list[str]] = {}
    for line in lines:
        m = re.fullmatch(r"(\w+) --> (\w+): (.*)", line)
        if m:
            edges[(m.group(1), m.group(2))] = m.group(3).split(" | ")
    expected: dict[tuple[str, str], list[str]] = {}
    for t in table.build_table(profile):
        expected.setdefault((t.source, t.dest), []).append(_expected_label(t))
    assert {k: sorted(v) for k, v in edges.items()} == {k: sorted(v) for k, v in expected.items()}


def test_the_doc_shows_both_profiles_tables(generated: str) -> None:
    for profile in config_module.PROFILES:
        for t in table.build_table(profile):
            assert f"| `{t.name}` | `{t.source}` | `{t.event}` | `{t.guard_text()}` |" in generated
    assert "idle_all_timeout" in generated and "*(no such transition)*" in generated


def test_the_doc_lists_invariants_and_parameters(generated: str) -> None:
    for inv in invariants.CATALOGUE:
        cells = " | ".join(inv.expected[p] for p in config_module.PROFILES)
        assert f"| `{inv.id}` | {inv.statement} | {cells} |" in generated
    for p in config_module.PARAMETERS:
        assert f"| `{p.name}` |" in generated and p.valid.replace("|", "\\|") in generated


# ----- the guard formulas are the guards ----------------------------------------


def test_guard_formulas_read_like_the_code() -> None:
    seed, hardened = Renderer("seed"), Renderer("hardened")
    assert seed.tree("slot_trigger") == Leaf("effective_max_running_requests - RB < PB", None)
    assert seed.tree("status_mixed").text == "num_prefillable != 0 and num_prefillable != n"
    assert seed.tree("queue_timed_out").text == "wait_expired"
    assert hardened.tree("queue_timed_out").text == "timeout_any"
    emrr = seed.tree("effective_max_running_requests")
    assert isinstance(emrr, Case) and emrr.flag == "enable_dp_attention"
    assert (emrr.yes.text, emrr.no.text) == ("mrr_local", "ceil(mrr_local / dp_size)")
    queue = seed.tree("queue_trigger")
    assert isinstance(queue, Case) and queue.no.text == "False"
    assert hardened.tree("delay_wanted").text == "(slot_trigger and not skip_first_armed) or queue_trigger"


def test_textops_negation_and_precedence() -> None:
    from prefill_delayer.docgen.textops import Expr

    o = TextOps()
    a, b, c = Expr("a"), Expr("b"), Expr("c")
    assert o.Not(a < b).text == "a >= b"
    assert o.Not(o.Not(a)).text == "a"
    assert o.And(a, o.TRUE, o.Or(b, c)).text == "a and (b or c)"
    assert o.Or(a, o.FALSE).text == "a"
    assert o.And(a, o.FALSE).text == "False"
    assert ((a - b) * 2).text == "(a - b) * 2"
    assert (a - (b - c)).text == "a - (b - c)"
    with pytest.raises(TypeError, match="Python bool"):
        bool(a < b)


def _value_of(name: str, c: Config, v: View, s: Local, extra: dict) -> object:
    fn = getattr(guards, name)
    scope = {"o": PY, "c": c, "v": v, "s": s, **extra}
    return fn(*(scope[p] for p in inspect.signature(fn).parameters))


def _pick(tree, c: Config):  # noqa: ANN001, ANN202
    while isinstance(tree, Case):
        tree = tree.yes if getattr(c, tree.flag) else tree.no
    return tree


@st.composite
def _pass(draw):  # noqa: ANN001, ANN202
    profile = draw(st.sampled_from(config_module.PROFILES))
    c = Config(
        max_delay_passes=draw(st.integers(0, 5)),
        token_usage_low_watermark=draw(st.none() | st.floats(0, 1)),
        queue_min_ratio=draw(st.none() | st.floats(0.05, 2)),
        max_delay_ms=draw(st.none() | st.floats(1, 10_000)),
        dp_size=draw(st.integers(1, 4)),
        enable_dp_attention=draw(st.booleans()),
        profile=profile,
    )
    n = draw(st.integers(1, 4))
    prefillable = draw(st.integers(0, n))
    v = View(
        n=n,
        num_prefillable=prefillable,
        num_force=draw(st.integers(0, prefillable)),
        running_batch=draw(st.integers(0, 64)),
        max_prefill_bs=draw(st.integers(0, 64)),
        waiting_queue_len=draw(st.integers(0, 64)),
        timeout_any=draw(st.booleans()),
        mrr_max=draw(st.integers(0, 128)),
    )
    waiting = draw(st.booleans())
    now = draw(st.floats(0, 100))
    s = Local(
        waiting=waiting,
        delayed_count=draw(st.integers(1, 6)) if waiting else 0,
        wait_start=now - draw(st.floats(0, 20)) if waiting else now,
        skip_first_armed=draw(st.booleans()),
        now=now,
        mrr=draw(st.integers(0, 128)),
    )
    extra = {"prefillable": draw(st.booleans()), "token_usage": draw(st.floats(0, 1))}
    return c, v, s, extra


@given(_pass())
def test_rendered_formulas_evaluate_like_the_guards(case) -> None:  # noqa: ANN001
    """Evaluating each rendered formula in Python gives what the guard computes: the doc is faithful."""
    c, v, s, extra = case
    renderer = Renderer(c.profile)
    env: dict = {"ceil": math.ceil, "min": min, "max": max, "int": int, "sum": sum}
    objects = {CONFIG: c, VIEW: v, LOCAL: s}
    for sym in SYMBOLS:
        env[sym.shown] = extra[sym.attr] if sym.scope == ARG else getattr(objects[sym.scope], sym.attr)
    names = list(guard_functions(POLICY))
    for name in names:
        env[name] = _value_of(name, c, v, s, extra)
    for name in names:
        text = _pick(renderer.tree(name), c).text
        assert eval(text, {"__builtins__": {}}, env) == env[name], (name, text)  # noqa: S307
    for t in table.build_table(c.profile):
        if t.lits:
            formula = docs.row_formula(renderer, t).text
            assert eval(formula, {"__builtins__": {}}, env) == bool(table.holds(t, PY, c, v, s)), (t.name, formula)


def test_every_symbol_the_guards_read_is_documented(generated: str) -> None:
    assert UNDOCUMENTED not in generated
    shown = {(sym.scope, sym.attr) for sym in SYMBOLS}
    for field in View._fields:
        assert (VIEW, field) in shown, field
    for field in Local._fields:
        assert (LOCAL, field) in shown, field
    for profile in config_module.PROFILES:
        r = Renderer(profile)
        for name in guard_functions(POLICY):
            r.tree(name)
        assert not r.missing


# ----- what hardened changes is explained ----------------------------------------


def test_every_profile_difference_is_explained() -> None:
    diff_guards, diff_rows = docs.profile_differences()
    assert diff_guards and diff_rows
    named = {name for change in profiles.FEATURES for name in change.shows_in}
    rows = {t.name for p in config_module.PROFILES for t in table.build_table(p)}
    for g in diff_guards:
        assert g in named, f"guard {g} differs between profiles: explain it in spec/profiles.py"
    for r in diff_rows:
        assert r.split("_", 1)[1] in named, f"transition {r} differs between profiles: explain it in spec/profiles.py"
    for name in named:
        assert name in guard_functions(POLICY) or any(r.split("_", 1)[1] == name for r in rows), name
    for change in profiles.FEATURES:
        assert not change.invariant or change.invariant in invariants.BY_ID


def test_the_releases_section_maps_every_release(generated: str) -> None:
    assert "## SGLang releases" in generated
    for release, profile in profiles.RELEASES.items():
        assert f"| `{release}` | `{profile}` |" in generated
    for inv in invariants.CATALOGUE:
        cells = " | ".join(inv.expected[p] for p in profiles.RELEASES.values())
        assert f"| `{inv.id}` | {cells} | {inv.expected['hardened']} |" in generated
    for f in profiles.FEATURES:
        for n in f.upstream:
            assert profiles.UPSTREAM_ISSUE_URL.format(n) in generated


# ----- the command ---------------------------------------------------------------


@needs_pygraphviz
def test_docs_check_passes_fresh_and_fails_stale(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out = str(tmp_path)
    assert cli_main(["docs", "--out", out]) == 0
    md, svg = tmp_path / docs.DOC_NAME, tmp_path / docs.PICTURE_NAME
    assert md.is_file() and svg.read_bytes().lstrip().startswith(b"<?xml")
    capsys.readouterr()
    assert cli_main(["docs", "--check", "--out", out]) == 0
    assert "up to date" in capsys.readouterr().out

    good = md.read_text(encoding="utf-8")
    md.write_text(good.replace("`num_prefillable == 0`", "`num_prefillable == 1`", 1), encoding="utf-8")
    assert cli_main(["docs", "--check", "--out", out]) == 1
    captured = capsys.readouterr()
    assert "-| `idle_none` |" in captured.out and "+| `idle_none` |" in captured.out  # a unified diff
    assert "stale" in captured.err

    md.write_text(good, encoding="utf-8")
    picture = svg.read_bytes()
    svg.write_bytes(picture.replace(docs.diagram_digest().encode(), b"0" * 64))
    assert cli_main(["docs", "--check", "--out", out]) == 1
    assert "transitions.svg" in capsys.readouterr().err

    svg.write_bytes(picture)
    assert cli_main(["docs", "--check", "--out", out]) == 0
    md.unlink()
    assert cli_main(["docs", "--check", "--out", out]) == 1


@needs_pygraphviz
def test_docs_check_exit_status_through_the_installed_command(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "prefill_delayer.cli", "docs", "--out", str(tmp_path)]
    assert subprocess.run(run, capture_output=True).returncode == 0
    assert subprocess.run(run + ["--check"], capture_output=True).returncode == 0
    (tmp_path / docs.DOC_NAME).write_text("stale\n", encoding="utf-8")
    done = subprocess.run(run + ["--check"], capture_output=True, text=True)
    assert done.returncode == 1 and "+++" in done.stdout


def _readme_block(heading: str) -> str:
    """The first ```python block under the README's ``heading``."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index(heading):]
    start = section.index("```python\n") + len("```python\n")
    return section[start:section.index("```\n", start)]


@pytest.mark.parametrize("heading, printed", [
    ("## Stepping the FSM", "False delay State(control='delaying'"),
    ("## Policies: one interface", "[['no_interval', 'decode_interval', 'decode_interval', 'no_interval']"),
])
def test_the_readme_examples_run_and_print_what_they_say(heading: str, printed: str) -> None:
    """The README's self-contained examples run as written, in a fresh interpreter."""
    run = subprocess.run([sys.executable, "-c", _readme_block(heading)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert printed in run.stdout


@pytest.mark.parametrize("policy", [p.name for p in policies()])
def test_every_policys_profile_differences_are_explained(policy: str) -> None:
    """For every policy: each guard or transition that differs between its consecutive profiles is some feature's."""
    pol = policy_named(policy)
    diff_guards, diff_rows = docs.profile_differences(pol)
    named = {name for change in pol.features for name in change.shows_in}
    unexplained = [g for g in diff_guards if g not in named] + [r for r in diff_rows if r.split("_", 1)[1] not in named]
    assert not unexplained, f"{policy}: differences no feature explains: {unexplained}"
