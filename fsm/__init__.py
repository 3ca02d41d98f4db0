"""The ``transitions`` machine, a pure step and the compiled step, all built from a policy's table."""

from .compiled import CompiledStep
from .machine import DelayerMachine, add_table
from .step import Step

__all__ = ["CompiledStep", "DelayerMachine", "Step", "add_table"]
