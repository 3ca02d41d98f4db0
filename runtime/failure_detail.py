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
* for a bad input, the offending rank's ``field=value`` text (UTF-8, eight bytes
  per int, cut to the row's size), the others an empty row.
"""

from __future__ import annotations

import hashlib
import json
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


def config_row(config: Any, row_len: int) -> list[int]:
    fields = _fields(config)
    slots = row_len * _PER_INT
    hashes = [_short_hash(list(f)) for f in fields[: slots - 1]] + [_short_hash(fields[slots - 1:])]
    hashes += [0] * (slots - len(hashes))
    return [(hashes[i] << _HASH_BITS) | hashes[i + 1] for i in range(0, slots, _PER_INT)]


def differing_fields(config: Any, flat: Sequence[int], row_len: int) -> list[str]:
    """The configuration fields whose hashes differ between ranks; just ``policy`` when the policies differ."""
    slots = row_len * _PER_INT
    mask = (1 << _HASH_BITS) - 1
    per_rank = [[h for x in flat[i : i + row_len] for h in ((x >> _HASH_BITS) & mask, x & mask)]
                for i in range(0, len(flat), row_len)]
    fields = _fields(config)
    names = [name for name, _ in fields[: slots - 1]] + [", ".join(name for name, _ in fields[slots - 1:])]
    differ = [names[i] for i in range(min(len(names), slots)) if len({r[i] for r in per_rank}) > 1]
    return ["policy"] if "policy" in differ else [d for d in differ if d]


def text_row(text: str, row_len: int) -> list[int]:
    """``text`` as a row of ints (eight UTF-8 bytes each), cut at a character to fit, marked ``...`` when cut."""
    room = 8 * row_len
    raw = text.encode()
    if len(raw) > room:
        raw = raw[: room - 3]
        while raw and (raw[-1] & 0xC0) == 0x80:  # not inside a character
            raw = raw[:-1]
        raw = raw.decode(errors="ignore").encode() + b"..."
    raw = raw.ljust(room, b"\0")
    return [int.from_bytes(raw[i : i + 8], "big", signed=True) for i in range(0, room, 8)]


def row_texts(flat: Sequence[int], row_len: int) -> list[str]:
    """Every rank's text, in rank order."""
    raw = [b"".join(x.to_bytes(8, "big", signed=True) for x in flat[i : i + row_len]) for i in range(0, len(flat), row_len)]
    return [r.rstrip(b"\0").decode(errors="replace") for r in raw]


def bad_values_text(problems: Sequence[tuple[str, str]]) -> str:
    """``field=value, ...`` of this rank's bad inputs (the value as its check printed it: the text after ``got``)."""
    return ", ".join(f"{name}={why.rsplit('got ', 1)[-1]}" for name, why in problems)


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
