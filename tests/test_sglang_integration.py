"""The SGLang shell and plugin against a real SGLang 0.5.23 install (nothing of SGLang stubbed).

* the plugin, in fresh interpreters (a REPLACE must not leak into other tests):
  SGLang's own ``load_plugins()`` swaps our classes in with the variable set,
  leaves SGLang's with it unset, and stops the process on a bad value;
* ours and SGLang's own class side by side on 2 and 4 gloo ranks under SGLang's
  runtime context, on random traces with per-rank clocks: identical under
  ``sglang-0.5.22``; under ``hardened`` different only on passes where a
  hardened feature applies, the feature found by stepping a profile that has
  just that feature from the same state;
* the runtime's failure cases through the shell.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from runtime_harness import COLLECTIVE_TIMEOUT_S, Clock, Recorder, decision_tuple, error_info, results, spawn_gloo
from sglang_harness import (OURS, SGLANG_RELEASE, THEIRS, layout_widths, publish_context, run_python, sglang_skip_reason,
                            their_module)

pytestmark = [pytest.mark.sglang, pytest.mark.skipif(sglang_skip_reason() is not None, reason=str(sglang_skip_reason()))]

TESTS = Path(__file__).parent


# ----- the plugin, in a fresh interpreter ------------------------------------------------------


# Imports the names as SGLang's scheduler does (``from ... import``, before load_plugins), then loads the plugins.
_LOAD = """
    import json, logging, sys
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    import sglang.srt.managers.prefill_delayer as pd
    from sglang.srt.managers.prefill_delayer import PrefillDelayer, PrefillDelayerSinglePassExecutor
    theirs = (pd.PrefillDelayer, pd.PrefillDelayerSinglePassExecutor)
    from sglang.srt.plugins import load_plugins
    load_plugins()
    def name(c): return c.__module__ + "." + c.__qualname__
    print(json.dumps({
        "module": [name(pd.PrefillDelayer), name(pd.PrefillDelayerSinglePassExecutor)],
        "importer": [name(PrefillDelayer), name(PrefillDelayerSinglePassExecutor)],
        "profile": getattr(pd.PrefillDelayer, "profile", None),
        "replaced": pd.PrefillDelayer is not theirs[0],
    }))
"""


@pytest.mark.parametrize("setting, profile", [("sglang", "sglang-0.5.22"), ("hardened", "hardened"),
                                              ("sglang-0.5.20", "sglang-0.5.19")])
def test_plugin_replaces_both_classes_where_they_were_imported(setting: str, profile: str) -> None:
    done = run_python(_LOAD, {"PREFILL_DELAYER_PROFILE": setting})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["module"] == OURS and out["importer"] == OURS and out["replaced"]
    assert out["profile"] == profile
    from prefill_delayer.spec.hashing import spec_hash

    lines = [line for line in done.stderr.splitlines() if "prefill-delayer active" in line]
    assert len(lines) == 1, done.stderr
    assert f"profile {profile} (PREFILL_DELAYER_PROFILE={setting})" in lines[0] and f"spec {spec_hash()}" in lines[0]
    assert f"SGLang {SGLANG_RELEASE}'s PrefillDelayer" in lines[0]


@pytest.mark.parametrize("env", [{}, {"PREFILL_DELAYER_PROFILE": ""}])
def test_plugin_does_nothing_without_the_variable(env: dict[str, str]) -> None:
    done = run_python(_LOAD, env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["module"] == THEIRS and out["importer"] == THEIRS and not out["replaced"]
    assert "prefill-delayer active" not in done.stderr
    assert "prefill_delayer" in done.stderr  # the entry point was found and run, and chose to do nothing


@pytest.mark.parametrize("env", [{"PREFILL_DELAYER_PARAMS": "quorum_percent=75"},
                                 {"PREFILL_DELAYER_PROFILE": "", "PREFILL_DELAYER_PARAMS": "quorum_percent=75"}])
def test_params_without_a_profile_stops_the_process_saying_it_needs_one(env: dict[str, str]) -> None:
    """The parameters are a profile's: without PREFILL_DELAYER_PROFILE they used to be dropped without a word, and
    SGLang's own delayer ran."""
    done = run_python(_LOAD, env)
    assert done.returncode == 1 and done.stdout == "", done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == ("prefill-delayer: PREFILL_DELAYER_PARAMS='quorum_percent=75' needs PREFILL_DELAYER_PROFILE, the profile "
                    "whose parameters they are (unset PREFILL_DELAYER_PARAMS for SGLang's own delayer)"), done.stderr
    assert "Traceback" not in done.stderr and "Failed to execute general plugin" not in done.stderr


@pytest.mark.parametrize("env, says", [
    ({"PREFILL_DELAYER_DECISION_LOG_MAX_MB": "64"},
     "PREFILL_DELAYER_DECISION_LOG_MAX_MB='64' needs PREFILL_DELAYER_DECISION_LOG, the decision log whose setting it is "
     "(set PREFILL_DELAYER_DECISION_LOG=DIR to write the log, or unset it)"),
    ({"PREFILL_DELAYER_DECISION_LOG": "logs", "PREFILL_DELAYER_DECISION_LOG_ROWS": "all"},
     "PREFILL_DELAYER_DECISION_LOG_ROWS='all': expected compact (the default) or full"),
])
def test_the_decision_logs_variables_are_checked_at_start_up(env: dict[str, str], says: str) -> None:
    """The delayer reads them when the scheduler builds it, after the model loads: a size without a log was taken
    without a word, a bad value was a traceback in SGLang's 'Scheduler hit an exception'. The plugin reads them as
    it registers, in every process that loads plugins (the launcher's first), and stops with one line."""
    done = run_python(_LOAD, {"PREFILL_DELAYER_PROFILE": "hardened", **env})
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert done.stderr.strip().splitlines()[-1] == f"prefill-delayer: {says}", done.stderr
    assert "Traceback" not in done.stderr and "Failed to execute general plugin" not in done.stderr


@pytest.mark.parametrize("env, given", [
    ({"PREFILL_DELAYER_DECISION_LOG": "logs"}, "PREFILL_DELAYER_DECISION_LOG='logs'"),
    ({"PREFILL_DELAYER_PROFILE": "", "PREFILL_DELAYER_DECISION_LOG": "logs", "PREFILL_DELAYER_DECISION_LOG_KEEP": "2"},
     "PREFILL_DELAYER_DECISION_LOG='logs', PREFILL_DELAYER_DECISION_LOG_KEEP='2'"),
    ({"PREFILL_DELAYER_DECISION_LOG_ROWS": "full"}, "PREFILL_DELAYER_DECISION_LOG_ROWS='full'"),
])
def test_the_decision_log_without_a_profile_stops_the_process_saying_it_needs_one(env: dict[str, str], given: str) -> None:
    """The log is this package's delayer's: without PREFILL_DELAYER_PROFILE SGLang's own delayer ran and the log the
    operator asked for was never written, without a word."""
    done = run_python(_LOAD, env)
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"prefill-delayer: {given} set without PREFILL_DELAYER_PROFILE: SGLang's own delayer writes no decision log (set "
        "PREFILL_DELAYER_PROFILE=sglang for the installed release's own profile, with its log, or unset the log's "
        "variables)"), done.stderr
    assert "Traceback" not in done.stderr and "Failed to execute general plugin" not in done.stderr


def test_the_way_out_the_message_gives_is_taken_at_start_up(tmp_path: Path) -> None:
    """The way out the line above gives, PREFILL_DELAYER_PROFILE=sglang beside the log's variable, starts."""
    done = run_python(_LOAD, {"PREFILL_DELAYER_PROFILE": "sglang", "PREFILL_DELAYER_DECISION_LOG": str(tmp_path)})
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("setting, says", [
    ("nonsense", "unknown profile 'nonsense': expected one of seed, sglang-0.5.17, sglang-0.5.19, sglang-0.5.22, hardened"),
    ("sglang-0.5.13", "unknown profile 'sglang-0.5.13'"),
    ("Hardened", "unknown profile 'Hardened'"),
])
def test_a_bad_value_stops_the_process_with_one_clear_line(setting: str, says: str) -> None:
    done = run_python(_LOAD, {"PREFILL_DELAYER_PROFILE": setting})
    assert done.returncode == 1 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"prefill-delayer: PREFILL_DELAYER_PROFILE={setting!r}: ") and says in last, done.stderr
    assert "Traceback" not in done.stderr and "Failed to execute general plugin" not in done.stderr


def test_the_plugin_sets_the_profiles_own_parameters_and_stops_on_a_bad_one() -> None:
    """PREFILL_DELAYER_PARAMS sets the parameters SGLang keeps nowhere (aligned's quorum_percent), bound on the class
    SGLang builds, and the line names them; a bad one stops the process at start-up with one line naming it."""
    script = textwrap.dedent(_LOAD) + "print(json.dumps(dict(pd.PrefillDelayer.params)))\n"
    done = run_python(script, {"PREFILL_DELAYER_PROFILE": "aligned", "PREFILL_DELAYER_PARAMS": "quorum_percent=75"})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"quorum_percent": 75}
    assert "profile aligned (PREFILL_DELAYER_PROFILE=aligned), spec " in done.stderr
    assert "; parameters quorum_percent=75" in done.stderr, done.stderr
    for params, says in [
        ("quorum_percent=0", "PREFILL_DELAYER_PARAMS: invalid quorum_percent=0: expected none (off) or an integer in "
                             "[1, 100]"),
        ("long_chunk_tokens=100", "PREFILL_DELAYER_PARAMS: 'long_chunk_tokens' is not a parameter of profile 'aligned' "
                                  "that SGLang leaves to the policy (those are: busy_watermark, chunk_hold_tokens, "
                                  "low_load_watermark, quorum_percent)"),
        ("chunk_hold_tokens=-1", "PREFILL_DELAYER_PARAMS: invalid chunk_hold_tokens=-1: expected none (off) or an "
                                 "integer in [0, "),
        ("busy_watermark=0.2", "PREFILL_DELAYER_PARAMS: busy_watermark=0.2 must be above low_load_watermark=0.28 (a "
                               "rank below the watermark is never a busy one), or none to turn the busy rule off"),
        ("quorum_percent", "PREFILL_DELAYER_PARAMS: expected NAME=VALUE, got 'quorum_percent'"),
        ("quorum_percent=50,quorum_percent=75", "PREFILL_DELAYER_PARAMS: quorum_percent given twice"),
        # a part lost between commas was skipped: 'quorum_percent=75,' ran with the one parameter, ',' with none
        ("quorum_percent=75,", "PREFILL_DELAYER_PARAMS: expected NAME=VALUE[,NAME=VALUE], got 'quorum_percent=75,', "
                               "which has an empty part"),
    ]:
        done = run_python(_LOAD, {"PREFILL_DELAYER_PROFILE": "aligned", "PREFILL_DELAYER_PARAMS": params})
        assert done.returncode == 1 and done.stdout == "", (params, done.stderr)
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("prefill-delayer: PREFILL_DELAYER_PROFILE='aligned': ") and says in last, (params, last)
        assert "Traceback" not in done.stderr


# A scheduler module (SGLang's own does not import here) whose init_schedule_policy decides as the case says: a delayer
# built or none. The flag is in two places, given apart: SGLang's runtime context (where 0.5.17 on reads it) and the
# scheduler's server_args (where 0.5.14-0.5.16 read it); the plugin must read the one its release reads.
_START_UP = """
    import logging, os, sys, types
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
    import sglang
    sglang.__version__ = os.environ["RELEASE"]
    import torch.distributed as dist
    from sglang_harness import layout_widths, publish_context

    class Scheduler:
        def __init__(self):
            self.server_args = types.SimpleNamespace(enable_prefill_delayer=os.environ["ARGS_FLAG"] == "1")
        def init_schedule_policy(self):
            self.prefill_delayer = object() if os.environ["BUILT"] == "1" else None
        def _should_defer_prefill(self, running_batch):  # 0.5.23's, which the plugin hooks too
            return False
    module = types.ModuleType("sglang.srt.managers.scheduler")
    module.Scheduler = Scheduler
    sys.modules[module.__name__] = module
    from sglang.srt.plugins import load_plugins
    load_plugins()
    dist.init_process_group("gloo", init_method="file://" + os.environ["INIT_FILE"], rank=0, world_size=1)
    try:
        publish_context(0, 1, layout_widths(1), {"enable_prefill_delayer": os.environ["CONTEXT_FLAG"] == "1"})
        Scheduler().init_schedule_policy()
    finally:
        dist.destroy_process_group()
    print("went on")
"""


@pytest.mark.parametrize("release, profile, context_flag, args_flag, built, stops", [
    ("0.5.23", "hardened", False, True, False, True),  # no flag: SGLang built none, the profile would decide nothing
    ("0.5.23", "hardened", True, False, False, False),  # the flag, none built: SGLang's own decision (decode), logged
    ("0.5.23", "hardened", True, False, True, False),
    ("0.5.23", None, False, False, False, False),  # no profile: SGLang's own way, nothing hooked
    ("0.5.16", "hardened", True, False, False, True),  # 0.5.14-0.5.16 read the flag off server_args
    ("0.5.16", "hardened", False, True, False, False),
])
def test_a_profile_where_the_scheduler_builds_no_delayer_for_want_of_the_flag_stops_it(
        tmp_path: Path, release: str, profile: Any, context_flag: bool, args_flag: bool, built: bool, stops: bool) -> None:
    """PREFILL_DELAYER_PROFILE set and --enable-prefill-delayer not: the scheduler went on without a delayer, the
    profile deciding nothing, and nothing said so. The plugin's AFTER hook on Scheduler.init_schedule_policy (applied
    by SGLang's own load_plugins) stops it with one line where no delayer was built and the flag, read where the
    release reads it, is unset."""
    from prefill_delayer.integrations.sglang.enablement import missing_flag

    env = {"RELEASE": release, "CONTEXT_FLAG": str(int(context_flag)), "ARGS_FLAG": str(int(args_flag)),
           "BUILT": str(int(built)), "INIT_FILE": str(tmp_path / "init")}
    done = run_python(_START_UP, {**env, **({} if profile is None else {"PREFILL_DELAYER_PROFILE": profile})})
    if stops:
        assert done.returncode == 1 and done.stdout == "", done.stderr
        assert done.stderr.strip().splitlines()[-1] == missing_flag(profile), done.stderr
        assert "Traceback" not in done.stderr
    else:
        assert done.returncode == 0 and done.stdout == "went on\n", done.stderr
    hooked = "Applied 1 hook(s) to sglang.srt.managers.scheduler.Scheduler.init_schedule_policy"
    assert (hooked in done.stderr) == (profile is not None), done.stderr


def test_the_readme_shows_the_line_a_scheduler_without_the_flag_stops_with() -> None:
    from prefill_delayer.integrations.sglang.enablement import missing_flag

    assert f"\n{missing_flag('aligned')}\n" in (TESTS.parent / "README.md").read_text(encoding="utf-8")


def test_sglang_means_the_installed_release_and_an_unknown_one_stops() -> None:
    script = "import sglang; sglang.__version__ = '0.5.99'\n" + textwrap.dedent(_LOAD)
    done = run_python(script, {"PREFILL_DELAYER_PROFILE": "sglang"})
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "the installed SGLang, 0.5.99, which is not a release this package knows" in last
    assert "sglang-0.5.23" in last and "hardened" in last
    # A named profile still needs a release whose constructor we know.
    done = run_python(script, {"PREFILL_DELAYER_PROFILE": "hardened"})
    assert done.returncode == 1 and "the installed SGLang is 0.5.99" in done.stderr.strip().splitlines()[-1]


def test_a_profile_that_reads_the_chunk_is_refused_where_add_chunked_req_does_not_negotiate() -> None:
    """aligned reads the chunk in flight at PrefillAdder.add_chunked_req, which negotiates from SGLang 0.5.17 on: on
    0.5.16 the plugin stops the process with one line saying so, rather than run aligned blind to the chunk."""
    script = "import sglang; sglang.__version__ = '0.5.16'\n" + textwrap.dedent(_LOAD)
    done = run_python(script, {"PREFILL_DELAYER_PROFILE": "aligned"})
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("prefill-delayer: PREFILL_DELAYER_PROFILE='aligned': profile 'aligned': the policy reads "
                           "chunk_tokens_left from SGLang's scheduler at PrefillAdder.add_chunked_req, read for SGLang "
                           "0.5.17, "), last
    assert last.endswith("only; SGLang 0.5.16's does not negotiate there"), last
    assert "Traceback" not in done.stderr
    done = run_python(script, {"PREFILL_DELAYER_PROFILE": "hardened"})  # a profile that reads nothing runs there
    assert done.returncode == 0, done.stderr


def test_install_hooks_aligneds_readings_and_refuses_where_they_do_not_load() -> None:
    """install("aligned") reads the chunk and the queue where the plugin does: without SGLang's schedule_policy (or
    its scheduler) loadable it refuses, naming the method, and replaces nothing; with them, add_chunked_req hands the
    chunk's tokens left, and _get_new_batch_prefill_raw the waiting queue's length, to the pass's executor before the
    method runs, once however often install is called."""
    done = run_python("""
        import json, logging, sys, types
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
        import sglang.srt.managers.prefill_delayer as pd
        from prefill_delayer.integrations.sglang import install
        from prefill_delayer.integrations.sglang.plugin import PluginError
        theirs = pd.PrefillDelayer
        try:
            install("aligned")
        except PluginError as err:
            refused = (str(err), pd.PrefillDelayer is theirs)
        seen = []
        class PrefillAdder:  # schedule_policy's, as far as the hook reads it
            def __init__(self, executor):
                self.prefill_delayer_single_pass = executor
            def add_chunked_req(self, req):
                seen.append("method")
                return req
        module = types.ModuleType("sglang.srt.managers.schedule_policy")
        module.PrefillAdder = PrefillAdder
        sys.modules[module.__name__] = module
        try:
            install("aligned")
        except PluginError as err:
            refused_queue = (str(err), pd.PrefillDelayer is theirs)
        class Scheduler:  # scheduler's, as far as the hook reads it
            def __init__(self, waiting):
                self.waiting_queue = waiting
            def _get_new_batch_prefill_raw(self, prefill_delayer_single_pass, running_batch):
                seen.append("raw")
                return None, running_batch
            def _should_defer_prefill(self, running_batch):  # 0.5.23's, which install guards too
                return False
        module = types.ModuleType("sglang.srt.managers.scheduler")
        module.Scheduler = Scheduler
        sys.modules[module.__name__] = module
        install("aligned")
        install("aligned")
        class Executor:
            def read_from_scheduler(self, name, value):
                seen.append((name, value))
        Scheduler(["a", "b", "c"])._get_new_batch_prefill_raw(prefill_delayer_single_pass=Executor(), running_batch=None)
        Scheduler(["a"])._get_new_batch_prefill_raw(prefill_delayer_single_pass=None, running_batch=None)
        req = types.SimpleNamespace(full_untruncated_fill_ids=[5] * 1000, prefix_len=256)
        PrefillAdder(Executor()).add_chunked_req(req)
        PrefillAdder(None).add_chunked_req(req)  # no delayer this pass: nothing to hand it to
        print(json.dumps({"refused": refused, "refused_queue": refused_queue, "seen": seen,
                          "profile": pd.PrefillDelayer.profile}))
    """, {})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["refused"][0].startswith("profile 'aligned' reads chunk_tokens_left at PrefillAdder.add_chunked_req, "
                                        "which does not load here (ModuleNotFoundError"), out["refused"]
    assert out["refused"][1], "install replaced SGLang's class before it refused"
    assert out["refused_queue"][0].startswith("profile 'aligned' reads waiting_at_start at "
                                              "Scheduler._get_new_batch_prefill_raw, which does not load here ")
    assert out["refused_queue"][1], "install replaced SGLang's class before it refused"
    assert out["seen"] == [["waiting_at_start", 3], "raw", "raw", ["chunk_tokens_left", 744], "method", "method"], out
    assert out["profile"] == "aligned", out
    assert "PrefillAdder.add_chunked_req hooked: reads chunk_tokens_left" in done.stderr
    assert "Scheduler._get_new_batch_prefill_raw hooked: reads waiting_at_start" in done.stderr
    # the installed SGLang is 0.5.23: its executor keeps aligned's own max_prefill_bs, and the line says so
    assert ("; max_prefill_bs: its own decay mark, from the executor's finalize(actual_prefill_bs=), in place of the "
            "scheduler's") in done.stderr


def test_install_holds_a_refused_chunk_at_add_chunked_req_with_chunk_hold_tokens() -> None:
    """With chunk_hold_tokens set, install("aligned") hooks add_chunked_req AROUND: it hands the chunk's tokens left to
    the pass's executor, and while more than the threshold is left it negotiates first, with add_chunked_req's own
    arguments; on a refusal whose view has every counted rank with prefill work it returns the request unadded
    without running the method (SGLang's parked chunk). Otherwise (a rank with no work, allowed, at or below the
    threshold, a diffusion LM's chunk, or no delayer) the method runs as it would. The line names the hold."""
    done = run_python("""
        import json, logging, sys, types
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
        from prefill_delayer.integrations.sglang import install
        seen = []
        class PrefillAdder:  # schedule_policy's, as far as the hook reads it
            def __init__(self, executor, dllm_config=None):
                self.prefill_delayer_single_pass = executor
                self.dllm_config = dllm_config
                self.running_batch = types.SimpleNamespace(batch_size=lambda: 3)
                self.max_prefill_bs, self.max_running_requests, self.waiting_queue_len = 5, 8, 2
            def add_chunked_req(self, req):
                seen.append("method")
                return None
        module = types.ModuleType("sglang.srt.managers.schedule_policy")
        module.PrefillAdder = PrefillAdder
        sys.modules[module.__name__] = module
        class Scheduler:
            def _get_new_batch_prefill_raw(self, prefill_delayer_single_pass, running_batch):
                return None, running_batch
            def _should_defer_prefill(self, running_batch):
                return False
        module = types.ModuleType("sglang.srt.managers.scheduler")
        module.Scheduler = Scheduler
        sys.modules[module.__name__] = module
        install("aligned", params={"chunk_hold_tokens": 500})
        install("aligned", params={"chunk_hold_tokens": 500})
        class Executor:
            def __init__(self, allow, work=2):
                self.allow, self.work = allow, work
            def read_from_scheduler(self, name, value):
                seen.append((name, value))
            def negotiate_should_allow_prefill(self, **kwargs):
                seen.append(sorted(kwargs.items()))
                return self.allow
            def pass_view(self):  # aligned's test: every counted rank has prefill work
                seen.append("view")
                return types.SimpleNamespace(num_work=self.work, n=2)
        def chunk(left):
            return types.SimpleNamespace(full_untruncated_fill_ids=[5] * (256 + left), prefix_len=256)
        results = []
        for executor, left, dllm in [(Executor(False), 744, None), (Executor(False, work=1), 744, None),
                                     (Executor(True), 744, None), (Executor(False), 500, None),
                                     (Executor(False), 744, "dllm"), (None, 744, None)]:
            seen.append("--")
            req = chunk(left)
            results.append(PrefillAdder(executor, dllm).add_chunked_req(req) is req)
        print(json.dumps({"seen": seen, "results": results}))
    """, {})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    asked = [["local_prefillable", True], ["max_prefill_bs", 5], ["max_running_requests", 8], ["running_batch", 3],
             ["waiting_queue_len", 2]]
    assert out["seen"] == [
        "--", ["chunk_tokens_left", 744], asked, "view",  # refused, over 500 left, all have work: parked, no method
        "--", ["chunk_tokens_left", 744], asked, "view", "method",  # refused, but a rank with no work: it goes on
        "--", ["chunk_tokens_left", 744], asked, "method",  # allowed: the method adds the chunk
        "--", ["chunk_tokens_left", 500], "method",  # at the threshold: no hold, SGLang's call negotiates
        "--", ["chunk_tokens_left", 744], "method",  # a diffusion LM's chunk is never held
        "--", "method",  # no delayer this pass
    ], out["seen"]
    assert out["results"] == [True, False, False, False, False, False], out["results"]
    assert ("PrefillAdder.add_chunked_req hooked: reads chunk_tokens_left; a refusal parks the chunk while more than "
            "500 prompt tokens are left") in done.stderr, done.stderr


def test_install_replaces_by_hand_and_refuses_a_bad_profile_without_replacing() -> None:
    done = run_python("""
        import json
        import sglang.srt.managers.prefill_delayer as pd
        from sglang.srt.managers.prefill_delayer import PrefillDelayer as early
        from prefill_delayer.integrations.sglang import install
        from prefill_delayer.spec import ConfigError
        theirs = pd.PrefillDelayer
        try:
            install("nonsense")
        except ConfigError as err:
            refused = (str(err), pd.PrefillDelayer is theirs)
        delayer, executor = install("hardened")
        from sglang.srt.managers.prefill_delayer import PrefillDelayer as late
        print(json.dumps({"refused": refused, "early": early is delayer, "late": late is delayer,
                          "executor": pd.PrefillDelayerSinglePassExecutor is executor, "profile": delayer.profile}))
    """, {})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert "unknown profile 'nonsense'" in out["refused"][0] and out["refused"][1]
    assert out["early"] and out["late"] and out["executor"] and out["profile"] == "hardened"


def test_the_installed_scheduler_imports_the_names_and_loads_plugins_first() -> None:
    """What the REPLACE relies on, read off the installed scheduler.py: ``from ... import`` and ``load_plugins()`` first."""
    import importlib.util

    spec = importlib.util.find_spec("sglang.srt.managers")
    assert spec is not None and spec.submodule_search_locations
    tree = ast.parse((Path(list(spec.submodule_search_locations)[0]) / "scheduler.py").read_text())
    imported = {a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "sglang.srt.managers.prefill_delayer"
                for a in n.names}
    assert {"PrefillDelayer", "PrefillDelayerSinglePassExecutor"} <= imported
    entry = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_scheduler_process")
    first = entry.body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Call) and ast.unparse(first.value) == "load_plugins()"
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == "PrefillDelayer"]
    assert len(calls) == 1 and sorted(k.arg for k in calls[0].keywords) == [
        "debug_log_enabled", "max_delay_passes", "metrics_collector", "token_usage_low_watermark"]


# ----- side by side on gloo ranks ----------------------------------------------------------------

SCHEDULE = {"prefill_delayer_queue_min_ratio": 0.5, "prefill_delayer_max_delay_ms": 50.0, "prefill_max_requests": 6}
MAX_DELAY_PASSES = 5
WATERMARK = 0.3
# Single-feature profiles, registered in the ranks only: 0.5.22 plus one of hardened's own features.
VARIANTS = {"gathered-max-running-requests": "test-0.5.22+gathered-mrr", "skip-slot-only": "test-0.5.22+skip-slot-only"}


def make_trace(seed: int, world: int, passes: int) -> list[dict[str, Any]]:
    """Random passes: a shared time step, and per rank its inputs, negotiate calls and batch size."""
    rng = random.Random(seed)
    trace = []
    for _ in range(passes):
        ranks = []
        for _ in range(world):
            prefillable = rng.random() < 0.75
            wq = rng.randint(0, 10)
            ranks.append({
                "prefillable": prefillable, "usage": rng.choice([0.1, 0.6, 0.9, 0.9]),
                "rb": rng.randint(0, 20), "pb": rng.randint(0, 10), "mrr": rng.choice([12, 16, 24, 32]), "wq": wq,
                "calls": rng.choice([1, 1, 2]) if prefillable else rng.choice([0, 0, 1]), "bs": rng.randint(1, max(wq, 1)),
            })
        trace.append({"dt": rng.choice([0.0, 0.004, 0.012, 0.03, 0.07]), "ranks": ranks})
    return trace


def _register_variants() -> None:
    from delayer_spec import profiles as p
    from delayer_spec import register_profile

    base = p.PROFILE_BY_NAME["sglang-0.5.22"]
    assert base.features | {p.GATHERED_MRR, p.SKIP_SLOT_ONLY} == p.PROFILE_BY_NAME["hardened"].features
    for feature, name in VARIANTS.items():
        register_profile(p.Profile(name, base.features | {feature}, (), f"test: sglang-0.5.22 plus {feature}"))


def _one_pass(executor_cls: Any, delayer: Any, rec: Recorder, logs: list[str], r: dict[str, Any]) -> list[Any]:
    """One scheduler pass as SGLang's scheduler drives it; what it returned, recorded and logged."""
    n_metrics, n_logs = len(rec.calls), len(logs)
    ex = executor_cls(delayer, r["usage"])
    allows = []
    for i in range(r["calls"]):
        rb, wq = (r["rb"], r["wq"]) if i == 0 else (r["rb"] + 1, max(r["wq"] - 1, 0))
        allows.append(ex.negotiate_should_allow_prefill(r["prefillable"], rb, r["pb"], r["mrr"], wq))
    actual = r["bs"] if allows and allows[0] and r["prefillable"] else 0
    returned = ex.finalize(actual_prefill_bs=actual)
    return [allows, list(decision_tuple(ex._result)), returned, rec.calls[n_metrics:], logs[n_logs:]]


class _Lines(logging.Handler):
    def __init__(self, out: list[str]) -> None:
        super().__init__(logging.INFO)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        self.out.append(record.getMessage())


def _side_by_side_scenario(rank: int, world: int, layouts: list[dict[str, Any]], traces: list[list[dict[str, Any]]]) -> dict:
    os.environ["SGLANG_PREFILL_DELAYER_DEBUG_LOG"] = "1"  # before SGLang's module is imported: it reads it then
    clock = Clock(rate=1.0 + 0.15 * rank, offset=1000.0 + 7.0 * rank)  # this rank's clock, skewed against the others
    theirs_mod = their_module(clock)
    import prefill_delayer.runtime.metrics as our_metrics

    our_metrics._DEBUG_LOG = True  # the forkserver imported it before the variable was set
    from prefill_delayer.integrations.sglang import PrefillDelayer, PrefillDelayerSinglePassExecutor

    _register_variants()
    logs: list[str] = []
    for name in ("sglang.srt.managers.prefill_delayer", "prefill_delayer.runtime.metrics"):
        lg = logging.getLogger(name)
        lg.setLevel(logging.INFO)
        lg.addHandler(_Lines(logs))
    out: dict[str, Any] = {}
    for li, layout in enumerate(layouts):
        ctx = publish_context(rank, world, layout, SCHEDULE)
        debug = ctx["attn_tp_rank"] == 0  # as SGLang's scheduler passes it
        for ti, trace in enumerate(traces):
            recs = {k: Recorder() for k in ("theirs", "ours", "hardened", *VARIANTS)}
            theirs = theirs_mod.PrefillDelayer(max_delay_passes=MAX_DELAY_PASSES, token_usage_low_watermark=WATERMARK,
                                               metrics_collector=recs["theirs"], debug_log_enabled=debug)
            ours = PrefillDelayer(MAX_DELAY_PASSES, WATERMARK, recs["ours"], debug, clock=clock)
            others = {k: PrefillDelayer(MAX_DELAY_PASSES, WATERMARK, recs[k], False, clock=clock, profile=p)
                      for k, p in (("hardened", "hardened"), *VARIANTS.items())}
            rows: dict[str, list] = {k: [] for k in recs}
            for step in trace:
                clock.t += step["dt"]
                r = step["ranks"][rank]
                for k, d in others.items():  # each from the state SGLang's delayer is in (ours is in the same)
                    d.core._state = ours.core.state
                    rows[k].append(_one_pass(PrefillDelayerSinglePassExecutor, d, recs[k], [], r))
                rows["theirs"].append(_one_pass(theirs_mod.PrefillDelayerSinglePassExecutor, theirs, recs["theirs"], logs, r))
                rows["ours"].append(_one_pass(PrefillDelayerSinglePassExecutor, ours, recs["ours"], logs, r))
            out[f"{li}/{ti}"] = {**rows, "ctx": ctx, "their_skip": theirs.skip_first_delayer, "our_skip": ours.skip_first_delayer}
    return out


def _check_side_by_side(outs: list[dict], n_layouts: int, n_traces: int) -> dict[str, int]:
    """Every rank: ours == theirs on every pass; hardened differs only where a feature applies. Counts by feature."""
    counts = {"passes": 0, "hardened differs": 0, **{f: 0 for f in VARIANTS}, "both": 0, "debug lines": 0}
    for key in (f"{li}/{ti}" for li in range(n_layouts) for ti in range(n_traces)):
        for rank, out in enumerate(outs):
            o = out[key]
            assert o["ours"] == o["theirs"], f"{key} rank {rank}: ours differs from SGLang's own"
            assert o["our_skip"] == o["their_skip"]
            for k, theirs in enumerate(o["theirs"]):
                counts["passes"] += 1
                counts["debug lines"] += len(theirs[4])
                applies = {f for f, name in VARIANTS.items() if o[f][k][:4] != theirs[:4]}
                hardened = o["hardened"][k][:4]
                where = f"{key} pass {k} rank {rank} ({o['ctx']})"
                if hardened != theirs[:4]:
                    counts["hardened differs"] += 1
                    assert applies, f"{where}: hardened differs with no feature applying: {hardened} vs {theirs}"
                    for f in applies:
                        counts[f] += 1
                    if len(applies) == 1:
                        (f,) = applies
                        assert hardened == o[f][k][:4], f"{where}: hardened is not what {f} alone gives"
                    else:
                        counts["both"] += 1
                else:
                    assert not applies or len(applies) == 2, f"{where}: {applies} applies yet hardened agrees"
    return counts


@pytest.mark.multiprocess
@pytest.mark.parametrize("world, layouts", [
    (2, [layout_widths(2, attn_dp_size=2), layout_widths(2, dp_size=2)]),
    (4, [layout_widths(4, attn_dp_size=2), layout_widths(4, attn_cp_size=2)]),
], ids=["world2-dpattn-on-off", "world4-attntp2-dpattn-on-off-cp2"])
def test_ours_and_sglangs_own_side_by_side_on_gloo_ranks(world: int, layouts: list[dict[str, Any]]) -> None:
    traces = [make_trace(seed, world, 60) for seed in (world * 100 + s for s in range(3))]
    outs = results(spawn_gloo(world, _side_by_side_scenario, layouts, traces, timeout_s=240.0))
    ctx = [outs[0][f"{li}/0"]["ctx"] for li in range(len(layouts))]
    assert [c["attn_dp_enabled"] for c in ctx] == [True, False]
    assert all(c["attn_tp_size"] == (2 if world == 4 or not c["attn_dp_enabled"] else 1) for c in ctx)
    counts = _check_side_by_side(outs, len(layouts), len(traces))
    print(f"world {world}: {counts}")
    assert counts["hardened differs"] > 0 and all(counts[f] > 0 for f in VARIANTS), counts  # the check can fail
    assert counts["debug lines"] > 0


# ----- the runtime's failure cases, through the shell --------------------------------------------


def _failures_scenario(rank: int, world: int) -> dict[str, Any]:
    from prefill_delayer.integrations.sglang import PrefillDelayer, PrefillDelayerSinglePassExecutor
    from prefill_delayer.runtime import ConfigMismatchError, PeerInputError

    publish_context(rank, world, layout_widths(world, attn_dp_size=world), SCHEDULE)
    out: dict[str, Any] = {}
    d = PrefillDelayer(3, 0.5)
    ex = PrefillDelayerSinglePassExecutor(d, 0.9)
    ex.negotiate_should_allow_prefill(rank == 0, 0, 0, 16, 2)
    out["first"] = ex.finalize(actual_prefill_bs=0)  # mixed: delayed, and the attempt estimate comes back
    before = d.state
    ex = PrefillDelayerSinglePassExecutor(d, 0.9)
    try:
        ex.negotiate_should_allow_prefill(True, 0, 0, 16, -3 if rank == 1 else 2)
    except PeerInputError as err:
        out["bad"] = error_info(err)
    out["kept"] = d.state == before and d.passes == 1 and before.control == "delaying"
    ex = PrefillDelayerSinglePassExecutor(d, 0.9)
    out["after"] = (ex.negotiate_should_allow_prefill(True, 0, 0, 16, 2), ex._result.output_reason)
    ex.finalize(actual_prefill_bs=2)
    mismatched = PrefillDelayer(3 + rank, 0.5)
    try:
        PrefillDelayerSinglePassExecutor(mismatched, 0.9).finalize(actual_prefill_bs=0)
    except ConfigMismatchError as err:
        out["mismatch"] = error_info(err)
    out["mismatch_kept"] = mismatched.passes == 0
    return out


@pytest.mark.multiprocess
def test_bad_input_and_config_mismatch_through_the_shell() -> None:
    outs = results(spawn_gloo(2, _failures_scenario))
    for rank, o in enumerate(outs):
        assert o["first"] == (2 if rank == 0 else 0)  # the attempt estimate: min(waiting 2, free slots 16); none on rank 1
        assert o["bad"]["type"] == "PeerInputError" and o["bad"]["attrs"]["bad_fields"] == {1: ("waiting_queue_len",)}
        assert o["bad"]["message"] == outs[0]["bad"]["message"] and "pass 2" in o["bad"]["message"]
        assert o["kept"] and o["after"] == (True, "wait_success")
        assert o["mismatch"]["type"] == "ConfigMismatchError" and o["mismatch"]["message"] == outs[0]["mismatch"]["message"]
        assert o["mismatch_kept"]


def _dead_peer_scenario(rank: int, world: int) -> dict[str, Any]:
    import time

    from prefill_delayer.integrations.sglang import PrefillDelayer, PrefillDelayerSinglePassExecutor
    from prefill_delayer.runtime import CollectiveError

    publish_context(rank, world, layout_widths(world, attn_dp_size=world), SCHEDULE, gloo_timeout_s=COLLECTIVE_TIMEOUT_S)
    d = PrefillDelayer(5, None)
    ex = PrefillDelayerSinglePassExecutor(d, 0.9)
    ex.negotiate_should_allow_prefill(rank != 0, 0, 0, 16, 2)
    ex.finalize(actual_prefill_bs=0)
    if rank == world - 1:
        os._exit(0)  # dies between passes, as a crashed scheduler would
    before, t0 = d.state, time.monotonic()
    try:
        PrefillDelayerSinglePassExecutor(d, 0.9).negotiate_should_allow_prefill(True, 0, 0, 16, 2)
    except CollectiveError as err:
        return {"elapsed": time.monotonic() - t0, "error": error_info(err), "kept": d.state == before}
    return {"elapsed": time.monotonic() - t0, "error": None}


@pytest.mark.multiprocess
def test_dead_peer_through_the_shell() -> None:
    out = spawn_gloo(3, _dead_peer_scenario, destroy=False)
    assert out[2] == ("exit", 0)
    for rank in (0, 1):
        status, o = out[rank]
        assert status == "ok" and o["error"] is not None, o
        assert o["elapsed"] < COLLECTIVE_TIMEOUT_S + 2.0 and o["kept"]
        assert o["error"]["attrs"]["pass_number"] == 2 and "cpu_group (gloo, 3 ranks" in o["error"]["message"]


@pytest.mark.multiprocess
def test_benchmark_script_runs_and_counts_host_reads() -> None:
    """A smoke run (few passes): the script must keep working; its timings are not judged here, its counts are."""
    done = subprocess.run([sys.executable, "-m", "prefill_delayer.benchmarks.sglang_shell", "--passes", "8", "--rounds", "1"],
                          capture_output=True, text=True, timeout=240, env={**os.environ, "OMP_NUM_THREADS": "1"})
    last = done.stdout.splitlines()[-1]
    assert (done.returncode, last.startswith("every target met")) in ((0, True), (1, False)), done.stderr  # noise decides
    rows = [line.split() for line in done.stdout.splitlines() if line.split()[:1] in (["wall"], ["cpu"])]
    assert [r[0] for r in rows] == ["wall", "cpu"] and all(float(x) >= 0 for r in rows for x in r[1:4]), done.stdout
    reads = next(line for line in done.stdout.splitlines() if line.startswith("host reads per pass"))
    assert "ours 0.00" in reads and float(reads.rsplit("theirs ", 1)[1]) >= 1.0, reads  # theirs reads back per pass


def test_the_readme_check_runs_as_written() -> None:
    readme = (TESTS.parent / "README.md").read_text()
    section = readme.split("## Use it in SGLang", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0].strip() for b in section.split("```bash\n")[1:]]
    check = next(b for b in blocks if b.startswith("PREFILL_DELAYER_PROFILE=hardened python -c"))
    env = {k: v for k, v in os.environ.items() if k not in ("PREFILL_DELAYER_PROFILE", "SGLANG_PLUGINS")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    done = subprocess.run(["bash", "-c", check], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "prefill_delayer.integrations.sglang.shell hardened"
    assert "prefill_delayer.integrations.sglang.shell hardened" in section  # what the README says it prints
