"""Bad input to the command is one line on stderr and exit 2, never a traceback.

No test here runs a Z3 proof: ``prove``'s option checks must fail before any
proof starts (``run_parallel`` is made to raise, and each call is timed).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from prefill_delayer.cli import build_parser
from prefill_delayer.cli import main as cli
from prefill_delayer.cli.checks import prove_problem
from prefill_delayer.traces.replay import run_trace
from prefill_delayer.traces.format import TraceError, load_trace, trace_file, validate_trace
from prefill_delayer.spec.registry import all_profiles
from prefill_delayer.traces.violations import replayable
from delayer_spec import POLICY
from delayer_spec import MAX_COUNT
from delayer_spec import PROFILES

CHECKS = replayable(POLICY)

DELETE = object()  # a mutation that removes the key
INT64_MAX = 2**63 - 1


def good_trace(profile: str = "seed") -> dict[str, Any]:
    """Two passes on two DP-attention ranks; on the seed the second pass delays past max_delay_passes=1.

    The slot trigger holds (8 - 7 < 2); the first pass spends the one-shot skip.
    """
    rank = {"prefillable": True, "token_usage": 0.5, "running_batch": 7, "max_prefill_bs": 2, "waiting_queue_len": 1,
            "max_running_requests": 8, "now_s": 0.0}
    allow = {"allow": True, "reason": "no_wait", "wait_forward_passes": 0}
    delay = {"allow": False, "reason": "delay", "wait_forward_passes": 0}
    return {
        "property": "bounded-delay",
        "profile": profile,
        "config": {"dp_size": 2, "attn_tp_size": 1, "attn_cp_size": 1, "enable_dp_attention": True, "max_delay_passes": 1,
                   "token_usage_low_watermark": None, "queue_min_ratio": None, "max_delay_ms": 5000.0,
                   "prefill_max_requests": None},
        "passes": [
            {"ranks": [dict(rank), dict(rank)], "expect": [dict(allow), dict(allow)]},
            {"ranks": [dict(rank), dict(rank)], "expect": [dict(delay), dict(delay)]},
        ],
        "violation": "rank 0 delays 1 consecutive passes (passes 1..1), more than max(max_delay_passes - 1, 0) = 0",
    }


def mutated(path: tuple, value: Any, **top: Any) -> dict[str, Any]:
    """``good_trace`` with the entry at ``path`` set to ``value`` (or removed), and top-level keys replaced."""
    trace = good_trace()
    trace.update(top)
    if not path:
        return trace
    obj: Any = trace
    for key in path[:-1]:
        obj = obj[key]
    if value is DELETE:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return trace


def _replay(capsys: pytest.CaptureFixture, path: Path) -> tuple[int, str, str]:
    code = cli(["replay", str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_clean_failure(code: int, out: str, err: str, prefix: str, fragment: str) -> None:
    """Exit 2, one line on stderr that starts with ``prefix`` and contains ``fragment``, no traceback."""
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    assert err.startswith(prefix), err
    assert fragment in err, err
    assert err.count("\n") == 1, err


R1 = ("passes", 1, "ranks", 1)
E0 = ("passes", 0, "expect", 0)
CP_LAYOUT = {"profile": "sglang-0.5.22"}

# (id, path, value, top-level replacements, expected fragment of the message)
TRACE_CASES: list[tuple[str, tuple, Any, dict, str]] = [
    ("missing-key", ("passes",), DELETE, {}, "missing top-level key 'passes'"),
    ("missing-keys", ("config",), DELETE, {"violation": None}, "missing top-level key 'config'"),
    ("passes-empty", ("passes",), [], {}, "passes: expected at least one pass"),
    ("passes-not-list", ("passes",), {"ranks": []}, {}, "passes: expected an array, got an object"),
    ("passes-null", ("passes",), None, {}, "passes: expected an array, got null"),
    ("pass-not-object", ("passes", 1), [1, 2], {}, "passes[1]: expected an object, got an array"),
    ("pass-without-ranks", ("passes", 1, "ranks"), DELETE, {}, "passes[1]: missing field 'ranks'"),
    ("ranks-not-list", ("passes", 0, "ranks"), "two", {}, "passes[0].ranks: expected an array, got a string"),
    ("expect-not-list", ("passes", 1, "expect"), {"allow": True}, {}, "passes[1].expect: expected an array"),
    ("ranks-too-few", ("passes", 1, "ranks"), [], {}, "passes[1].ranks: expected 2 entries (one per rank: world size 2), got 0"),
    ("expect-too-many", ("passes", 0, "expect"), [{}] * 3, {}, "passes[0].expect: expected 2 entries"),
    ("ranks-vs-cp-world", ("config", "attn_cp_size"), 2, CP_LAYOUT, "passes[0].ranks: expected 4 entries (one per rank: world size 4)"),
    ("ranks-vs-tp-world", ("config", "attn_tp_size"), 3, {}, "world size 6"),
    ("ranks-without-dp-attention", ("config", "enable_dp_attention"), False, {}, "world size 1"),
    ("unknown-profile", (), None, {"profile": "sglang-9.9"}, "profile: unknown profile 'sglang-9.9': expected one of seed"),
    ("profile-not-string", (), None, {"profile": 3}, "profile: unknown profile 3"),
    ("unknown-property", (), None, {"property": "liveness"}, "property: unknown property \"liveness\"; replayable: "),
    ("property-null", (), None, {"property": None}, "property: unknown property null"),
    ("violation-not-string", (), None, {"violation": ["x"]}, "violation: expected a string, got an array"),
    ("config-not-object", ("config",), [1], {}, "config: expected an object, got an array"),
    ("config-lacks-cp", ("config", "attn_cp_size"), DELETE, {}, "config: missing field 'attn_cp_size'"),
    ("config-lacks-pmr", ("config", "prefill_max_requests"), DELETE, {}, "config: missing field 'prefill_max_requests'"),
    ("config-unknown-field", ("config", "attn_sp_size"), 1, {}, "config.attn_sp_size: unknown field"),
    ("config-dp-zero", ("config", "dp_size"), 0, {}, "config: invalid dp_size=0: expected integer in [1, 65536]"),
    ("config-cp-predates", ("config", "attn_cp_size"), 2, {}, "config: invalid attn_cp_size=2: profile 'seed' predates"),
    ("config-ratio-negative", ("config", "queue_min_ratio"), -1, {}, "config: invalid queue_min_ratio=-1"),
    ("config-bool-flag-int", ("config", "enable_dp_attention"), 1, {}, "config: invalid enable_dp_attention=1"),
    ("config-pmr-zero", ("config", "prefill_max_requests"), 0, {}, "config: invalid prefill_max_requests=0"),
    ("config-passes-fractional", ("config", "max_delay_passes"), 1.5, {}, "config: invalid max_delay_passes=1.5"),
    ("config-world-too-big", ("config", "dp_size"), 65536, {"profile": "sglang-0.5.22", "config": {
        **good_trace()["config"], "attn_cp_size": 2}}, "config: invalid layout: 131072 ranks"),
    ("rank-negative", R1 + ("running_batch",), -1, {}, "passes[1].ranks[1].running_batch: expected an integer in [0, 2147483647], got -1"),
    ("rank-fractional", R1 + ("running_batch",), 2.5, {}, "passes[1].ranks[1].running_batch: expected an integer in [0, 2147483647], got a number 2.5"),
    ("rank-integral-float", R1 + ("max_prefill_bs",), 3.0, {}, "passes[1].ranks[1].max_prefill_bs: expected an integer in [0, 2147483647], got a number 3.0"),
    ("rank-string", R1 + ("waiting_queue_len",), "4", {}, "passes[1].ranks[1].waiting_queue_len: expected an integer in [0, 2147483647], got a string \"4\""),
    ("rank-bool-for-int", R1 + ("max_running_requests",), True, {}, "passes[1].ranks[1].max_running_requests: expected an integer in [0, 2147483647], got a boolean true"),
    ("rank-int-for-bool", R1 + ("prefillable",), 1, {}, "passes[1].ranks[1].prefillable: expected true or false, got a number 1"),
    ("rank-null-for-bool", R1 + ("prefillable",), None, {}, "passes[1].ranks[1].prefillable: expected true or false, got null"),
    ("rank-nan-count", R1 + ("running_batch",), math.nan, {}, "passes[1].ranks[1].running_batch: expected an integer in [0, 2147483647], got a number NaN"),
    ("rank-above-max-count", R1 + ("max_running_requests",), MAX_COUNT + 1, {}, "max_running_requests: expected an integer in [0, 2147483647], got 2147483648"),
    ("rank-above-int64", R1 + ("waiting_queue_len",), INT64_MAX + 1, {}, "waiting_queue_len: expected an integer in [0, 2147483647], got 9223372036854775808"),
    ("token-usage-negative", R1 + ("token_usage",), -0.1, {}, "passes[1].ranks[1].token_usage: expected a finite number >= 0, got -0.1"),
    ("token-usage-nan", R1 + ("token_usage",), math.nan, {}, "passes[1].ranks[1].token_usage: expected a finite number >= 0, got NaN"),
    ("token-usage-inf", R1 + ("token_usage",), math.inf, {}, "passes[1].ranks[1].token_usage: expected a finite number >= 0, got Infinity"),
    ("token-usage-string", R1 + ("token_usage",), "0.5", {}, "token_usage: expected a finite number >= 0, got a string \"0.5\""),
    ("token-usage-bool", R1 + ("token_usage",), False, {}, "token_usage: expected a finite number >= 0, got a boolean false"),
    ("token-usage-above-int64", R1 + ("token_usage",), INT64_MAX + 1, {}, "token_usage: expected a finite number >= 0 and at most 9223372036854775807"),
    ("now-missing", R1 + ("now_s",), DELETE, {}, "passes[1].ranks[1]: missing field 'now_s'"),
    ("now-null", R1 + ("now_s",), None, {}, "passes[1].ranks[1].now_s: expected a finite number >= 0 (seconds), got null"),
    ("now-nan", R1 + ("now_s",), math.nan, {}, "passes[1].ranks[1].now_s: expected a finite number >= 0 (seconds), got NaN"),
    ("now-inf", R1 + ("now_s",), -math.inf, {}, "now_s: expected a finite number >= 0 (seconds), got -Infinity"),
    ("now-negative", R1 + ("now_s",), -1.0, {}, "now_s: expected a finite number >= 0 (seconds), got -1.0"),
    ("rank-unknown-field", R1 + ("queue",), 1, {}, "passes[1].ranks[1].queue: unknown field; expected only prefillable, token_usage"),
    ("rank-not-object", R1, 7, {}, "passes[1].ranks[1]: expected an object, got a number 7"),
    ("expect-allow-string", E0 + ("allow",), "yes", {}, "passes[0].expect[0].allow: expected true or false, got a string \"yes\""),
    ("expect-allow-int", E0 + ("allow",), 0, {}, "passes[0].expect[0].allow: expected true or false, got a number 0"),
    ("expect-unknown-reason", E0 + ("reason",), "timeout", {}, "passes[0].expect[0].reason: unknown reason \"timeout\"; expected one of '', 'token_watermark'"),
    ("expect-reason-type", E0 + ("reason",), 3, {}, "passes[0].expect[0].reason: unknown reason 3"),
    ("expect-wfp-negative", E0 + ("wait_forward_passes",), -1, {}, "passes[0].expect[0].wait_forward_passes: expected an integer in [0, 9223372036854775807], got -1"),
    ("expect-wfp-fractional", E0 + ("wait_forward_passes",), 0.5, {}, "wait_forward_passes: expected an integer in [0, 9223372036854775807], got a number 0.5"),
    ("expect-wfp-bool", E0 + ("wait_forward_passes",), False, {}, "wait_forward_passes: expected an integer in [0, 9223372036854775807], got a boolean false"),
    ("expect-wfp-above-int64", E0 + ("wait_forward_passes",), INT64_MAX + 1, {}, "got 9223372036854775808"),
    ("expect-missing-field", E0 + ("reason",), DELETE, {}, "passes[0].expect[0]: missing field 'reason'"),
]


@pytest.mark.parametrize(("path", "value", "top", "fragment"), [c[1:] for c in TRACE_CASES], ids=[c[0] for c in TRACE_CASES])
def test_replay_of_a_malformed_trace_says_where(tmp_path: Path, capsys: pytest.CaptureFixture, path: tuple, value: Any,
                                                top: dict, fragment: str) -> None:
    trace_file = tmp_path / "bad.json"
    trace_file.write_text(json.dumps(mutated(path, value, **top)))
    code, out, err = _replay(capsys, trace_file)
    assert_clean_failure(code, out, err, f"prefill-delayer replay: cannot read trace {trace_file}: ", fragment)


def test_unknown_property_lists_every_replayable_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The names come from the policy's replayable properties as they are, so new ones show up by themselves."""
    trace_file = tmp_path / "bad.json"
    trace_file.write_text(json.dumps(mutated((), None, property="liveness")))
    _, _, err = _replay(capsys, trace_file)
    assert all(name in err for name in CHECKS)


def test_unknown_profile_lists_every_known_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace_file = tmp_path / "bad.json"
    trace_file.write_text(json.dumps(mutated((), None, profile="fast")))
    _, _, err = _replay(capsys, trace_file)
    assert all(name in err for name in PROFILES) and "sglang-0.5.20" in err


# (id, file contents as bytes, or None for no file, or "dir" for a folder; fragment)
FILE_CASES: list[tuple[str, Any, str]] = [
    ("missing-file", None, "cannot open it: "),  # then the system's words: No such file or directory
    ("a-folder", "dir", "cannot open it: "),
    ("empty-file", b"", "the file is empty; expected a JSON object"),
    ("invalid-json", b'{"property": "agreement",\n "passes": [}', "invalid JSON at line 2 column 13"),
    ("not-utf8", b"\xff\xfe{}", "not UTF-8 text"),
    ("null", b"null", "expected a JSON object at the top level, got null"),
    ("array", b"[]", "expected a JSON object at the top level, got an array"),
    ("string", b'"trace"', "expected a JSON object at the top level, got a string"),
    ("number", b"3", "expected a JSON object at the top level, got a number 3"),
    ("nested-too-deeply", b"[" * 200_000, "invalid JSON"),
    # Python 3.11+ refuses to parse it; 3.10 parses it and the check of passes refuses it.
    ("integer-too-long", b"{\"passes\": " + b"9" * 5000 + b"}",
     "invalid JSON: Exceeds the limit" if hasattr(sys, "set_int_max_str_digits") else "passes: expected an array"),
]


@pytest.mark.parametrize(("content", "fragment"), [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_replay_of_an_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture, content: Any, fragment: str) -> None:
    trace_file = tmp_path / "trace.json"
    if content == "dir":
        trace_file.mkdir()
    elif content is not None:
        trace_file.write_bytes(content)
    code, out, err = _replay(capsys, trace_file)
    assert_clean_failure(code, out, err, f"prefill-delayer replay: cannot read trace {trace_file}: ", fragment)


def run_bounded(argv: list[str]) -> "subprocess.CompletedProcess[str]":
    """``prefill-delayer ARGV`` in a child whose heap is capped at 2 GiB and whose run at 120 s: a reader that reads
    without end fails the test instead of taking the machine's memory."""
    import resource

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_DATA, (1 << 31, 1 << 31))

    return subprocess.run([sys.executable, "-m", "prefill_delayer.cli", *argv], capture_output=True, text=True,
                          timeout=120, preexec_fn=cap)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero on this system")
def test_replay_refuses_a_device_it_would_read_without_end() -> None:
    """``/dev/zero`` never ends: read whole, it took memory until none was left, and Ctrl-C did not stop it."""
    done = run_bounded(["replay", "/dev/zero"])
    assert_clean_failure(done.returncode, done.stdout, done.stderr, "prefill-delayer replay: cannot read trace /dev/zero: ",
                         "cannot open it: a character device, not a file")


def test_replay_reads_a_trace_from_a_pipe_and_refuses_a_folder_or_an_empty_name(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A pipe (``replay <(zcat t.json.gz)``) is a trace like a file; a folder is named as one, and an empty name is a
    usage error, where it used to open the current folder."""
    import os
    import threading

    fifo = tmp_path / "trace.pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=(json.dumps(good_trace()),))
    writer.start()
    code, out, err = _replay(capsys, fifo)
    writer.join(timeout=60)
    assert (code, err) == (0, ""), out
    assert out.splitlines()[-1].startswith("REPRODUCED")
    code, out, err = _replay(capsys, tmp_path)
    assert_clean_failure(code, out, err, f"prefill-delayer replay: cannot read trace {tmp_path}: ", "a folder, not a file")
    code, out, err = _replay(capsys, "")  # type: ignore[arg-type]
    assert_clean_failure(code, out, err, "prefill-delayer replay: ", "TRACE needs a file name, got an empty string")


def test_valid_trace_replays_with_exit_0_or_1(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The hand-made trace reproduces on the seed (0) and not on 0.5.17, whose all branch is capped (1)."""
    for profile, expected in (("seed", 0), ("sglang-0.5.17", 1), ("sglang-0.5.18", 1)):
        trace_file = tmp_path / f"{profile}.json"
        trace_file.write_text(json.dumps(good_trace(profile)))
        code, out, err = _replay(capsys, trace_file)
        assert (code, err) == (expected, ""), out
        assert out.splitlines()[-1].startswith("REPRODUCED" if expected == 0 else "NOT REPRODUCED")


def test_validation_error_carries_the_path() -> None:
    with pytest.raises(TraceError) as info:
        validate_trace(mutated(R1 + ("running_batch",), -1))
    assert isinstance(info.value, ValueError)
    assert info.value.path == "passes[1].ranks[1].running_batch"


def test_an_integer_too_long_to_print_is_still_a_trace_error() -> None:
    """A trace built in Python (not parsed) can hold any int; the message must not try to print it."""
    with pytest.raises(TraceError, match=r"running_batch: .*\(an integer of \d+ bits\)"):
        validate_trace(mutated(R1 + ("running_batch",), 10**5000))


def test_trace_file_refuses_what_replay_would(tmp_path: Path) -> None:
    """Writer and reader share the validation: no trace is written that replay cannot read."""
    with pytest.raises(TraceError, match="attn_cp_size"):
        trace_file(mutated(("config", "attn_cp_size"), DELETE))
    name, text = trace_file(good_trace())
    (tmp_path / name).write_text(text)
    assert name == "seed-bounded-delay.json" and load_trace(tmp_path / name) == good_trace()


def test_run_trace_gives_the_runtime_prefill_max_requests_and_attn_cp_size(monkeypatch: pytest.MonkeyPatch) -> None:
    import prefill_delayer.runtime as runtime

    seen: list[Any] = []

    class Recording(runtime.PolicyCore):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            seen.append(self.config)

    monkeypatch.setattr(runtime, "PolicyCore", Recording)
    trace = good_trace("sglang-0.5.22")
    trace["config"].update(attn_cp_size=2, prefill_max_requests=3)
    for p in trace["passes"]:
        p["ranks"] *= 2
        p["expect"] *= 2
    decisions = run_trace(trace)
    assert len(decisions) == 2 and all(len(per_rank) == 4 for per_rank in decisions)
    assert len(seen) == 4 and {(c.attn_cp_size, c.prefill_max_requests, c.world_size) for c in seen} == {(2, 3, 4)}


def test_installed_command_on_a_null_trace(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("prefill-delayer")
    if not script.is_file():
        pytest.skip("the prefill-delayer console script is not installed beside this Python")
    trace_file = tmp_path / "null.json"
    trace_file.write_text("null\n")
    done = subprocess.run([str(script), "replay", str(trace_file)], capture_output=True, text=True, timeout=120)
    assert_clean_failure(done.returncode, done.stdout, done.stderr, f"prefill-delayer replay: cannot read trace {trace_file}: ", "got null")


# ----- prove and docs ----------------------------------------------------------------


@pytest.fixture
def no_proofs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any proof started is a failure: the option checks must come first."""
    try:
        from prefill_delayer.proofs import prove
    except ImportError:  # no z3: nothing could be proved anyway
        return

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a proof started before the options were checked")

    monkeypatch.setattr(prove, "run_parallel", refuse)
    monkeypatch.setattr(prove, "run_catalogue", refuse)


@pytest.fixture
def places(tmp_path: Path) -> dict[str, str]:
    """``{file}``: an existing file; ``{dir}``: an existing folder; ``{missing}``: neither."""
    (tmp_path / "file.txt").write_text("x\n")
    return {"file": str(tmp_path / "file.txt"), "dir": str(tmp_path), "missing": str(tmp_path / "no-docs")}


RATIO_RANGE = "--queue-min-ratio must be a number in (0, 1048576], got "
# (id, argv with {file}/{dir} placeholders, expected fragment)
OPTION_CASES: list[tuple[str, list[str], str]] = [
    ("json-is-folder", ["prove", "--json", "{dir}"], "--json {dir} is a folder; expected a file name"),
    ("json-parent-is-file", ["prove", "--json", "{file}/report.json"], "--json {file}/report.json: its folder {file} is a file"),
    ("json-grandparent-is-file", ["prove", "--json", "{file}/a/report.json"], "its folder {file}/a is inside {file}, which is a file"),
    ("traces-is-file", ["prove", "--traces", "{file}"], "--traces {file} is a file; expected a folder"),
    ("traces-parent-is-file", ["prove", "--traces", "{file}/traces"], "--traces {file}/traces is inside {file}, which is a file"),
    ("docs-out-is-file", ["docs", "--out", "{file}"], "--out {file} is a file; expected a folder"),
    ("docs-check-out-is-file", ["docs", "--check", "--out", "{file}"], "--out {file} is a file; expected a folder"),
    ("docs-out-parent-is-file", ["docs", "--out", "{file}/docs"], "--out {file}/docs is inside {file}, which is a file"),
    ("timeout-zero", ["prove", "--timeout-ms", "0"], "--timeout-ms must be an integer in [1, 4294967295], got 0"),
    ("timeout-negative", ["prove", "--timeout-ms", "-20"], "--timeout-ms must be an integer in [1, 4294967295], got -20"),
    ("timeout-huge", ["prove", "--timeout-ms", str(2**40)], f"got {2**40}"),
    ("jobs-zero", ["prove", "--jobs", "0"], "--jobs must be an integer >= 1, got 0"),
    ("jobs-negative", ["prove", "--jobs", "-2"], "--jobs must be an integer >= 1, got -2"),
    ("ratio-negative", ["prove", "--queue-min-ratio", "-1"], RATIO_RANGE + "-1"),
    ("ratio-zero", ["prove", "--queue-min-ratio", "0"], RATIO_RANGE + "0"),
    ("ratio-too-big", ["prove", "--queue-min-ratio", "2e6"], RATIO_RANGE + "2000000"),
    ("ratio-nan", ["prove", "--queue-min-ratio", "nan"], RATIO_RANGE + "nan"),
    ("ratio-inf", ["prove", "--queue-min-ratio", "inf"], RATIO_RANGE + "inf"),
    ("dp-size-zero", ["prove", "--dp-size", "0"], "--dp-size must be an integer in [1, 65536], got 0"),
    ("dp-size-too-big", ["prove", "--dp-size", "65537"], "--dp-size must be an integer in [1, 65536], got 65537"),
    ("profile-unknown", ["prove", "--profile", "fast"], "--profile: unknown profile 'fast': expected one of seed, sglang-0.5.17"),
    ("profile-unknown-release", ["prove", "--profile", "seed", "--profile", "sglang-0.6.0"], "unknown profile 'sglang-0.6.0'"),
    # a pinning option no profile to prove has: it was dropped without a word
    ("ratio-no-such-parameter", ["prove", "--profile", "pdi-hardened", "--queue-min-ratio", "0.5"],
     "--queue-min-ratio pins SGLang's prefill delayer's queue_min_ratio, which none of the profiles to prove has "
     "(pdi-hardened)"),
    ("docs-check-no-folder", ["docs", "--check", "--out", "{missing}"], "--out {missing}: no such folder"),
]


def _run_cli(capsys: pytest.CaptureFixture, argv: list[str]) -> tuple[int, str, str, float]:
    t0 = time.perf_counter()
    code = cli(argv)
    seconds = time.perf_counter() - t0
    out = capsys.readouterr()
    return code, out.out, out.err, seconds


@pytest.mark.parametrize(("argv", "fragment"), [c[1:] for c in OPTION_CASES], ids=[c[0] for c in OPTION_CASES])
def test_bad_option_fails_before_any_work(no_proofs: None, places: dict[str, str], capsys: pytest.CaptureFixture,
                                          argv: list[str], fragment: str) -> None:
    argv = [a.format(**places) for a in argv]
    code, out, err, seconds = _run_cli(capsys, argv)
    assert_clean_failure(code, out, err, f"prefill-delayer {argv[0]}: ", fragment.format(**places))
    assert seconds < 2.0
    assert Path(places["file"]).read_text() == "x\n"  # nothing written over the file


@pytest.mark.parametrize("argv", [["prove"], ["check-log", "{dir}"], ["simulate", "--suite", "default", "--no-progress"]],
                         ids=["prove", "check-log", "simulate"])
def test_jobs_past_the_cores_is_the_same_line_in_every_subcommand(no_proofs: None, places: dict[str, str],
                                                                   capsys: pytest.CaptureFixture, argv: list[str]) -> None:
    """Each subcommand's workers are single-threaded processes: ``--jobs`` past the cores this process may run on is
    refused by all three alike, before any work (``simulate --suite --jobs 1000000`` forked 330 processes on two cores;
    ``prove`` and ``check-log`` took any N)."""
    from prefill_delayer.workers import cores

    have = cores()
    argv = [a.format(**places) for a in argv] + ["--jobs", str(have + 1)]
    code, out, err, seconds = _run_cli(capsys, argv)
    assert (code, out) == (2, "")
    assert err == (f"prefill-delayer {argv[0]}: --jobs {have + 1:,}: at most {have} here: this process may run on "
                   f"{have} core{'' if have == 1 else 's'}, and each worker is one single-threaded process, so a process "
                   "more would only share them, holding work of its own in memory\n"), err
    assert seconds < 2.0


def test_unknown_profile_lists_the_known_names(no_proofs: None, capsys: pytest.CaptureFixture) -> None:
    _, _, err, _ = _run_cli(capsys, ["prove", "--profile", "fast"])
    assert all(name in err for name in PROFILES) and "sglang-0.5.23" in err


# (id, argv): argparse's own usage errors (non-numeric values, unknown options)
USAGE_CASES: list[tuple[str, list[str], str]] = [
    ("jobs-word", ["prove", "--jobs", "two"], "argument --jobs: invalid int value: 'two'"),
    ("timeout-fraction", ["prove", "--timeout-ms", "1.5"], "argument --timeout-ms: invalid int value: '1.5'"),
    ("ratio-word", ["prove", "--queue-min-ratio", "half"], "argument --queue-min-ratio: invalid float value: 'half'"),
    ("dp-size-empty", ["prove", "--dp-size", ""], "argument --dp-size: invalid int value: ''"),
    ("unknown-option", ["prove", "--fast"], "unrecognized arguments: --fast"),
    ("replay-without-trace", ["replay"], "the following arguments are required: TRACE"),
]


@pytest.mark.parametrize(("argv", "fragment"), [c[1:] for c in USAGE_CASES], ids=[c[0] for c in USAGE_CASES])
def test_non_numeric_values_are_usage_errors(no_proofs: None, capsys: pytest.CaptureFixture, argv: list[str],
                                             fragment: str) -> None:
    with pytest.raises(SystemExit) as info:
        cli(argv)
    out = capsys.readouterr()
    assert info.value.code == 2
    assert fragment in out.err and "Traceback" not in out.out + out.err


@pytest.mark.parametrize(
    ("given", "resolved"),
    [
        (None, list(all_profiles())),  # every policy's
        (["sglang-0.5.20"], ["sglang-0.5.19"]),
        (["hardened", "seed", "hardened", "sglang-0.5.16"], ["hardened", "seed"]),
    ],
)
def test_profiles_accepted_are_every_known_name(given: Optional[list[str]], resolved: list[str]) -> None:
    """Default: all profiles; a release name is the profile it is; repeats are dropped."""
    argv = ["prove"] + [a for name in (given or []) for a in ("--profile", name)]
    args = build_parser().parse_args(argv)
    assert prove_problem(args) is None
    assert args.profile == resolved


def test_good_options_pass_the_checks(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["prove", "--json", str(tmp_path / "new" / "r.json"), "--traces", str(tmp_path / "t"), "--timeout-ms", "1",
         "--jobs", "1", "--queue-min-ratio", "1048576", "--dp-size", "65536"]
    )
    assert prove_problem(args) is None
    assert not (tmp_path / "new").exists()  # checking creates nothing



@pytest.mark.parametrize("argv", [["prove", "--profile", "hardened", "--jobs", "1"], ["docs", "--check"]])
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly_with_141(argv: list[str]) -> None:
    """`prefill-delayer prove | head -1` printed `[Errno 32] Broken pipe` and exited 2, as for a failed write; now it
    ends as SIGPIPE ends any Unix filter: exit 141 and nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "prefill_delayer.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before the command writes its first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert err == ""


def _closed_pipe_run(argv: list[str], stream: str, buffered: bool) -> tuple[int, str]:
    """Run the CLI with ``stream`` (stdout or stderr) a pipe whose reader closed it before the command started, so that
    its first write finds the reader gone (no race with the command's start-up); the other stream is captured."""
    import os

    read, write = os.pipe()
    os.close(read)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"  # the write itself fails, not the flush after it
    other = "stderr" if stream == "stdout" else "stdout"
    try:
        proc = subprocess.run([sys.executable, "-m", "prefill_delayer.cli", *argv], env=env, timeout=120,
                              **{stream: write, other: subprocess.PIPE})
    finally:
        os.close(write)
    return proc.returncode, getattr(proc, other).decode()


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("argv", [["--version"], ["--help"], *([name, "--help"] for name in
                                  ("prove", "replay", "docs", "simulate", "check-log"))], ids=" ".join)
def test_version_and_help_to_a_closed_pipe_end_quietly_with_141(argv: list[str], buffered: bool) -> None:
    """`prefill-delayer --version | true` printed a BrokenPipeError traceback and exited 1 (the version is printed while
    the options are parsed, outside the command's handler); `--help | head -c 0` exited 0 having printed nothing, or
    120 with Python's 'Exception ignored ... BrokenPipeError'. Now each ends as any command's output does: 141, quiet."""
    assert _closed_pipe_run(argv, "stdout", buffered) == (141, "")


@pytest.mark.parametrize("argv", [["prove", "--bogus"], ["prove", "--dp-size", "0"], []], ids=" ".join)
def test_a_usage_error_or_bad_option_to_a_closed_stderr_ends_quietly_with_141(argv: list[str]) -> None:
    """The one line on stderr is an output too: with its reader gone (`2>&1 | head -c 0`), 141, not a traceback."""
    assert _closed_pipe_run(argv, "stderr", True) == (141, "")
