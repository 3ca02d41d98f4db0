"""The single source of truth: configuration, gathered view, guards, table, invariants."""

from .config import PARAMETERS, PROFILES, Config
from .errors import ConfigError, PassInputError, PrefillDelayerError
from .inputs import PassInput, validate_pass_input
from .invariants import CATALOGUE
from .ops import PY, PyOps
from .table import EVENTS, STATES, Transition, build_table
from .view import ROW_FIELDS, Local, View, gathered_view, local_row

__all__ = [
    "CATALOGUE", "Config", "ConfigError", "EVENTS", "Local", "PARAMETERS", "PROFILES", "PY",
    "PassInput", "PassInputError", "PrefillDelayerError", "PyOps", "ROW_FIELDS", "STATES",
    "Transition", "View", "build_table", "gathered_view", "local_row", "validate_pass_input",
]
