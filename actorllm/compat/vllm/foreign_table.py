"""The table of vLLM's engine arguments and ``serve`` flags that have no setting here, so
that vLLM scripts and launch lines start (:mod:`foreign_flags` adds them to a parser).

Every flag ``actorllm serve`` honours is generated from a settings struct
(:mod:`struct_flags`); this table holds only vLLM's other flags, each with what we do (as
a flag here, as a keyword in :mod:`args`):

* ``ignore``: it has no meaning here (the reason says why). Accepted, with one warning
  naming it, so a launch script starts and its author still learns the flag did nothing.
* ``refuse``: it asks for a feature actorllm does not have. Values in ``same`` ask for what
  actorllm does anyway (``--api-server-count 1``) and are
  accepted quietly; any other value stops the launch with an error naming the flag.

vLLM's spellings that map onto a real setting (``--kv-transfer-config``,
``--structured-outputs-config``, ...) are translated in :mod:`args`; the front-end ones
(``--disable-log-requests``, ``--disable-log-stats``) in ``entrypoints/commands/serve.py``.
"""

from __future__ import annotations

from actorllm.compat.vllm.foreign_entry import Foreign
from actorllm.compat.vllm.foreign_entry import ignored as _i
from actorllm.compat.vllm.foreign_entry import refused as _r

_NO_MM = "there are no multimodal inputs"
_NO_LORA_TP = (
    "LoRA adapters are split across tensor-parallel ranks one way (B's rows of column-"
    "parallel projections, A's columns of row-parallel ones), with the same output"
)
_NO_EP = "experts are not sharded: each replica holds every expert of a MoE model"
_ONE_NODE = "data-parallel replicas all run in this process (--data-parallel-size)"
_NO_GRAPH_SIZES = "the CUDA-graph batch sizes are fixed"
_NO_TRACES = "OpenTelemetry tracing is not supported"
_SPEC_SIZING = "vLLM's pre-V1 speculative flags are not read: give --speculative-config"
_NO_REMOTE = "actorllm runs only its own model code"
_NO_MAMBA = "no supported model has Mamba layers"
_NO_ARCH = "no supported model has these layers"
_KERNELS = "the kernels are fixed per device (see --attention-backend)"
_NO_DCP = "decode context parallelism is not built (--decode-context-parallel-size is refused)"
_NO_OFFLOAD = "weights are never offloaded (--cpu-offload-gb and --offload-group-size are refused)"
_NO_FT = "fault tolerance is not built (--enable-fault-tolerance is refused)"
_EMPTY = ("{}", "null", "None")
_LOGGING = (
    "the engine logs through Python's logging: configure it there, or give the level to "
    "actorllm serve"
)

FOREIGN: list[Foreign] = [
    # -- no meaning here: warn and go on ----------------------------------------------------
    # ModelConfig / LoadConfig
    _i("--trust-remote-code", value=False, why=_NO_REMOTE),
    _i("--code-revision", why=_NO_REMOTE),
    _i("--allowed-local-media-path", why=_NO_MM),
    _i("--allowed-media-domains", why=_NO_MM, nargs="+"),
    _i("--disable-sliding-window", value=False, why="sliding windows are always honoured"),
    _i("--disable-cascade-attn", value=False, why="there is no cascade attention"),
    _i("--safetensors-load-strategy", why="weights load with safetensors' own strategy"),
    _i(
        "--ignore-patterns",
        why="only configs, weights and tokenizer files are ever fetched",
        nargs="+",
    ),
    _i("--use-tqdm-on-load", value=False, why="weights load without a progress bar"),
    _i("--pt-load-map-location", why="PyTorch weight files load to the CPU, then the device"),
    _i("--max-parallel-loading-workers", why="weights load in one worker"),
    _i("--enable-sleep-mode", value=False, why="sleep/wake_up are always built in (dev mode)"),
    _i("--safetensors-prefetch-block-size", why="weights load with safetensors' own strategy"),
    _i("--safetensors-prefetch-num-threads", why="weights load with safetensors' own strategy"),
    _i("--enable-cumem-allocator", value=False, why="the device memory is torch's allocator's"),
    _i(
        "--enable-nccl-comm-suspend", value=False, why="tensor-parallel groups are gloo's, not NCCL"
    ),
    _i(
        "--sleep-mode-offload-cudagraph",
        value=False,
        why="sleep drops the CUDA graphs and wake_up captures them again",
    ),
    _i(
        "--sleep-preserve-parameter-names",
        why="wake_up after level-2 sleep reloads every parameter from the checkpoint, so one "
        "a trainer does not send keeps its checkpoint value",
        nargs="+",
    ),
    _i(
        "--fail-on-environ-validation",
        value=False,
        why="vLLM's environment variables are not validated",
    ),
    # ParallelConfig
    _i("--disable-custom-all-reduce", value=False, why="the CPU all-reduce is gloo's own"),
    _i("--ray-workers-use-nsight", value=False, why="there are no Ray workers"),
    _i("--data-parallel-address", "-dpa", why=_ONE_NODE),
    _i("--data-parallel-rpc-port", "-dpp", why=_ONE_NODE),
    _i("--disable-nccl-for-dp-synchronization", value=False, why=_ONE_NODE),
    _i("--enable-expert-parallel", value=False, why=_NO_EP),
    _i("--all2all-backend", why=_NO_EP),
    _i("--enable-eplb", value=False, why=_NO_EP),
    _i("--eplb-config", why=_NO_EP),
    _i("--expert-placement-strategy", why=_NO_EP),
    _i("--num-redundant-experts", why=_NO_EP),
    _i("--eplb-window-size", why=_NO_EP),
    _i("--eplb-step-interval", why=_NO_EP),
    _i("--eplb-log-balancedness", value=False, why=_NO_EP),
    _i("--enable-dbo", value=False, why="dual-batch overlap is for expert-parallel all2all"),
    _i("--dbo-decode-token-threshold", why="dual-batch overlap is for expert-parallel all2all"),
    _i("--dbo-prefill-token-threshold", why="dual-batch overlap is for expert-parallel all2all"),
    _i("--enable-multimodal-encoder-data-parallel", value=False, why=_NO_MM),
    _i("--cp-kv-cache-interleave-size", why=_NO_DCP),
    _i("--dcp-kv-cache-interleave-size", why=_NO_DCP),
    _i("--dcp-comm-backend", why=_NO_DCP),
    _i("--dcp-q-replicate", value=False, why=_NO_DCP),
    _i("--dp-sync-interval", why="data-parallel replicas never synchronise their steps"),
    _i("--enable-ep-weight-filter", value=False, why=_NO_EP),
    _i("--ubatch-size", why="dual-batch overlap is for expert-parallel all2all"),
    _i("--enable-hc-sp", value=False, why="no supported model has HyperConnections"),
    _i("--enable-batch-sharded-sampling", value=False, why="each replica samples its batch once"),
    _i("--enable-shm-tensor-arena", value=False, why=_NO_MM),
    _i("--fault-tolerance-config", why=_NO_FT),
    _i(
        "--numa-bind",
        value=False,
        why="there are no GPU worker subprocesses to pin (pin the server with numactl)",
    ),
    _i("--numa-bind-cpus", why="there are no GPU worker subprocesses to pin", nargs="+"),
    _i("--numa-bind-nodes", why="there are no GPU worker subprocesses to pin", nargs="+"),
    # CacheConfig
    _i("--swap-space", why="preempted requests are recomputed, never swapped"),
    _i("--kv-sharing-fast-prefill", value=False, why="no supported model shares KV layers"),
    _i("--mamba-block-size", why="no supported model has Mamba layers"),
    _i("--mamba-cache-mode", why=_NO_MAMBA),
    _i("--enable-mamba-shared-prefix-checkpoint", value=False, why=_NO_MAMBA),
    _i("--use-replayssm", value=False, why=_NO_MAMBA),
    _i("--replayssm-buffer-len", why=_NO_MAMBA),
    _i("--swa-bounded-replay", value=False, why="no supported model has bounded-replay windows"),
    _i(
        "--prefix-cache-retention-interval",
        why="the prefix cache keeps whole blocks of every layer, not periodic checkpoints",
    ),
    # MambaConfig / KernelConfig: kernels for layers or devices we do not have
    _i("--mamba-backend", why=_NO_MAMBA),
    _i("--mamba-cache-philox-rounds", why=_NO_MAMBA),
    _i("--mamba-ssu-algorithm", why=_NO_MAMBA),
    _i("--enable-mamba-cache-stochastic-rounding", value=False, why=_NO_MAMBA),
    _i("--gdn-prefill-backend", why=_NO_ARCH),
    _i("--kda-decode-backend", why=_NO_ARCH),
    _i("--kda-prefill-backend", why=_NO_ARCH),
    _i("--sparse-indexer-topk-backend", why=_NO_ARCH),
    _i("--engram-config", why="no supported model has Engram tables"),
    _i("--linear-backend", why=_KERNELS),
    _i("--moe-backend", why=_KERNELS),
    _i("--kernel-config", why=_KERNELS),
    _i("--ir-op-priority", why=_KERNELS),
    _i("--attention-config", "-ac", why=_KERNELS),
    _i("--enable-flashinfer-autotune", value=False, why="there are no FlashInfer kernels"),
    # OffloadConfig: its options without --offload-group-size / --cpu-offload-gb
    _i("--offload-backend", why=_NO_OFFLOAD),
    _i("--offload-num-in-group", why=_NO_OFFLOAD),
    _i("--offload-prefetch-step", why=_NO_OFFLOAD),
    _i("--offload-params", why=_NO_OFFLOAD, nargs="+"),
    _i("--cpu-offload-params", why=_NO_OFFLOAD, nargs="+"),
    # MultiModalConfig
    _i("--limit-mm-per-prompt", why=_NO_MM),
    _i("--enable-mm-embeds", value=False, why=_NO_MM),
    _i("--media-io-kwargs", why=_NO_MM),
    _i("--mm-processor-kwargs", why=_NO_MM),
    _i("--mm-processor-cache-gb", why=_NO_MM),
    _i("--disable-mm-preprocessor-cache", value=False, why=_NO_MM),
    _i("--mm-processor-cache-type", why=_NO_MM),
    _i("--mm-shm-cache-max-object-size-mb", why=_NO_MM),
    _i("--mm-encoder-tp-mode", why=_NO_MM),
    _i("--mm-encoder-attn-backend", why=_NO_MM),
    _i("--interleave-mm-strings", value=False, why=_NO_MM),
    _i("--skip-mm-profiling", value=False, why=_NO_MM),
    _i("--video-pruning-rate", why=_NO_MM),
    _i("--disable-chunked-mm-input", value=False, why=_NO_MM),
    _i("--language-model-only", value=False, why=_NO_MM),
    _i("--mm-device-do-normalize", value=False, why=_NO_MM),
    _i("--mm-encoder-attn-dtype", why=_NO_MM),
    _i("--mm-encoder-fp8-scale-path", why=_NO_MM),
    _i("--mm-encoder-fp8-scale-save-margin", why=_NO_MM),
    _i("--mm-encoder-fp8-scale-save-path", why=_NO_MM),
    _i("--mm-hasher-algorithm", why=_NO_MM),
    _i("--mm-ipc-gpu-memory-gb", why=_NO_MM),
    _i("--mm-processor-device", why=_NO_MM),
    _i("--mm-tensor-ipc", why=_NO_MM),
    _i("--video-pruning-method", why=_NO_MM),
    _i("--trust-request-mm-kwargs", value=False, why=_NO_MM),
    _i("--ec-manager-config", why=_NO_MM),
    # LoRAConfig: --enable-lora, --max-loras, ... are EngineConfig fields
    _i("--lora-extra-vocab-size", why="adapters with extra vocabulary are refused at load"),
    _i("--fully-sharded-loras", value=False, why=_NO_LORA_TP),
    _i("--default-mm-loras", why=_NO_MM),
    _i("--enable-tower-connector-lora", value=False, why=_NO_MM),
    _i("--specialize-active-lora", value=False, why=_NO_GRAPH_SIZES),
    # CompilationConfig / VllmConfig
    _i("--compilation-config", "-O", why="there is no torch.compile; see --enforce-eager"),
    _i("--cuda-graph-sizes", why=_NO_GRAPH_SIZES, nargs="+"),
    _i("--cudagraph-capture-sizes", why=_NO_GRAPH_SIZES, nargs="+"),
    _i("--max-cudagraph-capture-size", why=_NO_GRAPH_SIZES),
    _i("--max-seq-len-to-capture", why="CUDA graphs capture decode steps of any length"),
    _i("--additional-config", why="there are no platform plugins"),
    _i("--optimization-level", why="there is no torch.compile; see --enforce-eager"),
    _i("--performance-mode", why="the scheduler and the CUDA graphs have one mode"),
    # ObservabilityConfig / logging
    _i("--show-hidden-metrics-for-version", why="no metric is hidden"),
    _i("--aggregate-engine-logging", value=False, why="the stats line is always aggregated"),
    _i("--disable-uvicorn-access-log", value=False, why="there is no access log"),
    _i("--disable-access-log-for-endpoints", why="there is no access log"),
    _i(
        "--log-error-stack",
        value=False,
        why="server errors (500) are always logged with their stack; client errors are not",
    ),
    _i("--cudagraph-metrics", value=False, why="CUDA-graph dispatch is not measured"),
    _i("--enable-layerwise-nvtx-tracing", value=False, why="there are no NVTX ranges"),
    _i("--jit-monitor-mode", why="no kernel is compiled after warm-up to watch"),
    _i("--jit-monitor-verbose", value=False, why="no kernel is compiled after warm-up to watch"),
    _i(
        "--kv-cache-metrics-sample",
        why="KV cache residency metrics (--kv-cache-metrics) are refused",
    ),
    # Frontend
    _i(
        "--disable-frontend-multiprocessing",
        value=False,
        why="the server and the engine always share one process",
    ),
    _i(
        "--disable-async-output-proc",
        value=False,
        why="outputs are always processed by their own actor",
    ),
    _i("--use-v2-block-manager", value=False, why="there is one block manager"),
    _i("--disable-fastapi-docs", value=False, why="there is no docs UI (/openapi.json only)"),
    _i("--h11-max-header-count", why="hypercorn has no header-count limit"),
    # newer vLLM frontends
    _i("--enable-offline-docs", value=False, why="there is no docs UI (/openapi.json only)"),
    _i("--enable-log-deltas", value=False, why="outputs are logged once, when complete"),
    _i(
        "--enable-flash-late-interaction",
        value=False,
        why="late-interaction scores (MaxSim) are computed once per pair from each side's "
        "token embeddings: vLLM's worker-side query cache is a speed-up of the same scores",
    ),
    _i("--data-parallel-supervisor-port", why=_ONE_NODE),
    _i("--dp-supervisor-probe-interval-s", why=_ONE_NODE),
    _i("--dp-supervisor-probe-timeout-s", why=_ONE_NODE),
    _i("--dp-supervisor-probe-failure-threshold", why=_ONE_NODE),
    # older vLLM (0.6 - 0.10): flags since removed there
    _i("--scheduler-delay-factor", why="the scheduler never delays prompts"),
    _i("--tokenizer-pool-size", why="tokenization runs in the input-processor actor"),
    _i("--tokenizer-pool-type", why="tokenization runs in the input-processor actor"),
    _i("--tokenizer-pool-extra-config", why="tokenization runs in the input-processor actor"),
    _i("--multi-step-stream-outputs", value=False, why="there is no multi-step scheduling"),
    _i("--max-context-len-to-capture", why="CUDA graphs capture decode steps of any length"),
    _i("--intial-incremental-detokenization-offset", why="detokenization is exact"),
    _i("--override-neuron-config", why="there is no Neuron support"),
    _i("--max-prompt-adapters", why="prompt adapters are not supported"),
    _i("--max-prompt-adapter-token", why="prompt adapters are not supported"),
    _i("--num-speculative-tokens", why=_SPEC_SIZING),
    _i("--speculative-draft-tensor-parallel-size", why=_SPEC_SIZING),
    _i("--speculative-max-model-len", why=_SPEC_SIZING),
    _i("--speculative-disable-by-batch-size", why=_SPEC_SIZING),
    _i("--speculative-model-quantization", why=_SPEC_SIZING),
    _i("--speculative-disable-mqa-scorer", value=False, why=_SPEC_SIZING),
    _i("--ngram-prompt-lookup-max", why=_SPEC_SIZING),
    _i("--ngram-prompt-lookup-min", why=_SPEC_SIZING),
    _i("--spec-decoding-acceptance-method", why=_SPEC_SIZING),
    _i("--typical-acceptance-sampler-posterior-threshold", why=_SPEC_SIZING),
    _i("--typical-acceptance-sampler-posterior-alpha", why=_SPEC_SIZING),
    _i("--disable-logprobs-during-spec-decoding", why=_SPEC_SIZING),
    # -- features not built: the default value is fine, anything else is refused ------------
    _r("--speculative-model", why="give the draft through --speculative-config"),
    _r("--enable-prompt-adapter", value=False, why="prompt adapters are not supported"),
    _r("--prompt-adapters", why="prompt adapters are not supported"),
    _r("--worker-use-ray", value=False, why="there are no Ray workers"),
    _r("--engine-use-ray", value=False, why="the engine runs in the server's process"),
    _r("--tokenizer-mode", why="only Hugging Face tokenizers are supported", same=("auto", "hf")),
    _r("--skip-tokenizer-init", value=False, why="the server needs the tokenizer"),
    _r("--hf-config-path", why="config.json is read from the model's own directory"),
    # vLLM 0.32's quantization flags beyond --quantization (docs/quantization.md)
    _r(
        "--quantization-config",
        why="online quantization and per-layer quantization overrides are not built: the "
        "checkpoint's own quantization_config is read",
        same=_EMPTY,
    ),
    _i(
        "--allow-deprecated-quantization",
        value=False,
        why="the deprecated methods it allows (fbgemm_fp8, fp_quant) are refused by name "
        "either way",
    ),
    _r(
        "--kv-cache-dtype-skip-layers",
        why="every layer's KV cache is stored in --kv-cache-dtype",
        nargs="+",
    ),
    # older vLLM: a JSON of per-layer KV cache scales for an fp8 cache. Ignoring it would
    # run an fp8 cache with other scales than the file's, so it is refused.
    _r(
        "--quantization-param-path",
        why="an fp8 KV cache's scales come from the checkpoint's k_scale / v_scale tensors "
        "(else 1.0); a separate scales file is not read",
    ),
    _r("--config-format", why="only Hugging Face configs are read", same=("auto", "hf")),
    _r("--model-impl", why="only actorllm's own model code runs", same=("auto",)),
    _r(
        "--calculate-kv-scales",
        value=False,
        why="an fp8 KV cache's scales come from the checkpoint (else 1.0); computing them "
        "from the first batch is not built",
    ),
    _r("--mamba-cache-dtype", why="no supported model has Mamba layers", same=("auto",)),
    _r("--mamba-ssm-cache-dtype", why="no supported model has Mamba layers", same=("auto",)),
    _r("--override-attention-dtype", why="attention runs in the model's dtype"),
    _r("--model-loader-extra-config", why="there are no model loader options", same=_EMPTY),
    _r("--task", why="vLLM's old spelling: use --runner and --convert", same=("auto", "generate")),
    _r("--override-pooler-config", why="vLLM removed it: use --pooler-config", same=_EMPTY),
    _r("--io-processor-plugin", why="pooling IO-processor plugins are not supported"),
    _r("--enable-lora-bias", value=False, why="LoRA biases are not supported"),
    _r("--long-lora-scaling-factors", why="long-context LoRA scaling is not supported"),
    _r("--otlp-traces-endpoint", why=_NO_TRACES),
    _r("--collect-detailed-traces", why=_NO_TRACES),
    _r("--headless", value=False, why="multi-node data parallelism is not supported"),
    _r("--data-parallel-rank", "-dpn", why="external data-parallel load balancing is not built"),
    _r("--data-parallel-start-rank", "-dpr", why=_ONE_NODE, same=("0",)),
    _r("--data-parallel-hybrid-lb", value=False, why=_ONE_NODE),
    _r("--data-parallel-external-lb", value=False, why=_ONE_NODE),
    _r("--decode-context-parallel-size", "-dcp", why="one worker per replica", same=("1",)),
    _r("--worker-cls", why="actorllm's worker is fixed", same=("auto",)),
    _r("--scheduler-cls", why="actorllm's scheduler is fixed"),
    _r("--api-server-count", "-asc", why="one API server process only", same=("1",)),
    _r("--grpc", value=False, why="only the HTTP server is built"),
    _r("--rope-scaling", why="rope scaling overrides are not supported", same=_EMPTY),
    _r("--rope-theta", why="rope overrides are not supported"),
    _r("--num-scheduler-steps", why="multi-step scheduling is not supported", same=("1",)),
    _r("--max-num-partial-prefills", why="one partial prefill at a time", same=("1",)),
    _r("--max-long-partial-prefills", why="one partial prefill at a time", same=("1",)),
    _r("--preemption-mode", why="preemption always recomputes", same=("recompute",)),
    _r("--cpu-offload-gb", why="weights cannot be offloaded to CPU", same=("0",)),
    _r("--num-lookahead-slots", why="speculative_config sizes the lookahead", same=("0",)),
    _r(
        "--logits-processor-pattern",
        why="per-request logits processors are not supported (as in vLLM V1; use "
        "--logits-processors)",
    ),
    _r("--kv-events-config", why="KV cache events are not published", same=_EMPTY),
    _r(
        "--guided-decoding-disable-additional-properties",
        why="JSON schemas are enforced as written",
        same=("false", "False", "0", ""),
    ),
    _r(
        "--chat-template-content-format",
        why="message content is passed to the template as sent",
        same=("auto",),
    ),
    _r("--tool-server", why="built-in tool servers are not supported"),
    _r("--enable-ssl-refresh", value=False, why="certificates are read once at start-up"),
    _r("--enable-per-request-metrics", value=False, why="responses carry no per-request timing"),
    # vLLM 0.32's newer features, by their vLLM config
    # ModelConfig
    _r("--model-class-overrides", why=_NO_REMOTE, same=_EMPTY),
    _r(
        "--aux-output-config",
        why="only its enable_return_routed_experts is built: use --enable-return-routed-experts",
        same=_EMPTY,
    ),
    _r(
        "--enable-trace-replay",
        value=False,
        why="forced-decode traces (trace_decode_token_ids) are not supported",
    ),
    _r(
        "--use-fp64-gumbel",
        value=False,
        why="sampling draws one fp32 uniform per row (inverse CDF), not Gumbel noise",
    ),
    _r("--diffusion-config", "-dc", why="diffusion LLMs are not supported", same=_EMPTY),
    _r("--reasoning-parser-plugin", why="reasoning parser plugins are not loaded", same=("",)),
    # ParallelConfig: several nodes, elastic or fault-tolerant groups
    _r("--nnodes", "-n", why="one node only", same=("1",)),
    _r("--node-rank", "-r", why="one node only", same=("0",)),
    _r("--master-addr", why="one node only", same=("127.0.0.1", "localhost")),
    _r("--master-port", why="one node only", same=("29501",)),
    _r("--data-parallel-multi-port-external-lb", "-dpm", value=False, why=_ONE_NODE),
    _r("--enable-elastic-ep", value=False, why="elastic expert parallelism is not built"),
    _r("--elastic-ep-max-dp-size", why="elastic expert parallelism is not built"),
    _r("--enable-fault-tolerance", value=False, why="fault tolerance is not built"),
    _r("--prefill-context-parallel-size", "-pcp", why="one worker per replica", same=("1",)),
    _r(
        "--device-ids",
        why="the engine uses the first visible GPU: choose it with CUDA_VISIBLE_DEVICES",
    ),
    # CacheConfig / SchedulerConfig
    _r(
        "--prefix-match-unit",
        why="prefix-cache hits land on --block-size boundaries",
        same=("None",),
    ),
    _r(
        "--prefill-schedule-interval",
        why="every step admits prefills",
        same=("1",),
    ),
    # OffloadConfig
    _r("--offload-group-size", why="weights cannot be offloaded to CPU", same=("0",)),
    # MultiModalConfig / ECTransferConfig
    _r("--mm-encoder-only", value=False, why="there is no multimodal encoder to run alone"),
    _r("--ec-transfer-config", why="encoder cache transfer is not built", same=_EMPTY),
    # LoRAConfig
    _r(
        "--lora-target-modules",
        why="an adapter applies to every module it has weights for",
        nargs="+",
    ),
    _r("--max-lora-cls-labels", why="LoRA classification heads are not supported"),
    _r("--enable-moe-shared-loras", value=False, why="MoE expert adapters are not supported"),
    _r(
        "--enable-mixed-moe-lora-format",
        value=False,
        why="MoE expert adapters are not supported",
    ),
    # ObservabilityConfig
    _r("--kv-cache-metrics", value=False, why="KV cache residency metrics are not collected"),
    _r("--enable-mfu-metrics", value=False, why="model FLOPs utilization is not measured"),
    _r(
        "--enable-logging-iteration-details",
        value=False,
        why="there is no per-step log line (see the periodic stats line, --log-interval)",
    ),
    _r(
        "--per-request-spec-decode-metrics",
        why="responses carry no per-request metrics",
        same=("none",),
    ),
    # Frontend
    _r("--grpc-port", why="only the HTTP server is built"),
    _r(
        "--tool-strict-level",
        why="tool calls are not constrained by structural tags",
        same=("auto",),
    ),
    # vLLM 0.32's EngineArgs keywords with no serve flag of their own here (LLM(...),
    # EngineArgs(...)); serve has --log-level, --log-config-file, --renderer-num-workers,
    # --tokens-only
    _i("--enable-mm-processor-stats", value=False, why=_NO_MM),
    _i("--mamba-config", why=_NO_MAMBA),
    _i(
        "--renderer-num-workers",
        why="only the server renders off the event loop (serve --renderer-num-workers)",
    ),
    _i(
        "--tokens-only",
        value=False,
        why="tokens-in/tokens-out serving is the server's (serve --tokens-only); the engine "
        "always loads its tokenizer",
    ),
    _r(
        "--model-weights",
        why="models are read from a directory or the hub, not from object storage",
        same=("",),
    ),
    _r("--log-level", why=_LOGGING, same=("INFO", "info")),
    _r("--logging-config", why=_LOGGING, same=_EMPTY),
    _r("--log-config-file", why=_LOGGING),
]
