"""``prefill-delayer docs``: docs/transitions.md and its picture, generated from the spec.

Everything on the page is read from the code at generation time, policy by
policy (``spec.registry.policies``): states, events, reasons and effects from
the policy's table; the Mermaid diagrams from ``transitions``' own Mermaid
engine, run on a ``GraphMachine`` that ``fsm.machine.add_table`` fills from the
table (the same function that builds the runtime's machine); the guard formulas
by evaluating each guard's definition with ``TextOps`` (``docgen/textops.py``);
the profile changes from the policy's features; invariants and parameters from
the policy; the stamp from ``spec.hashing.spec_hash``. The output is
deterministic: no dates, and every list is in table or definition order. Each
section is one function of a policy (``SECTIONS``).

The picture (``transitions.svg``) is rendered from the same machines by
``transitions``' Graphviz extension through pygraphviz. Graphviz output depends
on the Graphviz build and the fonts of the machine, so ``--check`` does not
compare it byte for byte: it compares the Markdown exactly (which contains the
Mermaid text of every machine) and requires the SVG to carry the sha256 of that
Mermaid text, which ``docs`` writes into it as a comment when it renders.
"""

from __future__ import annotations

import difflib
import hashlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Optional

from transitions.extensions.diagrams import GraphMachine

from ..fsm.machine import add_table
from ..proofs.scope import scope_line
from ..spec import hashing
from ..spec.glossary import ARG, CONFIG, LOCAL, VIEW
from ..spec.policy import PROVED, Feature, Policy
from ..spec.registry import policies, policy_of
from ..spec.table import EVENT_DOC, EVENTS, Transition
from .textops import TEXT, UNDOCUMENTED, Expr, Leaf, Renderer, Tree, flag_shown, guard_functions

DOC_NAME = "transitions.md"
PICTURE_NAME = "transitions.svg"
STAMP_PREFIX = "<!-- prefill-delayer diagram sha256:"
_STAMP_RE = re.compile(re.escape(STAMP_PREFIX) + r"([0-9a-f]{64})")


class DocsError(Exception):
    """A reason ``docs`` cannot do its job (printed, exit status 2)."""


# ----- the machine, as transitions draws it ------------------------------------


class _Labelled:
    """Lets ``add_table`` fill a GraphMachine while giving each edge an ``event / decision`` label.

    ``add_table`` adds one transition per table row, in row order; the label of
    each comes from that row (checked, so a change in ``add_table`` cannot
    silently mislabel an edge).
    """

    def __init__(self, machine: GraphMachine, rows: Iterable[Transition]) -> None:
        self._machine = machine
        self._rows = iter(rows)

    def add_transition(self, trigger: str, source: str, dest: str, **kwargs: Any) -> None:
        row = next(self._rows)
        if (row.event, row.source, row.dest) != (trigger, source, dest):
            raise AssertionError(f"add_table added {trigger} {source}->{dest}, expected row {row.name}")
        self._machine.add_transition(trigger, source, dest, label=edge_label(row), **kwargs)


def decision(row: Transition) -> str:
    """``delay`` (the reason a held pass gives), ``allow "wait_timeout"``, or nothing for ``finalize``."""
    if row.reason is None:
        return ""
    return f'allow "{row.reason}"' if row.allows else row.reason


def edge_label(row: Transition) -> str:
    """``negotiate / delay``, ``negotiate / allow "wait_timeout"``, ``finalize``."""
    d = decision(row)
    return f"{row.event} / {d}" if d else row.event


def diagram_groups(policy: Optional[Policy] = None) -> list[tuple[str, ...]]:
    """The profiles grouped by identical transition tables (same rows, guard names, reasons, effects):
    one diagram each, since a diagram shows exactly that. Every policy's, or ``policy``'s."""
    groups: dict[tuple, list[str]] = {}
    for pol in policies() if policy is None else (policy,):
        for p in pol.profile_names:
            groups.setdefault((pol.name, tuple(pol.build_table(p))), []).append(p)
    return [tuple(g) for g in groups.values()]


def _title(group: tuple[str, ...]) -> str:
    return ("profile " if len(group) == 1 else "profiles ") + ", ".join(group)


def build_machine(group: tuple[str, ...], graph_engine: Literal["pygraphviz", "graphviz", "mermaid"]) -> GraphMachine:
    """The group's transitions machine, built by ``add_table`` as the runtime's is, with diagram support."""
    profile = group[0]
    policy = policy_of(profile)
    rows = policy.build_table(profile)
    machine = GraphMachine(
        states=list(policy.states),
        initial=policy.init.control,
        auto_transitions=False,
        show_conditions=True,  # guards on the edges: add_table names each condition by its guard text
        graph_engine=graph_engine,
        # transitions writes the title as Mermaid front matter; "title: ..." makes it valid YAML.
        title=f"title: prefill-delayer FSM, {_title(group)}" if graph_engine == "mermaid" else _title(group),
    )
    add_table(_Labelled(machine, rows), policy.config_cls(profile=profile), rows)  # type: ignore[arg-type]
    return machine


def mermaid(group: tuple[str, ...]) -> str:
    """The Mermaid ``stateDiagram-v2`` text ``transitions`` emits for the group's machine."""
    text = build_machine(group, "mermaid").get_graph().source
    # transitions indents blank lines; trailing blanks would not survive editors that strip them.
    return "\n".join(line.rstrip() for line in text.splitlines())


def diagram_digest() -> str:
    """sha256 of every diagram's Mermaid text: the stamp the picture must carry."""
    text = "\n".join(mermaid(g) for g in diagram_groups())
    return hashlib.sha256(text.encode()).hexdigest()


def picture_graph() -> Any:
    """Every distinct machine as one pygraphviz graph, from transitions' Graphviz extension."""
    try:
        import pygraphviz as pgv
    except ImportError as exc:  # transitions would silently fall back to another engine
        raise DocsError(
            f"rendering {PICTURE_NAME} needs pygraphviz: pip install 'prefill-delayer[docs]' ({exc})"
        ) from exc
    graphs = [(g, build_machine(g, "pygraphviz").get_graph()) for g in diagram_groups()]
    top = pgv.AGraph(directed=True, strict=False, rankdir="TB")
    # Defaults first: nodes added before a default is declared do not pick it up.
    top.node_attr.update({k: v for k, v in graphs[0][1].node_attr.items() if v})
    top.edge_attr.update({k: v for k, v in graphs[0][1].edge_attr.items() if v})
    top.graph_attr.update(
        fontname="Helvetica",
        labelloc="b",
        label="prefill-delayer FSM, generated from the spec by prefill-delayer docs. "
        "Edges: event / decision [guards]; highlighted: the initial state.",
    )
    top.node_attr["fontname"] = "Helvetica"
    top.edge_attr.update(fontname="Helvetica", fontsize="10")
    previous = None
    for group, graph in graphs:
        policy = policy_of(group[0])
        profile = group[0].replace("-", "_").replace(".", "_")
        sub = top.add_subgraph(
            name=f"cluster_{profile}", label=_title(group), labelloc="t", style="rounded", color="gray40", fontname="Helvetica-Bold"
        )
        for node in graph.nodes():
            sub.add_node(f"{profile}_{node}", **{k: v for k, v in node.attr.items() if v})
        for edge in graph.edges():
            attrs = {k: v for k, v in edge.attr.items() if v}
            # transitions joins the rows sharing an edge with " | "; put one row per line.
            attrs["label"] = attrs.get("label", "").replace(" | ", "\\l") + "\\l"
            sub.add_edge(f"{profile}_{edge[0]}", f"{profile}_{edge[1]}", **attrs)
        if previous is not None:  # stack the profiles vertically
            top.add_edge(f"{previous}", f"{profile}_{policy.init.control}", style="invis")
        previous = f"{profile}_{policy.states[-1]}"
    return top


def render_svg() -> bytes:
    """The picture, laid out by Graphviz ``dot``, stamped with ``diagram_digest()``."""
    svg = picture_graph().draw(format="svg", prog="dot")
    stamp = f"{STAMP_PREFIX}{diagram_digest()} (regenerate: prefill-delayer docs) -->\n".encode()
    if svg.startswith(b"<?xml"):
        end = svg.index(b"\n") + 1
        return svg[:end] + stamp + svg[end:]
    return stamp + svg


def picture_stamp(svg: bytes) -> Optional[str]:
    m = _STAMP_RE.search(svg.decode("utf-8", "replace"))
    return m.group(1) if m else None


# ----- markdown helpers -------------------------------------------------------


def _code(text: str) -> str:
    return f"`{text}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(*cells: str) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _table(header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> list[str]:
    return [_row(*header), "|" + "|".join("---" for _ in header) + "|", *(_row(*r) for r in rows)]


def _docline(obj: Any) -> str:
    """First paragraph of a docstring, one line, reST double backticks made Markdown."""
    doc = inspect.getdoc(obj) or ""
    para = doc.split("\n\n", 1)[0]
    return " ".join(para.split()).replace("``", "`")


def tree_md(tree: Tree, policy: Policy) -> str:
    if isinstance(tree, Leaf):
        return _code(tree.text)
    return f"if {_code(flag_shown(policy, tree.flag))}: {tree_md(tree.yes, policy)}<br>else: {tree_md(tree.no, policy)}"


def _value(v: Any) -> str:
    return _code(f'"{v}"' if isinstance(v, str) else repr(v))


def _where(policy: Policy, part: str) -> str:
    """The file of the policy that holds ``part`` (its ``docs`` data says; else the guards' package)."""
    found = policy.extras.get("docs", {}).get("where", {}).get(part)
    if found:
        return str(found)
    module = policy.guards.__name__.removeprefix("prefill_delayer.")
    return module.replace(".", "/") + ".py"


def _docs(policy: Policy, key: str, default: str = "") -> str:
    return str(policy.extras.get("docs", {}).get(key, default))


# ----- what differs between the profiles ---------------------------------------


def row_formula(r: Renderer, row: Transition) -> Expr:
    """The row's guards as one formula (each guard expanded one level)."""
    parts = []
    for lit in row.lits:
        e = r.expr(lit.guard)
        parts.append(e if lit.positive else TEXT.Not(e))
    return TEXT.And(*parts)


def _pairs(policy: Policy) -> list[tuple[str, str]]:
    """Consecutive profiles of a policy, in order: every feature is introduced by one of these steps."""
    profs = policy.profile_names
    return list(zip(profs, profs[1:]))


def feature_step(policy: Policy, feature: Feature) -> tuple[str, str]:
    """(without, with): the profile before the first one that has ``feature``, and that one."""
    profs = policy.profile_names
    first = next(i for i, p in enumerate(profs) if feature.id in policy.features_of(p))
    return profs[first - 1], profs[first]


def profile_differences(policy: Optional[Policy] = None) -> tuple[list[str], list[str]]:
    """Guards whose formula, and transitions that, differ between consecutive profiles, in order."""
    pol = policy if policy is not None else policies()[0]
    renderers = {p: Renderer(p) for p in pol.profile_names}
    tables = {p: {t.name: t for t in pol.build_table(p)} for p in pol.profile_names}
    guards: list[str] = []
    rows: list[str] = []
    for a, b in _pairs(pol):
        guards += [g for g in guard_functions(pol) if renderers[a].tree(g) != renderers[b].tree(g) and g not in guards]
        names = list(tables[a]) + [n for n in tables[b] if n not in tables[a]]
        rows += [n for n in names if tables[a].get(n) != tables[b].get(n) and n not in rows]
    return guards, rows


def _shown_rows(policy: Policy, suffix: str, names: Iterable[str]) -> list[str]:
    return [n for n in names if any(n == f"{src}_{suffix}" for src in policy.states)]


def _upstream_links(policy: Policy, numbers: Iterable[int]) -> str:
    return ", ".join(f"[#{n}]({policy.upstream_url.format(n)})" for n in dict.fromkeys(numbers))


def _feature_link(feature: Feature) -> str:
    return f"[`{feature.id}`](#{feature.id})"


# ----- the page: one function per section, each of one policy ----------------------------


class Page:
    """One policy's sections, with what several of them read (renderers and tables per profile)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.profs = policy.profile_names
        self.tables = {p: policy.build_table(p) for p in self.profs}
        self.renderers = {p: Renderer(p) for p in self.profs}
        self.out: list[str] = []

    def add(self, line: str) -> None:
        self.out.append(line)

    def table(self, header: tuple[str, ...], rows: Iterable[tuple[str, ...]]) -> None:
        self.out += _table(header, rows)


def section_states(page: Page) -> None:
    pol = page.policy
    page.add("## States and events")
    page.add("")
    page.table(("state", "meaning"), ((_code(s) + (" (initial)" if s == pol.init.control else ""), pol.state_doc[s]) for s in pol.states))
    page.add("")
    page.table(("event", "meaning"), ((_code(e), EVENT_DOC[e]) for e in EVENTS))
    page.add("")
    page.add(
        "The guards of `negotiate` from each source state are mutually exclusive and exhaustive "
        "(the `guards-partition` invariant), so the order of the rows does not matter."
    )
    page.add("")


def section_diagrams(page: Page) -> None:
    page.add("## Diagrams")
    page.add("")
    page.add(
        'The Mermaid text `transitions` emits itself (`GraphMachine(graph_engine="mermaid")`, `show_conditions=True`) '
        "for each distinct machine; each edge lists its rows as `event / decision [guards]`, separated by `|`. "
        "Profiles whose tables have the same rows share a diagram; their guards may still differ (see below)."
    )
    for g in diagram_groups(page.policy):
        page.add("")
        page.add(f"### {_title(g)}")
        page.add("")
        page.add("```mermaid")
        page.out += mermaid(g).splitlines()
        page.add("```")
    page.add("")


def section_profiles(page: Page) -> None:
    pol = page.policy
    page.add("## Profiles")
    page.add("")
    page.table(
        ("profile", "what it is", "features"),
        (
            (_code(p.name), p.summary, ", ".join(_feature_link(f) for f in pol.features if f.id in p.features) or "none")
            for p in pol.profiles
        ),
    )
    page.add("")
    _features(page)
    _releases(page)


def _releases(page: Page) -> None:
    """Release -> profile -> features, and each invariant's verdict per release."""
    pol = page.policy
    engine = _docs(pol, "engine", "Engine")
    add = page.add
    add(f"## {engine} releases")
    add("")
    add(_docs(pol, "releases_intro"))
    add("")
    rows = []
    releases = [(r, p.name) for p in pol.profiles for r in p.releases]
    for release, name in releases:
        feats = [f for f in pol.features if f.id in pol.features_of(name)]
        shown = ", ".join(f"{_feature_link(f)} (since {f.since})" for f in feats) or _docs(pol, "no_features", "none")
        links = _upstream_links(pol, (n for f in feats for n in f.upstream))
        rows.append((f"`{release}`", _code(name), shown, links or "—"))
    ours = [f for f in pol.features if f.since is None]
    upstream = [f for f in pol.features if f.since is not None]
    for p in pol.profiles:
        if p.releases:
            continue
        theirs = [f for f in upstream if f.id in p.features]
        mine = [f for f in ours if f.id in p.features]
        lead = "every feature above, plus " if theirs and len(theirs) == len(upstream) else ""
        rows.append(("—", _code(p.name), lead + ", ".join(_feature_link(f) for f in (mine if lead else theirs + mine)),
                     _upstream_links(pol, (n for f in pol.features if f.id in p.features for n in f.upstream)) or "—"))
    page.table(("release", "profile", "features", "upstream"), rows)
    add("")
    add(
        "The verdict of each invariant for each release: the status `prefill-delayer prove` establishes for the "
        "release's profile (and fails CI if it changes). Every refuted cell comes with a shortest counterexample "
        "trace that `prefill-delayer replay` reproduces" + _docs(pol, "replayed_by", " and that the release's own code reproduces too") + "."
    )
    add("")
    ours_profiles = [p.name for p in pol.profiles if not p.releases]
    page.table(
        ("invariant", *(r for r, _ in releases), *ours_profiles),
        ((_code(inv.id), *(inv.expected[p] for _, p in releases), *(inv.expected[p] for p in ours_profiles)) for inv in pol.invariants),
    )
    add("")


def _features(page: Page) -> None:
    """Each feature: its words, and the derived formulas and rows without and with it."""
    pol, renderers, tables = page.policy, page.renderers, page.tables
    add = page.add
    where = _where(pol, "features")
    add("### Features, and why")
    add("")
    add(
        f"Each feature below is data in `{where}`; the formulas and transitions beside it are derived "
        "from the guards and the table of the profile just before the first one that has it, and of that profile."
    )
    diff_guards, diff_rows = profile_differences(pol)
    covered_guards: set[str] = set()
    covered_rows: set[str] = set()
    all_rows = list(dict.fromkeys(t.name for p in pol.profile_names for t in tables[p]))
    guards = guard_functions(pol)
    engine = _docs(pol, "engine", "Engine")
    for i, feature in enumerate(pol.features, 1):
        without, with_ = feature_step(pol, feature)
        add("")
        add(f'<a id="{feature.id}"></a>')
        add("")
        add(f"#### {i}. {feature.topic} (`{feature.id}`)")
        add("")
        having = [p.name for p in pol.profiles if not p.releases and feature.id in p.features]
        since = f"{engine} {feature.since}" if feature.since else f"ours: in {', '.join(f'`{p}`' for p in having)} only"
        add(f"Since: {since}.")
        add("")
        body: list[tuple[str, ...]] = [("behaviour", feature.before, feature.after)]
        for name in feature.shows_in:
            if name in guards:
                covered_guards.add(name)
                body.append((f"guard `{name}`", *(tree_md(renderers[p].tree(name), pol) for p in (without, with_))))
            for rname in _shown_rows(pol, name, all_rows):
                covered_rows.add(rname)
                cells = []
                for p in (without, with_):
                    row = next((t for t in tables[p] if t.name == rname), None)
                    if row is None:
                        cells.append("*(no such transition)*")
                    else:
                        cells.append(f"{_code(row_formula(renderers[p], row).text)} → `{row.dest}`, {decision(row)}")
                body.append((f"transition `{rname}`", *cells))
        inv = pol.invariant(feature.invariant) if feature.invariant else None
        if inv is not None:
            body.append((f"invariant `{inv.id}` (proved / refuted)", *(inv.expected[p] for p in (without, with_))))
        page.table(("", f"without (`{without}`)", f"with (`{with_}`)"), body)
        add("")
        why = feature.why if feature.why.endswith(".") else feature.why + "."
        links = _upstream_links(pol, feature.upstream)
        add(f"Why: {why}" + (f" Upstream: {links}." if links else ""))
    unexplained = [f"guard `{g}`" for g in diff_guards if g not in covered_guards]
    unexplained += [f"transition `{r}`" for r in diff_rows if r not in covered_rows]
    if unexplained:
        add("")
        add(f"#### Other differences (not yet explained in `{where}`)")
        add("")
        for item in unexplained:
            add(f"- {item}")
    add("")


def _table_rows(r: Renderer, rows: Iterable[Transition]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    pol = r.policy
    for t in rows:
        formula = row_formula(r, t).text if t.lits else "always"
        out.append(
            (
                _code(t.name),
                _code(t.source),
                _code(t.event),
                _code(t.guard_text()),
                _code(formula),
                _code(t.dest),
                "—" if t.reason is None else ("allow" if t.allows else t.reason),
                "—" if t.reason is None else _code(f'"{t.reason}"'),
                _effect(pol, t),
            )
        )
    return out


def section_tables(page: Page) -> None:
    """Transition tables, one per profile whose rendered rows differ from the previous profile's."""
    page.add("## Transition tables")
    page.add("")
    page.add(
        "One row per transition of the profile's table. *Guards* are the table's guard names (as on the "
        "diagram's edges); *as a formula* expands each guard one level from its definition (see "
        "[Guards](#guards)); a row fires when its guards all hold. Profiles whose rows read the same share a table."
    )
    shown: dict[tuple, list[str]] = {}
    for p in page.profs:
        shown.setdefault(tuple(_table_rows(page.renderers[p], page.tables[p])), []).append(p)
    for rows, names in shown.items():
        page.add("")
        page.add(f"### {', '.join(names)}")
        page.add("")
        page.table(("transition", "source", "event", "guards", "as a formula", "destination", "decision", "reason", "effect"), rows)
    page.add("")


def section_guards(page: Page) -> None:
    pol, renderers, profs = page.policy, page.renderers, page.profs
    page.add("## Guards")
    page.add("")
    page.add(
        f"Every function of `{_where(pol, 'guards')}`, rendered by running its definition on symbolic inputs. A call to "
        "another guard shows by that guard's name (or inline when it is a single comparison); `if X:` marks a "
        "structural configuration switch. *(same)* means: as in the column to its left."
    )
    page.add("")
    page.add("### Symbols")
    page.add("")
    where = {VIEW: "gathered view (`View`)", LOCAL: "this rank (`Local`)", CONFIG: "configuration (`Config`)", ARG: "guard argument"}
    sym_rows = [(_code(s.shown), s.meaning + ("; a structural switch" if s.flag else ""), f"{where[s.scope]} `{s.attr}`") for s in pol.symbols]
    missing = sorted(set().union(*(r.missing for r in renderers.values())))
    sym_rows += [(_code(attr), UNDOCUMENTED, f"{where.get(scope, scope)} `{attr}`") for scope, attr in missing]
    page.table(("symbol", "meaning", "read from"), sym_rows)
    page.add("")
    page.add("### Definitions")
    page.add("")
    g_rows = []
    for name, fn in guard_functions(pol).items():
        cells = [tree_md(renderers[p].tree(name), pol) for p in profs]
        shown_cells = [cells[0]] + ["*(same)*" if c == prev else c for prev, c in zip(cells, cells[1:])]
        g_rows.append((_code(name), _docline(fn), *shown_cells))
    page.table(("guard", "meaning", *profs), g_rows)
    page.add("")


def section_invariants(page: Page) -> None:
    pol, profs = page.policy, page.profs
    page.add("## Invariants")
    page.add("")
    page.add(f"The proof catalogue (`{_where(pol, 'invariants')}`) with the status `prefill-delayer prove` must establish per profile.")
    page.add("")
    agg = pol.invariant("aggregate-view")
    layouts = agg is not None and all(s == PROVED for s in agg.expected.values())
    page.add(
        "What the proofs range over, as `prefill-delayer prove` prints it (generated from the families the "
        f"checks are built from, `{_where(pol, 'scope')}`):"
    )
    page.add("")
    page.add(f"> {scope_line(profs, {}, layouts)}")
    page.add("")
    page.table(
        ("id", "statement", *profs, "note"),
        ((_code(inv.id), inv.statement, *(inv.expected.get(p, "") for p in profs), inv.note) for inv in pol.invariants),
    )
    page.add("")


def section_parameters(page: Page) -> None:
    page.add("## Configuration parameters")
    page.add("")
    page.add(f"From `PARAMETERS` in `{_where(page.policy, 'parameters')}`, which the constructor's validation reads.")
    page.add("")
    page.table(("parameter", "default", "valid values"), ((_code(q.name), _value(q.default), q.valid) for q in page.policy.params))
    page.add("")


SECTIONS: tuple[Callable[[Page], None], ...] = (
    section_states, section_diagrams, section_profiles, section_tables, section_guards, section_invariants, section_parameters,
)


def section_policy(page: Page) -> None:
    """A policy's heading, then its sections."""
    pol = page.policy
    page.add(f"# {pol.title} (`{pol.name}`)")
    page.add("")
    page.add(f"{pol.summary[0].upper()}{pol.summary[1:]}. Read from: {pol.source}.")
    page.add("")
    for section in SECTIONS:
        section(page)


def generate() -> str:
    """The whole of docs/transitions.md, from the spec and the transitions machines."""
    h = hashing.spec_hash()
    groups = diagram_groups()
    out: list[str] = []
    add = out.append
    add(f"<!-- Generated by `prefill-delayer docs` from spec/ (spec hash {h}). Do not edit by hand. -->")
    add("")
    add("# prefill-delayer: the transition systems")
    add("")
    add(
        f"Generated from the spec (`spec/`, spec hash `{h}`) and from the `transitions` state machine that "
        "`fsm.machine.add_table` builds from each policy's table. Every state, event, guard, reason, effect, "
        "invariant, profile, release and parameter below is read from the code; each guard's formula is obtained "
        "by evaluating the guard's own definition on symbolic inputs (`docgen/textops.py`). Regenerate with "
        "`prefill-delayer docs`; `prefill-delayer docs --check` fails when this page is stale."
    )
    add("")
    add(f"![The delayer's state machines, one per distinct transition table]({PICTURE_NAME})")
    add("")
    add(
        f"*`{PICTURE_NAME}`: one machine per distinct transition table ({'; '.join(_title(g) for g in groups)}), "
        "drawn by Graphviz through `transitions`' diagram extension (pygraphviz). Edges read "
        "`event / decision [guards]`; the highlighted state is the initial one.*"
    )
    add("")
    add("Policies on this page:")
    add("")
    for pol in policies():
        add(f"- {pol.title} (`{pol.name}`): profiles {', '.join(f'`{p}`' for p in pol.profile_names)}")
    add("")
    for pol in policies():
        page = Page(pol)
        section_policy(page)
        out += page.out
    add("## Keeping this page current")
    add("")
    add(
        f"`prefill-delayer docs` rewrites this file and `{PICTURE_NAME}`. `prefill-delayer docs --check` exits "
        "non-zero with a unified diff when this file differs from what the spec generates, and when the picture "
        "is missing or does not carry the sha256 of the Mermaid text above (written into the SVG as a comment "
        "when it is rendered). The SVG is not compared byte for byte: Graphviz output depends on the Graphviz "
        "build and the installed fonts."
    )
    add("")
    add(f"Spec hash: `{h}`")
    return "\n".join(out) + "\n"


def _effect(policy: Policy, t: Transition) -> str:
    parts = [policy.effect_doc[e] for e in t.effects]
    return "; ".join(_code(p) for p in parts) if parts else policy.keep_doc


# ----- the command --------------------------------------------------------------


def repo_docs_dir() -> Path:
    """The checkout's docs/ folder: the repository root is the parent of the spec/ folder."""
    root = Path(hashing.__file__).resolve().parent.parent
    if not ((root / "pyproject.toml").is_file() and (root / "spec").is_dir() and (root / "fsm").is_dir()):
        raise DocsError(
            f"cannot find the repository's docs/ folder: the package is not running from a checkout ({root}); "
            "pass --out DIR"
        )
    return root / "docs"


def rendered() -> list[tuple[str, bytes]]:
    """``(file name, content)`` of every file ``docs`` writes: the doc and its picture (written together)."""
    return [(DOC_NAME, generate().encode("utf-8")), (PICTURE_NAME, render_svg())]


def check(out_dir: Path) -> int:
    """0 when the committed doc is what the spec generates and the picture carries the current stamp."""
    doc, picture = out_dir / DOC_NAME, out_dir / PICTURE_NAME
    status = 0
    expected = generate()
    committed = doc.read_text(encoding="utf-8") if doc.is_file() else ""
    if committed != expected:
        if doc.is_file():  # a missing doc's diff would be the whole doc: the line below says enough
            sys.stdout.writelines(
                difflib.unified_diff(
                    committed.splitlines(keepends=True),
                    expected.splitlines(keepends=True),
                    fromfile=f"{doc} (committed)",
                    tofile=f"{doc} (generated from spec {hashing.spec_hash()})",
                )
            )
        what = "is stale" if doc.is_file() else "is missing"
        print(f"{doc} {what}: run `prefill-delayer docs`", file=sys.stderr)
        status = 1
    stamp = picture_stamp(picture.read_bytes()) if picture.is_file() else None
    if stamp != diagram_digest():
        what = "is missing" if not picture.is_file() else "was not rendered from the current machine"
        print(f"{picture} {what}: run `prefill-delayer docs`", file=sys.stderr)
        status = 1
    if status == 0:
        print(f"{doc} and {picture} are up to date (spec {hashing.spec_hash()})")
    return status
