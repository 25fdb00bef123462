"""The HTTP side's settings (the engine's are in ``EngineConfig``), tool calling included:
the engine never parses tool calls, the server does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import msgspec

from actorllm.entrypoints.openai.app.settings_help import APP_SETTINGS_HELP

# --anthropic-disabled-thinking-effort's values (vLLM's)
DISABLED_THINKING_EFFORTS = ("auto", "none", "low", "medium", "high", "xhigh", "max")


class AppSettings(msgspec.Struct, kw_only=True):
    """HTTP-side settings (the engine's are in ``EngineConfig``). ``actorllm serve`` has a
    flag for each field; its ``--help`` text is :data:`CLI_HELP` (``settings_help.py``)."""

    CLI_APPEND: ClassVar[frozenset[str]] = frozenset({"middleware"})  # one value per flag
    # Set by the command, not a flag: ``actorllm launch render`` is its own command.
    CLI_EXCLUDE: ClassVar[frozenset[str]] = frozenset({"render_only"})
    CLI_HELP: ClassVar[Mapping[str, Mapping[str, str]]] = APP_SETTINGS_HELP

    # -- Frontend ---------------------------------------------------------------------------
    api_key: str | list[str] | None = None
    """Require ``Authorization: Bearer KEY`` on /v1/*, /v2/*, /inference/*, /cohere/* and
    /invocations, under --root-path too (default: $ACTORLLM_API_KEY or $VLLM_API_KEY);
    several keys (``--api-key a b``): any one of them is accepted."""
    max_body_bytes: int = 16 * 2**20
    """Requests with a larger body are refused with 413 (the scale-out derender routes: 16
    times it)."""
    dev_mode: bool = False
    """Expose /sleep, /wake_up, /pause, /resume, /server_info, /reset_prefix_cache,
    /kv_connector/*, /collective_rpc without authentication (unsafe; also on with
    ACTORLLM_SERVER_DEV_MODE=1 or vLLM's VLLM_SERVER_DEV_MODE=1)."""
    log_interval_s: float = 10.0
    """Seconds between stats log lines; 0: none (same as --disable-log-stats)."""
    root_path: str | None = None
    """The path prefix a reverse proxy serves the API under (e.g. /llm): requests come with
    or without it."""
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    """CORS: origins allowed to call the API from a browser, e.g. '["https://a.example"]'
    or '*'. Default: none (no cross-origin access)."""
    allowed_methods: list[str] = msgspec.field(default_factory=lambda: ["*"])
    """CORS: HTTP methods allowed cross-origin (when allowed_origins is set)."""
    allowed_headers: list[str] = msgspec.field(default_factory=lambda: ["*"])
    """CORS: request headers allowed cross-origin (when allowed_origins is set)."""
    allow_credentials: bool = False
    """CORS: allow cookies and Authorization on cross-origin requests."""
    response_role: str = "assistant"
    """The role of the messages chat completions return."""
    return_tokens_as_token_ids: bool = False
    """Logprob tokens as 'token_id:N' for every request (as if each set the request field
    return_tokens_as_token_ids)."""
    enable_force_include_usage: bool = False
    """Every chunk of every stream carries usage, and a usage chunk ends it, whatever the
    request's stream_options say (vLLM's)."""
    default_chat_template_kwargs: dict[str, Any] | None = None
    """Chat template variables for every chat request, e.g. '{"enable_thinking": false}'; a
    request's own chat_template_kwargs win."""
    exclude_tools_when_tool_choice_none: bool = False
    """With tool_choice "none", leave the request's tools out of the prompt (by default
    the chat template still shows them to the model)."""
    enable_tokenizer_info_endpoint: bool = False
    """Serve GET /tokenizer_info: the tokenizer's class, settings and chat template (it
    shows the template to anyone who can reach the server)."""
    enable_scale_out: bool = False
    """Serve vLLM's scale-out API: /v1/chat/completions/render, /v1/completions/render
    (the token ids and sampling params a request would run), /inference/v1/generate
    (token ids in, token ids out), /inference/v1/abort_requests and the derender routes;
    without it they answer 403."""
    render_only: bool = False
    """vLLM's GPU-less render server (``actorllm launch render``): only the render,
    derender, tokenizer and operations routes, and no engine behind them."""
    tokens_only: bool = False
    """vLLM's tokens-in/tokens-out server: the scale-out routes (as --enable-scale-out) and
    POST /abort_requests; /inference/v1/generate never detokenizes (stop strings and
    output_mode text are refused: check them where the text is)."""
    trust_request_chat_template: bool = False
    """Accept a request's own chat_template (chat completions, /tokenize); without it such
    a request is refused (400). A template runs with the server's rights: trust the
    clients."""
    enable_request_id_headers: bool = False
    """Send X-Request-Id on every response: the caller's own when it sent one, else the
    id the server gave the request (vLLM's default is off, so is ours)."""
    enable_log_requests: bool = False
    """Log each request as it arrives (id, method, path, body up to max_log_len) and as it
    ends (status); --disable-log-requests turns it off."""
    max_log_len: int | None = None
    """Log at most this many characters of a request body, or of an output (default: all)."""
    enable_log_outputs: bool = False
    """Also log each completion's output text and finish reason when it is done (needs
    enable_log_requests)."""
    lora_modules: str | list[str] | None = None
    """LoRA adapters to serve from the start (needs --enable-lora): name=path, or JSON
    '{"name": ..., "path": ..., "base_model_name": ...}'; requests name them in 'model'."""
    middleware: list[str] = msgspec.field(default_factory=list)
    """Extra ASGI middleware, outermost, by import path (repeat the flag for several): a
    class is built as cls(app); an async function f(request, call_next) wraps each HTTP
    request."""
    metrics_prefix: str = "actorllm:"
    """Prometheus metric name prefix; vllm makes an existing vLLM Grafana dashboard work
    unchanged."""
    sse_keep_alive_interval: float = 0.0
    """Seconds: a /v1/chat/completions or /v1/completions stream idle this long (queued,
    in prefill, between tokens) sends an SSE comment ': keep-alive', so a proxy's read
    timeout does not close it; 0: never (vLLM's)."""
    anthropic_disabled_thinking_effort: str = "auto"
    """/v1/messages only: the reasoning_effort a request with thinking type disabled
    renders with: none turns thinking off where the template can; low suits models that
    always think or reject none; auto (vLLM's default) uses low when the template rejects
    none or renders it as a thinking effort, else none."""
    cohere_is_reasoning_model: bool = True
    """/cohere/v2/chat only: the model is a reasoning Command model, so reasoning is a
    thinking block (streamed as content events); --no-cohere-is-reasoning-model: an older
    Command model, whose reasoning on a turn that calls tools is its tool_plan (streamed as
    tool-plan-delta events)."""
    cohere_format: str = "cmd4"
    """The chat template variable cohere_format of every chat request that does not set
    it (vLLM's; Cohere's prompt renderer reads it: cmd4 for Command A+, cmd3 for earlier
    Command A models; empty: not set)."""
    renderer_num_workers: int = 1
    """Threads that render chat templates and tokenize long prompts off the event loop, at
    once (vLLM's renderer pool size)."""
    enable_server_load_tracking: bool = False
    """Count the requests in flight on /v1/completions, /v1/chat/completions and
    /invocations (a stream counts until it ends); GET /load answers {"server_load": N}
    (without this flag always 0, as vLLM)."""
    enable_prompt_tokens_details: bool = False
    """usage.prompt_tokens_details on completions and chat (cached_tokens,
    created_cache_tokens) and the Messages API's cache_read_input_tokens /
    cache_creation_input_tokens (vLLM's; the Responses API always reports them)."""
    fingerprint_mode: Literal["full", "hash", "custom", "none"] = "full"
    """The system_fingerprint of chat and text completions (vLLM's): full is
    actorllm-VERSION[-tpN][-ppN][-dpN]-HASH8 (HASH8: of the engine's configuration), hash
    leaves the parallelism out, custom is --fingerprint-value, none is null."""
    fingerprint_value: str | None = None
    """The system_fingerprint with --fingerprint-mode custom."""

    enable_auto_tool_choice: bool = False
    """Let the model decide to call tools (tool_choice auto, the default when tools are
    given); needs tool_call_parser."""
    tool_call_parser: str | None = None
    """How to read tool calls out of the model's text: hermes, llama3_json, mistral,
    qwen3_coder (qwen3_xml), pythonic, or a name a tool_parser_plugin registers."""
    tool_parser_plugin: str | None = None
    """A Python file that registers extra tool call parsers (register_tool_parser)."""

    def __post_init__(self) -> None:
        if self.sse_keep_alive_interval < 0:
            raise ValueError("--sse-keep-alive-interval must be non-negative (0: off).")
        if self.anthropic_disabled_thinking_effort not in DISABLED_THINKING_EFFORTS:
            raise ValueError(
                "--anthropic-disabled-thinking-effort must be one of "
                f"{', '.join(DISABLED_THINKING_EFFORTS)}."
            )
        if self.fingerprint_value is not None and self.fingerprint_mode != "custom":
            raise ValueError(
                "--fingerprint-value is the fingerprint of --fingerprint-mode custom; the "
                f"mode is {self.fingerprint_mode!r}."
            )
        if self.renderer_num_workers < 1:
            raise ValueError("--renderer-num-workers must be at least 1.")
        if self.enable_log_outputs and not self.enable_log_requests:
            raise ValueError("--enable-log-outputs needs --enable-log-requests.")
        if self.enable_auto_tool_choice and not self.tool_call_parser:
            raise ValueError(
                "--enable-auto-tool-choice needs --tool-call-parser (which format to parse)."
            )
