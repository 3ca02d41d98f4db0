"""Production conformance: reading the runtime's decision logs and holding them against the spec.

``check_logs`` is what ``prefill-delayer check-log`` runs: it reads the logs
(``conformance.logread``), re-fires every logged pass through the ``transitions``
machine and checks the catalogue's invariants over the run (``conformance.checks``),
summarises the run (``conformance.summary``), and writes flagged windows as
replayable traces (``conformance.traces``); ``conformance.plot`` draws the timeline.
None of it needs z3 or torch; only the plot needs matplotlib.
"""

from __future__ import annotations

from typing import Any, Callable, Optional


def check_logs(paths: list[str], *, own_profile: bool = False, traces: Optional[str] = None,
               write: Optional[Callable[[Any, str], str]] = None) -> tuple[Any, dict[str, Any], Optional[list]]:
    """(report, JSON data, trace entries); ``LogError`` for input that cannot be checked.

    ``write(path, text) -> path written`` writes each trace (the command stages them with its other outputs).
    """
    from .checks import build_sessions, check
    from .logread import read_logs
    from .summary import summary_data

    logs, empty = read_logs(paths)
    sessions, notes = build_sessions(logs, own_profile)
    report = check(sessions, notes)
    data = summary_data(report, empty)
    written = None
    if traces:
        from .traces import export_traces

        written = export_traces(report, traces, write)
        data["traces"] = written
    return report, data, written
