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
# Where a chat's ``prompt_embeds`` content part stands in the rendered template (vLLM's
# PROMPT_EMBEDS_PLACEHOLDER_TOKEN); reserved in text content while the flag is on.
CHAT_PLACEHOLDER = "<prompt_embeds>"
_MAX_REASON = 200  # how much of torch's own message (built from the caller's bytes) is kept


def has_prompt_embeds(prompt: Any) -> bool:
    return isinstance(prompt, Mapping) and prompt.get("prompt_embeds") is not None


def prompt_embeds_of(prompt: Mapping[str, Any], spec: tuple[int, Any] | None) -> PromptEmbeds:
    """An ``EmbedsPrompt`` mapping's embeddings, with its mixed-mode keys: vLLM's
    ``prompt_token_ids`` and ``prompt_is_token_ids`` (True where the token's own embedding
    is used, False where the tensor's row is)."""
    return to_prompt_embeds(
        prompt["prompt_embeds"],
        spec,
        token_ids=prompt.get("prompt_token_ids"),
        is_token_ids=prompt.get("prompt_is_token_ids"),
    )


def to_prompt_embeds(
    value: Any,
    spec: tuple[int, Any] | None,
    *,
    token_ids: Any = None,
    is_token_ids: Any = None,
) -> PromptEmbeds:
    """``value`` checked against the model's ``spec`` (hidden size, dtype; None: the engine
    runs without enable_prompt_embeds) and converted; ``token_ids`` and ``is_token_ids``
    (both [T]) make it a mixed prompt."""
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
    if token_ids is None and is_token_ids is None:
        return PromptEmbeds(tensor=tensor, hash_ids=_row_digests(tensor))
    return _mixed(tensor, token_ids, is_token_ids)


def _mixed(tensor: torch.Tensor, token_ids: Any, is_token_ids: Any) -> PromptEmbeds:
    """A mixed prompt: the tokens at ``is_token_ids`` positions, the rows elsewhere. Their
    hash slots are the token ids and the rows' digests."""
    length = int(tensor.shape[0])
    if token_ids is None:
        raise InvalidRequestError(
            "prompt_is_token_ids needs prompt_token_ids (the ids of the token positions).",
            param="prompt_token_ids",
        )
    ids = _int_list(token_ids, "prompt_token_ids")
    if len(ids) != length:
        raise InvalidRequestError(
            "prompt_token_ids must have the same length as prompt_embeds "
            f"(expected {length}, got {len(ids)}).",
            param="prompt_token_ids",
        )
    if is_token_ids is None:
        is_token = (False,) * length  # every position from the tensor (vLLM's default)
    else:
        if not isinstance(is_token_ids, (list, tuple)) or not all(
            isinstance(t, bool) for t in is_token_ids
        ):
            raise InvalidRequestError(
                "prompt_is_token_ids must be a list of booleans.", param="prompt_is_token_ids"
            )
        is_token = tuple(is_token_ids)
        if len(is_token) != length:
            raise InvalidRequestError(
                "prompt_is_token_ids must have the same length as prompt_embeds "
                f"(expected {length}, got {len(is_token)}).",
                param="prompt_is_token_ids",
            )
    embedded = [i for i, t in enumerate(is_token) if not t]
    digests = iter(_row_digests(tensor[embedded]) if embedded else ())
    hashes = tuple(ids[i] if t else next(digests) for i, t in enumerate(is_token))
    return PromptEmbeds(tensor=tensor, hash_ids=hashes, token_ids=tuple(ids), is_token=is_token)


def _int_list(value: Any, param: str) -> list[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise InvalidRequestError(f"{param} must be a list of integers.", param=param)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise InvalidRequestError(f"{param} must be a list of integers.", param=param)
    return list(value)


def splice_prompt_embeds(segments: list[list[int]], parts: list[PromptEmbeds]) -> PromptEmbeds:
    """A chat prompt with ``prompt_embeds`` content parts: the template's token ids cut at
    each part (``len(segments) == len(parts) + 1``) with each part's rows spliced in."""
    import torch

    assert len(segments) == len(parts) + 1 and parts
    hidden, dtype = parts[0].tensor.shape[1], parts[0].tensor.dtype
    rows: list[torch.Tensor] = []
    ids: list[int] = []
    is_token: list[bool] = []
    hashes: list[int] = []
    for i, segment in enumerate(segments):
        ids += segment
        is_token += [True] * len(segment)
        hashes += segment
        rows.append(torch.zeros(len(segment), hidden, dtype=dtype))  # unused rows
        if i < len(parts):
            part = parts[i]
            n = len(part.hash_ids)
            ids += [0] * n
            is_token += [False] * n
            hashes += part.hash_ids
            rows.append(part.tensor)
    return PromptEmbeds(
        tensor=torch.cat(rows),  # [T, H]
        hash_ids=tuple(hashes),
        token_ids=tuple(ids),
        is_token=tuple(is_token),
    )


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
