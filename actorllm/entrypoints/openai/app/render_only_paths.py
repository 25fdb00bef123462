"""The paths ``actorllm launch render`` serves (vLLM's GPU-less render server): the render
and derender routes, the tokenizer's and the operations routes; nothing that needs a
running engine (``scale_out/render_only.py`` is the engine side)."""

from __future__ import annotations

RENDER_ONLY_PATHS = frozenset({
    "/v1/chat/completions/render", "/v1/completions/render", "/v1/messages/render",
    "/v1/responses/render", "/v1/chat/completions/derender", "/v1/completions/derender",
    "/cohere/v2/chat/render", "/v1/models", "/tokenize", "/detokenize", "/tokenizer_info",
    "/health", "/ping", "/metrics", "/version", "/load", "/openapi.json",
})  # fmt: skip
