"""The default all-gather: one ``torch.distributed`` collective per pass, into preallocated buffers.

A gather is any callable ``gather(row) -> rows`` that takes this rank's row (a
sequence of ints: the policy's row, then ``runtime.envelope``) and returns every rank's row in the
group's rank order (DP-major: each DP group's attn_cp_size x attn_tp_size ranks
together, its first rank first). ``TorchGather`` is the production one; ``runtime.inprocess`` has a thread-backed one. A gather
may also offer ``gather_flat(row) -> ints`` (the rows concatenated), which the
delayer then calls instead, saving the per-rank lists.

torch is imported only when a ``TorchGather`` is built, so the rest of the
runtime imports without it.
"""

from __future__ import annotations

import ctypes
import warnings
from typing import Any, Callable, Optional, Protocol, Sequence, Union

from ..spec.errors import ConfigError

Row = Sequence[int]
Rows = Sequence[Sequence[int]]
GatherFn = Callable[[Row], Rows]


class AllReduceFn(Protocol):
    """The collective of an all-reduce policy (``runtime.reduce.TorchAllReduce``): the reduced row, for this rank's.
    That policy's core calls its ``all_reduce``; given a plain gather instead (``runtime.inprocess``), it reduces the
    gathered rows itself."""

    def all_reduce(self, row: Row) -> Sequence[int]: ...

    def __call__(self, row: Row) -> Sequence[int]: ...


Collective = Union[GatherFn, AllReduceFn]  # what a core takes: the all-reduce only for a policy that declares one


def import_torch() -> tuple[Any, Any]:
    """``(torch, torch.distributed)``, imported on first use.

    torch warns at import when numpy is absent; that is irrelevant here (no
    tensor ever crosses into numpy), so the warning is silenced for the import.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*NumPy.*")
        import torch
        import torch.distributed as dist
    return torch, dist


class TorchGather:
    """All-gather of one int64 row per rank over a ``torch.distributed`` group.

    Why it looks like this (the seed does a ``torch.tensor`` per pass, the
    collective, then about eight ``.item()`` calls, each a device sync on GPU):

    * the send and receive tensors are allocated once; the row is written into
      the send buffer through a ``ctypes`` view of its host memory (no tensor is
      created per pass);
    * exactly one collective per pass: ``torch.distributed.all_gather_single``;
    * exactly one read back to the host per pass: on CPU the receive buffer *is*
      host memory and is read once through its ``ctypes`` view; on a device the
      row is staged through a pinned host buffer (non-blocking copy in) and the
      result comes back with one device-to-host copy, the pass's only sync.

    ``group`` is a process group (``None`` = the default group); its size must
    equal ``world_size`` (checked here, at construction).
    """

    def __init__(self, group: Any, device: Any, world_size: int, row_len: int, *, group_name: str = "cpu_group") -> None:
        torch, dist = import_torch()
        if not (dist.is_available() and dist.is_initialized()):
            raise ConfigError(
                f"PrefillDelayer needs an initialized torch.distributed process group for its {group_name} "
                "(call torch.distributed.init_process_group first), or a gather= callable"
            )
        size = dist.get_world_size(group)
        if size < 0:
            raise ConfigError(f"this process is not a member of the {group_name} it was given")
        if size != world_size:
            raise ConfigError(
                f"{group_name} has {size} ranks but the configuration needs {world_size} "
                "(dp_size x attn_cp_size x attn_tp_size with DP attention, else attn_cp_size x attn_tp_size): "
                "pass the group the delayer negotiates over"
            )
        self._dist = dist
        self._group = group
        self.rank: int = dist.get_rank(group)
        self.world_size = world_size
        self.row_len = row_len
        self.device = torch.device(device)
        backend = dist.get_backend(group)
        self.description = f"{group_name} ({backend}, {world_size} ranks, device {self.device}, this rank {self.rank})"

        n = world_size * row_len
        self._send = torch.zeros(row_len, dtype=torch.int64, device=self.device)
        self._recv = torch.zeros(n, dtype=torch.int64, device=self.device)
        self._on_host = self.device.type == "cpu"
        if self._on_host:
            send_host, recv_host = self._send, self._recv
        else:
            pin = self.device.type == "cuda"  # page-locked staging for async copies
            send_host = torch.zeros(row_len, dtype=torch.int64, pin_memory=pin)
            recv_host = torch.zeros(n, dtype=torch.int64, pin_memory=pin)
        # Keep the host tensors alive: the ctypes views alias their memory.
        self._send_host, self._recv_host = send_host, recv_host
        self._send_view = (ctypes.c_int64 * row_len).from_address(send_host.data_ptr())
        self._recv_view = (ctypes.c_int64 * n).from_address(recv_host.data_ptr())
        self._bounds = tuple(range(0, n, row_len))

    def gather_flat(self, row: Row) -> list[int]:
        """Every rank's row, concatenated in rank order (``world_size * row_len`` ints)."""
        # Raises on a wrong length or a value outside int64.
        self._send_view[:] = row  # type: ignore[call-overload]  # ctypes takes any sequence (typeshed: a list)
        if not self._on_host:
            self._send.copy_(self._send_host, non_blocking=True)
        self._dist.all_gather_single(self._recv, self._send, group=self._group)
        if not self._on_host:
            self._recv_host.copy_(self._recv)  # the pass's one device-to-host read (a sync)
        return self._recv_view[:]

    def __call__(self, row: Row) -> list[list[int]]:
        """The ``gather(row) -> rows`` contract: every rank's row, in rank order."""
        flat = self.gather_flat(row)
        step = self.row_len
        return [flat[i : i + step] for i in self._bounds]

    def __repr__(self) -> str:
        return f"TorchGather({self.description})"


def default_gather(
    server_args: Any, cpu_group: Any, device: Any, device_group: Any, world_size: int, row_len: int
) -> TorchGather:
    """The collective the seed would use.

    The seed gathers over ``device_group`` on ``device`` (NCCL) when
    ``disable_overlap_schedule`` is set or ``SGLANG_NCCL_ALL_GATHER_IN_OVERLAP_SCHEDULER_SYNC_BATCH``
    is true, else over ``cpu_group`` on CPU (gloo) — and then asserts
    ``not disable_overlap_schedule``, so its own documented NCCL trigger can only
    crash. We keep the selection and drop the contradictory assert: with
    ``disable_overlap_schedule=True`` the delayer gathers over ``device_group``.
    A missing ``device_group`` on that path is a ``ConfigError`` (the seed's
    first assert), not an ``AssertionError``.
    """
    group, on, name = collective_group(server_args, cpu_group, device, device_group)
    return TorchGather(group, on, world_size, row_len, group_name=name)


def collective_group(server_args: Any, cpu_group: Any, device: Any, device_group: Any) -> tuple[Any, Any, str]:
    """(group, device, its name): the group the seed's collective rides, as ``default_gather`` explains."""
    from .server_args import NCCL_ENV, uses_device_group

    if uses_device_group(server_args):
        if device_group is None:
            raise ConfigError(
                "device_group is required when the all-gather rides the device group "
                f"(disable_overlap_schedule=True or {NCCL_ENV} set); pass device_group= or gather="
            )
        return device_group, device if device is not None else "cpu", "device_group"
    return cpu_group, "cpu", "cpu_group"


def describe(gather: Optional[Callable[..., Any]]) -> str:
    """A short name for ``gather`` in error messages."""
    return getattr(gather, "description", None) or repr(gather)
