"""check-log's desync checks: every rank of the gather logged, and every all-gather paired rows of one pass.

* **every-rank-logged.** A run whose gather has ``world_size`` ranks but fewer
  logs: the others ran no delayer of ours (SGLang's own class, where
  ``PREFILL_DELAYER_PROFILE`` is not set, writes no log) or had the log off.
  Their decisions are unchecked, and a mixed rollout looks exactly like this.
  And a rank whose log ends (or holds no pass) more than one pass before its
  peers' logs end: the ranks of a group run every pass together (a rank that
  dies stops its peers within the pass in flight), so its log was cut or
  stopped (a write error, a full disk) while the rank went on, and its last
  passes are unchecked. Only the end is judged: a rotated log (``_KEEP``)
  starts later on one rank than on another by design. On one node of a run
  spread over nodes (``check-log --digest``, ``Report.node``) a rank without a
  log there may log on another node: only the node's own logs ending apart are
  judged there, and the ranks no node logged are found by ``--merge``, where
  every node's digest meets.
* **same-pass.** The runtime refuses a pass whose rows carry different pass
  stamps (``runtime.envelope``) and logs it as a ``DesyncError``: each such
  collective is one finding, with the ranks that logged it, wherever their
  logs are (a node's digest keeps each rank's fail records; the merge groups
  them, so ranks on two nodes are one finding, not one per node). And ranks whose
  logged pass numbers drift apart, so that one rank's pass ``n`` is another
  collective than its peer's pass ``n`` (the pass numbers their rows' stamps
  carried differ by ``d``), are a desync from the pass where the drift starts:
  a skipped pass in one rank's numbering. The stamps are in every log line
  (format 2: the ``pass_stamp`` column beside the rank's own row; format 1: the
  gathered rows), so this runs on the columns, chunk by chunk, for compact logs
  and for digests merged from several nodes (``stream.stamp_drift``); the
  digest of the gathered rows is compared across ranks pass by pass as before.

Both read only what the logs hold; nothing here changes the other checks.
"""

from __future__ import annotations

from typing import Any, Optional

from ..runtime.errors import DesyncError
from .checks import Finding, Report, Session

DESYNC = "desync"
REFUSED = DesyncError.__name__  # the error a fail line of a collective the runtime refused as a desync names
# (category, property, what it covers): rows of check-log's verdict table.
CHECKS = (
    (DESYNC, "every-rank-logged", "every rank of the gather wrote a log, to the run's last pass"),
    (DESYNC, "same-pass", "every all-gather paired rows of one pass (no skip, repeat, restart or foreign delayer)"),
)


def check_desync(report: Report, s: Session) -> None:
    """The desync checks of one run that read its logs whole (the drift is ``stream.stamp_drift``'s, on columns)."""
    every_rank_logged(report, s)
    desync_errors(report, s)


def unlogged_places(s: Session) -> Optional[list[int]]:
    """The places of the gather no log of ``s`` holds (None when some log does not say its place)."""
    places = [g.group_rank for g in s.logs if g.group_rank is not None]
    if len(places) != len(s.logs):
        return None
    return sorted(set(range(s.config.world_size)) - set(places))


def _first_pass(s: Session) -> int:
    numbers = [log.passes[0].number for log in s.logs if log.passes] + [f.number for log in s.logs for f in log.fails]
    return min(numbers, default=1)


def every_rank_logged(report: Report, s: Session) -> None:
    """Every rank of the gather logged, to the run's last pass; on one node's part (``report.node``) only the second
    half: the ranks this node did not log are the merge's to judge."""
    logs_end_together(report, s)
    world = s.config.world_size
    if len(s.logs) >= world or report.node:
        return
    missing = unlogged_places(s)
    who = (f"place{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of the gather"
           if missing else f"{world - len(s.logs)} of its {world} ranks")
    report.add(Finding(
        DESYNC, "every-rank-logged", s.index, _first_pass(s), s.ranks,
        f"run {s.index}: {who} logged nothing (the gather has {world} ranks, logs came from rank"
        f"{'s' if len(s.logs) > 1 else ''} {', '.join(map(str, s.ranks))}): its files not given (give every "
        "rank's files, or their folder; one node's logs go through check-log --digest and --merge), a rank without "
        "this delayer (SGLang's own PrefillDelayer, where PREFILL_DELAYER_PROFILE is not set, writes no log), or "
        "with the decision log off; its decisions are not checked",
        [log.files[0] for log in s.logs]))


def logs_end_together(report: Report, s: Session) -> None:
    """A rank's log that ends more than one pass before the last any peer logged, or holds no pass (one finding per
    such rank; the stats are those the chunks gathered, or a node's digest kept)."""
    lasts = {log.rank: report.stats[(s.index, log.rank)].last for log in s.logs if (s.index, log.rank) in report.stats}
    end = max((x for x in lasts.values() if x is not None), default=None)
    if end is None:
        return
    for log in s.logs:
        last = lasts.get(log.rank, end)
        if last is not None and last >= end - 1:
            continue
        held = "holds no pass" if last is None else f"ends at pass {last}"
        report.add(Finding(
            DESYNC, "every-rank-logged", s.index, end if last is None else last + 1, [log.rank],
            f"run {s.index}: rank {log.rank}'s log {held}, its peers' at pass {end}: the ranks run every pass together, "
            f"so the log was cut or stopped (a write error, a full disk) while rank {log.rank} went on; its passes "
            f"{'up to' if last is None else f'{last + 1} to'} {end} are not checked",
            [log.files[-1]] if log.files else []))


def desync_errors(report: Report, s: Session) -> None:
    """One finding per refused collective: the ranks that logged the same DesyncError.

    Across ranks (the ranks of one collective log one message), so a node's digest keeps each rank's fail records
    with their messages and the merge runs this on them, rather than one finding per node."""
    by_message: dict[str, list[tuple[Any, Any]]] = {}
    for log in s.logs:
        for f in log.fails:
            if f.error == REFUSED:
                by_message.setdefault(f.message, []).append((log, f))
    for message, found in by_message.items():
        first = min(f.number for _, f in found)
        ranks = sorted({log.rank for log, _ in found})
        logged = ", ".join(f"rank {log.rank} pass {f.number}" for log, f in found[:8]) + (" ..." if len(found) > 8 else "")
        report.add(Finding(
            DESYNC, "same-pass", s.index, first, ranks,
            f"the runtime refused a collective ({len(found)} fail record(s): {logged}): {message}",
            [log.where(f.fi, f.line) for log, f in found]))


def drift_finding(s: Session, place: int, base: int, number: int, base_stamp: int, stamp: int, where: list[str]) -> Finding:
    """The same-pass finding of rank ``place`` whose pass ``number`` carried another stamp than rank ``base``'s."""
    log, base_log = s.logs[place], s.logs[base]
    d = stamp - base_stamp
    return Finding(
        DESYNC, "same-pass", s.index, number, [base_log.rank, log.rank],
        f"pass {number}: rank {log.rank}'s pass {number} carried pass stamp {stamp}, rank {base_log.rank}'s {base_stamp}: "
        f"not one collective; the two ranks' pass numbers drift apart by {abs(d)} from here, a pass rank "
        f"{log.rank if d > 0 else base_log.rank} ended without negotiating (a skip)",
        where, number)
