"""A policy's chunk hold in SGLang's scheduler: a refused pass parks this rank's chunk in flight (``HostBinding.chunk_hold``).

SGLang's ``PrefillAdder.add_chunked_req(req)`` adds the next chunk of the
rank's chunked request whatever the delayer says: it negotiates with
``local_prefillable=True`` and ignores the verdict (0.5.17-0.5.23, each
release's ``schedule_policy.py``). A policy with a chunk hold (``aligned``'s
opt-in ``chunk_hold_tokens``) wants the chunk to wait for the group's next
prefill pass instead. The plugin hooks that method AROUND, in place of the
chunk reading's BEFORE hook (``readings``, whose value it reads the same way).
The hook hands the reading to the pass's executor, and while more than the
threshold is left it negotiates first, with the arguments that
``add_chunked_req`` negotiates with. On a refusal whose view the policy's test
holds for (``HostBinding.chunk_hold_waits``: for ``aligned``, every counted rank
has prefill work), it returns the request unadded, without running the method.

That return is SGLang's own "parked chunk": ``add_chunked_req`` returns the
request unadded when a hybrid-SWA model has no chunk budget, and
``get_new_batch_prefill`` keeps it as ``self.chunked_req``, admits nothing
after a refusal (every later call site gets the pass's verdict), and on the next
pass stashes nothing for it (``extend_end`` is still ``prefix_len``; 0.5.17-0.5.21:
``extend_range.end == len(prefix_indices)``). Read off 0.5.17-0.5.23's
``scheduler.py`` and ``schedule_policy.py``, and run in 0.5.23's scheduler
(``tests/test_sglang_scheduler.py``).
A diffusion LM's chunk (``adder.dllm_config`` set) is never held: its budget
is the adder's own.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from .readings import ADD_CHUNKED_REQ, Reading

TARGET = ADD_CHUNKED_REQ
_HOLD = "_prefill_delayer_chunk_hold"

# The AROUND hook's signature, as SGLang's HookRegistry calls it: (the original method, its self, its arguments).
Around = Callable[..., Any]


def around_for(reading: Reading, release: str, threshold: int, waits: Callable[[Any], bool]) -> Around:
    """The AROUND hook for ``release``: the chunk reading, then the hold of a refused chunk with more than
    ``threshold`` prompt tokens left, where ``waits`` (``HostBinding.chunk_hold_waits``) holds for the pass's view."""
    from ...spec.policy import holds_chunk  # here, not at import: the plugin's modules import the standard library only

    read, name = reading.read[release], reading.name

    def hold_chunk(original: Callable[..., Any], adder: Any, *args: Any, **kwargs: Any) -> Any:
        executor, left = read(adder, args, kwargs)
        if executor is None:  # a scheduler without a delayer: nothing to read for, nothing to hold
            return original(adder, *args, **kwargs)
        executor.read_from_scheduler(name, left)
        if (holds_chunk(threshold, left) and getattr(adder, "dllm_config", None) is None
                and not executor.negotiate_should_allow_prefill(
                    local_prefillable=True,
                    running_batch=adder.running_batch.batch_size(),
                    max_prefill_bs=adder.max_prefill_bs,
                    max_running_requests=adder.max_running_requests,
                    waiting_queue_len=adder.waiting_queue_len,
                ) and waits(executor.pass_view())):
            return args[0] if args else kwargs["req"]  # parked: the chunk's next round waits for a pass that allows
        return original(adder, *args, **kwargs)

    setattr(hold_chunk, _HOLD, threshold)
    return hold_chunk


def wrap(original: Callable[..., Any], around: Around) -> Callable[..., Any]:
    """``original`` inside ``around`` (what the plugin framework's AROUND does): ``install``'s way, and the simulator's."""
    if getattr(original, _HOLD, None) is not None:
        return original

    @functools.wraps(original)
    def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        return around(original, self, *args, **kwargs)

    setattr(held, _HOLD, getattr(around, _HOLD))
    return held


def shown(threshold: int) -> str:
    """What the plugin's line says the hook does beside reading the chunk."""
    return f"a refusal parks the chunk while more than {threshold} prompt tokens are left"
