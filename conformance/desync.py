"""check-log's desync checks: every rank of the gather logged, and every all-gather paired rows of one pass.

* **every-rank-logged.** A run whose gather has ``world_size`` ranks but fewer
  logs: the others ran no delayer of ours (SGLang's own class, where
  ``PREFILL_DELAYER_PROFILE`` is not set, writes no log) or had the log off.
  Their decisions are unchecked, and a mixed rollout looks exactly like this.
* **same-pass.** The runtime refuses a pass whose rows carry different pass
  stamps (``runtime.envelope``) and logs it as a ``DesyncError``: each such
  collective is one finding, with the ranks that logged it. And ranks whose
  logged pass numbers drift apart, so that one rank's pass ``n`` is the
  collective another logged as pass ``n + d`` (the same gathered rows), are a
  desync from the pass where the drift starts: a skipped pass in one rank's
  numbering.

Both read only what the logs hold; nothing here changes the other checks.
"""

from __future__ import annotations

from typing import Any, Optional

from ..runtime.envelope import Envelope, pass_of
from .checks import Finding, Report, Session

DESYNC = "desync"
# (category, property, what it covers): rows of check-log's verdict table.
CHECKS = (
    (DESYNC, "every-rank-logged", "every rank of the gather wrote a log"),
    (DESYNC, "same-pass", "every all-gather paired rows of one pass (no skip, repeat, restart or foreign delayer)"),
)
# How far apart two ranks' numberings are searched for the same collective.
MAX_DRIFT = 8


def check_desync(report: Report, s: Session) -> None:
    """The desync checks of one run."""
    _every_rank_logged(report, s)
    _desync_errors(report, s)
    _drift(report, s)


def _first_pass(s: Session) -> int:
    numbers = [log.passes[0].number for log in s.logs if log.passes] + [f.number for log in s.logs for f in log.fails]
    return min(numbers, default=1)


def _every_rank_logged(report: Report, s: Session) -> None:
    world = s.config.world_size
    if len(s.logs) >= world:
        return
    places = sorted(g.group_rank for g in s.logs if g.group_rank is not None)
    missing = sorted(set(range(world)) - set(places)) if len(places) == len(s.logs) else None
    who = (f"place{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of the gather"
           if missing else f"{world - len(s.logs)} of its {world} ranks")
    report.add(Finding(
        DESYNC, "every-rank-logged", s.index, _first_pass(s), s.ranks,
        f"run {s.index}: {who} logged nothing (the gather has {world} ranks, logs came from rank"
        f"{'s' if len(s.logs) > 1 else ''} {', '.join(map(str, s.ranks))}): a rank without this delayer "
        "(SGLang's own PrefillDelayer, where PREFILL_DELAYER_PROFILE is not set, writes no log), or with the "
        "decision log off; its decisions are not checked",
        [log.files[0] for log in s.logs]))


def _desync_errors(report: Report, s: Session) -> None:
    """One finding per refused collective: the ranks that logged the same DesyncError."""
    by_message: dict[str, list[tuple[Any, Any]]] = {}
    for log in s.logs:
        for f in log.fails:
            if f.error == "DesyncError":
                by_message.setdefault(f.message, []).append((log, f))
    for message, found in by_message.items():
        first = min(f.number for _, f in found)
        ranks = sorted({log.rank for log, _ in found})
        logged = ", ".join(f"rank {log.rank} pass {f.number}" for log, f in found[:8]) + (" ..." if len(found) > 8 else "")
        report.add(Finding(
            DESYNC, "same-pass", s.index, first, ranks,
            f"the runtime refused a collective ({len(found)} fail record(s): {logged}): {message}",
            [log.where(f.fi, f.line) for log, f in found]))


def _drift(report: Report, s: Session) -> None:
    """Ranks whose pass ``n`` is another rank's ``n + d``: where each drift starts, once per pair and drift."""
    if len(s.logs) < 2:
        return
    env = Envelope(s.config)
    maps = [{r.number: r for r in log.passes} for log in s.logs]
    by_rows = [{tuple(r.rows): r.number for r in log.passes} for log in s.logs]
    base, base_log = maps[0], s.logs[0]
    for other, (m, log) in enumerate(zip(maps[1:], s.logs[1:]), 1):
        drift: Optional[int] = 0
        for number in sorted(m):
            rec = m[number]
            mine = base.get(number)
            if mine is not None and mine.rows == rec.rows:
                drift = 0
                continue
            there = by_rows[0].get(tuple(rec.rows))
            if there is None or there == number or abs(there - number) > MAX_DRIFT:
                continue  # not a collective rank 0 logged: rows-differ says so
            d = there - number
            if d == drift:
                continue
            drift = d
            stamps = rec.rows[env.f_stamp::env.row_len]
            sent = ", ".join(f"rank {i}: {pass_of(x)}" for i, x in enumerate(stamps))
            report.add(Finding(
                DESYNC, "same-pass", s.index, number, [base_log.rank, log.rank],
                f"pass {number}: rank {log.rank}'s pass {number} is the collective rank {base_log.rank} logged as pass "
                f"{there} (the same gathered rows; the pass stamps they carry: {sent}): the two ranks' pass numbers "
                f"drift apart by {abs(d)} from here, a pass rank {log.rank if d > 0 else base_log.rank} skipped",
                [log.where(rec.fi, rec.line), base_log.where(maps[0][there].fi, maps[0][there].line)], number))
