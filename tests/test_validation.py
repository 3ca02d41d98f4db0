"""Configuration and per-pass input validation: every bad input is refused, by name and value."""

from __future__ import annotations

import dataclasses
import math

import pytest

from prefill_delayer.spec import ConfigError, PassInputError
from delayer_spec import Config
from delayer_spec import PARAMETERS, PassInput, validate_pass_input
from delayer_spec import DEFAULT_MAX_DELAY_MS, MAX_QUEUE_MIN_RATIO, PARAMETER_BY_NAME
from delayer_spec import INPUT_FIELDS, MAX_COUNT, input_problems, mask_fields, problems_mask

NAN, INF = float("nan"), float("inf")

BAD_CONFIG = {
    "max_delay_passes": [-1, -30, 1.5, 2.0, True, False, "3", None, NAN, 2**31, 2**70],
    "token_usage_low_watermark": [NAN, INF, -INF, -0.1, -1, 1.0000001, 2, True, False, "0.5"],
    "queue_min_ratio": [0, 0.0, -0.0, -0.5, NAN, INF, -INF, MAX_QUEUE_MIN_RATIO * 2, 1e300, True, "0.5"],
    "max_delay_ms": [0, 0.0, -1, -0.001, NAN, INF, -INF, True, "5000"],
    "dp_size": [0, -1, 1.0, 2.0, True, None, "2", 10**20, 2**16 + 1],
    "attn_tp_size": [0, -2, 1.0, 1.5, False, None, "1", 2**70],
    "enable_dp_attention": [1, 0, 1.0, "true", "False", None],
    "profile": ["Seed", "HARDENED", "", "strict", None, 1, "sglang-0.5.13", "sglang-0.5.24", "sglang-", "0.5.16"],
    "prefill_max_requests": [0, -1, 1.0, True, "8", 2**31, 10**20],
    "attn_cp_size": [0, -1, 1.0, True, None, "2", 2**17],
}

GOOD_CONFIG = {
    "max_delay_passes": [0, 1, 30, 10**6],
    "token_usage_low_watermark": [None, 0, 0.0, 0.5, 1, 1.0],
    "queue_min_ratio": [None, 1e-9, 0.29, 1, 2.5, MAX_QUEUE_MIN_RATIO],
    "max_delay_ms": [None, 1e-6, 1, 50.0, 5000],
    "dp_size": [1, 2, 64],
    "attn_tp_size": [1, 8],
    "enable_dp_attention": [True, False],
    "profile": ["seed", "sglang-0.5.17", "sglang-0.5.19", "sglang-0.5.22", "hardened"],
    "prefill_max_requests": [None, 1, 8, 2**31 - 1],
    "attn_cp_size": [1],
}


def _cases(table):
    return [pytest.param(name, value, id=f"{name}={value!r}") for name, values in table.items() for value in values]


def test_parameters_describe_every_config_field():
    fields = {f.name: f.default for f in dataclasses.fields(Config)}
    assert set(fields) == {p.name for p in PARAMETERS} == set(BAD_CONFIG) == set(GOOD_CONFIG)
    for p in PARAMETERS:
        assert fields[p.name] == p.default, p.name
        assert PARAMETER_BY_NAME[p.name] is p


@pytest.mark.parametrize("name, value", _cases(BAD_CONFIG))
def test_bad_config_is_refused_by_name_and_value(name, value):
    with pytest.raises(ConfigError) as info:
        Config(**{name: value})
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert name in message
    assert repr(value) in message
    assert PARAMETER_BY_NAME[name].valid in message


@pytest.mark.parametrize("name, value", _cases(BAD_CONFIG))
def test_replace_validates_too(name, value):
    with pytest.raises(ConfigError, match=name):
        Config().replace(**{name: value})


@pytest.mark.parametrize("name, value", _cases(GOOD_CONFIG))
def test_good_config_is_accepted(name, value):
    c = Config(**{name: value})
    got = getattr(c, name)
    if name == "max_delay_ms" and value is None:
        assert got == DEFAULT_MAX_DELAY_MS == 5000.0
    elif value is None:
        assert got is None
    else:
        assert got == value
    if name in ("token_usage_low_watermark", "queue_min_ratio", "max_delay_ms") and value is not None:
        assert type(got) is float
    if name in ("max_delay_passes", "dp_size", "attn_tp_size"):
        assert type(got) is int


def test_max_delay_ms_none_means_5000():
    assert Config().max_delay_ms == 5000.0
    assert Config(max_delay_ms=None).max_delay_ms == 5000.0
    assert Config(max_delay_ms=None) == Config(max_delay_ms=5000.0)


def test_defaults_are_upstreams():
    c = Config()
    assert (c.max_delay_passes, c.token_usage_low_watermark, c.queue_min_ratio, c.profile) == (30, None, None, "seed")
    assert (c.dp_size, c.attn_tp_size, c.enable_dp_attention) == (1, 1, False)


FULL = Config(
    max_delay_passes=7,
    token_usage_low_watermark=0.8,
    queue_min_ratio=0.29,
    max_delay_ms=50.0,
    dp_size=4,
    attn_tp_size=2,
    enable_dp_attention=True,
    profile="hardened",
)


@pytest.mark.parametrize("config", [Config(), FULL, FULL.replace(profile="seed", token_usage_low_watermark=None)])
def test_valid_config_round_trips(config):
    again = Config(**config.as_dict())
    assert again == config
    assert again.fingerprint() == config.fingerprint()
    assert hash(again) == hash(config)
    assert config.replace() == config


# One changed field per parameter, each still valid.
ONE_FIELD_CHANGES = {
    "max_delay_passes": 8,
    "token_usage_low_watermark": 0.7,
    "queue_min_ratio": 0.3,
    "max_delay_ms": 51.0,
    "dp_size": 3,
    "attn_tp_size": 1,
    "enable_dp_attention": False,
    "profile": "seed",
    "prefill_max_requests": 16,
    "attn_cp_size": 2,
}


def test_fingerprint_differs_when_any_field_differs():
    assert set(ONE_FIELD_CHANGES) == {p.name for p in PARAMETERS}
    variants = {name: FULL.replace(**{name: value}) for name, value in ONE_FIELD_CHANGES.items()}
    fingerprints = {name: v.fingerprint() for name, v in variants.items()}
    for name, fp in fingerprints.items():
        assert fp != FULL.fingerprint(), name
    assert len(set(fingerprints.values())) == len(fingerprints)
    # None versus a value, too.
    assert FULL.replace(token_usage_low_watermark=None).fingerprint() != FULL.fingerprint()
    assert FULL.replace(queue_min_ratio=None).fingerprint() != FULL.fingerprint()


def test_fingerprint_is_stable_and_fits_a_row():
    for c in (Config(), FULL):
        fp = c.fingerprint()
        assert fp == Config(**c.as_dict()).fingerprint()
        assert 0 <= fp < 2**62  # travels in an int64 gathered row


# ----- per-pass inputs -------------------------------------------------------

GOOD_INPUT = PassInput(True, 0.5, 10, 4, 128, 3)

BAD_INPUTS = {
    "local_prefillable": [1, 0, 1.0, "yes", None],
    "token_usage": [NAN, INF, -INF, -0.1, -1, True, False, "0.5", None],
    "running_batch": [-1, 1.0, 2.5, True, False, MAX_COUNT + 1, "3", None, NAN],
    "max_prefill_bs": [-1, 4.0, True, MAX_COUNT + 1, 2**63, None],
    "max_running_requests": [-5, 128.0, False, MAX_COUNT + 1, "128"],
    "waiting_queue_len": [-1, 0.0, True, MAX_COUNT + 1, None],
}


def test_bad_inputs_cover_every_field():
    assert tuple(BAD_INPUTS) == INPUT_FIELDS == PassInput._fields


@pytest.mark.parametrize("name, value", _cases(BAD_INPUTS))
def test_bad_pass_input_is_refused_by_field(name, value):
    inp = GOOD_INPUT._replace(**{name: value})
    with pytest.raises(PassInputError) as info:
        validate_pass_input(inp)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert name in message
    assert repr(value) in message
    problems = input_problems(inp)
    assert [field for field, _ in problems] == [name]
    assert mask_fields(problems_mask(problems)) == [name]


@pytest.mark.parametrize(
    "inp",
    [
        GOOD_INPUT,
        PassInput(False, 0.0),
        PassInput(True, 1, 0, 0, 0, 0),
        PassInput(True, 1.0, MAX_COUNT, MAX_COUNT, MAX_COUNT, MAX_COUNT),
        PassInput(False, 0.999, 0, 0, 0, MAX_COUNT),
    ],
)
def test_good_pass_input_passes(inp):
    assert validate_pass_input(inp) is inp
    assert input_problems(inp) == []
    assert problems_mask(input_problems(inp)) == 0


def test_every_bad_field_is_named_at_once():
    inp = PassInput(1, NAN, -1, 2.0, True, MAX_COUNT + 1)
    with pytest.raises(PassInputError) as info:
        validate_pass_input(inp)
    message = str(info.value)
    for name in INPUT_FIELDS:
        assert name in message
    assert [f for f, _ in input_problems(inp)] == list(INPUT_FIELDS)
    assert problems_mask(input_problems(inp)) == 2 ** len(INPUT_FIELDS) - 1
    assert math.isnan(inp.token_usage)  # the input itself is untouched


# ----- release profiles --------------------------------------------------------


@pytest.mark.parametrize(
    "release, profile",
    [("0.5.14", "seed"), ("0.5.16", "seed"), ("0.5.17", "sglang-0.5.17"), ("0.5.18", "sglang-0.5.17"),
     ("0.5.19", "sglang-0.5.19"), ("0.5.21", "sglang-0.5.19"), ("0.5.22", "sglang-0.5.22"), ("0.5.23", "sglang-0.5.22")],
)
def test_every_release_resolves_to_its_profile(release, profile):
    assert Config(profile=f"sglang-{release}").profile == profile


def test_unknown_release_lists_the_known_ones():
    with pytest.raises(ConfigError) as info:
        Config(profile="sglang-0.5.24")
    for name in ("seed", "sglang-0.5.17", "sglang-0.5.22", "hardened", "0.5.14", "0.5.23"):
        assert name in str(info.value)


@pytest.mark.parametrize("profile", ["seed", "sglang-0.5.17", "sglang-0.5.21"])
def test_attn_cp_needs_a_release_that_has_it(profile):
    with pytest.raises(ConfigError, match="attn_cp_size=2"):
        Config(profile=profile, attn_cp_size=2)
    assert Config(profile="sglang-0.5.22", attn_cp_size=2).world_size == 2


def test_world_size_is_bounded_over_the_whole_layout():
    with pytest.raises(ConfigError, match="ranks in the gather"):
        Config(dp_size=2**10, attn_tp_size=2**7, enable_dp_attention=True)
    assert Config(dp_size=2**10, attn_tp_size=2**7).world_size == 2**7  # without DP attention one DP group gathers
