"""The plugin's "prefill-delayer active" line reaches the operator whatever the logging set-up: through
SGLang's own logger (``sglang.srt.plugins``) when logging is set up, at INFO or, when the level hides INFO,
at WARNING; on stderr when nothing is set up by the time a delayer is built. Once per process, always."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

LINE = "prefill-delayer active (plugin): SGLang 0.5.23's PrefillDelayer and PrefillDelayerSinglePassExecutor replaced"


def _run(body: str) -> str:
    script = "import logging, sys\nfrom prefill_delayer.integrations.sglang.announce import announce, flush_announcement\n"
    done = subprocess.run([sys.executable, "-c", script + textwrap.dedent(body)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stderr


@pytest.mark.parametrize(("setup", "shown"), [
    ("", LINE),  # no logging at all: stderr, when the first delayer is built
    ("logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')",
     f"WARNING sglang.srt.plugins: {LINE}"),
    ("logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')",
     f"INFO sglang.srt.plugins: {LINE}"),
])
def test_the_line_reaches_the_operator_once(setup: str, shown: str) -> None:
    err = _run(f"""
        announce("0.5.23", "hardened", "hardened", "plugin")   # the plugin registers, before SGLang sets up logging
        sys.stderr.write("-- logging set up --\\n")
        {setup}
        flush_announcement()                                  # a delayer is built
        flush_announcement()                                  # and another
    """)
    lines = [line for line in err.splitlines() if "prefill-delayer active" in line]
    assert len(lines) == 1 and lines[0].startswith(shown), err
    assert err.index("-- logging set up --") < err.index("prefill-delayer active")  # it waited for the set-up


def test_the_line_goes_out_at_once_when_logging_is_already_set_up() -> None:
    err = _run("""
        logging.basicConfig(level=logging.INFO, format='%(name)s: %(message)s')
        announce("0.5.23", "hardened", "hardened", "plugin")
        sys.stderr.write("-- delayer built --\\n")
        flush_announcement()
    """)
    assert err.index("sglang.srt.plugins: prefill-delayer active") < err.index("-- delayer built --"), err
    assert err.count("prefill-delayer active") == 1
