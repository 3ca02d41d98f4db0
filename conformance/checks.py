"""Holding decision logs against the spec: conformance pass by pass, agreement across ranks, invariants over the run.

* **Conformance.** Every logged pass is re-fired through the ``transitions``
  machine (``fsm.DelayerMachine``, restored to the logged state before; the
  view from ``spec.view.gathered_view``, the local readings from
  ``fsm.local_for``), never through the compiled step the runtime uses, so the
  check is an independent path. A different decision or next state is a
  divergence; so is a rank's own row that the spec's ``local_row`` would not
  have sent (its force or timeout flag), a state before a pass that the
  previous pass did not leave, and rows carrying an error or a foreign
  fingerprint on a pass that succeeded.
* **Agreement.** Passes logged by several ranks of one run: any rank whose
  decision or next state differs from another's (``agreement``, or
  ``agreement-equal-args`` when every rank passed the same
  ``max_running_requests``), and ranks that logged different gathered rows.
* **Invariants**, named as ``spec.invariants``: ``bounded-delay``,
  ``mixed-bounded-delay``, ``force-allow``, ``none-allows``,
  ``wait-accounting`` (count and seconds, from the logged clocks) per rank,
  ``joint-progress`` across ranks.

Gaps (passes missing from a log) are reported and never guessed over: a delay
run or a wait cut by a gap is not judged, and cross-rank checks use only the
passes every compared rank logged.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ..fsm import INITIAL_STATE, DelayerMachine, Decision, State, finalize, local_for
from ..runtime.decision_log import build_spec_hash
from ..spec.config import Config
from ..spec.inputs import PassInput
from ..spec.invariants import BY_ID, REFUTED
from ..spec.ops import PY
from ..spec.view import F_ERROR, F_FINGERPRINT, ROW_LEN, gathered_view, local_row
from .logread import LogError, PassRec, RankLog

CONFORMANCE, AGREEMENT, INVARIANT = "conformance", "agreement", "invariant"
# Findings kept per property (all are counted).
KEEP_PER_PROPERTY = 200


@dataclass
class Finding:
    category: str  # conformance | agreement | invariant
    property: str  # a catalogue id, or what diverged (decision, next-state, row, continuity, rows-differ, no-transition)
    session: int
    pass_number: int
    ranks: list[int]
    message: str
    where: list[str]
    first_pass: Optional[int] = None  # the earliest pass the violation involves (a delay run's first pass)
    known_defect: bool = False  # the catalogue expects this profile to refute the property

    def as_dict(self) -> dict[str, Any]:
        return {
            "category": self.category, "property": self.property, "session": self.session,
            "pass": self.pass_number, "first_pass": self.first_pass if self.first_pass is not None else self.pass_number,
            "ranks": self.ranks, "message": self.message, "where": self.where, "known_defect": self.known_defect,
        }


@dataclass
class LogStats:
    """What the summary reads of one rank's log, gathered in the same loop as the checks."""

    passes: int = 0
    first: Optional[int] = None
    last: Optional[int] = None
    gaps: list[tuple[int, int]] = field(default_factory=list)
    failed: Counter = field(default_factory=Counter)
    sets: int = 0
    reasons: Counter = field(default_factory=Counter)
    delay_runs: Counter = field(default_factory=Counter)  # complete runs: length -> count
    cut_runs: int = 0  # runs cut by a gap or by the log's start, not judged
    open_run: int = 0  # a run still going when the log ends
    waits: list[float] = field(default_factory=list)  # wait_seconds of releases after >= 1 delay
    mixed: int = 0
    mixed_waits_ended: Counter = field(default_factory=Counter)  # waits begun on a mixed pass: how they ended


@dataclass
class Session:
    """The logs of one run of one gather group (one configuration), in the group's rank order."""

    index: int
    config: Config
    spec_hash: str
    logs: list[RankLog]

    @property
    def ranks(self) -> list[int]:
        return [log.rank for log in self.logs]

    @property
    def complete(self) -> bool:
        """Every rank of the gather logged (needed for joint-progress and for traces)."""
        return len(self.logs) == self.config.world_size


@dataclass
class Report:
    sessions: list[Session]
    findings: list[Finding] = field(default_factory=list)
    counts: Counter = field(default_factory=Counter)  # (category, property) -> findings, kept or not
    stats: dict[tuple[int, int], LogStats] = field(default_factory=dict)  # (session, rank) -> stats
    checked: Counter = field(default_factory=Counter)  # what was checked how often
    session_stats: dict[int, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def add(self, f: Finding) -> None:
        key = (f.category, f.property)
        self.counts[key] += 1
        if self.counts[key] <= KEEP_PER_PROPERTY:
            self.findings.append(f)

    @property
    def violations(self) -> int:
        return sum(self.counts.values())


# ----- sessions ------------------------------------------------------------------------------


def _describe(log: RankLog) -> str:
    return f"{log.files[0]} (profile {log.profile}, fingerprint {log.fingerprint:#018x}, spec {log.spec_hash})"


def build_sessions(logs: list[RankLog], own_profile: bool) -> tuple[list[Session], list[str]]:
    """Group the logs into runs of one gather group; ``LogError`` when they cannot be checked together.

    Without ``own_profile`` every log must come from this build's spec and all from
    one configuration. With it, each log is checked against this build's
    definition of the profile it recorded, and logs are compared across ranks only
    within one configuration and spec. Either way this build must rebuild each
    logged configuration exactly (its fingerprint), else nothing it says is sound.
    """
    notes: list[str] = []
    build = build_spec_hash()
    for log in logs:
        recomputed = log.config.fingerprint()
        if recomputed != log.fingerprint:
            raise LogError(
                f"{log.files[0]}: its configuration has fingerprint {recomputed:#018x} in this build but was logged "
                f"with {log.fingerprint:#018x}: this build does not rebuild the logged configuration exactly; "
                "check the log with the build that wrote it"
            )
    foreign = [log for log in logs if log.spec_hash != build]
    if foreign and not own_profile:
        shown = "; ".join(_describe(log) for log in foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise LogError(
            f"logged under a different spec than this build's ({build}): {shown}. Re-run with --own-profile to check "
            "each log against this build's definition of the profile it recorded (a divergence may then come from "
            "the spec's changes between the two builds)"
        )
    if foreign:
        notes.append(f"{len(foreign)} log(s) were written under another spec ({', '.join(sorted({g.spec_hash for g in foreign}))}); "
                     f"checked against this build's ({build}) definition of their recorded profiles")
    groups: dict[tuple, list[RankLog]] = {}
    for log in logs:
        key = (log.fingerprint, log.spec_hash, tuple(log.header["group_ranks"] or ()))
        groups.setdefault(key, []).append(log)
    if len(groups) > 1 and not own_profile:
        shown = "; ".join(_describe(g[0]) + f" and {len(g) - 1} more" * (len(g) > 1) for g in groups.values())
        raise LogError(
            f"the logs come from {len(groups)} different configurations or gather groups: {shown}. Re-run with "
            "--own-profile to check each log against its own recorded profile (ranks are then compared only "
            "within one configuration)"
        )
    sessions: list[Session] = []
    for group in groups.values():
        by_rank: dict[int, list[RankLog]] = {}
        for log in group:
            by_rank.setdefault(log.rank, []).append(log)
        counts = {rank: len(runs) for rank, runs in by_rank.items()}
        if len(set(counts.values())) > 1:
            shown = ", ".join(f"rank {r}: {n}" for r, n in sorted(counts.items()))
            raise LogError(
                f"the ranks' logs hold different numbers of runs ({shown}; a run starts each time a delayer is "
                "built, and a restarted scheduler keeps the older run as a rotated file): give the files of one run"
            )
        for i in range(next(iter(counts.values()))):
            members = [sorted(runs, key=lambda g: g.started)[i] for runs in by_rank.values()]
            members.sort(key=lambda g: (g.group_rank if g.group_rank is not None else g.rank, g.rank))
            places = [g.group_rank for g in members if g.group_rank is not None]
            if len(places) != len(set(places)):
                raise LogError("two logs of one run claim the same place in the gather: "
                               + ", ".join(f"{g.files[0]} (group rank {g.group_rank})" for g in members))
            sessions.append(Session(len(sessions), members[0].config, members[0].spec_hash, members))
    return sessions, notes


# ----- one rank -------------------------------------------------------------------------------


def _fields_differ(got: Decision, want: Decision) -> str:
    parts = [f"{name} {getattr(got, name)!r} (spec: {getattr(want, name)!r})"
             for name in Decision._fields[1:] if getattr(got, name) != getattr(want, name)]
    return ", ".join(parts)


def _state_differs(got: State, want: State) -> str:
    return ", ".join(f"{name} {getattr(got, name)!r} (spec: {getattr(want, name)!r})"
                     for name in State._fields if getattr(got, name) != getattr(want, name))


def _known(profile: str, prop: str) -> bool:
    inv = BY_ID.get(prop)
    return inv is not None and inv.expected.get(profile) == REFUTED


class _RankChecker:
    """Walks one rank's passes once: conformance, per-rank invariants and the summary's counts."""

    def __init__(self, report: Report, session: Session, log: RankLog, machine: DelayerMachine) -> None:
        self.report, self.session, self.log, self.machine = report, session, log, machine
        self.c = session.config
        self.stats = report.stats[(session.index, log.rank)] = LogStats()
        self.bound = max(self.c.max_delay_passes - 1, 0)

    def finding(self, category: str, prop: str, rec: PassRec, message: str, first: Optional[int] = None) -> Finding:
        f = Finding(category, prop, self.session.index, rec.number, [self.log.rank],
                    f"rank {self.log.rank} pass {rec.number}: {message}", [self.log.where(rec.fi, rec.line)], first,
                    _known(self.c.profile, prop))
        self.report.add(f)
        return f

    def run(self) -> None:
        log, c, st, machine, report = self.log, self.c, self.stats, self.machine, self.report
        fp, world, gr, bound = log.fingerprint, c.world_size, log.group_rank, self.bound
        flat_len = world * ROW_LEN
        sets = _sets_by_pass(log)
        st.failed.update(f.error for f in log.fails)
        st.sets = len(log.sets)
        passes = log.passes
        st.passes = len(passes)
        if passes:
            st.first, st.last = passes[0].number, passes[-1].number
        prev: Optional[PassRec] = None
        run = mixed_run = 0  # consecutive delays so far; of them, consecutive mixed ones
        run_first: Optional[PassRec] = None
        run_known = bool(passes) and passes[0].number == 1  # the run's start is in the log
        long_run: Optional[Finding] = None
        restore, negotiate = machine.restore, machine.negotiate
        for rec in passes:
            number, now, tu, mrr, flat, before, dec = rec[:7]
            # -- continuity: the state this pass starts from is what the previous one left
            if prev is not None and prev.number + 1 == number:
                want_before = _apply_sets(finalize(prev.decision.next_state), sets.get(prev.number))
                if before != want_before:
                    self.finding(CONFORMANCE, "continuity", rec, "starts from a state the previous pass did not "
                                 f"leave: {_state_differs(before, want_before)}")
            elif prev is None and number == 1:
                want_before = _apply_sets(INITIAL_STATE, sets.get(0))
                if before != want_before:
                    self.finding(CONFORMANCE, "continuity", rec, f"the first pass does not start from a fresh delayer's "
                                 f"state: {_state_differs(before, want_before)}")
            else:
                if prev is not None:
                    st.gaps.append((prev.number + 1, number - 1))
                if run:
                    st.cut_runs += 1
                run, mixed_run, run_first, run_known, long_run = 0, 0, None, False, None
            prev = rec
            # -- the rows: a successful pass carries no error and one fingerprint
            rows = [flat[i:i + ROW_LEN] for i in range(0, flat_len, ROW_LEN)]
            if flat[F_FINGERPRINT::ROW_LEN].count(fp) != world or any(flat[F_ERROR::ROW_LEN]):
                self.finding(CONFORMANCE, "row", rec, "the pass succeeded on rows that carry an input error or "
                             "another configuration's fingerprint (the runtime must have refused it)")
            view = gathered_view(PY, c, rows)
            # -- re-fire through the transitions machine
            try:
                local = local_for(before, now, mrr)
                if gr is not None:
                    own = rows[gr]
                    want_row = local_row(PY, c, PassInput(bool(own[0]), tu, own[2], own[3], mrr, own[4]), local)
                    if own[:7] != want_row:
                        self.finding(CONFORMANCE, "row", rec, f"this rank sent {own[:7]} but the spec's local_row gives "
                                     f"{want_row} for its logged readings (token_usage {tu!r}, clock {now!r}, mrr {mrr})")
                restore(before)
                want = negotiate(view, local)
            except (AssertionError, ValueError) as exc:
                self.finding(CONFORMANCE, "no-transition", rec, f"the spec has no transition for this pass: {exc}")
                want = None
            if want is not None and want != dec:
                if want[1:] != dec[1:]:
                    self.finding(CONFORMANCE, "decision", rec, f"logged decision differs from the spec's: {_fields_differ(dec, want)}")
                else:
                    self.finding(CONFORMANCE, "next-state", rec, f"logged next state differs from the spec's: "
                                 f"{_state_differs(dec.next_state, want.next_state)}")
            # -- invariants and counts
            allow = dec[2]
            mixed = dec[1] == "mixed"
            st.reasons[dec[3]] += 1
            st.mixed += mixed
            if view.num_force > 0 and not (allow and dec[3] == "token_watermark"):
                self.finding(INVARIANT, "force-allow", rec, f"{view.num_force} counted rank(s) are prefillable below the "
                             f"token watermark, yet the pass decides allow={allow} reason={dec[3]!r}")
            if view.num_prefillable == 0 and not allow:
                self.finding(INVARIANT, "none-allows", rec, "no counted rank is prefillable, yet the pass delays")
            if not allow:
                run += 1
                mixed_run = mixed_run + 1 if mixed else 0
                if run == 1:
                    run_first = rec
                if run == bound + 1:
                    start = run_first.number if run_first is not None else number
                    long_run = self.finding(INVARIANT, "bounded-delay", rec, f"delays {run}+ consecutive passes "
                                            f"(from pass {start}), more than max(max_delay_passes - 1, 0) = {bound}", start)
                elif long_run is not None:
                    long_run.message = (f"rank {log.rank} pass {long_run.pass_number}: delays {run} consecutive passes "
                                        f"(passes {long_run.first_pass}..{number}), more than max(max_delay_passes - 1, 0) = {bound}")
                if mixed_run == bound + 1:
                    self.finding(INVARIANT, "mixed-bounded-delay", rec, f"delays {mixed_run} consecutive mixed passes "
                                 f"(from pass {number - mixed_run + 1}), more than {bound}", number - mixed_run + 1)
                continue
            # a release: it reports the wait it ends
            if run_known:
                if run:
                    st.delay_runs[run] += 1
                want_seconds = now - run_first.now if run and run_first is not None else 0.0
                if dec[6] != run or dec[7] != want_seconds:
                    self.finding(INVARIANT, "wait-accounting", rec, f"releases after {run} consecutive delays"
                                 + (f" (since pass {run_first.number}, clock {run_first.now!r})" if run and run_first else "")
                                 + f" but reports wait_forward_passes={dec[6]} wait_seconds={dec[7]!r} "
                                 f"(expected {run} and {want_seconds!r})", run_first.number if run and run_first else None)
            elif run:
                st.cut_runs += 1
            if dec[6] > 0:
                st.waits.append(dec[7])
            if run and run_first is not None and run_first.decision[1] == "mixed":
                st.mixed_waits_ended[dec[3]] += 1
            run, mixed_run, run_first, run_known, long_run = 0, 0, None, True, None
        if run:
            st.open_run = run
        report.checked["conformance"] += len(passes)


def _sets_by_pass(log: RankLog) -> dict[int, list[bool]]:
    out: dict[int, list[bool]] = {}
    for s in log.sets:
        out.setdefault(s.after_pass, []).append(s.skip_first_armed)
    return out


def _apply_sets(state: State, values: Optional[list[bool]]) -> State:
    return state if not values else state._replace(skip_first_armed=values[-1])


# ----- across ranks --------------------------------------------------------------------------


def _agreement_key(rec: PassRec) -> tuple:
    d = rec.decision
    n = d[0]
    return (d[2], d[3], d[6], n[0], n[1], n[3])


def shared_state(rec: PassRec) -> tuple:
    """The part of a rank's state before a pass that ranks in step share (``wait_start`` is read on each rank's own clock)."""
    b = rec.before
    return (b[0], b[1], b[3])


def _show_key(key: tuple) -> str:
    allow, reason, wfp, control, count, skip = key
    return f"allow={allow} reason={reason!r} wait_forward_passes={wfp} -> {control}/{count}/skip={skip}"


def _compare(report: Report, s: Session, number: int, present: list[tuple[int, PassRec]],
             split_since: Optional[int]) -> tuple[bool, Optional[int]]:
    """One pass across the ranks that logged it: equal rows, equal decisions. Returns (agree, split_since)."""
    logs = s.logs
    i0, first = present[0]
    if any(r.rows != first.rows for _, r in present[1:]):
        ranks = [logs[i].rank for i, r in present if r.rows != first.rows]
        report.add(Finding(CONFORMANCE, "rows-differ", s.index, number, [logs[i0].rank] + ranks,
                           f"pass {number}: ranks {', '.join(map(str, ranks))} logged other gathered rows than rank "
                           f"{logs[i0].rank} (an all-gather gives every rank the same rows)",
                           [logs[i].where(r.fi, r.line) for i, r in present]))
    keys = [_agreement_key(r) for _, r in present]
    same_state = all(shared_state(r) == shared_state(first) for _, r in present)
    if all(k == keys[0] for k in keys):
        return True, (None if same_state else split_since)
    if same_state:
        split_since = None
    elif split_since is None:
        split_since = number
    equal_args = all(r.mrr == first.mrr for _, r in present)
    prop = "agreement-equal-args" if equal_args else "agreement"
    groups: dict[tuple, list[int]] = {}
    for (i, _), k in zip(present, keys):
        groups.setdefault(k, []).append(logs[i].rank)
    text = "; ".join(f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: {_show_key(k)}" for k, rs in groups.items())
    why = "from the same state and gathered rows" if same_state else f"(their states differ, split since pass {split_since})"
    args = "equal arguments, only the clocks differ" if equal_args else "different max_running_requests"
    report.add(Finding(AGREEMENT, prop, s.index, number, [logs[i].rank for i, _ in present],
                       f"pass {number}: ranks decide differently {why}, {args}: {text}",
                       [logs[i].where(r.fi, r.line) for i, r in present], None, _known(s.config.profile, prop)))
    return False, split_since


def check_session(report: Report, s: Session) -> None:
    """Agreement, equal gathered rows and joint-progress over the passes the ranks logged in common."""
    logs = s.logs
    maps = [{r.number: r for r in log.passes} for log in logs]
    numbers = sorted(set().union(*maps)) if maps else []
    window = max(s.config.max_delay_passes, 1)
    profile = s.config.profile
    stats = report.session_stats[s.index] = {
        "passes": len(numbers), "compared": 0, "mixed": 0, "mixed_resolved": Counter(), "disagreements": 0,
    }
    progress_run = 0
    progress_start = None
    prev_number = None
    split_since: Optional[int] = None
    for number in numbers:
        present = [(i, m[number]) for i, m in enumerate(maps) if number in m]
        first = present[0][1]
        agree = True
        if len(present) > 1:
            stats["compared"] += 1
            agree, split_since = _compare(report, s, number, present, split_since)
        if first.decision[1] == "mixed":
            stats["mixed"] += 1
            stats["mixed_resolved"]["split" if not agree else first.decision[3]] += 1
        stats["disagreements"] += not agree
        # joint-progress: every rank of the gather, on consecutive passes
        if prev_number is not None and number != prev_number + 1:
            progress_run, progress_start = 0, None
        prev_number = number
        if len(present) < s.config.world_size or all(r.decision[2] for _, r in present):
            progress_run, progress_start = 0, None
            continue
        progress_run += 1
        if progress_run == 1:
            progress_start = number
        if progress_run == window:
            delaying = sorted(logs[i].rank for i, r in present if not r.decision[2])
            report.add(Finding(INVARIANT, "joint-progress", s.index, number, s.ranks,
                               f"passes {progress_start}..{number} ({window} = max(max_delay_passes, 1) in a row) "
                               f"each have a delaying rank (on pass {number}: rank {', '.join(map(str, delaying))}): "
                               "the group never prefills together", [], progress_start, _known(profile, "joint-progress")))
    report.checked["agreement"] += stats["compared"]


def check(sessions: list[Session], notes: Iterable[str] = ()) -> Report:
    """Every check on every session."""
    report = Report(sessions, notes=list(notes))
    machines: dict[int, DelayerMachine] = {}
    for s in sessions:
        fp = s.logs[0].fingerprint
        machine = machines.get(fp)
        if machine is None:
            machine = machines[fp] = DelayerMachine(s.config)
        for log in s.logs:
            _RankChecker(report, s, log, machine).run()
        check_session(report, s)
    report.findings.sort(key=lambda f: (f.session, f.pass_number, f.category, f.property))
    return report
