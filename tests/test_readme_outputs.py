"""The README's commands, run in order in a fresh clone, overwrite none of each other's outputs, and git
ignores every one of them (they used to share ``report.json`` and ``traces``, and ``git status`` listed them)
and nothing of the source (prove's traces once went into the ``traces`` package, and ignoring them ignored it)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
OUTPUT_OPTIONS = ("--json", "--traces", "--plot", "--out")


def readme_outputs() -> list[tuple[str, str]]:
    """(command line, output path) for every output the README's shell blocks name."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            for i, w in enumerate(words):
                if w in OUTPUT_OPTIONS and i + 1 < len(words) and "prefill-delayer" in words[:i]:
                    found.append((line.strip(), words[i + 1].rstrip("/")))
                if w.startswith("PREFILL_DELAYER_DECISION_LOG="):
                    found.append((line.strip(), w.split("=", 1)[1]))
    return found


def test_no_readme_command_overwrites_another_ones_output() -> None:
    outputs = readme_outputs()
    assert len(outputs) >= 8, outputs  # prove's two, the log folder, check-log's three, simulate's
    paths = [p for _, p in outputs]
    assert len(paths) == len(set(paths)), sorted(p for p in paths if paths.count(p) > 1)


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and a checkout")
def test_git_ignores_every_readme_output() -> None:
    paths = [p for _, p in readme_outputs()]
    done = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=REPO, capture_output=True, text=True)
    ignored = set(done.stdout.split())
    assert ignored == set(paths), sorted(set(paths) - ignored)


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(), reason="needs git and a checkout")
def test_git_ignores_no_source_file_and_no_output_lands_in_the_source() -> None:
    ignored = subprocess.run(["git", "ls-files", "--cached", "--ignored", "--exclude-standard"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    assert ignored == [], f"tracked files an ignore rule matches (a new file beside them would be ignored): {ignored}"
    paths = [p for _, p in readme_outputs()]
    tracked = subprocess.run(["git", "ls-files", "--", *paths], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    assert tracked == [], f"README outputs written among tracked files: {tracked}"


def test_the_readmes_spec_hash_is_this_specs() -> None:
    from prefill_delayer.spec.hashing import spec_hash

    text = (REPO / "README.md").read_text(encoding="utf-8")
    shown = set(re.findall(r"\bspec ([0-9a-f]{16})\b", text))
    assert shown, "the README shows the plugin's line with its spec hash"
    assert shown == {spec_hash()}, f"the README shows spec {sorted(shown)}; this spec is {spec_hash()}"


def test_the_layout_table_names_every_benchmark() -> None:
    """The Layout row of ``benchmarks/`` lists the modules there, no more, no fewer (it left out runtime_instructions)."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `benchmarks/` |"))
    listed = re.search(r"prefill_delayer\.benchmarks\.\{([^}]*)\}", row)
    assert listed is not None, row
    there = {p.stem for p in (REPO / "benchmarks").glob("*.py") if p.stem != "__init__"}
    assert set(listed.group(1).split(",")) == there, row


def _doc_commands(path: Path) -> list[tuple[str, dict[str, str]]]:
    """Every ``prefill-delayer SUBCOMMAND`` line of a document's code blocks, continuation lines joined, with the
    variables of the block's shell loops (``for NAME in FIRST ...``) and their first values."""
    from prefill_delayer.cli import build_parser

    subcommands = {a for action in build_parser()._actions for a in (getattr(action, "choices", None) or ())}
    inside, block, found = False, [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if inside:
                text = "\n".join(block).replace("\\\n", " ")
                loops = dict(re.findall(r"\bfor (\w+) in (\S+)", text))
                found += [(x.strip(), loops) for x in text.splitlines()
                          if x.split()[:1] == ["prefill-delayer"] and x.split()[1:2] and x.split()[1] in subcommands]
            inside, block = not inside, []
        elif inside:
            block.append(line)
    return found


@pytest.mark.parametrize("doc", ["README.md", "docs/simulation.md"])
def test_every_documented_command_pastes_into_a_shell_as_it_is(doc: str) -> None:
    """Each command the documents show parses as the CLI reads it: no ``...`` standing for a list, no ``a|b``
    standing for a choice (docs/simulation.md had both: ``--profile ...``, ``--health-dispatch shared|separate``);
    a shell loop's variables stand for one of their values."""
    from prefill_delayer.cli import build_parser

    commands = _doc_commands(REPO / doc)
    assert len(commands) >= 10, commands
    for line, loops in commands:
        for name, first in loops.items():  # a loop's variable: its first value
            line = line.replace(f"${name}", first)
        words = shlex.split(line, comments=True)
        words = words[: words.index("|")] if "|" in words else words  # a pipe into another program
        assert "..." not in words and not any(re.fullmatch(r"[\w.-]+\|[\w.|-]+", w) for w in words), line
        try:
            build_parser().parse_args(words[1:])
        except SystemExit as exc:
            raise AssertionError(f"{doc}: {line}: exit {exc.code}") from None
