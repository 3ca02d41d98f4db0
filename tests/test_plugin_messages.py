"""What the plugin says about a value of PREFILL_DELAYER_PROFILE it cannot use: every name it takes, ``sglang``
included, and never a profile of a policy SGLang's PrefillDelayer does not run (the gate's ``pdi-*``)."""

from __future__ import annotations

import pytest

from prefill_delayer.spec.registry import host_profiles
from sglang_harness import run_python, sglang_skip_reason

pytestmark = [pytest.mark.sglang, pytest.mark.skipif(sglang_skip_reason() is not None, reason=str(sglang_skip_reason()))]

LOAD = """
    from sglang.srt.plugins import load_plugins
    load_plugins()
    import sglang.srt.managers.prefill_delayer as pd
    print(pd.PrefillDelayer.profile)
"""


@pytest.mark.parametrize(("setting", "says"), [
    ("fast", "unknown profile 'fast': expected one of "),
    ("pdi-hardened", "profile 'pdi-hardened' is of policy prefill-decode-interval, which SGLang's PrefillDelayer does not run"),
])
def test_a_value_it_cannot_use_lists_every_name_it_takes(setting: str, says: str) -> None:
    done = run_python(LOAD, {"PREFILL_DELAYER_PROFILE": setting})
    assert done.returncode == 1 and done.stdout == "", done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert says in last and last.endswith("; or 'sglang', the installed SGLang's own"), last
    assert all(p in last for p in host_profiles()) and "sglang-0.5.20" in last and "pdi-" not in last.split(says)[-1]


def test_a_release_name_is_its_profile() -> None:
    done = run_python(LOAD, {"PREFILL_DELAYER_PROFILE": "sglang-0.5.20"})
    assert done.returncode == 0 and done.stdout.strip() == "sglang-0.5.19", done.stderr
