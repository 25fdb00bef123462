"""``/v1/completions``: the request, its prompt forms, and the response (one struct whether
streamed or not, as OpenAI's)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from actorllm.entrypoints.openai.protocol.bounds import (
    MaxTokens,
    NonEmptyStr,
    NumLogprobs,
    TokenId,
)
from actorllm.entrypoints.openai.protocol.logprobs import CompletionLogProbs, PromptLogprobsOut
from actorllm.entrypoints.openai.protocol.sampling_fields import SamplingFields
from actorllm.entrypoints.openai.protocol.usage import UsageInfo

# A prompt: text, token ids, or a batch of either (msgspec allows one array type per union,
# so the batch forms share one list type and are sorted out by `prompt_batch`; the OpenAPI
# document states the four real forms).
PromptBatch = Annotated[list[NonEmptyStr | TokenId | list[TokenId]], msgspec.Meta(min_length=1)]
PromptInput = NonEmptyStr | PromptBatch


class CompletionRequest(SamplingFields, kw_only=True):
    prompt: PromptInput | None = None  # request_rules: this or prompt_embeds
    # vLLM's: base64 of torch.save(tensor [T, H]), or a list of them (one prompt each, run
    # before the text prompts), with --enable-prompt-embeds.
    prompt_embeds: str | list[str] | None = None
    max_tokens: MaxTokens | None = 16
    # A JSON boolean is 0 / 1, as vLLM's pydantic model reads it (false: the sampled
    # token's logprob alone).
    logprobs: NumLogprobs | bool | None = None
    echo: bool = False
    add_special_tokens: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.logprobs, bool):
            self.logprobs = int(self.logprobs)


def prompt_batch(prompt: PromptInput) -> list[str | list[int]]:
    """Split a completion ``prompt`` into its prompts: text or token ids, one per entry.

    Raises ``ValueError`` on a mixed or empty batch (the caller maps it to a 400).

        >>> prompt_batch([1, 2, 3])
        [[1, 2, 3]]
        >>> prompt_batch(["a", "b"])
        ['a', 'b']
    """
    if isinstance(prompt, str):
        return [prompt]
    if not prompt:
        raise ValueError("prompt must not be empty.")
    if all(isinstance(p, int) for p in prompt):
        return [[p for p in prompt if isinstance(p, int)]]
    if all(isinstance(p, str) for p in prompt):
        return [p for p in prompt if isinstance(p, str)]
    if all(isinstance(p, list) for p in prompt):
        batch = [p for p in prompt if isinstance(p, list)]
        if any(not p for p in batch):
            raise ValueError("prompt must not contain empty token lists.")
        return list(batch)
    raise ValueError(
        "prompt must be a string, a list of strings, a list of token ids or a list of such lists."
    )


class CompletionChoice(msgspec.Struct, kw_only=True):
    index: int
    text: str
    logprobs: CompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    prompt_logprobs: PromptLogprobsOut | None = None
    # return_token_ids (vLLM): the prompt's ids (first chunk) and the sampled ones.
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    # --enable-return-routed-experts: base64 of the np.save'd [tokens, layers, top_k] ids.
    routed_experts: str | None = None


class CompletionResponse(msgspec.Struct, kw_only=True):
    id: str
    object: str = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: UsageInfo | None = None
    system_fingerprint: str | None = None
