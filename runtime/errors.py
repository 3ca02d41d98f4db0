"""Errors the runtime raises on purpose, all under ``spec.errors.PrefillDelayerError``.

Each one is raised *identically on every rank* when its cause is visible in the
gathered rows (bad input, configuration mismatch), so a scheduler that catches
it on one rank can rely on its peers having caught the same thing: nobody is
left waiting in a collective the others abandoned.
"""

from __future__ import annotations

import reprlib
from typing import Mapping, Optional, Sequence

from ..spec.errors import ConfigError, PassInputError, PrefillDelayerError


def _rebuild(cls: type[BaseException], args: tuple, state: dict) -> BaseException:
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


class _Picklable:
    """Keyword-only constructors break ``BaseException``'s default pickling; this keeps
    the errors transportable (multiprocessing, worker pools) with their attributes."""

    def __reduce__(self) -> tuple:
        return (_rebuild, (type(self), self.args, self.__dict__))  # type: ignore[attr-defined]


def shown(value: object) -> str:
    """A value that came back in place of what a collective returns, in a message: its type and a short repr, on one
    line (never a dump of a row or a tensor)."""
    return f"{type(value).__name__} {' '.join(reprlib.repr(value).split())}"


def _ranks(ranks: Sequence[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


class CollectiveError(_Picklable, PrefillDelayerError, RuntimeError):
    """The all-gather of one pass failed (peer died, timeout, transport error, malformed result).

    The delayer's state is exactly as it was before the pass. ``pass_number`` is
    the 1-based number of the pass that failed; ``group`` describes the group.
    """

    def __init__(self, message: str, *, pass_number: int, group: str) -> None:
        super().__init__(message)
        self.pass_number = pass_number
        self.group = group


class ConfigMismatchError(_Picklable, ConfigError):
    """Ranks of one group were built with different configurations.

    Detected from the configuration fingerprint every row carries, on the first
    pass; every rank raises it with the same message. ``fingerprints`` maps each
    rank to the fingerprint it sent; ``differing`` names the configuration fields
    that differ (``runtime.failure_detail``: the ranks compare field hashes once
    the fingerprints disagree), empty when they could not be told (``detail``
    then says why).
    """

    def __init__(self, *, pass_number: int, fingerprints: Mapping[int, int], local_config: Mapping[str, object],
                 differing: Sequence[str] = (), detail: str = "") -> None:
        groups: dict[int, list[int]] = {}
        for rank, fp in fingerprints.items():
            groups.setdefault(fp, []).append(rank)
        parts = "; ".join(f"{_ranks(ranks)}: fingerprint {fp:#018x}" for fp, ranks in groups.items())
        head = f"pass {pass_number}: ranks of the group were built with different PrefillDelayer configurations"
        if differing:
            fields = ", ".join(differing)
            message = f"{head}: they differ in {fields} ({parts}); build every rank with the same {fields}"
        else:
            unknown = f"; which field differs is unknown: {detail}" if detail else ""
            message = (f"{head} ({parts}{unknown}); build every rank with the same max_delay_passes, "
                       "token_usage_low_watermark, server_args, dp_size, attn_tp_size and profile")
        super().__init__(message)
        self.pass_number = pass_number
        self.fingerprints = dict(fingerprints)
        self.local_config = dict(local_config)
        self.differing = tuple(differing)


class PeerInputError(_Picklable, PassInputError):
    """Some rank passed an invalid ``negotiate`` input this pass.

    Every rank raises it with the same message, naming the offending ranks and
    fields (what the gathered error mask carries). On an offending rank the
    exception is chained (``__cause__``) to the detailed local ``PassInputError``.
    ``bad_fields`` maps each offending rank to its bad field names, ``bad_values``
    to the ``field=value`` text it sent once the rows showed the error
    (``runtime.failure_detail``; absent when it could not be had: ``detail`` says why).
    """

    def __init__(self, *, pass_number: int, bad_fields: Mapping[int, Sequence[str]],
                 bad_values: Optional[Mapping[int, str]] = None, detail: str = "") -> None:
        values = dict(bad_values or {})
        parts = "; ".join(f"rank {rank}: {values.get(rank) or ', '.join(fields)}" for rank, fields in bad_fields.items())
        unknown = f"; the values are unknown: {detail}" if detail and set(bad_fields) - set(values) else ""
        super().__init__(f"pass {pass_number}: invalid negotiate input on {_ranks(list(bad_fields))} ({parts}){unknown}")
        self.pass_number = pass_number
        self.bad_fields = {rank: tuple(fields) for rank, fields in bad_fields.items()}
        self.bad_values = values


class DesyncError(CollectiveError):
    """The all-gather paired this rank's row with rows of other passes, or with rows that are not this delayer's.

    Read from the ``pass_stamp`` every row carries (``runtime.envelope``), so
    every rank that runs this delayer raises it on the same collective, with
    the same message, and takes no decision: the state is as before the pass.
    Causes: a rank that skipped a pass's negotiation or negotiated twice in
    one, a rank restarted with a fresh delayer (its pass 1), a rank whose host
    announced a skip (``PolicyCore.skip``) while its peers negotiated, or a
    rank that runs another delayer (SGLang's own class, where the plugin is
    not active) or another collective on the group.

    ``passes`` maps each rank whose row is ours to the pass it sent;
    ``skipped`` lists the ranks that skipped it, ``foreign`` the ranks whose
    rows are not this delayer's; ``pass_number`` is this rank's own pass.
    """

    def __init__(self, *, pass_number: int, passes: Mapping[int, int], skipped: Sequence[int], foreign: Sequence[int],
                 row_len: int, policy: str, group: Optional[str] = None) -> None:
        parts = []
        by_pass: dict[tuple[int, bool], list[int]] = {}
        for rank, number in sorted(passes.items()):
            by_pass.setdefault((number, rank in skipped), []).append(rank)
        for (number, skip), ranks in by_pass.items():
            parts.append(f"{_ranks(ranks)}: {'skipping' if skip else 'at'} pass {number}")
        sent = "; ".join(parts)
        if foreign:
            message = (
                f"desync: {_ranks(list(foreign))} sent rows that are not {policy} rows (no pass stamp of this delayer, "
                f"{row_len} values a row): {'that rank runs' if len(foreign) == 1 else 'those ranks run'} another delayer "
                "(SGLang's own PrefillDelayer, where PREFILL_DELAYER_PROFILE is not set; every rank with the plugin logs "
                "'prefill-delayer active'), another build of this package, or another collective on the same group"
                + (f" ({sent})" if sent else "")
            )
        elif skipped and len({number for number, _ in by_pass}) == 1:
            message = (
                f"desync: {_ranks(list(skipped))} skipped the pass's negotiation that the other ranks ran ({sent}): "
                "ranks must negotiate the same passes (in SGLang 0.5.23, --prefill-decode-interval with "
                "--prefill-decode-interval-min-bs > 0 defers prefill on each rank by its own running batch)"
            )
        else:
            message = (
                f"desync: the all-gather paired rows of different passes ({sent}): a rank skipped a pass's negotiation "
                "or negotiated twice in one pass, or was restarted with a fresh delayer (its pass 1)"
            )
        super().__init__(message + "; no decision was taken on them", pass_number=pass_number,
                         group=group if group is not None else "")
        self.passes = dict(passes)
        self.skipped = tuple(skipped)
        self.foreign = tuple(foreign)
