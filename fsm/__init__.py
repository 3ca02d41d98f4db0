"""The ``transitions`` machine, a pure step function and the compiled step, all built from ``spec``'s table."""

from .compiled import CompiledStep
from .machine import DelayerMachine, add_table
from .step import INITIAL_STATE, Decision, State, decide, finalize, local_for, select, step

__all__ = ["CompiledStep", "DelayerMachine", "Decision", "INITIAL_STATE", "State", "add_table", "decide", "finalize", "local_for", "select", "step"]
