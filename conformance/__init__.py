"""Production conformance: reading the runtime's decision logs and holding them against the spec.

``check_logs`` is what ``prefill-delayer check-log`` runs: it reads the logs
(``conformance.logread``), re-fires every logged pass through the ``transitions``
machine and checks the catalogue's invariants over the run (``conformance.checks``),
summarises the run (``conformance.summary``), and writes flagged windows as
replayable traces (``conformance.traces``); ``conformance.plot`` draws the timeline.
None of it needs z3 or torch; only the plot needs matplotlib.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    from .digest import DigestWriter


def check_logs(paths: list[str], *, own_profile: bool = False, traces: Optional[str] = None, exact: bool = False,
               sample: Optional[float] = None, jobs: Optional[int] = None, plot: bool = False,
               progress: Any = None, digest: Optional[DigestWriter] = None,
               write: Optional[Callable[[Any, str], str]] = None) -> tuple[Any, dict[str, Any], Optional[list]]:
    """(report, JSON data, trace entries); ``LogError`` for input that cannot be checked.

    ``write(path, text) -> path written`` writes each trace (the command stages them with its other outputs).
    ``digest``: the ``DigestWriter`` that writes this node's digest as one of its caller's staged outputs
    (``check-log --digest``'s, or ``digest.node_digest``'s for a plain path).
    """
    from .stream import DEFAULT_SAMPLE, check_stream
    from .summary import summary_data

    writer = digest
    try:
        report, empty, timelines = check_stream(paths, own_profile=own_profile, exact=exact,
                                                sample=DEFAULT_SAMPLE if sample is None else sample, jobs=jobs,
                                                plot=plot, progress=progress, keep=writer.add if writer is not None else None)
    except BaseException:
        if writer is not None:
            writer.discard()
        raise
    report.timelines = timelines
    data = summary_data(report, empty)
    if writer is not None:
        writer.close(report, data)
    written = None
    if traces:
        from .traces import export_traces

        written = export_traces(report, traces, write)
        data["traces"] = written
    return report, data, written
