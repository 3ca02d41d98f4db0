"""check-log's summary: per rank, per reason, delay runs, waits, mixed passes; as text and as JSON.

What operators ask when a scheduler stalls (which rank delayed, for how long,
and why) is answered from the same counts the checks gathered.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Optional

from ..runtime.decision_log import build_spec_hash
from ..spec.fields import reason_name
from ..spec.monitors import Agreement, GroupRunBound, RunReport, is_monitor
from .checks import AGREEMENT, CONFORMANCE, INVARIANT, KEEP_PER_PROPERTY, Report
from .desync import CHECKS as DESYNC_CHECKS
from .desync import unlogged_places

# Rows of the verdict table that hold for every policy: (category, property, what it covers).
CONFORMANCE_CHECKS = (
    (CONFORMANCE, "decision", "logged decision = the transitions machine's"),
    (CONFORMANCE, "next-state", "logged next state = the machine's"),
    (CONFORMANCE, "row", "each rank's own row = the spec's local_row of its readings"),
    (CONFORMANCE, "continuity", "each pass starts where the previous one left"),
    (CONFORMANCE, "no-transition", "some transition holds"),
    (CONFORMANCE, "rows-differ", "every rank logged the same gathered rows"),
)
SHOWN_PER_PROPERTY = 10


def _policies(report: Report) -> list:
    return list({s.config.policy.name: s.config.policy for s in report.sessions}.values())


def checks_of(report: Report) -> list[tuple[str, str, str, str]]:
    """The verdict table's rows: the conformance checks, then each policy's agreement and monitors (category, property, what, statement)."""
    rows = [(c, p, w, "") for c, p, w in CONFORMANCE_CHECKS + DESYNC_CHECKS]
    seen = set()
    policies = _policies(report)
    for category, wanted in ((AGREEMENT, True), (INVARIANT, False)):
        for pol in policies:
            for inv in pol.invariants:
                if not is_monitor(inv.check) or isinstance(inv.check, Agreement) != wanted or inv.id in seen:
                    continue
                seen.add(inv.id)
                if isinstance(inv.check, Agreement):
                    what = "ranks decide alike (equal arguments)" if inv.check.equal_args else (
                        f"ranks decide alike (different {', '.join(pol.local_inputs)})")
                elif isinstance(inv.check, RunReport):
                    what = "count and seconds"
                else:
                    what = ""
                rows.append((category, inv.id, what, inv.statement))
    return rows


def reason_order(report: Report) -> list[str]:
    """Every policy's reasons, in the order the summary lists them."""
    out: list[str] = []
    for pol in _policies(report):
        out += [r for r in (pol.log.reason_order or pol.reasons) if r not in out]
    return out


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def _merged(report: Report, attr: str) -> Counter:
    total: Counter = Counter()
    for st in report.stats.values():
        total.update(getattr(st, attr))
    return total


def _ranges(gaps: list[tuple[int, int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in gaps)


def missing_passes(gaps: list[tuple[int, int]], failed: list[int]) -> list[tuple[int, int]]:
    """The gaps in a rank's pass numbers that no fail line explains. The runtime logs every pass, in order, until
    its log stops, and a failed pass as a fail line; so a pass missing inside a log is a line lost or removed, or a
    rotated file deleted: passes nothing was checked on."""
    fails = sorted(set(failed))
    out: list[tuple[int, int]] = []
    for a, b in gaps:
        start = a
        for n in fails:
            if start <= n <= b:
                if n > start:
                    out.append((start, n - 1))
                start = n + 1
        if start <= b:
            out.append((start, b))
    return out


def _missing_notes(data: dict[str, Any]) -> list[str]:
    """One note per set of missing passes, naming every rank that lacks them (a lost stretch is often every rank's)."""
    ranks: dict[tuple, list[int]] = {}
    for sd in data["sessions"]:
        for r in sd["ranks"]:
            if r["missing_passes"]:
                ranks.setdefault((sd["session"], tuple(map(tuple, r["missing_passes"]))), []).append(r["rank"])
    out = []
    for (_, missing), rs in ranks.items():
        n = sum(b - a + 1 for a, b in missing)
        out.append(f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: pass{'es' if n > 1 else ''} "
                   f"{_ranges(list(missing))} ({n} in all{', each' if len(rs) > 1 else ''}) missing from the log, with no "
                   "fail line for them: lines lost or removed, or a rotated file deleted (the runtime logs every pass in "
                   "order until its log stops); nothing was checked on them, and no hold run across them is judged")
    return out


def _group_ids(report: Report) -> list[str]:
    """The policies' group invariants (a run bound over every rank of the gather)."""
    return list(dict.fromkeys(inv.id for pol in _policies(report) for inv in pol.invariants
                              if isinstance(inv.check, GroupRunBound)))


def left_to_merge(report: Report, s: Any) -> Optional[str]:
    """On one node's part of a run (``check-log --digest``) whose gather has ranks without a log here: what the
    node's checks leave to ``--merge``, said plainly; None for a whole run."""
    if not report.node or s.complete:
        return None
    missing = unlogged_places(s)
    world = s.config.world_size
    who = (f"place{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of the gather" if missing
           else f"{world - len(s.logs)} of its {world} ranks")
    across = ", ".join(["agreement", "same-pass", "rows-differ", *_group_ids(report)])
    return (f"this node's part of the run (--digest): {who} have no log here; whether they logged (every-rank-logged), "
            f"and the checks across ranks with them ({across}), are left to check-log --merge over every node's digest")


def verdicts(report: Report) -> list[dict[str, Any]]:
    """One entry per check: ok / violated (how often; a known defect of the profile?) / not checked (why) / left to
    --merge (on one node's part of a run, a check that needs ranks logged on other nodes)."""
    profiles = sorted({s.config.profile for s in report.sessions})
    profile_of = {s.index: s.config.profile for s in report.sessions}
    compared = report.checked["agreement"]
    complete = any(s.complete for s in report.sessions)
    node = report.node and not complete  # one node's part: ranks without a log here may log on other nodes
    out = []
    groups = set(_group_ids(report))
    for category, prop, what, stated in checks_of(report):
        n = report.counts[(category, prop)]
        known = any(f.known_defect for f in report.findings if f.property == prop)
        status = "violated" if n else "ok"
        why = ""
        if not n and node and prop == "every-rank-logged":
            status, why = "left to --merge", "the gather's ranks without a log here may log on other nodes"
        elif not n and (category == AGREEMENT or prop == "rows-differ") and compared == 0:
            status, why = (("left to --merge", "no pass was logged by two ranks here") if node
                           else ("not checked", "no pass was logged by two ranks"))
        elif not n and prop in groups and not complete:
            status, why = ("left to --merge" if node else "not checked"), "needs the logs of every rank of the gather"
        statement = what or stated
        # a violated check names the profiles of the runs that violated it (a folder may hold runs of several)
        found_in = sorted({profile_of[f.session] for f in report.findings if f.property == prop and f.session in profile_of})
        out.append({"category": category, "property": prop, "status": status, "violations": n, **_where_violated(report, category, prop),
                    "known_defect": known, "why": why, "statement": statement,
                    "profiles": found_in if n and found_in else profiles})
    return out


def _where_violated(report: Report, category: str, prop: str) -> dict[str, Any]:
    """Where a check's violations fall, read from the findings listed (``KEEP_PER_PROPERTY`` of each property): how
    many are listed, on how many passes, and, when each names one rank (a rank's pass rule or run bound: one finding
    per rank, so one stalled pass of 8 ranks is 8), on how many rank-passes (None when some names several ranks)."""
    listed = [f for f in report.findings if f.category == category and f.property == prop]
    one_rank = all(len(f.ranks) == 1 for f in listed)
    return {"listed": len(listed), "passes": len({(f.session, f.pass_number) for f in listed}),
            "rank_passes": len({(f.session, f.pass_number, f.ranks[0]) for f in listed}) if one_rank else None}


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "es" if noun.endswith("s") else "s")


def violated_text(v: dict[str, Any]) -> str:
    """A violated check's verdict: how often, in the unit its findings have (passes, and rank-passes when each finding
    is one rank's: 8 ranks stalled on one pass are 8 violations on 1 pass; past what the report lists, the count and
    what the listed part covers), and whether it is the profile's known defect."""
    n, listed, passes, rank_passes = v["violations"], v["listed"], v["passes"], v["rank_passes"]
    parts = [_plural(passes, "pass")] + ([_plural(rank_passes, "rank-pass")] if rank_passes is not None else [])
    notes = []
    if listed and listed >= n:
        head = f"VIOLATED on {parts[0]}"
        notes += parts[1:] + ([_plural(n, "violation")] if n != (rank_passes if rank_passes is not None else passes) else [])
    else:  # none listed, or more than the report keeps: the count, and what the listed part covers
        head = f"VIOLATED {_plural(n, 'time')}"
        if listed:
            notes.append(f"the {listed} --json lists: on {', '.join(parts)}")
    if v["known_defect"]:
        notes.append(f"a known defect of profile {', '.join(v['profiles'])}: prove refutes it")
    return head + (f" ({'; '.join(notes)})" if notes else "")


def summary_data(report: Report, empty: list[str]) -> dict[str, Any]:
    """The machine-readable report (``--json``) without the traces."""
    sessions = []
    for s in report.sessions:
        ss = report.session_stats[s.index]
        ranks = []
        for log in s.logs:
            st = report.stats[(s.index, log.rank)]
            ranks.append({
                "rank": log.rank, "group_rank": log.group_rank, "run": log.run, "files": log.files,
                "passes": st.passes, "first_pass": st.first, "last_pass": st.last, "gaps": [list(g) for g in st.gaps],
                "failed": dict(st.failed), "sets": st.sets, "reasons": {reason_name(k): v for k, v in st.reasons.items()},
                "delay_runs": {str(k): v for k, v in sorted(st.delay_runs.items())}, "delay_runs_cut": st.cut_runs,
                "delay_run_open_at_end": st.open_run, "longest_delay_run": max(st.delay_runs, default=0),
                "missing_passes": [list(g) for g in missing_passes(st.gaps, [f.number for f in log.fails])],
                "notes": log.notes,
            })
        sessions.append({
            "session": s.index, "profile": s.config.profile, "config": s.config.as_dict(),
            "fingerprint": s.logs[0].fingerprint, "spec_hash": s.spec_hash, "world_size": s.config.world_size,
            "ranks_logged": len(s.logs), "passes": ss["passes"], "passes_compared": ss["compared"],
            "mixed_passes": ss["mixed"], "mixed_resolved": {reason_name(k) if k != "split" else k: v
                                                             for k, v in ss["mixed_resolved"].items()},
            "disagreeing_passes": ss["disagreements"], "ranks": ranks, "left_to_merge": left_to_merge(report, s),
        })
    waits = _waits(report)
    return {
        "tool": "prefill-delayer check-log",
        "spec_hash": build_spec_hash(),
        "result": "violations" if report.violations else "clean",
        "violations": report.violations,
        "missing_passes": sum(b - a + 1 for sd in sessions for r in sd["ranks"] for a, b in r["missing_passes"]),
        "checked": dict(report.checked),
        "checks": verdicts(report),
        "findings": [f.as_dict() for f in report.findings],
        "findings_counts": {f"{c}/{p}": n for (c, p), n in sorted(report.counts.items())},
        "sessions": sessions,
        "decisions_by_reason": {reason_name(k): v for k, v in _merged(report, "reasons").items()},
        "delay_run_lengths": {str(k): v for k, v in sorted(_merged(report, "delay_runs").items())},
        "wait_seconds": _wait_stats(waits),
        "mixed_waits_ended": {reason_name(k): v for k, v in _merged(report, "mixed_waits_ended").items()},
        "notes": report.notes + empty,
    }


def _waits(report: Report) -> Any:
    """Every wait's seconds, ascending (the stats keep them as arrays, one per chunk)."""
    import numpy as np

    parts = [np.asarray(w, dtype=np.float64).reshape(-1) for st in report.stats.values() for w in st.waits]
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0)


def _wait_stats(waits: Any) -> dict[str, Any]:
    if not len(waits):
        return {"count": 0}
    return {"count": len(waits), "p50": float(percentile(waits, 50)), "p90": float(percentile(waits, 90)),
            "p99": float(percentile(waits, 99)), "max": float(waits[-1])}


def seconds(x: float) -> str:
    """Seconds to three significant figures, with the unit (0.627 s, 4.00 s): a wait is read at a glance, not to the
    clock's microsecond; from 100 s on, whole seconds (312 s, 1234 s), not 1.23e+03."""
    return f"{x:.0f} s" if abs(x) >= 99.95 else f"{x:#.3g} s"


def _share(n: int, total: int) -> str:
    return f"{n} ({100 * n / total:.1f}%)" if total else str(n)


def _bars(hist: Counter, width: int = 40, max_rows: int = 16) -> list[str]:
    """A text histogram; long tails are grouped so it stays short."""
    if not hist:
        return ["  (no complete delay run)"]
    lengths = sorted(hist)
    if len(lengths) > max_rows:  # group into max_rows equal buckets of lengths
        lo, hi = lengths[0], lengths[-1]
        step = math.ceil((hi - lo + 1) / max_rows)
        grouped: Counter = Counter()
        for k, v in hist.items():
            b = lo + (k - lo) // step * step
            grouped[(b, min(b + step - 1, hi))] += v
        items = [(f"{a}-{b}" if a != b else f"{a}", v) for (a, b), v in sorted(grouped.items())]
    else:
        items = [(str(k), hist[k]) for k in lengths]
    top = max(v for _, v in items)
    label = max(len(k) for k, _ in items)
    return [f"  {k:>{label}} | {'#' * max(1, round(width * v / top))} {v}" for k, v in items]


def text(report: Report, data: dict[str, Any], traces: Optional[list[dict[str, Any]]] = None) -> str:
    """The human summary check-log prints."""
    lines: list[str] = []
    build = data["spec_hash"]
    n_logs = sum(len(s.logs) for s in report.sessions)
    lines.append(f"check-log: {n_logs} rank log(s) in {len(report.sessions)} run(s), "
                 f"{report.checked['conformance']} pass records")
    for sd in data["sessions"]:
        c = sd["config"]
        same = "this build" if sd["spec_hash"] == build else f"this build is {build}"
        first = next(iter(c))  # the policy's first parameter (for SGLang's delayer: max_delay_passes)
        lines.append(f"run {sd['session']}: profile {sd['profile']}, world {sd['world_size']} "
                     f"({sd['ranks_logged']} logged), {first} {c[first]}, "
                     f"spec {sd['spec_hash']} ({same}), {sd['passes']} passes")
        if sd["left_to_merge"]:
            lines.append(f"  {sd['left_to_merge']}")
        lines.append("  passes per rank:")
        for r in sd["ranks"]:
            failed = sum(r["failed"].values())
            extra = [f"{failed} failed ({', '.join(f'{k} {v}' for k, v in r['failed'].items())})" if failed else "0 failed"]
            if r["sets"]:
                extra.append(f"skip flag set {r['sets']}x")
            extra.append(f"gaps {_ranges([tuple(g) for g in r['gaps']])}" if r["gaps"] else "no gaps")
            span = f"{r['first_pass']}..{r['last_pass']}" if r["passes"] else "-"
            lines.append(f"    rank {r['rank']}: {r['passes']} passes ({span}), " + ", ".join(extra)
                         + f"; longest delay run {r['longest_delay_run']}")
    lines.append("checks:")
    for v in data["checks"]:
        if v["status"] == "ok":
            shown = "ok"
        elif v["status"] in ("not checked", "left to --merge"):
            shown = f"{v['status']} ({v['why']})"
        else:
            shown = violated_text(v)
        lines.append(f"  {v['category']:<11} {v['property']:<21} {shown}")
    reasons = data["decisions_by_reason"]
    total = sum(reasons.values())
    order = [reason_name(r) for r in reason_order(report)]
    lines.append("decisions by reason (all ranks): " + ", ".join(
        f"{k} {_share(reasons[k], total)}" for k in order if reasons.get(k)))
    for sd in data["sessions"]:
        for r in sd["ranks"]:
            lines.append(f"    rank {r['rank']}: " + (", ".join(f"{k} {r['reasons'][k]}" for k in order if r["reasons"].get(k))
                                                     or "no pass logged"))
    lines.append("delay-run lengths (complete runs, all ranks; passes delayed -> runs):")
    lines += _bars(Counter({int(k): v for k, v in data["delay_run_lengths"].items()}))
    w = data["wait_seconds"]
    if w["count"]:
        lines.append(f"wait seconds (releases after a wait, n={w['count']}): "
                     + "  ".join(f"{q} {seconds(w[q])}" for q in ("p50", "p90", "p99", "max")))
    else:
        lines.append("wait seconds: no release after a wait")
    for sd in data["sessions"]:
        resolved = sd["mixed_resolved"]
        lines.append(f"mixed passes (some ranks prefillable, others not), run {sd['session']}: "
                     f"{_share(sd['mixed_passes'], sd['passes'])} of {sd['passes']}"
                     + (": resolved " + ", ".join(f"{k} {v}" for k, v in sorted(resolved.items(), key=lambda kv: -kv[1]))
                        if resolved else ""))
    ended = data["mixed_waits_ended"]
    if ended:
        lines.append("  waits begun on a mixed pass ended with: " + ", ".join(
            f"{k} {v}" for k, v in sorted(ended.items(), key=lambda kv: -kv[1])))
    notes = data["notes"] + [n for sd in data["sessions"] for r in sd["ranks"] for n in r["notes"]] + _missing_notes(data)
    if notes:
        lines.append("notes:")
        lines += [f"  {n}" for n in notes]
    if report.findings:
        lines.append("violations:")
        listed: Counter[str] = Counter()  # findings listed so far, by property
        for f in report.findings:
            listed[f.property] += 1
            if listed[f.property] <= SHOWN_PER_PROPERTY:
                where = f"  [{', '.join(f.where[:4])}{' ...' if len(f.where) > 4 else ''}]" if f.where else ""
                lines.append(f"  {f.property}: {f.message}{where}")
        for (cat, prop), n in sorted(report.counts.items()):
            if n > SHOWN_PER_PROPERTY:
                lines.append(f"  {prop}: ... and {n - SHOWN_PER_PROPERTY} more (--json lists up to {KEEP_PER_PROPERTY} of each property)")
    if traces is not None:
        if not traces:
            from ..traces.violations import replayable

            props = list(dict.fromkeys(p for pol in _policies(report) for p in replayable(pol)))
            lines.append(f"traces: no flagged window to write (traces are written for {', '.join(props[:-1])} and {props[-1]})")
        for t in traces:
            if t.get("path"):
                lines.append(f"trace: {t['path']} ({t['property']}, log passes {t['passes'][0]}..{t['passes'][1]}): replay reproduces it")
            elif t["pass"] is None:
                lines.append(f"traces ({t['property']}): {t['why']}")
            else:
                lines.append(f"trace not written ({t['property']}, pass {t['pass']}): {t['why']}")
    part = any(sd["left_to_merge"] for sd in data["sessions"])
    missing = data["missing_passes"]
    lines.append(f"result: {'clean' if not report.violations else f'{report.violations} violation(s)'}"
                 + (f" on the passes logged; {missing} pass(es) missing from the logs (notes)" if missing else "")
                 + (" on this node's part; the checks across nodes are check-log --merge's" if part else ""))
    return "\n".join(lines)
