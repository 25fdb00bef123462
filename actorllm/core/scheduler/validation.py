"""Whether a request may enter the scheduler: the checks of ``Scheduler.add_request``.

Errors a caller can cause are :class:`InvalidRequestError` subtypes (HTTP 400); a request
in a status other than WAITING is a bug in the engine (``ValueError``).
"""

from __future__ import annotations

from collections.abc import Container

from actorllm.core.errors import (
    DuplicateRequestError,
    EmptyPromptError,
    InvalidRequestError,
    RequestTooLongError,
)
from actorllm.core.request import Request, RequestStatus
from actorllm.core.scheduler.config import SchedulerConfig


def check_request(
    request: Request, config: SchedulerConfig, known: Container[str], structured_outputs: bool
) -> None:
    """Raise if ``request`` may not be added to a scheduler with ``config`` whose open
    request ids are ``known`` (``structured_outputs``: it has a grammar tracker); the first
    check that fails decides the error."""
    rid = request.request_id
    if rid in known:
        raise DuplicateRequestError(f"request id {rid!r} is already in use.", param="request_id")
    if request.num_prompt_tokens == 0:
        raise EmptyPromptError("the prompt must contain at least one token.", param="prompt")
    max_len = config.max_model_len
    if request.pooling is not None and request.num_tokens > max_len:
        raise RequestTooLongError(
            f"the prompt has {request.num_tokens} tokens; this model's maximum context "
            f"length is {max_len} tokens.",
            param="prompt",
        )
    if request.pooling is None and request.num_tokens >= max_len:
        raise RequestTooLongError(
            f"the request has {request.num_tokens} tokens ({request.num_prompt_tokens} in the "
            f"prompt); this model's maximum context length is {max_len} tokens, including at "
            "least one token to generate.",
            param="prompt",
        )
    if request.max_tokens is not None and request.num_output_tokens >= request.max_tokens:
        raise InvalidRequestError(
            f"the request already has {request.num_output_tokens} outputs, max_tokens is "
            f"{request.max_tokens}.",
            param="max_tokens",
        )
    if request.lora_request is not None and not config.max_loras:
        raise InvalidRequestError(
            f"LoRA adapter {request.lora_request.lora_name!r} requested, but LoRA is not "
            "enabled in this engine (start it with enable_lora).",
            param="lora_request",
        )
    if request.status is not RequestStatus.WAITING:
        raise ValueError(f"request {rid!r} is {request.status.name}, not WAITING.")
    if request.use_structured_output and not structured_outputs:
        raise InvalidRequestError(
            "structured outputs are not available in this engine.", param="structured_outputs"
        )
