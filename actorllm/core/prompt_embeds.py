"""A prompt given as embeddings instead of token ids (vLLM's ``EmbedsPrompt``).

The tensor is opaque here (``core/`` imports no torch): the engine checks and converts it
(``engine/api/prompt_embeds.py``) and the worker feeds its rows to the model in place of the
token embeddings. What the core needs is the length and, for the prefix cache, an identity
per position: ``hash_ids`` holds one 63-bit digest of each row's bytes, hashed where token
ids would be (under a salt that keeps them apart from token prompts), so two requests share
cached blocks exactly where their embeddings agree.

>>> pe = PromptEmbeds(tensor=None, hash_ids=(5, 9))
>>> pe.placeholder_ids()
[0, 0]
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
    hash_ids: tuple[int, ...]  # [T]: a digest of each row, for the prefix-cache hashes

    def placeholder_ids(self) -> list[int]:
        """The token ids the request carries for its embedding positions (vLLM keeps 0s
        too): lengths and penalties read them; the model reads the rows instead."""
        return [0] * len(self.hash_ids)
