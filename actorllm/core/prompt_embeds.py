"""A prompt given as embeddings instead of token ids (vLLM's ``EmbedsPrompt``).

The tensor is opaque here (``core/`` imports no torch): the engine checks and converts it
(``engine/api/prompt_embeds.py``) and the worker feeds its rows to the model in place of the
token embeddings. What the core needs is the length and, for the prefix cache, an identity
per position: ``hash_ids`` holds one 63-bit digest of each row's bytes, hashed where token
ids would be (under a salt that keeps them apart from token prompts), so two requests share
cached blocks exactly where their embeddings agree.

A *mixed* prompt (vLLM's ``prompt_token_ids`` with ``prompt_is_token_ids``: a chat whose
messages hold ``prompt_embeds`` content parts) also carries the token ids, and ``is_token``
says which positions take the token's own embedding (their hash slot is the token id); the
tensor's rows at those positions are unused.

>>> pe = PromptEmbeds(tensor=None, hash_ids=(5, 9))
>>> pe.placeholder_ids(), pe.embedded_positions()
([0, 0], None)
>>> mixed = PromptEmbeds(tensor=None, hash_ids=(7, 5), token_ids=(7, 0), is_token=(True, False))
>>> mixed.placeholder_ids(), mixed.embedded_positions()
([7, 0], (False, True))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The first block's extra hash key for embedding prompts: their row digests never meet a
# token prompt's ids in one hash.
EMBEDS_SALT = "\x00prompt_embeds"


@dataclass(frozen=True, eq=False)
class PromptEmbeds:
    tensor: Any  # torch.Tensor [T, H] in the model's dtype, on the CPU, contiguous
    hash_ids: tuple[int, ...]  # [T]: a digest of each row (a token's id), for prefix hashes
    token_ids: tuple[int, ...] | None = None  # [T], mixed prompts only
    is_token: tuple[bool, ...] | None = None  # [T], mixed prompts only: True = a token

    def placeholder_ids(self) -> list[int]:
        """The token ids the request carries (vLLM keeps 0s at embedding positions too):
        lengths and penalties read them; the model reads the rows at embedding positions."""
        if self.token_ids is not None:
            return list(self.token_ids)
        return [0] * len(self.hash_ids)

    def embedded_positions(self) -> tuple[bool, ...] | None:
        """[T]: which positions the model reads from the tensor; None: all of them."""
        if self.is_token is None:
            return None
        return tuple(not t for t in self.is_token)
