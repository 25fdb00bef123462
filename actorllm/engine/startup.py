"""Engine start-up: load the tokenizer, build the runner on the worker thread, size the KV
cache. Everything slow runs off the event loop."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from actorllm.core.scheduler import SchedulerConfig
from actorllm.engine.config import EngineConfig, EngineConfigError
from actorllm.engine.context import ModelInfo
from actorllm.worker.worker_thread import WorkerThread

if TYPE_CHECKING:
    from actorllm.worker.tp_group import TPGroup

DEFAULT_CPU_KV_BYTES = 256 * 2**20

RunnerFactory = Callable[[EngineConfig], Any]


def default_runner_factory(config: EngineConfig, rank: int = 0) -> Any:
    """The real model runner (called on the worker thread; tensor parallel: rank ``rank``'s,
    in its own process for ranks 1..N-1)."""
    from actorllm.worker.model_runner import ModelRunner
    from actorllm.worker.omp_spin import park_openmp_team

    if config.cpu_omp_short_spin and config.resolved_device() == "cpu":
        park_openmp_team()
    if config.cpu_keep_freed_memory and config.resolved_device() == "cpu":
        from actorllm.worker.malloc_tuning import keep_freed_memory

        keep_freed_memory()
    return ModelRunner(
        config.resolved_model(),
        dtype=config.dtype,
        device=config.resolved_device(),
        attention_backend=config.attention_backend,
        load_format=config.load_format,
        block_size=config.resolved_block_size(),
        max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len,
        seed=config.seed,
        max_num_batched_tokens=config.max_num_batched_tokens or 2048,
        enforce_eager=config.enforce_eager,
        hybrid_kv_cache=not config.disable_hybrid_kv_cache_manager,
        tp_rank=rank,
        tp_size=config.tensor_parallel_size,
        weights_on_huge_pages=config.cpu_weights_on_huge_pages,
    )


def load_tokenizer(config: EngineConfig) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(config.resolved_tokenizer()))
    template = config.resolved_chat_template()
    if template is not None:
        tokenizer.chat_template = template  # --chat-template replaces the tokenizer's own
    return tokenizer


def _eos_ids(model_config: Any) -> list[int]:
    eos = getattr(model_config, "eos_token_ids", None)
    if eos is None:
        eos = getattr(model_config, "eos_token_id", None)
    if eos is None:
        return []
    return [int(eos)] if isinstance(eos, int) else [int(t) for t in eos]


def num_kv_blocks(config: EngineConfig, runner: Any) -> int:
    """How many KV blocks (null block included) the cache gets."""
    if config.num_gpu_blocks_override is not None:
        return config.num_gpu_blocks_override
    profile = getattr(runner, "profile_num_blocks", None)
    if profile is not None and config.resolved_device() == "cuda":
        return int(profile(config.gpu_memory_utilization))
    budget = config.kv_cache_memory_bytes or DEFAULT_CPU_KV_BYTES
    return max(2, budget // max(1, runner.kv_cache_bytes_per_block()))


def _build_on_worker(config: EngineConfig, factory: RunnerFactory) -> tuple[Any, ModelInfo]:
    runner, blocks, _ = _build_rank0(config, factory)
    return runner, _model_info(config, runner, blocks)


def _build_rank0(
    config: EngineConfig, factory: RunnerFactory, replica: int = 0, placement_group: Any = None
) -> tuple[Any, int, TPGroup | None]:
    """The runner, loaded, with its KV cache of the returned block count; tensor parallel:
    and its rank group (data-parallel replica ``replica``'s own), started (ranks 1..N-1
    load their shards while this thread loads rank 0's). ``placement_group``: rank 0 runs
    in a Ray actor of that group (distributed/ray_worker.py), ranks 1..N-1 go beside it."""
    group = None
    if config.tensor_parallel_size > 1:
        from actorllm.models.config import CheckpointConfig
        from actorllm.models.parallel import check_tensor_parallel
        from actorllm.worker.tp_group import TPGroup  # torch.distributed: only when used

        if config.resolved_device() != "cpu":
            raise EngineConfigError(
                "tensor_parallel_size", "> 1 runs on CPU (gloo) only so far; NCCL is not built."
            )
        # Refused before any rank process is spawned.
        check_tensor_parallel(
            CheckpointConfig.from_pretrained(config.resolved_model()), config.tensor_parallel_size
        )
        group = TPGroup(config, replica, placement_group)
    try:
        if group is not None:
            group.launch()
        runner = factory(config)
        runner.load_model()
        blocks = num_kv_blocks(config, runner)
        if group is not None:
            group.connect(runner)
            blocks = group.agree_blocks(blocks)  # each rank's cache holds its heads
        runner.initialize_kv_cache(blocks)
    except BaseException:
        if group is not None:
            group.mark_broken("start-up failed")
            group.stop(grace_s=0.0)
        raise
    return runner, blocks, group


def _model_info(config: EngineConfig, runner: Any, blocks: int) -> ModelInfo:
    mc = runner.model_config
    max_len = int(getattr(mc, "max_model_len", 0) or config.max_model_len or 2048)
    if config.max_model_len is not None:
        max_len = min(max_len, config.max_model_len) if max_len else config.max_model_len
    info = ModelInfo(
        vocab_size=int(mc.vocab_size),
        max_model_len=max_len,
        eos_token_ids=_eos_ids(mc),
        num_blocks=blocks,
        # Scripted test models have no windows (one full-attention group).
        kv_group_windows=tuple(getattr(runner, "kv_group_windows", (None,))),
    )
    return info


async def build_runner(
    config: EngineConfig, worker: WorkerThread, factory: RunnerFactory, replica: int = 0
) -> tuple[Any, ModelInfo, TPGroup | None]:
    """Build the runner on ``worker`` (and, tensor parallel, replica ``replica``'s rank
    group)."""

    def build() -> tuple[Any, ModelInfo, TPGroup | None]:
        runner, blocks, group = _build_rank0(config, factory, replica)
        return runner, _model_info(config, runner, blocks), group

    return await worker.call(build)


async def build_tokenizer(config: EngineConfig, tokenizer: Any = None) -> Any:
    """The engine's tokenizer: ``tokenizer`` when the caller passed one, else loaded from the
    config. ``chat_template`` replaces the template either way; a passed tokenizer is copied
    first, so the caller's object keeps its own."""
    if tokenizer is not None:
        template = config.resolved_chat_template()
        if template is None:
            return tokenizer
        tokenizer = copy.copy(tokenizer)
        tokenizer.chat_template = template
        return tokenizer
    return await anyio.to_thread.run_sync(load_tokenizer, config)


def build_scheduler_config(config: EngineConfig, model: ModelInfo) -> SchedulerConfig:
    max_len = model.max_model_len
    return SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.resolved_max_num_batched_tokens(max_len),
        max_model_len=max_len,
        block_size=config.resolved_block_size(),
        num_blocks=model.num_blocks,
        enable_prefix_caching=config.enable_prefix_caching,
        enable_chunked_prefill=config.enable_chunked_prefill,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        policy=config.scheduling_policy,
        async_scheduling=config.async_scheduling,
        sliding_window=model.sliding_window,
        kv_group_windows=model.kv_group_windows if len(model.kv_group_windows) > 1 else None,
    )
