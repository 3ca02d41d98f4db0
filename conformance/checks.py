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

import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Sequence

from ..fsm import DelayerMachine, Step
from ..runtime.decision_log import build_spec_hash
from ..runtime.envelope import Envelope
from ..spec.config import Config
from ..spec.monitors import Agreement, PassRule
from ..spec.ops import PY
from ..spec.policy import REFUTED
from .logread import LogError, PassRec, RankLog

if TYPE_CHECKING:
    import numpy as np

CONFORMANCE, AGREEMENT, INVARIANT = "conformance", "agreement", "invariant"
# Findings kept per property (all are counted).
KEEP_PER_PROPERTY = 200
# How far apart in wall-clock time the ranks of one run can log one pass: each logs it once the pass's all-gather
# returns, within milliseconds of the others, plus the skew of the hosts' clocks (NTP keeps it to milliseconds).
ONE_PASS_SPREAD_S = 2.0


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
    waits: list[Any] = field(default_factory=list)  # wait_seconds of releases after >= 1 delay (arrays, one per chunk)
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
    # for --plot, per session (``stream.Stitcher._timeline``): the allowing reasons its cells' codes 2, 3, ... stand for,
    # and each rank's chunks of cells as (first pass, one byte per pass)
    timelines: dict[int, tuple[list[str], list[list[tuple[int, np.ndarray]]]]] = field(default_factory=dict)
    refired: int = 0  # passes re-fired through the transitions machine
    cross_counts: Counter = field(default_factory=Counter)  # the findings of checks across ranks, by (category, property)
    # One node's part of a run whose logs are spread over nodes (check-log --digest): a rank of the gather without a
    # log here may log on another node, so what needs every rank's log is left to --merge, where the digests meet.
    node: bool = False

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


def fingerprint_problem(header: dict[str, Any], config: Config) -> Optional[str]:
    """Why ``config``, read from ``header``, is not the configuration the header's fingerprint names (``None``: it is)."""
    recomputed = config.fingerprint()
    if recomputed == header["fingerprint"]:
        return None
    return f"its configuration has fingerprint {recomputed:#018x} in this build but was logged with {header['fingerprint']:#018x}"


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
        problem = fingerprint_problem(log.header, log.config)
        if problem is not None:
            raise LogError(f"{log.files[0]}: {problem}: this build does not rebuild the logged configuration exactly; "
                           "check the log with the build that wrote it")
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
    if len(groups) > 1 and not own_profile and _one_after_another(groups):
        notes.append(f"the logs hold {len(groups)} configurations, one after another (a restart with a new "
                     "configuration): each run is checked against its own")
    elif len(groups) > 1 and not own_profile:
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
            notes += _apart_note(sessions[-1])
    return sessions, notes


def _pass_walls(log: RankLog) -> dict[int, float]:
    """The wall clock of a rank's first and last logged pass, by pass number (from its records, or, when its files
    were only scanned, from their first and last pass lines)."""
    if log.passes:
        return {r.number: r.wall for r in (log.passes[0], log.passes[-1])}
    infos = [i for i in log.__dict__.get("infos", ()) if i.first is not None]
    out = {}
    if infos and infos[0].first_wall is not None:
        out[infos[0].first] = infos[0].first_wall
    if infos and infos[-1].last_wall is not None:
        out[infos[-1].last] = infos[-1].last_wall
    return out


def _apart_note(s: Session) -> list[str]:
    """A note when ranks of one run logged the same pass seconds apart: the files of two runs given as one. Each rank
    logs a pass once its all-gather returns, so one run's ranks log it within ``ONE_PASS_SPREAD_S`` of each other."""
    walls = [_pass_walls(log) for log in s.logs]
    for number in sorted(set.intersection(*(set(w) for w in walls)) if walls else ()):
        at = [w[number] for w in walls]
        if max(at) - min(at) > ONE_PASS_SPREAD_S:
            early = [log.rank for log, t in zip(s.logs, at) if t - min(at) <= ONE_PASS_SPREAD_S]
            late = [log.rank for log in s.logs if log.rank not in early]
            return [f"run {s.index}: ranks {', '.join(map(str, late))} logged pass {number} {max(at) - min(at):.1f} s after "
                    f"ranks {', '.join(map(str, early))}, where one run's ranks log a pass within milliseconds of each "
                    "other (once its all-gather returns): are these the files of different runs? The checks across "
                    "ranks compare them as one run"]
    return []


def _ended(log: RankLog) -> float:
    """The wall clock of the run's last logged pass (its start when it logged none): from its records, or from
    its files' last pass lines when the log was only scanned (check-log's streaming path)."""
    return max(_pass_walls(log).values(), default=log.started)


def _one_after_another(groups: dict[tuple, list[RankLog]]) -> bool:
    """No two configurations' runs overlap in time: what a restarted deployment leaves (its older run rotated to ``.1``)."""
    spans = [(min(g.started for g in logs), max(_ended(g) for g in logs)) for logs in groups.values()]
    spans.sort()
    return all(a_end < b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


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


class PassChecker:
    """One rank's pass re-fired through the ``transitions`` machine, on Python values: the exact path.

    ``check(rec, view)`` holds one logged pass (``PassRec``) against the spec:
    its rows (when the line has every rank's), its own row against ``local_row``,
    the machine's decision and next state from the logged state, and the pass
    rules; it returns the findings (``rank R pass N: ...``). The column path
    (``conformance.columns``) decides which passes come here: every one under
    ``--exact``, else a sample and every pass it flags.
    """

    def __init__(self, session: Session, log: RankLog, machine: DelayerMachine, step: Step) -> None:
        self.session, self.log, self.machine, self.step = session, log, machine, step
        self.c = session.config
        self.policy = self.c.policy
        self.envelope = Envelope(self.c)
        self.rules = [inv.check for inv in self.policy.invariants if isinstance(inv.check, PassRule)]

    def finding(self, category: str, prop: str, rec: Any, message: str, first: Optional[int] = None) -> Finding:
        return Finding(category, prop, self.session.index, rec.number, [self.log.rank],
                       f"rank {self.log.rank} pass {rec.number}: {message}", [self.log.where(rec.fi, rec.line)], first,
                       _known(self.c.profile, prop, self.policy))

    def view(self, rec: PassRec) -> Any:
        """The view of a line's gathered rows (a line without them logs its view: ``PassRec.rows`` is then None)."""
        env = self.envelope
        n, k = env.row_len, env.n_policy
        flat = rec.rows
        assert flat is not None, "the caller reads the logged view of a line without gathered rows"
        return self.step.view([flat[i:i + k] for i in range(0, len(flat), n)])

    def check(self, rec: PassRec, view: Any, own: Optional[Sequence[int]] = None) -> list[Finding]:
        """The findings of one pass; ``own`` is the rank's own row when the line has no gathered rows."""
        log, c, machine, step, policy = self.log, self.c, self.machine, self.step, self.policy
        env = self.envelope
        gr = log.group_rank
        n, k = env.row_len, env.n_policy
        schema = policy.log
        out: list[Finding] = []
        number, now, readings, flat, before, dec = rec[:6]
        if flat is not None:
            # -- the rows: a successful pass carries no error and one fingerprint
            if flat[env.f_fingerprint::n].count(log.fingerprint) != c.world_size or any(flat[env.f_error::n]):
                out.append(self.finding(CONFORMANCE, "row", rec, "the pass succeeded on rows that carry an input error or "
                                        "another configuration's fingerprint (the runtime must have refused it)"))
            if gr is not None:
                own = flat[gr * n:gr * n + k]
        # -- re-fire through the transitions machine
        try:
            own_row = own if own is not None and gr is not None else [0] * k
            inp = schema.inputs_from_row(PY, own_row, readings)
            local = step.local(before, now, inp)
            if gr is not None:
                want_row = policy.local_row(PY, c, inp, local)
                if list(own_row) != want_row:
                    shown = ", ".join(f"{name} {readings[key]!r}" for name, key in schema.readings)
                    out.append(self.finding(CONFORMANCE, "row", rec, f"this rank sent {list(own_row)} but the spec's local_row "
                                            f"gives {want_row} for its logged readings ({shown}, clock {now!r})"))
            machine.restore(before)
            want = machine.negotiate(view, local)
        except (AssertionError, ValueError) as exc:
            out.append(self.finding(CONFORMANCE, "no-transition", rec, f"the spec has no transition for this pass: {exc}"))
            want = None
        if want is not None and want != dec:
            if want[1:] != dec[1:]:
                out.append(self.finding(CONFORMANCE, "decision", rec, f"logged decision differs from the spec's: {_fields_differ(dec, want)}"))
            else:
                out.append(self.finding(CONFORMANCE, "next-state", rec, f"logged next state differs from the spec's: "
                                        f"{_state_differs(dec.next_state, want.next_state)}"))
        for rule in self.rules:
            if rule.premise(PY, c, view, dec) and not rule.claim(PY, c, view, dec):
                out.append(self.finding(INVARIANT, rule.id, rec, rule.explain(view, dec)))
        return out


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


@functools.lru_cache(maxsize=64)
def _envelope(c: Any) -> Envelope:
    return Envelope(c)


def _local_args(policy: Any, env: Envelope, log: RankLog, rec: Any) -> tuple:
    """The rank's local inputs on this pass (``Policy.local_inputs``), rebuilt from its own row and readings.

    A record of the column path carries the rank's own row (``own``); a format-1 record has every rank's rows.
    """
    own = getattr(rec, "own", None)
    if own is None:
        gr = log.group_rank
        own = rec.rows[gr * env.row_len:gr * env.row_len + env.n_policy] if gr is not None else [0] * env.n_policy
    # The cross-rank columns keep only the readings of local inputs; the others do not enter the answer.
    readings = {**{key: 0 for key in policy.log.keys}, **rec.readings}
    inp = policy.log.inputs_from_row(PY, list(own), readings)
    return tuple(getattr(inp, name) for name in policy.local_inputs)


def _compare(report: Report, s: Session, number: int, present: list[tuple[int, PassRec]],
             split: Optional[tuple[int, str]]) -> tuple[bool, Optional[tuple[int, str]]]:
    """One pass across the ranks that logged it: equal rows, equal decisions. Returns (agree, split).

    ``split`` is where the ranks' states parted, while they stay apart: the pass on
    which they decided differently from the same state, and the agreement
    property that pass broke. A later disagreement of ranks whose states differ is
    that same violation's consequence, and is reported under its property, not
    judged by the later pass's arguments alone.
    """
    logs = s.logs
    i0, first = present[0]
    if any(r.rows != first.rows for _, r in present[1:]):
        ranks = [logs[i].rank for i, r in present if r.rows != first.rows]
        report.add(Finding(CONFORMANCE, "rows-differ", s.index, number, [logs[i0].rank] + ranks,
                           f"pass {number}: ranks {', '.join(map(str, ranks))} logged other gathered rows than rank "
                           f"{logs[i0].rank} (an all-gather gives every rank the same rows)",
                           [logs[i].where(r.fi, r.line) for i, r in present]))
        # Agreement is a claim about ranks that gathered the same rows: each set of them is judged apart.
        parts: dict[Any, list[tuple[int, PassRec]]] = {}
        for i, r in present:
            parts.setdefault(_rows_key(r.rows), []).append((i, r))
        for part in parts.values():
            if len(part) > 1:
                _, split = _judge_agreement(report, s, number, part, split)
        return False, split
    return _judge_agreement(report, s, number, present, split)


def _rows_key(rows: Any) -> Any:
    """The gathered rows as a dict key: the logged digest of the column path is one already, a record's rows a list."""
    return tuple(rows) if isinstance(rows, list) else rows


def _judge_agreement(report: Report, s: Session, number: int, present: list[tuple[int, PassRec]],
                     split: Optional[tuple[int, str]]) -> tuple[bool, Optional[tuple[int, str]]]:
    """Ranks that gathered the same rows decide alike (the agreement properties); see ``_compare``."""
    policy = s.config.policy
    logs = s.logs
    first = present[0][1]
    keys = [_agreement_key(policy, r) for _, r in present]
    same_state = all(shared_state(r, policy) == shared_state(first, policy) for _, r in present)
    if all(k == keys[0] for k in keys):
        return True, (None if same_state else split)
    env = _envelope(s.config)
    local_args = [_local_args(policy, env, logs[i], r) for i, r in present]
    equal_args = all(a == local_args[0] for a in local_args)
    agreements = [inv for inv in policy.invariants if isinstance(inv.check, Agreement)]
    chosen = next((inv for inv in agreements if inv.check.equal_args == equal_args), agreements[0] if agreements else None)
    prop = chosen.id if chosen is not None else "agreement"
    if same_state or split is None:  # they part here (or parted before this log shows)
        split = (number, prop)
    else:
        prop = split[1]
    groups: dict[tuple, list[int]] = {}
    for (i, _), k in zip(present, keys):
        groups.setdefault(k, []).append(logs[i].rank)
    text = "; ".join(f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}: {_show_key(policy, k)}" for k, rs in groups.items())
    if same_state:
        why = "from the same state and gathered rows"
    elif split[0] == number:
        why = "(their states differ, though no earlier pass in the logs shows them deciding apart)"
    else:
        why = f"(their states differ since they parted on pass {split[0]})"
    local_names = ", ".join(policy.local_inputs)
    args = "equal arguments, only the clocks differ" if equal_args else f"different {local_names}"
    report.add(Finding(AGREEMENT, prop, s.index, number, [logs[i].rank for i, _ in present],
                       f"pass {number}: ranks decide differently {why}, {args}: {text}",
                       [logs[i].where(r.fi, r.line) for i, r in present], None, _known(s.config.profile, prop, policy)))
    return False, split


def divergence_is_no_known_defect(report: Report) -> None:
    """A violation the catalogue expects of the profile is its known defect only where the log follows the spec:
    if a logged pass of its window diverges from the spec (an edited log, another runtime), the spec did not decide it."""
    diverged: dict[int, list[int]] = {}
    for f in report.findings:
        if f.category == CONFORMANCE:
            diverged.setdefault(f.session, []).append(f.pass_number)
    for f in report.findings:
        first = f.first_pass if f.first_pass is not None else f.pass_number
        hit = [p for p in diverged.get(f.session, ()) if first <= p <= f.pass_number] if f.known_defect else []
        if hit:
            f.known_defect = False
            f.message += f"; not a known defect of the profile: the log diverges from the spec at pass {hit[0]}"
