"""What the command says about itself: --version, a description naming every subcommand, each subcommand's exit
statuses in its --help, usage errors as one line naming the subcommand, and release names ``prove`` checks
under their profile's column."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest

from prefill_delayer.cli import main as cli
from prefill_delayer.cli.command import SUBCOMMANDS, build_parser
from prefill_delayer.spec.hashing import spec_hash


def _exit(argv: list[str]) -> tuple[Any, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        cli(argv)
    return info.value.code, out.getvalue(), err.getvalue()


def test_version_names_the_package_and_the_spec() -> None:
    from importlib.metadata import version

    code, out, err = _exit(["--version"])
    assert code == 0 and out == f"prefill-delayer {version('prefill-delayer')}, spec {spec_hash()}\n" and err == ""


def test_the_description_names_every_subcommand() -> None:
    text = build_parser().format_help()
    for cmd in SUBCOMMANDS:
        assert f"({cmd.name})" in " ".join(text.split()), text


@pytest.mark.parametrize("name", [c.name for c in SUBCOMMANDS])
def test_each_subcommand_help_gives_its_exit_statuses(name: str) -> None:
    code, out, _ = _exit([name, "--help"])
    flat = " ".join(out.split())
    exits = next(c.exits for c in SUBCOMMANDS if c.name == name)
    assert code == 0 and f"exit status: {exits}; 130 interrupted (Ctrl-C)" in flat, out


def test_replay_help_says_what_each_exit_status_means() -> None:
    flat = " ".join(_exit(["replay", "--help"])[1].split())
    assert "0 the recorded violation happens again; 1 it does not; 2 the trace cannot be read" in flat


@pytest.mark.parametrize(("argv", "line"), [
    (["check-log", "--nope", "x"], "prefill-delayer check-log: unrecognized arguments: --nope; see prefill-delayer check-log --help"),
    (["prove", "--fast"], "prefill-delayer prove: unrecognized arguments: --fast; see prefill-delayer prove --help"),
    (["simulate", "--scenario", "1"], "prefill-delayer simulate: argument --scenario: invalid choice: '1' (choose from '32880', '35241'); "
                                      "see prefill-delayer simulate --help"),
    (["replay"], "prefill-delayer replay: the following arguments are required: TRACE; see prefill-delayer replay --help"),
    (["frobnicate"], "prefill-delayer: argument COMMAND: invalid choice: 'frobnicate'"),
    ([], "prefill-delayer: the following arguments are required: COMMAND; see prefill-delayer --help"),
])
def test_a_usage_error_is_one_line_naming_the_subcommand(argv: list[str], line: str) -> None:
    code, out, err = _exit(argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(line), err
    assert "usage:" not in err


def test_prove_says_which_profile_a_release_name_is(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("z3")
    from prefill_delayer.proofs import prove
    from prefill_delayer.proofs.prove import Result

    seen: list[Any] = []

    def fake(profiles: Any, *args: Any) -> list[Any]:
        seen.append(tuple(profiles))
        return [Result("guards-partition", p, "proved", "proved", 0.0, "all") for p in profiles]

    monkeypatch.setattr(prove, "run_parallel", fake)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(["prove", "--profile", "sglang-0.5.20", "--profile", "hardened"]) == 0
    assert seen == [("sglang-0.5.19", "hardened")]
    assert "sglang-0.5.20 is checked as profile sglang-0.5.19, its column: one policy for sglang-0.5.19, sglang-0.5.20, " \
           "sglang-0.5.21" in out.getvalue()
