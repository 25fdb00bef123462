"""The engine's checks of a request, made on the caller's thread before it is queued: what
``LLM.enqueue`` / ``enqueue_chat`` and ``LLMEngine.add_request`` raise at once, as vLLM's
do.

vLLM 0.32's ``enqueue`` renders each prompt (chat template, tokenizer, length against
``max_model_len``) and adds it to its engine, whose input processor checks the rest (an
empty prompt, token ids out of vocabulary, logprobs above ``max_logprobs``, ...); the first
failure is a ``VLLMValidationError`` (here: ``InvalidRequestError``) raised by ``enqueue``,
after the requests that call added are aborted (``entrypoints/common/offline.py``,
``_render_and_add_requests``). Here the engine would find the same faults only when it
takes the request up, and it tells no one it accepted one. So each prompt is rendered and
checked here, with the engine's own :class:`~actorllm.core.input_processor.InputProcessor`,
before any of the call's prompts is queued: a failed call queues nothing (no request, no
KV block) and raises the first fault. A checked prompt goes to the engine as token ids with
its text (the engine checks it again, without tokenizing it again).

vLLM numbers a request (its ``request_id`` from the ``LLM``'s counter) once rendered, before
its engine checks it: :class:`Rejected` says whether the failed prompt took a number.

    inputs = engine_inputs(engine)
    checked_prompt(inputs, {"prompt_token_ids": [1, 2, 3]}, SamplingParams())
    # {'prompt_token_ids': [1, 2, 3]}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from actorllm.core.errors import InvalidRequestError, RequestTooLongError
from actorllm.core.input_processor import InputProcessor, cache_salt_of
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine.actors.assembly import logits_processor_checks
from actorllm.engine.api.chat_embeds import has_embeds_parts
from actorllm.engine.config.reasoning_config import thinking_markers

if TYPE_CHECKING:
    from actorllm.engine.api.async_engine import AsyncEngine


class Rejected(Exception):
    """A prompt the engine would refuse: ``error`` (to raise), and whether vLLM would have
    numbered the request first (``numbered``: its engine's checks refused it; False: its
    rendering did, which includes the length check)."""

    def __init__(self, error: InvalidRequestError, *, numbered: bool) -> None:
        super().__init__(str(error))
        self.error = error
        self.numbered = numbered


def engine_inputs(engine: AsyncEngine) -> InputProcessor:
    """An input processor making ``engine``'s checks (its custom logits processors' too:
    they judge ``extra_args``), for the caller's thread."""
    return InputProcessor(
        engine.tokenizer,
        vocab_size=engine.vocab_size,
        max_model_len=engine.max_model_len,
        max_logprobs=engine.config.max_logprobs,
        param_checks=logits_processor_checks(engine.config),
        thinking_markers=thinking_markers(
            engine.config.reasoning_config, engine.config.reasoning_parser, engine.tokenizer
        ),
        watermark=engine.config.watermarking(),
    )


def checked_prompt(
    inputs: InputProcessor,
    prompt: Any,
    params: SamplingParams,
    chat: Mapping[str, Any] | None = None,
    embeds_spec: tuple[int, Any] | None = None,
) -> Any:
    """``prompt`` (a conversation with ``chat``: ``AsyncEngine.chat``'s keywords) as the
    engine will run it, ``{"prompt_token_ids": [...], "prompt": text}`` (and its
    ``cache_salt``), checked as the engine checks it; raises :class:`Rejected`. A prompt
    of embeddings (or a conversation holding some; ``embeds_spec``: the engine's
    ``prompt_embeds_spec``) is returned as it is: the engine converts and checks those."""
    if chat is None and isinstance(prompt, Mapping) and "prompt_embeds" in prompt:
        return prompt
    if chat is not None and has_embeds_parts(prompt, embeds_spec):
        return prompt
    try:
        text, ids = inputs.render(prompt, params, is_chat=chat is not None, chat_options=chat)
    except InvalidRequestError as exc:
        raise Rejected(exc, numbered=False) from None
    try:
        inputs.validate(ids, params)
        salt = cache_salt_of(prompt)
    except RequestTooLongError as exc:  # vLLM's renderer checks the length
        raise Rejected(exc, numbered=False) from None
    except InvalidRequestError as exc:
        raise Rejected(exc, numbered=True) from None
    tokens: dict[str, Any] = {"prompt_token_ids": ids}
    if text is not None:
        tokens["prompt"] = text
    if salt is not None:
        tokens["cache_salt"] = salt
    return tokens
