"""Embedding prompts in: checked, cast to the model's dtype and fingerprinted per row.

``{"prompt_embeds": tensor}`` (vLLM's ``EmbedsPrompt``) reaches ``generate`` as a torch
tensor of shape (seq_len, hidden_size), or (1, seq_len, hidden_size); over HTTP a completion
sends each as base64 of ``torch.save`` bytes (:func:`decode_prompt_embeds`, loaded with
``weights_only=True``: a tensor file, never code). Every error names ``prompt_embeds`` with
vLLM's wording. The result is a :class:`~actorllm.core.prompt_embeds.PromptEmbeds`: the
tensor, contiguous on the CPU, plus one digest per row for the prefix-cache hashes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from actorllm.core.errors import InvalidRequestError
from actorllm.core.prompt_embeds import PromptEmbeds

if TYPE_CHECKING:
    import torch

ENABLE_HINT = "You must set `--enable-prompt-embeds` to input `prompt_embeds`."
_MAX_REASON = 200  # how much of torch's own message (built from the caller's bytes) is kept


def has_prompt_embeds(prompt: Any) -> bool:
    return isinstance(prompt, Mapping) and prompt.get("prompt_embeds") is not None


def to_prompt_embeds(value: Any, spec: tuple[int, Any] | None) -> PromptEmbeds:
    """``value`` checked against the model's ``spec`` (hidden size, dtype; None: the engine
    runs without enable_prompt_embeds) and converted."""
    if spec is None:
        raise InvalidRequestError(ENABLE_HINT, param="prompt_embeds")
    if isinstance(value, PromptEmbeds):
        return value
    import torch  # here: `import actorllm` stays free of torch

    if not isinstance(value, torch.Tensor):
        raise InvalidRequestError(
            f"prompt_embeds must be a torch.Tensor, got {type(value).__name__}.",
            param="prompt_embeds",
        )
    hidden, dtype = spec
    tensor = value.detach()
    if tensor.layout != torch.strided:
        tensor = tensor.to_dense()
    if tensor.dim() == 3 and tensor.shape[0] == 1:
        tensor = tensor.squeeze(0)
    if tensor.dim() != 2:
        raise InvalidRequestError(
            "`prompt_embeds` must be a 2D tensor of shape (num_tokens, hidden_size); got "
            f"shape {tuple(tensor.shape)}.",
            param="prompt_embeds",
        )
    if tensor.shape[1] != hidden:
        raise InvalidRequestError(
            f"`prompt_embeds` hidden_size {tensor.shape[1]} does not match the model's "
            f"hidden_size {hidden}.",
            param="prompt_embeds",
        )
    if tensor.shape[0] == 0:
        raise InvalidRequestError(
            "Either prompt or prompt_embeds must be provided and non-empty.",
            param="prompt_embeds",
        )
    if tensor.dtype != dtype:
        if not tensor.is_floating_point():
            raise InvalidRequestError(
                f"`prompt_embeds` dtype {tensor.dtype} is not a floating-point type, cannot "
                f"safely cast to the model's dtype {dtype}.",
                param="prompt_embeds",
            )
        tensor = tensor.to(dtype)
    if not torch.isfinite(tensor).all():
        raise InvalidRequestError(
            "`prompt_embeds` holds NaN or infinite values.", param="prompt_embeds"
        )
    tensor = tensor.cpu().contiguous()  # [T, H]
    return PromptEmbeds(tensor=tensor, hash_ids=_row_digests(tensor))


def decode_prompt_embeds(data: str | bytes, spec: tuple[int, Any] | None) -> PromptEmbeds:
    """A completion's ``prompt_embeds`` item: base64 of ``torch.save(tensor)``."""
    if spec is None:
        raise InvalidRequestError(ENABLE_HINT, param="prompt_embeds")
    try:
        payload = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequestError(
            f"`prompt_embeds` is not valid base64: {exc}", param="prompt_embeds"
        ) from None
    import torch

    try:
        tensor = torch.load(io.BytesIO(payload), weights_only=True, map_location="cpu")
    except MemoryError:
        raise
    except Exception as exc:  # torch has no one error type for "not a tensor file"
        reason = (str(exc).strip() or type(exc).__name__)[:_MAX_REASON]
        raise InvalidRequestError(
            f"`prompt_embeds` could not be deserialized as a torch tensor: {reason}",
            param="prompt_embeds",
        ) from None
    return to_prompt_embeds(tensor, spec)


def _row_digests(tensor: torch.Tensor) -> tuple[int, ...]:
    """One 63-bit digest of each row's bytes: [T, H] -> T ints (the hashes' token slots)."""
    import torch

    raw = tensor.view(torch.uint8).numpy()  # [T, H * itemsize], shares the memory
    return tuple(
        int.from_bytes(hashlib.blake2b(row.tobytes(), digest_size=8).digest(), "little") >> 1
        for row in raw
    )
