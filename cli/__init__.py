"""The ``prefill-delayer`` command: one table of subcommands, each imported only when it runs."""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
