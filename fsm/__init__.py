"""The ``transitions`` machine and a pure step function, both built from ``spec``'s table."""

from .machine import DelayerMachine, add_table
from .step import INITIAL_STATE, Decision, State, decide, finalize, local_for, select, step

__all__ = ["DelayerMachine", "Decision", "INITIAL_STATE", "State", "add_table", "decide", "finalize", "local_for", "select", "step"]
