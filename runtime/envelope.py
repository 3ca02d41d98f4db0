"""The runtime's part of every row: what lets every rank detect a peer's bad input or other configuration.

After the policy's own fields (``Policy.row``) each rank appends, the same for
every policy:

* ``input_error``: a bit per bad input of this pass (``spec.inputs``), 0 when all
  are valid; a rank with a bad input sends its policy fields as zeros;
* ``config_fingerprint``: ``Config.fingerprint()``, so ranks built with different
  configurations refuse the pass on every rank alike.

``Envelope`` knows where these sit in a concatenated gather and turns a
rejected pass's rows into the one error every rank raises.
"""

from __future__ import annotations

from typing import Any, NoReturn, Optional, Sequence

from ..spec.errors import PassInputError
from ..spec.inputs import checks_of
from .errors import CollectiveError, ConfigMismatchError, PeerInputError
from .failure_detail import Exchange, bad_values_text, config_row, differing_fields, exchanged, row_texts, text_row

FIELDS = ("input_error", "config_fingerprint")


class Envelope:
    """Positions of the envelope in one configuration's rows, and the checks on a gathered pass."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.policy = config.policy
        self.n_policy = len(self.policy.row)
        self.row_len = self.n_policy + len(FIELDS)
        self.f_error = self.n_policy
        self.f_fingerprint = self.n_policy + 1
        self.world_size = config.world_size
        self.flat_len = self.world_size * self.row_len
        self.fingerprint = config.fingerprint()
        self.checks = checks_of(self.policy)
        self.error_head = [0] * self.n_policy

    @property
    def row_fields(self) -> tuple[str, ...]:
        """Every field of a gathered row, in order."""
        return self.policy.row_names + FIELDS

    @property
    def tail(self) -> tuple[int, int]:
        """The envelope of a valid row (what the compiled row ends with)."""
        return (0, self.fingerprint)

    def error_row(self, problems: list[tuple[str, str]]) -> list[int]:
        """The row a rank with a bad input sends: zero policy fields, the error mask, the fingerprint."""
        return self.error_head + [self.checks.mask(problems), self.fingerprint]

    def clean(self, flat: Sequence[int]) -> bool:
        """Every row carries this configuration's fingerprint and no error: the pass may be decided."""
        n = self.row_len
        return (
            len(flat) == self.flat_len
            and flat[self.f_fingerprint::n].count(self.fingerprint) == self.world_size
            and not any(flat[self.f_error::n])
        )

    def rows(self, flat: Sequence[int]) -> list[Sequence[int]]:
        n = self.row_len
        return [flat[i : i + n] for i in range(0, len(flat), n)]

    def policy_rows(self, flat: Sequence[int]) -> list[Sequence[int]]:
        """Each rank's policy fields (what the view folds)."""
        n, k = self.row_len, self.n_policy
        return [flat[i : i + k] for i in range(0, len(flat), n)]

    def reject(
        self, flat: Sequence[int], pass_number: int, group: str, problems: list[tuple[str, str]],
        clock_error: Optional[BaseException] = None, exchange: Optional[Exchange] = None,
    ) -> NoReturn:
        """Raise the error the gathered rows call for; every rank reaches the same verdict.

        A mismatch or a peer's bad input is spelled out by one more row through ``exchange``
        (``runtime.failure_detail``), which every rank sends alike, since the rows that call for it are the same.
        """
        if len(flat) != self.flat_len:
            raise CollectiveError(
                f"pass {pass_number}: all-gather over {group} returned {len(flat)} values, "
                f"expected {self.world_size} rows of {self.row_len}",
                pass_number=pass_number,
                group=group,
            )
        rows = self.rows(flat)
        fingerprints = {rank: r[self.f_fingerprint] for rank, r in enumerate(rows)}
        if len(set(fingerprints.values())) > 1:
            hashes, detail = exchanged(exchange, config_row(self.config, self.row_len), self.world_size, self.row_len)
            differing = differing_fields(self.config, hashes, self.row_len) if hashes is not None else []
            raise ConfigMismatchError(pass_number=pass_number, fingerprints=fingerprints, local_config=self.config.as_dict(),
                                      differing=differing, detail=detail)
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
            texts, detail = exchanged(exchange, text_row(bad_values_text(problems), self.row_len), self.world_size, self.row_len)
            values = {rank: t for rank, t in enumerate(row_texts(texts, self.row_len)) if t and rank in bad} if texts else {}
            raise PeerInputError(pass_number=pass_number, bad_fields=bad, bad_values=values, detail=detail) from local
        if local is not None:  # the gather dropped our error mask: still refuse the pass
            raise local
        # One fingerprint on every row, but not this rank's: the gather lost this rank's own row.
        raise CollectiveError(
            f"pass {pass_number}: all-gather over {group} returned rows that all carry fingerprint "
            f"{rows[0][self.f_fingerprint]:#018x}, none this rank's {self.fingerprint:#018x}: its own row is missing",
            pass_number=pass_number,
            group=group,
        )


def ensure_rows(rows: Sequence[Sequence[int]], envelope: Envelope, pass_number: int, group: str) -> list[int]:
    """A custom gather's rows, concatenated, after checking their shape."""
    n = envelope.row_len
    if len(rows) != envelope.world_size or any(len(r) != n for r in rows):
        lengths = sorted({len(r) for r in rows})
        raise CollectiveError(
            f"pass {pass_number}: all-gather over {group} returned {len(rows)} rows of lengths {lengths}, "
            f"expected {envelope.world_size} rows of {n}",
            pass_number=pass_number,
            group=group,
        )
    return [x for r in rows for x in r]
