"""Production conformance: reading the runtime's decision logs and holding them against the spec.

``prefill-delayer check-log`` (``conformance.cli``) reads the logs
(``conformance.logread``), re-fires every logged pass through the ``transitions``
machine and checks the catalogue's invariants over the run (``conformance.checks``),
summarises the run (``conformance.summary``), and writes flagged windows as
replayable traces (``conformance.traces``) and a timeline (``conformance.plot``).
None of it needs z3 or torch; only ``--plot`` needs matplotlib.
"""
