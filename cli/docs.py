"""``prefill-delayer docs [--check] [--out DIR]``: docs/transitions.md and its picture, from the spec."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

from ..files import out_dir_problem


def add_arguments(docs: argparse.ArgumentParser) -> None:
    docs.add_argument("--check", action="store_true", help="exit 1 with a diff when the committed docs are stale")
    docs.add_argument("--out", metavar="DIR", default=None, help="docs folder (default: the repository's docs/)")


def options_problem(args: Any) -> Optional[str]:
    return out_dir_problem("--out", args.out)


def main(args: Any) -> int:
    """Exit 2 with one line, not a traceback, when the folder is unusable."""
    from ..docgen import DocsError, check, repo_docs_dir, write

    try:
        out_dir = Path(args.out) if getattr(args, "out", None) else repo_docs_dir()
        return check(out_dir) if getattr(args, "check", False) else write(out_dir)
    except (DocsError, OSError, UnicodeDecodeError) as exc:
        print(f"prefill-delayer docs: {exc}", file=sys.stderr)
        return 2
