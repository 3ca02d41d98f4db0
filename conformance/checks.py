"""Holding decision logs against the spec: conformance pass by pass, agreement across ranks, invariants over the run.

* **Conformance.** Every logged pass is re-fired through the ``transitions``
  machine (``fsm.DelayerMachine``, restored to the logged state before; the
  view from the policy's ``gathered_view``, the local readings from its
  ``local_for``), never through the compiled step the runtime uses, so the
  check is an independent path. A different decision or next state is a
  divergence; so is a rank's own row that the policy's ``local_row`` would not
  have sent for its logged readings, a state before a pass that the previous
  pass did not leave, and rows carrying an error or a foreign fingerprint on a
  pass that succeeded.
* **Agreement.** Passes logged by several ranks of one run: any rank whose
  decision or next state differs from another's (``agreement``, or
  ``agreement-equal-args`` when every rank passed the same local inputs), and
  ranks that logged different gathered rows.
* **Invariants**: the policy's monitors (``spec.monitors``), the same
  definitions ``prove`` and ``replay`` read: per rank the pass rules, run
  bounds and run reports (with the logged clocks); across ranks the group run
  bounds.

Gaps (passes missing from a log) are reported and never guessed over: a delay
run or a wait cut by a gap is not judged, and cross-rank checks use only the
passes every compared rank logged.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from ..fsm import DelayerMachine, Step
from ..runtime.decision_log import build_spec_hash
from ..runtime.envelope import Envelope
from ..spec.config import Config
from ..spec.monitors import Agreement, GroupRunBound, PassRule, RunBound, RunReport
from ..spec.ops import PY
from ..spec.policy import REFUTED
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


def _fields_differ(got: Any, want: Any) -> str:
    parts = [f"{name} {getattr(got, name)!r} (spec: {getattr(want, name)!r})"
             for name in type(got)._fields[1:] if getattr(got, name) != getattr(want, name)]
    return ", ".join(parts)


def _state_differs(got: Any, want: Any) -> str:
    return ", ".join(f"{name} {getattr(got, name)!r} (spec: {getattr(want, name)!r})"
                     for name in type(got)._fields if getattr(got, name) != getattr(want, name))


def _known(profile: str, prop: str, policy: Any) -> bool:
    inv = policy.invariant(prop)
    return inv is not None and inv.expected.get(profile) == REFUTED


class _Run:
    """A run monitor's progress over one rank's passes: its length, where it began, whether its start is known."""

    __slots__ = ("mon", "limit", "run", "first", "known", "finding")

    def __init__(self, mon: RunBound, limit: int) -> None:
        self.mon, self.limit = mon, limit
        self.run, self.first, self.known, self.finding = 0, None, False, None

    def reset(self, known: bool) -> None:
        self.run, self.first, self.known, self.finding = 0, None, known, None


class _RankChecker:
    """Walks one rank's passes once: conformance, per-rank invariants and the summary's counts."""

    def __init__(self, report: Report, session: Session, log: RankLog, machine: DelayerMachine, step: Step) -> None:
        self.report, self.session, self.log, self.machine, self.step = report, session, log, machine, step
        self.c = session.config
        self.policy = self.c.policy
        self.stats = report.stats[(session.index, log.rank)] = LogStats()
        self.envelope = Envelope(self.c)

    def finding(self, category: str, prop: str, rec: PassRec, message: str, first: Optional[int] = None) -> Finding:
        f = Finding(category, prop, self.session.index, rec.number, [self.log.rank],
                    f"rank {self.log.rank} pass {rec.number}: {message}", [self.log.where(rec.fi, rec.line)], first,
                    _known(self.c.profile, prop, self.policy))
        self.report.add(f)
        return f

    def run(self) -> None:
        log, c, st, machine, report, step, policy = self.log, self.c, self.stats, self.machine, self.report, self.step, self.policy
        env = self.envelope
        fp, world, gr = log.fingerprint, c.world_size, log.group_rank
        n, k = env.row_len, env.n_policy
        flat_len = world * n
        schema = policy.log
        mixed_of = schema.mixed
        rules = [inv.check for inv in policy.invariants if isinstance(inv.check, PassRule)]
        runs = [_Run(inv.check, inv.check.limit(PY, c)) for inv in policy.invariants if isinstance(inv.check, RunBound)]
        report_mon = next((inv.check for inv in policy.invariants if isinstance(inv.check, RunReport)), None)
        sets = _sets_by_pass(log)
        st.failed.update(f.error for f in log.fails)
        st.sets = len(log.sets)
        passes = log.passes
        st.passes = len(passes)
        if passes:
            st.first, st.last = passes[0].number, passes[-1].number
        prev: Optional[PassRec] = None
        hold = 0  # consecutive passes that do not allow: the summary's hold runs
        hold_first: Optional[PassRec] = None
        hold_known = bool(passes) and passes[0].number == 1  # the run's start is in the log
        for r in runs:
            r.reset(hold_known)
        restore, negotiate = machine.restore, machine.negotiate
        zeros = [0] * k
        for rec in passes:
            number, now, readings, flat, before, dec = rec[:6]
            # -- continuity: the state this pass starts from is what the previous one left
            if prev is not None and prev.number + 1 == number:
                want_before = _apply_sets(step.finalize(prev.decision.next_state), sets.get(prev.number))
                if before != want_before:
                    self.finding(CONFORMANCE, "continuity", rec, "starts from a state the previous pass did not "
                                 f"leave: {_state_differs(before, want_before)}")
            elif prev is None and number == 1:
                want_before = _apply_sets(policy.init, sets.get(0))
                if before != want_before:
                    self.finding(CONFORMANCE, "continuity", rec, f"the first pass does not start from a fresh delayer's "
                                 f"state: {_state_differs(before, want_before)}")
            else:
                if prev is not None:
                    st.gaps.append((prev.number + 1, number - 1))
                if hold:
                    st.cut_runs += 1
                hold, hold_first, hold_known = 0, None, False
                for r in runs:
                    r.reset(False)
            prev = rec
            # -- the rows: a successful pass carries no error and one fingerprint
            if flat[env.f_fingerprint::n].count(fp) != world or any(flat[env.f_error::n]):
                self.finding(CONFORMANCE, "row", rec, "the pass succeeded on rows that carry an input error or "
                             "another configuration's fingerprint (the runtime must have refused it)")
            rows = [flat[i:i + k] for i in range(0, flat_len, n)]
            view = step.view(rows)
            # -- re-fire through the transitions machine
            try:
                own = rows[gr] if gr is not None else zeros
                inp = schema.inputs_from_row(own, readings)
                local = step.local(before, now, inp)
                if gr is not None:
                    want_row = policy.local_row(PY, c, inp, local)
                    if list(own) != want_row:
                        shown = ", ".join(f"{name} {readings[key]!r}" for name, key in schema.readings)
                        self.finding(CONFORMANCE, "row", rec, f"this rank sent {list(own)} but the spec's local_row gives "
                                     f"{want_row} for its logged readings ({shown}, clock {now!r})")
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
            allow = dec.output_allow
            mixed = bool(mixed_of(view, dec)) if mixed_of is not None else False
            st.reasons[dec.output_reason] += 1
            st.mixed += mixed
            for rule in rules:
                if rule.premise(PY, c, view, dec) and not rule.claim(PY, c, view, dec):
                    self.finding(INVARIANT, rule.id, rec, rule.explain(view, dec))
            for r in runs:
                if r.mon.counts(PY, c, view, dec):
                    r.run += 1
                    if r.run == 1:
                        r.first = rec
                    start = r.first.number if r.first is not None else number
                    if r.run == r.limit + 1:
                        r.finding = self.finding(INVARIANT, r.mon.id, rec, r.mon.log_text.format(
                            run=r.run, start=start, end=number, limit=r.limit), start)
                    elif r.finding is not None and r.mon.log_text_done is not None:
                        r.finding.message = f"rank {log.rank} pass {r.finding.pass_number}: " + r.mon.log_text_done.format(
                            run=r.run, start=r.finding.first_pass, end=number, limit=r.limit)
                else:
                    r.reset(True)
            if not allow:
                hold += 1
                if hold == 1:
                    hold_first = rec
                continue
            # a release: it reports the wait it ends
            if hold_known:
                if hold:
                    st.delay_runs[hold] += 1
                if report_mon is not None:
                    want_seconds = now - hold_first.now if hold and hold_first is not None else 0.0
                    got_length, got_seconds = getattr(dec, report_mon.length), getattr(dec, report_mon.seconds)
                    if got_length != hold or got_seconds != want_seconds:
                        self.finding(INVARIANT, report_mon.id, rec, f"releases after {hold} consecutive {report_mon.noun}"
                                     + (f" (since pass {hold_first.number}, clock {hold_first.now!r})" if hold and hold_first else "")
                                     + f" but reports {report_mon.length}={got_length} {report_mon.seconds}={got_seconds!r} "
                                     f"(expected {hold} and {want_seconds!r})", hold_first.number if hold and hold_first else None)
            elif hold:
                st.cut_runs += 1
            if report_mon is not None and getattr(dec, report_mon.length) > 0:
                st.waits.append(getattr(dec, report_mon.seconds))
            if hold and hold_first is not None and mixed_of is not None and mixed_of(None, hold_first.decision):
                st.mixed_waits_ended[dec.output_reason] += 1
            hold, hold_first, hold_known = 0, None, True
        if hold:
            st.open_run = hold
        report.checked["conformance"] += len(passes)


def _sets_by_pass(log: RankLog) -> dict[int, list[tuple[str, bool]]]:
    out: dict[int, list[tuple[str, bool]]] = {}
    for s in log.sets:
        out.setdefault(s.after_pass, []).append((s.name, s.value))
    return out


def _apply_sets(state: Any, values: Optional[list[tuple[str, bool]]]) -> Any:
    if not values:
        return state
    return state._replace(**dict(values))


# ----- across ranks --------------------------------------------------------------------------


def _agreement_key(policy: Any, rec: PassRec) -> tuple:
    d = rec.decision
    return tuple(getattr(d, k) for k in policy.decision_key) + tuple(getattr(d.next_state, f) for f in policy.shared)


def shared_state(rec: PassRec, policy: Any) -> tuple:
    """The part of a rank's state before a pass that ranks in step share (the rest is read on each rank's own clock)."""
    return tuple(getattr(rec.before, f) for f in policy.shared)


def _show_key(policy: Any, key: tuple) -> str:
    k = len(policy.decision_key)
    shown = {f.name: f.trace_name for f in policy.decision_fields}
    decided = " ".join(f"{shown.get(n, n)}={v!r}" if isinstance(v, str) else f"{shown.get(n, n)}={v}"
                       for n, v in zip(policy.decision_key, key[:k]))
    return f"{decided} -> " + "/".join(f"{n}={v}" if isinstance(v, bool) else str(v) for n, v in zip(policy.shared, key[k:]))


def _compare(report: Report, s: Session, number: int, present: list[tuple[int, PassRec]],
             split_since: Optional[int]) -> tuple[bool, Optional[int]]:
    """One pass across the ranks that logged it: equal rows, equal decisions. Returns (agree, split_since)."""
    policy = s.config.policy
    logs = s.logs
    i0, first = present[0]
    if any(r.rows != first.rows for _, r in present[1:]):
        ranks = [logs[i].rank for i, r in present if r.rows != first.rows]
        report.add(Finding(CONFORMANCE, "rows-differ", s.index, number, [logs[i0].rank] + ranks,
                           f"pass {number}: ranks {', '.join(map(str, ranks))} logged other gathered rows than rank "
                           f"{logs[i0].rank} (an all-gather gives every rank the same rows)",
                           [logs[i].where(r.fi, r.line) for i, r in present]))
    keys = [_agreement_key(policy, r) for _, r in present]
    same_state = all(shared_state(r, policy) == shared_state(first, policy) for _, r in present)
    if all(k == keys[0] for k in keys):
        return True, (None if same_state else split_since)
    if same_state:
        split_since = None
    elif split_since is None:
        split_since = number
    local_keys = [key for name, key in policy.log.readings if name in policy.local_inputs]
    equal_args = all(all(r.readings[key] == first.readings[key] for key in local_keys) for _, r in present)
    agreements = [inv for inv in policy.invariants if isinstance(inv.check, Agreement)]
    chosen = next((inv for inv in agreements if inv.check.equal_args == equal_args), agreements[0] if agreements else None)
    prop = chosen.id if chosen is not None else "agreement"
    groups: dict[tuple, list[int]] = {}
    for (i, _), k in zip(present, keys):
        groups.setdefault(k, []).append(logs[i].rank)
    text = "; ".join(f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: {_show_key(policy, k)}" for k, rs in groups.items())
    why = "from the same state and gathered rows" if same_state else f"(their states differ, split since pass {split_since})"
    local_names = ", ".join(policy.local_inputs)
    args = "equal arguments, only the clocks differ" if equal_args else f"different {local_names}"
    report.add(Finding(AGREEMENT, prop, s.index, number, [logs[i].rank for i, _ in present],
                       f"pass {number}: ranks decide differently {why}, {args}: {text}",
                       [logs[i].where(r.fi, r.line) for i, r in present], None, _known(s.config.profile, prop, policy)))
    return False, split_since


def check_session(report: Report, s: Session) -> None:
    """Agreement, equal gathered rows and the group run bounds over the passes the ranks logged in common."""
    c = s.config
    policy = c.policy
    logs = s.logs
    maps = [{r.number: r for r in log.passes} for log in logs]
    numbers = sorted(set().union(*maps)) if maps else []
    groups = [inv.check for inv in policy.invariants if isinstance(inv.check, GroupRunBound)]
    windows = [mon.window(PY, c) for mon in groups]
    profile = c.profile
    mixed_of = policy.log.mixed
    stats = report.session_stats[s.index] = {
        "passes": len(numbers), "compared": 0, "mixed": 0, "mixed_resolved": Counter(), "disagreements": 0,
    }
    runs = [0] * len(groups)
    starts: list[Optional[int]] = [None] * len(groups)
    prev_number = None
    split_since: Optional[int] = None
    for number in numbers:
        present = [(i, m[number]) for i, m in enumerate(maps) if number in m]
        first = present[0][1]
        agree = True
        if len(present) > 1:
            stats["compared"] += 1
            agree, split_since = _compare(report, s, number, present, split_since)
        if mixed_of is not None and mixed_of(None, first.decision):
            stats["mixed"] += 1
            stats["mixed_resolved"]["split" if not agree else first.decision.output_reason] += 1
        stats["disagreements"] += not agree
        # the group run bounds: every rank of the gather, on consecutive passes
        if prev_number is not None and number != prev_number + 1:
            runs, starts = [0] * len(groups), [None] * len(groups)
        prev_number = number
        complete = len(present) == c.world_size
        for g, (mon, window) in enumerate(zip(groups, windows)):
            counting = [logs[i].rank for i, r in present if mon.counts(PY, c, None, r.decision)]
            if not complete or not counting:
                runs[g], starts[g] = 0, None
                continue
            runs[g] += 1
            if runs[g] == 1:
                starts[g] = number
            if runs[g] == window:
                report.add(Finding(INVARIANT, mon.id, s.index, number, s.ranks,
                                   f"passes {starts[g]}..{number} ({window} = {mon.window_text} in a row) "
                                   f"each have {mon.some} (on pass {number}: rank {', '.join(map(str, sorted(counting)))}): "
                                   "the group never prefills together", [], starts[g], _known(profile, mon.id, policy)))
    report.checked["agreement"] += stats["compared"]


def check(sessions: list[Session], notes: Iterable[str] = ()) -> Report:
    """Every check on every session."""
    from .desync import check_desync

    report = Report(sessions, notes=list(notes))
    machines: dict[int, tuple[DelayerMachine, Step]] = {}
    for s in sessions:
        fp = s.logs[0].fingerprint
        found = machines.get(fp)
        if found is None:
            machine = DelayerMachine(s.config)
            found = machines[fp] = (machine, Step(s.config, machine.table))
        for log in s.logs:
            _RankChecker(report, s, log, *found).run()
        check_session(report, s)
        check_desync(report, s)
    report.findings.sort(key=lambda f: (f.session, f.pass_number, f.category, f.property))
    return report
