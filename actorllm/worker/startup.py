"""Worker start-up: build one rank's runner, size its KV cache, start rank 0's rank group.

Everything here blocks and runs on the thread (or process) that will own the runner: the
engine's worker thread, a replica's Ray actor (worker/ray_host.py) or a tensor-parallel
rank's process (worker/tp_rank.py). What a rank needs is one :class:`RankSpec`, made from
the engine's configuration by the engine (``engine/actors/startup.py``'s ``rank_spec``); ranks
1..N-1 get rank 0's with their own ``rank``.

    spec = RankSpec(model="/models/llama", device="cpu", block_size=32)
    runner, blocks, group = build_rank0(spec, lambda: build_model_runner(spec))
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from actorllm.core.watermark_config import WatermarkConfig
from actorllm.models.load_format import LoadFormat
from actorllm.worker.cpu_kv_size import (
    DEFAULT_CPU_KV_BYTES,
    KVShape,
    auto_kv_blocks,
    effective_max_model_len,
    explicit_kv_blocks,
    human_size,
)
from actorllm.worker.cpu_threads import fit_torch_threads
from actorllm.worker.host_memory import host_memory
from actorllm.worker.lora_settings import LoRASettings
from actorllm.worker.runner import Runner
from actorllm.worker.spec_decode.suffix import SuffixSettings

if TYPE_CHECKING:
    from actorllm.worker.model_runner import ModelRunner
    from actorllm.worker.tp_group import TPGroup

logger = logging.getLogger(__name__)


class RankSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What one rank of a replica needs to build its runner and its KV cache."""

    model: str  # the model directory (resolved by the engine)
    device: str  # "cpu" or "cuda" (resolved)
    dtype: str = "auto"
    attention_backend: str = "auto"
    load_format: LoadFormat = "auto"
    quantization: str | None = None  # vLLM's --quantization (None: the checkpoint's)
    block_size: int = 16
    max_num_seqs: int = 256
    max_model_len: int | None = None
    max_num_batched_tokens: int = 2048
    seed: int = 0
    enforce_eager: bool = False
    hybrid_kv_cache: bool = True
    return_routed_experts: bool = False  # record each token's experts (MoE models)
    # CPU tuning (worker/omp_spin.py, worker/malloc_tuning.py, worker/huge_pages.py)
    omp_short_spin: bool = False
    keep_freed_memory: bool = False
    weights_on_huge_pages: bool = True
    # KV cache size: a fixed block count, else the device's memory share (CUDA), else bytes
    num_blocks_override: int | None = None
    gpu_memory_utilization: float = 0.9
    # Bytes (explicit, or VLLM_CPU_KVCACHE_SPACE); None: sized from the model and the
    # memory available on CPU (worker/cpu_kv_size.py), DEFAULT_CPU_KV_BYTES elsewhere
    kv_cache_bytes: int | None = None
    kv_cache_dtype: str = "auto"  # vLLM's --kv-cache-dtype (worker/kv_cache_dtype.py)
    # Tensor parallel: this rank, the group's size, how ranks 1..N-1 are launched
    rank: int = 0
    world_size: int = 1
    # Pipeline parallel: the stages (the group's ranks are the stages: world_size == this;
    # rank 0 holds the last stage, worker/tp_group.py)
    pipeline_parallel_size: int = 1
    # VLLM_PP_LAYER_PARTITION as the engine's process read it (every rank applies the
    # same split, wherever it runs; None: vLLM's even split)
    pp_layer_partition: str | None = None
    backend: Literal["mp", "ray"] = "mp"
    collective_timeout_s: float = 60.0
    data_parallel_size: int = 1  # names the group's processes per replica when > 1
    # Speculative decoding (0: off): drafts per step (suffix: their cap), the n-gram sizes
    num_speculative_tokens: int = 0
    prompt_lookup_min: int = 5
    prompt_lookup_max: int = 5
    draft_model: str | None = None  # method draft_model / eagle: the drafter's directory
    draft_method: Literal["draft_model", "eagle", "eagle3"] = "draft_model"
    suffix: SuffixSettings | None = None  # method suffix (no draft model): its settings
    # Pooling (engine/config/pooling_model.py): "generate", or "pooling" with its convert
    # ("none": an encoder model) and vLLM's pooler config
    runner: str = "generate"
    convert: str = "none"
    pooler_config: dict[str, Any] | None = None
    encoder: bool = False  # an encoder-only pooling model (EncoderRunner)
    lora: LoRASettings | None = None  # None: LoRA is off
    # Custom logits processors, as module:Class names (worker/logitsprocs/)
    logits_processors: tuple[str, ...] = ()
    worker_extension_cls: str = ""  # a class mixed into every rank's Worker (worker/extension.py)
    # The engine's text watermark (--watermark-config) as its fields' dict; None: off
    watermark_config: dict[str, Any] | None = None
    # --return-sampling-mask: the sampler returns each row's mask and processed logprobs
    return_sampling_mask: bool = False


def build_rank_runner(spec: RankSpec) -> Runner:
    """Rank 0's runner: :func:`build_model_runner`, or an encoder pooling model's
    :class:`EncoderRunner`."""
    if not spec.encoder:
        return build_model_runner(spec)
    from actorllm.worker.encoder_runner import EncoderRunner

    if spec.device == "cpu":
        fit_torch_threads()

    if spec.world_size > 1:
        raise ValueError("tensor_parallel_size > 1 is not built for encoder models")
    if spec.kv_cache_dtype != "auto":
        raise ValueError(
            f"kv_cache_dtype={spec.kv_cache_dtype!r}: an encoder-only model keeps no KV cache"
        )
    return EncoderRunner(
        spec.model,
        dtype=spec.dtype,
        device=spec.device,
        max_model_len=spec.max_model_len,
        pooler_config=spec.pooler_config,
        block_size=spec.block_size,
    )


def build_model_runner(spec: RankSpec) -> ModelRunner:
    """The real model runner of rank ``spec.rank`` (its shards of the weights)."""
    from actorllm.worker.model_runner import ModelRunner
    from actorllm.worker.omp_spin import park_openmp_team

    if spec.device == "cpu":
        fit_torch_threads()  # before the first parallel region makes the worker's team
    if spec.omp_short_spin and spec.device == "cpu":
        park_openmp_team()
    if spec.keep_freed_memory and spec.device == "cpu":
        from actorllm.worker.malloc_tuning import keep_freed_memory

        keep_freed_memory()
    from actorllm.worker.logitsprocs.state import build_processors

    procs = build_processors(spec.logits_processors, spec, torch_device(spec.device))
    return ModelRunner(
        spec.model,
        dtype=spec.dtype,
        device=spec.device,
        attention_backend=spec.attention_backend,
        load_format=spec.load_format,
        block_size=spec.block_size,
        kv_cache_dtype=spec.kv_cache_dtype,
        max_num_seqs=spec.max_num_seqs,
        max_model_len=spec.max_model_len,
        seed=spec.seed,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        enforce_eager=spec.enforce_eager,
        hybrid_kv_cache=spec.hybrid_kv_cache,
        return_routed_experts=spec.return_routed_experts,
        tp_rank=0 if spec.pipeline_parallel_size > 1 else spec.rank,
        tp_size=spec.world_size // spec.pipeline_parallel_size,
        pp_rank=spec.rank if spec.pipeline_parallel_size > 1 else 0,
        pp_size=spec.pipeline_parallel_size,
        pp_partition=spec.pp_layer_partition,
        weights_on_huge_pages=spec.weights_on_huge_pages,
        quantization=spec.quantization,
        num_speculative_tokens=spec.num_speculative_tokens,
        prompt_lookup_min=spec.prompt_lookup_min,
        prompt_lookup_max=spec.prompt_lookup_max,
        draft_model=spec.draft_model,
        draft_method=spec.draft_method,
        suffix=spec.suffix,
        pooling=(spec.convert, spec.pooler_config) if spec.runner == "pooling" else None,
        lora=spec.lora,
        logits_processors=procs,
        watermark=(
            WatermarkConfig(**spec.watermark_config) if spec.watermark_config is not None else None
        ),
        return_sampling_mask=spec.return_sampling_mask,
    )


def torch_device(name: str) -> Any:
    import torch

    return torch.device(name)


def num_kv_blocks(spec: RankSpec, runner: Runner) -> int:
    """How many KV blocks (null block included) the cache gets: a fixed count, else on CUDA
    the profiled share of the device, else on CPU :func:`cpu_kv_blocks`. Raises
    ``KVCacheSizeError`` (a ``ValueError``) when a CPU cache cannot hold one request."""
    if spec.num_blocks_override is not None:
        return spec.num_blocks_override
    if spec.device == "cuda":
        profiled = runner.profile_num_blocks(spec.gpu_memory_utilization)
        if profiled is not None:
            return int(profiled)
    if spec.device != "cpu":  # a runner with no device memory to profile
        budget = spec.kv_cache_bytes or DEFAULT_CPU_KV_BYTES
        return max(2, budget // max(1, runner.kv_cache_bytes_per_block()))
    return cpu_kv_blocks(spec, runner)


def cpu_kv_blocks(spec: RankSpec, runner: Runner) -> int:
    """The CPU cache's blocks (``worker/cpu_kv_size.py``): the explicit budget, checked to
    hold one request of ``max_model_len``, else sized from the model and the memory left
    once the weights are loaded (call it after ``load_model``), with one log line."""
    shape = KVShape(
        bytes_per_block=runner.kv_cache_bytes_per_block(),
        block_size=spec.block_size,
        max_model_len=effective_max_model_len(
            runner.model_config.max_model_len, spec.max_model_len
        ),
        chunk=spec.max_num_batched_tokens,
        windows=tuple(runner.kv_group_windows),
    )
    if spec.kv_cache_bytes is not None:
        return explicit_kv_blocks(shape, spec.kv_cache_bytes)
    memory = host_memory()
    # mp: every rank and replica of this engine allocates its cache on this host.
    share = spec.world_size * spec.data_parallel_size if spec.backend == "mp" else 1
    size = auto_kv_blocks(
        shape,
        max_num_seqs=spec.max_num_seqs,
        available=None if memory is None else memory.available,
        share=share,
        source="" if memory is None else memory.describe(),
    )
    logger.info(
        "Auto set the CPU KV cache to %s (%d blocks of %d tokens): %s. Set "
        "kv_cache_memory_bytes (--kv-cache-memory-bytes) or VLLM_CPU_KVCACHE_SPACE to choose.",
        human_size(size.num_blocks * shape.bytes_per_block),
        size.num_blocks,
        shape.block_size,
        size.reason,
    )
    return size.num_blocks


def build_rank0(
    spec: RankSpec,
    make_runner: Callable[[], Runner],
    replica: int = 0,
    placement_group: Any = None,
) -> tuple[Runner, int, TPGroup | None]:
    """The runner, loaded, with its KV cache of the returned block count; tensor parallel:
    and its rank group (data-parallel replica ``replica``'s own), started (ranks 1..N-1
    load their shards while this thread loads rank 0's). ``placement_group``: rank 0 runs
    in a Ray actor of that group (worker/ray_host.py), ranks 1..N-1 go beside it."""
    group = None
    if spec.world_size > 1:
        from actorllm.models.config import CheckpointConfig
        from actorllm.models.parallel import check_tensor_parallel
        from actorllm.models.quant.apply import checkpoint_quantization
        from actorllm.worker.tp_group import TPGroup  # torch.distributed: only when used

        # Refused before any rank process is spawned (a quantized split must be whole).
        cfg = CheckpointConfig.from_pretrained(spec.model)
        if spec.pipeline_parallel_size > 1:
            from actorllm.models.pipeline import check_pipeline_parallel

            check_pipeline_parallel(cfg, spec.pipeline_parallel_size, spec.pp_layer_partition)
        else:
            check_tensor_parallel(cfg, spec.world_size)
            tp_cfg = msgspec.structs.replace(cfg, tp_size=spec.world_size)
            quant = checkpoint_quantization(tp_cfg, spec.quantization)
            if quant is not None and quant.scheme == "gguf":
                from actorllm.models.gguf.shards import check_gguf_split

                check_gguf_split(spec.model, spec.world_size)
            elif quant is not None:
                from actorllm.models.quant.shards import check_quantized_split

                check_quantized_split(cfg, quant, spec.world_size)
        group = TPGroup(spec, replica, placement_group)
    try:
        if group is not None:
            group.launch()
        runner = make_runner()
        runner.load_model()
        blocks = num_kv_blocks(spec, runner)
        if group is not None:
            group.connect(_model_runner(runner))
            blocks = group.agree_blocks(blocks)  # each rank's cache holds its heads
        runner.initialize_kv_cache(blocks)
    except BaseException:
        if group is not None:
            group.mark_broken("start-up failed")
            group.stop(grace_s=0.0)
        raise
    return runner, blocks, group


def _model_runner(runner: Runner) -> ModelRunner:
    """Tensor parallel shards a real model: rank 0's runner must be a ModelRunner."""
    from actorllm.worker.model_runner import ModelRunner

    if not isinstance(runner, ModelRunner):
        raise TypeError(
            f"tensor_parallel_size > 1 needs the model runner, not {type(runner).__name__}"
        )
    return runner
