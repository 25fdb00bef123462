"""``--help`` text of the engine's settings (``EngineConfig``): the user documentation of
each flag, grouped under vLLM's config class names as ``vllm serve --help`` groups them.

Each entry says what the setting does, its unit and, where the default is not evident, the
default; ``struct_flags`` appends ``(default: ...)`` to an entry that does not name it.
Why a default was chosen belongs in the code's comments and in docs/, not here.
"""

from __future__ import annotations

from collections.abc import Mapping

ENGINE_CONFIG_HELP: Mapping[str, Mapping[str, str]] = {
    "ModelConfig": {
        "logits_processors": (
            "Custom logits processors: vLLM's V1 LogitsProcessor classes as module:Class "
            "(classes too, offline), applied to every step's logits; installed plugins "
            "(entry points actorllm.logits_processors, vllm.logits_processors) load too. "
            "Requests pass them arguments in SamplingParams.extra_args (vllm_xargs over HTTP)."
        ),
        "model": (
            "A local directory with config.json and safetensors weights, a local ``.gguf`` file "
            "(with ``tokenizer``), or a Hugging Face hub id (``org/name``) resolved through the "
            "local hub cache (downloaded when allowed). None: the embedded demo model."
        ),
        "revision": ("The hub revision (branch, tag or commit) of ``model``; default ``main``."),
        "tokenizer": "The tokenizer's directory or hub id (default: the model's).",
        "tokenizer_revision": (
            "The hub revision of ``tokenizer`` (default: ``revision`` when the tokenizer is the "
            "model's, else ``main``)."
        ),
        "served_model_name": (
            "The model name clients send and see (default: ``model``; the demo: actorllm-demo). "
            "Several names (``--served-model-name a b``) are aliases: requests may use any of "
            "them, responses and metrics carry the first."
        ),
        "dtype": "Weights and activations dtype; auto: the checkpoint's.",
        "seed": ("Seed of the sampler for requests without their own seed, and of dummy weights."),
        "max_model_len": (
            "Context length: prompt plus output tokens (default: the model's "
            "max_position_embeddings)."
        ),
        "runner": (
            "generate (text) or pooling (embeddings, classification, scores; prefill-only "
            "requests); auto: pooling for encoder and sentence-transformers checkpoints, as vLLM."
        ),
        "convert": (
            "Serve a decoder checkpoint as a pooling model: embed (last-token pooling, "
            "normalized) or classify (its score head over the last token); auto: from the "
            "architecture."
        ),
        "pooler_config": (
            "vLLM's pooler config for pooling models (JSON): pooling_type (CLS, LAST, MEAN; "
            "ALL, STEP), seq_pooling_type, tok_pooling_type, use_activation, dimensions, "
            "logit_mean, logit_sigma, task, step_tag_id, returned_token_ids (STEP: reward "
            "models)."
        ),
        "hf_overrides": (
            "Keys merged into the model's config.json before it is read (JSON), e.g. "
            "'{\"matryoshka_dimensions\": [256]}'; a dict value updates that dict key by key."
        ),
        "max_logprobs": (
            "The most logprobs a request may ask for per token (logprobs, top_logprobs, "
            "prompt_logprobs); -1: the whole vocabulary (a request's -1 asks for it)."
        ),
        "enable_prompt_embeds": (
            "Accept prompts given as embeddings: {'prompt_embeds': tensor [T, H]} in "
            "generate, base64 torch.save bytes in a completion's prompt_embeds."
        ),
        "chat_template": (
            "A Jinja chat template replacing the tokenizer's: a file path, or the template "
            "itself written inline."
        ),
        "enforce_eager": "Never capture or replay CUDA graphs (CPU never uses them).",
        "return_sampling_mask": (
            "Return each output token's sampling mask: the vocabulary ids that survived "
            "temperature, min-p, top-k and top-p (CompletionOutput.sampling_mask, the "
            "scale-out generate's choices[].sampling_mask). Needs --logprobs-mode "
            "processed_logprobs; requests need temperature > 0 and top_k > 0."
        ),
        "logprobs_mode": (
            "raw_logprobs (the model's) or processed_logprobs (of the logits the draw "
            "samples from, -inf outside the sampling mask; with --return-sampling-mask)."
        ),
        "enable_return_routed_experts": (
            "MoE models: return the experts each token was routed to in every layer "
            "(routed_experts, [tokens, layers, top_k]) with each finished output, for RL "
            "routing replay. Decode runs eagerly; requests read no prefix-cache hit."
        ),
        "generation_config": (
            "Where requests' default sampling parameters (temperature, top_p, top_k, min_p, "
            "repetition_penalty; max_new_tokens as the max_tokens of a request that gives none) "
            "come from: auto, the model's generation_config.json (as vLLM); vllm, none "
            "(SamplingParams' and OpenAI's defaults); or a directory holding a "
            "generation_config.json. A request's own values always win; LLM.generate and "
            "AsyncEngine.generate without sampling_params use these "
            "(LLM.get_default_sampling_params())."
        ),
        "override_generation_config": (
            "Default sampling parameters over generation_config's, e.g. '{\"temperature\": 0.6}'."
        ),
        "cpu_omp_short_spin": (
            "CPU: keep one parked OpenMP team so libgomp always short-spins: a steady speed "
            "whatever other threads of the host keep OpenMP teams, and one that holds up when "
            "other processes keep the cores busy. Off (the default), the engine frees the idle "
            "team of the host thread that starts or calls it, so its worker's team keeps "
            "libgomp's long spins, as in a fresh process."
        ),
        "cpu_weights_on_huge_pages": (
            "CPU: after loading, collapse the memory the weights (and their oneDNN-packed "
            "copies) take into 2 MiB transparent huge pages, where the kernel offers "
            "MADV_COLLAPSE: fewer TLB misses as every decode step streams the weights."
        ),
        "cpu_keep_freed_memory": (
            "CPU: glibc keeps the memory a step frees for the next step instead of returning it "
            "to the OS (which would fault every page back in). Process-wide and kept after the "
            "engine closes; --no-cpu-keep-freed-memory leaves malloc as the host set it."
        ),
    },
    "LoadConfig": {
        "quantization": (
            "The checkpoint's quantization method, as vLLM's --quantization: unset reads it "
            "from config.json's quantization_config; a method that contradicts the "
            "checkpoint's is refused (gptq, awq, compressed-tensors run)."
        ),
        "load_format": (
            "How weights load: auto reads the checkpoint's safetensors, else its PyTorch "
            "*.bin / *.pt files (or a .gguf file); safetensors and pt read only that kind "
            "(pickles through torch.load(weights_only=True)); gguf a .gguf file; dummy makes "
            "random weights (for benchmarks)."
        ),
        "download_dir": (
            "Where hub models are cached and downloaded (default: huggingface_hub's cache, "
            "``$HF_HUB_CACHE`` or ``$HF_HOME/hub``)."
        ),
    },
    "CacheConfig": {
        "block_size": (
            "KV-cache block size in tokens: a power of two up to 128 (default: 32 on CPU, 16 on "
            "CUDA)."
        ),
        "enable_prefix_caching": "Reuse the KV blocks of prompt prefixes seen before.",
        "prefix_caching_hash_algo": (
            "The prefix cache's block hash (vLLM's): sha256 is collision resistant, also "
            "against prompts crafted to reach another tenant's blocks; xxhash (128-bit "
            "xxHash) is faster and is not (give each tenant a cache_salt). vLLM's "
            "sha256_cbor / xxhash_cbor hash vLLM's own CBOR encoding of a block for other "
            "programs to recompute; these hashes are this engine's own, so they are not "
            "offered."
        ),
        "gpu_memory_utilization": (
            "CUDA: the fraction of GPU memory the engine may use (weights, activations, KV "
            "cache); the KV cache gets what the profiled step leaves. Unused on CPU."
        ),
        "num_gpu_blocks_override": (
            "Exactly this many KV blocks (the null block included), instead of sizing the cache "
            "from memory."
        ),
        "kv_cache_memory_bytes": (
            "Bytes for the KV cache, e.g. 4GiB (on CUDA it replaces the gpu_memory_utilization "
            "sizing). CPU default: VLLM_CPU_KVCACHE_SPACE GiB when set, else sized from the "
            "model: at least 256MiB, grown to hold min(max_num_seqs, 4) requests of "
            "max_model_len tokens, at most 80% of the memory available once the weights are "
            "loaded; start-up fails, naming the max_model_len that fits, when that cannot "
            "hold one request."
        ),
        "kv_cache_dtype": (
            "The KV cache's storage dtype: auto (the model's dtype), bfloat16, fp8 (= "
            "fp8_e4m3), fp8_e4m3 or fp8_e5m2. fp8 stores 1 byte an element, so the same "
            "bytes hold twice the blocks of a bfloat16 cache; keys and values are scaled by "
            "the checkpoint's per-layer k_scale / v_scale (else 1.0) and saturated to the "
            "format's range."
        ),
    },
    "SchedulerConfig": {
        "enable_chunked_prefill": (
            "Split long prompts across steps so decodes keep running beside them."
        ),
        "max_num_seqs": "The most requests in one step.",
        "max_num_batched_tokens": (
            "Token budget of one step (default with chunked prefill: 1024 on CPU, where a "
            "step's time grows with its tokens, 2048 on CUDA; without: max_model_len, at "
            "least 2048)."
        ),
        "long_prefill_token_threshold": (
            "A prefill chunk longer than this many tokens is cut to it, so one long prompt "
            "cannot take a whole step's budget; 0: no cap."
        ),
        "long_prefill_token_threshold_adaptive": (
            "Floor --long-prefill-token-threshold at a fair share of the step's budget: "
            "--max-num-batched-tokens divided by the requests running and waiting (vLLM's), "
            "so a few long prompts are not cut finer than the budget needs. Only with a "
            "nonzero threshold."
        ),
        "scheduling_policy": (
            "fcfs: arrival order; priority: by each request's priority, then arrival."
        ),
        "watermark": (
            "Fraction of the KV cache blocks a waiting or preempted request must leave free to "
            "start while others run: headroom for the running requests' growth, so fewer of "
            "them are preempted when the cache is short (vLLM's; 0: off). In [0, 1)."
        ),
        "scheduler_reserve_full_isl": (
            "Start a prompt that is prefilled in chunks only if the KV cache holds all of it "
            "at once, not just its first chunk (vLLM's default), so its later chunks do not "
            "preempt others."
        ),
        "stream_interval": (
            "Streaming (DELTA and CUMULATIVE outputs): send a request's output once this many "
            "new tokens accumulated (the first and the final output at once); 1 sends every "
            "token, a larger value sends fewer, merged outputs (less host work per token). A "
            "request's SamplingParams.stream_interval can raise it, not lower it."
        ),
        "async_scheduling": (
            "Overlap scheduling the next step with the model running this one. Unset: on, "
            "except with speculative decoding, pipeline parallel or a pooling model."
        ),
        "disable_hybrid_kv_cache_manager": (
            "Models mixing sliding-window and full-attention layers (Gemma 2/3) keep one block "
            "table for all layers, so sliding layers hold every block too (by default each "
            "attention type has its own table and sliding layers free blocks behind their "
            "window)."
        ),
    },
    "WatermarkConfig": {
        "watermark_config": (
            "Text watermarking, as vLLM's JSON, e.g. '{\"key\": 1234}' (fields: key, "
            "algorithm gumbel|dual_key_gumbel, alpha, context_width, deduplicate_contexts "
            "none|single_turn|all, deduplicate_contexts_max_history, prf philox, "
            "allow_target_only_watermarking): sampled requests draw by Gumbel-max over a "
            "keyed Philox PRF of their last context_width generated tokens, which "
            "actorllm.v1.watermarking's detectors (and vLLM's) recognise; a request opts "
            "out with watermarking=false; greedy and beam search requests are not "
            "watermarked. Not with speculative_config."
        ),
    },
    "SpeculativeConfig": {
        "speculative_config": (
            "Speculative decoding, as vLLM's JSON, e.g. "
            '\'{"method": "ngram", "num_speculative_tokens": 4}\': each step verifies up '
            "to num_speculative_tokens tokens in one forward, proposed by prompt lookup "
            "(prompt_lookup_min/max, default 5), by suffix decoding over the request's "
            "tokens and past outputs (method suffix, suffix_decoding_* keys), by a draft "
            "model (method draft_model, "
            "model: its path) or by an EAGLE / EAGLE-3 head (method eagle / eagle3, model: "
            "its path); greedy output is unchanged, sampled output keeps the model's "
            "distribution. Needs async_scheduling off; other methods are refused."
        ),
    },
    "ParallelConfig": {
        "tensor_parallel_size": (
            "Tensor-parallel ranks: the model's heads, MLP columns and vocabulary split over "
            "this many ranks (rank 0 on the worker thread, the others in processes; CPU, gloo). "
            "Quantized checkpoints split by whole groups and blocks (a split that cuts one is "
            "refused naming the layer or GGUF tensor; MoE experts split per expert; "
            "docs/quantization.md)."
        ),
        "distributed_executor_backend": (
            "Where the model's ranks run: mp (rank 0 on the engine's worker thread, ranks "
            "1..N-1 spawned on this node; the default) or ray (every rank, rank 0 included, "
            "a Ray actor placed by a placement group per replica on an existing Ray "
            'cluster, any of its nodes: ray.init(address="auto") / RAY_ADDRESS; needs the '
            "ray extra; docs/distributed.md)."
        ),
        "tp_collective_timeout_s": (
            "Tensor parallel: a collective (all-reduce, logits gather) that does not complete "
            "in this many seconds (a hung rank) fails the step, which restarts the rank group."
        ),
        "worker_extension_cls": (
            "A class (dotted path, package.module.Class) mixed into every worker (rank 0 and "
            "the tensor-parallel ranks, local or on Ray): its methods are callable by name "
            "through collective_rpc with self the worker (docs/rlhf.md). Empty: none."
        ),
        "pipeline_parallel_size": (
            "Pipeline-parallel stages: the decoder's layers split over this many ranks "
            "(vLLM's split; VLLM_PP_LAYER_PARTITION sets it by hand), each with the KV cache "
            "of its own layers, up to this many batches in flight so the stages overlap "
            "(CPU, gloo; rank 0 holds the last stage and stays in the engine process, under "
            "ray too, where the other stages are Ray actors; quantized checkpoints and GGUF "
            "files too; not with tensor parallel, LoRA, "
            "speculative decoding or pooling yet; docs/distributed.md)."
        ),
        "data_parallel_size": (
            "Data-parallel engine replicas (each its own scheduler, KV cache and worker thread, "
            "behind one router; docs/distributed.md)."
        ),
        "data_parallel_backend": (
            "Where the replicas run. mp: every replica's worker (rank 0) in this process; ray: "
            "each replica's worker and its tensor-parallel ranks are Ray actors in a placement "
            "group of that replica's own, on any node (it sets distributed_executor_backend to "
            "ray). Every replica's scheduler stays in this process either way."
        ),
    },
    "DeviceConfig": {
        "device": "Where the model runs; auto: CUDA when available, else CPU.",
    },
    "AttentionConfig": {
        "attention_backend": (
            "Attention kernels: torch (reference), triton, or auto (triton on CUDA)."
        ),
    },
    "ActorConfig": {
        "max_restarts": (
            "Restart intensity: more than this many actor crashes within restart_window_s stops "
            "the engine."
        ),
        "restart_window_s": "The window (seconds) of max_restarts.",
        "mailbox_size": (
            "Capacity of each actor's mailbox (messages); a full mailbox is backpressure."
        ),
        "freeze_gc_at_start": (
            "After start-up, collect once and move every live object (weights' Python objects, "
            "tokenizer, modules) to a permanent GC generation that is never scanned again, as "
            "vLLM does: the per-step cost of the cyclic GC no longer grows with that heap. "
            "Process-wide (gc.freeze); turn it off if the embedding application relies on GC of "
            "older cycles."
        ),
        "gc_gen0_threshold": (
            "While the engine runs, the cyclic GC's generation-0 threshold is at least this "
            "many allocations (CPython's default: 700), so a busy step triggers a few young "
            "collections instead of dozens. Process-wide, restored when the last engine closes. "
            "None (or 700 from the command line): leave the GC alone."
        ),
        "switch_interval_s": (
            "While the engine runs, a thread holding the GIL hands it over after at most this "
            "many seconds when another thread waits (``sys.setswitchinterval``; CPython's "
            "default 0.005), so the worker thread, back from a torch call, is not kept waiting "
            "while the event loop processes a step's outputs. Process-wide, restored when the "
            "last engine closes. None (or 0.005 from the command line): leave it alone."
        ),
        "restart_backoff_s": (
            "Delay (seconds) before restarting a crashed actor, growing exponentially from "
            "this, with jitter; 0: at once."
        ),
    },
    "FaultConfig": {
        "actor_message_deadline_s": (
            "Watchdog: an engine actor that holds one message longer than this many seconds (a "
            "handler that never returns) is restarted as if it had crashed, and the message is "
            "retried or failed like any crash's. Includes waiting on full mailboxes, so keep it "
            "well above the slowest step. None: no watchdog."
        ),
        "actor_shutdown_timeout_s": (
            "How long an engine actor may take to stop when the engine closes (finish its "
            "current message, run ``on_stop``) before it is cancelled."
        ),
        "step_timeout_s": (
            "A model step still running after this many seconds is treated as an executor "
            "crash: the core restarts and its requests are recomputed. None: no timeout."
        ),
        "max_waiting_requests": (
            "Refuse new requests (``EngineOverloadedError``, HTTP 503 with ``Retry-After``) "
            "while this many are already waiting: accepted but not running (queued, being "
            "tokenized, or preempted). None: no bound."
        ),
        "max_num_queued_reqs": (
            "vLLM's: the server's generation routes refuse a request (HTTP 503) whose "
            "sequences would take the open ones (waiting or running, ``n`` each) past this. "
            "None: no limit."
        ),
        "max_num_queued_tokens": (
            "vLLM's: the server's generation routes refuse new requests (HTTP 503) while the "
            "prompts of the requests still in prefill hold this many tokens. None: no limit."
        ),
        "max_stream_backlog": (
            "Outputs a caller may leave unread on a request's stream. Beyond this the caller is "
            "a slow consumer: the request is aborted (its KV blocks freed) and its stream ends "
            "with ``SlowConsumerError``. None: unbounded."
        ),
        "shutdown_timeout": (
            "``AsyncEngine.drain()`` (and the server on SIGTERM): seconds open requests may run "
            "to completion after new ones are refused, before the rest are aborted."
        ),
    },
    "WeightTransferConfig": {
        "weight_transfer_backend": (
            "Weight transfer from a trainer (RLHF; vLLM's weight_transfer_config backend): "
            "gloo (CPU) or nccl (CUDA); unset: off (init_weight_transfer_engine is refused). "
            'vLLM\'s spelling: --weight-transfer-config \'{"backend": "gloo"}\'.'
        ),
    },
    "KVTransferConfig": {
        "kv_connector": (
            "offload: keep evicted prefix blocks in a host-memory (and optional disk) tier and "
            "load them back on a hit."
        ),
        "kv_connector_enabled": ("Start with the connector switched on (when one is configured)."),
        "kv_offload_host_bytes": "Host-memory size of the offload tier, e.g. 1GiB.",
        "kv_offload_disk_dir": (
            "Directory of the offload tier's disk level (default: no disk level)."
        ),
        "kv_offload_disk_bytes": "Size of the offload tier's disk level.",
        "kv_offload_write_through": (
            "Also save finished requests' blocks to the tier, not only evicted ones."
        ),
    },
    "StructuredOutputsConfig": {
        "structured_outputs_backend": (
            "Grammar backend for structured outputs (JSON schema, regex, choice, grammar): "
            "xgrammar, guidance (llguidance), or auto: xgrammar, falling back to guidance for "
            "schema features xgrammar does not enforce. A request's own backend wins."
        ),
        "structured_outputs_disable_any_whitespace": (
            "Generate JSON without optional whitespace for every request (models that pad JSON "
            "with whitespace can otherwise run to max_tokens inside an unfinished object)."
        ),
        "structured_outputs_disable_additional_properties": (
            "JSON schemas take only their listed properties for every request "
            "(additionalProperties false wherever a schema does not say)."
        ),
        "structured_outputs_enable_in_reasoning": (
            "With a reasoning_parser: constrain the reasoning too, not only the answer after it."
        ),
        "reasoning_parser": (
            "Split a reasoning model's thinking into reasoning_content (vLLM's names: "
            "deepseek_r1, qwen3, granite, ... see actorllm.reasoning.REASONING_PARSERS). "
            "Structured outputs then constrain the answer only (after the reasoning)."
        ),
        "reasoning_config": (
            "JSON with reasoning_start_str and reasoning_end_str: the markers a request's "
            "thinking_token_budget counts between and forces once spent (default: the "
            "reasoning_parser's, e.g. <think> and </think>), e.g. "
            '\'{"reasoning_end_str": "Time to answer.</think>"}\'.'
        ),
    },
    "LoRAConfig": {
        "enable_lora": (
            "Serve LoRA adapters (PEFT's adapter_config.json + adapter_model.safetensors/.bin) "
            "beside the base model; a request names its adapter (lora_request, or the "
            "OpenAI model field)."
        ),
        "max_loras": "The most distinct adapters in one step (slots held on the device).",
        "max_lora_rank": "The largest adapter rank served; adapters of higher rank are refused.",
        "max_cpu_loras": (
            "Adapters kept loaded in host memory (least recently used evicted and read again "
            "when requested); default: max_loras."
        ),
        "lora_dtype": "The adapters' dtype: auto (the model's), float16, bfloat16, float32.",
    },
    "ObservabilityConfig": {
        "custom_histogram_buckets": (
            "Prometheus histogram bounds by vLLM's bucket family, e.g. "
            '\'{"request_latency": [0.5, 1, 5, 30], "request_tokens": [128, 1024, 8192]}\': '
            "a family's list replaces the default bounds of each of its histograms "
            "(request_latency, time_to_first_token, inter_token_latency, iteration_tokens, "
            "request_params_n, request_tokens, request_num_preemptions); families not given "
            "keep theirs."
        ),
    },
    "ProfilerConfig": {
        "profiler_dir": (
            "Directory for torch-profiler traces written by start_profile()/stop_profile() "
            "(Chrome trace JSON, CPU activities, CUDA too on a GPU; the worker thread and the "
            "event loop). None: profiling is disabled and start_profile() raises ProfilerError "
            "naming this field."
        ),
    },
}
