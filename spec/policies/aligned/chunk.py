"""The one input ``aligned`` reads beyond SGLang's call: the prompt tokens left of this rank's chunk in flight.

Why it is needed: on the benchmark suite's long-short mix, a rank part-way through a
long prompt prefills every pass whatever the verdict (``add_chunked_req`` goes
on regardless), so an ``all`` pass that delays the other ranks to fill a batch
aligns nothing with it: the chunked rank's next passes are prefill passes
anyway, and the delay only adds to the short prompts' TTFT. With at least
``long_chunk_tokens`` prompt tokens left on some counted rank, such a pass
allows at once (``long_chunk``). The simulator measured it: TTFT p99 of the
long-short workload 8.04 s -> 6.40 s, no other workload moved
(``docs/simulation.md``).

Where it is read: SGLang's ``PrefillAdder.add_chunked_req(req)`` (0.5.17 on)
negotiates with the chunk in hand and computes the same number itself
(``cand_extend_input_len``: ``len(req.full_untruncated_fill_ids) - req.prefix_len``
in 0.5.22-0.5.23); the plugin reads it there (``integrations/sglang/readings``)
and hands it to the pass's executor, 0 on a rank with no chunk.

The threshold is SGLang's own ``--chunked-prefill-size`` wherever the scheduler
has one (``Param.server_arg``; the simulator's chunk budget likewise): a rank with
at least a whole chunk left prefills a full pass now and the next pass too. The
row carries one bit (``long_chunk``: prefillable with at least
``long_chunk_tokens`` left), the view its sum over the counted rows; the rest is
the delayer's (``spec/policies/sglang_delayer``), extended, not restated.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, cast

from ...fields import BOOL, COUNT, MAX_COUNT, Field
from ...glossary import VIEW as VIEW_SYMBOL, Symbol
from ...policy import Agg
from ..sglang_delayer import bindings, reference, row as base_row, scope
from ..sglang_delayer.variables import INPUTS as BASE_INPUTS, PassInput as BasePassInput

CHUNK = "chunk_tokens_left"
# The prompt tokens left on a chunked rank at which an ``all`` pass is not worth delaying, where no scheduler gives its
# chunk size (SGLang's --chunked-prefill-size replaces it): SGLang's usual chunk, 8,192 tokens. Every proof covers
# every value >= 1, and the rule off.
LONG_CHUNK_TOKENS = 8192

CHUNK_FIELD = Field(CHUNK, COUNT, "prompt tokens left of this rank's chunked request in flight (0: none)", default=0,
                    sym="ctl")
INPUTS = BASE_INPUTS + (CHUNK_FIELD,)


# The delayer's call arguments, then what the plugin reads at ``add_chunked_req`` (default 0: no chunk).
PassInput: Any = cast(Any, namedtuple("PassInput", (*BasePassInput._fields, CHUNK),
                                      defaults=(*BasePassInput._field_defaults.values(), 0)))

ROW = base_row.ROW + (Field("long_chunk", BOOL, "prefillable, with at least long_chunk_tokens left of its chunk"),)


def long_chunk_bit(o: Any, c: Any, inp: Any) -> Any:
    """This rank can prefill and its chunk in flight has at least ``long_chunk_tokens`` prompt tokens left."""
    return o.And(inp.local_prefillable, c.long_chunk_on, inp.chunk_tokens_left >= c.long_chunk_min)


def local_row(o: Any, c: Any, inp: Any, s: Any) -> list[Any]:
    """The delayer's row, then the long-chunk bit."""
    return [*base_row.local_row(o, c, inp, s), o.b2i(long_chunk_bit(o, c, inp))]


# The delayer's view, and how many counted rows are mid-way through a long chunk.
View: Any = cast(Any, namedtuple("View", (*base_row.View._fields, "num_long_chunk")))
VIEW = base_row.VIEW + (Agg("num_long_chunk", "sum", "long_chunk"),)
SYMBOLS = (Symbol(VIEW_SYMBOL, "num_long_chunk", "num_long_chunk",
                  "counted rows with long_chunk = 1: prefillable, with at least long_chunk_tokens left of a chunk in flight"),)


def view_domain(o: Any, c: Any, v: Any) -> list:
    """The delayer's, and: a long-chunk row is a prefillable one, and there is none with the rule off."""
    return [*base_row.view_domain(o, c, v), 0 <= v.num_long_chunk, v.num_long_chunk <= v.num_prefillable,
            o.Or(o.Not(v.num_long_chunk > 0), c.long_chunk_on)]


# ----- the proofs' symbolic configuration and witnesses: the delayer's, with the threshold and the bit -------------


@dataclass
class SymConfig(scope.SymConfig):
    """The delayer's symbolic configuration, and the threshold: on or off, and at any value (both variables)."""

    long_chunk_on: Any = False
    long_chunk_min: Any = 1


def sym_config(o: Any, fam: Any, tag: str = "") -> SymConfig:
    c = scope.sym_config(o, fam, tag)
    return SymConfig(**vars(c), long_chunk_on=o.Bool(f"long_chunk_on{tag}"),
                     long_chunk_min=o.Int(f"long_chunk_tokens{tag}"))


def config_domain(o: Any, c: Any) -> list:
    return [*scope.config_domain(o, c), c.long_chunk_min >= 1, c.long_chunk_min <= MAX_COUNT]


def scope_ranges(fams: Any) -> str:
    return scope.scope_ranges(fams) + ", long_chunk_tokens off or any >= 1, chunk_hold_tokens any (no verdict reads it)"


@dataclass(frozen=True)
class BitWitnesses:
    """aggregate-view's witnesses for a row bit the view sums into ``count`` and one more input sets: ``base``'s
    (the layer below), each row with the input ``set_input(o, c, inp, on)`` appends, where ``on`` says whether the row
    has the bit. The witness row has it when ``v`` counts one; on a layout, counted rank g has it iff g < count (the
    lowest ranks, as the layer below puts its prefillable ones); an idle row appends 0."""

    base: Any
    count: str
    set_input: Callable[[Any, Any, Any, Any], Any]
    input_cls: Any

    def witness_row(self, o: Any, c: Any, v: Any) -> tuple[Any, Any]:
        inp, local = self.base.witness_row(o, c, v)
        return self.set_input(o, c, inp, getattr(v, self.count) >= 1), local

    def split_view(self, o: Any, v: Any) -> Any:
        less, n = self.base.split_view(o, v), getattr(v, self.count)
        return less._replace(**{self.count: n - o.If(n >= 1, 1, 0)})

    def idle_row(self, o: Any) -> tuple[Any, Any]:
        inp, local = self.base.idle_row(o)
        return self.input_cls(*inp, 0), local

    def layout_witness(self, o: Any, c: Any, v: Any, group: int, counted: bool, groups: int) -> tuple[Any, Any]:
        inp, local = self.base.layout_witness(o, c, v, group, counted, groups)
        g = group if counted else groups
        return self.set_input(o, c, inp, o.And(o.BoolVal(g < groups), g < getattr(v, self.count))), local


# The delayer's witnesses, mid-way through a long chunk where the row has the bit (it is then prefillable).
_WITNESSES = BitWitnesses(scope, "num_long_chunk", lambda o, c, inp, long: PassInput(*inp, o.If(long, c.long_chunk_min, 0)),
                          PassInput)
witness_row, split_view = _WITNESSES.witness_row, _WITNESSES.split_view
idle_row, layout_witness = _WITNESSES.idle_row, _WITNESSES.layout_witness


def reference_row(o: Any, c: Any, inp: Any, s: Any) -> list:
    """The releases' row (``reference.reference_row``), and the bit as written from its definition above."""
    long = o.If(o.And(inp.local_prefillable, c.long_chunk_on, o.Not(inp.chunk_tokens_left < c.long_chunk_min)), 1, 0)
    return [*reference.reference_row(o, c, inp, s), long]


# ----- the decision log, traces and the simulator: the delayer's, with the reading ---------------------------------

def with_reading(log: Any, trace: Any, field: Field, input_cls: Any, config_name: str) -> tuple[Any, Any]:
    """The decision log's and the traces' schemas with one more input read from the scheduler: ``field``, logged as a
    reading and appended to the inputs (``input_cls``), and ``config_name`` in a trace's configuration."""
    name = field.name
    new_log = replace(log, readings=log.readings + ((name, name),),
                      inputs_from_row=lambda o, row, r: input_cls._make((*log.inputs_from_row(o, row, r), r[name])))
    return new_log, replace(trace, inputs=trace.inputs + (field,), config=trace.config + (config_name,))


LOG, TRACE = with_reading(bindings.LOG, bindings.TRACE, CHUNK_FIELD, PassInput, "long_chunk_tokens")

_new = tuple.__new__


def sim_params(settings: Any) -> dict[str, Any]:
    """The simulated scheduler's chunk budget is SGLang's --chunked-prefill-size: the threshold, as in the plugin."""
    return {"long_chunk_tokens": settings["chunked_prefill_size"]} if "chunked_prefill_size" in settings else {}


def chunk_hold(config: Any) -> Optional[int]:
    """The opt-in chunk hold's threshold (``HostBinding.chunk_hold``): with ``chunk_hold_tokens`` set, a refusal also
    holds this rank's chunk in flight while more than that many of its prompt tokens are left, and every counted rank
    has prefill work (``quorum.all_have_work``), so that the chunk waits for the group's next prefill pass with the
    rank's queue instead of running a prefill pass of its own (the long-short mix: docs/simulation.md). SGLang's
    ``add_chunked_req`` goes on whatever the verdict; the plugin parks the chunk there, as SGLang's own hybrid-SWA
    early return does. It changes no verdict, so no proof reads it."""
    return config.chunk_hold_tokens  # type: ignore[no-any-return]


def sim_inputs(facts: Any) -> Any:
    """A rank that asks: the delayer's call (``bindings.SIM_FACTS``), and the simulated chunk's tokens left."""
    return _new(PassInput, (True, *bindings.SIM_FACTS(facts), facts.chunk_tokens_left))


def sim_idle(facts: Any) -> Any:
    return PassInput(False, facts.token_usage, chunk_tokens_left=facts.chunk_tokens_left)
