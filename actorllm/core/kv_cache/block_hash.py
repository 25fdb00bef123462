"""Chained block hashes: the keys of the prefix cache.

A full block's hash covers its parent's hash, its own token ids and extra keys, so equal
hashes mean equal *prefixes*, not just equal blocks:

    hash(block i) = H(hash(block i-1) ‖ int64 token ids of block i ‖ extra keys)

The root parent is ``NONE_HASH`` (all zero bytes). The only extra key today is the request's
``cache_salt``, mixed into the first block: every later block inherits it through the chain,
so two tenants with different salts never share a block.

Collision stance: the engine hashes with ``sha256`` unless told otherwise (vLLM's default,
``--prefix-caching-hash-algo``): collision resistant, also against a deliberate attacker who
controls prompts. ``xxh3_128`` (vLLM's ``xxhash``; this module's own default) is faster and
non-cryptographic: with 128 bits an *accidental* collision among n cached blocks has
probability about n²/2¹²⁹ — nil for any pool that fits in memory — but crafted prompts can
collide, so a deployment that chooses it for mutually untrusted tenants should give each a
``cache_salt`` (crafted prompts then cannot reach another tenant's blocks).

Only full blocks are hashed: a partial block's contents are still changing.

    >>> h = BlockHasher(block_size=2)
    >>> hashes: list[BlockHash] = []
    >>> h.extend(hashes, [1, 2, 3, 4, 5], cache_salt=None)
    >>> len(hashes)  # the fifth token is in a partial block
    2
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Callable, Sequence
from typing import Literal

import xxhash

# A block hash is the raw digest: bytes cache their own hash, so dict lookups stay cheap.
BlockHash = bytes
HashAlgo = Literal["xxh3_128", "sha256"]

_DIGESTS: dict[str, tuple[Callable[[bytes], bytes], int]] = {
    "xxh3_128": (xxhash.xxh3_128_digest, 16),
    "sha256": (lambda data: hashlib.sha256(data).digest(), 32),
}


class BlockHasher:
    """Computes chained hashes of full blocks for one block size and algorithm."""

    __slots__ = ("_digest", "block_size", "none_hash")

    def __init__(self, block_size: int, algo: HashAlgo = "xxh3_128") -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}.")
        if algo not in _DIGESTS:
            raise ValueError(f"unknown hash algorithm {algo!r}; choose one of {sorted(_DIGESTS)}.")
        self._digest, size = _DIGESTS[algo]
        self.block_size = block_size
        # The parent of the first block: a fixed value, so hashes are stable across runs.
        self.none_hash: BlockHash = bytes(size)

    def hash_block(
        self, parent: BlockHash | None, token_ids: Sequence[int], extra: str | None = None
    ) -> BlockHash:
        """Hash of one block given its parent's hash (None for the first block)."""
        data = (parent or self.none_hash) + array("q", token_ids).tobytes()
        if extra is not None:
            # After a fixed-length body, so the encoding stays unambiguous.
            data += b"\x00salt:" + extra.encode()
        return self._digest(data)

    def extend(
        self, block_hashes: list[BlockHash], token_ids: Sequence[int], cache_salt: str | None
    ) -> None:
        """Append the hashes of the full blocks of ``token_ids`` not yet in ``block_hashes``.

        Incremental: only blocks that became full since the last call are hashed.
        """
        bs = self.block_size
        n_full = len(token_ids) // bs
        parent = block_hashes[-1] if block_hashes else None
        for i in range(len(block_hashes), n_full):
            parent = self.hash_block(
                parent, token_ids[i * bs : (i + 1) * bs], cache_salt if i == 0 else None
            )
            block_hashes.append(parent)
