"""The paged KV cache's bookkeeping: blocks, prefix-cache hashes, allocation (no tensors)."""

from actorllm.core.kv_cache.block_hash import BlockHash, BlockHasher, HashAlgo
from actorllm.core.kv_cache.block_pool import BlockPool, EvictionCallback
from actorllm.core.kv_cache.free_queue import FreeBlockQueue, KVCacheBlock
from actorllm.core.kv_cache.kv_cache_manager import KVCacheManager

__all__ = [
    "BlockHash",
    "BlockHasher",
    "BlockPool",
    "EvictionCallback",
    "FreeBlockQueue",
    "HashAlgo",
    "KVCacheBlock",
    "KVCacheManager",
]
