"""``EngineConfig``: every knob of the engine, with vLLM's names, validated in one place.

Configuration flows in through this object only (no globals). Fields a user can get wrong
raise :class:`EngineConfigError` (a ``ValueError``) naming the field.

    >>> EngineConfig(model="/models/tiny", max_num_seqs=8).max_num_seqs
    8
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import msgspec

from actorllm.engine.config import engine_checks as checks
from actorllm.engine.config.cli_help import ENGINE_CONFIG_HELP
from actorllm.engine.config.errors import EngineConfigError as EngineConfigError  # re-exported
from actorllm.engine.config.generation_config import (
    GenerationConfigError,
    check_override,
    sampling_defaults,
)
from actorllm.models.hub import ModelNotFoundError as ModelNotFoundError  # re-exported
from actorllm.models.load_format import LoadFormat
from actorllm.models.quant.spec import VLLM_METHODS

if TYPE_CHECKING:
    from actorllm.core.watermark_config import WatermarkConfig
    from actorllm.engine.config.speculative import SpeculativeConfig

if TYPE_CHECKING:
    from actorllm.engine.config.pooling_model import PoolingModel

Device = Literal["auto", "cpu", "cuda"]
AttentionBackend = Literal["auto", "torch", "triton"]
SchedulingPolicy = Literal["fcfs", "priority"]
DType = Literal["auto", "float32", "bfloat16", "float16", "half", "float"]
StructuredOutputsBackend = Literal["auto", "xgrammar", "guidance"]
# Default KV-cache block sizes per device (EngineConfig.block_size None).
CPU_BLOCK_SIZE = 32
CUDA_BLOCK_SIZE = 16
# Default step token budgets with chunked prefill (EngineConfig.max_num_batched_tokens None).
# A CPU's prefill is compute bound and its GEMMs run at full rate from a few hundred rows
# up, so a step's time grows with its tokens: a smaller budget gives prompts that arrive
# together their first tokens in turn instead of all at the end of one long step, for the
# same tokens per second (docs/cpu_performance.md, "The step budget on CPU").
CPU_MAX_NUM_BATCHED_TOKENS = 1024
CUDA_MAX_NUM_BATCHED_TOKENS = 2048


class EngineConfig(msgspec.Struct, kw_only=True):
    """Every knob of the engine, in sections named after vLLM's config classes. The command
    line has one flag per field; its ``--help`` text is :data:`CLI_HELP`
    (``engine/config/cli_help.py``), the user documentation of each setting."""

    CLI_HELP: ClassVar[Mapping[str, Mapping[str, str]]] = ENGINE_CONFIG_HELP

    # -- ModelConfig ------------------------------------------------------------------------
    model: str | None = None
    """A local directory with config.json and safetensors weights, a local ``.gguf`` file
    (with ``tokenizer``), or a Hugging Face hub id (``org/name``) resolved through the local
    hub cache (downloaded when allowed). None: the embedded demo model."""
    revision: str | None = None
    """The hub revision (branch, tag or commit) of ``model``; default ``main``."""
    tokenizer: str | None = None
    """The tokenizer's directory or hub id (default: the model's)."""
    tokenizer_revision: str | None = None
    """The hub revision of ``tokenizer`` (default: ``revision`` when the tokenizer is the
    model's, else ``main``)."""
    served_model_name: str | list[str] | None = None
    """The model name clients send and see (default: ``model``; the demo: actorllm-demo).
    Several names (``--served-model-name a b``) are aliases: requests may use any of them,
    responses and metrics carry the first."""
    logits_processors: str | list[str] | None = None
    """Custom logits processors: vLLM's V1 ``LogitsProcessor`` classes, as ``module:Class``
    strings (classes too, offline), applied to every step's logits; installed plugins
    (entry points ``actorllm.logits_processors``, ``vllm.logits_processors``) load too."""
    dtype: DType = "auto"
    """Weights and activations dtype; auto: the checkpoint's."""
    seed: int = 0
    """Seed of the sampler for requests without their own seed, and of dummy weights."""
    max_model_len: int | None = None
    """Context length: prompt plus output tokens (default: the model's
    max_position_embeddings)."""
    max_logprobs: int = 20
    """The most logprobs a request may ask for per token (logprobs, top_logprobs,
    prompt_logprobs); -1: the whole vocabulary. vLLM's default, 20."""
    enable_prompt_embeds: bool = False
    """Accept prompts given as embeddings ({"prompt_embeds": tensor [T, H]} in generate,
    base64 torch.save bytes in a completion's prompt_embeds), vLLM's flag."""
    chat_template: str | None = None
    """A Jinja chat template replacing the tokenizer's: a file path, or the template itself
    written inline."""
    runner: Literal["auto", "generate", "pooling"] = "auto"
    """generate (text) or pooling (embeddings, classification, scores; prefill-only
    requests); auto: pooling for encoder and sentence-transformers checkpoints, as vLLM."""
    convert: Literal["auto", "none", "embed", "classify"] = "auto"
    """Serve a decoder checkpoint as a pooling model: embed (last-token pooling, normalized)
    or classify (its score head over the last token); auto: from the architecture."""
    pooler_config: dict[str, Any] | None = None
    """vLLM's pooler config for pooling models: pooling_type (CLS, LAST, MEAN; ALL, STEP),
    seq_pooling_type, tok_pooling_type, use_activation, dimensions, logit_mean, logit_sigma,
    task, step_tag_id, returned_token_ids (STEP token pooling: the reward models)."""
    hf_overrides: dict[str, Any] | None = None
    """Keys merged into the model's config.json before it is read, e.g.
    '{"matryoshka_dimensions": [256]}' (a dict value updates that dict key by key)."""
    enforce_eager: bool = False
    """Never capture or replay CUDA graphs (CPU never uses them)."""
    enable_return_routed_experts: bool = False
    """MoE models: return the experts each token was routed to in every layer
    (``routed_experts``, [tokens, layers, top_k]) with each finished output, for RL routing
    replay (vLLM's). Decode runs eagerly and requests read no prefix-cache hit (every
    position is computed and recorded)."""
    generation_config: str = "auto"
    """Where requests' default sampling parameters (temperature, top_p, top_k, min_p,
    repetition_penalty; max_new_tokens as the max_tokens of a request that gives none) come
    from: auto, the model's generation_config.json (as vLLM); vllm, none (SamplingParams'
    and OpenAI's defaults); or a directory holding a generation_config.json. A request's
    own values always win; LLM.generate and AsyncEngine.generate without sampling_params
    use these (LLM.get_default_sampling_params())."""
    override_generation_config: dict[str, Any] | None = None
    """Default sampling parameters over generation_config's, e.g. '{"temperature": 0.6}'."""
    cpu_omp_short_spin: bool = False
    """CPU: keep one parked OpenMP team so libgomp always short-spins (worker/omp_spin.py):
    the same, slower speed whatever other threads of the host keep OpenMP teams, and the
    regime that holds up when other processes keep the cores busy. Off (the default), the
    engine frees the idle team of the host thread that starts or calls it, so its worker's
    team keeps libgomp's long spins, as in a fresh process."""
    cpu_weights_on_huge_pages: bool = True
    """CPU: after loading, collapse the memory the weights (and their oneDNN-packed copies)
    took into 2 MiB transparent huge pages, where the kernel offers MADV_COLLAPSE
    (worker/huge_pages.py): fewer TLB misses as every decode step streams the weights."""
    cpu_keep_freed_memory: bool = True
    """CPU: glibc keeps the memory a step frees for the next one instead of returning it to
    the OS, which then faults every page back in inside the step (worker/malloc_tuning.py;
    vLLM's CPU build preloads tcmalloc for the same reason). Process-wide and kept after
    the engine closes; False leaves malloc as the host set it."""
    # -- LoadConfig -------------------------------------------------------------------------
    quantization: str | None = None
    """The checkpoint's quantization method, as vLLM's --quantization: None reads it from
    config.json's quantization_config; a method that contradicts the checkpoint's is
    refused (gptq, awq, compressed-tensors run; docs/quantization.md)."""
    load_format: LoadFormat = "auto"
    """How weights load: auto reads the checkpoint's safetensors, else its PyTorch
    *.bin / *.pt files (or a .gguf file); safetensors and pt read only that kind (pickles
    through torch.load(weights_only=True)); gguf a .gguf file; dummy makes random weights
    (for benchmarks)."""
    download_dir: str | None = None
    """Where hub models are cached and downloaded (default: huggingface_hub's cache,
    ``$HF_HUB_CACHE`` or ``$HF_HOME/hub``)."""
    # -- CacheConfig ------------------------------------------------------------------------
    block_size: int | None = None
    """KV-cache block size in tokens (a power of two up to 128; default: 32 on CPU, 16 on
    CUDA). CPU takes multiples of 32 as vLLM's CPU backend does: the native decode kernel
    reads longer runs per block, and the scheduler allocates half as many blocks
    (docs/cpu_performance.md has the measurements)."""
    enable_prefix_caching: bool = True
    """Reuse the KV blocks of prompt prefixes seen before."""
    prefix_caching_hash_algo: Literal["sha256", "xxhash"] = "sha256"
    """The prefix cache's block hash (vLLM's): sha256 is collision resistant, also against
    prompts crafted to reach another tenant's blocks; xxhash (128-bit xxHash) is faster and
    is not (give each tenant a cache_salt). vLLM's sha256_cbor / xxhash_cbor hash vLLM's own
    CBOR encoding of a block for other programs to recompute; these hashes are this
    engine's own, so they are not offered."""
    gpu_memory_utilization: float = 0.9
    """CUDA: the fraction of GPU memory the engine may use (weights, activations, KV cache);
    the KV cache gets what the profiled step leaves. Unused on CPU."""
    num_gpu_blocks_override: int | None = None
    """Exactly this many KV blocks (the null block included), instead of sizing the cache
    from memory."""
    kv_cache_memory_bytes: int | None = None
    """Bytes for the KV cache, e.g. 4GiB (on CUDA it replaces the gpu_memory_utilization
    sizing). None on CPU: ``VLLM_CPU_KVCACHE_SPACE`` / ``ACTORLLM_CPU_KVCACHE_SPACE`` (whole
    GiB) when set (:meth:`resolved_kv_cache_memory_bytes`), else sized from the model and
    the memory (``worker/cpu_kv_size.py``): at least 256MiB, grown to hold
    ``min(max_num_seqs, 4)`` requests of ``max_model_len`` tokens, at most 80% of the memory
    available once the weights are loaded; start-up fails naming the ``max_model_len`` that
    fits when that cannot hold one request. An explicit size too small for one request
    fails the same way."""
    kv_cache_dtype: str = "auto"
    """The KV cache's storage dtype, vLLM's --kv-cache-dtype: auto (the model's dtype),
    bfloat16, fp8 (= fp8_e4m3), fp8_e4m3 or fp8_e5m2. fp8 takes 1 byte an element: twice
    the blocks of a bfloat16 cache in the same bytes. Keys and values are divided by a
    per-layer scale (the checkpoint's k_scale / v_scale, else 1.0) and saturated to the
    format's range when written, multiplied back when read (docs/quantization.md)."""
    # -- SchedulerConfig --------------------------------------------------------------------
    enable_chunked_prefill: bool = True
    """Split long prompts across steps so decodes keep running beside them."""
    max_num_seqs: int = 256
    """The most requests in one step."""
    max_num_batched_tokens: int | None = None
    """Token budget of one step (default with chunked prefill: 1024 on CPU, 2048 on CUDA;
    without: max_model_len, at least 2048)."""
    long_prefill_token_threshold: int = 0
    """A prefill chunk longer than this many tokens is cut to it, so one long prompt cannot
    take a whole step's budget; 0: no cap."""
    long_prefill_token_threshold_adaptive: bool = False
    """Floor long_prefill_token_threshold at a fair share of the step's budget:
    max_num_batched_tokens divided by the requests running and waiting (vLLM's), so a few
    long prompts are not cut finer than the budget needs. Only with a nonzero threshold."""
    scheduling_policy: SchedulingPolicy = "fcfs"
    """fcfs: arrival order; priority: by each request's priority, then arrival."""
    watermark: float = 0.0
    """Fraction of the KV cache blocks a waiting or preempted request must leave free to
    start while others run: headroom for the running requests' growth, so fewer of them are
    preempted when the cache is short (vLLM's; 0: off). In [0, 1)."""
    scheduler_reserve_full_isl: bool = True
    """Start a prompt that is prefilled in chunks only if the KV cache holds all of it at
    once, not just its first chunk (vLLM's default), so its later chunks do not preempt
    others."""
    stream_interval: int = 1
    """Streaming (DELTA and CUMULATIVE outputs): send a request's output once this many new
    tokens accumulated (the first and the final output at once); 1 sends every token, a
    larger value sends fewer, merged outputs (less host work per token). A request's
    SamplingParams.stream_interval can raise it, not lower it."""
    async_scheduling: bool | None = None
    """Overlap scheduling the next step with the model running this one (two steps in
    flight). None, the default, turns it on unless the engine cannot overlap steps
    (speculative decoding, pipeline parallel, a pooling model), as vLLM resolves it on
    GPUs; see :meth:`resolved_async_scheduling`. vLLM's CPU platform forces it off; here it
    stays on on CPU as well: the served loop's turn between steps is hidden by the overlap.
    The overlapping step is launched just before the running one is predicted to end
    (engine/scheduling/lookahead.py), so requests that arrive meanwhile join it."""
    # -- SpeculativeConfig ------------------------------------------------------------------
    speculative_config: dict[str, Any] | None = None
    """vLLM's speculative_config, e.g. '{"method": "ngram", "num_speculative_tokens": 4}'
    (engine/config/speculative.py reads it; docs/speculative.md). Runs with
    async_scheduling unset or off."""
    return_sampling_mask: bool = False
    """vLLM's sampling distribution replay: each output token's ``sampling_mask``, the
    vocabulary ids that survived temperature, min-p, top-k and top-p (needs
    logprobs_mode processed_logprobs; requests need temperature > 0 and top_k > 0)."""
    logprobs_mode: str = "raw_logprobs"
    """Sample logprobs: raw_logprobs (log_softmax of the model's logits), or
    processed_logprobs (of the logits the draw samples from: penalties, temperature and the
    filters applied; with return_sampling_mask only)."""
    # -- WatermarkConfig --------------------------------------------------------------------
    watermark_config: dict[str, Any] | None = None
    """vLLM's text watermark, e.g. '{"key": 1234}' (a ``WatermarkConfig`` object or its
    JSON too): sampled requests draw with Gumbel-max over a keyed PRF of their last
    context_width tokens (core/watermark_config.py has the fields; docs/offline.md)."""
    disable_hybrid_kv_cache_manager: bool = False
    """Models mixing sliding-window and full-attention layers (Gemma 2/3) keep one block
    table for all layers, so sliding layers hold every block too (by default each attention
    type has its own table and sliding layers free blocks behind their window)."""
    # -- ParallelConfig ---------------------------------------------------------------------
    tensor_parallel_size: int = 1
    """Tensor-parallel ranks: the model's heads, MLP columns and vocabulary split over this
    many ranks (rank 0 on the worker thread, the others in processes; CPU, gloo;
    docs/distributed.md)."""
    distributed_executor_backend: Literal["mp", "ray"] | None = None
    """Where the model's ranks run: mp (rank 0 on the engine's worker thread, ranks 1..N-1
    spawned on this node; the default) or ray (every rank, rank 0 included, a Ray actor
    placed by a placement group per replica on an existing Ray cluster, any of its nodes:
    ray.init(address="auto") / RAY_ADDRESS; needs the ray extra; docs/distributed.md)."""
    tp_collective_timeout_s: float = 60.0
    """Tensor parallel: a collective (all-reduce, logits gather) that does not complete in
    this many seconds (a hung rank) fails the step, which restarts the rank group."""
    worker_extension_cls: str = ""
    """A class (dotted path, package.module.Class) mixed into every worker, rank 0 and the
    tensor-parallel ranks, local or on Ray: its methods are callable by name through
    collective_rpc with ``self`` the worker (docs/rlhf.md). "": none."""
    pipeline_parallel_size: int = 1
    """Pipeline-parallel stages: the decoder's layers split over this many ranks (vLLM's
    split; VLLM_PP_LAYER_PARTITION sets it by hand), each with the KV cache of its own
    layers, up to this many batches in flight so the stages overlap (CPU, gloo; rank 0
    holds the last stage and stays in the engine process, under ray too, where the other
    stages are Ray actors; docs/distributed.md)."""
    data_parallel_size: int = 1
    """Data-parallel engine replicas (each its own scheduler, KV cache and worker thread,
    behind one router; docs/distributed.md)."""
    data_parallel_backend: Literal["mp", "ray"] = "mp"
    """Where the replicas run. mp: every replica's worker (rank 0) in this process; ray:
    each replica's worker and its tensor-parallel ranks are Ray actors in a placement group
    of that replica's own, on any node (it sets distributed_executor_backend to ray).
    Every replica's scheduler stays in this process either way."""
    # -- DeviceConfig -----------------------------------------------------------------------
    device: Device = "auto"
    """Where the model runs; auto: CUDA when available, else CPU."""
    # -- AttentionConfig --------------------------------------------------------------------
    attention_backend: AttentionBackend = "auto"
    """Attention kernels: torch (reference), triton, or auto (triton on CUDA)."""
    # -- ActorConfig ------------------------------------------------------------------------
    max_restarts: int = 3
    """Restart intensity: more than this many actor crashes within restart_window_s stops
    the engine."""
    restart_window_s: float = 30.0
    """The window (seconds) of max_restarts."""
    mailbox_size: int = 1024
    """Capacity of each actor's mailbox (messages); a full mailbox is backpressure."""
    freeze_gc_at_start: bool = True
    """After start-up, collect once and move every live object (weights' Python objects,
    tokenizer, modules) to a permanent GC generation that is never scanned again, as vLLM
    does: the per-step cost of the cyclic GC no longer grows with that heap. Process-wide
    (gc.freeze); turn it off if the embedding application relies on GC of older cycles."""
    gc_gen0_threshold: int | None = 50_000
    """While the engine runs, the cyclic GC's generation-0 threshold is at least this many
    allocations (CPython's default: 700), so a busy step triggers a few young collections
    instead of dozens (engine/config/interpreter_settings.py). Process-wide, restored when the
    last engine closes. None (or 700 from the command line): leave the GC alone."""
    switch_interval_s: float | None = 0.0005
    """While the engine runs, a thread holding the GIL hands it over after at most this
    many seconds when another thread waits (``sys.setswitchinterval``; CPython's default
    0.005), so the worker thread, back from a torch call, is not kept waiting while the
    event loop processes a step's outputs. Process-wide, restored when the last engine
    closes. None (or 0.005 from the command line): leave it alone."""
    restart_backoff_s: float = 0.0
    """Delay (seconds) before restarting a crashed actor, growing exponentially from this,
    with jitter; 0: at once."""
    # -- FaultConfig -------------------------------------------------------------------------
    actor_message_deadline_s: float | None = None
    """Watchdog: an engine actor that holds one message longer than this many seconds (a
    handler that never returns) is restarted as if it had crashed, and the message is
    retried or failed like any crash's. Includes waiting on full mailboxes, so keep it well
    above the slowest step. None: no watchdog."""
    actor_shutdown_timeout_s: float = 5.0
    """How long an engine actor may take to stop when the engine closes (finish its current
    message, run ``on_stop``) before it is cancelled."""
    step_timeout_s: float | None = None
    """A model step still running after this many seconds is treated as an executor crash:
    the core restarts and its requests are recomputed. None: no timeout."""
    max_waiting_requests: int | None = None
    """Refuse new requests (``EngineOverloadedError``, HTTP 503 with ``Retry-After``) while
    this many are already waiting: accepted but not running (queued, being tokenized, or
    preempted). None: no bound."""
    max_num_queued_reqs: int | None = None
    """vLLM's: the server's generation routes refuse a request (HTTP 503) whose sequences
    would take the open ones (waiting or running, ``n`` each) past this. None: no limit
    (engine/api/admission_limits.py)."""
    max_num_queued_tokens: int | None = None
    """vLLM's: the server's generation routes refuse new requests (HTTP 503) while the
    prompts of the requests still in prefill hold this many tokens. None: no limit."""
    max_stream_backlog: int | None = 4096
    """Outputs a caller may leave unread on a request's stream. Beyond this the caller is a
    slow consumer: the request is aborted (its KV blocks freed) and its stream ends with
    ``SlowConsumerError``. None: unbounded."""
    shutdown_timeout: float = 30.0
    """``AsyncEngine.drain()`` (and the server on SIGTERM): seconds open requests may run
    to completion after new ones are refused, before the rest are aborted."""
    # -- WeightTransferConfig ----------------------------------------------------------------
    weight_transfer_backend: Literal["gloo", "nccl"] | None = None
    """Weight transfer from a trainer (RLHF; vLLM's weight_transfer_config backend): gloo
    (CPU) or nccl (CUDA); None: off (init_weight_transfer_engine is refused). docs/rlhf.md."""
    # -- KVTransferConfig -------------------------------------------------------------------
    kv_connector: Literal["offload"] | None = None
    """offload: keep evicted prefix blocks in a host-memory (and optional disk) tier and
    load them back on a hit."""
    kv_connector_enabled: bool = True
    """Start with the connector switched on (when one is configured)."""
    kv_offload_host_bytes: int = 256 * 2**20
    """Host-memory size of the offload tier, e.g. 1GiB."""
    kv_offload_disk_dir: str | None = None
    """Directory of the offload tier's disk level (default: no disk level)."""
    kv_offload_disk_bytes: int = 8 * 2**30
    """Size of the offload tier's disk level."""
    kv_offload_write_through: bool = False
    """Also save finished requests' blocks to the tier, not only evicted ones."""
    # -- StructuredOutputsConfig ------------------------------------------------------------
    structured_outputs_backend: StructuredOutputsBackend = "auto"
    """Grammar backend for structured outputs (JSON schema, regex, choice, grammar):
    xgrammar, guidance (llguidance), or auto: xgrammar, falling back to guidance for schema
    features xgrammar does not enforce. A request's own backend wins."""
    structured_outputs_disable_any_whitespace: bool = False
    """Generate JSON without optional whitespace for every request (models that pad JSON
    with whitespace can otherwise run to max_tokens inside an unfinished object)."""
    structured_outputs_disable_additional_properties: bool = False
    """JSON schemas take only their listed properties for every request (additionalProperties
    false wherever a schema does not say)."""
    structured_outputs_enable_in_reasoning: bool = False
    """With a reasoning_parser: constrain the reasoning too, not only the answer after it."""
    reasoning_parser: str | None = None
    """Split a reasoning model's thinking into reasoning_content (vLLM's names: deepseek_r1,
    qwen3, granite, ... see actorllm.reasoning.REASONING_PARSERS). Structured outputs then
    constrain the answer only (after the reasoning)."""
    reasoning_config: dict[str, Any] | None = None
    """vLLM's reasoning config: reasoning_start_str and reasoning_end_str, the markers a
    request's thinking_token_budget counts between and forces once spent (default: the
    reasoning_parser's, e.g. <think> and </think>), e.g.
    '{"reasoning_end_str": "Time to answer.</think>"}'."""
    # -- LoRAConfig -------------------------------------------------------------------------
    enable_lora: bool = False
    """Serve LoRA adapters (PEFT's format) beside the base model; requests name one."""
    max_loras: int = 1
    """The most distinct adapters in one step (slots held on the device)."""
    max_lora_rank: int = 16
    """The largest adapter rank served; adapters of higher rank are refused."""
    max_cpu_loras: int | None = None
    """Adapters kept loaded in host memory (least recently used evicted, read again when
    requested); None: max_loras."""
    lora_dtype: str = "auto"
    """The adapters' dtype on the device: auto (the model's), float16, bfloat16, float32."""
    # -- ObservabilityConfig ----------------------------------------------------------------
    custom_histogram_buckets: dict[str, list[float]] | None = None
    """Prometheus histogram bounds by vLLM's bucket family, e.g. '{"request_latency": [0.5,
    1, 5, 30], "request_tokens": [128, 1024, 8192]}': a family's list replaces the
    default bounds of each of its histograms (core/histogram_buckets.py); families not
    given keep theirs."""
    # -- ProfilerConfig ---------------------------------------------------------------------
    profiler_dir: str | None = None
    """Directory for torch-profiler traces written by start_profile()/stop_profile() (Chrome
    trace JSON, CPU activities, CUDA too on a GPU; the worker thread and the event loop).
    None: profiling is disabled and start_profile() raises ProfilerError naming this field."""

    def __post_init__(self) -> None:
        if self.logits_processors:
            # torch-free until a processor is configured (the interface imports torch)
            from actorllm.worker.logitsprocs.loader import as_names as logits_processor_names

            try:  # FQCN strings from here on (they travel to every rank); each must load
                self.logits_processors = list(logits_processor_names(self.logits_processors))
            except ValueError as exc:
                raise EngineConfigError("logits_processors", str(exc)) from None
        checks.check_limits(self)
        checks.check_kv_cache_dtype(self)
        q = self.quantization
        if q is not None and q.lower() != "none" and q not in VLLM_METHODS:
            raise EngineConfigError(  # vLLM's message; the checkpoint is checked at load
                "quantization",
                f"Unknown quantization method: {q}. Must be one of {list(VLLM_METHODS)}.",
            )
        try:
            check_override(self.override_generation_config)
        except GenerationConfigError as exc:
            raise EngineConfigError(exc.param, exc.detail) from None
        if self.chat_template is not None:
            self.resolved_chat_template()  # fail at configuration, not at the first chat
        if isinstance(self.served_model_name, list) and not all(
            isinstance(n, str) and n for n in self.served_model_name
        ):
            raise EngineConfigError("served_model_name", "names must be non-empty strings.")
        checks.check_parallel(self)
        checks.check_lora(self)
        if self.reasoning_parser is not None:
            from actorllm.reasoning import REASONING_PARSERS

            if self.reasoning_parser not in REASONING_PARSERS:
                raise EngineConfigError(
                    "reasoning_parser",
                    f"must be one of {', '.join(sorted(REASONING_PARSERS))}, "
                    f"got {self.reasoning_parser!r}.",
                )
        from actorllm.engine.config.reasoning_config import check_reasoning_config

        wrong = check_reasoning_config(self.reasoning_config, self.reasoning_parser)
        if wrong is not None:
            raise EngineConfigError("reasoning_config", wrong)
        checks.check_speculative(self)
        checks.check_prompt_embeds(self)
        checks.check_watermark(self)
        checks.check_sampling_mask(self)

    def watermarking(self) -> WatermarkConfig | None:
        """The parsed ``watermark_config`` (None: no watermark)."""
        if self.watermark_config is None:
            return None
        from actorllm.core.watermark_config import WatermarkConfig

        return WatermarkConfig(**self.watermark_config)

    def speculative(self) -> SpeculativeConfig | None:
        """The parsed ``speculative_config`` (None: no speculation; ``{}`` asks for none)."""
        if not self.speculative_config:
            return None
        from actorllm.engine.config.speculative import parse_speculative_config

        return parse_speculative_config(self.speculative_config)

    # -- resolved views -------------------------------------------------------------------

    def resolved_model(self) -> Path:
        """The model directory: the demo model when ``model`` is None (built on first use),
        a local directory, or a hub id resolved through the hub cache (see
        :func:`actorllm.models.hub.resolve_model`). Raises :class:`ModelNotFoundError`."""
        if self.model is None:
            from actorllm.demo import demo_model_path

            return demo_model_path()
        from actorllm.models.hub import resolve_model

        path = resolve_model(
            self.model,
            revision=self.revision,
            cache_dir=self.download_dir,
            load_format=self.load_format,
        )
        if not self.hf_overrides:
            return path
        from actorllm.engine.config.hf_overrides import overlaid

        try:
            return overlaid(path, self.hf_overrides)
        except ValueError as exc:
            raise EngineConfigError("hf_overrides", str(exc)) from None

    def get_diff_sampling_param(self) -> dict[str, float]:
        """Requests' default sampling fields (``generation_config`` with
        ``override_generation_config`` on top; ``max_tokens`` for max_new_tokens), as
        vLLM's ``ModelConfig.get_diff_sampling_param``. Reads the model's
        generation_config.json under ``auto``; raises ``GenerationConfigError``."""
        model_dir = self.resolved_model() if self.generation_config == "auto" else None
        return sampling_defaults(self.generation_config, self.override_generation_config, model_dir)

    def resolved_draft_model(self) -> str | None:
        """The draft model's (method draft_model) or EAGLE head's (eagle, eagle3) directory,
        resolved as ``model`` is; None for ngram."""
        spec = self.speculative()
        if spec is None or spec.model is None:
            return None
        from actorllm.models.hub import resolve_model

        return str(resolve_model(spec.model, cache_dir=self.download_dir))

    def resolved_tokenizer(self) -> Path:
        if not self.tokenizer:
            if self.model is not None and self.model.lower().endswith(".gguf"):
                raise EngineConfigError(
                    "tokenizer",
                    "a GGUF model needs the tokenizer of the model it was converted from "
                    "(--tokenizer <HF directory or hub id>); the tokenizer embedded in the "
                    "GGUF file is not read.",
                )
            return self.resolved_model()
        from actorllm.models.hub import resolve_model

        return resolve_model(
            self.tokenizer,
            revision=self.tokenizer_revision,
            cache_dir=self.download_dir,
            required_file=None,
        )

    def resolved_chat_template(self) -> str | None:
        """The text of ``chat_template``: the file it names, or itself when written inline
        (it contains Jinja's ``{{`` or ``{%``). None: the tokenizer's own template."""
        raw = self.chat_template
        if raw is None:
            return None
        if "{{" in raw or "{%" in raw:
            return raw
        path = Path(raw).expanduser()
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise EngineConfigError(
                "chat_template",
                f"{raw!r} is neither a readable file ({exc.strerror}) nor an inline Jinja "
                "template (one containing {{ or {%).",
            ) from exc

    def model_name(self) -> str:
        """The name responses and metrics carry: the first served name."""
        return self.model_names()[0]

    def model_names(self) -> list[str]:
        """Every name requests may use for the model (``served_model_name``'s aliases)."""
        names = self.served_model_name
        if isinstance(names, str) and names:
            return [names]
        if isinstance(names, list) and names:
            return list(names)
        return ["actorllm-demo" if self.model is None else self.model]

    def releases_host_openmp_team(self) -> bool:
        """Whether the engine frees the idle OpenMP team of a host thread that starts it or
        blocks in one of its calls (worker/omp_spin.py)."""
        return self.resolved_device() == "cpu" and not self.cpu_omp_short_spin

    def resolved_runner(self) -> tuple[str, str]:
        """(runner, convert) with ``auto`` resolved from the checkpoint, as vLLM does."""
        from actorllm.engine.config.pooling_model import resolve_runner

        try:
            return resolve_runner(self.resolved_model(), self.runner, self.convert)
        except ValueError as exc:
            raise EngineConfigError("runner", str(exc)) from None

    def pooling_model(self) -> PoolingModel | None:
        """What the pooling model offers (tasks, pooling, sizes); None: a generative model."""
        runner, convert = self.resolved_runner()
        if runner != "pooling":
            return None
        from actorllm.engine.config.pooling_model import pooling_model
        from actorllm.models.pooler_spec import PoolerConfigError

        try:
            return pooling_model(self.resolved_model(), convert, self.pooler_config)  # type: ignore[arg-type]
        except PoolerConfigError as exc:
            raise EngineConfigError("pooler_config", str(exc)) from None

    def resolved_async_scheduling(self, pooling: bool) -> bool:
        """Whether steps overlap: ``async_scheduling`` when set, else on except where the
        engine keeps one step in flight (speculative decoding proposes from the previous
        step's tokens; pipeline parallel keeps a batch per stage instead; a pooling model
        (``pooling``) has no next token to overlap with), as vLLM 0.32 resolves None on GPUs
        (its CPU platform forces False; this one does not, see ``async_scheduling``)."""
        if self.async_scheduling is not None:
            return self.async_scheduling
        return not (pooling or self.speculative_config or self.pipeline_parallel_size > 1)

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_block_size(self) -> int:
        """The KV-cache block size: the given one, else 32 on CPU and 16 on CUDA."""
        if self.block_size is not None:
            return self.block_size
        return CPU_BLOCK_SIZE if self.resolved_device() == "cpu" else CUDA_BLOCK_SIZE

    def resolved_kv_cache_memory_bytes(self) -> int | None:
        """The KV cache's bytes: ``kv_cache_memory_bytes``, else on CPU the environment's
        ``VLLM_CPU_KVCACHE_SPACE`` (``engine/config/kv_cache_space.py``), else None (the
        engine sizes the cache: from the model and the memory available on CPU, from a
        profile run on CUDA)."""
        if self.kv_cache_memory_bytes:  # 0, as VLLM_CPU_KVCACHE_SPACE=0: not given
            return self.kv_cache_memory_bytes
        if self.resolved_device() != "cpu":
            return None
        from actorllm.engine.config.kv_cache_space import kv_cache_space_bytes

        return kv_cache_space_bytes()

    def resolved_max_num_batched_tokens(self, max_model_len: int) -> int:
        """The step's token budget: the given one, else with chunked prefill 1024 on CPU and
        2048 on CUDA, else the whole context (at least 2048)."""
        if self.max_num_batched_tokens is not None:
            return self.max_num_batched_tokens
        if not self.enable_chunked_prefill:
            return max(2048, max_model_len)
        if self.resolved_device() == "cpu":
            return CPU_MAX_NUM_BATCHED_TOKENS
        return CUDA_MAX_NUM_BATCHED_TOKENS

    def replace(self, **changes: Any) -> EngineConfig:
        return msgspec.structs.replace(self, **changes)
