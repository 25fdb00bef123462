"""Engine start-up: load the tokenizer, build each replica's worker, size the scheduler.
Everything slow runs off the event loop.

The worker-level part (one rank's runner, its KV cache size, rank 0's rank group) is in
``worker/startup.py`` and takes a :class:`~actorllm.worker.startup.RankSpec`;
:func:`rank_spec` makes it from the engine's configuration, and :func:`_model_info` turns
what the runner reports into the engine's :class:`~actorllm.engine.actors.context.ModelInfo`."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import anyio.to_thread

from actorllm.core.kv_cache.block_hash import HashAlgo
from actorllm.core.scheduler import SchedulerConfig
from actorllm.engine.actors.context import ModelInfo
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from actorllm.engine.config.speculative import SpeculativeConfig
from actorllm.worker.cpu_kv_size import effective_max_model_len
from actorllm.worker.extension import worker_class
from actorllm.worker.lora_settings import LoRASettings
from actorllm.worker.runner import Runner
from actorllm.worker.spec_decode.suffix import SuffixSettings
from actorllm.worker.startup import RankSpec, build_rank0, build_rank_runner
from actorllm.worker.worker import Worker
from actorllm.worker.worker_thread import WorkerThread

if TYPE_CHECKING:
    from actorllm.worker.ray_host import RemoteSpec
    from actorllm.worker.tp_group import TPGroup

# runner_factory(config): rank 0's runner (called on the worker thread, or in the replica's
# Ray actor); a test passes one that returns a ScriptedModel.
RunnerFactory = Callable[[EngineConfig], Runner]


def rank_spec(config: EngineConfig, rank: int = 0) -> RankSpec:
    """What rank ``rank`` of a replica needs from ``config`` (model and device resolved)."""
    spec = config.speculative()
    return RankSpec(
        model=str(config.resolved_model()),
        device=config.resolved_device(),
        dtype=config.dtype,
        attention_backend=config.attention_backend,
        load_format=config.load_format,
        quantization=config.quantization,
        block_size=config.resolved_block_size(),
        max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len,
        max_num_batched_tokens=config.max_num_batched_tokens or 2048,
        seed=config.seed,
        enforce_eager=config.enforce_eager,
        return_routed_experts=config.enable_return_routed_experts,
        hybrid_kv_cache=not config.disable_hybrid_kv_cache_manager,
        omp_short_spin=config.cpu_omp_short_spin,
        keep_freed_memory=config.cpu_keep_freed_memory,
        weights_on_huge_pages=config.cpu_weights_on_huge_pages,
        num_blocks_override=config.num_gpu_blocks_override,
        gpu_memory_utilization=config.gpu_memory_utilization,
        kv_cache_bytes=config.resolved_kv_cache_memory_bytes(),
        kv_cache_dtype=config.kv_cache_dtype,
        rank=rank,
        world_size=config.tensor_parallel_size * config.pipeline_parallel_size,
        pipeline_parallel_size=config.pipeline_parallel_size,
        pp_layer_partition=_pp_partition(config),
        backend=config.distributed_executor_backend or "mp",
        collective_timeout_s=config.tp_collective_timeout_s,
        data_parallel_size=config.data_parallel_size,
        num_speculative_tokens=spec.num_speculative_tokens if spec is not None else 0,
        prompt_lookup_min=spec.prompt_lookup_min if spec is not None else 5,
        prompt_lookup_max=spec.prompt_lookup_max if spec is not None else 5,
        draft_model=config.resolved_draft_model(),
        draft_method=_draft_method(spec),
        suffix=_suffix_settings(spec),
        **_pooling_spec(config),
        lora=LoRASettings(
            max_loras=config.max_loras,
            max_lora_rank=config.max_lora_rank,
            max_cpu_loras=config.max_cpu_loras,
            lora_dtype=config.lora_dtype,
        )
        if config.enable_lora
        else None,
        logits_processors=_logits_processors(config),
        worker_extension_cls=config.worker_extension_cls,
        watermark_config=config.watermark_config,
        return_sampling_mask=config.return_sampling_mask,
    )


def _draft_method(spec: SpeculativeConfig | None) -> Literal["draft_model", "eagle", "eagle3"]:
    """The drafter's kind ("draft_model" also where there is none: ngram, suffix, off)."""
    method = spec.method if spec is not None else None
    if method == "eagle" or method == "eagle3":
        return method
    return "draft_model"


def _suffix_settings(spec: SpeculativeConfig | None) -> SuffixSettings | None:
    if spec is None or spec.method != "suffix":
        return None
    return SuffixSettings(
        max_tree_depth=spec.suffix_decoding_max_tree_depth,
        max_cached_requests=spec.suffix_decoding_max_cached_requests,
        max_spec_factor=spec.suffix_decoding_max_spec_factor,
        min_token_prob=spec.suffix_decoding_min_token_prob,
    )


def _logits_processors(config: EngineConfig) -> tuple[str, ...]:
    """The custom logits processors' names, refused where vLLM refuses them (its words)."""
    names = tuple(config.logits_processors or ())
    if names and config.speculative() is not None:
        raise EngineConfigError(
            "logits_processors",
            "Custom logits processors are not supported when speculative decoding is enabled.",
        )
    if names and config.pooling_model() is not None:
        raise EngineConfigError(
            "logits_processors", "Pooling models do not support custom logits processors."
        )
    return names


def _pp_partition(config: EngineConfig) -> str | None:
    """VLLM_PP_LAYER_PARTITION of this (the engine's) process: Ray's workers do not
    inherit its environment, so the ranks get it in their spec."""
    if config.pipeline_parallel_size == 1:
        return None
    import os

    from actorllm.models.pipeline import PARTITION_ENV

    return os.environ.get(PARTITION_ENV)


def _pooling_spec(config: EngineConfig) -> dict[str, Any]:
    """The RankSpec fields of a pooling model (none for a generative one)."""
    pm = config.pooling_model()
    if pm is None:
        return {}
    if config.tensor_parallel_size > 1:
        raise EngineConfigError(
            "tensor_parallel_size", "> 1 is not built for pooling models (runner 'pooling')."
        )
    if config.pipeline_parallel_size > 1:
        raise EngineConfigError(
            "pipeline_parallel_size", "> 1 is not built for pooling models (runner 'pooling')."
        )
    if config.enable_lora:  # adapters hook the generation runner's projections only
        raise EngineConfigError(
            "enable_lora", "is not built for pooling models (runner 'pooling')."
        )
    if config.speculative() is not None:  # a pooling step samples nothing to verify
        raise EngineConfigError(
            "speculative_config", "does not apply to pooling models (runner 'pooling')."
        )
    return {
        "runner": "pooling",
        "convert": pm.convert,
        "pooler_config": config.pooler_config,
        "encoder": pm.encoder,
    }


def default_runner_factory(config: EngineConfig, rank: int = 0) -> Runner:
    """The real model runner (called on the worker thread; tensor parallel: rank ``rank``'s,
    in its own process for ranks 1..N-1)."""
    return build_rank_runner(rank_spec(config, rank))


def remote_spec(config: EngineConfig, replica: int) -> RemoteSpec:
    """How the driver places replica ``replica``'s worker on Ray (worker/ray_host.py)."""
    from actorllm.worker.ray_host import RemoteSpec

    return RemoteSpec(
        replica=replica,
        world_size=config.tensor_parallel_size * config.pipeline_parallel_size,
        data_parallel_size=config.data_parallel_size,
        gpu=config.device == "cuda",
        step_timeout_s=config.step_timeout_s,
        model_dirs=_model_dirs(config),
    )


def _model_dirs(config: EngineConfig) -> tuple[str, ...]:
    """The model directories every Ray node must hold: the model's, when one was named
    (the demo model is built on each node at first use), and a draft model's."""
    if config.model is None:
        return ()
    draft = config.resolved_draft_model()
    return (str(config.resolved_model()), *([str(draft)] if draft else []))


def load_tokenizer(config: EngineConfig) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(config.resolved_tokenizer()))
    template = config.resolved_chat_template()
    if template is not None:
        tokenizer.chat_template = template  # --chat-template replaces the tokenizer's own
    return tokenizer


def _build_on_worker(config: EngineConfig, factory: RunnerFactory) -> tuple[Runner, ModelInfo]:
    runner, info, _ = _build_rank0(config, factory)
    return runner, info


def _build_rank0(
    config: EngineConfig, factory: RunnerFactory, replica: int = 0, placement_group: Any = None
) -> tuple[Runner, ModelInfo, TPGroup | None]:
    """Rank 0's runner, loaded, with its KV cache, and the model info; tensor parallel: and
    its rank group, started (worker/startup.py's ``build_rank0``)."""
    if config.tensor_parallel_size > 1 and config.resolved_device() != "cpu":
        raise EngineConfigError(
            "tensor_parallel_size", "> 1 runs on CPU (gloo) only so far; NCCL is not built."
        )
    if config.pipeline_parallel_size > 1 and config.resolved_device() != "cpu":
        raise EngineConfigError(
            "pipeline_parallel_size", "> 1 runs on CPU (gloo) only so far; NCCL is not built."
        )
    make_runner = functools.partial(factory, config)
    runner, blocks, group = build_rank0(rank_spec(config), make_runner, replica, placement_group)
    return runner, _model_info(config, runner, blocks), group


def build_remote_worker(
    config: EngineConfig,
    factory: RunnerFactory,
    replica: int,
    placement_group: Any,
    num_blocks: int | None,
) -> tuple[Worker, ModelInfo]:
    """Replica ``replica``'s Worker, built in its Ray actor (worker/ray_host.py's
    ``BuildWorker``, bound to the first three arguments); ``num_blocks``: the KV block
    count a replacement holds."""
    if num_blocks is not None:
        config = config.replace(num_gpu_blocks_override=num_blocks)
    runner, info, group = _build_rank0(config, factory, replica, placement_group)
    worker = worker_class(config.worker_extension_cls)(
        runner,
        lambda: False,  # nothing else is ever queued in the actor: resolve each step at once
        profiler_dir=config.profiler_dir,
        cuda=config.resolved_device() == "cuda",
        tp=group,
        device=config.resolved_device(),
    )
    return worker, info


def _model_info(config: EngineConfig, runner: Runner, blocks: int) -> ModelInfo:
    mc = runner.model_config
    max_len = effective_max_model_len(int(mc.max_model_len), config.max_model_len)
    return ModelInfo(
        vocab_size=int(mc.vocab_size),
        max_model_len=max_len,
        eos_token_ids=[int(t) for t in mc.eos_token_ids],
        num_blocks=blocks,
        kv_group_windows=tuple(runner.kv_group_windows),
        pooling=config.pooling_model(),
        prompt_embeds=_prompt_embeds_spec(config, runner),
    )


def _prompt_embeds_spec(config: EngineConfig, runner: Runner) -> tuple[int, Any] | None:
    """The rows an embedding prompt feeds the model, with enable_prompt_embeds; refused
    by name when the model's code does not take them."""
    if not config.enable_prompt_embeds:
        return None
    spec = getattr(runner, "prompt_embeds_spec", None)
    found = spec() if spec is not None else None
    if found is None:
        raise EngineConfigError(
            "enable_prompt_embeds", "this model's code does not take prompt embeddings."
        )
    return found


async def build_runner(
    config: EngineConfig, worker: WorkerThread, factory: RunnerFactory, replica: int = 0
) -> tuple[Runner, ModelInfo, TPGroup | None]:
    """Build the runner on ``worker`` (and, tensor parallel, replica ``replica``'s rank
    group)."""
    return await worker.call(lambda: _build_rank0(config, factory, replica))


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


# {vLLM's --prefix-caching-hash-algo: the core's block hash}
_HASH_ALGOS: dict[str, HashAlgo] = {"sha256": "sha256", "xxhash": "xxh3_128"}


def build_scheduler_config(config: EngineConfig, model: ModelInfo) -> SchedulerConfig:
    max_len = model.max_model_len
    # An encoder sees whole prompts: no chunks, no prefix-cache hits (vLLM does the same).
    encoder = model.pooling is not None and model.pooling.encoder
    budget = config.resolved_max_num_batched_tokens(max_len)
    return SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=max(budget, max_len) if encoder else budget,
        max_model_len=max_len,
        block_size=config.resolved_block_size(),
        num_blocks=model.num_blocks,
        enable_prefix_caching=config.enable_prefix_caching and not encoder,
        prefix_caching_hash_algo=_HASH_ALGOS[config.prefix_caching_hash_algo],
        enable_chunked_prefill=config.enable_chunked_prefill and not encoder,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        long_prefill_token_threshold_adaptive=config.long_prefill_token_threshold_adaptive,
        policy=config.scheduling_policy,
        async_scheduling=config.resolved_async_scheduling(model.pooling is not None),
        pipeline_parallel_size=config.pipeline_parallel_size,
        sliding_window=model.sliding_window,
        kv_group_windows=model.kv_group_windows if len(model.kv_group_windows) > 1 else None,
        num_lookahead_tokens=(
            spec.num_speculative_tokens
            # a draft model and an EAGLE head write KV past the last token; lookups (n-gram,
            # suffix) do not
            if (spec := config.speculative()) is not None and spec.method not in ("ngram", "suffix")
            else 0
        ),
        max_loras=config.max_loras if config.enable_lora else 0,
        watermark=config.watermark,
        reserve_full_isl=config.scheduler_reserve_full_isl,
        return_routed_experts=config.enable_return_routed_experts,
    )
