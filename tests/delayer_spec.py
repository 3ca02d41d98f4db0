"""SGLang's delayer (the spec's first policy) under the names the tests use.

The tests of the delayer predate the policy interface; they read its state,
row, view, table, inputs and catalogue by these names. Everything here is the
policy's own object or a one-line view of the generic machinery on it, never a
copy of a guard or an effect.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from prefill_delayer.fsm import Step
from prefill_delayer.runtime.envelope import FIELDS as ENVELOPE_FIELDS
from prefill_delayer.spec.fields import MAX_COUNT, clock_problem  # noqa: F401 - re-exported
from prefill_delayer.spec.inputs import CLOCK, checks_of
from prefill_delayer.spec.ops import PY
from prefill_delayer.spec.policies import sglang_delayer
from prefill_delayer.spec.policies.sglang_delayer import config, glossary, guards, profiles, properties, row, variables  # noqa: F401
from prefill_delayer.spec.policies.sglang_delayer import table as _table
from prefill_delayer.spec.policy import PROVED, REFUTED, UNKNOWN
from prefill_delayer.spec.table import EVENTS, FINALIZE, NEGOTIATE, Lit, Table, Transition, holds  # noqa: F401 - re-exported

POLICY = sglang_delayer.POLICY

# state, inputs, local view
State, INITIAL_STATE, PassInput, Local = variables.State, variables.INIT, variables.PassInput, variables.Local
IDLE, DELAYING, RELEASED, STATES = variables.IDLE, variables.DELAYING, variables.RELEASED, variables.STATES
INPUT_FIELDS = variables.INPUT_FIELDS
# row and view
View = row.View
ROW_FIELDS = POLICY.row_names + ENVELOPE_FIELDS
ROW_LEN = len(ROW_FIELDS)
F_PREFILLABLE, F_FORCE, F_RB, F_PB, F_WQ, F_TIMEOUT, F_MRR, F_ERROR, F_FINGERPRINT, F_STAMP = range(ROW_LEN)
local_row = row.local_row
status_name = row.status_name
# table
Decision = _table.Decision
REASONS = _table.REASONS
build_table = _table.build_table
# configuration and profiles
Config = config.DelayerConfig
PARAMETERS, PARAMETER_BY_NAME = config.PARAMETERS, config.PARAMETER_BY_NAME
DEFAULT_MAX_DELAY_MS, MAX_QUEUE_MIN_RATIO = config.DEFAULT_MAX_DELAY_MS, config.MAX_QUEUE_MIN_RATIO
PROFILES, RELEASES, SEED_RELEASE = profiles.PROFILES, profiles.RELEASES, profiles.SEED_RELEASE
ATTN_CP_LAYOUT, features_of = profiles.ATTN_CP_LAYOUT, profiles.features_of
# the catalogue
CATALOGUE, BY_ID = properties.INVARIANTS, properties.BY_ID
SYMBOLS = glossary.SYMBOLS
# input checks
_CHECKS = checks_of(POLICY)
args_problems = _CHECKS.problems
input_problems = _CHECKS.input_problems
validate_pass_input = _CHECKS.validate
problems_mask = _CHECKS.mask
mask_fields = _CHECKS.mask_fields
MASK_FIELDS = _CHECKS.mask_fields_order
assert CLOCK == MASK_FIELDS[-1]


def gathered_view(o: Any, c: Any, rows: Any) -> View:
    return POLICY.gathered_view(o, c, rows)  # type: ignore[no-any-return]


def _step(c: Any, table: Any = None) -> Step:
    return Step(c, table)


def local_for(state: State, now: float, mrr: int) -> Local:
    """The guards' view of ``state`` (finalized) at clock reading ``now`` with this rank's max_running_requests."""
    if state.control == RELEASED:
        raise ValueError("negotiate from 'released': finalize the previous pass first")
    return POLICY.local_for(PY, state, now, PassInput(True, 0.0, 0, 0, mrr, 0))  # type: ignore[no-any-return]


def finalize(state: State) -> State:
    """The ``finalize`` event: released -> idle; delaying stays."""
    return state._replace(control=IDLE) if state.control == RELEASED else state


def select(c: Any, table: Any, state: State, view: View, local: Local) -> Any:
    return Step(c, table).select(state, view, local)


def decide(c: Any, t: Any, view: View, local: Local, o: Any = PY) -> Decision:
    return POLICY.decide(o, c, t, view, local)  # type: ignore[no-any-return]


def step(c: Any, table: Any, state: State, view: View, local: Local) -> Decision:
    """One ``negotiate``: pure, no machine involved."""
    return Step(c, table).negotiate(state, view, local)  # type: ignore[no-any-return]


# The old modules' names, as namespaces.
table = SimpleNamespace(
    build_table=build_table, Table=Table, Lit=Lit, Transition=Transition, holds=holds, IDLE=IDLE, DELAYING=DELAYING, RELEASED=RELEASED, STATES=STATES,
    EVENTS=EVENTS, NEGOTIATE=NEGOTIATE, FINALIZE=FINALIZE, REASONS=REASONS,
)
invariants = SimpleNamespace(CATALOGUE=CATALOGUE, BY_ID=BY_ID, PROVED=PROVED, REFUTED=REFUTED, UNKNOWN=UNKNOWN)
inputs = SimpleNamespace(MAX_COUNT=MAX_COUNT, args_problems=args_problems, input_problems=input_problems,
                         validate_pass_input=validate_pass_input, INPUT_FIELDS=INPUT_FIELDS)
view = SimpleNamespace(View=View, Local=Local, ROW_FIELDS=ROW_FIELDS, ROW_LEN=ROW_LEN, gathered_view=gathered_view, local_row=local_row,
                       counted_rows=POLICY.counted_rows, F_PREFILLABLE=F_PREFILLABLE, F_FORCE=F_FORCE, F_RB=F_RB, F_PB=F_PB,
                       F_WQ=F_WQ, F_TIMEOUT=F_TIMEOUT, F_MRR=F_MRR, F_ERROR=F_ERROR, F_FINGERPRINT=F_FINGERPRINT, F_STAMP=F_STAMP)
config_module = config


def register_profile(profile: Any) -> None:
    """Add a profile to the delayer for a test (a single-feature variant, say), everywhere the registry looks."""
    from prefill_delayer.spec import registry

    profiles.PROFILE_BY_NAME[profile.name] = profile
    if profile.name not in POLICY.profile_names:
        POLICY.profiles = POLICY.profiles + (profile,)
    for cached in (registry._by_profile, registry._aliases):
        cached.cache_clear()
