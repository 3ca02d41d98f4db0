"""The runtime: a drop-in for SGLang's ``PrefillDelayer`` driving the spec's FSM over real gathers.

Importing this package needs neither torch (imported when a default
``torch.distributed`` gather is built) nor prometheus_client (imported when
``PrometheusPrefillDelayerMetrics`` is built), and never imports z3 or hypothesis.
"""

from .core import PolicyCore
from .delayer import PrefillDelayer, PrefillDelayerSinglePassExecutor
from .errors import CollectiveError, ConfigMismatchError, DesyncError, PeerInputError
from .gather import GatherFn, TorchGather
from .inprocess import InProcessGroup, run_ranks
from .metrics import PrometheusPrefillDelayerMetrics, record_single_pass_result
from .server_args import ServerArgs

__all__ = [
    "CollectiveError",
    "ConfigMismatchError",
    "DesyncError",
    "GatherFn",
    "InProcessGroup",
    "PeerInputError",
    "PolicyCore",
    "PrefillDelayer",
    "PrefillDelayerSinglePassExecutor",
    "PrometheusPrefillDelayerMetrics",
    "ServerArgs",
    "TorchGather",
    "record_single_pass_result",
    "run_ranks",
]
