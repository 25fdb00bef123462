"""The route tables the document describes: each route's method, request and response
structs, summary and tag, and the words for the rules between fields that JSON Schema
cannot state (written into the operations' descriptions)."""

from __future__ import annotations

from actorllm.entrypoints.generative_scoring import protocol as gs
from actorllm.entrypoints.openai import protocol as p
from actorllm.entrypoints.openai.beam_request import RULES as BEAM_RULES
from actorllm.entrypoints.openai.lora_models import (
    LoadLoRAAdapterRequest,
    RegisterAdapterRequest,
    UnloadLoRAAdapterRequest,
)
from actorllm.entrypoints.openai.protocol import cohere_embed as ce
from actorllm.entrypoints.openai.protocol import pooling as pp
from actorllm.entrypoints.openai.serving_chat_batch import BatchChatCompletionRequest

GENERATION_RULES = (
    " Rules between fields: the prompt's tokens plus `max_tokens` must fit the context "
    "length (this model's `max_model_len`, see /v1/models); `min_tokens` must not exceed "
    "`max_tokens`. Fields this server cannot honour yet accept only their 'off' values "
    "(each says so); unknown fields are ignored (and logged). At most one structured-output "
    "constraint (`response_format`, `structured_outputs`, `guided_*`), and it must compile: "
    "a regex or grammar that parses, a JSON schema the grammar backend accepts, "
    "`guided_decoding_backend` / `guided_whitespace_pattern` only beside one; `tools` with "
    '`tool_choice` "auto" (the default) need the server started with '
    "`--enable-auto-tool-choice`; a named `tool_choice` must name one of `tools`." + BEAM_RULES
)

# (method, path, request struct or None, response struct or None, summary, tag)
ENDPOINTS: list[tuple[str, str, type | None, type | None, str, str]] = [
    (
        "post",
        "/v1/completions",
        p.CompletionRequest,
        p.CompletionResponse,
        "Create a completion (SSE when stream=true).",
        "openai",
    ),
    (
        "post",
        "/v1/chat/completions",
        p.ChatCompletionRequest,
        p.ChatCompletionResponse,
        "Create a chat completion (SSE of ChatCompletionChunk when stream=true).",
        "openai",
    ),
    (
        "post",
        "/v1/chat/completions/batch",
        BatchChatCompletionRequest,
        p.ChatCompletionResponse,
        "Chat completions of several conversations (vLLM's): choice i answers "
        "conversation i; no streaming, tools or n > 1.",
        "openai",
    ),
    (
        "post",
        "/generative_scoring",
        gs.GenerativeScoringRequest,
        gs.GenerativeScoringResponse,
        "The probability of label tokens next after each query+item prompt (vLLM's).",
        "vllm",
    ),
    ("get", "/v1/models", None, p.ModelList, "List the served model.", "openai"),
    (
        "post",
        "/tokenize",
        p.TokenizeRequest,
        p.TokenizeResponse,
        "Tokenize a prompt or chat messages.",
        "tokenizer",
    ),
    (
        "post",
        "/detokenize",
        p.DetokenizeRequest,
        p.DetokenizeResponse,
        "Decode token ids.",
        "tokenizer",
    ),
    ("get", "/health", None, None, "200 while the engine is alive, 503 once it is dead.", "ops"),
    ("get", "/ping", None, None, "Liveness probe (SageMaker's name): as /health.", "ops"),
    ("post", "/ping", None, None, "Liveness probe (SageMaker's name): as /health.", "ops"),
    ("get", "/metrics", None, None, "Prometheus metrics (text exposition format).", "ops"),
    ("get", "/version", None, p.VersionResponse, "Server version.", "ops"),
    (
        "get",
        "/load",
        None,
        p.LoadResponse,
        "Generation requests in flight (0 without --enable-server-load-tracking).",
        "ops",
    ),
]
# Generation routes: a pooling model answers 404 (the document leaves them out for it).
GENERATION_PATHS = frozenset(
    {"/v1/completions", "/v1/chat/completions", "/invocations", "/generative_scoring"}
)
POOLING_RULES = (
    " Exactly one of `input` and `messages`. Every prompt must fit the context length "
    "(this model's `max_model_len`, see /v1/models) unless `truncate_prompt_tokens` cuts it."
)
SCORE_RULES = (
    " The two sides pair up 1:1, 1:N (one query against every document) or N:N; every pair "
    "must fit the context length. `max_tokens_per_query` and `max_tokens_per_doc` must be "
    "below it."
)
# (path, request, response, summary, what the model must offer): served for a pooling model
POOLING_ENDPOINTS: list[tuple[str, type, type, str, str]] = [
    ("/v1/embeddings", pp.EmbeddingRequest, pp.EmbeddingResponse, "Create embeddings.", "embed"),
    ("/v2/embed", ce.CohereEmbedRequest, ce.CohereEmbedResponse, "Cohere's embed.", "embed"),
    ("/pooling", pp.PoolingRequest, pp.PoolingResponse, "Pooled outputs (any task).", "any"),
    ("/classify", pp.ClassificationRequest, pp.ClassificationResponse, "Classify.", "classify"),
    ("/score", pp.ScoreRequest, pp.ScoreResponse, "Score text pairs.", "score"),
    ("/v1/score", pp.ScoreRequest, pp.ScoreResponse, "Score text pairs.", "score"),
    ("/rerank", pp.RerankRequest, pp.RerankResponse, "Rerank documents.", "score"),
    ("/v1/rerank", pp.RerankRequest, pp.RerankResponse, "Rerank documents.", "score"),
    ("/v2/rerank", pp.RerankRequest, pp.RerankResponse, "Rerank documents.", "score"),
]
# (method, path, summary): the dev routes, served only in dev mode
DEV_ENDPOINTS: list[tuple[str, str, str]] = [
    ("post", "/sleep", "Put the engine to sleep (query: level=0|1|2, mode=abort|wait|keep)."),
    (
        "post",
        "/release_kv_cache_memory",
        "Free the KV cache after a completed level-0 sleep (wake_up?tags=kv_cache restores it).",
    ),
    (
        "post",
        "/wake_up",
        "Wake the engine up (query: tags=weights|kv_cache|scheduling, repeatable).",
    ),
    ("get", "/is_sleeping", "Whether the engine sleeps."),
    ("post", "/pause", "Pause generation (query: mode=abort|wait|keep, clear_cache)."),
    ("post", "/resume", "Resume generation after a pause."),
    ("get", "/is_paused", "Whether generation is paused."),
    ("get", "/server_info", "The engine's configuration and versions (query: config_format)."),
    ("post", "/reset_prefix_cache", 'Drop every cached prefix block ({"success": bool}).'),
    ("post", "/reset_mm_cache", "vLLM's multimodal cache reset: none exists here (200)."),
    ("post", "/reset_encoder_cache", "vLLM's encoder cache reset: none exists here (200)."),
    ("post", "/kv_connector/toggle", "Switch the KV connector (query: enabled=true|false)."),
    ("get", "/kv_connector/enabled", "Whether the KV connector is switched on."),
    ("post", "/collective_rpc", "Call a worker method on every rank; one result per rank."),
    ("post", "/start_profile", "Start the torch profiler on every rank."),
    ("post", "/stop_profile", "Stop the profiler and write its traces."),
    ("post", "/init_weight_transfer_engine", "Join a trainer's weight-transfer group."),
    ("post", "/shutdown_weight_transfer_engine", "Leave the weight-transfer group."),
    ("post", "/start_weight_update", "Open a weight update."),
    ("post", "/update_weights", "Receive and stage tensors broadcast by the trainer."),
    ("post", "/finish_weight_update", "Apply the staged weights at a step boundary."),
    ("post", "/update_weight_version", "Label later tokens with a new weight version."),
    ("get", "/weight_info", "The current weight version."),
    ("get", "/get_world_size", "The engine's worker ranks (query: include_dp)."),
    ("post", "/weight_checker", "Weight digests: checksum, reset or compare to a baseline."),
    ("post", "/abort_requests", "Abort these requests (request_ids; none: every open one)."),
    ("post", "/start_draft_weight_update", "Refused: draft-model weight updates are not built."),
]
# (path, request struct, summary): served only with ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING
LORA_ENDPOINTS = (
    (
        "/v1/load_lora_adapter",
        LoadLoRAAdapterRequest,
        "Load a LoRA adapter from a local directory (PEFT's format) under `lora_name`; "
        "500 naming the adapter and the reason for a bad one (vLLM's status), 400 for a name "
        "already loaded unless `load_inplace`.",
    ),
    (
        "/v1/unload_lora_adapter",
        UnloadLoRAAdapterRequest,
        "Unload the LoRA adapter `lora_name`; 404 for one not loaded.",
    ),
    (
        "/adapters",
        RegisterAdapterRequest,
        "SageMaker's spelling of /v1/load_lora_adapter: adapter `name` from `src`; "
        "`Adapter NAME registered`, its errors.",
    ),
)
# SageMaker's unload: DELETE, the adapter's name in the path (no body)
SAGEMAKER_UNLOAD_PATH = "/adapters/{adapter_name}"
