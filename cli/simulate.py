"""``prefill-delayer simulate``: the options are the simulator's own (``sim.options``); ``sim.cli`` runs them."""

from __future__ import annotations

from typing import Any, Optional

from ..sim.options import add_arguments  # argparse only: no simulator, no matplotlib

__all__ = ["add_arguments", "main", "options_problem"]


def options_problem(args: Any) -> Optional[str]:
    return None  # checked by the run itself, with the scenario's settings merged in


def main(args: Any) -> int:
    from ..sim.cli import run

    return run(args)
