"""The single source of truth: every policy as data and small pure functions over one operator layer.

``spec.policy`` is the interface a policy declares; ``spec.policies`` holds the
policies; ``spec.registry`` picks one by profile name. The rest is what all
policies share: configurations (``spec.config``), value kinds and input checks
(``spec.fields``, ``spec.inputs``), transition tables (``spec.table``), the
monitors run invariants are written as (``spec.monitors``) and the operator
layer (``spec.ops``).
"""

from .config import Config
from .errors import ConfigError, PassInputError, PrefillDelayerError
from .ops import PY, Ops, PyOps
from .policy import Policy
from .registry import all_profiles, known_profile, policies, policy_of, resolve_profile

__all__ = [
    "Config", "ConfigError", "Ops", "PY", "PassInputError", "Policy", "PrefillDelayerError", "PyOps", "all_profiles",
    "known_profile", "policies", "policy_of", "resolve_profile",
]
