"""The runtime's part of every row: what lets every rank detect a peer's bad input, other configuration or other pass.

After the policy's own fields (``Policy.row``) each rank appends, the same for
every policy:

* ``input_error``: a bit per bad input of this pass (``spec.inputs``), 0 when all
  are valid; a rank with a bad input sends its policy fields as zeros;
* ``config_fingerprint``: ``Config.fingerprint()``, so ranks built with different
  configurations (profile, parameters, the gather's layout) refuse the pass on
  every rank alike;
* ``pass_stamp``: which pass the row belongs to, and whose row it is. One
  int64: bits 0-39 the rank's pass number (mod 2**40), bit 40 set when the
  rank's host skips this pass's negotiation (``PolicyCore.skip``), bits 41-62
  the row's tag, a hash of the policy and the row's field names. A row of
  another delayer or of another collective on the group carries no tag of
  ours; a row of a rank that skipped, repeated or restarted carries another
  pass number. Either way no rank decides on it (``DesyncError``).

One all-gather carries all of it: the check costs no second collective.
``Envelope`` knows where these sit in a concatenated gather and turns a
rejected pass's rows into the one error every rank raises, read from the
gathered rows alone so that it is the same on every rank.
"""

from __future__ import annotations

import hashlib
import json
import operator
from typing import Any, NamedTuple, NoReturn, Optional, Sequence

from ..spec.errors import PassInputError
from ..spec.inputs import checks_of
from .errors import CollectiveError, ConfigMismatchError, DesyncError, PeerInputError, _ranks, shown
from .failure_detail import (Exchange, bad_values_text, config_row, differing_fields, exchanged, row_texts, text_room, text_row,
                             told)

FIELDS = ("input_error", "config_fingerprint", "pass_stamp")
# Who answers a rejected pass's detail round with a row that is no detail row (``runtime.failure_detail``).
_OTHER_SENDER = "a rank of another build of this package, or another collective on the group"

PASS_BITS = 40
PASS_MASK = (1 << PASS_BITS) - 1
SKIP_FLAG = 1 << PASS_BITS
TAG_SHIFT = PASS_BITS + 1
TAG_BITS = 63 - TAG_SHIFT  # the stamp stays a non-negative int64


def row_tag(policy: Any) -> int:
    """The tag of a policy's rows: a hash of its name and its row's field names, never 0 (a zeroed buffer's)."""
    blob = json.dumps(["prefill-delayer row", policy.name, list(policy.row_names + FIELDS)]).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") % ((1 << TAG_BITS) - 1) + 1


def pass_of(stamp: int) -> int:
    """The pass number a stamp carries (mod 2**40)."""
    return stamp & PASS_MASK


class Positions(NamedTuple):
    """Where the envelope sits in a policy's row (the same for every configuration of the policy)."""

    n: int  # the row's length
    f_error: int
    f_fingerprint: int
    f_stamp: int


def envelope_positions(policy: Any) -> Positions:
    """The envelope's places in ``policy``'s row: its own fields first, then ``FIELDS`` in order."""
    k = len(policy.row)
    return Positions(k + len(FIELDS), *(k + FIELDS.index(f) for f in FIELDS))


class Envelope:
    """Positions of the envelope in one configuration's rows, and the checks on a gathered pass."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.policy = config.policy
        self.n_policy = len(self.policy.row)
        self.row_len, self.f_error, self.f_fingerprint, self.f_stamp = envelope_positions(self.policy)
        self.world_size = config.world_size
        self.flat_len = self.world_size * self.row_len
        self.fingerprint = config.fingerprint()
        self.tag = row_tag(self.policy)
        self.tag_bits = self.tag << TAG_SHIFT
        self.checks = checks_of(self.policy)
        self.error_head = [0] * self.n_policy

    @property
    def row_fields(self) -> tuple[str, ...]:
        """Every field of a gathered row, in order."""
        return self.policy.row_names + FIELDS

    @property
    def tail(self) -> tuple[int, int]:
        """The constant part of a valid row's envelope (what the compiled row ends with; the stamp follows per pass)."""
        return (0, self.fingerprint)

    def stamp(self, pass_number: int, skip: bool = False) -> int:
        """The ``pass_stamp`` of this rank's row on ``pass_number``."""
        return self.tag_bits | (SKIP_FLAG if skip else 0) | (pass_number & PASS_MASK)

    def error_row(self, problems: list[tuple[str, str]], stamp: int) -> list[int]:
        """The row a rank with a bad input sends: zero policy fields, the error mask, the fingerprint, the stamp."""
        return self.error_head + [self.checks.mask(problems), self.fingerprint, stamp]

    def skip_row(self, stamp: int) -> list[int]:
        """The row of a rank that skips this pass's negotiation: zero policy fields, no error, the skip-flagged stamp."""
        return self.error_head + [0, self.fingerprint, stamp | SKIP_FLAG]

    def clean(self, flat: Sequence[int], stamp: int) -> bool:
        """Every row carries this configuration's fingerprint, this pass's ``stamp`` and no error: the pass may be decided."""
        n = self.row_len
        return (
            len(flat) == self.flat_len
            and flat[self.f_fingerprint::n].count(self.fingerprint) == self.world_size
            and flat[self.f_stamp::n].count(stamp) == self.world_size
            and not any(flat[self.f_error::n])
        )

    def rows(self, flat: Sequence[int]) -> list[Sequence[int]]:
        n = self.row_len
        return [flat[i : i + n] for i in range(0, len(flat), n)]

    def policy_rows(self, flat: Sequence[int]) -> list[Sequence[int]]:
        """Each rank's policy fields (what the view folds)."""
        n, k = self.row_len, self.n_policy
        return [flat[i : i + k] for i in range(0, len(flat), n)]

    def all_skipped(self, flat: Sequence[int], stamp: int) -> bool:
        """Every rank skipped this same pass, with this configuration: nothing to decide, nothing wrong."""
        n = self.row_len
        return (
            len(flat) == self.flat_len
            and flat[self.f_stamp::n].count(stamp | SKIP_FLAG) == self.world_size
            and flat[self.f_fingerprint::n].count(self.fingerprint) == self.world_size
        )

    def _ints(self, flat: Sequence[Any], pass_number: int, group: str) -> list[int]:
        """The gathered values as ints (numpy's and torch's integer scalars are); ``CollectiveError`` naming the rank and
        field of the first that is none (a custom gather that returned floats, say), never a ``TypeError`` later."""
        out = []
        for i, x in enumerate(flat):
            try:
                out.append(operator.index(x))
            except TypeError:
                rank, field = divmod(i, self.row_len)
                raise CollectiveError(
                    f"pass {pass_number}: all-gather over {group} returned {shown(x)} as rank {rank}'s "
                    f"{self.row_fields[field]}, where a row holds ints (int64): a gather returns the rows as it was "
                    "given them", pass_number=pass_number, group=group,
                ) from None
        return out

    def reject(
        self, flat: Sequence[int], pass_number: int, group: str, problems: list[tuple[str, str]],
        clock_error: Optional[BaseException] = None, exchange: Optional[Exchange] = None,
    ) -> NoReturn:
        """Raise the error the gathered rows call for; every rank reaches the same verdict.

        In this order: rows that are not ours (another delayer or collective),
        another configuration, rows of different passes (a skip, a repeat, a
        restarted rank), bad inputs. Each is read from the rows alone. A mismatch or a peer's bad input
        is then spelled out by one more row through ``exchange``
        (``runtime.failure_detail``), which every rank sends alike, since the rows that call for it are the same.
        """
        if len(flat) != self.flat_len:
            raise CollectiveError(
                f"pass {pass_number}: all-gather over {group} returned {len(flat)} values, "
                f"expected {self.world_size} rows of {self.row_len}",
                pass_number=pass_number,
                group=group,
            )
        rows = self.rows(self._ints(flat, pass_number, group))
        stamps = [r[self.f_stamp] for r in rows]
        foreign = [rank for rank, s in enumerate(stamps) if s >> TAG_SHIFT != self.tag or s < 0]
        if foreign:
            raise DesyncError(
                pass_number=pass_number, passes={r: pass_of(s) for r, s in enumerate(stamps) if r not in foreign},
                skipped=(), foreign=foreign, row_len=self.row_len, policy=self.policy.name, group=group,
            )
        fingerprints = {rank: r[self.f_fingerprint] for rank, r in enumerate(rows)}
        if len(set(fingerprints.values())) > 1:
            hashes, detail = exchanged(exchange, config_row(self.config, self.row_len), self.world_size, self.row_len)
            differing: list[str] = []
            if hashes is not None:
                silent = [rank for rank, ok in enumerate(told(hashes, self.row_len)) if not ok]
                if silent:  # its fields are unknown: any of them may be the one that differs
                    detail = f"{_ranks(silent)} sent no field hashes when asked for them ({_OTHER_SENDER})"
                else:
                    differing = differing_fields(self.config, hashes, self.row_len)
            raise ConfigMismatchError(pass_number=pass_number, fingerprints=fingerprints, local_config=self.config.as_dict(),
                                      differing=differing, detail=detail)
        if len(set(stamps)) > 1:
            raise DesyncError(
                pass_number=pass_number, passes={r: pass_of(s) for r, s in enumerate(stamps)},
                skipped=[r for r, s in enumerate(stamps) if s & SKIP_FLAG], foreign=(), row_len=self.row_len,
                policy=self.policy.name, group=group,
            )
        bad = {
            rank: self.checks.mask_fields(r[self.f_error]) or [f"error mask {r[self.f_error]}"]
            for rank, r in enumerate(rows)
            if r[self.f_error]
        }
        local = (
            PassInputError("invalid negotiate input: " + "; ".join(f"{name}: {why}" for name, why in problems))
            if problems
            else None
        )
        if local is not None and clock_error is not None:
            local.__cause__ = clock_error
        if bad:
            mine = text_row(bad_values_text(problems, text_room(self.row_len)), self.row_len)
            texts, detail = exchanged(exchange, mine, self.world_size, self.row_len)
            values: dict[int, str] = {}
            if texts is not None:
                read = row_texts(texts, self.row_len)
                values = {rank: t for rank, t in enumerate(read) if t and rank in bad}
                garbled = [rank for rank in bad if read[rank] is None]
                if garbled:
                    detail = f"{_ranks(garbled)} sent no text when asked for them ({_OTHER_SENDER})"
            raise PeerInputError(pass_number=pass_number, bad_fields=bad, bad_values=values, detail=detail) from local
        if local is not None:  # the gather dropped our error mask: still refuse the pass
            raise local
        # One fingerprint and one stamp on every row, but not this rank's: the gather lost this rank's own row.
        raise CollectiveError(
            f"pass {pass_number}: all-gather over {group} returned rows that all carry fingerprint "
            f"{rows[0][self.f_fingerprint]:#018x} and pass {pass_of(stamps[0])}, not this rank's "
            f"({self.fingerprint:#018x}, pass {pass_number}): its own row is missing",
            pass_number=pass_number,
            group=group,
        )


def ensure_rows(rows: Sequence[Sequence[int]], envelope: Envelope, pass_number: int, group: str) -> list[int]:
    """A custom gather's rows, concatenated, after checking their shape; ``CollectiveError`` naming the rank whose
    row is not one (its length, or what came back in its place)."""
    n, world = envelope.row_len, envelope.world_size
    head = f"pass {pass_number}: all-gather over {group} returned"
    try:
        count = len(rows)
    except TypeError:
        raise CollectiveError(f"{head} {shown(rows)}, expected a list of {world} rows of {n} ints, one per rank",
                              pass_number=pass_number, group=group) from None
    if count != world:
        raise CollectiveError(f"{head} {count} row{'' if count == 1 else 's'}, expected {world} rows of {n} values, one per rank",
                              pass_number=pass_number, group=group)
    wrong = []
    for rank, r in enumerate(rows):
        try:
            if len(r) != n:
                wrong.append(f"{len(r)} values from rank {rank}")
        except TypeError:
            wrong.append(f"{shown(r)} from rank {rank}")
    if wrong:
        raise CollectiveError(f"{head} {', '.join(wrong)}, expected a row of {n} values from each rank",
                              pass_number=pass_number, group=group)
    return [x for r in rows for x in r]

