"""``prefill-delayer docs [--check] [--out DIR]``: docs/transitions.md and its picture, from the spec."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

from ..files import Outputs


def add_arguments(docs: argparse.ArgumentParser) -> None:
    docs.add_argument("--check", action="store_true", help="exit 1 with a diff when the committed docs are stale")
    docs.add_argument("--out", metavar="DIR", default=None, help="docs folder (default: the repository's docs/)")


def _outputs(folder: Optional[str]) -> Outputs:
    return Outputs().folder("--out", folder)


def options_problem(args: Any) -> Optional[str]:
    """``--out`` is written to, except with ``--check``: then it is read, and need only be a folder."""
    if getattr(args, "check", False):
        out = args.out
        if out is not None and not Path(out).exists():
            return f"--out {out}: no such folder (--check reads the docs there)"
        return f"--out {out} is a file; expected a folder" if out is not None and not Path(out).is_dir() else None
    return _outputs(args.out).problem()


def main(args: Any) -> int:
    """Exit 2 with one line, not a traceback, when the folder is unusable; both files are written or neither."""
    from ..docgen import DocsError, check, rendered, repo_docs_dir

    try:
        out_dir = args.out if getattr(args, "out", None) is not None else str(repo_docs_dir())
        if getattr(args, "check", False):
            return check(Path(out_dir))
        files = rendered()
        with _outputs(out_dir).writing() as out:
            written = [out.write_in("--out", name, content) for name, content in files]
    except BrokenPipeError:  # the reader of --check's diff went away: the command's own exit (main), not a bad folder
        raise
    except (DocsError, OSError, UnicodeDecodeError) as exc:
        print(f"prefill-delayer docs: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    return 0
