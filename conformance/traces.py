"""``check-log --traces DIR``: each flagged window of a log as a trace that ``prefill-delayer replay`` reproduces.

A trace (``traces.format``) starts from freshly built ranks, so a window must
start at a pass from which fresh ranks reach the logged states. The window
chosen for a violation is the *latest* pass at or before the violation's first
pass (a delay run's first delay; the disagreeing pass) at which every rank's
logged state is the policy's ``init``, up to the variables that can be set from
outside (``LogSchema.set_flags``: SGLang's one-shot skip), equal on every rank.
If those equal ``init``'s the trace starts right there; if not, the trace
begins with the policy's bridge (``LogSchema.bridge``: for SGLang's delayer one
synthetic pass that consumes the skip and decides nothing else), after which
fresh ranks are exactly in the logged state. Between that pass and the
violation every rank must have logged every pass, and nobody may have set a
variable from outside; failed passes change no state and are left out.

Each trace is replayed here, through the runtime, before it is written: only a
window whose violation ``replay`` reproduces is written, and the reason is
given for any other. Only properties with a replayable check
(``traces.violations``) have traces; a conformance divergence cannot have one,
since replay runs this build's runtime, which follows the spec.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Optional

from ..runtime.envelope import Envelope
from ..spec.ops import PY
from ..spec.schema import config_keys, expect_of
from ..traces.format import validate_trace
from ..traces.violations import replayable
from .checks import Finding, Report, Session, shared_state
from .desync import DESYNC
from .logread import PassRec

MAX_TRACES_PER_PROPERTY = 20
MAX_WINDOW = 5000  # passes; a longer window would make a trace nobody reads


def _fresh(policy: Any, recs: list[PassRec]) -> bool:
    """Every rank starts this pass as a fresh rank would, up to the variables set from outside (equal on all)."""
    flags = policy.log.set_flags
    init = policy.init
    states = [r.before for r in recs]
    return all(s._replace(**{f: getattr(init, f) for f in flags}) == init for s in states) and len(
        {tuple(getattr(s, f) for f in flags) for s in states}) == 1


def choose_window(s: Session, maps: list[dict[int, PassRec]], first: int, last: int) -> tuple[Optional[int], str]:
    """(start, "") for the window [start, last] of a violation that begins at ``first``; (None, why) if none."""
    sets = {x.after_pass for log in s.logs for x in log.sets}
    for k in range(first, last + 1):
        if any(k not in m for m in maps):
            return None, f"pass {k} is missing from some rank's log"
    k = first
    while True:
        if first - k >= MAX_WINDOW:
            return None, f"no pass in the {MAX_WINDOW} before pass {first} starts from a fresh state on every rank"
        if any(k not in m for m in maps):
            return None, (f"no pass from pass {k + 1} to {first} starts from a fresh state on every rank, and pass {k} "
                          "is not in every rank's log") if k >= 1 else (
                          f"no logged pass up to pass {first} starts from a fresh state on every rank")
        if _fresh(s.config.policy, [m[k] for m in maps]):
            inside = sorted(p for p in sets if k <= p < last)
            if inside:
                return None, f"the skip flag was set from outside after pass {inside[0]}, inside the window"
            return k, ""
        k -= 1


def build_trace(s: Session, maps: list[dict[int, PassRec]], start: int, last: int, f: Finding) -> dict[str, Any]:
    """The trace of log passes ``start..last`` (rank order: the gather's)."""
    c = s.config
    policy = c.policy
    env = Envelope(c)
    world = c.world_size
    cfg = c.as_dict()
    bridge = policy.log.bridge(maps[0][start].before) if policy.log.bridge is not None else None
    passes: list[dict[str, Any]] = []
    if bridge is not None:
        inputs, expect, note, what = bridge
        passes.append({
            "ranks": [{**inputs, "now_s": m[start].now} for m in maps],
            "expect": [dict(expect) for _ in maps],
            "note": f"synthetic: {note}",
        })
    n, k_policy = env.row_len, env.n_policy
    for k in range(start, last + 1):
        ranks, expect_list = [], []
        for place, m in enumerate(maps):
            r = m[k]
            assert r.rows is not None, "every rank logged the pass (choose_window), so stream.window rebuilt its rows"
            own = r.rows[place * n:place * n + k_policy]
            inp = policy.log.inputs_from_row(PY, own, r.readings)
            ranks.append({**{fld.trace_name: getattr(inp, fld.name) for fld in policy.trace.inputs}, "now_s": r.now})
            expect_list.append(expect_of(policy, r.decision))
        passes.append({"ranks": ranks, "expect": expect_list, "log_pass": k})
    assert len(passes[-1]["ranks"]) == world
    prop = f.property
    synthetic = bridge is not None
    offset = 1 if synthetic else 0
    return {
        "property": prop,
        "profile": c.profile,
        "config": {key: cfg[key] for key in (policy.trace.config or config_keys(policy))},
        "passes": passes,
        "violation": (f"from a decision log: {f.message} (trace pass {offset} is log pass {start}"
                      + (f"; trace pass 0 is synthetic: {bridge[3]})" if bridge is not None else ")")),
        "source": {"logs": [log.files[0] for log in s.logs], "log_passes": [start, last], "synthetic_first_pass": synthetic},
    }


def _first_split(s: Session, maps: list[dict[int, PassRec]], f: Finding) -> bool:
    """An agreement finding whose ranks did not all start the pass from the same state (a consequence, not a cause)."""
    recs = [m[f.pass_number] for m in maps if f.pass_number in m]
    policy = s.config.policy
    return any(shared_state(r, policy) != shared_state(recs[0], policy) for r in recs)


def _write(path: Path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def export_traces(report: Report, directory: str | Path, write: Optional[Callable[[Path, str], str]] = None) -> list[dict[str, Any]]:
    """Write a trace per flagged window (up to ``MAX_TRACES_PER_PROPERTY`` per property and run); say why for the rest.

    Violations inside a window already written share its trace, and agreement
    violations between ranks whose states had already split are consequences of
    the one that split them, whose window is written.
    """
    from ..traces.replay import replay

    out: list[dict[str, Any]] = []
    folder = Path(directory)
    for s in report.sessions:
        desync = [f for f in report.findings if f.session == s.index and f.category == DESYNC]
        for f in desync[:1]:  # the earliest: the findings after it are its consequences
            out.append({"property": f.property, "pass": f.pass_number, "path": None,
                        "why": "a desync (ranks that logged nothing, or rows of different passes or of another "
                               "delayer paired) has no trace: replay runs every rank's passes in step through one "
                               "gather, and this build's runtime refuses such a collective before any decision; "
                               "the findings of later passes compare different collectives"})
        flagged = [f for f in report.findings if f.session == s.index and f.property in replayable(s.config.policy)]
        if not flagged:
            continue
        if not s.complete:
            for f in flagged[:1]:
                out.append({"property": f.property, "pass": f.pass_number, "path": None,
                            "why": f"a trace needs every rank's log: {len(s.logs)} of {s.config.world_size} logged"})
            continue
        covered: list[tuple[str, int, int]] = []
        written: dict[str, int] = {}
        over_cap: dict[str, set[int]] = {}  # property -> first passes of the windows not written
        for f in flagged:
            first = f.first_pass if f.first_pass is not None else f.pass_number
            if any(p == f.property and a <= first <= b for p, a, b in covered):
                continue  # inside a window already written
            maps = None
            if f.category == "agreement":
                maps = report.window(s, max(1, first - MAX_WINDOW), f.pass_number)  # type: ignore[attr-defined]
                if _first_split(s, maps, f):
                    continue  # the ranks were already apart: the window of the pass that split them says it
            if written.get(f.property, 0) >= MAX_TRACES_PER_PROPERTY:
                over_cap.setdefault(f.property, set()).add(first)
                continue
            if maps is None:  # a bounded window: the passes a trace may start from, up to the violation
                maps = report.window(s, max(1, first - MAX_WINDOW), f.pass_number)  # type: ignore[attr-defined]
            start, why = choose_window(s, maps, first, f.pass_number)
            entry: dict[str, Any] = {"property": f.property, "pass": f.pass_number, "path": None}
            if start is None:
                out.append({**entry, "why": why})
                continue
            trace = build_trace(s, maps, start, f.pass_number, f)
            validate_trace(trace)
            ok, lines = replay(trace)
            entry["passes"] = [start, f.pass_number]
            if not ok:
                out.append({**entry, "why": "replay does not reproduce it: " + lines[-1]})
                continue
            path = folder / f"{s.config.profile}-{f.property}-run{s.index}-pass{start}-{f.pass_number}.json"
            path = Path((write or _write)(path, json.dumps(trace, indent=1) + "\n"))
            covered.append((f.property, start, f.pass_number))
            written[f.property] = written.get(f.property, 0) + 1
            out.append({**entry, "path": str(path), "reproduced": lines[-1]})
        for prop, firsts in over_cap.items():
            out.append({"property": prop, "pass": None, "path": None,
                        "why": f"{len(firsts)} more window(s) of run {s.index} not written: at most {MAX_TRACES_PER_PROPERTY} per property and run"})
    return out
