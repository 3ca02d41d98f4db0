"""Shared test settings (hypothesis profiles sized for CI's two cores) and the fixtures several test files use."""

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=60, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=20, stateful_step_count=30, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Every PrefillDelayer built by the suite (in this process and in the ranks it
# spawns, which inherit the environment) also fires each pass through the
# ``transitions`` machine and fails on any difference from the compiled step.
os.environ.setdefault("PREFILL_DELAYER_CROSSCHECK", "1")
CROSSCHECK = os.environ["PREFILL_DELAYER_CROSSCHECK"]


@pytest.fixture(autouse=True)
def _crosscheck_stays_on(request: pytest.FixtureRequest):
    """Each test leaves the cross-check as the suite set it: a benchmark run in-process pops it from the environment
    (it times the production path), and a test that runs one without ``monkeypatch`` turned it off for every test
    after it, silently."""
    yield
    after = os.environ.get("PREFILL_DELAYER_CROSSCHECK")
    os.environ["PREFILL_DELAYER_CROSSCHECK"] = CROSSCHECK  # the tests after this one run as the suite set them
    assert after == CROSSCHECK, (f"{request.node.nodeid} left PREFILL_DELAYER_CROSSCHECK={after!r} (the suite sets "
                                 f"{CROSSCHECK!r}): set it with monkeypatch, which puts it back")


@pytest.fixture(scope="module")
def seed_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two seed ranks whose slot trigger holds on every pass: violations, so check-log writes traces."""
    from decision_log_harness import write_seed_unbounded_logs

    logs = tmp_path_factory.mktemp("seed-logs")
    write_seed_unbounded_logs(logs)
    return logs
