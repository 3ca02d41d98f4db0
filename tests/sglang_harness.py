"""Helpers for the tests against a real SGLang install: the skip, SGLang's runtime context on a gloo rank, a rank's clock.

Nothing of SGLang is stubbed. ``publish_context`` builds SGLang's own objects:
a ``ServerArgs``, the config bags ``RuntimeContext.set_server_args`` projects
from it (``get_schedule()`` reads them), the parallel widths from SGLang's own
derivations (``parallel_widths_of``, ``num_dp_ranks_of``, ``attn_dp_enabled_of``)
and ranks (``derive_spawn_ranks``, ``derive_attention_ranks``) stamped through
``get_parallel().override_permanently`` (which validates the topology), and a
real ``GroupCoordinator`` on gloo as ``tp_group``. One step of publishing is
left out: the derived-leaf pass imports ``sglang.srt.configs``, whose
multimodal configs import torchvision, and PyPI's torchvision for Linux is
built against CUDA torch and does not load beside the CPU torch the suite
pins. The widths that pass would derive are the ones stamped here.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from datetime import timedelta
from importlib import metadata
from typing import Any, Callable, Optional

SGLANG_RELEASE = "0.5.23"
THEIR_MODULE = "sglang.srt.managers.prefill_delayer"


def sglang_skip_reason() -> Optional[str]:
    """Why the SGLang tests cannot run here, or ``None`` (without importing SGLang)."""
    if importlib.util.find_spec("sglang") is None:
        return (f"SGLang is not installed: pip install --no-deps sglang=={SGLANG_RELEASE} "
                "(and the extra sglang-test) to run the tests against it")
    try:
        version = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return "sglang is importable but has no distribution metadata"
    if version != SGLANG_RELEASE:
        return f"these tests are written against SGLang {SGLANG_RELEASE}; {version} is installed"
    return None


def layout_widths(world: int, attn_dp_size: int = 1, attn_cp_size: int = 1, dp_size: int = 1) -> dict[str, Any]:
    """The ServerArgs parallel fields of one test layout: the TP group is the whole gloo world."""
    return {"tp_size": world, "attn_dp_size": attn_dp_size, "attn_cp_size": attn_cp_size, "dp_size": dp_size}


def publish_context(rank: int, world: int, layout: dict[str, Any], schedule: dict[str, Any],
                    gloo_timeout_s: float = 4.0) -> dict[str, Any]:
    """SGLang's runtime context on this rank (torch.distributed already joined); returns what the delayer reads."""
    from unittest import mock

    import sglang.srt.runtime_context as rc
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.distributed.parallel_state import GroupCoordinator
    from sglang.srt.server_args import ServerArgs

    server_args = ServerArgs(model_path="dummy", device="cpu", enable_prefill_delayer=True, **layout, **schedule)
    rc.get_parallel().clear_stamp()  # a second layout in the same process starts afresh
    with mock.patch.object(rc, "_install_derived_leaves", lambda tops, sa: None):  # see the module docstring
        rc.get_context().set_server_args(server_args)
    view = resolved_view(server_args)
    widths = rc.parallel_widths_of(view)
    parallel = rc.get_parallel()
    parallel.override_permanently(
        attn_tp_size=widths["attn_tp_size"], attn_dcp_size=widths["attn_dcp_size"], moe_ep_size=widths["moe_ep_size"],
        moe_tp_size=widths["moe_tp_size"], dcp_enabled=widths["dcp_enabled"],
        num_dp_ranks=rc.num_dp_ranks_of(view), attn_dp_enabled=rc.attn_dp_enabled_of(view),
    )
    placement = rc.derive_spawn_ranks(
        world_rank=rank, tp_size=parallel.tp_size, ep_join_rank_offset=parallel.ep_join_rank_offset,
        attn_cp_size=parallel.attn_cp_size, attn_tp_size=parallel.attn_tp_size, moe_dp_size=parallel.moe_dp_size,
        moe_ep_size=parallel.moe_ep_size,
    )
    attn_tp_rank, attn_dp_rank = rc.derive_attention_ranks(
        tp_rank=placement["tp_rank"], attn_tp_size=parallel.attn_tp_size, attn_cp_size=parallel.attn_cp_size
    )
    tp_group = GroupCoordinator(
        group_ranks=[list(range(world))], local_rank=rank, torch_distributed_backend="gloo", use_pynccl=False,
        use_mscclpp=False, use_custom_allreduce=False, use_torch_symm_mem_all_reduce=False, use_hpu_communicator=False,
        use_xpu_communicator=False, group_name="tp", gloo_timeout=timedelta(seconds=gloo_timeout_s),
    )
    parallel.override_permanently(**placement, attn_tp_rank=attn_tp_rank, attn_dp_rank=attn_dp_rank, tp_group=tp_group)
    return {
        "num_dp_ranks": parallel.num_dp_ranks, "attn_dp_enabled": parallel.attn_dp_enabled,
        "attn_tp_size": parallel.attn_tp_size, "attn_cp_size": parallel.attn_cp_size, "attn_tp_rank": attn_tp_rank,
    }


def their_module(clock: Callable[[], float]) -> types.ModuleType:
    """SGLang's ``prefill_delayer`` module reading ``clock`` where it reads ``time.perf_counter``.

    Its ``_State`` takes ``time.perf_counter`` as a dataclass default factory at
    import, so the module is imported (first, in this process) with the clock in
    place, and its module-level ``time`` is then bound to one that has the clock.
    """
    import time

    assert THEIR_MODULE not in sys.modules, "SGLang's prefill_delayer was imported before its clock was set"
    real = time.perf_counter
    time.perf_counter = clock
    try:
        module = importlib.import_module(THEIR_MODULE)
    finally:
        time.perf_counter = real
    module.time = types.SimpleNamespace(perf_counter=clock)  # type: ignore[attr-defined]
    return module
