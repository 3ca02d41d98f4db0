"""What a rejected pass's rows cannot say: which parameter differs, what a peer's bad input was.

A gathered row has room for a configuration fingerprint and an input-error mask:
enough for every rank to refuse the pass alike, not to tell the operator why in
words. When the rows show a configuration mismatch or a peer's bad input, every
rank sees the same rows and so gets here alike; each then sends one more row of
the same length through the same gather (the failure path only: a pass that
succeeds still does exactly one collective), and every rank raises the same
message from what came back:

* for a mismatch, a short hash of each configuration field (two 31-bit hashes per
  int), the policy's name first: the fields whose hashes differ are named;
* for a bad input, the offending rank's ``field=value (expected ...)`` text (UTF-8,
  eight bytes per int; the expectations dropped, then the text cut, to fit the
  row), the others an empty row.

Each such row ends with ``DETAIL_TAG``, which no pass row ends with (its stamp is
never negative). A row without it (a rank of another build, or another collective
on the group, answered the round) is never read: neither printed as text nor
compared as hashes. That rank's detail is said to be unknown, and why.
"""

from __future__ import annotations

import hashlib
import json
import operator
from typing import Any, Callable, Optional, Sequence

Exchange = Callable[[list[int]], Sequence[int]]  # one more row through the pass's gather: every rank's, concatenated
_HASH_BITS = 31
_PER_INT = 2  # hashes packed into one int64


def _short_hash(value: Any) -> int:
    blob = json.dumps(value, sort_keys=True, default=repr).encode()
    return int.from_bytes(hashlib.blake2b(blob, digest_size=4).digest(), "big") >> (32 - _HASH_BITS)


def _fields(config: Any) -> list[tuple[str, Any]]:
    """The named hash slots: the policy, then every configuration field (the last slot takes any that do not fit)."""
    return [("policy", config.policy.name), *sorted(config.as_dict().items())]


# The last int of every detail row: negative, so no pass row (whose last int is its stamp, >= 0) ends with it.
DETAIL_TAG = -int.from_bytes(hashlib.blake2b(b"prefill-delayer failure detail", digest_size=7).digest(), "big") - 1


def told(flat: Sequence[int], row_len: int) -> list[bool]:
    """Whether each rank's row is a detail row (ends with ``DETAIL_TAG``), in rank order."""
    return [flat[i + row_len - 1] == DETAIL_TAG for i in range(0, len(flat), row_len)]


def config_row(config: Any, row_len: int) -> list[int]:
    fields = _fields(config)
    slots = (row_len - 1) * _PER_INT
    hashes = [_short_hash(list(f)) for f in fields[: slots - 1]] + [_short_hash(fields[slots - 1:])]
    hashes += [0] * (slots - len(hashes))
    return [(hashes[i] << _HASH_BITS) | hashes[i + 1] for i in range(0, slots, _PER_INT)] + [DETAIL_TAG]


def differing_fields(config: Any, flat: Sequence[int], row_len: int) -> list[str]:
    """The configuration fields whose hashes differ between the ranks that sent them (``told``); just ``policy`` when
    the policies differ."""
    slots = (row_len - 1) * _PER_INT
    mask = (1 << _HASH_BITS) - 1
    per_rank = [[h for x in flat[i : i + row_len - 1] for h in ((x >> _HASH_BITS) & mask, x & mask)]
                for i, ok in zip(range(0, len(flat), row_len), told(flat, row_len)) if ok]
    fields = _fields(config)
    names = [name for name, _ in fields[: slots - 1]] + [", ".join(name for name, _ in fields[slots - 1:])]
    differ = [names[i] for i in range(min(len(names), slots)) if len({r[i] for r in per_rank}) > 1]
    return ["policy"] if "policy" in differ else [d for d in differ if d]


def text_room(row_len: int) -> int:
    """The bytes of text a detail row holds."""
    return 8 * (row_len - 1)


def text_row(text: str, row_len: int) -> list[int]:
    """``text`` as a detail row (eight UTF-8 bytes an int, then the tag), cut at a character to fit, marked ``...``
    when cut."""
    room = text_room(row_len)
    raw = text.encode()
    if len(raw) > room:
        raw = raw[: room - 3]
        while raw and (raw[-1] & 0xC0) == 0x80:  # not inside a character
            raw = raw[:-1]
        raw = raw.decode(errors="ignore").encode() + b"..."
    raw = raw.ljust(room, b"\0")
    return [int.from_bytes(raw[i : i + 8], "big", signed=True) for i in range(0, room, 8)] + [DETAIL_TAG]


def row_texts(flat: Sequence[int], row_len: int) -> list[Optional[str]]:
    """Every rank's text, in rank order; ``None`` for a row that is no detail row (``told``) or whose text is none
    ``text_row`` writes (not UTF-8, or holding a character that is not printable: a zero byte, a newline), which no
    message may print."""
    out: list[Optional[str]] = []
    for i, ok in zip(range(0, len(flat), row_len), told(flat, row_len)):
        text: Optional[str] = None
        if ok:
            try:
                raw = b"".join(operator.index(x).to_bytes(8, "big", signed=True) for x in flat[i : i + row_len - 1])
                text = raw.rstrip(b"\0").decode()
            except (OverflowError, TypeError, ValueError):  # a value past int64, or no int; bytes that are not UTF-8
                text = None
        out.append(text if text is not None and text.isprintable() else None)
    return out


def bad_values_text(problems: Sequence[tuple[str, str]], room: Optional[int] = None) -> str:
    """``field=value (expected ...), ...`` of this rank's bad inputs, as its checks said them (``expected X, got V``);
    without the expectations where that text would pass ``room`` bytes (a row's size), so that the values stay."""
    full, short = [], []
    for name, why in problems:
        expected, got, value = why.rpartition(", got ")
        if not got:  # a check that says no value (the clock that raised): its words
            expected, value = "", why.rsplit("got ", 1)[-1]
        full.append(f"{name}={value} ({expected})" if expected else f"{name}={value}")
        short.append(f"{name}={value}")
    text = ", ".join(full)
    return text if room is None or len(text.encode()) <= room else ", ".join(short)


def exchanged(exchange: Optional[Exchange], row: list[int], world: int, row_len: int) -> tuple[Optional[Sequence[int]], str]:
    """(every rank's row, "") after one more gather, or (None, why not)."""
    if exchange is None:
        return None, "this gather cannot be asked again"
    try:
        flat = exchange(row)
    except Exception as err:  # noqa: BLE001 - the pass fails anyway; say why the detail is missing
        return None, f"asking the ranks failed: {type(err).__name__}: {err}"
    if len(flat) != world * row_len:
        return None, f"asking the ranks returned {len(flat)} values, expected {world * row_len}"
    return flat, ""
