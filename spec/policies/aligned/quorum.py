"""The quorum: a mixed pass on which most counted ranks have prefill work allows at once, if the operator asks.

Why: a mixed pass is held so that the ranks that cannot prefill can join the
prefill. A rank that cannot prefill either has requests queued behind a full
running batch (it joins once a slot frees, and holding for it is the alignment
that serves a saturated group) or has nothing queued at all (it joins only
when a request reaches it). When most ranks are ready and the rest have
nothing queued, the hold waits for arrivals; it saves at most one pass's
attention term (the late ranks' prefill runs in a pass of its own), and every
request on the ready ranks waits a pass per hold. So a mixed pass on which at
least ``quorum_percent`` percent of the counted ranks have prefill work, but
not all of them, allows at once (``quorum``). In the simulator, at 75: chat with
long outputs at 80% load, seed 0, TTFT p99 1.92 s -> 1.02 s (``docs/simulation.md``,
the quorum).

It is off by default (``quorum_percent`` None): on the benchmark suite ``aligned``
was designed on it changes no verdict.

What it needs beyond SGLang's call: a rank whose running batch is full (or whose
queue is empty) returns from ``get_new_batch_prefill`` before any call site, and
the executor's ``finalize`` negotiates for it with no counts at all. So the
plugin reads ``waiting_at_start``, the requests in the rank's waiting queue when
``get_new_batch_prefill`` begins (``integrations/sglang/readings``), and the row
carries one bit, ``has_work``: prefillable, or requests queued. The view sums it
over the counted rows (``num_work``). The rest is ``busy``'s row and
configuration, extended, not restated.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass
from typing import Any, cast

from ...fields import BOOL, COUNT, Field
from ...glossary import CONFIG, VIEW as VIEW_SYMBOL, Symbol
from ...policy import Agg
from . import busy, chunk

QUEUE = "waiting_at_start"
QUEUE_FIELD = Field(QUEUE, COUNT, "requests in this rank's waiting queue when get_new_batch_prefill begins (read from "
                    "the scheduler; 0 where not read)", default=0, sym="wts")
INPUTS = chunk.INPUTS + (QUEUE_FIELD,)

# ``chunk``'s inputs, then what the plugin reads at the start of ``get_new_batch_prefill`` (default 0).
PassInput: Any = cast(Any, namedtuple("PassInput", (*chunk.PassInput._fields, QUEUE),
                                      defaults=(*chunk.PassInput._field_defaults.values(), 0)))

ROW = busy.ROW + (Field("has_work", BOOL, "prefillable, or requests in the waiting queue at the start of the pass"),)


def work_bit(o: Any, c: Any, inp: Any) -> Any:
    """This rank has prefill work: it can prefill, or requests wait in its queue (behind a full running batch)."""
    return o.Or(inp.local_prefillable, inp.waiting_at_start > 0)


def local_row(o: Any, c: Any, inp: Any, s: Any) -> list[Any]:
    """``busy``'s row, then the work bit."""
    return [*busy.local_row(o, c, inp, s), o.b2i(work_bit(o, c, inp))]


View: Any = cast(Any, namedtuple("View", (*busy.View._fields, "num_work")))
VIEW = busy.VIEW + (Agg("num_work", "sum", "has_work"),)
SYMBOLS = busy.SYMBOLS + (
    Symbol(VIEW_SYMBOL, "num_work", "num_work", "counted rows with has_work = 1: prefillable, or requests queued"),
    Symbol(CONFIG, "quorum_on", "quorum_on", "quorum_percent is set", flag=True),
    Symbol(CONFIG, "quorum_min", "quorum_percent", "the percentage of the counted ranks that must have prefill work "
           "for a mixed pass to allow at once (quorum)"),
)


def all_have_work(view: Any) -> bool:
    """The chunk hold's test of a refused pass (``HostBinding.chunk_hold_waits``): every counted rank has prefill
    work, so a held chunk waits for ranks that join as soon as they can; where some rank has nothing queued, the hold
    would wait for a request to reach it, and the chunk goes on."""
    return bool(view.num_work == view.n)


def view_domain(o: Any, c: Any, v: Any) -> list:
    """``busy``'s, and: a prefillable row has work, and no more rows have work than are counted."""
    return [*busy.view_domain(o, c, v), v.num_prefillable <= v.num_work, v.num_work <= v.n]


# ----- the proofs' symbolic configuration and witnesses: busy's, with the quorum and the work bit -------------------


@dataclass
class SymConfig(busy.SymConfig):
    """``busy``'s symbolic configuration, and the quorum: on or off, and at any percentage in [1, 100]."""

    quorum_on: Any = False
    quorum_min: Any = 100


def sym_config(o: Any, fam: Any, tag: str = "") -> SymConfig:
    c = busy.sym_config(o, fam, tag)
    return SymConfig(**vars(c), quorum_on=o.Bool(f"quorum_on{tag}"), quorum_min=o.Int(f"quorum_percent{tag}"))


def config_domain(o: Any, c: Any) -> list:
    """``busy``'s, and the percentage in [1, 100] (``AlignedConfig``'s check)."""
    return [*busy.config_domain(o, c), c.quorum_min >= 1, c.quorum_min <= 100]


def scope_ranges(fams: Any) -> str:
    return busy.scope_ranges(fams) + ", quorum_percent off or any in [1, 100]"


# ``busy``'s witnesses, with one request queued where the row has work (a prefillable witness row or rank always has:
# num_prefillable <= num_work, and both take the lowest ranks).
_WITNESSES = chunk.BitWitnesses(busy, "num_work", lambda o, c, inp, work: PassInput(*inp, o.If(work, 1, 0)), PassInput)
witness_row, split_view = _WITNESSES.witness_row, _WITNESSES.split_view
idle_row, layout_witness = _WITNESSES.idle_row, _WITNESSES.layout_witness


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    """``busy``'s reference row, and the bit as written from its definition above."""
    work = o.If(o.Or(inp.local_prefillable, o.Not(inp.waiting_at_start == 0)), 1, 0)
    return [*busy.reference_row(o, c, inp, s), work]


# ----- the decision log, traces and the simulator: chunk's, with the reading ---------------------------------------

LOG, TRACE = chunk.with_reading(chunk.LOG, chunk.TRACE, QUEUE_FIELD, PassInput, "quorum_percent")

_new = tuple.__new__


def sim_inputs(facts: Any) -> Any:
    """A rank that asks: ``chunk``'s inputs, and the simulated queue at the start of the pass."""
    return _new(PassInput, (*chunk.sim_inputs(facts), facts.waiting_queue_len))


def sim_idle(facts: Any) -> Any:
    return PassInput(*chunk.sim_idle(facts), facts.waiting_queue_len)


__all__ = ["INPUTS", "LOG", "PassInput", "QUEUE", "QUEUE_FIELD", "ROW", "SYMBOLS", "TRACE", "VIEW", "View",
           "config_domain", "idle_row", "layout_witness", "local_row", "reference_row", "scope_ranges",
           "sim_idle", "sim_inputs", "split_view", "sym_config", "view_domain", "witness_row"]
