"""What every serving module shares: the context handed to handlers, usage accounting."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import msgspec
from starlette.responses import Response

from actorllm.core.outputs import RequestOutput
from actorllm.engine.metrics.prometheus import ServerMetrics
from actorllm.entrypoints.openai.engine_client import EngineClient
from actorllm.entrypoints.openai.errors import APIError
from actorllm.entrypoints.openai.protocol.sampling_fields import StreamOptions
from actorllm.entrypoints.openai.protocol.usage import PromptTokensDetails, UsageInfo
from actorllm.entrypoints.openai.tool_setup import NO_SETUP, ChatSetup

_encoder = msgspec.json.Encoder()
logger = logging.getLogger("actorllm.requests")


@dataclass(frozen=True, slots=True)
class ServingDefaults:
    """Server-wide request options from the command line (vLLM's frontend flags)."""

    # Sampling fields a request leaves out (--generation-config, --override-generation-config)
    sampling: dict[str, float] = field(default_factory=dict)
    return_tokens_as_token_ids: bool = False  # --return-tokens-as-token-ids
    force_include_usage: bool = False  # --enable-force-include-usage
    # --default-chat-template-kwargs: under each request's own chat_template_kwargs
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    exclude_tools_when_tool_choice_none: bool = False  # --exclude-tools-when-tool-choice-none
    trust_request_chat_template: bool = False  # --trust-request-chat-template
    log_outputs: bool = False  # --enable-log-outputs
    max_log_len: int | None = None  # --max-log-len
    sse_keep_alive_s: float = 0.0  # --sse-keep-alive-interval (0: none)
    prompt_tokens_details: bool = False  # --enable-prompt-tokens-details
    # Of chat and text completions: non-streamed answers, a stream's last chunk (--fingerprint-*)
    system_fingerprint: str | None = None

    def log_outputs_of(self, request_id: str, choices: Mapping[int, Any]) -> None:
        """One log line per finished choice (``--enable-log-outputs``): its text, cut at
        ``--max-log-len``, and its finish reason."""
        if not self.log_outputs:
            return
        for index, choice in sorted(choices.items()):
            text = choice.text if self.max_log_len is None else choice.text[: self.max_log_len]
            logger.info(
                "request %s: output %d: %r, finish_reason %s",
                request_id,
                index,
                text,
                choice.finish_reason,
            )

    def request_chat_template(self, given: str | None) -> str | None:
        """A request's own chat template, if the server trusts those (else a 400)."""
        if given is not None and not self.trust_request_chat_template:
            raise APIError(
                400,
                "A chat template was passed with the request, but the server was not started "
                "with --trust-request-chat-template.",
                "chat_template",
            )
        return given

    def template_kwargs(self, given: dict[str, Any] | None) -> dict[str, Any] | None:
        """The request's ``chat_template_kwargs`` over the server's defaults."""
        if not self.chat_template_kwargs:
            return given
        return {**self.chat_template_kwargs, **(given or {})}


@dataclass(frozen=True, slots=True)
class ServingContext:
    """The engine and the metrics a request handler works with."""

    engine: EngineClient
    metrics: ServerMetrics
    response_role: str = "assistant"  # the role of chat completions' messages
    # Tool calling and reasoning options (--tool-call-parser, --reasoning-parser, ...).
    chat: ChatSetup = NO_SETUP
    defaults: ServingDefaults = ServingDefaults()
    # Long prompts are tokenized (chat templates rendered) on one thread at a time
    # (input_work.py); made with the context, inside the server's event loop.
    input_limiter: anyio.CapacityLimiter = field(default_factory=lambda: anyio.CapacityLimiter(1))

    def is_dead(self) -> bool:
        return bool(self.engine.is_dead)


def usage_options(options: StreamOptions | None, *, force: bool = False) -> tuple[bool, bool]:
    """(usage chunk at the end, usage on every chunk) for a stream's ``stream_options``;
    ``force`` (``--enable-force-include-usage``): both, whatever the request says (vLLM's
    ``should_include_usage``)."""
    if force:
        return True, True
    if options is None or not options.include_usage:
        return False, False
    return True, options.continuous_usage_stats


def json_response(payload: Any, status: int = 200) -> Response:
    return Response(_encoder.encode(payload), status_code=status, media_type="application/json")


@dataclass(slots=True)
class UsageTracker:
    """Token counts of one HTTP request, over all its prompts and samples."""

    # {prompt index: prompt tokens}, {prompt index: prompt tokens served from cache},
    # {prompt index: prompt tokens written to the cache}
    prompt: dict[int, int] = field(default_factory=dict)
    cached: dict[int, int] = field(default_factory=dict)
    created: dict[int, int] = field(default_factory=dict)
    # {(prompt index, sample index): generated tokens}
    completion: dict[tuple[int, int], int] = field(default_factory=dict)
    # prompt_tokens_details in info() (vLLM's --enable-prompt-tokens-details)
    details: bool = False

    def update(self, prompt_index: int, out: RequestOutput, *, delta: bool) -> None:
        if out.prompt_token_ids:
            self.prompt[prompt_index] = len(out.prompt_token_ids)
        self.cached[prompt_index] = max(self.cached.get(prompt_index, 0), out.num_cached_tokens)
        created = out.num_cache_creation_tokens
        self.created[prompt_index] = max(self.created.get(prompt_index, 0), created)
        for co in out.outputs:
            key = (prompt_index, co.index)
            if delta:
                self.completion[key] = self.completion.get(key, 0) + len(co.token_ids)
            else:
                self.completion[key] = len(co.token_ids)

    def info(self) -> UsageInfo:
        prompt = sum(self.prompt.values())
        completion = sum(self.completion.values())
        return UsageInfo(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=(
                PromptTokensDetails(
                    cached_tokens=self.cached_tokens, created_cache_tokens=self.created_tokens
                )
                if self.details
                else None
            ),
        )

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache, over all prompts."""
        return sum(self.cached.values())

    @property
    def created_tokens(self) -> int:
        """Prompt tokens written to the prefix cache, over all prompts."""
        return sum(self.created.values())
