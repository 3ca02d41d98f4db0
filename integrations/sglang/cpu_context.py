"""SGLang's runtime context on a CPU gloo world, without a model: for the benchmark and the tests.

Nothing of SGLang is stubbed. ``publish_context`` builds SGLang's own objects:
a ``ServerArgs``, the config bags ``RuntimeContext.set_server_args`` projects
from it (``get_schedule()`` reads them), the parallel widths from SGLang's own
derivations (``parallel_widths_of``, ``num_dp_ranks_of``, ``attn_dp_enabled_of``)
and ranks (``derive_spawn_ranks``, ``derive_attention_ranks``) stamped through
``get_parallel().override_permanently`` (which validates the topology), and a
real ``GroupCoordinator`` on gloo as ``tp_group``. One step of publishing is
left out: the derived-leaf pass imports ``sglang.srt.configs``, whose
multimodal configs import torchvision, and PyPI's torchvision for Linux is
built against CUDA torch and does not load beside a CPU torch. The widths that
pass would derive are the ones stamped here. A scheduler publishes its context
itself; nothing here is needed there.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any


def layout_widths(world: int, attn_dp_size: int = 1, attn_cp_size: int = 1, dp_size: int = 1) -> dict[str, Any]:
    """The ServerArgs parallel fields of one test layout: the TP group is the whole gloo world."""
    return {"tp_size": world, "attn_dp_size": attn_dp_size, "attn_cp_size": attn_cp_size, "dp_size": dp_size}


def publish_context(rank: int, world: int, layout: dict[str, Any], schedule: dict[str, Any],
                    gloo_timeout_s: float = 4.0) -> dict[str, Any]:
    """SGLang's runtime context on this rank (torch.distributed already joined); returns what the delayer reads."""
    import sglang.srt.runtime_context as rc
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.distributed.parallel_state import GroupCoordinator
    from sglang.srt.server_args import ServerArgs

    # the delayer on, as --enable-prefill-delayer turns it on, unless ``schedule`` says otherwise
    server_args = ServerArgs(model_path="dummy", device="cpu", **{"enable_prefill_delayer": True, **schedule}, **layout)
    rc.get_parallel().clear_stamp()  # a second layout in the same process starts afresh
    derived_leaves = rc._install_derived_leaves
    rc._install_derived_leaves = lambda tops, sa: None  # see the module docstring
    try:
        rc.get_context().set_server_args(server_args)
    finally:
        rc._install_derived_leaves = derived_leaves
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
