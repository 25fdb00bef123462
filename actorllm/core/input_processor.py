"""Turning what a caller sent into what the scheduler runs: tokenize, template, validate.

Plain synchronous code over a Hugging Face tokenizer; the input_processor actor wraps it.
Every error a caller can cause is an :class:`InvalidRequestError` (HTTP 400) naming the field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from actorllm.core.chat_template import render_chat_options
from actorllm.core.errors import EmptyPromptError, InvalidRequestError, RequestTooLongError
from actorllm.core.output_parent import fan_out
from actorllm.core.pooling_truncation import check_pooling_truncation
from actorllm.core.prompt_embeds import PromptEmbeds
from actorllm.core.sampling_params import SamplingParams, SamplingParamsError
from actorllm.core.thinking_budget import ThinkingMarkers
from actorllm.core.watermark_config import WatermarkConfig
from actorllm.core.watermarking import resolve_watermarking

# What generate() accepts: text, or pre-tokenized input.
PromptType = str | Mapping[str, Any]


@dataclass(frozen=True)
class ChildRequest:
    """One sample of a request, as the scheduler will see it."""

    child_id: str
    index: int
    params: SamplingParams


@dataclass(frozen=True)
class ProcessedRequest:
    prompt_text: str | None
    prompt_token_ids: list[int]
    eos_token_id: int | None
    children: list[ChildRequest]
    # Mixed into the first block's prefix-cache hash: only requests with the same salt
    # share cached blocks (vLLM's cache_salt, given in the prompt mapping).
    cache_salt: str | None = None
    # The prompt as embeddings (prompt_token_ids then holds placeholders of its length).
    prompt_embeds: PromptEmbeds | None = None


class InputProcessor:
    """Tokenizes and validates requests against one model."""

    def __init__(
        self,
        tokenizer: Any,
        *,
        vocab_size: int,
        max_model_len: int,
        eos_token_ids: Sequence[int] = (),
        max_logprobs: int = 20,
        param_checks: Sequence[Callable[[SamplingParams], None]] = (),
        thinking_markers: ThinkingMarkers | None = None,
        watermark: WatermarkConfig | None = None,
        return_sampling_mask: bool = False,
    ) -> None:
        self.tokenizer = tokenizer
        # --return-sampling-mask: every request must sample with top-k on (vLLM's rule).
        self.return_sampling_mask = return_sampling_mask
        # The engine's --watermark-config: each request's watermarking resolved against it.
        self.watermark = watermark
        # The reasoning markers thinking_token_budget counts and forces (None: no reasoning
        # config, and a budget is refused).
        self.thinking_markers = thinking_markers
        # The custom logits processors' validate_params (none: none configured, and then
        # a request's extra_args have no reader).
        self.param_checks = list(param_checks)
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.max_logprobs = max_logprobs  # EngineConfig.max_logprobs; -1: the vocabulary
        # The request's eos_token_id is the tokenizer's EOS, as vLLM's (else the model's
        # first): it ends a sequence with stop_reason None. The model's other EOS ids
        # (generation_config's list: Llama 3's <|end_of_text|> beside the instruct
        # tokenizer's <|eot_id|>, the demo's chat end token) stop generation like
        # stop_token_ids do, and report themselves as the stop_reason.
        tok_eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(tok_eos, int):
            self.eos_token_id: int | None = tok_eos
        else:
            self.eos_token_id = eos_token_ids[0] if eos_token_ids else None
        self.extra_eos_ids = [t for t in eos_token_ids if t != self.eos_token_id]

    # -- prompts --------------------------------------------------------------------------

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """Apply the chat template (:func:`actorllm.core.chat_template.render_chat`, the
        renderer the HTTP server uses too); returns the prompt text. ``LLM.chat`` passes
        ``continue_final_message``, ``chat_template`` and ``documents`` inside
        ``chat_template_kwargs``: they are taken out here and given by name."""
        return render_chat_options(
            self.tokenizer,
            messages,
            add_generation_prompt=add_generation_prompt,
            chat_template_kwargs=chat_template_kwargs,
            tools=tools,
        )

    def tokenize(
        self, prompt: PromptType, *, add_special_tokens: bool = True
    ) -> tuple[str | None, list[int]]:
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)
            return prompt, list(ids)
        if isinstance(prompt, Mapping):
            if "prompt_token_ids" in prompt:
                ids = prompt["prompt_token_ids"]
                if (
                    not isinstance(ids, Sequence)
                    or isinstance(ids, str)
                    or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids)
                ):
                    raise InvalidRequestError(
                        "prompt_token_ids must be a list of integers.", param="prompt"
                    )
                return prompt.get("prompt"), list(ids)
            if "prompt" in prompt and isinstance(prompt["prompt"], str):
                return self.tokenize(prompt["prompt"], add_special_tokens=add_special_tokens)
        raise InvalidRequestError(
            "prompt must be a string or {'prompt_token_ids': [...]}.", param="prompt"
        )

    # -- the whole request ----------------------------------------------------------------

    def process(
        self,
        request_id: str,
        prompt: PromptType | Sequence[Mapping[str, Any]],
        params: SamplingParams,
        *,
        is_chat: bool = False,
        chat_options: Mapping[str, Any] | None = None,
    ) -> ProcessedRequest:
        embeds = prompt.get("prompt_embeds") if isinstance(prompt, Mapping) else None
        if embeds is not None:
            return self._process_embeds(request_id, prompt, embeds, params)  # type: ignore[arg-type]
        prompt_text, ids = self.render(prompt, params, is_chat=is_chat, chat_options=chat_options)
        return self._processed(request_id, prompt, prompt_text, ids, params)

    def render(
        self,
        prompt: PromptType | Sequence[Mapping[str, Any]],
        params: SamplingParams,
        *,
        is_chat: bool = False,
        chat_options: Mapping[str, Any] | None = None,
    ) -> tuple[str | None, list[int]]:
        """A prompt without embeddings as the engine runs it: its text (None once cut) and
        token ids, the chat template applied and ``truncate_prompt_tokens`` cut. Raises
        ``InvalidRequestError`` for a prompt it cannot read; :meth:`validate` checks the
        rest."""
        if isinstance(prompt, Mapping) and "prompt_is_token_ids" in prompt:
            raise InvalidRequestError(
                "prompt_is_token_ids marks the token positions of a prompt_embeds prompt; "
                "this prompt has no prompt_embeds.",
                param="prompt_is_token_ids",
            )
        if is_chat:
            assert isinstance(prompt, Sequence)
            text = self.render_chat(prompt, **dict(chat_options or {}))  # type: ignore[arg-type]
            # The template already holds the special tokens it wants.
            prompt_text, ids = self.tokenize(text, add_special_tokens=False)
        else:
            prompt_text, ids = self.tokenize(prompt)  # type: ignore[arg-type]
        if params.pooling_params is not None:  # vLLM refuses a cut longer than the context
            check_pooling_truncation(params.truncate_prompt_tokens, self.max_model_len)
        if params.pooling_params is not None and params.truncate_prompt_tokens == -1:
            kept = ids[-self.max_model_len :]  # no output token to leave room for
        else:
            kept = params.truncate_prompt(ids, self.max_model_len)
        if len(kept) != len(ids):  # the text no longer matches the ids: decode them if needed
            return None, kept
        return prompt_text, ids

    def _processed(
        self,
        request_id: str,
        prompt: Any,
        prompt_text: str | None,
        ids: list[int],
        params: SamplingParams,
        embeds: PromptEmbeds | None = None,
    ) -> ProcessedRequest:
        self.validate(ids, params)
        return ProcessedRequest(
            prompt_text=prompt_text,
            prompt_token_ids=ids,
            eos_token_id=self.eos_token_id,
            children=self.fan_out(request_id, params),
            cache_salt=cache_salt_of(prompt),
            prompt_embeds=embeds,
        )

    def _process_embeds(
        self, request_id: str, prompt: Mapping[str, Any], embeds: Any, params: SamplingParams
    ) -> ProcessedRequest:
        """A prompt of embeddings (checked and converted by the engine, which refuses it
        unless ``enable_prompt_embeds``): no text, placeholder ids, no prompt logprobs."""
        if not isinstance(embeds, PromptEmbeds):
            raise InvalidRequestError(
                "prompt_embeds must be a torch.Tensor of shape (seq_len, hidden_size).",
                param="prompt_embeds",
            )
        if params.prompt_logprobs is not None:
            raise InvalidRequestError(
                "prompt_logprobs is not compatible with prompt embeds.", param="prompt_logprobs"
            )
        if params.pooling_params is not None:
            raise InvalidRequestError(
                "prompt_embeds are for generation; pooling takes text or token ids.",
                param="prompt_embeds",
            )
        if params.truncate_prompt_tokens is not None:
            raise InvalidRequestError(
                "truncate_prompt_tokens is not supported with prompt_embeds.",
                param="truncate_prompt_tokens",
            )
        text = prompt.get("prompt")  # vLLM's EmbedsPrompt may carry its text, for outputs
        return self._processed(
            request_id,
            prompt,
            text if isinstance(text, str) else None,
            embeds.placeholder_ids(),
            params,
            embeds,
        )

    def validate(self, ids: list[int], params: SamplingParams) -> None:
        if not ids:
            raise EmptyPromptError("the prompt must not be empty.", param="prompt")
        if params.pooling_params is not None:
            if len(ids) > self.max_model_len:  # vLLM's message for pooling inputs
                raise RequestTooLongError(
                    f"This model's maximum context length is {self.max_model_len} tokens. "
                    f"However, you requested {len(ids)} tokens in the input for embedding "
                    "generation. Please reduce the length of the input.",
                    param="input",
                )
        elif len(ids) >= self.max_model_len:
            raise RequestTooLongError(
                f"the prompt is {len(ids)} tokens long, but this model's maximum context length "
                f"is {self.max_model_len} tokens (the prompt must be shorter, to leave room for "
                "at least one output token).",
                param="prompt",
            )
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidRequestError(
                f"token ids {bad[:5]} are out of vocabulary (size {self.vocab_size}).",
                param="prompt",
            )
        if not 0 <= params.routed_experts_prompt_start <= len(ids):  # vLLM's words
            raise InvalidRequestError(
                "routed_experts_prompt_start must be between 0 and the prompt length "
                f"({len(ids)}), inclusive.",
                param="routed_experts_prompt_start",
            )
        try:
            params.verify_vocab(self.vocab_size)
            params.verify_logprobs(self.max_logprobs, self.vocab_size)
        except SamplingParamsError as exc:
            raise InvalidRequestError(str(exc), param=exc.param) from exc
        if self.return_sampling_mask:
            self._check_sampling_replay(params)
        if params.thinking_token_budget is not None and self.thinking_markers is None:
            raise InvalidRequestError(  # vLLM's words
                "thinking_token_budget is set but reasoning_config is not configured. Please "
                "set --reasoning-parser and/or --reasoning-config to use thinking_token_budget.",
                param="thinking_token_budget",
            )
        if params.extra_args and not self.param_checks:
            raise InvalidRequestError(
                "extra_args (vllm_xargs over HTTP) are arguments for custom logits "
                "processors, and none is configured (--logits-processors).",
                param="extra_args",
            )
        for check in self.param_checks:
            try:
                check(params)
            except ValueError as exc:  # the processor's own words (vLLM: a 400)
                raise InvalidRequestError(str(exc), param="extra_args") from exc

    @staticmethod
    def _check_sampling_replay(params: SamplingParams) -> None:
        """vLLM's per-request rules under --return-sampling-mask, in its words: a random
        draw (greedy has no distribution to replay) with top-k bounding each mask."""
        if params.is_greedy:
            raise InvalidRequestError(
                "sampling distribution replay requires temperature > 0", param="temperature"
            )
        if params.top_k <= 0:
            raise InvalidRequestError(
                "sampling distribution replay requires top_k > 0 to bound sampling mask "
                "size, reduce transfer overhead, and avoid potential OOMs",
                param="top_k",
            )

    def fan_out(self, request_id: str, params: SamplingParams) -> list[ChildRequest]:
        """One child per sample, with the output processor's ids and seeds (seed + index)."""
        base = self._internal_params(params)
        return [
            ChildRequest(child_id, index, child_params)
            for index, (child_id, child_params) in enumerate(fan_out(request_id, base))
        ]

    def _internal_params(self, params: SamplingParams) -> SamplingParams:
        # logprobs=-1 is the vocabulary size from here on: the sampler takes a top-k.
        params = params.verify_logprobs(self.max_logprobs, self.vocab_size)
        changes: dict[str, Any] = {}
        if params.bad_words:
            # Beside any sequences the server banned already (gpt-oss's tool_choice
            # "required"); an id list already present is not added twice, so a request
            # processed again (a replay) gets the same list.
            banned = list(params.bad_words_token_ids or [])
            ids = self._bad_words_ids(params.bad_words, banned)
            if ids != params.bad_words_token_ids:
                changes["bad_words_token_ids"] = ids
        if params.thinking_token_budget is not None and self.thinking_markers is not None:
            changes["thinking_markers"] = self.thinking_markers
        watermarking = resolve_watermarking(self.watermark, params)
        if params.pooling_params is None and watermarking != params.watermarking:
            changes["watermarking"] = watermarking  # the request's own copy: resolved
        if self.extra_eos_ids and not params.ignore_eos:
            stop_ids = list(params.stop_token_ids or [])
            changes["stop_token_ids"] = stop_ids + [
                t for t in self.extra_eos_ids if t not in stop_ids
            ]
        return params.clone(**changes) if changes else params

    def _bad_words_ids(self, words: list[str], out: list[list[int]]) -> list[list[int]]:
        """``out`` and each word tokenized with and without a leading space (as vLLM
        does), each id list once."""
        for word in words:
            for variant in (word, " " + word.lstrip()):
                ids = list(self.tokenizer.encode(variant, add_special_tokens=False))
                if ids and ids not in out:
                    out.append(ids)
        return out


def cache_salt_of(prompt: Any) -> str | None:
    """The ``cache_salt`` of a prompt mapping (``{"prompt": ..., "cache_salt": "tenant-a"}``,
    vLLM's form); a non-empty string or absent."""
    if not isinstance(prompt, Mapping) or prompt.get("cache_salt") is None:
        return None
    salt = prompt["cache_salt"]
    if not isinstance(salt, str) or not salt:
        raise InvalidRequestError("cache_salt must be a non-empty string.", param="cache_salt")
    return salt
