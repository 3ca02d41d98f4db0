"""SGLang 0.5.23's own ``Scheduler`` for one DP rank, on CPU and without a model.

What the simulator's ``--scheduler sglang`` runs on each rank, and nothing of
SGLang re-implemented: ``Scheduler.process_input_requests`` takes the requests
(the health-check drop of a busy scheduler included), ``get_next_batch_to_run``
merges, filters, decodes and admits through ``get_new_batch_prefill`` with
``SchedulePolicy``, ``PrefillAdder`` and the release's ``RecentPrefillBatchSizeTracker``,
``run_batch`` launches, and ``process_batch_result`` applies the results to the
caches, one pass late, in ``event_loop_overlap``'s order (``OverlapRank.launch``).

How the object is built (``build_scheduler``), read off 0.5.23's ``Scheduler.__init__``:
the same ``init_*`` methods in the same order, with the settings SGLang's own
``ServerArgs`` gives through the runtime context, except where ``__init__``
needs a GPU, a model, sockets or threads:

* the model worker is ``CpuModelWorker``: ``forward_batch_generation`` returns
  the next token of every request (the fake forward), its model runner holds
  what the scheduler reads of it (no attention backend attribute, so the
  default tile, SGLang's ``NgramEmbeddingManager`` switched off);
* the memory is what ``kv_cache_builder.build_kv_cache`` builds, on CPU: a
  ``ReqToTokenPool`` of ``max_running_requests`` rows, an ``MHATokenToKVPool``
  of one layer, one head of width one (the indices are real, the KV a few MB),
  a ``PagedTokenToKVPoolAllocator`` at the chosen page size, and the tree cache
  SGLang's own ``create_tree_cache`` picks (a ``UnifiedRadixCache``, disabled
  unless prefix caching is asked for: 0.5.23 has no separate ``ChunkCache``);
* the IPC channels are sinks (outputs are read off the requests instead), the
  watchdog thread is not started;
* a DP rank's attention-TP, attention-CP and PP groups have one member here
  (``attn_tp_size`` 1), ``OneRankGroup``; the DP-wide collectives are the
  simulator's: the delayer's all-gather (the runtime's, given as ``gather``) and
  the MLP sync, whose only effect on scheduling (an idle batch on a rank
  without work while another rank has some) the engine applies with SGLang's
  own ``get_idle_batch`` (``OverlapRank.idle_batch``).

The runtime context is process-wide (SGLang has one scheduler per process), so
every rank of a run shares one ``publish_context``; what differs per rank in a
real deployment (its DP rank, its groups' members) only labels outputs there.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
import types
from array import array
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Optional

RELEASE = "0.5.23"  # the scheduler this module builds: SGLang 0.5.23's sglang/srt/managers/scheduler.py


class SchedulerUnavailable(RuntimeError):
    """SGLang's scheduler module does not import here (the message says why, in one line)."""


def import_scheduler() -> Any:
    """``sglang.srt.managers.scheduler``, or ``SchedulerUnavailable`` naming why not."""
    try:
        import sglang
    except ImportError:
        raise SchedulerUnavailable("SGLang is not installed") from None
    version = getattr(sglang, "__version__", "unknown")
    if version != RELEASE:
        raise SchedulerUnavailable(f"this backend runs SGLang {RELEASE}'s scheduler; SGLang {version} is installed")
    try:
        import sglang.srt.managers.scheduler as scheduler
    except ModuleNotFoundError as err:  # a module it imports is not installed: named, as pip knows it
        missing = (err.name or "").split(".")[0] or str(err)
        raise SchedulerUnavailable(f"the Python module {missing}, which sglang.srt.managers.scheduler imports, "
                                   "is not installed") from None
    except Exception as err:  # noqa: BLE001 - any import failure is the same answer: not here
        first = str(err).splitlines()[0] if str(err) else ""
        raise SchedulerUnavailable(f"sglang.srt.managers.scheduler does not import ({type(err).__name__}: {first})") from None
    return scheduler


@dataclass(frozen=True)
class RankSettings:
    """One DP rank of the simulated deployment, as SGLang's server arguments state it."""

    dp_size: int
    max_running_requests: int  # per DP rank
    max_total_tokens: int  # KV tokens per DP rank
    chunked_prefill_size: int
    max_prefill_tokens: int
    page_size: int
    enable_mixed_chunk: bool
    prefix_cache: bool  # the radix cache (prefix sharing); off: --disable-radix-cache
    context_len: int  # the longest request the run can hold, prompt + output

    def server_args(self, model_dir: str) -> Any:
        """SGLang's ``ServerArgs`` for this deployment (DP attention over ``dp_size`` ranks, attention TP 1).

        The prefill delayer is off here: the simulator gives each rank the delayer of
        the profile under test itself (``OverlapRank.__init__``). ``max_running_requests``
        is the server's, which SGLang divides by the DP size.
        """
        from sglang.srt.server_args import ServerArgs

        return ServerArgs(
            model_path=model_dir, device="cpu", skip_tokenizer_init=True,
            tp_size=self.dp_size, attn_dp_size=self.dp_size,
            max_running_requests=self.max_running_requests * self.dp_size,
            chunked_prefill_size=self.chunked_prefill_size, max_prefill_tokens=self.max_prefill_tokens,
            page_size=self.page_size, enable_mixed_chunk=self.enable_mixed_chunk,
            disable_radix_cache=not self.prefix_cache, context_length=self.context_len,
            enable_prefill_delayer=False,
        )


def _model_dir(context_len: int) -> str:
    """A model folder with a config and no weights: what ``ModelConfig`` reads (the architecture does not matter here)."""
    folder = tempfile.mkdtemp(prefix="sglang-cpu-scheduler-")
    atexit.register(shutil.rmtree, folder, True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 1, "num_key_value_heads": 1,
        "max_position_embeddings": context_len, "torch_dtype": "bfloat16", "eos_token_id": 2,
    }
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    return folder


class OneRankGroup:  # noqa: B903 - attributes as SGLang's GroupCoordinator names them
    """A group of one process (a DP rank's attention-TP, attention-CP and PP groups with ``attn_tp_size`` 1)."""

    world_size = 1
    rank_in_group = 0
    first_rank = last_rank = 0
    is_first_rank = is_last_rank = True
    ranks = (0,)
    cpu_group = device_group = None
    device = "cpu"


def publish_context(settings: RankSettings) -> Any:
    """SGLang's runtime context for a rank of ``settings``; returns the ``ServerArgs``. Replaces any earlier one."""
    import sglang.srt.runtime_context as rc

    server_args = settings.server_args(_model_dir(settings.context_len))
    parallel = rc.get_parallel()
    parallel.clear_stamp()
    rc.get_context().set_server_args(server_args)
    placement = rc.derive_spawn_ranks(
        world_rank=0, tp_size=parallel.tp_size, ep_join_rank_offset=parallel.ep_join_rank_offset,
        attn_cp_size=parallel.attn_cp_size, attn_tp_size=parallel.attn_tp_size, moe_dp_size=parallel.moe_dp_size,
        moe_ep_size=parallel.moe_ep_size,
    )
    attn_tp_rank, attn_dp_rank = rc.derive_attention_ranks(
        tp_rank=placement["tp_rank"], attn_tp_size=parallel.attn_tp_size, attn_cp_size=parallel.attn_cp_size
    )
    # dp_rank None: no DataParallelController spawned this process (the simulator dispatches).
    # The DP rank's own groups have one member; the DP-wide tp_group's collectives (the
    # delayer's, the MLP sync) are the simulator's, so it has no process group to run any.
    one = OneRankGroup()
    parallel.override_permanently(**placement, attn_tp_rank=attn_tp_rank, attn_dp_rank=attn_dp_rank, dp_rank=None,
                                  attn_tp_group=one, attn_cp_group=one, pp_group=one, tp_group=SimulatedDPGroup(settings.dp_size))
    rc.get_context().override("scheduler.pp_max_micro_batch_size_default", pp_max_micro_batch_size=settings.max_running_requests)
    return server_args


class SimulatedDPGroup:
    """The DP-wide TP group of a simulated rank: its size and rank, no process group (the simulator runs its collectives)."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.rank_in_group = 0
        self.first_rank = 0
        self.last_rank = world_size - 1
        self.is_first_rank = True
        self.is_last_rank = world_size == 1
        self.ranks = tuple(range(world_size))
        self.cpu_group = self.device_group = None
        self.device = "cpu"

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the simulated DP group has no {name!r}: its collectives are the simulator's")


class LoadSnapshots:
    """Where ``Scheduler.publish_load_snapshot`` writes (shared memory for the DP controller, in SGLang): the latest."""

    def __init__(self, publish_interval: int) -> None:
        self.publish_counter = 0
        self.publish_interval = max(1, publish_interval)
        self.latest: Optional[Any] = None

    def write(self, load: Any) -> None:
        self.latest = load


class _Sink:
    """Where a scheduler's outputs would go over ZMQ; the simulator reads them off the requests."""

    def send_output(self, *args: Any, **kwargs: Any) -> None:
        pass

    send_pyobj = send_output


class CpuModelWorker:
    """The fake forward: every request of a batch gets its next token; the model runner holds what the scheduler reads."""

    TOKEN = 7  # never the end of sequence (the model's eos_token_id is 2), and the requests ignore EOS anyway

    def __init__(self, model_config: Any, req_to_token_pool: Any, max_running_requests: int) -> None:
        import torch
        from sglang.srt.model_executor.model_runner_components.ngram_embedding_manager import NgramEmbeddingManager

        self.model_config = model_config
        self.model_runner = types.SimpleNamespace(
            attn_backend=types.SimpleNamespace(),  # no extend_attention_block_m: the scheduler's default tile
            prefill_aware_swa=False,
            canary_manager=None,
            ngram_embedding_manager=NgramEmbeddingManager.from_model(
                model=torch.nn.Module(), model_config=model_config, req_to_token_pool=req_to_token_pool,
                max_running_requests=max_running_requests, device="cpu",
            ),
        )

    def forward_batch_generation(self, batch: Any, **kwargs: Any) -> Any:
        import torch
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput
        from sglang.srt.managers.utils import GenerationBatchResult

        n = batch.batch_size()
        return GenerationBatchResult(
            logits_output=LogitsProcessorOutput(next_token_logits=None),
            next_token_ids=torch.full((n,), self.TOKEN, dtype=torch.int64),
            can_run_cuda_graph=False,
        )


def build_scheduler(settings: RankSettings, server_args: Any) -> Any:
    """A ``Scheduler`` for one DP rank, built as ``Scheduler.__init__`` builds it (see the module docstring)."""
    import torch

    scheduler_module = import_scheduler()
    from sglang.srt.environ import envs
    from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.mem_cache.registry import TreeCacheBuildContext, create_tree_cache
    from sglang.srt.runtime_context import get_disagg, get_exec, get_lora, get_memory, get_schedule, get_serving, get_spec
    from sglang.srt.utils.torch_memory_saver_adapter import TorchMemorySaverAdapter

    Scheduler = scheduler_module.Scheduler
    s = Scheduler.__new__(Scheduler)
    # __init__'s "Parse args", as it reads them.
    s.is_initializing = True
    s.forward_ct = 0
    s.processed_tokens_counter = 0
    s.cur_batch_for_debug = None
    s.server_args = server_args
    s.nccl_port = None
    schedule = get_schedule()
    s.schedule_policy = schedule.schedule_policy
    s.enable_priority_scheduling = schedule.enable_priority_scheduling
    s.abort_on_priority_when_disabled = schedule.abort_on_priority_when_disabled
    s.schedule_low_priority_values_first = schedule.schedule_low_priority_values_first
    s.priority_scheduling_preemption_threshold = schedule.priority_scheduling_preemption_threshold
    s.enable_lora = get_lora().enable_lora
    s.enable_lora_overlap_loading = get_lora().enable_lora_overlap_loading
    s.max_loras_per_batch = get_lora().max_loras_per_batch
    s.enable_overlap = not schedule.disable_overlap_schedule
    s.enable_overlap_mlx = False
    s.enable_pdmux = get_disagg().enable_pdmux
    s.skip_tokenizer_init = get_serving().skip_tokenizer_init
    s.stream_interval = get_serving().stream_interval
    s.spec_algorithm = scheduler_module.SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
    s.page_size = schedule.page_size
    memory = get_memory()
    s.enable_hierarchical_cache = memory.enable_hierarchical_cache
    s.enable_lmcache = memory.enable_lmcache
    s.enable_session_radix_cache = memory.enable_session_radix_cache
    s.enable_hicache_storage = memory.hicache_storage_backend is not None
    s.enable_unified_cache_external_linker = memory.enable_unified_cache_external_linker
    s.enable_decode_hicache = False
    s.max_recv_per_poll = envs.SGLANG_SCHEDULER_MAX_RECV_PER_POLL.get()
    s.max_new_tokens_limit = envs.SGLANG_MAX_NEW_TOKENS_LIMIT.get()
    s.enable_hisparse = memory.enable_hisparse
    s.attn_dp_enabled = True
    s.enable_unified_memory = memory.enable_unified_memory
    s.init_model_config()
    s.init_metrics_collector()
    sink = _Sink()
    s.ipc_channels = types.SimpleNamespace(send_to_detokenizer=sink, send_to_tokenizer=sink, send_metrics_from_scheduler=None,
                                           recv_from_rpc=None)
    s.recv_from_tokenizer = None
    from sglang.srt.runtime_context import get_observability

    s.load_snapshot_writer = LoadSnapshots(get_observability().load_snapshot_publish_interval)
    s.idle_sleeper = None
    s.init_tokenizer()

    # init_model_worker and build_kv_cache, on CPU (see the module docstring).
    page = settings.page_size
    capacity = settings.max_total_tokens // page * page  # the model runner sizes the pool in whole pages
    req_to_token_pool = ReqToTokenPool(size=settings.max_running_requests, max_context_len=s.model_config.context_len + 4,
                                       device="cpu", enable_memory_saver=False)
    kv_pool = MHATokenToKVPool(size=capacity, page_size=page, dtype=torch.bfloat16, head_num=1, head_dim=1,
                               layer_num=1, device="cpu", enable_memory_saver=False)
    allocator = PagedTokenToKVPoolAllocator(size=capacity, page_size=page, dtype=torch.bfloat16, device="cpu",
                                            kvcache=kv_pool, need_sort=False)
    s.tp_worker = s.model_worker = CpuModelWorker(s.model_config, req_to_token_pool, settings.max_running_requests)
    s.draft_worker = None
    s.max_total_num_tokens = capacity
    s.max_prefill_tokens = schedule.max_prefill_tokens
    s.max_running_requests = settings.max_running_requests
    s.max_queued_requests = schedule.max_queued_requests
    s.max_req_len = min(s.model_config.context_len - 1, capacity - 1)
    s.max_req_input_len = s.max_req_len - 5
    s.random_seed = server_args.random_seed
    s.device = "cpu"
    s.forward_stream = torch.get_device_module("cpu").Stream()
    s.min_free_slots_delayer = None
    one = OneRankGroup()
    s.tp_group = s.attn_tp_group = s.attn_cp_group = s.pp_group = s.world_group = s.dp_tp_group = one
    s.tp_cpu_group = s.attn_tp_cpu_group = s.attn_cp_cpu_group = s.dp_tp_cpu_group = None
    s.pad_input_ids_func = None
    params = CacheInitParams(
        disable=memory.disable_radix_cache, req_to_token_pool=req_to_token_pool, token_to_kv_pool_allocator=allocator,
        page_size=page, eviction_policy=memory.radix_eviction_policy, chunked_prefill_size=schedule.chunked_prefill_size,
    )
    s.tree_cache = create_tree_cache(TreeCacheBuildContext(
        server_args=server_args, params=params, is_hybrid_swa=False, is_hybrid_ssm=False, enable_hierarchical_cache=False,
        disable_radix_cache=memory.disable_radix_cache, tp_worker=s.tp_worker, model_config=s.model_config,
        tp_size=1, tp_rank=0, tp_group=one,
    ))
    s.is_hybrid_swa = s.is_hybrid_ssm = False
    s.sliding_window_size = s.full_tokens_per_layer = s.swa_tokens_per_layer = None
    s.req_to_token_pool = req_to_token_pool
    s.token_to_kv_pool_allocator = allocator
    s.kv_shard_widening = 1
    s.disable_radix_cache = memory.disable_radix_cache
    s.hisparse_coordinator = None
    s.decode_offload_manager = None
    s.disaggregation_mode = scheduler_module.DisaggregationMode.NULL
    s.schedule_stream = torch.get_device_module("cpu").Stream()
    s.kv_event_lora_names = scheduler_module.KvEventLoraNames.from_lora_refs(get_lora().lora_paths)

    # The rest of __init__, in its order.
    s.init_running_status()
    s.init_chunked_prefill()
    s.maybe_init_dynamic_chunk_sizer()
    s.init_diffusion_llm()
    s.init_metrics_reporter()
    s.scheduler_stage_metrics = s.metrics_reporter.scheduler_stage_metrics
    s.init_kv_events_publisher()
    s.init_schedule_policy()
    # init_watch_dog_memory_saver_input_blocker without the watchdog thread.
    s.memory_saver_adapter = TorchMemorySaverAdapter.create(enable=get_exec().features.enable_memory_saver)
    s.recv_skipper = scheduler_module.SchedulerRecvSkipper.maybe_create()
    s.input_blocker = None
    s.init_profiler()
    s.rust_server = None
    s.init_overlap()
    s.maybe_init_ngram_embedding()
    s.init_deterministic_inference_config()
    s.init_dsa_kpool_truncation_align()
    s.init_mamba_truncation_align()
    s.check_truncation_align_fits_chunk()
    s.init_weight_updater()
    s.init_request_dispatcher()
    s.init_lora_drainer()
    s.init_lora_overlap_loader()
    s.init_grammar_manager()
    s.scripted_scheduler_hook = None
    s.require_mlp_sync = False  # the DP-wide MLP sync is the engine's (see the module docstring)
    s.init_dp_attn_adapter()
    s.init_pool_stats_observer()
    s.init_invariant_checker()
    s.init_load_publisher()
    s.init_load_inquirer()
    s.init_output_streamer()
    s.init_batch_result_processor()
    s.external_corpus_manager = None
    s.enable_fpm = False
    s._war_barrier_enabled = False
    # event_loop_overlap's own set-up.
    s.enable_skip_finishing_decode = True
    s.result_queue = deque()
    s.is_initializing = False
    return s


def generate_request(rid: str, prompt_tokens: int, output_tokens: int, token: int = 5) -> Any:
    """What the tokenizer manager sends a scheduler for a prompt of ``prompt_tokens`` and a fixed output length.

    ``ignore_eos`` as ``bench_serving``'s random dataset sets it: the output has exactly ``output_tokens``.
    """
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=output_tokens, ignore_eos=True)
    params.normalize(None)  # what the tokenizer manager does before it sends (no stop strings to tokenize)
    return TokenizedGenerateReqInput(
        rid=rid, input_text=None, input_ids=array("q", [token]) * prompt_tokens, input_embeds=None, mm_inputs=None,
        token_type_ids=None, sampling_params=params, return_logprob=False, logprob_start_len=-1, top_logprobs_num=0,
        token_ids_logprob=None, stream=False,
    )


def health_check_request(rid_suffix: str) -> Any:
    """``GET /health``'s generation probe (``http_server.health_generate``): one token in, ``max_new_tokens`` 1."""
    from sglang.srt.constants import HEALTH_CHECK_RID_PREFIX
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
    from sglang.srt.sampling.sampling_params import SamplingParams

    params = SamplingParams(max_new_tokens=1, temperature=0.0)
    params.normalize(None)
    return TokenizedGenerateReqInput(
        rid=f"{HEALTH_CHECK_RID_PREFIX}_{rid_suffix}", input_text=None, input_ids=array("q", [0]), input_embeds=None,
        mm_inputs=None, token_type_ids=None, sampling_params=params,
        return_logprob=False, logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=False,
    )


class OverlapRank:
    """One rank's ``event_loop_overlap``, one iteration at a time, split where the DP group synchronizes.

    An iteration of SGLang 0.5.23's loop is: ingest the requests, ``get_next_batch_to_run``
    (the delayer's all-gather inside it, then the MLP sync), launch the batch, process
    the *previous* batch's result, sample the current one. ``ingest`` and ``schedule``
    are the part up to and through the collectives; ``launch`` the rest, given the
    batch after the MLP sync (``idle_batch`` for a rank without work).
    """

    def __init__(self, scheduler: Any, prefill_delayer: Optional[Any]) -> None:
        self.s = scheduler
        self.s.prefill_delayer = prefill_delayer

    def ingest(self, recv_reqs: list) -> None:
        self.s.process_input_requests(recv_reqs)

    def schedule(self) -> Optional[Any]:
        s = self.s
        plan = s.get_next_batch_to_run(running_batch=s.running_batch, last_batch=s.last_batch)
        s.running_batch = plan.running_batch
        return plan.batch_to_run

    def idle_batch(self) -> Any:
        return self.s.dp_attn_adapter.get_idle_batch()

    def launch(self, batch: Optional[Any]) -> None:
        s = self.s
        s.cur_batch_for_debug = batch
        disable_overlap_for_batch = s.is_disable_overlap_for_batch(batch, last_batch=s.last_batch)
        if disable_overlap_for_batch:
            self._pop_and_process()
        if batch:
            batch_result = s.run_batch(batch)
            s.result_queue.append((batch.copy(), batch_result))
        else:
            batch_result = None
            s._sched_idled = True
        if s.last_batch:
            if not disable_overlap_for_batch:
                self._pop_and_process()
        elif batch is None:
            s.on_idle()
        s.launch_batch_sample_if_needed(batch_result, batch)
        s.last_batch = batch

    def _pop_and_process(self) -> None:
        batch, result = self.s.result_queue.popleft()
        self.s.process_batch_result(batch, result)

    # ----- what the simulator reads -----------------------------------------------

    @property
    def running(self) -> int:
        return self.s.running_batch.batch_size()

    @property
    def waiting(self) -> int:
        return len(self.s.waiting_queue)

    @property
    def chunked(self) -> bool:
        return self.s.chunked_req is not None

    def token_usage(self) -> float:
        return self.s.pool_stats_observer.get_pool_stats().get_max_pool_usage()

    def kv_used(self) -> int:
        s = self.s
        return s.max_total_num_tokens - s.token_to_kv_pool_allocator.available_size() - s.tree_cache.evictable_size()


class SimulatedTime:
    """The ``time`` module as the scheduler module sees it during a simulation: its clocks read simulated seconds.

    The scheduler reads the clock for statistics and for one decision that matters here:
    how often ``on_idle`` republishes the load snapshot of a stalled rank (every 50 ms).
    ``sleep`` returns at once; anything else is the real ``time`` module's.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        import time as real

        self._real = real
        self._clock = clock

    def monotonic(self) -> float:
        return self._clock()

    perf_counter = time = monotonic

    def monotonic_ns(self) -> int:
        return int(self._clock() * 1e9)

    def sleep(self, seconds: float) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)
