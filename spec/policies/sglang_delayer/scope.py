"""What the proofs range over for the delayer, and the symbolic stand-ins they need (no solver imported).

A ``Family`` fixes the structural choices (profile, DP attention, queue trigger
off or on and at which ratio, prefill_max_requests set or not); ``sym_config``
builds its configuration with every number symbolic, through the symbolic
operator layer (``o.Int`` / ``o.Real`` / ``o.Bool`` make variables). The scope
line ``prove`` and the docs print is computed from these same objects, so it
says what the checks cover. The witnesses give, for a view, rows whose fold it
is (``aggregate-view``'s completeness); ``bmc_config`` keeps a counterexample's
numbers exactly representable as doubles, so its trace replays through real
float code unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

from ...fields import MAX_COUNT
from ...ops import AnyValue
from ...config import Layout, plain
from .config import MAX_QUEUE_MIN_RATIO
from .profiles import QUEUE_CAPACITY, features_of
from .properties import NO_DECODE_HOLD
from .variables import PassInput, Local

ANY_RATIO = AnyValue("any ratio", MAX_QUEUE_MIN_RATIO)

# The configuration parameters every family leaves symbolic, with the range as printed.
SYMBOLIC_PARAMETERS = (
    ("max_delay_passes", "any >= 0"),
    ("max_delay_ms", "any > 0"),
    ("token_usage_low_watermark", "off or any in [0, 1]"),
)
PMR_RANGE = "unset or any >= 1"
# aggregate-view's claim, which carries the single-step properties from the abstract view to rows.
LAYOUT_RANGE = "any number of DP groups, any attn_cp x attn_tp ranks per group, DP attention on and off"


@dataclass(frozen=True)
class Family:
    """One structural variant of the configuration the proofs range over."""

    profile: str
    enable_dp_attention: bool
    queue_ratio: Any  # None (trigger off), a configured float, or ANY_RATIO
    dp_size: Optional[int]  # without DP attention: a configured dp_size, or None for every one
    pmr_on: bool = False  # prefill_max_requests set (symbolic value)

    def label(self) -> str:
        dp = "dp-attn" if self.enable_dp_attention else f"tp-only(dp_size={'any' if self.dp_size is None else self.dp_size})"
        q = "queue-off" if self.queue_ratio is None else f"queue={'any' if self.queue_ratio == ANY_RATIO else repr(self.queue_ratio)}"
        return f"{self.profile}/{dp}/{q}" + ("/prefill_max_requests" if self.pmr_on else "")

    @property
    def dp_attn_queue(self) -> bool:
        """DP attention on, the queue trigger on, prefill_max_requests unset: where the clock can matter."""
        return self.enable_dp_attention and self.queue_ratio is not None and not self.pmr_on


@dataclass(frozen=True)
class Scope:
    """What the proofs range over: by default every queue ratio and every dp_size at once;
    ``prove --queue-min-ratio R`` / ``--dp-size N`` pin one (R's double rounding exact)."""

    queue_ratio: Any = ANY_RATIO  # a float, or ANY_RATIO
    dp_size: Optional[int] = None  # None: every dp_size

    def concrete_ratio(self) -> float:
        """A ratio for counterexamples, which must be concrete to replay."""
        return 0.5 if self.queue_ratio == ANY_RATIO else self.queue_ratio


def scope_of(dp_size: Optional[int] = None, queue_min_ratio: Optional[float] = None) -> Scope:
    """The scope of ``prove``'s options (``--dp-size``, ``--queue-min-ratio``)."""
    return Scope(ANY_RATIO if queue_min_ratio is None else float(queue_min_ratio), dp_size)


def families(profile: str, scope: Scope) -> list[Family]:
    """DP attention on and off, queue trigger off and at the scope's ratio(s);
    where the profile reads prefill_max_requests (queue-capacity), with it unset and set."""
    pmr = (False, True) if QUEUE_CAPACITY in features_of(profile) else (False,)
    return [
        Family(profile, dp_attn, q, scope.dp_size, p)
        for dp_attn in (True, False)
        for q in (None, scope.queue_ratio)
        for p in (pmr if q is not None else (False,))
    ]


def concrete(fam: Family, scope: Scope) -> Family:
    """``fam`` at one ratio and one dp_size: a counterexample must be concrete to replay."""
    ratio = scope.concrete_ratio() if fam.queue_ratio is not None else None
    return Family(fam.profile, fam.enable_dp_attention, ratio, fam.dp_size if fam.dp_size is not None else 4, fam.pmr_on)


def _ratio_text(ratio: Any) -> str:
    if ratio is None:
        return "off"
    return f"any in (0, {plain(MAX_QUEUE_MIN_RATIO)}]" if ratio == ANY_RATIO else plain(ratio)  # as --queue-min-ratio was typed


def scope_ranges(fams: Iterable[Family]) -> str:
    """The parameter ranges a property checked on ``fams`` (over the abstract view) holds for."""
    fams = list(fams)
    tp_only = {"any >= 1" if f.dp_size is None else str(f.dp_size) for f in fams if not f.enable_dp_attention}
    dp = "dp_size any >= 1" + (f" with DP attention, {' and '.join(sorted(tp_only))} without" if tp_only != {"any >= 1"} else "")
    ratios = list(dict.fromkeys(_ratio_text(f.queue_ratio) for f in fams))
    # A profile without queue-capacity never reads prefill_max_requests: any value is covered.
    reads_pmr = all(QUEUE_CAPACITY in features_of(f.profile) for f in fams)
    pmr = PMR_RANGE if any(f.pmr_on for f in fams) or not reads_pmr else "unset"
    parts = [dp, f"queue_min_ratio {' or '.join(ratios)}", f"prefill_max_requests {pmr}"]
    parts += [f"{name} {text}" for name, text in SYMBOLIC_PARAMETERS]
    return ", ".join(parts)


# ----- the configuration with its numbers symbolic -------------------------------------------


@dataclass
class SymConfig(Layout):
    """The guards' view of a configuration with the numeric parameters symbolic.

    Structural choices (profile, queue trigger on/off and its ratio,
    prefill_max_requests set or not, DP attention and, without it, dp_size)
    stay concrete: they pick which formula is built. Everything else is a
    symbolic variable, so a proof covers every value.
    """

    profile: str
    enable_dp_attention: bool
    dp_size: Any
    attn_tp_size: int
    queue_on: bool
    queue_ratio: Any
    max_delay_passes: Any
    max_delay_ms: Any
    watermark_on: Any
    watermark: Any
    pmr_on: bool = False
    pmr: Any = 0
    attn_cp_size: int = 1

    @property
    def features(self) -> frozenset[str]:
        return features_of(self.profile)


def sym_config(o: Any, fam: Family, tag: str = "") -> SymConfig:
    """The family's configuration with every parameter of ``SYMBOLIC_PARAMETERS`` a variable
    (and dp_size too, with DP attention or when the scope covers every dp_size)."""
    max_delay_passes, max_delay_ms = o.Int(f"max_delay_passes{tag}"), o.Real(f"max_delay_ms{tag}")
    watermark_on, watermark = o.Bool(f"watermark_on{tag}"), o.Real(f"watermark{tag}")
    return SymConfig(
        profile=fam.profile,
        enable_dp_attention=fam.enable_dp_attention,
        dp_size=o.Int(f"dp_size{tag}") if fam.enable_dp_attention or fam.dp_size is None else fam.dp_size,
        attn_tp_size=1,
        queue_on=fam.queue_ratio is not None,
        queue_ratio=fam.queue_ratio if fam.queue_ratio is not None else 0.0,
        max_delay_passes=max_delay_passes,
        max_delay_ms=max_delay_ms,
        watermark_on=watermark_on,
        watermark=watermark,
        pmr_on=fam.pmr_on,
        pmr=o.Int(f"prefill_max_requests{tag}") if fam.pmr_on else 0,
    )


def config_domain(o: Any, c: SymConfig) -> list:
    """The valid range of the symbolic numbers (``config.PARAMETERS``' checks, as constraints)."""
    from ...config import MAX_WORLD_SIZE

    dom = [c.max_delay_passes >= 0, c.max_delay_ms > 0, c.watermark >= 0, c.watermark <= 1]
    if not isinstance(c.dp_size, int):
        dom += [c.dp_size >= 1, c.dp_size <= MAX_WORLD_SIZE]
    if c.pmr_on:
        dom += [c.pmr >= 1, c.pmr <= MAX_COUNT]
    return dom


# ----- aggregate-view's witnesses: rows that fold to a given view -------------------------------


def witness_row(o: Any, c: Any, v: Any) -> tuple[PassInput, Local]:
    """A row that adds one prefillable (and forcing) rank when ``v`` has one, and ``v``'s maxima and flag."""
    pre = v.num_prefillable >= 1
    tu = o.If(v.num_force >= 1, o.RealVal(0), c.watermark)
    now = o.If(v.timeout_any, c.max_delay_ms / 1000, 0)
    inp = PassInput(pre, tu, v.running_batch, v.max_prefill_bs, v.mrr_max, v.waiting_queue_len)
    return inp, Local(v.timeout_any, o.IntVal(1), o.RealVal(0), o.BoolVal(False), now, v.mrr_max)


def split_view(o: Any, v: Any) -> Any:
    """The view of one counted row fewer, the one ``witness_row`` adds back."""
    return v._replace(
        n=v.n - 1,
        num_prefillable=v.num_prefillable - o.If(v.num_prefillable >= 1, 1, 0),
        num_force=v.num_force - o.If(v.num_force >= 1, 1, 0),
    )


def idle_row(o: Any) -> tuple[PassInput, Local]:
    """A row that changes no view when it is not counted."""
    inp = PassInput(o.BoolVal(False), o.RealVal(0), 0, 0, 0, 0)
    return inp, Local(o.BoolVal(False), o.IntVal(0), o.RealVal(0), o.BoolVal(False), o.RealVal(0), 0)


def layout_witness(o: Any, c: Any, v: Any, group: int, counted: bool, groups: int) -> tuple[PassInput, Local]:
    """Rank inputs whose rows fold to ``v`` on a concrete layout: counted rank g is prefillable iff
    g < num_prefillable and below the watermark iff g < num_force; every rank reports the maxima;
    every rank's wait has expired iff timeout_any (only the counted ranks' flags are read)."""
    g = group if counted else groups  # non-counted ranks: neither prefillable nor forcing
    pre = o.And(o.BoolVal(g < groups), g < v.num_prefillable)
    tu = o.If(g < v.num_force, o.RealVal(0), c.watermark)
    now = o.If(v.timeout_any, c.max_delay_ms / 1000, 0)
    inp = PassInput(pre, tu, v.running_batch, v.max_prefill_bs, v.mrr_max, v.waiting_queue_len)
    return inp, Local(v.timeout_any, o.IntVal(1), o.RealVal(0), o.BoolVal(False), now, v.mrr_max)


# ----- bounded model checking: numbers a trace can carry --------------------------------------

SMALL = 1000  # bound on counts in traces, for readable numbers
TU_SCALE = 1024  # token usage in 1/1024ths: exact as a double


def bmc_config(o: Any, c: SymConfig) -> tuple[list, Any]:
    """(assertions, the trace's config from a model's values): integer milliseconds, the watermark in 1/1024ths."""
    ms = o.Int("max_delay_ms_int")
    wm = o.Int("watermark_1024")
    assertions = [
        *config_domain(o, c),
        c.max_delay_passes >= 2,  # a bound of 0 would make the example degenerate
        c.max_delay_passes <= 10,
        ms >= 1,
        ms <= 100_000,
        c.max_delay_ms == o.ToReal(ms),
        wm >= 0,
        wm <= TU_SCALE,
        c.watermark == o.ToReal(wm) / TU_SCALE,
    ]
    if c.pmr_on:
        assertions.append(c.pmr <= SMALL)

    def trace_config(val: Any, ranks: int) -> dict:
        return {
            "dp_size": ranks,
            "attn_tp_size": 1,
            "enable_dp_attention": True,
            "max_delay_passes": val(c.max_delay_passes),
            "token_usage_low_watermark": val(wm) / TU_SCALE if val(c.watermark_on) else None,
            "queue_min_ratio": c.queue_ratio if c.queue_on else None,
            "max_delay_ms": float(val(ms)),
            "prefill_max_requests": val(c.pmr) if c.pmr_on else None,
            "attn_cp_size": 1,
        }

    return assertions, trace_config


def bmc_soft(o: Any, c: SymConfig) -> list:
    """Preferences for a readable counterexample's configuration: the watermark off."""
    return [(c.watermark_on == False, 2)]  # noqa: E712 - a symbolic term, not a Python comparison


# Where a single-step refutation must be shown reachable from fresh delayers: the family to
# unroll first, a first restriction to try (the defect expected), dropped when it finds
# nothing, and optionally the fewest passes a counterexample can have (the search starts there).
# "same-local-args": ranks pass equal local arguments, so only their clocks differ.
BMC_SEARCH = {
    # The slot path: no queue trigger needed.
    "bounded-delay": (lambda f: f.enable_dp_attention and f.queue_ratio is None, None),
    # The clock (ranks passing identical arguments) first; else the local max_running_requests.
    "agreement": (lambda f: f.dp_attn_queue, "same-local-args"),
    "agreement-equal-args": (lambda f: f.dp_attn_queue, None),
    # Ranks that parted ways take turns delaying.
    "joint-progress": (lambda f: f.dp_attn_queue, None),
    # A mixed wait with nothing decoding, past the hold: no run shorter than the hold plus one can show it.
    "no-decode-hold": (lambda f: f.enable_dp_attention and f.queue_ratio is None, None, NO_DECODE_HOLD + 1),
}
