"""SGLang's prefill delayer (``sglang/srt/managers/prefill_delayer.py``), every release 0.5.14-0.5.23.

The first policy of the spec. Read from each release's wheel on the package
registry (0.5.14 ... 0.5.23); its releases are its profiles (``profiles``), and
``hardened`` adds our fixes. The parts, each on one screen:

* ``variables``: State, Init, TypeOK; the per-pass inputs; what the guards see;
* ``row``: the gathered row, the view's fold, the view's domain;
* ``guards``: the local and pass guards;
* ``table``: the transition table, its effects, the decision;
* ``config``: the parameters and their validation; the delay bound and progress window;
* ``profiles``: features, profiles, releases;
* ``properties``: the catalogue properties that apply, with their monitors and verdicts;
* ``scope``: what the proofs range over, and their symbolic stand-ins;
* ``reference``: an independent encoding of the releases' code (refinement);
* ``glossary`` and ``bindings``: names for the docs; SGLang's call sites, traces, the simulator.
"""

from __future__ import annotations

from ...policy import Policy, ProofHooks, ScopeOption
from . import guards
from .bindings import HOST, LOG, SIM, TRACE
from .config import MAX_QUEUE_MIN_RATIO, PARAMETERS, POLICY_NAME, DelayerConfig
from .glossary import SYMBOLS
from .profiles import FEATURES, PROFILE_DEFS, UPSTREAM_ISSUE_URL, release_aliases
from .properties import INVARIANTS
from .reference import reference_pass, reference_row
from .row import ROW, VIEW, View, local_row, view_domain
from .scope import (
    BMC_SEARCH, LAYOUT_RANGE, Scope, bmc_config, bmc_soft, concrete, config_domain, families, idle_row, layout_witness,
    scope_of, scope_ranges, split_view, sym_config, witness_row,
)
from .table import DECISION_FIELDS, DECISION_KEY, EFFECT_DOC, KEEP_DOC, REASONS, Decision, build_table, decide
from .variables import (
    INIT, INPUTS, LOCAL_INPUTS, SHARED, STATE_DOC, STATE_FIELDS, STATES, Local, PassInput, State, local_domain, local_for,
    type_ok,
)

POLICY = Policy(
    name=POLICY_NAME,
    title="SGLang's prefill delayer",
    summary="waits up to max_delay_passes passes so that every DP rank prefills on the same pass; "
    "SGLang 0.5.14-0.5.23 (--enable-prefill-delayer) and our hardened profile",
    source="sglang/srt/managers/prefill_delayer.py of every SGLang wheel 0.5.14-0.5.23 on the package registry",
    upstream_url=UPSTREAM_ISSUE_URL,
    config_cls=DelayerConfig,
    params=PARAMETERS,
    profiles=PROFILE_DEFS,
    features=FEATURES,
    default_profile="seed",
    release_aliases=release_aliases(),
    states=STATES,
    state_doc=STATE_DOC,
    state_cls=State,
    state_fields=STATE_FIELDS,
    init=INIT,
    type_ok=type_ok,
    shared=SHARED,
    inputs=INPUTS,
    input_cls=PassInput,
    local_cls=Local,
    local_for=local_for,
    local_inputs=LOCAL_INPUTS,
    local_domain=local_domain,
    row=ROW,
    local_row=local_row,
    view=VIEW,
    view_cls=View,
    view_domain=view_domain,
    guards=guards,
    table_guards=guards.TABLE_GUARDS,
    reasons=REASONS,
    effect_doc=EFFECT_DOC,
    keep_doc=KEEP_DOC,
    build_table=build_table,
    decision_cls=Decision,
    decision_fields=DECISION_FIELDS,
    decide=decide,
    decision_key=DECISION_KEY,
    invariants=INVARIANTS,
    symbols=SYMBOLS,
    trace=TRACE,
    log=LOG,
    proof=ProofHooks(
        outputs=("output_reason", "output_allow", "wait_forward_passes", "wait_seconds"),
        families=families,
        scope_ranges=scope_ranges,
        layout_range=LAYOUT_RANGE,
        default_scope=Scope(),
        scope_of=scope_of,
        scope_options=(
            ScopeOption("--queue-min-ratio", "queue_min_ratio", float,
                        "prove at your deployment's queue ratio only (its double rounding exact); default: every ratio at once",
                        f"a number in (0, {int(MAX_QUEUE_MIN_RATIO)}]"),
        ),
        sym_config=sym_config,
        config_domain=config_domain,
        concrete=concrete,
        witness_row=witness_row,
        split_view=split_view,
        idle_row=idle_row,
        layout_witness=layout_witness,
        reference=reference_pass,
        reference_row=reference_row,
        bmc_config=bmc_config,
        bmc_soft=bmc_soft,
        bmc_search=BMC_SEARCH,
    ),
    host=HOST,
    sim=SIM,
    extras={"docs": {
        "engine": "SGLang",
        "no_features": "none: the seed",
        "releases_intro": "Each SGLang release's `sglang/srt/managers/prefill_delayer.py`, as published on the package "
        "registry, is one profile of the spec (`spec/policies/sglang_delayer/profiles.py`); `profile=\"sglang-X\"` resolves "
        "to it. The tests run every release's own file side by side with its profile. *Features* are the policy changes "
        "the profile has; `hardened` adds ours.",
        "where": {
            "features": "spec/policies/sglang_delayer/profiles.py",
            "invariants": "spec/policies/sglang_delayer/properties.py",
            "scope": "spec/policies/sglang_delayer/scope.py",
            "parameters": "spec/policies/sglang_delayer/config.py",
        },
    }},
)

__all__ = ["POLICY", "Decision", "DelayerConfig", "Local", "PassInput", "State", "View"]
