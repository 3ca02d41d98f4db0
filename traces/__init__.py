"""Counterexample traces: the format (``traces.format``), replay through the runtime
(``traces.replay``) and the violations a trace records (``traces.violations``)."""
