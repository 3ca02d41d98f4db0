"""``check-log --traces DIR``: each flagged window of a log as a trace that ``prefill-delayer replay`` reproduces.

A trace (``traces.format``) starts from freshly built delayers, so a window must
start at a pass from which fresh delayers reach the logged states. The window
chosen for a violation is the *latest* pass at or before the violation's first
pass (a delay run's first delay; the disagreeing pass) at which every rank's
logged state is what a fresh delayer has after finalize: ``idle``,
``delayed_count`` 0, no wait, and the same ``skip_first_armed`` on every rank.
If that flag is still armed the trace starts right there. If it was consumed,
the trace begins with one synthetic pass that consumes it on every rank and
decides nothing else (every rank prefillable, the slot trigger holding with
``max_running_requests`` 0 and ``max_prefill_bs`` 1, no running batch, no
queue, token usage 1.0: an ``all`` pass that allows with ``no_wait``), after
which fresh delayers are exactly in the logged state. Between that pass and the
violation every rank must have logged every pass, and nobody may have set the
skip flag from outside; failed passes change no state and are left out.

Each trace is replayed here, through the runtime, before it is written: only a
window whose violation ``replay`` reproduces is written, and the reason is
given for any other. Only properties with a replayable check
(``traces.violations``) have traces; a conformance divergence cannot have one,
since replay runs this build's runtime, which follows the spec.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from ..traces.format import CONFIG_KEYS, validate_trace
from ..traces.violations import CHECKS
from ..spec.table import IDLE
from ..spec.view import ROW_LEN
from .checks import Finding, Report, Session, shared_state
from .logread import PassRec

REPLAYABLE = tuple(CHECKS)  # bounded-delay, agreement, agreement-equal-args, joint-progress
MAX_TRACES_PER_PROPERTY = 20
MAX_WINDOW = 5000  # passes; a longer window would make a trace nobody reads

# The synthetic first pass's per-rank inputs (see the module docstring).
SKIP_CONSUMER = {"prefillable": True, "token_usage": 1.0, "running_batch": 0, "max_prefill_bs": 1,
                 "waiting_queue_len": 0, "max_running_requests": 0}
SKIP_CONSUMER_EXPECT = {"allow": True, "reason": "no_wait", "wait_forward_passes": 0}


def _fresh(recs: list[PassRec]) -> bool:
    """Every rank starts this pass as a fresh delayer would (up to the one-shot skip flag, equal on all)."""
    states = [r.before for r in recs]
    return all(s.control == IDLE and s.delayed_count == 0 and s.wait_start is None for s in states) and len(
        {s.skip_first_armed for s in states}) == 1


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
        if _fresh([m[k] for m in maps]):
            inside = sorted(p for p in sets if k <= p < last)
            if inside:
                return None, f"the skip flag was set from outside after pass {inside[0]}, inside the window"
            return k, ""
        k -= 1


def build_trace(s: Session, maps: list[dict[int, PassRec]], start: int, last: int, f: Finding) -> dict[str, Any]:
    """The trace of log passes ``start..last`` (rank order: the gather's)."""
    c = s.config
    world = c.world_size
    cfg = c.as_dict()
    synthetic = not maps[0][start].before.skip_first_armed
    passes: list[dict[str, Any]] = []
    if synthetic:
        passes.append({
            "ranks": [{**SKIP_CONSUMER, "now_s": m[start].now} for m in maps],
            "expect": [dict(SKIP_CONSUMER_EXPECT) for _ in maps],
            "note": "synthetic: consumes the one-shot skip, as the logged states at the window's start have it",
        })
    for k in range(start, last + 1):
        ranks, expect = [], []
        for place, m in enumerate(maps):
            r = m[k]
            own = r.rows[place * ROW_LEN:(place + 1) * ROW_LEN]
            ranks.append({"prefillable": bool(own[0]), "token_usage": r.token_usage, "running_batch": own[2],
                          "max_prefill_bs": own[3], "waiting_queue_len": own[4], "max_running_requests": r.mrr,
                          "now_s": r.now})
            d = r.decision
            expect.append({"allow": d.output_allow, "reason": d.output_reason, "wait_forward_passes": d.wait_forward_passes})
        passes.append({"ranks": ranks, "expect": expect, "log_pass": k})
    assert len(passes[-1]["ranks"]) == world
    prop = f.property
    offset = 1 if synthetic else 0
    return {
        "property": prop,
        "profile": c.profile,
        "config": {k: cfg[k] for k in CONFIG_KEYS},
        "passes": passes,
        "violation": (f"from a decision log: {f.message} (trace pass {offset} is log pass {start}"
                      + ("; trace pass 0 is synthetic: it consumes the one-shot skip flag)" if synthetic else ")")),
        "source": {"logs": [log.files[0] for log in s.logs], "log_passes": [start, last], "synthetic_first_pass": synthetic},
    }


def _first_split(s: Session, maps: list[dict[int, PassRec]], f: Finding) -> bool:
    """An agreement finding whose ranks did not all start the pass from the same state (a consequence, not a cause)."""
    recs = [m[f.pass_number] for m in maps if f.pass_number in m]
    return any(shared_state(r) != shared_state(recs[0]) for r in recs)


def export_traces(report: Report, directory: str | Path) -> list[dict[str, Any]]:
    """Write a trace per flagged window (up to ``MAX_TRACES_PER_PROPERTY`` per property and run); say why for the rest.

    Violations inside a window already written share its trace, and agreement
    violations between ranks whose states had already split are consequences of
    the one that split them, whose window is written.
    """
    from ..traces.replay import replay

    out: list[dict[str, Any]] = []
    folder = Path(directory)
    for s in report.sessions:
        flagged = [f for f in report.findings if f.session == s.index and f.property in REPLAYABLE]
        if not flagged:
            continue
        if not s.complete:
            for f in flagged[:1]:
                out.append({"property": f.property, "pass": f.pass_number, "path": None,
                            "why": f"a trace needs every rank's log: {len(s.logs)} of {s.config.world_size} logged"})
            continue
        maps = [{r.number: r for r in log.passes} for log in s.logs]
        covered: list[tuple[str, int, int]] = []
        written: dict[str, int] = {}
        over_cap: dict[str, set[int]] = {}  # property -> first passes of the windows not written
        for f in flagged:
            first = f.first_pass if f.first_pass is not None else f.pass_number
            if any(p == f.property and a <= first <= b for p, a, b in covered):
                continue  # inside a window already written
            if f.property.startswith("agreement") and _first_split(s, maps, f):
                continue  # the ranks were already apart: the window of the pass that split them says it
            if written.get(f.property, 0) >= MAX_TRACES_PER_PROPERTY:
                over_cap.setdefault(f.property, set()).add(first)
                continue
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
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{s.config.profile}-{f.property}-run{s.index}-pass{start}-{f.pass_number}.json"
            path.write_text(json.dumps(trace, indent=1) + "\n")
            covered.append((f.property, start, f.pass_number))
            written[f.property] = written.get(f.property, 0) + 1
            out.append({**entry, "path": str(path), "reproduced": lines[-1]})
        for prop, firsts in over_cap.items():
            out.append({"property": prop, "pass": None, "path": None,
                        "why": f"{len(firsts)} more window(s) of run {s.index} not written: at most {MAX_TRACES_PER_PROPERTY} per property and run"})
    return out
