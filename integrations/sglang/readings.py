"""What the plugin reads from SGLang's scheduler itself, for a policy's inputs that are no argument of SGLang's call.

A policy declares them (``HostBinding.reads``); each has here the scheduler
method it is read at, a BEFORE hook that reads it there and hands it to the
pass's executor (``read_from_scheduler``), and the releases whose code the hook
was read against. Two so far, both ``aligned``'s (with ``aligned``'s chunk hold
set, the chunk's is read by the hold's AROUND hook instead, ``chunk_hold``):

``chunk_tokens_left`` (``aligned``): the prompt tokens left of this rank's
chunked request in flight. ``Scheduler.get_new_batch_prefill`` calls
``PrefillAdder.add_chunked_req(req)`` with the chunk, after
``req.init_next_round_input()`` and before any other call site, and from 0.5.17
on that method negotiates with ``local_prefillable=True`` whatever the verdict.
It computes the number itself as ``cand_extend_input_len``:
``len(req.full_untruncated_fill_ids) - req.prefix_len`` in 0.5.22-0.5.23,
``- len(req.prefix_indices)`` in 0.5.17-0.5.21 (read off each release's
``schedule_policy.py`` and ``scheduler.py``). A rank with no chunk never reaches
the hook, so the executor's default, 0, stands. In 0.5.14-0.5.16
``add_chunked_req`` does not negotiate (a chunked rank is not prefillable at a
call site), so a policy that reads it is refused there, at start-up.

``waiting_at_start`` (``aligned``): the requests in this rank's waiting queue as
the pass's admission begins. ``Scheduler.get_new_batch_prefill`` builds the
pass's executor, then calls ``self._get_new_batch_prefill_raw(
prefill_delayer_single_pass=..., running_batch=...)``, whose first test returns
before any call site when the running batch is full or the queue is empty; so
a rank with requests queued behind a full batch negotiates only through the
executor's ``finalize``, with no counts. The hook reads ``len(self.waiting_queue)``
before that method runs, on every rank (read off 0.5.17-0.5.23's
``scheduler.py``: the same call, by keyword, in each).
"""

from __future__ import annotations

import functools
import importlib
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

SCHEDULE_POLICY_MODULE = "sglang.srt.managers.schedule_policy"
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
ADD_CHUNKED_REQ = f"{SCHEDULE_POLICY_MODULE}.PrefillAdder.add_chunked_req"
NEW_BATCH_PREFILL_RAW = f"{SCHEDULER_MODULE}.Scheduler._get_new_batch_prefill_raw"
_HOOKED = "_prefill_delayer_readings"

# How a hooked method's call is read: (its self, positional arguments, keyword arguments) -> (the pass's executor or
# None, the value).
Read = Callable[[Any, tuple, dict], tuple[Any, int]]


def _chunk_left(left: Callable[[Any], int]) -> Read:
    """``PrefillAdder.add_chunked_req(req)``: the adder holds the pass's executor; ``left`` reads the chunk."""
    return lambda adder, args, kwargs: (adder.prefill_delayer_single_pass, left(args[0] if args else kwargs["req"]))


def _left_by_prefix_len(req: Any) -> int:
    return len(req.full_untruncated_fill_ids) - req.prefix_len  # type: ignore[no-any-return]


def _left_by_prefix_indices(req: Any) -> int:
    return len(req.full_untruncated_fill_ids) - len(req.prefix_indices)


def _waiting_at_start(scheduler: Any, args: tuple, kwargs: dict) -> tuple[Any, int]:
    """``Scheduler._get_new_batch_prefill_raw(prefill_delayer_single_pass=, running_batch=)``: its waiting queue."""
    return kwargs.get("prefill_delayer_single_pass"), len(scheduler.waiting_queue)


@dataclass(frozen=True)
class Reading:
    """One input read from the scheduler: where (a method, hooked BEFORE) and how, per release."""

    name: str
    target: str  # "module.Class.method"
    read: Mapping[str, Read]  # release -> how its call is read

    @property
    def where(self) -> str:
        """``Class.method``, as the plugin's line and its errors name it."""
        return ".".join(self.target.rsplit(".", 2)[1:])

    def hook_for(self, release: str) -> Callable[..., None]:
        """The BEFORE hook for ``release``: hands the value to the executor of the pass the method belongs to."""
        read, name = self.read[release], self.name

        def read_before(owner: Any, *args: Any, **kwargs: Any) -> None:
            executor, value = read(owner, args, kwargs)
            if executor is not None:  # a scheduler without a delayer: no pass to hand it to
                executor.read_from_scheduler(name, value)

        setattr(read_before, _HOOKED, name)
        return read_before


_CHUNK_RELEASES = {
    **{r: _chunk_left(_left_by_prefix_indices) for r in ("0.5.17", "0.5.18", "0.5.19", "0.5.20", "0.5.21")},
    **{r: _chunk_left(_left_by_prefix_len) for r in ("0.5.22", "0.5.23")},
}
_QUEUE_RELEASES = {f"0.5.{n}": _waiting_at_start for n in range(17, 24)}
READINGS = {
    "chunk_tokens_left": Reading("chunk_tokens_left", ADD_CHUNKED_REQ, _CHUNK_RELEASES),
    "waiting_at_start": Reading("waiting_at_start", NEW_BATCH_PREFILL_RAW, _QUEUE_RELEASES),
}


def readings_for(names: tuple[str, ...], release: str) -> list[Reading]:
    """The readings a policy's ``reads`` need on ``release``; ``ValueError`` saying why when one cannot be read there."""
    out = []
    for name in names:
        reading = READINGS.get(name)
        if reading is None:
            raise ValueError(f"the policy reads {name!r} from the scheduler, which this plugin cannot read")
        if release not in reading.read:
            raise ValueError(
                f"the policy reads {name} from SGLang's scheduler at {reading.where}, read for SGLang "
                f"{', '.join(reading.read)} only; SGLang {release}'s does not negotiate there")
        out.append(reading)
    return out


def scheduler_loaded() -> bool:
    """The modules the hooks' targets live in are imported: a scheduler process (the scheduler imports both)."""
    return SCHEDULE_POLICY_MODULE in sys.modules and SCHEDULER_MODULE in sys.modules


def target_owner(reading: Reading) -> Any:
    """The class whose method the reading hooks, its module imported (``AttributeError`` if the release lacks it)."""
    module, cls, method = reading.target.rsplit(".", 2)
    owner = getattr(importlib.import_module(module), cls)
    getattr(owner, method)
    return owner


def wrap(original: Callable[..., Any], hook: Callable[..., None]) -> Callable[..., Any]:
    """``original`` with ``hook`` before it (what the plugin framework's BEFORE does): ``install``'s way."""
    if getattr(original, _HOOKED, None) == getattr(hook, _HOOKED):
        return original

    @functools.wraps(original)
    def hooked(self: Any, *args: Any, **kwargs: Any) -> Any:
        hook(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    setattr(hooked, _HOOKED, getattr(hook, _HOOKED))
    return hooked
