"""The busy bit: ``aligned``'s own low-load watermark forces no pass while some counted rank is busy.

Why: the low-load watermark (``low_load_watermark``) reads one rank's KV usage, so a
rank that has just drained, beside ranks whose KV is half full, forces every pass
as though the group were idle. On the benchmark suite's long-short mix at seed 1 the
watermark forced 244 of 873 passes, on which the forcing rank's usage averaged 0.24,
the group's 0.41 and the fullest rank's 0.58; each is an unaligned prefill in a group
whose slowest rank sets the pass: TTFT p99 11.0 s, 7.04 s with no watermark at all,
6.98 s with this rule. Below the load at which a delay pays (Poisson at 50%,
decode-heavy, DP=16, #32880) the fullest rank on a forced pass averages 0.13-0.29,
so the watermark keeps every pass it gave there (``docs/simulation.md``).

The row carries one bit (``busy``: KV usage at or above ``busy_watermark``), the
view its sum over the counted rows; it is read only while the watermark in force
is aligned's own (SGLang's ``--prefill-delayer-token-usage-low-watermark`` unset),
and the configuration keeps ``busy_watermark`` above it, so a forcing row is never a
busy one. No input is added: the bit is the call's own ``token_usage``. The rest is
``chunk``'s row (the delayer's and the long-chunk bit), extended, not restated.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any, cast

from ...fields import BOOL, Field
from ...glossary import CONFIG, VIEW as VIEW_SYMBOL, Symbol
from ...policy import Agg
from . import chunk

# The KV token usage at which a rank is busy, where the configuration does not say: half the pool.
BUSY_WATERMARK = 0.5

ROW = chunk.ROW + (Field("busy", BOOL, "KV token usage at or above busy_watermark, while aligned's own watermark is "
                                       "in force"),)


def busy_bit(o: Any, c: Any, inp: Any) -> Any:
    """This rank's KV usage is at or above ``busy_watermark`` (the rule on)."""
    return o.And(c.busy_on, o.Not(inp.token_usage < o.num(c.busy_min)))


def local_row(o: Any, c: Any, inp: Any, s: Any) -> list[Any]:
    """``chunk``'s row, then the busy bit."""
    return [*chunk.local_row(o, c, inp, s), o.b2i(busy_bit(o, c, inp))]


View: Any = cast(Any, namedtuple("View", (*chunk.View._fields, "num_busy")))
VIEW = chunk.VIEW + (Agg("num_busy", "sum", "busy"),)
SYMBOLS = chunk.SYMBOLS + (
    Symbol(VIEW_SYMBOL, "num_busy", "num_busy", "counted rows with busy = 1: KV usage at or above busy_watermark"),
    Symbol(CONFIG, "busy_on", "busy_on", "busy_watermark is set and the watermark in force is aligned's own "
           "low_load_watermark (SGLang's token_usage_low_watermark unset)", flag=True),
)


def busy_hold(o: Any, c: Any, v: Any) -> Any:
    """Some counted rank is busy: aligned's own watermark forces nothing on this pass."""
    return o.And(c.busy_on, v.num_busy > 0)


def view_domain(o: Any, c: Any, v: Any) -> list:
    """``chunk``'s, and: busy rows are not forcing ones (busy_watermark is above the watermark in force), and there
    is none with the rule off."""
    return [*chunk.view_domain(o, c, v), 0 <= v.num_busy, v.num_busy <= v.n - v.num_force,
            o.Or(o.Not(v.num_busy > 0), c.busy_on)]


# ----- the proofs' symbolic configuration and witnesses: chunk's, with the busy watermark ----------------------------


@dataclass
class SymConfig(chunk.SymConfig):
    """``chunk``'s symbolic configuration, and the busy watermark: on or off, and at any value above the watermark."""

    busy_on: Any = False
    busy_min: Any = 1.0


def sym_config(o: Any, fam: Any, tag: str = "") -> SymConfig:
    c = chunk.sym_config(o, fam, tag)
    return SymConfig(**vars(c), busy_on=o.Bool(f"busy_on{tag}"),
                     busy_min=o.Real(f"busy_watermark{tag}"))


def config_domain(o: Any, c: Any) -> list:
    """``chunk``'s, and: the rule is on only beside a watermark, above it, and at most 1 (``AlignedConfig``'s check)."""
    return [*chunk.config_domain(o, c),
            o.Or(o.Not(c.busy_on), o.And(c.watermark_on, c.busy_min > c.watermark, c.busy_min <= 1))]


def scope_ranges(fams: Any) -> str:
    return chunk.scope_ranges(fams) + ", busy_watermark off or any in (low_load_watermark, 1]"


def _witness_busy(o: Any, v: Any) -> Any:
    """Whether the row ``witness_row`` adds (and ``split_view`` takes away) is busy: a forcing one never is; a
    non-forcing one is when the rest of the view cannot hold every busy row, its non-forcing rows numbering
    ``v.n - 1 - num_force``."""
    return o.And(o.Not(v.num_force >= 1), v.num_busy > v.n - 1 - v.num_force)


def witness_row(o: Any, c: Any, v: Any) -> tuple[Any, Any]:
    """``chunk``'s witness, at ``busy_watermark`` usage when it is the busy row (``_witness_busy``)."""
    inp, local = chunk.witness_row(o, c, v)
    return inp._replace(token_usage=o.If(_witness_busy(o, v), c.busy_min, inp.token_usage)), local


def split_view(o: Any, v: Any) -> Any:
    less = chunk.split_view(o, v)
    return less._replace(num_busy=v.num_busy - o.If(_witness_busy(o, v), 1, 0))


idle_row = chunk.idle_row  # its usage, 0, is below every busy_watermark (> 0): the bit is 0


def layout_witness(o: Any, c: Any, v: Any, group: int, counted: bool, groups: int) -> tuple[Any, Any]:
    """``chunk``'s layout witness; counted rank g is busy iff g >= n - num_busy (the last num_busy ranks, none of them
    forcing: num_busy <= n - num_force)."""
    inp, local = chunk.layout_witness(o, c, v, group, counted, groups)
    busy = o.And(o.BoolVal(counted and group < groups), group >= v.n - v.num_busy)
    return inp._replace(token_usage=o.If(busy, c.busy_min, inp.token_usage)), local


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    """``chunk``'s reference row, and the bit as written from its definition above."""
    busy = o.If(o.And(c.busy_on, inp.token_usage >= o.num(c.busy_min)), 1, 0)
    return [*chunk.reference_row(o, c, inp, s), busy]


__all__ = ["BUSY_WATERMARK", "ROW", "SYMBOLS", "VIEW", "View", "busy_bit", "busy_hold", "local_row", "view_domain"]
