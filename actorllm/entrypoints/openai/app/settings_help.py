"""``actorllm serve --help`` text of the HTTP side's settings (``AppSettings``): what each
flag does, its unit and default."""

from __future__ import annotations

from collections.abc import Mapping

APP_SETTINGS_HELP: Mapping[str, Mapping[str, str]] = {
    "Frontend": {
        "api_key": (
            "Require ``Authorization: Bearer KEY`` on /v1/*, /v2/*, /inference/*, /cohere/* "
            "and /invocations, under --root-path too (default: $ACTORLLM_API_KEY or "
            "$VLLM_API_KEY); several keys (``--api-key a b``): any one of them is accepted."
        ),
        "max_body_bytes": (
            "Requests with a larger body are refused with 413 (the scale-out derender "
            "routes: 16 times it)."
        ),
        "dev_mode": (
            "Expose /sleep, /wake_up, /pause, /resume, /server_info, /reset_prefix_cache, "
            "/kv_connector/*, /collective_rpc without authentication (unsafe; also on with "
            "ACTORLLM_SERVER_DEV_MODE=1 or vLLM's VLLM_SERVER_DEV_MODE=1)."
        ),
        "log_interval_s": (
            "Seconds between stats log lines; 0: none (same as --disable-log-stats)."
        ),
        "root_path": (
            "The path prefix a reverse proxy serves the API under (e.g. /llm): requests "
            "come with or without it."
        ),
        "allowed_origins": (
            "CORS: origins allowed to call the API from a browser, e.g. "
            "'[\"https://a.example\"]' or '*'. Default: none (no cross-origin access)."
        ),
        "allowed_methods": (
            "CORS: HTTP methods allowed cross-origin (when allowed_origins is set)."
        ),
        "allowed_headers": (
            "CORS: request headers allowed cross-origin (when allowed_origins is set)."
        ),
        "allow_credentials": ("CORS: allow cookies and Authorization on cross-origin requests."),
        "response_role": "The role of the messages chat completions return.",
        "return_tokens_as_token_ids": (
            "Logprob tokens as 'token_id:N' for every request (as if each set the request "
            "field return_tokens_as_token_ids)."
        ),
        "enable_force_include_usage": (
            "Every chunk of every stream carries usage, and a usage chunk ends it, whatever "
            "the request's stream_options say (vLLM's)."
        ),
        "default_chat_template_kwargs": (
            'Chat template variables for every chat request, e.g. \'{"enable_thinking": '
            "false}'; a request's own chat_template_kwargs win."
        ),
        "exclude_tools_when_tool_choice_none": (
            'With tool_choice "none", leave the request\'s tools out of the prompt (by '
            "default the chat template still shows them to the model)."
        ),
        "enable_tokenizer_info_endpoint": (
            "Serve GET /tokenizer_info: the tokenizer's class, settings and chat template "
            "(it shows the template to anyone who can reach the server)."
        ),
        "enable_scale_out": (
            "Serve vLLM's scale-out API: /v1/chat/completions/render, /v1/completions/render "
            "(the token ids and sampling params a request would run), /inference/v1/generate "
            "(token ids in, token ids out), /inference/v1/abort_requests and the derender "
            "routes; without it they answer 403."
        ),
        "tokens_only": (
            "vLLM's tokens-in/tokens-out server: the scale-out routes (as --enable-scale-out) "
            "and POST /abort_requests; /inference/v1/generate never detokenizes (stop strings "
            "and output_mode text are refused: check them where the text is)."
        ),
        "trust_request_chat_template": (
            "Accept a request's own chat_template (chat completions, /tokenize); without it "
            "such a request is refused (400). A template runs with the server's rights: "
            "trust the clients."
        ),
        "enable_request_id_headers": (
            "Send X-Request-Id on every response: the caller's own when it sent one, else "
            "the id the server gave the request (off by default, as in vLLM)."
        ),
        "enable_log_requests": (
            "Log each request as it arrives (id, method, path, body up to max_log_len) and "
            "as it ends (status); --disable-log-requests turns it off."
        ),
        "max_log_len": (
            "Log at most this many characters of a request body, or of an output (default: all)."
        ),
        "enable_log_outputs": (
            "Also log each completion's output text and finish reason when it is done "
            "(needs enable_log_requests)."
        ),
        "lora_modules": (
            "LoRA adapters to serve from the start (needs --enable-lora): name=path, or JSON "
            '\'{"name": ..., "path": ..., "base_model_name": ...}\'; several values allowed. '
            "Requests name an adapter in 'model'; /v1/models lists them. Loading and "
            "unloading at run time (POST /v1/load_lora_adapter, /v1/unload_lora_adapter) needs "
            "ACTORLLM_ALLOW_RUNTIME_LORA_UPDATING=true (or VLLM_ALLOW_RUNTIME_LORA_UPDATING)."
        ),
        "middleware": (
            "Extra ASGI middleware, outermost, by import path (repeat the flag for "
            "several): a class is built as cls(app); an async function f(request, "
            "call_next) wraps each HTTP request."
        ),
        "metrics_prefix": (
            "Prometheus metric name prefix; vllm makes an existing vLLM Grafana dashboard "
            "work unchanged."
        ),
        "sse_keep_alive_interval": (
            "Seconds: a /v1/chat/completions or /v1/completions stream idle this long "
            "(queued, in prefill, between tokens) sends an SSE comment ': keep-alive', so a "
            "proxy's read timeout does not close it; 0: never (vLLM's)."
        ),
        "anthropic_disabled_thinking_effort": (
            "/v1/messages only: the reasoning_effort a request with thinking type disabled "
            "renders with: none turns thinking off where the template can; low suits models "
            "that always think or reject none; auto (vLLM's default) uses low when the "
            "template rejects none or renders it as a thinking effort, else none."
        ),
        "cohere_is_reasoning_model": (
            "/cohere/v2/chat only: the model is a reasoning Command model, so reasoning is a "
            "thinking block (streamed as content events); --no-cohere-is-reasoning-model: an "
            "older Command model, whose reasoning on a turn that calls tools is its tool_plan "
            "(streamed as tool-plan-delta events)."
        ),
        "cohere_format": (
            "The chat template variable cohere_format of every chat request that does not set "
            "it (vLLM's; Cohere's prompt renderer reads it: cmd4 for Command A+, cmd3 for "
            "earlier Command A models; empty: not set)."
        ),
        "renderer_num_workers": (
            "Threads that render chat templates and tokenize long prompts off the event "
            "loop, at once (vLLM's renderer pool size)."
        ),
        "enable_server_load_tracking": (
            "Count the requests in flight on /v1/completions, /v1/chat/completions and "
            "/invocations (a stream counts until it ends); GET /load answers "
            '{"server_load": N} (without this flag always 0, as vLLM).'
        ),
        "enable_prompt_tokens_details": (
            "usage.prompt_tokens_details on completions and chat (cached_tokens, "
            "created_cache_tokens) and the Messages API's cache_read_input_tokens / "
            "cache_creation_input_tokens (vLLM's; the Responses API always reports them)."
        ),
        "fingerprint_mode": (
            "The system_fingerprint of chat and text completions (vLLM's): full is "
            "actorllm-VERSION[-tpN][-ppN][-dpN]-HASH8 (HASH8: of the engine's "
            "configuration), hash leaves the parallelism out, custom is "
            "--fingerprint-value, none is null."
        ),
        "fingerprint_value": "The system_fingerprint with --fingerprint-mode custom.",
        "enable_auto_tool_choice": (
            "Let the model decide to call tools (tool_choice auto, the default when tools are "
            "given); needs --tool-call-parser."
        ),
        "tool_call_parser": (
            "How to read tool calls out of the model's text: hermes, llama3_json, mistral, "
            "qwen3_coder (qwen3_xml), pythonic, or a name a --tool-parser-plugin registers."
        ),
        "tool_parser_plugin": (
            "A Python file that registers extra tool call parsers (register_tool_parser)."
        ),
    },
}
